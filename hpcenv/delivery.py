"""Image delivery: after a build, make what the site's job runs, with the steps its runtime gives.

Each runtime owns its steps (:meth:`hpcenv.jobs.runtimes.base.ContainerRuntime.delivery`; the image a
job names is the last step's target, so no job names an artifact no step makes):

- apptainer / singularity: the SIF goes to ``<scratch>/hpcenv/images/<recipe>-<site>.sif``;
- podman-hpc (NERSC): ``podman-hpc migrate TAG`` squashes the image built by ``podman-hpc build``;
- cscs-ce (Alps): ``enroot import`` of the podman image into a striped folder on scratch;
- shifter, or any site with ``--push REF``: ``podman push TAG REF`` to a registry the site pulls from;
- podman (local): the image is already in the engine's storage.

Here the steps are run: a command step whose site tool or path is not on this host
(``podman-hpc`` off Perlmutter, ``enroot`` off Alps, ``$SCRATCH`` unset) is reported pending with
the exact command to run on the site, never silently skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpcenv.credentials import redact
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.jobs.runtimes.base import DeliveryStep
from hpcenv.jobs.runtimes.registry import runtime_of
from hpcenv.site import Site

_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _holds_credentials(ref: str) -> bool:
    """``user:password@registry/...`` or ``scheme://``: an ``@`` before the first ``/`` that is
    not a digest (``name@sha256:...``)."""
    head, at, tail = ref.partition("@")
    return "://" in ref or bool(at and "/" not in head and not tail.startswith("sha256:"))


def check_ref(ref: str) -> str:
    """A registry reference for ``--push``: lower-case name[:tag], no spaces or shell words,
    no credentials (they would show in ``ps``, the plan and any error: never repeated here)."""
    if _holds_credentials(ref):
        raise ConfigError(
            "--push: a registry reference holds no scheme or user:password@; log in once with "
            "`podman login REGISTRY` (credentials stay in its auth file) and give registry/name:tag"
        )
    if not _REF.match(ref) or ".." in ref:
        raise ConfigError(
            f"--push {redact(ref)!r}: not a registry reference like registry/name:tag"
        )
    return ref


def plan_delivery(
    site: Site, recipe: str, tag: str, fmt: str, push: str | None = None, engine: str = "podman"
) -> list[DeliveryStep]:
    """The steps that end a build for this site (``build --dry-run`` lists them): a push where
    asked, then the runtime's own (a registry runtime's own step is that push)."""
    if push is not None:
        ref = check_ref(push)
        step = DeliveryStep(
            "command", ref, (engine, "push", tag, ref), f"the site pulls {ref}", site_tool=False
        )
        return [step, *runtime_of(site).delivery(site, recipe, tag, fmt, engine, pushed=ref)]
    return runtime_of(site).delivery(site, recipe, tag, fmt, engine)


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def delivery_env(site: Site, account: str | None) -> dict[str, str]:
    """What a site path may name when the build delivers: this host's environment, the
    project (``--account`` -> ``$HPCENV_PROJECT``, as in the job script) and the site's
    documented defaults for its variables where this host does not set them."""
    from hpcenv.jobs.project import PROJECT_VAR

    env = dict(os.environ)
    if account:
        if not _ACCOUNT.match(account) or ".." in account:
            raise ConfigError(
                f"--account {account!r}: a project id (letters, digits, _ . -), it names a folder"
            )
        env[PROJECT_VAR] = account
    for name, var in site.variables.items():
        if name not in env and var.default:
            value = expand(var.default, env)
            if value is not None:
                env[name] = value
    return env


def expand(path: str, env: Mapping[str, str] | None = None) -> str | None:
    """``$VAR``/``${VAR}`` from ``env`` (default: this process's); None when one is unset."""
    values = os.environ if env is None else env
    missing = False

    def one(m: re.Match[str]) -> str:
        nonlocal missing
        name = m.group(1) or m.group(2)
        if name not in values:
            missing = True
            return m.group(0)
        return values[name]

    out = _VAR.sub(one, path)
    return None if missing else out


@dataclass(frozen=True)
class Outcome:
    step: DeliveryStep
    done: bool
    detail: str


def deliver(
    step: DeliveryStep, sif: Path | None = None, env: Mapping[str, str] | None = None
) -> Outcome:
    """Run one step for real where this host can; otherwise say exactly what is left to do.

    ``env`` expands the paths the step names (:func:`delivery_env`); default: this process's
    environment.
    """
    if step.kind in ("in-place", "needs-sif"):
        return Outcome(step, step.kind == "in-place", step.describe())
    if step.kind == "sif-copy":
        if sif is None or not sif.is_file():
            raise ConfigError(f"no SIF to deliver to {step.target}; build with --format sif")
        dest = expand(step.target, env)
        if dest is None:
            return Outcome(
                step,
                False,
                f"pending: {step.target} names a variable unset here (give --account for "
                f"$HPCENV_PROJECT); on the site copy {sif} to {step.target}",
            )
        target = Path(dest)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(sif, partial)
        partial.replace(target)  # atomic: a job never sees half a SIF
        return Outcome(step, True, f"SIF at {target}")
    return _run_command(step, env)


def _run_command(step: DeliveryStep, env: Mapping[str, str] | None) -> Outcome:
    shown = step.shown()
    argv = [expand(word, env) for word in step.command]
    exe = shutil.which(step.command[0])
    if exe is None or None in argv:
        if not step.site_tool:
            raise EnvironmentProblem(f"{step.command[0]} is not installed; cannot {shown}")
        why = (
            f"{step.command[0]} is not on this host"
            if exe is None
            else "it names a variable unset here"
        )
        return Outcome(step, False, f"pending: {why}; on the site run: {shown}")
    from hpcenv.engines import engine_env

    run_env = engine_env(dict(env) if env is not None else None)
    proc = subprocess.run(
        [exe, *(str(w) for w in argv[1:])],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
        stdin=subprocess.DEVNULL,
        env=run_env,
    )
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise EnvironmentProblem(
            redact(f"{shown} failed (exit {proc.returncode}): {last[-1] if last else 'no output'}")
        )
    if step.verify is not None:
        step.verify(run_env, proc.stdout + proc.stderr)
    return Outcome(step, True, step.describe())
