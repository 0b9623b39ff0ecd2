"""The CLI through Typer's CliRunner, mirroring the command tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
        "mpi4py-abi",
        "horovod-abi",
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
        "deliver: podman-hpc push localhost/hpcenv/torch-gpu:perlmutter "
        "registry.nersc.gov/m0000/torch-gpu:1 (the site pulls registry.nersc.gov/m0000/torch-gpu:1)"
    ) in out.stdout
    assert (
        "deliver: podman-hpc migrate localhost/hpcenv/torch-gpu:perlmutter "
        "(compute nodes read the squashed store)"
    ) in out.stdout


HPCENV = Path(sys.executable).with_name("hpcenv")
SUMMIT_RETIRED = (
    "warning: site summit was retired on 2024-11-15; hpcenv renders and builds for it as "
    "documented (olcf-user-docs 2745903 systems/summit_user_guide.rst: 'decommissioned on "
    "November 15, 2024')\n"
)


def test_build_dry_run_summit_is_olcfs_site_build_plan(tmp_path: Path) -> None:
    """The installed hpcenv: exit 0, the retirement warning as the one line on stderr, and the
    plan OLCF documented (containers_on_summit.rst, olcf-user-docs d900d52^): ppc64le, the OLCF
    MPI base image, podman build --net=host -v $MPI_ROOT:$MPI_ROOT on a login node with the
    layers on its NVMe, Spectrum MPI at build time, podman save + apptainer build from a
    docker-archive."""
    proc = subprocess.run(
        [str(HPCENV), "build", "--site", "summit", "--dry-run", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == SUMMIT_RETIRED
    out = proc.stdout.splitlines()
    ctx = tmp_path / "summit" / "horovod-gpu"
    tag = "localhost/hpcenv/horovod-gpu:summit"
    assert out[0] == f"plan: horovod-gpu for summit -> {tag} (linux/ppc64le)"
    assert out[1] == (
        "  base: code.ornl.gov:4567/olcfcontainers/olcfbaseimages/mpiimage-centos-cuda:latest"
    )
    assert (
        "  build on: a login node of summit (site-build: spectrum-mpi@10.4 at $MPI_ROOT mounted "
        "while the image builds)"
    ) in out
    assert any(ln.startswith("  build storage: /tmp/containers/$USER ") for ln in out)
    assert (
        f"  build: podman build --layers --format docker -f {ctx}/Dockerfile -t {tag} --net=host "
        f'--build-arg "MPI_ROOT=$MPI_ROOT" -v "$MPI_ROOT:$MPI_ROOT" {ctx}'
    ) in out
    assert f"  sif: podman save --format docker-archive -o horovod-gpu-summit.oci.tar {tag}" in out
    assert (
        "  sif: apptainer build horovod-gpu-summit.sif docker-archive:horovod-gpu-summit.oci.tar"
    ) in out
    comps = {
        ln.split()[0]: ln.split()[1] for ln in out if ln.startswith("  ") and len(ln.split()) == 2
    }
    assert comps["mpi"] == "spectrum-mpi@10.4" and comps["arch"] == "ppc64le"
    assert comps["torch"] == "2.0.1" and comps["cuda"] == "11.8" and "pmix" not in comps


def test_build_dry_run_summit_json_has_the_build_options(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(HPCENV), "build", "-s", "summit", "--dry-run", "--json", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stderr == SUMMIT_RETIRED
    (plan,) = json.loads(proc.stdout)
    assert plan["storage"] == "/tmp/containers/$USER"
    assert '-v "$MPI_ROOT:$MPI_ROOT"' in plan["build_command"]
    assert plan["sif"][1].endswith("docker-archive:horovod-gpu-summit.oci.tar")


def test_build_summit_here_stops_before_building_without_the_host_mpi(tmp_path: Path) -> None:
    """A real build off Summit: exit 2 with one error line, nothing built."""
    env = {k: v for k, v in os.environ.items() if k != "MPI_ROOT"}
    proc = subprocess.run(
        [str(HPCENV), "build", "--site", "summit", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(SUMMIT_RETIRED)
    assert proc.stderr.splitlines()[-1] == (
        "error: site summit builds against its host MPI (mpi.model: site-build) but $MPI_ROOT "
        "is not set here; build on the site's login node after loading its MPI module "
        "(mpi.root: $MPI_ROOT)"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(
    not (os.uname().machine == "ppc64le" and os.environ.get("LMOD_SYSTEM_NAME") == "summit"),
    reason="builds on a Summit login node only: site-build mounts Spectrum MPI from $MPI_ROOT "
    "(module load DefApps) into a ppc64le podman build; Summit was retired on 2024-11-15 and "
    "this host is not one",
)
def test_build_on_summit_login_node(tmp_path: Path) -> None:  # pragma: no cover
    proc = subprocess.run(
        [str(HPCENV), "build", "--site", "summit", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_submit_dry_run_summit_writes_olcfs_job(tmp_path: Path) -> None:
    """`submit --dry-run` prints OLCF's job (containers_on_summit.rst, ibm-wml-ce.rst,
    summit_user_guide.rst known issues) with the retirement warning on stderr."""
    args = ["submit", "--site", "summit", "--recipe", "horovod-gpu", "--dry-run"]
    proc = subprocess.run(
        [str(HPCENV), *args, "-A", "stf007", "--", "python", "train.py"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    # and what a dry run does not check, the bsub line and the log paths (issue 37)
    retired, unchecked, line, logs = proc.stderr.splitlines()
    assert retired + "\n" == SUMMIT_RETIRED
    assert unchecked.startswith("note: dry run: not checked here ") and "train.py" in unchecked
    assert line.startswith("note: dry run: a submit runs: ") and line.endswith(" bsub < JOB_SCRIPT")
    assert logs.startswith("note: dry run: logs: ") and logs.endswith("horovod-gpu-<id>.err")
    lines = proc.stdout.splitlines()
    assert "#BSUB -P stf007" in lines and "#BSUB -alloc_flags smt1" in lines  # no gpumps
    i = lines.index("module purge")
    assert lines[i : i + 3] == [
        "module purge",
        "module load DefApps cuda/11.7.1",
        "module unload xl",
    ]
    assert (
        "source /gpfs/alpine2/stf243/world-shared/containers/utils/requiredmpilibs.source" in lines
    )
    run = next(ln for ln in lines if ln.startswith("jsrun "))
    assert run.startswith(
        "jsrun -n 1 -r 1 -a 6 -c 42 -g 6 -b packed:7 --smpiargs=-disable_gpu_hooks "
        'sh "$HPCENV_STEPS/rank-env.sh" apptainer exec --nv '
    )
    assert "--smpiargs=-gpu" not in proc.stdout and "gpumps" not in proc.stdout
    assert '--bind "$MPI_ROOT"' in run and "--bind /autofs/nccs-svm1_home1:/ccs/home" in run
    assert run.endswith(
        '"$MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/horovod-gpu-summit.sif" python train.py'
    )
    # the command, without a project: OLCF's job with PROJECT as bsub -P, and a note
    proc = subprocess.run(
        [str(HPCENV), *args, "--", "python", "train.py"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(
        SUMMIT_RETIRED
        + "note: dry run: no project given, so the job shows 'PROJECT' as its account; "
        "submitting needs --account (bsub -P) ID\nnote: dry run: not checked here "
    )
    assert "#BSUB -P PROJECT" in proc.stdout.splitlines()
    # submitting it: still the warning, then the one error line (bsub -P is required)
    args.remove("--dry-run")
    proc = subprocess.run(
        [str(HPCENV), *args, "--", "python", "train.py"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == SUMMIT_RETIRED + (
        "error: site summit needs a project to charge the job to: give --account (bsub -P) ID\n"
    )


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
    assert len(lines) == len(cuda)  # site-build: Spectrum MPI no longer refuses the image


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
