"""The control-plane figures' arithmetic (railab.checks.controlplane) and where the report and
``status`` show them, without a lab (issue 47 item 5)."""

from __future__ import annotations

import json
import os

import pytest

from railab.checks.controlplane import (
    fib_figures,
    histogram_spread,
    observe_control_plane,
    role_summary,
    smaps_kib,
    spread,
    summary_only,
)
from railab.report import LabSummary, Report, control_plane_rows, render_html
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return LabSpec.load(generate("mini", tmp_path_factory.mktemp("cpu") / "lab", name=f"cpu{os.getpid()}"))


def test_spread_and_its_histogram_form_agree():
    assert spread([]) is None and histogram_spread({}) is None and histogram_spread({4: 0}) is None
    assert spread([3, 1, 2]) == {"min": 1, "median": 2, "max": 3}
    assert spread([4, 1, 2, 3]) == {"min": 1, "median": 2.5, "max": 4}  # even: mean of the middle two
    assert spread([19.24, 19.24000001]) == {"min": 19.24, "median": 19.24, "max": 19.24000001}  # rounded
    for hist in ({2: 14, 1: 2}, {8: 8, 64: 30}, {1: 1}, {1: 3, 5: 3}, {7: 2, 2: 5, 3: 0}):
        values = [v for v, c in hist.items() for _ in range(c)]
        assert histogram_spread(hist) == spread(values), hist


def test_fib_figures_split_by_protocol_and_count_bgp_next_hops():
    census = {(186, 2): 14, (186, 1): 2, (2, 1): 2, (196, 0): 1, (4, 1): 1, (11, 1): 3}
    fig = fib_figures(census)
    assert fig["routes"] == {"total": 23, "bgp": 16, "connected": 2, "static": 2, "other": 3}
    assert fig["ecmp_widths"] == {1: 2, 2: 14}
    assert fig["ecmp_width"] == {"min": 1, "median": 2, "max": 2}
    assert fib_figures({(2, 1): 3})["ecmp_width"] is None  # no BGP route: no width


def _router(role, total, bgp, widths, pss=None, ses=None):
    fig = {"role": role, "routes": {"total": total, "bgp": bgp}, "ecmp_widths": widths,
           "memory_mib": {"pss": pss} if pss is not None else None}
    if ses is not None:
        fig["sessions"] = {"up": ses[0], "expected": ses[1]}
    return fig


def test_role_summary_pools_widths_and_spreads_per_router_figures():
    routers = {
        "spine1": _router("spine", 16, 16, {1: 16}, 19.0, (8, 8)),
        "g1-leaf1": _router("leaf", 19, 16, {1: 2, 2: 14}, 18.0, (2, 2)),
        "g1-leaf2": _router("leaf", 18, 15, {1: 2, 2: 13}, 20.0, (1, 2)),
        "g1-leaf3": {"role": "leaf", "routes": None, "ecmp_widths": {}, "memory_mib": None,
                     "error": "kernel FIB of x not read"},
    }
    roles = role_summary(routers)
    assert list(roles) == ["leaf", "spine"]  # leaves first, whatever the order of the routers
    leaf = roles["leaf"]
    assert leaf["routers"] == 3 and leaf["unread"] == 1
    assert leaf["routes"] == {"min": 18, "median": 18.5, "max": 19}
    assert leaf["bgp_routes"] == {"min": 15, "median": 15.5, "max": 16}
    assert leaf["ecmp_width"] == histogram_spread({1: 4, 2: 27})  # every BGP route of the role
    assert leaf["memory_mib"] == {"min": 18.0, "median": 19.0, "max": 20.0}
    assert leaf["sessions"] == {"up": 3, "expected": 4}
    assert roles["spine"]["sessions"] == {"up": 8, "expected": 8}
    no_reads = role_summary({"s": {"role": "spine", "routes": None, "ecmp_widths": {}, "memory_mib": None}})
    assert no_reads["spine"]["routes"] is None and no_reads["spine"]["sessions"] is None
    assert no_reads["spine"]["memory_mib"] is None


def test_smaps_of_this_process_and_of_none():
    mine = smaps_kib(os.getpid())
    if not mine:
        pytest.skip("no /proc/PID/smaps_rollup here")
    assert 0 < mine["Pss"] <= mine["Rss"]
    assert smaps_kib(2**31 - 1) == {}


def test_a_lab_that_is_not_up_gives_errors_per_router_not_an_exception(spec):
    doc = observe_control_plane(spec, netns_of=lambda n: f"cpu-none-{os.getpid()}-{n}")
    assert set(doc["routers"]) == {n.name for n in spec.nodes if n.role != "server"}
    assert all(f["routes"] is None and "not read" in f["error"] for f in doc["routers"].values())
    assert doc["roles"]["leaf"]["unread"] == 8 and doc["convergence"]["converge_s"] is None
    assert set(doc["sources"]) == {"routes", "ecmp_width", "sessions", "memory_mib", "convergence"}
    assert "routers" not in summary_only(doc) and summary_only(doc)["roles"] == doc["roles"]


def test_the_report_shows_the_control_plane_per_role(spec):
    rep = Report(lab=LabSummary.from_spec(spec))
    assert control_plane_rows(rep) == [] and 'id="control-plane"' not in render_html(rep, spec, diagram_svg="")
    roles = role_summary({"spine1": _router("spine", 16, 16, {1: 16}, 19.25, (8, 8)),
                          "g1-leaf1": _router("leaf", 19, 16, {1: 2, 2: 14}, 18.04, (2, 2)),
                          "g1-leaf2": _router("leaf", 19, 16, {1: 2, 2: 14}, 18.96, (2, 2))})
    rep.control_plane = {"measured_at": "2026-12-06T07:00:00+00:00", "took_s": 0.02, "roles": roles,
                         "convergence": {"converge_s": 1.4, "brought_up_at": "2026-12-06T06:59:00+00:00"},
                         "routers_hidden": True}
    rows = control_plane_rows(rep)
    assert rows[0] == {"role": "leaf", "routers": "2", "routes": "19", "bgp_routes": "16",
                       "ecmp_width": "1 / 2 / 2", "memory_mib": "18.0 / 18.5 / 19.0", "sessions": "4/4"}
    html = render_html(rep, spec, diagram_svg="")
    assert 'id="control-plane-table"' in html and "1 / 2 / 2" in html and "converged in 1.4 s" in html
    assert "railab drill" in html  # the spine-failure drill is where reconvergence is measured
    back = Report.model_validate(json.loads(rep.dump()))
    assert back.control_plane["roles"]["leaf"]["ecmp_width"] == {"min": 1, "median": 2, "max": 2}
    rep.control_plane = {"error": "control plane not read: boom"}
    assert "Not measured: control plane not read: boom" in render_html(rep, spec, diagram_svg="")
