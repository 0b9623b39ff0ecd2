"""Hostile input: every field of a site file, a recipe, ``--set`` and a job, with every kind of
value that has broken generated files before (newlines, control characters, shell and ini
syntax, options in disguise, wrong types, huge numbers), plus hostile YAML files.

Each input ends one of two ways, and nothing else is allowed:

- a clear error: a ``ConfigError``/``ConflictError`` whose every line is a whole message (for
  files: ``file:line: ...``) and that echoes no raw control character, never a traceback;
- accepted and valid: the Dockerfile, Singularity.def, pip.conf and job.sh rendered from it have
  the same shape as with the benign value (same instructions, sections, keys, line counts), no
  line that runs the payload, and every occurrence of a shell payload sits inside single quotes.

A representative set also runs the installed ``hpcenv`` as a process (exit 2, ``error:`` lines,
no Traceback). The tally (inputs tried, clear errors, accepted-valid) is printed at the end and
written to ``$HPCENV_HOSTILE_TALLY`` when set.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from hpcenv.errors import ConfigError, HpcenvError
from hpcenv.jobs.render import render_job
from hpcenv.jobs.spec import JobSpec
from hpcenv.paths import recipes_dir, site_configs_dir
from hpcenv.pins import parse_overrides
from hpcenv.recipe import COMPONENTS, load_recipe
from hpcenv.render import render
from hpcenv.resolver import resolve
from hpcenv.safe import has_control, validation_message
from hpcenv.site import load_site

TALLY: Counter[str] = Counter()
MARK = "/pwned"

PAYLOADS: dict[str, str] = {
    "newline-run": f"x\nRUN touch {MARK}",
    "crlf": f"x\r\nRUN touch {MARK}",
    "def-section": f"x\n%setup\n    touch {MARK}",
    "ini-key": "x\ntrusted-host = *",
    "trailing-newline": "ok\n",
    "nul": "x\x00y",
    "escape": "x\x1b[31m",
    "tab": "a\tb",
    "u2028": f"x\u2028touch {MARK}",
    "cmd-subst": f"$(touch {MARK})",
    "backtick": f"`touch {MARK}`",
    "semicolon": f"x; touch {MARK}",
    "single-quote": f"x' ; touch {MARK}; '",
    "double-quote": f'x" ; touch {MARK}; "',
    "option": "--privileged",
    "empty": "",
    "space": "a b",
    "glob": "*",
    "long": "a" * 5000,
}
NUMBERS: dict[str, Any] = {
    "zero": 0,
    "negative": -1,
    "huge": 10**9,
    "exp-string": "1e9",
    "float": 1.5,
    "bool": True,
    "string": "2",
    "null": None,
}
SHELL_META = re.compile(r"[$`;'\"|&<>()\\]")


# -- outcome checks --------------------------------------------------------------------------
@dataclass
class Outputs:
    files: dict[str, str]

    def shape(self) -> dict[str, Any]:
        df, sd = self.files["Dockerfile"], self.files["Singularity.def"]
        return {
            "docker": [ln.split(" ", 1)[0] for ln in df.splitlines() if re.match(r"[A-Z]+ ", ln)],
            "def": [ln for ln in sd.splitlines() if ln.startswith(("%", "Bootstrap:", "From:"))],
            "pip": [ln.split(" =", 1)[0] for ln in self.files["pip.conf"].splitlines()],
            "lines": {k: v.count("\n") for k, v in self.files.items()},
        }


def render_all(site: Any, recipe: str = "horovod-cpu", sets: list[str] | None = None) -> Outputs:
    from hpcenv.render import pip_conf

    lock = resolve(site, load_recipe(recipe), parse_overrides(sets or []))
    r = render(lock, site)
    job = JobSpec(name="hostile", command=["python3", "/opt/hpcenv/checks/allreduce_mpi.py"])
    script = render_job(site, job, f"localhost/hpcenv/{lock.recipe}:{site.name}")
    return Outputs(
        {
            "Dockerfile": r.dockerfile,
            "Singularity.def": r.singularity,
            "pip.conf": pip_conf(site),
            "job.sh": script,
        }
    )


def quote_state(line: str) -> list[str]:
    """Per character of a shell line: 'none', 'single', 'double' or 'comment'."""
    states, state, i = [], "none", 0
    while i < len(line):
        c = line[i]
        if state == "comment":
            states.append(state)
        elif state == "single":
            states.append(state)
            if c == "'":
                state = "none"
        elif state == "double":
            states.append(state)
            if c == "\\" and i + 1 < len(line):
                states.append(state)
                i += 1
            elif c == '"':
                state = "none"
        else:
            if c == "#" and (i == 0 or line[i - 1] in " \t"):
                state = "comment"
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\" and i + 1 < len(line):
                states.append("none")
                i += 1
            states.append(state)  # an opening quote belongs to its quotes
        i += 1
    return states


def injection_problems(out: Outputs, payload: str) -> list[str]:
    problems = []
    for name, text in out.files.items():
        for ln in text.splitlines():
            s = ln.strip()
            if s.startswith((f"touch {MARK}", "RUN touch", "%setup", "trusted-host")):
                problems.append(f"{name}: payload line {s!r}")
        if not SHELL_META.search(payload) or payload not in text:
            continue
        for ln in text.splitlines():
            if payload not in ln or ln.lstrip().startswith("#"):
                continue
            if name == "Dockerfile" and re.match(r"\s*(ENV|LABEL|\S+=)", ln):
                continue  # JSON strings, not a shell
            if name == "Singularity.def" and re.match(
                r"\s+io\.hpcenv\.|\s+org\.opencontainers", ln
            ):
                continue  # %labels: key value, not run
            states = quote_state(ln)
            for m in re.finditer(re.escape(payload), ln):
                inside = set(states[m.start() : m.end()])
                if inside - {"single", "comment"} and not (
                    inside == {"double"} and not re.search(r"[$`\"\\]", payload)
                ):
                    problems.append(f"{name}: unquoted payload in {ln.strip()[:120]!r}")
    return problems


def check_error(err: Exception, file: Path | None = None) -> list[str]:
    text = str(err)
    problems = []
    if not isinstance(err, HpcenvError):
        problems.append(f"not a clear error: {type(err).__name__}: {text[:200]}")
    for line in text.splitlines() or [""]:
        if not line.strip():
            problems.append("empty error line")
        if has_control(line):
            problems.append(f"raw control character echoed: {line[:120]!r}")
        if file is not None and not line.startswith(f"{file}:"):
            problems.append(f"error line without file:line: {line[:160]!r}")
    return problems


def attempt(
    make: Callable[..., Outputs],
    baseline: Outputs | None,
    payload: str,
    file: Path | None = None,
    load: Callable[[], Any] | None = None,
) -> tuple[str, list[str]]:
    """``load()`` (if given) then ``make(loaded)``. An error while loading must name the file
    and line; a later one (resolving, rendering) must be clear lines of its own."""
    stage = "load"
    try:
        if load is not None:
            loaded = load()
            stage = "use"
            out = make(loaded)
        else:
            stage = "use"
            out = make()
    except (HpcenvError, ValidationError) as err:
        return "error", check_error(err, file if stage == "load" else None)
    except Exception as err:  # a traceback in the CLI: always a finding
        return "crash", [f"{type(err).__name__} at {stage}: {str(err)[:300]}"]
    problems = injection_problems(out, payload)
    script = out.files.get("job.sh", "")
    if script:  # bash itself parses the job script: unbalanced quoting would show here
        check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        if check.returncode:
            problems.append(f"job.sh does not parse: {check.stderr.strip()[:200]}")
    if baseline is not None and out.shape() != baseline.shape():
        problems.append(f"output shape changed: {diff_shape(baseline.shape(), out.shape())}")
    return "accepted", problems


def diff_shape(a: dict[str, Any], b: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {a[k]} -> {b[k]}" for k in a if a[k] != b[k])[:300]


def record(kind: str, label: str, outcome: str, problems: list[str], found: list[str]) -> None:
    TALLY["tried"] += 1
    TALLY[f"{kind}:tried"] += 1
    if problems or outcome == "crash":
        TALLY["findings"] += 1
        found.append(f"{kind} {label}: {outcome}: {'; '.join(problems)}")
    elif outcome == "error":
        TALLY["clear-error"] += 1
        TALLY[f"{kind}:clear-error"] += 1
    else:
        TALLY["accepted-valid"] += 1
        TALLY[f"{kind}:accepted-valid"] += 1


# -- a site with every field filled with a benign value ----------------------------------------
def full_site() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((site_configs_dir() / "local.yaml").read_text())
    data["node"] |= {
        "gpu_model": "none",
        "nic_model": "onboard",
        "reserved_cores": [],
        "ranks_per_node": 2,
    }
    data["mpi"] |= {"env": {"OMPI_MCA_x": "1"}}
    data["scheduler"] |= {
        "account": "chem101",
        "queue": "batch",
        "qos": "normal",
        "extra_directives": ["--exclusive"],
        "login_host": "login1",
        "launcher_flags": ["--cpu-bind=cores"],
    }
    data["runtime"] |= {"binds": ["/data"], "flags": ["--log-level=warn"]}
    data["node_local"] |= {"size_gb": 100, "request": ["--tmp=100G"]}
    data["modules"] = ["gcc/12"]
    data["variables"] = {"PROJWORK": {"default": "/proj", "source": "site docs, read 2026-11-22"}}
    data["build"] |= {
        "apt_mirror": "http://deb.example.org/debian",
        "pip_index_url": "https://pypi.example.org/simple",
        "pip_extra_index_urls": ["https://extra.example.org/simple"],
    }
    data["tuning"] |= {"HOROVOD_FUSION_THRESHOLD": "67108864"}
    data["ssh"] = {
        "host": "login.example.org",
        "user": "me",
        "port": 22,
        "key_file": "/home/me/.ssh/id_ed25519",
        "known_hosts": "/home/me/.ssh/kh",
    }
    return data


def leaves(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from leaves(v, (*path, i))
    else:
        yield path, data


def dict_keys(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of mappings whose keys are user data (env names, pins, variables)."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k in ("env", "tuning", "defaults", "variables", "verified", "assumed") and v:
                yield (*path, k)
            yield from dict_keys(v, (*path, k))


def set_at(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out


def rename_key(data: Any, path: tuple[Any, ...], new: str) -> Any:
    out = copy.deepcopy(data)
    cur = out
    for p in path:
        cur = cur[p]
    first = next(iter(cur))
    cur[new] = cur.pop(first)
    return out


def write_yaml(tmp: Path, name: str, data: Any) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=False, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def benign(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Outputs]:
    data = full_site()
    path = write_yaml(tmp_path_factory.mktemp("benign"), "full", data)
    return data, render_all(load_site(str(path)))


# -- the suites ------------------------------------------------------------------------------
def test_site_fields(tmp_path: Path, benign: tuple[dict[str, Any], Outputs]) -> None:
    data, base = benign
    found: list[str] = []
    cases = 0
    for path, value in leaves(data):
        dotted = ".".join(str(p) for p in path)
        values = NUMBERS if isinstance(value, int) and not isinstance(value, bool) else PAYLOADS
        if isinstance(value, bool):
            values = {"string": "yes please", "number": 2}
        for label, payload in values.items():
            cases += 1
            f = write_yaml(tmp_path, f"s{cases}", set_at(data, path, payload))
            text = payload if isinstance(payload, str) else ""
            outcome, problems = attempt(render_all, base, text, f, lambda f=f: load_site(str(f)))
            record("site-field", f"{dotted}={label}", outcome, problems, found)
    for path in dict_keys(data):
        dotted = ".".join(str(p) for p in path)
        for label, payload in PAYLOADS.items():
            if not payload:
                continue
            cases += 1
            f = write_yaml(tmp_path, f"k{cases}", rename_key(data, path, payload))
            outcome, problems = attempt(render_all, base, payload, f, lambda f=f: load_site(str(f)))
            record("site-key", f"{dotted}.<key>={label}", outcome, problems, found)
    assert not found, "\n".join(found[:40])
    assert cases > 500


KNOWLEDGE_CASES = {
    "mpi.spec": [
        "mvapich3@3.0",
        "foompi@1",
        "Open MPI",
        "openmpi@4.1.99",
        "spectrum-mpi@10.4",
        "openmpi@4.1.4 ",
        "openmpi@not.a.version",
    ],
    "mpi.pmi": ["pmix@x", "slurm-pmi@2", "pmix@4\n"],
    "scheduler.launcher": ["jsrun", "aprun"],
    "scheduler.walltime": ["soon", "00:30", "25:00", "-5", "0", "1-25", "00:61:00", "99999999"],
    "gpu.vendor": ["nvidia", "amd", "ati"],
    "gpu.driver": ["abc", "550.1; rm"],
    "ssh.port": [0, 65536, -22, "22; rm"],
    "node.cores_per_socket": [10**9, "1e9", 0],
    "node.reserved_cores": [[0, 1], [99]],
    "build.base_image": [
        "--privileged",
        "UPPER/Case:tag",
        f"debian:12\nRUN touch {MARK}",
        "debian:bookworm extra",
        "localhost/x:y@sha256:abc",
    ],
    "build.apt_mirror": [
        "ftp://mirror",
        "http://m/debian\n%setup",
        "http://m/ x",
        "http://m/'$(id)'",
        "javascript:alert(1)",
    ],
    "build.pip_index_url": ["https://x/simple\ntrusted-host = *", "https://x/ simple", "x"],
    "build.jobs": [0, 5000, "2"],
    "defaults.torch": ["not-a-version", "2.99.0", "2.2.0\nRUN x", "2.99.0!"],
    "defaults.pytorch": ["2.2.0"],
    "name": ["Local", "local site", "-local", "local\n"],
    "recipes": [["horovod-cpu", "../etc/passwd"]],
}


def test_site_knowledge(tmp_path: Path, benign: tuple[dict[str, Any], Outputs]) -> None:
    """Names checked against the knowledge base; values that are not what they claim to be."""
    data, _ = benign
    found: list[str] = []
    accepted = []
    for dotted, values in KNOWLEDGE_CASES.items():
        path = tuple(int(p) if p.isdigit() else p for p in dotted.split("."))
        for i, value in enumerate(values):
            mutated = set_at(data, path, value)
            if dotted == "gpu.vendor":
                mutated["node"]["gpus"] = 4
                mutated["gpu"].pop("driver", None)
            f = write_yaml(tmp_path, f"kn{len(found)}-{i}-{dotted}", mutated)
            text = value if isinstance(value, str) else ""
            outcome, problems = attempt(render_all, None, text, f, lambda f=f: load_site(str(f)))
            if outcome == "accepted":
                accepted.append(f"{dotted}={value!r}")
            record("site-knowledge", f"{dotted}={value!r}", outcome, problems, found)
    assert not found, "\n".join(found)
    # the only accepted ones: an explicitly allowed unknown version
    assert accepted == ["defaults.torch='2.99.0!'"], accepted


def test_site_errors_name_file_line_and_field(tmp_path: Path) -> None:
    data = full_site()
    cases = {
        ("mpi", "spec"): ("mvapich3@3.0", "field 'mpi.spec': unknown MPI family 'mvapich3'"),
        ("scheduler", "launcher"): ("jsrun", "launcher jsrun does not fit scheduler slurm"),
        ("scheduler", "walltime"): ("soon", "walltime 'soon' is not a time"),
        ("ssh", "port"): (70000, "field 'ssh.port'"),
        ("node", "cores_per_socket"): (10**9, "field 'node.cores_per_socket'"),
        ("build", "base_image"): ("x\nRUN touch /pwned", "newline or control character"),
    }
    text = yaml.safe_dump(data, sort_keys=False)
    for path, (value, message) in cases.items():
        f = write_yaml(tmp_path, path[-1], set_at(data, path, value))
        with pytest.raises(HpcenvError) as err:
            load_site(str(f))
        (line,) = str(err.value).splitlines()
        assert message in line, line
        want = 1 + text.splitlines().index(f"{path[0]}:") if path[0] != "ssh" else None
        assert re.match(rf"{re.escape(str(f))}:(\d+): ", line), line
        if want:
            assert int(line.split(":")[1]) > want  # the line of the field, inside its section
    gpu = set_at(set_at(data, ("gpu", "vendor"), "nvidia"), ("node", "gpus"), 4)
    f = write_yaml(tmp_path, "gpu", gpu)
    with pytest.raises(HpcenvError, match="an NVIDIA site needs 'driver'"):
        load_site(str(f))


RAW_FILES: dict[str, bytes] = {
    "alias-bomb": (
        b'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
        b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        b"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
        b"i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
    ),
    "anchor-merge": b"base: &b {sockets: 1}\nnode:\n  <<: *b\n  cores_per_socket: 2\n",
    "duplicate-key": b"name: local\nname: evil\n",
    "duplicate-nested": b"build:\n  base_image: debian\n  base_image: evil\n",
    "not-utf8": b"name: caf\xe9\n",
    "utf16-bom": "name: x\n".encode("utf-16"),
    "huge": b"description: " + b"a" * (2 << 20) + b"\n",
    "top-list": b"- a\n- b\n",
    "empty": b"",
    "python-tag": b"name: !!python/object/apply:os.system ['touch /pwned']\n",
    "deep": b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "tab-indent": b"name: x\nnode:\n\tsockets: 1\n",
    "complex-key": b"? [a, b]\n: 1\n",
    "int-key": b"1: 2\nname: x\n",
    "binary": bytes(range(256)),
    "nul-in-value": b'name: "lo\\0cal"\n',
    "escaped-newline": b'name: "local\\nRUN touch /pwned"\n',
    "unicode-ls": b'description: "x\\u2028touch /pwned"\n',
}


@pytest.mark.parametrize("kind", ["site", "recipe"])
def test_hostile_yaml_files(tmp_path: Path, kind: str) -> None:
    found: list[str] = []
    for label, raw in RAW_FILES.items():
        f = tmp_path / f"{label}.yaml"
        f.write_bytes(raw)
        load = (
            (lambda f=f: load_site(str(f))) if kind == "site" else (lambda f=f: load_recipe(str(f)))
        )
        try:
            load()
        except HpcenvError as err:
            problems = check_error(err, f)
            record(f"{kind}-file", label, "error", problems, found)
            continue
        except Exception as err:
            record(f"{kind}-file", label, "crash", [f"{type(err).__name__}: {err}"[:200]], found)
            continue
        record(f"{kind}-file", label, "accepted", ["hostile file accepted"], found)
    assert not found, "\n".join(found)


EXTENDS_FILES: dict[str, str] = {
    "newline-in-override": 'extends: local\nname: child\nbuild:\n  base_image: "debian\\nRUN touch /pwned"\n',
    "launcher-override": "extends: local\nname: child\nscheduler:\n  launcher: jsrun\n",
    "self-loop": "extends: self.yaml\nname: loop\n",
    "alias": "extends: local\nname: child\nnode: &n {sockets: 1}\nx: *n\n",
    "newline-in-extends": 'extends: "local\\nx"\nname: child\n',
    "extends-a-list": "extends: [local]\nname: child\n",
    "extends-missing": "extends: no-such-site\nname: child\n",
    "extends-non-yaml": "extends: /etc/hostname\nname: child\n",
    "unknown-field": "extends: local\nname: child\nbogus: 1\n",
}


def test_site_files_that_extend(tmp_path: Path) -> None:
    """``extends:`` files get every check a plain file gets, with the file that set the value."""
    found: list[str] = []
    for label, text in EXTENDS_FILES.items():
        f = tmp_path / ("self.yaml" if label == "self-loop" else f"{label}.yaml")
        f.write_text(text, encoding="utf-8")
        try:
            load_site(str(f))
        except HpcenvError as err:
            problems = check_error(err)
            if not all(re.match(r"\S+:\d+: ", ln) for ln in str(err).splitlines()):
                problems.append(f"no file:line in {str(err)[:160]!r}")
            record("site-extends", label, "error", problems, found)
            continue
        except Exception as err:
            record("site-extends", label, "crash", [f"{type(err).__name__}: {err}"[:200]], found)
            continue
        record("site-extends", label, "accepted", ["hostile file accepted"], found)
    assert not found, "\n".join(found)


def test_recipe_fields(tmp_path: Path) -> None:
    found: list[str] = []
    site = load_site("local")
    base_data = yaml.safe_load((recipes_dir() / "horovod-cpu.yaml").read_text())
    base = render_all(site)
    mutations: list[tuple[str, Any]] = []
    for path, _ in leaves(base_data):
        for label, payload in PAYLOADS.items():
            mutations.append(
                (f"{'.'.join(map(str, path))}={label}", set_at(base_data, path, payload))
            )
    for label, payload in PAYLOADS.items():
        if payload:
            mutations.append(
                (f"components.<key>={label}", rename_key(base_data, ("components",), payload))
            )
    for label, value in {
        "accelerator": ["cuda", 1],
        "components": [[], "torch"],
        "horovod_operations": ["mpi", ["rdma"]],
    }.items():
        mutations += [(f"{label}={v!r}", set_at(base_data, (label,), v)) for v in value]
    for i, (label, data) in enumerate(mutations):
        f = write_yaml(tmp_path, f"r{i}", data)

        def make(recipe: Any) -> Outputs:
            lock = resolve(site, recipe)
            r = render(lock, site)
            from hpcenv.render import pip_conf

            job = JobSpec(name="hostile", command=["python3", "x.py"], recipe=recipe.name)
            return Outputs(
                {
                    "Dockerfile": r.dockerfile,
                    "Singularity.def": r.singularity,
                    "pip.conf": pip_conf(site),
                    "job.sh": render_job(site, job, f"localhost/hpcenv/{recipe.name}:local"),
                }
            )

        payload = label.split("=", 1)[1]
        text = PAYLOADS.get(payload, "")
        shape_base = base if label.startswith(("description", "name")) else None
        outcome, problems = attempt(make, shape_base, text, f, lambda f=f: load_recipe(str(f)))
        record("recipe", label, outcome, problems, found)
    assert not found, "\n".join(found[:40])


SET_VALUES = [
    *PAYLOADS.values(),
    "not-a-version",
    "2.99.0",
    "abc",
    "source",
    "Open MPI",
    "1.0.0rc1",
    "2.2.0 ",
    " 2.2.0",
    "2.2.0!!",
    "!",
    "=2.2.0",
    "2.2.0==",
    "v2.2.0",
    "2.2.*",
    ">=2.1",
]


def test_set_values() -> None:
    """Every component x every hostile value through --set, on the local site."""
    found: list[str] = []
    site = load_site("local")
    base = render_all(site)
    for name in COMPONENTS:
        for value in SET_VALUES:
            outcome, problems = attempt(
                lambda n=name, v=value: render_all(site, sets=[f"{n}={v}"]), None, value
            )
            if outcome == "accepted" and value.strip() not in ("2.2.0",):
                problems.append("hostile --set value accepted")
            record("--set", f"{name}={value!r}", outcome, problems, found)
    for pair in ["torch", "=2.2.0", "torch==2.2.0", "TORCH=2.2.0", "tor ch=2.2.0", f"{MARK}=1"]:
        outcome, problems = attempt(lambda p=pair: render_all(site, sets=[p]), None, pair)
        record("--set", f"{pair!r}", outcome, problems, found)
    assert base.files["Dockerfile"]
    assert not found, "\n".join(found[:40])


ISSUE_SETS = {
    "torch=not-a-version": "not a version",
    "torch=2.99.0": "not a known torch release",
    "cuda=abc": "not a version",
    "pmix=abc": "not a version",
    "mpi=source": "unknown MPI family",
    "mpi=Open MPI": "not an MPI spec",
    "mpi=spectrum-mpi@10.4": "spectrum-mpi cannot be installed in an image",
    "torch=2.2.0\nRUN touch /pwned": "newline or control character",
}


@pytest.mark.parametrize(("pair", "message"), ISSUE_SETS.items())
def test_issue_set_values_are_one_line_errors(pair: str, message: str) -> None:
    with pytest.raises(HpcenvError) as err:
        render_all(load_site("local"), sets=[pair])
    (line,) = str(err.value).splitlines()
    assert message in line and not has_control(line)


JOB_FIELDS: dict[str, list[Any]] = {
    "name": list(PAYLOADS.values()),
    "image": [
        *PAYLOADS.values(),
        "--privileged",
        "-v/:/host",
        "localhost/x:y --privileged",
        "x.sif; id",
        "/scratch/$USER/x.sif",
    ],
    "workdir": list(PAYLOADS.values()),
    "walltime": [*PAYLOADS.values(), "soon", "00:30", "1-25"],
    "account": list(PAYLOADS.values()),
    "queue": list(PAYLOADS.values()),
    "qos": list(PAYLOADS.values()),
    "constraint": list(PAYLOADS.values()),
    "recipe": list(PAYLOADS.values()),
    "nodes": list(NUMBERS.values()),
    "ranks_per_node": list(NUMBERS.values()),
}


def test_job_options() -> None:
    """Every job field (the options of hpcenv submit) with every hostile value."""
    site = load_site("local")
    image = "localhost/hpcenv/horovod-cpu:local"
    base_job = {"name": "hostile", "command": ["python3", "x.py"]}
    found: list[str] = []
    base = render_job(site, JobSpec(**base_job), image)  # type: ignore[arg-type]

    def job_outputs(fields: dict[str, Any]) -> Outputs:
        try:  # as hpcenv submit does: one line per problem
            job = JobSpec(**{**base_job, **fields})
        except ValidationError as err:
            raise ConfigError(validation_message(err, "invalid job")) from None
        text = render_job(site, job, job.image or image)
        return Outputs({"Dockerfile": "", "Singularity.def": "", "pip.conf": "", "job.sh": text})

    for field, values in JOB_FIELDS.items():
        for value in values:
            text = value if isinstance(value, str) else ""
            outcome, problems = attempt(lambda f=field, v=value: job_outputs({f: v}), None, text)
            record("job", f"{field}={value!r}"[:60], outcome, problems, found)
    for label, payload in PAYLOADS.items():
        for fields in (
            {"command": ["python3", payload]},
            {"env": {"X": payload}},
            {"env": {payload or "x y": "1"}},
            {"env": {"CONTAINERS_CONF": payload}},
            {"stage_in": {"source": payload}},
            {"stage_out": {"dest": payload}},
        ):
            outcome, problems = attempt(lambda f=fields: job_outputs(f), None, payload)
            record("job", f"{next(iter(fields))}={label}", outcome, problems, found)
    assert "python3" in base
    assert not found, "\n".join(found[:40])


def test_containers_conf_from_the_user_is_quoted() -> None:
    site = load_site("local")
    job = JobSpec(name="x", command=["true"], env={"CONTAINERS_CONF": f"$(touch {MARK})"})
    script = render_job(site, job, "localhost/hpcenv/horovod-cpu:local")
    line = next(ln for ln in script.splitlines() if ln.startswith("export CONTAINERS_CONF="))
    assert line == f"export CONTAINERS_CONF='$(touch {MARK})'"
    default = render_job(site, JobSpec(name="x", command=["true"]), "localhost/x:y")
    assert 'export CONTAINERS_CONF="${CONTAINERS_CONF:-' in default


def test_the_checks_can_fail() -> None:
    """The detectors above find what they look for (else 'accepted-valid' would mean nothing)."""
    payload = f"$(touch {MARK})"
    empty = {"Dockerfile": "", "Singularity.def": "", "pip.conf": ""}

    def problems(script: str) -> list[str]:
        return injection_problems(Outputs({**empty, "job.sh": script}), payload)

    assert problems(f"export X={payload}\n")
    assert problems(f'export X="{payload}"\n')
    assert problems(f"RUN touch {MARK}\n")
    bad = Outputs({**empty, "job.sh": "echo 'unbalanced\n"})
    assert attempt(lambda: bad, None, "")[1]  # bash -n refuses it
    assert not problems(f"export X='{payload}'\n")
    assert not problems(f"# note: {payload}\n")
    assert quote_state("a 'b' \"c\" # d") == [
        "none",
        "none",
        "single",
        "single",
        "single",
        "none",
        "double",
        "double",
        "double",
        "none",
        "comment",
        "comment",
        "comment",
    ]
    base = Outputs({**empty, "job.sh": "a\n"})
    bigger = Outputs({**empty, "job.sh": "a\nb\n"})
    assert base.shape() != bigger.shape()


@pytest.mark.parametrize("value", ["ok\n", "ok\r", "\nok", "o\nk"])
def test_shell_patterns_refuse_a_trailing_newline(value: str) -> None:
    """``re.match(r"^...$")`` accepts "ok\\n"; every job-script check matches the whole string."""
    from hpcenv.jobs import shell

    for check in (
        lambda: shell.word(value, "w"),
        lambda: shell.Expand(f"/x/{value}"),
        lambda: shell.env_name(value.replace("ok", "OK")),
        lambda: shell.job_name(value),
        lambda: shell.job_id(value.replace("ok", "12")),
    ):
        with pytest.raises(ConfigError):
            check()
        TALLY["tried"] += 1
        TALLY["clear-error"] += 1
        TALLY["shell-pattern:tried"] += 1


def test_python_api_refuses_what_files_refuse() -> None:
    """Site/Recipe/JobSpec built in Python get the same checks as files and options."""
    from hpcenv.recipe import Recipe
    from hpcenv.site import Site

    data = full_site()
    bad = [
        set_at(data, ("build", "base_image"), f"debian\nRUN touch {MARK}"),
        set_at(data, ("mpi", "spec"), "openmpi@4.1.4\n"),
        set_at(data, ("scheduler", "launcher"), "jsrun"),
        set_at(data, ("node", "cores_per_socket"), 10**9),
        set_at(data, ("description",), "x\x00"),
    ]
    for item in bad:
        with pytest.raises(ValidationError):
            Site.model_validate(item)
    with pytest.raises(ValidationError):
        Recipe(name="x\nRUN touch /pwned", description="d", components={})
    with pytest.raises(ValidationError, match="must not start with '-'"):
        JobSpec(name="x", command=["true"], image="--privileged")
    for _ in range(len(bad) + 2):
        TALLY["tried"] += 1
        TALLY["clear-error"] += 1
        TALLY["python-api:tried"] += 1


# -- the installed hpcenv, as a process ---------------------------------------------------------
def hpcenv_bin() -> str:
    exe = Path(sys.executable).with_name("hpcenv")
    return str(exe) if exe.exists() else "hpcenv"


def write_site(tmp: Path, name: str, path: tuple[Any, ...], value: Any) -> str:
    return str(write_yaml(tmp, name, set_at(full_site(), path, value)))


def process_cases(tmp: Path) -> dict[str, list[str]]:
    bomb = tmp / "bomb.yaml"
    bomb.write_bytes(RAW_FILES["alias-bomb"])
    dup = tmp / "dup.yaml"
    dup.write_bytes((site_configs_dir() / "local.yaml").read_bytes() + b"name: evil\n")
    return {
        "set-newline": [
            "resolve",
            "-s",
            "local",
            "-r",
            "horovod-cpu",
            "--set",
            f"torch=2.2.0\nRUN touch {MARK}",
        ],
        "set-not-a-version": [
            "resolve",
            "-s",
            "local",
            "-r",
            "horovod-cpu",
            "--set",
            "torch=not-a-version",
        ],
        "set-unknown-release": [
            "render",
            "-s",
            "local",
            "-r",
            "horovod-cpu",
            "--set",
            "torch=2.99.0",
            "-o",
            str(tmp / "o1"),
        ],
        "set-mpi-words": ["resolve", "-s", "local", "-r", "horovod-cpu", "--set", "mpi=Open MPI"],
        "set-spectrum": [
            "resolve",
            "-s",
            "local",
            "-r",
            "horovod-cpu",
            "--set",
            "mpi=spectrum-mpi@10.4",
        ],
        "set-cuda-abc": ["resolve", "-s", "perlmutter", "-r", "horovod-gpu", "--set", "cuda=abc"],
        "alias-bomb": ["sites", "validate", str(bomb)],
        "duplicate-key": ["sites", "validate", str(dup)],
        "base-image-newline": [
            "render",
            "-s",
            write_site(tmp, "bi", ("build", "base_image"), f"debian\nRUN touch {MARK}"),
            "-r",
            "horovod-cpu",
            "-o",
            str(tmp / "o2"),
        ],
        "mirror-setup": [
            "build",
            "-s",
            write_site(tmp, "am", ("build", "apt_mirror"), "http://m/\n%setup\n touch /pwned"),
            "--dry-run",
        ],
        "mpi-spec-newline": [
            "resolve",
            "-s",
            write_site(tmp, "ms", ("mpi", "spec"), "openmpi@4.1.4\ntouch /pwned"),
            "-r",
            "horovod-cpu",
        ],
        "launcher-jsrun": [
            "sites",
            "validate",
            write_site(tmp, "js", ("scheduler", "launcher"), "jsrun"),
        ],
        "cores-1e9": [
            "sites",
            "validate",
            write_site(tmp, "co", ("node", "cores_per_socket"), "1e9"),
        ],
        "image-option": [
            "submit",
            "-s",
            "local",
            "--dry-run",
            "--image=--privileged",
            "--",
            "true",
        ],
        "walltime-soon": [
            "submit",
            "-s",
            "local",
            "--dry-run",
            "--no-container",
            "--walltime",
            "soon",
            "--",
            "true",
        ],
        "job-name-newline": [
            "submit",
            "-s",
            "local",
            "--dry-run",
            "--no-container",
            "--name",
            "a\nb",
            "--",
            "true",
        ],
        "recipe-path-newline": ["resolve", "-s", "local", "-r", f"x\n{MARK}"],
    }


def test_installed_hpcenv_gives_one_line_errors(tmp_path: Path) -> None:
    env = {**os.environ, "HPCENV_CACHE": str(tmp_path / "cache"), "NO_COLOR": "1"}
    found: list[str] = []
    for label, argv in process_cases(tmp_path).items():
        proc = subprocess.run(
            [hpcenv_bin(), *argv], capture_output=True, text=True, env=env, timeout=120
        )
        problems = []
        if proc.returncode != 2:
            problems.append(f"exit {proc.returncode}")
        if "Traceback" in proc.stderr or "Traceback" in proc.stdout:
            problems.append("traceback")
        lines = proc.stderr.splitlines()
        if not lines or not all(ln.startswith("error: ") for ln in lines):
            problems.append(f"stderr {proc.stderr[:300]!r}")
        record("process", label, "error", problems, found)
    assert not found, "\n".join(found)


@pytest.fixture(scope="module", autouse=True)
def tally_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the last test of this module that ran, in whatever order or selection: print the
    tally of what ran and keep it in ``$HPCENV_HOSTILE_TALLY``."""
    yield
    if not TALLY["tried"]:
        return
    tally = {k: TALLY[k] for k in sorted(TALLY)}
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\nhostile-input tally:", json.dumps(tally))
    out = os.environ.get("HPCENV_HOSTILE_TALLY")
    if out:
        Path(out).write_text(json.dumps(tally, indent=2) + "\n", encoding="utf-8")


def test_tally_adds_up() -> None:
    """Whatever ran before this test (any order, any selection, none alone): no finding, and
    every input tried ended as a clear error or accepted-valid."""
    assert TALLY["findings"] == 0
    assert TALLY["tried"] == TALLY["clear-error"] + TALLY["accepted-valid"]
