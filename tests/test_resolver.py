"""Every resolver rule: a case that passes and a case that conflicts (message names both sides,
the rule and its source)."""

from __future__ import annotations

import pytest

from hpcenv.errors import ConfigError, ConflictError
from hpcenv.knowledge import kb, rules
from hpcenv.lock import Lock
from hpcenv.recipe import load_recipe
from hpcenv.resolver import parse_overrides, resolve
from hpcenv.site import HostMpi, Site, load_site


def ppc64le_cluster(model: str = "hybrid") -> Site:
    """Summit's node, GPUs and driver with an Open MPI host: the CUDA 11 / Open-CE / ppc64le
    rules, exercised where an image is possible (Summit itself refuses images, see below)."""
    mpi = (
        HostMpi(spec="openmpi@4.1.4", pmi="pmix@4", model="hybrid", fabric="ucx")
        if model == "hybrid"
        else HostMpi(
            spec="openmpi@4.1.4", pmi="pmix@4", model="bind", fabric="ucx", root="/opt/openmpi"
        )
    )
    return ubuntu_summit(f"ppc64le-{model}", mpi)


def ubuntu_summit(name: str, mpi: HostMpi) -> Site:
    """Summit's node on an Ubuntu base (apt) with another MPI model."""
    summit = load_site("summit")
    return summit.model_copy(
        update={"name": name, "mpi": mpi, "os": "ubuntu-22.04", "defaults": {"python": "3.10"}}
    )


def lock(site: str | Site, recipe: str, *sets: str) -> Lock:
    site_obj = load_site(site) if isinstance(site, str) else site
    return resolve(site_obj, load_recipe(recipe), parse_overrides(sets))


def conflict(site: str | Site, recipe: str, *sets: str) -> str:
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
    assert lock(ppc64le_cluster(), "horovod-gpu").version("cuda").startswith("11.")


def test_cuda_driver_conflict() -> None:
    msg = conflict(ppc64le_cluster(), "horovod-gpu", "cuda=12.4")
    assert_rule(msg, "cuda-driver", "cuda 12.4 (--set)", "gpu.driver 450.80.02", "525.60.13")


# NCCL <-> CUDA
def test_nccl_cuda_pass() -> None:
    lk = lock("perlmutter", "horovod-gpu", "torch=2.4.1")
    assert lk.version("nccl") == "2.21.5"
    assert lk.components["nccl"].options["package"] == "libnccl2=2.21.5-1+cuda12.4"


def test_nccl_cuda_conflict() -> None:
    msg = conflict("perlmutter", "horovod-gpu", "torch=2.4.1", "nccl=2.23.4")
    assert_rule(msg, "nccl-cuda", "nccl 2.23.4 (--set)", "cuda 12.4", "12.6")


def test_nccl_with_open_ce_torch_is_the_channels() -> None:
    """ppc64le: torch's conda packages bring NCCL; no apt NCCL beside it, and no pin of it."""
    lk = lock(ppc64le_cluster(), "horovod-gpu")
    assert (lk.version("nccl"), lk.components["nccl"].source) == ("conda", "conda (Open-CE)")
    with pytest.raises(ConfigError, match="nccl comes with torch's conda packages"):
        lock(ppc64le_cluster(), "horovod-gpu", "nccl=2.16.5")


# torch <-> torch-ccl <-> IPEX <-> oneCCL
def test_torch_ccl_ipex_oneccl_pass() -> None:
    lk = lock("aurora", "torch-ccl", "torch=2.3.1")
    assert lk.components["torch"].options["index"].startswith("https://pytorch-extension.intel")
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
    msg = conflict("aurora", "torch-ccl", "torch=2.3.1", "oneccl=2021.12")
    assert_rule(msg, "oneccl-torch-ccl", "oneccl 2021.12 (--set)", "2021.11")


def test_torch_ccl_absent_for_new_torch_is_reasoned() -> None:
    lk = lock("local", "horovod-cpu")
    assert "torch-ccl" not in lk.components
    assert "no torch-ccl release fits (2.7.0, " in lk.excluded["torch-ccl"]
    assert "same major.minor as torch (2.13)" in lk.excluded["torch-ccl"]
    msg = conflict("local", "torch-ccl")
    assert_rule(msg, "torch-ccl-torch", "torch 2.13.0")


# oneCCL from PyPI for Horovod's CCL operations (recipe horovod-ccl)
def test_oneccl_pypi_pass() -> None:
    """Newest PyPI oneCCL whose wheels work alone; the newer ones lost with their rules; the
    horovod-cpu layers are kept (no oneccl there) and Gloo stays built for run-time choice."""
    lk = lock("local", "horovod-ccl")
    ccl, hvd = lk.components["oneccl"], lk.components["horovod"]
    assert ccl.version == "2021.16.2" and set(ccl.rules) == {"oneccl-pypi", "oneccl-pypi-arch"}
    assert set(ccl.rejected) == {"2022.2.0", "2022.0.0", "2021.17.2"}
    assert all("oneccl-pypi" in why for why in ccl.rejected.values())
    assert ccl.options == {
        "package": "oneccl-cpu-devel==2021.16.2",
        "impi_rt": "impi-rt==2021.16.*",
        "prefix": "/opt/oneccl",
        "CCL_ATL_TRANSPORT": "ofi",
        "CCL_ATL_SHM": "1",  # issue 39: libfabric's shm between ranks of one node
    }
    assert (
        hvd.options["HOROVOD_CPU_OPERATIONS"] == "CCL" and hvd.options["CCL_ROOT"] == "/opt/oneccl"
    )
    assert hvd.options["HOROVOD_WITH_GLOO"] == "1" and hvd.options["operations"] == "mpi,gloo,ccl"
    assert "horovod-oneccl" in hvd.rules and "horovod-ccl" in hvd.rules
    assert "oneccl" not in lock("local", "horovod-cpu").components


def test_oneccl_pypi_conflict() -> None:
    msg = conflict("local", "horovod-ccl", "oneccl=2022.2.0")
    assert_rule(msg, "oneccl-pypi", "oneccl 2022.2.0 (--set)", "libfabric>=2.6", "libccl.so.2")
    assert "and arch" not in msg and "and oneccl.from pypi (recipe horovod-ccl)" in msg
    msg = conflict("local", "horovod-ccl", "oneccl=2021.17.2")
    assert_rule(msg, "oneccl-pypi", "__intel_cpu_features_init_x")
    msg = conflict("summit", "horovod-ccl")
    assert_rule(msg, "oneccl-pypi-arch", "arch ppc64le", "x86_64 only")


def test_horovod_oneccl_conflict() -> None:
    """An unknown oneCCL allowed with '!' passes the wheel rule but not the build table."""
    msg = conflict("local", "horovod-ccl", "oneccl=2021.13.1!")
    assert_rule(msg, "horovod-oneccl", "oneccl 2021.13.1 (--set)", "0.28.1", "2021.16.2")
    assert msg.count("\n") == 0, msg  # one conflict, one line


def test_horovod_oneccl_pass_older_pin() -> None:
    lk = lock("local", "horovod-ccl", "oneccl=2021.14.1")
    assert lk.components["oneccl"].options["impi_rt"] == "impi-rt==2021.14.*"
    assert "pinned by --set" in lk.components["oneccl"].reason


# Horovod <-> torch (C++17)
def test_horovod_cxx17_pass() -> None:
    new = lock("local", "horovod-cpu").components["horovod"]
    assert "cxx17_patch" in new.options and new.version == "0.28.1"
    old = lock(ppc64le_cluster(), "horovod-gpu").components["horovod"]
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
    msg = conflict(ppc64le_cluster("bind"), "daal4py")
    assert_rule(msg, "daal4py-mpich-abi", "openmpi@4.1.4", "bind model")


# bind model: image MPI in the host MPI's ABI family
def test_bind_abi_pass() -> None:
    ompi = lock(ppc64le_cluster("bind"), "horovod-gpu").components["mpi"]
    assert (ompi.implementation, ompi.options["abi"]) == ("openmpi", "openmpi")
    assert lock("frontier", "torch-gpu").components["mpi"].implementation == "mpich"


def test_bind_abi_conflict() -> None:
    msg = conflict("frontier", "torch-gpu", "mpi=openmpi@4.1.4")
    assert_rule(msg, "mpi-bind-abi", "mpi openmpi@4.1.4 (--set)", "cray-mpich@9.1.0")


# Cray MPICH: the image carries the MPICH the site names ABI compatible, built from source
def test_cray_mpich_image_mpich_pass() -> None:
    frontier = lock("frontier", "torch-gpu").components["mpi"]
    assert (frontier.implementation, frontier.version, frontier.source) == (
        "mpich",
        "4.1.3",
        "source",
    )
    assert "--with-device=ch4:ofi" in frontier.options["configure"]
    assert "--enable-shared" in frontier.options["configure"]
    perlmutter = lock("perlmutter", "torch-gpu").components["mpi"]
    assert (perlmutter.version, perlmutter.source) == ("3.4.3", "source")  # not apt (NERSC)


# Spectrum MPI under the bind model: no image MPI built elsewhere can take it -> refused, never
# Open MPI; Summit itself is site-build (the image is built there against the host MPI)
def test_image_mpi_host_only_conflict() -> None:
    bind = load_site("summit").mpi.model_copy(update={"model": "bind"})
    for recipe in ("horovod-gpu", "torch-gpu", "daal4py", "horovod-cpu"):
        msg = conflict(ubuntu_summit("summit-bind", bind), recipe)
        assert_rule(msg, "image-mpi-host-only", "spectrum-mpi@10.4", "bind model")
        assert "mpi.model: site-build" in msg


def test_image_mpi_host_only_pass() -> None:
    assert lock(ppc64le_cluster(), "horovod-gpu").components["mpi"].implementation == "openmpi"
    summit = lock("summit", "horovod-gpu")  # site-build: the rule does not apply
    assert "image-mpi-host-only" not in summit.rules


# site-build (Summit as OLCF documented): no image MPI, MPI programs built against the host's
def test_site_build_mpi_is_the_host_mpi() -> None:
    lk = lock("summit", "horovod-gpu")
    mpi = lk.components["mpi"]
    assert (mpi.implementation, mpi.version, mpi.source) == (
        "spectrum-mpi",
        "10.4",
        "host (mounted at build time)",
    )
    assert mpi.options["root"] == "$MPI_ROOT" and mpi.options["abi"] == "openmpi"
    assert "mpi-site-build" in mpi.rules and "mpi-site-build" in lk.rules
    assert "containers_on_summit.rst" in lk.rules["mpi-site-build"]
    assert "pmix" not in lk.components and "ucx" not in lk.components  # the host MPI's own
    assert lk.components["mpi4py"].options == {
        "MPICC": "$MPI_ROOT/bin/mpicc",
        "CFLAGS": "python's CFLAGS -g0",
    }
    assert lk.components["mpi4py"].source == "pip (source)"
    assert lk.mpi_model == "site-build"


def test_site_build_torch_from_open_ce() -> None:
    lk = lock("summit", "horovod-gpu")
    torch = lk.components["torch"]
    assert (torch.version, torch.source) == ("2.0.1", "conda (Open-CE)")  # no ppc64le wheels
    assert lk.version("cuda") == "11.8"  # Open-CE 1.10 builds 11.8 and 12.2; driver 450 -> 11.x
    assert lk.components["nccl"].source == "conda (Open-CE)"
    assert lk.components["horovod"].options["HOROVOD_NCCL_HOME"] == "/opt/venv"
    assert lk.version("python") == "3.9"  # OLCF's default open-ce/1.10.0-py39 module


def test_site_build_pmix_pin_is_not_in_the_stack() -> None:
    with pytest.raises(ConfigError, match="has no pmix"):
        lock("summit", "horovod-gpu", "pmix=4.2.2")


# Horovod on ROCm >= 6 (Frontier) and on Intel GPUs (Aurora): refused, not CPU-only
def test_horovod_rocm_conflict() -> None:
    msg = conflict("frontier", "horovod-gpu")
    assert_rule(msg, "horovod-rocm", "rocm 7.1.1", "horovod/horovod#4044", "torch-gpu")


def test_horovod_rocm_pass() -> None:
    rocm5 = load_site("frontier").model_copy(
        update={"gpu": load_site("frontier").gpu.model_copy(update={"rocm": "5.7.1"})}
    )
    lk = lock(rocm5, "horovod-gpu", "torch=2.3.1")
    assert lk.components["horovod"].options["HOROVOD_GPU"] == "ROCM"


def test_horovod_xpu_conflict() -> None:
    msg = conflict("aurora", "horovod-gpu")
    assert_rule(msg, "horovod-xpu", "accelerator xpu", "xccl")
    assert "horovod-cpu" not in msg


def test_horovod_cpu_on_aurora_is_cpu_by_name() -> None:
    lk = lock("aurora", "horovod-cpu")
    assert lk.components["torch"].options["variant"] == "cpu"


# upstream torch XPU wheels (Aurora): xccl backend, download.pytorch.org/whl/xpu
def test_torch_xpu_pass() -> None:
    torch = lock("aurora", "torch-gpu").components["torch"]
    assert (torch.version, torch.options["variant"], torch.options["dist_backend"]) == (
        "2.10.0",
        "xpu",
        "xccl",
    )


def test_torch_xpu_conflict() -> None:
    msg = conflict("aurora", "torch-gpu", "torch=2.5.1")
    assert_rule(msg, "torch-xpu", "torch 2.5.1 (--set)", "2.10.0, 2.9.1, 2.8.0")


# the NCCL/RCCL network plugin: from the host where the site injects it
def test_network_plugin_pass() -> None:
    frontier = lock("frontier", "torch-gpu").components["net-plugin"]
    assert (frontier.source, frontier.version) == ("host", "1.19.2")
    assert "module load rccl-net-plugin" in frontier.reason
    perlmutter = lock("perlmutter", "torch-gpu").components["net-plugin"]
    assert perlmutter.source == "host" and "podman-hpc run --nccl" in perlmutter.reason
    assert "net-plugin" not in lock("local", "horovod-cpu").components


# nvidia/cuda base image tags: cuDNN 9 images are -cudnn-, cuDNN 8 ones -cudnn8-
def test_cuda_base_image_tags() -> None:
    assert lock("perlmutter", "torch-gpu", "torch=2.4.1").build["base_image"] == (
        "docker.io/nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    )
    assert lock("perlmutter", "torch-gpu", "torch=2.4.1", "cuda=11.8").build["base_image"] == (
        "docker.io/nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04"
    )
    # ppc64le: NVIDIA has no Ubuntu CUDA image; the site must name a base that exists
    site = ppc64le_cluster()
    no_base = site.model_copy(update={"build": site.build.model_copy(update={"base_image": None})})
    with pytest.raises(ConfigError, match="no nvidia/cuda ubuntu-22.04 image for ppc64le"):
        lock(no_base, "horovod-gpu")


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
    lk = lock(ppc64le_cluster(), "horovod-gpu")
    assert lk.build["platform"] == "linux/ppc64le"
    assert lk.components["torch"].source == "conda (Open-CE)"
    assert lk.version("torch") == "2.0.1"


def test_arch_conflict() -> None:
    msg = conflict(ppc64le_cluster(), "horovod-gpu", "torch=2.2.2")
    assert_rule(msg, "torch-arch", "torch 2.2.2 (--set)", "arch ppc64le")


# OS python
def test_os_python_conflict() -> None:
    msg = conflict("local", "horovod-cpu", "python=3.10")
    assert_rule(msg, "os-python", "python 3.10 (--set)", "debian-12")


def test_torch_python_pass() -> None:
    assert lock("frontier", "torch-gpu").version("python") == "3.10"


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


# current stacks (2026): torch 2.14 / CUDA 13 / ROCm 7.x rows, each with its source
def test_current_stacks_2026() -> None:
    lk = lock("perlmutter", "torch-gpu")
    assert (lk.version("torch"), lk.version("cuda"), lk.version("nccl")) == (
        "2.14.0",
        "13.0",
        "2.30.7",
    )
    assert lk.components["torch"].rejected == {}  # 2.14.0 is the newest known release
    assert (
        lock("perlmutter", "torch-gpu", "torch=2.12.1").version("cuda") == "13.0"
    )  # no 12.8 in 2.12
    msg = conflict("perlmutter", "torch-gpu", "torch=2.12.1", "cuda=12.8")
    assert_rule(msg, "torch-cuda", "12.6, 13.0, 13.2", "pytorch#178665")
    msg = conflict("frontier", "torch-gpu", "torch=2.13.0")  # ROCm 7.2 wheels, Frontier runs 7.1.1
    assert_rule(msg, "torch-rocm", "torch 2.13.0", "gpu.rocm 7.1.1", "7.2")
