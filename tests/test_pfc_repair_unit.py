"""Root-free parts of the trainee's PFC repairs (issue 45's faults as exercise level 4): the
emulated ``dcb pfc`` of railab's ports (railab.testbed.dcb), the end of a storm when its link is
reset (railab.testbed.pfc.settle_storms) and the node tools ``railab exec`` puts first on PATH
(railab.testbed.nodetools)."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from railab.testbed import dcb, pfc
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec


@pytest.fixture(scope="module")
def lspec(tmp_path_factory):
    return LabSpec.load(generate("mini-lossless", tmp_path_factory.mktemp("pr") / "pr1", name="pr1"))


@pytest.fixture
def run_dir(tmp_path, monkeypatch, lspec):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    st.lab_dir(lspec.name).mkdir(parents=True)
    return st.lab_dir(lspec.name)


def test_dcb_shows_and_sets_the_emulated_ports_pfc_priority(lspec, run_dir):
    tc = lspec.qos.roce_tc
    prios = " ".join(f"{p}:{'on' if p == tc else 'off'}" for p in range(8))
    shown = dcb.run(lspec, "srv1", ["pfc", "show", "dev", "eth1"])
    assert shown == f"pfc-cap 8 macsec-bypass off delay 0\nprio-pfc {prios}"
    assert json.loads(dcb.run(lspec, "srv1", ["-j", "pfc", "show", "dev", "eth1", "prio-pfc"])) == \
        {"prio_pfc": {str(p): p == tc for p in range(8)}}
    # the pfc-priority fault's file is what it shows and sets
    dcb.run(lspec, "srv1", ["pfc", "set", "dev", "eth1", "prio-pfc", "4:on", f"{tc}:off"])
    assert pfc.read_pfc_priorities(run_dir) == {("srv1", "eth1"): 4}
    assert "prio-pfc 0:off 1:off 2:off 3:off 4:on" in dcb.run(lspec, "srv1", ["pfc", "show", "dev", "eth1"])
    for bad in (["all:off"], ["5:on"], ["3:maybe"], ["9:on"]):  # none or two on; malformed
        with pytest.raises(dcb.DcbError):
            dcb.run(lspec, "srv1", ["pfc", "set", "dev", "eth1", "prio-pfc", *bad])
    assert pfc.read_pfc_priorities(run_dir) == {("srv1", "eth1"): 4}  # a refused set changes nothing
    dcb.run(lspec, "srv1", ["pfc", "set", "dev", "eth1", "prio-pfc", "all:off", f"{tc}:on"])
    assert pfc.read_pfc_priorities(run_dir) == {}
    with pytest.raises(dcb.DcbError, match='"eth9" does not exist on srv1'):
        dcb.run(lspec, "srv1", ["pfc", "show", "dev", "eth9"])
    with pytest.raises(dcb.DcbError, match="PFC only"):
        dcb.run(lspec, "srv1", ["ets", "show", "dev", "eth1"])
    assert "not emulated" in dcb.run(lspec, "g1-leaf1", ["-s", "pfc", "show", "dev", "eth1"])
    assert dcb.run(lspec, "srv1", ["help"]) == dcb.USAGE


def test_dcb_runs_the_systems_tool_outside_railab_exec(lspec, run_dir, monkeypatch):
    ran = []
    monkeypatch.setattr(dcb.os, "execv", lambda path, argv: ran.append(argv))
    monkeypatch.setattr(dcb.shutil, "which", lambda name, path=None: f"/usr/sbin/{name}")
    monkeypatch.delenv("RAILAB_LAB", raising=False)
    dcb.main(["pfc", "show", "dev", "eth1"])
    assert ran == [["/usr/sbin/dcb", "pfc", "show", "dev", "eth1"]]


def test_node_tools_are_written_once_and_executable(tmp_path, monkeypatch):
    from railab.testbed import nodetools

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    d = nodetools.tool_dir()
    tool = d / "dcb"
    assert os.access(tool, os.X_OK) and "-m railab.testbed.dcb" in tool.read_text()
    stamp = tool.stat().st_mtime_ns
    assert nodetools.tool_dir() == d and tool.stat().st_mtime_ns == stamp


def test_exec_knows_the_storm_links_file_by_name():
    from railab.cli import lab

    assert lab._STORM_LINKS == pfc.STORM_LINKS_FILE


def test_a_storm_ends_when_its_link_is_reset(run_dir, monkeypatch):
    """settle_storms ends a storm whose link lost its carrier since it began (its carrier down
    count grew, it was re-made, it is gone), not one whose link is unchanged or unreadable; it
    RESUMEs the queue only when no switch agent runs, and waits while a fault change holds the
    lab's fault lock."""
    now = {"clab-x-g1-leaf1": (7, 2), "clab-x-spine1": (9, 1)}
    monkeypatch.setattr(pfc, "link_identity", lambda ns, ifname: now.get(ns))
    tc = []
    monkeypatch.setattr(pfc.subprocess, "run", lambda argv, **kw: tc.append((argv, kw.get("input"))))
    pfc.write_storms(run_dir, {("g1-leaf1", "eth2"): "f1", ("spine1", "eth3"): "f2"})
    pfc.remember_storm_link(run_dir, ("g1-leaf1", "eth2"), ns="clab-x-g1-leaf1", fault="f1", resume="RESUME-1\n")
    pfc.remember_storm_link(run_dir, ("spine1", "eth3"), ns="clab-x-spine1", fault="f2", resume="RESUME-2\n")
    assert pfc.settle_storms(run_dir) == [] and tc == []  # nothing reset yet
    now["clab-x-g1-leaf1"] = (7, 3)  # g1-leaf1:eth2's link went down (and up) once
    with open(run_dir / pfc.FAULTS_LOCK, "a") as lock:  # a fault change under way: the next look settles
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert pfc.settle_storms(run_dir) == []
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert pfc.settle_storms(run_dir) == ["g1-leaf1:eth2"]
    assert pfc.read_storms(run_dir) == {("spine1", "eth3"): "f2"}
    assert [inp for _, inp in tc] == ["RESUME-1\n"] and tc[0][0][-3:] == ["tc", "-batch", "-"]
    assert pfc.settle_storms(run_dir) == []  # ended once
    # an unreadable namespace (the lab going down) ends nothing; a re-made veth does
    now.pop("clab-x-spine1")
    assert pfc.settle_storms(run_dir) == []
    now["clab-x-spine1"] = (12, 0)
    (run_dir / pfc.PFC_STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "final": False}))
    assert pfc.settle_storms(run_dir) == ["spine1:eth3"]
    assert len(tc) == 1  # a running agent RESUMEs what leaves the storm file: no tc here
    assert pfc.read_storms(run_dir) == {}
    pfc.forget_storm_link(run_dir, ("spine1", "eth3"))  # the heal's: idempotent
