"""IPv6 router advertisements: the RA gate, router solicitations and repair of a port's fe80::/64 route."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed import linklocal, nfnl, solicit, vty
from railab.testbed import namespaces as ns_mod
from railab.testbed import state as st
from railab.testbed.clabfile import ClabFile
from railab.testbed.namespaces import entered, exec_argv
from railab.testbed.runtime.netns.constants import RA_GATE_ENV, RA_GATE_TABLE, SPAWN_THREADS


def ra_gate_wanted() -> bool:
    """Whether ``up`` should use the RA gate: ``$RAILAB_RA_GATE`` unset, empty or ``1`` (True),
    ``0`` (False). UsageError for any other value (a misspelt setting must not silently mean
    on); an empty value (``RAILAB_RA_GATE= railab up ...``) reads as unset, as shells mean it."""
    value = os.environ.get(RA_GATE_ENV, "").strip() or "1"
    if value not in ("0", "1"):
        raise UsageError(f"{RA_GATE_ENV}={value!r}: set it to 1 (the RA gate, the default) or 0 (no gate), "
                         f"or unset it")
    return value == "1"


def ra_gate_script(on: bool) -> str:
    """The ``nft -f -`` script that closes (``on``) or opens the RA gate of one namespace: a table
    :data:`RA_GATE_TABLE` whose input chain drops ICMPv6 router advertisements (type 134) before
    any socket, zebra's raw ICMPv6 socket included, sees them. Nothing else is dropped."""
    if not on:
        return f"delete table ip6 {RA_GATE_TABLE}\n"
    return (f"add table ip6 {RA_GATE_TABLE}\n"
            f"add chain ip6 {RA_GATE_TABLE} input {{ type filter hook input priority -300; }}\n"
            f"add rule ip6 {RA_GATE_TABLE} input icmpv6 type nd-router-advert drop\n")


def set_ra_gate(namespaces: Iterable[str], on: bool) -> None:
    """Close (``on``) or open the RA gate in each of ``namespaces``.

    Closing runs one ``nft -f`` per namespace, all at once
    (:func:`railab.testbed.namespaces.run_batches`), before the zebra wave while the host is quiet.
    Opening deletes the table over nfnetlink from this process (railab.testbed.nfnl), from up to
    :data:`SPAWN_THREADS` threads: each deletion waits one RCU grace period in the kernel
    (~10 ms: the base chain's hook goes), so they overlap. It runs while every bgpd starts, where
    16 ``nft`` processes took 0.3 s at 4 x 16. A namespace whose table is already gone is
    skipped. Raises RailabError naming the namespaces where nft or the request failed."""
    if on:
        try:
            ns_mod.run_batches({ns: (exec_argv(ns, ["nft", "-f", "-"]), ra_gate_script(True))
                         for ns in namespaces}, "closing the RA gate")
        except RailabError as exc:
            raise RailabError(f"{exc} (the RA gate needs a working nft; {RA_GATE_ENV}=0 brings "
                              "the lab up without it, converging ~1 s slower)") from exc
        return
    def open_one(ns: str) -> str | None:
        try:
            with entered(ns):
                nfnl.delete_table(socket.AF_INET6, RA_GATE_TABLE)
        except OSError as exc:  # the namespace is gone, or the kernel refused
            return f"{ns}: {exc}"
        return None

    nss = list(namespaces)
    with ThreadPoolExecutor(max_workers=max(1, min(SPAWN_THREADS, len(nss)))) as pool:
        bad = [r for r in pool.map(open_one, nss) if r]
    if bad:
        raise RailabError("opening the RA gate failed on " + " | ".join(bad[:3]))




def ports_by_namespace(ports: Iterable[tuple[str, str]], namespaces: dict[str, str]) -> dict[str, set[str]]:
    """``(node, port)`` pairs grouped by network namespace (``namespaces``: node -> netns name;
    nodes without one are left out): how railab.testbed.solicit takes its ports."""
    out: dict[str, set[str]] = {}
    for node, port in ports:
        if node in namespaces:
            out.setdefault(namespaces[node], set()).add(port)
    return out


def fabric_ports(clab: ClabFile, namespaces: dict[str, str]) -> dict[str, set[str]]:
    """The ports of ``clab``'s router-router links by network namespace (``namespaces``: node ->
    netns name; nodes without one are left out): where the Router Solicitations go."""
    routers = {n.name for n in clab.routers}
    return ports_by_namespace((end for ln in clab.links if ln.a[0] in routers and ln.b[0] in routers
                               for end in (ln.a, ln.b)), namespaces)


def solicit_router_advertisements(clab: ClabFile, namespaces: dict[str, str]) -> int:
    """Send one IPv6 Router Solicitation out of both ends of every router-router link of
    ``clab`` (``namespaces``: node -> netns name; railab.testbed.solicit.send_solicitations);
    returns how many were sent.

    Why: unnumbered BGP learns the peer's link-local address from the peer's router
    advertisements, and zebra ignores RAs received on an interface whose own RA is not enabled yet
    (FRR ``zebra/rtadv.c``: ``rtadv_process_packet`` drops them unless ``AdvSendAdvertisements``).
    The zebras of a large lab start seconds apart (17 s for the 96 of the 4096-GPU fabric), so
    the first fast RAs (4, one per second) of early routers are lost on late ones, and the
    session then waits a whole ``ra-interval`` (32 s on the full 1024-GPU fabric) for the next
    one. Once every zebra runs with its config, a solicitation makes the peer's zebra answer at
    once (``rtadv_process_solicit`` with fast retransmit on, FRR's default). ``up`` sends them
    between the daemon waves, and retries the ports not ready yet from a process of its own beside
    the wave that starts bgpd (``NetnsRuntime._solicit``)."""
    return solicit.send_solicitations(fabric_ports(clab, namespaces))


def tier_order(clab: ClabFile) -> dict[str, int]:
    """Each router of ``clab`` -> its tier counted from the top (0: routers that are never the
    lower end ``a`` of a router-router link, e.g. spines of a two-tier fabric or super-spines of
    a three-tier one; a router's tier is one more than the deepest of the routers its links go
    up to). railab's generator writes every fabric link lower end first (Link.a) and puts
    ``passive`` on the upper end, so tier 0 only listens."""
    routers = {n.name for n in clab.routers}
    up: dict[str, set[str]] = {n: set() for n in routers}
    for ln in clab.links:
        (na, _), (nb, _) = ln.a, ln.b
        if na in routers and nb in routers:
            up[na].add(nb)
    tier: dict[str, int] = {}

    def depth(n: str, seen: frozenset = frozenset()) -> int:
        if n not in tier:
            above = [m for m in up[n] if m not in seen]  # a cycle (not a Clos): cut it
            tier[n] = 1 + max((depth(m, seen | {n}) for m in above), default=-1)
        return tier[n]

    for n in sorted(routers):
        depth(n)
    return tier


class Ipv6Mixin:
    """NetnsRuntime's RA gate, solicitation and port-repair methods."""

    @staticmethod
    def _open_ra_gate(clab: ClabFile, record: st.LabState, ports: dict[str, set[str]]) -> int:
        """Open the RA gate tier by tier from the top (:func:`tier_order`): each tier's gate,
        then one RS from each of its fabric ports (retried while a port has no carrier,
        railab.testbed.solicit), so its zebras hear their peers' RAs now. An upper tier (the
        passive end) thus knows a lower tier's link-locals before the lower tier connects to it.
        ``ports``: :func:`fabric_ports` of the lab. Returns the solicitations sent."""
        rank = tier_order(clab)
        sent = 0
        for tier in sorted(set(rank.values())):
            nss = [record.namespaces[n.name] for n in clab.routers if rank.get(n.name) == tier]
            set_ra_gate(nss, False)
            sent += solicit.send_solicitations({ns: ports[ns] for ns in nss if ns in ports})
        return sent

    def resolicit(self, lab: str, ports: list[tuple[str, str]]) -> int:
        """One Router Solicitation out of each ``(node, interface)`` of ``ports``, in the node's
        namespace (railab.testbed.solicit, no retries): an unnumbered session whose bgpd still
        waits for its peer's link-local ("Waiting for Peer IPv6 LLA") otherwise waits the next
        RA, up to the lab's ``ra-interval`` (128 s on the 4096-GPU fabric). Nodes or ports that
        are gone are skipped; returns how many were sent."""
        return solicit.solicit_once(ports_by_namespace(ports, self.record(lab).namespaces))[0]

    def repair_ports(self, lab: str, ports: list[tuple[str, str]]) -> list[str]:
        """Restart IPv6 on the ``(node, interface)`` ports that lack their link-local address or
        one of its routes (railab.testbed.linklocal: the kernel's atomic per-CPU pool ran dry
        while thousands of ports came up); returns ``"node:port: what was missing"`` per port
        repaired, also appended to the record's ``ipv6_repairs``. Nodes or namespaces that are
        gone are skipped. RailabError when the lab is not up."""
        record = self.record(lab)
        node_of = {ns: node for node, ns in record.namespaces.items()}
        repaired: list[str] = []
        for ns, names in ports_by_namespace(ports, record.namespaces).items():
            try:
                with entered(ns):
                    faults = linklocal.port_faults(sorted(names))
                    linklocal.repair(faults)
            except OSError:  # the namespace is gone (FileNotFoundError) or its netlink failed
                continue
            repaired += [f"{node_of[ns]}:{port}: {what}" for port, what in faults.items()]
        if repaired:
            record.ipv6_repairs += repaired
            st.modify(record.lab, lambda rec: setattr(rec, "ipv6_repairs", [*rec.ipv6_repairs, *repaired]))
        return repaired


    def _solicit(self, clab: ClabFile, lab: str, parts: dict[str, dict[str, Path]],
                 record: st.LabState) -> subprocess.Popen | None:
        """Once the zebra of every node whose config was split answers on its vty (it has read
        its config; one that does not within 10 s is left to the RA interval), send one Router
        Solicitation out of every fabric port (railab.testbed.solicit.solicit_once) and start
        ``python3 -m railab.testbed.solicit`` for the ports not ready yet (a new veth's carrier
        comes up to 1 s late), which the caller collects after the next wave; None when every
        port took it."""
        vty.wait_answering([st.node_dir(lab, n.name) / "zebra.vty" for n in clab.routers if n.name in parts],
                           timeout=10.0)
        sent, later = solicit.solicit_once(fabric_ports(clab, record.namespaces))
        record.solicit = {"sent": sent}
        if not later:
            return None
        req = {"ports": {ns: sorted(p) for ns, p in later.items()}}
        proc, _ = self._spawn([sys.executable, "-m", "railab.testbed.solicit"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.stdin.write(json.dumps(req))
            proc.stdin.close()
        except OSError:
            pass  # it died at once: its exit code and stderr say why
        proc.stdin = None  # written and closed: communicate() must not flush it
        return proc

