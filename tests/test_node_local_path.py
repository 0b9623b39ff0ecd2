"""A site's ``node_local.path`` is where the job's node-local folder goes (issue 40, class 9):
``/tmp/nvme/$USER`` (a folder the site made under /tmp, such as an NVMe mount) was silently
replaced by ``/tmp``. Only the shared sticky folder itself, or one name in it (which any user
could make first), takes the unguessable folder straight in the sticky folder
(hpcenv.jobs.render.node_local_folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.jobs.render import node_local_folder

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
ROOT = Path(__file__).resolve().parents[1]
RANDOM = "/tmp/hpcenv-$USER-j-${HPCENV_JOB_ID}-${HPCENV_NONCE}"


@pytest.mark.parametrize(
    ("path", "folder"),
    [
        ("/tmp/nvme/$USER", "/tmp/nvme/$USER/j-${HPCENV_JOB_ID}"),
        ("/dev/shm/site/${USER}", "/dev/shm/site/${USER}/j-${HPCENV_JOB_ID}"),
        ("/mnt/bb/$USER", "/mnt/bb/$USER/j-${HPCENV_JOB_ID}"),
        ("/tmp/$USER", RANDOM),  # a fixed name straight in /tmp: anyone could take it first
        ("/tmp/$USER/", RANDOM),
        ("/tmp/hpcenv-local", RANDOM),  # one name in /tmp: the same (nobody made it for us)
        ("/tmp", RANDOM),
    ],
)
def test_the_sites_path_is_honoured_below_a_sticky_folder(path: str, folder: str) -> None:
    assert node_local_folder(path, "j") == folder


def test_the_installed_hpcenv_writes_the_sites_nvme_folder(tmp_path: Path) -> None:
    text = (ROOT / "site-configs" / "generic-slurm.yaml").read_text()
    assert "  path: /tmp/$USER\n" in text
    site = tmp_path / "nvsite.yaml"
    site.write_text(
        text.replace("name: generic-slurm", "name: nvsite").replace(
            "  path: /tmp/$USER\n", "  path: /tmp/nvme/$USER\n"
        )
    )
    argv = [HPCENV, "submit", "--site", str(site), "--no-container", "--name", "j", "--dry-run"]
    proc = subprocess.run(
        [*argv, "--", "echo", "{node_local}"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert 'export HPCENV_NODE_LOCAL="/tmp/nvme/$USER/j-${HPCENV_JOB_ID}"' in proc.stdout


def test_the_job_makes_and_removes_its_folder_in_the_sites_path(tmp_path: Path) -> None:
    """The rendered script run by bash as Slurm would: the folder is the site's path's, per
    user and per job, 0700, and gone when the job ends."""
    from hpcenv.jobs.render import render_job
    from hpcenv.jobs.spec import JobSpec
    from hpcenv.site import load_site

    site = load_site("local")
    assert site.node_local is not None
    mount = tmp_path / "nvme"
    mount.mkdir()
    nl = site.node_local.model_copy(update={"path": f"{mount}/$USER"})
    site = site.model_copy(update={"node_local": nl})
    seen = tmp_path / "seen"
    cmd = f'echo "$1 $(stat -c %a "$1")" > {seen}; touch "$1/work"'
    job = JobSpec(
        name="nl",
        command=["bash", "-c", cmd, "nl", "{node_local}"],
        launch="single",
        cores_per_rank=1,
        workdir=str(tmp_path / "w"),
    )
    script = tmp_path / "job.sh"
    script.write_text(render_job(site, job))
    (tmp_path / "w").mkdir()
    env = {**os.environ, "SLURM_JOB_ID": "4711", "USER": "u1"}
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    folder, mode = seen.read_text().split()
    assert (folder, mode) == (f"{mount}/u1/nl-4711", "700")
    assert not Path(folder).exists() and (mount / "u1").is_dir()
