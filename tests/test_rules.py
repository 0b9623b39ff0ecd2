"""The rule model and its generic evaluator; pins and versions checked where they enter."""

from __future__ import annotations

import pytest

from hpcenv.errors import ConfigError, ConflictError
from hpcenv.knowledge import kb, rule, rules
from hpcenv.knowledge.rules import KINDS, Fact, Rule, condition_holds, evaluate
from hpcenv.pins import check_pin, parse_overrides
from hpcenv.recipe import load_recipe
from hpcenv.resolver import resolve
from hpcenv.site import load_site
from hpcenv.versions import at_least, major_minor, parse, satisfies


def facts(**values: str) -> dict[str, Fact]:
    return {k.replace("_", "-"): Fact(k.replace("_", "-"), v, "test") for k, v in values.items()}


def test_every_rule_validates_with_a_source_and_a_known_kind() -> None:
    assert set(rules()) == set(kb()["rules"])
    for r in rules().values():
        assert r.kind in KINDS and len(r.source) > 10, r.id


def test_every_os_has_a_python_row() -> None:
    assert set(kb()["os"]) - {"source"} == set(rule("os-python").table)


def test_bad_rule_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="a table rule needs 'table'"):
        Rule.model_validate({"kind": "table", "source": "x" * 5, "subject": "a", "object": "b"})
    with pytest.raises(ValueError, match="Extra inputs"):
        Rule.model_validate({"kind": "note", "source": "somewhere", "tabel": {}})


def test_table_kind() -> None:
    r = rule("torch-cuda")
    assert evaluate(r, facts(torch="2.5.1", cuda="12.4", arch="x86_64")).ok  # type: ignore[union-attr]
    bad = evaluate(r, facts(torch="2.5.1", cuda="11.7", arch="x86_64"))
    assert bad is not None and not bad.ok and "11.8, 12.1, 12.4" in bad.detail
    assert evaluate(r, facts(torch="2.5.1", cuda="11.7", arch="ppc64le")) is None  # when
    assert evaluate(r, facts(torch="2.5.1", arch="x86_64")) is None  # cuda unknown yet
    unknown = evaluate(r, facts(torch="2.99.0", cuda="12.4", arch="x86_64"))
    assert unknown is not None and not unknown.ok  # no row
    forced = {**facts(cuda="12.4", arch="x86_64"), "torch": Fact("torch", "2.99.0", "t", True)}
    assert evaluate(r, forced).ok  # type: ignore[union-attr]


def test_minimum_kind() -> None:
    r = rule("cuda-driver")
    assert evaluate(r, {"gpu.driver": Fact("gpu.driver", "550.1", "s"), **facts(cuda="12.4")}).ok  # type: ignore[union-attr]
    bad = evaluate(r, {"gpu.driver": Fact("gpu.driver", "450.80.02", "s"), **facts(cuda="12.4")})
    assert bad is not None and not bad.ok and "525.60.13" in bad.detail
    r5 = rule("openmpi5-pmix")
    assert evaluate(r5, facts(pmix="4.1.2", mpi="openmpi@4.1.4")) is None
    assert not evaluate(r5, facts(pmix="4.1.2", mpi="openmpi@5.0.6")).ok  # type: ignore[union-attr]
    assert evaluate(r5, facts(pmix="4.2.2", mpi="openmpi@5.0.6")).ok  # type: ignore[union-attr]


def test_same_series_abi_family_one_of_kinds() -> None:
    assert evaluate(rule("ipex-torch"), facts(ipex="2.3.100", torch="2.3.1")).ok  # type: ignore[union-attr]
    assert not evaluate(rule("ipex-torch"), facts(ipex="2.1.40", torch="2.3.1")).ok  # type: ignore[union-attr]
    bind = {
        "mpi.model": Fact("mpi.model", "bind", "s"),
        "host.mpi": Fact("host.mpi", "cray-mpich@8.1.31", "s"),
    }
    assert evaluate(rule("mpi-bind-abi"), {**bind, **facts(mpi="mpich@4.0.2")}).ok  # type: ignore[union-attr]
    assert not evaluate(rule("mpi-bind-abi"), {**bind, **facts(mpi="openmpi@4.1.4")}).ok  # type: ignore[union-attr]
    cxx = rule("horovod-torch-cxx17")
    assert evaluate(cxx, facts(horovod="0.27.0", torch="2.0.1")) is None
    assert not evaluate(cxx, facts(horovod="0.27.0", torch="2.1.2")).ok  # type: ignore[union-attr]


def test_conditions() -> None:
    assert condition_holds(">=2.1", "2.1.2") and not condition_holds(">=2.1", "2.1.0rc1")
    assert condition_holds("openmpi@>=5", "openmpi@5.0.6")
    assert not condition_holds("openmpi@>=5", "mpich@5.0")
    assert condition_holds("pmix@", "pmix@4") and not condition_holds("pmix@", "pmi2")
    assert condition_holds(["bind"], "bind") and not condition_holds(["bind"], "hybrid")


def test_versions_are_versions() -> None:
    assert parse("2.2.0rc1") < parse("2.2.0")
    assert not at_least("2.1.0rc1", "2.1")
    assert major_minor("2.1.100+xpu") == "2.1"
    assert satisfies("2.2.0", ">=2.1")
    for bad in ("abc", "2.2.0\n", "", "1.0; rm", "２.0"):
        with pytest.raises(ConfigError, match="not a version"):
            parse(bad)


@pytest.mark.parametrize(
    ("pin", "message"),
    [
        ("torch=not-a-version", "torch=not-a-version: not a version"),
        ("torch=2.99.0", "not a known torch release"),
        ("cuda=abc", "cuda=abc: not a version"),
        ("pmix=abc", "pmix=abc: not a version"),
        ("mpi=source", "unknown MPI family 'source'"),
        ("mpi=Open MPI", "not an MPI spec"),
        ("mpi=mvapich3@3.0", "unknown MPI family 'mvapich3'"),
        ("mpi=foompi@1", "unknown MPI family 'foompi'"),
        ("mpi=spectrum-mpi@10.4", "spectrum-mpi cannot be installed in an image"),
        ("mpi=openmpi@9.9.9", "not a known openmpi release"),
        ("torch=2.2.0\nRUN touch /pwned", "newline or control character"),
        ("rccl=6.0", "RCCL ships with ROCm"),
        ("torch=2.2.0!!", "not a version"),
    ],
)
def test_bad_pins_are_one_line_errors(pin: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_overrides([pin])
    assert message in str(err.value)
    assert "\n" not in str(err.value).replace(repr(pin), "")


def test_a_pin_given_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        parse_overrides(["torch=2.2.2", "torch=2.3.1"])
    assert parse_overrides(["torch=2.2.2", "torch=2.2.2"]) == {"torch": "2.2.2"}


def test_forced_pin_is_allowed_and_recorded() -> None:
    site, recipe = load_site("local"), load_recipe("horovod-cpu")
    lk = resolve(site, recipe, parse_overrides(["torch=2.99.0!"]))
    assert lk.version("torch") == "2.99.0"
    assert "not a known release, allowed with '!'" in lk.components["torch"].reason
    assert check_pin("mpi", "openmpi@5.0.99!", "--set").forced


def test_set_for_a_component_not_in_the_stack() -> None:
    with pytest.raises(ConfigError, match="has no horovod"):
        resolve(load_site("local"), load_recipe("daal4py"), parse_overrides(["horovod=0.28.1"]))


def test_every_conflict_is_reported() -> None:
    with pytest.raises(ConflictError) as err:
        resolve(
            load_site("local"),
            load_recipe("horovod-cpu"),
            parse_overrides(["python=3.10", "horovod=0.27.0", "mpi=openmpi@5.0.6", "pmix=4.1.2"]),
        )
    lines = str(err.value).splitlines()
    assert len(lines) == 3
    for rid in ("os-python", "horovod-torch-cxx17", "openmpi5-pmix"):
        assert sum(f"[rule {rid};" in line for line in lines) == 1


def test_lock_records_the_rules_that_decided() -> None:
    lk = resolve(load_site("perlmutter"), load_recipe("horovod-gpu"), {"torch": "2.4.1"})
    cuda = lk.components["cuda"]
    assert set(cuda.rules) == {"torch-cuda", "cuda-driver"}
    nccl = lk.components["nccl"]
    assert nccl.rejected["2.27.3"] == "nccl-cuda"  # built for CUDA 12.9/13.0, not 12.4
    assert set(lk.rules) >= {"torch-cuda", "cuda-driver", "nccl-cuda", "mpi-bind-abi"}
