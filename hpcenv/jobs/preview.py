"""What a dry run says a real submit would do: the exact submit command line and the log paths.

A real submit (:func:`hpcenv.jobs.submit.submit`) runs ``templates/jobs/submit.sh`` on the
submitting host: the site's prelude, then ``mkdir -p WORKDIR && cd WORKDIR``, then the
scheduler's submit argv (``sbatch --parsable ...``, ``qsub``, ``bsub``) with the job script on
stdin. :func:`submit_line` prints that as one shell line, from the same
:meth:`Scheduler.tagged_submit`/:meth:`Scheduler.submit_argv` the submit calls; the submit token
(a fresh random word per submit, Slurm's ``--comment``) is shown as :data:`TOKEN`.
:func:`log_files` gives the paths ``status`` and ``logs`` read, with ``<id>`` for the job id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcenv.jobs.shell import join, qpath

if TYPE_CHECKING:
    from hpcenv.jobs.render import RenderedJob

TOKEN = "hpcenv-TOKEN"  # stands for the fresh token each submit makes (16 hex digits)
JOB_ID = "<id>"


def log_folders_line(rendered: RenderedJob) -> str:
    """``mkdir -p -- FOLDER... && `` for the folders ``-o``/``-e`` name (issue 37: a folder
    takes the default name), made before the scheduler opens the files (Slurm does not make
    them, sbatch(1) "filename pattern"; the job would fail with no log); "" when none."""
    folders = []
    for name in rendered.log_names:
        if name and "/" in name:
            folder = name.rsplit("/", 1)[0] or "/"
            path = folder if folder.startswith("/") else f"{rendered.workdir}/{folder}"
            if path not in folders:
                folders.append(path)
    return f"mkdir -p -- {' '.join(map(qpath, folders))} && " if folders else ""


def submit_line(rendered: RenderedJob, after: list[str]) -> str:
    """``[PRELUDE] mkdir -p WORKDIR && cd WORKDIR && SUBMIT_ARGV < SCRIPT`` as submit runs it."""
    scheduler = rendered.scheduler
    tagged = scheduler.tagged_submit(after, TOKEN)
    argv = tagged[0] if tagged else scheduler.submit_argv(after)
    workdir = qpath(rendered.workdir)
    return (
        f"{rendered.prelude_line()}{log_folders_line(rendered)}mkdir -p -- {workdir} && "
        f"cd -- {workdir} && {join(argv)} < JOB_SCRIPT"
    )


def log_files(rendered: RenderedJob, name: str) -> list[str]:
    """stdout and stderr paths of job ``name`` (``<id>``: its id); none where the scheduler's
    own default names are used (PBS: NAME.o<id> in the workdir)."""
    files = rendered.scheduler.log_files(name, JOB_ID, rendered.log_names)
    return [f if f.startswith(("/", "$")) else f"{rendered.workdir}/{f}" for f in files]


def notes(rendered: RenderedJob, after: list[str]) -> list[str]:
    """The dry run's lines for stderr: the submit command line, then the log paths."""
    name = rendered.plan.name
    logs = log_files(rendered, name)
    where = ", ".join(logs) if logs else f"the scheduler's default names in {rendered.workdir}"
    return [
        f"note: dry run: a submit runs: {submit_line(rendered, after)}",
        f"note: dry run: logs: {where}",
    ]
