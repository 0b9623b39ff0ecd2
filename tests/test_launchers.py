"""Launchers: one class each, turning the neutral placement into their own flags; the names
are kept in step across the registry, the site model and the knowledge base."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from hpcenv.jobs.launchers import LAUNCHERS, Launcher
from hpcenv.jobs.placement import Placement, core_ranges, place
from hpcenv.knowledge import kb
from hpcenv.site import Scheduler, Site, load_site


def test_launcher_names_are_one_list() -> None:
    literal = set(typing.get_args(Scheduler.model_fields["launcher"].annotation))
    table = kb()["launchers"]
    known = {n for names in table.values() if isinstance(names, list) for n in names}
    # torchrun is a job's --launcher, run under the site's launcher, never a site's own.
    assert set(LAUNCHERS) - {"torchrun"} == literal == known


def test_a_new_launcher_is_one_class() -> None:
    """Flux's ``flux run``, written against the placement alone and registered: a site that
    names it gets its launch line from the one builder, nothing else edited."""
    from hpcenv.jobs.launchers import LAUNCHERS, launch_argv, register_launcher

    class FluxRun(Launcher):
        name = "flux"

        def flags(self, site: Site, p: Placement) -> list[str]:
            argv = ["run", "-N", str(p.nodes), "-n", str(p.ranks), "-c", str(p.cores_per_rank)]
            return argv + (["-g", str(p.gpus_per_rank)] if p.gpus_per_rank else [])

        def per_node(self, nodes: int) -> list[str]:
            return ["flux", "run", "-N", str(nodes), "--tasks-per-node=1"]

    register_launcher(FluxRun)
    try:
        site = load_site("frontier")
        p = place(site, nodes=2)
        # frontier's launcher_flags belong to srun: a launcher the site does not use gets none
        assert launch_argv(site, p, launcher="flux") == [
            "flux",
            "run",
            "-N",
            "2",
            "-n",
            "16",
            "-c",
            "7",
            "-g",
            "1",
        ]
        flux_site = site.model_copy(
            update={
                "scheduler": site.scheduler.model_copy(
                    update={"launcher": "flux", "launcher_flags": ["--exclusive"]}
                )
            }
        )
        assert launch_argv(flux_site, p)[-1] == "--exclusive"
    finally:
        LAUNCHERS.pop("flux")


def test_site_launcher_flags_only_reach_the_site_launcher() -> None:
    """The bug this fixes: mpirun got srun's --cpu-bind on Perlmutter and jsrun's --smpiargs on
    Summit."""
    from hpcenv.jobs.launchers import launch_argv

    for name in ("perlmutter", "summit", "frontier"):
        site = load_site(name)
        p = place(site, nodes=1)
        own = launch_argv(site, p)
        assert own[0] == site.scheduler.launcher
        for flag in site.scheduler.launcher_flags:
            assert flag in own
        mpirun = launch_argv(site, p, launcher="mpirun")
        assert not set(site.scheduler.launcher_flags) & set(mpirun), (name, mpirun)


def test_frontier_ranks_leave_the_low_noise_core() -> None:
    site = load_site("frontier")
    p = place(site, nodes=2)
    assert core_ranges(p.compute_cores[0]) == "1-7"


# Issue 35: `--launcher torchrun -- train.py` rendered `torchrun ... --no-python train.py`, which
# execs train.py as a program on every node. torchrun users type a script.
@pytest.mark.parametrize(
    ("command", "runs_python"),
    [
        (["train.py"], True),
        (["train.py", "--arg", "x"], True),
        (["{workdir}/ddp_train.py"], True),
        (["/opt/project/train.py", "--epochs", "1"], True),
        (["-m", "pkg.mod"], True),
        (["--module", "pkg.mod", "--arg", "x"], True),
        (["python3", "train.py"], False),
        (["/opt/venv/bin/python3", "{workdir}/train.py"], False),
        (["./run.sh"], False),
        (["bash", "-c", "python3 train.py"], False),
        (["train"], False),
        ([], False),
    ],
)
def test_torchrun_runs_a_script_or_module_with_its_python(
    command: list[str], runs_python: bool
) -> None:
    """A script or ``-m module``: torchrun's default, its own Python; a program: ``--no-python``,
    the last of torchrun's options, so that the command follows it as given."""
    from hpcenv.jobs.launchers import get_launcher, torchrun_runs_python

    assert torchrun_runs_python(command) is runs_python
    site = load_site("frontier")
    runner = get_launcher("torchrun").runner(site, place(site, nodes=2), command)
    assert runner[:3] == ["torchrun", "--nnodes=2", "--nproc-per-node=8"]
    assert ("--no-python" in runner) is not runs_python
    if not runs_python:
        assert runner[-1] == "--no-python"


def test_torchrun_runner_without_a_command_keeps_no_python() -> None:
    """A caller that gives no command gets the program form (what every torchrun line had)."""
    from hpcenv.jobs.launchers import get_launcher

    site = load_site("perlmutter")
    assert get_launcher("torchrun").runner(site, place(site, nodes=1))[-1] == "--no-python"
    assert get_launcher("srun").runner(site, place(site, nodes=1), ["train.py"]) == []


SITE_LAUNCHER = "the site's launcher"
SIZE = "hpcenv starts the ranks: give -N/--nodes and --ranks-per-node"


@pytest.mark.parametrize(
    ("command", "launcher", "message"),
    [
        (
            ["torchrun", "--nproc-per-node", "8", "train.py"],
            None,
            f"`torchrun` in the command would start one torchrun per rank under {SITE_LAUNCHER}:"
            " drop it and give --launcher torchrun",
        ),
        (
            ["torchrun", "--nproc-per-node", "8", "train.py"],
            "torchrun",
            "`torchrun` in the command would start a torchrun in every worker of --launcher "
            "torchrun: drop it (--launcher torchrun starts one per node)",
        ),
        (
            ["python3", "-u", "-m", "torch.distributed.run", "train.py"],
            None,
            "`python3 -u -m torch.distributed.run` in the command would start one torchrun per "
            f"rank under {SITE_LAUNCHER}: drop it and give --launcher torchrun",
        ),
        (
            ["/opt/venv/bin/python", "-mtorch.distributed.launch", "train.py"],
            "mpirun",
            "`/opt/venv/bin/python -mtorch.distributed.launch` in the command would start one "
            "torchrun per rank under mpirun: drop it and give --launcher torchrun",
        ),
        (
            ["-m", "torch.distributed.run", "train.py"],
            "torchrun",
            "`-m torch.distributed.run` in the command would start a torchrun in every worker "
            "of --launcher torchrun: drop it (--launcher torchrun starts one per node)",
        ),
        (
            ["mpirun", "-np", "16", "python3", "train.py"],
            None,
            f"`mpirun` in the command would start one mpirun per rank under {SITE_LAUNCHER}: "
            f"drop it ({SIZE})",
        ),
        (
            ["/usr/bin/srun", "python3", "train.py"],
            "torchrun",
            "`/usr/bin/srun` in the command would start one srun in every worker of --launcher "
            f"torchrun: drop it and --launcher torchrun ({SIZE})",
        ),
        (
            ["mpiexec.hydra", "-n", "2", "a.out"],
            None,
            f"`mpiexec.hydra` in the command would start one mpiexec.hydra per rank under "
            f"{SITE_LAUNCHER}: drop it ({SIZE})",
        ),
        (
            ["jsrun", "-n", "6", "a.out"],
            None,
            f"`jsrun` in the command would start one jsrun per rank under {SITE_LAUNCHER}: "
            f"drop it ({SIZE})",
        ),
        (
            ["horovodrun", "-np", "4", "python3", "train.py"],
            None,
            f"`horovodrun` in the command would start one horovodrun per rank under "
            f"{SITE_LAUNCHER}: drop it ({SIZE})",
        ),
        (
            ["-m", "pkg.mod"],
            None,
            "`-m` first runs a module only under --launcher torchrun: give --launcher torchrun, "
            f"or `python3 -m MODULE` under {SITE_LAUNCHER}",
        ),
        (["-m"], "torchrun", "`-m` needs a module name after it: -- -m pkg.mod"),
    ],
)
def test_a_launcher_in_the_command_is_refused_in_one_line(
    command: list[str], launcher: str | None, message: str
) -> None:
    """The job model refuses it, so that every way in (submit, a bench's job, the API) does."""
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.spec import JobSpec

    with pytest.raises(ConfigError) as err:
        JobSpec(command=command, launcher=launcher)
    assert str(err.value) == message


def test_every_registered_launcher_in_the_command_is_refused() -> None:
    """A new launcher is one class: a command that starts it is refused with nothing else
    edited."""
    from hpcenv.errors import ConfigError
    from hpcenv.jobs.launchers import command_launcher
    from hpcenv.jobs.spec import JobSpec

    for name in LAUNCHERS:
        assert command_launcher([f"/usr/bin/{name}", "x"]) == f"/usr/bin/{name}"
        with pytest.raises(ConfigError, match=f"^`{name}` in the command would start one "):
            JobSpec(command=[name, "x"])


@pytest.mark.parametrize(
    "command",
    [
        ["python3", "train.py"],
        ["python3", "-m", "pkg.mod"],
        ["python3", "-c", "import torch.distributed.run"],
        ["python3", "torchrun.py"],
        ["./srun.sh"],
        ["bash", "-c", "srun hostname"],  # a shell string is the user's own
        ["train.py", "--launcher", "torchrun"],
    ],
)
def test_commands_that_start_no_launcher_pass(command: list[str]) -> None:
    from hpcenv.jobs.launchers import command_launcher
    from hpcenv.jobs.spec import JobSpec

    assert command_launcher(command) is None
    JobSpec(command=command)
    JobSpec(command=command, launcher="torchrun")


def test_in_the_batch_shell_a_launcher_in_the_command_runs_once() -> None:
    """``--single``: the command runs once, as given; a launch line of the user's own is theirs
    (``--single --no-container -- srun ...``)."""
    from hpcenv.jobs.spec import JobSpec

    JobSpec(command=["torchrun", "--standalone", "train.py"], launch="single")
    JobSpec(command=["srun", "hostname"], launch="single")


def test_oneccl_workers_come_from_the_recipes_components(tmp_path: Path) -> None:
    """A recipe named like oneCCL without it gets no workers; one with it by components does."""
    from hpcenv.jobs.placement import DEFAULT_CCL_WORKERS, default_ccl_workers

    frontier = load_site("frontier")
    assert default_ccl_workers(frontier, "horovod-ccl") == DEFAULT_CCL_WORKERS
    assert default_ccl_workers(frontier, "torch-ccl") == DEFAULT_CCL_WORKERS
    nccl = tmp_path / "torch-nccl.yaml"
    nccl.write_text("name: torch-nccl\nextends: torch-gpu\n")
    assert default_ccl_workers(frontier, str(nccl)) == 0
    plain = tmp_path / "mine.yaml"
    plain.write_text("name: mine\nextends: horovod-ccl\n")
    assert default_ccl_workers(frontier, str(plain)) == DEFAULT_CCL_WORKERS
