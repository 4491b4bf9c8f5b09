"""Root-free: the chance rule behind ``railab traffic``'s idle-uplink warning (issue 48).

A healthy leaf whose few ECMP flows all hashed onto fewer than all of its uplinks is luck, not a
fault. The warning is raised only when luck is unlikely for the whole run (every leaf the run
sent from is a draw) and then states the chance; the chance itself is checked against a brute
force enumeration of every way ``n`` flows can land on ``k`` uplinks.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from railab.traffic.engine import FlowResult, spread_warnings
from railab.traffic.patterns import flows_for
from railab.traffic.spreadchance import any_leaf_chance, idle_uplink_chance, percent

ROOT = Path(__file__).resolve().parents[1]


def _brute(k: int, n: int, used: int) -> float:
    """Share of the k^n equally likely assignments of n flows to k uplinks using <= used."""
    hits = sum(1 for a in itertools.product(range(k), repeat=n) if len(set(a)) <= used)
    return hits / k ** n


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7])
def test_chance_matches_brute_force(k, n):
    for used in range(0, k + 1):
        assert idle_uplink_chance(k, n, used) == pytest.approx(_brute(k, n, used), abs=1e-12), (k, n, used)
    assert idle_uplink_chance(k, n) == pytest.approx(_brute(k, n, k - 1), abs=1e-12)


def test_chance_closed_forms():
    for n in range(1, 30):
        assert idle_uplink_chance(2, n) == pytest.approx(2 * 0.5 ** n, rel=1e-12)
        # three uplinks: 3 (2/3)^n - 3 (1/3)^n (inclusion-exclusion, two terms)
        assert idle_uplink_chance(3, n) == pytest.approx(3 * (2 / 3) ** n - 3 * (1 / 3) ** n, rel=1e-9)
    assert idle_uplink_chance(2, 8) == pytest.approx(0.0078125)
    # mini-lossless: 8 uplinks per leaf; 32 flows still miss one about 11 % of the time
    assert 0.10 < idle_uplink_chance(8, 32) < 0.11
    assert 1e-3 < idle_uplink_chance(8, 64) < 2e-3
    assert idle_uplink_chance(8, 64, used=4) < idle_uplink_chance(8, 64, used=7)


def test_any_leaf_and_percent():
    assert any_leaf_chance([]) == 0.0
    assert any_leaf_chance([0.5, 0.5]) == pytest.approx(0.75)
    assert any_leaf_chance([0.0078125] * 16) == pytest.approx(1 - (1 - 0.0078125) ** 16)
    assert percent(0.0078125) == "0.78 %"
    assert percent(2 / 2 ** 16) == "0.0031 %"
    assert percent(0.118) == "12 %"
    assert percent(1e-9) == "< 0.0001 %"


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp("c") / "tc",
                 name="tc")
    return LabSpec.load(d)


def _uplinks(spec) -> dict[str, list[str]]:
    ups: dict[str, list[str]] = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            ups.setdefault(ln.a.node, []).append(f"{ln.a.node}:{ln.a.interface}>{ln.b.node}:{ln.b.interface}")
    return ups


def _run(spec, lopsided: int, others: bool) -> list[FlowResult]:
    """``lopsided`` flows from g1-leaf1, all on its first uplink; with ``others``, every other
    leaf's flows spread over both of its uplinks."""
    ups = _uplinks(spec)
    out, mine = [], 0
    for i, f in enumerate(flows_for(spec, "cross-group", n=64)):
        leaf = spec.nic(f.src[0], f.src_nic).leaf
        if leaf == "g1-leaf1":
            if mine >= lopsided:
                continue
            mine += 1
            up = ups[leaf][0]
        elif others:
            up = ups[leaf][i % 2]
        else:
            continue
        r = FlowResult(flow=f, sent=4, delivered=4, ttl=61, hops_counters=3)
        r.uplinks, r.spines = [up], [up.split(">")[1].split(":")[0]]
        out.append(r)
    assert mine == lopsided
    return out


def test_few_flows_on_a_healthy_leaf_are_not_a_warning(spec):
    """The issue's red herring: one healthy leaf's handful of flows on one of its 2 uplinks."""
    up = lambda node, ifn: True  # noqa: E731
    for n in (2, 4, 6):
        assert spread_warnings(spec, _run(spec, n, others=True), up) == []
    # 8 flows on one uplink: 0.78 % for that leaf alone, but the run sent from every leaf of
    # mini (8 draws): about 6 % that some healthy leaf looks like that, so no warning
    run = _run(spec, 8, others=True)
    assert len({r.uplinks[0].split(":")[0] for r in run}) > 1
    assert spread_warnings(spec, run, up) == []


def test_an_unlikely_spread_warns_and_says_how_likely(spec):
    up = lambda node, ifn: True  # noqa: E731
    # the same 8 flows with no other leaf in the run: 0.78 % < 1 %, said in the message
    w = spread_warnings(spec, _run(spec, 8, others=False), up)
    assert w == ["g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines with 8 flows although its "
                 "uplinks are up (chance on a healthy leaf: 0.78 %): run railab check"]
    # 12 flows on one uplink among 8 leaves: 0.049 % per leaf, 0.39 % for any of them
    run = _run(spec, 12, others=True)
    leaves = len({r.uplinks[0].split(":")[0] for r in run})
    w = spread_warnings(spec, run, up)
    p = idle_uplink_chance(2, 12, 1)
    assert p == pytest.approx(2 / 4096)
    assert w == [f"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines with 12 flows although its "
                 f"uplinks are up (chance on a healthy leaf: {percent(p)}, on any of the {leaves} "
                 f"leaves sent from: {percent(any_leaf_chance([p] * leaves))}): run railab check"]
    assert "0.049 %" in w[0]


def test_a_down_uplink_warns_whatever_the_flow_count(spec):
    """Chance is never the explanation for an uplink that is down: 2 flows are enough."""
    ups = _uplinks(spec)
    cut = ups["g1-leaf1"][1].split(">")[0]
    w = spread_warnings(spec, _run(spec, 2, others=True), lambda node, ifn: f"{node}:{ifn}" != cut)
    assert w == [f"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines ({cut} is down): run railab check"]
