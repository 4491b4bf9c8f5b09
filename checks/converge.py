"""Convergence: compare a running lab's BGP sessions and FIBs with the expected state in ``lab.json``.

A lab is converged when every ``LabSpec.bgp_sessions`` entry is Established on its ``node`` end
and every ``LabSpec.expected_routes[node]`` prefix holds on that node, both decided by the single
predicate of :mod:`railab.checks.frr` that the bgp and routes checks use too
(:func:`~railab.checks.frr.session_up`, :func:`~railab.checks.frr.route_verdict`: selected +
installed with exactly ``ecmp_width`` FIB next hops over ``interfaces`` when listed). The commands
and JSON field paths come from the same table (``CMD_SUMMARY``, ``CMD_RIB``).

Sessions are read from FRR (``CMD_SUMMARY``) through an ``Executor`` (testbed.executor), so the
same code checks a netns lab, a containerlab lab or real switches; routes are read from each
node's kernel FIB over netlink where its namespace is on this host (``netns_of``; FRR's JSON RIB
otherwise), turned into RIB entries (:func:`~railab.checks.frr.rib_entries_of_fib`) so the same
route predicate decides. The wait re-polls only the nodes still failing (netlab's
``validate`` does the same), in parallel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from railab.checks import frr as F
from railab.checks.base import ObservationError, Observer
from railab.errors import RailabError
from railab.testbed.executor import Executor

#: The longest wait between two polls of the convergence wait (s).
POLL_INTERVAL_S = 0.2
#: The shortest wait between two polls (a lab read in less time than this).
POLL_MIN_S = 0.05
#: Seconds of waiting between two ``on_stalled`` calls of the convergence wait.
STALLED_AFTER_S = 10.0
#: Next hops a "missing or with the wrong ECMP width" line names (64-way ECMP at 1024 GPUs made
#: one line of 700 characters per prefix).
MAX_HOPS_SHOWN = 8
#: Seconds of waiting before the first ``on_stalled`` call: the labs that converge at all do so
#: in 0.3-2.5 s up to 1024 GPUs, and a port the kernel left without its link-local route
#: (railab.testbed.linklocal) never heals by itself, so waiting 10 s for it is 10 s lost.
FIRST_STALLED_AFTER_S = 3.0


def default_timeout(spec) -> float:
    """Convergence budget (s) for ``spec``: 30 s plus 0.5 s per switch plus 20 ms per link."""
    switches = sum(1 for n in spec.nodes if n.role != "server")
    return 30.0 + 0.5 * switches + 0.02 * len(spec.links)


def _routers(spec) -> list[str]:
    return [n.name for n in spec.nodes if n.role != "server"]


@dataclass
class NodeView:
    """What one router shows: ``missing_sessions`` / ``missing_routes`` are human-readable;
    ``session_states`` (interface -> state) and ``route_verdicts`` (prefix ->
    :class:`~railab.checks.frr.RouteVerdict`) are the structured observations behind them."""

    node: str
    sessions_up: int = 0
    sessions_expected: int = 0
    routes_ok: int = 0
    routes_expected: int = 0
    missing_sessions: list[str] = field(default_factory=list)
    missing_routes: list[str] = field(default_factory=list)
    session_states: dict[str, str] = field(default_factory=dict)
    route_verdicts: dict[str, F.RouteVerdict] = field(default_factory=dict)
    #: the ASN and router-id bgpd runs with (its summary's ``as`` / ``routerId``; None when
    #: unread or when the node plans no session)
    asn: int | None = None
    router_id: str | None = None

    @property
    def converged(self) -> bool:
        """True when every planned session is up and every expected prefix holds."""
        return not self.missing_sessions and not self.missing_routes


def _read(obs: Observer, node: str, command: str) -> Any:
    """Parsed JSON of ``command`` on ``node`` through the checks' observer; None when vtysh
    fails or prints no JSON (a node still starting is just not converged yet)."""
    try:
        return obs.frr(node, command)
    except ObservationError:
        return None


def _rib(obs: Observer, node: str, netlink: bool) -> dict[str, list[dict]]:
    """prefix -> RIB entries of ``node``: its kernel FIB over netlink when ``netlink`` and the
    node's namespace is readable (one RTM_GETROUTE dump: a few KB where ``show ip route json`` of
    a leaf is ~550 KB at 1024 GPUs, and zebra is busiest while converging), else FRR's JSON."""
    if netlink:
        try:
            return {p: F.rib_entries_of_fib(r) for p, r in obs.fib(node).items()}
        except ObservationError:
            pass  # no namespace here (SSH inventory, a node not created yet): ask FRR
    return F.rib_of(_read(obs, node, F.CMD_RIB))


def observe_node(spec, executor: Executor, node: str,
                 netns_of: Callable[[str], str | None] | None = None) -> NodeView:
    """Compare one router's sessions and routes with ``spec`` (the shared predicate).

    Sessions come from FRR's summary JSON; routes from the node's kernel FIB over netlink when
    ``netns_of(node)`` names a namespace this host can enter (netns runtime, containerlab), else
    from ``show ip route json``. Both go through the same predicate. A new
    :class:`~railab.checks.base.Observer` per call, so repeated calls see the lab as it converges.
    """
    obs = Observer(spec, executor, netns_of or (lambda n: None))
    try:
        return _observe_node(obs, spec, node, netns_of is not None)
    finally:
        obs.close()


def _observe_node(obs: Observer, spec, node: str, netlink: bool) -> NodeView:
    view = NodeView(node)
    sessions = [s for s in spec.bgp_sessions if s.node == node]
    if sessions:
        doc = _read(obs, node, F.CMD_SUMMARY)
        states = F.session_states(doc)
        summ = F.summary_of(doc) if doc is not None else {}
        view.asn = summ.get("as") if isinstance(summ.get("as"), int) else None
        view.router_id = summ.get("routerId")
        for s in sessions:
            view.sessions_expected += 1
            state = states.get(s.interface, "absent")
            view.session_states[s.interface] = state
            if F.session_up(state):
                view.sessions_up += 1
            else:
                view.missing_sessions.append(f"{node}:{s.interface} -> {s.peer}:{s.peer_interface} ({state})")
    expected = spec.expected_routes.get(node) or []
    if expected:
        table = _rib(obs, node, netlink)
        for r in expected:
            view.routes_expected += 1
            verdict = F.route_verdict(table.get(r.prefix), r.ecmp_width, r.interfaces)
            view.route_verdicts[r.prefix] = verdict
            if verdict.ok:
                view.routes_ok += 1
            else:
                hops = verdict.hops
                shown = ",".join(hops[:MAX_HOPS_SHOWN]) + (",..." if len(hops) > MAX_HOPS_SHOWN else "")
                seen = (f"{len(hops)} via {shown}" if hops and verdict.state != "not-installed"
                        else "not installed")
                view.missing_routes.append(f"{node} {r.prefix}: expected ECMP {r.ecmp_width}, observed {seen}")
    return view


def observe(spec, executor: Executor, nodes: list[str] | None = None, workers: int = 8,
            netns_of: Callable[[str], str | None] | None = None) -> dict[str, NodeView]:
    """Observe ``nodes`` (default: every router) in parallel; node -> NodeView (``netns_of``:
    see :func:`observe_node`)."""
    nodes = _routers(spec) if nodes is None else nodes
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
        views = pool.map(lambda n: observe_node(spec, executor, n, netns_of), nodes)
        return dict(zip(nodes, views, strict=True))


def read_session_states(spec, executor: Executor, *, both_ends: bool = False) -> dict[str, dict[str, str]]:
    """``node -> {interface: state}`` (``Established``, ``Active``, ...) from each node's BGP
    summary (``CMD_SUMMARY``), read in parallel: the ``node`` end of every planned session, and
    with ``both_ends`` its ``peer`` end too (the spines). A node whose summary cannot be read
    maps to {} (none of its sessions is up)."""
    nodes = sorted({s.node for s in spec.bgp_sessions}
                   | ({s.peer for s in spec.bgp_sessions} if both_ends else set()))

    def states(n: str) -> dict[str, str]:
        return F.session_states(_read(Observer(spec, executor, lambda x: None), n, F.CMD_SUMMARY))

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(states, nodes), strict=True))


def observe_sessions(spec, executor: Executor,
                     states: dict[str, dict[str, str]] | None = None) -> tuple[list[str], list[str]]:
    """(sessions Established, sessions not) as ``node:iface`` strings, across the lab, each
    planned session seen from its ``node`` end. ``states``: :func:`read_session_states`'
    answer when the caller has it (read here otherwise)."""
    if states is None:
        states = read_session_states(spec, executor)
    up, down = [], []
    for node in sorted({s.node for s in spec.bgp_sessions}):
        st = states.get(node) or {}
        for s in spec.bgp_sessions:
            if s.node == node:
                (up if F.session_up(st.get(s.interface)) else down).append(f"{node}:{s.interface}")
    return up, down


@dataclass(frozen=True)
class ConvergeProgress:
    """One poll of :func:`wait_converged`: ``lab`` name, BGP sessions Established of
    ``sessions_total``, expected prefixes installed with their ECMP width of ``routes_total``,
    ``elapsed_s`` since the wait began, ``done`` on the last (converged) report."""

    lab: str
    sessions_up: int
    sessions_total: int
    routes_ok: int
    routes_total: int
    elapsed_s: float
    done: bool = False


def wait_converged(spec, executor: Executor, *, timeout: float,
                   on_progress: Callable[[ConvergeProgress], None] | None = None,
                   poll: float | None = None,
                   netns_of: Callable[[str], str | None] | None = None,
                   on_stalled: Callable[[list[tuple[str, str]]], object] | None = None,
                   stalled_after: float = STALLED_AFTER_S,
                   first_stalled_after: float = FIRST_STALLED_AFTER_S) -> dict[str, NodeView]:
    """Poll until every router matches ``spec``; return the final views (``netns_of``: node ->
    network namespace, to read FIBs over netlink; see :func:`observe_node`).

    ``on_stalled`` (when given) is called after ``first_stalled_after`` seconds of waiting, then
    every ``stalled_after`` seconds, with both ends ``(node, interface)`` of every planned session
    not Established at the last poll (``bring_up`` has the runtime repair their IPv6 link-local
    state where the kernel left it incomplete and re-solicit their peers' router advertisements).
    ``poll``: seconds between polls; None (default) waits as long as the last poll took, at
    least :data:`POLL_MIN_S` and at most :data:`POLL_INTERVAL_S`: a small lab, read in a few ms,
    is seen converged within 50 ms (BGP converges in ~1.3 s there), a large one is polled no
    more often than before.

    ``on_progress`` (when given) is called after every poll with a :class:`ConvergeProgress`.
    Raises RailabError after ``timeout`` seconds listing each missing session
    (``node:iface -> peer:iface (state)``) and prefix (``node prefix: expected ECMP w, observed ...``).
    """
    views: dict[str, NodeView] = {}
    pending = _routers(spec)
    s_total = len(spec.bgp_sessions)
    r_total = sum(len(spec.expected_routes.get(n) or []) for n in pending)
    t0 = time.monotonic()
    end = t0 + timeout
    nudge_at = t0 + min(first_stalled_after, stalled_after)
    while True:
        t_poll = time.monotonic()
        views.update(observe(spec, executor, pending, netns_of=netns_of))
        took = time.monotonic() - t_poll
        pending = [n for n in pending if not views[n].converged]
        if on_progress is not None:
            on_progress(ConvergeProgress(
                lab=spec.name,
                sessions_up=sum(v.sessions_up for v in views.values()), sessions_total=s_total,
                routes_ok=sum(v.routes_ok for v in views.values()), routes_total=r_total,
                elapsed_s=time.monotonic() - t0, done=not pending))
        if not pending:
            return views
        if time.monotonic() > end:
            break
        if on_stalled is not None and time.monotonic() >= nudge_at:
            nudge_at = time.monotonic() + stalled_after
            down = stalled_ports(spec, views)
            if down:
                on_stalled(down)
        time.sleep(poll if poll is not None else min(POLL_INTERVAL_S, max(POLL_MIN_S, took)))
    sessions = [m for n in pending for m in views[n].missing_sessions]
    routes = [m for n in pending for m in views[n].missing_routes]
    lines = [f"lab {spec.name} did not converge within {timeout:g} s:"]
    causes = likely_causes(spec, executor, views)
    if causes:
        lines.append("  likely cause: " + "; ".join(causes[:10]) + (" ..." if len(causes) > 10 else ""))
    if sessions:
        lines.append(f"  {len(sessions)} BGP session(s) not Established: " + "; ".join(sessions[:20])
                     + (" ..." if len(sessions) > 20 else ""))
    if routes:
        lines.append(f"  {len(routes)} prefix(es) missing or with the wrong ECMP width: " + "; ".join(routes[:20])
                     + (" ..." if len(routes) > 20 else ""))
    raise RailabError("\n".join(lines))


def stalled_ports(spec, views: dict[str, NodeView]) -> list[tuple[str, str]]:
    """Both ends ``(node, interface)`` of every session of ``spec`` that the views show not
    Established (a node not observed yet counts as not Established), in session order."""
    out: list[tuple[str, str]] = []
    for s in spec.bgp_sessions:
        v = views.get(s.node)
        state = v.session_states.get(s.interface) if v is not None else None
        if state is None or not F.session_up(state):
            out += [(s.node, s.interface), (s.peer, s.peer_interface)]
    return list(dict.fromkeys(out))


def plan_mismatches(spec, views: dict[str, NodeView]) -> list[str]:
    """What a converged lab runs differently from ``lab.json``, one sentence each: a switch
    whose bgpd runs another ASN or router-id than planned (``g1-leaf2 runs ASN 4200000099,
    lab.json plans 4200000002``). With ``remote-as external`` a unique wrong ASN still brings
    every session up and every route in, so convergence alone does not see it."""
    out = []
    for n in spec.nodes:
        v = views.get(n.name)
        if v is None or n.asn is None:
            continue
        if v.asn is not None and v.asn != n.asn:
            out.append(f"{n.name} runs ASN {v.asn}, lab.json plans {n.asn} (frr.conf `router bgp`)")
        if v.router_id and n.router_id and v.router_id != str(n.router_id):
            out.append(f"{n.name} runs router-id {v.router_id}, lab.json plans {n.router_id}")
    return out


def likely_causes(spec, executor: Executor, views: dict[str, NodeView]) -> list[str]:
    """Why sessions are not Established, in words, most specific first, from the views of the
    last poll and each failing session's ``show bgp neighbors`` (NOTIFICATION reason):

    * two peers that run the same ASN (``g1-leaf2 and spine1 share ASN 4200000000: sessions
      Idle, Bad Peer AS``; eBGP peers must differ, and FRR reads a peer of its own AS as iBGP);
    * a switch that runs another ASN than planned (:func:`plan_mismatches`);
    * a session shut (``Idle (Admin)``); bgpd not answering (no summary at all);
    * otherwise the last NOTIFICATION the node got on the port.
    """
    live = {n: v.asn for n, v in views.items() if v.asn is not None}
    planned = {n.name: n.asn for n in spec.nodes if n.asn is not None}
    out: list[str] = []
    seen_pairs: set[tuple[str, str]] = set()
    obs = Observer(spec, executor, lambda n: None)

    def reason_of(node: str, iface: str) -> str:
        try:
            nb = F.neighbor_of(obs.frr(node, F.cmd_neighbor(iface)), iface)
        except ObservationError:
            return ""
        return str(nb.get("lastNotificationReason") or "")

    for node, v in views.items():
        if v.sessions_expected and v.asn is None and v.missing_sessions:
            out.append(f"{node}: bgpd does not answer (no BGP summary)")
    for s in spec.bgp_sessions:
        v = views.get(s.node)
        if v is None:
            continue
        state = v.session_states.get(s.interface)
        if state is None or F.session_up(state):
            continue
        a, b = s.node, s.peer
        asn_a, asn_b = live.get(a, planned.get(a)), live.get(b, planned.get(b))
        key = tuple(sorted((a, b)))
        if asn_a is not None and asn_a == asn_b:
            if key in seen_pairs:
                continue
            seen_pairs.add(key)
            other = views[b].session_states.get(s.peer_interface) if b in views else None
            states = sorted({state} | ({other} if other else set()))
            why = reason_of(a, s.interface) or reason_of(b, s.peer_interface)
            out.append(f"{a} and {b} share ASN {asn_a}: sessions {', '.join(states)}"
                       + (f", {why}" if why else ""))
        elif "Admin" in state:
            out.append(f"{a}:{s.interface} is shut (`neighbor {s.interface} shutdown`)")
        else:
            why = reason_of(a, s.interface)
            if why:
                out.append(f"{a}:{s.interface} -> {b}: {state}, last NOTIFICATION {why}")
    return list(dict.fromkeys(out + plan_mismatches(spec, views)))
