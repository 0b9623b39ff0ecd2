"""Output conventions of the installed ``hpcenv``: one artifact on stdout (render --format),
did-you-mean for sites, recipes, components and site-file keys, --version."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HPCENV = Path(sys.executable).with_name("hpcenv")


def hpcenv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.mark.parametrize(
    ("fmt", "start"),
    [
        ("docker", "# syntax"),
        ("singularity", "Bootstrap: docker"),
        ("job", "#!/bin/bash"),
        ("lock", "{"),
    ],
)
def test_render_format_prints_one_artifact_and_writes_nothing(
    tmp_path: Path, fmt: str, start: str
) -> None:
    proc = hpcenv(
        "render", "--site", "perlmutter", "--recipe", "horovod-gpu", "--format", fmt, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().startswith(start) or start in proc.stdout.splitlines()[0], (
        proc.stdout[:200]
    )
    assert list(tmp_path.iterdir()) == []
    notes = [ln for ln in proc.stderr.splitlines() if not ln.startswith("note: this ")]
    assert notes == [] and (fmt in ("docker", "singularity")) == bool(proc.stderr)
    if fmt == "lock":
        assert json.loads(proc.stdout)["site"] == "perlmutter"


def test_render_format_matches_the_written_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert hpcenv("render", "-s", "local", "-r", "horovod-cpu", "--out", str(out)).returncode == 0
    for fmt, name in (("docker", "Dockerfile"), ("singularity", "Singularity.def")):
        proc = hpcenv("render", "-s", "local", "-r", "horovod-cpu", "-f", fmt)
        assert proc.stdout == (out / name).read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["render", "-s", "frontier", "-r", "horovod-gpu", "-f", "dockr"],
            "error: --format 'dockr' (did you mean 'docker'?): one of docker, singularity, job, lock",
        ),
        (
            ["resolve", "--site", "frontir", "--recipe", "horovod-gpu"],
            "error: unknown site 'frontir' (did you mean 'frontier'?); known:",
        ),
        (
            ["resolve", "--site", "frontier", "--recipe", "horovod-gpus"],
            "error: unknown recipe 'horovod-gpus' (did you mean 'horovod-gpu'?); known:",
        ),
        (
            ["resolve", "--site", "frontier", "--recipe", "horovod-gpu", "--set", "troch=2.1.0"],
            "error: --set troch: unknown component (did you mean 'torch'?); known:",
        ),
        (
            ["sites", "fields", "mpi.pim"],
            "error: no site field 'mpi.pim' (did you mean 'mpi.pmi'?)",
        ),
    ],
)
def test_did_you_mean(args: list[str], message: str) -> None:
    proc = hpcenv(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr


def test_site_file_key_did_you_mean(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnode:\n  socket: 1\nschedular: {}\n")
    proc = hpcenv("sites", "validate", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:3: field 'node.socket': unknown field (did you mean 'sockets'?)" in proc.stderr
    assert f"{bad}:4: field 'schedular': unknown field (did you mean 'scheduler'?)" in proc.stderr


def _smoke_env(tmp_path: Path, path: str) -> dict[str, str]:
    import os

    return {**os.environ, "PATH": path, "HPCENV_CACHE": str(tmp_path / "cache")}


def test_smoke_checks_the_image_before_staging_data(tmp_path: Path) -> None:
    """Without podman the run stops before MNIST is fetched or staged."""
    env = _smoke_env(tmp_path, str(tmp_path))
    proc = subprocess.run(
        [str(HPCENV), "smoke", "--site", "local"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "podman" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cache" / "data").exists()


@pytest.mark.podman
@pytest.mark.alongside
def test_smoke_missing_image_names_the_build_command(tmp_path: Path) -> None:
    import os

    env = _smoke_env(tmp_path, os.environ["PATH"])
    # a real site whose image was never built here (an unknown site is refused before this)
    proc = subprocess.run(
        [str(HPCENV), "smoke", "--site", "generic-slurm", "--recipe", "horovod-cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "error: image localhost/hpcenv/horovod-cpu:generic-slurm does not exist in podman; "
        "hpcenv build --site generic-slurm --recipe horovod-cpu first"
    )
    assert not (tmp_path / "cache" / "data").exists()


def test_counts_and_choices_are_errors_in_words(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_text(
        "name: x\ndescription: y\narch: sparc\nnode: {sockets: 0, cores_per_socket: two, memory_gb: 1}\n"
    )
    proc = hpcenv("sites", "validate", str(bad))
    assert proc.returncode == 2
    assert (
        f"{bad}:3: field 'arch': must be one of 'x86_64', 'ppc64le' or 'aarch64' (got 'sparc')"
        in proc.stderr
    )
    assert f"{bad}:4: field 'node.sockets': must be at least 1 (got 0)" in proc.stderr
    assert (
        f"{bad}:4: field 'node.cores_per_socket': must be a whole number (got 'two')" in proc.stderr
    )
    assert f"{bad}:1: field 'mpi': is required" in proc.stderr
    assert "should" not in proc.stderr and "pattern" not in proc.stderr


def test_node_count_error_in_words() -> None:
    proc = hpcenv(
        "submit",
        "--site",
        "frontier",
        "-r",
        "torch-gpu",
        "--nodes",
        "0",
        "-A",
        "CSC1",
        "--",
        "true",
    )
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: invalid job: field 'nodes': must be at least 1 (got 0)",
    )


def test_json_on_render_and_sites_validate(tmp_path: Path) -> None:
    proc = hpcenv(
        "render", "-s", "local", "-r", "horovod-cpu", "--out", str(tmp_path / "o"), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["site"] == "local" and str(tmp_path / "o" / "Dockerfile") in doc["files"]
    site = tmp_path / "s.yaml"
    site.write_text("extends: frontier\nname: s\ndescription: d\nscheduler:\n  account: PROJ123\n")
    proc = hpcenv("sites", "validate", "--json", str(site))
    assert proc.returncode == 0 and proc.stderr == ""
    (entry,) = json.loads(proc.stdout)
    assert entry["valid"] and set(entry["placeholders"]) == {"scheduler.account"}


def test_every_data_command_offers_json() -> None:
    for args in (
        ["sites", "list"],
        ["sites", "show"],
        ["sites", "validate"],
        ["sites", "fields"],
        ["sites", "init"],
        ["recipes"],
        ["resolve"],
        ["render"],
        ["build"],
        ["doctor"],
        ["data", "mnist"],
        ["smoke"],
        ["bench"],
        ["submit"],
        ["status"],
        ["tune"],
    ):
        proc = hpcenv(*args, "--help")
        assert "--json" in proc.stdout, args


def test_missing_scheduler_command_says_where_to_submit(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "PATH": "/usr/bin:/bin", "HPCENV_CACHE": str(tmp_path / "c")}
    proc = subprocess.run(
        [
            str(HPCENV),
            "submit",
            "--site",
            "summit",
            "-r",
            "horovod-gpu",
            "-A",
            "CSC1",
            "--workdir",
            str(tmp_path),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    retired, error = proc.stderr.strip().split("\n")  # Summit's retirement, then the error
    assert retired.startswith("warning: site summit was retired on 2024-11-15;")
    assert error == (
        "error: bsub is not on this host: summit takes jobs through lsf; submit from a login node "
        "of summit (summit.olcf.ornl.gov) or over SSH with --transport ssh --ssh-host LOGIN_NODE"
    )
