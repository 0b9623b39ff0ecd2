"""podman's configuration: only what a host needs, on top of the user's own (hpcenv.hostconf)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from hpcenv import hostconf
from hpcenv.errors import ConfigError
from hpcenv.hostconf import HostFacts, host_needs, podman_conf

GOOD = HostFacts(
    euid=0,
    cgroup_layout="unified",
    systemd=True,
    cap_sys_resource=True,
    nofile_hard=1 << 20,
    nproc_hard=1 << 20,
    crun=True,
    runc=True,
)
# the project's machine: hybrid cgroups, no systemd, root without CAP_SYS_RESOURCE, runc only
THIS_KIND = replace(
    GOOD,
    cgroup_layout="hybrid",
    systemd=False,
    cap_sys_resource=False,
    nofile_hard=20000,
    nproc_hard=96365,
    crun=False,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))


def test_a_well_behaved_host_gets_nothing() -> None:
    assert host_needs(GOOD) == []
    assert podman_conf({}, GOOD, version=(4, 3, 1)).env == {}
    assert host_needs(replace(GOOD, euid=1000, cap_sys_resource=False, nofile_hard=1024)) == []


def test_each_need_is_detected_with_its_keys() -> None:
    needs = {n.key: n.settings for n in host_needs(THIS_KIND)}
    assert needs == {
        "hybrid-cgroups": {"engine": {"runtime": "runc"}},
        "no-systemd": {"engine": {"cgroup_manager": "cgroupfs", "events_logger": "file"}},
        "no-cap-sys-resource": {
            "containers": {"default_ulimits": ["nofile=20000:20000", "nproc=32768:32768"]}
        },
    }
    assert [n.key for n in host_needs(replace(GOOD, crun=False))] == ["no-crun"]


def test_new_podman_gets_an_override_with_only_hpcenv_keys(tmp_path: Path) -> None:
    conf = podman_conf({"CONTAINERS_CONF": "/etc/mine.conf"}, THIS_KIND, version=(4, 5, 0))
    assert conf.how == "override" and set(conf.env) == {"CONTAINERS_CONF_OVERRIDE"}
    data = tomllib.loads(Path(conf.env["CONTAINERS_CONF_OVERRIDE"]).read_text())
    assert data["engine"] == {
        "runtime": "runc",
        "cgroup_manager": "cgroupfs",
        "events_logger": "file",
    }
    assert set(data) == {"engine", "containers"}


def test_old_podman_gets_the_users_file_merged_under_hpcenv_keys(tmp_path: Path) -> None:
    mine = tmp_path / "mine.conf"
    mine.write_text(
        '[containers]\nenv = ["A=1"]\ndefault_ulimits = ["nofile=5:5"]\n'
        '[engine]\nruntime = "crun"\nimage_parallel_copies = 2\n'
        '[engine.runtimes]\nrunc = ["/opt/runc"]\n'
    )
    conf = podman_conf({"CONTAINERS_CONF": str(mine)}, THIS_KIND, version=(4, 3, 1))
    assert conf.how == "merged" and set(conf.env) == {"CONTAINERS_CONF"}
    text = Path(conf.env["CONTAINERS_CONF"]).read_text()
    data = tomllib.loads(text)
    assert data["containers"]["env"] == ["A=1"]  # the user's settings survive
    assert data["engine"]["image_parallel_copies"] == 2
    assert data["engine"]["runtimes"] == {"runc": ["/opt/runc"]}
    assert data["engine"]["runtime"] == "runc"  # the host's needs win where they must
    assert data["containers"]["default_ulimits"] == ["nofile=20000:20000", "nproc=32768:32768"]
    assert f"# read first: {mine}" in text and "crun (podman's default runtime) refuses" in text


def test_modes_and_the_users_own_override(tmp_path: Path) -> None:
    assert podman_conf({hostconf.MODE_ENV: "never"}, THIS_KIND, version=(4, 3, 1)).env == {}
    always = podman_conf({hostconf.MODE_ENV: "always"}, GOOD, version=(5, 0))
    assert {n.key for n in always.needs} == {"hybrid-cgroups", "no-systemd", "no-cap-sys-resource"}
    mine = {"CONTAINERS_CONF_OVERRIDE": "/etc/x.conf"}
    assert podman_conf(mine, THIS_KIND, version=(5, 0)).how == "user"
    with pytest.raises(ConfigError, match="HPCENV_CONTAINERS_CONF='sometimes': valid values"):
        podman_conf({hostconf.MODE_ENV: "sometimes"}, THIS_KIND, version=(5, 0))


def test_unreadable_user_conf_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("[engine\n")
    with pytest.raises(ConfigError, match=f"{bad}: cannot read podman's configuration"):
        podman_conf({"CONTAINERS_CONF": str(bad)}, THIS_KIND, version=(4, 3, 1))


def test_toml_writer_round_trips() -> None:
    data = {
        "a": {
            "s": 'q"\\\n',
            "n": 3,
            "f": 1.5,
            "b": True,
            "l": ["x", 2],
            "t": {"u": {"v": []}},
            "weird key": {"k": 1},
        },
        "empty": {},
    }
    assert tomllib.loads(hostconf.to_toml(data)) == data


def test_this_host_facts_are_read() -> None:
    facts = hostconf.read_facts()
    assert facts.cgroup_layout in ("unified", "hybrid", "legacy")
    assert facts.nofile_hard > 0 and facts.nproc_hard > 0


def test_bad_mode_exits_2_from_the_installed_cli() -> None:
    import sys

    exe = Path(sys.executable).with_name("hpcenv")
    env = {**os.environ, hostconf.MODE_ENV: "sometimes"}
    proc = subprocess.run(
        [str(exe), "doctor"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "error: HPCENV_CONTAINERS_CONF='sometimes': valid values are auto, always, never"
    )


def _podman_printenv(env: dict[str, str], image: str) -> subprocess.CompletedProcess[str]:
    argv = ["podman", "run", "--rm", image, "sh", "-c", 'printf %s "$HPCENV_PROBE"']
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.podman
@pytest.mark.alongside
def test_real_podman_keeps_the_users_conf_and_gets_the_hosts_needs(tmp_path: Path) -> None:
    """The user's own containers.conf (an ``env`` entry) reaches the container, and the run
    works on this host only because hpcenv's needed keys came with it."""
    from hpcenv.baseimage import ensure_base_image
    from hpcenv.engines import engine_env, get_engine

    image = ensure_base_image(engine=get_engine("podman"))
    mine = tmp_path / "mine.conf"
    mine.write_text('[containers]\nenv = ["HPCENV_PROBE=from-the-users-conf"]\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERS_CONF")}
    proc = _podman_printenv(engine_env({**base, "CONTAINERS_CONF": str(mine)}), image)
    assert (proc.returncode, proc.stdout) == (0, "from-the-users-conf"), proc.stderr
    if hostconf.host_needs(hostconf.read_facts()):  # and without hpcenv's keys it fails here
        proc = _podman_printenv({**base, "CONTAINERS_CONF": str(mine)}, image)
        assert proc.returncode != 0


@pytest.mark.podman
@pytest.mark.alongside
def test_real_podman_reads_override_exactly_when_hpcenv_thinks_so(tmp_path: Path) -> None:
    """The version gate checked on this host's podman: CONTAINERS_CONF_OVERRIDE is read from
    podman 4.5 on; Debian 12's podman 4.3.1 ignores it (then hpcenv merges instead)."""
    from hpcenv.baseimage import ensure_base_image
    from hpcenv.engines import containers_conf_path, get_engine

    image = ensure_base_image(engine=get_engine("podman"))
    probe = tmp_path / "override.conf"
    probe.write_text('[containers]\nenv = ["HPCENV_PROBE=from-the-override"]\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAINERS_CONF", "HPCENV_"))}
    env = {
        **base,
        "CONTAINERS_CONF": str(containers_conf_path()),
        "CONTAINERS_CONF_OVERRIDE": str(probe),
    }
    proc = _podman_printenv(env, image)
    assert proc.returncode == 0, proc.stderr
    honoured = proc.stdout == "from-the-override"
    hostconf.podman_version.cache_clear()
    version = hostconf.podman_version()
    assert honoured == hostconf.reads_override(version), (version, proc.stdout)
