"""Dry execution of rendered job scripts: the script runs for real under ``bash -euo pipefail``
with stub ``sbatch``/``srun``/``jsrun``/``mpiexec``/``mpirun``/``qsub``/``bsub``/``module``/
``apptainer``/``singularity``/``podman``/``podman-hpc``/``shifter`` first on PATH, in a
temporary root that stands in for the site's file systems.

What a stub does: append its argv (NUL-separated, one record per call) to ``$HPCENV_STUB_LOG``
and exit 0. ``module`` is also a shell function (sites define it in the login shell, and a
``module load`` must be able to set variables): it records its argv and exports the variables the
loaded modules document (``MODULE_ENV``), nothing else. Everything else in the script (``cd``,
``mkdir``, the stage-out step, ``set -u`` expansions) runs for real, so an unset variable, a
directory that does not exist, or a quoting slip fails the run.

:func:`rooted` moves every absolute path of a site (file systems, node-local storage, site
variable defaults, runtime binds, host MPI paths) under the temporary root (a runtime command
the site names by path becomes the stub of that name); paths that start
with a variable (``$MEMBERWORK/...``, ``$PSCRATCH``) follow through the variables' values.
"""

from __future__ import annotations

import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcenv.site import Site

STUBS = (
    "sbatch",
    "srun",
    "jsrun",
    "mpiexec",
    "mpirun",
    "qsub",
    "bsub",
    "module",
    "apptainer",
    "singularity",
    "podman",
    "podman-hpc",
    "shifter",
)

# Variables that `module load NAME` sets, as the sites document them (only those a script uses).
# cray-mpich-abi: CRAY_LD_LIBRARY_PATH holds the ABI-compatible libmpi.so.12 directory
# (olcf_containers_examples frontier/sample_apps/tensorflow/multi-node/submit.sbatch).
MODULE_ENV: dict[str, dict[str, str]] = {
    "cray-mpich-abi": {
        "CRAY_LD_LIBRARY_PATH": "{root}/opt/cray/pe/mpich/9.1.0/ofi/crayclang/17.0/lib-abi-mpich",
        "CRAY_MPICH_ROOTDIR": "{root}/opt/cray/pe/mpich/9.1.0",
    },
    # rocm: puts its libraries on LD_LIBRARY_PATH, which OLCF's container examples pass into the
    # container (APPTAINERENV_LD_LIBRARY_PATH="...:$CRAY_LD_LIBRARY_PATH:$LD_LIBRARY_PATH:...").
    "rocm": {"LD_LIBRARY_PATH": "{root}/opt/rocm-7.1.1/lib"},
    # spectrum-mpi (Summit): sets MPI_ROOT, which OLCF binds (--bind $MPI_ROOT:$MPI_ROOT); the
    # prefix itself is a stand-in (containers_on_summit.rst names only the variable).
    "spectrum-mpi": {"MPI_ROOT": "{root}/sw/summit/spectrum-mpi-10.4"},
    # DefApps (Summit's default set) brings spectrum-mpi: OLCF's container job uses $MPI_ROOT
    # after `module purge; module load DefApps; module unload xl` only (containers_on_summit.rst)
    "DefApps": {"MPI_ROOT": "{root}/sw/summit/spectrum-mpi-10.4"},
}

_STUB = """#!/bin/bash
{ printf '%s\\0' "${0##*/}" "$@"; printf '\\036'; } >>"$HPCENV_STUB_LOG"
"""

# Commands that only answer (not logged): the allocation's nodes, as Slurm names them.
_ANSWERS = {"scontrol": "#!/bin/sh\nprintf 'nid000001\\nnid000002\\n'\n"}


def _root_path(value: str, root: Path) -> str:
    return f"{root}{value}" if value.startswith("/") else value


def rooted(site: Site, root: Path) -> Site:
    """``site`` with every absolute path moved under ``root``."""
    fs = [f.model_copy(update={"path": _root_path(f.path, root)}) for f in site.filesystems]
    nl = site.node_local
    if nl is not None:
        nl = nl.model_copy(update={"path": _root_path(nl.path, root)})
    variables = {
        k: v.model_copy(update={"default": _root_path(v.default, root) if v.default else None})
        for k, v in site.variables.items()
    }
    mpi = site.mpi
    mpi = mpi.model_copy(
        update={
            "root": _root_path(mpi.root, root) if mpi.root else None,
            "bind_paths": [_root_path(p, root) for p in mpi.bind_paths],
            "library_path": [_root_path(p, root) for p in mpi.library_path],
            "host_libs": [_root_path(p, root) for p in mpi.host_libs],
            "preload": [_root_path(p, root) for p in mpi.preload],
            "setup": [_root_path(p, root) for p in mpi.setup],
        }
    )
    for script in mpi.setup:  # the site's own setup script: a stand-in that says it ran
        path = Path(script)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("export HPCENV_SITE_SETUP_SOURCED=1\n")
    exe = site.runtime.executable  # the site's own runtime command: the stub of that name
    runtime = site.runtime.model_copy(
        update={
            "binds": [_root_path(p, root) for p in site.runtime.binds],
            "executable": f"{root}/stub-bin/{exe.rsplit('/', 1)[-1]}" if exe else None,
        }
    )
    return site.model_copy(
        update={
            "filesystems": fs,
            "node_local": nl,
            "variables": variables,
            "mpi": mpi,
            "runtime": runtime,
        }
    )


@dataclass
class DryRun:
    returncode: int
    stdout: str
    stderr: str
    calls: list[list[str]]

    def calls_of(self, name: str) -> list[list[str]]:
        return [c for c in self.calls if c[0] == name]


class Harness:
    """A temporary root with stub commands; :meth:`run` executes one job script in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "stub-bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        for name in STUBS:
            path = self.bin / name
            path.write_text(_STUB)
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        # job.sh draws its node-local nonce from /dev/urandom with od; a fixed draw here lets
        # the exports be evaluated apart from the run and still match it
        od = self.bin / "od"
        od.write_text("#!/bin/sh\necho ' 0f 1e 2d 3c 4b 5a 69 78'\n")
        od.chmod(0o755)
        for name, text in _ANSWERS.items():
            path = self.bin / name
            path.write_text(text)
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.nodefile = root / "pbs-nodefile"  # PBS's node list: one line per node, FQDN
        self.nodefile.write_text("x4000c0s0b0n0.hostmgmt.cm.aurora.alcf.anl.gov\n")
        self.log = root / "stub-calls"
        self.home = root / "home" / "alice"
        self.home.mkdir(parents=True, exist_ok=True)
        self.bash_env = root / "bash-env.sh"
        self.bash_env.write_text(self._module_function())

    def _module_function(self) -> str:
        cases = []
        for name, env in MODULE_ENV.items():
            exports = " ".join(f'export {k}="{v.format(root=self.root)}";' for k, v in env.items())
            cases.append(f"      {name}|{name}/*) {exports} ;;")
        return "\n".join(
            [
                "module() {",
                '  { printf "%s\\0" module "$@"; printf "\\036"; } >>"$HPCENV_STUB_LOG"',
                '  [ "${1:-}" = load ] || return 0',
                "  shift",
                '  for m in "$@"; do',
                '    case "$m" in',
                *cases,
                "      *) ;;",
                "    esac",
                "  done",
                "}",
                "",
            ]
        )

    def env(self, site: Site, job_id: str = "4242") -> dict[str, str]:
        """What the batch system and the site give a job: the scheduler's job id, USER, HOME,
        and the variables a site always sets (those without a documented default)."""
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.home),
            "USER": "alice",
            "LANG": "C.UTF-8",
            "HPCENV_STUB_LOG": str(self.log),
            "BASH_ENV": str(self.bash_env),
        }
        env[
            {"slurm": "SLURM_JOB_ID", "lsf": "LSB_JOBID", "pbs": "PBS_JOBID"}.get(
                site.scheduler.kind, "SLURM_JOB_ID"
            )
        ] = job_id
        if site.scheduler.kind == "slurm":
            env["SLURM_JOB_NODELIST"] = "nid[000001-000002]"
        if site.scheduler.kind == "pbs":
            env["PBS_NODEFILE"] = str(self.nodefile)
        for name, var in site.variables.items():
            if var.default is None:  # e.g. NERSC's $PSCRATCH: the site sets it on every node
                env[name] = str(self.root / "site-set" / name.lower() / "alice")
        return env

    def provide(self, site: Site, env: dict[str, str], extra: dict[str, str]) -> None:
        """Create the directories the site provides (file systems, node-local storage roots).

        The job's own directories (workdir, staging, outputs) are not created: the script or
        ``submit`` must make them.
        """
        values = {**env, **extra}
        for path in [*(f.path for f in site.filesystems if f.purpose != "home")]:
            Path(expand(path, values)).mkdir(parents=True, exist_ok=True)
        if site.node_local:
            # The node-local root exists on a node (/mnt/bb/$USER, /tmp/$USER, /dev/shm/$USER).
            Path(expand(site.node_local.path, values)).mkdir(parents=True, exist_ok=True)

    def run(self, script: str, env: dict[str, str], cwd: Path | None = None) -> DryRun:
        if self.log.exists():
            self.log.unlink()
        path = self.root / "job.sh"
        path.write_text(script)
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", str(path)],
            env=env,
            cwd=str(cwd or self.root),
            capture_output=True,
            text=True,
            timeout=60,
        )
        calls: list[list[str]] = []
        if self.log.exists():
            for record in self.log.read_bytes().split(b"\x1e"):
                if record:
                    calls.append(record.decode().split("\0")[:-1])
        return DryRun(proc.returncode, proc.stdout, proc.stderr, calls)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand(value: str, env: dict[str, Any]) -> str:
    """``$VAR``/``${VAR}`` from ``env``; an unknown name is an error (as under ``set -u``)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            raise KeyError(f"{name} is not set (in {value!r})")
        return str(env[name])

    out = value
    for _ in range(5):  # values may name other variables ($MEMBERWORK/$HPCENV_PROJECT)
        new = _VAR.sub(one, out)
        if new == out:
            break
        out = new
    return out


def script_exports(script: str, env: dict[str, str]) -> dict[str, str]:
    """The values the script's ``export NAME=...`` lines give, evaluated as bash would."""
    names = re.findall(r"^export ([A-Za-z_][A-Za-z0-9_]*)(?:=|$)", script, re.M)
    # and what the script's `module load` lines set (a launch line may bind $MPI_ROOT)
    loaded = sorted({k for e in MODULE_ENV.values() for k in e} - set(names))
    body = "\n".join(
        ln
        for ln in script.splitlines()
        if ln.startswith(("export ", "module ")) or re.match(r"[A-Z_]+=", ln)
    )
    probe = body + "\n" + "".join(f'printf "%s\\0" "${{{n}}}"\n' for n in names)
    probe += "".join(f'printf "%s\\0" "${{{n}-}}"\n' for n in loaded)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    values = dict(zip([*names, *loaded], proc.stdout.split("\0")[:-1], strict=True))
    return {k: v for k, v in values.items() if k in names or v}
