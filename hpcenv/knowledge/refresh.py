"""Refresh ``catalogue.yaml`` from the package index's own release lists (issue 22).

``compat.yaml``'s ``releases:`` is the curated, tested list the resolver picks defaults from;
a pin (``--set``, a site's ``defaults``) may name any real release, and the real releases are
this catalogue: for every component hpcenv installs with pip from PyPI, each *final* release
the index lists, as read from PyPI's JSON API (``https://pypi.org/pypi/<project>/json``,
``releases``: version -> files, each file with ``yanked`` and ``yanked_reason``, PEP 592).

What counts as a release (one place, :func:`parse_releases`):

- final releases only: ``packaging`` pre-releases and dev releases (``2.2.0rc1``,
  ``1.0.dev3``) are left out, post-releases (``1.0.post1``) are kept;
- a version with no files is left out (pip cannot install it from the index: mpi4py 1.3 and
  older were listed on PyPI before files were hosted there), and so is one that is not a
  PEP 440 version;
- a release whose every file is yanked goes to ``yanked:`` with the index's reason; a pin on
  it is refused in one line, like pip, which skips yanked files unless told otherwise (a
  trailing ``!`` allows it); a release with some files yanked stays a release.

Run it as ``python -m hpcenv.knowledge.refresh [COMPONENT...] [--index URL] [--file PATH]``:
with no component every one in the file is read again; ``--index`` points at another index
that speaks PyPI's JSON API (the tests serve one on 127.0.0.1). Each component records the
URL it was read from and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from hpcenv.errors import ConfigError
from hpcenv.knowledge.facts import CATALOGUE_FILE

PYPI = "https://pypi.org/pypi"
MAX_BYTES = 64 << 20  # torch's JSON document is about 1 MiB (2026-11-24)

HEADER = """\
# Every final release of the components hpcenv installs with pip from PyPI, as the index lists
# them (issue 22). Written by `python -m hpcenv.knowledge.refresh [COMPONENT...]` (docs/knowledge.md);
# do not edit by hand: change a component's `project`/`variant` here and run the command again.
#
# How this list and compat.yaml's `releases:` split the work:
#   - compat.yaml `releases:` is the curated list hpcenv has tested; the resolver takes its
#     defaults from it only (newest first), so resolution of the built-in sites and recipes
#     does not move when this file is refreshed;
#   - a pin (`--set torch=2.2.0`, a site's `defaults`) may name any release in `releases:` below
#     (or in compat.yaml); the typed rules then judge it like any other version;
#   - a release whose every file is yanked is under `yanked:` with the index's reason and a pin
#     on it is refused (pin it with a trailing '!' to use it anyway); pre-releases, dev releases
#     and versions without files are left out (hpcenv/knowledge/refresh.py says why).
# Each component: `project` (the PyPI distribution hpcenv installs for it), `variant` (the
# compat.yaml `releases:` variant it is, where that list has variants), `url` and `read` (where
# and when it was read), `releases` (newest first), `yanked` (version: reason).
"""


def parse_releases(doc: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Final releases newest first, and yanked ones with their reason, from a PyPI JSON API
    document (``{"releases": {"2.2.0": [{"yanked": false, ...}, ...], ...}}``)."""
    found: list[tuple[Version, str]] = []
    yanked: dict[str, str] = {}
    releases = doc.get("releases")
    if not isinstance(releases, dict):
        raise ConfigError("the index's answer has no 'releases' (not PyPI's JSON API)")
    for raw, files in releases.items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or not files:
            continue
        if all(f.get("yanked") for f in files):
            yanked[raw] = next((f["yanked_reason"] for f in files if f.get("yanked_reason")), "")
            continue
        found.append((version, raw))
    order = [raw for _, raw in sorted(found, reverse=True)]
    return order, dict(sorted(yanked.items(), key=lambda kv: Version(kv[0]), reverse=True))


def fetch(index: str, project: str) -> tuple[str, dict[str, Any]]:
    """The URL read and the JSON document of one project."""
    url = f"{index.rstrip('/')}/{project}/json"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError) as err:
        raise ConfigError(f"{url}: cannot read it ({err})") from None
    if len(body) > MAX_BYTES:
        raise ConfigError(f"{url}: more than {MAX_BYTES >> 20} MiB; not a release list")
    try:
        doc = json.loads(body)
    except ValueError:
        raise ConfigError(f"{url}: not JSON") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{url}: not PyPI's JSON API")
    return url, doc


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def refresh(
    path: Path, names: list[str], index: str = PYPI, today: datetime.date | None = None
) -> dict[str, Any]:
    """Read the named components (all when empty) again and rewrite ``path``."""
    data = load(path)
    comps: dict[str, Any] = data["components"]
    unknown = [n for n in names if n not in comps]
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)}: not in {path.name} (components: {', '.join(comps)})"
        )
    day = (today or datetime.date.today()).isoformat()
    for name in names or list(comps):
        entry = comps[name]
        url, doc = fetch(index, entry["project"])
        releases, yanked = parse_releases(doc)
        if not releases:
            raise ConfigError(f"{url}: no final release of {entry['project']}")
        entry.update(url=url, read=day, releases=releases, yanked=yanked)
    path.write_text(dump(data), encoding="utf-8")
    return data


def dump(data: dict[str, Any]) -> str:
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    return HEADER + "\n" + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpcenv.knowledge.refresh",
        description="Rewrite hpcenv/knowledge/catalogue.yaml from the package index.",
    )
    parser.add_argument("components", nargs="*", help="components to read (default: all)")
    parser.add_argument("--index", default=PYPI, help=f"JSON API root (default {PYPI})")
    parser.add_argument("--file", type=Path, default=CATALOGUE_FILE, help="catalogue to rewrite")
    args = parser.parse_args(argv)
    try:
        data = refresh(args.file, args.components, args.index)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name in args.components or data["components"]:
        entry = data["components"][name]
        print(f"{name}: {len(entry['releases'])} releases from {entry['url']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
