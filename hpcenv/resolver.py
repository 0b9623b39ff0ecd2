"""Resolve recipe + site + pins into a lock, consulting the typed rules of the knowledge base.

Components are decided in dependency order. For each one, :meth:`Resolver.pick` tries the pin
(``--set`` or the site's ``defaults``) or else the known releases newest first, and evaluates
every rule that names the component against what is known so far (decided components, site
facts, pins not yet decided) with the one generic :func:`hpcenv.knowledge.rules.evaluate`. The
first candidate that every rule allows wins; the lock records the rules that applied and, for
newer releases that lost, the rules that rejected them. A look-ahead keeps a choice from leaving
a required later component without any release (torch that no torch-ccl build fits).

A violated rule does not stop resolution: every conflict is collected (both sides, the rule and
its source) and :class:`ConflictError` reports them all, one per line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from hpcenv import mpi_abi, platforms
from hpcenv.errors import ConfigError, ConflictError
from hpcenv.knowledge import kb, mpi_soname, releases, rule, rules, source
from hpcenv.knowledge.rules import Fact, Verdict, applies, evaluate
from hpcenv.lock import Choice, Lock
from hpcenv.mpi_abi import AbiDecision
from hpcenv.pins import COMPONENTS, Pin, check_pin, parse_overrides
from hpcenv.recipe import Recipe
from hpcenv.site import Site
from hpcenv.versions import at_least, major, major_minor, parse_spec

# The image's virtual environment (hpcenv.blocks.VENV), where the ABI image's MPI goes.
VENV = "/opt/venv"

__all__ = ["COMPONENTS", "parse_overrides", "resolve", "Resolver"]


@dataclass
class Picked:
    """The outcome of one decision: the value and the rules that decided it."""

    fact: Fact
    rules: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    ok: bool = True
    failures: list[Verdict] = field(default_factory=list)

    @property
    def value(self) -> str:
        return self.fact.value


class Resolver:
    def __init__(self, site: Site, recipe: Recipe, overrides: dict[str, str]) -> None:
        self.site = site
        self.recipe = recipe
        self.pins: dict[str, Pin] = {
            k: check_pin(k, v, f"site {site.name} defaults") for k, v in site.defaults.items()
        }
        self.pins.update({k: check_pin(k, v, "--set") for k, v in overrides.items()})
        self.components: dict[str, Choice] = {}
        self.excluded: dict[str, str] = {}
        self.rules_used: dict[str, str] = {}
        self.facts: dict[str, Fact] = {}
        self.planned: set[str] = set()
        self.pins_ahead_ignored = False
        self.conflicts: list[str] = []
        self.mpi_abi: AbiDecision | None = None  # decide_mpi_abi
        self._seen: set[tuple[str, frozenset[str]]] = set()
        self.os = kb()["os"]

    # -- the generic machinery -------------------------------------------------------------
    def use(self, rule_id: str) -> str:
        self.rules_used[rule_id] = source(rule_id)
        return rule_id

    def known(self) -> dict[str, Fact]:
        """Decided components and site facts, plus pins of components still to be decided."""
        facts = dict(self.facts)
        if self.pins_ahead_ignored:
            return facts
        for name, pin in self.pins.items():
            if name in self.planned and name not in facts:
                facts[name] = Fact(name, pin.value, pin.origin, pin.forced)
        return facts

    def verdicts(self, fact: Fact, skip: Iterable[str] = ()) -> list[Verdict]:
        facts = self.known() | {fact.name: fact}
        out = []
        for r in rules().values():
            if r.id in skip or fact.name not in r.names():
                continue
            verdict = evaluate(r, facts)
            if verdict is not None:
                self.use(r.id)
                out.append(verdict)
        return out

    def lookahead(self, fact: Fact, later: dict[str, list[str]]) -> list[Verdict]:
        """Failures for required later components that no release would fit after ``fact``."""
        failures: list[Verdict] = []
        for name, candidates in later.items():
            if name in self.known():
                continue
            saved = self.facts.get(fact.name)
            self.facts[fact.name] = fact
            try:
                closest: list[Verdict] | None = None
                for cand in candidates:
                    # only rules that involve this choice: the rest fail on their own later
                    bad = [
                        v
                        for v in self.verdicts(Fact(name, cand, "releases"))
                        if not v.ok and fact.name in v.rule.names()
                    ]
                    if not bad:
                        closest = []
                        break
                    if closest is None or len(bad) < len(closest):
                        closest = bad
            finally:
                if saved is None:
                    del self.facts[fact.name]
                else:
                    self.facts[fact.name] = saved
            if closest:
                need = Fact(name, "(required by recipe)", f"recipe {self.recipe.name}")
                for v in closest:
                    detail = (
                        f"no {name} release fits ({', '.join(candidates) or 'none'}): {v.detail}"
                    )
                    failures.append(Verdict(v.rule, False, detail, (fact, need)))
        return failures

    def pick(
        self,
        name: str,
        candidates: list[str],
        *,
        later: dict[str, list[str]] | None = None,
        skip: Iterable[str] = (),
        pinned: Fact | None = None,
    ) -> Picked:
        """The pin, else the newest candidate that every rule (and the look-ahead) allows.

        On failure the closest candidate is returned with ``ok=False`` and its failures; the
        caller reports them (:meth:`conflict`) or excludes an optional component.
        """
        pin = self.pins.get(name)
        if pinned is None and pin is not None:
            pinned = Fact(name, pin.value, pin.origin, pin.forced)
        trials = [pinned] if pinned else [Fact(name, c, "releases") for c in candidates]
        if not trials:
            raise ConfigError(f"no known release of {name} in the knowledge base")
        rejected: dict[str, str] = {}
        best: Picked | None = None
        for fact in trials:
            verdicts = self.verdicts(fact, skip)
            failures = [v for v in verdicts if not v.ok] + self.lookahead(fact, later or {})
            if not failures:
                if fact.origin == "releases":
                    fact = Fact(name, fact.value, "resolved")
                self.facts[name] = fact
                return Picked(fact, [v.rule.id for v in verdicts], rejected)
            rejected[fact.value] = ", ".join(sorted({v.rule.id for v in failures}))
            if best is None or len(failures) < len(best.failures):
                best = Picked(fact, [v.rule.id for v in verdicts], {}, False, failures)
        assert best is not None
        self.facts[name] = best.fact
        return best

    def conflict(self, name: str, picked: Picked, candidates: list[str] | None = None) -> None:
        """Record each failure of ``picked`` as one conflict line (duplicates once)."""
        side = picked.fact
        if candidates is not None and side.origin == "releases":
            side = Fact(name, f"(any of {', '.join(candidates)})", "releases")
        for v in picked.failures:
            key = (v.rule.id, frozenset([name, *(f.name for f in v.facts)]))
            if key in self._seen:
                continue
            self._seen.add(key)
            self.use(v.rule.id)
            others = v.others(name) or [side]
            self.conflicts.append(
                f"conflict between {side} and {' and '.join(str(o) for o in others)}: "
                f"{v.detail} [rule {v.rule.id}; source: {v.rule.source}]"
            )

    def decide(
        self, name: str, candidates: list[str], *, required: bool = True, **kw: Any
    ) -> Picked | None:
        """:meth:`pick`; a failure is a conflict when required, else the component is excluded.

        An unpinned component that fails only because of pins on later components is decided
        without them, so the conflict is reported where the pin is (``nccl=2.21.5`` against the
        CUDA that torch needs, not "no torch fits").
        """
        picked = self.pick(name, candidates, **kw)
        if not picked.ok and name not in self.pins:
            self.pins_ahead_ignored = True
            try:
                natural = self.pick(name, candidates, **kw)
            finally:
                self.pins_ahead_ignored = False
            if natural.ok:
                return natural
        if picked.ok:
            return picked
        if required or name in self.pins:
            self.conflict(name, picked, candidates)
            return picked
        del self.facts[name]
        self.excluded[name] = f"no {name} release fits ({', '.join(candidates)}): " + "; ".join(
            f"{v.detail} [rule {v.rule.id}; source: {v.rule.source}]" for v in picked.failures
        )
        return None

    def pin_reason(self, name: str, default: str) -> str:
        pin = self.pins.get(name)
        if not pin:
            return default
        if pin.forced:
            return f"pinned by {pin.origin}; not a known release, allowed with '!'"
        return f"pinned by {pin.origin}"

    def choose(self, name: str, picked: Picked, reason: str, src: str, **kw: Any) -> Choice:
        choice = Choice(
            kw.pop("version", picked.value),
            reason,
            src,
            rules=picked.rules,
            rejected=picked.rejected,
            **kw,
        )
        self.components[name] = choice
        return choice

    # -- the decisions, in dependency order -----------------------------------------------
    def resolve(self) -> Lock:
        self.decide_platform()
        accel = self.decide_accelerator()
        self.plan(accel)
        self.decide_torch(accel)
        if accel == "cuda":
            self.decide_cuda()
            self.decide_nccl()
        self.decide_mpi()
        self.decide_fabric()
        self.decide_intel_stack(accel)
        self.decide_oneccl_pypi()
        self.decide_horovod(accel)
        self.decide_network_plugin(accel)
        self.decide_mpi4py()
        self.decide_daal4py()
        self.decide_mpi_abi()
        if self.conflicts:
            raise ConflictError("\n".join(self.conflicts))
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

    def plan(self, accel: str) -> None:
        """The components this stack can have; a ``--set`` for any other is an error."""
        planned = {"os", "arch", "python", "mpi", *self.recipe.components}
        if self.site.mpi.model != "site-build":  # else both come with the host MPI
            planned.add("pmix")
            if self.site.mpi.fabric in ("ucx", "libfabric"):
                planned.add(self.site.mpi.fabric)
        planned |= {"cuda": {"cuda", "nccl"}, "rocm": {"rocm", "rccl"}}.get(accel, set())
        if self.recipe.wants("torch-ccl") or self.recipe.wants("oneccl"):
            planned.add("oneccl")
        if self.site.network_plugin and accel in ("cuda", "rocm"):
            planned.add("net-plugin")
        self.planned = planned
        for name, pin in self.pins.items():
            if pin.origin == "--set" and name not in planned:
                raise ConfigError(
                    f"{pin.describe(name)}: recipe {self.recipe.name} on site {self.site.name} "
                    f"has no {name} (its stack: {', '.join(sorted(planned))})"
                )

    def decide_platform(self) -> None:
        site = self.site
        here = f"site {site.name}"
        for name, actual in (("arch", site.arch), ("os", site.os)):
            pin = self.pins.get(name)
            if pin and pin.value != actual:
                raise ConfigError(
                    f"{pin.describe(name)} differs from site {site.name}'s {name} {actual} "
                    f"({name} is a property of the site; use another site file)"
                )
            self.facts[name] = Fact(name, actual, here)
        if site.os not in self.os:
            raise ConfigError(f"site {site.name}: os {site.os} is not in the knowledge base")
        self.facts["mpi.model"] = Fact("mpi.model", site.mpi.model, here)
        self.facts["host.mpi"] = Fact("host.mpi", site.mpi.spec, f"{here}, {site.mpi.model} model")
        self.facts["host.pmi"] = Fact("host.pmi", site.mpi.pmi, here)
        self.components["arch"] = Choice(site.arch, f"site {site.name} architecture", "site")
        self.components["os"] = Choice(
            site.os, f"site {site.name} image OS (glibc {self.os[site.os]['glibc']})", "base image"
        )
        self.planned = {"python"}
        row = rule("os-python").table.get(site.os, [])
        picked = self.decide("python", row)
        assert picked is not None
        version = row[0] if picked.ok and row else major_minor(picked.value)
        self.choose(
            "python",
            picked,
            f"python3 of {site.os}, in a venv at /opt/venv",
            "apt",
            version=version,
        )

    def decide_accelerator(self) -> str:
        """The accelerator as a fact the rules see (``accelerator``), and where torch comes from
        (``torch.index``: Intel's index for IPEX stacks, else pytorch.org)."""
        accel = self.accelerator()
        origin = f"recipe {self.recipe.name} on site {self.site.name}"
        self.facts["accelerator"] = Fact("accelerator", accel, origin)
        index = "intel" if accel == "xpu" and self.recipe.wants("ipex") else "pytorch"
        self.facts["torch.index"] = Fact("torch.index", index, origin)
        return accel

    def accelerator(self) -> str:
        """``cuda``, ``rocm``, ``xpu`` or ``none`` from the recipe and the site's GPUs."""
        site = self.site
        if self.recipe.accelerator == "intel":
            return "xpu" if site.gpu.vendor == "intel" else "none"
        if self.recipe.accelerator == "none":
            return "none"
        if site.gpu.vendor == "none":
            raise ConflictError(
                f"recipe {self.recipe.name} needs GPUs but site {site.name} has none "
                f"(gpu.vendor: none); use horovod-cpu"
            )
        accel = {"nvidia": "cuda", "amd": "rocm", "intel": "xpu"}[site.gpu.vendor]
        here = f"site {site.name}"
        if accel == "cuda":
            if not site.gpu.driver:
                raise ConfigError(f"site {site.name}: an NVIDIA site needs gpu.driver")
            self.facts["gpu.driver"] = Fact("gpu.driver", site.gpu.driver, here)
        if accel == "rocm":
            if not site.gpu.rocm:
                raise ConfigError(f"site {site.name}: an AMD site needs gpu.rocm")
            self.facts["gpu.rocm"] = Fact("gpu.rocm", site.gpu.rocm, here)
        return accel

    def variant(self, accel: str) -> str:
        return "xpu" if accel == "xpu" else "cpu"

    def decide_torch(self, accel: str) -> None:
        if not self.recipe.wants("torch"):
            return
        later: dict[str, list[str]] = {}
        if accel == "cuda":
            later["cuda"] = releases("cuda")
        for comp in ("torch-ccl", "ipex"):
            if self.recipe.requires(comp):
                later[comp] = releases(comp, self.variant(accel))
        picked = self.decide("torch", releases("torch"), later=later)
        assert picked is not None
        pypi = self.site.arch in rule("torch-arch").data["pypi_archs"]
        variant = {"none": "cpu", "cuda": "cuda", "rocm": "rocm", "xpu": "xpu"}[accel]
        reason = self.pin_reason("torch", f"newest torch release allowed by every rule ({variant})")
        options = {
            "variant": variant,
            "dist_backend": {"cuda": "nccl", "rocm": "nccl"}.get(variant, "gloo"),
        }
        if self.facts["torch.index"].value == "intel":
            options["index"] = kb()["install"]["intel_index"]["xpu"]  # IPEX's torch builds
            options["dist_backend"] = "ccl"
        elif variant == "xpu":
            xccl = rule("torch-xpu").data["xccl_from_torch"]
            options["dist_backend"] = "xccl" if at_least(picked.value, xccl) else "gloo"
        self.choose(
            "torch",
            picked,
            reason,
            "pip" if pypi else "conda (Open-CE)",
            options=options,
        )
        if accel == "rocm":
            rocm = self.site.gpu.rocm or ""
            self.components["rocm"] = Choice(
                rocm,
                f"site {self.site.name} ROCm, supported by torch",
                "base image",
                rules=[r for r in picked.rules if r == "torch-rocm"],
            )
            self.components["rccl"] = Choice(
                f"bundled-rocm-{major_minor(rocm)}", "RCCL ships with ROCm", "base image"
            )

    def decide_cuda(self) -> None:
        picked = self.decide("cuda", releases("cuda"))
        assert picked is not None
        torch = self.components["torch"].version
        self.choose(
            "cuda",
            picked,
            self.pin_reason(
                "cuda",
                f"newest CUDA that torch {torch} is built for and driver "
                f"{self.site.gpu.driver} runs (minor-version compatibility)",
            ),
            "base image",
            version=major_minor(picked.value),
        )
        self.facts["cuda"] = Fact("cuda", major_minor(picked.value), picked.fact.origin)

    def decide_nccl(self) -> None:
        cuda = self.components["cuda"].version
        torch = self.components.get("torch")
        if torch is not None and torch.source.startswith("conda"):
            pin = self.pins.get("nccl")
            if pin is not None:
                raise ConfigError(
                    f"{pin.describe('nccl')}: nccl comes with torch's conda packages (Open-CE) "
                    f"on {self.site.arch}; hpcenv does not pin it"
                )
            channel = kb()["install"]["conda"][self.site.arch]["channel"]
            self.components["nccl"] = Choice(
                "conda",
                f"the NCCL that the Open-CE pytorch package (cuda{cuda}) depends on, from "
                f"{channel}; its version is the channel's, not pinned by hpcenv",
                "conda (Open-CE)",
            )
            return
        picked = self.decide("nccl", releases("nccl"))
        assert picked is not None
        self.choose(
            "nccl",
            picked,
            self.pin_reason("nccl", f"newest NCCL with a +cuda{cuda} build"),
            "apt (NVIDIA repo)",
            options={"package": f"libnccl2={picked.value}-1+cuda{cuda}"},
        )

    def decide_mpi(self) -> None:
        host = self.site.mpi
        if host.model == "site-build":
            self.decide_site_build_mpi()
            return
        families = kb()["mpi_families"]
        host_abi = families[host.name]["abi"]
        pkgs = self.os[self.site.os]["packages"]
        pin = self.pins.get("mpi")
        pinned = None
        if pin:
            name, version = parse_spec(pin.value)
            version = version or pkgs.get(name, "")
            pinned = Fact("mpi", f"{name}@{version}", pin.origin, pin.forced)
            reason = self.pin_reason("mpi", "")
        elif host.model == "bind":
            name = kb()["image_mpi_for_family"][host_abi]
            version = pkgs[name]
            reason = (
                f"bind model over host {host.spec}: image carries {name} ({host_abi} ABI), "
                "replaced by the host MPI at run time"
            )
            cray = rule("cray-mpich-image-mpich")
            if host.name == "cray-mpich" and host.version:
                version = cray.data["image_mpich"].get(major(host.version), version)
                reason += (
                    f"; MPICH {version} built from source, as the site documents for "
                    f"cray-mpich-abi {major(host.version)}.x (rule cray-mpich-image-mpich)"
                )
        else:
            name = host.name
            version = host.version or pkgs.get(name, "")
            reason = f"hybrid model: same MPI family and version as the host ({host.spec})"
        picked = self.decide(
            "mpi", [f"{name}@{version}"], pinned=pinned, skip=["daal4py-mpich-abi"]
        )
        assert picked is not None
        src = "apt" if pkgs.get(name) == version else "source"
        options = {"abi": families[name]["abi"]}
        if src == "source" and name == "mpich":
            options["configure"] = rule("cray-mpich-image-mpich").data["configure"]
        soname = rule("debian-mpich-soname").data
        if (
            host.model == "bind"
            and src == "apt"
            and name == "mpich"
            and self.site.os in soname["os"]
            and self.site.arch in soname["lib_dir"]
        ):
            # The site replaces the ABI name; the image must load its MPI under that name.
            options["abi_soname"] = f"{soname['abi_soname']} -> {soname['library']}"
            options["lib_dir"] = soname["lib_dir"][self.site.arch]
            reason += (
                f"; {self.site.os} names it {soname['library']}: the image adds "
                f"{soname['abi_soname']} and its programs load that name "
                f"(rule {self.use('debian-mpich-soname')})"
            )
            picked.rules.append("debian-mpich-soname")
        self.choose(
            "mpi",
            picked,
            reason,
            src,
            version=version,
            implementation=name,
            options=options,
        )
        self.decide_pmix()

    def decide_site_build_mpi(self) -> None:
        """site-build: no MPI in the image; the host's, mounted at its own path while the image
        builds, is what mpi4py and Horovod compile against, and the job binds it (rule
        mpi-site-build). PMIx and the fabric libraries come with the host MPI, not the image."""
        host = self.site.mpi
        families = kb()["mpi_families"]
        pinned = Fact("mpi", host.spec, f"site {self.site.name}, site-build model")
        picked = self.decide("mpi", [host.spec], pinned=pinned, skip=["daal4py-mpich-abi"])
        assert picked is not None
        picked.rules.append(self.use("mpi-site-build"))
        root = host.root or ""
        self.choose(
            "mpi",
            picked,
            f"site-build model: the host's {host.spec} at {root}, mounted at the same path while "
            "the image builds (no MPI of the image's own); MPI programs are compiled against it "
            "and the job binds it",
            "host (mounted at build time)",
            version=host.version or "",
            implementation=host.name,
            options={
                "abi": families[host.name]["abi"],
                "root": root,
                "mpicc": f"{root}/bin/mpicc",
                "mpicxx": f"{root}/bin/mpicxx",
            },
        )

    def decide_pmix(self) -> None:
        pkgs = self.os[self.site.os]["packages"]
        picked = self.decide("pmix", [pkgs["pmix"]])
        assert picked is not None
        version = picked.value
        reason = self.pin_reason("pmix", f"PMIx of {self.site.os}")
        if "mpi-hybrid-pmi" in picked.rules:
            reason += f"; major {major(version)} matches host {self.site.mpi.pmi} (srun --mpi=pmix)"
        self.choose("pmix", picked, reason, "apt" if version == pkgs["pmix"] else "source")

    def decide_fabric(self) -> None:
        fabric = self.site.mpi.fabric
        if fabric not in ("ucx", "libfabric") or self.site.mpi.model == "site-build":
            return  # site-build: the host MPI's own transport, bound with it
        pkgs = self.os[self.site.os]["packages"]
        picked = self.decide(fabric, [pkgs[fabric]])
        assert picked is not None
        self.choose(
            fabric,
            picked,
            f"site {self.site.name} fabric is {fabric}; the image needs its user-space library",
            "apt" if picked.value == pkgs[fabric] else "source",
        )

    def decide_intel_stack(self, accel: str) -> None:
        torch = self.components.get("torch")
        variant = self.variant(accel)
        index = kb()["install"]["intel_index"][variant]
        for comp in ("torch-ccl", "ipex"):
            if torch is None and self.recipe.requires(comp):  # built for one torch only
                raise ConfigError(
                    f"recipe {self.recipe.name}: components: {comp} needs torch; add torch"
                )
            if self.recipe.wants(comp) and torch is None:
                self.excluded[comp] = "optional and built for torch, which the recipe lacks"
            if not self.recipe.wants(comp) or torch is None:
                continue
            picked = self.decide(comp, releases(comp, variant), required=self.recipe.requires(comp))
            if picked is None:
                continue
            self.choose(
                comp,
                picked,
                self.pin_reason(comp, f"{comp} build with torch's major.minor ({variant})"),
                f"pip ({index})",
                options={"index": index},
            )
        if "torch-ccl" in self.components:
            ccl = self.components["torch-ccl"].version
            bundled = rule("oneccl-torch-ccl").table.get(major_minor(ccl), [])
            picked = self.decide("oneccl", bundled or ["bundled"])
            assert picked is not None
            self.choose(
                "oneccl",
                picked,
                self.pin_reason("oneccl", f"the oneCCL that torch-ccl {ccl} bundles")
                + ("" if bundled else " (its version is not in the knowledge base)"),
                "bundled with torch-ccl",
            )

    def decide_oneccl_pypi(self) -> None:
        """oneCCL itself from PyPI (``oneccl-cpu-devel``), for a recipe that wants it and gets
        none bundled with torch-ccl: the newest release whose wheels work alone (rule
        oneccl-pypi) and that Horovod's CCL operations build with (rule horovod-oneccl)."""
        if not self.recipe.wants("oneccl") or "oneccl" in self.components:
            return
        self.facts["oneccl.from"] = Fact("oneccl.from", "pypi", f"recipe {self.recipe.name}")
        # look ahead to Horovod only for releases tried here; a pin's conflict is reported once,
        # where Horovod is decided
        ahead = self.recipe.requires("horovod") and "oneccl" not in self.pins
        later = {"horovod": releases("horovod")} if ahead else {}
        picked = self.decide(
            "oneccl",
            releases("oneccl", "pypi"),
            later=later,
            required=self.recipe.requires("oneccl"),
        )
        if picked is None:
            return
        install = kb()["install"]["oneccl_pypi"]
        impi = rule("oneccl-pypi").data["impi_rt"].get(picked.value, "")
        options = {
            "package": f"{install['package']}=={picked.value}",
            "prefix": install["prefix"],
            **{k: str(v) for k, v in install["runtime_env"].items()},
        }
        if impi:
            options["impi_rt"] = f"impi-rt=={impi}"
        reason = self.pin_reason(
            "oneccl",
            "newest oneCCL on PyPI whose wheels work alone and that Horovod's CCL operations "
            f"build with; installed under {install['prefix']} (not the venv: impi-rt's mpirun "
            "would shadow the image MPI's); ATL over OFI with impi-rt's libfabric",
        )
        self.choose(
            "oneccl", picked, reason, f"pip ({install['package']}, --prefix)", options=options
        )

    def decide_horovod(self, accel: str) -> None:
        if not self.recipe.wants("horovod"):
            return
        if "torch" not in self.components:  # Horovod is built against PyTorch only
            raise ConfigError(
                f"recipe {self.recipe.name}: components: horovod needs torch; add torch"
            )
        picked = self.decide("horovod", releases("horovod"))
        assert picked is not None
        torch = self.components["torch"].version
        needs_cxx17 = applies(rule("horovod-torch-cxx17"), self.known())
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
            picked.rules.append("horovod-ccl")
            options["HOROVOD_CPU_OPERATIONS"] = "CCL"
            oneccl = self.components["oneccl"]
            if "prefix" in oneccl.options:
                options["CCL_ROOT"] = oneccl.options["prefix"]
                notes.append(
                    f"CPU operations on oneCCL {oneccl.version} by default; "
                    f"HOROVOD_CPU_OPERATIONS={'|'.join(o.upper() for o in ops if o != 'nccl')} "
                    "picks one at run time"
                )
            elif "gloo" in ops:
                ops.remove("gloo")
                notes.append("Gloo off with CCL, as upstream's oneCCL image does")
        if "gloo" in ops:
            options["HOROVOD_WITH_GLOO"] = "1"
        else:
            options["HOROVOD_WITHOUT_GLOO"] = "1"
        if "nccl" in ops:
            options["HOROVOD_GPU_OPERATIONS"] = "NCCL"
            if self.components["torch"].source.startswith("conda"):
                options["HOROVOD_NCCL_HOME"] = "/opt/venv"  # NCCL came with torch's conda env
            if accel == "rocm":
                options["HOROVOD_GPU"] = "ROCM"
        if needs_cxx17:
            options["cxx17_patch"] = "CMAKE_CXX_STANDARD 14->17 in CMakeLists.txt and horovod/torch"
            notes.append(f"C++17 patch: torch {torch} needs C++17 (rule horovod-torch-cxx17)")
        picked.rules.append(self.use("horovod-release-build"))
        options["release_build"] = "setup.py's CMake build type RelWithDebInfo -> Release"
        notes.append(
            "built as CMake Release: -O3 as upstream's build, no debug info (rule horovod-release-build)"
        )
        options["operations"] = ",".join(ops)
        reason = self.pin_reason("horovod", "newest Horovod release that builds against this torch")
        self.choose(
            "horovod", picked, "; ".join([reason, *notes]), "source (sdist)", options=options
        )

    def decide_network_plugin(self, accel: str) -> None:
        """aws-ofi-nccl, which NCCL/RCCL need on Slingshot, from where the site documents it."""
        plugin = self.site.network_plugin
        if plugin is None or accel not in ("cuda", "rocm"):
            return
        self.use("network-plugin")
        where = "built into the image" if plugin.source == "image" else f"host: {plugin.how}"
        lib = "RCCL" if accel == "rocm" else "NCCL"
        self.components["net-plugin"] = Choice(
            plugin.version or "site build",
            f"aws-ofi-nccl for {lib} over libfabric, {where}",
            plugin.source,
            implementation="aws-ofi-nccl",
            rules=["network-plugin"],
        )

    def decide_mpi4py(self) -> None:
        if not self.recipe.wants("mpi4py"):
            return
        if self.recipe.python_from == "os":
            self.os_python_packages()
            return
        picked = self.decide("mpi4py", releases("mpi4py"))
        assert picked is not None
        mpi = self.components["mpi"]
        if mpi.source.startswith("host"):
            picked.rules.append(self.use("mpi4py-source-no-debug"))
            self.choose(
                "mpi4py",
                picked,
                self.pin_reason(
                    "mpi4py",
                    f"built from source with MPICC={mpi.options['mpicc']} (the host "
                    f"{mpi.implementation}, site-build model), the interpreter's CFLAGS "
                    "without debug info (rule mpi4py-source-no-debug)",
                ),
                "pip (source)",
                options={"MPICC": mpi.options["mpicc"], "CFLAGS": "python's CFLAGS -g0"},
            )
            return
        self.choose(
            "mpi4py",
            picked,
            self.pin_reason(
                "mpi4py", f"binary wheel; loads the image's {mpi.implementation} at run time"
            ),
            "pip",
        )

    def os_python_packages(self) -> None:
        """mpi4py and numpy from the OS's packages: they are built against the OS's own Open
        MPI, so the image's MPI must be that one, from apt."""
        site, recipe = self.site, self.recipe
        here = f"recipe {recipe.name} (python_from: os) on site {site.name}"
        others = sorted(set(recipe.components) - {"mpi4py"})
        if others:
            raise ConfigError(f"{here}: only mpi4py comes from the OS's packages, not {others}")
        known = self.os[site.os].get("python_packages", {})
        if "mpi4py" not in known:
            raise ConfigError(f"{here}: hpcenv knows no python packages of {site.os}")
        mpi = self.components["mpi"]
        if mpi.source != "apt" or mpi.implementation != "openmpi":
            raise ConfigError(
                f"{here}: the OS's mpi4py is built against its Open MPI, "
                f"but the image's MPI is {mpi.implementation}@{mpi.version} from {mpi.source}"
            )
        src = f"{site.os} packages [{self.os['source']}]"
        for name in ("mpi4py", "numpy"):
            self.components[name] = Choice(
                known[name],
                f"python3-{name} of {src}",
                "apt",
                options={"package": f"python3-{name}"},
            )

    def decide_daal4py(self) -> None:
        """daal4py's SPMD mode needs an MPICH-ABI MPI: the image's, or a side runtime (hybrid)."""
        if not self.recipe.wants("daal4py"):
            return
        picked = self.decide("daal4py", releases("daal4py"), skip=["daal4py-mpich-abi"])
        assert picked is not None
        version = picked.value
        mpi = self.components["mpi"]
        abi = evaluate(rule("daal4py-mpich-abi"), self.known())
        assert abi is not None
        self.use("daal4py-mpich-abi")
        options = {"package": f"scikit-learn-intelex=={version}"}
        if abi.ok:
            reason = f"distributed mode uses the image's {mpi.implementation} (MPICH ABI)"
            options["launcher"] = "mpiexec"
        elif self.site.mpi.model == "hybrid":
            side = self.os[self.site.os]["packages"]["mpich"]
            reason = (
                f"distributed mode needs an MPICH-ABI {mpi_soname('mpich')} but the image MPI is "
                f"{mpi.implementation} (hybrid with the host); adds Debian MPICH {side} as a "
                f"side runtime linked as /opt/mpich-abi/lib/{mpi_soname('mpich')}, launched with "
                "mpiexec.mpich inside one container"
            )
            options |= {
                "side_mpi": f"mpich@{side}",
                "launcher": "mpiexec.mpich",
                "lib_dir": "/opt/mpich-abi/lib",
            }
        else:
            host = self.facts["host.mpi"]
            why = (
                f"{abi.detail}, but the {self.site.mpi.model} model needs the image MPI in "
                f"the host's {mpi.options['abi']} family [also rule mpi-bind-abi]"
            )
            if self.recipe.requires("daal4py"):
                failed = Picked(
                    Fact("daal4py", version, f"recipe {self.recipe.name}"),
                    failures=[Verdict(abi.rule, False, why, (host,))],
                    ok=False,
                )
                self.conflict("daal4py", failed)
                return
            self.excluded["daal4py"] = f"{why} [rule daal4py-mpich-abi]"
            del self.facts["daal4py"]
            return
        picked.rules.append("daal4py-mpich-abi")
        self.choose("daal4py", picked, reason, "pip", options=options)

    def decide_mpi_abi(self) -> None:
        """The MPI-5 standard ABI (:mod:`hpcenv.mpi_abi`): the decision and its one line are
        ``self.mpi_abi``. Where it fits, the image's MPI becomes the ABI implementation of rule
        ``mpi-abi-image`` (PyPI's mpich wheel in the venv, for running alone) and mpi4py is
        built from source with its ``mpicc_abi``; the family MPI the bind model would have
        carried is named in the reason. Where it does not, the lock stays as it was: the line
        would change every image's lock label, and with it every image built today."""
        self.mpi_abi = mpi_abi.decide(self.site, self.recipe, self.components)
        if not self.mpi_abi.fits:
            return
        family = self.components["mpi"]
        image = rule("mpi-abi-image").data
        rules = [self.use(r) for r in (*self.mpi_abi.rules, "mpi-abi-image")]
        self.components["mpi"] = Choice(
            image["version"],
            f"{self.mpi_abi.reason}; the image carries PyPI's {image['package']} as its own "
            f"{mpi_abi.soname()} (in place of {family.implementation} {family.version}, "
            f"{family.options.get('abi')} ABI) and the site's {self.site.mpi.spec} is bound "
            "over it at run time (rule mpi-abi-image)",
            "pip",
            implementation=image["implementation"],
            options={
                "abi": mpi_abi.STANDARD_ABI,
                "standard_abi": mpi_abi.soname(),
                "package": image["package"],
                "mpicc": f"{VENV}/{image['mpicc']}",
                "lib_dir": f"{VENV}/{image['lib_dir']}",
            },
            rules=rules,
        )
        mpi4py = self.components.get("mpi4py")
        if mpi4py is not None:
            self.components["mpi4py"] = Choice(
                mpi4py.version,
                f"built from source with MPICC={VENV}/{image['mpicc']} (mpi_abi.h, links "
                f"{mpi_abi.soname()} only; rule mpi-abi-image), the interpreter's CFLAGS without "
                "debug info (rule mpi4py-source-no-debug)",
                "pip (source)",
                options={"MPICC": f"{VENV}/{image['mpicc']}", "CFLAGS": "python's CFLAGS -g0"},
                rules=[*mpi4py.rules, "mpi-abi-image", self.use("mpi4py-source-no-debug")],
                rejected=mpi4py.rejected,
            )
        hvd = self.components.get("horovod")
        if hvd is not None:  # its MPI operations: C++ compiled and linked by the ABI wrappers
            self.components["horovod"] = replace(
                hvd,
                reason=f"{hvd.reason}; its MPI operations built against mpi_abi.h: "
                f"CC={VENV}/{image['mpicc']} CXX={VENV}/{image['mpicxx']} (CMake's FindMPI "
                f"takes the compiler itself as MPI's; links {mpi_abi.soname()} only; rule "
                "mpi-abi-image)",
                options={
                    **hvd.options,
                    "CC": f"{VENV}/{image['mpicc']}",
                    "CXX": f"{VENV}/{image['mpicxx']}",
                },
                rules=[*hvd.rules, "mpi-abi-image"],
            )

    def build_info(self, accel: str) -> dict[str, Any]:
        site = self.site
        osinfo = self.os[site.os]
        if site.build.base_image:
            base = site.build.base_image
        elif accel == "cuda" and "cuda_base_image" in osinfo:
            base = osinfo["cuda_base_image"].format(cuda_tag=self.cuda_tag())
        elif accel == "rocm" and "rocm_base_image" in osinfo:
            base = osinfo["rocm_base_image"].format(rocm=self.components["rocm"].version)
        else:
            base = osinfo["base_image"]
        return {
            "base_image": base,
            "bootstrap_base": site.build.bootstrap_base,
            "debootstrap_suite": osinfo.get("debootstrap_suite"),
            "platform": platforms.ARCHES[site.arch].platform,
            "engine": site.build.engine,
            "jobs": site.build.jobs,
            "accelerator": accel,
            "user": "hpc",
            **({"python_from": "os"} if self.recipe.python_from == "os" else {}),
        }

    def cuda_tag(self) -> str:
        """The nvidia/cuda tag stem for the locked CUDA minor (cuDNN 8 vs cuDNN 9 naming)."""
        cuda = self.components["cuda"].version
        osinfo = self.os[self.site.os]
        if self.site.arch not in osinfo.get("cuda_image_archs", [self.site.arch]):
            raise ConfigError(
                f"no nvidia/cuda {self.site.os} image for {self.site.arch} "
                f"[{osinfo['cuda_base_image_source']}]; set build.base_image in the site file "
                "to a base that exists for it (e.g. the site's own CUDA base image)"
            )
        tags: dict[str, str] = osinfo.get("cuda_image_tags", {})
        if cuda not in tags:
            raise ConfigError(
                f"no known nvidia/cuda image tag for CUDA {cuda} on {self.site.os} "
                f"(known: {', '.join(tags)}); set build.base_image in the site file"
            )
        return tags[cuda]


def resolve(site: Site, recipe: Recipe, overrides: dict[str, str] | None = None) -> Lock:
    if recipe.content.base:  # a prebuilt base image, where it provably fits (hpcenv.prebuilt)
        from hpcenv.prebuilt import resolve_on_base

        lock = resolve_on_base(site, recipe, overrides or {}, recipe.content.base)
    else:
        lock = Resolver(site, recipe, overrides or {}).resolve()
    if recipe.content:  # a user's additions, checked against the matched stack (issue 22)
        from hpcenv.matched import user_lock

        lock.user_content = user_lock(lock, site, recipe.content)
        from hpcenv.build_inputs import record_inputs  # issue 37: the image records its inputs

        record_inputs(lock, recipe.content, overrides or {})
    return lock
