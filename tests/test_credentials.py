"""Credentials in mirror and index URLs never reach a rendered file, a log, a progress line or
an error: they travel as build secrets (0600 files, removed after the build). The real podman
build that greps the image for them is in test_credentials_build.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from requirements import need_hadolint

from hpcenv.build import build_secrets
from hpcenv.credentials import apt_auth_conf, clean_url, redact, split_userinfo, strip_userinfo
from hpcenv.engines import stream_command
from hpcenv.recipe import load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.site import Site, load_site

USER, PASSWORD = "hpcuser", "Pa55-w0rd_s3cret"
HPCENV = Path(sys.executable).with_name("hpcenv")


def credentialed_site(tmp_path: Path, *, apt: bool = True, pip: bool = True) -> Path:
    """The local site with a credentialed apt mirror and pip index (names only, no server)."""
    src = Path(__file__).parent.parent / "site-configs" / "local.yaml"
    lines = []
    for line in src.read_text().splitlines():
        lines.append(line)
        if line.startswith("build:"):
            if apt:
                lines.append(f"  apt_mirror: http://{USER}:{PASSWORD}@mirror.example:8080/debian")
            if pip:
                lines.append(f"  pip_index_url: https://{USER}:{PASSWORD}@pypi.example/simple")
                lines.append(
                    f"  pip_extra_index_urls: [https://tok3n-{PASSWORD}@extra.example/simple]"
                )
    path = tmp_path / "credsite.yaml"
    path.write_text("\n".join(lines).replace("name: local", "name: credsite") + "\n")
    return path


def _secret_free(text: str, where: str) -> None:
    assert PASSWORD not in text and f"{USER}:" not in text, f"credentials in {where}"


def test_redact_and_split() -> None:
    url = f"https://{USER}:{PASSWORD}@pypi.example:8443/simple"
    assert redact(f"fetch {url} now") == "fetch https://***@pypi.example:8443/simple now"
    assert redact("https://tok3n@h/x and http://h/y") == "https://***@h/x and http://h/y"
    assert split_userinfo(url) == ("https://pypi.example:8443/simple", USER, PASSWORD)
    assert clean_url("http://u%40x:p%3Aw@h/p") == "http://h/p"
    assert split_userinfo("http://u%40x:p%3Aw@h/p")[1:] == ("u@x", "p:w")
    assert clean_url("http://h/p") == "http://h/p"
    assert strip_userinfo(f"deb {url} bookworm main\n") == (
        "deb https://pypi.example:8443/simple bookworm main\n"
    )
    assert apt_auth_conf(f"http://{USER}:{PASSWORD}@mirror.example:8080/debian/") == (
        f"machine http://mirror.example:8080/debian\nlogin {USER}\npassword {PASSWORD}\n"
    )


def test_one_stage_takes_credentials_as_secrets_of_its_pip_steps(tmp_path: Path) -> None:
    """A stack that compiles nothing builds in one stage (daal4py): pip's credentialed
    configuration is a build secret of each step that may run pip, never a file, an ENV or a
    layer; the image's own steps after them do not see it."""
    site = load_site(str(credentialed_site(tmp_path)))
    rendered = render(resolve(site, load_recipe("daal4py")), site)
    for name in ("dockerfile", "singularity", "lock_json", "pip_conf"):
        _secret_free(getattr(rendered, name), name)
    docker = rendered.dockerfile
    assert docker.count("\nFROM ") == 1 and "\nENV PIP_CONFIG_FILE" not in docker
    pip_runs = [b for b in docker.split("\nRUN ")[1:] if "/opt/venv/bin/pip" in b]
    secret = "--mount=type=secret,id=hpcenv-pip.conf,target=/run/secrets/hpcenv-pip.conf"
    assert len(pip_runs) == 2 and all(secret in b.split("\n")[0] for b in pip_runs)
    assert all("export PIP_CONFIG_FILE=/run/secrets/hpcenv-pip.conf" in b for b in pip_runs)
    tail = docker.split("useradd", 1)[1]
    assert "hpcenv-pip.conf" not in tail


def test_rendered_files_hold_no_credentials(tmp_path: Path) -> None:
    """A stack that compiles (horovod-cpu): the build stage's steps take the secrets."""
    site = load_site(str(credentialed_site(tmp_path)))
    rendered = render(resolve(site, load_recipe("horovod-cpu")), site)
    for name in ("dockerfile", "singularity", "lock_json", "pip_conf"):
        _secret_free(getattr(rendered, name), name)
    docker = rendered.dockerfile
    assert "deb http://mirror.example:8080/debian bookworm main" in docker
    apt_runs = [b for b in docker.split("\nRUN ")[1:] if "apt-get" in b]
    assert apt_runs and all(
        b.startswith("--mount=type=secret,id=hpcenv-apt-auth,target=/run/secrets/hpcenv-apt-auth")
        or "id=hpcenv-apt-auth" in b.split("\n")[0]
        for b in apt_runs
    )
    build_stage = docker.split("AS runtime")[0]
    assert build_stage.count("id=hpcenv-pip.conf,target=/run/secrets/hpcenv-pip.conf") == (
        build_stage.count("\nRUN ")
    )  # pip may run in any build step
    assert "hpcenv-pip.conf" not in docker.split("AS runtime")[1]
    assert 'PIP_CONFIG_FILE="/run/secrets/hpcenv-pip.conf"' in docker
    assert "-o Dir::Etc::netrc=/run/secrets/hpcenv-apt-auth -o APT::Sandbox::User=root" in docker
    assert "-o Dir::Etc::netrc=/run/secrets/hpcenv-apt-auth" in rendered.singularity
    assert "export PIP_CONFIG_FILE=/run/secrets/hpcenv-pip.conf" in rendered.singularity
    # Apptainer binds only onto existing folders: each stage makes the mount point first.
    assert (
        rendered.singularity.count(
            'mkdir -p "${APPTAINER_ROOTFS:-$SINGULARITY_ROOTFS}/run/secrets"'
        )
        == 2
    )


def test_credentialed_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    hadolint = need_hadolint("the credentialed Dockerfile is linted")
    site = load_site(str(credentialed_site(tmp_path)))
    path = tmp_path / "Dockerfile"
    path.write_text(render(resolve(site, load_recipe("daal4py")), site).dockerfile)
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "error", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_build_secrets_are_private_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCENV_CACHE", str(tmp_path / "cache"))
    site: Site = load_site(str(credentialed_site(tmp_path)))
    with build_secrets(site) as secrets:
        assert set(secrets) == {"hpcenv-apt-auth", "hpcenv-pip.conf"}
        folder = secrets["hpcenv-apt-auth"].parent
        assert folder.stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in secrets.values())
        assert f"password {PASSWORD}" in secrets["hpcenv-apt-auth"].read_text()
        pip_conf = secrets["hpcenv-pip.conf"].read_text()
        assert f"index-url = https://{USER}:{PASSWORD}@pypi.example/simple" in pip_conf
        assert f"https://tok3n-{PASSWORD}@extra.example/simple" in pip_conf
    assert not folder.exists()
    plain = load_site("local")
    with build_secrets(plain) as none:
        assert none == {}


def test_logs_and_progress_lines_are_redacted(tmp_path: Path) -> None:
    url = f"http://{USER}:{PASSWORD}@mirror.example/debian"
    seen: list[str] = []
    log = tmp_path / "build.log"
    rc, tail = stream_command(["echo", f"Get:1 {url} bookworm InRelease"], log, on_line=seen.append)
    assert rc == 0
    for text in (log.read_text(), "\n".join(seen), "\n".join(tail)):
        _secret_free(text, "log")
        assert "http://***@mirror.example/debian" in text


def test_engine_passes_secrets_as_build_secrets(tmp_path: Path) -> None:
    """The podman argv: ``--secret id=ID,src=FILE`` (the file, never its content)."""
    from hpcenv.engines import PodmanEngine

    fake = tmp_path / "podman"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    secret = tmp_path / "s"
    secret.write_text(PASSWORD)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    result = PodmanEngine(str(fake)).build(
        tmp_path,
        tmp_path / "Dockerfile",
        "t",
        log_path=tmp_path / "log",
        secrets={"hpcenv-apt-auth": secret},
    )
    text = result.log_path.read_text()
    assert f"id=hpcenv-apt-auth,src={secret}" in text and PASSWORD not in text


def test_debootstrap_sources_list_is_cleaned(tmp_path: Path) -> None:
    from hpcenv.baseimage import forget_credentials

    root = tmp_path / "rootfs"
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    (root / "etc/apt/sources.list").write_text(
        f"deb http://{USER}:{PASSWORD}@mirror.example/debian bookworm main\n"
    )
    forget_credentials(root)
    assert (root / "etc/apt/sources.list").read_text() == (
        "deb http://mirror.example/debian bookworm main\n"
    )


def test_cli_never_prints_credentials(tmp_path: Path) -> None:
    site = credentialed_site(tmp_path)
    env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(HPCENV), *args], capture_output=True, text=True, env=env, timeout=120
        )

    shown = run("sites", "show", str(site), "--json")
    assert shown.returncode == 0 and "https://***@pypi.example/simple" in shown.stdout
    out = tmp_path / "out"
    rendered = run("render", "--site", str(site), "--recipe", "daal4py", "--out", str(out))
    dry = run("build", "--site", str(site), "--recipe", "daal4py", "--dry-run")
    bad = run("resolve", "--site", str(site), "--recipe", "daal4py", "--set", "mpi4py=0.0.1")
    assert rendered.returncode == 0 and dry.returncode == 0 and bad.returncode == 2
    for proc in (shown, rendered, dry, bad):
        _secret_free(proc.stdout + proc.stderr, "output")
    for path in out.rglob("*"):
        if path.is_file():
            _secret_free(path.read_text(errors="replace"), str(path))
    assert not (out / "hpcenv-build" / "pip.conf").exists()
