"""Generator tests (root-free): every shipped intent -> lab directory, checked against the
containerlab schema, the lab.json contract, the planner, FRR's own parser and the seed's rules."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from railab.errors import UsageError
from railab.topologies import clab as clab_mod
from railab.topologies.frr import dry_run, vtysh_path
from railab.topologies.generator import OutputError, build_lab, generate
from railab.topologies.intent import IntentError, load_intent, parse_intent, shipped_intents
from railab.topologies.labspec import LabSpec
from railab.topologies.planner import Design, plan

PID = os.getpid()
#: every shipped intent but the 8,192 fabric (20 s to generate and 30 MB to validate each time;
#: tests/test_scale_plane.py checks its shape and estimate once)
SHIPPED = [n for n in shipped_intents() if n != "rail-optimized-8192-full"]
needs_frr = pytest.mark.skipif(vtysh_path() is None, reason="FRR (vtysh) not installed")


def _schema_path() -> Path:
    p = clab_mod.find_schema()
    if p is None:
        pytest.skip("clab.schema.json not found (RAILAB_CLAB_SCHEMA, ../shared/containerlab, vendored)")
    return p


@pytest.fixture(scope="module")
def labs(tmp_path_factory) -> dict[str, Path]:
    """Every shipped intent generated once for the module."""
    root = tmp_path_factory.mktemp("labs")
    return {n: generate(n, root / n) for n in SHIPPED}


def test_shipped_intents_present():
    for n in ("mini", "rail-only-256", "rail-only-512", "rail-optimized-1024",
              "rail-optimized-1024-full", "rail-optimized-4096", "rail-optimized-4096-full"):
        assert n in SHIPPED
    assert "rail-optimized-8192-full" in shipped_intents()


@pytest.mark.parametrize("intent", SHIPPED)
def test_generates_and_validates(labs, intent):
    d = labs[intent]
    spec = LabSpec.load(d)
    assert spec.name == intent
    topo = yaml.safe_load((d / f"{spec.name}.clab.yml").read_text())
    schema = json.loads(_schema_path().read_text())
    jsonschema.Draft202012Validator(schema).validate(topo)
    # every clab node is a lab.json node and vice versa; every link has an explicit MTU
    assert set(topo["topology"]["nodes"]) == {n.name for n in spec.nodes}
    assert len(topo["topology"]["links"]) == len(spec.links)
    for lk in topo["topology"]["links"]:
        assert lk["mtu"] == spec.mtu
    for n in spec.nodes:
        node = topo["topology"]["nodes"][n.name]
        assert node["labels"]["role"] == n.role
        if n.role != "server":
            assert (d / "configs" / n.name / "frr.conf").is_file()
            assert (d / "configs" / n.name / "daemons").is_file()
            assert node["sysctls"]["net.ipv4.fib_multipath_hash_policy"] == "3"
            assert int(node["sysctls"]["net.ipv4.fib_multipath_hash_fields"]) == 0x37
            assert node["sysctls"]["net.ipv6.conf.all.accept_dad"] == "0"
        else:
            assert node["sysctls"]["net.ipv4.ip_forward"] == "0"
    # no temp directories left next to the lab
    assert not [p for p in d.parent.iterdir() if p.name.startswith(".")]


def test_schema_validator_is_2020_12():
    """The endpoint pattern lives in prefixItems: only a 2020-12 validator rejects a bad one."""
    schema = json.loads(_schema_path().read_text())
    bad = {"name": "x", "topology": {"nodes": {"a": {"kind": "linux"}},
                                     "links": [{"endpoints": ["a-eth1", "b:eth1"]}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(bad)
    with pytest.raises(clab_mod.ClabSchemaError, match="endpoints"):
        clab_mod.validate_topology(bad)


def test_schema_cache_skips_only_a_topology_that_passed(tmp_path, monkeypatch):
    """A topology that passed leaves a marker and is not validated again; a changed topology
    (here: made invalid) is validated again and refused, and leaves no marker."""
    topo = build_lab(load_intent("mini")).topology
    cache = tmp_path / "ok"
    clab_mod.validate_topology(topo, cache=cache)
    assert len(list(cache.iterdir())) == 1

    def no_validator(path):
        raise AssertionError("validated again")

    monkeypatch.setattr(clab_mod, "_validator", no_validator)
    clab_mod.validate_topology(copy.deepcopy(topo), cache=cache)  # same content: the marker
    monkeypatch.undo()
    bad = copy.deepcopy(topo)
    bad["topology"]["links"][0]["endpoints"][0] = "no-colon"
    with pytest.raises(clab_mod.ClabSchemaError, match="endpoints"):
        clab_mod.validate_topology(bad, cache=cache)
    assert len(list(cache.iterdir())) == 1
    # no cache: always validated
    monkeypatch.setattr(clab_mod, "_validator", no_validator)
    with pytest.raises(AssertionError, match="validated again"):
        clab_mod.validate_topology(topo)


def test_schema_cache_that_cannot_be_used_still_validates(tmp_path, monkeypatch):
    """A cache path that is a file, another schema, or a topology JSON cannot hold exactly:
    each is validated (no marker written, no error from the cache itself)."""
    topo = build_lab(load_intent("mini")).topology
    calls = []
    real = clab_mod._validator

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(clab_mod, "_validator", counting)
    blocked = tmp_path / "file"
    blocked.write_text("")
    clab_mod.validate_topology(topo, cache=blocked)
    clab_mod.validate_topology(topo, cache=blocked)
    assert len(calls) == 2 and blocked.is_file()
    cache = tmp_path / "ok"
    other = tmp_path / "schema.json"
    other.write_bytes(_schema_path().read_bytes() + b"\n")
    clab_mod.validate_topology(topo, cache=cache)
    clab_mod.validate_topology(topo, other, cache=cache)  # other schema bytes: validated again
    assert len(calls) == 4 and len(list(cache.iterdir())) == 2
    odd = copy.deepcopy(topo)
    odd["topology"]["nodes"][next(iter(odd["topology"]["nodes"]))]["labels"]["x"] = {"a"}  # no JSON
    with pytest.raises(clab_mod.ClabSchemaError):
        clab_mod.validate_topology(odd, cache=cache)
    assert len(list(cache.iterdir())) == 2


def test_up_of_an_intent_remembers_schema_validations_in_the_cache(tmp_path, monkeypatch):
    """``railab up INTENT`` hands ``generate`` the cache directory beside FRR's markers."""
    from railab.testbed import state as st
    from railab.topologies import generator

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    seen = {}

    def fake_generate(intent, outdir, *, name=None, schema_cache=None):
        seen["cache"] = schema_cache
        raise IntentError("stop here")

    monkeypatch.setattr(generator, "generate", fake_generate)
    from railab.cli import app

    r = CliRunner().invoke(app, ["up", "mini", "-o", str(tmp_path / "lab")])
    assert seen["cache"] == st.cache_dir() / "clab-schema-ok", r.output


def test_generate_writes_the_schema_marker(tmp_path):
    cache = tmp_path / "ok"
    generate("mini", tmp_path / "lab", schema_cache=cache)
    assert len(list(cache.iterdir())) == 1
    generate("mini", tmp_path / "lab", schema_cache=cache)  # the same file: the same marker
    assert len(list(cache.iterdir())) == 1


def test_shipped_catalog_is_read_once_and_handed_out_as_a_copy():
    from railab.topologies import catalog

    a = catalog.load_catalog()
    a.pop(next(iter(a)))
    b = catalog.load_catalog()
    assert len(b) == len(a) + 1 and catalog._shipped_catalog.cache_info().hits >= 1


def test_yaml_reader_is_safe_and_matches_safe_load():
    from railab.topologies.yamlio import load_yaml, load_yaml_all

    root = Path(__file__).resolve().parents[1] / "topologies"
    for f in [root / "catalog.yml", *sorted((root / "intents").glob("*.yml"))]:
        text = f.read_text()
        assert load_yaml(text) == yaml.safe_load(text), f
    clab_text = clab_mod.dump_topology(build_lab(load_intent("mini")).topology)
    assert load_yaml(clab_text) == yaml.safe_load(clab_text)
    assert list(load_yaml_all("a: 1\n---\nb: 2\n")) == [{"a": 1}, {"b": 2}]
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['true']")
    # YAML anchors and merge keys still work; only keys written twice are refused
    assert load_yaml("a: &x {b: 1}\nc:\n  <<: *x\n  b: 2\n") == {"a": {"b": 1}, "c": {"b": 2}}


@pytest.mark.parametrize("text, says", [
    ("name: x\nname: y\n", "line 2, column 1: duplicate key 'name' (first on line 1): keep one"),
    ("{1: a, 1.0: b}", "duplicate key 1.0"),
    ("name: x\ndesign:\n\tgpus: 8\n", "line 3, column 1: "),
    ("name: " + "[" * 50000 + "]" * 50000, "nested more than 1000 levels deep"),
    ("- " * 3000 + "x", "nested more than 1000 levels deep"),
])
def test_yaml_reader_refuses_repeated_keys_and_deep_nesting_in_one_line(text, says):
    """A repeated key (YAML 1.2 wants unique keys; PyYAML kept the last silently), a tab, and
    nesting that crashed libyaml (SIGSEGV at ~50,000 levels) are each one line naming where."""
    from railab.topologies.yamlio import load_yaml, yaml_error_text

    with pytest.raises(yaml.YAMLError) as err:
        load_yaml(text)
    line = yaml_error_text(err.value, text)
    assert says in line and "\n" not in line
    if "\t" in text:
        assert line.endswith("indent with spaces, not tabs")


def test_bad_intent_files_are_one_clear_line(tmp_path):
    for name, data, says in [("dup.yml", b"name: x\nname: y\n", "duplicate key 'name'"),
                             ("bin.yml", b"\xff\xfe", "is not UTF-8 text (byte 0): save it as UTF-8"),
                             ("deep.yml", b"name: " + b"[" * 50000 + b"]" * 50000, "nested more than")]:
        f = tmp_path / name
        f.write_bytes(data)
        with pytest.raises(IntentError) as err:
            load_intent(f)
        assert says in str(err.value) and "\n" not in str(err.value) and str(f) in str(err.value)


@needs_frr
@pytest.mark.parametrize("intent", ["mini", "rail-only-512"])
def test_frr_dry_run(labs, intent):
    confs = sorted((labs[intent] / "configs").glob("*/frr.conf"))
    assert confs
    for conf in confs:
        ok, out = dry_run(conf)
        assert ok, f"{conf}: {out}"


@needs_frr
def test_frr_dry_run_rejects_garbage(tmp_path):
    bad = tmp_path / "frr.conf"
    bad.write_text("router bgp 65000\n maximum-paths 999\n")
    ok, out = dry_run(bad)
    assert not ok and "maximum-paths" in out


def test_frr_conf_content(labs):
    spec = LabSpec.load(labs["mini"])
    leaf = spec.node("g1-leaf1")
    text = (labs["mini"] / "configs/g1-leaf1/frr.conf").read_text()
    assert "frr defaults datacenter" in text
    assert f"router bgp {leaf.asn}" in text
    assert f" bgp router-id {leaf.router_id}" in text
    assert " bgp bestpath as-path multipath-relax" in text
    assert " bgp route-map delay-timer 0" in text
    uplinks = [s.interface for s in spec.bgp_sessions if s.node == leaf.name]
    for up in uplinks:
        assert f" neighbor {up} interface peer-group FABRIC" in text
    rail = next(r.prefix for r in spec.rail_subnets if r.leaf == leaf.name)
    assert f"ip route {rail} blackhole" in text and f"  network {rail}" in text
    assert f"  network {leaf.loopback}" in text
    paths = int(text.split("maximum-paths ")[1].split()[0])
    assert paths >= len(uplinks)
    # the server /31s are configured but never announced
    for nic in (n for n in spec.nics if n.leaf == leaf.name):
        assert f" ip address {nic.gateway}/31" in text
        assert f"network {nic.gateway}/31" not in text and "redistribute connected" not in text
    daemons = (labs["mini"] / "configs/g1-leaf1/daemons").read_text()
    for d in ("zebra", "bgpd", "staticd", "bfdd"):
        assert f"{d}=yes" in daemons


def test_asns_and_loopbacks(labs):
    spec = LabSpec.load(labs["rail-optimized-4096"])
    spines = spec.by_role("spine")
    leaves = spec.by_role("leaf")
    assert {s.asn for s in spines} == {4200000000}
    assert len({lf.asn for lf in leaves}) == len(leaves)
    assert all(4200000000 < lf.asn < 4294967295 for lf in leaves)  # RFC 6996 private 4-byte
    rids = [n.router_id for n in spines + leaves]
    assert len(set(rids)) == len(rids)
    for s in spec.bgp_sessions:
        assert spec.node(s.node).asn == s.local_asn and spec.node(s.peer).asn == s.remote_asn


@pytest.mark.parametrize("intent", SHIPPED)
def test_nic_n_to_leaf_n(labs, intent):
    spec = LabSpec.load(labs[intent])
    links = {(lk.a.node, lk.a.interface): (lk.b.node, lk.b.interface) for lk in spec.links}
    servers = spec.by_role("server")
    assert len(spec.nics) == len(servers) * spec.rails
    for nic in spec.nics:
        assert nic.interface == f"eth{nic.nic}" and nic.rail == nic.nic and nic.gpu == nic.nic - 1
        leaf = spec.node(nic.leaf)
        assert nic.rail in leaf.rails and leaf.group == nic.group
        if spec.architecture == "rail-optimized":
            assert nic.leaf == f"g{nic.group}-leaf{nic.nic}"
        assert links[(nic.server, nic.interface)] == (nic.leaf, nic.leaf_port)
        net = ipaddress.ip_interface(nic.address).network
        assert net.prefixlen == 31 and net.network_address == nic.gateway
        assert isinstance(nic.gateway, ipaddress.IPv4Address) and nic.address.network == net
        rail = next(r for r in spec.rail_subnets if (r.group, r.rail) == (nic.group, nic.rail))
        assert net.subnet_of(ipaddress.ip_network(rail.prefix)) and rail.leaf == nic.leaf
        assert nic.table == 100 + nic.nic
    addrs = [n.address for n in spec.nics]
    assert len(set(addrs)) == len(addrs)


def test_port_order(labs):
    """Leaf downlinks first (server order, then rail), then uplinks (spine, then parallel link)."""
    spec = LabSpec.load(labs["rail-only-512"])
    leaf1 = spec.node("leaf1")
    assert leaf1.rails == [1, 2]
    got = [(n.leaf_port, n.server, n.nic) for n in spec.nics if n.leaf == "leaf1"]
    assert sorted(got, key=lambda t: int(t[0][3:])) == [
        ("eth1", "srv1", 1), ("eth2", "srv1", 2), ("eth3", "srv2", 1), ("eth4", "srv2", 2),
        ("eth5", "srv3", 1), ("eth6", "srv3", 2)]
    spec = LabSpec.load(labs["mini"])
    leaf_links = [lk for lk in spec.links if lk.a.node == "g2-leaf3" and lk.role == "leaf-spine"]
    assert [(lk.a.interface, lk.b.node) for lk in leaf_links] == [("eth3", "spine1"), ("eth4", "spine2")]
    # spine ports in leaf order: g2-leaf3 is the 7th leaf
    assert leaf_links[0].b.interface == "eth7"


@pytest.mark.parametrize("intent", ["rail-only-256", "rail-only-512"])
def test_rail_only_no_spines_no_cross_rail_routes(labs, intent):
    spec = LabSpec.load(labs[intent])
    assert spec.spines == 0 and not spec.by_role("spine")
    assert spec.bgp_sessions == [] and all(lk.role == "server-leaf" for lk in spec.links)
    assert spec.expected_hops["inter-rail"] is None
    for leaf in spec.by_role("leaf"):
        learnt = {r.prefix for r in spec.expected_routes[leaf.name]}
        foreign = {r.prefix for r in spec.rail_subnets if r.leaf != leaf.name}
        assert not learnt & foreign
        text = (labs[intent] / "configs" / leaf.name / "frr.conf").read_text()
        assert "interface peer-group FABRIC" not in text
    if intent == "rail-only-512":
        assert spec.expected_hops["inter-rail-same-leaf"] == 1
        assert [n.rails for n in spec.by_role("leaf")] == [[1, 2], [3, 4], [5, 6], [7, 8]]


def test_rail_optimized_expected_routes(labs):
    spec = LabSpec.load(labs["mini"])
    assert spec.expected_hops == {"intra-server": 0, "intra-rail": 1, "inter-rail": 3,
                                  "inter-rail-pxn": 1, "cross-group": 3}
    leaves, spines = spec.by_role("leaf"), spec.by_role("spine")
    width = spec.spines * spec.links_per_leaf_spine_pair
    for leaf in leaves:
        routes = {r.prefix: r for r in spec.expected_routes[leaf.name]}
        for rs in spec.rail_subnets:
            if rs.leaf == leaf.name:
                assert rs.prefix not in routes
            else:
                assert routes[rs.prefix].ecmp_width == width
                assert len(routes[rs.prefix].interfaces) == width
        for sp in spines:
            assert routes[str(sp.loopback)].ecmp_width == spec.links_per_leaf_spine_pair
    for sp in spines:
        routes = {r.prefix for r in spec.expected_routes[sp.name]}
        assert {rs.prefix for rs in spec.rail_subnets} <= routes
        assert {str(o.loopback) for o in spines} and not {str(o.loopback) for o in spines} & routes


def test_full_lab_matches_planner(labs):
    spec = LabSpec.load(labs["rail-optimized-1024-full"])
    intent = load_intent("rail-optimized-1024-full")
    d = intent.design
    p = plan(Design(architecture=d.architecture, gpus=d.gpus, gpus_per_server=d.gpus_per_server,
                    leaf=d.leaf, spine=d.spine, port_speed_gbps=d.port_speed_gbps,
                    oversubscription=d.oversubscription))
    assert len(spec.by_role("leaf")) == p.leaf_switches == 16
    assert len(spec.by_role("spine")) == p.spine_switches == 8
    assert len(spec.by_role("server")) == p.servers == 128
    assert spec.groups == p.groups and spec.servers_per_group == p.servers_per_group
    assert spec.links_per_leaf_spine_pair == p.links_per_leaf_spine_pair == 8
    assert len(spec.nics) == p.servers * p.rails == 1024
    assert sum(lk.role == "server-leaf" for lk in spec.links) == p.server_leaf_links
    assert sum(lk.role == "leaf-spine" for lk in spec.links) == p.leaf_spine_links
    assert [(lf.name, lf.group, lf.rails) for lf in p.leaves] == \
        [(n.name, n.group, n.rails) for n in spec.by_role("leaf")]
    leaf = spec.by_role("leaf")[0]
    assert leaf.ports == p.leaf_downlinks + p.leaf_uplinks
    routes = spec.expected_routes[leaf.name]
    assert {r.ecmp_width for r in routes if r.prefix.endswith("/24")} == {p.leaf_uplinks}


def test_rail_only_full_matches_planner(tmp_path):
    base = yaml.safe_load((Path(__file__).parents[1] / "topologies/intents/rail-only-512.yml").read_text())
    base["lab"] = "full"
    spec = build_lab(parse_intent(base)).spec
    p = plan(Design(architecture="rail-only", gpus=512, leaf="CX864E-N"))
    assert len(spec.by_role("leaf")) == p.leaf_switches == 4
    assert len(spec.by_role("server")) == p.servers == 64
    assert [n.rails for n in spec.by_role("leaf")] == [lf.rails for lf in p.leaves]


def test_deterministic(tmp_path):
    a = generate("rail-optimized-1024", tmp_path / "a", name=f"gen{PID}")
    b = generate("rail-optimized-1024", tmp_path / "b", name=f"gen{PID}")
    fa = {p.relative_to(a): p.read_bytes() for p in sorted(a.rglob("*")) if p.is_file()}
    fb = {p.relative_to(b): p.read_bytes() for p in sorted(b.rglob("*")) if p.is_file()}
    assert fa.keys() == fb.keys() and fa == fb
    assert Path(f"gen{PID}.clab.yml") in fa


def test_name_override_and_regenerate(tmp_path):
    out = tmp_path / "lab"
    generate("mini", out, name=f"gen-{PID}-a")
    assert (out / f"gen-{PID}-a.clab.yml").exists()
    generate("mini", out, name=f"gen-{PID}-b")  # replaces the previous lab atomically
    assert sorted(p.name for p in out.glob("*.clab.yml")) == [f"gen-{PID}-b.clab.yml"]
    assert LabSpec.load(out).name == f"gen-{PID}-b"
    assert [p.name for p in tmp_path.iterdir()] == ["lab"]


def test_failure_leaves_nothing(tmp_path):
    with pytest.raises(IntentError, match="name"):
        generate("mini", tmp_path / "x", name="Bad Name")
    assert not (tmp_path / "x").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(IntentError, match="non-empty"):
        generate("mini", other)
    assert [p.name for p in other.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def test_servers_exec_matches_labjson(labs):
    d = labs["mini"]
    spec = LabSpec.load(d)
    topo = yaml.safe_load((d / "mini.clab.yml").read_text())
    for nic in spec.nics:
        lines = topo["topology"]["nodes"][nic.server]["exec"]
        ip = nic.address.ip
        assert f"ip addr add {nic.address} dev {nic.interface}" in lines
        assert any(ln.startswith(f"ip rule add from {ip} lookup {nic.table}") for ln in lines)
        assert f"ip route add default via {nic.gateway} dev {nic.interface} table {nic.table}" in lines
    node = topo["topology"]["nodes"]["spine1"]
    assert node["kind"] == "linux" and node["image"] == "railab/frr:8.4.4"
    assert "configs/spine1/frr.conf:/etc/frr/frr.conf" in node["binds"]


@pytest.fixture(scope="module")
def sonic_lab(tmp_path_factory):
    data = yaml.safe_load((Path(__file__).parents[1] / "topologies/intents/mini.yml").read_text())
    data = copy.deepcopy(data)
    data["lab"]["kind"] = "sonic-vs"
    return generate(parse_intent(data), tmp_path_factory.mktemp("sonic") / "lab", name=f"sonic{PID}")


def test_sonic_vs(sonic_lab):
    spec = LabSpec.load(sonic_lab)
    topo = yaml.safe_load((sonic_lab / f"{spec.name}.clab.yml").read_text())
    node = topo["topology"]["nodes"]["g1-leaf1"]
    assert node["kind"] == "sonic-vs"
    # never bound where docker-sonic-vs's start.sh mv's onto (EBUSY aborts start.sh under bash -e)
    assert node["binds"] == ["configs/g1-leaf1/config_db.json:/etc/railab/config_db.json",
                             "configs/g1-leaf1/frr.conf:/etc/railab/frr.conf"]
    assert not any(b.split(":")[1].startswith("/etc/sonic/") for b in node["binds"])
    assert all(n["restart-policy"] == "no" for n in topo["topology"]["nodes"].values())
    db = json.loads((sonic_lab / "configs/g1-leaf1/config_db.json").read_text())
    leaf = spec.node("g1-leaf1")
    assert db["DEVICE_METADATA"]["localhost"]["bgp_asn"] == str(leaf.asn)
    assert db["DEVICE_METADATA"]["localhost"]["type"] == "BackEndToRRouter"
    assert json.loads((sonic_lab / "configs/spine1/config_db.json").read_text())[
        "DEVICE_METADATA"]["localhost"]["type"] == "BackEndLeafRouter"
    assert set(db["PORT"]) == {f"Ethernet{4 * i}" for i in range(leaf.ports)}
    assert all(p["mtu"] == str(spec.mtu) and p["admin_status"] == "up" for p in db["PORT"].values())
    # lab.json records SONiC's port names for sonic-vs nodes (sessions, routes, NIC leaf ports)
    up = next(s.interface for s in spec.bgp_sessions if s.node == "g1-leaf1")
    assert up.startswith("Ethernet") and db["INTERFACE"][up] == {"ipv6_use_link_local_only": "enable"}
    nic = next(n for n in spec.nics if n.leaf == "g1-leaf1")
    assert f"{nic.leaf_port}|{nic.gateway}/31" in db["INTERFACE"]
    assert all(i.startswith("Ethernet") for r in spec.expected_routes["g1-leaf1"] for i in r.interfaces)
    assert all(lk.b.interface.startswith("eth") for lk in spec.links)  # container interfaces
    assert f"Loopback0|{leaf.loopback}" in db["LOOPBACK_INTERFACE"]
    assert db["DSCP_TO_TC_MAP"]["AZURE"]["26"] == "3" and db["DSCP_TO_TC_MAP"]["AZURE"]["48"] == "6"
    assert all(q["pfc_enable"] == "3,4" for q in db["PORT_QOS_MAP"].values())
    wred = db["WRED_PROFILE"]["AZURE_LOSSLESS"]
    assert wred["wred_green_enable"] == "true" and wred["ecn"] == "ecn_all"
    assert db["QUEUE"]["Ethernet0|3"]["wred_profile"] == "AZURE_LOSSLESS"
    text = (sonic_lab / "configs/g1-leaf1/frr.conf").read_text()
    assert "neighbor Ethernet" in text and "neighbor eth" not in text
    assert "frr version" not in text and " bfd" not in text  # the image's FRR; no bfdd in sonic-vs
    assert spec.bfd.enabled is False


@needs_frr
def test_sonic_frr_dry_run(sonic_lab):
    for conf in sorted((sonic_lab / "configs").glob("*/frr.conf")):
        ok, out = dry_run(conf)
        assert ok, f"{conf}: {out}"


def test_cli(tmp_path):
    from railab.cli import app

    r = CliRunner().invoke(app, ["generate", "mini", "-o", str(tmp_path / "m"), "--name", f"cli{PID}"])
    assert r.exit_code == 0, r.output
    assert LabSpec.load(tmp_path / "m").name == f"cli{PID}"
    r = CliRunner().invoke(app, ["generate", "no-such-intent"])
    assert r.exit_code == 2 and "rail-only-512" in r.output


def test_cli_list_never_cuts_intent_names():
    from railab.cli import app
    from railab.topologies.intent import shipped_intents

    for cols in ("80", "60"):
        r = CliRunner().invoke(app, ["generate", "--list"], env={"COLUMNS": cols})
        assert r.exit_code == 0, r.output
        assert "…" not in r.output.split("┃")[0]
        cells = {c.strip() for line in r.output.splitlines() for c in line.split("│")[1:2]}
        for name in shipped_intents():
            assert name in cells, f"{name!r} cut at {cols} columns: {r.output}"


def test_cli_unwritable_outdir(tmp_path):
    from railab.cli import app

    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out, why in (("/proc/foo", "No such file or directory"), (str(blocker / "lab"), "not a directory")):
        r = CliRunner().invoke(app, ["generate", "mini", "-o", out])
        assert r.exit_code == 2, r.output
        parent = str(Path(out).parent)
        assert f"error: output directory {parent} " in r.output and why in r.output, r.output
        assert "Errno" not in r.output and ".tmp-" not in r.output
    with pytest.raises(OutputError, match="cannot be written"):
        generate("mini", "/proc/foo/lab")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_misspelt_schema_env_is_an_error_not_a_silent_fallback(monkeypatch):
    monkeypatch.setenv("RAILAB_CLAB_SCHEMA", "/nonexistent/clab.schema.jsn")
    with pytest.raises(UsageError, match=r"RAILAB_CLAB_SCHEMA=/nonexistent/clab.schema.jsn is not a file"):
        clab_mod.find_schema()
    monkeypatch.delenv("RAILAB_CLAB_SCHEMA")
    assert clab_mod.find_schema() is not None  # unset: the usual lookup (the vendored copy at least)


def test_schema_errors_are_kept_short(tmp_path):
    """A strict schema refusing the root: jsonschema's message holds the whole topology; the
    error keeps MAX_SCHEMA_MESSAGE characters of each and says how long it was."""
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                  "type": "array"}))  # "{the whole topology} is not of type 'array'"
    topo = {"name": "x", "topology": {"nodes": {f"n{i}": {"kind": "linux"} for i in range(200)}}}
    with pytest.raises(clab_mod.ClabSchemaError) as exc:
        clab_mod.validate_topology(topo, strict)
    msg = str(exc.value)
    assert "characters)" in msg and len(msg) < 5 * (clab_mod.MAX_SCHEMA_MESSAGE + 200), len(msg)


def test_intent_that_is_not_a_regular_file_is_named_so(tmp_path):
    """/dev/null, a FIFO (reading it would block until a writer comes) and a directory are each
    refused with what they are, not reported as missing."""
    fifo = tmp_path / "intent.yml"
    os.mkfifo(fifo)
    for p, what in (("/dev/null", "is not a regular file"), (str(fifo), "is not a regular file"),
                    (str(tmp_path), "is a directory")):
        with pytest.raises(IntentError, match=what):
            load_intent(p)
