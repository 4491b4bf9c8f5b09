"""Planner unit and property tests: seed design-guide values, error messages, invariants."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from railab.topologies.catalog import (
    CatalogError,
    SwitchModel,
    UnknownSwitchModel,
    get_model,
    load_catalog,
    parse_speed,
)
from railab.topologies.planner import (
    PATH_CLASSES,
    Design,
    Plan,
    PlanError,
    compare,
    node_table,
    parse_oversubscription,
    plan,
)

CAT = load_catalog()


def P(arch: str, gpus: int, leaf: str = "CX864E-N", **kw) -> Plan:
    return plan(Design(architecture=arch, gpus=gpus, leaf=leaf, **kw), CAT)


# ---- catalog ---------------------------------------------------------------------------------


def test_catalog_seed_models():
    big, small = CAT["CX864E-N"], CAT["CX732Q-N"]
    # seed: "CX864E-N provides 64 x 800G ports, which can be split into 128 x 400G ports"
    assert (big.native_ports, big.native_speed_gbps, big.ports_400g) == (64, 800, 128)
    assert big.ports_at(400) == 128 and big.ports_at(800) == 64
    assert (small.native_ports, small.ports_400g, small.ports_at(400)) == (32, 32, 32)
    assert (big.capacity_tbps, small.capacity_tbps) == (51.2, 12.8)
    assert (big.latency_ns, small.latency_ns) == (560, 500)


def test_catalog_unsupported_speed():
    with pytest.raises(CatalogError, match=r"CX732Q-N has no 800G ports \(supported: 400G\)"):
        CAT["CX732Q-N"].ports_at(800)


def test_unknown_model_lists_known():
    with pytest.raises(UnknownSwitchModel) as ei:
        get_model(CAT, "CX864")
    msg = str(ei.value)
    assert "CX732Q-N, CX864E-N" in msg and "did you mean CX864E-N" in msg and "--catalog" in msg
    assert get_model(CAT, "cx864e-n").name == "CX864E-N"


def test_user_catalog_extends_and_overrides(tmp_path: Path):
    f = tmp_path / "mine.yml"
    f.write_text(
        "switches:\n"
        "  BIG-512:\n    native_ports: 256\n    native_speed_gbps: 800\n"
        "    breakout_speeds_gbps: [400]\n    latency_ns: 700\n"
        "  CX732Q-N:\n    native_ports: 32\n    latency_ns: 450\n"
    )
    cat = load_catalog(f)
    assert cat["BIG-512"].ports_at(400) == 512
    assert cat["BIG-512"].capacity_tbps == pytest.approx(204.8)
    assert cat["CX732Q-N"].latency_ns == 450
    assert cat["CX864E-N"].ports_400g == 128


@pytest.mark.parametrize(
    "text, match",
    [
        ("switches: [1, 2", "not valid YAML"),
        ("models: {}\n", "'switches:' key"),
        ("switches:\n  X:\n    native_ports: -4\n", r"model 'X': native_ports: .*greater than 0"),
        ("switches:\n  X:\n    native_ports: 4\n    colour: red\n", r"model 'X': colour"),
        (
            "switches:\n  X:\n    native_ports: 4\n    native_speed_gbps: 400\n"
            "    breakout_speeds_gbps: [300]\n",
            "whole fraction",
        ),
    ],
)
def test_user_catalog_errors(tmp_path: Path, text: str, match: str):
    f = tmp_path / "bad.yml"
    f.write_text(text)
    with pytest.raises(CatalogError, match=match):
        load_catalog(f)


def test_missing_catalog_file(tmp_path: Path):
    with pytest.raises(CatalogError, match="cannot read switch catalog"):
        load_catalog(tmp_path / "nope.yml")


def test_switch_model_from_ports_400g_only():
    m = SwitchModel(name="X", ports_400g=64)
    assert (m.native_ports, m.ports_at(400)) == (64, 64)
    with pytest.raises(ValueError, match="disagrees"):
        SwitchModel(name="Y", native_ports=64, native_speed_gbps=800, breakout_speeds_gbps=[400],
                    ports_400g=64)


def test_parse_speed():
    assert [parse_speed(s) for s in ("400G", "400g", "800", 200, "1.6T")] == [400, 400, 800, 200, 1600]
    with pytest.raises(CatalogError, match="e.g. 400G"):
        parse_speed("fast")


# ---- seed values: Rail-only ------------------------------------------------------------------


def test_rail_only_cx864_512_gpus():
    # seed: "Number of Leaf Nodes Required = 512 / 128 = 4"; limit 8 leaves, 8 * 128 = 1024 GPUs
    p = P("rail-only", 512)
    assert (p.servers, p.rails, p.leaf_switches, p.spine_switches) == (64, 8, 4, 0)
    assert p.rails_per_leaf == 2
    assert [leaf.name for leaf in p.leaves] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert [leaf.rails for leaf in p.leaves] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert p.limits.max_leaves == 8 and p.limits.max_gpus == 1024 and p.limits.max_servers == 128
    assert p.ports["leaf"].used == 512 and p.ports["leaf"].free == 0
    # breakout-aware optics: 512 NIC optics + 256 twin-port 2x400G leaf optics (issue 16)
    assert p.optics == 768 and p.leaf_spine_links == 0


def test_rail_only_cx732_256_gpus():
    # seed: 32 compute nodes (256 GPUs) with 8 CX732Q-N leaves; limit 256 GPUs / 32 servers
    p = P("rail-only", 256, "CX732Q-N")
    assert (p.servers, p.leaf_switches, p.rails_per_leaf) == (32, 8, 1)
    assert [leaf.rails for leaf in p.leaves] == [[r] for r in range(1, 9)]
    assert (p.limits.max_gpus, p.limits.max_servers, p.limits.max_leaves) == (256, 32, 8)


def test_rail_only_rounds_leaves_up_to_whole_rails():
    # 3 x 128 ports would hold 384 GPUs, but 3 does not divide 8 rails
    p = P("rail-only", 384)
    assert p.leaf_switches == 4 and p.rails_per_leaf == 2
    assert any("whole rails" in w and "4 leaves" in w for w in p.warnings)
    assert P("rail-only", 128).leaf_switches == 1  # one leaf carries all 8 rails


def test_rail_only_hops():
    multi = P("rail-only", 512)
    assert multi.hops == {
        "intra-server": 0, "intra-rail": 1, "inter-rail": None, "inter-rail-pxn": 1,
        "cross-group": None,
        "cross-pod": None,
    }
    assert "2 per leaf" in multi.hop_notes["inter-rail"]
    assert P("rail-only", 128).hops["inter-rail"] == 1  # every rail on the one leaf


# ---- seed values: Rail-optimized -------------------------------------------------------------


def test_rail_optimized_cx864_1024_gpus():
    # seed: 128 nodes, 24 CX864E-N (8 spines, 16 leaves), two groups of 8 leaves
    p = P("rail-optimized", 1024)
    assert p.servers_per_group == 64 and p.servers_per_group * p.gpus_per_server == 512
    assert (p.groups, p.leaf_switches, p.spine_switches, p.total_switches) == (2, 16, 8, 24)
    assert p.leaves_per_group == 8 and p.links_per_leaf_spine_pair == 8
    assert p.links_per_leaf_spine_pair_max == 8 and p.partial_last_group is None
    assert (p.leaf_downlinks, p.leaf_uplinks) == (64, 64)
    assert p.leaf_spine_links == 1024 and p.server_leaf_links == 1024
    # 1024 NIC optics + (1024 leaf + 512 spine) 800G twin-port optics, two 400G links each
    assert p.optics == 2560
    names = [leaf.name for leaf in p.leaves]
    assert names[:8] == [f"g1-leaf{r}" for r in range(1, 9)] and names[-1] == "g2-leaf8"
    assert p.leaves[9].group == 2 and p.leaves[9].rails == [2]
    assert p.spines == [f"spine{i}" for i in range(1, 9)]
    assert p.ports["spine"].used == 1024 and p.ports["spine"].free == 0
    assert p.warnings == []


def test_rail_optimized_cx864_4096_gpus_and_limits():
    p = P("rail-optimized", 4096)
    assert (p.groups, p.leaf_switches, p.spine_switches) == (8, 64, 32)
    # seed formula: spines = (total leaves * M / 2) / N; identical models -> leaves / 2
    assert p.spine_switches == p.leaf_switches * 128 // 2 // 128 == p.leaf_switches // 2
    assert p.links_per_leaf_spine_pair == 2
    # seed: max groups 128 / 8 = 16; max servers 16 * 64 = 1024; max GPUs 16 * 512 = 8192
    assert (p.limits.max_groups, p.limits.max_servers, p.limits.max_gpus) == (16, 1024, 8192)
    assert p.limits.max_leaves == 128


def test_rail_optimized_hops_and_latency():
    p = P("rail-optimized", 1024)
    assert p.hops == {
        "intra-server": 0, "intra-rail": 1, "inter-rail": 3, "inter-rail-pxn": 1,
        "cross-group": 3,
        "cross-pod": None,
    }
    # seed: intra-rail around 600 ns, inter-rail (3-hop) under 2 us
    assert p.latency_ns["intra-rail"] == 560 and p.latency_ns["inter-rail"] == 1680 < 2000
    assert set(p.hops) == set(PATH_CLASSES)


def test_partial_last_group():
    p = P("rail-optimized", 1024 + 256)  # 160 servers: 64 + 64 + 32
    assert p.groups == 3 and p.partial_last_group == 32
    assert [leaf.servers for leaf in p.leaves if leaf.group == 3] == [32] * 8
    assert any("partial" in w for w in p.warnings)


def test_uneven_uplink_split_warns():
    p = P("rail-optimized", 1536)  # 24 leaves x 64 uplinks / 128 = 12 spines; 64 / 12 uneven
    assert p.spine_switches == 12
    assert (p.links_per_leaf_spine_pair, p.links_per_leaf_spine_pair_max) == (5, 6)
    assert any("do not split evenly over 12 spines" in w and "16 spines" in w for w in p.warnings)


def test_uneven_split_with_prime_uplinks_suggests_a_usable_fix():
    """43 uplinks (2:1 on a 128-port leaf) over 6 spines: no spine count near 6 divides 43, so
    the fix is 42 uplinks per leaf (7 per pair), not 43 spines with "1 links" per pair."""
    p = P("rail-optimized", 1024, oversubscription="2:1")
    assert (p.leaf_uplinks, p.spine_switches) == (43, 6)
    (w,) = [w for w in p.warnings if "do not split evenly" in w]
    assert "43 spines" not in w and "1 links" not in w
    assert "1 of the 6 spines gets 8 links per leaf, the others 7" in w
    assert "14% more" in w
    assert "cable 42 uplinks per leaf over the 6 spines (7 links per pair, 1 port per leaf" in w


@pytest.mark.parametrize("ratio, down, up", [("2:1", 85, 43), ("3:1", 96, 32), ("1:1", 64, 64)])
def test_oversubscription_split(ratio: str, down: int, up: int):
    p = P("rail-optimized", 1024, oversubscription=ratio)
    assert (p.leaf_downlinks, p.leaf_uplinks, p.servers_per_group) == (down, up, down)
    if ratio == "3:1":
        assert p.oversubscription_actual == "3:1"
        assert p.groups == math.ceil(128 / 96)
        assert any("blocking" in w for w in p.warnings)
    if ratio == "2:1":
        assert any("do not split exactly 2:1" in w for w in p.warnings)


def test_port_speed_800g():
    p = P("rail-optimized", 1024, port_speed_gbps=800)
    assert p.leaf_ports == 64 and p.servers_per_group == 32 and p.groups == 4


def test_auto_picks_by_rail_only_limit():
    assert P("auto", 1024).architecture == "rail-only"
    p = P("auto", 1032)
    assert p.architecture == "rail-optimized" and p.selected_by == "auto"
    assert P("auto", 512, "CX732Q-N").architecture == "rail-optimized"


def test_compare_both_and_one_failing():
    both = compare(Design(gpus=512, leaf="CX864E-N"), CAT)
    assert both["rail-only"]["plan"]["leaf_switches"] == 4
    assert both["rail-optimized"]["plan"]["spine_switches"] == 4
    one = compare(Design(gpus=4096, leaf="CX864E-N"), CAT)
    assert one["rail-only"]["plan"] is None and "use rail-optimized" in one["rail-only"]["error"]
    assert one["rail-optimized"]["plan"]["groups"] == 8
    with pytest.raises(PlanError, match="whole number"):
        compare(Design(gpus=1001, leaf="CX864E-N"), CAT)


def test_node_table_cx864():
    rows = node_table("CX864E-N", catalog=CAT)
    assert [r["gpus"] for r in rows] == [256, 512, 1024, 2048, 4096, 8192]
    assert [r["groups"] for r in rows] == [1, 1, 2, 4, 8, 16]
    assert [r["leaves"] for r in rows] == [8, 8, 16, 32, 64, 128]
    assert [r["spines"] for r in rows] == [4, 4, 8, 16, 32, 64]
    assert rows[0]["partial_last_group"] == 32 and all(r["error"] is None for r in rows)


def test_node_table_cx732_marks_rows_past_limit():
    rows = node_table("CX732Q-N", catalog=CAT)
    # 32 ports: 16 servers / 128 GPUs per group; max 32 / 8 = 4 groups = 512 GPUs
    assert [(r["groups"], r["leaves"], r["spines"]) for r in rows[:2]] == [(2, 16, 8), (4, 32, 16)]
    assert all(r["error"] and "at most 512 GPUs" in r["error"] for r in rows[2:])


def test_plan_json_contract():
    doc = P("rail-optimized", 1024).model_dump(mode="json")
    for key in (
        "architecture", "gpus", "servers", "rails", "groups", "servers_per_group",
        "partial_last_group", "leaf_switches", "spine_switches", "leaves_per_group",
        "links_per_leaf_spine_pair", "leaf_uplinks", "leaf_downlinks", "server_leaf_links",
        "leaf_spine_links", "optics", "ports", "limits", "leaves", "hops", "warnings",
        "leaf_model", "spine_model", "latency_ns",
    ):
        assert key in doc, key
    assert set(doc["limits"]) == {"max_gpus", "max_servers", "max_groups", "max_leaves",
                                  "max_pods"}
    assert set(doc["ports"]) == {"leaf", "spine"}
    assert doc["leaves"][0] == {
        "name": "g1-leaf1", "group": 1, "rails": [1], "servers": 64, "downlinks_used": 64,
        "uplinks_used": 64,
    }
    assert Plan.model_validate(doc) == P("rail-optimized", 1024)


# ---- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(gpus=1001), r"1001 GPUs is not a whole number of 8-GPU servers: use 1000 or 1008"),
        (dict(gpus=4), r"use 8 GPUs"),
        (dict(gpus=0), r"must be positive"),
        (dict(gpus=96, gpus_per_server=0), r"gpus_per_server must be at least 1"),
        (dict(gpus=2048, architecture="rail-only"),
         r"past the Rail-only limit .* at most 128 servers / 1024 GPUs.*use rail-optimized"),
        (dict(gpus=512, architecture="rail-only", leaf="CX732Q-N"),
         r"at most 32 servers / 256 GPUs.*use rail-optimized"),
        (dict(gpus=16384, architecture="rail-optimized", tiers=2),
         r"needs 32 groups, past the spine radix: .*at most 16 groups.*8192 GPUs.*"
         r"Use at most 8192 GPUs or a spine model with at least 256 x 400G ports.*--tiers 3"),
        (dict(gpus=1024, architecture="rail-optimized", leaf="CX732Q-N", tiers=2),
         r"at most 512 GPUs or a spine with at least 64 x 400G ports \(e.g. CX864E-N"),
        (dict(gpus=1024, leaf="CX999"), r"unknown switch model 'CX999'.*CX732Q-N, CX864E-N"),
        (dict(gpus=1024, architecture="rail-optimized", spine="QFX"), r"unknown switch model 'QFX'"),
        (dict(gpus=640, gpus_per_server=64, architecture="rail-optimized", leaf="CX732Q-N"),
         r"spine model defaults to the leaf model CX732Q-N, which has 32 x 400G ports, fewer "
         r"than the 64 leaves of one group.*--spine MODEL with at least 64 ports.*CX864E-N"),
        (dict(gpus=640, gpus_per_server=64, architecture="rail-optimized", leaf="CX732Q-N",
              spine="CX732Q-N"),
         r"^spine CX732Q-N has 32 x 400G ports, fewer than the 64 leaves of one group"),
        # malformed ratios fail whatever the architecture (auto picks rail-only for 512 GPUs)
        (dict(gpus=512, oversubscription="abc"), r"malformed"),
        (dict(gpus=1024, architecture="rail-optimized", oversubscription="1:0"), r"no uplinks"),
        (dict(gpus=1024, architecture="rail-optimized", oversubscription="0:1"), r"no ports for servers"),
        (dict(gpus=1024, architecture="rail-optimized", oversubscription="2to1"), r"malformed.*e.g. 1:1"),
        (dict(gpus=1024, architecture="rail-optimized", oversubscription="1:200"), r"no server ports"),
        (dict(gpus=256, leaf="CX732Q-N", port_speed_gbps=800), r"leaf CX732Q-N has no 800G ports"),
    ],
)
def test_bad_input_errors(kw: dict, match: str):
    kw.setdefault("leaf", "CX864E-N")
    with pytest.raises(PlanError, match=match):
        plan(Design(**kw), CAT)


def test_bigger_spine_from_user_catalog(tmp_path: Path):
    f = tmp_path / "big.yml"
    f.write_text("switches:\n  BIG-512:\n    native_ports: 512\n")
    cat = load_catalog(f)
    with pytest.raises(PlanError, match=r"e.g. BIG-512 \(512 x 400G\)"):
        plan(Design(architecture="rail-optimized", gpus=16384, leaf="CX864E-N", tiers=2), cat)
    p = plan(Design(architecture="rail-optimized", gpus=16384, leaf="CX864E-N", spine="BIG-512"), cat)
    assert (p.groups, p.limits.max_groups, p.spine_switches) == (32, 64, 32)


def test_design_forbids_unknown_fields():
    with pytest.raises(ValueError):
        Design(gpus=8, leaf="CX864E-N", spines=4)


def test_parse_oversubscription():
    assert parse_oversubscription(" 3 : 1 ") == (3, 1)


# ---- properties ------------------------------------------------------------------------------

PROP_CAT = {
    **CAT,
    "T16": SwitchModel(name="T16", native_ports=16),
    "T48": SwitchModel(name="T48", native_ports=48),
    "T66": SwitchModel(name="T66", native_ports=66),
    "T256": SwitchModel(name="T256", native_ports=256),
}

designs = st.builds(
    lambda arch, servers, r, leaf, spine, d, u: Design(
        architecture=arch, gpus=servers * r, gpus_per_server=r, leaf=leaf, spine=spine,
        oversubscription=f"{d}:{u}",
    ),
    st.sampled_from(["rail-only", "rail-optimized", "auto"]),
    st.integers(1, 1500),
    st.integers(1, 16),
    st.sampled_from(sorted(PROP_CAT)),
    st.sampled_from([None, *sorted(PROP_CAT)]),
    st.integers(1, 4),
    st.integers(1, 4),
)

LIMIT_ERRORS = re.compile(r"past the Rail-only limit|past the spine radix|fewer than the \d+ leaves"
                          r"|past the three-tier limit")


def _check_invariants(p: Plan) -> None:
    # ports never over-used on any tier
    for tier in p.ports.values():
        assert 0 <= tier.used <= tier.total and tier.free == tier.total - tier.used
        assert tier.total == tier.switches * tier.ports_per_switch
    assert p.ports["leaf"].switches == p.leaf_switches == len(p.leaves)
    assert p.ports["spine"].switches == p.spine_switches == len(p.spines)
    for leaf in p.leaves:
        assert leaf.downlinks_used <= p.leaf_downlinks
        assert leaf.uplinks_used <= p.leaf_uplinks
        assert leaf.downlinks_used + leaf.uplinks_used <= p.leaf_ports
    assert p.leaf_downlinks + p.leaf_uplinks <= p.leaf_ports
    # every GPU has exactly one leaf port: per group, each rail is on exactly one leaf, and
    # each leaf has one port per server per rail it carries
    assert p.server_leaf_links == p.gpus == sum(leaf.downlinks_used for leaf in p.leaves)
    for g in range(1, p.groups + 1):
        in_group = [leaf for leaf in p.leaves if leaf.group == g]
        rails = sorted(r for leaf in in_group for r in leaf.rails)
        assert rails == list(range(1, p.rails + 1))
        for leaf in in_group:
            assert leaf.downlinks_used == leaf.servers * len(leaf.rails)
    assert sum(p.leaves[i].servers for i in range(0, len(p.leaves), p.leaves_per_group)) == p.servers
    assert len({leaf.name for leaf in p.leaves}) == len(p.leaves)
    # spine tier carries every leaf uplink
    assert p.leaf_spine_links == p.leaf_switches * p.leaf_uplinks
    assert p.spine_switches * (p.spine_ports or 0) >= p.leaf_spine_links
    if p.spine_switches:
        # the most loaded spine (uplinks spread round-robin) still fits its radix
        assert math.ceil(p.leaf_spine_links / p.spine_switches) <= p.spine_ports
        seen = p.spines_per_pod or p.spine_switches  # the spines one leaf reaches
        assert p.links_per_leaf_spine_pair * seen <= p.leaf_uplinks
        assert p.links_per_leaf_spine_pair_max * seen >= p.leaf_uplinks
        assert p.links_per_leaf_spine_pair >= 1
    if p.tiers == 3:  # 1:1 at the pod spine, every pod spine uplink cabled
        assert p.spine_downlinks == p.spine_uplinks or p.spine_ports % 2
        assert p.spine_superspine_links == p.spine_switches * p.spine_uplinks
        assert p.superspine_switches * p.superspine_ports >= p.spine_superspine_links
        assert p.pods <= p.limits.max_pods and p.beyond_seed
    # one NIC optic per GPU, switch-side optics serve 1-2 links each (breakout-aware)
    assert p.optics == sum(o.count for o in p.optics_detail)
    fabric = p.leaf_spine_links + p.spine_superspine_links
    assert p.server_leaf_links + (p.server_leaf_links + 2 * fabric) / 2 <= p.optics
    assert p.optics <= 2 * p.total_links
    # within limits
    assert p.gpus <= p.limits.max_gpus and p.servers <= p.limits.max_servers
    assert p.groups <= p.limits.max_groups and p.leaf_switches <= p.limits.max_leaves
    if p.architecture == "rail-optimized":
        assert p.leaf_switches == p.groups * p.rails
        assert re.fullmatch(r"g\d+-leaf\d+", p.leaves[-1].name)
        d, u = parse_oversubscription(p.oversubscription)
        # never more oversubscribed than asked; 1:1 (exact split) => equal bandwidth
        assert p.leaf_uplink_gbps * d >= p.leaf_downlink_gbps * u
        if p.leaf_ports * d % (d + u) == 0:
            assert p.leaf_uplink_gbps * d == p.leaf_downlink_gbps * u
        if (d, u) == (1, 1) and p.leaf_ports % 2 == 0:
            assert p.leaf_uplink_gbps == p.leaf_downlink_gbps
    else:
        assert p.spine_switches == 0 and p.rails % p.leaf_switches == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designs)
def test_property_invariants(design: Design):
    try:
        p = plan(design, PROP_CAT)
    except PlanError as exc:
        assert LIMIT_ERRORS.search(str(exc)), str(exc)
        event("rejected: past a limit")
        return
    event(f"planned {p.architecture}")
    _check_invariants(p)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["rail-only", "rail-optimized"]),
    st.integers(1, 16),
    st.sampled_from(["CX864E-N", "CX732Q-N", "T48", "T16"]),
)
def test_property_limits_are_tight(arch: str, r: int, leaf: str):
    """max_gpus itself plans; one more server does not."""
    probe = Design(architecture=arch, gpus=r, gpus_per_server=r, leaf=leaf,
                   tiers=2 if arch == "rail-optimized" else None)
    try:
        small = plan(probe, PROP_CAT)
    except PlanError as exc:
        assert "fewer than the" in str(exc)
        return
    top = small.limits.max_gpus
    _check_invariants(plan(probe.model_copy(update={"gpus": top}), PROP_CAT))
    with pytest.raises(PlanError, match="use rail-optimized|past the spine radix"):
        plan(probe.model_copy(update={"gpus": top + r}), PROP_CAT)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2000), st.sampled_from(["CX864E-N", "CX732Q-N", "T48"]))
def test_property_auto_follows_rail_only_limit(servers: int, leaf: str):
    limit = PROP_CAT[leaf].ports_at(400) * 8
    try:
        p = plan(Design(gpus=servers * 8, leaf=leaf), PROP_CAT)
    except PlanError:
        assert servers * 8 > limit
        return
    assert p.architecture == ("rail-only" if servers * 8 <= limit else "rail-optimized")


def test_node_table_row_errors_and_common_errors():
    rows = node_table("CX864E-N", gpus_per_server=6, gpu_counts=(252, 256), catalog=CAT)
    assert rows[0]["error"] is None and rows[0]["servers"] == 42
    assert "use 252 or 258 GPUs" in rows[1]["error"] and rows[1]["groups"] is None
    with pytest.raises(PlanError, match="unknown switch model"):
        node_table("NOPE", catalog=CAT)
    with pytest.raises(PlanError, match="fewer than the 64 leaves"):
        node_table("CX732Q-N", gpus_per_server=64, catalog=CAT)
