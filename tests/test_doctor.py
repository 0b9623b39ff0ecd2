"""hpcenv doctor: real checks on this host, and fix messages under a faked PATH."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcenv import doctor
from hpcenv.cli.main import app


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


@pytest.mark.podman
@pytest.mark.alongside
def test_real_host_reports_podman_ok():
    checks = _by_name(doctor.run_checks())
    podman = checks["podman"]
    assert podman.status == "ok", podman
    assert "runc runtime" in podman.why and "containers.conf" in podman.why
    assert checks["runc"].status == "ok"
    assert doctor.healthy(list(checks.values()))
    # every check says why; every problem says how to fix it
    for c in checks.values():
        assert c.why
        assert c.status == "ok" or c.fix, c


def test_empty_path_reports_missing_with_fix(tmp_path):
    checks = _by_name(doctor.run_checks(path=str(tmp_path)))
    podman = checks["podman"]
    assert podman.status == "missing" and podman.required
    assert "apt-get install podman runc" in podman.fix
    assert checks["runc"].status == "missing"
    assert checks["debootstrap"].status == "missing"
    assert "podman helper container" in checks["apptainer"].why
    for name in ("mpirun", "srun", "jsrun", "mpiexec", "slurm", "lsf", "pbs", "shellcheck"):
        assert checks[name].status == "missing" and checks[name].fix
    assert not doctor.healthy(list(checks.values()))


def test_broken_podman_explains_the_runtime(tmp_path):
    _script(
        tmp_path,
        "podman",
        'echo "Error: crun: cgroups in hybrid mode not supported, use runc" >&2; exit 125',
    )
    _script(tmp_path, "scontrol", 'echo "Slurmctld(primary) at node is DOWN"; exit 1')
    checks = _by_name(doctor.run_checks(path=str(tmp_path)))
    podman = checks["podman"]
    assert podman.status == "broken"
    assert "hybrid mode" in podman.why and "runc" in podman.fix
    assert checks["slurm"].status == "broken" and "SLURM_CONF" in checks["slurm"].fix


def test_crun_on_hybrid_cgroups_is_refused(tmp_path):
    cg = tmp_path / "cgroup"
    (cg / "unified").mkdir(parents=True)
    (cg / "unified" / "cgroup.controllers").write_text("cpu memory\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "crun", 'echo "crun version 1.8"')
    host = doctor.Host(str(bin_dir), cgroup_root=cg)
    assert host.cgroup_layout() == "hybrid"
    check = doctor.check_crun(host)
    assert check.status == "broken" and "hybrid" in check.why and "runc" in check.fix
    (cg / "cgroup.controllers").write_text("cpu\n")
    assert doctor.check_crun(host).status == "ok"


def test_cli_json_with_faked_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["healthy"] is False
    podman = next(c for c in data["checks"] if c["name"] == "podman")
    assert podman["status"] == "missing"
    assert "apt-get install podman runc" in podman["fix"]


@pytest.mark.podman
@pytest.mark.alongside
def test_cli_table_on_real_host():
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.stdout
    assert "podman" in result.stdout and "all ok" in result.stdout


def test_fixes_name_only_commands_an_installed_wheel_has(tmp_path):
    """No fix points at files of hpcenv's source checkout (scripts/...)."""
    from hpcenv.site import load_site

    for site in (None, load_site("local"), load_site("perlmutter")):
        for c in doctor.run_checks(path=str(tmp_path), site=site):
            if c.category != "rehearsal":  # checkout-only rehearsal sites name their scripts
                assert "scripts/" not in c.fix and ".sh" not in c.fix, c


def test_site_needs_follow_the_sites_path():
    from hpcenv.hostconf import HostFacts
    from hpcenv.site import load_site

    hybrid = HostFacts(0, "hybrid", False, False, 20000, 32768, crun=False, runc=True)
    clean = HostFacts(1000, "unified", True, True, 1 << 20, 1 << 20, crun=True, runc=True)
    local = doctor.site_needs(load_site("local"), hybrid)
    assert set(local) == {"podman", "runc", "debootstrap", "slurm", "srun"}
    assert "runc" not in doctor.site_needs(load_site("local"), clean)
    frontier = doctor.site_needs(load_site("frontier"), clean)
    assert set(frontier) == {
        "podman",
        "apptainer",
        "slurm",
        "srun",
    }  # no debootstrap on a login node
    summit = doctor.site_needs(load_site("summit"), clean)
    assert {"lsf", "jsrun", "apptainer"} <= set(summit) and "debootstrap" not in summit
    assert "podman-hpc" in doctor.site_needs(load_site("perlmutter"), clean)


def test_site_runtime_checks(tmp_path):
    host = doctor.Host(str(tmp_path))
    assert doctor.check_site_runtime(host, "podman-hpc").status == "missing"
    _script(tmp_path, "podman-hpc", 'echo "Usage: podman-hpc [OPTIONS] COMMAND"')
    assert doctor.check_site_runtime(host, "podman-hpc").status == "ok"
    _script(tmp_path, "srun", 'echo "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"')
    assert doctor.check_site_runtime(host, "pyxis").status == "ok"


def test_site_apptainer_check_says_what_is_missing(tmp_path, monkeypatch):
    """local-bind-sif's apptainer command: not installed, or installed on a host without podman
    to run its helper; each with the fix."""
    exe = tmp_path / "site" / "bin" / "apptainer"
    monkeypatch.setattr(doctor, "SITE_APPTAINER", exe)
    host = doctor.Host(path=str(tmp_path / "empty"))
    check = doctor.check_site_apptainer(host)
    assert (check.status, check.why) == ("missing", f"{exe} not found")
    assert check.fix == "scripts/site-apptainer-setup.sh (make host does it)"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    check = doctor.check_site_apptainer(host)
    assert check.status == "missing" and "podman not found" in check.why
    assert "apt-get install podman runc" in check.fix


def test_cache_check_says_where_how_full_and_when_to_move_it(tmp_path, monkeypatch):
    """Large artifacts go to the cache (OCI archives, SIFs, bases): doctor names it, what it
    holds and the room left; under $HOME (small quotas on HPC systems) it says how to move it."""
    home = tmp_path / "home"
    (home / ".cache" / "hpcenv").mkdir(parents=True)
    (home / ".cache" / "hpcenv" / "blob").write_bytes(b"x" * 3 * 1024 * 1024)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HPCENV_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    check = doctor.check_cache(doctor.Host())
    assert check.status == "ok" and check.why.startswith(f"{home}/.cache/hpcenv (default): 3.0")
    assert "free of" in check.why and "HPCENV_CACHE" in check.fix
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("HPCENV_CACHE", str(scratch))
    check = doctor.check_cache(doctor.Host())
    assert check.why.startswith(f"{scratch} (HPCENV_CACHE): ") and check.fix == ""
    scratch.chmod(0o500)
    try:
        if os.geteuid() != 0:  # root writes anywhere
            assert doctor.check_cache(doctor.Host()).status == "broken"
    finally:
        scratch.chmod(0o700)
