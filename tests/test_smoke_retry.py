"""``hpcenv smoke --check-references`` confirms a regression before it fails the run: the checks
behind a regressed figure run again (``--reference-retries``, default 1, like ReFrame's
``--max-retries``) and only a figure that regresses in every run fails. The smoke runner is the
faked boundary here; tests/test_smoke_podman.py runs the whole path for real (an injected slowdown
regresses twice and fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpcenv.cli.main import app
from hpcenv.smoke.references import Verdict, checks_behind, regressed
from hpcenv.smoke.report import SmokeReport

STEP = "mnist_horovod.step_per_compute"
KMEANS = "kmeans.sklearn_per_batch"


def verdict(figure: str, outcome: str) -> dict[str, Any]:
    bounds = (0.805, 1.495)
    return Verdict(figure, 2.0, "x", 1.15, bounds, outcome, None, 0, "no history").to_dict()


def test_checks_behind_names_the_smoke_test_of_each_figure() -> None:
    assert checks_behind([STEP]) == "(test_mnist_horovod and not ccl)"
    expr = checks_behind([STEP, KMEANS, "allreduce.mpi4py.busbw_per_copy"])
    assert expr == (
        "(test_allreduce and mpi4py) or (test_mnist_horovod and not ccl) or test_kmeans_daal4py"
    )
    # only the flavour behind an allreduce figure runs again (and mpi4py for a ratio to it)
    per = checks_behind(["allreduce.horovod-mpi.busbw_64MiB_per_mpi4py"])
    assert per == "(test_allreduce and horovod-mpi) or (test_allreduce and mpi4py)"
    assert checks_behind(["mnist_horovod_ccl.step_per_compute"]) == "test_mnist_horovod_ccl"
    with pytest.raises(ValueError):
        checks_behind([])


def test_regressed_keeps_only_regressions() -> None:
    found = regressed([verdict(STEP, "regression"), verdict(KMEANS, "improvement")])
    assert list(found) == [STEP]


class FakeRuns:
    """Stands in for run_smoke: each call takes the next list of verdicts from ``plan``."""

    def __init__(self, *plan: list[dict[str, Any]]) -> None:
        self.plan = list(plan)
        self.calls: list[tuple[Path, list[str]]] = []

    def __call__(self, image: str, results_dir: Path, **kw: Any) -> SmokeReport:
        self.calls.append((results_dir, list(kw["pytest_args"])))
        report = SmokeReport(image, "podman", "podman://x", "now", 1.0, 0, [], results_dir)
        report.references = self.plan.pop(0)
        return report


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeRuns:
    import hpcenv.datasets as datasets
    import hpcenv.smoke.runner as runner

    runs = FakeRuns()

    class Staged:
        directory = tmp_path

    monkeypatch.setattr(runner, "run_smoke", runs)
    monkeypatch.setattr(runner, "require_image", lambda image, backend: None)
    monkeypatch.setattr(runner, "runs_as", lambda image, backend: "native")
    monkeypatch.setattr(datasets, "prepare_mnist", lambda: Staged())
    return runs


def smoke(runner: Any, tmp_path: Path, *extra: str) -> Any:
    argv = ["smoke", "--site", "local", "--results", str(tmp_path / "r"), "--check-references"]
    return runner.invoke(app, [*argv, *extra])


def test_a_regression_that_does_not_repeat_passes(
    runner: Any, tmp_path: Path, fake: FakeRuns
) -> None:
    fake.plan.extend([[verdict(STEP, "regression")], [verdict(STEP, "pass")]])
    result = smoke(runner, tmp_path)
    assert result.exit_code == 0, result.output
    assert "running (test_mnist_horovod and not ccl) again to confirm" in result.output
    assert [args for _, args in fake.calls] == [[], ["-k", "(test_mnist_horovod and not ccl)"]]
    assert fake.calls[1][0] == tmp_path / "r-retry-1"  # beside the first: the same history


def test_a_regression_that_repeats_fails(runner: Any, tmp_path: Path, fake: FakeRuns) -> None:
    fake.plan.extend([[verdict(STEP, "regression")], [verdict(STEP, "regression")]])
    result = smoke(runner, tmp_path)
    assert result.exit_code == 1
    assert f"regression: {STEP} = 2 x, outside 0.805..1.495" in result.output


def test_only_figures_that_regressed_every_time_fail(
    runner: Any, tmp_path: Path, fake: FakeRuns
) -> None:
    """A figure that regresses only in the retry was not the one being confirmed."""
    first = [verdict(STEP, "regression"), verdict(KMEANS, "pass")]
    fake.plan.extend([first, [verdict(STEP, "pass"), verdict(KMEANS, "regression")]])
    result = smoke(runner, tmp_path)
    assert result.exit_code == 0, result.output


def test_no_retries_fails_at_once(runner: Any, tmp_path: Path, fake: FakeRuns) -> None:
    fake.plan.append([verdict(STEP, "regression")])
    result = smoke(runner, tmp_path, "--reference-retries", "0")
    assert result.exit_code == 1
    assert len(fake.calls) == 1


def test_no_regression_runs_once(runner: Any, tmp_path: Path, fake: FakeRuns) -> None:
    fake.plan.append([verdict(STEP, "pass")])
    assert smoke(runner, tmp_path).exit_code == 0
    assert len(fake.calls) == 1


def test_retries_are_bounded(runner: Any, tmp_path: Path) -> None:
    result = runner.invoke(app, ["smoke", "--site", "local", "--reference-retries", "9"])
    assert result.exit_code == 2
    assert "--reference-retries" in result.output
