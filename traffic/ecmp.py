"""ECMP under load: the leaves' hash policy and seed, RoCE UDP source-port entropy, and the byte
load each leaf uplink carries, net of the lab's own BGP/BFD/ND background.

What decides which uplink a RoCEv2 packet takes is the switch's multipath hash over the packet's
fields (``net.ipv4.fib_multipath_hash_policy``: 0 = L3, source and destination address only;
the lab's L4, the 5-tuple, so the UDP source port counts: policy 3 over
``fib_multipath_hash_fields`` :data:`L4_HASH_FIELDS`, see :data:`HASH_POLICIES` for why not
policy 1) seeded by ``net.ipv4.fib_multipath_hash_seed``
(Linux 6.11+; 0 = a random seed chosen at boot, per namespace). The only entropy a RoCE flow
carries in the 5-tuple is its UDP source port (the destination port is 4791): Linux derives it
per QP (``rdma_get_udp_sport``: :func:`railab.traffic.roce.udp_sport` of the QP pair), and an
engine that puts every QP on one fixed port gives the hash nothing to spread (the low-entropy
elephant flows of the seed guide's straggler effect).

* :func:`hashing` sets the policy and seed on every switch of a lab for the length of a ``with``
  block (and puts back what was there), so collision tests are deterministic: same seed, same
  flows, same uplinks, run after run.
* :class:`PacedEngine` is :class:`railab.traffic.engine.Engine` with two additions: the UDP
  source port per flow by :data:`SPORT_MODES` (``per-qp`` = the Linux derivation, the engine's
  default; ``fixed`` = :data:`FIXED_SPORT` for every flow) and each flow's first-send and
  last-delivery times (:attr:`FlowTiming`), for completion times of byte-count flows.
* :func:`uplink_load` turns two :meth:`Engine.port_stats` reads (and a background rate measured
  on a quiet interval, :func:`background_rate`) into per-uplink bytes, each uplink's share of
  its leaf's load and the max/mean imbalance, judged against the leaf's uplink count
  (:class:`UplinkLoad`).

Per-packet spraying (``spray``: a new source port per packet, reordering measured at the
receiver) is the load engine's (``railab.traffic.load``); this module measures what it does to
the uplinks the same way.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace

from railab.errors import RailabError, UsageError
from railab.topologies.labspec import LabSpec
from railab.traffic import roce
from railab.traffic.engine import Engine, FlowResult, flow_qpns, in_netns
from railab.traffic.patterns import Flow

#: ``fib_multipath_hash_policy`` values by name (Documentation/networking/ip-sysctl.rst):
#: ``l3`` = source/destination address (0); ``l4`` = the 5-tuple, as policy 3 (custom) over
#: :data:`L4_HASH_FIELDS` (the lab's default). Not policy 1: for a *forwarded* packet that
#: already carries an L4 hash (``skb->l4_hash``, set on the way through the veths) Linux's
#: policy 1 returns that hash (``fib_multipath_hash``, net/ipv4/route.c: "short-circuit if we
#: already have L4 hash present"), keyed per boot and blind to ``fib_multipath_hash_seed``,
#: while a route lookup (``ip route get``, railab's path trace) hashes the 5-tuple with the
#: seed: the two disagreed (measured on mini-lossless, 2026-12-06: seeds 5, 9 and 200 moved the
#: traced paths, not the packets). Policy 3 hashes the packet's own fields with the seed on
#: both sides.
HASH_POLICIES: dict[str, int] = {"l3": 0, "l4": 3}
#: ``fib_multipath_hash_fields`` of the ``l4`` policy: source IP 0x01, destination IP 0x02,
#: IP protocol 0x04, source port 0x10, destination port 0x20 (the 5-tuple; ip-sysctl.rst)
L4_HASH_FIELDS = 0x37
#: The seed :func:`hashing` writes unless told otherwise (any fixed non-zero value makes the
#: hash the same in every run; 0 asks the kernel for a random one).
DEFAULT_HASH_SEED = 0x7261696C  # "rail"
#: UDP source-port modes of :class:`PacedEngine`: ``per-qp`` (Linux ``rdma_get_udp_sport`` of
#: the flow's QP pair: every QP its own port) and ``fixed`` (every flow :data:`FIXED_SPORT`).
SPORT_MODES = ("per-qp", "fixed")
#: The source port of the ``fixed`` mode: the lowest port Linux's derivation can give (0xC000).
FIXED_SPORT = 0xC000
_SYSCTL = "/proc/sys/net/ipv4/fib_multipath_hash_{}"


def _read_sysctl(name: str) -> int:
    with open(_SYSCTL.format(name)) as f:
        return int(f.read().split()[0])


def _write_sysctl(name: str, value: int) -> None:
    with open(_SYSCTL.format(name), "w") as f:
        f.write(f"{value}\n")


def switch_names(spec: LabSpec, roles: tuple[str, ...] = ("leaf", "spine", "superspine")) -> list[str]:
    """The lab's switches of ``roles``, in lab order."""
    return [n.name for n in spec.nodes if n.role in roles]


def read_hashing(spec: LabSpec, netns_of: Callable[[str], str]) -> dict[str, tuple[int, int, int]]:
    """``switch -> (hash policy, hash seed, hash fields)`` as each switch namespace has them
    now. Raises RailabError when a namespace is missing (lab not up) or the kernel has no hash
    seed sysctl (before Linux 6.11)."""
    out = {}
    for node in switch_names(spec):
        with in_netns(netns_of(node)):
            try:
                out[node] = (_read_sysctl("policy"), _read_sysctl("seed"), _read_sysctl("fields"))
            except FileNotFoundError:
                raise RailabError("this kernel has no net.ipv4.fib_multipath_hash_seed (Linux "
                                  "6.11+): ECMP collision runs cannot be made deterministic") from None
    return out


def set_hashing(spec: LabSpec, netns_of: Callable[[str], str], *, policy: str | int | None = None,
                seed: int | None = None) -> None:
    """Write ``fib_multipath_hash_policy`` (``"l3"``/``"l4"`` or 0-3; ``"l4"`` is policy 3 with
    :data:`L4_HASH_FIELDS`, also written) and/or ``fib_multipath_hash_seed`` (0 to 2^32-1) in
    every switch namespace of the lab; None leaves a setting as it is. UsageError for an unknown
    policy or a seed out of range."""
    pol = _policy_value(policy) if policy is not None else None
    if seed is not None and not 0 <= seed < 2 ** 32:
        raise UsageError(f"hash seed must be 0..{2 ** 32 - 1} (got {seed})")
    for node in switch_names(spec):
        with in_netns(netns_of(node)):
            if pol is not None:
                if pol == 3 and policy == "l4":
                    _write_sysctl("fields", L4_HASH_FIELDS)
                _write_sysctl("policy", pol)
            if seed is not None:
                _write_sysctl("seed", seed)


def _policy_value(policy: str | int) -> int:
    if isinstance(policy, int) and 0 <= policy <= 3:
        return policy
    if isinstance(policy, str) and policy.lower() in HASH_POLICIES:
        return HASH_POLICIES[policy.lower()]
    raise UsageError(f"hash policy must be one of {', '.join(HASH_POLICIES)} (got {policy!r})")


@contextmanager
def hashing(spec: LabSpec, netns_of: Callable[[str], str], *, policy: str | int | None = None,
            seed: int | None = DEFAULT_HASH_SEED) -> Iterator[dict[str, tuple[int, int]]]:
    """Set the ECMP hash policy and seed on every switch for the ``with`` block, then restore
    each switch's previous values (also on an exception or Ctrl-C). Yields what was there
    (:func:`read_hashing`). The routes' next hops are unchanged: only which one a flow hashes to."""
    before = read_hashing(spec, netns_of)
    try:
        set_hashing(spec, netns_of, policy=policy, seed=seed)
        yield before
    finally:
        for node, (pol, sd, fields) in before.items():
            with suppress(RailabError, OSError), in_netns(netns_of(node)):
                _write_sysctl("fields", fields)
                _write_sysctl("policy", pol)
                _write_sysctl("seed", sd)


def flow_sport(flow: Flow, mode: str = "per-qp") -> int:
    """The UDP source port ``flow`` is sent with under ``mode`` (:data:`SPORT_MODES`)."""
    if mode == "per-qp":
        return flow.sport if flow.sport is not None else roce.udp_sport(*flow_qpns(flow))
    if mode == "fixed":
        return FIXED_SPORT
    raise UsageError(f"source-port mode must be one of {', '.join(SPORT_MODES)} (got {mode!r}); "
                     "per-packet spray is the load engine's (railab traffic --sport spray)")


@dataclass
class FlowTiming:
    """When a flow ran, on this process's monotonic clock (s): ``start`` = its first packet
    could leave, ``last_rx`` = its last packet arrived (None: nothing arrived), ``last_tx`` = its
    last packet left (None: not all were sent), ``planned_s`` = how long sending should take at
    the flow's rate (0 for an unpaced flow)."""

    start: float
    last_rx: float | None
    last_tx: float | None = None
    planned_s: float = 0.0

    @property
    def seconds(self) -> float | None:
        """Completion time: last delivery minus start, s (None when nothing arrived)."""
        return None if self.last_rx is None else max(0.0, self.last_rx - self.start)

    @property
    def lag(self) -> float:
        """How much later than planned the last packet left, as a share of the planned sending
        time (0.0 on time; > 0.1: the engine did not keep the flow's rate). A sender held back
        by its own NIC's full queue (back-pressure, e.g. a PFC pause) lags too."""
        if not self.planned_s or self.last_tx is None:
            return 0.0
        return max(0.0, (self.last_tx - self.start) / self.planned_s - 1.0)


class PacedEngine(Engine):
    """:class:`Engine` sending each flow with the UDP source port of ``sport_mode``
    (:data:`SPORT_MODES`) and recording each flow's :class:`FlowTiming` (``timings``, keyed by
    ``id(FlowResult)``). Flows run concurrently through :meth:`Engine.run` (``measure=False``),
    each paced at its own ``Flow.rate`` packets/s (0: as fast as the engine goes)."""

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str] | None = None, *,
                 sport_mode: str = "per-qp", **kw) -> None:
        flow_sport(Flow(("x", 0), ("y", 0)), sport_mode)  # UsageError for an unknown mode
        super().__init__(spec, netns_of, **kw)
        self.sport_mode = sport_mode
        self.timings: dict[int, FlowTiming] = {}
        self._last_tx: dict[int, float] = {}

    def open(self) -> None:
        """:meth:`Engine.open`, then every NIC send socket non-blocking: a NIC whose queue is
        full (a PFC pause holds it) refuses the packet (EAGAIN/ENOBUFS, retried on the next turn)
        instead of stalling every other flow and the receiver behind one blocked send."""
        super().open()
        for s in self._tx.values():
            s.setblocking(False)

    def _send_some(self, st, budget: int) -> int:
        n = super()._send_some(st, budget)
        if st.sent == len(st.seq) and id(st) not in self._last_tx:
            self._last_tx[id(st)] = time.monotonic()
        return n

    def _prepare(self, flow: Flow, acks: bool):
        st = super()._prepare(flow, acks)
        if self.sport_mode != "per-qp":
            sport = flow_sport(flow, self.sport_mode)
            new: dict[int, roce.FrameTemplate] = {}
            for t in {id(t): t for t in st.seq}.values():
                raw = bytearray(t._buf)  # the template's frame: patch UDP source port (ICRC covers it)
                raw[34:36] = sport.to_bytes(2, "big")
                new[id(t)] = roce.FrameTemplate(bytes(raw))
            st.seq = [new[id(t)] for t in st.seq]
        return st

    def _forget(self, st) -> None:
        rate = st.flow.rate
        self.timings[id(st.res)] = FlowTiming(
            st.t0, st.last_rx or None, self._last_tx.pop(id(st), None),
            (len(st.seq) - 1) / rate if rate > 0 and len(st.seq) > 1 else 0.0)
        super()._forget(st)

    def timing(self, result: FlowResult) -> FlowTiming | None:
        """The :class:`FlowTiming` of one result of the last :meth:`run`."""
        return self.timings.get(id(result))


# ---- uplink load -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Uplink:
    """One leaf -> spine link, seen from the leaf: ``leaf:port>spine:port``."""

    leaf: str
    port: str
    spine: str
    spine_port: str

    @property
    def name(self) -> str:
        return f"{self.leaf}:{self.port}>{self.spine}:{self.spine_port}"


def uplinks(spec: LabSpec) -> dict[str, list[Uplink]]:
    """``leaf -> [Uplink]`` for every leaf with uplinks (``lab.json`` leaf-spine links, port
    order). Rail-only labs have none."""
    out: dict[str, list[Uplink]] = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            out.setdefault(ln.a.node, []).append(Uplink(ln.a.node, ln.a.interface, ln.b.node,
                                                          ln.b.interface))
    return out


def background_rate(eng: Engine, seconds: float = 1.0) -> dict[tuple[str, str], float]:
    """Tx bytes/s of every switch port over a quiet interval of ``seconds`` (no RoCE traffic:
    what BGP keepalives, BFD and IPv6 RA/ND cost the port), for :func:`uplink_load`."""
    if seconds <= 0:
        raise ValueError("background interval must be > 0 s")
    a, t0 = eng.port_stats(), time.monotonic()
    time.sleep(seconds)
    b, t1 = eng.port_stats(), time.monotonic()
    dt = t1 - t0
    return {k: max(0, v[3] - a.get(k, (0, 0, 0, 0))[3]) / dt for k, v in b.items()}


@dataclass
class LeafLoad:
    """Byte load of one leaf's uplinks during a run: ``bytes`` per uplink name (tx, net of the
    background), ``share`` per uplink (fraction of the leaf's total), ``fair_share`` 1/k,
    ``imbalance`` max/mean (1.0 = even, k = everything on one uplink), and ``max_share_ratio``
    = the busiest uplink's share / the fair share (>= 2: one uplink carries at least twice
    its share)."""

    leaf: str
    bytes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    @property
    def uplink_count(self) -> int:
        return len(self.bytes)

    @property
    def fair_share(self) -> float:
        return 1.0 / self.uplink_count if self.bytes else 0.0

    @property
    def share(self) -> dict[str, float]:
        t = self.total
        return {k: (v / t if t else 0.0) for k, v in self.bytes.items()}

    @property
    def imbalance(self) -> float:
        """max / mean of the uplink bytes (0.0 when nothing was sent)."""
        t = self.total
        return max(self.bytes.values()) * self.uplink_count / t if t else 0.0

    @property
    def max_share_ratio(self) -> float:
        return max(self.share.values()) / self.fair_share if self.total else 0.0

    @property
    def busiest(self) -> str | None:
        return max(self.bytes, key=self.bytes.__getitem__) if self.total else None

    def to_dict(self) -> dict:
        return {"leaf": self.leaf, "uplinks": self.uplink_count, "bytes": dict(self.bytes),
                "share": {k: round(v, 4) for k, v in self.share.items()},
                "fair_share": round(self.fair_share, 4), "imbalance": round(self.imbalance, 3),
                "max_share_ratio": round(self.max_share_ratio, 3), "busiest": self.busiest}


@dataclass
class UplinkLoad:
    """Per-leaf :class:`LeafLoad` of one run (leaves whose uplinks carried less than
    ``min_bytes`` net are left out: they sent nothing up), the background that was subtracted
    (bytes/s per uplink) and the run's length (s)."""

    leaves: dict[str, LeafLoad]
    seconds: float
    background_bps: dict[str, float] = field(default_factory=dict)

    @property
    def worst(self) -> LeafLoad | None:
        """The leaf with the highest imbalance."""
        return max(self.leaves.values(), key=lambda x: x.imbalance, default=None)

    def to_dict(self) -> dict:
        w = self.worst
        return {"seconds": round(self.seconds, 3),
                "leaves": {k: v.to_dict() for k, v in self.leaves.items()},
                "background_bytes_per_s": {k: round(v, 1) for k, v in self.background_bps.items()},
                "max_imbalance": round(w.imbalance, 3) if w else 0.0,
                "max_share_ratio": round(w.max_share_ratio, 3) if w else 0.0}


def uplink_load(spec: LabSpec, before: dict, after: dict, seconds: float,
                background: dict[tuple[str, str], float] | None = None, *,
                min_bytes: int = 64 * 1024) -> UplinkLoad:
    """Per-uplink tx bytes between two :meth:`Engine.port_stats` reads ``seconds`` apart, net
    of ``background`` (bytes/s per port, :func:`background_rate`; the net is floored at 0), per
    leaf. Leaves moving less than ``min_bytes`` in all are left out."""
    bg = background or {}
    leaves: dict[str, LeafLoad] = {}
    bg_up: dict[str, float] = {}
    zero = (0, 0, 0, 0)
    for leaf, ups in uplinks(spec).items():
        ll = LeafLoad(leaf)
        for u in ups:
            k = (u.leaf, u.port)
            moved = after.get(k, zero)[3] - before.get(k, zero)[3]
            noise = bg.get(k, 0.0) * seconds
            bg_up[u.name] = bg.get(k, 0.0)
            ll.bytes[u.name] = max(0, int(round(moved - noise)))
        if ll.total >= min_bytes:
            leaves[leaf] = ll
    return UplinkLoad(leaves, seconds, bg_up)


def collision_chance(k: int, flows: int) -> float:
    """Chance that ``flows`` uniformly hashed flows all land on one of ``k`` uplinks
    (``k * (1/k)^flows``): how surprising a fully collided run is by luck alone."""
    if k < 1 or flows < 1:
        raise ValueError("need k >= 1 uplinks and flows >= 1")
    return min(1.0, k * (1.0 / k) ** flows)


def frame_bits(flow: Flow) -> int:
    """Bits on the wire of one full-MTU packet of ``flow``: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12
    + RETH 16 (first packet; the rest have none, counted anyway) + payload + ICRC 4, plus the
    Ethernet FCS, preamble and inter-frame gap the kernel's byte counters do not count (24 B):
    what a shaper at the port rate spends per packet."""
    return (14 + 20 + 8 + 12 + 16 + min(flow.mtu, flow.size) + 4 + 24) * 8


def pace(flows: list[Flow], port_rate_mbps: float, *, headroom: float = 0.97) -> list[Flow]:
    """``flows`` with ``rate`` (packets/s) set so that the flows leaving one NIC together fill
    ``headroom`` x the port rate, split evenly (also bounded by the flows arriving at the same
    NIC: incast is not paced away, only the fan-out of the sender). Intra-server flows keep
    rate 0 (they never reach a port)."""
    if port_rate_mbps <= 0:
        raise ValueError("port rate must be > 0 Mb/s")
    out_n: dict[tuple[str, int], int] = {}
    for f in flows:
        if f.path_class != "intra-server":
            out_n[(f.src[0], f.src_nic)] = out_n.get((f.src[0], f.src_nic), 0) + 1
    res = []
    for f in flows:
        if f.path_class == "intra-server":
            res.append(f)
            continue
        bps = port_rate_mbps * 1e6 * headroom / out_n[(f.src[0], f.src_nic)]
        res.append(replace(f, rate=max(1.0, bps / frame_bits(f))))
    return res


def size_flow(flow: Flow, nbytes: int, *, message: int = 1 << 16) -> Flow:
    """``flow`` carrying ``nbytes`` (>= 1) as messages of at most ``message`` bytes: ``messages``
    = ceil(nbytes / message), ``size`` = ceil(nbytes / messages), so the flow carries ``nbytes``
    rounded up by fewer than ``messages`` bytes."""
    if nbytes < 1:
        raise ValueError("a flow carries at least 1 byte")
    m = max(1, math.ceil(nbytes / message))
    return replace(flow, messages=m, size=math.ceil(nbytes / m))


@dataclass
class EcmpRun:
    """One ECMP-under-load run: the flows' results (:class:`FlowResult`, engine order), their
    completion times (s, None when nothing arrived), the uplink load, and the settings it ran
    with (source-port mode, hash policy name, seed)."""

    results: list[FlowResult]
    seconds: list[float | None]
    load: UplinkLoad
    sport_mode: str
    policy: str | None
    seed: int | None

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.results)

    def to_dict(self) -> dict:
        done = [s for s in self.seconds if s is not None]
        return {"sport_mode": self.sport_mode, "hash_policy": self.policy, "hash_seed": self.seed,
                "flows": len(self.results), "lost": self.lost,
                "completion_s": {"max": round(max(done), 4) if done else None,
                                 "mean": round(sum(done) / len(done), 4) if done else None},
                "uplink_load": self.load.to_dict()}


def run_ecmp(spec: LabSpec, netns_of: Callable[[str], str], flows: list[Flow], *,
             sport_mode: str = "per-qp", policy: str | None = None,
             seed: int | None = DEFAULT_HASH_SEED, background_s: float = 1.0,
             timeout: float = 2.0, stop: threading.Event | None = None) -> EcmpRun:
    """Run routed ``flows`` concurrently (each paced at its ``rate``; :func:`pace`) with the
    UDP source ports of ``sport_mode``, under hash ``policy`` (``l3``/``l4``; None: the lab's
    own) and ``seed`` on every switch (restored after), and measure the uplink byte load net of
    a ``background_s`` quiet interval measured first. ``timeout``: s to wait for stragglers
    after the last packet (a queue to drain)."""
    with hashing(spec, netns_of, policy=policy, seed=seed):
        with PacedEngine(spec, netns_of, sport_mode=sport_mode, stop=stop) as eng:
            bg = background_rate(eng, background_s) if background_s > 0 else {}
            before, t0 = eng.port_stats(), time.monotonic()
            results = eng.run(flows, measure=False, acks=False, timeout=timeout)
            after, t1 = eng.port_stats(), time.monotonic()
            secs = [(eng.timing(r).seconds if eng.timing(r) else None) for r in results]
    return EcmpRun(results, secs, uplink_load(spec, before, after, t1 - t0, bg), sport_mode,
                   policy, seed)
