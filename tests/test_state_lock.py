"""Writes to a running lab's record from two commands at once (``railab.testbed.state.modify``,
``state_lock``), without a lab: each keeps its own change. Before the lock, a fault's save and a
load run's PFC-agent record (or ``lb compare`` putting the mode back) each wrote back a whole
record read earlier, so one of two overlapping changes was lost."""

from __future__ import annotations

import multiprocessing

import pytest

from railab.errors import RailabError
from railab.testbed import state as st

N = 150


def _writer(run_dir: str, lab: str, tag: str, n: int) -> None:
    import os

    os.environ["RAILAB_RUN_DIR"] = run_dir
    for i in range(n):
        st.modify(lab, lambda rec, i=i: rec.timings.__setitem__(f"{tag}{i}", float(i)))


def test_two_processes_modifying_one_record_keep_every_change(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab="lk1"))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), "lk1", tag, N)) for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    t = st.load("lk1").timings
    assert sorted(t) == sorted(f"{tag}{i}" for tag in "ab" for i in range(N))


def test_the_lock_is_reentrant_and_never_brings_back_a_lab_that_went_down(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab="lk2"))
    with st.state_lock("lk2"):  # a change that modifies again inside (same process) does not wait
        rec = st.modify("lk2", lambda r: st.modify("lk2", lambda r2: r2.timings.update(x=1.0)))
    assert rec.lab == "lk2"  # no deadlock: the nested modify ran inside the held lock
    st.modify("lk2", lambda r: r.timings.update(y=2.0))
    assert st.load("lk2").timings["y"] == 2.0
    import shutil

    shutil.rmtree(st.lab_dir("lk2"))  # another command's down
    with pytest.raises(RailabError, match="went down meanwhile"):
        st.modify("lk2", lambda r: r.timings.update(z=3.0))
    assert not st.lab_dir("lk2").exists()  # no lock file, no run directory made


def test_a_fault_save_keeps_what_another_command_wrote_meanwhile(tmp_path, monkeypatch):
    """faults' ``_Lab.save`` writes the fault fields only: a PFC agent recorded (by another
    command) between the fault command's read and its save stays recorded."""
    from railab.testbed import faults
    from railab.testbed.capacity import _record_agent

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab="lk3"))
    lab = object.__new__(faults._Lab)
    lab.name, lab.record = "lk3", st.load("lk3")
    _record_agent("lk3", 4242)  # another command, after this one read the record
    lab.record.fault_seq += 1
    lab.record.faults = [st.FaultRecord(id="f1", kind="link-down", node="g1-leaf1", port="eth1")]
    lab.save()
    rec = st.load("lk3")
    assert rec.agents == {"pfc": 4242} and [f.id for f in rec.faults] == ["f1"] and rec.fault_seq == 1
    assert lab.record.agents == {"pfc": 4242}  # the command's own copy is the record as written


def test_a_second_up_is_told_whether_the_lab_is_up_or_still_coming_up(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    st.save(st.LabState(lab="lk4", phase="converging"))
    msg = st.already_up("lk4")
    assert msg.startswith("lab lk4 is coming up (phase converging, another railab up)") and "railab down lk4" in msg
    st.modify("lk4", lambda r: setattr(r, "phase", "running"))
    assert st.already_up("lk4").startswith("lab lk4 is already up: railab down lk4")
