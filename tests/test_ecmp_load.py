"""ECMP under load on ``mini-lossless`` (8 uplinks per leaf: 4 spines x 2 links; the session's
``lossless_lab``): with one fixed UDP source port every QP of a connection srv1:gpu0 -> srv9:gpu0
(cross-group: leaf, spine, leaf) hashes onto one uplink (its share >= 2x the fair share); per-QP
entropy (Linux rdma_get_udp_sport) spreads them; the L3 hash policy collapses them again.
The hash seed is set for the run (deterministic) and restored after; uplink bytes are counted
from port counters net of the lab's BGP/BFD/ND background."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.topologies.naming import netns_name
from railab.traffic import ecmp
from railab.traffic.patterns import Flow, route

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

QPS = 32
FLOW_BYTES = 64 * 1024
LEAF = "g1-leaf1"


@pytest.fixture(scope="module")
def lab(lossless_lab):
    return lossless_lab.spec


def _netns(spec):
    return lambda node: netns_name(spec.name, node)


def _flows(spec, mode: str) -> list[Flow]:
    # QPS QPs of one connection srv1:gpu0 -> srv9:gpu0 (cross-group: leaf, spine, leaf)
    fl = [route(spec, Flow(("srv1", 0), ("srv9", 0), qp=q, mtu=4096)) for q in range(QPS)]
    assert {f.expected_hops for f in fl} == {3}
    return ecmp.pace([ecmp.size_flow(f, FLOW_BYTES) for f in fl], spec.qos.capacity.port_rate_mbps)


def test_fixed_source_port_loads_one_uplink_per_qp_entropy_spreads(lab):
    before = ecmp.read_hashing(lab, _netns(lab))
    fixed = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "fixed"), sport_mode="fixed",
                          background_s=0.5)
    spread = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), sport_mode="per-qp",
                           background_s=0.5)
    assert fixed.lost == 0 and spread.lost == 0
    f, s = fixed.load.leaves[LEAF], spread.load.leaves[LEAF]
    assert f.uplink_count == s.uplink_count == 8
    assert f.max_share_ratio >= 2.0, f.to_dict()  # one uplink: share 1.0 = 8x the fair share
    assert sorted(f.share.values())[-2] < 0.02, f.to_dict()  # the others carry background only
    assert s.max_share_ratio < 2.0, s.to_dict()
    assert sum(1 for v in s.share.values() if v > 0.02) >= 6, s.to_dict()
    # net of background, the uplinks carried the flows' frames (RoCE headers + payload)
    frames = QPS * FLOW_BYTES * (4096 + 74) / 4096
    assert f.total == pytest.approx(frames, rel=0.05)
    assert s.total == pytest.approx(frames, rel=0.05)
    assert ecmp.read_hashing(lab, _netns(lab)) == before  # the run's seed and policy are undone


def test_same_seed_same_uplinks_and_l3_ignores_the_ports(lab):
    a = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), background_s=0.3)
    b = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), background_s=0.3)
    sa, sb = a.load.leaves[LEAF].share, b.load.leaves[LEAF].share
    assert all(abs(sa[k] - sb[k]) < 0.02 for k in sa), (sa, sb)  # deterministic with the seed
    l3 = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), policy="l3", background_s=0.3)
    assert l3.load.leaves[LEAF].max_share_ratio >= 7.5, l3.load.to_dict()


def test_ecmp_cli_compares_source_port_modes(lab):
    r = CliRunner().invoke(app, ["ecmp", lab.name, "srv1:gpu0", "srv9:gpu0", "--qps", str(QPS),
                                 "--bytes", "64K", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["leaf"] == "g1-leaf1"
    per_qp = out["runs"]["per-qp"]["uplink_load"]["leaves"][LEAF]
    fixed = out["runs"]["fixed"]["uplink_load"]["leaves"][LEAF]
    assert fixed["max_share_ratio"] >= 2.0 > per_qp["max_share_ratio"]
    assert out["runs"]["fixed"]["lost"] == 0
    bad = CliRunner().invoke(app, ["ecmp", lab.name, "srv1:gpu0", "srv1:gpu0"])
    assert bad.exit_code == 2 and "does not cross the spines" in bad.output
