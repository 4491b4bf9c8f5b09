"""Probe-stream statistics on synthetic sequences (railab.traffic.stream.SeqStats): gaps,
reordering (RFC 4737), duplicates, latency; and the drill's pure helpers. No root, no lab."""

from __future__ import annotations

import pytest

from railab.traffic.stream import SeqStats, flow_sport

RATE = 1000.0  # 1 ms between probes


def _stream(n: int, rate: float = RATE) -> tuple[SeqStats, list[float]]:
    s = SeqStats(rate)
    ts = [10.0 + i / rate for i in range(n)]
    for t in ts:
        s.sent(t)
    return s, ts


def test_clean_stream_has_no_loss_and_latency_from_send_time():
    s, ts = _stream(100)
    for i, t in enumerate(ts):
        assert s.received(i, t + 50e-6) == "new"
    out = s.summary()
    assert (out["tx"], out["rx"], out["lost"], out["loss_pct"]) == (100, 100, 0, 0.0)
    assert out["longest_gap_ms"] == 0.0 and out["outages"] == []
    assert out["reordered"] == out["duplicate"] == out["stray"] == 0
    assert out["latency_us"] == {"min": 50.0, "avg": 50.0, "max": 50.0}


def test_gap_lasts_from_first_lost_send_to_first_delivered_send():
    s, ts = _stream(1000)
    lost = set(range(200, 250)) | {700}  # a 50 ms outage and a single lost probe
    for i, t in enumerate(ts):
        if i not in lost:
            s.received(i, t + 1e-4)
    out = s.summary()
    assert out["lost"] == 51 and out["loss_pct"] == pytest.approx(5.1)
    assert [o["packets"] for o in out["outages"]] == [50, 1]
    assert out["outages"][0]["ms"] == pytest.approx(50.0, abs=1e-6)
    assert out["outages"][1]["ms"] == pytest.approx(1.0, abs=1e-6)  # resolution = 1 / rate
    assert out["longest_gap_ms"] == pytest.approx(50.0, abs=1e-6)
    assert all(o["recovered"] for o in out["outages"])


def test_trailing_loss_is_an_unrecovered_outage_to_the_end_of_sending():
    s, ts = _stream(100)
    for i in range(90):
        s.received(i, ts[i])
    s.end = ts[-1] + 0.001
    (o,) = s.outages()
    assert (o.first, o.packets, o.recovered) == (90, 10, False)
    assert o.ms == pytest.approx(10.0, abs=1e-6)


def test_reordered_per_rfc4737_and_not_lost():
    s, ts = _stream(10)
    order = [0, 1, 3, 2, 4, 6, 7, 5, 8, 9]  # 2 and 5 arrive late
    kinds = [s.received(i, ts[i] + 0.002) for i in order]
    assert kinds.count("reordered") == 2
    assert [order[k] for k, v in enumerate(kinds) if v == "reordered"] == [2, 5]
    out = s.summary()
    assert out["reordered"] == 2 and out["lost"] == 0 and out["outages"] == []


def test_one_early_packet_reorders_only_the_late_ones():
    s, ts = _stream(6)
    for i in [5, 0, 1, 2, 3, 4]:  # index 5 overtakes: 0..4 are all below NextExp = 6
        s.received(i, ts[-1])
    assert s.reordered == 5


def test_duplicates_are_counted_once_each_and_never_as_delivered():
    s, ts = _stream(5)
    for i in [0, 1, 1, 2, 2, 2, 3, 4]:
        s.received(i, ts[i])
    out = s.summary()
    assert out["rx"] == 5 and out["duplicate"] == 3 and out["lost"] == 0


def test_strays_and_unsent_indexes_do_not_count():
    s, ts = _stream(3)
    assert s.received(3, ts[-1]) == "stray"
    assert s.received(-1, ts[-1]) == "stray"
    assert s.summary()["rx"] == 0 and s.summary()["stray"] == 2


def test_all_lost_has_no_latency_and_one_outage():
    s, ts = _stream(20)
    out = s.summary()
    assert out["lost"] == 20 and out["loss_pct"] == 100.0 and out["latency_us"] is None
    assert len(out["outages"]) == 1 and out["outages"][0]["recovered"] is False


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate"):
        SeqStats(0)


# ---- the drill's pure helpers (railab.checks.drill) ------------------------------------------
from railab.checks import drill as D  # noqa: E402
from railab.errors import UsageError  # noqa: E402
from railab.topologies.generator import generate  # noqa: E402
from railab.topologies.labspec import LabSpec  # noqa: E402


@pytest.fixture(scope="module")
def mini_spec(tmp_path_factory) -> LabSpec:
    return LabSpec.load(generate("mini", tmp_path_factory.mktemp("drill") / "lab", name="drillunit"))


def _out(start: float, ms: float, packets: int, recovered: bool = True) -> dict:
    return {"start": start, "end": start + ms / 1000, "ms": ms, "packets": packets, "recovered": recovered}


def test_phase_loss_splits_by_injection_and_heal_and_times_the_reroute():
    flow = {"outages": [_out(0.5, 2, 2), _out(10.1, 140, 140), _out(20.5, 3, 3)]}
    ph = D._phase_loss(flow, t_inject=10.0, t_heal=20.0)
    assert (ph["lost_before_fault"], ph["lost_during_fault"], ph["lost_after_heal"]) == (2, 140, 3)
    assert ph["reroute_s"] == pytest.approx(0.24) and not ph["recovered_only_at_heal"]
    assert [o["at_s"] for o in ph["outages"]] == [-9.5, 0.1, 10.5]


def test_phase_loss_of_a_flow_that_only_recovers_at_the_heal():
    ph = D._phase_loss({"outages": [_out(10.2, 9900, 9900)]}, t_inject=10.0, t_heal=20.0)
    assert ph["reroute_s"] is None and ph["recovered_only_at_heal"]
    assert D._phase_loss({"outages": []}, 10.0, 20.0)["reroute_s"] == 0.0  # hitless


def test_default_hold_follows_the_detection_time():
    assert D.default_duration(True, 1500) == pytest.approx(5.25)
    assert D.default_duration(False, 1500) == pytest.approx(16.5)  # BGP hold 9 s
    assert D.default_duration(True, 100) == 4.0


def test_element_of_a_link_a_node_and_bad_input(mini_spec):
    el = D.element_of(mini_spec, "link-down", "g1-leaf1", "spine1", None)
    assert el.links == {"g1-leaf1:eth3--spine1:eth1"} and el.ends[0] == ("g1-leaf1", "eth3")
    far = D.element_of(mini_spec, "grey-loss", "g1-leaf1", "spine1", None, end="spine1")
    assert far.ends[0] == ("spine1", "eth1") and far.links == el.links
    assert D.element_of(mini_spec, "node-off", "spine2", None, None).nodes == {"spine2"}
    with pytest.raises(UsageError, match="spine9"):
        D.element_of(mini_spec, "link-down", "g1-leaf1", "spine9", None)
    with pytest.raises(UsageError, match="one node"):
        D.element_of(mini_spec, "node-off", "spine1", "spine2", None)
    with pytest.raises(UsageError, match="unknown fault kind"):
        D.element_of(mini_spec, "meteor", "spine1", None, None)


def test_crossing_and_touching_are_decided_by_the_traced_links(mini_spec):
    el = D.element_of(mini_spec, "link-down", "g1-leaf1", "spine1", None)
    over = D.Trace(hops=[("g1-leaf1", "eth1", "eth3"), ("spine1", "eth1", "eth2")],
                   links=["g1-leaf1:eth3--spine1:eth1"], delivered=True)
    beside = D.Trace(hops=[("g1-leaf1", "eth1", "eth4"), ("spine2", "eth1", "eth2")],
                     links=["g1-leaf1:eth4--spine2:eth1"], delivered=True)
    away = D.Trace(hops=[("g1-leaf2", "eth1", "eth4")], links=["g1-leaf2:eth4--spine2:eth2"])
    assert el.crossed_by(over) and not el.crossed_by(beside) and not el.crossed_by(away)
    assert el.touches(beside) and not el.touches(away)
    srv = D.element_of(mini_spec, "node-off", "srv1", None, None)  # a server: its NIC cables
    assert srv.crossed_by(D.Trace(hops=[("g1-leaf1", "eth1", "eth3")], links=["g1-leaf1:eth1--srv1:eth1"]))
    assert not srv.crossed_by(away)


def test_candidates_are_every_nic_pair_on_different_leaves(mini_spec):
    flows = D.candidate_flows(mini_spec, qps=2)
    nics = len(mini_spec.nics)  # 16 on mini: 4 servers x 4 NICs, 2 servers per leaf
    # not to itself's leaf (itself, the other server's NIC of that rail), not inside its server
    # (NVLink: never on the fabric)
    assert len(flows) == nics * (nics - 2 - 3) * 2
    assert all(f.path_class and f.path_class != "intra-server" for f in flows)
    assert len({flow_sport(f) for f in flows}) > len(flows) // 2  # QPs vary the UDP source port


def test_candidates_of_a_large_fabric_are_a_fixed_sample_near_the_element():
    """Above CANDIDATE_LIMIT (a full fabric: rail-optimized-1024-full's 1024 NICs are 4 million
    flows x QPs) the drill traces a sample: at most the limit, the same every run, half with an
    end on the element's leaf, every flow between NICs of different leaves and servers."""
    from railab.topologies.generator import build_lab
    from railab.topologies.intent import load_intent

    spec = build_lab(load_intent("rail-optimized-1024-full")).spec
    near = frozenset({"g2-leaf3", "spine5"})
    flows = D.candidate_flows(spec, qps=2, near=near, limit=4000)
    assert 3000 < len(flows) <= 4000
    assert [f.name for f in flows] == [f.name for f in D.candidate_flows(spec, qps=2, near=near, limit=4000)]
    leaf_of = {(n.server, n.gpu): n.leaf for n in spec.nics}
    on_leaf = [f for f in flows if "g2-leaf3" in (leaf_of[f.src], leaf_of[f.dst])]
    assert len(on_leaf) >= len(flows) // 2 - 2  # the 16 leaves' 1/8 share alone would be ~12 %
    assert {leaf_of[f.src] == "g2-leaf3" for f in on_leaf} == {True, False}  # both directions
    assert all(leaf_of[f.src] != leaf_of[f.dst] and f.src[0] != f.dst[0] for f in flows)


def test_spread_balances_directions_and_nic_pairs(mini_spec):
    flows = D.candidate_flows(mini_spec, qps=2)
    items = [(f, D.Trace()) for f in flows[::7]]
    picked = D._spread(items, 6, lambda f, t: f.src[0] == "srv1")
    assert len(picked) == 6
    assert len({(f.src_nic, f.dst_nic, f.src, f.dst) for f, _ in picked}) == 6
    assert {f.src[0] == "srv1" for f, _ in picked} == {True, False}
