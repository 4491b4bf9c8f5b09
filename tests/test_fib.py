"""railab.traffic.fib without a lab: the shared-link rule and the load run's --seed bounds."""

from __future__ import annotations

from railab.traffic.fib import Trace, link_key, shared_links


def _tr(*links: str) -> Trace:
    return Trace(links=list(links), delivered=True)


def test_shared_links_names_collisions_but_not_the_link_every_flow_crosses():
    rcv = link_key("g1-leaf1", "eth1", "srv1", "eth1")
    up = link_key("g2-leaf1", "eth13", "spine3", "eth6")
    paths = {"a": _tr("x", up, rcv), "b": _tr("y", up, rcv), "c": _tr("z", rcv)}
    assert shared_links(paths) == {up: ["a", "b"]}  # rcv: every flow's, the bottleneck
    assert shared_links({"a": _tr("x", rcv), "b": _tr("y", rcv)}) == {}
    assert shared_links({"a": _tr("x", "x")}) == {}  # one flow crossing a link twice is no collision
    assert shared_links({}) == {}


def test_link_key_is_order_free():
    assert link_key("b", "eth2", "a", "eth1") == link_key("a", "eth1", "b", "eth2") == "a:eth1--b:eth2"


def test_load_run_seed_out_of_range_is_a_usage_error():
    from typer.testing import CliRunner

    from railab.cli import app

    res = CliRunner().invoke(app, ["traffic", "nolab", "--pattern", "incast", "--seed", str(2 ** 32)])
    assert res.exit_code == 2 and "--seed must be 0..4294967295" in res.output
