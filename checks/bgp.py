"""BGP check: every planned eBGP session Established on both ends, none unexpected, ASNs as planned.

Expected state: ``lab.json`` ``bgp_sessions`` (one per leaf-spine link, unnumbered over the
interface, RFC 5549/8950) and each switch's ``asn``/``router_id`` (RFC 7938 ASN plan, private
4-byte ASNs of RFC 6996). Observed: FRR ``show bgp vrf default ipv4 unicast summary json`` on every
switch, ``show bgp neighbors IF json`` for failing sessions (last NOTIFICATION), and the
interface's netlink operstate to tell a dead link from a BGP problem.
"""

from __future__ import annotations

from collections import defaultdict

from railab.checks import frr as F
from railab.checks.base import (
    Cause,
    CheckResult,
    ObservationError,
    Observer,
    SessionRef,
    daemon_cause,
    failed,
    frr_unreadable,
    link_id,
    passed,
    register_check,
    skipped,
)
from railab.testbed.linklocal import port_faults
from railab.testbed.namespaces import entered

CHECK = "bgp"


def _end_state(obs: Observer, node: str, iface: str) -> tuple[dict | None, str | None]:
    """(peer dict from the summary or None, error text when the node cannot be read)."""
    try:
        peers = obs.peers(node)
    except ObservationError as exc:
        return None, str(exc)
    return peers.get(iface), None


def _link_status(obs: Observer, node: str, iface: str) -> str | None:
    """``up`` / ``admin-down`` / ``carrier-lost`` / ``missing``, None when netlink is unreadable."""
    try:
        return obs.link_status(node, iface)
    except (ObservationError, OSError):
        return None


def _wrong_remote_as(obs: Observer, link: str, ends: list[tuple[str, str, dict | None, str | None]],
                     planned_remote: dict[str, int]) -> tuple[str, Cause] | None:
    """A session end configured to expect another AS than the peer's planned one (``neighbor
    IF interface remote-as N``; ``railab fault wrong-asn``): FRR's summary shows that end's
    ``remoteAs`` = N while the session is down (a ``remote-as external`` end shows 0 or what it
    last saw). (sentence, ``wrong-asn`` cause on that end's port and the link), or None. When
    the peer itself runs another ASN than planned (its ``router bgp``), the peer is the culprit:
    a node-wide ``wrong-asn`` on it (the same cause as its own ASN row)."""
    for node, iface, peer, _ in ends:
        ras = (peer or {}).get("remoteAs")
        want = planned_remote.get(node)
        if not isinstance(ras, int) or not ras or want is None or ras == want:
            continue
        other = next((n for n, *_ in ends if n != node), node)
        try:
            other_as = obs.bgp_summary(other).get("as")
        except ObservationError:
            other_as = None
        if other_as is not None and other_as != want:
            return (f"{other} runs AS {other_as}, the plan says AS {want}: fix {other}'s "
                    f"`router bgp` ASN (sessions to it fail with Bad Peer AS)",
                    Cause(kind="wrong-asn", node=other))
        return (f"{node}'s neighbor {iface} expects AS {ras} (`neighbor {iface} ... remote-as "
                f"{ras}`), but {other} is AS {want} as planned: the session fails with Bad Peer "
                f"AS; on {node} under `router bgp`: `no neighbor {iface} interface`, then "
                f"`neighbor {iface} interface peer-group FABRIC` (the generated frr.conf's)",
                Cause(kind="wrong-asn", node=node, port=iface, link=link))
    return None


def _admin_shut(link: str, ends: list[tuple[str, str, dict | None, str | None]]) -> tuple[str, Cause] | None:
    """(sentence, ``session-shut`` cause on that end's port and the link) for the first end whose
    summary shows the session shut administratively (``peerState`` ``Admin``, state ``Idle
    (Admin)``), else None. Ends that cannot be read (``peer`` None) are skipped."""
    for node, iface, peer, _ in ends:
        if peer is not None and (peer.get("peerState") == "Admin" or "Admin" in str(peer.get("state", ""))):
            return (f"session administratively shut on {node} (`neighbor {iface} shutdown`); "
                    f"`no neighbor {iface} shutdown` restores it",
                    Cause(kind="session-shut", node=node, port=iface, link=link))
    return None


def _cause(obs: Observer, link: str,
           ends: list[tuple[str, str, dict | None, str | None]],
           planned_remote: dict[str, int] | None = None) -> tuple[str, Cause]:
    """Likely cause of a session over ``link`` that is not Established, most specific first:
    (one sentence, structured cause). ``planned_remote``: node -> the AS it should see on this
    session (names a wrong ``remote-as``, see :func:`_wrong_remote_as`).

    An end shut administratively (``neighbor IF shutdown``: ``session-shut`` on that end), or
    expecting a wrong remote AS, is named before an end that cannot be read: that is the end's
    own configuration, which a dead daemon at the other end neither causes nor explains, and
    bringing that daemon back leaves the session down (issue 48: the shut had no root of its
    own beside the far end's dead bgpd)."""
    shut = _admin_shut(link, ends)
    if shut is not None:
        return shut
    for node, _iface, _peer, err in ends:
        if err:
            # the readable end's own wrong remote-as first, as its shut: a dead far end does not
            # change what this end is configured to expect
            wrong = _wrong_remote_as(obs, link, ends, planned_remote) if planned_remote else None
            if wrong is not None:
                return wrong
            return frr_unreadable(node, err, "bgpd"), daemon_cause(node, err, "bgpd")
    for node, iface, peer, _ in ends:
        if peer is None:
            return (f"{node} has no BGP neighbor {iface}: add `neighbor {iface} interface "
                    f"remote-as ...` to {node}'s frr.conf",
                    Cause(kind="neighbor-missing", node=node, port=iface, link=link))
    for node, iface, _, _ in ends:
        status = _link_status(obs, node, iface)
        if status not in (None, "up"):
            return (f"link {node}:{iface} is down (netlink: {status}); check the cable/veth",
                    Cause(kind="link-down", node=node, port=iface, link=link))
    wrong = _wrong_remote_as(obs, link, ends, planned_remote) if planned_remote else None
    if wrong is not None:
        return wrong
    for node, iface, _, _ in ends:
        try:
            nb = obs.bgp_neighbor(node, iface)
        except ObservationError:
            continue
        reason = nb.get("lastNotificationReason") or ""
        if "Bad Peer AS" in reason:
            return (f"{node} got NOTIFICATION '{reason}' on {iface}: the peer's `router bgp` ASN "
                    f"or this end's `remote-as` disagrees with the plan",
                    Cause(kind="session-down", node=node, port=iface, link=link))
        if reason:
            return (f"{node} last NOTIFICATION on {iface}: {reason}",
                    Cause(kind="session-down", node=node, port=iface, link=link))
    for node, iface, _, _ in ends:
        missing = _link_local_fault(obs, node, iface)
        if missing:
            return (f"{node}:{iface} lacks its IPv6 link-local state ({missing}): unnumbered BGP "
                    f"cannot reach the peer; `railab check --wait S` repairs it (IPv6 restarted on "
                    f"the port), as `railab up` does",
                    Cause(kind="link-local-missing", node=node, port=iface, link=link))
    return ("not Established: check bgpd logs on both ends (timers, IPv6 link-local, remote-as)",
            Cause(kind="session-down", link=link))


def _link_local_fault(obs: Observer, node: str, iface: str) -> str | None:
    """What of ``node:iface``'s IPv6 link-local state is missing (:func:`railab.testbed.linklocal.port_faults`,
    in the node's namespace), or None (complete, or no namespace to read: a real fabric)."""
    ns = obs.netns_of(node)
    if not ns:
        return None
    try:
        with entered(ns):
            return port_faults([iface]).get(iface)
    except OSError:
        return None


def check_bgp(obs: Observer) -> list[CheckResult]:
    """Return one result per switch ASN/router-id, per planned session and per unexpected peer.

    Node ASN: ``as`` of the summary == ``Node.asn`` (a wrong ASN in frr.conf shows here) and
    ``routerId`` == ``Node.router_id``. Session: both ends list the peer interface, state
    ``Established``, and the remote AS each end sees equals the other end's planned ASN.
    """
    spec = obs.spec
    results: list[CheckResult] = []
    switches = [n for n in spec.nodes if n.role != "server"]
    expected_ifs: dict[str, set[str]] = defaultdict(set)
    for s in spec.bgp_sessions:
        expected_ifs[s.node].add(s.interface)
        expected_ifs[s.peer].add(s.peer_interface)

    for node in switches:
        if node.asn is None or not expected_ifs.get(node.name):
            continue  # a switch without BGP in the plan (e.g. a Rail-only leaf)
        name = f"{node.name} ASN"
        try:
            summ = obs.bgp_summary(node.name)
        except ObservationError as exc:
            results.append(failed(CHECK, name, node=node.name, subject="router bgp",
                                  expected=f"AS {node.asn}", observed="no answer",
                                  reason=frr_unreadable(node.name, exc, "bgpd"),
                                  cause=daemon_cause(node.name, exc, "bgpd")))
            continue
        local_as = summ.get("as")
        rid = summ.get("routerId")
        if local_as != node.asn:
            results.append(failed(
                CHECK, name, node=node.name, subject="router bgp",
                expected=f"AS {node.asn}", observed=f"AS {local_as}" if local_as else "no BGP instance",
                reason=(f"{node.name}'s frr.conf has `router bgp {local_as}`; the plan says "
                        f"{node.asn}: fix the ASN (sessions to it fail with Bad Peer AS)")
                if local_as else f"no `router bgp` running on {node.name}",
                cause=Cause(kind="wrong-asn", node=node.name) if local_as
                else Cause(kind="config", node=node.name)))
        elif node.router_id and rid != str(node.router_id):
            results.append(failed(
                CHECK, name, node=node.name, subject="router-id",
                expected=f"AS {node.asn}, router-id {node.router_id}",
                observed=f"AS {local_as}, router-id {rid}",
                reason=f"set `bgp router-id {node.router_id}` (the loopback) on {node.name}",
                cause=Cause(kind="wrong-asn", node=node.name)))
        else:
            results.append(passed(CHECK, name, node=node.name, subject="router bgp",
                                  expected=f"AS {node.asn}", observed=f"AS {local_as}"))

    for s in spec.bgp_sessions:
        name = f"{s.node}:{s.interface} <-> {s.peer}:{s.peer_interface}"
        link = link_id(s.node, s.interface, s.peer, s.peer_interface)
        ref = SessionRef(node=s.node, interface=s.interface, peer=s.peer,
                         peer_interface=s.peer_interface)
        ends = []
        for node, iface in ((s.node, s.interface), (s.peer, s.peer_interface)):
            peer, err = _end_state(obs, node, iface)
            ends.append((node, iface, peer, err))
        planned_remote = {s.node: s.remote_asn, s.peer: s.local_asn}
        expected = f"Established both ends, AS {s.local_asn} <-> AS {s.remote_asn}"
        observed_parts = []
        bad_state = []
        bad_as = []
        for node, iface, peer, err in ends:
            if err or peer is None:
                observed_parts.append(f"{node}:{iface} {'unreadable' if err else 'not configured'}")
                bad_state.append(node)
                continue
            state = peer.get("state", "?")
            ras = peer.get("remoteAs")
            observed_parts.append(f"{node}:{iface} {state} remote AS {ras}")
            if not F.session_up(state):
                bad_state.append(node)
            elif ras != planned_remote[node]:
                bad_as.append((node, iface, ras))
        observed = "; ".join(observed_parts)
        if bad_state:
            reason, cause = _cause(obs, link, ends, planned_remote)
            port = s.interface if bad_state[0] == s.node else s.peer_interface
            results.append(failed(CHECK, name, node=bad_state[0], subject=f"session {name}",
                                  expected=expected, observed=observed, reason=reason,
                                  port=port, link=link, session=ref, cause=cause))
        elif bad_as:
            node, iface, ras = bad_as[0]
            other = s.peer if node == s.node else s.node
            results.append(failed(
                CHECK, name, node=node, subject=f"session {name}", expected=expected,
                observed=observed,
                reason=(f"{node} sees AS {ras} on {iface}, plan says {other} is AS "
                        f"{planned_remote[node]}: {other}'s `router bgp` ASN is wrong"),
                port=iface, link=link, session=ref, cause=Cause(kind="wrong-asn", node=other)))
        else:
            results.append(passed(CHECK, name, node=s.node, subject=f"session {name}",
                                  expected=expected, observed=observed, port=s.interface,
                                  link=link, session=ref))

    for node in switches:
        try:
            peers = obs.peers(node.name)
        except ObservationError:
            continue
        for iface, peer in sorted(peers.items()):
            if iface in expected_ifs.get(node.name, set()):
                continue
            results.append(failed(
                CHECK, f"{node.name}:{iface} unexpected", node=node.name,
                subject=f"neighbor {iface}", expected="no session",
                observed=f"{peer.get('state')} remote AS {peer.get('remoteAs')}",
                reason=f"{node.name}'s frr.conf has a neighbor {iface} the plan does not; "
                       f"remove it or regenerate the lab",
                port=iface, link=obs.link_of(node.name, iface),
                cause=Cause(kind="config", node=node.name, port=iface)))
    if not results:
        results.append(skipped(CHECK, "sessions", "the plan has no BGP sessions"))
    return results


register_check(CHECK, check_bgp, order=20, frr_commands=(F.CMD_SUMMARY,),
               description="every unnumbered eBGP session is Established with the expected ASNs")
