"""Issue 31, load runs: a load run (``railab traffic LAB --pattern incast``, or any pattern with
``--cc``/``--pfc``/``--seconds``) whose flows fail to a fault names the element that broke,
as the packet patterns do (``root_causes`` shaped like ``railab check``'s, ``attributed``,
``unattributed``), in text and ``--json``; a run that cannot run at all still prints JSON
(``error``, and the root causes check finds on the flows' paths) and exits 1.

Root-free tests build the load result by hand; the live ones run short incasts (4 lab s) on
the session's ``mini-lossless`` lab with one fault at a time, healed between."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.traffic.load import LoadResult, flow_results
from railab.traffic.patterns import Flow, incast_pairs, route

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    from railab.topologies.generator import generate

    return generate(ROOT / "topologies" / "intents" / "mini.yml",
                    tmp_path_factory.mktemp("lrc") / "lrc", name="lrc")


@pytest.fixture(scope="module")
def spec(spec_dir):
    from railab.topologies.labspec import LabSpec

    return LabSpec.load(spec_dir)


def _incast(spec, n: int = 4) -> list[Flow]:
    return [route(spec, Flow(a, b)) for a, b in incast_pairs(spec, n)]


def _flow_dict(f: Flow, **kw) -> dict:
    d = {"name": f.name, "expected_hops": f.expected_hops, "hops": f.expected_hops,
         "tx_packets": 100, "rx_packets": 100, "lost": 0, "backpressure": 0, "nic_down": False,
         "down_nic": None, "port_missing": None, "mtu_exceeded": None, "mtu_note": None,
         "path": None}
    d.update(kw)
    return d


def _result(flows: list[dict], lost: int = 0) -> LoadResult:
    return LoadResult(cc="dcqcn", sport_mode="per-qp", seconds=4, sample_s=0.1,
                      port_rate_mbps=200, time_scale=2000, flows=flows, lost=lost, dropped=0)


def _names(cause: dict | None, element: set[str]) -> bool:
    """``cause`` (a root cause's ``cause`` dict) names one of ``element``'s ``node:port`` ends
    (itself or as an end of its link) or its node."""
    if not cause:
        return False
    ends = set(cause["link"].split("--")) if cause.get("link") else set()
    if cause.get("port"):
        ends.add(f"{cause['node']}:{cause['port']}")
    return bool(ends & element) or cause.get("node") in element


def test_load_flow_failures_name_the_fault_and_pfc_loss_is_per_flow_only_for_attribution(spec):
    from railab.cli.traffic import load_flow_failures, load_verdict

    fl = _incast(spec)
    rcv = f"{fl[0].dst[0]}:eth{fl[0].dst_nic}"
    flows = [_flow_dict(fl[0], rx_packets=0, lost=100, hops=None, down_nic=rcv),
             _flow_dict(fl[1], tx_packets=0, rx_packets=0, port_missing="g1-leaf1:eth2"),
             _flow_dict(fl[2], rx_packets=0, lost=100, hops=None, mtu_exceeded=rcv,
                        mtu_note=f"4138 B packets exceed {rcv}'s MTU 1500 B (dropped on arrival)"),
             _flow_dict(fl[3], rx_packets=90, lost=10)]
    res = _result(flows, lost=210)
    why = load_flow_failures(res, pfc_on=True, capacity=True)
    assert why[0] == f"{rcv} is down: sent 100, 0 arrived"
    assert "g1-leaf1:eth2, which does not exist" in why[1] and why[1].endswith("not sent")
    assert why[2].startswith(f"MTU: 4138 B packets exceed {rcv}'s MTU 1500 B")
    assert why[3] == "lost 10 of 100 with PFC on"
    # with PFC off, loss alone is a measured result
    assert load_flow_failures(res, pfc_on=False, capacity=True)[3] is None
    # the verdict lists each flow's fault once; the PFC loss is the run's one line
    bad = load_verdict(res, pfc_on=True, capacity=True)
    assert bad[0].startswith("loss with PFC on") and len(bad) == 4
    assert bad[1] == f"{fl[0].name}: {rcv} is down: sent 100, 0 arrived"
    assert not any("lost 10 of 100" in b for b in bad)


def test_a_dead_receiver_nic_is_one_attributed_root_cause_like_check(spec):
    """Every flow of an incast onto a NIC that is down follows check's ``link-down`` on that
    NIC's link: one root cause, attributed, naming the NIC, every flow under it."""
    from railab.checks.base import Cause, failed
    from railab.cli.traffic import flow_root_causes, load_flow_failures, unattributed

    fl = _incast(spec)
    nic = spec.nic(fl[0].dst[0], fl[0].dst_nic)
    rcv = f"{nic.server}:{nic.interface}"
    link = f"{nic.leaf}:{nic.leaf_port}--{rcv}"
    res = _result([_flow_dict(f, rx_packets=0, lost=100, hops=None, down_nic=rcv,
                              path=[f"{nic.leaf}:{nic.leaf_port}"]) for f in fl], lost=400)
    results = flow_results(fl, res, load_flow_failures(res, pfc_on=True, capacity=True))
    assert [r.ok for r in results] == [False] * 4 and results[0].nic_down == rcv
    down = failed("cabling", f"{nic.server} NIC {nic.nic}", node=nic.server, port=nic.interface,
                  link=link, cause=Cause(kind="link-down", node=nic.server, port=nic.interface,
                                         link=link))
    causes = flow_root_causes(spec, results, groups=[(down, [])])
    assert len(causes) == 1, causes
    c = causes[0]
    assert c["attributed"] and c["cause"]["kind"] == "link-down" and _names(c["cause"], {rcv})
    assert sorted([c["root"], *c["explains"]]) == sorted(f.name for f in fl)
    assert unattributed(causes) == []
    # without check's groups the flow's own mark still names the NIC
    (own,) = flow_root_causes(spec, results)
    assert own["attributed"] and _names(own["cause"], {rcv})
    # a passing run has no root cause at all
    ok = _result([_flow_dict(f) for f in fl])
    assert not any(load_flow_failures(ok, pfc_on=True, capacity=True))


def test_flow_results_refuse_mismatched_lengths(spec):
    fl = _incast(spec, 2)
    with pytest.raises(ValueError, match="2 flows, 1 results"):
        flow_results(fl, _result([_flow_dict(fl[0])]), [None, None])


def test_a_load_run_that_errors_prints_json_with_the_cause_and_exits_1(spec_dir, spec, monkeypatch):
    """A load run the engine cannot run printed ``error: ...`` and no JSON at all; now the JSON
    has ``error`` and the check root cause on the flows' paths, and the exit is 1."""
    from railab.checks.base import Cause, failed
    from railab.cli import app
    from railab.cli import traffic as T
    from railab.errors import RailabError
    from railab.traffic import load as L

    def boom(*a, **kw):
        raise RailabError("load engine failed: something broke")

    fl = _incast(spec, 8)
    nic = spec.nic(fl[0].dst[0], fl[0].dst_nic)
    link = f"{nic.leaf}:{nic.leaf_port}--{nic.server}:{nic.interface}"
    gone = failed("cabling", "NIC", node=nic.server, port=nic.interface, link=link,
                  cause=Cause(kind="link-down", node=nic.leaf, port=nic.leaf_port, link=link))
    monkeypatch.setattr(L, "run_load", boom)
    monkeypatch.setattr(T, "check_groups", lambda lab, stop=None: [(gone, [])])
    r = CliRunner().invoke(app, ["traffic", str(spec_dir), "--pattern", "incast", "--cc", "none",
                                 "--seconds", "1", "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["error"] == "load engine failed: something broke"
    assert len(doc["root_causes"]) == 1 and doc["root_causes"][0]["attributed"]
    assert _names(doc["root_causes"][0]["cause"], {f"{nic.server}:{nic.interface}"})
    assert doc["unattributed"] == []
    # text: the error line and the root cause, exit 1, no traceback
    r = CliRunner().invoke(app, ["traffic", str(spec_dir), "--pattern", "incast", "--cc", "none",
                                 "--seconds", "1"], env={"COLUMNS": "250"})
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exception, r.output)
    assert "error: load engine failed: something broke" in r.output
    assert "root cause:" in r.output and nic.server in r.output


# ---- live: mini-lossless, one fault at a time ------------------------------------------------


def _cli(*args):
    from railab.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _incast_json(lab: str, *extra: str) -> tuple[int, dict]:
    r = _cli("traffic", lab, "--pattern", "incast", "--senders", "4", "--seconds", "2", "--json",
             *extra)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    try:
        return r.exit_code, json.loads(r.stdout)
    except ValueError:
        pytest.fail(f"exit {r.exit_code}, not JSON: {r.output[-3000:]}")


def _heal(lab: str) -> None:
    r = _cli("fault", lab, "heal", "--all")
    assert r.exit_code == 0, r.output
    r = _cli("check", lab, "--wait", "30")
    assert r.exit_code == 0, r.output[-3000:]


def _one_cause(doc: dict, element: set[str], kind: str | None = None) -> dict:
    roots = doc["root_causes"]
    assert len(roots) == 1, [(c["root"], c["cause"], c["text"]) for c in roots]
    c = roots[0]
    assert c["attributed"] and _names(c["cause"], element), c
    assert kind is None or c["cause"]["kind"] == kind, c
    assert doc["unattributed"] == []
    return c


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_load_run_names_the_fault_that_fails_its_flows(lossless_lab):
    lab = lossless_lab.name
    spec = lossless_lab.spec
    fl = [route(spec, Flow(a, b)) for a, b in incast_pairs(spec, 4)]
    rcv = spec.nic(fl[0].dst[0], fl[0].dst_nic)
    rcv_ends = {f"{rcv.server}:{rcv.interface}", f"{rcv.leaf}:{rcv.leaf_port}"}
    snd = spec.nic(fl[1].src[0], fl[1].src_nic)
    snd_ends = {f"{snd.server}:{snd.interface}", f"{snd.leaf}:{snd.leaf_port}"}

    # healthy: no root cause (a busy host may fall short of the rate: that names no element)
    rc, doc = _incast_json(lab)
    assert doc["root_causes"] == [] and doc["unattributed"] == [] and doc["error"] is None, doc["failures"]
    assert rc == 0 or all("short of its configured rate" in f for f in doc["failures"]), doc["failures"]

    cases = [  # fault, the element's ends, cause kind (None: any naming it)
        (["link-down", f"{rcv.server}:{rcv.interface}"], rcv_ends, "link-down"),
        (["mtu", f"{rcv.server}:{rcv.interface}", "--mtu", "1500"], rcv_ends, "mtu-mismatch"),
        (["cable-pull", f"{rcv.server}:{rcv.interface}"], rcv_ends, None),
        # grey loss on the receiver's leaf port: with PFC on every lost packet fails its flow
        (["grey-loss", f"{rcv.leaf}:{rcv.leaf_port}", "--percent", "5"], rcv_ends, "port-filter"),
        (["mtu", f"{snd.server}:{snd.interface}", "--mtu", "1500"], snd_ends, "mtu-mismatch"),
    ]
    for fault, element, kind in cases:
        r = _cli("fault", lab, *fault)
        assert r.exit_code == 0, r.output
        try:
            time.sleep(0.5)
            rc, doc = _incast_json(lab)
            assert rc == 1, (fault, doc["failures"])
            assert doc["failures"], fault
            if fault[0] != "cable-pull":  # the run ran (a pulled cable stops the PFC session:
                assert doc["error"] is None, doc["error"]  # an error, with the cause)
            c = _one_cause(doc, element, kind)
            if fault[1] == f"{snd.server}:{snd.interface}":  # one sender: one flow, the others ran
                assert [c["root"], *c["explains"]] == [fl[1].name]
                ran = [f for f in doc["congestion"]["flows"] if f["name"] != fl[1].name]
                assert all(f["tx_packets"] > 0 for f in ran)
            else:  # the receiver: every flow
                assert sorted([c["root"], *c["explains"]]) == sorted(f.name for f in fl)
            if fault[0] in ("link-down", "grey-loss"):  # the text names it too (one renderer
                # for every kind: a receiver-side and a leaf-port cause are enough to see it)
                r = _cli("traffic", lab, "--pattern", "incast", "--senders", "4", "--seconds", "2")
                assert r.exit_code == 1 and "root cause:" in r.output, r.output[-3000:]
        finally:
            _heal(lab)
        if fault[0] == "cable-pull":  # the re-made veth got the receiver's port queues back: the
            # cases after it (and the next modules' incasts into the same NIC) are congested again
            for node, port in ((rcv.server, rcv.interface), (rcv.leaf, rcv.leaf_port)):
                out = lossless_lab.exec(node, ["tc", "qdisc", "show", "dev", port, "root"]).stdout
                assert out.startswith("qdisc htb 1: root"), (node, port, out)
