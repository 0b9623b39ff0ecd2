"""Issue 40, classes 4 and 5: secrets through requirements mistakes, and the matched stack
replaced quietly by a recipe's ``user:`` section.

- a token file, a ``.netrc``, a ``.env`` or ``/proc/self/environ`` given as requirements is
  refused in one line naming the file and line, and its secret appears nowhere: not in stdout,
  not in stderr, not in any file hpcenv wrote;
- a requirement that bypasses the site's indexes (URL, VCS, ``file://``, a path, an archive name)
  is refused unless the recipe says ``user.allow_direct: true``; a URL with credentials always;
- ``user.env`` refuses the names the launch and the matched stack own (one list:
  :mod:`hpcenv.envpolicy`), every name ``tune --measure`` writes among them;
- ``user.files`` cannot replace the loader's configuration or the stack's libraries, also not
  through a folder whose contents land there.

Unit tests on :mod:`hpcenv.tokens` and :mod:`hpcenv.usercontent`; each refusal also as the
installed ``hpcenv`` run as a process (exit 2, one line on stderr).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from hpcenv import envpolicy
from hpcenv.errors import ConfigError
from hpcenv.recipe import load_recipe
from hpcenv.safe import validation_message
from hpcenv.tokens import secret_line, token_kind
from hpcenv.tuning.model import measured_names
from hpcenv.usercontent import RESERVED_DESTS, UserSection, read_requirements, screen

HPCENV = Path(sys.executable).with_name("hpcenv")

# Fake secrets of the issuers' shapes (none is a real credential).
GHP = "ghp_" + "Zq7Xv2Lm9Kp4Wt8Rb3Nc6Yd1Hf5Js0Ga2Ue"
HF = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"
AWS = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
NETRC_PASSWORD = "S3cr3tPassw0rdXyZ"
HEX = "3f9a1c7e5b2d8f4a6c0e9b1d7f3a5c8e2b4d6f1a"


# -- what a token looks like ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        GHP,
        "github_pat_" + "11ABCDEFG0" * 4,
        "glpat-" + "Ab3dEf6hIj9kLm2nOp5q",
        HF,
        "xoxb-123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
        AWS,
        "sk-proj-" + "Ab1xCd2yEf3zGh4w" * 3,
        "pypi-" + "AgEIcHlwaS5vcmcCJGE0" * 3,
        HEX,
        "Zk3pQ9xW7mB2vR8tY4nL6cJ1hF5dG0sA",  # no prefix: long, mixed, high entropy
    ],
)
def test_tokens_are_recognised(value: str) -> None:
    assert token_kind(value) is not None


def test_no_package_name_here_looks_like_a_token() -> None:
    """Every distribution installed in this venv, and names near the prefixes."""
    names = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    names |= {"hf_transfer", "hf-xet", "sk-video", "xopen", "npm-tools", "pypi-simple"}
    names |= {"azure-mgmt-recoveryservicesbackup", "nvidia-cuda-nvrtc-cu12", "PyQt6-WebEngine-Qt6"}
    assert [n for n in names if token_kind(n)] == []


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (f"GITHUB_TOKEN={GHP}", "NAME=value"),
        (f"export HF_TOKEN={HF}", "NAME=value"),
        (f"machine github.com login me password {NETRC_PASSWORD}", ".netrc"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "PEM"),
        (f"//registry.npmjs.org/:_authToken={HEX}", "password or token"),
    ],
)
def test_secret_lines_are_named_by_their_shape(line: str, words: str) -> None:
    assert words in (secret_line(line) or "")


# -- a requirement line is never quoted back -----------------------------------------------------


@pytest.mark.parametrize(
    ("line", "secret", "words"),
    [
        (GHP, GHP, "a token (ghp_...)"),
        (f"{HF}==1.0", HF, "a token (hf_...)"),
        (AWS, AWS, "AWS access key id"),
        (f"GITHUB_TOKEN={GHP}", GHP, "NAME=value"),
        (f"machine pypi.org login me password {NETRC_PASSWORD}", NETRC_PASSWORD, ".netrc"),
        (f"PATH=/usr/bin\0TOKEN={GHP}", GHP, "control character"),
        ("-----BEGIN RSA PRIVATE KEY-----", "RSA PRIVATE", "PEM"),
        (f"--index-url https://me:{GHP}@pypi.example.org/simple", GHP, "pip option --index-url"),
        (f"-{GHP}", GHP, "a line starting with '-'"),
        (f"requests {NETRC_PASSWORD}x", NETRC_PASSWORD, "not a pip requirement"),
        (f"pkg @ https://me:{NETRC_PASSWORD}@example.org/p.whl", NETRC_PASSWORD, "credential"),
        (f"pkg @ https://example.org/p.whl?token={GHP}", GHP, "credential"),
    ],
)
def test_screen_refuses_without_the_text(line: str, secret: str, words: str) -> None:
    with pytest.raises(ValueError) as err:
        screen(line)
    assert words in str(err.value) and secret not in str(err.value)


def test_a_requirements_file_of_secrets_names_file_and_line(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text(f"# settings\nDEBUG=1\nGITHUB_TOKEN={GHP}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_requirements(env, tmp_path, ".env")
    assert str(err.value).startswith(".env:2: looks like a NAME=value setting")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine h\n  login me\n  password {NETRC_PASSWORD}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_requirements(netrc, tmp_path, "netrc")
    assert str(err.value).startswith("netrc:") and NETRC_PASSWORD not in str(err.value)


def test_kernel_pseudo_files_are_refused() -> None:
    with pytest.raises(ConfigError, match="kernel pseudo-file"):
        read_requirements(Path("/proc/self/environ"), Path("/proc/self"), "environ")


# -- requirements that bypass the site's indexes ------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "https://example.org/pkg-1.0-py3-none-any.whl",
        "git+https://github.com/example/pkg#egg=pkg",
        "file:///tmp/pkg",
        "./local/pkg",
        "pkg-1.0-py3-none-any.whl",
        "pkg @ https://example.org/pkg.whl",
        "pkg @ git+https://github.com/example/pkg@v1",
        "pkg @ file:///opt/pkg",
    ],
)
def test_direct_requirements_are_refused_by_default(tmp_path: Path, spec: str) -> None:
    (tmp_path / "req.txt").write_text(f"six\n{spec}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_requirements(tmp_path / "req.txt", tmp_path, "req.txt")
    message = str(err.value)
    assert message.startswith("req.txt:2: ") and "user.allow_direct: true" in message
    with pytest.raises(ValidationError) as verr:
        UserSection(pip=[spec])
    assert "user.allow_direct: true" in validation_message(verr.value, "recipe")


def test_allow_direct_takes_name_at_url_only(tmp_path: Path) -> None:
    req = tmp_path / "req.txt"
    req.write_text("pkg @ git+https://github.com/example/pkg@v1\n", encoding="utf-8")
    found = read_requirements(req, tmp_path, "req.txt", allow_direct=True)
    assert [r.spec for r in found] == ["pkg @ git+https://github.com/example/pkg@v1"]
    assert UserSection(pip=["pkg @ https://example.org/p.whl"], allow_direct=True).pip
    req.write_text("git+https://github.com/example/pkg#egg=pkg\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="NAME @ URL"):
        read_requirements(req, tmp_path, "req.txt", allow_direct=True)
    req.write_text(f"pkg @ https://u:{NETRC_PASSWORD}@example.org/p.whl\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="credential"):
        read_requirements(req, tmp_path, "req.txt", allow_direct=True)


# -- user.env: the names hpcenv and the matched stack own ----------------------------------------

OWNED = [
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PATH",
    "PYTHONPATH",
    "OMPI_MCA_mca_base_component_path",
    "OMPI_MCA_plm",
    "PMIX_MCA_gds",
    "PMI_RANK",
    "SLURM_JOB_ID",
    "I_MPI_PIN_DOMAIN",
    "FI_PROVIDER",
    "FI_PROVIDER_PATH",
    "UCX_TLS",
    "NCCL_NET_PLUGIN",
    "NCCL_SOCKET_IFNAME",
    "HOROVOD_TIMELINE",
    "CCL_ATL_TRANSPORT",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "HPCENV_SITE",
    "APPTAINERENV_RANK",
]


@pytest.mark.parametrize("name", OWNED)
def test_user_env_refuses_owned_names(name: str) -> None:
    assert envpolicy.refused(name, "recipe") is not None
    with pytest.raises(ValidationError) as err:
        UserSection(env={name: "x"})
    assert name in validation_message(err.value, "recipe")


def test_user_env_refuses_every_name_tuning_writes() -> None:
    """A recipe cannot replace what ``tune --measure`` measured (the same list the tuning file
    check allows, :func:`hpcenv.tuning.model.measured_names`)."""
    assert [n for n in sorted(measured_names()) if envpolicy.refused(n, "recipe") is None] == []


@pytest.mark.parametrize("name", ["MY_SETTING", "TORCH_HOME", "HF_HOME", "WANDB_PROJECT", "LANG"])
def test_user_env_takes_a_projects_own_names(name: str) -> None:
    assert UserSection(env={name: "x"}).env == {name: "x"}


# -- user.files: the loader's configuration and the stack's libraries ----------------------------


@pytest.mark.parametrize(
    "dest",
    [
        "/etc/ld.so.preload",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d/zz-mine.conf",
        "/etc/ld.so.cache",
        "/usr/lib/x86_64-linux-gnu/libfabric.so.1",
        "/usr/local/lib/libmpi.so.40",
        "/lib64/ld-linux-x86-64.so.2",
        "/opt/mpi/lib/libmpi.so.40",
        "/opt/aws-ofi-nccl/lib/libnccl-net.so",
        "/opt/venv/lib/python3.11/site-packages/torch",
        "/.singularity.d/env/99-mine.sh",
        "/etc/profile.d/mine.sh",
        "/usr/bin/python3",
    ],
)
def test_user_files_cannot_replace_the_stack(dest: str) -> None:
    with pytest.raises(ValidationError) as err:
        UserSection.model_validate({"files": [{"src": "a", "dest": dest}]})
    assert "which hpcenv's image uses" in validation_message(err.value, "recipe")


def test_every_reserved_destination_says_why() -> None:
    assert all(path.startswith("/") and len(why) > 10 for path, why in RESERVED_DESTS.items())


def test_a_folder_cannot_land_in_the_stack(tmp_path: Path) -> None:
    (tmp_path / "tree" / "lib").mkdir(parents=True)
    (tmp_path / "tree" / "lib" / "libmpi.so.40").write_bytes(b"\x7fELF")
    path = write_recipe(tmp_path, "files: [{src: tree, dest: /usr/local}]\n")
    with pytest.raises(ConfigError, match=r"would put /usr/local/lib in the image"):
        load_recipe(str(path))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "ld.so.preload").write_text("/x.so\n", encoding="utf-8")
    path = write_recipe(tmp_path, "files: [{src: etc/ld.so.preload, dest: /etc}]\n")
    with pytest.raises(ConfigError, match=r"/etc/ld\.so\.preload"):
        load_recipe(str(path))


def test_a_projects_own_folders_are_fine(tmp_path: Path) -> None:
    (tmp_path / "tree" / "bin").mkdir(parents=True)
    (tmp_path / "tree" / "bin" / "tool").write_text("#!/bin/sh\n", encoding="utf-8")
    (tmp_path / "tool").write_text("#!/bin/sh\n", encoding="utf-8")
    path = write_recipe(
        tmp_path,
        "files: [{src: tree, dest: /opt/myproject}, {src: tool, dest: /usr/local/bin/tool},"
        " {src: tree, dest: /usr/local}]\n",
    )
    assert len(load_recipe(str(path)).content.files) == 3


# -- as the installed hpcenv ---------------------------------------------------------------------


def write_recipe(folder: Path, user: str) -> Path:
    path = folder / "myproject.yaml"
    body = "name: myproject\nextends: horovod-cpu\nuser:\n"
    path.write_text(body + textwrap.indent(textwrap.dedent(user), "  "), encoding="utf-8")
    return path


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert HPCENV.is_file(), f"the installed console script is missing: {HPCENV}"
    full = {**os.environ, "HPCENV_CACHE": str(cwd / "cache"), **(env or {})}
    return subprocess.run(
        [str(HPCENV), *args], capture_output=True, text=True, cwd=cwd, env=full, timeout=120
    )


def dry_build(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hpcenv build --dry-run`` of the local horovod-cpu with ``args`` added, in ``folder``."""
    return run("build", "--dry-run", "--site", "local", "-r", "horovod-cpu", *args, cwd=folder)


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def nowhere(secret: str, proc: subprocess.CompletedProcess[str], folder: Path, *inputs: Path):
    """The secret is in no output and in no file under ``folder`` but the inputs."""
    assert secret not in proc.stdout and secret not in proc.stderr
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path not in inputs:
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("name", "text", "secret", "words"),
    [
        ("token.txt", f"{GHP}\n", GHP, ("token.txt:1", "a token (ghp_...)")),
        ("hf.txt", f"numpy\n{HF}\n", HF, ("hf.txt:2", "a token (hf_...)")),
        (".env", f"DEBUG=1\nAWS_KEY={AWS}\n", AWS, (".env:1", "NAME=value")),
        (
            ".netrc",
            f"machine pypi.org login me password {NETRC_PASSWORD}\n",
            NETRC_PASSWORD,
            (".netrc:1", ".netrc entry"),
        ),
        ("keys", f"{HEX}\n", HEX, ("keys:1", "hex key")),
    ],
)
def test_process_secret_requirements_are_refused_and_never_shown(
    tmp_path: Path, name: str, text: str, secret: str, words: tuple[str, ...]
) -> None:
    given = tmp_path / name
    given.write_text(text, encoding="utf-8")
    for args in (
        ("build", "--dry-run"),
        ("render", "--out", "ctx"),
    ):
        proc = run(
            *args, "--site", "local", "-r", "horovod-cpu", "--requirements", name, cwd=tmp_path
        )
        refused(proc, *words)
        nowhere(secret, proc, tmp_path, given)
    assert not (tmp_path / "ctx").exists()


def test_process_proc_self_environ_is_refused(tmp_path: Path) -> None:
    proc = run(
        "build",
        "--dry-run",
        "--site",
        "local",
        "-r",
        "horovod-cpu",
        "--requirements",
        "/proc/self/environ",
        cwd=tmp_path,
        env={"MY_API_TOKEN": GHP},
    )
    refused(proc, "kernel pseudo-file")
    nowhere(GHP, proc, tmp_path)


def test_process_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "req.txt")
    proc = dry_build(tmp_path, "--requirements", "req.txt")
    refused(proc, "req.txt")


@pytest.mark.parametrize(
    ("user", "words"),
    [
        ("env: {MASTER_ADDR: 10.0.0.1}\n", ("user.env", "MASTER_ADDR", "rendezvous")),
        ("env: {RANK: '0'}\n", ("user.env", "RANK", "per rank")),
        ("env: {NCCL_NET_PLUGIN: /x.so}\n", ("user.env", "NCCL_NET_PLUGIN", "NCCL")),
        ("env: {OMPI_MCA_mca_base_component_path: /x}\n", ("OMPI_MCA_", "Open MPI")),
        ("files: [{src: p, dest: /etc/ld.so.preload}]\n", ("user.files.0.dest", "ld.so")),
        ("files: [{src: p, dest: /usr/lib/libmpi.so.40}]\n", ("/usr/lib", "library folder")),
        ("pip: ['pkg @ https://example.org/pkg.whl']\n", ("'user': pip[0]", "user.allow_direct")),
        ("requirements: [req.txt]\n", ("req.txt:1", "user.allow_direct")),
    ],
)
def test_process_recipe_user_section_refusals(
    tmp_path: Path, user: str, words: tuple[str, ...]
) -> None:
    (tmp_path / "p").write_text("x\n", encoding="utf-8")
    (tmp_path / "req.txt").write_text("git+https://example.org/x.git#egg=x\n", encoding="utf-8")
    write_recipe(tmp_path, user)
    proc = run("render", "--site", "local", "-r", "./myproject.yaml", "--out", "ctx", cwd=tmp_path)
    refused(proc, *words)
    assert not (tmp_path / "ctx").exists()


def test_process_short_form_direct_requirement_names_the_recipe_option(tmp_path: Path) -> None:
    proc = dry_build(tmp_path, "--pip", "pkg @ file:///opt/pkg")
    refused(proc, "--pip", "user.allow_direct: true")


def test_process_allow_direct_renders_the_url(tmp_path: Path) -> None:
    write_recipe(
        tmp_path,
        "allow_direct: true\npip: ['pkg @ https://example.org/pkg-1.0-py3-none-any.whl']\n",
    )
    proc = run("render", "--site", "local", "-r", "./myproject.yaml", "--out", "ctx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docker = (tmp_path / "ctx" / "Dockerfile").read_text(encoding="utf-8")
    assert "https://example.org/pkg-1.0-py3-none-any.whl" in docker


def test_process_the_docs_allow_direct_example_renders(tmp_path: Path) -> None:
    """docs/recipes.md's ``allow_direct`` example is a user section that renders."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
    text = docs.read_text(encoding="utf-8")
    block = text.split("```yaml\n  user:\n    allow_direct: true\n", 1)[1].split("```", 1)[0]
    user = "allow_direct: true\n" + textwrap.dedent(block)
    write_recipe(tmp_path, user)
    proc = run("render", "--site", "local", "-r", "./myproject.yaml", "--out", "ctx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docker = (tmp_path / "ctx" / "Dockerfile").read_text(encoding="utf-8")
    assert "mylib @ git+https://github.com/me/mylib@v1.2" in docker


def test_process_a_nul_in_an_include_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "req.txt").write_bytes(b"six\n-r a\x00b\n")
    proc = dry_build(tmp_path, "--requirements", "req.txt")
    refused(proc, "req.txt:2", "control character")


def test_process_a_token_given_as_pip_is_never_shown(tmp_path: Path) -> None:
    proc = dry_build(tmp_path, "--pip", GHP)
    refused(proc, "--pip", "a token (ghp_...)")
    nowhere(GHP, proc, tmp_path)


def test_process_a_large_requirements_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"six\n" * (300_000))
    proc = dry_build(tmp_path, "--requirements", "big.txt")
    refused(proc, "big.txt", "at most 1 MiB")
