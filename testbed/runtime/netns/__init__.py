"""The embedded runtime: a lab on Linux network namespaces with Debian's FRR, no Docker.

Every node of ``<lab>.clab.yml`` becomes a namespace ``clab-<lab>-<node>`` (containerlab's scheme,
so the traffic engine and checks run unchanged on either runtime); every link a veth pair whose
two ends are created directly inside the two namespaces with the endpoint names (no root-ns
names, so the 15-character limit applies only to the endpoint names themselves). Per-node
sysctls come from the clab file, server NIC addressing and policy routing (``from <addr> lookup
100+n`` plus a per-table default route) from ``lab.json``. Every node that binds an
``frr.conf`` runs the FRR daemons its ``daemons`` file enables (its node kind's ordered list,
railab.testbed.clabfile ``ClabNode.daemons``, with that file's ``<daemon>_options``) inside its
namespace, with pid files, vty sockets, zserv socket, bfdd control socket and logs under
``/run/railab/<lab>/<node>/`` (never FRR's shared ``/var/run/frr``). Each daemon reads its own
part of the node's integrated frr.conf at start (``<daemon>.conf`` in that directory, cut by
railab.topologies.frr ``split_frr_conf``); a node whose file holds something the split does not
place gets the whole file pushed with ``vtysh -f`` once its daemons run, the way FRR's own init
script does it.

Namespaces are made by one ``ip -batch`` process, veth pairs by another (the kernel places both
ends), the b-ends set up and the server NICs addressed by one ``ip -n NS -batch`` per namespace
(railab.testbed.namespaces ``ip_batch``: iproute2 at kernel speed where one pyroute2 request per
item cost 2-6 ms of Python each). The calling thread enters each new namespace only long
enough to bring its loopback up (one ioctl) and write its sysctls. FRR daemons are spawned
from a thread inside the node's network namespace and a UTS namespace named after the node
(railab.testbed.namespaces), so no Python code runs in a forked child. Daemons start in two
waves across all nodes: zebra everywhere, then, once every zserv socket exists, every other
daemon of every node at once (every bgpd first, the top tier first), with the Router
Solicitations sent from a thread beside that wave.

This package's :class:`NetnsRuntime` is what the commands on a running lab load (``down``,
``status``, ``exec``, ``inspect``, daemon restarts, the convergence hooks). ``up`` is
railab.testbed.runtime.netns.deploy ``NetnsDeployer``'s (a NetnsRuntime that deploys), with its
phases (:mod:`.preflight`, :mod:`.build`) imported at the top there: they load the lab model,
``lab.capacity`` with the PFC plan and the stitch, which those commands do not need
(docs/architecture.md, "Imports"). ``up`` deploys only: it returns once FRR runs with its
config (phase ``started``); waiting for convergence is the caller's job
(railab.checks.deploy.bring_up), which then records it with :meth:`NetnsRuntime.mark_converged`.

Ownership: see testbed.state; ``up`` records everything before creating it, and rolls back on
any failure, Ctrl-C (SIGINT), SIGTERM or SIGHUP.

A lab with ``lab.capacity`` gets its port queues and ECN tables (railab.testbed.capacity) once
its links and server addresses exist, before FRR starts; the PFC emulation's agent
(railab.testbed.pfc) runs only inside a traffic run and is recorded in ``LabState.agents``;
``down`` kills it with the lab's other processes (its command line names the lab's run
directory).
"""

from __future__ import annotations

import resource  # noqa: F401 (tests patch railab.testbed.runtime.netns.resource)
import shutil  # noqa: F401 (tests patch railab.testbed.runtime.netns.shutil)
import subprocess  # noqa: F401 (tests patch railab.testbed.runtime.netns.subprocess)
from typing import Any

from railab.testbed import state as st
from railab.testbed.namespaces import exec_argv, netns_path
from railab.testbed.runtime.base import Runtime
from railab.testbed.runtime.netns.constants import (
    FD_HEADROOM,
    FDS_PER_NODE,
    FRR_BIN,
    FRR_FD_LIMIT,
    FRR_USER,
    GIB,
    MEM_AVAILABLE_ENV,
    MEM_HEADROOM_BYTES,
    NEIGH_HEADROOM,
    NEIGH_PER_ENDPOINT,
    RA_GATE_ENV,
    RA_GATE_SETTLE_S,
    RA_GATE_TABLE,
    SPAWN_THREADS,
)
from railab.testbed.runtime.netns.daemons import DaemonsMixin
from railab.testbed.runtime.netns.executor import NetnsExecutor
from railab.testbed.runtime.netns.frr import FrrMixin
from railab.testbed.runtime.netns.host import (
    check_memory,
    check_prerequisites,
    mem_available_bytes,
    raise_neighbour_tables,
    raise_nofile,
)
from railab.testbed.runtime.netns.ipv6 import (
    Ipv6Mixin,
    fabric_ports,
    ports_by_namespace,
    ra_gate_script,
    ra_gate_wanted,
    set_ra_gate,
    solicit_router_advertisements,
    tier_order,
)
from railab.testbed.runtime.netns.procs import _alive, _cmdline
from railab.testbed.runtime.netns.teardown import TeardownMixin
from railab.testbed.signals import Interrupted

#: what the single-module runtime exported and callers (tests, bench scripts) still import from here
__all__ = [
    "FD_HEADROOM", "FDS_PER_NODE", "FRR_BIN", "FRR_FD_LIMIT", "FRR_USER", "GIB", "MEM_AVAILABLE_ENV",
    "MEM_HEADROOM_BYTES", "NEIGH_HEADROOM", "NEIGH_PER_ENDPOINT", "RA_GATE_ENV", "RA_GATE_SETTLE_S",
    "RA_GATE_TABLE", "SPAWN_THREADS", "Interrupted", "NetnsExecutor", "NetnsRuntime", "_alive", "_cmdline",
    "check_memory", "check_prerequisites", "exec_argv", "fabric_ports", "mem_available_bytes", "netns_path",
    "ports_by_namespace", "ra_gate_script", "ra_gate_wanted", "raise_neighbour_tables", "raise_nofile",
    "set_ra_gate", "solicit_router_advertisements", "tier_order",
]


class NetnsRuntime(FrrMixin, Ipv6Mixin, DaemonsMixin, TeardownMixin, Runtime):
    """Network namespaces + Debian FRR, a recorded lab (see the module docstring); deploying is
    railab.testbed.runtime.netns.deploy ``NetnsDeployer``'s."""

    name = "netns"

    def executor(self, lab: str) -> NetnsExecutor:
        return NetnsExecutor(lab)

    # -- status / inspect ----------------------------------------------------------------------
    def inspect(self, lab: str) -> dict[str, Any]:
        """The recorded state as its JSON document; RailabError when the lab is not up."""
        return self.record(lab).to_json()

    def status(self, lab: str) -> dict[str, Any]:
        """``{lab, runtime, phase, nodes: {node: {namespace, present, daemons: {d: alive}}}}``
        from the record and /proc; ``daemons`` in start order (zebra, then bgpd, ...). BGP
        sessions are not observed here (railab.checks.converge.observe_sessions does that).
        RailabError when the lab is not up."""
        record = self.record(lab)
        nodes = {}
        for name, ns in record.namespaces.items():
            info: dict[str, Any] = {"namespace": ns, "present": netns_path(ns).exists(), "daemons": {}}
            r = record.routers.get(name)
            if r:
                # start order (RouterState.daemons), not the record's sorted JSON keys
                order = [d for d in r.daemons if d in r.pids] + [d for d in r.pids if d not in r.daemons]
                info["daemons"] = {d: (_alive(r.pids[d]) and str(st.lab_dir(lab)) in _cmdline(r.pids[d]))
                                   for d in order}
            nodes[name] = info
        return {"lab": lab, "runtime": self.name, "phase": record.phase, "nodes": nodes}
