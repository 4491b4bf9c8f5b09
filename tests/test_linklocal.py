"""The IPv6 link-local state of fabric ports (railab.testbed.linklocal) and the convergence
wait's repair of it (Runtime.repair_ports via railab.checks.deploy.unstick).

On the full 1024-GPU fabric about one bring-up in 5-20 left one port without its ``fe80::/64``
route (the kernel's atomic per-CPU pool ran dry, ``dmesg``: ``percpu: allocation failed``), and
its session stayed in Active for good. These tests make the same hole by hand."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from railab.checks.converge import observe, wait_converged
from railab.checks.deploy import bring_up, unstick
from railab.checks.frr import session_up
from railab.testbed import linklocal
from railab.testbed.namespaces import entered
from railab.testbed.rtnl import Rtnl
from railab.testbed.runtime.netns import NetnsExecutor
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

PID = os.getpid()
INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def _link_local(ns: str, port: str, timeout: float = 3.0) -> str:
    """The port's link-local address once addrconf made it (the carrier comes up via linkwatch,
    up to 1 s late)."""
    deadline = time.monotonic() + timeout
    while True:
        with entered(ns):
            nl = Rtnl()
            try:
                index = {name: i for i, (name, _) in nl.links().items()}[port]
                lls = [a.address for a in nl.addresses(socket.AF_INET6) if a.index == index and a.scope == 253]
            finally:
                nl.close()
        if lls or time.monotonic() > deadline:
            assert lls, f"{ns}:{port} got no link-local address within {timeout} s"
            return lls[0]
        time.sleep(0.05)


@pytest.fixture
def veth_pair():
    """Two namespaces joined by one veth (a1 -- b1), DAD off as in a lab; removed afterwards."""
    a, b = f"llt{PID}a", f"llt{PID}b"
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            _ip("netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
        _ip("link", "add", "a1", "netns", a, "up", "type", "veth", "peer", "name", "b1", "netns", b)
        _ip("-n", b, "link", "set", "b1", "up")
        _link_local(a, "a1")
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_port_faults_names_each_missing_part_and_repair_restores_it(veth_pair):
    a, _ = veth_pair
    with entered(a):
        assert linklocal.port_faults(["a1", "absent0"]) == {}
    ll = _link_local(a, "a1")
    _ip("-n", a, "-6", "route", "del", "fe80::/64", "dev", "a1")
    _ip("-n", a, "-6", "route", "del", "local", ll, "dev", "a1", "table", "local")
    _ip("-n", a, "-6", "route", "del", "multicast", "ff00::/8", "dev", "a1", "table", "local")
    with entered(a):
        assert linklocal.port_faults(["a1"]) == {
            "a1": f"no fe80::/64 route, no local route for {ll}, no ff00::/8 route"}
        linklocal.repair(["a1"])
        assert linklocal.port_faults(["a1"]) == {}
    assert _link_local(a, "a1") == ll  # the same EUI-64 address: the peer's view stays right


def test_port_faults_sees_a_port_without_link_local_and_skips_one_without_carrier(veth_pair):
    a, b = veth_pair
    _ip("-n", a, "-6", "addr", "flush", "dev", "a1")
    with entered(a):
        assert linklocal.port_faults(["a1"]) == {"a1": "no link-local address, no fe80::/64 route"}
    _ip("-n", b, "link", "set", "b1", "down")  # a1 loses its carrier: not judged
    deadline = time.monotonic() + 3
    while True:
        with entered(a):
            if linklocal.port_faults(["a1"]) == {} or time.monotonic() > deadline:
                assert linklocal.port_faults(["a1"]) == {}
                break
        time.sleep(0.05)


def test_live_a_session_whose_port_lost_its_link_local_route_is_repaired_by_the_wait(tmp_path):
    """Make the kernel's hole by hand on a converged mini lab: the leaf end of one session loses
    its fe80::/64 route and the session is reset. It stays down (the leaf's connect fails
    ENETUNREACH) until the convergence wait's stall hook restarts IPv6 on that port."""
    name = f"ll{PID}"
    labdir = generate(INTENTS / "mini.yml", tmp_path / name, name=name)
    runtime = NetnsDeployer()
    bring_up(runtime, labdir)
    try:
        spec = LabSpec.load(labdir)
        executor = NetnsExecutor(name)
        s = next(s for s in spec.bgp_sessions if "leaf" in s.node and "spine" in s.peer)
        ns = netns_name(name, s.node)
        _ip("-n", ns, "-6", "route", "del", "fe80::/64", "dev", s.interface)
        executor.run(s.node, ["vtysh", "-c", f"clear bgp {s.interface}"])
        time.sleep(4)  # 4 connect retries (timers connect 1)
        state = observe(spec, executor, [s.node], netns_of=lambda n: netns_name(name, n))[s.node]
        assert not session_up(state.session_states[s.interface]), "the session came back without a repair"
        assert runtime.record(name).ipv6_repairs == []

        t0 = time.monotonic()
        wait_converged(spec, executor, timeout=30, netns_of=lambda n: netns_name(name, n),
                       on_stalled=lambda ports: unstick(runtime, name, ports))
        assert time.monotonic() - t0 < 15
        assert runtime.record(name).ipv6_repairs == [f"{s.node}:{s.interface}: no fe80::/64 route"]
        # shown where a user looks, not only in inspect --json (issue 31, carried over)
        import json

        from typer.testing import CliRunner

        from railab.cli import app

        st_ = CliRunner().invoke(app, ["status", name, "--json"])
        assert json.loads(st_.output)["ipv6_repairs"] == runtime.record(name).ipv6_repairs
        ins = CliRunner().invoke(app, ["inspect", name], env={"COLUMNS": "250"})
        assert "IPv6 link-local repaired on 1 port(s)" in ins.output and s.interface in ins.output
    finally:
        runtime.down(name)


def test_live_check_names_a_port_that_lost_its_link_local_and_wait_repairs_it(tmp_path):
    """Issue 31 (carried over): a port that loses its fe80::/64 route *after* up is named by
    ``railab check`` (cause link-local-missing on that port, not a generic 'IPv6 link-local'),
    and ``railab check --wait`` repairs it as up's convergence wait does."""
    import json

    from typer.testing import CliRunner

    from railab.cli import app

    name = f"lc{PID}"
    labdir = generate(INTENTS / "mini.yml", tmp_path / name, name=name)
    runtime = NetnsDeployer()
    bring_up(runtime, labdir)
    try:
        spec = LabSpec.load(labdir)
        executor = NetnsExecutor(name)
        s = next(s for s in spec.bgp_sessions if "leaf" in s.node and "spine" in s.peer)
        _ip("-n", netns_name(name, s.node), "-6", "route", "del", "fe80::/64", "dev", s.interface)
        executor.run(s.node, ["vtysh", "-c", f"clear bgp {s.interface}"])
        time.sleep(4)  # the session stays down: the leaf's connect fails ENETUNREACH
        doc = json.loads(CliRunner().invoke(app, ["check", name, "--only", "bgp", "--json"]).output)
        rows = [r for r in doc["results"] if r["status"] == "fail" and r["cause"]
                and r["cause"]["kind"] == "link-local-missing"]
        assert rows, [r["reason"] for r in doc["results"] if r["status"] == "fail"]
        assert (rows[0]["cause"]["node"], rows[0]["cause"]["port"]) == (s.node, s.interface)
        assert "no fe80::/64 route" in rows[0]["reason"]
        w = CliRunner().invoke(app, ["check", name, "--only", "bgp", "--wait", "30"])
        assert w.exit_code == 0, w.output
        assert "green after" in w.output and f"{s.node}:{s.interface}" in w.output, w.output
    finally:
        runtime.down(name)
