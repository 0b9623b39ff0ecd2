"""Whether a job's folder (the one ``submit`` is called from, or ``--chdir``) is one the site says
not to run jobs from: compute nodes cannot write there (``filesystems[].read_only_on_compute``:
Summit's home, OLCF), or the site says to submit from elsewhere (``submit_here: false``: ALCF,
"Jobs should be submitted only from your allocated project directory and not from your home
directory"). One warning line at submit, from the site's data; the job is still submitted.

Paths are compared as written in the site file with the submitting shell's variables expanded
(``/home/$USER``, ``$HOME``), and with the folder's real path, so a link into home is caught.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hpcenv.site import Site

_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _expand(path: str, env: Mapping[str, str]) -> str | None:
    """``path`` with its variables from ``env``; None where one is unset (no comparison)."""
    missing = [m.group(1) for m in _VAR.finditer(path) if not env.get(m.group(1))]
    if missing:
        return None
    return _VAR.sub(lambda m: env[m.group(1)], path)


def _under(folder: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return folder == root or folder.startswith(root + "/")


def folder_warning(site: Site, folder: str, env: Mapping[str, str]) -> str | None:
    """One line when ``folder`` lies on a file system ``site`` says jobs should not run from."""
    if "$" in folder:
        return None
    candidates = {os.path.normpath(folder), os.path.realpath(folder)}
    for fs in site.filesystems:
        if not (fs.read_only_on_compute or not fs.submit_here):
            continue
        root = _expand(fs.path, env)
        if root is None:
            continue
        roots = {os.path.normpath(root), os.path.realpath(root)}
        if not any(_under(f, r) for f in candidates for r in roots):
            continue
        where = f"{site.name}'s {fs.name} ({fs.path})"
        if fs.read_only_on_compute:
            why = f"{where}, which compute nodes cannot write: the job's files there would fail"
        else:
            why = f"{where}, which the site says not to submit jobs from"
        return (
            f"the job runs in {folder}, on {why}; submit from the scratch or project folder, "
            "or give --chdir"
        )
    return None
