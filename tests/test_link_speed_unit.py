"""The ``link-speed`` fault without a lab (railab.testbed.faults, railab.testbed.capacity,
railab.testbed.dilation) and the ``speed`` check family's reading and verdict
(railab.checks.speed, railab.testbed.rtnl.parse_htb_class). The live test (one leaf-spine link
at 200 of 400 Gb/s on the session's mini-lossless: tc rates of both ends, one root cause in
``railab check --json``, the heal) is in tests/test_pfc_failures.py."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from railab.checks import rootaudit
from railab.checks.base import LinkState
from railab.errors import UsageError
from railab.testbed import capacity as cap
from railab.testbed import dilation, faults
from railab.testbed import state as st
from railab.testbed.rtnl import HtbClass, parse_htb_class
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import link_id

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lspec(tmp_path_factory) -> LabSpec:
    return LabSpec.load(generate(ROOT / "topologies" / "intents" / "mini-lossless.yml",
                                 tmp_path_factory.mktemp("ls") / "ml", name="lsunit"))


def _uplink(spec: LabSpec):
    """The first leaf-spine link of ``spec``: ``(link, leaf end, spine end)``."""
    for lk in spec.links:
        roles = {spec.node(lk.a.node).role, spec.node(lk.b.node).role}
        if roles == {"leaf", "spine"}:
            leaf, spine = (lk.a, lk.b) if spec.node(lk.a.node).role == "leaf" else (lk.b, lk.a)
            return lk, (leaf.node, leaf.interface), (spine.node, spine.interface)
    raise AssertionError("no leaf-spine link")


def _record(monkeypatch, tmp_path, spec: LabSpec, faults_: list[st.FaultRecord]) -> None:
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab=spec.name, phase="running", faults=faults_))


def _fault(leaf, spine, gbps: float = 200.0, fid: str = "f1") -> st.FaultRecord:
    return st.FaultRecord(id=fid, kind="link-speed", node=leaf[0], port=leaf[1], peer_node=spine[0],
                          peer_port=spine[1], params={"gbps": gbps, "planned_gbps": 400})


# ---- the rates a fault gives the ports -------------------------------------------------------
def test_trained_speeds_are_both_ends_of_each_link_speed_fault(lspec, monkeypatch, tmp_path):
    lk, leaf, spine = _uplink(lspec)
    other = st.FaultRecord(id="f2", kind="mtu", node="srv1", port="eth1", peer_node="g1-leaf1",
                           peer_port="eth1", params={"mtu": 1500, "planned_mtu": 9100})
    _record(monkeypatch, tmp_path, lspec, [_fault(leaf, spine, 100.0), other])
    assert cap.trained_speeds(lspec.name) == {leaf: 100.0, spine: 100.0}
    assert cap.trained_speeds("nosuchlab") == {}


def test_ports_and_rate_lines_at_a_trained_speed(lspec):
    """Both ends of the slowed link at gbps/planned of the lab rate: htb port class, the two
    leaf classes (10 % control share) and the lossless tbf at rest (twice the port rate);
    every other port as planned."""
    lk, leaf, spine = _uplink(lspec)
    assert lk.speed_gbps == 400 and lspec.qos.capacity.port_rate_mbps == 200
    planned = {p.key: p for p in cap.ports(lspec)}
    slow = {p.key: p for p in cap.ports(lspec, {leaf: 200.0, spine: 200.0})}
    assert slow[leaf].rate_bps == slow[spine].rate_bps == 100_000_000
    assert planned[leaf].rate_bps == 200_000_000
    assert {k: p for k, p in slow.items() if k not in (leaf, spine)} == \
        {k: p for k, p in planned.items() if k not in (leaf, spine)}
    lines = cap.rate_lines(slow[leaf], lspec.qos).splitlines()
    dev = leaf[1]
    assert lines[0].startswith(f"class change dev {dev} parent 1: classid 1:1 htb rate 100000000bit "
                               "ceil 100000000bit ")
    assert lines[1].startswith(f"class change dev {dev} parent 1:1 classid 1:10 htb rate 10000000bit "
                               "ceil 100000000bit ")
    assert lines[2].startswith(f"class change dev {dev} parent 1:1 classid 1:13 htb rate 90000000bit "
                               "ceil 100000000bit ")
    assert lines[3] == (f"qdisc change dev {dev} parent 1:13 handle 13: tbf rate 200000000bit "
                        f"burst {2 * (slow[leaf].mtu + 14)} limit {slow[leaf].lossless_limit}")
    assert len(lines) == 4
    paused = cap.rate_lines(slow[leaf], lspec.qos, paused=True).splitlines()
    assert paused[:3] == lines[:3] and f"tbf rate {cap.PAUSED_RATE_BPS}bit " in paused[3]


def test_a_dilated_run_and_its_restore_keep_the_trained_speed(lspec):
    """dilation._change_lines at a run's rate and at the lab's: the slowed link at half of
    each, the others at the full rate (a dilated run neither undoes the fault nor, once
    healed, keeps it: the speeds are read at each call)."""
    lk, leaf, spine = _uplink(lspec)
    speeds = {leaf: 200.0, spine: 200.0}
    for spec, full in ((dilation.at_rate(lspec, 20), 20_000_000), (lspec, 200_000_000)):
        lines = dilation._change_lines(spec, frozenset(), speeds)
        for node, text in lines.items():
            for ln in text.splitlines():
                if " classid 1:1 " not in ln:
                    continue
                dev = ln.split(" dev ", 1)[1].split()[0]
                want = full // 2 if (node, dev) in speeds else full
                assert f" rate {want}bit ceil {want}bit " in ln, (node, ln)
        healed = dilation._change_lines(spec)
        assert f"classid 1:1 htb rate {full}bit " in healed[leaf[0]]
        assert f"rate {full // 2}bit" not in healed[leaf[0]].split(f"dev {leaf[1]} ")[1].split("\n")[0]


def test_retime_reads_the_faults_of_the_lab(lspec, monkeypatch, tmp_path):
    """dilation.retime (a run's slow-down and every restore) sends the trained speed of a
    recorded fault to tc, and the planned one once the record is gone."""
    lk, leaf, spine = _uplink(lspec)
    sent: dict[str, str] = {}
    monkeypatch.setattr(dilation, "run_batches",
                        lambda jobs, what: sent.update({n: text for n, (_argv, text) in jobs.items()}))
    _record(monkeypatch, tmp_path, lspec, [_fault(leaf, spine)])
    dilation.retime(lspec, lambda n: f"clab-{lspec.name}-{n}")
    mine = next(ln for ln in sent[leaf[0]].splitlines() if f"dev {leaf[1]} parent 1: classid 1:1 " in ln)
    assert " rate 100000000bit ceil 100000000bit " in mine
    _record(monkeypatch, tmp_path, lspec, [])
    dilation.retime(lspec, lambda n: f"clab-{lspec.name}-{n}")
    mine = next(ln for ln in sent[spine[0]].splitlines() if f"dev {spine[1]} parent 1: classid 1:1 " in ln)
    assert " rate 200000000bit ceil 200000000bit " in mine


def test_the_switch_agent_plan_carries_the_trained_speed(lspec, monkeypatch, tmp_path):
    lk, leaf, spine = _uplink(lspec)
    _record(monkeypatch, tmp_path, lspec, [_fault(leaf, spine, 100.0)])
    plan = cap.agent_plan(lspec, lambda n: n, pfc=True)
    rates = {p.key: p.rate_bps for p in plan.ports}
    assert rates[leaf] == rates[spine] == 50_000_000
    assert sum(r == 200_000_000 for r in rates.values()) == len(rates) - 2


def test_inject_refuses_bad_speeds_and_labs_without_capacity(lspec, tmp_path):
    """UsageError before anything is recorded: no --gbps, 0, the planned speed or above, a lab
    without lab.capacity (the fake lab has no record to save: reaching _new would fail)."""
    lk, leaf, spine = _uplink(lspec)
    lab = SimpleNamespace(spec=lspec, name=lspec.name, record=SimpleNamespace(faults=[]))
    for params, words in (({}, "give --gbps G"), ({"gbps": 0}, "above 0 and below"),
                          ({"gbps": 400}, "planned speed, 400 Gb/s"), ({"gbps": 800}, "below"),
                          ({"gbps": "fast"}, "must be a float"),
                          ({"gbps": 1e-9}, "not a speed an Ethernet port trains to"),
                          ({"gbps": 398}, "one of 10, 25, 40, 50, 100, 200 "),
                          ({"gbps": 150}, "not a speed"),
                          ({"gbps": 200, "mtu": 1500}, "takes no parameter mtu")):
        with pytest.raises(UsageError, match=words):
            faults._inject_link_speed(lab, leaf[0], spine[0], None, dict(params))
    mini = LabSpec.load(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "m", name="lsmini"))
    plain = SimpleNamespace(spec=mini, name=mini.name, record=SimpleNamespace(faults=[]))
    with pytest.raises(UsageError, match="needs a lab with lab.capacity"):
        faults._inject_link_speed(plain, "g1-leaf1", "spine1", None, {"gbps": 200})
    assert faults.cli_params("link-speed", gbps=100) == {"gbps": 100}
    assert "gbps" not in faults.cli_params("mtu", mtu=1500, gbps=100)
    assert faults.planned_speed(lspec, *leaf) == 400


# ---- the check's reading ----------------------------------------------------------------------
def _attr(typ: int, value: bytes) -> bytes:
    n = 4 + len(value)
    return struct.pack("=HH", n, typ) + value + b"\0" * ((n + 3 & ~3) - n)


def _htb_msg(index: int, handle: int, parent: int, rate_b: int, ceil_b: int, *, kind: bytes = b"htb",
             rate64: int | None = None) -> bytes:
    """An RTM_NEWTCLASS payload as the kernel builds it: tcmsg, TCA_KIND, TCA_OPTIONS nesting
    TCA_HTB_PARMS (tc_htb_opt: two 12-byte tc_ratespec, rates in bytes/s at +8; buffer,
    cbuffer, quantum, level, prio) and, for a rate above 2^32 - 1 bytes/s, TCA_HTB_RATE64."""
    spec = lambda r: struct.pack("=BBHhHI", 0, 1, 0, -1, 0, r)  # noqa: E731
    parms = spec(rate_b) + spec(ceil_b) + struct.pack("=IIIII", 1000, 1000, 9114, 0, 0)
    opts = _attr(1, parms) + (_attr(6, struct.pack("=Q", rate64)) if rate64 else b"")
    return (struct.pack("=BxxxiIII", 0, index, handle, parent, 0) + _attr(1, kind + b"\0")
            + _attr(2, opts))


def test_parse_htb_class_reads_rates_in_bit_per_second():
    c = parse_htb_class(_htb_msg(7, 0x10001, 0xFFFFFFFF, 12_500_000, 12_500_000))
    assert c == HtbClass(index=7, handle=0x10001, parent=0xFFFFFFFF, rate_bps=100_000_000,
                         ceil_bps=100_000_000)
    big = parse_htb_class(_htb_msg(7, 0x10014, 0x10001, 0xFFFFFFFF, 0xFFFFFFFF, rate64=6_000_000_000))
    assert big.rate_bps == 48_000_000_000 and big.ceil_bps == 8 * 0xFFFFFFFF
    assert parse_htb_class(_htb_msg(7, 0x130001, 0x130000, 1, 1, kind=b"tbf")) is None


class _Obs:
    """An Observer stand-in: the lab's links by index, an htb port class per port at ``rates``
    (bit/s), stop never set."""

    def __init__(self, spec: LabSpec, rates: dict[tuple[str, str], int]) -> None:
        self.spec = spec
        self._idx = {}
        for i, p in enumerate(cap.ports(spec)):
            self._idx[p.key] = i + 2
        self._rates = rates

    def check_stop(self) -> None:
        pass

    def links(self, node: str) -> dict[str, LinkState]:
        return {port: LinkState(ifname=port, index=i, status="up", operstate="UP", kind="veth",
                                peer_ifindex=None, peer_nsid=None)
                for (n, port), i in self._idx.items() if n == node}

    def _rtnl(self, node: str):
        rev = {i: k for k, i in self._idx.items()}
        rates = self._rates

        class R:
            @staticmethod
            def htb_classes(index):
                r = rates[rev[index]]
                return [HtbClass(index, 0x10013, 0x10001, r - r // 10, r),
                        HtbClass(index, 0x10001, 0xFFFFFFFF, r, r)]
        return R


def test_check_speed_one_row_per_slow_link_naming_it(lspec, monkeypatch, tmp_path):
    from railab.checks.speed import check_speed

    lk, leaf, spine = _uplink(lspec)
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))  # no record, no dilation marker
    planned = {p.key: p.rate_bps for p in cap.ports(lspec)}
    rows = check_speed(_Obs(lspec, planned))
    assert [(r.status, r.check) for r in rows] == [("pass", "speed")]
    assert rows[0].observed == f"{len(planned)} of {len(planned)} ports read, all at their planned speed"
    # both ends at half: one row, the link's first end named, Gb/s of the real fabric
    slow = {**planned, leaf: 100_000_000, spine: 100_000_000}
    rows = check_speed(_Obs(lspec, slow))
    assert len(rows) == 1 and rows[0].status == "fail", rows
    r = rows[0]
    lid = link_id(lk.a.node, lk.a.interface, lk.b.node, lk.b.interface)
    assert r.cause.kind == "link-speed" and r.cause.link == lid == r.link
    assert (r.cause.node, r.cause.port) == (lk.a.node, lk.a.interface)
    assert r.reason.startswith(f"port {lk.a.node}:{lk.a.interface} runs at 200 Gb/s, planned 400:")
    assert f"{leaf[0]}:{leaf[1]} at 200 Gb/s (100000000 bit/s)" in r.observed
    # within tc's byte rounding: still planned
    near = {**planned, leaf: planned[leaf] - 8}
    assert check_speed(_Obs(lspec, near))[0].status == "pass"
    # one end only (a shaper changed by hand) still fails, as one row
    rows = check_speed(_Obs(lspec, {**planned, spine: 50_000_000}))
    assert len(rows) == 1 and (rows[0].cause.node, rows[0].cause.port) == spine and "100 Gb/s" in rows[0].reason
    # a dilated run killed before its restore (its marker names a dead PID): every port at the
    # run's rate is one row saying so, not one "trained down" per link (a reviewer saw 64)
    marker = tmp_path / lspec.name / "dilation.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    marker.write_text(json.dumps({"pid": dead.pid, "lab_rate_mbps": 200, "run_rate_mbps": 20}))
    rows = check_speed(_Obs(lspec, {k: v // 10 for k, v in planned.items()}))
    assert len(rows) == 1 and rows[0].status == "fail" and rows[0].cause is None, rows
    assert f"left by process {dead.pid}, which is gone" in rows[0].observed
    assert "the next load run restores it" in rows[0].reason
    marker.unlink()
    # a lab without lab.capacity: no row
    mini = LabSpec.load(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "m", name="lsmini2"))
    assert check_speed(SimpleNamespace(spec=mini)) == []


def test_root_audit_takes_the_link_speed_cause_on_either_end(lspec):
    lk, leaf, spine = _uplink(lspec)
    f = _fault(leaf, spine).model_dump()
    lid = link_id(lk.a.node, lk.a.interface, lk.b.node, lk.b.interface)
    for node, port in (leaf, spine):
        assert rootaudit.names({"kind": "link-speed", "node": node, "port": port, "link": lid}, f, lspec)
    assert not rootaudit.names({"kind": "mtu-mismatch", "node": leaf[0], "port": leaf[1], "link": lid}, f, lspec)


def test_check_that_runs_no_row_says_so_not_all_passed(monkeypatch, capsys):
    """``railab check LAB --only speed`` on a lab without lab.capacity ran no row and printed
    "all 0 checks passed"; it now says nothing was checked and why."""
    import threading

    from railab.checks import lab as L
    from railab.checks import runner
    from railab.cli.check import _check

    monkeypatch.setattr(L.LiveLab, "attach", classmethod(
        lambda cls, ref: SimpleNamespace(name="plain", spec=None, executor=None, netns_of=None)))
    monkeypatch.setattr(runner, "run_checks", lambda *a, **k: [])
    monkeypatch.setattr("railab.checks.exercise.check_detail", lambda lab: None)
    n = _check("plain", "speed", False, None, False, None, None, threading.Event())
    out = capsys.readouterr().out
    assert n == 0 and "all 0 checks passed" not in out
    assert "no checks ran" in out and "--only speed" in out and "lab.capacity" in out
    assert "pass" not in out  # no empty table above it
    _check("plain", "speed", True, None, False, None, None, threading.Event())
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["results"] == [] and doc["note"].startswith("no checks ran: --only speed")

