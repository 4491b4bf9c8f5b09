"""Runtimes that deploy a lab directory. ``get_runtime(name)`` picks one by name."""

from __future__ import annotations

from railab.errors import RailabError, UsageError
from railab.testbed.runtime.base import Runtime
from railab.testbed.runtime.containerlab import ContainerlabRuntime
from railab.testbed.runtime.netns import NetnsRuntime
from railab.topologies.naming import netns_name

RUNTIMES = ("netns", "containerlab")


def get_runtime(name: str = "netns") -> Runtime:
    """Return a new runtime called ``name`` (``netns`` or ``containerlab``).

    Raises UsageError (exit 2) naming the valid choices for any other name.
    """
    if name == "netns":
        return NetnsRuntime()
    if name == "containerlab":
        return ContainerlabRuntime()
    raise UsageError(f"unknown runtime {name!r}: use one of {', '.join(RUNTIMES)}")


__all__ = ["RailabError", "Runtime", "get_runtime", "netns_name", "RUNTIMES", "NetnsRuntime", "ContainerlabRuntime"]
