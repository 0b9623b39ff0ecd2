"""Queue and partition limits: a job the site's queue would reject is refused or routed here.

The limits are site data (``scheduler.queue_limits``, each with its source in
``docs/sites/NAME.md``): node counts, shortest and longest walltime, and walltime bins by node
count (OLCF). A job whose queue (or QOS) was given by the user and does not take it is refused
with the ones that would; a job on the site's default that does not fit goes to the first
routable one that takes it, and the plan says so in one line. Checked at render, before
``sbatch``/``qsub``/``bsub`` would reject the job.
"""

from __future__ import annotations

from hpcenv.errors import ConfigError, did_you_mean
from hpcenv.jobs.spec import JobSpec
from hpcenv.safe import walltime_seconds
from hpcenv.site import Site
from hpcenv.site.model import QueueLimits


def _time(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def misfit(limits: QueueLimits, nodes: int, seconds: int) -> str | None:
    """Why a job of ``nodes`` nodes and ``seconds`` does not fit ``limits`` (None: it fits)."""
    if limits.nodes and not limits.nodes[0] <= nodes <= limits.nodes[1]:
        return f"takes {limits.nodes[0]}-{limits.nodes[1]} node(s), {nodes} asked"
    if limits.walltime:
        low, high = (walltime_seconds(t) for t in limits.walltime)
        if not low <= seconds <= high:
            return f"takes {_time(low)} to {_time(high)}, {_time(seconds)} asked"
    if limits.bins:
        hit = next((b for b in limits.bins if b.nodes[0] <= nodes <= b.nodes[1]), None)
        if hit is None:
            return f"has no bin for {nodes} node(s)"
        most = walltime_seconds(hit.max_walltime)
        if seconds > most:
            return (
                f"takes at most {_time(most)} for {hit.nodes[0]}-{hit.nodes[1]} nodes, "
                f"{_time(seconds)} asked"
            )
    return None


_OPTION = {"queue": "-p/--partition", "qos": "-q/--qos"}
_WORD = {"queue": "partition", "qos": "QOS"}


def check_names(site: Site, job: JobSpec) -> None:
    """The user's partition and QOS are names the site documents (``scheduler.queue_limits``
    and its defaults), of that kind: ``-p debug`` where debug is a QOS is refused with the
    option that takes it, an unknown name with the site's names. A site that documents no
    name of a kind takes any (nothing to check against)."""
    limits = site.scheduler.queue_limits
    for kind, given, default in (
        ("queue", job.queue, site.scheduler.queue),
        ("qos", job.qos, site.scheduler.qos),
    ):
        if given is None:
            continue
        other = "qos" if kind == "queue" else "queue"
        lim = limits.get(given)
        if lim is not None and lim.selects == kind:
            continue
        if lim is not None:
            raise ConfigError(
                f"{_OPTION[kind]} {given}: {given!r} is a {_WORD[other]} on site "
                f"{site.name!r}, not a {_WORD[kind]}: give {_OPTION[other]} {given} "
                "(scheduler.queue_limits)"
            )
        known = [n for n, q in limits.items() if q.selects == kind]
        if not known:
            continue  # the site documents none of this kind
        if default and default not in known:
            known.insert(0, default)
        raise ConfigError(
            f"{_OPTION[kind]} {given}: site {site.name!r} has no {_WORD[kind]} {given!r}"
            f"{did_you_mean(given, known)}; its {_WORD[kind]}s: {', '.join(known)} "
            "(scheduler.queue_limits: add a documented one to the site file)"
        )


def _most_nodes(limits: dict[str, QueueLimits], kind: str) -> int | None:
    """The most nodes any documented queue (or QOS) of ``kind`` takes; None when one of them
    has no node limit written (then no count is known to be too many)."""
    bounds = [q.nodes for q in limits.values() if q.selects == kind]
    if not bounds or any(b is None for b in bounds):
        return None
    return max(b[1] for b in bounds if b is not None)


def route(site: Site, job: JobSpec) -> tuple[JobSpec, str | None]:
    """``job`` with the queue (or QOS) that takes it, and the line saying it was routed; a
    ConfigError when the queue was the user's, or none takes the job, or the user's name is
    not one the site has (:func:`check_names`)."""
    check_names(site, job)
    limits = site.scheduler.queue_limits
    if not limits:
        return job, None
    seconds = walltime_seconds(job.walltime or site.scheduler.walltime)
    note = None
    for kind, given, default in (
        ("queue", job.queue, site.scheduler.queue),
        ("qos", job.qos, site.scheduler.qos),
    ):
        name = given or default
        lim = limits.get(name or "")
        if name is None or lim is None or lim.selects != kind:
            continue
        why = misfit(lim, job.nodes, seconds)
        if why is None:
            continue
        fits = [
            n
            for n, q in limits.items()
            if q.selects == kind and q.route and misfit(q, job.nodes, seconds) is None
        ]
        option = "--queue" if kind == "queue" else "--qos"
        where = f"{kind} {name!r} on site {site.name!r}"
        most = _most_nodes(limits, kind)
        if most is not None and job.nodes > most:
            raise ConfigError(
                f"-N/--nodes {job.nodes}: no {kind} on site {site.name!r} takes more than "
                f"{most} node(s): ask for fewer nodes (scheduler.queue_limits)"
            )
        if not fits:
            raise ConfigError(
                f"{where} {why}, and no other documented {kind} takes {job.nodes} node(s) for "
                f"{_time(seconds)}: ask for fewer nodes or less time (scheduler.queue_limits)"
            )
        if given:
            raise ConfigError(
                f"{where} {why}: give {option} ({', '.join(fits)}), another node count or "
                "-t/--time (scheduler.queue_limits)"
            )
        job = job.model_copy(update={kind: fits[0]})
        note = f"{where} {why}: routed to {kind} {fits[0]!r} (scheduler.queue_limits)"
    return job, note
