"""Real jobs on the project's one-node Slurm, submitted over both transports (local, SSH):
mpi4py allreduce with srun --mpi=pmix (bare host, then inside the local image), a staged
stage-in -> train -> stage-out chain checked by checksum, a job array with stitched results,
failures reported with Slurm's own words, rejected and blocked submissions, cancel."""

from __future__ import annotations

import getpass
import hashlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from requirements import need_module
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import JobError
from hpcenv.jobs import (
    JobSpec,
    LocalTransport,
    SshTransport,
    Transport,
    TransportSpec,
    array_chain,
    logs,
    status,
    submit,
    submit_chain,
    training_chain,
    verify_manifest,
    wait,
    write_manifest,
)
from hpcenv.jobs.schedulers import Slurm
from hpcenv.jobs.spec import MANIFEST_NAME
from hpcenv.site import Site, load_site

if TYPE_CHECKING:
    from services import SlurmInfo, SshdInfo

pytest_plugins = ["services"]  # the slurm and sshd fixtures
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300), pytest.mark.alongside]

needs_mpi4py = pytest.mark.usefixtures("mpi4py_installed")


@pytest.fixture
def mpi4py_installed() -> None:
    need_module("mpi4py", "the job's ranks run this Python's mpi4py")


ALLREDUCE = textwrap.dedent(
    """\
    import sys
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    a = np.full(1 << 20, comm.rank + 1.0, dtype=np.float64)
    b = np.empty_like(a)
    comm.Allreduce(a, b)
    print(f"allreduce rank={comm.rank} size={comm.size} sum={b[0]:.1f} python={sys.executable}")
    """
)

TRAIN = textwrap.dedent(
    """\
    # A stand-in training step: every rank reads the staged data; rank 0 writes the "model".
    import hashlib, os, sys
    from mpi4py import MPI
    data, out = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    names = sorted(n for n in os.listdir(data) if not n.startswith("."))
    blob = b"".join(open(os.path.join(data, n), "rb").read() for n in names)
    total = comm.allreduce(sum(blob), op=MPI.SUM)
    if comm.rank == 0:
        os.makedirs(os.path.join(out, "ckpt"), exist_ok=True)
        with open(os.path.join(out, "model.txt"), "w") as f:
            f.write(f"files={len(names)} sha256={hashlib.sha256(blob).hexdigest()} "
                    f"ranks={comm.size} total={total}\\n")
        with open(os.path.join(out, "ckpt", "step-1.bin"), "wb") as f:
            f.write(blob[::-1])
    """
)


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(params=["local", pytest.param("ssh", marks=pytest.mark.ssh)])
def transport(request: pytest.FixtureRequest, slurm: SlurmInfo) -> Iterator[Transport]:
    if request.param == "local":
        yield LocalTransport()
        return
    info: SshdInfo = request.getfixturevalue("sshd")
    t = SshTransport(
        TransportSpec(
            kind="ssh",
            host=info.host,
            port=info.port,
            user="root",
            key_file=str(info.key),
            known_hosts=str(info.known_hosts),
        )
    )
    yield t
    t.close()


@pytest.fixture
def site() -> Site:
    return load_site("local")


def _script(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


@needs_mpi4py
def test_allreduce_bare_host_srun_pmix(site: Site, transport: Transport, tmp_path: Path) -> None:
    prog = _script(tmp_path, "allreduce.py", ALLREDUCE)
    job = JobSpec(
        name="allreduce",
        command=[sys.executable, str(prog)],
        ranks_per_node=2,
        workdir=str(tmp_path),
    )
    sub = submit(site, job, transport)
    st = wait(sub, transport, timeout=120)
    assert st.state == "COMPLETED" and st.exit_code == "0:0"
    out = logs(sub, transport)
    ranks = sorted(ln for ln in out.splitlines() if ln.startswith("allreduce "))
    assert [r.split(" python=")[0] for r in ranks] == [
        "allreduce rank=0 size=2 sum=3.0",
        "allreduce rank=1 size=2 sum=3.0",
    ]
    assert (
        "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmix"
        in Path(sub.script_path).read_text()
    )


def test_allreduce_in_image_podman_under_srun(
    site: Site, transport: Transport, tmp_path: Path, local_image: str
) -> None:
    image = local_image
    _script(tmp_path, "allreduce.py", ALLREDUCE)
    job = JobSpec(
        name="allreduce-image",
        command=["python3", "{workdir}/allreduce.py"],
        ranks_per_node=2,
        workdir=str(tmp_path),
        image=image,
    )
    sub = submit(site, job, transport)
    wait(sub, transport, timeout=240)
    out = logs(sub, transport)
    ranks = sorted(ln for ln in out.splitlines() if ln.startswith("allreduce "))
    assert len(ranks) == 2 and all("size=2 sum=3.0" in r for r in ranks), out
    assert all(f"python={sys.executable}" not in r for r in ranks)  # the image's python ran


@needs_mpi4py
def test_training_chain_stage_in_train_stage_out(
    site: Site, transport: Transport, tmp_path: Path
) -> None:
    name = f"mnist-{uuid.uuid4().hex[:6]}"
    dataset = tmp_path / "project" / "mnist"
    dataset.mkdir(parents=True)
    blobs = {f"shard-{i}.bin": bytes((i * 7 + j) % 256 for j in range(50_000)) for i in range(3)}
    for fname, blob in blobs.items():
        (dataset / fname).write_bytes(blob)
    write_manifest(dataset)
    train = _script(tmp_path, "train.py", TRAIN)
    results = tmp_path / "project" / "results" / "run1"
    chain = training_chain(
        name=name,
        dataset=str(dataset),
        scratch=str(tmp_path / "scratch"),
        command=[sys.executable, str(train), "{data}", "{output}"],
        results=str(results),
        ranks_per_node=2,
    )
    chain = [j.model_copy(update={"workdir": str(tmp_path)}) for j in chain]
    try:
        subs = submit_chain(site, chain, transport)
        wait(subs[-1], transport, timeout=240)
        for sub in subs:
            assert status(sub, transport).state == "COMPLETED"
        whole = b"".join(blobs[k] for k in sorted(blobs))
        expected = (
            f"files=3 sha256={hashlib.sha256(whole).hexdigest()} ranks=2 total={2 * sum(whole)}\n"
        ).encode()
        model = (results / "model.txt").read_bytes()
        assert hashlib.sha256(model).hexdigest() == hashlib.sha256(expected).hexdigest()
        ckpt = (results / "ckpt" / "step-1.bin").read_bytes()
        assert hashlib.sha256(ckpt).hexdigest() == hashlib.sha256(whole[::-1]).hexdigest()
        assert verify_manifest(results, results / MANIFEST_NAME) == []
        staged_log = logs(subs[1], transport)
        assert "stage-in[" in staged_log and "verified" in staged_log
        assert not list(results.parent.glob("*.hpcenv-tmp.*"))
        # The training job staged into /tmp/hpcenv-<user>-<name>-<its job id>-<nonce>: straight
        # in the shared sticky /tmp under a name nobody could take first, gone at its end.
        user = getpass.getuser()
        made = re.search(
            rf"/tmp/hpcenv-{user}-{name}-{subs[1].job_id}-[0-9a-f]{{16}}/data", staged_log
        )
        assert made, staged_log
        assert not Path(made.group(0)).parent.exists()
    finally:
        for left in Path("/tmp").glob(f"hpcenv-{getpass.getuser()}-{name}-*"):
            shutil.rmtree(left, ignore_errors=True)


def test_chain_stops_after_a_failure(site: Site, transport: Transport, tmp_path: Path) -> None:
    first = JobSpec(
        name="breaks", command=["false"], launch="single", cores_per_rank=1, workdir=str(tmp_path)
    )
    second = JobSpec(
        name="never",
        command=["touch", str(tmp_path / "ran")],
        launch="single",
        cores_per_rank=1,
        workdir=str(tmp_path),
    )
    subs = submit_chain(site, [first, second], transport)
    with pytest.raises(JobError) as err:
        wait(subs[1], transport, timeout=120)
    assert "DependencyNeverSatisfied" in str(err.value) or "CANCELLED" in str(err.value)
    assert not (tmp_path / "ran").exists()


def test_array_with_stitched_results(site: Site, transport: Transport, tmp_path: Path) -> None:
    code = (
        "import os, sys; t = int(sys.argv[1]); os.makedirs(sys.argv[2], exist_ok=True); "
        "open(os.path.join(sys.argv[2], f'part-{t}.txt'), 'w')"
        ".write(f'chunk {t}: {sum(range(t * 1000, (t + 1) * 1000))}\\n')"
    )
    parts, output = tmp_path / "parts", tmp_path / "out" / "inference.txt"
    chunks = 5
    jobs = array_chain(
        name="infer",
        command=[sys.executable, "-c", code, "{task}", str(parts)],
        chunks=chunks,
        parts=str(parts),
        output=str(output),
        suffix=".txt",
    )
    jobs = [j.model_copy(update={"workdir": str(tmp_path)}) for j in jobs]
    subs = submit_chain(site, jobs, transport)
    st = wait(subs[0], transport, timeout=180)
    assert len(st.tasks) == chunks and all(t.state == "COMPLETED" for t in st.tasks)
    wait(subs[1], transport, timeout=120)
    expected = "".join(
        f"chunk {t}: {sum(range(t * 1000, (t + 1) * 1000))}\n" for t in range(chunks)
    )
    assert output.read_text() == expected
    assert "stitch: 5 parts" in logs(subs[1], transport)


def test_failing_job_reports_slurms_message(
    site: Site, transport: Transport, tmp_path: Path
) -> None:
    job = JobSpec(
        name="fails",
        command=["bash", "-c", "echo 'disk quota exceeded' >&2; exit 3"],
        launch="single",
        cores_per_rank=1,
        workdir=str(tmp_path),
    )
    sub = submit(site, job, transport)
    with pytest.raises(JobError) as err:
        wait(sub, transport, timeout=120)
    msg = str(err.value)
    assert f"job {sub.job_id}: FAILED exit=3:0 reason=NonZeroExitCode (scontrol)" in msg
    assert "disk quota exceeded" in msg


def test_rejected_submission_carries_sbatch_error(
    site: Site, tmp_path: Path, slurm: SlurmInfo
) -> None:
    job = JobSpec(name="nowhere", command=["true"], queue="nosuchpartition", workdir=str(tmp_path))
    with pytest.raises(
        JobError,
        match=r"slurm rejected the job: sbatch: error: invalid partition "
        r"specified: nosuchpartition .*Batch job submission failed",
    ):
        submit(site, job, LocalTransport())


def test_job_on_drained_node_is_reported(site: Site, tmp_path: Path, slurm: SlurmInfo) -> None:
    t = LocalTransport()
    drain = [
        "scontrol",
        "update",
        f"NodeName={slurm.node}",
        "State=DRAIN",
        "Reason=hpcenv-test-maintenance",
    ]
    subprocess.run(drain, check=True)
    try:
        sub = submit(
            site,
            JobSpec(
                name="blocked",
                command=["true"],
                launch="single",
                cores_per_rank=1,
                workdir=str(tmp_path),
            ),
            t,
        )
        with pytest.raises(
            JobError,
            match=r"job cannot start: .*PENDING reason=(ReqNodeNotAvail"
            r"|Nodes_required_for_job_are_DOWN,_DRAINED)",
        ):
            wait(sub, t, timeout=30)
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={slurm.node}", "State=RESUME"], check=True)
    wait(
        sub, t, timeout=60, blocked_after=None
    )  # runs once the node is back (its old reason may linger a poll)


def test_too_many_nodes_is_reported(site: Site, tmp_path: Path, slurm: SlurmInfo) -> None:
    t = LocalTransport()
    sub = submit(site, JobSpec(name="three", command=["true"], nodes=3, workdir=str(tmp_path)), t)
    with pytest.raises(JobError, match="job cannot start: .*reason=PartitionConfig"):
        wait(sub, t, timeout=30)
    Slurm().cancel(t, sub.job_id)
    assert status(sub, t).state == "CANCELLED"


@needs_mpi4py
def test_forced_oversubscription_runs(site: Site, tmp_path: Path, slurm: SlurmInfo) -> None:
    prog = _script(tmp_path, "allreduce.py", ALLREDUCE)
    job = JobSpec(
        name="over",
        command=[sys.executable, str(prog)],
        ranks_per_node=3,
        force=True,
        workdir=str(tmp_path),
    )
    t = LocalTransport()
    sub = submit(site, job, t)
    wait(sub, t, timeout=120)
    assert logs(sub, t).count("size=3 sum=6.0") == 3


@needs_mpi4py
def test_cli_submit_status_logs_cancel(runner: CliRunner, tmp_path: Path, slurm: SlurmInfo) -> None:
    prog = _script(tmp_path, "allreduce.py", ALLREDUCE)
    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "local",
            "--no-container",
            "-n",
            "2",
            "--workdir",
            str(tmp_path),
            "--wait",
            "--json",
            "--",
            sys.executable,
            str(prog),
        ],
    )
    assert res.exit_code == 0, res.output
    job_id = json.loads(res.stdout)["job_id"]
    st = runner.invoke(app, ["status", job_id, "--json"])
    assert json.loads(st.stdout)["state"] == "COMPLETED"
    assert runner.invoke(app, ["status", job_id]).stdout.startswith(f"job {job_id}: COMPLETED")
    assert "allreduce rank=1 size=2 sum=3.0" in runner.invoke(app, ["logs", job_id]).stdout
    # Jobcomp fallback reads the same job from the jobcomp file.
    comp = Slurm().status_from_jobcomp(LocalTransport(), job_id)
    assert comp is not None and comp.state == "COMPLETED" and comp.source == "jobcomp"

    res = runner.invoke(
        app,
        [
            "submit",
            "--site",
            "local",
            "--no-container",
            "--single",
            "--workdir",
            str(tmp_path),
            "--json",
            "--",
            "sleep",
            "60",
        ],
    )
    sleeper = json.loads(res.stdout)["job_id"]
    assert runner.invoke(app, ["cancel", sleeper]).exit_code == 0
    st = json.loads(runner.invoke(app, ["status", sleeper, "--json"]).stdout)
    assert st["state"] in ("CANCELLED", "COMPLETING") or st["phase"] == "failed"


def test_job_runs_in_the_folder_submit_was_called_from(
    runner: CliRunner, tmp_path: Path, slurm: SlurmInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's default, on a real Slurm: the command runs where ``submit`` was called (issue
    22), while hpcenv's steps and logs stay in the workdir; its relative script is found."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "where.sh").write_text('pwd -P > "$HPCENV_WORKDIR/where.txt"\n')
    work = tmp_path / "work"
    monkeypatch.chdir(proj)
    args = ["submit", "--site", "local", "--no-container", "--single", "--workdir", str(work)]
    res = runner.invoke(app, [*args, "--wait", "--json", "--", "sh", "where.sh"])
    assert res.exit_code == 0, res.output
    assert (work / "where.txt").read_text().strip() == str(proj.resolve())
    assert (work / ".hpcenv").is_dir() and not (proj / ".hpcenv").exists()
