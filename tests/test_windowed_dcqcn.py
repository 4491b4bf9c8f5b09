"""Windowed DCQCN against rate-based DCQCN under incast, in ns-3 and in railab (issue 44 item 4).

HPCC's observation (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, the
incast figures; alibaba-edu/High-Precision-Congestion-Control issue 14): rate-based DCQCN alone
triggers PFC under many-to-one traffic, DCQCN with a per-QP in-flight window of one BDP (HPCC's
``third.cc`` ``HAS_WIN 1``, ``VAR_WIN 0``) does not. Checked here without ns-3:

* from ns-3's stored runs (``tests/data/ns3/incast-<N>-pfc-<on|off>-400g[-windowed].json.gz``,
  ``scripts/ns3_reference.py``; computed by ns-3, 15 ms of fabric time): at 8:1 and 16:1 with PFC
  on the rate-based runs' senders receive hundreds of PAUSEs, the windowed ones none;
* from railab's per-packet reference (``packetsim.simulate``, computed, the same 15 ms): without
  the window it pauses at 8:1 and 16:1, with ``window_bytes=bdp_bytes(params)`` it does not and
  its queue stays far below the pause depth, with railab's DCQCN and with ns-3's;
* railab's windowed per-packet figures against ns-3's windowed ones, with issue 44's bands
  (:data:`railab.traffic.ns3ref.BANDS`), in all eight stored windowed scenarios.
"""

from __future__ import annotations

import math
import multiprocessing
from pathlib import Path

import pytest

from railab.topologies.intent import load_intent
from railab.topologies.qos import DCQCN_PROFILES
from railab.traffic import ns3ref
from railab.traffic.fluid import ROCE_FRAME_OVERHEAD, FluidParams
from railab.traffic.packetsim import bdp_bytes, payload_bytes, simulate

DATA = Path(__file__).parent / "data" / "ns3"
RECORDS = {r["scenario"]: r for r in ns3ref.stored(DATA)}
WINDOWED = sorted(n for n, r in RECORDS.items() if r.get("variant") == "windowed")
#: Seeds of the windowed per-packet runs (their sorted shares averaged, as test_ns3_reference).
#: One: with the window nothing is marked (the queue stays under Kmin up to 16:1), only the
#: senders' gap jitter is random, and seeds 1-3 gave the same figures (2026-12-06).
SEEDS = (1,)
#: The incasts where HPCC saw rate-based DCQCN trigger PFC: N senders, PFC on.
HOT = (8, 16)
FABRIC_US = 15_000.0


def _params(n: int, pfc: bool) -> FluidParams:
    q = load_intent("mini-lossless").lab.capacity.qos(400)
    return FluidParams.from_qos(q, n, pfc=pfc, dcqcn=DCQCN_PROFILES["400g"])


def _run(args: tuple[str, int, bool, bool, int]):
    rp, n, pfc, windowed, seed = args
    p = _params(n, pfc)
    return simulate(p, FABRIC_US, seed=seed, rp=rp,
                    window_bytes=bdp_bytes(p) if windowed else None)


def _jobs() -> list[tuple[str, int, bool, bool, int]]:
    jobs = [("railab", RECORDS[s]["senders"], RECORDS[s]["pfc"], True, seed)
            for s in WINDOWED for seed in SEEDS]
    jobs += [(rp, n, True, w, 1) for rp in ("railab", "ns3") for n in HOT for w in (False, True)]
    return list(dict.fromkeys(jobs))


@pytest.fixture(scope="module")
def runs() -> dict:
    """Every per-packet run the module needs, on every core (each is independent, seeded)."""
    jobs = _jobs()
    with multiprocessing.get_context("fork").Pool() as pool:
        out = pool.map(_run, jobs, chunksize=1)
    return dict(zip(jobs, out, strict=True))


def _rate_only(name: str) -> dict:
    return RECORDS[name.removesuffix("-windowed")]


def test_the_windowed_runs_are_stored_with_their_window():
    """Eight windowed runs (2, 4, 8, 16 senders, PFC on and off), each the rate-based run's
    config plus HAS_WIN 1, VAR_WIN 0, with the window third.cc computes for them."""
    want = {f"incast-{n}-pfc-{o}-400g-windowed" for n in (2, 4, 8, 16) for o in ("on", "off")}
    assert want == set(WINDOWED)
    for name in WINDOWED:
        r, base = RECORDS[name], _rate_only(name)
        cfg = dict(r["params"]["ns3"])
        assert (cfg.pop("HAS_WIN"), cfg.pop("VAR_WIN"), cfg["GLOBAL_T"]) == ("1", "0", "1")
        rest = {k: v for k, v in base["params"]["ns3"].items() if k not in ("HAS_WIN", "VAR_WIN")}
        assert cfg == rest and r["params"]["topology"] == base["params"]["topology"]
        w = r["params"]["window"]
        # third.cc: rtt = 2 x one-way delay + the path's payload serialization in whole ns
        tx = int(cfg["PACKET_PAYLOAD_SIZE"]) * 8 * 10**9 // 400_000_000_000
        assert w["rtt_ns"] == 2 * 500 + 2 * tx
        assert w["bytes"] == w["rtt_ns"] * 400 // 8
        assert len(r["ns3"]["commit"]) == 40 and r["command"] and r["date"] and r["wall_s"] > 0
        assert r["fabric_us"] == FABRIC_US


def test_bdp_is_third_ccs_formula_and_gives_ns3s_packets_in_flight():
    p = _params(8, True)
    assert payload_bytes(p) == p.frame_bytes - ROCE_FRAME_OVERHEAD == 4096
    # 400 Gb/s x (1 us + 2 x 4096 B x 8 / 400 Gb/s) / 8
    assert bdp_bytes(p) == 50_000 + 2 * 4096
    assert bdp_bytes(p, hops=0) == 50_000
    ns3 = RECORDS[WINDOWED[0]]["params"]["window"]
    assert math.ceil(bdp_bytes(p) / 4096) == ns3["packets_in_flight"] == math.ceil(
        ns3["bytes"] / 4096)
    with pytest.raises(ValueError, match="hops"):
        bdp_bytes(p, hops=-1)
    with pytest.raises(ValueError, match="window_bytes"):
        simulate(p, 100, window_bytes=payload_bytes(p) - 1)


def test_a_window_never_reached_changes_nothing():
    """``window_bytes=None`` is the rate-based run; a window larger than anything a sender can
    have in flight in the run gives the same figures (the ACKs draw no random numbers)."""
    p = _params(1, True)
    plain = simulate(p, 300, seed=4)
    assert plain.window_bytes is None and plain == simulate(p, 300, seed=4, window_bytes=None)
    wide = simulate(p, 300, seed=4, window_bytes=10**9)
    assert (wide.per_flow_gbps, wide.queue_max_bytes) == (plain.per_flow_gbps,
                                                          plain.queue_max_bytes)


@pytest.mark.parametrize("n", HOT)
def test_ns3_rate_based_dcqcn_pauses_and_windowed_dcqcn_does_not(n):
    """ns-3's stored runs (15 ms, PFC on): hundreds of PAUSEs rate-based, none windowed, whose
    queue stays below a quarter of the depth at which ns-3's switch pauses."""
    rate = RECORDS[f"incast-{n}-pfc-on-400g"]
    win = RECORDS[f"incast-{n}-pfc-on-400g-windowed"]
    depth = rate["params"]["topology"]["implied_depth_bytes"]
    assert rate["summary"]["pauses_received"] >= 100
    assert rate["summary"]["queue_peak_bytes"] >= depth
    assert win["summary"]["pauses_received"] == 0 and win["summary"]["dropped_pct"] == 0
    assert win["summary"]["queue_peak_bytes"] < depth / 4
    # at most every sender's window in flight: N x 15 packets of 4144 B (ns-3's frame)
    w = win["params"]["window"]
    assert win["summary"]["queue_peak_bytes"] <= n * w["packets_in_flight"] * win["summary"][
        "frame_bytes"]


@pytest.mark.parametrize("rp", ["railab", "ns3"])
@pytest.mark.parametrize("n", HOT)
def test_per_packet_rate_based_dcqcn_pauses_and_windowed_dcqcn_does_not(n, rp, runs):
    """railab's per-packet reference (15 ms, PFC on, seed 1), with railab's DCQCN and with
    ns-3's: without the window the queue reaches the pause depth and pauses the senders; with
    a window of one BDP it never pauses and stays below a quarter of that depth (it cannot hold
    more than every sender's window)."""
    p = _params(n, True)
    rate, win = runs[(rp, n, True, False, 1)], runs[(rp, n, True, True, 1)]
    assert rate.pauses > 0 and rate.queue_max_bytes >= p.pause_bytes
    assert win.pauses == 0 and win.pause_fraction == 0 and win.dropped_pct == 0
    per_qp = math.ceil(bdp_bytes(p) / payload_bytes(p))
    assert win.queue_max_bytes <= n * per_qp * p.frame_bytes < p.pause_bytes / 4
    if n * per_qp * p.frame_bytes < p.kmin_bytes:  # the windows alone keep it under Kmin
        assert sum(win.cuts) == 0 and sum(rate.cuts) > 0


def _meets_ns3(scenario: str, mine: list) -> None:
    r = RECORDS[scenario]
    ratios = [sorted(m.ratios) for m in mine]
    c = ns3ref.compare(
        r["summary"], utilization=sum(m.utilization for m in mine) / len(mine),
        ratios=[sum(col) / len(col) for col in zip(*ratios, strict=True)],
        queue_peak_bytes=sum(m.queue_max_bytes for m in mine) / len(mine))
    assert c["agrees"], c
    assert all(m.pauses == 0 and m.dropped_pct == 0 for m in mine)


@pytest.mark.parametrize("scenario", WINDOWED)
def test_windowed_per_packet_reference_meets_ns3(scenario, runs):
    """railab's per-packet reference with its own DCQCN and a window of one BDP against ns-3's
    windowed DCQCN: port within 3 points, every sender within 0.15 of its share, queue peak
    within 30 % (seeds averaged, sorted shares; over the last half of 15 ms)."""
    r = RECORDS[scenario]
    _meets_ns3(scenario, [runs[("railab", r["senders"], r["pfc"], True, s)] for s in SEEDS])


@pytest.mark.parametrize("n", HOT)
def test_windowed_ns3_dcqcn_in_railabs_machinery_meets_ns3(n, runs):
    """The same with ns-3's reaction and notification points (``rp="ns3"``, seed 1)."""
    _meets_ns3(f"incast-{n}-pfc-on-400g-windowed", [runs[("ns3", n, True, True, 1)]])

