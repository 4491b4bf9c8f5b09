"""Fault drills: continuous RoCEv2 probe streams across a fault, its heal, and the time to green.

``run_drill(lab, kind, node_a, node_b, ...)`` (``railab drill``) does what a field engineer
rehearses, on a running lab:

1. **Preflight**: no fault injected (``railab.testbed.faults.list_faults``) and the lab green
   (every switch's kernel FIB as planned, then the ``bgp`` and ``routes`` checks).
2. **BFD as asked**: ``bfd=True/False`` different from the lab's profile (``lab.json`` ``bfd``,
   :mod:`railab.topologies.bfd`) is pushed live on every switch with vtysh (``neighbor FABRIC
   bfd`` on or off; nothing written to ``frr.conf``) and put back at the end, whatever happens.
3. **Flows picked from the forwarding actually in place**: every NIC pair on different leaves,
   with a few QPs each (so several UDP source ports), is traced hop by hop through the switches'
   kernels: at each switch a ``RTM_GETROUTE`` with the flow's full L4 keys (source, destination,
   ``iif``, UDP, source port, dport 4791, the same request as ``ip route get ... iif IF ipproto
   udp sport S dport 4791``) returns the egress port the kernel's own multipath hash
   (``fib_multipath_hash_policy=3`` over the 5-tuple, railab.traffic.ecmp.HASH_POLICIES) picks
   for that flow. The flows whose path crosses the
   faulty element are the *crossing* set (both directions over a link, spread over sources);
   flows whose path shares no link and no faulty node are the *control* set, preferring ones
   through the element's own nodes. No guessing: a flow is crossing only if the FIB says so.
4. **Probe streams** (:class:`railab.traffic.stream.StreamProcess`, ``rate`` packets/s per flow,
   so 1000 = 1 ms gap resolution) run from a baseline second before the fault to a tail second
   after green.
5. **Inject** through :func:`railab.testbed.faults.inject`, hold it ``duration`` s while the
   crossing flows' FIB paths are re-traced every <= 200 ms (``fib_reroute_s``: when every one of
   them reaches its destination NIC without the element), then **heal**
   (:func:`railab.testbed.faults.heal`).
6. **Time to green**, polled every <= :data:`POLL_S` s from the heal: a poll reads every
   switch's kernel main table (raw rtnetlink, a few ms) and the BGP summary of the element's
   nodes; green when every expected prefix (``lab.json`` ``expected_routes``) has exactly its
   planned ECMP width of live next hops over the planned ports and the element's sessions are
   Established. The ``bgp`` and ``routes`` checks (:func:`railab.checks.runner.run_checks`) then
   confirm it (their own ~1 s run time is not counted; if they disagree, polling goes on).

Result (a dict, the JSON of ``railab drill --json``): ``lost_packets`` and ``longest_gap_ms``
(over every flow), ``time_to_reroute_s`` (data plane: the end of the last outage that began
while the fault was in, on the crossing flows, after the injection; None when a flow only
recovered at the heal), ``fib_reroute_s``, ``time_to_green_s`` (from the heal), the control
set's losses, per-flow detail (clabgen's fields: tx, rx, lost, loss_pct, longest outage,
reordered, duplicate, latency; plus the path before and during the fault and the loss per
phase), the BFD state used and the host load.

Where BFD matters: on a ``link-down`` the kernel drops carrier on both veth ends at once and
FRR tears the session down immediately, BFD or not; BFD's detection (``rx_ms x multiplier``,
1.5 s on mini) only shows on a *silent* failure, e.g. ``grey-loss --percent 100`` on one end
(every packet that end sends is dropped: BFD declares the session down after its detect time,
BGP alone after its 9 s hold time, :data:`railab.topologies.bfd.BGP_HOLD_MS`).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from railab.checks import frr as F
from railab.checks.converge import wait_converged
from railab.checks.lab import LiveLab
from railab.checks.runner import run_checks
from railab.errors import RailabError, UsageError
from railab.testbed import exercise, faults
from railab.testbed.signals import signals_ignored
from railab.topologies.bfd import BGP_HOLD_MS
from railab.topologies.labspec import LabSpec
from railab.traffic.fib import FabricView, Trace, link_key
from railab.traffic.patterns import Flow, route
from railab.traffic.stream import DEFAULT_RATE, StreamProcess

#: Poll period (s) of the FIB re-trace during the fault and of the green predicate after the heal.
POLL_S = 0.2
#: Probe seconds before the injection (the baseline: a healthy lab loses nothing there).
BASELINE_S = 1.0
#: Probe seconds after green (catches loss when traffic moves back onto the healed element).
TAIL_S = 1.0
#: Seconds the preflight waits for a lab that is not green yet (still settling) before refusing.
PREFLIGHT_S = 10.0
#: QPs per NIC pair traced as candidates (each a different UDP source port, so ECMP member).
CANDIDATE_QPS = 4
#: at most this many candidate flows a drill traces (every NIC pair below it: mini, the scaled-down
#: labs; a fixed sample above it: the full fabrics)
CANDIDATE_LIMIT = 20_000
#: Kinds whose element is a link between two nodes (the rest: a node, or two server NICs).
LINK_KINDS = ("link-down", "link-flap", "carrier-loss", "cable-pull", "session-shut",
              "wrong-asn", "grey-loss", "mtu")
NODE_KINDS = ("daemon-kill", "node-off")
BFD_NOTE = ("BFD matters for a silent failure (e.g. grey-loss --percent 100 on one end): on a "
            "link-down the kernel drops carrier on both ends at once and FRR drops the session "
            "at once, with or without BFD")

# ---- the faulty element --------------------------------------------------------------------
@dataclass(frozen=True)
class Element:
    """What a fault breaks: ``links`` (link ids) and ``nodes`` (whole nodes), ``text`` for people,
    ``ends`` the ``(node, port)`` ends of a link element (a first, the end the fault acts on)."""

    text: str
    links: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    ends: tuple[tuple[str, str], ...] = ()

    def crossed_by(self, tr: Trace) -> bool:
        """True when the traced path uses one of the links or passes through one of the nodes."""
        if self.links & set(tr.links) or self.nodes & set(tr.nodes):
            return True
        # a node that is a server (node-off srv1): its NIC cables are on the path
        return any(end.split(":")[0] in self.nodes for lk in tr.links for end in lk.split("--"))

    def touches(self, tr: Trace) -> bool:
        """True when the path passes through a node of the element (or the element itself)."""
        own = {n for n, _p in self.ends} | set(self.nodes)
        return self.crossed_by(tr) or bool(own & set(tr.nodes))


def element_of(spec: LabSpec, kind: str, node_a: str, node_b: str | None, port: str | None,
               end: str | None = None) -> Element:
    """The element a fault of ``kind`` on ``node_a [node_b] [port]`` breaks (what
    :func:`railab.testbed.faults.inject` resolves, computed before injecting so the flows can be
    picked). Raises UsageError naming what to change for an unknown node or link."""
    if kind in NODE_KINDS:
        if node_b:
            raise UsageError(f"fault {kind} takes one node, not {node_a} {node_b}")
        try:
            spec.node(node_a)
        except KeyError:
            raise UsageError(f"lab {spec.name} has no node {node_a!r}") from None
        return Element(text=node_a, nodes=frozenset({node_a}))
    if kind == "cross-cable":
        ends = []
        for ref in (node_a, node_b):
            srv, _, ifn = (ref or "").partition(":")
            nic = next((n for n in spec.nics_of(srv) if n.interface == ifn), None)
            if nic is None:
                raise UsageError(f"cross-cable takes two server NICs (srv1:eth1 srv2:eth1), got {ref!r}")
            ends.append((nic.server, nic.interface, nic.leaf, nic.leaf_port))
        return Element(text=f"{node_a} x {node_b}", links=frozenset(link_key(*e) for e in ends),
                       ends=tuple((e[0], e[1]) for e in ends))
    if kind not in LINK_KINDS:
        raise UsageError(f"unknown fault kind {kind!r}: use one of {', '.join(LINK_KINDS + NODE_KINDS)}, cross-cable")
    a, pa, b, pb = faults.resolve_link(spec, node_a, node_b, port)
    if end in ("b", b):
        a, pa, b, pb = b, pb, a, pa
    return Element(text=f"{a}:{pa} <-> {b}:{pb}", links=frozenset({link_key(a, pa, b, pb)}),
                   ends=((a, pa), (b, pb)))


# ---- flow selection --------------------------------------------------------------------------
def candidate_flows(spec: LabSpec, qps: int = CANDIDATE_QPS, *, near: frozenset[str] = frozenset(),
                    limit: int = CANDIDATE_LIMIT) -> list[Flow]:
    """Ordered pairs of server NICs on different leaves (GPU i -> GPU j, no PXN, so NIC i+1 ->
    NIC j+1), ``qps`` QPs each (different UDP source ports), routed: every such pair when they
    are at most ``limit`` flows, else ``limit`` of them (a fixed sample, the same every run):
    half with an end at a node of ``near`` (a NIC of that server or on that leaf: the fault's
    element) and half from all pairs. Every pair of the 4,096-GPU fabric would be ~67 million
    flows (a drill there grew past 8 GiB before it traced them)."""
    nics = spec.nics
    every = len(nics) * len(nics) * qps
    if every <= limit:
        return [route(spec, Flow((a.server, a.gpu), (b.server, b.gpu), qp=q))
                for a in nics for b in nics if a.server != b.server and a.leaf != b.leaf
                for q in range(qps)]
    rng = random.Random(f"{spec.name}:{','.join(sorted(near))}")
    close = [n for n in nics if n.server in near or n.leaf in near]
    want = max(1, limit // qps)
    picked: dict[tuple[str, int, str, int], tuple] = {}

    def draw(sources: list, target: int) -> None:
        for _ in range(20 * want):
            if len(picked) >= target:
                return
            a, b = rng.choice(sources), rng.choice(nics)
            if rng.random() < 0.5:  # both directions through the element
                a, b = b, a
            if a.server != b.server and a.leaf != b.leaf:
                picked.setdefault((a.server, a.gpu, b.server, b.gpu), (a, b))

    if close:
        draw(close, want // 2)
    draw(nics, want)
    return [route(spec, Flow((a.server, a.gpu), (b.server, b.gpu), qp=q))
            for _key, (a, b) in sorted(picked.items()) for q in range(qps)]


def _spread(items: list[tuple[Flow, Trace]], n: int, key: Callable[[Flow, Trace], Any]) -> list[tuple[Flow, Trace]]:
    """Up to ``n`` items, one NIC pair each, round-robin over ``key`` groups (direction, ...)."""
    groups: dict[Any, list[tuple[Flow, Trace]]] = {}
    for it in items:
        groups.setdefault(key(*it), []).append(it)
    seen: set[tuple] = set()
    used_src: dict[str, int] = {}
    out: list[tuple[Flow, Trace]] = []
    order = sorted(groups, key=str)
    while len(out) < n and any(groups.values()):
        for g in order:
            if len(out) >= n:
                break
            lst = groups[g]
            # prefer a NIC pair not used yet, from the least used source server
            lst.sort(key=lambda it: (it[0].src_nic, it[0].dst_nic, it[0].src, it[0].dst) in seen
                     or used_src.get(it[0].src[0], 0))
            while lst:
                f, tr = lst.pop(0)
                pair = (f.src_nic, f.dst_nic, f.src, f.dst)
                if pair in seen:
                    continue
                seen.add(pair)
                used_src[f.src[0]] = used_src.get(f.src[0], 0) + 1
                out.append((f, tr))
                break
    return out


def pick_flows(view: FabricView, element: Element, n_cross: int, n_control: int,
               qps: int = CANDIDATE_QPS) -> tuple[list[tuple[Flow, Trace]], list[tuple[Flow, Trace]]]:
    """(crossing, control) flows with their traces, from the FIB as it is now.

    Crossing: traces that cross ``element``, spread over the direction they cross it in (which end
    the packets leave from) and over source servers. Control: traces that reach their
    destination and share nothing with the element, half of them through the element's own
    nodes when there are such (the neighbours a wrong heal would hit first).
    Raises UsageError when no flow crosses the element (say why: e.g. a link no route uses).
    """
    spec = view.spec
    near = frozenset(n for n, _p in element.ends) | element.nodes
    traced = [(f, view.trace(f)) for f in candidate_flows(spec, qps, near=near)]
    broken = [(f, t) for f, t in traced if not t.delivered]
    if broken:
        f, t = broken[0]
        raise UsageError(f"flow {f.name} does not reach its destination before the drill ({t.end}): "
                         f"the lab is not healthy; run railab check {spec.name}")

    def direction(f: Flow, t: Trace) -> str:
        for n, _i, o in t.hops:
            if (n, o) in element.ends:
                return f"{n}:{o}"
        return next((n for n in t.nodes if n in element.nodes), "")

    crossing = [(f, t) for f, t in traced if element.crossed_by(t)]
    if not crossing:
        raise UsageError(f"no flow between server NICs crosses {element.text}: pick a link or node "
                         "on the fabric path (leaf-spine links, leaves, spines, server NICs)")
    crossing = _spread(crossing, n_cross, direction)
    pool = [(f, t) for f, t in traced if not element.touches(t)]
    near = [(f, t) for f, t in traced if element.touches(t) and not element.crossed_by(t)]
    half = min(len(near), n_control // 2 if pool else n_control)
    control = _spread(near, half, lambda f, t: f.src[0]) + _spread(pool, n_control - half,
                                                                    lambda f, t: f.src[0])
    return crossing, control


# ---- BFD -------------------------------------------------------------------------------------
def set_bfd(lab: LiveLab, enabled: bool) -> None:
    """Turn BFD on or off for every fabric BGP session, live (vtysh on every switch; the
    ``fabric`` profile of ``lab.json`` ``bfd`` is (re)defined when turning it on). Nothing is
    written to ``frr.conf``: a restart brings the generated config back. RailabError naming the
    switch when vtysh refuses."""
    prof = lab.spec.bfd

    def one(node) -> None:
        cmds = ["configure terminal"]
        if enabled:
            cmds += ["bfd", f"profile {prof.profile}", f"detect-multiplier {prof.multiplier}",
                     f"receive-interval {prof.rx_ms}", f"transmit-interval {prof.tx_ms}", "exit", "exit"]
        cmds += [f"router bgp {node.asn}"]
        cmds += (["neighbor FABRIC bfd", f"neighbor FABRIC bfd profile {prof.profile}"] if enabled
                 else ["no neighbor FABRIC bfd"])
        argv = ["vtysh"] + [x for c in cmds for x in ("-c", c)]
        res = lab.exec(node.name, argv, timeout=30)
        if not res.ok or "%" in res.stdout:
            raise RailabError(f"{node.name}: could not turn BFD {'on' if enabled else 'off'}: "
                              f"{(res.stderr or res.stdout).strip()[:300]}")

    nodes = [n for n in lab.spec.nodes if n.role != "server" and n.asn]
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        list(pool.map(one, nodes))


def bfd_peers_up(lab: LiveLab) -> tuple[int, int]:
    """(BFD peers up, BFD peers) over every switch (``show bfd peers json``)."""
    up = total = 0
    for n in lab.spec.nodes:
        if n.role == "server":
            continue
        try:
            peers = lab.executor.vtysh_json(n.name, "show bfd peers json")
        except (RailabError, RuntimeError, ValueError, OSError):
            continue
        for p in peers if isinstance(peers, list) else []:
            total += 1
            up += p.get("status") == "up"
    return up, total


def settle(lab: LiveLab, view: FabricView, timeout: float = 60.0) -> None:
    """Wait until the lab is converged (:func:`railab.checks.converge.wait_converged`, the
    bring-up predicate) and every kernel FIB is as planned; RailabError after ``timeout`` s."""
    end = time.monotonic() + timeout
    wait_converged(lab.spec, lab.executor, timeout=timeout)
    while (bad := view.fib_problems()):
        if time.monotonic() > end:
            raise RailabError(f"lab {lab.spec.name}: FIB not as planned {timeout:g} s after a BFD "
                              f"change: {'; '.join(bad[:3])}")
        time.sleep(POLL_S)


# ---- green -----------------------------------------------------------------------------------
def _sessions_down(lab: LiveLab, nodes: list[str]) -> list[str]:
    """``node:port (state)`` of the planned sessions of ``nodes`` that are not Established."""
    def one(node: str) -> list[str]:
        want = [s for s in lab.spec.bgp_sessions if s.node == node]
        if not want:
            return []
        try:
            states = F.session_states(lab.executor.vtysh_json(node, F.CMD_SUMMARY, timeout=10))
        except (RailabError, RuntimeError, ValueError, OSError, TimeoutError) as exc:
            return [f"{node}: bgpd unreadable ({str(exc)[:80]})"]
        return [f"{node}:{s.interface} ({states.get(s.interface, 'absent')})" for s in want
                if not F.session_up(states.get(s.interface))]

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        return [x for lst in pool.map(one, nodes) for x in lst]


def green_now(lab: LiveLab, view: FabricView, nodes: list[str]) -> list[str]:
    """What is not green yet (empty: green), read now: the kernel FIBs vs ``expected_routes`` on
    every switch (raw rtnetlink, ~1 ms per switch) and, once those are as planned, the BGP
    sessions of ``nodes`` (the element's; vtysh, ~0.1 s). A fabric session carries routes both
    ways, so a FIB as planned already implies its sessions are up; asking bgpd only then keeps
    each poll far below :data:`POLL_S`."""
    return view.fib_problems() or _sessions_down(lab, nodes)


def checks_green(lab: LiveLab) -> list[str]:
    """The failing rows of the ``bgp`` and ``routes`` checks, as ``check: name: reason``."""
    rows = run_checks(lab.spec, lab.executor, only="bgp,routes", netns_of=lab.netns_of)
    return [f"{r.check}: {r.name}: {r.reason or r.observed}" for r in rows if r.status == "fail"]


def wait_green(lab: LiveLab, view: FabricView, nodes: list[str], t_from: float, *,
               timeout: float, poll: float = POLL_S) -> dict:
    """Poll :func:`green_now` every <= ``poll`` s until green, confirm with :func:`checks_green`
    (polling goes on if they still fail). Returns ``{"time_to_green_s"`` (from monotonic
    ``t_from`` to the start of the first green poll that the checks confirmed; None if not green
    within ``timeout``), ``"resolution_s"`` (time since the poll before it: the true instant is
    within that much earlier), ``"polls"``, ``"poll_period_ms"`` (mean and max time between the
    starts of consecutive polls; a confirmation run is not counted), ``"confirmed"`` (the checks
    passed), ``"pending"`` (what was still red last), ``"confirm_run_s"`` (how long the last
    confirming checks run took)}``."""
    start = time.monotonic()
    starts: list[float] = []
    gaps: list[float] = []
    pending: list[str] = []
    green_at = resolution = confirm_s = None
    confirmed = False
    while time.monotonic() - start < timeout:
        t = time.monotonic()
        if starts:
            gaps.append(t - starts[-1])
        starts.append(t)
        pending = green_now(lab, view, nodes)
        if not pending:
            tc = time.monotonic()
            pending = checks_green(lab)
            confirm_s = time.monotonic() - tc
            if not pending:
                green_at, confirmed = t, True
                resolution = (t - starts[-2]) if len(starts) > 1 else (t - t_from)
                break
            starts = []  # the confirmation's own run time is not a poll gap
            continue
        left = poll - (time.monotonic() - t)
        if left > 0:
            time.sleep(left)
    return {"time_to_green_s": None if green_at is None else round(green_at - t_from, 3),
            "resolution_s": None if resolution is None else round(resolution, 3),
            "polls": len(gaps) + 1,
            "poll_period_ms": {"mean": round(1000 * sum(gaps) / len(gaps), 1) if gaps else None,
                               "max": round(1000 * max(gaps), 1) if gaps else None},
            "confirmed": confirmed, "pending": pending[:20],
            "confirm_run_s": None if confirm_s is None else round(confirm_s, 3)}


# ---- the drill -------------------------------------------------------------------------------
def default_duration(bfd_on: bool, detect_ms: int) -> float:
    """Seconds a fault is held by default: 1.5 x the detection time (BFD ``detect_ms`` when on,
    else the BGP hold time: measured on mini, the far end of a silent one-way drop needs about
    twice the detection time, since its own session only goes once the other end's is gone)
    plus 3 s to settle, at least 4 s: 5.25 s with mini's BFD (1.5 s), 16.5 s without."""
    return max(4.0, 1.5 * (detect_ms if bfd_on else BGP_HOLD_MS) / 1000.0 + 3.0)


def _phase_loss(flow: dict, t_inject: float, t_heal: float) -> dict:
    """Per-flow loss by phase and the data-plane reroute time (see the module docstring)."""
    outs = flow.get("outages", [])
    before = [o for o in outs if o["start"] < t_inject]
    during = [o for o in outs if t_inject <= o["start"] < t_heal]
    after = [o for o in outs if o["start"] >= t_heal]
    reroute = None if not during else (
        round(max(o["end"] for o in during) - t_inject, 3)
        if all(o["end"] < t_heal for o in during) else None)
    return {
        "lost_before_fault": sum(o["packets"] for o in before),
        "lost_during_fault": sum(o["packets"] for o in during),
        "lost_after_heal": sum(o["packets"] for o in after),
        "reroute_s": 0.0 if not during else reroute,
        "recovered_only_at_heal": bool(during) and reroute is None,
        "outages": [{"at_s": round(o["start"] - t_inject, 3), "ms": o["ms"], "packets": o["packets"],
                     "recovered": o["recovered"]} for o in outs],
    }


def run_drill(lab: LiveLab, kind: str, node_a: str, node_b: str | None = None, *,
              port: str | None = None, params: dict | None = None, bfd: bool | None = None,
              rate: float = DEFAULT_RATE, duration: float | None = None, flows: int = 4,
              control: int = 4, green_timeout: float = 60.0,
              on_event: Callable[[str], None] | None = None) -> dict:
    """Run one drill (module docstring) on the running ``lab`` and return its result dict.

    ``kind``/``node_a``/``node_b``/``port``/``params``: as :func:`railab.testbed.faults.inject`
    takes them (``params``: ``percent``, ``roce_only``, ``mtu``, ``daemon``, ``count``, ``end``,
    ...). ``bfd``: None = as the lab is, True/False = pushed live for the drill. ``rate``: probe
    packets/s per flow. ``duration``: seconds the fault is held (default
    :func:`default_duration`). ``flows``/``control``: crossing and control flows wanted.
    ``on_event(text)``: progress lines. Raises UsageError (nothing injected, nothing changed)
    for bad input, a lab that runs a training exercise (:func:`railab.testbed.exercise.guard`)
    or a lab that is not healthy before the drill; RailabError when a step fails
    (the fault is healed and BFD put back first).
    """
    exercise.guard(lab.name, "drill")  # no drill while an exercise runs: it would inject and heal there
    say = on_event or (lambda _t: None)
    params = dict(params or {})
    if not 0 < rate <= 20000:
        raise UsageError(f"--rate must be > 0 and <= 20000 probe packets/s per flow (got {rate:g})")
    if flows < 1 or control < 0:
        raise UsageError(f"--flows must be >= 1 and --control >= 0 (got {flows}, {control})")
    if duration is not None and not 0 < duration <= 600:
        raise UsageError(f"--duration must be > 0 and <= 600 s (got {duration:g})")
    labdir = Path(lab.dir)
    spec = lab.spec
    held = faults.list_faults(labdir)
    if held:
        raise UsageError(f"lab {spec.name} already has fault(s) {', '.join(f.id for f in held)}: "
                         f"heal them first (railab fault {spec.name} heal --all)")
    element = element_of(spec, kind, node_a, node_b, port, params.get("end"))
    lab_bfd = spec.bfd.enabled
    want_bfd = lab_bfd if bfd is None else bfd
    load0 = os.getloadavg()
    result: dict[str, Any] = {}
    pushed = False
    rec = None
    with FabricView(spec, lab.netns_of) as view:
        bad = view.fib_problems()
        settle_end = time.monotonic() + PREFLIGHT_S
        while bad and time.monotonic() < settle_end:  # a lab still settling (e.g. after a drill)
            time.sleep(POLL_S)
            bad = view.fib_problems()
        if bad:
            raise UsageError(f"lab {spec.name} is not green before the drill ({'; '.join(bad[:3])}): "
                             f"run railab check {spec.name}")
        crossing, ctrl = pick_flows(view, element, flows, control)
        say(f"{len(crossing)} flows cross {element.text}, {len(ctrl)} control flows; "
            f"probes at {rate:g} packets/s per flow ({1000 / rate:g} ms resolution)")
        try:
            if want_bfd != lab_bfd:
                say(f"pushing BFD {'on' if want_bfd else 'off'} to every switch (lab.json: "
                    f"{'on' if lab_bfd else 'off'})")
                pushed = True
                set_bfd(lab, want_bfd)
                # FRR resets a session whose BFD registration changes (Cease/BFD Down): wait
                # until the lab is converged and its FIBs are as planned again
                settle(lab, view)
            if want_bfd:
                deadline = time.monotonic() + 15
                while True:
                    up, total = bfd_peers_up(lab)
                    if total and up == total:
                        break
                    if time.monotonic() > deadline:
                        raise RailabError(f"BFD peers not up ({up}/{total}) 15 s after turning BFD on")
                    time.sleep(0.3)
            pre = green_now(lab, view, sorted({n for n, _p in element.ends} | set(element.nodes)))
            if pre:
                raise UsageError(f"lab {spec.name} is not green before the drill ({'; '.join(pre[:3])})")
            hold = duration if duration is not None else default_duration(want_bfd, spec.bfd.detect_ms)
            all_flows = [f for f, _t in crossing] + [f for f, _t in ctrl]
            max_s = BASELINE_S + hold + green_timeout + TAIL_S + 30
            with StreamProcess(spec, lab.netns_of, all_flows, rate=rate, max_s=max_s) as streams:
                t0 = streams.start()
                time.sleep(BASELINE_S)
                say(f"injecting {kind} on {element.text}")
                t_inject = time.monotonic()
                rec = faults.inject(labdir, kind, node_a, node_b, port=port, **params)
                t_injected = time.monotonic()
                fib_reroute = None
                pending = {f.name: f for f, _t in crossing}
                during_paths: dict[str, Trace] = {}
                while time.monotonic() - t_inject < hold:
                    t = time.monotonic()
                    for name, f in list(pending.items()):
                        tr = view.trace(f)
                        if tr.delivered and not element.crossed_by(tr):
                            during_paths[name] = tr
                            del pending[name]
                    if not pending and fib_reroute is None:
                        fib_reroute = round(time.monotonic() - t_inject, 3)
                    time.sleep(max(0.0, POLL_S - (time.monotonic() - t)))
                for f, _t in crossing:
                    if f.name not in during_paths:
                        during_paths[f.name] = view.trace(f)
                say(f"healing {rec.id} ({rec.note})")
                t_heal = time.monotonic()
                faults.heal(labdir, rec.id)
                rec_healed = rec
                rec = None
                t_healed = time.monotonic()
                nodes = sorted({n for n, _p in element.ends} | set(element.nodes))
                nodes = [n for n in nodes if spec.node(n).role != "server"]
                green = wait_green(lab, view, nodes, t_heal, timeout=green_timeout)
                say(f"green {green['time_to_green_s']} s after the heal" if green["confirmed"]
                    else f"not green {green_timeout:g} s after the heal: {'; '.join(green['pending'][:3])}")
                time.sleep(TAIL_S)
                per_flow = streams.stop()
        finally:
            with signals_ignored():  # a second Ctrl-C must not cut the clean-up short
                if rec is not None:
                    say(f"healing {rec.id} after a failure")
                    faults.heal(labdir, rec.id)
                if pushed:
                    say(f"putting BFD back {'on' if lab_bfd else 'off'} (as lab.json)")
                    set_bfd(lab, lab_bfd)
                    settle(lab, view)
    trace_of = {f.name: t for f, t in crossing + ctrl}
    roles = {f.name: "crossing" for f, _t in crossing} | {f.name: "control" for f, _t in ctrl}
    out_flows = []
    for d in per_flow:
        name = d["name"]
        ph = _phase_loss(d, t_inject, t_heal)
        d = {k: v for k, v in d.items() if k != "outages"}
        d.update(ph, role=roles[name], path=trace_of[name].text())
        if roles[name] == "crossing":
            d["path_during_fault"] = during_paths[name].text() if during_paths[name].delivered else (
                during_paths[name].text() + [during_paths[name].end])
        out_flows.append(d)
    cross_res = [d for d in out_flows if d["role"] == "crossing"]
    ctrl_res = [d for d in out_flows if d["role"] == "control"]
    reroutes = [d["reroute_s"] for d in cross_res]
    result.update({
        "lab": spec.name,
        "fault": dict(rec_healed.model_dump(mode="json"), element=element.text),
        "bfd": {"enabled": want_bfd, "lab_json": lab_bfd, "pushed_live": pushed,
                "detect_ms": spec.bfd.detect_ms if want_bfd else None, "bgp_hold_ms": BGP_HOLD_MS,
                "note": BFD_NOTE},
        "rate_pps": rate, "resolution_ms": round(1000 / rate, 3), "duration_s": hold,
        "lost_packets": sum(d["lost"] for d in out_flows),
        "longest_gap_ms": max((d["longest_gap_ms"] for d in out_flows), default=0.0),
        "max_send_gap_ms": max((d["max_send_gap_ms"] for d in out_flows), default=0.0),
        "time_to_reroute_s": None if any(r is None for r in reroutes) else max(reroutes, default=0.0),
        "fib_reroute_s": fib_reroute,
        "time_to_green_s": green["time_to_green_s"],
        "green": green,
        "crossing_lost_packets": sum(d["lost"] for d in cross_res),
        "control_lost_packets": sum(d["lost"] for d in ctrl_res),
        "timeline_s": {"streams_start": 0.0, "inject": round(t_inject - t0, 3),
                       "inject_returned": round(t_injected - t0, 3), "heal": round(t_heal - t0, 3),
                       "heal_returned": round(t_healed - t0, 3)},
        "flows": out_flows,
        "load": {"before": [round(x, 2) for x in load0], "after": [round(x, 2) for x in os.getloadavg()],
                 "cpus": os.cpu_count()},
    })
    return result


__all__ = ["Element", "FabricView", "Trace", "candidate_flows", "checks_green", "default_duration",
           "element_of", "green_now", "pick_flows", "run_drill", "set_bfd", "wait_green"]
