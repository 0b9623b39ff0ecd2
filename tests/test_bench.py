"""hpcenv bench: report writing, ratio math, rules files, Dockerfile surgery, log parsing.

No timing is asserted anywhere: the numbers themselves come from real runs (``make bench``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from requirements import need_module

from hpcenv.bench.buildcost import (
    instructions,
    logged_build,
    parse_build_log,
    parse_created,
    single_stage_dockerfile,
    stages,
    timeline_seconds,
)
from hpcenv.bench.comm import latency_spread, paired_ratios, sweep_flags
from hpcenv.bench.report import (
    BenchReport,
    Headline,
    Section,
    Table,
    at_size,
    best_sweep,
    fmt_bytes,
    fmt_ratio,
    geomean,
    largest_common,
    markdown_table,
    publish,
    ratio,
    readme_section,
    render_markdown,
    report_from_json,
    sweep_ratios,
    write_report,
)
from hpcenv.shells import last_json
from hpcenv.sweep.measure import sign_test


def row(size: int, bw: float, t: float = 1.0) -> dict[str, float]:
    return {"bytes": size, "busbw_GBps": bw, "algbw_GBps": bw, "time_us": t}


# -- numbers -----------------------------------------------------------------------------------
def test_ratio_handles_missing_zero_and_nan() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None
    assert ratio(float("nan"), 1.0) is None
    assert ratio(1.0, float("inf")) is None


def test_geomean_ignores_missing_and_nonpositive() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, None, 0.0, -1.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    assert geomean([None]) is None


def test_formatting() -> None:
    assert fmt_bytes(8) == "8 B"
    assert fmt_bytes(32 << 10) == "32 KiB"
    assert fmt_bytes(64 << 20) == "64 MiB"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_ratio(None) == "n/a"
    assert fmt_ratio(1.234) == "1.23x"
    assert fmt_ratio(0.5, 3) == "0.500x"


# -- sweeps ------------------------------------------------------------------------------------
def test_best_sweep_takes_the_best_row_per_size() -> None:
    a = [row(8, 0.01, 1.0), row(1024, 0.5, 2.0)]
    b = [row(8, 0.02, 0.5), row(1024, 0.4, 2.5), row(4096, 1.0)]
    merged = best_sweep(a, b)
    assert [r["bytes"] for r in merged] == [8, 1024, 4096]
    assert [r["busbw_GBps"] for r in merged] == [0.02, 0.5, 1.0]
    assert merged[0]["time_us"] == 0.5  # the whole row of the best run, not a mix
    merged[0]["busbw_GBps"] = 99.0
    assert b[0]["busbw_GBps"] == 0.02  # inputs untouched


def test_sweep_ratios_only_at_common_sizes() -> None:
    num = [row(8, 1.0, 4.0), row(128, 3.0), row(2048, 4.0)]
    den = [row(8, 2.0, 2.0), row(32, 1.0), row(2048, 2.0)]
    assert sweep_ratios(num, den) == {8: 0.5, 2048: 2.0}
    assert sweep_ratios(num, den, key="time_us") == {8: 2.0, 2048: 1.0}
    assert largest_common(num, den) == 2048
    assert largest_common(num, []) is None
    assert at_size(num, 128) == 3.0
    assert at_size(num, 7) is None


def test_markdown_table_escapes_and_checks_width() -> None:
    text = markdown_table(["a", "b"], [["x|y", 1.5]])
    assert text.splitlines() == ["| a | b |", "|:---|---:|", "| x\\|y | 1.5 |"]
    with pytest.raises(ValueError):
        markdown_table(["a", "b"], [["only one"]])


def sample_report() -> BenchReport:
    sec = Section("allreduce", "Container tax", seconds=12.3)
    sec.text.append("Interleaved runs.")
    sec.tables.append(Table("sweep", ["size", "ratio"], [["8 B", "1.00x"]], "a note"))
    sec.headline.append(Headline("image / host", "1 vs 2 GB/s", fmt_ratio(ratio(1, 2))))
    sec.plots.append("allreduce_bandwidth.png")
    sec.data["series"] = {"host": [row(8, 1.0)]}
    failed = Section("kmeans", "K-Means", error="BenchCommandError: boom")
    meta = {
        "date": "2026-01-01 00:00 UTC",
        "machine": "test box",
        "image": "img:tag",
        "quick": True,
        "seconds": 42.0,
        "notes": ["checks mounted"],
    }
    return BenchReport(meta, [sec, failed])


def test_render_markdown_has_headline_sections_and_failures() -> None:
    md = render_markdown(sample_report())
    assert md.startswith("# hpcenv benchmarks (2026-01-01 00:00 UTC)")
    assert "| image / host | 1 vs 2 GB/s | 0.50x |" in md
    assert "## Container tax" in md and "**sweep**" in md and "a note" in md
    assert "![allreduce_bandwidth](allreduce_bandwidth.png)" in md
    assert "**Section failed:** BenchCommandError: boom" in md
    assert "- checks mounted" in md
    assert "--quick (the headline ratios)" in md


def test_write_report_writes_markdown_and_json(tmp_path: Path) -> None:
    report = sample_report()
    md, js = write_report(report, tmp_path / "out")
    assert md.read_text() == render_markdown(report)
    doc = json.loads(js.read_text())
    assert doc["meta"]["machine"] == "test box"
    assert [s["key"] for s in doc["sections"]] == ["allreduce", "kmeans"]
    assert doc["sections"][0]["headline"][0]["ratio"] == "0.50x"
    assert doc["sections"][0]["data"]["series"]["host"][0]["bytes"] == 8
    assert doc["sections"][1]["error"].startswith("BenchCommandError")
    assert report.section("kmeans") is not None and report.section("nope") is None


# -- Dockerfiles and build logs ----------------------------------------------------------------
TWO_STAGE = """\
# syntax=docker/dockerfile:1
FROM localhost/base:1 AS build
SHELL ["/bin/bash", "-c"]
COPY hpcenv-build /opt/hpcenv-build
ENV PIP_CONFIG_FILE="/opt/hpcenv-build/pip.conf"
RUN apt-get update && \\
    apt-get install -y gcc python3-venv
# comment between instructions
RUN python3 -m venv /opt/venv

FROM localhost/base:1 AS runtime
SHELL ["/bin/bash", "-c"]
RUN apt-get update && \\
    apt-get install -y libgomp1
COPY --from=build /opt/venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
COPY checks /opt/hpcenv/checks
USER hpc
"""


def test_instructions_join_continuations_and_skip_comments() -> None:
    ins = instructions(TWO_STAGE)
    assert [i.keyword for i in ins][:5] == ["FROM", "SHELL", "COPY", "ENV", "RUN"]
    assert ins[4].text.count("\n") == 1 and "gcc" in ins[4].text
    assert [len(s) for s in stages(TWO_STAGE)] == [6, 7]


def test_single_stage_dockerfile_keeps_the_commands_in_one_stage() -> None:
    naive = single_stage_dockerfile(TWO_STAGE)
    ins = instructions(naive)
    assert [i.keyword for i in ins].count("FROM") == 1
    assert ins[0].text == "FROM localhost/base:1"
    body = "\n".join(i.text for i in ins)
    assert "COPY hpcenv-build" not in body  # bind-mounted at build time instead
    assert "--from=" not in body
    # the runtime apt step stays: a stack that compiles nothing has its MPI only there
    assert "libgomp1" in body
    assert body.index("gcc python3-venv") < body.index("libgomp1")
    assert "python3 -m venv /opt/venv" in body and "gcc" in body
    assert body.rstrip().endswith("USER hpc")
    assert "COPY checks /opt/hpcenv/checks" in body
    with pytest.raises(ValueError):
        single_stage_dockerfile("FROM a\nRUN true\n")


def test_parse_build_log_maps_steps_to_layers_and_cache() -> None:
    log = """\
$ podman build --layers -f Dockerfile -t x .
[1/2] STEP 1/3: FROM base AS build
[1/2] STEP 2/3: COPY hpcenv-build /opt/hpcenv-build
--> Using cache 2a2dfc09e50aaaa
--> 2a2dfc09e50
[1/2] STEP 3/3: RUN make
some output
--> 91b1e9a0f9a
[2/2] STEP 1/2: FROM base AS runtime
[2/2] STEP 2/2: COPY --from=build /x /x
[2/2] COMMIT x
--> 0f92adb7c9f
"""
    steps = parse_build_log(log)
    assert [(s.stage, s.layer, s.cached) for s in steps] == [
        (1, None, False),
        (1, "2a2dfc09e50aaaa", True),
        (1, "91b1e9a0f9a", False),
        (2, None, False),
        (2, "0f92adb7c9f", False),
    ]


def test_parse_created_handles_nanoseconds_and_offsets() -> None:
    t = parse_created("2026-11-20T23:54:08.123456789Z")
    assert t == datetime(2026, 11, 20, 23, 54, 8, 123456, tzinfo=UTC)
    assert parse_created("2026-11-20T23:54:08+00:00").tzinfo is not None
    with pytest.raises(ValueError):
        parse_created("yesterday")


# -- plumbing ----------------------------------------------------------------------------------
def test_last_json_takes_the_last_object_and_strips_horovodrun_prefixes() -> None:
    out = 'noise\n{"a": 1}\n[0]<stdout>:{"check": "x", "n": 2}\n[1]<stderr>: warn\n'
    assert last_json(out) == {"check": "x", "n": 2}
    assert last_json("no json here\n{broken") is None


def test_sweep_flags_follow_the_check_scripts(tmp_path: Path) -> None:
    (tmp_path / "_bench.py").write_text('ap.add_argument("--min-bytes", type=int)\n')
    assert sweep_flags(tmp_path)["min"] == "--min-bytes"
    (tmp_path / "_bench.py").write_text('ap.add_argument("--min", type=int)\n')
    assert sweep_flags(tmp_path) == {"min": "--min", "max": "--max", "exact": "--n"}


def test_hpccm_recipe_renders_the_same_stack() -> None:
    need_module("hpccm", "the hpccm peer recipe is rendered with hpccm")
    from hpcenv.bench.hpccm_daal4py import recipe

    text = recipe(base_image="localhost/base:1", pip_packages=["mpi4py==4.1.2", "pkg==1"])
    assert text.startswith("FROM localhost/base:1")
    for needle in (
        "openmpi-bin",
        "mpich",
        "libmpi.so.12",
        "/opt/venv/bin/pip",
        "mpi4py==4.1.2 pkg==1",
        "COPY checks /opt/hpcenv/checks",
        "USER hpc",
    ):
        assert needle in text
    assert "ca.crt" not in text  # build-time trust is mounted, never copied


def test_bench_command_is_registered() -> None:
    from typer.testing import CliRunner

    from hpcenv.cli.main import app

    result = CliRunner().invoke(app, ["bench", "--help"])
    assert result.exit_code == 0
    assert "--quick" in result.output and "report.md" in result.output


def test_report_json_round_trip_and_readme_section(tmp_path: Path) -> None:
    report = sample_report()
    _, js = write_report(report, tmp_path)
    back = report_from_json(json.loads(js.read_text()))
    assert render_markdown(back) == render_markdown(report)
    readme = readme_section(back)
    assert readme.startswith("## Benchmarks\n")
    assert "2026-01-01 00:00 UTC on test box" in readme
    assert "| image / host | 1 vs 2 GB/s | 0.50x |" in readme


def test_timeline_seconds_times_only_steps_this_build_ran() -> None:
    def t(minute: int, second: int = 0) -> datetime:
        return datetime(2026, 1, 1, 0, minute, second, tzinfo=UTC)

    layers = [
        (1, True, t(0)),  # cached: made by an earlier build
        (1, True, t(2)),
        (1, False, t(30)),  # first step this build ran: start unknown
        (1, False, t(31)),  # 60 s
        (1, False, t(40)),  # 540 s
        (2, True, t(0)),  # cached layer shared with stage 1
        (2, False, t(41)),  # start unknown
        (2, False, t(41, 30)),  # 30 s
    ]
    total, per_stage, uncounted = timeline_seconds(layers)
    assert (total, per_stage, uncounted) == (630.0, {1: 600.0, 2: 30.0}, 2)
    assert timeline_seconds([]) == (0.0, {}, 0)


def test_logged_build_keeps_step_times_per_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from hpcenv import shells

    created = {
        "aaaaaaaaaaaa": "2026-01-01T00:00:00Z",
        "bbbbbbbbbbbb": "2026-01-01T00:01:00Z",
        "cccccccccccc": "2026-01-01T00:11:00Z",
        "dddddddddddd": "2026-01-01T00:11:05Z",
        "img:tag": "2026-01-01T00:11:05Z",
    }

    def fake_podman(*args: str, **_: object) -> subprocess.CompletedProcess[str]:
        ref = args[-1]
        doc = [{"Created": created[ref], "Size": 100 if ref == "img:tag" else 300, "Id": ref}]
        return subprocess.CompletedProcess(list(args), 0, json.dumps(doc), "")

    monkeypatch.setattr(shells, "podman", fake_podman)
    cold = (
        "[1/2] STEP 1/3: FROM base AS build\n[1/2] STEP 2/3: COPY x /x\n--> aaaaaaaaaaaa\n"
        "[1/2] STEP 3/3: RUN make\n--> bbbbbbbbbbbb\n"
        "[2/2] STEP 1/3: FROM base\n[2/2] STEP 2/3: COPY --from=build /x /x\n--> cccccccccccc\n"
        "[2/2] STEP 3/3: USER hpc\n--> dddddddddddd\n"
    )
    log, record = tmp_path / "build.log", tmp_path / "rec" / "layers.json"
    log.write_text(cold)
    first = logged_build(log, "img:tag", record)
    assert first["cached_steps"] == 0 and first["timed_steps"] == 3
    assert first["stage_seconds"] == {"1": 60.0, "2": 605.0}
    assert first["build_stage_size_bytes"] == 300 and first["size_bytes"] == 100
    # a later build served every step from the cache: the record still times them
    cached = cold.replace("--> ", "--> Using cache ")
    log.write_text(cached)
    again = logged_build(log, "img:tag", record)
    assert again["cached_steps"] == 4 and again["timed_steps"] == 3
    assert again["seconds"] == first["seconds"] == 665.0
    # without a record, a fully cached log times nothing
    assert logged_build(log, "img:tag")["timed_steps"] == 0


def test_paired_ratios_use_the_adjacent_baseline_runs() -> None:
    runs = [("naive", 40.0), ("hp", 10.0), ("knob", 9.0), ("hp", 8.0), ("naive", 30.0)]
    out = paired_ratios(runs, "hp")
    assert out["naive"] == [pytest.approx(4.0), pytest.approx(30.0 / 8.0)]
    assert out["knob"] == [pytest.approx(1.0)]
    assert paired_ratios([("x", 1.0)], "hp") == {}


def test_publish_copies_report_and_rewrites_plot_links(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_report(sample_report(), results)
    (results / "allreduce_bandwidth.png").write_bytes(b"png")
    (results / "daal4py.naive.Dockerfile").write_text("FROM x\n")
    page = publish(results, tmp_path / "docs")
    assert page == tmp_path / "docs" / "bench-latest.md"
    assert "](bench-latest/allreduce_bandwidth.png)" in page.read_text()
    assert (tmp_path / "docs" / "bench-latest" / "allreduce_bandwidth.png").read_bytes() == b"png"
    assert (tmp_path / "docs" / "bench-latest" / "daal4py.naive.Dockerfile").is_file()


def test_targets_table_says_met_or_missed_per_goal() -> None:
    from hpcenv.bench.report import BenchReport, Headline, Section, goal_met, render_markdown

    assert goal_met(">= 1.2", 1.2) and not goal_met(">= 1.2", 1.19)
    assert goal_met("< 4", 3.9) and not goal_met("< 4", 4.0) and goal_met("<= 1.0", 1.0)
    assert goal_met(">= 1.2", None) is None
    with pytest.raises(ValueError):
        goal_met("about 1.2", 1.0)
    sec = Section(
        "t",
        "T",
        headline=[
            Headline("geomean (goal >= 1.2)", "", "1.16x", ">= 1.2", 1.16),
            Headline("first step (goal < 4 s)", "", "3.1 s", "< 4", 3.1),
            Headline("no goal", "", "1.0x"),
        ],
    )
    md = render_markdown(BenchReport({"date": "d"}, [sec]))
    targets = md.split("## Targets", 1)[1].split("## Headline", 1)[0]
    assert "| geomean (goal >= 1.2) | >= 1.2 | 1.16 | MISSED |" in targets
    assert "| first step (goal < 4 s) | < 4 | 3.1 | met |" in targets
    assert "no goal" not in targets


def test_a_cold_build_gets_the_isolated_storage_tmpdir_so_no_compiler_cache_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """podman keeps RUN --mount=type=cache folders (the Horovod ccache) under TMPDIR, not in
    the storage: a cold build in an isolated storage runs with a TMPDIR of that storage's own."""
    import hpcenv.engines
    from hpcenv.bench.buildcost import IsolatedStorage, podman_build

    seen: dict[str, object] = {}

    def fake_stream(argv: list[str], log: Path, **kw: object) -> tuple[int, list[str]]:
        seen.update(argv=argv, env=kw.get("env"))
        return 1, ["stopped here"]

    monkeypatch.setattr(hpcenv.engines, "stream_command", fake_stream)
    store = IsolatedStorage(tmp_path / "store", tmp_path / "base.tar")
    timing = podman_build(
        "hpcenv",
        tmp_path,
        tmp_path / "Dockerfile",
        "t",
        tmp_path / "log",
        cold=True,
        storage=store.args,
        env=store.env,
    )
    assert not timing.ok and timing.error == "stopped here"
    assert seen["env"] == {"TMPDIR": str(tmp_path / "store" / "tmp")}
    assert seen["argv"][:3] == ["podman", "--root", str(tmp_path / "store" / "root")]


def test_sign_test_gives_the_chance_of_k_slower_rounds_by_noise() -> None:
    assert sign_test(7, 8) == pytest.approx(9 / 256)  # the 3.5 % of 8 rounds
    assert sign_test(13, 16) == pytest.approx(697 / 65536)  # 1.1 %: 16 rounds
    assert sign_test(0, 4) == 1.0


def test_latency_spread_reports_each_variants_8_byte_times() -> None:
    def launch(us: float) -> list[dict[str, float]]:
        return [{"bytes": 8, "time_us": us}, {"bytes": 32, "time_us": 9.0}]

    text = latency_spread(
        {"naive": [launch(1.7), launch(0.9), launch(1.2)], "hpcenv default": [launch(1.0)]}
    )
    assert "naive 0.90 / 1.20 / 1.70" in text
    assert "hpcenv default 1.00 / 1.00 / 1.00" in text
