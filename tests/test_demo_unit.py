"""Root-free: demo step headers and timings say `interrupted` for Ctrl-C, `failed` otherwise;
and (live, a dedicated lab) `railab demo` interrupted during `up` says so and leaves nothing."""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest
from rich.console import Console

from railab.demo import _Steps


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

    from railab.demo import _summary
    from railab.report import CheckItem, LabSummary, Report, ReportFiles

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

    from railab.cli import app
    from railab.testbed.state import lab_dir

    name = f"dmi{PID}"
    done = threading.Event()

    def interrupt_once_up_has_begun() -> None:
        # up's first state record (the lab's run directory) is the moment, not a clock: a
        # timer at 1.5 s landed after a 1.4 s up, between two steps (CI 2026-12-06)
        end = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < end:
            if lab_dir(name).exists():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=interrupt_once_up_has_begun, daemon=True)
    watcher.start()
    try:
        rc = app(["demo", "mini", "--name", name, "-o", str(tmp_path / "d")], standalone_mode=False)
    finally:
        done.set()
        watcher.join(5)
    cap = capsys.readouterr()
    assert rc == 130, (rc, cap.out[-2000:], cap.err)
    assert "error: interrupted" in cap.err
    assert "interrupted" in cap.out and " failed " not in cap.out, cap.out[-2000:]
    assert not [n for n in our_namespaces() if name in n]


def test_unreachable_trace_line_reads_in_words():
    """The demo's traceroute line says where and why a trace stopped, not `!leaf1`."""
    from railab.demo import _show_paths
    from railab.report import LabSummary, Report, Trace, TraceHop

    lab = LabSummary(name="pol-tr", architecture="rail-only", kind="frr", rails=8, groups=1,
                     gpus_per_server=8, servers_per_group=2, servers=2, leaves=4, spines=0,
                     links=16, nics=16, bgp_sessions=0, links_per_leaf_spine_pair=0,
                     port_speed_gbps=400, oversubscription="1:1", mtu=9100, expected_hops={})
    tr = Trace(path_class="inter-rail", src="srv1:gpu0", dst="srv2:gpu7",
               hops=[TraceHop(ttl=1, address="10.0.1.0", node="leaf1", kind="unreachable", code=0)],
               outcome="unreachable at leaf1, as designed")
    buf = io.StringIO()
    _show_paths(Console(file=buf, width=200), Report(lab=lab, traces=[tr]))
    out = buf.getvalue()
    assert ("traceroute srv1:gpu0 -> srv2:gpu7 (inter-rail): unreachable at leaf1 "
            "(ICMP net unreachable) (as designed)") in out, out
    assert "!leaf1" not in out


def test_report_flows_leave_out_classes_a_one_gpu_lab_cannot_hold(tmp_path):
    """Issue 31 (carried over): `railab report` and `demo` failed on a lab with one GPU per
    server ("intra-server needs 2+ GPUs per server"); the classes it cannot hold are left out."""
    from railab.demo import traffic_flows
    from railab.topologies.generator import build_lab
    from railab.topologies.intent import load_intent

    src = (load_intent("mini").model_dump(mode="json"))
    src["lab"]["rails"] = 1
    path = tmp_path / "g1.yml"
    import yaml

    src["name"] = "g1gpu"
    path.write_text(yaml.safe_dump(src))
    spec = build_lab(load_intent(path)).spec
    assert spec.gpus_per_server == 1 and "intra-server" in spec.expected_hops
    flows = traffic_flows(spec)
    classes = {f.path_class for f in flows}
    assert flows and "intra-server" not in classes and "intra-rail" in classes
