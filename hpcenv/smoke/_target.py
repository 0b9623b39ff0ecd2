"""Where the smoke suite finds things inside a target and how it launches them."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Open MPI refuses root without these two; for a non-root user (the images default to ``hpc``)
# they change nothing, and they let the same commands run where a target executes as root.
IMAGE_LOCK = "/opt/hpcenv/stack.lock.json"  # the lock every hpcenv image carries

# Horovod's controller and CPU operations per flavour, one table for the smoke checks and the
# bench (Horovod 0.28.1 reads both at ``hvd.init()``; the operations must be built in).
HOROVOD_OPS_ENV: dict[str, dict[str, str]] = {
    op: {"HOROVOD_CONTROLLER": "gloo" if op == "gloo" else "mpi", "HOROVOD_CPU_OPERATIONS": op}
    for op in ("mpi", "gloo", "ccl")
}


def ccl_env(env: Mapping[str, str]) -> dict[str, str]:
    """The oneCCL settings (``CCL_*``) of a launch environment."""
    return {k: v for k, v in env.items() if k.startswith("CCL_")}


def missing_component(
    lock: Mapping[str, Any] | None, component: str, operation: str | None = None
) -> str | None:
    """Why the image cannot run a check that needs ``component`` (and Horovod ``operation``),
    from the lock baked into it; None when it can (or when the image carries no lock)."""
    if lock is None:
        return None
    comps = lock.get("components", {})
    name = f"{lock.get('recipe', '?')} image for {lock.get('site', '?')}"
    if component not in comps:
        return f"the {name} has no {component} (its lock: {', '.join(sorted(comps))})"
    if operation is not None:
        ops = str(comps[component].get("options", {}).get("operations", "")).split(",")
        if operation not in ops:
            return f"the {name} built {component} without {operation} (operations: {','.join(ops)})"
    return None


@dataclass(frozen=True)
class Target:
    """Paths and launch lines inside the target; every launcher oversubscribes (2 cores)."""

    checks_dir: str
    mnist_dir: str
    mpich_abi_lib: str
    ranks: int
    timeout: int
    launch_env: Mapping[str, str] = field(default_factory=dict)
    mpirun_flags: str | None = None  # hpcenv's placement for mpirun (smoke --site passes it)
    emulated: bool = False  # under qemu-user-static without --heavy: light checks, small sweeps

    def script(self, name: str) -> str:
        return f"{self.checks_dir}/{name}"

    @property
    def mpirun(self) -> str:
        """Open MPI (the primary MPI) with hpcenv's placement flags when the runner passes them
        (``--mpirun-flags``), else unplaced with ``--oversubscribe`` (ranks may exceed cores)."""
        from hpcenv.jobs.launchers import Mpirun

        if self.mpirun_flags:
            return f"mpirun -np {self.ranks} {self.mpirun_flags}"
        return shlex.join(Mpirun.unplaced(self.ranks))

    @property
    def mpiexec_mpich(self) -> str:
        """MPICH's hydra launcher, for the MPICH-ABI world daal4py needs."""
        return f"mpiexec.mpich -n {self.ranks}"

    @property
    def horovodrun_gloo(self) -> str:
        return f"horovodrun -np {self.ranks} -H localhost:{self.ranks} --gloo"

    @property
    def torchrun(self) -> str:
        """torchrun runs the command as given (``--no-python``), like the MPI launchers."""
        return f"torchrun --standalone --nproc-per-node {self.ranks} --no-python"

    def command(
        self, launcher: str, script: str, args: tuple[str, ...], env: Mapping[str, str]
    ) -> str:
        """Shell line: ``cd /tmp && env K=V timeout ... LAUNCHER python3 SCRIPT ARGS``."""
        env_part = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        argv = " ".join(shlex.quote(a) for a in (self.script(script), *args))
        return f"cd /tmp && env {env_part} timeout -k 10 {self.timeout} {launcher} python3 {argv}"
