"""Launch tuning from node topology (unit: pure computation over the real site files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import ConfigError
from hpcenv.jobs.launchers import get_launcher
from hpcenv.jobs.placement import place
from hpcenv.site import Site, load_site


def flags(site: str | Site, launcher: str, **kw: object) -> list[str]:
    s = load_site(site) if isinstance(site, str) else site
    return get_launcher(launcher).flags(s, place(s, **kw))  # type: ignore[arg-type]


def _site(sockets: int, cores: int, gpus: int = 0) -> Site:
    base = load_site("generic-slurm")
    node = base.node.model_copy(update={"sockets": sockets, "cores_per_socket": cores})
    return base.model_copy(update={"node": node})


def test_ccl_workers_kept_out_of_compute_domain() -> None:
    """2 sockets x 28 cores, one rank per socket, 4 CCL workers each -> 24 threads."""
    t = place(_site(2, 28), nodes=1, ranks_per_node=2, ccl_workers=4)
    assert t.ranks_per_socket == 1 and t.cores_per_rank == 28
    assert t.omp_threads == 24
    assert t.env["OMP_NUM_THREADS"] == "24"
    assert t.env["CCL_WORKER_COUNT"] == "4"
    assert t.env["CCL_WORKER_AFFINITY"] == "24,25,26,27,52,53,54,55"
    assert t.compute_cores == (tuple(range(0, 24)), tuple(range(28, 52)))
    assert t.worker_cores == ((24, 25, 26, 27), (52, 53, 54, 55))
    # I_MPI_PIN_DOMAIN masks cover exactly the compute cores, and no worker core.
    masks = [int(m, 16) for m in t.env["I_MPI_PIN_DOMAIN"].strip("[]").split(",")]
    assert masks == [(1 << 24) - 1, ((1 << 24) - 1) << 28]
    workers = {int(c) for c in t.env["CCL_WORKER_AFFINITY"].split(",")}
    for mask in masks:
        assert all(not (mask >> c) & 1 for c in workers)
    site = _site(2, 28)
    kw = {"nodes": 1, "ranks_per_node": 2, "ccl_workers": 4}
    assert flags(site, "mpirun", **kw) == [
        "-np",
        "2",
        "--map-by",
        "ppr:1:socket:pe=28",
        "--bind-to",
        "core",
    ]
    assert flags(site, "mpiexec", **kw)[-1] == "list:0-23:28-51"
    assert flags(site, "srun", **kw) == [
        "--nodes=1",
        "--ntasks=2",
        "--ntasks-per-node=2",
        "--cpus-per-task=28",
        "--mpi=pmix",
    ]


def test_local_two_ranks_one_thread_each() -> None:
    t = place(load_site("local"), nodes=1, ranks_per_node=2)
    assert (t.cores_per_rank, t.omp_threads, t.ccl_workers) == (1, 1, 0)
    assert t.env["OMP_NUM_THREADS"] == "1"
    assert t.compute_cores == ((0,), (1,))
    assert "CCL_WORKER_COUNT" not in t.env


def test_oversubscription_refused_unless_forced() -> None:
    local = load_site("local")
    with pytest.raises(ConfigError, match="over-subscription.*3 ranks x 1 cores.*--force"):
        place(local, ranks_per_node=3)
    with pytest.raises(ConfigError, match="no core .* for compute threads"):
        place(local, ranks_per_node=2, ccl_workers=1)
    forced = place(local, ranks_per_node=3, force=True)
    srun = get_launcher("srun").flags(local, forced)
    assert forced.oversubscribed and srun == [
        "--nodes=1",
        "--ntasks=3",
        "--overcommit",
        "--mpi=pmix",
    ]
    assert "--oversubscribe" in get_launcher("mpirun").flags(local, forced)
    assert forced.omp_threads == 1


def test_summit_resource_sets_one_per_node() -> None:
    """OLCF's deep-learning layout (software/analytics/ibm-wml-ce.rst, olcf-user-docs d900d52^):
    `jsrun -r1 -g6 -a6 -c42 -bpacked:7`, every rank sees the node's 6 GPUs."""
    t = place(load_site("summit"), nodes=2)
    assert t.ranks_per_node == 6 and t.cores_per_rank == 7 and t.gpus_per_rank == 1
    assert flags("summit", "jsrun", nodes=2) == [
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
    ]
    # Three ranks per socket; socket 1 starts at core 21.
    assert t.compute_cores[3] == tuple(range(21, 28))


def test_jsrun_resource_set_per_rank() -> None:
    """scheduler.resource_set: rank (the default): one resource set per rank and GPU
    (summit_user_guide.rst `jsrun -n12 -r6 -c7 -g1 -a1`)."""
    site = load_site("summit")
    per_rank = site.model_copy(
        update={"scheduler": site.scheduler.model_copy(update={"resource_set": "rank"})}
    )
    argv = get_launcher("jsrun").flags(per_rank, place(per_rank, nodes=2))
    assert argv == ["-n", "12", "-r", "6", "-a", "1", "-c", "7", "-g", "1", "-b", "packed:7"]


def test_gpu_sites_bind_gpus_per_task() -> None:
    t = place(load_site("frontier"), nodes=1)
    assert t.ranks_per_node == 8
    srun = flags("frontier", "srun", nodes=1)
    assert "--gpus-per-task=1" in srun and "--gpu-bind=closest" in srun
    # Low-noise mode: core 0 of each L3 region (8 cores) is reserved -> 7 cores per rank.
    assert t.cores_per_rank == 7 and "--cpus-per-task=7" in srun
    assert t.compute_cores[0] == tuple(range(1, 8)) and t.compute_cores[7] == tuple(range(57, 64))


def test_ccl_default_on_for_ccl_recipes() -> None:
    aurora = load_site("aurora")
    t = place(aurora, nodes=1, recipe="torch-ccl")
    # 12 ranks (one per tile) x 8 cores; 4 of each rank's 8 run the CCL workers.
    assert t.ccl_workers == 4 and t.cores_per_rank == 8 and t.omp_threads == 4
    assert len(t.env["CCL_WORKER_AFFINITY"].split(",")) == 4 * t.ranks_per_node
    assert place(load_site("generic-slurm"), recipe="horovod-cpu").ccl_workers == 0


def test_cli_tune_json_and_text(runner: CliRunner) -> None:
    res = runner.invoke(
        app, ["tune", "--site", "local", "--nodes", "1", "--ranks-per-node", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["omp_threads"] == 1 and data["ranks_per_node"] == 2
    res = runner.invoke(
        app, ["tune", "--site", "generic-slurm", "--ranks-per-node", "2", "--ccl-workers", "4"]
    )
    assert res.exit_code == 0
    assert "OMP_NUM_THREADS=24" in res.output and "rank 1: 28-51 | 52-55" in res.output
    assert "why:" in res.output


def test_cli_tune_oversubscription_is_one_line_error(runner: CliRunner) -> None:
    res = runner.invoke(app, ["tune", "--site", "local", "--ranks-per-node", "4"])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError)


def test_aurora_never_binds_reserved_cores_and_matches_alcf_list() -> None:
    """ALCF reserves cores 0 and 52; without CCL workers the list is ALCF's own example."""
    aurora = load_site("aurora")
    t = place(aurora, nodes=1, ccl_workers=0)
    used = {c for d in t.compute_cores for c in d}
    assert not used & {0, 52}
    assert flags(aurora, "mpiexec", nodes=1, ccl_workers=0) == [
        "-n",
        "12",
        "--ppn",
        "12",
        "--cpu-bind",
        "list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100",
    ]  # tiles as FLAT devices: rank-env.sh sets ZE_AFFINITY_MASK (tests/test_aurora_tiles.py)
    # Six ranks (implicit scaling): ALCF's list:1-16:17-32:33-48:53-68:69-84:85-100 covers
    # 16 cores a rank; hpcenv gives 17 of each socket's 51 (same sockets, no reserved core).
    six = place(aurora, nodes=1, ranks_per_node=6, ccl_workers=0)
    assert six.gpu_bind == "mask" and six.gpu_ids[0] == ("0", "1")
    assert not {c for d in six.compute_cores for c in d} & {0, 52}


def test_local_default_runs_two_ranks() -> None:
    """One rank on a one-socket node makes an allreduce a no-op: the default is two."""
    t = place(load_site("local"))
    assert t.ranks_per_node == 2 and t.ranks == 2
    assert any("two on a one-socket node" in r for r in t.reasons)


def test_placement_env_is_a_hook_for_later_layers() -> None:
    t = place(load_site("local"))
    tuned = t.with_env({"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}, "measured rules file")
    assert tuned.env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    assert (
        tuned.env["OMP_NUM_THREADS"] == "1" and "OMPI_MCA_coll_tuned_use_dynamic_rules" not in t.env
    )
    assert tuned.reasons[-1] == "measured rules file" and tuned.compute_cores == t.compute_cores


def test_default_ccl_workers_leave_a_compute_core() -> None:
    """2 cores per rank: the default 4 workers would leave no compute core, so 1 worker."""
    t = place(_site(1, 4), nodes=1, ranks_per_node=2, recipe="torch-ccl")
    assert (t.cores_per_rank, t.ccl_workers, t.omp_threads) == (2, 1, 1)
    assert t.compute_cores == ((0,), (2,)) and t.worker_cores == ((1,), (3,))
    assert t.env["CCL_WORKER_COUNT"] == "1" and t.env["CCL_WORKER_AFFINITY"] == "1,3"
    assert any("not the default 4" in r for r in t.reasons)


def test_one_core_per_rank_ccl_worker_shares_the_rank_core() -> None:
    """1 core per rank (local): oneCCL's one worker is pinned to each rank's own core, not
    left to its default affinity (every rank's worker on the node's last core)."""
    for recipe in ("torch-ccl", "horovod-ccl"):
        t = place(load_site("local"), recipe=recipe)
        assert (t.cores_per_rank, t.ccl_workers, t.omp_threads) == (1, 1, 1)
        assert t.compute_cores == ((0,), (1,)) and t.worker_cores == ((0,), (1,))
        assert t.env["CCL_WORKER_COUNT"] == "1" and t.env["CCL_WORKER_AFFINITY"] == "0,1"
        assert not t.oversubscribed and any("shares the rank's core" in r for r in t.reasons)
    assert "CCL_WORKER_COUNT" not in place(load_site("local"), recipe="horovod-cpu").env
    with pytest.raises(ConfigError, match="no core"):  # asked for explicitly: still refused
        place(load_site("local"), recipe="torch-ccl", ccl_workers=4)


def test_tune_has_no_n_that_means_something_else_than_submits() -> None:
    """``submit -n`` is the total rank count (as Slurm's); tune's per-node count has no ``-n``."""
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("hpcenv")), "tune", "--site", "local", "-n", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "No such option: -n" in proc.stderr, proc.stderr
