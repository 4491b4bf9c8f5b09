"""The per-packet DCQCN reference (railab.traffic.packetsim): the lab's RP, NP, WRED and PFC,
packet by packet with random marks, beside the fluid model's means."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from railab.cli import make_app
from railab.topologies.qos import DEFAULT_QOS, CapacityProfile
from railab.traffic import fluid, packetsim
from railab.traffic.fluid import FluidParams


def _qos():
    return DEFAULT_QOS.model_copy(update={"capacity": CapacityProfile(enabled=True,
                                                                       port_rate_mbps=200)})


def test_a_seed_gives_one_run_and_another_seed_another():
    p = FluidParams.from_qos(_qos(), 2)
    a, b = packetsim.simulate(p, 3000, seed=7), packetsim.simulate(p, 3000, seed=7)
    assert a == b
    assert packetsim.simulate(p, 3000, seed=8).per_flow_gbps != a.per_flow_gbps
    assert a.window_us == (1500.0, 3000.0)
    with pytest.raises(ValueError, match="positive"):
        packetsim.simulate(p, 0)


def test_one_sender_fills_the_port_without_a_cut():
    r = packetsim.simulate(FluidParams.from_qos(_qos(), 1), 3000)
    assert r.cuts == [0] and r.dropped_pct == 0.0
    assert r.utilization >= 0.97 and r.queue_max_bytes < _qos().ecn.kmin_bytes


def test_an_8to1_onset_drops_without_pfc_and_pauses_with_it():
    """Eight senders at 400 Gb/s fill the 4 MiB queue before the first CNP bites (the fluid
    model's finding): tail drops without PFC; with PFC none, the queue held near xOFF."""
    off = packetsim.simulate(FluidParams.from_qos(_qos(), 8, pfc=False), 2000)
    on_p = FluidParams.from_qos(_qos(), 8, pfc=True)
    on = packetsim.simulate(on_p, 2000)
    assert off.dropped_pct > 1.0 and on.dropped_pct == 0.0
    # above xOFF by what is in flight when the senders stop: 8 x (400 Gb/s x 0.5 us + a frame)
    in_flight = 8 * (on_p.line_gbps * 1e9 * on_p.base_delay_us * 1e-6 / 2 / 8 + on_p.frame_bytes)
    assert on_p.pause_bytes <= on.queue_max_bytes <= on_p.pause_bytes + in_flight
    assert off.queue_max_bytes <= on_p.buffer_bytes


def test_the_mean_is_the_fluid_models():
    """Averaged over its random marks, the packet model fills the port as the fluid model
    says (within 3 points) for 2, 4 and 8 senders with the default profile."""
    for n in (2, 4, 8):
        p = FluidParams.from_qos(_qos(), n)
        packet = packetsim.spread(p, 15_000, seeds=(1, 2))
        mean = fluid.simulate(p, 15_000).summary()["utilization"]
        assert packet["utilization"]["min"] >= mean - 0.03, (n, packet, mean)
        assert packet["utilization"]["max"] <= mean + 0.03, (n, packet, mean)


def test_the_byte_counter_scaled_to_the_line_makes_2to1_fair():
    """Why the 400g profile's byte counter is 100 MB (docs/congestion.md "Fidelity"): with the
    paper's 10 MB (2 ms of sending at 40 Gb/s, 0.4 ms per sender at 2:1 on 400 Gb/s) the
    senders that escape a queue episode's marks reach hyper increase within ~2.4 ms, and a 2:1
    incast keeps a sender beyond 15 % of its share in some 15 ms runs; with 100 MB (the same
    2 ms at 400 Gb/s) every run of these seeds is fair, and 8:1 is fair either way."""
    seeds = tuple(range(1, 9))
    old = packetsim.spread(FluidParams.from_qos(_qos(), 2, byte_counter_bytes=10_000_000),
                           15_000, seeds=seeds)
    new = packetsim.spread(FluidParams.from_qos(_qos(), 2), 15_000, seeds=seeds)
    assert _qos().dcqcn.byte_counter_bytes == 100_000_000
    assert old["fair_runs"] < old["runs"] and old["ratio"]["min"] < 0.85
    assert new["fair_runs"] == new["runs"] == 8
    eight = packetsim.spread(FluidParams.from_qos(_qos(), 8), 15_000, seeds=(1, 2, 3))
    assert eight["fair_runs"] == eight["runs"]


def test_fair_rate_is_the_wilson_interval():
    """The share of fair runs comes with its 95 % Wilson score interval: computed here from
    Wilson's formula, p +- z sqrt(p(1-p)/n + z^2/4n^2), centred at (p + z^2/2n)/(1 + z^2/n)."""
    import math

    from scipy.stats import norm

    z = norm.ppf(0.975)
    for k, n in ((38, 40), (40, 40), (0, 5), (11, 120)):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        fr = packetsim.fair_rate(k, n)
        assert (fr["fair"], fr["runs"], fr["rate"]) == (k, n, round(p, 4))
        assert fr["low"] == pytest.approx(centre - half, abs=1e-4)
        assert fr["high"] == pytest.approx(centre + half, abs=1e-4)
    # 40 of 40 is not "always": the interval reaches down to ~91 %
    assert packetsim.fair_rate(40, 40)["low"] < 0.92 and packetsim.fair_rate(40, 40)["high"] == 1.0
    for k, n in ((3, 2), (-1, 4), (0, 0)):
        with pytest.raises(ValueError, match="fair_rate"):
            packetsim.fair_rate(k, n)


def test_packet_reference_sets_the_measured_spread_beside_it():
    ref = packetsim.packet_reference(_qos(), 2, 10.0, pfc=True, measured_ratios=[1.0, 1.0],
                                     seeds=(1, 2))
    assert ref["fabric_ms"] == pytest.approx(5.0) and ref["runs"] == 2
    assert ref["measured_ratio"] == {"min": 1.0, "max": 1.0} and ref["spread_like_reference"]
    wide = packetsim.packet_reference(_qos(), 2, 10.0, pfc=True, measured_ratios=[0.3, 1.7],
                                      seeds=(1, 2))
    assert wide["spread_like_reference"] is False


def test_model_cli_packet_runs():
    app = make_app(["model"])
    r = CliRunner().invoke(app, ["model", "incast", "--senders", "2", "--fabric-ms", "3",
                                 "--packet-runs", "2", "--json"])
    assert r.exit_code == 0, r.output
    pk = json.loads(r.output)["packet"]
    assert pk["runs"] == 2 and pk["source"] == "computed" and pk["fabric_ms"] == 3.0
    r = CliRunner().invoke(app, ["model", "incast", "--senders", "2", "--fabric-ms", "3",
                                 "--packet-runs", "0", "--json"])
    assert "packet" not in json.loads(r.output)
    r = CliRunner().invoke(app, ["model", "incast", "--packet-runs", "51"])
    assert r.exit_code == 2 and "--packet-runs must be 0-50" in r.output


def test_spread_in_worker_processes_is_the_same_as_here():
    """The seeds of a spread run in worker processes by default (after a load run the cores are
    free); each run is seeded on its own, so the summary is the same as one after another."""
    p = FluidParams.from_qos(_qos(), 4)
    here = packetsim.spread(p, 2_000, seeds=(1, 2, 3), workers=1, cache=False)
    pooled = packetsim.spread(p, 2_000, seeds=(1, 2, 3), workers=2, cache=False)
    assert pooled == here and here["runs"] == 3
    assert here["fair_rate"] == packetsim.fair_rate(here["fair_runs"], 3)
    assert packetsim.spread(p, 2_000, seeds=(1, 2, 3), workers=2, cache=False)["per_run"] != \
        packetsim.spread(p, 2_000, seeds=(4, 5, 6), workers=2, cache=False)["per_run"]


def test_a_spread_is_read_back_from_the_cache_until_something_it_depends_on_changes(
        tmp_path, monkeypatch):
    """A repeated load run's per-packet reference is read back (the default 40 runs take ~10 s
    after every 15 ms incast); another argument is another entry, a file that does not read
    back is computed again, and ``RAILAB_NO_CACHE=1`` computes every time."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("RAILAB_NO_CACHE", raising=False)
    p = FluidParams.from_qos(_qos(), 2)
    first = packetsim.spread(p, 500, seeds=(1, 2), workers=1)
    kept = list((tmp_path / ".cache" / packetsim.SPREAD_CACHE).iterdir())
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == first
    ran = []
    real = packetsim._spread

    def counted(*a, **kw):
        ran.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(packetsim, "_spread", counted)
    assert packetsim.spread(p, 500, seeds=(1, 2), workers=1) == first and not ran
    assert packetsim.spread(p, 500, seeds=(1, 3), workers=1) != first and len(ran) == 1
    assert packetsim.spread(p, 600, seeds=(1, 2), workers=1)["fabric_ms"] == 0.6 and len(ran) == 2
    kept[0].write_text("{not json")
    assert packetsim.spread(p, 500, seeds=(1, 2), workers=1) == first and len(ran) == 3
    monkeypatch.setenv("RAILAB_NO_CACHE", "1")
    assert packetsim.spread(p, 500, seeds=(1, 2), workers=1) == first and len(ran) == 4
    # the model's source is part of the key: an edit to it is another entry
    key = packetsim._spread_key(p, 500, (1, 2), 0.15)
    monkeypatch.setattr(packetsim.np, "__version__", "0.0")
    assert packetsim._spread_key(p, 500, (1, 2), 0.15) != key


def _ns3_2to1(pfc: bool) -> FluidParams:
    """2:1 onto one port under ns-3's stored scenario's parameters (``scripts/ns3_plots.py
    params_of``): mini-lossless's QoS at 400 Gb/s, the 400g DCQCN profile."""
    from railab.topologies.intent import load_intent
    from railab.topologies.qos import DCQCN_PROFILES

    qos = load_intent("mini-lossless").lab.capacity.qos(400)
    return FluidParams.from_qos(qos, 2, pfc=pfc, dcqcn=DCQCN_PROFILES["400g"])


def test_2to1_use_follows_the_number_of_senders_cut_five_times_at_the_start():
    """Issue 44's 2:1 under ns-3's rules (``rp="ns3"``): each sender's cuts at the incast's
    start are 4 or 5 (a fifth when its CNPs span more than four rate-decrease intervals), and
    the last half's use follows how many senders took a fifth: every run with none is above
    every run with two (docs/congestion.md, "2:1: a knife edge at the start")."""
    p = _ns3_2to1(False)
    by_fifths: dict[int, list[float]] = {}
    for seed in range(1, 13):
        start = packetsim.simulate(p, 1000.0, seed=seed, rp="ns3")
        assert set(start.cuts) <= {4, 5}, start.cuts
        whole = packetsim.simulate(p, 15_000.0, seed=seed, rp="ns3")
        by_fifths.setdefault(start.cuts.count(5), []).append(whole.utilization)
    assert 0 in by_fifths and 2 in by_fifths, by_fifths  # seeds 1-12 draw both outcomes
    assert min(by_fifths[0]) > max(by_fifths[2]) + 0.03, by_fifths
    if 1 in by_fifths:
        assert min(by_fifths[0]) > max(by_fifths[1]) and min(by_fifths[1]) > max(by_fifths[2])


def test_the_labs_marking_cadence_makes_a_fifth_cut_likelier_at_2to1():
    """WRED from a depth read once per switch-agent cycle (1.06 us of fabric time on
    mini-lossless) and in effect ~1 us after the read (``mark_period_us``, ``mark_delay_us``)
    keeps the marks of the 2:1 start on longer than WRED on the instantaneous depth: over 40
    seeds the share of senders cut a fifth time rises from 0.30 to 0.50 (PFC off)."""
    p = _ns3_2to1(False)

    def fifths(**kw) -> int:
        return sum(packetsim.simulate(p, 1000.0, seed=s, rp="ns3", **kw).cuts.count(5)
                   for s in range(1, 41))

    instant, cadence = fifths(), fifths(mark_period_us=1.06, mark_delay_us=1.0)
    assert instant == 24 and cadence == 40, (instant, cadence)  # of 80 senders
    # a cadence far faster than the queue moves is WRED on the instantaneous depth again
    assert abs(fifths(mark_period_us=0.01) - instant) <= 4


def test_a_paused_nics_backlog_makes_a_fifth_cut_likelier_at_2to1_pfc_on():
    """The ablation of the lab's load engine before its PAUSE board (2026-12-07): a PAUSEd
    sender that keeps pacing into its NIC's queue (up to ~100 frames, the engine's NIC send
    buffer), released at the line rate on RESUME, keeps the 2:1 start's queue up longer: over 40
    seeds the senders cut a fifth time rise from 9 to 27 of 80 (PFC on). With no backlog the
    run is the default's, event for event."""
    p = _ns3_2to1(True)

    def fifths(**kw) -> int:
        return sum(packetsim.simulate(p, 1000.0, seed=s, rp="ns3", **kw).cuts.count(5)
                   for s in range(1, 41))

    held, backlog = fifths(), fifths(nic_backlog_bytes=100 * p.frame_bytes)
    assert held == 9 and backlog == 27, (held, backlog)  # of 80 senders
    a = packetsim.simulate(p, 1000.0, seed=3, rp="ns3")
    b = packetsim.simulate(p, 1000.0, seed=3, rp="ns3", nic_backlog_bytes=0)
    assert (a.cuts, a.queue_max_bytes, a.per_flow_gbps) == (b.cuts, b.queue_max_bytes,
                                                           b.per_flow_gbps)
    for kw in ({"nic_backlog_bytes": -1},
               {"nic_backlog_bytes": 4 * p.frame_bytes, "window_bytes": 10 ** 6}):
        with pytest.raises(ValueError, match="nic_backlog_bytes must be 0 or more"):
            packetsim.simulate(p, 100.0, **kw)


def test_marking_cadence_bad_input_is_one_error():
    p = _ns3_2to1(False)
    for kw, what in (({"mark_period_us": 0}, "mark_period_us must be positive"),
                     ({"mark_period_us": 1.0, "mark_delay_us": -1}, "mark_delay_us must be 0"),
                     ({"mark_delay_us": -0.5}, "mark_delay_us must be 0")):
        with pytest.raises(ValueError, match=what):
            packetsim.simulate(p, 100.0, **kw)
    from dataclasses import replace

    with pytest.raises(ValueError, match="dequeue marking"):
        packetsim.simulate(replace(p, mark_at_enqueue=True), 100.0, mark_period_us=1.0)


def test_the_stored_2to1_start_runs_hold_the_counts_the_docs_quote():
    """docs/congestion.md "2:1: a knife edge at the start" quotes the emulation's senders cut a
    fifth time at a 2:1 start from the stored runs (measured, 2026-12-06): PFC off 7 of 32, 17 of
    32, 2 of 16, PFC on 15 of 32, 12 of 32, 2 of 16 (three batches); every sender cut 4 or 5
    times."""
    from pathlib import Path

    from scipy.stats import chi2_contingency, fisher_exact

    data = Path(__file__).resolve().parents[1] / "docs/data/ns3-emulation-2026-12-06/startup-2to1.json"
    runs = json.loads(data.read_text())["runs"]
    fifths = {}
    for r in runs:
        assert set(r["cuts"]) <= {4, 5} and len(r["cuts"]) == 2, r
        key = (r["pfc"], r["batch"])
        got, of = fifths.get(key, (0, 0))
        fifths[key] = (got + r["cuts"].count(5), of + 2)
    assert fifths == {("off", 1): (7, 32), ("off", 2): (17, 32), ("off", 3): (2, 16),
                      ("on", 1): (15, 32), ("on", 2): (12, 32), ("on", 3): (2, 16)}
    # the PFC-off batches differ (the docs' chi-square p = 0.005); all of them: the per-packet
    # model's 24 of 80 (p = 0.86), above ns-3's 14 of 80 (p = 0.04)
    assert chi2_contingency([[7, 25], [17, 15], [2, 14]])[1] < 0.01
    assert fisher_exact([[26, 54], [24, 56]]).pvalue > 0.5
    assert fisher_exact([[26, 54], [14, 66]]).pvalue < 0.05
