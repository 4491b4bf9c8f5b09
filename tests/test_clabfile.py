"""Root-free tests of testbed.clabfile (reading <lab>.clab.yml) and testbed.state's ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.clabfile import FRR_DAEMONS, load_clab

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, doc: dict, confs: dict[str, str] | None = None) -> Path:
    for rel, text in (confs or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    p = tmp_path / f"{doc.get('name', 'x')}.clab.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_generated_mini_lab(tmp_path):
    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec

    labdir = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "cf", name="cf")
    clab = load_clab(labdir)
    spec = LabSpec.load(labdir)
    assert clab.name == "cf"
    assert set(clab.nodes) == {n.name for n in spec.nodes}
    assert {n.name for n in clab.routers} == {n.name for n in spec.nodes if n.role != "server"}
    assert len(clab.links) == len(spec.links)
    assert all(lk.mtu == spec.mtu for lk in clab.links)
    leaf = clab.nodes["g1-leaf1"]
    assert leaf.frr_conf == labdir.resolve() / "configs" / "g1-leaf1" / "frr.conf"
    assert leaf.sysctls["net.ipv6.conf.default.accept_dad"] == "0"
    assert leaf.daemons[0] == "zebra" and "bgpd" in leaf.daemons
    assert clab.nodes["srv1"].daemons == ()


def test_defaults_kinds_node_merge_and_daemons(tmp_path):
    doc = {
        "name": "mg",
        "topology": {
            "defaults": {"sysctls": {"a.b": 1, "c.d": 1}, "labels": {"x": "d"}},
            "kinds": {"linux": {"sysctls": {"c.d": 2}, "binds": ["r/frr.conf:/etc/frr/frr.conf"]}},
            "nodes": {
                "r1": {"kind": "linux", "sysctls": {"e.f": True}, "binds": ["r/daemons:/etc/frr/daemons"]},
                "h1": {"kind": "host"},
            },
            "links": [{"endpoints": ["r1:eth1", "h1:eth1"]}],
        },
    }
    p = _write(tmp_path, doc, {"r/frr.conf": "hostname r1\n", "r/daemons": "bgpd=yes\nbfdd=no\nstaticd=yes\n"})
    c = load_clab(p)
    assert c.nodes["r1"].sysctls == {"a.b": "1", "c.d": "2", "e.f": "true"}
    assert c.nodes["r1"].labels == {"x": "d"}
    assert c.nodes["r1"].daemons == ("zebra", "staticd", "bgpd")
    assert c.nodes["h1"].frr_conf is None
    assert c.links[0].mtu == 1500
    assert set(c.nodes["r1"].daemons) <= set(FRR_DAEMONS)


@pytest.mark.parametrize(
    "links, message",
    [
        ([{"endpoints": ["r1:eth1"]}], "exactly two endpoints"),
        ([{"endpoints": ["r1:eth1", "zz:eth1"]}], "unknown node 'zz'"),
        ([{"endpoints": ["r1eth1", "h1:eth1"]}], "is not 'node:interface'"),
        ([{"endpoints": ["r1:averyveryverylongname", "h1:eth1"]}], "1-15 chars"),
        ([{"endpoints": ["r1:eth1", "h1:eth1"]}, {"endpoints": ["r1:eth1", "h1:eth2"]}],
         "r1:eth1 is used by another link"),
    ],
)
def test_bad_links(tmp_path, links, message):
    doc = {"name": "bl", "topology": {"nodes": {"r1": {}, "h1": {}}, "links": links}}
    with pytest.raises(RailabError, match=message):
        load_clab(_write(tmp_path, doc))


def test_missing_bound_config_and_bad_files(tmp_path):
    doc = {"name": "mb", "topology": {"nodes": {"r1": {"binds": ["nope/frr.conf:/etc/frr/frr.conf"]}}}}
    with pytest.raises(RailabError, match="binds .*nope/frr.conf, which does not exist"):
        load_clab(_write(tmp_path, doc))
    with pytest.raises(RailabError, match="no such lab directory"):
        load_clab(tmp_path / "absent")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RailabError, match="no \\*.clab.yml"):
        load_clab(empty)


def test_ledger_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.ledger_add(["clab-a-x", "clab-a-y"], "a")
    st.save({"lab": "a", "namespaces": {}})
    assert st.ledger() == {"clab-a-x": "a", "clab-a-y": "a"}
    assert st.labs() == ["a"] and st.load("a")["lab"] == "a"
    st.ledger_remove("clab-a-x")
    st.remove_lab_dir("a")
    assert st.ledger() == {"clab-a-y": "a"} and st.labs() == [] and st.load("a") is None


def test_ledger_leaves_out_an_entry_another_lab_removes_while_it_reads(tmp_path, monkeypatch):
    """CI failed a session teardown on FileNotFoundError: a second lab's ``down`` removed its
    namespace entries between the listing and the read."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.ledger_add(["clab-a-x", "clab-b-y"], "a")
    real = Path.read_text

    def racing(self, *a, **k):
        if self.name == "clab-a-x":
            st.ledger_remove("clab-a-x")  # the other lab goes down just now
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", racing)
    assert st.ledger() == {"clab-b-y": "a"}
    assert not [p for p in st.ledger_dir().iterdir() if p.name.startswith(".")]  # no temp file left


# ---- containerlab's schema: ECMA-262 patterns (\p{L}, \p{N}) translated for Python --------------
def _schema_topology(**over):
    topo = {
        "name": "sch",
        "mgmt": {"network": "sch-mgmt", "ipv4-subnet": "172.20.20.0/24", "ipv4-range": "172.20.20.128/25"},
        "topology": {
            "nodes": {"a": {"kind": "linux", "image": "alpine:3", "mgmt-ipv4": "172.20.20.5",
                            "ports": ["8080:80", "127.0.0.1:2222:22/tcp"]},
                      "b": {"kind": "linux", "image": "alpine:3"}},
            "links": [{"endpoints": ["a:eth1", "b:eth1"]},
                      {"type": "vxlan", "endpoint": {"node": "a", "interface": "eth2"},
                       "remote": "10.1.0.1", "vni": 1301, "dst-port": 4789, "mtu": 9100}],
        },
    }
    for path, value in over.items():
        d = topo
        keys = path.split("/")
        for k in keys[:-1]:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[int(keys[-1]) if isinstance(d, list) else keys[-1]] = value
    return topo


def test_stock_jsonschema_cannot_compile_the_schema_patterns():
    """What railab hit before: Python's re rejects containerlab's ECMA-262 \\p{...} patterns."""
    import re

    import jsonschema

    from railab.topologies.clab import find_schema

    schema = json.loads(find_schema().read_text())
    with pytest.raises(re.error, match="bad escape"):
        list(jsonschema.Draft202012Validator(schema).iter_errors(_schema_topology()))


def test_ecma_pattern_translation():
    import re

    from railab.topologies.clab import ecma_pattern

    zone = re.compile(ecma_pattern(r"^x(%[\p{N}\p{L}]+)?$"))
    assert zone.match("x%eth0") and zone.match("x%Ethernet٣") and zone.match("x")
    assert not zone.match("x%eth_0") and not zone.match("x%")
    assert re.fullmatch(ecma_pattern(r"\p{L}+"), "réseau") and not re.fullmatch(ecma_pattern(r"\p{L}+"), "a1")
    assert re.fullmatch(ecma_pattern(r"[a\-\p{L}]+"), "a-b")
    assert ecma_pattern(r"^[0-9]{1,3}\.\d$") == r"^[0-9]{1,3}\.\d$"  # the rest is left alone
    with pytest.raises(ValueError, match="unsupported"):
        ecma_pattern(r"\p{Greek}")


@pytest.mark.parametrize("over, where", [
    ({}, None),
    ({"topology/links/1/remote": "10.1.0.1%eth0"}, None),
    ({"topology/links/1/remote": "2001:db8::1"}, None),
    ({"topology/links/1/remote": "10.1.0.999"}, "topology/links/1"),
    ({"topology/nodes/a/mgmt-ipv4": "172.20.20.300"}, "topology/nodes/a"),
    ({"mgmt/ipv4-range": "not-a-range"}, "mgmt/ipv4-range"),
    ({"topology/nodes/a/ports": ["80:eighty"]}, "topology/nodes/a"),
])
def test_schema_with_mgmt_ports_range_and_vxlan(over, where):
    from railab.topologies.clab import ClabSchemaError, validate_topology

    topo = _schema_topology(**over)
    if where is None:
        assert validate_topology(topo) is not None
    else:
        with pytest.raises(ClabSchemaError, match=where):
            validate_topology(topo)


def test_vxlan_link_is_read_and_validated(tmp_path):
    doc = _schema_topology()
    p = _write(tmp_path, doc)
    c = load_clab(p, validate=True)
    assert [(lk.a, lk.b) for lk in c.links] == [(("a", "eth1"), ("b", "eth1"))]
    (x,) = c.external_links
    assert (x.type, x.endpoint, x.mtu, x.options["remote"], x.options["vni"]) == (
        "vxlan", ("a", "eth2"), 9100, "10.1.0.1", 1301)
    doc["topology"]["links"][1]["remote"] = "10.1.0.999"
    with pytest.raises(RailabError, match="clab topology fails"):
        load_clab(_write(tmp_path, doc), validate=True)
    doc["topology"]["links"][1]["type"] = "wormhole"
    with pytest.raises(RailabError, match="unknown link type 'wormhole'"):
        load_clab(_write(tmp_path, doc))
