"""Fabric liveness timers: the BFD profile and the IPv6 RA interval of the unnumbered fabric.

The one home of the numbers ``frr.conf`` and the drills use, and of the rules that size them.

Every leaf-spine BGP session may run BFD (bfdd) with FRR profile ``fabric``; every fabric port
sends IPv6 router advertisements (``ipv6 nd ra-interval N``), from which unnumbered BGP learns the
peer's link-local address. Both cost CPU while nothing happens, per session and per port, so on
one host the total grows with the lab: measured on a 2-core host with FRR 8.4, the idle
``rail-optimized-1024-full`` lab (1024 sessions, 2048 BFD endpoints at 300 ms, 2048 ports at a
3 s RA interval) kept both cores ~96 % busy (bfdd alone ~137 %).

Default rules (when the intent sets neither ``lab.bfd`` nor ``lab.ra_interval_s``):

* BFD: the lab as a whole transmits at most :data:`BFD_TX_BUDGET_PPS` BFD packets per second.
  With ``E = 2 x sessions`` endpoints each transmitting every ``tx_ms``, the interval is
  ``max(300, ceil100(E x 1000 / BFD_TX_BUDGET_PPS))`` ms (so 300 ms x 5, railab's historic value,
  up to 75 sessions: every scaled-down intent shipped keeps it). When the detection time
  ``interval x multiplier`` would reach BGP's hold time (:data:`BGP_HOLD_MS`, ``timers bgp 3 9``
  in ``frr.conf``) BFD adds nothing over BGP's own detection, so it is **off** by default
  (from 426 sessions: both full-size fabrics). A dead link is then detected by BGP in <= 9 s
  (and at once on carrier loss, which the kernel reports to zebra).
* RA: the lab as a whole sends at most :data:`RA_BUDGET_PPS` RAs per second: the interval is
  ``clamp(ceil(ports / RA_BUDGET_PPS), 3, 1800)`` s over the fabric ports (``2 x sessions``;
  3 s up to 192 ports, FRR accepts 1..1800). RAs only (re)announce a link-local address that
  BGP already learnt: zebra sends its first RAs on an interface fast whatever the interval,
  and a link that flaps comes back up through the same fast path. zebra ignores RAs on a port
  whose own RA is not on yet, so the netns runtime sends one Router Solicitation per fabric port
  once every router is configured (``solicit_router_advertisements``), which the peer answers at
  once: without it, sessions of routers configured late waited a whole interval (measured: 1024-GPU
  full fabric converged in 28.5 s after the config push with the 32 s interval, 7.5 s with it).

The intent may always set either explicitly (``lab.bfd: {...}``, ``lab.ra_interval_s: N``);
``lab.json`` records the result (``bfd``, ``ra_interval_s``) and the rule that produced it
(``control_plane_rule``), so fault drills know how long detection takes.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

#: Lab-wide BFD packets transmitted per second that the default rule allows (each is also
#: received once): ~10 % of one core at the cost measured above (~0.1 ms per packet handled).
BFD_TX_BUDGET_PPS = 500
#: BGP hold time of the fabric sessions, ms (``timers bgp 3 9`` in templates/frr.conf.j2).
BGP_HOLD_MS = 9000  # the hold time of labs up to 1500 sessions (scaled_bgp_timers)
#: Lab-wide IPv6 router advertisements per second that the default RA rule allows.
RA_BUDGET_PPS = 64
#: FRR's ``ipv6 nd ra-interval`` range, seconds; railab's historic (and minimum) value is 3.
RA_MIN_S, RA_MAX_S = 3, 1800
#: Lab-wide BGP KEEPALIVEs per second that the default BGP timer rule allows (each session end
#: sends one per keepalive interval).
BGP_KEEPALIVE_BUDGET_PPS = 1000
#: railab's historic BGP timers (``timers bgp 3 9``), the minimum the rule gives, and the largest
#: keepalive it gives (hold = 3 x keepalive, RFC 4271 section 10's suggested ratio).
BGP_KEEPALIVE_MIN_S, BGP_KEEPALIVE_MAX_S = 3, 60


class BfdProfile(BaseModel):
    """BFD timers: ``tx_ms``/``rx_ms`` intervals in milliseconds (FRR accepts 10..60000),
    ``multiplier`` missed packets before the session is down (2..255), ``enabled`` on/off
    (off: no ``neighbor FABRIC bfd`` and no ``bfd`` block in ``frr.conf``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    profile: str = Field("fabric", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    tx_ms: int = Field(300, ge=10, le=60000, description="transmit interval, ms")
    rx_ms: int = Field(300, ge=10, le=60000, description="receive interval, ms")
    multiplier: int = Field(5, ge=2, le=255, description="detect multiplier")

    @property
    def detect_ms(self) -> int:
        """Worst-case detection time of a dead link, ms (``rx_ms x multiplier``)."""
        return self.rx_ms * self.multiplier


#: railab's default (frr.conf as generated before the profile existed: 300 ms x 5).
DEFAULT_BFD = BfdProfile()


class ControlPlane(BaseModel):
    """The resolved liveness timers of one lab: ``bfd`` profile, ``ra_interval_s`` (seconds,
    1..1800) and ``rule``, one sentence saying where each came from (recorded in lab.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bfd: BfdProfile = DEFAULT_BFD
    ra_interval_s: int = Field(RA_MIN_S, ge=1, le=RA_MAX_S)
    bgp_keepalive_s: int = Field(BGP_KEEPALIVE_MIN_S, ge=1, le=21845)
    bgp_hold_s: int = Field(3 * BGP_KEEPALIVE_MIN_S, ge=3, le=65535)
    rule: str = ""


def scaled_bfd(sessions: int) -> tuple[BfdProfile, str]:
    """The default BFD profile for a lab of ``sessions`` fabric BGP sessions (module docstring
    rule) and the reason, as ``(profile, reason)``. 0 sessions: the default profile (unused)."""
    endpoints = 2 * max(0, sessions)
    want = math.ceil(endpoints * 1000 / BFD_TX_BUDGET_PPS / 100) * 100
    interval = max(DEFAULT_BFD.tx_ms, want)
    detect = interval * DEFAULT_BFD.multiplier
    if detect >= BGP_HOLD_MS:
        return (DEFAULT_BFD.model_copy(update={"enabled": False}),
                f"BFD off: {endpoints} endpoints within {BFD_TX_BUDGET_PPS} pps need "
                f"{interval} ms x {DEFAULT_BFD.multiplier} = {detect} ms >= BGP hold "
                f"{BGP_HOLD_MS} ms")
    prof = DEFAULT_BFD.model_copy(update={"tx_ms": interval, "rx_ms": interval})
    return prof, (f"BFD {interval} ms x {DEFAULT_BFD.multiplier}: {endpoints} endpoints within "
                  f"{BFD_TX_BUDGET_PPS} pps (minimum {DEFAULT_BFD.tx_ms} ms)")


def scaled_ra_interval(ports: int) -> tuple[int, str]:
    """The default RA interval (seconds) for ``ports`` unnumbered fabric ports and the reason."""
    s = min(RA_MAX_S, max(RA_MIN_S, math.ceil(max(0, ports) / RA_BUDGET_PPS)))
    return s, f"RA every {s} s: {ports} fabric ports within {RA_BUDGET_PPS} RA/s (minimum {RA_MIN_S} s)"


def scaled_bgp_timers(sessions: int) -> tuple[int, int, str]:
    """The default BGP ``(keepalive_s, hold_s, reason)`` for ``sessions`` fabric sessions: the
    lab sends at most :data:`BGP_KEEPALIVE_BUDGET_PPS` KEEPALIVEs per second, so keepalive =
    ``clamp(ceil(2 x sessions / budget), 3, 60)`` s and hold = 3 x keepalive (3/9 s up to 1500
    sessions: every intent shipped but the 4096-GPU full fabric, which gets 9/27 s). Besides the
    idle cost, a short hold time is what a starved host misses first: on the 4096-GPU fabric at
    load ~100, sessions with a 9 s hold flapped while the lab converged."""
    ka = min(BGP_KEEPALIVE_MAX_S, max(BGP_KEEPALIVE_MIN_S,
                                      math.ceil(2 * max(0, sessions) / BGP_KEEPALIVE_BUDGET_PPS)))
    return ka, 3 * ka, (f"BGP timers {ka}/{3 * ka} s: {2 * sessions} session ends within "
                        f"{BGP_KEEPALIVE_BUDGET_PPS} keepalives/s (minimum {BGP_KEEPALIVE_MIN_S}/"
                        f"{3 * BGP_KEEPALIVE_MIN_S} s)")


def control_plane(sessions: int, bfd: BfdProfile | None = None,
                  ra_interval_s: int | None = None) -> ControlPlane:
    """Resolve the lab's timers: the intent's ``bfd`` / ``ra_interval_s`` when given, else the
    scaled defaults for ``sessions`` fabric BGP sessions (``2 x sessions`` ports and endpoints);
    the BGP keepalive/hold timers always follow :func:`scaled_bgp_timers`."""
    if bfd is None:
        bfd, why_bfd = scaled_bfd(sessions)
        why_bfd = f"{why_bfd} (default rule)"
    else:
        why_bfd = "BFD from lab.bfd"
    if ra_interval_s is None:
        ra_interval_s, why_ra = scaled_ra_interval(2 * sessions)
        why_ra = f"{why_ra} (default rule)"
    else:
        why_ra = "RA interval from lab.ra_interval_s"
    ka, hold, why_bgp = scaled_bgp_timers(sessions)
    return ControlPlane(bfd=bfd, ra_interval_s=ra_interval_s, bgp_keepalive_s=ka, bgp_hold_s=hold,
                        rule=f"{sessions} fabric sessions; {why_bfd}; {why_ra}; {why_bgp}")
