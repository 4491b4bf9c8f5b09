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
    for larger sizes) or ``mixed`` (alternating messages). ``src_nic`` to ``label`` are filled
    by :func:`route`. ``sport``: a fixed UDP source port (the ECMP entropy) chosen by the caller,
    e.g. an OTG flow's ``udp.src_port``; None (default): the QP pair's own,
    ``rdma_get_udp_sport`` of :func:`railab.traffic.engine.flow_qpns`.
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
    sport: int | None = None

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


_FABRICS: dict[int, tuple[LabSpec, Fabric]] = {}


def fabric_of(spec: LabSpec) -> Fabric:
    """The lab's :class:`~railab.topologies.pathclasses.Fabric` (architecture, rails, rails per
    leaf as cabled in ``lab.json``, groups): what class predicates and hop counts depend on.
    Computed once per ``LabSpec`` object (a walk over every NIC; routing the 512 flows of a
    full-coverage pattern on a 1024-GPU lab would otherwise walk them 512 times)."""
    hit = _FABRICS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    fab = _fabric_of(spec)
    if len(_FABRICS) > 8:
        _FABRICS.clear()
    _FABRICS[id(spec)] = (spec, fab)
    return fab


def _fabric_of(spec: LabSpec) -> Fabric:
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
    """``n`` >= len(base) (or None): the base pairs, repeated with new QPs (new UDP source
    ports, so new ECMP hashes) up to ``n`` flows. Sampling below the base is done before
    (:func:`spread_sample`)."""
    if not base:
        return []
    count = n if n else len(base)
    return [Flow(base[i % len(base)][0], base[i % len(base)][1], qp=i // len(base), **kw)
            for i in range(count)]


def rotation_pairs(items: list[str], rnd: int = 0) -> list[tuple[str, str]]:
    """A pairing of ``items`` that uses each item once (the minimum number of pairs that
    touches every item, ``ceil(len/2)``), rotated by round ``rnd`` (the circle method of
    round-robin schedules: the first item stays, the others rotate by ``rnd``, then consecutive
    items pair up), so each rail of a pattern pairs the servers differently. An odd item out
    pairs with the first item (which is then used twice). Round 0 is ``(a0, a1), (a2, a3), ...``.
    Fewer than two items: no pairs."""
    if len(items) < 2:
        return []
    rest = items[1:]
    k = rnd % len(rest)
    arr = [items[0], *rest[k:], *rest[:k]]
    out = [(arr[i], arr[i + 1]) for i in range(0, len(arr) - 1, 2)]
    if len(arr) % 2:
        out.append((arr[-1], arr[0]))
    return out


@dataclass(frozen=True)
class PatternContext:
    """What a pattern's pair function gets: the lab, its servers by group (group -> names in
    order), GPUs per server, and ``sample``: None (the default: the pattern covers every server
    NIC) or a number of servers (``all-to-all`` over that many servers spread over the groups,
    as before full coverage was the default)."""

    spec: LabSpec
    groups: dict[int, list[str]]
    gpus: int
    sample: int | None = None

    @property
    def first_group(self) -> list[str]:
        """Servers of the lowest-numbered group."""
        return self.groups[min(self.groups)]

    @property
    def servers(self) -> list[str]:
        """Every server, group by group, in lab order."""
        return [s for g in sorted(self.groups) for s in self.groups[g]]


@dataclass(frozen=True)
class Pattern:
    """A named traffic pattern: ``pairs(ctx)`` returns the base GPU pairs
    ``((server, gpu), (server, gpu))``; raises PatternError when the lab cannot hold it."""

    name: str
    description: str
    pairs: Callable[[PatternContext], list[Pair]]
    #: The pattern covers every server NIC by default (the shipped path-coverage patterns);
    #: False for a load shape such as ``incast`` (one receiver NIC by design).
    full_coverage: bool = True


#: The pattern registry (name -> Pattern), in registration order.
PATTERNS: dict[str, Pattern] = {}

#: ``all-to-all`` sends every ordered GPU pair while there are at most this many; above, it
#: sends shifted rounds (GPU r -> GPU r+k, every GPU sending and receiving once per round),
#: as many rounds as fit in ``ALL_TO_ALL_MAX_FLOWS`` (at least one), and says it sampled.
ALL_TO_ALL_MAX_FLOWS = 4096


def register_pattern(name: str, description: str, *, replace: bool = False,
                     full_coverage: bool = True
                     ) -> Callable[[Callable[[PatternContext], list[Pair]]],
                                   Callable[[PatternContext], list[Pair]]]:
    """Decorator: register ``func(ctx) -> pairs`` as pattern ``name``; ``full_coverage``
    False declares a pattern that by design does not touch every server NIC (``incast``).

    Raises PatternError when ``name`` is taken (unless ``replace``).
    """
    def deco(func: Callable[[PatternContext], list[Pair]]) -> Callable[[PatternContext], list[Pair]]:
        if name in PATTERNS and not replace:
            raise PatternError(f"traffic pattern {name!r} is already registered")
        PATTERNS[name] = Pattern(name, description, func, full_coverage)
        return func
    return deco


def unregister_pattern(name: str) -> None:
    """Remove a pattern (tests registering a dummy pattern clean up with this)."""
    PATTERNS.pop(name, None)


def parse_endpoints(spec: LabSpec, text: str) -> list[tuple[str, int]]:
    """``--src`` / ``--dst``: a comma-separated list of servers (``srv3``: every GPU of it),
    GPUs (``srv3:gpu2``, 0-based) or NICs (``srv3:nic3``, 1-based: the GPU behind it) ->
    ``[(server, gpu), ...]`` in the order given, without repeats.

    Raises PatternError naming the lab's servers / GPU range for an unknown endpoint."""
    out: list[tuple[str, int]] = []
    servers = {n.name for n in spec.by_role("server")}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if ":" not in item:
            if item not in servers:
                names = [n.name for n in spec.by_role("server")]
                raise PatternError(f"endpoint {item!r}: lab {spec.name!r} has servers "
                                   f"{names[0]}..{names[-1]} (write SERVER, SERVER:gpuN or "
                                   "SERVER:nicN)" if names else f"lab {spec.name!r} has no servers")
            eps = [(item, g) for g in range(spec.gpus_per_server)]
        else:
            eps = [parse_endpoint(spec, item)]
        out += [e for e in eps if e not in out]
    if not out:
        raise PatternError(f"endpoint list {text!r} is empty: write SERVER, SERVER:gpuN or SERVER:nicN")
    return out


def _select(spec: LabSpec, ctx: PatternContext, pattern: str | None, pxn: bool,
            src: list[tuple[str, int]] | None, dst: list[tuple[str, int]] | None) -> list[Pair]:
    """The pairs from ``src`` to ``dst`` (either may be None: every GPU) that belong to
    ``pattern``: for a pattern named after a path class, every such pair of that class (by
    GPU position, :func:`classify` without PXN); for ``all-to-all`` or no pattern every pair;
    for any other pattern its own pairs that start in ``src`` and end in ``dst``."""
    every = [(s, g) for s in ctx.servers for g in range(ctx.gpus)]
    a_side, b_side = src or every, dst or every
    if pattern is None or pattern == "all-to-all":
        return [(a, b) for a in a_side for b in b_side if a != b]
    if pattern in pathclasses.path_classes():
        return [(a, b) for a in a_side for b in b_side
                if a != b and classify(spec, a, b) == pattern]
    a_set, b_set = set(a_side), set(b_side)
    return [(a, b) for a, b in PATTERNS[pattern].pairs(ctx) if a in a_set and b in b_set]


def _send_gpu(pair: Pair, pxn: bool) -> int:
    (_sa, ga), (_sb, gb) = pair
    return gb if pxn and ga != gb else ga


def spread_sample(base: list[Pair], n: int, pxn: bool = False) -> list[Pair]:
    """``n`` of ``base`` spread over servers and rails: each pick is the pair whose two servers,
    then two rails, then two NICs were used least so far (greedy), candidates scanned from a
    rotating start so ties do not all fall on the first servers. Order of the picks.
    ``n`` >= len(base): ``base`` unchanged. Above 4 million candidate looks (n x len(base)),
    evenly spaced pairs instead."""
    if n >= len(base):
        return list(base)
    if n * len(base) > 4_000_000:
        return [base[(i * len(base)) // n] for i in range(n)]
    srv: dict[str, int] = {}
    rail: dict[int, int] = {}
    nic: dict[tuple[str, int], int] = {}
    feats = []
    for p in base:
        (sa, _ga), (sb, gb) = p
        ga = _send_gpu(p, pxn)
        feats.append(((sa, sb), (ga, gb), ((sa, ga), (sb, gb))))
    taken = [False] * len(base)
    out: list[Pair] = []
    stride = max(1, int(len(base) * 0.618))
    for i in range(n):
        best, best_key = -1, None
        start = (i * stride) % len(base)
        for j in range(len(base)):
            k = (start + j) % len(base)
            if taken[k]:
                continue
            (sa, sb), (ra, rb), (na, nb) = feats[k]
            key = (srv.get(sa, 0) + srv.get(sb, 0), rail.get(ra, 0) + rail.get(rb, 0),
                   nic.get(na, 0) + nic.get(nb, 0))
            if best_key is None or key < best_key:
                best, best_key = k, key
                if key == (0, 0, 0):
                    break
        taken[best] = True
        (sa, sb), (ra, rb), (na, nb) = feats[best]
        for d, keys in ((srv, (sa, sb)), (rail, (ra, rb)), (nic, (na, nb))):
            for key in keys:
                d[key] = d.get(key, 0) + 1
        out.append(base[best])
    return out


def pattern_pairs(spec: LabSpec, pattern: str | None, pxn: bool = False, *,
                  sample: int | None = None, src: list[tuple[str, int]] | None = None,
                  dst: list[tuple[str, int]] | None = None) -> list[Pair]:
    """The GPU pairs :func:`flows_for` sends before ``n`` samples or repeats them: the
    pattern's full-coverage pairs, or the ``src``/``dst`` selection (see there). ``len()`` of
    it is the full-coverage flow count ``railab traffic -n`` compares against.

    Raises PatternError as :func:`flows_for` does."""
    if pattern is not None and pattern not in PATTERNS:
        raise PatternError(f"unknown pattern {pattern!r}: use one of {', '.join(PATTERNS)}")
    ctx = PatternContext(spec, _servers_by_group(spec), spec.gpus_per_server, sample)
    if src is not None or dst is not None:
        if pattern is None and (src is None or dst is None):
            raise PatternError("give a --pattern, or both --src and --dst")
        base = _select(spec, ctx, pattern, pxn, src, dst)
        if not base:
            raise PatternError(f"no {pattern or 'GPU'} pair goes from the selected sources to the "
                               "selected destinations: widen --src/--dst or pick another --pattern")
    elif pattern is None:
        raise PatternError("give a --pattern, or both --src and --dst")
    else:
        base = PATTERNS[pattern].pairs(ctx)
    return base


def flows_for(spec: LabSpec, pattern: str | None, pxn: bool = False, n: int | None = None,
              sample: int | None = None, *, src: list[tuple[str, int]] | None = None,
              dst: list[tuple[str, int]] | None = None, **flow_kw) -> list[Flow]:
    """The flows of a registered pattern, routed (NICs and expected hops filled).

    By default every shipped pattern covers every server NIC of the lab at least once (every
    rail of every server; intra-server: every GPU of every server), with the fewest flows
    that do, so a dead NIC anywhere fails a flow (:func:`coverage` counts them):

    * ``intra-server``: on each server GPU 2k -> 2k+1 over NVLink (G/2 flows per server);
    * ``intra-rail``: in each group, for each rail r, the servers paired by
      :func:`rotation_pairs` round r, GPU r -> GPU r (s/2 flows per rail and group);
    * ``inter-rail``: in each group, the servers paired (round 0), GPU i -> GPU i+1 of the
      partner for every i (with PXN the source sends from its NIC on the partner's rail);
    * ``cross-group``: groups paired (g1 with g2, g3 with g4, ...), for each rail r server k of
      the first with server k+r of the second, GPU r -> GPU r;
    * ``all-to-all``: every ordered GPU pair up to :data:`ALL_TO_ALL_MAX_FLOWS` flows (mini:
      240), else shifted rounds (GPU t -> GPU t+k, every GPU once each way per round);
      ``sample`` = S keeps the old form: every pair of S servers spread over the groups;
    * ``ring``: NCCL rail-aware rings, one channel per rail (below).

    Flow counts: ``mini`` 8 per pattern (all-to-all 240, ring 24); ``rail-optimized-1024-full``
    512 for intra-server, intra-rail, inter-rail and cross-group, 1024 for all-to-all, 1920 for
    ring.

    ``n`` below that full-coverage count samples ``n`` of its pairs spread over servers and
    rails (:func:`spread_sample`; :func:`coverage_text` then says it sampled); ``n`` above it
    repeats the pairs with new QPs (new UDP source ports) up to ``n`` flows, e.g. to measure
    ECMP spread. ``src`` / ``dst`` (:func:`parse_endpoints`) select the endpoints explicitly:
    every pair of the pattern's path class from ``src`` to ``dst`` (a missing side: every GPU);
    ``pattern`` None with both given: every pair between them. ``flow_kw`` sets Flow fields
    (size, messages, mtu, rate, op).

    Ring (NCCL rail-aware ordering): servers in order; channel 0 visits GPUs 0..G-1 of each
    server over NVLink (intra-server flows) and goes from GPU G-1 of server k to GPU 0 of server
    k+1; channel c (one per rail, as NCCL runs a channel per NIC) leaves server k from GPU c-1
    for GPU c of server k+1 (its NVLink hops repeat channel 0's and are not listed). With PXN
    the sender hands over by NVLink and the inter-server hop stays on the receiver's rail; without
    PXN it is inter-rail.

    Raises PatternError for an unknown pattern, one the lab cannot hold (e.g. cross-group on a
    one-group lab), or a ``src``/``dst`` selection no pair of the pattern joins.
    """
    base = pattern_pairs(spec, pattern, pxn, sample=sample, src=src, dst=dst)
    if n is not None and n < len(base):
        base = spread_sample(base, n, pxn)
    return [route(spec, f) for f in _expand(base, n, pxn=pxn, **flow_kw)]


@register_pattern("intra-server", "every server, GPU 2k -> GPU 2k+1 over NVLink (never leaves it)")
def _intra_server(ctx: PatternContext) -> list[Pair]:
    G = ctx.gpus
    if G < 2:
        raise PatternError("intra-server needs 2+ GPUs per server")
    gpus = [str(i) for i in range(G)]
    return [((s, int(a)), (s, int(b))) for s in ctx.servers for a, b in rotation_pairs(gpus)]


def _multi_server_groups(ctx: PatternContext, pattern: str) -> list[list[str]]:
    groups = [ctx.groups[g] for g in sorted(ctx.groups) if len(ctx.groups[g]) > 1]
    if not groups:
        raise PatternError(f"{pattern} needs a group with 2+ servers; the lab's groups have "
                           f"{', '.join(str(len(v)) for v in ctx.groups.values())}")
    return groups


@register_pattern("intra-rail", "every NIC: servers of a group paired per rail, GPU i -> GPU i")
def _intra_rail(ctx: PatternContext) -> list[Pair]:
    out: list[Pair] = []
    for srvs in _multi_server_groups(ctx, "intra-rail"):
        for r in range(ctx.gpus):
            out += [((a, r), (b, r)) for a, b in rotation_pairs(srvs, r)]
    return out


@register_pattern("inter-rail", "every NIC: servers of a group paired, GPU i -> GPU i+1")
def _inter_rail(ctx: PatternContext) -> list[Pair]:
    G = ctx.gpus
    if G < 2:
        raise PatternError("inter-rail needs 2+ GPUs per server")
    out: list[Pair] = []
    for srvs in _multi_server_groups(ctx, "inter-rail"):
        for a, b in rotation_pairs(srvs):
            out += [((a, i), (b, (i + 1) % G)) for i in range(G)]
    return out


@register_pattern("cross-group", "every NIC: groups paired, server k -> server k+rail, every rail")
def _cross_group(ctx: PatternContext) -> list[Pair]:
    groups = ctx.groups
    if len(groups) < 2:
        raise PatternError(f"cross-group needs 2+ groups; lab {ctx.spec.name!r} has one "
                           f"({ctx.spec.architecture})")
    out: list[Pair] = []
    for ga, gb in rotation_pairs([str(g) for g in sorted(groups)]):
        a, b = groups[int(ga)], groups[int(gb)]
        for r in range(ctx.gpus):
            out += [((a[k % len(a)], r), (b[(k + r) % len(b)], r)) for k in range(max(len(a), len(b)))]
    return out


@register_pattern("cross-pod", "every server NIC to a server of another pod, same rail "
                  "(three-tier labs)")
def _cross_pod(ctx: PatternContext) -> list[Pair]:
    gpp = ctx.spec.groups_per_pod
    if not gpp or len(ctx.groups) <= gpp:
        raise PatternError(f"cross-pod needs a three-tier lab with 2+ pods; lab "
                           f"{ctx.spec.name!r} has {ctx.spec.pods} pod(s)")
    gs = sorted(ctx.groups)
    pods = [[srv for g in gs[i:i + gpp] for srv in ctx.groups[g]] for i in range(0, len(gs), gpp)]
    out: list[Pair] = []
    # pods paired as groups are by cross-group; on each rail, server k of one pod talks to server
    # k + rail of the other, so every NIC of both pods is used at least once
    for pa, pb in rotation_pairs([str(i) for i in range(len(pods))]):
        a, b = pods[int(pa)], pods[int(pb)]
        for r in range(ctx.gpus):
            out += [((a[k % len(a)], r), (b[(k + r) % len(b)], r)) for k in range(max(len(a), len(b)))]
    return out


@register_pattern("all-to-all", "every GPU to every GPU (shifted rounds on large labs)")
def _all_to_all(ctx: PatternContext) -> list[Pair]:
    if ctx.sample is not None:
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
    gpus = [(s, i) for s in ctx.servers for i in range(ctx.gpus)]
    T = len(gpus)
    if T * (T - 1) <= ALL_TO_ALL_MAX_FLOWS:
        return [(a, b) for a in gpus for b in gpus if a != b]
    rounds = max(1, min(T - 1, ALL_TO_ALL_MAX_FLOWS // T // 4))
    shifts = sorted({(T // 2 + 1 + (j * (T - 1)) // rounds) % T or 1 for j in range(rounds)})
    return [(gpus[t], gpus[(t + k) % T]) for k in shifts for t in range(T)]


@register_pattern("ring", "all-reduce rings over all GPUs, one channel per rail, NCCL rail-aware order")
def _ring(ctx: PatternContext) -> list[Pair]:
    G = ctx.gpus
    servers = ctx.servers
    base: list[Pair] = []
    for k, s in enumerate(servers):
        for i in range(G - 1):
            base.append(((s, i), (s, i + 1)))
        nxt = servers[(k + 1) % len(servers)]
        if nxt != s:
            base.append(((s, G - 1), (nxt, 0)))
    if len(servers) > 1:
        for c in range(1, G):
            for k, s in enumerate(servers):
                base.append(((s, c - 1), (servers[(k + 1) % len(servers)], c)))
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


@dataclass(frozen=True)
class Coverage:
    """Which server NICs, servers and rails a set of routed flows touches (either end; the
    NIC a flow leaves from, after PXN's NVLink hand-over, and the NIC it arrives on).
    Intra-server (NVLink) flows touch GPUs, not NICs: ``gpus`` counts those ends."""

    nics: frozenset[tuple[str, int]]
    nics_total: int
    servers: frozenset[str]
    servers_total: int
    rails: frozenset[int]
    rails_total: int
    gpus: frozenset[tuple[str, int]]
    gpus_total: int

    @property
    def missing_nics(self) -> list[str]:
        """Uncovered NICs as ``srv1:eth2``, in lab order (filled by :func:`coverage`)."""
        return list(self._missing)

    @property
    def full(self) -> bool:
        """Every server NIC is touched (or, for NVLink-only flows, every GPU)."""
        if self.nics:
            return len(self.nics) == self.nics_total
        return len(self.gpus) == self.gpus_total


def coverage(spec: LabSpec, flows: list[Flow]) -> Coverage:
    """:class:`Coverage` of routed ``flows`` in ``spec``."""
    nics: set[tuple[str, int]] = set()
    gpus: set[tuple[str, int]] = set()
    servers: set[str] = set()
    rails: set[int] = set()
    for f in flows:
        servers.update((f.src[0], f.dst[0]))
        if f.path_class and get_path_class(f.path_class).nvlink_only:
            gpus.update((f.src, f.dst))
            continue
        for srv, k in ((f.src[0], f.src_nic), (f.dst[0], f.dst_nic)):
            nics.add((srv, k))
            rails.add(spec.nic(srv, k).rail)
    all_rails = {n.rail for n in spec.nics}
    cov = Coverage(frozenset(nics), len(spec.nics), frozenset(servers),
                   len(spec.by_role("server")), frozenset(rails), len(all_rails),
                   frozenset(gpus), len(spec.by_role("server")) * spec.gpus_per_server)
    object.__setattr__(cov, "_missing", tuple(f"{n.server}:{n.interface}" for n in spec.nics
                                              if (n.server, n.nic) not in nics))
    return cov


def coverage_text(spec: LabSpec, flows: list[Flow], full_flows: int | None = None) -> str:
    """One line on what ``flows`` cover, e.g. ``covers all 16 server NICs of 4 servers, every
    rail (8 flows)`` or, when ``full_flows`` (the pattern's full-coverage count) is larger than
    the flows sent, ``sampled 4 of 8 flows: 8 of 16 server NICs, 4 of 4 servers, 4 of 4 rails
    (drop -n for every NIC)``."""
    cov = coverage(spec, flows)
    n = len(flows)
    nf = f"{n} flow{'' if n == 1 else 's'}"
    if cov.nics:
        what = (f"{len(cov.nics)} of {cov.nics_total} server NICs, {len(cov.servers)} of "
                f"{cov.servers_total} servers, {len(cov.rails)} of {cov.rails_total} rails")
    else:
        what = (f"{len(cov.gpus)} of {cov.gpus_total} GPUs (NVLink), {len(cov.servers)} of "
                f"{cov.servers_total} servers")
    if full_flows is not None and n < full_flows:
        return f"sampled {n} of {full_flows} flows: {what} (drop -n for every NIC)"
    if cov.full:
        if cov.nics:
            return (f"covers all {cov.nics_total} server NICs of {cov.servers_total} servers, "
                    f"every rail ({nf})")
        return f"covers all {cov.gpus_total} GPUs of {cov.servers_total} servers over NVLink ({nf})"
    miss = cov.missing_nics
    tail = (f"; not covered: {', '.join(miss[:4])}{' ...' if len(miss) > 4 else ''}"
            if cov.nics and miss else "")
    return f"covers {what} ({nf}){tail}"


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



#: ``incast`` senders by default (the seed's 8:1 incast).
DEFAULT_INCAST_SENDERS = 8


def incast_candidates(spec: LabSpec, receiver: tuple[str, int] | None = None,
                      pxn: bool = False) -> list[Pair]:
    """Every (sender GPU, receiver GPU) pair an incast to ``receiver`` (default the first
    server's GPU 0) may use, in the order :func:`incast_pairs` takes them: the receiver's rail
    first, then the next rails; on each, every other server once (groups interleaved, so the
    senders come from across the fabric). Pairs the design makes unreachable (Rail-only across
    rails without PXN) are left out."""
    groups = _servers_by_group(spec)
    if receiver is None:
        receiver = (groups[min(groups)][0], 0)
    order: list[str] = []
    lists = [groups[g] for g in sorted(groups)]
    for k in range(max(map(len, lists))):
        order += [s[k] for s in lists if k < len(s)]
    out: list[Pair] = []
    G = spec.gpus_per_server
    for off in range(G):
        gpu = (receiver[1] + off) % G
        for s in order:
            if s != receiver[0] and route(spec, Flow((s, gpu), receiver, pxn=pxn)).expected_hops is not None:
                out.append(((s, gpu), receiver))
    return out


def incast_pairs(spec: LabSpec, senders: int = DEFAULT_INCAST_SENDERS,
                 receiver: tuple[str, int] | None = None, pxn: bool = False) -> list[Pair]:
    """``senders`` sender GPUs -> one receiver GPU: the first ``senders`` of
    :func:`incast_candidates` (sender NICs on distinct servers first).

    Raises PatternError when ``senders`` < 1 or the lab has fewer reachable sender NICs (the
    message gives the most it has)."""
    if senders < 1:
        raise PatternError(f"--senders must be at least 1 (got {senders})")
    out = incast_candidates(spec, receiver, pxn)
    if len(out) < senders:
        rcv = out[0][1] if out else receiver
        where = f"{rcv[0]}:gpu{rcv[1]}" if rcv else "the receiver"
        raise PatternError(f"incast --senders {senders}: lab {spec.name!r} has {len(out)} sender "
                           f"NIC{'' if len(out) == 1 else 's'} that reach {where}"
                           f"{'' if pxn else ' without PXN'}; use --senders {len(out)} or fewer"
                           + ("" if pxn else " (or --pxn)"))
    return out[:senders]


@register_pattern("incast", f"{DEFAULT_INCAST_SENDERS} sender NICs on distinct servers across "
                  "the fabric to one receiver NIC (--senders N; a load run)", full_coverage=False)
def _incast(ctx: PatternContext) -> list[Pair]:
    return incast_candidates(ctx.spec)[:DEFAULT_INCAST_SENDERS]
