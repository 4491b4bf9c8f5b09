"""The runtime interface: one lab lifecycle, several implementations picked by name.

Implementations: ``netns`` (embedded default: Linux network namespaces + Debian's FRR) and
``containerlab`` (drives the containerlab CLI and Docker). Both deploy the same emitted lab
directory (``<lab>.clab.yml`` + ``configs/`` + ``lab.json``).

A runtime deploys mechanically: ``up`` returns once the nodes run with their configs. Whether
the fabric converged is observed one layer up (railab.checks.deploy.bring_up waits with the
predicate the checks use, then calls :meth:`Runtime.mark_converged`).

Two interfaces: :class:`Runtime` is what a runtime does to a recorded lab (``down``, ``status``,
``inspect``, an executor, the convergence hooks); :class:`Deployer` adds ``up``. The registry
``railab.testbed.runtime.get_runtime`` hands out the first, which the commands on a running lab
(``down``, ``status``, ``exec``, ``inspect``) load; ``railab.testbed.runtime.deploy.get_deployer``
the second, for whoever brings a lab up. The netns runtime keeps its deploy phases (and the lab
model, ``lab.capacity`` and the stitch they load) in its Deployer,
railab.testbed.runtime.netns.deploy ``NetnsDeployer``; containerlab's one class is both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.executor import Executor
from railab.topologies.naming import netns_name as _netns_name


class Runtime(ABC):
    """What a runtime does to one recorded lab (everything but deploying it: :class:`Deployer`).
    ``lab`` arguments are lab names (the clab ``name:``)."""

    name: str = "abstract"

    @abstractmethod
    def down(self, lab: str) -> None:
        """Remove everything ``up`` made for ``lab``; idempotent."""

    @abstractmethod
    def status(self, lab: str) -> dict[str, Any]:
        """``{lab, runtime, phase, nodes: {node: {namespace, present, daemons, ...}}}``: what
        the runtime itself knows (no routing-protocol observation)."""

    @abstractmethod
    def inspect(self, lab: str) -> dict[str, Any]:
        """Full recorded state as JSON (namespaces, links, processes, paths, timings)."""

    @abstractmethod
    def executor(self, lab: str) -> Executor:
        """An executor that runs commands on the lab's nodes."""

    def netns_name(self, lab: str, node: str) -> str:
        """The network namespace of ``node``: ``clab-<lab>-<node>`` on both runtimes."""
        return _netns_name(lab, node)

    def record(self, lab: str) -> st.LabState:
        """The recorded state of ``lab``; RailabError when the lab is not up."""
        record = st.load(lab)
        if record is None:
            raise RailabError(f"lab {lab!r} is not up (no {st.state_path(lab)})")
        return record

    def startup_problems(self, lab: str) -> list[str]:
        """What ``lab``'s daemons refused while starting, one text per problem (empty: none).
        ``bring_up`` reads it while it waits for convergence and fails the bring-up on any.
        This default (a runtime that learns nothing at start) returns []."""
        return []

    def resolicit(self, lab: str, ports: list[tuple[str, str]]) -> int:
        """Ask the peers of ``ports`` (``(node, interface)`` ends of sessions not Established
        yet) to advertise again; returns how many requests went out. ``bring_up`` calls it
        while the convergence wait stalls. This default (a runtime whose nodes do their own
        neighbour discovery) does nothing and returns 0."""
        return 0

    def repair_ports(self, lab: str, ports: list[tuple[str, str]]) -> list[str]:
        """Find which of ``ports`` (``(node, interface)`` ends of sessions not Established yet)
        lack the IPv6 link-local state unnumbered BGP needs, restart IPv6 on those
        (railab.testbed.linklocal) and return what was repaired, ``"node:port: what was
        missing"`` each. ``bring_up`` calls it, before :meth:`resolicit`, while the convergence
        wait stalls. This default (a runtime whose nodes' kernels railab does not reach:
        containerlab's containers) does nothing and returns []."""
        return []

    def mark_converged(self, lab: str, converge_s: float) -> st.LabState:
        """Record that ``lab`` converged after ``converge_s`` seconds: phase ``running`` and
        ``timings["converge_s"]``. Returns the saved record; RailabError when it is not up."""
        record = self.record(lab)
        record.timings["converge_s"] = round(converge_s, 3)
        record.phase = "running"
        return st.update(record)


class Deployer(Runtime):
    """A runtime that also deploys a lab directory (:meth:`up`); what
    railab.checks.deploy.bring_up takes.

    ``made``: the lab the latest :meth:`up` on this object made and nobody has removed since
    (set once its record is saved, None again after a rollback). An interrupt can land between
    two callers' guards (``up`` has returned, the caller's ``try`` has not begun): whoever
    catches it removes ``made`` when it is set, so the lab is never left behind by a Ctrl-C.
    """

    made: str | None = None

    @abstractmethod
    def up(self, labdir: Path) -> st.LabState:
        """Deploy the lab in ``labdir`` (directory or ``.clab.yml``); return its recorded state
        (phase ``started``). Does not wait for convergence.

        Raises RailabError (after rolling back everything it made) on any failure, and
        KeyboardInterrupt (after rolling back) on Ctrl-C, SIGTERM or SIGHUP.
        """
