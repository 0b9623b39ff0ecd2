"""Fixtures of the smoke suite: where checks and data live in the target, how they are launched,
and ``record`` for the numbers that end up in ``report.json`` and the JUnit properties.

Everything reaches the target through testinfra's ``host.run``, so the suite works for any host
URL (``podman://NAME``, ``apptainer://NAME``). ``--smoke-json PATH`` writes every test's
outcome, duration, message and recorded metrics to PATH when the session ends.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from hpcenv.shells import OMPI_ROOT_ENV, last_json
from hpcenv.smoke._target import IMAGE_LOCK, Target, missing_component

RESULTS = pytest.StashKey[dict[str, dict[str, Any]]]()
CPU_WRAPPER = "_cpu.py"  # hpcenv/checks/_cpu.py: each rank records the CPU it got
HAS_WRAPPER = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpcenv-smoke")
    group.addoption("--checks-dir", default="/opt/hpcenv/checks", help="checks in the target")
    group.addoption("--mnist-dir", default="/data/mnist", help="staged MNIST IDX in the target")
    group.addoption(
        "--mpich-abi-lib",
        default="/opt/mpich-abi/lib",
        help="folder with the MPICH-ABI libmpi.so.12 used by daal4py SPMD",
    )
    group.addoption("--ranks", type=int, default=2, help="ranks per distributed check")
    group.addoption("--check-timeout", type=int, default=600, help="seconds per check command")
    group.addoption("--smoke-json", default=None, help="write outcomes + metrics as JSON here")
    group.addoption(
        "--launch-env", default="{}", help="JSON object: hpcenv's launch + measured tuning env"
    )
    group.addoption("--mpirun-flags", default="", help="Open MPI mpirun placement options")
    group.addoption(
        "--emulated",
        action="store_true",
        help="the target runs under emulation (qemu-user-static): light checks only, small sweeps",
    )
    group.addoption("--heavy", action="store_true", help="with --emulated: every check, full size")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under emulation, only the checks marked ``light`` run unless ``--heavy`` is given."""
    if not config.getoption("--emulated") or config.getoption("--heavy"):
        return
    skip = pytest.mark.skip(
        reason="heavy under emulation (qemu-user-static); smoke --heavy runs it"
    )
    for item in items:
        if item.get_closest_marker("light") is None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    opt = pytestconfig.getoption
    return Target(
        checks_dir=str(opt("--checks-dir")),
        mnist_dir=str(opt("--mnist-dir")),
        mpich_abi_lib=str(opt("--mpich-abi-lib")),
        ranks=int(opt("--ranks")),
        timeout=int(opt("--check-timeout")),
        launch_env={str(k): str(v) for k, v in json.loads(opt("--launch-env")).items()},
        mpirun_flags=str(opt("--mpirun-flags")) or None,
        emulated=bool(opt("--emulated")) and not bool(opt("--heavy")),
    )


@pytest.fixture(scope="module")
def image_lock(host: Any) -> dict[str, Any] | None:
    """The lock baked into the image (None for an image without one: every check runs)."""
    result = host.run(f"cat {IMAGE_LOCK}")
    if result.rc != 0:
        return None
    doc = json.loads(result.stdout)
    return doc if isinstance(doc, dict) else None


@pytest.fixture
def requires(image_lock: dict[str, Any] | None) -> Callable[..., None]:
    """``requires("horovod", "gloo")``: skip, with the lock's reason, when the image lacks it."""

    def _requires(component: str, operation: str | None = None) -> None:
        why = missing_component(image_lock, component, operation)
        if why:
            pytest.skip(why)

    return _requires


def test_name(item: pytest.Item) -> str:
    """``file::test[params]`` without testinfra's host parameter (a random container name)."""
    name = item.nodeid
    callspec = getattr(item, "callspec", None)
    host = callspec.params.get("_testinfra_host") if callspec else None
    if callspec is None or host is None:
        return name
    host_id = host.backend.get_pytest_id()
    ids = callspec.id
    rest = ids.removeprefix(host_id + "-") if ids != host_id else ""
    rest = rest.removesuffix("-" + host_id) if rest == ids else rest
    base = name[: name.index("[")] if "[" in name else name
    return f"{base}[{rest}]" if rest else base


def _entry(item: pytest.Item) -> dict[str, Any]:
    results = item.config.stash.setdefault(RESULTS, {})
    return results.setdefault(
        item.nodeid,
        {"nodeid": test_name(item), "outcome": "unknown", "duration": 0.0, "metrics": {}},
    )


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``record(name=value, ...)``: keep numbers for the report (and as JUnit properties)."""
    metrics = _entry(request.node)["metrics"]

    def _record(**values: Any) -> None:
        for key, value in values.items():
            metrics[key] = value
            scalar = isinstance(value, str | int | float | bool) or value is None
            request.node.user_properties.append((key, value if scalar else json.dumps(value)))

    return _record


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class CpuMeter:
    """The CPU a test's ranks got, over every check the test runs (see hpcenv.smoke.load)."""

    def __init__(self) -> None:
        self.ranks: list[dict[str, Any]] = []
        self.psi_us: float | None = 0.0
        self.window_s = 0.0

    def add(self, ranks: list[dict[str, Any]], psi_us: int | None, seconds: float) -> None:
        self.ranks += ranks
        self.psi_us = None if psi_us is None or self.psi_us is None else self.psi_us + psi_us
        self.window_s += seconds

    def summary(self) -> dict[str, Any]:
        from hpcenv.smoke.load import summary

        return summary(self.ranks, self.psi_us, self.window_s)


def _has_wrapper(host: Any, target: Target, config: pytest.Config) -> bool:
    """Whether the target's checks carry ``_cpu.py`` (an image built before it does not)."""
    if HAS_WRAPPER not in config.stash:
        config.stash[HAS_WRAPPER] = host.run(f"test -f {target.script(CPU_WRAPPER)}").rc == 0
    return config.stash[HAS_WRAPPER]


def _rank_records(host: Any, folder: str) -> list[dict[str, Any]]:
    from hpcenv.smoke.load import rank_docs

    where = shlex.quote(folder)
    got = host.run(f"cat -- {where}/*.json")  # one object per file, no newline between them
    host.run(f"rm -rf -- {where}")
    return rank_docs(got.stdout)


@pytest.fixture
def run_check(
    host: Any, target: Target, record: Callable[..., None], request: pytest.FixtureRequest
) -> Callable[..., dict[str, Any]]:
    """Run a check script in the target under a launcher; its JSON document, else fail. Each
    check runs through ``_cpu.py`` where the target has it; the CPU the ranks got is recorded
    as ``cpu`` (hpcenv.smoke.load.summary)."""
    from hpcenv.smoke.load import CPU_DIR_ENV, host_psi_total

    meter = CpuMeter()
    wrapped = _has_wrapper(host, target, request.config)

    def _run(
        launcher: str, script: str, *args: str, env: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        full_env = {**OMPI_ROOT_ENV, **target.launch_env, **(env or {})}
        folder, name = None, script
        if wrapped:
            folder = f"/tmp/hpcenv-cpu-{secrets.token_hex(4)}"
            full_env[CPU_DIR_ENV] = folder
            args = (target.script(script), *args)
            script = CPU_WRAPPER
        command = target.command(launcher, script, args, full_env)
        psi0 = host_psi_total()
        started = time.monotonic()
        result = host.run(command)
        wall = time.monotonic() - started
        psi1 = host_psi_total()
        ranks = _rank_records(host, folder) if folder else []
        meter.add(ranks, psi1 - psi0 if psi0 is not None and psi1 is not None else None, wall)
        record(command=command, wall_seconds=round(wall, 2), cpu=meter.summary())
        doc = last_json(result.stdout)
        if result.rc != 0 or doc is None:
            pytest.fail(
                f"{name} exited {result.rc} after {wall:.1f} s"
                + ("" if doc else " without a JSON result")
                + f"\n$ {command}\n--- stdout ---\n{_tail(result.stdout)}"
                + f"\n--- stderr ---\n{_tail(result.stderr)}",
                pytrace=False,
            )
        return doc

    return _run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fold each phase's report into the test's entry: outcome, duration, message."""
    report: pytest.TestReport = yield
    entry = _entry(item)
    entry["duration"] += report.duration
    if report.when == "call" or report.outcome != "passed":
        failed_outside_call = report.outcome == "failed" and report.when != "call"
        entry["outcome"] = "error" if failed_outside_call else report.outcome
        if report.skipped and isinstance(report.longrepr, tuple):
            entry["message"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.failed:
            entry["message"] = report.longreprtext[-4000:]
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--smoke-json")
    if not path:
        return
    results = list(session.config.stash.get(RESULTS, {}).values())
    with open(path, "w") as fh:
        json.dump({"tests": results}, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
