"""Resolve recipe + site + ``--set`` overrides into a lock, consulting the knowledge base.

Each component is decided in dependency order. A pinned value (from ``--set`` or the site's
``defaults``) is checked against every rule and a violation raises ``ConflictError`` naming
both sides, the rule and its source; an unpinned component takes the newest release that
every rule allows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hpcenv.errors import ConfigError, ConflictError
from hpcenv.knowledge import kb, rule, source
from hpcenv.lock import Choice, Lock
from hpcenv.recipe import COMPONENTS, Recipe
from hpcenv.site import Site, parse_spec
from hpcenv.versions import at_least, major, major_minor, vtuple

PLATFORMS = {"x86_64": "linux/amd64", "ppc64le": "linux/ppc64le", "aarch64": "linux/arm64"}


@dataclass(frozen=True)
class Pin:
    value: str
    origin: str  # "--set" or "site <name> defaults"

    def describe(self, name: str) -> str:
        return f"{name}={self.value} (from {self.origin})"


@dataclass(frozen=True)
class Fact:
    """One side of a conflict: a component, its value and where that value came from."""

    name: str
    value: str
    origin: str

    def __str__(self) -> str:
        return f"{self.name} {self.value} ({self.origin})"


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``["torch=2.2.0", "mpi=openmpi@4.1.4"]`` -> dict; unknown names are a ConfigError."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(f"--set expects NAME=VALUE, got {pair!r}")
        if name not in COMPONENTS:
            raise ConfigError(f"--set {name}: unknown component; known: {', '.join(COMPONENTS)}")
        out[name] = value
    return out


class Resolver:
    def __init__(self, site: Site, recipe: Recipe, overrides: dict[str, str]) -> None:
        self.site = site
        self.recipe = recipe
        self.pins: dict[str, Pin] = {
            k: Pin(v, f"site {site.name} defaults") for k, v in site.defaults.items()
        }
        self.pins.update({k: Pin(v, "--set") for k, v in overrides.items()})
        self.components: dict[str, Choice] = {}
        self.excluded: dict[str, str] = {}
        self.rules_used: dict[str, str] = {}
        self.os = kb()["os"]

    # -- helpers ---------------------------------------------------------------------------
    def use(self, rule_id: str) -> str:
        self.rules_used[rule_id] = source(rule_id)
        return rule_id

    def conflict(self, rule_id: str, a: Fact, b: Fact, detail: str) -> ConflictError:
        self.use(rule_id)
        return ConflictError(
            f"conflict between {a} and {b}: {detail} [rule {rule_id}; source: {source(rule_id)}]"
        )

    def fact(self, name: str) -> Fact:
        """The current value of a decided component, with its origin."""
        pin = self.pins.get(name)
        choice = self.components[name]
        origin = pin.origin if pin and pin.value == choice.version else "resolved"
        value = choice.version
        if choice.implementation:
            value = f"{choice.implementation}@{choice.version}"
        return Fact(name, value, origin)

    def pick(
        self,
        name: str,
        candidates: list[str],
        checks: list[Callable[[str], tuple[str, Fact, str] | None]],
    ) -> str:
        """Pinned: every check must pass (else conflict). Unpinned: newest passing candidate."""
        pin = self.pins.get(name)
        if pin:
            for check in checks:
                failure = check(pin.value)
                if failure:
                    rid, other, detail = failure
                    raise self.conflict(rid, Fact(name, pin.value, pin.origin), other, detail)
            return pin.value
        # Report the candidate that came closest (fewest broken rules), preferring a failure
        # against a --set value: that is the constraint the user can change.
        closest: list[tuple[str, Fact, str]] | None = None
        for cand in candidates:
            failures = [f for f in (c(cand) for c in checks) if f]
            if not failures:
                return cand
            if closest is None or len(failures) < len(closest):
                closest = failures
        if closest:
            rid, other, detail = next((f for f in closest if f[1].origin == "--set"), closest[0])
            raise self.conflict(
                rid, Fact(name, f"(any of {', '.join(candidates)})", "releases"), other, detail
            )
        raise ConfigError(f"no known release of {name}")

    # -- the decisions, in dependency order -----------------------------------------------
    def resolve(self) -> Lock:
        self.decide_platform()
        accel = self.decide_accelerator()
        self.decide_torch(accel)
        if accel == "cuda":
            self.decide_nccl()
        self.decide_mpi()
        self.decide_fabric()
        self.decide_intel_stack(accel)
        self.decide_horovod(accel)
        self.decide_mpi4py()
        self.decide_daal4py()
        return Lock(
            site=self.site.name,
            recipe=self.recipe.name,
            arch=self.site.arch,
            mpi_model=self.site.mpi.model,
            components=self.components,
            excluded=self.excluded,
            rules=self.rules_used,
            build=self.build_info(accel),
        )

    def decide_platform(self) -> None:
        site = self.site
        for name, actual in (("arch", site.arch), ("os", site.os)):
            pin = self.pins.get(name)
            if pin and pin.value != actual:
                raise ConfigError(
                    f"{pin.describe(name)} differs from site {site.name}'s {name} {actual} "
                    f"({name} is a property of the site; use another site file)"
                )
        if site.os not in self.os:
            raise ConfigError(f"site {site.name}: os {site.os} is not in the knowledge base")
        self.components["arch"] = Choice(site.arch, f"site {site.name} architecture", "site")
        self.components["os"] = Choice(
            site.os, f"site {site.name} image OS (glibc {self.os[site.os]['glibc']})", "base image"
        )
        os_python = self.os[site.os]["python"]
        pin = self.pins.get("python")
        if pin and major_minor(pin.value) != os_python:
            raise self.conflict(
                "os-python",
                Fact("python", pin.value, pin.origin),
                Fact("os", site.os, f"site {site.name}"),
                f"{site.os} provides python {os_python}; hpcenv builds its venv from it",
            )
        self.use("os-python")
        self.components["python"] = Choice(
            os_python, f"python3 of {site.os}, in a venv at /opt/venv", "apt", rules=["os-python"]
        )

    def decide_accelerator(self) -> str:
        """``cuda``, ``rocm``, ``xpu`` or ``none`` from the recipe and the site's GPUs."""
        if self.recipe.accelerator == "intel":
            return "xpu" if self.site.gpu.vendor == "intel" else "none"
        if self.recipe.accelerator == "none":
            for name in ("cuda", "rocm", "nccl", "rccl"):
                if name in self.pins and self.pins[name].origin == "--set":
                    raise ConfigError(
                        f"{self.pins[name].describe(name)}: recipe {self.recipe.name} is CPU-only"
                    )
            return "none"
        vendor = self.site.gpu.vendor
        if vendor == "none":
            raise ConflictError(
                f"recipe {self.recipe.name} needs GPUs but site {self.site.name} has none "
                f"(gpu.vendor: none); use horovod-cpu"
            )
        accel = {"nvidia": "cuda", "amd": "rocm", "intel": "xpu"}[vendor]
        pin = self.pins.get("cuda")
        if accel == "cuda" and pin and not self.driver_allows(pin.value):
            minimum = rule("cuda-driver")["min_driver"].get(major(pin.value), "unknown")
            raise self.conflict(
                "cuda-driver",
                Fact("cuda", pin.value, pin.origin),
                Fact("gpu.driver", str(self.site.gpu.driver), f"site {self.site.name}"),
                f"CUDA {major(pin.value)}.x needs driver >= {minimum}",
            )
        return accel

    def decide_torch(self, accel: str) -> None:
        if not self.recipe.wants("torch"):
            return
        python = self.components["python"].version
        arch = self.site.arch
        checks: list[Callable[[str], tuple[str, Fact, str] | None]] = []

        def python_ok(v: str) -> tuple[str, Fact, str] | None:
            table = rule("torch-python")["table"]
            supported = table.get(major_minor(v))
            if supported is not None and python not in supported:
                return (
                    "torch-python",
                    self.fact("python"),
                    f"torch {major_minor(v)} supports python {', '.join(supported)}",
                )
            return None

        def arch_ok(v: str) -> tuple[str, Fact, str] | None:
            r = rule("torch-arch")
            if arch in r["pypi_archs"]:
                return None
            conda = r["conda"].get(arch, {}).get("torch", {})
            if v not in conda:
                return (
                    "torch-arch",
                    Fact("arch", arch, f"site {self.site.name}"),
                    f"no {arch} build of torch {v} (PyPI has none; Open-CE provides "
                    f"{', '.join(conda) or 'none'})",
                )
            return None

        def cuda_ok(v: str) -> tuple[str, Fact, str] | None:
            allowed = self.torch_cuda_builds(v)
            usable = [c for c in allowed if self.driver_allows(c)]
            if "cuda" in self.pins:
                usable = [c for c in usable if c == major_minor(self.pins["cuda"].value)]
            if not usable:
                other = (
                    Fact("cuda", self.pins["cuda"].value, self.pins["cuda"].origin)
                    if "cuda" in self.pins
                    else Fact("gpu.driver", str(self.site.gpu.driver), f"site {self.site.name}")
                )
                return (
                    "torch-cuda",
                    other,
                    f"torch {v} has CUDA builds {', '.join(allowed) or 'none known'}; "
                    f"none fits {other.name} {other.value}",
                )
            return None

        def rocm_ok(v: str) -> tuple[str, Fact, str] | None:
            host = self.site.gpu.rocm or ""
            allowed = rule("torch-rocm")["table"].get(major_minor(v), [])
            if major_minor(host) not in allowed:
                return (
                    "torch-rocm",
                    Fact("gpu.rocm", host, f"site {self.site.name}"),
                    f"torch {major_minor(v)} has ROCm builds {', '.join(allowed) or 'none known'}",
                )
            return None

        def same_mm_build(comp: str, rid: str) -> Callable[[str], tuple[str, Fact, str] | None]:
            def check(v: str) -> tuple[str, Fact, str] | None:
                builds = self.intel_builds(rid, accel)
                if comp in self.pins:
                    pinned = self.pins[comp]
                    if major_minor(pinned.value) != major_minor(v):
                        return (
                            rid,
                            Fact(comp, pinned.value, pinned.origin),
                            f"{comp} must have the same major.minor as torch",
                        )
                elif not any(major_minor(b) == major_minor(v) for b in builds):
                    return (
                        rid,
                        Fact(comp, "(required by recipe)", f"recipe {self.recipe.name}"),
                        f"no {comp} build for torch {major_minor(v)}; builds: {', '.join(builds)}",
                    )
                return None

            return check

        checks += [python_ok, arch_ok]
        if accel == "cuda":
            checks.append(cuda_ok)
        if accel == "rocm":
            checks.append(rocm_ok)
        if self.recipe.requires("torch-ccl"):
            checks.append(same_mm_build("torch-ccl", "torch-ccl-torch"))
        if self.recipe.requires("ipex"):
            checks.append(same_mm_build("ipex", "ipex-torch"))
        for rid in ("torch-python", "torch-arch"):
            self.use(rid)
        version = self.pick("torch", list(kb()["releases"]["torch"]), checks)
        conda = arch not in rule("torch-arch")["pypi_archs"]
        variant = {"none": "cpu", "cuda": "cuda", "rocm": "rocm", "xpu": "xpu"}[accel]
        reason = self.pin_reason("torch", f"newest torch release allowed by every rule ({variant})")
        self.components["torch"] = Choice(
            version,
            reason,
            "conda (Open-CE)" if conda else "pip",
            options={"variant": variant},
            rules=["torch-python", "torch-arch"],
        )
        if accel == "cuda":
            self.decide_cuda(version, conda)
        elif accel == "rocm":
            self.use("torch-rocm")
            rocm = self.site.gpu.rocm or ""
            self.components["rocm"] = Choice(
                rocm, f"site {self.site.name} ROCm, supported by torch", "base image",
                rules=["torch-rocm"],
            )  # fmt: skip
            self.components["rccl"] = Choice(
                f"bundled-rocm-{major_minor(rocm)}", "RCCL ships with ROCm", "base image"
            )

    def torch_cuda_builds(self, torch: str) -> list[str]:
        self.use("torch-cuda")
        if self.site.arch not in rule("torch-arch")["pypi_archs"]:
            conda = rule("torch-arch")["conda"].get(self.site.arch, {}).get("torch", {})
            return list(conda.get(torch, []))
        return list(rule("torch-cuda")["table"].get(major_minor(torch), []))

    def driver_allows(self, cuda: str) -> bool:
        self.use("cuda-driver")
        minimum = rule("cuda-driver")["min_driver"].get(major(cuda))
        driver = self.site.gpu.driver
        return bool(minimum and driver and at_least(driver, minimum))

    def decide_cuda(self, torch: str, conda: bool) -> None:
        builds = self.torch_cuda_builds(torch)
        usable = [c for c in builds if self.driver_allows(c)]
        pin = self.pins.get("cuda")
        if pin:
            if major_minor(pin.value) not in builds:
                raise self.conflict(
                    "torch-cuda",
                    Fact("cuda", pin.value, pin.origin),
                    self.fact("torch"),
                    f"torch {major_minor(torch)} has CUDA builds {', '.join(builds)}",
                )
            cuda = major_minor(pin.value)
        else:
            cuda = sorted(usable, key=vtuple)[-1]
        self.components["cuda"] = Choice(
            cuda,
            self.pin_reason(
                "cuda",
                f"newest CUDA that torch {torch} is built for and driver "
                f"{self.site.gpu.driver} runs (minor-version compatibility)",
            ),
            "base image",
            rules=["torch-cuda", "cuda-driver"],
        )

    def decide_nccl(self) -> None:
        cuda = self.components["cuda"].version
        table = rule("nccl-cuda")["table"]
        self.use("nccl-cuda")

        def fits(v: str) -> tuple[str, Fact, str] | None:
            builds = table.get(v)
            if builds is None:
                return None if v.startswith("conda") else (
                    "nccl-cuda", self.fact("cuda"), f"NCCL {v} is not in the knowledge base"
                )  # fmt: skip
            if cuda not in builds:
                return (
                    "nccl-cuda",
                    self.fact("cuda"),
                    f"NCCL {v} is built for CUDA {', '.join(builds)}",
                )
            return None

        version = self.pick("nccl", list(kb()["releases"]["nccl"]), [fits])
        self.components["nccl"] = Choice(
            version,
            self.pin_reason("nccl", f"newest NCCL with a +cuda{cuda} build"),
            "apt (NVIDIA repo)",
            options={"package": f"libnccl2={version}-1+cuda{cuda}"},
            rules=["nccl-cuda"],
        )

    def decide_mpi(self) -> None:
        host = self.site.mpi
        families = kb()["mpi_families"]
        host_abi = families[host.name]["abi"]
        pkgs = self.os[self.site.os]["packages"]
        pin = self.pins.get("mpi")
        rid = self.use("mpi-bind-abi" if host.model == "bind" else "mpi-hybrid-pmi")
        if pin:
            name, version = parse_spec(pin.value)
            if name not in families:
                raise ConfigError(
                    f"{pin.describe('mpi')}: unknown MPI; known: {', '.join(families)}"
                )
            version = version or pkgs.get(name, "")
            abi = families[name]["abi"]
            host_fact = Fact("host mpi", host.spec, f"site {self.site.name}, {host.model} model")
            if host.model == "bind" and abi != host_abi:
                raise self.conflict(
                    rid, Fact("mpi", pin.value, pin.origin), host_fact,
                    f"bind model replaces the image MPI with the host's at run time, so the image "
                    f"MPI must be in the host's ABI family ({host_abi}), not {abi}",
                )  # fmt: skip
            if host.model == "hybrid" and abi != host_abi:
                raise self.conflict(
                    rid, Fact("mpi", pin.value, pin.origin), host_fact,
                    "hybrid model: the host launcher starts the image's MPI, which must be the "
                    "host's MPI family and speak its PMI",
                )  # fmt: skip
            reason = f"from {pin.origin}"
        elif host.model == "bind":
            name = kb()["image_mpi_for_family"][host_abi]
            version = pkgs[name]
            reason = (
                f"bind model over host {host.spec}: image carries {name} ({host_abi} ABI), "
                "replaced by the host MPI at run time"
            )
        else:
            name = host.name
            version = host.version or pkgs.get(name, "")
            reason = f"hybrid model: same MPI family and version as the host ({host.spec})"
        src = "apt" if pkgs.get(name) == version else "source"
        self.components["mpi"] = Choice(
            version,
            reason,
            src,
            implementation=name,
            options={"abi": families[name]["abi"]},
            rules=[rid],
        )
        self.decide_pmix(name, version)

    def decide_pmix(self, mpi: str, mpi_version: str) -> None:
        host = self.site.mpi
        host_pmi, host_pmi_version = parse_spec(host.pmi)
        pkgs = self.os[self.site.os]["packages"]
        pin = self.pins.get("pmix")
        version = pin.value if pin else pkgs["pmix"]
        origin = pin.origin if pin else f"{self.site.os} packages"
        if mpi == "openmpi" and major(mpi_version) == "5":
            minimum = rule("openmpi5-pmix")["min_pmix"]
            self.use("openmpi5-pmix")
            if not at_least(version, minimum):
                raise self.conflict(
                    "openmpi5-pmix",
                    Fact("pmix", version, origin),
                    self.fact("mpi"),
                    f"Open MPI 5 needs PMIx >= {minimum}",
                )
        reason = f"PMIx of {self.site.os}" if not pin else f"from {pin.origin}"
        if host.model == "hybrid" and host_pmi == "pmix" and host_pmi_version:
            if major(version) != major(host_pmi_version):
                raise self.conflict(
                    "mpi-hybrid-pmi",
                    Fact("pmix", version, origin),
                    Fact("host pmi", host.pmi, f"site {self.site.name}"),
                    "hybrid model: the image's PMIx must have the host's major version, or srun "
                    "starts N independent rank-0 copies",
                )
            reason += f"; major {major(version)} matches host {host.pmi} (srun --mpi=pmix)"
        self.components["pmix"] = Choice(
            version,
            reason,
            "apt" if version == pkgs["pmix"] else "source",
            rules=["mpi-hybrid-pmi"],
        )

    def decide_fabric(self) -> None:
        fabric = self.site.mpi.fabric
        pkgs = self.os[self.site.os]["packages"]
        if fabric in ("ucx", "libfabric"):
            pin = self.pins.get(fabric)
            version = pin.value if pin else pkgs[fabric]
            self.components[fabric] = Choice(
                version,
                f"site {self.site.name} fabric is {fabric}; the image needs its user-space library",
                "apt" if version == pkgs[fabric] else "source",
            )

    def intel_builds(self, rid: str, accel: str) -> list[str]:
        self.use(rid)
        if self.site.arch not in rule(rid)["archs"]:
            return []
        variant = "xpu" if accel == "xpu" else "cpu"
        return list(rule(rid)["builds"][variant])

    def decide_intel_stack(self, accel: str) -> None:
        torch = self.components.get("torch")
        for comp, rid in (("torch-ccl", "torch-ccl-torch"), ("ipex", "ipex-torch")):
            if not self.recipe.wants(comp) or torch is None:
                continue
            builds = self.intel_builds(rid, accel)
            matching = [b for b in builds if major_minor(b) == major_minor(torch.version)]
            pin = self.pins.get(comp)
            if pin:
                if major_minor(pin.value) != major_minor(torch.version):
                    raise self.conflict(
                        rid, Fact(comp, pin.value, pin.origin), self.fact("torch"),
                        f"{comp} must have the same major.minor as torch",
                    )  # fmt: skip
                matching = [pin.value]
            if not matching:
                why = (
                    f"no {comp} build for torch {major_minor(torch.version)} "
                    f"(builds exist for {', '.join(builds) or 'none'} on {self.site.arch}) [rule {rid}; source: {source(rid)}]"
                )
                if self.recipe.requires(comp):
                    raise ConflictError(f"{comp}: {why}")
                self.excluded[comp] = why
                continue
            variant = "xpu" if accel == "xpu" else "cpu"
            index = rule("torch-ccl-torch")["index"][variant]
            self.components[comp] = Choice(
                matching[0],
                self.pin_reason(comp, f"{comp} build with torch's major.minor ({variant})"),
                f"pip ({index})",
                options={"index": index},
                rules=[rid],
            )
        if "torch-ccl" in self.components:
            ccl = self.components["torch-ccl"].version
            bundled = rule("oneccl-torch-ccl")["table"].get(major_minor(ccl))
            self.use("oneccl-torch-ccl")
            pin = self.pins.get("oneccl")
            if pin and bundled and major_minor(pin.value) != major_minor(bundled):
                raise self.conflict(
                    "oneccl-torch-ccl", Fact("oneccl", pin.value, pin.origin),
                    self.fact("torch-ccl"), f"torch-ccl {major_minor(ccl)} bundles oneCCL {bundled}",
                )  # fmt: skip
            self.components["oneccl"] = Choice(
                bundled or "bundled",
                f"the oneCCL that torch-ccl {ccl} bundles"
                + ("" if bundled else " (its version is not in the knowledge base)"),
                "bundled with torch-ccl",
                rules=["oneccl-torch-ccl"],
            )

    def decide_horovod(self, accel: str) -> None:
        if not self.recipe.wants("horovod"):
            return
        torch = self.components["torch"].version
        r = rule("horovod-torch-cxx17")
        needs_cxx17 = at_least(torch, r["cxx17_from_torch"])
        self.use("horovod-torch-cxx17")

        def cxx17_ok(v: str) -> tuple[str, Fact, str] | None:
            if needs_cxx17 and v not in r["patchable_horovod"]:
                return (
                    "horovod-torch-cxx17",
                    self.fact("torch"),
                    f"torch >= {r['cxx17_from_torch']} needs C++17; hpcenv's C++17 patch is "
                    f"known to work for horovod {', '.join(r['patchable_horovod'])} only",
                )
            return None

        version = self.pick("horovod", list(kb()["releases"]["horovod"]), [cxx17_ok])
        options = {
            "HOROVOD_WITH_PYTORCH": "1",
            "HOROVOD_WITH_MPI": "1",
            "HOROVOD_WITHOUT_TENSORFLOW": "1",
            "HOROVOD_WITHOUT_MXNET": "1",
        }
        ops = list(self.recipe.horovod_operations)
        notes = []
        if "ccl" in ops and "oneccl" not in self.components:
            ops.remove("ccl")
            notes.append("CCL not built: no oneCCL in this stack (no torch-ccl build for torch)")
        if "ccl" in ops:
            self.use("horovod-ccl")
            options["HOROVOD_CPU_OPERATIONS"] = "CCL"
            if "gloo" in ops:
                ops.remove("gloo")
                notes.append("Gloo off with CCL, as upstream's oneCCL image does")
        if "gloo" in ops:
            options["HOROVOD_WITH_GLOO"] = "1"
        else:
            options["HOROVOD_WITHOUT_GLOO"] = "1"
        if "nccl" in ops:
            options["HOROVOD_GPU_OPERATIONS"] = "NCCL"
            if accel == "rocm":
                options["HOROVOD_GPU"] = "ROCM"
            elif accel == "xpu":
                del options["HOROVOD_GPU_OPERATIONS"]
                ops.remove("nccl")
                notes.append("no Horovod GPU operations for Intel GPUs")
        if needs_cxx17:
            options["cxx17_patch"] = "CMAKE_CXX_STANDARD 14->17 in CMakeLists.txt and horovod/torch"
            notes.append(
                f"C++17 patch: torch {torch} >= {r['cxx17_from_torch']} "
                f"(Horovod CI tested torch <= {r['tested_torch_max']})"
            )
        options["operations"] = ",".join(ops)
        reason = self.pin_reason("horovod", "newest Horovod release that builds against this torch")
        self.components["horovod"] = Choice(
            version,
            "; ".join([reason, *notes]),
            "source (sdist)",
            options=options,
            rules=["horovod-torch-cxx17"],
        )

    def decide_mpi4py(self) -> None:
        if not self.recipe.wants("mpi4py"):
            return
        version = self.pick("mpi4py", list(kb()["releases"]["mpi4py"]), [])
        mpi = self.components["mpi"]
        self.components["mpi4py"] = Choice(
            version,
            self.pin_reason(
                "mpi4py", f"binary wheel; loads the image's {mpi.implementation} at run time"
            ),
            "pip",
        )

    def decide_daal4py(self) -> None:
        if not self.recipe.wants("daal4py"):
            return
        self.use("daal4py-mpich-abi")
        mpi = self.components["mpi"]
        version = self.pick("daal4py", list(kb()["releases"]["daal4py"]), [])
        options = {"package": f"scikit-learn-intelex=={version}"}
        if mpi.options["abi"] == "mpich":
            reason = f"distributed mode uses the image's {mpi.implementation} (MPICH ABI)"
            options["launcher"] = "mpiexec"
        elif self.site.mpi.model == "hybrid":
            side = self.os[self.site.os]["packages"]["mpich"]
            reason = (
                f"distributed mode needs an MPICH-ABI libmpi.so.12 but the image MPI is "
                f"{mpi.implementation} (hybrid with the host); adds Debian MPICH {side} as a "
                "side runtime linked as /opt/mpich-abi/lib/libmpi.so.12, launched with "
                "mpiexec.mpich inside one container"
            )
            options |= {
                "side_mpi": f"mpich@{side}",
                "launcher": "mpiexec.mpich",
                "lib_dir": "/opt/mpich-abi/lib",
            }
        else:
            host = Fact("host mpi", self.site.mpi.spec, f"site {self.site.name}, bind model")
            why = (
                "daal4py distributed mode needs an MPICH-ABI MPI, but the bind model needs the "
                f"image MPI in the host's {mpi.options['abi']} family"
            )
            if self.recipe.requires("daal4py"):
                raise self.conflict(
                    "daal4py-mpich-abi", Fact("daal4py", version, f"recipe {self.recipe.name}"),
                    host, why + " [also rule mpi-bind-abi]",
                )  # fmt: skip
            self.excluded["daal4py"] = f"{why} [rule daal4py-mpich-abi]"
            return
        self.components["daal4py"] = Choice(
            version, reason, "pip", options=options, rules=["daal4py-mpich-abi"]
        )

    def pin_reason(self, name: str, default: str) -> str:
        pin = self.pins.get(name)
        return f"pinned by {pin.origin}" if pin else default

    def build_info(self, accel: str) -> dict[str, Any]:
        site = self.site
        osinfo = self.os[site.os]
        if site.build.base_image:
            base = site.build.base_image
        elif accel == "cuda" and "cuda_base_image" in osinfo:
            base = osinfo["cuda_base_image"].format(cuda=self.cuda_full())
        elif accel == "rocm" and "rocm_base_image" in osinfo:
            base = osinfo["rocm_base_image"].format(rocm=self.components["rocm"].version)
        else:
            base = osinfo["base_image"]
        return {
            "base_image": base,
            "bootstrap_base": site.build.bootstrap_base,
            "debootstrap_suite": osinfo.get("debootstrap_suite"),
            "platform": PLATFORMS[site.arch],
            "engine": site.build.engine,
            "jobs": site.build.jobs,
            "accelerator": accel,
            "user": "hpc",
        }

    def cuda_full(self) -> str:
        cuda = self.components["cuda"].version
        tags: dict[str, str] = self.os[self.site.os].get("cuda_image_tags", {})
        return tags.get(cuda, f"{cuda}.0")


def resolve(site: Site, recipe: Recipe, overrides: dict[str, str] | None = None) -> Lock:
    return Resolver(site, recipe, overrides or {}).resolve()
