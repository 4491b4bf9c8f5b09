"""Flows, NCCL path selection, expected hop counts and named traffic patterns.

A :class:`Flow` is (source GPU, destination GPU, QP, message size, message count, rate, opcode
mix). Which NICs carry it follows NCCL (seed guide, "Inter-rail (with PXN) Communication"):

* same server: NVLink only, never leaves the server (0 switch hops);
* without PXN, GPU i on server A -> GPU j on server B leaves from NIC i+1 (rail i+1) towards the
  destination NIC j+1;
* with PXN (PCIe x NVLink), GPU i first hands the data over NVLink to GPU j on server A (recorded
  as an intra-server hop, ``Flow.nvlink``) which sends it from its own NIC j+1: the packet stays
  on rail j+1.

Path classes, how a flow is classified into one (each class's ``matches`` predicate) and their
hop counts live in :mod:`railab.topologies.pathclasses`; :func:`classify` and
:func:`report_class` ask that registry. A flow's expected hops come from ``lab.json``
``expected_hops`` (class -> switch hops, None = unreachable by design, written from that
registry), except that two NICs attached to the same leaf are always 1 hop apart
(``SAME_LEAF_HOPS``; Rail-only leaves carrying several rails: class ``inter-rail-same-leaf``).

Named traffic patterns are a registry too: :func:`register_pattern` adds one (one module, one
decorated function), :data:`PATTERNS` maps names to :class:`Pattern`, and ``railab traffic
--pattern`` / ``railab kinds`` list what is registered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from railab.errors import UsageError
from railab.topologies import pathclasses
from railab.topologies.labspec import LabSpec, Nic
from railab.topologies.pathclasses import (
    SAME_LEAF_HOPS,
    Fabric,
    FlowPath,
    PathEnd,
    get_path_class,
    refine,
)

OpMix = Literal["write", "send", "mixed"]
Pair = tuple[tuple[str, int], tuple[str, int]]

_EP = re.compile(r"^(?P<srv>[a-z][a-z0-9-]*):(?P<kind>gpu|nic)(?P<idx>\d+)$")


class PatternError(UsageError):
    """A pattern, endpoint or flow parameter this lab cannot honour (message says what to change)."""


@dataclass(frozen=True)
class Flow:
    """One RoCEv2 flow between two GPUs.

    ``src``/``dst``: ``(server, gpu)`` with 0-based GPU numbers. ``qp``: flow index used to derive
    distinct QP numbers (and so UDP source ports, i.e. ECMP entropy). ``size``: bytes per message;
    ``messages``: messages per flow; ``mtu``: RoCE path MTU (payload bytes per packet, 256-4096);
    ``rate``: packets/s, 0 = as fast as the engine goes; ``op``: ``write`` (RDMA WRITE
    FIRST/MIDDLE/LAST or ONLY), ``send`` (SEND_ONLY per packet-sized message... split like WRITE
    for larger sizes) or ``mixed`` (alternating messages). Fields below are filled by
    :func:`route`.
    """

    src: tuple[str, int]
    dst: tuple[str, int]
    qp: int = 0
    size: int = 4096
    messages: int = 4
    mtu: int = 1024
    rate: float = 0.0
    op: OpMix = "write"
    pxn: bool = False
    # derived by route()
    src_nic: int = 0
    dst_nic: int = 0
    nvlink: bool = False
    path_class: str = ""
    expected_hops: int | None = None
    label: str = ""

    @property
    def name(self) -> str:
        s = f"{self.src[0]}:gpu{self.src[1]}->{self.dst[0]}:gpu{self.dst[1]}"
        return f"{s}#{self.qp}" if self.qp else s

    @property
    def packets_per_message(self) -> int:
        return max(1, -(-self.size // self.mtu))

    @property
    def packets(self) -> int:
        return self.packets_per_message * self.messages


def parse_endpoint(spec: LabSpec, text: str) -> tuple[str, int]:
    """``srv3:gpu2`` or ``srv3:nic3`` -> ``("srv3", 2)`` (server, 0-based GPU).

    Raises PatternError naming the lab's servers / GPU range when the endpoint does not exist.
    """
    m = _EP.match(text.strip())
    if not m:
        raise PatternError(f"endpoint {text!r}: write SERVER:gpuN (0-based) or SERVER:nicN (1-based)")
    srv, kind, idx = m["srv"], m["kind"], int(m["idx"])
    gpu = idx if kind == "gpu" else idx - 1
    servers = [n.name for n in spec.by_role("server")]
    if srv not in servers:
        raise PatternError(f"endpoint {text!r}: lab {spec.name!r} has servers {servers[0]}..{servers[-1]}")
    if not 0 <= gpu < spec.gpus_per_server:
        raise PatternError(f"endpoint {text!r}: GPUs are gpu0..gpu{spec.gpus_per_server - 1}"
                           f" (nic1..nic{spec.gpus_per_server})")
    return srv, gpu


def _nic(spec: LabSpec, server: str, gpu: int) -> Nic:
    return spec.nic(server, gpu + 1)


def fabric_of(spec: LabSpec) -> Fabric:
    """The lab's :class:`~railab.topologies.pathclasses.Fabric` (architecture, rails, rails per
    leaf as cabled in ``lab.json``, groups): what class predicates and hop counts depend on."""
    rails: dict[str, set[int]] = {}
    for nic in spec.nics:
        rails.setdefault(nic.leaf, set()).add(nic.rail)
    per_leaf = max((len(r) for r in rails.values()), default=1)
    return Fabric(spec.architecture, spec.gpus_per_server, per_leaf, spec.groups,
                  spec.groups_per_pod)


def flow_path(spec: LabSpec, src: tuple[str, int], dst: tuple[str, int], pxn: bool = False
              ) -> FlowPath:
    """What a path class predicate sees of the GPU pair ``src -> dst``: each end's server, GPU,
    group and the leaf of the NIC that carries the flow (with PXN across rails the source sends
    from its NIC on the destination GPU's rail)."""
    send_gpu = dst[1] if pxn and src[1] != dst[1] else src[1]
    a, b = _nic(spec, src[0], send_gpu), _nic(spec, *dst)
    return FlowPath(fabric_of(spec), PathEnd(src[0], src[1], a.group, a.leaf),
                    PathEnd(dst[0], dst[1], b.group, b.leaf), pxn)


def classify(spec: LabSpec, src: tuple[str, int], dst: tuple[str, int], pxn: bool = False) -> str:
    """Path class of a GPU pair, decided by the registry (railab.topologies.pathclasses.classify:
    each class's ``matches`` predicate, by precedence): intra-server, intra-rail, inter-rail,
    inter-rail-pxn, cross-group, or a registered class."""
    return pathclasses.classify(flow_path(spec, src, dst, pxn))


def route(spec: LabSpec, flow: Flow) -> Flow:
    """Fill the NCCL path selection (source/destination NIC, NVLink hop) and expected hops."""
    cls = classify(spec, flow.src, flow.dst, flow.pxn)
    if get_path_class(cls).nvlink_only:
        src_nic, dst_nic, nvlink = flow.src[1] + 1, flow.dst[1] + 1, True
        expected = spec.expected_hops.get(cls, 0)
    else:
        nvlink = flow.pxn and flow.src[1] != flow.dst[1]
        src_nic = (flow.dst[1] if nvlink else flow.src[1]) + 1
        dst_nic = flow.dst[1] + 1
        a, b = spec.nic(flow.src[0], src_nic), spec.nic(flow.dst[0], dst_nic)
        expected = _expected(spec, cls, a, b)
    return replace(flow, src_nic=src_nic, dst_nic=dst_nic, nvlink=nvlink, path_class=cls,
                   expected_hops=expected, label=flow.label or cls)


def _expected(spec: LabSpec, cls: str, a: Nic, b: Nic) -> int | None:
    """Expected hops of a flow of class ``cls`` leaving NIC ``a`` for NIC ``b``: the lab's
    ``expected_hops`` of the class, except that two NICs on one leaf are that leaf's hop
    (``pathclasses.SAME_LEAF_HOPS``, whatever the class)."""
    if a.leaf == b.leaf:
        return SAME_LEAF_HOPS
    return spec.expected_hops.get(cls)


def report_class(spec: LabSpec, flow: Flow) -> str:
    """The class a routed flow is reported under: a registered refinement of its class that the
    lab lists and that matches (``pathclasses.refine``; e.g. an inter-rail flow, no PXN, whose two
    NICs sit on one leaf is ``inter-rail-same-leaf`` on Rail-only leaves carrying 2+ rails but
    not all); every other flow keeps :attr:`Flow.path_class`."""
    return refine(flow.path_class, flow_path(spec, flow.src, flow.dst, flow.pxn),
                  spec.expected_hops)


def hops(spec: LabSpec, src: str, dst: str, pxn: bool = False) -> int | None:
    """Expected switch hops between two GPUs, e.g. ``hops(spec, "srv1:gpu3", "srv9:gpu3")``.

    Returns None when the design makes the pair unreachable (Rail-only, different leaves,
    no PXN). Raises PatternError for an unknown endpoint.
    """
    f = route(spec, Flow(parse_endpoint(spec, src), parse_endpoint(spec, dst), pxn=pxn))
    return f.expected_hops


def _servers_by_group(spec: LabSpec) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for n in spec.by_role("server"):
        out.setdefault(n.group or 1, []).append(n.name)
    return out


def _expand(base: list[Pair], n: int | None, **kw) -> list[Flow]:
    if not base:
        return []
    count = n if n else len(base)
    return [Flow(base[i % len(base)][0], base[i % len(base)][1], qp=i // len(base), **kw)
            for i in range(count)]


@dataclass(frozen=True)
class PatternContext:
    """What a pattern's pair function gets: the lab, its servers by group (group -> names in
    order), GPUs per server, and the ``sample`` size (servers for ``all-to-all``)."""

    spec: LabSpec
    groups: dict[int, list[str]]
    gpus: int
    sample: int = 4

    @property
    def first_group(self) -> list[str]:
        """Servers of the lowest-numbered group."""
        return self.groups[min(self.groups)]


@dataclass(frozen=True)
class Pattern:
    """A named traffic pattern: ``pairs(ctx)`` returns the base GPU pairs
    ``((server, gpu), (server, gpu))``; raises PatternError when the lab cannot hold it."""

    name: str
    description: str
    pairs: Callable[[PatternContext], list[Pair]]


#: The pattern registry (name -> Pattern), in registration order.
PATTERNS: dict[str, Pattern] = {}


def register_pattern(name: str, description: str, *, replace: bool = False
                     ) -> Callable[[Callable[[PatternContext], list[Pair]]],
                                   Callable[[PatternContext], list[Pair]]]:
    """Decorator: register ``func(ctx) -> pairs`` as pattern ``name``.

    Raises PatternError when ``name`` is taken (unless ``replace``).
    """
    def deco(func: Callable[[PatternContext], list[Pair]]) -> Callable[[PatternContext], list[Pair]]:
        if name in PATTERNS and not replace:
            raise PatternError(f"traffic pattern {name!r} is already registered")
        PATTERNS[name] = Pattern(name, description, func)
        return func
    return deco


def unregister_pattern(name: str) -> None:
    """Remove a pattern (tests registering a dummy pattern clean up with this)."""
    PATTERNS.pop(name, None)


def flows_for(spec: LabSpec, pattern: str, pxn: bool = False, n: int | None = None,
              sample: int = 4, **flow_kw) -> list[Flow]:
    """The flows of a registered pattern, routed (NICs and expected hops filled).

    Shipped patterns: ``intra-server`` (srv1 GPU i -> GPU i+1), ``intra-rail`` (first two servers
    of group 1, every rail), ``inter-rail`` (same servers, GPU i -> GPU i+1), ``cross-group``
    (group 1 server -> first server of group 2, every rail), ``all-to-all`` (every GPU to every
    GPU of ``sample`` servers spread over the groups), ``ring`` (all-reduce ring over all GPUs,
    rail-aware order, below). ``n`` repeats the base pairs with new QPs (new UDP source ports)
    up to ``n`` flows, e.g. to measure ECMP spread; ``flow_kw`` sets Flow fields (size, messages,
    mtu, rate, op).

    Ring (NCCL rail-aware ordering): servers in order; inside a server the ring visits GPUs
    0..G-1 over NVLink (intra-server flows); the edge between servers goes from GPU G-1 of
    server k to GPU 0 of server k+1. With PXN, GPU G-1 hands over to GPU 0 by NVLink and the
    inter-server hop stays on rail 1 (NCCL's PXN rail alignment); without PXN it is inter-rail.

    Raises PatternError for an unknown pattern or one the lab cannot hold (e.g. cross-group on a
    one-group lab).
    """
    if pattern not in PATTERNS:
        raise PatternError(f"unknown pattern {pattern!r}: use one of {', '.join(PATTERNS)}")
    ctx = PatternContext(spec, _servers_by_group(spec), spec.gpus_per_server, sample)
    base = PATTERNS[pattern].pairs(ctx)
    return [route(spec, f) for f in _expand(base, n, pxn=pxn, **flow_kw)]


@register_pattern("intra-server", "srv1 GPU i -> GPU i+1 over NVLink (never leaves the server)")
def _intra_server(ctx: PatternContext) -> list[Pair]:
    G, g1 = ctx.gpus, ctx.first_group
    if G < 2:
        raise PatternError("intra-server needs 2+ GPUs per server")
    return [((g1[0], i), (g1[0], (i + 1) % G)) for i in range(G)]


def _two_servers(ctx: PatternContext, pattern: str, shift: int) -> list[Pair]:
    G, g1 = ctx.gpus, ctx.first_group
    if len(g1) < 2:
        raise PatternError(f"{pattern} needs 2+ servers in group 1; the lab has {len(g1)}")
    if shift and G < 2:
        raise PatternError("inter-rail needs 2+ GPUs per server")
    return [((g1[0], i), (g1[1], (i + shift) % G)) for i in range(G)]


@register_pattern("intra-rail", "first two servers of group 1, GPU i -> GPU i (every rail)")
def _intra_rail(ctx: PatternContext) -> list[Pair]:
    return _two_servers(ctx, "intra-rail", 0)


@register_pattern("inter-rail", "first two servers of group 1, GPU i -> GPU i+1")
def _inter_rail(ctx: PatternContext) -> list[Pair]:
    return _two_servers(ctx, "inter-rail", 1)


@register_pattern("cross-group", "first server of group 1 -> first server of group 2, every rail")
def _cross_group(ctx: PatternContext) -> list[Pair]:
    groups, g1 = ctx.groups, ctx.first_group
    if len(groups) < 2:
        raise PatternError(f"cross-group needs 2+ groups; lab {ctx.spec.name!r} has one "
                           f"({ctx.spec.architecture})")
    g2 = groups[sorted(groups)[1]]
    return [((g1[0], i), (g2[0], i)) for i in range(ctx.gpus)]


@register_pattern("cross-pod", "first server of pod 1 -> first server of pod 2, every rail "
                  "(three-tier labs)")
def _cross_pod(ctx: PatternContext) -> list[Pair]:
    gpp = ctx.spec.groups_per_pod
    if not gpp or len(ctx.groups) <= gpp:
        raise PatternError(f"cross-pod needs a three-tier lab with 2+ pods; lab "
                           f"{ctx.spec.name!r} has {ctx.spec.pods} pod(s)")
    other = ctx.groups[sorted(ctx.groups)[gpp]]
    return [((ctx.first_group[0], i), (other[0], i)) for i in range(ctx.gpus)]


@register_pattern("all-to-all", "every GPU to every GPU of `sample` servers spread over the groups")
def _all_to_all(ctx: PatternContext) -> list[Pair]:
    servers: list[str] = []
    order = [ctx.groups[g] for g in sorted(ctx.groups)]
    k = 0
    while len(servers) < min(ctx.sample, sum(map(len, order))):
        for srvs in order:
            if k < len(srvs) and len(servers) < ctx.sample:
                servers.append(srvs[k])
        k += 1
    gpus = [(s, i) for s in servers for i in range(ctx.gpus)]
    return [(a, b) for a in gpus for b in gpus if a != b]


@register_pattern("ring", "all-reduce ring over all GPUs, NCCL rail-aware order")
def _ring(ctx: PatternContext) -> list[Pair]:
    G = ctx.gpus
    servers = [s for g in sorted(ctx.groups) for s in ctx.groups[g]]
    base: list[Pair] = []
    for k, s in enumerate(servers):
        for i in range(G - 1):
            base.append(((s, i), (s, i + 1)))
        nxt = servers[(k + 1) % len(servers)]
        if nxt != s:
            base.append(((s, G - 1), (nxt, 0)))
    return base


def class_population(spec: LabSpec, path_class: str) -> int:
    """How many ordered (source GPU, destination GPU) pairs of ``path_class`` the lab has, by
    :func:`classify`: with ``s_g`` servers in group ``g``, ``G`` GPUs per server and ``T`` GPUs
    in all, intra-server ``S*G*(G-1)``, intra-rail ``sum G*s_g*(s_g-1)``, inter-rail (and
    inter-rail-pxn) ``sum s_g*(s_g-1)*G*(G-1)``, cross-group ``sum s_g*G*(T - s_g*G)``; the
    classes add up to ``T*(T-1)``. 0 for a class the lab does not have."""
    G = spec.gpus_per_server
    sizes = [len(v) for v in _servers_by_group(spec).values()]
    total = sum(sizes) * G
    if path_class == "intra-server":
        return sum(sizes) * G * (G - 1)
    if path_class == "intra-rail":
        return sum(G * s * (s - 1) for s in sizes)
    if path_class in ("inter-rail", "inter-rail-pxn"):
        return sum(s * (s - 1) * G * (G - 1) for s in sizes)
    if path_class == "cross-group":
        return sum(s * G * (total - s * G) for s in sizes)
    return 0


def sample_text(spec: LabSpec, flows: list[Flow]) -> str:
    """What share of the lab's GPU pairs ``flows`` (routed) cover, per path class, e.g.
    ``sampled 8 of 524288 cross-group GPU pairs (8 flows)`` on ``rail-optimized-1024-full``, or
    ``all 56 intra-server GPU pairs (56 flows)`` when the flows cover every pair of the class."""
    by_class: dict[str, set[Pair]] = {}
    for f in flows:
        by_class.setdefault(f.path_class, set()).add((f.src, f.dst))
    parts, sampled = [], False
    for cls, pairs in by_class.items():
        n = class_population(spec, cls)
        if len(pairs) < n:
            sampled = True
            parts.append(f"{len(pairs)} of {n} {cls}")
        else:
            parts.append(f"all {len(pairs)} {cls}")
    what = ", ".join(parts) + " GPU pairs"
    nf = f"({len(flows)} flow{'' if len(flows) == 1 else 's'})"
    return f"sampled {what} {nf}" if sampled else f"{what} {nf}"


@dataclass
class SpreadStats:
    """How many flows crossed each uplink / spine, and the imbalance (max / mean, 1.0 = even)."""

    per_link: dict[str, int] = field(default_factory=dict)
    per_spine: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def imbalance(counts: dict[str, int]) -> float:
        """max / mean of ``counts`` (1.0 = even); 0.0 for no counts or no flows."""
        if not counts:
            return 0.0
        mean = sum(counts.values()) / len(counts)
        return max(counts.values()) / mean if mean else 0.0

    @staticmethod
    def spread_text(counts: dict[str, int], members: str = "uplinks",
                    label: str = "imbalance(max/mean)") -> str:
        """``imbalance(max/mean)=1.25`` when the flows in ``counts`` are at least twice the
        members measured (fewer flows than that leave some member empty by design, so max/mean
        says nothing about the hash); otherwise ``too few flows for a spread figure (8 flows
        over 16 uplinks; use --flows 32 or more)``."""
        n, k = sum(counts.values()), len(counts)
        if k and n >= 2 * k:
            return f"{label}={SpreadStats.imbalance(counts):.2f}"
        return (f"too few flows for a spread figure ({n} flow{'' if n == 1 else 's'} over {k} "
                f"{members}; use --flows {2 * k} or more)")
