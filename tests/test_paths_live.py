"""Issue 13 live (real netns + FRR, the `mini` lab): a dead NIC on the last server of the last
group fails exactly one flow of the default `intra-rail` pattern, the summary names it as one
root cause, traceroute says where the packets are black-holed, and restoring the NIC (its
policy route too) turns the pattern green again.

The NIC is taken down with `ip link set ... down` inside the server's namespace, as a pulled
NIC looks to the host; downing a NIC flushes its `default ... table 100+N` route, which the
test puts back (railab.topologies.routing) before the green run.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.topologies.naming import netns_name

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


def _ip(lab, node: str, *argv: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns_name(lab.name, node), "ip", *argv], check=True)


def _traffic(lab, *args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(app, ["traffic", lab.name, *args, "--json"])
    return res.exit_code, json.loads(res.output)


def test_dead_nic_on_the_last_server_is_caught_by_default_intra_rail(mini_lab):
    spec = mini_lab.spec
    last = spec.by_role("server")[-1].name
    nic = spec.nic(last, 2)
    rc, ok = _traffic(mini_lab, "-p", "intra-rail")
    assert rc == 0 and ok["failed"] == 0, ok["root_causes"]
    assert ok["coverage"]["nics"] == ok["coverage"]["nics_total"] == len(spec.nics)
    assert not ok["coverage"]["sampled"]
    _ip(mini_lab, last, "link", "set", nic.interface, "down")
    try:
        rc, out = _traffic(mini_lab, "-p", "intra-rail")
        assert rc == 1
        bad = [f for f in out["flows"] if not f["ok"]]
        assert len(bad) == 1 and bad[0]["nic_down"] == f"{last}:{nic.interface}", bad
        assert [c["cause"]["kind"] for c in out["root_causes"]] == ["link-down"]
        assert out["root_causes"][0]["cause"]["node"] == last
        assert out["root_causes"][0]["text"].startswith(f"{last}:{nic.interface} is down")
        # all-to-all: every flow to or from that NIC fails, still one root cause
        rc, a2a = _traffic(mini_lab, "-p", "all-to-all", "--no-measure", "--messages", "1")
        assert rc == 1 and a2a["failed"] > 1 and len(a2a["root_causes"]) == 1, a2a["root_causes"]
        # traceroute says where and why
        src = bad[0]["src"]
        res = CliRunner().invoke(app, ["traceroute", mini_lab.name, src, f"{last}:nic2", "--json"])
        assert res.exit_code == 1
        tr = json.loads(res.output)
        why = tr["black_hole"]
        if why is None:  # the leaf's neighbour entry for the dead NIC had already failed (the
            # runs above sent to it), so the leaf answered ICMP unreachable itself: the path
            # line names it, and the last hop is that answer from the NIC's leaf
            assert tr["hops"][-1]["kind"] == "unreachable" and tr["hops"][-1]["node"] == nic.leaf, tr
        else:
            assert why == f"black-holed at {nic.leaf}: {last} NIC 2 is down", why
        # -n below full coverage samples and says so
        rc, few = _traffic(mini_lab, "-p", "intra-rail", "-n", "3")
        assert few["coverage"]["sampled"] and few["coverage"]["text"].startswith("sampled 3 of 8")
    finally:
        _ip(mini_lab, last, "link", "set", nic.interface, "up")
        _ip(mini_lab, last, "route", "replace", "default", "via", str(nic.gateway), "dev",
            nic.interface, "table", str(nic.table))
    import time

    deadline = time.monotonic() + 30  # the leaf re-resolves the NIC's neighbour entry
    rc, healed = _traffic(mini_lab, "-p", "intra-rail")
    while rc and time.monotonic() < deadline:
        time.sleep(1)
        rc, healed = _traffic(mini_lab, "-p", "intra-rail")
    assert rc == 0 and healed["failed"] == 0, healed["root_causes"]


def _vtysh(lab, node: str, *cmds: str) -> None:
    from railab.testbed import state as st

    argv = ["ip", "netns", "exec", netns_name(lab.name, node), "vtysh", "--vty_socket",
            str(st.node_dir(lab.name, node))]
    for c in cmds:
        argv += ["-c", c]
    subprocess.run(argv, check=True, capture_output=True)


def _check(lab) -> dict:
    res = CliRunner().invoke(app, ["check", lab.name, "--json"])
    return json.loads(res.output)


def test_oversub_counts_sessions_and_files_a_dead_nic_under_its_cause(mini_lab):
    """A leaf whose uplink session is shut (link still up) is 2:1 and that row follows from the
    bgp row of the same link; a server NIC down leaves its leaf's oversub row passing (less
    demand, same capacity) instead of a new 0.5:1 failure."""
    import time

    spec = mini_lab.spec
    leaf = spec.node("g1-leaf1")
    up = next(ln for ln in spec.links if ln.role == "leaf-spine" and ln.a.node == leaf.name)
    last = spec.by_role("server")[-1].name
    nic = spec.nic(last, 2)
    _vtysh(mini_lab, leaf.name, "conf t", f"router bgp {leaf.asn}",
           f"neighbor {up.a.interface} shutdown")
    _ip(mini_lab, last, "link", "set", nic.interface, "down")
    try:
        time.sleep(1)
        out = _check(mini_lab)
        rows = {(r["check"], r["name"]): r for r in out["results"]}
        ov = rows[("oversub", leaf.name)]
        assert ov["status"] == "fail" and ov["observed"].startswith("2:1"), ov
        assert ov["cause"]["kind"] == "session-down" and "BGP session" in ov["reason"]
        assert rows[("oversub", nic.leaf)]["status"] == "pass", rows[("oversub", nic.leaf)]
        assert "idle downlinks" in rows[("oversub", nic.leaf)]["observed"]
        roots = out["root_causes"]
        explained = {(e["check"], e["name"]) for r in roots for e in r["explains"]}
        assert ("oversub", leaf.name) in explained, roots
        assert all(r["check"] != "oversub" for r in roots), roots
    finally:
        _vtysh(mini_lab, leaf.name, "conf t", f"router bgp {leaf.asn}",
               f"no neighbor {up.a.interface} shutdown")
        _ip(mini_lab, last, "link", "set", nic.interface, "up")
        _ip(mini_lab, last, "route", "replace", "default", "via", str(nic.gateway), "dev",
            nic.interface, "table", str(nic.table))
    res = CliRunner().invoke(app, ["check", mini_lab.name, "--json"])  # back to green
    deadline = time.monotonic() + 30
    while res.exit_code != 0 and time.monotonic() < deadline:
        time.sleep(1)
        res = CliRunner().invoke(app, ["check", mini_lab.name, "--json"])
    assert res.exit_code == 0, [r for r in json.loads(res.output)["results"] if r["status"] == "fail"][:3]
