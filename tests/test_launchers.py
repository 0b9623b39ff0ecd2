"""Launchers: one class each, turning the neutral placement into their own flags; the names
are kept in step across the registry, the site model and the knowledge base."""

from __future__ import annotations

import typing

from hpcenv.jobs.launchers import LAUNCHERS, Launcher
from hpcenv.jobs.placement import Placement, core_ranges, place
from hpcenv.knowledge import kb
from hpcenv.site import Scheduler, Site, load_site


def test_launcher_names_are_one_list() -> None:
    literal = set(typing.get_args(Scheduler.model_fields["launcher"].annotation))
    table = kb()["launchers"]
    known = {n for names in table.values() if isinstance(names, list) for n in names}
    # torchrun is a job's --launcher, run under the site's launcher, never a site's own.
    assert set(LAUNCHERS) - {"torchrun"} == literal == known


def test_a_new_launcher_is_one_class() -> None:
    """Flux's ``flux run``, written against the placement alone and registered: a site that
    names it gets its launch line from the one builder, nothing else edited."""
    from hpcenv.jobs.launchers import LAUNCHERS, launch_argv, register_launcher

    class FluxRun(Launcher):
        name = "flux"

        def flags(self, site: Site, p: Placement) -> list[str]:
            argv = ["run", "-N", str(p.nodes), "-n", str(p.ranks), "-c", str(p.cores_per_rank)]
            return argv + (["-g", str(p.gpus_per_rank)] if p.gpus_per_rank else [])

        def per_node(self, nodes: int) -> list[str]:
            return ["flux", "run", "-N", str(nodes), "--tasks-per-node=1"]

    register_launcher(FluxRun)
    try:
        site = load_site("frontier")
        p = place(site, nodes=2)
        # frontier's launcher_flags belong to srun: a launcher the site does not use gets none
        assert launch_argv(site, p, launcher="flux") == [
            "flux",
            "run",
            "-N",
            "2",
            "-n",
            "16",
            "-c",
            "7",
            "-g",
            "1",
        ]
        flux_site = site.model_copy(
            update={
                "scheduler": site.scheduler.model_copy(
                    update={"launcher": "flux", "launcher_flags": ["--exclusive"]}
                )
            }
        )
        assert launch_argv(flux_site, p)[-1] == "--exclusive"
    finally:
        LAUNCHERS.pop("flux")


def test_site_launcher_flags_only_reach_the_site_launcher() -> None:
    """The bug this fixes: mpirun got srun's --cpu-bind on Perlmutter and jsrun's --smpiargs on
    Summit."""
    from hpcenv.jobs.launchers import launch_argv

    for name in ("perlmutter", "summit", "frontier"):
        site = load_site(name)
        p = place(site, nodes=1)
        own = launch_argv(site, p)
        assert own[0] == site.scheduler.launcher
        for flag in site.scheduler.launcher_flags:
            assert flag in own
        mpirun = launch_argv(site, p, launcher="mpirun")
        assert not set(site.scheduler.launcher_flags) & set(mpirun), (name, mpirun)


def test_frontier_ranks_leave_the_low_noise_core() -> None:
    site = load_site("frontier")
    p = place(site, nodes=2)
    assert core_ranges(p.compute_cores[0]) == "1-7"
