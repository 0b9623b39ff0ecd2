"""The bind model: how a site's MPI replaces the image's MPI at run time.

One description per site (:class:`SiteMpi`), turned into flags by each container runtime, the same
way for every bind-model site (Frontier, Perlmutter, Summit, Aurora and the ``local-bind``
rehearsal):

- Apptainer/Singularity: ``--bind`` of the MPI prefix and the site's library list, and
  ``APPTAINERENV_LD_LIBRARY_PATH`` so the loader finds the site's ``libmpi.so.12`` before the
  image's (OLCF's Frontier container examples, olcf/olcf_containers_examples, read 2026-11-22).
- podman/podman-hpc: ``--volume`` of the same paths and ``--env LD_LIBRARY_PATH=...`` (NERSC
  podman-hpc's ``--mpi`` module, NERSC/podman-hpc etc/modules.d/mpich.yaml, read 2026-11-22).

Before the ranks start, the job runs its preflight step (``bind-preflight.sh``) once inside the image with the
injection applied: it checks that the site library is visible there and that the image carries an
MPI with the same soname (the one being replaced). An image whose MPI is of the other ABI family
(Open MPI's ``libmpi.so.40`` under an MPICH-ABI site MPI) stops the job with a message naming both
libraries, instead of running N unconnected copies or silently keeping the image's MPI.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from hpcenv.jobs.shell import expanding
from hpcenv.knowledge import kb
from hpcenv.mpi_abi import STANDARD_ABI, provides, soname
from hpcenv.site import Site

# Exit status of the preflight check on an ABI mismatch (distinct from a command's own failures).
ABI_MISMATCH_EXIT = 3


@dataclass(frozen=True)
class SiteMpi:
    """What a bind-model job injects: paths to bind, loader path, variables, and the soname."""

    spec: str
    root: str
    mounts: tuple[str, ...]
    library_path: tuple[str, ...]
    soname: str
    abi: str
    env: dict[str, str] = field(default_factory=dict)
    libs: tuple[str, ...] = ()  # single host libraries the site MPI links to (mpi.host_libs)
    preload: tuple[str, ...] = ()  # libraries to LD_PRELOAD (mpi.preload: e.g. Cray GTL)
    model: str = "bind"  # or site-build: the image was compiled against this MPI, has none

    @property
    def ld_library_path(self) -> str:
        return ":".join(self.library_path)

    @property
    def ld_preload(self) -> str:
        return ":".join(self.preload)


def site_mpi(site: Site) -> SiteMpi | None:
    """The site MPI a bind-model (or site-build) job injects; None for hybrid sites."""
    mpi = site.mpi
    if mpi.model not in ("bind", "site-build") or not mpi.root:
        return None
    family = kb()["mpi_families"].get(mpi.name, {})
    mounts: list[str] = []
    for path in (mpi.root, *mpi.bind_paths):
        if path not in mounts:
            mounts.append(path)
    return SiteMpi(
        spec=mpi.spec,
        root=mpi.root,
        mounts=tuple(mounts),
        library_path=tuple(mpi.library_path) or (f"{mpi.root}/lib",),
        soname=str(family.get("soname", "libmpi.so")),
        abi=str(family.get("abi", "unknown")),
        env=dict(mpi.env),
        libs=tuple(mpi.host_libs),
        preload=tuple(mpi.preload),
        model=mpi.model,
    )


def preflight_args(inj: SiteMpi) -> list[str]:
    """The preflight step's arguments (``templates/jobs/bind_preflight.sh.j2``): soname, MPI
    root, injected loader path, spec, ABI, the mismatch exit status, the model, then
    :func:`known_abis`. Values that name variables (``$MPI_ROOT``, ``$CRAY_LD_LIBRARY_PATH``)
    expand in the job."""
    args = [inj.soname, inj.root, inj.ld_library_path, inj.spec, inj.abi, str(ABI_MISMATCH_EXIT)]
    pairs = known_abis()
    if inj.abi == STANDARD_ABI:  # an image built against the ABI: its library is known too
        pairs.append(f"{inj.soname}={STANDARD_ABI}")
    return [expanding(a) for a in args] + [inj.model] + pairs


def known_abis() -> list[str]:
    """``SONAME=ABI`` for every MPI ABI family hpcenv knows (``libmpi.so.12=mpich``, ...): the
    trailing arguments of the bind-model preflight step (``templates/jobs/bind_preflight.sh.j2``),
    which runs once inside the image with the injection applied, prints which image library the
    site MPI replaces, or names both libraries and exits :data:`ABI_MISMATCH_EXIT`."""
    families = [f for f in kb()["mpi_families"].values() if isinstance(f, dict)]
    return sorted({f"{f['soname']}={f['abi']}" for f in families})


def standard_abi(inj: SiteMpi) -> SiteMpi | None:
    """The injection for an image built against the MPI-5 standard ABI (:mod:`hpcenv.mpi_abi`):
    the same mounts and loader path, with ``libmpi_abi.so.1`` as the library the preflight looks
    for (it prints the site library's ABI version, or names the library the site has instead
    and exits :data:`ABI_MISMATCH_EXIT`); None where the site's MPI does not provide the ABI by
    rule ``mpi-abi-providers`` (the job then binds it as ``inj`` says)."""
    if inj.model != "bind" or not provides(inj.spec):
        return None
    return replace(inj, soname=soname(), abi=STANDARD_ABI)


def image_mpi_abis(lock: dict[str, Any]) -> dict[str, str]:
    """ABI family -> where, for the MPIs an image's lock (label ``io.hpcenv.lock``) records:
    its MPI, and the MPICH-ABI side runtime daal4py may carry beside an Open MPI."""
    comps = lock.get("components", {})
    out: dict[str, str] = {}
    mpi = comps.get("mpi") or {}
    if mpi.get("options", {}).get("abi"):
        out[mpi["options"]["abi"]] = f"{mpi.get('implementation', 'mpi')}@{mpi.get('version')}"
    side = (comps.get("daal4py") or {}).get("options", {})
    if side.get("lib_dir") and side.get("side_mpi"):
        out.setdefault("mpich", f"{side['side_mpi']} in {side['lib_dir']}")
    return out


def image_mismatch(site: Site, image: str, lock: dict[str, Any]) -> str | None:
    """Why ``image`` (by its lock) cannot run under ``site``'s injected MPI; None when it can
    (or when the site is not bind-model, or the lock names no MPI)."""
    inj = site_mpi(site)
    mpi = lock.get("components", {}).get("mpi") or {}
    if inj is not None and mpi.get("options", {}).get("standard_abi"):
        inj = standard_abi(inj) or inj  # an image built against the MPI-5 standard ABI
    abis = image_mpi_abis(lock)
    if inj is None or not abis or inj.abi in abis:
        return None
    have = ", ".join(f"{where} ({abi} ABI)" for abi, where in abis.items())
    return (
        f"image {image} carries {have}; site {site.name} injects {inj.spec} "
        f"({inj.soname}, {inj.abi} ABI) over it, which needs an image MPI of the {inj.abi} "
        f"family [rule mpi-bind-abi] (rebuild for the site: hpcenv build --site {site.name}; "
        "--force submits anyway and the job's preflight stops it)"
    )
