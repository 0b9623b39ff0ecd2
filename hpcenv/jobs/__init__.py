"""Jobs: render, submit and follow batch jobs for a site (Slurm, LSF, PBS Pro).

Public API:

- :func:`render_job` (site, JobSpec, image) -> script text; :func:`prepare` also returns the
  scheduler, tuning and log names.
- :func:`submit` / :func:`submit_chain` (afterok) / :func:`wait` / :func:`status` /
  :func:`logs` / :func:`cancel` over a :class:`Transport` (local or SSH).
- :func:`place` -> :class:`Placement` (neutral: ranks, cores, GPUs, env); launchers and
  runtimes turn it into their own flags.
- :func:`training_chain` / :func:`array_chain` build staged pipelines; manifests via
  :func:`write_manifest` / :func:`verify_manifest`.
- Registries: :func:`get_scheduler`, :func:`get_launcher`, :func:`get_runtime`.
"""

from hpcenv.jobs.launchers import get_launcher
from hpcenv.jobs.placement import Placement, place
from hpcenv.jobs.render import RenderedJob, prepare, render_job
from hpcenv.jobs.runtimes.registry import default_image, get_runtime
from hpcenv.jobs.schedulers import Scheduler, get_scheduler
from hpcenv.jobs.spec import ArraySpec, JobSpec, StageIn, StageOut, Stitch
from hpcenv.jobs.staging import array_chain, training_chain, verify_manifest, write_manifest
from hpcenv.jobs.status import JobStatus
from hpcenv.jobs.submit import (
    Submission,
    cancel,
    load_record,
    logs,
    status,
    submit,
    submit_chain,
    wait,
)
from hpcenv.jobs.transport import LocalTransport, SshTransport, Transport, TransportSpec

__all__ = [
    "ArraySpec",
    "JobSpec",
    "JobStatus",
    "LocalTransport",
    "Placement",
    "RenderedJob",
    "Scheduler",
    "SshTransport",
    "StageIn",
    "StageOut",
    "Stitch",
    "Submission",
    "Transport",
    "TransportSpec",
    "array_chain",
    "cancel",
    "default_image",
    "get_launcher",
    "get_runtime",
    "get_scheduler",
    "load_record",
    "logs",
    "prepare",
    "render_job",
    "status",
    "submit",
    "submit_chain",
    "training_chain",
    "place",
    "verify_manifest",
    "wait",
    "write_manifest",
]
