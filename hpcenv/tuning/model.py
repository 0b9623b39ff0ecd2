"""The tuning file: what was chosen, for which image and layout, and the measurements behind it.

Only structured values are kept; the Open MPI rules file is generated from ``collective_rules``
(numbers), never stored as text, and every environment value is checked against a conservative
pattern, so a tampered file cannot smuggle shell syntax into a job script.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Open MPI reads its MCA parameters from lower-case names (OMPI_MCA_btl_vader_eager_limit).
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
EnvValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,:+=@-]{0,256}$")]


@lru_cache(maxsize=1)
def collectives() -> dict[str, Any]:
    """:file:`collectives.yaml`: what the sweep (:mod:`hpcenv.sweep.measure`) tries, and so what
    a tuning file may set (:func:`measured_names`)."""
    import yaml

    data: dict[str, Any] = yaml.safe_load(
        Path(__file__).with_name("collectives.yaml").read_text(encoding="utf-8")
    )
    return data


@lru_cache(maxsize=1)
def measured_names() -> frozenset[str]:
    """Every variable name ``hpcenv tune --measure`` can write into a tuning file (its ``env``:
    the Open MPI transports and Horovod knobs it sweeps; its ``rendered_only`` candidates: the
    other MPIs' algorithm variables, Horovod's multi-node knob, NCCL's algorithm and protocol),
    read from :file:`collectives.yaml`, the one list the sweep itself reads. A tuning file may set
    exactly these (:mod:`hpcenv.envpolicy`, layer ``measured-tuning``): an allow-list, so a
    planted file cannot set ``HOROVOD_TIMELINE``, a Gloo rendezvous address or
    ``OMPI_MCA_plm`` because no word in their names looked like loading code (issue 40)."""
    kb = collectives()
    names = {str(kb["mpich"]["variable"]), str(kb["intel-mpi"]["variable"])}
    for transport in kb["openmpi"].get("transports", []):
        names |= {str(k) for k in transport["env"]}
    for key in ("horovod", "nccl"):
        for group in ("candidates", "multi_node_only"):
            for cand in kb[key].get(group, []):
                names |= {str(k) for k in cand}
    return frozenset(names)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Layout(_Strict):
    """The rank layout a tuning was measured for (one file per site and layout)."""

    nodes: int = Field(ge=1)
    ranks_per_node: int = Field(ge=1)
    cores_per_rank: int = Field(ge=1)

    @property
    def key(self) -> str:
        return f"{self.nodes}n{self.ranks_per_node}r{self.cores_per_rank}c"

    def describe(self) -> str:
        return (
            f"{self.nodes} node(s) x {self.ranks_per_node} rank(s), "
            f"{self.cores_per_rank} core(s) per rank"
        )


class Rule(_Strict):
    """From ``min_bytes`` up (to the next rule): coll_tuned algorithm and segment size."""

    min_bytes: int = Field(ge=0)
    algorithm: int = Field(ge=0, le=16)
    segsize: int = Field(default=0, ge=0)


class MeasuredTuning(_Strict):
    """One ``hpcenv tune --measure`` result."""

    format: Literal[1] = 1
    site: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*$")]
    image: str
    image_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12,64}$")]
    layout: Layout
    mpi: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]*$")]
    date: str
    seconds: float = 0.0
    collective_rules: list[Rule] = []
    env: dict[EnvName, EnvValue] = {}
    reasons: list[str] = []
    rendered_only: dict[str, list[dict[EnvName, EnvValue]]] = Field(
        default={}, description="candidates written down but not measured here, and why (key)"
    )
    measurements: dict[str, Any] = {}

    def rules_text(self) -> str | None:
        """The coll_tuned dynamic rules file for allreduce, or None without rules."""
        if not self.collective_rules:
            return None
        return coll_tuned_rules(
            [(r.min_bytes, r.algorithm, r.segsize) for r in self.collective_rules],
            self.layout.nodes * self.layout.ranks_per_node,
        )


def coll_tuned_rules(rules: list[tuple[int, int, int]], comm_size: int, coll_id: int = 2) -> str:
    """An Open MPI coll_tuned dynamic rules file (classic format) for one collective.

    ``rules`` are ``(min_bytes, algorithm, segsize)``; Open MPI uses the rule with the largest
    size <= the message, so the first rule is moved to size 0 and runs of the same choice
    collapse. ``coll_id`` 2 is allreduce. Numbers only, one record per line (no comments: the
    4.1 reader skips non-digits and would read digits in them).
    """
    if not rules:
        raise ValueError("no algorithm choices")
    if comm_size < 1:
        raise ValueError(f"bad communicator size {comm_size}")
    merged: list[tuple[int, int, int]] = []
    for size, alg, seg in sorted(rules):
        if alg < 0 or seg < 0:
            raise ValueError(f"bad rule {alg}/{seg} for {size} bytes")
        if merged and merged[-1][1:] == (alg, seg):
            continue
        merged.append((0 if not merged else size, alg, seg))
    lines = ["1", str(coll_id), "1", str(comm_size), str(len(merged))]
    lines += [f"{size} {alg} 0 {seg}" for size, alg, seg in merged]
    return "\n".join(lines) + "\n"
