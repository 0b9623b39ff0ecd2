"""Issue 21's bench targets without podman: the K-Means physical limit and the CPU's vector
extensions, the start-up tax row, the user-recipe rebuild row and the targets one run cannot
measure (the floor over three runs from its history, set-up time, the public training
benchmark). The container is faked where a section runs; the real run is ``make bench``
(sections kmeans, startup, rebuild, targets).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import hpcenv.bench.compute as compute
from hpcenv.bench.comm import STARTUP_GOAL, startup_target
from hpcenv.bench.context import BenchConfig, BenchContext
from hpcenv.bench.report import (
    BenchReport,
    Headline,
    Section,
    better_direction,
    informational_table,
    render_markdown,
    report_from_json,
    targets_table,
)
from hpcenv.bench.runner import SECTION_NAMES
from hpcenv.bench.targets import (
    FLOOR_RUNS,
    HISTORY_KEEP,
    append_history,
    floor_history_path,
    floor_over_runs,
    read_history,
    read_setup_history,
    setup_history_path,
    setup_time_row,
    targets_section,
    unmeasured_rows,
)
from hpcenv.bench.userbuild import (
    ADDED,
    REQUIREMENTS_A,
    cached_steps,
    rebuild_headline,
    rebuild_section,
    user_recipe,
)
from hpcenv.jobs.placement import place
from hpcenv.shells import Result
from hpcenv.site import load_site

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu sse2
"""
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 sve\n"


def _ctx(tmp_path: Path, quick: bool = False, **shared: Any) -> BenchContext:
    site = load_site("local")
    cfg = BenchConfig(out=tmp_path / "out", quick=quick)
    ctx = BenchContext(
        cfg=cfg, image="img:x", echo=lambda line: None, site=site, tuning=place(site, 1, 2)
    )
    ctx.shared.update(shared)
    return ctx


def kmeans_doc(spmd_s: float = 0.15, batch_s: float = 0.17, sk_s: float = 0.23) -> dict[str, Any]:
    return {
        "rows": 1_000_000,
        "features": 10,
        "clusters": 10,
        "max_iterations": 10,
        "dtype": "float32",
        "reps": 5,
        "daal4py": "2026.2.0",
        "daal4py_spmd": {"seconds": spmd_s, "iterations": 10, "objective": 1.0},
        "daal4py_batch": {"seconds": batch_s, "threads": 2, "iterations": 10, "objective": 1.0},
        "sklearn": {
            "seconds": sk_s,
            "threads": 2,
            "iterations": 10,
            "objective": 1.0,
            "version": "1.9.1",
        },
        "sklearnex": {"error": "ImportError: no"},
        "spmd_vs_batch_rel_diff": 1e-7,
        "sklearn_vs_batch_rel_diff": 1e-6,
    }


# -- K-Means physical limit and the CPU's vector extensions ----------------------------------
def test_vector_extensions_of_x86_and_arm() -> None:
    assert compute.vector_extensions(X86) == [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
    ]
    assert compute.vector_extensions(ARM) == ["asimd", "sve"]
    assert compute.vector_extensions("processor : 0\n") == []


def test_host_vector_extensions_reads_the_file_or_says_why(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(X86, encoding="utf-8")
    assert compute.host_vector_extensions(tmp_path / "cpuinfo").startswith("sse4_2 avx avx2 fma")
    assert compute.host_vector_extensions(tmp_path / "none").startswith("unknown (")
    (tmp_path / "bare").write_text("processor : 0\n", encoding="utf-8")
    assert compute.host_vector_extensions(tmp_path / "bare") == "none listed"


def test_bytes_per_iteration_model() -> None:
    # points read once + centroids read and written, each byte once (like the copy's GB/s)
    assert compute.kmeans_bytes_per_iteration(1_000_000, 10, 10, "float32") == 40_000_800
    assert compute.kmeans_bytes_per_iteration(100, 2, 3, "float64") == (200 + 12) * 8
    with pytest.raises(KeyError):
        compute.kmeans_bytes_per_iteration(1, 1, 1, "int8")


def test_kmeans_limit_takes_the_fastest_method_and_the_copy_bandwidth() -> None:
    limit = compute.kmeans_limit(kmeans_doc(), 8.0)
    assert limit["method"] == "daal4py_spmd" and limit["seconds_per_iteration"] == 0.015
    assert limit["achieved_GBps"] == pytest.approx(40_000_800 / 0.015 / 1e9)
    assert limit["copy_over_achieved"] == pytest.approx(8.0 / limit["achieved_GBps"])
    head = compute.limit_headline(limit, "image")
    assert (
        head.goal == "<= 3" and head.value == pytest.approx(3.0, rel=1e-3) and head.ratio == "3.00x"
    )
    assert "vs 8 GB/s; 38.1 MiB in 15 ms" in head.values and "memcopy section" in head.note
    assert better_direction(head.measure) == ""  # no " / ": the ratio's direction is the goal's
    # issue 39: not judged on two cores, shown in the informational table with why
    assert head.met is None and "distance arithmetic" in head.informational
    report = BenchReport({}, [Section("kmeans", "K", headline=[head])])
    assert "K-Means physical limit" not in targets_table(report)
    info = informational_table(report)
    assert "K-Means physical limit" in info and "distance arithmetic" in info and "| 3 |" in info
    assert "## Informational: goals this machine cannot judge" in render_markdown(report)
    none = compute.limit_headline(compute.kmeans_limit(kmeans_doc(), None), "host")
    assert none.met is None and "Not measured: this run has no memcopy section" in none.note


class KmeansContainer:
    def run(self, command: str, env: Any = None, timeout: float = 600) -> Result:
        assert "kmeans_f32.py" in command
        return Result("image", command, {}, 0, "", "", 1.0, kmeans_doc())


def test_kmeans_section_adds_the_limit_row_and_vector_extensions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compute, "host_vector_extensions", lambda: "avx2 fma avx512f")
    ctx = _ctx(tmp_path, memcopy={"host": 8.2, "image": 8.0})
    ctx.container = KmeansContainer()  # type: ignore[assignment]
    sec = compute.kmeans_section(ctx)
    heads = {h.measure.split(":")[0]: h for h in sec.headline}
    assert [h.goal for h in sec.headline] == [">= 1.2", ">= 1.2", "<= 3"]
    for h in sec.headline[:2]:
        assert h.values.endswith("CPU vector extensions: avx2 fma avx512f"), h.values
    limit = heads["K-Means physical limit"]
    assert limit.value == pytest.approx(8.0 / (40_000_800 / 0.015 / 1e9))
    assert sec.data["physical_limit"]["copy_GBps"] == 8.0  # the image's copy: K-Means ran there
    assert any("CPU vector extensions (/proc/cpuinfo): avx2 fma avx512f" in t for t in sec.text)


# -- start-up tax ----------------------------------------------------------------------------
def test_startup_target_picks_the_faster_launch_by_measurement() -> None:
    head = startup_target(
        0.38,
        {"long-lived container + podman exec": 0.45, "podman run --rm per launch": 0.8},
        "OCI runtime in use: runc (podman info). crun (hpcenv doctor): broken, crun refuses hybrid",
    )
    assert head.goal == STARTUP_GOAL == "<= 1.10"
    assert "image (long-lived container + podman exec, the faster launch" in head.measure
    assert head.value == pytest.approx(0.45 / 0.38) and head.met is False
    assert "podman run --rm per launch 0.8 s" in head.values
    assert "crun (hpcenv doctor): broken" in head.note
    assert better_direction(head.measure) == "lower = image better"
    faster = startup_target(0.5, {"a": 0.52, "b": None}, "runc")
    assert faster.met is True and "image (a," in faster.measure
    nothing = startup_target(0.5, {"a": None}, "runc")
    assert nothing.met is None and nothing.note.startswith("Not measured: no image launch ran.")


class StartupShell:
    """The host and the long-lived container: every command succeeds at once."""

    where = "fake"
    direct = None  # no runtime exec: the section measures podman exec alone

    def run(
        self, command: str, env: Any = None, timeout: float = 600, *, via_podman: bool = False
    ) -> Result:
        return Result(self.where, command, {}, 0, "", "", 0.0, None)


def test_startup_section_survives_a_failing_candidate_and_names_the_runtimes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    import hpcenv.bench.comm as comm
    import hpcenv.shells as shells
    from hpcenv.doctor import Check

    calls: list[tuple[str, ...]] = []

    def fake_podman(*args: str, check: bool = True, timeout: float = 600) -> Any:
        calls.append(args)
        if args[:1] == ("info",):
            return subprocess.CompletedProcess(args, 0, "runc\n", "")
        if "bash" in args:  # the per-launch candidate fails: reported, the section goes on
            raise shells.BenchCommandError("podman run --rm img:x failed: boom")
        return subprocess.CompletedProcess(args, 0, "", "")

    checks = {
        "runc": Check("oci-runtime", "runc", "ok", "runc version 1.1.5"),
        "crun": Check("oci-runtime", "crun", "broken", "crun refuses hybrid v1/v2 cgroup hosts"),
    }
    monkeypatch.setattr(shells, "podman", fake_podman)
    monkeypatch.setattr(comm, "runtime_checks", lambda: checks)
    ctx = _ctx(tmp_path, quick=True)
    ctx.host = StartupShell()  # type: ignore[assignment]
    ctx.container = StartupShell()  # type: ignore[assignment]
    sec = comm.startup_section(ctx)
    assert ("--runtime", "runc", "run", "--rm", "img:x", "true") in calls
    assert not any("crun" in a for a in calls)  # doctor says broken: not run, not assumed
    head = sec.headline[0]
    assert head.goal == "<= 1.10" and "long-lived container + podman exec" in head.measure
    assert "OCI runtime in use: runc (podman info)" in head.note
    assert "crun (hpcenv doctor): broken, crun refuses hybrid" in head.note
    table = sec.tables[0].markdown()
    assert "`podman --runtime crun run --rm IMAGE true` (not measured: crun refuses" in table
    assert "per launch) (failed: podman run --rm img:x failed: boom)" in table
    assert sec.data["failed"] == {"per-launch": "podman run --rm img:x failed: boom"}


def test_runtime_checks_come_from_doctor() -> None:
    from hpcenv.bench.comm import runtime_checks
    from hpcenv.doctor import Host, check_crun

    checks = runtime_checks()
    assert set(checks) == {"runc", "crun"}
    assert checks["crun"] == check_crun(Host())  # the bench says what doctor says, no more


# -- rebuild of a user recipe ----------------------------------------------------------------
def test_user_recipe_resolves_and_renders_for_the_local_site(tmp_path: Path) -> None:
    from hpcenv.build import make_plans

    recipe = user_recipe(tmp_path / "u", (*REQUIREMENTS_A, ADDED))
    assert (tmp_path / "u" / "requirements.txt").read_text() == "tabulate==0.9.0\nsix\n"
    plan = make_plans(load_site("local"), [str(recipe)], {}, tmp_path / "ctx", owned=True)[0]
    assert plan.tag == "localhost/hpcenv/hpcenv-bench-user:local"
    docker = plan.rendered.dockerfile
    # the user's packages install after the matched stack: the rebuild reuses the stack's layers
    pip = docker.index("install --no-cache-dir -c /opt/hpcenv-user/constraints.txt")
    assert docker.index("COPY --from=build /opt/venv /opt/venv") < pip
    assert docker[pip:].split("\n", 1)[0].endswith("tabulate==0.9.0 six && \\")


def test_cached_steps_counts_layers_from_the_cache() -> None:
    log = (
        "[1/2] STEP 1/3: FROM base AS build\n"
        "[1/2] STEP 2/3: RUN a\n--> Using cache 0123456789abcdef\n"
        "[2/2] STEP 1/2: FROM base\n"
        "[2/2] STEP 2/2: RUN pip install six\n--> 89abcdef0123456\n"
    )
    assert cached_steps(log) == (1, 4)


def test_rebuild_headline_goal_and_not_measured() -> None:
    timing = {"seconds": 41.5, "build_s": 39.0, "cached": 20, "steps": 24}
    head = rebuild_headline(timing)
    assert head.goal == "<= 60" and head.met is True and head.value == 41.5
    assert "20/24 steps from the layer cache" in head.values
    assert rebuild_headline(timing | {"seconds": 75.0}).met is False
    none = rebuild_headline(None, "--quick runs no builds.")
    assert none.met is None and none.note == "Rebuild not measured: --quick runs no builds."


def test_rebuild_section_quick_builds_nothing(tmp_path: Path) -> None:
    sec = rebuild_section(_ctx(tmp_path, quick=True))
    assert sec.headline[0].met is None and "--quick" in sec.headline[0].note
    assert not (tmp_path / "out" / "_work" / "user-rebuild").exists()


# -- targets one run cannot measure ----------------------------------------------------------
def test_history_round_trip_keeps_the_last_entries(tmp_path: Path) -> None:
    path = tmp_path / "bench" / "floor.jsonl"
    assert read_history(path) == []
    for i in range(HISTORY_KEEP + 3):
        append_history(path, {"date": str(i), "image": "i", "losses": []})
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"torn": \n')
    kept = read_history(path)
    assert len(kept) == HISTORY_KEEP and kept[-1]["date"] == str(HISTORY_KEEP + 2)


def test_floor_over_runs_needs_three_and_judges_the_union() -> None:
    two = [{"date": "d1", "losses": []}, {"date": "d2", "losses": []}]
    head = floor_over_runs(two, "/c/floor.jsonl")
    assert head.met is None and "2 run(s) of this image and kind recorded so far" in head.note
    met = floor_over_runs([{"date": "d0", "losses": [8]}, *two, {"date": "d3", "losses": []}], "f")
    assert met.met is True and met.value == 0 and "d1: none; d2: none; d3: none" in met.note
    missed = floor_over_runs(
        [*two, {"date": "d3", "losses": [32, 512 * 1024]}, {"date": "d4", "losses": [32]}], "f"
    )
    assert missed.met is False and missed.value == 2 and missed.values == "32 B, 512 KiB"
    assert FLOOR_RUNS == 3


def test_targets_section_records_runs_and_judges_the_last_three(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    floor = {"sizes": 13, "losses": [], "rounds": 16, "latency_rounds": 16}
    heads = []
    for _ in range(2):
        heads.append(targets_section(_ctx(tmp_path, floor=floor)).headline[0])
    # a --quick run (8 rounds) is judged with quick runs, a full run with full runs (issue 39)
    quick_floor = {"sizes": 13, "losses": [8], "rounds": 8, "latency_rounds": 8}
    quick = targets_section(_ctx(tmp_path, quick=True, floor=quick_floor)).headline[0]
    assert [h.met for h in heads] == [None, None] and quick.met is None
    assert "1 run(s) of this image and kind" in quick.note
    assert "last 3 quick (8 rounds + 8 short) bench runs" in quick.measure
    third = targets_section(_ctx(tmp_path, floor=floor)).headline[0]
    assert third.met is True and "last 3 full (16 rounds + 16 short) bench runs" in third.measure
    no_floor = targets_section(_ctx(tmp_path))
    path = floor_history_path("local")
    assert path.is_relative_to(tmp_path / "cache") and len(read_history(path)) == 4
    assert [e["quick"] for e in read_history(path)] == [False, False, True, False]
    assert no_floor.headline[0].met is True  # no verdict of its own: the latest kind's row
    assert no_floor.data["floor_kind"] == "full (16 rounds + 16 short)"
    # an older method (no short launches) starts no count with the new one
    old = _ctx(tmp_path, floor={"sizes": 13, "losses": [], "rounds": 16})
    assert targets_section(old).headline[0].met is None
    other = _ctx(tmp_path)
    other.image = "another:image"
    assert targets_section(other).headline[0].met is None  # runs of another image do not count
    retuned = _ctx(tmp_path)
    retuned.measured = SimpleNamespace(date="2026-11-28T11:00:00+00:00")  # type: ignore[assignment]
    assert targets_section(retuned).headline[0].met is None  # a new measured tuning: a new count
    assert [h.goal for h in no_floor.headline[1:]] == [h.goal for h in unmeasured_rows()]


def test_targets_table_prints_not_measured_with_notes() -> None:
    sec = Section(
        "targets",
        "T",
        headline=[
            Headline("measured row", "1 s", "1 s", "<= 60", 1.0),
            *unmeasured_rows(),
        ],
    )
    report = BenchReport({"date": "d"}, [sec])
    table = targets_table(report)
    assert "| measured row | <= 60 | 1 | met |" in table
    assert "| Set-up time on a fresh machine: `make smoke-test` + `make test`, seconds [1] |" in (
        table
    )
    assert table.count("| not measured |") == 2
    assert "\n[1] Set-up time not measured: it needs a fresh machine" in table
    assert "\n[2] Public training benchmark not measured:" in table
    md = render_markdown(report)
    assert "(issues 12 and 21)" in md
    headline = md.split("## Headline", 1)[1]
    assert "| Set-up time not measured: it needs a fresh machine" in headline.split("\n", 5)[-1]
    back = report_from_json(json.loads(json.dumps(report.to_json())))
    assert back.headline[1].note == unmeasured_rows()[0].note


def test_new_sections_are_registered_and_targets_run_last() -> None:
    from hpcenv.bench.runner import _sections

    assert {"rebuild", "targets"} <= set(_sections())
    assert SECTION_NAMES[-1] == "targets"
    assert SECTION_NAMES.index("rebuild") < SECTION_NAMES.index("build")


# -- set-up time: scripts/fresh-setup-time.sh's history -------------------------------------
def _setup(**kw: Any) -> dict[str, Any]:
    entry = {
        "date": "2026-11-24 17:40 UTC",
        "commit": "e150497",
        "smoke_test_s": 1500,
        "smoke_test_rc": 0,
        "test_s": 2400,
        "test_rc": 0,
        "pytest": "2630 passed, 2 skipped in 2390.1s",
    }
    return entry | kw


def test_setup_row_reports_the_latest_successful_record() -> None:
    head = setup_time_row([_setup(test_s=9999), _setup()], "/c/setup.jsonl")
    assert head.value == 3900.0 and head.met is False  # goal <= 2100 s
    assert head.values == "smoke-test 25 min + test 40 min" and head.ratio == "3900 s"
    assert "at commit e150497 (2630 passed, 2 skipped" in head.note
    fast = setup_time_row([_setup(smoke_test_s=600, test_s=1200)], "f")
    assert fast.met is True


def test_setup_row_is_not_measured_without_a_record_or_after_a_failed_run() -> None:
    none = setup_time_row([], "")
    assert none.met is None and "scripts/fresh-setup-time.sh measures it" in none.note
    failed = setup_time_row([_setup(), _setup(test_rc=1)], "/c/setup.jsonl")
    assert failed.met is None and failed.value is None
    assert "failed: make smoke-test exit 0, make test exit 1" in failed.note
    no_test = setup_time_row([_setup(smoke_test_rc=2, test_rc=-1)], "f")
    assert "failed: make smoke-test exit 2, make test not run" in no_test.note


def test_setup_history_skips_bad_lines_and_keeps_text_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "setup.jsonl"
    good = _setup(commit="e150497\n## injected", pytest="ok\u2028## injected")
    lines = [
        json.dumps(_setup(test_s="2400")),  # a string where a number belongs
        json.dumps(_setup(smoke_test_s=-5)),
        json.dumps({"date": "x"}),
        "[1, 2]",
        '{"torn": ',
        json.dumps(good),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    entries = read_setup_history(path)
    assert entries == [json.loads(json.dumps(good))]
    head = setup_time_row(entries, str(path))
    assert "\n" not in head.note and "\u2028" not in head.note
    assert "at commit ? (ok ## injected)" in head.note  # not a commit id: shown as '?'


def test_targets_section_reads_the_setup_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    path = setup_history_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_setup()) + "\n", encoding="utf-8")
    sec = targets_section(_ctx(tmp_path))
    setup = [h for h in sec.headline if h.measure.startswith("Set-up time")]
    assert len(setup) == 1 and setup[0].value == 3900.0
    assert sum(h.measure.startswith("Public training") for h in sec.headline) == 1


SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fresh-setup-time.sh"


def _stub_bin(tmp_path: Path) -> dict[str, str]:
    """PATH with stand-ins for make (prints a pytest-like summary) and podman (records its
    arguments): the script's own logic runs, nothing is built or tested."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(
        '#!/bin/sh\necho "make $1"\n[ "$1" = test ] && echo "3 passed in 1.00s"\nexit 0\n'
    )
    (bin_dir / "podman").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/podman.args\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_fresh_setup_script_records_a_line_the_targets_row_reads(tmp_path: Path) -> None:
    """The script with make and podman stubbed: its JSON line is the one read_setup_history
    and setup_time_row read (one format, two languages, checked together); a second run
    replaces the work folder it made."""
    import subprocess

    build_cache = tmp_path / "buildah-cache" / "hpcenv-ccache"
    env = _stub_bin(tmp_path) | {
        "HPCENV_CACHE": str(tmp_path / "cache"),
        # never the real compiler cache of this machine: the script removes the one it names
        "HPCENV_FRESH_BUILD_CACHE": str(build_cache),
    }
    work = tmp_path / "work"
    build_cache.mkdir(parents=True)
    (build_cache / "a.o").write_text("object")
    for _ in range(2):
        proc = subprocess.run(
            ["bash", str(SCRIPT), str(work)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
    assert (work / ".hpcenv-fresh-setup").is_file() and (work / "clone" / "Makefile").is_file()
    assert 'graphroot = "' + str(work / "graph") + '"' in (work / "storage.conf").read_text()
    entries = read_setup_history(tmp_path / "cache" / "bench" / "setup-history.jsonl")
    assert len(entries) == 2 and entries[-1]["pytest"] == "3 passed in 1.00s"
    assert entries[-1]["smoke_test_rc"] == 0 and entries[-1]["test_rc"] == 0
    head = setup_time_row(entries, "h")
    assert head.met is True and "(3 passed in 1.00s)" in head.note
    assert "rm -af" in (tmp_path / "podman.args").read_text()  # the second run cleaned up first
    assert not build_cache.exists() and build_cache.parent.is_dir()  # a fresh compiler cache


def test_fresh_setup_script_refuses_a_work_folder_it_did_not_make(tmp_path: Path) -> None:
    """The script removes its work folder first: a folder it did not make (no marker) is
    refused before anything runs, exit 2 and one line, and keeps its files."""
    import subprocess

    env = _stub_bin(tmp_path)
    mine = tmp_path / "someone-elses"
    mine.mkdir()
    (mine / "data.txt").write_text("keep me")
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(mine / "sub" / "..")],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"fresh-setup-time: refusing WORKDIR {mine}: it exists and this script did not make "
        "it (no .hpcenv-fresh-setup in it)\n"
    )
    assert (mine / "data.txt").read_text() == "keep me"
    assert not (tmp_path / "podman.args").exists()
