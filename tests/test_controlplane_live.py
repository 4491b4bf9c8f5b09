"""Control-plane figures on the session's mini lab (issue 47 item 5): what the kernel FIBs,
FRR and smaps_rollup say matches lab.json's plan, the raw route census counts what ``ip route``
shows, and ``railab status`` carries them (integration: root + Debian frr)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest
from typer.testing import CliRunner

from railab.checks.controlplane import fib_census, fib_figures, observe_control_plane
from railab.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture(scope="module")
def figures(mini_lab):
    return observe_control_plane(mini_lab.spec, executor=mini_lab.executor)


def _planned_widths(spec, node: str) -> Counter:
    return Counter(r.ecmp_width for r in spec.expected_routes[node])


def _session_ends(spec, node: str) -> int:
    return sum((s.node == node) + (s.peer == node) for s in spec.bgp_sessions)


def test_every_router_matches_the_plan(mini_lab, figures):
    """Each router's BGP routes and their ECMP widths are lab.json's expected routes (mini: a leaf
    16 routes, 14 of them 2 wide over both spines; a spine 16 routes 1 wide), every planned
    session end is up, and its FRR daemons take a plausible 5-200 MiB of PSS."""
    spec = mini_lab.spec
    routers = [n.name for n in spec.nodes if n.role != "server"]
    assert sorted(figures["routers"]) == sorted(routers)
    for node in routers:
        fig = figures["routers"][node]
        assert "error" not in fig, fig
        assert fig["routes"]["bgp"] == fig["routes"]["planned"] == len(spec.expected_routes[node]), (node, fig)
        assert Counter(fig["ecmp_widths"]) == _planned_widths(spec, node), (node, fig)
        assert fig["sessions"] == {"up": _session_ends(spec, node), "expected": _session_ends(spec, node)}
        mem = fig["memory_mib"]
        assert 5 < mem["pss"] < 200 and {"zebra", "bgpd"} <= set(mem["daemons"]), (node, mem)
        assert 0 < mem["daemons"]["bgpd"] < mem["pss"]
    leaf, spine = figures["routers"]["g1-leaf1"], figures["routers"]["spine1"]
    assert leaf["ecmp_widths"] == {1: 2, 2: 14} and leaf["ecmp_width"] == {"min": 1, "median": 2, "max": 2}
    assert spine["ecmp_widths"] == {1: 16}
    roles = figures["roles"]
    assert list(roles) == ["leaf", "spine"]
    assert roles["leaf"]["routers"] == 8 and roles["spine"]["routers"] == 2
    assert roles["leaf"]["bgp_routes"] == {"min": 16, "median": 16, "max": 16}
    assert roles["spine"]["ecmp_width"] == {"min": 1, "median": 1, "max": 1}
    assert roles["leaf"]["sessions"] == roles["spine"]["sessions"] == {"up": 16, "expected": 16}
    assert figures["convergence"]["converge_s"] == mini_lab.record.timings["converge_s"] > 0
    assert figures["took_s"] < 2 and figures["measured_at"].endswith("+00:00")


def _ip_route_census(ns: str) -> dict[str, object]:
    """What ``ip -j route show table main`` (iproute2's own decoding) says, as fib_figures counts."""
    out = subprocess.run(["ip", "-j", "-4", "-n", ns, "route", "show", "table", "main"],
                         capture_output=True, text=True, check=True).stdout
    kinds = {"bgp": "bgp", "kernel": "connected", "static": "static", "zstatic": "static", "196": "static"}
    routes: Counter = Counter()
    widths: Counter = Counter()
    for r in json.loads(out):
        kind = kinds.get(str(r.get("protocol")), "other")
        routes[kind] += 1
        if kind == "bgp":
            widths[len(r["nexthops"]) if "nexthops" in r else 1 if "dev" in r else 0] += 1
    counts = {k: routes[k] for k in ("bgp", "connected", "static", "other")}
    return {"routes": {"total": sum(routes.values()), **counts}, "ecmp_widths": dict(widths)}


@pytest.mark.parametrize("node", ["g1-leaf1", "spine1"])
def test_the_census_counts_what_ip_route_shows(mini_lab, node):
    ns = mini_lab.netns_of(node)
    mine = fib_figures(fib_census(ns))
    assert {"routes": mine["routes"], "ecmp_widths": mine["ecmp_widths"]} == _ip_route_census(ns)


def test_status_carries_the_control_plane(mini_lab):
    res = CliRunner().invoke(app, ["status", mini_lab.name, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {"lab", "runtime", "phase", "nodes", "sessions", "healthy", "faults"} <= set(doc)  # kept
    assert doc["sessions"]["up"] == doc["sessions"]["expected"] == len(mini_lab.spec.bgp_sessions)
    cp = doc["control_plane"]
    assert cp["routers"]["spine2"]["routes"]["bgp"] == 16 and cp["roles"]["leaf"]["routers"] == 8
    human = CliRunner().invoke(app, ["status", mini_lab.name], env={"COLUMNS": "120"})
    assert "control plane per role" in human.output and "smaps_rollup" in human.output, human.output
    leaf_row = next(ln for ln in human.output.splitlines() if ln.startswith("leaf "))
    assert leaf_row.split()[1:6] == ["8", "19", "16", "1/2/2", "16/16"], leaf_row
