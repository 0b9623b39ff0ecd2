"""Optional parts of hpcenv and the pip extras that provide them.

The core install (``pip install hpcenv``) resolves, renders, builds, submits and inspects sites
with typer, rich, jinja2, pyyaml, pydantic and packaging. Commands that need more check for it
up front and name the extra in one line (exit code 2) instead of failing with an ImportError
half-way through. ``EXTRAS`` lists import names, the same sets as pyproject.toml's
``[project.optional-dependencies]`` (a test keeps the two in step).
"""

from __future__ import annotations

from importlib.util import find_spec

from hpcenv.errors import HpcenvError

# extra -> (distribution name, import name) it must provide
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "smoke": (
        ("pytest", "pytest"),
        ("pytest-testinfra", "testinfra"),
        ("matplotlib", "matplotlib"),
        ("numpy", "numpy"),
    ),
    "ssh": (("fabric", "fabric"),),
    "bench": (
        ("mpi4py", "mpi4py"),
        ("numpy", "numpy"),
        ("hpccm", "hpccm"),
        ("matplotlib", "matplotlib"),
    ),
}


class MissingExtra(HpcenvError):
    """A command needs an optional part that is not installed; names the extra to install."""


def missing(extra: str) -> list[str]:
    """Distributions of ``extra`` whose module cannot be imported here."""
    return [dist for dist, module in EXTRAS[extra] if find_spec(module) is None]


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` when ``extra`` is not fully installed; ``what`` needs it."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(
            f"{what} needs the [{extra}] extra (missing: {', '.join(absent)}); "
            f"install it with: {install_hint(extra)}"
        )


def install_hint(extra: str) -> str:
    """The command that adds ``extra`` to this install: from the checkout it was installed
    from (``pip install -e DIR[extra]``; PyPI's hpcenv would replace the checkout), else from
    the package index. pip records where it installed from in ``direct_url.json`` (PEP 610)."""
    import json
    import shlex
    import sys
    from importlib.metadata import PackageNotFoundError, distribution
    from urllib.parse import unquote, urlsplit

    pip = f"{shlex.quote(sys.executable)} -m pip install"
    try:
        text = distribution("hpcenv").read_text("direct_url.json")
        origin = json.loads(text) if text else {}
    except (PackageNotFoundError, ValueError, OSError):
        origin = {}
    url = urlsplit(str(origin.get("url", "")))
    if url.scheme == "file" and isinstance(origin.get("dir_info"), dict):
        editable = "-e " if origin["dir_info"].get("editable") else ""
        return f"{pip} {editable}{shlex.quote(unquote(url.path) + f'[{extra}]')}"
    return f"{pip} 'hpcenv[{extra}]' (pipx: pipx install --force 'hpcenv[{extra}]')"
