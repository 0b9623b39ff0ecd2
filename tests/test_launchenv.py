"""One launch environment (hpcenv.jobs.launchenv): jobs, smoke, bench and tune share its layers."""

from __future__ import annotations

from hpcenv.jobs.launchenv import LAUNCH_LAYERS, launch_env, launch_layers
from hpcenv.jobs.placement import place
from hpcenv.site import load_site


def test_layers_in_order_and_later_wins() -> None:
    site = load_site("frontier")
    placement = place(site, 1, 8)
    layers = launch_layers(site, placement, {"OMP_NUM_THREADS": "3"}, injected=True)
    assert tuple(name for name, _ in layers) == LAUNCH_LAYERS
    env = launch_env(site, placement, {"OMP_NUM_THREADS": "3"}, injected=True)
    assert env["OMP_NUM_THREADS"] == "3"  # measured tuning over the placement
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "1"  # the site MPI's own, bound in by the job


def test_the_site_mpi_layer_only_where_ranks_run_the_site_mpi() -> None:
    """A bind site's variables describe the MPI the job binds in: a launch inside the image
    with its own MPI (smoke, bench, tune) must not get I_MPI_* or MPI4PY_MPIABI=mpich."""
    bind = load_site("local-bind")
    placement = place(bind, 1, 2, force=True)
    assert "MPI4PY_MPIABI" in launch_env(bind, placement, injected=True)
    assert "MPI4PY_MPIABI" not in launch_env(bind, placement)


def test_smoke_and_bench_use_it() -> None:
    from hpcenv.bench.context import BenchContext
    from hpcenv.smoke.runner import launch_settings

    site = load_site("local")
    placement = place(site, 1, 2, force=True)
    settings = launch_settings(site, "img")
    expected = launch_env(site, placement)
    assert {k: settings.env[k] for k in expected} == expected
    assert not settings.mpirun_flags.startswith("-np")  # the checks give their own -np
    ctx = BenchContext.__new__(BenchContext)
    ctx.site, ctx.tuning = site, placement
    assert ctx.launch_env == expected
