"""Report and fabric diagram, root-free: a generated lab directory plus synthetic results.

The page is loaded in headless Chromium (Debian's ``chromium``; ``scripts/bootstrap.sh --test``
installs it) to prove it renders: the checks table, the hop matrix and the diagram are in the DOM.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.graph import TracedPath, fabric_graph, rail_colour
from railab.report import (
    CheckItem,
    EcmpSpread,
    LabSummary,
    PathResult,
    Report,
    StepTiming,
    Trace,
    TraceHop,
    ecmp_bar_chart,
    hop_matrix,
    render_junit,
    write_report,
)
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` not installed")


@pytest.fixture(scope="module")
def mini(tmp_path_factory) -> tuple[Path, LabSpec]:
    labdir = generate("mini", tmp_path_factory.mktemp("report") / "lab", name="rep-mini")
    return labdir, LabSpec.load(labdir)


def _synthetic(spec: LabSpec, *, broken: bool = False) -> Report:
    """Results shaped like a demo run on the mini lab; ``broken`` makes inter-rail take 1 hop
    and one route lose an ECMP member (what a swapped / cut cable looks like)."""
    inter_obs = 1 if broken else 3
    paths = [
        PathResult(path_class="intra-server", src="srv1:gpu0", dst="srv1:gpu1", expected_hops=0,
                   observed_hops=0, sent=4, received=4, ok=True),
        PathResult(path_class="intra-rail", src="srv1:gpu0", dst="srv2:gpu0", expected_hops=1,
                   observed_hops=1, sent=4, received=4, ok=True,
                   path=["srv1:eth1", "g1-leaf1", "srv2:eth1"]),
        PathResult(path_class="inter-rail", src="srv1:gpu0", dst="srv2:gpu1", expected_hops=3,
                   observed_hops=inter_obs, sent=4, received=4, ok=not broken,
                   path=["srv1:eth1", "g1-leaf1", "spine1", "g1-leaf2", "srv2:eth2"]),
        PathResult(path_class="inter-rail-pxn", pxn=True, src="srv1:gpu0", dst="srv2:gpu1",
                   expected_hops=1, observed_hops=1, sent=4, received=4, ok=True,
                   path=["srv1:eth1", "srv1:eth2", "g1-leaf2", "srv2:eth2"]),
        PathResult(path_class="cross-group", src="srv1:gpu0", dst="srv3:gpu0", expected_hops=3,
                   observed_hops=3, sent=4, received=4, ok=True),
    ]
    checks = [CheckItem(check="bgp", name=f"{s.node}:{s.interface} <-> {s.peer}:{s.peer_interface}",
                        node=s.node, status="pass") for s in spec.bgp_sessions]
    checks.append(CheckItem(
        check="routes", name="g1-leaf1 10.0.5.0/24", node="g1-leaf1",
        status="fail" if broken else "pass", expected="2 next hops", observed="1 next hop",
        reason="g1-leaf1:eth4 <-> spine2:eth1 is down"))
    checks.append(CheckItem(check="oversub", name="g1-leaf1", status="skip", reason="not measured"))
    return Report(
        intent="mini",
        lab=LabSummary.from_spec(spec),
        design=spec.design,
        plan={"architecture": "rail-optimized", "gpus": 1024, "servers": 128, "groups": 2,
              "leaf_switches": 16, "spine_switches": 8, "limits": {"max_gpus": 8192}},
        paths=paths,
        ecmp=[EcmpSpread(src="srv1:gpu0", dst="srv3:gpu0", flows=32,
                         per_spine={"spine1": 14, "spine2": 18}, ok=True)],
        traces=[Trace(path_class="inter-rail", src="srv1:gpu0", dst="srv2:gpu1",
                      hops=[TraceHop(ttl=1, address="10.0.1.0", node="g1-leaf1", rtt_ms=0.1),
                            TraceHop(ttl=2, address="10.255.0.1", node="spine1"),
                            TraceHop(ttl=3, address=None)],
                      path=["srv1:eth1", "g1-leaf1", "spine1", "g1-leaf2", "srv2:eth2"])],
        checks=checks,
        timings=[StepTiming(step="up", seconds=9.5)],
    )


def test_verdict_and_failures(mini):
    _, spec = mini
    assert _synthetic(spec).passed
    bad = _synthetic(spec, broken=True)
    assert not bad.passed
    lines = bad.failures()
    assert any("inter-rail" in ln for ln in lines)
    assert any("routes g1-leaf1 10.0.5.0/24" in ln and "spine2" in ln for ln in lines)
    # A skipped check is not a failure.
    assert not any("oversub" in ln for ln in lines)


def test_skipped_checks_are_not_counted_as_passed(mini, tmp_path):
    """A skip is neither passed nor failed: console text, JSON summary and the page say so."""
    _, spec = mini
    rep = _synthetic(spec)
    n_bgp = len(spec.bgp_sessions)
    assert rep.passed  # a skip does not fail the run
    assert rep.check_counts == {"passed": n_bgp + 1, "failed": 0, "skipped": 1,
                                "total": n_bgp + 2}
    assert rep.checks_text() == f"{n_bgp + 1} passed, 1 skipped"
    assert _synthetic(spec, broken=True).checks_text() == f"{n_bgp} passed, 1 failed, 1 skipped"
    files = write_report(rep, spec, tmp_path / "out")
    import json as _json
    assert _json.loads(files.json_path.read_text())["check_counts"]["skipped"] == 1
    html = files.html.read_text()
    card = re.search(r'id="checks-card"><b>([^<]*)</b><span>([^<]*)</span>', html)
    assert card and card.group(1) == f"{n_bgp + 1}/{n_bgp + 2}"
    assert "1 skipped" in card.group(2)
    heading = re.search(r'id="checks-heading">(.*?)</h2>', html, re.S).group(1)
    assert "all passed" not in heading and f"{n_bgp + 1} passed, 1 skipped" in heading


def test_hop_matrix_places_each_flow(mini):
    _, spec = mini
    m = hop_matrix(_synthetic(spec, broken=True))
    assert m["columns"][-1] is None and m["columns"][:4] == [0, 1, 2, 3]
    rows = {r["path_class"]: r for r in m["rows"]}
    assert rows["inter-rail"]["expected"] == 3
    assert rows["inter-rail"]["cells"][1] == 1 and rows["inter-rail"]["cells"][3] == 0
    assert rows["inter-rail"]["ok"] is False
    assert rows["cross-group"]["cells"][3] == 1 and rows["cross-group"]["ok"] is True
    # Class order follows the architecture table.
    order = [r["path_class"] for r in m["rows"]]
    assert order.index("intra-server") < order.index("inter-rail") < order.index("cross-group")


def test_ecmp_chart_bars_scale_with_counts():
    svg = str(ecmp_bar_chart(EcmpSpread(src="a", dst="b", flows=30,
                                        per_spine={"spine2": 10, "spine1": 20}, ok=True)))
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)"', svg)]
    assert len(widths) == 2
    assert widths[0] == pytest.approx(2 * widths[1])  # spine1 (20) sorted first, twice spine2
    assert "even share 15.0" in svg and "<script" not in svg


def test_junit_counts_every_case(mini):
    _, spec = mini
    rep = _synthetic(spec, broken=True)
    root = ET.fromstring(render_junit(rep))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert int(suites["railab.paths"].get("tests")) == len(rep.paths)
    assert int(suites["railab.paths"].get("failures")) == 1
    assert int(suites["railab.checks"].get("tests")) == len(rep.checks)
    assert int(suites["railab.checks"].get("failures")) == 1
    assert int(suites["railab.checks"].get("skipped")) == 1
    # one JUnit writer (railab.checks.junit): a check row is railab.<lab>.<family> in the report
    # and in `railab check --junit` alike; a flow is railab.<lab>.paths.<path class>
    failure = root.find(".//testcase[@classname='railab.rep-mini.routes']/failure")
    assert failure is not None and "spine2" in failure.get("message")
    assert root.find(".//testcase[@classname='railab.rep-mini.paths.inter-rail']") is not None
    assert int(root.get("failures")) == sum(int(s.get("failures")) for s in root.iter("testsuite"))


def test_report_and_check_junit_write_the_same_case(mini):
    """A check row gives the same testcase (classname, name, failure message) in report.xml and
    in `railab check --junit`: one writer."""
    from railab.checks.base import CheckResult
    from railab.checks.junit import to_junit

    _, spec = mini
    rep = _synthetic(spec, broken=True)
    item = next(c for c in rep.checks if c.status == "fail")
    row = CheckResult(**{k: getattr(item, k) for k in
                         ("check", "name", "status", "node", "subject", "expected", "observed", "reason")})
    a = ET.fromstring(render_junit(rep)).find(f".//testcase[@name='{item.name}']")
    b = ET.fromstring(to_junit([row], spec.name)).find(f".//testcase[@name='{item.name}']")
    assert a.get("classname") == b.get("classname") == f"railab.{spec.name}.{item.check}"
    assert a.find("failure").get("message") == b.find("failure").get("message")
    assert a.find("failure").text == b.find("failure").text


def test_diagram_structure(mini):
    _, spec = mini
    path = TracedPath(label="inter-rail", hops=["srv1:eth1", "g1-leaf1", "spine1", "g1-leaf2",
                                                "srv2:eth2"])
    src = fabric_graph(spec, [path]).source
    # Groups are clusters, spines on the top rank, each leaf filled with its rail colour.
    assert "subgraph cluster_group1" in src and "subgraph cluster_group2" in src
    assert re.search(r"subgraph spines \{\s*rank=min", src)
    leaf = spec.node("g2-leaf3")
    assert re.search(rf'"?g2-leaf3"? \[[^\]]*fillcolor="{rail_colour(leaf.rails[0])}"', src)
    # Every server-leaf link is drawn in its rail's colour.
    for nic in spec.nics[:6]:
        assert re.search(rf'{nic.leaf}"? -- "?{nic.server}"?:{nic.interface}:n \[color="'
                         rf'{rail_colour(nic.rail)}"', src), nic
    assert src.count('penwidth=3.4') == 4  # the traced path: 4 bold edges
    with pytest.raises(ValueError, match="spine9"):
        fabric_graph(spec, [TracedPath(label="x", hops=["srv1:eth1", "spine9"])])


@needs_dot
def test_write_report_roundtrip(mini, tmp_path):
    _, spec = mini
    rep = _synthetic(spec)
    files = write_report(rep, spec, tmp_path / "out")
    for p in (files.json_path, files.junit, files.html, files.diagram):
        assert p.stat().st_size > 0
    assert Report.load(tmp_path / "out") == rep
    html = files.html.read_text()
    assert 'id="checks-table"' in html and "<svg" in html and "<script" not in html
    assert "http://" not in html.replace("http://www.w3.org/", "")  # nothing fetched


@needs_dot
def test_cli_graph_and_report_rerender(mini, tmp_path):
    labdir, spec = mini
    runner = CliRunner()
    out = tmp_path / "fabric.svg"
    res = runner.invoke(app, ["graph", str(labdir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text().lstrip().startswith("<?xml") or "<svg" in out.read_text()
    # `railab report` on a lab that is not running re-renders an existing report.json.
    rdir = tmp_path / "rep"
    write_report(_synthetic(spec, broken=True), spec, rdir)
    (rdir / "report.html").unlink()
    res = runner.invoke(app, ["report", str(labdir), "-o", str(rdir)])
    assert res.exit_code == 1, res.output  # the stored report has failures
    assert (rdir / "report.html").exists()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@needs_dot
@pytest.mark.skipif(_chromium() is None,
                    reason="chromium not installed (scripts/bootstrap.sh --test installs it)")
def test_html_renders_in_headless_chromium(mini, tmp_path):
    _, spec = mini
    files = write_report(_synthetic(spec, broken=True), spec, tmp_path)
    profile = tempfile.mkdtemp(prefix="railab-chromium-")
    try:
        dom = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
             files.html.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert '<table id="checks-table">' in dom
    assert 'id="hop-matrix"' in dom
    # The diagram is parsed as inline SVG holding every switch as a graphviz node.
    diagram = dom[dom.index('id="fabric-diagram"'):]
    assert "<svg" in diagram
    for node in spec.by_role("spine") + spec.by_role("leaf"):
        assert f"<title>{node.name}</title>" in diagram
    assert dom.count('class="ecmp-chart"') == 1
    assert 'id="verdict">FAIL' in dom.replace("\n", "")


def test_demo_flows_cover_every_path_class(mini):
    """The demo's flow list (traffic.patterns) holds every path class of lab.json, with and
    without PXN, and the ECMP sets vary only the QP (UDP source port)."""
    from railab.demo import _drawn_path, ecmp_flows, trace_flows, traffic_flows

    _, spec = mini
    flows = traffic_flows(spec)
    assert {f.path_class for f in flows} == set(spec.expected_hops)
    assert any(f.pxn and f.nvlink for f in flows)
    for f in flows:
        assert f.expected_hops == spec.expected_hops[f.path_class], f
    sets = dict(ecmp_flows(spec))
    assert set(sets) == {"inter-rail", "cross-group"}
    for fl in sets.values():
        assert len({(f.src, f.dst) for f in fl}) == 1 and len({f.qp for f in fl}) == len(fl) >= 32
    pxn = next(f for f in trace_flows(spec) if f.pxn)
    # PXN: GPU 0's NIC, NVLink to the peer GPU's NIC, its rail leaf, the destination NIC.
    assert _drawn_path(pxn, ["g1-leaf4:eth3"]) == ["srv1:eth1", "srv1:eth4", "g1-leaf4",
                                                   "srv2:eth4"]


def test_console_failures_are_grouped_under_root_causes_like_the_page(mini):
    """Issue 31: `railab report` printed every failed check one by one while its HTML groups
    them under root causes; the console now prints one line per root cause with how many
    failures follow from it (and still lists failed paths one by one)."""
    from rich.console import Console

    from railab.demo import print_failures
    from railab.report import root_cause_groups

    _, spec = mini
    rep = _synthetic(spec, broken=True)
    link = "g1-leaf1:eth3--spine1:eth1"
    rep.checks.append(CheckItem(check="cabling", name="g1-leaf1:eth3", node="g1-leaf1", port="eth3",
                                link=link, status="fail", expected="up", observed="admin-down",
                                cause={"kind": "link-down", "node": "g1-leaf1", "port": "eth3",
                                       "link": link}))
    for i in range(3):
        rep.checks.append(CheckItem(check="routes", name=f"g2-leaf{i + 1} 10.0.1.0/24",
                                    node=f"g2-leaf{i + 1}", status="fail", expected="2 next hops",
                                    observed="1 next hop", reason="ECMP short",
                                    cause={"kind": "session-down", "link": link}))
    groups = root_cause_groups(rep)
    assert len(groups) == 2 and any(len(c) == 3 for _, c in groups)  # the HTML's grouping
    con = Console(record=True, width=300)
    print_failures(con, rep)
    text = con.export_text()
    fails = [ln for ln in text.splitlines() if "FAIL" in ln]
    assert len(fails) == 3, text  # the path, and two root causes: not one line per check
    assert any("path inter-rail" in ln for ln in fails)
    (cab,) = [ln for ln in fails if "cabling g1-leaf1:eth3" in ln]
    assert "root cause:" in cab and "+3 more failures follow from it: routes 3" in cab
    assert "g2-leaf2 10.0.1.0/24" not in text


def test_the_rc_transport_table_carries_what_recovery_cost(mini):
    """An ``lb compare --nic gbn --json`` (the stored link-speed measurement) and a load run with
    ``--nic ooo``: one row per mode and per run with resent packets, NAKs, timeouts and FCT; the
    not-modelled box no longer says lost packets are never retransmitted."""
    from railab.report import LabSummary, LoadRun, Report, add_runs, render_html

    mini = mini[1]
    rep = Report(lab=LabSummary.from_spec(mini))
    add_runs(rep, [Path(__file__).resolve().parents[1] / "docs" / "data" / "link-speed-lb-2026-12-06" / "gbn-1.json"])
    assert rep.load_balancing[0].label.endswith(", nic=gbn")
    rep.congestion.append(LoadRun(label="incast cc=none pfc=off nic=ooo", data={
        "nic": "ooo", "flows": [], "transport": {"nic": "ooo", "goodput_mbps": 150.5, "retx_packets": 8544,
                                                 "retx_bytes": 35_000_000, "naks": 12, "timeouts": 6,
                                                 "fct_p50_s": 8.93, "fct_p99_s": 9.51}}))
    page = render_html(rep, mini, diagram_svg="<svg></svg>")
    table = page[page.index('<table class="transport">'):]
    table = table[:table.index("</table>")]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 6 + 1  # six modes of the comparison, the incast
    spray = next(r for r in rows if ": spray-rr<" in r)
    for text in (">gbn<", ">5602<", ">1413<", ">38<", ">46.31<"):
        assert text in spray, (text, spray)
    inc = next(r for r in rows if "nic=ooo<" in r)
    assert ">ooo<" in inc and ">8544<" in inc and ">9.51<" in inc
    assert "never retransmitted" not in page or "--nic none" in page
