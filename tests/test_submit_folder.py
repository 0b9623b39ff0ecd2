"""A warning at submit when the job's folder is one the site says jobs should not run from
(issue 36): Summit's home, which compute nodes cannot write (``read_only_on_compute``, OLCF), and
Aurora's home, from which ALCF says not to submit (``submit_here: false``: argonne-lcf/user-guides
@ 7d04a3f docs/aurora/running-jobs-aurora.md, read 2026-11-28). Frontier's home is writable from
compute nodes (olcf-user-docs data/index.rst, "Frontier: Read/Write"): no warning there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hpcenv.jobs.submitdir import folder_warning
from hpcenv.site import load_site

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
ENV = {"USER": "alice", "HOME": "/home/alice"}


def test_summit_home_is_read_only_on_compute_nodes() -> None:
    got = folder_warning(load_site("summit"), "/ccs/home/alice/run", ENV)
    assert got is not None and "compute nodes cannot write" in got and "/ccs/home/alice/run" in got
    assert folder_warning(load_site("summit"), "/gpfs/alpine2/stf007/scratch/alice", ENV) is None


def test_aurora_says_submit_from_the_project_folder() -> None:
    site = load_site("aurora")
    got = folder_warning(site, "/home/alice/ddp", ENV)
    assert got is not None and "says not to submit jobs from" in got
    assert folder_warning(site, "/lus/flare/projects/stf007/alice", ENV) is None
    assert folder_warning(site, "/home/alicebob", ENV) is None  # a path prefix is not a folder


def test_no_warning_where_the_site_says_nothing_or_a_variable_is_unset() -> None:
    assert folder_warning(load_site("frontier"), "/ccs/home/alice/run", ENV) is None
    assert folder_warning(load_site("aurora"), "/home/alice/ddp", {}) is None


def test_link_into_home_is_caught(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    (tmp_path / "link").symlink_to(home / "run")
    site = load_site("aurora")
    site = site.model_copy(
        update={
            "filesystems": [
                f.model_copy(update={"path": "$HOME"}) if f.name == "home" else f
                for f in site.filesystems
            ]
        }
    )
    assert folder_warning(site, str(tmp_path / "link"), {"HOME": str(home)}) is not None


def _site_file(tmp_path: Path) -> Path:
    path = tmp_path / "aurora-home.yaml"
    path.write_text(
        "extends: aurora\n"
        "name: aurora-home\n"
        "filesystems:\n"
        "  - {name: flare, kind: lustre, path: /lus/flare/projects/$HPCENV_PROJECT, purpose: project}\n"
        "  - {name: flare-user, kind: lustre, path: /lus/flare/projects/$HPCENV_PROJECT/$USER,"
        " purpose: scratch}\n"
        "  - {name: home, kind: lustre, path: $HOME, purpose: home, submit_here: false}\n"
    )
    return path


def _submit(site: Path, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "train.py").write_text("print('hi')\n")
    return subprocess.run(
        [HPCENV, "submit", "--site", str(site), "--recipe", "torch-gpu", "-A", "stf007"]
        + ["--dry-run", "--", "python3", "train.py"],
        cwd=cwd,
        env={**os.environ, "HOME": str(home), "USER": "alice"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_submit_from_home_warns_in_one_line_and_still_renders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = home / "ddp"
    run.mkdir(parents=True)
    proc = _submit(_site_file(tmp_path), run, home)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "says not to submit jobs from" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: the job runs in "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout


def test_submit_elsewhere_does_not_warn(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "project"
    work.mkdir()
    proc = _submit(_site_file(tmp_path), work, home)
    assert proc.returncode == 0, proc.stderr
    assert "says not to submit" not in proc.stderr
