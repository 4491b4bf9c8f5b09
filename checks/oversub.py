"""Oversubscription audit: per leaf, live downlink vs uplink bandwidth equals the intent's ratio.

Bandwidth = links up (:func:`railab.checks.base.link_status` ``up`` on both ends) x the link's planned speed
(``lab.json`` ``links[].speed_gbps``, Gb/s; veths have no real speed). Expected ratio:
``lab.json`` ``oversubscription`` (``"1:1"`` unless the intent says otherwise; the seed guide
builds non-blocking 1:1 leaves). A Rail-only leaf has no uplinks: nothing to audit.
"""

from __future__ import annotations

from fractions import Fraction

from railab.checks.base import (
    Cause,
    CheckResult,
    ObservationError,
    Observer,
    failed,
    link_id,
    passed,
    register_check,
    skipped,
)
from railab.topologies.units import parse_ratio  # the one ratio parser

CHECK = "oversub"


def _fmt(r: Fraction) -> str:
    return f"{float(r):g}:1"


def _lid(ln) -> str:
    return link_id(ln.a.node, ln.a.interface, ln.b.node, ln.b.interface)


def _is_up(obs: Observer, ln) -> bool:
    """Both ends of ``ln`` are ``up`` (raises ObservationError/OSError when unreadable)."""
    return (obs.link_status(ln.a.node, ln.a.interface) == "up"
            and obs.link_status(ln.b.node, ln.b.interface) == "up")


def check_oversub(obs: Observer) -> list[CheckResult]:
    """One result per leaf: ``down Gb/s : up Gb/s`` live vs the planned ratio."""
    spec = obs.spec
    results: list[CheckResult] = []
    try:
        want = parse_ratio(spec.oversubscription)
    except ValueError as exc:
        return [failed(CHECK, "oversubscription", expected="DOWN:UP",
                       observed=spec.oversubscription, reason=str(exc))]
    for leaf in spec.by_role("leaf"):
        downs = [lk for lk in spec.links if lk.role == "server-leaf" and lk.b.node == leaf.name]
        ups = [lk for lk in spec.links if lk.role == "leaf-spine" and lk.a.node == leaf.name]
        name = leaf.name
        if not ups:
            results.append(skipped(CHECK, name, "no uplinks planned (single-tier Rail-only leaf)",
                                   node=leaf.name))
            continue
        plan_down = sum(lk.speed_gbps for lk in downs)
        plan_up = sum(lk.speed_gbps for lk in ups)
        try:
            dead = [ln for ln in downs + ups if not _is_up(obs, ln)]
        except (ObservationError, OSError) as exc:
            results.append(skipped(CHECK, name, f"cannot read netlink: {exc}", node=leaf.name))
            continue
        live_down = sum(lk.speed_gbps for lk in downs if lk not in dead)
        live_up = sum(lk.speed_gbps for lk in ups if lk not in dead)
        expected = f"{_fmt(want)} ({plan_down} Gb/s down : {plan_up} Gb/s up planned)"
        if live_up == 0:
            results.append(failed(CHECK, name, node=leaf.name, subject="uplinks",
                                  expected=expected, observed=f"{live_down} Gb/s down : 0 Gb/s up",
                                  reason="every uplink is down: the leaf is cut off from the spines",
                                  link=_lid(ups[0]),
                                  cause=Cause(kind="link-down", node=leaf.name, link=_lid(ups[0]))))
            continue
        got = Fraction(live_down, live_up)
        observed = f"{_fmt(got)} ({live_down} Gb/s down : {live_up} Gb/s up live)"
        if got != want:
            dead_txt = ", ".join(
                f"{lk.a.node}:{lk.a.interface}-{lk.b.node}:{lk.b.interface}" for lk in dead)
            link = _lid(dead[0]) if dead else None
            if dead:
                reason = f"links down: {dead_txt}"
                cause = Cause(kind="link-down", node=leaf.name, link=link)
            elif Fraction(plan_down, plan_up) != want:
                reason = (f"the lab as generated is {_fmt(Fraction(plan_down, plan_up))}: the "
                          f"generator's port counts do not match the intent")
                cause = Cause(kind="config", node=leaf.name)
            else:
                reason = "downlink/uplink counts differ from the plan"
                cause = Cause(kind="config", node=leaf.name)
            results.append(failed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected, observed=observed, reason=reason,
                                  link=link, cause=cause))
        else:
            results.append(passed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected, observed=observed))
    if not results:
        results.append(skipped(CHECK, "leaves", "lab.json lists no leaves"))
    return results


register_check(CHECK, check_oversub, order=40,
               description="leaf downlink:uplink capacity matches the design's oversubscription")
