"""Run the smoke suite against an image: start a target, run pytest + testinfra, report.

For podman: ``podman run -d --name hpcenv-smoke-<random> -v DATA:/data/mnist:ro IMAGE sleep
infinity``, then ``python -m pytest hpcenv/smoke --hosts=podman://NAME`` (with hpcenv's
``CONTAINERS_CONF``), and the container is always removed. The results folder gets
``junit.xml``, ``results.json`` (raw), ``report.json``, ``allreduce_bandwidth.png``, ``pytest.log``.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hpcenv.errors import ConfigError, EnvironmentProblem, HpcenvError
from hpcenv.smoke.report import (
    PLOT_NAME,
    REPORT_NAME,
    SmokeReport,
    load_results,
    plot_allreduce,
    write_report,
)

SMOKE_DIR = Path(__file__).resolve().parent
CHECKS_DIR = SMOKE_DIR.parent / "checks"
DATA_MOUNT = "/data/mnist"
CHECKS_MOUNT = "/opt/hpcenv/checks"
BACKENDS = ("podman", "apptainer")


def require_image(image: str, backend: str) -> None:
    """Fail before any data is fetched or staged when the image to test is not there."""
    if backend == "apptainer":
        from hpcenv.apptainer import resolve_image

        resolve_image(image)
        return
    from hpcenv.engines import get_engine

    if not get_engine("podman").image_exists(image):
        from hpcenv.naming import parse_image_tag

        built = parse_image_tag(image)
        hint = f"hpcenv build --site {built[1]} --recipe {built[0]}" if built else "build it"
        raise EnvironmentProblem(f"image {image} does not exist in podman; {hint} first")


def runs_as(image: str, backend: str) -> str:
    """How this host runs ``image``: ``native`` or ``emulated`` (qemu-user-static); an image of
    another architecture with no binfmt handler for it is refused in one line."""
    if backend != "podman":
        return "native"  # a SIF carries no architecture that apptainer reports before running
    from hpcenv import platforms
    from hpcenv.engines import get_engine

    arch = get_engine("podman").image_arch(image)
    return platforms.require_runnable(platforms.arch(arch), f"image {image}")


@contextmanager
def podman_target(image: str, volumes: Sequence[str], *, keep: bool = False) -> Iterator[str]:
    """A running ``sleep infinity`` container of ``image``; yields its name, then removes it."""
    from hpcenv.engines import get_engine

    engine = get_engine("podman")
    require_image(image, "podman")
    name = f"hpcenv-smoke-{secrets.token_hex(4)}"
    try:
        engine.run_detached(image, name, volumes=volumes)
        yield name
    finally:
        if not keep:
            engine.remove_container(name)


@contextmanager
def apptainer_target(name: str, volumes: Sequence[str]) -> Iterator[str]:
    """A registered SIF name (see hpcenv.apptainer.register_image) with ``volumes`` as binds."""
    from hpcenv.apptainer import BINDS_ENV, resolve_image

    resolve_image(name)  # a clean error when the SIF is unknown
    old = os.environ.get(BINDS_ENV)
    os.environ[BINDS_ENV] = ",".join(v for v in [old or "", *volumes] if v)
    try:
        yield name
    finally:
        if old is None:
            os.environ.pop(BINDS_ENV, None)
        else:
            os.environ[BINDS_ENV] = old


def pytest_argv(
    host_url: str,
    results_dir: Path,
    pytest_args: Sequence[str] = (),
    launch: LaunchSettings | None = None,
) -> list[str]:
    """The pytest command that runs the packaged smoke suite against ``host_url``."""
    extra = []
    if launch is not None:
        extra = [
            f"--launch-env={json.dumps(launch.env, sort_keys=True)}",
            f"--mpirun-flags={launch.mpirun_flags}",
        ]
    return [
        sys.executable,
        "-m",
        "pytest",
        str(SMOKE_DIR),
        "-c",
        str(SMOKE_DIR / "pytest.ini"),
        "--rootdir",
        str(SMOKE_DIR),
        f"--hosts={host_url}",
        f"--junitxml={results_dir / 'junit.xml'}",
        f"--smoke-json={results_dir / 'results.json'}",
        *extra,
        *pytest_args,
    ]


@dataclass(frozen=True)
class LaunchSettings:
    """hpcenv's launch for the smoke checks: placement flags + env, and the measured tuning's
    rules file (mounted at ``RULES_MOUNT``), with a line saying where it came from."""

    mpirun_flags: str
    env: dict[str, str]
    rules_text: str | None = None
    note: str = ""


def run_smoke(
    image: str,
    results_dir: Path,
    *,
    data_dir: Path,
    backend: str = "podman",
    extra_volumes: Sequence[str] = (),
    mount_checks: bool = False,
    pytest_args: Sequence[str] = (),
    keep: bool = False,
    echo: bool = False,
    launch: LaunchSettings | None = None,
    references: Mapping[str, Any] | None = None,
    emulated: bool = False,
    heavy: bool = False,
) -> SmokeReport:
    """Run the smoke suite against ``image`` and write its results to ``results_dir``.

    ``data_dir`` (staged MNIST IDX, see :func:`hpcenv.datasets.prepare_mnist`) is mounted
    read-only at ``/data/mnist``; ``mount_checks`` mounts this checkout's ``hpcenv/checks`` at
    ``/opt/hpcenv/checks`` for images that do not have them baked in. ``extra_volumes`` are
    more ``HOST:CONTAINER[:OPTS]`` mounts. ``echo`` streams pytest's output to stderr.
    ``launch``: hpcenv's placement and measured tuning for the MPI checks (default: a plain
    ``mpirun --oversubscribe``). ``references``: the site's performance references; every
    figure is compared with them and with the history of earlier runs of this image and backend
    (see :mod:`hpcenv.smoke.references`), and this run is added to that history.
    ``emulated``: the image runs under qemu-user-static, so only the checks marked ``light``
    run, with small sweeps, unless ``heavy``.
    """
    if backend not in BACKENDS:
        raise ConfigError(
            f"smoke backend {backend!r} is not supported by the runner; valid: {', '.join(BACKENDS)}"
        )
    data_dir = Path(data_dir).resolve()
    if not (data_dir / "manifest.json").is_file():
        raise ConfigError(f"{data_dir} has no manifest.json; run `hpcenv data mnist` first")
    results_dir = Path(results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("junit.xml", "results.json", REPORT_NAME, PLOT_NAME):
        (results_dir / stale).unlink(missing_ok=True)
    volumes = [f"{data_dir}:{DATA_MOUNT}:ro", *extra_volumes]
    if mount_checks:
        volumes.append(f"{CHECKS_DIR}:{CHECKS_MOUNT}:ro")
    if launch is not None and launch.rules_text:
        from hpcenv.tuning.apply import RULES_MOUNT, RULES_NAME

        rules_dir = results_dir / "tuning"
        rules_dir.mkdir(exist_ok=True)
        (rules_dir / RULES_NAME).write_text(launch.rules_text, encoding="utf-8")
        volumes.append(f"{rules_dir}:{RULES_MOUNT}:ro")

    from hpcenv.engines import engine_env

    started = datetime.now(UTC)
    t0 = time.monotonic()
    log_path = results_dir / "pytest.log"
    target = (
        podman_target(image, volumes, keep=keep)
        if backend == "podman"
        else apptainer_target(image, volumes)
    )
    with target as name:
        host_url = f"{backend}://{name}"
        modes = (["--emulated"] if emulated else []) + (["--heavy"] if heavy else [])
        argv = pytest_argv(host_url, results_dir, [*modes, *pytest_args], launch)
        with log_path.open("w") as log:
            log.write("$ " + " ".join(argv) + "\n")
            log.flush()
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                env=engine_env(),
                stdin=subprocess.DEVNULL,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if echo:  # progress: stderr (stdout is for the result)
                    sys.stderr.write(line)
                    sys.stderr.flush()
            code = proc.wait()
    seconds = time.monotonic() - t0
    raw = results_dir / "results.json"
    if code not in (0, 1) or not raw.is_file():
        raise HpcenvError(f"smoke pytest run ended with exit code {code}; see {log_path}")
    report = SmokeReport(
        image=image,
        backend=backend,
        host=host_url,
        started=started.isoformat(timespec="seconds"),
        seconds=round(seconds, 1),
        pytest_exit_code=code,
        tests=load_results(raw),
        results_dir=results_dir,
    )
    report.files = {"junit": "junit.xml", "raw": "results.json", "log": "pytest.log"}
    if launch is not None:
        report.launch = {
            "mpirun_flags": launch.mpirun_flags,
            "env": launch.env,
            "note": launch.note,
        }
    _compare(report, references or {}, started)
    plot = plot_allreduce(
        report.tests,
        results_dir / PLOT_NAME,
        title="allreduce, 2 ranks",
        image=f"{image} ({backend})",
    )
    if plot is not None:
        report.files["plot"] = plot.name
    write_report(report)
    return report


def _compare(report: SmokeReport, references: Mapping[str, Any], started: datetime) -> None:
    """Judge the run's figures against references and history; append the run to history."""
    from hpcenv.smoke.references import (
        append_history,
        compare,
        figures,
        history_path,
        read_history,
    )

    figs = figures(report.tests)
    slug = f"{report.backend}-" + report.image.rsplit("/", 1)[-1].replace(":", "-")
    path = history_path(report.results_dir, slug)
    report.references = [v.to_dict() for v in compare(figs, references, read_history(path))]
    if figs:
        append_history(
            path,
            {
                "date": started.isoformat(timespec="seconds"),
                "image": report.image,
                "figures": {k: f.value for k, f in figs.items()},
            },
        )
    report.files["history"] = str(path)


def launch_settings(
    site: Any, image: str, ranks: int = 2, recipe: str | None = None
) -> LaunchSettings:
    """hpcenv's default launch of ``ranks`` ranks on one node of ``site`` in ``image``: the
    placement's mpirun flags and environment, the site's ``tuning:`` and the measured tuning in
    force for this image digest and layout (a stale or foreign file is ignored, with the reason
    in ``note``)."""
    from hpcenv.jobs.measured import lookup
    from hpcenv.jobs.placement import place
    from hpcenv.tuning.apply import RULES_MOUNT, RULES_NAME, environment

    # the recipe shapes the placement: a CCL recipe gets oneCCL workers (CCL_WORKER_*)
    placement = place(site, 1, ranks, recipe=recipe, force=True)
    from hpcenv.jobs.launchenv import launch_env
    from hpcenv.jobs.launchers import Mpirun

    # the in-image suite puts ``mpirun -np N`` before these for each check's rank count
    flags = shlex.join(Mpirun.placement_flags(placement))
    found = lookup(site, placement, image)
    rules = None
    measured = None
    if found is not None and found.tuning is not None:
        measured = environment(found.tuning, f"{RULES_MOUNT}/{RULES_NAME}")
        rules = found.tuning.rules_text()
        note = f"measured tuning in force: {found.path} ({found.why})"
    elif found is not None:
        note = f"warning: {found.warning or found.why}"
    else:
        note = "no measured tuning for this site and layout (hpcenv tune --measure)"
    env = launch_env(site, placement, measured)
    return LaunchSettings(f"{flags} --oversubscribe", env, rules, note)
