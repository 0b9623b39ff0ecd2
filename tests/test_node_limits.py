"""Node counts beyond what a site's documented queues take are refused before the scheduler sees
them (issue 40, class 9: ``-N 99999`` on Perlmutter was accepted). Perlmutter's regular QOS
takes at most the machine's 1,792 GPU nodes (docs/sites/perlmutter.md "Queue limits")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError
from hpcenv.jobs.queues import route
from hpcenv.jobs.spec import JobSpec
from hpcenv.site import load_site

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def _job(nodes: int, **extra: object) -> JobSpec:
    return JobSpec(name="n", command=["true"], nodes=nodes, **extra)  # type: ignore[arg-type]


def test_more_nodes_than_any_qos_takes_is_refused() -> None:
    site = load_site("perlmutter")
    with pytest.raises(ConfigError, match=r"^-N/--nodes 99999: no qos .* more than 1792 node"):
        route(site, _job(99999))
    job, note = route(site, _job(1792))
    assert job.qos is None and note is None  # the site's regular QOS takes it


def test_a_site_with_a_queue_without_node_limit_knows_no_most() -> None:
    """A queue whose node limit is not written may take any count: nothing is refused for it."""
    site = load_site("perlmutter")
    limits = dict(site.scheduler.queue_limits)
    limits["regular"] = limits["regular"].model_copy(update={"nodes": None})
    site = site.model_copy(
        update={"scheduler": site.scheduler.model_copy(update={"queue_limits": limits})}
    )
    job, _ = route(site, _job(99999))
    assert job.nodes == 99999


@pytest.mark.parametrize("nodes", ["99999", "1793"])
def test_the_installed_hpcenv_refuses_in_one_line(nodes: str) -> None:
    argv = [HPCENV, "submit", "--site", "perlmutter", "--recipe", "torch-gpu", "-A", "m1234"]
    proc = subprocess.run(
        [*argv, "-N", nodes, "--dry-run", "--", "python3", "train.py"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: -N/--nodes {nodes}: no qos on site 'perlmutter' takes more than 1792 node(s): "
        "ask for fewer nodes (scheduler.queue_limits)"
    ]
