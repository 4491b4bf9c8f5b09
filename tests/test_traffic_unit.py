"""Root-free checks of traffic verdicts, spread warnings and `railab traffic` option errors.

FlowResults here are plain data (what the engine records), so the verdict and warning rules are
tested without a lab; the live behaviour is in test_traffic_live.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.traffic.engine import FlowResult, spread_warnings
from railab.traffic.patterns import flows_for

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp("u") / "tu",
                 name="tu")
    return LabSpec.load(d)


def _delivered(flow, **kw) -> FlowResult:
    r = FlowResult(flow=flow, sent=16, delivered=16, ttl=63, hops_counters=1, **kw)
    return r


def test_crossed_cable_fails_the_flow_with_a_cabling_verdict(spec):
    f = flows_for(spec, "intra-rail")[0]  # srv1:gpu0 -> srv2:gpu0, NIC 1 -> NIC 1
    good = _delivered(f, egress="srv1:eth1", ingress="srv2:eth1",
                      expected_ingress="srv2:eth1", expected_from="g1-leaf1:eth2")
    assert good.ok and good.miswired is None and good.verdict == "ok"
    swapped = _delivered(f, egress="srv1:eth1", ingress="srv2:eth3", wrong_ingress=16,
                         expected_ingress="srv2:eth1")
    assert not swapped.ok
    assert swapped.verdict == "arrived on srv2:eth3, expected eth1 (NIC 1): check cabling"
    assert swapped.to_dict()["miswired"] == swapped.verdict and not swapped.to_dict()["ok"]
    wrong_leaf = _delivered(f, egress="srv1:eth1", arrived_from="g1-leaf3:eth2",
                            expected_from="g1-leaf1:eth2")
    assert "arrived from g1-leaf3:eth2, expected g1-leaf1:eth2: check cabling" == wrong_leaf.verdict
    sender = FlowResult(flow=f, sent=16, lost=16, egress="srv1:eth1", egress_to="g1-leaf3:eth2",
                        expected_egress_to="g1-leaf1:eth2")
    assert sender.verdict.startswith("left srv1:eth1 towards g1-leaf3:eth2, expected "
                                     "g1-leaf1:eth2: check cabling")
    renamed = _delivered(f, egress="srv1:eth3")
    assert "sent on srv1:eth3, expected eth1 (NIC 1)" in renamed.verdict and not renamed.ok


def _via(flow, uplink: str) -> FlowResult:
    r = FlowResult(flow=flow, sent=4, delivered=4, ttl=61, hops_counters=3)
    r.uplinks = [uplink]
    r.spines = [uplink.split(">")[1].split(":")[0]]
    return r


def test_spread_warning_names_the_idle_uplink(spec):
    flows = flows_for(spec, "cross-group", n=16)
    ups = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            ups.setdefault(ln.a.node, []).append(f"{ln.a.node}:{ln.a.interface}>{ln.b.node}:{ln.b.interface}")
    results = []
    for i, f in enumerate(flows):
        leaf = spec.nic(f.src[0], f.src_nic).leaf
        choices = ups[leaf]
        # g1-leaf1 loses its second uplink; every other leaf spreads over both
        results.append(_via(f, choices[0] if leaf == "g1-leaf1" else choices[i % len(choices)]))
    cut = ups["g1-leaf1"][1].split(">")[0]
    state = lambda node, ifn: f"{node}:{ifn}" != cut  # noqa: E731
    w = spread_warnings(spec, results, state)
    assert w == [f"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines ({cut} is down): run railab check"]
    # all links up and only 4 flows per leaf: a single uplink is hashing luck, not a fault
    assert spread_warnings(spec, results, lambda n, i: True) == []
    # ... but 16 flows from one leaf on one of its 2 uplinks is not luck (2 x 2^-16)
    many = [_via(f, ups["g1-leaf1"][0]) for f in flows_for(spec, "cross-group", n=64)
            if spec.nic(f.src[0], f.src_nic).leaf == "g1-leaf1"]
    assert len(many) == 16
    w = spread_warnings(spec, many, lambda n, i: True)
    assert w == ["g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines with 16 flows although its "
                 "uplinks are up (chance on a healthy leaf: 0.0031 %): run railab check"]
    assert spread_warnings(spec, results[:0]) == []


def test_spread_warning_names_the_end_that_was_taken_down(spec):
    """Issue 31: ``railab fault LAB link-down g1-leaf1 spine2 --end spine2`` takes the spine's
    end down; the leaf's end only loses carrier. The warning named the leaf's port as down (the
    wrong end); it names the spine's port now, and still the leaf's when that end is down."""
    flows = flows_for(spec, "cross-group", n=16)
    ups = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            ups.setdefault(ln.a.node, []).append(f"{ln.a.node}:{ln.a.interface}>{ln.b.node}:{ln.b.interface}")
    results = []
    for i, f in enumerate(flows):
        leaf = spec.nic(f.src[0], f.src_nic).leaf
        choices = ups[leaf]
        results.append(_via(f, choices[0] if leaf == "g1-leaf1" else choices[i % len(choices)]))
    near, far = ups["g1-leaf1"][1].split(">")
    states = {near: "carrier-lost", far: "admin-down"}
    state = lambda node, ifn: states.get(f"{node}:{ifn}", "up")  # noqa: E731
    up = lambda node, ifn: state(node, ifn) == "up"  # noqa: E731
    w = spread_warnings(spec, results, up, link_state=state)
    assert w == [f"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines ({far} is down, at the far end "
                 f"of {near}): run railab check"]
    states = {near: "admin-down", far: "carrier-lost"}  # --end at the leaf: the leaf's port
    w = spread_warnings(spec, results, up, link_state=state)
    assert w == [f"g1-leaf1 sent on 1 of 2 uplinks, 1 of 2 spines ({near} is down): run railab check"]


@pytest.mark.parametrize("args,needle", [
    (["--size", "0"], "--size must be at least 1"),
    (["--messages", "0"], "--messages must be at least 1"),
    (["--mtu", "0"], "--mtu must be 256-4096"),
    (["--mtu", "9000"], "--mtu must be 256-4096"),
    (["--flows", "0"], "--flows must be at least 1"),
    (["--op", "read"], "--op must be write, send or mixed"),
    (["-p", "bogus"], "--pattern must be one of intra-server"),
])
def test_traffic_option_errors_name_the_option(args, needle):
    """Checked before the lab is looked up, so no lab is needed; usage errors exit 2."""
    from railab.cli import app

    base = ["traffic", "no-such-lab"] + ([] if "-p" in args else ["-p", "intra-rail"])
    r = CliRunner().invoke(app, base + args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and needle in r.output, r.output
    assert r.output.count("\n") == 1


def test_traceroute_help_describes_every_option():
    from railab.cli import app

    r = CliRunner().invoke(app, ["traceroute", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    lines = {ln.split()[1]: ln for ln in r.output.splitlines() if ln.strip().startswith("│ --")}
    for opt in ("--pxn", "--json", "--qp"):
        assert opt in lines, r.output
        assert len(lines[opt].split()) > 4, f"{opt} has no description: {lines[opt]!r}"


def test_spread_figure_only_with_enough_flows():
    """8 flows over 16 uplinks leave half idle by design: no imbalance figure, say why."""
    from railab.traffic.patterns import SpreadStats

    few = {f"g1-leaf1:eth{i}>spine{i % 2 + 1}:eth1": (1 if i < 8 else 0) for i in range(16)}
    text = SpreadStats.spread_text(few, "uplinks", "imbalance")
    assert "imbalance" not in text and "2.00" not in text
    assert text == ("too few flows for a spread figure (8 flows over 16 uplinks; "
                    "use --flows 32 or more)")
    assert SpreadStats.spread_text({"spine1": 5, "spine2": 3}, "spines") == \
        "imbalance(max/mean)=1.25"
    assert SpreadStats.spread_text({"spine1": 1, "spine2": 2}, "spines").startswith("too few")


def test_unreachable_hop_reads_in_words():
    """`!leaf1` was cryptic: a switch's ICMP unreachable names the switch and the ICMP code."""
    from railab.traffic.engine import Hop
    from railab.traffic.traceroute import format_path, unreachable_text

    hops = [Hop(1, "10.0.0.1", "leaf1", 0.1, "unreachable", 0)]
    assert format_path(hops) == "unreachable at leaf1 (ICMP net unreachable)"
    assert "!" not in format_path(hops)
    assert unreachable_text("g1-leaf2", 1) == "unreachable at g1-leaf2 (ICMP host unreachable)"
    assert unreachable_text("g1-leaf2", None) == \
        "unreachable at g1-leaf2 (ICMP destination unreachable)"
    path = [Hop(1, "10.0.0.1", "g1-leaf1", 0.1, "time-exceeded"), Hop(2, None, None, None, "timeout"),
            Hop(3, "10.0.1.3", "srv3:eth1", 0.2, "destination")]
    assert format_path(path) == "g1-leaf1 -> * -> srv3:eth1"


def test_down_nic_fails_its_flows_naming_the_nic(spec):
    """A server NIC set down: flows from it were not sent, flows to it lost everything; both fail
    naming the NIC (``srv1:eth1 is down: not sent``); JSON carries ``nic_down``."""
    f = flows_for(spec, "intra-rail")[0]  # srv1:gpu0 -> srv2:gpu0
    src = FlowResult(flow=f, sent=0, nic_down="srv1:eth1")
    assert not src.ok and src.verdict == "srv1:eth1 is down: not sent"
    assert src.to_dict()["nic_down"] == "srv1:eth1" and not src.to_dict()["ok"]
    dst = FlowResult(flow=f, sent=16, lost=16, nic_down="srv2:eth1")
    assert not dst.ok and dst.verdict == "srv2:eth1 is down: lost 16"
    assert _delivered(f).to_dict()["nic_down"] is None


def test_traceroute_from_a_down_nic_says_so():
    from railab.traffic.engine import Hop
    from railab.traffic.traceroute import format_path

    assert format_path([Hop(1, None, "srv1:eth1", None, "nic-down")]) == \
        "srv1:eth1 is down: probe not sent"


class _DownSocket:
    """A send socket whose interface is administratively down (the kernel's ENETDOWN)."""

    def __init__(self, ifname: str) -> None:
        self.ifname = ifname

    def send(self, frame):
        import errno

        raise OSError(errno.ENETDOWN, "Network is down")

    def getsockname(self):
        return (self.ifname, 0x0800, 0, 0, b"\x02\x00\x00\x00\x00\x01")


def test_engine_send_paths_survive_a_down_nic(spec):
    """ENETDOWN from the source NIC's socket ends that flow (and the traceroute probe) with the
    NIC named, instead of a traceback (no lab needed: the engine's sockets are stand-ins)."""
    from railab.traffic.engine import Engine
    from railab.traffic.traceroute import trace

    f = flows_for(spec, "intra-rail")[0]
    eng = Engine(spec)
    eng._tx[(f.src[0], f.src_nic)] = _DownSocket(f"eth{f.src_nic}")
    eng._tx[(f.dst[0], f.dst_nic)] = _DownSocket(f"eth{f.dst_nic}")
    for nic in spec.nics:
        eng._src_mac[(nic.server, nic.nic)] = "02:00:00:00:00:01"
        eng._gw_mac[(nic.server, nic.nic)] = "02:00:00:00:00:02"
    st = eng._prepare(f, acks=False)
    assert eng._send_some(st, 8) >= 0
    assert st.sent == 0 and st.res.nic_down == f"{f.src[0]}:eth{f.src_nic}"
    eng.poll = lambda timeout=0.0: 0  # no epoll without open()
    eng._drain_sinks = lambda: None
    hops = trace(eng, f)
    assert [(h.kind, h.node) for h in hops] == [("nic-down", f"{f.src[0]}:eth{f.src_nic}")]
    assert not eng._probes


@pytest.mark.skipif(os.geteuid() != 0, reason="AF_PACKET sockets need root")
def test_nic_state_is_read_through_the_send_socket(spec):
    """nic_is_down reads IFF_UP with SIOCGIFFLAGS on the NIC's own send socket: None for an up
    interface (``lo`` here), the ``server:ifname`` for one that is down (a link this test
    (a veth, down as created) makes in its own namespace and removes)."""
    import socket
    import subprocess

    from railab.traffic.engine import Engine, in_netns

    eng = Engine(spec)
    lo = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    lo.bind(("lo", 0))
    eng._tx[("srv1", 1)] = lo
    ns = f"tu-nicdown-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "eth1", "type", "veth",
                        "peer", "name", "eth9"], check=True)
        with in_netns(ns):
            down = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        down.bind(("eth1", 0))
        eng._tx[("srv2", 1)] = down
        assert eng.nic_is_down("srv1", 1) is None
        assert eng.nic_is_down("srv2", 1) == "srv2:eth1"
        assert eng.nic_is_down("srv9", 1) is None  # no such NIC: nothing known
    finally:
        for s in eng._tx.values():
            s.close()
        subprocess.run(["ip", "netns", "del", ns], check=True)

# ---- counters: the flow's own packets, never the lab's background ---------------------------
class _Tpl:
    """Stands in for a FrameTemplate: only its size (bytes on the wire) matters here."""

    size = 1082


def _ports(spec) -> list[tuple[str, str]]:
    roles = {n.name: n.role for n in spec.nodes}
    return [(e.node, e.interface) for ln in spec.links for e in (ln.a, ln.b)
            if roles[e.node] != "server"]


def _measured(spec, flow, moved: dict, background: int):
    """_attribute() over synthetic counters: every switch port moved ``background`` packets of
    86 bytes (BFD, keepalives, RA: a long window on a busy full-size lab), plus ``moved``
    ``{(node, port): ("rx"|"tx")}`` carrying the flow's 64 packets of 1082 bytes."""
    from railab.traffic.engine import Engine, FlowResult, _FlowState

    before = {p: (1000, 1000, 86000, 86000) for p in _ports(spec)}
    after = {p: (v[0] + background, v[1] + background, v[2] + 86 * background,
                 v[3] + 86 * background) for p, v in before.items()}
    for p, way in moved.items():
        rxp, txp, rxb, txb = after[p]
        after[p] = ((rxp + 64, txp, rxb + 64 * 1082, txb) if way == "rx"
                    else (rxp, txp + 64, rxb, txb + 64 * 1082))
    st = _FlowState()
    st.flow, st.res, st.sent, st.seq = flow, FlowResult(flow=flow), 64, [_Tpl()] * 64
    Engine(spec)._attribute(st, before, after)  # no sockets: _attribute reads lab.json only
    return st.res


def _cross_group_path(spec, flow):
    src, dst = spec.nic(flow.src[0], flow.src_nic), spec.nic(flow.dst[0], flow.dst_nic)
    up = next(ln for ln in spec.links if ln.role == "leaf-spine" and ln.a.node == src.leaf)
    spine = up.b.node
    down = next(ln for ln in spec.links if ln.role == "leaf-spine" and ln.a.node == dst.leaf
                and ln.b.node == spine)
    moved = {(src.leaf, src.leaf_port): "rx", (src.leaf, up.a.interface): "tx",
             (spine, up.b.interface): "rx", (spine, down.b.interface): "tx",
             (dst.leaf, down.a.interface): "rx", (dst.leaf, dst.leaf_port): "tx"}
    return src, dst, up, down, moved


def test_counter_hops_ignore_background_traffic(spec):
    """Issue 12: on the busy full-size fabric every hops row failed with `counter hops 24 != 3`
    because BGP/BFD/RA moved every port by more than half a flow's packets during the window.
    Small frames never add up to a flow's 1 KiB frames: the count stays the flow's own."""
    flow = flows_for(spec, "cross-group")[0]
    src, dst, up, down, moved = _cross_group_path(spec, flow)
    for background in (0, 40, 400):  # 400 small frames on every port: still not a flow
        r = _measured(spec, flow, moved, background)
        assert r.hops_counters == 3, (background, r.switches)
        assert r.switches == [src.leaf, up.b.node, dst.leaf]
        assert r.path == [f"{src.leaf}:{up.a.interface}", f"{up.b.node}:{down.b.interface}",
                          f"{dst.leaf}:{dst.leaf_port}"]
        assert r.uplinks == [f"{src.leaf}:{up.a.interface}>{up.b.node}:{up.b.interface}"]
        assert r.egress_to is None


def test_counters_still_see_a_crossed_cable_under_background(spec):
    """The packets of srv1's NIC 1 enter the leaf port cabled (by lab.json) to its NIC 3: the
    sender-side wiring verdict survives the background that used to blur every counter."""
    flow = flows_for(spec, "intra-rail")[0]  # srv1:gpu0 -> srv2:gpu0 over g1-leaf1
    src, wrong = spec.nic("srv1", 1), spec.nic("srv1", 3)
    r = _measured(spec, flow, {(wrong.leaf, wrong.leaf_port): "rx"}, background=40)
    assert r.egress_to == f"{wrong.leaf}:{wrong.leaf_port}"
    r.expected_egress_to = f"{src.leaf}:{src.leaf_port}"
    assert "check cabling" in (r.miswired or "")


def test_flow_deltas_bound_packets_by_bytes():
    from railab.traffic.engine import Engine

    before = {("s", "eth1"): (0, 0, 0, 0), ("s", "eth2"): (5, 5, 500, 500)}
    after = {("s", "eth1"): (100, 64, 100 * 86, 64 * 1082),  # background rx, a flow's tx
             ("s", "eth2"): (5 + 64 + 30, 5, 500 + 64 * 1082 + 30 * 86, 500),  # flow + background
             ("s", "eth3"): (3, 0, 3000, 0)}  # a port new since `before`
    d = Engine.flow_deltas(before, after, 1082)
    assert d[("s", "eth1")] == (7, 64)
    assert d[("s", "eth2")] == (66, 0)  # never below the flow's 64, background adds little
    assert d[("s", "eth3")] == (2, 0)


def test_rtnl_dumps_links_and_counters_of_this_namespace():
    """The raw rtnetlink dumps agree with the kernel's view (here: this process' namespace;
    dumping links and stats needs no privilege)."""
    from pyroute2 import IPRoute

    from railab.traffic.engine import Rtnl

    nl = Rtnl()
    try:
        links, stats = nl.links(), nl.stats()
    finally:
        nl.close()
    with IPRoute() as ipr:
        want = {ln["index"]: (ln.get("ifname"), ln.get("address")) for ln in ipr.get_links()}
    assert links == want
    assert set(stats) == set(want) and all(len(v) == 4 for v in stats.values())
    lo = next(i for i, (name, _) in links.items() if name == "lo")
    assert links[lo][1] == "00:00:00:00:00:00"


def test_raise_nofile_lifts_the_soft_limit_to_the_hard_one(monkeypatch):
    import resource

    from railab.errors import RailabError
    from railab.traffic import engine

    limits = {"now": (1024, 65536)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda which, v: limits.update(now=v))
    assert engine.raise_nofile(100) == 1024 and limits["now"] == (1024, 65536)  # fits: unchanged
    assert engine.raise_nofile(5632) == 65536 and limits["now"] == (65536, 65536)
    limits["now"] = (1024, 4096)
    with pytest.raises(RailabError, match="needs 9000 file descriptors.*hard limit 4096"):
        engine.raise_nofile(9000)


def test_sample_text_says_what_share_of_the_lab_was_sent(spec):
    from railab.traffic.patterns import class_population, sample_text

    servers = len(spec.by_role("server"))
    gpus = servers * spec.gpus_per_server
    classes = ("intra-server", "intra-rail", "inter-rail", "cross-group")
    assert sum(class_population(spec, c) for c in classes) == gpus * (gpus - 1)
    assert class_population(spec, "cross-group") == 128  # mini: 2 groups x 8 GPUs each way
    assert sample_text(spec, flows_for(spec, "cross-group", n=4)) == \
        "sampled 4 of 128 cross-group GPU pairs (4 flows)"
    # above the full-coverage set (8 pairs on mini) -n repeats pairs with new QPs
    assert sample_text(spec, flows_for(spec, "cross-group", n=16)) == \
        "sampled 8 of 128 cross-group GPU pairs (16 flows)"
    every = flows_for(spec, "all-to-all", sample=servers)
    assert sample_text(spec, every).startswith("all 48 intra-server, all ")
    assert "sampled" not in sample_text(spec, every)


def test_rtnl_link_flags_follow_the_one_link_up_rule():
    """`railab traffic` judges idle uplinks with checks.base.link_status over the engine's raw
    dump: the same flags and operstate pyroute2 (and so Observer) reads."""
    from pyroute2 import IPRoute

    from railab.checks.base import link_status
    from railab.traffic.engine import Rtnl

    nl = Rtnl()
    try:
        mine = nl.link_flags()
    finally:
        nl.close()
    with IPRoute() as ipr:
        theirs = {ln.get("ifname"): (ln["flags"], ln.get("operstate")) for ln in ipr.get_links()}
    assert mine == theirs
    assert link_status(*mine["lo"]) == "up"


def test_counts_text_names_what_moved_and_counts_the_idle():
    """Issue 31: traffic -n 8 on the 1024-GPU fabric printed ~19 KB of per-uplink counters,
    almost all zero: the idle ones are counted, not listed, past a few."""
    from railab.cli.traffic import COUNTS_SHOWN, counts_text

    few = {"a": 2, "b": 0, "c": 1}
    assert counts_text(few) == "a=2, c=1, b=0"
    many = {f"l{i}": (1 if i in (3, 700) else 0) for i in range(4096)}
    text = counts_text(many)
    assert text == "l3=1, l700=1, ... and 4,094 more at 0" and len(text) < 100
    assert COUNTS_SHOWN >= 8


def test_failed_flows_are_filed_under_the_check_root_cause_on_their_path(spec):
    """Issue 31: traffic names a failure as railab check does. Flows dropped at a leaf whose
    bgpd is dead follow check's ``daemon-dead`` root; a flow lost on a crossed cable follows
    check's ``miswired`` root (one for the crossed pair); a flow nothing in check explains keeps
    its own cause and is listed as not attributed."""
    from railab.checks.base import Cause, failed
    from railab.cli.traffic import flow_root_causes, unattributed

    fl = {f"{f.src[0]}:{f.src_nic}>{f.dst[0]}:{f.dst_nic}": f for f in flows_for(spec, "cross-group")}
    via_leaf1 = fl["srv1:1>srv3:1"]  # g1-leaf1 -> spine -> g2-leaf1
    via_leaf2 = fl["srv1:2>srv4:2"]  # g1-leaf2 -> spine -> g2-leaf2
    via_leaf3 = fl["srv1:3>srv3:3"]
    lost = dict(sent=16, delivered=0, lost=16)
    results = [FlowResult(flow=via_leaf1, path=["g1-leaf1:eth3"], **lost),
               FlowResult(flow=via_leaf2, unreachable_at="g1-leaf2", **lost),
               FlowResult(flow=via_leaf3, path=["g1-leaf3:eth3"], **lost)]
    dead = failed("daemons", "g1-leaf1 daemons", node="g1-leaf1",
                  cause=Cause(kind="daemon-dead", node="g1-leaf1", daemon="bgpd"))
    crossed = Cause(kind="miswired", node="srv1", port="eth2", link="g1-leaf2:eth1--srv1:eth2")
    nic2 = failed("cabling", "srv1 NIC 2", node="srv1", port="eth2",
                  link="g1-leaf2:eth1--srv1:eth2", cause=crossed)
    nic2b = failed("cabling", "srv2 NIC 2", node="srv2", port="eth2",
                   link="g1-leaf2:eth2--srv2:eth2", cause=crossed)
    groups = [(dead, []), (nic2, [nic2b])]
    causes = flow_root_causes(spec, results, groups=groups)
    by_kind = {c["cause"]["kind"]: c for c in causes}
    assert set(by_kind) == {"daemon-dead", "miswired", "dropped"}, causes
    assert by_kind["daemon-dead"]["root"] == results[0].flow.name and by_kind["daemon-dead"]["attributed"]
    assert by_kind["daemon-dead"]["text"] == f"bgpd is dead on g1-leaf1: railab restart {spec.name} g1-leaf1"
    assert by_kind["miswired"]["cause"]["node"] == "srv1" and by_kind["miswired"]["cause"]["port"] == "eth2"
    assert not by_kind["dropped"]["attributed"] and "not attributed" in by_kind["dropped"]["text"]
    assert unattributed(causes) == [results[2].flow.name]
    # without check's groups the same flows only say where packets stopped
    plain = flow_root_causes(spec, results)
    assert {c["cause"]["kind"] for c in plain} == {"dropped", "unreachable"}
    assert len(unattributed(plain)) == 3


def test_a_missing_interface_fails_the_flow_naming_it(spec):
    """A pulled cable or a parked far end (the interface is gone): the flow is not sent and
    fails naming the interface; its cause is link-down on that link (as railab check)."""
    from railab.checks.hops import flow_cause

    f = flows_for(spec, "intra-rail")[0]  # srv1:gpu0 -> srv2:gpu0
    r = FlowResult(flow=f, port_missing="g1-leaf1:eth2")
    assert not r.ok and r.verdict.startswith("g1-leaf1:eth2 does not exist")
    assert r.to_dict()["port_missing"] == "g1-leaf1:eth2"
    c = flow_cause(spec, r)
    assert (c.kind, c.node, c.port, c.link) == ("link-down", "g1-leaf1", "eth2", "g1-leaf1:eth2--srv2:eth1")


def test_a_nic_that_refuses_every_frame_stops_the_flow(spec, monkeypatch):
    """Issue 31: grey loss (an nftables egress drop) on a server NIC makes every send answer
    ENOBUFS; the engine retried forever (railab traffic and check hung). After TX_STALL_S
    without one frame accepted the flow stops, failing with ``tx_refused`` naming the NIC."""
    import errno as _errno

    from railab.traffic import engine as E

    class Tpl(_Tpl):
        def frame(self, psn, ack):
            return b"x" * self.size

    class Refusing:
        def send(self, frame):
            raise OSError(_errno.ENOBUFS, "No buffer space available")

        def getsockname(self):
            return ("eth1", 0, 0, 0, b"")

    flow = flows_for(spec, "intra-rail")[0]
    st = E._FlowState()
    st.flow, st.res, st.sent, st.seq, st.tx, st.stall = flow, FlowResult(flow=flow), 0, [Tpl()] * 4, \
        Refusing(), None
    st.start_psn = 0
    eng = E.Engine(spec)
    clock = iter([0.0, 0.5, 0.5 + E.TX_STALL_S + 0.1])
    monkeypatch.setattr(E.time, "monotonic", lambda: next(clock))
    for _ in range(3):
        eng._send_some(st, 4)
    assert st.res.tx_refused == "srv1:eth1" and st.sent == 0
    assert not st.res.ok and st.res.verdict.startswith("srv1:eth1 refused every frame")
    assert st.res.to_dict()["tx_refused"] == "srv1:eth1"


def test_traffic_does_not_run_check_when_an_exercise_switched_it_off(monkeypatch):
    """A training exercise with ``--disable check``: traffic must not name the hidden fault
    through check's families (check_groups gives None, the flows stay not attributed)."""
    from railab.checks import lab as L
    from railab.cli import exercise as X
    from railab.cli.traffic import check_groups
    from railab.errors import UsageError

    def refuse(command, args):
        raise UsageError(f"railab {command} is switched off")

    def boom(ref):
        raise AssertionError("check ran")

    monkeypatch.setattr(X, "gate", refuse)
    monkeypatch.setattr(L.LiveLab, "attach", classmethod(lambda cls, ref: boom(ref)))
    assert check_groups("trainx") is None


def test_traffic_attributes_nothing_to_check_while_an_exercise_runs_below_full_detail(monkeypatch, tmp_path):
    """Issue 48: check's root causes carry the element and the repair (``railab restart LAB
    NODE``); while an exercise runs below ``full`` check detail, traffic files no flow under them."""
    from types import SimpleNamespace

    from railab.checks import lab as L
    from railab.checks import runner
    from railab.cli.traffic import check_groups
    from railab.testbed import exercise as store

    monkeypatch.setenv("RAILAB_EXERCISE_DIR", str(tmp_path / "ex"))
    ran = []
    monkeypatch.setattr(L.LiveLab, "attach", classmethod(
        lambda cls, ref: SimpleNamespace(name="trainy", spec=None, executor=None, netns_of=None)))
    monkeypatch.setattr(runner, "run_checks", lambda *a, **k: ran.append(1) or [])
    assert check_groups("trainy") == [] and ran == [1]  # no exercise: check runs
    for detail, runs in (("node", False), ("element", False), ("full", True)):
        ran.clear()
        store.save("trainy", {}, {"lab": "trainy", "level": 2, "revealed": False, "check_detail": detail})
        assert (check_groups("trainy") is None) is not runs and bool(ran) is runs, detail


def test_traceroute_from_a_nic_that_refuses_or_cannot_fit_the_probe_says_so():
    """Issue 31: grey loss on the source NIC made railab traceroute die with a traceback
    (ENOBUFS from the probe's send); an MTU below the probe, likewise (EMSGSIZE)."""
    from railab.traffic.engine import Hop
    from railab.traffic.traceroute import format_path

    assert format_path([Hop(1, None, "srv2:eth3", None, "tx-refused")]).startswith(
        "srv2:eth3 refused the probe (ENOBUFS")
    assert format_path([Hop(1, None, "srv2:eth3", None, "mtu-exceeded")]) == \
        "srv2:eth3's MTU is below the probe: not sent"


@pytest.mark.parametrize("rate", [40.0, 100.0, 200.0, 400.0, 1000.0, 10000.0])
def test_default_load_run_covers_at_least_10_ms_of_fabric_time(rate):
    """Issue 43: a default load run on any capacity lab covers at least 10 ms of fabric time
    (at 40 Mb/s the old 60 s cap left 6 ms), at most 15 ms, and never exceeds the longest run."""
    from types import SimpleNamespace

    from railab.cli.traffic import MAX_LOAD_S, default_load_seconds
    from railab.topologies.qos import CapacityProfile

    cap = CapacityProfile(enabled=True, port_rate_mbps=rate)
    secs = default_load_seconds(SimpleNamespace(qos=SimpleNamespace(capacity=cap)))
    fabric_ms = secs / cap.time_scale * 1e3
    assert secs <= MAX_LOAD_S
    assert fabric_ms >= 10.0 - 1e-6
    assert fabric_ms <= 15.0 + 1e-6 or secs == 8.0  # a fast lab's run is at least 8 lab s


def test_a_shut_session_root_is_named_at_its_end():
    """check's ``session-shut`` cause (issue 48 review C) in traffic's root-cause words."""
    from types import SimpleNamespace as N

    from railab.cli.traffic import cause_text

    c = N(kind="session-shut", node="g1-leaf2", port="eth3", link="g1-leaf2:eth3--spine1:eth2", daemon=None,
          prefix=None)
    assert cause_text(N(cause=c, name="srv1:gpu1->srv3:gpu1", reason="lost"), "mini") == (
        "BGP session on g1-leaf2:eth3--spine1:eth2 is shut at g1-leaf2:eth3 (neighbor shutdown)")
