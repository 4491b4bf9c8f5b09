"""A per-packet reference for an N:1 incast: the same DCQCN reaction point, notification point,
WRED/ECN queue and PFC as the lab, simulated packet by packet with random marks.

The fluid model (:mod:`railab.traffic.fluid`) gives the *expected* rates: its flows are means,
so it cannot say how far one sender strays from its share in one run. Which sender's packets a
WRED queue marks is random (each packet with probability ``p(q)``), and DCQCN turns those few
marks (one CNP per QP per 50 us at most) into cuts of ``alpha/2`` and, for the senders that
escape them long enough, hyper increase. This module runs that process as a discrete-event
simulation in fabric time, several times with different seeds, so that a load run's per-flow
spread has a reference too.

What is simulated (each piece is the lab's, not a new rule):

* senders: one :class:`railab.traffic.load.DcqcnRP` per flow (Zhu et al., SIGCOMM 2015,
  section 3 and Fig. 7), in fabric units, starting at line rate; each paces its packets at its
  current rate with the lab engine's uniform +-50 % gap jitter (mean exact);
* the bottleneck: one FIFO served at the line rate; a packet is marked CE as it **leaves** the
  queue with WRED's probability at the depth behind it (Kmin/Kmax/Pmax; ASICs and the lab's
  switches mark on dequeue: :func:`railab.testbed.capacity.mark_point`), or as it enters, at
  the depth in front of it, with ``mark_at_enqueue``; with PFC on, the
  senders are paused at ``pause_bytes`` and resumed under ``resume_bytes`` (the lab's
  xOFF/xON hysteresis); with PFC off a packet that does not fit ``buffer_bytes`` is dropped;
* the receiver: :class:`railab.traffic.load.CnpPacer` (at most one CNP per QP per
  ``cnp_interval_us``, the paper's NP), the CNP reaching the sender ``base_delay_us`` after
  the marked packet left the queue (half each way);
* optionally (``simulate(..., window_bytes=W)``) a per-QP in-flight window as HPCC's ns-3
  "windowed DCQCN" (``HAS_WIN 1``): the receiver acknowledges every data packet, the ACK
  reaching the sender on the CNP's path and timing, and a sender whose unacknowledged bytes
  reach ``W`` waits for an ACK; :func:`bdp_bytes` gives ns-3's window of one BDP;
* optionally (``simulate(..., mark_period_us=P, mark_delay_us=D)``) **the lab's marking
  cadence** instead of WRED on the instantaneous depth: the lab's switch agent
  (:mod:`railab.testbed.pfc`) reads each port's depth once per cycle and writes the WRED
  probability of that depth into the nft set the marks draw from, where it takes effect a
  write later; here the depth is read every ``P`` (first read at a random phase) and its
  probability marks the packets leaving from ``D`` after the read until the next one takes
  effect (issue 44: why the emulation's 2:1 incast sits under ns-3's, docs/congestion.md);
* optionally (``simulate(..., series_bin_us=50)``) the run's time series: each flow's bytes
  leaving the queue and the queue depth per bin, as ``scripts/ns3_reference.py`` reads ns-3's
  trace (``PacketRun.series``; ``scripts/ns3_plots.py`` draws them beside ns-3's).

Figures are **computed** (model), in fabric units; :func:`spread` runs it ``runs`` times.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import multiprocessing
import os
import signal
import sys
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy
from scipy.stats import binomtest

from railab.testbed.state import cache_dir
from railab.topologies.atomicfile import write_atomic
from railab.topologies.qos import DcqcnProfile, QosProfile
from railab.traffic import fluid, load
from railab.traffic.fluid import ROCE_FRAME_OVERHEAD, FluidParams
from railab.traffic.load import CnpPacer, DcqcnRP, Ns3MlxRP

#: Seeds :func:`spread` uses by default (fixed, so a reference is reproducible). Forty: "every
#: sender within 15 % in k of n runs" is the reference's estimate of how often DCQCN itself meets
#: the steady-state check, and at 2:1 that is a tail of a few per cent. With the ``400g`` profile
#: on mini-lossless, PFC on, 15 ms: 2:1 misses it in 11 of 120 seeds (1-80 and 101-140; worst
#: 0.70-1.29), seeds 1-20 in none of them (so a reference of those 20 said "20 of 20" where DCQCN
#: meets it about nine times in ten); 4:1 and 8:1 meet it in every seed tried (2026-12-05).
#: 40 runs of a 15 ms incast take ~10 s on 2 cores (:func:`spread` uses every core).
DEFAULT_SEEDS = tuple(range(1, 41))

#: Confidence of the interval on the share of fair runs (:func:`fair_rate`).
CONFIDENCE = 0.95


@dataclass
class PacketRun:
    """One simulated incast: per-flow delivered rate over the window (``per_flow_gbps``,
    fabric Gb/s), ``ratios`` (each over the fair share ``C/N``), ``utilization`` (delivered /
    C over the window), ``dropped_pct`` (% of the packets sent, the whole run), ``hyper``,
    ``cuts`` (per flow), ``queue_max_bytes``, ``pause_fraction`` (share of the window with the
    senders paused), ``fabric_us``, ``window_us``, ``pauses`` (xOFF events, the whole run),
    ``window_bytes`` (the in-flight window, None without one) and ``series`` (None unless
    ``simulate(series_bin_us=...)`` asked for it)."""

    per_flow_gbps: list[float]
    ratios: list[float]
    utilization: float
    dropped_pct: float
    hyper: list[int]
    cuts: list[int]
    queue_max_bytes: int
    pause_fraction: float
    fabric_us: float
    window_us: tuple[float, float]
    seed: int
    #: PFC xOFF events of the port over the whole run; each pauses every sender (a PAUSE frame
    #: to each: ``pauses x senders`` counts as ns-3's ``pauses_received`` does, but with this
    #: model's one egress threshold and two-frame xOFF/xON hysteresis, not ns-3's).
    pauses: int = 0
    #: The in-flight window the run used (payload bytes per QP), None: rate-based only.
    window_bytes: int | None = None
    #: The run's time series in bins of ``bin_us`` over the whole run (``simulate(series_bin_us=
    #: ...)``; None otherwise): ``t_us`` (each bin's end, fabric us), ``delivered_bytes`` (per
    #: flow, per bin: frame bytes leaving the queue, as ns-3's trace is read), ``queue_bytes_max``
    #: and ``queue_bytes_mean`` (the depth after each enqueue and dequeue in the bin: its largest
    #: and its mean over those events, 0 in a bin without one).
    series: dict | None = None


def _rp_args(p: FluidParams) -> dict:
    """The arguments both reaction points take, from ``p`` (fabric time: bits/s, s)."""
    return dict(g=p.g, alpha_timer_s=p.alpha_timer_us * 1e-6, rate_timer_s=p.rate_timer_us * 1e-6,
                fast_recovery_steps=p.fast_recovery_steps, rai_bps=p.ai_rate_mbps * 1e6,
                rhai_bps=p.hai_rate_mbps * 1e6, min_bps=p.min_rate_mbps * 1e6)


def _ns3_rp(p: FluidParams) -> Ns3MlxRP:
    """HPCC ns-3's reaction point (:class:`railab.traffic.load.Ns3MlxRP`) with ``p``'s numbers."""
    return Ns3MlxRP(p.line_gbps * 1e9, cnp_interval_s=p.cnp_interval_us * 1e-6, **_rp_args(p))


def _rp(p: FluidParams) -> DcqcnRP:
    """railab's (the paper's) reaction point (:class:`DcqcnRP`) with ``p``'s numbers."""
    return DcqcnRP(p.line_gbps * 1e9, byte_counter=p.byte_counter_bytes,
                   initial_alpha=p.initial_alpha, **_rp_args(p))


def payload_bytes(params: FluidParams) -> int:
    """The payload of one of ``params``' packets, bytes: ``frame_bytes`` less RoCEv2's
    headers (:data:`railab.traffic.fluid.ROCE_FRAME_OVERHEAD`, 58 B), as
    :meth:`FluidParams.from_qos` built it from the MTU."""
    return params.frame_bytes - ROCE_FRAME_OVERHEAD


def bdp_bytes(params: FluidParams, *, hops: int = 2) -> int:
    """One bandwidth-delay product of ``params``, bytes: the line rate times the base RTT
    including the data packet's serialization, the window HPCC's ns-3 gives a windowed QP.

    ``bdp = C x (base_delay + hops x payload x 8 / C) / 8``, with ``C`` the line rate (bits/s),
    ``base_delay`` railab's ``base_delay_us`` (the loop's propagation: out to the receiver and
    back, ns-3's ``2 x`` the one-way link delays) and ``hops`` the links of the data path (2:
    sender-switch, switch-receiver), each serializing one payload (:func:`payload_bytes`).
    This is ``third.cc``'s (alibaba-edu/High-Precision-Congestion-Control, ``simulation/
    scratch/third.cc``: ``rtt = delay x 2 + txDelay`` with ``txDelay`` the sum over the path's
    links of ``packet_payload_size x 8 / bw`` in whole ns, ``bdp = rtt x bw / 8``; with
    ``GLOBAL_T 1`` every QP gets the largest, ``maxBdp``). At 400 Gb/s, 1 us and 4096 B:
    ``50,000 + 2 x 4,096 = 58,192`` B; ns-3's whole-ns serialization (81 ns, not 81.92) gives
    58,100 B. The ACKs' serialization is not in it (as in ns-3). Raises ValueError for
    ``hops`` < 0."""
    if hops < 0:
        raise ValueError("bdp_bytes: hops must be >= 0")
    line = params.line_gbps * 1e9
    rtt = params.base_delay_us * 1e-6 + hops * payload_bytes(params) * 8 / line
    return int(line * rtt / 8)


def simulate(params: FluidParams, fabric_us: float = 15_000.0, *, seed: int = 1,
             resume_bytes: int | None = None, jitter: float = 0.5,
             rp: str = "railab", window_bytes: int | None = None,
             series_bin_us: float | None = None, mark_period_us: float | None = None,
             mark_delay_us: float = 0.0, nic_backlog_bytes: int = 0) -> PacketRun:
    """Simulate ``params.senders`` DCQCN senders into one port for ``fabric_us`` (fabric us),
    packet by packet, and read the last half. ``resume_bytes`` is the PFC resume depth
    (default: ``pause_bytes`` less two frames); ``jitter`` the senders' gap jitter (0.5: gaps
    uniform in [0.5, 1.5] x the paced gap). ``rp``: ``"railab"`` (the lab's
    :class:`DcqcnRP` and :class:`CnpPacer`) or ``"ns3"`` (:class:`Ns3MlxRP` and a CNP per
    marked packet, HPCC's ns-3 DCQCN: for comparisons with its stored results,
    :mod:`railab.traffic.ns3ref`).

    ``window_bytes`` (payload bytes, :func:`payload_bytes` a packet; None: no window, the
    rate-based DCQCN of the paper) bounds each QP's unacknowledged bytes, as HPCC's ns-3 with
    ``HAS_WIN 1``, ``VAR_WIN 0`` (``RdmaQueuePair::IsWinBound``: a QP whose ``snd_nxt -
    snd_una`` is at least the window does not send; :func:`bdp_bytes` is its window): the
    receiver acknowledges every data packet (ns-3's ``L2_ACK_INTERVAL 1``), the ACK reaching
    the sender ``base_delay_us`` after the packet left the queue, the CNP's path (half to the
    receiver, half back, off the congested port); a sender that finds its window full at a
    paced send waits and sends at the ACK that opens it (still paced by its DCQCN rate
    afterwards). packetsim does not retransmit: a packet dropped (PFC off) leaves the window
    as its ACK would, ``base_delay_us`` after the drop (ns-3 would NACK it and go back N).
    The CNPs are unchanged (the lab's paced NP, or with ``rp="ns3"`` one per marked packet,
    which ns-3 carries on the ACK: the same time).

    ``series_bin_us`` (fabric us; None: not recorded) records ``PacketRun.series``: per bin,
    each flow's frame bytes leaving the queue and the queue depth (max and mean over the
    enqueue and dequeue events), the figures ``scripts/ns3_reference.py`` reads from ns-3's
    trace every 50 us. Recording draws no random number and schedules no event: every other
    figure is the same with it as without.

    ``mark_period_us`` (fabric us; None: WRED on the depth each packet leaves behind, as a
    switch ASIC and ns-3 mark) and ``mark_delay_us`` (fabric us, >= 0) give the lab's marking
    cadence (module docstring): the depth read every ``mark_period_us``, its WRED probability
    in effect ``mark_delay_us`` after the read. The lab's figures: the agent's cycle while
    busy is ``pfc.json``'s ``mean_busy_cycle_s`` (2.1 lab ms on ``mini-lossless``: 1.06 us at
    its time scale of 2,000) and a set write through ``nft -i`` ~0.9 lab ms after a read of the
    8 switches' backlogs that takes ~1.1 (docs/congestion.md, "ECN/WRED: marks from the real
    queue depth"). Dequeue marking only.

    ``nic_backlog_bytes`` (bytes, >= 0; 0: none) is an ablation of the sender NIC under PFC:
    a PAUSEd sender keeps pacing into its NIC's queue, up to this many bytes, and that backlog
    reaches the port at the line rate on RESUME, each NIC sending at most the line rate
    afterwards. That was the lab's load engine until 2026-12-07 (its NIC send buffer, ~100
    frames); with 0 a paused sender holds until RESUME, as a NIC's scheduler, ns-3 and the lab
    since (:class:`railab.testbed.pfc.NicPauseBoard`) do.

    Raises ValueError for a non-positive duration or bin, an unknown ``rp``, a window below one
    packet's payload, a non-positive ``mark_period_us``, a negative ``mark_delay_us``, a
    marking cadence with ``params.mark_at_enqueue``, or a negative ``nic_backlog_bytes`` or one
    with a window."""
    if fabric_us <= 0:
        raise ValueError("packetsim: the run must last a positive fabric time")
    if rp not in ("railab", "ns3"):
        raise ValueError(f"packetsim: rp must be 'railab' or 'ns3' (got {rp!r})")
    if window_bytes is not None and (payload_bytes(params) <= 0
                                     or window_bytes < payload_bytes(params)):
        raise ValueError(f"packetsim: window_bytes must be at least one packet's payload "
                         f"({payload_bytes(params)} B), got {window_bytes}")
    if series_bin_us is not None and not series_bin_us > 0:
        raise ValueError(f"packetsim: series_bin_us must be positive, got {series_bin_us}")
    if mark_period_us is not None and not mark_period_us > 0:
        raise ValueError(f"packetsim: mark_period_us must be positive, got {mark_period_us}")
    if not mark_delay_us >= 0:
        raise ValueError(f"packetsim: mark_delay_us must be 0 or more, got {mark_delay_us}")
    if nic_backlog_bytes < 0 or (nic_backlog_bytes and window_bytes is not None):
        raise ValueError(f"packetsim: nic_backlog_bytes must be 0 or more, without a window "
                         f"(got {nic_backlog_bytes}, window {window_bytes})")
    if mark_period_us is not None and params.mark_at_enqueue:
        raise ValueError("packetsim: the lab's marking cadence (mark_period_us) is a dequeue "
                         "marking; drop mark_at_enqueue or mark_period_us")
    p = params
    rng = np.random.default_rng(seed)
    n, size = p.senders, p.frame_bytes
    line = p.line_gbps * 1e9
    tx_time = size * 8 / line
    end = fabric_us * 1e-6
    frm = end / 2
    half = p.base_delay_us * 1e-6 / 2
    kmin, kmax, pmax = p.kmin_bytes, p.kmax_bytes, p.pmax

    def wred(depth: int) -> float:  # WRED's marking probability at ``depth`` (above Kmin)
        return 1.0 if depth >= kmax else pmax * (depth - kmin) / (kmax - kmin)

    enqueue = p.mark_at_enqueue
    pause_at = p.pause_bytes
    resume_at = resume_bytes if resume_bytes is not None else max(0, pause_at - 2 * size)
    rps = [_rp(p) if rp == "railab" else _ns3_rp(p) for _ in range(n)]
    # the paper's NP paces CNPs per QP; ns-3's sends one for every marked packet (interval 0)
    pacer = CnpPacer(p.cnp_interval_us * 1e-6 if rp == "railab" else 0.0)
    rx = [0] * n
    sent = dropped = pauses = 0
    windowed = window_bytes is not None
    payload = payload_bytes(p)
    in_flight = [0] * n      # unacknowledged payload bytes per QP (window only)
    blocked = [False] * n    # a QP waiting for an ACK to open its window
    queue: deque[int] = deque()  # 2 x flow + CE of each queued packet, FIFO
    qbytes = qmax = 0
    busy = paused = False
    paused_since = paused_total = 0.0
    waiting: list[int] = []
    nicq = [0] * n           # packets queued in a paused sender's NIC (nic_backlog_bytes)
    nic_free = [0.0] * n     # when each sender NIC's link is free again (nic_backlog_bytes)
    ev: list[tuple[float, int, int, int]] = []  # (time, seq, kind, flow)
    seq = 0
    SEND, ARRIVE, DEPART, CNP, ACK, READ, APPLY = 0, 1, 2, 3, 4, 5, 6
    cadence = mark_period_us is not None
    if cadence:  # the agent's reads of the depth, and the probabilities they wrote, in order
        read_s, write_s = mark_period_us * 1e-6, mark_delay_us * 1e-6
        in_effect = 0.0
        written: deque[float] = deque()
    rec = series_bin_us is not None
    if rec:  # the time series: per bin, bytes leaving per flow and the depth at each event
        nbins = max(1, int(np.ceil(fabric_us / series_bin_us - 1e-9)))
        per_bin = 1e6 / series_bin_us      # bins per second
        s_out = [[0] * nbins for _ in range(n)]   # plain lists: cheaper per event than numpy
        s_qmax = [0] * nbins
        s_qsum = [0] * nbins
        s_qcnt = [0] * nbins
    for i in range(n):
        seq += 1
        heapq.heappush(ev, (rng.uniform(0, tx_time), seq, SEND, i))
    if cadence:
        seq += 1
        heapq.heappush(ev, (rng.uniform(0, read_s), seq, READ, -1))
    while ev:
        t, _, kind, i = heapq.heappop(ev)
        if t > end:
            break
        if kind == SEND:
            if paused and (nicq[i] + 1) * size > nic_backlog_bytes:
                waiting.append(i)
                continue
            if windowed:
                if in_flight[i] >= window_bytes:
                    blocked[i] = True  # the ACK that opens the window sends again
                    continue
                in_flight[i] += payload
            rp = rps[i]
            rp.tick(t)
            rp.on_sent(size)
            sent += 1
            if paused:  # into the paused NIC's queue (the ablation): it leaves on RESUME
                nicq[i] += 1
            elif nic_backlog_bytes:  # the NIC's link: one frame at a time, behind its backlog
                seq += 1
                leave = max(t, nic_free[i])
                nic_free[i] = leave + tx_time
                heapq.heappush(ev, (leave + half, seq, ARRIVE, i))
            else:
                seq += 1
                heapq.heappush(ev, (t + half, seq, ARRIVE, i))
            gap = size * 8 / rp.rc
            if jitter:
                gap *= rng.uniform(1 - jitter, 1 + jitter)
            seq += 1
            heapq.heappush(ev, (t + gap, seq, SEND, i))
        elif kind == ARRIVE:
            if not p.pfc and qbytes + size > p.buffer_bytes:
                dropped += 1
                if windowed:  # no retransmission: it leaves the window as its ACK would
                    seq += 1
                    heapq.heappush(ev, (t + 2 * half, seq, ACK, i))
                continue
            marked = 0
            if enqueue and qbytes > kmin:  # WRED on enqueue, at the depth in front of it
                marked = int(rng.random() < wred(qbytes))
            queue.append(2 * i + marked)
            qbytes += size
            qmax = max(qmax, qbytes)
            if rec:
                b = min(int(t * per_bin), nbins - 1)
                if qbytes > s_qmax[b]:
                    s_qmax[b] = qbytes
                s_qsum[b] += qbytes
                s_qcnt[b] += 1
            if p.pfc and not paused and qbytes >= pause_at:
                paused, paused_since = True, t
                pauses += 1
            if not busy:
                busy = True
                seq += 1
                heapq.heappush(ev, (t + tx_time, seq, DEPART, -1))
        elif kind == DEPART:
            f, marked = divmod(queue.popleft(), 2)
            qbytes -= size
            if t >= frm:
                rx[f] += size
            if rec:
                b = min(int(t * per_bin), nbins - 1)
                s_out[f][b] += size
                if qbytes > s_qmax[b]:  # a bin with departures only (senders held) has a depth
                    s_qmax[b] = qbytes
                s_qsum[b] += qbytes
                s_qcnt[b] += 1
            if cadence:  # the probability of the depth the agent read last (in effect)
                marked = int(in_effect > 0 and rng.random() < in_effect)
            elif not enqueue and qbytes > kmin:  # WRED on dequeue, at the depth behind it
                marked = int(rng.random() < wred(qbytes))
            if windowed:  # the receiver acknowledges every packet, half there, half back
                seq += 1
                heapq.heappush(ev, (t + 2 * half, seq, ACK, f))
            if marked and pacer.due(f, t + half):
                seq += 1
                heapq.heappush(ev, (t + 2 * half, seq, CNP, f))
            if paused and qbytes <= resume_at:
                paused = False
                paused_total += t - max(paused_since, frm) if t > frm else 0.0
                for w in range(n):  # the paused NICs' backlogs leave at the line rate
                    for k in range(nicq[w]):
                        seq += 1
                        heapq.heappush(ev, (t + k * tx_time + half, seq, ARRIVE, w))
                    if nicq[w]:
                        nic_free[w] = t + nicq[w] * tx_time
                        nicq[w] = 0
                for w in waiting:
                    seq += 1
                    heapq.heappush(ev, (max(t, nic_free[w]), seq, SEND, w))
                waiting.clear()
            if queue:
                seq += 1
                heapq.heappush(ev, (t + tx_time, seq, DEPART, -1))
            else:
                busy = False
        elif kind == READ:
            written.append(wred(qbytes) if qbytes > kmin else 0.0)
            seq += 1
            heapq.heappush(ev, (t + write_s, seq, APPLY, -1))
            seq += 1
            heapq.heappush(ev, (t + read_s, seq, READ, -1))
        elif kind == APPLY:
            in_effect = written.popleft()
        elif kind == ACK:
            in_flight[i] -= payload
            if blocked[i] and in_flight[i] < window_bytes:
                blocked[i] = False
                seq += 1
                heapq.heappush(ev, (t, seq, SEND, i))
        else:  # CNP
            rps[i].tick(t)
            rps[i].on_cnp(t)
    if paused:
        paused_total += end - max(paused_since, frm)
    window = end - frm
    per_flow = [b * 8 / window / 1e9 for b in rx]
    share = p.line_gbps / n
    series = None
    if rec:
        series = {"bin_us": series_bin_us,
                  "t_us": [round((k + 1) * series_bin_us, 6) for k in range(nbins)],
                  "delivered_bytes": s_out, "queue_bytes_max": s_qmax,
                  "queue_bytes_mean": [round(a / c) if c else 0
                                       for a, c in zip(s_qsum, s_qcnt, strict=True)]}
    return PacketRun(per_flow_gbps=[round(x, 3) for x in per_flow],
                     ratios=[round(x / share, 3) for x in per_flow],
                     utilization=round(sum(per_flow) / p.line_gbps, 4),
                     dropped_pct=round(100 * dropped / sent, 3) if sent else 0.0,
                     hyper=[r.hyper for r in rps], cuts=[r.cuts for r in rps],
                     queue_max_bytes=qmax, pause_fraction=round(paused_total / window, 4),
                     fabric_us=fabric_us, window_us=(frm * 1e6, end * 1e6), seed=seed,
                     pauses=pauses, window_bytes=window_bytes, series=series)


def fair_rate(fair: int, runs: int, confidence: float = CONFIDENCE) -> dict:
    """How often DCQCN meets the fairness band, estimated from ``fair`` of ``runs`` simulated
    runs: ``{"fair", "runs", "rate", "low", "high", "confidence", "method"}`` (shares 0-1), the
    interval the Wilson score interval of a binomial proportion (``scipy.stats.binomtest``;
    Wilson, JASA 1927), which stays inside 0-1 and is not empty at 0 or ``runs`` of ``runs``.
    Raises ValueError for ``runs`` < 1 or ``fair`` outside 0..``runs``."""
    if runs < 1 or not 0 <= fair <= runs:
        raise ValueError(f"fair_rate: need 0 <= fair <= runs and runs >= 1, got {fair} of {runs}")
    ci = binomtest(fair, runs).proportion_ci(confidence_level=confidence, method="wilson")
    return {"fair": fair, "runs": runs, "rate": round(fair / runs, 4), "low": round(float(ci.low), 4),
            "high": round(float(ci.high), 4), "confidence": confidence,
            "method": "Wilson score interval (scipy.stats.binomtest)"}


def _ignore_sigint() -> None:
    """A worker leaves Ctrl-C to the parent (which stops the pool): no traceback per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _simulate_seed(args: tuple[FluidParams, float, int]) -> PacketRun:
    params, fabric_us, seed = args
    return simulate(params, fabric_us, seed=seed)


#: Where :func:`spread` keeps its results (under :func:`railab.testbed.state.cache_dir`).
SPREAD_CACHE = "packetsim-spread"


def _spread_key(params: FluidParams, fabric_us: float, seeds: tuple[int, ...],
                band: float) -> str:
    """SHA-256 of everything a :func:`spread` result depends on: its arguments, the source of
    the model (this module, the RP/NP classes' :mod:`railab.traffic.load`, and
    :mod:`railab.traffic.fluid`'s parameters), numpy's version (its random streams) and
    scipy's (the fair-rate interval)."""
    h = hashlib.sha256()
    for mod in (sys.modules[__name__], load, fluid):
        h.update(Path(mod.__file__).read_bytes())
    h.update(np.__version__.encode())
    h.update(scipy.__version__.encode())
    h.update(json.dumps({"params": asdict(params), "fabric_us": fabric_us, "seeds": list(seeds),
                         "band": band}, sort_keys=True, default=str).encode())
    return h.hexdigest()


def spread(params: FluidParams, fabric_us: float = 15_000.0, *,
           seeds: tuple[int, ...] = DEFAULT_SEEDS, band: float = 0.15,
           workers: int | None = None, cache: bool = True) -> dict:
    """Run :func:`simulate` once per seed and summarize: ``runs``, ``utilization`` {min,
    max}, ``ratio`` {min, max} over every flow of every run, ``dropped_pct`` {min, max},
    ``fair_runs`` (runs with every flow within ``band`` of its share), ``fair_rate`` (that
    share with its 95 % interval, :func:`fair_rate`) and ``per_run`` (each run's ratios
    min-max). Computed figures, fabric units.

    The seeds run in ``workers`` processes (default: one per CPU, at most one per seed; 1 runs
    them here): each run is independent and seeded, so the result is the same either way,
    and after a load run the machine's cores are free (an 8:1 run of 15 ms takes ~0.5 s;
    the 40 default runs ~10 s on 2 cores).

    With ``cache`` (default) the result is kept under :func:`railab.testbed.state.cache_dir`
    (:data:`SPREAD_CACHE`, one JSON file per :func:`_spread_key`) and the same scenario is read
    back instead of run again: a repeated load run's reference then takes milliseconds, not
    ~10 s. An edit to the model's source, another numpy or any other argument is another key;
    a file that does not read back is computed again; ``RAILAB_NO_CACHE=1`` (or ``cache=False``)
    skips the cache."""
    cache = cache and os.environ.get("RAILAB_NO_CACHE") != "1"
    path = None
    if cache:
        path = cache_dir() / SPREAD_CACHE / f"{_spread_key(params, fabric_us, seeds, band)}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    out = _spread(params, fabric_us, seeds=seeds, band=band, workers=workers)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(out))
        except OSError:
            pass  # a cache that cannot be written costs the next run its time, nothing else
    return out


def _spread(params: FluidParams, fabric_us: float, *, seeds: tuple[int, ...], band: float,
            workers: int | None) -> dict:
    """:func:`spread` without the cache."""
    n = workers if workers is not None else min(os.cpu_count() or 1, len(seeds))
    if n <= 1 or len(seeds) <= 1:
        runs = [simulate(params, fabric_us, seed=s) for s in seeds]
    else:
        pool = multiprocessing.get_context("fork").Pool(n, initializer=_ignore_sigint)
        try:
            runs = pool.map(_simulate_seed, [(params, fabric_us, s) for s in seeds])
            pool.close()
        except BaseException:  # Ctrl-C: stop the workers now, not after their current run
            pool.terminate()
            raise
        finally:
            pool.join()
    lo = [min(r.ratios) for r in runs]
    hi = [max(r.ratios) for r in runs]
    fair = sum(1 for a, b in zip(lo, hi, strict=True) if a >= 1 - band and b <= 1 + band)
    return {"model": "per-packet DCQCN simulation (railab.traffic.packetsim: the lab's RP, NP, "
                     "WRED on dequeue and PFC; random marks)",
            "source": "computed", "runs": len(runs), "fabric_ms": fabric_us / 1000,
            "utilization": {"min": min(r.utilization for r in runs),
                            "max": max(r.utilization for r in runs)},
            "ratio": {"min": min(lo), "max": max(hi)},
            "dropped_pct": {"min": min(r.dropped_pct for r in runs),
                            "max": max(r.dropped_pct for r in runs)},
            "fair_runs": fair, "fair_rate": fair_rate(fair, len(runs)), "band": band,
            "per_run": [[a, b] for a, b in zip(lo, hi, strict=True)]}


def spread_text(ref: dict) -> str:
    """The words of a :func:`spread` result, for the CLIs: the senders' range of their share,
    the fair runs with the 95 % interval of their share (DCQCN's own rate of meeting the band)
    and the port's use (computed)."""
    fr = ref["fair_rate"]
    return (f"per-packet reference ({ref['runs']} runs, computed, random marks): senders at "
            f"{ref['ratio']['min']:.2f}-{ref['ratio']['max']:.2f} of their share over the last "
            f"half, every sender within {ref['band']:.0%} in {ref['fair_runs']} of {ref['runs']} "
            f"runs ({fr['confidence']:.0%} interval {fr['low']:.0%}-{fr['high']:.0%} of runs), "
            f"port used {ref['utilization']['min']:.1%}-{ref['utilization']['max']:.1%}")


def packet_reference(qos: QosProfile, senders: int, lab_seconds: float, *, pfc: bool,
                     dcqcn: DcqcnProfile | None = None, mtu: int = 4096,
                     measured_ratios: list[float] | None = None,
                     seeds: tuple[int, ...] = DEFAULT_SEEDS, band: float = 0.15) -> dict:
    """The per-packet reference of a lab's N:1 incast of ``lab_seconds`` (the
    ``congestion.reference.packet`` object of ``railab traffic --pattern incast --json``):
    :func:`spread` over ``seeds`` with the lab's ECN/PFC/DCQCN numbers
    (:meth:`FluidParams.from_qos`) for the same fabric time, read over the last half.
    ``measured_ratios`` (each sender's receive rate over its fair share, measured) adds
    ``measured_ratio`` {min, max} and ``spread_like_reference``: the measured extremes lie
    within the simulated runs' extremes widened by 0.05 (the emulation strays from the share
    no more than DCQCN itself does). Raises ValueError for a non-positive duration."""
    fabric_us = lab_seconds / qos.capacity.time_scale * 1e6
    out = spread(FluidParams.from_qos(qos, senders, dcqcn=dcqcn, pfc=pfc, mtu=mtu), fabric_us,
                 seeds=seeds, band=band)
    if measured_ratios:
        lo, hi = min(measured_ratios), max(measured_ratios)
        out["measured_ratio"] = {"min": round(lo, 3), "max": round(hi, 3)}
        out["spread_like_reference"] = bool(lo >= out["ratio"]["min"] - 0.05
                                            and hi <= out["ratio"]["max"] + 0.05)
    return out
