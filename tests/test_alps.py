"""CSCS Alps (Clariden, GH200 aarch64): the site's output against its documentation.

What each assertion holds is in docs/sites/alps-clariden.md with its cscs-docs source (read
2026-11-24); the EDF is read back as TOML, as the Container Engine reads it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hpcenv.errors import ConfigError, HpcenvError
from hpcenv.jobs import JobSpec, default_image
from hpcenv.jobs.edf import edf_text, edf_value, mount, toml_string
from hpcenv.jobs.render import plan_job
from hpcenv.jobs.runtimes.cscs_ce import EDF_STEP
from hpcenv.recipe import load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import load_site

ROOT = Path(__file__).resolve().parents[1]
HPCENV = Path(sys.executable).with_name("hpcenv")
PAGE = ROOT / "docs" / "sites" / "alps-clariden.md"


def _plan(recipe: str = "horovod-gpu", nodes: int = 2):
    site = load_site("alps-clariden")
    job = JobSpec(name="train", command=["python3", "train.py"], nodes=nodes, account="g123")
    return site, plan_job(site, job, default_image(site, recipe), submitting=True)


def _edf(plan) -> dict:
    (file,) = [f for f in plan.files if f.name == EDF_STEP]
    return tomllib.loads(file.text)


def test_job_launches_srun_environment_with_the_edf_step_file() -> None:
    """run.md: srun --environment=<absolute EDF path>; mpich.md: --mpi=pmi2; pytorch.md: one
    rank per GH200 (--ntasks-per-node=4), every rank sees the node's four GPUs and picks one by
    LOCAL_RANK (--gpus-per-node=4, as llm-fine-tuning.md asks; no per-task binding)."""
    _, plan = _plan()
    launch = plan.launch
    assert launch is not None and launch.launcher == "srun"
    head = list(launch.head)
    assert "--environment=$HPCENV_STEPS/edf.toml" in head
    assert {"--mpi=pmi2", "--ntasks-per-node=4", "--gpus-per-node=4"} <= set(head)
    assert not [w for w in head if w.startswith(("--gpus-per-task", "--gpu-bind"))]
    assert launch.prefix == ()  # the container is an srun option, not a command prefix
    assert "--environment" not in " ".join(plan.directives)  # not as #SBATCH (discouraged)
    assert plan.runtime == "cscs-ce"


def test_edf_follows_cscs_docs() -> None:
    """edf.md entries; resource-hook.md: aws-ofi-nccl hook with the cuda-dl variant; variables
    in ${VAR} form; the job's variables in [env] (the image's would win otherwise)."""
    site, plan = _plan()
    edf = _edf(plan)
    assert edf["image"] == "${SCRATCH}/hpcenv/images/horovod-gpu-alps-clariden.sqsh"
    assert edf["workdir"] == "${SCRATCH}/hpcenv-jobs"
    assert "${SCRATCH}/hpcenv-jobs:${SCRATCH}/hpcenv-jobs" in edf["mounts"]
    hooks = edf["annotations"]["com"]["hooks"]["aws_ofi_nccl"]
    assert hooks == {"enabled": "true", "variant": "cuda-dl"}
    env = edf["env"]
    for name in ("CUDA_CACHE_DISABLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        assert env[name] == "${" + name + ":-}"
    assert plan.env()["MPICH_GPU_SUPPORT_ENABLED"] == "0"  # pytorch.md: no GPU-aware MPI
    # The hook sets NCCL's and libfabric's variables; hpcenv does not repeat them.
    assert not any(n.startswith(("NCCL_NET", "FI_CXI")) for n in plan.env())
    text = next(f.text for f in plan.files if f.name == EDF_STEP)
    assert not re.search(r"\$(?!\{|\$)", text)  # every expansion in braces (pytorch.md)


def test_images_are_aarch64_with_cuda_torch_from_pytorch_index() -> None:
    """PyPI's aarch64 torch is CPU-only (pytorch#160162, #168065): the CUDA build is asked for by
    its local label from download.pytorch.org; the platform is linux/arm64."""
    site = load_site("alps-clariden")
    for recipe in ("torch-gpu", "horovod-gpu"):
        lock = resolve(site, load_recipe(recipe))
        cuda = lock.components["cuda"].version
        torch = lock.components["torch"].version
        assert lock.build["platform"] == "linux/arm64"
        assert "torch-cuda-aarch64" in lock.components["cuda"].rules
        nodot = cuda.replace(".", "")
        dockerfile = render(lock, site).dockerfile
        assert f"whl/cu{nodot} torch=={torch}+cu{nodot}" in dockerfile
        assert "nvidia/cuda:" in dockerfile and "ubuntu22.04" in dockerfile


def test_torch_without_aarch64_cuda_wheels_is_refused() -> None:
    """torch 2.6 had no released aarch64 CUDA wheel (2.7 released 12.8 only, test-infra#6492)."""
    site = load_site("alps-clariden")
    with pytest.raises(HpcenvError, match="aarch64 CUDA wheels"):
        resolve(site, load_recipe("torch-gpu"), {"torch": "2.6.0"})


@pytest.mark.parametrize(
    "value",
    ['a"b', "back\\slash", "new\nline", "tab\there", "bell\x07", '"]\n[annotations]\nx = "y'],
)
def test_toml_strings_read_back_exactly(value: str) -> None:
    assert tomllib.loads(f"k = {toml_string(value)}")["k"] == value


def test_edf_text_refuses_keys_that_are_not_dotted_names() -> None:
    with pytest.raises(ConfigError, match="dotted key"):
        edf_text(image="x", workdir="/w", mounts=[], env={}, annotations={"a] b": "1"})
    with pytest.raises(ConfigError, match="variable name"):
        edf_text(image="x", workdir="/w", mounts=[], env={"A=B": "1"}, annotations={})


def test_shell_paths_become_edf_expansions() -> None:
    assert edf_value("$SCRATCH/x/${USER}/y", "p") == "${SCRATCH}/x/${USER}/y"
    assert edf_value("/a/$1/b$", "p") == "/a/$$1/b$$"  # literal dollars stay literal
    with pytest.raises(ConfigError, match="SOURCE:DESTINATION"):
        mount("/a:b")


def test_every_provenance_entry_points_at_a_section_of_the_page() -> None:
    site = load_site("alps-clariden")
    page = PAGE.read_text()
    anchors = {"#" + m.lower().replace(" ", "-") for m in re.findall(r"^## (.+)$", page, re.M)}
    entries = {**site.provenance.verified, **site.provenance.assumed}
    assert entries
    for field, where in entries.items():
        m = re.match(r"docs/sites/alps-clariden\.md(#[a-z-]+) \(", where)
        assert m, f"{field}: {where}"
        assert m.group(1) in anchors, f"{field}: no section {m.group(1)}"
    assert "80abed1" in page and "2026-11-24" in page


def test_submit_dry_run_as_a_process() -> None:
    proc = subprocess.run(
        [str(HPCENV), "submit", "--site", "alps-clariden", "--recipe", "torch-gpu"]
        + ["--dry-run", "-A", "g123", "--", "python3", "train.py"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cat >\"$HPCENV_STEPS/edf.toml\" <<'HPCENV_EDF'" in proc.stdout
    assert (
        '"--environment=$HPCENV_STEPS/edf.toml" sh "$HPCENV_STEPS/rank-env.sh" python3 train.py'
        in (proc.stdout)
    )  # rank-env.sh runs inside the CE container (srun starts it there)


def test_annotations_on_another_runtime_exit_2(tmp_path: Path) -> None:
    text = (ROOT / "site-configs" / "perlmutter.yaml").read_text()
    text = text.replace("  kind: podman-hpc\n", '  kind: podman-hpc\n  annotations: {a.b: "1"}\n')
    site = tmp_path / "bad.yaml"
    site.write_text(text)
    proc = subprocess.run(
        [str(HPCENV), "sites", "validate", str(site)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "runtime.annotations applies to the cscs-ce runtime, not podman-hpc" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_job_runs_on_alps() -> None:
    pytest.skip(
        "needs a CSCS Alps GH200 node with the Container Engine (srun --environment) and an "
        "account; none is reachable from here, so the job is checked against its documentation"
    )
