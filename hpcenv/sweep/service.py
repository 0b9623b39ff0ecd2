"""The service behind ``hpcenv tune``: a typed request in, one function, a result out.

Issue 18 ("a thin CLI"): the command parses its options into :class:`TuneRequest` and calls
:func:`tune_request`, which checks how the options combine, places the ranks
(:func:`hpcenv.jobs.placement.place`) and then, by mode, plans a sweep (``--plan``), measures
one (``--measure``, :mod:`hpcenv.sweep.session`) or looks up the tuning in force (``--show``,
:func:`hpcenv.tuning.apply.lookup`). The :class:`TuneResult` says what happened; printing it
is the command's job. Heavy imports stay inside the function, as in the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcenv.jobs.placement import Placement
    from hpcenv.site import Site
    from hpcenv.sweep.measure import Plan
    from hpcenv.sweep.session import Measured
    from hpcenv.tuning.store import InForce

DEFAULT_RECIPE = "horovod-cpu"  # the image tune measures and checks when no recipe is named


@dataclass(frozen=True)
class TuneRequest:
    """``hpcenv tune``'s options, parsed."""

    site: str
    nodes: int = 1
    ranks_per_node: int | None = None
    cores_per_rank: int | None = None
    ccl_workers: int | None = None
    recipe: str | None = None
    force: bool = False
    measure: bool = False
    show: bool = False
    plan: bool = False
    image: str | None = None
    budget: float = 300
    quick: bool = False
    if_stale: bool = False


@dataclass(frozen=True)
class TuneResult:
    """The placement, and what the mode produced: at most one of ``sweep`` (``--plan``),
    ``measured`` (``--measure``) or ``kept`` (``--measure --if-stale``, a file in force);
    ``found`` is ``--show``'s lookup (None there: nothing measured)."""

    site: Site
    placement: Placement
    image: str
    sweep: Plan | None = None
    measured: Measured | None = None
    kept: InForce | None = None
    found: InForce | None = None


def tune_request(req: TuneRequest, *, echo: Callable[[str], None] = print) -> TuneResult:
    """Place ``req``'s ranks on its site; plan, measure or look up the collective tuning.

    ``echo`` gets ``--measure``'s progress lines."""
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.placement import place
    from hpcenv.jobs.runtimes.registry import default_image
    from hpcenv.jobs.service import refuse_empty
    from hpcenv.site import load_site

    if sum((req.measure, req.show, req.plan)) > 1:
        raise ConfigError("--measure, --show and --plan exclude each other")
    if req.budget <= 0:
        raise ConfigError("--budget must be > 0 seconds")
    refuse_empty(image=req.image)
    s = load_site(req.site)
    t = place(
        s,
        req.nodes,
        req.ranks_per_node,
        cores_per_rank=req.cores_per_rank,
        ccl_workers=req.ccl_workers,
        recipe=req.recipe,
        force=req.force,
    )
    recipe = req.recipe or DEFAULT_RECIPE
    img = req.image or default_image(s, recipe)
    if req.plan:
        from hpcenv.recipe import load_recipe
        from hpcenv.resolver import resolve
        from hpcenv.sweep.measure import plan
        from hpcenv.tuning.apply import layout_of

        lock = resolve(s, load_recipe(recipe)).to_dict()
        sweep = plan(lock, s, layout_of(t), gpu_visible=False)
        return TuneResult(s, t, img, sweep=sweep)
    if req.if_stale and not req.measure:
        raise ConfigError("--if-stale goes with --measure")
    if req.measure:
        from hpcenv.sweep.session import measure_site

        if req.if_stale:
            from hpcenv.jobs.measured import lookup

            found = lookup(s, t, img)
            if found is not None and found.tuning is not None:
                return TuneResult(s, t, img, kept=found)
        done = measure_site(s, t, img, budget_s=req.budget, quick=req.quick, echo=echo)
        return TuneResult(s, t, img, measured=done)
    if req.show:
        from hpcenv.jobs.measured import lookup

        return TuneResult(s, t, img, found=lookup(s, t, img))
    return TuneResult(s, t, img)
