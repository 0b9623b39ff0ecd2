"""Build on the site's login node over a transport: ``hpcenv build --site S --on-login``.

The sites build where their jobs read images (docs/sites/*.md): NERSC's ``podman-hpc build`` then
``podman-hpc migrate`` on a Perlmutter login node (the migrated store is what compute nodes
read), ``apptainer build`` on Frontier/Aurora login nodes, OLCF's podman + SIF on Summit. This
module does that from here with only :class:`hpcenv.jobs.transport.Transport`'s ``run``:

1. the context is rendered here; the login node's copy lives in a private folder
   ``~/.cache/hpcenv/remote-builds/<site>-<recipe>`` (0700); only the files whose sha256 differs
   are sent, as a tar stream (base64 on the command's stdin: ``run`` takes text);
2. ``build.sh`` (the same build argv as ``build --dry-run``, then the site's delivery: migrate,
   or save + ``apptainer build`` + copy to the path jobs run) starts detached on the login node,
   writing ``build.log``, ``build.pid`` and, at the end, ``build.rc`` and ``image.id``;
3. this host polls the log (one ``run`` a second): every line goes to the local build log,
   each ``STEP n/m`` to the progress display;
4. on success the image's reference and id are recorded (:mod:`hpcenv.image_records`) and
   ``submit`` runs it.

A dropped connection stops only the polling: the build goes on there. Running the same command
again follows a build still running, or starts it again; the engine's layer cache on the login
node (podman ``--layers``) makes the steps already built ``Using cache``. Assumed, not read in a
site's documentation: a non-login SSH shell on the login node finds the builder on its PATH
(load the site's modules in ``~/.bashrc`` otherwise), and ``podman-hpc image inspect`` passes
through to podman like its other subcommands.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from hpcenv.build import BuildPlan, build_log_path, context_ready
from hpcenv.delivery import plan_delivery
from hpcenv.engines import StepCallback, StepTracker
from hpcenv.errors import BuildError, ConfigError, JobError
from hpcenv.image_records import write_record
from hpcenv.jobs.shell import expanding, join, word
from hpcenv.jobs.transport import Transport, TransportError
from hpcenv.printable import printable
from hpcenv.safe import image_or_sif

_SAFE_PATH = re.compile(r"[A-Za-z0-9_.,:@%+=/-]+")


def _state_script() -> str:
    """templates/remote/build-state.sh: the build's state, then its log from a line."""
    from hpcenv.paths import templates_dir

    return templates_dir().joinpath("remote", "build-state.sh").read_text(encoding="utf-8")


SEND_TIMEOUT = 1800.0  # seconds for the context upload (a wheelhouse of a few hundred MB)
POLL_TIMEOUT = 60.0


def remote_folder(plan: BuildPlan) -> str:
    """The login node's build folder, relative to the login user's home."""
    name = word(f"{plan.site.name}-{plan.recipe}", "site and recipe name")
    return f".cache/hpcenv/remote-builds/{name}"


def builder(plan: BuildPlan, engine_name: str | None = None) -> str:
    """The engine the site's runtime builds with (``podman-hpc`` where jobs run podman-hpc: NERSC
    builds with it, so ``migrate`` finds the image in its store), else ``engine_name``."""
    from hpcenv.jobs.runtimes.registry import runtime_of

    own = runtime_of(plan.site).build_engine(plan.site)
    return own if own != plan.site.build.engine else (engine_name or own)


def script_lines(plan: BuildPlan, root: str, fmt: str, engine_name: str | None = None) -> list[str]:
    """The commands ``build.sh`` runs in ``root`` (what the dry run shows)."""
    exe = builder(plan, engine_name)
    there = replace(plan, context=Path(root) / "context")
    argv = there.build_command(engine_name)
    argv[0] = exe
    tag = plan.tag
    lines = [join(expanding(w) for w in argv)]
    lines.append(f"{exe} image inspect --format '{{{{.Id}}}}' {join([tag])} > image.id")
    ref = join([tag])
    for step in plan_delivery(plan.site, plan.recipe, tag, fmt, None, exe):
        if step.kind == "command":
            lines.append(join(expanding(w) for w in step.command))
            ref = join([expanding(step.target)])
        elif step.kind == "sif-copy":
            lines += plan.sif_steps(exe)
            sif = plan.sif_steps(exe)[-1].split()[2]
            target = join([expanding(step.target)])
            lines += [
                f'mkdir -p "$(dirname {target})"',
                f"cp {join([sif])} {target}.partial && mv {target}.partial {target}",
            ]
            ref = target
    lines.append(f"printf '%s\\n' {ref} > image.ref")
    return lines


def build_script(plan: BuildPlan, root: str, fmt: str, engine_name: str | None = None) -> str:
    body = "\n".join(script_lines(plan, root, fmt, engine_name))
    return (
        "#!/bin/bash\n# written by hpcenv build --on-login; run detached, output in build.log\n"
        f"set -eo pipefail\ncd {join([root])}\n"
        f'echo "hpcenv: building {plan.tag} on $(hostname) in {root}"\n{body}\n'
        'echo "hpcenv: built $(cat image.id)"\n'
    )


def _manifest(context: Path) -> dict[str, str]:
    """sha256 of every file in the context, by its path relative to it (validated)."""
    out = {}
    for path in sorted(context.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(context).as_posix()
        if not _SAFE_PATH.fullmatch(rel) or ".." in rel.split("/") or not path.is_file():
            raise ConfigError(
                f"{path}: only plain files named with letters, digits and _.,:@%+=/- are sent "
                "to the login node"
            )
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _tar(files: dict[str, bytes | Path]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, src in files.items():
            data = src.read_bytes() if isinstance(src, Path) else src
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


@dataclass
class RemoteResult:
    tag: str
    image: str
    image_id: str
    host: str
    folder: str
    log_path: Path
    seconds: float
    sent_files: int
    reattached: bool


_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{4,64}")  # podman: 64 hex; docker: sha256:


def built_image(answer: str, where: str) -> tuple[str, str]:
    """(image id, image reference) from the login node's ``cat image.id image.ref``: exactly
    those two lines, an engine's id and a reference or image file path, else one JobError line
    (the answer is the login node's text: shown escaped and cut, never raw)."""
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    if len(lines) != 2:
        raise JobError(
            f"the login node's image.id and image.ref in {where} are {len(lines)} line(s), "
            "not an image id and an image reference; build again, or see build.log there"
        )
    image_id, image = lines
    if not _IMAGE_ID.fullmatch(image_id):
        raise JobError(
            f"the login node's image.id in {where} is not an image id: "
            f"{printable(image_id[:80])!r}; build again, or see build.log there"
        )
    try:
        image_or_sif(image, "image.ref")
    except ConfigError as err:
        raise JobError(
            f"the login node's image.ref in {where}: {printable(str(err)[:200])}"
        ) from None
    return image_id, image


def _last_lines(log: Path, count: int) -> list[str]:
    """The last ``count`` lines of ``log`` (its last 64 KiB read, not the whole file)."""
    with log.open("rb") as handle:
        handle.seek(max(0, handle.seek(0, 2) - (64 << 10)))
        return handle.read().decode(errors="replace").strip().splitlines()[-count:]


class RemoteBuild:
    """One plan built on the login node that ``transport`` reaches."""

    def __init__(
        self,
        plan: BuildPlan,
        transport: Transport,
        fmt: str,
        engine_name: str | None = None,
        *,
        on_step: StepCallback | None = None,
        note: Callable[[str], None] = lambda line: None,
        interval: float = 1.0,
    ) -> None:
        self.plan, self.t, self.fmt, self.engine = plan, transport, fmt, engine_name
        self.on_step, self.note, self.interval = on_step, note, interval
        self.folder = remote_folder(plan)
        self.root = ""

    def _run(self, command: str, stdin: str | None = None, timeout: float = POLL_TIMEOUT) -> str:
        res = self.t.run(command, stdin=stdin, timeout=timeout)
        if res.returncode != 0:
            raise JobError(
                f"on {self.t.describe()}: {command.split(' && ')[-1][:80]}: {res.message()}"
            )
        return res.stdout

    def _lost(self, err: TransportError) -> JobError:
        return JobError(
            f"connection to {self.t.describe()} lost while building {self.plan.tag} ({err}); "
            f"the login node keeps {self.root or '~/' + self.folder} (context, build.sh, "
            "build.log) and the build may still be running there; run the same command again: "
            "it follows a build still running, else starts it again and the layers already "
            "built are reused (Using cache)"
        )

    def run(self) -> RemoteResult:
        started = time.monotonic()
        try:
            result = self._build(started)
            if result is None:
                # The build it followed was an earlier one that was ending (its session killed,
                # its podman still cleaning up): the state is now "stopped", so this starts it
                # again, as the lost-connection message promises; the built layers are reused.
                self.note("  the build it followed stopped without finishing; starting it again")
                result = self._build(started)
            if result is None:  # followed again, and that one stopped too
                raise JobError(self._stopped())
            return result
        except TransportError as err:
            raise self._lost(err) from None

    def _stopped(self) -> str:
        return (
            f"the build on {self.t.describe()} stopped without finishing (killed?); "
            f"{self.root} keeps the context and build.log; run the same command "
            "again: the layers already built are reused (Using cache)"
        )

    def _build(self, started: float) -> RemoteResult | None:
        """The build done here, or followed when one is running there; None when the build it
        followed stopped without finishing (then :meth:`run` starts it again)."""
        prepare = (
            f'umask 077; d="$HOME"/{self.folder}; mkdir -p "$d/context" && chmod 700 "$d" && '
            'cd "$d" && pwd && sh -s && cd context && '
            "find . -type f -print0 | xargs -0 -r sha256sum"
        )
        answer = self._run(prepare, stdin=_state_script()).splitlines()
        if len(answer) < 2:
            raise JobError(
                f"{self.t.describe()} answered {len(answer)} line(s) where the build folder and "
                "the build's state were expected; is its shell printing something at start?"
            )
        first, second, *rest = answer
        if not first.startswith("/") or not _SAFE_PATH.fullmatch(first):
            raise JobError(
                f"the login node's build folder {printable(first[:200])!r} is not a plain "
                "absolute path"
            )
        self.root = first
        state = second.split()
        log = build_log_path(self.plan)
        sent = 0
        reattached = state[:1] == ["running"] and len(state) == 2 and state[1].isdigit()
        if reattached:
            self.note(f"  following the build already running on the login node (pid {state[1]})")
        else:
            theirs = {}
            for line in rest:
                digest, _, rel = line.partition("  ./")
                theirs[rel] = digest
            with context_ready(self.plan) as context:
                mine = _manifest(context)
                changed = {r for r, h in mine.items() if theirs.get(r) != h}
                extra = sorted(set(theirs) - set(mine))
                files: dict[str, bytes | Path] = {
                    f"context/{r}": context / r for r in sorted(changed)
                }
                script = build_script(self.plan, self.root, self.fmt, self.engine)
                files["build.sh"] = script.encode()
                payload = _tar(files)
            size = sum(p.stat().st_size for p in files.values() if isinstance(p, Path))
            self.note(
                f"  send: {len(changed)} of {len(mine)} context files ({size / 1e6:.1f} MB) to "
                f"{self.t.describe()}:{self.root}"
            )
            remove = f"rm -f -- {join(['context/' + r for r in extra])} && " if extra else ""
            self._run(
                f"cd {join([self.root])} && {remove}base64 -d | tar -x --no-same-owner -f -",
                stdin=payload,
                timeout=SEND_TIMEOUT,
            )
            sent = len(changed)
            self._run(
                f"cd {join([self.root])} && rm -f build.rc image.id image.ref && : > build.log && "
                "(setsid nohup bash -c 'bash build.sh > build.log 2>&1; echo $? > build.rc' "
                "</dev/null >/dev/null 2>&1 & echo $! > build.pid)"
            )
        rc, step = self._follow(log)
        if rc is None:
            if reattached:
                return None
            raise JobError(self._stopped())
        if rc != 0:
            tail = printable(" | ".join(_last_lines(log, 3)))
            raise BuildError(
                step or "build.sh",
                log,
                f"on {self.t.describe()} (exit {rc}; there: {self.root}/build.log): {tail}",
            )
        out = self._run(f"cd {join([self.root])} && cat image.id image.ref")
        image_id, image = built_image(out, f"{self.t.describe()}:{self.root}")
        result = RemoteResult(
            self.plan.tag,
            image,
            image_id,
            self.t.describe(),
            self.root,
            log,
            time.monotonic() - started,
            sent,
            reattached,
        )
        write_record(
            self.plan.site.name,
            self.plan.recipe,
            {
                "site": self.plan.site.name,
                "recipe": self.plan.recipe,
                "host": result.host,
                "folder": result.folder,
                "tag": result.tag,
                "image": image,
                "image_id": image_id,
                "builder": builder(self.plan, self.engine),
                "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "log": str(log),
            },
        )
        return result

    def _follow(self, log: Path) -> tuple[int | None, str]:
        """Copy ``build.log`` here as it grows until ``build.rc`` appears: its exit status and
        the step then running; None for a build that stopped without writing it (killed)."""
        tracker = StepTracker(self.on_step)
        log.parent.mkdir(parents=True, exist_ok=True)
        line_no = 1
        with log.open("w", encoding="utf-8") as out:
            out.write(f"# hpcenv build --on-login: {self.t.describe()}:{self.root}/build.log\n")
            while True:
                text = self._run(
                    f"cd {join([self.root])} && sh -s -- {int(line_no)}", stdin=_state_script()
                )
                state, _, body = text.partition("\n")
                lines = body.split("\n")[:-1]  # the last piece is a line still being written
                for line in lines:
                    out.write(line + "\n")
                    tracker.feed(printable(line))  # the login node's text reaches a terminal
                out.flush()
                line_no += len(lines)
                words = state.split()
                if words[:1] == ["done"]:
                    rc = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
                    current = tracker._current  # the step running when the build ended
                    return rc, current[2] if current else ""
                if words[:1] != ["running"]:
                    return None, ""
                time.sleep(self.interval)


def dry_run_summary(
    plan: BuildPlan, host: str, fmt: str, engine_name: str | None = None
) -> dict[str, object]:
    """What ``--on-login`` would send, where it builds and with which commands."""
    root = f"$HOME/{remote_folder(plan)}"
    return {
        "host": host,
        "folder": f"~/{remote_folder(plan)} (0700)",
        "sends": f"the build context {plan.context} (only files whose sha256 differs there), "
        "and build.sh",
        "builder": builder(plan, engine_name),
        "commands": script_lines(plan, root, fmt, engine_name),
    }
