"""tests/requirements.py: under CI a missing requirement fails the test, elsewhere it skips, and
either way the message names what is missing and where it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest
import requirements
from requirements import need, need_file, need_module, need_tool

pytest_plugins = ["pytester"]
MISSING_TOOL = "hpcenv-no-such-tool"


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_under_ci_a_missing_requirement_fails(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="CI=true") as failed:
        need("slurmctld", "the job tests run real daemons", "`make host` installs it")
    assert "slurmctld is missing (the job tests run real daemons); `make host` installs it" in str(
        failed.value
    )


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_outside_ci_it_skips_with_the_same_words(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception) as skipped:
        need("slurmctld", "the job tests run real daemons", "`make host` installs it")
    assert str(skipped.value) == (
        "slurmctld is missing (the job tests run real daemons); `make host` installs it"
    )


def test_each_helper_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"{MISSING_TOOL} is missing .*make host"):
        need_tool(MISSING_TOOL, why="w")
    with pytest.raises(pytest.fail.Exception, match="hpcenv_no_such_module .*make venv"):
        need_module("hpcenv_no_such_module", "w")
    with pytest.raises(pytest.fail.Exception, match="the local SIF .*make images"):
        need_file(tmp_path / "x.sif", "the local SIF", "w")
    monkeypatch.setattr(requirements.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match="root is missing .*as root"):
        requirements.need_root("w")


def test_what_is_there_passes() -> None:
    assert need_tool(MISSING_TOOL, "bash", why="w").endswith("/bash")
    assert need_module("json", "w").__name__ == "json"
    assert need_file(Path(__file__), "this file", "w") == Path(__file__)


def test_needs_tool_mark_fails_under_ci_and_skips_elsewhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark, checked by the plugin's hook before the test's fixtures start."""
    pytester.syspathinsert(Path(__file__).parent)
    pytester.makepyfile(
        test_inner=f"""
        import pytest
        from requirements import needs_tool

        @pytest.fixture
        def expensive():
            raise AssertionError("fixtures start only once the tools are there")

        @needs_tool("{MISSING_TOOL}", why="it checks something")
        def test_needs_missing(expensive):
            pass

        @needs_tool("{MISSING_TOOL}", "bash", why="any one will do")
        def test_needs_one_of():
            pass
        """
    )
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-rA", "-p", "requirements", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*CI=true*{MISSING_TOOL} is missing (it checks something)*"])
    monkeypatch.delenv("CI")
    result = pytester.runpytest_inprocess("-rA", "-p", "requirements", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"*{MISSING_TOOL} is missing (it checks something)*make host*"])
