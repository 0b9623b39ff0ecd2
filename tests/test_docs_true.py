"""What the docs say, run (issue 22, "What the README, docs and help say is true"): the
site-authoring ``extends`` example resolves and its job loads the ROCm it asks for; a file that
changes a base's version but not what the base wrote for it is refused; ``extends`` is in the
JSON Schema and in ``sites fields``."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

HPCENV = Path(sys.executable).with_name("hpcenv")
ROOT = Path(__file__).resolve().parents[1]


def hpcenv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def _authoring_example() -> str:
    text = (ROOT / "docs" / "site-authoring.md").read_text()
    block = re.search(r"```yaml\n(extends: frontier.*?)```", text, re.S)
    assert block, "docs/site-authoring.md lost its extends example"
    return block.group(1)


def test_the_extends_example_resolves_and_loads_its_rocm(tmp_path: Path) -> None:
    site = tmp_path / "myfrontier.yaml"
    site.write_text(_authoring_example())
    proc = hpcenv("resolve", "--site", str(site), "--recipe", "torch-gpu", "--json")
    assert proc.returncode == 0, proc.stderr
    lock = json.loads(proc.stdout)
    assert lock["components"]["torch"]["version"] == "2.13.0"
    job = hpcenv("submit", "--site", str(site), "--recipe", "torch-gpu", "--dry-run", "--", "true")
    assert job.returncode == 0, job.stderr
    loads = [ln for ln in job.stdout.splitlines() if ln.startswith("module load")]
    assert loads and "rocm/7.2.0" in loads[0] and "rocm/7.1.1" not in job.stdout


def test_a_version_changed_without_what_the_base_wrote_for_it_is_refused(
    tmp_path: Path,
) -> None:
    site = tmp_path / "myfrontier.yaml"
    text = "\n".join(ln for ln in _authoring_example().splitlines() if "modules" not in ln)
    site.write_text(text + "\n")
    proc = hpcenv("submit", "--site", str(site), "--recipe", "torch-gpu", "--dry-run", "--", "x")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert re.fullmatch(
        r"error: .*myfrontier\.yaml:\d+: gpu\.rocm 7\.2\.0 replaces 7\.1\.1 of frontier\.yaml, "
        r"whose modules \(.*frontier\.yaml:\d+\) still names 7\.1\.1: 'rocm/7\.1\.1'; "
        r"set modules in this file too",
        line,
    ), line


def test_extends_is_in_the_schema_and_the_fields() -> None:
    schema = json.loads(hpcenv("sites", "schema").stdout)
    for root in ("Site", "PartialSite"):
        extends = schema["$defs"][root]["properties"]["extends"]
        assert extends["type"] == "string"
        assert "site this file starts from" in extends["description"]
    fields = hpcenv("sites", "fields", "extends")
    assert fields.returncode == 0 and fields.stdout.startswith("extends: a site this file")


def test_render_format_beside_out_is_an_error(tmp_path: Path) -> None:
    proc = hpcenv("render", "-s", "local", "-r", "horovod-cpu", "-f", "docker", "--out", "x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: --format docker prints one artifact to stdout and --out writes them all to a "
        "folder: give one of them"
    )


def test_a_printed_recipe_says_what_else_it_needs_and_render_out_writes_it(
    tmp_path: Path,
) -> None:
    """``--format docker > Dockerfile`` alone does not build: the note names each file of the
    build context it copies, and ``render --out`` writes every one of them."""
    from hpcenv.cli.stack import build_context_needs

    rendered = tmp_path / "out"
    assert (
        hpcenv("render", "-s", "local", "-r", "horovod-cpu", "--out", str(rendered)).returncode == 0
    )
    for fmt in ("docker", "singularity"):
        proc = hpcenv("render", "-s", "local", "-r", "horovod-cpu", "-f", fmt)
        assert proc.returncode == 0, proc.stderr
        needs = build_context_needs(fmt, proc.stdout)
        assert "stack.lock.json" in needs and "checks" in needs
        note = [ln for ln in proc.stderr.splitlines() if ln.startswith("note:")]
        assert note and all(n in note[0] for n in needs), proc.stderr
        for need in needs:
            assert (rendered / need).exists(), need
    job = hpcenv("render", "-s", "local", "-r", "horovod-cpu", "-f", "job")
    assert job.returncode == 0 and "note:" not in job.stderr


def test_the_missing_extra_hint_names_where_this_install_came_from() -> None:
    """A checkout install gets ``pip install -e CHECKOUT[extra]`` (``pip install
    'hpcenv[extra]'`` would fetch PyPI's hpcenv over it); the folder named is a checkout whose
    pyproject.toml has that extra."""
    import shlex
    import tomllib

    from hpcenv.extras import install_hint

    argv = shlex.split(install_hint("smoke"))
    assert argv[:4] == [sys.executable, "-m", "pip", "install"], argv
    target = argv[-1]
    if argv[4] == "-e" or target.startswith("/"):
        folder = Path(target.removesuffix("[smoke]"))
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        assert project["name"] == "hpcenv" and "smoke" in project["optional-dependencies"]
    else:
        assert target == "hpcenv[smoke]"


_REPO_PATH = re.compile(
    r"(?<![\w/.-])(?:docs|scripts|templates|site-configs|recipes|tests|bin)/[A-Za-z0-9_./-]*\w"
)


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_no_message_cites_a_file_the_repository_does_not_have() -> None:
    """Every repository path in hpcenv's strings (messages, hints, notes; docstrings may cite
    other projects' docs) names a file or folder this checkout has."""
    missing = []
    for py in sorted((ROOT / "hpcenv").rglob("*.py")):
        tree = ast.parse(py.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docs:
                continue
            for cited in _REPO_PATH.findall(node.value):
                cited = cited.rstrip(".")
                if not any((base / cited).exists() for base in (ROOT, ROOT / "hpcenv")):
                    missing.append(f"{py.relative_to(ROOT)}:{node.lineno}: {cited}")
    assert not missing, missing
