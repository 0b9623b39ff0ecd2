"""Smoke tests that testinfra runs against a built image, and the runner that drives them.

The ``test_*.py`` files here are ordinary pytest files using testinfra's ``host`` fixture; they
only call ``host.run(...)``, so the same files run against ``podman://NAME`` or any other
testinfra host URL. Each runs a check script from :mod:`hpcenv.checks` inside the target and
asserts on its numbers. :func:`hpcenv.smoke.runner.run_smoke` starts a target, runs the suite
and writes ``junit.xml``, ``report.json`` and ``allreduce_bandwidth.png``.
"""
