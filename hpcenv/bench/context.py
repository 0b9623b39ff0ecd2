"""What every benchmark section shares: configuration, where to run, launch lines, echo."""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcenv.shells import Container, Host, Result

NP = 2
MiB = 1 << 20
IMAGE_CHECKS = "/opt/hpcenv/checks"
IMAGE_BENCH = "/opt/hpcenv/bench"  # hpcenv/bench/scripts, bind-mounted read-only
IMAGE_WORK = "/opt/hpcenv/bench-work"  # <out>/_work, bind-mounted read-only (rules files)
IMAGE_MNIST = "/data/mnist"
HOST_CHECKS = Path(__file__).resolve().parent.parent / "checks"
HOST_BENCH = Path(__file__).resolve().parent / "scripts"

NAIVE_MPIRUN = f"mpirun -np {NP} --bind-to none"
"""A naive launch: no binding, no thread settings, Open MPI's own collective decisions."""


@dataclass
class BenchConfig:
    site: str = "local"
    out: Path = Path("results/bench")
    quick: bool = False
    image: str | None = None
    sections: tuple[str, ...] = ()
    build_recipe: str = "daal4py"


@dataclass
class BenchContext:
    cfg: BenchConfig
    image: str
    echo: Callable[[str], None]
    host: Host = field(default_factory=Host)
    container: Container | None = None
    site: Any = None  # hpcenv.site.Site
    tuning: Any = None  # hpcenv.jobs.placement.Placement
    measured: Any = None  # hpcenv.tuning.model.MeasuredTuning in force for this image, if any
    shared: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    # -- places ----------------------------------------------------------------------------
    @property
    def out(self) -> Path:
        return self.cfg.out

    @property
    def work(self) -> Path:
        """Scratch under the output folder (mounted into the container read-only)."""
        path = self.cfg.out / "_work"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def quick(self) -> bool:
        return self.cfg.quick

    def ctr(self) -> Container:
        if self.container is None:
            raise RuntimeError("the image container is not running")
        return self.container

    # -- launch lines ----------------------------------------------------------------------
    @property
    def hpcenv_mpirun(self) -> str:
        """``mpirun`` with hpcenv's launch tuning for NP ranks on one node of the site."""
        from hpcenv.jobs.launchers import Mpirun

        return " ".join(map(shlex.quote, Mpirun().command(self.site, self.tuning)))

    @property
    def launch_env(self) -> dict[str, str]:
        """hpcenv's launch environment without measured tuning (:mod:`hpcenv.jobs.launchenv`)."""
        from hpcenv.jobs.launchenv import launch_env

        return launch_env(self.site, self.tuning)

    @property
    def hpcenv_env(self) -> dict[str, str]:
        """The environment hpcenv's default launch sets: :attr:`launch_env` plus the measured
        tuning in force (its rules file is in the bench's work folder, mounted at IMAGE_WORK)."""
        if self.measured is None:
            return self.launch_env
        from hpcenv.jobs.launchenv import launch_env
        from hpcenv.tuning.apply import RULES_NAME, environment

        measured = environment(self.measured, f"{IMAGE_WORK}/{RULES_NAME}")
        return launch_env(self.site, self.tuning, measured)

    def image_script(self, name: str) -> str:
        folder = IMAGE_BENCH if (HOST_BENCH / name).is_file() else IMAGE_CHECKS
        return f"{folder}/{name}"

    def host_script(self, name: str) -> str:
        folder = HOST_BENCH if (HOST_BENCH / name).is_file() else HOST_CHECKS
        return str(folder / name)

    # -- running ---------------------------------------------------------------------------
    def in_image(
        self,
        launcher: str,
        script: str,
        args: str = "",
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
    ) -> Result:
        python = "" if launcher.startswith("torchrun") else "python3 "  # torchrun runs python
        program = f"{python}{self.image_script(script)} {args}".strip()
        if launcher.startswith("horovodrun") and args:
            # horovodrun's argparse reads the program's options as its own abbreviations
            # (``--min`` -> "ambiguous option: --min-np, --min-num-proc"): pass one argument.
            program = f"bash -c {shlex.quote(program)}"
        return self.ctr().run(f"{launcher} {program}".strip(), env, timeout)

    def on_host(
        self,
        launcher: str,
        script: str,
        args: str = "",
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
    ) -> Result:
        py = shlex.quote(sys.executable)
        line = f"{launcher} {py} {shlex.quote(self.host_script(script))} {args}".strip()
        return self.host.run(line.replace("  ", " "), env, timeout)

    def say(self, section: str, text: str) -> None:
        self.echo(f"[{section}] {text}")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
