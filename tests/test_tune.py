"""Launch tuning from node topology (unit: pure computation over the real site files)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.errors import ConfigError
from hpcenv.jobs.tuning import tune
from hpcenv.site import Site, load_site


def _site(sockets: int, cores: int, gpus: int = 0) -> Site:
    base = load_site("generic-slurm")
    node = base.node.model_copy(update={"sockets": sockets, "cores_per_socket": cores})
    return base.model_copy(update={"node": node})


def test_ccl_workers_kept_out_of_compute_domain() -> None:
    """2 sockets x 28 cores, one rank per socket, 4 CCL workers each -> 24 threads."""
    t = tune(_site(2, 28), nodes=1, ranks_per_node=2, ccl_workers=4)
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
    assert t.openmpi == ["--map-by", "ppr:1:socket:pe=28", "--bind-to", "core"]
    assert t.mpiexec[-1] == "list:0-23:28-51"
    assert t.srun == ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=28"]


def test_local_two_ranks_one_thread_each() -> None:
    t = tune(load_site("local"), nodes=1, ranks_per_node=2)
    assert (t.cores_per_rank, t.omp_threads, t.ccl_workers) == (1, 1, 0)
    assert t.env["OMP_NUM_THREADS"] == "1"
    assert t.compute_cores == ((0,), (1,))
    assert "CCL_WORKER_COUNT" not in t.env


def test_oversubscription_refused_unless_forced() -> None:
    local = load_site("local")
    with pytest.raises(ConfigError, match="over-subscription.*3 ranks x 1 cores.*--force"):
        tune(local, ranks_per_node=3)
    with pytest.raises(ConfigError, match="no core .* for compute threads"):
        tune(local, ranks_per_node=2, ccl_workers=1)
    forced = tune(local, ranks_per_node=3, force=True)
    assert forced.oversubscribed and forced.srun == ["--nodes=1", "--ntasks=3", "--overcommit"]
    assert "--oversubscribe" in forced.openmpi and forced.omp_threads == 1


def test_summit_resource_sets_one_per_gpu() -> None:
    t = tune(load_site("summit"), nodes=2)
    assert t.ranks_per_node == 6 and t.cores_per_rank == 7 and t.gpus_per_rank == 1
    assert t.jsrun == ["-n", "12", "-r", "6", "-a", "1", "-c", "7", "-g", "1", "-b", "packed:7"]
    # Three ranks per socket; socket 1 starts at core 21.
    assert t.compute_cores[3] == tuple(range(21, 28))


def test_gpu_sites_bind_gpus_per_task() -> None:
    t = tune(load_site("frontier"), nodes=1)
    assert t.ranks_per_node == 8
    assert "--gpus-per-task=1" in t.srun and "--gpu-bind=closest" in t.srun


def test_ccl_default_on_for_ccl_recipes() -> None:
    aurora = load_site("aurora")
    t = tune(aurora, nodes=1, recipe="torch-ccl")
    assert t.ccl_workers == 4 and t.cores_per_rank == 17 and t.omp_threads == 13
    assert len(t.env["CCL_WORKER_AFFINITY"].split(",")) == 4 * t.ranks_per_node
    assert tune(load_site("generic-slurm"), recipe="horovod-cpu").ccl_workers == 0


def test_cli_tune_json_and_text(runner: CliRunner) -> None:
    res = runner.invoke(app, ["tune", "--site", "local", "--nodes", "1", "-n", "2", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["omp_threads"] == 1 and data["ranks_per_node"] == 2
    res = runner.invoke(app, ["tune", "--site", "generic-slurm", "-n", "2", "--ccl-workers", "4"])
    assert res.exit_code == 0
    assert "OMP_NUM_THREADS=24" in res.output and "rank 1: 28-51 | 52-55" in res.output
    assert "why:" in res.output


def test_cli_tune_oversubscription_is_one_line_error(runner: CliRunner) -> None:
    res = runner.invoke(app, ["tune", "--site", "local", "-n", "4"])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError)
