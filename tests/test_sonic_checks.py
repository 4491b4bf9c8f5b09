"""Convergence and the checks on sonic-vs nodes, whose NOS names ports ``EthernetN``.

On docker-sonic-vs the kernel interfaces FRR sees are SONiC's ``Ethernet0, Ethernet4, ...`` (the vs
SAI maps container interface ``eth<k>`` to ``Ethernet<4(k-1)>``), so ``show bgp summary json``
keys unnumbered peers by ``EthernetN`` and ``show ip route json`` names ``EthernetN`` next hops.
lab.json of a sonic-vs lab records those names (session interfaces, expected route interfaces,
NIC leaf ports; ``railab.topologies.naming.nos_port``), so the same checks pass.

The recorded output, ``tests/data/frr/sonic_mini_snapshot.json``, is FRR's JSON from a healthy
``mini`` lab (``mini_snapshot.json``, recorded from FRR 8.4) with every port written as a sonic-vs
node names it (``ethK`` -> ``Ethernet<4(k-1)>``): the same lab shape, the names FRR prints on
sonic-vs. (No docker-sonic-vs image is available to record from here.) The un-renamed snapshot
must fail against the sonic-vs lab.json: the checks really read the names.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from railab.checks.converge import observe_node
from railab.checks.frr import CMD_SUMMARY
from railab.checks.runner import run_checks
from railab.topologies.generator import generate
from railab.topologies.intent import parse_intent
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import lab_port, nos_port

DATA = Path(__file__).parent / "data" / "frr"
from tests.test_checks_unit import RecordedExecutor  # noqa: E402 (FRR JSON replayed, per-prefix BGP too)

INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> LabSpec:
    data = yaml.safe_load((INTENTS / "mini.yml").read_text())
    data["lab"]["kind"] = "sonic-vs"
    return LabSpec.load(generate(parse_intent(data), tmp_path_factory.mktemp("sv") / "lab", name="ck-sonic"))


@pytest.fixture
def snap() -> dict:
    return json.loads((DATA / "sonic_mini_snapshot.json").read_text())


def _fails(results):
    return [r for r in results if r.status == "fail"]


def test_lab_json_uses_sonic_names(spec):
    routers = [n for n in spec.nodes if n.role != "server"]
    assert all(s.interface.startswith("Ethernet") and s.peer_interface.startswith("Ethernet")
               for s in spec.bgp_sessions)
    assert all(n.leaf_port.startswith("Ethernet") for n in spec.nics)
    assert all(i.startswith("Ethernet") for r in routers for e in spec.expected_routes[r.name]
               for i in e.interfaces)
    # links keep the container's interfaces; the one mapping joins them
    for lk in spec.links:
        if lk.role == "leaf-spine":
            s = spec.session_on(lk.a.node, nos_port(lk.a.interface, "sonic"))
            assert s is not None and lab_port(s.peer_interface) == lk.b.interface
    for nic in spec.nics:
        assert spec.peer(nic.server, nic.interface) == (nic.leaf, lab_port(nic.leaf_port))


def test_checks_pass_on_sonic_port_names(spec, snap):
    res = run_checks(spec, RecordedExecutor(snap), only="bgp,routes", netns_of=lambda n: None)
    assert not _fails(res), [r.message() for r in _fails(res)]
    sessions = [r for r in res if r.check == "bgp" and "<->" in r.name]
    assert len(sessions) == len(spec.bgp_sessions) and all(r.status == "pass" for r in sessions)
    assert all("Ethernet" in r.name for r in sessions)


def test_convergence_sees_every_session_and_route(spec, snap):
    ex = RecordedExecutor(snap)
    for node in (n.name for n in spec.nodes if n.role != "server"):
        view = observe_node(spec, ex, node)
        assert view.converged, (node, view.missing_sessions, view.route_verdicts)
        assert all(k.startswith("Ethernet") for k in view.session_states)


def test_eth_named_output_does_not_pass_for_sonic(spec):
    """The FRR-node snapshot (peers eth3, eth4 ...) against the sonic-vs lab.json: every
    session is absent and routes miss their planned interfaces, so names are really compared."""
    eth = json.loads((DATA / "mini_snapshot.json").read_text())
    view = observe_node(spec, RecordedExecutor(eth), "g1-leaf1")
    assert not view.converged and set(view.session_states.values()) == {"absent"}
    res = run_checks(spec, RecordedExecutor(eth), only="bgp", netns_of=lambda n: None)
    assert _fails(res)


def test_a_down_session_on_a_sonic_port_is_reported(spec, snap):
    bad = copy.deepcopy(snap)
    port = next(s.interface for s in spec.bgp_sessions if s.node == "g1-leaf1")
    bad["g1-leaf1"][CMD_SUMMARY]["peers"][port]["state"] = "Active"
    view = observe_node(spec, RecordedExecutor(bad), "g1-leaf1")
    assert not view.converged and view.session_states[port] == "Active"
    fails = _fails(run_checks(spec, RecordedExecutor(bad), only="bgp", netns_of=lambda n: None))
    assert any(f"g1-leaf1:{port}" in r.name for r in fails)
