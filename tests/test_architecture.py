"""The import structure of hpcenv, read from the source with ``ast`` (nothing is imported).

Issue 18: the site package (model, loading, field docs, detection from a host) imports nothing
from the job side, the CLI, the bench, the smoke tests or the tuning, so following ``--site``
goes down and never back up; and no hpcenv modules import each other in a loop. Imports inside
functions count (a lazy import is still an arrow); imports under ``if TYPE_CHECKING:`` do not
(they never run). ``from pkg import name`` is an arrow to ``pkg.name`` where that is a module,
else to ``pkg``; a parent package's ``__init__`` that runs first is not an arrow of its own.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "hpcenv"
SITE = "hpcenv.site"
NOT_UNDER_SITE = ("hpcenv.jobs", "hpcenv.cli", "hpcenv.bench", "hpcenv.smoke", "hpcenv.tuning")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in ``node``, at any depth, except the body of ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    if isinstance(node, ast.If) and _type_checking(node.test):
        children: list[ast.AST] = list(node.orelse)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        yield from _import_nodes(child)


def _base(name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


@cache
def imports(name: str) -> frozenset[str]:
    """The hpcenv modules that module ``name`` imports."""
    tree = ast.parse(modules()[name].read_text(), filename=str(modules()[name]))
    found: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _base(name, node)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names
            ]
        for target in targets:
            while target and target not in modules():  # ``import hpcenv.x.y`` where y is a name
                target = target.rpartition(".")[0]
            if target.startswith("hpcenv") and target != name:
                found.add(target)
    return frozenset(found)


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(imports(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(modules()):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read() -> None:
    assert {"hpcenv.site", "hpcenv.site.model", "hpcenv.site.load"} <= set(modules())
    assert "hpcenv.site.model" in imports("hpcenv.site.load")
    assert "hpcenv.site.words" in imports("hpcenv.jobs.schedulers")
    assert "hpcenv.site.model" in imports("hpcenv.site.fields")


def test_site_package_imports_nothing_from_above() -> None:
    bad = {
        name: sorted(t for t in imports(name) if t.startswith(NOT_UNDER_SITE))
        for name in modules()
        if name == SITE or name.startswith(SITE + ".")
    }
    assert not {k: v for k, v in bad.items() if v}, bad


def test_site_model_does_not_import_its_loader() -> None:
    ours = {t for t in imports("hpcenv.site.model") if t == SITE or t.startswith(SITE + ".")}
    assert ours <= {"hpcenv.site.words"}, ours


def test_no_import_cycles() -> None:
    found = cycles()
    detail = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(imports(m) & set(c))}" for m in c)
        for c in found
    ]
    assert not found, "\n".join(detail)


def test_a_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: two modules importing each other inside functions are a cycle."""
    pkg = tmp_path / "hpcenv"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("def f():\n    from hpcenv.b import g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hpcenv.c import x\n"
        "def g():\n    from .a import one\n"
    )
    (pkg / "c.py").write_text("import hpcenv.b\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    modules.cache_clear()
    imports.cache_clear()
    try:
        assert cycles() == [["hpcenv.a.one", "hpcenv.b"]]
        assert imports("hpcenv.b") == {"hpcenv.a.one"}  # the TYPE_CHECKING import is no arrow
    finally:
        modules.cache_clear()
        imports.cache_clear()


# Layers that point down (issue 35): a package's modules import nothing from the packages above it.
ABOVE = {
    "hpcenv.tuning": ("hpcenv.jobs", "hpcenv.sweep", "hpcenv.bench", "hpcenv.smoke", "hpcenv.cli"),
    "hpcenv.shells": ("hpcenv.bench", "hpcenv.smoke", "hpcenv.tuning", "hpcenv.sweep"),
    "hpcenv.jobs": ("hpcenv.sweep", "hpcenv.bench", "hpcenv.smoke", "hpcenv.cli"),
    "hpcenv.runtime_kinds": ("hpcenv.",),  # the site model asks it: it stands on nothing
}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_layers_point_down(layer: str) -> None:
    mine = [n for n in modules() if n == layer or n.startswith(layer + ".")]
    assert mine, layer
    bad = {
        n: sorted(t for t in imports(n) if t.startswith(ABOVE[layer]) and t != "hpcenv.errors")
        for n in mine
    }
    assert not {k: v for k, v in bad.items() if v}, bad
