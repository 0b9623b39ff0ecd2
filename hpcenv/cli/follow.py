"""``hpcenv status|cancel|logs``: follow submitted jobs (one service call each, issue 18).

``status`` without an id lists the jobs hpcenv submitted from here (its job records, every
transport) with their state from the scheduler; ``status ID --wait`` waits while the job lives
(``submit --wait`` too): each change of state or reason goes to stderr with the time waited,
and Ctrl-C stops waiting and leaves the job as it is, saying so (exit 130).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from hpcenv.cli.options import JsonOpt, positive_seconds

if TYPE_CHECKING:
    from hpcenv.jobs.service import JobRow
    from hpcenv.jobs.status import JobStatus

OnOpt = Annotated[
    str | None,
    typer.Option("--on", help="local or the SSH host, when jobs in several places share the id"),
]
JobSiteOpt = Annotated[
    str | None,
    typer.Option("--site", "-s", help="for a job with no record here; listing: this site's jobs"),
]
WaitTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="give up waiting after this many seconds (default: wait as long as the job lives)",
        callback=positive_seconds,
    ),
]


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def watcher() -> Callable[[JobStatus], None]:
    """``on_change`` for a wait: ``12:00:03 (+1m20s) job 7: PENDING reason=Priority`` on
    stderr; a reason that needs someone to act says the job stays queued and what to do."""
    import datetime

    from hpcenv.printable import printable

    started = time.monotonic()

    def show(st: JobStatus) -> None:
        now = datetime.datetime.now().strftime("%H:%M:%S")
        line = f"{now} (+{_elapsed(time.monotonic() - started)}) {st.message()}"
        if st.blocked:
            line += (
                " (cannot start until the site or you act; it stays queued and hpcenv keeps "
                f"waiting: Ctrl-C stops waiting, hpcenv cancel {st.job_id} removes it)"
            )
        typer.echo(printable(line), err=True)

    return show


def stopped(err: Exception) -> typer.Exit:
    """A Ctrl-C while waiting: its line (the job was left as it is), and exit 130."""
    typer.echo(str(err), err=True)
    return typer.Exit(130)


def _table(rows: list[JobRow]) -> str:
    from hpcenv.printable import printable

    head = ("JOB", "SITE", "VIA", "NAME", "STATE", "DETAIL")
    lines: list[tuple[str, ...]] = [head]
    for r in rows:
        sub, st = r.submission, r.status
        if sub is None:
            lines.append(("?", "?", "?", "?", "UNREADABLE", r.error or ""))
            continue
        t = sub.transport
        via = "local" if t.kind == "local" else (t.host or "?")
        state = st.state if st else "?"
        detail = r.error or ""
        if st is not None:
            detail = " ".join(
                x
                for x in (
                    f"exit={st.exit_code}" if st.finished and st.exit_code else "",
                    f"reason={st.reason}"
                    if st.reason and st.reason not in ("None", "(null)")
                    else "",
                )
                if x
            )
        lines.append((sub.job_id, sub.site, via, sub.name, state, detail))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    out = []
    for line in lines:
        cells = [c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)]
        out.append(printable("  ".join([*cells, line[-1]]).rstrip()))
    return "\n".join(out) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status_cmd(
        job_id: Annotated[
            str | None, typer.Argument(help="a job id; none: list the jobs submitted from here")
        ] = None,
        site: JobSiteOpt = None,
        as_json: JsonOpt = False,
        on: OnOpt = None,
        wait: Annotated[
            bool,
            typer.Option("--wait", help="wait while the job lives; exit 2 if it failed"),
        ] = False,
        timeout: WaitTimeoutOpt = None,
        limit: Annotated[
            int,
            typer.Option("--limit", min=0, help="without an id: the newest N jobs (0: all)"),
        ] = 20,
    ) -> None:
        """Show a job's state in the scheduler's own words, or list the jobs submitted here."""
        from hpcenv.errors import ConfigError
        from hpcenv.jobs.service import WaitInterrupted, job_status, list_jobs, wait_job

        if job_id is None:
            if wait or timeout is not None:
                raise ConfigError("--wait and --timeout follow one job: give its id")
            rows = list_jobs(site, on, limit)
            if as_json:
                typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
            elif rows:
                typer.echo(_table(rows), nl=False)
            else:
                typer.echo("no jobs submitted from here (hpcenv keeps a record of each)", err=True)
            return
        if timeout is not None and not wait:
            raise ConfigError("--timeout is for --wait")
        if wait:
            try:
                st = wait_job(job_id, site, on, timeout, on_change=watcher())
            except WaitInterrupted as err:
                raise stopped(err) from None
        else:
            st = job_status(job_id, site, on)
        if as_json:
            typer.echo(json.dumps(st.to_dict(), indent=2))
            return
        typer.echo(st.message())
        for task in st.tasks:
            typer.echo(f"  {task.message()}")

    @app.command("cancel")
    def cancel_cmd(
        job_id: str, site: JobSiteOpt = None, on: OnOpt = None, as_json: JsonOpt = False
    ) -> None:
        """Cancel a job."""
        from hpcenv.jobs.service import cancel_job

        cancel_job(job_id, site, on)
        if as_json:
            typer.echo(json.dumps({"job_id": job_id, "cancelled": True}, indent=2))
        else:
            typer.echo(f"cancelled {job_id}")

    @app.command("logs")
    def logs_cmd(
        job_id: str,
        site: JobSiteOpt = None,
        on: OnOpt = None,
        as_json: JsonOpt = False,
        follow: Annotated[
            bool,
            typer.Option("--follow", "-f", help="print the logs as they grow, until the job ends"),
        ] = False,
    ) -> None:
        """Print a job's stdout and stderr files."""
        if follow:
            _follow_logs(job_id, site, on, as_json)
        elif as_json:
            from hpcenv.jobs.logtail import job_chunks

            files = [c.to_dict() for c in job_chunks(job_id, site, on)]
            typer.echo(json.dumps({"job_id": job_id, "files": files}, indent=2))
        else:  # streamed in pieces, escapes shown (hpcenv.jobs.logtail.printer)
            import sys

            from hpcenv.jobs.logtail import print_job_logs, printer

            print_job_logs(job_id, printer(sys.stdout.write), site, on)


def _follow_logs(job_id: str, site: str | None, on: str | None, as_json: bool) -> None:
    """``logs --follow``: the files as they grow (:mod:`hpcenv.jobs.logtail`), then the job's
    final state on stderr; Ctrl-C leaves the job as it is (exit 130)."""
    import sys

    from hpcenv.errors import ConfigError, JobError
    from hpcenv.jobs.logtail import follow_job, printer
    from hpcenv.jobs.service import WaitInterrupted
    from hpcenv.printable import printable

    if as_json:
        raise ConfigError("--follow prints the logs as they grow; --json is for the whole files")

    def out(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        st = follow_job(job_id, printer(out), site, on)
    except WaitInterrupted as err:
        raise stopped(err) from None
    if st.phase == "failed":  # as status --wait: exit 2 with the scheduler's words
        raise JobError(st.message())
    typer.echo(printable(st.message()), err=True)
