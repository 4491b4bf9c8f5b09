"""rtnetlink spoken raw: one dump per namespace and request, parsed with ``struct``.

pyroute2 decodes every attribute of every message (about 1 ms per link here, ~50 us per ECMP
next hop), which on the full-size fabrics made one counter read, one cabling pass or one
convergence poll take seconds to minutes (the 4096-GPU fabric's ``check``: 70 s of cabling,
42 s of oversubscription, almost all of it pyroute2's attribute decoding). :class:`Rtnl` reads
the few fields railab uses from the dumps' fixed layouts (``include/uapi/linux/rtnetlink.h``,
``if_link.h``, ``netlink.h``). Everything that writes (links, addresses, routes, qdiscs) still
goes through pyroute2 or iproute2.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

NETLINK_ROUTE = 0
RTM_GETLINK = 18
RTM_GETSTATS = 94
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
#: IFLA_OPERSTATE values (RFC 2863, include/uapi/linux/if.h), named as pyroute2 and iproute2 do
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
IFLA_STATS_LINK_64 = 1
IFLA_MTU = 4
IFLA_LINK = 5
IFLA_LINKINFO = 18
IFLA_INFO_KIND = 1
IFLA_LINK_NETNSID = 37
#: times the link lost its carrier (u32; admin down counts, at either end of a veth)
IFLA_CARRIER_DOWN_COUNT = 48
RTM_GETROUTE = 26
#: routing tables (include/uapi/linux/rtnetlink.h ``rt_class_t``)
RT_TABLE_MAIN, RT_TABLE_LOCAL = 254, 255
#: netlink interface flags (include/uapi/linux/if.h): administratively up, carrier (RFC 2863)
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
RTM_GETADDR = 22
IFA_ADDRESS = 1
IFA_FLAGS = 8
#: ifaddrmsg / IFA_FLAGS bits (include/uapi/linux/if_addr.h)
IFA_F_DADFAILED, IFA_F_TENTATIVE = 0x08, 0x40
RTM_GETNSID = 90
RTM_GETRULE = 34
RTA_GATEWAY = 5
FRA_SRC = 2
FRA_PRIORITY = 6
FRA_TABLE = 15
NETNSA_NSID = 1
NETNSA_FD = 3
RTA_DST = 1
RTA_OIF = 4
RTA_MULTIPATH = 9
RTA_TABLE = 15
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
_RTNH = struct.Struct("=HBBi")  # rtnexthop: len, flags, hops, ifindex
RTNH_F_DEAD, RTNH_F_LINKDOWN = 1, 16
#: traffic-control classes (include/uapi/linux/rtnetlink.h, pkt_sched.h): the class dump,
#: tcmsg's attributes, and htb's options (``struct tc_htb_opt``: two ``struct tc_ratespec``
#: whose ``rate`` is bytes/s, u32; the 64-bit rate attributes when a rate passes 2^32 bytes/s)
RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7
_TCMSG = struct.Struct("=BxxxiIII")  # tcmsg: family, ifindex, handle, parent, info
_HTB_RATES = struct.Struct("=8xI8xI")  # tc_htb_opt: rate.rate, ceil.rate (each at +8 of a 12-byte tc_ratespec)
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_RTA = struct.Struct("=HH")  # rtattr / nlattr: len, type
_STATS64 = struct.Struct("=QQQQ")  # rtnl_link_stats64: rx_packets, tx_packets, rx_bytes, tx_bytes


LinkStatus = Literal["up", "admin-down", "carrier-lost", "missing"]


def link_status(flags: int, operstate: str | None) -> LinkStatus:
    """The one "is this link up" rule, from an RTM_NEWLINK message's ``flags`` and
    ``IFLA_OPERSTATE``: ``admin-down`` when IFF_UP is clear; ``carrier-lost`` when IFF_UP is set
    but IFF_LOWER_UP is clear or operstate is neither ``UP`` nor ``UNKNOWN`` (loopbacks and
    some virtual devices report UNKNOWN); else ``up``. (``missing`` is for callers that looked
    an interface up and found none.)"""
    if not flags & IFF_UP:
        return "admin-down"
    if not flags & IFF_LOWER_UP or (operstate or "UNKNOWN") not in ("UP", "UNKNOWN"):
        return "carrier-lost"
    return "up"


@dataclass
class LinkRow:
    """One link of an RTM_GETLINK dump: ``index``, ``flags`` (``ifi_flags``), ``ifname``,
    ``operstate`` (RFC 2863 name), ``mtu`` (bytes), ``link`` (IFLA_LINK: a veth's peer
    ifindex), ``link_netnsid`` (IFLA_LINK_NETNSID: the peer's namespace id as this namespace
    sees it) and ``kind`` (IFLA_INFO_KIND: ``veth``, ``vxlan``...); None where absent."""

    index: int
    flags: int
    ifname: str = ""
    operstate: str = "UNKNOWN"
    mtu: int | None = None
    link: int | None = None
    link_netnsid: int | None = None
    kind: str | None = None


@dataclass(frozen=True)
class RouteRow:
    """One route of an RTM_GETROUTE dump: ``dst``/``dst_len``, ``type`` (RTN_* number:
    1 unicast, 6 blackhole...), ``protocol`` (RTPROT_* number) and ``oifs``, the output ifindex
    of each next hop (one per ECMP path; empty for a blackhole)."""

    dst: str
    dst_len: int
    type: int
    protocol: int
    oifs: tuple[int, ...]
    table: int = 254
    gateway: str | None = None


@dataclass(frozen=True)
class AddrRow:
    """One address of an RTM_GETADDR dump: ``index`` (ifindex), ``address`` (text),
    ``prefixlen``, ``scope`` (RT_SCOPE_* number: 0 universe, 253 link, 254 host) and ``flags``
    (IFA_F_* bits, the 32-bit IFA_FLAGS where present: tentative 0x40, dadfailed 0x08)."""

    index: int
    address: str
    prefixlen: int
    scope: int
    flags: int


@dataclass(frozen=True)
class RuleRow:
    """One IPv4 policy rule of an RTM_GETRULE dump: ``src``/``src_len`` (``from``; None for
    ``all``), ``priority`` (``pref``), ``table`` (``lookup``)."""

    src: str | None
    src_len: int
    priority: int | None
    table: int


@dataclass(frozen=True)
class HtbClass:
    """One htb class of an interface: ``handle`` and ``parent`` (tc handles, ``0x10001`` is
    ``1:1``), ``rate_bps`` and ``ceil_bps`` (bit/s; the kernel keeps bytes/s, so a multiple of 8)."""

    index: int
    handle: int
    parent: int
    rate_bps: int
    ceil_bps: int


def parse_htb_class(payload: bytes | memoryview) -> HtbClass | None:
    """An ``RTM_NEWTCLASS`` message's payload (tcmsg and its attributes, after the nlmsghdr) as
    an :class:`HtbClass`; None for a class of another kind (a tbf's inner class) or one without
    ``TCA_HTB_PARMS``."""
    _fam, index, handle, parent, _info = _TCMSG.unpack_from(payload, 0)
    kind, rate, ceil = "", None, None
    rate64 = ceil64 = None
    for typ, val in Rtnl._attrs(memoryview(payload), _TCMSG.size):
        if typ == TCA_KIND:
            kind = bytes(val).split(b"\0", 1)[0].decode()
        elif typ == TCA_OPTIONS:
            for otyp, oval in Rtnl._attrs(val, 0):
                if otyp == TCA_HTB_PARMS and len(oval) >= _HTB_RATES.size:
                    rate, ceil = _HTB_RATES.unpack_from(oval, 0)
                elif otyp == TCA_HTB_RATE64 and len(oval) >= 8:
                    rate64 = struct.unpack_from("=Q", oval, 0)[0]
                elif otyp == TCA_HTB_CEIL64 and len(oval) >= 8:
                    ceil64 = struct.unpack_from("=Q", oval, 0)[0]
    if kind != "htb" or rate is None or ceil is None:
        return None
    return HtbClass(index=index, handle=handle, parent=parent, rate_bps=8 * (rate64 or rate),
                    ceil_bps=8 * (ceil64 or ceil))


class Rtnl:
    """A raw rtnetlink socket in the network namespace that is current when it is made (make it
    inside ``railab.testbed.namespaces.entered``; it keeps that namespace).

    :meth:`links` is one ``RTM_GETLINK`` dump, :meth:`stats` one ``RTM_GETSTATS`` dump of
    ``IFLA_STATS_LINK_64`` only (about 100 bytes per port, no per-link attribute walk), so reading
    every port counter of a 129-port switch costs one system call round trip, not a parse of
    every link attribute.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.sock.bind((0, 0))
        except OSError:
            self.sock.close()
            raise
        self._seq = 0
        self._buf = bytearray(1 << 17)

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self.sock.close()

    def _replies(self, msg_type: int, flags: int, body: bytes) -> Iterator[memoryview]:
        """Send one request and yield each reply's payload (after the nlmsghdr) until
        NLMSG_DONE or an acknowledgement; each view is valid until the next one is yielded.
        Raises OSError on an ``NLMSG_ERROR`` reply with an error."""
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(body), msg_type, flags, seq, 0) + body)
        buf = self._buf
        while True:
            n = self.sock.recv_into(buf)
            off = 0
            while off + _NLMSG.size <= n:
                ln, typ, _flags, mseq, _pid = _NLMSG.unpack_from(buf, off)
                if ln < _NLMSG.size:
                    return
                if mseq == seq:
                    if typ == NLMSG_DONE:
                        return
                    if typ == NLMSG_ERROR:
                        err = struct.unpack_from("=i", buf, off + _NLMSG.size)[0]
                        if err:
                            raise OSError(-err, f"rtnetlink request {msg_type}: {os.strerror(-err)}")
                        return
                    yield memoryview(buf)[off + _NLMSG.size:off + ln]
                off += (ln + 3) & ~3

    def dump(self, msg_type: int, body: bytes) -> Iterator[memoryview]:
        """Send one ``NLM_F_DUMP`` request and yield each reply's payload (after the
        nlmsghdr); each view is valid until the next one is yielded. Raises OSError on an
        ``NLMSG_ERROR`` reply."""
        return self._replies(msg_type, NLM_F_REQUEST | NLM_F_DUMP, body)

    def request(self, msg_type: int, body: bytes) -> memoryview | None:
        """Send one plain request (e.g. RTM_GETROUTE for one destination, RTM_GETNSID) and
        return its reply's payload, None for a bare acknowledgement. Raises OSError (with the
        kernel's errno) on an error reply. The view is valid until the next request."""
        replies = self._replies(msg_type, NLM_F_REQUEST, body)
        try:
            return next(replies, None)
        finally:
            replies.close()

    @staticmethod
    def _attrs(payload: memoryview, start: int) -> Iterator[tuple[int, memoryview]]:
        off, end = start, len(payload)
        while off + _RTA.size <= end:
            ln, typ = _RTA.unpack_from(payload, off)
            if ln < _RTA.size:
                return
            yield typ & 0x3FFF, payload[off + _RTA.size:off + ln]
            off += (ln + 3) & ~3

    def _link_rows(self) -> Iterator[tuple[int, int, str, str, str]]:
        """``(ifindex, ifi_flags, ifname, MAC "aa:bb:..", operstate name)`` per link (one
        RTM_GETLINK dump)."""
        for p in self.dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
            index, flags = struct.unpack_from("=iI", p, 4)
            name, mac, oper = "", "", "UNKNOWN"
            for typ, val in self._attrs(p, 16):
                if typ == IFLA_IFNAME:
                    name = bytes(val).split(b"\0", 1)[0].decode()
                elif typ == IFLA_ADDRESS:
                    mac = bytes(val).hex(":")
                elif typ == IFLA_OPERSTATE and len(val):
                    oper = OPERSTATES[val[0]] if val[0] < len(OPERSTATES) else "UNKNOWN"
            yield index, flags, name, mac, oper

    def links(self) -> dict[int, tuple[str, str]]:
        """``ifindex -> (ifname, MAC "aa:bb:..")`` of every link in the namespace (one dump)."""
        return {index: (name, mac) for index, _, name, mac, _ in self._link_rows()}

    def link_flags(self) -> dict[str, tuple[int, str]]:
        """``ifname -> (ifi_flags, operstate name)`` of every link (one RTM_GETLINK dump); feed
        it to :func:`railab.checks.base.link_status`, the one link-up rule."""
        return {name: (flags, oper) for _, flags, name, _, oper in self._link_rows()}

    def carrier_downs(self) -> dict[str, tuple[int, int]]:
        """``ifname -> (ifindex, carrier down count)`` of every link (one RTM_GETLINK dump): the
        count (``IFLA_CARRIER_DOWN_COUNT``, ``/sys/class/net/DEV/carrier_down_count``) grows each
        time the link loses its carrier, an admin down of either end of a veth included."""
        out = {}
        for p in self.dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
            index = struct.unpack_from("=i", p, 4)[0]
            name, downs = "", 0
            for typ, val in self._attrs(p, 16):
                if typ == IFLA_IFNAME:
                    name = bytes(val).split(b"\0", 1)[0].decode()
                elif typ == IFLA_CARRIER_DOWN_COUNT and len(val) >= 4:
                    downs = struct.unpack_from("=I", val)[0]
            out[name] = (index, downs)
        return out

    def netnsid(self, fd: int) -> int | None:
        """The id this namespace gives the network namespace open on ``fd`` (RTM_GETNSID with
        NETNSA_FD, ``net/core/net_namespace.c``), None when it has none (-1: not assigned).
        What IFLA_LINK_NETNSID of a veth whose peer lives there says. Raises OSError on an
        error reply."""
        body = struct.pack("=Bxxx", socket.AF_UNSPEC) + _RTA.pack(8, NETNSA_FD) + struct.pack("=I", fd)
        payload = self.request(RTM_GETNSID, body)
        for t, val in self._attrs(payload, 4) if payload is not None else ():
            if t == NETNSA_NSID and len(val) >= 4:
                nsid = struct.unpack_from("=i", val)[0]
                return None if nsid < 0 else nsid
        return None

    def link_details(self) -> list[LinkRow]:
        """Every link of the namespace as a :class:`LinkRow` (one RTM_GETLINK dump)."""
        rows = []
        for p in self.dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
            index, flags = struct.unpack_from("=iI", p, 4)
            row = LinkRow(index=index, flags=flags)
            for typ, val in self._attrs(p, 16):
                if typ == IFLA_IFNAME:
                    row.ifname = bytes(val).split(b"\0", 1)[0].decode()
                elif typ == IFLA_OPERSTATE and len(val):
                    row.operstate = OPERSTATES[val[0]] if val[0] < len(OPERSTATES) else "UNKNOWN"
                elif typ == IFLA_MTU and len(val) >= 4:
                    row.mtu = struct.unpack_from("=I", val)[0]
                elif typ == IFLA_LINK and len(val) >= 4:
                    row.link = struct.unpack_from("=i", val)[0]
                elif typ == IFLA_LINK_NETNSID and len(val) >= 4:
                    row.link_netnsid = struct.unpack_from("=i", val)[0]
                elif typ == IFLA_LINKINFO:
                    for t2, v2 in self._attrs(val, 0):
                        if t2 == IFLA_INFO_KIND:
                            row.kind = bytes(v2).split(b"\0", 1)[0].decode()
            rows.append(row)
        return rows

    def rules(self) -> list[RuleRow]:
        """The IPv4 policy rules (``ip rule``) as :class:`RuleRow`, one RTM_GETRULE dump
        (``struct fib_rule_hdr``, ``include/uapi/linux/fib_rules.h``)."""
        rows = []
        for p in self.dump(RTM_GETRULE, _RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)):
            family, _dst_len, src_len, _tos, table = struct.unpack_from("=BBBBB", p, 0)
            src, prio = None, None
            for typ, val in self._attrs(p, 12):
                if typ == FRA_SRC and len(val) >= 4:
                    src = socket.inet_ntop(socket.AF_INET, bytes(val[:4]))
                elif typ == FRA_PRIORITY and len(val) >= 4:
                    prio = struct.unpack_from("=I", val)[0]
                elif typ == FRA_TABLE and len(val) >= 4:
                    table = struct.unpack_from("=I", val)[0]
            if family == socket.AF_INET:
                rows.append(RuleRow(src=src, src_len=src_len, priority=prio, table=table))
        return rows

    def addresses(self, family: int = socket.AF_INET6) -> list[AddrRow]:
        """The addresses of ``family`` (AF_INET6 by default, or AF_INET) on every link as
        :class:`AddrRow`, one RTM_GETADDR dump (``struct ifaddrmsg``)."""
        rows = []
        size = 16 if family == socket.AF_INET6 else 4
        for p in self.dump(RTM_GETADDR, struct.pack("=BBBBI", family, 0, 0, 0, 0)):
            fam, plen, flags, scope, index = struct.unpack_from("=BBBBI", p, 0)
            addr = None
            for typ, val in self._attrs(p, 8):
                if typ == IFA_ADDRESS and len(val) >= size:
                    addr = socket.inet_ntop(family, bytes(val[:size]))
                elif typ == IFA_FLAGS and len(val) >= 4:
                    flags = struct.unpack_from("=I", val)[0]
            if fam == family and addr is not None:
                rows.append(AddrRow(index=index, address=addr, prefixlen=plen, scope=scope, flags=flags))
        return rows

    def routes(self, table: int | None = RT_TABLE_MAIN, *, live_only: bool = False,
               family: int = socket.AF_INET) -> list[RouteRow]:
        """The routes of ``family`` (AF_INET by default, or AF_INET6) in routing ``table``
        (254: main; 255: local; None: every table) as :class:`RouteRow`, one RTM_GETROUTE dump;
        ECMP routes carry every next hop's output interface (RTA_MULTIPATH's ``rtnexthop``
        array). ``live_only``: leave out the next hops the kernel flags dead or linkdown
        (RTNH_F_DEAD, RTNH_F_LINKDOWN)."""
        rows = []
        size = 16 if family == socket.AF_INET6 else 4
        body = _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        for p in self.dump(RTM_GETROUTE, body):
            rfamily, dst_len, _src, _tos, tbl, proto, _scope, rtype, _flags = _RTMSG.unpack_from(p, 0)
            dst, oif, oifs, gateway = ("0.0.0.0" if size == 4 else "::"), None, [], None
            for typ, val in self._attrs(p, _RTMSG.size):
                if typ == RTA_TABLE and len(val) >= 4:
                    tbl = struct.unpack_from("=I", val)[0]
                elif typ == RTA_DST and len(val) >= size:
                    dst = socket.inet_ntop(family, bytes(val[:size]))
                elif typ == RTA_OIF and len(val) >= 4:
                    oif = struct.unpack_from("=i", val)[0]
                elif typ == RTA_GATEWAY and len(val) >= size:
                    gateway = socket.inet_ntop(family, bytes(val[:size]))
                elif typ == RTA_MULTIPATH:
                    off = 0
                    while off + _RTNH.size <= len(val):
                        ln, nh_flags, _h, ifindex = _RTNH.unpack_from(val, off)
                        if ln < _RTNH.size:
                            break
                        if not (live_only and nh_flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN)):
                            oifs.append(ifindex)
                        off += (ln + 3) & ~3
            if rfamily != family or (table is not None and tbl != table):
                continue
            rows.append(RouteRow(dst=dst, dst_len=dst_len, type=rtype, protocol=proto,
                                 oifs=tuple(oifs) if oifs else ((oif,) if oif is not None else ()),
                                 table=tbl, gateway=gateway))
        return rows

    def route_census(self, table: int = RT_TABLE_MAIN,
                     family: int = socket.AF_INET) -> dict[tuple[int, int], int]:
        """How many routes of ``family`` routing ``table`` holds, by ``(protocol, next hops)``:
        ``{(186, 2): 14, (2, 1): 2, (196, 0): 1}`` (RTPROT_* number; next hops: the
        RTA_MULTIPATH entries, dead or not, else 1 with an RTA_OIF, 0 for a blackhole). One
        RTM_GETROUTE dump like :meth:`routes`, without a :class:`RouteRow` or an address per
        route: what counting a full fabric's FIBs needs (railab.checks.controlplane)."""
        out: dict[tuple[int, int], int] = {}
        body = _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        rtnh = _RTNH.size
        for p in self.dump(RTM_GETROUTE, body):
            rfamily, _dst_len, _src, _tos, tbl, proto, _scope, _rtype, _flags = _RTMSG.unpack_from(p, 0)
            if rfamily != family:
                continue
            hops = 0
            for typ, val in self._attrs(p, _RTMSG.size):
                if typ == RTA_TABLE and len(val) >= 4:
                    tbl = struct.unpack_from("=I", val)[0]
                elif typ == RTA_OIF and not hops:
                    hops = 1
                elif typ == RTA_MULTIPATH:
                    hops, off = 0, 0
                    while off + rtnh <= len(val):
                        ln = _RTNH.unpack_from(val, off)[0]
                        if ln < rtnh:
                            break
                        hops += 1
                        off += (ln + 3) & ~3
            if tbl == table:
                key = (proto, hops)
                out[key] = out.get(key, 0) + 1
        return out

    def htb_classes(self, index: int) -> list[HtbClass]:
        """The htb classes of interface ``index`` (one ``RTM_GETTCLASS`` dump: the kernel dumps
        the classes of the interface the request names). OSError when the dump fails."""
        out = []
        for p in self.dump(RTM_GETTCLASS, _TCMSG.pack(socket.AF_UNSPEC, index, 0, 0, 0)):
            c = parse_htb_class(p)
            if c is not None:
                out.append(c)
        return out

    def stats(self) -> dict[int, tuple[int, int, int, int]]:
        """``ifindex -> (rx_packets, tx_packets, rx_bytes, tx_bytes)`` of every link (one
        ``RTM_GETSTATS`` dump, 64-bit counters)."""
        out: dict[int, tuple[int, int, int, int]] = {}
        mask = 1 << (IFLA_STATS_LINK_64 - 1)
        for p in self.dump(RTM_GETSTATS, struct.pack("=BBHII", socket.AF_UNSPEC, 0, 0, 0, mask)):
            index = struct.unpack_from("=I", p, 4)[0]
            for typ, val in self._attrs(p, 12):
                if typ == IFLA_STATS_LINK_64 and len(val) >= _STATS64.size:
                    out[index] = _STATS64.unpack_from(val, 0)
        return out
