"""hpcenv.naming: every image, SIF and archive name, and no other module spelling them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcenv import naming
from hpcenv.knowledge import mpi_soname

HPCENV = Path(naming.__file__).resolve().parent


def test_image_names() -> None:
    assert (
        naming.image_tag(recipe="horovod-cpu", site="local") == "localhost/hpcenv/horovod-cpu:local"
    )
    assert naming.parse_image_tag("localhost/hpcenv/horovod-cpu:local") == ("horovod-cpu", "local")
    others = ["docker.io/x/y:1", "localhost/hpcenv/x", "localhost/hpcenv/a/b:c", "/scratch/x.sif"]
    for other in [*others, "localhost/hpcenv-base:bookworm"]:
        assert naming.parse_image_tag(other) is None, other
    assert naming.base_tag(suite="bookworm") == "localhost/hpcenv-base:bookworm"
    assert (
        naming.bench_tag(recipe="daal4py", variant="cold") == "localhost/hpcenv-bench/daal4py:cold"
    )
    assert naming.HELPER_TAG == "localhost/hpcenv-apptainer:1"
    assert naming.build_log(recipe="horovod-cpu", site="local") == "build-local-horovod-cpu.log"


def test_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        naming.image_tag("local", "horovod-cpu")  # type: ignore[misc]
    with pytest.raises(TypeError):
        naming.sif_name("horovod-cpu", "local")  # type: ignore[misc]


def test_sif_names() -> None:
    assert naming.sif_name(recipe="torch-gpu", site="frontier") == "torch-gpu-frontier"
    assert (
        naming.sif_name(recipe="torch-gpu", site="frontier", source="def")
        == "torch-gpu-frontier-def"
    )
    assert (
        naming.sif_file(recipe="horovod-cpu", site="local", source="def")
        == "horovod-cpu-local-def.sif"
    )
    assert naming.sif_archive(recipe="horovod-cpu", site="local") == "horovod-cpu-local.oci.tar"
    assert naming.BASE_ARCHIVE == "hpcenv-base.oci.tar"
    assert naming.site_sif_path(recipe="torch-gpu", site="frontier", scratch="/lus/scratch") == (
        "/lus/scratch/hpcenv/images/torch-gpu-frontier.sif"
    )
    assert naming.site_sif_path(recipe="x", site="s", scratch=None) == "$HOME/hpcenv/images/x-s.sif"


def test_mpich_abi_soname_comes_from_the_knowledge_base() -> None:
    assert mpi_soname("mpich") == "libmpi.so.12"


# Modules that still build one of these names themselves (none: naming.py is the one place).
NAMED_HERE = {"naming.py"}
NOT_YET: set[str] = set()


def _sources() -> list[tuple[str, str]]:
    out = []
    for path in sorted(HPCENV.rglob("*.py")):
        rel = path.relative_to(HPCENV).as_posix()
        if rel not in NAMED_HERE | NOT_YET:
            out.append((rel, path.read_text(encoding="utf-8")))
    return out


def test_no_other_module_spells_an_image_name() -> None:
    """``localhost/hpcenv...`` tags, ``hpcenv/images`` SIF paths and ``.oci.tar`` archive names
    are built in naming.py only (module docstrings may mention them: those lines are skipped)."""
    pattern = re.compile(r"localhost/hpcenv|hpcenv/images/|\.oci\.tar")
    found = []
    for rel, text in _sources():
        code = _without_docstrings(text)
        found += [f"{rel}: {line.strip()}" for line in code.splitlines() if pattern.search(line)]
    assert not found, "build these names with hpcenv.naming:\n" + "\n".join(found)


def test_no_module_hard_codes_the_mpich_soname() -> None:
    """Paths and file names take ``libmpi.so.12`` from the knowledge base (prose may name it)."""
    soname = re.compile(r"""[/{'"]libmpi\.so\.12""")
    found = []
    for rel, text in _sources():
        code = _without_docstrings(text)
        found += [f"{rel}: {line.strip()}" for line in code.splitlines() if soname.search(line)]
    assert not found, "take the soname from knowledge.mpi_soname('mpich'):\n" + "\n".join(found)


def _without_docstrings(text: str) -> str:
    """The source without its docstrings (ast finds them), which may describe a name."""
    import ast

    tree = ast.parse(text)
    drop: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                drop.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return "\n".join(line for i, line in enumerate(text.splitlines(), 1) if i not in drop)
