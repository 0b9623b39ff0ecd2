"""Closed sets of words that commands offer and services take, one ``StrEnum`` each.

Why here: Typer turns an Enum annotation into a click ``Choice`` (the values are listed in
``--help`` and a wrong one is a usage error, exit 2, before anything runs), and the service
objects built from the options (:class:`hpcenv.jobs.service.SubmitRequest`) carry the same
type. The module imports only the standard library, so ``hpcenv --help`` stays instant. The
members are ``str`` subclasses: a value compares equal to, and serializes as, its plain word.
Issue 18: "Typer enums for closed choices".
"""

from __future__ import annotations

from enum import StrEnum


class TransportKind(StrEnum):
    """Where scheduler commands run (:mod:`hpcenv.jobs.transport`)."""

    local = "local"
    ssh = "ssh"


class SshClient(StrEnum):
    """Which SSH client the ssh transport runs (:mod:`hpcenv.jobs.transport` says why openssh
    is the default: it reads the whole ssh config and reuses ControlMaster sockets)."""

    openssh = "openssh"
    paramiko = "paramiko"


class BuildFormat(StrEnum):
    """What ``hpcenv build`` delivers: an OCI image, a SIF, or both."""

    oci = "oci"
    sif = "sif"
    both = "both"


class SifSource(StrEnum):
    """Where a SIF comes from: converted from the built OCI image, or built from Singularity.def."""

    oci = "oci"
    def_ = "def"
