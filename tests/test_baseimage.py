"""Base image without a registry: mirror discovery, reuse/import/bootstrap order, the lock."""

from __future__ import annotations

import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from hpcenv import baseimage
from hpcenv.engines import get_engine

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: bookworm-security
Components: main
"""


class FakeEngine:
    """Records imports; an image 'exists' once imported."""

    exe = "fake"

    def __init__(self, existing: tuple[str, ...] = (), arch: str = "amd64") -> None:
        self.images = set(existing)
        self.arch = arch  # of the existing images
        self.imports: list[tuple[Path, str, tuple[str, ...]]] = []

    def image_exists(self, tag: str) -> bool:
        return tag in self.images

    def image_arch(self, tag: str) -> str:
        return self.arch

    def import_rootfs(self, tarball: Path, tag: str, *, changes=(), arch=None, on_wait=None) -> str:
        assert tarball.is_file()
        self.imports.append((tarball, tag, tuple(changes)))
        self.images.add(tag)
        return tag


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_mirror_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert baseimage.default_mirror("bookworm", tmp_path) == "http://mirror.example.org/debian"
    # a suite the host does not list still uses the host's Debian archive, not security
    assert baseimage.default_mirror("trixie", tmp_path) == "http://mirror.example.org/debian"


def test_mirror_from_one_line_sources_list(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# comment\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://ftp.example.de/debian bookworm main\n"
        "deb-src http://src.example.de/debian bookworm main\n"
    )
    assert baseimage.default_mirror("bookworm", tmp_path) == "http://ftp.example.de/debian"


def test_mirror_falls_back_to_deb_debian_org(tmp_path):
    assert baseimage.default_mirror("bookworm", tmp_path) == "http://deb.debian.org/debian"


def test_existing_image_is_reused(cache, monkeypatch):
    engine = FakeEngine(existing=("localhost/hpcenv-base:bookworm",))
    monkeypatch.setattr(baseimage, "bootstrap_rootfs", _forbidden)
    assert baseimage.ensure_base_image(engine=engine) == "localhost/hpcenv-base:bookworm"
    assert engine.imports == []


def test_cached_tarball_is_imported_without_bootstrap(cache, monkeypatch):
    tarball = baseimage.rootfs_tarball("bookworm")
    tarball.write_bytes(b"rootfs")
    monkeypatch.setattr(baseimage, "bootstrap_rootfs", _forbidden)
    engine = FakeEngine()
    steps: list[tuple[int, int, str]] = []
    tag = baseimage.ensure_base_image(
        engine=engine, tag="localhost/x:1", on_step=lambda i, n, t, s: steps.append((i, n, t))
    )
    assert tag == "localhost/x:1"
    assert engine.imports == [(tarball, "localhost/x:1", ('CMD ["/bin/bash"]',))]
    assert steps == [(1, 1, f"fake import {tarball.name} localhost/x:1")]


def test_bootstrap_runs_once_under_the_lock(cache, monkeypatch):
    calls: list[tuple[str, str]] = []

    def fake_bootstrap(suite, mirror, tarball, *, log_path, arch=None, on_phase=None, on_line=None):
        calls.append((suite, mirror))
        for phase in ("debootstrap", "clean", "tar"):
            if on_phase:
                on_phase(phase)
        time.sleep(0.3)
        tarball.write_bytes(b"rootfs")
        return tarball

    monkeypatch.setattr(baseimage, "bootstrap_rootfs", fake_bootstrap)
    engine = FakeEngine()
    steps: list[tuple[int, int]] = []
    workers = [
        threading.Thread(
            target=baseimage.ensure_base_image,
            kwargs={
                "mirror": "http://m/debian",
                "engine": engine,
                "on_step": lambda i, n, t, s: steps.append((i, n)),
            },
        )
        for _ in range(3)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert calls == [("bookworm", "http://m/debian")]
    assert len(engine.imports) == 1
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]


def _forbidden(*args, **kwargs):
    raise AssertionError("must not bootstrap")


@pytest.mark.podman
def test_real_import_and_bootstrap(tmp_path, monkeypatch):
    """Bootstraps a real minbase rootfs into a private cache and imports it (~1 min)."""
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    podman = get_engine("podman")
    tag = f"localhost/hpcenv-test-base:{uuid.uuid4().hex[:8]}"
    phases: list[str] = []
    try:
        assert (
            baseimage.ensure_base_image(
                tag=tag, engine=podman, on_step=lambda i, n, t, s: phases.append(t)
            )
            == tag
        )
        assert phases[0].startswith("debootstrap --variant=minbase bookworm http")
        assert len(phases) == 4
        tarball = baseimage.rootfs_tarball()
        with tarfile.open(tarball) as tar:
            names = tar.getnames()
        assert "./usr/bin/apt-get" in names
        assert not [
            n for n in names if n.startswith("./var/cache/apt/archives/") and n.endswith(".deb")
        ]
        assert not [p for p in tarball.parent.iterdir() if p.name.startswith("rootfs-")]
        out = podman._cmd("run", "--rm", tag, "cat", "/etc/debian_version").stdout
        assert out.startswith("12.")
        assert 60_000_000 < podman.image_size(tag) < 250_000_000
        # second image from the cached tarball: import only
        podman.remove_image(tag)
        phases.clear()
        baseimage.ensure_base_image(
            tag=tag, engine=podman, on_step=lambda i, n, t, s: phases.append(t)
        )
        assert len(phases) == 1 and "import" in phases[0]
    finally:
        podman.remove_image(tag)


def test_an_existing_base_of_another_architecture_is_refused(cache):
    """A site that builds for arm64 but names the amd64 base would build on the wrong one."""
    from hpcenv.errors import ConfigError

    tag = "localhost/hpcenv-base:bookworm"
    engine = FakeEngine(existing=(tag,), arch="amd64")
    with pytest.raises(ConfigError, match=r"is amd64, the site builds for arm64; .*bookworm-arm64"):
        baseimage.ensure_base_image(tag=tag, engine=engine, arch="aarch64")
    assert baseimage.ensure_base_image(tag=tag, engine=engine, arch="x86_64") == tag
