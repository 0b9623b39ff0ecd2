"""SIF images for real: README's `apptainer exec` line, and a natively built definition."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from requirements import need_file

from hpcenv.build import make_plans
from hpcenv.site import load_site

pytestmark = [pytest.mark.apptainer, pytest.mark.alongside]
ROOT = Path(__file__).resolve().parent.parent


def readme_exec_line() -> str:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- readme-apptainer-exec -->", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", block, re.S).group(1).strip()  # type: ignore[union-attr]


def test_readme_apptainer_exec_runs_allreduce() -> None:
    line = readme_exec_line()
    argv = [str(Path(a).expanduser()) if a.startswith("~") else a for a in shlex.split(line)]
    sif = next(Path(a) for a in argv if a.endswith(".sif"))
    need_file(sif, "the local SIF", "README's apptainer exec line runs it")
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert result["world_size"] == 2
    assert [e["mismatches"] for e in result["exact"]] == [0, 0]
    n = result["exact"][0]["n"]  # int64 r*n+i summed over 2 ranks and i: n*n + n*(n-1)
    assert result["exact"][0]["observed_total"] == n * n + n * (n - 1)
    assert max(row["bytes"] for row in result["sweep"]) == 1048576
    assert all(row["mismatches"] == 0 for row in result["sweep"])


def test_native_definition_builds_and_runs(tmp_path: Path) -> None:
    """Singularity.def of the daal4py recipe built with Apptainer (no podman image involved);
    its %test ran during the build; daal4py SPMD K-Means passes inside it. A SIF built before
    from exactly these inputs (the stamp beside it holds their digest) is reused, as
    ``hpcenv build --format def`` does: on a fresh machine, or after any change to the
    definition, its checks, the build inputs or the base, this builds it for real."""
    from hpcenv.apptainer import Apptainer
    from hpcenv.build import write_context
    from hpcenv.datasets import prepare_mnist
    from hpcenv.engines import get_engine
    from hpcenv.sif import build_sif, def_inputs_digest
    from hpcenv.smoke.runner import run_smoke

    (plan,) = make_plans(load_site("local"), ["daal4py"], {}, tmp_path / "ctx")
    sif = build_sif(plan, "def")
    base_id = get_engine("podman").image_id(plan.lock.build["base_image"])
    stamp = sif.with_name(sif.name + ".inputs").read_text().strip()
    compression = plan.site.build.sif_compression  # lz4 on local: part of what is reused
    assert stamp == def_inputs_digest(write_context(plan), base_id, compression)
    labels = Apptainer().exec(sif, ["cat", "/opt/hpcenv/stack.lock.json"])
    assert json.loads(labels.stdout)["recipe"] == "daal4py"
    report = run_smoke(
        "daal4py-local-def",
        tmp_path / "results",
        data_dir=prepare_mnist().directory,
        backend="apptainer",
        pytest_args=["-k", "kmeans or mpi4py"],
    )
    outcomes = {t.name: t.outcome for t in report.tests}
    assert outcomes and set(outcomes.values()) == {"passed"}, outcomes
