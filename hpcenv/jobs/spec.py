"""A job as plain data: what runs, on how many nodes/ranks, in which image, with which staging.

Paths may name environment variables (``$USER``); they expand on the compute node. Command
arguments are quoted as given, except the placeholders ``{data}``, ``{output}``, ``{task}``,
``{tasks}``, ``{workdir}``, ``{jobid}`` and ``{node_local}``, which become the job's
``$HPCENV_*`` variables (see :func:`hpcenv.jobs.shell` policy).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from hpcenv.errors import ConfigError
from hpcenv.jobs.launchers import check_command
from hpcenv.safe import (
    EnvName,
    Name,
    SafeModel,
    ShellPath,
    ShellText,
    ShellWord,
    Walltime,
    Word,
    image_or_sif,
)

JobName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# A log file name in the job's workdir (where ``status`` and ``logs`` read it), with Slurm's
# patterns %j %A %a %x; each scheduler translates them (``Scheduler.log_names``). Or a folder
# (ending in /, absolute or in the workdir): the file is the scheduler's default name in it.
LOG_NAME = (
    r"^(?:[A-Za-z0-9_%+-][A-Za-z0-9_.%+-]{0,254}"
    r"|/?(?:[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,254}/){1,32})$"
)
LogName = Annotated[str, StringConstraints(pattern=LOG_NAME)]
# Node features (Slurm -C): names joined by & (all) or | (any), as ``gpu&hbm80g``.
Features = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:*-]*(?:[&|][A-Za-z0-9_][A-Za-z0-9_.:*-]*)*$",
        max_length=256,
    ),
]


def _image(value: str) -> str:
    try:
        return image_or_sif(value)
    except ConfigError as err:
        raise ValueError(str(err)) from None


Image = Annotated[str, AfterValidator(_image)]

MANIFEST_NAME = ".hpcenv-manifest"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def user_env(items: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``--env NAME=VALUE`` and ``--env NAME`` (repeatable) -> (values, names passed by name).

    Names go through the ``user`` layer of :mod:`hpcenv.envpolicy` (not what changes how the
    job starts: ``LD_PRELOAD``, ``RANK``, ``MASTER_ADDR``...). A value is written into the job
    script quoted for the shell, and a newline or control character is refused (it could start
    a line of its own); a secret's name (``*_TOKEN``, ``*_KEY``) takes no value, so that it is
    passed by name and never lands in a file. No message shows a value."""
    from hpcenv.envpolicy import check, is_secret

    values: dict[str, str] = {}
    names: list[str] = []
    for item in items:
        name, eq, value = item.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"--env {name[:60]!r}: not a variable name (letters, digits and _, "
                "not starting with a digit); give NAME or NAME=VALUE"
            )
        if name in values or name in names:
            raise ConfigError(f"--env {name}: given twice")
        check({name: ""}, "user", "--env")
        if not eq:
            names.append(name)
            continue
        if is_secret(name):
            raise ConfigError(
                f"--env {name}=...: a secret's value would be written into the job script; "
                f"export {name} in your shell and give --env {name} (passed by name)"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ConfigError(
                f"--env {name}=...: the value has a newline or control character (not shown); "
                "give it without"
            )
        values[name] = value
    return values, names


class _Strict(SafeModel):
    """Job parts: unknown keys refused, no newline or control character in any value."""


class StageIn(_Strict):
    """Copy a dataset from a shared filesystem, verified against its manifest.

    ``per_node``: once on every node of the job into node-local storage (``dest`` defaults to
    ``<node_local>/<job name>/data``); else once, by the batch shell (shared-FS to shared-FS).
    """

    source: ShellPath
    dest: ShellPath | None = None
    manifest: ShellPath | None = Field(
        default=None, description=f"manifest file; default <source>/{MANIFEST_NAME}"
    )
    per_node: bool = True


class StageOut(_Strict):
    """Copy results to ``dest`` atomically: a temp name beside it, verified, then renamed."""

    source: ShellPath | None = Field(
        default=None, description="results dir; default <workdir>/<name>-output-<jobid>"
    )
    dest: ShellPath
    force: bool = Field(default=False, description="replace an existing dest")


class ArraySpec(_Strict):
    """A job array: ``count`` tasks, ``$HPCENV_TASK_ID`` = 0..count-1."""

    count: int = Field(ge=1, le=100000, strict=True)
    parallel: int | None = Field(
        default=None, ge=1, strict=True, description="at most this many at once"
    )

    @classmethod
    def parse(cls, text: str) -> ArraySpec:
        """``--array``: a task count ``N``, or Slurm's ``0-LAST`` (``0-9`` is 10 tasks), each
        with ``%P`` for at most P at once. Task ids are 0..N-1 on every scheduler (PBS and LSF
        arrays are shifted to that), so a range starts at 0; lists and steps (``1,3``,
        ``0-9:2``) are refused, never read as something else (``0-9`` is not ``-9``)."""
        how = "give a task count (10) or a range from 0 (0-9), with %P for at most P at once"
        m = re.fullmatch(r"(?:(\d{1,6})|(\d{1,6})-(\d{1,6}))(?:%(\d{1,6}))?", text.strip())
        if not m:
            raise ConfigError(f"--array {text!r}: {how}")
        count_text, first, last, parallel = m.groups()
        if count_text is not None:
            count = int(count_text)
        else:
            if int(first) != 0:
                raise ConfigError(
                    f"--array {text!r}: task ids start at 0 (HPCENV_TASK_ID): give "
                    f"0-{int(last) - int(first)}, or use {{task}} plus an offset in the command"
                )
            count = int(last) + 1
        if count < 1:
            raise ConfigError(f"--array {text!r}: must be at least 1 (got {count}); {how}")
        try:
            return cls(count=count, parallel=int(parallel) if parallel is not None else None)
        except ValueError as err:  # pydantic's, for a count over the limit
            raise ConfigError(f"--array {text!r}: {how} (at most 100000 tasks)") from err


class Stitch(_Strict):
    """Concatenate ``<parts>/<prefix><i><suffix>`` for i in 0..count-1 into ``output``."""

    parts: ShellPath
    count: int = Field(ge=1, le=100000, strict=True)
    output: ShellPath
    prefix: ShellWord = "part-"
    suffix: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,@%+=-]*$")] = ""
    force: bool = False


class JobSpec(_Strict):
    """One batch job. ``image=None`` runs the command on the host (no container)."""

    name: JobName = "hpcenv"
    command: list[str] = []
    launch: Literal["mpi", "single"] = Field(
        default="mpi", description="mpi: all ranks through the site launcher; single: batch shell"
    )
    launcher: Word | None = Field(
        default=None,
        description="rank launcher: the site's (default), or torchrun (one per node, c10d)",
    )
    nodes: int = Field(default=1, ge=1, le=100000, strict=True)
    ntasks: int | None = Field(
        default=None, ge=1, le=6553600, strict=True, description="total ranks (Slurm -n)"
    )
    ranks_per_node: int | None = Field(
        default=None, ge=1, le=65536, strict=True, description="Slurm --ntasks-per-node"
    )
    cores_per_rank: int | None = Field(default=None, ge=1, le=65536, strict=True)
    cpus_per_task: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        strict=True,
        description="Slurm -c: the scheduler's CPUs (hardware threads where it counts them)",
    )
    gpus_per_task: int | None = Field(default=None, ge=0, le=64, strict=True)
    gpus_per_node: int | None = Field(default=None, ge=0, le=64, strict=True)
    ccl_workers: int | None = Field(default=None, ge=0, le=1024, strict=True)
    recipe: Name | None = None
    image: Image | None = Field(default=None, description="image reference or .sif path")
    workdir: ShellPath | None = Field(
        default=None,
        description="hpcenv's folder for the job (steps, logs); default <scratch>/hpcenv-jobs",
    )
    chdir: ShellPath | None = Field(
        default=None,
        description="where the command runs (Slurm --chdir); default: the workdir. "
        "`hpcenv submit` sets it to the folder it was called from",
    )
    stdout: LogName | None = Field(
        default=None, description="stdout file name in the workdir (Slurm -o; %j %A %a %x)"
    )
    stderr: LogName | None = Field(
        default=None, description="stderr file name in the workdir (Slurm -e; %j %A %a %x)"
    )
    walltime: Walltime | None = None
    account: Word | None = Field(default=None, description="project/account to charge")
    queue: Word | None = Field(default=None, description="partition (Slurm) or queue")
    qos: Word | None = None
    constraint: Features | None = Field(
        default=None, description="node features (Slurm -C): gpu, or gpu&hbm80g for both"
    )
    scheduler_options: list[ShellText] = Field(
        default=[], description="more directives, one option (flag and value) per item"
    )
    option_override: bool = Field(
        default=False,
        description="scheduler_options may replace hpcenv's own directives (logs, workdir...)",
    )
    env: dict[EnvName, str] = {}
    pass_env: list[EnvName] = Field(
        default=[],
        description="variables every rank gets from the submitting shell by name (--env NAME); "
        "their values are never written into the script or the plan",
    )
    stage_in: StageIn | None = None
    stage_out: StageOut | None = None
    array: ArraySpec | None = None
    stitch: Stitch | None = None
    force: bool = Field(default=False, description="allow over-subscription")
    site_mpi: bool = Field(
        default=True,
        description="bind model: inject the site MPI (False: the image's own MPI, a control run)",
    )

    @field_validator("pass_env")
    @classmethod
    def _passed_names(cls, names: list[str]) -> list[str]:
        from hpcenv.envpolicy import check

        check(dict.fromkeys(names, ""), "user", "--env")
        return names

    def passed_env(self) -> dict[str, str]:
        """``--env NAME`` in the job's environment: the batch shell's own value, by name (the
        scheduler brings it from the submitting shell); unset there, the job stops at once."""
        return {
            n: f"${{{n}?hpcenv: --env {n}: not set where the job was submitted}}"
            for n in self.pass_env
        }

    @model_validator(mode="after")
    def _command_fits_launcher(self) -> JobSpec:
        """Every rank runs the command under the launcher (``launch: mpi``): one that starts a
        launcher itself (``torchrun``, ``mpirun``...) is refused with what to give instead
        (:func:`hpcenv.jobs.launchers.check_command`). A ConfigError, not a field error: the
        user's one line. In the batch shell (``single``) the command runs once, as given."""
        if self.launch == "mpi":
            check_command(self.command, self.launcher)
        return self
