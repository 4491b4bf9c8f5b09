"""Deploy vs convergence, the state record, signals, namespaces and policy routing (no root).

``railab.checks.deploy.bring_up`` is exercised with a fake runtime and a stubbed convergence
wait; the pieces it relies on (LabState, signal guards, namespace argv, routing numbers) are
pure and tested directly.
"""

from __future__ import annotations

import io
import json
import re
import signal
import time
from pathlib import Path

import pytest
from rich.console import Console

from railab.checks import deploy
from railab.checks.converge import ConvergeProgress
from railab.errors import RailabError
from railab.progress import ConvergeBar
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.testbed.namespaces import exec_argv, netns_path
from railab.testbed.runtime.base import Runtime
from railab.testbed.signals import Interrupted, signals_deferred, signals_raise
from railab.topologies import routing
from railab.topologies.clab import server_exec
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def labdir(tmp_path):
    return Path(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "lab", name="dep"))


class FakeRuntime(Runtime):
    """Records calls; ``up`` writes a real state record like the runtimes do."""

    name = "netns"

    def __init__(self, fail_up: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_up = fail_up

    def up(self, labdir: Path) -> st.LabState:
        self.calls.append("up")
        if self.fail_up:
            raise RailabError("deploy failed")
        return st.save(st.LabState(lab="dep", phase="started", labdir=str(labdir)))

    def down(self, lab: str) -> None:
        self.calls.append(f"down {lab}")
        st.remove_lab_dir(lab)

    def status(self, lab: str) -> dict:
        return {}

    def inspect(self, lab: str) -> dict:
        return self.record(lab).to_json()

    def executor(self, lab: str):
        self.calls.append("executor")
        return object()


def test_bring_up_waits_then_marks_running(run_dir, labdir, monkeypatch):
    seen = {}

    def fake_wait(spec, executor, *, timeout, on_progress, netns_of=None, on_stalled=None):
        seen.update(spec=spec.name, timeout=timeout, phase=st.load("dep").phase)
        on_progress(ConvergeProgress("dep", 1, 2, 3, 4, 0.5))
        return {}

    monkeypatch.setattr(deploy, "wait_converged", fake_wait)
    reports = []
    rt = FakeRuntime()
    rec = deploy.bring_up(rt, labdir, timeout=7.5, on_progress=reports.append)
    assert rt.calls == ["up", "executor"]
    assert seen == {"spec": "dep", "timeout": 7.5, "phase": "converging"}
    assert reports and reports[0].sessions_total == 2
    assert rec.phase == "running" and "converge_s" in rec.timings
    assert st.load("dep").phase == "running"


def test_bring_up_runs_without_the_cyclic_gc_and_restores_it(run_dir, labdir, monkeypatch):
    """Issue 47: the collector is off while the lab comes up and converges (its full runs took
    ~20 % of railab's CPU at 4096 GPUs) and back on afterwards, also after a failure; a caller
    that had it off keeps it off."""
    import gc

    seen = []

    class Watching(FakeRuntime):
        def up(self, labdir):
            seen.append(("up", gc.isenabled()))
            return super().up(labdir)

    def fake_wait(spec, executor, **kw):
        seen.append(("wait", gc.isenabled()))
        return {}

    monkeypatch.setattr(deploy, "wait_converged", fake_wait)
    assert gc.isenabled()
    deploy.bring_up(Watching(), labdir, timeout=5)
    assert seen == [("up", False), ("wait", False)] and gc.isenabled()
    with pytest.raises(RailabError):
        deploy.bring_up(FakeRuntime(fail_up=True), labdir, timeout=5)
    assert gc.isenabled()
    gc.disable()
    try:
        with deploy.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_bring_up_default_timeout_scales_with_the_lab(run_dir, labdir, monkeypatch):
    from railab.checks.converge import default_timeout

    got = []
    monkeypatch.setattr(deploy, "wait_converged",
                        lambda spec, ex, *, timeout, on_progress, netns_of=None, on_stalled=None: got.append(timeout))
    deploy.bring_up(FakeRuntime(), labdir)
    assert got == [default_timeout(LabSpec.load(labdir))]


@pytest.mark.parametrize("exc", [RailabError("lab dep did not converge within 1 s"), KeyboardInterrupt(),
                                 Interrupted(signal.SIGTERM)])
def test_bring_up_rolls_back_when_the_wait_fails(run_dir, labdir, monkeypatch, exc):
    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(deploy, "wait_converged", fail)
    rt = FakeRuntime()
    with pytest.raises(type(exc)):
        deploy.bring_up(rt, labdir, timeout=1)
    assert rt.calls[-1] == "down dep"
    assert st.load("dep") is None


def test_bring_up_does_not_wait_when_deploy_fails(run_dir, labdir, monkeypatch):
    monkeypatch.setattr(deploy, "wait_converged", lambda *a, **k: pytest.fail("waited"))
    rt = FakeRuntime(fail_up=True)
    with pytest.raises(RailabError, match="deploy failed"):
        deploy.bring_up(rt, labdir)
    assert rt.calls == ["up"]  # the runtime rolls back its own failures


def test_mark_converged_records_phase_and_time(run_dir):
    st.save(st.LabState(lab="mc", phase="started"))
    rec = FakeRuntime().mark_converged("mc", 1.23456)
    assert (rec.phase, rec.timings["converge_s"]) == ("running", 1.235)
    with pytest.raises(RailabError, match="is not up"):
        FakeRuntime().mark_converged("absent", 1.0)


# ---- state record ----------------------------------------------------------------------------
def test_state_roundtrip_and_dict_view(run_dir, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    rec = st.LabState(lab="a", namespaces={"n1": "clab-a-n1"}, links=[("n1:eth1", "n2:eth1", 9000)],
                      routers={"n1": st.RouterState(dir="/d", config="/c", daemons=["zebra"])})
    rec.routers["n1"].pids["zebra"] = 42
    st.save(rec)
    doc = json.loads(st.state_path("a").read_text())
    assert doc["user"] == "alice" and doc["routers"]["n1"]["pids"] == {"zebra": 42}
    back = st.load("a")
    assert back == rec
    assert back["lab"] == "a" and back.get("phase") == "creating" and back.get("nope", 5) == 5
    assert "namespaces" in back and "nope" not in back
    assert back["routers"]["n1"]["pids"]["zebra"] == 42
    with pytest.raises(KeyError):
        back["nope"]


def test_state_user_without_sudo(monkeypatch):
    monkeypatch.delenv("SUDO_USER", raising=False)
    monkeypatch.setenv("LOGNAME", "bob")
    assert st.LabState(lab="b").user == "bob"


def test_state_keeps_unknown_fields_and_rejects_bad_records(run_dir):
    st.save({"lab": "x", "runtime": "containerlab", "future_field": [1, 2]})
    assert st.load("x").future_field == [1, 2] and st.load("x").runtime == "containerlab"
    st.state_path("x").write_text('{"lab": "x", "namespaces": "not a dict"}')
    assert st.load("x") is None  # unreadable like corrupt JSON


def test_labref_uses_the_record(run_dir, labdir):
    st.save(st.LabState(lab="dep", phase="running", labdir=str(labdir), namespaces={"srv1": "custom-ns"}))
    ref = resolve("dep")
    assert ref.running and ref.labdir == labdir and ref.require_up().lab == "dep"
    assert ref.netns_of("srv1") == "custom-ns" and ref.netns_of("spine1") == "clab-dep-spine1"
    assert ref.spec().name == "dep"


# ---- signals ---------------------------------------------------------------------------------
def test_signals_deferred_delivers_after_the_block():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with signals_raise():
            with signals_deferred():
                signal.raise_signal(signal.SIGINT)
                reached.append("after the signal, still inside")
    assert reached == ["after the signal, still inside"]
    with pytest.raises(Interrupted) as err:
        with signals_raise():
            with signals_deferred():
                signal.raise_signal(signal.SIGTERM)
    assert err.value.signum == signal.SIGTERM and "SIGTERM" in str(err.value)


# ---- namespaces and routing ------------------------------------------------------------------
def test_exec_argv_uses_nsenter():
    assert exec_argv("clab-a-srv1", ["ip", "link"]) == ["nsenter", "--net=/run/netns/clab-a-srv1", "--", "ip", "link"]
    assert netns_path("x") == Path("/run/netns/x")


def test_no_preexec_fn_and_no_private_pyroute2_api():
    """No code runs in a forked child (unsafe with the checks' thread pools), anywhere in the
    package or the tests; only pyroute2's public API."""
    files = [p for d in ("app", "testbed", "traffic", "checks", "topologies", "tests") for p in (ROOT / d).rglob("*.py")
             if p.name != "test_deploy_unit.py"]
    src = "\n".join(p.read_text() for p in files)
    assert not re.search(r"preexec_fn\s*=", src)
    assert not re.search(r"pnetns\._|netns\._create|_pr_netns\._", src)


def test_policy_routing_has_one_numbering():
    assert (routing.table_for(3), routing.rule_priority(3)) == (103, 1003)
    assert routing.nic_lines(nic=2, interface="eth2", address="10.0.0.3/31", gateway="10.0.0.2", mtu=9000) == [
        "ip link set eth2 mtu 9000",
        "ip addr add 10.0.0.3/31 dev eth2",
        "ip rule add from 10.0.0.3 lookup 102 pref 1002",
        "ip route add default via 10.0.0.2 dev eth2 table 102",
    ]


def test_clab_exec_lines_come_from_routing(labdir):
    spec = LabSpec.load(labdir)
    nic = spec.nics[0]
    lines = server_exec(spec, nic.server)
    ip = str(nic.address.ip)
    assert f"ip rule add from {ip} lookup {nic.table} pref {routing.rule_priority(nic.nic)}" in lines
    assert nic.table == routing.table_for(nic.nic)


# ---- progress display (application layer) ----------------------------------------------------
def test_converge_bar_draws_sessions_and_prefixes():
    out = io.StringIO()
    with ConvergeBar(Console(file=out, force_terminal=False, width=100)) as bar:
        bar(ConvergeProgress("lab1", 3, 4, 10, 12, 0.2))
        bar(ConvergeProgress("lab1", 4, 4, 12, 12, 0.4, done=True))
    text = out.getvalue()
    assert "BGP sessions (lab1)" in text and "4/4" in text and "12/12" in text
    ConvergeBar().close()  # never started: nothing to stop


class RefusingRuntime(FakeRuntime):
    """startup_problems reports a refused line (after ``delay`` s) or raises ``error``."""

    def __init__(self, problems=(), delay: float = 0.0, error: Exception | None = None) -> None:
        super().__init__()
        self.problems, self.delay, self.error = list(problems), delay, error

    def startup_problems(self, lab: str) -> list[str]:
        time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.problems


LINE = "g1-leaf1 bgpd: frr.conf line 99: No such command: router bgp 65000"


@pytest.mark.parametrize("keep", [False, True])
def test_a_refused_line_fails_a_converged_bring_up_and_rolls_back(run_dir, labdir, monkeypatch, keep):
    monkeypatch.setattr(deploy, "wait_converged", lambda *a, **k: {})
    rt = RefusingRuntime([LINE])
    with pytest.raises(RailabError, match="FRR rejected part of the config at daemon start: g1-leaf1 bgpd"):
        deploy.bring_up(rt, labdir, keep_on_failure=keep)
    assert rt.calls[-1] == "down dep" and st.load("dep") is None


def test_a_refused_line_stops_the_wait_at_the_next_poll(run_dir, labdir, monkeypatch):
    polls = []

    def slow_wait(spec, executor, *, timeout, on_progress, netns_of=None, on_stalled=None):
        for i in range(200):  # 10 s of polls unless a poll raises
            time.sleep(0.05)
            polls.append(i)
            on_progress(ConvergeProgress("dep", 0, 2, 0, 4, i * 0.05))
        return {}

    monkeypatch.setattr(deploy, "wait_converged", slow_wait)
    rt = RefusingRuntime([LINE], delay=0.2)
    with pytest.raises(RailabError, match="line 99"):
        deploy.bring_up(rt, labdir)
    assert 2 <= len(polls) < 50 and rt.calls[-1] == "down dep"


def test_a_refused_line_explains_a_timeout(run_dir, labdir, monkeypatch):
    def timeout(*a, **k):
        raise RailabError("lab dep did not converge within 1 s")

    monkeypatch.setattr(deploy, "wait_converged", timeout)
    rt = RefusingRuntime([LINE], delay=0.1)
    with pytest.raises(RailabError, match="FRR rejected part of the config"):
        deploy.bring_up(rt, labdir, timeout=1, keep_on_failure=True)
    assert rt.calls[-1] == "down dep"


def test_a_failing_refused_line_read_is_one_railab_error(run_dir, labdir, monkeypatch):
    monkeypatch.setattr(deploy, "wait_converged", lambda *a, **k: {})
    rt = RefusingRuntime(error=OSError("Permission denied: bgpd.log"))
    with pytest.raises(RailabError, match=r"could not read what the daemons refused at start \(OSError"):
        deploy.bring_up(rt, labdir)
    assert rt.calls[-1] == "down dep"


def test_convergence_wait_polls_a_quick_lab_every_50_ms(monkeypatch):
    """Without ``poll``, the wait between polls is the last poll's duration, clamped to
    [POLL_MIN_S, POLL_INTERVAL_S]: a lab read in no time is polled every 50 ms."""
    from types import SimpleNamespace

    from railab.checks import converge

    spec = SimpleNamespace(name="q", nodes=[SimpleNamespace(name="r1", role="leaf")], bgp_sessions=[],
                           expected_routes={})
    polls = iter([False, False, True])
    monkeypatch.setattr(converge, "observe", lambda *a, **k: {"r1": SimpleNamespace(
        converged=next(polls), sessions_up=0, routes_ok=0)})
    sleeps: list[float] = []
    monkeypatch.setattr(converge.time, "sleep", sleeps.append)
    converge.wait_converged(spec, executor=None, timeout=10)
    assert sleeps == [converge.POLL_MIN_S] * 2
    polls = iter([False, True])
    sleeps.clear()
    converge.wait_converged(spec, executor=None, timeout=10, poll=0.7)
    assert sleeps == [0.7]


def _stall_spec():
    from types import SimpleNamespace

    s1 = SimpleNamespace(node="leaf1", interface="eth3", peer="spine1", peer_interface="eth1")
    s2 = SimpleNamespace(node="leaf1", interface="eth4", peer="spine2", peer_interface="eth1")
    s3 = SimpleNamespace(node="leaf2", interface="eth3", peer="spine1", peer_interface="eth2")
    return SimpleNamespace(name="st", nodes=[SimpleNamespace(name=n, role="leaf") for n in ("leaf1", "leaf2")],
                           bgp_sessions=[s1, s2, s3], expected_routes={})


def test_stalled_ports_are_both_ends_of_every_session_not_established():
    from types import SimpleNamespace

    from railab.checks.converge import stalled_ports

    views = {"leaf1": SimpleNamespace(session_states={"eth3": "Established", "eth4": "Active"})}
    # leaf2 not observed yet: its session counts as down
    assert stalled_ports(_stall_spec(), views) == [("leaf1", "eth4"), ("spine2", "eth1"),
                                                   ("leaf2", "eth3"), ("spine1", "eth2")]


def test_convergence_wait_reports_stalled_sessions_to_on_stalled(monkeypatch):
    from types import SimpleNamespace

    from railab.checks import converge

    polls = iter([False, False, True])
    monkeypatch.setattr(converge, "observe", lambda *a, **k: {n: SimpleNamespace(
        converged=c, sessions_up=0, routes_ok=0,
        session_states={"eth3": "Established" if c else "Active", "eth4": "Established"})
        for n, c in (("leaf1", next(polls)), ("leaf2", True))})
    monkeypatch.setattr(converge.time, "sleep", lambda s: None)
    seen = []
    converge.wait_converged(_stall_spec(), executor=None, timeout=10, on_stalled=seen.append, stalled_after=0)
    assert seen == [[("leaf1", "eth3"), ("spine1", "eth1")]] * 2


def test_netns_resolicit_sends_in_each_nodes_namespace(monkeypatch):
    from types import SimpleNamespace

    from railab.testbed import solicit
    from railab.testbed.runtime.netns import NetnsRuntime

    sent = []
    monkeypatch.setattr(solicit, "solicit_once", lambda ports: (sent.append(ports) or (3, {})))
    rt = NetnsRuntime()
    monkeypatch.setattr(rt, "record", lambda lab: SimpleNamespace(
        namespaces={"leaf1": "clab-x-leaf1", "spine1": "clab-x-spine1"}))
    assert rt.resolicit("x", [("leaf1", "eth3"), ("spine1", "eth1"), ("gone", "eth9"), ("leaf1", "eth4")]) == 3
    assert sent == [{"clab-x-leaf1": {"eth3", "eth4"}, "clab-x-spine1": {"eth1"}}]


def test_netns_down_finishes_the_teardown_before_a_ctrl_c_takes_effect(monkeypatch):
    """A SIGINT during `down` (a new-user review interrupted it ~1 time in 5 at 0.7 s, leaving
    the state record of a lab whose namespaces were gone) lands once the teardown is done."""
    import os
    import signal

    from railab.testbed.runtime.netns import NetnsRuntime

    done = []

    def fake_down(self, lab, also=()):
        os.kill(os.getpid(), signal.SIGINT)
        done.append(lab)  # still runs: the signal waits for the end of the teardown

    monkeypatch.setattr(NetnsRuntime, "_down", fake_down)
    with pytest.raises(KeyboardInterrupt):
        NetnsRuntime().down("x")
    assert done == ["x"]
