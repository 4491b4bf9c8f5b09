"""Live faults (railab.testbed.faults, ``railab fault``): one ``mini`` lab for the module, every
fault kind injected into real namespaces + FRR, ``check`` names the faulty element in its
structured references, and ``heal`` gives a green ``check`` back with nothing leaked (no parking
namespace, no nft table, the fault record gone)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from typer.testing import CliRunner

from railab.checks.lab import LiveLab
from railab.testbed import faults as F
from railab.testbed import state as st
from tests.conftest import PID, integration_skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

NAME = f"flt{PID}"


def _fails(results, **match):
    return [r for r in results if r.status == "fail" and all(getattr(r, k) == v for k, v in match.items())]


def _until(lab: LiveLab, cond, *, only=None, timeout=45.0):
    """Re-run the checks until ``cond(results)`` holds; the last results (assert on them)."""
    end = time.monotonic() + timeout
    while True:
        res = lab.check(only=only)
        if cond(res) or time.monotonic() > end:
            return res
        time.sleep(0.3)


def _no_nft_tables(lab: LiveLab) -> list[str]:
    out = []
    for n in lab.spec.nodes:
        res = subprocess.run(["ip", "netns", "exec", lab.netns_of(n.name), "nft", "list", "tables"],
                             capture_output=True, text=True)
        out += [f"{n.name}: {t}" for t in res.stdout.splitlines() if t.strip()]
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    live = LiveLab.bring_up("mini", name=NAME)
    try:
        yield live
    finally:
        live.close()


@pytest.fixture
def healed(lab):
    """Each case starts green and ends healed, green, with nothing left behind."""
    yield lab
    F.heal(lab.dir)
    assert st.load(lab.name).faults == []
    res = _until(lab, lambda r: not _fails(r), timeout=60)
    assert not _fails(res), [r.message() for r in _fails(res)]
    assert not os.path.exists(f"/run/netns/{F.parking_namespace(lab.name)}")
    assert _no_nft_tables(lab) == []


def _cli(*args):
    from railab.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def test_link_down_via_cli_names_the_admin_down_end(healed):
    lab = healed
    r = _cli("fault", lab.name, "link-down", "g1-leaf1", "spine1")
    assert r.exit_code == 0, r.output
    assert "injected f" in r.output and "admin down g1-leaf1:eth3 (link to spine1:eth1)" in r.output
    listed = _cli("fault", lab.name, "list", "--json")
    (rec,) = json.loads(listed.output)
    assert (rec["kind"], rec["node"], rec["port"], rec["peer_node"]) == ("link-down", "g1-leaf1", "eth3", "spine1")
    res = _until(lab, lambda r: _fails(r, check="bgp"), only="cabling,bgp")
    (cab,) = _fails(res, check="cabling")
    assert cab.link == "g1-leaf1:eth3--spine1:eth1" and cab.cause.kind == "link-down"
    assert (cab.cause.node, cab.cause.port) == ("g1-leaf1", "eth3")
    assert "admin down at g1-leaf1:eth3 (spine1:eth1 sees carrier lost)" in cab.reason
    assert f"injected fault {rec['id']}" in cab.reason
    # bad input: one clear error, exit 2, nothing injected
    # (CliRunner skips railab.cli.main, which turns a UsageError into exit 2)
    from railab.errors import UsageError

    bad = _cli("fault", lab.name, "link-down", "g1-leaf1", "spine1")
    assert isinstance(bad.exception, UsageError) and "already has fault" in str(bad.exception)
    bad = _cli("fault", lab.name, "link-down", "g1-leaf1", "srv4")
    assert isinstance(bad.exception, UsageError) and "no link to srv4" in str(bad.exception)
    assert len(st.load(lab.name).faults) == 1
    healed_out = _cli("fault", lab.name, "heal", "--all")
    assert healed_out.exit_code == 0 and f"healed {rec['id']}" in healed_out.output


def test_server_nic_down_heal_restores_the_policy_route(healed):
    lab = healed
    last = lab.spec.by_role("server")[-1].name  # the last server of the last group
    rec = F.inject(lab.dir, "link-down", last, port="eth4")
    assert (rec.node, rec.port) == (last, "eth4")
    res = lab.check(only="cabling,policy")
    (pol,) = _fails(res, check="policy")
    assert (pol.node, pol.port) == (last, "eth4") and pol.cause.kind == "link-down"
    assert "lost its default route" in pol.reason
    from railab.checks.runner import group_failures

    roots = {root.name: cons for root, cons in group_failures(res)}
    assert set(roots) == {f"{last} NIC 4"} and pol in roots[f"{last} NIC 4"]
    F.heal(lab.dir, rec.id)
    nic = lab.spec.nic(last, 4)
    out = subprocess.run(["ip", "netns", "exec", lab.netns_of(last), "ip", "route", "show", "table",
                          str(nic.table)], capture_output=True, text=True).stdout
    assert f"default via {nic.gateway} dev eth4" in out


def test_link_flap_leaves_a_server_without_its_route_until_healed(healed):
    lab = healed
    rec = F.inject(lab.dir, "link-flap", "srv2", "g1-leaf3", count=2, down_s=0.3, up_s=0.3)
    assert rec.kind == "link-flap" and rec.params["count"] == 2
    res = _until(lab, lambda r: not _fails(r, check="cabling"), only="cabling,policy")
    (pol,) = _fails(res)
    assert (pol.check, pol.node, pol.port) == ("policy", "srv2", "eth3")
    assert pol.cause.kind == "policy-route-missing" and pol.link == "g1-leaf3:eth2--srv2:eth3"


def test_ctrl_c_mid_flap_undoes_the_flap_and_records_nothing(lab):
    """SIGINT while `railab fault LAB link-flap` has the link down: exit 130, the link is up
    again with its server route, no fault is recorded, and policy routing is green at once
    (found by a new-user review: the flap used to stay recorded as done, the link left down)."""
    import signal
    import sys

    entry = "import sys; from railab.__main__ import main; sys.argv[0] = 'railab'; main()"
    proc = subprocess.Popen([sys.executable, "-c", entry, "fault", lab.name, "link-flap", "srv2", "g1-leaf3",
                             "--count", "5", "--down", "2", "--up", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # past the first `down` of a 5 x (2 s down, 2 s up) flap
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert st.load(lab.name).faults == []
    link = lab.exec("srv2", ["ip", "-o", "link", "show", "eth3"])
    assert link.ok and "state UP" in link.stdout, link.stdout
    res = lab.check(only="policy")
    assert not _fails(res), [r.message() for r in _fails(res)]


def test_carrier_loss_parks_the_far_end(healed):
    lab = healed
    rec = F.inject(lab.dir, "carrier-loss", "g2-leaf2", "spine2")
    assert os.path.exists(f"/run/netns/{F.parking_namespace(lab.name)}")
    assert st.ledger()[F.parking_namespace(lab.name)] == lab.name  # `railab down` removes it
    res = lab.check(only="cabling")
    (cab,) = _fails(res)
    assert cab.link == f"g2-leaf2:{rec.port}--spine2:{rec.peer_port}"
    assert f"carrier lost on g2-leaf2:{rec.port}" in cab.reason and "gone from spine2" in cab.reason
    assert (cab.cause.node, cab.cause.port) == ("spine2", rec.peer_port)


def test_cable_pull_and_replug_keep_names_and_macs(healed):
    lab = healed
    mac = subprocess.run(["ip", "netns", "exec", lab.netns_of("srv2"), "cat", "/sys/class/net/eth3/address"],
                         capture_output=True, text=True).stdout.strip()
    rec = F.inject(lab.dir, "cable-pull", "srv2", "g1-leaf3")
    res = lab.check(only="cabling,policy")
    cab = _fails(res, check="cabling")[0]
    assert cab.name == "srv2 NIC 3" and cab.link == "g1-leaf3:eth2--srv2:eth3"
    assert "cable missing: neither srv2:eth3 nor g1-leaf3:eth2 exists" in cab.reason
    r = _cli("fault", lab.name, "re-plug", "srv2", "g1-leaf3")
    assert r.exit_code == 0 and f"healed {rec.id}" in r.output, r.output
    again = subprocess.run(["ip", "netns", "exec", lab.netns_of("srv2"), "cat", "/sys/class/net/eth3/address"],
                           capture_output=True, text=True).stdout.strip()
    assert again == mac


def test_cross_cable_is_a_real_miswire(healed):
    lab = healed
    F.inject(lab.dir, "cross-cable", "srv1:eth1", "srv3:eth1")
    res = lab.check(only="cabling")
    bad = {r.name: r for r in _fails(res)}
    assert set(bad) == {"srv1 NIC 1", "srv3 NIC 1"}
    assert "srv1 NIC 1 is on g2-leaf1:eth1 (rail 1), expected g1-leaf1:eth1 (rail 1)" in bad["srv1 NIC 1"].reason
    assert all(r.cause.kind == "miswired" for r in bad.values())
    # the NICs kept their addresses: a frame to the planned leaf no longer arrives there
    assert lab.hops("srv1:gpu0", "srv2:gpu0") is None


def test_session_shut(healed):
    lab = healed
    rec = F.inject(lab.dir, "session-shut", "g1-leaf2", "spine1")
    # the session goes Idle (Admin) at once (the wait used to be the wrong-ASN test's
    # "Bad Peer AS", which a shutdown never sends: it ran out its 45 s every time)
    res = _until(lab, lambda r: any("Idle (Admin)" in x.observed for x in _fails(r, check="bgp")),
                 only="bgp")
    (row,) = _fails(res, check="bgp")
    assert (row.node, row.port) == ("g1-leaf2", rec.port) and row.cause.kind == "session-shut"
    assert "Idle (Admin)" in row.observed


def test_wrong_asn_pushed_live(healed):
    lab = healed
    rec = F.inject(lab.dir, "wrong-asn", "g1-leaf2", "spine2", asn=4199999998)
    # the session fails at once; the NOTIFICATION that names the cause follows the next OPEN
    res = _until(lab, lambda r: any("Bad Peer AS" in x.reason for x in _fails(r, check="bgp")), only="bgp")
    (row,) = _fails(res, check="bgp")
    assert (row.node, row.port) == ("g1-leaf2", rec.port)
    assert "remote AS 4199999998" in row.observed
    assert "Bad Peer AS" in row.reason


@pytest.mark.parametrize("daemon", ["bgpd", "zebra", "bfdd"])
def test_daemon_kill(healed, daemon):
    lab = healed
    F.inject(lab.dir, "daemon-kill", "spine2", daemon=daemon)
    res = lab.check(only="daemons")
    (row,) = _fails(res)
    assert (row.node, row.cause.kind, row.cause.daemon) == ("spine2", "daemon-dead", daemon)
    st_ = _cli("status", lab.name)
    assert st_.exit_code == 1 and f"spine2:{daemon}" in st_.output
    if daemon != "bgpd":
        # zebra dead: the kernel keeps forwarding on the routes it has. bfdd dead: FRR resets the
        # BFD-tracked sessions once (measured: ~4 s without BGP routes on spine2), then they come
        # back without BFD and forwarding resumes
        end = time.monotonic() + (1 if daemon == "zebra" else 20)
        while True:
            fib = subprocess.run(["nsenter", f"--net=/run/netns/{lab.netns_of('spine2')}", "ip", "route"],
                                 capture_output=True, text=True).stdout
            if "proto bgp" in fib or time.monotonic() > end:
                break
            time.sleep(0.5)
        assert "proto bgp" in fib
        assert lab.hops("srv1:gpu0", "srv3:gpu0") == 3


def test_node_off_and_restart(healed):
    lab = healed
    F.inject(lab.dir, "node-off", "g2-leaf2")
    res = lab.check(only="daemons,cabling")
    (dmn,) = _fails(res, check="daemons")
    assert dmn.node == "g2-leaf2" and "runs no FRR daemon at all" in dmn.reason
    down = {r.link for r in _fails(res, check="cabling")}
    assert len(down) == 4
    assert all("g2-leaf2" in lk for lk in down)
    r = _cli("restart", lab.name, "g2-leaf2")
    assert r.exit_code == 0, r.output
    assert st.load(lab.name).faults == []  # restart healed the node-off record
    assert "restarted g2-leaf2: started zebra" in r.output and "healed f" in r.output, r.output
    # a healthy node: nothing restarted, and it says so (it printed "restarted" before)
    r = _cli("restart", lab.name, "g1-leaf1")
    assert r.exit_code == 0, r.output
    assert "g1-leaf1 needed no restart" in r.output and "restarted" not in r.output, r.output


def test_grey_loss_roce_only(healed):
    lab = healed
    rec = F.inject(lab.dir, "grey-loss", "g1-leaf1", "srv2", roce_only=True)
    assert rec.params == {"percent": 100.0, "roce_only": True}
    res = lab.check(only="cabling,bgp,hops")
    (flt,) = [r for r in _fails(res) if r.check == "cabling"]
    assert (flt.node, flt.port, flt.link) == ("g1-leaf1", "eth2", "g1-leaf1:eth2--srv2:eth1")
    assert "udp dport 4791" in flt.observed and flt.cause.kind == "port-filter"
    assert not _fails(res, check="bgp")  # BGP is up: a grey failure
    assert _fails(res, check="hops")  # RoCE to srv2 is dropped


def test_grey_loss_percent(healed):
    lab = healed
    F.inject(lab.dir, "grey-loss", "g1-leaf2", "spine1", percent=5)
    (flt,) = _fails(lab.check(only="cabling"))
    assert flt.port == "eth3" and "5 % at random" in flt.observed


def test_mtu_mismatch(healed):
    lab = healed
    rec = F.inject(lab.dir, "mtu", "srv4", "g2-leaf4", mtu=1500)
    res = lab.check(only="cabling,bgp")
    (row,) = _fails(res)
    assert (row.name, row.node, row.port) == (f"srv4:{rec.port} MTU", "srv4", rec.port)
    assert (row.expected, row.observed) == ("MTU 9100", "MTU 1500")


def test_mtu_fault_is_one_root_cause_in_traffic_both_directions(healed):
    """Issue 31: a server NIC's MTU cut to 1500 under 4 KiB RoCE packets. The flows it sends
    are refused by the kernel (EMSGSIZE: no traceback), the flows towards it lose their packets
    at the NIC; traffic --json exits 1, parses, and names one root cause, the same structured
    cause check gives (kind mtu-mismatch on the NIC's link)."""
    lab = healed
    r = _cli("fault", lab.name, "mtu", "srv2:eth1", "--mtu", "1500")
    assert r.exit_code == 0, r.output
    link = "g1-leaf1:eth2--srv2:eth1"
    for sel in (["--pattern", "intra-rail"], ["--src", "srv2", "--dst", "srv3"]):
        t = _cli("traffic", lab.name, *sel, "--size", "65536", "--mtu", "4096", "--json")
        assert t.exit_code == 1, t.output  # a failed flow, not a crash (exit 1 from typer.Exit)
        assert t.exception is None or isinstance(t.exception, SystemExit), repr(t.exception)
        doc = json.loads(t.output)
        assert len(doc["root_causes"]) == 1, doc["root_causes"]
        cause = doc["root_causes"][0]["cause"]
        assert cause == {"kind": "mtu-mismatch", "node": "srv2", "port": "eth1", "link": link}, cause
        bad = [f for f in doc["flows"] if not f["ok"]]
        assert bad and all(f["mtu_exceeded"] == "srv2:eth1" for f in bad)
    res = _until(lab, lambda r: _fails(r, check="cabling"), only="cabling")
    assert any(c.cause and c.cause.model_dump(exclude_none=True) == cause for c in _fails(res, check="cabling"))


def test_bad_input_changes_nothing(lab):
    from railab.errors import UsageError

    for kind, a, b, kw in (("meltdown", "g1-leaf1", "spine1", {}), ("link-down", "nosuch", "spine1", {}),
                           ("grey-loss", "g1-leaf1", "spine1", {}), ("mtu", "srv1", "g1-leaf1", {"mtu": 9100}),
                           ("daemon-kill", "g1-leaf1", None, {"daemon": "ospfd"}),
                           ("session-shut", "srv1", "g1-leaf1", {})):
        with pytest.raises(UsageError):
            F.inject(lab.dir, kind, a, b, **kw)
    assert st.load(lab.name).faults == []
    with pytest.raises(UsageError, match="no fault"):
        F.heal(lab.dir, "f999")
    with pytest.raises(UsageError, match=r"--mtu 20 is out of range: give 68\.\.65535"):
        F.inject(lab.dir, "mtu", "srv4", "g2-leaf4", mtu=20)
    with pytest.raises(UsageError, match=r"give --mtu N"):
        F.inject(lab.dir, "mtu", "srv4", "g2-leaf4")
    assert st.load(lab.name).faults == []


def test_zz_down_removes_what_faults_made(lab):
    """Last in the module: `railab down` with faults still injected removes the parking
    namespace (namespace ledger) and the nft tables (inside the lab's namespaces)."""
    from railab.testbed.runtime.netns import NetnsRuntime

    F.inject(lab.dir, "carrier-loss", "g1-leaf4", "spine1")
    F.inject(lab.dir, "grey-loss", "g1-leaf1", "srv1", percent=50)
    park = F.parking_namespace(lab.name)
    assert os.path.exists(f"/run/netns/{park}")
    NetnsRuntime().down(lab.name)
    assert not os.path.exists(f"/run/netns/{park}") and park not in st.ledger()
    assert not [n for n in os.listdir("/run/netns") if lab.name in n]

