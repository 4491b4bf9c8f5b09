"""Route propagation check: expected prefixes in the RIB and kernel FIB with the planned ECMP width.

Expected state (``lab.json``):

* ``expected_routes[node]``: prefix, ECMP width (= spines x parallel links for a leaf's remote
  prefixes) and next-hop interfaces;
* spines carry every rail subnet;
* every rail subnet is announced by its leaf (``rail_subnets[].leaf``: static blackhole +
  ``network``), so it is locally originated in that leaf's BGP table;
* Rail-only leaves have no route to a rail subnet of a rail they do not carry.

The RIB side is the single convergence predicate :func:`railab.checks.frr.route_verdict` (the
same one the convergence wait uses): selected + installed, exactly ``ecmp_width`` FIB next hops
over the planned interfaces.

Observed: FRR ``show ip route json`` (selected entry, its FIB next hops), FRR
``show bgp vrf default ipv4 unicast json`` (local origination) and the kernel main table over
netlink (RTA_MULTIPATH path count and output interfaces).
"""

from __future__ import annotations

from railab.checks import frr as F
from railab.checks.base import (
    Cause,
    CheckResult,
    ObservationError,
    Observer,
    cause_fields,
    daemon_cause,
    failed,
    frr_unreadable,
    passed,
    register_check,
    skipped,
)
from railab.topologies.labspec import ExpectedRoute

CHECK = "routes"


def _origin(obs: Observer, prefix: str) -> str | None:
    for rs in obs.spec.rail_subnets:
        if rs.prefix == prefix:
            return rs.leaf
    for n in obs.spec.nodes:
        if n.loopback and str(n.loopback.ip) == prefix.split("/")[0] and prefix.endswith("/32"):
            return n.name
    return None


def _announces(obs: Observer, node: str, prefix: str) -> bool | None:
    """True when ``node`` originates ``prefix`` in BGP (local path: empty AS path, sourced),
    read for that prefix only (``cmd_bgp_prefix``); None when bgpd cannot be read."""
    try:
        doc = obs.frr(node, F.cmd_bgp_prefix(prefix))
    except ObservationError:
        return None
    return F.originated_here(doc)


def _announced_invalid(obs: Observer, node: str, prefix: str) -> bool:
    """True when ``node`` originates ``prefix`` but no local path of it is valid (``"valid":
    false``: the ``network`` has no route under it in zebra, e.g. the static blackhole
    aggregate went with a dead staticd), so it is not sent to any peer."""
    try:
        doc = obs.frr(node, F.cmd_bgp_prefix(prefix))
    except ObservationError:
        return False
    paths = doc.get("paths") if isinstance(doc, dict) else None
    local = [p for p in paths or [] if (p.get("aspath") or {}).get("length", 1) == 0 and p.get("sourced")]
    return bool(local) and not any(p.get("valid", True) for p in local)


def _bgp_table_error(obs: Observer, node: str) -> tuple[str, Cause]:
    """Why ``node``'s BGP table could not be read: (one sentence, cause); see frr_unreadable."""
    try:
        obs.bgp_table(node)
    except ObservationError as exc:
        return frr_unreadable(node, exc, "bgpd"), daemon_cause(node, exc, "bgpd")
    return (f"cannot read {node}'s BGP table; is bgpd running?",
            Cause(kind="daemon-dead", node=node, daemon="bgpd"))


def _bgp_planned(obs: Observer, node: str) -> bool:
    return any(s.node == node or s.peer == node for s in obs.spec.bgp_sessions)


def _port_cause(obs: Observer, node: str, iface: str, peers: dict, prefix: str | None
                ) -> tuple[str, Cause | None]:
    """Why ``node`` has no path via ``iface`` (toward ``prefix``, None: any): its link is down,
    its BGP session is not Established (also: no neighbor configured on a planned port, when
    ``prefix`` is None), or the neighbor behind it lacks ``prefix`` itself (``upstream``);
    (text, structured cause or None when nothing is known)."""
    try:
        status = obs.link_status(node, iface)
    except (ObservationError, OSError):
        status = None
    peer = peers.get(iface)
    link = obs.link_of(node, iface)
    if status not in (None, "up", "missing"):
        return f"{iface} link down", Cause(kind="link-down", node=node, port=iface, link=link)
    if (peer is None and prefix is None) or (peer is not None and not F.session_up(peer.get("state"))):
        state = peer.get("state") if peer is not None else "not configured"
        return (f"BGP on {iface} is {state}",
                Cause(kind="session-down", node=node, port=iface, link=link))
    if prefix is not None and (nbr := _neighbor_on(obs, node, iface)):
        has = _has_route(obs, nbr, prefix)
        if has is False:
            return (f"{nbr} (behind {iface}) has no route to {prefix} itself: see {nbr}'s rows",
                    Cause(kind="upstream", node=nbr, prefix=prefix))
        if has is None:
            return _unreadable_neighbor(obs, nbr, iface, prefix)
    return f"no path learned via {iface}", None


def _unreadable_neighbor(obs: Observer, nbr: str, iface: str, prefix: str) -> tuple[str, Cause]:
    """Why no path to ``prefix`` comes from ``nbr`` (behind ``iface``) whose RIB does not answer
    (zebra dead): its BGP table (bgpd still runs) lacking the prefix because its own session to
    the prefix's origin is down names that session (a wrong ASN or a pulled cable there, not
    the dead zebra, keeps the prefix away); lacking it otherwise, ``upstream`` (it follows the
    neighbor's own rows); having it, or no BGP table either, the neighbor's dead daemon."""
    try:
        paths = obs.bgp_table(nbr).get(prefix)
    except ObservationError as exc:
        return (f"{nbr} (behind {iface}): {frr_unreadable(nbr, exc, 'bgpd')}",
                daemon_cause(nbr, exc, "bgpd"))
    if not paths:
        origin = _origin(obs, prefix)
        direct = _session_states(obs, nbr, origin) if origin and origin != nbr else []
        if direct:
            return f"{nbr} (behind {iface}) has no BGP path to {prefix}: {direct[0][0]}", direct[0][1]
        return (f"{nbr} (behind {iface}) has no BGP path to {prefix} itself: see {nbr}'s rows",
                Cause(kind="upstream", node=nbr, prefix=prefix))
    try:
        obs.rib(nbr)
        err: Exception | str = f"{nbr}: zebra does not answer"
    except ObservationError as exc:
        err = exc
    return (f"{nbr} (behind {iface}) has {prefix} in BGP but {frr_unreadable(nbr, err, 'zebra')}",
            daemon_cause(nbr, err, "zebra"))


def _why_missing_ifs(obs: Observer, node: str, prefix: str,
                     missing: list[str] | tuple[str, ...]) -> tuple[str, list[Cause]]:
    """Name the cause for next hops missing via ``missing`` interfaces of ``node``: (text, the
    structured causes of the interfaces, in order: two interfaces cut by different faults give
    two causes, a joint row; [] when the first interface's cause is unknown)."""
    try:
        peers = obs.peers(node)
    except ObservationError:
        peers = {}
    parts = [_port_cause(obs, node, iface, peers, prefix) for iface in missing]
    if not parts or parts[0][1] is None:
        return "; ".join(t for t, _ in parts), []
    return "; ".join(t for t, _ in parts), [c for _, c in parts if c is not None]


def _planned_ports(obs: Observer, node: str) -> list[str]:
    """``node``'s interfaces with a planned BGP session (lab.json bgp_sessions), in plan order."""
    out = []
    for s in obs.spec.bgp_sessions:
        if s.node == node:
            out.append(s.interface)
        elif s.peer == node:
            out.append(s.peer_interface)
    return list(dict.fromkeys(out))


def _every_path_cut(obs: Observer, node: str, peers: dict, prefix: str | None
                    ) -> tuple[str, list[Cause]] | None:
    """Each planned BGP port of ``node`` with the reason it gives no path (toward ``prefix``;
    None: no session at all): (text, causes) when every port has a known cause, else None. A
    prefix cut off by two faults (one leaf's uplink down, the other spine's bgpd dead) is then
    a row the two explain together (``CheckResult.joint``)."""
    parts = [(iface, *_port_cause(obs, node, iface, peers, prefix))
             for iface in _planned_ports(obs, node)]
    if not parts or any(c is None for _, _, c in parts):
        return None
    return "; ".join(t for _, t, _ in parts), [c for _, _, c in parts]


def _neighbor_on(obs: Observer, node: str, iface: str) -> str | None:
    """The planned BGP neighbor of ``node`` on ``iface`` (from lab.json bgp_sessions)."""
    for s in obs.spec.bgp_sessions:
        if s.node == node and s.interface == iface:
            return s.peer
        if s.peer == node and s.peer_interface == iface:
            return s.node
    return None


def _has_route(obs: Observer, node: str, prefix: str) -> bool | None:
    """Whether ``node``'s RIB has a selected route to ``prefix``; None when zebra does not answer."""
    try:
        return F.selected_entry(obs.rib(node).get(prefix, [])) is not None
    except ObservationError:
        return None


def _session_states(obs: Observer, a: str, b: str) -> list[tuple[str, Cause]]:
    """Non-Established planned sessions between ``a`` and ``b``: (text, cause) each."""
    out = []
    for s in obs.spec.bgp_sessions:
        if {s.node, s.peer} != {a, b}:
            continue
        try:
            peer = obs.peers(s.node).get(s.interface) or {}
        except ObservationError:
            continue
        state = peer.get("state", "not configured")
        if not F.session_up(state):
            out.append((f"BGP session {s.node}:{s.interface} <-> {s.peer}:{s.peer_interface} is {state}",
                        Cause(kind="session-down", node=s.node, port=s.interface,
                              link=obs.link_of(s.node, s.interface))))
    return out


def _why_missing(obs: Observer, node: str, prefix: str) -> tuple[str, list[Cause]]:
    """Why ``prefix`` is missing from ``node``'s RIB: (one sentence, the structured causes that
    explain it together, [] for none known)."""
    origin = _origin(obs, prefix)
    ann: bool | None = None
    if origin and origin != node and _bgp_planned(obs, origin):
        ann = _announces(obs, origin, prefix)
        if ann is False:
            return (f"{origin} does not announce {prefix} (not in its BGP table): add "
                    f"`network {prefix}` under `address-family ipv4 unicast` on {origin}",
                    [Cause(kind="not-announced", node=origin, prefix=prefix)])
    if ann and _announced_invalid(obs, origin, prefix):
        # nothing leaves the origin: every row missing the prefix follows the origin's own
        # rows for it, else its dead daemon (staticd), not whatever else cuts paths on the way
        return (f"{origin} originates {prefix} but its local path is not valid (no route under "
                f"the `network` in zebra: is staticd running on {origin}?), so no peer gets it",
                [Cause(kind="upstream", node=origin, prefix=prefix)])
    try:
        peers = obs.peers(node)
        up = [i for i, p in peers.items() if F.session_up(p.get("state"))]
        if _bgp_planned(obs, node) and not up:
            # each planned session is down for its own reason: one cause per port (a link
            # down and the other spine's dead bgpd explain the row together)
            cut = _every_path_cut(obs, node, peers, None)
            if cut is not None:
                return f"{node} has no Established BGP session ({cut[0]})", cut[1]
            return f"{node} has no Established BGP session", [Cause(kind="session-down", node=node)]
    except ObservationError as exc:
        return frr_unreadable(node, exc, "bgpd"), [daemon_cause(node, exc, "bgpd")]
    if origin:
        direct = _session_states(obs, node, origin)
        if direct:
            return "; ".join(t for t, _ in direct), [direct[0][1]]
        text = f"{prefix} originates at {origin} but did not propagate to {node}; run the bgp check"
        if origin != node and _bgp_planned(obs, origin) and ann is None:
            # the origin's BGP table does not answer (bgpd dead or hung): that is the cause of
            # every row missing its prefixes (grouped under the bgp daemon-dead row)
            why, cause = _bgp_table_error(obs, origin)
            return f"{text}: {why}", [cause]
        if origin == node:
            return text, []
        # the origin announces it: every path from here is cut somewhere (each neighbor lacks
        # it or the session to it is down): the row follows what cuts each path, together
        cut = _every_path_cut(obs, node, peers, prefix)
        if cut is not None:
            return f"{text}: {cut[0]}", cut[1]
        # else it follows whatever the origin's row for the prefix follows (none: a root of
        # its own)
        return text, [Cause(kind="upstream", node=origin, prefix=prefix)]
    return f"nothing on {node} installs {prefix}", []


def _check_one(obs: Observer, node: str, exp: ExpectedRoute, fib_err: list[str]) -> CheckResult:
    prefix = exp.prefix
    name = f"{node} {prefix}"
    want_ifs = sorted(exp.interfaces)
    expected = f"{exp.ecmp_width}-way ECMP" + (f" via {','.join(want_ifs)}" if want_ifs else "")
    ref = {"node": node, "subject": prefix, "prefix": prefix}
    try:
        entries = obs.rib(node).get(prefix, [])
    except ObservationError as exc:
        return failed(CHECK, name, **ref, expected=expected, observed="no answer",
                      reason=frr_unreadable(node, exc, "zebra"), cause=daemon_cause(node, exc, "zebra"))
    verdict = F.route_verdict(entries, exp.ecmp_width, want_ifs)
    if verdict.state == "missing":
        reason, causes = _why_missing(obs, node, prefix)
        return failed(CHECK, name, **ref, expected=expected, observed="missing from RIB",
                      reason=reason, **cause_fields(causes))
    if verdict.state == "not-installed":
        return failed(CHECK, name, **ref, expected=expected,
                      observed=f"selected ({verdict.protocol}) but not installed",
                      reason="zebra selected the route but did not install it: check zebra's log "
                             "(netlink errors) and the next hops' interfaces")
    if verdict.state == "local":
        # locally attached (the node's own rail subnet blackhole or loopback): presence only
        return passed(CHECK, name, **ref, expected="present", observed=f"{verdict.protocol} route")
    ifs = list(verdict.hops)
    observed = f"RIB {len(ifs)}-way via {','.join(ifs) or '-'}"
    if not verdict.ok:
        causes: list[Cause]
        port = None
        if verdict.missing_ifs:
            why, causes = _why_missing_ifs(obs, node, prefix, verdict.missing_ifs)
            reason = f"next hops missing via {','.join(verdict.missing_ifs)}: " + why
            port = verdict.missing_ifs[0]
        elif verdict.extra_ifs:
            reason = f"unexpected next hops via {','.join(verdict.extra_ifs)}: check the cabling audit"
            port = verdict.extra_ifs[0]
            causes = [Cause(kind="miswired", node=node, port=port, link=obs.link_of(node, port))]
        else:
            reason = ("ECMP width differs: check `maximum-paths` and `bgp bestpath as-path "
                      "multipath-relax` on " + node)
            causes = [Cause(kind="config", node=node)]
        return failed(CHECK, name, **ref, expected=expected, observed=observed, reason=reason,
                      port=port, link=obs.link_of(node, port) if port else None,
                      **cause_fields(causes))
    # kernel FIB
    if fib_err:
        return passed(CHECK, name, **ref, expected=expected, observed=observed + " (FIB not read)")
    try:
        route = obs.fib(node).get(prefix)
    except (ObservationError, OSError) as exc:
        fib_err.append(str(exc))
        return passed(CHECK, name, **ref, expected=expected, observed=observed + " (FIB not read)")
    if route is None:
        return failed(CHECK, name, **ref, expected=expected,
                      observed=observed + "; kernel FIB: missing",
                      reason="zebra selected the route but the kernel has none: check zebra's log "
                             "(netlink errors) and `show ip route json` installed flags")
    fib_ifs = sorted(route.oifs)
    observed += f"; FIB {route.width}-way via {','.join(fib_ifs) or '-'}"
    if route.width != exp.ecmp_width or (want_ifs and fib_ifs != want_ifs):
        return failed(CHECK, name, **ref, expected=expected, observed=observed,
                      reason="kernel FIB disagrees with zebra's RIB: check "
                             "fib_multipath settings and zebra's nexthop-group install")
    return passed(CHECK, name, **ref, expected=expected, observed=observed)


def check_routes(obs: Observer) -> list[CheckResult]:
    """One result per (node, expected prefix), per rail-subnet announcement and per forbidden route.

    See the module docstring for what is compared. A node whose namespace cannot be read gets
    RIB-only results plus one ``skip`` row naming why the FIB was not read.
    """
    spec = obs.spec
    results: list[CheckResult] = []
    expected: dict[str, list[ExpectedRoute]] = {k: list(v) for k, v in spec.expected_routes.items()}
    # spines carry every rail subnet (at least one path) even if lab.json lists none for them
    for sp in spec.by_role("spine"):
        have = {e.prefix for e in expected.get(sp.name, [])}
        for rs in spec.rail_subnets:
            if rs.prefix not in have:
                expected.setdefault(sp.name, []).append(
                    ExpectedRoute(prefix=rs.prefix, ecmp_width=1, interfaces=[]))

    # announcements: each rail subnet originated by its leaf (only where BGP is planned)
    for rs in spec.rail_subnets:
        if not _bgp_planned(obs, rs.leaf):
            continue
        name = f"{rs.leaf} announces {rs.prefix}"
        ann = _announces(obs, rs.leaf, rs.prefix)
        if ann is None:
            reason, cause = _bgp_table_error(obs, rs.leaf)
            results.append(failed(CHECK, name, node=rs.leaf, subject=rs.prefix, prefix=rs.prefix,
                                  expected="locally originated in BGP", observed="no answer",
                                  reason=reason, cause=cause))
        elif not ann:
            results.append(failed(
                CHECK, name, node=rs.leaf, subject=rs.prefix, prefix=rs.prefix,
                expected="locally originated in BGP",
                observed="not in its BGP table as a local route",
                reason=(f"add `network {rs.prefix}` under `address-family ipv4 unicast` (and the "
                        f"static blackhole `ip route {rs.prefix} blackhole`) on {rs.leaf}"),
                cause=Cause(kind="not-announced", node=rs.leaf, prefix=rs.prefix)))
        else:
            results.append(passed(CHECK, name, node=rs.leaf, subject=rs.prefix, prefix=rs.prefix,
                                  expected="locally originated in BGP", observed="announced"))

    for node in sorted(expected, key=lambda n: (spec.node(n).role if n in {x.name for x in spec.nodes} else "", n)):
        fib_err: list[str] = []
        for exp in sorted(expected[node], key=lambda e: e.prefix):
            results.append(_check_one(obs, node, exp, fib_err))
        if fib_err:
            results.append(skipped(CHECK, f"{node} kernel FIB", fib_err[0], node=node))

    if spec.architecture == "rail-only":
        for leaf in spec.by_role("leaf"):
            allowed = {e.prefix for e in expected.get(leaf.name, [])}
            try:
                rib = obs.rib(leaf.name)
            except ObservationError:
                continue  # already reported above
            for rs in spec.rail_subnets:
                if rs.rail in leaf.rails or rs.prefix in allowed:
                    continue
                name = f"{leaf.name} no route to rail {rs.rail}"
                if F.selected_entry(rib.get(rs.prefix, [])) is not None:
                    results.append(failed(
                        CHECK, name, node=leaf.name, subject=rs.prefix, prefix=rs.prefix,
                        expected="no route",
                        observed=f"route to {rs.prefix} (rail {rs.rail})",
                        reason=(f"Rail-only leaf {leaf.name} carries rails {leaf.rails} only; a route "
                                f"to rail {rs.rail} means rails are bridged (extra link or "
                                f"session, or a static route)"),
                        cause=Cause(kind="config", node=leaf.name, prefix=rs.prefix)))
                else:
                    results.append(passed(CHECK, name, node=leaf.name, subject=rs.prefix,
                                          prefix=rs.prefix, expected="no route", observed="no route"))
    if not results:
        results.append(skipped(CHECK, "routes", "lab.json lists no expected routes"))
    return results


register_check(CHECK, check_routes, order=30,
               frr_commands=(F.CMD_SUMMARY, F.CMD_RIB, F.CMD_BGP_TABLE),
               description="every expected prefix is in each switch FIB with the expected ECMP width")
