"""The Perlmutter path for real: NERSC's podman-hpc (PyPI podman-hpc 1.2.2, installed and adapted
to rootful podman on this host by scripts/podman-hpc-setup.sh, whose comments say what and why).

One image goes the way a Perlmutter user's does: ``podman-hpc build`` (a small layer over the local
image: the Open MPI + mpi4py one, no registry here), ``podman-hpc images``, ``podman-hpc migrate``
(a squashfs of the image in the squash store, SQUASH_DIR: $SCRATCH/storage at NERSC), then
``podman-hpc run`` from the squashed copy alone: the "compute node" gets an empty node-local
graph root (PODMANHPC_GRAPH_ROOT/PODMANHPC_RUN_ROOT, as a Perlmutter node's /tmp store is), so
the image can only come from the squash store, mounted by podman-hpc's fuse-overlayfs-wrap
(squashfuse + fuse-overlayfs). Last, a 2-rank job under the real Slurm:
``srun --mpi=pmi2 -n 2 podman-hpc run --rm --mpi IMAGE python mpi_identity.py``: the ``--mpi``
module (the rehearsal's modules.d/mpich.yaml) binds the site MPI (Intel MPI, /opt/site/intel-mpi)
at NERSC's /opt/udiImage/modules/mpich, the module's shared_run starts one container per node with
every rank a ``podman exec`` into it, and Slurm's PMI2 descriptor (PMI_FD) goes in through
podman-hpc's own ``--preserve-fds``. Each rank must name Intel MPI, map its libmpi.so.12 from the
bound path, run in the squashed image (its root a fuse-overlayfs mount) and get the exact allreduce.

Then the same path through hpcenv itself, as a user runs it, on the rehearsal site
``local-podman-hpc`` (site-configs/local-podman-hpc.yaml: Perlmutter's shape, each override and
why in its comments): ``hpcenv build --site local-podman-hpc --recipe horovod-cpu`` runs
``podman-hpc build`` (the local-bind image's Containerfile but for its site name: podman's layer
cache) and the delivery ``podman-hpc migrate``, which hpcenv checks (podman-hpc exits 0 when a
migrate fails); ``hpcenv submit --site local-podman-hpc -N 1 -n 2 --wait`` runs the job hpcenv
writes under the real Slurm: ``srun --mpi=pmi2 ... podman-hpc run --rm --mpi ... IMAGE``, on an
empty node store, so the ranks run the squashed image. Each rank must report the Intel MPI the
``--mpi`` module binds and an exact allreduce.

What does not run here: podman-hpc's NERSC modules for GPUs, NCCL, CVMFS, CFS and Cray MPICH bind
Perlmutter paths (/usr/lib/shifter, /dev/cxi*, /opt/cray) this host lacks, and openmpi-pmix uses
``--userns=keep-id``, which rootful podman refuses; the rehearsal installs its own mpich module.
The migrate check also has unit tests here with a stand-in podman-hpc (no root needed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from image_builds import REAL_ENV  # the real cache (layers), before any test's private one
from requirements import need_root

from hpcenv.delivery import deliver, plan_delivery
from hpcenv.errors import EnvironmentProblem
from hpcenv.site import load_site

if TYPE_CHECKING:
    from services import SlurmInfo

pytest_plugins = ["services"]
# The tests that run podman-hpc are marked slurm and podman one by one: the unit tests of the
# migrate check at the end run anywhere.
pytestmark = [pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent
HPCENV = str(Path(sys.executable).with_name("hpcenv"))
SITE = "local-podman-hpc"
SITE_TAG = "localhost/hpcenv/horovod-cpu:local-podman-hpc"  # what hpcenv builds for the site
DATA = Path(__file__).parent / "data"
SETUP = ROOT / "scripts" / "podman-hpc-setup.sh"
HOW = "`make host` (scripts/podman-hpc-setup.sh) installs it"
TAG = "localhost/hpcenv/podman-hpc-rehearsal:test"
PY = "/opt/venv/bin/python3"  # the local image's venv (mpi4py, numpy)
IN_IMAGE = "/opt/podman-hpc-rehearsal/mpi_identity.py"
SQUASH = Path("/var/tmp/podman-hpc/rehearsal-squash")  # this test's squash store (SQUASH_DIR)
SITE_MPI_IN_CONTAINER = "/opt/udiImage/modules/mpich"  # where the --mpi module binds it
PROBE = (
    "cat /etc/os-release; grep ' / ' /proc/mounts | sed 's/^/root-mount /'; "
    f"test -e {SITE_MPI_IN_CONTAINER}/lib/libmpi.so.12 && echo site-mpi bound "
    "|| echo site-mpi absent; "
    "sed -n 's/^name=/container-name /p' /run/.containerenv"
)


@pytest.fixture(scope="session")
def podman_hpc() -> str:
    """The ``podman-hpc`` command, installed (or refreshed: the script is idempotent) by
    scripts/podman-hpc-setup.sh."""
    need_root("podman-hpc runs rootful podman here and its hook mounts into containers")
    proc = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, timeout=900, env=dict(os.environ)
    )
    exe = shutil.which("podman-hpc")
    if proc.returncode != 0 or exe is None:
        pytest.fail(f"{SETUP.name} failed ({HOW}): {proc.stderr[-3000:] or proc.stdout[-3000:]}")
    return exe


def _env(**extra: str) -> dict[str, str]:
    """hpcenv's podman settings (CONTAINERS_CONF) and this test's squash store."""
    from hpcenv.engines import engine_env

    return {**engine_env(), "SQUASH_DIR": str(SQUASH), **extra}


def _run(argv: list[str], env: dict[str, str], timeout: float = 300) -> tuple[str, float]:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    took = time.monotonic() - start
    assert proc.returncode == 0, f"{argv} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr, took


@pytest.fixture(scope="module")
def node_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A "compute node's" empty podman-hpc store: the image comes only from the squash store.
    Its containers go with --rm; pytest removes the folder with its other temporary ones (no
    `podman system reset` here: that also clears what podman keeps outside the graph root)."""
    node = tmp_path_factory.mktemp("node")
    return {"PODMANHPC_GRAPH_ROOT": str(node / "storage"), "PODMANHPC_RUN_ROOT": str(node / "run")}


@pytest.fixture(scope="module")
def migrated(podman_hpc: str, local_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """TAG built with ``podman-hpc build`` and squashed with ``podman-hpc migrate``."""
    from hpcenv.engines import get_engine

    ctx = tmp_path_factory.mktemp("ctx")
    shutil.copy(DATA / "mpi_identity.py", ctx)
    (ctx / "Containerfile").write_text(
        f"FROM {local_image}\n"
        f"COPY mpi_identity.py {IN_IMAGE}\n"
        'LABEL org.hpcenv.rehearsal="podman-hpc"\n'
    )
    env = _env()
    with get_engine("podman").storage_lock():  # beside hpcenv's own builds into this storage
        out, took = _run(
            [podman_hpc, "build", "-t", TAG, "-f", str(ctx / "Containerfile"), str(ctx)], env
        )
    print(f"podman-hpc build: {took:.1f} s")
    out, _ = _run([podman_hpc, "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"], env)
    assert TAG in out, out
    image_id = _inspect_id(TAG, env)
    # Squashed copies of this tag's earlier builds (another base since): podman-hpc rmsqi.
    if (SQUASH / "overlay-images" / "images.json").exists():
        for old in json.loads((SQUASH / "overlay-images" / "images.json").read_text()):
            if old["id"] != image_id:
                _run([podman_hpc, "rmsqi", old["id"]], env)
    out, took = _run([podman_hpc, "migrate", TAG], env)
    print(f"podman-hpc migrate: {took:.1f} s")
    store = json.loads((SQUASH / "overlay-images" / "images.json").read_text())
    rec = next((r for r in store if r["id"] == image_id), None)
    assert rec is not None and TAG in rec["names"], (out, store)
    link = (SQUASH / "overlay" / rec["layer"] / "link").read_text()
    assert (SQUASH / "overlay" / "l" / f"{link}.squash").stat().st_size > 1_000_000
    return TAG


def _inspect_id(tag: str, env: dict[str, str]) -> str:
    out, _ = _run(["podman", "image", "inspect", "--format", "{{.Id}}", tag], env)
    return out.strip()


@pytest.mark.slurm
@pytest.mark.podman
def test_run_from_the_squashed_image_alone(
    podman_hpc: str, migrated: str, node_store: dict[str, str]
) -> None:
    env = _env(**node_store)
    out, took = _run([podman_hpc, "images"], env)
    assert migrated.rsplit(":", 1)[0] in out, out  # listed from the squash store (R/O)
    out, took = _run(
        [podman_hpc, "run", "--rm", migrated, "sh", "-c", PROBE],
        env,
    )
    print(f"podman-hpc run: {took:.1f} s")
    assert "ID=debian" in out and "VERSION_CODENAME=bookworm" in out, out
    assert "fuse-overlayfs" in out, out  # podman-hpc's mount program put the root together
    assert "site-mpi absent" in out, out  # without --mpi, no site MPI is bound (the control)


def _ranks(log: str) -> list[dict[str, Any]]:
    rows = [
        json.loads(ln.split(" ", 1)[1]) for ln in log.splitlines() if ln.startswith("mpi-identity ")
    ]
    return sorted(rows, key=lambda r: r["rank"])


@pytest.mark.slurm
@pytest.mark.podman
def test_two_rank_job_under_slurm_reports_the_site_mpi(
    slurm: SlurmInfo,
    site_mpi_prefix: Path,
    podman_hpc: str,
    migrated: str,
    node_store: dict[str, str],
    tmp_path: Path,
) -> None:
    env = _env(**node_store)
    env["SLURM_CONF"] = str(slurm.conf)
    rank = f"{PROBE} >&2; exec {PY} {IN_IMAGE}"
    argv = [
        "srun",
        "--mpi=pmi2",
        "--nodes=1",
        "--ntasks=2",
        "--cpus-per-task=1",
        f"--chdir={tmp_path}",
        "--time=5",
        podman_hpc,
        "run",
        "--rm",
        "--mpi",
        "-e",
        "MPI4PY_MPIABI=mpich",
        migrated,
        "bash",
        "-c",
        rank,
    ]
    out, took = _run(argv, env, timeout=300)
    print(f"srun ... podman-hpc run --mpi: {took:.1f} s")
    ranks = _ranks(out)
    assert [r["rank"] for r in ranks] == [0, 1], out
    for r in ranks:
        assert r["size"] == 2, r
        assert r["container"] == "podman", r
        assert r["library"].startswith("Intel(R) MPI Library"), r
        assert any(m.startswith(f"{SITE_MPI_IN_CONTAINER}/lib/libmpi.so.12") for m in r["maps"]), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r
    lines = out.splitlines()
    roots = [ln for ln in lines if ln.startswith("root-mount ")]
    assert len(roots) == 2 and all("fuse-overlayfs" in ln for ln in roots), out  # the squash
    assert lines.count("site-mpi bound") == 2, out
    # The module's shared_run: one container per node (podman-hpc names it uid-UID-pid-PPID,
    # PPID the ranks' slurmstepd), both ranks `podman exec`ed into it.
    names = {ln.split(" ", 1)[1] for ln in lines if ln.startswith("container-name ")}
    assert len(names) == 1 and re.fullmatch(r'"?uid-0-pid-\d+"?', names.pop()), out


# -- The same path through hpcenv, on the rehearsal site local-podman-hpc -----------------------
def _squashed_ids(tag: str, env: dict[str, str]) -> set[str]:
    fmt = "{{.Repository}}:{{.Tag}} {{.Id}} {{.ReadOnly}}"
    out, _ = _run(["podman-hpc", "images", "--format", fmt], env)
    return {r[1] for r in (ln.split() for ln in out.splitlines()) if r[0] == tag and r[2] == "true"}


@pytest.fixture(scope="module")
def hpcenv_built(podman_hpc: str) -> str:
    """``hpcenv build --site local-podman-hpc --recipe horovod-cpu`` as a process, as a user runs
    it: podman-hpc build, then the delivery podman-hpc migrate into the wrapper's default squash
    store, checked by hpcenv. The squashed copy of this tag's previous build is removed after
    (podman-hpc rmsqi): migrate only moves the tag off it."""
    env = dict(REAL_ENV)
    before = _squashed_ids(SITE_TAG, env)
    start = time.monotonic()
    proc = subprocess.run(
        [HPCENV, "build", "--site", SITE, "--recipe", "horovod-cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=3000,
    )
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-4000:]
    print(f"hpcenv build --site {SITE}: {took:.1f} s")
    assert f"deliver: podman-hpc migrate {SITE_TAG}" in proc.stdout, proc.stdout[-4000:]
    from hpcenv.paths import cache_dir  # the real cache: no private one in this module

    log = cache_dir() / "logs" / f"build-{SITE}-horovod-cpu.log"
    assert log.read_text().startswith("$ podman-hpc build --layers "), log  # not podman's
    after = _squashed_ids(SITE_TAG, env)
    assert after == {_inspect_id(SITE_TAG, env)}, (before, after)  # this build's, R/O
    for old in before - after:
        _run(["podman-hpc", "rmsqi", old], env)
    return SITE_TAG


@pytest.mark.slurm
@pytest.mark.podman
def test_a_failed_migrate_fails_hpcenvs_delivery_naming_the_image(podman_hpc: str) -> None:
    tag = "localhost/hpcenv/no-such-image:local-podman-hpc"
    proc = subprocess.run(
        [podman_hpc, "migrate", tag], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert proc.returncode == 0, proc  # upstream: "not found" is logged, the exit status is 0
    (step,) = plan_delivery(load_site(SITE), "horovod-cpu", tag, "oci")
    with pytest.raises(EnvironmentProblem, match=f"podman-hpc migrate {re.escape(tag)} exited 0"):
        deliver(step, env=_env())


@pytest.mark.slurm
@pytest.mark.podman
@pytest.mark.timeout(2400)  # a cold build of the image comes first
def test_hpcenv_submit_runs_ranks_through_podman_hpc_on_the_site_mpi(
    slurm: SlurmInfo,
    site_mpi_prefix: Path,
    hpcenv_built: str,
    node_store: dict[str, str],
    tmp_path: Path,
) -> None:
    """The job hpcenv writes for the site, submitted by ``hpcenv submit --wait`` under the real
    Slurm; its ranks see a compute node's empty podman-hpc store (PODMANHPC_GRAPH_ROOT/RUN_ROOT
    from the submitting environment, which sbatch exports), so the image comes from the squashed
    store alone."""
    wd = tmp_path / "wd"
    wd.mkdir()
    shutil.copy(DATA / "mpi_identity.py", wd)
    cache = tmp_path / "cache"  # this job's records and script
    env = {**os.environ, **node_store, "HPCENV_CACHE": str(cache)}
    env.pop("SQUASH_DIR", None)  # the wrapper's default store, where hpcenv build migrated
    out, took = _run(
        [
            HPCENV,
            "submit",
            "--site",
            SITE,
            "--recipe",
            "horovod-cpu",
            "-N",
            "1",
            "-n",
            "2",
            "--workdir",
            str(wd),
            "--wait",
            "--timeout",
            "240",
            "--",
            "python3",
            "{workdir}/mpi_identity.py",
        ],
        env,
    )
    print(f"hpcenv submit --site {SITE} --wait: {took:.1f} s")
    job = re.search(r"^submitted (\S+) ", out, re.M)
    assert job, out
    log = subprocess.run(
        [HPCENV, "logs", job.group(1)], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    script = next(cache.glob(f"jobs/*-{job.group(1)}.sh"), None)  # the script sbatch ran
    assert script is not None, sorted(str(p) for p in cache.rglob("*"))
    launch = next(ln for ln in script.read_text().splitlines() if ln.startswith("srun "))
    assert "--mpi=pmi2" in launch and "podman-hpc run --rm --mpi " in launch, launch
    assert launch.split(" python3 ")[0].endswith(hpcenv_built), launch
    # The preflight, inside the image: the --mpi module's Intel MPI replaces the image's MPICH.
    assert f"{SITE_MPI_IN_CONTAINER}/lib/libmpi.so.12" in log and "replaces the image's" in log
    ranks = _ranks(log)
    assert [r["rank"] for r in ranks] == [0, 1], out + log
    for r in ranks:
        assert r["size"] == 2 and r["container"] == "podman", r
        assert r["library"].startswith("Intel(R) MPI Library 2021.18"), r
        mpi = [m for m in r["maps"] if "libmpi" in m]
        assert mpi and all(m.startswith(f"{SITE_MPI_IN_CONTAINER}/lib/") for m in mpi), r
        assert r["allreduce"] == 3.0 and r["allreduce_exact"], r
    # The node store holds no image of its own: what ran is the squashed copy.
    listed, _ = _run(
        ["podman-hpc", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ReadOnly}}"], env
    )
    assert f"{hpcenv_built} true" in listed and f"{hpcenv_built} false" not in listed, listed


# -- The migrate check, with a stand-in podman-hpc (runs anywhere) -------------------------------
FAKE_ID = "a" * 64
OTHER_ID = "b" * 64


def _fake_podman_hpc(folder: Path, images: str) -> None:
    """A podman-hpc whose migrate exits 0 doing nothing (as upstream's does when it fails) and
    whose ``images`` prints ``images``."""
    (folder / "images.txt").write_text(images)
    tool = folder / "podman-hpc"
    tool.write_text(
        "#!/bin/sh\n"
        f'case "$1" in migrate) echo "ERROR:root:Image $2 not found" >&2 ;;\n'
        f"  images) cat {folder / 'images.txt'} ;; esac\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    ("images", "why"),
    [
        ("", "lists no read-only"),
        (f"{SITE_TAG} {FAKE_ID} false\n", "lists no read-only"),
        (f"{SITE_TAG} {FAKE_ID} false\n{SITE_TAG} {OTHER_ID} true\n", "is bbbbbbbbbbbb, not"),
        (f"localhost/hpcenv/other:x {FAKE_ID} true\n", "lists no read-only"),
    ],
    ids=["nothing", "only-the-build", "an-older-squash", "another-tag"],
)
def test_a_migrate_that_exits_0_without_squashing_is_an_error_naming_the_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, images: str, why: str
) -> None:
    _fake_podman_hpc(tmp_path, images)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    (step,) = plan_delivery(load_site("perlmutter"), "torch-gpu", SITE_TAG, "oci")
    with pytest.raises(EnvironmentProblem) as err:
        deliver(step)
    assert f"podman-hpc migrate {SITE_TAG} exited 0 but did not squash {SITE_TAG}" in str(err.value)
    assert why in str(err.value)
    assert str(err.value).endswith(f"migrate said: ERROR:root:Image {SITE_TAG} not found")


@pytest.mark.parametrize(
    "images",
    [
        f"{SITE_TAG} {FAKE_ID} false\n{SITE_TAG} {FAKE_ID} true\n",  # a login node: both stores
        f"{SITE_TAG} {FAKE_ID} true\n",  # only the squashed store is configured
    ],
    ids=["beside-the-build", "squashed-only"],
)
def test_a_migrate_that_squashed_the_build_is_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, images: str
) -> None:
    _fake_podman_hpc(tmp_path, images)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    (step,) = plan_delivery(load_site("perlmutter"), "torch-gpu", SITE_TAG, "oci")
    assert deliver(step).done
