"""Root-free: demo step headers and timings say `interrupted` for Ctrl-C, `failed` otherwise;
and (live, a dedicated lab) `railab demo` interrupted during `up` says so and leaves nothing."""

from __future__ import annotations

import io
import os
import signal
import threading

import pytest
from rich.console import Console

from testbed.demo import _Steps


def _steps() -> tuple[_Steps, io.StringIO]:
    buf = io.StringIO()
    return _Steps(Console(file=buf, width=120)), buf


def test_ctrl_c_in_a_step_is_interrupted_not_failed():
    steps, buf = _steps()
    with pytest.raises(KeyboardInterrupt):
        with steps.step("up", "netns runtime"):
            raise KeyboardInterrupt
    out = buf.getvalue()
    assert "interrupted up in" in out and "failed" not in out, out
    assert steps.timings[-1].ok is False and steps.timings[-1].detail == "interrupted"


def test_an_error_in_a_step_is_failed():
    steps, buf = _steps()
    with pytest.raises(RuntimeError):
        with steps.step("up", "netns runtime"):
            raise RuntimeError("bgpd did not start")
    assert "failed up in" in buf.getvalue()
    assert steps.timings[-1].detail == "bgpd did not start"


def test_summary_line_counts_skips_apart(tmp_path):
    """`52 passed, 5 skipped`, not `57/57 checks passed`; a skip keeps the verdict PASS."""
    from pathlib import Path

    from testbed.demo import _summary
    from testbed.report import CheckItem, LabSummary, Report, ReportFiles

    lab = LabSummary(name="pol-sum", architecture="rail-only", kind="frr", rails=2, groups=1,
                     gpus_per_server=2, servers_per_group=2, servers=2, leaves=2, spines=0,
                     links=4, nics=4, bgp_sessions=0, links_per_leaf_spine_pair=1,
                     port_speed_gbps=400, oversubscription="1:1", mtu=9100, expected_hops={})
    checks = [CheckItem(check="cabling", name=f"l{i}", status="pass") for i in range(3)]
    checks += [CheckItem(check="oversub", name="leaf1", status="skip", reason="no spines")]
    rep = Report(lab=lab, checks=checks)
    buf = io.StringIO()
    p = Path(tmp_path)
    _summary(Console(file=buf, width=200), rep,
             ReportFiles(json_path=p, junit=p, html=p, diagram=p), 1.0)
    out = buf.getvalue()
    assert "PASS pol-sum" in out and "checks 3 passed, 1 skipped (of 4)" in out, out
    assert "4/4" not in out


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_demo_interrupted_during_up(tmp_path, capsys):
    from conftest import PID, our_namespaces
    from testbed.cli import app

    name = f"dmi{PID}"
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        rc = app(["demo", "mini", "--name", name, "-o", str(tmp_path / "d")], standalone_mode=False)
    finally:
        timer.cancel()
    cap = capsys.readouterr()
    assert rc == 130, (rc, cap.out[-2000:], cap.err)
    assert "error: interrupted" in cap.err
    assert "interrupted" in cap.out and " failed " not in cap.out, cap.out[-2000:]
    assert not [n for n in our_namespaces() if name in n]
