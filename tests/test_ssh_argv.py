"""The OpenSSH transport's command line, without a server: what it passes only when given, the
host after ``--``, hosts that ``ssh`` could read as an option refused, and the one-line
failures of the installed ``hpcenv`` (exit 2) for a bad host, a missing config file and a
missing ``ssh`` client. The real logins are in tests/test_ssh_config.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from hpcenv.jobs.transport import OpenSshTransport, TransportSpec, make_transport

HPCENV = str(Path(sys.executable).with_name("hpcenv"))


def _submit(tmp_path: Path, *ssh: str, env: dict[str, str] | None = None) -> list[str]:
    """``hpcenv submit`` over ssh: asserts exit 2 and one line on stderr, returns it."""
    argv = [HPCENV, "submit", "--site", "local", "--no-container", "--single"]
    argv += ["--workdir", str(tmp_path / "w"), "--transport", "ssh", *ssh, "--", "true"]
    run_env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache"), **(env or {})}
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    return lines


def test_only_given_values_are_on_the_command_line(tmp_path: Path) -> None:
    known = tmp_path / "known 100%"
    known.write_text("")
    key = tmp_path / "key"
    key.write_text("")
    t = OpenSshTransport(
        TransportSpec(
            kind="ssh",
            host="login1",
            port=2200,
            user="alice",
            key_file=str(key),
            known_hosts=str(known),
            ssh_config=str(known),
        )
    )
    argv = t.argv("echo hi")
    assert argv[argv.index("-F") + 1] == str(known)
    assert argv[argv.index("-p") + 1] == "2200" and argv[argv.index("-l") + 1] == "alice"
    assert argv[argv.index("-i") + 1] == str(key) and "IdentitiesOnly=yes" in argv
    assert f'UserKnownHostsFile="{tmp_path}/known 100%%"' in argv  # % is a token for ssh
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes"} <= set(argv)
    assert argv[-3:] == ["--", "login1", "echo hi"]
    assert t.describe() == "ssh://alice@login1:2200"
    bare = OpenSshTransport(TransportSpec(kind="ssh", host="perlmutter"))
    assert not {"-F", "-p", "-l", "-i"} & set(bare.argv("true"))
    assert bare.describe() == "ssh://perlmutter"


def test_openssh_is_the_default_client() -> None:
    assert isinstance(make_transport(TransportSpec(kind="ssh", host="login")), OpenSshTransport)


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "a b", "host;id", "@h", ""])
def test_a_host_ssh_could_read_as_an_option_is_refused(host: str) -> None:
    if host == "":
        with pytest.raises(ValidationError):
            TransportSpec(kind="ssh", host=host)
        return
    with pytest.raises(ValidationError, match="not a host name or alias"):
        TransportSpec(kind="ssh", host=host)


def test_cli_refuses_an_option_as_host(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    (line,) = _submit(tmp_path, f"--ssh-host=-oProxyCommand=touch {mark}")
    assert line.startswith("error: ssh host '-oProxyCommand=") and "starts with '-'" in line
    assert not mark.exists()


def test_cli_missing_ssh_config_file(tmp_path: Path) -> None:
    (line,) = _submit(tmp_path, "--ssh-host", "login", "--ssh-config", str(tmp_path / "nope"))
    assert line == f"error: ssh config file not found: {tmp_path / 'nope'}"


def test_cli_without_an_ssh_client(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("bash", "sh"):  # what hpcenv itself may run; no ssh
        os.symlink(f"/bin/{tool}", empty / tool)
    (line,) = _submit(tmp_path, "--ssh-host", "login", env={"PATH": str(empty)})
    assert "runs the system OpenSSH client, and ssh is not on PATH" in line
    assert "--ssh-client paramiko" in line
