"""Section: K-Means, daal4py (float32; SPMD on 2 ranks and batch) vs stock scikit-learn."""

from __future__ import annotations

from typing import Any

from hpcenv.bench.context import NP, BenchContext
from hpcenv.bench.report import Headline, Section, Table, fmt_num, fmt_ratio, ratio

MPICH_LAUNCH = (
    f"LD_LIBRARY_PATH=${{HPCENV_MPICH_ABI_LIB:-/opt/mpich-abi/lib}} mpiexec.mpich -n {NP}"
)


def kmeans_section(ctx: BenchContext) -> Section:
    sec = Section("kmeans", "K-Means: daal4py (float32) vs stock scikit-learn")
    rows = 200_000 if ctx.quick else 1_000_000
    reps = 1 if ctx.quick else 5
    # two runs in a row: the goal is "faster in both", not "faster once"
    docs = []
    for i in range(1 if ctx.quick else 2):
        res = ctx.in_image(MPICH_LAUNCH, "kmeans_f32.py", f"--rows {rows} --reps {reps}")
        docs.append(res.require_doc())
        sec.data[f"run{i + 1}"] = res.summary() | {"doc": docs[-1]}
    doc = docs[-1]
    methods: dict[str, dict[str, Any]] = {
        f"daal4py SPMD ({NP} ranks x 1 thread)": doc["daal4py_spmd"],
        f"daal4py batch ({doc['daal4py_batch']['threads']} threads)": doc["daal4py_batch"],
        f"scikit-learn {doc['sklearn']['version']} ({doc['sklearn']['threads']} threads)": doc[
            "sklearn"
        ],
    }
    if "seconds" in doc.get("sklearnex", {}):
        methods[f"sklearnex KMeans ({doc['sklearnex']['threads']} threads)"] = doc["sklearnex"]
    sk = doc["sklearn"]
    sk_per_iter = sk["seconds"] / max(1, sk["iterations"])
    table_rows = []
    for name, m in methods.items():
        per_iter = m["seconds"] / max(1, m["iterations"] or 1)
        table_rows.append(
            [
                name,
                fmt_num(m["seconds"]),
                str(m["iterations"]),
                fmt_num(per_iter * 1e3),
                fmt_ratio(ratio(sk["seconds"], m["seconds"])),
                fmt_ratio(ratio(sk_per_iter, per_iter)),
                fmt_num(m["objective"], 7),
            ]
        )
        ctx.say(sec.key, f"{name}: {m['seconds']:.3f} s, {m['iterations']} iterations")
    sec.text.append(
        f"{doc['rows']:,} x {doc['features']} float32 points (overlapping Gaussian blobs, the "
        f"kmeans_daal4py check's dataset made in float32), {doc['clusters']} clusters, at most "
        f"{doc['max_iterations']} Lloyd iterations (below where this data converges, so every method "
        "does all of them), the same initial centroids for every method, no early stop by "
        "tolerance. Best of "
        f"{doc['reps']}, daal4py batch and scikit-learn alternating rep by rep. SPMD runs under `mpiexec.mpich` with the image's MPICH-ABI side "
        "runtime; the batch runs use every core of one process. daal4py from "
        f"scikit-learn-intelex {doc['daal4py']}."
    )
    sec.tables.append(
        Table(
            "",
            [
                "method",
                "seconds",
                "iterations",
                "ms / iteration",
                "sklearn / method (time)",
                "sklearn / method (per iter)",
                "objective",
            ],
            table_rows,
            f"Centroid agreement (relative Frobenius difference to daal4py batch): SPMD "
            f"{doc['spmd_vs_batch_rel_diff']:.1e}, scikit-learn {doc['sklearn_vs_batch_rel_diff']:.1e}"
            + (
                f", sklearnex {doc['sklearnex_vs_batch_rel_diff']:.1e}"
                if "sklearnex_vs_batch_rel_diff" in doc
                else ""
            )
            + ".",
        )
    )

    def per_it(m: dict[str, Any]) -> float:
        return float(m["seconds"]) / max(1, int(m["iterations"] or 1))

    def speedups(key: str) -> list[float]:
        out = []
        for d in docs:
            skl = per_it(d["sklearn"])
            out.append(skl / per_it(d[key]))
        return out

    for key, label in (("daal4py_batch", "batch"), ("daal4py_spmd", f"SPMD ({NP} ranks)")):
        ups = speedups(key)
        sec.headline.append(
            Headline(
                f"K-Means float32: scikit-learn / daal4py {label}, time per iteration, "
                f"{len(docs)} runs in a row (goal >= 1.2 in each)",
                f"{fmt_num(sk_per_iter * 1e3)} vs {fmt_num(per_it(doc[key]) * 1e3)} ms/iter (last run)",
                " / ".join(fmt_ratio(u) for u in ups),
                ">= 1.2",
                min(ups) if ups else None,
            )
        )
    return sec
