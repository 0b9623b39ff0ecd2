"""Submit rendered jobs through a transport, remember them, and follow them.

Submission runs a shipped script on the transport, ``templates/jobs/submit.sh``: it creates and
enters the workdir, prints it, and hands the job script to ``sbatch``/``bsub``/``qsub`` on stdin
(with a submit token: under a lock, after looking for a job that already carries the token).
Each submission is recorded in ``<cache>/jobs/<transport>-<host>-<id>.json`` (mode 0600; site,
scheduler, transport, workdir, log names) so ``hpcenv status|logs|cancel JOBID`` need nothing
else.

How a host script runs (:func:`run_host_script`): the transport runs one command line,
``[PRELUDE] bash -s -- ARG...``, every argument one quoted word (:func:`hpcenv.jobs.shell.join`;
a workdir naming ``$VARS`` is a validated double-quoted word, the site prelude's assignments
come before it so they expand there), and stdin carries the script's text followed by the
job script. No file is copied first (one round trip, which the retry logic needs) and no
program is built here: bash reads a script from stdin one byte at a time (POSIX requires that
a shell reading commands from stdin leave the rest to the commands it runs; dash does not, so
it is ``bash -s``, which every login node has), the script is one function called on its last
line followed by ``exit``, and only the submit command in it reads stdin, so it reads exactly
the job script. The same runner reads logs with ``templates/jobs/logs.sh``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs.preview import log_folders_line
from hpcenv.jobs.render import RenderedJob, prepare
from hpcenv.jobs.schedulers import get_scheduler
from hpcenv.jobs.shell import expanding, join
from hpcenv.jobs.shell import job_id as check_job_id
from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.status import JobStatus
from hpcenv.jobs.transport import (
    Completed,
    NotConnected,
    Transport,
    TransportError,
    TransportSpec,
    make_transport,
)
from hpcenv.output import write_private
from hpcenv.paths import cache_dir, templates_dir
from hpcenv.printable import printable
from hpcenv.reads import NotYours, load_json, owner_name, trust_problem
from hpcenv.signals import Deferred, deferred_interrupt
from hpcenv.site import Site

# What submit.sh prints before the workdir and before the id of a job that has the token.
_WORKDIR_MARK = "HPCENV_WORKDIR="
_EXISTING_MARK = "HPCENV_SUBMITTED_BEFORE="
SUBMIT_ATTEMPTS = 3
SUBMIT_SCRIPT = "submit.sh"
LOGS_SCRIPT = "logs.sh"


def host_script(name: str) -> str:
    """A shipped script that runs on the submitting host (``templates/jobs/NAME``)."""
    return templates_dir().joinpath("jobs", name).read_text(encoding="utf-8")


def host_script_line(args: list[str], prelude: str = "") -> str:
    """The command line that runs a host script fed on stdin: ``[PRELUDE] bash -s -- ARG...``,
    each argument one quoted word (an :class:`~hpcenv.jobs.shell.Expand` keeps its variables)."""
    return f"{prelude}bash -s -- {join(args)}"


def run_host_script(
    transport: Transport,
    name: str,
    args: list[str],
    *,
    prelude: str = "",
    stdin: str = "",
    timeout: float = 120,
) -> Completed:
    """Run the shipped script ``name`` with ``args`` on ``transport``; its own stdin is
    ``stdin`` (see the module docstring for why this framing is exact)."""
    line = host_script_line(args, prelude)
    return transport.run(line, stdin=host_script(name) + stdin, timeout=timeout)


@dataclass(frozen=True)
class Submission:
    job_id: str
    name: str
    site: str
    scheduler: str
    workdir: str
    transport: TransportSpec
    log_names: tuple[str | None, str | None]
    script_path: str
    array: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "site": self.site,
            "scheduler": self.scheduler,
            "workdir": self.workdir,
            "transport": self.transport.model_dump(),
            "log_names": list(self.log_names),
            "script_path": self.script_path,
            "array": self.array,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Submission:
        out, err = data.get("log_names") or (None, None)
        return cls(
            job_id=data["job_id"],
            name=data["name"],
            site=data["site"],
            scheduler=data["scheduler"],
            workdir=data["workdir"],
            transport=TransportSpec(**data["transport"]),
            log_names=(out, err),
            script_path=data["script_path"],
            array=data.get("array"),
        )


def records_dir(*, probe: bool = False) -> Path:
    """``<cache>/jobs``, made with mode 0700; a ConfigError line when it cannot be made, is not
    a folder of this user's (a file or a link in its place, another owner), or (``probe``: a
    file is made and removed there) cannot be written. :func:`submit` probes before anything
    is queued, so an unwritable folder fails with nothing submitted (issue 20)."""
    path = cache_dir() / "jobs"
    fix = "set HPCENV_CACHE to a writable folder of yours"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"job records folder {path} cannot be made ({err.strerror}); {fix}"
        ) from None
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"job records folder {path} is not a folder (a file or link is there); {fix}"
        )
    if info.st_uid != os.geteuid():
        raise ConfigError(
            f"job records folder {path} belongs to {owner_name(info.st_uid)}, not to you; {fix}"
        )
    try:
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(path, 0o700)
        if probe:
            fd, name = tempfile.mkstemp(prefix=".probe.", dir=path)
            os.close(fd)
            os.unlink(name)
    except OSError as err:
        raise ConfigError(
            f"job records folder {path} is not writable ({err.strerror}); {fix}"
        ) from None
    return path


def record_key(spec: TransportSpec, job_id: str) -> str:
    """File stem of a job record: transport, host and id, so a local job and an SSH job
    (or two clusters) with the same id never share one (``local-HOST-ID``,
    ``ssh-HOST-PORT-ID``)."""
    check_job_id(job_id)
    if spec.kind == "local":
        where = ["local", socket.gethostname().split(".")[0]]
    else:  # a port left to the ssh config is not in the name
        where = ["ssh", spec.host or "", *([str(spec.port)] if spec.port else [])]
    safe = [re.sub(r"[^A-Za-z0-9_.-]", "_", w) for w in where]
    return "-".join([*safe, job_id])


_RECORD_KEYS = frozenset(
    {"job_id", "name", "site", "scheduler", "workdir", "transport", "log_names", "script_path"}
)
_LOG_NAME = re.compile(r"/?(?:[A-Za-z0-9_.,:@%+=-]{1,255}/){0,32}[A-Za-z0-9_.,:@%+=-]{1,255}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_RECORD_PATH = re.compile(r"[A-Za-z0-9_.,:@%+=/~ -]{1,4096}")


def check_record(data: Any) -> Submission:
    """A job record as ``status``/``cancel``/``logs`` may use it, or ConfigError naming the
    field. Every field is checked where it enters: the id, names, paths, the transport, and
    its environment, which may carry only the scheduler clients' ``conf_env`` (SLURM_CONF) set
    to an absolute path (:mod:`hpcenv.envpolicy`): a record never runs what it holds."""
    from hpcenv.envpolicy import EnvNotAllowed, check
    from hpcenv.jobs.schedulers import SCHEDULERS
    from hpcenv.jobs.shell import job_name

    def bad(field: str, why: str) -> ConfigError:
        return ConfigError(f"{field}: {why}")

    def path(field: str, value: Any, absolute: bool = True) -> None:
        if not isinstance(value, str) or not _RECORD_PATH.fullmatch(value):
            raise bad(field, "not a path hpcenv writes")
        if absolute and not value.startswith("/"):
            raise bad(field, "not an absolute path")

    if not isinstance(data, dict):
        raise bad("(top)", "not a JSON object")
    extra = set(data) - _RECORD_KEYS - {"array"}
    if extra:
        raise bad(sorted(extra)[0], "not a field of a job record")
    missing = _RECORD_KEYS - set(data)
    if missing:
        raise bad(sorted(missing)[0], "missing")
    for field in ("job_id", "name", "site", "scheduler"):
        if not isinstance(data[field], str):
            raise bad(field, "not a string")
    check_job_id(data["job_id"])
    job_name(data["name"])
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,63}", data["site"]):
        raise bad("site", f"not a site name: {data['site']!r}")
    if data["scheduler"] not in SCHEDULERS:
        raise bad("scheduler", f"not a scheduler hpcenv knows: {data['scheduler']!r}")
    path("workdir", data["workdir"])
    if data["script_path"] != "":  # "": no copy of the script kept
        path("script_path", data["script_path"])
    logs = data["log_names"]
    if not isinstance(logs, list) or len(logs) != 2:
        raise bad("log_names", "not a pair of file names")
    for log in logs:
        if log is not None and not (
            isinstance(log, str)
            and _LOG_NAME.fullmatch(log)
            and not {".", ".."} & set(log.split("/"))
        ):
            raise bad("log_names", f"not a log file name: {log!r}")
    array = data.get("array")
    if array is not None and (type(array) is not int or not 1 <= array <= 100000):
        raise bad("array", "not a task count")
    t = data["transport"]
    if not isinstance(t, dict):
        raise bad("transport", "not an object")
    try:
        spec = TransportSpec.model_validate(t, strict=True)
    except ValueError as err:  # pydantic's ValidationError: name the field that failed
        first = err.errors()[0] if hasattr(err, "errors") else {}
        where = ".".join(["transport", *(str(p) for p in first.get("loc", ()))])
        why = str(first.get("msg", "")).removeprefix("Value error, ")
        raise bad(where, why or str(err).splitlines()[0]) from None
    if spec.host is not None and not _HOST.fullmatch(spec.host):
        raise bad("transport.host", f"not a host name: {spec.host!r}")
    if spec.user is not None and not _USER.fullmatch(spec.user):
        raise bad("transport.user", f"not a user name: {spec.user!r}")
    if spec.port is not None and not 1 <= spec.port <= 65535:
        raise bad("transport.port", f"not a port: {spec.port}")
    if not 0 < spec.connect_timeout <= 600:
        raise bad("transport.connect_timeout", "not a timeout in seconds")
    for field in ("key_file", "known_hosts", "ssh_config"):
        value = getattr(spec, field)
        if value is not None:
            path(f"transport.{field}", value, absolute=False)
    if spec.ssh_config is not None:  # ssh -F runs its ProxyCommand, LocalCommand, Match exec
        problem = _ssh_config_problem(spec.ssh_config)
        if problem is not None:
            raise bad(
                "transport.ssh_config",
                f"{spec.ssh_config}: {problem} (ssh runs the commands an ssh config names; "
                "hpcenv uses only one you or root own and nobody else may change)",
            )
    allowed = {c.conf_env for c in SCHEDULERS.values() if c.conf_env}
    try:
        check(spec.env, "record", "transport.env", allowed=allowed)
    except EnvNotAllowed as err:
        raise bad("transport.env", str(err).split(": ", 1)[1]) from None
    for name, value in spec.env.items():
        path(f"transport.env.{name}", value)
        if not _trusted_client_conf(value, data["site"], local=spec.kind == "local"):
            raise bad(
                f"transport.env.{name}",
                f"{value} is neither site {data['site']}'s scheduler.conf nor a file only root "
                "or you can change (a client configuration can load plugins: it runs code)",
            )
    return Submission.from_dict(data)


def _trusted_client_conf(value: str, site_name: str, *, local: bool) -> bool:
    """A record's client configuration (SLURM_CONF) as submit wrote it: the named site's own
    ``scheduler.conf``, or, for a local transport, a regular file owned by root or this user
    that nobody else may write. slurm.conf names plugin folders and ``Include`` files, so a
    record must not point ``status`` at a configuration someone else wrote."""
    from hpcenv.site import load_site

    try:
        if load_site(site_name).scheduler.conf == value:
            return True
    except ConfigError:
        pass
    if not local:
        return False
    return _client_file_problem(value) is None


def _client_file_problem(value: str) -> str | None:
    """Why a client configuration named in a record (SLURM_CONF, ``ssh -F``) must not be used:
    :func:`hpcenv.reads.trust_problem` with root allowed (a site installs them), for the file
    the client will open (a link is followed, as the client follows it, and the target checked)."""
    try:
        info = os.stat(value)
    except OSError as err:
        return f"it cannot be read ({err.strerror or err})"
    return trust_problem(info, root_ok=True)


def _ssh_config_problem(value: str) -> str | None:
    """:func:`_client_file_problem` for a record's ``transport.ssh_config`` as ``ssh -F`` gets
    it (``~`` expanded); ``/dev/null``, the usual "no configuration", holds none."""
    expanded = os.path.expanduser(value)
    if expanded == os.devnull:
        return None
    return _client_file_problem(expanded)


def _read_record(path: Path) -> Submission:
    try:  # size and nesting bounded before anything uses it (hpcenv.reads.load_json)
        data = load_json(path, what="a job record", own=True)
    except NotYours:
        raise  # another user's file, or one others may change: its own line
    except ConfigError as err:
        raise ConfigError(
            f"job record is unreadable: {err}; delete it, or pass --site to ask the scheduler "
            "directly"
        ) from None
    try:
        return check_record(data)
    except ConfigError as err:
        raise ConfigError(
            f"job record {path} is unreadable ({printable(str(err))}; not as hpcenv wrote it, "
            "refused); delete it, or pass --site to ask the scheduler directly"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        why = str(err).splitlines()[0] if str(err).strip() else ""
        raise ConfigError(
            f"job record {path} is unreadable ({type(err).__name__}: {printable(why)[:200]}); "
            "delete it, or pass --site to ask the scheduler directly"
        ) from None


def load_records(job_id: str) -> list[Submission]:
    """Every record of ``job_id`` (array tasks ``ID_N`` find ``ID``), any transport."""
    check_job_id(job_id)
    found: list[Submission] = []
    for name in dict.fromkeys((job_id, job_id.split("_")[0])):
        for path in sorted(records_dir().glob(f"*-{glob.escape(name)}.json")):
            sub = _read_record(path)
            if sub.job_id == name:
                found.append(sub)
        if found:
            break
    return found


def all_records() -> list[tuple[Path, Submission | ConfigError]]:
    """Every job record here, oldest first (by when it was written), any transport; one that
    cannot be read is its ConfigError line, so a listing shows it instead of failing."""
    paths = sorted(records_dir().glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    found: list[tuple[Path, Submission | ConfigError]] = []
    for path in paths:
        try:
            found.append((path, _read_record(path)))
        except ConfigError as err:
            found.append((path, err))
    return found


def load_record(job_id: str, where: str | None = None) -> Submission | None:
    """The record of ``job_id``; ``where`` (``local`` or an SSH host) picks one when jobs on
    several transports share the id."""
    subs = load_records(job_id)
    if where:
        subs = [s for s in subs if where in (s.transport.kind, s.transport.host)]
    if len(subs) > 1:
        places = ", ".join(_place(s) for s in subs)
        raise ConfigError(
            f"job {job_id} was submitted to more than one place ({places}); "
            "pass --on local or --on HOST"
        )
    return subs[0] if subs else None


def _place(sub: Submission) -> str:
    t = sub.transport
    return "local" if t.kind == "local" else f"{t.host}" + (f":{t.port}" if t.port else "")


def submit(
    site: Site,
    job: JobSpec,
    transport: Transport,
    *,
    image: str | None = None,
    after: list[str] | None = None,
    rendered: RenderedJob | None = None,
    attempts: int = SUBMIT_ATTEMPTS,
    retry_wait: float = 2.0,
) -> Submission:
    """Render (unless given) and submit ``job``; ``after``: job ids that must succeed first.

    A lost connection is retried (``attempts`` in all) only where it cannot submit twice: the
    job carries a fresh submit token (Slurm: its comment), and ``submit.sh`` checks for a job
    with that token under a lock in the workdir before it calls ``sbatch``, so a retry finds
    the first submission instead of making a second one.
    """
    rendered = rendered or prepare(site, job, image, submitting=True)
    try:  # everything that can fail here is checked before anything is queued
        records = records_dir(probe=True)
    except ConfigError as err:
        raise ConfigError(f"{err}; nothing was submitted") from None
    scheduler = rendered.scheduler
    after = list(after or [])
    token = f"hpcenv-{uuid.uuid4().hex[:16]}"
    tagged = scheduler.tagged_submit(after, token)
    if tagged is None:
        find: list[str] = []
        argv, tries, token_arg = scheduler.submit_argv(after), 1, ""
    else:
        argv, find = tagged
        tries, token_arg = max(1, attempts), token
    args = [expanding(rendered.workdir), token_arg, str(len(find)), *find, *argv]
    # From the call that may queue the job until its record is written, Ctrl-C is held: a job
    # the scheduler queued is never left without its id shown and its record (issue 40).
    try:
        with deferred_interrupt() as interrupted:
            result = _call_scheduler(
                transport, rendered, args, tries, retry_wait, token_arg, interrupted
            )
            sub = _record(site, job, transport, rendered, records, result, after)
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, as the first one's note said
        look = f": look for a job with comment {token_arg}" if token_arg else ""
        raise SubmitInterrupted(
            f"stopped while submitting; {scheduler.name} may have queued the job without hpcenv "
            f"recording it{look}"
        ) from None
    if interrupted.seen:
        raise SubmitInterrupted(
            f"interrupted, after {scheduler.name} queued job {sub.job_id} ({sub.name}): it is "
            f"recorded; hpcenv status {sub.job_id} follows it, hpcenv cancel {sub.job_id} "
            "cancels it"
        )
    return sub


class SubmitInterrupted(JobError):
    """Ctrl-C while submitting, held until the job's id and record were safe; exit 130."""

    exit_code = 130


def _call_scheduler(
    transport: Transport,
    rendered: RenderedJob,
    args: list[str],
    tries: int,
    retry_wait: float,
    token: str,
    interrupted: Deferred,
) -> Completed:
    """``submit.sh`` with ``args`` on ``transport``, ``tries`` times while the connection drops
    (and no Ctrl-C came); a connection never made is not retried: nothing was sent. ``token``:
    the job's submit token ("" when the scheduler takes none)."""
    for attempt in range(1, tries + 1):
        try:
            return run_host_script(
                transport,
                SUBMIT_SCRIPT,
                args,
                prelude=rendered.prelude_line() + log_folders_line(rendered),
                stdin=rendered.script,
            )
        except NotConnected as err:
            raise NotConnected(f"{err}; nothing was submitted") from err
        except TransportError as err:
            if attempt == tries or interrupted.seen:
                where = (
                    f"; it may have been submitted: look for a job with comment {token}"
                    if token
                    else "; it may have been submitted"
                )
                raise TransportError(f"{err} (after {attempt} attempt(s)){where}") from err
            time.sleep(retry_wait * attempt)
    raise AssertionError("unreachable: tries >= 1")


def _record(
    site: Site,
    job: JobSpec,
    transport: Transport,
    rendered: RenderedJob,
    records: Path,
    result: Completed,
    after: list[str],
) -> Submission:
    """The job id from ``submit.sh``'s reply, and its record written (mode 0600)."""
    scheduler = rendered.scheduler
    workdir, existing, lines = parse_submit_reply(result.stdout, rendered.workdir)
    if existing is not None:
        job_id = check_job_id(existing)
    else:
        done = Completed(result.returncode, "\n".join(lines), result.stderr)
        _missing_command(done, scheduler.submit_argv(after)[0], site, transport)
        job_id = scheduler.parse_job_id(done)
    key = record_key(transport.spec, job_id)
    script_path = records / f"{key}.sh"
    sub = Submission(
        job_id=job_id,
        name=job.name,
        site=site.name,
        scheduler=scheduler.name,
        workdir=workdir,
        transport=transport.spec,
        log_names=rendered.log_names,
        script_path=str(script_path),
        array=job.array.count if job.array else None,
    )
    try:
        write_private(script_path, rendered.script)
        write_private(records / f"{key}.json", json.dumps(sub.to_dict(), indent=2) + "\n")
    except OSError as err:
        raise JobError(
            f"job {job_id} was submitted, but its record could not be written in {records} "
            f"({err.strerror}); do not submit it again: follow it with "
            f"hpcenv status {job_id} --site {site.name}"
        ) from None
    return sub


def parse_submit_reply(stdout: str, workdir: str) -> tuple[str, str | None, list[str]]:
    """What ``submit.sh`` printed (possibly over SSH, from a host hpcenv does not control): the
    workdir it entered (``HPCENV_WORKDIR=``, else ``workdir``), the id of a job that already
    carried the token (``HPCENV_SUBMITTED_BEFORE=``), and the other lines (the submit
    command's reply). A mark with no usable value (an empty or relative workdir, one a job
    record could not hold, an id that is not one) is a JobError naming it, never a record."""
    lines: list[str] = []
    existing = None
    for line in stdout.splitlines():
        if line.startswith(_WORKDIR_MARK):
            workdir = line[len(_WORKDIR_MARK) :]
            if not (workdir.startswith("/") and _RECORD_PATH.fullmatch(workdir)):
                raise JobError(
                    f"the submit host printed an unusable workdir {printable(workdir)[:200]!r}; "
                    "nothing was recorded (was the job submitted? check the scheduler's queue)"
                )
        elif line.startswith(_EXISTING_MARK):
            words = line[len(_EXISTING_MARK) :].split()
            try:
                existing = check_job_id(words[0] if words else "")
            except ConfigError:
                raise JobError(
                    f"the submit host named an earlier job that is not a job id: "
                    f"{printable(line)[:200]!r}; nothing was recorded"
                ) from None
        else:
            lines.append(line)
    return workdir, existing, lines


def submit_chain(
    site: Site, jobs: list[JobSpec], transport: Transport, *, image: str | None = None
) -> list[Submission]:
    """Submit jobs so each starts only after the previous one succeeded (afterok)."""
    subs: list[Submission] = []
    for job in jobs:
        after = [subs[-1].job_id] if subs else []
        subs.append(submit(site, job, transport, image=image, after=after))
    return subs


def _missing_command(done: Completed, command: str, site: Site, transport: Transport) -> None:
    """A submit command the host lacks: say where the site's jobs can be submitted from."""
    if done.returncode != 127 and "command not found" not in done.stderr:
        return
    raise JobError(missing_message(command, site, transport))


def missing_message(
    command: str, site: Site | None, transport: Transport, verb: str = "submit"
) -> str:
    """The one line for a scheduler command this host lacks (``submit``, and ``status``,
    ``cancel``, ``logs`` and ``--wait``: ``verb``): where the site's jobs can be reached from."""
    here = "this host" if transport.describe() == "local" else transport.describe()
    if site is None:
        return f"{command} is not on {here}: run hpcenv {verb} where the job was submitted"
    where = [f"from a login node of {site.name}"]
    if site.scheduler.login_host:
        where[0] += f" ({site.scheduler.login_host})"
    if site.ssh:
        ssh = f"over SSH with --transport ssh (site ssh: {site.ssh.host})"
    else:
        ssh = "over SSH with --transport ssh --ssh-host LOGIN_NODE"
    head = f"{command} is not on {here}: {site.name} takes jobs through {site.scheduler.kind}; "
    if verb == "submit":
        return head + f"submit {where[0]} or {ssh}"
    return head + (
        f"run hpcenv {verb} {where[0]}, or submit {ssh} so that status, cancel and logs "
        "follow the job there"
    )


class _Hinted(Transport):
    """``inner``, where a command the host lacks (exit 127, its name in the shell's message)
    is :func:`missing_message`'s line instead of the shell's ``bash: scontrol: command not
    found``."""

    def __init__(self, inner: Transport, site: str, verb: str) -> None:
        self.inner, self.spec, self.site, self.verb = inner, inner.spec, site, verb

    def run(self, command: str, stdin: str | None = None, timeout: float = 120) -> Completed:
        done = self.inner.run(command, stdin, timeout)
        name = command.split(maxsplit=1)[0] if command.strip() else ""
        if done.returncode == 127 and name and f"{name}: " in done.stderr:
            raise JobError(missing_message(name, _site_or_none(self.site), self.inner, self.verb))
        return done

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


def _site_or_none(name: str) -> Site | None:
    from hpcenv.errors import HpcenvError
    from hpcenv.site import load_site

    try:
        return load_site(name)
    except HpcenvError:  # a site file that is not here any more: the hint without it
        return None


def status(sub: Submission, transport: Transport, verb: str = "status") -> JobStatus:
    return get_scheduler(sub.scheduler).status(_Hinted(transport, sub.site, verb), sub.job_id)


def wait(
    sub: Submission,
    transport: Transport,
    *,
    timeout: float | None = 300,
    poll: float = 0.25,
    blocked_after: float | None = 3.0,
    check: bool = True,
    max_poll: float | None = None,
    on_change: Callable[[JobStatus], None] | None = None,
    ended: Callable[[], bool] | None = None,
) -> JobStatus:
    """Poll until the job finishes; JobError (scheduler's words + stderr tail) if it failed.

    The interval starts at ``poll`` and grows by half each time up to ``max_poll`` (a
    scheduler-friendly 30 s for ``submit --wait``; None keeps ``poll``). ``on_change`` is
    called with each status whose state or reason differs from the last one seen.

    ``ended`` (hpcenv.jobs.ended.EndSignal) is looked at every :data:`END_LOOK` seconds while
    waiting: when it says the job's script has just ended, the scheduler is asked at once and
    the interval starts again from ``poll`` (the scheduler may take a moment to record it).

    ``blocked_after``: a pending job whose reason means it cannot start (down/drained node,
    bad constraint, never-satisfied dependency) for this many seconds is reported instead of
    waited on (a short grace: Slurm keeps a stale reason until its next scheduling pass).
    ``None`` waits regardless. ``timeout`` None: as long as the job lives.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    blocked_since: float | None = None
    seen: tuple[str, str | None] | None = None
    interval = poll
    while True:
        st = status(sub, transport, "status --wait")
        if on_change is not None and (st.state, st.reason) != seen:
            seen = (st.state, st.reason)
            on_change(st)
        if st.finished:
            if check and st.phase == "failed":
                raise JobError(_failure(st, sub, transport))
            return st
        now = time.monotonic()
        if not st.blocked:
            blocked_since = None
        elif blocked_since is None:
            blocked_since = now
        elif blocked_after is not None and now - blocked_since >= blocked_after:
            raise JobError(f"job cannot start: {st.message()}")
        if deadline is not None and time.monotonic() > deadline:
            raise JobError(
                f"timed out after {timeout:.0f} s waiting (the job was left as it is): "
                f"{st.message()}"
            )
        left = interval if deadline is None else max(0.0, deadline - time.monotonic()) + 0.05
        if _nap(min(interval, left), ended):
            interval = poll
        elif max_poll is not None:
            interval = min(interval * 1.5, max_poll)


END_LOOK = 0.5  # seconds between looks at a job's end marker while waiting (a stat, no query)


def _nap(seconds: float, ended: Callable[[], bool] | None) -> bool:
    """Sleep ``seconds``, cut short when ``ended`` says the job's script ended (True)."""
    if ended is None:
        time.sleep(seconds)
        return False
    stop = time.monotonic() + seconds
    while (left := stop - time.monotonic()) > 0:
        time.sleep(min(END_LOOK, left))
        if ended():
            return True
    return False


def _failure(st: JobStatus, sub: Submission, transport: Transport) -> str:
    msg = st.message()
    tail = _stderr_tail(st, sub, transport)
    return f"{msg}; stderr: {tail}" if tail else msg


def _stderr_tail(st: JobStatus, sub: Submission, transport: Transport, lines: int = 3) -> str:
    paths = [t.stderr for t in (st.tasks or [st]) if t.phase == "failed" and t.stderr]
    if not paths and st.stderr:
        paths = [st.stderr]
    if not paths:
        paths = [p for p in log_paths(sub, st)[1:] if p]
    for path in paths[:1]:
        result = transport.run(join(["tail", "-n", str(lines), path]))
        if result.returncode == 0 and result.stdout.strip():
            return " | ".join(result.stdout.strip().splitlines())
    return ""


def log_paths(sub: Submission, st: JobStatus | None = None) -> list[str]:
    """stdout/stderr files: from the scheduler when it says, else from the record's names."""
    if st is not None:
        found = [p for t in (st.tasks or [st]) for p in (t.stdout, t.stderr) if p]
        if found:
            return list(dict.fromkeys(found))
    files = get_scheduler(sub.scheduler).log_files(sub.name, sub.job_id, sub.log_names)
    return [name if name.startswith("/") else f"{sub.workdir}/{name}" for name in files]


def logs(sub: Submission, transport: Transport) -> str:
    """The job's stdout and stderr files, each under a ``==> path <==`` header."""
    try:
        st: JobStatus | None = status(sub, transport, "logs")
    except JobError:
        if not sub.workdir:  # no record (logs --site): only the scheduler can name the files
            raise
        st = None
    paths = log_paths(sub, st)
    if not paths:
        raise JobError(f"no log files known for job {sub.job_id}")
    result = run_host_script(transport, LOGS_SCRIPT, [_only_star(p) for p in paths])
    if result.returncode != 0:
        raise JobError(f"cannot read logs of {sub.job_id}: {result.message()}")
    if not result.stdout:  # logs.sh prints a header for every file it finds, an empty one too
        raise JobError(
            f"no log file of job {sub.job_id} is there (not written yet, or removed): "
            + ", ".join(paths)
        )
    return result.stdout


def _only_star(path: str) -> str:
    """``path`` as a logs.sh pattern in which only ``*`` (an array's task logs) matches other
    names: ``?``, ``[`` and backslashes become bracket expressions that match themselves."""
    return "".join({"?": "[?]", "[": "[[]", "\\": "[\\\\]"}.get(c, c) for c in path)


def cancel(sub: Submission, transport: Transport) -> None:
    get_scheduler(sub.scheduler).cancel(_Hinted(transport, sub.site, "cancel"), sub.job_id)


def transport_for(sub: Submission) -> Transport:
    return make_transport(sub.transport)
