"""``submit --env NAME=VALUE`` and ``--env NAME`` (issue 37): the user's variables reach every
rank inside the container on every runtime, under the ``user`` layer of the environment policy;
a value is quoted for the shell, a name alone passes the submitting shell's value by name, and
a secret's value is in no file hpcenv writes (script, plan, record) nor in what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcenv.envpolicy import EnvNotAllowed, is_secret, refused
from hpcenv.errors import ConfigError
from hpcenv.jobs.render import plan_job
from hpcenv.jobs.schedulers import get_scheduler
from hpcenv.jobs.spec import JobSpec, user_env
from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")
SECRET = "s3cr3t-v4lue-never-on-disk"


def hpcenv(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


# -- the option as data ------------------------------------------------------------------------


def test_values_and_names_by_name() -> None:
    values, names = user_env(["FOO=a b", "WANDB_API_KEY", "EMPTY=", "CCL_BCAST=ring"])
    assert values == {"FOO": "a b", "EMPTY": "", "CCL_BCAST": "ring"}
    assert names == ["WANDB_API_KEY"]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("RANK=0", "--env: user may not set RANK: hpcenv sets it per rank"),
        ("MASTER_ADDR=n1", "--env: user may not set MASTER_ADDR: hpcenv sets the rendezvous"),
        ("LD_PRELOAD=/x.so", "--env: user may not set LD_PRELOAD: ld.so loads"),
        ("CUDA_VISIBLE_DEVICES", "--env: user may not set CUDA_VISIBLE_DEVICES: the placement"),
        ("SLURM_NTASKS=3", "--env: user may not set SLURM_NTASKS: the scheduler, launcher"),
        ("APPTAINERENV_RANK=1", "--env: user may not set APPTAINERENV_RANK: hpcenv sets it"),
        ("HPCENV_DATA=/x", "--env: user may not set HPCENV_DATA"),
        ("BASH_ENV=/x", "--env: user may not set BASH_ENV"),
        ("1X=a", "--env '1X': not a variable name"),
        ("A-B=1", "--env 'A-B': not a variable name"),
        ("=1", "--env '': not a variable name"),
    ],
)
def test_names_that_change_the_launch_are_refused(item: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        user_env([item])
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_the_same_name_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="--env FOO: given twice"):
        user_env(["FOO=1", "FOO"])


@pytest.mark.parametrize("value", ["a\nsrun rm -rf ~", "a\rb", "a\x00b", "tab\there"])
def test_a_value_with_a_newline_is_refused_without_showing_it(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        user_env([f"FOO={value}"])
    assert "newline or control character" in str(err.value)
    assert value not in str(err.value) and "rm -rf" not in str(err.value)


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
)
def test_a_secret_takes_no_value_and_the_message_does_not_show_it(name: str) -> None:
    assert is_secret(name)
    with pytest.raises(ConfigError) as err:
        user_env([f"{name}={SECRET}"])
    assert SECRET not in str(err.value)
    assert f"give --env {name} (passed by name)" in str(err.value)


def test_the_user_layer_takes_what_a_workload_tunes() -> None:
    for name in ("OMP_NUM_THREADS", "NCCL_DEBUG", "CCL_ALLREDUCE_SCALEOUT", "HF_HOME", "FOO"):
        assert refused(name, "user") is None, name
    with pytest.raises(EnvNotAllowed):
        JobSpec(command=["true"], pass_env=["RANK"])


# -- the plan: every runtime, every scheduler ----------------------------------------------------

SITES = ["local", "perlmutter", "frontier", "alps-clariden", "aurora", "summit"]


def _plan(site_name: str):  # type: ignore[no-untyped-def]
    site = load_site(site_name)
    recipe = "horovod-cpu" if site.gpu.vendor == "none" else "horovod-gpu"
    job = JobSpec(
        command=["python3", "/opt/train.py"],
        recipe=recipe,
        image="/images/x.sif" if site.runtime.kind in ("apptainer", "singularity") else None,
        env={"FOO": "a b'$(x)"},
        pass_env=["WANDB_API_KEY"],
    )
    from hpcenv.jobs.runtimes.registry import default_image

    image = job.image or default_image(site, recipe)
    return site, plan_job(site, job, image, preview=True)


@pytest.mark.parametrize("site_name", SITES)
def test_the_users_variables_are_layers_of_the_plan(site_name: str) -> None:
    site, plan = _plan(site_name)
    env = {v.name: v for v in plan.environment}
    assert env["FOO"].value == "a b'$(x)" and not env["FOO"].expands
    assert env["FOO"].quoted() == "'a b'\"'\"'$(x)'"
    passed = env["WANDB_API_KEY"]
    assert passed.expands and passed.value.startswith("${WANDB_API_KEY?")
    launch = next(s.line() for s in plan.steps if s.launch)
    launch += "".join(f.text for f in plan.files)  # podman's per-rank step file
    if site.runtime.kind in ("podman", "podman-hpc"):  # an OCI container gets only what it is given
        assert "--env=WANDB_API_KEY" in launch and "--env=FOO" in launch
    if site.runtime.kind == "cscs-ce":  # the EDF names the variable, the value stays outside
        edf = next(f.text for f in plan.files if f.name.endswith(".toml"))
        assert 'WANDB_API_KEY = "${WANDB_API_KEY:-}"' in edf


def test_pbs_passes_the_names_with_qsub_v() -> None:
    site, plan = _plan("aurora")
    assert "#PBS -v WANDB_API_KEY" in plan.directives
    job = JobSpec(command=["true"], env={"FOO": "1"})
    assert not any(
        line.startswith("#PBS -v") for line in plan_job(site, job, preview=True).directives
    )
    assert get_scheduler("pbs").owner_of("-v", "X") == "exported environment"


# -- as a process ------------------------------------------------------------------------------


@pytest.mark.parametrize("site_name", SITES)
def test_a_dry_run_shows_no_secret(site_name: str, tmp_path: Path) -> None:
    recipe = "horovod-cpu" if site_name == "local" else "horovod-gpu"
    args = ["submit", "--site", site_name, "-A", "stf007", "-r", recipe, "--dry-run"]
    args += ["--env", "WANDB_API_KEY", "--env", "HF_TOKEN", "--env", "FOO=bar baz"]
    for out in ("--json", None):
        proc = hpcenv(
            *args,
            *([out] if out else []),
            "--",
            "true",
            env={"WANDB_API_KEY": SECRET, "HF_TOKEN": SECRET},
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
        assert "export FOO='bar baz'" in proc.stdout.replace("\\n", "\n").replace('\\"', '"')


@pytest.mark.parametrize(
    ("item", "env", "message"),
    [
        ("RANK=3", {}, "error: --env: user may not set RANK: hpcenv sets it per rank"),
        (f"HF_TOKEN={SECRET}", {}, "error: --env HF_TOKEN=...: a secret's value would be written"),
        ("WANDB_API_KEY", {"WANDB_API_KEY": ""}, None),
    ],
)
def test_refusals_exit_2_in_one_line(item: str, env: dict[str, str], message: str | None) -> None:
    args = ["submit", "--site", "local", "-r", "horovod-cpu", "--env", item, "--dry-run"]
    proc = hpcenv(*args, "--", "true", env=env)
    if message is None:  # set (even empty): passed
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(message) and SECRET not in proc.stderr


def test_a_name_not_set_in_this_shell_is_refused_with_the_fix() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MY_UNSET_VAR"}
    proc = subprocess.run(
        [str(HPCENV), "submit", "--site", "local", "-r", "horovod-cpu", "--dry-run"]
        + ["--env", "MY_UNSET_VAR", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: --env MY_UNSET_VAR: not set in this shell, so the job would not get it: export "
        "MY_UNSET_VAR first, or give --env MY_UNSET_VAR=VALUE"
    )


def test_a_real_submit_writes_no_secret_and_sbatch_gets_it_by_environment(tmp_path: Path) -> None:
    """Submitted for real to a stub ``sbatch`` (keeps the script it got, and the value of the
    variable in its own environment, where Slurm's default --export=ALL takes it from): the
    script, the job record and everything under the cache and the workdir hold the name only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "got"
    got.mkdir()
    (bin_dir / "sbatch").write_text(
        '#!/bin/sh\ncat >"$GOT/script.sh"\nprintf %s "$WANDB_API_KEY" >"$GOT/env"\necho 4242\n'
    )
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    cache, work = tmp_path / "cache", tmp_path / "work"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GOT": str(got),
        "HPCENV_CACHE": str(cache),
        "WANDB_API_KEY": SECRET,
    }
    args = ["submit", "--site", "local", "--no-container", "--workdir", str(work)]
    args += ["--env", "WANDB_API_KEY", "--env", "FOO=bar", "--", "true"]
    proc = hpcenv(*args, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted 4242" in proc.stdout and SECRET not in proc.stdout + proc.stderr
    assert (got / "env").read_text() == SECRET  # the value travels in the environment only
    script = (got / "script.sh").read_text()
    assert 'export WANDB_API_KEY="${WANDB_API_KEY?' in script and "export FOO=bar" in script
    files = [p for d in (cache, work, got) for p in d.rglob("*") if p.is_file()]
    files = [p for p in files if p != got / "env"]
    assert any(p.suffix == ".json" for p in files)  # the record is among them
    for p in files:
        assert SECRET not in p.read_text(errors="replace"), p
    record = next(p for p in files if p.suffix == ".json" and p.is_relative_to(cache))
    assert SECRET not in json.dumps(json.loads(record.read_text()))
