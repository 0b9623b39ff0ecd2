"""Issue 37: a project in one file (``hpcenv.yaml``), the project's own image name, and the
image's recorded inputs that ``submit`` compares (unit tests, and the installed ``hpcenv`` as a
process for each refusal and for ``init``/``config``; no services needed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcenv import naming
from hpcenv.build_inputs import project_inputs, requirement_group, what_changed
from hpcenv.errors import ConfigError
from hpcenv.projectfile import (
    ProjectFile,
    init_values,
    json_schema,
    load,
    merge,
    render,
)

HPCENV = Path(sys.executable).with_name("hpcenv")


def hpcenv(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2, one line on stderr (no traceback), with each of ``words``."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith(("note:", "warn"))]
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def project(folder: Path, requirements: str = "tabulate==0.9.0\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('hello')\n", encoding="utf-8")
    (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
    return folder


# -- the model --------------------------------------------------------------------------------


def write(folder: Path, text: str) -> Path:
    path = folder / "hpcenv.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_file_loads_with_the_line_of_each_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "project: my-proj\nsite: local\nrecipe: horovod-cpu\nrequirements: [requirements.txt]\n"
        "account: abc123\nnodes: 2\ntime: '01:00:00'\nlauncher: srun\n"
        "env: [WANDB_API_KEY, FOO=bar]\n",
    )
    loaded = load(path)
    assert loaded.data.nodes == 2 and loaded.data.env == ["WANDB_API_KEY", "FOO=bar"]
    assert loaded.lines["site"] == 2 and loaded.lines["env"] == 9
    assert loaded.where("time") == "hpcenv.yaml:7"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("site: local\nbogus: 1\n", 2, "field 'bogus': unknown field"),
        ("site: local\nrecipie: x\n", 2, "did you mean 'recipe'"),
        ("project: My Project\n", 1, "field 'project'"),
        ("project: x\nnodes: 0\n", 2, "field 'nodes'"),
        ("time: 30:00\n", 1, "write the time as text in quotes"),
        ("time: '1:2:3:4'\n", 1, "field 'time'"),
        ("env: [HF_TOKEN=abc]\n", 1, "passed by name"),
        ("env: ['1BAD']\n", 1, "not a variable name"),
        ("env: [A, A=1]\n", 1, "A given twice"),
        ("site: local\nsite: other\n", 2, "duplicate key 'site'"),
        ("site: &a local\nrecipe: *a\n", 1, "anchors and aliases"),
    ],
)
def test_bad_files_are_one_line_with_file_and_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load(path)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"{path}:{line}:"), message
    assert words in message


# -- the JSON Schema --------------------------------------------------------------------------


def _valid(schema: dict[str, Any], value: Any, root: dict[str, Any]) -> bool:
    """The JSON Schema keywords pydantic emits for this model, checked (no jsonschema here)."""
    if "$ref" in schema:
        return _valid(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], value, root)
    if "anyOf" in schema:
        return any(_valid(s, value, root) for s in schema["anyOf"])
    kind = schema.get("type")
    types = {
        "object": dict,
        "array": list,
        "string": str,
        "integer": int,
        "null": type(None),
        "boolean": bool,
    }
    if kind is not None and not isinstance(value, types[kind]):
        return False
    if isinstance(value, bool) and kind == "integer":
        return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False and set(value) - set(props):
            return False
        return all(_valid(props[k], v, root) for k, v in value.items() if k in props)
    if isinstance(value, list):
        return all(_valid(schema.get("items", {}), v, root) for v in value)
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
        if len(value) > schema.get("maxLength", len(value)):
            return False
        return len(value) >= schema.get("minLength", 0)
    if isinstance(value, int):
        return schema.get("minimum", value) <= value <= schema.get("maximum", value)
    return True


INIT_CASES: list[dict[str, Any]] = [
    {},
    {"site": "local", "recipe": "horovod-cpu"},
    {
        "site": "frontier",
        "recipe": "torch-gpu",
        "requirements": ["req/a.txt", "b.txt"],
        "account": "abc123",
        "nodes": 4,
        "time": "2-00:00:00",
        "launcher": "srun",
        "env": ["WANDB_API_KEY", "HF_HOME=/scratch/hf", "A_B=c d"],
        "project": "x.y_z-1",
    },
    {
        "pip": ["tabulate>=0.9", "six"],
        "partition": "debug",
        "qos": "normal",
        "stage_in": "data/",
        "stage_out": "$SCRATCH/out",
    },
]


@pytest.mark.parametrize("given", INIT_CASES)
def test_the_schema_accepts_every_file_init_writes(tmp_path: Path, given: dict[str, Any]) -> None:
    import yaml

    (tmp_path / "requirements.txt").write_text("six\n", encoding="utf-8")
    text = render(init_values(tmp_path, **given))
    data = yaml.safe_load(text)
    schema = json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(ProjectFile.model_fields)
    assert _valid(schema, data, schema), text
    write(tmp_path, text)
    assert load(tmp_path / "hpcenv.yaml").data == ProjectFile.model_validate(data)


def test_the_schema_refuses_what_the_model_refuses() -> None:
    schema = json_schema()
    assert _valid(schema, {"site": "local", "nodes": 2}, schema)
    assert not _valid(schema, {"bogus": 1}, schema)
    assert not _valid(schema, {"project": "Not Valid"}, schema)
    assert not _valid(schema, {"nodes": 0}, schema)


def test_init_finds_requirements_and_names_the_project_after_the_folder(tmp_path: Path) -> None:
    folder = project(tmp_path / "My Project!")
    values = init_values(
        folder,
        project=None,
        site="local",
        recipe=None,
        requirements=None,
        account=None,
        nodes=None,
        time=None,
        launcher=None,
        env=None,
    )
    assert values == {
        "project": "my-project",
        "site": "local",
        "requirements": ["requirements.txt"],
    }


# -- the merge --------------------------------------------------------------------------------


def test_a_flag_overrides_the_file_which_overrides_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, "site: local\nnodes: 2\nenv: [A=1]\nrequirements: [r.txt]\n")
    merged = merge({"nodes": 4, "site": None}, load(path), {"nodes": 1, "time": "10"})
    assert (merged["nodes"], merged.values["nodes"].source) == (4, "flag")
    assert (merged["site"], merged.values["site"].source) == ("local", "hpcenv.yaml:1")
    assert (merged["time"], merged.values["time"].source) == ("10", "default")
    assert merged["requirements"] == [tmp_path / "r.txt"]  # relative to the file's folder
    assert merged.values["project"].source == "folder name"
    # a list given replaces the file's list whole
    assert merge({"env": ["B"]}, load(path))["env"] == ["B"]
    assert merge({}, None, {"nodes": 1}).values["nodes"].source == "default"
    env = merge({"site": "x"}, load(path), sources={"site": "env HPCENV_SITE"})
    assert env.values["site"].source == "env HPCENV_SITE"
    assert json.loads(json.dumps(merged.to_dict()))["values"]["nodes"]["value"] == 4


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "name"),
    [
        ("My Project!", "my-project"),
        ("__x__", "x"),
        ("exp.v2_final", "exp.v2_final"),
        ("ÄÖÜ", "project"),
        ("a" * 80, "a" * 40),
    ],
)
def test_project_names(folder: str, name: str) -> None:
    assert naming.project_name(folder) == name
    assert re.fullmatch(naming.PROJECT_RE, name)


@pytest.mark.parametrize("project", ["exp.v2_final", "x" * 40, "a--b", "9lives"])
def test_a_project_image_name_is_a_recipe_name_tag_and_file_name(project: str) -> None:
    recipe = naming.project_recipe(recipe="horovod-cpu", project=project)
    assert recipe.startswith("horovod-cpu-")
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,63}", recipe) and not recipe.endswith("-")
    tag = naming.image_tag(recipe=recipe, site="local")
    assert re.fullmatch(r"localhost/hpcenv/[a-z0-9]+(?:[._-][a-z0-9]+)*:[A-Za-z0-9_.-]+", tag)
    assert naming.parse_image_tag(tag) == (recipe, "local")
    assert "/" not in naming.sif_file(recipe=recipe, site="local")
    assert naming.project_recipe(recipe=recipe, project=project) == recipe  # not twice


def test_two_projects_get_two_images(tmp_path: Path) -> None:
    from hpcenv.recipe import load_recipe, with_additions

    one = project(tmp_path / "one") / "requirements.txt"
    two = project(tmp_path / "two") / "requirements.txt"
    base = load_recipe("horovod-cpu")
    assert with_additions(base, [one], []).name == "horovod-cpu-one"
    assert with_additions(base, [two], []).name == "horovod-cpu-two"
    write(tmp_path / "two", "project: named\n")  # the file's project: wins over the folder
    assert with_additions(base, [two], []).name == "horovod-cpu-named"


def test_a_recipe_file_named_as_a_built_in_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "name: horovod-cpu\nextends: horovod-cpu\nuser: {pip: [six]}\n", encoding="utf-8"
    )
    proc = hpcenv("build", "--dry-run", "-s", "local", "-r", "r.yaml", cwd=tmp_path)
    refused(proc, "r.yaml: name: horovod-cpu is the name of a built-in recipe")


# -- the inputs digest ------------------------------------------------------------------------


LOCK = {"site": "local", "components": {"torch": "2"}, "user_content": {"pip": ["six"]}}


def test_requirement_groups() -> None:
    assert requirement_group("requirements.txt:3") == "requirements.txt"
    assert requirement_group("sub/requirements.txt>more.txt:1") == "requirements.txt"
    assert requirement_group("--pip six") == "--pip"
    assert requirement_group("myproject.yaml: user.pip[0]") == "myproject.yaml user.pip"


def test_the_digest_names_what_changed(tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_text("1", encoding="utf-8")
    reqs = [("six", "requirements.txt:1")]
    before = project_inputs(LOCK, reqs, [("/opt/data.txt", data)])
    assert before == project_inputs(LOCK, reqs, [("/opt/data.txt", data)])  # stable
    after = project_inputs(LOCK, [("six==1.16", "requirements.txt:1")], [("/opt/data.txt", data)])
    assert after["digest"] != before["digest"]
    assert what_changed(before, after) == ["requirements.txt changed"]
    data.write_text("2", encoding="utf-8")
    changed = project_inputs(LOCK, reqs, [("/opt/data.txt", data)])
    assert what_changed(before, changed) == ["the file for /opt/data.txt changed"]
    other = project_inputs({**LOCK, "components": {"torch": "3"}}, reqs, [])
    assert what_changed(before, other)[-1].startswith("the matched stack")
    assert "the file for /opt/data.txt is no longer given" not in what_changed(before, other)


def test_a_comment_in_requirements_changes_nothing(tmp_path: Path) -> None:
    from hpcenv.recipe import load_recipe, with_additions
    from hpcenv.resolver import resolve
    from hpcenv.site import load_site

    req = project(tmp_path / "p") / "requirements.txt"
    site, base = load_site("local"), load_recipe("horovod-cpu")
    first = resolve(site, with_additions(base, [req], [])).user_content["inputs"]
    req.write_text("# pinned\ntabulate==0.9.0\n\n", encoding="utf-8")
    assert resolve(site, with_additions(base, [req], [])).user_content["inputs"] == first
    req.write_text("tabulate==0.8.10\n", encoding="utf-8")
    later = resolve(site, with_additions(base, [req], [])).user_content["inputs"]
    assert what_changed(first, later) == ["requirements.txt changed"]
    assert "inputs" not in resolve(site, base).user_content  # a built-in image: no project


# -- the installed hpcenv ---------------------------------------------------------------------


def test_init_writes_the_file_and_refuses_a_second_time(tmp_path: Path) -> None:
    folder = project(tmp_path / "demo")
    proc = hpcenv(
        "init", "--site", "local", "--recipe", "horovod-cpu", "--env", "WANDB_API_KEY", cwd=folder
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "wrote hpcenv.yaml"
    text = (folder / "hpcenv.yaml").read_text(encoding="utf-8")
    assert "project: demo\n" in text and "- requirements.txt\n" in text
    assert "- WANDB_API_KEY\n" in text
    refused(hpcenv("init", "--site", "local", cwd=folder), "hpcenv.yaml exists", "--force")
    assert (folder / "hpcenv.yaml").read_text(encoding="utf-8") == text  # nothing lost
    again = hpcenv(
        "init", "-s", "local", "--force", "-N", "2", "-p", "debug", "--stage-in", "d", cwd=folder
    )
    assert again.returncode == 0, again.stderr
    data = load(folder / "hpcenv.yaml").data
    assert (data.nodes, data.partition, data.stage_in, data.env) == (2, "debug", "d", [])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--site", "locl"), "did you mean 'local'"),
        (("--recipe", "horovod-cpx"), "unknown recipe 'horovod-cpx'"),
        (("--env", "HF_TOKEN=x"), "passed by name"),
        (("-t", "soon"), "-t/--time"),
    ],
)
def test_init_refuses_bad_values_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    refused(hpcenv("init", *args, cwd=tmp_path), words)
    assert not (tmp_path / "hpcenv.yaml").exists()


def test_a_bad_project_file_is_one_line_with_its_line_number(tmp_path: Path) -> None:
    folder = project(tmp_path / "p")
    write(folder, "site: local\nrecipe: horovod-cpu\nnodez: 2\n")
    for args in (("config",), ("build", "--dry-run"), ("submit", "--dry-run", "--", "true")):
        refused(hpcenv(*args, cwd=folder), "hpcenv.yaml:3: field 'nodez': unknown field")


def test_without_a_site_anywhere_the_command_says_where_to_give_it(tmp_path: Path) -> None:
    refused(hpcenv("submit", "--dry-run", "--", "true", cwd=tmp_path), "give --site", "hpcenv init")


def test_config_prints_each_value_and_its_source(tmp_path: Path) -> None:
    folder = project(tmp_path / "proj")
    assert (
        hpcenv("init", "-s", "local", "-r", "horovod-cpu", "-t", "10", cwd=folder).returncode == 0
    )
    proc = hpcenv("config", "-N", "3", cwd=folder, env={"HPCENV_SITE": ""})
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert rows["site"].endswith("(hpcenv.yaml:4)")
    assert rows["nodes"].split()[1] == "3" and rows["nodes"].endswith("(flag)")
    assert rows["account"].endswith("(default)")
    assert "horovod-cpu-proj" in rows["image"]
    data = json.loads(hpcenv("config", "--json", cwd=folder).stdout)
    assert data["file"] == "hpcenv.yaml"
    assert data["values"]["time"] == {"value": "10", "source": "hpcenv.yaml:8"}
    assert data["values"]["nodes"] == {"value": 1, "source": "default"}
    assert data["image_recipe"] == "horovod-cpu-proj"
    env = hpcenv("config", "--json", cwd=folder, env={"HPCENV_SITE": "frontier"})
    assert json.loads(env.stdout)["values"]["site"] == {
        "value": "frontier",
        "source": "env HPCENV_SITE",
    }
    schema = json.loads(hpcenv("config", "--schema", cwd=folder).stdout)
    assert schema["additionalProperties"] is False


def test_submit_and_build_read_the_file_and_flags_override_it(tmp_path: Path) -> None:
    folder = project(tmp_path / "proj")
    init = hpcenv("init", "-s", "local", "-r", "horovod-cpu", "-N", "2", "-t", "10", cwd=folder)
    assert init.returncode == 0, init.stderr
    proc = hpcenv("submit", "--dry-run", "--json", "--", "python3", "train.py", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["image"] == naming.image_tag(recipe="horovod-cpu-proj", site="local")
    assert "#SBATCH --nodes=2" in job["script"] and "#SBATCH --time=10" in job["script"]
    flag = hpcenv("submit", "--dry-run", "--json", "-N", "1", "--", "true", cwd=folder)
    assert "#SBATCH --nodes=1" in json.loads(flag.stdout)["script"]
    build = hpcenv("build", "--dry-run", "--json", "--format", "oci", cwd=folder)
    assert build.returncode == 0, build.stderr
    assert json.loads(build.stdout)[0]["tag"] == job["image"]  # build makes what submit runs


SIF_SITE = "local-2node-sif"  # a SIF site: the image's inputs come from build's record


def test_submit_refuses_an_image_built_from_other_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record ``build`` writes beside a SIF (written here as build writes it: a SIF build
    needs Apptainer; the podman test of this file builds for real). Editing requirements.txt
    makes the next submit refuse in one line, naming the file; a dry run checks it too."""
    from hpcenv.jobs.image_freshness import write_record
    from hpcenv.jobs.runtimes.registry import default_image
    from hpcenv.recipe import load_recipe, with_additions
    from hpcenv.resolver import resolve
    from hpcenv.site import load_site

    cache = tmp_path / "cache"
    monkeypatch.setenv("HPCENV_CACHE", str(cache))
    folder = project(tmp_path / "proj")
    assert hpcenv("init", "-s", SIF_SITE, "-r", "horovod-cpu", cwd=folder).returncode == 0
    site = load_site(SIF_SITE)
    recipe = with_additions(load_recipe("horovod-cpu"), [folder / "requirements.txt"], [])
    write_record(resolve(site, recipe), default_image(site, recipe.name))
    env = {"HPCENV_CACHE": str(cache)}
    ok = hpcenv("submit", "--dry-run", "--", "python3", "train.py", cwd=folder, env=env)
    assert ok.returncode == 0, ok.stderr
    (folder / "requirements.txt").write_text("tabulate==0.8.10\n", encoding="utf-8")
    for args in (("--dry-run",), ()):
        proc = hpcenv("submit", *args, "--", "python3", "train.py", cwd=folder, env=env)
        line = refused(proc, "requirements.txt changed since the image", "run hpcenv build")
        assert "horovod-cpu-proj-local-2node-sif.sif" in line
    # --image: the user's choice, not compared
    image = default_image(site, recipe.name)
    chosen = hpcenv("submit", "--dry-run", "--image", image, "--", "true", cwd=folder, env=env)
    assert chosen.returncode == 0, chosen.stderr


def test_an_image_built_with_set_pins_is_not_stale_and_run_checks_as_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``build --set`` pins are recorded with the inputs, so ``submit`` (which takes no
    ``--set``) resolves the project with them and does not call the image stale; ``hpcenv run``
    refuses a stale image as ``submit`` does (its dry run, outside an allocation)."""
    from hpcenv.jobs.image_freshness import write_record
    from hpcenv.jobs.runtimes.registry import default_image
    from hpcenv.recipe import load_recipe, with_additions
    from hpcenv.resolver import resolve
    from hpcenv.site import load_site

    cache = tmp_path / "cache"
    monkeypatch.setenv("HPCENV_CACHE", str(cache))
    folder = project(tmp_path / "proj")
    assert hpcenv("init", "-s", SIF_SITE, "-r", "horovod-cpu", cwd=folder).returncode == 0
    site = load_site(SIF_SITE)
    recipe = with_additions(load_recipe("horovod-cpu"), [folder / "requirements.txt"], [])
    pinned = resolve(site, recipe, {"mpi4py": "4.1.1"})
    assert pinned.user_content["inputs"]["pins"] == {"mpi4py": "4.1.1"}
    assert (
        pinned.user_content["inputs"]["digest"]
        != (resolve(site, recipe).user_content["inputs"]["digest"])
    )
    write_record(pinned, default_image(site, recipe.name))
    env = {"HPCENV_CACHE": str(cache)}
    ok = hpcenv("submit", "--dry-run", "--", "python3", "train.py", cwd=folder, env=env)
    assert ok.returncode == 0, ok.stderr
    (folder / "requirements.txt").write_text("tabulate==0.8.10\n", encoding="utf-8")
    run = hpcenv("run", "--dry-run", "--", "python3", "train.py", cwd=folder, env=env)
    refused(run, "requirements.txt changed since the image", "run hpcenv build")


def test_smoke_tests_the_projects_image(tmp_path: Path) -> None:
    folder = project(tmp_path / "proj")
    assert hpcenv("init", "-s", "local", "-r", "horovod-cpu", cwd=folder).returncode == 0
    proc = hpcenv("smoke", cwd=folder)
    tag = naming.image_tag(recipe="horovod-cpu-proj", site="local")
    assert proc.returncode == 2 and tag in proc.stderr, proc.stderr  # not built: named as such
    refused(hpcenv("smoke", "--image", "x", "--site", "local", cwd=folder), "exclusive")


def test_the_docs_example_is_a_valid_project_file(tmp_path: Path) -> None:
    docs = (Path(__file__).parent.parent / "docs" / "project-file.md").read_text(encoding="utf-8")
    example = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded = load(write(tmp_path, example))
    assert loaded.data.env == ["WANDB_API_KEY", "OMP_NUM_THREADS=8"]
    assert set(loaded.data.model_fields_set) == set(ProjectFile.model_fields)  # every field shown


def test_odd_files(tmp_path: Path) -> None:
    """A folder or a device named hpcenv.yaml is one line; an empty file is no values."""
    (tmp_path / "a" / "hpcenv.yaml").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "hpcenv.yaml").symlink_to("/dev/zero")
    for sub in ("a", "b"):
        refused(hpcenv("config", cwd=tmp_path / sub), "hpcenv.yaml: not a regular file")
    write(tmp_path, "# nothing yet\n")
    assert load(tmp_path / "hpcenv.yaml").data == ProjectFile()
    write(tmp_path, "- site\n")
    refused(hpcenv("config", cwd=tmp_path), "hpcenv.yaml:1: expected a mapping")


def test_a_project_never_takes_a_built_in_recipes_image(tmp_path: Path) -> None:
    """A folder named ``gpu``: its horovod-gpu image is ``horovod-gpu-gpu``, not the built-in
    ``horovod-gpu`` (which the build would replace); a name that would become a built-in's is
    refused in one line."""
    folder = tmp_path / "gpu"
    folder.mkdir()
    proc = hpcenv(
        "config", "--site", "local", "-r", "horovod-gpu", "--pip", "six", "--json", cwd=folder
    )
    assert proc.returncode == 0, proc.stderr
    assert "horovod-gpu-gpu" in proc.stdout
    builtin = ["horovod-cpu", "horovod-gpu"]
    with pytest.raises(ConfigError, match="built-in recipe's image"):
        naming.project_recipe(recipe="horovod", project="gpu", builtin=builtin)


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (("--pip", "ghp_AbCdEf1234567890AbCdEf1234567890abcd"), ("--pip", "looks like a token")),
        (("--pip", "foo[ghp_AbCdEf1234567890AbCdEf1234567890abcd]"), ("--pip", "a token")),
        (("--env", "HF_HUB=hf_AbCdEf1234567890AbCdEf1234567890ab"), ("HF_HUB=...", "export it")),
    ],
)
def test_init_never_writes_a_token(tmp_path: Path, option: tuple[str, str], words: str) -> None:
    """A token given to ``init`` by mistake (as a pip spec, in its extras, as an env value) is
    refused in one line that does not show it, and no file is written."""
    folder = project(tmp_path / "proj")
    proc = hpcenv("init", "-s", "local", "-r", "horovod-cpu", *option, cwd=folder)
    line = refused(proc, *words)
    assert "AbCdEf1234567890" not in line + proc.stdout
    assert not (folder / "hpcenv.yaml").exists()


def test_a_project_file_others_may_change_is_refused(tmp_path: Path) -> None:
    """``hpcenv.yaml`` decides the site, recipe and environment of every command run in its
    folder: one that the group may write (a shared folder under umask 002) is refused in one
    line; ``init`` writes 0644 whatever the umask."""
    folder = project(tmp_path / "proj")
    old = os.umask(0o002)
    try:
        assert hpcenv("init", "-s", "local", "-r", "horovod-cpu", cwd=folder).returncode == 0
    finally:
        os.umask(old)
    path = folder / "hpcenv.yaml"
    assert path.stat().st_mode & 0o777 == 0o644
    assert hpcenv("config", cwd=folder).returncode == 0
    path.chmod(0o664)
    refused(hpcenv("config", cwd=folder), "refusing the project file", "others may write it")
