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
from ipaddress import ip_network

from railab.checks.base import (
    Cause,
    CheckResult,
    Observer,
    cause_fields,
    failed,
    link_id,
    passed,
    register_check,
    skipped,
)
from railab.errors import RailabError
from railab.traffic.engine import Engine
from railab.traffic.patterns import Flow, route

CHECK = "hops"


def _planned_link(spec, node: str, port: str) -> str | None:
    """The :func:`~railab.checks.base.link_id` ``lab.json`` cables to ``node:port`` (None)."""
    try:
        peer = spec.peer(node, port)
    except KeyError:
        return None
    return link_id(node, port, *peer)


def flow_cause(spec, res, link_state: Callable[[str, str], str | None] | None = None
               ) -> Cause | None:
    """The structured root-cause key of a failed :class:`~railab.traffic.engine.FlowResult`
    (None for a passing flow, or one whose failure names no element), so
    :func:`railab.checks.runner.group_failures` puts every flow a dead NIC breaks under one
    cause:

    * a NIC down at either end: ``link-down`` on that NIC's link (``node``/``port`` the NIC);
    * an interface the flow needs that does not exist (``FlowResult.port_missing``: a pulled
      cable, a far end parked by carrier loss): ``link-down`` on that interface's link;
    * a NIC whose MTU is below the flow's packets at either end (``FlowResult.mtu_exceeded``:
      EMSGSIZE at the sender, or lost packets larger than the receiver's MTU): ``mtu-mismatch`` on that
      NIC's link;
    * a miswire (sender or receiver side, ``FlowResult.miswired``): ``miswired`` on the
      planned link of the NIC that is wrong;
    * ICMP unreachable from a switch: ``unreachable`` at that switch;
    * lost packets with a measured path: ``dropped`` at the last switch the packets reached,
      or, when ``link_state(node, port)`` (a :func:`~railab.checks.base.link_status` word, None
      unknown) says the destination leaf's port to the NIC or the source NIC's leaf port is
      not ``up``, ``link-down`` on that link.
    """
    if res.ok:
        return None
    f = res.flow
    if res.nic_down:
        node, port = res.nic_down.split(":", 1)
        return Cause(kind="link-down", node=node, port=port, link=_planned_link(spec, node, port))
    if getattr(res, "port_missing", None):
        node, port = res.port_missing.split(":", 1)
        return Cause(kind="link-down", node=node, port=port, link=_planned_link(spec, node, port))
    if getattr(res, "mtu_exceeded", None):
        node, port = res.mtu_exceeded.split(":", 1)
        return Cause(kind="mtu-mismatch", node=node, port=port, link=_planned_link(spec, node, port))
    if res.miswired:
        if res.egress_to or (res.egress and res.egress != f"{f.src[0]}:eth{f.src_nic}"):
            node, port = f.src[0], f"eth{f.src_nic}"
        else:
            node, port = f.dst[0], f"eth{f.dst_nic}"
        return Cause(kind="miswired", node=node, port=port, link=_planned_link(spec, node, port))
    if res.unreachable_at:
        return Cause(kind="unreachable", node=res.unreachable_at.split(":")[0])
    if res.lost or res.delivered < res.sent:
        if link_state is not None and f.path_class != "intra-server":
            for nic in (spec.nic(f.dst[0], f.dst_nic), spec.nic(f.src[0], f.src_nic)):
                st = link_state(nic.leaf, nic.leaf_port)
                if st not in (None, "up"):
                    return Cause(kind="link-down", node=nic.leaf, port=nic.leaf_port,
                                 link=_planned_link(spec, nic.leaf, nic.leaf_port))
        if res.path:
            return Cause(kind="dropped", node=res.path[-1].split(":")[0])
    return None


#: cause kinds that name a whole node (no port): a flow crossing the node can follow from it
NODE_KINDS = ("daemon-dead", "wrong-asn", "config", "node-unreachable", "not-announced")
#: a flow's own cause kinds that say where its packets stopped, not which element broke
WEAK_KINDS = ("dropped", "unreachable")


def flow_scope(spec, flow) -> tuple[set[str], set[str]]:
    """``(nodes, links)`` a routed flow can cross by design (``lab.json``): its servers, the
    leaves its NICs are cabled to, the spines both leaves reach (every ECMP member) and the
    :func:`~railab.checks.base.link_id` of each link on those paths (the two NIC links and the
    leaf-spine links via those spines). On a three-tier lab, where the leaves share no spine,
    every uplink of both leaves. An intra-server flow crosses only its server."""
    if flow.path_class == "intra-server":
        return {flow.src[0]}, set()
    src, dst = spec.nic(flow.src[0], flow.src_nic), spec.nic(flow.dst[0], flow.dst_nic)
    nodes = {src.server, dst.server, src.leaf, dst.leaf}
    links = {link_id(src.server, src.interface, src.leaf, src.leaf_port),
             link_id(dst.server, dst.interface, dst.leaf, dst.leaf_port)}
    if src.leaf != dst.leaf:
        roles = {n.name: n.role for n in spec.nodes}
        up = {leaf: [(p, peer, pp) for p, peer, pp in spec.links_of(leaf)
                     if roles.get(peer) not in (None, "server")] for leaf in (src.leaf, dst.leaf)}
        common = {x[1] for x in up[src.leaf]} & {x[1] for x in up[dst.leaf]}
        for leaf, ups in up.items():
            for p, peer, pp in ups:
                if peer in common or not common:
                    nodes.add(peer)
                    links.add(link_id(leaf, p, peer, pp))
    return nodes, links


def _group_elements(group: tuple[CheckResult, list[CheckResult]]) -> dict[str, set]:
    """What one root-cause group of ``railab check`` stands for: the links and ``(node, port)``
    ends its rows and causes name, the nodes a node-wide cause names, and the root's own
    link / end / node (``root_*``)."""
    root, cons = group
    out: dict[str, set] = {k: set() for k in ("links", "ends", "nodes", "causes", "root_links",
                                              "root_ends", "root_nodes")}
    for i, r in enumerate([root, *cons]):
        if i and r.joint:
            continue  # a row other roots explain too: its causes are not all this group's
        c = r.cause
        links = {x for x in (r.link, c.link if c else None) if x}
        ends = {(c.node, c.port)} if c is not None and c.node and c.port else set()
        nodes = ({c.node} if c is not None and c.node and c.kind in NODE_KINDS and not c.port
                 else set())  # a session's wrong remote-as names a port, not the whole node
        out["links"] |= links
        out["ends"] |= ends
        out["nodes"] |= nodes
        if c is not None:
            out["causes"].add((c.kind, c.node, c.port))
        if i == 0:
            out["root_links"], out["root_ends"], out["root_nodes"] = links, ends, nodes
    return out


def _dst_prefix(spec, flow) -> str | None:
    """The rail subnet (``lab.json`` ``rail_subnets``) holding the flow's destination NIC."""
    addr = spec.nic(flow.dst[0], flow.dst_nic).address.ip
    for rs in spec.rail_subnets:
        if addr in ip_network(rs.prefix, strict=False):
            return rs.prefix
    return None


def _cut_off(spec, flow, lost: dict[tuple[str, str], list[int]]) -> list[int]:
    """The groups (indexes) whose ``routes`` row says the flow's source leaf lacks the
    destination's rail subnet as a whole (``lost``: (node, prefix) -> groups listing such a
    row), [] for none or a flow that stays on one leaf."""
    if flow.path_class == "intra-server" or not lost:
        return []
    src_leaf = spec.nic(flow.src[0], flow.src_nic).leaf
    if src_leaf == spec.nic(flow.dst[0], flow.dst_nic).leaf:
        return []
    prefix = _dst_prefix(spec, flow)
    return lost.get((src_leaf, prefix), []) if prefix else []


def attribute_flows(spec, rows: list[CheckResult], results, groups) -> list[CheckResult]:
    """Re-file failed flow rows (:func:`flow_rows` / :func:`check_hops`, one per
    :class:`~railab.traffic.engine.FlowResult` in ``results``, same order) under the
    ``railab check`` root cause the flow crosses, so a flow names the element that broke as
    check names it (a daemon, a link, a cable, a filter) instead of where its packets stopped.

    ``groups``: :func:`railab.checks.runner.group_failures` of the other families' rows. A
    failed row whose own cause is weak (``dropped`` / ``unreachable``, or none) and whose
    source leaf lacks the destination's rail subnet as a whole (a failed ``routes`` row for
    that leaf and prefix without a ``port``: missing from the RIB or FIB) takes the causes of
    every group listing that row: one root's cause, or several as ``joint`` causes when two
    faults cut the prefix off together. Else it takes the cause of the best matching group's
    root (its ``cause``; the root row's
    own fields when it has none), scored: the flow's own cause is one of the group's (4); the
    root's port or node is on the flow's measured path or where it stopped (3); the root's
    link or node-wide node is in :func:`flow_scope` (2); another link of the group is (1).
    Ties go to the first group (run order); a group whose root has no cause is not used. A
    row no group matches keeps its own cause.
    Passing rows are returned unchanged."""
    groups = [g for g in groups if g[0].cause is not None]  # a root must name an element
    elems = [_group_elements(g) for g in groups]
    lost: dict[tuple[str, str], list[int]] = {}
    for k, (root, cons) in enumerate(groups):
        for r in (root, *cons):
            if r.check == "routes" and r.node and r.prefix and r.port is None:
                lost.setdefault((r.node, r.prefix), []).append(k)
    out = []
    for row, res in zip(rows, results, strict=True):
        if row.status != "fail" or not elems:
            out.append(row)
            continue
        own = row.cause
        cut = _cut_off(spec, res.flow, lost) if own is None or own.kind in WEAK_KINDS else []
        if cut:
            out.append(row.model_copy(update=cause_fields([groups[k][0].cause for k in cut])))
            continue
        nodes, links = flow_scope(spec, res.flow)
        walked = {p.split(":", 1)[0] for p in (res.path or [])}
        walked_ends = {tuple(p.split(":", 1)) for p in (res.path or [])}
        if res.unreachable_at:
            walked.add(res.unreachable_at.split(":")[0])
        if own is not None and own.kind == "dropped" and own.node:
            walked.add(own.node)
        best, score = None, 0
        for i, e in enumerate(elems):
            sc = 0
            if own is not None and own.kind not in WEAK_KINDS and (
                    (own.kind, own.node, own.port) in e["causes"] or (own.link and own.link in e["links"])):
                sc = 4
            elif e["root_ends"] & walked_ends or e["root_nodes"] & walked:
                sc = 3
            elif e["root_links"] & links or e["root_nodes"] & nodes:
                sc = 2
            elif e["links"] & links:
                sc = 1
            if sc > score:
                best, score = i, sc
        if best is None:
            out.append(row)
            continue
        out.append(row.model_copy(update={"cause": groups[best][0].cause}))
    return out


def flow_rows(spec, results, link_state: Callable[[str, str], str | None] | None = None
              ) -> list[CheckResult]:
    """One ``traffic`` :class:`CheckResult` per flow (``name`` = the flow's name, ``node`` /
    ``port`` its source NIC, ``cause`` from :func:`flow_cause`): what ``railab traffic`` feeds
    :func:`railab.checks.runner.group_failures` to print one root cause per dead element
    instead of one line per failed flow."""
    out = []
    for res in results:
        f = res.flow
        kw = {"node": f.src[0], "subject": f.path_class,
              "port": None if f.path_class == "intra-server" else f"eth{f.src_nic}",
              "expected": "unreachable" if f.expected_hops is None else f"{f.expected_hops} hops",
              "observed": f"{res.delivered}/{res.sent} delivered"}
        if res.ok:
            out.append(passed("traffic", f.name, **kw))
        else:
            out.append(failed("traffic", f.name, reason=res.verdict,
                              cause=flow_cause(spec, res, link_state), **kw))
    return out


def representative_flows(spec) -> list:
    """One routed :class:`traffic.patterns.Flow` per path class this lab has (64 packets each).

    64 packets of 1 KiB keep the counter attribution (a switch is on the path when a port moved
    at least half the flow's packets, bounded by bytes) far above the lab's own background.

    Pairs: srvA gpu0 -> srvA gpu1 (intra-server), srvA gpu0 -> srvB gpu0 (intra-rail),
    srvA gpu0 -> srvB gpu1 (inter-rail, without and with PXN), srvA gpu0 -> first server of
    group 2 gpu0 (cross-group), on three-tier labs srvA gpu0 -> first server of pod 2 gpu0
    (cross-pod); srvA/srvB are the first two servers of group 1 (one flow per class: the
    NIC-covering patterns are railab traffic's, docs/traffic.md).
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
    if runner is measure_flows:
        no_ns = [n.name for n in spec.nodes if not obs.netns_of(n.name)]
        if no_ns:
            # a real fabric over SSH (railab check --inventory): this process cannot send from
            # the servers nor read switch counters; say so instead of crashing in the engine
            return [skipped(CHECK, "path classes",
                            f"the traffic engine sends from each server's network namespace and "
                            f"reads switch counters there; {no_ns[0]}"
                            + (f" and {len(no_ns) - 1} more nodes have" if len(no_ns) > 1 else " has")
                            + " none here (SSH inventory): run RoCE probes on the hosts themselves "
                            "or use --only to leave hops out")]
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
        out.append(failed(CHECK, name, **ref, expected=expected, observed=observed, reason=reason,
                          cause=flow_cause(spec, res)))
    prior = obs.options.get("groups_so_far")
    if prior is not None and any(r.status == "fail" for r in out):
        # a flow that fails because of an element another family names follows from it
        out = attribute_flows(spec, out, results, prior())
    return out


register_check(CHECK, check_hops, order=50,
               description="each path class takes the expected number of routed hops")
