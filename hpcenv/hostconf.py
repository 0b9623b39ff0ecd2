"""podman's configuration, adjusted only where this host needs it, never replacing the user's.

Some hosts cannot run podman's defaults: crun refuses a v1/v2 *hybrid* cgroup layout
(``cgroups in hybrid mode not supported``), root without CAP_SYS_RESOURCE cannot raise the
default ulimits (``setrlimit RLIMIT_NOFILE: Operation not permitted``), and without systemd
there is no systemd cgroup manager or journald. :func:`host_needs` detects each from /proc and
/sys (no podman call) and :data:`NEEDS` says which containers.conf keys fix it and why.

The keys are applied through ``CONTAINERS_CONF_OVERRIDE``, which podman loads *after* the
system and user files, so the user's own configuration still counts. That variable exists
since podman 4.5 (podman PR #17895 / containers/common PR #1378, 2023-03-23); podman 4.3, as in
Debian 12, ignores it (its binary does not contain the name) and reads *only* the file that
``CONTAINERS_CONF`` names when that is set. For those, hpcenv writes one merged file: the files
podman would have read (or the user's own ``CONTAINERS_CONF``), then hpcenv's keys on top.

``HPCENV_CONTAINERS_CONF`` = ``auto`` (default: what the host needs), ``always`` (every key
below, whatever is detected) or ``never`` (leave podman alone).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from hpcenv.tables import merge

MODE_ENV = "HPCENV_CONTAINERS_CONF"
MODES = ("auto", "always", "never")
OVERRIDE_SINCE = (4, 5)  # first podman release that reads CONTAINERS_CONF_OVERRIDE
DEFAULT_ULIMIT = 1048576  # podman's rootful default for nofile and nproc
# Lowered limits, capped by the host's hard limits: nproc at the host's hard limit (96365 on the
# project's machine) still failed in runc ("error setting rlimit type 6: operation not
# permitted"); these values ran every build and job here.
ULIMIT_CAPS = {"nofile": 20000, "nproc": 32768}
CAP_SYS_RESOURCE = 24


@dataclass(frozen=True)
class HostFacts:
    """What decides podman's needs, read from /proc and /sys."""

    euid: int
    cgroup_layout: str  # unified | hybrid | legacy
    systemd: bool
    cap_sys_resource: bool
    nofile_hard: int
    nproc_hard: int
    crun: bool
    runc: bool


@dataclass(frozen=True)
class Need:
    """One thing this host needs from containers.conf: the keys and the reason."""

    key: str
    why: str
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)


def cgroup_layout(root: Path = Path("/sys/fs/cgroup")) -> str:
    """``unified`` (v2 only), ``hybrid`` (v1 controllers + v2 at unified/) or ``legacy``."""
    if (root / "cgroup.controllers").exists():
        return "unified"
    if (root / "unified" / "cgroup.controllers").exists():
        return "hybrid"
    return "legacy"


def _cap_effective(status: Path = Path("/proc/self/status")) -> int:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _hard(limit: int) -> int:
    hard = resource.getrlimit(limit)[1]
    return DEFAULT_ULIMIT if hard == resource.RLIM_INFINITY else min(hard, DEFAULT_ULIMIT)


def _which(name: str, path: str | None) -> str | None:
    return shutil.which(name) if path is None else shutil.which(name, path=path)


def read_facts(cgroup_root: Path = Path("/sys/fs/cgroup"), path: str | None = None) -> HostFacts:
    return HostFacts(
        euid=os.geteuid(),
        cgroup_layout=cgroup_layout(cgroup_root),
        systemd=Path("/run/systemd/system").is_dir(),
        cap_sys_resource=bool(_cap_effective() >> CAP_SYS_RESOURCE & 1),
        nofile_hard=_hard(resource.RLIMIT_NOFILE),
        nproc_hard=_hard(resource.RLIMIT_NPROC),
        crun=_which("crun", path) is not None,
        runc=_which("runc", path) is not None,
    )


def host_needs(facts: HostFacts) -> list[Need]:
    """What podman's defaults lack on a host with ``facts``; empty on a well-behaved host."""
    needs = []
    if facts.runc and facts.cgroup_layout == "hybrid":
        needs.append(
            Need(
                "hybrid-cgroups",
                "crun (podman's default runtime) refuses this host's hybrid v1/v2 cgroup layout; "
                "runc runs there",
                {"engine": {"runtime": "runc"}},
            )
        )
    elif facts.runc and not facts.crun:
        needs.append(
            Need(
                "no-crun",
                "crun (podman's default runtime) is not installed; runc is",
                {"engine": {"runtime": "runc"}},
            )
        )
    if not facts.systemd:
        needs.append(
            Need(
                "no-systemd",
                "systemd is not running: no systemd cgroup manager, no journald for events",
                {"engine": {"cgroup_manager": "cgroupfs", "events_logger": "file"}},
            )
        )
    if (
        facts.euid == 0
        and not facts.cap_sys_resource
        and (min(facts.nofile_hard, facts.nproc_hard) < DEFAULT_ULIMIT)
    ):
        nofile = min(facts.nofile_hard, ULIMIT_CAPS["nofile"])
        nproc = min(facts.nproc_hard, ULIMIT_CAPS["nproc"])
        ulimits = [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]
        needs.append(
            Need(
                "no-cap-sys-resource",
                f"root lacks CAP_SYS_RESOURCE, so podman's default ulimits ({DEFAULT_ULIMIT}) fail "
                "(setrlimit: Operation not permitted); containers get lower ones",
                {"containers": {"default_ulimits": ulimits}},
            )
        )
    return needs


def every_need(facts: HostFacts) -> list[Need]:
    """``always`` mode: every fix, as if the host needed them all."""
    worst = replace(
        facts,
        euid=0,
        cgroup_layout="hybrid",
        systemd=False,
        cap_sys_resource=False,
        crun=True,
        nofile_hard=min(facts.nofile_hard, DEFAULT_ULIMIT - 1),
        nproc_hard=min(facts.nproc_hard, DEFAULT_ULIMIT - 1),
    )
    return host_needs(worst)


def mode(env: Mapping[str, str]) -> str:
    from hpcenv.errors import ConfigError

    value = env.get(MODE_ENV, "auto") or "auto"
    if value not in MODES:
        raise ConfigError(f"{MODE_ENV}={value!r}: valid values are {', '.join(MODES)}")
    return value


# -- podman version --------------------------------------------------------------------------
@lru_cache(maxsize=4)
def podman_version(exe: str = "podman") -> tuple[int, ...] | None:
    """``(4, 3, 1)`` from ``podman --version``; None when podman is absent or says nothing."""
    path = shutil.which(exe)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, errors="replace", timeout=20
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def reads_override(version: tuple[int, ...] | None) -> bool:
    return version is not None and version >= OVERRIDE_SINCE


# -- the files podman would read -------------------------------------------------------------
def podman_sources(env: Mapping[str, str], euid: int | None = None) -> list[Path]:
    """containers.conf files podman reads, lowest priority first (containers.conf(5)).

    With ``CONTAINERS_CONF`` set, podman < 4.5 reads that file alone.
    """
    if env.get("CONTAINERS_CONF"):
        return [Path(env["CONTAINERS_CONF"])]
    files = [Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf")]
    files += sorted(Path("/etc/containers/containers.conf.d").glob("*.conf"))
    if (os.geteuid() if euid is None else euid) != 0:
        home = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "~"), ".config")
        user = Path(os.path.expanduser(home)) / "containers"
        files += [user / "containers.conf", *sorted((user / "containers.conf.d").glob("*.conf"))]
    return [f for f in files if f.is_file()]


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {type(value).__name__} as TOML")


def to_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """TOML for containers.conf-shaped data (tables of scalars, arrays and tables)."""
    scalars = [f"{_key(k)} = {_value(v)}" for k, v in data.items() if not isinstance(v, Mapping)]
    out = []
    if prefix and (scalars or not any(isinstance(v, Mapping) for v in data.values())):
        out.append(f"[{prefix}]")
    out += scalars
    text = "\n".join(out) + ("\n" if out else "")
    for k, v in data.items():
        if isinstance(v, Mapping):
            sub = to_toml(v, f"{prefix}.{_key(k)}" if prefix else _key(k))
            text += ("\n" if text else "") + sub
    return text


def _settings(needs: list[Need]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for need in needs:
        out = merge(out, need.settings)
    return out


def _header(needs: list[Need], sources: list[Path]) -> str:
    lines = [
        "# Written by hpcenv (hpcenv.hostconf); regenerated when the host or its files change."
    ]
    lines += [f"# read first: {s}" for s in sources]
    lines += [f"# hpcenv sets {', '.join(sorted(_flat(n.settings)))}: {n.why}" for n in needs]
    return "\n".join(lines) + "\n"


def _flat(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k, v in settings.items():
        name = f"{prefix}{k}"
        keys += _flat(v, name + ".") if isinstance(v, Mapping) else [name]
    return keys


def _write(path: Path, text: str) -> Path:
    """``path`` holding ``text``: kept when it is the user's own unchanged file, else written
    again (:func:`hpcenv.output.write_private`: a link at a fixed temporary name replaced
    ``~/.bashrc`` before, issue 40); podman reads it, so a file someone else wrote or may change
    is never left in place."""
    from hpcenv.errors import ConfigError
    from hpcenv.output import write_private
    from hpcenv.reads import open_own

    try:
        with open_own(path, "podman configuration") as handle:
            if handle.read(1 << 20) == text.encode():
                return path
    except ConfigError:
        pass  # missing, a link, not the user's own: written again below
    return write_private(path, text)


@dataclass(frozen=True)
class PodmanConf:
    """What hpcenv adds to podman's environment here, and why."""

    env: dict[str, str]
    needs: tuple[Need, ...]
    how: str  # none | override | merged | user


def podman_conf(
    env: Mapping[str, str] | None = None,
    facts: HostFacts | None = None,
    version: tuple[int, ...] | None | str = "detect",
) -> PodmanConf:
    """The environment variables that give podman what this host needs (maybe none)."""
    from hpcenv.paths import cache_dir

    env = dict(os.environ if env is None else env)
    chosen = mode(env)
    if chosen == "never":
        return PodmanConf({}, (), "none")
    if env.get("CONTAINERS_CONF_OVERRIDE"):
        return PodmanConf({}, (), "user")  # the user chose their override; keep it
    facts = facts or read_facts()
    needs = every_need(facts) if chosen == "always" else host_needs(facts)
    if not needs:
        return PodmanConf({}, (), "none")
    folder = cache_dir() / "podman"
    ver = podman_version() if version == "detect" else version
    if reads_override(ver if not isinstance(ver, str) else None):
        text = _header(needs, []) + to_toml(_settings(needs))
        path = _write(folder / "containers-override.conf", text)
        return PodmanConf({"CONTAINERS_CONF_OVERRIDE": str(path)}, tuple(needs), "override")
    sources = podman_sources(env, facts.euid)
    data: dict[str, Any] = {}
    for source in sources:
        try:
            data = merge(data, tomllib.loads(source.read_text()))
        except (OSError, tomllib.TOMLDecodeError) as err:
            from hpcenv.errors import ConfigError

            raise ConfigError(f"{source}: cannot read podman's configuration: {err}") from err
    text = _header(needs, sources) + to_toml(merge(data, _settings(needs)))
    path = _write(folder / "containers.conf", text)
    return PodmanConf({"CONTAINERS_CONF": str(path)}, tuple(needs), "merged")
