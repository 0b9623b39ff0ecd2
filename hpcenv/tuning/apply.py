"""The one hook between measured tuning and the things that launch ranks.

``submit``/``render`` (job.sh), ``smoke`` and ``bench`` call :func:`lookup` for the site, the
placement's layout and the image they launch; what is in force becomes environment
(:func:`environment`) plus, for Open MPI, a rules file that the caller puts where the ranks can
read it (job.sh writes it into the job's workdir; smoke and bench mount it at ``RULES_MOUNT``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpcenv.tuning.model import Layout, MeasuredTuning, measured_names
from hpcenv.tuning.store import InForce, in_force, tuning_path

RULES_NAME = "allreduce.rules"
RULES_MOUNT = "/opt/hpcenv/tuning"  # smoke/bench: host folder with the rules file, read-only
OMPI_RULES_ENV = "OMPI_MCA_coll_tuned_dynamic_rules_filename"


def layout_of(placement: Any) -> Layout:
    """The layout of a placement (``hpcenv.jobs.placement.place``'s result)."""
    return Layout(
        nodes=placement.nodes,
        ranks_per_node=placement.ranks_per_node,
        cores_per_rank=placement.cores_per_rank,
    )


def lookup(
    site: Any, placement: Any, image: str | None, identity: Callable[[str], str | None]
) -> InForce | None:
    """The tuning in force for ``image`` launched with ``placement`` on ``site``; ``identity``
    tells what ``image`` is on this host (its runtime's image identity: the file is for one
    image), asked only where a file could apply (:func:`hpcenv.jobs.measured.lookup`).

    None when nothing was ever measured for this site and layout (no warning worth giving);
    else an :class:`InForce` whose ``tuning`` is None when the file does not apply (``warning``
    says why). Host runs (``image`` None) never get a tuning measured in an image.
    """
    layout = layout_of(placement)
    if not tuning_path(site.name, layout).is_file():
        return None
    if image is None:
        return InForce(
            None,
            tuning_path(site.name, layout),
            "ignored",
            "measured tuning not applied: the job runs on the host, not in the "
            "image it was measured in",
        )
    return in_force(site.name, layout, image, identity(image))


def environment(tuning: MeasuredTuning, rules_path: str | None) -> dict[str, str]:
    """The variables a launch sets for ``tuning``; ``rules_path`` is the rules file's path as
    the ranks see it (required when the tuning has coll_tuned rules). The file's own variables
    pass :mod:`hpcenv.envpolicy` here too, so every launch (job, smoke, bench) is checked."""
    from hpcenv.envpolicy import check

    check(
        tuning.env,
        "measured-tuning",
        f"measured tuning for {tuning.site}",
        allowed=measured_names(),
    )
    env = dict(tuning.env)
    if tuning.collective_rules:
        if not rules_path:
            raise ValueError("this tuning has coll_tuned rules: give the rules file's path")
        env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
        env[OMPI_RULES_ENV] = rules_path
    return env


def describe(found: InForce | None) -> list[str]:
    """Lines for ``tune --show`` and notes: what is in force and why, or why nothing is."""
    if found is None:
        return ["no measured tuning (run hpcenv tune --measure)"]
    if found.tuning is None:
        return [found.warning or found.why]
    t = found.tuning
    lines = [f"measured tuning {found.path}: {found.why}, {t.layout.describe()}"]
    lines += [f"  why: {r}" for r in t.reasons]
    return lines
