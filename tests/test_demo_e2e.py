"""`railab demo mini` end to end on the netns runtime with real FRR (root, Debian frr).

One demo run (module-scoped) as a user runs it: a subprocess of the CLI, its own lab name, its
own output directory. Asserts the exit code, the report files, every path class with
expected == observed hops, and that the lab left no namespace, state or process behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

LAB = f"e2e{os.getpid()}"


def _demo(intent: str, lab: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from railab.cli import main; main()",
         "demo", intent, "--name", lab, "--out", str(out)],
        capture_output=True, text=True, timeout=540,
        env={**os.environ, "COLUMNS": "120"},
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return _demo("mini", LAB, out), out


def test_demo_exits_zero_and_writes_every_report_file(demo_run):
    proc, out = demo_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for name in ("report.json", "report.xml", "report.html", "fabric.svg"):
        assert (out / "report" / name).stat().st_size > 0, name
    for step in ("plan", "generate", "up", "traffic", "checks", "report", "down"):
        assert f"] {step}:" in proc.stdout, step
    assert "PASS" in proc.stdout


def test_every_path_class_takes_its_expected_hops(demo_run):
    _, out = demo_run
    rep = json.loads((out / "report" / "report.json").read_text())
    expected = rep["lab"]["expected_hops"]
    seen = {p["path_class"] for p in rep["paths"]}
    for cls in ("intra-server", "intra-rail", "inter-rail", "inter-rail-pxn", "cross-group"):
        assert cls in seen, f"no flow of class {cls}"
        assert cls in expected
    for p in rep["paths"]:
        assert p["observed_hops"] == p["expected_hops"], p
        assert p["ok"], p
    # ECMP: the mini lab has 2 spines; flows differing in UDP source port must use both.
    assert rep["ecmp"], "no ECMP spread measured"
    for e in rep["ecmp"]:
        assert sum(1 for v in e["per_spine"].values() if v > 0) == 2, e
    assert rep["traces"], "no traceroute"
    assert rep["checks"] and all(c["status"] != "fail" for c in rep["checks"])
    assert {c["check"] for c in rep["checks"]} >= {"bgp", "routes", "cabling"}
    cp = rep["control_plane"]  # measured per role, no router named (issue 47 item 5)
    assert "routers" not in cp and cp["roles"]["leaf"]["bgp_routes"] == {"min": 16, "median": 16, "max": 16}
    assert cp["roles"]["spine"]["sessions"] == {"up": 16, "expected": 16} and cp["roles"]["leaf"]["memory_mib"]


def test_junit_and_html_agree(demo_run):
    _, out = demo_run
    root = ET.parse(out / "report" / "report.xml").getroot()
    assert sum(int(s.get("failures")) + int(s.get("errors")) for s in root.iter("testsuite")) == 0
    assert sum(int(s.get("tests")) for s in root.iter("testsuite")) > 10
    html = (out / "report" / "report.html").read_text()
    assert 'id="verdict">PASS' in html and 'id="checks-table"' in html and "<svg" in html
    assert 'id="control-plane-table"' in html


def test_demo_leaves_nothing_behind(demo_run):
    _, out = demo_run
    from railab.testbed import state as st

    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"clab-{LAB}-")] \
        if os.path.isdir("/run/netns") else True
    assert st.load(LAB) is None and not st.lab_dir(LAB).exists()
    # No FRR daemon of this lab still runs (their command lines carry the lab's run directory).
    leftovers = subprocess.run(["pgrep", "-f", f"/{LAB}/"], capture_output=True, text=True).stdout
    assert leftovers.strip() == ""


def test_rail_only_demo_reports_inter_rail_unreachable_as_designed(tmp_path):
    """Rail-only 512 (two rails per leaf, no spines): inter-rail without PXN is unreachable unless
    both rails share a leaf, and that is a pass, not a failure."""
    lab = f"e2ero{os.getpid()}"
    proc = _demo("rail-only-512", lab, tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    inter = [p for p in rep["paths"] if p["path_class"] == "inter-rail"]
    assert inter and all(p["expected_hops"] is None and p["observed_hops"] is None
                         and p["received"] == 0 and p["ok"] for p in inter)
    assert all("unreachable, as designed" in p["detail"] for p in inter)
    same_leaf = [p for p in rep["paths"] if p["path_class"] == "inter-rail-same-leaf"]
    assert same_leaf and all(p["observed_hops"] == 1 for p in same_leaf)
    pxn = [p for p in rep["paths"] if p["path_class"] == "inter-rail-pxn"]
    assert pxn and all(p["observed_hops"] == 1 and p["ok"] for p in pxn)
    assert rep["ecmp"] == []  # no spine layer
    assert "unreachable, as designed" in proc.stdout
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"clab-{lab}-")]
