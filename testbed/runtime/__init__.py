"""Runtimes that deploy a lab directory. ``get_runtime(name)`` picks one by name."""

from __future__ import annotations

from railab.errors import RailabError
from railab.testbed.runtime.base import Runtime
from railab.topologies.naming import netns_name

RUNTIMES = ("netns", "containerlab")


def get_runtime(name: str = "netns") -> Runtime:
    """Return the runtime called ``name`` (``netns`` or ``containerlab``).

    Raises RailabError naming the valid choices for any other name.
    """
    if name == "netns":
        from railab.testbed.runtime.netns import NetnsRuntime

        return NetnsRuntime()
    if name == "containerlab":
        from railab.testbed.runtime.containerlab import ContainerlabRuntime

        return ContainerlabRuntime()
    raise RailabError(f"unknown runtime {name!r}: use one of {', '.join(RUNTIMES)}")


__all__ = ["RailabError", "Runtime", "get_runtime", "netns_name", "RUNTIMES"]
