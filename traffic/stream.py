"""Continuous RoCEv2 probe streams: per-flow loss, outages, reordering and latency at a stated rate.

A probe stream is one RoCEv2 flow (RC RDMA WRITE ONLY frames, one per probe) sent at ``rate``
packets/s for as long as it runs, so the probe rate is the time resolution of every outage it
measures: 1000 packets/s per flow = 1 ms. Frames are built with :mod:`railab.traffic.roce`
(scapy once per flow, then :class:`~railab.traffic.roce.FrameTemplate` patches the PSN and ICRC
per probe) and carry the flow's UDP source port (:func:`railab.traffic.engine.flow_qpns` ->
:func:`~railab.traffic.roce.udp_sport`), so ECMP hashes a stream exactly like the engine's flow of
the same name and like :func:`railab.checks.drill` traced it. The sockets, the namespaces they are
opened in, the leaf MACs and the receive filter are :class:`railab.traffic.engine.Engine`'s
(:class:`StreamEngine` subclasses it and adds the streaming loop only).

Sequence: the BTH PSN (24 bits) numbers the probes from a per-stream start PSN; the receiver maps
``(PSN - start) mod 2^24`` back to the probe index. Per stream (:class:`SeqStats`, pure, unit
tested on synthetic sequences) the receiver counts what clabgen's ``measure()`` reports:

* ``tx``, ``rx`` (distinct probes delivered), ``lost`` = tx - rx, ``loss_pct``;
* ``outages``: maximal runs of consecutive lost probes; an outage lasts from the send time of
  its first lost probe to the send time of the first probe delivered after it (so one lost
  probe at 1000 pps is a 1 ms outage), or to the end of sending when nothing came back;
  ``longest_gap_ms`` is the longest;
* ``reordered``: probes that arrive with an index below the next expected one (RFC 4737
  section 3: a "reordered" packet's sequence number is smaller than NextExp);
* ``duplicate``: extra copies of a probe already delivered;
* latency (us) min/avg/max of first copies: receive time minus send time on this process's
  ``CLOCK_MONOTONIC`` (sender and receiver are one process), so it includes the host's own
  scheduling -- a few tens of us idle, more on a loaded host: it shows queueing and detours, it
  is not a NIC timestamp.

:class:`StreamProcess` runs the streams in a forked child process (its own GIL, so a drill's
check polling in the parent does not delay probes), tied to the parent with
``PR_SET_PDEATHSIG`` and a hard deadline, so a crashed or killed parent never leaves a sender
running; the child ignores SIGINT and stops when the parent says so.
"""

from __future__ import annotations

import ctypes
import errno
import math
import multiprocessing as mp
import os
import signal
import socket
import struct
import time
import traceback
from array import array
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from railab.errors import RailabError
from railab.topologies.labspec import LabSpec
from railab.traffic import roce
from railab.traffic.engine import PACKET_OUTGOING, Engine, flow_qpns
from railab.traffic.patterns import Flow

MASK24 = 0xFFFFFF
#: Default probe rate per stream, packets/s (1 ms outage resolution).
DEFAULT_RATE = 1000.0
#: Highest probe rate per stream accepted (one Python process sends and receives every stream).
MAX_RATE = 20000.0
#: RDMA WRITE payload bytes per probe (small frames: the stream costs little of the fabric).
DEFAULT_PROBE_BYTES = 256
#: After sending stops, how long (s) the receiver keeps reading before counting the rest as lost.
DRAIN_S = 0.3
#: Most probes one stream may send in one loop turn to catch up after the host stalled it.
CATCH_UP = 64
#: Scheduling niceness of the stream process (root only; else it keeps the parent's): a sender
#: that waits for a CPU leaves holes in the probe sequence that look like fabric outages.
SENDER_NICE = -10
SO_TIMESTAMPNS = 35  # include/uapi/asm-generic/socket.h (SCM_TIMESTAMPNS, struct timespec)


@dataclass(frozen=True)
class Outage:
    """One run of consecutive lost probes: ``first``..``first + packets - 1`` (probe indexes),
    ``start`` = send time (monotonic s) of the first lost probe, ``end`` = send time of the first
    probe delivered after the run, or the end of sending when none was (``recovered`` False)."""

    first: int
    packets: int
    start: float
    end: float
    recovered: bool

    @property
    def ms(self) -> float:
        """Duration in milliseconds."""
        return (self.end - self.start) * 1000.0


class SeqStats:
    """Receive-side accounting of one probe stream (pure: no sockets, fed by index and time).

    ``sent(t)`` appends a probe sent at monotonic time ``t`` and returns its index;
    ``received(idx, t)`` accounts one arrival of probe ``idx`` at ``t`` and returns ``"new"``,
    ``"duplicate"``, ``"reordered"`` (new, but below the next expected index: RFC 4737) or
    ``"stray"`` (an index never sent: not this stream's probe). :meth:`outages` and
    :meth:`summary` read the result; ``end`` is when sending stopped (default: one probe
    interval after the last send at ``rate``).
    """

    __slots__ = ("rate", "tx_t", "rx_t", "copies", "next_exp", "reordered", "duplicate",
                 "stray", "icrc_errors", "lat_sum", "lat_min", "lat_max", "rx", "ttl_min",
                 "local_drops", "end")

    def __init__(self, rate: float) -> None:
        if not rate > 0:
            raise ValueError(f"probe rate must be > 0 packets/s (got {rate})")
        self.rate = float(rate)
        self.tx_t = array("d")
        self.rx_t = array("d")
        self.copies = bytearray()
        self.next_exp = 0
        self.reordered = 0
        self.duplicate = 0
        self.stray = 0
        self.icrc_errors = 0
        self.lat_sum = 0.0
        self.lat_min = math.inf
        self.lat_max = 0.0
        self.rx = 0
        self.ttl_min: int | None = None
        self.local_drops = 0
        self.end: float | None = None

    @property
    def tx(self) -> int:
        """Probes sent."""
        return len(self.tx_t)

    def sent(self, t: float) -> int:
        """Record one probe sent at ``t`` (monotonic s); returns its index."""
        self.tx_t.append(t)
        self.rx_t.append(math.nan)
        self.copies.append(0)
        return len(self.tx_t) - 1

    def received(self, idx: int, t: float, ttl: int | None = None) -> str:
        """Account one arrival of probe ``idx`` at ``t`` (see the class docstring)."""
        if not 0 <= idx < len(self.tx_t):
            self.stray += 1
            return "stray"
        if self.copies[idx]:
            self.duplicate += 1
            if self.copies[idx] < 255:
                self.copies[idx] += 1
            return "duplicate"
        self.copies[idx] = 1
        self.rx_t[idx] = t
        self.rx += 1
        lat = t - self.tx_t[idx]
        self.lat_sum += lat
        self.lat_min = min(self.lat_min, lat)
        self.lat_max = max(self.lat_max, lat)
        if ttl is not None and (self.ttl_min is None or ttl < self.ttl_min):
            self.ttl_min = ttl
        if idx < self.next_exp:
            self.reordered += 1
            return "reordered"
        self.next_exp = idx + 1
        return "new"

    def outages(self) -> list[Outage]:
        """Maximal runs of consecutive probes never delivered, in send order (see :class:`Outage`)."""
        out: list[Outage] = []
        n = len(self.tx_t)
        end = self.end if self.end is not None else (
            self.tx_t[-1] + 1.0 / self.rate if n else 0.0)
        i = 0
        copies = self.copies
        while i < n:
            if copies[i]:
                i += 1
                continue
            j = i
            while j < n and not copies[j]:
                j += 1
            if j < n:
                out.append(Outage(i, j - i, self.tx_t[i], self.tx_t[j], True))
            else:
                out.append(Outage(i, j - i, self.tx_t[i], max(end, self.tx_t[i]), False))
            i = j
        return out

    def summary(self) -> dict:
        """``{"tx", "rx", "lost", "max_send_gap_ms", "loss_pct", "longest_gap_ms", "outages", "reordered",
        "duplicate", "stray", "icrc_errors", "local_drops", "latency_us": {"min", "avg",
        "max"}, "ttl_min"}``; latencies None when nothing arrived; outages as dicts with
        ``first``, ``packets``, ``start``/``end`` (monotonic s), ``ms``, ``recovered``.
        ``max_send_gap_ms``: the longest time between two consecutive sends (the sender's own
        stalls on a busy host: nothing inside such a gap was probed, so it bounds the resolution
        of any outage that overlaps it)."""
        outs = self.outages()
        tx = self.tx
        lost = tx - self.rx
        lat = None
        if self.rx:
            lat = {"min": round(self.lat_min * 1e6, 1), "avg": round(self.lat_sum / self.rx * 1e6, 1),
                   "max": round(self.lat_max * 1e6, 1)}
        t = self.tx_t
        send_gap = max((t[i + 1] - t[i] for i in range(len(t) - 1)), default=0.0)
        return {
            "tx": tx, "rx": self.rx, "lost": lost,
            "max_send_gap_ms": round(send_gap * 1000.0, 3),
            "loss_pct": round(100.0 * lost / tx, 3) if tx else 0.0,
            "longest_gap_ms": round(max((o.ms for o in outs), default=0.0), 3),
            "outages": [dict(asdict(o), ms=round(o.ms, 3)) for o in outs],
            "reordered": self.reordered, "duplicate": self.duplicate, "stray": self.stray,
            "icrc_errors": self.icrc_errors, "local_drops": self.local_drops,
            "latency_us": lat, "ttl_min": self.ttl_min,
        }


@dataclass
class StreamResult:
    """What one probe stream measured: the flow (``name``, ``src``/``dst`` as ``srv1:gpu0``, NICs,
    path class, UDP source port ``sport``), the probe ``rate`` (packets/s) and the
    :meth:`SeqStats.summary` fields (``stats``)."""

    name: str
    src: str
    dst: str
    src_nic: int
    dst_nic: int
    path_class: str
    sport: int
    rate: float
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready: the flow fields and the summary fields at the top level."""
        d = {k: v for k, v in asdict(self).items() if k != "stats"}
        d.update(self.stats)
        return d


def flow_sport(flow: Flow) -> int:
    """The UDP source port the engine and the streams send ``flow`` with (its ECMP entropy):
    ``flow.sport`` when the caller fixed one, else ``roce.udp_sport(*engine.flow_qpns(flow))``."""
    return flow.sport if flow.sport is not None else roce.udp_sport(*flow_qpns(flow))


class _Stream:
    __slots__ = ("flow", "stats", "tpl", "tx", "start_psn", "dqpn", "next_t", "sport", "down")


class StreamEngine(Engine):
    """The traffic engine's sockets (``Engine.open``: per-NIC send sockets, the per-server BPF
    receive socket, UDP sinks, leaf MACs) driving continuous probe streams.

    ``add(flow, rate)`` prepares one stream (raises RailabError for an intra-server flow, which
    never leaves the server, or a rate outside 0 < rate <= :data:`MAX_RATE`);
    :meth:`stream` sends every stream at its rate until ``stop()`` returns True, then drains
    for :data:`DRAIN_S` s. Use as a context manager like :class:`Engine`.
    """

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str] | None = None, *,
                 probe_bytes: int = DEFAULT_PROBE_BYTES) -> None:
        super().__init__(spec, netns_of)
        if not 16 <= probe_bytes <= 4096:
            raise RailabError(f"probe size must be 16-4096 payload bytes (got {probe_bytes})")
        self.probe_bytes = probe_bytes
        self._streams: list[_Stream] = []
        self._by_dqpn: dict[int, _Stream] = {}
        self._stamps = False

    def add(self, flow: Flow, rate: float = DEFAULT_RATE) -> None:
        """Prepare a probe stream for the routed ``flow`` at ``rate`` packets/s."""
        if not flow.path_class:
            raise RailabError(f"flow {flow.name} is not routed: build it with railab.traffic.patterns.route()")
        if flow.path_class == "intra-server":
            raise RailabError(f"flow {flow.name} is intra-server (NVLink): it never reaches the fabric; "
                              "pick flows between servers")
        if not 0 < rate <= MAX_RATE:
            raise RailabError(f"probe rate must be > 0 and <= {MAX_RATE:g} packets/s per flow (got {rate:g})")
        s = _Stream()
        s.flow = flow
        s.stats = SeqStats(rate)
        s.dqpn = self._qpn_next
        self._qpn_next = (self._qpn_next + 2) & MASK24 or 0x10000
        s.start_psn = (s.dqpn * 2654435761) & MASK24
        src = self.spec.nic(flow.src[0], flow.src_nic)
        dst = self.spec.nic(flow.dst[0], flow.dst_nic)
        self.require(flow)
        s.tx = self._tx[(flow.src[0], flow.src_nic)]
        s.sport = flow_sport(flow)
        payload = bytes((i * 31 + flow.qp) & 0xFF for i in range(self.probe_bytes))
        s.tpl = roce.FrameTemplate(roce.roce_packet(
            src_mac=self._src_mac[(flow.src[0], flow.src_nic)],
            dst_mac=self._gw_mac[(flow.src[0], flow.src_nic)],
            src_ip=str(src.address.ip), dst_ip=str(dst.address.ip), dst_qpn=s.dqpn,
            sport=s.sport, psn=0, ttl=self.ttl, qos=self.qos, opcode=roce.RC_RDMA_WRITE_ONLY,
            payload=payload, va=0x7F0000000000, rkey=s.dqpn))
        s.next_t = 0.0
        s.down = False
        self._streams.append(s)
        self._by_dqpn[s.dqpn] = s

    def _rx_one(self, buf: bytearray, n: int, now: float) -> None:
        if n < 14 + 20 + 8 + 12 or buf[12] != 0x08 or buf[13] != 0x00 or buf[23] != 17:
            return
        _op, dqpn, psn, _ack = roce.parse_bth(buf)
        s = self._by_dqpn.get(dqpn)
        if s is None:
            return
        ip_len = (buf[16] << 8) | buf[17]
        if 14 + ip_len > n or not roce.check_icrc(memoryview(buf)[:14 + ip_len]):
            s.stats.icrc_errors += 1
            return
        s.stats.received((psn - s.start_psn) & MASK24, now, buf[22])

    def _stamp_rx(self) -> None:
        """Ask the kernel for a receive timestamp on every receive socket (SO_TIMESTAMPNS), so
        latency does not include the time a busy host left a probe queued in the socket."""
        for _fd, (_srv, sock) in self._rx.items():
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                return
        self._stamps = True

    def _receive(self, timeout: float) -> None:
        assert self._ep is not None
        buf = self._buf
        views = [buf]
        # kernel stamps are CLOCK_REALTIME: mapped onto the monotonic clock of the send times
        off = time.time() - time.monotonic()
        for fd, _ in self._ep.poll(timeout):
            sock = self._rx[fd][1]
            while True:
                try:
                    n, anc, _flags, addr = sock.recvmsg_into(views, 64)
                except BlockingIOError:
                    break
                if addr[2] == PACKET_OUTGOING:
                    continue
                now = time.monotonic()
                for level, typ, data in anc:
                    if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(data) >= 16:
                        sec, nsec = struct.unpack_from("=qq", data)
                        now = min(now, sec + nsec * 1e-9 - off)
                self._rx_one(buf, n, now)

    def _send_due(self, s: _Stream, now: float) -> None:
        interval = 1.0 / s.stats.rate
        burst = 0
        while s.next_t <= now and burst < CATCH_UP:
            idx = s.stats.tx
            frame = s.tpl.frame((s.start_psn + idx) & MASK24)
            t = time.monotonic()
            try:
                s.tx.send(frame)
            except (BlockingIOError, InterruptedError):
                s.stats.local_drops += 1
                return  # the host's send queue is full: try again next turn, not counted as sent
            except OSError as e:
                if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                    s.stats.local_drops += 1
                    return
                if e.errno not in (errno.ENETDOWN, errno.ENXIO):
                    raise
                s.down = True  # the source NIC is down: the probe is lost at the sender
            s.stats.sent(t)
            s.next_t += interval
            burst += 1
        if s.next_t <= now - 0.5:
            s.next_t = now  # stalled for > 0.5 s (host suspended): resume, do not burst

    def stream(self, stop: Callable[[], bool], *, on_started: Callable[[float], None] | None = None,
               deadline: float | None = None) -> list[StreamResult]:
        """Send every added stream at its rate until ``stop()`` is true (checked every loop turn,
        at most ~1 ms apart) or monotonic ``deadline`` passes, then receive for :data:`DRAIN_S` s.

        ``on_started(t0)`` is called once the first probe of every stream is out. Streams are
        staggered over one interval so probes of different flows do not leave in bursts.
        Returns one :class:`StreamResult` per stream, in the order added.
        """
        if not self._streams:
            raise RailabError("no probe streams: add() at least one flow")
        if not self._stamps:
            self._stamp_rx()
        self.poll(0)
        self._drain_sinks()
        t0 = time.monotonic() + 0.01
        k = len(self._streams)
        for i, s in enumerate(self._streams):
            s.next_t = t0 + i / (k * s.stats.rate)
        started = False
        while True:
            now = time.monotonic()
            if stop() or (deadline is not None and now >= deadline):
                break
            for s in self._streams:
                if s.next_t <= now:
                    self._send_due(s, now)
            if not started and all(s.stats.tx for s in self._streams):
                started = True
                if on_started is not None:
                    on_started(t0)
            wait = min(s.next_t for s in self._streams) - time.monotonic()
            self._receive(min(0.001, max(0.0, wait)))
            self._drain_sinks()
        end = time.monotonic()
        for s in self._streams:
            s.stats.end = end
        drain_end = end + DRAIN_S
        while (left := drain_end - time.monotonic()) > 0:
            self._receive(min(0.02, left))
        self._drain_sinks()
        return [self.result(s) for s in self._streams]

    def result(self, s: _Stream) -> StreamResult:
        """The :class:`StreamResult` of one stream as measured so far."""
        f = s.flow
        return StreamResult(name=f.name, src=f"{f.src[0]}:gpu{f.src[1]}", dst=f"{f.dst[0]}:gpu{f.dst[1]}",
                            src_nic=f.src_nic, dst_nic=f.dst_nic, path_class=f.path_class,
                            sport=s.sport, rate=s.stats.rate, stats=s.stats.summary())


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills this process when its parent dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def scheduling() -> str:
    """This process's CPU scheduling in words: ``"SCHED_RR 5"`` / ``"SCHED_FIFO 5"``
    (real-time, with its priority), ``"nice -10"`` or ``"normal"``."""
    try:
        policy = os.sched_getscheduler(0)
        if policy in (os.SCHED_RR, os.SCHED_FIFO):
            name = "SCHED_RR" if policy == os.SCHED_RR else "SCHED_FIFO"
            return f"{name} {os.sched_getparam(0).sched_priority}"
    except (OSError, AttributeError):
        pass
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    return f"nice {nice}" if nice else "normal"


def set_realtime(rt_priority: int) -> bool:
    """Put the calling thread (and the threads it starts from now on) under ``SCHED_RR`` at
    ``rt_priority`` (1-99); False where the kernel refuses (no CAP_SYS_NICE): it stays as it was.

    Call it right before the per-packet work, not before the set-up: the kernel gives real-time
    threads at most ``sched_rt_runtime_us`` (950 ms) of each ``sched_rt_period_us`` (1 s) of a
    CPU and then stops them for the rest of the period. A load run that built its 32 QPs'
    templates at real-time priority stalled ~50 ms as it began (both workers at once: every QP
    of a 1 MiB all-reduce 35-48 ms late, keeps_rate false in 9 of 9 runs from the CLI,
    2026-12-06); with real time taken after the set-up it did not (3 of 3). That budget is the
    likely cause; no scheduler trace confirmed it."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(rt_priority))
    except (OSError, AttributeError):
        return False
    return True


def run_sender_child(ppid: int, conn, work: Callable[[], object], *,
                     rt_priority: int | None = None) -> None:
    """The body of a forked sender process (probe streams here, load runs in
    :mod:`railab.traffic.load`): die with the parent (``PR_SET_PDEATHSIG``), ignore SIGINT (the
    parent says when to stop), run at ``SENDER_NICE`` and, with ``rt_priority``, under
    ``SCHED_RR`` at that priority (1-99; kept at the nice value where the kernel refuses it, e.g.
    without CAP_SYS_NICE), then send ``("done", work())`` or ``("error", message)`` (a
    RailabError's text, else the exception's one line) on ``conn``, which it closes."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # a sender starved by a busy host measures its own stalls, not the fabric's
        os.setpriority(os.PRIO_PROCESS, 0, SENDER_NICE)
    except OSError:
        pass
    if rt_priority is not None:
        set_realtime(rt_priority)
    if os.getppid() != ppid:  # the parent died before prctl took effect
        os._exit(1)
    try:
        conn.send(("done", work()))
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, which raises it)
        msg = str(exc) if isinstance(exc, RailabError) else "".join(
            traceback.format_exception_only(type(exc), exc)).strip()
        try:
            conn.send(("error", msg))
        except OSError:
            pass
    finally:
        conn.close()


def recv_from_child(conn, timeout: float, what: str) -> tuple[str, object]:
    """The next ``(kind, value)`` from a sender child, or ``("error", why)`` when nothing came
    within ``timeout`` s or the child is gone (``what`` names it in the message)."""
    if not conn.poll(timeout):
        return "error", f"no answer from the {what} within {timeout:g} s"
    try:
        return conn.recv()
    except (EOFError, OSError):
        return "error", f"the {what} exited without a result"


def _child(spec_json: str, ns_map: dict[str, str], flows: list[Flow], rate: float,
           probe_bytes: int, max_s: float, ppid: int, stop, conn) -> None:
    def work() -> list[dict]:
        spec = LabSpec.model_validate_json(spec_json)
        with StreamEngine(spec, ns_map.__getitem__, probe_bytes=probe_bytes) as eng:
            for f in flows:
                eng.add(f, rate)
            results = eng.stream(stop.is_set, deadline=time.monotonic() + max_s,
                                 on_started=lambda t0: conn.send(("started", t0)))
        return [r.to_dict() for r in results]

    run_sender_child(ppid, conn, work)


class StreamProcess:
    """Probe streams in a child process: ``start()`` returns once every stream sends (monotonic
    start time), ``stop()`` ends sending, waits for the drain and returns the results as dicts
    (:meth:`StreamResult.to_dict`). Context manager: leaving it stops (and, if needed, kills)
    the child, so nothing keeps sending after a failure or Ctrl-C.

    ``max_s``: hard limit (s) on how long the child sends, whatever the parent does.
    Raises RailabError when the child cannot open its sockets or fails (its message).
    """

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str], flows: Iterable[Flow], *,
                 rate: float = DEFAULT_RATE, probe_bytes: int = DEFAULT_PROBE_BYTES,
                 max_s: float = 300.0) -> None:
        self.spec = spec
        self.flows = list(flows)
        if not self.flows:
            raise RailabError("no flows to stream")
        if not 0 < rate <= MAX_RATE:
            raise RailabError(f"probe rate must be > 0 and <= {MAX_RATE:g} packets/s per flow (got {rate:g})")
        self.rate = rate
        self.probe_bytes = probe_bytes
        self.max_s = max_s
        self._ns = {n.name: netns_of(n.name) for n in spec.nodes}
        self._ctx = mp.get_context("fork")
        self._stop = self._ctx.Event()
        self._proc = None
        self._conn = None
        self.t0: float | None = None

    def start(self, timeout: float = 30.0) -> float:
        """Fork the sender/receiver and wait until every stream is sending; returns its
        monotonic start time. Raises RailabError on a child failure or after ``timeout`` s."""
        parent, child = self._ctx.Pipe(duplex=False)
        self._conn = parent
        self._proc = self._ctx.Process(
            target=_child, name="railab-streams", daemon=True,
            args=(self.spec.model_dump_json(), self._ns, self.flows, self.rate, self.probe_bytes,
                  self.max_s, os.getpid(), self._stop, child))
        self._proc.start()
        child.close()
        kind, val = self._recv(timeout)
        if kind != "started":
            self.close()
            raise RailabError(f"probe streams did not start: {val}")
        self.t0 = val
        return val

    def _recv(self, timeout: float) -> tuple[str, object]:
        assert self._conn is not None
        return recv_from_child(self._conn, timeout, "stream process")

    def stop(self, timeout: float = 30.0) -> list[dict]:
        """Stop sending, wait for the drain, return one result dict per flow (flow order)."""
        self._stop.set()
        kind, val = self._recv(timeout)
        self.close()
        if kind != "done":
            raise RailabError(f"probe streams failed: {val}")
        return val  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 2 s) and close the pipe; idempotent."""
        self._stop.set()
        if self._proc is not None:
            self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(2.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(1.0)
            self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> StreamProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stream_flows(spec: LabSpec, netns_of: Callable[[str], str], flows: Iterable[Flow], seconds: float,
                 *, rate: float = DEFAULT_RATE, probe_bytes: int = DEFAULT_PROBE_BYTES) -> list[dict]:
    """Stream ``flows`` for ``seconds`` in this process (no fault, no child): the steady-state
    baseline, e.g. ``stream_flows(spec, ref.netns_of, flows, 2.0)``; results as dicts."""
    with StreamEngine(spec, netns_of, probe_bytes=probe_bytes) as eng:
        for f in flows:
            eng.add(f, rate)
        end = time.monotonic() + seconds
        return [r.to_dict() for r in eng.stream(lambda: time.monotonic() >= end)]


__all__ = ["DEFAULT_RATE", "MAX_RATE", "Outage", "SeqStats", "StreamEngine", "StreamProcess",
           "StreamResult", "flow_sport", "stream_flows"]
