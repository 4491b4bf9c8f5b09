"""Cabling audit: every link of ``lab.json`` joins the recorded ports and is up, read from the LIVE lab.

The wiring is read from netlink, never from the lab files: for the ``a`` end of every link the
veth's peer ifindex (IFLA_LINK) and peer namespace id (IFLA_LINK_NETNSID) are resolved to the lab
node whose namespace has that id and to the interface with that index there
(:meth:`checks.base.Observer.peer`). A server NIC must land on the Rail-N leaf of its group
(seed guide: NIC N of every server connects to the Rail-N leaf); a swapped cable is reported as
``srv3 NIC 3 is on g1-leaf5:eth2 (rail 5), expected g1-leaf3:eth2 (rail 3)``.

The rows audited are the cabling plan's rows (:func:`railab.topologies.cabling.lab_cables`, the
same rows ``railab generate --cabling`` writes, one per ``lab.json`` link), and each expected
end names its production port too (``= Ethernet4, cage 1/2``: the SONiC name and cage/sub-port
of that lab port on the design's switch model, :func:`railab.topologies.cabling.production_end`),
so a field engineer auditing a real fabric reads the same numbering as the CSV.
"""

from __future__ import annotations

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
from railab.topologies.cabling import lab_cables, production_end, spec_breakouts
from railab.topologies.labspec import Endpoint

CHECK = "cabling"


def _production(node: str, port: str, breakouts: dict) -> str:
    """`` = Ethernet<n>, cage <c>/<s>`` for a switch port (the cabling plan's numbering), else
    ""."""
    if node not in breakouts:
        return ""
    try:
        cage, sub, sonic, _alias = production_end(port, *breakouts[node])
    except ValueError:
        return ""
    return f" = {sonic}, cage {cage}/{sub}"


def _rail_of(obs: Observer, leaf: str, port: str | None) -> int | None:
    """Rail of ``leaf:port`` per the plan (the NIC planned there), else the leaf's only rail."""
    for nic in obs.spec.nics:
        if nic.leaf == leaf and nic.leaf_port == port:
            return nic.rail
    try:
        rails = obs.spec.node(leaf).rails
    except KeyError:
        return None
    return rails[0] if len(rails) == 1 else None


def _where(obs: Observer, node: str, iface: str | None) -> str:
    try:
        n = obs.spec.node(node)
    except KeyError:
        return f"{node}:{iface}"
    if n.role == "leaf":
        rail = _rail_of(obs, node, iface)
        return f"{node}:{iface}" + (f" (rail {rail})" if rail is not None else "")
    return f"{node}:{iface}"


def check_cabling(obs: Observer) -> list[CheckResult]:
    """One result per ``lab.json`` link: wired to the planned peer port, and up on both ends.

    Results are ``skip`` for links whose namespaces cannot be read (real devices over SSH).
    """
    spec = obs.spec
    results: list[CheckResult] = []
    nic_by_port = {(n.server, n.interface): n for n in spec.nics}
    breakouts = spec_breakouts(spec)
    for cable in lab_cables(spec):
        a = Endpoint(node=cable.a_node, interface=cable.a_port)
        b = Endpoint(node=cable.b_node, interface=cable.b_port)
        nic = nic_by_port.get((a.node, a.interface)) if cable.kind == "server-leaf" else None
        if nic is not None:
            name = f"{a.node} NIC {nic.nic}"
            subject = f"{a.node}:{a.interface} rail {nic.rail}"
        else:
            name = f"{a.node}:{a.interface} <-> {b.node}:{b.interface}"
            subject = f"{cable.kind} link"
        expected = _where(obs, b.node, b.interface) + _production(b.node, b.interface, breakouts)
        lid = link_id(a.node, a.interface, b.node, b.interface)
        ref = {"node": a.node, "subject": subject, "port": a.interface, "link": lid}
        try:
            peer = obs.peer(a.node, a.interface)
            a_link = obs.links(a.node).get(a.interface)
        except (ObservationError, OSError) as exc:
            results.append(skipped(CHECK, name, f"cannot read netlink: {exc}", **ref,
                                   expected=expected))
            continue
        if a_link is None:
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=f"{a.node} has no interface {a.interface}",
                                  reason=f"the runtime did not create {a.node}:{a.interface}; "
                                         f"redeploy the lab",
                                  cause=Cause(kind="port-missing", node=a.node, port=a.interface,
                                              link=lid)))
            continue
        if peer is None:
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=f"{a.interface} leads to no lab node",
                                  reason="the veth peer is missing or in a namespace outside the "
                                         "lab (cable unplugged or moved)",
                                  cause=Cause(kind="miswired", node=a.node, port=a.interface,
                                              link=lid)))
            continue
        if peer != (b.node, b.interface):
            where = _where(obs, *peer)
            if nic is not None:
                msg = f"{a.node} NIC {nic.nic} is on {where}, expected {expected}"
                if peer[0] != b.node:
                    reason = msg + ": swap the cable back (NIC N belongs on the rail-N leaf)"
                else:
                    reason = msg + ": wrong leaf port (addressing on that port will not match)"
            else:
                reason = (f"{a.node}:{a.interface} is wired to {where}, expected {expected}: "
                          f"re-cable per lab.json")
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=where, reason=reason,
                                  cause=Cause(kind="miswired", node=a.node, port=a.interface,
                                              link=lid)))
            continue
        try:
            b_link = obs.links(b.node).get(b.interface)
        except (ObservationError, OSError):
            b_link = None
        ends = [(n, i, st) for n, i, st in
                ((a.node, a.interface, a_link), (b.node, b.interface, b_link))
                if st is not None and not st.up]
        if ends:
            down = [f"{n}:{i} {st.operstate}" for n, i, st in ends]
            # the end that is administratively down is the one to fix; else the first
            first = next((e for e in ends if e[2].status == "admin-down"), ends[0])
            results.append(failed(
                CHECK, name, **ref, expected=f"{expected}, up",
                observed=f"{expected}, " + ", ".join(down),
                reason=f"link down ({', '.join(down)}): bring it up "
                       f"({' / '.join(f'{n}:{i} {st.status}' for n, i, st in ends)})",
                cause=Cause(kind="link-down", node=first[0], port=first[1], link=lid)))
            continue
        results.append(passed(CHECK, name, **ref,
                              expected=f"{expected}, up", observed=f"{expected}, up"))
    if not results:
        results.append(skipped(CHECK, "links", "lab.json lists no links"))
    return results


register_check(CHECK, check_cabling, order=10,
               description="every link of lab.json is up and joins the recorded ports "
                           "(veth peers via netlink)")
