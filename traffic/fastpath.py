"""The load engine's fast path: per-packet work in compiled code, behind a narrow interface.

:mod:`railab.traffic.load` builds every frame (scapy templates) and opens every socket; this
module hands them to ``fastpath.c`` (compiled once with the system's C compiler, loaded with
ctypes) which sends every QP paced at its rate, receives, and keeps the per-QP state:

* **send at a rate**: each QP's packets leave its NIC's ``AF_PACKET`` socket at the QP's
  current rate (DCQCN's RC, or the line rate with ``cc="none"``), each gap jittered, back-
  pressure (EAGAIN/ENOBUFS: the NIC queue is held, e.g. by a PFC PAUSE) counted and the packet
  retried one frame time later, a host stall's debt counted, never sent in a burst;
* **receive and report**: ``recvmmsg`` on every server's receive socket, 128 bytes of each
  frame copied; per QP rx packets/bytes, PSN order (out-of-order count, reorder depth), ECN
  CE marks, TTL; the notification point sends a CNP (at most one per QP per CNP interval) and
  the reaction point (DCQCN, Zhu et al. SIGCOMM 2015) cuts the rate the moment a CNP arrives.

The C code mirrors :class:`railab.traffic.load.DcqcnRP` (the Python reference, used by the
per-packet reference :mod:`railab.traffic.packetsim`) and :meth:`roce.FrameTemplate.frame_shared`;
:class:`FastRP` and :func:`icrc` expose those pieces so tests check them against the Python
ones without a lab (``tests/test_fastpath.py``).

Build: ``cc -O2 -ffp-contract=off -shared -fPIC`` (no fused multiply-add, so DCQCN's arithmetic
rounds as Python's does) into ``$RAILAB_CACHE`` (default ``/var/cache/railab`` as root,
else ``~/.cache/railab``), keyed by the source's SHA-256, so an edit rebuilds and two versions
never share a library; ``scripts/bootstrap.sh`` builds it at install (``python3 -m
railab.traffic.fastpath``). :func:`load` raises :class:`FastPathUnavailable` (a RailabError)
naming what is missing when no compiler is there.
"""

from __future__ import annotations

import array
import ctypes
import os
import threading
from pathlib import Path

from railab.errors import RailabError
from railab.testbed import cbuild

SOURCE = Path(__file__).with_name("fastpath.c")
#: The C file's interface version (``DP_ABI``): a library of another version is not used.
ABI = 12


class FastPathUnavailable(RailabError):
    """The compiled fast path cannot be built or loaded here (the message says why and what to
    install)."""


class Tpl(ctypes.Structure):
    """``dp_tpl``: one frame template (bytes patched per packet) and its ICRC tables."""

    _fields_ = [("frame", ctypes.c_void_p), ("len", ctypes.c_uint32), ("c0", ctypes.c_uint32),
                ("ta", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("t", (ctypes.c_uint32 * 256) * 3)]


class Rp(ctypes.Structure):
    """``dp_rp``: DCQCN's reaction point state (rates bits/s, times monotonic s); ``rules`` 0:
    the paper's (:class:`railab.traffic.load.DcqcnRP`), 1: HPCC ns-3's
    (:class:`railab.traffic.load.Ns3MlxRP`, set by :func:`rp_ns3`)."""

    _fields_ = [(n, ctypes.c_double) for n in (
        "line_bps", "g", "alpha_timer_s", "rate_timer_s", "rai", "rhai", "min_bps", "rc", "rt",
        "alpha", "lowest", "next_alpha", "next_rate", "hold_s")] + [
        (n, ctypes.c_int64) for n in ("byte_counter", "F", "t_steps", "bc_steps", "bytes_since",
                                      "cnps", "cuts", "fast", "additive", "hyper")] + [
        (n, ctypes.c_int32) for n in ("rules", "first", "a_cnp", "d_cnp")] + [
        ("dec_interval", ctypes.c_double), ("next_dec", ctypes.c_double),
        ("stage", ctypes.c_int64)]


_I32, _I64, _U32, _F64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_double


class Qp(ctypes.Structure):
    """``dp_qp``: one QP's configuration (written before the run) and counters (written by
    the run; read while it runs for the time series)."""

    _fields_ = [("tx_fd", _I32), ("cnp_fd", _I32), ("ntpl", _I32), ("ppm", _I32),
                ("cc", _I32), ("pad0", _I32), ("goal", _I64), ("start_t", _F64), ("gap_s", _F64),
                ("start_psn", _U32), ("dqpn", _U32), ("sqpn", _U32), ("cnp_len", _U32),
                ("tpl", ctypes.POINTER(Tpl)), ("cnp_frame", ctypes.c_void_p), ("line_bps", _F64),
                ("rp", Rp), ("next_t", _F64), ("t_last_rx", _F64), ("last_cnp", _F64)] + [
        (n, _I64) for n in ("sent", "sent_bytes", "rx", "rx_bytes", "ooo", "max_psn_dist", "ce",
                            "cnp_sent", "cnp_rx", "bp", "deficit_bytes", "max_idx", "sends",
                            "frame_bits")] + [
        (n, _I32) for n in ("active", "failed", "err", "ttl")] + [
        ("late_s", _F64), ("owner", _I32), ("pad1", _I32), ("cnp_applied", _I64),
        ("nic", _I32), ("nak_out", _I32), ("ack_tpl", ctypes.POINTER(Tpl))] + [
        (n, _I64) for n in ("nxt", "hi", "una", "retx", "retx_bytes", "acks_rx", "naks_rx",
                            "timeouts", "ack_hi", "nak_seq", "nak_idx", "nak_applied", "rtx_one")] + [
        ("last_ack_t", _F64)] + [
        (n, _I64) for n in ("epsn", "acks_tx", "naks_tx", "dup_rx", "beyond", "ack_pending")] + [
        ("t_done", _F64), ("ooo_map", ctypes.c_uint64 * 64), ("rec_hi", _I64),
        ("cnp_ts", _F64 * 64), ("cnp_w", _I64), ("cnp_r", _I64), ("cnp_lat_n", _I64),
        ("cnp_lat_sum", _F64), ("cnp_lat_max", _F64),
        ("pause", ctypes.c_void_p), ("held_since", _F64), ("pfc_held_s", _F64),
        ("pfc_holds", _I64)]


class Ctx(ctypes.Structure):
    """``dp_ctx``: the run's QPs, receive sockets, limits, stop flag and loop counters."""

    _fields_ = [("qps", ctypes.POINTER(Qp)), ("nqp", _I32), ("nrx", _I32),
                ("rx_fds", ctypes.POINTER(_I32)), ("end_t", _F64), ("deadline", _F64),
                ("cnp_interval", _F64), ("jitter", _F64), ("max_lag", _F64),
                ("drain_idle", _F64), ("drain_max", _F64), ("catch_up", _I32), ("stop", _I32),
                ("rng", ctypes.c_uint64), ("t_end", _F64)] + [
        (n, _I64) for n in ("loops", "waits", "rx_frames", "rx_calls", "tx_calls")] + [
        ("fatal_errno", _I32), ("fatal_qp", _I32), ("cpu_s", _F64), ("priv", ctypes.c_void_p),
        ("nthreads", _I32), ("live", _I32), ("rto", _F64), ("ack_every", _I32),
        ("ooo_nak_after", _I32), ("t0", _F64)]


_lib: ctypes.CDLL | None = None
_lock = threading.Lock()


def library_path() -> Path:
    """The library built from this version of ``fastpath.c`` (its SHA-256 in the name, under
    :func:`railab.testbed.cbuild.cache_dir`)."""
    return cbuild.library_path("railab-fastpath", SOURCE)


def build(force: bool = False) -> Path:
    """Compile ``fastpath.c`` (``cc -O2 -ffp-contract=off -shared -fPIC``, :func:`railab.
    testbed.cbuild.build_library`) unless the library of this source is already built; returns
    its path. Raises FastPathUnavailable without a C compiler or when compiling fails (with the
    compiler's first lines)."""
    try:
        return cbuild.build_library("railab-fastpath", SOURCE, flags=("-O2", "-ffp-contract=off"),
                                    force=force)
    except cbuild.BuildError as e:
        raise FastPathUnavailable(f"building the load engine's fast path failed: {e}") from None


def load() -> ctypes.CDLL:
    """The fast path library (built on first use), its argument types set and its structure
    sizes checked against this module's. Raises FastPathUnavailable."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(str(build()))
        if lib.dp_abi() != ABI:
            raise FastPathUnavailable(f"fast path library ABI {lib.dp_abi()}, this railab wants {ABI}")
        for name, st in (("qp", Qp), ("ctx", Ctx), ("tpl", Tpl), ("rp", Rp)):
            f = getattr(lib, f"dp_sizeof_{name}")
            f.restype = ctypes.c_size_t
            if f() != ctypes.sizeof(st):
                raise FastPathUnavailable(f"fast path struct {name}: C has {f()} bytes, Python {ctypes.sizeof(st)}")
        P = ctypes.POINTER
        lib.dp_run.argtypes = [P(Ctx)]
        lib.dp_run.restype = ctypes.c_int
        lib.dp_take_acks.argtypes = [P(Ctx), _I32, _F64]
        lib.dp_take_acks.restype = None
        lib.dp_blast.argtypes = [P(Ctx)]
        lib.dp_blast.restype = ctypes.c_int
        lib.dp_rx.argtypes = [P(Ctx), ctypes.c_char_p, _U32, _F64]
        lib.dp_rx.restype = ctypes.c_int
        lib.dp_release.argtypes = [P(Ctx)]
        lib.dp_release.restype = None
        lib.dp_rp_init.argtypes = [P(Rp), _F64, _F64, _F64, _F64, _I64, _I64, _F64, _F64, _F64,
                                   _F64, _F64]
        lib.dp_rp_init.restype = None
        lib.dp_rp_ns3.argtypes = [P(Rp), _F64]
        lib.dp_rp_ns3.restype = None
        lib.dp_rp_on_cnp.argtypes = [P(Rp), _F64]
        lib.dp_rp_tick.argtypes = [P(Rp), _F64]
        lib.dp_rp_hold.argtypes = [P(Rp), _F64]
        lib.dp_rp_on_sent.argtypes = [P(Rp), _I64]
        for f in (lib.dp_rp_on_cnp, lib.dp_rp_tick, lib.dp_rp_hold, lib.dp_rp_on_sent):
            f.restype = None
        lib.dp_icrc.argtypes = [P(Tpl), _U32, ctypes.c_int]
        lib.dp_icrc.restype = _U32
        lib.dp_frame.argtypes = [P(Tpl), _U32, ctypes.c_int]
        lib.dp_frame.restype = ctypes.c_void_p
        _lib = lib
        return lib


def available() -> bool:
    """True when the fast path builds and loads here."""
    try:
        load()
    except (FastPathUnavailable, OSError):
        return False
    return True


def rp_init(rp: Rp, *, line_bps: float, g: float, alpha_timer_s: float, rate_timer_s: float,
            byte_counter: int, fast_recovery_steps: int, rai_bps: float, rhai_bps: float,
            min_bps: float, initial_alpha: float = 1.0, now: float = 0.0) -> None:
    """Initialise a ``dp_rp`` in place with :class:`railab.traffic.load.DcqcnRP`'s arguments
    (same names, same units)."""
    load().dp_rp_init(ctypes.byref(rp), line_bps, g, alpha_timer_s, rate_timer_s, byte_counter,
                      fast_recovery_steps, rai_bps, rhai_bps, min_bps, initial_alpha, now)


def rp_ns3(rp: Rp, cnp_interval_s: float) -> None:
    """Switch an initialised ``dp_rp`` to HPCC ns-3's DCQCN rules (``dp_rp_ns3``; the rules
    of :class:`railab.traffic.load.Ns3MlxRP`): cuts on a check every ``cnp_interval_s`` (s)
    from one interval after the first CNP, no byte counter, a constant hyper step."""
    load().dp_rp_ns3(ctypes.byref(rp), cnp_interval_s)


class FastRP:
    """The C reaction point with :class:`railab.traffic.load.DcqcnRP`'s interface
    (``on_cnp(now)``, ``on_sent(nbytes)``, ``tick(now)``, ``hold(seconds)``, ``rate``, ``rc``,
    ``rt``, ``alpha``, ``cuts``, ``fast``, ``additive``, ``hyper``, ``lowest_bps``): for tests
    that hold the compiled DCQCN against the Python one, and for a finished run's per-QP
    readout (``FastRP.of(qp.rp)`` wraps a run's state). With ``cnp_interval_s`` (s) it runs
    HPCC ns-3's rules instead, as :class:`railab.traffic.load.Ns3MlxRP` (:func:`rp_ns3`).
    Raises ValueError for non-positive rates or times, as DcqcnRP does."""

    def __init__(self, line_bps: float, *, cnp_interval_s: float | None = None, **kw) -> None:
        if line_bps <= 0 or kw["alpha_timer_s"] <= 0 or kw["rate_timer_s"] <= 0 or kw["byte_counter"] <= 0:
            raise ValueError("FastRP: line rate, timers and byte counter must be positive")
        if cnp_interval_s is not None and cnp_interval_s <= 0:
            raise ValueError("FastRP: the CNP interval must be positive")
        self._rp = Rp()
        rp_init(self._rp, line_bps=line_bps, **kw)
        if cnp_interval_s is not None:  # ns-3's rules (Ns3MlxRP)
            rp_ns3(self._rp, cnp_interval_s)

    @classmethod
    def of(cls, rp: Rp) -> FastRP:
        """A read-only view of a run's ``dp_rp`` (a copy: the run may be over)."""
        self = cls.__new__(cls)
        self._rp = Rp.from_buffer_copy(rp)
        return self

    def on_cnp(self, now: float) -> None:
        load().dp_rp_on_cnp(ctypes.byref(self._rp), now)

    def on_sent(self, nbytes: int) -> None:
        load().dp_rp_on_sent(ctypes.byref(self._rp), nbytes)

    def tick(self, now: float) -> None:
        load().dp_rp_tick(ctypes.byref(self._rp), now)

    def hold(self, seconds: float) -> None:
        load().dp_rp_hold(ctypes.byref(self._rp), seconds)

    rate = property(lambda self: self._rp.rc, doc="RC, bits/s")
    rc = property(lambda self: self._rp.rc)
    rt = property(lambda self: self._rp.rt)
    alpha = property(lambda self: self._rp.alpha)
    cnps = property(lambda self: self._rp.cnps)
    cuts = property(lambda self: self._rp.cuts)
    fast = property(lambda self: self._rp.fast)
    additive = property(lambda self: self._rp.additive)
    hyper = property(lambda self: self._rp.hyper)
    lowest_bps = property(lambda self: self._rp.lowest)
    next_alpha = property(lambda self: self._rp.next_alpha)
    next_rate = property(lambda self: self._rp.next_rate)


def make_tpl(frame: bytes, tables: tuple) -> tuple[Tpl, ctypes.Array]:
    """A ``dp_tpl`` for ``frame`` (a RoCEv2 frame whose BTH starts at byte 42) with the ICRC
    tables of :meth:`roce.FrameTemplate._precompute` (``c0, t2, t1, t0, ta``); returns it and
    the frame buffer it points into (keep both alive while the run uses them)."""
    buf = ctypes.create_string_buffer(bytes(frame), len(frame))
    t = Tpl()
    t.frame = ctypes.addressof(buf)
    t.len = len(frame)
    c0, t2, t1, t0, ta = tables
    t.c0, t.ta = c0, ta
    rows = array.array("I", t2)
    rows.extend(t1)
    rows.extend(t0)
    ctypes.memmove(ctypes.addressof(t.t), rows.tobytes(), 3 * 256 * 4)
    return t, buf


def icrc(tpl: Tpl, psn: int, ackreq: bool) -> int:
    """The C fast path's ICRC of ``tpl`` with ``psn`` and the ack-request bit."""
    return load().dp_icrc(ctypes.byref(tpl), psn, int(ackreq))


def frame(tpl: Tpl, psn: int, ackreq: bool) -> bytes:
    """The frame the C fast path sends for ``psn`` (patched in the template's buffer)."""
    addr = load().dp_frame(ctypes.byref(tpl), psn, int(ackreq))
    return ctypes.string_at(addr, tpl.len)


def rx(ctx: Ctx, frame: bytes, now: float) -> None:
    """Hand one received ``frame`` to the receive path of ``ctx`` at time ``now`` (s), as the
    run's receive loop does (PSN order, CE, the NP's CNP pacing, a CNP's cut): for tests
    without a lab. :func:`release` frees the QPN index it builds."""
    if load().dp_rx(ctypes.byref(ctx), bytes(frame), len(frame), now) < 0:
        raise MemoryError("fast path: no memory for the QPN index")


def take_acks(ctx: Ctx, qp: int, now: float) -> None:
    """The requester of QP ``qp`` takes the ACKs and NAKs :func:`rx` handed it, and its
    retransmission timer runs to ``now`` (what a worker does every loop turn; for tests)."""
    load().dp_take_acks(ctypes.byref(ctx), qp, now)


def release(ctx: Ctx) -> None:
    """Free what :func:`rx` built for ``ctx`` (idempotent)."""
    load().dp_release(ctypes.byref(ctx))


def threads() -> int:
    """Worker threads a run uses: ``$RAILAB_ENGINE_THREADS`` if set, else one per CPU this
    process may run on (the kernel forwards each packet through the lab in the sending thread's
    context, so the workers are what spreads that work over the cores), at most 16."""
    env = os.environ.get("RAILAB_ENGINE_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise RailabError(f"RAILAB_ENGINE_THREADS must be a whole number (got {env!r})") from None
        if not 1 <= n <= 16:
            raise RailabError(f"RAILAB_ENGINE_THREADS must be 1-16 (got {n})")
        return n
    return max(1, min(16, len(os.sched_getaffinity(0))))


def run(ctx: Ctx) -> int:
    """``dp_run(ctx)``: blocks until the run and its drain are over (the GIL is released, so
    other threads sample the QP counters meanwhile); returns 0 or -errno. ``ctx.nthreads``
    workers share the QPs (by NIC socket) and the receive sockets."""
    return load().dp_run(ctypes.byref(ctx))


def blast(ctx: Ctx) -> int:
    """``dp_blast(ctx)``: every active QP's MIDDLE frame sent round robin, unpaced, nothing
    received, until ``ctx.end_t`` (the kernel limit benchmark, ``scripts/bench_engine.py``);
    returns 0 or -errno."""
    return load().dp_blast(ctypes.byref(ctx))


def main() -> int:
    """``python3 -m railab.traffic.fastpath``: build the library now (bootstrap), print its path."""
    try:
        print(build())
        load()
    except FastPathUnavailable as e:
        print(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
