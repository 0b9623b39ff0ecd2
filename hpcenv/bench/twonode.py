"""Two-node row: allreduce bus bandwidth across the ``local-2node`` rehearsal's two nodes vs
within one of them, in the same run.

Both jobs are real Slurm jobs on the rehearsal cluster (scripts/slurm-2node-up.sh; started here
when it is not running, and stopped again), with the image's own ``allreduce_mpi.py`` check in
podman per rank, exactly as ``hpcenv submit --site local-2node`` runs them: 2 ranks on node1 and
node2 (Open MPI TCP over the veth link) and 2 ranks on node1 alone (shared memory). The ratio is
what leaving the node costs on this machine; both "nodes" share the same 2 cores and memory, so
it is the cost of the network path, not of a second machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpcenv.bench.context import BenchContext, MiB
from hpcenv.bench.report import Headline, Section, Table, fmt_bytes, fmt_num, fmt_ratio, ratio
from hpcenv.errors import EnvironmentProblem
from hpcenv.paths import package_dir

SITE = "local-2node"
CHECK = "/opt/hpcenv/checks/allreduce_mpi.py"
LAYOUTS = {"across": (2, 1), "within": (1, 2)}  # name -> (nodes, ranks per node)


def _scripts() -> Path:
    for root in (package_dir().parent, Path.cwd()):
        if (root / "scripts" / "slurm-2node-up.sh").is_file():
            return root / "scripts"
    raise EnvironmentProblem("scripts/slurm-2node-up.sh not found (run from the hpcenv checkout)")


def _result(log: str) -> dict[str, Any]:
    for line in reversed(log.splitlines()):
        if line.startswith("{") and '"allreduce_mpi"' in line:
            doc: dict[str, Any] = json.loads(line)
            return doc
    raise EnvironmentProblem(f"no allreduce_mpi result in the job log: {log[-500:]}")


@contextmanager
def rehearsal_cluster() -> Iterator[tuple[Any, Any]]:
    """The ``local-2node`` cluster up (scripts/slurm-2node-up.sh; stopped again afterwards if
    this started it): its site and a transport to its Slurm."""
    from hpcenv.jobs import LocalTransport
    from hpcenv.jobs.schedulers import client_env
    from hpcenv.site import load_site

    scripts = _scripts()
    state = Path("/var/tmp/hpcenv-services/slurm-2node")
    was_up = (state / "slurmctld.pid").is_file()
    up = subprocess.run(
        ["bash", str(scripts / "slurm-2node-up.sh")],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=180,
    )
    if up.returncode != 0:
        raise EnvironmentProblem(f"slurm-2node-up.sh: {up.stderr.strip() or up.stdout.strip()}")
    site = load_site(SITE)
    try:
        yield site, LocalTransport(client_env(site))
    finally:
        if not was_up:
            subprocess.run(
                ["bash", str(scripts / "slurm-2node-down.sh")], capture_output=True, timeout=180
            )


def shared_folder(site: Any, name: str) -> Path:
    """A folder on the cluster's shared scratch (each node has its own /tmp, where the bench
    output may be)."""
    from hpcenv.jobs.render import default_workdir

    path = Path(os.path.expandvars(default_workdir(site))) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def two_node_section(ctx: BenchContext) -> Section:
    from hpcenv.jobs import JobSpec, logs, submit, wait

    sec = Section(
        "two-node", "Two nodes (local-2node rehearsal): allreduce across vs within a node"
    )
    top = 4 * MiB if ctx.quick else 64 * MiB
    docs: dict[str, dict[str, Any]] = {}
    with rehearsal_cluster() as (site, transport):
        workdir = shared_folder(site, "bench-two-node")
        for name, (nodes, rpn) in LAYOUTS.items():
            job = JobSpec(
                name=f"bench-{name}",
                command=[
                    "/opt/venv/bin/python3",
                    CHECK,
                    "--max-bytes",
                    str(top),
                    "--factor",
                    "16",
                    "--max-iters",
                    "200",
                ],
                nodes=nodes,
                ranks_per_node=rpn,
                image=ctx.image,
                workdir=str(workdir),
            )
            sub = submit(site, job, transport)
            wait(sub, transport, timeout=900)
            docs[name] = _result(logs(sub, transport))
            hosts = sorted({d["platform"]["hostname"] for d in [docs[name]]})
            ctx.echo(f"[two-node] {name}: {nodes} node(s) x {rpn} ranks (rank 0 on {hosts[0]})")
    across = {r["bytes"]: r for r in docs["across"]["sweep"]}
    within = {r["bytes"]: r for r in docs["within"]["sweep"]}
    rows = []
    for size in sorted(set(across) & set(within)):
        a, w = across[size]["busbw_GBps"], within[size]["busbw_GBps"]
        rows.append([fmt_bytes(size), fmt_num(a), fmt_num(w), fmt_ratio(ratio(a, w))])
    sec.tables.append(
        Table(
            "allreduce busbw (GB/s), mpi4py in the image, 2 ranks",
            ["size", "across node1+node2 (TCP, veth)", "within node1 (shm)", "across / within"],
            rows,
        )
    )
    big = max(set(across) & set(within))
    a, w = across[big]["busbw_GBps"], within[big]["busbw_GBps"]
    sec.headline.append(
        Headline(
            f"Two nodes: allreduce {fmt_bytes(big)} busbw, across 2 namespaces (TCP over veth) / "
            "within one (shm), same run",
            f"{fmt_num(a)} vs {fmt_num(w)} GB/s",
            fmt_ratio(ratio(a, w)),
        )
    )
    sec.data = {"across": docs["across"], "within": docs["within"]}
    return sec
