"""Files hpcenv reads cannot make a job or a command run code (issue 20, class 2).

The allow-list per environment layer (:mod:`hpcenv.envpolicy`), where each layer's data enters:
site files, measured tuning files, the job's own variables, job records; and ``--option`` that
would replace hpcenv's own directives. The process tests run the installed ``hpcenv``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpcenv.envpolicy import STARTUP, EnvNotAllowed, check, refused
from hpcenv.errors import ConfigError
from hpcenv.jobs.render import prepare
from hpcenv.jobs.schedulers import SCHEDULERS, get_scheduler
from hpcenv.jobs.spec import JobSpec
from hpcenv.jobs.submit import check_record
from hpcenv.paths import site_configs_dir
from hpcenv.site import load_site
from hpcenv.site.load import load_site_file
from hpcenv.sweep import measure
from hpcenv.tuning.apply import environment
from hpcenv.tuning.model import Layout, MeasuredTuning, measured_names
from hpcenv.tuning.store import load

HPCENV = Path(sys.executable).with_name("hpcenv")


# -- the policy, per layer ------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["placement", "runtime", "host"])
def test_hpcenv_own_layers_may_set_anything(layer: Any) -> None:
    for name in ("BASH_ENV", "LD_PRELOAD", "APPTAINERENV_LD_LIBRARY_PATH", "PATH"):
        assert refused(name, layer) is None


@pytest.mark.parametrize("layer", ["site-mpi", "site-environment"])
def test_site_layers_refuse_startup_names_unless_documented(layer: Any) -> None:
    for name in ("BASH_ENV", "LD_PRELOAD", "LD_DEBUG_OUTPUT", "APPTAINERENV_LD_PRELOAD", "PS4"):
        why = refused(name, layer)
        assert why is not None and "provenance.verified" in why
        assert refused(name, layer, documented={name}) is None
    for name in ("I_MPI_PMI_LIBRARY", "FI_PROVIDER_PATH", "NCCL_SOCKET_IFNAME", "OMPI_MCA_pml"):
        assert refused(name, layer) is None  # a site's own paths and knobs


def test_the_job_may_set_loader_variables_but_not_shell_startup() -> None:
    for name in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PATH", "OMP_NUM_THREADS"):
        assert refused(name, "job") is None
    for name in ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "CDPATH"):
        assert refused(name, "job") is not None
    assert refused("APPTAINERENV_BASH_ENV", "job") is not None


@pytest.mark.parametrize(
    "name",
    [
        "BASH_ENV",
        "LD_PRELOAD",
        "LD_AUDIT",
        "PYTHONSTARTUP",
        "PATH",
        "HOME",
        "FOO",
        "APPTAINERENV_LD_PRELOAD",
        "OMPI_MCA_plm_rsh_agent",
        "OMPI_MCA_mca_base_component_path",
        "OMPI_MCA_coll_tuned_dynamic_rules_filename",
        "FI_PROVIDER_PATH",
        "I_MPI_PMI_LIBRARY",
        "NCCL_NET_PLUGIN",
        "UCX_MODULE_DIR",
        "OMP_TOOL_LIBRARIES",
        # issue 40: names the old deny-list of words let through (values fit the pattern)
        "HOROVOD_TIMELINE",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR",
        "OMPI_MCA_plm",
        "NCCL_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "OMP_NUM_THREADS",
    ],
)
def test_measured_tuning_refuses_what_no_measurement_sets(name: str) -> None:
    assert refused(name, "measured-tuning", allowed=measured_names()) is not None


def test_measured_tuning_takes_everything_the_tuner_writes() -> None:
    kb = measure.collectives()
    names = {kb["mpich"]["variable"], kb["intel-mpi"]["variable"]}
    for t in kb["openmpi"].get("transports", []):
        names |= set(t["env"])
    for key in ("horovod", "nccl"):
        for group in ("candidates", "multi_node_only"):
            for cand in kb[key].get(group, []):
                names |= set(cand)
    assert len(names) > 8
    for name in names:
        assert refused(name, "measured-tuning", allowed=measured_names()) is None, name
    assert measured_names() == names  # exactly those: an allow-list, not a pattern


def test_measured_tuning_without_the_list_allows_nothing() -> None:
    assert refused("OMPI_MCA_pml", "measured-tuning") is not None


def test_records_carry_only_the_schedulers_conf_env() -> None:
    assert refused("SLURM_CONF", "record", allowed={"SLURM_CONF"}) is None
    assert refused("BASH_ENV", "record", allowed={"SLURM_CONF"}) is not None


def test_check_names_where_and_the_variable_in_one_line() -> None:
    with pytest.raises(EnvNotAllowed) as err:
        check(
            {"OMPI_MCA_pml": "ucx", "BASH_ENV": "x"},
            "measured-tuning",
            "/t/1n2r1c.json",
            allowed=measured_names(),
        )
    text = str(err.value)
    assert text.startswith("/t/1n2r1c.json: measured-tuning may not set BASH_ENV: ")
    assert "\n" not in text
    assert isinstance(err.value, ConfigError)


def test_every_startup_name_has_a_reason() -> None:
    assert all(why for why in STARTUP.values())


# -- sites --------------------------------------------------------------------------------


def test_shipped_sites_set_no_startup_name() -> None:
    for path in sorted(site_configs_dir().glob("*.yaml")):
        site = load_site(path.stem)
        for name in [*site.mpi.env, *site.tuning]:
            assert name not in STARTUP and not name.startswith("LD_"), (path, name)


def _evil_site(tmp_path: Path, **provenance: str) -> Path:
    doc = yaml.safe_load((site_configs_dir() / "local.yaml").read_text())
    doc["tuning"]["BASH_ENV"] = "/tmp/payload.sh"
    doc.setdefault("provenance", {}).setdefault("verified", {}).update(provenance)
    path = tmp_path / "evil.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_site_file_setting_bash_env_is_refused_at_its_line(tmp_path: Path) -> None:
    path = _evil_site(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_site_file(path)
    text = str(err.value)
    assert f"{path}:" in text and "tuning.BASH_ENV" in text and "provenance.verified" in text


def test_site_file_documenting_the_variable_may_set_it(tmp_path: Path) -> None:
    path = _evil_site(tmp_path, **{"tuning.BASH_ENV": "site docs, read 2026-11-24"})
    assert load_site_file(path).tuning["BASH_ENV"] == "/tmp/payload.sh"


# -- tuning files and the job's own variables ---------------------------------------------


def _tuning_doc(site: str, layout: Layout, env: dict[str, str]) -> dict[str, Any]:
    return {
        "site": site,
        "image": "/tmp/x.sif",
        "image_id": "a" * 64,
        "layout": layout.model_dump(),
        "mpi": "openmpi",
        "date": "2026-11-24T00:00:00+00:00",
        "env": env,
    }


def test_tuning_file_with_bash_env_is_refused_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    layout = Layout(nodes=1, ranks_per_node=2, cores_per_rank=1)
    path.write_text(json.dumps(_tuning_doc("local", layout, {"BASH_ENV": "/tmp/p.sh"})))
    with pytest.raises(EnvNotAllowed, match=f"^{path}: measured-tuning may not set BASH_ENV"):
        load(path)


def test_tuning_built_in_python_is_checked_where_it_becomes_environment() -> None:
    layout = Layout(nodes=1, ranks_per_node=2, cores_per_rank=1)
    tuning = MeasuredTuning(**_tuning_doc("local", layout, {"LD_PRELOAD": "x.so"}))
    with pytest.raises(EnvNotAllowed, match="LD_PRELOAD"):
        environment(tuning, None)


def test_job_env_refuses_shell_startup_and_keeps_loader_variables() -> None:
    site = load_site("generic-slurm")
    job = JobSpec(command=["true"], env={"LD_LIBRARY_PATH": "/opt/lib"})
    assert prepare(site, job, None).plan.env()["LD_LIBRARY_PATH"] == "/opt/lib"
    with pytest.raises(EnvNotAllowed, match="job may not set BASH_ENV"):
        prepare(site, JobSpec(command=["true"], env={"BASH_ENV": "/tmp/p.sh"}), None)


# -- --option and hpcenv's own directives -------------------------------------------------


@pytest.mark.parametrize(
    "scheduler, option, owned",
    [
        ("slurm", "--output=x", True),
        ("slurm", "--out=x", True),  # sbatch takes unambiguous abbreviations
        ("slurm", "-ox", True),  # and attached values
        ("slurm", "-o x", True),
        ("slurm", "--error=x", True),
        ("slurm", "--chdir=/tmp", True),
        ("slurm", "-D /tmp", True),
        ("slurm", "--export=ALL", True),
        ("slurm", "--job-name=x", True),
        ("slurm", "-J x", True),
        ("slurm", "--parsable", True),
        ("slurm", "--comment=x", True),
        ("slurm", "--dependency=afterok:1", True),
        ("slurm", "--reservation=r", False),
        ("slurm", "--mail-type END", False),
        ("slurm", "--gpus=4", False),
        ("slurm", "--exclusive", False),
        ("lsf", "-o x", True),
        ("lsf", "-oo x", True),
        ("lsf", "-e x", True),
        ("lsf", "-cwd /tmp", True),
        ("lsf", "-J x", True),
        ("lsf", "-env all", True),
        ("lsf", "-alloc_flags smt1", False),
        ("pbs", "-o x", True),
        ("pbs", "-e x", True),
        ("pbs", "-N x", True),
        ("pbs", "-V", True),
        ("pbs", "-v A=1", True),
        ("pbs", "-l select=3", True),
        ("pbs", "-lwalltime=1:00:00", True),
        ("pbs", "-W depend=afterok:1", True),
        ("pbs", "-l filesystems=home:flare", False),
        ("pbs", "-W group_list=x", False),
    ],
)
def test_options_that_replace_hpcenvs_directives_are_refused(
    scheduler: str, option: str, owned: bool
) -> None:
    from hpcenv.jobs.schedulers import option_pair

    s = get_scheduler(scheduler)
    flag, value = option_pair(option)
    if owned:
        with pytest.raises(ConfigError, match="--option-override"):
            s.refuse_owned(option, flag, value)
    else:
        s.refuse_owned(option, flag, value)


def test_every_scheduler_owns_its_log_and_name_directives() -> None:
    for name in SCHEDULERS:
        owned = get_scheduler(name).owned
        assert owned, name


# -- job records --------------------------------------------------------------------------


LOCAL_2NODE_CONF = "/var/tmp/hpcenv-services/slurm-2node/slurm.conf"  # site local-2node's


def _record(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "job_id": "123",
        "name": "train",
        "site": "local",
        "scheduler": "slurm",
        "workdir": "/scratch/u/hpcenv-jobs",
        "transport": {"kind": "local", "env": {"SLURM_CONF": LOCAL_2NODE_CONF}},
        "log_names": ["train-%j.out", "train-%j.err"],
        "script_path": "/home/u/.cache/hpcenv/jobs/local-h-123.sh",
        "array": None,
    }
    return doc | over


def test_a_record_as_hpcenv_writes_it_is_read() -> None:
    sub = check_record(_record(site="local-2node"))
    assert sub.job_id == "123" and sub.transport.env == {"SLURM_CONF": LOCAL_2NODE_CONF}


def _conf_record(conf: Path, kind: str = "local") -> dict[str, Any]:
    transport: dict[str, Any] = {"kind": kind, "env": {"SLURM_CONF": str(conf)}}
    if kind == "ssh":
        transport["host"] = "login1"
    return _record(transport=transport)


def test_a_records_client_conf_is_the_sites_or_a_file_nobody_else_can_change(
    tmp_path: Path,
) -> None:
    """slurm.conf names plugin folders: a record may point ``status`` only at the site's own
    configuration or at a local file that root or the user alone may change."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    conf.chmod(0o644)
    assert check_record(_conf_record(conf)).transport.env == {"SLURM_CONF": str(conf)}
    conf.chmod(0o664)  # someone else (the group) could rewrite it
    with pytest.raises(ConfigError, match="transport.env.SLURM_CONF: .* only root or you"):
        check_record(_conf_record(conf))
    conf.chmod(0o644)
    with pytest.raises(ConfigError, match="transport.env.SLURM_CONF"):  # not checkable remotely
        check_record(_conf_record(conf, kind="ssh"))
    with pytest.raises(ConfigError, match="transport.env.SLURM_CONF"):
        check_record(_conf_record(tmp_path / "absent.conf"))
    link = tmp_path / "dir"
    link.mkdir()
    with pytest.raises(ConfigError, match="transport.env.SLURM_CONF"):  # not a regular file
        check_record(_conf_record(link))


@pytest.mark.parametrize(
    "over, field",
    [
        ({"transport": {"kind": "local", "env": {"BASH_ENV": "/tmp/p.sh"}}}, "transport.env"),
        ({"transport": {"kind": "local", "env": {"LD_PRELOAD": "/tmp/p.so"}}}, "transport.env"),
        ({"transport": {"kind": "local", "env": {"SLURM_CONF": "$(id)"}}}, "transport.env"),
        ({"transport": {"kind": "ssh", "host": "-oProxyCommand=x"}}, "transport.host"),
        ({"transport": {"kind": "ssh", "host": "h", "port": 0}}, "transport.port"),
        ({"job_id": "1; rm -rf ~"}, "job id"),
        ({"name": "../../x"}, "job name"),
        ({"site": "Local Site"}, "site"),
        ({"scheduler": "../../evil"}, "scheduler"),
        ({"workdir": "relative"}, "workdir"),
        ({"workdir": "/tmp\n/x"}, "workdir"),
        ({"log_names": ["../../etc/shadow", None]}, "log_names"),
        ({"array": True}, "array"),
        ({"extra": 1}, "extra"),
    ],
)
def test_tampered_records_are_refused_naming_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_record(_record(**over))
    assert field in str(err.value)


# -- the installed hpcenv, as a process ---------------------------------------------------


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ) | env,
        timeout=120,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_process_tuning_file_with_bash_env_exits_2(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    payload = tmp_path / "payload.sh"
    payload.write_text(f"touch {marker}\n")
    from hpcenv.jobs.placement import place
    from hpcenv.tuning.apply import layout_of

    layout = layout_of(place(load_site("generic-slurm"), 1, None))
    tuning = tmp_path / "tuning"
    path = tuning / "generic-slurm" / f"{layout.key}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_tuning_doc("generic-slurm", layout, {"BASH_ENV": str(payload)})))
    env = {"HPCENV_TUNING_DIR": str(tuning), "HPCENV_CACHE": str(tmp_path / "cache")}
    args = ("submit", "--site", "generic-slurm", "--image", "/tmp/x.sif", "--dry-run")
    line = one_line(run(*args, "--", "true", env=env))
    assert str(path) in line and "BASH_ENV" in line
    line = one_line(run("tune", "--site", "generic-slurm", "--show", env=env))
    assert "BASH_ENV" in line
    assert not marker.exists()


def test_process_site_file_with_bash_env_exits_2(tmp_path: Path) -> None:
    path = _evil_site(tmp_path)
    line = one_line(run("submit", "--site", str(path), "--no-container", "--dry-run", env={}))
    assert f"{path}:" in line and "tuning.BASH_ENV" in line


@pytest.mark.parametrize(
    "over",
    [
        {"transport": {"kind": "local", "env": {"BASH_ENV": "{payload}"}}},
        {"transport": {"kind": "local", "env": {"ENV": "{payload}", "SLURM_CONF": "/x"}}},
        {"scheduler": "slurm; sh {payload}"},
        {"workdir": "/tmp/$(sh {payload})"},
    ],
)
def test_process_tampered_record_exits_2_and_runs_nothing(
    tmp_path: Path, over: dict[str, Any]
) -> None:
    marker = tmp_path / "PWNED"
    payload = tmp_path / "payload.sh"
    payload.write_text(f"touch {marker}\n")
    jobs = tmp_path / "cache" / "jobs"
    jobs.mkdir(parents=True)
    text = json.dumps(_record(**over)).replace("{payload}", str(payload))
    (jobs / "local-somehost-123.json").write_text(text)
    env = {"HPCENV_CACHE": str(tmp_path / "cache")}
    for command in (["status", "123"], ["logs", "123"], ["cancel", "123"]):
        line = one_line(run(*command, env=env))
        assert "job record" in line and "refused" in line
    assert not marker.exists()


def test_process_option_replacing_output_exits_2_unless_overridden(tmp_path: Path) -> None:
    env = {"HPCENV_CACHE": str(tmp_path / "cache")}
    args = ("submit", "--site", "frontier", "-A", "stf007", "--no-container", "--dry-run")
    line = one_line(run(*args, "--option=--output=x", "--", "true", env=env))
    assert "--output=x" in line and "--output" in line and "--option-override" in line
    proc = run(*args, "--option=--output=x", "--option-override", "--", "true", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --output=x" in proc.stdout
