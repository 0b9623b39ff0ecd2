"""Your own cluster: ``sites init --from-host`` (this machine and recorded real-site outputs),
``extends:`` with per-value origins, and placeholders flagged by ``sites validate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv import hostdetect as fromhost
from hpcenv.errors import ConfigError
from hpcenv.site import load_site, load_site_file, placeholders

DATA = Path(__file__).parent / "data" / "hosts"
HPCENV = Path(sys.executable).with_name("hpcenv")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HPCENV_SITE"}
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def _get(data: dict, dotted: str):
    cur = data
    for part in dotted.split("."):
        cur = cur[part]
    return cur


SHARED = (
    "arch",
    "node.sockets",
    "node.cores_per_socket",
    "node.threads_per_core",
    "node.memory_gb",
    "node.gpus",
    "gpu.vendor",
    "mpi.spec",
    "mpi.pmi",
    "mpi.model",
    "mpi.fabric",
    "scheduler.kind",
    "scheduler.launcher",
    "scheduler.mpi_plugin",
    "runtime.kind",
    "node_local.kind",
    "node_local.path",
)


def test_recorded_frontier_matches_the_builtin_site(tmp_path: Path) -> None:
    detected = fromhost.site_data(fromhost.detect(fromhost.RecordedHost(DATA / "frontier"), "f"))
    out = fromhost.write_site(detected, tmp_path / "f.yaml", validate=load_site_file)
    mine = load_site_file(out).model_dump()
    builtin = load_site("frontier").model_dump()
    differ = {
        k: (_get(mine, k), _get(builtin, k)) for k in SHARED if _get(mine, k) != _get(builtin, k)
    }
    assert differ == {}
    assert {"lustre"} <= {fs["kind"] for fs in mine["filesystems"]}
    assert mine["runtime"]["kind"] == "apptainer" and mine["node"]["gpu_model"] == "MI250X"
    prov = detected["provenance"]
    assert prov["verified"]["node.gpus"].startswith("`rocm-smi --showproductname`")
    assert "mpi.root" in prov["assumed"] and "node.memory_gb" in prov["assumed"]


PERLMUTTER_SHARED = (
    "arch",
    "node.sockets",
    "node.cores_per_socket",
    "node.threads_per_core",
    "node.memory_gb",
    "node.gpus",
    "gpu.vendor",
    "gpu.driver",
    "scheduler.kind",
    "scheduler.launcher",
    "runtime.kind",
    "node_local.kind",
    "node_local.path",
)


def test_recorded_perlmutter_matches_the_builtin_where_documented(tmp_path: Path) -> None:
    detected = fromhost.site_data(fromhost.detect(fromhost.RecordedHost(DATA / "perlmutter"), "p"))
    out = fromhost.write_site(detected, tmp_path / "p.yaml", validate=load_site_file)
    mine, builtin = load_site_file(out), load_site("perlmutter")
    a, b = mine.model_dump(), builtin.model_dump()
    assert {
        k: (_get(a, k), _get(b, k)) for k in PERLMUTTER_SHARED if _get(a, k) != _get(b, k)
    } == {}
    kinds = {fs.path: (fs.kind, fs.purpose) for fs in mine.filesystems}
    assert kinds == {"/pscratch": ("lustre", "scratch"), "/global/cfs": ("gpfs", "project")}
    assert "mpi.spec" in placeholders(mine)  # NERSC's pages do not say which Cray MPICH


def test_this_machine_validates_renders_and_matches_local(tmp_path: Path) -> None:
    proc = cli("sites", "init", "--from-host", "here", "-o", str(tmp_path / "here.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {tmp_path / 'here.yaml'} (valid)"
    here = load_site_file(tmp_path / "here.yaml").model_dump()
    local = load_site("local").model_dump()
    for key in (
        "arch",
        "node.sockets",
        "node.cores_per_socket",
        "node.threads_per_core",
        "node.memory_gb",
        "node.gpus",
        "gpu.vendor",
        "mpi.spec",
        "mpi.model",
    ):
        assert _get(here, key) == _get(local, key), key
    # podman-hpc is tried before podman (on Perlmutter both are there, and jobs use podman-hpc);
    # this machine's set-up installs NERSC's podman-hpc for the Perlmutter rehearsal.
    import shutil

    expected = "podman-hpc" if shutil.which("podman-hpc") else _get(local, "runtime.kind")
    assert _get(here, "runtime.kind") == expected
    proc = cli(
        "render",
        "--site",
        str(tmp_path / "here.yaml"),
        "--recipe",
        "horovod-cpu",
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "openmpi" in (tmp_path / "r" / "Dockerfile").read_text().lower()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
            ("openmpi", "4.1.4"),
        ),
        (
            "HYDRA build details:\n    Version:                                 4.0.2\n",
            ("mpich", "4.0.2"),
        ),
        (
            "MPICH Version:    \t3.4.3\nMPICH Release date:\tThu Dec 16 11:20:57 CST 2021\n",
            ("mpich", "3.4.3"),
        ),
        (
            "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n",
            ("intel-mpi", "2021.10"),
        ),
    ],
)
def test_mpi_version_parsers(text: str, expected: tuple[str, str]) -> None:
    assert fromhost.parse_mpi_version(text) == expected


def test_other_parsers() -> None:
    assert fromhost.parse_nvidia_smi("NVIDIA A100-SXM4-40GB, 535.104.05\n" * 4) == (
        4,
        "NVIDIA A100-SXM4-40GB",
        "535.104.05",
    )
    xpu = "| 0 | Device Name: Intel(R) Data Center GPU Max 1550 |\n| 1 | Device Name: Intel(R) Data Center GPU Max 1550 |\n"
    assert fromhost.parse_xpu_smi(xpu) == (2, "Intel(R) Data Center GPU Max 1550")
    srun = "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: pmix_v4\n"
    assert fromhost.parse_srun_mpi_list(srun) == (["none", "cray_shasta", "pmi2", "pmix"], 4)
    assert fromhost.parse_modules("/opt/mf:\nrocm/5.7.1\nrocm/6.2.4(default)\ncuda/12.4\n") == {
        "rocm": ["6.2.4", "5.7.1"],
        "cuda": ["12.4"],
    }
    assert fromhost.parse_meminfo_gb("MemTotal:       24684084 kB\n")[0] == 24
    assert fromhost.parse_df("/dev/md0 3750000000 1 2 1% /mnt/bb\n") == [("/mnt/bb", 3840)]


class FakeHost:
    name = "a fake host"

    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    def run(self, key: str) -> tuple[int, str]:
        return (0, self.outputs[key]) if key in self.outputs else (127, "")


def test_enforced_accounts_become_a_placeholder_and_pbs_is_detected(tmp_path: Path) -> None:
    base = {
        "lscpu": (DATA / "frontier" / "lscpu.txt").read_text(),
        "meminfo": "MemTotal: 263000000 kB\n",
        "mpirun": "mpirun (Open MPI) 5.0.3\n",
    }
    slurm = {
        **base,
        "scontrol": "AccountingStorageEnforce = associations,limits\nMpiDefault = none\n",
        "srun-mpi": "MPI plugin types are...\n\tpmix\nspecific pmix plugin versions available: pmix_v5\n",
    }
    d = fromhost.detect(FakeHost(slurm), "s")
    assert d.data["scheduler"] == {
        "kind": "slurm",
        "launcher": "srun",
        "mpi_plugin": "pmix",
        "account": "PROJ123",
    }
    assert d.data["mpi"]["pmi"] == "pmix@5" and "scheduler.account" in d.placeholder
    out = fromhost.write_site(fromhost.site_data(d), tmp_path / "s.yaml", validate=load_site_file)
    assert set(placeholders(load_site_file(out))) >= {"scheduler.account", "runtime.kind"}
    pbs = fromhost.detect(
        FakeHost({**base, "qstat": "Server  Max Tot Que Run\naurora-pbs 0 1 0 1\n"}), "p"
    )
    assert pbs.data["scheduler"]["kind"] == "pbs" and pbs.data["scheduler"]["launcher"] == "mpiexec"


def test_a_site_that_does_not_validate_is_not_written(tmp_path: Path) -> None:
    bad = {"name": "x", "description": "y"}
    with pytest.raises(ConfigError, match="field 'arch'"):
        fromhost.write_site(bad, tmp_path / "x.yaml", validate=load_site_file)
    assert list(tmp_path.iterdir()) == []


# -- extends ----------------------------------------------------------------------------------
MINE = """\
extends: frontier
name: my-frontier
description: Frontier, my project
scheduler:
  account: CSC999
  walltime: "01:00:00"
gpu:
  rocm: "6.3.1"
modules: [PrgEnv-gnu/8.7.0, cpe/26.03, rocm/6.3.1, craype-accel-amd-gfx90a, cray-mpich-abi/9.1.0]
"""


def test_extends_merges_and_drops_overridden_provenance(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(MINE)
    site = load_site(str(tmp_path / "mine.yaml"))
    base = load_site("frontier")
    assert site.scheduler.account == "CSC999" and site.gpu.rocm == "6.3.1"
    assert site.node == base.node and site.mpi == base.mpi  # the rest comes from frontier
    assert site.scheduler.launcher == "srun"
    assert "gpu.rocm" not in {**site.provenance.verified, **site.provenance.assumed}
    assert site.provenance.verified["node.gpus"] == base.provenance.verified["node.gpus"]


def test_extends_errors_name_the_file_that_set_the_value(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(MINE + "node:\n  sockets: 0\n")
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'mine.yaml'}:11: field 'node.sockets'"):
        load_site(str(tmp_path / "mine.yaml"))
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\n")
    with pytest.raises(ConfigError, match="extends loops"):
        load_site(str(tmp_path / "a.yaml"))
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\nname: c\n")
    with pytest.raises(ConfigError, match="extends 'nowhere.yaml': file not found"):
        load_site(str(tmp_path / "c.yaml"))


def test_show_resolved_names_each_values_origin(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(MINE)
    proc = cli("sites", "show", "--resolved", "--json", str(tmp_path / "mine.yaml"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    fields = {f["field"]: f for f in doc["fields"]}
    assert fields["scheduler.account"]["from"] == f"{tmp_path / 'mine.yaml'}:5"
    assert fields["node.gpus"]["from"].endswith(
        "frontier.yaml:" + fields["node.gpus"]["from"].rsplit(":", 1)[1]
    )
    assert "site-configs/frontier.yaml" in fields["node.gpus"]["from"]
    assert fields["node.gpus"]["provenance"].startswith("verified:")
    assert doc["chain"][-1] == str(tmp_path / "mine.yaml")
    text = cli("sites", "show", "--resolved", str(tmp_path / "mine.yaml")).stdout
    assert f'scheduler.account = "CSC999"  # {tmp_path / "mine.yaml"}:5' in text


def test_init_extends_writes_a_file_with_placeholders(tmp_path: Path) -> None:
    proc = cli("sites", "init", "--extends", "frontier", "myf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "myf.yaml: placeholder: scheduler.account: your project id"
    proc = cli("sites", "validate", "myf.yaml", cwd=tmp_path)
    assert proc.returncode == 0 and "1 placeholder(s)" in proc.stdout
    proc = cli("sites", "validate", "--strict", "myf.yaml", cwd=tmp_path)
    assert proc.returncode == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sites", "init", "Bad_Name", "--from-host"], "error: site name 'Bad_Name': lowercase"),
        (["sites", "init", "x"], "error: say where the site comes from"),
        (["sites", "init", "x", "--extends", "nosuch"], "error: unknown site 'nosuch'"),
    ],
)
def test_init_failures_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("keep me\n")
    proc = cli("sites", "init", "x", "--from-host", cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: x.yaml exists; pass --force to replace it",
    )
    assert (tmp_path / "x.yaml").read_text() == "keep me\n"


def test_submit_refuses_marked_placeholders_unless_given(tmp_path: Path) -> None:
    from hpcenv.jobs.project import account_for

    (tmp_path / "mine.yaml").write_text(
        MINE + "provenance:\n  placeholder:\n    scheduler.account: your CSC project\n"
    )
    site = load_site(str(tmp_path / "mine.yaml"))
    with pytest.raises(ConfigError, match="scheduler.account is marked as a placeholder"):
        account_for(site, None, strict=True)
    assert account_for(site, "CSC777", strict=True) == "CSC777"
    assert account_for(site, None, strict=False) == "CSC999"  # rendering only: kept
    (tmp_path / "two.yaml").write_text(
        MINE + "provenance:\n  placeholder:\n    gpu.rocm: check module avail rocm\n"
    )
    with pytest.raises(
        ConfigError, match=r"still has placeholders: gpu.rocm \(check module avail rocm\)"
    ):
        account_for(load_site(str(tmp_path / "two.yaml")), "CSC777", strict=True)
