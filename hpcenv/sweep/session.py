"""``hpcenv tune --measure`` end to end: one container of the site's image, the sweep, the file.

The container mounts this checkout's ``hpcenv/checks`` over the image's (so the sweep scripts
match this code) and a scratch folder at ``RULES_MOUNT`` (rules files under test). It is always
removed at the end.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.tuning.apply import RULES_MOUNT
from hpcenv.tuning.model import MeasuredTuning
from hpcenv.tuning.store import save

CHECKS_DIR = Path(__file__).resolve().parent.parent / "checks"


@dataclass(frozen=True)
class Measured:
    tuning: MeasuredTuning
    path: Path


def require_image(site: Any, image: str) -> str:
    """The podman image ID of ``image``, or a clear error for sites this host cannot run."""
    from hpcenv.jobs.runtimes.registry import runtime_of

    runtime = runtime_of(site)
    if not runtime.runs_local_podman_images:
        raise EnvironmentProblem(
            f"tune --measure runs the site's image with podman on this host; site {site.name}'s "
            f"runtime is {site.runtime.kind}: run `hpcenv tune --measure --site {site.name}` "
            "on one of its nodes (or `hpcenv tune --plan` to see what it would sweep)"
        )
    iid = runtime.image_identity(image)
    if iid is None:
        raise EnvironmentProblem(
            f"image {image} not found in podman storage; build it first "
            f"(hpcenv build --site {site.name}) or pass --image"
        )
    return iid


def measure_site(
    site: Any,
    placement: Any,
    image: str,
    *,
    budget_s: float = 300,
    quick: bool = False,
    echo: Callable[[str], None] = print,
) -> Measured:
    """Measure in a fresh container of ``image``; save and return the tuning file."""
    from hpcenv.shells import Container, Result
    from hpcenv.sweep.measure import measure, mpirun_line, read_lock

    if placement.nodes != 1:
        raise ConfigError(
            "tune --measure measures one node in one container here; a multi-node layout needs "
            "the site's launcher across nodes (measure on the site with --nodes 1 meanwhile)"
        )
    if placement.ranks_per_node < 2:
        raise ConfigError("a collective needs at least 2 ranks: pass --ranks-per-node 2 or more")
    iid = require_image(site, image)
    with tempfile.TemporaryDirectory(prefix="hpcenv-tune-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        ctr = Container(image, [f"{CHECKS_DIR}:/opt/hpcenv/checks:ro", f"{work}:{RULES_MOUNT}:ro"])
        with ctr:

            def run(command: str, env: Mapping[str, str], timeout: float) -> Result:
                return ctr.run(command, env, timeout)

            lock = read_lock(run)
            gpu = run("nvidia-smi -L", {}, 30).ok
            mpirun = mpirun_line(site, placement)
            echo(
                f"measuring in {image} ({iid[:12]}), layout "
                f"{placement.nodes}x{placement.ranks_per_node} ranks, budget {budget_s:.0f} s"
            )
            tuning = measure(
                site,
                image,
                iid,
                placement,
                run,
                mpirun,
                work,
                lock=lock,
                gpu_visible=gpu,
                budget_s=budget_s,
                quick=quick,
                echo=echo,
            )
    return Measured(tuning, save(tuning))
