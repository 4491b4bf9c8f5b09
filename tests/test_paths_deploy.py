"""Issue 13: `up` that does not converge names the likely cause and can keep the lab
(--keep-on-failure); a lab that converged but runs another ASN than lab.json is not
"converged". Unit tests (fake runtime, stubbed FRR views) and one live test (real FRR: a leaf
given its spine's ASN, then a unique wrong ASN)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.checks import deploy
from railab.checks.converge import NodeView, likely_causes, plan_mismatches
from railab.errors import RailabError
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from tests.test_deploy_unit import FakeRuntime

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


@pytest.fixture
def labdir(tmp_path):
    return Path(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "lab", name="dep"))


def _views(spec, **asn) -> dict[str, NodeView]:
    out = {}
    for n in spec.nodes:
        if n.asn is None:
            continue
        out[n.name] = NodeView(n.name, asn=asn.get(n.name.replace("-", "_"), n.asn),
                               router_id=str(n.router_id))
    return out


def test_plan_mismatches_name_a_unique_wrong_asn(labdir):
    spec = LabSpec.load(labdir)
    assert plan_mismatches(spec, _views(spec)) == []
    got = plan_mismatches(spec, _views(spec, g1_leaf2=4200000099))
    assert got == ["g1-leaf2 runs ASN 4200000099, lab.json plans 4200000002 (frr.conf `router bgp`)"]


def test_likely_causes_name_two_peers_sharing_an_asn(labdir):
    spec = LabSpec.load(labdir)
    spine = spec.node("spine1")
    views = _views(spec, g1_leaf2=spine.asn)
    for s in spec.bgp_sessions:
        if s.node == "g1-leaf2":
            views["g1-leaf2"].session_states[s.interface] = "Idle"
            views["g1-leaf2"].missing_sessions.append(f"g1-leaf2:{s.interface}")

    class NoFrr:  # no NOTIFICATION reason readable: the sentence still names the pair
        def vtysh_json(self, node, command):
            raise RailabError(f"{node}: no FRR here")

    causes = likely_causes(spec, NoFrr(), views)
    assert causes[0] == f"g1-leaf2 and spine1 share ASN {spine.asn}: sessions Idle", causes
    assert any(c.startswith("g1-leaf2 runs ASN") for c in causes)


def test_bring_up_rejects_a_converged_lab_that_differs(run_dir, labdir, monkeypatch):
    spec = LabSpec.load(labdir)
    monkeypatch.setattr(deploy, "wait_converged",
                        lambda *a, **k: _views(spec, g1_leaf2=4200000099))
    rt = FakeRuntime()
    with pytest.raises(deploy.LabDiffersError, match="converged but differs from lab.json: "
                                                     "g1-leaf2 runs ASN 4200000099"):
        deploy.bring_up(rt, labdir, timeout=1)
    assert rt.calls[-1] == "down dep" and st.load("dep") is None


@pytest.mark.parametrize("differs", [False, True])
def test_keep_on_failure_leaves_the_lab_up_and_says_how_to_remove_it(run_dir, labdir, monkeypatch,
                                                                     differs):
    spec = LabSpec.load(labdir)

    def wait(*a, **k):
        if differs:
            return _views(spec, g1_leaf2=4200000099)
        raise RailabError("lab dep did not converge within 1 s:\n  likely cause: x")

    monkeypatch.setattr(deploy, "wait_converged", wait)
    rt = FakeRuntime()
    with pytest.raises(RailabError, match="kept.*\\(--keep-on-failure\\).*railab down dep "
                                          "removes it"):
        deploy.bring_up(rt, labdir, timeout=1, keep_on_failure=True)
    assert not any(c.startswith("down") for c in rt.calls)
    # a lab that converged but differs stays running (it works); one that did not converge
    # is kept as it is for debugging
    assert st.load("dep").phase == ("running" if differs else "not-converged")


def test_keep_on_failure_still_rolls_back_on_ctrl_c(run_dir, labdir, monkeypatch):
    def wait(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "wait_converged", wait)
    rt = FakeRuntime()
    with pytest.raises(KeyboardInterrupt):
        deploy.bring_up(rt, labdir, timeout=1, keep_on_failure=True)
    assert rt.calls[-1] == "down dep"


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_up_names_a_shared_asn_then_a_unique_wrong_asn(tmp_path):
    import os

    from railab.cli import app
    from railab.topologies.naming import netns_name

    name = f"pa{os.getpid()}"
    d = Path(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / name, name=name))
    spec = LabSpec.load(d)
    leaf, spine = spec.node("g1-leaf2"), spec.node("spine1")
    conf = d / "configs" / leaf.name / "frr.conf"
    text = conf.read_text()
    conf.write_text(text.replace(f"router bgp {leaf.asn}\n", f"router bgp {spine.asn}\n"))
    try:
        res = CliRunner().invoke(app, ["up", str(d), "--no-progress", "--timeout", "20",
                                       "--keep-on-failure"])
        said = res.output + str(res.exception or "")  # RailabError: `railab` prints it, exit 1
        assert isinstance(res.exception, RailabError)
        assert (f"g1-leaf2 and spine1 share ASN {spine.asn}: sessions Idle" in said
                and "Bad Peer AS" in said), said
        assert "kept for debugging" in said
        assert st.load(name).phase == "not-converged"
        assert os.path.exists(f"/run/netns/{netns_name(name, leaf.name)}")
    finally:
        CliRunner().invoke(app, ["down", name])
    conf.write_text(text.replace(f"router bgp {leaf.asn}\n", "router bgp 4200000099\n"))
    res = CliRunner().invoke(app, ["up", str(d), "--no-progress", "--timeout", "60"])
    assert isinstance(res.exception, deploy.LabDiffersError), str(res.exception)
    assert ("converged but differs from lab.json: g1-leaf2 runs ASN 4200000099, lab.json plans "
            f"{leaf.asn}") in str(res.exception)
    assert st.load(name) is None  # removed: not reported as converged
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(name) == 0
