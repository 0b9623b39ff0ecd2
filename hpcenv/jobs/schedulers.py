"""Batch schedulers behind one small interface: directives, submit, status, cancel, logs.

Each scheduler is one class registered once with :func:`register_scheduler` (the way ReFrame's
``@register_scheduler`` does), and the class owns everything hpcenv knows about it: directive
flags, the account flag, log file patterns, its client commands and their environment, what
``hpcenv doctor`` runs to prove it is here (:class:`Probe`), and what ``hpcenv sites init
--from-host`` reads to detect it. Callers ask :data:`SCHEDULERS` instead of naming schedulers;
``tests/test_registries.py`` keeps the other name lists (the site model's ``scheduler.kind``,
``knowledge/compat.yaml``) in step with it. An unknown name is a ConfigError.

Scripts go to ``sbatch``/``bsub``/``qsub`` on stdin; job ids are parsed with a strict pattern
and a missing id is a JobError carrying the scheduler's message. State comes from ``scontrol
show job`` (``sacct`` needs slurmdbd), falling back to the ``jobcomp/filetxt`` file once a job
is purged; ``bjobs -json`` for LSF; ``qstat -fx -F json`` for PBS Pro.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs.launchers import slurm_shape
from hpcenv.jobs.placement import Placement
from hpcenv.jobs.shell import job_id as job_id_word
from hpcenv.jobs.shell import join, word
from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.status import JobStatus, Phase, aggregate
from hpcenv.jobs.transport import Completed, Transport
from hpcenv.printable import printable
from hpcenv.site import Site
from hpcenv.site.words import directive_pairs


def _merge(
    pairs: list[tuple[str, str | None]], joins: dict[str, str]
) -> list[tuple[str, str | None]]:
    """Merge repeated flags that the scheduler would otherwise let the last one win."""
    out: list[tuple[str, str | None]] = []
    for flag, value in pairs:
        prev = next((i for i, (f, _) in enumerate(out) if f == flag), None)
        if flag in joins and prev is not None and value is not None:
            old = out[prev][1] or ""
            sep = joins[flag]
            items = old.split(sep) if sep != " " else old.split()
            new = value.split(sep) if sep != " " else value.split()
            out[prev] = (flag, sep.join([*items, *[v for v in new if v not in items]]))
        elif (flag, value) not in out:
            out.append((flag, value))
    return out


_OPTION_TEXT = re.compile(r"^[A-Za-z0-9_.,:@%+=/ -]+$")


def option_pair(text: str) -> tuple[str, str | None]:
    """One pass-through scheduler option (``--reservation=x``, ``-l filesystems=home``).

    A newline never starts a new directive: only letters, digits, spaces and ``_.,:@%+=/-``
    are allowed, and the text must be exactly one flag with at most one value.
    """
    if not _OPTION_TEXT.match(text):
        raise ConfigError(
            f"--option {text!r}: only letters, digits, spaces and _.,:@%+=/- (no newlines, "
            "quotes or $)"
        )
    words = text.split()
    if not words[0].startswith("-") or len(words) > 2 or (len(words) == 2 and "=" in words[0]):
        raise ConfigError(
            f"--option {text!r}: give one option (a flag and at most one value) per --option"
        )
    return directive_pairs(words)[0]


def _val(value: str) -> str:
    return f'"{value}"' if re.search(r"[\s&|]", value) else value


@dataclass(frozen=True)
class Probe:
    """What ``hpcenv doctor`` runs to show a scheduler is here and answering.

    ``command`` not on PATH: the scheduler is missing (``hint`` says how to get it). Else the
    first of ``answers`` whose program is on PATH runs (the last one runs ``command``); a
    non-zero exit, or output without ``expect``, is broken (``broken`` with ``{line}``, the
    probe's last line; ``fix``).
    """

    command: str
    answers: tuple[tuple[str, ...], ...]
    hint: str
    broken: str
    fix: str
    expect: str = ""


class Scheduler(ABC):
    name: ClassVar[str]
    prefix: ClassVar[str]
    job_id_expr: ClassVar[str]
    task_id_expr: ClassVar[str]
    # A command, run in the batch shell, that prints the allocation's first (compute) node: the
    # env:// rendezvous address (hpcenv.jobs.rendezvous).
    first_node: ClassVar[str]
    merge: ClassVar[dict[str, str]] = {}
    id_pattern: ClassVar[re.Pattern[str]]
    # The client program that takes a job script on stdin (sbatch), and the directive flag that
    # charges a project; ``needs_account``: every site of this kind wants one.
    submit_command: ClassVar[str]
    account_flag: ClassVar[str]
    account_option: ClassVar[str] = "--account"  # how an error tells the user to give it
    needs_account: ClassVar[bool] = False
    # Patterns the scheduler expands in log file names, and what each becomes in the path
    # hpcenv reads back: ``{id}`` the job id, ``*`` every array task.
    log_patterns: ClassVar[dict[str, str]] = {}
    # The variable that points the client commands at the site's ``scheduler.conf``.
    conf_env: ClassVar[str | None] = None
    # ``hpcenv doctor``.
    probe: ClassVar[Probe]
    # ``hpcenv sites init --from-host``: a command whose answer shows a working scheduler, one
    # whose presence alone says it is installed (its controller may be down), and the launcher
    # to write: the first whose ``--version`` answers, else the last, each with its reason.
    detect: ClassVar[tuple[str, ...]]
    installed: ClassVar[tuple[str, ...] | None] = None
    launchers: ClassVar[tuple[tuple[str, str], ...]]

    # -- rendering --------------------------------------------------------------------------
    @abstractmethod
    def resources(
        self, site: Site, job: JobSpec, tuning: Placement
    ) -> list[tuple[str, str | None]]:
        """Directive (flag, value) pairs for the job's shape, names, logs and array."""

    def directives(
        self, site: Site, job: JobSpec, tuning: Placement, node_local: bool
    ) -> list[str]:
        """Complete directive lines: the job's resources + the site's extra directives."""
        extra = list(site.scheduler.extra_directives)
        if node_local and site.node_local:
            extra += site.node_local.request
        pairs = [*self.resources(site, job, tuning), *directive_pairs(extra)]
        users = self.job_options(job)
        for text in job.scheduler_options:
            flag, value = option_pair(text)
            if not job.option_override:
                self.refuse_owned(text, flag, value)
            users.append((flag, value))
        self.refuse_silent_merge(site, pairs, users)
        return [self.line(f, v) for f, v in _merge([*pairs, *users], self.merge)]

    def refuse_silent_merge(
        self,
        site: Site,
        sites: list[tuple[str, str | None]],
        users: list[tuple[str, str | None]],
    ) -> None:
        """A user's ``-C cpu`` where the site's directives already say ``-C gpu`` would be
        merged into ``gpu&cpu``, nodes that may not exist: refused unless the user's own
        expression already has every site term (``-C 'gpu&hbm80g'`` narrows the site's nodes)."""
        for flag, value in users:
            sep = self.merge.get(flag)
            if sep is None or value is None or flag not in self.feature_flags:
                continue
            mine = value.split(sep) if sep != " " else value.split()
            for f, v in sites:
                if f != flag or not v:
                    continue
                theirs = v.split(sep) if sep != " " else v.split()
                if not set(theirs) <= set(mine):
                    both = sep.join([*theirs, *[m for m in mine if m not in theirs]])
                    raise ConfigError(
                        f"{flag} {value!r}: site {site.name!r} already asks for {flag} {v!r} "
                        f"(scheduler.extra_directives), so {self.name} would get {both!r}: "
                        f"give the whole expression ({flag} {both!r}) if you mean that, or "
                        "use a site file for those nodes"
                    )

    # The directives hpcenv writes itself (logs it reads back, where the job runs, its name, the
    # environment it exports, the job's shape and the dependencies and token of `submit`), and
    # the options that break what hpcenv does after submitting (a submit command that blocks, logs
    # moved where status and logs do not look, another cluster, a signal that kills the batch
    # shell before its EXIT trap), by flag, with what each is for and what to give hpcenv instead:
    # ``--option`` may add directives, not replace these (unless ``--option-override``).
    # ``owned_values``: flags whose value's keys decide (PBS ``-l select=``; several
    # ``key=value`` joined by ``,``; keys compared case-insensitively, as PBS compares resource
    # names). ``owned_patterns``: flags whose value decides, by a regular expression.
    # ``getopt``: the submit command parses with getopt (Slurm, PBS), so ``-ofile`` is
    # ``-o file``; with ``long_options`` it is getopt_long, where a long option may be
    # abbreviated to any unique prefix (``--j=x`` is ``--job-name=x``) and ``short_options``
    # names each short flag's long one.
    owned: ClassVar[dict[str, str]] = {}
    owned_values: ClassVar[dict[str, dict[str, str]]] = {}
    owned_patterns: ClassVar[dict[str, tuple[tuple[str, str], ...]]] = {}
    getopt: ClassVar[bool] = False
    long_options: ClassVar[frozenset[str]] = frozenset()
    short_options: ClassVar[dict[str, str]] = {}

    def long_name(self, flag: str) -> str:
        """``flag`` as getopt_long reads it: itself when it is an option's whole name, else
        the one option it is a prefix of; an ambiguous prefix (the submit command would refuse
        it) is a ConfigError; a name it does not know is returned as it is."""
        names = self.long_options | {
            f for f in (*self.owned, *self.owned_values, *self.owned_patterns) if f[:2] == "--"
        }
        if flag in names or not self.long_options:
            return flag
        hits = sorted(n for n in names if n.startswith(flag))
        if len(hits) > 1:
            shown = ", ".join(hits[:6]) + (", ..." if len(hits) > 6 else "")
            raise ConfigError(
                f"--option {flag}: {self.submit_command} would refuse it as ambiguous ({shown}): "
                "give the whole option name"
            )
        return hits[0] if hits else flag

    def option_name(self, flag: str, value: str | None) -> tuple[str, str | None]:
        """(the option's whole name, its value) as the submit command reads ``flag`` and
        ``value``: ``--j`` is ``--job-name``, ``-J`` is ``--job-name`` where the command has
        long names, ``-lselect=2`` is ``-l`` with ``select=2``."""
        if self.getopt and flag.startswith("--"):
            return self.long_name(flag), value
        if self.getopt and len(flag) > 2:  # -ofile, -lselect=2 (getopt: the rest is the value)
            value = flag[2:] + ("" if value is None else f"={value}")
            flag = flag[:2]
        return self.short_options.get(flag, flag), value

    def owner_of(self, flag: str, value: str | None) -> str | None:
        """What of hpcenv's ``flag`` (with ``value``) would replace or break, if anything."""
        name, value = self.option_name(flag, value)
        for f in dict.fromkeys((name, flag)):
            if f in self.owned:
                return self.owned[f]
        for pattern, what in self.owned_patterns.get(name, ()):
            if value is not None and re.search(pattern, value):
                return what
        keys = self.owned_values.get(name, {})
        for part in (value or "").split(","):
            key = part.split("=", 1)[0].strip().lower()
            if key in keys:
                return keys[key]
        return None

    def refuse_owned(self, text: str, flag: str, value: str | None) -> None:
        what = self.owner_of(flag, value)
        if what is not None:
            raise ConfigError(
                f"--option {text!r} conflicts with hpcenv's own {what}; "
                "pass --option-override to replace it anyway"
            )

    # Flags for --qos and --constraint; a scheduler without one refuses the option.
    qos_flag: ClassVar[str | None] = None
    constraint_flag: ClassVar[str | None] = None
    # Merged flags whose terms all must hold (node features): a user's term is not silently
    # added to the site's (other merged flags, such as LSF's -alloc_flags, just add up).
    feature_flags: ClassVar[frozenset[str]] = frozenset()

    def job_options(self, job: JobSpec) -> list[tuple[str, str | None]]:
        pairs: list[tuple[str, str | None]] = []
        for what, value, flag in (
            ("--qos", job.qos, self.qos_flag),
            ("--constraint", job.constraint, self.constraint_flag),
        ):
            if value is None:
                continue
            if flag is None:
                old = " (-q is Slurm's QOS; the queue is -p/--queue)" if what == "--qos" else ""
                raise ConfigError(
                    f"{self.name} has no {what}{old}; pass the scheduler's own option with --option"
                )
            pairs.append((flag, value))
        return pairs

    def line(self, flag: str, value: str | None) -> str:
        if value is None:
            return f"{self.prefix} {flag}"
        return f"{self.prefix} {flag} {_val(value)}"

    # Slurm's file name patterns (``-o``/``-e``, sbatch "filename pattern") in this scheduler's
    # words; a pattern missing here is refused (the scheduler would write it literally).
    log_pattern_map: ClassVar[dict[str, str]] = {}

    def log_names(self, job: JobSpec) -> tuple[str | None, str | None]:
        """stdout/stderr file names relative to the workdir, with the scheduler's patterns:
        the job's own ``-o``/``-e`` (Slurm's patterns translated), else hpcenv's default."""
        out, err = self.default_log_names(job)
        return (
            self._log(job.stdout, out, job.name, "-o/--output") if job.stdout else out,
            self._log(job.stderr, err, job.name, "-e/--error") if job.stderr else err,
        )

    def _log(self, value: str, default: str | None, job_name: str, option: str) -> str:
        """A name, or a folder (``logs/``): the default name in it (issue 37)."""
        if not value.endswith("/"):
            return self.translate_log(value, job_name, option)
        if default is None:
            raise ConfigError(
                f"{option} {value!r}: {self.name} expands no job id in a log name, so a folder "
                "would hold one file for every job; give a file name"
            )
        return value + default

    def default_log_names(self, job: JobSpec) -> tuple[str | None, str | None]:
        return None, None

    def translate_log(self, name: str, job_name: str, option: str) -> str:
        """``name`` with Slurm's ``%x`` (job name) filled in and ``%j %A %a`` in this
        scheduler's words."""
        out, i = [], 0
        while i < len(name):
            if name[i] != "%":
                out.append(name[i])
                i += 1
                continue
            pat = name[i : i + 2]
            if pat == "%x":
                out.append(job_name)
            elif pat in self.log_pattern_map:
                out.append(self.log_pattern_map[pat])
            else:
                known = ", ".join(["%x", *self.log_pattern_map])
                raise ConfigError(
                    f"{option} {name!r}: {self.name} has no pattern {pat!r} "
                    f"(it takes {known}); give a plain file name"
                )
            i += 2
        return "".join(out)

    def log_files(self, name: str, job_id: str, log_names: Sequence[str | None]) -> list[str]:
        """The files (relative to the workdir) that :meth:`log_names` became for ``job_id``."""
        out = []
        for log in log_names:
            if log:
                for pattern, value in self.log_patterns.items():
                    log = log.replace(pattern, value.format(id=job_id))
                out.append(log)
        return out

    def client_env(self, site: Site) -> dict[str, str]:
        """Variables the client commands need for ``site`` (:attr:`conf_env`)."""
        if site.scheduler.conf and self.conf_env:
            return {self.conf_env: site.scheduler.conf}
        return {}

    # -- submission -------------------------------------------------------------------------
    # What ``--after`` takes: a job id as this scheduler writes it, and that form in words.
    after_pattern: ClassVar[re.Pattern[str]] = re.compile(r"\d{1,20}")
    after_form: ClassVar[str] = "a job id (12345)"

    def check_after(self, ids: Sequence[str]) -> list[str]:
        """``--after`` ids, each in this scheduler's job id form (``notajob`` would reach the
        dependency option and be rejected by the scheduler, or by a dry run never)."""
        for value in ids:
            if not self.after_pattern.fullmatch(value):
                shown = repr(value[:60]) + ("..." if len(value) > 60 else "")
                raise ConfigError(f"--after {shown}: not a {self.name} job id: {self.after_form}")
        return list(ids)

    @abstractmethod
    def submit_argv(self, after: list[str]) -> list[str]:
        """argv that reads a job script on stdin and waits for ``after`` to succeed."""

    def tagged_submit(self, after: list[str], token: str) -> tuple[list[str], list[str]] | None:
        """(:meth:`submit_argv` that also stores ``token`` with the job, an argv printing one
        ``ID TOKEN`` line per job of this user: ``templates/jobs/submit.sh`` picks the ids
        whose second word is the token), or None when the scheduler cannot be asked for a
        token afterwards (a lost connection during submission is then not retried)."""
        return None

    def parse_job_id(self, result: Completed) -> str:
        if result.returncode == 0:
            for line in result.stdout.splitlines():
                m = self.id_pattern.search(line.strip())
                if m:
                    try:
                        return job_id_word(m.group(1))
                    except ConfigError as err:  # 10,000 digits: not an id hpcenv can use
                        raise JobError(f"{self.submit_command} answered with {err}") from None
        raise JobError(f"{self.name} rejected the job: {result.message()}")

    # -- monitoring -------------------------------------------------------------------------
    @abstractmethod
    def status(self, transport: Transport, job_id: str) -> JobStatus: ...

    @abstractmethod
    def cancel_argv(self, job_id: str) -> list[str]: ...

    def cancel(self, transport: Transport, job_id: str) -> None:
        result = transport.run(join(self.cancel_argv(job_id)))
        if result.returncode != 0:
            raise JobError(f"cancel {job_id} failed: {result.message()}")


# Every scheduler hpcenv knows, by name, in the order detection tries them.
SCHEDULERS: dict[str, type[Scheduler]] = {}
NO_SCHEDULER = "none"  # the site value for a host without one; never a scheduler's name

S = TypeVar("S", bound=type[Scheduler])


def register_scheduler(cls: S) -> S:
    """Class decorator: make ``cls`` known to every caller under ``cls.name``."""
    if cls.name == NO_SCHEDULER or cls.name in SCHEDULERS:
        raise ValueError(f"scheduler name {cls.name!r} is taken")
    SCHEDULERS[cls.name] = cls
    return cls


def client_env(site: Site) -> dict[str, str]:
    """Variables the scheduler's client commands need for ``site`` (SLURM_CONF for a second
    cluster served from the same login host, e.g. the ``local-2node`` rehearsal)."""
    cls = SCHEDULERS.get(site.scheduler.kind)
    return cls().client_env(site) if cls else {}


# What an ``--option`` would break, in words shared by every scheduler's ``owned`` table.
PLACEMENT = (
    "rank placement (hpcenv writes it from the site's node layout and -N/--nodes, -n/--ntasks, "
    "--ntasks-per-node, -c/--cpus-per-task, --gpus-per-task, --gpus-per-node: give those)"
)
BLOCKING = (
    "submission (the submit command would wait for the job, so no id comes back until it ends: "
    "give --wait, which follows it with the id recorded)"
)


def logs_moved(why: str) -> str:
    return (
        f"log files ({why}, and status and logs read them where hpcenv names them: give "
        "-o/--output, -e/--error)"
    )


CLUSTER = (
    "cluster (status, logs and cancel ask the site's own cluster: use a site file for the "
    "other cluster, its scheduler.conf)"
)
BATCH_SIGNAL = (
    "end of the job (a signal to the batch shell kills it before its EXIT trap: no clean-up, "
    "no end marker; signal the job's steps instead, e.g. --signal=USR1@60)"
)


# --------------------------------------------------------------------------------------------
# Slurm
# --------------------------------------------------------------------------------------------

_SLURM_PHASE: dict[str, Phase] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "SUSPENDED": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "STAGE_OUT": "running",
    "SIGNALING": "running",
    "RESIZING": "running",
    "COMPLETED": "done",
    "FAILED": "failed",
    "CANCELLED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "PREEMPTED": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "REVOKED": "failed",
    "SPECIAL_EXIT": "failed",
}
# Pending reasons that mean the job cannot start until an administrator or the user acts.
_SLURM_BLOCKED = re.compile(
    r"ReqNodeNotAvail|NodeDown|PartitionDown|PartitionInactive|PartitionNodeLimit|"
    r"PartitionConfig|BadConstraints|DependencyNeverSatisfied|InvalidAccount|InvalidQOS|"
    r"JobHeldAdmin|JobHeldUser|Nodes_required|launch failed"
)
_NODELIST = re.compile(r"^[A-Za-z0-9_.,\[\]-]+$")  # node1,node[2-4]
_WORDS = re.compile(r"(\s+)")


def parse_slurm_record(line: str) -> dict[str, str]:
    """``scontrol show job -o`` / jobcomp line -> dict (values may contain spaces).

    A word with ``=`` after its first character starts the next ``Key=value``; other words
    continue the value before them. One pass over the words: linear in the line's length
    (a regular expression with a look-ahead for the next key took 8 s on 32 KB of one word).
    """
    out: dict[str, str] = {}
    key: str | None = None
    value: list[str] = []
    for w in _WORDS.split(line.strip()):
        eq = w.find("=", 1)
        if eq > 0 and not w.isspace():
            if key is not None:
                out[key] = "".join(value).strip()
            key, value = w[:eq], [w[eq + 1 :]]
        elif key is not None:
            value.append(w)
    if key is not None:
        out[key] = "".join(value).strip()
    return out


def slurm_status_from_record(rec: dict[str, str], source: str) -> JobStatus:
    state = next(iter(rec.get("JobState", "").split()), "UNKNOWN")  # "JobState=" is UNKNOWN
    phase = _SLURM_PHASE.get(state, "unknown")
    if phase == "done" and rec.get("ExitCode", "0:0") not in ("0:0", ""):
        phase = "failed"
    reason = rec.get("Reason") or None
    job_id = rec.get("JobId", "?")
    if rec.get("ArrayTaskId"):
        job_id = f"{rec.get('ArrayJobId', job_id)}_{rec['ArrayTaskId']}"
    return JobStatus(
        job_id=job_id,
        state=state,
        phase=phase,
        exit_code=rec.get("ExitCode"),
        reason=reason,
        blocked=phase == "pending" and bool(reason and _SLURM_BLOCKED.search(reason)),
        stdout=rec.get("StdOut"),
        stderr=rec.get("StdErr"),
        source=source,
        raw=rec,
    )


SBATCH_LONG_OPTIONS = """--account --acctg-freq --array --batch --bb --bbf --begin --chdir
--cluster-constraint --clusters --comment --constraint --container --contiguous
--core-spec --cores-per-socket --cpu-bind --cpu-freq --cpus-per-gpu --cpus-per-task
--deadline --delay-boot --dependency --distribution --error --exclude --exclusive
--export --export-file --extra-node-info --get-user-env --gid --gpu-bind --gpu-freq
--gpus --gpus-per-node --gpus-per-socket --gpus-per-task --gres --gres-flags --help
--hint --hold --ignore-pbs --input --job-name --kill-on-invalid-dep --licenses
--mail-type --mail-user --mcs-label --mem --mem-bind --mem-per-cpu --mem-per-gpu
--mincpus --network --nice --no-kill --no-requeue --nodefile --nodelist --nodes
--ntasks --ntasks-per-core --ntasks-per-gpu --ntasks-per-node --ntasks-per-socket
--open-mode --output --overcommit --oversubscribe --parsable --partition --power
--prefer --priority --profile --propagate --qos --quiet --reboot --requeue
--reservation --signal --sockets-per-node --spread-job --switches --test-only
--thread-spec --threads-per-core --time --time-min --tmp --tres-per-task --uid --usage
--use-min-nodes --verbose --version --wait --wait-all-nodes --wckey --wrap"""

# sbatch(1): each short option and its long one ("-A, --account=<account>" ...).
SBATCH_SHORT_OPTIONS = """
-A --account -a --array -b --begin -D --chdir -M --clusters -C --constraint
-S --core-spec -c --cpus-per-task -d --dependency -e --error -x --exclude
-B --extra-node-info -G --gpus -h --help -H --hold -i --input -J --job-name
-L --licenses -k --no-kill -F --nodefile -w --nodelist -N --nodes -n --ntasks
-o --output -O --overcommit -s --oversubscribe -p --partition -q --qos -Q --quiet
-t --time -v --verbose -V --version -W --wait -m --distribution
"""


def _pairs(text: str) -> dict[str, str]:
    words = iter(text.split())
    return dict(zip(words, words, strict=True))


SLURM_HINT = (
    "load your cluster's Slurm environment or set SLURM_CONF to its slurm.conf "
    "(a one-node test cluster: apt-get install slurm-wlm munge, then start munged, slurmctld, slurmd)"
)


@register_scheduler
class Slurm(Scheduler):
    name = "slurm"
    prefix = "#SBATCH"
    job_id_expr = "${SLURM_JOB_ID}"
    # NERSC "Launchers" (docs.nersc.gov/machinelearning/launchers, read 2026-11-24).
    first_node = 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1'
    task_id_expr = "${SLURM_ARRAY_TASK_ID}"
    merge = {"-C": "&", "--constraint": "&"}
    feature_flags = frozenset(merge)
    id_pattern = re.compile(r"^(\d+)(?:;\S+)?$")
    # sbatch --dependency afterok:job_id[_task_id] (sbatch(1) "-d, --dependency")
    after_pattern = re.compile(r"\d{1,20}(?:_\d{1,10})?")
    after_form = "a job id (12345) or an array task (12345_7)"
    qos_flag = "--qos"
    constraint_flag = "-C"  # the flag site files use, so the two merge into one expression
    submit_command = "sbatch"
    account_flag = "--account"
    log_patterns = {"%j": "{id}", "%A": "{id}", "%a": "*"}
    log_pattern_map = {"%j": "%j", "%A": "%A", "%a": "%a"}
    getopt = True
    # sbatch(1) of Slurm 22.05.8 (the man page of Debian's slurm-client 22.05.8, read
    # 2026-11-28), plus --cpu-bind and --tres-per-task of later releases: every long option,
    # for getopt_long's unique prefixes (sbatch's options are parsed with getopt_long(3)).
    long_options = frozenset(SBATCH_LONG_OPTIONS.split())
    short_options = _pairs(SBATCH_SHORT_OPTIONS)
    owned = {
        **dict.fromkeys(("-o", "--output"), "--output (the stdout log status and logs read)"),
        **dict.fromkeys(("-e", "--error"), "--error (the stderr log status and logs read)"),
        **dict.fromkeys(("-D", "--chdir"), "working directory (--workdir)"),
        **dict.fromkeys(("--export", "--export-file", "--get-user-env"), "exported environment"),
        **dict.fromkeys(("-J", "--job-name"), "--job-name (-J)"),
        "--parsable": "--parsable (how submit reads the job id)",
        "--comment": "--comment (the submit token that stops a retry submitting twice)",
        **dict.fromkeys(("-d", "--dependency", "--kill-on-invalid-dep"), "dependency (--after)"),
        **dict.fromkeys(("-a", "--array"), "--array (--array)"),
        "--wrap": "job script",
        **dict.fromkeys(("-N", "--nodes"), "--nodes (--nodes)"),
        **dict.fromkeys(
            (
                "--ntasks",
                "--ntasks-per-node",
                "--ntasks-per-socket",
                "--ntasks-per-core",
                "--ntasks-per-gpu",
                "--cpus-per-task",
                "--cpus-per-gpu",
                "--gpus-per-task",
                "--gpus-per-node",
                "--gpus-per-socket",
                "--hint",
                "--threads-per-core",
                "--cores-per-socket",
                "--sockets-per-node",
                "--extra-node-info",
                "--distribution",
                "--cpu-bind",
                "--gpu-bind",
                "--overcommit",
                "--tres-per-task",
            ),
            PLACEMENT,
        ),
        **dict.fromkeys(("-t", "--time"), "--time (-t)"),
        **dict.fromkeys(("-A", "--account"), "--account (--account)"),
        **dict.fromkeys(("-p", "--partition"), "--partition (--partition)"),
        "--wait": BLOCKING,
        "--test-only": "submission (sbatch --test-only queues nothing: give --dry-run)",
        **dict.fromkeys(("--clusters", "--cluster-constraint"), CLUSTER),
    }
    # --signal=[{R|B}:]<sig_num>[@sig_time] (sbatch(1)): B signals the batch shell only.
    owned_patterns = {"--signal": ((r"^[A-Za-z]*[Bb][A-Za-z]*:", BATCH_SIGNAL),)}
    conf_env = "SLURM_CONF"  # a second cluster served from the same login host (local-2node)
    probe = Probe(
        command="scontrol",
        answers=(("scontrol", "ping"),),
        hint=SLURM_HINT,
        broken="`scontrol ping`: {line}",
        fix="start slurmctld and slurmd, or " + SLURM_HINT,
        expect=" is UP",
    )
    detect = ("scontrol", "show", "config")
    installed = ("sbatch", "--version")
    launchers = (("srun", "Slurm's own launcher"),)

    def default_log_names(self, job: JobSpec) -> tuple[str | None, str | None]:
        tag = "%A_%a" if job.array else "%j"
        return f"{job.name}-{tag}.out", f"{job.name}-{tag}.err"

    def resources(
        self, site: Site, job: JobSpec, tuning: Placement
    ) -> list[tuple[str, str | None]]:
        out, err = self.log_names(job)
        pairs: list[tuple[str, str | None]] = [("--job-name", job.name)]
        pairs += [(f, v) for f, _, v in (a.partition("=") for a in slurm_shape(site, tuning))]
        pairs += [
            ("--time", word(job.walltime or site.scheduler.walltime, "walltime")),  # Slurm's own
            ("--output", out),
            ("--error", err),
        ]
        pairs = [(f, v or None) for f, v in pairs]
        account = job.account  # resolved by render (project.account_for)
        if account:
            pairs.append((self.account_flag, account))
        queue = job.queue or site.scheduler.queue
        if queue:
            pairs.append(("--partition", queue))
        if site.scheduler.qos and not job.qos:
            pairs.append(("--qos", site.scheduler.qos))
        if job.array:
            spec = f"0-{job.array.count - 1}"
            if job.array.parallel:
                spec += f"%{job.array.parallel}"
            pairs.append(("--array", spec))
        return pairs

    def line(self, flag: str, value: str | None) -> str:
        if value is not None and flag.startswith("--"):
            return f"{self.prefix} {flag}={_val(value)}"
        return super().line(flag, value)

    def submit_argv(self, after: list[str]) -> list[str]:
        argv = [self.submit_command, "--parsable"]
        if after:
            deps = ":".join(job_id_word(i) for i in after)
            argv += [f"--dependency=afterok:{deps}", "--kill-on-invalid-dep=yes"]
        return argv

    def tagged_submit(self, after: list[str], token: str) -> tuple[list[str], list[str]] | None:
        """The token goes in the job's comment; ``squeue --states=all`` finds it while
        slurmctld knows the job (MinJobAge seconds after it ends, 300 by default)."""
        token = word(token, "submit token")
        find = ["squeue", "--me", "--states=all", "--noheader", "--format=%i %k"]
        return [*self.submit_argv(after), f"--comment={token}"], find

    def status(self, transport: Transport, job_id: str) -> JobStatus:
        job_id_word(job_id)
        result = transport.run(join(["scontrol", "show", "job", "-o", job_id]))
        if result.returncode == 0 and result.stdout.strip():
            tasks = [
                slurm_status_from_record(parse_slurm_record(line), "scontrol")
                for line in result.stdout.splitlines()
                if line.strip()
            ]
            return self._name_failed_nodes(transport, aggregate(job_id, tasks, "scontrol"))
        if "Invalid job id" in result.message():
            found = self.status_from_jobcomp(transport, job_id)
            if found:
                return self._name_failed_nodes(transport, found)
        raise JobError(f"no state for job {job_id}: {result.message()}")

    def _name_failed_nodes(self, transport: Transport, st: JobStatus) -> JobStatus:
        """For NODE_FAIL, say which of the job's nodes failed and Slurm's reason for it."""
        nodes = st.raw.get("NodeList", "")
        if st.state != "NODE_FAIL" or not _NODELIST.match(nodes):
            return st
        result = transport.run(join(["scontrol", "show", "node", "-o", nodes]))
        failed = []
        for line in result.stdout.splitlines():
            rec = parse_slurm_record(line)
            state = rec.get("State", "")
            if any(bad in state for bad in ("DOWN", "FAIL", "NOT_RESPONDING", "DRAIN")):
                why = rec.get("Reason", "")
                failed.append(f"{rec.get('NodeName', '?')} {state}" + (f" ({why})" if why else ""))
        if failed:
            st.reason = f"{st.reason or 'NodeFail'}; failed node: {'; '.join(failed)}"
        return st

    def jobcomp_file(self, transport: Transport) -> str | None:
        result = transport.run(join(["scontrol", "show", "config"]))
        for line in result.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "JobCompLoc":
                value = value.strip()
                return value if value.startswith("/") else None
        return None

    def status_from_jobcomp(self, transport: Transport, job_id: str) -> JobStatus | None:
        """State of a purged job from the ``jobcomp/filetxt`` file (last matching line)."""
        path = self.jobcomp_file(transport)
        if not path:
            return None
        pattern = f"^JobId={job_id} "
        result = transport.run(join(["grep", "-E", pattern, path]))
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        if not lines:
            return None
        return slurm_status_from_record(parse_slurm_record(lines[-1]), "jobcomp")

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["scancel", job_id_word(job_id)]


# --------------------------------------------------------------------------------------------
# LSF (Summit: bsub + jsrun, -nnodes)
# --------------------------------------------------------------------------------------------

_LSF_PHASE: dict[str, Phase] = {
    "PEND": "pending",
    "PSUSP": "pending",
    "WAIT": "pending",
    "RUN": "running",
    "USUSP": "running",
    "SSUSP": "running",
    "PROV": "running",
    "DONE": "done",
    "EXIT": "failed",
    "UNKWN": "unknown",
    "ZOMBI": "unknown",
}


def _seconds(value: str) -> int:
    from hpcenv.safe import walltime_seconds

    try:
        return walltime_seconds(value)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _lsf_walltime(value: str) -> str:
    """LSF ``-W hour:minute`` from a Slurm-style time, rounded up to whole minutes."""
    total = -(-_seconds(value) // 60)
    return f"{total // 60:02d}:{total % 60:02d}"


def _pbs_walltime(value: str) -> str:
    """PBS ``walltime=HH:MM:SS`` (PBS reads a bare number as seconds, Slurm as minutes)."""
    s = _seconds(value)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


@register_scheduler
class Lsf(Scheduler):
    name = "lsf"
    prefix = "#BSUB"
    job_id_expr = "${LSB_JOBID}"
    # The batch shell runs on a launch node, not a compute node; `jsrun -n1 hostname` names the
    # first compute node (OLCF summit_user_guide.rst "Interactive Jobs", in the repository's
    # history before d900d52, read 2026-11-24).
    first_node = "jsrun -n1 -r1 -a1 -c1 hostname"
    task_id_expr = "$((LSB_JOBINDEX - 1))"
    merge = {"-alloc_flags": " "}
    id_pattern = re.compile(r"^Job <(\d+)> is submitted")
    # bsub -w "done(job_ID)" / "done(job_ID[index])" (IBM Spectrum LSF, bsub -w)
    after_pattern = re.compile(r"\d{1,20}(?:\[\d{1,10}\])?")
    after_form = "a job id (12345) or an array element (12345[7])"
    submit_command = "bsub"
    account_flag = "-P"
    account_option = f"--account ({submit_command} {account_flag})"
    needs_account = True
    log_patterns = {"%J": "{id}", "%I": "*"}
    # bsub -o: %J job id, %I array index (IBM Spectrum LSF bsub -o reference)
    log_pattern_map = {"%j": "%J", "%A": "%J", "%a": "%I"}
    # bsub's options (IBM Spectrum LSF 10.1 bsub reference: -K "submits a job and waits for
    # the job to complete", -I* interactive, -outdir, -clusters, -wa, -R span[]/affinity[]):
    # whole words, no abbreviation, case-sensitive.
    owned = {
        **dict.fromkeys(("-o", "-oo"), "-o (the stdout log status and logs read)"),
        **dict.fromkeys(("-e", "-eo"), "-e (the stderr log status and logs read)"),
        "-cwd": "working directory (--workdir)",
        "-J": "-J job name and array (--name, --array)",
        "-env": "exported environment",
        "-w": "dependency (--after)",
        "-nnodes": "-nnodes (--nodes)",
        "-W": "-W (--walltime)",
        "-P": "-P (--account)",
        "-q": "-q (--queue)",
        "-n": PLACEMENT,
        **dict.fromkeys(("-K", "-I", "-Ip", "-Is", "-IS", "-ISp", "-ISs", "-IX"), BLOCKING),
        "-outdir": logs_moved("-outdir moves them"),
        "-clusters": CLUSTER,
        "-wa": BATCH_SIGNAL.replace("--signal=USR1@60", "a signal your program traps"),
    }
    probe = Probe(
        command="bsub",
        answers=(("lsid",), ("bsub", "-V")),
        hint="only needed on LSF sites (e.g. Summit): load the LSF environment",
        broken="LSF does not answer: {line}",
        fix="source the site's LSF profile (profile.lsf) and check the master host",
    )
    detect = ("bqueues",)
    launchers = (("jsrun", "jsrun found"), ("mpirun", "no jsrun"))

    def default_log_names(self, job: JobSpec) -> tuple[str | None, str | None]:
        tag = "%J_%I" if job.array else "%J"
        return f"{job.name}-{tag}.out", f"{job.name}-{tag}.err"

    def resources(
        self, site: Site, job: JobSpec, tuning: Placement
    ) -> list[tuple[str, str | None]]:
        out, err = self.log_names(job)
        name = job.name
        if job.array:
            name += f"[1-{job.array.count}]"
            if job.array.parallel:
                name += f"%{job.array.parallel}"
        pairs: list[tuple[str, str | None]] = [
            ("-J", name),
            ("-nnodes", str(tuning.nodes)),
            ("-W", _lsf_walltime(job.walltime or site.scheduler.walltime)),
            ("-o", out),
            ("-e", err),
        ]
        account = job.account  # resolved by render (project.account_for)
        if account:
            pairs.append((self.account_flag, account))
        queue = job.queue or site.scheduler.queue
        if queue:
            pairs.append(("-q", queue))
        return pairs

    def submit_argv(self, after: list[str]) -> list[str]:
        argv = [self.submit_command]
        if after:
            argv += ["-w", " && ".join(f"done({job_id_word(i)})" for i in after)]
        return argv

    def status(self, transport: Transport, job_id: str) -> JobStatus:
        fields = "jobid stat exit_code exit_reason pend_reason output_file error_file"
        result = transport.run(join(["bjobs", "-o", fields, "-json", job_id_word(job_id)]))
        if result.returncode != 0:
            raise JobError(f"no state for job {job_id}: {result.message()}")
        return parse_bjobs_json(job_id, result.stdout)

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["bkill", job_id_word(job_id)]


def _kind(value: object) -> str:
    """What a JSON value is, in JSON's words."""
    if isinstance(value, bool):
        return "true/false"
    names = {dict: "an object", list: "a list", str: "text", int: "a number", float: "a number"}
    return names.get(type(value), "null")


def _json(text: str, tool: str, key: str, kind: type) -> Any:
    """``text`` as a JSON object, and its ``key`` (absent: empty) of ``kind``; else a JobError."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, 5,000-digit numbers, nesting
        raise JobError(f"{tool} output is not JSON: {printable(text.strip()[:200])}") from err
    if not isinstance(data, dict):
        raise JobError(f"{tool} output is JSON but not an object: {printable(text.strip()[:200])}")
    value = data.get(key) or kind()
    if not isinstance(value, kind):
        raise JobError(f"{tool} output: {key} is {_kind(value)}, not {_kind(kind())}")
    return value


def _text(rec: dict[str, Any], key: str, tool: str) -> str | None:
    """A scalar field of a scheduler's JSON record as text (absent or empty: None)."""
    value = rec.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise JobError(f"{tool} output: {key} is {_kind(value)}, not text or a number")
    return str(value)


def _record(rec: object, tool: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise JobError(f"{tool} output: a job record is {_kind(rec)}, not an object")
    return rec


def parse_bjobs_json(job_id: str, text: str) -> JobStatus:
    tasks = []
    for item in _json(text, "bjobs", "RECORDS", list):
        rec = _record(item, "bjobs")
        if "ERROR" in rec:
            raise JobError(f"no state for job {job_id}: {printable(str(rec['ERROR']))}")
        stat = _text(rec, "STAT", "bjobs") or "UNKWN"
        reason = _text(rec, "EXIT_REASON", "bjobs") or _text(rec, "PEND_REASON", "bjobs")
        tasks.append(
            JobStatus(
                job_id=_text(rec, "JOBID", "bjobs") or job_id,
                state=stat,
                phase=_LSF_PHASE.get(stat, "unknown"),
                exit_code=_text(rec, "EXIT_CODE", "bjobs"),
                reason=reason,
                stdout=_text(rec, "OUTPUT_FILE", "bjobs"),
                stderr=_text(rec, "ERROR_FILE", "bjobs"),
                source="bjobs",
                raw=rec,
            )
        )
    if not tasks:
        raise JobError(f"no state for job {job_id}: bjobs returned no records")
    return aggregate(job_id, tasks, "bjobs")


# --------------------------------------------------------------------------------------------
# PBS Pro (Aurora: qsub + mpiexec/PALS)
# --------------------------------------------------------------------------------------------

_PBS_PHASE: dict[str, Phase] = {
    "Q": "pending",
    "H": "pending",
    "W": "pending",
    "T": "pending",
    "S": "pending",
    "U": "pending",
    "M": "pending",
    "R": "running",
    "E": "running",
    "B": "running",
}


@register_scheduler
class Pbs(Scheduler):
    name = "pbs"
    prefix = "#PBS"
    job_id_expr = "${PBS_JOBID}"
    first_node = 'head -n 1 "$PBS_NODEFILE"'  # the batch shell's own node (mother superior)
    task_id_expr = "${PBS_ARRAY_INDEX}"
    id_pattern = re.compile(r"^(\d+(?:\[\])?(?:\.[A-Za-z0-9_.-]+)?)$")
    # qsub -W depend=afterok:jobid, as qsub prints it (12345.server, 12345[].server)
    after_pattern = re.compile(
        r"\d{1,20}(?:\[\d{0,10}\])?(?:\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127})?"
    )
    after_form = "a job id as qsub prints it (12345.server or 12345[].server)"
    submit_command = "qsub"
    account_flag = "-A"
    needs_account = True
    getopt = True
    # qsub(1B) and resource names: PBS Professional 2022.1 Reference Guide ("qsub", RG-214;
    # "Resource names are case-insensitive", "Resources" chapter). qsub parses with getopt:
    # short options only, a value may be attached (-lselect=2), -l and -W take key=value lists.
    owned = {
        "-o": "-o (the stdout log status and logs read)",
        "-e": "-e (the stderr log status and logs read)",
        "-N": "-N (--name)",
        "-V": "exported environment",
        "-v": "exported environment",
        "-J": "-J (--array)",
        "-A": "-A (--account)",
        "-q": "-q (--queue)",
        "-j": logs_moved("-j joins them into one"),
        "-k": logs_moved("-k keeps them on the execution host"),
        "-I": BLOCKING,
    }
    owned_values = {
        "-l": {
            "select": "-l select (--nodes)",
            "place": "-l place (rank placement)",
            "walltime": "-l walltime (--walltime)",
            "nodes": "-l select (--nodes)",
            **dict.fromkeys(("ncpus", "mpiprocs", "ompthreads", "ngpus", "nodect"), PLACEMENT),
        },
        "-W": {
            "depend": "-W depend (--after)",
            "max_run_subjobs": "-W max_run_subjobs (the array's parallel limit)",
            "block": BLOCKING,
            "sandbox": "working directory (--workdir)",
        },
    }
    probe = Probe(
        command="qsub",
        answers=(("qstat", "-B"), ("qsub", "--version")),
        hint="only needed on PBS/Torque sites: load the PBS environment",
        broken="PBS server does not answer: {line}",
        fix="check PBS_SERVER / the pbs_server daemon",
    )
    detect = ("qstat", "-B")
    launchers = (("mpiexec", "PBS sites launch with mpiexec"),)

    def resources(
        self, site: Site, job: JobSpec, tuning: Placement
    ) -> list[tuple[str, str | None]]:
        pairs: list[tuple[str, str | None]] = [
            ("-N", job.name),
            ("-l", f"select={tuning.nodes}"),
            ("-l", "place=scatter"),
            ("-l", f"walltime={_pbs_walltime(job.walltime or site.scheduler.walltime)}"),
        ]
        out, err = self.log_names(job)  # PBS expands no pattern: only the job's own names
        pairs += [(flag, name) for flag, name in (("-o", out), ("-e", err)) if name]
        account = job.account  # resolved by render (project.account_for)
        if account:
            pairs.append((self.account_flag, account))
        queue = job.queue or site.scheduler.queue
        if queue:
            pairs.append(("-q", queue))
        if job.array:
            if job.array.count < 2:
                raise ConfigError("PBS Pro job arrays need at least 2 tasks")
            pairs.append(("-J", f"0-{job.array.count - 1}"))
            if job.array.parallel:
                pairs.append(("-W", f"max_run_subjobs={job.array.parallel}"))
        if job.pass_env:  # --env NAME: qsub passes no environment but what -v names; a name
            # without =value takes qsub's own (POSIX qsub(1p) -v variable_list): names only here
            pairs.append(("-v", ",".join(job.pass_env)))
        return pairs

    def submit_argv(self, after: list[str]) -> list[str]:
        argv = [self.submit_command]
        if after:
            argv += ["-W", "depend=afterok:" + ":".join(job_id_word(i) for i in after)]
        return argv

    def status(self, transport: Transport, job_id: str) -> JobStatus:
        result = transport.run(join(["qstat", "-fxt", "-F", "json", job_id_word(job_id)]))
        if result.returncode != 0:
            raise JobError(f"no state for job {job_id}: {result.message()}")
        return parse_qstat_json(job_id, result.stdout)

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["qdel", job_id_word(job_id)]

    def log_files(self, name: str, job_id: str, log_names: Sequence[str | None]) -> list[str]:
        """PBS's own ``NAME.oSEQ``/``NAME.eSEQ`` (no -o/-e given)."""
        seq = job_id.split(".")[0]
        return super().log_files(name, job_id, log_names) or [f"{name}.o{seq}", f"{name}.e{seq}"]


def parse_qstat_json(job_id: str, text: str) -> JobStatus:
    tasks = []
    jobs = _json(text, "qstat", "Jobs", dict)
    for jid, item in jobs.items():
        rec = _record(item, "qstat")
        state = _text(rec, "job_state", "qstat") or "?"
        exit_status = _text(rec, "Exit_status", "qstat")
        if state in ("F", "X"):
            phase: Phase = "done" if exit_status == "0" else "failed"
        else:
            phase = _PBS_PHASE.get(state, "unknown")
        if rec.get("array") and len(jobs) > 1:
            continue  # the parent of subjobs listed below it
        tasks.append(
            JobStatus(
                job_id=jid,
                state=state,
                phase=phase,
                exit_code=exit_status,
                reason=_text(rec, "comment", "qstat"),
                stdout=(_text(rec, "Output_Path", "qstat") or "").split(":", 1)[-1] or None,
                stderr=(_text(rec, "Error_Path", "qstat") or "").split(":", 1)[-1] or None,
                source="qstat",
                raw=rec,
            )
        )
    if not tasks:
        raise JobError(f"no state for job {job_id}: qstat returned no jobs")
    return aggregate(job_id, tasks, "qstat")


def get_scheduler(name: str) -> Scheduler:
    try:
        return SCHEDULERS[name]()
    except KeyError:
        raise ConfigError(
            f"unknown scheduler {name!r}; known: {', '.join(sorted(SCHEDULERS))}"
        ) from None
