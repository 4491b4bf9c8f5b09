"""Root-free parts of training exercises (railab.checks.exercise, railab.testbed.exercise): the
seeded choice of faults, grading (structured, aliases, free text), the sealed record, the score
sheet and the command gate."""

from __future__ import annotations

import json
import os
import re

import pytest

from railab.checks import exercise as X
from railab.errors import RailabError, UsageError
from railab.testbed import exercise as store
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return LabSpec.load(generate("mini", tmp_path_factory.mktemp("xu") / "xu1", name="xu1"))


@pytest.fixture(scope="module")
def lspec(tmp_path_factory):
    """A generated ``mini-lossless`` lab (lab.capacity: the PFC level's)."""
    return LabSpec.load(generate("mini-lossless", tmp_path_factory.mktemp("xl") / "xl1", name="xl1"))


@pytest.fixture(scope="module")
def specs(spec, lspec):
    """The lab each level runs on here: ``mini``, and ``mini-lossless`` for the lossless levels."""
    return {level: lspec if level in X.LOSSLESS_LEVELS else spec for level in X.LEVELS}


@pytest.fixture
def exdir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_EXERCISE_DIR", str(tmp_path / "ex"))
    return tmp_path / "ex"


def _rec(spec, level=2, kind="cross-cable", seed=3):
    return {"lab": spec.name, "labdir": "/nowhere", "level": level, "seed": seed, "kind": kind,
            "started_at": 1000.0, "faults": X.plan_faults(spec, level, seed, kind), "disabled": ["check"],
            "found": [], "answers": [], "hints": [], "fix": {"attempts": 0, "verified_at": None}}


def test_same_seed_same_faults_other_seeds_differ(spec, specs):
    assert sorted(X.LEVELS) == [1, 2, 3, 4]
    for level in X.LEVELS:
        a = X.plan_faults(specs[level], level, 42)
        b = X.plan_faults(specs[level], level, 42)
        assert [(f["kind"], f["element"]) for f in a] == [(f["kind"], f["element"]) for f in b]
    picks = {tuple((f["kind"], f["element"]) for f in X.plan_faults(spec, 2, s)) for s in range(30)}
    assert len(picks) > 5  # the seed matters
    for level in (2, 4):
        kinds = {f["kind"] for s in range(40) for f in X.plan_faults(specs[level], level, s)}
        assert kinds == set(X.LEVELS[level])  # every kind of the level is drawn for some seed


def test_every_kind_plans_an_injectable_fault(specs):
    from railab.testbed import capacity as cap

    for level, kinds in X.LEVELS.items():
        spec = specs[level]
        for kind in kinds:
            for f in X.plan_faults(spec, level, 5, kind):
                assert f["kind"] in X.KINDS
                assert f["element"] in f["accept"]
                assert len(f["hints"]) == 3 and f["symptom"]
                node = f["element"].partition(":")[0]
                assert node not in f["hints"][0]  # grade 1 names the area, not the node
                assert node in f["hints"][1] or node in f["hints"][2]
                assert f["fault"]["kind"] in ("link-down", "cross-cable", "session-shut", "wrong-asn",
                                              "daemon-kill", "grey-loss", "mtu", "pfc-storm", "pfc-priority")
                if level in X.LOSSLESS_LEVELS:  # a shaped port, and its link's far end also names it
                    shaped = {f"{p.node}:{p.interface}" for p in cap.ports(spec)}
                    assert set(f["accept"]) <= shaped and len(f["accept"]) == 2
                    assert f["fault"]["node_a"] == f["element"]
    # level 4: storms from a server NIC and from a switch port; priorities other than RoCE's
    storms = [X.plan_faults(specs[4], 4, s, "pfc-storm")[0]["element"] for s in range(12)]
    assert any(e.startswith("srv") for e in storms) and any(e.startswith("spine") or "-leaf" in e for e in storms)
    prios = {X.plan_faults(specs[4], 4, s, "pfc-priority")[0]["fault"]["params"]["priority"] for s in range(30)}
    assert specs[4].qos.roce_tc not in prios and len(prios) > 3


def test_two_faults_are_on_different_nodes(spec):
    for seed in range(20):
        f1, f2 = X.plan_faults(spec, 3, seed, "two-faults")
        assert not X._nodes(f1) & X._nodes(f2)
        assert f1["kind"] in X.PAIRABLE and f2["kind"] in X.PAIRABLE


def test_level_and_kind_are_validated(spec, lspec):
    with pytest.raises(UsageError, match="use 1, 2, 3 or 4"):
        X.plan_faults(spec, 5, 1)
    with pytest.raises(UsageError, match="it is level 3: --level 3"):
        X.plan_faults(spec, 1, 1, "mtu")
    # the PFC level on a lab without lab.capacity: one error naming the intent to use
    with pytest.raises(UsageError, match="level 4 .* lab xu1 has no lab.capacity .*use the mini-lossless intent"):
        X.plan_faults(spec, 4, 1)
    with pytest.raises(UsageError, match="it is level 4: --level 4"):
        X.plan_faults(lspec, 3, 1, "pfc-storm")
    assert X.normalise_kind("pause storm") == "pfc-storm" and X.normalise_kind("PFC_prio") == "pfc-priority"
    with pytest.raises(UsageError, match="unknown fault kind"):
        X.normalise_kind("gremlins")
    assert X.normalise_kind("Crossed cables") == "cross-cable"
    assert X.normalise_kind("bad_peer_as") == "wrong-asn"


def test_grade_names_both_ends_and_refuses_near_misses(spec):
    rec = _rec(spec, 1, "link-down", 9)
    f = rec["faults"][0]
    end, far = f["accept"]
    assert X.grade(rec, end, "link-down")[0] == 0
    assert X.grade(rec, far, "link-down")[0] == 0
    assert X.grade(rec, end, "nic-down")[0] == 0  # a NIC down is a link down at the server end
    idx, why = X.grade(rec, end, "mtu")
    assert idx is None and "another kind" in why
    idx, why = X.grade(rec, end.partition(":")[0], "link-down")
    assert idx is None and "name the port" in why
    other = next(f"{lk.a.node}:{lk.a.interface}" for lk in spec.links
                 if f"{lk.a.node}:{lk.a.interface}" not in f["accept"])
    assert X.grade(rec, other, "link-down") == (None, "no injected fault is that")


def test_free_text_answers(spec):
    els, kind = X._parse_text(spec, "srv2 gpu0 and gpu2 have their cables swapped")
    assert els[0] == "srv2:eth1" and kind == "cross-cable"
    assert X._parse_text(spec, "g1-leaf2:eth3 is admin down") == (["g1-leaf2:eth3"], "link-down")
    assert X._parse_text(spec, "bgpd is dead on spine2")[1] == "daemon-kill"
    assert X._parse_text(spec, "the neighbor on g2-leaf1 eth4 is shut down in bgp")[1] == "session-shut"
    assert X._parse_text(spec, "g1-leaf3 eth1 runs MTU 1500") == (["g1-leaf3:eth1"], "mtu")
    assert X._parse_text(spec, "srv4 nic 4 is down") == (["srv4:eth4"], "nic-down")
    assert X._element(spec, "srv1:gpu3") == "srv1:eth4" and X._element(spec, "srv1:nic3") == "srv1:eth3"
    with pytest.raises(UsageError, match="has no port 'eth9'"):
        X._element(spec, "srv1:eth9")


def test_sealed_record_round_trips_and_hides_the_faults(spec, exdir):
    rec = _rec(spec)
    store.save(spec.name, rec, X.public_view(rec))
    assert store.load(spec.name) == rec
    sealed = (exdir / spec.name / "sealed").read_bytes()
    public = (exdir / spec.name / "public.json").read_text()
    for f in rec["faults"]:
        for e in f["accept"]:
            assert e.encode() not in sealed
            assert e not in public
        assert f["kind"] not in public
    assert b"cross-cable" not in sealed and b"faults" not in sealed
    assert oct((exdir / ".key").stat().st_mode & 0o777) == "0o600"
    assert store.labs() == [spec.name]
    tampered = bytearray(sealed)
    tampered[20] ^= 1
    (exdir / spec.name / "sealed").write_bytes(bytes(tampered))
    with pytest.raises(RailabError, match="does not verify"):
        store.load(spec.name)
    store.remove(spec.name)
    assert store.load(spec.name) is None and store.labs() == []


def test_score_sheet_and_report_line(spec, exdir):
    rec = _rec(spec, 3, "two-faults", 4)
    rec["found"] = [0]
    rec["faults"][0]["found_at"] = 1030.0
    rec["hints"] = [{"fault": 1, "grade": 1, "at": 1010.0}]
    rec["answers"] = [{"right": False}, {"right": True}]
    sheet = X.score_sheet(spec.name, rec)
    assert sheet["faults_found"] == 1 and sheet["faults_total"] == 2
    assert sheet["time_to_diagnosis_s"] is None  # not every fault found yet
    assert sheet["points"] == 100 - 15 - 5 and sheet["max_points"] == 250
    assert "faults" not in sheet
    rec["found"] = [0, 1]
    rec["faults"][1]["found_at"] = 1100.0
    rec["fix"]["verified_at"] = 1200.0
    sheet = X.score_sheet(spec.name, rec)
    assert sheet["time_to_diagnosis_s"] == 100.0 and sheet["repair"]["verified_after_s"] == 200.0
    assert sheet["points"] == 200 - 15 - 5 + 50
    store.save(spec.name, rec, X.public_view(rec))
    line = X.report_line(spec.name)
    assert "2/2 fault(s) found in 100 s" in line and "repair verified" in line
    assert "seed" not in line  # the seed gives the faults away while it runs
    for f in rec["faults"]:
        assert f["element"] not in line
    rec["revealed_at"] = 1300.0
    store.save(spec.name, rec, X.public_view(rec))
    sheet = X.score_sheet(spec.name)
    assert [(f["element"], f["kind"]) for f in sheet["faults"]] == [(f["element"], f["kind"]) for f in rec["faults"]]
    assert rec["faults"][0]["element"] in X.report_line(spec.name)
    json.dumps(sheet)


def test_gate_refuses_switched_off_commands_by_name_and_directory(spec, exdir, tmp_path):
    from railab.cli.exercise import gate

    labdir = tmp_path / "lab"
    labdir.mkdir()
    (labdir / "lab.clab.yml").write_text("")
    rec = {**_rec(spec), "labdir": str(labdir)}
    store.save(spec.name, rec, X.public_view(rec))
    with pytest.raises(UsageError, match="railab check is switched off for the exercise on lab xu1"):
        gate("check", [spec.name])
    with pytest.raises(UsageError, match="switched off"):
        gate("check", [str(labdir)])
    with pytest.raises(UsageError, match="switched off"):
        gate("check", [str(labdir / "lab.clab.yml")])
    gate("check", ["otherlab"])  # another lab: allowed
    gate("traffic", [spec.name])  # not switched off
    rec2 = {**rec, "disabled": ["check", "traceroute", "exec"]}
    store.save(spec.name, rec2, X.public_view(rec2))
    with pytest.raises(UsageError) as e:  # it points at the tools still on, not at switched-off ones
        gate("check", [spec.name])
    assert "railab traffic" in str(e.value) and "traceroute" not in str(e.value) and "exec" not in str(e.value)
    store.save(spec.name, rec, X.public_view(rec))
    gate("exercise", [spec.name])
    rec["revealed_at"] = 2000.0
    store.save(spec.name, rec, X.public_view(rec))
    gate("check", [spec.name])  # the gate lifts at reveal


def test_gated_commands_keep_their_signature():
    """The CLI wraps the switchable commands; Typer still sees their parameters."""
    from typer.testing import CliRunner

    from railab.cli import app

    r = CliRunner().invoke(app, ["check", "-h"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--only" in r.output
    r = CliRunner().invoke(app, ["exercise", "-h"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for sub in ("start", "hint", "answer", "fix", "reveal", "score", "swap-cables"):
        assert sub in r.output


def test_report_page_carries_the_exercise_line(spec, tmp_path):
    from railab.report import Report, write_report
    from tests.test_report import _synthetic

    rep = _synthetic(spec)
    rep.exercise = "Training exercise (level 2, started 2026-12-01T10:00:00+00:00, running): 0/1 fault(s) found"
    files = write_report(rep, spec, tmp_path / "out")
    html = files.html.read_text()
    assert 'id="exercise-score"' in html and "0/1 fault(s) found" in html
    assert Report.load(tmp_path / "out").exercise == rep.exercise
    rep.exercise = None
    assert 'id="exercise-score"' not in write_report(rep, spec, tmp_path / "out2").html.read_text()


def test_same_seed_same_faults_on_another_lab_of_the_same_shape(specs, tmp_path):
    others = {"mini": LabSpec.load(generate("mini", tmp_path / "xu2", name="another-lab")),
              "mini-lossless": LabSpec.load(generate("mini-lossless", tmp_path / "xl2", name="another-ll"))}
    for level in X.LEVELS:
        other = others["mini-lossless" if level in X.LOSSLESS_LEVELS else "mini"]
        for seed in (1, 7, 11):
            a = [(f["kind"], f["element"], f["symptom"], f["hints"]) for f in X.plan_faults(specs[level], level, seed)]
            b = [(f["kind"], f["element"], f["symptom"], f["hints"]) for f in X.plan_faults(other, level, seed)]
            assert a == b


# ---- review fixes (rev18) ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def xr(tmp_path_factory):
    """A generated (not running) mini lab ``xr1``: (lab directory, LabSpec)."""
    d = generate("mini", tmp_path_factory.mktemp("xr") / "xr1", name="xr1")
    return d, LabSpec.load(d)


def _fake_up(tmp_path, monkeypatch, xr, seq=0):
    """Record lab ``xr1`` as running (no namespaces: only the state file the fault record lives in)."""
    from railab.testbed import state as st

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    st.save(st.LabState(lab="xr1", runtime="netns", phase="running", labdir=str(xr[0]), fault_seq=seq))
    return st


def test_hidden_faults_do_not_advance_the_visible_fault_counter(xr, tmp_path, monkeypatch):
    # inspect --json showed fault_seq 1 on a lab with an empty fault list: a fault was hidden
    from railab.testbed import faults as F

    st = _fake_up(tmp_path, monkeypatch, xr, seq=3)
    labdir = xr[0]
    hidden = [st.FaultRecord(id="f4", kind="link-down", node="srv1", port="eth1"),
              st.FaultRecord(id="f5", kind="mtu", node="srv2", port="eth2", params={"mtu": 1500})]
    rec = st.load("xr1")
    rec.faults, rec.fault_seq = hidden, 5
    st.save(rec)
    assert [r.id for r in F.detach(labdir, ["f4", "f5"])] == ["f4", "f5"]
    assert st.load("xr1").fault_seq == 3 and st.load("xr1").faults == []
    # a visible fault takes f4 meanwhile: attach renumbers the hidden f4, keeps f5, bumps the counter
    visible = st.FaultRecord(id="f4", kind="session-shut", node="spine1", port="eth1")
    rec = st.load("xr1")
    rec.faults, rec.fault_seq = [visible], 4
    st.save(rec)
    back = F.attach(labdir, hidden)
    assert [(r.id, r.kind) for r in back] == [("f5", "link-down"), ("f6", "mtu")]
    now = st.load("xr1")
    assert [f.id for f in now.faults] == ["f4", "f5", "f6"] and now.fault_seq == 6
    assert F.attach(labdir, back) == back and len(st.load("xr1").faults) == 3  # idempotent


def test_exercise_grey_loss_table_does_not_say_railab(spec, xr, tmp_path, monkeypatch):
    from railab.testbed import faults as F

    for seed in range(6):
        f = X.plan_faults(spec, 3, seed, "grey-loss")[0]
        assert f["fault"]["params"]["table"] == X.GREY_TABLE and "railab" not in X.GREY_TABLE
    rec = F.st.FaultRecord(id="f2", kind="grey-loss", node="g1-leaf1", port="eth1",
                           params={"percent": 10.0, "table": X.GREY_TABLE})
    assert F._grey_table(rec) == X.GREY_TABLE
    assert F._grey_table(rec.model_copy(update={"params": {"percent": 10.0}})) == "railab_f2"
    _fake_up(tmp_path, monkeypatch, xr)
    with pytest.raises(UsageError, match="grey-loss table"):
        F.inject(xr[0], "grey-loss", "g1-leaf1:eth1", percent=10, table="bad name;")


def test_free_text_with_a_port_the_node_lacks_is_bad_input(spec, exdir):
    # "srv4 nic 9 down" was graded WRONG as the bare node srv4 (and cost 5 points)
    with pytest.raises(UsageError, match="srv4 has no port 'eth9'"):
        X._parse_text(spec, "srv4 nic 9 is down")
    with pytest.raises(UsageError, match="has no port"):
        X._parse_text(spec, "g1-leaf1 eth42 drops packets")
    assert X._parse_text(spec, "srv4 gpu3 link down") == (["srv4:eth4"], "link-down")


def test_fix_does_not_stand_in_for_a_switched_off_check(spec, exdir, monkeypatch):
    """With `check` switched off, `exercise fix` tells how many checks fail, not which."""
    from railab.checks import lab as livelab
    from railab.checks.base import CheckResult

    row = CheckResult(check="cabling", name="g1-leaf1:eth1 egress filter", status="fail", node="g1-leaf1")

    class _Live:
        def check(self, only=None):
            return [row]

    monkeypatch.setattr(livelab.LiveLab, "attach", classmethod(lambda cls, ref: _Live()))
    monkeypatch.setattr(X, "_lab", lambda ref: (spec.name, spec, X.st.LabState(lab=spec.name)))
    # with check on, fix names the rows at the exercise's check detail (level 2: family and node)
    for disabled, detail, shown in ((["check"], None, []), ([], "element", ["cabling: g1-leaf1:eth1 egress filter"]),
                                    ([], None, ["cabling: cabling at g1-leaf1"])):
        rec = {**_rec(spec), "disabled": disabled, "check_detail": detail}
        for i, f in enumerate(rec["faults"]):
            f["record"] = X.st.FaultRecord(id=f"f{i + 1}", kind="cross-cable", node="srv1").model_dump(mode="json")
        store.save(spec.name, rec, X.public_view(rec))
        res = X.fix(spec.name, wait=0)
        assert res["green"] is False and res["n_failing"] == 1 and res["failing"] == shown
        assert res["rows_hidden"] is (not shown)


def _running(spec, level: int, disabled=(), plan_on=None):
    """A running exercise of ``level`` recorded for lab ``spec.name``; ``plan_on``: the lab its
    faults are planned on (a lossless level's ``mini-lossless``: the record is what is read)."""
    rec = {**_rec(plan_on or spec, level=level, kind=None), "lab": spec.name, "disabled": list(disabled)}
    store.save(spec.name, rec, X.public_view(rec))
    return rec


def test_one_lock_on_fault_changes_with_the_levels_repair_tools(spec, lspec, exdir):
    """Issue 48: while an exercise runs, every path that changes faults is refused with one
    message naming nothing hidden; the level's repair tools pass (exec always, restart and
    swap-cables at level 2), unless switched off; the exercise's own actions pass; reveal lifts it."""
    lab = spec.name
    store.guard(lab, "fault")  # no exercise: open
    for level, open_ in ((1, {"exec"}), (2, {"exec", "restart", "swap-cables"}), (3, {"exec"}), (4, {"exec"})):
        _running(spec, level, plan_on=lspec if level in X.LOSSLESS_LEVELS else None)
        messages = set()
        for cmd in ("fault", "drill", "restart", "swap-cables", "exec"):
            if cmd in open_:
                store.guard(lab, cmd)
                continue
            with pytest.raises(UsageError) as exc:
                store.guard(lab, cmd)
            messages.add(str(exc.value))
        (msg,) = messages  # the same message for every command
        assert msg.startswith(f"an exercise runs on lab {lab}") and f"exercise stop {lab}" in msg
        assert all(e not in msg for f in store.load(lab)["faults"] for e in f["accept"])
        with store.acting(lab):  # start / reveal / stop act on their own faults
            store.guard(lab, "fault")
        with store.acting("another"), pytest.raises(UsageError):
            store.guard(lab, "fault")
    _running(spec, 2, disabled=["restart"])
    with pytest.raises(UsageError, match="railab exercise swap-cables$"):
        store.guard(lab, "restart")
    rec = store.load(lab)
    rec["revealed_at"] = 2000.0
    store.save(lab, rec, X.public_view(rec))
    store.guard(lab, "drill")  # revealed: the lock lifted


def _green_fix(spec, monkeypatch):
    """``X.fix`` on a lab every check passes on (no lab: the record alone decides the credit)."""
    from railab.checks import lab as livelab

    class _Green:
        def check(self, only=None):
            return []

    monkeypatch.setattr(livelab.LiveLab, "attach", classmethod(lambda cls, ref: _Green()))
    monkeypatch.setattr(X, "_lab", lambda ref: (spec.name, spec, X.st.LabState(lab=spec.name)))


def _start_kind(spec, level: int, kind: str | None, seed: int = 3) -> dict:
    rec = {**_rec(spec, level=level, kind=kind, seed=seed), "disabled": [], "repairs": []}
    for i, f in enumerate(rec["faults"]):
        f["record"] = X.st.FaultRecord(id=f"f{i + 1}", kind=f["fault"]["kind"],
                                       node=f["element"].partition(":")[0]).model_dump(mode="json")
    store.save(spec.name, rec, X.public_view(rec))
    return rec


def test_fix_credits_only_a_repair_the_record_journals(spec, exdir, monkeypatch):
    """Issue 48 review (A): a journaled look, or a command on another node or port, does not
    make a repair made outside (straight in the namespace) the trainee's; the repair of the
    hidden fault's element, journaled, does."""
    _green_fix(spec, monkeypatch)
    (f,) = _start_kind(spec, 1, None)["faults"]
    assert (f["kind"], f["element"]) == ("nic-down", "srv1:eth4")
    res = X.fix(spec.name, wait=0)
    assert res["green"] is True and res["credited"] is False
    not_repairs = [("exec", "srv1", ["ip", "-br", "link"]),                 # a look
                   ("exec", "srv1", ["ip", "link", "show", "eth4", "up"]),  # a look, with "up" in it
                   ("exec", "srv1", ["ip", "link", "set", "eth3", "up"]),   # another port
                   ("exec", "g1-leaf4", ["ip", "link", "set", "eth1", "up"]),  # the far end: not what is down
                   ("exec", "srv2", ["(shell)"])]                            # a shell elsewhere
    for tool, node, argv in not_repairs:
        store.note_repair(spec.name, tool, node, argv)
        res = X.fix(spec.name, wait=0)
        assert res["green"] is True and res["credited"] is False, argv
    assert X.score_sheet(spec.name)["repair"]["verified"] is False
    store.note_repair(spec.name, "exec", "srv1", ["ip", "link", "set", "eth4", "up"])
    assert store.load(spec.name)["repairs"][-1]["argv"][:3] == ["ip", "link", "set"]
    res = X.fix(spec.name, wait=0)
    assert res["credited"] is True and res["blunt"] is False
    sheet = X.score_sheet(spec.name)
    assert sheet["repair"] == {**sheet["repair"], "verified": True, "blunt": False} and sheet["points"] == 50


def test_a_restart_that_reloads_a_wrong_asn_is_a_blunt_repair(spec, exdir, monkeypatch):
    """Issue 48 review (B): at level 2 `railab restart NODE` reloads NODE's frr.conf, which undoes
    a wrong-asn: credited as a blunt repair (25 points, not 50), on the faulty node only; a
    restart of a dead-bgpd node is that fault's own repair (50)."""
    _green_fix(spec, monkeypatch)
    (f,) = _start_kind(spec, 2, "wrong-asn")["faults"]
    node, peer = f["element"].partition(":")[0], f["accept"][1].partition(":")[0]
    store.note_repair(spec.name, "restart", peer)  # the far end: the wrong line is not there
    assert X.fix(spec.name, wait=0)["credited"] is False
    store.note_repair(spec.name, "restart", node)
    res = X.fix(spec.name, wait=0)
    assert res["credited"] is True and res["blunt"] is True
    sheet = X.score_sheet(spec.name)
    assert sheet["repair"]["blunt"] is True and sheet["points"] == 25 and sheet["max_points"] == 150
    assert "repair verified (blunt), 25/150 points" in X.report_line(spec.name)

    _start_kind(spec, 2, "daemon-kill")
    (f,) = store.load(spec.name)["faults"]
    store.note_repair(spec.name, "restart", f["element"])
    res = X.fix(spec.name, wait=0)
    assert res["credited"] is True and res["blunt"] is False and X.score_sheet(spec.name)["points"] == 50


def test_what_counts_as_a_repair_of_each_kind(spec):
    """:func:`repair_of` per kind: the fault's own element and a command that changes it."""
    def grade(level, kind, tool, node, argv):
        (f,) = X.plan_faults(spec, level, 3, kind)
        return X.repair_of(f, {"tool": tool, "node": node, "argv": argv})

    # wrong-asn at g1-leaf4:eth3, session-shut at g1-leaf4:eth4 (seed 3)
    fix_asn = ["vtysh", "-c", "conf t", "-c", "router bgp 4200000004", "-c", "no neighbor eth3 interface",
               "-c", "neighbor eth3 interface peer-group FABRIC"]
    assert grade(2, "wrong-asn", "exec", "g1-leaf4", fix_asn) == "full"
    assert grade(2, "wrong-asn", "exec", "g1-leaf4", ["vtysh", "-c", "show bgp neighbors eth3"]) is None
    assert grade(2, "wrong-asn", "exec", "g1-leaf4", ["vtysh", "-b"]) == "blunt"
    assert grade(2, "wrong-asn", "restart", "g1-leaf4", []) == "blunt"
    assert grade(2, "wrong-asn", "exec", "spine2", fix_asn) is None
    assert grade(2, "session-shut", "exec", "g1-leaf4",
                 ["vtysh", "-c", "conf t", "-c", "router bgp 1", "-c", "no neighbor eth4 shutdown"]) == "full"
    assert grade(2, "session-shut", "exec", "g1-leaf4",
                 ["vtysh", "-c", "conf t", "-c", "router bgp 1", "-c", "no neighbor eth3 shutdown"]) is None
    # a restart brings bgpd back from frr.conf only after it was killed: then it undoes the shut
    assert grade(2, "session-shut", "restart", "g1-leaf4", []) == "blunt"
    assert grade(2, "session-shut", "restart", "spine2", []) is None
    assert grade(2, "cross-cable", "restart", "srv3", []) is None
    assert grade(2, "session-shut", "exec", "g1-leaf4", ["vtysh"]) == "full"  # typed inside: not journaled
    # daemon-kill at g1-leaf3; cross-cable srv3:eth2 / srv3:eth3; grey-loss g2-leaf2:eth2; mtu g1-leaf4:eth2
    assert grade(2, "daemon-kill", "restart", "g1-leaf3", []) == "full"
    assert grade(2, "daemon-kill", "exec", "g1-leaf3", ["/usr/lib/frr/bgpd", "-d"]) == "full"
    assert grade(2, "daemon-kill", "exec", "g1-leaf3", ["pgrep", "bgpd"]) is None
    assert grade(2, "cross-cable", "swap-cables", "srv3", ["srv3:eth3", "srv3:eth2"]) == "full"
    assert grade(2, "cross-cable", "swap-cables", "srv3", ["srv3:eth2", "srv3:eth1"]) is None
    assert grade(2, "cross-cable", "exec", "srv3", ["(shell)"]) is None  # a cable is not in a shell
    assert grade(3, "grey-loss", "exec", "g2-leaf2", ["nft", "delete", "table", "netdev", "filter"]) == "full"
    assert grade(3, "grey-loss", "exec", "g2-leaf2", ["nft", "list", "ruleset"]) is None
    assert grade(3, "mtu", "exec", "g1-leaf4", ["ip", "link", "set", "eth2", "mtu", "9000"]) == "full"
    assert grade(3, "mtu", "exec", "g1-leaf4", ["ip", "link", "show", "eth2"]) is None
    assert grade(1, "link-down", "exec", "g2-leaf2", ["ip", "link", "set", "dev", "eth3", "up"]) == "full"
    assert grade(1, "link-down", "exec", "g2-leaf2", ["(shell)"]) == "full"
    assert grade(1, "link-down", "exec", "g2-leaf2", ["ip", "link", "set", "eth30", "up"]) is None


def test_check_names_failures_at_the_levels_detail_never_the_repair(spec, exdir):
    from railab.checks.base import Cause, CheckResult

    lab = spec.name
    rows = [
        CheckResult(check="bgp", name="g2-leaf3:eth3 <-> spine1:eth7", status="fail", node="spine1",
                    observed="spine1:eth7 Idle", expected="Established", port="eth7",
                    reason="spine1's neighbor eth7 expects AS 1: on spine1 under `router bgp`: "
                           "`no neighbor eth7 interface`, then `neighbor eth7 interface peer-group FABRIC`",
                    cause=Cause(kind="wrong-asn", node="spine1", port="eth7", link="g2-leaf3:eth3--spine1:eth7")),
        CheckResult(check="daemons", name="g1-leaf2 daemons", status="fail", node="g1-leaf2",
                    reason="bgpd not running on g1-leaf2: bring it back (railab restart x g1-leaf2)",
                    cause=Cause(kind="daemon-dead", node="g1-leaf2", daemon="bgpd")),
        CheckResult(check="cabling", name="srv1 NIC 4", status="fail", node="srv1",
                    reason="link down: admin down at srv1:eth4: bring srv1:eth4 up (ip link set ... up)",
                    cause=Cause(kind="link-down", node="srv1", port="eth4", link="srv1:eth4--g1-leaf4:eth1")),
        CheckResult(check="routes", name="10.0.1.0/24 at g1-leaf1", status="pass", node="g1-leaf1"),
    ]
    assert X.disclose(lab, rows) == rows  # no exercise: the check's own words
    words = re.compile(r"no neighbor|ip link set|railab restart|peer-group|router bgp")
    for level, detail in ((1, "element"), (2, "node"), (3, "symptom")):
        _running(spec, level)
        assert X.check_detail(lab) == detail
        out = X.disclose(lab, rows)
        assert [r.status for r in out] == [r.status for r in rows]  # the counts stay true
        text = " ".join(str(r.model_dump()) for r in out)
        assert not words.search(text), (detail, words.search(text))
        fails = [r for r in out if r.status == "fail"]
        if detail == "element":
            assert [r.reason for r in fails] == ["AS number differs from the plan at spine1:eth7",
                                                 "FRR daemon not answering at g1-leaf2", "link down at srv1:eth4"]
        elif detail == "node":
            assert [r.name for r in fails] == ["bgp at spine1", "daemons at g1-leaf2", "cabling at srv1"]
            assert "eth" not in text
        else:
            assert [r.name for r in fails] == ["bgp", "daemons", "cabling"] and all(r.node is None for r in out)
            assert not re.search(r"spine1|g1-leaf|srv1|eth\d", text)
    rec = {**_rec(spec, level=2), "check_detail": "full"}  # the trainer widened it
    store.save(lab, rec, X.public_view(rec))
    assert X.check_detail(lab) is None and X.disclose(lab, rows) == rows
    with pytest.raises(UsageError, match="--check-detail"):
        X.start(lab, 2, check_detail="everything")


def test_free_text_ports_in_other_spellings_or_a_hint(spec):
    assert X._parse_text(spec, "g1-leaf1 port 3 is down") == (["g1-leaf1:eth3"], "link-down")
    assert X._parse_text(spec, "g1-leaf1 interface 2 drops packets") == (["g1-leaf1:eth2"], "grey-loss")
    assert X._parse_text(spec, "g1-leaf1/eth3 is down")[0] == ["g1-leaf1:eth3"]
    for text in ("g1-leaf1 3 is down", "g1-leaf1 e3 is down", "eth3 is down, on g1-leaf1"):
        with pytest.raises(UsageError, match="name the port as g1-leaf1:eth3.*port 3.*eth3 on g1-leaf1"):
            X._parse_text(spec, text)
    # the port before its node (issue 48 review: "swp4 on srv1 is down" was graded WRONG)
    assert X._parse_text(spec, "swp4 on srv1 is down") == (["srv1:eth4"], "link-down")
    assert X._parse_text(spec, "eth3 of g1-leaf2 drops packets") == (["g1-leaf2:eth3"], "grey-loss")
    assert X._parse_text(spec, "port 3 at the leaf g1-leaf1 is down")[0] == ["g1-leaf1:eth3"]
    assert X._parse_text(spec, "srv1 eth4 and g1-leaf4 eth1 are down")[0] == ["srv1:eth4", "g1-leaf4:eth1"]
    rec = _rec(spec, level=1, kind=None)  # seed 3: nic-down at srv1:eth4
    els, kind = X._parse_text(spec, "swp4 on srv1 is down")
    assert X.grade(rec, els[0], X.normalise_kind(kind))[0] == 0  # RIGHT


def test_the_report_checks_at_the_exercise_detail(spec, exdir, monkeypatch):
    """railab report runs every check: while an exercise runs, its rows too name no repair."""
    from rich.console import Console

    from railab import demo
    from railab.checks.base import Cause, CheckResult

    row = CheckResult(check="daemons", name="g1-leaf2 daemons", status="fail", node="g1-leaf2",
                      reason="bgpd not running on g1-leaf2: bring it back (railab restart xu1 g1-leaf2)",
                      cause=Cause(kind="daemon-dead", node="g1-leaf2", daemon="bgpd"))
    monkeypatch.setattr(demo, "run_checks", lambda *a, **k: [row])
    con = Console(file=open(os.devnull, "w"))
    assert "railab restart" in demo.run_all_checks(spec, None, con)[0].reason
    _running(spec, 2)
    (item,) = demo.run_all_checks(spec, None, con)
    assert "railab restart" not in str(item) and item.name == "daemons at g1-leaf2"


def test_status_names_what_fails_at_the_levels_detail(spec, lspec, exdir):
    """Issue 48 review (E): railab status follows check's rule: the down session's port at
    level 1, its node only at level 2 (the port was the answer), nothing that names a node at
    level 3; no exercise: unchanged."""
    status = {"lab": spec.name, "nodes": {"g2-leaf3": {"daemons": {"bgpd": True}},
                                          "spine1": {"daemons": {"bgpd": False, "zebra": True}}},
              "sessions": {"up": 15, "expected": 16, "down": ["g2-leaf3:eth3"]}}
    assert X.disclose_status(spec.name, status) is status
    _running(spec, 1)
    assert X.disclose_status(spec.name, status) is status
    _running(spec, 2)
    two = X.disclose_status(spec.name, status)
    assert two["sessions"] == {"up": 15, "expected": 16, "down": ["g2-leaf3"], "down_count": 1}
    assert two["nodes"] == status["nodes"] and "eth" not in json.dumps(two)
    _running(spec, 4, plan_on=lspec)  # the PFC level names nodes, as level 2 does
    assert X.disclose_status(spec.name, status) == two
    _running(spec, 3)
    three = X.disclose_status(spec.name, status)
    assert three["sessions"]["down"] == [] and three["sessions"]["down_count"] == 1
    assert three["dead_daemons"] == 1 and all(n["daemons"] == {} for n in three["nodes"].values())
    assert status["sessions"]["down"] == ["g2-leaf3:eth3"]  # the caller's document is not changed


def test_status_shows_the_control_plane_per_role_only_while_an_exercise_hides_nodes(spec, exdir):
    """Issue 47 item 5: a router with fewer routes than its peers points at the fault, so at the
    node and symptom details status keeps the control plane's per-role summary only."""
    roles = {"leaf": {"routers": 8, "bgp_routes": {"min": 15, "median": 16, "max": 16}}}
    status = {"lab": spec.name, "nodes": {}, "sessions": {"up": 16, "expected": 16, "down": []},
              "control_plane": {"measured_at": "t", "roles": roles,
                                "routers": {"g2-leaf3": {"role": "leaf", "routes": {"bgp": 15}}}}}
    _running(spec, 1)
    assert X.disclose_status(spec.name, status) is status
    for level in (2, 3):
        _running(spec, level)
        cp = X.disclose_status(spec.name, status)["control_plane"]
        assert cp == {"measured_at": "t", "roles": roles, "routers_hidden": True}
        assert "g2-leaf3" not in json.dumps(cp)
    assert "routers" in status["control_plane"]  # the caller's document is not changed


# ---- level 4: PFC storms and priority mismatches (a lossless lab) --------------------------------
def test_what_counts_as_a_repair_of_the_pfc_kinds(lspec):
    """pfc-storm: the storming link taken down (and up: the lab must be green) at either end, a
    look or another port is not; pfc-priority: ``dcb pfc set`` naming the port on its node."""
    def grade(kind, tool, node, argv, seed=3):
        (f,) = X.plan_faults(lspec, 4, seed, kind)
        return X.repair_of(f, {"tool": tool, "node": node, "argv": argv})

    # seed 3: pfc-storm from spine3:eth8 (pausing g2-leaf2:eth14); pfc-priority at g1-leaf2:eth7 (srv7:eth2)
    assert X.plan_faults(lspec, 4, 3, "pfc-storm")[0]["accept"] == ["spine3:eth8", "g2-leaf2:eth14"]
    assert grade("pfc-storm", "exec", "spine3", ["ip", "link", "set", "eth8", "down"]) == "full"
    bounce = ["sh", "-c", "ip link set eth14 down; ip link set eth14 up"]
    assert grade("pfc-storm", "exec", "g2-leaf2", bounce) == "full"
    assert grade("pfc-storm", "exec", "g2-leaf2", ["ifdown", "eth14"]) == "full"
    assert grade("pfc-storm", "exec", "spine3", ["(shell)"]) == "full"  # typed inside: not journaled
    not_repairs = [("spine3", ["ip", "link", "show", "eth8", "down"]),      # a look
                   ("g2-leaf2", ["tc", "-s", "qdisc", "show", "dev", "eth14"]),  # a look at the paused queue
                   ("g2-leaf2", ["ip", "link", "set", "eth14", "up"]),      # up only: no reset
                   ("spine3", ["ip", "link", "set", "eth7", "down"]),       # another port
                   ("spine3", ["ip", "link", "set", "eth14", "down"]),      # the far end's port name, here
                   ("g1-leaf1", ["(shell)"])]                                # a shell elsewhere
    for node, argv in not_repairs:
        assert grade("pfc-storm", "exec", node, argv) is None, (node, argv)
    assert grade("pfc-storm", "restart", "spine3", []) is None
    fix_prio = ["dcb", "pfc", "set", "dev", "eth7", "prio-pfc", "all:off", "3:on"]
    assert grade("pfc-priority", "exec", "g1-leaf2", fix_prio) == "full"
    in_sh = ["sh", "-c", "dcb pfc set dev eth7 prio-pfc 3:on 0:off"]
    assert grade("pfc-priority", "exec", "g1-leaf2", in_sh) == "full"
    assert grade("pfc-priority", "exec", "g1-leaf2", ["(shell)"]) == "full"
    assert grade("pfc-priority", "exec", "g1-leaf2", ["dcb", "pfc", "show", "dev", "eth7"]) is None  # a look
    assert grade("pfc-priority", "exec", "g1-leaf2", ["dcb", "pfc", "set", "dev", "eth6", "prio-pfc", "3:on"]) is None
    assert grade("pfc-priority", "exec", "srv7", ["dcb", "pfc", "set", "dev", "eth2", "prio-pfc", "3:on"]) is None
    # a reset does not change a configuration
    assert grade("pfc-priority", "exec", "g1-leaf2", ["ip", "link", "set", "eth7", "down"]) is None


def test_fix_credits_a_pfc_repair_only_when_the_record_journals_it(lspec, exdir, monkeypatch):
    """A green lab after a storm is credited only with the trainee's reset of its link in the
    journal (a reset straight in the namespace ends the storm too: not credited)."""
    _green_fix(lspec, monkeypatch)
    (f,) = _start_kind(lspec, 4, "pfc-storm")["faults"]
    node, _, port = f["element"].partition(":")
    store.note_repair(lspec.name, "exec", node, ["tc", "-s", "qdisc", "show"])
    assert X.fix(lspec.name, wait=0)["credited"] is False
    store.note_repair(lspec.name, "exec", node, ["ip", "link", "set", port, "down"])
    store.note_repair(lspec.name, "exec", node, ["ip", "link", "set", port, "up"])
    res = X.fix(lspec.name, wait=0)
    assert res["credited"] is True and res["blunt"] is False
    assert X.score_sheet(lspec.name)["points"] == 50 and X.score_sheet(lspec.name)["max_points"] == 150


def test_check_names_pfc_failures_at_level_4s_detail_never_the_repair(spec, lspec, exdir):
    """The pfc check's rows (its own words: the storm's "shut its port", the priority's "enable
    PFC on priority 3 there") at level 4's default detail (node) and at the trainer's element
    and symptom: no port at node, no repair at any detail below full."""
    from railab.checks.base import Cause, CheckResult

    rows = [
        CheckResult(check="pfc", name="g1-leaf1:eth2 lossless queue", status="fail", node="g1-leaf1", port="eth2",
                    link="g1-leaf1:eth2--srv2:eth1",
                    expected="a lossless queue is paused only while its peer is congested",
                    observed="held in PAUSE (lossless tbf at 8000 bit/s) with no congestion behind it",
                    reason="PFC storm: srv2:eth1 keeps sending PAUSE on the lossless priority, so g1-leaf1:eth2 cannot "
                           "send it and traffic behind it backs up (congestion spreading): find why srv2:eth1 pauses "
                           "(a stuck NIC), shut its port, or let the PFC watchdog drop the queue",
                    cause=Cause(kind="pfc-storm", node="g1-leaf1", port="eth2", link="g1-leaf1:eth2--srv2:eth1")),
        CheckResult(check="pfc", name="srv1:eth1 PFC priority", status="fail", node="srv1", port="eth1",
                    link="g1-leaf1:eth1--srv1:eth1", expected="PFC on priority 3 (qos.roce_tc, the lossless class)",
                    observed="PFC on priority 4",
                    reason="QoS misconfiguration: srv1:eth1 neither sends nor honours PAUSE for RoCE's priority 3, "
                           "so the lossless queue it feeds can overflow and drop: enable PFC on priority 3 there",
                    cause=Cause(kind="pfc-priority", node="srv1", port="eth1", link="g1-leaf1:eth1--srv1:eth1")),
    ]
    lab = spec.name
    words = re.compile(r"shut its port|enable PFC|prio-pfc|dcb pfc set|ip link set|watchdog drop", re.I)
    rec = _running(spec, 4, plan_on=lspec)
    assert X.check_detail(lab) == "node"
    for detail in ("node", "element", "symptom"):
        rec["check_detail"] = detail
        store.save(lab, rec, X.public_view(rec))
        out = X.disclose(lab, rows)
        assert [r.status for r in out] == ["fail", "fail"]
        text = " ".join(str(r.model_dump()) for r in out)
        assert not words.search(text), (detail, words.search(text))
        if detail == "node":
            assert [r.name for r in out] == ["pfc at g1-leaf1", "pfc at srv1"] and "eth" not in text
            assert out[0].reason == f"{X.SYMPTOMS['pfc']} (g1-leaf1)"
        elif detail == "element":
            assert [r.reason for r in out] == ["lossless queue held in PAUSE by its link peer at g1-leaf1:eth2",
                                               "PFC on another priority than the lossless one at srv1:eth1"]
        else:
            assert [r.name for r in out] == ["pfc", "pfc"] and not re.search(r"g1-leaf1|srv1|eth\d", text)
    rec["check_detail"] = "full"
    store.save(lab, rec, X.public_view(rec))
    assert X.disclose(lab, rows) == rows  # the trainer widened it: the check's own words


def test_free_text_names_the_pfc_kinds(lspec):
    assert X._parse_text(lspec, "srv2 nic 1 keeps sending pause frames") == (["srv2:eth1"], "pfc-storm")
    assert X._parse_text(lspec, "PFC storm from spine1 eth3") == (["spine1:eth3"], "pfc-storm")
    assert X._parse_text(lspec, "g1-leaf1 eth3 has pfc on the wrong priority") == (["g1-leaf1:eth3"], "pfc-priority")
    assert X._parse_text(lspec, "srv3 gpu0 ignores pause: pfc on 4, not 3") == (["srv3:eth1"], "pfc-priority")
    assert X._parse_text(lspec, "g1-leaf1 eth3 drops packets")[1] == "grey-loss"  # not a PFC word: as before
