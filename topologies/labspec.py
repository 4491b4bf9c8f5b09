"""The lab inventory and expected state: the schema of ``lab.json``.

``railab generate`` writes one ``lab.json`` next to ``<lab>.clab.yml``. It is the contract between
the generators (``topologies``), the runtimes (``testbed.runtime``), the traffic engine
(``traffic``) and the checks (``checks``): every stage after generation reads this file, never the
Python objects that produced it.

Conventions (see ``docs/architecture.md``):

* Node names: spines ``spine<i>``; Rail-optimized leaves ``g<group>-leaf<rail>``; Rail-only leaves
  ``leaf<i>``; servers ``srv<i>`` numbered across the whole lab (group 1 first).
* Server NIC ``n`` (1-based) is interface ``eth<n>``, sits on rail ``n`` and serves GPU ``n-1``
  (the seed numbers GPUs 0-7 on rails 1-8).
* Every server NIC has a routed /31 to its leaf (leaf side even address, server side odd), carved
  from the rail subnet of its (group, rail); the leaf announces the rail subnet.
* Leaf-spine links carry no IPv4 address: BGP unnumbered over IPv6 link-local (RFC 5549/8950).
* Hop counts are routed (TTL-decrementing) switch hops between the source and destination NIC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from railab.errors import UsageError
from railab.topologies.bfd import BfdProfile
from railab.topologies.qos import QosProfile

SCHEMA_VERSION = 1

Role = Literal["leaf", "spine", "server", "superspine"]
Architecture = Literal["rail-only", "rail-optimized"]
#: a registered node kind (:mod:`railab.topologies.nodekinds`): frr, sonic-vs, linux, ...
NodeKindName = str
#: ``spine-superspine``: a pod spine to a super-spine of its plane (three-tier labs)
LinkRole = Literal["server-leaf", "leaf-spine", "spine-superspine"]
#: a registered path class (:mod:`railab.topologies.pathclasses`)
PathClassName = str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Node(_Strict):
    """One lab node. Switches carry ``asn``, ``router_id`` (IPv4Address) and ``loopback``
    (IPv4Interface, a /32); both serialise to the same strings as before (``"10.255.0.1"``,
    ``"10.255.0.1/32"``): compare with ``str(...)`` against text such as FRR's JSON."""

    name: str
    role: Role
    kind: NodeKindName
    group: int | None = Field(None, description="1-based group; None for spines")
    rails: list[int] = Field(default_factory=list, description="rails a leaf carries (1-based)")
    asn: int | None = None
    router_id: IPv4Address | None = None
    loopback: IPv4Interface | None = Field(None, description="IPv4 address/32 on lo")
    ports: int | None = Field(None, description="fabric ports the node uses in the lab")
    pod: int | None = Field(None, description="1-based pod (three-tier labs); None otherwise")


class Nic(_Strict):
    """One server NIC: ``eth<nic>`` on rail ``rail``, routed /31 to ``leaf:leaf_port``.

    ``address`` is an IPv4Interface (``address.ip``, ``address.network``), ``gateway`` an
    IPv4Address; in ``lab.json`` they are the strings ``"10.0.1.1/31"`` and ``"10.0.1.0"``.
    """

    server: str
    nic: int = Field(description="1-based NIC index; interface eth<nic>")
    gpu: int = Field(description="0-based GPU index served by this NIC (gpu = nic - 1)")
    interface: str
    group: int
    rail: int
    address: IPv4Interface = Field(description="server side, address/31")
    gateway: IPv4Address = Field(description="leaf side address (no prefix length)")
    table: int = Field(description="policy-routing table id: from <address> lookup <table>")
    leaf: str
    leaf_port: str


class Endpoint(_Strict):
    node: str
    interface: str


class Link(_Strict):
    """A point-to-point link; ``a`` is the lower tier (server, or leaf on leaf-spine links)."""

    a: Endpoint
    b: Endpoint
    role: LinkRole
    speed_gbps: int
    mtu: int


class RailSubnet(_Strict):
    group: int
    rail: int
    prefix: str = Field(description="rail aggregate the leaf announces, e.g. 10.0.1.0/24")
    leaf: str


class BgpSession(_Strict):
    """One unnumbered eBGP session, listed once per link (``node`` is the leaf end)."""

    node: str
    interface: str
    peer: str
    peer_interface: str
    local_asn: int
    remote_asn: int


class ExpectedRoute(_Strict):
    """A prefix ``node`` must have installed, with ``ecmp_width`` next hops via ``interfaces``."""

    prefix: str
    ecmp_width: int
    interfaces: list[str] = Field(default_factory=list)


#: What the sonic-vs output renders per load-balancing mode (issue 30): SONiC's YANG models
#: (202305 and master, /work/shared/sonic-yang-models) have the per-flow ECMP hash fields
#: (SWITCH_HASH, master) and a bare ACL REDIRECT action (no target leaf), but no table for packet
#: spraying, flowlet ARS or telemetry-driven WCMP weights: railab renders none of them.
SONIC_LB = {
    "ecmp": "SONiC's default per-flow ECMP hash; nothing to render",
    "spray-random": "not rendered: SONiC's YANG models have no packet-spraying table",
    "spray-rr": "not rendered: SONiC's YANG models have no packet-spraying table",
    "flowlet": "not rendered: SONiC's YANG models (202305, master) have no flowlet/ARS table",
    "pbr": "not rendered: SONiC's ACL PACKET_ACTION is the bare REDIRECT enum in its YANG models "
           "(sonic-types.yang packet_action, 202305 and master), with no leaf for the target "
           "port or next hop, so a validated config_db cannot bind a server port to an uplink",
    "wcmp": "not rendered: SONiC has no table for telemetry-driven next-hop weights",
}


class LoadBalancing(_Strict):
    """lab.json ``load_balancing``: ``mode`` (railab.testbed.lb.MODES), applied by the netns
    runtime at bring-up after convergence; ``sonic``: what the sonic-vs output does for it
    (:data:`SONIC_LB`); ``runtimes``: where it is built."""

    mode: Literal["ecmp", "spray-random", "spray-rr", "flowlet", "pbr", "wcmp"] = "ecmp"
    sonic: str = ""
    runtimes: str = "netns (kernel policy routing, nftables, next-hop groups in the leaves' namespaces)"

    @model_validator(mode="before")
    @classmethod
    def _sonic_note(cls, d):
        if isinstance(d, dict) and not d.get("sonic"):
            d = {**d, "sonic": SONIC_LB.get(d.get("mode", "ecmp"), "")}
        return d


class LabSpec(_Strict):
    """The whole ``lab.json`` document."""

    schema_version: int = SCHEMA_VERSION
    name: str
    architecture: Architecture
    kind: NodeKindName = Field(description="switch kind: frr, sonic-vs or another registered kind")
    design: dict = Field(default_factory=dict, description="the production intent and plan summary")
    gpus_per_server: int
    rails: int
    groups: int
    servers_per_group: int
    spines: int
    links_per_leaf_spine_pair: int
    port_speed_gbps: int
    oversubscription: str
    mtu: int
    nodes: list[Node]
    nics: list[Nic]
    links: list[Link]
    rail_subnets: list[RailSubnet]
    bgp_sessions: list[BgpSession]
    expected_routes: dict[str, list[ExpectedRoute]]
    expected_hops: dict[PathClassName, int | None] = Field(
        description="path class -> switch hops; None means unreachable by design"
    )
    node_kinds: dict[str, dict] = Field(
        default_factory=dict,
        description="the registry records (railab.topologies.nodekinds) of the kinds in use",
    )
    qos: QosProfile = Field(default_factory=QosProfile, description="RoCEv2 QoS profile")
    load_balancing: LoadBalancing = Field(
        default_factory=lambda: LoadBalancing(),
        description="the leaves' load-balancing mode at bring-up (lab.load_balancing)")
    bfd: BfdProfile = Field(default_factory=BfdProfile, description="fabric BFD timers")
    ra_interval_s: int = Field(3, ge=1, le=1800,
                               description="IPv6 RA interval on fabric ports, s (topologies.bfd)")
    bgp_keepalive_s: int = Field(3, ge=1, description="BGP keepalive interval, s (timers bgp K H)")
    bgp_hold_s: int = Field(9, ge=3, description="BGP hold time, s: a dead peer is detected by then")
    control_plane_rule: str = Field("", description="how bfd and ra_interval_s were chosen")
    tiers: int = Field(2, ge=2, le=3, description="switch tiers: 2 (leaf/spine) or 3 (pods "
                       "under super-spines); Rail-only labs say 2 and have no spines")
    pods: int = Field(1, ge=1, description="pods (three-tier); 1 otherwise")
    groups_per_pod: int = Field(0, ge=0, description="groups per pod (three-tier); 0 otherwise")
    superspines: int = Field(0, ge=0, description="super-spines (three-tier); 0 otherwise")
    warnings: list[str] = Field(default_factory=list,
                                description="the production plan's and the lab's warnings")

    # ---- indexed accessors (built once per LabSpec; the model is frozen) ----------------------
    @cached_property
    def _index(self) -> _Index:
        return _Index(self)

    def node(self, name: str) -> Node:
        """The node called ``name``; raises KeyError naming the lab if absent."""
        try:
            return self._index.nodes[name]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no node {name!r}") from None

    def by_role(self, role: Role) -> list[Node]:
        """Nodes of ``role`` (``leaf``, ``spine``, ``server``) in lab order."""
        return list(self._index.roles.get(role, ()))

    def nic(self, server: str, nic: int) -> Nic:
        """NIC ``nic`` (1-based, ``eth<nic>``) of ``server``; raises KeyError if absent."""
        try:
            return self._index.nics[(server, nic)]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no NIC {nic} on {server!r}") from None

    def nics_of(self, server: str) -> list[Nic]:
        """The NICs of ``server`` in NIC order (empty for a switch or an unknown node)."""
        return list(self._index.nics_of.get(server, ()))

    def nic_at(self, leaf: str, port: str) -> Nic | None:
        """The server NIC cabled to ``leaf:port``, or None (a fabric port or no port)."""
        return self._index.nic_at.get((leaf, port))

    def peer(self, node: str, port: str) -> tuple[str, str]:
        """The far end ``(node, port)`` of the link on ``node:port``; KeyError if uncabled."""
        try:
            return self._index.peer[(node, port)]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no link on {node}:{port}") from None

    @property
    def peers(self) -> Mapping[tuple[str, str], tuple[str, str]]:
        """Read-only ``{(node, port): (peer node, peer port)}`` over every link end."""
        return MappingProxyType(self._index.peer)

    def links_of(self, node: str) -> list[tuple[str, str, str]]:
        """``(port, peer node, peer port)`` for every link of ``node``, in port order."""
        return list(self._index.links_of.get(node, ()))

    def link_on(self, node: str, port: str) -> Link:
        """The :class:`Link` on ``node:port``; KeyError if uncabled."""
        try:
            return self._index.link[(node, port)]
        except KeyError:
            raise KeyError(f"lab {self.name!r} has no link on {node}:{port}") from None

    def session_on(self, node: str, port: str) -> BgpSession | None:
        """The BGP session on ``node:port`` (either end: leaf or spine side), or None."""
        return self._index.session.get((node, port))

    def sessions_of(self, node: str) -> list[BgpSession]:
        """The BGP sessions with an end on ``node`` (as listed, once per link)."""
        return list(self._index.sessions_of.get(node, ()))

    @classmethod
    def load(cls, path: str | Path) -> LabSpec:
        """Read ``lab.json`` (a file, or a lab directory holding one).

        Raises FileNotFoundError with the path when it is missing, UsageError (exit 2) naming the
        file when it is not JSON. A file read before and unchanged since (same inode, mtime and
        size) gives the same frozen instance back.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "lab.json"
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: run `railab generate INTENT -o DIR` first")
        st = p.stat()
        key = (str(p.resolve()), st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _LOADED.get(key)
        if cached is not None and type(cached) is cls:  # frozen: one instance per file version
            return cached
        try:
            doc = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{p}: not valid JSON ({exc}): regenerate it (railab generate INTENT -o DIR)") from None
        spec = cls.model_validate(doc)
        if len(_LOADED) >= 8:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = spec
        return spec

    def dump(self) -> str:
        """Deterministic JSON text (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


#: LabSpec.load's memo: (path, inode, mtime, size) -> the validated (frozen) spec. ``up`` and
#: the convergence wait both read lab.json; validating it is ~1 s on the full 1024-GPU fabric.
_LOADED: dict[tuple, LabSpec] = {}


class _Index:
    """Lookup tables over one LabSpec, built once (see :meth:`LabSpec._index`)."""

    def __init__(self, spec: LabSpec) -> None:
        self.nodes = {n.name: n for n in spec.nodes}
        self.roles: dict[str, list[Node]] = {}
        for n in spec.nodes:
            self.roles.setdefault(n.role, []).append(n)
        self.nics = {(n.server, n.nic): n for n in spec.nics}
        self.nics_of: dict[str, list[Nic]] = {}
        for n in sorted(spec.nics, key=lambda n: n.nic):
            self.nics_of.setdefault(n.server, []).append(n)
        self.nic_at = {(n.leaf, n.leaf_port): n for n in spec.nics}
        self.peer: dict[tuple[str, str], tuple[str, str]] = {}
        self.link: dict[tuple[str, str], Link] = {}
        links_of: dict[str, list[tuple[str, str, str]]] = {}
        for lk in spec.links:
            for x, y in ((lk.a, lk.b), (lk.b, lk.a)):
                self.peer[(x.node, x.interface)] = (y.node, y.interface)
                self.link[(x.node, x.interface)] = lk
                links_of.setdefault(x.node, []).append((x.interface, y.node, y.interface))
        self.links_of = {n: sorted(v, key=lambda t: _port_key(t[0])) for n, v in links_of.items()}
        self.session: dict[tuple[str, str], BgpSession] = {}
        self.sessions_of: dict[str, list[BgpSession]] = {}
        for s in spec.bgp_sessions:
            self.session[(s.node, s.interface)] = s
            self.session[(s.peer, s.peer_interface)] = s
            self.sessions_of.setdefault(s.node, []).append(s)
            self.sessions_of.setdefault(s.peer, []).append(s)


def _port_key(port: str) -> tuple[int, str]:
    """Sort ``eth<k>`` ports by ``k``; other names after them, by name."""
    digits = port[3:] if port.startswith("eth") else ""
    return (int(digits), "") if digits.isdigit() else (1 << 30, port)
