"""A job script a person can read (issue 35): ``hpcenv submit --dry-run`` prints the script a user
reviews before spending an allocation. The step library is written once per job, as a step file
the steps that use it source (it was pasted into three of them: the Frontier example was 1,029
lines); the script opens, right after the scheduler's directives, with a summary the plan gives;
and the Frontier example stays short. That the job still runs is tests/test_job_dryrun.py's:
it executes every site's script, stage-out through the library for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import needs_tool

from hpcenv.jobs import JobSpec, StageIn, StageOut, default_image
from hpcenv.jobs.plan import LIBRARY, JobPlan
from hpcenv.jobs.render import (
    STEP_TEMPLATES,
    code_lines,
    plan_job,
    render_plan,
    step_file,
    step_script,
)
from hpcenv.jobs.spec import Stitch
from hpcenv.paths import templates_dir
from hpcenv.site import Site, load_site, site_names

HPCENV = Path(sys.executable).with_name("hpcenv")
MOST_LINES = 450  # issue 35: the Frontier example below was 1,029 lines, 65 % one library
DIRECTIVE = re.compile(r"#(SBATCH|BSUB|PBS) ")
REAL_SITES = ("alps-clariden", "aurora", "frontier", "perlmutter", "summit")
LIB = templates_dir() / "jobs" / "_lib.sh"
FUNCTIONS = re.findall(r"^(hpcenv_\w+)\(\)", LIB.read_text(), re.M)


def _staged(site: Site, recipe: str | None = None, stitch: bool = False) -> JobSpec:
    base = next(f.path for f in site.filesystems if f.purpose in ("scratch", "project"))
    return JobSpec(
        name="train",
        command=["python3", "train.py", "--data", "{data}", "--out", "{output}"],
        nodes=2,
        recipe=recipe or site.recipes[0],
        account="stf007" if site.scheduler.account_required else None,
        stage_in=StageIn(source=f"{base}/datasets/mnist", per_node=site.node_local is not None),
        stage_out=StageOut(dest=f"{base}/results/run1"),
        stitch=Stitch(parts=f"{base}/parts", count=2, output=f"{base}/all.csv") if stitch else None,
    )


def _plan(name: str, stitch: bool = False) -> JobPlan:
    site = load_site(name)
    job = _staged(site, stitch=stitch)
    return plan_job(site, job, default_image(site, job.recipe or ""), submitting=True)


def _opening(script: str) -> tuple[list[str], list[str]]:
    """(the directives after ``#!``, the comment lines right after them)."""
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    n = 1
    while DIRECTIVE.match(lines[n]):
        n += 1
    m = n
    while lines[m].startswith("#"):
        m += 1
    return lines[1:n], lines[n:m]


def test_frontier_dry_run_a_person_reviews(tmp_path: Path) -> None:
    """The issue's own example, through the installed ``hpcenv`` as a process."""
    (tmp_path / "train.py").write_text("print(1)\n")
    proc = subprocess.run(
        [
            str(HPCENV),
            "submit",
            *("--site", "frontier", "-r", "torch-gpu", "-A", "csc599", "-N", "2"),
            *("--stage-in", "/lustre/orion/csc599/data"),
            *("--stage-out", "/lustre/orion/csc599/results"),
            *("--dry-run", "--", "python3", "train.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert len(script.splitlines()) <= MOST_LINES, len(script.splitlines())
    directives, opening = _opening(script)
    assert "#SBATCH --nodes=2" in directives and "#SBATCH --account=csc599" in directives
    # The summary comes first after the directives (sbatch reads those up to the first command).
    assert opening[:8] == [
        "# hpcenv job torch-gpu on frontier (slurm):",
        "#   nodes     2 (16 ranks, 8 per node, by srun)",
        "#   per rank  7 cores, 1 GPU (bound closest)",
        "#   image     $MEMBERWORK/$HPCENV_PROJECT/hpcenv/images/torch-gpu-frontier.sif"
        " (apptainer; bind MPI cray-mpich@9.1.0 over cray-pmi@6)",
        "#   data in   /lustre/orion/csc599/data -> /mnt/bb/$USER/torch-gpu-${HPCENV_JOB_ID}/data,"
        " verified",
        "#   data out  $MEMBERWORK/$HPCENV_PROJECT/hpcenv-jobs/torch-gpu-output-${HPCENV_JOB_ID}"
        " -> /lustre/orion/csc599/results, verified",
        "#   walltime  00:30:00",
        "#   command   python3 train.py",
    ]
    # The library once, sourced by the three steps that use it.
    assert script.count("hpcenv_verify() {") == 1
    assert script.count('source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"') == 3


@pytest.mark.parametrize("name", REAL_SITES)
def test_every_real_sites_example_is_short(name: str) -> None:
    script = render_plan(_plan(name))
    assert len(script.splitlines()) <= MOST_LINES, len(script.splitlines())


@pytest.mark.parametrize("name", site_names())
def test_the_step_library_is_written_once_and_sourced(name: str) -> None:
    plan = _plan(name, stitch=True)
    names = [f.name for f in plan.files]
    assert len(names) == len(set(names)), names
    users = [f for f in plan.files if LIBRARY in f.sources]
    assert {f.name for f in users} >= {"stage-in.sh", "stage-out.sh", "stitch.sh"}
    assert all(names.index(LIBRARY) < names.index(f.name) for f in users), names
    script = render_plan(plan)
    for fn in FUNCTIONS:  # defined in lib.sh only, not in a step that uses it
        assert script.count(f"\n{fn}() {{") == 1, fn
    for f in users:
        assert 'source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"' in f.text
        assert not re.search(r"^hpcenv_\w+\(\)", f.text, re.M), f.name


def test_a_job_no_step_of_which_uses_the_library_writes_none() -> None:
    site = load_site("perlmutter")
    job = JobSpec(name="t", command=["python3", "x.py"], nodes=2, account="m1234")
    plan = plan_job(site, job, "docker:x", submitting=True)
    assert LIBRARY not in [f.name for f in plan.files]
    assert "hpcenv_" not in "".join(f.text for f in plan.files)


def test_the_jobs_step_files_are_the_shipped_ones_without_their_comments() -> None:
    """A step file in the job is its code: the shipped file's comments say why (tests/
    test_staging.py sources templates/jobs/_lib.sh itself); shellcheck directives stay."""
    text = step_file(LIBRARY, "the step library").text
    assert text == code_lines("# shellcheck shell=bash\n" + LIB.read_text()).rstrip("\n")
    for name in STEP_TEMPLATES:
        lines = step_file(name, name).text.splitlines()
        comments = [ln for ln in lines if ln.lstrip().startswith("#")]
        assert all(ln.startswith(("#!", "# shellcheck ")) for ln in comments), name
    assert code_lines("#!/bin/sh\n  # why\n# shellcheck disable=SC2086\necho 1 # what\n") == (
        "#!/bin/sh\n# shellcheck disable=SC2086\necho 1 # what\n"
    )
    # a quoted string that spans lines is data, also a line of it that starts with #
    text = 'x=$(python3 -c \'import a\n# data\nprint(1)\' "$y") # why\n  # why\necho "a\n# b"\n'
    assert code_lines(text) == text.replace("  # why\n", "")
    with pytest.raises(ValueError, match="heredoc"):
        code_lines("cat <<'X'\n# data\nX\n")


@needs_tool("shellcheck", why="step files are shellchecked as files")
@pytest.mark.parametrize("name", site_names())
def test_step_files_as_the_job_writes_them_pass_shellcheck(name: str, tmp_path: Path) -> None:
    """In one steps folder, as the site's job has them: the steps that source lib.sh are followed
    into it (-x), and lib.sh is checked on its own. The standalone forms (each with its own copy
    of the library, as tests/test_staging.py runs them) are checked in tests/test_jobs_render.py."""
    plan = _plan(name, stitch=True)
    scripts = [f for f in plan.files if f.name.endswith(".sh")]
    for f in scripts:
        (tmp_path / f.name).write_text(f.text + "\n")
    for f in scripts:
        proc = subprocess.run(
            ["shellcheck", "-x", "-S", "style", str(tmp_path / f.name)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout


def test_the_preflight_a_job_writes_holds_the_branches_it_takes() -> None:
    """Its arguments (the site MPI's soname and model) are the plan's: Frontier binds Cray MPICH
    (libmpi.so.12), so its preflight has neither the MPI-5 ABI branch nor the site-build one."""
    files = {f.name: f.text for f in _plan("frontier").files}
    assert "libmpi_abi" not in files["bind-preflight.sh"]
    assert "site-build" not in files["bind-preflight.sh"]
    standalone = step_script("bind_preflight")
    assert "libmpi_abi.so.*)" in standalone and '"$model" != site-build' in standalone
    summit = {f.name: f.text for f in _plan("summit").files}  # site-build: Spectrum MPI
    assert '"$model" != site-build' in summit["bind-preflight.sh"]


def test_a_step_rendered_standalone_still_carries_the_library() -> None:
    """tests/test_staging.py and tests/test_multiuser.py run step scripts alone in a folder."""
    for name in ("stage_in", "stage_out", "stitch", "node_local"):
        text = step_script(name)
        assert "hpcenv_verify() {" in text and not re.search(r"^source ", text, re.M), name


def test_the_summary_is_the_plans() -> None:
    """The template prints plan.summary(); the plan's JSON has it too."""
    plan = _plan("aurora")
    _, opening = _opening(render_plan(plan))
    assert opening[: len(plan.summary())] == [f"# {line}" for line in plan.summary()]
    assert plan.to_dict()["summary"] == plan.summary()
    assert "#   per rank  8 cores, 1 GPU tile (bound by ZE_AFFINITY_MASK)" in opening
    assert plan.to_dict()["paths"]["data_source"].endswith("/datasets/mnist")
    host = plan_job(
        load_site("frontier"),
        JobSpec(name="t", command=["hostname"], launch="single", account="csc599"),
        None,
        submitting=True,
    )
    assert host.summary()[1:4] == [
        "  nodes     1 (in the batch shell)",
        "  per rank  56 cores, 8 GPUs (bound closest)",
        "  image     none, on the host (bind MPI cray-mpich@9.1.0 over cray-pmi@6)",
    ]
