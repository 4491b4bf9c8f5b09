"""Executors run a command on a lab node and return its output.

The same checks and traffic code run against the netns runtime (``NetnsExecutor``), a
containerlab lab (``DockerExecutor``) or real devices (``SshExecutor``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one command: exit code, decoded stdout and stderr."""

    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Executor(ABC):
    """Run argv on a node. Implementations must not use a shell unless asked."""

    @abstractmethod
    def run(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        """Run ``argv`` on ``node``; raises TimeoutError after ``timeout`` seconds."""

    def vtysh(self, node: str, command: str, *, timeout: float = 30.0) -> ExecResult:
        """Run one vtysh command on a switch (default: ``vtysh -c``)."""
        return self.run(node, ["vtysh", "-c", command], timeout=timeout)

    def vtysh_json(self, node: str, command: str, *, timeout: float = 30.0) -> Any:
        """Run a vtysh ``... json`` command and parse it; raises RuntimeError on failure."""
        res = self.vtysh(node, command, timeout=timeout)
        if not res.ok:
            raise RuntimeError(f"{node}: `{command}` failed (rc={res.rc}): {res.stderr.strip()}")
        return json.loads(res.stdout or "{}")
