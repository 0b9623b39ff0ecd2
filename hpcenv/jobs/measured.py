"""The measured tuning a job gets: :func:`hpcenv.tuning.apply.lookup` for the job's own placement.

Here, on the job side, so the tuning model (:mod:`hpcenv.tuning`) stays below the jobs and never
imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcenv.jobs.placement import job_placement
from hpcenv.tuning.apply import lookup

if TYPE_CHECKING:
    from hpcenv.jobs.spec import JobSpec
    from hpcenv.site import Site
    from hpcenv.tuning.model import MeasuredTuning


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
