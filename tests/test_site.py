"""Site files: every built-in loads; bad input names file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcenv.errors import ConfigError
from hpcenv.site import Site, json_schema, load_site, site_names

GOOD = """\
name: mysite
description: test
arch: x86_64
node: {sockets: 2, cores_per_socket: 28, memory_gb: 192}
mpi: {spec: openmpi@4.1.4, pmi: pmix@4, model: hybrid}
scheduler: {kind: slurm, launcher: srun}
runtime: {kind: apptainer}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mysite.yaml"
    path.write_text(text)
    return path


def test_builtin_sites_load() -> None:
    assert {"local", "summit", "frontier", "perlmutter", "aurora", "generic-slurm"} <= set(
        site_names()
    )
    for name in site_names():
        site = load_site(name)
        assert site.name == name
        assert site.provenance.verified or site.provenance.assumed, f"{name} marks no provenance"


def test_summit_facts() -> None:
    s = load_site("summit")
    assert (s.arch, s.scheduler.kind, s.scheduler.launcher, s.mpi.model) == (
        "ppc64le",
        "lsf",
        "jsrun",
        "site-build",
    )
    assert s.node.gpus == 6 and s.node_local and s.node_local.kind == "nvme"
    assert s.retired == "2024-11-15" and s.mpi.root == "$MPI_ROOT"


def test_site_build_without_root_is_a_config_error(tmp_path: Path) -> None:
    """The installed hpcenv, as a process: exit 2 and one line naming file, line and field."""
    import subprocess
    import sys

    bad = write(tmp_path, GOOD.replace("model: hybrid", "model: site-build"))
    exe = Path(sys.executable).with_name("hpcenv")
    for args in (["sites", "validate", str(bad)], ["build", "--site", str(bad), "--dry-run"]):
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (
            f"error: {bad}:5: field 'mpi': site-build model needs 'root' (the host MPI prefix "
            "mounted into the build and bound into the job, e.g. $MPI_ROOT)\n"
        )


def test_site_build_is_in_the_schema() -> None:
    from hpcenv.site.fields import annotate_schema

    schema = annotate_schema(json_schema())
    model = schema["$defs"]["HostMpi"]["properties"]["model"]
    assert "site-build" in model["enum"]
    assert "site-build" in model["description"]


def test_user_site_by_path(tmp_path: Path) -> None:
    assert load_site(str(write(tmp_path, GOOD))).name == "mysite"


def test_site_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, GOOD)
    monkeypatch.setenv("HPCENV_SITE_PATH", str(tmp_path))
    assert "mysite" in site_names()
    assert load_site("mysite").node.cores == 56


def test_unknown_key_names_file_line_field(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "runtimes: {kind: podman}\n")
    with pytest.raises(ConfigError) as err:
        load_site(str(path))
    assert f"{path}:8: field 'runtimes': unknown field" in str(err.value)


def test_wrong_type_names_nested_field_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("cores_per_socket: 28", "cores_per_socket: many"))
    with pytest.raises(ConfigError) as err:
        load_site(str(path))
    assert f"{path}:4: field 'node.cores_per_socket'" in str(err.value)


def test_shell_metacharacters_rejected(tmp_path: Path) -> None:
    text = GOOD + "modules: ['cuda; rm -rf /']\n"
    with pytest.raises(ConfigError) as err:
        load_site(str(write(tmp_path, text)))
    assert "field 'modules.0'" in str(err.value)


def test_bind_model_needs_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="bind model needs 'root'"):
        load_site(str(write(tmp_path, GOOD.replace("model: hybrid", "model: bind"))))


def test_provenance_must_name_real_fields(tmp_path: Path) -> None:
    text = GOOD + "provenance:\n  verified: {node.cpus: 'guide'}\n"
    with pytest.raises(ConfigError, match="node.cpus"):
        load_site(str(write(tmp_path, text)))


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "node: [unclosed\n")
    with pytest.raises(ConfigError, match=f"{path}:"):
        load_site(str(path))


def test_unknown_site_lists_known() -> None:
    with pytest.raises(ConfigError, match="known: .*summit"):
        load_site("nowhere")


def test_schema_is_generated_from_model() -> None:
    site = json_schema()["$defs"]["Site"]
    assert site["additionalProperties"] is False
    assert set(Site.model_fields) == set(site["properties"])


def test_schema_accepts_every_site_file_sites_validate_accepts() -> None:
    """A whole site and an ``extends:`` file (the changes to a base, nulls included) both
    validate against ``hpcenv sites schema``; a misspelt field or a wrong type does not."""
    import jsonschema
    import yaml

    from hpcenv.site.fields import annotate_schema

    check = jsonschema.Draft202012Validator(annotate_schema(json_schema()))
    files = sorted((Path(__file__).parents[1] / "site-configs").glob("*.yaml"))
    assert any("extends" in yaml.safe_load(f.read_text()) for f in files)
    for f in files:
        assert not list(check.iter_errors(yaml.safe_load(f.read_text()))), f.name
    assert check.is_valid({"extends": "frontier", "node": {"cores_per_socket": 8}})
    assert not check.is_valid({"extends": "frontier", "nodez": 1})
    assert not check.is_valid({"extends": "frontier", "node": {"cores_per_socket": "many"}})
    assert not check.is_valid({"name": "only-a-name"})
