"""Convergence read over netlink (railab.checks.converge with ``netns_of``) is judged by the same
route predicate as FRR's JSON RIB (railab.checks.frr.route_verdict)."""

from __future__ import annotations

import time

import pytest

from railab.checks import frr as F
from railab.checks.base import FibRoute
from railab.checks.converge import observe


def test_fib_routes_become_rib_entries_the_predicate_judges():
    ecmp = FibRoute("10.1.0.0/24", "unicast", ("eth2", "eth1"), "bgp")
    assert F.route_verdict(F.rib_entries_of_fib(ecmp), 2, ["eth1", "eth2"]).state == "ok"
    assert F.route_verdict(F.rib_entries_of_fib(ecmp), 4, ["eth1", "eth2"]).state == "width"
    assert F.route_verdict(F.rib_entries_of_fib(ecmp), 2, ["eth1", "eth3"]).state == "interfaces"
    assert F.route_verdict(F.rib_entries_of_fib(None), 2).state == "missing"
    # the leaf's own rail subnet: a staticd blackhole, judged as the node's own route
    own = FibRoute("10.1.0.0/24", "blackhole", (), "static")
    verdict = F.route_verdict(F.rib_entries_of_fib(own), 1)
    assert verdict.state == "local" and verdict.hops == ()
    # a route another protocol put there is not a BGP route with the planned width
    assert F.route_verdict(F.rib_entries_of_fib(FibRoute("10.9.0.0/24", "unicast", ("eth1",), "kernel")),
                           2).state == "local"


@pytest.mark.integration
def test_netlink_and_frr_json_agree_on_a_converged_lab_and_on_a_cut_link(mini_lab):
    """On a live lab the two readings give the same verdict for every expected prefix, healthy
    and after one leaf-spine link is taken down (the FIB loses the path at once)."""
    spec, executor, netns_of = mini_lab.spec, mini_lab.executor, mini_lab.netns_of
    routers = [n.name for n in spec.nodes if n.role != "server"]

    def verdicts(**kw):
        views = observe(spec, executor, routers, **kw)
        return {(n, p): v.state for n, view in views.items() for p, v in view.route_verdicts.items()}

    healthy_json, healthy_nl = verdicts(), verdicts(netns_of=netns_of)
    assert healthy_json == healthy_nl
    assert healthy_nl and set(healthy_nl.values()) <= {"ok", "local"}
    link = next(ln for ln in spec.links if {spec.node(ln.a.node).role, spec.node(ln.b.node).role} == {"leaf", "spine"})
    leaf_end = link.a if spec.node(link.a.node).role == "leaf" else link.b
    def leaf_widths(v):
        return [p for (n, p), state in v.items() if n == leaf_end.node and state == "width"]

    try:
        mini_lab.exec(leaf_end.node, ["ip", "link", "set", leaf_end.interface, "down"])
        end = time.monotonic() + 15
        while not leaf_widths(cut := verdicts(netns_of=netns_of)) and time.monotonic() < end:
            time.sleep(0.2)
        assert leaf_widths(cut), f"{leaf_end.node}:{leaf_end.interface} down never narrowed an ECMP route in the FIB"
    finally:
        mini_lab.exec(leaf_end.node, ["ip", "link", "set", leaf_end.interface, "up"])
        end = time.monotonic() + 60  # the session-wide lab is shared: leave it converged
        while verdicts(netns_of=netns_of) != healthy_nl and time.monotonic() < end:
            time.sleep(0.5)
    assert verdicts(netns_of=netns_of) == healthy_nl
