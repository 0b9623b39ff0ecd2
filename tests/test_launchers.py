"""Launchers: one class each, turning the neutral placement into their own flags; the names
are kept in step across the registry, the site model and the knowledge base."""

from __future__ import annotations

import typing

from hpcenv.jobs.launchers import LAUNCHERS, Launcher
from hpcenv.jobs.tuning import Placement, core_ranges, tune
from hpcenv.knowledge import kb
from hpcenv.site import Scheduler, Site, load_site


def test_launcher_names_are_one_list() -> None:
    literal = set(typing.get_args(Scheduler.model_fields["launcher"].annotation))
    table = kb()["launchers"]
    known = {n for names in table.values() if isinstance(names, list) for n in names}
    assert set(LAUNCHERS) == literal == known


def test_a_new_launcher_is_one_class() -> None:
    """Flux's ``flux run``, written against the placement alone (not registered)."""

    class FluxRun(Launcher):
        name = "flux"

        def flags(self, site: Site, p: Placement) -> list[str]:
            argv = ["run", "-N", str(p.nodes), "-n", str(p.ranks), "-c", str(p.cores_per_rank)]
            return argv + (["-g", str(p.gpus_per_rank)] if p.gpus_per_rank else [])

        def per_node(self, nodes: int) -> list[str]:
            return ["flux", "run", "-N", str(nodes), "--tasks-per-node=1"]

    site = load_site("frontier")
    p = tune(site, nodes=2)
    assert FluxRun().command(site, p) == [
        "flux", "run", "-N", "2", "-n", "16", "-c", "7", "-g", "1", *site.scheduler.launcher_flags
    ]  # fmt: skip
    assert core_ranges(p.compute_cores[0]) == "1-7"
