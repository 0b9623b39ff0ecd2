"""pytest plugin (entry point ``pytest11: hpcenv``): adds hpcenv's hosts to testinfra.

testinfra has no backend hook; its backends are the dict ``testinfra.backend.BACKENDS``
(scheme -> "module.Class"), so registering a scheme is one entry there.
"""

from __future__ import annotations

import pytest

SCHEMES = {"apptainer": "hpcenv.testinfra_apptainer.ApptainerBackend"}


def register() -> None:
    """Make ``apptainer://NAME`` usable by ``--hosts`` and ``testinfra.get_host``."""
    from testinfra.backend import BACKENDS

    for scheme, classpath in SCHEMES.items():
        BACKENDS.setdefault(scheme, classpath)


def pytest_configure(config: pytest.Config) -> None:
    register()
