"""RoCEv2 traffic on live labs (mini: Rail-optimized 2 groups x 4 rails, 2 spines; rail-only-512).

Hop counts are asserted as literal numbers from the seed guide (not read back from lab.json),
measured two ways (received TTL and switch port counters) that must agree.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from railab.traffic.engine import Engine, spread
from railab.traffic.patterns import Flow, PatternError, flows_for, hops, parse_endpoint, route
from railab.traffic.traceroute import format_path, switch_path, trace
from tests.conftest import swap_server_cables

ROOT = Path(__file__).resolve().parents[1]


# ---- root-free: NCCL path selection and expected hops from lab.json -------------------------
@pytest.fixture(scope="module")
def mini_spec(tmp_path_factory):
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp("t") / "tm", name="tm")
    return LabSpec.load(d)


def test_expected_hops_and_nccl_nic_choice(mini_spec):
    assert hops(mini_spec, "srv1:gpu0", "srv1:gpu3") == 0
    assert hops(mini_spec, "srv1:gpu2", "srv2:gpu2") == 1
    assert hops(mini_spec, "srv1:gpu0", "srv2:gpu3") == 3
    assert hops(mini_spec, "srv1:gpu0", "srv2:gpu3", pxn=True) == 1
    assert hops(mini_spec, "srv1:gpu1", "srv3:gpu1") == 3  # cross-group (srv3 is group 2)
    f = route(mini_spec, Flow(("srv1", 0), ("srv2", 3)))
    assert (f.src_nic, f.dst_nic, f.nvlink) == (1, 4, False)
    f = route(mini_spec, Flow(("srv1", 0), ("srv2", 3), pxn=True))
    assert (f.src_nic, f.dst_nic, f.nvlink) == (4, 4, True)  # NVLink to GPU3, then NIC 4
    with pytest.raises(PatternError, match="gpu0..gpu3"):
        parse_endpoint(mini_spec, "srv1:gpu9")
    with pytest.raises(PatternError, match="unknown pattern"):
        flows_for(mini_spec, "bogus")


def test_patterns_shapes(mini_spec):
    ring = flows_for(mini_spec, "ring", pxn=True)
    # channel 0: 4 servers x 4 GPUs, one edge per GPU; channels 1-3 (one per rail, issue 13):
    # their 4 inter-server edges each
    assert len(ring) == 4 * 4 + 3 * 4
    inter = [f for f in ring if f.src[0] != f.dst[0]]
    assert len(inter) == 16 and all(f.src_nic == f.dst_nic for f in inter)  # rail-aligned
    assert {f.dst_nic for f in inter} == {1, 2, 3, 4}  # every rail carries a channel
    a2a = flows_for(mini_spec, "all-to-all", sample=2)
    assert len(a2a) == 8 * 7 and {f.src[0] for f in a2a} == {"srv1", "srv3"}  # both groups
    assert len(flows_for(mini_spec, "cross-group", n=10)) == 10


# ---- live ------------------------------------------------------------------------------------


def _engine(lab) -> Engine:
    ns = lab.record["namespaces"]
    return Engine(lab.spec, lambda node: ns[node])


@pytest.fixture(scope="module")
def mini_engine(mini_lab):
    with _engine(mini_lab) as eng:
        yield eng


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("pattern,pxn,want", [
    ("intra-server", False, 0),
    ("intra-rail", False, 1),
    ("inter-rail", False, 3),
    ("inter-rail", True, 1),
    ("cross-group", False, 3),
])
def test_mini_hops(mini_engine, mini_lab, pattern, pxn, want):
    spec = mini_lab.spec
    results = mini_engine.run(flows_for(spec, pattern, pxn=pxn), measure=True)
    assert results
    for r in results:
        assert r.delivered == r.sent > 0 and r.lost == 0, r.to_dict()
        assert r.icrc_errors == 0 and r.duplicates == 0 and r.out_of_order == 0
        assert r.hops_ttl == want and r.hops_counters == want, r.to_dict()
        assert r.ok, r.verdict
        src = spec.nic(r.flow.src[0], r.flow.src_nic)
        dst = spec.nic(r.flow.dst[0], r.flow.dst_nic)
        if want == 0:
            assert r.switches == [] and r.flow.nvlink
        elif want == 1:
            assert r.switches == [src.leaf] == [dst.leaf]
        else:
            assert [p.split(":")[0] for p in r.path] == [src.leaf, r.spines[0], dst.leaf]
            assert r.spines[0].startswith("spine")
        if pxn:
            assert r.flow.nvlink and r.flow.src_nic == r.flow.dst_nic


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_mini_acks_and_throughput_mode(mini_engine, mini_lab):
    flows = flows_for(mini_lab.spec, "all-to-all", sample=2, messages=2)
    results = mini_engine.run(flows)
    assert all(r.ok for r in results), [r.verdict for r in results if not r.ok]
    assert all(r.acks == r.flow.messages for r in results)  # one ACK (AETH) per message back


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_mini_spread_uses_every_spine(mini_engine, mini_lab):
    spec = mini_lab.spec
    results = mini_engine.run(flows_for(spec, "cross-group", n=24), measure=True)
    assert all(r.ok for r in results), [r.to_dict() for r in results if not r.ok]
    sp = spread(spec, results)
    assert set(sp.per_spine) == {n.name for n in spec.by_role("spine")}
    assert all(v > 0 for v in sp.per_spine.values()), sp.per_spine
    assert sum(sp.per_spine.values()) == 24
    assert 1.0 <= sp.imbalance(sp.per_spine) < 2.0


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_mini_traceroute_names_the_flow_path(mini_engine, mini_lab):
    spec = mini_lab.spec
    flows = flows_for(spec, "cross-group", n=8)
    measured = mini_engine.run(flows, measure=True)
    seen_spines = set()
    for f, r in zip(flows, measured, strict=True):
        hops_ = trace(mini_engine, f)
        names = switch_path(hops_)
        src = spec.nic(f.src[0], f.src_nic)
        dst = spec.nic(f.dst[0], f.dst_nic)
        assert names == [src.leaf, r.spines[0], dst.leaf], format_path(hops_)
        assert hops_[-1].kind == "destination" and hops_[-1].node == f"{f.dst[0]}:eth{f.dst_nic}"
        seen_spines.add(names[1])
    assert len(seen_spines) >= 2  # the probes follow each flow's own ECMP choice


@pytest.fixture(scope="module")
def cut_lab(tmp_path_factory):
    """A dedicated mini lab for the link-cut test, so the shared session lab is never degraded
    while the cut lasts (the session lab's other users expect full ECMP)."""
    from conftest import integration_skip_reason

    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    from railab.checks.deploy import bring_up
    from railab.testbed.runtime.netns.deploy import NetnsDeployer
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    name = f"tc{os.getpid()}"
    rt = NetnsDeployer()
    try:
        d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp(name) / name,
                     name=name)
        record = bring_up(rt, d)
        spec = LabSpec.load(d)
        with Engine(spec, lambda node: record["namespaces"][node]) as eng:
            yield spec, eng
    finally:
        rt.down(name)


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_cut_leaf_spine_link_is_never_silent(cut_lab):
    spec, eng = cut_lab
    flow = flows_for(spec, "cross-group", messages=8)[0]
    before = eng.run([flow], measure=True)[0]
    assert before.ok and len(before.path) == 3
    leaf, port = before.path[0].split(":")
    spine = before.spines[0]
    eng.set_link(leaf, port, up=False)
    try:
        cut = eng.run([flow], measure=True)[0]
    finally:
        eng.set_link(leaf, port, up=True)
    # the cut shows: either packets were lost or the flow moved to another spine
    assert cut.lost > 0 or (cut.spines and cut.spines != [spine]), cut.to_dict()
    assert not (cut.ok and cut.path == before.path)
    if cut.lost == 0:
        assert cut.hops_ttl == cut.hops_counters == 3 and cut.path[0] != before.path[0]


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_railonly_inter_rail(railonly_lab):
    spec = railonly_lab.spec
    with _engine(railonly_lab) as eng:
        no_pxn = eng.run(flows_for(spec, "inter-rail", messages=2), measure=True, timeout=0.3)
        with_pxn = eng.run(flows_for(spec, "inter-rail", pxn=True, messages=2), measure=True)
    unreachable = [r for r in no_pxn if spec.nic(r.flow.src[0], r.flow.src_nic).leaf
                   != spec.nic(r.flow.dst[0], r.flow.dst_nic).leaf]
    assert unreachable, "rail-only-512 has rails on different leaves"
    for r in unreachable:
        assert r.flow.expected_hops is None
        assert r.delivered == 0 and r.lost == r.sent > 0, r.to_dict()
        assert r.ok and r.verdict == "unreachable (expected)"
    for r in no_pxn:
        if r not in unreachable:
            assert r.delivered == r.sent and r.hops_ttl == r.hops_counters == 1
    for r in with_pxn:
        assert r.ok and r.hops_ttl == r.hops_counters == 1 and r.flow.nvlink, r.to_dict()


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_cli_traffic_json(mini_lab, capsys):
    from railab.cli import app

    rc = app(["traffic", str(mini_lab.dir), "--pattern", "intra-rail", "--json"],
             standalone_mode=False)
    out = json.loads(capsys.readouterr().out)
    assert not rc and out["failed"] == 0
    # every NIC covered (issue 13): each group's two servers, every rail
    assert [f["hops_ttl"] for f in out["flows"]] == [1] * (len(mini_lab.spec.nics) // 2)
    assert out["sampled"] == "sampled 8 of 16 intra-rail GPU pairs (8 flows)"
    assert out["coverage"]["nics"] == len(mini_lab.spec.nics) and not out["coverage"]["sampled"]


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_engine_open_reads_each_switch_once(mini_lab, monkeypatch):
    """Issue 12: `Engine.open` dumped a leaf's links once per NIC (230 s for 8 flows on the
    full-size 1024-GPU lab). Now one link dump per switch namespace, none per NIC, and the
    port counters agree with pyroute2's reading of the same kernel counters."""
    from pyroute2 import IPRoute

    from railab.traffic import engine as E

    calls: list[int] = []
    real = E.Rtnl.links
    monkeypatch.setattr(E.Rtnl, "links", lambda self: calls.append(1) or real(self))
    spec = mini_lab.spec
    switches = [n.name for n in spec.nodes if n.role != "server"]
    with _engine(mini_lab) as eng:
        assert len(calls) == len(switches) < len(spec.nics)
        mine = eng.port_stats()
        with IPRoute(netns=mini_lab.netns_of("g1-leaf1"), flags=0) as ipr:
            theirs = {ln.get("ifname"): ln.get("stats64") for ln in ipr.get_links()}
        for (node, ifn), (rxp, txp, rxb, txb) in mine.items():
            if node == "g1-leaf1":
                st = theirs[ifn]  # read after: counters only grow, by background at most
                assert rxp <= st["rx_packets"] <= rxp + 50 and txp <= st["tx_packets"] <= txp + 50
                assert rxb <= st["rx_bytes"] and txb <= st["tx_bytes"]
        assert {n for n, _ in mine} == set(switches) and len(calls) == len(switches)


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_counter_hops_survive_a_long_window_of_real_background(mini_engine, mini_lab, monkeypatch):
    """Issue 12's failure, reproduced on the mini lab: hold a measured flow's counter window open
    for 10 s, as the slow reads of the full-size fabric did. The lab's own BFD/BGP/RA frames
    move fabric ports by more than half the flow's packets meanwhile (asserted, so the test is
    real), yet the counters name exactly the flow's 3 switches and its path."""
    spec = mini_lab.spec
    flow = flows_for(spec, "cross-group", size=1024, messages=64, mtu=1024)[0]
    snaps: list[dict] = []
    real_stats, real_batch = mini_engine.port_stats, mini_engine._run_batch

    def stats():
        snaps.append(real_stats())
        return snaps[-1]

    def slow_batch(*a, **kw):
        real_batch(*a, **kw)
        time.sleep(10)

    monkeypatch.setattr(mini_engine, "port_stats", stats)
    monkeypatch.setattr(mini_engine, "_run_batch", slow_batch)
    (r,) = mini_engine.run([flow], measure=True, timeout=0.3)
    before, after = snaps[-2], snaps[-1]
    on_path = {p.split(":")[0] for p in r.path}
    noisy = [k for k in after if k[0] not in on_path and after[k][0] - before[k][0] >= r.sent // 2]
    assert noisy, "no port took half a flow of background in 10 s: the window proves nothing"
    src, dst = spec.nic(flow.src[0], flow.src_nic), spec.nic(flow.dst[0], flow.dst_nic)
    assert r.ok and r.hops_ttl == r.hops_counters == 3, r.to_dict()
    assert r.switches == [src.leaf, r.spines[0], dst.leaf], (r.switches, noisy)


def _run_until(eng, flows, ok: bool, tries: int = 20):
    """Links just came back up: wait (at most ~4 s) until every flow's ok is ``ok``."""
    import time

    for _ in range(tries):
        res = eng.run(flows, measure=True, timeout=0.3)
        if all(r.ok == ok for r in res):
            return res
        time.sleep(0.2)
    return res


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_swapped_server_cables_fail_with_a_cabling_verdict(cut_lab):
    from railab.testbed.labref import resolve

    spec, _ = cut_lab
    netns_of = resolve(spec.name).netns_of
    into = [f for f in flows_for(spec, "intra-rail") if f.src[0] == "srv1"]  # srv1 -> srv2, every rail
    out_of = [route(spec, Flow(("srv2", 0), ("srv1", 0)))]
    swap_server_cables(netns_of("srv2"))
    try:
        with Engine(spec, netns_of) as eng:  # a fresh engine, like `railab traffic`
            res = {r.flow.dst[1]: r for r in _run_until(eng, into[:1], ok=False) + eng.run(into, measure=True)}
            back = eng.run(out_of, measure=True, timeout=0.3)[0]
    finally:
        swap_server_cables(netns_of("srv2"))
    assert res[0].verdict == "arrived on srv2:eth3, expected eth1 (NIC 1): check cabling", res[0].to_dict()
    assert res[2].verdict == "arrived on srv2:eth1, expected eth3 (NIC 3): check cabling", res[2].to_dict()
    assert res[1].ok and res[3].ok and not res[0].ok and not res[2].ok
    assert res[0].delivered == res[0].sent  # the packets did arrive: only the wiring is wrong
    assert not back.ok and back.egress == "srv2:eth1"
    leaf1 = spec.nic("srv2", 1)
    assert back.expected_egress_to == f"{leaf1.leaf}:{leaf1.leaf_port}"
    assert back.egress_to == f"{spec.nic('srv2', 3).leaf}:{spec.nic('srv2', 3).leaf_port}", back.to_dict()
    assert "check cabling" in back.verdict
    with Engine(spec, netns_of) as eng:  # swapped back: all good again
        assert all(r.ok for r in _run_until(eng, into, ok=True)), "swap not restored"


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_cli_warns_when_a_leaf_loses_an_uplink(cut_lab, capsys):
    """Traffic reroutes around a cut leaf-spine link (exit 0) but the output says so."""
    from railab.cli import app

    spec, eng = cut_lab
    up = next(ln for ln in spec.links if ln.role == "leaf-spine" and ln.a.node == "g1-leaf1")
    eng.set_link(up.a.node, up.a.interface, up=False)
    try:
        for _ in range(10):  # the cut may still be converging: the rerouted run is all ok
            rc = app(["traffic", spec.name, "-p", "cross-group", "--flows", "16"],
                     standalone_mode=False)
            out = capsys.readouterr().out
            if not rc:
                break
            time.sleep(0.3)
    finally:
        eng.set_link(up.a.node, up.a.interface, up=True)
    assert not rc, out
    assert "16/16 flows as expected" in out
    assert (f"warning: g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines "
            f"(g1-leaf1:{up.a.interface} is down): run railab check") in out, out
    _run_until(eng, flows_for(spec, "cross-group"), ok=True)  # leave the lab converged


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_cli_traffic_interrupted(mini_lab, capsys):
    """Ctrl-C during `railab traffic`: `error: interrupted`, exit 130, every socket closed."""
    import signal
    import threading

    from railab.cli import app

    def fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    before = fds()
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        rc = app(["traffic", mini_lab.name, "-p", "all-to-all", "--flows", "2000"],
                 standalone_mode=False)
    finally:
        timer.cancel()
    err = capsys.readouterr().err
    assert rc == 130 and "error: interrupted" in err, (rc, err)
    leaked = {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in fds() - before
              if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not {fd: t for fd, t in leaked.items() if "socket" in t}, leaked
