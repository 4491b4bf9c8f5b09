"""Convergence: compare FRR's JSON view of a running lab with the expected state in ``lab.json``.

A lab is converged when every ``LabSpec.bgp_sessions`` entry is Established on its ``node`` end
(``show bgp summary json``: ``ipv4Unicast.peers[<interface>].state``; unnumbered peers are keyed
by interface) and every ``LabSpec.expected_routes[node]`` prefix is selected and installed in the
node's FIB with exactly ``ecmp_width`` FIB next hops, over ``interfaces`` when listed
(``show ip route json``: ``nexthops[].fib`` / ``interfaceName``).

Everything goes through an ``Executor`` (testbed.executor), so the same code checks a netns lab,
a containerlab lab or real switches. The wait re-polls only the nodes still failing (netlab's
``validate`` does the same), in parallel.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from railab.testbed.executor import Executor
from railab.errors import RailabError

POLL_INTERVAL_S = 0.2


def default_timeout(spec) -> float:
    """Convergence budget (s) for ``spec``: 30 s plus 0.5 s per switch plus 20 ms per link."""
    switches = sum(1 for n in spec.nodes if n.role != "server")
    return 30.0 + 0.5 * switches + 0.02 * len(spec.links)


def _routers(spec) -> list[str]:
    return [n.name for n in spec.nodes if n.role != "server"]


@dataclass
class NodeView:
    """What one router shows: ``missing_sessions`` / ``missing_routes`` are human-readable."""

    node: str
    sessions_up: int = 0
    sessions_expected: int = 0
    routes_ok: int = 0
    routes_expected: int = 0
    missing_sessions: list[str] = field(default_factory=list)
    missing_routes: list[str] = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return not self.missing_sessions and not self.missing_routes


def _json(executor: Executor, node: str, command: str) -> Any:
    res = executor.vtysh(node, command, timeout=30)
    if not res.ok or not res.stdout.strip():
        return None
    try:
        return json.loads(res.stdout)
    except json.JSONDecodeError:
        return None


def session_states(executor: Executor, node: str) -> dict[str, str]:
    """``{peer (interface for unnumbered): state}`` from ``show bgp summary json`` (IPv4 unicast)."""
    doc = _json(executor, node, "show bgp summary json") or {}
    peers = (doc.get("ipv4Unicast") or {}).get("peers") or {}
    return {p: str(v.get("state", "?")) for p, v in peers.items()}


def fib_nexthops(entry: dict) -> list[str]:
    """Interfaces of the FIB (installed) next hops of one ``show ip route json`` entry."""
    return [nh.get("interfaceName", nh.get("ip", "?")) for nh in entry.get("nexthops", []) if nh.get("fib")]


def route_table(executor: Executor, node: str) -> dict[str, list[dict]]:
    """``show ip route json`` of ``node`` (prefix -> entries); {} when unavailable."""
    return _json(executor, node, "show ip route json") or {}


def observe_node(spec, executor: Executor, node: str) -> NodeView:
    """Compare one router's sessions and routes with ``spec``."""
    view = NodeView(node)
    sessions = [s for s in spec.bgp_sessions if s.node == node]
    if sessions:
        states = session_states(executor, node)
        for s in sessions:
            view.sessions_expected += 1
            state = states.get(s.interface, "absent")
            if state == "Established":
                view.sessions_up += 1
            else:
                view.missing_sessions.append(f"{node}:{s.interface} -> {s.peer}:{s.peer_interface} ({state})")
    expected = spec.expected_routes.get(node) or []
    if expected:
        table = route_table(executor, node)
        for r in expected:
            view.routes_expected += 1
            entries = [e for e in table.get(r.prefix, []) if e.get("selected") and e.get("installed")]
            hops = fib_nexthops(entries[0]) if entries else []
            ok = len(hops) == r.ecmp_width and (not r.interfaces or sorted(set(hops)) == sorted(set(r.interfaces)))
            if ok:
                view.routes_ok += 1
            else:
                seen = f"{len(hops)} via {','.join(sorted(hops))}" if hops else "not installed"
                view.missing_routes.append(f"{node} {r.prefix}: expected ECMP {r.ecmp_width}, observed {seen}")
    return view


def observe(spec, executor: Executor, nodes: list[str] | None = None, workers: int = 8) -> dict[str, NodeView]:
    """Observe ``nodes`` (default: every router) in parallel; node -> NodeView."""
    nodes = _routers(spec) if nodes is None else nodes
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
        return dict(zip(nodes, pool.map(lambda n: observe_node(spec, executor, n), nodes)))


def observe_sessions(spec, executor: Executor) -> tuple[list[str], list[str]]:
    """(sessions Established, sessions not) as ``node:iface`` strings, across the lab."""
    nodes = sorted({s.node for s in spec.bgp_sessions})
    up, down = [], []
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        for node, states in zip(nodes, pool.map(lambda n: session_states(executor, n), nodes)):
            for s in spec.bgp_sessions:
                if s.node == node:
                    (up if states.get(s.interface) == "Established" else down).append(f"{node}:{s.interface}")
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
                   poll: float = POLL_INTERVAL_S) -> dict[str, NodeView]:
    """Poll until every router matches ``spec``; return the final views.

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
    while True:
        views.update(observe(spec, executor, pending))
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
        time.sleep(poll)
    sessions = [m for n in pending for m in views[n].missing_sessions]
    routes = [m for n in pending for m in views[n].missing_routes]
    lines = [f"lab {spec.name} did not converge within {timeout:g} s:"]
    if sessions:
        lines.append(f"  {len(sessions)} BGP session(s) not Established: " + "; ".join(sessions[:20])
                     + (" ..." if len(sessions) > 20 else ""))
    if routes:
        lines.append(f"  {len(routes)} prefix(es) missing or with the wrong ECMP width: " + "; ".join(routes[:20])
                     + (" ..." if len(routes) > 20 else ""))
    raise RailabError("\n".join(lines))
