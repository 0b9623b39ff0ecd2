"""testinfra backend for ``apptainer://NAME``: each command is ``apptainer exec SIF sh -c CMD``.

NAME is an image name, not a path (testinfra keeps only the URL's host part); it is looked up
in ``$HPCENV_APPTAINER_IMAGES`` / the registry (:func:`hpcenv.apptainer.resolve_image`).
Binds come from :func:`hpcenv.apptainer.default_binds`. Without a host apptainer, commands go
through hpcenv's helper container.
"""

from __future__ import annotations

import subprocess
from typing import Any

from testinfra.backend import base

from hpcenv.apptainer import Apptainer, default_binds, resolve_image
from hpcenv.engines import engine_env


class ApptainerBackend(base.BaseBackend):
    NAME = "apptainer"

    def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.image = name
        self.apptainer = Apptainer()
        super().__init__(name, *args, **kwargs)

    def argv(self, command: str) -> list[str]:
        """The full argv that runs the shell ``command`` in the image."""
        sif = resolve_image(self.image)
        return self.apptainer.exec_argv(sif, ["/bin/sh", "-c", command], default_binds())

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        cmd = self.get_command(command, *args)
        self.apptainer.ensure_helper()
        proc = subprocess.run(
            self.argv(cmd), capture_output=True, env=engine_env(), stdin=subprocess.DEVNULL
        )
        return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)
