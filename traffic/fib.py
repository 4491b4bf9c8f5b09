"""Flow paths through the switches' own FIBs: which egress port each kernel's ECMP hash picks
for a RoCEv2 flow, hop by hop, and each switch's main table, from raw rtnetlink.

* :class:`FabricView` keeps one rtnetlink socket per switch namespace of a running lab.
  :meth:`FabricView.lookup` is one ``RTM_GETROUTE`` with the flow's full L4 keys (source,
  destination, ``iif``, UDP, source port, dport 4791): the request ``ip route get DST from SRC
  iif IF ipproto udp sport S dport 4791`` makes, answered by the multipath hash the kernel
  forwards with (``fib_multipath_hash_policy`` and ``_seed``: :mod:`railab.traffic.ecmp`).
  :meth:`FabricView.trace` walks a flow from its source leaf over ``lab.json``'s cabling to a
  server (:class:`Trace`); :meth:`FabricView.fib` and :meth:`FabricView.fib_problems` read and
  judge the main tables against ``lab.json`` ``expected_routes``.
* ``link_key`` is :func:`railab.topologies.naming.link_id`, the canonical link id
  (``a:ethX--b:ethY``, ends sorted).

Users: the fault drills (:mod:`railab.checks.drill`: which flows cross the faulty element,
when they are rerouted, when the lab is green) and the load runs of ``railab traffic``
(each flow's path and the links flows share, :func:`shared_links`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from railab.testbed.rtnl import RT_TABLE_MAIN, Rtnl
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import link_id as link_key
from railab.traffic.engine import in_netns
from railab.traffic.patterns import Flow
from railab.traffic.roce import ROCEV2_UDP_PORT
from railab.traffic.stream import flow_sport

# rtnetlink route messages (include/uapi/linux/rtnetlink.h)
RTM_GETROUTE = 26
RTA_DST, RTA_SRC, RTA_IIF, RTA_OIF = 1, 2, 3, 4
RTA_IP_PROTO, RTA_SPORT, RTA_DPORT = 27, 28, 29
RTN_UNICAST = 1
_RTMSG = struct.Struct("=BBBBBBBBI")


def _rta(typ: int, payload: bytes) -> bytes:
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, typ) + payload + b"\0" * ((-ln) % 4)


def _attrs(buf: memoryview, off: int):
    end = len(buf)
    while off + 4 <= end:
        ln, typ = struct.unpack_from("=HH", buf, off)
        if ln < 4:
            return
        yield typ & 0x3FFF, buf[off + 4:off + ln]
        off += (ln + 3) & ~3


@dataclass
class Trace:
    """A flow's path through the kernels' FIBs: ``hops`` = ``(switch, in port, out port)`` from
    the source leaf; ``links`` = link ids (``a:ethX--b:ethY``, sorted ends) crossed, the server
    NIC cables included; ``end`` = ``"srv3:eth2"`` when it reaches the destination NIC as
    planned, else why not (``"no route at spine1 (Network is unreachable)"``, ``"loop"``)."""

    hops: list[tuple[str, str, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    end: str = ""
    delivered: bool = False

    @property
    def nodes(self) -> list[str]:
        return [h[0] for h in self.hops]

    def text(self) -> list[str]:
        """``["g1-leaf1:eth3", "spine1:eth5", ...]``: each switch with its egress port."""
        return [f"{n}:{o}" for n, _i, o in self.hops]


class FabricView:
    """Raw rtnetlink sockets in every switch namespace (opened once, closed by :meth:`close`):
    flow lookups with the kernel's own ECMP hash (:meth:`lookup`, :meth:`trace`) and the main
    table (:meth:`fib`). ``netns_of(node)`` names each node's namespace.
    Raises RailabError when a switch namespace is missing (the lab is not up)."""

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str]) -> None:
        self.spec = spec
        self._nl: dict[str, Rtnl] = {}
        self._idx: dict[str, dict[str, int]] = {}
        self._name: dict[str, dict[int, str]] = {}
        self._roles = {n.name: n.role for n in spec.nodes}
        self._seq = 0
        try:
            for n in spec.nodes:
                if n.role == "server":
                    continue
                with in_netns(netns_of(n.name)):
                    self._nl[n.name] = Rtnl()
                self.refresh(n.name)
        except BaseException:
            self.close()
            raise

    def refresh(self, node: str) -> None:
        """Re-read ``node``'s interface indexes (a re-plugged cable gets a new ifindex)."""
        links = self._nl[node].links()
        self._idx[node] = {name: i for i, (name, _mac) in links.items()}
        self._name[node] = {i: name for i, (name, _mac) in links.items()}

    def close(self) -> None:
        """Close every socket (idempotent)."""
        for nl in self._nl.values():
            nl.close()
        self._nl = {}

    def __enter__(self) -> FabricView:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def lookup(self, node: str, dst: str, src: str, iif: str, sport: int,
               dport: int = ROCEV2_UDP_PORT) -> tuple[str | None, str]:
        """``(egress port, "")`` the kernel of ``node`` forwards a UDP packet ``src:sport ->
        dst:dport`` arriving on ``iif`` to, or ``(None, why)`` (no route, blackhole, port gone)."""
        if iif not in self._idx[node]:
            self.refresh(node)
        idx = self._idx[node].get(iif)
        if idx is None:
            return None, f"{node} has no port {iif}"
        self._seq = (self._seq + 1) & 0x7FFFFFFF
        body = (_RTMSG.pack(socket.AF_INET, 32, 32, 0, 0, 0, 0, 0, 0)
                + _rta(RTA_DST, socket.inet_aton(dst)) + _rta(RTA_SRC, socket.inet_aton(src))
                + _rta(RTA_IIF, struct.pack("=I", idx)) + _rta(RTA_IP_PROTO, b"\x11")
                + _rta(RTA_SPORT, struct.pack("!H", sport)) + _rta(RTA_DPORT, struct.pack("!H", dport)))
        try:
            m = self._nl[node].request(RTM_GETROUTE, body)
        except OSError as exc:
            return None, f"no route at {node} ({os.strerror(exc.errno)})"
        if m is None:
            return None, "?"
        rtype = m[7]
        if rtype != RTN_UNICAST:
            return None, f"{'blackhole' if rtype == 6 else 'no route'} at {node}"
        for t, v in _attrs(m, _RTMSG.size):
            if t == RTA_OIF:
                oif = struct.unpack_from("=I", v)[0]
                name = self._name[node].get(oif)
                if name is None:
                    self.refresh(node)
                    name = self._name[node].get(oif, f"if{oif}")
                return name, ""
        return None, f"no egress port at {node}"

    def trace(self, flow: Flow, sport: int | None = None) -> Trace:
        """Walk ``flow`` (routed; a fabric flow) from its source leaf through each switch's
        kernel lookup and ``lab.json``'s cabling to a server (see :class:`Trace`), with UDP
        source port ``sport`` (default the flow's per-QP port, :func:`flow_sport`)."""
        spec = self.spec
        src, dst = spec.nic(flow.src[0], flow.src_nic), spec.nic(flow.dst[0], flow.dst_nic)
        sport = flow_sport(flow) if sport is None else sport
        s_ip, d_ip = str(src.address.ip), str(dst.address.ip)
        tr = Trace(links=[link_key(src.server, src.interface, src.leaf, src.leaf_port)])
        node, iif = src.leaf, src.leaf_port
        for _ in range(len(self._nl) + 1):
            out, why = self.lookup(node, d_ip, s_ip, iif, sport)
            if out is None:
                tr.end = why
                return tr
            tr.hops.append((node, iif, out))
            peer = spec.peers.get((node, out))
            if peer is None:
                tr.end = f"{node}:{out} is not cabled in lab.json"
                return tr
            tr.links.append(link_key(node, out, *peer))
            if self._roles.get(peer[0]) == "server":
                tr.end = f"{peer[0]}:{peer[1]}"
                tr.delivered = peer == (dst.server, dst.interface)
                return tr
            node, iif = peer
        tr.end = "loop"
        return tr

    def fib(self, node: str) -> dict[str, tuple[str, ...]]:
        """``prefix -> live egress ports`` of ``node``'s main table (one RTM_GETROUTE dump;
        next hops flagged dead or linkdown left out; blackholes as ``()``)."""
        out: dict[str, tuple[str, ...]] = {}
        names = self._name[node]
        for r in self._nl[node].routes(RT_TABLE_MAIN, live_only=True):
            if r.type not in (RTN_UNICAST, 6):
                continue
            out[str(ipaddress.ip_network(f"{r.dst}/{r.dst_len}", strict=False))] = tuple(
                names.get(i, f"if{i}" if len(r.oifs) > 1 else "?") for i in r.oifs)
        return out

    def fib_problems(self) -> list[str]:
        """Why the kernel FIBs differ from ``lab.json`` ``expected_routes`` (empty: as planned):
        each expected prefix needs exactly ``ecmp_width`` live next hops, over the planned ports
        when listed."""
        bad = []
        for node, routes in self.spec.expected_routes.items():
            if node not in self._nl or not routes:
                continue
            try:
                table = self.fib(node)
            except OSError as exc:
                bad.append(f"{node}: FIB unreadable ({exc})")
                continue
            for r in routes:
                oifs = table.get(r.prefix)
                if oifs is None:
                    bad.append(f"{node} {r.prefix}: not in the FIB")
                elif len(oifs) != r.ecmp_width or (r.interfaces and not set(oifs) <= set(r.interfaces)):
                    bad.append(f"{node} {r.prefix}: {len(oifs)} next hops via {','.join(oifs) or '-'}, "
                               f"planned {r.ecmp_width}")
        return bad


def shared_links(paths: dict[str, Trace]) -> dict[str, list[str]]:
    """``link id -> [flow names]`` for every link two or more of ``paths``' flows cross but not
    all of them (a link every flow crosses, such as an incast receiver's own cable, is the
    bottleneck a fair share is taken of, not a collision). ``paths``: flow name -> its
    :class:`Trace`. Sorted by link id; flow names in ``paths`` order. Two flows hashed onto one
    uplink (an ECMP collision) show up here, and so do flows meeting on a spine's downlink."""
    use: dict[str, list[str]] = {}
    for name, tr in paths.items():
        for link in dict.fromkeys(tr.links):
            use.setdefault(link, []).append(name)
    n = len(paths)
    return {k: v for k, v in sorted(use.items()) if 2 <= len(v) < n}


__all__ = ["RT_TABLE_MAIN", "RTM_GETROUTE", "FabricView", "Trace", "link_key", "shared_links"]
