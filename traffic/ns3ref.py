"""Stored ns-3 results of railab's N:1 incasts: an independent simulator beside railab's models.

ns-3 with HPCC's RDMA model (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM
2019; github.com/alibaba-edu/High-Precision-Congestion-Control, ns-3.17: DCQCN in
``rdma-hw.cc``, PFC in ``qbb-net-device.cc``, a shared-buffer switch in ``switch-mmu.cc``) is
the simulator many published DCQCN results come from. ``scripts/ns3_reference.py`` runs
railab's incast scenarios in it (the lab ``mini-lossless``'s ECN/PFC/buffer numbers and a DCQCN
profile of :data:`railab.topologies.qos.DCQCN_PROFILES`, each mapped to ns-3's config keys) and
stores **its numbers** (no ns-3 code: ns-3 is GPL and not a dependency) as
``tests/data/ns3/incast-<N>-pfc-<on|off>-<profile>[-<variant>].json.gz`` with the ns-3 commit,
the parameters, the command, the date and the wall time (variants: ``aligned``, ns-3's hyper
step at R_AI; ``windowed``, HPCC's windowed DCQCN, ``HAS_WIN 1``: :func:`stored` returns
them, :func:`load` the plain scenario only). This module finds and summarizes them;
``railab model incast`` and the incast load run print them as ``reference.ns3``.

The figures are ns-3's (computed by ns-3, not measured), fabric units (us, Gb/s, bytes), over
the last half of the run as railab's: ``utilization`` (delivered / port rate), ``ratios``
(each sender's delivered rate over its fair share), ``queue_peak_bytes`` (the whole run),
``queue_bytes`` {mean, max} (last half), ``pauses_received`` (PFC PAUSE frames the senders
got), ``dropped_pct``, ``time_to_fair_us`` (100 us bins, railab's 10 % band).

Each stored ``summary`` is one ns-3 run (RngRun 1): its WRED marks are random, so another seed
gives other figures. The six ``400g`` scenarios of 2:1-8:1 also carry ns-3's own run-to-run
range (``spread``: RngRun 1..10, ``scripts/ns3_reference.py --rng-runs 10``); :func:`spread`
and :func:`within_spread` set a run beside it, next to issue 44's verdict against the one run.

**Flow completion times** (issue 44): ``...-<profile>-fct-<size>.json.gz`` are the same
scenarios with finite flows, each sender one flow of railab's ``--bytes`` (``--bytes 4M,16M``
of ``scripts/ns3_reference.py``; ns-3's flow size is ``ceil(bytes / 4096) x 4096``, railab's
packet count and payload exactly: the record's ``flow``), with ns-3's FCT file read in
(``fct``: per flow; ``fct_summary``: p50/p99/max in fabric us, both ``delivered_*`` (start to
the last data packet at the receiver: railab's ``congestion.fct`` definition) and ``fct_*``
(ns-3's own, to the last ACK at the sender, 0.5 us later)). :func:`stored` leaves them out,
:func:`stored_fct` and :func:`load_fct` return them, :func:`beside_fct` sets a ``--bytes`` load
run's measured FCTs beside them (:data:`FCT_BAND`).

**Leaf-spine** (``...-<profile>-leafspine.json.gz``): the same incast in the lab
``mini-lossless``'s layout (two leaves, four spines), to see what the second tier does in ns-3;
:func:`stored_leafspine` returns them, :func:`stored` and :func:`load` do not.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

#: Where the stored files are: ``RAILAB_NS3_DATA`` or the source tree's ``tests/data/ns3``
#: (absent from an installed wheel: then there is no ns-3 reference to print).
DATA_DIR = Path(os.environ.get("RAILAB_NS3_DATA")
                or Path(__file__).resolve().parent.parent / "tests" / "data" / "ns3")

#: The bands of issue 44 for railab's models against ns-3: utilization within 3 points, every
#: sender's mean share within 15 % (of the fair share), the queue peak within 30 % (of ns-3's).
BANDS = {"utilization_points": 3.0, "share": 0.15, "queue_peak": 0.30}


#: How far a run's fabric time may be from the stored run's and still be its scenario: 0.1 %
#: (a timed load run of 30 lab s ends up to a sample late, 15.001 ms of fabric time against
#: ns-3's 15; a 1 ms run is not 15)
FABRIC_TIME_TOLERANCE = 0.001


def scenario_name(senders: int, pfc: bool, profile: str) -> str:
    """The stored file's stem of an N:1 incast: ``incast-<N>-pfc-<on|off>-<profile>``."""
    return f"incast-{senders}-pfc-{'on' if pfc else 'off'}-{profile}"


def load(senders: int, pfc: bool, profile: str, data_dir: Path | None = None) -> dict | None:
    """The stored ns-3 record of the scenario (the whole JSON), or None if there is none."""
    path = (data_dir or DATA_DIR) / f"{scenario_name(senders, pfc, profile)}.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _records(data_dir: Path | None) -> list[dict]:
    d = data_dir or DATA_DIR
    recs = []
    for p in sorted(d.glob("incast-*.json.gz")) if d.is_dir() else []:
        with gzip.open(p, "rt") as f:
            recs.append(json.load(f))
    return recs


def stored(data_dir: Path | None = None) -> list[dict]:
    """Every stored long-flow ns-3 record of the one-switch scenario (not the finite-flow ones:
    :func:`stored_fct`; nor the leaf-spine ones: :func:`stored_leafspine`), sorted by profile,
    PFC and N."""
    recs = [r for r in _records(data_dir) if not r.get("bytes_per_qp") and not r.get("layout")]
    return sorted(recs, key=lambda r: (r["dcqcn"], not r["pfc"], r["senders"]))


def stored_leafspine(data_dir: Path | None = None) -> list[dict]:
    """Every stored ns-3 record of the **leaf-spine** layout (``...-<profile>-leafspine``,
    ``scripts/ns3_reference.py --layout leafspine``: the lab ``mini-lossless``'s incast, the
    senders on the receiver's leaf and on another leaf behind 4 spines, each remote flow on
    its own spine; ``layout``, ``params.leafspine`` and ``fabric`` say how), sorted by PFC and
    N. Never returned by :func:`stored` or :func:`load`: the incast load run and ``model
    incast`` compare with the one-switch records."""
    recs = [r for r in _records(data_dir) if r.get("layout") == "leafspine" and not r.get("bytes_per_qp")]
    return sorted(recs, key=lambda r: (r["dcqcn"], not r["pfc"], r["senders"]))


def stored_leafspine_fct(data_dir: Path | None = None) -> list[dict]:
    """Every stored **finite-flow** ns-3 record of the leaf-spine layout
    (``...-<profile>-fct-<size>-leafspine``, ``scripts/ns3_reference.py --layout leafspine
    --bytes B``; :func:`stored_leafspine`'s layout, :func:`stored_fct`'s flows), sorted by
    PFC, bytes per QP and N. Never returned by :func:`stored_fct` or :func:`load_fct`."""
    recs = [r for r in _records(data_dir) if r.get("layout") == "leafspine" and r.get("bytes_per_qp")]
    return sorted(recs, key=lambda r: (r["dcqcn"], not r["pfc"], r["bytes_per_qp"], r["senders"]))


def stored_fct(data_dir: Path | None = None) -> list[dict]:
    """Every stored finite-flow ns-3 record (flow completion times), sorted by profile, PFC,
    bytes per QP and N."""
    recs = [r for r in _records(data_dir) if r.get("bytes_per_qp") and not r.get("layout")]
    return sorted(recs, key=lambda r: (r["dcqcn"], not r["pfc"], r["bytes_per_qp"], r["senders"]))


def size_tag(nbytes: int) -> str:
    """A byte count in a scenario name: ``16m`` (16 MiB), ``512k``, or the number."""
    for unit, tag in ((1 << 30, "g"), (1 << 20, "m"), (1 << 10, "k")):
        if nbytes % unit == 0:
            return f"{nbytes // unit}{tag}"
    return str(nbytes)


def _size_text(nbytes: int) -> str:
    """``16 MiB``, ``512 KiB`` or ``1,000,000 B``."""
    t = size_tag(nbytes)
    return f"{t[:-1]} {t[-1].upper()}iB" if t[-1].isalpha() else f"{nbytes:,} B"


def fct_scenario_name(senders: int, pfc: bool, profile: str, nbytes: int) -> str:
    """The stored file's stem of an N:1 incast of finite flows, ``nbytes`` per sender:
    ``incast-<N>-pfc-<on|off>-<profile>-fct-<size>`` (``-fct-16m``)."""
    return f"{scenario_name(senders, pfc, profile)}-fct-{size_tag(nbytes)}"


def load_fct(senders: int, pfc: bool, profile: str, nbytes: int,
             data_dir: Path | None = None) -> dict | None:
    """The stored finite-flow ns-3 record of the scenario with ``nbytes`` (railab's
    ``--bytes``) per sender, or None if there is none."""
    path = (data_dir or DATA_DIR) / f"{fct_scenario_name(senders, pfc, profile, nbytes)}.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt") as f:
        return json.load(f)


def brief(rec: dict) -> dict:
    """The ``reference.ns3`` object of a record: ns-3's summary figures with their provenance
    (repository, commit, scenario, the lab whose QoS was mapped, date, fabric time)."""
    s = rec["summary"]
    keys = ("utilization", "ratios", "per_flow_gbps", "queue_peak_bytes", "queue_bytes",
            "pauses_received", "dropped_pct", "time_to_fair_us", "window_us")
    out = {"source": rec["source"], "repository": rec["ns3"]["repository"],
           "commit": rec["ns3"]["commit"], "scenario": rec["scenario"],
           "lab_qos": rec["lab_qos"], "date": rec["date"], "fabric_us": rec["fabric_us"],
           **{k: s[k] for k in keys}}
    if (sp := spread(rec)) is not None:
        out["ns3_spread"] = sp
    return out


def spread(rec: dict) -> dict | None:
    """ns-3's own run-to-run range of the scenario, or None when the record has none: the same
    scenario run with ns-3's global ``RngRun`` 1..K (``scripts/ns3_reference.py --rng-runs K``;
    run 1 is the stored ``summary``; the random WRED marks differ): ``k``, ``rng_runs``,
    ``utilization`` [min, max] (fractions of the port), ``queue_peak_bytes`` [min, max] (bytes),
    ``ratios`` [min, max] (each sender's share over its fair share, over all senders and runs),
    ``ratios_sorted`` [[min per rank], [max per rank]] (the sorted shares, rank by rank),
    ``date``, ``command``, ``commit``, ``utilization_runs`` (each seed's, RngRun order; None
    without per-run figures) and ``self_agreement`` (:func:`self_agreement`: how
    often ns-3's other seeds meet issue 44's bands of its run 1; None without per-run figures)."""
    sp = rec.get("spread")
    if not sp:
        return None
    lo, hi = sp["min"], sp["max"]
    return {"k": sp["k"], "rng_runs": sp["rng_runs"],
            "utilization": [lo["utilization"], hi["utilization"]],
            "queue_peak_bytes": [lo["queue_peak_bytes"], hi["queue_peak_bytes"]],
            "ratios": [lo["ratio_min"], hi["ratio_max"]],
            "ratios_sorted": [sp["ratios_sorted_min"], sp["ratios_sorted_max"]],
            "date": sp["date"], "command": sp["command"], "commit": sp.get("ns3_commit"),
            "utilization_runs": [r["utilization"] for r in sp.get("runs") or []] or None,
            "self_agreement": self_agreement(rec)}


def self_agreement(rec: dict, bands: dict | None = None) -> dict | None:
    """How often **ns-3 meets issue 44's bands against its own stored run**: each of the
    record's other seeds (``spread.runs``, ``RngRun`` 2..K of ``scripts/ns3_reference.py
    --rng-runs K``; only the random WRED draws differ) set beside run 1 (the ``summary`` every
    verdict uses) by :func:`compare` with ``bands`` (:data:`BANDS`). What an emulation run's
    verdict can be expected to reach: where ns-3 itself misses its run 1's bands in some
    seeds (2:1 PFC off), a run of the same rules misses them as often without being wrong.
    Returns ``agree`` (how many meet all three), ``of`` (how many were compared),
    ``agreeing`` and ``missing`` (their RngRun numbers); None when the record keeps no
    per-run figures."""
    runs = [r for r in ((rec.get("spread") or {}).get("runs") or [])
            if r["rng_run"] != rec["spread"].get("canonical_rng_run", 1)]
    if not runs:
        return None
    ok = {r["rng_run"]: compare(rec["summary"], utilization=r["utilization"], ratios=r["ratios"],
                                queue_peak_bytes=r["queue_peak_bytes"], bands=bands)["agrees"]
          for r in runs}
    return {"agree": sum(ok.values()), "of": len(ok),
            "agreeing": [k for k, v in ok.items() if v], "missing": [k for k, v in ok.items() if not v]}


def within_spread(sp: dict, *, utilization: float, ratios: list[float], queue_peak_bytes: float,
                  bands: dict | None = None, comparable: bool = True) -> dict:
    """railab's figures against ns-3's own range (:func:`spread`) widened by :data:`BANDS`:
    utilization within [min - 3 points, max + 3 points], the queue peak within
    [min x (1 - 0.30), max x (1 + 0.30)], every sender's share (sorted, rank by rank as
    :func:`compare`) within [that rank's min - 0.15, max + 0.15]. ``*_ok`` for each and
    ``within`` for all three. A figure ns-3 itself reaches with another seed passes; this is
    beside issue 44's verdict against the canonical run (:func:`compare`), not instead of it.
    ``comparable`` false (the run is not ns-3's scenario): the ``*_ok`` stand, ``within`` is
    None. Raises ValueError when the numbers of senders differ."""
    b = bands or BANDS
    lo_r, hi_r = sp["ratios_sorted"]
    if len(ratios) != len(lo_r):
        raise ValueError("within_spread: railab and ns-3 have different numbers of senders")
    pts = b["utilization_points"] / 100
    u_ok = sp["utilization"][0] - pts <= utilization <= sp["utilization"][1] + pts
    q_ok = (sp["queue_peak_bytes"][0] * (1 - b["queue_peak"]) <= queue_peak_bytes
            <= sp["queue_peak_bytes"][1] * (1 + b["queue_peak"]))
    s_ok = all(lo - b["share"] <= r <= hi + b["share"]
               for r, lo, hi in zip(sorted(ratios), lo_r, hi_r, strict=True))
    return {"utilization_ok": bool(u_ok), "share_ok": bool(s_ok), "queue_peak_ok": bool(q_ok),
            "within": bool(u_ok and s_ok and q_ok) if comparable else None}


def same_qos(stored: dict, qos, pfc: bool) -> bool:
    """Whether the stored run mapped ``qos``: its ECN thresholds and, PFC on, its pause depth
    or, off, its drop depth (the stored runs map ``mini-lossless``'s)."""
    mapped = stored["params"]["topology"]["target_bytes"]
    ecn = stored["params"]["railab"]["qos"]["ecn"]
    here = qos.pfc_pause_bytes if pfc else qos.capacity.drop_limit_bytes
    return bool(mapped == here and ecn["kmin_bytes"] == qos.ecn.kmin_bytes
                and ecn["kmax_bytes"] == qos.ecn.kmax_bytes
                and ecn["pmax_percent"] == qos.ecn.pmax_percent)


def _set_spread_vs(sp: dict, comparable: bool, figures: dict) -> bool | None:
    """:func:`within_spread` of ``figures`` put into ``sp["vs"]``; returns its ``within`` (None
    when the run is not ns-3's scenario, ``comparable`` false)."""
    sp["vs"] = within_spread(sp, **figures, comparable=comparable)
    return sp["vs"]["within"]


def leafspine_for(stored: dict, remote: list[str], data_dir: Path | None = None) -> dict | None:
    """The stored **leaf-spine** record of ``stored``'s scenario (same N, PFC and profile; a
    finite-flow record's the same bytes per QP too: :func:`stored_leafspine` for long flows,
    :func:`stored_leafspine_fct` for finite ones) whose remote senders are ``remote`` (the run's
    sender servers behind the spines, e.g. ``["srv9", "srv10", ...]``; its
    ``params.leafspine.placement``), or None when there is none or the run placed its senders
    otherwise."""
    nb = stored.get("bytes_per_qp")
    for rec in stored_leafspine_fct(data_dir) if nb else stored_leafspine(data_dir):
        if (rec["senders"], rec["pfc"], rec["dcqcn"], rec.get("bytes_per_qp")) != (
                stored["senders"], stored["pfc"], stored["dcqcn"], nb):
            continue
        if sorted(rec["params"]["leafspine"]["placement"]["remote"]) == sorted(remote):
            return rec
    return None


def beside(stored: dict, qos, pfc: bool, fabric_us: float, *, utilization: float,
           ratios: list[float], queue_peak_bytes: float, payload_bytes: int = 4096,
           shared_links: dict[str, list[str]] | None = None,
           remote: list[str] | None = None) -> dict:
    """A stored record (:func:`load`) set beside railab's figures of the same scenario:
    :func:`brief` plus ``same_qos`` (ns-3 ran with ``qos``'s ECN thresholds and, PFC on, its
    pause depth or, off, its drop depth: the stored runs map ``mini-lossless``'s), ``same_fabric_time``
    (the stored run is ``fabric_us`` long, within :data:`FABRIC_TIME_TOLERANCE`), ``same_payload`` (its packets carried
    ``payload_bytes``, the MTU's payload: 4096 in every stored run), ``one_bottleneck`` (ns-3's
    scenario is one switch, so its flows meet only at the receiver's port: True when
    ``shared_links``, :func:`railab.traffic.fib.shared_links` of the run's traced paths, is empty,
    False when two or more flows also share a link on the way, e.g. an ECMP collision on a
    spine's downlink, which is a second congestion point ns-3's scenario lacks and, with PFC on,
    PAUSEs that spread to senders ns-3 would not pause; None when the paths were not traced;
    ``shared_links`` is then copied as ``shared``), ``comparable`` (all four; an untraced
    path does not count against it), ``leafspine`` (only when ``remote`` names the run's
    sender servers behind the spines: ns-3's run of that same leaf-spine placement,
    :func:`leafspine_for`, its figures, ``vs`` and, with a spread, ``ns3_spread`` and
    ``within_spread``; None when none is stored), ``vs``
    (:func:`compare` of the given figures: utilization a fraction of the port, ``ratios`` each
    sender's rate over its fair share, ``queue_peak_bytes``; its ``agrees`` None when not
    ``comparable``: the differences are given, no verdict), when the record has ns-3's own
    run-to-run range (:func:`spread`) ``ns3_spread`` with its ``vs`` (:func:`within_spread`)
    and ``within_spread`` (its ``within``; None when not ``comparable``), and ``bands``
    (:data:`BANDS`).
    Raises ValueError when the numbers of senders differ."""
    out = brief(stored)
    out["same_qos"] = same_qos(stored, qos, pfc)
    out["same_fabric_time"] = abs(stored["fabric_us"] - fabric_us) <= FABRIC_TIME_TOLERANCE * stored["fabric_us"]
    out["same_payload"] = int(stored["params"]["ns3"]["PACKET_PAYLOAD_SIZE"]) == payload_bytes
    out["one_bottleneck"] = None if shared_links is None else not shared_links
    if shared_links:
        out["shared"] = shared_links
    out["comparable"] = (out["same_qos"] and out["same_fabric_time"] and out["same_payload"]
                         and out["one_bottleneck"] is not False)
    figures = dict(utilization=utilization, ratios=ratios, queue_peak_bytes=queue_peak_bytes)
    # not comparable: the differences stand, a verdict on them would not
    out["vs"] = compare(stored["summary"], **figures, comparable=out["comparable"])
    if "ns3_spread" in out:  # beside "vs", never instead of it
        out["within_spread"] = _set_spread_vs(out["ns3_spread"], out["comparable"], figures)
    # senders behind the spines: ns-3's one-switch run is not their layout; its leaf-spine run
    # of the same placement is (scripts/ns3_reference.py --layout leafspine), when stored
    if remote:
        ls = leafspine_for(stored, remote)
        out["leafspine"] = None if ls is None else {
            "scenario": ls["scenario"], "utilization": ls["summary"]["utilization"],
            "ratios": ls["summary"]["ratios"], "queue_peak_bytes": ls["summary"]["queue_peak_bytes"],
            "vs": compare(ls["summary"], **figures, comparable=out["comparable"])}
        if ls is not None:
            if (sp := spread(ls)) is not None:
                out["leafspine"]["ns3_spread"] = sp
                out["leafspine"]["within_spread"] = _set_spread_vs(sp, out["comparable"], figures)
    out["bands"] = BANDS
    return out


#: railab's band (not issue 44's: the issue sets none for FCTs) for a ``--bytes`` run's flow
#: completion times against ns-3's: p50 and p99 each within 30 % of ns-3's (relative to ns-3's,
#: fabric us; the same width as issue 44's queue-peak band). The max is given, not judged.
FCT_BAND = {"p50": 0.30, "p99": 0.30}


def compare_fct(ns3: dict, *, p50_us: float | None, p99_us: float | None,
                max_us: float | None = None, band: dict | None = None,
                comparable: bool = True) -> dict:
    """A run's measured flow completion times (fabric us: ``congestion.fct``'s
    ``fabric_p50_us``, ``fabric_p99_us``, ``fabric_max_us``) against ns-3's ``fct_summary``'s
    ``delivered_*`` (the same definition: a flow's start to its last data packet at the
    receiver): ``p50_rel``/``p99_rel``/``max_rel`` (railab / ns-3 - 1, signed), ``p50_ok``/
    ``p99_ok`` (``|rel| <=`` :data:`FCT_BAND`), ``agrees`` (both; None when not ``comparable``,
    :func:`beside_fct`). A missing figure (no QP completed) is not within the band."""
    b = band or FCT_BAND
    out: dict = {}
    for k, v in (("p50", p50_us), ("p99", p99_us), ("max", max_us)):
        ref = ns3[f"delivered_{k}_us"]
        out[f"{k}_rel"] = None if v is None or not ref else round(v / ref - 1, 3)
    for k in ("p50", "p99"):
        out[f"{k}_ok"] = out[f"{k}_rel"] is not None and abs(out[f"{k}_rel"]) <= b[k]
    out["agrees"] = (out["p50_ok"] and out["p99_ok"]) if comparable else None
    return out


def beside_fct(stored: dict, qos, pfc: bool, nbytes: int, *, p50_us: float | None,
               p99_us: float | None, max_us: float | None = None, completed: int | None = None,
               payload_bytes: int = 4096, shared_links: dict[str, list[str]] | None = None,
               remote: list[str] | None = None) -> dict:
    """A stored finite-flow record (:func:`load_fct`) beside a ``--bytes`` load run's measured
    flow completion times (fabric us): ``source``, ``repository``, ``commit``, ``scenario``,
    ``lab_qos``, ``date``, ``bytes_per_qp``, ``flow_size_bytes``, ns-3's ``fct`` (its
    ``fct_summary``: ``delivered_p50_us`` ... computed by ns-3), the conditions of
    :func:`beside` that apply (``same_qos``, ``same_payload``, ``one_bottleneck``; the fabric
    time does not: both runs end when the flows complete) plus ``same_bytes`` (ns-3's flow is
    ``ceil(nbytes / payload) x payload``: the run's packets and payload bytes) and
    ``all_completed`` (every QP of the run delivered its bytes, ``completed`` of the senders,
    and every ns-3 flow completed), ``comparable`` (all), ``vs`` (:func:`compare_fct`; its
    ``agrees`` None when not ``comparable``) and ``band`` (:data:`FCT_BAND`, railab's choice);
    ``leafspine`` as :func:`beside`'s when ``remote`` names the run's senders behind the spines:
    ns-3's finite-flow run of that same placement (:func:`leafspine_for`), its ``fct`` and
    ``vs``, None when none is stored."""
    s = stored["fct_summary"]
    out = {k: stored[k] for k in ("source", "scenario", "lab_qos", "date", "bytes_per_qp")}
    out.update(repository=stored["ns3"]["repository"], commit=stored["ns3"]["commit"],
               flow_size_bytes=s["flow_size_bytes"], fct=s)
    out["same_qos"] = same_qos(stored, qos, pfc)
    pay = int(stored["params"]["ns3"]["PACKET_PAYLOAD_SIZE"])
    out["same_payload"] = pay == payload_bytes
    out["same_bytes"] = s["flow_size_bytes"] == -(-nbytes // payload_bytes) * payload_bytes
    out["one_bottleneck"] = None if shared_links is None else not shared_links
    if shared_links:
        out["shared"] = shared_links
    out["all_completed"] = bool(s["all_completed"] and (completed is None
                                                        or completed == stored["senders"]))
    out["comparable"] = (out["same_qos"] and out["same_payload"] and out["same_bytes"]
                         and out["all_completed"] and out["one_bottleneck"] is not False)
    fcts = dict(p50_us=p50_us, p99_us=p99_us, max_us=max_us, comparable=out["comparable"])
    out["vs"] = compare_fct(s, **fcts)
    if remote:  # senders behind the spines: ns-3's finite-flow run of that layout, if stored
        ls = leafspine_for(stored, remote)
        out["leafspine"] = None if ls is None else {
            "scenario": ls["scenario"], "fct": ls["fct_summary"],
            "vs": compare_fct(ls["fct_summary"], **fcts)}
    out["band"] = FCT_BAND
    return out


def missing_fct_note(senders: int, pfc: bool, profile: str, nbytes: int,
                     data_dir: Path | None = None) -> str:
    """Why a ``--bytes`` incast has no ns-3 flow completion times beside it: the scenario that
    is not stored and the ones that are, for the text output and ``reference.ns3_note``."""
    by: dict[tuple[str, bool, int], list[int]] = {}
    for r in stored_fct(data_dir):
        by.setdefault((r["dcqcn"], r["pfc"], r["bytes_per_qp"]), []).append(r["senders"])
    listing = "; ".join(f"{prof} PFC {'on' if on else 'off'} {_size_text(b)}: "
                        + ", ".join(f"{n}:1" for n in ns) for (prof, on, b), ns in by.items())
    return (f"no stored ns-3 run of {fct_scenario_name(senders, pfc, profile, nbytes)} "
            f"(finite flows stored: {listing or 'none'}; scripts/ns3_reference.py --bytes runs "
            "more)")


def missing_note(senders: int, pfc: bool, profile: str, data_dir: Path | None = None) -> str:
    """Why an incast has no ns-3 figures beside it: the scenario that is not stored and the
    ones that are (``2:1 ...``), for the text output and ``reference.ns3_note``."""
    have = sorted({(r["dcqcn"], r["pfc"], r["senders"]) for r in stored(data_dir) if not r.get("variant")},
                  key=lambda k: (k[0], not k[1], k[2]))
    by: dict[tuple[str, bool], list[int]] = {}
    for prof, on, n in have:
        by.setdefault((prof, on), []).append(n)
    listing = "; ".join(f"{prof} PFC {'on' if on else 'off'}: " + ", ".join(f"{n}:1" for n in ns)
                        for (prof, on), ns in by.items())
    return (f"no stored ns-3 run of {scenario_name(senders, pfc, profile)} (stored: {listing}; "
            "scripts/ns3_reference.py runs more)")


def compare(ns3: dict, *, utilization: float, ratios: list[float], queue_peak_bytes: float,
            bands: dict | None = None, comparable: bool = True) -> dict:
    """railab's figures against ns-3's ``summary`` (:func:`brief` or the record's): the
    differences and whether each is within :data:`BANDS`. Shares are compared sender by sender
    after sorting both sides (the senders are alike, so which one is slowest is chance):
    ``share_max_diff`` is the largest ``|railab - ns-3|`` of the sorted ratios (fractions of the
    fair share). ``comparable`` false (the run is not ns-3's scenario: another QoS, fabric time,
    payload, or a second bottleneck; :func:`beside`): the differences and ``*_ok`` stand,
    ``agrees`` is None. A railab side with fewer senders than ns-3 (or more) raises ValueError."""
    b = bands or BANDS
    if len(ratios) != len(ns3["ratios"]):
        raise ValueError("compare: railab and ns-3 have different numbers of senders")
    du = 100 * abs(utilization - ns3["utilization"])
    ds = max(abs(a - c) for a, c in zip(sorted(ratios), sorted(ns3["ratios"]), strict=True))
    dq = abs(queue_peak_bytes - ns3["queue_peak_bytes"]) / max(ns3["queue_peak_bytes"], 1)
    out = {"utilization_points": round(du, 2), "share_max_diff": round(ds, 3),
           "queue_peak_rel": round(dq, 3),
           "utilization_ok": du <= b["utilization_points"], "share_ok": ds <= b["share"],
           "queue_peak_ok": dq <= b["queue_peak"]}
    out["agrees"] = ((out["utilization_ok"] and out["share_ok"] and out["queue_peak_ok"])
                     if comparable else None)
    return out
