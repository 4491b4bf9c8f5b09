"""railab's DCQCN models against ns-3 (HPCC's RDMA model), from stored results (issue 44).

``tests/data/ns3/*.json.gz`` are ns-3's figures for railab's N:1 incasts (computed by ns-3 with
``scripts/ns3_reference.py``: HPCC's ns-3.17, ``third.cc`` unchanged, the lab ``mini-lossless``'s
ECN/PFC/buffer and railab's DCQCN profiles mapped key by key). ns-3 is not needed here. Issue
44's bands against ns-3's figures over the last half: port utilization within 3 points, every
sender's mean share within 0.15 of the fair share (sorted sender by sender), the queue peak
within 30 %.

Two comparisons (docs/congestion.md "ns-3 (HPCC) side by side"):

* **the machinery**: railab's per-packet reference (its queue, WRED on dequeue, PFC, tail drop)
  driven by ns-3's DCQCN reaction and notification points (``packetsim.simulate(rp="ns3")``,
  :class:`railab.traffic.packetsim.Ns3MlxRP`) must meet the bands in every stored scenario but
  those in :data:`KNOWN_NS3`: this is what railab and ns-3 share, checked against ns-3;
* **railab's DCQCN**: the fluid model and the per-packet reference with railab's own RP/NP
  (the paper's DCQCN: a cut at each CNP, at most one CNP per QP per interval, a byte counter,
  ``i x R_HAI``) against ns-3. They do not meet the bands in any of the 12 scenarios, and the
  cause is ns-3's DCQCN, not railab's (the ablation in the docs): each is an
  ``xfail(strict=True)`` with its cause (:data:`RAILAB_VS_NS3`), so the suite fails the day
  one starts to agree and the list must be revisited. The fluid model runs for two of them
  (each takes ~10 s), the per-packet reference for all 12.

The ``windowed`` runs (HPCC's windowed DCQCN, ``HAS_WIN 1``) are checked for provenance and
parameters here and compared in ``tests/test_windowed_dcqcn.py`` (issue 44 item 4).
"""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest
from ns3_helpers import lossless_qos

from railab.topologies.qos import DCQCN_PROFILES
from railab.traffic import ns3ref
from railab.traffic.fluid import FluidParams
from railab.traffic.fluid import simulate as fluid_simulate
from railab.traffic.packetsim import bdp_bytes
from railab.traffic.packetsim import simulate as packet_simulate

DATA = Path(__file__).parent / "data" / "ns3"
RECORDS = {r["scenario"]: r for r in ns3ref.stored(DATA)}
#: The records this module's comparisons run for (the windowed ones: test_windowed_dcqcn.py).
COMPARED = {n: r for n, r in RECORDS.items() if r.get("variant") != "windowed"}
#: Seeds of the per-packet runs: their sorted shares are averaged over these runs (ns-3's one
#: run is one draw of its random marks, so is each of these).
SEEDS = (1, 2)

#: ns-3's DCQCN departures from the paper and the NICs (rdma-hw.cc of the HPCC repository,
#: commit 9f4be2a), which make railab's DCQCN differ from ns-3's in these incasts.
NP_EVERY_MARK = ("ns-3's receiver flags a CNP on the ACK of every marked packet (rdma-hw.cc "
                 "ReceiveUdp; no per-QP CNP interval as the paper's NP, 50 us, or ConnectX's) "
                 "and its alpha rises in every 1 us period that saw one (UpdateAlphaMlx), so "
                 "alpha and the cuts are larger than railab's paced NP gives")
FIRST_CUT_LATE = ("ns-3 cuts on a periodic check that starts one RATE_DECREASE_INTERVAL "
                  "(50 us) after the first CNP (cnp_received_mlx, CheckRateDecreaseMlx), "
                  "where the paper cuts at the CNP: the onset overshoots to PFC's threshold")
NO_BYTE_COUNTER = ("ns-3's DCQCN has no byte counter (RateIncEventTimerMlx) and a constant "
                   "hyper step (HyperIncreaseMlx)")

#: railab's own models (fluid, per-packet) against ns-3: scenario -> the cause.
RAILAB_VS_NS3: dict[str, str] = {
    **{f"incast-{n}-pfc-{o}-400g": f"{NP_EVERY_MARK}; {FIRST_CUT_LATE}"
       for n in (2, 4, 8, 16) for o in ("on", "off")},
    "incast-2-pfc-on-paper": f"{NO_BYTE_COUNTER}: the paper's 10 MB counter drives railab's "
                             f"recovery at 2:1 (ns-3 recovers by 7 Gb/s per ms); {FIRST_CUT_LATE}",
    "incast-8-pfc-on-paper": f"{NP_EVERY_MARK}; {NO_BYTE_COUNTER}",
    "incast-2-pfc-on-connectx": f"{NO_BYTE_COUNTER}: ConnectX's rp_byte_reset 32,767 B is its "
                                "recovery; without it ns-3's senders stay near the floor",
    "incast-8-pfc-on-connectx": f"{NO_BYTE_COUNTER}: ConnectX's rp_byte_reset 32,767 B is its "
                                "recovery; without it ns-3's senders stay near the floor",
}
#: Scenarios where even ns-3's DCQCN in railab's machinery misses a band: scenario -> cause.
#: Seed 1 alone meets the bands in the first and the last (2026-12-06): one run's chance.
KNOWN_NS3: dict[str, str] = {
    "incast-2-pfc-off-400g": "ns-3's stored run (RngRun 1) is its own extreme: the shallowest "
                             "queue peak (3.90 MB; RngRun 1-10: 3.90-4.55) and the highest port "
                             "use (94.3 %; 89.9-94.3) of its 10 seeds, where railab's (seeds 1-2) "
                             "peaks at 4.4 MB ~4 points lower, within ns-3's own spread "
                             "(test_ns3s_dcqcn_in_railabs_machinery_is_within_ns3s_own_spread); "
                             "at 2:1 a sender's fifth cut at the start decides it (docs: '2:1: a "
                             "knife edge at the start')",
    "incast-2-pfc-off-400g-aligned": "as incast-2-pfc-off-400g, 8 points lower",
    "incast-2-pfc-on-connectx": "not found: both starve the senders (ns-3 17 %, railab 12 % "
                                "of the port; seed 1 alone is within the bands)",
}
#: The scenarios the fluid model is run for (each takes ~10 s).
FLUID = ("incast-2-pfc-on-400g", "incast-8-pfc-on-400g")


def _railab(args: tuple[str, int, bool, str, float, str | None]) -> dict:
    model, n, pfc, prof, fabric_us, variant = args
    p = FluidParams.from_qos(lossless_qos(), n, pfc=pfc, dcqcn=DCQCN_PROFILES[prof])
    if variant == "aligned":  # ns-3's hyper step set to R_AI (scripts/ns3_reference.py)
        p = replace(p, hai_rate_mbps=p.ai_rate_mbps)
    share = p.line_gbps / n
    if model == "fluid":
        run = fluid_simulate(p, fabric_us)
        s = run.summary()
        return {"utilization": s["utilization"],
                "ratios": [g / share for g in s["per_flow_gbps"]],
                "queue_peak_bytes": float(run.q_bytes.max())}
    window = bdp_bytes(p) if variant == "windowed" else None  # HAS_WIN 1 (not run here)
    runs = [packet_simulate(p, fabric_us, seed=s, rp=model, window_bytes=window) for s in SEEDS]
    ratios = [sorted(r.ratios) for r in runs]
    return {"utilization": sum(r.utilization for r in runs) / len(runs),
            "ratios": [sum(col) / len(col) for col in zip(*ratios, strict=True)],
            "queue_peak_bytes": sum(r.queue_max_bytes for r in runs) / len(runs)}


def _jobs() -> list[tuple]:
    out = []
    for name, r in COMPARED.items():
        args = (r["senders"], r["pfc"], r["dcqcn"], r["fabric_us"], r.get("variant"))
        out.append(("ns3", *args))
        if not r.get("variant"):
            out.append(("railab", *args))
            if name in FLUID:
                out.append(("fluid", *args))
    return out


@pytest.fixture(scope="module")
def railab_figures() -> dict:
    """Every model run the comparisons need, on every core (each run is independent)."""
    jobs = sorted(_jobs(), key=lambda j: j[0] != "fluid")  # the longest first
    with multiprocessing.get_context("fork").Pool() as pool:
        out = pool.map(_railab, jobs, chunksize=1)
    return {(ns3ref.scenario_name(j[1], j[2], j[3]) + (f"-{j[5]}" if j[5] else ""), j[0]): o
            for j, o in zip(jobs, out, strict=True)}


def test_the_twelve_scenarios_are_stored_with_provenance():
    want = {ns3ref.scenario_name(n, pfc, "400g") for n in (2, 4, 8, 16) for pfc in (True, False)}
    want |= {ns3ref.scenario_name(n, True, p) for p in ("paper", "connectx") for n in (2, 8)}
    assert want <= set(RECORDS)
    for r in RECORDS.values():
        assert len(r["ns3"]["commit"]) == 40 and r["command"] and r["date"] and r["wall_s"] > 0
        assert len(r["summary"]["ratios"]) == r["senders"]
        assert r["fabric_us"] >= 10_000  # a steady state to read over the last half


#: The scenarios with ns-3's own run-to-run spread stored (``--rng-runs 10``).
SPREAD = tuple(ns3ref.scenario_name(n, pfc, "400g") for n in (2, 4, 8) for pfc in (True, False))


@pytest.mark.parametrize("scenario", SPREAD)
def test_ns3s_own_spread_is_stored_with_provenance(scenario):
    """ns-3's marks are random (switch-mmu.cc ShouldSendCN): the same scenario with RngRun
    1..10 gives a range of figures, stored beside the canonical run 1 (its ``summary``)."""
    r = RECORDS[scenario]
    sp = r["spread"]
    assert sp["k"] == 10 and sp["rng_runs"] == list(range(1, 11)) and sp["canonical_rng_run"] == 1
    assert "NS_GLOBAL_VALUE=RngRun=<k>" in sp["command"] and sp["date"] and sp["wall_s"] > 0
    assert sp["ns3_commit"] == r["ns3"]["commit"]
    assert sp["generated_by"] == "scripts/ns3_reference.py --rng-runs"
    run1 = sp["runs"][0]
    assert run1["rng_run"] == 1  # the canonical run is run 1 of the spread, unchanged
    assert all(run1[k] == r["summary"][k] for k in run1 if k != "rng_run")
    u = [x["utilization"] for x in sp["runs"]]
    assert (sp["min"]["utilization"], sp["max"]["utilization"]) == (min(u), max(u))
    assert len({(x["utilization"], x["queue_peak_bytes"]) for x in sp["runs"]}) > 1  # they differ
    assert sp["min"]["queue_peak_bytes"] <= r["summary"]["queue_peak_bytes"] <= sp["max"]["queue_peak_bytes"]
    assert len(sp["ratios_sorted_min"]) == len(sp["ratios_sorted_max"]) == r["senders"]
    b = ns3ref.brief(r)["ns3_spread"]
    assert b["k"] == 10 and b["utilization"] == [min(u), max(u)]


def test_stored_parameters_are_railabs_current_ones():
    """A changed ECN/PFC/DCQCN number in railab makes the stored ns-3 runs stale: rerun
    scripts/ns3_reference.py."""
    q = lossless_qos()
    for r in RECORDS.values():
        cfg, d = r["params"]["ns3"], DCQCN_PROFILES[r["dcqcn"]]
        assert cfg["KMIN_MAP"].split()[-1] == str(round(q.ecn.kmin_bytes / 1000))
        assert cfg["KMAX_MAP"].split()[-1] == str(round(q.ecn.kmax_bytes / 1000))
        assert float(cfg["PMAX_MAP"].split()[-1]) == q.ecn.pmax_percent / 100
        assert float(cfg["EWMA_GAIN"]) == d.g and float(cfg["RP_TIMER"]) == d.rate_timer_us
        assert float(cfg["ALPHA_RESUME_INTERVAL"]) == d.alpha_timer_us
        assert float(cfg["RATE_DECREASE_INTERVAL"]) == d.cnp_interval_us
        assert cfg["RATE_AI"] == f"{d.ai_rate_mbps:g}Mb/s"
        hai = d.ai_rate_mbps if r.get("variant") == "aligned" else d.hai_rate_mbps
        assert cfg["RATE_HAI"] == f"{hai:g}Mb/s"
        assert cfg["MIN_RATE"] == f"{d.min_rate_mbps:g}Mb/s"
        assert int(cfg["FAST_RECOVERY_TIMES"]) == d.fast_recovery_steps
        windowed = r.get("variant") == "windowed"
        assert (cfg["HAS_WIN"], cfg["VAR_WIN"]) == (("1", "0") if windowed else ("0", "0"))
        target = q.pfc_pause_bytes if r["pfc"] else q.capacity.drop_limit_bytes
        topo = r["params"]["topology"]
        assert topo["target_bytes"] == target
        assert abs(topo["implied_depth_bytes"] - target) <= 0.01 * target


def test_compare_flags_a_sender_outside_the_band():
    ns3 = {"utilization": 0.99, "ratios": [1.0, 1.0], "queue_peak_bytes": 1000}
    ok = ns3ref.compare(ns3, utilization=0.975, ratios=[0.9, 1.1], queue_peak_bytes=1250)
    assert ok["agrees"]
    bad = ns3ref.compare(ns3, utilization=0.99, ratios=[0.8, 1.2], queue_peak_bytes=1000)
    assert not bad["share_ok"] and not bad["agrees"]
    assert not ns3ref.compare(ns3, utilization=0.95, ratios=[1, 1], queue_peak_bytes=1000)["agrees"]
    assert not ns3ref.compare(ns3, utilization=0.99, ratios=[1, 1],
                              queue_peak_bytes=1400)["queue_peak_ok"]


def _check(scenario: str, model: str, figures: dict) -> None:
    ns3 = RECORDS[scenario]["summary"]
    mine = figures[(scenario, model)]
    c = ns3ref.compare(ns3, **mine)
    assert c["utilization_ok"], (f"{model}: port {mine['utilization']:.3f} against ns-3's "
                                 f"{ns3['utilization']:.3f}")
    assert c["share_ok"], (f"{model}: shares {sorted(round(x, 2) for x in mine['ratios'])} "
                           f"against ns-3's {sorted(ns3['ratios'])}")
    assert c["queue_peak_ok"], (f"{model}: queue peak {mine['queue_peak_bytes']:,.0f} B against "
                                f"ns-3's {ns3['queue_peak_bytes']:,} B")


def _params(names, known: dict[str, str]):
    return [pytest.param(n, id=n, marks=[pytest.mark.xfail(strict=True, reason=known[n])]
                         if n in known else []) for n in names]


@pytest.mark.parametrize("scenario", _params(sorted(COMPARED), KNOWN_NS3))
def test_ns3s_dcqcn_in_railabs_machinery_meets_ns3(scenario, railab_figures):
    """railab's queue, marking, PFC and drops with ns-3's RP and NP reproduce ns-3."""
    _check(scenario, "ns3", railab_figures)


@pytest.mark.parametrize("scenario", sorted(n for n, r in COMPARED.items()
                                             if ns3ref.spread(r) is not None))
def test_ns3s_dcqcn_in_railabs_machinery_is_within_ns3s_own_spread(scenario, railab_figures):
    """Beside the bands of ns-3's one stored run: railab's machinery with ns-3's RP and NP
    lands where ns-3 itself lands with another seed (its RngRun 1-10, widened by the bands,
    :func:`railab.traffic.ns3ref.within_spread`), in every scenario ns-3 ran with seeds."""
    sp = ns3ref.spread(RECORDS[scenario])
    mine = railab_figures[(scenario, "ns3")]
    vs = ns3ref.within_spread(sp, **mine)
    assert vs["within"], (vs, mine["utilization"], sorted(round(x, 2) for x in mine["ratios"]),
                          mine["queue_peak_bytes"], sp["utilization"], sp["queue_peak_bytes"])


@pytest.mark.parametrize("scenario", _params(
    sorted(n for n, r in COMPARED.items() if not r.get("variant")), RAILAB_VS_NS3))
def test_railabs_per_packet_reference_against_ns3(scenario, railab_figures):
    _check(scenario, "railab", railab_figures)


@pytest.mark.parametrize("scenario", _params(FLUID, RAILAB_VS_NS3))
def test_railabs_fluid_model_against_ns3(scenario, railab_figures):
    _check(scenario, "fluid", railab_figures)


def test_model_incast_reference_ns3_says_when_the_qos_differs():
    """``railab model incast``'s ``reference.ns3``: ns-3's figures for the same scenario, and
    whether they were run with this QoS (the generic profile tail-drops at 4 MiB, mini-lossless's
    shared buffer far deeper) and for as long."""
    from railab.cli.model import ns3_reference, ns3_text
    from railab.topologies.qos import DEFAULT_QOS, CapacityProfile

    stored = RECORDS["incast-2-pfc-off-400g"]["summary"]
    rec = {"summary": {"utilization": stored["utilization"], "fabric_us": 15_000.0,
                       "per_flow_gbps": stored["per_flow_gbps"]},
           "queue_peak_bytes": stored["queue_peak_bytes"]}
    mine = ns3_reference(lossless_qos(), 2, False, "400g", rec)
    assert mine["same_qos"] and mine["same_fabric_time"] and mine["fluid_vs_ns3"]["agrees"]
    generic = DEFAULT_QOS.model_copy(update={"capacity": CapacityProfile(enabled=True)})
    other = ns3_reference(generic, 2, False, "400g", dict(rec, summary=dict(rec["summary"],
                                                                           fabric_us=5000.0)))
    assert not other["same_qos"] and not other["same_fabric_time"] and not other["comparable"]
    assert other["fluid_vs_ns3"]["agrees"] is None  # the differences, no verdict
    assert "not this run's ECN/PFC/buffer" in ns3_text(other) and "is not judged" in ns3_text(other)
    assert ns3_reference(lossless_qos(), 3, True, "400g", rec) is None  # nothing stored for 3:1
