"""A recipe's ``user:`` section: what a user adds to the matched image (issue 22).

hpcenv's own components (torch, Horovod, mpi4py ...) are chosen by the resolver; a user adds
their own packages, files and settings on top: pip packages and requirements files, apt packages,
files and folders copied in, environment variables, labels and a working directory. Every value
is checked here, where it enters:

- pip requirements parse as PEP 508 (``packaging.requirements.Requirement``); a requirements
  file may hold requirements, comments and ``-r other.txt`` only (its pip options, such as
  ``--index-url``, would change where the matched stack comes from);
- a requirements file is a regular text file of at most :data:`MAX_REQUIREMENT_FILE` bytes, not
  under ``/proc``, ``/sys`` or ``/dev`` (:data:`PSEUDO_ROOTS`), never waited on (a FIFO is refused
  before it is read), and ``-r`` is bounded (:data:`MAX_INCLUDE_DEPTH` ...);
- a line that is not a requirement is never quoted back (a ``.netrc``, ``.env`` or
  ``/proc/self/environ`` given by mistake would be): the error names the file, the line number
  and what the line looks like; a "requirement" that looks like a token (:mod:`hpcenv.tokens`)
  is refused the same way, so it reaches neither the Dockerfile, the build log, the image nor an
  index request;
- URL, VCS, ``file://`` and local path requirements bypass the site's indexes: refused unless the
  recipe says ``user.allow_direct: true``, and then only in PEP 508's ``NAME @ URL`` form (a
  matched component is still refused by :func:`hpcenv.matched.check`); a URL with credentials
  (``user:token@``) is refused always;
- apt names follow Debian Policy 5.6.1 (``[a-z0-9][a-z0-9+.-]+``), optionally ``=VERSION``;
- paths are relative to the recipe's folder and stay inside it: no absolute path, no ``..``, no
  symbolic link that leads out (checked on the resolved path and on every link in a folder);
- a file's destination, or any file a copied folder puts in the image, is never under
  :data:`RESERVED_DESTS` (hpcenv's own folders, the stack's libraries, the loader's
  configuration and folders, the runtime's environment scripts), each with its reason;
- environment names are the ``recipe`` layer's (:mod:`hpcenv.envpolicy`): nothing that changes
  how a shell, the loader or an interpreter starts, no name the launch sets (rendezvous, ranks,
  the scheduler's and launcher's), none of the matched stack's (MPI, libfabric, UCX, NCCL,
  Horovod, oneCCL, OpenMP) and no ``HPCENV_`` name;
- label keys are lower-case reverse-DNS words, never hpcenv's own (``io.hpcenv.*``);
- every string is one line (:class:`hpcenv.safe.SafeModel`); the emitters escape values for
  each format (``render.py``: Dockerfile double quotes with ``\\`` before ``"``, ``\\`` and
  ``$``; Singularity ``export`` with ``shlex.quote``).

The section resolves (:func:`resolve_section`) to :class:`UserContent`: host paths and parsed
requirements with where each came from, for :mod:`hpcenv.matched` to check against the lock.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from hpcenv import envpolicy
from hpcenv.errors import ConfigError
from hpcenv.reads import read_bounded
from hpcenv.safe import EnvName, SafeModel, has_control
from hpcenv.tokens import secret_line, token_kind

# Debian Policy 5.6.1 (Package): lower-case letters, digits, '+', '-', '.'; at least two
# characters; starts with a letter or digit. A version after '=' (Policy 5.6.12), no epoch ':'
# issues for the shell because the whole word is matched here.
APT_NAME = r"[a-z0-9][a-z0-9+.-]+(?:=[0-9][A-Za-z0-9.+~:-]*)?"
# An absolute path in the image: plain words, no '..' (checked below), no shell or Dockerfile
# variable syntax ('$' would be expanded by WORKDIR/COPY).
IMAGE_PATH = r"/(?:[A-Za-z0-9_.@+=,-]+/?)*"
REL_PATH = r"[A-Za-z0-9_.@+=,-][A-Za-z0-9_.@+=,/-]*"
LABEL_KEY = r"[a-z0-9](?:[a-z0-9.-]{0,126}[a-z0-9])?"
# An image reference (registry/name:tag or @digest): plain words, no shell or Dockerfile syntax.
IMAGE_REF = r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*"
# Where a user file would replace hpcenv's own things or the matched stack in the image (a
# destination equal to one, under one, or a folder whose contents land in one). Prefixes from
# hpcenv/blocks.py (VENV, MPI_PREFIX, STEPS_DIR, the aws-ofi-nccl and oneCCL prefixes), ld.so(8)
# and ldconfig(8) (the loader's files and default folders), Apptainer's image layout (its
# /.singularity.d/env scripts are sourced at start, like %environment) and bash(1) INVOCATION.
_HPCENV = "hpcenv's own files in the image"
_LIBS = "the loader's default library folder (the stack's MPI, libfabric, UCX, NCCL, libc)"
_SHELL = "a shell start-up file: it would set what user.env may not"
RESERVED_DESTS: dict[str, str] = {
    "/opt/venv": "the matched stack's Python environment (torch, Horovod, mpi4py)",
    "/opt/hpcenv": _HPCENV,
    "/opt/hpcenv-build": _HPCENV,
    "/opt/hpcenv-user": _HPCENV,
    "/opt/hpcenv-steps": "hpcenv's step scripts, which every job runs",
    "/opt/mpi": "the image's MPI",
    "/opt/aws-ofi-nccl": "NCCL's libfabric network plugin",
    "/opt/oneccl": "oneCCL, which Horovod and torch-ccl load",
    "/opt/conda": "the conda-built stack",
    "/opt/rocm": "ROCm and RCCL",
    "/usr/local/cuda": "CUDA and NCCL",
    "/etc/ld.so.preload": "ld.so loads these libraries into every program",
    "/etc/ld.so.conf": "the loader's library folders (ldconfig)",
    "/etc/ld.so.conf.d": "the loader's library folders (ldconfig)",
    "/etc/ld.so.cache": "the loader's library cache",
    "/lib": _LIBS,
    "/lib64": _LIBS,
    "/lib32": _LIBS,
    "/usr/lib": _LIBS,
    "/usr/lib64": _LIBS,
    "/usr/lib32": _LIBS,
    "/usr/local/lib": _LIBS,
    "/usr/local/lib64": _LIBS,
    "/bin": "the system's programs (bash, which runs hpcenv's step scripts)",
    "/usr/bin": "the system's programs (python3 under the venv, bash for the step scripts)",
    "/sbin": "the system's programs (ldconfig)",
    "/usr/sbin": "the system's programs (ldconfig)",
    "/.singularity.d": "Apptainer sources its env scripts at start (like %environment)",
    "/.apptainer.d": "Apptainer sources its env scripts at start (like %environment)",
    "/etc/environment": _SHELL,
    "/etc/profile": _SHELL,
    "/etc/profile.d": _SHELL,
    "/etc/bash.bashrc": _SHELL,
    "/etc/bashrc": _SHELL,
}
RESERVED_LABELS = (
    "io.hpcenv.",
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
)
MAX_REQUIREMENT_FILE = 1 << 20
# Where the kernel's pseudo-files live: /proc/self/environ is a "regular file" of size 0.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
# pip's archive suffixes (pip/_internal/utils/filetypes.py): pip installs a requirement named like
# one from the local file of that name, not from an index.
ARCHIVE_SUFFIXES: tuple[str, ...] = (
    ".whl",
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)
ALLOW_DIRECT = (
    "set user.allow_direct: true in a recipe file (docs/recipes.md) and write it as NAME @ URL"
)


def _pattern(regex: str) -> str:
    return r"^(?:" + regex + r")$"


_OPTION_NAME = re.compile(r"(--[a-z][a-z-]{1,40}|-[A-Za-z])(?![A-Za-z0-9_])")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _option_words(value: str) -> str:
    """The pip option a line starts with, shown only when it has an option's shape."""
    option = _OPTION_NAME.match(value)
    return f"pip option {option.group(1)}" if option else "a line starting with '-'"


def _parse_error(value: str, message: str) -> str:
    """packaging's reason, unless it happens to contain a piece of the value."""
    if any(len(word) >= 4 and word in message for word in value.split()):
        return "not PEP 508"
    return message


def _is_direct_form(value: str) -> bool:
    """A bare URL, VCS, file: or path requirement (pip's forms that name no package)."""
    first = value.split()[0]
    return bool(_SCHEME.match(first)) or first.startswith((".", "/", "~")) or "/" in first


def screen(value: str) -> str:
    """A requirement (one line, no comment) in packaging's normal form; ValueError with words
    that never quote ``value`` (it may be a secret given by mistake)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if has_control(value):
        raise ValueError("holds a control character (binary or NUL-separated data?)")
    if value.startswith("-"):
        if value.startswith("-----"):
            raise ValueError("looks like a private key or certificate (PEM); its text is not shown")
        raise ValueError(
            f"{_option_words(value)} is not taken (packages come from the site's indexes)"
        )
    try:
        req = Requirement(value)
    except InvalidRequirement as err:
        if _is_direct_form(value):
            raise ValueError(
                "a URL, VCS or path requirement bypasses the site's indexes; to allow one, "
                + ALLOW_DIRECT
            ) from None
        looks = secret_line(value)
        if looks is not None:
            raise ValueError(
                f"looks like {looks}, not a requirement; its text is not shown"
            ) from None
        reason = _parse_error(value, str(err).splitlines()[0])
        raise ValueError(f"not a pip requirement (PEP 508): {reason}") from None
    # the name, and every word of its extras, version and marker (a token pasted there would
    # reach the Dockerfile and the index request as well)
    rest = value.replace(req.url, " ") if req.url else value  # a URL's own check is below
    for word in (req.name, *re.split(r"[^A-Za-z0-9_.-]+", rest)):
        kind = token_kind(word)
        if kind is not None:
            raise ValueError(f"looks like {kind}, not a package; its text is not shown")
    if req.url is not None:
        from urllib.parse import urlsplit

        try:
            userinfo = urlsplit(req.url).netloc.rpartition("@")[0]
        except ValueError:
            userinfo = ""
        if userinfo or any(token_kind(w) for w in re.split(r"[/?#&=:@]", req.url) if w):
            raise ValueError(
                f"{req.name} @ URL: the URL carries a credential, which would be written into the "
                "Dockerfile and the image; its text is not shown"
            )
    elif req.name.lower().endswith(ARCHIVE_SUFFIXES):
        raise ValueError(
            f"{req.name}: pip installs a name like this from the local file, bypassing the "
            "site's indexes; to allow one, " + ALLOW_DIRECT
        )
    return str(req)


def direct_problem(spec: str) -> str | None:
    """Why ``spec`` (screened) is a direct reference the site's indexes are bypassed for."""
    from packaging.requirements import Requirement

    req = Requirement(spec)
    if req.url is None:
        return None
    return (
        f"{req.name} @ URL bypasses the site's indexes (not allowed by default); to allow it, "
        + (ALLOW_DIRECT.replace(" and write it as NAME @ URL", ""))
    )


def _requirement(value: str) -> str:
    """A PEP 508 requirement, written back in packaging's normal form (:func:`screen`)."""
    return screen(value)


def _no_dotdot(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value!r}: '..' is not allowed")
    return value


def reserved_reason(dest: str) -> str | None:
    """Why an image path must not be written by a user file (:data:`RESERVED_DESTS`)."""
    norm = os.path.normpath(dest)
    for reserved, why in RESERVED_DESTS.items():
        if norm == reserved or norm.startswith(reserved + "/"):
            return f"{reserved}, which hpcenv's image uses: {why}"
    return None


def _image_dest(value: str) -> str:
    norm = os.path.normpath(value)
    if norm == "/":
        raise ValueError("'/' would replace the whole image")
    why = reserved_reason(norm)
    if why is not None:
        raise ValueError(f"{value!r} is under {why}")
    return norm


PipSpec = Annotated[str, StringConstraints(max_length=1000), AfterValidator(_requirement)]
AptPackage = Annotated[str, StringConstraints(pattern=_pattern(APT_NAME), max_length=200)]
RelPath = Annotated[
    str, StringConstraints(pattern=_pattern(REL_PATH), max_length=1024), AfterValidator(_no_dotdot)
]
ImagePath = Annotated[
    str,
    StringConstraints(pattern=_pattern(IMAGE_PATH), max_length=1024),
    AfterValidator(_no_dotdot),
]
ImageDest = Annotated[ImagePath, AfterValidator(_image_dest)]
LabelKey = Annotated[str, StringConstraints(pattern=_pattern(LABEL_KEY))]
ImageRef = Annotated[str, StringConstraints(pattern=_pattern(IMAGE_REF), max_length=300)]


class FileCopy(SafeModel):
    """A file or folder from the recipe's folder, placed at ``dest`` in the image (a folder's
    contents become ``dest``'s, as Docker's ``COPY``)."""

    src: RelPath
    dest: ImageDest


class UserSection(SafeModel):
    """The ``user:`` section of a recipe file."""

    pip: list[PipSpec] = Field(default=[], description="pip requirements (PEP 508)")
    requirements: list[RelPath] = Field(
        default=[], description="requirements files, relative to the recipe file"
    )
    apt: list[AptPackage] = Field(default=[], description="Debian packages (runtime stage)")
    files: list[FileCopy] = Field(default=[], description="files and folders copied in")
    env: dict[EnvName, str] = Field(default={}, description="environment variables")
    labels: dict[LabelKey, Annotated[str, StringConstraints(max_length=1000)]] = {}
    workdir: ImagePath | None = Field(default=None, description="the image's working directory")
    base: ImageRef | None = Field(
        default=None,
        description="a prebuilt image to start from instead of hpcenv's stack (hpcenv.prebuilt)",
    )
    allow_direct: bool = Field(
        default=False,
        description="take NAME @ URL requirements (URL, VCS, file://), which bypass the site's "
        "indexes",
    )

    @model_validator(mode="after")
    def _direct(self) -> UserSection:
        if not self.allow_direct:
            for i, spec in enumerate(self.pip):
                why = direct_problem(spec)
                if why is not None:
                    raise ValueError(f"pip[{i}]: {why}")
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            why = envpolicy.refused(name, "recipe")
            if why is not None:
                raise ValueError(f"{name}: {why}")
        return env

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:
            if key.startswith(RESERVED_LABELS):
                raise ValueError(f"{key}: hpcenv sets this label itself")
        return labels

    def is_empty(self) -> bool:
        return self == UserSection()


@dataclass(frozen=True)
class UserRequirement:
    """One requirement and where it came from (``recipe.yaml: user.pip[0]``, ``req.txt:3``)."""

    spec: str
    origin: str


@dataclass(frozen=True)
class UserFile:
    host: Path  # resolved, inside the recipe's folder
    dest: str


@dataclass(frozen=True)
class UserContent:
    """A resolved ``user:`` section (and those of the recipes it extends)."""

    requirements: tuple[UserRequirement, ...] = ()
    apt: tuple[str, ...] = ()
    files: tuple[UserFile, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    base: str | None = None  # a prebuilt image the content goes on (hpcenv.prebuilt)

    def __bool__(self) -> bool:
        return bool(
            self.requirements or self.apt or self.files or self.env or self.labels or self.workdir
        )

    def then(self, later: UserContent) -> UserContent:
        """This content with ``later``'s added after it (an extending recipe's own section)."""
        return UserContent(
            requirements=self.requirements + later.requirements,
            apt=self.apt + later.apt,
            files=self.files + later.files,
            env=self.env | later.env,
            labels=self.labels | later.labels,
            workdir=later.workdir or self.workdir,
            base=later.base or self.base,
        )


def confined(folder: Path, rel: str, what: str) -> Path:
    """``folder/rel`` resolved, refused when it (or a link on the way) leads out of ``folder``."""
    root = folder.resolve()
    path = (folder / rel).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(f"{what} {rel!r} leads out of the recipe's folder {root}")
    if not path.exists():
        raise ConfigError(f"{what} {rel!r}: {path} does not exist")
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in (*dirnames, *filenames):
                entry = Path(dirpath) / name
                if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                    raise ConfigError(
                        f"{what} {rel!r}: {entry} is a link out of the recipe's folder {root}"
                    )
    return path


_OPTION = re.compile(r"(-r|--requirement)(?:\s+|=)(\S+)")


# Bounded work (issue 40): '-r' chains nest at most this deep, and one top-level file pulls in
# at most this many files and bytes in all; a file included twice (a diamond) is read once.
MAX_INCLUDE_DEPTH = 16
MAX_INCLUDE_FILES = 256
MAX_INCLUDE_BYTES = 4 << 20


@dataclass
class _Walk:
    """What one top-level requirements file has pulled in so far."""

    read: set[Path] = field(default_factory=set)
    size: int = 0


def read_requirements(
    path: Path,
    root: Path,
    label: str,
    seen: tuple[Path, ...] = (),
    walk: _Walk | None = None,
    *,
    allow_direct: bool = False,
) -> list[UserRequirement]:
    """The requirements in a pip requirements file (``-r`` followed inside ``root``; each
    file once, :data:`MAX_INCLUDE_DEPTH` deep, :data:`MAX_INCLUDE_FILES` files and
    :data:`MAX_INCLUDE_BYTES` in all; a FIFO or device refused before it is opened)."""
    walk = walk if walk is not None else _Walk()
    key = path.resolve()
    if key in seen:
        raise ConfigError(f"{label}: '-r' includes {path.name} again (a cycle)")
    if key in walk.read:
        return []  # already included through another '-r' (a diamond): pip takes it once
    if len(seen) >= MAX_INCLUDE_DEPTH:
        raise ConfigError(f"{label}: '-r' includes nest deeper than {MAX_INCLUDE_DEPTH} levels")
    if len(walk.read) >= MAX_INCLUDE_FILES:
        raise ConfigError(f"{label}: '-r' includes more than {MAX_INCLUDE_FILES} files in all")
    walk.read.add(key)
    if any(key == Path(r) or key.is_relative_to(r) for r in PSEUDO_ROOTS):
        raise ConfigError(f"{label}: {key} is a kernel pseudo-file, not a requirements file")
    raw = read_bounded(path, MAX_REQUIREMENT_FILE, "a requirements file", regular=True)
    walk.size += len(raw)
    if walk.size > MAX_INCLUDE_BYTES:
        raise ConfigError(
            f"{label}: '-r' includes more than {MAX_INCLUDE_BYTES >> 20} MiB of requirements in all"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not UTF-8 text") from None
    out: list[UserRequirement] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        start = number + 1
        line = lines[number]
        number += 1
        while line.endswith("\\") and number < len(lines):  # pip's line continuation
            line = line[:-1] + lines[number]
            number += 1
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        where = f"{label}:{start}"
        if not line:
            continue
        if has_control(line):  # before '-r': a NUL in a path is a ValueError, not a file
            raise ConfigError(f"{where}: holds a control character (binary or NUL-separated data?)")
        include = _OPTION.fullmatch(line)
        if include:
            rel = include.group(2)
            target = confined(path.parent, rel, f"{where}: -r")
            if not target.is_relative_to(root):
                raise ConfigError(f"{where}: -r {rel!r} leads out of the recipe's folder {root}")
            out += read_requirements(
                target, root, f"{label}>{rel}", (*seen, key), walk, allow_direct=allow_direct
            )
            continue
        try:
            spec = screen(line)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
        why = None if allow_direct else direct_problem(spec)
        if why is not None:
            raise ConfigError(f"{where}: {why}")
        out.append(UserRequirement(spec, where))
    return out


def _check_landing(copied: UserFile, where: str) -> None:
    """Refuse a copy that puts a file where :data:`RESERVED_DESTS` says it may not go: a folder's
    contents land under ``dest`` (``{src: libs, dest: /usr}`` with ``libs/lib/libmpi.so.40``);
    a file copied to an existing folder lands inside it (``dest: /etc`` is ``/etc/NAME``)."""
    landing = [copied.dest]
    if copied.host.is_dir():
        for dirpath, dirnames, filenames in os.walk(copied.host):
            rel = Path(dirpath).relative_to(copied.host)
            landing += [str(Path(copied.dest) / rel / name) for name in (*dirnames, *filenames)]
    else:
        landing.append(str(Path(copied.dest) / copied.host.name))
    for dest in landing:
        why = reserved_reason(dest)
        if why is not None:
            raise ConfigError(f"{where}: would put {dest} in the image, under {why}")


def resolve_section(section: UserSection, folder: Path, label: str) -> UserContent:
    """Read a section's requirements files and check its paths, relative to ``folder``."""
    root = folder.resolve()
    reqs = [UserRequirement(s, f"{label}: user.pip[{i}]") for i, s in enumerate(section.pip)]
    for i, rel in enumerate(section.requirements):
        path = confined(folder, rel, f"{label}: user.requirements[{i}]")
        if not path.is_file():
            raise ConfigError(f"{label}: user.requirements[{i}] {rel!r} is not a file")
        reqs += read_requirements(path, root, rel, allow_direct=section.allow_direct)
    files = tuple(
        UserFile(confined(folder, f.src, f"{label}: user.files[{i}].src"), f.dest)
        for i, f in enumerate(section.files)
    )
    for i, copied in enumerate(files):
        _check_landing(copied, f"{label}: user.files[{i}]")
    return UserContent(
        requirements=tuple(reqs),
        apt=tuple(section.apt),
        files=files,
        env=dict(section.env),
        labels=dict(section.labels),
        workdir=section.workdir,
        base=section.base,
    )
