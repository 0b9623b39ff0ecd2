"""The MPI-5 standard ABI decision (hpcenv/mpi_abi.py) and the job's ABI injection, as data: the
rules mpi-abi-providers and mpi-abi-programs, one line why not for every kind of site, and the
lock's record where it fits. tests/test_mpi_abi.py shows the same facts on the real libraries."""

from __future__ import annotations

import pytest

from hpcenv import mpi_abi
from hpcenv.jobs.bindmodel import STANDARD_ABI, preflight_args, site_mpi, standard_abi
from hpcenv.recipe import Recipe, load_recipe
from hpcenv.resolver import Resolver
from hpcenv.site import Site, load_site


def _with_mpi(site: str, spec: str) -> Site:
    s = load_site(site)
    return s.model_copy(update={"mpi": s.mpi.model_copy(update={"spec": spec})})


MPI4PY_ONLY = Recipe.model_validate({"name": "mpi4py-abi", "components": {"mpi4py": "required"}})


@pytest.mark.parametrize(
    ("spec", "provides"),
    [
        ("mpich@5.0.2", True),
        ("mpich@4.2", False),
        ("mpich", False),
        ("intel-mpi@2021.18.1", True),
        ("intel-mpi@2021.17", False),
        ("openmpi@6.0.0", True),
        ("openmpi@5.0.6", False),
        ("cray-mpich@8.1.28", False),
    ],
)
def test_which_site_mpis_provide_the_abi(spec: str, provides: bool) -> None:
    assert mpi_abi.provides(spec) is provides


def test_each_kind_of_site_gets_one_line_why_not() -> None:
    horovod = load_recipe("horovod-cpu")
    hybrid = mpi_abi.decide(load_site("local"), horovod)
    assert not hybrid.fits and "the hybrid model runs the image's own MPI" in hybrid.reason
    sitebuild = mpi_abi.decide(load_site("summit"), horovod)
    assert not sitebuild.fits and "site-build model" in sitebuild.reason
    cray = mpi_abi.decide(load_site("frontier"), horovod)
    assert "cray-mpich does not provide libmpi_abi.so.1" in cray.reason
    assert cray.reason.endswith("[rule mpi-abi-providers]")
    old = mpi_abi.decide(_with_mpi("local-bind", "mpich@4.2"), horovod)
    assert "mpich 4.2 predates libmpi_abi.so.1 (mpich >= 5.0 provides it)" in old.reason
    programs = mpi_abi.decide(_with_mpi("local-bind", "mpich@5.0.2"), horovod)
    # Horovod is built against the ABI (horovod-abi), daal4py's distributed mode is not
    assert "daal4py's distributed mode" in programs.reason, programs.reason
    assert "Horovod" not in programs.reason and "[rule mpi-abi-programs]" in programs.reason
    daal = mpi_abi.decide(_with_mpi("local-bind", "mpich@5.0.2"), load_recipe("daal4py"))
    assert "loads libmpi.so.12" in daal.reason


def test_the_lock_records_the_abi_only_where_it_fits() -> None:
    res = Resolver(_with_mpi("local-bind", "mpich@5.0.2"), MPI4PY_ONLY, {})
    mpi = res.resolve().components["mpi"]
    assert res.mpi_abi is not None and res.mpi_abi.fits
    assert mpi.options["standard_abi"] == "libmpi_abi.so.1"
    assert {"mpi-abi-providers", "mpi-abi-programs"} <= set(mpi.rules)
    # The image's MPI is the ABI implementation of rule mpi-abi-image, and mpi4py is built
    # with its mpicc_abi; the family MPI the bind model would have carried is named.
    assert (mpi.implementation, mpi.version, mpi.source) == ("mpich", "5.0.2", "pip")
    assert mpi.options["abi"] == STANDARD_ABI and mpi.options["package"] == "mpich==5.0.2"
    assert "mpi-abi-image" in mpi.rules and "in place of mpich 4.0.2, mpich ABI" in mpi.reason
    mpi4py = res.components["mpi4py"]
    assert mpi4py.source == "pip (source)"
    assert mpi4py.options["MPICC"] == "/opt/venv/bin/mpicc_abi"
    # Every built-in site x recipe keeps its lock (the golden files): none fits today.
    res = Resolver(load_site("local-bind"), load_recipe("horovod-cpu"), {})
    assert "standard_abi" not in res.resolve().components["mpi"].options
    assert res.mpi_abi is not None and not res.mpi_abi.fits


def test_an_abi_lock_renders_the_abi_image() -> None:
    """The blocks of an ABI lock: the mpich wheel into the venv, mpi4py built with its
    mpicc_abi, and a build step that fails unless mpi4py.MPI links libmpi_abi.so.1 only; no
    family MPI from apt (tests/test_mpi_abi_image.py builds and runs it)."""
    from hpcenv.render import render

    site = _with_mpi("local-bind", "mpich@5.0.2")
    lock = Resolver(site, MPI4PY_ONLY, {}).resolve()
    docker = render(lock, site).dockerfile
    assert "pip install --no-cache-dir mpich==5.0.2" in docker
    assert 'MPICC="/opt/venv/bin/mpicc_abi"' in docker and "--no-binary mpi4py" in docker
    assert 'grep -F "[libmpi_abi.so.1]"' in docker and '! readelf -d "$so"' in docker
    assert "libmpich-dev" not in docker and "patchelf" not in docker


def test_the_preflight_looks_for_the_abi_library_where_the_site_provides_it() -> None:
    inj = site_mpi(_with_mpi("local-bind", "mpich@5.0.2"))
    assert inj is not None
    abi = standard_abi(inj)
    assert abi is not None and abi.soname == "libmpi_abi.so.1" and abi.abi == STANDARD_ABI
    assert abi.mounts == inj.mounts and abi.library_path == inj.library_path
    args = preflight_args(abi)
    assert args[0] == "libmpi_abi.so.1" and args[-1] == f"libmpi_abi.so.1={STANDARD_ABI}"
    assert "libmpi_abi.so.1" not in " ".join(preflight_args(inj))  # bind jobs as before
    cray = site_mpi(load_site("frontier"))
    assert cray is not None and standard_abi(cray) is None


def test_submit_lets_an_abi_image_run_under_the_sites_abi_library() -> None:
    """bindmodel.image_mismatch reads the lock: an ABI image (its mpi.options.standard_abi)
    takes any site MPI that provides libmpi_abi.so.1, whatever its family; the local image
    (Open MPI, no ABI) is refused under local-bind's Intel MPI as before."""
    import json

    from hpcenv.jobs.bindmodel import image_mismatch

    site = load_site("local-bind")
    abi = json.loads(Resolver(site, MPI4PY_ONLY, {}).resolve().to_json())
    assert abi["components"]["mpi"]["options"]["standard_abi"] == "libmpi_abi.so.1"
    assert image_mismatch(site, "abi-image", abi) is None
    family = json.loads(Resolver(load_site("local"), MPI4PY_ONLY, {}).resolve().to_json())
    why = image_mismatch(site, "local-image", family)
    assert why is not None and "[rule mpi-bind-abi]" in why


def test_horovod_is_compiled_by_the_abi_wrappers_where_the_abi_fits() -> None:
    res = Resolver(load_site("local-bind"), load_recipe("horovod-abi"), {})
    lock = res.resolve()
    assert res.mpi_abi is not None and res.mpi_abi.fits, res.mpi_abi
    hvd = lock.components["horovod"]
    assert hvd.options["CC"] == "/opt/venv/bin/mpicc_abi"
    assert hvd.options["CXX"] == "/opt/venv/bin/mpicxx_abi"
    assert "mpi-abi-image" in hvd.rules and "built against mpi_abi.h" in hvd.reason
    # the same recipe where the site's MPI lacks the ABI: Horovod as the bind model builds it
    old = Resolver(_with_mpi("local-bind", "mpich@4.2"), load_recipe("horovod-abi"), {})
    assert "CXX" not in old.resolve().components["horovod"].options
    assert old.mpi_abi is not None and "predates libmpi_abi.so.1" in old.mpi_abi.reason
