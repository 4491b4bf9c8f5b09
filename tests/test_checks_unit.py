"""Unit tests of the checks over FRR 8.4 JSON captured from a healthy ``mini`` lab
(tests/data/frr/mini_snapshot.json, trimmed to the fields the checks read) and edited copies of it;
plus the netlink cabling reader against this test's own small namespaces (root only)."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.checks.base import Observer
from railab.checks.bgp import check_bgp
from railab.checks.frr import CMD_BGP_TABLE, CMD_RIB, CMD_SUMMARY, fib_nexthops
from railab.checks.junit import to_junit
from railab.checks.oversub import parse_ratio
from railab.checks.routes import check_routes
from railab.checks.runner import parse_only, run_checks, summary
from railab.testbed.executor import ExecResult, Executor
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec

DATA = Path(__file__).parent / "data" / "frr"


class RecordedExecutor(Executor):
    """Answers vtysh with recorded FRR JSON ({node: {command: doc}}); other commands fail."""

    def __init__(self, snapshot: dict) -> None:
        self.snap = snapshot

    def run(self, node, argv, *, timeout=30.0):
        if argv[:2] != ["vtysh", "-c"]:
            return ExecResult(127, "", "not recorded")
        cmd = argv[2]
        if cmd.startswith("show bgp neighbors"):
            return ExecResult(0, json.dumps(self.snap.get(node, {}).get(cmd, {})), "")
        if node not in self.snap:
            return ExecResult(1, "", f"{node}: vtysh: failed to connect to any daemons")
        prefix = re.fullmatch(r"show bgp vrf default ipv4 unicast (\S+/\d+) json", cmd)
        if prefix:  # one prefix of the recorded BGP table, in FRR 8.4's per-prefix JSON shape
            return ExecResult(0, json.dumps(_prefix_doc(self.snap[node][CMD_BGP_TABLE], prefix[1])), "")
        return ExecResult(0, json.dumps(self.snap[node][cmd]), "")


def _prefix_doc(table: dict, prefix: str) -> dict:
    """``show bgp vrf default ipv4 unicast PREFIX json`` as FRR 8.4 prints it, for the paths of
    ``prefix`` in a recorded ``show bgp vrf default ipv4 unicast json`` table ({} when absent)."""
    paths = (table.get("routes") or {}).get(prefix)
    if not paths:
        return {}
    return {"prefix": prefix, "paths": [
        {"aspath": {"string": p["path"] or "Local", "length": len(p["path"].split())},
         "sourced": p.get("peerId") == "(unspec)" or None,
         "peer": {"peerId": "0.0.0.0" if p.get("peerId") == "(unspec)" else p.get("peerId")}}
        for p in paths]}


SUMMARY, RIB, BGP = CMD_SUMMARY, CMD_RIB, CMD_BGP_TABLE


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> LabSpec:
    return LabSpec.load(generate("mini", tmp_path_factory.mktemp("g") / "lab", name="ck-mini"))


@pytest.fixture
def snap() -> dict:
    return json.loads((DATA / "mini_snapshot.json").read_text())


def _run(spec, snap, only):
    # netns_of -> None: no netlink (FIB, cabling) in unit tests
    return run_checks(spec, RecordedExecutor(snap), only=only, netns_of=lambda n: None)


def _fails(results):
    return [r for r in results if r.status == "fail"]


def test_healthy_snapshot_passes_bgp_and_routes(spec, snap):
    res = _run(spec, snap, "bgp,routes")
    assert not _fails(res), [r.message() for r in _fails(res)]
    s = summary(res)
    # 16 sessions + 10 switch ASNs; 8 announcements
    assert s["bgp"]["pass"] == 16 + 10
    assert sum(r.name.endswith("kernel FIB") for r in res if r.status == "skip") == 10


def test_admin_shutdown_names_node_session_and_fix(spec, snap):
    peer = snap["g1-leaf2"][SUMMARY]["peers"]["eth3"]
    peer.update(state="Idle (Admin)", peerState="Admin")
    snap["spine1"][SUMMARY]["peers"]["eth2"].update(state="Idle", peerState="OK")
    (bad,) = _fails(check_bgp(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    assert bad.node == "g1-leaf2" and bad.name == "g1-leaf2:eth3 <-> spine1:eth2"
    assert "Idle (Admin)" in bad.observed and "Established" in bad.expected
    assert "neighbor eth3 shutdown" in bad.reason


def test_wrong_local_asn_and_remote_view(spec, snap):
    snap["g2-leaf4"][SUMMARY]["as"] = 4200000099
    for sp in ("spine1", "spine2"):
        for p in snap[sp][SUMMARY]["peers"].values():
            if p["remoteAs"] == 4200000008:
                p["remoteAs"] = 4200000099
    bad = _fails(check_bgp(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    asn = [r for r in bad if r.name == "g2-leaf4 ASN"]
    assert asn and asn[0].expected == "AS 4200000008" and asn[0].observed == "AS 4200000099"
    assert "router bgp 4200000099" in asn[0].reason
    sess = [r for r in bad if "<->" in r.name]
    assert len(sess) == 2 and all(r.node.startswith("spine") for r in sess)
    assert all("sees AS 4200000099" in r.reason for r in sess)


def test_bad_peer_as_notification_is_the_cause(spec, snap):
    snap["g1-leaf1"][SUMMARY]["peers"]["eth3"].update(state="Active")
    snap["spine1"][SUMMARY]["peers"]["eth1"].update(state="Idle")
    nb = json.loads((DATA / "bgp_neighbors_peer_asn_mismatch.json").read_text())
    snap["g1-leaf1"]["show bgp neighbors eth3 json"] = {"eth3": nb["eth2"]}
    (bad,) = _fails(check_bgp(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    assert "Bad Peer AS" in bad.reason


def test_missing_and_unexpected_neighbors(spec, snap):
    del snap["g1-leaf1"][SUMMARY]["peers"]["eth4"]
    snap["spine2"][SUMMARY]["peers"]["eth9"] = {"state": "Active", "remoteAs": 0}
    bad = _fails(check_bgp(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    assert {r.name for r in bad} == {"g1-leaf1:eth4 <-> spine2:eth1", "spine2:eth9 unexpected"}
    assert "no BGP neighbor eth4" in [r for r in bad if "eth4" in r.name][0].reason


def test_unreachable_bgpd_is_a_failure_not_a_crash(spec, snap):
    del snap["spine2"]
    bad = _fails(_run(spec, snap, "bgp"))
    assert any(r.name == "spine2 ASN" and "bgpd" in r.reason for r in bad)


def test_missing_announcement_is_traced_to_the_origin(spec, snap):
    prefix = "10.0.2.0/24"  # g1-leaf3's rail subnet
    assert [rs.leaf for rs in spec.rail_subnets if rs.prefix == prefix] == ["g1-leaf3"]
    del snap["g1-leaf3"][BGP]["routes"][prefix]
    for node, doc in snap.items():
        if node != "g1-leaf3":
            doc[RIB].pop(prefix, None)
    bad = _fails(check_routes(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    ann = [r for r in bad if r.name == f"g1-leaf3 announces {prefix}"]
    assert ann and f"network {prefix}" in ann[0].reason
    remote = [r for r in bad if r.subject == prefix and r is not ann[0]]
    assert len(remote) == 7 + 2  # every other leaf and both spines
    assert all(r.observed == "missing from RIB" for r in remote)
    assert all("g1-leaf3 does not announce" in r.reason for r in remote if r.node.startswith("g"))


def test_ecmp_shortfall_names_the_missing_interface(spec, snap):
    entry = snap["g2-leaf2"][RIB]["10.0.0.0/24"][0]
    entry["nexthops"] = [h for h in entry["nexthops"] if h["interfaceName"] != "eth4"]
    snap["g2-leaf2"][SUMMARY]["peers"]["eth4"]["state"] = "Connect"
    (bad,) = _fails(check_routes(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    assert bad.node == "g2-leaf2" and bad.subject == "10.0.0.0/24"
    assert bad.expected == "2-way ECMP via eth3,eth4" and bad.observed == "RIB 1-way via eth3"
    assert "eth4" in bad.reason and "Connect" in bad.reason


def test_captured_fault_shapes_parse(spec):
    """Shapes captured from real FRR 8.4 (2-leaf experiment): Admin shutdown and link down."""
    shut = json.loads((DATA / "bgp_summary_shutdown.json").read_text())["ipv4Unicast"]["peers"]["eth2"]
    assert (shut["state"], shut["peerState"]) == ("Idle (Admin)", "Admin")
    down = json.loads((DATA / "ip_route_linkdown.json").read_text())["10.9.0.0/24"][0]
    assert fib_nexthops(down) == ["eth2"]
    healthy = json.loads((DATA / "ip_route_healthy.json").read_text())["10.9.0.0/24"][0]
    assert fib_nexthops(healthy) == ["eth1", "eth2"]


def test_parse_ratio_and_only():
    assert parse_ratio("1:1") == 1 and parse_ratio("3:1") == 3 and float(parse_ratio("1.5:1")) == 1.5
    with pytest.raises(ValueError, match="DOWN:UP"):
        parse_ratio("fast")
    assert parse_only("routes,bgp") == ["bgp", "routes"]
    assert parse_only(None) == ["daemons", "cabling", "pfc", "speed", "policy", "bgp", "routes", "oversub",
                                "hops"]
    with pytest.raises(ValueError, match="unknown check ospf"):
        parse_only("bgp,ospf")


def test_junit_is_valid_and_counts(spec, snap):
    snap["g1-leaf2"][SUMMARY]["peers"]["eth3"].update(state="Idle (Admin)", peerState="Admin")
    res = _run(spec, snap, "bgp,routes")
    root = ET.fromstring(to_junit(res, "ck-mini"))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"railab.bgp", "railab.routes"}
    fails = root.findall(".//testcase/failure")
    assert len(fails) == int(root.get("failures")) == len(_fails(res)) >= 1
    assert int(suites["railab.bgp"].get("tests")) == len(suites["railab.bgp"].findall("testcase"))
    assert all(tc.get("classname").startswith("railab.ck-mini.") for tc in root.iter("testcase"))


def test_cli_usage_errors():
    from railab.cli import app

    r = CliRunner().invoke(app, ["check", "whatever", "--only", "ospf"])
    assert r.exit_code == 2 and "unknown check ospf" in r.output


# ---- netlink cabling reader on this test's own namespaces ---------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")
def test_cabling_reads_live_veth_peers_and_reports_a_swap(spec):
    from pyroute2 import IPRoute, netns

    from railab.checks.cabling import check_cabling

    tag = f"ckc{os.getpid()}"
    nodes = {"srv1": f"{tag}-srv1", "g1-leaf1": f"{tag}-l1", "g1-leaf2": f"{tag}-l2"}
    made = []
    try:
        for ns in nodes.values():
            netns.create(ns)
            made.append(ns)
        # srv1 NIC1 -> g1-leaf2:eth1 (wrong: rail 2), srv1 NIC2 -> g1-leaf1:eth1 (wrong: rail 1)
        with IPRoute() as ipr:
            for i, (srv_if, leaf, leaf_if) in enumerate(
                    (("eth1", "g1-leaf2", "eth1"), ("eth2", "g1-leaf1", "eth1"))):
                tmp_a, tmp_b = f"{tag}a{i}", f"{tag}b{i}"
                ipr.link("add", ifname=tmp_a, kind="veth", peer={"ifname": tmp_b, "net_ns_fd": nodes[leaf]})
                ipr.link("set", index=ipr.link_lookup(ifname=tmp_a)[0], net_ns_fd=nodes["srv1"])
                for node, old, new in (("srv1", tmp_a, srv_if), (leaf, tmp_b, leaf_if)):
                    with IPRoute(netns=nodes[node], flags=0) as n:
                        n.link("set", index=n.link_lookup(ifname=old)[0], ifname=new, state="up")
        obs = Observer(spec, None, lambda n: nodes.get(n))
        assert obs.peer("srv1", "eth1") == ("g1-leaf2", "eth1")
        assert obs.peer("g1-leaf1", "eth1") == ("srv1", "eth2")
        res = {r.name: r for r in check_cabling(obs)}
        nic1, nic2 = res["srv1 NIC 1"], res["srv1 NIC 2"]
        assert nic1.status == nic2.status == "fail"
        assert "srv1 NIC 1 is on g1-leaf2:eth1 (rail 2), expected g1-leaf1:eth1 (rail 1)" in nic1.reason
        assert "srv1 NIC 2 is on g1-leaf1:eth1 (rail 1), expected g1-leaf2:eth1 (rail 2)" in nic2.reason
        # a crossed pair is one root cause (issue 31), named after the first NIC of the pair
        assert nic1.cause == nic2.cause
        assert (nic1.cause.kind, nic1.cause.node, nic1.cause.port) == ("miswired", "srv1", "eth1")
        from railab.checks.runner import group_failures

        assert len(group_failures([nic1, nic2])) == 1
        # nodes without a namespace are skipped, not failed
        assert res["srv2 NIC 1"].status == "skip"
    finally:
        for ns in made:
            netns.remove(ns)
    assert not [n for n in os.listdir("/run/netns") if n.startswith(tag)]


class DeadBgpdExecutor(RecordedExecutor):
    """The recorded snapshot, except that vtysh on ``dead`` answers like FRR 8.4 when bgpd has
    been killed: exit 1, "bgpd is not running" (zebra still answers)."""

    def __init__(self, snapshot: dict, dead: str) -> None:
        super().__init__(snapshot)
        self.dead = dead

    def run(self, node, argv, *, timeout=30.0):
        if node == self.dead and argv[:2] == ["vtysh", "-c"] and "bgp" in argv[2]:
            return ExecResult(1, "", "bgpd is not running")
        return super().run(node, argv, timeout=timeout)


def test_dead_bgpd_is_one_clean_sentence_and_groups_its_consequences(spec, snap):
    from railab.checks.runner import group_failures

    res = run_checks(spec, DeadBgpdExecutor(snap, "g1-leaf2"), only="bgp,routes",
                     netns_of=lambda n: None)
    (asn,) = _fails([r for r in res if r.name == "g1-leaf2 ASN"])
    assert asn.reason == ("bgpd is not running on g1-leaf2 (`show bgp vrf default ipv4 unicast "
                          "summary json` failed): restart the lab (railab down, then railab up)")
    for r in _fails(res):
        text = r.reason or ""
        assert text.count("not running") <= 1 and "; is bgpd running?" not in text.replace(
            "cannot read", ""), text
        assert text.count("g1-leaf2: `") == 0, text  # no repeated "NODE: `cmd`:" prefixes
    from railab.checks.base import Cause

    assert asn.cause == Cause(kind="daemon-dead", node="g1-leaf2", daemon="bgpd")
    groups = group_failures(res)
    assert groups[0][0].name == "g1-leaf2 ASN"
    follow = groups[0][1]
    assert {r.name for r in follow} >= {f"g1-leaf2:{s.interface} <-> {s.peer}:{s.peer_interface}"
                                        for s in spec.bgp_sessions if s.node == "g1-leaf2"}
    assert any(r.check == "routes" and r.node == "g1-leaf2" for r in follow)
    assert len(groups) == 1, [g[0].message() for g in groups[1:]]
    assert sum(1 + len(c) for _, c in groups) == len(_fails(res))  # every failure kept once



def test_cut_link_failures_group_under_the_link():
    """34 failing rows captured (``railab check --json``) from a live mini lab with one
    leaf-spine link down: the cabling row is the root cause and the other 33 (BGP session, routes
    on every leaf and spine2, oversubscription) follow from it, by their structured fields."""
    from railab.checks.base import CheckResult
    from railab.checks.runner import group_failures, root_causes

    doc = json.loads((Path(__file__).parent / "data" / "checks" / "cut_leaf_spine_link.json")
                     .read_text())
    res = [CheckResult(**r) for r in doc["results"]]
    assert len(res) == 34
    ((root, follow),) = group_failures(res)
    assert (root.check, root.name) == ("cabling", "g1-leaf1:eth4 <-> spine2:eth1")
    assert len(follow) == 33
    assert {r.check for r in follow} == {"bgp", "routes", "oversub"}
    # the root is named by fields: the link and a link-down cause on it
    link = "g1-leaf1:eth4--spine2:eth1"
    assert root.link == link and root.cause.kind == "link-down" and root.cause.link == link
    (bgp,) = [r for r in follow if r.check == "bgp"]
    assert bgp.session.node == "g1-leaf1" and bgp.session.interface == "eth4"
    assert bgp.session.link == link and bgp.cause.link == link
    upstream = [r for r in follow if r.cause.kind == "upstream"]
    assert upstream and {r.cause.node for r in upstream} == {"spine2"}
    assert all(r.prefix == r.cause.prefix for r in upstream)
    # the recorded JSON carried the same grouping
    assert [g["root"] for g in doc["root_causes"]] == [root.name]
    assert len(doc["root_causes"][0]["explains"]) == 33
    # an unrelated failure stays a root of its own, after the link
    other = CheckResult(check="routes", name="g2-leaf3 10.9.9.0/24", status="fail",
                        node="g2-leaf3", subject="10.9.9.0/24", reason="nothing on g2-leaf3 installs it")
    groups = group_failures(res + [other])
    assert [g[0].name for g in groups] == ["g1-leaf1:eth4 <-> spine2:eth1", "g2-leaf3 10.9.9.0/24"]
    assert [g["root"] for g in root_causes(res + [other])] == [g[0].name for g in groups]


def test_grouping_reads_fields_not_message_text():
    """Rows whose text names nothing in common still group by their causes; rows whose text
    names the link but whose cause is elsewhere do not."""
    from railab.checks.base import Cause, CheckResult
    from railab.checks.runner import group_failures

    link = "a1:eth1--s1:eth1"
    root = CheckResult(check="cabling", name="X", status="fail", node="a1", link=link,
                       cause=Cause(kind="link-down", node="a1", port="eth1", link=link))
    follows = CheckResult(check="routes", name="Y", status="fail", node="b7", prefix="10.0.0.0/24",
                          cause=Cause(kind="session-down", node="a1", port="eth1", link=link))
    upstream = CheckResult(check="routes", name="Z", status="fail", node="c3", prefix="10.0.0.0/24",
                           cause=Cause(kind="upstream", node="b7", prefix="10.0.0.0/24"))
    liar = CheckResult(check="routes", name="a1:eth1 <-> s1:eth1", status="fail", node="d4",
                       reason=f"see s1's rows: {link} a1:eth1", observed="link a1:eth1 is down")
    groups = group_failures([root, follows, upstream, liar])
    assert [(g[0].name, [c.name for c in g[1]]) for g in groups] == [("X", ["Y", "Z"]),
                                                                     ("a1:eth1 <-> s1:eth1", [])]


def test_a_dead_node_is_one_root_cause(spec):
    """Issue 31: a spine powered off (daemons dead, its links down at its end), a spine whose
    bfdd died (its sessions reset) and a leaf whose staticd died (its aggregate not announced)
    are each one root cause: its node-down cabling rows (the first the root, issue 48), its
    dead-daemon row, sessions on links to it and prefixes missing upstream at it; a cable pulled
    or an nft filter at a node whose daemon died is a root of its own (a dead daemon takes no
    cable out); the cabling family files a server whose every link is down at its end under one
    ``node-down`` cause."""
    from railab.checks.base import Cause, CheckResult
    from railab.checks.cabling import _node_down
    from railab.checks.runner import group_failures

    def row(check, name, **cause):
        return CheckResult(check=check, name=name, status="fail", node=cause.get("node"),
                           cause=Cause(**cause))

    dead = row("daemons", "spine1 daemons", kind="daemon-dead", node="spine1", daemon="zebra")
    # powered off: the cabling family names every link of the spine down at its end node-down
    links = [row("cabling", f"g1-leaf{i}:eth3 <-> spine1:eth{i}", kind="node-down", node="spine1")
             for i in (1, 2)]
    session = row("bgp", "g1-leaf3:eth3 <-> spine1:eth3", kind="session-down",
                  link="g1-leaf3:eth3--spine1:eth3")
    upstream = row("routes", "g1-leaf1 10.0.6.0/24", kind="upstream", node="spine1",
                   prefix="10.0.6.0/24")
    ((root, follow),) = group_failures([dead, *links, session, upstream])
    assert root is links[0] and len(follow) == 4 and dead in follow
    # issue 48: a cable pulled at a spine whose zebra died is not the daemon's doing (a dead
    # daemon takes no cable out): two roots, the cabling row its own
    pulled = row("cabling", "g2-leaf2:eth4 <-> spine1:eth6", kind="link-down", node="spine1",
                 port="eth6", link="g2-leaf2:eth4--spine1:eth6")
    filt = row("cabling", "spine1:eth5 egress filter", kind="port-filter", node="spine1", port="eth5",
               link="g2-leaf1:eth3--spine1:eth5")
    groups = group_failures([dead, pulled, filt, session])
    assert [(g[0].name, [c.name for c in g[1]]) for g in groups] == [
        ("spine1 daemons", ["g1-leaf3:eth3 <-> spine1:eth3"]), ("g2-leaf2:eth4 <-> spine1:eth6", []),
        ("spine1:eth5 egress filter", [])]
    # a server powered off: every link down at its end is one node-down cause
    srv4 = [CheckResult(check="cabling", name=f"srv4 NIC {n.nic}", status="fail", node="srv4",
                        link=f"{n.leaf}:{n.leaf_port}--srv4:{n.interface}",
                        cause=Cause(kind="link-down", node="srv4", port=n.interface,
                                    link=f"{n.leaf}:{n.leaf_port}--srv4:{n.interface}"))
            for n in spec.nics_of("srv4")]
    rows = _node_down(spec, srv4)
    assert {r.cause for r in rows} == {Cause(kind="node-down", node="srv4")}
    assert len(group_failures(rows)) == 1
    assert _node_down(spec, srv4[:2]) == srv4[:2]  # two of four links down: links, not the node
    # issue 48: g1-leaf2 and srv2 both powered off; their shared link is admin down at both
    # ends and its row's cause names srv2: g1-leaf2 is still node-down (all 4 links down at its end)
    leaf = []
    for port, peer, peer_port in spec.links_of("g1-leaf2"):
        end = (peer, peer_port) if peer == "srv2" else ("g1-leaf2", port)
        lid = "--".join(sorted([f"g1-leaf2:{port}", f"{peer}:{peer_port}"]))
        leaf.append(CheckResult(check="cabling", name=f"{peer} {peer_port}", status="fail",
                                node=end[0], link=lid,
                                cause=Cause(kind="link-down", node=end[0], port=end[1], link=lid)))
    admin = {r.name: {"g1-leaf2", "srv2"} if r.name.startswith("srv2 ") else {"g1-leaf2"} for r in leaf}
    assert {r.cause.node for r in leaf} == {"g1-leaf2", "srv2"} and len(leaf) == 4
    assert {r.cause for r in _node_down(spec, leaf)} == {r.cause for r in leaf}  # without the ends
    assert {r.cause for r in _node_down(spec, leaf, admin)} == {Cause(kind="node-down", node="g1-leaf2")}


def test_a_powered_off_switch_is_named_node_down_not_a_dead_daemon():
    """A review found node-off on a switch reported as "zebra is dead": when a dead daemon's
    followers include its node down (every link down at its end), the node is the root."""
    from railab.checks.base import Cause, CheckResult
    from railab.checks.runner import group_failures, root_causes

    def row(check, name, **cause):
        return CheckResult(check=check, name=name, status="fail", node=cause.get("node"),
                           cause=Cause(**cause))

    dead = row("daemons", "g2-leaf2 daemons", kind="daemon-dead", node="g2-leaf2", daemon="zebra")
    off = [row("cabling", f"g2-leaf2 eth{i}", kind="node-down", node="g2-leaf2") for i in (1, 2)]
    other = row("routes", "g1-leaf1 10.0.9.0/24", kind="not-announced", node="g1-leaf9",
                prefix="10.0.9.0/24")
    groups = group_failures([dead, *off, other])
    assert [(g[0].name, [c.name for c in g[1]]) for g in groups] == [
        ("g2-leaf2 eth1", ["g2-leaf2 daemons", "g2-leaf2 eth2"]), ("g1-leaf1 10.0.9.0/24", [])]
    assert root_causes([dead, *off])[0]["cause"] == {"kind": "node-down", "node": "g2-leaf2"}


def test_structured_references_per_family(spec, snap):
    """bgp and routes rows carry node/port/link/session/prefix and a cause (one golden message
    per family is pinned by the other tests)."""
    snap["g1-leaf2"][SUMMARY]["peers"]["eth3"].update(state="Idle (Admin)", peerState="Admin")
    snap["spine1"][SUMMARY]["peers"]["eth2"].update(state="Idle", peerState="OK")
    entry = snap["g1-leaf2"][RIB]["10.0.0.0/24"][0]
    entry["nexthops"] = [h for h in entry["nexthops"] if h["interfaceName"] != "eth3"]
    res = _run(spec, snap, "bgp,routes")
    (sess,) = _fails([r for r in res if r.check == "bgp"])
    assert (sess.node, sess.port, sess.link) == ("g1-leaf2", "eth3", "g1-leaf2:eth3--spine1:eth2")
    assert sess.session.model_dump() == {"node": "g1-leaf2", "interface": "eth3", "peer": "spine1",
                                         "peer_interface": "eth2"}
    assert sess.cause.kind == "session-shut" and sess.cause.link == sess.link  # its own end shut it
    from railab.checks.base import CAUSE_KINDS

    assert {r.cause.kind for r in _fails(res)} <= set(CAUSE_KINDS)
    route = next(r for r in _fails(res) if r.name == "g1-leaf2 10.0.0.0/24")
    assert (route.prefix, route.port, route.link) == ("10.0.0.0/24", "eth3", sess.link)
    assert route.cause.kind == "session-down" and route.cause.link == sess.link
    assert route.refs()["prefix"] == "10.0.0.0/24"
    from railab.checks.runner import group_failures

    groups = group_failures(res)
    assert groups[0][0] is sess and route in groups[0][1]
    passing = next(r for r in res if r.check == "routes" and r.status == "pass")
    assert passing.prefix == passing.subject and passing.node


def test_wrong_asn_groups_by_cause(spec, snap):
    from railab.checks.runner import group_failures

    snap["g2-leaf4"][SUMMARY]["as"] = 4200000099
    for sp in ("spine1", "spine2"):
        for p in snap[sp][SUMMARY]["peers"].values():
            if p["remoteAs"] == 4200000008:
                p["remoteAs"] = 4200000099
    bad = _fails(check_bgp(Observer(spec, RecordedExecutor(snap), lambda n: None)))
    assert all(r.cause.kind == "wrong-asn" and r.cause.node == "g2-leaf4" for r in bad)
    ((root, follow),) = group_failures(bad)
    assert root.name == "g2-leaf4 ASN" and len(follow) == 2


def test_missing_announcement_groups_under_the_origin(spec, snap):
    from railab.checks.runner import group_failures

    prefix = "10.0.2.0/24"
    del snap["g1-leaf3"][BGP]["routes"][prefix]
    for node, doc in snap.items():
        if node != "g1-leaf3":
            doc[RIB].pop(prefix, None)
    res = check_routes(Observer(spec, RecordedExecutor(snap), lambda n: None))
    ((root, follow),) = group_failures(res)
    assert root.name == f"g1-leaf3 announces {prefix}"
    assert root.cause.model_dump(exclude_none=True) == {"kind": "not-announced", "node": "g1-leaf3",
                                                        "prefix": prefix}
    assert len(follow) == 9


# ---- one predicate: convergence wait and checks -------------------------------------------------
def _verdicts(spec, snap):
    """(converge's per-prefix and per-session verdicts, the checks' verdicts) on one snapshot."""
    from railab.checks.converge import observe

    views = observe(spec, RecordedExecutor(snap), workers=2)
    conv_routes = {(n, p): v.ok for n, view in views.items() for p, v in view.route_verdicts.items()}
    conv_sess = {(n, i): st == "Established" for n, view in views.items()
                 for i, st in view.session_states.items()}
    res = _run(spec, snap, "bgp,routes")
    chk_routes = {(r.node, r.prefix): r.ok for r in res if r.check == "routes"
                  and r.name == f"{r.node} {r.prefix}"}
    chk_sess = {(r.session.node, r.session.interface): r.ok for r in res
                if r.check == "bgp" and r.session is not None}
    return conv_routes, conv_sess, chk_routes, chk_sess, views


@pytest.mark.parametrize("fault", ["healthy", "one-hop-short", "not-installed", "fib-flag-off",
                                   "session-idle", "missing"])
def test_convergence_and_checks_share_one_predicate(spec, snap, fault):
    """The same recorded FRR JSON gives the same verdict through the convergence wait
    (converge.observe_node) and the bgp/routes checks, prefix by prefix and session by session."""
    node, prefix = "g1-leaf1", "10.0.1.0/24"
    entry = snap[node][RIB][prefix][0]
    if fault == "one-hop-short":
        entry["nexthops"] = entry["nexthops"][:1]
    elif fault == "not-installed":
        entry["installed"] = False
    elif fault == "fib-flag-off":  # zebra lists the next hop but it is not in the FIB
        entry["nexthops"][1]["fib"] = False
    elif fault == "session-idle":
        snap[node][SUMMARY]["peers"]["eth4"].update(state="Idle")
        snap["spine2"][SUMMARY]["peers"]["eth1"].update(state="Idle")
    elif fault == "missing":
        del snap[node][RIB][prefix]
    conv_routes, conv_sess, chk_routes, chk_sess, views = _verdicts(spec, snap)
    common = set(conv_routes) & set(chk_routes)
    assert common == set(conv_routes)  # every expected prefix of lab.json is a routes row
    assert {k: conv_routes[k] for k in common} == {k: chk_routes[k] for k in common}
    assert set(conv_sess) <= set(chk_sess)
    assert {k: conv_sess[k] for k in conv_sess} == {k: chk_sess[k] for k in conv_sess}
    broken = fault not in ("healthy", "session-idle")
    assert conv_routes[(node, prefix)] is (not broken)
    assert views[node].converged is (fault == "healthy")


def test_route_verdict_states():
    from railab.checks.frr import route_verdict

    hop = lambda i, **kw: {"interfaceName": i, "fib": True, "active": True, **kw}  # noqa: E731
    bgp = lambda *hops, **kw: [{"selected": True, "installed": True, "protocol": "bgp",  # noqa: E731
                                "nexthops": list(hops), **kw}]
    assert route_verdict(bgp(hop("eth3"), hop("eth4")), 2, ["eth3", "eth4"]).state == "ok"
    assert route_verdict(bgp(hop("eth3")), 2, ["eth3", "eth4"]).missing_ifs == ("eth4",)
    assert route_verdict(bgp(hop("eth3"), hop("eth5")), 2, ["eth3", "eth4"]).state == "interfaces"
    assert route_verdict(bgp(hop("eth3"), hop("eth4")), 2, []).state == "ok"
    assert route_verdict(bgp(hop("eth3"), installed=False), 1).state == "not-installed"
    assert route_verdict([{"selected": False, "nexthops": []}], 1).state == "missing"
    assert route_verdict(None, 1).state == "missing"
    local = [{"selected": True, "installed": True, "protocol": "static",
              "nexthops": [{"blackhole": True, "fib": True}]}]
    v = route_verdict(local, 1)
    assert v.state == "local" and v.ok and v.hops == ()


def test_link_status_rule():
    """One "link is up" rule: IFF_UP clear = admin-down; IFF_UP without IFF_LOWER_UP (or a
    down operstate) = carrier-lost; loopback-style UNKNOWN with both flags = up."""
    from railab.checks.base import IFF_LOWER_UP, IFF_UP, link_status

    assert link_status(0, "DOWN") == "admin-down"
    assert link_status(IFF_LOWER_UP, "DOWN") == "admin-down"
    assert link_status(IFF_UP, "LOWERLAYERDOWN") == "carrier-lost"
    assert link_status(IFF_UP | IFF_LOWER_UP, "DOWN") == "carrier-lost"
    assert link_status(IFF_UP | IFF_LOWER_UP, "UP") == "up"
    assert link_status(IFF_UP | IFF_LOWER_UP, "UNKNOWN") == "up"


# ---- the check registry -------------------------------------------------------------------------
@pytest.fixture
def dummy_family():
    """tests/dummy_check.py registers a "dummy" family at import; unregistered afterwards."""
    import importlib

    from railab.checks.base import CHECKS

    mod = importlib.import_module("tests.dummy_check")
    mod.register()
    try:
        yield mod
    finally:
        CHECKS.unregister("dummy")


def test_registered_check_runs_and_is_selectable(spec, snap, dummy_family):
    from railab.checks.base import CHECKS, register_check

    assert "dummy" in CHECKS and list(CHECKS)[-1] == "dummy"
    assert parse_only("dummy,bgp") == ["bgp", "dummy"]
    res = run_checks(spec, RecordedExecutor(snap), only="dummy", netns_of=lambda n: None)
    assert [(r.check, r.name, r.status) for r in res] == [("dummy", "switch count", "pass")]
    assert res[0].observed == str(len([n for n in spec.nodes if n.role != "server"]))
    assert "dummy" in {r.check for r in run_checks(spec, RecordedExecutor(snap),
                                                   netns_of=lambda n: None,
                                                   hops_runner=lambda *a: [])}
    with pytest.raises(ValueError, match="already registered"):
        register_check("dummy", lambda obs: [], order=1)
    with pytest.raises(ValueError, match="unknown check nope: use one or more of .*dummy"):
        parse_only("nope")


def test_registered_check_shows_in_the_cli(tmp_path, dummy_family):
    """``railab check --only dummy`` runs the family from the CLI (a real fabric over SSH:
    no namespaces, and the dummy family reads nothing, so no connection is made)."""
    from railab.cli import app

    labdir = generate("mini", tmp_path / "lab", name="ck-cli")
    inv = tmp_path / "inv.yml"
    inv.write_text("g1-leaf1: 192.0.2.1\n")
    r = CliRunner().invoke(app, ["check", str(labdir), "--inventory", str(inv), "--only", "dummy",
                                 "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["summary"] == {"dummy": {"pass": 1, "fail": 0, "skip": 0}}
    assert doc["results"][0]["check"] == "dummy" and doc["root_causes"] == []
    r = CliRunner().invoke(app, ["check", str(labdir), "--inventory", str(inv), "--only", "dummy"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "dummy" in r.output and "all 1 checks passed" in r.output


def test_cli_json_prints_refs_and_root_causes(tmp_path):
    """``railab check --json``: every row with status and references, plus each root cause with
    the rows it explains (grouped by fields); exit 1 on a failure."""
    from railab.checks.base import CHECKS, Cause, failed, register_check
    from railab.cli import app

    link = "g1-leaf1:eth3--spine1:eth1"

    def cut(obs):
        return [failed("cut", "the link", node="g1-leaf1", port="eth3", link=link,
                       cause=Cause(kind="link-down", node="g1-leaf1", port="eth3", link=link)),
                failed("cut", "a route", node="g2-leaf1", prefix="10.0.0.0/24",
                       cause=Cause(kind="session-down", link=link)),
                failed("cut", "elsewhere", node="spine2")]

    register_check("cut", cut, order=1001)
    try:
        labdir = generate("mini", tmp_path / "lab", name="ck-json")
        inv = tmp_path / "inv.yml"
        inv.write_text("g1-leaf1: 192.0.2.1\n")
        r = CliRunner().invoke(app, ["check", str(labdir), "--inventory", str(inv), "--only", "cut",
                                     "--json"])
    finally:
        CHECKS.unregister("cut")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["ok"] is False and [x["status"] for x in doc["results"]] == ["fail"] * 3
    first = doc["results"][0]
    assert (first["node"], first["port"], first["link"]) == ("g1-leaf1", "eth3", link)
    assert first["cause"]["kind"] == "link-down"
    assert [(g["root"], [e["name"] for e in g["explains"]]) for g in doc["root_causes"]] == [
        ("the link", ["a route"]), ("elsewhere", [])]
    assert doc["root_causes"][0]["refs"]["link"] == link and doc["root_causes"][1]["cause"] is None


# ---- golden messages: oversub and hops (bgp, routes and cabling are pinned above) -----------------
class LinksObserver(Observer):
    """Netlink answers from a dict: every planned interface up except ``down`` ((node, ifname)
    -> status)."""

    def __init__(self, spec, down: dict) -> None:
        super().__init__(spec, None, lambda n: None)
        self.down = down

    def links(self, node):
        from railab.checks.base import LinkState

        ports = {ln.a.interface for ln in self.spec.links if ln.a.node == node} | {
            ln.b.interface for ln in self.spec.links if ln.b.node == node}
        return {p: LinkState(p, i, self.down.get((node, p), "up"), "UP", "veth", None, None)
                for i, p in enumerate(sorted(ports), 2)}


def test_oversub_golden_message_and_cause(spec):
    from railab.checks.oversub import check_oversub

    up = next(ln for ln in spec.links if ln.role == "leaf-spine" and ln.a.node == "g1-leaf1")
    res = check_oversub(LinksObserver(spec, {(up.b.node, up.b.interface): "carrier-lost"}))
    (bad,) = _fails(res)
    assert bad.message() == (
        f"[fail] oversub g1-leaf1: expected 1:1 (800 Gb/s down : 800 Gb/s up planned), observed 2:1 "
        f"(800 Gb/s down : 400 Gb/s up carrying traffic; BGP summary unreadable, sessions not "
        f"judged: g1-leaf1: no executor to run vtysh) -- uplinks not carrying traffic: "
        f"{up.a.node}:{up.a.interface}-{up.b.node}:{up.b.interface} (link down)")
    assert bad.cause.kind == "link-down" and bad.link == bad.cause.link == \
        f"{up.a.node}:{up.a.interface}--{up.b.node}:{up.b.interface}"
    assert len([r for r in res if r.status == "pass"]) == len(spec.by_role("leaf")) - 1


def test_hops_golden_message_and_refs(spec):
    from railab.checks.hops import check_hops
    from railab.traffic.engine import FlowResult

    def runner(spec_, flows, netns_of):
        out = []
        for f in flows:
            r = FlowResult(flow=f, sent=64, delivered=64, ttl=64 - (f.expected_hops or 0),
                           hops_counters=f.expected_hops)
            if f.path_class == "cross-group":
                r = FlowResult(flow=f, sent=64, delivered=0, unreachable_at="g1-leaf1")
            out.append(r)
        return out

    res = check_hops(Observer(spec, None, lambda n: None), runner=runner)
    (bad,) = _fails(res)
    assert bad.message() == (
        "[fail] hops cross-group srv1:gpu0 -> srv3:gpu0: expected 3 hops, all delivered, observed "
        "- hops by TTL, 0/64 delivered -- nothing arrived: g1-leaf1 answered unreachable; see the "
        "routes and bgp checks for the prefixes on this path")
    assert (bad.node, bad.port, bad.subject) == ("srv1", "eth1", "cross-group")
    assert len(res) == 5 and all(r.node == "srv1" and r.port.startswith("eth") for r in res)


def test_dead_bgpd_groups_the_prefixes_it_no_longer_announces(spec, snap):
    """bgpd killed on g2-leaf4 (as live): its rail subnet and loopback vanish from every other
    RIB and the spines' sessions to it drop. Every routes row missing those prefixes names the
    dead daemon in its cause, so the daemon-dead row is the one root cause."""
    from railab.checks.base import Cause
    from railab.checks.runner import group_failures, root_causes

    dead = "g2-leaf4"
    gone = {rs.prefix for rs in spec.rail_subnets if rs.leaf == dead}
    gone.add(f"{spec.node(dead).loopback.ip}/32")
    for node, doc in snap.items():
        if node != dead:
            for p in gone:
                doc[RIB].pop(p, None)
    for s in spec.bgp_sessions:
        if s.node == dead:
            snap[s.peer][SUMMARY]["peers"][s.peer_interface].update(state="Active",
                                                                   peerState="Active")
    res = run_checks(spec, DeadBgpdExecutor(snap, dead), only="bgp,routes", netns_of=lambda n: None)
    missing = [r for r in _fails(res) if r.check == "routes" and r.prefix in gone
               and r.node != dead and r.observed == "missing from RIB"]
    assert len(missing) == 2 * (len([n for n in spec.nodes if n.role != "server"]) - 1)
    for r in missing:
        assert r.cause == Cause(kind="daemon-dead", node=dead, daemon="bgpd"), r.message()
        assert f"originates at {dead} but did not propagate to {r.node}" in r.reason
        assert "bgpd is not running on g2-leaf4" in r.reason
    groups = group_failures(res)
    assert len(groups) == 1, [g[0].message() for g in groups]
    assert groups[0][0].cause == Cause(kind="daemon-dead", node=dead, daemon="bgpd")
    assert {r.name for r in missing} <= {r.name for r in groups[0][1]}
    (rc,) = root_causes(res)
    assert rc["cause"] == {"kind": "daemon-dead", "node": dead, "daemon": "bgpd"}
    assert sum(1 + len(c) for _, c in groups) == len(_fails(res))


def test_prefix_announced_but_not_propagated_follows_the_origin(spec, snap):
    """The origin announces the prefix (bgpd alive) but a node lacks it: the row's cause is
    ``upstream`` at the origin (structured, not None), so it joins whatever explains the origin's
    own row for that prefix, else stands alone."""
    from railab.checks.base import Cause

    rs = next(r for r in spec.rail_subnets if r.leaf == "g2-leaf4")
    snap["g1-leaf1"][RIB].pop(rs.prefix)
    res = check_routes(Observer(spec, RecordedExecutor(snap), lambda n: None))
    (bad,) = _fails(res)
    assert bad.name == f"g1-leaf1 {rs.prefix}"
    assert bad.cause == Cause(kind="upstream", node="g2-leaf4", prefix=rs.prefix)


def test_hops_rows_of_a_down_nic_follow_the_cabling_root(spec):
    """srv1's NIC 1 is down: the hops rows whose flow uses it fail naming the NIC, with a
    link-down cause on that NIC's link, so they follow from the cabling ``srv1 NIC 1`` row (one
    root cause, not a second "engine failed" one); intra-server and PXN rows still pass."""
    from railab.checks.base import Cause, CheckResult, link_id
    from railab.checks.hops import check_hops
    from railab.checks.runner import group_failures
    from railab.traffic.engine import FlowResult

    def runner(spec_, flows, netns_of):
        out = []
        for f in flows:
            if f.src == ("srv1", 0) and f.src_nic == 1 and f.path_class != "intra-server":
                out.append(FlowResult(flow=f, sent=0, nic_down="srv1:eth1"))
            else:  # intra-server (NVLink) and PXN (leaves on NIC 2) do not use NIC 1
                out.append(FlowResult(flow=f, sent=64, delivered=64,
                                      ttl=64 - (f.expected_hops or 0),
                                      hops_counters=f.expected_hops))
        return out

    nic = spec.nic("srv1", 1)
    lid = link_id("srv1", "eth1", nic.leaf, nic.leaf_port)
    root = CheckResult(check="cabling", name="srv1 NIC 1", status="fail", node="srv1", port="eth1",
                       link=lid, cause=Cause(kind="link-down", node="srv1", port="eth1", link=lid))
    res = check_hops(Observer(spec, None, lambda n: None), runner=runner)
    bad = _fails(res)
    assert {r.subject for r in bad} == {"intra-rail", "inter-rail", "cross-group"}
    for r in bad:
        assert "srv1:eth1 is down: not sent" in r.reason and "engine failed" not in r.observed
        assert r.cause == Cause(kind="link-down", node="srv1", port="eth1", link=lid)
    ((top, follow),) = group_failures([root] + res)
    assert top is root and follow == bad


def test_a_set_stop_event_interrupts_run_checks_at_a_safe_point(spec, snap):
    """``run_checks(stop=...)`` (railab check's Ctrl-C): KeyboardInterrupt before the next vtysh
    run or family once the Event is set; no further command runs."""
    import threading

    stop = threading.Event()
    calls: list[tuple[str, str]] = []

    class Counting(RecordedExecutor):
        def run(self, node, argv, *, timeout=30.0):
            calls.append((node, " ".join(argv)))
            stop.set()  # Ctrl-C lands during the first vtysh run
            return super().run(node, argv, timeout=timeout)

    with pytest.raises(KeyboardInterrupt):
        run_checks(spec, Counting(snap), only="bgp,routes", netns_of=lambda n: None, stop=stop)
    assert 1 <= len(calls) <= 8, calls  # at most the prefetch batch already running (8 workers)
    stop.clear()
    assert run_checks(spec, RecordedExecutor(snap), only="bgp", netns_of=lambda n: None, stop=stop)


def test_unexplained_upstream_rows_stay_roots_of_their_own():
    """Two `upstream` rows nothing explains are two roots (a KeyError in group_failures once a
    second such row looked for a dead daemon among the roots: railab check --wait crashed
    while bgpd restarted)."""
    from railab.checks.base import Cause, CheckResult
    from railab.checks.runner import group_failures

    rows = [CheckResult(check="routes", name=f"g1-leaf{i} 10.0.{i}.0/24", status="fail",
                        node=f"g1-leaf{i}", prefix=f"10.0.{i}.0/24",
                        cause=Cause(kind="upstream", node="g2-leaf1", prefix=f"10.0.{i}.0/24"))
            for i in (1, 2, 3)]
    assert [g[0].name for g in group_failures(rows)] == [r.name for r in rows]


# ---- two faults that cut a prefix off together (issue 31, defect found on mini) -------------------
def _cut_snapshot(spec, snap, down: set[tuple[str, str]], dead: str | None = None) -> dict:
    """Edit the healthy ``snap`` as FRR shows ``mini`` with the leaf-spine links ``down``
    ({(leaf, spine)}: sessions Idle at both ends) and bgpd dead on spine ``dead`` (the leaves'
    sessions to it Active, its BGP routes gone; vtysh's bgp commands fail, see
    DeadBgpdExecutor): a leaf keeps a next hop via a spine when its session to that spine is up
    and that spine still has the prefix (its session to the origin is up)."""
    origin = {rs.prefix: rs.leaf for rs in spec.rail_subnets}
    origin.update({f"{n.loopback.ip}/32": n.name for n in spec.nodes if n.loopback})
    port = {}  # (node, neighbor) -> node's interface
    for s in spec.bgp_sessions:
        port[(s.node, s.peer)] = s.interface
        port[(s.peer, s.node)] = s.peer_interface
    via = {(n, i): peer for (n, peer), i in port.items()}

    def up(leaf, spine):
        return spine != dead and (leaf, spine) not in down

    for s in spec.bgp_sessions:  # node = leaf end
        if (s.node, s.peer) in down:
            snap[s.node][SUMMARY]["peers"][s.interface].update(state="Idle", peerState="Idle")
            snap[s.peer][SUMMARY]["peers"][s.peer_interface].update(state="Idle", peerState="Idle")
        elif s.peer == dead:
            snap[s.node][SUMMARY]["peers"][s.interface].update(state="Active", peerState="Active")
    for node, doc in snap.items():
        role = spec.node(node).role
        for prefix in list(doc[RIB]):
            entry = doc[RIB][prefix][0]
            if entry["protocol"] != "bgp":
                continue
            o = origin[prefix]
            if role == "spine":
                keep = [h for h in entry["nexthops"] if node != dead
                        and via[(node, h["interfaceName"])] == o and up(o, node)]
            else:
                keep = [h for h in entry["nexthops"]
                        if up(node, s := via[(node, h["interfaceName"])]) and (o == s or up(o, s))]
            if keep:
                entry["nexthops"] = keep
            else:
                del doc[RIB][prefix]
    return snap


def _roots(groups):
    return sorted((root.cause.kind, root.cause.node or "", root.cause.link or "")
                  for root, _ in groups)


@pytest.mark.parametrize("down,dead", [
    ({("g1-leaf1", "spine1")}, "spine2"),                          # an uplink + the other spine's bgpd
    ({("g1-leaf1", "spine1"), ("g2-leaf1", "spine2")}, None),      # two leaves, two spines
    ({("g1-leaf1", "spine1"), ("g1-leaf1", "spine2")}, None),      # both uplinks of one leaf
], ids=["uplink+dead-spine-bgpd", "two-leaves-two-spines", "both-uplinks"])
def test_two_faults_cutting_a_prefix_off_are_two_root_causes(spec, snap, down, dead):
    """Issue 31: two faults that together cut a prefix off (every path from a leaf to it goes
    through one of them) give two root causes, not one per row the two explain together: a
    leaf with no Established session, and a prefix every neighbor lacks or whose session is
    down, name each cause (``joint``) and are listed under both roots (JSON ``joint_with``)."""
    from railab.checks.runner import group_failures, root_causes

    _cut_snapshot(spec, snap, down, dead)
    ex = DeadBgpdExecutor(snap, dead) if dead else RecordedExecutor(snap)
    res = run_checks(spec, ex, only="bgp,routes", netns_of=lambda n: None)
    groups = group_failures(res)
    faults = {f"{leaf}--{sp}" for leaf, sp in down} | ({dead} if dead else set())
    assert len(groups) == len(faults) == 2, [g[0].message() for g in groups]
    for root, _ in groups:
        c = root.cause
        named = c.node if c.kind == "daemon-dead" else "--".join(
            sorted({end.split(":")[0] for end in c.link.split("--")}, key=lambda n: n.startswith("spine")))
        assert named in faults, root.message()
    # every failed row is a root or listed under one; the rows the two cause together under both
    fails = _fails(res)
    listed = {id(r) for root, cons in groups for r in (root, *cons)}
    assert all(id(r) in listed for r in fails)
    joint = [r for r in fails if r.joint]
    assert joint, "no row was cut off by the two together"
    for r in joint:
        assert sum(r in cons for _, cons in groups) == 2, r.message()
    rc = root_causes(res)
    entries = [e for g in rc for e in g["explains"] if "joint_with" in e]
    assert len(entries) == 2 * len(joint)
    other = {g["root"] for g in rc}
    assert all(len(e["joint_with"]) == 1 and e["joint_with"][0]["root"] in other for e in entries)


def test_joint_rows_follow_every_root_their_causes_follow():
    """The pure correlation (group_failures) on rows shaped like mini's: an uplink down (root
    A), bgpd dead on the other spine (root B); the leaf's prefix missing elsewhere names the
    neighbors' rows (``upstream`` at each spine) and follows both, transitively through the
    spines' own rows; a row whose second cause nothing explains follows the first alone; one
    fault alone stays one root."""
    from railab.checks.base import Cause, CheckResult
    from railab.checks.runner import group_failures, joint_roots

    la, lb = "g1-leaf1:eth3--spine1:eth1", "g1-leaf1:eth4--spine2:eth1"
    p = "10.0.0.0/24"

    def row(check, name, node=None, prefix=None, link=None, causes=()):
        return CheckResult(check=check, name=name, status="fail", node=node, prefix=prefix,
                           link=link, cause=causes[0] if causes else None,
                           joint=tuple(causes[1:]) or None)

    down_a = Cause(kind="link-down", node="g1-leaf1", port="eth3", link=la)
    a = row("cabling", "A", "g1-leaf1", link=la, causes=[down_a])
    b = row("daemons", "B", "spine2", causes=[Cause(kind="daemon-dead", node="spine2", daemon="bgpd")])
    sess_b = row("bgp", "g1-leaf1:eth4 <-> spine2:eth1", "g1-leaf1", link=lb,
                 causes=[Cause(kind="daemon-dead", node="spine2", daemon="bgpd")])
    sp1 = row("routes", f"spine1 {p}", "spine1", p,
              causes=[Cause(kind="session-down", node="spine1", port="eth1", link=la)])
    sp2 = row("routes", f"spine2 {p}", "spine2", p, causes=[Cause(kind="daemon-dead", node="spine2", daemon="bgpd")])
    leaf = row("routes", "g1-leaf1 10.0.1.0/24", "g1-leaf1", "10.0.1.0/24",
               causes=[Cause(kind="link-down", node="g1-leaf1", port="eth3", link=la),
                       Cause(kind="session-down", node="g1-leaf1", port="eth4", link=lb)])
    far = row("routes", f"g2-leaf1 {p}", "g2-leaf1", p,
              causes=[Cause(kind="upstream", node="spine1", prefix=p),
                      Cause(kind="session-down", node="g2-leaf1", port="eth4", link="g2-leaf1:eth4--spine2:eth5")])
    chained = row("routes", f"g2-leaf2 {p}", "g2-leaf2", p,
                  causes=[Cause(kind="upstream", node="g2-leaf1", prefix=p)])
    half = row("routes", "g2-leaf3 10.0.1.0/24", "g2-leaf3", "10.0.1.0/24",
               causes=[Cause(kind="link-down", node="g1-leaf1", port="eth3", link=la),
                       Cause(kind="session-down", node="g2-leaf3", port="eth9", link="nowhere")])
    rows = [b, a, sess_b, sp1, sp2, leaf, far, chained, half]
    groups = group_failures(rows)
    assert [(r.name, [c.name for c in cons]) for r, cons in groups] == [
        ("B", [sess_b.name, sp2.name, leaf.name, f"g2-leaf1 {p}", f"g2-leaf2 {p}"]),
        ("A", [sp1.name, leaf.name, f"g2-leaf1 {p}", f"g2-leaf2 {p}", half.name])]
    joint = joint_roots(groups)
    assert {id(r) for r in (leaf, far, chained)} == set(joint)
    assert [x.name for x in joint[id(far)]] == ["B", "A"]
    # one fault alone: one root, nothing joint
    assert [r.name for r, _ in group_failures([a, sp1, half])] == ["A"]
    assert not joint_roots(group_failures([a, sp1, half]))


def test_a_wrong_remote_as_on_one_session_is_named_wrong_asn_at_that_end(spec, snap):
    """``railab fault wrong-asn g1-leaf2 spine2`` (g1-leaf2's `neighbor eth4 interface
    remote-as 4199999998`): the session is down and g1-leaf2's summary shows the wrong
    ``remoteAs``; the bgp row names a ``wrong-asn`` cause on g1-leaf2:eth4 and its link (not a
    bare ``session-down``), as docs/tutorial.md says, and stays one root with its routes rows.
    The peer running another ASN itself is the node-wide ``wrong-asn`` of its ASN row."""
    from railab.checks.base import Cause
    from railab.checks.runner import group_failures

    s = next(x for x in spec.bgp_sessions if x.node == "g1-leaf2" and x.peer == "spine2")
    snap["g1-leaf2"][SUMMARY]["peers"][s.interface].update(state="Active", peerState="Active",
                                                            remoteAs=4199999998)
    snap["spine2"][SUMMARY]["peers"][s.peer_interface].update(state="Active", peerState="Active")
    res = _run(spec, snap, "bgp")
    (row,) = _fails(res)
    link = f"g1-leaf2:{s.interface}--spine2:{s.peer_interface}"
    assert row.cause == Cause(kind="wrong-asn", node="g1-leaf2", port=s.interface, link=link)
    assert "expects AS 4199999998" in row.reason and "spine2 is AS" in row.reason
    assert len(group_failures(res)) == 1 and row.link == link
    # spine2 itself runs another ASN: the culprit is spine2, as its own ASN row says
    snap["spine2"][SUMMARY]["as"] = 4199999998
    snap["g1-leaf2"][SUMMARY]["peers"][s.interface]["remoteAs"] = 4199999998
    snap["g1-leaf2"][SUMMARY]["peers"][s.interface].update(state="Active")
    res = _run(spec, snap, "bgp")
    bad = _fails(res)
    assert {r.cause for r in bad} == {Cause(kind="wrong-asn", node="spine2")}, [r.message() for r in bad]
    assert len(group_failures(res)) == 1


@pytest.mark.parametrize("fault", ["session-shut", "wrong-asn"])
def test_a_session_fault_beside_the_far_ends_dead_bgpd_is_a_root_of_its_own(spec, snap, fault):
    """Issue 48 review (C): a session shut (or expecting a wrong remote AS) on g2-leaf3 while
    bgpd is dead on spine2, the session's far end: the bgp row names the live end's own fault
    (it used to name the unreadable spine2 and follow its dead bgpd, so the shut had no root and
    fixing spine2 left it shut); the dead bgpd is a root too, and the audit's rules hold."""
    from railab.checks.rootaudit import audit
    from railab.checks.runner import root_causes

    peer = snap["g2-leaf3"][SUMMARY]["peers"]["eth4"]
    if fault == "session-shut":
        peer.update(state="Idle (Admin)", peerState="Admin")
    else:
        peer.update(state="Active", peerState="OK", remoteAs=4199999999)
    (s,) = [s for s in spec.bgp_sessions
            if ("g2-leaf3", "eth4") in {(s.node, s.interface), (s.peer, s.peer_interface)}]
    far, far_port = (s.peer, s.peer_interface) if s.node == "g2-leaf3" else (s.node, s.interface)
    assert far == "spine2"
    res = run_checks(spec, DeadBgpdExecutor(snap, "spine2"), only="bgp,routes", netns_of=lambda n: None)
    (row,) = [r for r in _fails(res) if r.link == f"g2-leaf3:eth4--spine2:{far_port}" and r.check == "bgp"]
    assert (row.cause.kind, row.cause.node, row.cause.port) == (fault, "g2-leaf3", "eth4"), row.cause
    doc = {"results": [r.model_dump(mode="json") for r in res], "root_causes": root_causes(res)}
    kinds = sorted((rc["cause"] or {}).get("kind", "-") for rc in doc["root_causes"])
    assert kinds == sorted(["daemon-dead", fault]), kinds
    faults = [{"id": "f1", "kind": fault, "node": "g2-leaf3", "port": "eth4", "peer_node": "spine2",
               "peer_port": far_port, "params": {}},
              {"id": "f2", "kind": "daemon-kill", "node": "spine2", "params": {"daemon": "bgpd"}}]
    assert audit(doc, faults, spec) == []
