"""The DCQCN fluid model: railab's reference for what an N:1 incast should do.

Zhu, Ghobadi, Misra, Padhye, "ECN or Delay: Lessons Learnt from Analysis of DCQCN and TIMELY",
CoNEXT 2016, section 3.1 (Figure 2, "DCQCN fluid model", equations 1-5; the per-flow form of
the SIGCOMM 2015 model of Zhu et al., "Congestion Control for Large-Scale RDMA Deployments").
N flows share one bottleneck of capacity ``C``; per flow ``i`` the reaction point's current
rate ``R_C``, target rate ``R_T`` and ``alpha``; the switch queue ``q``:

* (1) marking: ``p(q) = 0`` for ``q <= Kmin``, ``(q - Kmin)/(Kmax - Kmin) * Pmax`` up to
  ``Kmax``, ``1`` beyond (WRED/ECN, the lab's ``qos.ecn``);
* (2) queue: ``dq/dt = sum_i R_C(i) - C``;
* (3) alpha: ``dalpha/dt = g/tau' * ((1 - (1-p*)^(tau' R_C*)) - alpha)``;
* (4) target rate: ``dR_T/dt = -(R_T - R_C)/tau * (1 - (1-p*)^(tau R_C*))
  + R_AI R_C* p* (1-p*)^(F B) / ((1-p*)^(-B) - 1)
  + R_AI R_C* p* (1-p*)^(F T R_C*) / ((1-p*)^(-T R_C*) - 1)``;
* (5) current rate: ``dR_C/dt = -R_C alpha/(2 tau) * (1 - (1-p*)^(tau R_C*))
  + (R_T - R_C)/2 * R_C* p* / ((1-p*)^(-B) - 1)
  + (R_T - R_C)/2 * R_C* p* / ((1-p*)^(-T R_C*) - 1)``,

where ``x*`` is ``x`` one control-loop delay ``tau*`` ago, rates are in packets per second,
``tau`` the NP's CNP interval, ``tau'`` the alpha update period, ``T`` the rate-increase timer,
``B`` the byte counter (in packets) and ``F`` the fast-recovery steps. The last two terms of
(4) and (5) at ``p = 0`` are their limits (``R_C / B`` and ``1 / T`` increase events per
second). The paper leaves hyper increase out; with ``hyper=False`` this module is its model
exactly (:data:`PAPER_SETTING`).

What railab adds, each said where it is computed:

* **the control-loop delay** ``tau*`` = ``base_delay_us`` plus, when ``mark_at_enqueue``, the
  queueing delay ``q/C`` (a packet marked as it enters the queue reaches the receiver, and its
  CNP the sender, after the queue has drained in front of it); a switch that marks on dequeue,
  as ASICs, the paper and the lab do (the default), adds nothing;
* **alpha updates faster than CNPs** (the ``400g`` profile: ``tau'`` 1 us, ``tau`` 50 us):
  the chance of a CNP within one alpha period is ``tau'/tau * (1 - (1-p*)^(tau R_C*))`` when
  ``tau' < tau`` (the NP sends at most one CNP per ``tau``); equation (3) as printed otherwise;
* **line rate and floor**: ``R_C`` and ``R_T`` stay within ``[min_rate, line rate]`` (every
  flow starts at line rate with ``alpha = initial_alpha``, "as per DCQCN specification");
* **hyper increase** (``hyper=True``, SIGCOMM 2015 Fig. 7: once both the timer and the byte
  counter have fired more than F times since the last cut, each increase event adds
  ``i R_HAI``, ``i`` = the smaller count minus F): mean-field, from two more states per flow,
  the expected time and packets since the last CNP (``ds/dt = 1 - s lambda`` and
  ``dn/dt = R_C - n lambda``, ``lambda = (1 - (1-p*)^(tau R_C*))/tau`` the CNP rate); hyper
  replaces the additive term while ``min(s/T, n/B) > F``;
* **PFC** (the paper ignores it, "DCQCN is triggered before PFC"): with ``pfc`` on, the queue
  never passes the pause threshold ``pause_bytes`` (xOFF): the senders are held and admitted at
  ``C`` in proportion to their rates; with it off the queue tail-drops at ``buffer_bytes``.

The integration is numpy's: a fixed-step explicit scheme over all flows at once, with the
delayed values read back from the stored history by linear interpolation (``numpy.interp``).
:func:`fixed_point` solves the paper's equation 9 for ``p*`` with ``scipy.optimize.brentq``
and :func:`fixed_point_approx` is its cube-root approximation (equation 10).

Units at the API: fabric time (us), fabric rates (Gb/s), bytes. :meth:`FluidResult.summary`
gives per-flow rates, utilization, queue depth and the time to within 10 % of the fair share;
:func:`incast_reference` feeds the model with a lab's QoS profile (``railab.topologies.qos``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq

from railab.topologies.qos import DcqcnProfile, QosProfile

#: RoCEv2 bytes around an RDMA WRITE MIDDLE payload on the wire as the qdisc counts them:
#: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 (IBTA Annex A17; railab.traffic.roce).
ROCE_FRAME_OVERHEAD = 58
#: "Converged" means every flow within this share of the fair share (the paper's 10 %).
FAIR_BAND = 0.10


@dataclass(frozen=True)
class FluidParams:
    """One N:1 bottleneck and its DCQCN, in fabric units.

    ``line_gbps`` is the bottleneck capacity ``C`` and every sender's line rate (Gb/s);
    ``frame_bytes`` the packet size the marking probability applies to; ``kmin_bytes``,
    ``kmax_bytes``, ``pmax`` the WRED/ECN profile; the DCQCN fields as
    :class:`railab.topologies.qos.DcqcnProfile` (us, Mb/s, bytes); ``base_delay_us`` the
    control-loop delay without queueing (1 us: railab's round figure for the lab, whose switch
    agent reads a queue depth at most one cycle old, 1-10 lab ms = 0.5-5 us of fabric time at
    time scale 2000, and whose veth paths add tens of lab us, hundredths of a fabric us; the
    paper's figures use 4 and 85 us); ``mark_at_enqueue`` adds the queueing delay to it;
    ``pfc`` caps the queue at ``pause_bytes``, otherwise it drops beyond ``buffer_bytes``.
    """

    senders: int
    line_gbps: float = 400.0
    frame_bytes: int = 4096 + ROCE_FRAME_OVERHEAD
    kmin_bytes: int = 1048576
    kmax_bytes: int = 2097152
    pmax: float = 0.05
    g: float = 5 / 1024
    alpha_timer_us: float = 1.0
    rate_timer_us: float = 55.0
    byte_counter_bytes: int = 10_000_000
    fast_recovery_steps: int = 5
    ai_rate_mbps: float = 400.0
    hai_rate_mbps: float = 4000.0
    hyper: bool = True
    min_rate_mbps: float = 100.0
    cnp_interval_us: float = 50.0
    initial_alpha: float = 1.0
    base_delay_us: float = 1.0
    mark_at_enqueue: bool = False
    pfc: bool = True
    pause_bytes: int = 4122032
    buffer_bytes: int = 4194304
    dcqcn_name: str = "400g"

    def __post_init__(self) -> None:
        if self.senders < 1:
            raise ValueError("the fluid model needs at least one sender")
        if not 0 < self.kmin_bytes < self.kmax_bytes:
            raise ValueError("ECN thresholds: need 0 < Kmin < Kmax")
        if self.line_gbps <= 0 or self.frame_bytes <= 0:
            raise ValueError("line rate and frame size must be positive")

    @classmethod
    def from_qos(cls, qos: QosProfile, senders: int, *, dcqcn: DcqcnProfile | None = None,
                 pfc: bool | None = None, mtu: int = 4096, **kw) -> FluidParams:
        """The bottleneck of a lab's QoS profile: ``qos.ecn`` (Kmin/Kmax/Pmax), ``qos.dcqcn``
        (or ``dcqcn``), PFC from ``qos.capacity.pfc`` unless ``pfc``, pause threshold
        ``qos.pfc_pause_bytes``, buffer ``qos.capacity.drop_limit_bytes`` (``buffer_bytes``, or
        a lone hot queue's share of a shared buffer's dynamic threshold), line rate
        ``qos.capacity.fabric_rate_gbps``. Extra keywords override fields."""
        d = dcqcn or qos.dcqcn
        cap = qos.capacity
        args = dict(senders=senders, line_gbps=float(cap.fabric_rate_gbps),
                    frame_bytes=mtu + ROCE_FRAME_OVERHEAD, kmin_bytes=qos.ecn.kmin_bytes,
                    kmax_bytes=qos.ecn.kmax_bytes, pmax=qos.ecn.pmax_percent / 100.0, g=d.g,
                    alpha_timer_us=d.alpha_timer_us, rate_timer_us=d.rate_timer_us,
                    byte_counter_bytes=d.byte_counter_bytes,
                    fast_recovery_steps=d.fast_recovery_steps, ai_rate_mbps=d.ai_rate_mbps,
                    hai_rate_mbps=d.hai_rate_mbps, min_rate_mbps=d.min_rate_mbps, cnp_interval_us=d.cnp_interval_us,
                    initial_alpha=d.initial_alpha, pfc=cap.pfc if pfc is None else pfc,
                    pause_bytes=qos.pfc_pause_bytes, buffer_bytes=cap.drop_limit_bytes,
                    dcqcn_name=d.name)
        args.update(kw)
        return cls(**args)


@dataclass
class FluidResult:
    """A model run: ``t_us`` (samples), per-flow ``rc_gbps`` / ``rt_gbps`` / ``alpha`` (shape
    flows x samples), ``q_bytes``, ``util`` (delivered / C per sample), ``dropped_bytes``
    (cumulative) and the ``params``."""

    params: FluidParams
    t_us: np.ndarray
    rc_gbps: np.ndarray
    rt_gbps: np.ndarray
    alpha: np.ndarray
    q_bytes: np.ndarray
    util: np.ndarray
    dropped_bytes: np.ndarray
    delivered_gbps: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def window(self, frm_us: float, to_us: float | None = None) -> np.ndarray:
        """Boolean mask of the samples with ``frm_us <= t <= to_us``."""
        to = self.t_us[-1] if to_us is None else to_us
        return (self.t_us >= frm_us) & (self.t_us <= to)

    def time_to_fair_us(self, band: float = FAIR_BAND) -> float | None:
        """The first time (fabric us) from which every flow's delivered rate stays within
        ``band`` of the fair share ``C/N`` to the end of the run; None if it never does."""
        share = self.params.line_gbps / self.params.senders
        ok = np.all(np.abs(self.delivered_gbps - share) <= band * share, axis=0)
        if not ok[-1]:
            return None
        bad = np.nonzero(~ok)[0]
        return float(self.t_us[0] if bad.size == 0 else self.t_us[min(bad[-1] + 1, len(ok) - 1)])

    def summary(self, frm_us: float | None = None) -> dict:
        """Figures over the window from ``frm_us`` (default: the last half) to the end:
        ``utilization`` (delivered / C), ``per_flow_gbps`` (delivered, mean), ``rc_gbps``
        (DCQCN current rates, mean), ``queue_bytes`` {mean, max}, ``dropped_bytes`` in the
        window, ``dropped_pct`` (tail drops over the whole run, % of what was sent),
        ``time_to_fair_us`` (None: not within 10 % by the end), ``fabric_us`` (run length),
        ``window_us``."""
        end = float(self.t_us[-1])
        frm = end / 2 if frm_us is None else frm_us
        m = self.window(frm)
        dt = float(self.t_us[1] - self.t_us[0]) * 1e-6 if len(self.t_us) > 1 else 0.0
        delivered = float(self.util.sum()) * dt * self.params.line_gbps * 1e9 / 8
        lost = float(self.dropped_bytes[-1])
        return {"fabric_us": round(end, 3), "window_us": [round(frm, 3), round(end, 3)],
                "dropped_pct": round(100 * lost / (lost + delivered), 3) if lost + delivered else 0.0,
                "utilization": round(float(self.util[m].mean()), 4),
                "per_flow_gbps": [round(float(x), 3) for x in self.delivered_gbps[:, m].mean(axis=1)],
                "rc_gbps": [round(float(x), 3) for x in self.rc_gbps[:, m].mean(axis=1)],
                "queue_bytes": {"mean": int(self.q_bytes[m].mean()), "max": int(self.q_bytes[m].max())},
                "dropped_bytes": int(self.dropped_bytes[m][-1] - self.dropped_bytes[m][0]),
                "time_to_fair_us": self.time_to_fair_us()}


def _pow1m(p: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """``(1 - p)^x`` for p in [0, 1] (1 at p = 1 only for x = 0)."""
    with np.errstate(divide="ignore"):
        return np.where(p >= 1.0, np.where(np.asarray(x) == 0, 1.0, 0.0),
                        np.exp(np.asarray(x) * np.log1p(-np.minimum(p, 1 - 1e-15))))


def _events(p: np.ndarray, n: np.ndarray | float) -> np.ndarray:
    """``p / ((1-p)^(-n) - 1)``: rate-increase events per packet of a counter of ``n``
    packets that a mark resets (limit ``1/n`` at ``p = 0``, 0 at ``p = 1``)."""
    n = np.maximum(np.asarray(n, dtype=float), 1e-12)
    pc = np.minimum(p, 1 - 1e-12)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        den = np.expm1(-n * np.log1p(-pc))
        v = np.where(pc > 1e-12, pc / np.where(den > 0, den, np.inf), 1.0 / n)
    return np.where(p >= 1.0, 0.0, v)


def _scalar_p(p: float):
    """:func:`_pow1m` and :func:`_events` for one probability ``p`` (a float) and arrays of
    exponents: ``(pow1m(x), events(n))``, the logarithm taken once. The model's step calls
    them six times with the same delayed marking probability; the generic forms cost ~85 % of a
    step (errstate contexts and ``where`` on 0-d arrays). Same values (tested against them)."""
    if p >= 1.0:
        return (lambda x: np.where(np.asarray(x) == 0, 1.0, 0.0)), (lambda n: 0.0 * np.asarray(n))
    lp = math.log1p(-min(p, 1 - 1e-15))
    pc = min(p, 1 - 1e-12)
    if pc <= 1e-12:
        return (lambda x: np.exp(x * lp)), (lambda n: 1.0 / np.maximum(n, 1e-12))
    lpc = math.log1p(-pc)

    def events(n):  # 0 where expm1 would overflow (exponent past ~709.78), without its warning
        e = -np.maximum(n, 1e-12) * lpc
        return np.where(e < 709.7, pc / np.expm1(np.minimum(e, 709.7)), 0.0)

    return (lambda x: np.exp(x * lp)), events


def marking(q: np.ndarray | float, kmin: float, kmax: float, pmax: float) -> np.ndarray:
    """Equation 1: the WRED/ECN marking probability of a packet at queue depth ``q`` (bytes)."""
    q = np.asarray(q, dtype=float)
    return np.where(q <= kmin, 0.0, np.where(q <= kmax, (q - kmin) / (kmax - kmin) * pmax, 1.0))


def simulate(params: FluidParams, fabric_us: float = 10_000.0, *, dt_us: float | None = None,
             sample_us: float | None = None, init_rc_gbps: list[float] | None = None) -> FluidResult:
    """Integrate the model for ``fabric_us`` of fabric time and return the sampled run.

    Every flow starts at line rate (or ``init_rc_gbps``) with ``R_T`` at line rate, ``alpha``
    at ``initial_alpha``, the queue empty. ``dt_us`` is the step (default: a tenth of the
    shortest time constant, at most 0.1 us); ``sample_us`` the sampling period of the result
    (default: 500 samples over the run). Raises ValueError for a non-positive length.
    """
    if fabric_us <= 0:
        raise ValueError("the model run needs a positive length")
    P = params
    n = P.senders
    pkt_bits = P.frame_bytes * 8.0
    C = P.line_gbps * 1e9 / pkt_bits                    # packets / s
    line = C
    rmin = P.min_rate_mbps * 1e6 / pkt_bits
    rai = P.ai_rate_mbps * 1e6 / pkt_bits
    rhai = P.hai_rate_mbps * 1e6 / pkt_bits
    tau, taup, T = P.cnp_interval_us * 1e-6, P.alpha_timer_us * 1e-6, P.rate_timer_us * 1e-6
    B = P.byte_counter_bytes / P.frame_bytes            # packets
    F, g = P.fast_recovery_steps, P.g
    kmin, kmax = P.kmin_bytes / P.frame_bytes, P.kmax_bytes / P.frame_bytes
    cap_q = (P.pause_bytes if P.pfc else P.buffer_bytes) / P.frame_bytes
    dt = (dt_us if dt_us is not None else
          min(0.5, P.alpha_timer_us / 2, P.cnp_interval_us / 20, P.rate_timer_us / 20)) * 1e-6
    steps = int(math.ceil(fabric_us * 1e-6 / dt))
    every = max(1, int(round((sample_us if sample_us is not None else fabric_us / 500) * 1e-6 / dt)))
    base = P.base_delay_us * 1e-6

    rc = np.full(n, line) if init_rc_gbps is None else np.asarray(init_rc_gbps) * 1e9 / pkt_bits
    rt = np.full(n, line)
    alpha = np.full(n, P.initial_alpha)
    since_s = np.zeros(n)        # hyper increase: mean time since the last CNP, s ...
    since_pk = np.zeros(n)       # ... and packets sent since then
    q = 0.0
    dropped = 0.0
    # history: time, departure (arrival at the receiver) time of what enters now, p, admitted rates
    hist_t = np.empty(steps + 1)
    hist_dep = np.empty(steps + 1)
    hist_p = np.empty(steps + 1)
    hist_r = np.empty((n, steps + 1))
    out_t, out_rc, out_rt, out_a, out_q, out_u, out_d, out_del = [], [], [], [], [], [], [], []
    span = kmax - kmin
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for k in range(steps + 1):
            t = k * dt
            total = float(rc.sum())
            # admission: PFC holds the senders at the pause threshold; tail drop without PFC
            admit = 1.0
            if P.pfc and q >= cap_q and total > C:
                admit = C / total
            adm = rc * admit
            p_now = 0.0 if q <= kmin else ((q - kmin) / span * P.pmax if q <= kmax else 1.0)
            hist_t[k] = t
            hist_dep[k] = t + base + (q / C if P.mark_at_enqueue else 0.0)
            if k and hist_dep[k] < hist_dep[k - 1]:
                hist_dep[k] = hist_dep[k - 1]  # FIFO: what enters later leaves later
            hist_p[k] = p_now
            hist_r[:, k] = adm
            # the marks that reach the senders now entered the queue at te (dep(te) = t)
            if t < hist_dep[0]:
                pd, rd = 0.0, adm
            else:
                te = float(np.interp(t, hist_dep[:k + 1], hist_t[:k + 1]))
                j = min(int(te / dt), k)
                w = 0.0 if j >= k else (te - hist_t[j]) / dt
                j2 = min(j + 1, k)
                pd = float((1 - w) * hist_p[j] + w * hist_p[j2])
                rd = (1 - w) * hist_r[:, j] + w * hist_r[:, j2]
            # pd is one number per step: _pow1m / _events with its logarithm taken once
            pow1m, events = _scalar_p(pd)
            cnp_win = 1.0 - pow1m(tau * rd)              # a CNP within one CNP interval
            if taup < tau:
                a_win = taup / tau * cnp_win             # at most one CNP per tau
            else:
                a_win = 1.0 - pow1m(taup * rd)
            ev_b = rd * events(B)                        # byte-counter events / s
            ev_t = rd * events(T * rd)                   # timer events / s
            ai_b = ev_b * pow1m(F * B)                   # ... past fast recovery
            ai_t = ev_t * pow1m(F * T * rd)
            d_alpha = g / taup * (a_win - alpha)
            inc = rai * (ai_b + ai_t)
            if P.hyper:  # railab's mean-field hyper increase: both counters past F (module doc)
                lam = cnp_win / tau
                i = np.minimum(since_s / T, since_pk / B) - F
                inc = np.where(i > 0, rhai * np.maximum(i, 0.0) * (ev_b + ev_t), inc)
                since_s = since_s + (1.0 - since_s * lam) * dt
                since_pk = since_pk + (adm - since_pk * lam) * dt
            d_rt = -(rt - rc) / tau * cnp_win + inc
            d_rc = -rc * alpha / (2 * tau) * cnp_win + (rt - rc) / 2 * (ev_b + ev_t)
            # the queue: admitted in, C out
            inflow = float(adm.sum())
            dq = inflow - C if q > 0 or inflow > C else 0.0
            if not P.pfc and q >= cap_q and dq > 0:
                dropped += dq * dt
                dq = 0.0
            if k % every == 0:
                deliv = C if q > 0 else min(C, inflow)
                share = adm / inflow if inflow > 0 else np.zeros(n)
                out_t.append(t * 1e6)
                out_rc.append(rc * pkt_bits / 1e9)
                out_rt.append(rt * pkt_bits / 1e9)
                out_a.append(alpha.copy())
                out_q.append(q * P.frame_bytes)
                out_u.append(deliv / C)
                out_d.append(dropped * P.frame_bytes)
                out_del.append(deliv * share * pkt_bits / 1e9)
            alpha = np.minimum(np.maximum(alpha + d_alpha * dt, 0.0), 1.0)
            rt = np.minimum(np.maximum(rt + d_rt * dt, rmin), line)
            rc = np.minimum(np.maximum(rc + d_rc * dt, rmin), line)
            q = min(max(0.0, q + dq * dt), cap_q)
    return FluidResult(params=P, t_us=np.asarray(out_t), rc_gbps=np.asarray(out_rc).T,
                       rt_gbps=np.asarray(out_rt).T, alpha=np.asarray(out_a).T,
                       q_bytes=np.asarray(out_q), util=np.asarray(out_u),
                       dropped_bytes=np.asarray(out_d), delivered_gbps=np.asarray(out_del).T)


def _fixed_point_lhs(p: float, P: FluidParams) -> float:
    """Equation 9 of the paper, LHS minus RHS, at marking probability ``p`` (packets/s)."""
    pkt_bits = P.frame_bytes * 8.0
    C = P.line_gbps * 1e9 / pkt_bits
    r = C / P.senders
    tau, taup, T = P.cnp_interval_us * 1e-6, P.alpha_timer_us * 1e-6, P.rate_timer_us * 1e-6
    B = P.byte_counter_bytes / P.frame_bytes
    rai = P.ai_rate_mbps * 1e6 / pkt_bits
    F = P.fast_recovery_steps
    pa = np.asarray(p)
    a = 1 - _pow1m(pa, tau * r)
    alpha = 1 - _pow1m(pa, taup * r)
    b = _events(pa, B)
    c = _pow1m(pa, F * B) * b
    d = _events(pa, T * r)
    e = _pow1m(pa, F * T * r) * d
    with np.errstate(divide="ignore", invalid="ignore"):
        lhs = a * a * alpha / ((b + d) * (c + e))
    return float(np.nan_to_num(lhs, nan=np.inf, posinf=np.inf) - tau * tau * rai * r)


def fixed_point(params: FluidParams) -> dict:
    """The model's fixed point (CoNEXT 2016, section 3.2, equations 7-9): ``p*`` solving
    equation 9 (``scipy.optimize.brentq`` on (0, 1)), the queue ``q*`` (equation 8, bytes) and
    the per-flow rate ``C/N`` (Gb/s). Returns ``{"p", "q_bytes", "rate_gbps"}``."""
    P = params
    p = brentq(_fixed_point_lhs, 1e-12, 1 - 1e-9, args=(P,), xtol=1e-15, maxiter=500)
    q = P.kmin_bytes + p / P.pmax * (P.kmax_bytes - P.kmin_bytes) if p <= P.pmax else P.kmax_bytes
    return {"p": p, "q_bytes": q, "rate_gbps": P.line_gbps / P.senders}


def fixed_point_approx(params: FluidParams) -> float:
    """The paper's approximation of ``p*`` (CoNEXT 2016 equation 10):
    ``cbrt(R_AI N^2 / (tau' C^2) * (1/B + N/(T C))^2)`` (rates in packets/s, B in packets)."""
    P = params
    pkt_bits = P.frame_bytes * 8.0
    C = P.line_gbps * 1e9 / pkt_bits
    rai = P.ai_rate_mbps * 1e6 / pkt_bits
    B = P.byte_counter_bytes / P.frame_bytes
    N, taup, T = P.senders, P.alpha_timer_us * 1e-6, P.rate_timer_us * 1e-6
    return (rai * N * N / (taup * C * C) * (1 / B + N / (T * C)) ** 2) ** (1 / 3)


#: The DCQCN paper's default setting (SIGCOMM 2015, section 5; the parameters of the CoNEXT
#: 2016 fluid-model figures: 40 Gb/s, Kmin 5 KB, Kmax 200 KB, Pmax 1 %, g 1/256, tau' = T =
#: 55 us, tau 50 us, B 10 MB, F 5, R_AI 40 Mb/s; 1000-byte packets as in the authors' model).
PAPER_SETTING = FluidParams(senders=2, line_gbps=40.0, frame_bytes=1000, kmin_bytes=5000,
                            kmax_bytes=200000, pmax=0.01, g=1 / 256, alpha_timer_us=55.0,
                            rate_timer_us=55.0, byte_counter_bytes=10_000_000,
                            fast_recovery_steps=5, ai_rate_mbps=40.0, hai_rate_mbps=400.0,
                            hyper=False, min_rate_mbps=10.0,
                            cnp_interval_us=50.0, initial_alpha=1.0, base_delay_us=4.0,
                            mark_at_enqueue=False, pfc=False, pause_bytes=10**9,
                            buffer_bytes=10**9, dcqcn_name="paper")


def with_senders(params: FluidParams, senders: int) -> FluidParams:
    """The same bottleneck with another number of senders."""
    return replace(params, senders=senders)


#: Agreement band between the emulation and the model (utilization and mean per-flow rate).
AGREE_TOLERANCE = 0.15
#: Agreement band on the share of packets dropped, percentage points (issue 28's drop criterion
#: is 1 %): a run that drops 5 % where the model drops none does not agree, whatever its rates.
DROP_TOLERANCE_POINTS = 1.0
#: A load run shorter than this (fabric ms) reports a transient only.
STEADY_MIN_FABRIC_MS = 10.0


@lru_cache(maxsize=8)
def _simulate_once(params: FluidParams, fabric_us: float) -> FluidResult:
    """:func:`simulate` remembered by its inputs (a pure function of them): the same incast's
    reference asked again (a report, a comparison, the console) is not integrated again.
    Callers only read the result."""
    return simulate(params, fabric_us)


def incast_reference(qos: QosProfile, senders: int, lab_seconds: float, *, pfc: bool,
                     dcqcn: DcqcnProfile | None = None, mtu: int = 4096,
                     measured_mbps: list[float] | None = None, port_rate_mbps: float | None = None,
                     measured_dropped_pct: float | None = None,
                     points: int = 200) -> dict:
    """The model's prediction for an N:1 incast of ``lab_seconds`` on a lab with QoS ``qos``,
    beside what the emulation measured (the ``congestion.reference`` object of
    ``railab traffic --pattern incast --json``).

    The model runs for the same fabric time (``lab_seconds`` / ``qos.capacity.time_scale``)
    with the lab's ECN/PFC/DCQCN numbers (:meth:`FluidParams.from_qos`; marking on dequeue, as
    the lab's switches mark, :func:`railab.testbed.capacity.mark_point`) and is read over the
    same window, the last half. Rates are given
    in **lab** Mb/s (fabric Gb/s x 1000 / time scale) so they sit beside the measured ones.
    ``measured_mbps`` (each sender's receive rate over the last half, lab Mb/s) and
    ``port_rate_mbps`` (the receiver's port) make ``agrees``: utilization and mean per-flow
    rate both within :data:`AGREE_TOLERANCE` of the model's and, given ``measured_dropped_pct``
    (% of the packets sent), the drops within :data:`DROP_TOLERANCE_POINTS` of the model's;
    ``disagreements`` lists, in words, every figure (utilization, mean rate, drops, each flow)
    off by more than that.

    Returns ``{"model", "source", "fabric_ms", "utilization", "per_flow_mbps", "fair_share_mbps",
    "queue_bytes": {mean, max}, "dropped_pct" (the model's tail drops, % of what was sent; 0
    with PFC on), "time_to_fair_ms", "steady" (at least
    :data:`STEADY_MIN_FABRIC_MS` and the model's last-half utilization within 5 % of its last
    quarter's), "agrees", "tolerance",
    "disagreements", "series": {"t": [lab s], "rate_mbps": [[per flow]], "queue_bytes": []}}``.
    """
    cap = qos.capacity
    scale = cap.time_scale
    fabric_us = lab_seconds / scale * 1e6
    P = FluidParams.from_qos(qos, senders, dcqcn=dcqcn, pfc=pfc, mtu=mtu)
    run = _simulate_once(P, fabric_us)
    s = run.summary()
    to_lab = 1000.0 / scale
    port = port_rate_mbps if port_rate_mbps is not None else cap.port_rate_mbps
    per_flow = [round(x * to_lab, 3) for x in s["per_flow_gbps"]]
    share = port / senders
    ttf = s["time_to_fair_us"]
    # steady: long enough, and the last half's mean is what the last quarter shows (settled)
    quarter = float(run.util[run.window(fabric_us * 0.75)].mean())
    steady = (fabric_us / 1000 >= STEADY_MIN_FABRIC_MS
              and abs(quarter - s["utilization"]) <= 0.05 * max(s["utilization"], 1e-9))
    out = {"model": "DCQCN fluid model (Zhu et al., CoNEXT 2016, Fig. 2, eq. 1-5; railab: "
                    "PFC cap, mean-field hyper increase)",
           "source": "computed", "fabric_ms": round(fabric_us / 1000, 3),
           "dcqcn": P.dcqcn_name, "pfc": "on" if pfc else "off",
           "utilization": s["utilization"], "per_flow_mbps": per_flow,
           "fair_share_mbps": round(share, 3), "queue_bytes": s["queue_bytes"],
           "dropped_pct": s["dropped_pct"],
           "time_to_fair_ms": None if ttf is None else round(ttf / 1000, 3), "steady": steady,
           "tolerance": AGREE_TOLERANCE, "drop_tolerance_points": DROP_TOLERANCE_POINTS,
           "agrees": None, "disagreements": []}
    idx = np.linspace(0, len(run.t_us) - 1, min(points, len(run.t_us))).astype(int)
    out["series"] = {"t": [round(float(t) * scale / 1e6, 4) for t in run.t_us[idx]],
                     "rate_mbps": [[round(float(x) * to_lab, 3) for x in row[idx]]
                                   for row in run.delivered_gbps],
                     "queue_bytes": [int(x) for x in run.q_bytes[idx]]}
    if measured_mbps is not None and measured_mbps:
        util = sum(measured_mbps) / port
        mean_m = sum(measured_mbps) / len(measured_mbps)
        mean_r = sum(per_flow) / len(per_flow)
        bad = []
        if abs(util - s["utilization"]) > AGREE_TOLERANCE * s["utilization"]:
            bad.append(f"utilization {util:.2f} measured, {s['utilization']:.2f} modelled")
        if abs(mean_m - mean_r) > AGREE_TOLERANCE * mean_r:
            bad.append(f"mean per-flow rate {mean_m:.1f} Mb/s measured, {mean_r:.1f} modelled")
        if measured_dropped_pct is not None:
            out["measured_dropped_pct"] = round(measured_dropped_pct, 3)
            if abs(measured_dropped_pct - s["dropped_pct"]) > DROP_TOLERANCE_POINTS:
                bad.append(f"drops {measured_dropped_pct:.2f} % measured, {s['dropped_pct']:.2f} % "
                           "modelled")
        out["agrees"] = not bad
        for i, (m, r) in enumerate(zip(measured_mbps, per_flow, strict=False)):
            if abs(m - r) > AGREE_TOLERANCE * r:
                bad.append(f"flow {i}: {m:.1f} Mb/s measured, {r:.1f} modelled")
        out["disagreements"] = bad
        out["measured_utilization"] = round(util, 4)
    return out
