"""``railab lb compare``: one workload run once per load-balancing mode, side by side.

Workloads (issue 30):

* ``elephants``: one long flow per server NIC of one leaf (as many flows as that leaf has
  uplinks), each with the fixed UDP source port (``sport_mode="fixed"``: the low-entropy case)
  to a server NIC of the same rail on a leaf of another group, sent as RDMA WRITE messages of
  :data:`ELEPHANT_MESSAGE_BYTES` with an idle gap of :data:`GAP_FLOWLETS` flowlet gaps after each
  (as a collective's chunks come), on the lab's load engine (railab.traffic.load, DCQCN as
  given). The imbalance is over that leaf's uplinks (their TX byte counters, measured).
* ``incast``: the elephants' senders (one NIC per server of one leaf) all to one NIC of the
  same rail in another group, per-QP source ports, back to back: an N:1 incast whose last hop is
  the bottleneck whatever the mode; the modes differ in how the senders' leaf and the spines
  spread it (imbalance over the senders' leaf's uplinks).
* ``all-to-all`` / ``all-reduce``: the collective of railab.traffic.collective over every GPU of
  the lab (nccl-tests' sizes and bus bandwidth, lab and fabric), per-QP source ports; the
  imbalance is the worst leaf's (max/mean of its uplinks' bytes, measured).

Every mode runs the same flows (same byte counts, same seed), with per-flow receive steering on
every port (railab.testbed.lb.flow_steering: without it the host's per-CPU backlogs reorder
~0.1 % of packets even on paths that cannot reorder). On a lab with ``lab.capacity`` the
comparison runs inside one switch-agent session (railab.testbed.capacity.pfc_session: ECN marks
from the real queues, PFC per the lab), so drops, pauses and CE marks are the dataplane's. The
reorder figures are the receivers' PSN accounting (measured). The mode is switched with
railab.testbed.lb and put back to ``ecmp`` at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed import capacity, lb
from railab.testbed import state as st
from railab.testbed.dilation import dilated
from railab.topologies.labspec import LabSpec
from railab.traffic import collective as coll
from railab.traffic.load import LoadFlow, run_load
from railab.traffic.patterns import Flow, route

WORKLOADS = ("elephants", "incast", "all-to-all", "all-reduce")
DEFAULT_MODES = ("ecmp", "spray-rr", "spray-random", "flowlet", "pbr", "wcmp")
#: elephants: bytes per RDMA WRITE message (a collective chunk)
ELEPHANT_MESSAGE_BYTES = 1 << 20
#: elephants: the idle gap after each message, in flowlet gaps (longer than one, so a flowlet
#: switch may move the next message: the issue's "idle gaps longer than the flowlet gap")
GAP_FLOWLETS = 2.0
#: default bytes: per elephant flow, and per rank for the collectives
DEFAULT_BYTES = {"elephants": 4 << 20, "incast": 1 << 20, "all-to-all": 4 << 20,
                 "all-reduce": 4 << 20}


def elephants(spec: LabSpec, leaf: str | None = None,
              avoid: set[str] | frozenset[str] = frozenset()) -> tuple[str, list[Flow]]:
    """``(leaf, flows)`` of the elephants workload: the first leaf with uplinks not in
    ``avoid`` (or ``leaf``),
    one flow per server NIC on it, up to its uplink count, each to a NIC of the same rail in
    another group (distinct destinations, round robin). UsageError when the lab has no such
    pair (a single group, or a rail-only lab)."""
    plans = {p.leaf: p for p in lb.plan(spec, "ecmp")}
    if not plans:
        raise UsageError("the elephants workload needs leaf uplinks; this lab has none (rail-only)")
    ok = [x for x in sorted(plans) if x not in avoid]
    if leaf is None and not ok:
        raise UsageError("every leaf with uplinks is down or has no uplink up: heal the fabric first")
    leaf = leaf or ok[0]
    if leaf not in plans:
        raise UsageError(f"{leaf!r} is not a leaf with uplinks: use one of {', '.join(sorted(plans))}")
    srcs = sorted((n for n in spec.nics if n.leaf == leaf), key=lambda n: n.leaf_port)
    srcs = srcs[:len(plans[leaf].uplinks)]
    flows = []
    for i, s in enumerate(srcs):
        dsts = sorted((n for n in spec.nics if n.rail == s.rail and n.group != s.group),
                      key=lambda n: (n.server, n.nic))
        if not dsts:
            raise UsageError(f"no NIC of rail {s.rail} in another group: elephants needs 2 groups")
        d = dsts[i % len(dsts)]
        flows.append(route(spec, Flow((s.server, s.gpu), (d.server, d.gpu))))
    return leaf, flows


@dataclass
class ModeResult:
    """One mode's row (all measured): ``uplink_bytes`` port -> bytes (elephants: the workload
    leaf's uplinks; collectives: the worst leaf's); ``uplink_imbalance`` max/mean of them;
    ``reordered_pct`` packets the receivers saw out of PSN order, % of received;
    ``max_psn_distance`` the largest reorder depth (packets); ``drops`` packets sent and not
    received; ``pauses`` PFC PAUSE events (load-engine workloads on a lab with lab.capacity;
    None otherwise: the collectives' engine does not read them); ``ce_marks`` (load-engine
    workloads: CE-marked packets received; None without lab.capacity and for the collectives,
    whose engine has no ECN);
    ``fct_p50_s``/``fct_p99_s`` (lab s) and ``straggler`` (slowest flow's completion over the
    median); collectives add ``time_s``, ``busbw_gbps`` (lab Gb/s), ``fabric_busbw_gbps``,
    ``fabric_time_us`` and ``engine_kept_rate`` (False: the host's CPU, not the fabric, set the
    collective's time: railab.traffic.collective.CollectiveResult.keeps_rate). With a NIC
    transport (``--nic gbn|ooo``), ``transport`` (the run's totals) gives ``goodput_mbps``,
    ``retx_packets``, ``retx_bytes``, ``naks`` and ``timeouts`` (None without one), and the FCTs
    run to the responder's last packet."""

    mode: str
    uplink_bytes: dict[str, int]
    uplink_imbalance: float | None
    reordered_pct: float
    max_psn_distance: int
    drops: int
    pauses: int | None
    ce_marks: int | None
    fct_p50_s: float | None
    fct_p99_s: float | None
    straggler: float | None
    time_s: float | None = None
    busbw_gbps: float | None = None
    fabric_busbw_gbps: float | None = None
    fabric_time_us: float | None = None
    engine_kept_rate: bool | None = None
    transport: dict | None = None

    def to_json(self) -> dict:
        vals = list(self.uplink_bytes.values())
        return {"mode": self.mode, "uplink_bytes": self.uplink_bytes,
                "uplink_imbalance": self.uplink_imbalance,
                "uplink_max_bytes": max(vals, default=0),
                "uplink_mean_bytes": round(sum(vals) / len(vals), 1) if vals else 0.0,
                "reordered_pct": self.reordered_pct, "max_psn_distance": self.max_psn_distance,
                "drops": self.drops, "pauses": self.pauses, "ce_marks": self.ce_marks,
                "fct_p50_s": self.fct_p50_s, "fct_p99_s": self.fct_p99_s,
                "straggler": self.straggler, "time_s": self.time_s,
                "busbw_gbps": self.busbw_gbps, "fabric_busbw_gbps": self.fabric_busbw_gbps,
                "fabric_time_us": self.fabric_time_us, "engine_kept_rate": self.engine_kept_rate,
                "goodput_mbps": (self.transport or {}).get("goodput_mbps"),
                "retx_packets": (self.transport or {}).get("retx_packets"),
                "retx_bytes": (self.transport or {}).get("retx_bytes"),
                "naks": (self.transport or {}).get("naks"),
                "timeouts": (self.transport or {}).get("timeouts")}


def _pct(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    v = sorted(vals)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def _imbalance(per: dict[str, int]) -> float | None:
    """max/mean of the uplinks' bytes; None when nothing went up (no figure to give)."""
    if not per:
        return None
    mean = sum(per.values()) / len(per)
    return round(max(per.values()) / mean, 3) if mean else None


@contextmanager
def _dataplane(spec: LabSpec, netns_of: Callable[[str], str]) -> Iterator[Callable | None]:
    """The switch agent's session and a capacity sampler (a PortSampler) for the whole
    comparison; ``None`` and nothing run on a lab without lab.capacity."""
    if not spec.qos.capacity.enabled:
        yield None
        return
    with ExitStack() as stack:
        stack.enter_context(capacity.pfc_session(spec, netns_of))
        smp = capacity.CapacitySampler(spec, netns_of, run_dir=lb_run_dir(spec))
        stack.callback(smp.close)

        def sample() -> dict[str, dict[str, float]]:
            return {f"{n}:{p}": {"backlog_bytes": c.backlog_bytes, "dropped": c.dropped,
                                 "pause_events": c.pause_events, "paused_s": c.paused_s}
                    for (n, p), c in smp.sample().items()}
        yield sample


def lb_run_dir(spec: LabSpec) -> Path:
    """The lab's run directory (``/run/railab/<lab>``), where the lb agent lives."""
    return st.lab_dir(spec.name)


def _elephants_row(spec, netns_of, mode, flows, ns, ports, flow_bytes, cc, sampler, gap_s,
                   sport_mode, stop=None, nic="none"):
    before = lb.tx_bytes(ns, ports)
    r = run_load(spec, netns_of, [LoadFlow(f, bytes=flow_bytes, gap_s=gap_s) for f in flows],
                 cc=cc, sport_mode=sport_mode, message_bytes=ELEPHANT_MESSAGE_BYTES,
                 port_sampler=sampler, stop=stop.is_set if stop is not None else None, nic=nic)
    after = lb.tx_bytes(ns, ports)
    per = {p: after[p] - before[p] for p in ports}
    rx = sum(f["rx_packets"] for f in r.flows)
    fcts = [f["fct_s"] for f in r.flows if f.get("fct_s") is not None]
    p50 = _pct(fcts, 0.5)
    return ModeResult(
        mode, per, _imbalance(per),
        round(100.0 * sum(f["ooo"] for f in r.flows) / rx, 3) if rx else 0.0,
        max((f.get("max_psn_distance", 0) for f in r.flows), default=0),
        r.dropped if r.dropped is not None else r.lost, r.pause_events,
        sum(f["ce_marked"] for f in r.flows) if spec.qos.capacity.enabled else None,
        p50, _pct(fcts, 0.99),
        round(max(fcts) / p50, 3) if fcts and p50 else None, transport=r.transport)


def _collective_row(spec, netns_of, mode, sched, stop, nic="none"):
    c = coll.run_collective(spec, netns_of, sched, stop=stop, nic=nic, port_rate="lab")
    w = c.uplink_load.worst if c.uplink_load else None
    per = dict(w.bytes) if w else {}
    fcts = c.flow_times_s
    p50 = _pct(fcts, 0.5)
    fab = c.fabric or {}
    return ModeResult(
        mode, per, _imbalance(per),
        round(100.0 * c.out_of_order / c.received, 3) if c.received else 0.0,
        c.max_psn_distance, c.lost, None, c.ce_marked, p50, _pct(fcts, 0.99),
        round(max(fcts) / p50, 3) if fcts and p50 else None,
        None if c.time_s is None else round(c.time_s, 6),
        None if c.busbw_gbps is None else round(c.busbw_gbps, 6),
        fab.get("busbw_gbps"), fab.get("time_us"), c.keeps_rate, transport=c.transport)


def _unusable_leaves(spec: LabSpec, netns_of: Callable[[str], str]) -> set[str]:
    """Leaves with no uplink up or with every server port down (a powered-off leaf): the
    workload leaf must be another."""
    bad = set()
    for p in lb.plan(spec, "ecmp"):
        try:
            up = lb.up_ports(netns_of(p.leaf))
        except OSError:
            bad.add(p.leaf)
            continue
        if not up & set(p.uplinks) or not up & set(p.servers):
            bad.add(p.leaf)
    return bad


def _warm_up(spec, netns_of, flows, sched, stop) -> None:
    """One packet per flow before the first mode, results dropped: every hop resolves its
    neighbours (ARP) now. A packet that arrives while its neighbour is being resolved waits in
    the neighbour's queue, and the ones after it can overtake the queue's flush: the first run
    on a fresh lab would count that host reordering against its mode."""
    if sched is None:
        run_load(spec, netns_of, [LoadFlow(f, bytes=1) for f in flows], cc="none",
                 sport_mode="fixed")
    else:
        coll.run_collective(spec, netns_of, coll.schedule(spec, sched.op, coll.MIN_BYTES
                                                          * sched.ranks), stop=stop,
                            background_s=0, port_rate="lab")


def check_modes(spec: LabSpec, modes: tuple[str, ...] | None) -> tuple[str, ...]:
    """The modes to compare: ``modes`` checked (UsageError for an empty list, a repeated or
    unknown mode, or one this lab cannot carry), or by default every mode of
    :data:`DEFAULT_MODES` the lab can carry (no flowlet/wcmp without lab.capacity)."""
    if modes is None:
        out = []
        for m in DEFAULT_MODES:
            try:
                lb.plan(spec, m)
            except UsageError:
                continue
            out.append(m)
        return tuple(out)
    if not modes or any(not m for m in modes):
        raise UsageError("--modes: give comma-separated mode names, e.g. ecmp,spray-rr "
                         f"(modes: {', '.join(lb.MODES)})")
    dup = sorted({m for m in modes if modes.count(m) > 1})
    if dup:
        raise UsageError(f"--modes names {', '.join(dup)} more than once")
    for m in modes:
        lb.plan(spec, m)  # a bad mode, or one this lab cannot carry, before anything runs
    return tuple(modes)


#: largest --bytes: per flow or per rank (a 200 Mb/s lab port needs 43 s for 1 GiB)
MAX_BYTES = 1 << 30


def check_bytes(workload: str, flow_bytes: int | None) -> int:
    """The bytes per flow (elephants, incast) or per rank (collectives): ``flow_bytes`` or
    :data:`DEFAULT_BYTES`; UsageError below one RoCE MTU (4096 B) for the load-engine
    workloads or below railab.traffic.collective.MIN_BYTES for the collectives."""
    if flow_bytes is None:
        return DEFAULT_BYTES[workload]
    least = coll.MIN_BYTES if workload in coll.OPS else 4096
    if flow_bytes > MAX_BYTES:
        raise UsageError(f"--bytes {flow_bytes}: at most {MAX_BYTES} (1G) per "
                         + ("rank" if workload in coll.OPS else "flow"))
    if flow_bytes < least:
        raise UsageError(f"--bytes {flow_bytes}: the {workload} workload needs at least {least} "
                         "bytes per " + ("rank" if workload in coll.OPS else "flow"))
    return flow_bytes


def compare(spec: LabSpec, netns_of: Callable[[str], str], *, workload: str = "elephants",
            modes: tuple[str, ...] | None = None, flow_bytes: int | None = None,
            cc: str = "dcqcn", stop: threading.Event | None = None,
            on_mode: Callable[[str], None] | None = None, spines: bool = False,
            restore: tuple[str, bool] = ("ecmp", False), nic: str = "none",
            port_rate: float | str | None = "auto") -> dict:
    """Run ``workload`` once per mode (same flows, same bytes) and return
    ``{"workload", "leaf", "flows", "flow_bytes", "cc", "time_scale", "gap_s", "spines",
    "modes": [ModeResult.to_json() or {"mode", "error"}]}``. ``modes``: :func:`check_modes`;
    ``flow_bytes``: :func:`check_bytes`; ``spines``: the spray modes spray at the spines too.
    UsageError for an unknown workload, a bad mode list or byte count (checked before anything
    runs). A mode that cannot be applied on the lab as it is (a RailabError, e.g. a fault) gets
    a row with its ``error`` and the others still run. The lab is left on ``restore`` (mode,
    spines), the mode it had. ``on_mode(mode)`` is called as each mode starts (progress).
    ``nic``: the NICs' RC transport for every run (:data:`railab.traffic.load.NIC_MODES`; on a
    lab with lab.capacity for the collectives). ``port_rate``: a collective workload on a lab
    with lab.capacity runs every mode with the ports slowed to this rate
    (:func:`railab.traffic.collective.run_rate_mbps`; ``"auto"``: the fastest at which the host
    keeps every NIC at line rate, railab.testbed.dilation), the lab's rate back after; the
    result's ``port_rate_mbps`` and ``time_scale`` are the runs', ``lab_port_rate_mbps`` the
    lab's."""
    if workload not in WORKLOADS:
        raise UsageError(f"unknown workload {workload!r}: use one of {', '.join(WORKLOADS)}")
    modes = check_modes(spec, modes)
    if spines and not any(m.startswith("spray") for m in modes):
        raise UsageError("--spines changes only the spray modes: add spray-rr or spray-random")
    if spines:
        lb.plan(spec, "spray-rr", spines=True)  # a lab with one link per pair: usage error
    nbytes = check_bytes(workload, flow_bytes)
    if workload in ("elephants", "incast") and port_rate not in (None, "auto", "lab"):
        raise UsageError(f"--port-rate {port_rate}: only the collective workloads (all-to-all, "
                         "all-reduce) slow the ports for their runs")
    run_dir = lb_run_dir(spec)
    gap_s = GAP_FLOWLETS * lb.flowlet_gap_s(spec)
    leaf, flows, sched = None, [], None
    if workload in ("elephants", "incast"):
        leaf, flows = elephants(spec, avoid=_unusable_leaves(spec, netns_of))
        if workload == "incast":
            dst = flows[0].dst
            flows = [route(spec, Flow(f.src, dst)) for f in flows]
        ports: list[str] = next(p.uplinks for p in lb.plan(spec, "ecmp") if p.leaf == leaf)
        ns = netns_of(leaf)
        up = lb.up_ports(ns)
        down = sorted(f"{leaf}:{p}" for p in ports if p not in up)
    else:
        sched = coll.schedule(spec, workload, nbytes)
        down, ports, ns = [], [], ""
    rows: list[dict] = []
    own = spec.qos.capacity
    # checked here, before the lab is locked or anything runs (UsageError names the bounds)
    rate = (coll.run_rate_mbps(spec, sched, port_rate) if sched is not None and own.enabled
            else None)
    with lb.lab_lock(run_dir, f"railab lb compare --workload {workload}"), \
            (dilated(spec, netns_of, rate) if rate else nullcontext(spec)) as run_spec:
        left = _run_modes(run_spec, netns_of, workload, modes, nbytes, cc, stop, on_mode, spines,
                          restore, run_dir, gap_s, flows, sched, rows, ports, ns, nic,
                          lab_spec=spec)
    cap = run_spec.qos.capacity
    return {"workload": workload, "leaf": leaf,
            "flows": len(flows) if sched is None else len(sched.flows),
            "flow_bytes": nbytes, "cc": cc if sched is None else None, "nic": nic,
            "gap_s": gap_s if workload == "elephants" else None, "spines": spines,
            "left_on": {"mode": left[0], "spines": left[1]},
            "down_uplinks": down,
            "time_scale": cap.time_scale if cap.enabled else None,
            "port_rate_mbps": cap.port_rate_mbps if cap.enabled else None,
            "lab_port_rate_mbps": own.port_rate_mbps if own.enabled else None,
            "measured": "uplink TX byte counters, receivers' PSNs, the dataplane's drop/PAUSE "
                        "counters; lab seconds (fabric = lab / time_scale)",
            "modes": rows}


def _run_modes(spec, netns_of, workload, modes, nbytes, cc, stop, on_mode, spines, restore,
               run_dir, gap_s, flows, sched, rows, ports, ns, nic="none",
               lab_spec: LabSpec | None = None) -> tuple[str, bool]:
    """Each mode applied and measured into ``rows``; returns the (mode, spines) the lab was
    left on (``restore``, or ecmp when that could not be applied). ``spec`` is the runs' (a
    dilated copy, railab.testbed.dilation), ``lab_spec`` the lab's own (default ``spec``): the
    mode left on is applied with the lab's rates (its agent's cycle and flowlet gap)."""
    lab_spec = lab_spec or spec
    try:
        with lb.flow_steering(spec, netns_of), _dataplane(spec, netns_of) as sampler:
            _warm_up(spec, netns_of, flows, sched, stop)
            for mode in modes:
                if stop is not None and stop.is_set():
                    break
                if on_mode is not None:
                    on_mode(mode)
                try:
                    lb.apply(spec, netns_of, mode, run_dir,
                             spines=spines and mode.startswith("spray"))
                except RailabError as exc:
                    rows.append({"mode": mode, "error": str(exc)})
                    continue
                if workload in ("elephants", "incast"):
                    row = _elephants_row(spec, netns_of, mode, flows, ns, ports, nbytes, cc,
                                         sampler, gap_s if workload == "elephants" else 0.0,
                                         "fixed" if workload == "elephants" else "per-qp", stop,
                                         nic=nic)
                else:
                    row = _collective_row(spec, netns_of, mode, sched, stop, nic=nic)
                rows.append(row.to_json())
    finally:
        left = restore
        try:
            lb.apply(lab_spec, netns_of, restore[0], run_dir, spines=restore[1])
        except RailabError:
            left = ("ecmp", False)
            lb.apply(lab_spec, netns_of, "ecmp", run_dir)
    return left
