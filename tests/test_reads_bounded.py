"""Issue 20, classes 5 and 6: effects in a safe order, reads bounded and confined.

- ``submit`` checks that the job records folder is a writable folder of this user's before
  ``sbatch`` runs: a folder that cannot hold the record fails with one line, exit 2, and the
  stub ``sbatch`` is never called (a retry after "queued, then failed" submitted twice).
- ``extends:`` reaches site files only: a site name, or a ``.yaml``/``.yml`` regular file; a base
  that is not a site file is refused naming its path, never its content (as root,
  ``extends: /etc/shadow`` printed the file line by line).
- Every user file is sized before it is read (a 3 GiB file was read whole before the 1 MiB
  limit) and nesting is bounded (10000 nested lists ended in RecursionError).

The process tests run the installed ``hpcenv``.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError, JobError
from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.transport import LocalTransport
from hpcenv.reads import MAX_DEPTH, load_json, read_bounded
from hpcenv.site import Site
from hpcenv.site.load import load_site_file
from hpcenv.tuning.store import load as load_tuning
from hpcenv.yamlsrc import load_yaml

HPCENV = Path(sys.executable).with_name("hpcenv")
submit_mod = importlib.import_module("hpcenv.jobs.submit")  # hpcenv.jobs.submit is also a function
SECRET = "s3cr3t-hash-line"

SBATCH = """#!/bin/bash
cat >/dev/null
echo called >>"$SBATCH_LOG"
echo 4242
"""


def hpcenv(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _stub_sbatch(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SBATCH_LOG": str(tmp_path / "sbatch.log"),
        "HPCENV_CACHE": str(tmp_path / "cache"),
    }


def _submit(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return hpcenv(
        "submit",
        "--site",
        "generic-slurm",
        "--no-container",
        "--single",
        "--workdir",
        str(tmp_path / "wd"),
        "--",
        "true",
        env=env,
    )


# --- effects in a safe order -----------------------------------------------------------------


def _records_a_file(cache: Path) -> None:
    cache.mkdir()
    (cache / "jobs").write_text("not a folder\n")


def _records_a_link(cache: Path) -> None:
    cache.mkdir()
    (cache / "jobs").symlink_to("/tmp")


def _cache_a_file(cache: Path) -> None:
    cache.write_text("not a folder\n")


def _records_not_ours(cache: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    (cache / "jobs").mkdir(parents=True)
    os.chown(cache / "jobs", 65534, 65534)


@pytest.mark.parametrize(
    "spoil",
    [_records_a_file, _records_a_link, _cache_a_file, _records_not_ours],
    ids=["records-a-file", "records-a-link", "cache-a-file", "records-not-ours"],
)
def test_unusable_records_folder_fails_before_anything_is_queued(tmp_path: Path, spoil) -> None:
    env = _stub_sbatch(tmp_path)
    spoil(Path(env["HPCENV_CACHE"]))
    line = one_line_error(_submit(tmp_path, env))
    assert "nothing was submitted" in line and "HPCENV_CACHE" in line, line
    assert not Path(env["SBATCH_LOG"]).exists(), "sbatch ran"
    assert not (tmp_path / "wd").exists()


def test_read_only_records_folder_fails_before_anything_is_queued(tmp_path: Path) -> None:
    """A read-only mount: as root, permissions alone never stop a write."""
    from test_output import tmpfs

    env = _stub_sbatch(tmp_path)
    with tmpfs(tmp_path / "ro", 1024) as disk:
        (disk / "jobs").mkdir(mode=0o700)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        env["HPCENV_CACHE"] = str(disk)
        line = one_line_error(_submit(tmp_path, env))
    assert "not writable" in line and "nothing was submitted" in line, line
    assert not Path(env["SBATCH_LOG"]).exists(), "sbatch ran"


def test_the_same_submission_succeeds_once_the_folder_is_fixed(tmp_path: Path) -> None:
    env = _stub_sbatch(tmp_path)
    _records_a_file(Path(env["HPCENV_CACHE"]))
    one_line_error(_submit(tmp_path, env))
    (Path(env["HPCENV_CACHE"]) / "jobs").unlink()
    proc = _submit(tmp_path, env)
    assert proc.returncode == 0 and "submitted 4242" in proc.stdout, proc.stderr
    assert Path(env["SBATCH_LOG"]).read_text().splitlines() == ["called"]
    records = sorted(p.name for p in (Path(env["HPCENV_CACHE"]) / "jobs").iterdir())
    assert [r.rsplit("-", 1)[-1] for r in records] == ["4242.json", "4242.sh"]


def test_a_record_lost_after_submitting_names_the_job(
    tmp_path: Path, local_site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _stub_sbatch(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    def full(path: Path, text: str) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(submit_mod, "write_private", full)
    job = JobSpec(
        name="r", command=["true"], launch="single", cores_per_rank=1, workdir=str(tmp_path)
    )
    with pytest.raises(JobError, match=r"job 4242 was submitted.*do not submit it again"):
        submit_mod.submit(local_site, job, LocalTransport())


# --- extends: confined to site files ---------------------------------------------------------


def _shadow(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(f"zqxuser: {SECRET}\nzqxdaemon: 1\n")
    return path


@pytest.mark.parametrize(
    "ref", ["/etc/shadow", "/etc/passwd", "shadow", "./shadow", "shadow.yaml", "link.yaml"]
)
def test_extends_reaches_site_files_only_and_shows_no_content(tmp_path: Path, ref: str) -> None:
    _shadow(tmp_path, "shadow")
    _shadow(tmp_path, "shadow.yaml")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "shadow")
    site = tmp_path / "mine.yaml"
    site.write_text(f"extends: {ref}\nname: mine\n")
    proc = hpcenv("sites", "validate", str(site), cwd=tmp_path)
    line = one_line_error(proc)
    assert SECRET not in proc.stderr and "zqx" not in proc.stderr
    assert "not a site file" in line or "unknown site" in line, line
    with pytest.raises(ConfigError) as err:
        load_site_file(site)
    assert SECRET not in str(err.value) and "zqx" not in str(err.value)


@pytest.mark.parametrize(
    "content",
    ["just a scalar\n", "- a list\n", "key: [unclosed\n", f"name: x\nname: {SECRET}\n"],
    ids=["scalar", "list", "bad-yaml", "duplicate-key"],
)
def test_a_base_that_is_not_a_site_file_is_named_not_shown(tmp_path: Path, content: str) -> None:
    (tmp_path / "base.yaml").write_text(content)
    site = tmp_path / "mine.yaml"
    site.write_text("extends: base.yaml\nname: mine\n")
    line = one_line_error(hpcenv("sites", "validate", str(site)))
    assert "base.yaml is not a site file" in line and SECRET not in line, line


def test_extends_a_site_file_by_path_and_by_name_still_works(tmp_path: Path) -> None:
    base = tmp_path / "sub" / "base.yml"
    base.parent.mkdir()
    base.write_text("extends: local\nname: base\n")
    site = tmp_path / "mine.yaml"
    site.write_text("extends: sub/base.yml\nname: mine\n")
    assert load_site_file(site).name == "mine"
    proc = hpcenv("sites", "validate", str(site))
    assert proc.returncode == 0, proc.stderr


# --- sizes looked at before reading ----------------------------------------------------------


def _sparse(path: Path, size: int = 3 << 30) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def test_a_3_gib_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "big.yaml")
    start = time.monotonic()
    for read in (
        lambda: load_yaml(big),
        lambda: load_site_file(big),
        lambda: load_tuning(big),
        lambda: load_json(big),
        lambda: read_bounded(big),
    ):
        with pytest.raises(ConfigError, match=r"3221225472 bytes; .* at most"):
            read()
    assert time.monotonic() - start < 5
    start = time.monotonic()
    line = one_line_error(hpcenv("sites", "validate", str(big)))
    assert "3221225472 bytes" in line and time.monotonic() - start < 10


def test_a_device_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="more than 1 MiB"):
        read_bounded(Path("/dev/zero"))
    with pytest.raises(ConfigError, match="is a folder"):
        read_bounded(tmp_path)


# --- depth limits -----------------------------------------------------------------------------

DEEP_JSON = "[" * 10000 + "]" * 10000
DEEP_YAML = "name: x\nnode: " + "[" * 10000 + "]" * 10000 + "\n"
MEDIUM_YAML = "name: x\nnode: " + "[" * 200 + "]" * 200 + "\n"


@pytest.mark.parametrize("text", [DEEP_YAML, MEDIUM_YAML], ids=["10000", "200"])
def test_deeply_nested_site_yaml_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH}"):
        load_yaml(path)
    assert "nested deeper" in one_line_error(hpcenv("sites", "validate", str(path)))


@pytest.mark.parametrize("text", [DEEP_JSON, "[" * 200 + "]" * 200], ids=["10000", "200"])
def test_deeply_nested_tuning_file_is_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="not a readable tuning file.*nested deeper"):
        load_tuning(path)


def _record_path(cache: Path, job_id: str) -> Path:
    host = socket.gethostname().split(".")[0]
    folder = cache / "jobs"
    folder.mkdir(parents=True, mode=0o700)
    return folder / f"local-{host}-{job_id}.json"


@pytest.mark.parametrize(
    "content",
    [DEEP_JSON, "{" * 5000, json.dumps({"job_id": [[[[[]]]]]}), "\xff\xfe"],
    ids=["deep", "unclosed", "wrong-types", "not-utf8"],
)
def test_hostile_job_record_is_one_line(tmp_path: Path, content: str) -> None:
    cache = tmp_path / "cache"
    _record_path(cache, "777").write_bytes(content.encode("utf-8", "surrogateescape"))
    line = one_line_error(hpcenv("status", "777", env={"HPCENV_CACHE": str(cache)}))
    assert "job record" in line and "delete it" in line, line


def test_huge_job_record_is_refused_unread(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _sparse(_record_path(cache, "778"))
    line = one_line_error(hpcenv("status", "778", env={"HPCENV_CACHE": str(cache)}))
    assert "3221225472 bytes" in line, line
