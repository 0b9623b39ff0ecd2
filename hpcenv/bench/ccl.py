"""Section ``ccl``: Horovod over oneCCL against Horovod over MPI and over Gloo, 64 MiB allreduce.

All three run in one container of the ``horovod-ccl`` image (one Horovod build with CCL, MPI and
Gloo; ``HOROVOD_CPU_OPERATIONS`` picks the operations at run time), in interleaved rounds, with
hpcenv's placement for that recipe (oneCCL's worker pinned by ``CCL_WORKER_COUNT`` /
``CCL_WORKER_AFFINITY``). The figure is the best busbw of each flavour over the rounds. Run it
alone with ``hpcenv bench --site local --section ccl``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hpcenv.bench.context import HOST_CHECKS, IMAGE_CHECKS, NP, BenchContext, MiB
from hpcenv.bench.report import Headline, Section, Table, fmt_num, fmt_ratio, ratio
from hpcenv.jobs.launchenv import launch_env
from hpcenv.shells import Container, podman
from hpcenv.smoke._target import HOROVOD_OPS_ENV, ccl_env

RECIPE = "horovod-ccl"
SIZE = 64 * MiB
FLAVORS = {"ccl": "mpirun", "mpi": "mpirun", "gloo": "horovodrun"}  # name -> launcher
HAS_SHM = re.compile(r"has_shm (\d)")
LIBFABRIC = re.compile(r"libfabric version: (\S+)")


def transport_cause(run: Any, launch: str, env: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """Why CCL trails MPI, as this run's evidence shows: one tiny allreduce with
    ``CCL_LOG_LEVEL=debug`` says whether oneCCL's OFI transport had a shared-memory provider
    (``has_shm``) and which libfabric it loaded. On this machine (2026-11-22) it had none:
    libfabric's network provider over loopback, also with ``CCL_ATL_SHM=1``, while Open MPI's
    vader BTL copies through shared memory. The cause (2026-11-28): libfabric's shm provider
    cannot start in podman's own 64 MB /dev/shm; hpcenv's containers now use the host's
    (``--ipc=host``, as jobs do) and the image sets ``CCL_ATL_SHM=1`` (has_shm 1, 1.6x MPI)."""
    res = run(
        f"{launch} python3 {IMAGE_CHECKS}/allreduce_horovod.py --min-bytes 8 "
        "--max-bytes 8 --exact-n 10",
        env | HOROVOD_OPS_ENV["ccl"] | {"CCL_LOG_LEVEL": "debug"},
        300,
    )
    text = res.stdout + res.stderr
    shm = sorted(set(HAS_SHM.findall(text)))
    fabric = LIBFABRIC.search(text)
    probe = {"has_shm": shm, "libfabric": fabric.group(1) if fabric else None, "rc": res.returncode}
    if shm == ["0"]:
        return (
            "oneCCL's OFI transport ran without a shared-memory provider in this run (has_shm 0 "
            f"in CCL_LOG_LEVEL=debug, libfabric {probe['libfabric'] or '?'}): a network provider "
            "over loopback, where Open MPI copies through shared memory (libfabric's shm needs "
            "CCL_ATL_SHM=1 and more than podman's 64 MB /dev/shm)"
        ), probe
    return "cause not identified in this run (oneCCL's debug log shows has_shm " + (
        ",".join(shm) or "nothing"
    ) + ")", probe


def ccl_section(ctx: BenchContext) -> Section:
    from hpcenv import naming
    from hpcenv.jobs.launchers import Mpirun
    from hpcenv.jobs.placement import place

    sec = Section("ccl", f"Horovod over oneCCL vs MPI and Gloo ({NP} ranks, 64 MiB)")
    image = naming.image_tag(recipe=RECIPE, site=ctx.site.name)
    if podman("image", "exists", image, check=False).returncode != 0:
        sec.text.append(
            f"Not measured: {image} is not built "
            f"(`hpcenv build --site {ctx.site.name} --recipe {RECIPE}`)."
        )
        sec.headline.append(
            Headline(
                "Horovod over CCL / Horovod over MPI, 64 MiB allreduce",
                "not measured (image not built)",
                "",
            )
        )
        return sec
    placement = place(ctx.site, 1, NP, recipe=RECIPE)
    env = launch_env(ctx.site, placement)
    mpirun = shlex.join(Mpirun().command(ctx.site, placement))
    launchers = {"mpirun": mpirun, "horovodrun": f"horovodrun -np {NP} -H localhost:{NP} --gloo"}
    args = f"--min-bytes {SIZE} --max-bytes {SIZE} --exact-n 1000"
    rounds = 1 if ctx.quick else 3
    best: dict[str, float] = {}
    runs: list[dict[str, Any]] = []
    with Container(image, [f"{HOST_CHECKS}:{IMAGE_CHECKS}:ro"]) as ctr:
        for i in range(rounds):  # interleaved, so a busy moment hits every flavour alike
            for name, kind in FLAVORS.items():
                program = f"python3 {IMAGE_CHECKS}/allreduce_horovod.py {args}"
                if kind == "horovodrun":  # one argument: horovodrun parses the program's options
                    program = f"bash -c {shlex.quote(program)}"
                res = ctr.run(f"{launchers[kind]} {program}", env | HOROVOD_OPS_ENV[name], 600)
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
        vs_mpi, vs_gloo = ratio(best["ccl"], best["mpi"]), ratio(best["ccl"], best["gloo"])
        note, probe = "", dict[str, Any]()
        if vs_mpi is not None and vs_mpi < 1:
            cause, probe = transport_cause(ctr.run, mpirun, env)
            note = f"below 1: {cause}"
    sec.data = {
        "image": image,
        "best_busbw_GBps": best,
        "runs": runs,
        "env": env,
        "transport_probe": probe,
    }
    sec.text.append(
        f"`allreduce_horovod.py` at 64 MiB (float32, Sum, out of place), best busbw of {rounds} "
        f"interleaved round(s), in one container of {image}; launch: `{mpirun}` with "
        + ", ".join(f"{k}={v}" for k, v in sorted(ccl_env(env).items()))
        + " (hpcenv's placement for the recipe); Gloo through `horovodrun --gloo`."
    )
    sec.tables.append(
        Table(
            "",
            ["Horovod CPU operations", "busbw GB/s", "CCL / this"],
            [
                [f"{name.upper()}", fmt_num(best[name]), fmt_ratio(ratio(best["ccl"], best[name]))]
                for name in FLAVORS
            ],
            note,
        )
    )
    sec.headline.append(
        Headline(
            "Horovod over CCL / Horovod over MPI, 64 MiB allreduce (same image)",
            f"{fmt_num(best['ccl'])} vs {fmt_num(best['mpi'])} GB/s (Gloo {fmt_num(best['gloo'])}; "
            f"CCL / Gloo {fmt_ratio(vs_gloo)})" + (f"; {note}" if note else ""),
            fmt_ratio(vs_mpi),
        )
    )
    return sec
