"""Run a check and record how much CPU this rank got: ``python3 _cpu.py SCRIPT [ARGS...]``.

The smoke suite launches every check through this wrapper (``LAUNCHER python3 _cpu.py SCRIPT``),
so each rank, in whatever runtime it runs (podman, an Apptainer SIF, a Slurm step), measures
itself: when ``HPCENV_CPU_DIR`` is set, the rank writes ``<dir>/<pid>.json`` as the script ends
with

* ``run_ns`` / ``wait_ns``: the sums over the rank's threads of ``/proc/self/task/*/schedstat``
  fields 1 and 2 (time on a CPU; time runnable but waiting on a run queue; kernel
  Documentation/scheduler/sched-stats.rst). ``wait_ns / run_ns`` is how starved the rank was:
  0 when it had its cores, 1 when it got half the CPU it wanted;
* ``psi_some_us``: the growth of ``some total`` in ``/proc/pressure/cpu`` over the same life
  (microseconds in which some task of the machine waited for a CPU; kernel
  Documentation/accounting/psi.rst), and ``wall_ns``.

A missing or malformed file leaves its field out (``null``); the check itself is never disturbed:
its exit status and output are the script's own. Stdlib only (it runs inside the image).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time

CPU_DIR_ENV = "HPCENV_CPU_DIR"


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """``(run_ns, wait_ns)`` from one ``schedstat`` line; None when it does not parse."""
    fields = text.split()
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return int(fields[0]), int(fields[1])


def parse_psi_some_total(text: str) -> int | None:
    """``total`` (microseconds) of the ``some`` line of a PSI file; None when it does not parse."""
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != "some":
            continue
        for part in parts[1:]:
            key, _, value = part.partition("=")
            if key == "total" and value.isdigit():
                return int(value)
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(4096)
    except OSError:
        return None


def threads_schedstat(proc: str = "/proc/self") -> tuple[int, int, int] | None:
    """``(run_ns, wait_ns, threads)`` summed over the live threads of a process."""
    try:
        tids = os.listdir(f"{proc}/task")
    except OSError:
        return None
    run = wait = seen = 0
    for tid in tids:
        got = parse_schedstat(_read(f"{proc}/task/{tid}/schedstat") or "")
        if got is not None:
            run, wait, seen = run + got[0], wait + got[1], seen + 1
    return (run, wait, seen) if seen else None


def psi_some_total(path: str = "/proc/pressure/cpu") -> int | None:
    text = _read(path)
    return None if text is None else parse_psi_some_total(text)


def _write(folder: str, t0: int, psi0: int | None) -> None:
    stat = threads_schedstat()
    psi1 = psi_some_total()
    doc = {
        "pid": os.getpid(),
        "wall_ns": time.monotonic_ns() - t0,
        "run_ns": stat[0] if stat else None,
        "wait_ns": stat[1] if stat else None,
        "threads": stat[2] if stat else None,
        "psi_some_us": psi1 - psi0 if psi0 is not None and psi1 is not None else None,
    }
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
    except OSError as err:  # the measurement is optional; the check's result is not
        print(f"warning: {CPU_DIR_ENV}: {err}", file=sys.stderr)


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python3 _cpu.py SCRIPT [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    folder = os.environ.get(CPU_DIR_ENV)
    t0, psi0 = time.monotonic_ns(), psi_some_total()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        if folder:
            _write(folder, t0, psi0)


if __name__ == "__main__":
    main()
