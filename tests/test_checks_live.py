"""Live checks: the healthy ``mini`` lab passes every check; faults injected into a separate
``mini`` lab (one lab, faults in sequence, each restored) are caught by the right check with a
message naming the node, the session/prefix/NIC, expected vs observed and the likely cause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from railab.checks.lab import LiveLab
from railab.checks.runner import run_checks
from tests.conftest import swap_server_cables

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

WRONG_ASN = 4200000099


def _fails(results, **match):
    return [r for r in results if r.status == "fail"
            and all(getattr(r, k) == v for k, v in match.items())]


def _wait(lab: LiveLab, only: str, cond, timeout: float = 30.0):
    """Re-run ``only`` checks until ``cond(results)`` holds; returns the last results."""
    end = time.monotonic() + timeout
    while True:
        res = lab.check(only=only)
        if cond(res) or time.monotonic() > end:
            return res
        time.sleep(0.5)


def _settled(lab: LiveLab, only: str, cond, timeout: float = 30.0):
    """Like _wait, then re-run until two runs in a row fail the same checks: the fabric has
    finished reconverging (BFD, withdrawals), so the snapshot is not mid-change."""
    res = _wait(lab, only, cond, timeout)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.5)
        again = lab.check(only=only)
        if {(r.check, r.name, r.reason) for r in _fails(again)} == {(r.check, r.name, r.reason) for r in _fails(res)}:
            return again
        res = again
    return res


def test_healthy_mini_passes_every_check(mini_lab):
    res = run_checks(mini_lab.spec, mini_lab.executor)
    assert not _fails(res), "\n".join(r.message() for r in _fails(res))
    fams = {r.check for r in res if r.status == "pass"}
    assert fams == {"daemons", "cabling", "policy", "bgp", "routes", "oversub", "hops"}
    # the FIB was read (no skips), and ECMP is 2-wide (2 spines x 1 link) on leaves
    assert not [r for r in res if r.status == "skip"]
    leaf_remote = [r for r in res if r.check == "routes" and r.node == "g1-leaf1"
                   and r.subject == "10.0.1.0/24"]
    assert leaf_remote[0].observed == "RIB 2-way via eth3,eth4; FIB 2-way via eth3,eth4"


@pytest.fixture(scope="module")
def fault_lab(tmp_path_factory):
    """A second ``mini`` lab whose g2-leaf4 frr.conf runs the wrong ASN from the start."""
    from conftest import integration_skip_reason

    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    from railab.testbed.runtime.netns.deploy import NetnsDeployer
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    name = f"ckf{os.getpid()}"
    labdir = generate("mini", tmp_path_factory.mktemp("fault") / name, name=name)
    conf = Path(labdir) / "configs" / "g2-leaf4" / "frr.conf"
    spec = LabSpec.load(labdir)
    planned = spec.node("g2-leaf4").asn
    text = conf.read_text()
    assert f"router bgp {planned}\n" in text
    conf.write_text(text.replace(f"router bgp {planned}\n", f"router bgp {WRONG_ASN}\n"))
    rt = NetnsDeployer()
    from railab.checks.deploy import LabDiffersError, bring_up

    with pytest.raises(LabDiffersError, match="g2-leaf4 runs ASN"):  # issue 13: not "converged"
        bring_up(rt, labdir, timeout=60, keep_on_failure=True)  # kept running for the test
    lab = LiveLab(spec, labdir, "netns", rt.executor(name), owned=True)
    try:
        yield lab
    finally:
        lab.close()


def test_faults_in_sequence(fault_lab):
    lab = fault_lab
    spec = lab.spec

    # 1. wrong ASN in g2-leaf4's frr.conf (remote-as external: sessions come up, ASN is wrong)
    res = lab.check(only="bgp")
    (asn,) = _fails(res, name="g2-leaf4 ASN")
    assert asn.node == "g2-leaf4"
    assert asn.expected == f"AS {spec.node('g2-leaf4').asn}" and asn.observed == f"AS {WRONG_ASN}"
    assert f"router bgp {WRONG_ASN}" in asn.reason
    spine_side = [r for r in _fails(res) if "g2-leaf4" in r.name and "<->" in r.name]
    assert len(spine_side) == 2 and all(f"sees AS {WRONG_ASN}" in r.reason for r in spine_side)
    baseline = {r.name for r in _fails(res)}

    # 2. BGP session shut on g1-leaf2 towards spine1
    sess = next(s for s in spec.bgp_sessions if s.node == "g1-leaf2" and s.peer == "spine1")
    leaf_asn = spec.node("g1-leaf2").asn
    vty = ["vtysh", "-c", "conf t", "-c", f"router bgp {leaf_asn}"]
    assert lab.exec("g1-leaf2", vty + ["-c", f"neighbor {sess.interface} shutdown"]).ok
    res = _wait(lab, "bgp", lambda r: len(_fails(r)) > len(baseline))
    new = [r for r in _fails(res) if r.name not in baseline]
    assert [r.name for r in new] == [f"g1-leaf2:{sess.interface} <-> spine1:{sess.peer_interface}"]
    assert new[0].node == "g1-leaf2" and "Idle (Admin)" in new[0].observed
    assert f"neighbor {sess.interface} shutdown" in new[0].reason
    # structured: the session, its link and the cause (an admin shutdown on g1-leaf2)
    assert (new[0].session.node, new[0].session.interface, new[0].session.peer) == (
        "g1-leaf2", sess.interface, "spine1")
    # session-shut since 2026-12-06 (was session-down): an admin shutdown is a cause no dead
    # daemon can explain, so it is a root of its own (checks/bgp.py, issue 48)
    assert new[0].cause.kind == "session-shut" and new[0].cause.node == "g1-leaf2"
    assert new[0].link == new[0].cause.link == new[0].session.link
    assert lab.exec("g1-leaf2", vty + ["-c", f"no neighbor {sess.interface} shutdown"]).ok
    res = _wait(lab, "bgp,routes", lambda r: {x.name for x in _fails(r)} == baseline)
    assert {x.name for x in _fails(res)} == baseline

    # 3. missing rail subnet announcement: g1-leaf3 withdraws its rail subnet
    rs = next(r for r in spec.rail_subnets if r.leaf == "g1-leaf3")
    af = ["vtysh", "-c", "conf t", "-c", f"router bgp {spec.node('g1-leaf3').asn}",
          "-c", "address-family ipv4 unicast"]
    assert lab.exec("g1-leaf3", af + ["-c", f"no network {rs.prefix}"]).ok
    def withdrawn(r):
        return len(_fails(r, subject=rs.prefix)) == 10 and all(
            x.observed in ("missing from RIB", "not in its BGP table as a local route")
            for x in _fails(r, subject=rs.prefix))
    res = _wait(lab, "routes", withdrawn, timeout=45)
    ann = _fails(res, name=f"g1-leaf3 announces {rs.prefix}")
    assert ann and f"network {rs.prefix}" in ann[0].reason
    remote = [r for r in _fails(res, subject=rs.prefix) if r is not ann[0]]
    assert {r.node for r in remote} == {n.name for n in spec.nodes
                                         if n.role != "server" and n.name != "g1-leaf3"}
    assert all(r.observed == "missing from RIB" for r in remote)
    assert any("g1-leaf3 does not announce" in r.reason for r in remote)
    assert ann[0].cause.kind == "not-announced" and ann[0].cause.node == "g1-leaf3"
    assert all(r.prefix == rs.prefix for r in remote)
    assert lab.exec("g1-leaf3", af + ["-c", f"network {rs.prefix}"]).ok
    res = _wait(lab, "routes", lambda r: not _fails(r))
    assert not _fails(res), [r.message() for r in _fails(res)]

    # 4. two server cables swapped: srv2's NIC 1 and NIC 3 trade places (renamed in its netns)
    from pyroute2 import IPRoute

    ns = lab.netns_of("srv2")
    swap_server_cables(ns)
    try:
        res = lab.check(only="cabling")
        bad = {r.name: r for r in _fails(res)}
        assert set(bad) == {"srv2 NIC 1", "srv2 NIC 3"}
        assert "srv2 NIC 1 is on g1-leaf3:eth2 (rail 3), expected g1-leaf1:eth2 (rail 1)" in bad["srv2 NIC 1"].reason
        assert "srv2 NIC 3 is on g1-leaf1:eth2 (rail 1), expected g1-leaf3:eth2 (rail 3)" in bad["srv2 NIC 3"].reason
        assert all(r.cause.kind == "miswired" and r.node == "srv2" and r.link for r in bad.values())
    finally:
        swap_server_cables(ns)
    res = _wait(lab, "cabling", lambda r: not _fails(r))
    assert not _fails(res)

    # 5. leaf-spine link down
    up = next(lk for lk in spec.links if lk.role == "leaf-spine" and lk.a.node == "g1-leaf1")
    with IPRoute(netns=lab.netns_of("g1-leaf1"), flags=0) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=up.a.interface)[0], state="down")
    res = _settled(lab, "cabling,bgp,routes,oversub",
                   lambda r: _fails(r, check="bgp", node="g1-leaf1") and _fails(r, check="routes", node="spine1"))
    link_name = f"{up.a.node}:{up.a.interface} <-> {up.b.node}:{up.b.interface}"
    (cab,) = _fails(res, check="cabling")
    assert cab.name == link_name and "link down" in cab.reason
    lid = "--".join(sorted((f"{up.a.node}:{up.a.interface}", f"{up.b.node}:{up.b.interface}")))
    assert cab.link == lid and cab.cause.kind == "link-down"
    assert (cab.cause.node, cab.cause.port) == (up.a.node, up.a.interface)  # the admin-down end
    (bgp,) = [r for r in _fails(res, check="bgp") if r.name not in baseline]
    assert bgp.name == link_name and f"link g1-leaf1:{up.a.interface} is down" in bgp.reason
    assert bgp.cause.kind == "link-down" and bgp.cause.link == lid and bgp.session.link == lid
    (ovs,) = _fails(res, check="oversub")
    assert ovs.node == "g1-leaf1" and ovs.expected.startswith("1:1") and ovs.observed.startswith("2:1")
    assert link_name.replace(" <-> ", "-").replace(" ", "") in ovs.reason.replace(" ", "")
    leaf_routes = _fails(res, check="routes", node="g1-leaf1")
    assert leaf_routes and all(f"{up.a.interface} link down" in r.reason or "is Idle" in r.reason
                               for r in leaf_routes)
    # grouping: every failure the cut causes follows from the cabling row (root cause first)
    from typer.testing import CliRunner

    from railab.checks.runner import group_failures
    from railab.cli import app

    groups = {root.name: follow for root, follow in group_failures(res)}
    caused = {r.name for r in _fails(res) if r.name not in baseline} - {link_name}
    assert caused and caused <= {r.name for r in groups[link_name]}, groups.keys()
    cli = CliRunner().invoke(app, ["check", spec.name, "--only", "cabling,bgp,routes,oversub"],
                             env={"COLUMNS": "500"})
    assert cli.exit_code == 1
    flat = " ".join(re.sub(r"[│┃]", " ", cli.output).split())  # table cells wrap: join their lines
    assert f"more failures follow from {link_name}" in flat, cli.output
    every = CliRunner().invoke(app, ["check", spec.name, "--only", "cabling,bgp,routes,oversub",
                                     "--verbose"], env={"COLUMNS": "250"})
    assert "follow from" not in every.output and every.output.count("│ routes ") > len(caused)
    with IPRoute(netns=lab.netns_of("g1-leaf1"), flags=0) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=up.a.interface)[0], state="up")


# ---- a downed server NIC and a dead bgpd (their own mini lab, torn down at the end) -------------
@pytest.fixture(scope="module")
def own_lab():
    """A third ``mini`` lab for the destructive faults below (a NIC down, bgpd killed); the
    last test leaves it broken, so it is brought down with the module."""
    from conftest import integration_skip_reason

    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    lab = LiveLab.bring_up("mini", f"ckd{os.getpid()}", timeout=90)
    try:
        yield lab
    finally:
        lab.close()


def _set_link(lab: LiveLab, node: str, ifname: str, up: bool) -> None:
    from pyroute2 import IPRoute

    with IPRoute(netns=lab.netns_of(node), flags=0) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up" if up else "down")


def test_down_server_nic_fails_its_flows_without_a_traceback(own_lab):
    """`ip link set eth1 down` on srv1: traffic and traceroute name the NIC (no OSError
    traceback, exit 1), flows to it fail naming it too, the other flows pass, and in
    `railab check` the hops rows that use the NIC follow from the cabling `srv1 NIC 1`
    link-down row: one root cause."""
    from typer.testing import CliRunner

    from railab.checks.runner import group_failures
    from railab.cli import app
    from railab.traffic.engine import Engine
    from railab.traffic.patterns import Flow, flows_for, route

    lab = own_lab
    _set_link(lab, "srv1", "eth1", up=False)
    try:
        back = route(lab.spec, Flow(("srv2", 0), ("srv1", 0), size=1024, messages=4, mtu=1024))
        flows = flows_for(lab.spec, "intra-rail") + [back]
        with Engine(lab.spec, lab.netns_of) as eng:
            results = eng.run(flows, timeout=0.3)
        assert results[-1].verdict == "srv1:eth1 is down: lost 4", results[-1].verdict
        touched = [r for r in results if ("srv1", 1) in ((r.flow.src[0], r.flow.src_nic),
                                                         (r.flow.dst[0], r.flow.dst_nic))]
        assert touched and all(not r.ok and r.nic_down == "srv1:eth1" for r in touched)
        assert any(r.verdict == "srv1:eth1 is down: not sent" for r in touched)
        others = [r for r in results if r not in touched]
        assert others and all(r.ok for r in others), [r.verdict for r in others if not r.ok]

        cli = CliRunner().invoke(app, ["traffic", lab.name, "--pattern", "intra-rail"],
                                 env={"COLUMNS": "250"})
        assert cli.exit_code == 1, cli.output
        assert cli.exception is None or isinstance(cli.exception, SystemExit), cli.exception
        assert "srv1:eth1 is down: not sent" in cli.output and "Traceback" not in cli.output
        tr = CliRunner().invoke(app, ["traceroute", lab.name, "srv1:gpu0", "srv3:gpu0"],
                                env={"COLUMNS": "250"})
        assert tr.exit_code == 1, tr.output
        assert tr.exception is None or isinstance(tr.exception, SystemExit), tr.exception
        assert "srv1:eth1 is down: probe not sent" in tr.output

        res = _settled(lab, "cabling,bgp,routes,oversub,hops",
                       lambda r: _fails(r, check="cabling") and _fails(r, check="hops"))
        hops = _fails(res, check="hops")
        assert hops and all("srv1:eth1 is down" in r.reason for r in hops)
        assert not [r for r in hops if r.observed == "engine failed"]
        assert all(r.cause.kind == "link-down" and (r.cause.node, r.cause.port) == ("srv1", "eth1")
                   for r in hops)
        groups = group_failures(res)
        assert [g[0].name for g in groups] == ["srv1 NIC 1"], [g[0].message() for g in groups]
        assert groups[0][0].cause.kind == "link-down"
        assert {r.name for r in hops} <= {r.name for r in groups[0][1]}
    finally:
        _set_link(lab, "srv1", "eth1", up=True)
        # the kernel flushed srv1's table route when eth1 went down (the policy check sees it)
        nic = lab.spec.nic("srv1", 1)
        lab.exec("srv1", ["ip", "route", "replace", "default", "via", str(nic.gateway), "dev", "eth1",
                          "table", str(nic.table)])
    res = _wait(lab, "cabling,policy,hops", lambda r: not _fails(r), timeout=30)
    assert not _fails(res), [r.message() for r in _fails(res)]


def test_dead_bgpd_is_the_one_root_cause(own_lab):
    """kill -9 of g2-leaf4's bgpd: the daemons row (then the bgp daemon-dead row) is the only root cause; the routes
    rows missing g2-leaf4's prefixes elsewhere follow from it (structured cause, not None).
    Runs last: the lab is brought down after it."""
    import signal

    from railab.checks.runner import group_failures, root_causes

    lab = own_lab
    dead = "g2-leaf4"
    gone = {rs.prefix for rs in lab.spec.rail_subnets if rs.leaf == dead}
    os.kill(lab.record.routers[dead].pids["bgpd"], signal.SIGKILL)
    switches = [n.name for n in lab.spec.nodes if n.role != "server" and n.name != dead]
    res = _settled(lab, None, lambda r: len([x for x in _fails(r, check="routes")
                                             if x.prefix in gone and x.node != dead])
                   == len(switches), timeout=60)
    missing = [r for r in _fails(res, check="routes") if r.prefix in gone and r.node != dead]
    assert {r.node for r in missing} == set(switches)
    assert all(r.cause is not None and r.cause.kind == "daemon-dead" and r.cause.node == dead
               for r in _fails(res, check="routes") if r.node != dead), \
        [r.message() for r in _fails(res, check="routes") if r.node != dead]
    groups = group_failures(res)
    assert len(groups) == 1, [g[0].message() for g in groups]
    (root, follow), = groups
    # the daemons row (vtysh show daemons) comes first; the bgp daemon-dead row follows from it
    assert root.check == "daemons" and root.cause.kind == "daemon-dead" and root.cause.node == dead
    assert any(r.check == "bgp" and r.cause.kind == "daemon-dead" for r in follow)
    assert {r.name for r in missing} <= {r.name for r in follow}
    assert [g["cause"]["kind"] for g in root_causes(res)] == ["daemon-dead"]


def _check_proc(lab_name: str) -> tuple[subprocess.Popen, Path]:
    """``railab check LAB`` in a child that touches a marker file just before railab's main():
    a SIGINT that lands while CPython itself starts (importing site, under load) ends the
    interpreter before railab exists (exit 130, nothing printed), which is not what the
    interrupt test is about."""
    marker = Path(tempfile.mkdtemp()) / "started"
    entry = (f"import sys; from railab.__main__ import main; open({str(marker)!r}, 'w').close(); "
             "sys.argv[0] = 'railab'; main()")
    proc = subprocess.Popen([sys.executable, "-c", entry, "check", lab_name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    return proc, marker


@pytest.fixture(scope="module")
def check_seconds(mini_lab) -> float:
    """How long one whole ``railab check`` of the mini lab takes here, from the start of its
    process (s): the interrupt test signals at fractions of it, so it reaches every phase on a
    fast host too (fixed delays of 0.3-2.5 s skipped 2-3 of 4 cases on a host where the check
    takes ~1.3 s)."""
    t0 = time.monotonic()
    proc, _ = _check_proc(mini_lab.name)
    proc.communicate(timeout=120)
    return time.monotonic() - t0


@pytest.mark.parametrize("frac", [0.1, 0.3, 0.5, 0.7])
def test_cli_check_interrupted(mini_lab, check_seconds, frac):
    """Ctrl-C at any point of `railab check` (start-up, vtysh prefetch, netlink reads, the hops
    engine; at fractions of a whole check's time on this host): exit 130, stderr exactly one
    `error: interrupted by SIGINT: ...` line, no traceback, no asyncio noise."""
    import signal

    delay = frac * check_seconds
    t0 = time.monotonic()
    proc, marker = _check_proc(mini_lab.name)
    while not marker.exists() and proc.poll() is None and time.monotonic() - t0 < 30:
        time.sleep(0.01)
    time.sleep(max(0.0, t0 + delay - time.monotonic()))
    if proc.poll() is not None:  # the whole check ran faster than this delay: nothing to interrupt
        proc.communicate()
        pytest.skip(f"railab check finished within {delay:.2f} s")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if "checks passed" in out:  # the run had printed its result: the signal hit its exit
        pytest.skip(f"railab check had printed its result within {delay:.2f} s")
    assert proc.returncode == 130, (proc.returncode, out[-1500:], err[-3000:])
    # one line: the signal, and what the check left (it changes nothing; before the command
    # ran, nothing was done)
    assert re.fullmatch(r"error: interrupted by SIGINT(: nothing was done|: the checks stopped \(they change "
                        r"nothing\)| while starting: nothing was done)\n", err), err[-3000:]
    assert "checks passed" not in out
