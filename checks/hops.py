"""Hop-count check: one real RoCEv2 flow per path class, observed hops vs ``lab.json`` expected_hops.

Expected (``lab.json`` ``expected_hops``, docs/architecture.md "Expected hops", seed guide
"Intra-rail / Inter-rail (with PXN) Communication"): intra-server 0, intra-rail 1, inter-rail
3 without PXN on Rail-optimized (unreachable on Rail-only across leaves), inter-rail with PXN 1,
cross-group 3. Observed with the traffic engine (:class:`traffic.engine.Engine`, ``measure=True``):
hops by received TTL (64 - TTL; every switch hop routes) and by switch port counters, plus the
path walked.

The counters count only the probe flow's packets: a port's share of the flow is
``min(packets moved, bytes moved // the flow's smallest frame)``
(:meth:`traffic.engine.Engine.flow_deltas`), read with one RTM_GETSTATS dump per switch just
before and after the flow. The lab's own traffic (BFD, BGP keepalives, IPv6 RA/ND: 66-120 byte
frames, every port, all the time) moved every counter of the full-size 1024-GPU fabric by more
than half a flow during the old multi-second reads, so every row failed with ``counter hops 24
!= 3`` while TTL and delivery were right; 16 such frames weigh less than one of the flow's
1 KiB frames, so background no longer reaches the threshold. A miswire still fails: the
receiver checks the ingress NIC and leaf MAC, the sender side the leaf port whose counters took
the flow (tests: crossed cables in test_checks_live.py and test_traffic_live.py).
"""

from __future__ import annotations

from collections.abc import Callable

from railab.checks.base import (
    Cause,
    CheckResult,
    Observer,
    failed,
    passed,
    register_check,
    skipped,
)
from railab.errors import RailabError
from railab.traffic.engine import Engine
from railab.traffic.patterns import Flow, route

CHECK = "hops"

def representative_flows(spec) -> list:
    """One routed :class:`traffic.patterns.Flow` per path class this lab has (64 packets each).

    64 packets of 1 KiB keep the counter attribution (a switch is on the path when a port moved
    at least half the flow's packets, bounded by bytes) far above the lab's own background.

    Pairs: srvA gpu0 -> srvA gpu1 (intra-server), srvA gpu0 -> srvB gpu0 (intra-rail),
    srvA gpu0 -> srvB gpu1 (inter-rail, without and with PXN), srvA gpu0 -> first server of
    group 2 gpu0 (cross-group), on three-tier labs srvA gpu0 -> first server of pod 2 gpu0
    (cross-pod); srvA/srvB are the first two servers of group 1.
    """
    groups: dict[int, list[str]] = {}
    for n in spec.by_role("server"):
        groups.setdefault(n.group or 1, []).append(n.name)
    g = sorted(groups)
    if not g:
        return []
    first = groups[g[0]]
    a = first[0]
    b = first[1] if len(first) > 1 else None
    other_gpu = 1 if spec.gpus_per_server > 1 else None
    pairs: list[tuple[tuple[str, int], tuple[str, int], bool]] = []
    if other_gpu is not None:
        pairs.append(((a, 0), (a, other_gpu), False))
    if b:
        pairs.append(((a, 0), (b, 0), False))
        if other_gpu is not None:
            pairs.append(((a, 0), (b, other_gpu), False))
            pairs.append(((a, 0), (b, other_gpu), True))
    gpp = spec.groups_per_pod  # three tiers: group 2 may sit in pod 2 (then cross-pod)
    if len(g) > 1 and (not gpp or gpp > 1):
        pairs.append(((a, 0), (groups[g[1]][0], 0), False))
    if gpp and len(g) > gpp:  # cross-pod: the first server of pod 2
        pairs.append(((a, 0), (groups[g[gpp]][0], 0), False))
    return [route(spec, Flow(src, dst, qp=i, size=1024, messages=64, mtu=1024, pxn=pxn))
            for i, (src, dst, pxn) in enumerate(pairs)]


def measure_flows(spec, flows, netns_of: Callable[[str], str] | None = None, *, stop=None) -> list:
    """Run ``flows`` through a fresh traffic engine, one at a time with port counters; ``stop``
    (an Event) makes the engine raise KeyboardInterrupt at its next safe point."""
    with Engine(spec, netns_of, stop=stop) as eng:
        return eng.run(flows, measure=True, timeout=0.3)


def check_hops(obs: Observer, runner=None) -> list[CheckResult]:
    """One result per path class: observed (TTL and counter) hops == expected, delivery intact.

    ``runner(spec, flows, netns_of) -> list[FlowResult]`` replaces :func:`measure_flows`
    (tests, or a runtime where this process cannot open the server namespaces); default
    ``obs.options["hops_runner"]`` (set by ``run_checks(hops_runner=...)``).
    """
    spec = obs.spec
    try:
        flows = representative_flows(spec)
    except (ImportError, KeyError, ValueError) as exc:
        return [skipped(CHECK, "path classes", f"cannot build flows: {exc}")]
    if not flows:
        return [skipped(CHECK, "path classes", "the lab has no servers")]
    runner = runner or obs.options.get("hops_runner") or measure_flows
    try:
        obs.check_stop()
        if runner is measure_flows:
            results = measure_flows(spec, flows, obs.netns_of, stop=obs.stop)
        else:
            results = runner(spec, flows, obs.netns_of)
    except (RailabError, OSError) as exc:
        return [failed(CHECK, "path classes", expected="traffic engine runs",
                       observed="engine failed", reason=f"{exc}")]
    out: list[CheckResult] = []
    for res in results:
        f = res.flow
        name = f"{f.path_class} {f.src[0]}:gpu{f.src[1]} -> {f.dst[0]}:gpu{f.dst[1]}"
        exp = f.expected_hops
        expected = "unreachable" if exp is None else f"{exp} hops, all delivered"
        # the row is about the flow's source: the server and the NIC it leaves on
        ref = {"node": f.src[0], "subject": f.path_class, "port": f"eth{f.src_nic}"}
        if exp is None:
            observed = ("nothing delivered" if res.delivered == 0
                        else f"{res.delivered}/{res.sent} delivered in {res.hops_ttl} hops")
        else:
            observed = (f"{res.hops_ttl if res.hops_ttl is not None else '-'} hops by TTL"
                        + (f", {res.hops_counters} by counters" if res.hops_counters is not None
                           else "")
                        + f", {res.delivered}/{res.sent} delivered"
                        + (f", path {' > '.join(res.path)}" if res.path else ""))
        if res.ok:
            out.append(passed(CHECK, name, **ref, expected=expected, observed=observed))
            continue
        if res.nic_down:
            # a server NIC is down: the cabling check's link-down row for that NIC is the root
            down_node, down_port = res.nic_down.split(":", 1)
            link = obs.link_of(down_node, down_port)
            out.append(failed(CHECK, name, **ref, expected=expected, observed=observed,
                              reason=f"{res.verdict}; see the cabling check for {res.nic_down}",
                              cause=Cause(kind="link-down", node=down_node, port=down_port,
                                          link=link)))
            continue
        if exp is not None and res.delivered == 0:
            reason = ("nothing arrived" + (f": {res.unreachable_at} answered unreachable"
                                           if res.unreachable_at else "")
                      + "; see the routes and bgp checks for the prefixes on this path")
        elif exp is None:
            reason = "the design isolates these rails but packets got through: a route or link bridges them"
        elif res.hops_ttl is not None and res.hops_ttl != exp:
            reason = (f"{res.verdict}: the flow took a different path "
                      f"({' > '.join(res.path) or 'path unknown'}); check cabling and routes")
        else:
            reason = res.verdict
        out.append(failed(CHECK, name, **ref, expected=expected, observed=observed, reason=reason))
    return out


register_check(CHECK, check_hops, order=50,
               description="each path class takes the expected number of routed hops")
