"""The one-machine proof of a partitioned lab: every host a network namespace, the cut links real
kernel VXLAN devices over an underlay between those namespaces (netns runtime, ``railab up DIR
--stitch``).

``railab generate INTENT --hosts N`` writes ``DIR/<host>/<lab>.clab.yml`` per host
(:mod:`railab.topologies.partition`). :func:`stitch_plan` reads exactly those files: the union of
their nodes and veth links is what the netns runtime builds as usual, and every ``vxlan`` link
(``endpoint``, ``remote``, ``vni``, ``dst-port``, ``mtu``) is paired with the other host's end of
the same VNI. Then:

* each host ``h`` is a namespace ``railab-<lab>-<h>`` holding its underlay address (``/32`` or
  ``/128``) on ``ul0``, with an on-link route to every other host's address;
* the underlay is one Linux bridge ``br0`` in ``railab-<lab>-underlay``, one veth per host
  (``p001``, ``p002`` ... on the bridge side), every port at the partition's ``underlay_mtu``
  (lab MTU + 50 over IPv4: the VXLAN overhead, :func:`railab.topologies.partition.underlay_mtu`);
* each cut link end is a VXLAN device (VNI, ``local`` = its host's address, ``remote`` = the far
  host's, UDP ``dst-port`` 4789, ``dev ul0``) created from the host's namespace directly inside
  the node's namespace under the node's own name ``ethK``, with the lab MTU: its UDP socket and
  underlay stay in the host namespace, as with containerlab's ``vxlan`` link type (which moves
  the device into the container). Encapsulated frames really cross ``ul0 -> br0 -> ul0``.

Names (clabernetes#252): the names railab creates here are fixed width (``p001``..., ``ul0``,
``br0``; a tunnel's record name ``vx`` + 8-digit VNI), so none is a prefix of another. Every
namespace is in the ledger before it exists, so ``railab down`` (and a failed or interrupted
``up``) removes it with the lab.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from railab.errors import RailabError, UsageError
from railab.testbed.clabfile import ClabFile, ClabLink, find_clab_file, load_clab
from railab.testbed.namespaces import create_netns, entered, netns_path
from railab.topologies.partition_model import RESERVED_HOST_NAMES, Partition, tunnel_name

if TYPE_CHECKING:
    from pyroute2 import IPRoute

UNDERLAY_BRIDGE = "br0"
UNDERLAY_IF = "ul0"
#: RT_SCOPE_LINK (rtnetlink.h): an on-link route, no gateway
_SCOPE_LINK = 253


def host_netns(lab: str, host: str) -> str:
    """Namespace of ``host`` in the one-machine proof: ``railab-<lab>-<host>`` (never
    ``clab-``: those are node namespaces)."""
    return f"railab-{lab}-{host}"


def underlay_netns(lab: str) -> str:
    """Namespace of the underlay bridge: ``railab-<lab>-underlay`` (``underlay`` is a reserved
    host name: :data:`railab.topologies.partition.RESERVED_HOST_NAMES`)."""
    return f"railab-{lab}-{RESERVED_HOST_NAMES[0]}"


def bridge_port(k: int) -> str:
    """Bridge-side veth name of the ``k``-th host (1-based): ``p001`` (fixed width)."""
    return f"p{k:03d}"


@dataclass(frozen=True)
class Tunnel:
    """One cut link end: ``node:interface`` on ``host``, VXLAN ``vni`` from ``local`` to
    ``remote`` (underlay addresses), UDP ``dst_port``, overlay ``mtu`` (bytes)."""

    node: str
    interface: str
    host: str
    vni: int
    local: str
    remote: str
    dst_port: int
    mtu: int

    @property
    def name(self) -> str:
        """The tunnel's fixed-width record name (:func:`railab.topologies.partition.tunnel_name`)."""
        return tunnel_name(self.vni)


@dataclass(frozen=True)
class StitchPlan:
    """What ``up --stitch`` builds: ``clab`` (the union of the host files: nodes, veth links;
    path = the lab's top-level clab file), ``all_links`` (those plus one pair per cut link, for
    the router solicitations), ``hosts`` host -> (namespace, underlay address) in order,
    ``underlay_ns``, ``underlay_mtu`` and ``tunnels`` (two per cut link)."""

    clab: ClabFile
    all_links: list[ClabLink]
    hosts: dict[str, tuple[str, str]]
    underlay_ns: str
    underlay_mtu: int
    tunnels: list[Tunnel]

    @property
    def namespaces(self) -> list[str]:
        """Every namespace the proof adds to the lab's (hosts, then the underlay)."""
        return [ns for ns, _ in self.hosts.values()] + [self.underlay_ns]

    def record(self) -> dict[str, Any]:
        """The plan as the lab record's ``stitch`` entry (JSON)."""
        return {"hosts": {h: {"namespace": ns, "underlay": a} for h, (ns, a) in self.hosts.items()},
                "underlay_namespace": self.underlay_ns, "underlay_mtu": self.underlay_mtu,
                "tunnels": [{"name": t.name, "node": t.node, "interface": t.interface,
                             "host": t.host, "vni": t.vni, "local": t.local, "remote": t.remote,
                             "dst_port": t.dst_port, "mtu": t.mtu} for t in self.tunnels]}


def stitch_plan(labdir: str | Path) -> StitchPlan:
    """Read a partitioned lab directory (``partition.json`` and ``<host>/<lab>.clab.yml``).

    UsageError (exit 2) when the lab was not generated with ``--hosts``, a host file is missing
    or names another lab, a node is on two hosts, or a ``vxlan`` link has no partner of its VNI
    on the host its ``remote`` names."""
    top = find_clab_file(labdir)
    part = Partition.load(top.parent)
    if part is None and Partition.load(top.parent.parent) is not None:
        raise UsageError(f"{top} is one host's part of a partitioned lab: give --stitch the lab "
                         f"directory {top.parent.parent} (it deploys every host's part)")
    if part is None:
        raise UsageError(f"{top.parent} has no partition.json: generate it with "
                         f"`railab generate INTENT --hosts N -o {top.parent}` for --stitch")
    reserved = [h.name for h in part.hosts if h.name in RESERVED_HOST_NAMES]
    if reserved:
        raise UsageError(f"{top.parent}: host name {reserved[0]!r} is reserved for the underlay "
                         f"namespace of --stitch: regenerate with other --hosts names")
    by_addr = {h.underlay: h.name for h in part.hosts}
    nodes: dict = {}
    links: list[ClabLink] = []
    ends: dict[int, list[tuple[str, Any]]] = {}
    name = None
    for h in part.hosts:
        path = top.parent / h.name / top.name
        if not path.is_file():
            raise UsageError(f"{path} is missing: regenerate with railab generate INTENT --hosts")
        cf = load_clab(path)
        if name is not None and cf.name != name:
            raise UsageError(f"{path} names lab {cf.name!r}, the other hosts {name!r}")
        name = cf.name
        for n, node in cf.nodes.items():
            if n in nodes:
                raise UsageError(f"node {n} is in two host files ({path})")
            nodes[n] = node
        links += cf.links
        for x in cf.external_links:
            if x.type != "vxlan":
                raise UsageError(f"{path}: {x.type} link on {x.endpoint[0]}:{x.endpoint[1]}: "
                                 f"--stitch makes veth and vxlan links only")
            ends.setdefault(int(x.options["vni"]), []).append((h.name, x))
    tunnels: list[Tunnel] = []
    cut_pairs: list[ClabLink] = []
    for vni, pair in sorted(ends.items()):
        if len(pair) != 2:
            raise UsageError(f"VNI {vni} has {len(pair)} ends in the host files; a cut link needs 2")
        for (host, x), (far, _y) in ((pair[0], pair[1]), (pair[1], pair[0])):
            if by_addr.get(str(x.options["remote"])) != far:
                raise UsageError(f"{host}: vxlan link {x.endpoint[0]}:{x.endpoint[1]} (VNI {vni}) "
                                 f"points at {x.options['remote']}, not at {far}'s underlay address")
            tunnels.append(Tunnel(node=x.endpoint[0], interface=x.endpoint[1], host=host, vni=vni,
                                  local=part.host(host).underlay, remote=str(x.options["remote"]),
                                  dst_port=int(x.options.get("dst-port", 4789)), mtu=x.mtu))
        cut_pairs.append(ClabLink(pair[0][1].endpoint, pair[1][1].endpoint, pair[0][1].mtu))
    clab = ClabFile(top.resolve(), str(name), nodes, links, [])
    hosts = {h.name: (host_netns(clab.name, h.name), h.underlay) for h in part.hosts}
    return StitchPlan(clab=clab, all_links=links + cut_pairs, hosts=hosts,
                      underlay_ns=underlay_netns(clab.name), underlay_mtu=part.underlay_mtu,
                      tunnels=tunnels)


def _socket(ns: str) -> IPRoute:
    from pyroute2 import IPRoute  # here, not at import: the package import costs ~0.7 s

    with entered(ns):
        return IPRoute()


def build(plan: StitchPlan, node_fds: dict[str, int]) -> None:
    """Create the hosts' namespaces, the underlay bridge and every tunnel (see the module
    docstring). ``node_fds``: node -> open fd of its namespace (the netns runtime's). The
    caller has put :attr:`StitchPlan.namespaces` in the ledger first; on any failure it removes
    them with the lab. RailabError names the tunnel the kernel refuses; other OSError / pyroute2
    NetlinkError propagate."""
    from pyroute2.netlink.exceptions import NetlinkError

    create_netns(plan.namespaces)
    socks = {ns: _socket(ns) for ns in plan.namespaces}
    fds = {ns: os.open(netns_path(ns), os.O_RDONLY) for ns in plan.namespaces}
    try:
        u = socks[plan.underlay_ns]
        u.link("set", index=1, state="up")
        u.link("add", ifname=UNDERLAY_BRIDGE, kind="bridge", mtu=plan.underlay_mtu)
        br = u.link_lookup(ifname=UNDERLAY_BRIDGE)[0]
        u.link("set", index=br, state="up")
        ul: dict[str, int] = {}
        for k, (host, (ns, addr)) in enumerate(plan.hosts.items(), 1):
            s = socks[ns]
            s.link("set", index=1, state="up")
            u.link("add", ifname=bridge_port(k), kind="veth", mtu=plan.underlay_mtu,
                   peer={"ifname": UNDERLAY_IF, "net_ns_fd": fds[ns], "mtu": plan.underlay_mtu})
            u.link("set", ifname=bridge_port(k), master=br, state="up")
            i = ul[host] = s.link_lookup(ifname=UNDERLAY_IF)[0]
            s.link("set", index=i, state="up")
            ip = ipaddress.ip_address(addr)
            s.addr("add", index=i, address=addr, prefixlen=ip.max_prefixlen)
            for other, (_ons, oaddr) in plan.hosts.items():
                if other != host:
                    s.route("add", dst=f"{oaddr}/{ip.max_prefixlen}", oif=i, scope=_SCOPE_LINK)
        for t in plan.tunnels:
            s = socks[plan.hosts[t.host][0]]
            v6 = ipaddress.ip_address(t.local).version == 6
            addr_keys = ({"vxlan_local6": t.local, "vxlan_group6": t.remote} if v6 else
                         {"vxlan_local": t.local, "vxlan_group": t.remote})
            # created from the host's namespace (its UDP socket and underlay stay there) directly
            # inside the node's namespace, under the node's interface name
            try:
                s.link("add", ifname=t.interface, kind="vxlan", vxlan_id=t.vni, vxlan_port=t.dst_port,
                       vxlan_link=ul[t.host], mtu=t.mtu, net_ns_fd=node_fds[t.node], **addr_keys)
            except NetlinkError as exc:
                raise RailabError(f"{t.host}: the kernel refused VXLAN VNI {t.vni} for {t.node}:"
                                  f"{t.interface} (local {t.local}, remote {t.remote}, UDP "
                                  f"{t.dst_port}): {exc.args[-1] if exc.args else exc}; check the "
                                  f"partition's underlay addresses") from None
    finally:
        for s in socks.values():
            s.close()
        for fd in fds.values():
            os.close(fd)


def with_cut_links(plan: StitchPlan) -> ClabFile:
    """:attr:`StitchPlan.clab` with the cut links as pairs too (for router solicitations, which
    go out of both ends of every router-router link)."""
    return replace(plan.clab, links=list(plan.all_links))
