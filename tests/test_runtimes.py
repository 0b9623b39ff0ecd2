"""Container runtimes as backends (hpcenv.jobs.runtimes): a runtime is one module.

A toy runtime, written as its own module and named in a real site file, goes through every path
a runtime serves (default image, delivery, build --dry-run's steps, doctor, host detection, the
job plan, the tuning key) with nothing else edited. And for every real site and recipe, the image
a job names is exactly what the build's delivery makes (the contract by construction), shown by
``build --dry-run`` as a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv import doctor, hostdetect
from hpcenv.delivery import deliver, plan_delivery
from hpcenv.errors import ConfigError
from hpcenv.jobs import JobSpec, default_image
from hpcenv.jobs.render import plan_job
from hpcenv.jobs.runtimes import registry
from hpcenv.site import load_site

ROOT = Path(__file__).resolve().parent.parent
HPCENV = Path(sys.executable).with_name("hpcenv")

TOY = """
from typing import ClassVar

from hpcenv.jobs.runtimes.base import (
    ContainerLaunch, ContainerRuntime, DeliveryStep, Probe, RunContext, binds, scratch,
)


class Toy(ContainerRuntime):
    kind: ClassVar[str] = "toy"
    image_kind = "sqsh"
    detect_rank = 0
    probe = Probe(("toyrun", "--version"), "install toyrun")

    def delivery(self, site, recipe, tag, fmt, engine="podman", pushed=None):
        path = f"{scratch(site)}/toy/{recipe}.img"
        return [DeliveryStep("command", path, ("toyconv", tag, path), "toy image file")]

    def image_identity(self, image):
        return "ab" * 32

    def launch(self, site, image, ctx: RunContext) -> ContainerLaunch:
        return ContainerLaunch(prefix=["toyrun", *(f"-b{p}" for p in binds(site, ctx)), image])


RUNTIME = Toy
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy runtime's module on the path and registered; a site file that names it."""
    (tmp_path / "toy_runtime.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.register("toy", "toy_runtime:RUNTIME")
    site = tmp_path / "toysite.yaml"
    site.write_text("extends: local\nname: toysite\nruntime:\n  kind: toy\n")
    yield site
    registry.unregister("toy")


def test_a_toy_runtime_goes_through_every_path(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = load_site(str(toy))
    assert site.runtime.kind == "toy"
    made = "/var/tmp/hpcenv-scratch/toy/horovod-cpu.img"
    # default image == the delivery's output
    assert default_image(site, "horovod-cpu") == made
    (step,) = plan_delivery(site, "horovod-cpu", "localhost/hpcenv/horovod-cpu:toysite", "oci")
    assert step.target == made and step.command[0] == "toyconv"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert deliver(step).detail.startswith("pending: toyconv is not on this host")
    # doctor and detection ask its probe
    host = doctor.Host(str(tmp_path))
    assert doctor.site_needs(site)["toy"].startswith("toysite runs images with toy")
    assert doctor.check_site_runtime(host, "toy").status == "missing"
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "toy.txt").write_text("toyrun 1.0\n")
    lscpu = "Architecture: x86_64\nCPU(s): 4\nThread(s) per core: 1\nCore(s) per socket: 4\n"
    (rec / "lscpu.txt").write_text(lscpu + "Socket(s): 1\n")
    (rec / "meminfo.txt").write_text("MemTotal: 16318532 kB\n")
    detected = hostdetect.detect(hostdetect.RecordedHost(rec), "x")
    assert detected.data["runtime"]["kind"] == "toy"
    # the job plan launches through it
    job = JobSpec(name="t", command=["python3", "x.py"], ranks_per_node=2)
    plan = plan_job(site, job, image=made)
    assert plan.launch is not None and plan.launch.prefix[0] == "toyrun"
    assert plan.launch.prefix[-1] == made and plan.runtime == "toy"
    # the tuning key is its image identity
    from hpcenv.jobs.measured import lookup
    from hpcenv.tuning import apply

    seen = []
    monkeypatch.setattr(apply, "tuning_path", lambda *a: toy)  # "a file exists"
    monkeypatch.setattr(apply, "in_force", lambda s, layout, img, iid: seen.append(iid))
    lookup(site, plan.placement, made)
    assert seen == ["ab" * 32]


def test_an_unknown_runtime_is_one_line(tmp_path: Path) -> None:
    site = tmp_path / "s.yaml"
    site.write_text("extends: local\nname: s\nruntime:\n  kind: dockerish\n")
    proc = subprocess.run(
        [str(HPCENV), "sites", "validate", str(site)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown container runtime 'dockerish'; known: apptainer, cscs-ce," in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    with pytest.raises(ConfigError, match="unknown container runtime"):
        registry.get_runtime("dockerish")


def test_every_builtin_runtime_is_a_module_and_its_kind() -> None:
    kinds = registry.known_kinds()
    builtin = ["apptainer", "cscs-ce", "podman", "podman-hpc", "pyxis", "shifter", "singularity"]
    assert kinds == builtin
    for kind in kinds:
        assert registry.get_runtime(kind).kind == kind


REAL_SITES = ("frontier", "perlmutter", "alps-clariden", "aurora", "summit")


@pytest.mark.parametrize("name", REAL_SITES)
def test_the_job_runs_what_the_build_delivers(name: str) -> None:
    """For every recipe the site builds: ``build --dry-run --json`` (as a process) names
    delivery steps whose last target is the image ``submit --dry-run`` runs."""
    proc = subprocess.run(
        [str(HPCENV), "build", "--site", name, "--dry-run", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    site = load_site(name)
    plans = json.loads(proc.stdout)
    assert plans
    for plan in plans:
        image = default_image(site, plan["recipe"])
        assert plan["image"] == image, plan
        assert plan["delivery"], plan


def test_alps_delivery_imports_with_enroot_into_a_striped_folder() -> None:
    site = load_site("alps-clariden")
    tag = "localhost/hpcenv/torch-gpu:alps-clariden"
    steps = plan_delivery(site, "torch-gpu", tag, "oci")
    sqsh = "$SCRATCH/hpcenv/images/torch-gpu-alps-clariden.sqsh"
    assert [s.command[0] for s in steps] == ["mkdir", "lfs", "enroot", "mv"]
    assert steps[1].command[-1] == "$SCRATCH/hpcenv/images"
    enroot = ("enroot", "import", "-x", "mount", "-o", f"{sqsh}.partial", f"podman://{tag}")
    assert steps[2].command == enroot
    assert steps[-1].target == sqsh == default_image(site, "torch-gpu")


def test_perlmutter_builds_with_podman_hpc() -> None:
    proc = subprocess.run(
        [str(HPCENV), "build", "--site", "perlmutter", "-r", "torch-gpu", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "  build: podman-hpc build " in proc.stdout
    assert "deliver: podman-hpc migrate localhost/hpcenv/torch-gpu:perlmutter" in proc.stdout
    assert "job runs: localhost/hpcenv/torch-gpu:perlmutter" in proc.stdout
