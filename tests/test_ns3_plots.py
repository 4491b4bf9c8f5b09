"""scripts/ns3_plots.py: one PNG per stored ns-3 incast with railab's models (and the emulation)
beside ns-3 over time (issue 44 item 3), and packetsim's optional time series it draws from."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from ns3_helpers import script

from railab.topologies.intent import load_intent
from railab.topologies.qos import DCQCN_PROFILES
from railab.traffic import ns3ref
from railab.traffic.fluid import FluidParams
from railab.traffic.packetsim import simulate

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "ns3"
PNG = b"\x89PNG\r\n\x1a\n"


def _record(name: str) -> dict:
    return next(r for r in ns3ref.stored(DATA) if r["scenario"] == name)


def test_main_draws_one_scenario(tmp_path):
    """One scenario (the windowed 2:1: two short per-packet runs, no fluid model) -> one small
    PNG named after it, nothing else."""
    mod = script("ns3_plots")
    assert mod.main(["--only", "2-on-400g-windowed", "--out", str(tmp_path)]) == 0
    files = list(tmp_path.iterdir())
    assert [f.name for f in files] == ["incast-2-pfc-on-400g-windowed.png"]
    data = files[0].read_bytes()
    assert data.startswith(PNG) and 10_000 < len(data) < 150_000
    assert mod.main(["--only", "3-on-400g", "--out", str(tmp_path)]) == 2  # not stored


def test_emulation_runs_are_read_in_fabric_units(tmp_path):
    """A saved ``railab traffic --json`` of the same scenario: lab s -> fabric us, lab Mb/s ->
    fabric Gb/s (x time_scale / 1000), the receiver port's backlog; another scenario's or
    another profile's file is left out; the plot takes it."""
    mod = script("ns3_plots")
    rec = _record("incast-2-pfc-on-400g")
    flows = [{"series": {"t": [0.1, 0.2], "rx_mbps": [100.0, 99.0]}} for _ in range(2)]
    run = {"pattern": "incast", "senders": 2, "pfc": "on", "dcqcn": "400g", "cc": "dcqcn",
           "time_scale": 2000.0, "receiver_port": "g1-leaf1:eth1",
           "congestion": {"flows": flows, "utilization": 0.99, "ports": {"g1-leaf1:eth1": {
               "t": [0.1, 0.2], "backlog_bytes": [2_000_000, 1_000_000]}}}}
    (tmp_path / "mini-lossless-2-on-1.json").write_text(json.dumps(run))
    (tmp_path / "mini-lossless-2-on-2-dcqcn-ns3.json").write_text(json.dumps(
        dict(run, cc="dcqcn-ns3", receiver_port="elsewhere")))
    (tmp_path / "mini-lossless-2-on-3-paper.json").write_text(json.dumps(dict(run, dcqcn="paper")))
    (tmp_path / "mini-lossless-4-on-1.json").write_text(json.dumps(dict(run, senders=4)))
    runs = mod.emulation_runs(tmp_path, rec)
    assert [r["name"] for r in runs] == ["mini-lossless-2-on-1", "mini-lossless-2-on-2-dcqcn-ns3"]
    first = runs[0]
    assert first["t_us"] == pytest.approx([50.0, 100.0]) and first["rates"][0] == [200.0, 198.0]
    assert first["queue"] == [2_000_000, 1_000_000] and first["queue_t_us"] == pytest.approx(
        [50.0, 100.0])
    assert runs[1]["cc"] == "dcqcn-ns3" and runs[1]["queue"] is None  # no backlog series read
    assert mod.emulation_runs(tmp_path, _record("incast-2-pfc-on-400g-aligned")) == []
    # drawn beside ns-3's own series standing in for the models' (no model run here)
    s = rec["series"]
    fake = {"t_us": s["t_us"], "rates": s["rate_gbps"], "queue": s["queue_bytes_max"],
            "utilization": 0.9}
    out = mod.plot(rec, {"fluid": None, "railab": fake, "rp_ns3": fake}, runs, tmp_path / "p.png")
    assert out.read_bytes().startswith(PNG) and out.stat().st_size < 150_000


def test_packetsim_series_sum_to_the_runs_totals():
    """``simulate(series_bin_us=50)``: the bins of the last half add up to each flow's
    delivered rate, the deepest bin is the run's queue peak, and every other figure is the
    run's without the series (recording draws no random number)."""
    qos = load_intent("mini-lossless").lab.capacity.qos(400)
    p = FluidParams.from_qos(qos, 4, pfc=True, dcqcn=DCQCN_PROFILES["400g"])
    plain = simulate(p, 3000.0, seed=3)
    run = simulate(p, 3000.0, seed=3, series_bin_us=50)
    s = run.series
    assert plain.series is None
    assert asdict(run) | {"series": None} == asdict(plain)
    assert len(s["t_us"]) == 60 and s["t_us"][-1] == 3000.0 and s["bin_us"] == 50
    half = [k for k, t in enumerate(s["t_us"]) if t > 1500.0]
    window_s = (3000.0 - 1500.0) * 1e-6
    for row, gbps in zip(s["delivered_bytes"], run.per_flow_gbps, strict=True):
        assert sum(row[k] for k in half) * 8 / window_s / 1e9 == pytest.approx(gbps, abs=1e-3)
    assert max(s["queue_bytes_max"]) == run.queue_max_bytes
    assert all(m <= x for m, x in zip(s["queue_bytes_mean"], s["queue_bytes_max"], strict=True))
    with pytest.raises(ValueError, match="series_bin_us"):
        simulate(p, 3000.0, series_bin_us=0)
