"""README's quick start per real site (issues 22, 37): every command in those blocks runs, as the
installed ``hpcenv``, from a folder holding ``train.py`` and ``requirements.txt``: ``init`` writes
the project file, then, the site not being reachable from here, ``build`` and ``submit`` run in
their dry-run form with no other flags and must exit 0, the job running the project's own image
(``<recipe>-<project>``), the one the build delivers."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HPCENV = Path(sys.executable).with_name("hpcenv")
REAL_SITES = {"frontier", "perlmutter", "aurora", "summit", "alps-clariden", "generic-slurm"}


def _blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Quick start per site")
    section = text[start : text.index("\n## ", start)]
    return [b.strip().splitlines() for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


BLOCKS = _blocks()


def _unquoted(text: str) -> str:
    """Shell text without its quotes and braces, to compare a path however each format writes it
    (``$SCRATCH/x``, ``"${SCRATCH}/x"``, an EDF's ``${SCRATCH}``)."""
    return re.sub(r"[\"'{}]", "", text)


def _site(block: list[str]) -> str:
    return shlex.split(block[0])[shlex.split(block[0]).index("--site") + 1]


def test_a_quick_start_per_real_site() -> None:
    assert {_site(b) for b in BLOCKS} == REAL_SITES
    for block in BLOCKS:
        verbs = [shlex.split(line)[1] for line in block]
        assert verbs == ["init", "build", "submit"], block
        assert block[1:] == ["hpcenv build", "hpcenv submit -N 2 -- python3 train.py"], block


@pytest.mark.parametrize("block", BLOCKS, ids=[_site(b) for b in BLOCKS])
def test_every_quick_start_command_runs(block: list[str], tmp_path: Path) -> None:
    tmp_path = tmp_path / "mnist-study"
    tmp_path.mkdir()
    (tmp_path / "train.py").write_text("import torch\nprint(torch.__version__)\n")
    (tmp_path / "requirements.txt").write_text("tabulate>=0.9\n")
    for line in block:
        argv = shlex.split(line.replace("<project>", "csc300"))
        assert argv[0] == "hpcenv"
        cut = argv.index("--") if "--" in argv else len(argv)
        dry = [] if argv[1] == "init" else ["--dry-run"]
        argv = [str(HPCENV), *argv[1:cut], *dry, *argv[cut:]]
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{line}: {out.stderr.strip()}"
        if argv[1] == "build":  # the delivery's last step makes what the job will run
            (delivered,) = re.findall(r"^  job runs: (\S+)$", out.stdout, re.M)
        if argv[1] == "submit":  # the job runs the user's image, in the user's folder
            assert "-mnist-study" in out.stdout and f"HPCENV_CHDIR={tmp_path}" in out.stdout
            # ... and exactly what the build delivers (path or reference, variables unexpanded)
            assert _unquoted(delivered) in _unquoted(out.stdout), delivered


def _perlmutter_paragraph() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("**On Perlmutter**")
    return text[start : text.index("\n\n", start)]


PERLMUTTER = [
    c for c in re.findall(r"`(hpcenv [^`]+)`", _perlmutter_paragraph()) if " --site " in c
]


def test_the_perlmutter_paragraph_names_its_commands() -> None:
    sites = [shlex.split(c)[shlex.split(c).index("--site") + 1] for c in PERLMUTTER]
    assert sites == ["perlmutter", "perlmutter", "local-podman-hpc", "local-podman-hpc"]


@pytest.mark.parametrize("line", PERLMUTTER, ids=[f"{i}" for i in range(len(PERLMUTTER))])
def test_every_perlmutter_command_runs_dry(line: str, tmp_path: Path) -> None:
    """Each command of README's Perlmutter paragraph, with --dry-run: a build is podman-hpc
    build then podman-hpc migrate (the image the job runs), a job's ranks run podman-hpc run."""
    (tmp_path / "train.py").write_text("print('ok')\n")
    argv = shlex.split(line.replace("<project>", "m4321"))
    cut = argv.index("--") if "--" in argv else len(argv)
    argv = [str(HPCENV), *argv[1:cut], "--dry-run", *argv[cut:]]
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{line}: {out.stderr.strip()}"
    site = argv[argv.index("--site") + 1]
    recipe = argv[argv.index("-r") + 1]
    tag = f"localhost/hpcenv/{recipe}:{site}"
    if argv[1] == "build":
        assert "build: podman-hpc build --layers --format docker -f " in out.stdout, out.stdout
        assert f"deliver: podman-hpc migrate {tag} (" in out.stdout, out.stdout
        assert f"job runs: {tag}" in out.stdout, out.stdout
    else:
        srun = next(ln for ln in out.stdout.splitlines() if ln.startswith("srun "))
        flags = "--gpu --mpi --nccl" if site == "perlmutter" else "--mpi"
        assert f"podman-hpc run --rm {flags} " in srun and f" {tag} " in srun, srun
        assert ("--mpi=cray_shasta" if site == "perlmutter" else "--mpi=pmi2") in srun, srun
