"""Which environment variables each layer of a job may set (issue 20: files hpcenv reads must
not make a job or a command run code).

A job's environment is built in layers (:data:`hpcenv.jobs.plan.EnvSource`), and each layer comes
from somewhere with its own trust. The rule per layer, checked where its data enters hpcenv:

===================  ===============================  ========================================
layer                where it comes from              what it may set
===================  ===============================  ========================================
placement            hpcenv's own code                anything (checked by review and tests)
site-mpi             the site file (``mpi.env``)      anything but :data:`STARTUP` names,
site-environment     the site file (``tuning``)       unless ``provenance.verified`` documents
site-cache           the site file (``caches``)       that exact field with its source
                                                      (``mpi.env.LD_PRELOAD: "<where read>"``);
                                                      checked when the site file is read
measured-tuning      ``hpcenv tune --measure`` files  exactly the names the tuner can
                                                      write (an allow-list the caller passes:
                                                      :func:`hpcenv.tuning.model.measured_names`);
                                                      checked when the file is read and again in
                                                      :func:`hpcenv.tuning.apply.environment`
rendezvous           hpcenv's own code (from the      ``MASTER_ADDR``/``MASTER_PORT`` only
                     site's typed ``rendezvous``)     (:mod:`hpcenv.jobs.rendezvous`)
job                  the user's own job               anything but :data:`SHELL_STARTUP`
user                 ``submit --env`` (the user's     anything but :data:`STARTUP` names and
                     shell, ``hpcenv.yaml``)          the names the launch sets (:data:`LAUNCH`)
recipe               a recipe's ``user.env`` (image)  anything but :data:`STARTUP` names,
                                                      the names the launch sets (:data:`LAUNCH`,
                                                      :data:`LAUNCH_PREFIXES`) and the matched
                                                      stack's (:data:`STACK_PREFIXES`); checked
                                                      when the recipe is read
runtime, host        hpcenv's own code                anything
record               a job record (``status`` ...)    only the scheduler clients' ``conf_env``
===================  ===============================  ========================================

The user's own job may set loader and interpreter variables (``LD_LIBRARY_PATH``,
``LD_PRELOAD``, ``PYTHONPATH``): a workload needs them the way ``sbatch --export`` passes them,
and they run nothing the user could not run in the command itself. It may not set the
:data:`SHELL_STARTUP` names: those change how hpcenv's own step scripts (stage-in verification,
stage-out, the per-rank wrapper) run in bash, and no workload needs them.

A recipe's ``user.env`` goes into the image (Dockerfile ``ENV``, Singularity ``%environment``), and
on Apptainer ``%environment`` is sourced after the host's variables are passed in: an image value
would replace, for every job, the rendezvous, the rank, the launcher's and the MPI/NCCL/Horovod
settings that the site file, the placement and measured tuning chose (issue 40). So the recipe
layer refuses what the user layer refuses and the matched stack's namespaces besides; a job that
needs one of those sets it with ``submit --env`` (visible in the plan), where the user layer
allows it.

Sites set none of the :data:`STARTUP` names today (``site-configs/*.yaml``, 2026-11-24): the bind
model's ``LD_LIBRARY_PATH``/``LD_PRELOAD`` come from the typed ``mpi.library_path`` and
``mpi.preload`` fields through the runtime layer, not from ``mpi.env``. A site that must set one
documents it in ``provenance.verified`` with its source, as every other verified fact.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Literal

from hpcenv.errors import ConfigError

Layer = Literal[
    "placement",
    "site-mpi",
    "site-environment",
    "site-cache",
    "measured-tuning",
    "rendezvous",
    "job",
    "user",
    "recipe",
    "runtime",
    "host",
    "record",
]

# Names that change how bash or sh starts or reads hpcenv's step scripts (bash(1): INVOCATION,
# Shell Variables; POSIX sh: ENV).
SHELL_STARTUP: dict[str, str] = {
    "BASH_ENV": "bash sources this file before every non-interactive script",
    "ENV": "sh (and bash --posix) sources this file at start",
    "SHELLOPTS": "bash turns these options on at start (xtrace with PS4 runs code)",
    "BASHOPTS": "bash turns these shopt options on at start (extdebug runs traps)",
    "PS4": "bash expands it, command substitutions included, before each traced command",
    "PROMPT_COMMAND": "bash runs it before each prompt",
    "IFS": "changes how every unquoted expansion in the step scripts splits",
    "CDPATH": "changes where cd goes in the step scripts",
    "GLOBIGNORE": "changes what the step scripts' globs match",
    "BASH_XTRACEFD": "bash writes its trace to this file descriptor",
    "BASH_LOADABLES_PATH": "bash's enable -f loads builtins from here",
    "INPUTRC": "readline reads this file at start",
}

# Names that change which program or library runs, or load code into an interpreter (ld.so(8),
# python(1), perlrun(1), ruby(1), node(1), lua(1), Lmod/Environment Modules).
LOADER: dict[str, str] = {
    "LD_PRELOAD": "ld.so loads these libraries into every dynamically linked program",
    "LD_AUDIT": "ld.so loads these audit libraries into every program",
    "LD_LIBRARY_PATH": "ld.so looks for libraries here first (a library there replaces the "
    "system's)",
    "GCONV_PATH": "glibc loads iconv modules from here",
    "PATH": "which program runs for every command name (srun, apptainer, bash)",
    "PYTHONSTARTUP": "python runs this file at start (interactive)",
    "PYTHONPATH": "python imports modules from here first",
    "PYTHONHOME": "python's standard library (site.py runs at start) comes from here",
    "PYTHONINSPECT": "python enters interactive mode after the script",
    "PYTHONBREAKPOINT": "python calls this on breakpoint()",
    "PERL5OPT": "perl takes these options (-M loads modules) at start",
    "PERL5LIB": "perl loads modules from here first",
    "PERLLIB": "perl loads modules from here first",
    "PERL5DB": "perl runs this code under -d",
    "RUBYOPT": "ruby takes these options (-r loads code) at start",
    "RUBYLIB": "ruby loads code from here first",
    "NODE_OPTIONS": "node takes these options (--require loads code) at start",
    "NODE_PATH": "node loads modules from here",
    "LUA_INIT": "lua (and Lmod's module command) runs this at start",
    "LUA_PATH": "lua loads modules from here",
    "LUA_CPATH": "lua loads C modules from here",
    "TCLLIBPATH": "Tcl (Environment Modules) loads packages from here",
    "MODULEPATH": "module load reads modulefiles (code) from here",
}

STARTUP: dict[str, str] = SHELL_STARTUP | LOADER

# Names hpcenv's launch sets per job or per rank (hpcenv.jobs.rendezvous, the placement's GPU
# binding): a value from ``--env`` would give every rank the same rank, or every rank all GPUs.
LAUNCH: dict[str, str] = {
    **dict.fromkeys(
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
        "hpcenv sets it per rank from the launcher's own variables (rank-env.sh)",
    ),
    **dict.fromkeys(
        (
            "NODE_RANK",
            "GROUP_RANK",
            "GROUP_WORLD_SIZE",
            "ROLE_RANK",
            "ROLE_WORLD_SIZE",
            "ROLE_NAME",
        ),
        "torchrun sets it per node and rank (torch.distributed.run, 'Environment variables')",
    ),
    **dict.fromkeys(
        ("MASTER_ADDR", "MASTER_PORT"),
        "hpcenv sets the rendezvous from the allocation (the site's rendezvous)",
    ),
    **dict.fromkeys(
        (
            "CUDA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
            "ZE_AFFINITY_MASK",
        ),
        "the placement binds GPUs per rank (give --gpus-per-task or --gpus-per-node)",
    ),
}
# Namespaces of the scheduler, launcher, process manager and runtime, and hpcenv's own.
LAUNCH_PREFIXES: tuple[str, ...] = (
    "HPCENV_",
    "SLURM_",
    "SBATCH_",
    "SRUN_",
    "PMI_",
    "PMIX_",
    "OMPI_COMM_WORLD_",
    "PALS_",
    "PBS_",
    "LSB_",
    "LSF_",
    "JSM_",
    "APPTAINER_",
    "SINGULARITY_",
    "ENROOT_",
    "PYXIS_",
    "TORCHELASTIC_",
)

# The matched stack's namespaces: the libraries whose settings the site file (``mpi.env``,
# ``tuning``), the placement (threads, pinning, oneCCL workers) and ``tune --measure`` choose,
# and whose plugin and component paths load code (NCCL_NET_PLUGIN, FI_PROVIDER_PATH,
# OMPI_MCA_mca_base_component_path). An image value would replace them for every job.
STACK_PREFIXES: dict[str, str] = {
    "OMPI_": "Open MPI's parameters (OMPI_MCA_*): the site file and measured tuning set them",
    "PRTE_": "Open MPI's launcher (PRRTE) parameters: the site file sets them",
    "I_MPI_": "Intel MPI's settings: the site file, the placement's pinning and tuning set them",
    "MPICH_": "MPICH's settings: the site file and measured tuning set them",
    "MPIR_CVAR_": "MPICH's algorithm variables: measured tuning sets them",
    "FI_": "libfabric's provider and its settings: the site's fabric decides them",
    "UCX_": "UCX's transports: the site file and measured tuning set them",
    "NCCL_": "NCCL's network plugin, sockets and algorithms: the site and measured tuning set them",
    "HOROVOD_": "Horovod's knobs: measured tuning and the launch set them",
    "CCL_": "oneCCL's transport and workers: the site file and the placement set them",
    "GLOO_": "Gloo's network interface: the site's rendezvous decides it",
    "OMP_": "OpenMP threads per rank: the placement sets them",
    "KMP_": "the OpenMP runtime's pinning: the placement sets it",
}

# Every LD_ name is the loader's (LD_DEBUG_OUTPUT writes files, LD_PROFILE, LD_BIND_NOW ...).
_STARTUP_PREFIXES = ("LD_",)

# Apptainer and Singularity set NAME inside the container from APPTAINERENV_NAME.
_INNER = ("APPTAINERENV_", "SINGULARITYENV_")


# A secret's name (issue 37: *_TOKEN, *_KEY): ``--env NAME=VALUE`` would write its value into
# the job script and the plan, so a secret is passed by name only (``--env NAME``).
SECRET_SUFFIXES: tuple[str, ...] = ("TOKEN", "_KEY", "SECRET", "PASSWORD", "PASSWD")


def is_secret(name: str) -> bool:
    upper = inner_name(name).upper()
    return upper == "KEY" or upper.endswith(SECRET_SUFFIXES)


class EnvNotAllowed(ConfigError):
    """A layer sets a variable it may not set (never silently dropped: the job would differ)."""


def inner_name(name: str) -> str:
    """The name a container sees: ``APPTAINERENV_LD_PRELOAD`` sets ``LD_PRELOAD`` inside."""
    for prefix in _INNER:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def startup_reason(name: str) -> str | None:
    """Why ``name`` changes how a shell, the loader or an interpreter starts; None if not."""
    inner = inner_name(name)
    if inner in STARTUP:
        return STARTUP[inner]
    if inner.startswith(_STARTUP_PREFIXES):
        return "a dynamic loader variable (ld.so(8))"
    return None


def launch_reason(name: str) -> str | None:
    """Why the launch owns ``name`` (:data:`LAUNCH`, :data:`LAUNCH_PREFIXES`); None if not."""
    inner = inner_name(name)
    if inner in LAUNCH:
        return LAUNCH[inner]
    if inner.startswith(LAUNCH_PREFIXES):
        return "the scheduler, launcher, runtime or hpcenv sets these names itself"
    return None


def stack_reason(name: str) -> str | None:
    """Why the matched stack's settings own ``name`` (:data:`STACK_PREFIXES`); None if not."""
    inner = inner_name(name)
    for prefix, why in STACK_PREFIXES.items():
        if inner.startswith(prefix):
            return why
    return None


def refused(
    name: str, layer: Layer, documented: Container[str] = (), allowed: Container[str] = ()
) -> str | None:
    """Why ``layer`` may not set ``name`` (None: it may).

    ``documented``: names the site file documents with a source (site layers only);
    ``allowed``: the exact names a record may carry (the schedulers' ``conf_env``), or a
    measured tuning file (what ``tune --measure`` writes; none given: none allowed).
    """
    if layer in ("placement", "runtime", "host"):
        return None
    if layer in ("site-mpi", "site-environment", "site-cache"):
        why = startup_reason(name)
        if why is None or name in documented:
            return None
        field = {"site-mpi": "mpi.env", "site-cache": "caches"}.get(layer, "tuning")
        return (
            f"{why}; a site sets it only with its source in provenance.verified['{field}.{name}']"
        )
    if layer == "job":
        inner = inner_name(name)
        return f"{SHELL_STARTUP[inner]}" if inner in SHELL_STARTUP else None
    if layer == "user":
        why = startup_reason(name)
        if why is not None:
            return f"{why}; it would change how the job starts, not what it runs"
        return launch_reason(name)
    if layer == "recipe":
        why = startup_reason(name)
        if why is not None:
            return f"{why}; the image keeps hpcenv's own (set it in the job instead)"
        if inner_name(name).startswith("HPCENV_"):
            return "hpcenv sets HPCENV_ variables itself"
        why = launch_reason(name)
        if why is not None:
            return f"{why}; an image's value would replace the job's"
        why = stack_reason(name)
        if why is not None:
            return f"{why}; an image's value would replace them (set it in a job: submit --env)"
        return None
    if layer == "measured-tuning":
        why = startup_reason(name)
        if why is not None:
            return why
        if name not in allowed:
            return "not a variable hpcenv tune --measure writes (the list in collectives.yaml)"
        return None
    if layer == "record":
        return None if name in allowed else "a job record may carry only the scheduler's conf_env"
    return f"unknown layer {layer!r}"


def check(
    values: Mapping[str, str],
    layer: Layer,
    where: str,
    *,
    documented: Container[str] = (),
    allowed: Container[str] = (),
) -> None:
    """Refuse the first name ``layer`` may not set, in one line naming ``where`` and the name."""
    for name in values:
        why = refused(name, layer, documented, allowed)
        if why is not None:
            raise EnvNotAllowed(f"{where}: {layer} may not set {name}: {why}")
