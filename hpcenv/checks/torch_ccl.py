"""torch.distributed ``ccl`` (oneCCL) all_reduce, where ``oneccl_bindings_for_pytorch`` imports.

Run: ``torchrun --standalone --nproc-per-node 2 torch_ccl.py``. Where the binding does not import,
rank 0 prints ``{"available": false, "reason": ...}`` with the import error and exits 0, so the
smoke test can skip with that reason.
"""

from __future__ import annotations

import importlib
import os

import torch
from _bench import emit

# Checked on the build host (pip index versions oneccl_bind_pt / oneccl-bindings-for-pytorch):
# neither PyPI nor the local wheel folder and simple indexes carry any build; Intel publishes the
# wheels only on its own index, which is unreachable there, and none exists for torch 2.13.
TORCH_213_NOTE = (
    "no oneccl_bind_pt (torch-ccl) build exists for torch 2.13 on any index the build host can "
    "reach (PyPI and the local wheel indexes have none; Intel's own wheel index is unreachable "
    "and carries none for 2.13)"
)


def unavailable_reason(err: ImportError) -> str:
    """The import error, plus why the image has no binding when torch is 2.13."""
    why = f"import oneccl_bindings_for_pytorch failed ({type(err).__name__}: {err})"
    note = (
        TORCH_213_NOTE if torch.__version__.startswith("2.13") else "the image was built without it"
    )
    return f"ccl backend unavailable with torch {torch.__version__}: {why}; {note}"


def main() -> None:
    try:
        ccl = importlib.import_module("oneccl_bindings_for_pytorch")
    except ImportError as err:
        if os.environ.get("RANK", "0") == "0":
            emit(
                {
                    "check": "torch_ccl",
                    "available": False,
                    "import_error": f"{type(err).__name__}: {err}",
                    "torch": torch.__version__,
                    "reason": unavailable_reason(err),
                }
            )
        return
    from allreduce_torch_gloo import run_allreduce

    doc = run_allreduce("ccl")
    if doc is not None:
        emit(doc | {"available": True, "oneccl_bindings": getattr(ccl, "__version__", "?")})


if __name__ == "__main__":
    main()
