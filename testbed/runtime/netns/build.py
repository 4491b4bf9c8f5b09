"""Build phase of ``up``: host neighbour tables, namespaces, links (and the stitch's hosts and
tunnels), per-interface sysctls, server addressing, lab.capacity; then the clab file FRR starts on.

Imported by railab.testbed.runtime.netns.deploy (see :mod:`.preflight` for why). ``up`` runs
the steps of :meth:`Build.steps` in order, each timed once as its phase of the phase table."""

from __future__ import annotations

import os
from collections.abc import Callable

from railab.errors import RailabError
from railab.testbed import capacity
from railab.testbed import state as st
from railab.testbed import stitch as stitch_mod
from railab.testbed.clabfile import ClabFile
from railab.testbed.namespaces import (
    create_netns,
    entered,
    ip_batch,
    netns_lines_per_batch,
    netns_path,
    set_link_up,
)
from railab.testbed.runtime.netns.host import _write_sysctl, raise_neighbour_tables
from railab.testbed.signals import signals_deferred
from railab.topologies import routing
from railab.topologies.labspec import LabSpec


class Build:
    """One ``up``'s build: the namespaces' fds and deferred sysctls between its steps.

    ``clab``, ``spec``, ``record``: the lab file, its lab.json and the state record being built;
    ``plan``: the stitch plan (railab.testbed.stitch) or None. :meth:`close` closes the fds
    (``up`` calls it before FRR starts, and on any failure)."""

    def __init__(self, clab: ClabFile, spec: LabSpec, record: st.LabState,
                 plan: stitch_mod.StitchPlan | None) -> None:
        self.clab, self.spec, self.record, self.plan = clab, spec, record, plan
        self.fds: dict[str, int] = {}
        self.deferred: dict[str, dict[str, str]] = {}

    def steps(self) -> list[tuple[str | None, Callable[[], None]]]:
        """``(timings key or None, step)`` in order: the build phase's sub-phases (None: a step
        counted in the phase table's ``other``); ``capacity_s`` only for a lab with lab.capacity."""
        out: list[tuple[str | None, Callable[[], None]]] = [
            ("namespaces_s", self.namespaces), ("links_s", self.links), (None, self.sysctls),
            ("servers_s", self.servers)]
        if capacity.enabled(self.spec):
            out.append(("capacity_s", self.capacity))
        return out

    def close(self) -> None:
        """Close the namespace fds held for placing veth peers and tunnels."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def _open_node_ns(self, node, ns: str) -> None:
        """In namespace ``ns`` (already created): bring its loopback up, apply the namespace-wide
        sysctls (interface ones go to ``self.deferred``) and keep an fd on it (``self.fds``) for
        placing veth peers and the stitch's tunnels."""
        with entered(ns):
            set_link_up("lo")
            later = {}
            for key, value in node.sysctls.items():
                if not _write_sysctl(key, value):
                    later[key] = value
            self.deferred[node.name] = later
        self.fds[node.name] = os.open(netns_path(ns), os.O_RDONLY)

    def namespaces(self) -> None:
        """Host-wide neighbour tables (shared by all namespaces) sized for this lab's links, then
        the namespaces (one ``ip -batch``), loopback up, namespace-wide sysctls (accept_dad
        before any link)."""
        clab, record, plan = self.clab, self.record, self.plan
        raised = raise_neighbour_tables(2 * len(plan.all_links if plan is not None else clab.links))
        if raised:
            record.host_sysctls = dict(raised)
        with signals_deferred():
            create_netns(record.namespaces[n] for n in clab.nodes)
        for node in clab.nodes.values():
            with signals_deferred():  # every fd opened is in fds before a Ctrl-C lands
                self._open_node_ns(node, record.namespaces[node.name])

    def links(self) -> None:
        """veth pairs, both ends made in place with their MTU (one ``ip -batch``: the kernel
        places each end in its namespace), the a-ends up at creation, then the b-ends up, one
        batch per namespace; for a stitch, its hosts, underlay and VXLAN cut links."""
        clab, ns_of, plan = self.clab, self.record.namespaces, self.plan
        peers_up: dict[str | None, list[str]] = {}
        adds = []
        for link in clab.links:
            (na, ia), (nb, ib) = link.a, link.b
            adds.append(f"link add name {ia} netns {ns_of[na]} mtu {link.mtu} up "
                        f"type veth peer name {ib} netns {ns_of[nb]} mtu {link.mtu}")
            peers_up.setdefault(ns_of[nb], []).append(f"link set {ib} up")
        with signals_deferred():
            # in parts: ip holds two fds per line until it exits (16,384 pairs: 32,768 fds)
            ip_batch({None: adds}, what=f"lab {clab.name}: creating {len(adds)} veth pairs",
                     max_lines=netns_lines_per_batch())
            ip_batch(peers_up, what=f"lab {clab.name}: setting the veth peers up")
        if plan is not None:  # the one-machine proof: hosts, underlay, VXLAN cut links
            with signals_deferred():
                stitch_mod.build(plan, self.fds)
            for t in plan.tunnels:
                with entered(ns_of[t.node]):
                    set_link_up(t.interface)

    def sysctls(self) -> None:
        """Per-interface sysctls, now that interfaces exist."""
        for name, later in self.deferred.items():
            if not later:
                continue
            with entered(self.record.namespaces[name]):
                for key, value in later.items():
                    if not _write_sysctl(key, value):
                        raise RailabError(f"{self.clab.path.name}: node {name}: sysctl {key} does not exist")

    def servers(self) -> None:
        """Server NICs: address, per-NIC table default route, source rule (lab.json, numbering
        and priorities from railab.topologies.routing), one ``ip -batch`` per namespace."""
        clab, ns_of = self.clab, self.record.namespaces
        ends = {(n, i) for ln in clab.links for n, i in (ln.a, ln.b)}
        nic_lines: dict[str | None, list[str]] = {}
        for nic in self.spec.nics:
            if nic.server not in self.fds:
                raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} names a node absent from "
                                  f"{clab.path.name}")
            if (nic.server, nic.interface) not in ends:
                raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} has no link in {clab.path.name}")
            addr, plen = str(nic.address.ip), nic.address.network.prefixlen
            nic_lines.setdefault(ns_of[nic.server], []).extend([
                f"address add {addr}/{plen} dev {nic.interface}",
                f"route add default via {nic.gateway} dev {nic.interface} table {nic.table}",
                f"rule add from {addr}/32 table {nic.table} priority {routing.rule_priority(nic.nic)}",
            ])
        with signals_deferred():
            ip_batch(nic_lines, what=f"lab {clab.name}: addressing the server NICs")

    def capacity(self) -> None:
        """lab.capacity: egress queues on every link end, ECN tables on the switches
        (railab.testbed.capacity); they live in the namespaces and go with them."""
        capacity.apply(self.spec, self.record.namespaces.__getitem__)

    def frr_clab(self) -> ClabFile:
        """The clab file FRR starts on: the lab's, or for a stitch with its cut links."""
        return stitch_mod.with_cut_links(self.plan) if self.plan is not None else self.clab
