"""The CLI through Typer's CliRunner, mirroring the command tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from hpcenv.cli.main import app


def run(runner: CliRunner, *args: str):
    return runner.invoke(app, list(args))


def test_sites_list_and_show(runner: CliRunner) -> None:
    out = run(runner, "sites", "list", "--json")
    assert out.exit_code == 0
    assert {r["name"] for r in json.loads(out.stdout)} >= {"local", "summit"}
    show = run(runner, "sites", "show", "summit", "--json")
    assert json.loads(show.stdout)["scheduler"]["launcher"] == "jsrun"


def test_sites_validate_and_schema(runner: CliRunner, tmp_path: Path) -> None:
    good = Path(__file__).parent.parent / "site-configs" / "local.yaml"
    assert run(runner, "sites", "validate", str(good)).exit_code == 0
    schema = json.loads(run(runner, "sites", "schema").stdout)
    assert schema["title"] == "Site"


def test_recipes(runner: CliRunner) -> None:
    names = {r["name"] for r in json.loads(run(runner, "recipes", "--json").stdout)}
    assert names == {
        "horovod-cpu",
        "horovod-ccl",
        "horovod-gpu",
        "torch-ccl",
        "torch-gpu",
        "daal4py",
        "mpi4py-os",
    }


def test_resolve_json_shape(runner: CliRunner) -> None:
    out = run(runner, "resolve", "--site", "local", "--recipe", "horovod-cpu", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert {"site", "recipe", "components"} <= set(data)
    assert data["components"]["mpi"]["implementation"] == "openmpi"
    for comp in data["components"].values():
        assert "version" in comp and "reason" in comp


def test_render_writes_files(runner: CliRunner, tmp_path: Path) -> None:
    out = run(runner, "render", "-s", "frontier", "-r", "torch-gpu", "--out", str(tmp_path))
    assert out.exit_code == 0, out.output
    for name in ("Dockerfile", "Singularity.def", "stack.lock.json"):
        assert (tmp_path / name).is_file()


def test_build_dry_run_frontier_lists_delivery(runner: CliRunner, tmp_path: Path) -> None:
    out = run(
        runner,
        "build",
        "--site",
        "frontier",
        "-r",
        "torch-gpu",
        "--dry-run",
        "--json",
        "--out",
        str(tmp_path),
    )
    assert out.exit_code == 0, out.output
    (plan,) = json.loads(out.stdout)
    assert plan["components"]["mpi"] == "mpich@4.1.3"
    assert plan["components"]["net-plugin"] == "aws-ofi-nccl@1.19.2"
    assert plan["delivery"] == [
        "copy the SIF to $MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/torch-gpu-frontier.sif"
        " (the path the job script runs)"
    ]
    assert plan["context"] == str(tmp_path / "frontier" / "torch-gpu")
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_build_dry_run_perlmutter_migrates_and_pushes(runner: CliRunner, tmp_path: Path) -> None:
    out = run(
        runner,
        "build",
        "--site",
        "perlmutter",
        "-r",
        "torch-gpu",
        "--dry-run",
        "--push",
        "registry.nersc.gov/m0000/torch-gpu:1",
        "--out",
        str(tmp_path),
    )
    assert out.exit_code == 0, out.output
    assert (
        "deliver: podman push localhost/hpcenv/torch-gpu:perlmutter "
        "registry.nersc.gov/m0000/torch-gpu:1 (the site pulls registry.nersc.gov/m0000/torch-gpu:1)"
    ) in out.stdout
    assert (
        "deliver: podman-hpc migrate localhost/hpcenv/torch-gpu:perlmutter "
        "(compute nodes read the squashed store)"
    ) in out.stdout


def test_build_dry_run_summit_refuses(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hpcenv.cli.main import main; main()",
            "build",
            "--site",
            "summit",
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "error: conflict between mpi (any of openmpi@4.1.2) (releases) and host.mpi spectrum-mpi@10.4"
    )
    assert "rule image-mpi-host-only" in proc.stderr and "Traceback" not in proc.stderr


def test_conflict_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hpcenv.cli.main import main; main()",
            "resolve",
            "-s",
            "summit",
            "-r",
            "horovod-gpu",
            "--set",
            "cuda=12.4",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    # every conflict found, one line each: the driver, the Open-CE CUDA builds, and Summit's
    # Spectrum MPI that no image MPI can stand in for
    assert all(line.startswith("error: conflict between ") for line in lines)
    cuda = [line for line in lines if line.startswith("error: conflict between cuda 12.4 (--set)")]
    assert any("and gpu.driver 450.80.02" in line and "rule cuda-driver" in line for line in cuda)
    assert any("rule torch-cuda-opence" in line for line in cuda)
    assert len(lines) == len(cuda) + 1 and "rule image-mpi-host-only" in lines[-1]


def test_bad_site_file_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbogus: 1\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hpcenv.cli.main import main; main()",
            "sites",
            "validate",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert f"{bad}:2: field 'bogus': unknown field" in proc.stderr


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys; from hpcenv.cli.main import app; "
        "heavy = [m for m in ('torch', 'jinja2', 'spython', 'fabric', 'matplotlib', 'testinfra', 'pydantic') "
        "if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
