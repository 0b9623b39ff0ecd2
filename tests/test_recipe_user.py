"""Open recipes (issue 22): a user's own recipe file and the short form add pip and apt packages,
files, environment, labels and a working directory to the matched image, and can never
silently replace the matched stack.

Unit tests on the model, its validation, the constraints and companion rules and both emitters;
every refusal also as a process test of the installed ``hpcenv`` (exit 2, one line); and one
real podman build of a user recipe on top of the local horovod-cpu image.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError
from requirements import need_image

from hpcenv.errors import ConfigError
from hpcenv.matched import check, companions, constraints, protected
from hpcenv.recipe import load_recipe, with_additions
from hpcenv.render import docker_quoted, render
from hpcenv.resolver import resolve
from hpcenv.safe import validation_message
from hpcenv.site import load_site
from hpcenv.usercontent import UserRequirement, UserSection, read_requirements

HPCENV = Path(sys.executable).with_name("hpcenv")


def write_recipe(folder: Path, user: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "myproject.yaml"
    body = "name: myproject\nextends: horovod-cpu\n" + extra + "user:\n"
    path.write_text(body + textwrap.indent(textwrap.dedent(user), "  "), encoding="utf-8")
    return path


def local_lock(recipe_path: Path | None = None):
    site = load_site("local")
    recipe = load_recipe(str(recipe_path) if recipe_path else "horovod-cpu")
    return site, recipe, resolve(site, recipe)


# -- the model and its validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("pip", ["-e ."], "pip option"),
        ("pip", ["not a requirement!"], "not a pip requirement"),
        ("apt", ["Bad_Name"], "characters or a form"),
        ("apt", ["curl; rm -rf /"], "characters or a form"),
        ("requirements", ["../outside.txt"], "'..' is not allowed"),
        ("requirements", ["/etc/passwd"], "characters or a form"),
        ("files", [{"src": "a", "dest": "/opt/venv/lib"}], "hpcenv's image uses"),
        ("files", [{"src": "a", "dest": "/"}], "whole image"),
        ("files", [{"src": "a", "dest": "relative"}], "characters or a form"),
        ("files", [{"src": "a", "dest": "/opt/$HOME"}], "characters or a form"),
        ("env", {"BASH_ENV": "/x"}, "BASH_ENV"),
        ("env", {"LD_PRELOAD": "/x.so"}, "LD_PRELOAD"),
        ("env", {"PYTHONPATH": "/x"}, "PYTHONPATH"),
        ("env", {"HPCENV_SITE": "x"}, "HPCENV_"),
        ("env", {"A": "two\nlines"}, "newline"),
        ("labels", {"io.hpcenv.lock": "{}"}, "hpcenv sets this label"),
        ("labels", {"Bad Key": "x"}, "characters or a form"),
        ("workdir", "../up", "characters or a form"),
    ],
)
def test_user_section_refuses(field: str, value: object, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        UserSection.model_validate({field: value})
    assert words in validation_message(err.value, "recipe")


def test_user_section_takes_plain_values() -> None:
    section = UserSection.model_validate(
        {
            "pip": ["tabulate>=0.9", "six; python_version >= '3'"],
            "apt": ["libsndfile1", "curl=7.88.1-10+deb12u5"],
            "files": [{"src": "src/pkg", "dest": "/opt/project/"}],
            "env": {"MY_SETTING": 'a $HOME "q" \\ é'},
            "labels": {"org.example.team": "ml group"},
            "workdir": "/opt/project",
        }
    )
    assert section.pip == ["tabulate>=0.9", 'six; python_version >= "3"']
    assert section.files[0].dest == "/opt/project"


def test_extends_takes_components_and_resolves_paths(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text(
        "# comment\ntabulate==0.9.0  # inline\n-r more.txt\n", encoding="utf-8"
    )
    (tmp_path / "more.txt").write_text("six\n", encoding="utf-8")
    (tmp_path / "src").mkdir()
    path = write_recipe(
        tmp_path,
        """
        requirements: [requirements.txt]
        pip: ["attrs"]
        files: [{src: src, dest: /opt/myproject}]
        """,
    )
    recipe = load_recipe(str(path))
    builtin = load_recipe("horovod-cpu")
    assert recipe.name == "myproject"
    assert recipe.components == builtin.components
    assert recipe.horovod_operations == builtin.horovod_operations
    reqs = [(r.spec, r.origin) for r in recipe.content.requirements]
    assert reqs == [
        ("attrs", "myproject.yaml: user.pip[0]"),
        ("tabulate==0.9.0", "requirements.txt:2"),
        ("six", "requirements.txt>more.txt:1"),
    ]
    assert recipe.content.files[0].host == (tmp_path / "src").resolve()


def test_a_recipe_without_components_or_extends_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("name: r\nuser: {pip: [six]}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="extends"):
        load_recipe(str(path))


def test_extends_cycle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nextends: ./b.yaml\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("name: b\nextends: ./a.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="leads back to itself"):
        load_recipe(str(tmp_path / "a.yaml"))


def test_symlink_out_of_the_recipe_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "secret").symlink_to("/etc/hostname")
    path = write_recipe(tmp_path, "files: [{src: src, dest: /opt/x}]\n")
    with pytest.raises(ConfigError, match="a link out of the recipe's folder"):
        load_recipe(str(path))
    (tmp_path / "link.txt").symlink_to("/etc/hostname")
    path = write_recipe(tmp_path, "requirements: [link.txt]\n")
    with pytest.raises(ConfigError, match="leads out of the recipe's folder"):
        load_recipe(str(path))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("--extra-index-url https://example.org/simple\nsix\n", "pip option --extra-index-url"),
        ("-e .\n", "pip option -e"),
        ("six --hash=sha256:00\n", "not a pip requirement"),
        ("-r ../up.txt\n", "leads out of the recipe's folder"),
        ("-r req.txt\n", "a cycle"),
    ],
)
def test_requirements_file_refusals(tmp_path: Path, text: str, words: str) -> None:
    sub = tmp_path / "p"
    sub.mkdir()
    (tmp_path / "up.txt").write_text("six\n", encoding="utf-8")
    (sub / "req.txt").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=words):
        read_requirements(sub / "req.txt", sub, "req.txt")


def test_short_form_names_the_image_after_the_project(tmp_path: Path) -> None:
    """Issue 37: NAME-PROJECT, the project being the requirements file's folder (not NAME-user,
    which every project on a site shared)."""
    req = tmp_path / "My_Project" / "requirements.txt"
    req.parent.mkdir()
    req.write_text("tabulate\n", encoding="utf-8")
    recipe = with_additions(load_recipe("horovod-cpu"), [req], ["six"])
    assert recipe.name == "horovod-cpu-my-project"
    assert [r.spec for r in recipe.content.requirements] == ["six", "tabulate"]
    assert with_additions(load_recipe("horovod-cpu"), [], []).name == "horovod-cpu"


# -- the matched stack protected ---------------------------------------------------------------


def test_constraints_are_the_locks_pip_components() -> None:
    _, _, lock = local_lock()
    pins = {dist: ver for dist, ver, _ in protected(lock).values()}
    assert pins == {
        "torch": "2.13.0",
        "horovod": "0.28.1",
        "mpi4py": "4.1.2",
        "scikit-learn-intelex": "2026.2.0",
    }
    text = constraints(pins)
    assert "torch==2.13.0\n" in text and "horovod==0.28.1\n" in text


@pytest.mark.parametrize("spec", ["torch", "torch>=2", "torch==2.13.0", "torch~=2.13", "Horovod"])
def test_requirements_the_image_satisfies_pass(spec: str) -> None:
    _, _, lock = local_lock()
    check(lock, (UserRequirement(spec, "x"),))


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("torch==2.1.0", "torch==2.1.0 would replace the matched stack's torch 2.13.0"),
        ("torch<2", "torch<2 would replace the matched stack's torch 2.13.0"),
        ("horovod>=0.29", "horovod>=0.29 would replace the matched stack's horovod 0.28.1"),
        ("MPI4PY==3.1.5", "mpi4py==3.1.5 would replace the matched stack's mpi4py 4.1.2"),
        ("torch @ https://example.org/torch.whl", "torch@ https://example.org/torch.whl"),
    ],
)
def test_a_conflicting_requirement_is_refused_in_one_line(spec: str, words: str) -> None:
    _, _, lock = local_lock()
    with pytest.raises(ConfigError) as err:
        check(lock, (UserRequirement(spec, "req.txt:3"),))
    message = str(err.value)
    assert "\n" not in message and message.startswith("req.txt:3: ")
    assert words.lower() in message.lower()


def test_torchvision_from_the_wheelhouse_torch_came_from(tmp_path: Path) -> None:
    """The local torch is the +cpu wheel of the site's wheelhouse: torchvision must be too."""
    site, _, lock = local_lock()
    reqs = (UserRequirement("torchvision", "req.txt:1"),)
    with pytest.raises(ConfigError) as err:
        companions(lock, site, reqs)
    message = str(err.value)
    assert "torch 2.13.0+cpu" in message and "torchvision-0.28.*+cpu" in message
    assert "https://download.pytorch.org/whl/cpu" in message and "\n" not in message
    # a wheelhouse with the matching +cpu build (and PyPI's plain one, which must not be taken)
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.28.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    build = site.build.model_copy(update={"pip_find_links": [str(tmp_path)]})
    site = site.model_copy(update={"build": build})
    out, index = companions(lock, site, reqs)
    assert [r.spec for r in out] == ["torchvision==0.28.0+cpu"] and index is None


def test_torchvision_from_the_index_torch_came_from() -> None:
    site = load_site("generic-slurm")
    assert not site.build.pip_find_links
    lock = resolve(site, load_recipe("horovod-cpu"))
    variant = lock.components["torch"].options["variant"]
    out, index = companions(lock, site, (UserRequirement("torchvision>=0.20", "x"),))
    series = {"2.13": "0.28", "2.10": "0.25"}[lock.components["torch"].version[:4]]
    assert [r.spec for r in out] == [f"torchvision=={series}.*"]
    assert index is not None and index.startswith("https://download.pytorch.org/whl/")
    assert variant in index


def test_a_companion_of_another_series_is_refused() -> None:
    site, _, lock = local_lock()
    with pytest.raises(ConfigError, match=r"pairs with torchvision 0\.28\.\*"):
        companions(lock, site, (UserRequirement("torchvision==0.29.0", "x"),))


# -- emission: late layers, escaping --------------------------------------------------------------


def user_recipe(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf-8")
    return write_recipe(
        tmp_path,
        """
        pip: ["tabulate==0.9.0"]
        apt: [less]
        files:
          - {src: src, dest: /opt/myproject}
          - {src: notes.txt, dest: /opt/notes/notes.txt}
        env: {GREETING: 'a $HOME "q" \\ é'}
        labels: {org.example.team: ml}
        workdir: /opt/myproject
        """,
    )


def test_dockerfile_puts_user_content_after_the_matched_stack(tmp_path: Path) -> None:
    site, _, lock = local_lock(user_recipe(tmp_path))
    docker = render(lock, site).dockerfile
    venv = docker.index("COPY --from=build /opt/venv /opt/venv")
    pip = docker.index(
        "RUN --mount=type=bind,source=hpcenv-build,target=/opt/hpcenv-build "
        "--mount=type=bind,source=hpcenv-user,target=/opt/hpcenv-user "
        "PIP_CONFIG_FILE=/opt/hpcenv-build/pip.conf"
    )
    assert venv < docker.index("install -y --no-install-recommends less") < pip
    assert "-c /opt/hpcenv-user/constraints.txt tabulate==0.9.0" in docker
    assert "'2.13.0'" in docker and "torchvision.ops.nms" in docker  # the checks after pip
    assert "COPY hpcenv-user/files/0/src /opt/myproject\n" in docker
    assert "COPY hpcenv-user/files/1/notes.txt /opt/notes/notes.txt\n" in docker
    assert 'ENV GREETING="a \\$HOME \\"q\\" \\\\ é"\n' in docker
    assert 'org.example.team="ml"' in docker and docker.endswith(
        'USER hpc\nWORKDIR /opt/myproject\nCMD ["/bin/bash"]\n'
    )
    # the build stage is the built-in recipe's, instruction for instruction (layer cache)
    builtin = render(resolve(site, load_recipe("horovod-cpu")), site).dockerfile

    def build_stage(text: str) -> list[str]:
        stage = text.split("AS runtime")[0]
        return [line for line in stage.splitlines() if not line.startswith("#")]

    assert build_stage(docker) == build_stage(builtin)
    assert "hpcenv-user" not in builtin and "--mount=type=bind" not in builtin


def test_singularity_copies_build_inputs_and_removes_them(tmp_path: Path) -> None:
    site, _, lock = local_lock(user_recipe(tmp_path))
    rendered = render(lock, site)
    sing = rendered.singularity.split("Stage: runtime")[1]
    assert "    hpcenv-build /opt/hpcenv-build\n    hpcenv-user /opt/hpcenv-user\n" in sing
    post = sing.split("%post")[1]
    assert post.index("pip install") < post.index("cp -a /opt/hpcenv-user/files/0/src/.")
    assert post.index("cp -a /opt/hpcenv-user/files/0/src/.") < post.index(
        "rm -rf /opt/hpcenv-build /opt/hpcenv-user"
    )
    assert "export GREETING='a $HOME \"q\" \\ é'" in sing
    assert "COPY" not in sing and "    org.example.team ml\n" in sing
    assert rendered.user_inputs["hpcenv-user/constraints.txt"].endswith("torch==2.13.0\n")
    user = json.loads(rendered.lock_json)["user_content"]
    assert user["files"][0] == {
        "src": "hpcenv-user/files/0/src",
        "dest": "/opt/myproject",
        "kind": "folder",
    }
    assert str(tmp_path) not in rendered.lock_json  # no host path inside the image


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('a "b"', '"a \\"b\\""'),
        ("$HOME ${X}", '"\\$HOME \\${X}"'),
        ("back\\slash", '"back\\\\slash"'),
        ("é", '"é"'),
    ],
)
def test_docker_quoting(value: str, quoted: str) -> None:
    assert docker_quoted(value) == quoted


# -- refusals, as the installed hpcenv ------------------------------------------------------------


def run(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_process_requirements_file_replacing_torch_is_refused_before_the_build(
    tmp_path: Path,
) -> None:
    (tmp_path / "requirements.txt").write_text("numpy\ntorch==2.1.0\n", encoding="utf-8")
    proc = run(
        "build",
        "--site",
        "local",
        "--recipe",
        "horovod-cpu",
        "--requirements",
        "requirements.txt",
        cwd=tmp_path,
    )
    refused(proc, "requirements.txt:2: torch==2.1.0", "torch 2.13.0")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--pip", "torch<2"), ("--pip torch<2", "torch 2.13.0")),
        (("--pip", "torchvision"), ("torchvision", "https://download.pytorch.org/whl/cpu")),
        (("--pip", "-e."), ("pip option",)),
        (("--requirements", "missing.txt"), ("missing.txt: not a file",)),
    ],
)
def test_process_short_form_refusals(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
) -> None:
    refused(
        run(
            "build", "--site", "local", "--recipe", "horovod-cpu", *args, "--dry-run", cwd=tmp_path
        ),
        *words,
    )


def test_process_short_form_needs_one_recipe(tmp_path: Path) -> None:
    proc = run(
        "build",
        "--site",
        "local",
        "-r",
        "horovod-cpu",
        "-r",
        "daal4py",
        "--pip",
        "six",
        "--dry-run",
        cwd=tmp_path,
    )
    refused(proc, "exactly one --recipe")


@pytest.mark.parametrize(
    ("user", "words"),
    [
        ("env: {LD_PRELOAD: /x.so}\n", ("user.env", "LD_PRELOAD")),
        ("env: {BASH_ENV: /x}\n", ("user.env", "BASH_ENV")),
        ("files: [{src: ../x, dest: /opt/x}]\n", ("user.files.0.src", "'..'")),
        ("requirements: [nothere.txt]\n", ("nothere.txt", "does not exist")),
        ("pip: ['torch==2.1.0']\n", ("user.pip[0]: torch==2.1.0", "torch 2.13.0")),
        ("apt: ['x y']\n", ("user.apt.0",)),
        ("colour: red\n", ("user.colour", "unknown field")),
    ],
)
def test_process_recipe_file_refusals(tmp_path: Path, user: str, words: tuple[str, ...]) -> None:
    write_recipe(tmp_path, user)
    for cmd in ("render", "build"):
        extra = ("--format", "docker") if cmd == "render" else ("--dry-run",)
        proc = run(cmd, "--site", "local", "--recipe", "./myproject.yaml", *extra, cwd=tmp_path)
        refused(proc, *words)


def test_process_user_recipe_renders_and_names_its_image(tmp_path: Path) -> None:
    user_recipe(tmp_path)
    proc = run(
        "build", "--site", "local", "--recipe", "./myproject.yaml", "--dry-run", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "localhost/hpcenv/myproject:local" in proc.stdout
    proc = run("render", "--site", "local", "-r", "./myproject.yaml", "--out", "ctx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ctx = tmp_path / "ctx"
    assert (ctx / "hpcenv-user/files/0/src/train.py").is_file()
    assert (ctx / "hpcenv-user/files/1/notes.txt").is_file()
    assert "torch==2.13.0" in (ctx / "hpcenv-user/constraints.txt").read_text(encoding="utf-8")


# -- a real build on top of the local image -------------------------------------------------------


@pytest.mark.podman
def test_podman_user_recipe_builds_on_the_cached_matched_stack(tmp_path: Path) -> None:
    need_image("localhost/hpcenv/horovod-cpu:local", "a user recipe extends the local image")
    from hpcenv.engines import engine_env

    folder = tmp_path / "proj"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "train.py").write_text("print('hi')\n", encoding="utf-8")
    (folder / "requirements.txt").write_text("tabulate==0.9.0\n", encoding="utf-8")
    recipe = folder / "usertest.yaml"
    recipe.write_text(
        textwrap.dedent(
            """\
            name: hpcenv-usertest
            extends: horovod-cpu
            user:
              requirements: [requirements.txt]
              files: [{src: src, dest: /opt/usertest}]
              env: {GREETING: 'a $HOME "q" \\ é'}
              workdir: /opt/usertest
            """
        ),
        encoding="utf-8",
    )
    tag = "localhost/hpcenv/hpcenv-usertest:local"
    proc = run(
        "build",
        "--site",
        "local",
        "--recipe",
        str(recipe),
        "--format",
        "oci",
        "--json",
        cwd=folder,
        timeout=900,  # a cache hit takes seconds; under CI's load the user layers took > 120 s
    )
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)[0]
        log = Path(result["log"]).read_text(encoding="utf-8")
        # the matched stack's layers came from the cache: every step up to the venv's copy
        lines = log.splitlines()
        venv = next(i for i, line in enumerate(lines) if "COPY --from=build /opt/venv" in line)
        steps = [i for i in range(venv + 1) if "STEP " in lines[i] and ": FROM " not in lines[i]]
        built = [lines[i] for i in steps if not lines[i + 1].startswith("--> Using cache")]
        assert len(steps) > 10 and not built, built
        script = (
            'python -c "import tabulate, torch, horovod.torch; '
            'print(tabulate.__version__, torch.__version__)"; '
            'printf "[%s]\\n" "$GREETING"; pwd; ls /opt/usertest; '
            "ls -d /opt/hpcenv-build /opt/hpcenv-user 2>/dev/null; true"
        )
        out = subprocess.run(
            ["podman", "run", "--rm", tag, "bash", "-c", script],
            capture_output=True,
            text=True,
            env=engine_env(),
            check=True,
        ).stdout.splitlines()
        assert out == ["0.9.0 2.13.0+cpu", '[a $HOME "q" \\ é]', "/opt/usertest", "train.py"]
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, env=engine_env())
