"""torch.distributed's ``env://`` rendezvous: what every job exports, and per rank what it maps.

The job (the batch shell, once) exports ``MASTER_ADDR`` and ``MASTER_PORT`` as the site's
``rendezvous`` block says (:class:`hpcenv.site.model.Rendezvous`): the first node as the
scheduler names it (:attr:`hpcenv.jobs.schedulers.Scheduler.first_node`), or the batch host's
address, with the site's high-speed-network domain where it documents one; the site's documented
port, else one derived from the job id (:func:`derived_port`).

A derived port: two jobs that share a node must not collide. The job id spreads jobs over
``PORT_SLOTS`` ports from ``PORT_LOW`` (below Linux's ephemeral range, 32768-60999, which the
kernel hands to outgoing connections: ``/proc/sys/net/ipv4/ip_local_port_range``), so only jobs
``PORT_SLOTS`` ids apart start from the same port (``29500 + id % 1000`` put jobs 1,000 ids
apart on one port). A port another program already holds on the rendezvous host is not looked
for (that would be a shell program in the job script's environment layer, which belongs in a
shipped step file): rank 0's bind then fails with "address already in use" in the job's log.

Each rank then gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` from its
launcher's own variables, in the shipped step file ``rank-env.sh``
(``templates/jobs/rank_env.sh.j2``), which runs on the node before the container runtime and
execs it; the runtime passes these names into the image (:data:`RANK_NAMES`). ``torchrun``
(:class:`hpcenv.jobs.launchers.Torchrun`) sets them itself and needs no rank step.

What each site documents (read 2026-11-24; docs/sites/NAME.md):

- Frontier: ``export MASTER_ADDR=$(hostname -i)``, ``MASTER_PORT=3442`` (OLCF
  ``software/analytics/pytorch_frontier.rst`` "Master Address and Sockets").
- Perlmutter: ``MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)``,
  ``MASTER_PORT=29500``, ``RANK=$SLURM_PROCID`` ... (NERSC "Launchers",
  docs.nersc.gov/machinelearning/launchers).
- Aurora: ``$(hostname -s).hsn.cm.aurora.alcf.anl.gov`` (ALCF ``docs/aurora/containers/src/
  test_container.sh``; ``data-science/frameworks/pytorch.md`` uses the same name, port 2345).
- Summit: no documented torch rendezvous; the first compute node from ``jsrun -n1 hostname``
  (the batch shell runs on a launch node), port derived from the job id (assumed).
"""

from __future__ import annotations

from hpcenv.jobs.schedulers import Scheduler
from hpcenv.site import Site

# What a rank needs for env:// besides MASTER_*: rank-env.sh sets them, the runtime passes them.
RANK_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
RANK_STEP = "rank-env.sh"
# The node-scope cache folders' variable names (site ``caches``): rank-env.sh makes each folder.
CACHES_VAR = "HPCENV_CACHES"
PORT_LOW = 20000  # derived ports: PORT_LOW .. PORT_LOW + PORT_SLOTS - 1 (20000-31999)
PORT_SLOTS = 12000


def derived_port(job_id: str = "HPCENV_JOB_ID") -> str:
    """``PORT_LOW`` + the job id's leading digits mod ``PORT_SLOTS``, in bash arithmetic
    (``10#0``: no octal, and 0 when the id has no leading digits)."""
    return f"$(({PORT_LOW} + 10#0${{{job_id}%%[!0-9]*}} % {PORT_SLOTS}))"


def address(site: Site, scheduler: Scheduler) -> str:
    """The shell expression (run once, in the batch shell) for ``MASTER_ADDR``."""
    r = site.rendezvous
    if r.address == "batch-host-ip":
        return "$(hostname -i | cut -d ' ' -f 1)"  # may list several: the first
    if r.domain:
        return f"$({scheduler.first_node} | cut -d . -f 1).{r.domain}"
    return f"$({scheduler.first_node})"


def environment(site: Site, scheduler: Scheduler) -> dict[str, str]:
    """``MASTER_ADDR`` and ``MASTER_PORT`` for the job's ``rendezvous`` layer (both expand)."""
    r = site.rendezvous
    return {
        "MASTER_ADDR": address(site, scheduler),
        "MASTER_PORT": str(r.port) if r.port else derived_port(),
    }
