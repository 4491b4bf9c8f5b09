"""Runtimes that deploy a lab directory. ``get_runtime(name)`` picks one by name."""

from __future__ import annotations

from railab.errors import RailabError, UsageError
from railab.testbed.runtime.base import Runtime
from railab.topologies.naming import netns_name

RUNTIMES = ("netns", "containerlab")


def get_runtime(name: str = "netns") -> Runtime:
    """Return a new runtime called ``name`` (``netns`` or ``containerlab``).

    Raises UsageError (exit 2) naming the valid choices for any other name.
    """
    if name == "netns":
        from railab.testbed.runtime.netns import NetnsRuntime

        return NetnsRuntime()
    if name == "containerlab":
        from railab.testbed.runtime.containerlab import ContainerlabRuntime

        return ContainerlabRuntime()
    raise UsageError(f"unknown runtime {name!r}: use one of {', '.join(RUNTIMES)}")


def __getattr__(name: str):
    """``NetnsRuntime`` and ``ContainerlabRuntime``, imported on first use: a command that uses
    one runtime does not load the other (nor, for ``down``, what only ``up`` needs)."""
    if name == "NetnsRuntime":
        from railab.testbed.runtime.netns import NetnsRuntime

        return NetnsRuntime
    if name == "ContainerlabRuntime":
        from railab.testbed.runtime.containerlab import ContainerlabRuntime

        return ContainerlabRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RailabError", "Runtime", "get_runtime", "netns_name", "RUNTIMES", "NetnsRuntime", "ContainerlabRuntime"]
