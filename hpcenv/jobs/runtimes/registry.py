"""The container runtimes by kind, as classes and instances (:mod:`hpcenv.runtime_kinds` says
which kinds exist)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcenv.runtime_kinds import check_kind, known_kinds, load_class, register, unregister

if TYPE_CHECKING:  # runtimes.base imports hpcenv.jobs, whose package imports this module
    from hpcenv.jobs.runtimes.base import ContainerRuntime
    from hpcenv.site import Site

__all__ = [
    "check_kind",
    "default_image",
    "get_runtime",
    "known_kinds",
    "register",
    "runtime_class",
    "runtime_of",
    "unregister",
]


def runtime_class(kind: str) -> type[ContainerRuntime]:
    """The class of runtime ``kind``, its module imported on first use."""
    cls: type[ContainerRuntime] = load_class(kind)
    return cls


def get_runtime(kind: str) -> ContainerRuntime:
    """An instance of the runtime ``kind`` (a clean error for an unknown one)."""
    return runtime_class(kind)()


def runtime_of(site: Site) -> ContainerRuntime:
    """The runtime ``site`` runs its images with (``runtime.kind``)."""
    return get_runtime(site.runtime.kind)


def default_image(site: Site, recipe: str) -> str:
    """The image ``site``'s jobs run for ``recipe``: what its runtime's delivery makes."""
    return runtime_of(site).default_image(site, recipe)
