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
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Role = Literal["leaf", "spine", "server"]
Architecture = Literal["rail-only", "rail-optimized"]
NodeKind = Literal["frr", "sonic-vs", "linux"]
LinkRole = Literal["server-leaf", "leaf-spine"]
PathClass = Literal["intra-server", "intra-rail", "inter-rail", "inter-rail-pxn", "cross-group"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Node(_Strict):
    """One lab node. Switches carry ``asn``, ``router_id`` and ``loopback`` (an IPv4 /32)."""

    name: str
    role: Role
    kind: NodeKind
    group: int | None = Field(None, description="1-based group; None for spines")
    rails: list[int] = Field(default_factory=list, description="rails a leaf carries (1-based)")
    asn: int | None = None
    router_id: str | None = None
    loopback: str | None = Field(None, description="IPv4 address/32 on lo")
    ports: int | None = Field(None, description="fabric ports the node uses in the lab")


class Nic(_Strict):
    """One server NIC: ``eth<nic>`` on rail ``rail``, routed /31 to ``leaf:leaf_port``."""

    server: str
    nic: int = Field(description="1-based NIC index; interface eth<nic>")
    gpu: int = Field(description="0-based GPU index served by this NIC (gpu = nic - 1)")
    interface: str
    group: int
    rail: int
    address: str = Field(description="server side, address/31")
    gateway: str = Field(description="leaf side address (no prefix length)")
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


class LabSpec(_Strict):
    """The whole ``lab.json`` document."""

    schema_version: int = SCHEMA_VERSION
    name: str
    architecture: Architecture
    kind: NodeKind = Field(description="switch kind: frr or sonic-vs")
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
    expected_hops: dict[str, int | None] = Field(
        description="path class -> switch hops; None means unreachable by design"
    )

    # ---- convenience -------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        """Return the node called ``name``; raises KeyError naming the lab's nodes if absent."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"lab {self.name!r} has no node {name!r}")

    def by_role(self, role: Role) -> list[Node]:
        return [n for n in self.nodes if n.role == role]

    def nic(self, server: str, nic: int) -> Nic:
        for n in self.nics:
            if n.server == server and n.nic == nic:
                return n
        raise KeyError(f"lab {self.name!r} has no NIC {nic} on {server!r}")

    @classmethod
    def load(cls, path: str | Path) -> "LabSpec":
        """Read ``lab.json`` (a file, or a lab directory holding one).

        Raises FileNotFoundError with the path when it is missing.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "lab.json"
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: run `railab generate INTENT -o DIR` first")
        return cls.model_validate(json.loads(p.read_text()))

    def dump(self) -> str:
        """Deterministic JSON text (sorted keys, 2-space indent, trailing newline)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
