"""Exit codes of the installed ``hpcenv``, run as a real process (CliRunner cannot see them).

``main()`` used to run the app with ``standalone_mode=False`` and drop the code click returned,
so every ``typer.Exit(1)`` -- a failing ``doctor``, ``smoke`` or ``bench`` -- exited 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from interrupts import after_signal, terminal_sigint
from requirements import need_image

HPCENV = Path(sys.executable).with_name("hpcenv")


def hpcenv(*args: str, env: dict[str, str] | None = None, timeout: int = 120):
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_success_exits_0() -> None:
    proc = hpcenv("sites", "list")
    assert proc.returncode == 0, proc.stderr
    assert "local" in proc.stdout


def test_doctor_with_no_tools_exits_1(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    proc = hpcenv("doctor", "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert '"healthy": false' in proc.stdout


def test_doctor_for_a_real_site_on_a_bare_host(tmp_path: Path) -> None:
    """A login node of Frontier needs Apptainer, Slurm and srun, not debootstrap."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "HPCENV_CACHE": str(tmp_path / "c")}
    proc = hpcenv("doctor", "--site", "frontier", "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    import json

    doc = json.loads(proc.stdout)
    required = {c["name"] for c in doc["checks"] if c["required"]}
    assert doc["site"] == "frontier" and "debootstrap" not in required
    assert {"apptainer", "slurm", "srun", "podman"} <= required


def test_doctor_unknown_site_exits_2() -> None:
    proc = hpcenv("doctor", "--site", "nosuchsite")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown site 'nosuchsite'")


def test_resolve_conflict_exits_2() -> None:
    proc = hpcenv("resolve", "--site", "summit", "--recipe", "horovod-gpu", "--set", "cuda=12.4")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: conflict")
    assert "Traceback" not in proc.stderr


def test_resolve_refused_oneccl_exits_2() -> None:
    """A PyPI oneCCL whose wheels cannot work alone: one line naming the missing piece."""
    proc = hpcenv(
        "resolve", "--site", "local", "--recipe", "horovod-ccl", "--set", "oneccl=2022.0.0"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(
        "error: conflict between oneccl 2022.0.0 (--set) and oneccl.from pypi (recipe horovod-ccl)"
    )
    assert "libccl.so.2" in proc.stderr and "rule oneccl-pypi" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_render_bad_site_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbogus: 1\n")
    proc = hpcenv(
        "render", "--site", str(bad), "--recipe", "horovod-cpu", "--out", str(tmp_path / "out")
    )
    assert proc.returncode == 2
    assert "field 'bogus'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_runtime_executable_on_an_oci_runtime_exits_2(tmp_path: Path) -> None:
    site = tmp_path / "s.yaml"
    site.write_text("extends: local\nname: s\nruntime:\n  kind: podman\n  executable: /x/podman\n")
    proc = hpcenv("render", "--site", str(site), "--recipe", "horovod-cpu", "--format", "lock")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f"error: {site}:5: field 'runtime.executable': runtime.executable applies to the "
        "apptainer and singularity runtimes, not podman"
    )


def test_usage_error_exits_2() -> None:
    proc = hpcenv("resolve", "--no-such-option")
    assert proc.returncode == 2
    assert "No such option" in proc.stderr


def test_ctrl_c_exits_130(tmp_path: Path) -> None:
    """SIGINT while a command runs: 130 (128 + SIGINT), as a shell expects, and one line."""
    code = (
        "import time, typer\n"
        "from hpcenv.cli import main as m\n"
        "@m.app.command('wait-forever')\n"
        "def wait_forever() -> None:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(600)\n"
        "m.main()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "wait-forever"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_sigint,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = after_signal(proc, timeout=120)
    assert proc.returncode == 130
    assert "interrupted" in err
    assert "Traceback" not in err


@pytest.mark.podman
@pytest.mark.alongside
def test_failing_smoke_exits_1(tmp_path: Path) -> None:
    """The smoke suite against the bare base image (no venv, no MPI) fails, and says so by exit code."""
    from hpcenv.baseimage import default_tag

    base = need_image(default_tag(), "the smoke suite runs against the bare base image")
    proc = hpcenv("smoke", "--image", base, "--results", str(tmp_path / "r"), timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_aurora_queue_outside_its_node_range_exits_2() -> None:
    """ALCF's queue table (argonne-lcf/user-guides docs/aurora/running-jobs-aurora.md, read
    2026-11-22): debug takes 1-2 nodes, prod 256-10,624; qsub rejects a job outside them."""
    base = ["submit", "--site", "aurora", "-r", "torch-gpu", "-A", "myproj", "--dry-run"]
    proc = hpcenv(*base, "-N", "8", "--queue", "debug", "--", "python3", "train.py")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: queue 'debug' on site 'aurora' takes 1-2 node(s), 8 asked: give --queue "
        "(debug-scaling, capacity), another node count or -t/--time (scheduler.queue_limits)"
    ]
    proc = hpcenv(*base, "-N", "8", "--queue", "debug-scaling", "--", "python3", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert "#PBS -q debug-scaling" in proc.stdout and "#PBS -l select=8" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "submit",
                "--site",
                "local",
                "--recipe",
                "horovod-cpu",
                "--image",
                "",
                "--dry-run",
                "--",
                "true",
            ],
            "--image is empty",
        ),
        (
            [
                "submit",
                "--site",
                "local",
                "--recipe",
                "horovod-cpu",
                "--stage-in",
                "",
                "--dry-run",
                "--",
                "true",
            ],
            "--stage-in is empty",
        ),
        (
            [
                "submit",
                "--site",
                "local",
                "--recipe",
                "horovod-cpu",
                "--array",
                "0",
                "--dry-run",
                "--",
                "true",
            ],
            "must be at least 1 (got 0)",
        ),
        (["tune", "--site", "local", "--image", "", "--measure"], "--image is empty"),
        (
            [
                "submit",
                "--site",
                "local",
                "--transport",
                "ssh",
                "--ssh-host",
                "h",
                "--ssh-port",
                "99999",
                "--",
                "true",
            ],
            "less than or equal to 65535",
        ),
        (["smoke", "--site", "nosuch"], "nosuch"),
    ],
)
def test_empty_or_out_of_range_options_exit_2(args: list[str], message: str) -> None:
    """Found in review: '' fell back to a default (``tune --image ''`` ran a 5-minute sweep),
    ``--array 0`` submitted a plain job, an unknown smoke site was reported as a missing image."""
    proc = hpcenv(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "podman storage" not in proc.stderr  # not reported as a missing image


def test_submit_of_a_missing_sif_exits_2_before_submitting(tmp_path: Path) -> None:
    """An Apptainer site given a SIF path that is not there stops before anything is submitted
    (no scheduler is asked: the local-2node rehearsal need not run)."""
    missing = tmp_path / "nowhere" / "horovod-cpu-local.sif"
    proc = hpcenv(
        "submit",
        "--site",
        "local-2node-sif",
        "--image",
        str(missing),
        "--nodes",
        "2",
        "--workdir",
        str(tmp_path),
        "--",
        "true",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: SIF {missing} not found; build it first (hpcenv build --site local-2node-sif "
        "--format sif) or pass --image / --no-container"
    ]
