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
* debootstrap (the base image) downloads with wget, which reads ``$HOME/.netrc``: hpcenv runs
  it with ``HOME`` set to a private folder holding one (:func:`netrc_entry`), never with the
  credentials in an argument, where ``ps`` shows them to every user.

The secret files go when the build ends, also on Ctrl-C, SIGTERM (Slurm at a time limit) and
SIGHUP; a SIGKILLed process's folder is removed by the next build (:func:`secret_files`).

One parser reads the user-info (:func:`_split`: up to the rightmost ``@``, percent-decoded), and
everything that shows a URL uses it: :func:`redact` replaces ``user[:password]@`` with ``***@``
in every log line, progress line, error message and site dump (``sites show/init``, also
through the site model's JSON serializer); :func:`shown` quotes a rejected value the same way.
A site URL whose user-info holds an unencoded ``/``, ``?`` or ``#`` is refused
(:func:`userinfo_problem`): no other tool would read it the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from hpcenv.signals import exit_on_signals

SECRETS_DIR = "/run/secrets"
APT_AUTH = "hpcenv-apt-auth"
PIP_CONF = "hpcenv-pip.conf"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A URL in free text: a scheme not glued to a longer word, then everything up to whitespace.
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)(\S*)")
MASK = "***"


def _split(url: str) -> tuple[str, str | None, str]:
    """``(scheme://, user-info or None, host and the rest)``. The user-info ends at the
    *rightmost* ``@``: a password may hold ``@`` (and, unencoded, ``/`` ``?`` ``#``, which
    RFC 3986 section 3.2.1 does not allow but people write), a host never does. A URL with an
    ``@`` only in its path is read as user-info too: hiding too much is the safe side, and the
    site model refuses the ambiguous form (:func:`userinfo_problem`)."""
    m = _SCHEME.match(url)
    if m is None:
        return "", None, url
    rest = url[m.end() :]
    info, at, host = rest.rpartition("@")
    if not at:
        return m.group(0), None, rest
    return m.group(0), info, host


def redact_url(url: str) -> str:
    """One URL (the whole string, spaces and all) with its ``user[:password]`` as ``***``."""
    scheme, info, rest = _split(url)
    return url if info is None else f"{scheme}{MASK}@{rest}"


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***``; host, port
    and path stay. Used on everything hpcenv shows: log lines, progress, errors, site dumps."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def shown(value: object) -> object:
    """``value`` as an error message may quote it: a string with a URL in it is redacted as one
    URL from its first scheme to its last ``@`` (a rejected URL may hold spaces)."""
    if not isinstance(value, str):
        return value
    m = re.search(r"[A-Za-z][A-Za-z0-9+.-]*://", value)
    return value if m is None else value[: m.start()] + redact_url(value[m.start() :])


def userinfo_problem(url: str) -> str | None:
    """Why the user-info of ``url`` cannot be read unambiguously, or None. ``/``, ``?`` and
    ``#`` end the authority for every other URL parser (pip, apt, curl: RFC 3986 section 3.2),
    so a password holding them must be percent-encoded; the message never repeats it."""
    info = _split(url)[1]
    if info is not None and re.search(r"[/?#]", info):
        return (
            "the part before the last '@' holds '/', '?' or '#': percent-encode them in the "
            "user or password (%2F, %3F, %23), and an '@' in the path as %40"
        )
    return None


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without user:password, user, password)``, both percent-decoded; both None when
    the URL has neither. The password is None when the user-info holds no ``:``."""
    scheme, info, rest = _split(url)
    if info is None:
        return url, None, None
    user, colon, password = info.partition(":")
    return scheme + rest, unquote(user), unquote(password) if colon else None


def clean_url(url: str) -> str:
    return split_userinfo(url)[0]


def has_credentials(url: str | None) -> bool:
    return bool(url) and split_userinfo(url or "")[1] is not None


def strip_userinfo(text: str) -> str:
    """``text`` with every URL's ``user:password@`` removed (for files a build leaves behind)."""
    return _URL_IN_TEXT.sub(lambda m: clean_url(m.group(0)), text)


class PipIndexes(Protocol):
    """What :func:`pip_credentials` reads of a site's ``build`` block (typed structurally, so this
    module stays below the site model that validates its URLs with it)."""

    pip_index_url: str | None
    pip_extra_index_urls: list[str]


def pip_credentials(build: PipIndexes) -> bool:
    """Whether a site's pip index or extra indexes (``site.build``) carry credentials."""
    return any(has_credentials(u) for u in (build.pip_index_url, *build.pip_extra_index_urls))


def apt_auth_conf(url: str) -> str:
    """apt's auth.conf entry for a credentialed mirror (see apt_auth.conf(5)). The machine
    names the scheme: apt sends credentials over plain http only to an entry that says
    ``http://`` (measured: "the protocol is not encrypted. Annotate with http:// to use")."""
    clean, user, password = split_userinfo(url)
    parts = urlsplit(clean)
    machine = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
    return f"machine {machine}\nlogin {user or ''}\npassword {password or ''}\n"


def netrc_entry(url: str) -> str:
    """A ``.netrc`` entry for the host of a credentialed URL: how wget (which debootstrap
    downloads with) gets a mirror's credentials without them on a command line, where ``ps``
    shows them. wget 1.21 reads ``$HOME/.netrc`` only and matches the host alone; tokens are
    double-quoted with ``\\`` escapes (wget's ``netrc.c`` parse_netrc), so any password fits."""
    clean, user, password = split_userinfo(url)

    def token(text: str | None) -> str:
        return '"' + (text or "").replace("\\", "\\\\").replace('"', '\\"') + '"'

    host = urlsplit(clean).hostname or ""
    return f"machine {host}\nlogin {token(user)}\npassword {token(password)}\n"


def secret_mount(secret_id: str) -> str:
    """The ``RUN`` flag that mounts a build secret for one step."""
    return f"--mount=type=secret,id={secret_id},target={SECRETS_DIR}/{secret_id}"


def _host_key() -> str:
    """This host in a folder name: the cache may be on a home shared by several login nodes,
    where a pid says nothing about another node's processes."""
    import socket

    return "".join(c if c.isalnum() or c == "." else "_" for c in socket.gethostname())[:64]


def _sweep(root: Path) -> None:
    """Remove this host's secret folders whose process is gone (SIGKILL runs no ``finally``);
    another host's are never touched (its process is not ours to see)."""
    for folder in root.glob("secrets-*@*-*"):
        pid, _, rest = folder.name.removeprefix("secrets-").partition("@")
        if rest.rsplit("-", 1)[0] != _host_key():
            continue
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # alive, another user's


@contextmanager
def secret_files(contents: Mapping[str, str], root: Path) -> Iterator[dict[str, Path]]:
    """Write ``{id: text}`` as 0600 files in a fresh 0700 folder under ``root``; removed when
    the block ends, whatever happens: an exception, Ctrl-C, SIGTERM or SIGHUP (see
    :func:`hpcenv.signals.exit_on_signals`); a folder left by a killed (SIGKILL) process is removed by the
    next call."""
    if not contents:
        yield {}
        return
    root.mkdir(parents=True, exist_ok=True)
    _sweep(root)
    with exit_on_signals():
        folder: Path | None = None
        try:
            prefix = f"secrets-{os.getpid()}@{_host_key()}-"
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
            paths = {}
            for secret_id, text in contents.items():
                path = folder / secret_id
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                paths[secret_id] = path
            yield paths
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
