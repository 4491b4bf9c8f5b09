"""One-process RoCEv2 injector and receiver for every NIC of every server of a running lab.

``Engine(spec, netns_of)`` enters each server's network namespace once (``setns`` on the calling
thread, then back) to open its sockets, which keep their namespace afterwards:

* one ``AF_PACKET`` socket per server NIC ``eth<n>`` (bound, send only) and one on ``lo`` for
  intra-server (NVLink) flows, which never leave the server;
* one ``AF_PACKET`` receive socket per server with a classic BPF filter
  (``ip and (icmp or udp dst port 4791)``, unfragmented), outgoing copies ignored;
* one UDP socket bound to port 4791 per server, drained, so the kernel never answers RoCE
  packets with ICMP port-unreachable;
* one raw rtnetlink socket per switch namespace (:class:`Rtnl`): its links dumped and indexed
  once at open (MACs), port counters as one ``RTM_GETSTATS`` dump per read, link state for
  ``railab traffic``'s uplink warnings; pyroute2 only for :meth:`Engine.set_link`.

Frames go to the leaf port's MAC (the peer link address, read from the leaf's namespace). Per
flow, one frame template per opcode is built with scapy and only PSN/ack-request/ICRC are patched
in bytes per packet (:class:`traffic.roce.FrameTemplate`); ``select.epoll`` multiplexes every
receive socket.

The receiver checks per flow: PSN order (out-of-order count), loss, duplicates, ICRC, received
TTL (hops = 64 - TTL, every switch hop is routed). With ``measure=True`` flows run one at a time
and every switch's port counters are read before and after; the switches whose counters moved by
at least half the flow's packets, and the walk of moved egress ports from the source leaf, give
the hop count and the exact path (leaf uplink, spine, parallel link). A port's share of the flow
is bounded by its bytes too (:meth:`Engine.flow_deltas`), so the lab's own small frames (BFD,
BGP, RA) never count as the flow. ACKs are suppressed while measuring so the reverse path does
not blur the attribution.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import random
import resource
import select
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from railab.errors import RailabError
from railab.testbed.namespaces import CLONE_NEWNET, setns
from railab.testbed.rtnl import Rtnl
from railab.testbed.signals import sigint_event  # noqa: F401  (re-exported: railab traffic uses it)
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name
from railab.traffic import roce
from railab.traffic.patterns import Flow, SpreadStats
from railab.traffic.spreadchance import any_leaf_chance, idle_uplink_chance, percent

ETH_P_IP = 0x0800
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
RCVBUF = 32 << 20
MASK24 = 0xFFFFFF
SIOCGIFFLAGS = 0x8913
#: seconds a flow may go without one frame accepted by its NIC (every send ENOBUFS/EAGAIN)
#: before it stops as ``tx_refused``: a full queue drains in milliseconds, an egress filter
#: that drops everything never does
TX_STALL_S = 1.0
#: ioctl: an interface's MTU (linux/sockios.h)
SIOCGIFMTU = 0x8921
IFF_UP = 0x1

# Classic BPF, the equivalent of
#   tcpdump -dd 'ip and (icmp or (udp dst port 4791 and ip[6:2] & 0x1fff = 0))'
# (libpcap is not a dependency, so the 12 instructions are spelled out; offsets are Ethernet).
_BPF = [
    (0x28, 0, 0, 12),  # 0 ldh [12]                ethertype
    (0x15, 0, 9, 0x0800),  # 1 jeq IPv4 ? 2 : drop
    (0x30, 0, 0, 23),  # 2 ldb [23]                IP protocol
    (0x15, 6, 0, 1),  # 3 jeq ICMP -> accept
    (0x15, 0, 6, 17),  # 4 jeq UDP ? 5 : drop
    (0x28, 0, 0, 20),  # 5 ldh [20]                flags + fragment offset
    (0x45, 4, 0, 0x1FFF),  # 6 jset frag -> drop
    (0xB1, 0, 0, 14),  # 7 ldxb 4*([14]&0xf)      IP header length
    (0x48, 0, 0, 16),  # 8 ldh [x+16]              UDP destination port
    (0x15, 0, 1, roce.ROCEV2_UDP_PORT),  # 9 jeq 4791 ? accept : drop
    (0x06, 0, 0, 0x40000),  # 10 accept
    (0x06, 0, 0, 0),  # 11 drop
]


def _attach_bpf(sock: socket.socket) -> None:
    prog = b"".join(struct.pack("HBBI", *ins) for ins in _BPF)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(_BPF), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def raise_nofile(need: int) -> int:
    """Make sure this process may hold ``need`` more file descriptors than it has open: raise
    the soft ``RLIMIT_NOFILE`` to the hard limit when the soft one is short (stock Debian's soft
    limit is 1024; the engine holds about 11 sockets per server of 8 NICs, plus one per switch).
    Returns the soft limit now in force. Raises RailabError when even the hard limit is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 64
    want = in_use + need + 16
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            raise RailabError(f"the traffic engine needs {need} file descriptors and this process "
                              f"may open {hard - in_use} more (RLIMIT_NOFILE hard limit {hard}): "
                              "raise it (ulimit -Hn, /etc/security/limits.conf)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def close_sockets(socks: list[socket.socket], *, workers: int = 64) -> None:
    """Close ``socks``, the AF_PACKET ones from ``workers`` threads at once.

    Closing a packet socket waits for an RCU grace period in the kernel (``packet_release``
    calls ``synchronize_net()``): 7-10 ms each, so the ~5,100 of an engine on the 4096-GPU
    fabric took 57 s one after another; concurrent closes share grace periods (measured: 2,000
    in 0.7 s from 64 threads)."""
    packet = [s for s in socks if s.family == socket.AF_PACKET and s.fileno() >= 0]
    for s in socks:
        if s.family != socket.AF_PACKET:
            s.close()
    if len(packet) <= 4:
        for s in packet:
            s.close()
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(packet))) as pool:
        list(pool.map(socket.socket.close, packet))


@contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """Run the body with the calling thread in network namespace ``ns`` (``/run/netns/<ns>`` or
    a path), then return to the original namespace. Sockets created inside keep ``ns``.

    Raises RailabError when the namespace does not exist (the lab is not up).
    """
    if not ns:
        raise RailabError("no network namespace for this node (a real device, e.g. an SSH "
                          "inventory): the traffic engine runs only on lab namespaces")
    path = ns if ns.startswith("/") else f"/run/netns/{ns}"
    try:
        target = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise RailabError(f"network namespace {ns!r} not found: is the lab up? "
                          "(`railab up LABDIR`, then `railab status`)") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        setns(target, CLONE_NEWNET)
        try:
            yield
        finally:
            setns(home, CLONE_NEWNET)
    finally:
        os.close(target)
        os.close(home)


@dataclass
class Hop:
    """One traceroute hop: TTL sent, replying address, lab node name, RTT (ms), kind
    (``time-exceeded``, ``destination``, ``unreachable``, ``timeout``, or ``nic-down`` /
    ``mtu-exceeded`` / ``tx-refused`` when the source NIC is administratively down / has an MTU
    below the probe / refused it (ENOBUFS: an egress filter) and the probe was not sent:
    ``node`` names it) and, for
    ``unreachable``, the ICMP destination-unreachable code (RFC 792: 0 net, 1 host, 3 port;
    RFC 1812: 13 administratively prohibited)."""

    ttl: int
    address: str | None
    node: str | None
    rtt_ms: float | None
    kind: str
    code: int | None = None


def _natural_port(name: str) -> tuple:
    """``eth10`` after ``eth9``: a port name's sort key by its number."""
    head = name.rstrip("0123456789")
    return (head, int(name[len(head):] or 0))


@dataclass
class FlowResult:
    """What happened to one flow.

    ``sent``/``delivered``/``lost``/``duplicates``/``out_of_order``/``icrc_errors``: packets.
    ``max_psn_distance``: the receiver's largest PSN distance, highest PSN seen minus a late
    packet's PSN (the reorder buffer a NIC would need, in packets; 0 when in order).
    ``ttl``: lowest received TTL; ``hops_ttl``: 64 - ttl. ``hops_counters``: switches whose port
    counters moved (None unless measured). ``path``: ``node:egress-port`` from the source leaf
    to the last switch (measured only). ``uplinks``: leaf->spine links crossed
    (``leaf:ethX>spine:ethY``; several when a switch sprayed the flow). ``sprayed``: where a
    switch split the flow over several egress ports with none carrying half of it (packet
    spraying, railab.testbed.lb): ``{"node:port": packets}`` of that switch, measured on the
    port counters; empty otherwise. ``unreachable_at``: node that sent ICMP unreachable.
    ``receiver_drops``: packets the receive sockets dropped (host overload, not fabric loss).
    ``nic_down``: ``srv1:eth1`` when the flow's source or destination NIC is administratively
    down (the source: nothing more was sent; the destination: nothing could arrive), else None.
    ``mtu_exceeded``: ``srv1:eth1`` when that NIC's MTU is below the flow's packets (the source:
    the kernel refused the frame, EMSGSIZE, and nothing more was sent; the destination: the
    packets that were lost were larger than it takes), and ``mtu_note`` the sizes in words.
    ``port_missing``: ``srv2:eth3`` or ``g2-leaf1:eth1`` when an interface the flow needs (a
    NIC at either end or the leaf port it is cabled to) does not exist (a pulled cable, a
    far end parked by carrier loss): nothing was sent. ``tx_refused``: ``srv1:eth1`` when the
    kernel refused every frame of the flow on that NIC for :data:`TX_STALL_S` (ENOBUFS: an
    egress filter dropping everything, ``railab fault grey-loss`` on a server NIC): the flow
    stopped there.
    """

    flow: Flow
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    max_psn_distance: int = 0
    icrc_errors: int = 0
    ttl: int | None = None
    acks: int = 0
    hops_counters: int | None = None
    switches: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    uplinks: list[str] = field(default_factory=list)
    spines: list[str] = field(default_factory=list)
    sprayed: dict[str, int] = field(default_factory=dict)
    unreachable_at: str | None = None
    receiver_drops: int = 0
    seconds: float = 0.0
    egress: str | None = None
    ingress: str | None = None
    expected_ingress: str | None = None
    wrong_ingress: int = 0
    arrived_from: str | None = None
    expected_from: str | None = None
    egress_to: str | None = None
    expected_egress_to: str | None = None
    nic_down: str | None = None
    mtu_exceeded: str | None = None
    mtu_note: str | None = None
    port_missing: str | None = None
    tx_refused: str | None = None

    @property
    def miswired(self) -> str | None:
        """Why the flow's packets did not use the NICs/leaf ports ``lab.json`` assigns it (a
        crossed or swapped cable, a renamed interface), or None. Checked on the sender (the
        interface its socket actually sent on; with ``measure``, the leaf port whose counters
        took the packets) and on the receiver (ingress interface, and the leaf port MAC the
        frames came from)."""
        f = self.flow
        why = []
        want_tx = f"{f.src[0]}:eth{f.src_nic}" if f.path_class != "intra-server" else None
        if want_tx and self.egress and self.egress != want_tx:
            why.append(f"sent on {self.egress}, expected eth{f.src_nic} (NIC {f.src_nic})")
        if self.egress_to and self.expected_egress_to and self.egress_to != self.expected_egress_to:
            why.append(f"left {f.src[0]}:eth{f.src_nic} towards {self.egress_to}, expected "
                       f"{self.expected_egress_to}")
        if self.wrong_ingress and self.expected_ingress:
            exp_if = self.expected_ingress.split(":", 1)[1]
            why.append(f"arrived on {self.ingress}, expected {exp_if} (NIC {f.dst_nic})")
        if self.arrived_from and self.expected_from and self.arrived_from != self.expected_from:
            why.append(f"arrived from {self.arrived_from}, expected {self.expected_from}")
        return ": ".join(["; ".join(why), "check cabling"]) if why else None

    @property
    def hops_ttl(self) -> int | None:
        return None if self.ttl is None else roce.DEFAULT_TTL - self.ttl

    @property
    def observed_hops(self) -> int | None:
        """Hops by TTL, or None when nothing arrived."""
        return self.hops_ttl

    @property
    def ok(self) -> bool:
        """True when the flow behaved as the design says: unreachable-by-design flows deliver
        nothing; every other flow delivers everything, intact, with the expected hop count by
        TTL and (when measured) by port counters."""
        exp = self.flow.expected_hops
        if self.port_missing:
            return exp is None
        if self.nic_down or self.mtu_exceeded or self.tx_refused:
            return False
        if exp is None:
            return self.delivered == 0
        if self.miswired:
            return False
        if self.lost or self.icrc_errors or self.duplicates or self.delivered != self.sent:
            return False
        if self.hops_ttl != exp:
            return False
        return self.hops_counters is None or self.hops_counters == exp

    @property
    def verdict(self) -> str:
        exp = self.flow.expected_hops
        if self.port_missing:
            return (f"{self.port_missing} does not exist (cable pulled or unplugged): not sent"
                    + (" (unreachable as expected)" if exp is None else ""))
        if self.nic_down:
            f = self.flow
            src = self.nic_down == f"{f.src[0]}:eth{f.src_nic}" and f.path_class != "intra-server"
            return (f"{self.nic_down} is down: "
                    + ("not sent" if src and self.sent == 0 else
                       f"sent {self.sent} then stopped" if src else f"lost {self.lost}"))
        if self.tx_refused:
            return (f"{self.tx_refused} refused every frame for {TX_STALL_S:g} s (ENOBUFS: an "
                    f"egress filter or a full queue drops them); sent {self.sent}, lost {self.lost}")
        if self.mtu_exceeded:
            return (f"MTU: {self.mtu_note or self.mtu_exceeded}; "
                    + (f"sent {self.sent}, lost {self.lost}" if self.sent else "not sent"))
        if exp is None:
            return "unreachable (expected)" if self.delivered == 0 else "delivered but expected unreachable"
        if self.ok:
            return "ok"
        why = []
        if self.miswired:
            why.append(self.miswired)
        if self.lost:
            why.append(f"lost {self.lost}")
        if self.icrc_errors:
            why.append(f"ICRC errors {self.icrc_errors}")
        if self.duplicates:
            why.append(f"duplicates {self.duplicates}")
        if self.delivered and self.hops_ttl != exp:
            why.append(f"hops {self.hops_ttl} != {exp}")
        if self.hops_counters is not None and self.hops_counters != exp:
            why.append(f"counter hops {self.hops_counters} != {exp}")
        return ", ".join(why) or "failed"

    def to_dict(self) -> dict:
        f = self.flow
        return {
            "flow": f.name, "class": f.path_class, "src": f"{f.src[0]}:gpu{f.src[1]}",
            "dst": f"{f.dst[0]}:gpu{f.dst[1]}", "src_nic": f.src_nic, "dst_nic": f.dst_nic,
            "nvlink": f.nvlink, "pxn": f.pxn, "qp": f.qp, "sent": self.sent,
            "delivered": self.delivered, "lost": self.lost, "duplicates": self.duplicates,
            "out_of_order": self.out_of_order, "max_psn_distance": self.max_psn_distance,
            "icrc_errors": self.icrc_errors,
            "acks": self.acks, "ttl": self.ttl, "hops_expected": f.expected_hops,
            "hops_ttl": self.hops_ttl, "hops_counters": self.hops_counters,
            "switches": self.switches, "path": self.path, "uplinks": self.uplinks,
            "sprayed": self.sprayed,
            "spines": self.spines, "unreachable_at": self.unreachable_at,
            "receiver_drops": self.receiver_drops, "egress": self.egress,
            "egress_to": self.egress_to, "ingress": self.ingress,
            "arrived_from": self.arrived_from, "miswired": self.miswired,
            "nic_down": self.nic_down, "mtu_exceeded": self.mtu_exceeded,
            "port_missing": self.port_missing, "tx_refused": self.tx_refused, "ok": self.ok, "verdict": self.verdict,
        }


def flow_qpns(flow: Flow) -> tuple[int, int]:
    """The flow's logical (source QP, destination QP): a deterministic function of its endpoints
    and ``qp`` index, so its UDP source port -- hence its ECMP path -- is the same in every run
    and for its traceroute probes. (The QPNs carried in BTH are per-run dispatch keys.)"""
    h = zlib.crc32(f"{flow.src[0]}:{flow.src[1]}>{flow.dst[0]}:{flow.dst[1]}#{flow.qp}".encode())
    return 0x100 + (h & 0xFFFF), 0x100 + (h >> 16)


class _FlowState:
    __slots__ = ("flow", "res", "seq", "tx", "start_psn", "sent", "got", "next_psn", "dqpn",
                 "sqpn", "ack_tpl", "ack_tx", "src_addr", "dst_addr", "last_rx", "t0",
                 "want_if", "want_mac", "max_idx", "stall")


class Engine:
    """Drives every server NIC of a running lab from this process.

    ``spec``: the lab's ``LabSpec``; ``netns_of(node) -> namespace`` defaults to
    ``clab-<lab>-<node>`` (both runtimes). Use as a context manager; ``run(flows)`` returns one
    :class:`FlowResult` per flow. Raises RailabError when a namespace is missing; a server NIC
    or leaf server port that does not exist (a pulled cable) is listed in :attr:`missing` and
    the flows that need it fail with ``FlowResult.port_missing``.

    ``stop``: an Event a SIGINT handler sets (see :func:`sigint_event`); the engine raises
    KeyboardInterrupt at its next safe point (every receive poll, every namespace opened), so a
    Ctrl-C never lands inside pyroute2 or a garbage-collector callback, where it can be lost.
    """

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str] | None = None, *,
                 ttl: int = roce.DEFAULT_TTL, stop: threading.Event | None = None) -> None:
        self.spec = spec
        #: The lab's QoS profile (lab.json ``qos``, railab.topologies.qos): the DSCP of every
        #: packet the engine sends.
        self.qos = spec.qos
        self._stop = stop
        self.netns_of = netns_of or (lambda node: netns_name(spec.name, node))
        self.ttl = ttl
        self._tx: dict[tuple[str, int], socket.socket] = {}
        self._lo: dict[str, socket.socket] = {}
        self._rx: dict[int, tuple[str, socket.socket]] = {}
        self._sinks: list[socket.socket] = []
        self._nl: dict[str, Rtnl] = {}  # switch -> raw rtnetlink socket (links, counters)
        self._ipr: dict[str, Any] = {}  # switch -> pyroute2, opened by set_link only
        self._links: dict[str, dict[str, tuple[int, str]]] = {}  # switch -> ifname -> (idx, MAC)
        self._ifnames: dict[str, dict[int, str]] = {}  # switch -> ifindex -> ifname
        self._src_mac: dict[tuple[str, int], str] = {}
        self._gw_mac: dict[tuple[str, int], str] = {}
        self._mac_port: dict[bytes, str] = {}  # leaf server-port MAC -> "leaf:port"
        self._ep: select.epoll | None = None
        self._by_qpn: dict[int, tuple[_FlowState, bool]] = {}
        self._probes: dict[tuple[int, int], dict] = {}
        self._qpn_next = random.randrange(0x10000, 0x800000) & ~1
        self._buf = bytearray(16384)
        self._peer = spec.peers
        #: interfaces lab.json plans that did not exist at :meth:`open` (``srv2:eth3``,
        #: ``g2-leaf1:eth1``): a flow that needs one is not sent (``FlowResult.port_missing``)
        self.missing: set[str] = set()
        self._roles = {n.name: n.role for n in spec.nodes}
        self._addr_node: dict[str, str] = {}
        for n in spec.nodes:
            if n.loopback:
                self._addr_node[str(n.loopback.ip)] = n.name
        for nic in spec.nics:
            self._addr_node[str(nic.gateway)] = nic.leaf
            self._addr_node[str(nic.address.ip)] = f"{nic.server}:{nic.interface}"

    # ---- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Engine:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_stop(self) -> None:
        if self._stop is not None and self._stop.is_set():
            raise KeyboardInterrupt

    def open(self) -> None:
        """Open every socket (server NICs, lo, receivers, UDP sinks, switch netlink).

        Each namespace is entered once: a switch's links are dumped once there and indexed
        (``ifname -> (ifindex, MAC)``), and every NIC's gateway MAC is looked up in that index;
        a server's NICs come from :meth:`LabSpec.nics_of`. RLIMIT_NOFILE is raised to the hard
        limit first when the sockets would not fit under the soft one (:func:`raise_nofile`).
        """
        servers = self.spec.by_role("server")
        switches = [n for n in self.spec.nodes if n.role != "server"]
        raise_nofile(sum(3 + len(self.spec.nics_of(s.name)) for s in servers) + 2 * len(switches) + 1)
        self._ep = select.epoll()
        for node in switches:
            self._check_stop()
            with in_netns(self.netns_of(node.name)):
                self._nl[node.name] = Rtnl()
            self._index_links(node.name)
        for srv in servers:
            self._check_stop()
            with in_netns(self.netns_of(srv.name)):
                rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
                self._rx[rx.fileno()] = (srv.name, rx)
                _attach_bpf(rx)
                try:
                    rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                except OSError:
                    pass
                rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
                rx.setblocking(False)
                self._ep.register(rx.fileno(), select.EPOLLIN)
                sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._sinks.append(sink)
                sink.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sink.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sink.bind(("0.0.0.0", roce.ROCEV2_UDP_PORT))
                sink.setblocking(False)
                lo = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                self._lo[srv.name] = lo
                lo.bind(("lo", 0))
                for nic in self.spec.nics_of(srv.name):
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                    try:
                        s.bind((nic.interface, 0))
                    except OSError as e:
                        s.close()
                        if e.errno == errno.ENODEV:  # a pulled cable: the flows via it fail
                            self.missing.add(f"{srv.name}:{nic.interface}")
                            continue
                        raise RailabError(f"{srv.name}: cannot open {nic.interface} ({e}); "
                                          "is the lab fully up?") from None
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                    self._tx[(srv.name, nic.nic)] = s
                    self._src_mac[(srv.name, nic.nic)] = s.getsockname()[4].hex(":")
        for nic in self.spec.nics:
            if nic.leaf_port not in self._links.get(nic.leaf, {}) and nic.leaf in self._links:
                self.missing.add(f"{nic.leaf}:{nic.leaf_port}")  # pulled or parked far end
                continue
            mac = self._link_mac(nic.leaf, nic.leaf_port)
            self._gw_mac[(nic.server, nic.nic)] = mac
            self._mac_port[bytes.fromhex(mac.replace(":", ""))] = f"{nic.leaf}:{nic.leaf_port}"

    def close(self) -> None:
        """Close every socket; idempotent. The packet sockets close in parallel
        (:func:`close_sockets`)."""
        close_sockets(list(self._tx.values()) + list(self._lo.values()) + self._sinks
                      + [s for _, s in self._rx.values()])
        for nl in self._nl.values():
            nl.close()
        for ipr in self._ipr.values():
            ipr.close()
        if self._ep is not None:
            self._ep.close()
        self._tx, self._lo, self._rx, self._sinks, self._ep = {}, {}, {}, [], None
        self._nl, self._ipr, self._links, self._ifnames = {}, {}, {}, {}

    # ---- switch state ----------------------------------------------------------------------
    def _index_links(self, node: str) -> None:
        """(Re)read ``node``'s links: one RTM_GETLINK dump, indexed by name and by ifindex."""
        links = self._nl[node].links()
        self._links[node] = {name: (idx, mac) for idx, (name, mac) in links.items()}
        self._ifnames[node] = {idx: name for idx, (name, _mac) in links.items()}

    def _link_mac(self, node: str, ifname: str) -> str:
        if node not in self._links:
            raise RailabError(f"{node!r} is not a switch of lab {self.spec.name!r}")
        link = self._links[node].get(ifname)
        if link is None:
            raise RailabError(f"{node} has no interface {ifname}: is the lab fully up?")
        return link[1]

    def port_stats(self) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        """``(switch, ifname) -> (rx_packets, tx_packets, rx_bytes, tx_bytes)`` for every switch
        port (``lo`` excluded): one RTM_GETSTATS dump per switch, a few ms for all 24 switches of
        ``rail-optimized-1024-full``, so a measured flow's counter window stays short. A port
        created after :meth:`open` triggers a re-read of that switch's link names."""
        out = {}
        for node, nl in self._nl.items():
            names = self._ifnames[node]
            stats = nl.stats()
            if any(idx not in names for idx in stats):
                self._index_links(node)
                names = self._ifnames[node]
            for idx, st in stats.items():
                name = names.get(idx)
                if name is not None and name != "lo":
                    out[(node, name)] = st
        return out

    def counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        """``(switch, ifname) -> (rx_packets, tx_packets)`` for every switch port."""
        return {k: (v[0], v[1]) for k, v in self.port_stats().items()}

    def link_flags(self, node: str) -> dict[str, tuple[int, str]]:
        """``ifname -> (ifi_flags, operstate)`` of switch ``node``, read now (one raw
        RTM_GETLINK dump, :meth:`Rtnl.link_flags`); :func:`railab.checks.base.link_status` turns
        an entry into ``up`` / ``admin-down`` / ``carrier-lost``."""
        if node not in self._nl:
            raise RailabError(f"{node!r} is not a switch of lab {self.spec.name!r}")
        return self._nl[node].link_flags()

    def set_link(self, node: str, ifname: str, up: bool) -> None:
        """Set a switch port administratively up or down (pyroute2, in the switch's namespace)."""
        if node not in self._nl:
            raise RailabError(f"{node!r} is not a switch of lab {self.spec.name!r}")
        ipr = self._ipr.get(node)
        if ipr is None:
            with in_netns(self.netns_of(node)):
                from pyroute2 import IPRoute  # here, not at import: the package import costs ~0.7 s

                ipr = self._ipr[node] = IPRoute()
        idx = ipr.link_lookup(ifname=ifname)
        if not idx:
            raise RailabError(f"{node} has no interface {ifname}")
        ipr.link("set", index=idx[0], state="up" if up else "down")

    def node_of(self, address: str) -> str | None:
        """Lab node owning an IPv4 address (switch loopback, leaf side of a NIC /31, server NIC)."""
        return self._addr_node.get(address)

    # ---- flows -----------------------------------------------------------------------------
    def missing_for(self, flow: Flow) -> str | None:
        """The first interface ``flow`` needs that does not exist (:attr:`missing`: its source
        NIC, the leaf port it is cabled to, the destination's leaf port, the destination NIC),
        as ``node:ifname``; None when all exist or the flow stays inside its server."""
        if not self.missing or flow.path_class == "intra-server":
            return None
        src = self.spec.nic(flow.src[0], flow.src_nic)
        dst = self.spec.nic(flow.dst[0], flow.dst_nic)
        return next((x for x in (f"{src.server}:{src.interface}", f"{src.leaf}:{src.leaf_port}",
                                 f"{dst.leaf}:{dst.leaf_port}", f"{dst.server}:{dst.interface}")
                     if x in self.missing), None)

    def require(self, flow: Flow) -> None:
        """Raise RailabError naming the interface ``flow`` needs that does not exist
        (:meth:`missing_for`): the load and probe-stream engines cannot run such a flow."""
        gone = self.missing_for(flow)
        if gone is not None:
            raise RailabError(f"flow {flow.name} needs {gone}, which does not exist (cable pulled "
                              f"or unplugged): railab check {self.spec.name} names the link; "
                              "heal it or pick other endpoints")

    def _prepare(self, flow: Flow, acks: bool) -> _FlowState:
        if not flow.path_class:
            raise RailabError(f"flow {flow.name} is not routed: build it with "
                              "railab.traffic.patterns.route() or flows_for()")
        if not 256 <= flow.mtu <= 4096:
            raise RailabError(f"flow {flow.name}: mtu must be 256-4096 (got {flow.mtu})")
        if flow.size < 1:
            raise RailabError(f"flow {flow.name}: size must be at least 1 byte (got {flow.size})")
        if flow.messages < 1:
            raise RailabError(f"flow {flow.name}: messages must be at least 1 (got {flow.messages})")
        st = _FlowState()
        st.flow = flow
        st.res = FlowResult(flow=flow)
        st.dqpn = self._qpn_next
        st.sqpn = self._qpn_next + 1
        self._qpn_next = (self._qpn_next + 2) & MASK24 or 0x10000
        src = self.spec.nic(flow.src[0], flow.src_nic)
        dst = self.spec.nic(flow.dst[0], flow.dst_nic)
        intra = flow.path_class == "intra-server"
        st.src_addr = str(src.address.ip)
        st.dst_addr = str(dst.address.ip)
        gone = self.missing_for(flow)
        if gone is not None:  # nothing can be sent: the flow fails naming the interface
            st.res.port_missing = gone
            st.tx = st.ack_tx = None
            st.want_if = st.want_mac = None
            st.seq, st.got, st.sent, st.next_psn, st.last_rx, st.ack_tpl = [], bytearray(), 0, 0, 0.0, None
            st.stall = None
            st.start_psn = 0
            return st
        if intra:
            st.tx = self._lo[flow.src[0]]
            smac = dmac = "00:00:00:00:00:00"
            st.ack_tx = st.tx
            st.want_if = st.want_mac = None
        else:
            st.tx = self._tx[(flow.src[0], flow.src_nic)]
            smac = self._src_mac[(flow.src[0], flow.src_nic)]
            dmac = self._gw_mac[(flow.src[0], flow.src_nic)]
            st.ack_tx = self._tx[(flow.dst[0], flow.dst_nic)]
            # lab.json: NIC n is eth<n>, cabled to nic.leaf:nic.leaf_port. The socket's current
            # interface name (renames show) is what the packets really leave from.
            st.res.egress = f"{flow.src[0]}:{st.tx.getsockname()[0]}"
            st.want_if = dst.interface
            st.want_mac = bytes.fromhex(self._gw_mac[(flow.dst[0], flow.dst_nic)].replace(":", ""))
            st.res.expected_ingress = f"{flow.dst[0]}:{dst.interface}"
            st.res.expected_from = f"{dst.leaf}:{dst.leaf_port}"
            st.res.expected_egress_to = f"{src.leaf}:{src.leaf_port}"
        lsq, ldq = flow_qpns(flow)
        sport = flow.sport if flow.sport is not None else roce.udp_sport(lsq, ldq)  # a caller's fixed port
        common = dict(src_mac=smac, dst_mac=dmac, src_ip=st.src_addr, dst_ip=st.dst_addr,
                      dst_qpn=st.dqpn, sport=sport, psn=0, ttl=self.ttl, qos=self.qos)
        st.start_psn = (st.dqpn * 2654435761) & MASK24
        payload = bytes((i * 31 + flow.qp) & 0xFF for i in range(flow.mtu))
        tpl: dict[tuple[int, int], roce.FrameTemplate] = {}

        def t(op: int, n: int) -> roce.FrameTemplate:
            if (op, n) not in tpl:
                tpl[(op, n)] = roce.FrameTemplate(roce.roce_packet(
                    opcode=op, payload=payload[:n], dmalen=flow.size, va=0x7F0000000000,
                    rkey=st.dqpn, **common))
            return tpl[(op, n)]

        ppm = flow.packets_per_message
        last_len = flow.size - (ppm - 1) * flow.mtu
        seq = []
        for m in range(flow.messages):
            write = flow.op == "write" or (flow.op == "mixed" and m % 2 == 0)
            if ppm == 1:
                seq.append(t(roce.RC_RDMA_WRITE_ONLY if write else roce.RC_SEND_ONLY, last_len))
                continue
            first, mid, last = ((roce.RC_RDMA_WRITE_FIRST, roce.RC_RDMA_WRITE_MIDDLE,
                                 roce.RC_RDMA_WRITE_LAST) if write else
                                (roce.RC_SEND_FIRST, roce.RC_SEND_MIDDLE, roce.RC_SEND_LAST))
            seq.append(t(first, flow.mtu))
            seq.extend(t(mid, flow.mtu) for _ in range(ppm - 2))
            seq.append(t(last, last_len))
        st.seq = seq
        st.got = bytearray(len(seq))
        st.sent = 0
        st.next_psn = 0
        st.max_idx = 0
        st.last_rx = 0.0
        st.ack_tpl = None
        st.stall = None
        if acks:
            back = dict(src_mac=smac if intra else self._src_mac[(flow.dst[0], flow.dst_nic)],
                        dst_mac=dmac if intra else self._gw_mac[(flow.dst[0], flow.dst_nic)],
                        src_ip=st.dst_addr, dst_ip=st.src_addr, dst_qpn=st.sqpn,
                        sport=roce.udp_sport(ldq, lsq), psn=0, ttl=self.ttl, qos=self.qos)
            st.ack_tpl = roce.FrameTemplate(roce.roce_packet(
                opcode=roce.RC_ACKNOWLEDGE, syndrome=0x1F, msn=0, **back))
        self._by_qpn[st.dqpn] = (st, False)
        self._by_qpn[st.sqpn] = (st, True)
        return st

    def _send_some(self, st: _FlowState, budget: int) -> int:
        n = min(budget, len(st.seq) - st.sent)
        if n <= 0:
            return 0
        ppm = st.flow.packets_per_message
        send = st.tx.send
        sent0 = st.sent
        for _ in range(n):
            i = st.sent
            frame = st.seq[i].frame((st.start_psn + i) & MASK24, (i + 1) % ppm == 0)
            try:
                send(frame)
            except BlockingIOError:
                self._stalled(st, sent0)
                break
            except OSError as e:
                if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                    self._stalled(st, sent0)
                    break
                if e.errno == errno.ENETDOWN:  # the source NIC is down: the flow stops here
                    st.res.nic_down = f"{st.flow.src[0]}:{st.tx.getsockname()[0]}"
                    break
                if e.errno == errno.EMSGSIZE:  # larger than the source NIC's MTU: stop here
                    nic = f"{st.flow.src[0]}:{st.tx.getsockname()[0]}"
                    st.res.mtu_exceeded = nic
                    st.res.mtu_note = (f"{len(frame) - 14} B packets exceed {nic}'s MTU "
                                       f"{self.nic_mtu(st.flow.src[0], st.flow.src_nic)} B "
                                       "(refused at the sender, EMSGSIZE)")
                    break
                raise
            st.sent += 1
        if st.sent > sent0:
            st.stall = None
        return n

    def _stalled(self, st: _FlowState, sent0: int) -> None:
        """A send the kernel refused for now (ENOBUFS / EAGAIN: a full queue, retried). When
        nothing of the flow has gone out for :data:`TX_STALL_S` (an egress filter dropping
        every frame also answers ENOBUFS), the flow stops: ``FlowResult.tx_refused``."""
        now = time.monotonic()
        if st.sent > sent0 or st.stall is None:
            st.stall = now
        elif now - st.stall > TX_STALL_S:
            st.res.tx_refused = f"{st.flow.src[0]}:{st.tx.getsockname()[0]}"

    def nic_mtu(self, server: str, nic: int) -> int | None:
        """The MTU (bytes, IP packet) of NIC ``nic`` of ``server``, read with SIOCGIFMTU in the
        server's namespace through its send socket; None when it cannot be read."""
        s = self._tx.get((server, nic))
        if s is None:
            return None
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFMTU,
                              struct.pack("16si12x", s.getsockname()[0].encode(), 0))
        except OSError:
            return None
        return struct.unpack("16si12x", raw)[1]

    def nic_is_down(self, server: str, nic: int) -> str | None:
        """``srv1:eth1`` when NIC ``nic`` of ``server`` is administratively down (IFF_UP clear,
        read with SIOCGIFFLAGS in the server's namespace through its send socket), else None."""
        s = self._tx.get((server, nic))
        if s is None:
            return None
        ifname = s.getsockname()[0]
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH14x", ifname.encode(), 0))
        except OSError:
            return None
        flags = struct.unpack("16sH14x", raw)[1]
        return None if flags & IFF_UP else f"{server}:{ifname}"

    def _handle(self, buf: bytearray, n: int, now: float, ifname: str = "") -> None:
        if n < 42 or buf[12] != 0x08 or buf[13] != 0x00:
            return
        ihl = (buf[14] & 0x0F) * 4
        proto = buf[23]
        if proto == 17:
            o = 14 + ihl + 8
            if n < o + 16:
                return
            dqpn = (buf[o + 5] << 16) | (buf[o + 6] << 8) | buf[o + 7]
            psn = (buf[o + 9] << 16) | (buf[o + 10] << 8) | buf[o + 11]
            hit = self._by_qpn.get(dqpn)
            if hit is None:
                probe = self._probes.get((dqpn, psn))
                if probe is not None and probe.get("kind") is None:
                    probe.update(kind="destination", addr=socket.inet_ntoa(buf[30:34]), t=now)
                return
            st, is_ack = hit
            res = st.res
            ip_len = (buf[16] << 8) | buf[17]
            if is_ack:
                if roce.check_icrc(memoryview(buf)[:14 + ip_len]):
                    res.acks += 1
                return
            if not roce.check_icrc(memoryview(buf)[:14 + ip_len]):
                res.icrc_errors += 1
                return
            idx = (psn - st.start_psn) & MASK24
            if idx >= len(st.got):
                res.duplicates += 1  # not a PSN of this flow: count as stray
                return
            if st.got[idx]:
                res.duplicates += 1
                return
            st.got[idx] = 1
            res.delivered += 1
            if st.want_if is not None:
                if ifname != st.want_if:
                    res.wrong_ingress += 1
                    res.ingress = f"{st.flow.dst[0]}:{ifname}"
                elif res.ingress is None:
                    res.ingress = f"{st.flow.dst[0]}:{ifname}"
                if buf[6:12] != st.want_mac and res.arrived_from is None:
                    res.arrived_from = self._mac_port.get(bytes(buf[6:12]), bytes(buf[6:12]).hex(":"))
            if idx != st.next_psn:
                res.out_of_order += 1
            st.next_psn = idx + 1
            # reorder depth (issue 30): how far behind the highest PSN seen this one arrived
            if idx < st.max_idx:
                res.max_psn_distance = max(res.max_psn_distance, st.max_idx - idx)
            else:
                st.max_idx = idx
            ttl = buf[22]
            if res.ttl is None or ttl < res.ttl:
                res.ttl = ttl
            st.last_rx = now
            if st.ack_tpl is not None and buf[o + 8] & 0x80:
                try:
                    st.ack_tx.send(st.ack_tpl.frame(psn))
                except OSError:
                    pass
        elif proto == 1:
            ic = 14 + ihl
            typ = buf[ic]
            if typ not in (3, 11) or n < ic + 8 + 20 + 8 + 12:
                return
            inner = ic + 8
            if buf[inner + 9] != 17:
                return
            o = inner + (buf[inner] & 0x0F) * 4 + 8
            dqpn = (buf[o + 5] << 16) | (buf[o + 6] << 8) | buf[o + 7]
            psn = (buf[o + 9] << 16) | (buf[o + 10] << 8) | buf[o + 11]
            src = socket.inet_ntoa(buf[26:30])
            probe = self._probes.get((dqpn, psn))
            if probe is not None and probe.get("kind") is None:
                probe.update(kind="time-exceeded" if typ == 11 else "unreachable", addr=src, t=now,
                             code=buf[ic + 1] if typ == 3 else None)
                return
            hit = self._by_qpn.get(dqpn)
            if hit is not None and typ == 3 and hit[0].res.unreachable_at is None:
                hit[0].res.unreachable_at = self.node_of(src) or src

    def poll(self, timeout: float = 0.0) -> int:
        """Receive and account every pending packet; wait up to ``timeout`` s for the first."""
        self._check_stop()
        return self.drain_rx(timeout, self._handle)

    def drain_rx(self, timeout: float, handle: Callable[[bytearray, int, float, str], None]) -> int:
        """Read every pending frame of the server receive sockets (waiting up to ``timeout`` s
        for the first), skipping the engine's own outgoing copies, and pass each to
        ``handle(buf, length, monotonic_now, ifname)``; returns how many were handled. ``buf``
        is reused: a handler keeps what it needs before returning."""
        assert self._ep is not None
        got = 0
        buf = self._buf
        for fd, _ in self._ep.poll(timeout):
            sock = self._rx[fd][1]
            while True:
                try:
                    n, addr = sock.recvfrom_into(buf)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue
                handle(buf, n, time.monotonic(), addr[0])
                got += 1
        return got

    def _drain_sinks(self) -> None:
        for s in self._sinks:
            try:
                while True:
                    s.recv(65536)
            except (BlockingIOError, OSError):
                pass

    def _rx_drops(self) -> int:
        total = 0
        for _, s in self._rx.values():
            raw = s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            total += struct.unpack("II", raw)[1]
        return total

    def _run_batch(self, states: list[_FlowState], timeout: float, batch: int) -> None:
        t0 = time.monotonic()
        for st in states:
            st.t0 = t0
        active = list(states)
        while active:
            now = time.monotonic()
            for st in active:
                rate = st.flow.rate
                budget = batch if rate <= 0 else min(batch, int(rate * (now - t0)) + 1 - st.sent)
                if budget > 0:
                    self._send_some(st, budget)
            active = [st for st in active if st.sent < len(st.seq) and st.res.nic_down is None
                      and st.res.mtu_exceeded is None and st.res.tx_refused is None]
            self.poll(0)
            if active and all(st.flow.rate > 0 for st in active):
                time.sleep(0.0005)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [st for st in states if st.res.delivered < st.sent or
                       (st.ack_tpl is not None and st.res.acks < st.flow.messages)]
            if not pending:
                break
            self.poll(min(0.02, max(0.0, deadline - time.monotonic())))
        self.poll(0)
        self._drain_sinks()
        end = time.monotonic()
        for st in states:
            st.res.sent = st.sent
            st.res.lost = st.sent - st.res.delivered
            st.res.seconds = end - st.t0
            if st.res.lost and st.res.nic_down is None and st.flow.path_class != "intra-server":
                st.res.nic_down = self.nic_is_down(st.flow.dst[0], st.flow.dst_nic)
            if (st.res.lost and st.res.nic_down is None and st.res.mtu_exceeded is None
                    and st.flow.path_class != "intra-server"):
                self._dst_mtu(st)

    def _dst_mtu(self, st: _FlowState) -> None:
        """A flow that lost packets larger than its destination NIC's MTU: the NIC dropped
        them (a veth drops a frame longer than its MTU as it arrives): name it."""
        f = st.flow
        mtu = self.nic_mtu(f.dst[0], f.dst_nic)
        big = max((t.size for t in st.seq), default=14) - 14  # Ethernet header off: the IP packet
        if mtu is not None and big > mtu:
            nic = f"{f.dst[0]}:{self._tx[(f.dst[0], f.dst_nic)].getsockname()[0]}"
            st.res.mtu_exceeded = nic
            st.res.mtu_note = f"{big} B packets exceed {nic}'s MTU {mtu} B (dropped on arrival)"

    def run(self, flows: list[Flow], *, measure: bool = False, acks: bool = True,
            timeout: float = 0.5, batch: int = 64) -> list[FlowResult]:
        """Send every flow and account what arrived. Returns results in flow order.

        ``measure``: run flows one at a time with switch port counters read before/after
        (hop count by counters, path, uplink, spine); ACKs are then suppressed. Otherwise all
        flows run interleaved (``batch`` packets per flow per round) with an ACK per message.
        ``timeout``: seconds to wait after the last packet for stragglers (unreachable flows
        always cost this long).
        """
        drops0 = self._rx_drops()
        self.poll(0)
        results = []
        try:
            if measure:
                for f in flows:
                    st = self._prepare(f, acks=False)
                    if st.res.port_missing:
                        results.append(st.res)
                        continue
                    before = self.port_stats()
                    self._run_batch([st], timeout, batch)
                    after = self.port_stats()
                    self._attribute(st, before, after)
                    results.append(st.res)
                    self._forget(st)
            else:
                states = [self._prepare(f, acks=acks) for f in flows]
                self._run_batch(states, timeout, batch)
                results = [st.res for st in states]
                for st in states:
                    self._forget(st)
        finally:
            drops = self._rx_drops() - drops0
        if drops:
            for r in results:
                r.receiver_drops = drops
        return results

    def _forget(self, st: _FlowState) -> None:
        self._by_qpn.pop(st.dqpn, None)
        self._by_qpn.pop(st.sqpn, None)

    @staticmethod
    def flow_deltas(before: dict, after: dict, frame_len: int) -> dict[tuple[str, str], tuple[int, int]]:
        """Per switch port, how many of a flow's packets crossed it between two
        :meth:`port_stats` reads: ``(rx, tx)``, each ``min(packets moved, bytes moved //
        frame_len)``, where ``frame_len`` is the flow's smallest frame (bytes, Ethernet header
        included, as veth counts them).

        The byte bound is the per-flow marker: the lab's own background (BFD 66 B, BGP
        keepalives 85 B, IPv6 RA/ND ~100 B) moves a port's packet counter as much as a probe
        flow does over a long enough window, but 10-16 of those weigh one 1 KiB RoCE frame, so
        background alone does not reach a flow's threshold (half its packets). The bound is
        weaker for flows of small frames (``size``/``mtu`` of a few hundred bytes); the hops
        check and ``railab traffic`` send 1 KiB frames."""
        zero = (0, 0, 0, 0)
        fl = max(1, frame_len)
        out = {}
        for k, a in after.items():
            b = before.get(k, zero)
            out[k] = (min(a[0] - b[0], (a[2] - b[2]) // fl), min(a[1] - b[1], (a[3] - b[3]) // fl))
        return out

    def _towards(self, flow: Flow, node: str, port: str) -> bool:
        """Whether egress ``node:port`` leads towards ``flow``'s destination NIC as
        ``lab.json`` cables it: on the destination leaf the port to that NIC, on another leaf
        an uplink, on a spine the port to the destination leaf."""
        dst = self.spec.nic(flow.dst[0], flow.dst_nic)
        peer = self._peer.get((node, port))
        if peer is None:
            return False
        role = self._roles.get(node)
        if role == "leaf":
            if node == dst.leaf:
                return peer == (dst.server, dst.interface)
            return self._roles.get(peer[0]) == "spine"
        if role == "spine":
            return peer[0] == dst.leaf
        return False

    def _attribute(self, st: _FlowState, before: dict, after: dict) -> None:
        """Counter hops and path of one measured flow, from a counter window scoped to it.

        Only the flow's own route counts: the walk starts at the leaf port ``lab.json`` cables
        the source NIC to and follows, switch by switch, the egress port that moved by at least
        half the flow's packets (bounded by bytes, :meth:`flow_deltas`), preferring among
        those the port towards the destination NIC. ``hops_counters`` is the number of switches
        on that walk when it reaches a server; a walk that cannot finish (an exact tie) while
        every packet arrived with the expected TTL leaves it None (no evidence against the
        flow). Other flows or background traffic elsewhere in the fabric move other ports
        and never count (issue 13: during a cable swap flows not touching srv5 failed with
        ``counter hops 4 != 3`` when every moved switch was counted). Intra-server flows count
        the leaves whose port from the source server took the packets (0 when NVLink kept
        them inside)."""
        res = st.res
        flow = st.flow
        thr = max(3, st.sent // 2)
        delta = self.flow_deltas(before, after, min(t.size for t in set(st.seq)))
        if flow.path_class == "intra-server":
            srv = flow.src[0]
            leaves = sorted({n.leaf for n in self.spec.nics_of(srv)
                             if delta.get((n.leaf, n.leaf_port), (0, 0))[0] >= thr})
            res.hops_counters = len(leaves)
            res.switches = leaves
            return
        src = self.spec.nic(flow.src[0], flow.src_nic)
        node, ingress = src.leaf, src.leaf_port
        if delta.get((node, ingress), (0, 0))[0] < thr:
            # the packets did not enter the leaf port lab.json cables this NIC to: find the
            # server-facing port of this server that took them (a crossed cable)
            took = sorted((rx, f"{n}:{ifn}") for (n, ifn), (rx, _tx) in delta.items()
                          if rx >= thr and self._peer.get((n, ifn), ("",))[0] == src.server)
            if took:
                res.egress_to = took[-1][1]
                node, ingress = took[-1][1].split(":", 1)
        path: list[str] = []
        reached = False
        for _ in range(len(self._roles) + 1):  # a walk visits each node once
            outs = sorted(((tx, ifn) for (n, ifn), (_rx, tx) in delta.items()
                           if n == node and ifn != ingress and tx >= thr), reverse=True)
            good = [o for o in outs if self._towards(flow, node, o[1])]
            pick = good or outs
            if not pick:
                # no egress port took half the packets: sprayed per packet over several?
                spread = sorted((tx, ifn) for (n, ifn), (_rx, tx) in delta.items()
                                if n == node and ifn != ingress and tx > 0)
                if len(spread) >= 2 and sum(tx for tx, _ in spread) >= thr:
                    res.sprayed = {f"{node}:{ifn}": tx for tx, ifn in
                                   sorted(spread, key=lambda x: _natural_port(x[1]))}
                    for _tx, ifn in sorted(spread, key=lambda x: _natural_port(x[1])):
                        peer = self._peer.get((node, ifn))
                        if peer is not None and self._roles.get(peer[0]) == "spine":
                            res.uplinks.append(f"{node}:{ifn}>{peer[0]}:{peer[1]}")
                            if peer[0] not in res.spines:
                                res.spines.append(peer[0])
                    path.append(f"{node}:{'|'.join(k.split(':', 1)[1] for k in res.sprayed)}")
                    break
            if not pick or (len(pick) > 1 and pick[0][0] == pick[1][0]):
                # dropped here, or an exact tie between egress ports (ambiguous)
                path.append(node if not pick else f"{node}:{'|'.join(sorted(i for _, i in pick))}")
                break
            port = pick[0][1]
            path.append(f"{node}:{port}")
            peer = self._peer.get((node, port))
            if peer is None:
                break
            if self._roles.get(peer[0]) == "spine":
                res.uplinks.append(f"{node}:{port}>{peer[0]}:{peer[1]}")
                res.spines.append(peer[0])
            if self._roles.get(peer[0]) == "server":
                reached = True
                break
            node, ingress = peer
        res.path = path
        res.switches = [p.split(":")[0] for p in path]
        if reached:
            res.hops_counters = len(path)
        elif (res.delivered == st.sent and st.sent and res.hops_ttl == flow.expected_hops):
            res.hops_counters = None  # an inconclusive walk is no evidence against the flow
        else:
            res.hops_counters = len(path)

    # ---- traceroute primitive --------------------------------------------------------------
    def probe(self, flow: Flow, ttl: int, timeout: float = 0.3) -> Hop:
        """Send one TTL-limited copy of ``flow``'s first packet (same addresses and UDP ports,
        so ECMP hashes it like the flow) and return who answered: ICMP time-exceeded or
        unreachable from a switch, or arrival at the destination NIC."""
        self.require(flow)
        st = self._prepare(flow, acks=False)
        self._forget(st)  # probes are matched on (probe QP, PSN), not counted as flow data
        pkt = Ether(bytes(st.seq[0].frame(ttl & MASK24)))
        pkt[IP].ttl = ttl
        del pkt[IP].chksum
        frame = bytes(Ether(bytes(pkt)))
        key = (st.dqpn, ttl & MASK24)
        rec: dict = {"kind": None}
        self._probes[key] = rec
        t0 = time.monotonic()
        try:
            st.tx.send(frame)
        except OSError as e:
            kind = {errno.ENETDOWN: "nic-down", errno.EMSGSIZE: "mtu-exceeded",
                    errno.ENOBUFS: "tx-refused", errno.EAGAIN: "tx-refused"}.get(e.errno)
            if kind is None:
                raise
            self._probes.pop(key, None)
            return Hop(ttl, None, f"{flow.src[0]}:{st.tx.getsockname()[0]}", None, kind)
        deadline = t0 + timeout
        while rec["kind"] is None and time.monotonic() < deadline:
            self.poll(min(0.02, max(0.0, deadline - time.monotonic())))
        self._probes.pop(key, None)
        self._drain_sinks()
        if rec["kind"] is None:
            return Hop(ttl, None, None, None, "timeout")
        addr = rec["addr"]
        node = self.node_of(addr)
        if rec["kind"] == "destination":
            node = f"{flow.dst[0]}:eth{flow.dst_nic}"
        return Hop(ttl, addr, node, round((rec["t"] - t0) * 1000, 3), rec["kind"],
                   rec.get("code"))


def spread(spec: LabSpec, results: list[FlowResult]) -> SpreadStats:
    """Per-uplink and per-spine flow counts of measured results, zeros included for every spine
    and every uplink of the source leaves involved; see SpreadStats.imbalance (max/mean). A
    sprayed flow (:attr:`FlowResult.sprayed`) counts once on each uplink and spine it crossed."""
    stats = SpreadStats()
    spines = [n.name for n in spec.by_role("spine")]
    leaves = set()
    for r in results:
        leaves.update(u.split(":")[0] for u in r.uplinks[:1])
    for ln in spec.links:
        if ln.role == "leaf-spine" and ln.a.node in leaves:
            stats.per_link[f"{ln.a.node}:{ln.a.interface}>{ln.b.node}:{ln.b.interface}"] = 0
    if any(r.uplinks for r in results):
        stats.per_spine = {s: 0 for s in spines}
    for r in results:
        # a sprayed flow (r.sprayed) counts on every uplink and spine it crossed
        for u in (r.uplinks if r.sprayed else r.uplinks[:1]):
            stats.per_link[u] = stats.per_link.get(u, 0) + 1
        for sp in (r.spines if r.sprayed else r.spines[:1]):
            stats.per_spine[sp] = stats.per_spine.get(sp, 0) + 1
    return stats


def spread_warnings(spec: LabSpec, results: list[FlowResult],
                    link_up: Callable[[str, str], bool | None] | None = None,
                    chance: float = 0.01,
                    link_state: Callable[[str, str], str | None] | None = None) -> list[str]:
    """Warnings for source leaves whose measured flows used fewer uplinks or spines than
    ``lab.json`` plans for them (a cut link, a dead BGP session, a shrunk ECMP group), e.g.
    ``"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines (g1-leaf1:eth6 is down): run railab
    check"``. The flows may all still arrive (traffic reroutes), so these are warnings, not
    failures.

    ``link_up(node, ifname)`` (e.g. :meth:`railab.checks.base.Observer.link_up`) names unused uplinks that are down.
    ``link_state(node, ifname)`` (a :func:`railab.checks.base.link_status` word, None unknown)
    names the end that was taken down: an uplink whose leaf end only lost carrier while its
    spine end is ``admin-down`` (``railab fault LAB link-down LEAF SPINE --end SPINE``) reads
    ``spine1:eth1 is down, at the far end of g1-leaf1:eth3``, not ``g1-leaf1:eth3 is down``.
    When every unused uplink is up, a leaf whose ``n`` flows used ``u`` of its ``k`` uplinks is
    only reported if hashing luck is an unlikely explanation for the whole run: the exact chance
    that ``n`` uniformly hashed flows use at most ``u`` uplinks
    (:func:`railab.traffic.spreadchance.idle_uplink_chance`), taken over every leaf the run sent
    from (a run from 16 leaves has 16 draws), must be below ``chance`` (1 %). The warning then
    says that chance, e.g. ``"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines with 16 flows
    although its uplinks are up (chance on a healthy leaf: 0.0031 %): run railab check"``.
    Needs measured results (``uplinks``).
    """
    planned: dict[str, list[str]] = {}
    spines_of: dict[str, set[str]] = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            planned.setdefault(ln.a.node, []).append(f"{ln.a.node}:{ln.a.interface}>{ln.b.node}:{ln.b.interface}")
            spines_of.setdefault(ln.a.node, set()).add(ln.b.node)
    used: dict[str, set[str]] = {}
    used_spines: dict[str, set[str]] = {}
    flows: dict[str, int] = {}
    for r in results:
        if not r.uplinks:
            continue
        leaf = r.uplinks[0].split(":")[0]
        used.setdefault(leaf, set()).update(r.uplinks if r.sprayed else r.uplinks[:1])
        used_spines.setdefault(leaf, set()).update(r.spines if r.sprayed else r.spines[:1])
        flows[leaf] = flows.get(leaf, 0) + 1
    out = []
    for leaf in sorted(used):
        k, u = len(planned.get(leaf, [])), len(used[leaf])
        ks, us = len(spines_of.get(leaf, ())), len(used_spines[leaf])
        if u >= k and us >= ks:
            continue
        idle = [x.split(">") for x in planned[leaf] if x not in used[leaf]]
        down = [(x, far) for x, far in idle
                if link_up is not None and link_up(*x.split(":", 1)) is False]
        n = flows[leaf]
        luck = idle_uplink_chance(k, n, u)  # this leaf, healthy, hashing this unevenly
        luck_run = any_leaf_chance([luck] * len(used))  # ... or any leaf the run sent from
        if not down and luck_run >= chance:
            continue  # too few flows to tell a missing uplink from hashing luck
        what = f"{leaf} sent on {u} of {k} uplinks"
        if us < ks:
            what += f", {us} of {ks} spines"
        far_down = [(x, far) for x, far in down if link_state is not None
                    and link_state(*x.split(":", 1)) != "admin-down"
                    and link_state(*far.split(":", 1)) == "admin-down"]
        near = [x for x, far in down if (x, far) not in far_down]
        parts = ([f"{', '.join(near)} {'is' if len(near) == 1 else 'are'} down"] if near else [])
        parts += [f"{far} is down, at the far end of {x}" for x, far in far_down]
        odds = f"chance on a healthy leaf: {percent(luck)}"
        if len(used) > 1:
            odds += f", on any of the {len(used)} leaves sent from: {percent(luck_run)}"
        why = (f" ({'; '.join(parts)})" if down
               else f" with {n} flows although its uplinks are up ({odds})")
        out.append(f"{what}{why}: run railab check")
    return out
