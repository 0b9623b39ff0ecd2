"""A project in one file: ``hpcenv.yaml`` holds the options ``build`` and ``submit`` must agree on.

Why (issue 37): without it every command repeats ``--site --recipe --requirements -A ...`` and
the two must match; every tool users already like keeps this in one file (``spack.yaml``,
CSCS's EDF, TorchX's ``.torchxconfig``, SkyPilot's task YAML). ``hpcenv init`` writes the file,
every command that takes these options reads ``./hpcenv.yaml`` when it is there, and an
explicit option overrides the file (:func:`merge`, the one place that decides; ``hpcenv config``
prints its answer with where each value came from).

The file is read as site files are (:mod:`hpcenv.yamlsrc`): unknown fields, bad values, YAML
anchors, duplicate keys, control characters are one ``FILE:LINE: field 'x': why`` line each.
Paths in it (requirements, stage-in/out) are relative to the file's folder. :func:`json_schema`
is the model's JSON Schema, for editors (``hpcenv init --schema``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from hpcenv import naming
from hpcenv.errors import ConfigError
from hpcenv.safe import SafeModel, ShellPath, Word
from hpcenv.tokens import token_kind
from hpcenv.usercontent import PipSpec

#: The file's name, looked for in the current folder only (as ``spack.yaml`` in an environment).
FILE_NAME = "hpcenv.yaml"
#: A project name: lower-case, starts with a letter or digit, at most this long.
PROJECT_RE = naming.PROJECT_RE

ProjectName = Annotated[str, StringConstraints(pattern=r"^(?:" + PROJECT_RE + r")$")]
# A site or recipe: a name, or a path to a site/recipe file (relative to this file).
NameOrFile = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:@%+=/-]{1,1024}$")]
EnvItem = Annotated[str, StringConstraints(max_length=4096)]
Walltime = Annotated[str, StringConstraints(pattern=r"^[0-9:-]{1,20}$")]

# file field -> the option that overrides it, as a user types it (``hpcenv config`` shows it)
OPTIONS: dict[str, str] = {
    "project": "(the image name: RECIPE-PROJECT)",
    "site": "--site",
    "recipe": "--recipe",
    "requirements": "--requirements",
    "pip": "--pip",
    "account": "--account",
    "nodes": "--nodes",
    "time": "--time",
    "launcher": "--launcher",
    "partition": "--partition",
    "qos": "--qos",
    "env": "--env",
    "stage_in": "--stage-in",
    "stage_out": "--stage-out",
}


class ProjectFile(SafeModel):
    """``hpcenv.yaml``: a project's site, recipe and job defaults; each field is optional."""

    project: ProjectName | None = Field(
        default=None,
        description="the project's name; its image is RECIPE-PROJECT (default: the folder name)",
    )
    site: NameOrFile | None = Field(default=None, description="site name or site file")
    recipe: NameOrFile | None = Field(default=None, description="recipe name or recipe file")
    requirements: list[ShellPath] = Field(
        default=[], description="pip requirements files, relative to this file"
    )
    pip: list[PipSpec] = Field(default=[], description="pip requirements added to the recipe")
    account: Word | None = Field(default=None, description="project/account to charge (-A)")
    nodes: int | None = Field(default=None, ge=1, le=100000, description="nodes per job (-N)")
    time: Walltime | None = Field(default=None, description="walltime: MM, HH:MM:SS, D-HH:MM:SS")
    launcher: Word | None = Field(default=None, description="rank launcher (default: the site's)")
    partition: Word | None = Field(default=None, description="partition/queue (-p)")
    qos: Word | None = Field(default=None, description="Slurm QOS (-q)")
    env: list[EnvItem] = Field(
        default=[],
        description="NAME (passed by name from the submitting shell) or NAME=VALUE, as --env",
    )
    stage_in: ShellPath | None = Field(default=None, description="dataset folder to stage in")
    stage_out: ShellPath | None = Field(default=None, description="where {output} is copied")

    @field_validator("time", mode="before")
    @classmethod
    def _time_as_text(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):  # YAML reads 30:00 as 1800
            raise ValueError("write the time as text in quotes, e.g. '30:00' or '01:00:00'")
        return value

    @field_validator("time")
    @classmethod
    def _walltime(cls, value: str | None) -> str | None:
        from hpcenv.safe import walltime_seconds

        if value is not None:
            walltime_seconds(value)  # ValueError: the format, in words
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, items: list[str]) -> list[str]:
        """The rules of ``--env`` (:func:`hpcenv.jobs.spec.user_env`, which ``submit`` applies
        again): a variable name, the environment policy's ``user`` layer, and no secret's value
        (``*_TOKEN``, ``*_KEY``: passed by name, never written into a file)."""
        from hpcenv.envpolicy import check, is_secret

        seen: set[str] = set()
        for item in items:
            name, eq, value = item.partition("=")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
                raise ValueError(f"{name[:60]!r} is not a variable name; give NAME or NAME=VALUE")
            if name in seen:
                raise ValueError(f"{name} given twice")
            seen.add(name)
            try:
                check({name: ""}, "user", "env")
            except ConfigError as err:
                raise ValueError(str(err)) from None
            if eq and any(token_kind(w) for w in re.split(r"[^A-Za-z0-9_.+/=-]+", value)):
                raise ValueError(
                    f"{name}=...: the value looks like a token (its text is not shown); export "
                    f"it in your shell and list {name} alone (passed by name)"
                )
            if eq and is_secret(name):
                raise ValueError(
                    f"{name}=...: a secret's value does not belong in a file; export {name} "
                    f"in your shell and list {name} alone (passed by name)"
                )
        return items


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``hpcenv.yaml`` (``additionalProperties: false``), from the model."""
    schema = ProjectFile.model_json_schema()
    schema["title"] = "hpcenv project file (hpcenv.yaml)"
    return schema


@dataclass(frozen=True)
class Loaded:
    """A read project file: its values, the file, and the line of each field set in it."""

    path: Path
    data: ProjectFile
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, name: str) -> str:
        return f"{self.path.name}:{self.lines.get(name, 1)}"

    def resolved(self, rel: str) -> str:
        """A path given in the file, relative to the file's folder (``$VARS`` kept as they are)."""
        if rel.startswith(("/", "$")):
            return rel
        folder = self.path.parent
        return rel if folder == Path(".") else str(folder / rel)


def find(folder: Path | None = None) -> Path | None:
    """``hpcenv.yaml`` in ``folder`` (the current folder), or None."""
    path = (folder or Path(".")) / FILE_NAME
    return path if os.path.lexists(path) else None


def load(path: Path) -> Loaded:
    """Read and validate a project file; a problem is a ConfigError naming file and line."""
    from hpcenv.reads import trust_problem
    from hpcenv.yamlsrc import load_yaml, validate_file

    if not path.is_file():  # a folder, a device, a link to nowhere
        raise ConfigError(f"{path}: not a regular file; hpcenv init writes one")
    # read without being asked, in folders a group may share: it decides the site, the recipe
    # and the environment, so it must be yours and nobody else's to change
    problem = trust_problem(path.stat())
    if problem is not None:
        raise ConfigError(
            f"refusing the project file {path}: {problem}; hpcenv reads only a project file of "
            "yours that nobody else may change (chmod go-w, or copy it)"
        )
    raw, lines = load_yaml(path)
    if raw is None:  # empty, or only comments: every value from the options or the defaults
        return Loaded(path, ProjectFile(), {})
    data = validate_file(ProjectFile, path)
    return Loaded(path, data, {str(k[0]): v for k, v in lines.items() if len(k) == 1})


def load_here(folder: Path | None = None) -> Loaded | None:
    found = find(folder)
    return load(found) if found is not None else None


# -- the merge: explicit options over the file over defaults --------------------------------


@dataclass(frozen=True)
class Value:
    value: Any
    source: str  # "flag", "env HPCENV_SITE", "hpcenv.yaml:LINE", "folder name", "default"


@dataclass(frozen=True)
class Merged:
    """Each option's value and where it came from (:func:`merge`)."""

    values: dict[str, Value]
    file: Path | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name].value

    def get(self, name: str, default: Any = None) -> Any:
        found = self.values.get(name)
        return default if found is None or found.value is None else found.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.file) if self.file else None,
            "values": {
                k: {"value": _plain(v.value), "source": v.source} for k, v in self.values.items()
            },
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


_PATHS = ("requirements",)
_FOLDERS = ("stage_in", "stage_out")


def merge(
    given: dict[str, Any],
    project: Loaded | None,
    defaults: dict[str, Any] | None = None,
    *,
    sources: dict[str, str] | None = None,
) -> Merged:
    """The one place that decides each option's value.

    ``given``: the options the user gave (by project-file field name; None or an empty list is
    "not given"), ``sources``: how each was given when not as a flag (``env HPCENV_SITE``),
    ``defaults``: what each command uses when neither gave it. A given option replaces the
    file's value whole (a list too: ``--env A`` replaces the file's ``env:``). ``project``
    defaults to the file's folder name, else the current folder's."""
    defaults = defaults or {}
    sources = sources or {}
    out: dict[str, Value] = {}
    names = list(OPTIONS)
    names += [n for n in [*given, *defaults] if n not in names]
    for name in names:
        value = given.get(name)
        if value not in (None, [], ()):
            out[name] = Value(value, sources.get(name, "flag"))
            continue
        in_file = getattr(project.data, name, None) if project else None
        if project is not None and name in project.data.model_fields_set and in_file:
            if name in _PATHS:
                in_file = [Path(project.resolved(p)) for p in in_file]
            elif name in _FOLDERS:
                in_file = project.resolved(in_file)
            out[name] = Value(in_file, project.where(name))
            continue
        if name == "project":
            folder = project.path.parent if project else Path(".")
            out[name] = Value(naming.project_name(folder.resolve().name), "folder name")
            continue
        out[name] = Value(defaults.get(name), "default")
    return Merged(out, project.path if project else None)


# -- hpcenv init ----------------------------------------------------------------------------


def render(values: dict[str, Any]) -> str:
    """The text ``hpcenv init`` writes: the fields set, in the model's order, as YAML, under
    two comment lines; values the model refuses are one ConfigError line naming the option."""
    import yaml
    from pydantic import ValidationError

    from hpcenv.yamlsrc import error_message

    try:
        data = ProjectFile.model_validate(values)  # what init writes is always a valid file
    except ValidationError as err:
        first = err.errors()[0]
        option = str(first["loc"][0]).replace("_", "-") if first["loc"] else "value"
        raise ConfigError(f"--{option}: {error_message(first)}") from None
    doc = {k: v for k, v in data.model_dump(exclude_none=True).items() if v not in ([], None)}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    head = (
        "# hpcenv project file: build, submit and the other commands read it; options given\n"
        "# on the command line override it (hpcenv config shows each value and its source).\n"
    )
    return head + text


def init_values(folder: Path, **options: Any) -> dict[str, Any]:
    """What ``hpcenv init`` puts in the file: the options given (by field name; None or [] is
    "not given"), the project from the folder's name, ``requirements.txt`` when the folder has
    one and no ``requirements`` is given."""
    if not options.get("requirements") and (folder / "requirements.txt").is_file():
        options["requirements"] = ["requirements.txt"]
    unknown = sorted(set(options) - set(ProjectFile.model_fields))
    if unknown:
        raise ValueError(f"not a project file field: {unknown[0]}")
    values = {"project": options.get("project") or naming.project_name(folder.resolve().name)}
    for name in ProjectFile.model_fields:  # the model's order
        if name != "project" and options.get(name) not in (None, []):
            values[name] = options[name]
    return values


def write_new(folder: Path, text: str, *, force: bool) -> Path:
    """Write ``hpcenv.yaml`` in ``folder``; an existing one is kept unless ``force``."""
    import tempfile

    path = folder / FILE_NAME
    refused = ConfigError(f"{path} exists; give --force to replace it (or edit it)")
    if not force:
        try:  # never replaces one made meanwhile; 0644 whatever the umask (load's rule)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            raise refused from None
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # shared with the project, as its requirements.txt
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path
