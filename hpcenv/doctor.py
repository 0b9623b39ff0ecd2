"""What this host offers hpcenv: engines, OCI runtimes, Apptainer, MPI launchers, schedulers, tools.

Every check really runs the tool (``podman info`` with what this host needs from containers.conf,
``scontrol ping``, ``runc --version``...) and reports ok / missing / broken with why and how to
fix it. Fixes name commands a user of the installed wheel has (package managers, ``hpcenv``
itself), never files of hpcenv's source checkout. Each registered scheduler brings its own
probe and fixes (:class:`hpcenv.jobs.schedulers.Probe`); :func:`check_scheduler` only runs it.

``--site S`` marks as required what that site's path needs on this host (:func:`site_needs`):
its build engine, runc only where this host needs it, debootstrap only for sites that bootstrap
their base image, the site's container runtime, scheduler and launcher. A login node of a real
site does not need debootstrap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hpcenv.engines import engine_env
from hpcenv.jobs.schedulers import SCHEDULERS, SLURM_HINT, Scheduler

if TYPE_CHECKING:
    from hpcenv.site import Site

Status = Literal["ok", "missing", "broken"]


# Debian/Ubuntu package names; the words after each fix are the same on RHEL with dnf.
def _apt(*packages: str) -> str:
    names = " ".join(packages)
    return f"install it: apt-get install {names} (RHEL: dnf install {names})"


@dataclass(frozen=True)
class Check:
    """One finding: ``why`` says what was seen, ``fix`` what to do (empty when nothing)."""

    category: str
    name: str
    status: Status
    why: str
    fix: str = ""
    required: bool = False
    needed_for: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Probe:
    """The result of running one command."""

    rc: int
    output: str

    @property
    def first_line(self) -> str:
        return next((ln.strip() for ln in self.output.splitlines() if ln.strip()), "")

    @property
    def last_line(self) -> str:
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        return lines[-1] if lines else "no output"


class Host:
    """Finds and runs programs on a given ``PATH`` (the real one unless a test fakes it)."""

    def __init__(self, path: str | None = None, cgroup_root: Path = Path("/sys/fs/cgroup")) -> None:
        self.path = os.environ.get("PATH", os.defpath) if path is None else path
        self.cgroup_root = cgroup_root

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.path)

    def run(self, argv: Sequence[str], timeout: float = 20) -> Probe:
        env = engine_env()
        env["PATH"] = self.path
        try:
            proc = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Probe(124, f"timed out after {timeout:.0f} s")
        except OSError as err:
            return Probe(127, str(err))
        return Probe(proc.returncode, (proc.stdout or "") + (proc.stderr or ""))

    def cgroup_layout(self) -> str:
        """``unified`` (v2 only), ``hybrid`` (v1 controllers + v2 at unified/) or ``legacy``."""
        if (self.cgroup_root / "cgroup.controllers").exists():
            return "unified"
        if (self.cgroup_root / "unified" / "cgroup.controllers").exists():
            return "hybrid"
        return "legacy"


def _version(host: Host, exe: str, args: Sequence[str] = ("--version",)) -> Probe:
    return host.run([exe, *args])


# -- engines ------------------------------------------------------------------------------------
def check_podman(host: Host) -> Check:
    exe = host.which("podman")
    if exe is None:
        return Check(
            "engine",
            "podman",
            "missing",
            "podman not found on PATH",
            _apt("podman", "runc"),
            required=True,
        )
    conf = " ".join(f"{k}={v}" for k, v in engine_env().items() if k.startswith("CONTAINERS_CONF"))
    conf = conf or "the host's own containers.conf"
    fmt = "{{.Version.Version}} {{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}}"
    probe = host.run([exe, "info", "--format", fmt], timeout=60)
    if probe.rc != 0:
        why = f"`podman info` failed ({conf}): {probe.last_line}"
        low = probe.output.lower()
        if "hybrid mode" in low or "crun" in low:
            fix = "hpcenv selects runc on hybrid-cgroup hosts; " + _apt("runc")
        elif "runc" in low and ("not found" in low or "no such file" in low):
            fix = _apt("runc")
        elif "setrlimit" in low or "rlimit" in low:
            fix = "let hpcenv lower the ulimits: unset HPCENV_CONTAINERS_CONF (or set it to always)"
        else:
            fix = "run `podman info` to see the full error, then `hpcenv doctor` again"
        return Check("engine", "podman", "broken", why, fix, required=True)
    version, runtime, driver = (probe.first_line.split() + ["?", "?", "?"])[:3]
    return Check(
        "engine",
        "podman",
        "ok",
        f"podman {version}: {runtime} runtime, {driver} storage ({conf})",
        required=True,
    )


def check_docker(host: Host) -> Check:
    exe = host.which("docker")
    if exe is None:
        return Check(
            "engine",
            "docker",
            "missing",
            "docker not found on PATH",
            "optional: hpcenv uses podman by default (--engine docker needs Docker)",
        )
    probe = host.run([exe, "info", "--format", "{{.ServerVersion}}"], timeout=30)
    if probe.rc != 0 or not probe.first_line:
        return Check(
            "engine",
            "docker",
            "broken",
            f"docker CLI present but `docker info` failed: {probe.last_line}",
            "start the Docker daemon, or keep the default engine (podman)",
        )
    return Check("engine", "docker", "ok", f"Docker daemon {probe.first_line}")


def check_buildah(host: Host) -> Check:
    exe = host.which("buildah")
    if exe is None:
        return Check(
            "engine",
            "buildah",
            "missing",
            "buildah not found on PATH",
            "optional (--engine buildah): " + _apt("buildah"),
        )
    probe = host.run([exe, "info", "--format", "{{.store.GraphDriverName}}"], timeout=60)
    if probe.rc != 0:
        return Check(
            "engine",
            "buildah",
            "broken",
            f"`buildah info` failed: {probe.last_line}",
            "check containers.conf and storage.conf, then run `buildah info`",
        )
    version = _version(host, exe).first_line
    return Check("engine", "buildah", "ok", f"{version}, {probe.first_line} storage")


# -- OCI runtimes -------------------------------------------------------------------------------
def check_runc(host: Host) -> Check:
    exe = host.which("runc")
    if exe is None:
        return Check(
            "oci-runtime",
            "runc",
            "missing",
            "runc not found; podman runs with runc where crun is absent or refused",
            _apt("runc"),
            required=True,
        )
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "oci-runtime",
            "runc",
            "broken",
            f"`runc --version` failed: {probe.last_line}",
            "reinstall: apt-get install --reinstall runc",
            required=True,
        )
    return Check("oci-runtime", "runc", "ok", probe.first_line, required=True)


def check_crun(host: Host) -> Check:
    exe = host.which("crun")
    layout = host.cgroup_layout()
    if exe is None:
        return Check(
            "oci-runtime",
            "crun",
            "missing",
            f"crun not found (cgroups: {layout})",
            "not needed: hpcenv uses runc",
        )
    if layout == "hybrid":
        return Check(
            "oci-runtime",
            "crun",
            "broken",
            "crun refuses hybrid v1/v2 cgroup hosts (`cgroups in hybrid mode not supported`)",
            "nothing to do: hpcenv selects runc on this host (see hpcenv.hostconf)",
        )
    return Check(
        "oci-runtime", "crun", "ok", f"{_version(host, exe).first_line} (cgroups: {layout})"
    )


# -- Apptainer ----------------------------------------------------------------------------------
def check_apptainer(host: Host) -> Check:
    for name in ("apptainer", "singularity"):
        exe = host.which(name)
        if exe is None:
            continue
        probe = _version(host, exe)
        if probe.rc != 0:
            return Check(
                "apptainer",
                name,
                "broken",
                f"`{name} --version` failed: {probe.last_line}",
                "reinstall it, or remove it from PATH so hpcenv uses its podman helper container",
            )
        return Check("apptainer", name, "ok", probe.first_line)
    return Check(
        "apptainer",
        "apptainer",
        "missing",
        "neither apptainer nor singularity on PATH; hpcenv falls back to its podman "
        "helper container (sid's apptainer, built from hpcenv/data/apptainer-helper)",
        "nothing needed while podman works; for native SIF runs install Apptainer "
        "(not packaged for Debian bookworm)",
    )


# -- MPI launchers ------------------------------------------------------------------------------
_LAUNCHER_FIX = {
    "mpirun": "load your site's MPI module (module load openmpi), or " + _apt("openmpi-bin"),
    "mpiexec": "load your site's MPI module (PBS sites: module load cray-pals or mpich), or "
    + _apt("openmpi-bin"),
    "srun": SLURM_HINT,
    "jsrun": "only on IBM LSF/CSM systems (Summit-class); nothing to do elsewhere",
}

_LAUNCHER_BROKEN_FIX = {"srun": "srun finds no slurm.conf or controller: " + SLURM_HINT}


def check_launcher(host: Host, name: str) -> Check:
    """A launcher on PATH and answering ``--version``; one hpcenv knows no fix for (flux, a
    site's own) gets a generic hint, not a KeyError."""
    exe = host.which(name)
    fix = _LAUNCHER_FIX.get(name, f"load the module that provides {name}, or ask the site")
    if exe is None:
        return Check("launcher", name, "missing", f"{name} not found on PATH", fix)
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "launcher",
            name,
            "broken",
            f"`{name} --version` failed: {probe.last_line}",
            _LAUNCHER_BROKEN_FIX.get(name, fix),
        )
    real = os.path.realpath(exe)
    where = f" ({real})" if real != exe else ""
    return Check("launcher", name, "ok", probe.first_line + where)


# -- schedulers ---------------------------------------------------------------------------------
def check_scheduler(host: Host, scheduler: type[Scheduler]) -> Check:
    """Run the scheduler's own :class:`~hpcenv.jobs.schedulers.Probe`."""
    name, probe = scheduler.name, scheduler.probe
    exe = host.which(probe.command)
    if exe is None:
        return Check("scheduler", name, "missing", f"{probe.command} not found on PATH", probe.hint)
    argv = next((a for a in probe.answers if host.which(a[0])), probe.answers[-1])
    result = host.run([host.which(argv[0]) or exe, *argv[1:]])
    if result.rc == 0 and probe.expect in result.output:
        return Check("scheduler", name, "ok", result.first_line)
    return Check("scheduler", name, "broken", probe.broken.format(line=result.last_line), probe.fix)


# -- tools --------------------------------------------------------------------------------------
def check_debootstrap(host: Host) -> Check:
    exe = host.which("debootstrap")
    if exe is None:
        return Check(
            "tool",
            "debootstrap",
            "missing",
            "debootstrap not found; it makes the base image when no registry is reachable",
            _apt("debootstrap"),
            required=True,
        )
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "tool",
            "debootstrap",
            "broken",
            f"`debootstrap --version` failed: {probe.last_line}",
            "reinstall: apt-get install --reinstall debootstrap",
            required=True,
        )
    note = "" if os.geteuid() == 0 else " (needs root to bootstrap)"
    return Check("tool", "debootstrap", "ok", probe.first_line + note, required=True)


def check_shellcheck(host: Host) -> Check:
    exe = host.which("shellcheck")
    if exe is None:
        return Check(
            "tool",
            "shellcheck",
            "missing",
            "shellcheck not found; rendered job scripts are not linted",
            _apt("shellcheck"),
        )
    probe = _version(host, exe)
    version = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in probe.output.splitlines()
            if ln.startswith("version:")
        ),
        probe.first_line,
    )
    if probe.rc != 0:
        return Check(
            "tool",
            "shellcheck",
            "broken",
            f"`shellcheck --version` failed: {probe.last_line}",
            "reinstall: apt-get install --reinstall shellcheck",
        )
    return Check("tool", "shellcheck", "ok", f"shellcheck {version}")


# -- rehearsal sites ----------------------------------------------------------------------------
SITE_MPI_PREFIX = Path(os.environ.get("HPCENV_SITE_MPI_PREFIX", "/opt/site/intel-mpi"))


def check_site_mpi(host: Host) -> Check:
    """The ``local-bind`` rehearsal's site MPI (Intel MPI in a site prefix)."""
    name = "local-bind site MPI"
    from hpcenv.knowledge import mpi_soname

    lib = SITE_MPI_PREFIX / "lib" / mpi_soname("mpich")
    fix = "scripts/site-mpi-setup.sh (Intel MPI from PyPI into the site prefix; make host does it)"
    if not lib.exists():
        return Check("rehearsal", name, "missing", f"{lib} not found", fix)
    version = (
        (SITE_MPI_PREFIX / "VERSION").read_text().strip()
        if (SITE_MPI_PREFIX / "VERSION").is_file()
        else "?"
    )
    probe = host.run([str(SITE_MPI_PREFIX / "bin" / "mpiexec.hydra"), "--version"], timeout=20)
    if probe.rc != 0:
        return Check("rehearsal", name, "broken", f"mpiexec.hydra: {probe.last_line}", fix)
    return Check("rehearsal", name, "ok", f"Intel MPI {version} in {SITE_MPI_PREFIX}")


SITE_APPTAINER = (
    Path(os.environ.get("HPCENV_SITE_APPTAINER_PREFIX", "/opt/site/apptainer"))
    / "bin"
    / "apptainer"
)


def check_site_apptainer(host: Host) -> Check:
    """The SIF rehearsal sites' ``apptainer`` command (``local-bind-sif``, ``local-2node-sif``:
    Apptainer in hpcenv's helper container): installed, and the helper image it runs present."""
    from hpcenv.naming import HELPER_TAG

    name = "rehearsal sites' apptainer"
    fix = "scripts/site-apptainer-setup.sh (make host does it)"
    if not os.access(SITE_APPTAINER, os.X_OK):
        return Check("rehearsal", name, "missing", f"{SITE_APPTAINER} not found", fix)
    podman = host.which("podman")
    if podman is None:
        return Check(
            "rehearsal",
            name,
            "missing",
            "podman not found on PATH (it runs the helper)",
            _apt("podman", "runc"),
        )
    if host.run([podman, "image", "exists", HELPER_TAG], timeout=30).rc != 0:
        return Check(
            "rehearsal",
            name,
            "missing",
            f"helper image {HELPER_TAG} not built",
            "hpcenv apptainer version (builds it)",
        )
    return Check("rehearsal", name, "ok", f"{SITE_APPTAINER} runs Apptainer in {HELPER_TAG}")


def check_two_node(host: Host) -> Check:
    """Can the ``local-2node`` rehearsal (two Slurm nodes in network namespaces) run here?

    Really creates (and removes) a network namespace and a bridge, as the set-up script does."""
    name = "local-2node namespaces"
    fix = "needs root with CAP_NET_ADMIN/CAP_SYS_ADMIN, iproute2, util-linux and slurm-wlm"
    if os.geteuid() != 0:
        return Check("rehearsal", name, "missing", "not root: network namespaces need it", fix)
    missing = [
        t
        for t in ("ip", "nsenter", "unshare", "slurmd", "slurmctld", "munged")
        if host.which(t) is None
    ]
    if missing:
        return Check("rehearsal", name, "missing", f"not on PATH: {', '.join(missing)}", fix)
    tag = f"hpcdr{os.getpid() % 100000}"
    ns = host.run(["ip", "netns", "add", tag])
    if ns.rc != 0:
        return Check("rehearsal", name, "broken", f"`ip netns add`: {ns.last_line}", fix)
    try:
        veth = host.run(
            ["ip", "link", "add", f"{tag}a", "type", "veth", "peer", "name", "eth0", "netns", tag]
        )
        bridge = host.run(["ip", "link", "add", f"{tag}b", "type", "bridge"])
    finally:  # nothing is left behind, even on Ctrl-C between add and del
        host.run(["ip", "link", "del", f"{tag}a"])
        host.run(["ip", "link", "del", f"{tag}b"])
        host.run(["ip", "netns", "del", tag])
    for what, probe in (("veth pair", veth), ("bridge", bridge)):
        if probe.rc != 0:
            return Check("rehearsal", name, "broken", f"{what}: {probe.last_line}", fix)
    return Check(
        "rehearsal",
        name,
        "ok",
        "network namespace, veth pair and bridge work here: scripts/slurm-2node-up.sh can run",
    )


# -- site container runtimes other than Apptainer ------------------------------------------------
def check_site_runtime(host: Host, kind: str) -> Check:
    """The site's runtime by its own probe (:attr:`hpcenv.jobs.runtimes.base.ContainerRuntime.probe`:
    podman-hpc and shifter their command, pyxis an option of srun, the Container Engine enroot)."""
    from hpcenv.jobs.runtimes.registry import get_runtime

    probe = get_runtime(kind).probe
    if probe is None:
        return Check("runtime", kind, "ok", f"{kind}: no command of its own to probe")
    shown = " ".join(probe.argv)
    exe = host.which(probe.argv[0])
    if exe is None:
        return Check("runtime", kind, "missing", f"{probe.argv[0]} not found on PATH", probe.fix)
    run = host.run([exe, *probe.argv[1:]])
    if probe.expect is not None:
        if probe.expect in run.output:
            return Check("runtime", kind, "ok", f"`{shown}` lists {probe.expect}")
        return Check("runtime", kind, "missing", f"`{shown}` lists no {probe.expect}", probe.fix)
    if run.rc != 0:
        return Check("runtime", kind, "broken", f"`{shown}` failed: {run.last_line}", probe.fix)
    return Check("runtime", kind, "ok", f"{exe}: {run.first_line}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def check_cache(host: Host) -> Check:
    """Where hpcenv keeps large files (OCI archives, SIFs, base images, build logs), how much
    it holds and how much room its file system has. HPC home folders have small quotas
    (OLCF, NERSC, ALCF: tens of GB), so a cache under $HOME gets a hint to move it."""
    from hpcenv.paths import cache_dir

    path = cache_dir(create=False)
    env = "HPCENV_CACHE" if os.environ.get("HPCENV_CACHE") else "default"
    move = "set HPCENV_CACHE to a folder on scratch or project storage (HPC home quotas are small)"
    if not path.exists():
        return Check("storage", "cache", "ok", f"{path} ({env}): not made yet", "")
    if not os.access(path, os.W_OK | os.X_OK):
        return Check("storage", "cache", "broken", f"{path} ({env}) is not writable", move)
    used = host.run(["du", "-sb", "--", str(path)], timeout=30)
    held = used.first_line.split()[0] if used.rc == 0 and used.first_line else ""
    fs = os.statvfs(path)
    free, total = fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize
    why = (
        f"{path} ({env}): {_size(int(held)) if held.isdigit() else '? (du failed)'} held; "
        f"{_size(free)} free of {_size(total)} on its file system"
    )
    home = Path.home().resolve()
    under_home = path.resolve() == home or home in path.resolve().parents
    return Check("storage", "cache", "ok", why, move if under_home else "")


def check_emulation(host: Host) -> Check:
    """binfmt_misc handlers (qemu-user-static) for the architectures hpcenv builds besides this
    host's: images of another architecture build and run here only through them."""
    from hpcenv import platforms

    name = "qemu-user-static"
    here = platforms.host_arch()
    others = [a for a in platforms.ARCHES.values() if a != here]
    missing = [a.handler for a in others if platforms.emulator(a) is None]
    if missing:
        why = f"no binfmt handler for {', '.join(missing)} in {platforms.binfmt_dir()}"
        return Check("emulation", name, "missing", why, platforms.SETUP_HINT)
    names = ", ".join(a.name for a in others)
    return Check("emulation", name, "ok", f"{names} images run here under qemu (binfmt_misc)")


_BEFORE_SCHEDULERS: tuple[Callable[[Host], Check], ...] = (
    check_podman,
    check_docker,
    check_buildah,
    check_runc,
    check_crun,
    check_apptainer,
    *(partial(check_launcher, name=name) for name in _LAUNCHER_FIX),
)
_AFTER_SCHEDULERS: tuple[Callable[[Host], Check], ...] = (
    check_debootstrap,
    check_shellcheck,
    check_site_mpi,
    check_site_apptainer,
    check_two_node,
    check_cache,
    check_emulation,
)


def all_checks() -> list[Callable[[Host], Check]]:
    """Every check in report order, one per scheduler registered now."""
    schedulers = [partial(check_scheduler, scheduler=s) for s in SCHEDULERS.values()]
    return [*_BEFORE_SCHEDULERS, *schedulers, *_AFTER_SCHEDULERS]


# Runtimes whose check is one of the host checks above (their category or name), not their own.
_HOST_CHECKED = {"apptainer": "apptainer", "singularity": "apptainer", "podman": "podman"}


def _runtime_check_key(kind: str) -> str:
    return _HOST_CHECKED.get(kind, kind)


def site_needs(site: Site, facts: object | None = None) -> dict[str, str]:
    """Check name -> why ``site``'s path needs it on this host (build, run, submit, launch)."""
    from hpcenv.hostconf import HostFacts, host_needs, read_facts

    host_facts = facts if isinstance(facts, HostFacts) else read_facts()
    needs: dict[str, str] = {site.build.engine: f"builds {site.name}'s images (build.engine)"}
    if site.build.engine in ("podman", "buildah") and any(
        n.settings.get("engine", {}).get("runtime") == "runc" for n in host_needs(host_facts)
    ):
        needs["runc"] = "this host needs runc for podman (crun absent or refused)"
    if site.build.bootstrap_base:
        needs["debootstrap"] = f"{site.name} bootstraps its base image (build.bootstrap_base)"
    from hpcenv import platforms

    if platforms.ARCHES[site.arch] != platforms.host_arch():
        needs["qemu-user-static"] = (
            f"{site.name} is {site.arch}: its images build and run here under emulation (arch)"
        )
    runtime = site.runtime.kind
    needs[_runtime_check_key(runtime)] = f"{site.name} runs images with {runtime} (runtime.kind)"
    if site.scheduler.kind != "none":
        needs[site.scheduler.kind] = f"jobs go to {site.scheduler.kind} (scheduler.kind)"
    needs[site.scheduler.launcher] = (
        f"ranks start with {site.scheduler.launcher} (scheduler.launcher)"
    )
    return needs


def run_checks(path: str | None = None, site: Site | None = None) -> list[Check]:
    """Every check against the host (``path`` replaces ``$PATH`` for finding programs).

    With ``site``, ``required`` means what that site's path needs here (:func:`site_needs`);
    without, what building the ``local`` kind of image needs (podman, runc, debootstrap).
    """
    host = Host(path)
    checks = [check(host) for check in all_checks()]
    if site is None:
        return checks
    if _runtime_check_key(site.runtime.kind) == site.runtime.kind:
        checks.append(check_site_runtime(host, site.runtime.kind))
    needs = site_needs(site)
    out = []
    for c in checks:
        key = "apptainer" if c.category == "apptainer" else c.name
        out.append(replace(c, required=key in needs, needed_for=needs.get(key, "")))
    return out


def healthy(checks: Sequence[Check]) -> bool:
    """True when every check hpcenv needs on this host is ok."""
    return all(c.status == "ok" for c in checks if c.required)
