"""pytest plugin (entry point ``pytest11: hpcenv``): adds hpcenv's hosts to testinfra.

testinfra has no backend hook; its backends are the dict ``testinfra.backend.BACKENDS``
(scheme -> "module.Class"), so registering a scheme is one entry there.

pytest loads this module in every run of every project in an environment where hpcenv is
installed, so it does nothing unless the run asks for one of hpcenv's schemes
(``--hosts=apptainer://NAME``); it does not even import testinfra otherwise. Code that calls
``testinfra.get_host("apptainer://NAME")`` itself calls :func:`register` first.
"""

from __future__ import annotations

import pytest

SCHEMES = {"apptainer": "hpcenv.testinfra_apptainer.ApptainerBackend"}


def register() -> None:
    """Make ``apptainer://NAME`` usable by ``--hosts`` and ``testinfra.get_host``."""
    from testinfra.backend import BACKENDS

    for scheme, classpath in SCHEMES.items():
        BACKENDS.setdefault(scheme, classpath)


def asks_for_us(hosts: str | None) -> bool:
    """Whether a ``--hosts`` value names one of hpcenv's schemes."""
    return any(
        h.strip().split("://", 1)[0] in SCHEMES for h in (hosts or "").split(",") if "://" in h
    )


def pytest_configure(config: pytest.Config) -> None:
    if asks_for_us(config.getoption("hosts", default=None)):
        register()
