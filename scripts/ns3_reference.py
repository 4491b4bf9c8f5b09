#!/usr/bin/env python3
"""Run railab's N:1 incast scenarios in ns-3's RDMA model (HPCC's simulator) and store its figures.

ns-3 with the RDMA model of HPCC (Li et al., SIGCOMM 2019; github.com/alibaba-edu/
High-Precision-Congestion-Control, ns-3.17 + waf; GPL) is an independent simulator of DCQCN, PFC
and a shared-buffer switch. railab does not depend on it and carries none of its code: this script
takes the path of a checkout, builds it there (``waf``, the modules HPCC's driver needs), writes
**config, topology, flow and trace files** for HPCC's own driver ``simulation/scratch/third.cc``
(unchanged) for each scenario, runs it, reads its binary packet trace (the ``TraceFormat`` record
of ``point-to-point/model/trace-format.h``: 56 bytes, after a ``SimSetting`` header) and PFC log,
and writes one JSON of **numbers** per scenario into ``tests/data/ns3/`` with the ns-3 commit, the
parameters (railab's and ns-3's names, with the mapping), the command, the date and the wall
time. ``tests/test_ns3_reference.py`` compares railab's fluid model and per-packet reference with
those files, without ns-3.

The scenario (docs/congestion.md "ns-3 (HPCC) side by side"): N senders, one switch, one
receiver, 400 Gb/s links of 250 ns (control loop 1 us without queueing, railab's
``base_delay_us``), long flows on priority 3 from t = 2 s (HPCC's driver's convention) for
``--fabric-ms`` (15 ms), the lab ``mini-lossless``'s QoS (ECN 1 MiB-2 MiB at 5 %, marks on
dequeue in both; PFC pause depth ``qos.pfc_pause_bytes``; drop depth its shared buffer's share of
a lone hot queue) and a DCQCN profile of ``railab.topologies.qos``; 4096-byte payloads. Each
mapping, and where ns-3's DCQCN differs from railab's (no byte counter, a constant hyper-increase
step, rate cuts on a periodic check), is in :func:`mapping`. The variant ``windowed``
(``...-400g-windowed``) is HPCC's windowed DCQCN: the same plus ``HAS_WIN 1``, ``VAR_WIN 0``,
a per-QP in-flight window of one BDP (:func:`window_bytes`: 58,100 B here).

Usage (nice 19: the build takes ~20 min of one core; a 15 ms scenario 0.5-2 min)::

    python scripts/ns3_reference.py --src /tmp/hpcc            # a work tree of the repository
    python scripts/ns3_reference.py --src /tmp/hpcc --only 2-on-400g,8-off-400g --fabric-ms 15
    python scripts/ns3_reference.py --src /tmp/hpcc --only 8-on-400g-windowed,16-on-400g-windowed
    python scripts/ns3_reference.py --src /tmp/hpcc --only 2-on-400g,2-off-400g --rng-runs 10

``--bytes 16M[,4M]`` runs the plain scenarios as **finite flows** instead (issue 44's flow
completion times): each sender sends one flow of :func:`flow_size` bytes from t = 2 s and
ns-3's FCT file is read into the record (``fct``, ``fct_summary``: :func:`fct_figures`), stored
as ``incast-<N>-pfc-<on|off>-<profile>-fct-<size>`` (:func:`name_of`)::

    python scripts/ns3_reference.py --src /tmp/hpcc --only 2-on-400g,8-off-400g --bytes 16M

``--layout leafspine`` runs the ``400g`` 2:1-8:1 incasts in the lab's layout instead of one
switch (:func:`leafspine_plan`): the senders where ``railab traffic mini-lossless --pattern
incast --senders N`` puts them (half on the receiver's leaf, half on another leaf), two leaves
and four spines, each remote flow on its own spine (:func:`ecmp_dports`, checked from the
trace of every switch: the record's ``fabric``), each switch's free buffer set for railab's
depth at the load it sees; stored as ``incast-<N>-pfc-<on|off>-400g-leafspine``::

    python scripts/ns3_reference.py --src /tmp/hpcc --layout leafspine --only 8-on-400g --rng-runs 10

With ``--bytes`` it runs them as finite flows (``incast-<N>-pfc-<on|off>-400g-fct-<size>-leafspine``)::

    python scripts/ns3_reference.py --src /tmp/hpcc --layout leafspine --only 8-on-400g --bytes 4M,16M

``--rng-runs K`` also runs each scenario with ns-3's global ``RngRun`` 2..K
(``NS_GLOBAL_VALUE=RngRun=k``: the random WRED marks differ) and stores the range of their
figures as the record's ``spread`` (:func:`spread_of`), beside the canonical run 1.

Needs Python 2.7 for ns-3.17's waf (``--python2``; pyenv's 2.7.18 here) and g++; GCC >= 6 needs
``-fpermissive -std=gnu++11 -w`` (HPCC's README: "if gcc version > 5, compilation will fail").
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from railab.cli.collective import parse_bytes
from railab.topologies.intent import load_intent
from railab.topologies.qos import DCQCN_PROFILES, QosProfile
from railab.traffic.fluid import ROCE_FRAME_OVERHEAD, FluidParams
from railab.traffic.ns3ref import scenario_name, size_tag
from railab.traffic.packetsim import bdp_bytes

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "ns3"
UPSTREAM = "alibaba-edu/High-Precision-Congestion-Control"

#: The 12 scenarios of issue 44: (senders, PFC on, DCQCN profile).
SCENARIOS: tuple[tuple[int, bool, str], ...] = tuple(
    [(n, pfc, "400g") for n in (2, 4, 8, 16) for pfc in (True, False)]
    + [(n, True, prof) for prof in ("paper", "connectx") for n in (2, 8)])

LINE_BPS = 400_000_000_000
LINK_DELAY_NS = 250           # each hop; data path 2 hops + CNP path 2 hops = 1 us
PAYLOAD = 4096                # railab's MTU payload (FluidParams.from_qos mtu)
START_S = 2.0                 # HPCC's driver starts flows at 2 s by convention (mix/flow.txt)
BIN_US = 50                   # stored time series resolution
FAIR_BIN_US = 100             # bins for the time to within 10 % of the fair share
MMU_RESERVE = 4 * 1024        # switch-mmu.cc SwitchMmu(): reserve per ingress queue, bytes
MMU_PFC_SHIFT = 3             # third.cc: pfc_a_shift 3 (threshold = free shared buffer / 8)
TX_NS = PAYLOAD * 1_000_000_000 * 8 // LINE_BPS  # third.cc CalculateRoute: payload per hop, whole ns


def flow_size(nbytes: int) -> dict:
    """ns-3's flow size for railab's ``--bytes nbytes`` per QP, and the mapping written down.

    railab's load engine sends ``goal = ceil(nbytes / payload)`` packets per QP, each a full
    ``payload`` (4096 B, the MTU's payload; ``traffic/load.py``: ``q.goal``) in a RoCEv2 frame
    of ``ROCE_FRAME_OVERHEAD`` (58) more bytes, so a QP puts ``goal x 4096`` payload bytes on
    the wire. ns-3's flow of ``size`` bytes (``flow.txt``'s 5th field; ``RdmaQueuePair::m_size``)
    is sent in packets of ``PACKET_PAYLOAD_SIZE`` (4096) payload, the last one ``size`` mod 4096
    if shorter (rdma-hw.cc ``GetNxtPacket``), each with ns-3's headers (PPP + IPv4 + UDP +
    SeqTs, 48 B: a 4144-byte frame in its trace). So ``size = goal x 4096``: the same packet
    count and the same payload bytes (16 MiB: 4,096 packets, 16,777,216 B, exactly ``nbytes``);
    the frames differ by railab's 58 against ns-3's 48 header bytes (0.24 % of a frame)."""
    goal = max(1, -(-nbytes // PAYLOAD))
    return {"bytes_per_qp": nbytes, "packets": goal, "payload_bytes": PAYLOAD,
            "flow_size_bytes": goal * PAYLOAD,
            "rule": f"ns-3 flow size = ceil({nbytes:,} / {PAYLOAD}) x {PAYLOAD} = {goal:,} x "
                    f"{PAYLOAD} = {goal * PAYLOAD:,} B (railab's goal packets, each a full "
                    f"{PAYLOAD}-byte payload; frames: railab +{ROCE_FRAME_OVERHEAD} B RoCEv2 "
                    f"headers, ns-3 +48 B PPP/IPv4/UDP/SeqTs)"}

#: ns-3's TraceFormat record (trace-format.h, x86-64 layout: the union is 8-byte aligned).
TRACE_DTYPE = np.dtype([("time", "<u8"), ("node", "<u2"), ("intf", "u1"), ("qidx", "u1"),
                        ("qlen", "<u4"), ("sip", "<u4"), ("dip", "<u4"), ("size", "<u2"),
                        ("l3", "u1"), ("event", "u1"), ("ecn", "u1"), ("ntype", "u1"),
                        ("_p0", "V2"), ("sport", "<u2"), ("dport", "<u2"), ("seq", "<u4"),
                        ("ts", "<u8"), ("pg", "<u2"), ("payload", "<u2"), ("_p1", "V4")])
assert TRACE_DTYPE.itemsize == 56
RECV, ENQU, DEQU = 0, 1, 2
UDP = 0x11


def lab_qos(lab: str = "mini-lossless") -> QosProfile:
    """The QoS profile (ECN, PFC, buffer, DCQCN) of the intent ``lab``, at 400 Gb/s NICs."""
    return load_intent(lab).lab.capacity.qos(400)


def mmu_depths(senders: int, buffer_bytes: int, idle_ports: int) -> tuple[int, int]:
    """The egress queue depth, bytes, at which HPCC's switch pauses (PFC on) and drops (PFC off)
    an N:1 incast, its senders' ingress queues equally full: each ingress queue pauses once its
    shared use reaches ``(buffer - headrooms - reserves - shared used) >> 3`` (switch-mmu.cc
    ``CheckShouldPause``/``GetPfcThreshold``) and, PFC off, drops once its headroom
    (``rate x delay x 3``, third.cc) is full too (``CheckIngressAdmission``)."""
    ports = senders + 1 + idle_ports
    hdrm = LINE_BPS * LINK_DELAY_NS // 8 // 1_000_000_000 * 3
    shared = (buffer_bytes - ports * (hdrm + MMU_RESERVE)) / ((1 << MMU_PFC_SHIFT) + senders)
    pause = senders * (MMU_RESERVE + shared)
    return int(pause), int(pause + senders * hdrm)


def solve_buffer(senders: int, target: int, pfc: bool) -> tuple[int, int, int]:
    """``(BUFFER_SIZE MiB, idle switch ports, depth)``: the ns-3 switch whose pause (PFC on) or
    drop (PFC off) depth of an N:1 incast is nearest railab's ``target`` bytes. HPCC's
    thresholds are per ingress port and dynamic (1/8 of the free buffer), railab's one egress
    depth, so the buffer is chosen per N, and idle ports (which reserve headroom) trim it."""
    best = None
    for mib in range(1, 2048):
        for idle in range(0, 40):
            depth = mmu_depths(senders, mib * 1048576, idle)[0 if pfc else 1]
            if depth <= 0:
                continue
            err = abs(depth - target) / target
            key = (err > 0.005, idle, err)  # within 0.5 %, with as few idle ports as may be
            if best is None or key < best[0]:
                best = (key, (mib, idle, depth))
    return best[1]


#: Variants of a scenario: ``aligned`` sets ns-3's hyper-increase step to R_AI. ns-3's DCQCN
#: has no byte counter, so it reaches hyper increase after F timer steps, where railab (and
#: the paper, Fig. 7) needs both the timer and the byte counter past F; with the ``400g``
#: profile's 100 MB counter railab's senders never get there within 15 ms (a sender sends at
#: most 750 MB in 15 ms, the counter restarts at every cut), so RATE_HAI = RATE_AI is what
#: railab's DCQCN does in that run, in ns-3's terms. It isolates the rest of the comparison.
#: ``windowed`` is HPCC's windowed DCQCN (``HAS_WIN 1``, ``VAR_WIN 0``): DCQCN as the
#: literal mapping plus a per-QP in-flight window of one BDP (:func:`window_bytes`).
VARIANTS = ("", "aligned", "windowed")


def window_bytes(hops: int = 2) -> dict:
    """The window ns-3 gives each QP with ``HAS_WIN 1`` in these scenarios, and how: third.cc
    computes for each host pair ``rtt = 2 x delay + txDelay`` (``delay`` the sum of the path's
    link delays one way, ``txDelay`` the sum over its links of ``PACKET_PAYLOAD_SIZE x 8 / bw``
    in whole ns: ``CalculateRoute``) and ``bdp = rtt x bw / 8`` (bw the path's slowest link);
    with ``GLOBAL_T 1`` every QP gets the largest, ``maxBdp`` (``ScheduleFlowInputs``: the
    ``RdmaClientHelper``'s ``win``). ``RdmaQueuePair::IsWinBound`` stops a QP while ``snd_nxt -
    snd_una`` (payload bytes, unacknowledged) is at least the window (``VAR_WIN 0``: fixed;
    1 would scale it by ``m_rate / m_max_rate``); every ACK (one per packet,
    ``L2_ACK_INTERVAL 1``) advances ``snd_una``."""
    delay = hops * LINK_DELAY_NS
    tx = hops * TX_NS
    rtt = 2 * delay + tx
    bdp = rtt * LINE_BPS // 1_000_000_000 // 8
    return {"bytes": bdp, "rtt_ns": rtt, "delay_ns": delay, "tx_delay_ns": tx,
            "packets_in_flight": -(-bdp // PAYLOAD),
            "formula": f"maxBdp = (2 x {delay} ns + {hops} x {TX_NS} ns) x 400 Gb/s / 8 = "
                       f"{rtt} ns x 50 B/ns = {bdp:,} B (third.cc; GLOBAL_T 1)"}


def mapping(qos: QosProfile, senders: int, pfc: bool, profile: str, fabric_ms: float,
            variant: str = "", nbytes: int | None = None, layout: str = "",
            lab: str = "mini-lossless") -> dict:
    """railab's scenario in HPCC's ``third.cc`` config keys, with each mapping written down:
    ``config`` (key -> value), ``topology`` (buffer, idle ports, implied depths) and ``table``
    (rows: railab name, railab value, ns-3 name, ns-3 value, note; sources in rdma-hw.cc,
    switch-mmu.cc, switch-node.cc, qbb-net-device.cc of the HPCC repository)."""
    d = DCQCN_PROFILES[profile]
    ecn = qos.ecn
    target = qos.pfc_pause_bytes if pfc else qos.capacity.drop_limit_bytes
    mib, idle, depth = solve_buffer(senders, target, pfc)
    rate = str(LINE_BPS)
    kmin_kb, kmax_kb = round(ecn.kmin_bytes / 1000), round(ecn.kmax_bytes / 1000)
    cfg = {"ENABLE_QCN": 1, "USE_DYNAMIC_PFC_THRESHOLD": 1, "PACKET_PAYLOAD_SIZE": PAYLOAD,
           "SIMULATOR_STOP_TIME": f"{START_S + fabric_ms / 1000:.6f}",
           "CC_MODE": 1, "ALPHA_RESUME_INTERVAL": d.alpha_timer_us,
           "RATE_DECREASE_INTERVAL": d.cnp_interval_us, "CLAMP_TARGET_RATE": 1,
           "RP_TIMER": d.rate_timer_us, "EWMA_GAIN": d.g,
           "FAST_RECOVERY_TIMES": d.fast_recovery_steps,
           "RATE_AI": f"{d.ai_rate_mbps:g}Mb/s", "RATE_HAI": f"{d.hai_rate_mbps:g}Mb/s",
           "MIN_RATE": f"{d.min_rate_mbps:g}Mb/s", "DCTCP_RATE_AI": "1000Mb/s",
           "ERROR_RATE_PER_LINK": "0.0000", "L2_CHUNK_SIZE": 4000, "L2_ACK_INTERVAL": 1,
           "L2_BACK_TO_ZERO": 0, "HAS_WIN": 0, "GLOBAL_T": 1, "VAR_WIN": 0, "FAST_REACT": 1,
           "U_TARGET": 0.95, "MI_THRESH": 0, "INT_MULTI": 1, "MULTI_RATE": 0,
           "SAMPLE_FEEDBACK": 0, "PINT_LOG_BASE": 1.05, "PINT_PROB": 1.0, "RATE_BOUND": 1,
           "ACK_HIGH_PRIO": 1, "LINK_DOWN": "0 0 0", "ENABLE_TRACE": 1,
           "KMAX_MAP": f"1 {rate} {kmax_kb}", "KMIN_MAP": f"1 {rate} {kmin_kb}",
           "PMAX_MAP": f"1 {rate} {ecn.pmax_percent / 100:.2f}", "BUFFER_SIZE": mib,
           "QLEN_MON_START": 9_000_000_000, "QLEN_MON_END": 9_000_000_001}
    if variant == "aligned":
        cfg["RATE_HAI"] = cfg["RATE_AI"]
    win = window_bytes()
    if variant == "windowed":
        cfg["HAS_WIN"], cfg["VAR_WIN"] = 1, 0
    t = [
        ("senders -> switch -> receiver", f"{senders}:1", "TOPOLOGY_FILE",
         f"{senders} hosts + receiver + {idle} idle hosts, 1 switch", "idle ports trim the "
         "MMU's pause/drop depth (each reserves headroom); they carry nothing"),
        ("capacity.fabric_rate_gbps", 400, "link DataRate", "400Gbps", "every link"),
        ("FluidParams.base_delay_us", 1.0, "link Delay", f"{LINK_DELAY_NS}ns",
         "2 hops to the receiver + 2 back for the CNP: 1 us plus serialization"),
        ("mtu (payload)", PAYLOAD, "PACKET_PAYLOAD_SIZE", PAYLOAD,
         f"headers: railab {ROCE_FRAME_OVERHEAD} B (RoCEv2), ns-3's UDP/IP/PPP + SeqTs ~48 B"),
        ("ecn.kmin_bytes", ecn.kmin_bytes, "KMIN_MAP (KB)", kmin_kb,
         "switch-mmu.cc ConfigEcn: x1000; both mark on dequeue (switch-node.cc "
         "SwitchNotifyDequeue, railab mark_point)"),
        ("ecn.kmax_bytes", ecn.kmax_bytes, "KMAX_MAP (KB)", kmax_kb, "as Kmin"),
        ("ecn.pmax_percent", ecn.pmax_percent, "PMAX_MAP", ecn.pmax_percent / 100,
         "linear Kmin-Kmax, 1 beyond Kmax (switch-mmu.cc ShouldSendCN) as railab"),
        ("qos.pfc_pause_bytes" if pfc else "capacity.drop_limit_bytes", target,
         "BUFFER_SIZE (MiB) + idle ports", f"{mib} MiB, {idle} idle",
         f"HPCC pauses per ingress port at 1/8 of the free shared buffer (switch-mmu.cc "
         f"GetPfcThreshold; third.cc pfc_a_shift 3); at {senders}:1 that is an egress depth of "
         f"{depth:,} B" + ("" if pfc else " where headroom overflows and it drops")),
        ("capacity.pfc", pfc, "QbbNetDevice::QbbEnabled (NS_ATTRIBUTE_DEFAULT)", pfc,
         "off: hosts ignore PAUSE (qbb-net-device.cc Receive); the MMU drops once headroom fills"),
        ("dcqcn.g", d.g, "EWMA_GAIN", d.g, ""),
        ("dcqcn.alpha_timer_us", d.alpha_timer_us, "ALPHA_RESUME_INTERVAL", d.alpha_timer_us,
         "ns-3 updates alpha once per interval, up if a CNP came in it (rdma-hw.cc "
         "UpdateAlphaMlx); railab raises alpha at each CNP and decays it each period without"),
        ("dcqcn.rate_timer_us", d.rate_timer_us, "RP_TIMER", d.rate_timer_us, ""),
        ("dcqcn.byte_counter_bytes", d.byte_counter_bytes, "-", "none",
         "ns-3's DCQCN has no byte counter: increase events come from the timer only "
         "(rdma-hw.cc RateIncEventTimerMlx)"),
        ("dcqcn.fast_recovery_steps", d.fast_recovery_steps, "FAST_RECOVERY_TIMES",
         d.fast_recovery_steps, "stage < F fast recovery, == F additive, > F hyper "
         "(RateIncEventMlx); railab: max/min of timer and byte-counter steps"),
        ("dcqcn.ai_rate_mbps", d.ai_rate_mbps, "RATE_AI", cfg["RATE_AI"], ""),
        ("dcqcn.hai_rate_mbps", d.hai_rate_mbps, "RATE_HAI", cfg["RATE_HAI"],
         "ns-3 adds R_HAI per hyper step (HyperIncreaseMlx), railab i x R_HAI (paper Fig. 7)"
         + ("; variant 'aligned': R_AI, as railab's senders never pass the byte counter's F "
            "steps here" if variant else "")),
        ("dcqcn.min_rate_mbps", d.min_rate_mbps, "MIN_RATE", cfg["MIN_RATE"], ""),
        ("dcqcn.cnp_interval_us", d.cnp_interval_us, "RATE_DECREASE_INTERVAL",
         d.cnp_interval_us, "railab: the NP sends at most one CNP per QP per interval and the "
         "RP cuts at each; ns-3: the receiver flags CNP on every ACK of a marked packet "
         "(rdma-hw.cc ReceiveUdp) and the RP cuts at most once per interval, on a periodic "
         "check that starts one interval after the first CNP (CheckRateDecreaseMlx)"),
        ("RT = RC at every cut", True, "CLAMP_TARGET_RATE", 1,
         "0 (HPCC's default) keeps RT on a cut right after a cut (CheckRateDecreaseMlx)"),
        ("dcqcn.initial_alpha", d.initial_alpha, "(first CNP)", 1.0,
         "ns-3 sets alpha 1 at the first CNP and starts its timers then (cnp_received_mlx)"),
    ]
    if variant != "windowed":
        t.append(("rate-based DCQCN, no window", True, "HAS_WIN / VAR_WIN", "0 / 0",
                  "HPCC's windowed DCQCN is HAS_WIN 1"))
        t.append(("ACK per packet (none in railab)", "-", "L2_ACK_INTERVAL", 1,
                  "carries the CNP flag; ACKs travel the reverse path, off the congested port"))
    else:
        mine = bdp_bytes(FluidParams.from_qos(qos, senders, pfc=pfc, dcqcn=d, mtu=PAYLOAD))
        t.append(("packetsim.simulate(window_bytes=bdp_bytes(params)): no window in railab's "
                  "lab", mine, "HAS_WIN / VAR_WIN / GLOBAL_T", "1 / 0 / 1",
                  f"windowed DCQCN: a fixed per-QP window of one BDP, {win['formula']}; a QP "
                  f"sends while its unacknowledged payload (snd_nxt - snd_una) is below it "
                  f"(rdma-queue-pair.cc IsWinBound, qbb-net-device.cc RdmaEgressQueue::GetNextQindex): at most "
                  f"{win['packets_in_flight']} packets of {PAYLOAD} B in flight; DCQCN's rate "
                  f"limit applies as well. railab's packetsim.bdp_bytes gives {mine:,} B (the "
                  f"same formula, serialization not rounded to whole ns): "
                  f"{-(-mine // PAYLOAD)} packets"))
        t.append(("packetsim: an ACK per packet with window_bytes", "-", "L2_ACK_INTERVAL", 1,
                  "advances snd_una (opens the window) and carries the CNP flag; ACKs travel "
                  "the reverse path, off the congested port"))
    if nbytes is not None:
        fs = flow_size(nbytes)
        t.append(("--bytes (payload bytes per QP)", nbytes, "flow.txt size (B)",
                  fs["flow_size_bytes"], fs["rule"]))
        t.append(("fct_s: first packet sent to last delivered (--nic none)", "-",
                  "fct.txt (third.cc qp_finish)", "start to last ACK at the sender",
                  "ns-3 completes a QP when the ACK of its last byte reaches the sender "
                  "(rdma-hw.cc ReceiveAck -> QpComplete): its FCT is one ACK trip (2 hops, "
                  "0.5 us here) longer than railab's; the record keeps both: 'fct_us' (ns-3's) and "
                  "'delivered_us' (railab's definition, read from the switch trace)"))
    table = [dict(zip(("railab", "railab_value", "ns3", "ns3_value", "note"), row, strict=True))
             for row in t]
    out = {"config": cfg, "topology": {"buffer_mib": mib, "idle_ports": idle,
                                       "implied_depth_bytes": depth, "target_bytes": target},
           "table": table}
    if variant == "windowed":
        out["window"] = win
    if layout == "leafspine":
        pl = leafspine_plan(senders, target, pfc, lab)
        cfg["BUFFER_SIZE"] = pl["buffer_mib"]
        a = pl["switches"][0]
        out["topology"] = {"layout": "leafspine", "buffer_mib": pl["buffer_mib"],
                           "idle_ports": 1, "implied_depth_bytes": a["implied_depth_bytes"],
                           "target_bytes": target, "switches": pl["switches"]}
        out["leafspine"] = pl
        row = {"railab": f"{pl['placement']['lab']}: {pl['local']} senders on the receiver's "
                         f"leaf, {pl['remote']} behind the spines",
               "railab_value": f"{senders}:1", "ns3": "TOPOLOGY_FILE",
               "ns3_value": f"2 leaves, {SPINES} spines, 1 link per leaf-spine pair, "
                            f"{senders} hosts + receiver + 1 idle host per switch",
               "note": pl["lab_difference"]}
        dep = {"railab": "qos.pfc_pause_bytes" if pfc else "capacity.drop_limit_bytes",
               "railab_value": target, "ns3": "BUFFER_SIZE (MiB) + each switch's idle link delay",
               "ns3_value": f"{pl['buffer_mib']} MiB; " + ", ".join(
                   f"{w['name']} {w['idle_link_delay_ns']} ns" for w in pl["switches"]),
               "note": pl["rule"] + "; implied depths " + ", ".join(
                   f"{w['name']} {w['implied_depth_bytes']:,} B" for w in pl["switches"])}
        ecmp = {"railab": "railab traffic --seed disjoint (each remote flow its own spine link)",
                "railab_value": "-", "ns3": "flow.txt dport of the remote flows",
                "ns3_value": ", ".join(str(e["dport"]) for e in pl["ecmp"]),
                "note": "switch-node.cc GetOutDev: MurmurHash3 of (sip, dip, sport | dport << "
                        "16) seeded with the leaf's node id, mod the next hops; the dports give "
                        "the remote flows distinct next-hop indices at leaf B, and the trace "
                        "says which spine carried each (fabric.remote_spine)"}
        out["table"] = [row, *[r for r in table if r["ns3"] not in (
            "TOPOLOGY_FILE", "BUFFER_SIZE (MiB) + idle ports")], dep, ecmp]
    return out


#: ``--layout leafspine``: the incast as ``railab traffic mini-lossless --pattern incast
#: --senders N`` places it: two leaves, four spines, one 400 Gb/s link per leaf-spine pair.
LAYOUTS = ("", "leafspine")
SPINES = 4
HDRM = LINE_BPS * LINK_DELAY_NS // 8 // 1_000_000_000 * 3   # third.cc: rate x delay x 3, bytes
HDRM_PER_NS = LINE_BPS // 8 // 1_000_000_000 * 3            # the same per ns of link delay: 150


def lab_placement(senders: int, lab: str = "mini-lossless") -> dict:
    """Which of ``railab traffic LAB --pattern incast --senders N``'s senders are on the
    receiver's leaf (``local``) and which behind the spines (``remote``): railab's own
    :func:`railab.traffic.patterns.incast_pairs` on the lab generated from its intent (into a
    scratch directory). mini-lossless: receiver srv1 (g1-leaf1); 8:1 srv2-srv5 local,
    srv9-srv12 on g2-leaf1; 4:1 srv2, srv3 and srv9, srv10."""
    import tempfile

    from railab.topologies.generator import generate
    from railab.topologies.labspec import LabSpec
    from railab.traffic.patterns import incast_pairs
    intent = REPO / "topologies" / "intents" / f"{lab}.yml"
    with tempfile.TemporaryDirectory() as tmp:
        spec = LabSpec.load(generate(intent, Path(tmp) / "ls", name="ls"))
    group = {n.name: n.group for n in spec.nodes}
    pairs = incast_pairs(spec, senders)
    rcv = pairs[0][1][0]
    local = [a[0] for a, _ in pairs if group[a[0]] == group[rcv]]
    remote = [a[0] for a, _ in pairs if group[a[0]] != group[rcv]]
    return {"lab": lab, "receiver": rcv, "local": local, "remote": remote,
            "links_per_leaf_spine_pair_in_lab": getattr(spec, "links_per_leaf_spine_pair", None),
            "how": "railab.traffic.patterns.incast_pairs(spec, N) on the lab generated from "
                   f"topologies/intents/{lab}.yml: senders in the receiver's group are on its "
                   "leaf, the others behind the spines"}


def murmur3_32(words: list[int], seed: int) -> int:
    """MurmurHash3 (x86, 32 bit; Austin Appleby, public domain) of ``words`` (little-endian
    u32s): the hash HPCC's switch (switch-node.cc ``EcmpHash``) applies to ``sip, dip,
    sport | dport << 16`` with the switch's node id as seed to pick a next hop
    (``GetOutDev``: ``hash % nexthops``)."""
    m = 0xFFFFFFFF
    h = seed & m
    for k in words:
        k = (k * 0xCC9E2D51) & m
        k = ((k << 15) | (k >> 17)) & m
        k = (k * 0x1B873593) & m
        h ^= k
        h = ((h << 13) | (h >> 19)) & m
        h = (h * 5 + 0xE6546B64) & m
    h ^= 4 * len(words)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h


def node_ip(node: int) -> int:
    """third.cc ``node_id_to_ip``: 11.0.x.1 from the node id."""
    return 0x0B000001 + (node // 256) * 0x10000 + (node % 256) * 0x100


#: third.cc ScheduleFlowInputs: each host pair's first flow gets source port 10000
FIRST_SPORT = 10000


def ecmp_dports(remote: list[int], receiver: int, leaf: int, spines: int = SPINES) -> list[dict]:
    """Destination ports (``flow.txt``'s 4th field) that put each remote flow on its own spine:
    for each flow the smallest dport from 100 whose hash at the remote leaf (seed: its node id,
    switch-node.cc ``m_ecmpSeed = m_id``) picks a next-hop index no earlier flow took. The
    next-hop list is the spines, one entry each (third.cc ``CalculateRoute``/
    ``SetRoutingEntries``; its order follows third.cc's map of neighbours, so the index names
    a list slot, not a spine: the run's trace says which spine carried which flow)."""
    used: set[int] = set()
    out = []
    for node in remote:
        for dport in range(100, 65536):
            h = murmur3_32([node_ip(node), node_ip(receiver), FIRST_SPORT | dport << 16], leaf)
            if h % spines not in used:
                used.add(h % spines)
                out.append({"sender": node, "sport": FIRST_SPORT, "dport": dport,
                            "hash": h, "nexthop_index": h % spines})
                break
    return out


def free_for(depth: int, congested_in: int, per_egress: int, pfc: bool) -> float:
    """The free shared buffer (``BUFFER_SIZE`` - headrooms - reserves, bytes) at which HPCC's
    switch pauses (PFC on) or drops (off) when an egress queue holds ``depth`` bytes, with
    ``congested_in`` ingress ports filling equally and ``per_egress`` of them feeding that
    queue: each pauses once its shared use reaches (free - shared used) >> 3 (switch-mmu.cc
    ``GetPfcThreshold``), that is free / (8 + congested_in), after its 4 KiB reserve, and drops
    once its headroom is full too. The inverse of :func:`mmu_depths`."""
    per = depth / per_egress - MMU_RESERVE - (0 if pfc else HDRM)
    return per * ((1 << MMU_PFC_SHIFT) + congested_in)


def leafspine_plan(senders: int, target: int, pfc: bool, lab: str = "mini-lossless") -> dict:
    """The leaf-spine topology for ``third.cc`` and how each switch gets railab's depth.

    Nodes: senders 0..N-1 (the local ones first), the receiver N, one idle host per switch
    (N+1: leaf A, N+2: leaf B, N+3..: the spines), then leaf A (the receiver's leaf,
    mini-lossless's g1-leaf1), leaf B (g2-leaf1) and the spines. Links: every host to its
    leaf, one 400 Gb/s 250 ns link per leaf-spine pair; the idle hosts' links carry nothing.

    railab's PFC emulation pauses a switch's upstream neighbours when one of its lossless
    queues holds ``qos.pfc_pause_bytes`` (testbed/pfc.py): one egress depth on every switch.
    HPCC's switch pauses an ingress port at 1/8 of its free shared buffer, which depends on how
    many ingress ports fill. So each switch's free buffer is set for the load it sees in this
    incast: leaf A, N ingress ports (L hosts, R spines) into the receiver's port (the
    one-switch mapping); each spine, one ingress into one egress (its downlink to leaf A);
    leaf B, R ingress ports (its senders) each into its own uplink, filling together (the
    spines are paused by leaf A together). ``BUFFER_SIZE`` is one value for every switch
    (third.cc), so each switch's idle host link has the delay that makes its headroom reserve
    (rate x delay x 3, third.cc) leave that free buffer. PFC off the same with the drop depth
    (``capacity.drop_limit_bytes``; only leaf A's queue builds then)."""
    place = lab_placement(senders, lab)
    L, R = len(place["local"]), len(place["remote"])
    if L + R != senders or R > SPINES:
        raise ValueError(f"leafspine: {senders}:1 places {R} senders behind the spines "
                         f"(at most {SPINES}, one per spine)")
    rcv = senders
    leaf_a, leaf_b = senders + 3 + SPINES, senders + 4 + SPINES
    spines = [leaf_b + 1 + i for i in range(SPINES)]
    # (name, node, lab name, real ports, congested ingress, of them per egress queue)
    sw = [("leafA", leaf_a, "g1-leaf1", L + 1 + SPINES, senders, senders),
          ("leafB", leaf_b, "g2-leaf1", R + SPINES, R, 1)]
    sw += [(f"spine{i + 1}", n, f"spine{i + 1}", 2, 1, 1) for i, n in enumerate(spines)]
    need = {name: free_for(target, k, m, pfc) for name, _n, _l, _p, k, m in sw}
    fixed = {name: (p + 1) * MMU_RESERVE + p * HDRM for name, _n, _l, p, _k, _m in sw}
    mib = -(-int(max(need[x] + fixed[x] + HDRM for x in need)) // 1048576)
    B = mib * 1048576
    switches = []
    for i, (name, node, labname, p, k, m) in enumerate(sw):
        delay = int(round((B - fixed[name] - need[name]) / HDRM_PER_NS))
        free = B - fixed[name] - delay * HDRM_PER_NS
        depth = m * (MMU_RESERVE + free / ((1 << MMU_PFC_SHIFT) + k)) + (0 if pfc else m * HDRM)
        switches.append({"name": name, "node": node, "lab_node": labname, "ports": p + 1,
                         "idle_host": senders + 1 + i, "idle_link_delay_ns": delay,
                         "congested_ingress": k, "ingress_per_queue": m,
                         "free_shared_bytes": int(free), "implied_depth_bytes": int(depth),
                         "target_bytes": target})
    dports = ecmp_dports(list(range(L, senders)), rcv, leaf_b)
    return {"layout": "leafspine", "spines": SPINES, "leaves": 2, "local": L, "remote": R,
            "receiver": rcv, "leaf_a": leaf_a, "leaf_b": leaf_b, "spine_nodes": spines,
            "placement": place, "buffer_mib": mib, "switches": switches, "ecmp": dports,
            "rule": "each switch's free shared buffer gives railab's one egress depth "
                    f"({target:,} B, {'qos.pfc_pause_bytes' if pfc else 'capacity.drop_limit_bytes'}) "
                    "at the load it sees: leaf A N ingress into the receiver's port, each spine "
                    "1 into 1, leaf B R ingress each into its own uplink, filling together; "
                    "BUFFER_SIZE is one for all switches (third.cc), so each switch's idle host "
                    "link delay sets its headroom reserve (rate x delay x 3) to leave that free "
                    "buffer; the idle hosts carry nothing",
            "lab_difference": "mini-lossless has 2 links per leaf-spine pair (8 uplinks a leaf); "
                              "here 1: with --seed disjoint each remote flow has its own spine "
                              "links in the lab, as here, and an idle link carries nothing"}


def write_config(work: Path, mp: dict) -> Path:
    """third.cc's ``config.txt`` in ``work``: the mapping's config keys (``mp["config"]``) and
    the paths of the scenario's input and output files there; returns its path."""
    cfg = dict(mp["config"], TOPOLOGY_FILE=work / "topology.txt", FLOW_FILE=work / "flow.txt",
               TRACE_FILE=work / "trace.txt", TRACE_OUTPUT_FILE=work / "mix.tr",
               FCT_OUTPUT_FILE=work / "fct.txt", PFC_OUTPUT_FILE=work / "pfc.txt",
               QLEN_MON_FILE=work / "qlen.txt")
    path = work / "config.txt"
    path.write_text("".join(f"{k} {v}\n" for k, v in cfg.items()))
    return path


def write_inputs_leafspine(work: Path, senders: int, mp: dict, flow_bytes: int) -> Path:
    """:func:`write_inputs` for ``mp["leafspine"]`` (:func:`leafspine_plan`): every switch is
    traced (its ``TraceFormat`` records name the node and port); the remote flows carry the
    destination ports of :func:`ecmp_dports`."""
    work.mkdir(parents=True, exist_ok=True)
    pl = mp["leafspine"]
    L, n = pl["local"], senders
    la, lb, spines = pl["leaf_a"], pl["leaf_b"], pl["spine_nodes"]
    links = [f"{h} {la} 400Gbps {LINK_DELAY_NS}ns 0" for h in range(L)]
    links.append(f"{n} {la} 400Gbps {LINK_DELAY_NS}ns 0")
    links += [f"{h} {lb} 400Gbps {LINK_DELAY_NS}ns 0" for h in range(L, n)]
    for s in pl["switches"]:
        links.append(f"{s['idle_host']} {s['node']} 400Gbps {s['idle_link_delay_ns']}ns 0")
    links += [f"{leaf} {sp} 400Gbps {LINK_DELAY_NS}ns 0" for leaf in (la, lb) for sp in spines]
    sws = [la, lb, *spines]
    nodes = max(sws) + 1
    (work / "topology.txt").write_text(f"{nodes} {len(sws)} {len(links)}\n"
                                       + " ".join(map(str, sws)) + "\n" + "\n".join(links) + "\n")
    dport = {e["sender"]: e["dport"] for e in pl["ecmp"]}
    flows = [f"{i} {n} 3 {dport.get(i, 100)} {flow_bytes} {START_S}" for i in range(n)]
    (work / "flow.txt").write_text(f"{n}\n" + "\n".join(flows) + "\n")
    (work / "trace.txt").write_text(f"{len(sws)}\n" + " ".join(map(str, sws)) + "\n")
    return write_config(work, mp)


def interfaces(topology: str) -> dict[int, dict[int, int]]:
    """node -> {ifindex: neighbour node} from a ``topology.txt``: third.cc installs one device
    per link in the file's order, each node's numbered from 1 (0 is the loopback)."""
    lines = topology.splitlines()
    out: dict[int, dict[int, int]] = {}
    for line in lines[2:]:
        if not line.strip():
            continue
        a, b = (int(x) for x in line.split()[:2])
        for x, y in ((a, b), (b, a)):
            d = out.setdefault(x, {})
            d[len(d) + 1] = y
    return out


def fabric_figures(work: Path, senders: int, pl: dict) -> dict:
    """The leaf-spine run beyond the receiver's port (computed by ns-3, from its trace of every
    switch and its PFC log): ``paths`` (each sender's data packets leaving each switch port,
    ``switch:port->neighbour``; for a remote sender its ``spine``: the spine that carried its
    packets), ``remote_spines`` (the distinct spines the remote flows took), ``queues`` (each
    switch port's deepest data queue, bytes, with the time, us), ``pauses_received`` (PAUSE
    frames received per node: the senders from their leaf, leaf B's uplinks from the spines,
    the spines from leaf A) and ``drops`` (data packets a switch received and did not enqueue)."""
    tr = read_trace(work / "mix.tr")
    ifs = interfaces((work / "topology.txt").read_text())
    names = {s["node"]: s["name"] for s in pl["switches"]}
    names.update({h: f"sender{h}" for h in range(senders)})
    names[pl["receiver"]] = "receiver"
    for s in pl["switches"]:
        names[s["idle_host"]] = f"idle-{s['name']}"
    data = tr[tr["l3"] == UDP]
    flow = ((data["sip"] >> 8) & 0xFFFF).astype(np.int64)
    t0 = int(START_S * 1e9)
    paths: dict[str, dict[str, int]] = {}
    queues: dict[str, dict] = {}
    drops: dict[str, int] = {}
    for node in sorted(names):
        if node not in {s["node"] for s in pl["switches"]}:
            continue
        at = data["node"] == node
        deq = at & (data["event"] == DEQU)
        for intf in np.unique(data["intf"][at]):
            port = f"{names[node]}:{int(intf)}->{names[ifs[node][int(intf)]]}"
            on = deq & (data["intf"] == intf)
            cnt = np.bincount(flow[on], minlength=senders)
            for h in np.nonzero(cnt)[0]:
                paths.setdefault(f"sender{int(h)}", {})[port] = int(cnt[h])
            qm = at & (data["intf"] == intf) & ((data["event"] == ENQU) | (data["event"] == DEQU))
            if qm.any():
                i = int(data["qlen"][qm].argmax())
                queues[port] = {"peak_bytes": int(data["qlen"][qm][i]),
                                "at_us": round((int(data["time"][qm][i]) - t0) / 1000, 1)}
        rcv = int((at & (data["event"] == RECV)).sum())
        enq = int((at & (data["event"] == ENQU)).sum())
        drops[names[node]] = max(0, rcv - enq)
    spine_names = {names[n] for n in pl["spine_nodes"]}
    remote_spine = {}
    for h in range(pl["local"], senders):
        via = {p.split(":")[0]: c for p, c in paths.get(f"sender{h}", {}).items()
               if p.split(":")[0] in spine_names}
        remote_spine[f"sender{h}"] = max(via, key=via.get) if via else None
    pauses: dict[str, int] = {}
    pf = work / "pfc.txt"
    for line in (pf.read_text().splitlines() if pf.exists() else []):
        _t, node, _ntype, intf, typ = (int(x) for x in line.split())
        if typ == 1:
            key = f"{names.get(node, node)}:{intf}"
            if node in {s["node"] for s in pl["switches"]}:
                key += f"<-{names[ifs[node][intf]]}"
            pauses[key] = pauses.get(key, 0) + 1
    return {"paths": paths, "remote_spine": remote_spine,
            "remote_spines": sorted({v for v in remote_spine.values() if v}),
            "queues": queues, "pauses_received": dict(sorted(pauses.items())), "drops": drops}


def write_inputs(work: Path, senders: int, mp: dict, flow_bytes: int) -> Path:
    """Write ``config.txt``, ``topology.txt``, ``flow.txt``, ``trace.txt`` into ``work``;
    return the config's path. Hosts 0..N-1 send, host N receives, N+1.. are idle, then the
    switch (traced)."""
    work.mkdir(parents=True, exist_ok=True)
    n, idle = senders, mp["topology"]["idle_ports"]
    hosts = n + 1 + idle
    sw = hosts
    links = [f"{h} {sw} 400Gbps {LINK_DELAY_NS}ns 0" for h in range(hosts)]
    (work / "topology.txt").write_text(f"{hosts + 1} 1 {len(links)}\n{sw}\n" + "\n".join(links) + "\n")
    flows = [f"{i} {n} 3 100 {flow_bytes} {START_S}" for i in range(n)]
    (work / "flow.txt").write_text(f"{n}\n" + "\n".join(flows) + "\n")
    (work / "trace.txt").write_text(f"1\n{sw}\n")
    return write_config(work, mp)


def sim_dir(src: Path) -> Path:
    """The ``simulation`` directory of a checkout (or ``src`` itself if it is one)."""
    return src / "simulation" if (src / "simulation" / "wscript").exists() else src


def find_program(sim: Path) -> Path | None:
    """The built ``third`` driver, if any."""
    for cand in sorted((sim / "build" / "scratch").glob("third*")):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def build(sim: Path, python2: str, jobs: int) -> float:
    """Configure and build ns-3 (optimized; point-to-point, internet, applications and their
    dependencies) at nice 19; return the wall time, s (0 when already built)."""
    if find_program(sim) is not None:
        return 0.0
    env = dict(os.environ, CXXFLAGS="-O2 -w -fpermissive -std=gnu++11")
    t0 = time.monotonic()
    subprocess.run(["nice", "-n", "19", python2, "./waf", "configure", "--build-profile=optimized",
                    "--enable-modules=point-to-point,internet,applications", "--disable-python",
                    "--disable-tests", "--disable-examples"], cwd=sim, env=env, check=True)
    subprocess.run(["nice", "-n", "19", python2, "./waf", "build", f"-j{jobs}"], cwd=sim,
                   env=env, check=True)
    return time.monotonic() - t0


def commit_of(src: Path) -> str | None:
    """The checkout's git commit, or the ``NS3_COMMIT`` file beside it, or None."""
    try:
        return subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        f = src / "NS3_COMMIT"
        return f.read_text().strip() if f.exists() else None


def read_trace(path: Path) -> np.ndarray:
    """HPCC's binary trace: a ``SimSetting`` header (u32 count, count x (u16 node, u8 intf,
    u64 bps), u32 window) and then ``TraceFormat`` records."""
    raw = path.read_bytes()
    count = int.from_bytes(raw[:4], "little")
    off = 4 + count * 11 + 4
    body = raw[off:]
    usable = len(body) - len(body) % TRACE_DTYPE.itemsize
    return np.frombuffer(body[:usable], dtype=TRACE_DTYPE)


def analyse(work: Path, senders: int, sw: int, fabric_ms: float) -> dict:
    """The figures of one run, fabric units, over the last half (railab's window): per-flow
    delivered rate and share, utilization, queue depth, PAUSEs, drops; and the time series."""
    tr = read_trace(work / "mix.tr")
    t0 = int(START_S * 1e9)
    end_ns = int(fabric_ms * 1e6)
    data = tr[(tr["node"] == sw) & (tr["l3"] == UDP)]
    rel = data["time"].astype(np.int64) - t0
    flow = ((data["sip"] >> 8) & 0xFFFF).astype(np.int64)
    deq = data["event"] == DEQU
    enq = data["event"] == ENQU
    rcv = data["event"] == RECV
    egress = int(np.bincount(data["intf"][deq]).argmax()) if deq.any() else 0
    port = data["intf"] == egress
    # ns-3 keeps time in whole ns: a 4144-byte frame at 400 Gb/s takes 82.88 ns and is sent in
    # 82 (qbb-net-device.cc TransmitStart: Seconds(CalculateTxTime)), so its ports run ~1 %
    # fast. Shares and utilization are read against the port's real service rate (the most
    # common gap between back-to-back departures), the nominal one is kept beside.
    dtimes = data["time"][deq & port].astype(np.int64)
    gaps = np.diff(dtimes)
    frame = int(np.bincount(data["size"][deq & port]).argmax()) if dtimes.size else 0
    nominal_ns = frame * 8 / LINE_BPS * 1e9
    close = gaps[(gaps > 0) & (gaps < 1.5 * nominal_ns)]
    service_ns = int(np.bincount(close).argmax()) if close.size else nominal_ns
    C = frame * 8 / service_ns * 1e9 if close.size else LINE_BPS
    bins = int(round(fabric_ms * 1000 / BIN_US))
    b = np.clip(rel // (BIN_US * 1000), 0, bins - 1)
    rate = np.zeros((senders, bins))
    m = deq & port
    np.add.at(rate, (flow[m], b[m]), data["size"][m].astype(np.float64))
    rate_gbps = rate * 8 / (BIN_US * 1e-6) / 1e9
    qm = (enq | deq) & port
    qlen = data["qlen"][qm].astype(np.int64)
    qb = b[qm]
    qmax = np.zeros(bins, dtype=np.int64)
    np.maximum.at(qmax, qb, qlen)
    qsum = np.bincount(qb, weights=qlen, minlength=bins)
    qcnt = np.bincount(qb, minlength=bins)
    qmean = np.where(qcnt > 0, qsum / np.maximum(qcnt, 1), 0)
    half = bins // 2
    window_s = (bins - half) * BIN_US * 1e-6
    per_flow = rate[:, half:].sum(axis=1) * 8 / window_s / 1e9
    share = C / 1e9 / senders
    # time to within 10 % of the fair share, as railab's FluidResult.time_to_fair_us
    fb = int(round(fabric_ms * 1000 / FAIR_BIN_US))
    k = FAIR_BIN_US // BIN_US
    fr = rate_gbps[:, :fb * k].reshape(senders, fb, k).mean(axis=2)
    ok = np.all(np.abs(fr - share) <= 0.10 * share, axis=0)
    ttf = None
    if ok[-1]:
        bad = np.nonzero(~ok)[0]
        ttf = 0.0 if bad.size == 0 else float((bad[-1] + 1) * FAIR_BIN_US)
    sent = int((rcv & ~port).sum())
    enqueued = int((enq & port).sum())
    dropped = max(0, sent - enqueued)
    pauses = [0] * senders
    paused_ns = [0] * senders
    since: dict[int, int] = {}
    pf = work / "pfc.txt"
    for line in (pf.read_text().splitlines() if pf.exists() else []):
        tns, node, ntype, _intf, typ = (int(x) for x in line.split())
        if ntype != 0 or node >= senders:
            continue
        tns -= t0
        if typ == 1:
            pauses[node] += 1
            since.setdefault(node, tns)
        elif node in since:
            s = since.pop(node)
            paused_ns[node] += max(0, tns - max(s, end_ns // 2))
    for node, s in since.items():
        paused_ns[node] += max(0, end_ns - max(s, end_ns // 2))
    # each completed flow (third.cc qp_finish: sip, dip, sport, dport, size B, start ns, fct ns,
    # standalone fct ns) and, from the switch trace, when its last data packet reached the
    # receiver: its last departure from the egress port + its serialization (whole ns, as
    # ns-3's TransmitStart) + one link delay (railab's fct_s: to the last packet delivered)
    last_deq: dict[int, tuple[int, int]] = {}
    if m.any():
        fl, tm, sz = flow[m], data["time"][m].astype(np.int64), data["size"][m].astype(np.int64)
        for node in np.unique(fl):
            i = int(np.nonzero(fl == node)[0][-1])
            last_deq[int(node)] = (int(tm[i]), int(sz[i]))
    fct = []
    ff = work / "fct.txt"
    for line in (ff.read_text().splitlines() if ff.exists() else []):
        f = line.split()
        node = (int(f[0], 16) >> 8) & 0xFFFF
        start = int(f[5])
        rec = {"sender": node, "sport": int(f[2]), "size_bytes": int(f[4]),
               "start_ns": start - t0, "fct_ns": int(f[6]), "standalone_fct_ns": int(f[7])}
        if node in last_deq:
            tq, size = last_deq[node]
            rec["delivered_ns"] = tq + size * 8 * 1_000_000_000 // LINE_BPS + LINK_DELAY_NS - start
        fct.append(rec)
    fct.sort(key=lambda r: r["sender"])
    ps = qmax.argmax()
    return {
        "summary": {
            "window_us": [half * BIN_US, bins * BIN_US],
            "utilization": round(float(per_flow.sum() / (C / 1e9)), 4),
            "utilization_nominal": round(float(per_flow.sum() / (LINE_BPS / 1e9)), 4),
            "port_service_gbps": round(C / 1e9, 2), "frame_bytes": frame,
            "per_flow_gbps": [round(float(x), 3) for x in per_flow],
            "ratios": [round(float(x / share), 3) for x in per_flow],
            "queue_bytes": {"mean": int(qmean[half:].mean()), "max": int(qmax[half:].max())},
            "queue_peak_bytes": int(qmax.max()), "queue_peak_at_us": int(ps * BIN_US),
            "time_to_fair_us": ttf, "fair_bin_us": FAIR_BIN_US,
            "pauses_received": sum(pauses), "pauses_per_sender": pauses,
            "paused_fraction": [round(x / (end_ns / 2), 4) for x in paused_ns],
            "packets_sent": sent, "packets_dropped": dropped,
            "dropped_pct": round(100 * dropped / sent, 3) if sent else 0.0,
            "marked_pct": round(100 * float((data["ecn"][m] == 3).mean()), 3) if m.any() else 0.0,
        },
        "series": {"bin_us": BIN_US, "t_us": [int((i + 1) * BIN_US) for i in range(bins)],
                   "rate_gbps": [[round(float(x), 1) for x in row] for row in rate_gbps],
                   "queue_bytes_mean": [int(x) for x in qmean],
                   "queue_bytes_max": [int(x) for x in qmax]},
        "fct": fct,
        "trace_records": int(len(tr)),
    }


def name_of(senders: int, pfc: bool, profile: str, variant: str = "",
            nbytes: int | None = None, layout: str = "") -> str:
    """The stored file's stem: ``incast-<N>-pfc-<on|off>-<profile>[-<variant>]``, a finite-flow
    run ``...-<profile>-fct-<size>`` (:func:`size_tag`: ``-fct-16m``), the leaf-spine layout
    ``...-<profile>-leafspine``."""
    return scenario_name(senders, pfc, profile) + (
        f"-{variant}" if variant else "") + (f"-fct-{size_tag(nbytes)}" if nbytes else "") + (
        f"-{layout}" if layout else "")


def _pct(values: list, q: float):
    """Nearest-rank quantile of sorted ``values`` (railab's ``traffic.load._pct``), None if empty."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, int(round(q * len(values) + 0.5)) - 1))]


def fct_figures(fct: list[dict], senders: int, flow_bytes: int) -> dict:
    """The ``fct_summary`` of a finite-flow run, fabric us (computed by ns-3): ``flows``,
    ``completed`` (flows in ns-3's FCT file: the ACK of their last byte came back before the
    stop time), ``all_completed``; ``delivered_p50_us``/``_p99_us``/``_max_us`` (each flow's
    start to its last data packet's arrival at the receiver, railab's ``fct_s`` definition;
    nearest rank as ``congestion.fct``), ``fct_p50_us``/``_p99_us``/``_max_us`` (ns-3's own FCT,
    to the last ACK at the sender), ``standalone_us`` (ns-3's FCT of the flow alone: base RTT
    + its bytes with headers at the line rate), ``per_flow_delivered_us`` and
    ``per_flow_fct_us`` by sender, ``flow_size_bytes``."""
    dl = sorted(r["delivered_ns"] / 1000 for r in fct if "delivered_ns" in r)
    fc = sorted(r["fct_ns"] / 1000 for r in fct)
    out = {"flows": senders, "completed": len(fct), "all_completed": len(fct) == senders,
           "flow_size_bytes": flow_bytes,
           "standalone_us": round(fct[0]["standalone_fct_ns"] / 1000, 3) if fct else None,
           "per_flow_delivered_us": [round(r["delivered_ns"] / 1000, 3) if "delivered_ns" in r
                                     else None for r in fct],
           "per_flow_fct_us": [round(r["fct_ns"] / 1000, 3) for r in fct]}
    for k, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
        v, w = _pct(dl, q), _pct(fc, q)
        out[f"delivered_{k}_us"] = None if v is None else round(v, 3)
        out[f"fct_{k}_us"] = None if w is None else round(w, 3)
    return out


def execute(sim: Path, prog: Path, work: Path, senders: int, pfc: bool, mp: dict,
            fabric_ms: float, rng_run: int | None = None,
            flow_bytes: int | None = None) -> tuple[dict, float, dict]:
    """Write the inputs into ``work`` (emptied first), run ns-3 (nice 19) and analyse the run:
    ``(analyse()'s figures, wall time s, the environment's ns-3 variables)``. ``rng_run`` sets
    ns-3's global ``RngRun`` (``NS_GLOBAL_VALUE``; ns-3.17's ``RngSeedManager::GetRun``): the
    substream every random variable draws from, among them the WRED mark of each packet between
    Kmin and Kmax (switch-mmu.cc ``ShouldSendCN``: a new ``UniformVariable(0, 1)`` per packet,
    its ``RngStream`` built from the seed, the next stream index and the run). None leaves it
    unset: ns-3's default, run 1 (the stored canonical runs). ``flow_bytes`` (ns-3's flow size,
    :func:`flow_size`) makes the flows finite; None: long flows (1.2 x what the line rate sends
    in ``fabric_ms``: none completes)."""
    if work.exists():
        shutil.rmtree(work)
    if flow_bytes is None:
        flow_bytes = int(LINE_BPS / 8 * fabric_ms / 1000 * 1.2)
    pl = mp.get("leafspine")
    cfg = (write_inputs_leafspine if pl else write_inputs)(work, senders, mp, flow_bytes)
    ns3_env = {"NS_ATTRIBUTE_DEFAULT": f"ns3::QbbNetDevice::QbbEnabled={'true' if pfc else 'false'}"}
    if rng_run is not None:
        ns3_env = {"NS_GLOBAL_VALUE": f"RngRun={rng_run}", **ns3_env}
    env = dict(os.environ, LD_LIBRARY_PATH=str(sim / "build"), **ns3_env)
    if rng_run is None:
        env.pop("NS_GLOBAL_VALUE", None)
    cmd = ["nice", "-n", "19", str(prog), str(cfg)]
    t0 = time.monotonic()
    with open(work / "stdout.txt", "w") as so:
        subprocess.run(cmd, cwd=sim, env=env, stdout=so, stderr=subprocess.STDOUT, check=True)
    wall = time.monotonic() - t0
    if pl:
        res = analyse(work, senders, pl["leaf_a"], fabric_ms)
        res["fabric"] = fabric_figures(work, senders, pl)
        return res, wall, ns3_env
    sw = senders + 1 + mp["topology"]["idle_ports"]
    return analyse(work, senders, sw, fabric_ms), wall, ns3_env


#: The figures of each RngRun kept in a record's ``spread`` (summary keys; small).
SPREAD_KEYS = ("utilization", "ratios", "queue_peak_bytes", "queue_bytes", "pauses_received",
               "dropped_pct", "marked_pct", "time_to_fair_us")


def spread_of(summaries: dict[int, dict], prog: Path, ns3_env: dict, wall_s: float,
              commit: str | None) -> dict:
    """The ``spread`` object of a record: ns-3's own run-to-run range over ``summaries``
    (RngRun -> :func:`analyse`'s summary; run 1 is the canonical, stored ``summary``) with
    ns-3's ``commit``. ``runs``:
    each run's :data:`SPREAD_KEYS`; ``min``/``max``: over the runs, of ``utilization``
    (fraction of the port's service rate), ``queue_peak_bytes`` (bytes, whole run),
    ``ratio_min``/``ratio_max`` (the lowest and highest sender's delivered rate over its fair
    share), ``pauses_received``, ``dropped_pct``, ``marked_pct`` (%); ``ratios_sorted_min``/
    ``_max``: per rank of the sorted shares, the lowest and highest over the runs."""
    runs = [{"rng_run": k, **{key: s[key] for key in SPREAD_KEYS}}
            for k, s in sorted(summaries.items())]
    col = {"utilization": [r["utilization"] for r in runs],
           "queue_peak_bytes": [r["queue_peak_bytes"] for r in runs],
           "ratio_min": [min(r["ratios"]) for r in runs],
           "ratio_max": [max(r["ratios"]) for r in runs],
           "pauses_received": [r["pauses_received"] for r in runs],
           "dropped_pct": [r["dropped_pct"] for r in runs],
           "marked_pct": [r["marked_pct"] for r in runs]}
    ranked = list(zip(*(sorted(r["ratios"]) for r in runs), strict=True))
    env = " ".join(f"{k}={v}" for k, v in ns3_env.items() if k != "NS_GLOBAL_VALUE")
    return {
        "k": len(runs), "rng_runs": [r["rng_run"] for r in runs], "canonical_rng_run": 1,
        "ns3_commit": commit,
        "what": "ns-3's run-to-run spread: the same scenario with ns-3's global RngRun 1..K "
                "(the random WRED marks of switch-mmu.cc ShouldSendCN differ); run 1 is the "
                "stored summary (RngRun unset = 1)",
        "command": f"NS_GLOBAL_VALUE=RngRun=<k> {env} nice -n 19 build/scratch/{prog.name} "
                   "config.txt",
        "generated_by": "scripts/ns3_reference.py --rng-runs",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_s": round(wall_s, 1), "load_avg": os.getloadavg()[0],
        "min": {k: min(v) for k, v in col.items()}, "max": {k: max(v) for k, v in col.items()},
        "ratios_sorted_min": [min(c) for c in ranked], "ratios_sorted_max": [max(c) for c in ranked],
        "runs": runs,
    }


def run_one(sim: Path, prog: Path, work_root: Path, senders: int, pfc: bool, profile: str,
            fabric_ms: float, qos: QosProfile, lab: str, commit: str | None, out: Path,
            keep: bool, variant: str = "", rng_runs: int = 1, nbytes: int | None = None,
            layout: str = "") -> dict:
    """Generate, run (nice 19) and analyse one scenario; write its JSON; return it. With
    ``rng_runs`` K > 1 also run it with ns-3's RngRun 2..K and store their range as the
    record's ``spread`` (:func:`spread_of`); the canonical run (RngRun unset, 1) stays the
    record's ``summary``, and when the stored file's summary is the same the stored record is
    kept as it is (its date, wall time, series) with only ``spread`` added or replaced.
    ``nbytes`` (railab's ``--bytes`` per QP) runs finite flows of :func:`flow_size` bytes: the
    record (``...-fct-<size>``) adds ``bytes_per_qp``, ``flow``  (the mapping) and
    ``fct_summary`` (:func:`fct_figures`) to the long-flow record's fields."""
    mp = mapping(qos, senders, pfc, profile, fabric_ms, variant, nbytes, layout, lab)
    fs = flow_size(nbytes) if nbytes else None
    work = work_root / name_of(senders, pfc, profile, variant, nbytes, layout)
    res, wall, ns3_env = execute(sim, prog, work, senders, pfc, mp, fabric_ms,
                                 flow_bytes=fs["flow_size_bytes"] if fs else None)
    env = ns3_env
    spread = None
    if rng_runs > 1:
        summaries, swall = {1: res["summary"]}, wall
        for k in range(2, rng_runs + 1):
            r, w, _ = execute(sim, prog, work.with_name(f"{work.name}-rng{k}"), senders, pfc, mp,
                              fabric_ms, rng_run=k)
            summaries[k], swall = r["summary"], swall + w
            if not keep:
                (work.with_name(f"{work.name}-rng{k}") / "mix.tr").unlink(missing_ok=True)
        spread = spread_of(summaries, prog, ns3_env, swall, commit)
    path = out / f"{name_of(senders, pfc, profile, variant, nbytes, layout)}.json.gz"
    tag = f"{senders}-{'on' if pfc else 'off'}-{profile}" + (f"-{variant}" if variant else "")
    script = (f"python scripts/ns3_reference.py --src DIR --commit {commit} --layout {layout} "
              f"--only {tag}" + (f" --rng-runs {rng_runs}" if rng_runs > 1 else "")
              + (f" --bytes {size_tag(nbytes).upper()}" if nbytes else "")) if layout else None
    if spread is not None and path.exists():
        with gzip.open(path, "rt") as f:
            old = json.load(f)
        if old["summary"] == json.loads(json.dumps(res["summary"])):
            old["spread"] = spread
            if script:
                old["script_command"] = script
            with gzip.open(path, "wt") as f:
                json.dump(old, f, separators=(",", ":"), sort_keys=True)
            if not keep:
                (work / "mix.tr").unlink(missing_ok=True)
            return old
        print(f"{path.name}: the canonical run differs from the stored one: rewriting it",
              file=sys.stderr)
    rec = {
        "scenario": name_of(senders, pfc, profile, variant, nbytes, layout), "senders": senders, "pfc": pfc,
        **({"layout": layout, "script_command": script} if layout else {}),
        "dcqcn": profile, "variant": variant or None, "lab_qos": lab, "fabric_us": fabric_ms * 1000,
        "source": "ns-3 simulation (computed by HPCC's ns-3 RDMA model, not by railab)",
        "ns3": {"repository": UPSTREAM, "commit": commit, "version": "ns-3.17 (HPCC)",
                "program": "simulation/scratch/third.cc (HPCC's driver, unmodified)",
                "cc_mode": "1 (DCQCN, 'Mellanox's version', rdma-hw.cc)"
                           + (", HAS_WIN 1 VAR_WIN 0 (windowed)" if variant == "windowed" else ""),
                "env": {"NS_ATTRIBUTE_DEFAULT": env["NS_ATTRIBUTE_DEFAULT"]}},
        "command": "NS_ATTRIBUTE_DEFAULT=" + env["NS_ATTRIBUTE_DEFAULT"] + " " + " ".join(
            ["nice", "-n", "19", "build/scratch/" + prog.name, "config.txt"]),
        "generated_by": "scripts/ns3_reference.py",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_s": round(wall, 1), "load_avg": os.getloadavg()[0],
        "params": {"railab": {"qos": json.loads(qos.model_dump_json()),
                              "dcqcn": json.loads(DCQCN_PROFILES[profile].model_dump_json())},
                   "ns3": {k: str(v) for k, v in mp["config"].items()},
                   "topology": mp["topology"], "mapping": mp["table"],
                   **({"leafspine": mp["leafspine"]} if layout else {}),
                   **({"window": mp["window"]} if "window" in mp else {})},
        "inputs": {"topology.txt": (work / "topology.txt").read_text(),
                   "flow.txt": (work / "flow.txt").read_text()},
        **res,
        **({"spread": spread} if spread is not None else {}),
    }
    if fs is not None:
        rec["bytes_per_qp"] = nbytes
        rec["flow"] = fs
        rec["fct_summary"] = fct_figures(res["fct"], senders, fs["flow_size_bytes"])
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / f"{rec['scenario']}.json.gz", "wt") as f:
        json.dump(rec, f, separators=(",", ":"), sort_keys=True)
    if not keep:
        (work / "mix.tr").unlink(missing_ok=True)
    return rec


def find_python2() -> str:
    """A real Python 2.7 interpreter: pyenv's (its ``python2.7`` shim fails unless a 2.7 is
    selected), else the first ``python2.7``/``python2`` on PATH."""
    for cand in sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob(
            "versions/2.7*/bin/python2.7"), reverse=True):
        return str(cand)
    return shutil.which("python2.7") or shutil.which("python2") or "python2"


def main() -> int:
    """Parse the arguments, build if needed, run the scenarios, write the JSON files."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True, type=Path, help="a work tree of " + UPSTREAM)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ns3-railab-runs"))
    ap.add_argument("--fabric-ms", type=float, default=15.0)
    ap.add_argument("--lab", default="mini-lossless", help="intent whose QoS to use")
    ap.add_argument("--only", default="", help="comma list of N-on|off-profile, e.g. 2-on-400g")
    ap.add_argument("--python2", default=find_python2(), help="Python 2.7 for ns-3.17's waf")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--commit", default=None, help="the checkout's commit if not a git tree")
    ap.add_argument("--keep-trace", action="store_true")
    ap.add_argument("--verify", action="store_true", help="rerun into a scratch directory and "
                    "compare each run's summary with the stored file (ns-3 is deterministic: "
                    "its random marks come from fixed seeds); exit 1 on a difference")
    ap.add_argument("--rng-runs", type=int, default=1, metavar="K",
                    help="also run each scenario with ns-3's RngRun 2..K (NS_GLOBAL_VALUE) and "
                    "store the range of their figures as the record's 'spread' (run 1, the "
                    "stored summary, unchanged)")
    ap.add_argument("--bytes", default="", help="comma list of bytes per QP, e.g. 4M,16M (railab's "
                    "--bytes): run the selected plain scenarios as finite flows and store their "
                    "flow completion times (incast-<N>-pfc-<on|off>-<profile>-fct-<size>)")
    ap.add_argument("--layout", default="one-switch", choices=("one-switch", "leafspine"),
                    help="one-switch (N senders, a switch, the receiver) or leafspine (the lab "
                    "mini-lossless's incast: the senders on the receiver's leaf and on another "
                    "leaf behind 4 spines, each remote flow on its own spine; plain variant "
                    "only; stored as ...-<profile>-leafspine)")
    a = ap.parse_args()
    layout = "" if a.layout == "one-switch" else a.layout
    sizes = [parse_bytes(x.strip()) for x in a.bytes.split(",") if x.strip()]
    if sizes and a.rng_runs > 1:
        ap.error("--rng-runs is for the long-flow runs: drop it with --bytes")
    sim = sim_dir(a.src.resolve())
    bwall = build(sim, a.python2, a.jobs)
    prog = find_program(sim)
    if prog is None:
        print("error: no build/scratch/third after the build", file=sys.stderr)
        return 1
    if bwall:
        print(f"built in {bwall:.0f} s")
    commit = a.commit or commit_of(a.src)
    qos = lab_qos(a.lab)
    want = {s.strip() for s in a.only.split(",") if s.strip()}
    out = a.work / "verify" if a.verify else a.out
    differ = 0
    total = time.monotonic()
    runs = [(n, pfc, prof, "") for n, pfc, prof in SCENARIOS]
    runs += [(n, pfc, prof, var) for var in ("aligned", "windowed")
             for n, pfc, prof in SCENARIOS if prof == "400g"]
    if sizes:  # finite flows: the plain scenarios only, once per size
        runs = [(n, pfc, prof, "", b) for n, pfc, prof, var in runs if not var for b in sizes]
    else:
        runs = [(*r, None) for r in runs]
    if layout:
        runs = [r for r in runs if not r[3] and r[2] == "400g" and r[0] <= 2 * SPINES]
    for n, pfc, prof, var, nb in runs:
        tag = f"{n}-{'on' if pfc else 'off'}-{prof}" + (f"-{var}" if var else "")
        if want and tag not in want:
            continue
        rec = run_one(sim, prog, a.work, n, pfc, prof, a.fabric_ms, qos, a.lab, commit, out,
                      a.keep_trace, var, a.rng_runs, nb, layout)
        if a.verify:
            path = a.out / f"{rec['scenario']}.json.gz"
            keys = ("summary", "fct_summary") if nb else ("summary",)
            old = ({k: json.load(gzip.open(path, "rt"))[k] for k in keys} if path.exists()
                   else None)
            same = old == json.loads(json.dumps({k: rec[k] for k in keys}))
            differ += not same
            print(f"{rec['scenario']}: {'same as stored' if same else 'DIFFERS from stored'}")
        s = rec["summary"]
        print(f"{rec['scenario']}: {rec['wall_s']:.0f} s wall, port {s['utilization']:.1%}, "
              f"shares {min(s['ratios']):.2f}-{max(s['ratios']):.2f}, queue peak "
              f"{s['queue_peak_bytes']:,} B, pauses {s['pauses_received']}, drops "
              f"{s['dropped_pct']:.2f} %", flush=True)
        if (fs := rec.get("fct_summary")) is not None:
            print(f"  {fs['completed']} of {fs['flows']} flows of {fs['flow_size_bytes']:,} B "
                  f"completed: delivered p50/p99/max {fs['delivered_p50_us']}/"
                  f"{fs['delivered_p99_us']}/{fs['delivered_max_us']} us, ns-3's FCT "
                  f"{fs['fct_p50_us']}/{fs['fct_p99_us']}/{fs['fct_max_us']} us (standalone "
                  f"{fs['standalone_us']} us)", flush=True)
        if (fb := rec.get("fabric")) is not None:
            print(f"  remote flows via {fb['remote_spine']}; PAUSEs received "
                  f"{fb['pauses_received']}; queue peaks (bytes) "
                  + ", ".join(f"{k} {v['peak_bytes']:,}" for k, v in fb["queues"].items()
                              if v["peak_bytes"] > 0), flush=True)
        if a.rng_runs > 1 and (sp := rec.get("spread")):
            lo, hi = sp["min"], sp["max"]
            print(f"  RngRun 1-{sp['k']}: {sp['wall_s']:.0f} s wall, port "
                  f"{lo['utilization']:.1%}-{hi['utilization']:.1%}, shares "
                  f"{lo['ratio_min']:.2f}-{hi['ratio_max']:.2f}, queue peak "
                  f"{lo['queue_peak_bytes']:,}-{hi['queue_peak_bytes']:,} B", flush=True)
    print(f"all scenarios: {time.monotonic() - total:.0f} s wall")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
