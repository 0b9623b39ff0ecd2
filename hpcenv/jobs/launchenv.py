"""The one launch environment: what every launch of ranks sets, layer by layer, in one order.

Jobs (``job.sh``), ``smoke``, ``bench`` and ``tune --measure`` all launch ranks of the same image
the same way; each used to assemble this environment itself (and the copies outside the job
dropped the site MPI's own variables). Here it is one list of named layers, a later layer's value
winning, as the job plan records them (:data:`hpcenv.jobs.plan.EnvSource`):

1. ``placement``: where ranks and threads run (``OMP_NUM_THREADS``, Intel MPI's pin domains,
   oneCCL's worker cores; :mod:`hpcenv.jobs.placement`);
2. ``site-mpi``: the site MPI's documented variables (``mpi.env`` of the site file), where the
   ranks run that MPI: a job that binds it in (bind, site-build) or a hybrid site's image MPI,
   which is the site's family; not a launch inside one image that keeps its own MPI (smoke,
   bench, tune on a bind site: ``I_MPI_*`` or ``MPI4PY_MPIABI=mpich`` would mislead its MPI);
3. ``site-environment``: the site's ``tuning:`` block;
4. ``measured-tuning``: what ``tune --measure`` chose for this image and layout, when in force
   (the caller reads it: :func:`hpcenv.tuning.apply.environment`), given here as variables.

The job adds its own layers after these (caches, rendezvous, the user's, the runtime's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hpcenv.jobs.plan import EnvSource

#: The layers every launch shares, in the order they apply.
LAUNCH_LAYERS: tuple[EnvSource, ...] = (
    "placement",
    "site-mpi",
    "site-environment",
    "measured-tuning",
)


def site_mpi_runs(site: Any, injected: bool) -> bool:
    """Whether the ranks run the site's MPI: bound in by the job (``injected``), or a hybrid
    site's image MPI (the site's family, by construction)."""
    return injected or site.mpi.model == "hybrid"


def launch_layers(
    site: Any,
    placement: Any,
    measured: Mapping[str, str] | None = None,
    *,
    injected: bool = False,
) -> list[tuple[EnvSource, dict[str, str]]]:
    """The shared layers for ``placement`` on ``site`` (``measured``: the measured tuning's
    variables in force, if any; ``injected``: the job binds the site MPI in), each as
    ``(name, variables)``; empty layers are kept."""
    mpi_env = site.mpi.env if site_mpi_runs(site, injected) else {}
    values = (
        dict(placement.env),
        {str(k): str(v) for k, v in mpi_env.items()},
        {str(k): str(v) for k, v in site.tuning.items()},
        dict(measured or {}),
    )
    return list(zip(LAUNCH_LAYERS, values, strict=True))


def launch_env(
    site: Any,
    placement: Any,
    measured: Mapping[str, str] | None = None,
    *,
    injected: bool = False,
) -> dict[str, str]:
    """The shared launch environment, flat (a later layer's value wins)."""
    env: dict[str, str] = {}
    for _, values in launch_layers(site, placement, measured, injected=injected):
        env |= values
    return env


#: The value :func:`overridden_placement` is given for ``--env NAME``: the submitting shell's.
BY_NAME = "<the submitting shell's>"

_LAYER_NAMES = {
    "site-mpi": "the site file's mpi.env",
    "site-environment": "the site file's tuning",
    "measured-tuning": "measured tuning (hpcenv tune --measure)",
    "job": "the job's --env",
}


def overridden_placement(layers: Sequence[tuple[str, Mapping[str, str]]]) -> list[str]:
    """A note for each placement value that a later layer replaces (the site's ``tuning:``,
    measured tuning, the job's ``--env``), so the placement's reasons are not read as what the
    ranks run; ``layers`` in the order they apply, the placement's first."""
    placed = dict(layers[0][1]) if layers and layers[0][0] == "placement" else {}
    final: dict[str, tuple[str, str]] = {}
    for layer, values in layers[1:]:
        for name, value in values.items():
            if name in placed:
                final[name] = (layer, value)
    return [
        f"tuning: {name}={value} from {_LAYER_NAMES.get(layer, layer)}, not the placement's "
        f"{placed[name]}"
        for name, (layer, value) in final.items()
        if value != placed[name]
    ]
