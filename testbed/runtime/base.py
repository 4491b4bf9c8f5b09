"""The runtime interface: one lab lifecycle, several implementations picked by name.

Implementations: ``netns`` (embedded default: Linux network namespaces + Debian's FRR) and
``containerlab`` (drives the containerlab CLI and Docker). Both deploy the same emitted lab
directory (``<lab>.clab.yml`` + ``configs/`` + ``lab.json``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from railab.testbed.executor import Executor


class RailabError(Exception):
    """A user-facing error: one message that says what is wrong and what to change."""


class Runtime(ABC):
    """Lifecycle of one lab. ``lab`` arguments are lab names (the clab ``name:``)."""

    name: str = "abstract"

    @abstractmethod
    def up(self, labdir: Path, *, timeout: float = 120.0, progress: bool = True) -> dict[str, Any]:
        """Deploy the lab in ``labdir`` and wait until converged; return its recorded state.

        Raises RailabError (after rolling back everything it made) on any failure.
        """

    @abstractmethod
    def down(self, lab: str) -> None:
        """Remove everything ``up`` made for ``lab``; idempotent."""

    @abstractmethod
    def status(self, lab: str) -> dict[str, Any]:
        """Nodes, daemons alive, sessions up."""

    @abstractmethod
    def inspect(self, lab: str) -> dict[str, Any]:
        """Full recorded state (namespaces, links, processes, paths)."""

    @abstractmethod
    def executor(self, lab: str) -> Executor:
        """An executor that runs commands on the lab's nodes."""

    @abstractmethod
    def netns_name(self, lab: str, node: str) -> str:
        """The network namespace of ``node``: ``clab-<lab>-<node>`` on both runtimes."""

