"""SingularityCE: Apptainer's sibling, with its own variable prefix (``SINGULARITYENV_``,
docs.sylabs.io/guides/latest/user-guide/environment_and_metadata.html)."""

from __future__ import annotations

from typing import ClassVar

from hpcenv.jobs.runtimes.apptainer import Apptainer
from hpcenv.jobs.runtimes.base import Probe


class Singularity(Apptainer):
    kind: ClassVar[str] = "singularity"
    env_prefix: ClassVar[str] = "SINGULARITYENV_"
    detect_rank = 20
    probe = Probe(("singularity", "--version"), "load the site's singularity module")


RUNTIME = Singularity
