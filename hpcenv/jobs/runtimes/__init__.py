"""Container runtimes as backends: one module per runtime, each owning its facts.

A runtime (``runtime.kind`` in a site file) owns everything that differs between the ways a site
runs images: the image kind it runs (OCI, SIF, squashfs), its default image, the engine that
builds for it, its delivery steps (what turns a built image into what the job runs), how a rank
enters the image (:meth:`~hpcenv.jobs.runtimes.base.ContainerRuntime.launch`, with its step files),
its doctor probe and host detection, the image identity tuning keys use, the local image check
and the validation of its own site fields. Callers ask the runtime; none branches on its kind.

As ReFrame's ``ContainerPlatform`` owns both its prepare commands (pull, import, convert) and its
launch. :mod:`hpcenv.runtime_kinds` imports nothing, so the site model can check a kind
without importing any backend; a new runtime is one module in this folder (its
``RUNTIME`` class), or :func:`~hpcenv.runtime_kinds.register` for one that lives elsewhere.
"""
