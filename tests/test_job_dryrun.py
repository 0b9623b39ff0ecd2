"""Dry execution of every job script: each built-in site x each recipe x (1 node, 2 nodes) x
(with, without staging) runs under ``bash -euo pipefail`` with stub launchers (see
``tests/job_harness.py``). A run fails on an unset variable, a missing directory, or a launch
whose argv (as the stub received it, after the shell's quoting and expansion) differs from the
placement's. The four real sites also have their launch lines written out by hand from the
sites' own documentation (``docs/sites/*.md``), and ``submit`` itself runs against a stub
``sbatch``/``bsub``/``qsub`` so the workdir the script enters is the one submission created.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcenv.jobs import JobSpec, StageIn, StageOut, default_image, prepare
from hpcenv.jobs.launchers import get_launcher
from hpcenv.jobs.render import RenderedJob
from hpcenv.jobs.shell import PLACEHOLDERS, Expand
from hpcenv.jobs.transport import LocalTransport
from hpcenv.recipe import recipe_names
from hpcenv.site import Site, load_site, site_names
from tests.job_harness import DryRun, Harness, expand, rooted, script_exports

ACCOUNT = "stf007"  # a real-looking project id (OLCF's staff project in its own examples)
COMMAND = ["python3", "train.py", "--data", "{data}", "--out={output}/ckpt", "it's a $HOME"]
LAUNCHERS = {"srun", "jsrun", "mpiexec", "mpirun"}


def _scratch(site: Site) -> str:
    return next(f.path for f in site.filesystems if f.purpose in ("scratch", "project"))


def _cases() -> list[tuple[str, str, int, bool]]:
    out = []
    for name in site_names():
        site = load_site(name)
        if site.scheduler.kind == "none":
            continue
        for recipe in recipe_names():  # the job side does not depend on the image resolving
            for nodes in (1, 2):
                for staging in (False, True):
                    out.append((name, recipe, nodes, staging))
    return out


def _job(site: Site, recipe: str, nodes: int, staging: bool) -> JobSpec:
    base = _scratch(site)
    return JobSpec(
        name="train",
        command=COMMAND if staging else [c for c in COMMAND if "{" not in c],
        nodes=nodes,
        recipe=recipe,
        account=ACCOUNT if site.scheduler.account_required else None,
        stage_in=StageIn(source=f"{base}/datasets/mnist") if staging else None,
        stage_out=StageOut(dest=f"{base}/results/run1") if staging else None,
    )


def _expected(argv: list[str], values: dict[str, str]) -> list[str]:
    """The argv a launcher receives: variables expanded, placeholders their values."""
    out = []
    for item in argv:
        if isinstance(item, Expand):
            out.append(expand(item, values))
            continue
        for key, var in PLACEHOLDERS.items():
            if "{" + key + "}" in item and var in values:
                item = item.replace("{" + key + "}", values[var])
        out.append(item)
    return out


def _dry(
    tmp_path: Path, name: str, job_for, **kw: object
) -> tuple[Site, RenderedJob, DryRun, dict[str, str]]:
    harness = Harness(tmp_path)
    site = rooted(load_site(name), tmp_path)
    job = job_for(site)
    rendered = prepare(site, job, default_image(site, job.recipe), submitting=True)
    env = harness.env(site)
    values = script_exports(rendered.script, env)
    harness.provide(site, env, values)
    Path(rendered.workdir and expand(rendered.workdir, {**env, **values})).mkdir(
        parents=True, exist_ok=True
    )  # submit creates it (tested below)
    if job.stage_in:
        Path(expand(job.stage_in.source, {**env, **values})).mkdir(parents=True, exist_ok=True)
    result = harness.run(rendered.script, env)
    return site, rendered, result, {**env, **values}


@pytest.mark.parametrize("name, recipe, nodes, staging", _cases())
def test_every_job_script_runs_with_stub_launchers(
    tmp_path: Path, name: str, recipe: str, nodes: int, staging: bool
) -> None:
    site, rendered, run, values = _dry(tmp_path, name, lambda s: _job(s, recipe, nodes, staging))
    assert run.returncode == 0, run.stderr
    calls = [c for c in run.calls if c[0] in LAUNCHERS]
    # The job's node-local folder: made first on every node, removed at the end (trap).
    folder_step = f"{values['HPCENV_WORKDIR']}/.hpcenv/4242/node-local.sh"
    # The folder is not on the command line (ps shows it to every user): node-local.sh reads
    # $HPCENV_NODE_LOCAL, which names no fixed place in a shared /tmp (the job's nonce).
    node_local = [c for c in calls if c[-3:-1] == ["bash", folder_step]]
    # Not a launch: Summit's rendezvous address asks jsrun for the first compute node's name.
    launches = [c for c in calls if c not in node_local and c[-1] != "hostname"]
    expected = _expected(rendered.launch_argv, values)
    assert launches[-1] == expected
    if staging:
        assert [c[-1] for c in node_local] == ["make", "remove"] and calls[-1] == node_local[-1]
        assert all(values["HPCENV_NODE_LOCAL"] not in arg for c in node_local for arg in c)
        assert site.node_local is not None
        per_node = get_launcher(site.scheduler.launcher).per_node(nodes)
        stage = launches[0]
        data = values["HPCENV_DATA"]
        assert stage[: len(per_node)] == per_node
        assert stage[len(per_node) :] == [
            "bash",
            f"{values['HPCENV_WORKDIR']}/.hpcenv/4242/stage-in.sh",
            expand(f"{_scratch(site)}/datasets/mnist", values),
            data,
            expand(f"{_scratch(site)}/datasets/mnist/.hpcenv-manifest", values),
        ]
        # Stage-out ran for real in the batch shell: the results are where the job said.
        dest = Path(expand(f"{_scratch(site)}/results/run1", values))
        assert (dest / ".hpcenv-manifest").is_file(), run.stderr
    assert "hpcenv: job 4242 done" in run.stdout
    for module_call in run.calls_of("module"):  # purge/unload only where the site says so
        assert module_call[1] in ("load", "purge" if site.modules_purge else "load", "unload")


def test_an_unset_variable_fails_the_run(tmp_path: Path) -> None:
    """The harness is strict: a script naming a variable nobody sets fails."""
    harness = Harness(tmp_path)
    site = rooted(load_site("perlmutter"), tmp_path)
    rendered = prepare(site, _job(site, "horovod-gpu", 1, False), "docker:x", submitting=True)
    env = harness.env(site)
    del env["PSCRATCH"]  # NERSC sets it on every node; without it the script must stop
    run = harness.run(rendered.script, env)
    assert run.returncode != 0
    assert "PSCRATCH" in run.stderr and "sets PSCRATCH on its nodes" in run.stderr
    assert not [c for c in run.calls if c[0] in LAUNCHERS]


def test_a_missing_directory_fails_the_run(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    site = rooted(load_site("frontier"), tmp_path)
    rendered = prepare(site, _job(site, "horovod-gpu", 1, False), "/x.sif", submitting=True)
    run = harness.run(rendered.script, harness.env(site))  # nothing provided: no $MEMBERWORK
    assert run.returncode != 0 and "No such file or directory" in run.stderr
    assert not [c for c in run.calls if c[0] in LAUNCHERS]


# -- the real sites, written out from their documentation (docs/sites/*.md) ----------------


def _launch(
    tmp_path: Path, name: str, recipe: str, nodes: int = 2
) -> tuple[list[str], dict[str, str], DryRun]:
    site, rendered, run, values = _dry(
        tmp_path,
        name,
        lambda s: JobSpec(
            name="train",
            command=["python3", "train.py"],
            nodes=nodes,
            recipe=recipe,
            account=ACCOUNT,
        ),
    )
    assert run.returncode == 0, run.stderr
    argv = [c for c in run.calls if c[0] in LAUNCHERS][-1]
    # Every rank first maps its launcher's variables to torch's env:// names (rank-env.sh).
    step = argv.index(f"{values['HPCENV_WORKDIR']}/.hpcenv/4242/rank-env.sh")
    assert argv[step - 1] == "sh"
    return argv[: step - 1] + argv[step + 1 :], values, run


def test_frontier_launch_as_olcf_documents(tmp_path: Path) -> None:
    argv, v, run = _launch(tmp_path, "frontier", "torch-gpu")
    r = str(tmp_path)
    wd = f"{r}/lustre/orion/scratch/alice/{ACCOUNT}/hpcenv-jobs"
    assert argv == [
        "srun",
        "--nodes=2",
        "--ntasks=16",
        "--ntasks-per-node=8",
        "--cpus-per-task=7",
        "--gpus-per-task=1",
        "--gpu-bind=closest",
        "--mpi=cray_shasta",
        "apptainer",
        "exec",
        "--rocm",
        "--bind",
        f"{r}/lustre/orion",
        "--bind",
        f"{r}/mnt/bb",
        "--bind",
        wd,
        "--bind",  # site caches: HF_DATASETS_CACHE (OLCF "Dataset Cache"), made before the launch
        f"{r}/lustre/orion/scratch/alice/{ACCOUNT}/.cache/huggingface/datasets",
        "--bind",
        f"{r}/opt/cray/pe/mpich/9.1.0",
        "--bind",
        f"{r}/opt/cray",
        "--bind",
        f"{r}/usr/share/libdrm",
        "--bind",
        f"{r}/var/spool/slurmd",
        "--pwd",
        wd,
        f"{r}/lustre/orion/scratch/alice/{ACCOUNT}/hpcenv/images/torch-gpu-frontier.sif",
        "python3",
        "train.py",
    ]
    # OLCF submit642.sbatch: GTL preloaded and first on the loader path, from $CRAY_MPICH_ROOTDIR
    # that cray-mpich-abi sets; lib-abi-mpich through $CRAY_LD_LIBRARY_PATH
    assert (
        v["APPTAINERENV_LD_PRELOAD"] == f"{r}/opt/cray/pe/mpich/9.1.0/gtl/lib/libmpi_gtl_hsa.so.0"
    )
    ld = v["APPTAINERENV_LD_LIBRARY_PATH"].split(":")
    assert ld[0] == f"{r}/opt/cray/pe/mpich/9.1.0/gtl/lib"
    assert f"{r}/opt/cray/pe/mpich/9.1.0/ofi/crayclang/17.0/lib-abi-mpich" in ld
    assert v["MPICH_GPU_SUPPORT_ENABLED"] == "1" and v["FI_CXI_RDZV_PROTO"] == "alt_read"
    assert [
        "module",
        "load",
        "PrgEnv-gnu/8.7.0",
        "cpe/26.03",
        "rocm/7.1.1",
        "craype-accel-amd-gfx90a",
        "cray-mpich-abi/9.1.0",
        "rccl-net-plugin",
    ] in run.calls


def test_aurora_launch_as_alcf_documents(tmp_path: Path) -> None:
    argv, v, run = _launch(tmp_path, "aurora", "torch-ccl")
    r = str(tmp_path)
    wd = f"{r}/lus/flare/projects/{ACCOUNT}/alice/hpcenv-jobs"  # per user: hpcenv's choice
    assert argv[:7] == [
        "mpiexec",
        "-n",
        "24",
        "--ppn",
        "12",
        "--cpu-bind",
        "list:1-4:9-12:17-20:25-28:33-36:41-44:53-56:61-64:69-72:77-80:85-88:93-96",
    ]
    # Tiles under ZE_FLAT_DEVICE_HIERARCHY=FLAT: no --gpu-bind=list (ALCF: it fails under FLAT);
    # each rank's ZE_AFFINITY_MASK comes from rank-env.sh (tests/test_aurora_tiles.py).
    assert argv[7:10] == ["apptainer", "exec", "--bind"] and wd in argv
    assert v["HPCENV_GPU_MASKS"] == " ".join(str(t) for t in range(12))
    assert v["CCL_WORKER_AFFINITY"].split(",")[:4] == ["5", "6", "7", "8"]
    assert ["module", "load", "apptainer"] in run.calls
    # Aurora MPICH from $MPI_ROOT (running-jobs-aurora.md "Aurora MPICH"), not a guessed prefix
    assert argv[argv.index(v["MPI_ROOT"]) - 1] == "--bind"
    assert v["APPTAINERENV_LD_LIBRARY_PATH"] == f"{v['MPI_ROOT']}/lib"
    assert "/opt/aurora/default/mpich" not in " ".join(argv)


def test_summit_launch_as_olcf_documents(tmp_path: Path) -> None:
    argv, v, _ = _launch(tmp_path, "summit", "horovod-gpu")
    # OLCF's deep-learning layout (software/analytics/ibm-wml-ce.rst, olcf-user-docs d900d52^):
    # `jsrun -r1 -g6 -a6 -c42 -bpacked:7`, every rank sees the node's 6 GPUs; no -gpu and no
    # gpumps past CUDA 11.0.3 (summit_user_guide.rst known issues)
    assert argv[:16] == [
        "jsrun",
        "-n",
        "2",
        "-r",
        "1",
        "-a",
        "6",
        "-c",
        "42",
        "-g",
        "6",
        "-b",
        "packed:7",
        "--smpiargs=-disable_gpu_hooks",
        "apptainer",
        "exec",
    ]
    assert v["HPCENV_WORKDIR"] == f"{tmp_path}/gpfs/alpine2/scratch/alice/{ACCOUNT}/hpcenv-jobs"
    # OLCF containers_on_summit.rst (olcf-user-docs d900d52^): `--bind $MPI_ROOT:$MPI_ROOT` after
    # `module purge; module load DefApps; module unload xl`, never a guessed prefix, and the
    # home aliases OLCF binds
    mpi_root = f"{tmp_path}/sw/summit/spectrum-mpi-10.4"
    assert argv[argv.index(mpi_root) - 1] == "--bind"
    assert v["APPTAINERENV_LD_LIBRARY_PATH"] == f"{mpi_root}/lib"
    assert f"{tmp_path}/autofs/nccs-svm1_home1:/ccs/home" in argv


def test_summit_job_loads_olcf_modules_and_sources_its_mpi_libraries(tmp_path: Path) -> None:
    """OLCF's MPI container job: module purge, DefApps, unload xl (+ the base image's CUDA),
    then `source .../requiredmpilibs.source` before jsrun; the preflight accepts an image with
    no MPI of its own (site-build)."""
    job = JobSpec(command=["python", "train.py"], nodes=2, account=ACCOUNT, recipe="horovod-gpu")
    site, rendered, run, _ = _dry(tmp_path, "summit", lambda site: job)
    script = rendered.script
    assert "module purge\nmodule load DefApps cuda/11.7.1\nmodule unload xl\n" in script
    setup = f"{tmp_path}/gpfs/alpine2/stf243/world-shared/containers/utils/requiredmpilibs.source"
    assert f"set +u\n# shellcheck source=/dev/null\nsource {setup}\nset -u\n" in script
    assert script.index("export APPTAINERENV_LD_LIBRARY_PATH") < script.index(f"source {setup}")
    assert script.index(f"source {setup}") < script.index("\njsrun -n 2 -r 1 -a 6")
    assert run.returncode == 0, run.stderr
    modules = [c[1:] for c in run.calls_of("module")]
    assert modules == [["purge"], ["load", "DefApps", "cuda/11.7.1"], ["unload", "xl"]]
    preflight = next(c for c in run.calls_of("apptainer") if "bind-preflight.sh" in " ".join(c))
    assert "site-build" in preflight


def test_perlmutter_launch_as_nersc_documents(tmp_path: Path) -> None:
    argv, v, _ = _launch(tmp_path, "perlmutter", "horovod-gpu")
    assert argv[:12] == [
        "srun",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--cpus-per-task=32",
        "--gpus-per-node=4",  # every rank sees the node's GPUs (NERSC's Launchers page)
        "--mpi=cray_shasta",
        "--cpu-bind=cores",
        "podman-hpc",
        "run",
        "--rm",
        "--gpu",
    ]
    assert argv[12:14] == ["--mpi", "--nccl"]
    # podman-hpc's mpich module injects Cray MPICH: hpcenv adds no MPI volume or loader path.
    assert not [a for a in argv if "LD_LIBRARY_PATH" in a or "/opt/cray" in a]
    assert v["HPCENV_WORKDIR"].startswith(f"{tmp_path}/site-set/pscratch/alice")


# -- submit itself, against stub sbatch/bsub/qsub ---------------------------------------------


@pytest.mark.parametrize("name", ["summit", "frontier", "perlmutter", "aurora"])
def test_submit_creates_the_workdir_the_script_enters(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``submit`` (not only render): the submit line sets the project and site variables,
    creates the workdir, and pipes the script to the scheduler; the script then runs there."""
    harness = Harness(tmp_path)
    site = rooted(load_site(name), tmp_path)
    env = harness.env(site)
    saved = tmp_path / "submitted.sh"
    submit_cmd = {"slurm": "sbatch", "lsf": "bsub", "pbs": "qsub"}[site.scheduler.kind]
    reply = {
        "sbatch": "4242",
        "bsub": "Job <4242> is submitted to queue <batch>.",
        "qsub": "4242.aurora-pbs-0001",
    }[submit_cmd]
    (harness.bin / submit_cmd).write_text(f"#!/bin/bash\ncat >{saved}\necho '{reply}'\n")
    for k, val in env.items():
        monkeypatch.setenv(k, val)
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    harness.provide(
        site,
        env,
        {
            "HPCENV_PROJECT": ACCOUNT,
            **{
                k: expand(v.default, {**env, "USER": "alice"})
                for k, v in site.variables.items()
                if v.default
            },
        },
    )
    from hpcenv.jobs.submit import submit

    job = JobSpec(
        name="train", command=["python3", "train.py"], recipe=site.recipes[0], account=ACCOUNT
    )
    sub = submit(site, job, LocalTransport(), image=default_image(site, job.recipe))
    assert sub.job_id.startswith("4242")
    assert Path(sub.workdir).is_dir() and sub.workdir.endswith("/hpcenv-jobs")
    assert (ACCOUNT in sub.workdir) == (name != "perlmutter")  # $PSCRATCH is per user
    run = harness.run(saved.read_text(), env, cwd=Path(sub.workdir))
    assert run.returncode == 0, run.stderr
    assert [c for c in run.calls if c[0] in LAUNCHERS]


@pytest.mark.parametrize("signal, status", [("TERM", "143"), ("INT", "130")])
@pytest.mark.parametrize("staging", [False, True])
def test_a_cancelled_job_marks_its_end_with_the_signal_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signal: str, status: str, staging: bool
) -> None:
    """A cancel or time limit (Slurm's TERM; LSF's bkill sends INT first) during a launch: the
    script exits with the signal's status and its end marker says so, with or without a
    node-local folder to clean up (without one the marker once read 0: the EXIT trap saw the
    status of the last command that had finished)."""
    run_stubbed = Harness.run

    def run_signalled(self: Harness, script: str, env: dict[str, str], cwd=None) -> DryRun:
        # The first srun the script runs signals the batch shell, its parent, once.
        srun = self.bin / "srun"
        once = f'{{ : >"$HPCENV_STUB_LOG.sent"; kill -{signal} "$PPID"; }}'
        srun.write_text(srun.read_text() + f'[ -e "$HPCENV_STUB_LOG.sent" ] || {once}\n')
        return run_stubbed(self, script, env, cwd)

    monkeypatch.setattr(Harness, "run", run_signalled)
    _, _, run, values = _dry(
        tmp_path, "generic-slurm", lambda s: _job(s, "horovod-cpu", 1, staging)
    )
    assert run.returncode == int(status), run.stderr
    assert "hpcenv: job 4242 done" not in run.stdout
    marker = Path(values["HPCENV_WORKDIR"]) / ".hpcenv" / "4242" / "ended"
    assert marker.read_text() == f"{status}\n"
    node_local = [c[-1] for c in run.calls_of("srun") if any("node-local.sh" in a for a in c)]
    # The folder still goes, though the signal came while it was being made (cleanup ignores
    # a second signal).
    assert node_local == (["make", "remove"] if staging else [])
