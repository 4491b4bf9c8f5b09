"""Live training exercises (``railab exercise``) on one ``mini`` lab (real namespaces + FRR): for
every fault kind of the catalogue, with a fixed seed, the exercise starts hidden (status,
inspect, fault list and the lab directory name no fault), a wrong answer is graded wrong (exit
1), the right one right (exit 0), the trainee repairs the lab through the trainee's tools
(``railab exec`` ip/vtysh/nft, ``railab restart``, ``railab exercise swap-cables``),
``exercise fix`` passes, and ``reveal --json`` prints the faults with the answer's spelling.
The last test shows ``railab down`` removes the exercise record with the lab."""

from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from railab.checks import exercise as X
from railab.checks.lab import LiveLab
from railab.errors import RailabError
from railab.testbed import state as st
from tests.conftest import PID, integration_skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

NAME = f"trn{PID}"
SEED = 11


class _Res:
    def __init__(self, exit_code: int, stdout: str, output: str) -> None:
        self.exit_code, self.stdout, self.output = exit_code, stdout, output


def _cli(*args) -> _Res:
    """``railab ARGS`` in-process; a RailabError ends as ``main()`` ends it (its exit code and
    an ``error:`` line)."""
    from railab.cli import app

    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})
    if isinstance(r.exception, RailabError):
        return _Res(r.exception.exit_code, r.stdout, f"{r.output}error: {r.exception}")
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return _Res(r.exit_code, r.stdout, r.output)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    old = os.environ.get("RAILAB_EXERCISE_DIR")
    os.environ["RAILAB_EXERCISE_DIR"] = str(tmp_path_factory.mktemp("exercises"))
    live = LiveLab.bring_up("mini", name=NAME)
    try:
        yield live
    finally:
        live.close()
        assert not st.exercise_dir(NAME).exists()
        if old is None:
            os.environ.pop("RAILAB_EXERCISE_DIR", None)
        else:
            os.environ["RAILAB_EXERCISE_DIR"] = old


@pytest.fixture
def ex(lab):
    """Each case ends with the exercise revealed and nothing of it left in the lab (a failed
    case heals what it left, so the next one starts green)."""
    yield lab
    from railab.testbed import exercise as store
    from railab.testbed import faults as F

    if st.load(lab.name) is None:  # the case took the lab down
        return
    rec = store.load(lab.name)
    if rec is not None and not rec.get("revealed_at"):
        X.reveal(lab.name, heal=True)
    if st.load(lab.name).faults:
        F.heal(lab.name)
    if rec is not None and any(f["kind"] == "grey-loss" for f in rec["faults"]):
        assert _nft_tables(lab, {f["element"].partition(":")[0] for f in rec["faults"]}) == []
    if rec is not None and rec["fix"]["verified_at"] is None:  # a failed case: back to green
        import time

        end = time.monotonic() + 60
        while (rows := [r for r in lab.check() if r.status == "fail"]) and time.monotonic() < end:
            time.sleep(1)
        assert not rows, [r.name for r in rows]


def _nft_tables(lab, nodes: set[str]) -> list[str]:
    out = []
    for n in sorted(nodes):
        r = lab.exec(n, ["nft", "list", "tables"])
        out += [f"{n}: {t}" for t in r.stdout.splitlines() if t.strip()]
    return out


def _exec(*argv, lab: str = NAME) -> None:
    r = _cli("exec", lab, *argv)
    assert r.exit_code == 0, (argv, r.output)


_exec_on = _exec


def _asn(lab, node: str) -> int:
    return lab.spec.node(node).asn


def _repair(lab, f: dict) -> None:
    """The trainee's repair of fault ``f`` (what a field engineer types once diagnosed)."""
    kind, element = f["kind"], f["element"]
    node, _, port = element.partition(":")
    name = lab.name

    def _exec(*argv) -> None:
        _exec_on(*argv, lab=name)

    if kind == "link-down":
        _exec(node, "--", "ip", "link", "set", port, "up")
    elif kind == "nic-down":
        nic = next(n for n in lab.spec.nics_of(node) if n.interface == port)
        _exec(node, "--", "ip", "link", "set", port, "up")
        _exec(node, "--", "ip", "route", "replace", "default", "via", str(nic.gateway), "dev", port,
              "table", str(nic.table))
    elif kind == "cross-cable":
        a, b = f["accept"]
        bad = _cli("exercise", "swap-cables", name, a, "g1-leaf1:eth1")  # a switch port: refused
        assert bad.exit_code == 2 and "is not a server NIC" in bad.output
        r = _cli("exercise", "swap-cables", name, a, b)
        assert r.exit_code == 0, r.output
    elif kind == "session-shut":
        _exec(node, "--", "vtysh", "-c", "conf t", "-c", f"router bgp {_asn(lab, node)}",
              "-c", f"no neighbor {port} shutdown")
    elif kind == "wrong-asn":
        _exec(node, "--", "vtysh", "-c", "conf t", "-c", f"router bgp {_asn(lab, node)}",
              "-c", f"no neighbor {port} interface", "-c", f"neighbor {port} interface peer-group FABRIC")
    elif kind == "daemon-kill":
        r = _cli("restart", name, node)
        assert r.exit_code == 0, r.output
    elif kind == "grey-loss":
        tables = lab.exec(node, ["nft", "list", "tables"]).stdout
        (table,) = re.findall(r"table netdev (\S+)", tables)
        _exec(node, "--", "nft", "delete", "table", "netdev", table)
    elif kind == "mtu":
        _exec(node, "--", "ip", "link", "set", port, "mtu", str(lab.spec.mtu))
    elif kind == "pfc-storm":  # the stuck NIC or port reset: its link down and up, at the storming end
        _exec(node, "--", "sh", "-c", f"ip link set {port} down && ip link set {port} up")
        nic = next((n for n in lab.spec.nics_of(node) if n.interface == port), None) if node.startswith("srv") else None
        if nic is not None:  # a server NIC taken down lost its policy route (as nic-down)
            _exec(node, "--", "ip", "route", "replace", "default", "via", str(nic.gateway), "dev", port,
                  "table", str(nic.table))
    elif kind == "pfc-priority":  # PFC back on RoCE's priority only (railab's dcb, railab.testbed.dcb)
        _exec(node, "--", "dcb", "pfc", "set", "dev", port, "prio-pfc", "all:off", f"{lab.spec.qos.roce_tc}:on")
    else:
        raise AssertionError(kind)


def _wrong_element(lab, faults: list[dict]) -> str:
    """An element of the lab that names none of ``faults`` (same shape: a port, or a switch)."""
    taken = {e.partition(":")[0] for f in faults for e in f["accept"]}
    if faults[0]["kind"] == "daemon-kill":
        return next(n.name for n in lab.spec.nodes if n.role in ("leaf", "spine") and n.name not in taken)
    return next(f"{lk.a.node}:{lk.a.interface}" for lk in lab.spec.links
                if lk.a.node not in taken and lk.b.node not in taken)


def _hidden(lab, planned: list[dict], start_output: str, *, commands: bool) -> None:
    """While it runs: the lab directory and the start output name no injected fault; the record
    is outside the lab directory and not in clear text; with ``commands`` also status, inspect,
    the fault list and the report's exercise line name none."""
    if commands:
        s = json.loads(_cli("status", lab.name, "--json").stdout)
        assert s["faults"] == []
        insp = json.loads(_cli("inspect", lab.name, "--json").stdout)
        assert insp["faults"] == []
        assert "no faults" in _cli("fault", lab.name, "list").stdout
        # a trainee's own fault is refused while the exercise runs, on its hidden element too
        # (it was injected there, got the hidden fault's id, and heal --all then undid it)
        for f in planned:
            node = f["element"].split(":")[0]
            own = _cli("fault", lab.name, "node-off", node)
            assert own.exit_code == 2 and "an exercise runs on lab" in own.output, (own.exit_code, own.output)
            assert f["element"] not in own.output  # the refusal reveals nothing
        line = X.report_line(lab.name)
        assert "running" in line and not any(f["element"] in line or f["kind"] in line for f in planned)
    from railab.testbed import exercise as store

    rec = store.load(lab.name)
    for path in lab.dir.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            for f in rec["faults"]:
                assert f["record"]["note"] not in text, path
    assert not str(st.exercise_dir(lab.name)).startswith(str(lab.dir))
    sealed = (st.exercise_dir(lab.name) / "sealed").read_bytes()
    public = (st.exercise_dir(lab.name) / "public.json").read_text()
    for f in planned:
        assert f["element"] not in start_output
        assert f["element"].encode() not in sealed and f["element"] not in public
        assert f["kind"] not in public


CASES = [(1, "link-down"), (1, "nic-down"), (2, "cross-cable"), (2, "session-shut"), (2, "wrong-asn"),
         (2, "daemon-kill"), (3, "grey-loss"), (3, "mtu"), (3, "two-faults")]


@pytest.mark.parametrize("level,kind", CASES, ids=[k for _, k in CASES])
def test_exercise_kind_graded_repaired_and_revealed(ex, level, kind):
    # the first case checks the lab is green first; the others follow a verified repair
    check_kind_case(ex, level, kind, precheck=kind == "link-down")


def check_kind_case(lab, level: int, kind: str, *, precheck: bool) -> None:
    """One catalogue kind on running lab ``lab`` (also the lossless level's, on a mini-lossless
    lab: tests/test_exercise_lossless_live.py): started hidden with seed :data:`SEED`, graded
    wrong and right, repaired through the trainee's tools, ``fix`` green, revealed with the
    answer's spelling and the points."""
    name = lab.name
    planned = X.plan_faults(lab.spec, level, SEED, kind)  # the trainer's view: same seed, same faults
    disable = ["--disable", "check"] if kind == "mtu" else []
    pre = [] if precheck else ["--no-precheck"]
    seq0 = st.load(name).fault_seq
    r = _cli("exercise", "start", name, "--level", level, "--seed", SEED, "--kind", kind, *disable, *pre)
    assert r.exit_code == 0, r.output
    assert st.load(name).fault_seq == seq0  # inspect's fault counter does not count hidden faults
    for f in planned:
        if f["kind"] == "grey-loss":  # the table's name does not say railab
            node = f["element"].partition(":")[0]
            assert "railab" not in lab.exec(node, ["nft", "list", "tables"]).stdout
    assert all(f["symptom"] in r.stdout for f in planned)
    _hidden(lab, planned, r.stdout, commands=kind in ("daemon-kill", "two-faults", "pfc-storm"))
    if kind == "mtu":  # the trainer switched check off: refused by name and by lab directory
        for ref in (name, lab.dir):
            g = _cli("check", ref)
            assert g.exit_code == 2 and "switched off for the exercise" in g.output
        assert _cli("status", name).exit_code == 0  # not switched off
        oracle = _cli("exercise", "fix", name, "--wait", "0")  # fix does not stand in for check
        assert oracle.exit_code == 1 and "switched off" in oracle.stdout
        assert not any(e.partition(":")[0] in oracle.stdout for f in planned for e in f["accept"])

    wrong = _cli("exercise", "answer", name, "--element", _wrong_element(lab, planned), "--kind", planned[0]["kind"])
    assert wrong.exit_code == 1 and "WRONG" in wrong.stdout
    other_kind = "mtu" if planned[0]["kind"] != "mtu" else "grey-loss"
    wrong = _cli("exercise", "answer", name, "--element", planned[0]["element"], "--kind", other_kind)
    assert wrong.exit_code == 1 and "another kind" in wrong.stdout
    h = _cli("exercise", "hint", name)
    assert h.exit_code == 0 and "hint 1/3" in h.stdout
    for f in planned:
        right = _cli("exercise", "answer", name, "--element", f["element"], "--kind", f["kind"])
        assert right.exit_code == 0 and "RIGHT" in right.stdout, right.output

    if kind in ("link-down", "two-faults", "pfc-storm", "pfc-priority"):  # before the repair: not green (exit 1)
        not_yet = _cli("exercise", "fix", name, "--wait", "0")
        assert not_yet.exit_code == 1 and "NOT REPAIRED" in not_yet.stdout
    for f in planned:
        _repair(lab, f)
    fixed = _cli("exercise", "fix", name, "--wait", "60")
    assert fixed.exit_code == 0 and "REPAIRED" in fixed.stdout, fixed.output

    rev = _cli("exercise", "reveal", name, "--json")
    assert rev.exit_code == 0, rev.output
    sheet = json.loads(rev.stdout)
    assert [{"element": f["element"], "kind": f["kind"]} for f in sheet["faults"]] == \
        [{"element": f["element"], "kind": f["kind"]} for f in planned]
    assert sheet["faults_found"] == len(planned) and sheet["hints_used"] == 1
    assert sheet["wrong_answers"] == 2 and sheet["repair"]["verified"] is True
    assert sheet["seed"] == SEED and sheet["points"] == 100 * len(planned) - 15 - 10 + 50
    assert st.load(name).faults == []  # verified repair: nothing handed back to `fault heal`
    if kind == "mtu":
        assert _cli("check", name, "--only", "cabling").exit_code == 0  # the gate lifted


def _link(lab, node: str, port: str) -> str:
    return lab.exec(node, ["ip", "-br", "link", "show", port]).stdout.split()[1]


def test_nothing_changes_a_running_exercise_but_the_trainees_repair(ex):
    """Issue 48: on mini with a level-1 exercise (seed 3: srv1's NIC 4 down), railab drill, fault
    (inject, heal, link-up), restart and swap-cables are refused with one message (exit 2) and
    change nothing; exercise fix then exits 1; a repair outside railab's tools is not credited,
    nor after a journaled look (`ip -br link`), one of the NIC through railab exec is; exercise
    stop heals and removes the record."""
    lab = ex
    from railab.testbed import exercise as store
    from railab.testbed import faults as F

    (planned,) = X.plan_faults(lab.spec, 1, 3)
    assert (planned["kind"], planned["element"]) == ("nic-down", "srv1:eth4")
    r = _cli("exercise", "start", NAME, "--level", 1, "--seed", 3, "--no-precheck")
    assert r.exit_code == 0, r.output
    assert _link(lab, "srv1", "eth4") == "DOWN"
    message = f"error: {store.refusal(NAME, store.running(NAME))}"
    refused = {
        "drill": ("drill", NAME, "link-down", "srv1", "g1-leaf4"),
        "fault inject": ("fault", NAME, "link-down", "g1-leaf1", "spine1"),
        "fault heal": ("fault", NAME, "heal", "--all"),
        "fault link-up": ("fault", NAME, "link-up", "srv1", "g1-leaf4"),
        "restart": ("restart", NAME, "srv1"),  # a level-2 tool: it would bring srv1:eth4 up
        "swap-cables": ("exercise", "swap-cables", NAME, "srv1:eth4", "srv1:eth1"),
    }
    for what, argv in refused.items():
        res = _cli(*argv)
        assert res.exit_code == 2, (what, res.exit_code, res.output)
        assert res.output.strip().splitlines()[-1] == message, (what, res.output)  # the same message
        assert "eth4" not in message and "nic" not in message
    with pytest.raises(RailabError, match="an exercise runs on lab"):  # the API has the same lock
        F.heal(NAME)
    assert _link(lab, "srv1", "eth4") == "DOWN" and _link(lab, "srv1", "eth1") == "UP"  # nothing changed
    assert st.load(NAME).faults == []
    assert "no faults" in _cli("fault", NAME, "list").stdout  # reading stays open
    unknown = _cli("exec", NAME, "srv9", "--", "true")  # a typo: the lab's nodes, as railab fault lists them
    assert unknown.exit_code == 2 and "has no node 'srv9' (nodes: spine1, spine2, g1-leaf1" in unknown.output
    assert "srv4" in unknown.output
    not_yet = _cli("exercise", "fix", NAME, "--wait", "0")
    assert not_yet.exit_code == 1 and "NOT REPAIRED" in not_yet.stdout

    # a repair railab's record does not show (here: straight into the namespace) is not credited
    nic = next(n for n in lab.spec.nics_of("srv1") if n.interface == "eth4")
    lab.exec("srv1", ["ip", "link", "set", "eth4", "up"])
    lab.exec("srv1", ["ip", "route", "replace", "default", "via", str(nic.gateway), "dev", "eth4",
                      "table", str(nic.table)])
    green = _cli("exercise", "fix", NAME, "--wait", "30")
    assert green.exit_code == 1 and "NOT CREDITED" in green.stdout, green.output
    # a journaled look at the right node is no repair either (the review: any railab exec
    # made fix credit a repair done outside)
    _exec("srv1", "--", "ip", "-br", "link", "show", "eth4")
    looked = _cli("exercise", "fix", NAME, "--wait", "0")
    assert looked.exit_code == 1 and "NOT CREDITED" in looked.stdout, looked.output
    assert X.score_sheet(NAME)["repair"]["verified"] is False
    _exec("srv1", "--", "ip", "link", "set", "eth4", "up")  # the trainee's own hands on the element: journaled
    fixed = _cli("exercise", "fix", NAME, "--wait", "30")
    assert fixed.exit_code == 0 and "REPAIRED" in fixed.stdout, fixed.output

    stop = _cli("exercise", "stop", NAME)
    assert stop.exit_code == 0 and "stopped" in stop.stdout and "srv1" not in stop.stdout, stop.output
    assert store.load(NAME) is None and not st.exercise_dir(NAME).exists()
    assert _cli("exercise", "status", NAME).exit_code == 2


def test_check_names_no_repair_command_during_a_level_2_exercise(ex):
    """Issue 48: during a level-2 exercise railab check names the family and the node, never the
    repair command (`no neighbor`, `ip link set`, `railab restart`), in the table, --verbose and
    --json; the same lab after reveal --keep-faults prints the check's own words, repair included;
    a stopped exercise heals what it hid."""
    lab = ex
    (planned,) = X.plan_faults(lab.spec, 2, 7)
    assert planned["kind"] == "wrong-asn"  # check's own words carry `no neighbor ... interface`
    r = _cli("exercise", "start", NAME, "--level", 2, "--seed", 7, "--no-precheck")
    assert r.exit_code == 0, r.output
    repair = re.compile(r"no neighbor|ip link set|railab restart|peer-group|vtysh|remote-as|frr\.conf")
    import time

    end = time.monotonic() + 30
    while "bgp at" not in (out := _cli("check", NAME, "--only", "bgp")).stdout and time.monotonic() < end:
        time.sleep(1)
    node = planned["element"].partition(":")[0]
    assert out.exit_code == 1 and "bgp at" in out.stdout, out.output
    for argv in (("check", NAME), ("check", NAME, "-v"), ("check", NAME, "--json"), ("check", NAME, "--only", "bgp")):
        res = _cli(*argv)
        assert res.exit_code == 1, (argv, res.output)
        assert not repair.search(res.stdout), (argv, repair.search(res.stdout))
        assert planned["element"] not in res.stdout and f"{node}:" not in res.stdout, argv  # no element
    assert json.loads(_cli("check", NAME, "--json").stdout)["exercise_detail"] == "node"
    status = _cli("status", NAME)  # the same rule: the down session's node, not its port
    assert status.exit_code == 1 and "down: a session of g2-leaf3" in status.stdout, status.output
    assert not re.search(r"\b(g2-leaf3|spine1):eth\d", status.stdout), status.stdout
    cp = json.loads(_cli("status", NAME, "--json").stdout)["control_plane"]  # per role only
    assert cp["routers_hidden"] and "routers" not in cp and cp["roles"]["leaf"]["routers"] == 8
    fix = _cli("exercise", "fix", NAME, "--wait", "0")
    assert fix.exit_code == 1 and not repair.search(fix.stdout) and planned["element"] not in fix.stdout
    rev = _cli("exercise", "reveal", NAME, "--keep-faults")
    assert rev.exit_code == 0, rev.output
    after = _cli("check", NAME, "--only", "bgp")
    assert after.exit_code == 1 and "no neighbor" in after.stdout  # what the exercise held back
    from railab.testbed import faults as F

    F.heal(NAME)


def test_the_lossless_level_refuses_a_lab_without_lab_capacity(ex):
    """Level 4 (PFC) on mini: one error naming the intent to use (exit 2), nothing injected
    and no exercise recorded (a revealed one before it stays as it was)."""
    from railab.testbed import exercise as store

    before = store.load(NAME)
    r = _cli("exercise", "start", NAME, "--level", 4, "--kind", "pfc-storm")
    assert r.exit_code == 2 and "no lab.capacity" in r.output and "mini-lossless intent" in r.output, r.output
    assert store.load(NAME) == before and st.load(NAME).faults == []


def test_a_restart_that_reloads_a_wrong_asn_is_credited_as_blunt(ex):
    """Issue 48 review (B): at level 2 `railab restart` is open (the repair of a dead bgpd); a
    trainee who kills the wrong-asn node's bgpd (railab exec) and restarts it gets bgpd back from
    frr.conf, which undoes the fault: `exercise fix` credits that as a blunt repair (exit 0, 25
    of the 50 repair points), not as the targeted one. (A restart of a node whose bgpd runs
    re-applies frr.conf over the running config, which leaves the wrong remote-as.)"""
    import time

    lab = ex
    (planned,) = X.plan_faults(lab.spec, 2, 7)
    assert (planned["kind"], planned["element"]) == ("wrong-asn", "spine1:eth7")
    assert _cli("exercise", "start", NAME, "--level", 2, "--seed", 7, "--no-precheck").exit_code == 0
    pid = int((st.node_dir(NAME, "spine1") / "bgpd.pid").read_text().split()[0])  # this lab's bgpd only
    _exec("spine1", "--", "kill", "-9", str(pid))
    end = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
        time.sleep(0.05)
    r = _cli("restart", NAME, "spine1")
    assert r.exit_code == 0, r.output
    fixed = _cli("exercise", "fix", NAME, "--wait", "30")
    assert fixed.exit_code == 0 and fixed.stdout.startswith("REPAIRED (blunt)"), fixed.output
    sheet = X.score_sheet(NAME)
    assert sheet["repair"]["verified"] is True and sheet["repair"]["blunt"] is True
    assert sheet["points"] == 25  # no answer given: the blunt repair's points only


def test_reveal_heals_or_keeps_unrepaired_faults_and_down_removes_the_record(ex, monkeypatch):
    lab = ex
    from railab.testbed import faults as F
    from railab.uilive import exercise_running

    seen: list[bool] = []  # at each injection: does a watcher reading the lab state see the exercise?
    inject = F.inject

    def watched(*a, **k):
        rec = inject(*a, **k)  # the fault is in the lab state now (the console's watcher may read it)
        seen.append(exercise_running(NAME))
        return rec

    monkeypatch.setattr(F, "inject", watched)
    r = _cli("exercise", "start", NAME, "--level", 1, "--seed", SEED, "--json")
    assert r.exit_code == 0 and "symptoms" in json.loads(r.stdout)
    # a fault event the watcher logs then is secret (trainee pages never get it): the exercise
    # record is written before the first injection
    assert seen == [True]
    monkeypatch.setattr(F, "inject", inject)
    again = _cli("exercise", "start", NAME, "--level", 1)
    assert again.exit_code == 2 and "already has an exercise" in again.output
    first = json.loads(_cli("exercise", "reveal", NAME, "--json").stdout)
    (f,) = first["faults"]
    assert st.load(NAME).faults == []  # not repaired: healed by reveal
    assert first["repair"]["verified"] is False and first["points"] == 0
    late = _cli("exercise", "answer", NAME, "--element", f["element"], "--kind", f["kind"])
    assert late.exit_code == 0 and "not scored" in late.stdout  # graded for practice after reveal
    wrong = _wrong_element(lab, [{"kind": f["kind"], "accept": [f["element"], *f["also_accepted"]]}])
    assert _cli("exercise", "answer", NAME, "--element", wrong, "--kind", f["kind"]).exit_code == 1
    assert X.score_sheet(NAME)["faults_found"] == 0

    # the same seed on the same lab: the same fault; --keep-faults hands it to `railab fault`
    assert _cli("exercise", "start", NAME, "--level", 1, "--seed", SEED, "--no-precheck").exit_code == 0
    second = json.loads(_cli("exercise", "reveal", NAME, "--keep-faults", "--json").stdout)
    assert [(x["element"], x["kind"]) for x in second["faults"]] == [(f["element"], f["kind"])]
    kept = st.load(NAME).faults
    assert [f"{x.node}:{x.port}" for x in kept] == [f["element"]] and kept[0].kind == "link-down"
    refused = _cli("exercise", "start", NAME, "--level", 1)  # the kept fault is in the fault list
    assert refused.exit_code == 2 and "heal --all first" in refused.output
    assert st.exercise_dir(NAME).exists()
    lab.close()  # railab down: the lab and its exercise record go
    assert not st.exercise_dir(NAME).exists()
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"clab-{NAME}-")]
