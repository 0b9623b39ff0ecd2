"""The real local image that `make smoke-test` builds: lock inside, non-root, no build secrets.

Also a real failing build: the error names the step and the full log.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from elf_probe import debug_sections
from image_builds import REAL_ENV
from requirements import need_image

from hpcenv.engines import engine_env, get_engine
from hpcenv.errors import BuildError
from hpcenv.naming import image_tag

TAG = image_tag(recipe="horovod-cpu", site="local")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")

pytestmark = pytest.mark.podman


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=engine_env(), check=check
    )


@pytest.fixture(scope="module")
def image() -> str:
    return need_image(TAG, "these tests inspect the image `make smoke-test` smokes")


def in_image(image: str, script: str, user: str = "root") -> str:
    return podman("run", "--rm", "--user", user, image, "bash", "-c", script).stdout


@pytest.mark.alongside
def test_lock_is_embedded_in_labels_and_file(image: str) -> None:
    labels = get_engine("podman").labels(image)
    lock = json.loads(labels["io.hpcenv.lock"])
    assert lock["site"] == "local" and lock["recipe"] == "horovod-cpu"
    inside = json.loads(in_image(image, "cat /opt/hpcenv/stack.lock.json"))
    assert inside == lock
    assert labels["io.hpcenv.component.torch"] == inside["components"]["torch"]["version"]


@pytest.mark.alongside
def test_runtime_user_is_not_root(image: str) -> None:
    assert podman("run", "--rm", image, "id", "-u").stdout.strip() == "1000"


@pytest.mark.alongside
def test_no_build_credentials_in_final_image(image: str) -> None:
    found = in_image(
        image,
        "ls -d /opt/hpcenv-build /etc/pip.conf /root/.config/pip /root/.pip /home/hpc/.config/pip "
        "/opt/venv/pip.conf 2>/dev/null; find / -xdev \\( -name 'torch-*.whl' -o -name '*.tar.gz' "
        "-path '*horovod*' \\) 2>/dev/null",
    )
    assert found.strip() == "", found
    # Certificates the build host trusts beyond Debian's own bundle (the proxy CA) must not be
    # anywhere in the image: the image's bundle comes from its own ca-certificates package.
    host_certs = set(HOST_CA.read_text().split("-----END CERTIFICATE-----"))
    image_bundle = in_image(image, "cat /etc/ssl/certs/ca-certificates.crt")
    extra = [
        c.strip()
        for c in host_certs - set(image_bundle.split("-----END CERTIFICATE-----"))
        if c.strip()
    ]
    for cert in extra:
        body = cert.splitlines()[-1][:60]  # one line of the base64 body
        hits = in_image(
            image, f"grep -rlF -- {body!r} /etc /opt /usr/local /home /root 2>/dev/null || true"
        )
        assert hits.strip() == "", f"proxy CA found in {hits}"


@pytest.mark.alongside
def test_horovod_is_built_without_debug_info(image: str) -> None:
    """Horovod's setup.py builds RelWithDebInfo (66 MB of horovod/ here); hpcenv builds it as
    CMake Release (same -O3, rule horovod-release-build): its libraries carry no .debug_*."""
    found = debug_sections(image, "/opt/venv/lib/python3*/site-packages/horovod/*/mpi_lib*.so")
    assert found and not any(found.values()), found


@pytest.mark.alongside
def test_an_unchanged_image_is_not_built_again(image: str) -> None:
    """The installed ``hpcenv build`` of the image `make images` built: its inputs are those of
    that build, so it says so and builds nothing (a cached podman build took 17 s here, hashing
    the venv for its COPY --from); the image is the same one."""
    import sys

    hpcenv = str(Path(sys.executable).with_name("hpcenv"))
    argv = [hpcenv, "build", "--site", "local", "--recipe", "horovod-cpu", "--format", "oci"]
    before = get_engine("podman").image_id(TAG)
    runs = [
        subprocess.run([*argv, *extra], capture_output=True, text=True, env=REAL_ENV, timeout=1800)
        for extra in ((), ("--json",))
    ]
    assert all(proc.returncode == 0 for proc in runs), runs[-1].stderr[-2000:]
    said = " ".join(runs[1].stderr.split() + runs[1].stdout.split())
    assert "is up to date: its inputs are those of its last build" in said, said
    (entry,) = json.loads(runs[1].stdout)
    assert entry["up_to_date"] is True and entry["seconds"] < 10
    assert get_engine("podman").image_id(TAG) == before


@pytest.mark.alongside
def test_no_compilers_in_runtime(image: str) -> None:
    assert in_image(image, "command -v gcc cmake || true").strip() == ""


def test_failed_build_names_step_and_log(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM localhost/hpcenv-base:bookworm\nRUN echo preparing\nRUN echo broken-step && exit 3\n"
    )
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as err:
        get_engine("podman").build(
            tmp_path, tmp_path / "Dockerfile", "localhost/hpcenv-test:broken", log_path=log
        )
    assert "RUN echo broken-step && exit 3" in str(err.value)
    assert str(log) in str(err.value)
    assert "broken-step" in log.read_text()
