"""``hpcenv sites init --from-host``: a site file from what the host says about itself.

Each fact comes from one command (:func:`command`), read by one small parser; a value read from
a command's output is recorded as ``verified`` (with the command), a value chosen from a rule
of thumb as ``assumed`` (with the rule), and a value only the user knows (a project to charge)
as ``placeholder``. The commands run on this host (:class:`LocalHost`) or are read from a folder
of recorded outputs, one ``KEY.txt`` per command (:class:`RecordedHost`; tests keep real sites'
recordings under ``tests/data/hosts/``), or on a login node over SSH (:class:`TransportHost`). The written file is validated before it is kept.

Outputs are other programs' text, so they are read defensively: bytes that are not UTF-8 become
U+FFFD, a recorded file is read up to :data:`MAX_OUTPUT` bytes, and a parser that cannot find
what it needs (a field missing, a count that is not a small whole number) raises
:class:`~hpcenv.errors.EnvironmentProblem` naming the command and the field, never a traceback;
optional facts (a PMIx version, a GPU model) fall back to the documented default instead.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Protocol

from hpcenv.errors import EnvironmentProblem
from hpcenv.jobs.schedulers import NO_SCHEDULER, SCHEDULERS

# Node-local folders, most preferred first: (path, kind).
NODE_LOCAL = (
    ("/mnt/bb", "nvme"),
    ("/local/scratch", "ssd"),
    ("/lscratch", "ssd"),
    ("/dev/shm", "shm"),
    ("/tmp", "tmp"),
)

# The schedulers' and the container runtimes' commands are theirs (``detect``, ``installed``): :func:`command` asks them.
COMMANDS: dict[str, list[str]] = {
    "uname": ["uname", "-m"],
    "lscpu": ["lscpu"],
    "meminfo": ["cat", "/proc/meminfo"],
    "nvidia-smi": ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
    "rocm-smi": ["rocm-smi", "--showproductname"],
    "rocm-version": ["cat", "/opt/rocm/.info/version"],
    "xpu-smi": ["xpu-smi", "discovery"],
    "srun-mpi": ["srun", "--mpi=list"],
    "jsrun": ["jsrun", "--version"],
    "mpirun": ["mpirun", "--version"],
    "mpichversion": ["mpichversion"],
    "pmix": ["pkg-config", "--modversion", "pmix"],
    "modules": ["bash", "-lc", "module -t avail 2>&1"],
    "findmnt": ["findmnt", "-rn", "-t", "lustre,gpfs,nfs,nfs4", "-o", "TARGET,FSTYPE"],
    # df prints a line for each folder there is (and exits 1 for those there are not)
    "node-local": ["df", "-Pk", *(path for path, _ in NODE_LOCAL)],
}

# A recorded output larger than this is not a command's output (lscpu is ~2 KiB, modules ~200 KiB).
MAX_OUTPUT = 8 * 1024 * 1024
# Installed memory is a nominal DIMM total; MemTotal is that less firmware/kernel reservations.
NOMINAL_GB = (2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


def _scheduler_commands() -> dict[str, list[str]]:
    """Each registered scheduler's detection commands, by program name, in detection order."""
    return {
        argv[0]: list(argv) for s in SCHEDULERS.values() for argv in (s.detect, s.installed) if argv
    }


def recorded_keys() -> list[str]:
    """Every key a recording may hold: this module's commands, the schedulers' and the
    runtimes' probes."""
    return sorted({*COMMANDS, *_scheduler_commands(), *_runtime_commands()})


def command(key: str) -> list[str]:
    """The argv recorded as ``KEY.txt``: from :data:`COMMANDS` or a scheduler's own."""
    return COMMANDS.get(key) or _scheduler_commands().get(key) or _runtime_commands()[key]


class CommandHost(Protocol):
    name: str

    def run(self, key: str) -> tuple[int, str]: ...


class LocalHost:
    """Runs :func:`command` here; a missing program is exit code 127."""

    name = "this host"

    def run(self, key: str) -> tuple[int, str]:
        try:
            proc = subprocess.run(
                command(key),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return 127, ""
        except (OSError, subprocess.TimeoutExpired) as err:
            return 124, str(err)
        return proc.returncode, proc.stdout + proc.stderr


class TransportHost:
    """Runs :func:`command` through a job transport (a login node over SSH)."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.name = transport.describe()

    def run(self, key: str) -> tuple[int, str]:
        import shlex

        done = self.transport.run(shlex.join(command(key)), timeout=60)
        return done.returncode, done.stdout + done.stderr


class RecordedHost:
    """Outputs recorded earlier: ``FOLDER/KEY.txt`` (absent: the command was not there)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = f"recorded outputs in {folder}"

    def run(self, key: str) -> tuple[int, str]:
        path = self.folder / f"{key}.txt"
        if not path.is_file():
            if path.exists():  # a folder named KEY.txt: a broken recording, not an absent command
                raise EnvironmentProblem(f"sites init: {path} is not a file")
            return 127, ""
        try:
            with path.open("rb") as f:
                data = f.read(MAX_OUTPUT + 1)
        except OSError as err:
            raise EnvironmentProblem(f"sites init: cannot read {path}: {err.strerror}") from None
        if len(data) > MAX_OUTPUT:
            raise EnvironmentProblem(
                f"sites init: {path} is larger than {MAX_OUTPUT // 1024 // 1024} MiB; "
                "not a recorded command output"
            )
        return 0, data.decode(errors="replace")


@dataclass
class Detection:
    """Site data found so far, and for each dotted field why it holds its value."""

    data: dict[str, Any] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)
    assumed: dict[str, str] = field(default_factory=dict)
    placeholder: dict[str, str] = field(default_factory=dict)

    def set(
        self,
        dotted: str,
        value: Any,
        *,
        verified: str = "",
        assumed: str = "",
        placeholder: str = "",
    ) -> None:
        cur = self.data
        *parents, last = dotted.split(".")
        for part in parents:
            cur = cur.setdefault(part, {})
        cur[last] = value
        for book, why in (
            (self.verified, verified),
            (self.assumed, assumed),
            (self.placeholder, placeholder),
        ):
            book.pop(dotted, None)
            if why:
                book[dotted] = why


# -- parsers (pure: text in, values out) --------------------------------------------------------
def _unreadable(what: str, why: str) -> EnvironmentProblem:
    return EnvironmentProblem(f"sites init: cannot read the output of {what}: {why}")


def _whole(value: str | None, what: str, field: str, *, high: int) -> int:
    """``value`` as a whole number from 1 to ``high``, or an error naming the field."""
    if value is None:
        raise _unreadable(what, f"no {field!r} line")
    if not re.fullmatch(r"[0-9]{1,18}", value) or not 1 <= int(value) <= high:
        shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
        raise _unreadable(what, f"{field} is {shown}, not a whole number from 1 to {high}")
    return int(value)


def parse_colon_table(text: str) -> dict[str, str]:
    """``Key:   value`` lines (lscpu, meminfo)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def parse_lscpu(text: str) -> dict[str, Any]:
    t = parse_colon_table(text)
    return {
        "arch": t.get("Architecture"),
        "sockets": _whole(t.get("Socket(s)"), "lscpu", "Socket(s)", high=1024),
        "cores_per_socket": _whole(
            t.get("Core(s) per socket"), "lscpu", "Core(s) per socket", high=65536
        ),
        "threads_per_core": _whole(
            t.get("Thread(s) per core", "1"), "lscpu", "Thread(s) per core", high=64
        ),
    }


def parse_meminfo_gb(text: str) -> tuple[int, float]:
    """(nominal GB, MemTotal in GiB)."""
    total = parse_colon_table(text).get("MemTotal")
    kib = _whole(
        (total.split() or [""])[0] if total is not None else None,
        "/proc/meminfo",
        "MemTotal",
        high=2**50,
    )
    gib = kib / 1024 / 1024
    nominal = min(NOMINAL_GB, key=lambda n: abs(n - gib))
    return (nominal if abs(nominal - gib) / nominal <= 0.06 else round(gib)), gib


def parse_nvidia_smi(text: str) -> tuple[int, str, str]:
    """(GPU count, model, driver) from ``name, driver_version`` lines."""
    rows = [[c.strip() for c in line.split(",")] for line in text.splitlines() if "," in line]
    if not rows or not rows[0][0] or not rows[0][1]:
        raise _unreadable("nvidia-smi", "no 'name, driver_version' line")
    return len(rows), rows[0][0], rows[0][1]


def parse_rocm_smi(text: str) -> tuple[int, str]:
    gpus = set(re.findall(r"^GPU\[(\d+)\]", text, re.MULTILINE))
    series = re.search(r"Card Series:\s*(.+)", text)
    model = series.group(1).strip() if series else "AMD GPU"
    m = re.search(r"\b(MI\d+[A-Z]*)\b", model)
    return len(gpus), m.group(1) if m else model


def parse_xpu_smi(text: str) -> tuple[int, str]:
    names = re.findall(r"Device Name:\s*([^|\n]+)", text)
    return len(names), names[0].strip() if names else "Intel GPU"


def parse_scontrol(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_srun_mpi_list(text: str) -> tuple[list[str], int | None]:
    """Plugin names and the PMIx major of ``pmix_vN``."""
    names = [w.strip() for w in text.splitlines() if w.startswith(("\t", " ", "srun: "))]
    names = [n.removeprefix("srun: ").strip() for n in names]
    names = [n for n in names if n and " " not in n]
    major = re.search(r"pmix_v(\d{1,3})(?!\d)", text)
    return names, int(major.group(1)) if major else None


def parse_mpi_version(text: str) -> tuple[str, str] | None:
    """(name, version) from ``mpirun --version`` or ``mpichversion``."""
    rules = (
        (r"\(Open MPI\) (\d[\w.]*)", "openmpi"),
        (r"IBM Spectrum MPI\)? ?(?:Version )?(\d[\w.]*)", "spectrum-mpi"),
        (r"Intel\(R\) MPI Library.*Version (\d[\w.]*)", "intel-mpi"),
        (r"MPICH Version:\s*(\d[\w.]*)", "mpich"),
        (r"HYDRA build details:\s*\n\s*Version:\s*(\d[\w.]*)", "mpich"),
    )
    for pattern, name in rules:
        m = re.search(pattern, text)
        if m:
            return name, m.group(1)
    return None


def parse_modules(text: str) -> dict[str, list[str]]:
    """``name -> [versions]`` from ``module -t avail`` (defaults first when marked)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if "/" not in line or line.endswith(":") or line.startswith("/"):
            continue
        name, _, version = line.partition("/")
        default = version.endswith(("(default)", "(D)"))
        version = re.sub(r"\((default|D)\)$", "", version)
        versions = out.setdefault(name, [])
        versions.insert(0, version) if default else versions.append(version)
    return out


def parse_findmnt(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split()[:2]) for line in text.splitlines() if len(line.split()) >= 2]  # type: ignore[misc]


def parse_df(text: str) -> list[tuple[str, int]]:
    """(mount point, size in GB) per ``df -Pk`` line."""
    out = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 6 and re.fullmatch(r"[0-9]{1,18}", cols[1]):
            out.append((cols[5], int(int(cols[1]) * 1024 / 1e9)))
    return out


def parse_pmix_major(text: str) -> int | None:
    """The major of ``pkg-config --modversion pmix`` (``4.2.9``), None when it is not one."""
    m = re.fullmatch(r"\s*(\d{1,3})(?:\.[\w.-]*)?\s*", text)
    return int(m.group(1)) if m else None


# -- detection ----------------------------------------------------------------------------------
def _ok(host: CommandHost, key: str) -> str | None:
    rc, out = host.run(key)
    return out if rc == 0 and out.strip() else None


LABELS = {"node-local": "`df -Pk` of " + ", ".join(p for p, _ in NODE_LOCAL)}


def _by(key: str) -> str:
    return LABELS.get(key) or "`" + " ".join(command(key)) + "`"


def _purpose(path: str) -> str:
    low = path.lower()
    for word, purpose in (
        ("home", "home"),
        ("proj", "project"),
        ("cfs", "project"),
        ("sw", "software"),
        ("software", "software"),
        ("dataset", "datasets"),
    ):
        if word in low.split("/") or f"/{word}" in low:
            return purpose
    return "scratch"


def detect(host: CommandHost, name: str) -> Detection:
    """Everything the host says, as site data with provenance."""
    d = Detection()
    on = f" on {host.name}, {date.today().isoformat()}"
    d.set("name", name)
    d.set("description", f"{name}: written by hpcenv sites init --from-host{on}")
    d.data["_modules"] = parse_modules(_ok(host, "modules") or "")
    _node(host, d, on)
    _gpu(host, d, on)
    _scheduler(host, d, on)
    _mpi(host, d, on)
    _runtime(host, d, on)
    _storage(host, d, on)
    return d


def _node(host: CommandHost, d: Detection, on: str) -> None:
    text = _ok(host, "lscpu")
    if text is None:
        raise _cannot("lscpu", host)
    cpu = parse_lscpu(text)
    arch = cpu["arch"] or (_ok(host, "uname") or "").strip()
    d.set("arch", arch, verified=_by("lscpu") + on)
    for key in ("sockets", "cores_per_socket", "threads_per_core"):
        d.set(f"node.{key}", cpu[key], verified=_by("lscpu") + on)
    mem = _ok(host, "meminfo")
    if mem is None:
        raise _cannot("meminfo", host)
    nominal, gib = parse_meminfo_gb(mem)
    d.set(
        "node.memory_gb",
        nominal,
        assumed=f"MemTotal {gib:.1f} GiB ({_by('meminfo')}{on}) rounded to the nominal size",
    )


def _gpu(host: CommandHost, d: Detection, on: str) -> None:
    if text := _ok(host, "nvidia-smi"):
        count, model, driver = parse_nvidia_smi(text)
        d.set("gpu.vendor", "nvidia", verified=_by("nvidia-smi") + on)
        d.set("gpu.driver", driver, verified=_by("nvidia-smi") + on)
    elif text := _ok(host, "rocm-smi"):
        count, model = parse_rocm_smi(text)
        d.set("gpu.vendor", "amd", verified=_by("rocm-smi") + on)
        if version := _ok(host, "rocm-version"):
            d.set("gpu.rocm", version.strip().split("-")[0], verified=_by("rocm-version") + on)
        elif rocm := d.data["_modules"].get("rocm"):
            d.set(
                "gpu.rocm",
                rocm[0],
                assumed=f"the default (or first) rocm module ({_by('modules')})",
            )
    elif text := _ok(host, "xpu-smi"):
        count, model = parse_xpu_smi(text)
        d.set("gpu.vendor", "intel", verified=_by("xpu-smi") + on)
    else:
        d.set("gpu.vendor", "none", verified="no nvidia-smi, rocm-smi or xpu-smi" + on)
        d.set("node.gpus", 0, verified="no nvidia-smi, rocm-smi or xpu-smi" + on)
        return
    key = {"nvidia": "nvidia-smi", "amd": "rocm-smi", "intel": "xpu-smi"}[d.data["gpu"]["vendor"]]
    d.set("node.gpus", count, verified=_by(key) + on)
    d.set(
        "node.gpu_model",
        re.sub(r"[^A-Za-z0-9_.+-]+", "-", model).strip("-"),
        verified=_by(key) + on,
    )


def _scheduler(host: CommandHost, d: Detection, on: str) -> None:
    """The first registered scheduler whose ``detect`` answers, or whose ``installed`` is there."""
    for sched in SCHEDULERS.values():
        key = sched.detect[0]
        if config := _ok(host, key):
            d.set("scheduler.kind", sched.name, verified=_by(key) + on)
        elif sched.installed and host.run(sched.installed[0])[0] != 127:
            d.set(
                "scheduler.kind",
                sched.name,
                assumed=f"{sched.installed[0]} is installed but no controller answered{on}",
            )
        else:
            continue
        *others, (last, why) = sched.launchers
        launcher, reason = next(((n, w) for n, w in others if _ok(host, n)), (last, why))
        d.set("scheduler.launcher", launcher, assumed=reason)
        if sched.name == "slurm":
            _slurm(host, d, on, config or "")
        if sched.needs_account:
            d.set(
                "scheduler.account",
                "PROJ123",
                placeholder=f"your project id ({sched.submit_command} {sched.account_flag})",
            )
        return
    tried = list(_scheduler_commands())
    d.set(
        "scheduler.kind", NO_SCHEDULER, verified=f"no {', '.join(tried[:-1])} or {tried[-1]}" + on
    )
    d.set("scheduler.launcher", "mpirun", assumed="no scheduler: mpirun")


def _slurm(host: CommandHost, d: Detection, on: str, config: str) -> None:
    """What Slurm's configuration and srun say beyond its presence: the MPI plugin, accounting."""
    conf = parse_scontrol(config)
    plugins, major = parse_srun_mpi_list(_ok(host, "srun-mpi") or "")
    default = conf.get("MpiDefault", "none")
    plugin = (
        default
        if default != "none"
        else next((p for p in ("cray_shasta", "pmix", "pmi2") if p in plugins), None)
    )
    if plugin:
        src = "MpiDefault in " + _by("scontrol") if default != "none" else _by("srun-mpi")
        d.set("scheduler.mpi_plugin", plugin, verified=src + on)
    d.data["_srun"] = {"plugins": plugins, "pmix_major": major}
    if "associations" in conf.get("AccountingStorageEnforce", ""):
        d.set(
            "scheduler.account",
            "PROJ123",
            placeholder="your project id (AccountingStorageEnforce has associations)",
        )


def _mpi(host: CommandHost, d: Detection, on: str) -> None:
    modules = d.data.pop("_modules")
    found = None
    src = ""
    if modules.get("cray-mpich"):
        found, src = ("cray-mpich", modules["cray-mpich"][0]), _by("modules")
    else:
        for key in ("mpirun", "mpichversion"):
            if (text := _ok(host, key)) and (parsed := parse_mpi_version(text)):
                found, src = parsed, _by(key)
                break
    if found is None:
        d.set(
            "mpi.spec",
            "openmpi@4.1.6",
            placeholder="no MPI found on this host: name@version of the site's MPI",
        )
        found = ("openmpi", "4.1.6")
    else:
        d.set("mpi.spec", f"{found[0]}@{found[1]}", verified=src + on)
    name, version = found
    srun = d.data.pop("_srun", {"plugins": [], "pmix_major": None})
    bind = name in ("cray-mpich", "spectrum-mpi")
    if name == "cray-mpich":
        d.set("mpi.pmi", "cray-pmi@6", assumed="Cray MPICH starts through Cray PMI (cray_shasta)")
        d.set("mpi.fabric", "libfabric", assumed="Cray MPICH runs over libfabric (Slingshot)")
        d.set(
            "mpi.root",
            f"/opt/cray/pe/mpich/{version}",
            assumed="the HPE Cray PE install prefix; check `module show cray-mpich`",
        )
        if d.data["scheduler"]["kind"] == "slurm" and "mpi_plugin" not in d.data["scheduler"]:
            d.set(
                "scheduler.mpi_plugin",
                "cray_shasta",
                assumed="HPE Cray EX: srun starts Cray MPICH through the cray_shasta plugin",
            )
    elif "pmix" in srun["plugins"] or _ok(host, "pmix"):
        major = srun["pmix_major"]
        pkg = parse_pmix_major(_ok(host, "pmix") or "") if major is None else None
        if pkg is not None:
            major = pkg
            d.set("mpi.pmi", f"pmix@{major}", verified=_by("pmix") + on)
        elif major is not None:
            d.set("mpi.pmi", f"pmix@{major}", verified=_by("srun-mpi") + on)
        else:
            d.set("mpi.pmi", "pmix@4", assumed="srun lists pmix without a version")
    elif "pmi2" in srun["plugins"]:
        d.set("mpi.pmi", "pmi2", verified=_by("srun-mpi") + on)
    else:
        d.set("mpi.pmi", "pmi2", assumed="no PMIx found; PMI-2 is the common fallback")
    if "fabric" not in d.data["mpi"]:
        d.set("mpi.fabric", "shm", assumed="no fabric library detected; shared memory only")
    d.set(
        "mpi.model",
        "bind" if bind else "hybrid",
        assumed=(
            "the site MPI is bound into images"
            if bind
            else "the image carries its own MPI of the same family and PMI"
        ),
    )
    picks = [f"{m}/{modules[m][0]}" for m in ("cray-mpich", "rocm", "cuda") if modules.get(m)]
    if picks:
        d.set(
            "modules", picks, assumed="MPI and GPU modules available here (" + _by("modules") + ")"
        )


def _runtime_commands() -> dict[str, list[str]]:
    """Each detectable runtime's probe, by kind, in the runtimes' detection order
    (:attr:`hpcenv.jobs.runtimes.base.ContainerRuntime.detect_rank`)."""
    from hpcenv.jobs.runtimes.registry import known_kinds, runtime_class

    ranked = []
    for kind in known_kinds():
        cls = runtime_class(kind)
        if cls.detect_rank is not None and cls.probe is not None:
            ranked.append((cls.detect_rank, kind, list(cls.probe.argv)))
    return {kind: argv for _, kind, argv in sorted(ranked)}


def _runtime(host: CommandHost, d: Detection, on: str) -> None:
    for key in _runtime_commands():
        if _ok(host, key):
            d.set("runtime.kind", key, verified=_by(key) + on)
            return
    d.set("runtime.kind", "apptainer", placeholder="no container runtime found on this host")


def _storage(host: CommandHost, d: Detection, on: str) -> None:
    mounts = parse_findmnt(_ok(host, "findmnt") or "")
    systems = []
    for target, fstype in mounts:
        kind = "nfs" if fstype.startswith("nfs") else fstype
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", target.strip("/")) or "root"
        systems.append({"name": name, "kind": kind, "path": target, "purpose": _purpose(target)})
    if systems:
        d.set("filesystems", systems, verified=_by("findmnt") + on)
        for i, fs in enumerate(systems):
            d.assumed[f"filesystems.{i}.purpose"] = f"from the path {fs['path']}"
    sizes = dict(parse_df(host.run("node-local")[1]))  # exit 1: some folders are absent
    for path, kind in NODE_LOCAL:
        if path in sizes:
            # Per user: these folders are shared by everyone on the node, and a job's folder
            # under a path another user can predict (and make first) could be taken over. hpcenv
            # makes $USER 0700 and checks it is ours (templates/jobs/_lib.sh); /mnt/bb/$USER is
            # also how OLCF names the burst buffer.
            local = {"kind": kind, "path": f"{path}/$USER", "size_gb": sizes[path]}
            d.set("node_local", local, verified=_by("node-local") + on)
            d.assumed["node_local.path"] = "per user ($USER) by hpcenv, for multi-user safety"
            break


def _cannot(key: str, host: CommandHost) -> Exception:
    from hpcenv.errors import EnvironmentProblem

    return EnvironmentProblem(f"sites init: {_by(key)} gave nothing on {host.name}")


def site_data(detection: Detection) -> dict[str, Any]:
    """The site file's mapping, fields in the usual order, provenance last."""
    order = (
        "name",
        "description",
        "arch",
        "node",
        "gpu",
        "mpi",
        "scheduler",
        "runtime",
        "filesystems",
        "node_local",
        "modules",
    )
    data = {k: detection.data[k] for k in order if k in detection.data}
    provenance = {
        k: v
        for k, v in (
            ("verified", detection.verified),
            ("assumed", detection.assumed),
            ("placeholder", detection.placeholder),
        )
        if v
    }
    return {**data, "provenance": provenance}


def _umask() -> int:
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_site(
    data: dict[str, Any],
    out: Path,
    *,
    force: bool = False,
    validate: Callable[[Path], object] | None = None,
) -> Path:
    """Write ``out`` and validate it; a site that does not validate is not kept."""
    import os

    import yaml

    from hpcenv.errors import ConfigError

    if out.exists() and not force:
        raise ConfigError(f"{out} exists; pass --force to replace it")
    header = (
        "# Written by `hpcenv sites init --from-host`. provenance says which values were read\n"
        "# (verified), guessed (assumed) or must be filled in (placeholder).\n"
    )
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    # A new file with a random name (O_CREAT|O_EXCL, mode 0600): a symlink planted at a
    # predictable temporary name is never followed.
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".yaml", dir=out.parent)
    tmp = Path(name)
    with os.fdopen(fd, "w") as f:
        f.write(header + yaml.safe_dump(data, sort_keys=False, width=100))
    os.chmod(tmp, 0o666 & ~_umask())
    try:
        if validate is not None:
            validate(tmp)
    except ConfigError as err:  # name the file the user asked for, not the temporary one
        tmp.unlink(missing_ok=True)
        raise ConfigError(str(err).replace(str(tmp), str(out))) from None
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return out
