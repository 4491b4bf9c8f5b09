"""The partition record of a lab spread over hosts (``partition.json``, written by ``railab
generate --hosts``): the hosts, the cut links and their VXLAN tunnels, and the rules their names
and MTU follow. Light on purpose (pydantic and the standard library): the netns runtime's stitch
(railab.testbed.stitch) reads the record on every ``up``, while making one
(railab.topologies.partition: plan, emit) needs the generator. railab.topologies.partition
re-exports every name here; its docstring has the design (VXLAN, RFC 7348; names, clabernetes#252)."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from railab.errors import UsageError

#: the first VNI railab gives a cut link (VNI 1 is often a default; stay clear of small numbers)
VNI_BASE = 10000
#: VXLAN's largest VNI (24 bits)
VNI_MAX = 16_777_215
#: IANA's VXLAN UDP port (RFC 7348 section 5); containerlab's ``dst-port``
VXLAN_PORT = 4789
#: default underlay pool: host k (1-based) gets ``pool + k``
UNDERLAY_POOL = ipaddress.IPv4Network("10.253.0.0/24")
#: VXLAN encapsulation bytes over an IPv4 underlay: outer IPv4 20 + UDP 8 + VXLAN 8 + inner
#: Ethernet 14 (RFC 7348 section 4.3; the outer Ethernet header is not part of the MTU)
VXLAN_OVERHEAD_V4 = 50
#: ... over an IPv6 underlay (outer IPv6 40)
VXLAN_OVERHEAD_V6 = 70
#: link roles a partition may cut (server-leaf never)
CUTTABLE = ("leaf-spine", "spine-superspine")
PARTITION_FILE = "partition.json"
#: host names: a directory name and a DNS label
_HOST_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
#: host names taken by the one-machine proof (railab.testbed.stitch): its underlay bridge lives in
#: namespace ``railab-<lab>-underlay``, next to the hosts' ``railab-<lab>-<host>``
RESERVED_HOST_NAMES = ("underlay",)


def _unicast_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why ``ip`` cannot be a host's underlay address (a VXLAN ``remote`` must be a routable
    unicast address of the far host; a multicast one turns the tunnel into a flood group, a
    loopback one never leaves the host), or None when it can."""
    for test, what in (("is_multicast", "multicast"), ("is_loopback", "loopback"),
                       ("is_unspecified", "unspecified"), ("is_link_local", "link-local"),
                       ("is_reserved", "reserved")):
        if getattr(ip, test):
            return what
    return None


class PartitionError(UsageError):
    """A partition that cannot be made (bad host list, a lab that cannot be split); exit 2."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Host(_Strict):
    """One machine: ``name`` (a directory name and a label) and its ``underlay`` address (the
    address the other hosts' VXLAN ``remote`` points at)."""

    name: str
    underlay: str


class CutEnd(_Strict):
    node: str
    interface: str
    host: str


class CutLink(_Strict):
    """A lab link whose ends run on different hosts: one ``vxlan`` link per end, same ``vni``."""

    vni: int = Field(ge=1, le=VNI_MAX)
    a: CutEnd
    b: CutEnd
    role: str
    mtu: int


class Partition(_Strict):
    """The partition of one lab (``DIR/partition.json``): ``hosts`` in order, ``node_host``
    node -> host name, ``cut`` the links that cross hosts, ``dst_port`` (4789) and
    ``underlay_mtu`` (bytes the underlay must carry between hosts)."""

    lab: str
    hosts: list[Host]
    node_host: dict[str, str]
    cut: list[CutLink]
    dst_port: int = VXLAN_PORT
    underlay_mtu: int

    def host(self, name: str) -> Host:
        """The host called ``name``; KeyError if absent."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"partition of lab {self.lab!r} has no host {name!r}")

    def nodes_of(self, host: str) -> list[str]:
        """Nodes placed on ``host``, in lab order."""
        return [n for n, h in self.node_host.items() if h == host]

    def cut_at(self, node: str, interface: str) -> CutLink | None:
        """The cut link with an end on ``node:interface``, or None (a local link or no link)."""
        for c in self.cut:
            if (c.a.node, c.a.interface) == (node, interface) or (c.b.node, c.b.interface) == (node, interface):
                return c
        return None

    def dump(self) -> str:
        """Deterministic JSON (sorted keys, trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, labdir: str | Path) -> Partition | None:
        """``DIR/partition.json``, or None when the lab was not generated with ``--hosts``.
        UsageError naming the file when it is not valid."""
        p = Path(labdir)
        p = p / PARTITION_FILE if p.is_dir() else p.parent / PARTITION_FILE
        if not p.is_file():
            return None
        try:
            return cls.model_validate_json(p.read_text())
        except ValueError as exc:
            raise UsageError(f"{p}: not a railab partition ({exc.__class__.__name__}): regenerate "
                             f"with railab generate INTENT --hosts N") from None


def underlay_mtu(link_mtu: int, underlay: str) -> int:
    """Bytes the underlay must carry for a VXLAN overlay link of ``link_mtu`` bytes:
    ``link_mtu + 50`` over IPv4, ``+ 70`` over IPv6 (:data:`VXLAN_OVERHEAD_V4`)."""
    v6 = ipaddress.ip_address(underlay).version == 6
    return link_mtu + (VXLAN_OVERHEAD_V6 if v6 else VXLAN_OVERHEAD_V4)


def tunnel_name(vni: int) -> str:
    """The name railab gives the tunnel of VNI ``vni`` where it makes one (the netns runtime's
    one-machine stitching): ``vx`` + the VNI in 8 digits (``vx00010000``, 10 characters, under
    Linux's 15). Fixed width: no name is a prefix of another (clabernetes#252)."""
    if not 1 <= vni <= VNI_MAX:
        raise ValueError(f"VNI {vni} outside 1..{VNI_MAX}")
    return f"vx{vni:08d}"


def parse_hosts(text: str, *, pool: str | ipaddress.IPv4Network = UNDERLAY_POOL) -> list[Host]:
    """Hosts from ``--hosts``: a count ``N`` (``host1..hostN``, underlay ``pool + k``) or a
    comma list ``name=address,...`` (each address IPv4 or IPv6, names ``[a-z][a-z0-9-]*``,
    both unique, no name of :data:`RESERVED_HOST_NAMES`). Every address, given or from the pool,
    must be unicast: not multicast, loopback, unspecified, link-local or reserved (``ipaddress``'s
    IANA registries). PartitionError (exit 2) says what to change."""
    text = text.strip()
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise PartitionError(f"--hosts {text}: give at least 1 host")
        net = ipaddress.ip_network(pool)
        if n > net.num_addresses - 2:
            raise PartitionError(f"--hosts {n}: underlay pool {net} holds {max(net.num_addresses - 2, 0)} "
                                 f"host addresses; give a larger --underlay-pool")
        why = _unicast_problem(net.network_address + 1)
        if why:
            raise PartitionError(f"--underlay-pool {net} is a {why} range: the hosts' underlay addresses "
                                 f"are VXLAN remotes and must be unicast addresses the hosts reach "
                                 f"(e.g. the default 10.253.0.0/24)")
        return [Host(name=f"host{k}", underlay=str(net.network_address + k)) for k in range(1, n + 1)]
    hosts: list[Host] = []
    for item in text.split(","):
        name, sep, addr = item.strip().partition("=")
        if not sep or not name or not addr:
            raise PartitionError(f"--hosts: {item!r} is not NAME=ADDRESS (e.g. --hosts "
                                 f"gpu-a=192.0.2.10,gpu-b=192.0.2.11, or a count: --hosts 2)")
        if not _HOST_NAME.fullmatch(name):
            raise PartitionError(f"--hosts: host name {name!r} must match {_HOST_NAME.pattern} "
                                 f"(a lower-case letter, then letters, digits, '-')")
        if name in RESERVED_HOST_NAMES:
            raise PartitionError(f"--hosts: host name {name!r} is reserved (the one-machine proof's "
                                 f"underlay namespace railab-<lab>-{name}); pick another name")
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            raise PartitionError(f"--hosts: {addr!r} (host {name}) is not an IPv4 or IPv6 "
                                 f"address") from None
        why = _unicast_problem(ip)
        if why:
            raise PartitionError(f"--hosts: {addr} (host {name}) is a {why} address: give the host's "
                                 f"unicast address on the underlay (the other hosts' VXLAN remote)")
        hosts.append(Host(name=name, underlay=str(ip)))
    for what, values in (("name", [h.name for h in hosts]), ("address", [h.underlay for h in hosts])):
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            raise PartitionError(f"--hosts: host {what} {dup[0]} is given twice; each host needs "
                                 f"its own")
    if len({ipaddress.ip_address(h.underlay).version for h in hosts}) > 1:
        raise PartitionError("--hosts: mix of IPv4 and IPv6 underlay addresses; VXLAN needs one "
                             "family between the hosts")
    return hosts
