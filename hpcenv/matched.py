"""The matched stack protected from a user's packages (issue 22).

The classic breakage: ``pip install transformers`` upgrades torch, and Horovod's extension,
built against the old torch, no longer loads. So:

- every matched component that pip installs (:func:`protected`: torch, horovod, mpi4py, the
  daal4py package, torch-ccl, ipex, at the lock's versions) becomes a line of a pip constraints
  file (:func:`constraints`, ``-c`` on the user's pip step), so a user package can never
  silently replace one;
- before any build, each user requirement is checked against the lock with ``packaging``
  specifiers (:func:`check`): one that the image's version does not satisfy (``torch==2.1.0``,
  ``torch<2``) is refused in one line naming the package, what it wanted and what the image has;
- companions that must match torch (torchvision, torchaudio: rules ``torchvision-torch``,
  ``torchaudio-torch`` in ``compat.yaml``, with their sources) are pinned to torch's series *and
  build*: from the same wheelhouse (with the same local label, ``+cpu``) or the same index torch
  came from (:func:`torch_index`). PyPI's torchvision is built against PyPI's torch and fails
  in a ``+cpu`` image with ``operator torchvision::nms does not exist``; where the matching wheel
  cannot be had, the recipe is refused in one line saying where it would come from. The build
  runs one compiled operator of each companion it finds installed (``data.check``).

:func:`user_lock` turns a recipe's resolved user content into the lock's ``user_content``, the
only thing the emitters read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from hpcenv.errors import ConfigError
from hpcenv.knowledge import kb, rule
from hpcenv.lock import Lock
from hpcenv.site import Site
from hpcenv.usercontent import UserContent, UserRequirement
from hpcenv.versions import major_minor

# component -> the pip distribution that carries it in the venv (daal4py: options.package)
PIP_DISTS = {
    "torch": "torch",
    "horovod": "horovod",
    "mpi4py": "mpi4py",
    "torch-ccl": "oneccl_bind_pt",
    "ipex": "intel_extension_for_pytorch",
}
COMPANION_RULES = ("torchvision-torch", "torchaudio-torch")
USER_DIR = "/opt/hpcenv-user"  # the user step's inputs, mounted for that step only
USER_CONTEXT = "hpcenv-user"


def protected(lock: Lock) -> dict[str, tuple[str, str, str]]:
    """Normalized distribution name -> (distribution, version, component) for every matched
    component the venv gets from pip."""
    out: dict[str, tuple[str, str, str]] = {}
    for comp, dist in PIP_DISTS.items():
        if comp in lock.components:
            out[canonicalize_name(dist)] = (dist, lock.components[comp].version, comp)
    d4p = lock.components.get("daal4py")
    if d4p and "package" in d4p.options:
        req = Requirement(d4p.options["package"])
        out[canonicalize_name(req.name)] = (req.name, d4p.version, "daal4py")
    return out


def constraints(pins: dict[str, str]) -> str:
    """The pip constraints file of the user's pip step from the lock's
    ``user_content.constraints`` (``torch==2.13.0`` also holds a ``+cpu`` build: PEP 440 local
    labels)."""
    head = "# the matched stack (stack.lock.json); a user package may not replace it\n"
    return head + "".join(f"{dist}=={ver}\n" for dist, ver in sorted(pins.items()))


def _contains(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def check(lock: Lock, reqs: tuple[UserRequirement, ...]) -> None:
    """Refuse the first user requirement that would replace a matched component."""
    guarded = protected(lock)
    for r in reqs:
        req = Requirement(r.spec)
        hit = guarded.get(canonicalize_name(req.name))
        if hit is None:
            continue
        dist, version, comp = hit
        if req.url or not _contains(req, version):
            wanted = f"@ {req.url}" if req.url else str(req.specifier)
            raise ConfigError(
                f"{r.origin}: {dist}{wanted} would replace the matched stack's {dist} {version} "
                f"(stack.lock.json, component {comp}); drop the pin, or choose the stack's "
                f"version with --set {comp}=VERSION"
            )


def torch_index(lock: Lock, site: Site) -> str | None:
    """The extra index torch is installed from (None: the site's wheelhouse or conda)."""
    torch = lock.components.get("torch")
    if torch is None or torch.source.startswith("conda"):
        return None
    if "index" in torch.options:
        return torch.options["index"]
    if site.build.pip_find_links:
        return None
    tmpl = kb()["install"]["torch_index"][torch.options["variant"]]
    cuda = lock.components.get("cuda")
    rocm = lock.components.get("rocm")
    return str(
        tmpl.format(
            cuda_nodot=cuda.version.replace(".", "") if cuda else "",
            rocm=major_minor(rocm.version) if rocm else "",
        )
    )


def _wheel_version(folder: Path, dist: str, series: str, label: str | None) -> str | None:
    """The newest ``dist`` wheel of ``series`` in ``folder`` with local label ``label``."""
    found = []
    pattern = re.compile(
        rf"{re.escape(dist)}-({re.escape(series)}(?:\.[0-9]+)*)(\+[A-Za-z0-9.]+)?-"
    )
    for wheel in folder.glob("*.whl") if folder.is_dir() else ():
        m = pattern.match(wheel.name)
        if m and (m.group(2) or "") == (f"+{label}" if label else ""):
            found.append(Version(m.group(1) + (m.group(2) or "")))
    return str(max(found)) if found else None


def _torch_label(folders: list[Path], version: str) -> str | None:
    for folder in folders:
        for wheel in sorted(folder.glob(f"torch-{version}*.whl")) if folder.is_dir() else ():
            m = re.match(rf"torch-{re.escape(version)}(?:\+([A-Za-z0-9.]+))?-", wheel.name)
            if m:
                return m.group(1) or ""
    return None


def companions(
    lock: Lock, site: Site, reqs: tuple[UserRequirement, ...]
) -> tuple[tuple[UserRequirement, ...], str | None]:
    """User requirements with each torch companion pinned to torch's series and build, and the
    extra index they come from (torch's own), or a ConfigError in one line."""
    torch = lock.components.get("torch")
    by_dist = {rule(r).data["dist"]: rule(r) for r in COMPANION_RULES}
    out: list[UserRequirement] = []
    index: str | None = None
    for r in reqs:
        req = Requirement(r.spec)
        found = by_dist.get(canonicalize_name(req.name))
        if found is None:
            out.append(r)
            continue
        dist = found.data["dist"]
        if torch is None:
            raise ConfigError(f"{r.origin}: {dist} needs torch, and this stack has none")
        mm = major_minor(torch.version)
        series = found.data["series"].get(mm)
        if series is None:
            raise ConfigError(
                f"{r.origin}: no {dist} release is known for torch {torch.version} "
                f"[rule {found.id}: {', '.join(found.data['series'])}]"
            )
        if req.url or (req.specifier and not _contains(req, f"{series}.0")):
            raise ConfigError(
                f"{r.origin}: {r.spec} does not fit the image's torch {torch.version}, "
                f"which pairs with {dist} {series}.* [rule {found.id}]"
            )
        if torch.source.startswith("conda"):
            raise ConfigError(
                f"{r.origin}: {dist} for torch {torch.version} comes from the same conda channel "
                "as torch; a recipe's pip packages cannot add it"
            )
        if torch.source == "base image":
            raise ConfigError(
                f"{r.origin}: {dist} for torch {torch.version} must come with the base image "
                "that carries that torch; a recipe's pip packages cannot add it"
            )
        where = torch_index(lock, site)
        if where is not None:
            index = where
            spec = f"{dist}=={series}.*"
        else:
            folders = [Path(f) for f in site.build.pip_find_links]
            label = _torch_label(folders, torch.version)
            version = next(
                (v for f in folders if (v := _wheel_version(f, dist, series, label)) is not None),
                None,
            )
            if version is None:
                built = f"{torch.version}+{label}" if label else torch.version
                variant = torch.options.get("variant", "cpu")
                url = kb()["install"]["torch_index"].get(variant, "the PyTorch index")
                raise ConfigError(
                    f"{r.origin}: {dist} must come from the same build as the image's torch "
                    f"{built} (site {site.name}'s wheelhouse {', '.join(map(str, folders))}), "
                    f"which has no {dist}-{series}.*{'+' + label if label else ''} wheel; get "
                    f"it from {url} into build.pip_find_links [rule {found.id}]"
                )
            spec = f"{dist}=={version}"
        out.append(UserRequirement(spec + (f"; {req.marker}" if req.marker else ""), r.origin))
    return tuple(out), index


def companion_checks() -> dict[str, str]:
    """module -> the code that runs one compiled operator of that companion."""
    return {rule(r).data["module"]: rule(r).data["check"] for r in COMPANION_RULES}


def user_lock(lock: Lock, site: Site, content: UserContent) -> dict[str, Any]:
    """The lock's ``user_content``: what the late user layers install, as the emitters read it.

    Files are named by their place in the build context (``hpcenv-user/files/N/NAME``), never by
    their host path (the lock is inside the image)."""
    if not content:
        return {}
    check(lock, content.requirements)
    reqs, index = companions(lock, site, content.requirements)
    out: dict[str, Any] = {}
    if reqs:
        out["pip"] = [r.spec for r in reqs]
        pins = {dist: ver for dist, ver, _ in sorted(protected(lock).values())}
        if lock.build.get("base_from") == "framework":
            pins.pop("torch", None)  # the image's own, read in the build (blocks.BASE_PINS)
        out["constraints"] = pins
        if index:
            out["extra_index_url"] = index
    if content.apt:
        out["apt"] = sorted(set(content.apt))
    if content.files:
        out["files"] = [
            {
                "src": f"{USER_CONTEXT}/files/{i}/{f.host.name}",
                "dest": f.dest,
                "kind": "folder" if f.host.is_dir() else "file",
            }
            for i, f in enumerate(content.files)
        ]
    for key in ("env", "labels"):
        value = getattr(content, key)
        if value:
            out[key] = dict(sorted(value.items()))
    if content.workdir:
        out["workdir"] = content.workdir
    return out
