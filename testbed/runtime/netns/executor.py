"""NetnsExecutor: run commands and vtysh on the nodes of a running netns lab."""

from __future__ import annotations

import os
import subprocess

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed import vty
from railab.testbed.executor import ExecResult, Executor
from railab.testbed.namespaces import exec_argv, netns_path
from railab.topologies.naming import netns_name


class NetnsExecutor(Executor):
    """Run commands on the nodes of a running netns lab.

    ``run(node, argv)`` executes argv inside ``clab-<lab>-<node>``; an argv starting with
    ``vtysh`` is pointed at that node's vty sockets (``--vty_socket /run/railab/<lab>/<node>``).
    Raises RailabError if the lab is not up, TimeoutError after ``timeout`` seconds.
    """

    def __init__(self, lab: str) -> None:
        self.lab = lab
        if st.load(lab) is None:
            raise RailabError(f"lab {lab!r} is not up (no {st.state_path(lab)}): railab up first")

    def argv_for(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` with ``vtysh`` pointed at the node's sockets."""
        if argv and os.path.basename(argv[0]) == "vtysh":
            return [argv[0], "--vty_socket", str(st.node_dir(self.lab, node)), *argv[1:]]
        return list(argv)

    def command(self, node: str, argv: list[str]) -> list[str]:
        """The full command line that runs ``argv`` on ``node``: vtysh pointed at the node's
        sockets (it talks to the daemons over unix sockets, no namespace needed), anything else
        under ``nsenter --net`` (railab.testbed.namespaces.exec_argv). RailabError when the
        node's namespace does not exist."""
        ns = netns_name(self.lab, node)
        if not netns_path(ns).exists():
            raise UsageError(f"lab {self.lab!r} has no node {node!r} (no namespace {ns})")
        argv = self.argv_for(node, argv)
        if argv and os.path.basename(argv[0]) == "vtysh":
            return argv
        return exec_argv(ns, argv)

    def run(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        full = self.command(node, argv)
        try:
            p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{node}: {' '.join(argv)} did not finish within {timeout:g} s") from None
        except FileNotFoundError:
            return ExecResult(127, "", f"{full[0]}: command not found")
        if p.returncode == 127 and full[0] == "nsenter" and "failed to execute" in p.stderr:
            return ExecResult(127, p.stdout, f"{argv[0]}: command not found")
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def vtysh(self, node: str, command: str, *, timeout: float = 30.0) -> ExecResult:
        """``command`` on ``node``'s FRR: straight to the owning daemon's vty socket when one
        daemon owns it (railab.testbed.vty, ~2 ms instead of ~50 ms for a ``vtysh`` process),
        else, or when that daemon is not running, through ``vtysh -c`` (same ExecResult: output
        on stdout, rc 0 on success, 1 when FRR refused the command)."""
        daemon = vty.owner(command)
        if daemon is not None:
            path = st.node_dir(self.lab, node) / f"{daemon}.vty"
            try:
                status, out = vty.vty_command(path, command, timeout=timeout)
            except TimeoutError:
                raise TimeoutError(f"{node}: vtysh -c {command!r} did not finish within {timeout:g} s") from None
            except OSError:  # VtyUnavailable (daemon down) or a broken connection: vtysh says why
                pass
            else:
                return ExecResult(0 if status == 0 else 1, out, "")
        return self.run(node, ["vtysh", "-c", command], timeout=timeout)
