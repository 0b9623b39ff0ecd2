"""The wheel as a user gets it: built from this checkout, installed without extras into a fresh
venv, and run as a process (light commands, missing extras, package data, size).

Needs pip to reach PyPI (or its configured mirror) for the core dependencies; ~30 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_INSTALLED_MB = 70
CORE = {"typer", "rich", "jinja2", "pyyaml", "pydantic", "packaging"}
HEAVY = {
    "matplotlib",
    "numpy",
    "pytest",
    "pytest-testinfra",
    "fabric",
    "mpi4py",
    "hpccm",
    "spython",
}


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


class Venv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"
        self.hpcenv = root / "bin" / "hpcenv"

    def site_packages(self) -> Path:
        out = _run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        )
        return Path(out.stdout.strip())

    def packages(self) -> dict[str, str]:
        out = _run([str(self.python), "-m", "pip", "list", "--format=json"])
        return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}

    def pip_install(self, *args: str) -> None:
        proc = _run([str(self.python), "-m", "pip", "install", "-q", *args])
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run the installed CLI as a new user would: no HPCENV_* settings and a HOME of its own
        (a measured-tuning file or job records in the developer's cache must not leak in)."""
        home = self.root.parent / "home"
        home.mkdir(exist_ok=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("HPCENV_", "XDG_")) and k != "HOME"
        }
        env["HOME"] = str(home)
        return _run([str(self.hpcenv), *args], cwd=cwd, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = out.glob("hpcenv-*.whl")
    return whl


@pytest.fixture(scope="module")
def core_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Venv, dict]:
    root = tmp_path_factory.mktemp("venv") / "v"
    proc = _run([sys.executable, "-m", "venv", str(root)])
    assert proc.returncode == 0, proc.stderr
    venv = Venv(root)
    before_pkgs = venv.packages()
    before = _tree_bytes(venv.site_packages())
    venv.pip_install(str(wheel))
    added = sorted(set(venv.packages()) - set(before_pkgs))
    measured = {"added": added, "bytes": _tree_bytes(venv.site_packages()) - before}
    return venv, measured


def test_wheel_carries_license_metadata_and_data(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names[-10:]
    for data in (
        "hpcenv/data/recipes/horovod-cpu.yaml",
        "hpcenv/data/site-configs/frontier.yaml",
        "hpcenv/data/templates/Dockerfile.j2",
        "hpcenv/data/containers.conf",
    ):
        assert data in names
    assert not any(
        n.startswith(("recipes/", "site-configs/", "templates/", "tests/")) for n in names
    )
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: BSD-3-Clause" in meta
    assert "Classifier: Programming Language :: Python :: 3.11" in meta
    assert "Project-URL: Source" in meta
    assert "Provides-Extra: smoke" in meta and "Provides-Extra: all" in meta


def test_core_install_is_lean(core_venv: tuple[Venv, dict]) -> None:
    venv, measured = core_venv
    print(
        f"core install: {len(measured['added'])} packages, {measured['bytes'] / 1e6:.1f} MB: "
        f"{', '.join(measured['added'])}"
    )
    assert measured["bytes"] < MAX_INSTALLED_MB * 1e6
    assert set(measured["added"]) >= CORE
    assert not HEAVY & set(measured["added"])


def test_light_commands_run(core_venv: tuple[Venv, dict], tmp_path: Path) -> None:
    venv, _ = core_venv
    from hpcenv import __version__

    proc = venv.cli("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"hpcenv {__version__}")
    proc = _run([str(venv.python), "-m", "hpcenv", "--version"])
    assert (proc.returncode, proc.stdout.strip()) == (0, f"hpcenv {__version__}")

    proc = venv.cli("sites", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert {"local", "frontier", "summit"} <= {s["name"] for s in json.loads(proc.stdout)}
    proc = venv.cli("sites", "show", "frontier", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["name"] == "frontier"
    proc = venv.cli("resolve", "--site", "local", "--recipe", "horovod-cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    proc = venv.cli(
        "render", "--site", "frontier", "--recipe", "torch-gpu", "--out", str(tmp_path / "r")
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "Dockerfile").read_text().startswith(("#", "FROM", "ARG", "# syntax"))
    assert (tmp_path / "r" / "Singularity.def").is_file()


def test_stray_recipes_folders_do_not_hide_builtins(
    core_venv: tuple[Venv, dict], tmp_path: Path
) -> None:
    venv, _ = core_venv
    stray = venv.site_packages() / "recipes"
    stray.mkdir(exist_ok=True)
    (stray / "junk.yaml").write_text("not: a recipe\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "horovod-cpu.yaml").write_text("bogus: 1\n")
    (tmp_path / "horovod-cpu").write_text("bogus: 1\n")
    proc = venv.cli("recipes", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {"horovod-cpu", "horovod-gpu", "daal4py", "torch-ccl"} <= {
        r["name"] for r in json.loads(proc.stdout)
    }
    proc = venv.cli("resolve", "--site", "local", "--recipe", "horovod-cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["smoke", "--site", "local"], "smoke"),
        (["data", "mnist"], "smoke"),
        (["bench", "--quick"], "bench"),
        (
            [
                "submit",
                "--site",
                "local",
                "--no-container",
                "--transport",
                "ssh",
                "--ssh-host",
                "h",
                "--ssh-client",
                "paramiko",  # the [ssh] extra's client; the default (system ssh) needs none
                "--",
                "true",
            ],
            "ssh",
        ),
        (["sites", "init", "x", "--ssh-host", "h", "--ssh-client", "paramiko"], "ssh"),
    ],
)
def test_missing_extra_names_it(core_venv: tuple[Venv, dict], argv: list[str], extra: str) -> None:
    venv, _ = core_venv
    proc = venv.cli(*argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'hpcenv[{extra}]'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_extras_in_step_with_pyproject() -> None:
    from hpcenv.extras import EXTRAS

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, needs in EXTRAS.items():
        names = {
            req.split(">")[0].split("=")[0].split("[")[0].strip().lower() for req in declared[extra]
        }
        assert {dist for dist, _ in needs} == names, extra


PLUGIN_PROBE = """\
import sys

def test_probe():
    backends = sys.modules.get("testinfra.backend")
    print("PROBE", "testinfra" in sys.modules, bool(backends and "apptainer" in backends.BACKENDS))
"""


def test_pytest_plugin_is_inert_without_testinfra(
    core_venv: tuple[Venv, dict], tmp_path: Path
) -> None:
    """A user's own pytest run in an env with core hpcenv (and no testinfra) is not disturbed."""
    venv, _ = core_venv
    venv.pip_install("pytest")
    (tmp_path / "test_probe.py").write_text(PLUGIN_PROBE)
    proc = _run(
        [str(venv.python), "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_probe.py"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PROBE False False" in proc.stdout


@pytest.mark.parametrize(("hosts", "registered"), [(None, "False"), ("apptainer://x", "True")])
def test_pytest_plugin_registers_only_when_asked(
    tmp_path: Path, hosts: str | None, registered: str
) -> None:
    """In a dev env (testinfra installed), apptainer:// is added only for runs that name it."""
    (tmp_path / "test_probe.py").write_text(PLUGIN_PROBE)
    argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_probe.py"]
    proc = _run([*argv, *([f"--hosts={hosts}"] if hosts else [])], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"PROBE True {registered}" in proc.stdout
