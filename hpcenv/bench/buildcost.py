"""Build cost: cold build time, image size and warm rebuild of three ways to build one stack.

* ``hpcenv``: the Dockerfile hpcenv renders: a build stage + slim runtime stage, or one stage
  for a stack that compiles nothing (:meth:`hpcenv.blocks.Blocks.wheels_stage`).
* ``two-stage`` (only where hpcenv renders one stage): the same stack in the build stage +
  runtime stage layout of a stack that compiles, i.e. what the one stage saves.
* ``naive``: :func:`single_stage_dockerfile` of the two-stage rendering: every command of the
  build stage plus the runtime stage's tail, in one stage (what you get without the runtime
  stage).
* ``hpccm``: :mod:`hpcenv.bench.hpccm_daal4py`, the same stack written with hpccm's blocks.

All of them start from the same locally bootstrapped base and fetch over the same mirror and
index; naive and hpccm, which neither copy nor mount the build-time CA bundle and pip.conf, get
them as a read-only bind mount at ``/opt/hpcenv-build`` during ``podman build``. A cold build is
``podman build --no-cache`` with the options ``hpcenv build`` uses (``--layers --format docker``);
the warm rebuild changes one file of the ``checks`` folder (the last content layer:
``COPY checks``) and builds again with the layer cache.

:func:`logged_build` reads an earlier build's log and the creation times of its layers to say
how long a build that already happened took, without repeating it.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hpcenv import naming
from hpcenv.bench.context import BenchContext
from hpcenv.bench.report import Headline, Section, Table, fmt_mb, fmt_num, fmt_ratio, ratio


# -- Dockerfile surgery ----------------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    keyword: str
    text: str  # the original lines, continuation backslashes included

    @property
    def args(self) -> str:
        return " ".join(self.text.split(None, 1)[1:])


def instructions(dockerfile: str) -> list[Instruction]:
    """Dockerfile instructions with their original text; comment and blank lines dropped."""
    out: list[Instruction] = []
    pending: list[str] = []
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment inside a continued instruction
        pending.append(line)
        if stripped.endswith("\\"):
            continue
        text = "\n".join(pending)
        out.append(Instruction(text.split(None, 1)[0].upper(), text))
        pending = []
    if pending:
        text = "\n".join(pending)
        out.append(Instruction(text.split(None, 1)[0].upper(), text))
    return out


def stages(dockerfile: str) -> list[list[Instruction]]:
    """Instructions grouped per stage (each group starts with its FROM)."""
    groups: list[list[Instruction]] = []
    for ins in instructions(dockerfile):
        if ins.keyword == "FROM":
            groups.append([ins])
        elif groups:
            groups[-1].append(ins)
        else:
            groups.append([ins])  # ARG before the first FROM
    return groups


def single_stage_dockerfile(multi_stage: str) -> str:
    """The naive single-stage equivalent of an hpcenv two-stage Dockerfile.

    Keeps every instruction of the build stage except ``COPY hpcenv-build`` (those build inputs
    are bind-mounted at build time instead, so the CA bundle never lands in a layer), then the
    runtime stage's instructions except its FROM/SHELL and the ``COPY --from=`` lines (the files
    are already in place). The runtime stage's ``apt-get`` step stays: a stack that compiles
    nothing installs its MPI there only (:meth:`hpcenv.blocks.Blocks.compiles`), and for one that
    compiles it adds nothing the development packages did not bring.
    """
    from hpcenv.blocks import BUILD_CONTEXT, BUILD_DIR

    groups = stages(multi_stage)
    if len(groups) != 2:
        raise ValueError(f"expected a two-stage Dockerfile, found {len(groups)} stage(s)")
    build, runtime = groups
    base = build[0].args.split()[0]
    keep = [f"FROM {base}"]
    for ins in build[1:]:
        if ins.keyword == "COPY" and BUILD_CONTEXT in ins.args.split()[0]:
            continue
        keep.append(ins.text)
    for ins in runtime[1:]:
        if ins.keyword == "SHELL":
            continue
        if ins.keyword == "COPY" and ins.args.startswith("--from="):
            continue
        keep.append(ins.text)
    header = (
        "# naive single-stage build of the same stack (hpcenv bench): hpcenv's build stage and "
        "the\n# runtime stage's tail in one stage; build inputs bind-mounted at "
        f"{BUILD_DIR} at build time\n"
    )
    return header + "\n".join(keep) + "\n"


# -- builds ------------------------------------------------------------------------------------
@dataclass
class BuildTiming:
    name: str
    tag: str
    seconds: float
    ok: bool
    size_bytes: int | None = None
    layers: int | None = None
    steps: int = 0
    cached_steps: int = 0
    slowest: list[tuple[str, float]] = field(default_factory=list)
    log: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def podman_build(
    name: str,
    context: Path,
    dockerfile: Path,
    tag: str,
    log: Path,
    *,
    cold: bool,
    volumes: tuple[str, ...] = (),
    storage: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> BuildTiming:
    """``podman [STORAGE] build --layers --format docker [--no-cache]``; wall time, cached steps,
    size, slowest.
    ``env``: added to the engine's environment (an isolated storage's own ``TMPDIR``)."""
    from hpcenv.engines import LAYERED_BUILD_OPTIONS, StepTracker, stream_command

    argv = ["podman", *storage, "build", *LAYERED_BUILD_OPTIONS]  # as hpcenv build runs it
    if cold and not storage:  # a fresh storage has no cache; --no-cache there would also stop
        argv.append("--no-cache")  # a stage from reusing an identical earlier stage's layers
    for vol in volumes:
        argv += ["-v", vol]
    argv += ["-f", str(dockerfile), "-t", tag, str(context)]
    tracker = StepTracker()
    cached = 0

    def on_line(line: str) -> None:
        nonlocal cached
        if line.startswith("--> Using cache"):
            cached += 1

    t0 = time.perf_counter()
    rc, tail = stream_command(argv, log, tracker=tracker, on_line=on_line, env=env)
    seconds = time.perf_counter() - t0
    timing = BuildTiming(
        name, tag, seconds, rc == 0, steps=len(tracker.steps), cached_steps=cached, log=str(log)
    )
    timing.slowest = [
        (_short(s.text), round(s.seconds, 1))
        for s in sorted(tracker.steps, key=lambda s: -s.seconds)[:3]
    ]
    if rc != 0:
        timing.error = next((ln for ln in reversed(tail) if ln.strip()), f"exit {rc}")
        return timing
    timing.size_bytes, timing.layers = image_size_layers(tag, storage)
    return timing


def image_size_layers(tag: str, storage: tuple[str, ...] = ()) -> tuple[int, int]:
    """Size in bytes and number of layers of a local image."""
    from hpcenv.shells import podman

    doc = json.loads(podman(*storage, "image", "inspect", tag).stdout)[0]
    return int(doc["Size"]), len(doc.get("RootFS", {}).get("Layers", []))


class IsolatedStorage:
    """A throw-away podman storage holding only the base image: an empty layer cache, and no
    build cache mount (the Horovod compiler cache): podman keeps those under ``TMPDIR``, which
    builds in this storage get a fresh one of (``env``).

    Cold builds run in a fresh one (no layer of any other build can be reused, also not by
    accident through identical steps of other recipes), the warm rebuild in the same one right
    after (it can only hit its own layers and cache), then it is deleted.
    """

    def __init__(self, root: Path, base_archive: Path) -> None:
        self.root = root
        self.base_archive = base_archive

    @property
    def args(self) -> tuple[str, ...]:
        return ("--root", str(self.root / "root"), "--runroot", str(self.root / "run"))

    @property
    def env(self) -> dict[str, str]:
        return {"TMPDIR": str(self.root / "tmp")}

    def __enter__(self) -> IsolatedStorage:
        from hpcenv.shells import podman

        self.remove()
        self.root.mkdir(parents=True)
        (self.root / "tmp").mkdir()
        podman(*self.args, "load", "-q", "-i", str(self.base_archive), timeout=300)
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        from hpcenv.shells import podman

        if self.root.exists():
            # never `system reset`: one wrong flag and it wipes the host's real storage
            podman(*self.args, "rmi", "-a", "-f", check=False, timeout=300)
            shutil.rmtree(self.root, ignore_errors=True)


def touch_last_layer(context: Path) -> Path:
    """Change one file the final ``COPY checks`` step copies (and only that)."""
    marker = context / "checks" / "_bench_rebuild.txt"
    marker.write_text(f"rebuild {time.time_ns()}\n", encoding="utf-8")
    return marker


# -- an earlier build, from its log ----------------------------------------------------------
_STEP = re.compile(
    r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?STEP (?P<i>\d+)/(?P<n>\d+): (?P<text>.*)$"
)
_LAYER = re.compile(r"^--> (?:Using cache )?(?P<id>[0-9a-f]{11,64})\s*$")


@dataclass
class LoggedStep:
    stage: int
    text: str
    layer: str | None = None
    cached: bool = False


def parse_build_log(text: str) -> list[LoggedStep]:
    """Steps of a podman build log with the layer id each one committed (``--> ID``)."""
    steps: list[LoggedStep] = []
    for line in text.splitlines():
        m = _STEP.match(line)
        if m:
            steps.append(LoggedStep(int(m["stage"] or 1), m["text"]))
            continue
        if line.startswith("--> Using cache") and steps:
            steps[-1].cached = True
        m = _LAYER.match(line)
        if m and steps and steps[-1].layer is None:
            steps[-1].layer = m["id"]
    return steps


def parse_created(value: str) -> datetime:
    """podman's ``Created`` (RFC 3339, nanoseconds) as an aware datetime."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", value.strip())
    if not m:
        raise ValueError(f"unrecognised timestamp {value!r}")
    frac = (m[2] or ".0")[:7]
    tz = "+00:00" if m[3] == "Z" else m[3]
    return datetime.fromisoformat(f"{m[1]}{frac}{tz}")


def step_durations(layers: list[tuple[int, bool, datetime]]) -> list[float | None]:
    """Seconds of each step a build really ran, from its layers ``(stage, cached, created)``.

    A step's duration is its layer's creation time minus the previous layer's, known only when
    both layers were made by this build (not ``cached``): a cached layer's time is when some
    earlier build made it, which says nothing about this one (a stage's first layer may even be
    shared with another stage). Unknown durations are None.
    """
    out: list[float | None] = []
    previous: tuple[int, bool, datetime] | None = None
    for stage, cached, t in layers:
        if cached or previous is None or previous[1]:
            out.append(None)
        else:
            out.append((t - previous[2]).total_seconds())
        previous = (stage, cached, t)
    return out


def timeline_seconds(
    layers: list[tuple[int, bool, datetime]],
) -> tuple[float, dict[int, float], int]:
    """Total and per-stage seconds of :func:`step_durations`, and how many steps this build
    ran without a known duration (cached steps are not counted there)."""
    total, per_stage, uncounted = 0.0, dict[int, float](), 0
    for (stage, cached, _), seconds in zip(layers, step_durations(layers), strict=True):
        if seconds is None:
            uncounted += 0 if cached else 1
            continue
        total += seconds
        per_stage[stage] = per_stage.get(stage, 0.0) + seconds
    return total, per_stage, uncounted


LAYER_RECORD = "layer-seconds.json"


def logged_build(log: Path, tag: str, record: Path | None = None) -> dict[str, Any]:
    """How long the steps of an image's build took, from its build log and layer times.

    Durations of steps this build ran come from :func:`step_durations`. Each one is also kept
    in ``record`` (layer id -> seconds): a layer id names exactly one build of one step, so a
    later build that takes that step from the cache still gets its real time from there. The
    result says how many steps are timed (``timed_steps`` of ``layer_steps``) and how many came
    from the cache (0: a cold build). Also reported: the size of the build stage's last layer
    image, i.e. what a single-stage image of the same commands would weigh, and the final size.
    """
    from hpcenv.shells import podman

    text = log.read_text(encoding="utf-8", errors="replace")
    steps = parse_build_log(text)
    out: dict[str, Any] = {
        "log": str(log),
        "steps": len(steps),
        "cached_steps": sum(s.cached for s in steps),
    }
    layered = [s for s in steps if s.layer]
    if not layered:
        out["error"] = "no committed layers in the log"
        return out
    docs: dict[str, dict[str, Any]] = {}
    for ref in [*(s.layer or "" for s in layered), tag]:
        proc = podman("image", "inspect", ref, check=False)
        if proc.returncode != 0:
            out["error"] = f"layer {ref} of that build is no longer in podman's storage"
            return out
        docs[ref] = json.loads(proc.stdout)[0]
    timeline = [(s.stage, s.cached, parse_created(docs[s.layer or ""]["Created"])) for s in layered]
    known: dict[str, float] = {}
    if record is not None and record.is_file():
        try:
            known = {str(k): float(v) for k, v in json.loads(record.read_text()).items()}
        except (ValueError, AttributeError):
            known = {}
    per_stage: dict[str, float] = {}
    timed = 0
    for step, seconds in zip(layered, step_durations(timeline), strict=True):
        key = (step.layer or "")[:12]
        if seconds is not None:
            known[key] = seconds
        elif key in known:
            seconds = known[key]
        if seconds is None:
            continue
        timed += 1
        per_stage[str(step.stage)] = per_stage.get(str(step.stage), 0.0) + seconds
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    out |= {
        "seconds": sum(per_stage.values()),
        "stage_seconds": per_stage,
        "timed_steps": timed,
        "layer_steps": len(layered),
        "finished": parse_created(docs[tag]["Created"]).isoformat(timespec="seconds"),
        "image_id": str(docs[tag]["Id"])[:12],
        "size_bytes": int(docs[tag]["Size"]),
    }
    if any(s.stage > 1 for s in layered):
        last_build_layer = [s for s in layered if s.stage == 1][-1].layer or ""
        out["build_stage_size_bytes"] = int(docs[last_build_layer]["Size"])
    return out


# -- the section -------------------------------------------------------------------------------
_STACK_PROBE = (
    "python3 -c 'import json, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in "
    '("mpi4py", "scikit-learn-intelex", "scikit-learn", "numpy")}))\' && '
    "dpkg-query -W -f '${Package}=${Version}\\n' openmpi-bin mpich python3"
)


def _stack_of(tag: str, storage: tuple[str, ...] = ()) -> str:
    """Python package and MPI package versions inside an image (proves "the same stack")."""
    from hpcenv.shells import podman

    proc = podman(
        *storage, "run", "--rm", tag, "bash", "-c", _STACK_PROBE, check=False, timeout=120
    )
    return proc.stdout.strip() if proc.returncode == 0 else f"probe failed: {proc.stderr.strip()}"


def build_section(ctx: BenchContext) -> Section:
    """Build cost of the ``daal4py`` recipe three or four ways + the full image from its build
    log."""
    from hpcenv.bench import hpccm_daal4py
    from hpcenv.blocks import BUILD_CONTEXT, BUILD_DIR, Blocks
    from hpcenv.build import ensure_base, make_plans, write_context
    from hpcenv.paths import cache_dir
    from hpcenv.render import render
    from hpcenv.shells import podman

    sec = Section(
        "build", f"Build cost: hpcenv vs naive single-stage vs hpccm ({ctx.cfg.build_recipe})"
    )
    recipe = ctx.cfg.build_recipe
    plan = make_plans(ctx.site, [recipe], {}, ctx.work / "contexts", owned=True)[0]
    context = write_context(plan)
    lock = plan.lock
    files = {"hpcenv": context / "Dockerfile"}
    two_stage = files["hpcenv"].read_text(encoding="utf-8")
    if len(stages(two_stage)) == 1:  # hpcenv builds it in one stage: measure what that saves
        two_stage = render(lock, ctx.site, two_stage=True).dockerfile
        files["two-stage"] = context / "Dockerfile.two-stage"
        files["two-stage"].write_text(two_stage, encoding="utf-8")
    files["naive"] = context / "Dockerfile.naive"
    files["hpccm"] = context / "Dockerfile.hpccm"
    files["naive"].write_text(single_stage_dockerfile(two_stage), encoding="utf-8")
    pins = [f"mpi4py=={lock.version('mpi4py')}"]
    if lock.has("daal4py"):
        pins.append(str(lock.components["daal4py"].options.get("package", "scikit-learn-intelex")))
        pins.append("scikit-learn")
    files["hpccm"].write_text(
        hpccm_daal4py.recipe(
            base_image=lock.build["base_image"],
            pip_packages=pins,
            tools=Blocks(lock, ctx.site).build_tool_packages(),  # the same as hpcenv's stage
        ),
        encoding="utf-8",
    )
    for name, path in files.items():
        shutil.copy2(path, ctx.out / f"{recipe}.{name}.Dockerfile")
    sec.data["dockerfiles"] = {n: f"{recipe}.{n}.Dockerfile" for n in files}
    inputs_mount = (f"{context / BUILD_CONTEXT}:{BUILD_DIR}:ro",)
    volumes = {"hpcenv": (), "two-stage": (), "naive": inputs_mount, "hpccm": inputs_mount}
    layout = (
        f"`{recipe}.hpcenv.Dockerfile` (hpcenv's render: one stage, since the stack compiles "
        f"nothing; build inputs mounted per step), `{recipe}.two-stage.Dockerfile` (the same "
        "stack in the build stage + slim runtime stage layout of a stack that compiles, with "
        "`COPY --from=build` of the venv), "
        if "two-stage" in files
        else f"`{recipe}.hpcenv.Dockerfile` (hpcenv's render: build stage + slim runtime stage), "
    )
    sec.text.append(
        f"Recipe `{recipe}` for site `{ctx.site.name}` (compiles nothing, so a cold build is "
        f"download + unpack + install). {len(files)} Dockerfiles of the same stack, copied next "
        f"to this report: {layout}`{recipe}.naive.Dockerfile` (the two-stage commands in one "
        f"stage), `{recipe}.hpccm.Dockerfile` (hpcenv/bench/hpccm_daal4py.py rendered by hpccm). "
        "Cold = `podman build --layers --format docker` in a fresh, throw-away podman storage "
        "that holds only the bootstrapped base image (its ~1 min debootstrap is not counted; it "
        "exists once per host), so no layer of any other build can be reused; they run one "
        "after another, never in parallel. Warm = change one file in `checks/` (the last "
        "content layer) and rebuild at once in the same storage."
    )
    cold: dict[str, BuildTiming] = {}
    warm: dict[str, BuildTiming] = {}
    tags = {n: naming.bench_tag(recipe=recipe, variant=n) for n in files}
    if ctx.quick:
        sec.text.append("`--quick`: Dockerfiles rendered, no builds run.")
    else:
        ensure_base(plan)
        base = lock.build["base_image"]
        archive = ctx.work / "base-image.tar"
        archive.unlink(missing_ok=True)
        podman("save", "--format", "docker-archive", "-o", str(archive), base, timeout=300)
        stacks: dict[str, str] = {}
        for name, path in files.items():
            with IsolatedStorage(cache_dir() / "bench-storage", archive) as store:
                ctx.say(sec.key, f"cold build {name} ...")
                t = podman_build(
                    name,
                    context,
                    path,
                    tags[name],
                    ctx.work / f"build-{name}-cold.log",
                    cold=True,
                    volumes=volumes[name],
                    storage=store.args,
                    env=store.env,
                )
                cold[name] = t
                ctx.say(
                    sec.key,
                    f"cold build {name}: {t.seconds:.0f} s, "
                    f"{fmt_mb(t.size_bytes)}, ok={t.ok} {t.error or ''}",
                )
                if not t.ok:
                    continue
                touch_last_layer(context)
                w = podman_build(
                    name,
                    context,
                    path,
                    tags[name],
                    ctx.work / f"build-{name}-warm.log",
                    cold=False,
                    volumes=volumes[name],
                    storage=store.args,
                    env=store.env,
                )
                warm[name] = w
                ctx.say(
                    sec.key,
                    f"warm rebuild {name}: {w.seconds:.1f} s "
                    f"({w.cached_steps}/{w.steps} steps from cache)",
                )
                stacks[name] = _stack_of(tags[name], store.args)
        archive.unlink(missing_ok=True)
        sec.data["stacks"] = stacks
        same = len(set(stacks.values())) == 1 and len(stacks) == len(files)
        sec.text.append(
            "Same stack check (pip + apt versions inside each image): "
            + (
                f"identical in all {len(files)}."
                if same
                else "DIFFERENT: " + "; ".join(f"{n}: {s}" for n, s in stacks.items())
            )
        )
    sec.data["cold"] = {n: t.to_dict() for n, t in cold.items()}
    sec.data["warm"] = {n: t.to_dict() for n, t in warm.items()}
    if cold:
        hp = cold["hpcenv"]
        rows = []
        for name, t in cold.items():
            wt = warm.get(name)
            rows.append(
                [
                    name,
                    fmt_num(t.seconds),
                    fmt_ratio(ratio(t.seconds, hp.seconds)),
                    fmt_mb(t.size_bytes),
                    fmt_ratio(ratio(t.size_bytes, hp.size_bytes)),
                    str(t.layers or ""),
                    fmt_num(wt.seconds) if wt else "n/a",
                    f"{wt.cached_steps}/{wt.steps}" if wt else "",
                    "; ".join(f"{s} ({sec_:.0f} s)" for s, sec_ in t.slowest[:2]),
                ]
            )
        sec.tables.append(
            Table(
                "",
                [
                    "build",
                    "cold s",
                    "vs hpcenv",
                    "image size",
                    "vs hpcenv",
                    "layers",
                    "warm rebuild s",
                    "cached steps",
                    "slowest cold steps",
                ],
                rows,
            )
        )
        for name in ("two-stage", "naive", "hpccm"):
            other = cold.get(name)
            if other is not None and other.ok and hp.ok:
                t = other
                sec.headline.append(
                    Headline(
                        f"Build ({recipe}): image size, {name} / hpcenv",
                        f"{fmt_mb(t.size_bytes)} vs {fmt_mb(hp.size_bytes)}",
                        fmt_ratio(ratio(t.size_bytes, hp.size_bytes)),
                    )
                )
                sec.headline.append(
                    Headline(
                        f"Build ({recipe}): cold build time, {name} / hpcenv",
                        f"{t.seconds:.0f} vs {hp.seconds:.0f} s",
                        fmt_ratio(ratio(t.seconds, hp.seconds)),
                    )
                )
        if warm.get("hpcenv"):
            w = warm["hpcenv"]
            sec.headline.append(
                Headline(
                    f"Build ({recipe}): hpcenv warm rebuild after a last-layer change / cold",
                    f"{w.seconds:.1f} vs {hp.seconds:.0f} s",
                    fmt_ratio(ratio(w.seconds, hp.seconds), 3),
                )
            )

    # the full image, from the log of the build that made it
    full_tag = ctx.image
    log = cache_dir() / "logs" / naming.build_log(recipe="horovod-cpu", site=ctx.site.name)
    if full_tag == naming.image_tag(recipe="horovod-cpu", site=ctx.site.name) and log.is_file():
        info = logged_build(log, full_tag, cache_dir() / "bench" / LAYER_RECORD)
        sec.data["full_image"] = info
        if "error" in info:
            sec.text.append(f"Full image `{full_tag}`: build log not usable ({info['error']}).")
        elif info["timed_steps"] == 0:
            sec.text.append(
                f"Full image `{full_tag}` ({info['image_id']}): its last `hpcenv build` "
                f"({log.name}) served {info['cached_steps']} of its {info['steps']} steps from "
                "the layer cache of builds this bench never saw, so its log times nothing."
            )
        else:
            cached = info["cached_steps"]
            stage_s = info.get("stage_seconds", {})
            how = (
                "a cold build (no step from the cache)"
                if cached == 0
                else f"served {cached} of its {info['steps']} steps from the layer cache"
            )
            sec.text.append(
                f"Full image `{full_tag}` ({info['image_id']}: torch + Horovod compiled from "
                "source + daal4py) is not rebuilt here (next to the three daal4py builds it "
                "would not fit in the bench's 20 minutes). "
                f"Its last `hpcenv build` ({log.name}, image created {info['finished']}) {how}. "
                "Step times come from the creation times of consecutive layers made by one build; "
                f"each one measured is kept in `{LAYER_RECORD}` (hpcenv's cache) under its layer "
                "id, so steps a later build took from the cache keep their real time. Timed: "
                f"{info['timed_steps']} of {info['layer_steps']} layer steps, "
                f"{info['seconds']:.0f} s (build stage {stage_s.get('1', 0):.0f} s, runtime "
                f"stage {stage_s.get('2', 0):.0f} s). Final image {fmt_mb(info['size_bytes'])}; "
                "the build stage's last layer image, i.e. what a single-stage image of the same "
                f"commands weighs: {fmt_mb(info.get('build_stage_size_bytes'))}."
            )
            sec.headline.append(
                Headline(
                    "Build (horovod-cpu, from its build log): single-stage-equivalent size / hpcenv",
                    f"{fmt_mb(info.get('build_stage_size_bytes'))} vs {fmt_mb(info['size_bytes'])}; "
                    f"build steps {info['seconds'] / 60:.1f} min ({info['timed_steps']} of "
                    f"{info['layer_steps']} steps timed)",
                    fmt_ratio(ratio(info.get("build_stage_size_bytes"), info["size_bytes"])),
                )
            )
    else:
        sec.text.append(f"Full image: no hpcenv build log for `{full_tag}` ({log}).")
    _report_full_build_record(ctx, sec)
    return sec


FULL_RECIPE = "horovod-cpu"


def _full_record_path(site: str) -> Path:
    from hpcenv.paths import cache_dir

    return cache_dir() / "bench" / f"full-build-{site}-{FULL_RECIPE}.json"


def _full_plan(ctx: BenchContext) -> Any:
    from hpcenv.build import make_plans, write_context

    plan = make_plans(ctx.site, [FULL_RECIPE], {}, ctx.work / "contexts", owned=True)[0]
    write_context(plan)
    return plan


def _sha256_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _report_full_build_record(ctx: BenchContext, sec: Section) -> None:
    """The cold build of the full image measured by ``--section full-build``, when its
    Dockerfile is the one hpcenv renders today."""
    path = _full_record_path(ctx.site.name)
    if not path.is_file():
        sec.text.append(
            f"No cold build of the full `{FULL_RECIPE}` image measured yet: run "
            "`hpcenv bench --section full-build` once (10+ min on 2 cores; kept apart because "
            "it does not fit in the 20-minute bench together with the three daal4py builds)."
        )
        return
    rec = json.loads(path.read_text(encoding="utf-8"))
    current = _sha256_text(_full_plan(ctx).rendered.dockerfile)
    sec.data["full_build_record"] = rec
    same = rec.get("dockerfile_sha256") == current
    state = (
        "for the same Dockerfile hpcenv renders today"
        if same
        else "for an OLDER Dockerfile than hpcenv renders today"
    )
    cold = rec["cold"]
    warm = rec.get("warm") or {}
    sec.text.append(
        f"Full `{FULL_RECIPE}` image, cold, measured by `hpcenv bench --section full-build` on "
        f"{rec['date']} ({state}): {cold['seconds'] / 60:.1f} min in a fresh podman storage "
        f"(slowest: {'; '.join(f'{t} ({x:.0f} s)' for t, x in cold['slowest'][:2])}), final "
        f"image {fmt_mb(cold['size_bytes'])}, build stage (single-stage equivalent) "
        f"{fmt_mb(rec.get('build_stage_size_bytes'))}; warm rebuild after a last-layer change "
        f"{warm.get('seconds', float('nan')):.1f} s."
    )
    sec.headline.append(
        Headline(
            f"Build ({FULL_RECIPE}, cold, separate run {rec['date'][:10]}): time; single-stage "
            "size / hpcenv",
            f"{cold['seconds'] / 60:.1f} min cold, {warm.get('seconds', float('nan')):.0f} s warm; "
            f"{fmt_mb(rec.get('build_stage_size_bytes'))} vs {fmt_mb(cold['size_bytes'])}"
            + ("" if same else " (older Dockerfile)"),
            fmt_ratio(ratio(rec.get("build_stage_size_bytes"), cold["size_bytes"])),
        )
    )


def full_build_section(ctx: BenchContext) -> Section:
    """Cold + warm build of the full image in a fresh storage; kept as a record for ``build``."""
    from datetime import UTC, datetime

    from hpcenv.build import ensure_base
    from hpcenv.paths import cache_dir
    from hpcenv.shells import podman

    sec = Section("full-build", f"Build cost: cold build of the full {FULL_RECIPE} image")
    plan = _full_plan(ctx)
    ensure_base(plan)
    archive = ctx.work / "base-image.tar"
    archive.unlink(missing_ok=True)
    podman(
        "save",
        "--format",
        "docker-archive",
        "-o",
        str(archive),
        plan.lock.build["base_image"],
        timeout=300,
    )
    tag = naming.bench_tag(recipe=FULL_RECIPE, variant="cold")
    dockerfile = plan.context / "Dockerfile"
    with IsolatedStorage(cache_dir() / "bench-storage", archive) as store:
        ctx.say(sec.key, f"cold build of {FULL_RECIPE} (10+ min) ...")
        cold = podman_build(
            "hpcenv",
            plan.context,
            dockerfile,
            tag,
            ctx.work / "build-full-cold.log",
            cold=True,
            storage=store.args,
            env=store.env,
        )
        ctx.say(sec.key, f"cold: {cold.seconds:.0f} s, {fmt_mb(cold.size_bytes)}, ok={cold.ok}")
        if not cold.ok:
            raise RuntimeError(f"cold build of {FULL_RECIPE} failed: {cold.error}")
        steps = parse_build_log((ctx.work / "build-full-cold.log").read_text())
        build_layer = [st for st in steps if st.stage == 1 and st.layer][-1].layer or ""
        doc = json.loads(podman(*store.args, "image", "inspect", build_layer).stdout)[0]
        touch_last_layer(plan.context)
        warm = podman_build(
            "hpcenv",
            plan.context,
            dockerfile,
            tag,
            ctx.work / "build-full-warm.log",
            cold=False,
            storage=store.args,
            env=store.env,
        )
        ctx.say(sec.key, f"warm rebuild: {warm.seconds:.1f} s")
    archive.unlink(missing_ok=True)
    rec = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": ctx.shared.get("machine", ""),
        "dockerfile_sha256": _sha256_text(plan.rendered.dockerfile),
        "cold": cold.to_dict(),
        "warm": warm.to_dict(),
        "build_stage_size_bytes": int(doc["Size"]),
    }
    path = _full_record_path(ctx.site.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sec.data = rec
    _report_full_build_record(ctx, sec)
    return sec
