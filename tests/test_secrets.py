"""Secrets never printed (issue 20, class 3): not in any output mode, argv, error or file left
behind, whatever the password holds (``@ / : % #`` and any other printable character).

- :func:`hpcenv.credentials.redact` reads the user-info up to the *rightmost* ``@`` and keeps
  host, port and path (property tests with generated passwords, raw and percent-encoded);
- the installed ``hpcenv`` as a process: ``sites init --extends --json``, ``sites show``, errors,
  ``build --push``, a build killed by SIGTERM/SIGHUP/SIGINT (a fake ``podman`` on PATH holds
  the build open), debootstrap's argv (a fake ``debootstrap`` records what ``ps`` would show);
- wget (debootstrap's downloader) really reads the ``.netrc`` hpcenv writes, against a local
  server that asks for basic auth.
"""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcenv.credentials import (
    clean_url,
    netrc_entry,
    redact,
    secret_files,
    shown,
    split_userinfo,
    strip_userinfo,
    userinfo_problem,
)
from hpcenv.delivery import DeliveryStep, check_ref, deliver
from hpcenv.errors import ConfigError, EnvironmentProblem

HPCENV = Path(sys.executable).with_name("hpcenv")
USER = "hpcuser"
SECRET = "Zq7-s3cr3t"  # distinctive: found nowhere else in hpcenv's output
LOCAL_SITE = Path(__file__).parent.parent / "site-configs" / "local.yaml"

# Printable characters, '@ / : % #' among them; raw ones exclude whitespace (a URL in text ends
# there) and the characters the site's URL pattern refuses unencoded.
PRINTABLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.characters(
    categories=("L", "N", "P", "S")
)
URL_CHARS = "".join(sorted(set("ABCXYZabcxyz0189._~:/?#[]@!&+,;=%-")))
passwords = st.text(PRINTABLE, min_size=1, max_size=40)
raw_passwords = st.text(st.sampled_from(URL_CHARS), min_size=1, max_size=40)
hosts = st.sampled_from(
    ["mirror.example", "pypi.example:8443", "10.0.0.7:8080", "[fd00::1]:3128", "h"]
)
paths = st.sampled_from(["", "/", "/debian", "/simple/", "/a/b?x=1", "/p#frag"])
schemes = st.sampled_from(["http://", "https://", "git+https://"])


# -- the redaction, property-based --------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(schemes, st.text(PRINTABLE, max_size=12), passwords, hosts, paths)
def test_encoded_password_never_shown(
    scheme: str, user: str, password: str, host: str, path: str
) -> None:
    url = f"{scheme}{quote(user, safe='')}:{quote(password, safe='')}@{host}{path}"
    assert redact(url) == f"{scheme}***@{host}{path}"
    assert redact(f"Get:1 {url} bookworm\n") == f"Get:1 {scheme}***@{host}{path} bookworm\n"
    assert split_userinfo(url) == (f"{scheme}{host}{path}", user, password)
    assert userinfo_problem(url) is None


@settings(max_examples=300, deadline=None)
@given(schemes, raw_passwords, hosts, paths)
def test_raw_password_never_shown(scheme: str, password: str, host: str, path: str) -> None:
    """Unencoded '@', '/', ':', '%', '#': the user-info still ends at the rightmost '@'."""
    url = f"{scheme}{USER}:{password}@{host}{path}"
    for text in (url, f'"apt_mirror": "{url}",', f"failed: {url}: 401"):
        assert redact(text) == text.replace(url, f"{scheme}***@{host}{path}")
    assert clean_url(url) == f"{scheme}{host}{path}"
    assert strip_userinfo(f"deb {url} bookworm main") == f"deb {scheme}{host}{path} bookworm main"
    if set(password) & set("/?#"):
        assert userinfo_problem(url) is not None  # the site model refuses it, asks for %2F ...
    else:
        assert split_userinfo(url)[2] is not None


@settings(max_examples=200, deadline=None)
@given(passwords, hosts)
def test_error_quotes_a_rejected_url_redacted(password: str, host: str) -> None:
    """A URL refused for a space or quote in its password is quoted back without it."""
    url = f"http://{USER}:{password} x'\"@{host}/debian"
    assert shown(url) == f"http://***@{host}/debian"
    assert shown(f"in {url!r}") == f"in 'http://***@{host}/debian'"


def test_no_credentials_no_change() -> None:
    for text in ("http://mirror.example/debian", "see https://h:8080/a?b=c#d", "no url", ""):
        assert redact(text) == text and strip_userinfo(text) == text
    assert split_userinfo("http://h/x") == ("http://h/x", None, None)
    assert split_userinfo("https://tok3n@h/x") == ("https://h/x", "tok3n", None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(passwords)
def test_netrc_round_trip(password: str) -> None:
    """The .netrc entry reads back as written (Python's parser follows the same quoting rules
    as wget's; wget itself is exercised in :func:`test_wget_reads_the_netrc`)."""
    import netrc as netrc_mod
    import tempfile

    url = f"http://{quote(USER)}:{quote(password, safe='')}@mirror.example:8080/debian"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ".netrc"
        path.write_text(netrc_entry(url))
        path.chmod(0o600)
        assert netrc_mod.netrc(str(path)).authenticators("mirror.example") == (
            USER,
            "",
            password,
        )


# -- wget reads what debootstrap will need ------------------------------------------------------


class _Auth(http.server.BaseHTTPRequestHandler):
    expected = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("password", ['p@ss w/"q\\u#te:%', "a/b@c", SECRET])
def test_wget_reads_the_netrc(tmp_path: Path, password: str) -> None:
    wget = shutil.which("wget")
    if wget is None:
        pytest.fail("wget is needed (debootstrap downloads with it); install it")
    _Auth.expected = "Basic " + base64.b64encode(f"{USER}:{password}".encode()).decode()
    server = http.server.HTTPServer(("127.0.0.1", 0), _Auth)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://{USER}:{quote(password, safe='')}@127.0.0.1:{server.server_port}/x"
        with secret_files({".netrc": netrc_entry(url)}, tmp_path) as files:
            home = files[".netrc"].parent
            proc = subprocess.run(
                [wget, "-q", "-O", "-", clean_url(url)],
                capture_output=True,
                text=True,
                env={**os.environ, "HOME": str(home)},
                timeout=30,
            )
        assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    finally:
        server.shutdown()


# -- the installed hpcenv as a process ----------------------------------------------------------


def _site(tmp_path: Path, name: str, **urls: str) -> Path:
    lines = []
    for line in LOCAL_SITE.read_text().splitlines():
        lines.append(line.replace("name: local", f"name: {name}"))
        if line.startswith("build:"):
            lines += [f"  {key}: {value}" for key, value in urls.items()]
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _credsite(tmp_path: Path) -> Path:
    return _site(
        tmp_path,
        "credsite",
        apt_mirror=f"http://{USER}:{SECRET}@mirror.example:8080/debian",
        pip_index_url=f"https://{USER}:{quote(SECRET + '@/x', safe='')}@pypi.example/simple",
        pip_extra_index_urls=f"[https://{SECRET}@extra.example/simple]",
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache"), **extra}


def _run(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HPCENV), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path, **extra),
        timeout=180,
    )


def _nowhere(tmp_path: Path, *texts: str) -> None:
    """The secret (raw or percent-encoded) is in no text and no file under ``tmp_path`` except
    the site files the test wrote."""
    forms = {SECRET, SECRET.lower(), quote(SECRET, safe=""), f"{USER}:"}
    for text in texts:
        assert not any(f in text for f in forms), text
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.name.endswith(".yaml") and path.parent != tmp_path / "bin":
            data = path.read_text(errors="replace")
            assert not any(f in data for f in forms), path


def test_sites_init_extends_json_hides_credentials(tmp_path: Path) -> None:
    site = _credsite(tmp_path)
    proc = _run(tmp_path, "sites", "init", "mine", "--extends", str(site), "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"apt_mirror": "http://***@mirror.example:8080/debian"' in proc.stdout
    assert '"https://***@extra.example/simple"' in proc.stdout
    _nowhere(tmp_path, proc.stdout, proc.stderr, (tmp_path / "mine.yaml").read_text())


@pytest.mark.parametrize(
    "args",
    [
        ("sites", "show", "{site}"),
        ("sites", "show", "{site}", "--json"),
        ("sites", "show", "{site}", "--resolved"),
        ("sites", "show", "{site}", "--resolved", "--json"),
        ("render", "-s", "{site}", "-r", "daal4py", "-f", "docker"),
        ("render", "-s", "{site}", "-r", "daal4py", "-f", "singularity"),
        ("render", "-s", "{site}", "-r", "daal4py", "-f", "lock"),
        ("build", "-s", "{site}", "-r", "daal4py", "--dry-run", "--json"),
    ],
)
def test_every_output_mode_hides_credentials(tmp_path: Path, args: tuple[str, ...]) -> None:
    site = str(_credsite(tmp_path))
    proc = _run(tmp_path, *(a.format(site=site) for a in args))
    assert proc.returncode == 0, proc.stderr
    _nowhere(tmp_path, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("mirror", "words"),
    [
        (f"http://{USER}:{SECRET}/x@mirror.example/debian", "percent-encode"),
        (f"http://{USER}:{SECRET}?x@mirror.example/debian", "percent-encode"),
        (f'"http://{USER}:{SECRET} x@mirror.example/debian"', "http://***@mirror.example"),
        (f'"http://{USER}:{SECRET}\'x@mirror.example/debian"', "http://***@mirror.example"),
    ],
)
def test_refused_url_is_one_line_without_the_secret(
    tmp_path: Path, mirror: str, words: str
) -> None:
    site = _site(tmp_path, "badsite", apt_mirror=mirror)
    for args in (("sites", "show", str(site)), ("sites", "init", "x", "--extends", str(site))):
        proc = _run(tmp_path, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "build.apt_mirror" in lines[0] and words in lines[0]
        _nowhere(tmp_path, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    "ref",
    [
        f"{USER}:{SECRET.lower()}@registry.example/img:1",
        f"https://{USER}:{SECRET.lower()}@registry.example/img:1",
        f"{USER}:{SECRET}@registry.example/img:1",
    ],
)
def test_push_reference_with_credentials_is_refused_unrepeated(tmp_path: Path, ref: str) -> None:
    proc = _run(tmp_path, "build", "-s", "local", "-r", "daal4py", "--push", ref, "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --push: a registry reference holds no scheme")
    _nowhere(tmp_path, proc.stdout, proc.stderr)


def test_push_digest_reference_is_kept() -> None:
    ref = "registry.example/img@sha256:" + "a" * 64
    assert check_ref(ref) == ref
    with pytest.raises(ConfigError):
        check_ref("UPPER/img")


def test_push_failure_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the engine prints on a failed push passes through the redaction."""
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(
        f"#!/bin/sh\necho 'Error: https://{USER}:{SECRET}@registry.example/v2/: denied' >&2\n"
        "exit 125\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    step = DeliveryStep("push", "registry.example/img:1", ("podman", "push", "t", "r"))
    with pytest.raises(EnvironmentProblem) as err:
        deliver(step)
    assert "https://***@registry.example/v2/: denied" in str(err.value)
    assert SECRET not in str(err.value)


# -- a killed build leaves no secret file -------------------------------------------------------

FAKE_PODMAN = """\
#!/bin/sh
# Stands in for podman: images exist; a build says it started, then waits to be killed.
printf '%s\\n' "$*" >> "$FAKE_ARGV"
case "$1" in
  --version|version) echo "podman version 4.9.3" ;;
  build) echo "STEP 1/2: FROM debian"; touch "$FAKE_READY"; exec sleep 60 ;;
esac
exit 0
"""


def _fake(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return folder


def _default_signals() -> None:
    """In the child: SIGHUP, SIGTERM and SIGINT at their defaults, as a terminal or Slurm starts
    a command. A run under ``nohup`` (or a shell's background job) would hand the child an
    ignored SIGHUP (or SIGINT), which hpcenv rightly keeps ignoring."""
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture
def held_build(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``hpcenv build`` of a credentialed site, held open by the fake podman's build."""
    folder = _fake(tmp_path, "podman", FAKE_PODMAN)
    ready = tmp_path / "ready"
    env = _env(
        tmp_path,
        PATH=f"{folder}:{os.environ['PATH']}",
        FAKE_ARGV=str(tmp_path / "argv.txt"),
        FAKE_READY=str(ready),
    )
    site = _credsite(tmp_path)
    proc = subprocess.Popen(
        [str(HPCENV), "build", "-s", str(site), "-r", "daal4py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        preexec_fn=_default_signals,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the fake build never started"
            time.sleep(0.1)
        yield proc, tmp_path / "cache" / "secrets"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]
)
def test_killed_build_removes_its_secret_files(
    held_build: tuple[subprocess.Popen[str], Path], sig: int, code: int
) -> None:
    proc, secrets = held_build
    files = [p for p in secrets.rglob("*") if p.is_file()]
    assert {p.name for p in files} == {"hpcenv-apt-auth", "hpcenv-pip.conf"}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert list(secrets.iterdir()) == []
    _nowhere(secrets.parent.parent, out, err)


def _hold_secrets(root: Path) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from hpcenv.credentials import secret_files
        with secret_files({{"s": {SECRET!r}}}, Path({str(root)!r})) as files:
            print(files["s"], flush=True)
            time.sleep(60)
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_secret_files_removed_on_signal(tmp_path: Path, sig: int) -> None:
    proc = _hold_secrets(tmp_path)
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    assert path.read_text() == SECRET
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode != 0 and not path.parent.exists()


def test_secret_files_of_a_sigkilled_process_are_swept(tmp_path: Path) -> None:
    proc = _hold_secrets(tmp_path)
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    proc.kill()
    proc.communicate(timeout=30)
    assert path.exists()  # SIGKILL runs nothing
    with secret_files({"t": "x"}, tmp_path) as files:
        assert not path.parent.exists() and files["t"].exists()
    assert list(tmp_path.iterdir()) == []


# -- debootstrap: the secret is not on its command line -----------------------------------------

FAKE_DEBOOTSTRAP = """\
#!/bin/sh
# Stands in for debootstrap: records its argv (what ps shows) and the .netrc wget would read.
printf '%s\\n' "$*" > "$FAKE_DEBOOTSTRAP_ARGV"
stat -c '%a' "$HOME" "$HOME/.netrc" > "$FAKE_NETRC.mode"
cp "$HOME/.netrc" "$FAKE_NETRC"
echo "E: Failed getting release file $4/dists/$2/Release"
exit 1
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="hpcenv runs debootstrap only as root")
def test_debootstrap_gets_credentials_from_a_private_netrc(tmp_path: Path) -> None:
    folder = _fake(tmp_path, "debootstrap", FAKE_DEBOOTSTRAP)
    _fake(
        tmp_path, "podman", FAKE_PODMAN.replace("exit 0\n", '[ "$1" = image ] && exit 1\nexit 0\n')
    )
    seen = tmp_path / "seen"
    seen.mkdir()
    proc = _run(
        tmp_path,
        "build",
        "-s",
        str(_credsite(tmp_path)),
        "-r",
        "daal4py",
        PATH=f"{folder}:{os.environ['PATH']}",
        FAKE_DEBOOTSTRAP_ARGV=str(seen / "argv"),
        FAKE_ARGV=str(seen / "podman-argv"),
        FAKE_NETRC=str(seen / "netrc"),
    )
    assert proc.returncode != 0 and "Failed getting release file" in proc.stderr
    argv = (seen / "argv").read_text()
    assert "http://mirror.example:8080/debian" in argv
    assert (seen / "netrc.mode").read_text().split() == ["700", "600"]
    netrc = (seen / "netrc").read_text()
    assert f'login "{USER}"' in netrc and f'password "{SECRET}"' in netrc
    (seen / "netrc").unlink()  # the copy this test made; hpcenv's own is gone:
    assert list((tmp_path / "cache" / "secrets").iterdir()) == []
    _nowhere(tmp_path, proc.stdout, proc.stderr, argv)


def test_another_hosts_secret_folder_is_never_swept(tmp_path: Path) -> None:
    """The cache may sit on a home shared by several login nodes: a folder another host's build
    holds is named by that host and left alone (its pid means nothing here)."""
    theirs = tmp_path / "secrets-999999999@login2.example-abc123"
    theirs.mkdir()
    with secret_files({"t": "x"}, tmp_path) as files:
        assert files["t"].parent.name.startswith(f"secrets-{os.getpid()}@")
    assert theirs.is_dir()
