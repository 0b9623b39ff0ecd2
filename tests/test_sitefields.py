"""Every site field is described (what, example, where to find it), in step with the model."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hpcenv.cli.main import app
from hpcenv.site.fields import fields, markdown, model_fields

ROOT = Path(__file__).resolve().parents[1]


def test_every_field_is_described_and_nothing_else() -> None:
    missing = set(model_fields()) - set(fields())
    assert not missing, f"describe {sorted(missing)} in hpcenv/knowledge/site_fields.yaml"
    assert set(fields()) <= set(model_fields())
    for name, f in fields().items():
        assert f.get("what"), name
        if "." in name and not name.startswith("provenance"):
            assert "example" in f or "find" in f, name


def test_docs_page_is_generated_from_the_data() -> None:
    assert (ROOT / "docs" / "site-fields.md").read_text() == markdown(), (
        "regenerate: hpcenv sites fields --markdown > docs/site-fields.md"
    )


def test_schema_carries_the_descriptions() -> None:
    result = CliRunner().invoke(app, ["sites", "schema"])
    schema = json.loads(result.stdout)
    assert schema["$defs"]["Site"]["properties"]["arch"]["description"].startswith("CPU arch")
    assert schema["$defs"]["PartialSite"]["properties"]["arch"]["description"].startswith("CPU")
    pmi = schema["$defs"]["HostMpi"]["properties"]["pmi"]["description"]
    assert "srun --mpi=list" in pmi
