"""One home per concept (issue 11): naming, node kinds, path classes, QoS, BFD, ratios, LabSpec
indexes, error classes; a dummy node kind / path class / traffic pattern registered in one module
(tests/dummy_registrations.py) shows up in lab.json and in the CLI."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from railab.errors import EXIT_USAGE, UsageError
from railab.topologies import naming
from railab.topologies.bfd import DEFAULT_BFD
from railab.topologies.catalog import CatalogError
from railab.topologies.generator import OutputError, build_lab
from railab.topologies.intent import INTENTS_DIR, IntentError, load_intent, parse_intent, resolve_lab
from railab.topologies.nodekinds import FRR_DAEMONS, get_node_kind, node_kinds
from railab.topologies.pathclasses import Fabric, lab_hops, path_classes, plan_hops
from railab.topologies.planner import Design, PlanError, plan
from railab.topologies.qos import DEFAULT_QOS, EcnProfile, QosProfile
from railab.topologies.sonic import SonicSwitch, config_db
from railab.topologies.units import RatioError, parse_ratio, ratio_parts
from railab.traffic.patterns import PATTERNS, PatternError, flows_for

TESTS = Path(__file__).resolve().parent
PID = os.getpid()


def _mini(**lab) -> dict:
    data = copy.deepcopy(yaml.safe_load((INTENTS_DIR / "mini.yml").read_text()))
    data["lab"].update(lab)
    return data


@pytest.fixture
def dummy():
    """Import tests/dummy_registrations.py (registers a kind, a path class, a pattern)."""
    sys.modules.pop("dummy_registrations", None)
    sys.path.insert(0, str(TESTS))
    try:
        mod = importlib.import_module("dummy_registrations")
    finally:
        sys.path.remove(str(TESTS))
    yield mod
    mod.unregister()
    sys.modules.pop("dummy_registrations", None)


# ---- naming -------------------------------------------------------------------------------------


def test_naming_rules():
    assert naming.netns_name("lab1", "g1-leaf2") == "clab-lab1-g1-leaf2" == naming.container_name("lab1", "g1-leaf2")
    assert naming.node_of_netns("lab1", "clab-lab1-srv3") == "srv3"
    assert naming.node_of_netns("lab1", "clab-lab2-srv3") == ""
    assert (naming.spine_name(2), naming.leaf_name(3), naming.leaf_name(9, group=2, rail=4),
            naming.server_name(5)) == ("spine2", "leaf3", "g2-leaf4", "srv5")
    assert naming.eth(3) == "eth3" and naming.eth_index("eth12") == 12
    with pytest.raises(naming.NamingError):
        naming.eth_index("Ethernet0")
    assert naming.check_lab_name("mini-2") == "mini-2"
    with pytest.raises(ValueError, match="not a valid lab name"):
        naming.check_lab_name("Mini")


def test_sonic_port_names_round_trip():
    assert [naming.sonic_port(f"eth{k}") for k in (1, 2, 32)] == ["Ethernet0", "Ethernet4", "Ethernet124"]
    assert all(naming.eth_of_sonic(naming.sonic_port(f"eth{k}")) == f"eth{k}" for k in range(1, 33))
    with pytest.raises(ValueError, match="32 data ports"):
        naming.sonic_port("eth33", max_ports=get_node_kind("sonic-vs").max_ports)
    with pytest.raises(ValueError):
        naming.sonic_port("lo")
    with pytest.raises(ValueError):
        naming.eth_of_sonic("Ethernet2")


def test_breakout_port_names():
    # an 800G cage (8 lanes) split 2 x 400G: sub-ports start at lanes 0 and 4 of the cage
    assert naming.breakout_port(12, 1, breakout=2) == "Ethernet88"
    assert naming.breakout_port(12, 2, breakout=2) == "Ethernet92"
    assert naming.breakout_port(1) == "Ethernet0" and naming.breakout_port(2) == "Ethernet8"
    assert naming.breakout_port(3, 4, breakout=4) == "Ethernet22"
    assert naming.breakout_alias(12, 2, breakout=2) == "etp12b" and naming.breakout_alias(7) == "etp7"
    assert naming.parse_breakout_port("Ethernet92", breakout=2) == (12, 2)
    for cage in (1, 5, 64):
        for sub in (1, 2):
            name = naming.breakout_port(cage, sub, breakout=2)
            assert naming.parse_breakout_port(name, breakout=2) == (cage, sub)
    with pytest.raises(naming.NamingError):
        naming.breakout_port(1, 3, breakout=2)
    with pytest.raises(naming.NamingError):
        naming.breakout_port(1, 1, breakout=3)
    with pytest.raises(naming.NamingError):
        naming.parse_breakout_port("Ethernet90", breakout=2)


# ---- node kinds ---------------------------------------------------------------------------------


def test_shipped_node_kinds():
    kinds = node_kinds()
    assert list(kinds)[:3] == ["frr", "sonic-vs", "linux"]
    assert kinds["frr"].daemons == FRR_DAEMONS == ("zebra", "staticd", "bgpd", "bfdd")
    assert kinds["sonic-vs"].max_ports == 32 and kinds["linux"].role == "server"
    # the netns runtime reads the same ordered daemons
    from railab.testbed.clabfile import FRR_DAEMONS as runtime_daemons
    assert runtime_daemons == kinds["frr"].daemons


def test_dummy_node_kind_in_lab_json_and_clab(dummy):
    built = build_lab(parse_intent(_mini(kind=dummy.KIND)), name=f"dk{PID}")
    lab = json.loads(built.files["lab.json"])
    assert {n["kind"] for n in lab["nodes"] if n["role"] != "server"} == {dummy.KIND}
    assert lab["node_kinds"][dummy.KIND]["image"] == "example/dummy-sw:1.0"
    assert lab["node_kinds"][dummy.KIND]["daemons"] == ["zebra", "bgpd"]
    node = built.topology["topology"]["nodes"]["g1-leaf1"]
    assert node["image"] == "example/dummy-sw:1.0" and node["kind"] == "linux"
    assert "configs/g1-leaf1/daemons:/etc/frr/daemons" in node["binds"]
    daemons = built.files["configs/g1-leaf1/daemons"]
    assert "bgpd=yes" in daemons and "staticd=no" in daemons and "bfdd=no" in daemons
    # and the path class registered in the same module is in lab.json (2 groups, Rail-optimized)
    assert lab["expected_hops"][dummy.PATH_CLASS] == 5


def test_unknown_kind_lists_registered(dummy):
    with pytest.raises(IntentError, match=f"lab.kind:.*frr, sonic-vs, {dummy.KIND}"):
        parse_intent(_mini(kind="ceos"))


def test_dummy_registrations_in_cli(dummy):
    from railab.cli import app

    r = CliRunner().invoke(app, ["kinds", "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    assert dummy.KIND in rec["node_kinds"] and rec["node_kinds"]["frr"]["daemons"] == list(FRR_DAEMONS)
    assert dummy.PATH_CLASS in rec["path_classes"] and dummy.PATTERN in rec["patterns"]
    r = CliRunner().invoke(app, ["kinds"])
    assert r.exit_code == 0 and dummy.KIND in r.output and dummy.PATTERN in r.output


def test_dummy_pattern_in_traffic_help_and_flows(dummy, labs_mini):
    assert dummy.PATTERN in PATTERNS
    fl = flows_for(labs_mini, dummy.PATTERN)
    assert [(f.src, f.dst, f.path_class, f.expected_hops) for f in fl] == [
        (("srv1", 0), ("srv4", 0), "cross-group", 3)]
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import dummy_registrations; "
            "from railab.cli import main; sys.argv = ['railab', 'traffic', '--help']; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "200"}, check=False)
    assert p.returncode == 0, p.stderr
    assert dummy.PATTERN in p.stdout


def test_unknown_pattern_lists_registered(labs_mini):
    with pytest.raises(PatternError, match="use one of intra-server, intra-rail"):
        flows_for(labs_mini, "nope")


@pytest.fixture(scope="module")
def labs_mini():
    from railab.topologies.labspec import LabSpec

    return LabSpec.model_validate_json(build_lab(load_intent("mini"), name=f"rm{PID}").files["lab.json"])


# ---- path classes -------------------------------------------------------------------------------


@pytest.mark.parametrize("intent", ["mini", "rail-only-256", "rail-only-512", "rail-optimized-1024"])
def test_planner_and_generator_agree_on_hops(intent):
    """lab.json and the planner compute hops from one registry: on the lab's own shape, every
    class both list has the same hop count."""
    it = load_intent(intent)
    s = resolve_lab(it)
    spec = build_lab(it, name=f"pa{PID}").spec
    fab = Fabric(s.architecture, s.rails, s.rails_per_leaf, s.groups)
    planned, _ = plan_hops(fab)
    assert spec.expected_hops == lab_hops(fab)
    for cls in set(planned) & set(spec.expected_hops):
        assert planned[cls] == spec.expected_hops[cls], cls


def test_rail_only_one_leaf_labels_reconciled():
    """A Rail-only leaf carrying every rail: inter-rail is 1 hop for the planner and lab.json
    alike, and no separate inter-rail-same-leaf class (before: the planner said 1, the
    generator None plus inter-rail-same-leaf 1)."""
    data = yaml.safe_load((INTENTS_DIR / "rail-only-512.yml").read_text())
    data["lab"]["rails_per_leaf"] = data["lab"]["rails"]
    spec = build_lab(parse_intent(data), name=f"ol{PID}").spec
    assert spec.expected_hops["inter-rail"] == 1 and "inter-rail-same-leaf" not in spec.expected_hops
    p = plan(Design(architecture="rail-only", gpus=128, leaf="CX864E-N"))
    assert p.rails_per_leaf == 8 and p.hops["inter-rail"] == 1
    fl = flows_for(spec, "inter-rail")
    assert fl and all(f.expected_hops == 1 for f in fl)


def test_path_class_registry_order_is_the_report_order():
    from railab.report import PATH_CLASS_ORDER, PATH_CLASS_TEXT

    assert PATH_CLASS_ORDER[:6] == ("intra-server", "intra-rail", "inter-rail-same-leaf",
                                    "inter-rail", "inter-rail-pxn", "cross-group")
    assert PATH_CLASS_TEXT["inter-rail"] == path_classes()["inter-rail"].description


# ---- QoS and BFD --------------------------------------------------------------------------------


def test_qos_profile_drives_config_db_and_lab_json():
    spec = build_lab(parse_intent(_mini(kind="sonic-vs")), name=f"qs{PID}").spec
    assert spec.qos == DEFAULT_QOS
    assert json.loads(spec.dump())["qos"]["ecn"] == {"kmin_bytes": 1048576, "kmax_bytes": 2097152,
                                                     "pmax_percent": 5, "mode": "ecn_all"}
    assert DEFAULT_QOS.pfc.priorities == (3, 4) and DEFAULT_QOS.pfc.xon_bytes < DEFAULT_QOS.pfc.xoff_bytes
    custom = QosProfile(roce_dscp=24, ecn=EcnProfile(kmin_bytes=500_000, kmax_bytes=1_500_000,
                                                     pmax_percent=10))
    db = config_db(SonicSwitch(name="l1", role="leaf", asn=1, loopback="10.0.0.1", mtu=9100,
                               fabric_ports=["eth1"], qos=custom))
    assert db["DSCP_TO_TC_MAP"]["AZURE"]["24"] == "3" and db["DSCP_TO_TC_MAP"]["AZURE"]["26"] == "0"
    wred = db["WRED_PROFILE"]["AZURE_LOSSLESS"]
    assert (wred["green_min_threshold"], wred["green_max_threshold"], wred["green_drop_probability"]) == (
        "500000", "1500000", "10")
    assert db["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3,4"


def test_bfd_profile_in_frr_conf_and_lab_json():
    default = build_lab(load_intent("mini"), name=f"bd{PID}")
    conf = default.files["configs/g1-leaf1/frr.conf"]
    assert "  detect-multiplier 5\n  receive-interval 300\n  transmit-interval 300\n" in conf
    assert default.spec.bfd == DEFAULT_BFD and default.spec.bfd.detect_ms == 1500
    fast = build_lab(parse_intent(_mini(bfd={"tx_ms": 100, "rx_ms": 150, "multiplier": 3})),
                     name=f"bf{PID}")
    conf = fast.files["configs/g1-leaf1/frr.conf"]
    assert "detect-multiplier 3" in conf and "receive-interval 150" in conf
    assert "transmit-interval 100" in conf
    assert json.loads(fast.files["lab.json"])["bfd"]["rx_ms"] == 150
    off = build_lab(parse_intent(_mini(bfd={"enabled": False})), name=f"bo{PID}")
    conf = off.files["configs/g1-leaf1/frr.conf"]
    assert "bfd" not in conf.replace("bfdd", "")
    with pytest.raises(IntentError, match="lab.bfd.multiplier"):
        parse_intent(_mini(bfd={"multiplier": 1}))


# ---- ratios, errors -----------------------------------------------------------------------------


def test_one_ratio_parser():
    assert ratio_parts("3:1") == (3, 1) and ratio_parts("2:2") == (2, 2)
    assert ratio_parts("1.5:1") == (3, 2) and parse_ratio("1.5:1") == Fraction(3, 2)
    for bad, msg in (("abc", "malformed"), ("1:0", "no uplinks"), ("0:1", "no ports for servers")):
        with pytest.raises(RatioError, match=msg):
            ratio_parts(bad)
    with pytest.raises(RatioError, match="lab.oversubscription 'x'"):
        ratio_parts("x", "lab.oversubscription")
    from railab.checks.oversub import parse_ratio as check_parse
    assert check_parse is parse_ratio


@pytest.mark.parametrize("cls", [IntentError, PlanError, CatalogError, OutputError, PatternError,
                                 RatioError, naming.NamingError])
def test_topology_errors_are_usage_errors(cls):
    assert issubclass(cls, UsageError) and issubclass(cls, ValueError)
    assert cls("x").exit_code == EXIT_USAGE == 2


# ---- LabSpec indexes ----------------------------------------------------------------------------


def test_labspec_indexed_accessors(labs_mini):
    spec = labs_mini
    assert spec._index is spec._index  # built once
    for lk in spec.links:
        assert spec.peer(lk.a.node, lk.a.interface) == (lk.b.node, lk.b.interface)
        assert spec.peer(lk.b.node, lk.b.interface) == (lk.a.node, lk.a.interface)
        assert spec.link_on(lk.b.node, lk.b.interface) is lk
    for n in spec.nodes:
        want = sorted(
            [(lk.a.interface, lk.b.node, lk.b.interface) for lk in spec.links if lk.a.node == n.name]
            + [(lk.b.interface, lk.a.node, lk.a.interface) for lk in spec.links if lk.b.node == n.name],
            key=lambda t: int(t[0][3:]))
        assert spec.links_of(n.name) == want
    for s in spec.bgp_sessions:
        assert spec.session_on(s.node, s.interface) is s is spec.session_on(s.peer, s.peer_interface)
    assert spec.session_on("srv1", "eth1") is None
    nic = spec.nic("srv2", 3)
    assert spec.nic_at(nic.leaf, nic.leaf_port) is nic and spec.nics_of("srv2")[2] is nic
    with pytest.raises(KeyError, match="no link on srv1:eth99"):
        spec.peer("srv1", "eth99")
    with pytest.raises(KeyError, match="no node"):
        spec.node("nope")


def test_labspec_peers_mapping(labs_mini):
    peers = labs_mini.peers
    assert len(peers) == 2 * len(labs_mini.links)
    lk = labs_mini.links[0]
    assert peers[(lk.a.node, lk.a.interface)] == (lk.b.node, lk.b.interface)
    with pytest.raises(TypeError):
        peers[("x", "y")] = ("z", "w")


def test_report_class_same_leaf():
    """Rail-only 512 (two rails per leaf): inter-rail flows between rails of one leaf are reported
    as inter-rail-same-leaf (1 hop), the others stay inter-rail (unreachable)."""
    from railab.traffic.patterns import report_class

    spec = build_lab(load_intent("rail-only-512"), name=f"rc{PID}").spec
    fl = flows_for(spec, "inter-rail")
    got = {(f.src[1], f.dst[1]): (report_class(spec, f), f.expected_hops) for f in fl}
    assert got[(0, 1)] == ("inter-rail-same-leaf", 1)   # rails 1, 2 on leaf1
    assert got[(1, 2)] == ("inter-rail", None)          # rails 2 (leaf1), 3 (leaf2)
    assert all(report_class(spec, f) == "intra-rail" for f in flows_for(spec, "intra-rail"))
