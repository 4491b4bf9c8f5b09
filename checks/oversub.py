"""Oversubscription audit: per leaf, live downlink vs uplink bandwidth equals the intent's ratio.

Bandwidth = links up (netlink operstate UP on both ends) x the link's planned speed
(``lab.json`` ``links[].speed_gbps``, Gb/s; veths have no real speed). Expected ratio:
``lab.json`` ``oversubscription`` (``"1:1"`` unless the intent says otherwise; the seed guide
builds non-blocking 1:1 leaves). A Rail-only leaf has no uplinks: nothing to audit.
"""

from __future__ import annotations

from fractions import Fraction

from railab.checks.base import CheckResult, ObservationError, Observer, failed, passed, skipped
from railab.topologies.units import parse_ratio  # the one ratio parser

CHECK = "oversub"


def _fmt(r: Fraction) -> str:
    return f"{float(r):g}:1"


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
        downs = [l for l in spec.links if l.role == "server-leaf" and l.b.node == leaf.name]
        ups = [l for l in spec.links if l.role == "leaf-spine" and l.a.node == leaf.name]
        name = leaf.name
        if not ups:
            results.append(skipped(CHECK, name, "no uplinks planned (single-tier Rail-only leaf)",
                                   node=leaf.name))
            continue
        plan_down = sum(l.speed_gbps for l in downs)
        plan_up = sum(l.speed_gbps for l in ups)
        try:
            def is_up(link) -> bool:
                ea = obs.links(link.a.node).get(link.a.interface)
                eb = obs.links(link.b.node).get(link.b.interface)
                return bool(ea and ea.up and eb and eb.up)

            dead = [l for l in downs + ups if not is_up(l)]
        except (ObservationError, OSError) as exc:
            results.append(skipped(CHECK, name, f"cannot read netlink: {exc}", node=leaf.name))
            continue
        live_down = sum(l.speed_gbps for l in downs if l not in dead)
        live_up = sum(l.speed_gbps for l in ups if l not in dead)
        expected = f"{_fmt(want)} ({plan_down} Gb/s down : {plan_up} Gb/s up planned)"
        if live_up == 0:
            results.append(failed(CHECK, name, node=leaf.name, subject="uplinks",
                                  expected=expected, observed=f"{live_down} Gb/s down : 0 Gb/s up",
                                  reason="every uplink is down: the leaf is cut off from the spines"))
            continue
        got = Fraction(live_down, live_up)
        observed = f"{_fmt(got)} ({live_down} Gb/s down : {live_up} Gb/s up live)"
        if got != want:
            dead_txt = ", ".join(
                f"{l.a.node}:{l.a.interface}-{l.b.node}:{l.b.interface}" for l in dead)
            if dead:
                reason = f"links down: {dead_txt}"
            elif Fraction(plan_down, plan_up) != want:
                reason = (f"the lab as generated is {_fmt(Fraction(plan_down, plan_up))}: the "
                          f"generator's port counts do not match the intent")
            else:
                reason = "downlink/uplink counts differ from the plan"
            results.append(failed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected, observed=observed, reason=reason))
        else:
            results.append(passed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected, observed=observed))
    if not results:
        results.append(skipped(CHECK, "leaves", "lab.json lists no leaves"))
    return results
