"""Issue 40, class 8 (hangs, memory and tracebacks) and "bounded work": each case as it was
found, run through the installed ``hpcenv`` as a process with a time limit, and the unit under
it where that says more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError

HPCENV = Path(sys.executable).with_name("hpcenv")


def run_hpcenv(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HPCENV_CACHE": str(cwd / "cache"), **(env or {})}
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=full,
        cwd=cwd,
        timeout=timeout,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


# 1. Requirement '-r' chains -------------------------------------------------------------------


def _diamond(folder: Path, levels: int) -> Path:
    folder.mkdir()
    for i in range(levels):
        for side in "ab":
            (folder / f"{side}{i}.txt").write_text(
                f"-r a{i + 1}.txt\n-r b{i + 1}.txt\n", encoding="utf-8"
            )
    (folder / f"a{levels}.txt").write_text("six\n", encoding="utf-8")
    (folder / f"b{levels}.txt").write_text("tabulate\n", encoding="utf-8")
    return folder / "a0.txt"


def _resolve_with(tmp_path: Path, req: Path) -> subprocess.CompletedProcess[str]:
    args = ["resolve", "-s", "generic-slurm", "-r", "horovod-cpu", "--requirements", str(req)]
    return run_hpcenv(*args, cwd=tmp_path, timeout=30)


def test_a_diamond_of_includes_is_read_once_per_file(tmp_path: Path) -> None:
    """15 levels of two files each including both of the next: 2**15 paths, 32 files."""
    proc = _resolve_with(tmp_path, _diamond(tmp_path / "d", 15))
    assert proc.returncode == 0, proc.stderr
    assert "six" in proc.stdout and "tabulate" in proc.stdout


def test_a_22_level_diamond_is_refused_quickly(tmp_path: Path) -> None:
    line = one_line_error(_resolve_with(tmp_path, _diamond(tmp_path / "d", 22)))
    assert "nest deeper than 16 levels" in line and "a0.txt>a1.txt>" in line


def test_1500_levels_of_includes_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    folder = tmp_path / "deep"
    folder.mkdir()
    for i in range(1500):
        (folder / f"r{i}.txt").write_text(f"-r r{i + 1}.txt\n", encoding="utf-8")
    (folder / "r1500.txt").write_text("six\n", encoding="utf-8")
    one_line_error(_resolve_with(tmp_path, folder / "r0.txt"), "nest deeper than 16 levels")


def test_an_included_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("-r p.txt\n", encoding="utf-8")
    os.mkfifo(tmp_path / "p.txt")
    one_line_error(_resolve_with(tmp_path, tmp_path / "r.txt"), "p.txt", "FIFO")


def test_includes_are_bounded_in_count_and_size(tmp_path: Path) -> None:
    from hpcenv import usercontent

    wide = tmp_path / "wide"
    wide.mkdir()
    n = usercontent.MAX_INCLUDE_FILES + 1
    (wide / "top.txt").write_text("".join(f"-r f{i}.txt\n" for i in range(n)), encoding="utf-8")
    for i in range(n):
        (wide / f"f{i}.txt").write_text("six\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="more than 256 files"):
        usercontent.read_requirements(wide / "top.txt", wide, "top.txt")
    big = tmp_path / "big"
    big.mkdir()
    (big / "top.txt").write_text("".join(f"-r f{i}.txt\n" for i in range(6)), encoding="utf-8")
    for i in range(6):  # 6 files of ~0.9 MiB: each under the per-file limit, 5.4 MiB in all
        (big / f"f{i}.txt").write_text("# pad\n" * 150_000 + "six\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="MiB of requirements in all"):
        usercontent.read_requirements(big / "top.txt", big, "top.txt")


# 2. Non-UTF-8 output of an external command ----------------------------------------------------


def _garbled_podman(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "podman"
    fake.write_text(
        "#!/bin/sh\nprintf 'overlay \\377\\376 storage\\n'\nprintf 'bad \\351\\n' >&2\n",
        encoding="utf-8",
    )
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_non_utf8_podman_info_is_not_a_traceback(tmp_path: Path) -> None:
    env = _garbled_podman(tmp_path)
    build = run_hpcenv("build", "-s", "local", "-r", "horovod-cpu", cwd=tmp_path, env=env)
    one_line_error(build, "unknown architecture")
    doctor = run_hpcenv("doctor", cwd=tmp_path, env=env)
    assert "Traceback" not in doctor.stderr and "UnicodeDecodeError" not in doctor.stderr
    assert "podman overlay" in doctor.stdout


def test_every_text_mode_subprocess_decodes_with_replacement() -> None:
    """A program's output in another encoding is decoded, never a UnicodeDecodeError: every
    ``subprocess.run``/``Popen``/``check_output`` in text mode says ``errors=``."""
    import ast

    bad = []
    for path in sorted((Path(__file__).parent.parent / "hpcenv").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            text = kw.get("text")
            texty = isinstance(text, ast.Constant) and text.value is True
            calls = name in ("run", "Popen", "check_output") and (texty or "encoding" in kw)
            if calls and "errors" not in kw:
                bad.append(f"{path.name}:{node.lineno}")
    assert bad == []


# 3. The login node's answers to build --on-login -----------------------------------------------

_FAKE_SSH = r'''#!/usr/bin/env python3
"""A login node answering build --on-login from FAKE_LOGIN_* (escapes as in Python strings)."""
import os, sys
cmd = sys.argv[-1]
sys.stdin.buffer.read()
def text(name, default=""):
    return os.environ.get(name, default).encode().decode("unicode_escape").encode("latin-1")
if "sha256sum" in cmd:
    sys.stdout.buffer.write(b"/home/u/.cache/hpcenv/remote-builds/x\n" + text("FAKE_LOGIN_STATE", "new") + b"\n")
elif "sh -s -- " in cmd:
    sys.stdout.buffer.write(b"done " + text("FAKE_LOGIN_RC", "0") + b"\n" + text("FAKE_LOGIN_LOG"))
elif "cat image.id image.ref" in cmd:
    sys.stdout.buffer.write(text("FAKE_LOGIN_ANSWER"))
'''


def _on_login(tmp_path: Path, **answers: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(_FAKE_SSH, encoding="utf-8")
    (bin_dir / "ssh").chmod(0o755)
    (tmp_path / "key").touch()
    (tmp_path / "known_hosts").touch()
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **answers}
    args = ["build", "-s", "local", "-r", "mpi4py-os", "--on-login", "--ssh-host", "login1"]
    args += ["--ssh-key", "key", "--known-hosts", "known_hosts"]
    return run_hpcenv(*args, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ("sha256:abc\\n", "are 1 line(s), not an image id and an image reference"),
        ("", "are 0 line(s)"),
        ("0123456789abcdef\\n-rm\\n", "image.ref '-rm' must not start with '-'"),
        ("\\x1b]52;c;aGk=\\x07\\nlocalhost/x:y\\n", "image.id in ssh://login1:"),
    ],
)
def test_a_bad_image_ref_answer_is_one_line(tmp_path: Path, answer: str, words: str) -> None:
    line = one_line_error(_on_login(tmp_path, FAKE_LOGIN_ANSWER=answer), words)
    assert "\x1b" not in line


def test_the_login_nodes_build_log_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    log = "STEP 1/2: RUN \\x1b]52;c;aGk=\\x07 true\\n\\x1b[2J\\x1b]0;title\\x07 failed\\n"
    proc = _on_login(tmp_path, FAKE_LOGIN_RC="1", FAKE_LOGIN_LOG=log)
    one_line_error(proc, "exit 1", "failed")
    assert "\x1b" not in proc.stderr and "\\x1b]52;" in proc.stderr


def test_a_good_answer_is_recorded(tmp_path: Path) -> None:
    proc = _on_login(tmp_path, FAKE_LOGIN_ANSWER="0123456789abcdef\\nlocalhost/hpcenv/x:y\\n")
    assert proc.returncode == 0, proc.stderr
    assert "image localhost/hpcenv/x:y (0123456789ab)" in proc.stderr


# 4. A FIFO where hpcenv reads back its own state ------------------------------------------------


def test_a_fifo_in_the_records_folder_does_not_hang_status(tmp_path: Path) -> None:
    records = tmp_path / "cache" / "jobs"
    records.mkdir(parents=True, mode=0o700)
    os.mkfifo(records / "local-123.json")
    listing = run_hpcenv("status", cwd=tmp_path, timeout=30)
    assert listing.returncode == 0, listing.stderr
    assert "UNREADABLE" in listing.stdout and "not a regular file" in listing.stdout
    for command in ("status", "logs", "cancel"):
        one_line_error(run_hpcenv(command, "123", cwd=tmp_path, timeout=30), "not a regular file")


def test_a_fifo_as_a_history_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    from hpcenv.reads import json_lines

    os.mkfifo(tmp_path / "history.jsonl")
    assert json_lines(tmp_path / "history.jsonl", lambda d: True) == []  # not a file: none
    (tmp_path / "h.jsonl").write_text('{"a": 1}\n{"a":\n{"a": 2}\n', encoding="utf-8")
    assert json_lines(tmp_path / "h.jsonl", lambda d: True) == [{"a": 1}, {"a": 2}]


# 7. The scheduler's odd answers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("JobId=5 JobState= Reason=None ExitCode=0:0", "job 5: UNKNOWN (scontrol)"),
        ("JobState", "UNKNOWN (scontrol)"),
        ("JobId=5 ArrayTaskId= JobState=RUNNING", "job 5: RUNNING (scontrol)"),
    ],
)
def test_an_empty_jobstate_from_scontrol_is_unknown(tmp_path: Path, line: str, shown: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "squeue"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{line}'\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = run_hpcenv("status", "5", "--site", "generic-slurm", cwd=tmp_path, env=env, timeout=30)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert shown in proc.stdout


# 6. extends: bases whose provenance is not a mapping -------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("where", "tail", "words"),
    [
        ("base", "provenance: 5\n", "base.yaml:106: field 'provenance': a mapping of verified"),
        ("base", "provenance:\n  verified: [a, b]\n", "field 'provenance.verified': a mapping"),
        ("child", "provenance: 5\n", "child.yaml:3: field 'provenance': a mapping"),
        ("child", "provenance:\n  assumed: text\n", "field 'provenance.assumed': a mapping"),
    ],
)
def test_a_bad_provenance_in_an_extends_chain_is_one_line(
    tmp_path: Path, where: str, tail: str, words: str
) -> None:
    text = (ROOT / "site-configs" / "local.yaml").read_text(encoding="utf-8")
    text = text[: text.index("\nprovenance:")] + "\n"
    lines = text.count("\n")
    base = text + "\n" + (tail if where == "base" else "")
    (tmp_path / "base.yaml").write_text(base, encoding="utf-8")
    child = "extends: ./base.yaml\nname: child\n" + (tail if where == "child" else "")
    (tmp_path / "child.yaml").write_text(child, encoding="utf-8")
    proc = run_hpcenv("resolve", "-s", "child.yaml", "-r", "horovod-cpu", cwd=tmp_path)
    expected = words.replace("base.yaml:106", f"base.yaml:{lines + 2}")
    one_line_error(proc, expected)


def test_an_empty_provenance_in_a_base_is_no_provenance(tmp_path: Path) -> None:
    text = (ROOT / "site-configs" / "local.yaml").read_text(encoding="utf-8")
    text = text[: text.index("\nprovenance:")] + "\nprovenance:\n  verified:\n"
    (tmp_path / "base.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "child.yaml").write_text("extends: ./base.yaml\nname: child\n", encoding="utf-8")
    proc = run_hpcenv("resolve", "-s", "child.yaml", "-r", "horovod-cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


# 5. logs: streamed, escapes shown ---------------------------------------------------------------

_LOG_LINE = b"step 1 loss 0.5 \x1b]52;c;aGVsbG8=\x07 \x1b]0;title\x07 \x1b[2J done\t\xc3\xa9\n"


def _fake_slurm_job(tmp_path: Path, log: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    line = f"JobId=5 JobName=x JobState=COMPLETED ExitCode=0:0 StdOut={log} StdErr={log}"
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho '{line}'\n", encoding="utf-8")
    (bin_dir / "scontrol").chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _logs_of_a_log(tmp_path: Path, mib: int) -> tuple[int, Path, Path]:
    """``hpcenv logs`` of a ``mib`` MiB log: (its peak resident KiB, the log, what it printed)."""
    folder = tmp_path / f"log{mib}"
    folder.mkdir()
    log = folder / "big.log"
    count = (mib << 20) // len(_LOG_LINE)
    with log.open("wb") as handle:
        for _ in range(count // 1024):
            handle.write(_LOG_LINE * 1024)
    env = {**os.environ, "HPCENV_CACHE": str(folder / "cache"), **_fake_slurm_job(folder, log)}
    out = folder / "out.txt"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [str(HPCENV), "logs", "5", "--site", "generic-slurm"],
            stdout=sink,
            stderr=subprocess.PIPE,
            env=env,
            cwd=folder,
        )
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss, log, out


def test_logs_streams_a_large_log_with_bounded_memory_and_escapes_shown(tmp_path: Path) -> None:
    """A log 8 times larger takes no more memory to print (read whole, 56 MiB more of log held
    some 180 MB more: 964 MB resident for a 300 MB log), and its escapes are shown."""
    small, _, _ = _logs_of_a_log(tmp_path, 8)
    large, log, out = _logs_of_a_log(tmp_path, 64)
    assert large - small < 48 * 1024, f"{small} KiB for 8 MiB of log, {large} KiB for 64 MiB"
    with out.open("rb") as handle:
        head = handle.read(1 << 16)
    assert b"\x1b" not in head and b"\x07" not in head
    first = head.splitlines()[1].decode()
    assert first == "step 1 loss 0.5 \\x1b]52;c;aGVsbG8=\\x07 \\x1b]0;title\\x07 \\x1b[2J done\té"
    assert out.stat().st_size > log.stat().st_size  # every line there, escapes longer


def test_printable_escapes_what_it_did_before() -> None:
    """The replace-based :func:`printable` gives exactly the per-match escapes it gave."""
    import re

    from hpcenv.printable import printable

    control = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")

    def before(text: str, lines: bool) -> str:
        def esc(m: re.Match[str]) -> str:
            c = ord(m.group(0))
            return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

        text = control.sub(esc, text)
        return text if lines else re.sub(r"[\t\n]", esc, text)

    every = "".join(chr(i) for i in range(0x3000))
    for text in (every, "plain", "a\nb\tc", "\\x1b literal", "x\x1b]52;c;aGk=\x07\n"):
        for lines in (False, True):
            assert printable(text, lines=lines) == before(text, lines)


# 8. Another user's folders in a group workdir, and forged end markers --------------------------

NOBODY = 65534


def _dry_job(tmp_path: Path, plant: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The generic-slurm job script, run for real with stub launchers (tests/job_harness.py),
    after another user (uid 65534) made ``plant`` in its workdir."""
    from hpcenv.jobs import JobSpec, default_image, prepare
    from hpcenv.site import load_site
    from tests.job_harness import Harness, expand, rooted, script_exports

    harness = Harness(tmp_path)
    site = rooted(load_site("generic-slurm"), tmp_path)
    job = JobSpec(name="train", command=["python", "-c", "print(1)"], nodes=1, recipe="mpi4py-os")
    rendered = prepare(site, job, default_image(site, job.recipe), submitting=True)
    env = harness.env(site)
    values = script_exports(rendered.script, env)
    harness.provide(site, env, values)
    workdir = Path(expand(rendered.workdir, {**env, **values}))
    workdir.mkdir(parents=True, exist_ok=True)
    planted = workdir / plant
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    run = harness.run(rendered.script, env)
    return subprocess.CompletedProcess([], run.returncode, run.stdout, run.stderr), workdir


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder of another user (chown)")
@pytest.mark.parametrize(
    ("plant", "steps_glob"), [(".hpcenv/4242", ".hpcenv/4242.*"), (".hpcenv", ".hpcenv-*/4242")]
)
def test_another_users_folder_under_the_next_job_id_does_not_stop_the_job(
    tmp_path: Path, plant: str, steps_glob: str
) -> None:
    run, workdir = _dry_job(tmp_path, plant)
    assert run.returncode == 0, run.stderr
    assert "steps go to a folder of its own" in run.stderr
    (steps,) = workdir.glob(steps_glob)
    info = steps.stat()
    assert info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0
    assert (steps / "ended").read_text() == "0\n"
    assert (workdir / plant).stat().st_uid == NOBODY  # left as it was


def test_an_end_marker_not_written_by_this_users_job_is_ignored_with_a_warning(
    tmp_path: Path,
) -> None:
    from hpcenv.jobs.ended import EndSignal

    folder = tmp_path / "4242"
    folder.mkdir(mode=0o700)
    warned: list[str] = []
    signal = EndSignal(folder / "ended", warned.append)
    folder.chmod(0o770)  # a folder others may write: its marker may be anyone's
    (folder / "ended").write_text("0\n")
    assert signal() is False and signal() is False
    assert len(warned) == 1 and "others may write its folder (mode 0770)" in warned[0]
    folder.chmod(0o700)
    assert signal() is True
    (folder / "ended").unlink()
    (folder / "ended").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("0\n")
    assert signal() is False
    if os.geteuid() == 0:
        (folder / "ended").unlink()
        (folder / "ended").write_text("1\n")
        os.chown(folder / "ended", NOBODY, NOBODY)
        again: list[str] = []
        assert EndSignal(folder / "ended", again.append)() is False
        assert "belongs to" in again[0] and "not to you" in again[0]


def test_status_wait_ignores_a_marker_it_cannot_trust(tmp_path: Path) -> None:
    """``hpcenv status ID --wait`` as a process: a marker in a steps folder others may write
    (as another user's would be) is named once in a warning, and the wait goes by the scheduler."""
    import json
    import time

    jobs = tmp_path / "cache" / "jobs"
    jobs.mkdir(parents=True, mode=0o700)
    workdir = tmp_path / "w"
    doc = {
        "job_id": "77",
        "name": "train",
        "site": "local",
        "scheduler": "slurm",
        "workdir": str(workdir),
        "transport": {"kind": "local"},
        "log_names": ["train-%j.out", "train-%j.err"],
        "script_path": "",
    }
    (jobs / "local-h-77.json").write_text(json.dumps(doc), encoding="utf-8")
    (jobs / "local-h-77.json").chmod(0o600)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    done = tmp_path / "done"
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\nstate=RUNNING\n[ -e {done} ] && state=COMPLETED\n"
        'echo "JobId=77 JobName=train JobState=$state Reason=None ExitCode=0:0"\n',
        encoding="utf-8",
    )
    (bin_dir / "scontrol").chmod(0o755)
    env = {
        **os.environ,
        "HPCENV_CACHE": str(tmp_path / "cache"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.Popen(
        [str(HPCENV), "status", "77", "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        time.sleep(2)
        steps = workdir / ".hpcenv" / "77"
        steps.mkdir(parents=True)
        steps.chmod(0o777)
        (steps / "ended").write_text("0\n", encoding="utf-8")
        time.sleep(2)
        done.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "COMPLETED" in out
    warnings = [line for line in err.splitlines() if "ignoring the end marker" in line]
    assert len(warnings) == 1 and "others may write its folder (mode 0777)" in warnings[0], err


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder of another user (chown)")
def test_submit_locks_beside_another_users_hpcenv_folder(tmp_path: Path) -> None:
    """templates/jobs/submit.sh in a group workdir whose .hpcenv is another user's (which this
    user cannot write): the submit lock goes to .hpcenv-USER, and the job is submitted."""
    import pwd

    step = Path(__file__).resolve().parent.parent / "templates" / "jobs" / "submit.sh"
    workdir = tmp_path / "w"
    (workdir / ".hpcenv").mkdir(parents=True)
    os.chown(workdir / ".hpcenv", NOBODY, NOBODY)
    script = "#!/bin/bash\necho hello\n"
    proc = subprocess.run(
        ["bash", "-s", "--", str(workdir), "hpcenv-tok", "1", "true", "wc", "-c"],
        input=step.read_text(encoding="utf-8") + script,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].strip() == str(len(script))
    mine = workdir / f".hpcenv-{pwd.getpwuid(os.geteuid()).pw_name}"
    assert mine.is_dir() and mine.stat().st_mode & 0o077 == 0
    assert list((workdir / ".hpcenv").iterdir()) == []
