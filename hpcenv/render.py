"""Render a lock into a Dockerfile and a Singularity definition, natively, from one model.

Deterministic: the same site, recipe and overrides give byte-identical files.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2

from hpcenv import __version__
from hpcenv.blocks import BUILD_CONTEXT, INPUTS_DIGEST, Blocks, Stage
from hpcenv.build_inputs import hash_files
from hpcenv.credentials import SECRETS_DIR, clean_url, secret_mount
from hpcenv.lock import Lock
from hpcenv.naming import BASE_ARCHIVE
from hpcenv.paths import package_dir, templates_dir
from hpcenv.safe import checked_lines, finalize, ini_line
from hpcenv.site import Site


@dataclass(frozen=True)
class Rendered:
    dockerfile: str
    singularity: str
    lock_json: str
    pip_conf: str
    context: dict[str, str] = field(default_factory=dict)  # the blocks' shipped step files
    # build-context files of a recipe's user content (hpcenv-user/constraints.txt)
    user_inputs: dict[str, str] = field(default_factory=dict)


def docker_quoted(value: str) -> str:
    """A Dockerfile double-quoted word that ENV and LABEL keep as it is: ``\\`` before ``"``,
    ``\\`` and ``$`` (the Dockerfile parser expands ``$NAME`` in these instructions and knows
    no other escapes; JSON's ``\\u00e9`` would arrive as ``u00e9``)."""
    return '"' + re.sub(r'(["\\$])', r"\\\1", value) + '"'


def _env_pair(pair: tuple[str, str], build_args: list[str] | None = None) -> str:
    """``NAME="value"`` for ENV: kept as it is, except ``$ARG``/``${ARG}`` of a build
    argument this stage declared (``ARG MPI_ROOT``), which the build expands on purpose."""
    quoted = docker_quoted(pair[1])
    for name in build_args or []:
        quoted = re.sub(rf"\\\$(\{{{name}\}}|{name}(?!\w))", r"$\1", quoted)
    return f"{pair[0]}={quoted}"


def sh_value(value: str, expands: tuple[str, ...] = ()) -> str:
    """``value`` as one shell word, literal except ``$NAME`` of ``expands`` (the image's own
    ``$PATH``), which stays outside the quotes so the shell expands it."""
    names = "|".join(re.escape(n) for n in expands)
    if not names:
        return shlex.quote(value)
    parts = re.split(rf"(\$(?:{names})(?!\w)|\$\{{(?:{names})\}})", value)
    return "".join(
        f'"{part}"' if i % 2 else shlex.quote(part) for i, part in enumerate(parts) if part
    )


def _label_pair(pair: tuple[str, str]) -> str:
    return f"{pair[0]}={docker_quoted(pair[1])}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        finalize=finalize,  # every placed value is one line unless built by the lines filter
    )
    env.filters["env_pair"] = _env_pair
    env.filters["label_pair"] = _label_pair
    env.filters["sq"] = shlex.quote
    env.filters["sh_value"] = sh_value
    env.filters["secret_mounts"] = lambda ids: "".join(f"{secret_mount(i)} " for i in ids)
    env.filters["bind_mounts"] = lambda pairs: "".join(
        f"--mount=type=bind,source={src},target={dst} " for src, dst in pairs
    )
    env.filters["cache_mounts"] = lambda pairs: "".join(
        f"--mount=type=cache,id={cache_id},target={dst} " for cache_id, dst in pairs
    )
    env.filters["lines"] = lambda items, sep: checked_lines(items, sep)
    return env


def pip_conf(site: Site, *, credentials: bool = False) -> str:
    """pip settings for the build stage (find-links and CA paths as seen inside the build).

    Index URLs lose their ``user:password@`` unless ``credentials`` (the text of the build
    secret ``hpcenv-pip.conf``, see :mod:`hpcenv.credentials`).
    Every line goes through :func:`hpcenv.safe.ini_line`: one ``key = value`` per line, URLs
    only, so a value can never add a key (``trusted-host = *``) or a section."""

    def url(value: str) -> str:
        return value if credentials else clean_url(value)

    lines = ["[global]", ini_line("no-cache-dir", "true")]
    if site.build.pip_index_url:
        lines.append(ini_line("index-url", url(site.build.pip_index_url)))
    if site.build.pip_extra_index_urls:
        extra = " ".join(url(u) for u in site.build.pip_extra_index_urls)
        lines.append(ini_line("extra-index-url", extra))
    if site.build.pip_find_links:
        lines.append(ini_line("find-links", "/opt/hpcenv-build/wheels"))
    if site.build.ca_bundle:
        lines.append(ini_line("cert", "/opt/hpcenv-build/ca.crt"))
    return "\n".join(lines) + "\n"


def singularity_source(lock: Lock) -> tuple[str, str]:
    """(Bootstrap, From) for the definition: a registry image, or the locally made base."""
    base = lock.build["base_image"]
    if lock.build.get("bootstrap_base") or base.startswith("localhost/"):
        return "oci-archive", BASE_ARCHIVE
    return "docker", base


def apptainer_args(stages: list[Stage]) -> list[Stage]:
    """The stages with each build argument (``arg``) written as Apptainer's ``{{ NAME }}``
    (``apptainer build --build-arg NAME=...``): ``%post`` and ``%environment`` do not see the
    builder's environment, and ``$NAME`` inside single quotes would stay a literal."""
    out = []
    for stage in stages:
        names = [p.text for p in stage.primitives if p.kind == "arg"]
        if not names:
            out.append(stage)
            continue
        pattern = re.compile(r"\$(?:\{(" + "|".join(names) + r")\}|(" + "|".join(names) + r")\b)")

        def sub(text: str, pattern: re.Pattern[str] = pattern) -> str:
            return pattern.sub(lambda m: "{{ " + (m.group(1) or m.group(2)) + " }}", text)

        prims = [
            replace(
                p,
                commands=tuple(sub(c) for c in p.commands),
                pairs=tuple((k, sub(v)) for k, v in p.pairs),
                text=p.text if p.kind == "arg" else sub(p.text),
            )
            for p in stage.primitives
        ]
        out.append(Stage(stage.name, stage.base, prims))
    return out


def render(lock: Lock, site: Site, *, checks: bool = True, two_stage: bool = False) -> Rendered:
    """The recipe files of a resolved stack; ``two_stage``: see :meth:`Blocks.stages`."""
    lock_json = lock.to_json()
    blocks = Blocks(lock, site)
    stages: list[Stage] = blocks.stages(lock_json, checks, two_stage)
    bootstrap, bootstrap_from = singularity_source(lock)
    env = _environment()
    common = {"version": __version__, "lock": lock.to_dict(), "stages": stages}
    dockerfile = env.get_template("Dockerfile.j2").render(**common)
    singularity = env.get_template("Singularity.def.j2").render(
        **(common | {"stages": apptainer_args(stages)}),
        bootstrap=bootstrap,
        bootstrap_from=bootstrap_from,
        test_commands=blocks.test_commands(),
        secrets_dir=SECRETS_DIR,
    )
    user_inputs = {}
    if "constraints" in lock.user_content:  # even none: the pip step names the file
        from hpcenv.matched import USER_CONTEXT, constraints

        text = constraints(lock.user_content["constraints"])
        user_inputs[f"{USER_CONTEXT}/constraints.txt"] = text
    return Rendered(
        dockerfile,
        singularity.lstrip("\n"),
        lock_json,
        pip_conf(site),
        blocks.context(),
        user_inputs,
    )


def stage_user_files(lock: Lock, hosts: list[Path], out: Path) -> list[Path]:
    """Copy a recipe's user files (``hosts``, checked by :mod:`hpcenv.usercontent`) to the
    context places the lock names (``hpcenv-user/files/N/NAME``); links are followed, each was
    checked to stay inside the recipe's folder."""
    written = []
    for host, entry in zip(hosts, lock.user_content.get("files", []), strict=True):
        dest = out / entry["src"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if host.is_dir():
            shutil.copytree(host, dest, symlinks=False)
        else:
            shutil.copy2(host, dest)
        written.append(dest)
    return written


def checks_dir() -> Path:
    return package_dir() / "checks"


BUILD_INPUTS_NOTE = (
    "hpcenv build puts the build-only inputs here: pip.conf, the site's CA bundle and\n"
    "its wheelhouse. `hpcenv render` leaves them out: they may hold credentials.\n"
)


def write(
    rendered: Rendered, out: Path, *, checks: bool = True, build_inputs: bool = True
) -> list[Path]:
    """Write the build context's text files (Dockerfile, Singularity.def, lock, the blocks'
    step files, checks) into ``out``, a fresh folder (see :func:`hpcenv.output.publish_dir`).
    ``build_inputs``: also ``hpcenv-build/pip.conf``; without it a note says where those inputs
    come from.

    Build contexts are private folders (mode 0700); pip.conf itself keeps the default file
    mode because the mode is part of the layer-cache key of the ``COPY hpcenv-build`` step.
    The inputs' digest (:func:`write_inputs_digest`) is written last.
    """
    files = {
        "Dockerfile": rendered.dockerfile,
        "Singularity.def": rendered.singularity,
        "stack.lock.json": rendered.lock_json,
        **rendered.context,
    }
    written = []
    for rel, text in (files | rendered.user_inputs).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    inputs = out / BUILD_CONTEXT
    inputs.mkdir(exist_ok=True)
    if build_inputs:
        pip_conf = inputs / "pip.conf"
        pip_conf.write_text(rendered.pip_conf, encoding="utf-8")
        written.append(pip_conf)
    else:
        (inputs / "README").write_text(BUILD_INPUTS_NOTE, encoding="utf-8")
    if checks:
        dest = out / "checks"
        src = checks_dir()
        if src.is_dir():
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            dest.mkdir()
        written.append(dest)
    written.append(write_inputs_digest(out))
    return written


def write_inputs_digest(out: Path) -> Path:
    """``INPUTS_DIGEST`` in the context ``out``: the sha256 of its build inputs' folder (names,
    sizes, bytes), which a one-stage image copies (:meth:`hpcenv.blocks.Blocks.wheels_stage`);
    written again once the site's CA bundle and wheelhouse are staged (hpcenv.build)."""
    digest = hashlib.sha256()
    hash_files(digest, out / BUILD_CONTEXT)
    path = out / INPUTS_DIGEST
    path.write_text(digest.hexdigest() + "\n", encoding="utf-8")
    return path
