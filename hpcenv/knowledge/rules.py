"""Compatibility rules as typed data, and the one function that evaluates them.

A rule in ``compat.yaml`` (``rules:``) relates facts: components of the stack (``torch``,
``cuda``, ``mpi``...) and site facts (``gpu.driver``, ``gpu.rocm``, ``host.mpi``, ``host.pmi``,
``mpi.model``). Its ``kind`` says how it is checked:

- ``table``: ``table[key(subject)]`` lists the values of ``object`` that fit, both compared at
  the rule's precision (``key``, ``match``: ``exact``, ``major``, ``major.minor``). A subject
  without a row fails unless ``missing: pass`` or the subject was pinned with ``!``.
- ``minimum``: ``subject >= at_least``; ``at_least`` is a version, or a table keyed by
  ``key(object)``.
- ``same-series``: subject and object agree at ``match`` precision.
- ``abi-family``: the MPI named by ``subject`` is in ABI family ``abi`` (or ``object``'s family).
- ``one-of``: subject is one of ``values``.
- ``note``: a documented fact that the resolver applies when it sets build options (no check).
- ``code``: a small function registered with :func:`code_rule` under the rule's id.

``when`` limits a rule to stacks where every named fact matches a condition: ``">=2.1"`` (a
version specifier), ``"openmpi@>=5"`` / ``"pmix@"`` (an MPI/PMI name with an optional
specifier) or a list of allowed values (``[bind]``). A rule applies only when every fact it
names is known. :func:`evaluate` returns a :class:`Verdict` that names the rule, so the
resolver can record which rules decided each choice.

To add a kind: one function in ``KINDS`` plus its fields on :class:`Rule`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpcenv.errors import ConfigError
from hpcenv.knowledge.facts import mpi_family
from hpcenv.versions import at_least, is_version, parse_spec, satisfies, series

Precision = Literal["exact", "major", "major.minor"]
Condition = str | list[str]


@dataclass(frozen=True)
class Fact:
    """A value the rules see: a component or a site fact, with where the value came from."""

    name: str
    value: str
    origin: str
    forced: bool = False  # pinned with '!': a well-formed version the knowledge base lacks

    def __str__(self) -> str:
        return f"{self.name} {self.value} ({self.origin})"


class Rule(BaseModel):
    """One compatibility rule. ``message`` is formatted with ``{subject}``/``{object}`` (values),
    ``{allowed}`` (what would fit) and the rule's own scalar fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = ""
    kind: Literal["table", "minimum", "same-series", "abi-family", "one-of", "note", "code"]
    source: str = Field(min_length=3)
    subject: str | None = None
    object: str | None = None
    when: dict[str, Condition] = {}
    message: str = ""
    key: Precision = "major.minor"
    match: Precision = "major.minor"
    table: dict[str, list[str]] = {}
    missing: Literal["fail", "pass"] = "fail"
    at_least: str | dict[str, str] | None = None
    abi: str | None = None
    values: list[str] = []
    data: dict[str, Any] = Field(default={}, description="facts a code rule reads")

    @field_validator("table", mode="before")
    @classmethod
    def _rows_are_lists(cls, table: Any) -> Any:
        if isinstance(table, dict):
            return {
                str(k): [str(x) for x in v] if isinstance(v, list) else [str(v)]
                for k, v in table.items()
            }
        return table

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> Rule:
        need = {
            "table": ("subject", "object", "table"),
            "minimum": ("subject", "at_least"),
            "same-series": ("subject", "object"),
            "abi-family": ("subject",),
            "one-of": ("subject", "values"),
        }.get(self.kind, ())
        for name in need:
            if not getattr(self, name):
                raise ValueError(f"a {self.kind} rule needs '{name}'")
        if self.kind == "abi-family" and not (self.abi or self.object):
            raise ValueError("an abi-family rule needs 'abi' or 'object'")
        return self

    def names(self) -> list[str]:
        """Every fact the rule reads; it applies only when all of them are known."""
        names = [n for n in (self.subject, self.object) if n]
        return [*names, *(n for n in self.when if n not in names)]


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    ok: bool
    detail: str
    facts: tuple[Fact, ...]

    def others(self, name: str) -> list[Fact]:
        """The facts on the other side of ``name`` (for 'conflict between A and B'): the
        rule's subject/object, else the facts its ``when`` names."""
        sides = {self.rule.subject, self.rule.object}
        main = [f for f in self.facts if f.name != name and f.name in sides]
        return main or [f for f in self.facts if f.name != name]


def _version_part(value: str) -> str | None:
    """``"4.1.4"`` -> itself; ``"openmpi@4.1.4"`` -> ``"4.1.4"``; ``"pmi2"`` -> None."""
    if "@" in value or not is_version(value):
        try:
            return parse_spec(value)[1]
        except ConfigError:
            return None
    return value


def _name_part(value: str) -> str:
    return value.split("@", 1)[0]


def condition_holds(cond: Condition, value: str) -> bool:
    if isinstance(cond, list):
        return value in cond or _name_part(value) in cond
    if "@" in cond:
        name, spec = cond.split("@", 1)
        if _name_part(value) != name:
            return False
        version = _version_part(value)
        return not spec or (version is not None and satisfies(version, spec))
    if cond in ("", "*"):
        return True
    version = _version_part(value)
    return version is not None and satisfies(version, cond)


def _at(value: str, precision: Precision) -> str | None:
    """The comparable part of a value, or None when it is not a version."""
    version = _version_part(value)
    if version is None:
        return value if precision == "exact" else None
    return series(version, precision)


def _render(rule: Rule, s: Fact, o: Fact | None, allowed: str) -> str:
    fields = {k: v for k, v in rule.model_dump().items() if isinstance(v, str)}
    fields |= {"subject": s.value, "object": o.value if o else "", "allowed": allowed}
    try:
        return rule.message.format(**fields) if rule.message else ""
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"compat.yaml: rule {rule.id}: bad message template: {err}") from None


Check = Callable[[Rule, Mapping[str, Fact]], tuple[bool, str]]


def _table(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    s, o = facts[rule.subject or ""], facts[rule.object or ""]
    row = rule.table.get(_at(s.value, rule.key) or s.value)
    if row is None:
        ok = rule.missing == "pass" or s.forced
        return ok, _render(rule, s, o, "none known")
    fits = _at(o.value, rule.match) in [_at(x, rule.match) for x in row]
    return fits, _render(rule, s, o, ", ".join(row))


def _minimum(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    s = facts[rule.subject or ""]
    o = facts[rule.object] if rule.object else None
    floor = rule.at_least
    if isinstance(floor, dict):
        assert o is not None
        floor = floor.get(_at(o.value, rule.key) or "")
    subject_version = _version_part(s.value)
    if floor is None or subject_version is None:
        return False, _render(rule, s, o, "unknown")
    return at_least(subject_version, floor), _render(rule, s, o, floor)


def _same_series(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    s, o = facts[rule.subject or ""], facts[rule.object or ""]
    a, b = _at(s.value, rule.match), _at(o.value, rule.match)
    if a is None or b is None:  # a side without a version (pmi2): nothing to compare
        return True, ""
    return a == b, _render(rule, s, o, b)


def _abi_family(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    s = facts[rule.subject or ""]
    o = facts[rule.object] if rule.object else None
    want = rule.abi or mpi_family(_name_part(o.value if o else ""))["abi"]
    have = mpi_family(_name_part(s.value))["abi"]
    return have == want, _render(rule, s, o, want)


def _one_of(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    s = facts[rule.subject or ""]
    o = facts[rule.object] if rule.object else None
    return s.value in rule.values, _render(rule, s, o, ", ".join(rule.values))


def _code(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    if rule.id not in CODE:
        raise ConfigError(f"compat.yaml: rule {rule.id} is kind 'code' but no function has its id")
    return CODE[rule.id](rule, facts)


KINDS: dict[str, Check] = {
    "table": _table,
    "minimum": _minimum,
    "same-series": _same_series,
    "abi-family": _abi_family,
    "one-of": _one_of,
    "note": lambda rule, facts: (True, ""),
    "code": _code,
}
CODE: dict[str, Check] = {}


def code_rule(rule_id: str) -> Callable[[Check], Check]:
    """Register the function that checks the ``kind: code`` rule ``rule_id``."""

    def register(fn: Check) -> Check:
        CODE[rule_id] = fn
        return fn

    return register


def applies(rule: Rule, facts: Mapping[str, Fact]) -> bool:
    if any(name not in facts for name in rule.names()):
        return False
    return all(condition_holds(c, facts[n].value) for n, c in rule.when.items())


def evaluate(rule: Rule, facts: Mapping[str, Fact]) -> Verdict | None:
    """Check one rule against the known facts; None when it does not apply."""
    if not applies(rule, facts):
        return None
    ok, detail = KINDS[rule.kind](rule, facts)
    return Verdict(rule, ok, detail, tuple(facts[n] for n in rule.names()))


# -- rules that need code ------------------------------------------------------------------
@code_rule("torch-arch")
def _torch_arch(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    """PyPI has torch wheels for some architectures; elsewhere only Open-CE's conda builds."""
    arch, torch = facts["arch"].value, facts["torch"].value
    if arch in rule.data["pypi_archs"]:
        return True, ""
    builds = rule.data["conda"].get(arch, {}).get("torch", {})
    return torch in builds, (
        f"no {arch} build of torch {torch} (PyPI has none; Open-CE provides "
        f"{', '.join(builds) or 'none'})"
    )


@code_rule("oneccl-pypi")
def _oneccl_pypi(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    """oneCCL from PyPI: only releases whose wheels work on their own (a refused one names the
    missing piece)."""
    oneccl = facts["oneccl"]
    refused = rule.data["refused"].get(oneccl.value)
    if refused:
        return False, refused
    if oneccl.value in rule.data["impi_rt"] or oneccl.forced:
        return True, ""
    known = ", ".join(rule.data["impi_rt"])
    return False, f"oneCCL {oneccl.value} from PyPI was not checked; usable: {known}"


@code_rule("mpi-abi-providers")
def _mpi_abi_providers(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    """The site's MPI provides the MPI-5 standard ABI (libmpi_abi.so.1) from a known version of
    its family on; a family without one, or a spec without a version, does not."""
    host = facts["host.mpi"]
    name, version = _name_part(host.value), _version_part(host.value)
    soname = rule.data["soname"]
    since = rule.data["since"].get(name)
    if since is None:
        known = ", ".join(f"{n} >= {v}" for n, v in rule.data["since"].items())
        return False, f"{name} does not provide {soname} (known providers: {known})"
    if version is None:
        return False, f"the site names {name} without a version; {soname} needs {name} >= {since}"
    if not at_least(version, since):
        return False, f"{name} {version} predates {soname} ({name} >= {since} provides it)"
    return True, f"{name} {version} provides {soname} ({name} >= {since})"


@code_rule("mpi-abi-programs")
def _mpi_abi_programs(rule: Rule, facts: Mapping[str, Fact]) -> tuple[bool, str]:
    """Every MPI program of the recipe (comma-separated in the fact) can be built against
    mpi_abi.h; the first that cannot says why."""
    programs = [p for p in facts["mpi.abi.programs"].value.split(",") if p]
    if not programs:
        return False, "the recipe has no MPI program to build against mpi_abi.h"
    for program in programs:
        if program not in rule.data["allowed"]:
            why = rule.data["refused"].get(program, f"{program} was not built against mpi_abi.h")
            return False, why
    return (
        True,
        f"{', '.join(programs)} can be built against {rule.data.get('header', 'mpi_abi.h')}",
    )
