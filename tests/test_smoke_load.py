"""Verdicts that know when they cannot judge (issue 40): each rank measures the CPU it got
(``hpcenv/checks/_cpu.py``: schedstat and PSI), ``hpcenv.smoke.load`` says when that was too
little, and a figure outside its band while the ranks were starved is ``inconclusive`` (exit 0,
said on stderr) instead of a regression. The wrapper runs here as a real process; the smoke
runner is the faked boundary of the CLI tests (tests/test_smoke_podman.py runs it for real)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcenv.checks._cpu import (
    parse_psi_some_total,
    parse_schedstat,
    psi_some_total,
    threads_schedstat,
)
from hpcenv.cli.main import app
from hpcenv.site import Reference
from hpcenv.smoke.load import limits, rank_docs, starved, summary
from hpcenv.smoke.references import (
    Figure,
    Verdict,
    compare,
    figures,
    outcome_lines,
    run_confirmed,
)
from hpcenv.smoke.report import SmokeReport, TestResult

WRAPPER = Path(__file__).resolve().parent.parent / "hpcenv" / "checks" / "_cpu.py"
STEP = "mnist_horovod.step_per_compute"
REF = {STEP: Reference(value=1.15, lower=-0.3, upper=0.3, unit="x", better="lower")}
QUIET = {"ranks": 2, "wait_per_run_max": 0.05, "psi_some": 0.95, "window_s": 30.0}
BUSY = {"ranks": 2, "wait_per_run_max": 4.0, "psi_some": 0.98, "window_s": 50.0}


# --- parsing what the kernel writes -------------------------------------------------------------


def test_schedstat_lines_parse_and_bad_ones_are_none() -> None:
    assert parse_schedstat("546048 32907 24\n") == (546048, 32907)
    assert parse_schedstat("5 6") == (5, 6)
    for bad in ("", "\n", "12", "a b c", "-1 2 3", "1.5 2 3", "\x00\x01"):
        assert parse_schedstat(bad) is None, bad


def test_psi_some_total_parses_and_bad_files_are_none() -> None:
    text = (
        "some avg10=3.24 avg60=2.28 avg300=12.51 total=6593678662\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert parse_psi_some_total(text) == 6593678662
    for bad in ("", "full total=5", "some avg10=1", "some total=-3", "some total=x", "garbage"):
        assert parse_psi_some_total(bad) is None, bad


def test_missing_or_malformed_proc_files_give_none(tmp_path: Path) -> None:
    assert psi_some_total(str(tmp_path / "absent")) is None
    (tmp_path / "cpu").write_bytes(b"\xff\xfe not psi")
    assert psi_some_total(str(tmp_path / "cpu")) is None
    assert threads_schedstat(str(tmp_path / "no-such-proc")) is None
    fake = tmp_path / "proc"
    (fake / "task" / "1").mkdir(parents=True)
    (fake / "task" / "1" / "schedstat").write_text("torn")
    (fake / "task" / "2").mkdir()  # a thread that ended between listing and reading
    assert threads_schedstat(str(fake)) is None
    (fake / "task" / "3").mkdir()
    (fake / "task" / "3" / "schedstat").write_text("100 50 2\n")
    assert threads_schedstat(str(fake)) == (100, 50, 1)


def test_this_process_reads_its_own_schedstat() -> None:
    got = threads_schedstat()
    assert got is not None and got[0] > 0 and got[2] >= 1


# --- the wrapper the ranks run through, as a real process ----------------------------------------


def wrapped(tmp_path: Path, body: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "check.py"
    script.write_text(body)
    return subprocess.run(
        [sys.executable, str(WRAPPER), str(script), "--flag", "x"],
        capture_output=True,
        text=True,
        env=os.environ | env,
        cwd=tmp_path,
    )


def test_the_wrapper_runs_the_check_and_records_the_rank(tmp_path: Path) -> None:
    body = (
        "import sys, json, _sibling\n"
        "if __name__ == '__main__':\n"
        "    sum(range(200000))\n"
        "    print(json.dumps({'argv': sys.argv[1:], 'sib': _sibling.X}))\n"
    )
    (tmp_path / "_sibling.py").write_text("X = 7\n")
    out = tmp_path / "cpu"
    proc = wrapped(tmp_path, body, {"HPCENV_CPU_DIR": str(out)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"argv": ["--flag", "x"], "sib": 7}
    (record,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert record["run_ns"] > 0 and record["wait_ns"] >= 0 and record["threads"] >= 1
    assert record["wall_ns"] > 0
    assert len(rank_docs(json.dumps(record))) == 1


def test_the_wrapper_keeps_the_checks_exit_and_never_breaks_it(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a folder that cannot be made: the check's result still stands
    proc = wrapped(tmp_path, "raise SystemExit(3)\n", {"HPCENV_CPU_DIR": str(blocked / "sub")})
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("warning: HPCENV_CPU_DIR:")
    quiet = wrapped(tmp_path, "print('ok')\n", {})
    assert quiet.returncode == 0 and quiet.stdout == "ok\n"
    usage = subprocess.run([sys.executable, str(WRAPPER)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr and "Traceback" not in usage.stderr


# --- summary and the starvation rule -----------------------------------------------------------


def test_rank_docs_keep_only_records_that_parse() -> None:
    text = "\n".join(
        [
            '{"run_ns": 100, "wait_ns": 400}',
            "{torn",
            "[1, 2]",
            '{"run_ns": 0, "wait_ns": 5}',
            '{"run_ns": "1", "wait_ns": 5}',
            '{"run_ns": true, "wait_ns": 5}',
            "",
            '{"run_ns": 200, "wait_ns": 20}',
        ]
    )
    assert [d["run_ns"] for d in rank_docs(text)] == [100, 200]


def test_summary_takes_the_worst_rank_and_the_pressure_share() -> None:
    ranks = [{"run_ns": 1e9, "wait_ns": 4e9}, {"run_ns": 2e9, "wait_ns": 0.2e9}]
    got = summary(ranks, psi_us=45e6, window_s=50.0)
    assert got["ranks"] == 2
    assert got["wait_per_run_max"] == 4.0
    assert got["wait_per_run"] == round(4.2 / 3, 3)
    assert got["psi_some"] == 0.9
    empty = summary([], None, 0.0)
    assert empty["ranks"] == 0 and empty["wait_per_run_max"] is None and empty["psi_some"] is None


def test_starved_follows_the_limits_kept_as_data() -> None:
    lim = limits()
    assert 0 < lim.wait_per_run < 3 and lim.reason and lim.measured
    assert starved(QUIET) is None  # the ranks had their cores, whatever PSI says
    why = starved(BUSY) or ""
    assert why.startswith("ranks starved: the worst of 2 ranks waited 4.00 s on a run queue")
    assert "schedstat" in why and "98%" in why
    # an image whose checks predate the wrapper: PSI decides
    assert "CPU pressure on 90%" in (starved({"psi_some": 0.9, "window_s": 9.0}) or "")
    assert starved({"psi_some": 0.1}) is None
    for nothing in (None, {}, "x", {"wait_per_run_max": "high"}, {"wait_per_run_max": None}):
        assert starved(nothing) is None  # type: ignore[arg-type]


# --- verdicts -----------------------------------------------------------------------------------


def verdict_of(value: float, cpu: dict[str, Any] | None) -> Verdict:
    (v,) = compare({STEP: Figure(value, "x", "lower", cpu)}, REF, [])
    return v


def test_starved_and_out_of_band_is_inconclusive_with_the_reason() -> None:
    v = verdict_of(1.87, BUSY)
    assert v.verdict == "inconclusive"
    assert v.reason and v.reason.startswith("ranks starved")
    assert v.to_dict()["load"] == BUSY


def test_not_starved_and_out_of_band_regresses() -> None:
    assert verdict_of(1.87, QUIET).verdict == "regression"
    assert verdict_of(1.87, None).verdict == "regression"  # nothing measured: judged as before


def test_in_band_passes_whatever_the_load() -> None:
    assert verdict_of(1.2, BUSY).verdict == "pass"
    assert verdict_of(1.2, BUSY).reason is None
    assert verdict_of(0.5, BUSY).verdict == "improvement"


def test_figures_carry_their_tests_cpu() -> None:
    tests = [
        TestResult("t::mnist", "passed", 1.0, {"step_ms": 12, "compute_step_ms": 8, "cpu": BUSY}),
        TestResult("t::km", "passed", 1.0, {"spmd_ms_per_iteration": 1.0, "cpu": "torn"}),
    ]
    figs = figures(tests)
    assert figs[STEP].cpu == BUSY
    assert figs["kmeans.spmd_ms_per_iteration"].cpu is None


# --- retries and the command's exit ------------------------------------------------------------


def v(verdict: str, value: float = 1.87) -> dict[str, Any]:
    cpu, reason = (BUSY, "ranks starved: test") if verdict == "inconclusive" else (QUIET, None)
    bounds = (0.805, 1.495)
    return Verdict(
        STEP, value, "x", 1.15, bounds, verdict, None, 0, "no history", cpu, reason
    ).to_dict()


def confirm(tmp_path: Path, *plan: list[dict[str, Any]]) -> Any:
    queue = list(plan)

    def run(where: Path, select: str | None) -> SmokeReport:
        report = SmokeReport("img", "podman", "podman://x", "now", 1.0, 0, [], where)
        report.references = queue.pop(0)
        return report

    return run_confirmed(run, tmp_path / "r", None, len(plan) - 1, lambda _: None)


@pytest.mark.parametrize(
    ("plan", "failed", "inconclusive"),
    [
        (["inconclusive", "inconclusive"], [], [STEP]),
        (["inconclusive", "pass"], [], []),
        (["inconclusive", "regression"], [STEP], []),  # the judged run decides
        (["regression", "inconclusive"], [STEP], []),  # a starved retry clears nothing
        (["regression", "regression"], [STEP], []),
        (["regression", "pass"], [], []),
    ],
)
def test_starved_runs_neither_confirm_nor_clear(
    tmp_path: Path, plan: list[str], failed: list[str], inconclusive: list[str]
) -> None:
    got = confirm(tmp_path, *[[v(x)] for x in plan])
    assert (list(got.failed), list(got.inconclusive)) == (failed, inconclusive)
    assert len(got.reports) == 2


def test_outcome_lines_say_inconclusive_with_the_measured_reason(tmp_path: Path) -> None:
    got = confirm(tmp_path, [v("inconclusive")], [v("inconclusive", 1.9)])
    assert outcome_lines(got) == [
        f"inconclusive: {STEP} = 1.9 x, outside 0.805..1.495; ranks starved: test"
    ]


@pytest.fixture
def fake_smoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[dict[str, Any]]]:
    import hpcenv.datasets as datasets
    import hpcenv.smoke.runner as runner

    plan: list[list[dict[str, Any]]] = []

    def run_smoke(image: str, results_dir: Path, **kw: Any) -> SmokeReport:
        report = SmokeReport(image, "podman", "podman://x", "now", 1.0, 0, [], results_dir)
        report.references = plan.pop(0)
        return report

    class Staged:
        directory = tmp_path

    monkeypatch.setattr(runner, "run_smoke", run_smoke)
    monkeypatch.setattr(runner, "require_image", lambda image, backend: None)
    monkeypatch.setattr(runner, "runs_as", lambda image, backend: "native")
    monkeypatch.setattr(datasets, "prepare_mnist", lambda: Staged())
    return plan


def test_an_inconclusive_figure_exits_0_and_says_so(
    runner: Any, tmp_path: Path, fake_smoke: list[list[dict[str, Any]]]
) -> None:
    fake_smoke.extend([[v("inconclusive")], [v("inconclusive")]])
    argv = ["smoke", "--site", "local", "--results", str(tmp_path / "r"), "--check-references"]
    result = runner.invoke(app, [*argv, "--json"])
    assert result.exit_code == 0, result.output
    assert f"inconclusive: {STEP} = 1.87 x, outside 0.805..1.495; ranks starved" in result.output
    assert "inconclusive; running (test_mnist_horovod and not ccl) again" in result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    (said,) = doc["reference_outcome"]["inconclusive"]
    assert said["figure"] == STEP and said["load"] == BUSY and said["reason"]
    assert doc["reference_outcome"]["failed"] == []
    assert doc["references"][0]["verdict"] == "inconclusive"


def test_rank_docs_read_files_catted_back_to_back() -> None:
    """``cat dir/*.json`` of ``_cpu.py``'s files: objects with no newline between them."""
    text = '{"run_ns": 100, "wait_ns": 4}{"run_ns": 300, "wait_ns": 5}{"run_ns"'
    assert [d["run_ns"] for d in rank_docs(text)] == [100, 300]
