"""Root-free tests of testbed.clabfile (reading <lab>.clab.yml) and testbed.state's ledger."""

from __future__ import annotations

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
