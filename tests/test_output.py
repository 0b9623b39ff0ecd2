"""Output and state: ``render --out`` replaces a folder whole or not at all, never writes into a
folder it did not make (or into ``/``), survives Ctrl-C, a full disk and a read-only target;
concurrent renders take turns; ``build --dry-run`` writes nothing; bad cache folders, non-UTF-8
files and corrupt job records are one-line errors. Every failure runs the installed ``hpcenv``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from interrupts import after_signal, terminal_sigint
from requirements import AS_ROOT, need, need_root, need_tool

from hpcenv.errors import OutputError
from hpcenv.output import MARKER, publish_dir

HPCENV = Path(sys.executable).with_name("hpcenv")
RENDERED = ["Dockerfile", "Singularity.def", "stack.lock.json", "job.sh", "checks", MARKER]


def hpcenv(*args: str, env: dict[str, str] | None = None, timeout: int = 120):
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def render(out: Path, *extra: str, recipe: str = "daal4py"):
    return hpcenv("render", "--site", "local", "--recipe", recipe, "--out", str(out), *extra)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_render_makes_a_marked_folder_and_replaces_it_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = render(out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*RENDERED, "hpcenv-build", "hpcenv-build.sha256"]
    )
    assert not (out / "hpcenv-build" / "pip.conf").exists()  # may hold credentials
    (out / "stale-file").write_text("from an older render")
    again = render(out, recipe="horovod-cpu")
    assert again.returncode == 0, again.stderr
    assert not (out / "stale-file").exists()  # replaced whole, not merged
    assert json.loads((out / "stack.lock.json").read_text())["recipe"] == "horovod-cpu"
    beside = sorted(p.name for p in tmp_path.iterdir())
    assert beside == [".out.hpcenv-lock", "out"]  # no temporary folders left


def test_render_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    (out / "checks").mkdir(parents=True)
    (out / "checks" / "my_check.py").write_text("print('mine')\n")
    (out / "Dockerfile").write_text("FROM mine\n")
    before = snapshot(out)
    line = one_line_error(render(out))
    assert "did not create" in line and "--force" in line
    assert snapshot(out) == before
    forced = render(out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (out / MARKER).is_file() and not (out / "checks" / "my_check.py").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert render(empty).returncode == 0  # an empty folder is fine


def test_render_out_file_root_and_symlink_are_refused(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    assert "is a file" in one_line_error(render(afile))
    assert afile.read_text() == "keep me"
    root_before = sorted(os.listdir("/"))
    for root in ("/", "/.", "//"):
        assert "filesystem root" in one_line_error(render(Path(root), "--force"))
    assert sorted(os.listdir("/")) == root_before
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    assert "symbolic link" in one_line_error(render(link))
    here = tmp_path / "here"
    (here / "sub").mkdir(parents=True)
    for out in (".", ".."):
        proc = subprocess.run(
            [
                str(HPCENV),
                "render",
                "--site",
                "local",
                "--recipe",
                "daal4py",
                "--out",
                out,
                "--force",
            ],
            capture_output=True,
            text=True,
            cwd=here / "sub",
            timeout=120,
        )
        assert "current folder" in one_line_error(proc)
    assert sorted(p.name for p in here.rglob("*")) == ["sub"]


def test_ctrl_c_while_writing_keeps_the_old_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert render(out).returncode == 0
    before = snapshot(out)
    # The real CLI, with the writer slowed down after its first files so SIGINT lands mid-write.
    code = (
        "import time, hpcenv.render as r\n"
        "real = r.write\n"
        "def slow(*a, **k):\n"
        "    paths = real(*a, **k)\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(600)\n"
        "    return paths\n"
        "r.write = slow\n"
        "from hpcenv.cli.main import main\n"
        "main()\n"
    )
    argv = [
        sys.executable,
        "-c",
        code,
        "render",
        "--site",
        "local",
        "--recipe",
        "horovod-cpu",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_sigint,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    _, err = after_signal(proc, timeout=120)
    assert proc.returncode == 130 and err.strip() == "interrupted", err
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.hpcenv-lock", "out"]


@contextlib.contextmanager
def tmpfs(path: Path, size_kb: int) -> Iterator[Path]:
    why = "a small tmpfs is the full disk"
    need_root(why)
    for tool in ("mount", "umount"):
        need_tool(tool, why=why, how="util-linux provides it (apt-get install util-linux)")
    path.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        need(f"a tmpfs mount (mount said: {proc.stderr.strip()})", why, AS_ROOT)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _size_kb(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) // 1024 + 1


def test_full_disk_keeps_the_old_output_and_leaves_nothing(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    assert render(probe).returncode == 0
    # Room for one rendering (tmpfs counts whole pages per file), not two.
    files = sum(1 for _ in probe.rglob("*"))
    size = _size_kb(probe) + 4 * files + 16
    with tmpfs(tmp_path / "small", size) as disk:
        out = disk / "out"
        assert render(out).returncode == 0
        before = snapshot(out)
        line = one_line_error(render(out))
        assert "No space left on device" in line, line
        assert snapshot(out) == before
        assert sorted(p.name for p in disk.iterdir()) == [".out.hpcenv-lock", "out"]


def test_read_only_target_keeps_the_old_output(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", 4096) as disk:
        out = disk / "out"
        assert render(out).returncode == 0
        before = snapshot(out)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        line = one_line_error(render(out))
        assert "Read-only file system" in line
        assert snapshot(out) == before


def test_publish_dir_failure_removes_the_temporary_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    publish_dir(out, lambda d: (d / "a").write_text("old"))

    def boom(d: Path) -> None:
        (d / "a").write_text("new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        publish_dir(out, boom)
    assert (out / "a").read_text() == "old"
    (tmp_path / ".out.hpcenv-tmp-left").mkdir()  # what a killed writer leaves
    (tmp_path / ".out.hpcenv-old-9").mkdir()
    with pytest.raises(OutputError, match="cannot write"):
        publish_dir(out, lambda d: (d / "missing" / "x").write_text("y"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.hpcenv-lock", "out"]


def test_racing_renders_take_turns_and_never_mix(tmp_path: Path) -> None:
    """24 renders of two recipes into one folder at once: all succeed, and a reader watching
    the folder the whole time never sees files of two recipes together."""
    out = tmp_path / "out"
    assert render(out).returncode == 0
    seen: list[str] = []
    mixed: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                mixed.append("output folder missing during a swap")
                continue
            try:
                recipes = set()
                for name in ("stack.lock.json", "Dockerfile", "job.sh"):
                    file_fd = os.open(name, os.O_RDONLY, dir_fd=fd)
                    with os.fdopen(file_fd, "rb") as fh:
                        text = fh.read().decode()
                    for recipe in ("daal4py", "horovod-cpu"):
                        if (
                            f"recipe {recipe}" in text
                            or f'"recipe": "{recipe}"' in text
                            or f"hpcenv-{recipe}" in text
                        ):
                            recipes.add(recipe)
                if len(recipes) != 1:
                    mixed.append(f"recipes {sorted(recipes)}")
                seen.append(recipes.pop() if recipes else "?")
            except FileNotFoundError:
                pass  # the folder was swapped out and is being removed: not a mix
            finally:
                os.close(fd)

    watcher = threading.Thread(target=watch)
    watcher.start()
    recipes = ["daal4py", "horovod-cpu"] * 12
    argv = [
        [str(HPCENV), "render", "--site", "local", "--recipe", r, "--out", str(out)]
        for r in recipes
    ]
    procs = [
        subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argv
    ]
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
    stop.set()
    watcher.join()
    for p in procs:
        for stream in (p.stdout, p.stderr):
            if stream:
                stream.close()
    assert [rc for rc, _ in results] == [0] * len(recipes), [e for _, e in results if e]
    assert mixed == [] and len(seen) > 10, (mixed[:5], len(seen))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.hpcenv-lock", "out"]


def test_build_dry_run_writes_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc = hpcenv(
        "build",
        "--site",
        "local",
        "--dry-run",
        env={"HPCENV_CACHE": str(cache)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "context:" in proc.stdout
    assert not cache.exists()
    out = tmp_path / "ctx"
    proc = hpcenv(
        "build", "--site", "local", "--dry-run", "--out", str(out), env={"HPCENV_CACHE": str(cache)}
    )
    assert proc.returncode == 0 and not out.exists() and not cache.exists()


def test_bad_cache_folder_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = one_line_error(hpcenv("status", "123", env={"HPCENV_CACHE": str(afile / "cache")}))
    assert "HPCENV_CACHE" in line and "cannot be made" in line


def test_non_utf8_site_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: bad\ndescription: caf\xe9\n")
    line = one_line_error(hpcenv("resolve", "--site", str(bad), "--recipe", "daal4py"))
    assert f"{bad}:2: not UTF-8" in line


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"job_id": "1"}', b"[]"])
def test_corrupt_job_record_is_one_line(tmp_path: Path, content: bytes) -> None:
    jobs = tmp_path / "cache" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "local-somehost-4242.json").write_bytes(content)
    line = one_line_error(hpcenv("status", "4242", env={"HPCENV_CACHE": str(tmp_path / "cache")}))
    assert "job record" in line and "unreadable" in line


def test_job_records_are_keyed_by_transport_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcenv.jobs.submit import Submission, load_record, record_key, records_dir
    from hpcenv.jobs.transport import TransportSpec
    from hpcenv.output import write_private

    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    local = TransportSpec()
    ssh = TransportSpec(kind="ssh", host="login1.example", port=2222)
    for spec, name in ((local, "here"), (ssh, "there")):
        sub = Submission("77", name, "local", "slurm", "/w", spec, (None, None), "")
        write_private(records_dir() / f"{record_key(spec, '77')}.json", json.dumps(sub.to_dict()))
    assert record_key(ssh, "77") == "ssh-login1.example-2222-77"
    names = sorted(p.name for p in records_dir().iterdir())
    assert len(names) == 2 and all(n.endswith("-77.json") for n in names)
    assert all((records_dir() / n).stat().st_mode & 0o777 == 0o600 for n in names)
    assert records_dir().stat().st_mode & 0o777 == 0o700
    with pytest.raises(Exception, match="more than one place"):
        load_record("77")
    assert load_record("77", "local").name == "here"  # type: ignore[union-attr]
    assert load_record("77", "login1.example").name == "there"  # type: ignore[union-attr]
    assert load_record("7") is None
    proc = hpcenv("status", "77", env={"HPCENV_CACHE": str(tmp_path / "cache")})
    assert "--on local" in one_line_error(proc)


def test_swap_without_renameat2_still_replaces_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels or libcs without RENAME_EXCHANGE: two renames, same result, nothing left."""
    import hpcenv.output as output

    monkeypatch.setattr(output, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    publish_dir(out, lambda d: (d / "a").write_text("one"))
    publish_dir(out, lambda d: (d / "b").write_text("two"))
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.hpcenv-lock", "out"]


def test_unreadable_or_vanished_places_are_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.Popen(
        [str(HPCENV), "render", "--site", "local", "--recipe", "daal4py", "--out", "rel-out"],
        cwd=gone,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    gone.rmdir()  # usually before the process resolves the relative --out
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    absolute = tmp_path / "abs-out"
    ok = subprocess.run(
        [str(HPCENV), "render", "--site", "local", "--recipe", "daal4py", "--out", str(absolute)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and (absolute / MARKER).is_file()
