"""Server policy routing: every server NIC has its source rule and its per-NIC default route.

The traffic engine sends frames straight to the leaf MAC, so a server whose ``default via <leaf>
dev eth<n> table 100+n`` route is gone still "delivers" in the hops check: this family makes the
missing route visible. Per NIC ``n`` (railab.topologies.routing, lab.json ``nics[]``):

* the rule ``from <nic address> lookup 100+n`` at priority ``1000+n``;
* in table ``100+n``, a default route via the NIC's leaf-side address out of ``eth<n>``.

Read live over netlink (RTM_GETRULE, RTM_GETROUTE) in the server's namespace. Downing a NIC
flushes its table route (the kernel drops routes through a device that goes down), so a NIC whose
link is down fails here with the link as its cause (grouped under the cabling row); a NIC whose
link is up but whose route is missing (a flapped NIC) is a root cause of its own.
"""

from __future__ import annotations

from railab.checks.base import (
    Cause,
    CheckResult,
    ObservationError,
    Observer,
    failed,
    passed,
    register_check,
    skipped,
)
from railab.topologies import routing

CHECK = "policy"


def check_policy(obs: Observer) -> list[CheckResult]:
    """One row per server NIC: its source rule and its table's default route are in place.

    ``skip`` for servers whose namespace cannot be read (real hosts over SSH)."""
    out: list[CheckResult] = []
    for server in obs.spec.by_role("server"):
        nics = obs.spec.nics_of(server.name)
        try:
            rtnl = obs._rtnl(server.name)
            links = obs.links(server.name)
            rules = rtnl.rules()
            tables: dict[int, list] = {}
            for rt in rtnl.routes(None):  # one dump of every table, then per NIC table
                tables.setdefault(rt.table, []).append(rt)
        except (ObservationError, OSError) as exc:
            for nic in nics:
                out.append(skipped(CHECK, f"{server.name} NIC {nic.nic} policy routing",
                                   f"cannot read netlink: {exc}", node=server.name, port=nic.interface))
            continue
        by_table: dict[int, list] = {}
        for r in rules:
            by_table.setdefault(r.table, []).append(r)
        for nic in nics:
            name = f"{server.name} NIC {nic.nic} policy routing"
            addr = str(nic.address.ip)
            pref = routing.rule_priority(nic.nic)
            lid = obs.link_of(server.name, nic.interface)
            ref = {"node": server.name, "port": nic.interface, "link": lid,
                   "subject": f"table {nic.table}"}
            expected = (f"rule from {addr} lookup {nic.table} pref {pref}; "
                        f"default via {nic.gateway} dev {nic.interface} table {nic.table}")
            have_rule = any(r.src == addr and r.src_len == 32 and r.priority == pref
                            for r in by_table.get(nic.table, []))
            link = links.get(nic.interface)
            route_ok, seen = False, "no default route"
            if link is not None:
                for rt in tables.get(nic.table, []):
                    if rt.dst_len != 0:
                        continue
                    oif = rt.oifs[0] if rt.oifs else None
                    dev = obs.ifname(server.name, oif) if oif is not None else None
                    seen = f"default via {rt.gateway} dev {dev}"
                    route_ok = rt.gateway == str(nic.gateway) and dev == nic.interface
                    if route_ok:
                        break
            missing = [what for ok, what in ((have_rule, f"rule from {addr} lookup {nic.table}"),
                                             (route_ok, f"default via {nic.gateway} dev "
                                                        f"{nic.interface} table {nic.table}")) if not ok]
            if not missing:
                out.append(passed(CHECK, name, **ref, expected=expected, observed=expected))
                continue
            observed = (f"{'rule present' if have_rule else 'no rule'}; table {nic.table}: {seen}"
                        if link is not None else f"{server.name} has no interface {nic.interface}")
            if link is None or not link.up:
                why = ("is missing" if link is None else f"is {link.status}")
                reason = (f"{server.name}:{nic.interface} {why}, so table {nic.table} lost its "
                          f"default route; it comes back with the link (railab re-adds it on heal)")
                cause = Cause(kind="link-down", node=server.name, port=nic.interface, link=lid)
            else:
                fix = "; ".join(" ".join(a) for a in routing.nic_argvs(
                    nic=nic.nic, interface=nic.interface, address=nic.address, gateway=nic.gateway,
                    table=nic.table)[1:])
                reason = (f"{server.name} NIC {nic.nic} is up but lacks {' and '.join(missing)} "
                          f"(a NIC that went down and up loses its table route): packets sourced "
                          f"from {addr} leave by the main table, not this NIC; re-add: {fix}")
                cause = Cause(kind="policy-route-missing", node=server.name, port=nic.interface,
                              link=lid)
            out.append(failed(CHECK, name, **ref, expected=expected, observed=observed,
                              reason=reason, cause=cause))
    if not out:
        out.append(skipped(CHECK, "servers", "the lab has no servers"))
    return out


register_check(CHECK, check_policy, order=15,
               description="each server NIC has its source rule and default route in table 100+N")
