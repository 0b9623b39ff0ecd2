"""Run a third-party training script unchanged and report what it trained (hpcenv's tests).

``python3 train_probe.py SCRIPT ARGS...`` runs SCRIPT as ``python3 SCRIPT ARGS...`` would (as
``__main__``, with its own ``sys.argv`` and its folder first on ``sys.path``) and, when it
ends, prints one line ``probe {json}``: this rank, its host, a SHA-256 of the trained model's
parameters, and every loss the script computed with a ``torch.nn`` loss module.

Written by hpcenv's tests, not part of the third-party code (which is vendored beside it, byte
for byte): the scripts print no parameter checksum and keep their model in local variables.
A global forward hook (``torch.nn.modules.module.register_module_forward_hook``, public torch
API) sees every module the script calls without changing a line of it; the model is the called
module with the most parameters (DDP's wrapper and the bare model hold the same tensors).
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import socket
import sys

import torch
from torch.nn.modules.loss import _Loss

called: dict[int, torch.nn.Module] = {}
losses: list[float] = []


def _hook(module: torch.nn.Module, args: object, output: object) -> None:
    if isinstance(module, _Loss):
        if isinstance(output, torch.Tensor) and output.numel() == 1:
            losses.append(float(output.detach()))
    elif id(module) not in called and next(module.parameters(), None) is not None:
        called[id(module)] = module


def _rank() -> int:
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if name in os.environ:
            return int(os.environ[name])
    return -1


def _report() -> None:
    result: dict[str, object] = {"rank": _rank(), "host": socket.gethostname(), "losses": losses}
    if called:
        model = max(called.values(), key=lambda m: sum(p.numel() for p in m.parameters()))
        flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
        result["model"] = type(model).__name__
        result["parameters"] = flat.numel()
        result["params_sha256"] = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    # A short line for the job's output (the losses are counted, not listed: a long line is
    # forwarded by srun in pieces that another rank's output can land between) ...
    short = {k: v for k, v in result.items() if k != "losses"}
    print("probe " + json.dumps({**short, "losses": len(losses)}), flush=True)
    # ... and the whole result, per rank, in the folder the job runs in.
    tmp = f"probe-{result['rank']}.json.tmp"
    with open(tmp, "w") as handle:
        json.dump(result, handle)
    os.replace(tmp, f"probe-{result['rank']}.json")


def main() -> None:
    script = os.path.abspath(sys.argv[1])
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(script)
    torch.nn.modules.module.register_module_forward_hook(_hook)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    _report()


if __name__ == "__main__":
    main()
