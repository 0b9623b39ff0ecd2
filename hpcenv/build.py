"""Build plans: resolve + render a site's recipes into contexts, then build them with an engine."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from hpcenv import naming, platforms
from hpcenv.blocks import BUILD_CONTEXT, HOST_MPI_ARG, variables_in
from hpcenv.build_inputs import (
    base_images,
    image_inputs_digest,
    read_stamp,
    trusts_stamps,
    write_stamp,
)
from hpcenv.credentials import (
    APT_AUTH,
    PIP_CONF,
    apt_auth_conf,
    has_credentials,
    pip_credentials,
    secret_files,
)
from hpcenv.engines import BuildResult, Engine, StepCallback, get_engine
from hpcenv.errors import ConfigError
from hpcenv.lock import Lock
from hpcenv.output import output_lock, publish_dir
from hpcenv.paths import cache_dir, file_lock, private_dir
from hpcenv.recipe import Recipe, load_recipe, with_additions
from hpcenv.render import (
    Rendered,
    pip_conf,
    render,
    stage_user_files,
    write,
    write_inputs_digest,
)
from hpcenv.resolver import resolve
from hpcenv.site import Site


@dataclass(frozen=True)
class BuildPlan:
    site: Site
    recipe: str
    lock: Lock
    rendered: Rendered
    context: Path
    tag: str
    owned: bool = True  # the context lives in hpcenv's cache (replaced without --force)
    user_files: tuple[Path, ...] = ()  # host files of the recipe's user content, in lock order

    @property
    def host_mpi(self) -> str | None:
        """site-build: the host MPI prefix the build mounts at its own path, else None."""
        mpi = self.lock.components.get("mpi")
        if mpi is None or not mpi.source.startswith("host"):
            return None
        return mpi.options["root"]

    def volumes(self) -> list[str]:
        """Build-time mounts (``-v``, a build option, not a Dockerfile line): the host MPI."""
        root = self.host_mpi
        return [f"{root}:{root}"] if root else []

    def build_args(self) -> dict[str, str]:
        """``--build-arg NAME=$NAME`` for each variable the host MPI prefix names."""
        root = self.host_mpi
        return {name: f"${name}" for name in variables_in(root)} if root else {}

    def build_command(self, engine_name: str | None = None) -> list[str]:
        """The build command as it will run, variables still unexpanded (``$MPI_ROOT``)."""
        engine = get_engine(engine_name or self.site.build.engine)
        return engine.build_argv(
            self.context,
            self.context / "Dockerfile",
            self.tag,
            self.build_args(),
            self.volumes(),
            flags=self.site.build.flags,
            platform=self.platform_here(),
        )

    def platform_here(self) -> str | None:
        """``--platform`` when this host builds another architecture under emulation; None
        natively, and for a site-build image (built on the site's own login node)."""
        target = platforms.arch(self.lock.arch)
        if self.host_mpi or target == platforms.host_arch():
            return None
        return target.platform

    def sif_steps(self, engine_name: str | None = None) -> list[str]:
        """How the built image becomes a SIF (:func:`hpcenv.sif.build_sif`, ``oci`` source)."""
        fmt = self.site.build.archive
        archive = naming.sif_archive(recipe=self.recipe, site=self.site.name)
        exe = engine_name or self.site.build.engine
        return [
            f"{exe} save --format {fmt} -o {archive} {self.tag}",
            f"apptainer build {naming.sif_file(recipe=self.recipe, site=self.site.name, source='oci')} "
            f"{fmt}:{archive}",
        ]

    def summary(self, engine_name: str | None = None, fmt: str = "oci") -> dict[str, object]:
        comps = self.lock.components
        out: dict[str, object] = {
            "site": self.site.name,
            "recipe": self.recipe,
            "tag": self.tag,
            "platform": self.lock.build["platform"],
            "builds": (
                f"on a login node of {self.site.name}, natively"
                if self.host_mpi
                else platforms.how_built(platforms.arch(self.lock.arch))
            ),
            "base_image": self.lock.build["base_image"],
            "context": str(self.context),
            "components": {
                k: (f"{c.implementation}@{c.version}" if c.implementation else c.version)
                for k, c in sorted(comps.items())
            },
            "excluded": sorted(self.lock.excluded),
            "build_command": _shown(self.build_command(engine_name)),
        }
        if self.host_mpi:
            mpi = comps["mpi"]
            out["build_host"] = (
                f"a login node of {self.site.name} (site-build: {mpi.implementation}@"
                f"{mpi.version} at {self.host_mpi} mounted while the image builds)"
            )
        if self.site.build.storage:
            out["storage"] = self.site.build.storage
        if fmt in ("sif", "both"):
            out["sif"] = self.sif_steps(engine_name)
        return out


def _shown(argv: list[str]) -> str:
    """A command line to read and paste: words naming variables in double quotes, so
    ``$MPI_ROOT`` expands where it runs."""
    return " ".join(f'"{w}"' if "$" in w else shlex.quote(w) for w in argv)


def default_context_root() -> Path:
    return cache_dir(create=False) / "contexts"


def make_plans(
    site: Site,
    recipes: list[str] | None,
    overrides: dict[str, str],
    out_root: Path | None = None,
    *,
    owned: bool | None = None,
    requirements: list[Path] | None = None,
    pip: list[str] | None = None,
) -> list[BuildPlan]:
    """Resolve and render every requested recipe (default: the site's recipes); nothing is
    written until :func:`write_context` or :func:`context_ready`. ``owned``: hpcenv may
    replace the contexts without --force (default: only under its own cache).
    ``requirements``/``pip``: the short form's additions, for one recipe (its image is then
    ``NAME-user``). A user requirement that would replace the matched stack is refused here,
    before anything is built (:mod:`hpcenv.matched`)."""
    names = recipes or list(site.recipes)
    if not names:
        raise ConfigError(f"site {site.name} lists no default recipes; pass --recipe")
    if (requirements or pip) and len(names) != 1:
        raise ConfigError("--requirements and --pip add to one recipe: give exactly one --recipe")
    root = out_root or default_context_root()
    plans = []
    for name in names:
        recipe: Recipe = with_additions(load_recipe(name), requirements or [], pip or [])
        lock = resolve(site, recipe, overrides)
        rendered = render(lock, site)
        context = root / site.name / recipe.name
        tag = naming.image_tag(recipe=recipe.name, site=site.name)
        mine = out_root is None if owned is None else owned
        hosts = tuple(f.host for f in recipe.content.files)
        plans.append(BuildPlan(site, recipe.name, lock, rendered, context, tag, mine, hosts))
    return plans


def write_context(plan: BuildPlan, *, locked: bool = False) -> Path:
    """Write the plan's build context (files + build inputs) and swap it in whole; the folder
    is private (0700): its build inputs are for this user only."""

    def fill(tmp: Path) -> None:
        write(plan.rendered, tmp)
        stage_user_files(plan.lock, list(plan.user_files), tmp)
        stage_build_inputs(plan, tmp)
        write_inputs_digest(tmp)  # now with the CA bundle and wheelhouse

    publish_dir(plan.context, fill, force=plan.owned, locked=locked, mode=0o700)
    return plan.context


@contextmanager
def context_ready(plan: BuildPlan) -> Iterator[Path]:
    """The plan's context, written and held (locked) until the block ends: concurrent builds
    of the same context take turns instead of mixing files."""
    with output_lock(plan.context):
        yield write_context(plan, locked=True)


def _link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists():
        if dst.stat().st_size == src.stat().st_size:
            return
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stage_build_inputs(plan: BuildPlan, context: Path | None = None) -> None:
    """Put the site's CA bundle and wheelhouse into the build-only part of the context."""
    build = plan.site.build
    inputs = (context or plan.context) / BUILD_CONTEXT
    inputs.mkdir(parents=True, exist_ok=True)
    if build.ca_bundle:
        ca = Path(build.ca_bundle)
        if not ca.is_file():
            raise ConfigError(f"site {plan.site.name}: build.ca_bundle {ca} does not exist")
        _link_or_copy(ca.resolve(), inputs / "ca.crt")
    wheels = inputs / "wheels"
    wheels.mkdir(exist_ok=True)
    for folder in build.pip_find_links:
        src = Path(folder)
        if not src.is_dir():
            raise ConfigError(f"site {plan.site.name}: build.pip_find_links {src} is not a folder")
        for wheel in sorted(src.iterdir()):
            if wheel.is_file():
                _link_or_copy(wheel, wheels / wheel.name)


def ensure_base(
    plan: BuildPlan,
    on_step: StepCallback | None = None,
    on_wait: Callable[[Path], None] | None = None,
) -> None:
    """Make the locally bootstrapped base image when the site builds without a registry
    (``on_wait``: told the storage lock's file when its import waits for another build)."""
    lock = plan.lock
    if not lock.build.get("bootstrap_base"):
        return
    from hpcenv.baseimage import ensure_base_image

    ensure_base_image(
        suite=lock.build.get("debootstrap_suite") or "bookworm",
        mirror=plan.site.build.apt_mirror,
        tag=lock.build["base_image"],
        engine=get_engine(plan.site.build.engine),
        arch=lock.arch,
        on_step=on_step,
        on_wait=on_wait,
    )


def build_platform(plan: BuildPlan) -> str | None:
    """``--platform`` for a build of another architecture than this host's (None: native);
    its RUN steps run only under emulation, so a host without the binfmt handler is refused."""
    target = platforms.arch(plan.lock.arch)
    if target == platforms.host_arch():
        return None
    platforms.require_runnable(target, f"the {plan.recipe} image for {plan.site.name}")
    return target.platform


def build_log_path(plan: BuildPlan) -> Path:
    """Where the full log of ``plan``'s build goes (shown before the build starts)."""
    return cache_dir() / "logs" / naming.build_log(recipe=plan.recipe, site=plan.site.name)


def build_lock(plan: BuildPlan, on_wait: Callable[[Path], None]) -> AbstractContextManager[None]:
    """One build of a recipe for a site at a time, for this cache: its log, its image tag and
    its SIF are one set. A second ``hpcenv build`` of the same (a second terminal, a script
    beside an interactive build) waits for the first (``on_wait`` is told the lock file
    first), then finds its layers and its SIF cached instead of building them twice at once
    and writing one log from two builds."""
    lock = private_dir(cache_dir() / "locks") / (build_log_path(plan).stem + ".lock")
    return file_lock(lock, on_wait=lambda: on_wait(lock))


def build_image(
    plan: BuildPlan,
    *,
    engine_name: str | None = None,
    on_step: StepCallback | None = None,
    site_mpi: bool = True,
    on_wait: Callable[[Path], None] | None = None,
) -> BuildResult:
    """Build one plan for real; a failure names the step and its log (BuildError).
    ``site_mpi=False`` (site-build only): leave the host MPI unmounted, the control whose build
    stops at the image's MPI check with its one line. ``on_wait`` is told the engine storage's
    lock file when another build into the same storage holds it (Engine.storage_lock)."""
    engine = get_engine(engine_name or plan.site.build.engine)
    platform = build_platform(plan)
    ensure_base(plan, on_step, on_wait)
    log = build_log_path(plan)
    build_args, volumes = host_expanded(plan)
    if volumes and not site_mpi:
        build_args, volumes = {**build_args, HOST_MPI_ARG: "not mounted"}, []
    flags = list(plan.site.build.flags)
    stamp = image_stamp_path(plan)
    with context_ready(plan) as context:
        started = time.monotonic()
        digest = _inputs_digest(engine, context, build_args, volumes, flags, platform)
        if digest is not None and _up_to_date(engine, plan.tag, stamp, digest):
            return BuildResult(plan.tag, log, time.monotonic() - started, reused=True)
        stamp.unlink(missing_ok=True)  # a failed or different build below leaves no stale match
        with build_secrets(plan.site) as secrets:
            result = engine.build(
                context,
                context / "Dockerfile",
                plan.tag,
                log_path=log,
                on_step=on_step,
                secrets=secrets,
                build_args=build_args,
                volumes=volumes,
                flags=flags,
                platform=platform,
                on_wait=on_wait,
            )
        if digest is None:  # a base the engine pulled for this build: its id is known now
            digest = _inputs_digest(engine, context, build_args, volumes, flags, platform)
        if digest is not None:
            write_stamp(stamp, digest, engine.image_id(plan.tag))
        return result


def image_stamp_path(plan: BuildPlan) -> Path:
    """Where the inputs digest and image id of ``plan``'s last build are kept."""
    return private_dir(cache_dir() / "images") / (build_log_path(plan).stem + ".inputs")


def _inputs_digest(
    engine: Engine,
    context: Path,
    build_args: dict[str, str],
    volumes: list[str],
    flags: list[str],
    platform: str | None,
) -> str | None:
    """The digest of what this build reads; None where no stamp may stand in for the build
    (flags asking for a fresh build or pull, a base image not in the engine's storage yet)."""
    if not trusts_stamps(flags):
        return None
    bases = {}
    for ref in base_images((context / "Dockerfile").read_text()):
        if not engine.image_exists(ref):
            return None
        bases[ref] = engine.image_id(ref)
    return image_inputs_digest(
        context,
        bases,
        build_args=build_args,
        volumes=volumes,
        flags=[*engine.build_options, *flags],  # the engine's own too: --format changes the image
        platform=platform,
    )


def _up_to_date(engine: Engine, tag: str, stamp: Path, digest: str) -> bool:
    """True when ``tag`` is the very image a build from these inputs made."""
    recorded = read_stamp(stamp)
    if recorded is None or recorded[0] != digest or not engine.image_exists(tag):
        return False
    return engine.image_id(tag) == recorded[1]


def host_expanded(plan: BuildPlan) -> tuple[dict[str, str], list[str]]:
    """The plan's build arguments and mounts with this host's values (``$MPI_ROOT`` from the
    site's MPI module): a variable that is unset, or a prefix that is not a folder here, is a
    ConfigError before anything builds (site-build runs on the site's own login node)."""
    root = plan.host_mpi
    if root is None:
        return {}, []
    missing = [name for name in variables_in(root) if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"site {plan.site.name} builds against its host MPI (mpi.model: site-build) but "
            f"${missing[0]} is not set here; build on the site's login node after loading its "
            f"MPI module (mpi.root: {root})"
        )
    prefix = os.path.expandvars(root)
    if not Path(prefix).is_dir():
        raise ConfigError(
            f"site {plan.site.name}: the host MPI prefix {prefix} (mpi.root: {root}) is not a "
            "folder on this host; site-build mounts it into the build"
        )
    args = {name: os.environ[name] for name in variables_in(root)}
    return args, [f"{prefix}:{prefix}"]


def build_secrets(site: Site) -> AbstractContextManager[dict[str, Path]]:
    """The site's credentials as build-secret files (mode 0600, removed after the build):
    ``hpcenv-apt-auth`` for a credentialed apt mirror, ``hpcenv-pip.conf`` (the whole pip
    configuration) for a credentialed pip index. Empty when the site has none."""
    contents = {}
    if has_credentials(site.build.apt_mirror):
        contents[APT_AUTH] = apt_auth_conf(site.build.apt_mirror or "")
    if pip_credentials(site.build):
        contents[PIP_CONF] = pip_conf(site, credentials=True)
    return secret_files(contents, cache_dir() / "secrets")
