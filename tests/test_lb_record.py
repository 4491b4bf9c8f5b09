"""``railab lb compare`` writes back only its own fields of the lab's record: a fault injected or
healed by another command while the comparison ran stays as that command left it. No lab: a
recorded 'running' mini-lossless (RAILAB_RUN_DIR in a temp dir) and the comparison itself stubbed
by one that changes the fault list the way a concurrent ``railab fault`` does."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.traffic import lbcompare as C

LAB = "lbrec"


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    d = generate("mini-lossless", tmp_path / LAB, name=LAB)
    old = st.FaultRecord(id="f1", kind="link-speed", node="g1-leaf1", port="eth9", peer_node="spine1",
                         peer_port="eth1", params={"gbps": 200.0, "planned_gbps": 400}, note="trained")
    st.save(st.LabState(lab=LAB, phase="running", labdir=str(d), faults=[old]))
    return d


def test_compare_keeps_faults_changed_while_it_ran(lab, monkeypatch):
    def compare(spec, netns_of, **kw):
        rec = st.load(LAB)  # another command, mid-run: heals f1, injects f2
        rec.faults = [st.FaultRecord(id="f2", kind="link-down", node="g1-leaf2", port="eth9", note="down")]
        st.update(rec)
        return {"left_on": {"mode": "ecmp", "spines": False}, "modes": [], "workload": "all-to-all"}

    monkeypatch.setattr(C, "compare", compare)
    monkeypatch.setattr(C, "check_modes", lambda spec, ms: ("ecmp",))
    r = CliRunner().invoke(app, ["lb", "compare", LAB, "--workload", "all-to-all", "--modes", "ecmp", "--json"])
    assert r.exit_code == 0, r.output
    rec = st.load(LAB)
    assert [f.id for f in rec.faults] == ["f2"]  # the heal and the injection stand
    assert rec.load_balancing == "ecmp"
