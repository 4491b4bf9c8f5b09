"""Fabric sizing planner: "N GPUs on these switches" -> a complete, checked fabric plan.

Rules are the seed design guide's (``shared/seed/gpu-backend-fabric-design-guide.txt``):

Rail-only (single leaf tier, no spines; seed "Max Capacity per Model (Rail-only)"):
  * rails = GPUs per server; every GPU's NIC n goes to the leaf carrying rail n.
  * leaves = ceil(GPUs / leaf ports), rounded up to a divisor of the rail count so each leaf
    carries whole rails (seed: 512 GPUs on CX864E-N -> 4 leaves, two rails each).
  * limit: one leaf per rail -> max servers = leaf ports, max GPUs = rails x leaf ports.

Rail-optimized (2-tier Clos; seed "Node Requirements Summary" / "Maximum Scalability Limits"):
  * leaves per group = GPUs per server (one leaf per rail per group).
  * oversubscription d:u splits leaf ports: downlinks = floor(ports x d / (d+u)), uplinks = the
    rest (half and half at 1:1); servers per group = downlinks.
  * groups = ceil(servers / servers per group); leaves = leaves per group x groups.
  * spines = ceil(leaves x leaf uplinks / spine ports); links per leaf-spine pair = leaf
    uplinks / spines (warned about when uneven).
  * limits: max groups = floor(spine ports / leaves per group); max servers = max groups x
    servers per group; max GPUs = max servers x GPUs per server.

Three tiers (beyond the seed, which plans two; planned automatically past the two-tier limit or
with ``tiers=3``; RFC 7938 section 3.2's 5-stage folded Clos): the seed's rules carried over,
1:1 at every tier. A pod spine splits its ports half down, half up, so a pod holds
floor(spine ports / 2 / leaves per group) groups (half the two-tier maximum); spines per pod =
ceil(leaves per pod x leaf uplinks / (spine ports / 2)); pod spine ``i`` of every pod connects to
the super-spines of plane ``i``: per plane ceil(pods x spine uplinks / super-spine ports),
super-spines = spines per pod x per plane; max pods = super-spine ports. ``cross-pod`` = 5 hops.

NIC and fabric speeds may differ (``nic_speed_gbps``, ``fabric_speed_gbps``; both
``port_speed_gbps`` by default): the leaf then splits by cage, each cage at one speed.
Optics are breakout-aware (:data:`OPTICS_SOURCES`: vendor datasheets; the seed says nothing of
optics): one per NIC, one per used switch cage (an 800G twin-port serves two 400G links).

``auto`` picks Rail-only while the GPU count fits the leaf model's Rail-only limit, else
Rail-optimized. Every bad input raises :class:`PlanError` (a ``railab.errors.UsageError``, so a
``ValueError``) whose message says what to change. Names follow ``docs/architecture.md``: Rail-optimized leaves
``g<group>-leaf<rail>``, Rail-only leaves ``leaf<i>``, spines ``spine<i>``.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from railab.errors import UsageError
from railab.topologies.cabling import extra_link_spines
from railab.topologies.catalog import CatalogError, SwitchModel, get_model, load_catalog
from railab.topologies.naming import leaf_name, pod_spine_name, spine_name, superspine_name
from railab.topologies.pathclasses import Fabric, plan_classes, plan_hops
from railab.topologies.units import RatioError, ratio_parts, ratio_text

__all__ = [
    "Design",
    "Plan",
    "PlanError",
    "LeafPlan",
    "TierPorts",
    "Limits",
    "plan",
    "compare",
    "node_table",
    "hop_text",
    "parse_oversubscription",
    "PATH_CLASSES",
    "DEFAULT_TABLE_GPUS",
]

Architecture = Literal["rail-only", "rail-optimized"]
#: The planner's path classes (registry :mod:`railab.topologies.pathclasses`, ``in_plan``).
PATH_CLASSES = plan_classes()
DEFAULT_TABLE_GPUS = (256, 512, 1024, 2048, 4096, 8192)


class PlanError(UsageError):
    """A design the planner cannot build; the message says what to change."""


class Design(BaseModel):
    """What the user asks for.

    * ``architecture`` -- ``rail-only``, ``rail-optimized`` or ``auto`` (default).
    * ``gpus`` [GPUs] -- total GPU count; must be whole servers.
    * ``gpus_per_server`` [GPUs] -- also the number of rails (default 8, DGX H100).
    * ``leaf`` / ``spine`` -- catalog model names; ``spine`` defaults to the leaf model.
    * ``port_speed_gbps`` [Gb/s] -- speed of every port (default 400) unless split by:
    * ``nic_speed_gbps`` [Gb/s] -- server NIC / leaf downlink speed (default: port speed);
    * ``fabric_speed_gbps`` [Gb/s] -- leaf-spine and spine-super-spine speed (default: port
      speed); e.g. 400G NICs with 800G leaf-spine links;
    * ``oversubscription`` -- leaf downlink:uplink bandwidth ratio ``d:u`` (default ``1:1``).
    * ``tiers`` -- ``2``, ``3`` or None (default: 2, or 3 past the two-tier limit; Rail-only is
      always one tier);
    * ``superspine`` -- super-spine model (three tiers); defaults to the spine model.
    """

    model_config = ConfigDict(extra="forbid")

    architecture: Literal["rail-only", "rail-optimized", "auto"] = "auto"
    gpus: int
    gpus_per_server: int = 8
    leaf: str
    spine: str | None = None
    port_speed_gbps: int = 400
    nic_speed_gbps: int | None = None
    fabric_speed_gbps: int | None = None
    oversubscription: str = "1:1"
    tiers: Literal[2, 3] | None = None
    superspine: str | None = None

    @property
    def nic_speed(self) -> int:
        """Server NIC speed [Gb/s]."""
        return self.nic_speed_gbps or self.port_speed_gbps

    @property
    def fabric_speed(self) -> int:
        """Leaf-spine / spine-super-spine link speed [Gb/s]."""
        return self.fabric_speed_gbps or self.port_speed_gbps


class LeafPlan(BaseModel):
    """One leaf: ``name``, ``group`` (1-based), the ``rails`` it carries (1-based), the servers
    attached and its used ports [ports]."""

    model_config = ConfigDict(extra="forbid")

    name: str
    group: int
    rails: list[int]
    servers: int
    downlinks_used: int
    uplinks_used: int


class TierPorts(BaseModel):
    """Ports of one switch tier [ports at the plan's port speed]."""

    model_config = ConfigDict(extra="forbid")

    switches: int
    ports_per_switch: int
    total: int
    used: int
    free: int


class Limits(BaseModel):
    """Scaling limits of the chosen architecture and tier count with these switch models
    (``max_pods``: three tiers only, else null)."""

    model_config = ConfigDict(extra="forbid")

    max_gpus: int
    max_servers: int
    max_groups: int
    max_leaves: int
    max_pods: int | None = None


class OpticsLine(BaseModel):
    """One line of the optics bill: ``where`` (``server NIC``, ``leaf``, ``spine``,
    ``superspine``), the ``part`` (form factor, speed, breakout), how many (``count``) and how
    many links one transceiver serves (``links_each``: 2 for an 800G twin-port split 2 x 400G)."""

    model_config = ConfigDict(extra="forbid")

    where: str
    part: str
    count: int
    links_each: int


class CableLine(BaseModel):
    """One line of the cable bill: link ``kind``, link ``speed_gbps``, the ``part`` (fibre type),
    ``count`` fibres (``per_link`` per link)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    speed_gbps: int
    part: str
    count: int
    per_link: int


class Plan(BaseModel):
    """A complete fabric plan. Its JSON (``model_dump(mode='json')``) is the stable,
    documented output of ``railab plan --json`` (see ``docs/planner.md``).

    Counts are switches, links or ports; bandwidths are Gb/s; latencies ns.
    """

    model_config = ConfigDict(extra="forbid")

    architecture: Architecture
    selected_by: Literal["user", "auto"]
    gpus: int
    gpus_per_server: int
    servers: int
    rails: int
    groups: int
    servers_per_group: int
    partial_last_group: int | None = Field(
        description="servers in the last group when it is not full, else null"
    )
    rails_per_leaf: int
    leaf_model: str
    spine_model: str | None
    port_speed_gbps: int
    oversubscription: str = Field(description="requested downlink:uplink ratio")
    oversubscription_actual: str | None = Field(
        description="downlink:uplink ports per leaf as planned (null for Rail-only)"
    )
    leaf_ports: int
    spine_ports: int | None
    leaf_switches: int
    spine_switches: int
    total_switches: int
    leaves_per_group: int
    leaf_downlinks: int = Field(description="ports per leaf reserved for servers")
    leaf_uplinks: int = Field(description="ports per leaf towards the spines")
    leaf_downlink_gbps: int
    leaf_uplink_gbps: int
    links_per_leaf_spine_pair: int = Field(
        description="parallel links between every leaf and every spine (the smaller count "
        "when uplinks do not split evenly)"
    )
    links_per_leaf_spine_pair_max: int
    server_leaf_links: int
    leaf_spine_links: int
    total_links: int
    optics: int = Field(description="transceivers, breakout-aware: one per server NIC, one per "
                        "used switch cage (an 800G twin-port cage split 2 x 400G serves two "
                        "links); see optics_detail")
    optics_detail: list[OpticsLine] = Field(default_factory=list)
    cables: list[CableLine] = Field(default_factory=list, description="fibres by link kind")
    assumptions: list[str] = Field(default_factory=list, description="what the optics and "
                                   "three-tier figures assume, with their sources")
    nic_speed_gbps: int = Field(0, description="server NIC / leaf downlink speed, Gb/s")
    fabric_speed_gbps: int = Field(0, description="leaf-spine / spine-super-spine speed, Gb/s")
    tiers: int = Field(2, description="switch tiers: 1 (Rail-only), 2 (leaf/spine) or 3 "
                       "(pods of leaves and spines under super-spines)")
    beyond_seed: bool = Field(False, description="true for three tiers: the seed guide plans "
                              "two tiers only; the rules are carried over (1:1 at every tier)")
    pods: int = Field(1, description="pods (three tiers), else 1")
    groups_per_pod: int | None = Field(None, description="groups one pod holds (three tiers)")
    spines_per_pod: int | None = Field(None, description="spines in each pod (three tiers)")
    spine_downlinks: int | None = Field(None, description="pod spine ports towards leaves")
    spine_uplinks: int | None = Field(None, description="pod spine ports towards super-spines")
    superspine_model: str | None = None
    superspine_ports: int | None = None
    superspine_switches: int = Field(0, description="super-spines (three tiers), else 0")
    superspines_per_plane: int | None = Field(None, description="super-spines each pod spine "
                                              "index (plane) connects to")
    links_per_spine_superspine_pair: int | None = None
    links_per_spine_superspine_pair_max: int | None = None
    spine_superspine_links: int = 0
    superspine_latency_ns: int | None = None
    ports: dict[str, TierPorts]
    limits: Limits
    leaves: list[LeafPlan]
    spines: list[str]
    superspines: list[str] = Field(default_factory=list)
    hops: dict[str, int | None] = Field(
        description="path class -> routed switch hops NIC to NIC; null means unreachable"
    )
    hop_notes: dict[str, str]
    latency_ns: dict[str, int | None] = Field(
        description="path class -> sum of switch port-to-port latencies on the path"
    )
    leaf_latency_ns: int | None
    spine_latency_ns: int | None
    warnings: list[str]


# ---------------------------------------------------------------------------------------------
# helpers


def parse_oversubscription(text: str) -> tuple[int, int]:
    """Parse ``d:u`` (e.g. ``1:1``, ``2:1``, ``3:1``) into positive integers ``(d, u)``.

    The one ratio parser is :func:`railab.topologies.units.ratio_parts`; this raises its
    explanation as PlanError (malformed, or either side zero: ``d:0`` leaves no uplinks).
    """
    try:
        return ratio_parts(text)
    except RatioError as exc:
        raise PlanError(str(exc)) from None


def _lookup(catalog: dict[str, SwitchModel], name: str) -> SwitchModel:
    try:
        return get_model(catalog, name)
    except CatalogError as exc:
        raise PlanError(str(exc)) from None


def _ports(model: SwitchModel, speed: int, role: str) -> int:
    try:
        return model.ports_at(speed)
    except CatalogError as exc:
        raise PlanError(f"{role} {exc}") from None


def _check_common(design: Design) -> int:
    """Validate the counts shared by both architectures; return the server count."""
    r = design.gpus_per_server
    if r <= 0:
        raise PlanError(
            f"gpus_per_server must be at least 1 (got {r}); it is also the rail count, e.g. 8"
        )
    if design.gpus <= 0:
        raise PlanError(f"GPU count must be positive (got {design.gpus}); e.g. --gpus 1024")
    for what, v in (("port", design.port_speed_gbps), ("NIC", design.nic_speed_gbps),
                    ("fabric", design.fabric_speed_gbps)):
        if v is not None and v <= 0:
            raise PlanError(f"{what} speed must be positive (got {v}G); e.g. 400G")
    if design.gpus % r:
        lo = design.gpus // r * r
        hi = lo + r
        near = f"{lo} or {hi}" if lo else f"{hi}"
        raise PlanError(
            f"{design.gpus} GPUs is not a whole number of {r}-GPU servers: use {near} GPUs "
            f"(a multiple of {r}), or change --gpus-per-server"
        )
    return design.gpus // r


def _hops(arch: Architecture, rails_per_leaf: int, rails: int, groups: int) -> tuple[dict, dict]:
    return plan_hops(Fabric(arch, rails, rails_per_leaf, groups))


def hop_text(p: Plan | dict, path_class: str) -> str:
    """How a path class's hop count reads in a table: the count, ``"n/a"`` (the class cannot
    occur, e.g. cross-group with a single group), ``"1 or none"`` (Rail-only inter-rail when a
    leaf carries 2+ rails but not all: 1 hop between rails of one leaf, unreachable otherwise;
    use PXN), else ``"unreachable"``.

    ``p`` is a Plan or its JSON dict (``compare()`` output); the plan and ``--compare`` views
    both use this so they never disagree. KeyError if ``path_class`` is not a planner class.
    """
    d = p.model_dump(include={"hops", "hop_notes", "rails_per_leaf"}) if isinstance(p, Plan) else p
    if path_class not in plan_classes():
        raise KeyError(f"unknown path class {path_class!r}; one of {', '.join(plan_classes())}")
    h = d["hops"].get(path_class)
    note = d["hop_notes"].get(path_class, "")
    if h is not None:
        return str(h)
    if note.startswith("n/a"):
        return "n/a"
    if path_class == "inter-rail" and d.get("rails_per_leaf", 1) > 1:
        return "1 or none"
    return "unreachable"


def _latency(hops: dict, leaf: SwitchModel, spine: SwitchModel | None,
             superspine: SwitchModel | None = None) -> dict[str, int | None]:
    """Path class -> summed switch port-to-port latency [ns] (None when unreachable or a
    model's latency is unknown): 1 hop a leaf, 3 leaf-spine-leaf, 5 leaf-spine-super-spine-
    spine-leaf."""
    out: dict[str, int | None] = {}
    for cls, h in hops.items():
        tiers = {0: [], 1: [leaf], 3: [leaf, spine, leaf],
                 5: [leaf, spine, superspine, spine, leaf]}.get(h) if h is not None else None
        if tiers is None or any(m is None or m.latency_ns is None for m in tiers):
            out[cls] = None
        else:
            out[cls] = sum(m.latency_ns for m in tiers)
    return out


def _cages(down: int, down_breakout: int, up: int, up_breakout: int) -> int:
    """Cages a leaf fills with ``down`` ports at the NIC speed and ``up`` at the fabric speed
    (one speed: the ports share cages; two speeds: every cage runs one speed)."""
    if down_breakout == up_breakout:
        return math.ceil((down + up) / down_breakout)
    return math.ceil(down / down_breakout) + math.ceil(up / up_breakout)


#: Sources of the optics bill (the seed says nothing of optics).
OPTICS_SOURCES = (
    "switch-side optics: one transceiver per used cage; an 800G OSFP twin-port transceiver "
    "(2x400G, e.g. 2xDR4/2xSR4 with two MPO-12/APC connectors) serves two 400G links (NVIDIA "
    "MMS4X00-NM / MMA4Z00-NS datasheets, docs.nvidia.com/networking/display/"
    "mms4x00nm800g500m/application+overview, .../400g100gpam4ovpub/"
    "transceivers-and-fiber-details-100g-pam4); a cage at its native speed takes one "
    "transceiver per link (400G QSFP-DD DR4/SR4 on CX732Q-N, QSFP-DD MSA)",
    "server-side optics: one single-port 400G OSFP or QSFP112 transceiver per NIC "
    "(ConnectX-7 class NICs; the same datasheets: twin-port switch optics link to single-port "
    "400G NIC optics over straight fibres)",
    "fibres: one straight MPO-12 fibre per 400G link (DR4/SR4 use 4 lanes of one MPO-12), two "
    "per 800G link (2xDR4: the twin-port datasheets: 'require ordering two fibers'); copper "
    "DAC/ACC for short in-rack runs is not counted",
)


def _optic_part(model: SwitchModel | None, speed: int) -> tuple[str, int]:
    """``(part text, links per transceiver)`` for a switch model's cage at ``speed``, or the
    NIC optic when ``model`` is None."""
    if model is None:
        return f"{speed}G single-port OSFP/QSFP112 (NIC)", 1
    b = model.breakout_at(speed)
    ff = model.form_factor or "cage"
    if b == 1:
        return f"{speed}G {ff}", 1
    twin = "twin-port " if b == 2 else ""
    return f"{model.native_speed_gbps}G {ff} {twin}{b}x{speed}G", b


def _fibres(speed: int) -> tuple[str, int]:
    if speed >= 800:
        return f"MPO-12 fibre ({speed // 400} per {speed}G link, 2xDR4)", speed // 400
    return f"MPO-12 fibre ({speed}G DR4/SR4)", 1


def _bill(design: Design, leaf: SwitchModel, spine: SwitchModel | None,
          superspine: SwitchModel | None, ends: list[tuple], links: dict[str, tuple[int, int]]
          ) -> tuple[list[OpticsLine], list[CableLine], list[str]]:
    """Optics and cable bill: ``ends`` = ``(where, model | None for NICs, transceivers,
    speed)`` (the leaf's speed None: its part names both speeds), ``links`` = ``kind ->
    (links, speed)``. Returns the lines and the printed assumptions (with sources)."""
    optics: list[OpticsLine] = []
    for where, model, count, spd in ends:
        if count <= 0:
            continue
        if where == "leaf" and spd is None:
            nic, fab = design.nic_speed, design.fabric_speed
            part, each = _optic_part(model, nic)
            if nic != fab:
                part += f" (downlinks) / {_optic_part(model, fab)[0]} (uplinks)"
        else:
            part, each = _optic_part(model, spd)
        optics.append(OpticsLine(where=where, part=part, count=count, links_each=each))
    cables = []
    for kind, (n, spd) in links.items():
        if n:
            part, per = _fibres(spd)
            cables.append(CableLine(kind=kind, speed_gbps=spd, part=part, count=n * per,
                                    per_link=per))
    return optics, cables, list(OPTICS_SOURCES)


# ---------------------------------------------------------------------------------------------
# the two architectures


def _rail_only_limit(leaf_ports: int, rails: int) -> int:
    return leaf_ports * rails


def _plan_rail_only(design: Design, leaf: SwitchModel, selected_by: str) -> Plan:
    servers = _check_common(design)
    rails = design.gpus_per_server
    speed = design.nic_speed
    p = _ports(leaf, speed, "leaf")
    warnings: list[str] = []
    max_gpus = _rail_only_limit(p, rails)
    if design.gpus > max_gpus:
        raise PlanError(
            f"{design.gpus} GPUs is past the Rail-only limit of {leaf.name} leaves: one leaf per "
            f"rail gives at most {p} servers / {max_gpus} GPUs ({rails} x {p}-port leaves): "
            "use rail-optimized (--arch rail-optimized), or fewer GPUs"
        )
    need = math.ceil(design.gpus / p)
    n = next(k for k in range(need, rails + 1) if rails % k == 0)
    per_leaf = rails // n
    if n != need:
        warnings.append(
            f"{need} leaves would hold the GPUs, but each leaf carries whole rails: rounded up "
            f"to {n} leaves ({per_leaf} rail(s) each)"
        )
    if design.spine:
        warnings.append(f"rail-only has no spine tier: spine model {design.spine} is not used")
    if design.oversubscription.replace(" ", "") != "1:1":
        warnings.append(
            f"oversubscription {design.oversubscription} does not apply: Rail-only leaves have "
            "no uplinks"
        )
    leaves = [
        LeafPlan(
            name=leaf_name(i),
            group=1,
            rails=list(range((i - 1) * per_leaf + 1, i * per_leaf + 1)),
            servers=servers,
            downlinks_used=servers * per_leaf,
            uplinks_used=0,
        )
        for i in range(1, n + 1)
    ]
    used = design.gpus
    hops, notes = _hops("rail-only", per_leaf, rails, 1)
    if design.fabric_speed_gbps and design.fabric_speed_gbps != speed:
        warnings.append(f"fabric speed {design.fabric_speed_gbps}G does not apply: Rail-only "
                        "leaves have no uplinks")
    if design.tiers == 2:
        warnings.append("tiers 2 does not apply: Rail-only is a single leaf tier")
    brk = leaf.breakout_at(speed)
    optics, cables, assumptions = _bill(
        design, leaf, None, None,
        [("server NIC", None, design.gpus, speed),
         ("leaf", leaf, n * math.ceil(servers * per_leaf / brk), speed)],
        {"server-leaf": (design.gpus, speed)})
    return Plan(
        architecture="rail-only",
        selected_by=selected_by,
        gpus=design.gpus,
        gpus_per_server=rails,
        servers=servers,
        rails=rails,
        groups=1,
        servers_per_group=servers,
        partial_last_group=None,
        rails_per_leaf=per_leaf,
        leaf_model=leaf.name,
        spine_model=None,
        port_speed_gbps=design.port_speed_gbps,
        nic_speed_gbps=speed,
        fabric_speed_gbps=0,
        tiers=1,
        oversubscription=design.oversubscription,
        oversubscription_actual=None,
        leaf_ports=p,
        spine_ports=None,
        leaf_switches=n,
        spine_switches=0,
        total_switches=n,
        leaves_per_group=n,
        leaf_downlinks=p,
        leaf_uplinks=0,
        leaf_downlink_gbps=p * speed,
        leaf_uplink_gbps=0,
        links_per_leaf_spine_pair=0,
        links_per_leaf_spine_pair_max=0,
        server_leaf_links=design.gpus,
        leaf_spine_links=0,
        total_links=design.gpus,
        optics=sum(o.count for o in optics),
        optics_detail=optics,
        cables=cables,
        assumptions=assumptions,
        ports={
            "leaf": TierPorts(
                switches=n, ports_per_switch=p, total=n * p, used=used, free=n * p - used
            ),
            "spine": TierPorts(switches=0, ports_per_switch=0, total=0, used=0, free=0),
        },
        limits=Limits(max_gpus=max_gpus, max_servers=p, max_groups=1, max_leaves=rails),
        leaves=leaves,
        spines=[],
        hops=hops,
        hop_notes=notes,
        latency_ns=_latency(hops, leaf, None),
        leaf_latency_ns=leaf.latency_ns,
        spine_latency_ns=None,
        warnings=warnings,
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _uneven_split_warning(up: int, down: int, n_spines: int) -> str:
    """The warning for ``up`` leaf uplinks over ``n_spines`` spines when ``up % n_spines != 0``.

    Says how uneven the split is (the spines with one more link carry that much more of each
    leaf's ECMP traffic; ECMP hashes per link) and suggests a usable fix: a spine count up to
    twice the plan that divides ``up`` with 2+ links per pair, if any, and the uplink count per
    leaf that splits evenly over the planned spines (the extra ports left unused). Requires
    ``n_spines <= up`` (the planner sizes spines from the uplinks, so it always holds).
    """
    lo, rem = divmod(up, n_spines)
    hi = lo + 1
    more = round(100 * (hi - lo) / lo)
    get, each = ("gets", "it carries") if rem == 1 else ("get", "each carries")
    msg = (
        f"{up} leaf uplinks do not split evenly over {n_spines} spines: {rem} of the "
        f"{n_spines} spines {get} {_plural(hi, 'link')} per leaf, the others {lo} (uneven ECMP: "
        f"{each} {more}% more of a leaf's traffic; the spines taking the extra link rotate from "
        "leaf to leaf, see the cabling plan)"
    )
    fixes = []
    even = [k for k in range(n_spines + 1, min(2 * n_spines, up // 2) + 1) if up % k == 0]
    if even:
        fixes.append(f"use {even[0]} spines ({_plural(up // even[0], 'link')} per pair)")
    up_even = lo * n_spines
    fixes.append(
        f"cable {up_even} uplinks per leaf over the {n_spines} spines "
        f"({_plural(lo, 'link')} per pair, {_plural(up - up_even, 'port')} per leaf left unused, "
        f"{down / up_even:.2f}:1 oversubscription)"
    )
    return msg + "; for an even split: " + ", or ".join(fixes)


def _bigger_spines(catalog: dict[str, SwitchModel], speed: int, need_ports: int) -> list[str]:
    out = []
    for m in sorted(catalog.values(), key=lambda m: m.name):
        try:
            ports = m.ports_at(speed)
        except CatalogError:
            continue
        if ports >= need_ports:
            out.append(f"{m.name} ({ports} x {speed}G)")
    return out


def _leaf_split(design: Design, leaf: SwitchModel, d: int, u: int) -> tuple[int, int]:
    """Leaf ``(downlinks, uplinks)`` [ports] for oversubscription ``d:u`` (bandwidth).

    One speed: ports = the model's ports at that speed, downlinks = floor(ports x d / (d+u)).
    NIC and fabric speeds differ: the split is by cage (every cage runs one speed), downlink
    cages = floor(cages x d / (d+u)), each carrying ``native / nic speed`` downlinks, the rest
    ``native / fabric speed`` uplinks (CX864E-N, 400G NICs, 800G fabric, 1:1: 64 x 400G down,
    32 x 800G up).
    """
    nic, fab = design.nic_speed, design.fabric_speed
    if nic == fab:
        pl = _ports(leaf, nic, "leaf")
        down = pl * d // (d + u)
        return down, pl - down
    bn, bf = _ports(leaf, nic, "leaf") // leaf.native_ports, _ports(leaf, fab, "leaf") // leaf.native_ports
    cages = leaf.native_ports
    dc = cages * d // (d + u)
    return dc * bn, (cages - dc) * bf


def _split(total: int, over: int) -> tuple[int, int, int]:
    """``total`` links over ``over`` switches: ``(lo, hi, switches that get hi)``."""
    lo, rem = divmod(total, over)
    return lo, lo + (1 if rem else 0), rem


def _plan_rail_optimized(
    design: Design,
    leaf: SwitchModel,
    spine: SwitchModel,
    catalog: dict[str, SwitchModel],
    selected_by: str,
    superspine: SwitchModel | None = None,
) -> Plan:
    servers = _check_common(design)
    rails = design.gpus_per_server
    nic, fab = design.nic_speed, design.fabric_speed
    speed = fab
    d, u = parse_oversubscription(design.oversubscription)
    ps = _ports(spine, fab, "spine")
    warnings: list[str] = []

    down, up = _leaf_split(design, leaf, d, u)
    pl = down + up
    if down == 0:
        raise PlanError(
            f"oversubscription {design.oversubscription} leaves no server ports on a {pl}-port "
            f"{leaf.name} leaf: use a larger downlink side, e.g. 1:1"
        )
    if up == 0:
        raise PlanError(
            f"oversubscription {design.oversubscription} leaves no uplinks on a {pl}-port "
            f"{leaf.name} leaf: use a smaller ratio, e.g. 1:1, 2:1 or 3:1"
        )
    actual = ratio_text(down * nic, up * fab)
    if down * nic * u != up * fab * d:
        warnings.append(
            f"{pl} leaf ports do not split exactly {design.oversubscription}: planned {down} "
            f"downlinks : {up} uplinks ({down * nic / (up * fab):.2f}:1)"
        )
    if down * nic > up * fab:
        warnings.append(
            f"oversubscription {actual} is blocking: leaf uplinks carry {up * fab} Gb/s for "
            f"{down * nic} Gb/s of servers (the seed recommends 1:1 for AI backends)"
        )

    lpg = rails
    if ps < lpg:
        bigger = _bigger_spines(catalog, speed, lpg)
        alt = f" (e.g. {', '.join(bigger)})" if bigger else ""
        if design.spine:
            raise PlanError(
                f"spine {spine.name} has {ps} x {speed}G ports, fewer than the {lpg} leaves of "
                f"one group (every spine must reach every leaf): choose a spine with at least "
                f"{lpg} ports{alt}, or fewer GPUs per server"
            )
        raise PlanError(
            f"spine model defaults to the leaf model {spine.name}, which has {ps} x {speed}G "
            f"ports, fewer than the {lpg} leaves of one group (every spine must reach every "
            f"leaf): pass --spine MODEL with at least {lpg} ports{alt}, or fewer GPUs per server"
        )
    spg = down
    groups = math.ceil(servers / spg)
    max_groups = ps // lpg
    max_servers = max_groups * spg
    max_gpus = max_servers * rails
    tiers = design.tiers or (3 if groups > max_groups else 2)
    if tiers == 2 and groups > max_groups:
        bigger = _bigger_spines(catalog, speed, groups * lpg)
        alt = (
            f" or a spine with at least {groups * lpg} x {speed}G ports (e.g. {', '.join(bigger)})"
            if bigger
            else f" or a spine model with at least {groups * lpg} x {speed}G ports "
            "(add one with --catalog)"
        )
        dflt = "" if design.spine else " (the spine model defaults to the leaf model; pass --spine)"
        raise PlanError(
            f"{design.gpus} GPUs needs {groups} groups, past the spine radix: {ps}-port "
            f"{spine.name} spines{dflt} reach at most {max_groups} groups of {lpg} leaves = "
            f"{max_servers} servers / {max_gpus} GPUs. Use at most {max_gpus} GPUs{alt}, "
            "or three tiers (--tiers 3: super-spines above pods)"
        )
    two_tier_max = max_gpus

    partial = servers - (groups - 1) * spg
    partial_last = partial if partial != spg else None
    n_leaves = lpg * groups
    links = n_leaves * up
    three = tiers == 3
    ss_model = superspine or spine
    gpp = pods = spp = sd = su = pss = sspp = n_ss = 0
    ss_lo = ss_hi = ss_rem = 0
    if not three:
        n_spines = math.ceil(links / ps)
        lo, hi, rem = _split(up, n_spines)
    else:
        # a pod spine at 1:1 splits its ports half down (to the pod's leaves), half up
        sd = ps // 2
        su = ps - sd
        gpp = sd // lpg
        if gpp < 1:
            raise PlanError(
                f"three tiers: a {ps}-port {spine.name} pod spine has {sd} ports down at 1:1, "
                f"fewer than the {lpg} leaves of one group: choose a spine with at least "
                f"{2 * lpg} x {speed}G ports (--spine)"
            )
        leaves_per_pod = gpp * lpg
        spp = math.ceil(leaves_per_pod * up / sd)
        lo, hi, rem = _split(up, spp)
        pods = math.ceil(groups / gpp)
        pss = _ports(ss_model, fab, "super-spine")
        max_pods = pss
        if pods > max_pods:
            raise PlanError(
                f"{design.gpus} GPUs needs {pods} pods of {gpp} groups, past the three-tier "
                f"limit: {pss}-port {ss_model.name} super-spines reach at most {max_pods} pods = "
                f"{max_pods * gpp * spg * rails} GPUs. Use fewer GPUs or a larger super-spine "
                "(--superspine)"
            )
        sspp = math.ceil(pods * su / pss)
        ss_lo, ss_hi, ss_rem = _split(su, sspp)
        n_ss = spp * sspp
        n_spines = pods * spp
        max_groups = max_pods * gpp
        max_servers = max_groups * spg
        max_gpus = max_servers * rails
        pod_gpus = gpp * spg * rails
        beyond = (
            f"three tiers go beyond the seed guide (it plans two tiers: at most "
            f"{two_tier_max} GPUs on {leaf.name} leaves and {spine.name} spines); the seed's "
            "rules are carried over: 1:1 at every tier, a pod spine splits its ports half down, "
            f"half up, so a pod holds half the two-tier maximum ({gpp} groups, {pod_gpus} GPUs); "
            f"pod spine i connects to super-spine plane i (RFC 7938 section 3.2, 5-stage Clos)"
        )
        warnings.append(beyond)
        if groups % gpp:
            warnings.append(
                f"last pod (pod {pods}) is partial: {groups - (pods - 1) * gpp} of {gpp} groups; "
                "its spines keep full uplinks so the pod can grow"
            )
        if ss_rem:
            warnings.append(
                f"{su} pod spine uplinks do not split evenly over the {sspp} super-spines of a "
                f"plane: {ss_rem} get {ss_hi} links per spine, the others {ss_lo} (uneven ECMP)"
            )
    if rem:
        warnings.append(_uneven_split_warning(up, down, spp if three else n_spines))
    if partial_last is not None:
        warnings.append(
            f"last group (group {groups}) is partial: {partial_last} of {spg} servers; its "
            "leaves keep full uplinks so the group can grow"
        )
    leaves: list[LeafPlan] = []
    for g in range(1, groups + 1):
        in_group = spg if g < groups else partial
        for r in range(1, rails + 1):
            leaves.append(
                LeafPlan(
                    name=leaf_name(0, group=g, rail=r),
                    group=g,
                    rails=[r],
                    servers=in_group,
                    downlinks_used=in_group,
                    uplinks_used=up,
                )
            )
    leaf_used = design.gpus + links
    ss_links = n_spines * su if three else 0
    spine_used = links + ss_links
    hops, notes = plan_hops(Fabric("rail-optimized", rails, 1, groups, gpp if three else 0))
    if three:
        spine_names = [pod_spine_name(p, i) for p in range(1, pods + 1) for i in range(1, spp + 1)]
    else:
        spine_names = [spine_name(i) for i in range(1, n_spines + 1)]
    # optics: per switch, the cages its used ports fill
    bn, bf = leaf.breakout_at(nic), leaf.breakout_at(fab)
    leaf_cages = sum(_cages(lf.downlinks_used, bn, up, bf) for lf in leaves)
    sb = spine.breakout_at(fab)
    per_spine: list[int] = []
    for pod_leaves in ([lpg * min(gpp, groups - (q - 1) * gpp) for q in range(1, pods + 1)]
                       if three else [n_leaves]):
        loads = [0] * (spp if three else n_spines)
        for pos in range(pod_leaves):
            more = extra_link_spines(pos, len(loads), rem)
            for i in range(len(loads)):
                loads[i] += lo + (1 if i in more else 0)
        per_spine += [n + su for n in loads] if three else loads
    spine_cages = sum(math.ceil(n / sb) for n in per_spine)
    ss_cages = 0
    if three:
        ssb = ss_model.breakout_at(fab)
        ss_cages = sum(math.ceil(pods * (ss_hi if k < ss_rem else ss_lo) / ssb)
                       for _ in range(spp) for k in range(sspp))
    optics, cables, assumptions = _bill(
        design, leaf, spine, ss_model if three else None,
        [("server NIC", None, design.gpus, nic), ("leaf", leaf, leaf_cages, None),
         ("spine", spine, spine_cages, fab)] + ([("superspine", ss_model, ss_cages, fab)]
                                                if three else []),
        {"server-leaf": (design.gpus, nic), "leaf-spine": (links, fab),
         **({"spine-superspine": (ss_links, fab)} if three else {})},
    )
    if three:
        assumptions.append(warnings[[w.startswith("three tiers") for w in warnings].index(True)])
    ports = {
        "leaf": TierPorts(switches=n_leaves, ports_per_switch=pl, total=n_leaves * pl,
                          used=leaf_used, free=n_leaves * pl - leaf_used),
        "spine": TierPorts(switches=n_spines, ports_per_switch=ps, total=n_spines * ps,
                           used=spine_used, free=n_spines * ps - spine_used),
    }
    if three:
        ports["superspine"] = TierPorts(switches=n_ss, ports_per_switch=pss, total=n_ss * pss,
                                        used=ss_links, free=n_ss * pss - ss_links)
    return Plan(
        architecture="rail-optimized",
        selected_by=selected_by,
        gpus=design.gpus,
        gpus_per_server=rails,
        servers=servers,
        rails=rails,
        groups=groups,
        servers_per_group=spg,
        partial_last_group=partial_last,
        rails_per_leaf=1,
        leaf_model=leaf.name,
        spine_model=spine.name,
        port_speed_gbps=design.port_speed_gbps,
        nic_speed_gbps=nic,
        fabric_speed_gbps=fab,
        oversubscription=design.oversubscription,
        oversubscription_actual=actual,
        leaf_ports=pl,
        spine_ports=ps,
        leaf_switches=n_leaves,
        spine_switches=n_spines,
        total_switches=n_leaves + n_spines + n_ss,
        leaves_per_group=lpg,
        leaf_downlinks=down,
        leaf_uplinks=up,
        leaf_downlink_gbps=down * nic,
        leaf_uplink_gbps=up * fab,
        links_per_leaf_spine_pair=lo,
        links_per_leaf_spine_pair_max=hi,
        server_leaf_links=design.gpus,
        leaf_spine_links=links,
        total_links=design.gpus + links + ss_links,
        optics=sum(o.count for o in optics),
        optics_detail=optics,
        cables=cables,
        assumptions=assumptions,
        tiers=tiers,
        beyond_seed=three,
        pods=pods if three else 1,
        groups_per_pod=gpp if three else None,
        spines_per_pod=spp if three else None,
        spine_downlinks=sd if three else None,
        spine_uplinks=su if three else None,
        superspine_model=ss_model.name if three else None,
        superspine_ports=pss if three else None,
        superspine_switches=n_ss,
        superspines_per_plane=sspp if three else None,
        links_per_spine_superspine_pair=ss_lo if three else None,
        links_per_spine_superspine_pair_max=ss_hi if three else None,
        spine_superspine_links=ss_links,
        superspine_latency_ns=ss_model.latency_ns if three else None,
        ports=ports,
        limits=Limits(
            max_gpus=max_gpus,
            max_servers=max_servers,
            max_groups=max_groups,
            max_leaves=max_groups * lpg,
            max_pods=pss if three else None,
        ),
        leaves=leaves,
        spines=spine_names,
        superspines=[superspine_name(k) for k in range(1, n_ss + 1)],
        hops=hops,
        hop_notes=notes,
        latency_ns=_latency(hops, leaf, spine, ss_model if three else None),
        leaf_latency_ns=leaf.latency_ns,
        spine_latency_ns=spine.latency_ns,
        warnings=warnings,
    )


# ---------------------------------------------------------------------------------------------
# public entry points


def plan(design: Design, catalog: dict[str, SwitchModel] | None = None) -> Plan:
    """Size the fabric for ``design`` with switch models from ``catalog``.

    ``catalog`` defaults to the shipped catalog (:func:`topologies.catalog.load_catalog`).
    Returns a :class:`Plan`. Raises PlanError (one message, saying what to change) for: a GPU
    count that is not whole servers, a design past its scaling limit, an unknown switch model,
    an unsupported port speed, a spine radix smaller than a group, or a malformed
    oversubscription / one that leaves no uplinks.
    """
    if catalog is None:
        catalog = load_catalog()
    leaf = _lookup(catalog, design.leaf)
    _check_common(design)
    # a malformed ratio is an error whatever the architecture (Rail-only only warns about a
    # well-formed ratio it cannot apply)
    parse_oversubscription(design.oversubscription)
    arch = design.architecture
    selected_by = "user"
    if arch == "auto":
        selected_by = "auto"
        leaf_ports = _ports(leaf, design.nic_speed, "leaf")
        limit = _rail_only_limit(leaf_ports, design.gpus_per_server)
        fits = design.gpus <= limit and design.tiers != 3
        arch = "rail-only" if fits else "rail-optimized"
    if arch == "rail-only":
        if design.spine:
            _lookup(catalog, design.spine)
        if design.tiers == 3:
            raise PlanError("Rail-only is a single leaf tier: --tiers 3 needs rail-optimized "
                            "(--arch rail-optimized)")
        return _plan_rail_only(design, leaf, selected_by)
    spine = _lookup(catalog, design.spine) if design.spine else leaf
    ss = _lookup(catalog, design.superspine) if design.superspine else None
    return _plan_rail_optimized(design, leaf, spine, catalog, selected_by, ss)


def compare(design: Design, catalog: dict[str, SwitchModel] | None = None,
            leaves: list[str] | tuple[str, ...] | None = None) -> dict:
    """Plan ``design`` as both architectures on each leaf model of ``leaves`` (default: the
    design's leaf; spines default to the leaf model unless the design names one), side by side.

    Returns ``{column: {"architecture", "leaf", "plan": <Plan JSON> | None, "error": str |
    None}}`` in column order; a column is ``rail-only`` / ``rail-optimized`` for one model and
    ``<arch> <model>`` for several. An impossible column keeps its PlanError message as
    ``error`` (the others are still planned). Raises PlanError only when every column fails with
    the same message (a problem of the design itself, e.g. GPUs not whole servers).
    """
    if catalog is None:
        catalog = load_catalog()
    models = list(dict.fromkeys(leaves or [design.leaf]))
    out: dict[str, dict] = {}
    errors: list[PlanError] = []
    for model in models:
        try:
            name = get_model(catalog, model).name
        except CatalogError as exc:
            raise PlanError(str(exc)) from None
        for arch in ("rail-only", "rail-optimized"):
            d = design.model_copy(update={"architecture": arch, "leaf": name})
            if arch == "rail-only":
                d = d.model_copy(update={"spine": None, "oversubscription": "1:1",
                                         "tiers": None, "superspine": None})
            label = arch if len(models) == 1 else f"{arch} {name}"
            try:
                res = {"plan": plan(d, catalog).model_dump(mode="json"), "error": None}
            except PlanError as exc:
                errors.append(exc)
                res = {"plan": None, "error": str(exc)}
            out[label] = {"architecture": arch, "leaf": name, **res}
    if len(errors) == len(out) and len({str(e) for e in errors}) == 1:
        raise errors[-1]
    return out


def node_table(
    leaf_model: str,
    gpus_per_server: int = 8,
    gpu_counts: tuple[int, ...] | list[int] = DEFAULT_TABLE_GPUS,
    *,
    spine: str | None = None,
    port_speed_gbps: int = 400,
    oversubscription: str = "1:1",
    catalog: dict[str, SwitchModel] | None = None,
) -> list[dict]:
    """Rail-optimized two-tier node requirements per cluster size (the seed's Tables 4 and 5,
    generated from its rules since the guide's text does not print them; two tiers, as the
    seed: a size past the two-tier limit is an error row).

    One dict per GPU count: ``gpus, servers, groups, partial_last_group, leaves, spines,
    switches, links_per_leaf_spine_pair, server_leaf_links, leaf_spine_links, optics, error``
    (``error`` is the PlanError message for a size past the limit or not whole servers; the
    counts are then None). Raises PlanError for problems common to every row: unknown model,
    unsupported port speed, bad oversubscription, spine radix smaller than a group.
    """
    if catalog is None:
        catalog = load_catalog()
    base = Design(
        architecture="rail-optimized",
        tiers=2,
        gpus=max(gpus_per_server, 1),
        gpus_per_server=gpus_per_server,
        leaf=leaf_model,
        spine=spine,
        port_speed_gbps=port_speed_gbps,
        oversubscription=oversubscription,
    )
    plan(base, catalog)  # one server: errors here (model, speed, ratio, radix) hold for every row
    rows = []
    keys = (
        "servers",
        "groups",
        "partial_last_group",
        "leaves",
        "spines",
        "switches",
        "links_per_leaf_spine_pair",
        "server_leaf_links",
        "leaf_spine_links",
        "optics",
    )
    for n in gpu_counts:
        try:
            p = plan(base.model_copy(update={"gpus": n}), catalog)
        except PlanError as exc:  # past the limit, or not whole servers
            rows.append({"gpus": n, **{k: None for k in keys}, "error": str(exc)})
            continue
        rows.append(
            {
                "gpus": n,
                "servers": p.servers,
                "groups": p.groups,
                "partial_last_group": p.partial_last_group,
                "leaves": p.leaf_switches,
                "spines": p.spine_switches,
                "switches": p.total_switches,
                "links_per_leaf_spine_pair": p.links_per_leaf_spine_pair,
                "server_leaf_links": p.server_leaf_links,
                "leaf_spine_links": p.leaf_spine_links,
                "optics": p.optics,
                "error": None,
            }
        )
    return rows
