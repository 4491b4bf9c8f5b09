"""railab collective: the NCCL-style schedules (pure), nccl-tests' bandwidth figures, the CLI's
options and exit codes, and (integration) all-to-all / all-reduce on real labs: Rail-only inter-rail
traffic without PXN is unreachable by design, with PXN it completes."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.cli.collective import parse_bytes
from railab.errors import UsageError
from railab.testbed import dilation
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.traffic.collective import (
    COLLECTIVE_MTU,
    CollectiveResult,
    bandwidth,
    bus_factor,
    fitting_rate_mbps,
    schedule,
    slowdown,
    straggler_wait_s,
)
from railab.traffic.ecmp import LeafLoad, collision_chance, flow_sport, pace, size_flow

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp("c") / "cm",
                 name="cm")
    return LabSpec.load(d)


@pytest.fixture(scope="module")
def railonly(tmp_path_factory):
    d = generate(ROOT / "topologies" / "intents" / "rail-only-512.yml",
                 tmp_path_factory.mktemp("c") / "cro", name="cro")
    return LabSpec.load(d)


def test_bus_factors_are_nccl_tests():
    assert bus_factor("all-reduce", 16) == pytest.approx(2 * 15 / 16)
    assert bus_factor("all-to-all", 16) == pytest.approx(15 / 16)
    assert bus_factor("all-reduce", 1) == 0.0
    alg, bus = bandwidth("all-reduce", 1 << 20, 8, 0.5)
    assert alg == pytest.approx((1 << 20) * 8 / 0.5 / 1e9)
    assert bus == pytest.approx(alg * 2 * 7 / 8)
    with pytest.raises(UsageError):
        bus_factor("broadcast", 4)
    with pytest.raises(ValueError):
        bandwidth("all-to-all", 1, 2, 0.0)


def test_all_reduce_is_one_ring_per_rail_over_the_servers(mini):
    s = schedule(mini, "all-reduce", 1 << 20)
    G, S = mini.gpus_per_server, len(mini.by_role("server"))
    n = G * S
    assert s.ranks == n == 16
    assert len(s.flows) == G * S  # one flow per (rail, server): server k -> k+1 on that rail
    per = math.ceil(2 * (n - 1) / n * (1 << 20) / G)
    assert set(s.flow_bytes) == {per}
    for f in s.flows:
        assert f.src[1] == f.dst[1] and f.src_nic == f.dst_nic  # rail-aligned
        assert f.src[0] != f.dst[0]
        assert f.mtu == COLLECTIVE_MTU
        assert f.size * f.messages >= per > f.size * (f.messages - 1)
    # every server sends once and receives once per rail
    for r in range(G):
        ring = [f for f in s.flows if f.src[1] == r]
        assert sorted(f.src[0] for f in ring) == sorted(f.dst[0] for f in ring)
    assert s.by_class() == {"intra-rail": 8, "cross-group": 8}  # srv2->srv3, srv4->srv1 cross groups
    assert not s.unreachable
    # NVLink carries the rest of each ring: G channels x S servers x (G-1) hops
    assert s.nvlink_bytes == per * G * S * (G - 1)


def test_pxn_changes_nothing_for_all_reduce(mini):
    a, b = schedule(mini, "all-reduce", 1 << 20), schedule(mini, "all-reduce", 1 << 20, pxn=True)
    assert [(f.src_nic, f.dst_nic, f.path_class) for f in a.flows] == \
           [(f.src_nic, f.dst_nic, f.path_class) for f in b.flows]
    assert any("changes nothing" in n for n in b.notes)


def test_all_to_all_sends_bytes_over_n_to_every_other_rank(mini):
    s = schedule(mini, "all-to-all", 1 << 20)
    n, G = s.ranks, mini.gpus_per_server
    assert len(s.flows) == n * (n - G)  # every pair on different servers
    assert set(s.flow_bytes) == {math.ceil((1 << 20) / n)}
    assert s.nvlink_bytes == n * (G - 1) * math.ceil((1 << 20) / n)
    cls = s.by_class()
    assert cls["inter-rail"] > 0 and "inter-rail-pxn" not in cls
    inter = [f for f in s.flows if f.src[1] != f.dst[1]]
    assert all(f.src_nic == f.src[1] + 1 and f.expected_hops == 3 for f in inter
               if f.path_class == "inter-rail")


def test_all_to_all_with_pxn_stays_on_the_destination_rail(mini):
    s = schedule(mini, "all-to-all", 1 << 20, pxn=True)
    for f in s.flows:
        assert f.src_nic == f.dst_nic == f.dst[1] + 1
        assert f.nvlink == (f.src[1] != f.dst[1])
    assert "inter-rail" not in s.by_class()


def test_rail_only_all_to_all_without_pxn_is_unreachable_by_design(railonly):
    s = schedule(railonly, "all-to-all", 1 << 20)
    un = s.unreachable
    assert un and all(f.path_class == "inter-rail" for f in un)
    # two rails share a leaf: those inter-rail pairs are reachable in one hop
    assert any(f.src[1] != f.dst[1] and f.expected_hops == 1 for f in s.flows)
    assert any("unreachable by design" in n for n in s.notes)
    assert not schedule(railonly, "all-to-all", 1 << 20, pxn=True).unreachable
    assert not schedule(railonly, "all-reduce", 1 << 20).unreachable


def test_schedule_refuses_bad_input(mini, tmp_path):
    with pytest.raises(UsageError, match="all-reduce, all-to-all"):
        schedule(mini, "broadcast", 1 << 20)
    with pytest.raises(UsageError, match="at least 1024"):
        schedule(mini, "all-to-all", 10)


def test_parse_bytes_takes_nccl_tests_suffixes():
    assert parse_bytes("4096") == 4096
    assert parse_bytes("64K") == 64 << 10
    assert parse_bytes("1M") == 1 << 20
    assert parse_bytes("2g") == 2 << 30
    with pytest.raises(ValueError, match="1M"):
        parse_bytes("lots")


def test_pace_splits_the_port_rate_over_a_nics_flows(mini):
    s = schedule(mini, "all-to-all", 1 << 20)
    paced = pace(s.flows, 40.0)
    per_nic: dict = {}
    for f in paced:
        bits = f.rate * (14 + 20 + 8 + 12 + 16 + f.mtu + 4 + 24) * 8
        per_nic[(f.src[0], f.src_nic)] = per_nic.get((f.src[0], f.src_nic), 0) + bits
    assert all(v == pytest.approx(0.97 * 40e6) for v in per_nic.values())


def test_size_flow_carries_the_bytes():
    from railab.traffic.patterns import Flow

    f = size_flow(Flow(("a", 0), ("b", 0)), 100_000, message=65536)
    assert f.messages == 2 and f.size == 50_000
    with pytest.raises(ValueError):
        size_flow(Flow(("a", 0), ("b", 0)), 0)


def test_source_port_modes():
    from railab.traffic.patterns import Flow

    a, b = Flow(("s1", 0), ("s2", 0), qp=0), Flow(("s1", 0), ("s2", 0), qp=1)
    assert flow_sport(a) != flow_sport(b)
    assert flow_sport(a, "fixed") == flow_sport(b, "fixed") == 0xC000
    assert 0xC000 <= flow_sport(a) <= 0xFFFF
    with pytest.raises(UsageError, match="per-qp, fixed"):
        flow_sport(a, "spray")


def test_leaf_load_shares_and_imbalance():
    one = LeafLoad("l1", {"u1": 1000, "u2": 0, "u3": 0, "u4": 0})
    assert one.fair_share == 0.25
    assert one.imbalance == pytest.approx(4.0) and one.max_share_ratio == pytest.approx(4.0)
    assert one.busiest == "u1"
    even = LeafLoad("l1", {"u1": 250, "u2": 250, "u3": 250, "u4": 250})
    assert even.imbalance == pytest.approx(1.0) and even.max_share_ratio == pytest.approx(1.0)
    assert LeafLoad("l1", {"u1": 0, "u2": 0}).imbalance == 0.0
    assert collision_chance(4, 16) == pytest.approx(4 * 0.25 ** 16)


def test_slowdown_needs_two_completed_runs(mini):
    s = schedule(mini, "all-reduce", 1 << 20)

    def res(t):
        return CollectiveResult(s, t is not None, t, None, None, None, 0, 0, {}, None, None, None)

    assert slowdown(res(1.0), res(2.5)) == pytest.approx(2.5)
    assert slowdown(res(1.0), res(None)) is None


@pytest.mark.parametrize("args, needle", [
    (["all-gather"], "all-reduce, all-to-all"),
    (["all-to-all", "--bytes", "huge"], "--bytes"),
    (["all-to-all", "--sport", "spray"], "--sport"),
    (["all-to-all", "--hash", "l7"], "--hash"),
    (["all-to-all", "--pfc", "maybe"], "--pfc must be on or off"),
])
def test_cli_option_errors_name_the_option(args, needle):
    r = CliRunner().invoke(app, ["collective", "nosuchlab", *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output


# ---- live -----------------------------------------------------------------------------------
def _run(lab: str, *args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(app, ["collective", lab, *args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.integration
def test_collectives_complete_on_mini(mini_lab):
    rc, ar = _run(mini_lab.name, "all-reduce", "--bytes", "256K")
    assert rc == 0 and ar["completed"], ar
    assert ar["time_s"] > 0 and ar["lost"] == 0
    assert ar["busbw_gbps"] == pytest.approx(ar["algbw_gbps"] * 2 * 15 / 16, rel=1e-3)
    rc, a2a = _run(mini_lab.name, "all-to-all", "--bytes", "256K")
    assert rc == 0 and a2a["completed"], a2a
    assert a2a["busbw_gbps"] == pytest.approx(a2a["algbw_gbps"] * 15 / 16, rel=1e-3)
    assert a2a["schedule"]["flows_by_class"]["inter-rail"] > 0


@pytest.mark.integration
def test_rail_only_all_to_all_needs_pxn(railonly_lab):
    rc, no = _run(railonly_lab.name, "all-to-all", "--bytes", "128K")
    assert rc == 0, no  # unreachable by design is the designed outcome, said in the result
    assert no["unreachable_by_design"] and not no["completed"] and no["time_s"] is None
    assert no["unreachable_delivered"] == 0
    rc, yes = _run(railonly_lab.name, "all-to-all", "--bytes", "128K", "--pxn")
    assert rc == 0 and yes["completed"] and yes["time_s"] > 0, yes
    assert not yes["unreachable_by_design"]


# ---- the report's load section --------------------------------------------------------------
def _congestion_doc() -> dict:
    t = [round(0.1 * i, 1) for i in range(1, 21)]
    flows = [{"name": f"srv{k + 2}:gpu0->srv1:gpu0",
              "series": {"t": t, "tx_mbps": [40 / (k + 1)] * 20, "rx_mbps": [40 / (k + 1)] * 20,
                         "ce": [1 if i < 5 else 0 for i in range(20)],
                         "cnp": [1 if i < 3 else 0 for i in range(20)]}} for k in range(3)]
    ports = {"g1-leaf1:eth1": {"t": t, "tx_mbps": [39.0] * 20,
                               "backlog_bytes": [200_000 * i for i in range(20)],
                               "pause_events": [1 if i == 10 else 0 for i in range(20)]}}
    return {"pattern": "incast", "pfc": False,
            "congestion": {"cc": "dcqcn", "sport_mode": "per-qp", "port_rate_mbps": 40.0,
                           "time_scale": 10000.0, "flows": flows, "ports": ports, "ce_marked": 15,
                           "cnp_sent": 9, "cnp_received": 9, "dropped": 0, "pause_events": 1}}


def _collective_doc() -> dict:
    share = {"g1-leaf1:eth2>spine1:eth1": 1.0, "g1-leaf1:eth3>spine2:eth1": 0.0}
    return {"op": "all-to-all", "bytes": 1 << 20, "ranks": 16, "pxn": True, "completed": True,
            "time_s": 0.5, "algbw_gbps": 0.0168, "busbw_gbps": 0.0157, "lost": 0,
            "fabric": {"time_us": 50.0, "algbw_gbps": 168.0, "busbw_gbps": 157.0},
            "unreachable_by_design": False, "sport_mode": "per-qp",
            "uplink_load": {"max_imbalance": 2.0, "leaves": {"g1-leaf1": {
                "leaf": "g1-leaf1", "uplinks": 2, "share": share, "fair_share": 0.5,
                "imbalance": 2.0, "max_share_ratio": 2.0}}}}


def test_report_plots_load_runs_and_keeps_them(mini, tmp_path):
    from railab.report import LabSummary, Report, add_runs, render_html

    (tmp_path / "incast.json").write_text(json.dumps(_congestion_doc()))
    (tmp_path / "a2a.json").write_text(json.dumps(_collective_doc()))
    rep = Report(lab=LabSummary.from_spec(mini))
    add_runs(rep, [tmp_path / "incast.json", tmp_path / "a2a.json"])
    assert [r.label for r in rep.congestion] == ["incast cc=dcqcn pfc=off"]
    assert [r.label for r in rep.collectives] == ["all-to-all 1048576 B PXN"]
    page = render_html(rep, mini, diagram_svg="<svg></svg>")
    load = page[page.index('<section id="load">'):page.index('<section id="fabric">')]
    assert "What this lab does not model" in load and "NVLink" in load
    assert load.count("<svg") == 2  # one rate/queue chart, one uplink-load chart
    for text in ("srv2:gpu0-&gt;srv1:gpu0", "ECN Kmin", "PFC xOFF", "queue depth (KiB)",
                 "fair share", "max/mean imbalance 2.00", "168"):
        assert text in load, text
    again = Report.model_validate_json(rep.dump())  # re-rendering a lab that is down keeps them
    assert again.congestion == rep.congestion and again.collectives == rep.collectives


def test_report_add_refuses_other_json(tmp_path):
    from railab.report import Report, add_runs

    (tmp_path / "x.json").write_text(json.dumps({"flows": []}))
    with pytest.raises(ValueError, match="x.json: not the JSON of"):
        add_runs(Report.model_construct(congestion=[], collectives=[]), [tmp_path / "x.json"])


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_all_reduce_on_shaped_ports_takes_port_time_and_converts_to_fabric_time(lossless_lab):
    from railab.testbed import state as st

    spec = lossless_lab.spec
    cap = spec.qos.capacity
    r = CliRunner().invoke(app, ["collective", spec.name, "all-reduce", "--bytes", "512K",
                                 "--compare-sport", "--pfc", "on", "--json"])
    out = json.loads(r.stdout)
    assert r.exit_code == (0 if out["keeps_rate"] else 1), r.output
    assert out["pfc"] == "on" and out["lossless_promised"] is True
    assert out["completed"] and out["lost"] == 0, out  # PFC on: lossless promised
    q = out["queues"]  # the ports' counters over both runs, read inside the switch agent
    assert q["dropped"] == 0 and q["lossless_dropped"] == 0, q
    assert st.load(spec.name).agents == {}  # the agent stopped with the run
    # the run's ports: slowed (time dilation) to what this host carries at line rate for 32
    # NICs, never faster than the lab's; the time scale is the run's
    rate, scale = out["port_rate_mbps"], out["time_scale"]
    assert out["lab_port_rate_mbps"] == cap.port_rate_mbps and 0 < rate <= cap.port_rate_mbps
    assert rate == fitting_rate_mbps(spec, schedule(spec, "all-reduce", 512 << 10))
    assert scale == pytest.approx(cap.fabric_rate_gbps * 1000 / rate)
    per_flow = out["schedule"]["network_bytes"] / out["schedule"]["network_flows"]
    line_s = per_flow * 8 / (rate * 1e6)
    assert out["time_s"] >= 0.95 * line_s, out  # the ports are shaped: no faster than their rate
    fab = out["fabric"]
    assert fab["time_us"] == pytest.approx(out["time_s"] / scale * 1e6, rel=1e-3)
    assert fab["busbw_gbps"] == pytest.approx(out["busbw_gbps"] * scale, rel=1e-3)
    # ... and the lab's own rate is back on every port after the run, the lossless tbf's too
    # (the run's PFC agent left them at twice the run's rate: later incasts built no queue)
    assert _class_rates(lossless_lab) == {int(cap.port_rate_mbps * 1e6)}
    assert _tbf_rates(lossless_lab) == {2 * int(cap.port_rate_mbps * 1e6)}
    assert dilation.slowed_by(spec.name) is None
    fixed = out["compare_sport"]["fixed"]
    assert fixed["sport_mode"] == "fixed" and fixed["completed"] and fixed["lost"] == 0
    assert out["compare_sport"]["slowdown"] == pytest.approx(fixed["time_s"] / out["time_s"], rel=1e-2)
    # on the load engine: the line-rate bound beside the measurement, which cannot beat it
    assert out["engine"] in ("c", "python") and out["bound_busbw_gbps"] > 0
    assert 0 < out["busbw_of_bound"] <= 1.0 + 1e-6, out


def _tc_rates(lab, what: list[str], pattern: str) -> set[int]:
    """The rates (bit/s) ``pattern`` finds in ``tc WHAT show dev PORT ...`` on every shaped port
    of ``lab``."""
    from railab.testbed.capacity import ports

    unit = {"bit": 1, "Kbit": 10 ** 3, "Mbit": 10 ** 6, "Gbit": 10 ** 9}
    rates = set()
    for p in ports(lab.spec):
        out = subprocess.run(["ip", "netns", "exec", lab.netns_of(p.node), "tc", what[0], "show",
                              "dev", p.interface, *what[1:]],
                             capture_output=True, text=True, check=True).stdout
        m = re.search(pattern + r"([0-9.]+)(bit|Kbit|Mbit|Gbit) ", out)
        assert m, (p, out)
        rates.add(round(float(m.group(1)) * unit[m.group(2)]))
    return rates


def _class_rates(lab, classid: str = "1:1") -> set[int]:
    """The htb rates (bit/s) of class ``classid`` on every shaped port of ``lab``."""
    return _tc_rates(lab, ["class", "classid", classid], r" rate ")


def _tbf_rates(lab) -> set[int]:
    """The rates (bit/s) of the lossless tbf on every shaped port of ``lab`` (unpaused: twice
    the port's rate)."""
    from railab.testbed.capacity import lossless_class

    parent = f"1:{lossless_class(lab.spec.qos) & 0xFFFF:x}"
    return _tc_rates(lab, ["qdisc", "parent", parent], r"tbf .* rate ")


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_dilation_slows_every_port_and_always_puts_the_lab_rate_back(lossless_lab):
    """railab.testbed.dilation on a capacity lab: inside the block every shaped port runs at the
    run's rate, after it at the lab's own, even when the block raises; a marker left by a
    process that died while the lab was slowed (kill -9) is undone by the next load run's
    restore_leftover, and a rate above the lab's is refused before anything changes."""
    spec = lossless_lab.spec
    own = int(spec.qos.capacity.port_rate_mbps * 1e6)
    with dilation.dilated(spec, lossless_lab.netns_of, 25) as slow:
        assert slow.qos.capacity.port_rate_mbps == 25 and slow.qos.capacity.time_scale == 16000
        assert _class_rates(lossless_lab) == {25_000_000}
        assert dilation.slowed_by(spec.name)["run_rate_mbps"] == 25
    assert _class_rates(lossless_lab) == {own} and dilation.slowed_by(spec.name) is None
    assert _tbf_rates(lossless_lab) == {2 * own}  # the lossless tbf too (CI: left at 2 x 25)
    with pytest.raises(RuntimeError), dilation.dilated(spec, lossless_lab.netns_of, 40):
        raise RuntimeError("a run that failed")
    assert _class_rates(lossless_lab) == {own}
    with pytest.raises(UsageError, match="above lab"):
        with dilation.dilated(spec, lossless_lab.netns_of, 400):
            pass
    # a slowed lab whose process is gone: put back by the next run, not before
    dead = subprocess.Popen(["true"])
    dead.wait()
    dilation.retime(dilation.at_rate(spec, 30), lossless_lab.netns_of)
    st.lab_dir(spec.name).joinpath(dilation.MARKER).write_text(json.dumps(
        {"pid": dead.pid, "lab_rate_mbps": spec.qos.capacity.port_rate_mbps, "run_rate_mbps": 30}))
    assert _class_rates(lossless_lab) == {30_000_000}
    assert dilation.restore_leftover(spec, lossless_lab.netns_of) is True
    assert _class_rates(lossless_lab) == {own} and dilation.slowed_by(spec.name) is None


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_the_host_never_reorders_a_flow_on_a_capacity_lab(lossless_lab):
    """Every interface of a capacity lab steers received packets by flow hash (RPS), so two
    CPUs taking turns at one queue cannot swap two packets of one flow: a 960-flow all-to-all
    with one path per QP (ECMP, per-QP source ports) arrives in PSN order (8-15 out of order
    per run on mini-lossless without it)."""
    spec = lossless_lab.spec
    from railab.testbed.capacity import rps_mask

    mask = rps_mask(len(os.sched_getaffinity(0)))
    node = spec.by_role("leaf")[0].name
    from railab.topologies.naming import netns_name

    got = subprocess.run(["ip", "netns", "exec", netns_name(spec.name, node), "sh", "-c",
                          "cat /sys/class/net/eth1/queues/rx-0/rps_cpus"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert int(got.replace(",", ""), 16) == int(mask.replace(",", ""), 16)
    r = CliRunner().invoke(app, ["collective", spec.name, "all-to-all", "--bytes", "2M", "--json"])
    out = json.loads(r.stdout)
    assert out["completed"] and out["lost"] == 0, out
    assert out["out_of_order"] == 0 and out["max_psn_distance"] == 0, out



def test_report_cli_adds_runs_to_a_lab_that_is_down(tmp_path):
    from railab.report import LabSummary, Report

    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "cmr", name="cmr")
    out = tmp_path / "rep"
    out.mkdir()
    (out / "report.json").write_text(Report(lab=LabSummary.from_spec(LabSpec.load(d))).dump())
    (tmp_path / "a2a.json").write_text(json.dumps(_collective_doc()))
    r = CliRunner().invoke(app, ["report", str(d), "-o", str(out), "--add", str(tmp_path / "a2a.json")])
    assert r.exit_code == 0, r.output
    assert 'id="load"' in (out / "report.html").read_text()
    assert Report.load(out).collectives[0].label == "all-to-all 1048576 B PXN"
    (tmp_path / "bad.json").write_text("{}")
    bad = CliRunner().invoke(app, ["report", str(d), "-o", str(out), "--add", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "--add" in bad.output and "bad.json" in bad.output, bad.output
    assert len(Report.load(out).collectives) == 1  # nothing was rewritten


def test_collective_verdicts(mini):
    s = schedule(mini, "all-to-all", 1 << 20)

    def res(completed, lost=0, unreach=0):
        return CollectiveResult(s, completed, 1.0 if completed else None, None, None, None, lost,
                                0, {}, None, None, None, unreachable_delivered=unreach)

    assert res(True).ok
    assert res(False, lost=5).ok  # a loss is judged by what the lab promises (the CLI)
    assert not res(False).ok  # did not complete, nothing explains it
    assert not res(True, unreach=1).ok


def test_exit_rule_drops_fail_only_where_lossless_is_promised(mini):
    from railab.cli.collective import collective_failed

    s = schedule(mini, "all-to-all", 1 << 20)

    def res(completed, lost=0, lag=0.0):
        return CollectiveResult(s, completed, 1.0 if completed else None, None, None, None, lost,
                                0, {}, None, None, None, sender_lag=lag)

    assert not collective_failed([res(True)], promised=True)
    assert not collective_failed([res(False, lost=7)], promised=False)  # PFC off: predicted drops
    assert collective_failed([res(False, lost=7)], promised=True)  # PFC on: a loss fails
    assert collective_failed([res(True), res(True, lag=0.5)], promised=True)  # engine lagged
    assert collective_failed([res(True)], promised=True, queue_drops=1)  # a PFC-on queue drop
    assert not collective_failed([res(True)], promised=False, queue_drops=9)


def test_pfc_choice_defaults_to_the_intent_and_refuses_on_without_queues(mini):
    from railab.cli.collective import pfc_choice
    from railab.topologies.generator import build_lab
    from railab.topologies.intent import load_intent

    lossless = build_lab(load_intent("mini-lossless")).spec
    assert pfc_choice(lossless, None) is True  # mini-lossless: lab.capacity.pfc true
    assert pfc_choice(lossless, "off") is False and pfc_choice(lossless, "on") is True
    assert pfc_choice(mini, None) is False and pfc_choice(mini, "off") is False
    with pytest.raises(ValueError, match="no lab.capacity"):
        pfc_choice(mini, "on")
    with pytest.raises(ValueError, match="on or off"):
        pfc_choice(lossless, "yes")


def test_straggler_wait_follows_the_runs_pfc_not_the_intents():
    """A collective waits for what a full queue holds: buffer_bytes where PFC pauses, a lone
    hot queue's shared-buffer share where it does not; `--pfc off` on a PFC-on intent is the
    latter (the wait was the intent's before)."""
    from railab.topologies.qos import CapacityProfile, SharedBufferProfile

    cap = CapacityProfile(enabled=True, port_rate_mbps=200, pfc=True,
                          shared_buffer=SharedBufferProfile())
    on, off = straggler_wait_s(cap, True), straggler_wait_s(cap, False)
    assert on == pytest.approx(2 * cap.buffer_bytes * 8 / 200e6 + 0.5)
    assert off == pytest.approx(2 * cap.drop_limit_bytes * 8 / 200e6 + 0.5) and off > 5 * on
    static = CapacityProfile(enabled=True, port_rate_mbps=200, pfc=False)
    assert straggler_wait_s(static, False) == straggler_wait_s(static, True)
    assert straggler_wait_s(CapacityProfile(enabled=False), True) == 1.0


def test_fitting_rate_keeps_every_nic_within_the_hosts_frame_hop_budget(tmp_path, monkeypatch):
    """The rate a collective slows a capacity lab to (time dilation): every NIC at line rate,
    each frame over the schedule's mean switch hops, within the host's frame-hops/s, the
    largest of the round rates that fits, never above the lab's own; the budget scales with the
    CPUs and RAILAB_HOST_FRAME_HOPS overrides it (a bad value is a usage error naming it)."""
    from railab.traffic import collective as C

    spec = LabSpec.load(generate("mini-lossless", tmp_path / "ml", name="mlfit"))
    ar, a2a = schedule(spec, "all-reduce", 1 << 20), schedule(spec, "all-to-all", 1 << 20)
    assert len({(f.src[0], f.src_nic) for f in ar.flows}) == 32
    frame_bits = (COLLECTIVE_MTU + C.ROCE_FRAME_OVERHEAD) * 8
    monkeypatch.delenv("RAILAB_HOST_FRAME_HOPS", raising=False)
    assert C.host_frame_hop_budget(2) == 2 * C.HOST_FRAME_HOPS_PER_CPU
    # the 2-CPU machine's figures: the ring all-reduce (1.25 hops a frame) at 40 Mb/s, the
    # all-to-all (2.53 hops: most pairs cross the spines) at 20 Mb/s
    two = C.host_frame_hop_budget(2)
    assert C.fitting_rate_mbps(spec, ar, budget=two) == 40.0
    assert C.fitting_rate_mbps(spec, a2a, budget=two) == 20.0
    r = C.fitting_rate_mbps(spec, a2a, budget=two)
    assert 32 * r * 1e6 / frame_bits * 2.5 <= two  # what it picked fits
    assert C.fitting_rate_mbps(spec, ar, budget=10 ** 9) == spec.qos.capacity.port_rate_mbps
    assert C.fitting_rate_mbps(spec, ar, budget=1000) == dilation.MIN_RATE_MBPS  # never slower
    assert all(400_000 / x == int(400_000 / x) for x in C.NICE_RATES_MBPS)  # round time scales
    monkeypatch.setenv("RAILAB_HOST_FRAME_HOPS", "130000")
    assert C.run_rate_mbps(spec, ar, "auto") == 100.0
    with pytest.raises(UsageError, match="at least 1 Mb/s"):
        C.run_rate_mbps(spec, ar, "0.001")
    assert C.run_rate_mbps(spec, ar, "lab") == C.run_rate_mbps(spec, ar, None) == 200.0
    assert C.run_rate_mbps(spec, ar, "20") == 20.0
    for bad, needle in (("300", "at most lab"), ("0", "at least 1 Mb/s"), ("fast", "auto, lab")):
        with pytest.raises(UsageError, match=needle):
            C.run_rate_mbps(spec, ar, bad)
    monkeypatch.setenv("RAILAB_HOST_FRAME_HOPS", "lots")
    with pytest.raises(UsageError, match="RAILAB_HOST_FRAME_HOPS"):
        C.host_frame_hop_budget()


def test_dilated_spec_changes_only_the_rate_and_the_tc_lines_only_change(tmp_path):
    """dilation.at_rate: the same lab at another lab rate (time scale follows, thresholds in
    bytes do not move); its tc lines change every htb class of every shaped port and nothing
    else (the queues keep their packets; a paused tbf stays paused)."""
    from railab.testbed import capacity

    spec = LabSpec.load(generate("mini-lossless", tmp_path / "ml", name="mldil"))
    slow = dilation.at_rate(spec, 50)
    assert slow.qos.capacity.time_scale == 4 * spec.qos.capacity.time_scale
    assert slow.qos.capacity.buffer_bytes == spec.qos.capacity.buffer_bytes
    assert slow.qos.ecn == spec.qos.ecn and slow.links == spec.links
    lines = dilation._change_lines(slow)
    every = [ln for text in lines.values() for ln in text.splitlines()]
    # every htb class, and the lossless tbf at rest at the run's rate (the PFC agent of a
    # dilated run leaves it there: the restore must put the lab's back); nothing else
    n = len(capacity.ports(spec))
    assert sum(ln.startswith("class change ") for ln in every) == 3 * n
    tbf = [ln for ln in every if ln.startswith("qdisc change ")]
    assert len(tbf) == n and len(every) == 4 * n
    assert all("50000000bit" in ln for ln in every if "classid 1:1 " in ln)
    assert all(" tbf rate 100000000bit " in ln for ln in tbf), tbf[:2]
    # a paused tbf (a pfc-storm fault holds it) stays paused
    held = capacity.ports(spec)[0]
    again = dilation._change_lines(spec, frozenset({held.key}))[held.node].splitlines()
    mine = [ln for ln in again if ln.startswith("qdisc change ") and f" dev {held.interface} " in ln]
    assert mine == [capacity.tbf_line(held, capacity.lossless_class(spec.qos), paused=True, extra=0).strip()]
    assert f"rate {capacity.PAUSED_RATE_BPS}bit" in mine[0]
    with pytest.raises(UsageError, match="at least 1 Mb/s"):
        dilation.at_rate(spec, 0.5)
    with pytest.raises(UsageError, match="no lab.capacity"):
        dilation.at_rate(LabSpec.load(generate("mini", tmp_path / "m", name="mdil")), 10)
