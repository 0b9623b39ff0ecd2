"""The job's project/account, and the variables a site provides to its job scripts.

A site file may leave the account out (``scheduler.account_required``) or hold an obvious
placeholder (``PROJ123``, ``m0000``); either is refused when a job is submitted, with the
option to give (``--account``). The account becomes ``$HPCENV_PROJECT`` in the job script,
so site paths such as ``$MEMBERWORK/$HPCENV_PROJECT`` (OLCF) or
``/lus/flare/projects/$HPCENV_PROJECT`` (ALCF) expand on the compute node. Site variables
(``variables:`` in the site file) keep the value the site sets and fall back to the documented
default where it is unset, so ``set -u`` never meets an unbound name.
"""

from __future__ import annotations

from hpcenv.errors import ConfigError
from hpcenv.jobs.schedulers import SCHEDULERS
from hpcenv.jobs.shell import env_name, qpath
from hpcenv.site import Site
from hpcenv.site.words import is_placeholder

PROJECT_VAR = "HPCENV_PROJECT"
# What a dry run shows where the project is not given yet (itself a placeholder, so the same
# script handed to the scheduler as it is would be refused by hpcenv and by the site).
PREVIEW_ACCOUNT = "PROJECT"


def account_for(
    site: Site, given: str | None, *, strict: bool, preview: bool = False
) -> str | None:
    """The account a job is charged to: ``given`` (``--account``), else the site file's.

    ``strict`` (submission): a placeholder, or no account where the site needs one, is a
    ConfigError that names the option to give. ``preview`` (a dry run, nothing is charged):
    those two cases give :data:`PREVIEW_ACCOUNT` instead, and the caller says so
    (:func:`preview_note`); a site file with other placeholders is still refused.
    """
    account = given or site.scheduler.account
    if not strict:
        return None if account and is_placeholder(account) else account
    kind = SCHEDULERS.get(site.scheduler.kind)
    option = kind.account_option if kind else "--account"
    marked = site.provenance.placeholder
    others = sorted(k for k in marked if k != "scheduler.account")
    unset = not account or is_placeholder(account) or "scheduler.account" in marked
    if preview and not given and not others and unset:  # a given placeholder is still refused
        return PREVIEW_ACCOUNT if account or site.scheduler.account_required else None
    if not given and "scheduler.account" in marked:
        raise ConfigError(
            f"site {site.name}'s scheduler.account is marked as a placeholder "
            f"({marked['scheduler.account']}): give your project with {option} ID"
        )
    if others:
        raise ConfigError(
            f"site {site.name} still has placeholders: {', '.join(others)} "
            f"({marked[others[0]]}); set them in the site file (hpcenv sites validate lists them)"
        )
    if account and is_placeholder(account):
        where = "given" if given else f"site {site.name}'s scheduler.account"
        raise ConfigError(
            f"account {account!r} ({where}) is a placeholder: give your project with {option} ID"
        )
    if not account and site.scheduler.account_required:
        raise ConfigError(
            f"site {site.name} needs a project to charge the job to: give {option} ID"
        )
    return account


def preview_note(site: Site) -> str:
    """The dry run's line for a job shown with :data:`PREVIEW_ACCOUNT`."""
    kind = SCHEDULERS.get(site.scheduler.kind)
    option = kind.account_option if kind else "--account"
    return (
        f"dry run: no project given, so the job shows {PREVIEW_ACCOUNT!r} as its account; "
        f"submitting needs {option} ID"
    )


def uses_project(site: Site) -> bool:
    """Whether the site's paths name ``$HPCENV_PROJECT``."""
    texts = [f.path for f in site.filesystems]
    texts += [v.default for v in site.variables.values() if v.default]
    if site.node_local:
        texts.append(site.node_local.path)
    return any(PROJECT_VAR in t for t in texts)


def prelude(site: Site, account: str | None) -> list[tuple[str, str]]:
    """``(NAME, quoted value)`` assignments every job script (and the submit line) starts with."""
    out: list[tuple[str, str]] = []
    if account is not None:
        out.append((PROJECT_VAR, qpath(account)))
    elif uses_project(site):
        out.append(
            (
                PROJECT_VAR,
                f'"${{{PROJECT_VAR}:?site {site.name} paths need a project: '
                f'submit with --account ID}}"',
            )
        )
    for name, var in site.variables.items():
        env_name(name)
        if var.default is None:
            out.append((name, f'"${{{name}:?site {site.name} sets {name} on its nodes}}"'))
            continue
        default = qpath(var.default)
        inner = default[1:-1] if default.startswith('"') else default
        out.append((name, f'"${{{name}:-{inner}}}"'))
    return out
