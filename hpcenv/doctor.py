"""What this host offers hpcenv: engines, OCI runtimes, Apptainer, MPI launchers, schedulers, tools.

Every check really runs the tool (``podman info`` with hpcenv's containers.conf, ``scontrol
ping``, ``runc --version``...) and reports ok / missing / broken with why and how to fix it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from hpcenv.engines import HOST_SETUP_HINT, engine_env

Status = Literal["ok", "missing", "broken"]


@dataclass(frozen=True)
class Check:
    """One finding: ``why`` says what was seen, ``fix`` what to do (empty when nothing)."""

    category: str
    name: str
    status: Status
    why: str
    fix: str = ""
    required: bool = False

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
            f"{HOST_SETUP_HINT} (apt-get install podman runc)",
            required=True,
        )
    conf = engine_env()["CONTAINERS_CONF"]
    fmt = "{{.Version.Version}} {{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}}"
    probe = host.run([exe, "info", "--format", fmt], timeout=60)
    if probe.rc != 0:
        why = f"`podman info` failed with CONTAINERS_CONF={conf}: {probe.last_line}"
        low = probe.output.lower()
        if "hybrid mode" in low or "crun" in low:
            fix = "hpcenv's containers.conf selects runc; install it: " + HOST_SETUP_HINT
        elif "runc" in low and ("not found" in low or "no such file" in low):
            fix = f"install runc: {HOST_SETUP_HINT}"
        elif "setrlimit" in low or "rlimit" in low:
            fix = f"keep CONTAINERS_CONF={conf} (it lowers the default ulimits)"
        else:
            fix = (
                f"run `CONTAINERS_CONF={conf} podman info` to see the full error; {HOST_SETUP_HINT}"
            )
        return Check("engine", "podman", "broken", why, fix, required=True)
    version, runtime, driver = (probe.first_line.split() + ["?", "?", "?"])[:3]
    return Check(
        "engine",
        "podman",
        "ok",
        f"podman {version}: {runtime} runtime, {driver} storage (CONTAINERS_CONF={conf})",
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
            f"optional (--engine buildah): {HOST_SETUP_HINT}",
        )
    probe = host.run([exe, "info", "--format", "{{.store.GraphDriverName}}"], timeout=60)
    if probe.rc != 0:
        return Check(
            "engine",
            "buildah",
            "broken",
            f"`buildah info` failed: {probe.last_line}",
            f"check containers.conf/storage.conf; {HOST_SETUP_HINT}",
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
            "runc not found; hpcenv's containers.conf runs podman with runc",
            f"{HOST_SETUP_HINT} (apt-get install runc)",
            required=True,
        )
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "oci-runtime",
            "runc",
            "broken",
            f"`runc --version` failed: {probe.last_line}",
            f"reinstall runc: {HOST_SETUP_HINT}",
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
            "nothing to do: hpcenv's containers.conf selects runc instead",
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
    "mpirun": f"{HOST_SETUP_HINT} (apt-get install openmpi-bin)",
    "mpiexec": f"{HOST_SETUP_HINT} (apt-get install openmpi-bin)",
    "srun": f"{HOST_SETUP_HINT} (slurm-wlm), then scripts/slurm-up.sh",
    "jsrun": "only on IBM LSF/CSM systems (Summit-class); nothing to do elsewhere",
}

_LAUNCHER_BROKEN_FIX = {
    "srun": "srun finds no slurm.conf/controller: start the local cluster with scripts/slurm-up.sh "
    "(or set SLURM_CONF to your cluster's slurm.conf)",
}


def check_launcher(host: Host, name: str) -> Check:
    exe = host.which(name)
    if exe is None:
        return Check("launcher", name, "missing", f"{name} not found on PATH", _LAUNCHER_FIX[name])
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "launcher",
            name,
            "broken",
            f"`{name} --version` failed: {probe.last_line}",
            _LAUNCHER_BROKEN_FIX.get(name, _LAUNCHER_FIX[name]),
        )
    real = os.path.realpath(exe)
    where = f" ({real})" if real != exe else ""
    return Check("launcher", name, "ok", probe.first_line + where)


# -- schedulers ---------------------------------------------------------------------------------
def check_slurm(host: Host) -> Check:
    exe = host.which("scontrol")
    if exe is None:
        return Check(
            "scheduler",
            "slurm",
            "missing",
            "scontrol not found on PATH",
            f"{HOST_SETUP_HINT} (slurm-wlm munge), then scripts/slurm-up.sh",
        )
    probe = host.run([exe, "ping"], timeout=20)
    if probe.rc == 0 and " is UP" in probe.output:
        return Check("scheduler", "slurm", "ok", probe.first_line)
    why = f"`scontrol ping`: {probe.last_line}"
    return Check(
        "scheduler",
        "slurm",
        "broken",
        why,
        "start the local controller and node with scripts/slurm-up.sh "
        "(or point SLURM_CONF at your cluster's slurm.conf)",
    )


def check_lsf(host: Host) -> Check:
    exe = host.which("bsub")
    if exe is None:
        return Check(
            "scheduler",
            "lsf",
            "missing",
            "bsub not found on PATH",
            "only needed on LSF sites (e.g. Summit): load the LSF environment",
        )
    probe = host.run([host.which("lsid") or exe, *([] if host.which("lsid") else ["-V"])])
    if probe.rc != 0:
        return Check(
            "scheduler",
            "lsf",
            "broken",
            f"LSF does not answer: {probe.last_line}",
            "source the site's LSF profile (profile.lsf) and check the master host",
        )
    return Check("scheduler", "lsf", "ok", probe.first_line)


def check_pbs(host: Host) -> Check:
    exe = host.which("qsub")
    if exe is None:
        return Check(
            "scheduler",
            "pbs",
            "missing",
            "qsub not found on PATH",
            "only needed on PBS/Torque sites: load the PBS environment",
        )
    qstat = host.which("qstat")
    probe = host.run([qstat, "-B"]) if qstat else host.run([exe, "--version"])
    if probe.rc != 0:
        return Check(
            "scheduler",
            "pbs",
            "broken",
            f"PBS server does not answer: {probe.last_line}",
            "check PBS_SERVER / the pbs_server daemon",
        )
    return Check("scheduler", "pbs", "ok", probe.first_line)


# -- tools --------------------------------------------------------------------------------------
def check_debootstrap(host: Host) -> Check:
    exe = host.which("debootstrap")
    if exe is None:
        return Check(
            "tool",
            "debootstrap",
            "missing",
            "debootstrap not found; it makes the base image when no registry is reachable",
            f"{HOST_SETUP_HINT} (apt-get install debootstrap)",
            required=True,
        )
    probe = _version(host, exe)
    if probe.rc != 0:
        return Check(
            "tool",
            "debootstrap",
            "broken",
            f"`debootstrap --version` failed: {probe.last_line}",
            f"reinstall: {HOST_SETUP_HINT}",
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
            f"{HOST_SETUP_HINT} (apt-get install shellcheck)",
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
            f"reinstall: {HOST_SETUP_HINT}",
        )
    return Check("tool", "shellcheck", "ok", f"shellcheck {version}")


# -- rehearsal sites ----------------------------------------------------------------------------
SITE_MPI_PREFIX = Path(os.environ.get("HPCENV_SITE_MPI_PREFIX", "/opt/site/intel-mpi"))


def check_site_mpi(host: Host) -> Check:
    """The ``local-bind`` rehearsal's site MPI (Intel MPI in a site prefix)."""
    name = "local-bind site MPI"
    lib = SITE_MPI_PREFIX / "lib" / "libmpi.so.12"
    fix = "scripts/site-mpi-setup.sh (Intel MPI from PyPI into the site prefix; make host does it)"
    if not lib.exists():
        return Check("rehearsal", name, "missing", f"{lib} not found", fix)
    version = (SITE_MPI_PREFIX / "VERSION").read_text().strip() if (
        SITE_MPI_PREFIX / "VERSION").is_file() else "?"  # fmt: skip
    probe = host.run([str(SITE_MPI_PREFIX / "bin" / "mpiexec.hydra"), "--version"], timeout=20)
    if probe.rc != 0:
        return Check("rehearsal", name, "broken", f"mpiexec.hydra: {probe.last_line}", fix)
    return Check("rehearsal", name, "ok", f"Intel MPI {version} in {SITE_MPI_PREFIX}")


def check_two_node(host: Host) -> Check:
    """Can the ``local-2node`` rehearsal (two Slurm nodes in network namespaces) run here?

    Really creates (and removes) a network namespace and a bridge, as the set-up script does."""
    name = "local-2node namespaces"
    fix = "needs root with CAP_NET_ADMIN/CAP_SYS_ADMIN, iproute2, util-linux and slurm-wlm"
    if os.geteuid() != 0:
        return Check("rehearsal", name, "missing", "not root: network namespaces need it", fix)
    missing = [t for t in ("ip", "nsenter", "unshare", "slurmd", "slurmctld", "munged")
               if host.which(t) is None]  # fmt: skip
    if missing:
        return Check("rehearsal", name, "missing", f"not on PATH: {', '.join(missing)}", fix)
    tag = f"hpcdr{os.getpid() % 100000}"
    ns = host.run(["ip", "netns", "add", tag])
    if ns.rc != 0:
        return Check("rehearsal", name, "broken", f"`ip netns add`: {ns.last_line}", fix)
    veth = host.run(["ip", "link", "add", f"{tag}a", "type", "veth", "peer", "name", "eth0",
                     "netns", tag])  # fmt: skip
    bridge = host.run(["ip", "link", "add", f"{tag}b", "type", "bridge"])
    host.run(["ip", "link", "del", f"{tag}a"])
    host.run(["ip", "link", "del", f"{tag}b"])
    host.run(["ip", "netns", "del", tag])
    for what, probe in (("veth pair", veth), ("bridge", bridge)):
        if probe.rc != 0:
            return Check("rehearsal", name, "broken", f"{what}: {probe.last_line}", fix)
    return Check(
        "rehearsal", name, "ok",
        "network namespace, veth pair and bridge work here: scripts/slurm-2node-up.sh can run",
    )  # fmt: skip


CHECKS: tuple[Callable[[Host], Check], ...] = (
    check_podman,
    check_docker,
    check_buildah,
    check_runc,
    check_crun,
    check_apptainer,
    *(partial(check_launcher, name=name) for name in _LAUNCHER_FIX),
    check_slurm,
    check_lsf,
    check_pbs,
    check_debootstrap,
    check_shellcheck,
    check_site_mpi,
    check_two_node,
)


def run_checks(path: str | None = None) -> list[Check]:
    """Every check against the host (``path`` replaces ``$PATH`` for finding programs)."""
    host = Host(path)
    return [check(host) for check in CHECKS]


def healthy(checks: Sequence[Check]) -> bool:
    """True when every check hpcenv needs on this host is ok."""
    return all(c.status == "ok" for c in checks if c.required)
