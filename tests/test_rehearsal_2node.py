"""The two-node rehearsal (site ``local-2node``) for real: node1 and node2 are network + UTS +
mount namespaces with their own slurmd, hostname, address and node-local disk; slurmctld and
munged are shared. The session fixture ``two_node`` starts it with scripts/slurm-2node-up.sh and
stops it with scripts/slurm-2node-down.sh (nothing left behind, checked at the end).

What runs: ``hpcenv submit --site local-2node --nodes 2 --stage-in --stage-out`` (the installed
CLI, as a process) with an exact allreduce and Horovod MNIST on both nodes, once with the ranks in
the local podman image (site ``local-2node``) and once in the local site's SIF (site
``local-2node-sif``: the job script every Apptainer site gets, ``srun --mpi=pmix apptainer exec``;
the nodes' ``apptainer`` is hpcenv's helper container, a rehearsal-only stand-in, see the site
file); the faults: a node's slurmd killed mid-job, a node whose staged copy is corrupted, a job
array with one failing task. Kept lean for CI: 2 ranks (one per node), one epoch, MNIST's
4,000/1,000 split.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from requirements import need_file

from hpcenv.jobs import LocalTransport, logs, status, submit, wait
from hpcenv.jobs.schedulers import client_env
from hpcenv.jobs.staging import array_chain, write_manifest
from hpcenv.jobs.submit import submit_chain
from hpcenv.site import Site, load_site

if TYPE_CHECKING:
    from services import TwoNodeInfo

pytest_plugins = ["services"]
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600), pytest.mark.alongside]

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Job records and the merged containers.conf a job names: on shared disk, because each
    node has its own /tmp (where pytest's tmp_path lives)."""
    path = SCRATCH / f"cache-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    monkeypatch.setenv("HPCENV_CACHE", str(path))
    yield
    shutil.rmtree(path, ignore_errors=True)


SCRATCH = Path("/var/tmp/hpcenv-scratch/rehearsal-tests")


@pytest.fixture
def shared(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder on the shared filesystem (each node has its own /tmp, as on a real cluster)."""
    path = SCRATCH / f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def site() -> Site:
    return load_site("local-2node")


@pytest.fixture
def t(site: Site, two_node: TwoNodeInfo) -> LocalTransport:
    assert site.scheduler.conf == str(two_node.conf)
    return LocalTransport(client_env(site))


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("SLURM_CONF", None)  # the site file names its own cluster
    # submitted from a folder both nodes see (as on a cluster): the job runs where submit was
    # called, and each rehearsal node has its own /tmp
    SCRATCH.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [HPCENV, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=SCRATCH
    )


def _succeeded(proc: subprocess.CompletedProcess[str]) -> None:
    """A submit that ended 0; otherwise the failure says what the job itself wrote (its
    stdout and stderr files), not only the last lines that submit quotes."""
    if proc.returncode == 0:
        return
    found = re.search(r" job (\d+): ", proc.stderr)
    logs = _cli("logs", found.group(1)) if found else None
    written = f"{logs.stdout[-6000:]}{logs.stderr}" if logs else "(no job id in submit's output)"
    pytest.fail(f"exit {proc.returncode}: {proc.stdout}{proc.stderr}\njob logs:\n{written}")


def _lines(text: str, tag: str) -> list[dict[str, Any]]:
    return [json.loads(ln.split(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(tag + " ")]


def _in_node(info: TwoNodeInfo, node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside ``node``'s namespaces (as that node's processes see the world)."""
    holder = (info.state / node / "holder.pid").read_text().strip()
    return subprocess.run(
        ["nsenter", "-t", holder, "--net", "--uts", "--mount", *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_nodes_are_separate_hosts_on_a_veth_link(two_node: TwoNodeInfo) -> None:
    for node, addr in (("node1", "10.251.77.11"), ("node2", "10.251.77.12")):
        assert _in_node(two_node, node, "hostname").stdout.strip() == node
        ip = _in_node(two_node, node, "ip", "-4", "-o", "addr", "show", "eth0").stdout
        assert f"{addr}/24" in ip
        routes = _in_node(two_node, node, "ip", "route").stdout
        assert "default" not in routes  # nothing leaves the rehearsal network
    # node1 reaches node2's slurmd over the link (a TCP connect; no ping on this host).
    tcp = _in_node(two_node, "node1", "bash", "-c", "exec 3<>/dev/tcp/10.251.77.12/6818")
    assert tcp.returncode == 0, tcp.stderr
    # Same node-local path, different disk on each node.
    tag = uuid.uuid4().hex[:8]
    _in_node(two_node, "node1", "sh", "-c", f"echo one > {two_node.node_local}/probe-{tag}")
    seen = _in_node(two_node, "node2", "cat", f"{two_node.node_local}/probe-{tag}")
    assert seen.returncode != 0
    _in_node(two_node, "node1", "rm", "-f", f"{two_node.node_local}/probe-{tag}")
    sinfo = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(two_node.conf)},
    )
    assert sorted(ln.split()[0] for ln in sinfo.stdout.splitlines()) == ["node1", "node2"]


@pytest.fixture(scope="module")
def mnist() -> Iterator[Path]:
    """MNIST IDX files (4,000 train / 1,000 held out) with the staging manifest, on shared disk."""
    from hpcenv.datasets import prepare_mnist

    out = SCRATCH / f"mnist-{uuid.uuid4().hex[:6]}"
    ds = prepare_mnist(out)
    for extra in ("manifest.json",):
        (ds.directory / extra).unlink(missing_ok=True)  # only the IDX files are staged
    write_manifest(ds.directory)
    yield ds.directory
    shutil.rmtree(out, ignore_errors=True)


def _workdir(tmp_path: Path, script: str = "train_two_node.py") -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    shutil.copy(DATA / script, wd)
    return wd


def _real_sif() -> Path:
    from hpcenv.paths import cache_dir

    return cache_dir() / "sif" / "horovod-cpu-local.sif"


SIF = _real_sif()  # the real cache (`make smoke-test` builds it), before the private-cache fixture


@dataclass(frozen=True)
class Ranks:
    """Where the ranks run: the site, the image, and what a rank reports as its container."""

    site: str
    image: str
    container: str


@pytest.fixture(params=["podman", pytest.param("sif", marks=pytest.mark.apptainer)])
def ranks_in(request: pytest.FixtureRequest) -> Ranks:
    """The local podman image on ``local-2node``, or the local site's SIF on ``local-2node-sif``."""
    if request.param == "podman":
        return Ranks("local-2node", request.getfixturevalue("local_image"), "podman")
    need_file(SIF, "the local SIF", "local-2node-sif runs its ranks in it")
    request.getfixturevalue("site_apptainer")  # the nodes' `apptainer` command is installed
    return Ranks("local-2node-sif", str(SIF), str(SIF))


def _assert_tcp_between_nodes(log: str) -> None:
    """Between the nodes Open MPI used TCP over the veth link (shown in the log)."""
    assert re.search(r"\[node1:\d+\] mca: bml: Using tcp btl for send to \S+ on node node2", log)
    assert re.search(r"\[node2:\d+\] mca: bml: Using tcp btl for send to \S+ on node node1", log)
    assert re.search(r"btl: ?tcp: .*10\.251\.77\.1[12]", log), "TCP over the veth addresses"


def test_allreduce_is_exact_on_both_nodes_over_tcp(
    two_node: TwoNodeInfo, ranks_in: Ranks, shared: Path
) -> None:
    wd = _workdir(shared, "mpi_identity.py")
    proc = _cli(
        "submit",
        "--site",
        ranks_in.site,
        "--image",
        ranks_in.image,
        "--name",
        f"ar2n-{uuid.uuid4().hex[:6]}",
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--workdir",
        str(wd),
        "--wait",
        "--timeout",
        "300",
        "--json",
        "--",
        "/opt/venv/bin/python3",
        "{workdir}/mpi_identity.py",
    )
    _succeeded(proc)
    log = _cli("logs", json.loads(proc.stdout)["job_id"]).stdout
    ranks = sorted(_lines(log, "mpi-identity"), key=lambda r: r["rank"])
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, "node1"), (1, "node2")], log
    for r in ranks:  # rank r sent r+1: the exact sum 3.0 arrived on both nodes
        assert r["size"] == 2 and r["allreduce"] == 3.0 and r["allreduce_exact"], r
        assert r["container"] == ranks_in.container, r  # in the image, not on the host
        assert r["library"].startswith("Open MPI v4.1"), r
    _assert_tcp_between_nodes(log)


def test_horovod_mnist_across_two_nodes_with_per_node_staging(
    two_node: TwoNodeInfo, ranks_in: Ranks, mnist: Path, shared: Path
) -> None:
    tmp_path = shared
    wd = _workdir(tmp_path)
    name = f"mnist2n-{uuid.uuid4().hex[:6]}"
    results = tmp_path / "project" / "results"
    proc = _cli(
        "submit",
        "--site",
        ranks_in.site,
        "--image",
        ranks_in.image,
        "--name",
        name,
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--workdir",
        str(wd),
        "--stage-in",
        str(mnist),
        "--stage-out",
        str(results),
        "--wait",
        "--timeout",
        "500",
        "--json",
        "--",
        "/opt/venv/bin/python3",
        "{workdir}/train_two_node.py",
        "{data}",
        "{output}",
        "--epochs",
        "1",
        "--threads",
        "1",
    )
    _succeeded(proc)
    sub = json.loads(proc.stdout)
    assert sub["status"]["state"] == "COMPLETED"
    log = _cli("logs", sub["job_id"]).stdout
    # Stage-in once per node, into that node's own disk, verified there.
    staged = sorted(ln for ln in log.splitlines() if ln.startswith("stage-in["))
    assert [s.split("]")[0] for s in staged] == ["stage-in[node1", "stage-in[node2"], log
    assert all("verified" in s for s in staged)
    # One rank on each node, in the image, reading its node's own copy of the staged data.
    ranks = sorted(_lines(log, "rank-on"), key=lambda r: r["rank"])
    assert [r["host"] for r in ranks] == ["node1", "node2"], log
    for r in ranks:
        assert r["container"] == ranks_in.container, r
        # straight in the node's own sticky /tmp, under a name nobody could take first
        user = getpass.getuser()
        assert re.fullmatch(rf"/tmp/hpcenv-{user}-{name}-\d+-[0-9a-f]{{16}}/data", r["data"]), r
        assert "train-images-idx3-ubyte" in r["files"], r
    for node in two_node.nodes:  # each node's per-job copy is removed when the job ends
        pattern = f"/tmp/hpcenv-{getpass.getuser()}-{name}-*"
        left = _in_node(two_node, node, "sh", "-c", f"ls -d {pattern} || true")
        assert left.stdout.strip() == "", (node, left.stdout)
    assert not list(Path("/tmp").glob(f"hpcenv-*-{name}-*"))  # never on the host's /tmp
    # Horovod trained across both: identical parameters on every rank.
    # (read from the staged-out file: its log line is over 1 KiB, which slurmstepd forwards in
    # pieces that the other rank's output could land between)
    result = json.loads((results / "mnist.json").read_text())
    print(
        f"mnist across 2 nodes ({ranks_in.site}): train {result['train_seconds']:.1f} s, "
        f"accuracy {result['test_accuracy']:.3f}, job {sub['status'].get('raw', {}).get('RunTime')}"
    )
    assert result["world_size"] == 2 and result["controller"] == "mpi"
    sums = {c["sha256"] for c in result["param_checksums"]}
    assert len(sums) == 1 and result["param_max_spread"] == 0.0
    assert result["test_accuracy"] > 0.5
    _assert_tcp_between_nodes(log)
    # Stage-out: atomic, verified, nothing left beside it.
    assert "mnist-result " in log  # and rank 0 printed it
    assert (results / ".hpcenv-manifest").is_file()
    assert not list(results.parent.glob("*.hpcenv-tmp.*"))


def _status(job: str) -> dict[str, Any]:
    proc = _cli("status", job, "--json")
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _wait_finished(job: str, timeout: float = 240) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = _status(job)
        if st["phase"] in ("done", "failed"):
            return st
        time.sleep(1)
    raise AssertionError(f"job {job} not finished after {timeout} s: {st}")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_node_failure_mid_job_fails_it_and_keeps_the_previous_result(
    two_node: TwoNodeInfo, t: LocalTransport, shared: Path
) -> None:
    tmp_path = shared
    results = tmp_path / "results"
    results.mkdir()
    (results / "model.txt").write_text("the previous, good result\n")
    write_manifest(results)
    before = _tree(results)
    wd = tmp_path / "work"
    wd.mkdir()
    name = f"nodefail-{uuid.uuid4().hex[:6]}"
    proc = _cli(
        "submit",
        "--site",
        "local-2node",
        "--no-container",
        "--name",
        name,
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--workdir",
        str(wd),
        "--stage-out",
        str(results),
        "--force",
        "--json",
        "--",
        "bash",
        "-c",
        # long enough that only the node failure ends it (slurmstepd outlives a killed slurmd
        # and could report a short job done first)
        "echo started-on-$(hostname); echo partial > {output}/model.txt; sleep 600",
    )
    _succeeded(proc)
    job = json.loads(proc.stdout)["job_id"]
    end = time.monotonic() + 120
    while time.monotonic() < end:
        log = _cli("logs", job).stdout
        if "started-on-node1" in log and "started-on-node2" in log:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"job {job} did not start on both nodes: {_status(job)}")
    pid = int((two_node.state / "node2" / "slurmd.pid").read_text())
    os.kill(pid, signal.SIGKILL)  # node2's slurmd dies mid-job
    try:
        st = _wait_finished(job)
        assert st["phase"] == "failed" and st["state"] in ("NODE_FAIL", "FAILED"), st
        status_line = _cli("status", job).stdout + _cli("status", job).stderr
        assert "node2" in status_line, status_line
        log = _cli("logs", job).stdout
        assert "node2" in log, log
        assert "Stage-out" not in log and "stage-out:" not in log
        assert _tree(results) == before  # the previous result is intact
        assert not list(results.parent.glob("results.hpcenv-*"))  # no partial stage-out
    finally:
        _cli("cancel", job)  # if the node failure did not end it
        up = subprocess.run(
            ["bash", str(Path(__file__).parents[1] / "scripts" / "slurm-2node-up.sh")],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert up.returncode == 0, up.stderr


def test_corrupted_staged_copy_on_one_node_stops_before_training(
    two_node: TwoNodeInfo, shared: Path
) -> None:
    tmp_path = shared
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for i in range(3):
        (dataset / f"shard-{i}.bin").write_bytes(bytes((i * 31 + j) % 251 for j in range(20_000)))
    write_manifest(dataset)
    bad = tmp_path / "bad-shard.bin"
    bad.write_bytes(bytes(20_000))  # same size, other bytes: only the checksum can tell
    # node2 sees a corrupted shard (a stale/corrupt view of the shared filesystem on one node).
    target = str(dataset / "shard-1.bin")
    assert _in_node(two_node, "node2", "mount", "--bind", str(bad), target).returncode == 0
    try:
        wd = tmp_path / "work"
        wd.mkdir()
        name = f"corrupt-{uuid.uuid4().hex[:6]}"
        proc = _cli(
            "submit",
            "--site",
            "local-2node",
            "--no-container",
            "--name",
            name,
            "--nodes",
            "2",
            "--ranks-per-node",
            "1",
            "--workdir",
            str(wd),
            "--stage-in",
            str(dataset),
            "--wait",
            "--timeout",
            "180",
            "--",
            "bash",
            "-c",
            "echo TRAINING-STARTED on $(hostname)",
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        job = re.search(r"job (\d+): ", proc.stdout + proc.stderr)
        assert job, proc.stdout + proc.stderr
        log = _cli("logs", job.group(1)).stdout
        assert "stage-in[node1]" in log and "verified" in log, log
        assert "stage-in[node2]: copy" in log and "does not verify" in log, log
        assert "TRAINING-STARTED" not in log
    finally:
        _in_node(two_node, "node2", "umount", target)
        for node in two_node.nodes:
            _in_node(two_node, node, "rm", "-rf", f"{two_node.node_local}/{name}")


def test_array_with_one_failing_task_keeps_the_others_and_stitch_refuses(
    two_node: TwoNodeInfo, t: LocalTransport, shared: Path
) -> None:
    tmp_path = shared
    site = load_site("local-2node")
    parts = tmp_path / "parts"
    parts.mkdir()
    out = tmp_path / "stitched.txt"
    chain = array_chain(
        name=f"arr-{uuid.uuid4().hex[:6]}",
        chunks=3,
        parts=str(parts),
        output=str(out),
        command=[
            "bash",
            "-c",
            f"[ {{task}} != 1 ] || exit 3; echo chunk-{{task}}-$(hostname) > {parts}/part-{{task}}",
        ],
    )
    chain = [j.model_copy(update={"workdir": str(tmp_path)}) for j in chain]
    subs = submit_chain(site, chain, t)
    st = wait_quiet(subs[0], t)
    assert st.phase == "failed" and "_1" in st.message(), st.message()
    assert sorted(p.name for p in parts.iterdir()) == ["part-0", "part-2"]
    assert (parts / "part-0").read_text().startswith("chunk-0-node")
    stitch = wait_quiet(subs[1], t)
    assert stitch.phase == "failed" and not out.exists(), stitch.message()
    # The stitch step itself refuses an incomplete set, also when run without the dependency.
    direct = chain[1].model_copy(update={"name": "stitch-direct"})
    sub = submit(site, direct, t)
    st = wait_quiet(sub, t)
    assert st.phase == "failed" and not out.exists()
    assert f"stitch: missing part {parts}/part-1" in logs(sub, t)


def wait_quiet(sub: Any, t: LocalTransport) -> Any:
    from hpcenv.errors import JobError

    try:
        return wait(sub, t, timeout=180)
    except JobError:
        return status(sub, t)


def _rank_containers() -> dict[str, str]:
    """Running containers whose process lives in a rehearsal node's network namespace:
    container id -> node (the SIF ranks' helper containers, or podman ranks)."""
    from hpcenv.engines import engine_env

    env = engine_env()
    ps = subprocess.run(
        ["podman", "ps", "-q", "--no-trunc"], capture_output=True, text=True, env=env, timeout=60
    )
    found = {}
    for cid in ps.stdout.split():
        pid = subprocess.run(
            ["podman", "inspect", "-f", "{{.State.Pid}}", cid],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        ).stdout.strip()
        node = (
            subprocess.run(
                ["ip", "netns", "identify", pid], capture_output=True, text=True, timeout=30
            ).stdout.strip()
            if pid.isdigit()
            else ""
        )
        if node in ("node1", "node2"):
            found[cid] = node
    return found


def test_teardown_with_sif_ranks_running_leaves_nothing(
    two_node: TwoNodeInfo, site_apptainer: Path, shared: Path
) -> None:
    """scripts/slurm-2node-down.sh while SIF ranks run: every rank's helper container goes with
    the nodes (nothing left in podman), as do the namespaces; the rehearsal then starts again."""
    from hpcenv.engines import engine_env

    need_file(SIF, "the local SIF", "local-2node-sif runs its ranks in it")
    wd = shared / "work"
    wd.mkdir()
    proc = _cli(
        "submit",
        "--site",
        "local-2node-sif",
        "--image",
        str(SIF),
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--workdir",
        str(wd),
        "--json",
        "--",
        "sleep",
        "300",
    )
    _succeeded(proc)
    scripts = Path(__file__).parents[1] / "scripts"
    try:
        end = time.monotonic() + 120
        while sorted((ranks := _rank_containers()).values()) != ["node1", "node2"]:
            assert time.monotonic() < end, f"SIF ranks not running on both nodes: {ranks}"
            time.sleep(1)
        down = subprocess.run(
            ["bash", str(scripts / "slurm-2node-down.sh")],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert down.returncode == 0, down.stderr
        # a --rm container whose podman client was killed is removed by its cleanup process,
        # which may finish a moment after the script returns: gone within 60 s is "nothing left"
        end = time.monotonic() + 60
        while True:
            left = subprocess.run(
                ["podman", "ps", "-a", "-q", "--no-trunc"],
                capture_output=True,
                text=True,
                env=engine_env(),
                timeout=60,
            ).stdout.split()
            if not set(ranks) & set(left) or time.monotonic() > end:
                break
            time.sleep(2)
        assert not set(ranks) & set(left), f"rank containers left behind: {set(ranks) & set(left)}"
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not {"node1", "node2"} & set(netns.split()), netns
    finally:
        up = subprocess.run(
            ["bash", str(scripts / "slurm-2node-up.sh")],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert up.returncode == 0, up.stderr


@pytest.mark.parametrize("launcher", ["site", "torchrun"])
def test_plain_ddp_trains_on_both_nodes_with_env_rendezvous(
    two_node: TwoNodeInfo, ranks_in: Ranks, shared: Path, launcher: str
) -> None:
    """A plain DDP script (tests/data/ddp_train.py: no Horovod, no hpcenv) trains on node1 and
    node2 with env:// rendezvous: under srun (rank-env.sh maps SLURM_* to RANK...) and under
    --launcher torchrun (one per node, c10d at MASTER_ADDR:MASTER_PORT)."""
    wd = _workdir(shared, "ddp_train.py")
    extra = ["--launcher", "torchrun"] if launcher == "torchrun" else []
    proc = _cli(
        "submit",
        "--site",
        ranks_in.site,
        "--image",
        ranks_in.image,
        "--name",
        f"ddp2n-{uuid.uuid4().hex[:6]}",
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--workdir",
        str(wd),
        *extra,
        "--wait",
        "--timeout",
        "400",
        "--json",
        "--",
        "/opt/venv/bin/python3",
        "{workdir}/ddp_train.py",
    )
    _succeeded(proc)
    log = _cli("logs", json.loads(proc.stdout)["job_id"]).stdout
    ranks = sorted(_lines(log, "ddp-result"), key=lambda r: r["rank"])
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, "node1"), (1, "node2")], log
    # node1 on the link: the job's MASTER_ADDR (srun), or the host torchrun's c10d picked
    masters = {r["master"].split(":")[0] for r in ranks}
    assert len(masters) == 1 and masters <= {"10.251.77.11", "node1"}, ranks
    assert all(r["world_size"] == 2 and r["local_rank"] == 0 for r in ranks)
    assert all(r["loss_last"] < 0.5 * r["loss_first"] for r in ranks), ranks
    assert len({r["params_sha256"] for r in ranks}) == 1, ranks  # identical on every rank
