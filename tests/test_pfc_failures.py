"""PFC's failure modes (issue 45): the ``pfc-storm`` and ``pfc-priority`` faults, the PFC watchdog and the deadlock
of a cyclic buffer dependency (railab.testbed.pfcfail, the watchdog in railab.testbed.pfc, the
``pfc`` check family in railab.checks.pfc).

Unit tests: the watchdog's setting and its tc lines, the storm file, the deadlock's cycle on
mini-lossless. Live tests on the session's ``mini-lossless`` (real FRR, real qdiscs, real
packets): a storm injects, gives exactly one root cause naming its link in ``railab check
--json`` and heals green; a storm's victim is stuck while the watchdog is off and recovers once
it runs; a routing loop deadlocks four queues that stay full and paused with the traffic gone,
and the watchdog drains them; PFC on the wrong priority gives one root cause and its NIC takes
no PAUSE; a ``link-speed`` fault (a leaf-spine link trained to half its speed; not a PFC failure,
but a capacity lab's fault: its unit tests are tests/test_link_speed_unit.py) halves both ends'
rates, gives one root cause naming the link, and heals to the planned rates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.testbed import pfc, pfcfail
from railab.testbed.pfc import Port, Watchdog
from railab.topologies.generator import build_lab
from railab.topologies.intent import load_intent


def _cli(*args):
    from railab.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


# ---- unit -------------------------------------------------------------------------------------
def test_watchdog_setting_is_validated_and_survives_the_plan(tmp_path):
    with pytest.raises(ValueError, match="drop, forward or alert"):
        Watchdog(action="ignore")
    with pytest.raises(ValueError, match="> 0"):
        Watchdog(detection_time_ms=0)
    wd = Watchdog(detection_time_ms=400, restoration_time_ms=300, action="forward")
    pfc.set_watchdog(tmp_path, wd)
    assert pfc.read_watchdog(tmp_path) == wd
    pfc.set_watchdog(tmp_path, None)
    assert pfc.read_watchdog(tmp_path) is None and not (tmp_path / pfc.WATCHDOG_FILE).exists()
    from railab.testbed import capacity as cap

    spec = build_lab(load_intent("mini-lossless")).spec
    plan = cap.agent_plan(spec, lambda n: f"ns-{n}", pfc=True, watchdog=wd)
    back = pfc.AgentPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.watchdog == wd and back == plan


def test_watchdog_drop_line_drops_every_arrival_at_line_rate():
    p = Port("g1-leaf1", "eth3", "srv3", "eth1", True, 200_000_000, 4_000_000, 4_000_000, 9100)
    paused = pfc.tbf_line(p, 0x10013, paused=True, extra=0)
    drop = pfc.tbf_line(p, 0x10013, paused=True, extra=5000, drop=True)
    assert f"rate {pfc.PAUSED_RATE_BPS}bit" in paused and "limit 4000000" in paused
    # drop wins over paused: the queue runs at twice the port rate (the htb class shapes) and
    # no frame fits in its limit
    assert "rate 400000000bit" in drop and drop.rstrip().endswith(f"limit {pfc.DROP_LIMIT_BYTES}")


def test_storm_file_round_trip(tmp_path):
    assert pfc.read_storms(tmp_path) == {}
    pfc.write_storms(tmp_path, {("g1-leaf1", "eth3"): "f4"})
    assert pfc.read_storms(tmp_path) == {("g1-leaf1", "eth3"): "f4"}
    (tmp_path / pfc.STORM_FILE).write_text("not json")
    assert pfc.read_storms(tmp_path) == {}


def test_pfc_priority_file_round_trip(tmp_path):
    assert pfc.read_pfc_priorities(tmp_path) == {}
    (tmp_path / pfc.PFC_PRIORITY_FILE).write_text('{"srv1:eth1": 4, "bad": 1, "g1-leaf1:eth3": "x"}')
    assert pfc.read_pfc_priorities(tmp_path) == {("srv1", "eth1"): 4}


def test_deadlock_cycle_is_leaf_spine_leaf_spine():
    spec = build_lab(load_intent("mini-lossless")).spec
    loop = pfcfail.loop_plan(spec)
    roles = [spec.node(n).role for n, _ in loop.hops]
    assert roles == ["leaf", "spine", "leaf", "spine"]
    # each hop's egress port leads to the next hop's node, and the last back to the first
    for (n, port), (nxt, _) in zip(loop.hops, loop.hops[1:] + loop.hops[:1], strict=True):
        assert spec.peers[(n, port)][0] == nxt
    assert [spec.peers[e][0] for e in loop.entries] == [loop.hops[0][0], loop.hops[2][0]]


def _sonic_lossless(watchdog: dict | None) -> tuple:
    """(the spec, g1-leaf1's config_db) of mini-lossless as sonic-vs with ``watchdog`` as its
    ``lab.capacity.pfc_watchdog``."""
    import yaml

    from railab.topologies.intent import parse_intent

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "topologies" / "intents"
                           / "mini-lossless.yml").read_text())
    data["lab"]["kind"] = "sonic-vs"
    if watchdog is not None:
        data["lab"]["capacity"]["pfc_watchdog"] = watchdog
    built = build_lab(parse_intent(data), name="wd")
    return built.spec, json.loads(built.files["configs/g1-leaf1/config_db.json"])


def test_pfc_watchdog_in_the_intent_reaches_the_agent_and_sonic_pfc_wd():
    from railab.testbed import capacity as cap
    from railab.topologies.intent import IntentError
    from railab.topologies.sonic_yang import MODEL_SETS, find_models, load_models

    spec, db = _sonic_lossless({"detection_time_ms": 300, "restoration_time_ms": 400, "action": "forward"})
    assert cap.watchdog_of(spec) == Watchdog(detection_time_ms=300, restoration_time_ms=400, action="forward")
    assert db["PFC_WD"] == {p: {"action": "forward", "detection_time": "300", "restoration_time": "400"}
                            for p in db["PORT"]}
    plain_spec, plain = _sonic_lossless(None)
    assert "PFC_WD" not in plain and cap.watchdog_of(plain_spec) is None
    with pytest.raises(IntentError, match="detection_time_ms"):
        _sonic_lossless({"detection_time_ms": 50})  # SONiC's range is 100-5000 ms
    bad = json.loads(json.dumps(db))
    bad["PFC_WD"]["Ethernet0"]["detection_time"] = "50"
    for model_set in MODEL_SETS:  # SONiC's 202305 and master models (tests/test_sonic_yang.py)
        path = find_models(model_set)
        if path is None:
            pytest.skip(f"SONiC YANG models {model_set} not found (tests/test_sonic_yang.py says where)")
        try:
            models = load_models(str(path))
        except Exception as exc:  # noqa: BLE001 - libyang missing: the YANG tests skip the same way
            pytest.skip(f"SONiC YANG models cannot load: {exc}")
        assert models.errors(db) == [], model_set
        assert models.errors(bad), model_set


# ---- live -------------------------------------------------------------------------------------
#: The watchdog of the live tests: SONiC's default restoration time, a detection time above the
#: 0.17 s an incast of 97.5 % of the port needs to fill a leaf queue to xOFF (so the storm's
#: PAUSE spreads before the watchdog acts), in lab ms.
WD = Watchdog(detection_time_ms=300, restoration_time_ms=200, action="drop")


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_storm_one_root_cause_naming_the_link_and_heals_green(lossless_lab):
    lab = lossless_lab.name
    r = _cli("fault", lab, "pfc-storm", "srv2:eth1")
    assert r.exit_code == 0, r.output
    try:
        doc = json.loads(_cli("check", lab, "--json").output)
        roots = doc["root_causes"]
        assert len(roots) == 1, json.dumps(roots, indent=1)
        cause = roots[0]["cause"]
        assert cause["kind"] == "pfc-storm" and cause["link"] == "g1-leaf1:eth2--srv2:eth1", cause
        # the paused end is the one named (the leaf's port towards the storming NIC)
        assert (cause["node"], cause["port"]) == ("g1-leaf1", "eth2")
        from railab.checks.rootaudit import audit
        from railab.testbed.faults import list_faults

        faults = [f.model_dump() for f in list_faults(lab)]
        assert audit(doc, faults, lossless_lab.spec) == []
        # while a traffic run's agent holds the port (and owns its tbf), the same row
        from railab.checks.runner import run_checks
        from railab.testbed import capacity as cap

        with cap.pfc_session(lossless_lab.spec, lossless_lab.netns_of, enabled=True) as sess:
            rows = run_checks(lossless_lab.spec, lossless_lab.executor, only="pfc")
            assert sess.state()["storms"] == ["g1-leaf1:eth2"]
        assert [(r.status, r.node, r.port, r.cause.kind) for r in rows] == [
            ("fail", "g1-leaf1", "eth2", "pfc-storm")], rows
    finally:
        h = _cli("fault", lab, "heal", "--all")
    assert h.exit_code == 0, h.output
    doc = json.loads(_cli("check", lab, "--json", "--only", "pfc").output)
    assert doc["ok"] and doc["root_causes"] == [] and doc["summary"]["pfc"]["pass"] == 1


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("action", ["drop", "forward"])
def test_live_storm_victim_stuck_without_watchdog_recovers_with_it(lossless_lab, action):
    lab = lossless_lab
    wd_on = Watchdog(detection_time_ms=WD.detection_time_ms,
                     restoration_time_ms=WD.restoration_time_ms, action=action)
    r = pfcfail.storm_victims(lab.name, lab.spec, lab.netns_of, wd_on, off_s=1.5, on_s=1.5)
    # the watchdog off: once the stormed queue passed xOFF the leaf PAUSEd the victim's NIC,
    # and nothing of the victim's arrived until the watchdog started (measured 1.0-1.3 s of
    # the 1.5 s; the queue takes 0.17 s or more to reach xOFF)
    assert r["pauses"] >= 1 and r["stuck_s"] is not None and r["stuck_s"] >= 0.6, r
    # the watchdog on: the stormed queue ignores the PAUSE after the detection time (drop or
    # forward its traffic), the leaf RESUMEs, and the victim's packets arrive again
    assert r["recovered_s"] is not None, r
    if action == "drop":  # the storming NIC got (almost) nothing: the queue is discarded, the
        # leaf's queue empties at once and the victim's NIC backlog follows: nothing lost
        assert r["victim_rx"] >= 0.99 * r["victim_sent"], r
        assert r["culprit_rx"] < 0.01 * r["culprit_sent"], r
        assert r["recovered_s"] < wd_on.detection_time_ms / 1000 + 0.5, r
    else:  # forward: the queue sends at line rate despite the PAUSE (measured: 51-56 % of it
        # in the 1.5 s); the culprit's NIC backlog then keeps the leaf's queue at xOFF at line
        # rate, so the victim's backlog is through only once that is gone (measured 0.32 s and
        # 2.0 s; in two fresh-clone suites not within 1.5 or 3 s: 527 of 14,062 arrived), so
        # forward promises the victim packets again, not its whole backlog within the window
        assert r["culprit_rx"] >= 0.25 * r["culprit_sent"], r
    wd = r["watchdog"][r["stormed"]]
    assert wd["detections"] == 1 and wd["restorations"] == 1 and wd["state"] == "operational", wd
    # restored once no PAUSE had held it for the restoration time (the heal ended the storm),
    # not before (measured 0.200-0.210 s; 1.09 s once at load average 35: the agent's cycles)
    assert WD.restoration_time_ms / 1000 <= wd["restore_lag_s"] < WD.restoration_time_ms / 1000 + 1.5


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_routing_loop_deadlocks_and_the_watchdog_breaks_it(lossless_lab):
    lab = lossless_lab
    r = pfcfail.deadlock_run(lab.spec, lab.netns_of, WD, seconds=4.0, hold=1.0)
    # the loop filled the cycle: every queue reached xOFF and none drained to xON (measured
    # 0.70-0.74 s, load 26-30)
    assert r["filled_s"] is not None, r
    # 1 s after the traffic stopped and the loop's routes went, every queue of the cycle is
    # still full and paused: a deadlock
    assert r["deadlocked"], r
    assert all(b >= lab.spec.qos.pfc_pause_bytes // 2 for b in r["held_bytes"].values()), r
    # the watchdog drains the cycle within its detection time and a few cycles
    assert r["broken_s"] is not None and r["broken_s"] < WD.detection_time_ms / 1000 + 0.5, r
    assert set(r["watchdog"]) <= set(r["loop"]) and r["watchdog"], r


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_pfc_on_the_wrong_priority_one_root_cause_and_the_port_ignores_pause(lossless_lab):
    lab = lossless_lab.name
    bad = _cli("fault", lab, "pfc-priority", "srv1:eth1", "--priority", "3")  # the lossless one
    assert bad.exit_code != 0 and "other than the lossless priority 3" in str(bad.exception), bad
    r = _cli("fault", lab, "pfc-priority", "srv1:eth1", "--priority", "5")
    assert r.exit_code == 0, r.output
    try:
        doc = json.loads(_cli("check", lab, "--json").output)
        roots = doc["root_causes"]
        assert len(roots) == 1, json.dumps(roots, indent=1)
        assert roots[0]["cause"] == {"kind": "pfc-priority", "node": "srv1", "port": "eth1",
                                     "link": "g1-leaf1:eth1--srv1:eth1"}, roots
        row = next(x for x in doc["results"] if x["check"] == "pfc" and x["status"] == "fail")
        assert row["observed"] == "PFC on priority 5", row
    finally:
        h = _cli("fault", lab, "heal", "--all")
    assert h.exit_code == 0, h.output
    assert json.loads(_cli("check", lab, "--json", "--only", "pfc").output)["ok"]
    # 2:1 onto one leaf port with PFC on: the leaf PAUSEs both senders when its queue passes
    # xOFF; the misconfigured NIC takes none of them and keeps sending
    m = pfcfail.priority_run(lab, lossless_lab.spec, lossless_lab.netns_of, seconds=1.5)
    bad, good = m[m["misconfigured"]], m[m["correct"]]
    assert bad["pause_events"] == 0 and bad["pause_ignored"] >= 1, m
    assert good["pause_events"] >= 1 and good["pause_ignored"] == 0, m


def _shaped_rates(ns: str, ifname: str) -> tuple[int, int]:
    """(htb port class 1:1 rate, lossless tbf rate) of ``ifname`` in namespace ``ns``, bit/s,
    read from the kernel (raw rtnetlink for the class, ``tc -j`` for the tbf: bytes/s)."""
    import subprocess

    from railab.testbed.namespaces import entered, exec_argv
    from railab.testbed.rtnl import Rtnl

    with entered(ns):
        r = Rtnl()
    try:
        idx = next(i for i, (name, _mac) in r.links().items() if name == ifname)
        port = next(c.rate_bps for c in r.htb_classes(idx) if c.handle == 0x10001)
    finally:
        r.close()
    doc = json.loads(subprocess.run(exec_argv(ns, ["tc", "-j", "qdisc", "show", "dev", ifname]),
                                    capture_output=True, text=True, check=True).stdout)
    tbf = next(q["options"]["rate"] for q in doc if q["kind"] == "tbf" and q.get("parent") == "1:13")
    return port, 8 * tbf


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_link_speed_halves_both_ends_one_root_cause_and_heals(lossless_lab):
    """``railab fault LAB link-speed g1-leaf1 spine1 --gbps 200`` (a 400G uplink trained to
    200G): both ends' htb port class and lossless tbf at half their lab rate, exactly one root
    cause (``link-speed``, naming the link) in ``railab check --json``, and the heal puts the
    planned rates back (the ``speed`` check passes)."""
    from railab.checks.rootaudit import audit
    from railab.testbed.faults import list_faults, resolve_link
    from railab.topologies.naming import link_id

    lab, spec = lossless_lab.name, lossless_lab.spec
    leaf, lp, spine, sp = resolve_link(spec, "g1-leaf1", "spine1")
    lid = link_id(leaf, lp, spine, sp)
    full = int(spec.qos.capacity.port_rate_mbps * 1e6)  # a 400G port, fabric_rate_gbps 400
    ends = ((lossless_lab.netns_of(leaf), lp), (lossless_lab.netns_of(spine), sp))
    assert [_shaped_rates(*e) for e in ends] == [(full, 2 * full)] * 2
    bad = _cli("fault", lab, "link-speed", "g1-leaf1", "spine1", "--gbps", "400")  # the planned speed
    assert bad.exit_code != 0 and "below the link's planned speed, 400 Gb/s" in str(bad.exception), bad
    r = _cli("fault", lab, "link-speed", "g1-leaf1", "spine1", "--gbps", "200")
    assert r.exit_code == 0, r.output
    try:
        assert [_shaped_rates(*e) for e in ends] == [(full // 2, full)] * 2
        doc = json.loads(_cli("check", lab, "--json").output)
        roots = doc["root_causes"]
        assert len(roots) == 1, json.dumps(roots, indent=1)
        assert roots[0]["cause"]["kind"] == "link-speed" and roots[0]["cause"]["link"] == lid, roots
        row = next(x for x in doc["results"] if x["check"] == "speed" and x["status"] == "fail")
        assert row["reason"].startswith(f"port {row['node']}:{row['port']} runs at 200 Gb/s, planned 400"), row
        assert audit(doc, [f.model_dump() for f in list_faults(lab)], spec) == []
    finally:
        h = _cli("fault", lab, "heal", "--all")
    assert h.exit_code == 0, h.output
    assert [_shaped_rates(*e) for e in ends] == [(full, 2 * full)] * 2
    doc = json.loads(_cli("check", lab, "--json", "--only", "speed").output)
    assert doc["ok"] and doc["root_causes"] == [] and doc["summary"]["speed"]["pass"] == 1
