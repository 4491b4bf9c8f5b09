"""Root-free parts of railab.testbed.faults and the new check rows: link resolution, the
neighbour lines a wrong-ASN heal re-applies, the runtime refusal, nft JSON parsing."""

from __future__ import annotations

import pytest

from railab.checks.cabling import _dropping_chains
from railab.errors import UsageError
from railab.testbed import faults as F
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec


@pytest.fixture(scope="module")
def labdir(tmp_path_factory):
    return generate("mini", tmp_path_factory.mktemp("fu") / "fu1", name="fu1")


def test_resolve_link_forms(labdir):
    spec = LabSpec.load(labdir)
    assert F.resolve_link(spec, "g1-leaf1", "spine1") == ("g1-leaf1", "eth3", "spine1", "eth1")
    assert F.resolve_link(spec, "g1-leaf1:eth4") == ("g1-leaf1", "eth4", "spine2", "eth1")
    assert F.resolve_link(spec, "g1-leaf1", port="eth1") == ("g1-leaf1", "eth1", "srv1", "eth1")
    with pytest.raises(UsageError, match="no link to srv3"):
        F.resolve_link(spec, "g1-leaf1", "srv3")
    with pytest.raises(UsageError, match="has no node 'nosuch'"):
        F.resolve_link(spec, "nosuch", "spine1")
    with pytest.raises(UsageError, match="leads to spine2:eth1, not spine1"):
        F.resolve_link(spec, "g1-leaf1:eth4", "spine1")


def test_neighbor_lines_rebuild_the_peer_group_member(labdir):
    conf = (labdir / "configs" / "spine1" / "frr.conf").read_text()
    # a spine is the upper end of its leaf links: the rebuilt member listens again (passive)
    assert F._neighbor_lines(conf, 4200000000, "eth2") == [
        ["router bgp 4200000000", "neighbor eth2 interface peer-group FABRIC"],
        ["router bgp 4200000000", "neighbor eth2 passive"]]
    assert F._neighbor_lines(conf, 4200000001, "eth2") == []
    leaf = (labdir / "configs" / "g1-leaf1" / "frr.conf").read_text()
    leaf_lines = F._neighbor_lines(leaf, 4200000001, "eth3")
    assert leaf_lines and all("passive" not in line for lines in leaf_lines for line in lines)


def test_netns_only_kinds_are_refused_on_containerlab(labdir, tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab="fu1", runtime="containerlab", phase="running", labdir=str(labdir)))
    for kind in F.NETNS_ONLY:
        with pytest.raises(UsageError, match="needs the netns runtime"):
            F.inject(labdir, kind, "g1-leaf1", "spine1")
    with pytest.raises(UsageError, match="unknown fault kind"):
        F.inject(labdir, "meltdown", "g1-leaf1")
    assert st.load("fu1").faults == []


def test_fault_record_round_trips_in_state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    rec = st.FaultRecord(id="f1", kind="mtu", node="srv1", port="eth1", params={"mtu": 1500})
    st.save(st.LabState(lab="fu2", faults=[rec], fault_seq=1))
    back = st.load("fu2")
    assert back.faults == [rec] and back.fault_seq == 1
    assert st.LabState(lab="old").faults == []  # records written before faults existed


def test_dropping_chains_reads_nft_json():
    doc = {"nftables": [
        {"chain": {"family": "netdev", "table": "railab_f3", "name": "egress", "hook": "egress", "dev": "eth2"}},
        {"rule": {"table": "railab_f3", "chain": "egress", "expr": [
            {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 10000}}, "right": 500}},
            {"counter": {"packets": 0, "bytes": 0}}, {"drop": None}]}},
        {"chain": {"family": "netdev", "table": "other", "name": "c", "hook": "ingress", "dev": "eth1"}},
        {"rule": {"table": "other", "chain": "c", "expr": [{"accept": None}]}},
    ]}
    assert _dropping_chains(doc) == [("eth2", "egress", "railab_f3", "5 % at random")]


def test_a_fault_change_never_brings_back_a_lab_another_down_removed(tmp_path, monkeypatch):
    """CI found a drill whose heal ran after `railab down` from another shell had removed the
    lab: the heal re-wrote state.json (and faults.lock re-made the run directory), so the lab read
    as up again and the drill named a missing namespace instead of the down. A change to a running
    lab's record (st.update, the fault lock) refuses once the lab is gone or being removed."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    rec = st.save(st.LabState(lab="fu9", runtime="netns", phase="running"))
    st.update(rec)  # up: written
    st.mark_removing("fu9")  # a down is under way
    with pytest.raises(Exception, match="fu9 went down meanwhile"):
        st.update(rec)
    st.remove_lab_dir("fu9")  # that down finished
    with pytest.raises(Exception, match="fu9 went down meanwhile"):
        st.update(rec)
    with pytest.raises(Exception, match="fu9 went down meanwhile"):
        with F._locked("fu9"):
            pass
    assert not st.lab_dir("fu9").exists() and "fu9" not in st.labs()
