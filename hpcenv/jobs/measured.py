"""The measured tuning a job gets: :func:`hpcenv.tuning.apply.lookup` for the job's own placement.

Here, on the job side, so the tuning model (:mod:`hpcenv.tuning`) stays below the jobs and never
imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcenv.jobs.placement import job_placement
from hpcenv.jobs.runtimes.registry import runtime_of
from hpcenv.tuning import apply

if TYPE_CHECKING:
    from hpcenv.jobs.placement import Placement
    from hpcenv.jobs.spec import JobSpec
    from hpcenv.site import Site
    from hpcenv.tuning.model import MeasuredTuning
    from hpcenv.tuning.store import InForce


def lookup(site: Site, placement: Placement, image: str | None) -> InForce | None:
    """The measured tuning in force for ``image`` launched with ``placement`` on ``site``
    (:func:`hpcenv.tuning.apply.lookup`), the image known by the site's runtime."""
    return apply.lookup(site, placement, image, runtime_of(site).image_identity)


def for_job(
    site: Site, job: JobSpec, image: str | None
) -> tuple[MeasuredTuning | None, str | None]:
    """The measured tuning for an MPI job and a warning, if any.

    Uses the same placement as the job script (``prepare``) so the layouts agree; single-task
    jobs and host runs get none.
    """
    if job.launch != "mpi":
        return None, None
    found = lookup(site, job_placement(site, job), image)
    if found is None:
        return None, None
    return found.tuning, found.warning
