"""Live: the scaled-down three-tier lab (``rail-optimized-3tier-mini``: 2 pods x 2 groups x 2
rails, 2 spines per pod, 2 super-spines) on real netns + FRR passes every check, and its
cross-pod flows take the planner's 5 routed hops through a super-spine (issue 16)."""

from __future__ import annotations

import time

import pytest

from railab.checks.runner import run_checks
from railab.topologies.intent import load_intent
from railab.topologies.planner import Design, plan
from tests.conftest import PID, _bring_down, _bring_up

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture(scope="module")
def lab3(tmp_path_factory):
    name = f"p3t{PID}"
    t0 = time.monotonic()
    try:
        lab = _bring_up("rail-optimized-3tier-mini", name, tmp_path_factory)
        lab.up_s = time.monotonic() - t0
        yield lab
    finally:
        _bring_down(name)


def test_three_tier_lab_passes_every_check(lab3):
    res = run_checks(lab3.spec, lab3.executor)
    bad = [r for r in res if r.status != "pass"]
    assert not bad, "\n".join(r.message() for r in bad)
    assert {r.check for r in res} == {"cabling", "bgp", "routes", "oversub", "hops", "daemons", "policy"}
    # every super-spine runs BGP with its own ASN row, and every spine-superspine link is cabled
    supers = [n.name for n in lab3.spec.by_role("superspine")]
    assert supers == ["superspine1", "superspine2"]
    assert {r.node for r in res if r.check == "bgp" and r.name.endswith("ASN")} >= set(supers)
    ss_links = [lk for lk in lab3.spec.links if lk.role == "spine-superspine"]
    assert len(ss_links) == 16
    cabled = {r.name for r in res if r.check == "cabling"}
    assert {f"{lk.a.node}:{lk.a.interface} <-> {lk.b.node}:{lk.b.interface}"
            for lk in ss_links} <= cabled


def test_cross_pod_hops_as_planned(lab3):
    """cross-pod: 5 hops by TTL and by port counters, up through a super-spine; cross-group
    inside a pod: 3 hops, never above the pod spines; both equal the production plan's."""
    d = load_intent("rail-optimized-3tier-mini").design
    p = plan(Design(architecture=d.architecture, gpus=d.gpus, leaf=d.leaf, spine=d.spine,
                    tiers=d.tiers))
    assert p.tiers == 3 and p.hops["cross-pod"] == 5 == lab3.spec.expected_hops["cross-pod"]
    assert p.hops["cross-group"] == 3 == lab3.spec.expected_hops["cross-group"]
    res = {r.name: r for r in run_checks(lab3.spec, lab3.executor, only="hops")}
    pod = res["cross-pod srv1:gpu0 -> srv5:gpu0"]
    assert pod.status == "pass", pod.message()
    assert "5 hops by TTL, 5 by counters" in pod.observed
    assert "> superspine" in pod.observed and "p2-spine" in pod.observed
    grp = res["cross-group srv1:gpu0 -> srv3:gpu0"]
    assert grp.status == "pass" and "3 hops by TTL, 3 by counters" in grp.observed
    assert "superspine" not in grp.observed and "p2-" not in grp.observed


def test_cross_pod_ecmp_and_cabling_numbering(lab3):
    """A leaf reaches the other pod over both pod spines; the cabling rows name the
    production ports (CX864E-N 800G cages split 2 x 400G)."""
    res = run_checks(lab3.spec, lab3.executor, only="routes")
    far = [r for r in res if r.node == "g1-leaf1" and r.subject == "10.0.4.0/24"]
    assert far and far[0].status == "pass"
    assert "RIB 2-way via eth3,eth4; FIB 2-way via eth3,eth4" in far[0].observed
    cab = {r.name: r for r in run_checks(lab3.spec, lab3.executor, only="cabling")}
    assert cab["srv1 NIC 2"].expected.startswith("g1-leaf2:eth1 (rail 2) = Ethernet0, cage 1/1")
    up = cab["p1-spine1:eth5 <-> superspine1:eth1"]
    assert up.status == "pass" and "= Ethernet0, cage 1/1" in up.expected
    print(f"three-tier lab up and converged in {lab3.up_s:.1f} s")
