"""Issue 13: the HTML report groups failures by root cause, and the diagram draws injected
faults, down links and down sessions in their own styles, and the PXN NVLink hop inside the
server box (from the source GPU's NIC to the rail-aligned peer NIC). No root needed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from railab.checks.base import Cause, failed, link_id, passed
from railab.graph import FabricMarks, TracedPath, fabric_graph
from railab.report import CheckItem, LabSummary, Report, fabric_marks, render_html, root_cause_groups
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp("r") / "pr",
                 name="pr")
    return LabSpec.load(d)


def _lid(spec, node, port):
    peer = spec.peer(node, port)
    return link_id(node, port, *peer)


def _report(spec) -> Report:
    nic = spec.nic("srv4", 2)
    down = _lid(spec, nic.leaf, nic.leaf_port)
    up = _lid(spec, "g1-leaf1", "eth3")
    rows = [
        failed("cabling", "srv4 NIC 2", node="srv4", port="eth2", link=down,
               observed="srv4:eth2 DOWN", cause=Cause(kind="link-down", node="srv4", link=down)),
        failed("bgp", "g1-leaf1:eth3 <-> spine1:eth1", node="g1-leaf1", link=up,
               cause=Cause(kind="session-down", node="g1-leaf1", port="eth3", link=up)),
        failed("oversub", "g1-leaf1", node="g1-leaf1", observed="2:1",
               cause=Cause(kind="session-down", node="g1-leaf1", port="eth3", link=up)),
        failed("routes", "spine1 10.0.5.0/24", node="spine1", prefix="10.0.5.0/24",
               cause=Cause(kind="link-down", link=down)),
        passed("bgp", "spine1 ASN", node="spine1"),
    ]
    return Report(lab=LabSummary.from_spec(spec), checks=[CheckItem.from_result(r) for r in rows],
                  faults=[{"id": "f1", "kind": "link-down", "node": "spine2", "port": "eth1",
                           "peer_node": None, "peer_port": None, "note": "admin down spine2:eth1"},
                          {"id": "f2", "kind": "daemon-kill", "node": "g2-leaf3", "port": None,
                           "peer_node": None, "peer_port": None, "note": "bgpd killed"}])


def test_check_items_keep_their_cause_and_group_by_root(spec):
    rep = _report(spec)
    assert rep.checks[0].cause["kind"] == "link-down" and rep.checks[0].link
    groups = root_cause_groups(rep)
    assert [(r.check, [c.check for c in cons]) for r, cons in groups] == [
        ("cabling", ["routes"]), ("bgp", ["oversub"])]
    again = Report.model_validate_json(rep.dump())  # report.json round trip keeps the causes
    assert [r.name for r, _ in root_cause_groups(again)] == [r.name for r, _ in groups]


def test_a_row_two_roots_explain_together_survives_report_json_under_both(spec):
    """Issue 31: a routes row two faults cause together (``CheckResult.joint``) keeps its
    causes through report.json, so the report shows two root causes with the row under each,
    as ``railab check`` does."""
    a = _lid(spec, "g1-leaf1", "eth3")
    b = _lid(spec, "g2-leaf1", "eth4")
    rows = [
        failed("cabling", "A", node="g1-leaf1", link=a, cause=Cause(kind="link-down", link=a)),
        failed("cabling", "B", node="g2-leaf1", link=b, cause=Cause(kind="link-down", link=b)),
        failed("routes", "g2-leaf1 10.0.0.0/24", node="g2-leaf1", prefix="10.0.0.0/24",
               cause=Cause(kind="link-down", link=a), joint=(Cause(kind="link-down", link=b),)),
    ]
    rep = Report(lab=LabSummary.from_spec(spec), checks=[CheckItem.from_result(r) for r in rows])
    again = Report.model_validate_json(rep.dump())
    assert again.checks[2].to_result().joint == rows[2].joint
    assert [(r.name, [c.name for c in cons]) for r, cons in root_cause_groups(again)] == [
        ("A", ["g2-leaf1 10.0.0.0/24"]), ("B", ["g2-leaf1 10.0.0.0/24"])]


def test_marks_come_from_the_causes_and_the_faults(spec):
    rep = _report(spec)
    m = fabric_marks(rep)
    nic = spec.nic("srv4", 2)
    assert set(m.down_links) == {_lid(spec, nic.leaf, nic.leaf_port)}
    assert m.down_sessions == [_lid(spec, "g1-leaf1", "eth3")]
    assert [f["id"] for f in m.faults] == ["f1", "f2"]
    assert list(m.fault_links(spec)) == [_lid(spec, "spine2", "eth1")]
    assert list(m.fault_nodes()) == ["g2-leaf3"]


def test_a_shut_session_is_drawn_as_a_down_session(spec):
    """The bgp family names an administratively shut session ``session-shut`` (issue 48 review
    C): the diagram marks it as it marks a session down."""
    up = _lid(spec, "g1-leaf1", "eth3")
    rows = [failed("bgp", "g1-leaf1:eth3 <-> spine1:eth1", node="g1-leaf1", link=up,
                   cause=Cause(kind="session-shut", node="g1-leaf1", port="eth3", link=up))]
    rep = Report(lab=LabSummary.from_spec(spec), checks=[CheckItem.from_result(r) for r in rows])
    assert fabric_marks(rep).down_sessions == [up]


def _edge_lines(src: str, needle: str) -> list[str]:
    return [ln for ln in src.splitlines() if needle in ln]


def test_diagram_draws_faults_down_links_and_sessions_in_their_own_styles(spec):
    src = fabric_graph(spec, marks=fabric_marks(_report(spec))).source.replace('"g', "g")
    nic = spec.nic("srv4", 2)
    down = _edge_lines(src, f"{nic.server}:{nic.interface}:n")
    assert down and 'style=dashed' in down[0] and "#C00000" in down[0], down
    peer = spec.peer("g1-leaf1", "eth3")[0]
    sess = [ln for ln in src.splitlines() if f"{peer} -- g1-leaf1" in ln and "dotted" in ln]
    assert len(sess) == 1, src
    fault = [ln for ln in src.splitlines() if 'label="f1 link-down"' in ln]
    assert len(fault) == 1 and "bold" in fault[0]
    assert 'xlabel="f2 daemon-kill"' in src
    for text in ("injected fault", "link down (dashed)", "BGP session down, link up (dotted)"):
        assert text in src  # legend rows
    healthy = fabric_graph(spec).source
    assert "style=dashed" not in healthy and "dotted" not in healthy and "#C00000" not in healthy


def test_pxn_nvlink_hop_is_drawn_inside_the_server_box(spec):
    path = TracedPath(label="inter-rail-pxn srv1:gpu0 -> srv2:gpu1",
                      hops=["srv1:eth1", "srv1:eth2", "g1-leaf2", "srv2:eth2"])
    src = fabric_graph(spec, [path]).source.replace('"g', "g")
    srv1 = next(ln for ln in src.splitlines() if ln.strip().startswith("srv1 [label="))
    assert "NVLink 1&#8594;2" in srv1 and 'COLSPAN="2"' in srv1, srv1
    assert "srv1:eth1:s" not in src  # no loop drawn outside the box any more
    assert any("srv1:eth2:n" in ln and "g1-leaf2" in ln for ln in src.splitlines())
    srv2 = next(ln for ln in src.splitlines() if ln.strip().startswith("srv2 [label="))
    assert "NVLink" not in srv2


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_html_lists_root_causes_and_faults(spec):
    html = render_html(_report(spec), spec)
    assert 'id="root-causes"' in html and "Root causes (2)" in html
    assert "f1 link-down (admin down spine2:eth1)" in html
    assert "NVLink hop of PXN" in html


def test_marks_default_to_nothing(spec):
    assert FabricMarks().fault_links(spec) == {} and FabricMarks().fault_nodes() == {}
