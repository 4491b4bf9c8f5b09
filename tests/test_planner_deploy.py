"""The planner as a deployment tool (issue 16): lab port budgets, plan warnings carried into the
lab, NIC vs fabric speed, breakout-aware optics, the cabling CSV, ``--compare`` across models
and three tiers past the two-tier limit. Root-free."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from railab.cli.generate import register as register_generate
from railab.cli.plan import register as register_plan
from railab.topologies.cabling import (
    CSV_COLUMNS,
    csv_text,
    lab_cables,
    layout_breakouts,
    plan_wiring,
    spec_breakouts,
    wire,
)
from railab.topologies.catalog import load_catalog
from railab.topologies.generator import build_lab, layout_of
from railab.topologies.intent import IntentError, load_intent, parse_intent, resolve_lab
from railab.topologies.naming import production_port, production_port_name
from railab.topologies.planner import Design, PlanError, compare, plan

INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"
MINI = yaml.safe_load((INTENTS / "mini.yml").read_text())
CAT = load_catalog()


def _lab(**lab) -> dict:
    d = copy.deepcopy(MINI)
    d["lab"] = {"kind": "frr", **lab}
    return d


@pytest.fixture(scope="module")
def cli():
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        pass

    register_plan(app)
    register_generate(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


# ---- lab port budgets (the three accepted-but-impossible shapes of the issue) ------------------

BUDGET_CORPUS = [
    ("17 groups x 8 rails on 1 spine",
     dict(groups=17, servers_per_group=1, rails=8, spines=1),
     [r"^intent x: lab\.groups: a spine would use 136 ports", r"port budget is 128 x 400G "
      r"\(CX864E-N\)", r"at most 128$"]),
    ("200 spines at 1:100",
     dict(groups=1, servers_per_group=2, rails=2, spines=200, oversubscription="1:100"),
     [r"^intent x: lab\.spines: a leaf would use 202 ports \(2 server downlinks",
      r"\+ 200 uplinks = lab\.spines x lab\.links_per_pair", r"port budget is 128 x 400G"]),
    ("65 spines, 65 servers per group",
     dict(groups=1, servers_per_group=65, rails=2, spines=65),
     [r"^intent x: lab\.servers_per_group: a leaf would use 130 ports", r"port budget is 128"]),
]


@pytest.mark.parametrize("lab, fragments", [c[1:] for c in BUDGET_CORPUS],
                         ids=[c[0] for c in BUDGET_CORPUS])
def test_impossible_lab_shapes_give_one_clear_error(lab, fragments, tmp_path):
    import re
    data = {**_lab(**lab), "name": "x"}
    with pytest.raises(IntentError) as exc:
        parse_intent(data, source="x")
    msg = str(exc.value)
    for frag in fragments:
        assert re.search(frag, msg), msg
    assert msg.count("port budget") == 1  # one error for the one violated limit
    # generate leaves nothing behind
    p = tmp_path / "x.yml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(IntentError):
        from railab.topologies.generator import generate
        generate(p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_two_violated_limits_give_two_errors():
    data = {**_lab(groups=17, servers_per_group=100, rails=8, spines=1,
                   oversubscription="100:1"), "name": "x"}
    with pytest.raises(IntentError) as exc:
        parse_intent(data, source="x")
    msg = str(exc.value)
    assert "lab.servers_per_group: a leaf would use 101 ports" not in msg  # 101 fits 128
    data["lab"]["servers_per_group"] = 130
    data["lab"]["oversubscription"] = "130:1"
    with pytest.raises(IntentError) as exc:
        parse_intent(data, source="x")
    msg = str(exc.value)
    assert "lab.servers_per_group: a leaf would use 131 ports" in msg
    assert "lab.groups: a spine would use 136 ports" in msg


def test_mixed_speeds_budget_counts_cages():
    # 400G NICs, 800G fabric on CX864E-N: 64 cages; 100 downlinks (50 cages) + 20 x 800G (20)
    data = _lab(groups=1, servers_per_group=100, rails=1, spines=20, oversubscription="5:2")
    data["design"] = {**data["design"], "fabric_speed_gbps": 800}
    with pytest.raises(IntentError, match=r"lab\.servers_per_group: a leaf would fill 70 cages"):
        parse_intent(data)


def test_lab_larger_than_design_warns(cli, tmp_path):
    data = _lab(groups=3, servers_per_group=2, rails=2, spines=2)  # design: 2 groups
    s = resolve_lab(parse_intent(data))
    assert s.warnings == ("lab.groups is 3 but the production design has 2: the lab is larger "
                          "than the fabric it models (design 1024 GPUs)",)
    p = tmp_path / "big.yml"
    p.write_text(yaml.safe_dump({**data, "name": "plbig"}))
    r = cli("generate", str(p), "-o", str(tmp_path / "lab"))
    assert r.exit_code == 0, r.output
    assert "warning: lab.groups is 3 but the production design has 2" in r.output
    doc = json.loads((tmp_path / "lab" / "lab.json").read_text())
    assert doc["warnings"] == list(s.warnings)


def test_plan_warnings_reach_lab_json_generate_and_report(cli, tmp_path):
    from railab.report import LabSummary, Report, _scale_rows
    from railab.topologies.labspec import LabSpec

    data = _lab(groups=2, servers_per_group=2, rails=4, spines=2)
    data["design"] = {**data["design"], "gpus": 1536}  # 5-6 links per pair, uneven ECMP
    p = tmp_path / "i1536.yml"
    p.write_text(yaml.safe_dump({**data, "name": "pl1536"}))
    r = cli("generate", str(p), "-o", str(tmp_path / "lab"))
    assert r.exit_code == 0, r.output
    assert "warning: 64 leaf uplinks do not split evenly over 12 spines" in r.output
    spec = LabSpec.load(tmp_path / "lab")
    assert any("do not split evenly" in w for w in spec.warnings)
    rep = Report(lab=LabSummary.from_spec(spec), design=spec.design)
    rows = {name: (prod, lab) for name, prod, lab in _scale_rows(rep)}
    assert rows["links per leaf-spine pair"] == ("5-6", "1")
    assert rep.lab.warnings == spec.warnings


# ---- speeds and optics ---------------------------------------------------------------------


def test_nic_and_fabric_speed_apart():
    p = plan(Design(architecture="rail-optimized", gpus=1024, leaf="CX864E-N",
                    nic_speed_gbps=400, fabric_speed_gbps=800))
    assert (p.nic_speed_gbps, p.fabric_speed_gbps) == (400, 800)
    assert (p.leaf_downlinks, p.leaf_uplinks) == (64, 32)  # 32 cages each way
    assert p.leaf_downlink_gbps == p.leaf_uplink_gbps == 25600 and p.oversubscription_actual == "1:1"
    assert (p.spine_ports, p.spine_switches, p.links_per_leaf_spine_pair) == (64, 8, 4)
    assert p.limits.max_gpus == 4096  # 64-port spines at 800G reach 8 groups
    # port_speed_gbps alone keeps meaning both
    q = plan(Design(architecture="rail-optimized", gpus=1024, leaf="CX864E-N", port_speed_gbps=400))
    assert (q.nic_speed_gbps, q.fabric_speed_gbps, q.leaf_uplinks) == (400, 400, 64)


def test_optics_are_breakout_aware_with_sources():
    p = plan(Design(architecture="rail-optimized", gpus=1024, leaf="CX864E-N"))
    lines = {o.where: o for o in p.optics_detail}
    assert lines["server NIC"].count == 1024 and lines["server NIC"].links_each == 1
    # an 800G twin-port OSFP serves two 400G links: 128 ports per leaf = 64 transceivers
    assert lines["leaf"].count == 16 * 64 and lines["leaf"].links_each == 2
    assert "twin-port 2x400G" in lines["leaf"].part
    assert lines["spine"].count == 8 * 64
    assert p.optics == 2560 < 2 * p.total_links
    assert [c.count for c in p.cables] == [1024, 1024]
    assert any("MMS4X00-NM" in a and "docs.nvidia.com" in a for a in p.assumptions)
    # native 400G QSFP-DD cages: one transceiver per link end
    q = plan(Design(architecture="rail-optimized", gpus=256, leaf="CX732Q-N"))
    ql = {o.where: o for o in q.optics_detail}
    assert ql["leaf"].links_each == 1 and ql["leaf"].part == "400G QSFP-DD"
    assert q.optics == 2 * q.total_links


def test_cli_plan_prints_optics_and_assumptions(cli):
    r = cli("plan", "--gpus", "1024", "--arch", "rail-optimized", "--nic-speed", "400G",
            "--fabric-speed", "800G")
    assert r.exit_code == 0, r.output
    assert "400G NICs, 800G fabric" in r.output
    assert "Optics and cables" in r.output and "assumption:" in r.output


# ---- the cabling CSV ------------------------------------------------------------------------


def test_production_port_numbering():
    assert production_port(24, breakout=2) == (12, 2)
    assert production_port_name(24, breakout=2) == ("Ethernet92", "etp12b")
    assert production_port_name(5) == ("Ethernet32", "etp5")


def test_cabling_csv_of_the_1024_gpu_plan(cli, tmp_path):
    out = tmp_path / "cabling.csv"
    r = cli("plan", "--gpus", "1024", "--arch", "rail-optimized", "--leaf", "CX864E-N",
            "--cabling", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.splitlines()[0] == ",".join(CSV_COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text)))
    kinds = [row["kind"] for row in rows]
    assert kinds.count("server-leaf") == 1024 and kinds.count("leaf-spine") == 1024
    assert len(rows) == 2048
    # every switch port is used once; NIC N on the rail-N leaf of its group
    ends = [(row[f"{e}_node"], row[f"{e}_port"]) for row in rows for e in "ab"]
    assert len(ends) == len(set(ends))
    srv = [row for row in rows if row["kind"] == "server-leaf"]
    assert all(row["b_node"] == f"g{row['group']}-leaf{row['rail']}"
               and row["a_port"] == f"eth{row['rail']}" for row in srv)
    # production names: 400G ports of 800G cages, 2 per cage
    first_up = next(row for row in rows if row["kind"] == "leaf-spine")
    assert (first_up["a_node"], first_up["a_port"], first_up["a_cage"], first_up["a_subport"],
            first_up["a_sonic"]) == ("g1-leaf1", "eth65", "33", "1", "Ethernet256")
    assert (first_up["b_node"], first_up["b_port"], first_up["b_sonic"]) == ("spine1", "eth1",
                                                                           "Ethernet0")


def test_plan_cabling_matches_the_generated_full_lab():
    """The 1024-GPU plan's rows are the rows of the generated ``lab: full`` lab (same cabling
    rule, same numbering), and the cabling check reads those rows (lab_cables)."""
    built = build_lab(load_intent("rail-optimized-1024-full"))
    p = plan(Design(architecture="rail-optimized", gpus=1024, leaf="CX864E-N"))
    w, brk = plan_wiring(p, CAT)
    assert csv_text(w.cables, brk) == csv_text(lab_cables(built.spec), spec_breakouts(built.spec))


@pytest.mark.parametrize("intent", ["mini", "rail-only-512", "rail-optimized-3tier-mini"])
def test_lab_cabling_is_the_generators_numbering(intent, cli, tmp_path):
    it = load_intent(intent)
    shape = resolve_lab(it)
    lay = layout_of(shape)
    w = wire(lay)
    spec = build_lab(it).spec
    assert w.cables == lab_cables(spec)
    assert layout_breakouts(lay, w) == spec_breakouts(spec)
    out = tmp_path / "lab.csv"
    r = cli("generate", intent, "-o", str(tmp_path / "lab"), "--name", "plcab",
            "--cabling", str(out))
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(spec.links)
    assert {(row["a_node"], row["a_port"], row["b_node"], row["b_port"]) for row in rows} == {
        (lk.a.node, lk.a.interface, lk.b.node, lk.b.interface) for lk in spec.links}


# ---- --compare -------------------------------------------------------------------------------


def test_compare_shows_every_column_with_reasons(cli):
    res = compare(Design(gpus=1024, leaf="CX732Q-N"), CAT, ["CX864E-N", "CX732Q-N"])
    assert list(res) == ["rail-only CX864E-N", "rail-optimized CX864E-N", "rail-only CX732Q-N",
                         "rail-optimized CX732Q-N"]
    assert res["rail-only CX732Q-N"]["plan"] is None
    assert "past the Rail-only limit" in res["rail-only CX732Q-N"]["error"]
    assert res["rail-optimized CX732Q-N"]["plan"]["tiers"] == 3  # past 512 GPUs: three tiers
    # one model, both archs impossible -> still a table, no exception
    one = compare(Design(gpus=1024, leaf="CX732Q-N", tiers=2), CAT)
    assert all(v["plan"] is None and v["error"] for v in one.values())
    r = cli("plan", "--gpus", "1024", "--compare", "--leaf", "CX864E-N,CX732Q-N")
    assert r.exit_code == 0, r.output
    assert "rail-only CX732Q-N is impossible:" in r.output and "impossible" in r.output
    r = cli("plan", "--gpus", "1024", "--compare", "--leaf", "CX732Q-N", "--tiers", "2")
    assert r.exit_code == 0, r.output
    assert r.output.count("is impossible:") == 2
    r = cli("plan", "--gpus", "1024", "--compare", "--leaf", "all", "--json")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 4
    with pytest.raises(PlanError, match="whole number"):
        compare(Design(gpus=1001, leaf="CX864E-N"), CAT, ["CX864E-N", "CX732Q-N"])


# ---- three tiers ---------------------------------------------------------------------------


def test_16384_gpus_plan_three_tiers(cli):
    r = cli("plan", "--gpus", "16384", "--arch", "rail-optimized", "--leaf", "CX864E-N", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["tiers"] == 3 and doc["beyond_seed"] is True
    assert doc["superspine_switches"] == 128
    assert (doc["pods"], doc["groups_per_pod"], doc["spines_per_pod"]) == (4, 8, 64)
    assert (doc["spine_downlinks"], doc["spine_uplinks"]) == (64, 64)  # 1:1 at the pod spine
    assert doc["superspines_per_plane"] == 2 and doc["links_per_spine_superspine_pair"] == 32
    assert doc["total_switches"] == 256 + 256 + 128
    assert doc["hops"]["cross-pod"] == 5 and doc["latency_ns"]["cross-pod"] == 2 * 560 * 2 + 560
    assert doc["limits"]["max_pods"] == 128
    assert any(w.startswith("three tiers go beyond the seed guide") for w in doc["warnings"])
    assert any("RFC 7938" in a for a in doc["assumptions"])


def test_three_tier_rules():
    two = plan(Design(architecture="rail-optimized", gpus=8192, leaf="CX864E-N"))
    assert two.tiers == 2 and two.limits.max_gpus == 8192
    # a pod holds half the two-tier maximum
    p = plan(Design(architecture="rail-optimized", gpus=1024, leaf="CX864E-N", tiers=3))
    assert p.tiers == 3 and p.groups_per_pod * p.servers_per_group * p.rails == 8192 // 2
    assert p.pods == 1 and p.spines_per_pod == 64
    with pytest.raises(PlanError, match=r"past the spine radix.*--tiers 3"):
        plan(Design(architecture="rail-optimized", gpus=16384, leaf="CX864E-N", tiers=2))
    with pytest.raises(PlanError, match=r"past the three-tier limit: 128-port CX864E-N "
                                         r"super-spines reach at most 128 pods"):
        plan(Design(architecture="rail-optimized", gpus=4096 * 129, leaf="CX864E-N"))
    with pytest.raises(PlanError, match="Rail-only is a single leaf tier"):
        plan(Design(architecture="rail-only", gpus=512, leaf="CX864E-N", tiers=3))
    partial = plan(Design(architecture="rail-optimized", gpus=8192 + 4096 + 512,
                          leaf="CX864E-N"))
    assert partial.pods == 4 and any("last pod (pod 4) is partial" in w
                                     for w in partial.warnings)


def test_three_tier_lab_intent_rules():
    it = load_intent("rail-optimized-3tier-mini")
    s = resolve_lab(it)
    assert (s.pods, s.groups_per_pod, s.spines, s.superspines, s.superspine_links) == (2, 2, 2, 2, 4)
    assert s.spine_downlinks == s.spine_uplinks == 4  # 1:1 at the pod spine
    spec = build_lab(it).spec
    assert spec.tiers == 3 and spec.expected_hops["cross-pod"] == 5
    assert spec.expected_hops["cross-group"] == 3
    asns = {n.name: n.asn for n in spec.nodes if n.role != "server"}
    assert asns["p1-spine1"] == asns["p1-spine2"] != asns["p2-spine1"]
    assert asns["superspine1"] == asns["superspine2"]
    assert len({v for k, v in asns.items() if "leaf" in k}) == 8
    base = yaml.safe_load((INTENTS / "rail-optimized-3tier-mini.yml").read_text())

    def bad(path: str, value, match: str) -> None:
        d = copy.deepcopy(base)
        cur = d
        *parents, last = path.split(".")
        for k in parents:
            cur = cur[k]
        if value is None:
            cur.pop(last)
        else:
            cur[last] = value
        with pytest.raises(IntentError, match=match):
            parse_intent(d)

    d = copy.deepcopy(base)
    d["design"].pop("tiers")
    assert resolve_lab(parse_intent(d)).pods == 2  # 16384 GPUs: three tiers without asking
    d["design"]["gpus"] = 8192
    with pytest.raises(IntentError, match=r"lab\.pods: the production design is 2-tier"):
        parse_intent(d)
    bad("lab.superspines", 3, r"lab\.superspines: 3 super-spines are not a whole number of planes")
    bad("lab.superspine_links_per_pair", 1, r"lab\.superspine_links_per_pair: a pod spine has 4 "
                                             r"leaf links down and 1 super-spine links up")
    bad("lab.groups", 3, r"lab\.groups: 3 groups do not split evenly over 2 pods")


def test_mixed_speed_lab_generates_with_both_speeds():
    """400G NICs, 800G fabric: server-leaf links at 400G, leaf-spine at 800G; the leaf's
    bandwidth ratio (what the oversub check reads) is 1:1 with half as many uplinks."""
    data = _lab(groups=2, servers_per_group=2, rails=2, spines=1)
    data["design"] = {**data["design"], "nic_speed_gbps": 400, "fabric_speed_gbps": 800}
    spec = build_lab(parse_intent({**data, "name": "plmix"})).spec
    speeds = {(lk.role, lk.speed_gbps) for lk in spec.links}
    assert speeds == {("server-leaf", 400), ("leaf-spine", 800)}
    down = sum(lk.speed_gbps for lk in spec.links if lk.role == "server-leaf"
               and lk.b.node == "g1-leaf1")
    up = sum(lk.speed_gbps for lk in spec.links if lk.role == "leaf-spine"
             and lk.a.node == "g1-leaf1")
    assert down == up == 800
    rows = {c.a_port: c for c in lab_cables(spec) if c.a_node == "g1-leaf1"}
    brk = spec_breakouts(spec)["g1-leaf1"]
    assert brk == (2, 2, 1)  # 2 NIC ports, 2 per cage at 400G, 1 per cage at 800G
    from railab.topologies.cabling import production_end
    assert production_end(rows["eth3"].a_port, *brk)[:3] == (2, 1, "Ethernet8")  # next cage
    data["lab"]["spines"] = 2  # 2 x 800G up for 2 x 400G down is 1:2, not the design's 1:1
    with pytest.raises(IntentError, match=r"lab\.spines: .* oversubscription is 1:1"):
        parse_intent(data)


def test_uneven_split_cabling_never_overfills_a_spine(tmp_path):
    """1536 GPUs: 64 uplinks over 12 spines (5-6 links per pair). The spines taking a sixth
    link rotate leaf by leaf, so each 128-port spine is cabled exactly full, never past it."""
    p = plan(Design(architecture="rail-optimized", gpus=1536, leaf="CX864E-N"))
    assert (p.links_per_leaf_spine_pair, p.links_per_leaf_spine_pair_max) == (5, 6)
    w, brk = plan_wiring(p, CAT)
    per_spine: dict[str, int] = {}
    per_pair: dict[tuple[str, str], int] = {}
    for c in w.cables:
        if c.kind == "leaf-spine":
            per_spine[c.b_node] = per_spine.get(c.b_node, 0) + 1
            per_pair[(c.a_node, c.b_node)] = per_pair.get((c.a_node, c.b_node), 0) + 1
    assert set(per_spine.values()) == {128} and len(per_spine) == 12
    assert set(per_pair.values()) == {5, 6}
    assert {o.where: o.count for o in p.optics_detail}["spine"] == 12 * 64
