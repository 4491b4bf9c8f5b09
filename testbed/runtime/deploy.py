"""Runtimes that deploy, by name: ``get_deployer(name)`` (a :class:`~railab.testbed.runtime.base.Deployer`).

The counterpart of the registry in railab.testbed.runtime (``get_runtime``), which hands out a
runtime for a recorded lab. Whoever brings a lab up imports this module (``railab up``, the demo,
railab.checks.lab ``LiveLab.bring_up``); the commands on a running lab (``down``, ``status``,
``exec``, ``inspect``) never do, so they do not load the netns runtime's deploy phases
(railab.testbed.runtime.netns.deploy; docs/architecture.md, "Imports").
"""

from __future__ import annotations

from railab.testbed.runtime import RUNTIMES, runtime_class
from railab.testbed.runtime.base import Deployer
from railab.testbed.runtime.netns.deploy import NetnsDeployer


def deployer_class(name: str = "netns") -> type[Deployer]:
    """The class that deploys labs on the runtime called ``name`` (``netns``: NetnsDeployer;
    ``containerlab``: ContainerlabRuntime, which deploys and operates in one class). UsageError
    (exit 2) naming the valid choices for any other name (railab.testbed.runtime.runtime_class)."""
    if name == "netns":
        return NetnsDeployer
    cls = runtime_class(name)
    assert issubclass(cls, Deployer), f"runtime {name} cannot deploy"
    return cls


def get_deployer(name: str = "netns") -> Deployer:
    """A new Deployer of the runtime called ``name`` (``netns`` or ``containerlab``).

    Raises UsageError (exit 2) naming the valid choices for any other name.
    """
    return deployer_class(name)()


__all__ = ["RUNTIMES", "Deployer", "NetnsDeployer", "deployer_class", "get_deployer"]
