"""Smoke report, plot, table, launch lines and runner argv (no podman needed)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hpcenv.checks._bench import (
    bandwidth,
    float_sum_expected,
    int_sum_expected,
    iterations,
    message_sizes,
)
from hpcenv.errors import ConfigError
from hpcenv.shells import last_json
from hpcenv.smoke._target import Target
from hpcenv.smoke.report import (
    SmokeReport,
    TestResult,
    allreduce_series,
    key_numbers,
    load_results,
    plot_allreduce,
    summary_table,
    write_report,
)
from hpcenv.smoke.runner import SMOKE_DIR, pytest_argv, run_smoke


def _sweep(scale: float) -> list[dict[str, float]]:
    sizes = message_sizes(8, 64 << 20, 4)
    return [{"bytes": s, "iters": 5} | bandwidth(s, 1e-5 + s / (scale * 1e9), 2) for s in sizes]


def _results() -> list[TestResult]:
    return [
        TestResult(
            "test_allreduce.py::test_allreduce[mpi4py]",
            "passed",
            9.5,
            {
                "flavor": "mpi4py",
                "peak_busbw_GBps": 1.4,
                "sweep": _sweep(1.4),
                "command": "mpirun ...",
            },
        ),
        TestResult(
            "test_allreduce.py::test_allreduce[torch-gloo]",
            "passed",
            12.0,
            {"flavor": "torch-gloo", "sweep": _sweep(0.6)},
        ),
        TestResult(
            "test_mnist_horovod.py::test_mnist_horovod",
            "passed",
            20.0,
            {"accuracy": 0.962, "param_checksums": [{"rank": 0}]},
        ),
        TestResult(
            "test_torch_ccl.py::test_torch_ccl",
            "skipped",
            3.0,
            {"import_error": "ModuleNotFoundError"},
            "ccl backend unavailable: because",
        ),
    ]


def _report(
    tmp_path: Path, exit_code: int = 0, tests: list[TestResult] | None = None
) -> SmokeReport:
    return SmokeReport(
        image="localhost/x:y",
        backend="podman",
        host="podman://c",
        started="2025-01-01T00:00:00",
        seconds=44.5,
        pytest_exit_code=exit_code,
        tests=tests or _results(),
        results_dir=tmp_path,
    )


def test_bench_helpers_closed_forms() -> None:
    assert message_sizes(8, 64 << 20, 4)[:3] == [8, 32, 128]
    assert message_sizes(8, 64 << 20, 4)[-2:] == [32 << 20, 64 << 20]
    assert message_sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    with pytest.raises(ValueError):
        message_sizes(0, 8)
    assert iterations(8) == 1000 and iterations(64 << 20) == 5 and iterations(1 << 20) == 256
    bw = bandwidth(1_000_000, 1e-3, 2)
    assert bw["algbw_GBps"] == pytest.approx(1.0) and bw["busbw_GBps"] == pytest.approx(1.0)
    assert bandwidth(1_000_000, 1e-3, 4)["busbw_GBps"] == pytest.approx(1.5)
    for n, ranks in ((1, 2), (5, 3), (37, 4)):
        pairs = [(r, i) for r in range(ranks) for i in range(n)]
        assert int_sum_expected(n, ranks) == sum(r * n + i for r, i in pairs)
        assert float_sum_expected(n, ranks) == sum((r + 1) + i / 2 for r, i in pairs)
    assert int_sum_expected(1_000_003, 2) == 2000011000015
    assert float_sum_expected(1_000_003, 2) == 500005500012.0


def test_report_json_round_trip(tmp_path: Path) -> None:
    report = _report(tmp_path)
    path = write_report(report)
    doc = json.loads(path.read_text())
    assert doc["ok"] is True and doc["counts"] == {"passed": 3, "skipped": 1}
    assert doc["tests"][0]["metrics"]["sweep"][0]["bytes"] == 8
    assert doc["tests"][3]["message"].startswith("ccl backend unavailable")
    raw = tmp_path / "results.json"
    raw.write_text(json.dumps({"tests": doc["tests"]}))
    assert load_results(raw) == report.tests


def test_ok_needs_clean_pytest_and_no_failures(tmp_path: Path) -> None:
    assert not _report(tmp_path, exit_code=1).ok
    failed = [*_results(), TestResult("t.py::x", "failed", 1.0, {}, "assert 0.5 >= 0.9")]
    assert not _report(tmp_path, tests=failed).ok
    assert not _report(tmp_path, tests=[TestResult("t.py::y", "error", 0.1)]).ok


def test_plot_has_every_flavour(tmp_path: Path) -> None:
    series = allreduce_series(_results())
    assert list(series) == ["mpi4py", "torch-gloo"]
    path = plot_allreduce(_results(), tmp_path / "bw.png", title="t")
    assert path is not None
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 1000 and height > 400
    assert plot_allreduce(_results()[2:], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_summary_table_and_key_numbers(tmp_path: Path) -> None:
    from rich.console import Console

    assert key_numbers(_results()[0]) == "peak_busbw_GBps=1.4"
    console = Console(record=True, width=200)
    console.print(summary_table(_report(tmp_path)))
    text = console.export_text()
    assert "test_mnist_horovod" in text and "accuracy=0.962" in text
    assert "test_allreduce[mpi4py]" in text and "test_allreduce[torch-gloo]" in text
    assert "skipped" in text and "ccl backend unavailable: because" in text
    assert "3 passed" in text and "1 skipped" in text


def test_target_command_and_last_json() -> None:
    t = Target("/opt/hpcenv/checks", "/data/mnist", "/opt/mpich-abi/lib", 2, 300)
    line = t.command(t.mpirun, "allreduce_mpi.py", ("--max", "64"), {"A": "x y"})
    assert line == (
        "cd /tmp && env A='x y' timeout -k 10 300 mpirun -np 2 --oversubscribe "
        "python3 /opt/hpcenv/checks/allreduce_mpi.py --max 64"
    )
    assert t.mpiexec_mpich == "mpiexec.mpich -n 2"
    assert t.horovodrun_gloo == "horovodrun -np 2 -H localhost:2 --gloo"
    assert last_json('warn\n{"a": 1}\n[1]\n{"b": 2}\nbye\n') == {"b": 2}
    assert last_json("{not json\nnothing") is None
    assert last_json('[0]<stdout>:{"c": 3}\n[1]<stderr>:x\n') == {"c": 3}


def test_runner_argv_and_tags(tmp_path: Path) -> None:
    argv = pytest_argv("podman://c1", tmp_path, ["-k", "mnist"])
    assert argv[1:4] == ["-m", "pytest", str(SMOKE_DIR)]
    assert "--hosts=podman://c1" in argv and f"--junitxml={tmp_path / 'junit.xml'}" in argv
    assert argv[-2:] == ["-k", "mnist"]
    with pytest.raises(ConfigError, match="backend 'docker'"):
        run_smoke("x", tmp_path, data_dir=tmp_path, backend="docker")
    with pytest.raises(ConfigError, match="manifest.json"):
        run_smoke("x", tmp_path, data_dir=tmp_path)
