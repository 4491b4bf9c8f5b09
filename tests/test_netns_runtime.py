"""Integration tests of the netns runtime on real FRR (root + Debian frr; skipped otherwise)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from railab.checks.converge import observe_sessions
from railab.checks.deploy import bring_up
from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.runtime.netns import NetnsRuntime, _alive, _cmdline, exec_argv, netns_path
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies import routing
from railab.topologies.generator import generate
from railab.topologies.intent import INTENTS_DIR
from tests.conftest import PID, our_namespaces

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]
ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from railab.cli import main; main()"]


def _gen(intent: str, name: str, tmp_path: Path) -> Path:
    return generate(ROOT / "topologies" / "intents" / f"{intent}.yml", tmp_path / name, name=name)


def _lab_processes(lab: str) -> list[int]:
    run = str(st.lab_dir(lab)) + "/"
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _alive(int(p)) and run in _cmdline(int(p))]


def _assert_gone(lab: str) -> None:
    assert not [ns for ns in our_namespaces() if ns.startswith(f"clab-{lab}-")]
    assert not st.lab_dir(lab).exists()
    assert not [ns for ns, owner in st.ledger().items() if owner == lab]
    assert _lab_processes(lab) == []


def _check_converged(lab) -> None:
    """Sessions Established and ECMP widths, read straight from FRR's JSON and decided by the
    one predicate the convergence wait and the bgp/routes checks share (railab.checks.frr)."""
    from railab.checks.converge import observe

    routers = [n.name for n in lab.spec.nodes if n.role != "server"]
    assert routers
    views = observe(lab.spec, lab.executor, routers)
    for node in routers:
        view = views[node]
        for s in (s for s in lab.spec.bgp_sessions if s.node == node):
            assert view.session_states[s.interface] == "Established", (node, s.interface)
        for r in lab.spec.expected_routes.get(node, []):
            v = view.route_verdicts[r.prefix]
            assert v.ok and len(v.hops) == r.ecmp_width, (node, r.prefix, v)
            if r.interfaces:
                assert sorted(v.hops) == sorted(r.interfaces)


def test_mini_converges(mini_lab):
    assert len(mini_lab.spec.bgp_sessions) > 0
    assert any(r.ecmp_width > 1 for rs in mini_lab.spec.expected_routes.values() for r in rs)
    _check_converged(mini_lab)


def test_railonly_converges(railonly_lab):
    assert railonly_lab.spec.architecture == "rail-only"
    _check_converged(railonly_lab)
    # Server addressing and policy routing from lab.json, read back over netlink in the ns.
    nic = railonly_lab.spec.nics[0]
    probe = (
        "from pyroute2 import IPRoute; i = IPRoute();"
        f"print(sorted(r.get('table') for r in i.rule('dump') if r.get('src') == '{nic.address.ip}'),"
        f" [r.get('gateway') for r in i.route('dump', table={nic.table})])"
    )
    res = railonly_lab.executor.run(nic.server, [sys.executable, "-c", probe])
    assert res.ok, res.stderr
    assert res.stdout.strip() == f"[{nic.table}] ['{nic.gateway}']"


_RECV = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVTTL", 12), 1)  # linux/in.h
s.bind((sys.argv[1], 4791)); s.settimeout(10)
print("ready", flush=True)
data, anc, _, src = s.recvmsg(64, 64)
ttl = [int.from_bytes(d, sys.byteorder) for lvl, typ, d in anc if typ == socket.IP_TTL][0]
print(data.decode(), src[0], ttl, flush=True)
"""
_SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0)); s.sendto(b"railab", (sys.argv[2], 4791))
"""


def test_packet_crosses_fabric(mini_lab):
    """A UDP datagram (RoCEv2 port) from srv1 NIC1 to a group-2 server's NIC4, sourced from
    NIC1's address, arrives with TTL 64 - 3 (leaf, spine, leaf: cross-group)."""
    spec = mini_lab.spec
    src = spec.nic("srv1", 1)
    dst = next(n for n in spec.nics if n.group != src.group and n.nic == 4)
    saddr, daddr = str(src.address.ip), str(dst.address.ip)
    recv = subprocess.Popen(exec_argv(f"clab-{mini_lab.name}-{dst.server}", [sys.executable, "-c", _RECV, daddr]),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout.readline().strip() == "ready"
        res = mini_lab.executor.run(src.server, [sys.executable, "-c", _SEND, saddr, daddr])
        assert res.ok, res.stderr
        out, _ = recv.communicate(timeout=15)
    finally:
        recv.kill()
    data, peer, ttl = out.split()
    assert (data, peer) == ("railab", saddr)
    assert 64 - int(ttl) == spec.expected_hops["cross-group"] == 3


def test_two_labs_at_once(mini_lab, railonly_lab):
    rt = NetnsRuntime()
    a, b = rt.status(mini_lab.name), rt.status(railonly_lab.name)
    for s in (a, b):
        assert all(n["present"] for n in s["nodes"].values())
        assert all(all(d.values()) for d in (n["daemons"] for n in s["nodes"].values()))
    up, down = observe_sessions(mini_lab.spec, rt.executor(mini_lab.name))  # BGP: checks' job
    assert len(up) == len(up) + len(down) == len(mini_lab.spec.bgp_sessions)
    assert a["nodes"]["srv1"]["namespace"] != b["nodes"]["srv1"]["namespace"]
    assert "sessions" not in a  # the runtime reports what it made, not routing state


def test_clash_is_refused_and_harmless(mini_lab):
    with pytest.raises(RailabError, match=f"lab {mini_lab.name} is already up: railab down {mini_lab.name}"):
        NetnsDeployer().up(mini_lab.dir)
    up, _ = observe_sessions(mini_lab.spec, NetnsRuntime().executor(mini_lab.name))
    assert len(up) == len(mini_lab.spec.bgp_sessions)
    assert st.load(mini_lab.name).phase == "running"


def test_bad_config_is_rejected(tmp_path):
    name = f"bad{PID}"
    labdir = _gen("rail-only-512", name, tmp_path)
    conf = sorted(labdir.glob("configs/*/frr.conf"))[0]
    conf.write_text(conf.read_text() + "interface eth1\n ip addresss 10.9.9.9/31\nexit\n")
    with pytest.raises(RailabError, match=rf"FRR rejected the config of {conf.parent.name} .*Unknown command"):
        NetnsDeployer().up(labdir)
    _assert_gone(name)


def test_a_line_a_daemon_refuses_at_start_fails_up(tmp_path):
    """vtysh -C parses this (a second ``router bgp`` with another ASN) but bgpd refuses it when it
    reads its split part at start, logs it and runs on without it: the bring-up must say so (it
    reads the daemons' logs while it waits for convergence), not converge on a config that is
    not the file's, and leave nothing behind."""
    name = f"rj{PID}"
    labdir = _gen("mini", name, tmp_path)
    conf = labdir / "configs" / "g1-leaf1" / "frr.conf"
    conf.write_text(conf.read_text() + "router bgp 65000\n bgp router-id 1.1.1.1\nexit\n")
    n = len(conf.read_text().splitlines())
    with pytest.raises(RailabError, match=rf"g1-leaf1 bgpd: frr\.conf line {n - 2}: .*router bgp 65000"):
        bring_up(NetnsDeployer(), labdir)
    _assert_gone(name)


def test_down_removes_everything_and_is_idempotent(tmp_path):
    name = f"dn{PID}"
    labdir = _gen("rail-only-512", name, tmp_path)
    rt = NetnsDeployer()
    rec = bring_up(rt, labdir)
    pids = [p for r in rec["routers"].values() for p in r["pids"].values()]
    assert pids and all(_alive(p) for p in pids)
    assert set(our_namespaces()) >= set(rec["namespaces"].values())
    rt.down(name)
    _assert_gone(name)
    assert not any(_alive(p) for p in pids)
    rt.down(name)  # idempotent


#: a railab command whose main thread stays in namespace argv[1] (as ``up`` does for a moment
#: per new namespace): says so on stdout, then waits there
_VISITOR = """
import sys, time
from railab.testbed.namespaces import entered
with entered(sys.argv[1]):
    print("inside", flush=True)
    time.sleep(60)
"""


def test_down_kills_the_labs_processes_not_a_command_visiting_its_namespace():
    """``down`` kills what runs in the lab's namespaces (here a ``sleep`` started inside, with
    ``nsenter``), not a railab command whose main thread is in one of them for the moment: an
    ``up`` bringing a new namespace's loopback up looked like a process of the lab in
    /proc/PID/ns/net and was SIGKILLed by a concurrent ``down`` (CI: exit -9 instead of "taken
    down by another command")."""
    lab = f"dv{PID}"
    ns = f"clab-{lab}-n1"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    procs = []
    try:
        st.save(st.LabState(lab=lab, namespaces={"n1": ns}))
        st.ledger_add([ns], lab)
        inside = subprocess.Popen(exec_argv(ns, ["sleep", "60"]))
        visitor = subprocess.Popen([sys.executable, "-c", _VISITOR, ns], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        procs = [inside, visitor]
        assert visitor.stdout.readline() == "inside\n"
        home = os.readlink("/proc/self/ns/net")
        end = time.monotonic() + 10
        while os.readlink(f"/proc/{inside.pid}/ns/net") == home:  # nsenter has entered
            assert time.monotonic() < end
            time.sleep(0.01)
        assert os.readlink(f"/proc/{visitor.pid}/ns/net") == os.readlink(f"/proc/{inside.pid}/ns/net")
        NetnsRuntime().down(lab)
        assert inside.wait(timeout=10) == -signal.SIGKILL
        assert visitor.poll() is None  # not killed: it goes on, and finds the lab gone
        _assert_gone(lab)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        NetnsRuntime().down(lab)


def _up_subprocess(labdir: Path) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "up", str(labdir), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _wait_for_namespaces(lab: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(ns.startswith(f"clab-{lab}-") for ns in our_namespaces()):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    raise AssertionError("namespaces never appeared")


def test_interrupted_up_of_an_intent_says_its_generated_files_stay(tmp_path):
    """`up INTENT` generated labs/<name> before it was interrupted: the lab is rolled back and
    the message says the generated files stay (as after down), not that everything went."""
    name = f"ii{PID}"
    proc = subprocess.Popen([*CLI, "up", "mini", "--name", name, "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    _wait_for_namespaces(name, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.startswith(f"error: interrupted by SIGINT: everything up started was removed (the "
                          f"generated files stay in labs/{name}, as after down: railab up "
                          f"labs/{name} starts from them)"), err
    assert (tmp_path / "labs" / name / "lab.json").is_file()
    _assert_gone(name)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_up_rolls_back(tmp_path, sig):
    name = f"i{sig.value}x{PID}"
    labdir = _gen("mini", name, tmp_path)
    proc = _up_subprocess(labdir)
    _wait_for_namespaces(name, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig.value, err  # 130 for SIGINT, 143 for SIGTERM
    assert err.startswith(f"error: interrupted by {sig.name}: everything up started was removed"), err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    _assert_gone(name)


@pytest.mark.parametrize("wave", ["zebra", "bgpd"])
def test_interrupt_while_frr_daemons_start(tmp_path, wave):
    """Ctrl-C while FRR daemons are being spawned and daemonize: none may survive the rollback
    (a daemon forked after the sweep would live on in a deleted namespace)."""
    name = f"if{wave[0]}{PID}"
    labdir = _gen("mini", name, tmp_path)
    proc = _up_subprocess(labdir)
    end = time.monotonic() + 60
    while not [p for p in _lab_processes(name) if wave in _cmdline(p)]:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"no {wave} ever started"
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    time.sleep(0.5)  # a leaked daemon would have finished daemonizing by now
    _assert_gone(name)


def test_down_after_crash(tmp_path):
    """SIGKILL during up (no rollback possible), then `railab down` removes what was recorded."""
    name = f"cr{PID}"
    labdir = _gen("mini", name, tmp_path)
    proc = _up_subprocess(labdir)
    _wait_for_namespaces(name, proc)
    time.sleep(0.3)  # let FRR start in some nodes
    proc.kill()
    proc.wait()
    assert st.load(name) is not None
    res = subprocess.run([*CLI, "down", name], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    _assert_gone(name)


def test_sonic_vs_lab_is_refused_at_once(tmp_path):
    """A sonic-vs lab needs containerlab and the SONiC-VS image: one clear error, nothing made."""
    from railab.topologies.generator import generate
    intent = yaml.safe_load((INTENTS_DIR / "mini.yml").read_text())
    intent["lab"]["kind"] = "sonic-vs"
    path = tmp_path / "sonic.yml"
    path.write_text(yaml.safe_dump(intent))
    name = f"sv{PID}"
    labdir = generate(path, tmp_path / name, name=name)
    t0 = time.monotonic()
    with pytest.raises(RailabError, match="kind sonic-vs .* --runtime containerlab"):
        NetnsDeployer().up(labdir)
    assert time.monotonic() - t0 < 5
    _assert_gone(name)


def test_policy_rule_priority_matches_the_clab_exec_lines(railonly_lab):
    """The netns runtime installs each NIC's source rule at the priority the containerlab
    ``exec:`` lines use (railab.topologies.routing), table 100+n."""
    nic = railonly_lab.spec.nics[0]
    probe = (
        "from pyroute2 import IPRoute; i = IPRoute();"
        f"print([(r.get('priority'), r.get('table')) for r in i.rule('dump') if r.get('src') == '{nic.address.ip}'])"
    )
    res = railonly_lab.executor.run(nic.server, [sys.executable, "-c", probe])
    assert res.ok, res.stderr
    assert res.stdout.strip() == f"[({routing.rule_priority(nic.nic)}, {routing.table_for(nic.nic)})]"


def test_frr_daemons_run_in_the_nodes_namespaces(mini_lab):
    """FRR daemons are spawned without preexec_fn: each sits in its node's network namespace
    and in one UTS namespace per node whose hostname is the node's name."""
    rec = st.load(mini_lab.name)
    host_uts = os.stat("/proc/self/ns/uts").st_ino
    for node in ("spine1", "g1-leaf1"):
        pids = rec.routers[node].pids
        net = {os.stat(f"/proc/{p}/ns/net").st_ino for p in pids.values()}
        uts = {os.stat(f"/proc/{p}/ns/uts").st_ino for p in pids.values()}
        assert net == {os.stat(netns_path(rec.namespaces[node])).st_ino}, node
        assert len(uts) == 1 and host_uts not in uts, node
        name = subprocess.run(["nsenter", f"--uts=/proc/{pids['bgpd']}/ns/uts", "hostname"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert name == node
    assert rec.phase == "running" and rec.user


def test_restarted_daemons_join_their_nodes_uts_namespace(mini_lab):
    """A daemon started again (after daemon-kill, node-off) joins its node's one UTS namespace
    (a running sibling's, or one new namespace for all when every daemon had died), not one of
    its own: node-off then heal on spine1 used to leave four UTS namespaces there."""
    from typer.testing import CliRunner

    from railab.cli import app

    run = CliRunner()
    lab = mini_lab.name
    for fault in (["daemon-kill", "spine1", "--daemon", "bgpd"], ["node-off", "spine1"]):
        r = run.invoke(app, ["fault", lab, *fault])
        if r.exit_code != 0 and fault[0] == "daemon-kill":  # the CLI may name daemons otherwise
            r = run.invoke(app, ["fault", lab, "daemon-kill", "spine1"])
        assert r.exit_code == 0, r.output
        assert run.invoke(app, ["fault", lab, "heal", "--all"]).exit_code == 0
        pids = st.load(lab).routers["spine1"].pids
        uts = {os.stat(f"/proc/{p}/ns/uts").st_ino for p in pids.values()}
        assert len(uts) == 1, (fault, uts)
        name = subprocess.run(["nsenter", f"--uts=/proc/{pids['bgpd']}/ns/uts", "hostname"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert name == "spine1"
    assert run.invoke(app, ["check", lab, "--wait", "60"]).exit_code == 0


def test_executor_missing_command_is_127(mini_lab):
    res = mini_lab.executor.run("srv1", ["no-such-railab-command"])
    assert res.rc == 127 and "command not found" in res.stderr


def test_up_deploys_only_and_bring_up_rolls_back_on_timeout(tmp_path):
    """``Deployer.up`` returns once FRR runs (phase ``started``, no convergence wait); a
    convergence timeout in bring_up removes the lab."""
    name = f"dq{PID}"
    labdir = _gen("mini", name, tmp_path)  # BGP sessions: cannot converge within 1 ms
    rt = NetnsDeployer()
    try:
        rec = rt.up(labdir)
        assert rec.phase == "started" and "converge_s" not in rec.timings
        assert st.load(name).phase == "started"
    finally:
        rt.down(name)
    _assert_gone(name)
    try:
        with pytest.raises(RailabError, match=f"lab {name} did not converge within 0.001 s"):
            bring_up(rt, labdir, timeout=0.001)
    except BaseException:
        rt.down(name)  # it converged after all: do not leak the lab
        raise
    _assert_gone(name)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_during_convergence_wait_rolls_back(tmp_path, sig):
    """Ctrl-C / SIGTERM while bring_up waits for convergence (the runtime's own up is done):
    bring_up takes the lab down, the CLI exits 128 + signal without a traceback."""
    name = f"w{sig.value}x{PID}"
    labdir = _gen("mini", name, tmp_path)
    proc = _up_subprocess(labdir)
    end = time.monotonic() + 60
    while (st.load(name) or st.LabState(lab=name)).phase != "converging":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the wait never started"
        time.sleep(0.005)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig.value, err
    assert err.startswith(f"error: interrupted by {sig.name}: everything up started was removed"), err
    assert "Traceback" not in err, err
    _assert_gone(name)
