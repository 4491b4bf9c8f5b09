"""railab.testbed.lb and ``railab lb``: the switches' load-balancing modes.

Unit tests (no root): the plan from lab.json, the nft script, the member-table routes, the
usage errors. Live tests (root + FRR, the ``mini-lossless`` lab): ``spray-rr`` puts one UDP
flow's consecutive packets on different uplinks, ``pbr`` pins a NIC to one uplink, ``ecmp``
restores the per-flow hash and leaves no rule, table or nft table behind.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.errors import UsageError
from railab.testbed import dilation, lb, lbagent
from railab.testbed import state as st
from railab.testbed.namespaces import exec_argv
from railab.topologies.generator import build_lab
from railab.topologies.intent import load_intent
from railab.topologies.naming import netns_name
from railab.traffic import lbcompare


@pytest.fixture(scope="module")
def spec():
    return build_lab(load_intent("mini-lossless")).spec


def test_plan_has_every_leaf_with_its_uplinks_and_server_ports(spec):
    plans = lb.plan(spec, "spray-rr")
    assert [p.leaf for p in plans] == ["g1-leaf1", "g1-leaf2", "g2-leaf1", "g2-leaf2"]
    for p in plans:
        assert len(p.uplinks) == 8  # 4 spines x 2 links
        assert p.servers and not set(p.servers) & set(p.uplinks)
        assert p.binding == {}


def test_pbr_binds_the_nics_of_a_leaf_to_distinct_uplinks(spec):
    for p in lb.plan(spec, "pbr"):
        members = list(p.binding.values())
        assert sorted(p.binding) == sorted(p.servers)
        assert len(set(members)) == min(len(p.servers), len(p.uplinks))


def test_spray_scripts_mark_server_ports_with_numgen(spec):
    p = lb.plan(spec, "spray-rr")[0]
    rr, rnd = lb.nft_script(p, "spray-rr"), lb.nft_script(p, "spray-random")
    assert "numgen inc mod 8" in rr and "numgen random mod 8" in rnd
    assert f"offset {lb.MARK_BASE:#x}" in rr
    assert all(f'"{s}"' in rr for s in p.servers) and not any(f'"{u}"' in rr for u in p.uplinks)
    assert lb.nft_script(p, "pbr") == "" and lb.nft_script(p, "ecmp") == ""


def test_flowlet_script_keys_a_timed_map_by_flow_and_gap_is_time_scaled(spec):
    p = lb.plan(spec, "flowlet")[0]
    gap = lb.flowlet_gap_s(spec)
    assert gap == pytest.approx(spec.qos.capacity.lab_seconds(lb.FLOWLET_GAP_US))
    sc = lb.nft_script(p, "flowlet", gap)
    ms = round(gap * 1000)
    assert "flags dynamic, timeout" in sc and f"timeout {ms}ms" in sc
    assert "ip saddr . ip daddr . udp sport map @flowlets" in sc
    # a new flowlet takes the next slot of the agent's slot table, equal shares until it rates
    assert f"meta mark 0 meta mark set numgen inc mod {lbagent.SLOTS} map @slots" in sc
    assert f"typeof numgen inc mod {lbagent.SLOTS} : meta mark" in sc
    assert f"0 : {lb.MARK_BASE:#x}, 1 : {lb.MARK_BASE + 1:#x}" in sc
    assert f"update @flowlets {{ ip saddr . ip daddr . udp sport timeout {ms}ms : meta mark }}" in sc


def test_member_routes_keep_one_next_hop_per_table():
    routes = [
        {"dst": "10.0.2.0/24", "nexthops": [{"gateway": "169.254.0.1", "dev": "eth10"},
                                            {"gateway": "169.254.0.1", "dev": "eth9"}]},
        {"dst": "10.0.0.0/31", "dev": "eth1"},  # connected server subnet: not copied
        {"dst": "10.255.0.2", "gateway": "169.254.0.1", "dev": "eth9"},
    ]
    lines = lb.member_routes(routes, ["eth9", "eth10"])
    assert sorted(lines) == sorted([
        f"route replace 10.0.2.0/24 via 169.254.0.1 dev eth10 onlink table {lb.TABLE_BASE + 1}",
        f"route replace 10.0.2.0/24 via 169.254.0.1 dev eth9 onlink table {lb.TABLE_BASE}",
        f"route replace 10.255.0.2 via 169.254.0.1 dev eth9 onlink table {lb.TABLE_BASE}",
    ])


def test_bad_mode_is_a_usage_error(spec):
    with pytest.raises(UsageError, match="unknown"):
        lb.plan(spec, "bogus")


@pytest.mark.parametrize("mode", ["flowlet", "wcmp"])
def test_agent_modes_need_lab_capacity(mode):
    plain = build_lab(load_intent("mini")).spec
    with pytest.raises(UsageError, match="needs lab.capacity"):
        lb.plan(plain, mode)
    assert lb.plan(plain, "spray-rr")  # the per-packet modes need no agent


def test_slot_table_gives_idle_members_the_slots_interleaved():
    assert lbagent.slot_table([1.0] * 4, 8) == [0, 1, 2, 3, 0, 1, 2, 3]
    t = lbagent.slot_table([0.0, 1.0, 1.0, 0.0], 8)  # members 0 and 3 saturated
    assert sorted(t) == [1, 1, 1, 1, 2, 2, 2, 2] and t[:2] == [1, 2]
    t = lbagent.slot_table([0.75, 0.25], 16)
    assert t.count(0) == 12 and t.count(1) == 4
    assert lbagent.slot_table([0.0, 0.0], 4) == [0, 1, 0, 1]  # none idle: equal


def test_idleness_and_wcmp_weights():
    assert lbagent.idleness(0.25, 0, 1000) == 0.75
    assert lbagent.idleness(1.7, 0, 1000) == 0.0
    assert lbagent.idleness(0.0, 1001, 1000) == 0.0  # a queue over Kmin is congested
    assert lbagent.weights([1.0, 0.0, 0.5]) == [lbagent.MAX_WEIGHT, 1, 9]
    assert lbagent.group_line(21000, [20000, 20001], [16, 1]) == \
        "nexthop replace id 21000 group 20000,16/20001,1\n"
    line = lbagent.slots_line("railab_lb", [0x2000, 0x2001], [1, 0])
    assert line.startswith("flush map ip railab_lb slots; add element ip railab_lb slots")
    assert "0 : 0x2001, 1 : 0x2000" in line and line.count("\n") == 1  # one transaction


def test_wcmp_lines_group_the_uplinks_and_bind_server_ports():
    routes = [{"dst": "10.0.2.0/24", "nexthops": [{"gateway": "169.254.0.1", "dev": "eth10"},
                                                 {"gateway": "169.254.0.1", "dev": "eth9"}]},
              {"dst": "10.0.0.0/31", "dev": "eth1"}]
    lines = lb.wcmp_lines(routes, ["eth9", "eth10"], ["eth1"])
    assert lines == [f"nexthop add id {lb.NH_BASE} via 169.254.0.1 dev eth9 onlink",
                     f"nexthop add id {lb.NH_BASE + 1} via 169.254.0.1 dev eth10 onlink",
                     f"nexthop add id {lb.GROUP_ID} group {lb.NH_BASE},1/{lb.NH_BASE + 1},1",
                     f"route replace 10.0.2.0/24 nhid {lb.GROUP_ID} table {lb.WCMP_TABLE}",
                     f"rule add priority {lb.RULE_PRIO} iif eth1 lookup {lb.WCMP_TABLE}"]


def test_cli_bad_mode_and_lab_not_up_exit_2_with_one_error_line():
    for mode, words in (("bogus", "unknown load-balancing mode"), ("spray-rr", "is not up")):
        r = subprocess.run([sys.executable, "-m", "railab", "lb", "no-such-lab-i30", mode],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("error: ") == 1 and words in r.stderr, r.stderr


# ---- live ---------------------------------------------------------------------------------------
def _uplink_tx(ns: str, ups: list[str]) -> dict[str, int]:
    out = subprocess.run(exec_argv(ns, ["ip", "-s", "-j", "link"]), capture_output=True, text=True,
                         check=True).stdout
    return {d["ifname"]: d["stats64"]["tx"]["packets"] for d in json.loads(out) if d["ifname"] in ups}


def _send_one_flow(spec, n: int = 80, pause_s: float = 0.0) -> dict[str, int]:
    """Send ``n`` UDP packets of one flow (fixed ports) from the server on g1-leaf1 eth1 to a
    server on g2-leaf1 (with ``pause_s`` of silence halfway); per uplink of g1-leaf1, how many
    packets left on it."""
    src = next(n for n in spec.nics if n.leaf == "g1-leaf1" and n.leaf_port == "eth1")
    dst = next(n for n in spec.nics if n.leaf == "g2-leaf1" and n.rail == src.rail)
    sns, lns = netns_name(spec.name, src.server), netns_name(spec.name, "g1-leaf1")
    ups = lb.plan(spec, "ecmp")[0].uplinks
    before = _uplink_tx(lns, ups)
    code = ("import socket,time\ns=socket.socket(2,2)\n"
            f"s.bind(({str(src.address.ip)!r},50000))\n"
            f"for i in range({n}):\n"
            f" s.sendto(bytes(100),({str(dst.address.ip)!r},4791)); time.sleep(0.002)\n"
            f" if i == {n // 2 - 1}: time.sleep({pause_s})")
    subprocess.run(exec_argv(sns, ["python3", "-c", code]), check=True)
    after = _uplink_tx(lns, ups)
    return {u: after[u] - before[u] for u in ups}


def _leftovers(spec) -> list[str]:
    found = []
    for p in lb._every_switch(spec):  # leaves, and the spines spray-rr --spines touches
        ns = netns_name(spec.name, p.leaf)
        rules = subprocess.run(exec_argv(ns, ["ip", "rule"]), capture_output=True, text=True).stdout
        if f"{lb.RULE_PRIO}:" in rules:
            found.append(f"{p.leaf}: rules")
        for i in range(len(p.uplinks)):
            t = subprocess.run(exec_argv(ns, ["ip", "route", "show", "table", str(lb.TABLE_BASE + i)]),
                               capture_output=True, text=True).stdout
            if t.strip():
                found.append(f"{p.leaf}: table {lb.TABLE_BASE + i}")
        nft = subprocess.run(exec_argv(ns, ["nft", "list", "tables"]), capture_output=True, text=True).stdout
        if lb.NFT_TABLE in nft:
            found.append(f"{p.leaf}: nft")
        nh = subprocess.run(exec_argv(ns, ["ip", "nexthop", "show"]), capture_output=True, text=True).stdout
        if nh.strip():
            found.append(f"{p.leaf}: nexthops")
        t = subprocess.run(exec_argv(ns, ["ip", "route", "show", "table", str(lb.WCMP_TABLE)]),
                           capture_output=True, text=True).stdout
        if t.strip():
            found.append(f"{p.leaf}: table {lb.WCMP_TABLE}")
    procs = subprocess.run(["pgrep", "-f", f"railab.testbed.lbagent.*/{spec.name}/"],
                           capture_output=True, text=True).stdout
    if procs.strip():
        found.append(f"agent process {procs.split()}")
    return found


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_modes_change_forwarding_and_ecmp_restores_it(lossless_lab):
    spec = lossless_lab.spec
    name = spec.name
    run = CliRunner()
    try:
        assert run.invoke(app, ["lb", name, "spray-rr"]).exit_code == 0
        sprayed = _send_one_flow(spec)
        # round robin over 8 members: every uplink carries its share of the one flow
        assert sum(1 for v in sprayed.values() if v >= 5) == 8, sprayed
        r = run.invoke(app, ["lb", name, "--json"])
        assert json.loads(r.output)["load_balancing"] == "spray-rr"
        # railab traffic sees it: one flow's packets on several uplinks, counted per port
        r = run.invoke(app, ["traffic", name, "--pattern", "cross-group", "-n", "1", "--json"])
        f = json.loads(r.stdout)["flows"][0]
        assert f["ok"] and len(f["sprayed"]) >= 2 and len(f["uplinks"]) >= 2, f
        assert "|" in f["path"][0] and sum(f["sprayed"].values()) >= f["sent"] // 2, f
        assert run.invoke(app, ["lb", name, "spray-rr", "--spines"]).exit_code == 0
        sp = netns_name(name, "spine1")
        rules = subprocess.run(exec_argv(sp, ["ip", "rule"]), capture_output=True, text=True).stdout
        assert rules.count(f"{lb.RULE_PRIO}:") == 2, rules  # two parallel links per pair
        assert run.invoke(app, ["lb", name, "flowlet"]).exit_code == 0
        rules = subprocess.run(exec_argv(sp, ["ip", "rule"]), capture_output=True, text=True).stdout
        assert f"{lb.RULE_PRIO}:" not in rules, rules  # flowlet is leaves only: spines back on ECMP
        gap = lb.flowlet_gap_s(spec)
        kept = _send_one_flow(spec)  # 2 ms between packets: one flowlet, one uplink
        assert max(kept.values()) >= 80, kept
        split = _send_one_flow(spec, pause_s=gap * 2)  # a gap twice the flowlet gap: two flowlets
        assert sorted(split.values())[-2:] >= [40, 40], split
        assert run.invoke(app, ["lb", name, "pbr"]).exit_code == 0
        assert lb.agent_state(st.lab_dir(name)) is None  # flowlet's agent stopped with it
        pinned = _send_one_flow(spec)
        assert max(pinned, key=pinned.get) == "eth9" and pinned["eth9"] >= 80, pinned
        assert run.invoke(app, ["lb", name, "wcmp"]).exit_code == 0
        ns = netns_name(name, "g1-leaf1")
        group = subprocess.run(exec_argv(ns, ["ip", "nexthop", "show", "id", str(lb.GROUP_ID)]),
                               capture_output=True, text=True).stdout
        assert group.count("/") == 7, group  # one group over the 8 uplinks
        agent = lb.agent_state(st.lab_dir(name))
        assert agent and agent["mode"] == "wcmp" and set(agent["leaves"]) >= {"g1-leaf1"}
        weighted = _send_one_flow(spec)
        assert max(weighted.values()) >= 80, weighted  # WCMP is per flow: one uplink
        assert run.invoke(app, ["lb", name, "ecmp"]).exit_code == 0
        hashed = _send_one_flow(spec)
        assert max(hashed.values()) >= 80, hashed  # the whole flow on one uplink
        r = run.invoke(app, ["traffic", name, "--pattern", "cross-group", "-n", "1", "--json"])
        f = json.loads(r.stdout)["flows"][0]
        assert f["sprayed"] == {} and len(f["uplinks"]) == 1 and len(f["path"]) == 3, f
        assert _leftovers(spec) == []
    finally:
        run.invoke(app, ["lb", name, "ecmp"])


def test_elephants_one_flow_per_nic_of_one_leaf_to_another_group_same_rail(spec):
    leaf, flows = lbcompare.elephants(spec)
    assert leaf == "g1-leaf1" and len(flows) == 8  # as many flows as the leaf has uplinks
    nics = {(n.server, n.gpu): n for n in spec.nics}
    srcs = [nics[f.src] for f in flows]
    assert len({(n.server, n.nic) for n in srcs}) == 8 and {n.leaf for n in srcs} == {leaf}
    for f in flows:
        s, d = nics[f.src], nics[f.dst]
        assert d.rail == s.rail and d.group != s.group


def test_compare_rejects_bad_workload_and_mode_before_running(spec):
    with pytest.raises(UsageError, match="workload"):
        lbcompare.compare(spec, lambda n: n, workload="bogus")
    with pytest.raises(UsageError, match="unknown load-balancing mode"):
        lbcompare.compare(spec, lambda n: n, modes=("ecmp", "bogus"))
    # --port-rate: a collective's bounds (railab.traffic.collective.run_rate_mbps), and no
    # meaning for the load-engine workloads, which run at the lab's rate
    for bad, needle in (("fast", "auto, lab"), ("0.5", "at least 1 Mb/s"), ("400", "at most lab")):
        with pytest.raises(UsageError, match=needle):
            lbcompare.compare(spec, lambda n: n, workload="all-to-all", port_rate=bad)
    with pytest.raises(UsageError, match="only the collective workloads"):
        lbcompare.compare(spec, lambda n: n, workload="elephants", port_rate="20")


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_compare_elephants(lossless_lab):
    """The issue's targets: ecmp collides, spray-rr evens the uplinks at a reordering cost,
    flowlet evens them with a tenth of it, pbr with none, wcmp does better than ecmp."""
    spec = lossless_lab.spec
    assert CliRunner().invoke(app, ["lb", spec.name, "pbr"]).exit_code == 0
    r = subprocess.run([sys.executable, "-m", "railab", "lb", "compare", spec.name, "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["left_on"] == {"mode": "pbr", "spines": False} and res["down_uplinks"] == []
    assert st.load(spec.name).load_balancing == "pbr"  # compare put the lab's mode back
    assert CliRunner().invoke(app, ["lb", spec.name, "ecmp"]).exit_code == 0
    modes = {m["mode"]: m for m in res["modes"]}
    assert set(modes) == {"ecmp", "spray-rr", "spray-random", "flowlet", "pbr", "wcmp"}
    assert modes["wcmp"]["uplink_imbalance"] < modes["ecmp"]["uplink_imbalance"], modes["wcmp"]
    assert all(m["drops"] == 0 for m in modes.values()), modes
    assert modes["ecmp"]["uplink_imbalance"] >= 1.8, modes["ecmp"]
    assert modes["spray-rr"]["uplink_imbalance"] <= 1.15 and modes["spray-rr"]["reordered_pct"] > 0
    assert modes["pbr"]["uplink_imbalance"] <= 1.05 and modes["pbr"]["reordered_pct"] == 0
    assert modes["flowlet"]["uplink_imbalance"] <= 1.35
    assert modes["flowlet"]["reordered_pct"] <= modes["spray-rr"]["reordered_pct"] / 10
    assert modes["spray-rr"]["max_psn_distance"] > 0 and modes["pbr"]["max_psn_distance"] == 0
    assert modes["ecmp"]["reordered_pct"] == 0  # per flow: nothing can reorder
    assert _leftovers(spec) == []


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_compare_all_to_all_reports_busbw_per_mode(lossless_lab):
    spec = lossless_lab.spec
    r = subprocess.run([sys.executable, "-m", "railab", "lb", "compare", spec.name, "--workload",
                        "all-to-all", "--modes", "ecmp,pbr", "--bytes", str(128 << 10), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    cap = spec.qos.capacity
    # the runs' ports slowed so the host keeps 32 NICs at line rate (time dilation), the time
    # scale theirs; the lab's own rate back after
    assert res["workload"] == "all-to-all" and res["lab_port_rate_mbps"] == cap.port_rate_mbps
    assert 0 < res["port_rate_mbps"] <= cap.port_rate_mbps
    assert res["time_scale"] == pytest.approx(cap.fabric_rate_gbps * 1000 / res["port_rate_mbps"])
    assert dilation.slowed_by(spec.name) is None
    for m in res["modes"]:
        assert m["busbw_gbps"] > 0 and m["fabric_busbw_gbps"] == pytest.approx(
            m["busbw_gbps"] * res["time_scale"], rel=0.01)
        assert m["drops"] == 0 and m["reordered_pct"] == 0  # per flow / per NIC: no reordering
    assert _leftovers(spec) == []


# ---- lab.load_balancing: the intent key and the bring-up phase ---------------------------------
def _intent_with(tmp_path, base: str, mode: str):
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    d = yaml.safe_load((root / "topologies" / "intents" / f"{base}.yml").read_text())
    d["lab"]["load_balancing"] = mode
    p = tmp_path / f"{base}-{mode}.yml"
    p.write_text(yaml.safe_dump(d))
    return p, None


@pytest.mark.parametrize("base, mode, words", [
    ("rail-only-512", "spray-rr", "rail-only lab has none"),
    ("mini", "wcmp", "needs lab.capacity"),
    ("mini", "flowlet", "needs lab.capacity"),
])
def test_intent_load_balancing_refused_where_the_lab_cannot_carry_it(tmp_path, base, mode, words):
    from railab.topologies.intent import IntentError

    p, _ = _intent_with(tmp_path, base, mode)
    with pytest.raises(IntentError, match=words):
        build_lab(load_intent(str(p)))


def test_lab_json_records_the_mode_and_what_sonic_renders(tmp_path):
    p, _ = _intent_with(tmp_path, "mini-lossless", "flowlet")
    s = build_lab(load_intent(str(p))).spec
    assert s.load_balancing.mode == "flowlet"
    assert "not rendered" in s.load_balancing.sonic and "flowlet" in s.load_balancing.sonic
    assert build_lab(load_intent("mini")).spec.load_balancing.mode == "ecmp"


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_up_applies_the_intents_mode_as_a_phase_and_down_removes_it(tmp_path):
    from conftest import PID, integration_skip_reason

    from railab.checks.deploy import bring_up
    from railab.testbed.runtime.netns.deploy import NetnsDeployer
    from railab.topologies.generator import generate

    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    p, _ = _intent_with(tmp_path, "mini-lossless", "wcmp")
    name = f"lbw{PID}"
    labdir = generate(p, tmp_path / name, name=name)
    rt = NetnsDeployer()
    try:
        rec = bring_up(rt, labdir)
        assert rec.load_balancing == "wcmp" and rec.timings["load_balancing_s"] > 0
        assert st.load(name).load_balancing == "wcmp"
        agent = lb.agent_state(st.lab_dir(name))
        assert agent and agent["mode"] == "wcmp"
        ns = netns_name(name, "g1-leaf1")
        nh = subprocess.run(exec_argv(ns, ["ip", "nexthop", "show", "id", str(lb.GROUP_ID)]),
                            capture_output=True, text=True).stdout
        assert "group" in nh
    finally:
        rt.down(name)
    left = subprocess.run(["pgrep", "-f", f"railab.testbed.lbagent.*/{name}/"], capture_output=True,
                          text=True).stdout
    assert not left.strip(), left


def test_report_draws_an_lb_comparison(spec, tmp_path):
    from railab.report import LabSummary, Report, add_runs, render_html

    def row(mode, imb, reo, busbw):
        return {"mode": mode, "uplink_imbalance": imb, "reordered_pct": reo, "fct_p50_s": 0.5,
                "fabric_busbw_gbps": busbw, "max_psn_distance": 3, "drops": 0}
    doc = {"workload": "all-to-all", "flows": 960, "flow_bytes": 4194304, "time_scale": 2000.0,
           "modes": [row("ecmp", 1.56, 0.0, 50.2), row("spray-rr", 1.05, 0.33, 61.0)]}
    (tmp_path / "lb.json").write_text(json.dumps(doc))
    rep = Report(lab=LabSummary.from_spec(spec))
    add_runs(rep, [tmp_path / "lb.json"])
    assert [r.label for r in rep.load_balancing] == ["lb compare all-to-all: 960 flows x 4194304 B"]
    page = render_html(rep, spec, diagram_svg="<svg></svg>")
    load = page[page.index('<section id="load">'):page.index('<section id="fabric">')]
    assert "Load balancing on the switches" in load and load.count("<svg") == 1
    for text in ("uplink max/mean", "out of PSN order, %", "busbw, fabric Gb/s", "spray-rr",
                 "time scale 2000"):
        assert text in load, text
    assert Report.model_validate_json(rep.dump()).load_balancing == rep.load_balancing


# ---- what a fresh-user review found (issue 30): faults, concurrency, input checks ---------------
def test_agent_leaves_down_members_out():
    assert lbagent.slot_table([1.0, 1.0, 1.0, 1.0], 8, alive=[True, False, True, True]) == \
        [0, 2, 3, 0, 2, 3, 0, 2]
    assert lbagent.slot_table([0.0, 0.0], 4, alive=[False, True]) == [1, 1, 1, 1]
    assert lbagent.slot_table([0.0, 0.0], 4, alive=[False, False]) == [0, 1, 0, 1]  # none: all
    assert lbagent.group_line(21000, [1, 2, 3], [16, 4, 9], [True, False, True]) == \
        "nexthop replace id 21000 group 1,16/3,9\n"
    assert lbagent.group_line(21000, [1], [16], [False]) == ""
    assert lbagent.member_line(20002, "eth11") == "nexthop replace id 20002 via 169.254.0.1 dev eth11 onlink\n"


def test_wcmp_lines_skip_uplinks_that_are_down():
    routes = [{"dst": "10.0.2.0/24", "nexthops": [{"gateway": "169.254.0.1", "dev": "eth10"}]}]
    lines = lb.wcmp_lines(routes, ["eth9", "eth10"], ["eth1"], up=["eth10", "eth1"])
    assert lines[0] == f"nexthop add id {lb.NH_BASE + 1} via 169.254.0.1 dev eth10 onlink"
    assert lines[1] == f"nexthop add id {lb.GROUP_ID} group {lb.NH_BASE + 1},1"
    assert lb.wcmp_lines(routes, ["eth9"], ["eth1"], up=[]) == []


def test_spine_spraying_is_by_next_hop_index_and_only_with_spray(spec):
    plans = lb.plan(spec, "spray-rr", spines=True)
    sp = [p for p in plans if p.spine]
    assert len(sp) == 4 and all(p.ways == 2 and p.n == 2 and len(p.servers) == 8 for p in sp)
    assert not [p for p in lb.plan(spec, "spray-rr") if p.spine]  # leaves only by default
    with pytest.raises(UsageError, match="spray-rr or spray-random"):
        lb.plan(spec, "pbr", spines=True)
    with pytest.raises(UsageError, match="one link per leaf-spine pair"):
        lb.plan(build_lab(load_intent("mini")).spec, "spray-rr", spines=True)
    routes = [{"dst": "10.0.1.0/24", "nexthops": [{"gateway": "169.254.0.1", "dev": "eth4"},
                                                 {"gateway": "169.254.0.1", "dev": "eth3"}]},
              {"dst": "10.255.0.9", "gateway": "169.254.0.1", "dev": "eth1"}]
    assert lb.indexed_member_routes(routes, 2) == [
        f"route replace 10.0.1.0/24 via 169.254.0.1 dev eth3 onlink table {lb.TABLE_BASE}",
        f"route replace 10.0.1.0/24 via 169.254.0.1 dev eth4 onlink table {lb.TABLE_BASE + 1}"]
    assert "mod 2 offset" in lb.nft_script(sp[0], "spray-rr")


def test_compare_checks_modes_and_bytes_before_running(spec):
    plain = build_lab(load_intent("mini")).spec
    assert lbcompare.check_modes(plain, None) == ("ecmp", "spray-rr", "spray-random", "pbr")
    assert lbcompare.check_modes(spec, None) == lbcompare.DEFAULT_MODES
    for bad, words in ((("ecmp", "ecmp"), "more than once"), ((), "comma-separated"),
                       (("ecmp", ""), "comma-separated"), (("flowlet",), "needs lab.capacity")):
        with pytest.raises(UsageError, match=words):
            lbcompare.check_modes(plain, bad)
    assert lbcompare.check_bytes("incast", None) == 1 << 20
    with pytest.raises(UsageError, match="at least 4096"):
        lbcompare.check_bytes("elephants", 0)
    with pytest.raises(UsageError, match="at least 1024"):
        lbcompare.check_bytes("all-reduce", 100)


def test_cli_compare_options_only_with_compare():
    r = subprocess.run([sys.executable, "-m", "railab", "lb", "no-such-lab-i30", "flowlet",
                        "--workload", "incast"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "only with `railab lb compare LAB`" in r.stderr, r.stderr


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_wcmp_follows_a_cut_uplink_and_concurrent_lb_leaves_one_agent(lossless_lab):
    spec = lossless_lab.spec
    name = spec.name
    ns = netns_name(name, "g1-leaf1")
    run = CliRunner()

    def group() -> str:
        return subprocess.run(exec_argv(ns, ["ip", "nexthop", "show", "id", str(lb.GROUP_ID)]),
                              capture_output=True, text=True).stdout

    try:
        assert run.invoke(app, ["fault", name, "link-down", "g1-leaf1", "spine1"]).exit_code == 0
        r = run.invoke(app, ["lb", name, "wcmp"])
        assert r.exit_code == 0, r.output  # a down uplink is left out, not a traceback
        assert f"{lb.NH_BASE}," not in group() and group().count("/") == 6, group()
        assert run.invoke(app, ["fault", name, "heal", "--all"]).exit_code == 0
        deadline = __import__("time").monotonic() + 5
        while f"{lb.NH_BASE}," not in group() and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.1)
        assert f"{lb.NH_BASE}," in group(), group()  # the agent put it back
        procs = [subprocess.Popen([sys.executable, "-m", "railab", "lb", name, m],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for m in ("flowlet", "wcmp", "spray-rr")]
        for p in procs:
            assert p.wait(timeout=60) == 0
        agents = subprocess.run(["pgrep", "-f", f"railab.testbed.lbagent.*/{name}/"],
                                capture_output=True, text=True).stdout.split()
        mode = st.load(name).load_balancing
        assert len(agents) == (1 if mode in lb.AGENT_MODES else 0), (mode, agents)
    finally:
        run.invoke(app, ["fault", name, "heal", "--all"])
        run.invoke(app, ["lb", name, "ecmp"])
    assert _leftovers(spec) == []


def test_compare_holds_the_lab_lock_and_a_mode_change_is_refused_meanwhile(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,sys,time\n"
        f"f=open({str(tmp_path / 'lb.lock')!r},'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "f.seek(0); f.truncate(); f.write('railab lb compare --workload elephants (pid 1)'); f.flush()\n"
        "print('held', flush=True); time.sleep(30)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match="railab lb compare --workload elephants .* is running"):
            with lb.lab_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    with lb.lab_lock(tmp_path), lb.lab_lock(tmp_path):  # free now; re-entrant in one process
        assert "railab lb (pid" in (tmp_path / "lb.lock").read_text()
    assert (tmp_path / "lb.lock").read_text() == ""


def test_bytes_have_an_upper_bound_and_disabled_capacity_refuses_agent_modes(tmp_path):
    from railab.topologies.intent import IntentError

    with pytest.raises(UsageError, match="at most"):
        lbcompare.check_bytes("elephants", 99999 << 30)
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    d = yaml.safe_load((root / "topologies" / "intents" / "mini-lossless.yml").read_text())
    d["lab"]["load_balancing"] = "wcmp"
    d["lab"]["capacity"]["enabled"] = False
    p = tmp_path / "x.yml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(IntentError, match="needs lab.capacity"):
        build_lab(load_intent(str(p)))


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_sigterm_during_compare_and_stale_tables_after_a_heal(lossless_lab):
    import signal
    import time

    spec = lossless_lab.spec
    name = spec.name
    run = CliRunner()
    try:
        assert run.invoke(app, ["lb", name, "pbr"]).exit_code == 0
        p = subprocess.Popen([sys.executable, "-m", "railab", "lb", "compare", name, "--modes",
                              "ecmp,wcmp,spray-rr,flowlet"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while lb.agent_state(st.lab_dir(name)) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until the wcmp mode (an agent) is applied
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 130, p.stderr.read()
        assert st.load(name).load_balancing == "pbr"  # the lab's own mode, put back
        assert lb.agent_state(st.lab_dir(name)) is None
        rps = subprocess.run(["ip", "netns", "exec", netns_name(name, "spine1"), "cat",
                              "/sys/class/net/eth1/queues/rx-0/rps_cpus"],
                             capture_output=True, text=True).stdout.strip()
        assert int(rps, 16) == 0, rps  # receive steering off again
        # spray-rr's member tables do not follow a route change: `railab lb LAB` says so
        assert run.invoke(app, ["lb", name, "spray-rr"]).exit_code == 0
        assert run.invoke(app, ["fault", name, "link-down", "g1-leaf1", "spine1"]).exit_code == 0
        assert run.invoke(app, ["fault", name, "heal", "--all"]).exit_code == 0
        assert run.invoke(app, ["check", name, "--wait", "30"]).exit_code == 0
        r = run.invoke(app, ["lb", name])
        assert "warning: g1-leaf1: member table 2000 has 0 of" in r.output, r.output
        assert run.invoke(app, ["lb", name, "spray-rr"]).exit_code == 0
        assert "warning" not in run.invoke(app, ["lb", name]).output
    finally:
        run.invoke(app, ["fault", name, "heal", "--all"])
        run.invoke(app, ["lb", name, "ecmp"])
    assert _leftovers(spec) == []
