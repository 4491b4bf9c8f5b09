"""`railab drill LAB link-down g1-leaf1 spine1 --json` on a live mini lab (integration: root +
Debian frr): the figures are present and plausible, the flows were picked from the FIB (the
crossing ones used the link before and avoid it during the fault), the control flows lost
nothing, the fault is healed, BFD is as lab.json says, the lab is green and nothing leaked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from railab.checks.lab import LiveLab
from railab.testbed import faults
from tests.conftest import PID, _bring_down, _bring_up

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]
CLI = [sys.executable, "-c", "from railab.cli import main; main()"]


@pytest.fixture(scope="module")
def drill_lab(tmp_path_factory):
    """A mini lab of this module's own (the drill injects faults: other tests keep theirs)."""
    name = f"dr{PID}"
    try:
        yield _bring_up("mini", name, tmp_path_factory)
    finally:
        _bring_down(name)


def _drill(lab: LiveLab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "drill", lab.name, *args], capture_output=True, text=True, timeout=240)


def _bfd_lines(lab: LiveLab, node: str) -> list[str]:
    out = lab.exec(node, ["vtysh", "-c", "show running-config"]).stdout
    return [ln.strip() for ln in out.splitlines() if "neighbor FABRIC bfd" in ln]


def test_drill_link_down_measures_loss_reroute_and_green(drill_lab):
    lab = drill_lab
    assert lab.spec.bfd.enabled  # mini's default profile (300 ms x 5)
    res = _drill(lab, "link-down", "g1-leaf1", "spine1", "--duration", "3", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    for key in ("lost_packets", "longest_gap_ms", "time_to_green_s"):
        assert isinstance(out[key], (int, float)) and not isinstance(out[key], bool), key
    assert out["fault"]["kind"] == "link-down" and out["fault"]["element"] == "g1-leaf1:eth3 <-> spine1:eth1"
    cross = [f for f in out["flows"] if f["role"] == "crossing"]
    control = [f for f in out["flows"] if f["role"] == "control"]
    assert len(cross) == 4 and len(control) == 4
    # picked from the FIB: each crossing flow used the link before, and avoided it during the fault
    for f in cross:  # paths are switch:egress-port; the link is g1-leaf1:eth3 <-> spine1:eth1
        assert {"g1-leaf1:eth3", "spine1:eth1"} & set(f["path"]), f
        assert not {"g1-leaf1:eth3", "spine1:eth1"} & set(f["path_during_fault"]), f
    # both directions over the link are covered; the spine1 -> g1-leaf1 one loses until the other
    # leaves hear spine1's withdrawal, the g1-leaf1 -> spine1 one is rerouted by the kernel at once
    into = [f for f in cross if "spine1:eth1" in f["path"]]
    assert into and len(into) < len(cross)
    assert out["lost_packets"] == out["crossing_lost_packets"] > 0
    assert 1.0 <= out["longest_gap_ms"] < 3000.0
    assert out["longest_gap_ms"] == max(f["longest_gap_ms"] for f in out["flows"])
    assert out["lost_packets"] == sum(f["lost"] for f in out["flows"])
    assert all(f["lost_before_fault"] == 0 for f in out["flows"])
    assert 0.0 <= out["time_to_reroute_s"] < 3.0 and out["fib_reroute_s"] is not None
    assert 0.0 < out["time_to_green_s"] < 60.0 and out["green"]["confirmed"]
    assert out["green"]["poll_period_ms"]["max"] <= 400.0  # polled every <= 200 ms (+ one poll's run)
    # the control set must not be affected
    assert out["control_lost_packets"] == 0
    for f in control:
        assert f["lost"] == 0 and f["tx"] > 3000 and f["rx"] == f["tx"], f
        assert f["duplicate"] == 0 and f["latency_us"]["min"] > 0
    # probes at 1000/s over baseline + fault + green + tail: the rate holds
    span = out["timeline_s"]["heal"] + out["time_to_green_s"]
    assert all(f["tx"] >= 1000 * span * 0.9 for f in out["flows"])
    # nothing left behind: no fault, BFD as lab.json, the lab green
    assert faults.list_faults(lab.dir) == []
    assert _bfd_lines(lab, "g1-leaf1") == ["neighbor FABRIC bfd", "neighbor FABRIC bfd profile fabric"]
    bad = [r for r in lab.check(only="bgp,routes") if r.status == "fail"]
    assert not bad, [r.name for r in bad]


def test_drill_no_bfd_pushes_bfd_off_and_puts_it_back(drill_lab):
    lab = drill_lab
    res = _drill(lab, "link-down", "g1-leaf1", "spine1", "--no-bfd", "--duration", "2",
                 "--flows", "2", "--control", "2", "--rate", "500", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["bfd"]["enabled"] is False and out["bfd"]["pushed_live"] is True
    assert out["bfd"]["lab_json"] is True and "silent" in out["bfd"]["note"]
    assert out["rate_pps"] == 500 and out["resolution_ms"] == 2.0
    assert out["control_lost_packets"] == 0 and out["green"]["confirmed"]
    assert _bfd_lines(lab, "spine1") == ["neighbor FABRIC bfd", "neighbor FABRIC bfd profile fabric"]
    assert faults.list_faults(lab.dir) == []


def test_drill_bad_input_is_one_error_and_changes_nothing(drill_lab):
    lab = drill_lab
    res = _drill(lab, "link-down", "g1-leaf1", "spine9", "--json")
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stdout == ""
    res = _drill(lab, "link-down", "g1-leaf1", "spine1", "--rate", "0")
    assert res.returncode == 2 and "--rate" in res.stderr
    assert faults.list_faults(lab.dir) == []
