"""ECMP under load on a real lab with 4 uplinks per leaf (tests/data/intents/ecmp-4up.yml: 2 leaves,
4 spines, one server each, so every flow crosses a spine): with one fixed UDP source port every
QP of a NIC pair hashes onto one uplink (its share >= 2x the fair share); per-QP entropy (Linux
rdma_get_udp_sport) spreads them; the L3 hash policy collapses them again whatever the ports.
The hash seed is set for the run (deterministic) and restored after; uplink bytes are counted
from port counters net of the lab's BGP/BFD/ND background."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.checks.deploy import bring_up
from railab.cli import app
from railab.testbed.runtime.netns import NetnsRuntime
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name
from railab.traffic import ecmp
from railab.traffic.patterns import Flow, route

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

INTENT = Path(__file__).resolve().parent / "data" / "intents" / "ecmp-4up.yml"
QPS = 16
FLOW_BYTES = 256 * 1024


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from conftest import integration_skip_reason

    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"e{os.getpid()}"
    labdir = generate(INTENT, tmp_path_factory.mktemp(name) / name, name=name)
    try:
        bring_up(NetnsRuntime(), labdir)
        yield LabSpec.load(labdir)
    finally:
        NetnsRuntime().down(name)


def _netns(spec):
    return lambda node: netns_name(spec.name, node)


def _flows(spec, mode: str) -> list[Flow]:
    # QPS QPs of one connection srv1:gpu0 -> srv2:gpu0 (cross-group: leaf, spine, leaf)
    fl = [route(spec, Flow(("srv1", 0), ("srv2", 0), qp=q, mtu=4096)) for q in range(QPS)]
    assert {f.expected_hops for f in fl} == {3}
    return ecmp.pace([ecmp.size_flow(f, FLOW_BYTES) for f in fl], 200.0)


def test_fixed_source_port_loads_one_uplink_per_qp_entropy_spreads(lab):
    before = ecmp.read_hashing(lab, _netns(lab))
    fixed = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "fixed"), sport_mode="fixed",
                          background_s=0.5)
    spread = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), sport_mode="per-qp",
                           background_s=0.5)
    assert fixed.lost == 0 and spread.lost == 0
    f, s = fixed.load.leaves["g1-leaf1"], spread.load.leaves["g1-leaf1"]
    assert f.uplink_count == s.uplink_count == 4
    assert f.max_share_ratio >= 2.0, f.to_dict()  # one uplink: share 1.0 = 4x the fair share
    assert sorted(f.share.values())[-2] < 0.02, f.to_dict()  # the others carry background only
    assert s.max_share_ratio < 2.0, s.to_dict()
    assert sum(1 for v in s.share.values() if v > 0.1) >= 3, s.to_dict()
    # net of background, the uplinks carried the flows' frames (RoCE headers + payload)
    frames = QPS * FLOW_BYTES * (4096 + 74) / 4096
    assert f.total == pytest.approx(frames, rel=0.05)
    assert s.total == pytest.approx(frames, rel=0.05)
    assert ecmp.read_hashing(lab, _netns(lab)) == before  # the run's seed and policy are undone


def test_same_seed_same_uplinks_and_l3_ignores_the_ports(lab):
    a = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), background_s=0.3)
    b = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), background_s=0.3)
    sa, sb = a.load.leaves["g1-leaf1"].share, b.load.leaves["g1-leaf1"].share
    assert all(abs(sa[k] - sb[k]) < 0.02 for k in sa), (sa, sb)  # deterministic with the seed
    l3 = ecmp.run_ecmp(lab, _netns(lab), _flows(lab, "per-qp"), policy="l3", background_s=0.3)
    assert l3.load.leaves["g1-leaf1"].max_share_ratio >= 3.9, l3.load.to_dict()


def test_collective_cli_reports_the_collision_slowdown(lab):
    r = CliRunner().invoke(app, ["collective", lab.name, "all-reduce", "--bytes", "1M",
                                 "--qps", "16", "--compare-sport", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["completed"] and out["compare_sport"]["fixed"]["completed"]
    per_qp = out["uplink_load"]["leaves"]["g1-leaf1"]
    fixed = out["compare_sport"]["fixed"]["uplink_load"]["leaves"]["g1-leaf1"]
    assert fixed["max_share_ratio"] >= 2.0 > per_qp["max_share_ratio"], (fixed, per_qp)
    assert out["compare_sport"]["slowdown"] is not None


def test_ecmp_cli_compares_source_port_modes(lab):
    r = CliRunner().invoke(app, ["ecmp", lab.name, "srv1:gpu0", "srv2:gpu0", "--qps", "16",
                                 "--bytes", "64K", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["leaf"] == "g1-leaf1"
    per_qp = out["runs"]["per-qp"]["uplink_load"]["leaves"]["g1-leaf1"]
    fixed = out["runs"]["fixed"]["uplink_load"]["leaves"]["g1-leaf1"]
    assert fixed["max_share_ratio"] >= 2.0 > per_qp["max_share_ratio"]
    assert out["runs"]["fixed"]["lost"] == 0
    bad = CliRunner().invoke(app, ["ecmp", lab.name, "srv1:gpu0", "srv1:gpu0"])
    assert bad.exit_code == 2 and "does not cross the spines" in bad.output
