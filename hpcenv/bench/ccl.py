"""Section ``ccl``: Horovod over oneCCL against Horovod over MPI and over Gloo, 64 MiB allreduce.

All three run in one container of the ``horovod-ccl`` image (one Horovod build with CCL, MPI and
Gloo; ``HOROVOD_CPU_OPERATIONS`` picks the operations at run time), in interleaved rounds, with
hpcenv's placement for that recipe (oneCCL's worker pinned by ``CCL_WORKER_COUNT`` /
``CCL_WORKER_AFFINITY``). The figure is the best busbw of each flavour over the rounds. Run it
alone with ``hpcenv bench --site local --section ccl``.
"""

from __future__ import annotations

import shlex
from typing import Any

from hpcenv.bench.context import HOST_CHECKS, IMAGE_CHECKS, NP, BenchContext, MiB
from hpcenv.bench.report import Headline, Section, Table, fmt_num, fmt_ratio, ratio
from hpcenv.bench.shells import Container, podman

RECIPE = "horovod-ccl"
SIZE = 64 * MiB
FLAVORS = {  # name -> (launcher kind, environment)
    "ccl": ("mpirun", {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "ccl"}),
    "mpi": ("mpirun", {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"}),
    "gloo": ("horovodrun", {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}),
}
# Why CCL trails on this machine, as measured on 2026-11-22 (2 ranks, one node): oneCCL's OFI
# transport runs on a network provider of impi-rt's libfabric 2.1.0 over loopback
# (CCL_LOG_LEVEL=debug: "has_shm 0", also with CCL_ATL_SHM=1; FI_PROVIDER=shm makes the ranks
# exit), while Open MPI's vader BTL copies through shared memory. Reported with the ratio.
BELOW_ONE = (
    "oneCCL's OFI transport goes through libfabric's network provider over loopback (no shm "
    "provider: 'has_shm 0' in CCL_LOG_LEVEL=debug, also with CCL_ATL_SHM=1), Open MPI through "
    "shared memory"
)


def ccl_section(ctx: BenchContext) -> Section:
    from hpcenv.build import image_tag
    from hpcenv.jobs.launchers import Mpirun
    from hpcenv.jobs.tuning import tune

    sec = Section("ccl", f"Horovod over oneCCL vs MPI and Gloo ({NP} ranks, 64 MiB)")
    image = image_tag(ctx.site.name, RECIPE)
    if podman("image", "exists", image, check=False).returncode != 0:
        sec.text.append(f"Not measured: {image} is not built "
                        f"(`hpcenv build --site {ctx.site.name} --recipe {RECIPE}`).")  # fmt: skip
        sec.headline.append(Headline("Horovod over CCL / Horovod over MPI, 64 MiB allreduce",
                                     "not measured (image not built)", ""))  # fmt: skip
        return sec
    placement = tune(ctx.site, 1, NP, recipe=RECIPE)
    env = dict(placement.env) | {str(k): str(v) for k, v in ctx.site.tuning.items()}
    mpirun = shlex.join(Mpirun().command(ctx.site, placement))
    launchers = {"mpirun": mpirun, "horovodrun": f"horovodrun -np {NP} -H localhost:{NP} --gloo"}
    args = f"--min-bytes {SIZE} --max-bytes {SIZE} --exact-n 1000"
    rounds = 1 if ctx.quick else 3
    best: dict[str, float] = {}
    runs: list[dict[str, Any]] = []
    with Container(image, [f"{HOST_CHECKS}:{IMAGE_CHECKS}:ro"]) as ctr:
        for i in range(rounds):  # interleaved, so a busy moment hits every flavour alike
            for name, (kind, flavor_env) in FLAVORS.items():
                program = f"python3 {IMAGE_CHECKS}/allreduce_horovod.py {args}"
                if kind == "horovodrun":  # one argument: horovodrun parses the program's options
                    program = f"bash -c {shlex.quote(program)}"
                res = ctr.run(f"{launchers[kind]} {program}", env | flavor_env, 600)
                doc = res.require_doc()
                row = doc["sweep"][-1]
                bad = row["mismatches"] + sum(e["mismatches"] for e in doc["exact"])
                if bad or row["bytes"] != SIZE:
                    raise RuntimeError(f"horovod-{name}: {bad} wrong results at {row['bytes']} B")
                if name == "ccl" and not doc["built"].get("ccl"):
                    raise RuntimeError(f"{image}: Horovod was built without CCL")
                bw = float(row["busbw_GBps"])
                best[name] = max(best.get(name, 0.0), bw)
                runs.append(res.summary() | {"flavor": name, "round": i + 1, "busbw_GBps": bw})
                ctx.say(sec.key, f"#{i + 1} horovod-{name}: {bw:.3g} GB/s ({res.seconds:.1f} s)")
    sec.data = {"image": image, "best_busbw_GBps": best, "runs": runs, "env": env}
    vs_mpi, vs_gloo = ratio(best["ccl"], best["mpi"]), ratio(best["ccl"], best["gloo"])
    sec.text.append(
        f"`allreduce_horovod.py` at 64 MiB (float32, Sum, out of place), best busbw of {rounds} "
        f"interleaved round(s), in one container of {image}; launch: `{mpirun}` with "
        + ", ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("CCL_"))
        + " (hpcenv's placement for the recipe); Gloo through `horovodrun --gloo`."
    )
    note = "" if vs_mpi is None or vs_mpi >= 1 else f"below 1: {BELOW_ONE}"
    sec.tables.append(Table("", ["Horovod CPU operations", "busbw GB/s", "CCL / this"], [
        [f"{name.upper()}", fmt_num(best[name]), fmt_ratio(ratio(best["ccl"], best[name]))]
        for name in FLAVORS
    ], note))  # fmt: skip
    sec.headline.append(Headline(
        "Horovod over CCL / Horovod over MPI, 64 MiB allreduce (same image)",
        f"{fmt_num(best['ccl'])} vs {fmt_num(best['mpi'])} GB/s (Gloo {fmt_num(best['gloo'])}; "
        f"CCL / Gloo {fmt_ratio(vs_gloo)})" + (f"; {note}" if note else ""),
        fmt_ratio(vs_mpi)))  # fmt: skip
    return sec
