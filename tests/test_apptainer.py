"""Apptainer runner and the apptainer:// testinfra backend: command construction (no apptainer
needed) and, marked ``apptainer``, real SIF builds and execs (host apptainer or the helper)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import testinfra
from requirements import needs_tool
from testinfra.backend import BACKENDS

from hpcenv import apptainer as appt
from hpcenv.apptainer import Apptainer, Bind
from hpcenv.errors import BuildError, ConfigError
from hpcenv.testinfra_apptainer import ApptainerBackend
from hpcenv.testinfra_plugin import register


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(appt.IMAGES_ENV, raising=False)
    monkeypatch.delenv(appt.BINDS_ENV, raising=False)
    return tmp_path / "cache"


def helper() -> Apptainer:
    runner = Apptainer(helper_image="localhost/h:1")
    runner.executable = None  # force helper mode even where a host apptainer exists
    return runner


# -- binds, mounts, def scanning -------------------------------------------------------------
def test_bind_parse() -> None:
    assert Bind.parse("/srv/d:/data/mnist:ro") == Bind(Path("/srv/d"), "/data/mnist", True)
    assert Bind.parse("/srv/d").spec() == "/srv/d:/srv/d"
    assert Bind.parse("/srv/d:/x:rw").spec() == "/srv/d:/x"
    for bad in ("", ":/x", "/a:/b:rx", "/a:/b:ro:z"):
        with pytest.raises(ConfigError):
            Bind.parse(bad)


def test_covering_mounts_drop_nested_paths() -> None:
    paths = [Path("/a/b/c"), Path("/a/b"), Path("/a/bc"), Path("/z")]
    assert appt._covering_mounts(paths) == [Path("/a/b"), Path("/a/bc"), Path("/z")]


def test_def_host_paths(tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "hello.c").write_text("int main(void){return 0;}\n")
    text = f"""\
Bootstrap: oci-archive
From: {tmp_path}/images/base.tar
Stage: build

%files
    hello.c /opt/src/hello.c
    /etc/hostname /opt/hostname

Bootstrap: localimage
From: other.sif
Stage: runtime

%files from build
    /opt/bin/hello /opt/bin/hello
"""
    ctx = tmp_path / "ctx"
    assert appt.def_host_paths(text, ctx) == [
        tmp_path / "images",
        ctx,
        Path("/etc"),
        ctx,
    ]


# -- command construction ------------------------------------------------------------------
def test_exec_argv_on_host() -> None:
    runner = Apptainer("/usr/bin/apptainer")
    argv = runner.exec_argv(
        Path("/img/x.sif"), ["cat", "/etc/os-release"], [Bind(Path("/d"), "/data", True)]
    )
    assert argv == [
        "/usr/bin/apptainer",
        "exec",
        "--bind",
        "/d:/data:ro",
        "/img/x.sif",
        "cat",
        "/etc/os-release",
    ]


def test_exec_argv_in_helper_mounts_sif_dir_and_bind_sources() -> None:
    argv = helper().exec_argv(
        Path("/img/x.sif"), ["true"], [Bind(Path("/srv/mnist"), "/data/mnist")], {"A": "1"}
    )
    image = argv.index("localhost/h:1")
    assert argv[:5] == ["podman", "run", "--rm", "--privileged", "--network"]
    mounts = {argv[i + 1] for i, a in enumerate(argv[:image]) if a == "-v"}
    assert mounts == {"/img:/img", "/srv/mnist:/srv/mnist"}
    assert argv[image + 1 :] == [
        "apptainer",
        "exec",
        "--bind",
        "/srv/mnist:/data/mnist",
        "--env",
        "A=1",
        "/img/x.sif",
        "true",
    ]


class FakeBuild:
    """Stands in for engines.stream_command: records argv, makes the output, returns ``rc``."""

    def __init__(self, rc: int = 0, tail: tuple[str, ...] = ()) -> None:
        self.rc, self.tail = rc, list(tail)
        self.argv: list[str] = []

    def __call__(self, argv: list[str], log_path: Path) -> tuple[int, list[str]]:
        self.argv = list(argv)
        if self.rc == 0:
            partial = next(a for a in argv if a.endswith(".sif.partial"))
            Path(partial).write_bytes(b"SIF")
        return self.rc, self.tail


def test_build_from_def_in_helper(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(appt, "stream_command", fake)
    runner = helper()
    runner._helper_ready = True
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "x.def").write_text(f"Bootstrap: oci-archive\nFrom: {tmp_path}/arch/base.tar\n")
    sif = runner.build_from_def(ctx / "x.def", tmp_path / "out" / "x.sif", ctx)
    assert sif.read_bytes() == b"SIF"
    argv = fake.argv
    image = argv.index("localhost/h:1")
    mounts = {argv[i + 1] for i, a in enumerate(argv[:image]) if a == "-v"}
    assert mounts == {
        f"{ctx}:{ctx}",
        f"{tmp_path / 'out'}:{tmp_path / 'out'}",
        f"{tmp_path / 'arch'}:{tmp_path / 'arch'}",
        f"{cache / 'apptainer'}:{appt.HELPER_SCRATCH}",
    }
    assert argv[argv.index("-w") + 1] == str(ctx)
    assert f"APPTAINER_TMPDIR={appt.HELPER_SCRATCH}/tmp" in argv[:image]
    assert argv[image + 1 :] == [
        "apptainer",
        "build",
        "--force",
        "--fakeroot",
        str(tmp_path / "out" / "x.sif.partial"),
        str(ctx / "x.def"),
    ]


def test_a_sites_squashfs_compressor_reaches_apptainer_build(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(appt, "stream_command", fake)
    runner = Apptainer("/usr/bin/apptainer")
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"")
    runner.build_from_oci_archive(archive, tmp_path / "a.sif", fmt="oci-archive", compression="lz4")
    assert fake.argv[fake.argv.index("build") :][:4] == [
        "build",
        "--force",
        "--mksquashfs-args",
        "-comp lz4",
    ]
    runner.build_from_oci_archive(archive, tmp_path / "b.sif", fmt="oci-archive")
    assert "--mksquashfs-args" not in fake.argv  # unset: Apptainer's own default


def test_only_a_known_squashfs_compressor_becomes_an_argument() -> None:
    assert appt.squashfs_args(None) == []
    assert appt.squashfs_args("zstd") == ["--mksquashfs-args", "-comp zstd"]
    with pytest.raises(ConfigError, match="unknown squashfs compressor"):
        appt.squashfs_args("lz4 -e /etc")  # type: ignore[arg-type]


def test_build_failure_raises_build_error_with_log(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(appt, "stream_command", FakeBuild(255, ("INFO: x", "FATAL:   no space")))
    runner = Apptainer("/usr/bin/apptainer")
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"")
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as err:
        runner.build_from_oci_archive(archive, tmp_path / "a.sif", fmt="oci-archive", log_path=log)
    assert err.value.log_path == log
    assert "from oci-archive" in err.value.step
    assert "FATAL:   no space" in str(err.value)
    assert not (tmp_path / "a.sif").exists()


# -- registry and the testinfra backend ------------------------------------------------------
def test_registry_file_and_env_override(cache: Path, tmp_path: Path, monkeypatch) -> None:
    sif = tmp_path / "a.sif"
    sif.write_bytes(b"")
    appt.register_image("proto", sif)
    assert appt.resolve_image("proto") == sif
    monkeypatch.setenv(appt.IMAGES_ENV, f"proto={tmp_path}/missing.sif, other={sif}")
    assert appt.resolve_image("other") == sif
    with pytest.raises(ConfigError, match="missing file"):
        appt.resolve_image("proto")
    with pytest.raises(ConfigError, match="known: other, proto"):
        appt.resolve_image("nope")
    with pytest.raises(ConfigError):
        appt.register_image("../x", sif)


def test_default_binds_add_mnist_when_cached(cache: Path, monkeypatch) -> None:
    assert appt.default_binds() == []
    (cache / "data" / "mnist").mkdir(parents=True)
    assert appt.default_binds() == [Bind(cache / "data" / "mnist", "/data/mnist", True)]
    monkeypatch.setenv(appt.BINDS_ENV, "/srv/m:/data/mnist")
    assert appt.default_binds() == [Bind(Path("/srv/m"), "/data/mnist")]


def test_plugin_registers_scheme_and_backend_builds_command(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register()  # the plugin registers only for runs that pass --hosts=apptainer://...
    assert BACKENDS["apptainer"] == "hpcenv.testinfra_apptainer.ApptainerBackend"
    sif = tmp_path / "p.sif"
    sif.write_bytes(b"")
    monkeypatch.setenv(appt.IMAGES_ENV, f"p={sif}")
    monkeypatch.setenv(appt.BINDS_ENV, f"{tmp_path}:/data/mnist:ro")
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/bin/apptainer")
    host = testinfra.get_host("apptainer://p")
    backend = host.backend
    assert isinstance(backend, ApptainerBackend)
    assert backend.get_pytest_id() == "apptainer://p"
    assert backend.argv("echo hi") == [
        "/opt/bin/apptainer",
        "exec",
        "--bind",
        f"{tmp_path}:/data/mnist:ro",
        str(sif),
        "/bin/sh",
        "-c",
        "echo hi",
    ]
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 3, b"out\n", b"err\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("HPCENV_CONTAINERS_CONF", "never")  # no podman --version probe in calls
    result = host.run("ls %s", "a b")
    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert calls[-1][-1] == "ls 'a b'"
    assert result.command == b"ls 'a b'"


# -- real Apptainer --------------------------------------------------------------------------
needs_runtime = needs_tool(
    "apptainer",
    "singularity",
    "podman",
    why="Apptainer runs natively or in hpcenv's helper container under podman",
)


@pytest.fixture(scope="session")
def base_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hpcenv.baseimage import ensure_base_image
    from hpcenv.engines import get_engine

    path = tmp_path_factory.mktemp("appt") / "base.tar"
    return get_engine("podman").save(ensure_base_image(), path, "oci-archive")


@pytest.fixture(scope="session")
def base_sif(base_archive: Path) -> Path:
    return Apptainer().build_from_oci_archive(base_archive, base_archive.with_suffix(".sif"))


def _squashfs_compressor(sif: Path) -> int:
    """The compression id in the SIF's squashfs superblock (mksquashfs's squashfs_fs.h:
    1 gzip, 2 lzma, 3 lzo, 4 xz, 5 lz4, 6 zstd): the u16 20 bytes after the ``hsqs`` magic."""
    with sif.open("rb") as handle:
        head = handle.read(64 << 20)
    at = head.find(b"hsqs")
    assert at >= 0, "no squashfs superblock in the SIF's first 64 MiB"
    return int.from_bytes(head[at + 20 : at + 22], "little")


@pytest.mark.apptainer
@pytest.mark.alongside
@needs_runtime
def test_an_lz4_sif_is_lz4_and_runs(base_archive: Path, base_sif: Path) -> None:
    """build.sif_compression: lz4 (the local sites) makes an lz4 squashfs that this machine's
    Apptainer runs; the default stays gzip."""
    sif = Apptainer().build_from_oci_archive(
        base_archive, base_archive.with_name("base-lz4.sif"), compression="lz4"
    )
    assert (_squashfs_compressor(sif), _squashfs_compressor(base_sif)) == (5, 1)
    proc = Apptainer().exec(sif, ["sh", "-c", ". /etc/os-release; echo $VERSION_CODENAME"])
    assert proc.returncode == 0 and proc.stdout.strip() == "bookworm", proc.stderr


@pytest.mark.apptainer
@pytest.mark.alongside
@needs_runtime
def test_real_sif_from_oci_archive_and_exec(base_sif: Path, tmp_path: Path) -> None:
    assert base_sif.stat().st_size > 10_000_000
    data = tmp_path / "data"
    data.mkdir()
    (data / "n.txt").write_text("41\n")
    proc = Apptainer().exec(
        base_sif,
        ["sh", "-c", '. /etc/os-release; echo "$VERSION_CODENAME $((X + $(cat /d/n.txt)))"'],
        binds=[Bind(data, "/d", read_only=True)],
        env={"X": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bookworm 42"


MULTISTAGE_DEF = """\
Bootstrap: oci-archive
From: {archive}
Stage: build

%files
    message.txt /opt/src/message.txt

%post
    mkdir -p /opt/app/bin
    printf '#!/bin/sh\\necho "$GREETING $(cat /opt/app/message.txt)"\\n' > /opt/app/bin/greet
    chmod 755 /opt/app/bin/greet
    cp /opt/src/message.txt /opt/app/message.txt

Bootstrap: oci-archive
From: {archive}
Stage: runtime

%files from build
    /opt/app /opt/app

%environment
    export PATH=/opt/app/bin:$PATH
    export GREETING=hello

%post
    export PATH=/opt/app/bin:$PATH
    export GREETING=hello
    greet > /opt/app/built-with.txt

%labels
    org.hpcenv.recipe test

%runscript
    exec greet "$@"

%test
    greet | grep -q 'hello from build'
"""


@pytest.mark.apptainer
@pytest.mark.alongside
@needs_runtime
def test_real_multistage_def_build(base_archive: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "message.txt").write_text("from build\n")
    (ctx / "Singularity.def").write_text(MULTISTAGE_DEF.format(archive=base_archive))
    runner = Apptainer()
    sif = runner.build_from_def(ctx / "Singularity.def", tmp_path / "ms.sif", ctx)
    proc = runner.exec(sif, ["sh", "-c", "greet; cat /opt/app/built-with.txt; ls /opt/src"])
    assert proc.stdout.splitlines()[:2] == ["hello from build", "hello from build"]
    assert "No such file" in proc.stderr  # the build stage's sources stay behind


@pytest.mark.apptainer
@pytest.mark.alongside
@needs_runtime
def test_real_testinfra_host(base_sif: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(appt.IMAGES_ENV, f"base={base_sif}")
    register()
    host = testinfra.get_host("apptainer://base")
    assert "bookworm" in host.run("cat /etc/os-release").stdout
    assert host.file("/etc/debian_version").content_string.startswith("12.")
    assert host.run("exit 7").rc == 7


@pytest.mark.apptainer
@pytest.mark.alongside
@needs_runtime
def test_real_def_build_reads_a_secret_that_stays_out(base_archive: Path, tmp_path: Path) -> None:
    """Credentials for a def build: hpcenv's def template with a step that needs a build
    secret (its %setup makes the mount point); the file is bound at /run/secrets for %post
    only (apptainer build --bind). Neither the SIF's files nor its stored definition hold it."""
    from types import SimpleNamespace

    from hpcenv.blocks import Primitive, Stage
    from hpcenv.credentials import SECRETS_DIR, secret_files
    from hpcenv.render import _environment

    secret = f"apt-password-{os.getpid()}-{time.time_ns()}"
    step = Primitive(
        "shell",
        commands=(
            "test -r /run/secrets/hpcenv-apt-auth",
            "sha256sum /run/secrets/hpcenv-apt-auth | cut -d' ' -f1 > /opt/secret.sha256",
        ),
        secrets=("hpcenv-apt-auth",),
    )
    lock = SimpleNamespace(site="t", recipe="t", build={"platform": "linux/amd64"})
    text = (
        _environment()
        .get_template("Singularity.def.j2")
        .render(
            version="test",
            lock=lock,
            stages=[Stage("runtime", "base", [step])],
            bootstrap="oci-archive",
            bootstrap_from=str(base_archive),
            test_commands=["true"],
            secrets_dir=SECRETS_DIR,
        )
    )
    assert "%setup" in text and secret not in text
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Singularity.def").write_text(text.lstrip("\n"))
    runner = Apptainer()
    with secret_files({"hpcenv-apt-auth": secret}, tmp_path / "secrets") as files:
        folder = files["hpcenv-apt-auth"].parent
        sif = runner.build_from_def(
            ctx / "Singularity.def", tmp_path / "s.sif", ctx, secrets_dir=folder
        )
    assert not folder.exists()
    seen = runner.exec(sif, ["sh", "-c", "cat /opt/secret.sha256; ls -A /run/secrets; true"])
    assert seen.stdout.splitlines() == [hashlib.sha256(secret.encode()).hexdigest()]
    deffile = runner._run(
        runner.command(["inspect", "--deffile", str(sif)], paths=[sif.parent]), timeout=120
    )
    assert "/run/secrets/hpcenv-apt-auth" in deffile.stdout and secret not in deffile.stdout
    image_dirs = "/etc /opt /usr /var /run /srv"  # not the host paths Apptainer binds
    listing = runner.exec(sif, ["sh", "-c", f"grep -rl -e '{secret}' {image_dirs}; true"])
    assert listing.stdout.strip() == ""
