"""Sites: where an image runs and its jobs are submitted (issue 18: one package, no cycles).

- :mod:`hpcenv.site.words`: directive flags and placeholder accounts, read by model and jobs;
- :mod:`hpcenv.site.model`: the typed, validated site model;
- :mod:`hpcenv.site.load`: ``--site`` to a file, YAML, ``extends:``, the origin of each value;
- :mod:`hpcenv.site.fields`: the description of every field (schema, ``sites fields``);
- :mod:`hpcenv.hostdetect`: ``sites init --from-host``, a site file from the host's commands.

Each imports only the ones above it in this list and the lower layers (errors, safe, versions,
yamlsrc, tables, paths, knowledge, pins); none imports :mod:`hpcenv.jobs`, the CLI or the
bench (``tests/test_architecture.py`` checks it). This face re-exports what callers use.
"""

from hpcenv.site.load import load_site, load_site_file, search_path, site_file, site_names
from hpcenv.site.model import (
    HostMpi,
    Reference,
    Runtime,
    Scheduler,
    Site,
    SiteVariable,
    json_schema,
    placeholders,
    retirement_warning,
)

__all__ = [
    "HostMpi",
    "Reference",
    "Runtime",
    "Scheduler",
    "Site",
    "SiteVariable",
    "json_schema",
    "load_site",
    "load_site_file",
    "placeholders",
    "retirement_warning",
    "search_path",
    "site_file",
    "site_names",
]
