"""The load engine: paced RoCEv2 senders per QP, DCQCN, CNPs, per-flow and per-port time series.

Where :mod:`railab.traffic.stream` sends small probes to measure outages, the load engine fills
ports: each :class:`LoadFlow` is one QP sending RDMA WRITEs of ``mtu``-byte packets (4096 B by
default, RoCE's largest path MTU, so the packet rate stays low) at its current rate, paced per
QP, from the sockets of :class:`railab.traffic.engine.Engine`. Rates are the lab's: the capacity
dataplane (:mod:`railab.testbed.capacity`) runs every port at ``qos.capacity.port_rate_mbps``
and the engine starts every QP at that line rate; rates are counted on Ethernet frame bytes
(what tbf/htb count), not on payload.

Sender (reaction point, RP): per QP a :class:`DcqcnRP` (Zhu et al., "Congestion Control for
Large-Scale RDMA Deployments", SIGCOMM 2015, section 3; parameters from ``qos.dcqcn``, times
multiplied by the time scale with :meth:`CapacityProfile.lab_seconds`, rates divided by it with
:meth:`CapacityProfile.lab_bps`). ``cc="none"`` keeps every QP at line rate whatever CNPs come
(they are still counted). Sending never blocks: ``send(MSG_DONTWAIT)``; EAGAIN / ENOBUFS (the
NIC's own queue is full, e.g. held by a PFC PAUSE) is back-pressure, counted, the packet is not
sent and the QP waits; a paused NIC does not bank sending credit. The socket send buffer is
kept below the NIC queue's byte limit so the host back-pressures before the qdisc drops.

Receiver (notification point, NP): on a CE-marked data packet of QP q the receiver NIC sends a
CNP (BTH opcode 0x81, BECN set, DSCP ``qos.cnp_dscp``, ECN Not-ECT, 16 reserved bytes + ICRC;
IBTA Annex A17.9.3) to the sender NIC, destination QP = the sender's QP, at most one per QP per
``qos.dcqcn.cnp_interval_us`` (scaled) -- :class:`CnpPacer`.

UDP source port (ECMP entropy) per QP, ``sport_mode``: ``per-qp`` (Linux
``rdma_get_udp_sport`` of the flow's logical QPs, :func:`railab.traffic.stream.flow_sport`),
``fixed`` (every QP :data:`FIXED_SPORT`: the low-entropy case) or ``spray`` (per packet one of
:data:`SPRAY_PORTS` source ports, so consecutive packets may take different uplinks; the
receiver counts out-of-order PSNs).

One run (:func:`run_load`) forks a child process (its own GIL; ``PR_SET_PDEATHSIG`` and a hard
deadline, like :class:`railab.traffic.stream.StreamProcess`) that sends and receives; the parent
samples switch port counters (tx bytes, from rtnetlink) and, when given, the capacity
dataplane's counters (backlog, drops, CE marks, PAUSE events) every ``sample_s``.
:class:`LoadResult` carries the totals, per-flow and per-port series; its ``to_dict()`` is the
``congestion`` object of ``railab traffic --json`` (shape in docs/congestion.md).
"""

from __future__ import annotations

import ctypes
import errno
import multiprocessing as mp
import os
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal

from railab.errors import RailabError
from railab.testbed import state as labstate
from railab.testbed.dilation import restore_leftover
from railab.testbed.pfc import NicPauseBoard
from railab.testbed.runtime.netns.procs import _alive
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import DcqcnProfile, QosProfile
from railab.traffic import fastpath, roce
from railab.traffic.engine import Engine, FlowResult, Rtnl, in_netns
from railab.traffic.patterns import Flow
from railab.traffic.stream import (
    flow_sport,
    recv_from_child,
    run_sender_child,
    scheduling,
    set_realtime,
)

MASK24 = 0xFFFFFF
_random = random.random
CcMode = Literal["dcqcn", "dcqcn-ns3", "none"]
SportMode = Literal["per-qp", "fixed", "spray"]
CC_MODES = ("dcqcn", "dcqcn-ns3", "none")
#: The NICs' RC transport (IBTA 9.7): ``none`` (every packet sent once, a loss is a counter:
#: railab before 2026-12-06), ``gbn`` (go-back-N: a gap is NAKed, PSN sequence error, and the
#: requester resends everything from the NAK's PSN) and ``ooo`` (out-of-order placement with
#: selective repeat: the responder keeps packets past a gap and the requester resends only the
#: missing one; NVIDIA's ROCE_ACCL selective_repeat). Both retransmit on a timeout too.
NIC_MODES = ("none", "gbn", "ooo")
#: The retransmission timeout's IBTA exponent: 4.096 us x 2^9 = 2.1 ms of fabric time (IBTA
#: local ACK timeout = 4.096 us x 2^exponent; NVIDIA's adaptive retransmission goes as low as a
#: 4 us base, "Adaptive Retransmission: Parameters Control"; NCCL's default exponent 20, 4.3 s,
#: would end any lab run). railab's choice: above the deepest queueing delay a lab's buffer
#: allows (a lone hot queue of mini-lossless's 64 MiB shared pool at 400 Gb/s: 1.3 ms), so a
#: deep queue is not taken for a loss (at 131 us, exponent 5, an 8:1 incast with PFC off
#: timed out 13 times on one QP with nothing lost and resent twice what it delivered). Scaled by
#: the time scale like every timer.
RTO_EXP = 9
#: The responder ACKs (coalesced) every this many in-order packets, on an ack request (a
#: message's LAST packet) and at a flow's last packet.
ACK_EVERY = 32
#: ``ooo``: a gap is NAKed only once this many later packets have been placed (reordering
#: shallower than that, e.g. by packet spraying, costs no retransmission).
OOO_NAK_AFTER = 64

#: Who does the per-packet work: ``c`` (the compiled fast path), ``python`` (the loop in this
#: module, ~6,000 packets/s) or ``auto`` (C when it builds here, else Python).
ENGINES = ("auto", "c", "python")
SPORT_MODES = ("per-qp", "fixed", "spray")
#: The one UDP source port of every QP in ``sport_mode="fixed"`` (the low-entropy case).
FIXED_SPORT = 0xC000
#: How many source ports a ``spray`` QP cycles through, per packet (49152 + k * 1021 ...).
SPRAY_PORTS = 16
#: RDMA WRITE payload bytes per packet (RoCE's largest path MTU, IBTA 256..4096).
DEFAULT_MTU = 4096
#: Bytes per RDMA WRITE message (FIRST / MIDDLE ... / LAST, ack request on LAST).
DEFAULT_MESSAGE_BYTES = 1 << 20
#: Default sampling period of the time series, lab seconds.
DEFAULT_SAMPLE_S = 0.1
#: After sending stops the receiver keeps reading until nothing arrived for this long (s) ...
DRAIN_S = 0.5
#: ... or this long (s) in all; what has not arrived then counts as lost.
DRAIN_MAX_S = 10.0
#: Most packets one QP sends in one loop turn to catch up.
CATCH_UP = 8
#: A QP later than this (s) behind its schedule without back-pressure has lost time to the host
#: (CPU): the debt is dropped and counted as the engine's shortfall, not sent in a burst, and
#: the QP's DCQCN timers are held over that time (:meth:`DcqcnRP.hold`).
MAX_LAG_S = 0.02
#: The engine "keeps its rate" when its shortfall is below this share of what it meant to send.
SHORTFALL_LIMIT = 0.10
#: Send buffer per NIC socket, bytes (see :meth:`LoadEngine.open`).
SNDBUF_BYTES = 256 << 10
#: Real-time priority (``SCHED_RR``) of the load engine's process. The engine is the senders'
#: and the receiver's NICs, hardware that never waits for a CPU; at ``nice -10`` it waited for
#: one 16-24 % of an 8:1 incast with PFC on (``/proc/PID/schedstat``: the switch agent and its
#: tc/nft writers run at real-time priority, :data:`railab.testbed.pfc.RT_PRIORITY`), fell
#: 5-10 % short of its rate; at ``SCHED_RR 5`` it waits 5-8 % and falls 2-5 % short
#: (docs/congestion.md, "8:1 with PFC on"). Below the agent's 10, so a PFC PAUSE or a WRED
#: update still goes first. The engine sleeps whenever no QP is due, so it takes a share of
#: one core, not a whole one.
LOAD_RT_PRIORITY = 5
#: Each inter-packet gap is the rate's gap times a uniform factor in 1 +- this: a NIC's pacer is
#: not a metronome, and strictly periodic senders at the port rate phase-lock onto a token-bucket
#: virtual queue (one of them takes every token, is never marked, and never slows down).
PACING_JITTER = 0.5


# ---- DCQCN reaction point (pure) -------------------------------------------------------------
class DcqcnRP:
    """DCQCN reaction point of one QP (Zhu et al. 2015, section 3 and Fig. 7), pure: fed with
    times (monotonic s) and byte counts, no sockets. Rates in bits/s, times in seconds.

    * ``on_cnp(now)``: ``RT = RC``; ``RC = RC * (1 - alpha/2)`` (floor ``min_bps``);
      ``alpha = (1-g) alpha + g``; the timer, byte counter and their step counts T, BC restart.
    * alpha timer: every ``alpha_timer_s`` without a CNP, ``alpha = (1-g) alpha``.
    * ``hold(seconds)``: time the host took from the QP (the engine dropped its sending debt,
      :data:`MAX_LAG_S`) is not DCQCN time either: both timers are pushed back by it.
    * rate-increase events: each ``rate_timer_s`` (T += 1) and each ``byte_counter`` bytes sent
      (BC += 1) since the last cut. On an event: fast recovery while ``max(T, BC) <= F``
      (RT unchanged), hyper increase once ``min(T, BC) > F`` (``RT += i * R_HAI``, ``i =
      min(T, BC) - F``), additive increase otherwise (``RT += R_AI``); then ``RC = (RT + RC)/2``.
      RT and RC never exceed ``line_bps``.

    Counters: ``cnps``, ``cuts``, ``fast``, ``additive``, ``hyper``; ``lowest_bps``, the lowest
    RC any cut left (``line_bps`` before the first; a rate series sampled every few ms misses
    most troughs). Raises ValueError for non-positive rates or times.
    """

    __slots__ = ("line_bps", "g", "alpha_timer_s", "rate_timer_s", "byte_counter", "F", "rai",
                 "rhai", "min_bps", "rc", "rt", "alpha", "t_steps", "bc_steps", "bytes_since",
                 "next_alpha", "next_rate", "cnps", "cuts", "fast", "additive", "hyper",
                 "lowest_bps")

    def __init__(self, line_bps: float, *, g: float, alpha_timer_s: float, rate_timer_s: float,
                 byte_counter: int, fast_recovery_steps: int, rai_bps: float, rhai_bps: float,
                 min_bps: float, initial_alpha: float = 1.0, now: float = 0.0) -> None:
        if line_bps <= 0 or alpha_timer_s <= 0 or rate_timer_s <= 0 or byte_counter <= 0:
            raise ValueError("DcqcnRP: line rate, timers and byte counter must be positive")
        self.line_bps = float(line_bps)
        self.g = g
        self.alpha_timer_s = alpha_timer_s
        self.rate_timer_s = rate_timer_s
        self.byte_counter = byte_counter
        self.F = fast_recovery_steps
        self.rai, self.rhai = rai_bps, rhai_bps
        self.min_bps = min(min_bps, self.line_bps)
        self.rc = self.rt = self.lowest_bps = self.line_bps
        self.alpha = initial_alpha
        self.t_steps = self.bc_steps = 0
        self.bytes_since = 0
        self.next_alpha = now + alpha_timer_s
        self.next_rate = now + rate_timer_s
        self.cnps = self.cuts = self.fast = self.additive = self.hyper = 0

    @classmethod
    def from_qos(cls, qos: QosProfile, now: float = 0.0, line_bps: float | None = None) -> DcqcnRP:
        """The RP of a lab's QoS profile: ``qos.dcqcn`` scaled by ``qos.capacity`` (timers x
        time scale, rates / time scale), line rate ``port_rate_mbps`` unless ``line_bps``."""
        return cls(**rp_params(qos, line_bps), now=now)

    @property
    def rate(self) -> float:
        """The current sending rate RC, bits/s."""
        return self.rc

    def on_cnp(self, now: float) -> None:
        """A CNP arrived for this QP at ``now``: cut the rate, raise alpha, restart the timers."""
        self.cnps += 1
        self.cuts += 1
        self.rt = self.rc
        self.rc = max(self.min_bps, self.rc * (1.0 - self.alpha / 2.0))
        self.lowest_bps = min(self.lowest_bps, self.rc)
        self.alpha = (1.0 - self.g) * self.alpha + self.g
        self.t_steps = self.bc_steps = 0
        self.bytes_since = 0
        self.next_alpha = now + self.alpha_timer_s
        self.next_rate = now + self.rate_timer_s

    def _increase(self) -> None:
        F = self.F
        if max(self.t_steps, self.bc_steps) <= F:
            self.fast += 1
        elif min(self.t_steps, self.bc_steps) > F:
            self.hyper += 1
            self.rt = min(self.line_bps, self.rt + (min(self.t_steps, self.bc_steps) - F) * self.rhai)
        else:
            self.additive += 1
            self.rt = min(self.line_bps, self.rt + self.rai)
        self.rc = min(self.line_bps, (self.rt + self.rc) / 2.0)

    def on_sent(self, nbytes: int) -> None:
        """``nbytes`` left the QP: the byte counter may fire a rate-increase event."""
        self.bytes_since += nbytes
        while self.bytes_since >= self.byte_counter:
            self.bytes_since -= self.byte_counter
            self.bc_steps += 1
            self._increase()

    def hold(self, seconds: float) -> None:
        """The QP lost ``seconds`` to its host (it could not send its packets then): push the
        alpha and rate-increase timers back by that much, so over the run alpha does not decay,
        nor the rate climb, for time in which the QP did not send at its rate. The engine
        learns of the loss only when it drops the debt, after the timers ran through it, so the
        periods already run are made up by as many without an event right after (at most
        :data:`MAX_LAG_S` plus one loop turn late). Without it an incast whose
        senders started host-bound (8 QPs at 200 Mb/s ask 48,000 packets a second of the
        engine; it sends ~14,000 at the start) met its first CNP with alpha decayed to ~0.7
        (0.3 when the host was busier), cut too little and overflowed the switch buffer, where
        the DCQCN fluid model, whose senders start at line rate, has alpha ~1 (issue 28)."""
        self.next_alpha += seconds
        self.next_rate += seconds

    def tick(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to ``now`` (every period that passed)."""
        while now >= self.next_alpha:
            self.alpha *= 1.0 - self.g
            self.next_alpha += self.alpha_timer_s
        while now >= self.next_rate:
            self.t_steps += 1
            self._increase()
            self.next_rate += self.rate_timer_s


class Ns3MlxRP:
    """A reaction point with the rules of HPCC's ns-3 DCQCN (``CC_MODE 1``, "Mellanox's
    version", ``simulation/src/point-to-point/model/rdma-hw.cc`` of
    alibaba-edu/High-Precision-Congestion-Control, commit ``9f4be2a``), written from reading
    its behaviour (no line of it): the engine runs it with ``cc="dcqcn-ns3"`` so an emulated
    incast can be set beside ns-3's stored runs (:mod:`railab.traffic.ns3ref`) under the same
    rules, and :func:`railab.traffic.packetsim.simulate` with ``rp="ns3"``. It is **not** the
    paper's DCQCN (Zhu et al., SIGCOMM 2015, section 3) nor :class:`DcqcnRP`; where it differs
    (docs/congestion.md, "ns-3 (HPCC) side by side", names each rule's source):

    * alpha starts at 1 at the first CNP and is updated once per ``alpha_timer_s``: up
      (``(1-g) alpha + g``) if any CNP came in the period, down otherwise (``UpdateAlphaMlx``);
    * rate cuts happen on a periodic check every ``cnp_interval_s`` (ns-3's
      ``RATE_DECREASE_INTERVAL``) that starts one interval after the first CNP: a cut
      (``RT = RC``, ``RC = max(min, RC (1 - alpha/2))``) if any CNP came since the last check
      (``CheckRateDecreaseMlx``): the first cut of an incast comes one interval late;
    * increase events come from the rate timer alone (no byte counter: ``byte_counter`` is
      taken and ignored): fast recovery for the first F, additive at the F-th, then hyper with
      a constant step ``R_HAI`` (``RateIncEventMlx``, ``HyperIncreaseMlx``), ``RC = (RT +
      RC)/2`` at each; the timer starts at the first cut.

    ns-3's notification point sends a CNP for every marked packet (``RdmaHw::ReceiveUdp`` flags
    the ACK of each): the engine's NP does so with ``cc="dcqcn-ns3"`` (no per-QP pacing).
    Same interface as :class:`DcqcnRP` (``on_cnp``, ``on_sent``, ``tick``, ``hold``, ``rate``,
    counters ``cnps``, ``cuts``, ``fast``, ``additive``, ``hyper``, ``lowest_bps``); rates
    bits/s, times s. Raises ValueError for non-positive rates or times."""

    __slots__ = ("line_bps", "g", "alpha_timer_s", "rate_timer_s", "dec_interval_s", "F", "rai",
                 "rhai", "min_bps", "rc", "rt", "alpha", "first", "a_cnp", "d_cnp", "stage",
                 "next_alpha", "next_dec", "next_rate", "cnps", "cuts", "fast", "additive",
                 "hyper", "lowest_bps")

    def __init__(self, line_bps: float, *, g: float, alpha_timer_s: float, rate_timer_s: float,
                 cnp_interval_s: float, fast_recovery_steps: int, rai_bps: float,
                 rhai_bps: float, min_bps: float, byte_counter: int | None = None,
                 initial_alpha: float = 1.0, now: float = 0.0) -> None:
        if line_bps <= 0 or alpha_timer_s <= 0 or rate_timer_s <= 0 or cnp_interval_s <= 0:
            raise ValueError("Ns3MlxRP: line rate, timers and the CNP interval must be positive")
        self.line_bps = float(line_bps)
        self.g = g
        self.alpha_timer_s, self.rate_timer_s = alpha_timer_s, rate_timer_s
        self.dec_interval_s = cnp_interval_s
        self.F = fast_recovery_steps
        self.rai, self.rhai = rai_bps, rhai_bps
        self.min_bps = min(min_bps, self.line_bps)
        self.rc = self.rt = self.lowest_bps = self.line_bps
        self.alpha = 1.0
        self.first, self.a_cnp, self.d_cnp = True, False, False
        self.stage = 0
        self.next_alpha = self.next_dec = self.next_rate = float("inf")
        self.cnps = self.cuts = self.fast = self.additive = self.hyper = 0

    @classmethod
    def from_qos(cls, qos: QosProfile, now: float = 0.0, line_bps: float | None = None) -> Ns3MlxRP:
        """The RP of a lab's QoS profile under ns-3's rules (:func:`rp_params` plus
        ``cnp_interval_s``, the scaled ``qos.dcqcn.cnp_interval_us``)."""
        return cls(**rp_params(qos, line_bps), now=now,
                   cnp_interval_s=qos.capacity.lab_seconds(qos.dcqcn.cnp_interval_us))

    @property
    def rate(self) -> float:
        """The current sending rate RC, bits/s."""
        return self.rc

    def on_sent(self, nbytes: int) -> None:
        """No byte counter in ns-3's DCQCN: nothing to do."""

    def on_cnp(self, now: float) -> None:
        """A CNP at ``now`` (s): flag it for the next alpha update and rate check; the first
        starts the alpha timer and the periodic rate check one interval (+1 ns) later."""
        self.cnps += 1
        self.a_cnp = self.d_cnp = True
        if self.first:
            self.first, self.alpha, self.a_cnp = False, 1.0, False
            self.next_alpha = now + self.alpha_timer_s
            self.next_dec = now + self.dec_interval_s + 1e-9

    def hold(self, seconds: float) -> None:
        """Time the host took from the QP is not DCQCN time: every timer is pushed back by it
        (as :meth:`DcqcnRP.hold`)."""
        self.next_alpha += seconds
        self.next_dec += seconds
        self.next_rate += seconds

    def tick(self, now: float) -> None:
        """Run the alpha timer, the rate check and the rate timer up to ``now`` (s), in order."""
        while True:
            nxt = min(self.next_alpha, self.next_dec, self.next_rate)
            if nxt > now:
                return
            if nxt == self.next_alpha:
                self.alpha = (1 - self.g) * self.alpha + (self.g if self.a_cnp else 0.0)
                self.a_cnp = False
                self.next_alpha += self.alpha_timer_s
            elif nxt == self.next_dec:
                self.next_dec += self.dec_interval_s
                if self.d_cnp:
                    self.rt = self.rc
                    self.rc = max(self.min_bps, self.rc * (1 - self.alpha / 2))
                    self.lowest_bps = min(self.lowest_bps, self.rc)
                    self.cuts += 1
                    self.stage, self.d_cnp = 0, False
                    self.next_rate = nxt + self.rate_timer_s
            else:
                self.next_rate += self.rate_timer_s
                if self.stage < self.F:
                    self.fast += 1
                elif self.stage == self.F:
                    self.additive += 1
                    self.rt = min(self.line_bps, self.rt + self.rai)
                else:
                    self.hyper += 1
                    self.rt = min(self.line_bps, self.rt + self.rhai)
                self.rc = (self.rc + self.rt) / 2
                self.stage += 1


def rp_params(qos: QosProfile, line_bps: float | None = None) -> dict:
    """:class:`DcqcnRP`'s arguments (but ``now``) for a lab's QoS profile: ``qos.dcqcn``
    scaled by ``qos.capacity`` (timers x time scale, lab s; rates / time scale, bits/s), line
    rate ``port_rate_mbps`` unless ``line_bps`` (bits/s). The compiled fast path's RP
    (:func:`railab.traffic.fastpath.rp_init`) takes the same dict."""
    d, cap = qos.dcqcn, qos.capacity
    return dict(line_bps=line_bps if line_bps is not None else cap.port_rate_mbps * 1e6, g=d.g,
                alpha_timer_s=cap.lab_seconds(d.alpha_timer_us),
                rate_timer_s=cap.lab_seconds(d.rate_timer_us),
                byte_counter=d.byte_counter_bytes, fast_recovery_steps=d.fast_recovery_steps,
                rai_bps=cap.lab_bps(d.ai_rate_mbps), rhai_bps=cap.lab_bps(d.hai_rate_mbps),
                min_bps=cap.lab_bps(d.min_rate_mbps), initial_alpha=d.initial_alpha)


class CnpPacer:
    """The NP's CNP pacing: at most one CNP per QP per ``interval_s`` (lab seconds)."""

    __slots__ = ("interval_s", "_last")

    def __init__(self, interval_s: float) -> None:
        if interval_s < 0:
            raise ValueError("CNP interval must be >= 0 s")
        self.interval_s = interval_s
        self._last: dict[int, float] = {}

    def due(self, qp: int, now: float) -> bool:
        """True (and the QP's interval restarts) when a CE-marked packet of ``qp`` at ``now``
        earns a CNP; False while the QP's last CNP is less than ``interval_s`` old."""
        last = self._last.get(qp)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[qp] = now
        return True


def spray_ports(base: int, n: int = SPRAY_PORTS) -> list[int]:
    """The ``n`` source ports a spraying QP cycles through: ``base`` and ``n - 1`` others
    spread over 49152-65535 (step 1021, a prime, so they differ in their low bits too)."""
    return [0xC000 | ((base - 0xC000 + k * 1021) & 0x3FFF) for k in range(n)]


def qp_sport(flow: Flow, mode: str) -> int:
    """A QP's UDP source port in ``mode`` (``per-qp``/``spray``: the flow's own,
    :func:`railab.traffic.stream.flow_sport`; ``fixed``: :data:`FIXED_SPORT`)."""
    if mode not in SPORT_MODES:
        raise RailabError(f"source port mode must be one of {', '.join(SPORT_MODES)} (got {mode!r})")
    return FIXED_SPORT if mode == "fixed" else flow_sport(flow)


# ---- flows and results -----------------------------------------------------------------------
@dataclass(frozen=True)
class LoadFlow:
    """One QP of a load run: the routed ``flow`` (:func:`railab.traffic.patterns.route`),
    ``bytes`` to send (None: send for the whole run), ``start_s`` (delay from the run's
    start, lab s) and ``gap_s`` (idle time after each RDMA WRITE message, lab s: a
    collective's chunks, the gaps a flowlet switch splits at; 0: back to back) and
    ``rate_mbps`` (the QP's own ceiling, lab Mb/s: its share of its NIC when the NIC's
    scheduler splits the port over several QPs; None: the engine's line rate). A run with
    byte counts ends when every flow has sent its bytes and they were delivered (or the drain
    timed out)."""

    flow: Flow
    bytes: int | None = None
    start_s: float = 0.0
    gap_s: float = 0.0
    rate_mbps: float | None = None


@dataclass
class LoadResult:
    """What one load run measured.

    ``flows``: one dict per flow (documented in docs/congestion.md: name, src, dst, NICs, sport,
    tx/rx packets and bytes, lost, ooo, ce_marked, cnp_sent, cnp_received, backpressure,
    fct_s, rate_mbps_last_half, and ``series`` columns t / tx_mbps / rx_mbps / cc_mbps / ce /
    cnp). ``ports``: ``"node:port" -> {"t": [...], "tx_mbps": [...], and the capacity
    counters' columns when a port sampler was given}``. Totals are integers over the run.
    ``queue_peak_bytes`` / ``queue_peak_port``: the deepest backlog the port sampler read on
    any port over the run (measured every ``sample_s``, so a peak between samples is missed;
    None without a port sampler). ``engine_priority``: the CPU scheduling the engine's process
    ran under (``"SCHED_RR 5"``, :data:`LOAD_RT_PRIORITY`; ``"nice -10"`` where the kernel
    refused real-time; None for a result built in-process). ``engine``: who did the
    per-packet work (``"c"``, the compiled fast path, or ``"python"``); ``engine_pps``: the
    data packets it sent per lab second of sending (all QPs); ``engine_cpu_s``: CPU time of
    the threads that did the per-packet work, kernel forwarding in their context included (s);
    ``engine_threads``: how many (:func:`railab.traffic.fastpath.threads`; 1 for Python);
    ``rx_socket_drops``: frames the fabric delivered that the engine's own receive sockets
    dropped (``PACKET_STATISTICS``: the engine read too slowly): counted in ``lost`` though the
    fabric did not lose them, so a run with any is the host's, not the fabric's.
    ``nic``: the RC transport (:data:`NIC_MODES`); with one, ``transport`` holds the run's
    totals (``retx_packets``, ``retx_bytes``, ``naks``, ``timeouts``, ``goodput_mbps``,
    ``fct_p50_s``, ``fct_p99_s``, ``rto_lab_s``) and each flow dict a ``transport`` object
    (delivered, retransmitted, NAKs and ACKs each way, timeouts, duplicates, goodput) with
    ``fct_s`` the time until every packet had arrived at the responder.
    ``cnp_transit``: the CNPs' transit from the NP's send to the RP's read, measured on the
    engine's clock (:func:`_transit`: count, mean and max, lab s and fabric us; each flow
    dict has its own); None when no CNP was sent.
    ``switch_agent_lost``: the switch agent (ECN marks, PFC) exited during the run: the engine
    found the writer of the sender NICs' PAUSE board gone and released what it held; a caller
    that ran the agent says so too (``railab traffic``: a failure).
    """

    cc: str
    sport_mode: str
    seconds: float
    sample_s: float
    port_rate_mbps: float
    time_scale: float
    flows: list[dict] = field(default_factory=list)
    ports: dict[str, dict] = field(default_factory=dict)
    ce_marked: int = 0
    cnp_sent: int = 0
    cnp_received: int = 0
    lost: int = 0
    dropped: int | None = None
    pause_events: int | None = None
    backpressure: int = 0
    engine_shortfall: float = 0.0
    offered_mbps: float = 0.0
    dcqcn: dict | None = None
    pause_events_last_half: int | None = None
    queue_peak_bytes: int | None = None
    queue_peak_port: str | None = None
    engine_priority: str | None = None
    engine: str = "python"
    engine_pps: float = 0.0
    engine_cpu_s: float | None = None
    engine_threads: int = 1
    rx_socket_drops: int = 0
    nic: str = "none"
    switch_agent_lost: bool = False
    transport: dict | None = None
    cnp_transit: dict | None = None

    @property
    def keeps_rate(self) -> bool:
        """The engine sent what it meant to within :data:`SHORTFALL_LIMIT` and its receive
        sockets dropped nothing (``rx_socket_drops``)."""
        return self.engine_shortfall <= SHORTFALL_LIMIT and not self.rx_socket_drops

    def to_dict(self) -> dict:
        """JSON-ready (the ``congestion`` object): totals, then ``flows`` and ``ports``."""
        d = asdict(self)
        d["keeps_rate"] = self.keeps_rate
        return d


@dataclass
class LoadFlowResult(FlowResult):
    """One flow of a load run as the path engine's :class:`~railab.traffic.engine.FlowResult`
    (what :func:`railab.checks.hops.flow_rows` and :func:`~railab.checks.hops.attribute_flows`
    read to file failed flows under ``railab check``'s root causes): packets sent / delivered /
    lost, ``path`` (the FIB trace's ``node:egress port`` per switch, empty when not traced),
    ``nic_down`` (a NIC down at either end, the load flow's ``down_nic``), ``port_missing``,
    ``mtu_exceeded`` / ``mtu_note`` and ``tx_refused`` (the source NIC refused every frame).
    ``failure``: why the flow failed in words, None when it passed -- a load run's verdict is
    the caller's (drops with PFC off are a result, not a failure), so ``ok`` and ``verdict``
    follow it instead of the path engine's every-packet rule."""

    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def verdict(self) -> str:
        return self.failure or "ok"


def flow_results(flows: list[Flow], result: LoadResult, failures: list[str | None]
                 ) -> list[LoadFlowResult]:
    """:class:`LoadFlowResult` per flow of ``result`` (``flows``: the routed flows the run was
    given, same order; ``failures``: per flow why it failed, None when it passed). Raises
    ValueError when the three lengths differ."""
    if not len(flows) == len(result.flows) == len(failures):
        raise ValueError(f"{len(flows)} flows, {len(result.flows)} results, {len(failures)} verdicts")
    out = []
    for f, d, why in zip(flows, result.flows, failures, strict=True):
        refused = (f"{f.src[0]}:eth{f.src_nic}"
                   if d["tx_packets"] == 0 and d.get("backpressure", 0) > 0 else None)
        out.append(LoadFlowResult(
            flow=f, sent=d["tx_packets"], delivered=d["rx_packets"], lost=d["lost"],
            path=list(d.get("path") or []), nic_down=d.get("down_nic"),
            port_missing=d.get("port_missing"), mtu_exceeded=d.get("mtu_exceeded"),
            mtu_note=d.get("mtu_note"), tx_refused=refused, failure=why))
    return out


#: How often (s) a load run looks whether the switch agent that writes its PAUSE board runs.
BOARD_CHECK_S = 0.1
#: PAUSE boards an interrupted run's fast-path thread may still read: mapped until the process
#: exits (LoadEngine._release_board)
_BOARDS_IN_USE: list[NicPauseBoard] = []


class _QP:
    __slots__ = ("lf", "flow", "tx", "cnp_tx", "tpls", "ntpl", "cnp_frame", "dqpn", "sqpn",
                 "start_psn", "rp", "next_t", "frame_bits", "sent", "sent_bytes", "goal",
                 "rx", "rx_bytes", "max_idx", "ooo", "ce", "cnp_sent", "cnp_rx", "bp",
                 "deficit_bytes", "t_start", "t_last_rx", "sport", "ppm", "s_tx", "s_rx",
                 "s_ce", "s_cnp", "series", "active", "icrc_errors", "nic_down", "ttl",
                 "max_psn_dist", "failed", "port_missing", "mtu_exceeded", "mtu_note",
                 "down_nic", "late_s", "line_bps", "ack_tpls", "rc", "cnp_ts", "cnp_lat",
                 "pause_at", "held_since", "pfc_held_s", "pfc_holds")


class LoadEngine(Engine):
    """The engine's sockets driving paced load per QP, with DCQCN and the NP's CNPs.

    ``dcqcn`` replaces the lab's ``qos.dcqcn`` for this engine (e.g.
    :data:`railab.topologies.qos.DCQCN_400G`); the CNP interval and every QP's RP use it.
    ``add(load_flow)`` prepares one QP (raises RailabError for an unrouted or intra-server
    flow); :meth:`run` sends until ``seconds`` pass (or every byte flow finished, or every QP
    failed), ``stop()`` says so, or the monotonic ``deadline``; returns a :class:`LoadResult`
    without port series (:func:`run_load` adds them). Use as a context manager like
    :class:`Engine`.

    ``per_flow_faults``: a fault that stops one QP fails that QP, not the run (``railab
    traffic``, issue 31): an interface the flow needs that does not exist (a pulled cable,
    :meth:`Engine.missing_for`) marks it ``port_missing`` and it is not sent; a packet larger
    than the sender NIC's MTU (EMSGSIZE) marks it ``mtu_exceeded`` and it stops. Without it
    both raise RailabError (what the collective and load-balancing runs expect). Either way a
    QP that lost packets is diagnosed at the end: its destination NIC administratively down
    (``down_nic``) or with an MTU below the run's packets (``mtu_exceeded``, dropped on
    arrival), as :meth:`Engine.run` does for the path engine's flows.
    """

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str] | None = None, *,
                 cc: str = "dcqcn", sport_mode: str = "per-qp", mtu: int = DEFAULT_MTU,
                 message_bytes: int = DEFAULT_MESSAGE_BYTES, sample_s: float = DEFAULT_SAMPLE_S,
                 line_mbps: float | None = None, dcqcn: DcqcnProfile | None = None,
                 per_flow_faults: bool = False, engine: str = "auto", nic: str = "none",
                 rto_exp: int = RTO_EXP) -> None:
        super().__init__(spec, netns_of)
        self.per_flow_faults = per_flow_faults
        #: real-time priority (SCHED_RR) the run's per-packet work takes once its set-up is done
        #: (:func:`railab.traffic.stream.set_realtime`; None: as the caller runs). The child of
        #: :func:`run_load` sets :data:`LOAD_RT_PRIORITY`.
        self.rt_priority: int | None = None
        if nic not in NIC_MODES:
            raise RailabError(f"NIC transport must be one of {', '.join(NIC_MODES)} (got {nic!r})")
        if not 0 <= rto_exp <= 31:
            raise RailabError(f"the retransmission timeout's exponent must be 0-31 (got {rto_exp})")
        #: the RC transport (:data:`NIC_MODES`) and its timeout, lab s (IBTA 4.096 us x 2^exp)
        self.nic = nic
        self.rto_s = self.qos.capacity.lab_seconds(4.096 * 2 ** rto_exp)
        if engine not in ENGINES:
            raise RailabError(f"load engine must be one of {', '.join(ENGINES)} (got {engine!r})")
        #: ``"c"``: the compiled fast path (:mod:`railab.traffic.fastpath`) sends and receives;
        #: ``"python"``: this class's own per-packet loop; ``"auto"``: C where it builds, unless
        #: ``$RAILAB_LOAD_ENGINE`` says ``c`` or ``python`` (benchmarks run both side by side).
        self.engine = engine
        if dcqcn is not None:  # a named profile for this run instead of the lab's qos.dcqcn
            self.qos = self.qos.model_copy(update={"dcqcn": dcqcn})
        if cc not in CC_MODES:
            raise RailabError(f"congestion control must be one of {', '.join(CC_MODES)} (got {cc!r})")
        if sport_mode not in SPORT_MODES:
            raise RailabError(f"source port mode must be one of {', '.join(SPORT_MODES)} "
                              f"(got {sport_mode!r})")
        if not 256 <= mtu <= 4096:
            raise RailabError(f"RoCE MTU must be 256-4096 payload bytes (got {mtu})")
        if not 0.01 <= sample_s <= 10:
            raise RailabError(f"sample period must be 0.01-10 s (got {sample_s:g})")
        self.cc, self.sport_mode, self.mtu = cc, sport_mode, mtu
        self.message_bytes = max(mtu, message_bytes)
        self.sample_s = sample_s
        cap = self.qos.capacity
        self.line_bps = (line_mbps if line_mbps is not None else cap.port_rate_mbps) * 1e6
        #: the NP: one CNP per QP per interval (the paper's), or with ``dcqcn-ns3`` one for
        #: every marked packet (ns-3's ``ReceiveUdp``: interval 0)
        self.pacer = CnpPacer(0.0 if cc == "dcqcn-ns3" else
                              cap.lab_seconds(self.qos.dcqcn.cnp_interval_us))
        self._qps: list[_QP] = []
        self._ran_with = "python"
        self._cpu_s: float | None = None
        self._threads = 1
        self._socket_drops = 0
        self._by_dqpn: dict[int, _QP] = {}
        self._by_sqpn: dict[int, _QP] = {}
        #: the switch agent's sender-NIC PAUSE board while a run has one (PFC on)
        self._board: NicPauseBoard | None = None
        self._fast_thread: threading.Thread | None = None
        self._board_lost = False
        self._board_check_t = 0.0

    def open(self) -> None:
        """Open the engine's sockets; the NIC send buffers are cut to :data:`SNDBUF_BYTES`
        (at most 1/16 of the port buffer; the kernel doubles it and counts each frame's whole
        allocation) so a held NIC queue back-pressures the sender (EAGAIN) after about a
        hundred 4 KiB frames, not after megabytes a DCQCN cut would then wait behind; the UDP
        4791 sinks get the smallest receive buffer, so the kernel discards the datagrams there instead of this process
        reading each one (the sink exists only so no ICMP port-unreachable goes back)."""
        super().open()
        sndbuf = max(64 << 10, min(SNDBUF_BYTES, self.qos.capacity.buffer_bytes // 16))
        for s in self._tx.values():
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        for s in self._sinks:  # the kernel drops RoCE datagrams there (no ICMP), no drain needed
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)

    def add(self, lf: LoadFlow) -> None:
        """Prepare the QP of one :class:`LoadFlow`."""
        flow = lf.flow
        if not flow.path_class:
            raise RailabError(f"flow {flow.name} is not routed: build it with railab.traffic.patterns.route()")
        if flow.path_class == "intra-server":
            raise RailabError(f"flow {flow.name} is intra-server (NVLink): it never reaches the fabric; "
                              "pick flows between servers")
        if lf.bytes is not None and lf.bytes < 1:
            raise RailabError(f"flow {flow.name}: bytes must be at least 1 (got {lf.bytes})")
        if lf.rate_mbps is not None and lf.rate_mbps <= 0:
            raise RailabError(f"flow {flow.name}: rate must be > 0 Mb/s (got {lf.rate_mbps:g})")
        q = _QP()
        q.lf, q.flow = lf, flow
        q.line_bps = lf.rate_mbps * 1e6 if lf.rate_mbps is not None else self.line_bps
        q.dqpn = self._qpn_next
        q.sqpn = self._qpn_next + 1
        self._qpn_next = (self._qpn_next + 2) & MASK24 or 0x10000
        q.start_psn = (q.dqpn * 2654435761) & MASK24
        src = self.spec.nic(flow.src[0], flow.src_nic)
        dst = self.spec.nic(flow.dst[0], flow.dst_nic)
        _reset(q)
        gone = self.missing_for(flow)
        if gone is not None and self.per_flow_faults:  # not sent: the flow fails naming it
            q.port_missing, q.failed = gone, True
            q.tx = q.cnp_tx = None
            q.sport = qp_sport(flow, self.sport_mode)
            q.ppm, q.frame_bits, q.goal, q.rp = 1, 0, None, None
            self._qps.append(q)
            return
        self.require(flow)
        q.tx = self._tx[(flow.src[0], flow.src_nic)]
        q.cnp_tx = self._tx[(flow.dst[0], flow.dst_nic)]
        q.sport = qp_sport(flow, self.sport_mode)
        ports = spray_ports(q.sport) if self.sport_mode == "spray" else [q.sport]
        payload = bytes((i * 31 + flow.qp) & 0xFF for i in range(self.mtu))
        q.ppm = max(1, self.message_bytes // self.mtu)
        common = dict(src_mac=self._src_mac[(flow.src[0], flow.src_nic)],
                      dst_mac=self._gw_mac[(flow.src[0], flow.src_nic)],
                      src_ip=str(src.address.ip), dst_ip=str(dst.address.ip), dst_qpn=q.dqpn,
                      psn=0, ttl=self.ttl, qos=self.qos, payload=payload)
        ops = ((roce.RC_RDMA_WRITE_ONLY,) if q.ppm == 1 else
               (roce.RC_RDMA_WRITE_FIRST, roce.RC_RDMA_WRITE_MIDDLE, roce.RC_RDMA_WRITE_LAST))
        base = {op: bytes(roce.roce_packet(opcode=op, sport=q.sport, va=0x7F0000000000,
                                           rkey=q.dqpn, dmalen=self.message_bytes, **common))
                for op in ops}
        # one template per (source port, opcode): spray patches the UDP source port bytes
        q.tpls = [{op: roce.FrameTemplate(_with_sport(raw, p)) for op, raw in base.items()}
                  for p in ports]
        q.ntpl = len(q.tpls)
        for per_port in q.tpls:  # the ICRC tables of FrameTemplate.frame_shared, built now
            for tpl in per_port.values():
                tpl.frame_shared(0)
        q.frame_bits = 8 * q.tpls[0][ops[-1] if q.ppm == 1 else roce.RC_RDMA_WRITE_MIDDLE].size
        q.cnp_frame = bytes(roce.roce_packet(
            src_mac=self._src_mac[(flow.dst[0], flow.dst_nic)],
            dst_mac=self._gw_mac[(flow.dst[0], flow.dst_nic)], src_ip=str(dst.address.ip),
            dst_ip=str(src.address.ip), dst_qpn=q.sqpn, psn=0, opcode=roce.CNP, qos=self.qos,
            ecn=roce.ECN_NOT_ECT, ttl=self.ttl, sport=q.sport))
        q.ack_tpls = None
        if self.nic != "none":  # the responder's ACK and NAK (PSN sequence error), to the sender's QP
            q.ack_tpls = [roce.FrameTemplate(roce.roce_packet(
                src_mac=self._src_mac[(flow.dst[0], flow.dst_nic)],
                dst_mac=self._gw_mac[(flow.dst[0], flow.dst_nic)], src_ip=str(dst.address.ip),
                dst_ip=str(src.address.ip), dst_qpn=q.sqpn, psn=0, opcode=roce.RC_ACKNOWLEDGE,
                syndrome=syn, qos=self.qos, ttl=self.ttl, sport=q.sport))
                for syn in (roce.AETH_ACK, roce.AETH_NAK_PSN_SEQ)]
        q.goal = None if lf.bytes is None else max(1, -(-lf.bytes // self.mtu))
        q.rp = None
        self._qps.append(q)
        self._by_dqpn[q.dqpn] = q
        self._by_sqpn[q.sqpn] = q

    # ---- receive -----------------------------------------------------------------------------
    def _rx_one(self, buf: bytearray, n: int, now: float, _ifname: str = "") -> None:
        if n < 14 + 20 + 8 + 12 or buf[23] != 17:
            return
        o = 14 + (buf[14] & 0x0F) * 4 + 8
        dqpn = (buf[o + 5] << 16) | (buf[o + 6] << 8) | buf[o + 7]
        if buf[o] == roce.CNP:
            q = self._by_sqpn.get(dqpn)
            if q is not None:
                if q.cnp_ts:  # paired in order with the NP's sends (fastpath.c cnp_transit)
                    lat = max(0.0, now - q.cnp_ts.popleft())
                    q.cnp_lat[0] += 1
                    q.cnp_lat[1] += lat
                    q.cnp_lat[2] = max(q.cnp_lat[2], lat)
                q.cnp_rx += 1
                if q.rp is not None:
                    q.rp.on_cnp(now)
            return
        q = self._by_dqpn.get(dqpn)
        if q is None:
            return
        psn = (buf[o + 9] << 16) | (buf[o + 10] << 8) | buf[o + 11]
        idx = (psn - q.start_psn) & MASK24
        q.rx += 1
        q.rx_bytes += n
        q.t_last_rx = now
        q.ttl = buf[22]
        if idx < q.max_idx:
            q.ooo += 1
            if q.max_idx - idx > q.max_psn_dist:  # reorder depth in packets (issue 30)
                q.max_psn_dist = q.max_idx - idx
        else:
            q.max_idx = idx
        if buf[15] & 3 == roce.ECN_CE:
            q.ce += 1
            if self.pacer.due(q.dqpn, now):
                try:
                    q.cnp_tx.send(q.cnp_frame, socket.MSG_DONTWAIT)
                    q.cnp_sent += 1
                    q.cnp_ts.append(now)
                except OSError:
                    pass  # the receiver NIC's own queue is full: the CNP is lost, as on a NIC

    def _receive(self, timeout: float) -> None:
        self.drain_rx(timeout, self._rx_one)

    # ---- send --------------------------------------------------------------------------------
    def _send_due(self, q: _QP, now: float) -> None:
        burst = 0
        ppm = q.ppm
        if q.pause_at is not None:  # PFC at the sender NIC (NicPauseBoard): as dp_qp's pause
            if self._board.paused_at(q.pause_at):
                if not q.held_since:
                    q.held_since = now
                    q.pfc_holds += 1
                q.next_t = now + q.frame_bits / q.line_bps
                return
            if q.held_since:  # on from the RESUME's time, however late this loop saw it
                tr = self._board.resumed_at(q.pause_at)
                start = tr if q.held_since <= tr <= now else now
                q.pfc_held_s += start - q.held_since
                q.held_since = 0.0
                q.next_t = start
        while q.next_t <= now and burst < CATCH_UP:
            if q.goal is not None and q.sent >= q.goal:
                q.active = False
                return
            i = q.sent
            pos = i % ppm
            if ppm == 1:
                op = roce.RC_RDMA_WRITE_ONLY
            elif pos == 0:
                op = roce.RC_RDMA_WRITE_FIRST
            elif pos == ppm - 1 or (q.goal is not None and i == q.goal - 1):
                op = roce.RC_RDMA_WRITE_LAST
            else:
                op = roce.RC_RDMA_WRITE_MIDDLE
            if q.goal is not None and i == q.goal - 1:  # how late the last packet leaves
                q.late_s += now - q.next_t
            tpl = q.tpls[i % q.ntpl][op]
            frame = tpl.frame_shared((q.start_psn + i) & MASK24,
                                     op in (roce.RC_RDMA_WRITE_LAST, roce.RC_RDMA_WRITE_ONLY))
            try:
                q.tx.send(frame, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                self._held(q, now)
                return
            except OSError as e:
                if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                    self._held(q, now)
                    return
                if e.errno in (errno.ENETDOWN, errno.ENXIO):
                    q.nic_down = q.failed = True
                    q.down_nic = f"{q.flow.src[0]}:{q.tx.getsockname()[0]}"
                    q.active = False
                    return
                if e.errno == errno.EMSGSIZE:  # the NIC's MTU is below the run's frames
                    nic = f"{q.flow.src[0]}:{q.tx.getsockname()[0]}"
                    if self.per_flow_faults:  # this QP stops here, naming the NIC
                        q.mtu_exceeded, q.failed, q.active = nic, True, False
                        q.mtu_note = (f"{len(frame) - 14} B packets exceed {nic}'s MTU "
                                      f"{self.nic_mtu(q.flow.src[0], q.flow.src_nic)} B "
                                      "(refused at the sender, EMSGSIZE)")
                        return
                    raise RailabError(
                        f"{nic} refused a {len(frame) - 14} B packet (EMSGSIZE): its MTU is below "
                        f"the run's packets; railab check names the MTU mismatch, or run with a "
                        f"smaller --mtu") from None
                raise
            q.sent += 1
            q.sent_bytes += tpl.size
            rate = q.rp.rc if q.rp is not None else q.line_bps
            q.next_t += tpl.size * 8 / rate * (1.0 + PACING_JITTER * (2.0 * _random() - 1.0))
            if q.rp is not None:
                q.rp.on_sent(tpl.size)
            burst += 1
            if q.lf.gap_s > 0 and op in (roce.RC_RDMA_WRITE_LAST, roce.RC_RDMA_WRITE_ONLY):
                q.next_t += q.lf.gap_s  # the idle gap after a message
                return
        done = q.goal is not None and q.sent >= q.goal  # its last packet's lateness is counted
        if q.next_t < now - MAX_LAG_S and not done:  # the host stalled us: count the debt, do not burst
            lost = now - q.next_t
            rate = q.rp.rc if q.rp is not None else q.line_bps
            q.deficit_bytes += int(lost * rate / 8)
            q.late_s += lost
            if q.rp is not None:  # nor is the lost time DCQCN time (DcqcnRP.hold)
                q.rp.hold(lost)
            q.next_t = now

    def _held(self, q: _QP, now: float) -> None:
        """The NIC's queue is full (e.g. a PFC PAUSE holds it): count the back-pressure and try
        the packet again one frame time (at the QP's current rate) from now. No credit is
        banked (the schedule restarts from now), and the engine does not spin on a held QP:
        retrying at once cost a send system call per loop turn per held QP (~10,000 a second
        each during an incast with PFC on), CPU the other QPs' pacing then lacked."""
        q.bp += 1
        rate = q.rp.rc if q.rp is not None else q.line_bps
        q.next_t = now + q.frame_bits / rate

    def _sample(self, now: float, t0: float, dt: float) -> None:
        for q in self._qps:
            s = q.series
            s["t"].append(round(now - t0, 4))
            s["tx_mbps"].append(round((q.sent_bytes - q.s_tx) * 8 / dt / 1e6, 3))
            s["rx_mbps"].append(round((q.rx_bytes - q.s_rx) * 8 / dt / 1e6, 3))
            s["cc_mbps"].append(round((q.rp.rc if q.rp is not None else
                                       (q.line_bps if q.active else 0.0)) / 1e6, 3))
            s["ce"].append(q.ce - q.s_ce)
            s["cnp"].append(q.cnp_rx - q.s_cnp)
            q.s_tx, q.s_rx, q.s_ce, q.s_cnp = q.sent_bytes, q.rx_bytes, q.ce, q.cnp_rx

    def run(self, seconds: float | None = None, *, stop: Callable[[], bool] = lambda: False,
            deadline: float | None = None, on_started: Callable[[float], None] | None = None
            ) -> LoadResult:
        """Send every added QP, paced, for ``seconds`` (lab s; None: until every byte flow has
        sent its bytes), then drain until :data:`DRAIN_S` s pass without a packet (at most
        :data:`DRAIN_MAX_S`; it ends early once every packet arrived). ``on_started(t0)`` is
        called when sending begins. Returns the
        :class:`LoadResult` (no ``ports``: the caller samples those)."""
        if not self._qps:
            raise RailabError("no load flows: add() at least one")
        if seconds is None and any(q.goal is None for q in self._qps):
            raise RailabError("give seconds, or a byte count for every flow")
        engine = self.engine
        if engine == "auto" and os.environ.get("RAILAB_LOAD_ENGINE") in ("c", "python"):
            engine = os.environ["RAILAB_LOAD_ENGINE"]  # a benchmark's side-by-side choice
        fast = engine == "c" or (engine == "auto" and fastpath.available())
        if not fast and self.nic != "none":
            raise RailabError(f"the NIC transport ({self.nic}) runs on the load engine's compiled "
                              "fast path only: install gcc (scripts/bootstrap.sh), or run without --nic")
        self._attach_board()
        try:
            run = self._run_fast if fast else self._run_python
            return run(seconds, stop=stop, deadline=deadline, on_started=on_started)
        finally:
            self._release_board()

    def _run_python(self, seconds: float | None, *, stop: Callable[[], bool],
                    deadline: float | None, on_started: Callable[[float], None] | None
                    ) -> LoadResult:
        """:meth:`run`'s own per-packet loop (the fast path's rules, in Python)."""
        self.poll(0)
        self._drain_sinks()
        self._rx_drops()  # reading PACKET_STATISTICS zeroes it: the run's count starts here
        cpu0 = time.thread_time()
        if self.rt_priority:
            set_realtime(self.rt_priority)
        t0 = time.monotonic() + 0.01
        k = len(self._qps)
        for i, q in enumerate(self._qps):
            q.t_start = t0 + q.lf.start_s
            if q.failed:  # not sent (per_flow_faults): an interface it needs does not exist
                continue
            q.next_t = q.t_start + i * q.frame_bits / q.line_bps / k  # staggered
            q.active = True
            if self.cc != "none":
                q.rp = (DcqcnRP if self.cc == "dcqcn" else Ns3MlxRP).from_qos(
                    self.qos, now=q.t_start, line_bps=q.line_bps)
        if on_started is not None:
            on_started(t0)
        end = t0 + seconds if seconds is not None else None
        next_sample = t0 + self.sample_s
        next_sink = t0
        while True:
            now = time.monotonic()
            if stop() or (deadline is not None and now >= deadline) or (end is not None and now >= end):
                break
            wait = 0.001
            busy = False
            for q in self._qps:
                if not q.active:
                    continue
                busy = True
                if q.rp is not None:
                    q.rp.tick(now)
                if q.next_t <= now:
                    self._send_due(q, now)
                wait = min(wait, q.next_t - now)
            if not busy and (end is None or all(q.failed for q in self._qps)):
                break  # every byte flow done, or every QP failed: nothing more can be sent
            self._receive(max(0.0, wait))
            now = time.monotonic()
            self._watch_board(now)
            if now >= next_sample:
                self._sample(now, t0, now - next_sample + self.sample_s)
                next_sample += self.sample_s
                if next_sample < now:
                    next_sample = now + self.sample_s
            if now >= next_sink:
                self._drain_sinks()
                next_sink = now + 0.5
        t_end = time.monotonic()
        # drain: while packets still arrive (a paused or deep queue empties at the port rate:
        # a 4 MiB buffer takes 0.8 s at 40 Mb/s), at most DRAIN_MAX_S; stop early once every
        # packet arrived, or DRAIN_S after the last one
        hard = t_end + DRAIN_MAX_S
        last, seen = time.monotonic(), sum(q.rx for q in self._qps)
        while (now := time.monotonic()) < hard and now - last < DRAIN_S:
            self._receive(0.02)
            got = sum(q.rx for q in self._qps)
            if got != seen:
                last, seen = time.monotonic(), got
            if all(q.rx >= q.sent for q in self._qps):
                break
        self._drain_sinks()
        self._cpu_s = time.thread_time() - cpu0
        self._socket_drops = self._rx_drops()
        for q in self._qps:
            if q.sent > q.rx and not q.failed:
                self._diagnose(q)
        return self._result(t0, t_end)

    def _attach_board(self) -> None:
        """Map the switch agent's sender-NIC PAUSE board when one runs (PFC on:
        :class:`railab.testbed.pfc.NicPauseBoard`) and give each QP its NIC's record: a QP
        whose NIC the agent PAUSEs sends nothing until RESUME and banks no time."""
        self._board = NicPauseBoard.attach(labstate.lab_dir(self.spec.name))
        self._board_lost, self._board_check_t = False, 0.0
        for q in self._qps:
            q.pause_at = None
            if self._board is not None and not q.failed and q.tx is not None:
                q.pause_at = self._board.offset((q.flow.src[0], q.tx.getsockname()[0]))

    def _watch_board(self, now: float) -> None:
        """Every :data:`BOARD_CHECK_S`: when the board's writer (the switch agent) is gone, no
        RESUME can come: release every NIC it held (``switch_agent_lost``)."""
        if self._board is None or self._board_lost or now < self._board_check_t:
            return
        self._board_check_t = now + BOARD_CHECK_S
        if self._board.pid is not None and not _alive(self._board.pid):  # gone, or a zombie
            self._board.release_all(now)
            self._board_lost = True

    def _release_board(self) -> None:
        if self._board is None:
            return
        th = getattr(self, "_fast_thread", None)
        if th is not None and th.is_alive():  # an interrupted run's fast path still reads it
            _BOARDS_IN_USE.append(self._board)
        else:
            self._board.close()
        self._board = None

    # ---- the compiled fast path ---------------------------------------------------------------
    def _run_fast(self, seconds: float | None, *, stop: Callable[[], bool],
                  deadline: float | None, on_started: Callable[[float], None] | None) -> LoadResult:
        """:meth:`run` with the per-packet work in :mod:`railab.traffic.fastpath`: the QPs'
        templates, sockets and DCQCN parameters are handed to ``dp_run`` (its own thread; the
        GIL is released), this thread samples the per-QP series every ``sample_s`` off the
        shared counters and passes ``stop()`` on. Same rules, same result as the Python loop."""
        fp = fastpath
        ctx, cq, keep, t0 = self._fast_ctx(seconds, deadline)
        if self.rt_priority:  # the set-up ran at normal priority: see set_realtime
            set_realtime(self.rt_priority)
        view = self._view
        out: list[int] = []
        th = threading.Thread(target=lambda: out.append(fp.run(ctx)), name="railab-fastpath",
                              daemon=True)
        self._fast_thread = th
        if on_started is not None:
            on_started(t0)
        th.start()
        next_sample = t0 + self.sample_s
        stopped = False
        while th.is_alive():
            th.join(max(0.0, min(0.05, next_sample - time.monotonic())))
            if not stopped and stop():
                ctx.stop = stopped = 1
            if ctx.t0 > t0:  # dp_run started later than planned: the series start with it
                next_sample += ctx.t0 - t0
                t0 = ctx.t0
            now = time.monotonic()
            self._watch_board(now)
            if now >= next_sample and ctx.t_end == 0.0:
                self._sample_fast(view, now, t0, now - next_sample + self.sample_s)
                next_sample += self.sample_s
                if next_sample < now:
                    next_sample = now + self.sample_s
        th.join()
        t0 = max(t0, ctx.t0)  # the workers started later than planned: the schedules moved too
        for q, c in zip(self._qps, cq, strict=True):
            q.t_start = c.start_t
        self._ran_with, self._cpu_s = "c", ctx.cpu_s
        self._socket_drops = self._rx_drops()
        self._threads = ctx.nthreads
        if out and out[0] < 0:
            raise RailabError(f"the load engine's fast path could not run: {os.strerror(-out[0])}")
        self._drain_sinks()
        for i, q in enumerate(self._qps):
            _from_c(q, cq[i])
        if ctx.fatal_errno:
            q = self._qps[ctx.fatal_qp]
            raise RailabError(f"{q.flow.src[0]}:eth{q.flow.src_nic}: sending failed: "
                              f"{os.strerror(ctx.fatal_errno)}")
        for q, c in zip(self._qps, cq, strict=True):
            if c.err in (errno.ENETDOWN, errno.ENXIO):
                q.nic_down = q.failed = True
                q.down_nic = f"{q.flow.src[0]}:{q.tx.getsockname()[0]}"
            elif c.err == errno.EMSGSIZE:
                nic = f"{q.flow.src[0]}:{q.tx.getsockname()[0]}"
                big = max(t.size for per in q.tpls for t in per.values()) - 14
                if not self.per_flow_faults:
                    raise RailabError(
                        f"{nic} refused a {big} B packet (EMSGSIZE): its MTU is below the run's "
                        "packets; railab check names the MTU mismatch, or run with a smaller --mtu")
                q.mtu_exceeded, q.failed = nic, True
                q.mtu_note = (f"{big} B packets exceed {nic}'s MTU "
                              f"{self.nic_mtu(q.flow.src[0], q.flow.src_nic)} B "
                              "(refused at the sender, EMSGSIZE)")
        for q in self._qps:
            if q.sent > q.rx and not q.failed:
                self._diagnose(q)
        del keep, view
        return self._result(t0, ctx.t_end)

    def blast(self, seconds: float) -> dict:
        """The kernel limit: every added QP's frames sent round robin for ``seconds`` (lab s),
        unpaced, without DCQCN and without receiving (:func:`railab.traffic.fastpath.blast`).
        Returns ``{"sent", "seconds", "cpu_s", "threads"}``; what arrived is the caller's to
        count on the ports (:class:`PortReader`)."""
        if not self._qps:
            raise RailabError("no load flows: add() at least one")
        ctx, cq, keep, t0 = self._fast_ctx(seconds, None)
        rc = fastpath.blast(ctx)
        if rc < 0:
            raise RailabError(f"the blaster could not run: {os.strerror(-rc)}")
        sent = sum(c.sent for c in cq)
        del keep
        return {"sent": sent, "seconds": round(ctx.t_end - t0, 4), "cpu_s": round(ctx.cpu_s, 4),
                "threads": ctx.nthreads}

    def _fast_ctx(self, seconds: float | None, deadline: float | None) -> tuple:
        """The fast path's context for the added QPs: ``(ctx, qp array, buffers to keep
        alive, t0)``; sending starts at ``t0`` (monotonic s, 10 ms from now)."""
        fp = fastpath
        fp.load()
        self.poll(0)
        self._drain_sinks()
        self._rx_drops()  # reading PACKET_STATISTICS zeroes it: the run's count starts here
        n = len(self._qps)
        cq = (fp.Qp * n)()
        keep: list = []  # template structs and frame buffers the run points into
        for i, q in enumerate(self._qps):
            c = cq[i]
            c.max_idx = -1
            c.last_cnp = -1e18
            c.dqpn, c.sqpn, c.start_psn = q.dqpn, q.sqpn, q.start_psn
            if q.failed:  # not sent (per_flow_faults): an interface it needs does not exist
                c.failed = 1
                continue
            ops = (roce.RC_RDMA_WRITE_FIRST, roce.RC_RDMA_WRITE_MIDDLE, roce.RC_RDMA_WRITE_LAST,
                   roce.RC_RDMA_WRITE_ONLY)
            tpls = (fp.Tpl * (4 * q.ntpl))()
            for k, per_port in enumerate(q.tpls):
                for j, op in enumerate(ops):
                    ft = per_port.get(op) or next(iter(per_port.values()))  # unused slot
                    t, buf = fp.make_tpl(ft.raw(), ft.icrc_tables())
                    tpls[4 * k + j] = t
                    keep.append(buf)
            cnp = ctypes.create_string_buffer(q.cnp_frame, len(q.cnp_frame))
            keep += [tpls, cnp]
            c.tpl = ctypes.cast(tpls, ctypes.POINTER(fp.Tpl))
            c.cnp_frame, c.cnp_len = ctypes.addressof(cnp), len(q.cnp_frame)
            c.tx_fd, c.cnp_fd = q.tx.fileno(), q.cnp_tx.fileno()
            c.ntpl, c.ppm = q.ntpl, q.ppm
            c.goal = -1 if q.goal is None else q.goal
            c.gap_s = q.lf.gap_s
            c.line_bps = q.line_bps
            c.frame_bits = q.frame_bits
            if q.pause_at is not None:
                c.pause = self._board.address(q.pause_at)
            c.active = 1
            q.active = True
            c.cc = int(self.cc != "none")
            c.rtx_one = -1
            if q.ack_tpls is not None:
                c.nic = NIC_MODES.index(self.nic)
                acks = (fp.Tpl * 2)()
                for j, ft in enumerate(q.ack_tpls):
                    t, buf = fp.make_tpl(ft.raw(), ft.icrc_tables())
                    acks[j] = t
                    keep.append(buf)
                keep.append(acks)
                c.ack_tpl = ctypes.cast(acks, ctypes.POINTER(fp.Tpl))
        # the clock starts once every frame is built (960 QPs take ~0.1 s of ctypes work) and
        # the counters' view exists (numpy's first import, ~0.1 s): a start taken before them
        # made every QP of a 1 MiB all-reduce 0.1 s late, a third of its time
        self._view = _counter_view(cq)
        t0 = time.monotonic() + 0.005
        for i, (q, c) in enumerate(zip(self._qps, cq, strict=True)):
            q.t_start = c.start_t = t0 + q.lf.start_s
            if q.failed:
                continue
            c.next_t = q.t_start + i * q.frame_bits / q.line_bps / n  # staggered
            if c.cc:
                fp.rp_init(c.rp, **rp_params(self.qos, q.line_bps), now=q.t_start)
                if self.cc == "dcqcn-ns3":
                    fp.rp_ns3(c.rp, self.qos.capacity.lab_seconds(self.qos.dcqcn.cnp_interval_us))
        rx = [fd for fd in self._rx]
        ctx = fp.Ctx()
        ctx.qps, ctx.nqp = cq, n
        rx_arr = (ctypes.c_int32 * max(1, len(rx)))(*rx)
        ctx.rx_fds, ctx.nrx = rx_arr, len(rx)
        ctx.end_t = t0 + seconds if seconds is not None else 0.0
        ctx.deadline = deadline if deadline is not None else t0 + 1e9
        ctx.cnp_interval = self.pacer.interval_s
        ctx.jitter, ctx.max_lag, ctx.catch_up = PACING_JITTER, MAX_LAG_S, CATCH_UP
        ctx.drain_idle, ctx.drain_max = DRAIN_S, DRAIN_MAX_S
        ctx.rng = random.getrandbits(64) | 1
        ctx.nthreads = fp.threads()
        ctx.rto, ctx.ack_every, ctx.ooo_nak_after = self.rto_s, ACK_EVERY, OOO_NAK_AFTER
        ctx.t0 = t0  # dp_run moves it (and every QP's schedule) to when its workers start
        keep.append(rx_arr)
        return ctx, cq, keep, t0

    def _sample_fast(self, view: dict, now: float, t0: float, dt: float) -> None:
        """One sample of every QP's series off the fast path's counters (``view``: numpy
        columns over the shared QP array, :func:`_counter_view`)."""
        sent_b, rx_b, ce, cnp = (view[k].copy() for k in ("sent_bytes", "rx_bytes", "ce", "cnp_rx"))
        rc, active = view["rc"].copy(), view["active"].copy()
        for i, q in enumerate(self._qps):
            s = q.series
            s["t"].append(round(now - t0, 4))
            s["tx_mbps"].append(round((int(sent_b[i]) - q.s_tx) * 8 / dt / 1e6, 3))
            s["rx_mbps"].append(round((int(rx_b[i]) - q.s_rx) * 8 / dt / 1e6, 3))
            rate = float(rc[i]) if self.cc != "none" and not q.failed else (
                q.line_bps if active[i] else 0.0)
            s["cc_mbps"].append(round(rate / 1e6, 3))
            s["ce"].append(int(ce[i]) - q.s_ce)
            s["cnp"].append(int(cnp[i]) - q.s_cnp)
            q.s_tx, q.s_rx, q.s_ce, q.s_cnp = int(sent_b[i]), int(rx_b[i]), int(ce[i]), int(cnp[i])

    def _diagnose(self, q: _QP) -> None:
        """A QP that lost packets: its destination NIC administratively down (``down_nic``,
        SIOCGIFFLAGS), else with an MTU below the run's packets (``mtu_exceeded``: a veth drops
        a frame longer than its MTU as it arrives; SIOCGIFMTU). Nothing when neither."""
        f = q.flow
        down = self.nic_is_down(f.dst[0], f.dst_nic)
        if down is not None:
            q.down_nic = down
            return
        mtu = self.nic_mtu(f.dst[0], f.dst_nic)
        big = max(t.size for per in q.tpls for t in per.values()) - 14  # IP packet (RETH in FIRST)
        if mtu is not None and big > mtu:
            nic = f"{f.dst[0]}:{self._tx[(f.dst[0], f.dst_nic)].getsockname()[0]}"
            q.mtu_exceeded = nic
            q.mtu_note = f"{big} B packets exceed {nic}'s MTU {mtu} B (dropped on arrival)"

    def _result(self, t0: float, t_end: float) -> LoadResult:
        cap = self.qos.capacity
        dur = max(1e-9, t_end - t0)
        res = LoadResult(cc=self.cc, sport_mode=self.sport_mode, seconds=round(dur, 3),
                         sample_s=self.sample_s, port_rate_mbps=self.line_bps / 1e6,
                         time_scale=cap.time_scale,
                         dcqcn=self.qos.dcqcn.model_dump() if self.cc != "none" else None)
        meant = done = lat_n = 0
        lat_sum = lat_max = 0.0
        for q in self._qps:
            f = q.flow
            half = _last_half_mbps(q.series)
            rx_half = _last_half_mbps(q.series, "rx_mbps")
            d = {"name": f.name, "src": f"{f.src[0]}:gpu{f.src[1]}",
                 "dst": f"{f.dst[0]}:gpu{f.dst[1]}", "src_nic": f.src_nic, "dst_nic": f.dst_nic,
                 "path_class": f.path_class, "qpn": q.sqpn, "dest_qpn": q.dqpn, "sport": q.sport,
                 "tx_packets": q.sent, "tx_bytes": q.sent_bytes, "rx_packets": q.rx,
                 "rx_bytes": q.rx_bytes, "lost": max(0, q.sent - q.rx), "ooo": q.ooo,
                 "max_psn_distance": q.max_psn_dist,
                 "ce_marked": q.ce, "cnp_sent": q.cnp_sent, "cnp_received": q.cnp_rx,
                 "backpressure": q.bp, "nic_down": q.nic_down, "down_nic": q.down_nic,
                 "port_missing": q.port_missing, "mtu_exceeded": q.mtu_exceeded,
                 "mtu_note": q.mtu_note, "icrc_errors": q.icrc_errors,
                 "shortfall": (round(q.deficit_bytes / (q.sent_bytes + q.deficit_bytes), 4)
                               if q.deficit_bytes else 0.0),
                 "goal_packets": q.goal, "expected_hops": f.expected_hops,
                 "hops": None if q.ttl is None else self.ttl - q.ttl,
                 "fct_s": (round(q.t_last_rx - q.t_start, 4)
                           if q.goal is not None and q.rx >= q.goal else None),
                 "late_s": round(q.late_s, 6), "rate_cap_mbps": round(q.line_bps / 1e6, 3),
                 "pfc_holds": q.pfc_holds,
                 "pfc_held_s": round(q.pfc_held_s + (max(0.0, t_end - q.held_since)
                                                     if q.held_since else 0.0), 6),
                 "cnp_transit": _transit(q.cnp_lat, cap.time_scale),
                 "rate_mbps_last_half": half, "rx_mbps_last_half": rx_half,
                 "series": q.series}
            if q.rc is not None:  # the RC transport: what arrived in order, what it cost
                rc = dict(q.rc)
                t_done = rc.pop("t_done")
                finished = q.goal is not None and t_done > 0
                d["fct_s"] = round(t_done - q.t_start, 4) if finished else None
                span = (t_done - q.t_start) if finished else dur
                rc["goodput_mbps"] = round(rc["delivered_packets"] * self.mtu * 8 / max(span, 1e-9) / 1e6, 3)
                d["transport"] = rc
            if q.rp is not None:
                d["dcqcn"] = {"rate_mbps": round(q.rp.rc / 1e6, 3), "target_mbps":
                              round(q.rp.rt / 1e6, 3), "alpha": round(q.rp.alpha, 4),
                              "cuts": q.rp.cuts, "fast_recovery": q.rp.fast,
                              "additive": q.rp.additive, "hyper": q.rp.hyper,
                              "lowest_rate_mbps": round(q.rp.lowest_bps / 1e6, 3)}
            res.flows.append(d)
            res.ce_marked += q.ce
            res.cnp_sent += q.cnp_sent
            res.cnp_received += q.cnp_rx
            res.lost += max(0, q.sent - q.rx)
            res.backpressure += q.bp
            lat_n += q.cnp_lat[0]
            lat_sum += q.cnp_lat[1]
            lat_max = max(lat_max, q.cnp_lat[2])
            meant += q.sent_bytes + q.deficit_bytes
            done += q.sent_bytes
        res.cnp_transit = _transit([lat_n, lat_sum, lat_max], cap.time_scale)
        res.switch_agent_lost = self._board_lost
        res.engine_shortfall = round(1 - done / meant, 4) if meant else 0.0
        res.offered_mbps = round(done * 8 / dur / 1e6, 3)
        res.nic = self.nic
        if self.nic != "none":
            rcs = [f["transport"] for f in res.flows if f.get("transport")]
            fcts = sorted(f["fct_s"] for f in res.flows if f.get("fct_s") is not None)
            res.transport = {
                "nic": self.nic, "rto_lab_s": round(self.rto_s, 6),
                "retx_packets": sum(r["retx_packets"] for r in rcs),
                "retx_bytes": sum(r["retx_bytes"] for r in rcs),
                "naks": sum(r["naks_received"] for r in rcs),
                "timeouts": sum(r["timeouts"] for r in rcs),
                "goodput_mbps": round(sum(r["goodput_mbps"] for r in rcs), 3),
                "fct_p50_s": _pct(fcts, 0.5), "fct_p99_s": _pct(fcts, 0.99)}
        res.engine = self._ran_with
        res.engine_cpu_s = None if self._cpu_s is None else round(self._cpu_s, 4)
        res.engine_threads = self._threads
        res.rx_socket_drops = self._socket_drops
        sent = sum(q.sent for q in self._qps)
        res.engine_pps = round(sent / dur, 1)
        return res


#: CNPs a QP may have in flight for :func:`_transit`'s pairing (``CNP_RING`` in fastpath.c)
CNP_RING = 64


def _transit(lat: list, time_scale: float) -> dict | None:
    """A CNP-transit summary from ``[count, sum, max]`` (lab s): ``{"cnps", "mean_s",
    "max_s", "fabric_mean_us", "fabric_max_us"}`` (fabric us = lab s / ``time_scale``); None
    when no CNP was paired. Measured on the engine's clock: each CNP from the NP's ``send()``
    to the RP's read of it (the fabric's control class both ways through the kernel, and both
    sockets' wait), paired in order with the NP's sends."""
    n, total, top = lat
    if not n:
        return None
    return {"cnps": int(n), "mean_s": round(total / n, 6), "max_s": round(top, 6),
            "fabric_mean_us": round(total / n / time_scale * 1e6, 3),
            "fabric_max_us": round(top / time_scale * 1e6, 3)}


def _reset(q: _QP) -> None:
    """A new QP's counters, series and fault marks, all at zero."""
    q.next_t = 0.0
    q.sent = q.sent_bytes = q.rx = q.rx_bytes = q.ooo = q.ce = q.cnp_sent = q.cnp_rx = 0
    q.max_psn_dist = 0  # receiver's reorder depth (issue 30)
    q.bp = q.deficit_bytes = q.icrc_errors = 0
    q.late_s = 0.0
    q.cnp_ts = deque(maxlen=CNP_RING)  # the NP's send time of each CNP not yet read by the RP
    q.cnp_lat = [0, 0.0, 0.0]          # CNP transits read: count, sum, max (lab s)
    q.pause_at = None                  # its NIC's byte of the PAUSE board (None: none)
    q.held_since = q.pfc_held_s = 0.0  # PFC at its NIC: held since, held in all (lab s)
    q.pfc_holds = 0
    q.rc = None
    q.max_idx = -1
    q.t_start = q.t_last_rx = 0.0
    q.s_tx = q.s_rx = q.s_ce = q.s_cnp = 0
    q.series = {"t": [], "tx_mbps": [], "rx_mbps": [], "cc_mbps": [], "ce": [], "cnp": []}
    q.active = q.nic_down = q.failed = False
    q.ttl = q.port_missing = q.mtu_exceeded = q.mtu_note = q.down_nic = None


def _pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of sorted ``values``, None when empty."""
    if not values:
        return None
    return values[min(len(values) - 1, max(0, int(round(q * len(values) + 0.5)) - 1))]


def _counter_view(cq) -> dict:
    """numpy columns (views, no copy) over a fast-path QP array: ``sent_bytes``, ``rx_bytes``,
    ``ce``, ``cnp_rx``, ``active`` and DCQCN's ``rc`` (bits/s), read while the run writes."""
    import numpy as np  # a dependency; imported here so `railab` commands without a load run skip it

    fp = fastpath
    raw = np.frombuffer(cq, dtype=np.uint8)
    size = ctypes.sizeof(fp.Qp)
    cols = {"sent_bytes": (fp.Qp.sent_bytes.offset, np.int64), "rx_bytes": (fp.Qp.rx_bytes.offset, np.int64),
            "ce": (fp.Qp.ce.offset, np.int64), "cnp_rx": (fp.Qp.cnp_rx.offset, np.int64),
            "active": (fp.Qp.active.offset, np.int32),
            "rc": (fp.Qp.rp.offset + fp.Rp.rc.offset, np.float64)}
    dt = np.dtype({"names": list(cols), "formats": [t for _, t in cols.values()],
                   "offsets": [o for o, _ in cols.values()], "itemsize": size})
    arr = raw.view(dt)
    return {k: arr[k] for k in cols}


def _from_c(q: _QP, c) -> None:
    """Copy a finished fast-path QP's counters into ``q`` (what :meth:`LoadEngine._result`
    reads); its DCQCN state as a :class:`railab.traffic.fastpath.FastRP` view."""
    q.sent, q.sent_bytes, q.rx, q.rx_bytes = c.sent, c.sent_bytes, c.rx, c.rx_bytes
    q.ooo, q.max_psn_dist, q.ce, q.cnp_sent, q.cnp_rx = c.ooo, c.max_psn_dist, c.ce, c.cnp_sent, c.cnp_rx
    q.bp, q.deficit_bytes, q.max_idx = c.bp, c.deficit_bytes, c.max_idx
    q.t_last_rx = c.t_last_rx
    q.late_s = c.late_s
    q.cnp_lat = [c.cnp_lat_n, c.cnp_lat_sum, c.cnp_lat_max]
    q.held_since, q.pfc_held_s, q.pfc_holds = c.held_since, c.pfc_held_s, c.pfc_holds
    q.ttl = c.ttl if c.rx else None
    q.active = bool(c.active)
    q.rp = fastpath.FastRP.of(c.rp) if c.cc else None
    q.rc = None if not c.nic else {
        "nic": NIC_MODES[c.nic], "delivered_packets": c.epsn, "retx_packets": c.retx,
        "retx_bytes": c.retx_bytes, "naks_sent": c.naks_tx, "naks_received": c.naks_rx,
        "acks_sent": c.acks_tx, "acks_received": c.acks_rx, "timeouts": c.timeouts,
        "duplicates": c.dup_rx, "acked_packets": c.una, "t_done": c.t_done}


def _with_sport(raw: bytes, sport: int) -> bytes:
    b = bytearray(raw)
    b[34], b[35] = sport >> 8, sport & 0xFF  # Ethernet 14 + IPv4 20: UDP source port
    return bytes(b)


def _last_half_mbps(series: dict, col: str = "tx_mbps") -> float:
    """Mean of a series column over the last half of its samples (0.0 when empty)."""
    v = series[col]
    tail = v[len(v) // 2:]
    return round(sum(tail) / len(tail), 3) if tail else 0.0


# ---- the parent: port sampling ---------------------------------------------------------------
#: A capacity-dataplane counters reader: ``() -> {"node:port": {"backlog_bytes": int,
#: "dropped": int, "ce_marked": int, "pause_events": int, "paused_s": float, ...}}``,
#: cumulative counters read now (railab.testbed.capacity's counters API fits this shape).
PortSampler = Callable[[], dict[str, dict[str, float]]]
#: Columns of a port sampler that are cumulative (the series holds per-sample deltas).
CUMULATIVE = ("dropped", "ce_marked", "pause_events", "paused_s", "tx_bytes", "tx_packets")


class PortReader:
    """Switch port tx byte counters of a lab (one raw rtnetlink socket per switch,
    :class:`railab.traffic.engine.Rtnl`): ``read() -> {"node:port": tx_bytes}``."""

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str]) -> None:
        self._nl: dict[str, Rtnl] = {}
        self._names: dict[str, dict[int, str]] = {}
        try:
            for n in spec.nodes:
                if n.role == "server":
                    continue
                with in_netns(netns_of(n.name)):
                    nl = self._nl[n.name] = Rtnl()
                self._names[n.name] = {i: name for i, (name, _mac) in nl.links().items()}
        except BaseException:
            self.close()
            raise

    def read(self) -> dict[str, int]:
        """``"node:port" -> tx_bytes`` of every switch port but ``lo``, read now."""
        out = {}
        for node, nl in self._nl.items():
            names = self._names[node]
            for idx, st in nl.stats().items():
                name = names.get(idx)
                if name and name != "lo":
                    out[f"{node}:{name}"] = st[3]
        return out

    def close(self) -> None:
        """Close every socket (idempotent)."""
        for nl in self._nl.values():
            nl.close()
        self._nl = {}


def _child(spec_json: str, ns_map: dict[str, str], flows: list[LoadFlow], kw: dict,
           seconds: float | None, max_s: float, ppid: int, stop, conn) -> None:
    def work() -> LoadResult:
        spec = LabSpec.model_validate_json(spec_json)
        with LoadEngine(spec, ns_map.__getitem__, **kw) as eng:
            eng.rt_priority = LOAD_RT_PRIORITY  # for the run, not for the set-up before it
            for lf in flows:
                eng.add(lf)
            res = eng.run(seconds, stop=stop.is_set, deadline=time.monotonic() + max_s,
                          on_started=lambda t0: conn.send(("started", t0)))
        res.engine_priority = scheduling()
        return res

    run_sender_child(ppid, conn, work)


def run_load(spec: LabSpec, netns_of: Callable[[str], str], flows: Iterable[LoadFlow], *,
             cc: str = "dcqcn", seconds: float | None = None, sport_mode: str = "per-qp",
             sample_s: float = DEFAULT_SAMPLE_S, mtu: int = DEFAULT_MTU,
             message_bytes: int = DEFAULT_MESSAGE_BYTES, line_mbps: float | None = None,
             port_sampler: PortSampler | None = None, stop: Callable[[], bool] | None = None,
             max_s: float = 300.0, min_port_share: float = 0.01,
             dcqcn: DcqcnProfile | None = None, per_flow_faults: bool = False,
             engine: str = "auto", nic: str = "none") -> LoadResult:
    """Run ``flows`` on the lab's load engine in a child process and measure.

    ``cc``: ``dcqcn`` | ``none``; ``seconds``: run length in lab seconds (None: until every
    flow, each with ``LoadFlow.bytes``, has delivered its bytes); ``sport_mode``: ``per-qp`` |
    ``fixed`` | ``spray``; ``sample_s``: period of every time series; ``line_mbps``: the QPs'
    line rate (default ``qos.capacity.port_rate_mbps``). ``port_sampler`` (see
    :data:`PortSampler`) adds the capacity dataplane's counters to the port series and fills
    ``dropped`` and ``pause_events``; without one they stay None (and ``lost``, measured end to
    end, is what there is). Ports whose tx bytes moved by less than ``min_port_share`` of the
    busiest port's are left out of ``ports`` (BGP/BFD-only ports). ``stop()`` ends the run
    early (Ctrl-C); ``max_s`` is the child's hard limit; ``dcqcn`` a DCQCN profile for the run
    instead of the lab's ``qos.dcqcn`` (recorded in ``LoadResult.dcqcn``); ``per_flow_faults``
    fails a QP that cannot be sent (a pulled cable, a sender MTU below the packets) instead of
    the run (:class:`LoadEngine`: the flow dict's ``port_missing`` / ``mtu_exceeded``);
    ``engine``: ``auto`` | ``c`` | ``python`` (:data:`ENGINES`: who does the per-packet work);
    ``nic``: the NICs' RC transport (:data:`NIC_MODES`; not ``none`` needs the fast path). Raises
    RailabError when the engine cannot open its sockets or fails (its message).

    Example (what ``railab collective`` builds on)::

        flows = [LoadFlow(route(spec, Flow(("srv2", 0), ("srv1", 0))), bytes=8 << 20)]
        res = run_load(spec, ref.netns_of, flows, cc="dcqcn")
        res.flows[0]["fct_s"], res.ports["g1-leaf1:eth1"]["tx_mbps"]
    """
    flows = list(flows)
    if not flows:
        raise RailabError("no load flows to run")
    if seconds is not None and not 0 < seconds <= max_s:
        raise RailabError(f"run length must be > 0 and <= {max_s:g} s (got {seconds:g})")
    kw = dict(cc=cc, sport_mode=sport_mode, mtu=mtu, message_bytes=message_bytes,
              sample_s=sample_s, line_mbps=line_mbps, dcqcn=dcqcn, per_flow_faults=per_flow_faults,
              engine=engine, nic=nic)
    LoadEngine(spec, netns_of, **kw)  # validate the options here, before forking
    if spec.qos.capacity.enabled:  # a killed run's slowed ports: back to the lab's own rate
        restore_leftover(spec, netns_of)
    ns = {n.name: netns_of(n.name) for n in spec.nodes}
    reader = PortReader(spec, netns_of)
    ctx = mp.get_context("fork")
    stop_ev = ctx.Event()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, name="railab-load", daemon=True,
                       args=(spec.model_dump_json(), ns, flows, kw, seconds, max_s, os.getpid(),
                             stop_ev, child))
    series: dict[str, dict] = {}
    cap_series: dict[str, dict] = {}
    restore = None
    try:
        proc.start()
        child.close()
        restore = _sampler_priority()
        msg = _recv(parent, 60.0)
        if msg[0] != "started":
            raise RailabError(f"load engine did not start: {msg[1]}")
        t0 = msg[1]
        prev_cap = port_sampler() if port_sampler else {}
        first_cap = prev_cap
        prev_tx = reader.read()
        prev_t = time.monotonic()
        next_t = prev_t + sample_s
        while True:
            if stop is not None and stop():
                stop_ev.set()
            if parent.poll(max(0.0, next_t - time.monotonic())):
                break
            now = time.monotonic()
            if now - prev_t < 0.5 * sample_s:  # too short a window: a packet is a big rate
                next_t = prev_t + sample_s
                continue
            tx = reader.read()
            dt = now - prev_t
            for port, b in tx.items():
                s = series.setdefault(port, {"t": [], "tx_mbps": []})
                s["t"].append(round(now - t0, 4))
                s["tx_mbps"].append(round((b - prev_tx.get(port, b)) * 8 / dt / 1e6, 3))
            prev_tx, prev_t = tx, now
            if port_sampler is not None:
                cur = port_sampler()
                for port, row in cur.items():
                    s = cap_series.setdefault(port, {"t": []})
                    s["t"].append(round(now - t0, 4))
                    for k, v in row.items():
                        base = prev_cap.get(port, {}).get(k, v) if k in CUMULATIVE else 0
                        s.setdefault(k, []).append(round(v - base, 6))
                prev_cap = cur
            next_t += sample_s
            if next_t < time.monotonic():
                next_t = time.monotonic() + sample_s
        msg = _recv(parent, 60.0)
        if msg[0] != "done":
            raise RailabError(f"load engine failed: {msg[1]}")
        res: LoadResult = msg[1]
        if port_sampler is not None:
            last = port_sampler()
            res.dropped = int(sum(r.get("dropped", 0) - first_cap.get(p, {}).get("dropped", 0)
                                  for p, r in last.items()))
            res.pause_events = int(sum(r.get("pause_events", 0)
                                       - first_cap.get(p, {}).get("pause_events", 0)
                                       for p, r in last.items()))
    finally:
        if restore is not None:
            restore()
        stop_ev.set()
        proc.join(5.0)
        if proc.is_alive():
            proc.kill()
            proc.join(2.0)
        parent.close()
        reader.close()
    # the port series cover the sending period (as the flow series do), not the drain
    horizon = res.seconds + 0.5 * sample_s
    series = {p: _until(s, horizon) for p, s in series.items()}
    cap_series = {p: _until(s, horizon) for p, s in cap_series.items()}
    if port_sampler is not None:  # every sampled port (NICs too), not only the listed ones
        res.pause_events_last_half = int(sum(
            v for s in cap_series.values()
            for t, v in zip(s["t"], s.get("pause_events", ()), strict=False) if t > res.seconds / 2))
        deepest = max(((max(s.get("backlog_bytes") or [0]), p) for p, s in cap_series.items()),
                      default=(0, None))
        res.queue_peak_bytes, res.queue_peak_port = int(deepest[0]), deepest[1]
    peak = max((sum(s["tx_mbps"]) for s in series.values()), default=0.0)
    for port, s in series.items():
        if peak and sum(s["tx_mbps"]) >= min_port_share * peak:
            row = dict(s)
            for k, v in cap_series.get(port, {}).items():
                if k != "t":
                    row[k] = v
            res.ports[port] = row
    return res


#: Real-time priority of the thread that samples the ports during a load run: above the
#: engine's workers (:data:`LOAD_RT_PRIORITY`), which may take both cores while host-bound, so
#: the series are sampled on time; below the switch agent's.
SAMPLER_RT_PRIORITY = LOAD_RT_PRIORITY + 1


def _sampler_priority() -> Callable[[], None] | None:
    """Raise the calling thread to ``SCHED_RR`` :data:`SAMPLER_RT_PRIORITY` for the run; returns
    the function that puts its scheduling back (None where the kernel refuses, e.g. not root)."""
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(SAMPLER_RT_PRIORITY))
    except (OSError, AttributeError):
        return None

    def restore() -> None:
        try:
            os.sched_setscheduler(0, policy, param)
        except OSError:
            pass
    return restore


def _until(s: dict, horizon: float) -> dict:
    """A columnar series cut to the samples with ``t <= horizon``."""
    n = sum(1 for t in s["t"] if t <= horizon)
    return {k: v[:n] for k, v in s.items()}


def _recv(conn, timeout: float) -> tuple[str, object]:
    return recv_from_child(conn, timeout, "load engine")


def fairness(result: LoadResult, share_mbps: float | None = None) -> list[float]:
    """Each flow's receive rate over the last half of the run divided by the fair share
    (``share_mbps``, default the port rate / number of flows): 1.0 = exactly fair."""
    n = len(result.flows)
    share = share_mbps if share_mbps is not None else result.port_rate_mbps / max(1, n)
    return [round(f["rx_mbps_last_half"] / share, 3) for f in result.flows]


#: The fair-share criterion's tolerance: every sender within this share of 1/N of the port rate.
FAIR_TOLERANCE = 0.25


def fair_share(result: LoadResult, tolerance: float = FAIR_TOLERANCE,
               share_mbps: float | None = None) -> dict:
    """The fair-share verdict of a run (the ``fair_share`` block of the congestion JSON).

    Each flow's **receive** rate over the last half of the run (``rx_mbps_last_half``: frame
    bytes over the second half of the flow's samples) divided by the fair share ``share_mbps``
    (default port rate / number of flows: 1/N of the bottleneck port for an N:1 incast).
    Issue 14's criterion: every ratio within ``1 +- tolerance`` (0.25 by default).

    Beside it, what did the work: ``cc_ratios``, each QP's DCQCN rate (``series.cc_mbps``)
    over the same half divided by the share (near 1: DCQCN itself holds the share; well above
    1: the senders offer more and the queues or PFC PAUSEs hold them back), and
    ``pause_events_last_half``, the PFC PAUSEs of every sampled port (NICs included) after
    the run's midpoint (:attr:`LoadResult.pause_events_last_half`; None without a port
    sampler). Returns ``{"share_mbps", "tolerance", "window_s": [from, to] (lab s),
    "ratios", "min", "max", "sum_mbps", "cc_ratios", "pause_events_last_half",
    "within": bool}``; with no flow ``within`` is False.
    """
    n = len(result.flows)
    share = share_mbps if share_mbps is not None else result.port_rate_mbps / max(1, n)
    ratios = fairness(result, share)
    ts = result.flows[0]["series"]["t"] if n else []
    half = len(ts) // 2
    window = [round(max(0.0, ts[half] - result.sample_s), 3), ts[-1]] if ts else [0.0, 0.0]
    cc = [round(_last_half_mbps(f["series"], "cc_mbps") / share, 3) for f in result.flows]
    return {"share_mbps": round(share, 3), "tolerance": tolerance, "window_s": window,
            "ratios": ratios, "min": min(ratios, default=0.0), "max": max(ratios, default=0.0),
            "sum_mbps": round(sum(f["rx_mbps_last_half"] for f in result.flows), 3),
            "cc_ratios": cc, "pause_events_last_half": result.pause_events_last_half,
            "within": bool(ratios) and all(abs(r - 1.0) <= tolerance for r in ratios)}


#: DCQCN's steady state for an N:1 incast on one port, as a check a planner can read off a run
#: (DCQCN keeps the bottleneck near full with every flow near its fair share: Zhu et al.,
#: SIGCOMM 2015, and the fluid model of Zhu et al., CoNEXT 2016; the numbers are issue 28's):
#: with PFC on, the port at least STEADY_UTIL_PFC used and every sender within STEADY_BAND of
#: its share; with PFC off, at least STEADY_UTIL_LOSSY used and at most STEADY_DROP_PCT % of the
#: packets sent dropped (without PFC the onset may drop: DCQCN does not replace PFC, SIGCOMM
#: 2015 "Need for PFC").
STEADY_UTIL_PFC, STEADY_UTIL_LOSSY, STEADY_BAND, STEADY_DROP_PCT = 0.90, 0.85, 0.15, 1.0


def steady_state_check(utilization: float, ratios: list[float], dropped_pct: float, *,
                       pfc: bool) -> dict:
    """The DCQCN steady-state check of one incast run (the ``congestion.steady_state_check``
    object): ``utilization`` the receiver's port used over the last half (0-1, measured),
    ``ratios`` each sender's receive rate over its fair share (last half), ``dropped_pct`` the
    share of the packets sent that the queues dropped (%). Returns ``{"pfc", "utilization",
    "utilization_min", "ratio": {"min", "max"}, "band" (PFC on) | "dropped_pct",
    "dropped_max_pct" (PFC off), "met": bool, "rule": words}`` with the thresholds above.
    Raises ValueError without a sender."""
    if not ratios:
        raise ValueError("steady_state_check: no sender")
    lo, hi = min(ratios), max(ratios)
    out = {"pfc": "on" if pfc else "off", "utilization": round(utilization, 4),
           "ratio": {"min": round(lo, 3), "max": round(hi, 3)}}
    if pfc:
        out.update(utilization_min=STEADY_UTIL_PFC, band=STEADY_BAND,
                   met=utilization >= STEADY_UTIL_PFC and lo >= 1 - STEADY_BAND
                   and hi <= 1 + STEADY_BAND,
                   rule=f"port >= {STEADY_UTIL_PFC:.0%} used and every sender within "
                        f"{STEADY_BAND:.0%} of its share")
    else:
        out.update(utilization_min=STEADY_UTIL_LOSSY, dropped_pct=round(dropped_pct, 3),
                   dropped_max_pct=STEADY_DROP_PCT,
                   met=utilization >= STEADY_UTIL_LOSSY and dropped_pct <= STEADY_DROP_PCT,
                   rule=f"port >= {STEADY_UTIL_LOSSY:.0%} used and at most "
                        f"{STEADY_DROP_PCT:g} % of the packets dropped")
    return out


__all__ = ["CC_MODES", "FAIR_TOLERANCE", "FIXED_SPORT", "SPORT_MODES", "CnpPacer", "DcqcnRP",
           "LoadEngine", "LoadFlow", "LoadFlowResult", "LoadResult", "Ns3MlxRP", "PortReader",
           "PortSampler",
           "fair_share", "fairness", "flow_results", "qp_sport", "run_load", "spray_ports",
           "steady_state_check"]
