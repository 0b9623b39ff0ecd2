"""Every resolver rule: a case that passes and a case that conflicts (message names both sides,
the rule and its source)."""

from __future__ import annotations

import pytest

from hpcenv.errors import ConfigError, ConflictError
from hpcenv.knowledge import kb, rules
from hpcenv.lock import Lock
from hpcenv.recipe import load_recipe
from hpcenv.resolver import parse_overrides, resolve
from hpcenv.site import load_site


def lock(site: str, recipe: str, *sets: str) -> Lock:
    return resolve(load_site(site), load_recipe(recipe), parse_overrides(sets))


def conflict(site: str, recipe: str, *sets: str) -> str:
    with pytest.raises(ConflictError) as err:
        lock(site, recipe, *sets)
    return str(err.value)


def assert_rule(message: str, rule_id: str, *names: str) -> None:
    assert f"rule {rule_id}" in message
    assert kb()["rules"][rule_id]["source"] in message
    for name in names:
        assert name in message


def test_every_rule_has_a_source() -> None:
    for rule_id, rule in kb()["rules"].items():
        assert rule.get("source"), rule_id


# torch <-> CUDA
def test_torch_cuda_pass() -> None:
    lk = lock("perlmutter", "horovod-gpu", "torch=2.4.1")
    assert lk.version("cuda") in ("11.8", "12.1", "12.4")
    assert lk.version("cuda") == "12.4"  # newest the 550 driver runs


def test_torch_cuda_conflict() -> None:
    msg = conflict("perlmutter", "horovod-gpu", "torch=2.5.1", "cuda=11.7")
    assert_rule(msg, "torch-cuda", "torch 2.5.1", "cuda 11.7 (--set)", "11.8, 12.1, 12.4")


# image CUDA <-> site driver
def test_cuda_driver_pass() -> None:
    assert lock("summit", "horovod-gpu").version("cuda").startswith("11.")


def test_cuda_driver_conflict() -> None:
    msg = conflict("summit", "horovod-gpu", "cuda=12.4")
    assert_rule(msg, "cuda-driver", "cuda 12.4 (--set)", "gpu.driver 450.80.02", "525.60.13")


# NCCL <-> CUDA
def test_nccl_cuda_pass() -> None:
    lk = lock("summit", "horovod-gpu")
    assert lk.version("nccl") == "2.16.5"
    assert lk.components["nccl"].options["package"] == "libnccl2=2.16.5-1+cuda11.8"


def test_nccl_cuda_conflict() -> None:
    msg = conflict("summit", "horovod-gpu", "nccl=2.21.5")
    assert_rule(msg, "nccl-cuda", "nccl 2.21.5 (--set)", "cuda 11.8", "12.4")


# torch <-> torch-ccl <-> IPEX <-> oneCCL
def test_torch_ccl_ipex_oneccl_pass() -> None:
    lk = lock("aurora", "torch-ccl")
    mm = lk.version("torch")[:3]
    assert lk.version("torch-ccl").startswith(mm) and lk.version("ipex").startswith(mm)
    assert lk.version("oneccl") == "2021.11"


def test_torch_ccl_conflict() -> None:
    msg = conflict("aurora", "torch-ccl", "torch=2.3.1", "torch-ccl=2.5.0")
    assert_rule(msg, "torch-ccl-torch", "torch-ccl 2.5.0 (--set)", "torch 2.3.1")


def test_ipex_conflict() -> None:
    msg = conflict("aurora", "torch-ccl", "torch=2.3.1", "ipex=2.1.40")
    assert_rule(msg, "ipex-torch", "ipex 2.1.40 (--set)")


def test_oneccl_conflict() -> None:
    msg = conflict("aurora", "torch-ccl", "oneccl=2021.12")
    assert_rule(msg, "oneccl-torch-ccl", "oneccl 2021.12 (--set)", "2021.11")


def test_torch_ccl_absent_for_new_torch_is_reasoned() -> None:
    lk = lock("local", "horovod-cpu")
    assert "torch-ccl" not in lk.components
    assert "no torch-ccl release fits (2.7.0, " in lk.excluded["torch-ccl"]
    assert "same major.minor as torch (2.13)" in lk.excluded["torch-ccl"]
    msg = conflict("local", "torch-ccl")
    assert_rule(msg, "torch-ccl-torch", "torch 2.13.0")


# Horovod <-> torch (C++17)
def test_horovod_cxx17_pass() -> None:
    new = lock("local", "horovod-cpu").components["horovod"]
    assert "cxx17_patch" in new.options and new.version == "0.28.1"
    old = lock("summit", "horovod-gpu").components["horovod"]
    assert "cxx17_patch" not in old.options
    assert old.options["HOROVOD_GPU_OPERATIONS"] == "NCCL"


def test_horovod_cxx17_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "horovod=0.27.0")
    assert_rule(msg, "horovod-torch-cxx17", "horovod 0.27.0 (--set)", "torch 2.13.0")


# daal4py distributed needs an MPICH-ABI MPI
def test_daal4py_mpich_abi_pass() -> None:
    local = lock("local", "daal4py").components["daal4py"]
    assert local.options["side_mpi"].startswith("mpich@")
    frontier = lock("frontier", "daal4py")
    assert frontier.components["mpi"].implementation == "mpich"
    assert "side_mpi" not in frontier.components["daal4py"].options


def test_daal4py_mpich_abi_conflict() -> None:
    msg = conflict("summit", "daal4py")
    assert_rule(msg, "daal4py-mpich-abi", "spectrum-mpi@10.4", "bind model")


# bind model: image MPI in the host MPI's ABI family
def test_bind_abi_pass() -> None:
    summit = lock("summit", "horovod-gpu").components["mpi"]
    assert (summit.implementation, summit.options["abi"]) == ("openmpi", "openmpi")
    assert lock("frontier", "horovod-gpu").components["mpi"].implementation == "mpich"


def test_bind_abi_conflict() -> None:
    msg = conflict("frontier", "horovod-gpu", "mpi=openmpi@4.1.4")
    assert_rule(msg, "mpi-bind-abi", "mpi openmpi@4.1.4 (--set)", "cray-mpich@8.1.31")


# hybrid model: same PMI flavour and major version as the host
def test_hybrid_pmi_pass() -> None:
    lk = lock("local", "horovod-cpu")
    assert lk.version("pmix").startswith("4.")
    assert lk.components["mpi"].implementation == "openmpi"


def test_hybrid_pmi_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "pmix=3.2.5")
    assert_rule(msg, "mpi-hybrid-pmi", "pmix 3.2.5 (--set)", "pmix@4")


def test_hybrid_family_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "mpi=mpich@4.0.2")
    assert_rule(msg, "mpi-hybrid-family", "mpich@4.0.2", "openmpi@4.1.4")


# Open MPI 5 needs PMIx >= 4.2
def test_openmpi5_pmix_pass() -> None:
    lk = lock("local", "horovod-cpu", "mpi=openmpi@5.0.6", "pmix=4.2.9")
    assert lk.components["mpi"].source == "source"


def test_openmpi5_pmix_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "mpi=openmpi@5.0.6", "pmix=4.1.2")
    assert_rule(msg, "openmpi5-pmix", "pmix 4.1.2 (--set)", "openmpi@5.0.6", "4.2")


# site architecture: wheels and base images
def test_arch_pass() -> None:
    lk = lock("summit", "horovod-gpu")
    assert lk.build["platform"] == "linux/ppc64le"
    assert lk.components["torch"].source == "conda (Open-CE)"
    assert lk.version("torch") == "2.0.1"


def test_arch_conflict() -> None:
    msg = conflict("summit", "horovod-gpu", "torch=2.2.2")
    assert_rule(msg, "torch-arch", "torch 2.2.2 (--set)", "arch ppc64le")


# OS python
def test_os_python_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "python=3.10")
    assert_rule(msg, "os-python", "python 3.10 (--set)", "debian-12")


def test_torch_python_pass() -> None:
    assert lock("frontier", "horovod-gpu").version("python") == "3.10"


def test_torch_python_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    # every real torch row supports both image pythons (3.10, 3.11): use a future row
    old = rules()["torch-python"]
    table = dict(old.table, **{"2.13": ["3.12", "3.13"]})
    monkeypatch.setitem(rules(), "torch-python", old.model_copy(update={"table": table}))
    msg = conflict("local", "horovod-cpu", "torch=2.13.0")
    assert_rule(msg, "torch-python", "torch 2.13.0 (--set)", "python 3.11")


def test_unknown_set_name() -> None:
    with pytest.raises(ConfigError, match="unknown component"):
        parse_overrides(["pytorch=2.0"])


def test_gpu_recipe_on_cpu_site() -> None:
    with pytest.raises(ConflictError, match="needs GPUs"):
        lock("local", "horovod-gpu")


def test_lock_records_reasons_and_rules() -> None:
    data = lock("local", "horovod-cpu").to_dict()
    assert set(data) >= {"site", "recipe", "components"}
    for name, comp in data["components"].items():
        assert comp["version"] and comp["reason"], name
    assert data["components"]["mpi"]["implementation"] == "openmpi"
    assert all(src for src in data["rules"].values())
