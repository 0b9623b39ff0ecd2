"""Image delivery: after a build, put the image where the site's job script will look for it.

Each site's runtime decides the last step (docs/sites/*.md, "Image delivery"):

- apptainer / singularity: the SIF goes to ``<scratch>/hpcenv/images/<recipe>-<site>.sif``, the
  path ``hpcenv submit`` runs (``naming.site_sif_path``: one place for that name);
- podman-hpc (NERSC): ``podman-hpc migrate TAG`` squashes the image into the store the compute
  nodes read (NERSC/podman-hpc ``podman_hpc.py``: "Migrate an image to squashed");
- shifter, or any site with ``--push REF``: ``podman push TAG REF`` to a registry the site pulls from;
- podman (local): the image is already in the engine's storage.

A step whose tool or path is not on this host (``podman-hpc`` off Perlmutter, ``$PROJ`` unset)
is reported as pending with the exact command to run on the site, never silently skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hpcenv.credentials import redact
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.naming import image_kind
from hpcenv.site import Site

StepKind = Literal["sif-copy", "needs-sif", "migrate", "push", "in-place"]
_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class DeliveryStep:
    kind: StepKind
    target: str  # where the job finds the image (path, tag or registry reference)
    command: tuple[str, ...] = ()  # argv of the step; empty for a file copy or nothing to do

    def describe(self) -> str:
        if self.kind == "sif-copy":
            return f"copy the SIF to {self.target} (the path the job script runs)"
        if self.kind == "needs-sif":
            return f"none: the site's jobs run a SIF at {self.target}; build with --format sif"
        if self.kind == "migrate":
            return f"{shlex.join(self.command)} (compute nodes read the squashed store)"
        if self.kind == "push":
            return f"{shlex.join(self.command)} (the site pulls {self.target})"
        return f"none: the job runs {self.target} from this host's image storage"


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
    """The steps that end a build for this site (``build --dry-run`` lists them)."""
    from hpcenv.jobs.containers import default_image

    steps: list[DeliveryStep] = []
    if push is not None:
        ref = check_ref(push)
        steps.append(DeliveryStep("push", ref, (engine, "push", tag, ref)))
    kind = site.runtime.kind
    if image_kind(kind) == "sif":
        sif_kind: StepKind = "sif-copy" if fmt in ("sif", "both") else "needs-sif"
        steps.append(DeliveryStep(sif_kind, default_image(site, recipe)))
    elif kind == "podman-hpc":
        steps.append(DeliveryStep("migrate", tag, ("podman-hpc", "migrate", tag)))
    elif kind == "shifter" and not push:
        raise ConfigError(
            f"site {site.name} runs shifter, which pulls images from a registry: "
            "give --push REGISTRY/NAME:TAG"
        )
    elif not steps:
        steps.append(DeliveryStep("in-place", tag))
    return steps


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

    ``env`` expands the SIF path (:func:`delivery_env`); default: this process's environment.
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
    exe = shutil.which(step.command[0])
    if exe is None:
        if step.kind == "migrate":
            return Outcome(
                step,
                False,
                f"pending: {step.command[0]} is not on this host; on a login node of the site "
                f"run: {shlex.join(step.command)}",
            )
        raise EnvironmentProblem(f"{step.command[0]} is not installed; cannot {step.describe()}")
    from hpcenv.engines import engine_env

    proc = subprocess.run(
        [exe, *step.command[1:]],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        env=engine_env(),
    )
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise EnvironmentProblem(
            redact(
                f"{shlex.join(step.command)} failed (exit {proc.returncode}): "
                f"{last[-1] if last else 'no output'}"
            )
        )
    return Outcome(step, True, step.describe())
