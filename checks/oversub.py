"""Oversubscription audit: per leaf, live downlink vs uplink bandwidth equals the intent's ratio.

Bandwidth = links that carry traffic x the link's planned speed (``lab.json``
``links[].speed_gbps``, Gb/s; veths have no real speed). A downlink carries traffic when it is
up on both ends (:func:`railab.checks.base.link_status`); an uplink when it is up *and* its
planned BGP session is Established on the leaf (:func:`railab.checks.frr.session_up`): with the
session down the leaf installs no route over the link, so a 1:1 leaf with one of two sessions
down is effectively 2:1 although every link is up. Expected ratio: ``lab.json``
``oversubscription`` (``"1:1"`` unless the intent says otherwise; the seed guide builds
non-blocking 1:1 leaves). A Rail-only leaf has no uplinks: nothing to audit.

A leaf that lost only downlinks (a server NIC down) has less demand, not less capacity: the row
passes and says which downlinks are idle; the cabling check reports the NIC (one root cause, not
a new "0.5:1" failure). Lost uplinks fail with the link's cause (``link-down`` or
``session-down`` on that link), so :func:`railab.checks.runner.group_failures` files the row
under the cabling or bgp row of the same link.
"""

from __future__ import annotations

from fractions import Fraction

from railab.checks import frr as F
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


def _sessions_down(obs: Observer, leaf: str, ups) -> tuple[list, str | None]:
    """Uplinks of ``leaf`` whose planned BGP session is not Established on the leaf, and an
    error text when the leaf's BGP summary cannot be read (then no uplink is judged by its
    session: the data plane may still forward on the routes it has)."""
    try:
        peers = obs.peers(leaf)
    except ObservationError as exc:
        return [], str(exc)
    down = []
    for ln in ups:
        if obs.spec.session_on(leaf, ln.a.interface) is None:
            continue  # no session planned on this uplink
        peer = peers.get(ln.a.interface)
        if not F.session_up(None if peer is None else str(peer.get("state"))):
            down.append(ln)
    return down, None


def _up_cause(leaf: str, ln, no_bgp: list) -> Cause:
    """The cause of an uplink that carries no traffic: its session (``session-down``, the bgp
    row's key) or its link (``link-down``)."""
    if ln in no_bgp:
        return Cause(kind="session-down", node=leaf, port=ln.a.interface, link=_lid(ln))
    return Cause(kind="link-down", node=leaf, link=_lid(ln))


def _up_text(ln, no_bgp: list) -> str:
    end = f"{ln.a.node}:{ln.a.interface}-{ln.b.node}:{ln.b.interface}"
    return f"{end} (BGP session not Established)" if ln in no_bgp else f"{end} (link down)"


def check_oversub(obs: Observer) -> list[CheckResult]:
    """One result per leaf: ``down Gb/s : up Gb/s`` that carries traffic vs the planned ratio
    (module docstring: uplinks count when up and their BGP session is Established)."""
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
        no_bgp, bgp_err = _sessions_down(obs, leaf.name, [ln for ln in ups if ln not in dead])
        idle_up = [ln for ln in ups if ln in dead or ln in no_bgp]
        idle_down = [ln for ln in downs if ln in dead]
        live_down = sum(lk.speed_gbps for lk in downs if lk not in idle_down)
        live_up = sum(lk.speed_gbps for lk in ups if lk not in idle_up)
        expected = f"{_fmt(want)} ({plan_down} Gb/s down : {plan_up} Gb/s up planned)"

        if live_up == 0:
            results.append(failed(CHECK, name, node=leaf.name, subject="uplinks",
                                  expected=expected, observed=f"{live_down} Gb/s down : 0 Gb/s up",
                                  reason="no uplink carries traffic: the leaf is cut off from the "
                                         "spines: " + ", ".join(_up_text(ln, no_bgp) for ln in idle_up),
                                  link=_lid(idle_up[0]), cause=_up_cause(leaf.name, idle_up[0], no_bgp)))
            continue
        if idle_down and not idle_up and Fraction(live_down, live_up) <= want:
            # a server NIC down: less demand, the same capacity; the cabling row is the cause
            got = Fraction(live_down, live_up)
            idle = ", ".join(f"{lk.a.node}:{lk.a.interface}" for lk in idle_down)
            results.append(passed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected,
                                  observed=f"{_fmt(got)} ({live_down} Gb/s down : {live_up} Gb/s "
                                           f"up live; idle downlinks: {idle}, see cabling)"))
            continue
        got = Fraction(live_down, live_up)
        observed = (f"{_fmt(got)} ({live_down} Gb/s down : {live_up} Gb/s up carrying traffic"
                    + (f"; BGP summary unreadable, sessions not judged: {bgp_err}" if bgp_err else "")
                    + ")")
        if got != want and idle_up:
            results.append(failed(CHECK, name, node=leaf.name, subject="downlink:uplink",
                                  expected=expected, observed=observed,
                                  reason="uplinks not carrying traffic: "
                                         + ", ".join(_up_text(ln, no_bgp) for ln in idle_up),
                                  link=_lid(idle_up[0]), cause=_up_cause(leaf.name, idle_up[0], no_bgp)))
            continue
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


register_check(CHECK, check_oversub, order=40, frr_commands=(F.CMD_SUMMARY,),
               description="leaf downlink:uplink capacity matches the design's oversubscription")
