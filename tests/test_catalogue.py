"""The release catalogue (issue 22, "every real release of a component is known").

``hpcenv/knowledge/catalogue.yaml`` lists every final PyPI release of the components pip
installs; a pin may name any of them, while defaults still come from ``compat.yaml``'s curated
list. The refresh command is run here against a fake index on 127.0.0.1 that answers in PyPI's
JSON API format (the document's shape as PyPI served it for torch on 2026-11-24: ``info``,
``releases`` with per-file ``yanked``/``yanked_reason``, ``urls``, ``vulnerabilities``,
``last_serial``), so no test reaches the network. The process tests run the installed hpcenv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from hpcenv.errors import ConfigError
from hpcenv.knowledge import CATALOGUE_FILE, catalogue, known_releases, releases
from hpcenv.knowledge import facts as kfacts
from hpcenv.knowledge.refresh import HEADER, dump, load, parse_releases
from hpcenv.pins import check_pin

HPCENV = Path(sys.executable).with_name("hpcenv")


def hpcenv(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, timeout=120, env=env
    )


def _resolved_torch(*pins: str) -> str:
    args = [a for p in pins for a in ("--set", p)]
    proc = hpcenv("resolve", "-s", "local", "-r", "horovod-cpu", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    version: str = json.loads(proc.stdout)["components"]["torch"]["version"]
    return version


def test_a_real_torch_release_outside_the_curated_list_resolves() -> None:
    assert "2.2.0" not in releases("torch")  # the curated list skips it: the catalogue has it
    assert _resolved_torch("torch=2.2.0") == "2.2.0"


def test_the_set_help_example_resolves() -> None:
    proc = hpcenv("render", "--help", env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    example = re.search(r"\(e\.g\. ([\w.-]+=[\w.@-]+), ([\w.-]+=[\w.@-]+)\)", proc.stdout)
    assert example, "render --help lost its --set example"
    assert _resolved_torch(*example.groups()).startswith("2.2.0")


def test_a_release_that_never_existed_is_one_line_exit_2() -> None:
    proc = hpcenv("resolve", "-s", "local", "-r", "horovod-cpu", "--set", "torch=2.2.7")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "torch=2.2.7: not a known torch release (known: 2.2.2, 2.2.1, 2.2.0)" in line
    assert "torch=2.2.7!" in line


def test_every_curated_release_is_in_the_catalogue() -> None:
    for name, entry in catalogue().items():
        curated = releases(name, entry.get("variant"))
        assert curated, f"{name}: no curated releases (variant {entry.get('variant')})"
        missing = set(curated) - set(entry["releases"])
        assert not missing, f"{name}: curated but not on {entry['url']}: {sorted(missing)}"
        assert not set(curated) & set(entry["yanked"]), f"{name}: a curated release is yanked"


def test_the_catalogue_is_what_the_refresh_command_writes() -> None:
    text = CATALOGUE_FILE.read_text(encoding="utf-8")
    assert text.startswith(HEADER)
    assert dump(load(CATALOGUE_FILE)) == text, "catalogue.yaml was edited by hand"
    for name, entry in catalogue().items():
        assert entry["url"].startswith("https://pypi.org/pypi/"), name
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", entry["read"]), name
        order = [Version(v) for v in entry["releases"]]
        assert order == sorted(order, reverse=True), name
        assert not any(v.is_prerelease or v.is_devrelease for v in order), name


def test_known_releases_add_the_catalogue_to_the_curated_ones() -> None:
    known = known_releases("torch")
    assert set(releases("torch")) <= set(known)
    assert {"2.2.0", "2.2.1", "1.13.1"} <= set(known)
    assert known == sorted(known, key=Version, reverse=True)
    assert known_releases("cuda") == releases("cuda")  # not catalogued: the curated list


def _file(name: str, yanked: bool = False, reason: str | None = None) -> dict[str, Any]:
    """One file entry with every key PyPI's JSON API gives (read 2026-11-24)."""
    return {
        "comment_text": None,
        "digests": {"blake2b_256": "00", "md5": "00", "sha256": "00"},
        "downloads": -1,
        "filename": name,
        "has_sig": False,
        "md5_digest": "00",
        "packagetype": "bdist_wheel",
        "python_version": "cp311",
        "requires_python": ">=3.8.0",
        "size": 1,
        "upload_time": "2024-01-30T18:00:00",
        "upload_time_iso_8601": "2024-01-30T18:00:00.000000Z",
        "url": f"https://files.pythonhosted.org/packages/{name}",
        "yanked": yanked,
        "yanked_reason": reason,
        "core-metadata": False,
    }


def _doc(project: str, releases: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "info": {"name": project, "version": max(releases, key=Version), "yanked": False},
        "last_serial": 1,
        "releases": releases,
        "urls": [],
        "vulnerabilities": [],
        "ownership": {"organization": None, "roles": []},
    }


FAKE = {
    "torch": _doc(
        "torch",
        {
            "2.2.0": [_file("torch-2.2.0-cp311-cp311-manylinux1_x86_64.whl")],
            "2.10.0": [_file("torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl")],
            "2.2.1": [_file("a.whl", yanked=True), _file("b.whl")],  # partly yanked: a release
            "2.3.0rc1": [_file("torch-2.3.0rc1.whl")],  # pre-release: left out
            "2.4.0.dev20240101": [_file("torch-dev.whl")],  # dev release: left out
            "2.1.0.post1": [_file("torch-2.1.0.post1.whl")],  # post-release: kept
            "2.0.5": [_file("x.whl", True, "broken wheels"), _file("y.whl", True, None)],
            "1.0": [],  # no files: pip cannot install it
        },
    ),
    "horovod": _doc("horovod", {"0.28.1": [_file("horovod-0.28.1.tar.gz")]}),
}


@pytest.fixture
def fake_index(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    for project, doc in FAKE.items():
        (root / "pypi" / project).mkdir(parents=True)
        (root / "pypi" / project / "json").write_text(json.dumps(doc))
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/pypi"
    finally:
        server.shutdown()
        server.server_close()


def _refresh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpcenv.knowledge.refresh", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_refresh_writes_what_the_index_lists(fake_index: str, tmp_path: Path) -> None:
    target = tmp_path / "catalogue.yaml"
    target.write_text(
        yaml.safe_dump({"components": {"torch": {"project": "torch"}, "mpi4py": {"project": "x"}}})
    )
    proc = _refresh("torch", "--index", fake_index, "--file", str(target))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"torch: 4 releases from {fake_index}/torch/json\n"
    text = target.read_text()
    assert text.startswith(HEADER)
    torch = yaml.safe_load(text)["components"]["torch"]
    assert torch["project"] == "torch"
    assert torch["url"] == f"{fake_index}/torch/json"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", torch["read"])
    assert torch["releases"] == ["2.10.0", "2.2.1", "2.2.0", "2.1.0.post1"]
    assert torch["yanked"] == {"2.0.5": "broken wheels"}
    assert yaml.safe_load(text)["components"]["mpi4py"] == {"project": "x"}  # not asked for


def test_refresh_failures_are_one_line_exit_2(fake_index: str, tmp_path: Path) -> None:
    target = tmp_path / "catalogue.yaml"
    target.write_text(yaml.safe_dump({"components": {"nope": {"project": "nope"}}}))
    before = target.read_text()
    for args, message in [
        (["nope"], "/nope/json: cannot read it"),  # the index answers 404
        (["torch"], "torch: not in catalogue.yaml (components: nope)"),
    ]:
        proc = _refresh(*args, "--index", fake_index, "--file", str(target))
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.splitlines()
        assert line.startswith("error: ") and message in line, line
    assert target.read_text() == before


def test_parse_releases_needs_the_json_api() -> None:
    with pytest.raises(ConfigError, match="no 'releases'"):
        parse_releases({"meta": {"api-version": "1.1"}, "files": []})  # PEP 691, not this API


def test_a_yanked_release_is_refused_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    data = {"torch": {**catalogue()["torch"], "yanked": {"2.0.5": "broken wheels"}}}
    monkeypatch.setattr(kfacts, "catalogue", lambda: data)
    with pytest.raises(ConfigError) as err:
        check_pin("torch", "2.0.5", "--set")
    assert str(err.value) == (
        "--set: torch=2.0.5: torch 2.0.5 was yanked from the package index (broken wheels); "
        "to use it anyway, pin it as torch=2.0.5!"
    )
    assert check_pin("torch", "2.0.5!", "--set").forced


ROCM63 = """\
extends: frontier
name: rocm63
gpu:
  rocm: "6.3.4"
modules: [PrgEnv-gnu/8.7.0, cpe/26.03, rocm/6.3.4, craype-accel-amd-gfx90a, cray-mpich-abi/9.1.0, rccl-net-plugin]
"""


def test_torch_271_resolves_on_a_rocm_63_site(tmp_path: Path) -> None:
    site = tmp_path / "rocm63.yaml"
    site.write_text(ROCM63)
    proc = hpcenv(
        "resolve", "--site", str(site), "-r", "torch-gpu", "--set", "torch=2.7.1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    lock = json.loads(proc.stdout)
    assert lock["components"]["torch"]["version"] == "2.7.1"
    assert lock["components"]["rocm"]["version"] == "6.3.4"
    # a torch series whose ROCm builds are known, but not for this ROCm: one line, exit 2
    proc = hpcenv("resolve", "--site", str(site), "-r", "torch-gpu", "--set", "torch=2.11.0")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "torch 2.11.0 has ROCm builds 7.2 [rule torch-rocm" in line


def test_a_torch_release_only_in_the_catalogue_has_rule_rows() -> None:
    assert "2.11.0" not in releases("torch")
    assert _resolved_torch("torch=2.11.0") == "2.11.0"  # torch-python knows 2.11
