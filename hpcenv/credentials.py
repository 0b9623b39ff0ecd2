"""Credentials in mirror and index URLs (``https://user:token@host/...``): kept out of every
file hpcenv writes, every image and every line it prints.

A site's ``build.apt_mirror``, ``build.pip_index_url`` and ``build.pip_extra_index_urls`` may
carry ``user:password@``. Rendered recipes only ever hold the URL without it. At build time the
credentials travel as build secrets: files (mode 0600, in a private folder, removed after the
build) that podman mounts for single ``RUN`` steps (``--secret`` + ``RUN --mount=type=secret``)
and Apptainer binds for ``%post`` (``apptainer build --bind``), at ``/run/secrets/<id>``; they
never reach a layer, a label, ``stack.lock.json`` or the def text.

* apt reads ``hpcenv-apt-auth`` (an auth.conf ``machine ... login ... password ...`` file) via
  ``-o Dir::Etc::netrc``; its download methods then run as root so they can read it.
* pip reads ``hpcenv-pip.conf``, the whole build pip.conf with the credentialed URLs, via
  ``PIP_CONFIG_FILE``.

:func:`redact` replaces any ``user[:password]@`` in a URL with ``***@``; hpcenv applies it to
every log line, progress line and error message.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

if TYPE_CHECKING:
    from hpcenv.site import Site

SECRETS_DIR = "/run/secrets"
APT_AUTH = "hpcenv-apt-auth"
PIP_CONF = "hpcenv-pip.conf"

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without user:password, user, password)``; both None when the URL has neither."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return clean, user, password


def clean_url(url: str) -> str:
    return split_userinfo(url)[0]


def has_credentials(url: str | None) -> bool:
    return bool(url) and split_userinfo(url or "")[1] is not None


def strip_userinfo(text: str) -> str:
    """``text`` with every URL's ``user:password@`` removed (for files a build leaves behind)."""
    return _USERINFO.sub(r"\g<scheme>", text)


def pip_credentials(site: Site) -> bool:
    """Whether the site's pip index or extra indexes carry credentials."""
    return any(
        has_credentials(u) for u in (site.build.pip_index_url, *site.build.pip_extra_index_urls)
    )


def apt_auth_conf(url: str) -> str:
    """apt's auth.conf entry for a credentialed mirror (see apt_auth.conf(5)). The machine
    names the scheme: apt sends credentials over plain http only to an entry that says
    ``http://`` (measured: "the protocol is not encrypted. Annotate with http:// to use")."""
    clean, user, password = split_userinfo(url)
    parts = urlsplit(clean)
    machine = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
    return f"machine {machine}\nlogin {user or ''}\npassword {password or ''}\n"


def secret_mount(secret_id: str) -> str:
    """The ``RUN`` flag that mounts a build secret for one step."""
    return f"--mount=type=secret,id={secret_id},target={SECRETS_DIR}/{secret_id}"


@contextmanager
def secret_files(contents: Mapping[str, str], root: Path) -> Iterator[dict[str, Path]]:
    """Write ``{id: text}`` as 0600 files in a fresh 0700 folder under ``root``; removed when
    the block ends, whatever happens."""
    if not contents:
        yield {}
        return
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="secrets-", dir=root))
    try:
        paths = {}
        for secret_id, text in contents.items():
            path = folder / secret_id
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            paths[secret_id] = path
        yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)
