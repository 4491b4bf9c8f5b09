"""Runtimes, by name: ``get_runtime(name)`` picks the runtime of a recorded lab (``down``,
``status``, ``exec``, ``inspect``...); the ones that deploy a lab directory are
railab.testbed.runtime.deploy's (``get_deployer``)."""

from __future__ import annotations

from railab.errors import RailabError, UsageError
from railab.testbed.runtime.base import Runtime
from railab.testbed.runtime.netns import NetnsRuntime
from railab.topologies.naming import netns_name

RUNTIMES = ("netns", "containerlab")


def runtime_class(name: str = "netns") -> type[Runtime]:
    """The runtime class called ``name`` (``netns`` or ``containerlab``). UsageError (exit 2)
    naming the valid choices for any other name.

    The containerlab runtime (the optional ``containerlab`` extra: Docker, its lab model and
    SONiC steps) is imported here, when a command asks for it: a command on a netns lab never
    loads it (docs/architecture.md, "Imports"). The netns runtime (without its deploy phases,
    railab.testbed.runtime.netns.deploy) is light and imported with this module."""
    if name == "netns":
        return NetnsRuntime
    if name == "containerlab":
        from railab.testbed.runtime.containerlab import ContainerlabRuntime

        return ContainerlabRuntime
    raise UsageError(f"unknown runtime {name!r}: use one of {', '.join(RUNTIMES)}")


def get_runtime(name: str = "netns") -> Runtime:
    """Return a new runtime called ``name`` (``netns`` or ``containerlab``), for a recorded lab
    (railab.testbed.runtime.deploy ``get_deployer`` for one that deploys).

    Raises UsageError (exit 2) naming the valid choices for any other name.
    """
    return runtime_class(name)()


def __getattr__(name: str):
    """``ContainerlabRuntime``, imported on first use (:func:`runtime_class`)."""
    if name == "ContainerlabRuntime":
        return runtime_class("containerlab")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RailabError", "Runtime", "get_runtime", "netns_name", "RUNTIMES", "runtime_class", "NetnsRuntime",
           "ContainerlabRuntime"]
