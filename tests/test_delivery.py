"""Image delivery: each site's build ends where its job script looks (SIF path, podman-hpc
migrate, enroot import, registry push); steps this host cannot do are reported as pending, not skipped."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.delivery import DeliveryStep, deliver, plan_delivery
from hpcenv.errors import ConfigError
from hpcenv.jobs.runtimes.registry import default_image
from hpcenv.site import Site, load_site

HPCENV = Path(sys.executable).with_name("hpcenv")


def with_scratch(site: Site, path: str) -> Site:
    fs = [
        f.model_copy(update={"path": path}) if f.purpose == "scratch" else f
        for f in site.filesystems
    ]
    return site.model_copy(update={"filesystems": fs})


def test_apptainer_sites_copy_the_sif_to_the_job_path() -> None:
    for name in ("frontier", "aurora"):
        site = load_site(name)
        (step,) = plan_delivery(site, "torch-gpu", f"localhost/hpcenv/torch-gpu:{name}", "sif")
        assert step.kind == "sif-copy"
        assert step.target == default_image(site, "torch-gpu")  # the path submit runs


def test_perlmutter_migrates_and_push_comes_first() -> None:
    site = load_site("perlmutter")
    tag = "localhost/hpcenv/torch-gpu:perlmutter"
    push, migrate = plan_delivery(site, "torch-gpu", tag, "oci", "registry.nersc.gov/m1/t:1")
    assert push.command == ("podman", "push", tag, "registry.nersc.gov/m1/t:1")
    assert migrate.command == ("podman-hpc", "migrate", tag)


def test_shifter_needs_push_and_bad_refs_are_refused() -> None:
    site = load_site("perlmutter")
    shifter = site.model_copy(
        update={"runtime": site.runtime.model_copy(update={"kind": "shifter"})}
    )
    with pytest.raises(ConfigError, match="give --push"):
        plan_delivery(shifter, "torch-gpu", "t", "oci")
    for bad in ("Reg/Name", "reg/name;rm -rf /", "reg/../x", ""):
        with pytest.raises(ConfigError, match="--push"):
            plan_delivery(site, "torch-gpu", "t", "oci", bad)


def test_sif_copy_is_real_and_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROJ", "abc123")
    site = with_scratch(load_site("frontier"), str(tmp_path / "orion" / "$PROJ" / "scratch"))
    (step,) = plan_delivery(site, "torch-gpu", "t", "sif")
    sif = tmp_path / "built.sif"
    sif.write_bytes(b"SIF" * 1000)
    outcome = deliver(step, sif)
    dest = tmp_path / "orion/abc123/scratch/hpcenv/images/torch-gpu-frontier.sif"
    assert outcome.done and dest.read_bytes() == sif.read_bytes()
    assert not list(dest.parent.glob("*.partial"))


def test_sif_copy_pending_when_a_site_variable_is_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROJ", raising=False)
    (step,) = plan_delivery(load_site("frontier"), "torch-gpu", "t", "sif")
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"x")
    outcome = deliver(step, sif)
    assert not outcome.done
    assert outcome.detail.startswith("pending:") and str(sif) in outcome.detail


def test_migrate_runs_podman_hpc_or_says_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = DeliveryStep("command", "t", ("podman-hpc", "migrate", "localhost/hpcenv/x:p"))
    monkeypatch.setenv("PATH", str(tmp_path))
    pending = deliver(step)
    assert not pending.done
    assert "run: podman-hpc migrate localhost/hpcenv/x:p" in pending.detail
    # a podman-hpc on PATH is run with the tag (a recording script stands in for NERSC's tool)
    record = tmp_path / "argv"
    tool = tmp_path / "podman-hpc"
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    assert deliver(step).done
    assert record.read_text().split() == ["migrate", "localhost/hpcenv/x:p"]


def test_cli_push_bad_ref_exits_2(tmp_path: Path) -> None:
    assert HPCENV.is_file()
    proc = subprocess.run(
        [
            str(HPCENV),
            "build",
            "--site",
            "perlmutter",
            "-r",
            "torch-gpu",
            "--dry-run",
            "--push",
            "Not A Ref",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --push 'Not A Ref': not a registry reference")


def test_refusals_exit_2_as_a_process(tmp_path: Path) -> None:
    """Sourced refusals of the installed hpcenv: one line per conflict, exit 2, no traceback."""
    for site, rule in (("frontier", "horovod-rocm"), ("aurora", "horovod-xpu")):
        proc = subprocess.run(
            [str(HPCENV), "resolve", "--site", site, "--recipe", "horovod-gpu"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: conflict between horovod")
        assert f"[rule {rule}; source: " in proc.stderr and "Traceback" not in proc.stderr
    # a ppc64le site without a base image that exists: refused, not a made-up nvidia/cuda tag
    text = (Path(__file__).parents[1] / "site-configs" / "summit.yaml").read_text()
    text = text.replace("name: summit", "name: power9")
    text = text.replace("spec: spectrum-mpi@10.4", "spec: openmpi@4.1.4")
    text = text.replace("  pmi: pmix@3\n  model: site-build", "  pmi: pmix@4\n  model: hybrid")
    text = text.replace("os: centos-8", "os: ubuntu-22.04").replace(
        'python: "3.9"', 'python: "3.10"'
    )
    text = "\n".join(ln for ln in text.splitlines() if "base_image:" not in ln)
    site = tmp_path / "power9.yaml"
    site.write_text(text + "\n")
    proc = subprocess.run(
        [str(HPCENV), "resolve", "--site", str(site), "--recipe", "horovod-gpu"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: no nvidia/cuda ubuntu-22.04 image for ppc64le")


def test_account_and_site_defaults_expand_the_sif_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a login node the job's path is known from --account and the site's variables (their
    documented default where this host does not set them): the SIF lands there for real."""
    from hpcenv.delivery import delivery_env
    from hpcenv.site import SiteVariable

    monkeypatch.delenv("MEMBERWORK", raising=False)
    monkeypatch.delenv("HPCENV_PROJECT", raising=False)
    site = load_site("frontier")
    var = SiteVariable(default=f"{tmp_path}/orion/scratch/$USER", source="test")
    site = site.model_copy(update={"variables": {**site.variables, "MEMBERWORK": var}})
    monkeypatch.setenv("USER", "alice")
    (step,) = plan_delivery(site, "torch-gpu", "t", "sif")
    assert step.target == "$MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/torch-gpu-frontier.sif"
    sif = tmp_path / "built.sif"
    sif.write_bytes(b"SIF")
    assert not deliver(step, sif, delivery_env(site, None)).done  # no project: pending
    outcome = deliver(step, sif, delivery_env(site, "stf007"))
    dest = tmp_path / "orion/scratch/alice/stf007/hpcenv/images/torch-gpu-frontier.sif"
    assert outcome.done and dest.read_bytes() == b"SIF"
    for bad in ("../etc", "a/b", "-x", "a b"):
        with pytest.raises(ConfigError, match="--account"):
            delivery_env(site, bad)


def test_cli_build_bad_account_exits_2(tmp_path: Path) -> None:
    for bad, message in (("PROJ123", "is a placeholder"), ("../x", "a project id")):
        proc = subprocess.run(
            [
                str(HPCENV),
                "build",
                "--site",
                "frontier",
                "-r",
                "torch-gpu",
                "--dry-run",
                "-A",
                bad,
                "--out",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_oci_only_build_for_a_sif_site_says_the_job_needs_a_sif() -> None:
    (step,) = plan_delivery(load_site("aurora"), "torch-gpu", "t", "oci")
    outcome = deliver(step)
    assert not outcome.done
    assert outcome.detail == (
        "none: the site's jobs run a SIF at "
        "/lus/flare/projects/$HPCENV_PROJECT/$USER/hpcenv/images/torch-gpu-aurora.sif; "
        "build with --format sif"
    )
