"""A real podman build with a credentialed apt mirror and pip index on loopback: the secret
never lands in a layer, the history, a label or hpcenv's log.

The server (this test's thread) answers only with HTTP basic auth: ``/debian/...`` is passed to
the host's Debian mirror, ``/simple/`` is a pip index holding one small wheel made here. The
image is built the way hpcenv builds: its apt and pip steps (``blocks.apt_install``,
``Blocks.trust`` with the pip secret), rendered by hpcenv's Dockerfile template, built by
``PodmanEngine.build`` with ``build_secrets(site)``; build steps use the host network
(``netns = "host"`` in a copy of hpcenv's containers.conf) so they reach the loopback server.
It starts from the bootstrapped base image and installs only python3(-venv) and hello (small).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from requirements import need_image

from hpcenv.baseimage import default_mirror, default_tag
from hpcenv.blocks import Blocks, Stage, apt_install, comment, copy, shell
from hpcenv.build import build_secrets
from hpcenv.credentials import PIP_CONF
from hpcenv.engines import containers_conf_path, get_engine
from hpcenv.recipe import load_recipe
from hpcenv.render import _environment, pip_conf
from hpcenv.resolver import resolve
from hpcenv.site import load_site

pytestmark = [pytest.mark.podman, pytest.mark.timeout(900)]

USER = "hpcuser"
PASSWORD = f"S3cret-{uuid.uuid4().hex[:12]}"
PROBE = "hpcenv_secret_probe-1.0-py3-none-any.whl"
TAG = "localhost/hpcenv-test/credentials:1"


def _wheel() -> bytes:
    files = {
        "hpcenv_secret_probe/__init__.py": b"VALUE = 42\n",
        "hpcenv_secret_probe-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: hpcenv-secret-probe\nVersion: 1.0\n"
        ),
        "hpcenv_secret_probe-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hpcenv-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hpcenv_secret_probe-1.0.dist-info/RECORD,,")
    files["hpcenv_secret_probe-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


class _Server(http.server.ThreadingHTTPServer):
    requests: list[tuple[str, bool]]
    upstream: str
    wheel: bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:  # quiet
        return None

    def do_GET(self) -> None:
        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        ok = self.headers.get("Authorization") == want
        self.server.requests.append((self.path, ok))
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="hpcenv-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/debian/"):
            try:
                with urllib.request.urlopen(
                    self.server.upstream + self.path[len("/debian") :], timeout=60
                ) as up:
                    body, status = up.read(), up.status
            except urllib.error.HTTPError as err:
                body, status = b"", err.code
            self._send(status, body, "application/octet-stream")
        elif self.path.rstrip("/") in ("/simple", "/simple/hpcenv-secret-probe"):
            digest = hashlib.sha256(self.server.wheel).hexdigest()
            html = f'<html><body><a href="/files/{PROBE}#sha256={digest}">{PROBE}</a></body></html>'
            self._send(200, html.encode(), "text/html")
        elif self.path == f"/files/{PROBE}":
            self._send(200, self.server.wheel, "application/octet-stream")
        else:
            self._send(404, b"", "text/plain")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.requests, srv.upstream, srv.wheel = [], default_mirror("bookworm"), _wheel()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _podman(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["podman", *args], capture_output=True, check=True, timeout=600, env={**os.environ}, **kw
    )  # type: ignore[call-overload]


def _files_holding(archive: Path, needle: bytes) -> list[str]:
    """Every file of every layer (and the configs) of a docker-archive that holds ``needle``."""
    hits = []
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if not member.isfile():
                continue
            data = outer.extractfile(member).read()  # type: ignore[union-attr]
            if needle in data:
                hits.append(member.name)
            if member.name.endswith(".tar") or member.name.endswith("/layer.tar"):
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    for inner in layer.getmembers():
                        if inner.isfile():
                            blob = layer.extractfile(inner).read()  # type: ignore[union-attr]
                            if needle in blob:
                                hits.append(f"{member.name}:{inner.name}")
    return hits


def test_credentials_stay_out_of_the_image(
    server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = get_engine("podman")
    base = need_image(default_tag(), "the credentialed build starts from the local base image")
    conf = tmp_path / "containers.conf"  # hpcenv's settings + host network for build steps
    conf.write_text(
        containers_conf_path()
        .read_text()
        .replace("[containers]\n", '[containers]\nnetns = "host"\n')
    )
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    port = server.server_address[1]
    site_file = tmp_path / "credsite.yaml"
    text = (Path(__file__).parent.parent / "site-configs" / "local.yaml").read_text()
    text = text.replace("name: local", "name: credsite")
    text = text.replace("  pip_find_links: [/opt/wheels]\n", "").replace(
        "  ca_bundle: /etc/ssl/certs/ca-certificates.crt\n",
        f"  apt_mirror: http://{USER}:{PASSWORD}@127.0.0.1:{port}/debian\n"
        f"  pip_index_url: http://{USER}:{PASSWORD}@127.0.0.1:{port}/simple\n",
    )
    site_file.write_text(text)
    site = load_site(str(site_file))
    assert site.build.pip_index_url and PASSWORD in site.build.pip_index_url

    # hpcenv's own apt and pip steps, in hpcenv's two-stage shape.
    blocks = Blocks(resolve(site, load_recipe("daal4py")), site)
    build_steps = [
        *blocks.trust().build,
        apt_install(["python3-venv"], site.build.apt_mirror, "bookworm"),
        shell(
            "python3 -m venv /opt/venv", "/opt/venv/bin/pip install --no-deps hpcenv-secret-probe"
        ),
    ]
    build_steps = [
        replace(s, secrets=(*s.secrets, PIP_CONF)) if s.kind == "shell" else s for s in build_steps
    ]
    runtime_steps = [
        comment("runtime"),
        apt_install(["hello", "python3"], site.build.apt_mirror, "bookworm"),
        copy("/opt/venv", "/opt/venv", from_stage="build"),
    ]
    stages = [Stage("build", base, build_steps), Stage("runtime", base, runtime_steps)]
    lock = SimpleNamespace(site="credsite", recipe="probe", build={"platform": "linux/amd64"})
    dockerfile = (
        _environment()
        .get_template("Dockerfile.j2")
        .render(version="test", lock=lock, stages=stages)
    )
    context = tmp_path / "context"
    (context / "hpcenv-build").mkdir(parents=True)
    (context / "Dockerfile").write_text(dockerfile)
    (context / "hpcenv-build" / "pip.conf").write_text(pip_conf(site))
    assert PASSWORD not in dockerfile and PASSWORD not in pip_conf(site)
    assert "--mount=type=secret,id=hpcenv-apt-auth" in dockerfile

    log = tmp_path / "cache" / "logs" / "build.log"
    try:
        with build_secrets(site) as secrets:
            assert set(secrets) == {"hpcenv-apt-auth", "hpcenv-pip.conf"}
            engine.build(context, context / "Dockerfile", TAG, log_path=log, secrets=secrets)
            _podman(
                "build",
                "--target",
                "build",
                "-t",
                TAG + "-build",
                *sum((["--secret", f"id={k},src={v}"] for k, v in secrets.items()), []),
                str(context),
            )
        # The credentials were needed and used: refused without, accepted with.
        assert any(path.startswith("/debian/") and ok for path, ok in server.requests)
        assert any(path.startswith("/files/") and ok for path, ok in server.requests)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/simple/", timeout=10)
        run = _podman(
            "run",
            "--rm",
            TAG,
            "bash",
            "-c",
            "hello && /opt/venv/bin/python -c 'import hpcenv_secret_probe as p; "
            "print(p.VALUE)'; cat /etc/apt/sources.list 2>/dev/null; "
            "ls /run/secrets 2>/dev/null; true",
        )
        assert b"Hello, world!" in run.stdout and b"42" in run.stdout
        assert PASSWORD.encode() not in run.stdout

        for tag in (TAG, TAG + "-build"):
            history = _podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
            inspect = _podman("image", "inspect", tag).stdout
            assert PASSWORD.encode() not in history and f"{USER}:".encode() not in history
            assert PASSWORD.encode() not in inspect
            labels = json.loads(inspect)[0]["Config"].get("Labels") or {}
            assert all(PASSWORD not in str(v) for v in labels.values())
            archive = tmp_path / f"{tag.rsplit('/', 1)[-1].replace(':', '-')}.tar"
            _podman("save", "--format", "docker-archive", "-o", str(archive), tag)
            assert _files_holding(archive, PASSWORD.encode()) == [], tag
            if tag == TAG:  # the scan does read the layers: it finds what the build installed
                assert any(
                    "hpcenv_secret_probe/__init__.py" in h
                    for h in _files_holding(archive, b"VALUE = 42")
                )
            archive.unlink()
        logged = log.read_text()
        assert PASSWORD not in logged and f"{USER}:" not in logged
        assert "--secret id=hpcenv-apt-auth,src=" in logged
        leftovers = list((tmp_path / "cache" / "secrets").iterdir())
        assert leftovers == []  # the secret files are gone after the build
    finally:
        for tag in (TAG, TAG + "-build"):
            subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)
