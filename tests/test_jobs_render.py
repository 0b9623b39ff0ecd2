"""Job script rendering for every site: shellcheck on each, directive sets for LSF and PBS,
runtime prefixes, quoting (executed for real in bash), and the CLI's --dry-run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from requirements import needs_tool
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import ConfigError
from hpcenv.jobs import (
    JobSpec,
    StageIn,
    StageOut,
    default_image,
    get_scheduler,
    prepare,
    render_job,
)
from hpcenv.jobs.launchers import get_launcher
from hpcenv.jobs.render import STEP_TEMPLATES, plan_job, render_plan, step_script
from hpcenv.jobs.runtimes.registry import get_runtime
from hpcenv.jobs.spec import ArraySpec, Stitch
from hpcenv.site import Site, load_site, site_names

needs_shellcheck = needs_tool("shellcheck", why="rendered job scripts are shellchecked")


def shellcheck(script: str, tmp_path: Path, name: str = "job.sh") -> None:
    path = tmp_path / name
    path.write_text(script)
    proc = subprocess.run(["shellcheck", "-S", "style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def directives(script: str, prefix: str) -> set[str]:
    return {ln for ln in script.splitlines() if ln.startswith(prefix + " ")}


def scratch(site: Site) -> str:
    return next(f.path for f in site.filesystems if f.purpose in ("scratch", "project"))


def full_job(site: Site, *, array: bool = False) -> JobSpec:
    base = scratch(site)
    return JobSpec(
        name="train",
        command=["python3", "train.py", "--data", "{data}", "--out={output}/ckpt"],
        nodes=2,
        account="stf007" if site.scheduler.account_required else None,
        recipe=site.recipes[0],
        stage_in=StageIn(source=f"{base}/datasets/mnist"),
        stage_out=StageOut(dest=f"{base}/results/run1"),
        array=ArraySpec(count=4, parallel=2) if array else None,
    )


@needs_shellcheck
@pytest.mark.parametrize("name", site_names())
@pytest.mark.parametrize("container", [True, False])
def test_every_site_renders_shellcheck_clean(name: str, container: bool, tmp_path: Path) -> None:
    site = load_site(name)
    job = full_job(site, array=True)
    image = default_image(site, job.recipe or "x") if container else None
    script = render_job(site, job, image=image)
    shellcheck(script, tmp_path)
    prefix = get_scheduler(site.scheduler.kind).prefix
    assert directives(script, prefix), "no scheduler directives"
    if container:
        assert site.runtime.kind in script or "--container-image" in script


@needs_shellcheck
@pytest.mark.parametrize(
    "kind", ["apptainer", "singularity", "podman", "podman-hpc", "shifter", "pyxis"]
)
def test_every_runtime_on_slurm(kind: str, tmp_path: Path) -> None:
    local = load_site("local")
    site = local.model_copy(
        update={
            "runtime": local.runtime.model_copy(
                update={"kind": kind, "binds": ["/data/$USER"], "flags": []}
            )
        }
    )
    script = render_job(
        site,
        JobSpec(name="t", command=["python3", "x.py"], ranks_per_node=2),
        image="localhost/hpcenv/horovod-cpu:local",
    )
    shellcheck(script, tmp_path)
    run = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    expected = {
        "apptainer": 'apptainer exec --bind "/data/$USER"',
        "singularity": 'singularity exec --bind "/data/$USER"',
        "podman": 'bash "$HPCENV_STEPS/podman-rank.sh" "--volume=/data/$USER:/data/$USER"',
        "podman-hpc": 'podman-hpc run --rm "--volume=/data/$USER:/data/$USER"',
        "shifter": "shifter --image=docker:localhost/hpcenv/horovod-cpu:local",
        "pyxis": "--container-image=localhost/hpcenv/horovod-cpu:local",
    }[kind]
    assert expected in run
    assert run.startswith(
        "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmix"
    )


def test_podman_rank_recipe(tmp_path: Path) -> None:
    """The per-rank podman wrapper is a step file of the job; run for real with a podman that
    prints its argv, it adds the PMIx store and the flags every rank needs."""
    plan = plan_job(
        load_site("local"),
        JobSpec(name="t", command=["python3", "x.py"], ranks_per_node=2),
        image="localhost/hpcenv/horovod-cpu:local",
    )
    launch = plan.launch
    assert launch is not None and launch.prefix[:2] == ("bash", "$HPCENV_STEPS/podman-rank.sh")
    assert "--env=OMP_NUM_THREADS" in launch.prefix
    assert launch.prefix[-1] == "localhost/hpcenv/horovod-cpu:local"
    step = next(f for f in plan.files if f.name == "podman-rank.sh")
    (tmp_path / "podman-rank.sh").write_text(step.text + "\n")
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "PMIX_SERVER_TMPDIR": "/run/pmix-7"}
    proc = subprocess.run(
        ["bash", str(tmp_path / "podman-rank.sh"), "--workdir=/w", "img", "id"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    argv = proc.stdout.splitlines()
    assert argv[:5] == ["run", "--rm", "--network=host", "--ipc=host", "--pid=host"]
    assert argv[5:7] == ["--user", f"{os.getuid()}:{os.getgid()}"]
    for name in ("PMIX_*", "SLURM_*", "OMPI_*", "HPCENV_*"):
        assert ["--env", name] in [argv[i : i + 2] for i in range(len(argv) - 1)]
    assert argv[-4:] == ["--volume=/run/pmix-7:/run/pmix-7", "--workdir=/w", "img", "id"]
    env.pop("PMIX_SERVER_TMPDIR")  # no PMIx server (mpirun inside the allocation): no store
    proc = subprocess.run(
        ["bash", str(tmp_path / "podman-rank.sh"), "img", "id"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert not any(a.startswith("--volume") for a in proc.stdout.splitlines())
    script = render_plan(plan)
    assert re.search(
        r'^export CONTAINERS_CONF="\$\{CONTAINERS_CONF:-/\S+containers.conf\}"$', script, re.M
    )


def test_podman_rank_carries_pmi2s_descriptor(tmp_path: Path) -> None:
    """Under srun --mpi=pmi2 the rank's PMI-2 client talks over Slurm's PMI_FD: the wrapper
    moves it to 3 and has podman pass it (--preserve-fds=1), as podman-hpc does; a PMI_FD that
    is not a number stops the rank with a message, before podman starts. The fake podman reads
    the line written into its descriptor 3 (tests/test_mpi_abi_trixie.py crosses it for real)."""
    plan = plan_job(
        load_site("local"),
        JobSpec(name="t", command=["python3", "x.py"], ranks_per_node=1),
        image="img",
    )
    step = next(f for f in plan.files if f.name == "podman-rank.sh")
    (tmp_path / "podman-rank.sh").write_text(step.text + "\n")
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@"\necho "PMI_FD=$PMI_FD"\nread -r line <&3\necho "fd3: $line"\n'
    )
    fake.chmod(0o755)
    pmi = tmp_path / "pmi-wire"
    pmi.write_text("cmd=init pmi_version=2\n")
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "PMI_FD": "7"}
    rank = f'exec 7<"{pmi}"; exec bash "{tmp_path}/podman-rank.sh" img id'
    proc = subprocess.run(["bash", "-c", rank], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "--preserve-fds=1" in out and ["--env", "PMI_*"] in [
        out[i : i + 2] for i in range(len(out) - 1)
    ]
    assert "PMI_FD=3" in out and "fd3: cmd=init pmi_version=2" in out, out
    env["PMI_FD"] = "-"  # '3<&-' would close the descriptor instead
    bad = subprocess.run(
        ["bash", str(tmp_path / "podman-rank.sh"), "img", "id"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and "PMI_FD is not a descriptor number: -" in bad.stderr, bad
    assert bad.stdout == ""  # podman never started


@needs_shellcheck
def test_summit_lsf_directives_and_jsrun(tmp_path: Path) -> None:
    site = load_site("summit")
    script = render_job(site, full_job(site), image="/gpfs/alpine2/x.sif")
    shellcheck(script, tmp_path)
    assert directives(script, "#BSUB") == {
        "#BSUB -J train",
        "#BSUB -nnodes 2",
        "#BSUB -W 00:30",
        "#BSUB -P stf007",
        "#BSUB -q batch",  # the default queue, named (its limits are site data)
        "#BSUB -o train-%J.out",
        "#BSUB -e train-%J.err",
        '#BSUB -alloc_flags "smt1 NVME"',  # no gpumps: MPS hangs with CUDA > 11.0.3 (OLCF)
    }
    lines = script.splitlines()
    stage = next(
        ln for ln in lines if ln.startswith("jsrun -n 2 -r 1 -a 1 -c 1 bash") and "stage-in" in ln
    )
    assert '"/mnt/bb/$USER/train-${HPCENV_JOB_ID}/data"' in stage and "stage-in.sh" in stage
    # OLCF's deep-learning layout: one resource set per node, every rank sees the 6 GPUs
    # (software/analytics/ibm-wml-ce.rst, olcf-user-docs d900d52^: jsrun -r1 -g6 -a6 -c42 -bpacked:7)
    run = next(ln for ln in lines if ln.startswith("jsrun -n 2 -r 1 -a 6"))
    assert run.startswith(
        "jsrun -n 2 -r 1 -a 6 -c 42 -g 6 -b packed:7 --smpiargs=-disable_gpu_hooks "
        'sh "$HPCENV_STEPS/rank-env.sh" apptainer exec --nv'
    )
    # site-build MPI: $MPI_ROOT from DefApps' spectrum-mpi, bound as OLCF bound it
    # (containers_on_summit.rst, olcf-user-docs d900d52^: --bind $MPI_ROOT:$MPI_ROOT)
    assert '--bind "$MPI_ROOT"' in run and "/sw/summit/spectrum-mpi" not in script
    assert 'export APPTAINERENV_LD_LIBRARY_PATH="$MPI_ROOT/lib"' in lines
    assert "export OMPI_MCA_pml=ob1" in lines and "export OMP_NUM_THREADS=7" in lines
    assert "module load DefApps cuda/11.7.1" in lines and "module unload xl" in lines
    assert "export HPCENV_PROJECT=stf007" in lines
    assert 'export MEMBERWORK="${MEMBERWORK:-/gpfs/alpine2/scratch/$USER}"' in lines


@needs_shellcheck
def test_aurora_pbs_directives_and_mpiexec(tmp_path: Path) -> None:
    site = load_site("aurora")
    job = full_job(site).model_copy(update={"recipe": "torch-ccl"})
    script = render_job(site, job, image="/lus/flare/x.sif")
    shellcheck(script, tmp_path)
    assert directives(script, "#PBS") == {
        "#PBS -N train",
        "#PBS -l select=2",
        "#PBS -l place=scatter",
        "#PBS -l walltime=00:30:00",
        "#PBS -A stf007",
        "#PBS -q debug",
        "#PBS -l filesystems=home:flare",  # mandatory on ALCF systems
    }
    assert "module load apptainer" in script.splitlines()
    run = next(ln for ln in script.splitlines() if ln.startswith("mpiexec -n 24"))
    # 12 ranks per node (one per tile), 8 cores each, cores 0 and 52 left to the system;
    # oneCCL's 4 workers take the last 4 cores of each rank's 8 (ALCF's list: 1-8:9-16:...).
    # Tiles under ZE_FLAT_DEVICE_HIERARCHY=FLAT: no --gpu-bind=list (ALCF: it fails under FLAT);
    # rank-env.sh sets each rank's ZE_AFFINITY_MASK from HPCENV_GPU_MASKS.
    assert run.startswith(
        "mpiexec -n 24 --ppn 12 --cpu-bind list:1-4:9-12:17-20:25-28:33-36:41-44:53-56:61-64:"
        "69-72:77-80:85-88:93-96 sh "
    )
    assert "export HPCENV_GPU_MASKS='0 1 2 3 4 5 6 7 8 9 10 11'" in script
    assert "export CCL_WORKER_COUNT=4" in script and "export CCL_ATL_TRANSPORT=mpi" in script
    assert "export HPCENV_JOB_ID=${PBS_JOBID}" in script
    arr = render_job(site, job.model_copy(update={"array": ArraySpec(count=3, parallel=2)}))
    assert {"#PBS -J 0-2", "#PBS -W max_run_subjobs=2"} <= directives(arr, "#PBS")
    assert "export HPCENV_TASK_ID=${PBS_ARRAY_INDEX}" in arr


def test_slurm_directives_merge_constraints() -> None:
    site = load_site("perlmutter")
    nl = site.node_local
    assert nl is not None
    site = site.model_copy(update={"node_local": nl.model_copy(update={"request": ["-C", "nvme"]})})
    script = render_job(site, full_job(site), image="docker:x")
    d = directives(script, "#SBATCH")
    assert '#SBATCH -C "gpu&nvme"' in d
    # NERSC's Slurm counts hardware threads: 16 cores per rank are -c 32.
    assert {
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --gpus-per-node=4",  # every rank sees the node's GPUs (NERSC)
        "#SBATCH --account=stf007",
        "#SBATCH --time=00:30:00",
        "#SBATCH --qos=regular",
    } <= d


def test_perlmutter_preflight_looks_where_podman_hpc_puts_cray_mpich() -> None:
    """podman-hpc's --mpi module binds Cray MPICH at /opt/udiImage/modules/mpich (and /dep) and
    lists both in ld.so.conf (NERSC/podman-hpc etc/modules.d/mpich.yaml, etc/01-mpich.conf);
    /opt/cray is not in the container, so a preflight looking there stops every job."""
    site = load_site("perlmutter")
    script = render_job(site, full_job(site), image="docker:x")
    pre = next(ln for ln in script.splitlines() if 'sh "$HPCENV_STEPS/bind-preflight.sh"' in ln)
    assert pre.startswith("podman-hpc run --rm --gpu --mpi --nccl ")
    plan = plan_job(site, full_job(site), image="docker:x")
    step = next(s for s in plan.steps if s.kind == "preflight")
    tail = list(step.argv[step.argv.index("$HPCENV_STEPS/bind-preflight.sh") + 1 :])
    assert tail[:3] == [
        "libmpi.so.12",
        "/opt/udiImage/modules/mpich",
        "/opt/udiImage/modules/mpich:/opt/udiImage/modules/mpich/dep",
    ]
    assert "/opt/cray" not in script


def test_frontier_bind_model_and_nvme_request() -> None:
    site = load_site("frontier")
    script = render_job(site, full_job(site), image="/lustre/orion/x.sif")
    assert "#SBATCH -C nvme" in script
    run = next(
        ln
        for ln in script.splitlines()
        if ln.startswith("srun --nodes=2 --ntasks=16 --ntasks-per-node=8")
    )
    assert "--mpi=cray_shasta" in run and "apptainer exec --rocm" in run
    # Low-noise mode: 56 usable cores, 7 per rank, as OLCF's examples (-c 7).
    assert "--cpus-per-task=7" in run and "#SBATCH --cpus-per-task=7" in script
    lines = script.splitlines()
    assert "export MPICH_GPU_SUPPORT_ENABLED=1" in lines
    # OLCF submit642.sbatch (cpe/25.09+, cray-mpich-abi 9.x): GTL and loader path from the
    # variables the cray-mpich modules set
    assert (
        'export APPTAINERENV_LD_PRELOAD="$CRAY_MPICH_ROOTDIR/gtl/lib/libmpi_gtl_hsa.so.0"' in lines
    )
    containlibs = next(ln for ln in lines if ln.startswith("export APPTAINER_CONTAINLIBS="))
    assert "/usr/lib64/libcxi.so.1" in containlibs and "/usr/lib64/libxpmem.so.0" in containlibs
    ld = next(ln for ln in lines if ln.startswith("export APPTAINERENV_LD_LIBRARY_PATH="))
    # OLCF's value exactly (submit642.sbatch and rccltests/submit.sbatch, olcf_containers_examples
    # @ 032b962): the host's $LD_LIBRARY_PATH (where rccl-net-plugin puts the plugin) included.
    assert ld == (
        'export APPTAINERENV_LD_LIBRARY_PATH="$CRAY_MPICH_ROOTDIR/gtl/lib:/opt/rocm/lib:'
        '/opt/rocm/lib64:$CRAY_LD_LIBRARY_PATH:$LD_LIBRARY_PATH:/opt/cray/pe/lib64"'
    )
    assert "ofi/gnu/9.1" not in script
    assert "export FI_CXI_RDZV_PROTO=alt_read" in lines
    assert "#SBATCH --network=disable_rdzv_get" in lines


def test_quoting_survives_hostile_arguments(tmp_path: Path) -> None:
    """Render a host job with shell metacharacters and run its launch line in real bash."""
    hostile = ["$(touch PWNED1)", "`touch PWNED2`", "a b; touch PWNED3", "it's", "{nodata}x", "*"]
    job = JobSpec(
        name="q",
        command=["printf", "<%s>\\n", *hostile],
        launch="single",
        cores_per_rank=1,
        env={"NOTE": "it's $(touch PWNED4)"},
    )
    script = render_job(load_site("local"), job)
    launch = script.split("# Run (in the batch shell).\n", 1)[1].splitlines()[0]
    note = next(ln for ln in script.splitlines() if ln.startswith("export NOTE="))
    proc = subprocess.run(
        ["bash", "-c", f"{note}; {launch}; printf '%s\\n' \"$NOTE\""],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"<{h}>" for h in hostile] + ["it's $(touch PWNED4)"]
    assert list(tmp_path.iterdir()) == []


def test_values_are_validated() -> None:
    with pytest.raises(ValidationError):
        JobSpec(name="x; rm", command=["true"])
    with pytest.raises(ValidationError):
        JobSpec(command=["true"], workdir="/tmp/$(id)")
    with pytest.raises(ValidationError):
        StageIn(source='/data/"x"')
    job = JobSpec(command=["true"], workdir="/scratch/$USER/${PROJ}/w")
    assert 'export HPCENV_WORKDIR="/scratch/$USER/${PROJ}/w"' in render_job(load_site("local"), job)


def test_clean_errors_for_unknown_names_and_bad_jobs() -> None:
    with pytest.raises(ConfigError, match="unknown scheduler 'sge'; known: lsf, pbs, slurm"):
        get_scheduler("sge")
    with pytest.raises(ConfigError, match="unknown launcher"):
        get_launcher("aprun")
    with pytest.raises(ConfigError, match="unknown container runtime"):
        get_runtime("docker")
    local = load_site("local")
    none = local.model_copy(
        update={"scheduler": local.scheduler.model_copy(update={"kind": "none"})}
    )
    with pytest.raises(ConfigError, match="no batch scheduler"):
        render_job(none, JobSpec(command=["true"]))
    with pytest.raises(ConfigError, match="nothing to run"):
        render_job(local, JobSpec())
    with pytest.raises(ConfigError, match=r"\{task\} is only defined in a job array"):
        render_job(local, JobSpec(command=["echo", "{task}"]))
    with pytest.raises(ConfigError, match=r"\{data\} needs a stage-in"):
        render_job(local, JobSpec(command=["echo", "{data}"]))
    with pytest.raises(ConfigError, match="over-subscription"):
        render_job(local, JobSpec(command=["true"], ranks_per_node=8))


def test_array_and_stitch_scripts() -> None:
    local = load_site("local")
    arr = render_job(
        local,
        JobSpec(
            name="inf",
            command=["echo", "{task}"],
            launch="single",
            cores_per_rank=1,
            array=ArraySpec(count=4, parallel=2),
        ),
    )
    assert "#SBATCH --array=0-3%2" in arr and "#SBATCH --output=inf-%A_%a.out" in arr
    assert "export HPCENV_TASK_ID=${SLURM_ARRAY_TASK_ID}" in arr
    assert 'echo "${HPCENV_TASK_ID}"' in arr
    st = render_job(
        local,
        JobSpec(
            name="s",
            launch="single",
            cores_per_rank=1,
            stitch=Stitch(parts="/w/parts", count=4, output="/w/all"),
        ),
    )
    assert "bash \"$HPCENV_STEPS/stitch.sh\" /w/parts 4 part- '' /w/all 0\n" in st
    lsf = render_job(
        load_site("summit"),
        JobSpec(
            name="inf", command=["true"], launch="single", array=ArraySpec(count=4, parallel=2)
        ),
    )
    assert '#BSUB -J "inf[1-4]%2"' not in lsf and "#BSUB -J inf[1-4]%2" in lsf
    assert "export HPCENV_TASK_ID=$((LSB_JOBINDEX - 1))" in lsf


@needs_shellcheck
def test_cli_dry_run_summit_renders_bsub_jsrun_with_nvme(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "summit",
            "--recipe",
            "horovod-gpu",
            "-N",
            "2",
            "--account",
            "stf007",
            "--stage-in",
            "$MEMBERWORK/stf007/mnist",
            "--stage-out",
            "$MEMBERWORK/stf007/out/run1",
            "--dry-run",
            "--",
            "python3",
            "train.py",
            "--data",
            "{data}",
        ],
    )
    assert res.exit_code == 0, res.output
    script = res.stdout
    shellcheck(script, tmp_path)
    assert script.startswith("#!/bin/bash\n#BSUB -J horovod-gpu\n")
    assert '#BSUB -alloc_flags "smt1 NVME"' in script and "#BSUB -P stf007" in script
    assert 'jsrun -n 2 -r 1 -a 1 -c 1 bash "$HPCENV_STEPS/stage-in.sh"' in script
    assert '"/mnt/bb/$USER/horovod-gpu-${HPCENV_JOB_ID}/data"' in script
    assert "jsrun -n 2 -r 1 -a 6 -c 42 -g 6 -b packed:7" in script  # OLCF DL layout
    assert '"$MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/horovod-gpu-summit.sif"' in script
    assert 'bash "$HPCENV_STEPS/stage-out.sh"' in script
    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "summit",
            "-r",
            "horovod-gpu",
            "--dry-run",
            "-A",
            "stf007",
            "--json",
            "--",
            "true",
        ],
    )
    data = json.loads(res.stdout)
    assert data["scheduler"] == "lsf" and data["placement"]["ranks_per_node"] == 6
    plan = data["plan"]
    assert plan["launch"]["launcher"] == "jsrun" and plan["launch"]["command"] == ["true"]
    assert [s["kind"] for s in plan["steps"]] == ["preflight", "launch"]


def test_cli_submit_needs_an_image_choice(runner: CliRunner) -> None:
    res = runner.invoke(app, ["submit", "--site", "local", "--dry-run", "--", "true"])
    assert isinstance(res.exception, ConfigError)
    assert "--recipe" in str(res.exception)


def test_default_images() -> None:
    assert default_image(load_site("local"), "horovod-cpu") == "localhost/hpcenv/horovod-cpu:local"
    summit = default_image(load_site("summit"), "horovod-gpu")
    assert summit == "$MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/horovod-gpu-summit.sif"


def test_prepare_reports_logs_and_workdir() -> None:
    r = prepare(load_site("local"), JobSpec(name="n", command=["true"]))
    assert r.log_names == ("n-%j.out", "n-%j.err")
    # the local sites' scratch is one folder every user shares: the default is per user
    assert r.workdir == "$HOME/hpcenv-jobs"
    assert os.path.basename(r.workdir) == "hpcenv-jobs"
    aurora = prepare(load_site("aurora"), JobSpec(name="n", command=["true"], account="p"))
    assert aurora.workdir == "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv-jobs"


def test_queue_node_ranges_are_checked_where_they_enter() -> None:
    data = load_site("aurora").model_dump()
    data["scheduler"]["queue_limits"] = {"debug": {"nodes": [4, 2]}}
    with pytest.raises(ValidationError, match="fewest nodes 4 > most 2"):
        Site.model_validate(data)
    site = load_site("aurora")
    assert site.scheduler.queue_limits["debug"].nodes == (1, 2)  # ALCF: debug takes 1-2 nodes
    job = full_job(site).model_copy(update={"nodes": 300, "queue": "prod"})
    assert "#PBS -q prod" in render_job(site, job, image="/x.sif")
    with pytest.raises(ConfigError, match=r"queue 'prod' on site 'aurora' takes 256-10624"):
        render_job(site, job.model_copy(update={"nodes": 2}), image="/x.sif")


@needs_shellcheck
@pytest.mark.parametrize("name", sorted(STEP_TEMPLATES))
def test_every_step_file_is_shellchecked_as_a_file(name: str, tmp_path: Path) -> None:
    """Shell steps are shipped files (never programs built as strings): each, standalone (with
    its own copy of the step library), passes shellcheck on its own (a heredoc body is not
    checked as part of job.sh). As a job writes them, sourcing its one lib.sh:
    tests/test_job_readable.py."""
    shellcheck(step_script(STEP_TEMPLATES[name]) + "\n", tmp_path, name)


def test_no_module_builds_a_job_shell_program_as_a_string() -> None:
    """The job side hands shell programs to the job as step files only: no ``sh -c``/``bash -c``
    argument in any rendered job of any site (with and without staging, every recipe)."""
    for name in site_names():
        site = load_site(name)
        if site.scheduler.kind == "none":
            continue
        for recipe in site.recipes:
            job = full_job(site).model_copy(update={"recipe": recipe})
            plan = plan_job(site, job, image=default_image(site, recipe), submitting=True)
            for step in plan.steps:
                argv = list(step.launch.argv if step.launch else step.argv)
                pairs = list(zip(argv, argv[1:], strict=False))
                assert ("sh", "-c") not in pairs and ("bash", "-c") not in pairs, (name, step)
            assert "sh -c '" not in render_plan(plan)


@pytest.mark.parametrize("name", ["local-2node", "local-2node-bind", "local-2node-sif"])
def test_rehearsal_nodes_share_cores_so_a_rank_runs_one_thread(name: str) -> None:
    """local-2node's two nodes run on this machine's 2 cores: the site file's tuning gives a rank
    one thread (measured there: 4x faster than the placement's 2), the sites that extend it too,
    and the header says that the job runs that value, not the placement's."""
    job = JobSpec(name="t", command=["python3", "t.py"], nodes=2, ranks_per_node=1)
    lines = render_job(load_site(name), job, image=None).splitlines()
    assert "export OMP_NUM_THREADS=1" in lines and "export OMP_NUM_THREADS=2" not in lines
    assert "# tuning: OMP_NUM_THREADS=1 from the site file's tuning, not the placement's 2" in lines
    one_node = job.model_copy(update={"nodes": 1, "ranks_per_node": 2})
    assert "not the placement's" not in render_job(load_site("local"), one_node, image=None)


def test_the_header_names_the_value_the_ranks_run_after_the_jobs_env() -> None:
    """A job's --env replaces the site's value: the header says so (and never writes a value
    passed by name)."""
    site = load_site("local-2node")
    base = JobSpec(name="t", command=["python3", "t.py"], nodes=2, ranks_per_node=1)
    given = render_job(site, base.model_copy(update={"env": {"OMP_NUM_THREADS": "4"}}), image=None)
    assert "# tuning: OMP_NUM_THREADS=4 from the job's --env, not the placement's 2" in given
    assert "from the site file's tuning" not in given
    placed = render_job(site, base.model_copy(update={"env": {"OMP_NUM_THREADS": "2"}}), image=None)
    assert "not the placement's" not in placed  # the job restores the placement's value
    by_name = render_job(
        site, base.model_copy(update={"pass_env": ["OMP_NUM_THREADS"]}), image=None
    )
    assert (
        "# tuning: OMP_NUM_THREADS=<the submitting shell's> from the job's --env, not the "
        "placement's 2" in by_name.splitlines()
    )


def test_a_replaced_placement_value_is_named_with_its_layer() -> None:
    from hpcenv.jobs.launchenv import overridden_placement

    layers = [
        ("placement", {"OMP_NUM_THREADS": "4", "KMP_BLOCKTIME": "1"}),
        ("site-environment", {"OMP_NUM_THREADS": "2", "OMPI_MCA_btl": "tcp"}),
        ("measured-tuning", {"OMP_NUM_THREADS": "3"}),
    ]
    assert overridden_placement(layers) == [  # the last layer's value is the one the job runs
        "tuning: OMP_NUM_THREADS=3 from measured tuning (hpcenv tune --measure), "
        "not the placement's 4"
    ]
    same = [("placement", {"OMP_NUM_THREADS": "1"}), ("site-environment", {"OMP_NUM_THREADS": "1"})]
    assert overridden_placement(same) == []


def test_tune_shows_the_threads_the_ranks_run(runner: CliRunner) -> None:
    res = runner.invoke(app, ["tune", "--site", "local-2node", "-N", "2", "--ranks-per-node", "1"])
    assert res.exit_code == 0, res.output
    out = res.output.splitlines()
    assert "  OMP_NUM_THREADS=1" in out and "  OMP_NUM_THREADS=2" not in out
    assert "  - OMP_NUM_THREADS=1 from the site file's tuning, not the placement's 2" in out
