"""NCCL-style collectives over a lab's GPUs: all-reduce (rings) and all-to-all, with and without
PXN, every network flow at once, timed and reported the way nccl-tests reports them.

Ranks are the lab's GPUs (``n`` = servers x GPUs per server, rank = server order x GPU). ``bytes``
is nccl-tests' size: the bytes of each rank's buffer.

**all-reduce** is NCCL's ring algorithm with one channel per rail (NCCL runs a ring per NIC, and
its rail-aware rings enter and leave every server on the same rail): channel ``r`` carries
``bytes / G`` of every rank's buffer; inside a server its ring crosses the GPUs over NVLink,
between servers it goes from GPU ``r`` of server ``k`` to GPU ``r`` of server ``k+1`` (intra-rail:
one leaf on a rail of one group, leaf-spine-leaf across groups). A ring all-reduce of ``D`` bytes
over ``n`` ranks has each rank send ``2(n-1)/n x D`` to its successor, so each of these network
flows carries ``2(n-1)/n x bytes / G``. The rings never cross rails, so ``--pxn`` changes nothing
for all-reduce (said in the result's notes).

**all-to-all**: every rank sends ``bytes / n`` to every other rank. Pairs on one server go over
NVLink; between servers, without PXN GPU ``i`` sends from its own NIC to the destination GPU's
NIC (inter-rail when the GPU indexes differ: leaf-spine-leaf on Rail-optimized, **unreachable by
design** on Rail-only unless both rails share a leaf); with PXN (NCCL's PCIe x NVLink) it hands
the data over NVLink to the GPU of its own server on the destination's rail, which sends it on
that rail (intra-rail). One flow per GPU pair, each its own QP (so its own UDP source port).

**Not modelled**: NVLink legs take no time (the lab has no NVLink; the intra-server share of
the data is counted in ``nvlink_bytes``); NCCL's pipelining of chunks is not modelled: the
network flows of a collective all start together and run to completion, which is the bound a
pipelined ring approaches for large sizes.

Figures (nccl-tests, ``doc/PERFORMANCE.md``): ``time`` is from the first packet to the last
delivered, ``algbw = bytes / time``, ``busbw = algbw x 2(n-1)/n`` (all-reduce) or
``algbw x (n-1)/n`` (all-to-all). A lab port runs at ``qos.capacity.port_rate_mbps`` and time
is scaled by ``qos.capacity.time_scale`` (:class:`railab.topologies.qos.CapacityProfile`), so
the lab's measured time divided by the scale is the fabric time and the lab's bandwidth
multiplied by it the fabric bandwidth; both are reported, named as such. A lab whose ports are
not shaped (``capacity.enabled`` false) has no fabric conversion: its times are the engine's.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from railab.errors import UsageError
from railab.testbed.dilation import MIN_RATE_MBPS, dilated
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import CapacityProfile
from railab.traffic.ecmp import (
    DEFAULT_HASH_SEED,
    PacedEngine,
    UplinkLoad,
    background_rate,
    hashing,
    size_flow,
    uplink_load,
)
from railab.traffic.load import LoadFlow, PortReader, run_load
from railab.traffic.patterns import Flow, route

Op = Literal["all-reduce", "all-to-all"]
#: The collectives railab runs (``railab collective LAB OP``).
OPS: tuple[str, ...] = ("all-reduce", "all-to-all")
#: RoCE path MTU of collective flows (NCCL's default on RoCE is the largest, 4096).
COLLECTIVE_MTU = 4096
#: Smallest ``bytes`` accepted: one MTU per network flow at the least.
MIN_BYTES = 1024
#: Most network flows one run may hold (one process sends and receives them all).
MAX_FLOWS = 4096
#: Bytes of a RoCEv2 RDMA WRITE frame besides its payload as the ports' shapers count them:
#: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 (RETH's 16 on a message's first packet not
#: counted, so :func:`bound` errs fast).
ROCE_FRAME_OVERHEAD = 58
#: The engine "keeps its rate" when no paced flow's last packet left more than this share of
#: its planned sending time late (:attr:`railab.traffic.ecmp.FlowTiming.lag`).
LAG_LIMIT = 0.10
#: Frame-hops per second one CPU of the host carries through a shaped lab while the load engine
#: sends and receives (a frame crossing h switches is h frame-hops: the lab's forwarding, htb
#: shaping, ECN hooks and receive steering cost per hop, and the engine's own work is folded
#: in). Drawn from runs on the 2-CPU machine (2026-12-06, load average 2.5-4, mini-lossless,
#: 1 MiB per rank, `railab collective --port-rate R`): the ring all-reduce (1.25 switch hops a
#: frame on average) kept its rate at 50 Mb/s (48,100 frames/s: 60,200 frame-hops/s) with a
#: host lag of 1-2 % on a lab that had run before, but a reviewer's first two runs on a fresh
#: lab lagged 13 %; the all-to-all (2.53 hops) kept it at 20 and 25 Mb/s (lag 3-5 % and 5-9 %),
#: not at 30-50 Mb/s (10-34 %; 29,000-48,100 frames/s). So 26,000 a CPU, with margin: 40 Mb/s
#: for that all-reduce (48,100 frame-hops/s), 20 Mb/s for that all-to-all (48,800).
#: ``RAILAB_HOST_FRAME_HOPS`` (frame-hops/s, the whole host) overrides it for a faster or
#: busier machine.
HOST_FRAME_HOPS_PER_CPU = 26_000
#: The lab port rates (Mb/s) :func:`fitting_rate_mbps` picks from: each a round time scale for
#: 400 Gb/s (400,000 / rate: 8000 at 50 Mb/s, 20000 at 20 Mb/s).
NICE_RATES_MBPS = (1000.0, 800.0, 500.0, 400.0, 250.0, 200.0, 160.0, 100.0, 80.0, 50.0, 40.0,
                   25.0, 20.0, 16.0, 10.0, 8.0, 5.0, 4.0, 2.5, 2.0, 1.6, 1.0)


def host_frame_hop_budget(cpus: int | None = None) -> float:
    """Frame-hops per second the host carries through a shaped lab at line rate:
    ``RAILAB_HOST_FRAME_HOPS`` when set, else :data:`HOST_FRAME_HOPS_PER_CPU` x ``cpus``
    (default: the CPUs this process may run on). UsageError for a non-numeric or non-positive
    ``RAILAB_HOST_FRAME_HOPS``."""
    import os

    env = os.environ.get("RAILAB_HOST_FRAME_HOPS")
    if env:
        try:
            v = float(env)
        except ValueError:
            v = 0.0
        if v <= 0:
            raise UsageError(f"RAILAB_HOST_FRAME_HOPS={env!r}: give the host's frame-hops per "
                             "second (frames x switch hops), > 0")
        return v
    n = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return HOST_FRAME_HOPS_PER_CPU * max(1, n)


def fitting_rate_mbps(spec: LabSpec, sched: Schedule, *, budget: float | None = None) -> float:
    """The fastest lab port rate (Mb/s, one of :data:`NICE_RATES_MBPS`, at most the lab's own
    ``port_rate_mbps``) at which every NIC ``sched`` sends from or to at line rate fits the
    host's frame-hop budget (:func:`host_frame_hop_budget`, or ``budget``): frames of
    :data:`COLLECTIVE_MTU` + :data:`ROCE_FRAME_OVERHEAD` bytes, each crossing the schedule's
    mean switch hops (weighted by bytes). The run then keeps its rate and measures the fabric,
    in slow motion (railab.testbed.dilation). Below the smallest nice rate: the fit itself, at
    least ``MIN_RATE_MBPS``. A
    lab without lab.capacity: 0.0 (no rate to fit)."""
    cap = spec.qos.capacity
    if not cap.enabled:
        return 0.0
    reach = [(f, b) for f, b in zip(sched.flows, sched.flow_bytes, strict=True) if f.expected_hops]
    tx = {(f.src[0], f.src_nic) for f, _ in reach}
    rx = {(f.dst[0], f.dst_nic) for f, _ in reach}
    nics = max(len(tx), len(rx))
    total = sum(b for _, b in reach)
    if nics == 0 or total <= 0:
        return cap.port_rate_mbps
    hops = sum(b * f.expected_hops for f, b in reach) / total
    per_frame = (COLLECTIVE_MTU + ROCE_FRAME_OVERHEAD) * 8
    fps = (budget if budget is not None else host_frame_hop_budget()) / hops
    fit = min(cap.port_rate_mbps, fps * per_frame / nics / 1e6)
    return float(next((r for r in NICE_RATES_MBPS if r <= fit), max(fit, MIN_RATE_MBPS)))


def run_rate_mbps(spec: LabSpec, sched: Schedule, port_rate: float | str | None) -> float:
    """The lab port rate a collective of ``sched`` runs at: ``"auto"`` (the default of
    ``railab collective --port-rate``) :func:`fitting_rate_mbps`; ``"lab"`` or None the lab's
    own; a number (Mb/s) that rate. UsageError for a word other than auto/lab, a rate <= 0 or
    above the lab's own (a run may only slow the lab down: railab.testbed.dilation)."""
    cap = spec.qos.capacity
    if port_rate is None or port_rate == "lab":
        return cap.port_rate_mbps
    if port_rate == "auto":
        return fitting_rate_mbps(spec, sched)
    try:
        r = float(port_rate)
    except (TypeError, ValueError):
        raise UsageError(f"--port-rate {port_rate!r}: give auto, lab or a rate in Mb/s") from None
    if not MIN_RATE_MBPS <= r <= cap.port_rate_mbps:
        raise UsageError(f"--port-rate {r:g}: it must be at least {MIN_RATE_MBPS:g} Mb/s and at "
                         f"most lab {spec.name}'s own {cap.port_rate_mbps:g} Mb/s (a run may "
                         "only slow the lab down)")
    return r


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for
    all-to-all (``n`` ranks, >= 1). UsageError for another collective."""
    if n < 1:
        raise ValueError("a collective has at least one rank")
    if op == "all-reduce":
        return 2.0 * (n - 1) / n
    if op == "all-to-all":
        return (n - 1) / n
    raise UsageError(f"collective must be one of {', '.join(OPS)} (got {op!r})")


def bandwidth(op: str, nbytes: int, n: int, seconds: float) -> tuple[float, float]:
    """``(algbw, busbw)`` in Gb/s (10^9 bits/s) for ``nbytes`` per rank done in ``seconds``:
    ``algbw = nbytes x 8 / seconds``, ``busbw = algbw x bus_factor(op, n)``."""
    if seconds <= 0:
        raise ValueError("a collective's time must be > 0 s")
    alg = nbytes * 8 / seconds / 1e9
    return alg, alg * bus_factor(op, n)


@dataclass
class Schedule:
    """The network flows of one collective on one lab.

    ``flows``: routed :class:`Flow` objects, each sized to carry ``flow_bytes[i]`` (RoCE MTU
    :data:`COLLECTIVE_MTU`); ``ranks``: ``n``; ``nvlink_bytes``: bytes the collective moves over
    NVLink (not sent: instantaneous in the lab); ``unreachable``: the flows the lab's design
    cannot carry (``expected_hops`` None: Rail-only inter-rail without PXN), a subset of
    ``flows``; ``notes``: what the schedule assumed, in words."""

    op: str
    bytes_per_rank: int
    ranks: int
    pxn: bool
    flows: list[Flow]
    flow_bytes: list[int]
    nvlink_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    qps: int = 1

    @property
    def unreachable(self) -> list[Flow]:
        return [f for f in self.flows if f.expected_hops is None]

    @property
    def network_bytes(self) -> int:
        return sum(self.flow_bytes)

    def by_class(self) -> dict[str, int]:
        """Network flows per path class."""
        out: dict[str, int] = {}
        for f in self.flows:
            out[f.path_class] = out.get(f.path_class, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"op": self.op, "bytes_per_rank": self.bytes_per_rank, "ranks": self.ranks,
                "pxn": self.pxn, "qps": self.qps, "network_flows": len(self.flows),
                "network_bytes": self.network_bytes, "nvlink_bytes": self.nvlink_bytes,
                "flows_by_class": self.by_class(), "unreachable_flows": len(self.unreachable),
                "notes": list(self.notes)}


def ranks_of(spec: LabSpec) -> list[tuple[str, int]]:
    """The lab's GPUs in rank order: servers in lab order, GPUs 0..G-1 of each."""
    return [(s.name, g) for s in spec.by_role("server") for g in range(spec.gpus_per_server)]


def schedule(spec: LabSpec, op: str, nbytes: int, *, pxn: bool = False, qps: int = 1) -> Schedule:
    """The :class:`Schedule` of collective ``op`` (:data:`OPS`) with ``nbytes`` per rank on
    ``spec`` (module docstring). ``qps``: QPs per connection (NCCL_IB_QPS_PER_CONNECTION): each
    network flow is split over that many QPs (each its own UDP source port under ``per-qp``
    entropy), each carrying 1/qps of its bytes. UsageError for an unknown op, ``nbytes`` below
    :data:`MIN_BYTES`, ``qps`` outside 1..64, a lab with fewer than two servers (no network
    flow) or more network flows than :data:`MAX_FLOWS`."""
    if op not in OPS:
        raise UsageError(f"collective must be one of {', '.join(OPS)} (got {op!r})")
    if nbytes < MIN_BYTES:
        raise UsageError(f"--bytes must be at least {MIN_BYTES} bytes per rank (got {nbytes})")
    if not 1 <= qps <= 64:
        raise UsageError(f"--qps must be 1-64 QPs per connection (got {qps})")
    servers = [s.name for s in spec.by_role("server")]
    if len(servers) < 2:
        raise UsageError(f"lab {spec.name!r} has {len(servers)} server(s): a collective over the "
                         "fabric needs 2 or more")
    G = spec.gpus_per_server
    n = len(servers) * G
    notes = ["NVLink legs are not in the lab: modelled as instantaneous (nvlink_bytes)",
             "all flows start together and run to completion (NCCL's chunk pipelining is not "
             "modelled)"]
    pairs: list[tuple[Flow, int]] = []
    nvlink = 0
    if op == "all-reduce":
        per = math.ceil(2 * (n - 1) / n * nbytes / G)
        for r in range(G):
            for k, s in enumerate(servers):
                nxt = servers[(k + 1) % len(servers)]
                pairs.append((Flow((s, r), (nxt, r), qp=0), per))
        # inside each server every channel's ring crosses G-1 NVLink hops
        nvlink = math.ceil(2 * (n - 1) / n * nbytes / G) * (G - 1) * G * len(servers)
        notes.append(f"ring all-reduce, one channel per rail ({G} channels): each network flow "
                     f"carries 2(n-1)/n x bytes / {G} = {per} bytes")
        if pxn:
            notes.append("rings are rail-aligned: --pxn changes nothing for all-reduce")
    else:
        per = math.ceil(nbytes / n)
        for src in ranks_of(spec):
            for dst in ranks_of(spec):
                if src == dst:
                    continue
                if src[0] == dst[0]:
                    nvlink += per
                    continue
                pairs.append((Flow(src, dst, qp=0, pxn=pxn), per))
        if pxn:
            nvlink += sum(per for f, _ in pairs if f.src[1] != f.dst[1])
            notes.append("PXN: inter-rail data crosses NVLink to the GPU on the destination's "
                         "rail first, then stays on that rail")
        notes.append(f"each rank sends bytes / n = {per} bytes to every other rank")
    if len(pairs) * qps > MAX_FLOWS:
        raise UsageError(f"{op} on lab {spec.name!r} needs {len(pairs) * qps} network flows; "
                         f"railab runs at most {MAX_FLOWS} at once: use a smaller lab or fewer --qps")
    flows, sizes = [], []
    for f, b in pairs:
        part = math.ceil(b / qps)
        for q in range(qps):
            routed = route(spec, Flow(f.src, f.dst, qp=q, pxn=f.pxn, mtu=COLLECTIVE_MTU))
            flows.append(size_flow(routed, part))
            sizes.append(part)
    if qps > 1:
        notes.append(f"{qps} QPs per connection: each carries 1/{qps} of the connection's bytes")
    sched = Schedule(op, nbytes, n, pxn, flows, sizes, nvlink, notes, qps)
    if sched.unreachable:
        sched.notes.append(f"{len(sched.unreachable)} of {len(flows)} network flows are "
                           f"unreachable by design ({spec.architecture}, "
                           f"{'PXN' if pxn else 'no PXN'}): inter-rail pairs on different leaves")
    return sched


@dataclass
class CollectiveResult:
    """What one collective run measured.

    ``completed``: every reachable flow delivered every packet and nothing unreachable by design
    was asked for; ``time_s`` (lab seconds, first packet to last delivery; None when not
    completed), ``algbw_gbps``/``busbw_gbps`` (Gb/s, lab); ``fabric``: the same converted with the
    lab's time scale (``time_us``, ``algbw_gbps``, ``busbw_gbps``), None on an unshaped lab;
    ``per_class``: completion time (lab s) of the slowest flow per path class; ``lost``: packets
    lost; ``uplink_load``: the leaves' uplink byte load (:class:`UplinkLoad`)."""

    schedule: Schedule
    completed: bool
    time_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    fabric: dict | None
    lost: int
    delivered_bytes: int
    per_class: dict[str, float | None]
    uplink_load: UplinkLoad | None
    port_rate_mbps: float | None
    time_scale: float | None
    sport_mode: str = "per-qp"
    hash_policy: str | None = None
    unreachable_delivered: int = 0
    sender_lag: float = 0.0
    #: receivers' reorder accounting over the reachable flows (measured): packets that arrived
    #: out of PSN order, packets received, the largest PSN distance (issue 30)
    out_of_order: int = 0
    received: int = 0
    max_psn_distance: int = 0
    #: completion time of each reachable flow that delivered everything, lab s
    flow_times_s: list[float] = field(default_factory=list)
    #: the line-rate bound (:func:`bound`: time_s, algbw_gbps, busbw_gbps in lab units), None
    #: on an unshaped lab
    bound: dict | None = None
    #: who did the per-packet work (``c``: the load engine's fast path, ``python``: its Python
    #: loop, ``path``: the path engine on an unshaped lab), its data packets per lab second and
    #: its CPU seconds; ``cc``: the QPs' congestion control (None on the path engine)
    engine: str = "path"
    engine_pps: float | None = None
    engine_cpu_s: float | None = None
    cc: str | None = None
    #: CE-marked packets the receivers saw (load engine only), the NICs' RC transport and, with
    #: one, its totals (:attr:`railab.traffic.load.LoadResult.transport`)
    ce_marked: int | None = None
    nic: str = "none"
    transport: dict | None = None
    #: frames the load engine's receive sockets dropped (the host's loss, not the fabric's)
    rx_socket_drops: int = 0
    #: the lab's own port rate (lab Mb/s) when the run slowed its ports to ``port_rate_mbps``
    #: (time dilation, railab.testbed.dilation; ``time_scale`` is the run's), else the same
    lab_port_rate_mbps: float | None = None

    @property
    def unreachable_by_design(self) -> bool:
        return bool(self.schedule.unreachable)

    @property
    def keeps_rate(self) -> bool:
        """``sender_lag`` <= :data:`LAG_LIMIT`: on the load engine (a shaped lab) no flow was
        delayed by its host (``late_s``: debts the host made it drop plus its last packet's
        lateness against its pacer) by more than that share of its completion time; on the
        path engine no paced flow finished sending more than that share late. A slower sender
        makes the collective's time the host's, not the fabric's."""
        return self.sender_lag <= LAG_LIMIT

    @property
    def ok(self) -> bool:
        """False when the run contradicts the design: a flow the design says is unreachable
        delivered, or the collective did not complete for another reason than the design
        (unreachable flows) or lost packets (whether a loss is a failure depends on what the
        lab promises: the caller judges ``lost``)."""
        return self.unreachable_delivered == 0 and (
            self.completed or self.unreachable_by_design or self.lost > 0)

    def to_dict(self) -> dict:
        s = self.schedule
        return {
            "op": s.op, "bytes": s.bytes_per_rank, "ranks": s.ranks, "pxn": s.pxn,
            "completed": self.completed,
            "unreachable_by_design": self.unreachable_by_design,
            "units": "lab: time_s in lab seconds, bandwidths in Gb/s at the lab port rate",
            "time_s": None if self.time_s is None else round(self.time_s, 6),
            "algbw_gbps": None if self.algbw_gbps is None else round(self.algbw_gbps, 6),
            "busbw_gbps": None if self.busbw_gbps is None else round(self.busbw_gbps, 6),
            "fabric": self.fabric,
            "port_rate_mbps": self.port_rate_mbps, "time_scale": self.time_scale,
            "lab_port_rate_mbps": self.lab_port_rate_mbps,
            "lost": self.lost, "delivered_bytes": self.delivered_bytes,
            "unreachable_delivered": self.unreachable_delivered,
            "per_class_time_s": {k: (None if v is None else round(v, 6))
                                 for k, v in self.per_class.items()},
            "sport_mode": self.sport_mode, "hash_policy": self.hash_policy,
            "sender_lag": round(self.sender_lag, 4), "keeps_rate": self.keeps_rate,
            "bound_busbw_gbps": (self.bound or {}).get("busbw_gbps"),
            "bound_time_s": (self.bound or {}).get("time_s"),
            "busbw_of_bound": (round(self.busbw_gbps / self.bound["busbw_gbps"], 4)
                               if self.busbw_gbps and self.bound and self.bound.get("busbw_gbps")
                               else None),
            "engine": self.engine, "engine_pps": self.engine_pps,
            "engine_cpu_s": self.engine_cpu_s, "cc": self.cc, "ce_marked": self.ce_marked,
            "nic": self.nic, "transport": self.transport, "rx_socket_drops": self.rx_socket_drops,
            "out_of_order": self.out_of_order, "max_psn_distance": self.max_psn_distance,
            "schedule": s.to_dict(),
            "uplink_load": self.uplink_load.to_dict() if self.uplink_load else None,
        }


def straggler_wait_s(cap: CapacityProfile, pfc: bool) -> float:
    """How long, at most, a collective waits after its last packet for the rest (s): twice what
    a full queue takes to drain at the port rate, plus 0.5 s (1 s on unshaped ports). A full
    queue is ``buffer_bytes`` with PFC on (it pauses there) and, without PFC, up to a lone hot
    queue's share of a shared buffer (``drop_limit_bytes``). The wait ends early once every
    packet arrived."""
    if not cap.enabled:
        return 1.0
    held = cap.buffer_bytes if pfc else max(cap.buffer_bytes, cap.drop_limit_bytes)
    return 2 * held * 8 / (cap.port_rate_mbps * 1e6) + 0.5


def run_collective(spec: LabSpec, netns_of: Callable[[str], str], sched: Schedule, *,
                   sport_mode: str = "per-qp", policy: str | None = None,
                   seed: int | None = DEFAULT_HASH_SEED, background_s: float = 0.5,
                   stop: threading.Event | None = None, pfc: bool | None = None,
                   cc: str = "dcqcn", engine: str = "auto", nic: str = "none",
                   port_rate: float | str | None = "auto") -> CollectiveResult:
    """Run every network flow of ``sched`` at once on the running lab and time it.

    On a lab with shaped ports (``qos.capacity.enabled``) the flows run on the load engine
    (:func:`railab.traffic.load.run_load`, its compiled fast path unless ``engine="python"``):
    each flow is one QP with its bytes, its ceiling its share of the port rate (the flows
    leaving one NIC split it evenly, :func:`railab.traffic.ecmp.pace`, as a NIC's scheduler
    would), under DCQCN (``cc="dcqcn"``, the lab's ``qos.dcqcn``) or at its ceiling
    (``cc="none"``); whether the engine kept its rate is read off each QP's host delay
    (``late_s``: debts the host made it drop plus how late its last packet left). Unshaped,
    flows go as fast as the path engine sends (:class:`railab.traffic.ecmp.PacedEngine`; the
    times are then the engine's). Flows the design makes unreachable are sent too (nothing may
    arrive). ``sport_mode``/``policy``/``seed``: UDP source-port entropy and the switches' ECMP
    hash for the run (:func:`railab.traffic.ecmp.hashing`, restored after). The uplink load is
    measured net of a ``background_s`` quiet interval. ``pfc``: whether the run's switch agent
    pauses (``railab collective --pfc``; None: the intent's ``lab.capacity.pfc``); on an
    unshaped lab it sets how long stragglers are waited for. ``nic``: the NICs' RC transport
    (:data:`railab.traffic.load.NIC_MODES`; a shaped lab only): the flows then complete when the
    responder has every packet, and ``transport`` counts what recovery cost. ``port_rate``
    (a shaped lab): the lab rate the run's ports are slowed to (:func:`run_rate_mbps`; default
    ``"auto"``, the fastest the host carries every NIC at line rate, so the figures are the
    fabric's: railab.testbed.dilation), the lab's own rate back after it; the result's
    ``port_rate_mbps`` and ``time_scale`` are the run's, ``lab_port_rate_mbps`` the lab's."""
    cap = spec.qos.capacity
    if cap.enabled:
        rate = run_rate_mbps(spec, sched, port_rate)
        with dilated(spec, netns_of, rate) as run_spec:
            out = _run_on_load_engine(run_spec, netns_of, sched, sport_mode=sport_mode,
                                      policy=policy, seed=seed, background_s=background_s,
                                      stop=stop, cc=cc, engine=engine, nic=nic)
        out.lab_port_rate_mbps = cap.port_rate_mbps
        return out
    if nic != "none":
        raise UsageError(f"--nic {nic}: the NIC transport runs on the load engine, which runs "
                         f"collectives on labs with lab.capacity; lab {spec.name} has none")
    flows = list(sched.flows)
    drain = straggler_wait_s(cap, cap.pfc if pfc is None else pfc)
    with hashing(spec, netns_of, policy=policy, seed=seed):
        with PacedEngine(spec, netns_of, sport_mode=sport_mode, stop=stop) as eng:
            bg = background_rate(eng, background_s) if background_s > 0 else {}
            before, t0 = eng.port_stats(), time.monotonic()
            results = eng.run(flows, measure=False, acks=False, timeout=drain)
            after, t1 = eng.port_stats(), time.monotonic()
            timings = [eng.timing(r) for r in results]
    reach = [(f, r, t) for f, r, t in zip(sched.flows, results, timings, strict=True)
             if f.expected_hops is not None]
    lost = sum(r.lost for _, r, _ in reach)
    unreachable_delivered = sum(r.delivered for f, r in zip(sched.flows, results, strict=True)
                                if f.expected_hops is None)
    delivered_bytes = sum(b for f, b, r in zip(sched.flows, sched.flow_bytes, results, strict=True)
                          if r.sent and r.delivered == r.sent)
    per_class: dict[str, float | None] = {}
    for f, r, t in reach:
        secs = t.seconds if (t is not None and r.delivered == r.sent) else None
        prev = per_class.get(f.path_class, 0.0)
        per_class[f.path_class] = None if (secs is None or prev is None) else max(prev, secs)
    completed = not sched.unreachable and lost == 0 and all(
        t is not None and t.last_rx is not None for _, _, t in reach)
    time_s = alg = bus = None
    fabric = None
    if completed:
        start = min(t.start for _, _, t in reach)
        time_s = max(t.last_rx for _, _, t in reach) - start
        alg, bus = bandwidth(sched.op, sched.bytes_per_rank, sched.ranks, time_s)
        if cap.enabled:
            fabric = _fabric(cap, time_s, alg, bus)
    load = uplink_load(spec, before, after, t1 - t0, bg)
    lag = max((t.lag for _, _, t in reach if t is not None), default=0.0)
    return CollectiveResult(sched, completed, time_s, alg, bus, fabric, lost, delivered_bytes,
                            per_class, load, cap.port_rate_mbps if cap.enabled else None,
                            cap.time_scale if cap.enabled else None, sport_mode, policy,
                            unreachable_delivered, lag,
                            out_of_order=sum(r.out_of_order for _, r, _ in reach),
                            received=sum(r.delivered for _, r, _ in reach),
                            max_psn_distance=max((r.max_psn_distance for _, r, _ in reach),
                                                 default=0),
                            flow_times_s=[t.seconds for _, r, t in reach if t is not None
                                          and t.seconds is not None and r.delivered == r.sent])


def _fabric(cap: CapacityProfile, time_s: float, alg: float, bus: float) -> dict:
    """A collective's lab time and bandwidths in fabric units (the ``fabric`` object)."""
    scale = cap.time_scale
    return {"units": f"fabric: lab time / {scale:g}, lab bandwidth x {scale:g} "
                     f"({cap.port_rate_mbps:g} Mb/s lab ports stand for {cap.fabric_rate_gbps} Gb/s)",
            "time_us": round(cap.fabric_us(time_s), 3),
            "algbw_gbps": round(alg * scale, 3), "busbw_gbps": round(bus * scale, 3)}


class _PortStats:
    """Switch port tx bytes as :meth:`railab.traffic.engine.Engine.port_stats` gives them
    (``(switch, port) -> (0, 0, 0, tx_bytes)``), from :class:`railab.traffic.load.PortReader`
    (one rtnetlink socket per switch, no packet sockets)."""

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str]) -> None:
        self._r = PortReader(spec, netns_of)

    def port_stats(self) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        out = {}
        for key, tx in self._r.read().items():
            node, port = key.split(":", 1)
            out[(node, port)] = (0, 0, 0, tx)
        return out

    def close(self) -> None:
        self._r.close()


def bound(sched: Schedule, port_rate_mbps: float, mtu: int = COLLECTIVE_MTU) -> dict:
    """The line-rate bound of ``sched`` on ports of ``port_rate_mbps`` (lab Mb/s): every NIC
    sends and receives its flows' frames (``ceil(bytes / mtu)`` full packets, each ``mtu`` +
    :data:`ROCE_FRAME_OVERHEAD` bytes: what the ports' shapers count) at the port rate and
    nothing else waits, so the collective takes as long as its busiest NIC's
    bytes in or out take. Returns ``{"time_s", "algbw_gbps", "busbw_gbps"}`` (lab units;
    nccl-tests' busbw formula, :func:`bandwidth`). ValueError for a rate <= 0."""
    if port_rate_mbps <= 0:
        raise ValueError("port rate must be > 0 Mb/s")
    out_b: dict[tuple[str, int], float] = {}
    in_b: dict[tuple[str, int], float] = {}
    for f, b in zip(sched.flows, sched.flow_bytes, strict=True):
        if f.expected_hops is None:
            continue
        bits = math.ceil(b / mtu) * (ROCE_FRAME_OVERHEAD + mtu) * 8
        out_b[(f.src[0], f.src_nic)] = out_b.get((f.src[0], f.src_nic), 0.0) + bits
        in_b[(f.dst[0], f.dst_nic)] = in_b.get((f.dst[0], f.dst_nic), 0.0) + bits
    worst = max(list(out_b.values()) + list(in_b.values()), default=0.0)
    t = worst / (port_rate_mbps * 1e6)
    if t <= 0:
        return {"time_s": None, "algbw_gbps": None, "busbw_gbps": None}
    alg, bus = bandwidth(sched.op, sched.bytes_per_rank, sched.ranks, t)
    return {"time_s": round(t, 6), "algbw_gbps": round(alg, 6), "busbw_gbps": round(bus, 6)}


def _run_on_load_engine(spec: LabSpec, netns_of: Callable[[str], str], sched: Schedule, *,
                        sport_mode: str, policy: str | None, seed: int | None,
                        background_s: float, stop: threading.Event | None, cc: str,
                        engine: str, nic: str = "none") -> CollectiveResult:
    """:func:`run_collective` on a shaped lab: every network flow one load-engine QP."""
    cap = spec.qos.capacity
    fan: dict[tuple[str, int], int] = {}
    for f in sched.flows:
        fan[(f.src[0], f.src_nic)] = fan.get((f.src[0], f.src_nic), 0) + 1
    # each QP's ceiling: its NIC's port rate split evenly over the NIC's QPs (a NIC's scheduler)
    flows = [LoadFlow(f, bytes=b, rate_mbps=cap.port_rate_mbps / fan[(f.src[0], f.src_nic)])
             for f, b in zip(sched.flows, sched.flow_bytes, strict=True)]
    with hashing(spec, netns_of, policy=policy, seed=seed):
        ps = _PortStats(spec, netns_of)
        try:
            bg = background_rate(ps, background_s) if background_s > 0 else {}
            before, t0 = ps.port_stats(), time.monotonic()
            res = run_load(spec, netns_of, flows, cc=cc, sport_mode=sport_mode,
                           mtu=COLLECTIVE_MTU, stop=stop.is_set if stop is not None else None,
                           engine=engine, nic=nic)
            after, t1 = ps.port_stats(), time.monotonic()
        finally:
            ps.close()
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt
    reach = [(f, d) for f, d in zip(sched.flows, res.flows, strict=True) if f.expected_hops is not None]
    lost = sum(d["lost"] for _, d in reach)
    unreachable_delivered = sum(d["rx_packets"] for f, d in zip(sched.flows, res.flows, strict=True)
                                if f.expected_hops is None)
    delivered_bytes = sum(b for b, d in zip(sched.flow_bytes, res.flows, strict=True)
                          if d["tx_packets"] and d["rx_packets"] >= d["tx_packets"])
    per_class: dict[str, float | None] = {}
    for f, d in reach:
        secs = d["fct_s"]
        prev = per_class.get(f.path_class, 0.0)
        per_class[f.path_class] = None if (secs is None or prev is None) else max(prev, secs)
    completed = not sched.unreachable and lost == 0 and all(d["fct_s"] is not None for _, d in reach)
    time_s = alg = bus = None
    fabric = None
    if completed:
        time_s = max(d["fct_s"] for _, d in reach)
        alg, bus = bandwidth(sched.op, sched.bytes_per_rank, sched.ranks, time_s)
        fabric = _fabric(cap, time_s, alg, bus)
    # the host's share of each flow's time: debts it dropped plus its last packet's lateness;
    # frames the engine's own receive sockets dropped make the run the host's whatever the lag
    lag = max((d["late_s"] / d["fct_s"] for _, d in reach if d["fct_s"]), default=0.0)
    if res.rx_socket_drops:
        lag = max(lag, 1.0)
    out = CollectiveResult(
        sched, completed, time_s, alg, bus, fabric, lost, delivered_bytes, per_class,
        uplink_load(spec, before, after, t1 - t0, bg), cap.port_rate_mbps, cap.time_scale,
        sport_mode, policy, unreachable_delivered, lag,
        out_of_order=sum(d["ooo"] for _, d in reach),
        received=sum(d["rx_packets"] for _, d in reach),
        max_psn_distance=max((d["max_psn_distance"] for _, d in reach), default=0),
        flow_times_s=[d["fct_s"] for _, d in reach if d["fct_s"] is not None])
    out.bound = bound(sched, cap.port_rate_mbps)
    out.engine, out.engine_pps, out.cc = res.engine, res.engine_pps, cc
    out.engine_cpu_s = res.engine_cpu_s
    out.ce_marked = sum(d["ce_marked"] for _, d in reach)
    out.rx_socket_drops = res.rx_socket_drops
    out.nic, out.transport = nic, res.transport
    return out


def slowdown(base: CollectiveResult, other: CollectiveResult) -> float | None:
    """``other.time_s / base.time_s`` (e.g. fixed source ports over per-QP entropy: the
    collective's slowdown from ECMP hash collisions); None unless both completed."""
    if base.time_s is None or other.time_s is None or base.time_s <= 0:
        return None
    return other.time_s / base.time_s
