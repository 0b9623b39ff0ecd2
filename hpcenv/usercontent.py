"""A recipe's ``user:`` section: what a user adds to the matched image (issue 22).

hpcenv's own components (torch, Horovod, mpi4py ...) are chosen by the resolver; a user adds
their own packages, files and settings on top: pip packages and requirements files, apt packages,
files and folders copied in, environment variables, labels and a working directory. Every value
is checked here, where it enters:

- pip requirements parse as PEP 508 (``packaging.requirements.Requirement``); a requirements
  file may hold requirements, comments and ``-r other.txt`` only (its pip options, such as
  ``--index-url``, would change where the matched stack comes from);
- apt names follow Debian Policy 5.6.1 (``[a-z0-9][a-z0-9+.-]+``), optionally ``=VERSION``;
- paths are relative to the recipe's folder and stay inside it: no absolute path, no ``..``, no
  symbolic link that leads out (checked on the resolved path and on every link in a folder);
- environment names are the ``recipe`` layer's (:mod:`hpcenv.envpolicy`): nothing that changes
  how a shell, the loader or an interpreter starts, and no ``HPCENV_`` name;
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

from pydantic import AfterValidator, Field, StringConstraints, field_validator

from hpcenv import envpolicy
from hpcenv.errors import ConfigError
from hpcenv.reads import read_bounded
from hpcenv.safe import EnvName, SafeModel, one_line

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
# Where hpcenv keeps its own things in the image; a user file there would replace them.
RESERVED_DESTS = ("/opt/venv", "/opt/hpcenv", "/opt/hpcenv-build", "/opt/hpcenv-user")
RESERVED_LABELS = (
    "io.hpcenv.",
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
)
MAX_REQUIREMENT_FILE = 1 << 20


def _pattern(regex: str) -> str:
    return r"^(?:" + regex + r")$"


def _requirement(value: str) -> str:
    """A PEP 508 requirement, written back in packaging's normal form."""
    from packaging.requirements import InvalidRequirement, Requirement

    if value.startswith("-"):
        raise ValueError(f"{value!r} is a pip option, not a package (options are not taken)")
    try:
        return str(Requirement(value))
    except InvalidRequirement as err:
        raise ValueError(
            f"{value!r} is not a pip requirement: {str(err).splitlines()[0]}"
        ) from None


def _no_dotdot(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value!r}: '..' is not allowed")
    return value


def _image_dest(value: str) -> str:
    norm = os.path.normpath(value)
    if norm == "/":
        raise ValueError("'/' would replace the whole image")
    for reserved in RESERVED_DESTS:
        if norm == reserved or norm.startswith(reserved + "/"):
            raise ValueError(f"{value!r} is under {reserved}, which hpcenv's image uses")
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
        one_line(line, where)
        include = _OPTION.fullmatch(line)
        if include:
            rel = include.group(2)
            target = confined(path.parent, rel, f"{where}: -r")
            if not target.is_relative_to(root):
                raise ConfigError(f"{where}: -r {rel!r} leads out of the recipe's folder {root}")
            out += read_requirements(target, root, f"{label}>{rel}", (*seen, key), walk)
            continue
        if line.startswith("-"):
            option = line.split()[0].split("=")[0]
            raise ConfigError(
                f"{where}: pip option {option} is not taken in a recipe's requirements "
                "(packages come from the site's indexes; the matched stack's from the lock)"
            )
        try:
            spec = _requirement(line)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
        out.append(UserRequirement(spec, where))
    return out


def resolve_section(section: UserSection, folder: Path, label: str) -> UserContent:
    """Read a section's requirements files and check its paths, relative to ``folder``."""
    root = folder.resolve()
    reqs = [UserRequirement(s, f"{label}: user.pip[{i}]") for i, s in enumerate(section.pip)]
    for i, rel in enumerate(section.requirements):
        path = confined(folder, rel, f"{label}: user.requirements[{i}]")
        if not path.is_file():
            raise ConfigError(f"{label}: user.requirements[{i}] {rel!r} is not a file")
        reqs += read_requirements(path, root, rel)
    files = tuple(
        UserFile(confined(folder, f.src, f"{label}: user.files[{i}].src"), f.dest)
        for i, f in enumerate(section.files)
    )
    return UserContent(
        requirements=tuple(reqs),
        apt=tuple(section.apt),
        files=files,
        env=dict(section.env),
        labels=dict(section.labels),
        workdir=section.workdir,
        base=section.base,
    )
