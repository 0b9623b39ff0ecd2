"""The MPI-5 standard ABI: one decision, from the knowledge base's rules, for a site and a recipe.

MPI 5.0 defines an application binary interface: a program compiled once against ``mpi_abi.h``
(``mpicc_abi``) links ``libmpi_abi.so.1`` and runs on any library that provides it, of any family
(MPICH >= 5.0, Intel MPI >= 2021.18, Open MPI >= 6.0: rule ``mpi-abi-providers``, each measured
here by ``tests/test_mpi_abi.py``). For a bind-model site this is "one image, any site MPI": the
image's MPI programs are built against the ABI and the site's ABI library is bound over the
image's at run time, whatever its family.

The ABI applies when all of these hold, and :func:`decide` names the first that does not:

- the site binds its MPI into the image (``mpi.model: bind``); hybrid runs the image's own MPI
  and site-build compiles against the site's MPI itself, so neither needs it;
- the site's MPI provides ``libmpi_abi.so.1`` (rule ``mpi-abi-providers``, from its ``mpi.spec``;
  the job's preflight then checks the file itself, ``hpcenv/jobs/bindmodel.py``);
- every MPI program of the recipe can be built against ``mpi_abi.h`` (rule ``mpi-abi-programs``:
  C bindings only, rule ``mpi-abi-fortran``).

What the ABI leaves as it was is in rules ``mpi-abi-launcher`` (the site's launcher must start
the ranks) and ``mpi-abi-pmpi`` (profiling tools must be built against the ABI too).

Where it fits, the resolver (:meth:`hpcenv.resolver.Resolver.decide_mpi_abi`) makes the image's
MPI the ABI implementation of rule ``mpi-abi-image`` (PyPI's ``mpich`` wheel in the venv, for
running alone) and builds mpi4py from source with its ``mpicc_abi``; the blocks
(:meth:`hpcenv.blocks.Blocks.mpi`) install it and check that ``mpi4py.MPI`` links
``libmpi_abi.so.1`` only. ``tests/test_mpi_abi_image.py`` runs one such image under MPICH 5 and
Intel MPI bound in.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from hpcenv.knowledge import rule
from hpcenv.knowledge.rules import Fact, evaluate
from hpcenv.recipe import Recipe
from hpcenv.site import Site

# The name of the ABI in locks and preflight messages (the lock's ``mpi.options.abi``).
STANDARD_ABI = "MPI-5"

# The rules that decide, in the order they are asked.
DECIDING = ("mpi-abi-providers", "mpi-abi-programs")


@dataclass(frozen=True)
class AbiDecision:
    """Whether the MPI-5 standard ABI fits, why (one line), and the rules that said so."""

    fits: bool
    reason: str
    rules: tuple[str, ...] = ()


def soname() -> str:
    """The standard ABI's C library name (rule ``mpi-abi-providers``)."""
    return str(rule("mpi-abi-providers").data["soname"])


def provides(spec: str) -> bool:
    """Whether the MPI ``spec`` (``mpich@5.0.2``) provides ``libmpi_abi.so.1`` by the rule."""
    verdict = evaluate(rule("mpi-abi-providers"), {"host.mpi": Fact("host.mpi", spec, "spec")})
    return verdict is not None and verdict.ok


def mpi_programs(recipe: Recipe, present: Collection[str] | None = None) -> list[str]:
    """The recipe's components that use MPI, as rule ``mpi-abi-programs`` names them; with
    ``present`` (the components the resolver kept), only those (an optional daal4py that was
    left out is no reason)."""
    uses = rule("mpi-abi-programs").data["uses_mpi"]
    out = [
        c
        for c in uses
        if c != "mpi4py-os" and recipe.wants(c) and (present is None or c in present)
    ]
    if "mpi4py" in out and recipe.python_from == "os":
        out[out.index("mpi4py")] = "mpi4py-os"
    return out


def decide(site: Site, recipe: Recipe, present: Collection[str] | None = None) -> AbiDecision:
    """The ABI decision for ``recipe`` on ``site`` (``present``: :func:`mpi_programs`): fits,
    or the first reason it does not."""
    model = site.mpi.model
    if model != "bind":
        return AbiDecision(
            False,
            f"MPI-5 standard ABI not used: the {model} model "
            + (
                "runs the image's own MPI, started by the site's launcher"
                if model == "hybrid"
                else "compiles the image's MPI programs against the site's MPI itself"
            ),
        )
    facts = {
        "host.mpi": Fact("host.mpi", site.mpi.spec, f"site {site.name}"),
        "mpi.abi.programs": Fact(
            "mpi.abi.programs", ",".join(mpi_programs(recipe, present)), f"recipe {recipe.name}"
        ),
    }
    said: list[str] = []
    for rule_id in DECIDING:
        verdict = evaluate(rule(rule_id), facts)
        assert verdict is not None  # both facts are always known
        if not verdict.ok:
            return AbiDecision(
                False,
                f"MPI-5 standard ABI not used: {verdict.detail} [rule {rule_id}]",
                (*DECIDING[: DECIDING.index(rule_id)], rule_id),
            )
        said.append(f"{verdict.detail} [rule {rule_id}]")
    return AbiDecision(True, "MPI-5 standard ABI fits: " + "; ".join(said), DECIDING)
