"""The IPv6 link-local state an unnumbered BGP session needs from the kernel on each port, and
its repair.

BGP unnumbered (RFC 8950 next hops, FRR's ``neighbor PORT interface``) runs its TCP session
between the two ends' link-local addresses. On every fabric port that takes, from the kernel's
addrconf (``net/ipv6/addrconf.c``, run when the port's carrier comes up):

* a link-local address (``fe80::/64`` EUI-64, RFC 4291 section 2.5.6) that is not ``dadfailed``;
* the ``fe80::/64`` route in the main table (without it ``connect()`` fails ENETUNREACH);
* the ``local`` route for that address in the local table (without it SYNs to it are dropped);
* the ``ff00::/8`` multicast route in the local table (without it no RS, RA or ND goes out).

addrconf makes these with GFP_ATOMIC allocations, each with a per-CPU slot (``fib6_nh``'s
``rt6i_pcpu``, 8 bytes). When thousands of veths get their carrier in one linkwatch run, as
the full-size fabrics' do, the kernel's atomic per-CPU pool runs dry (``percpu: allocation
failed, size=8 align=8 atomic=1`` in ``dmesg``) and the failed item is silently missing: on this
machine about one bring-up in 5-20 of the 1024-GPU fabric left one port without its ``fe80::/64``
route, and that port's session stayed in Active for good. :func:`port_faults` finds such ports
and :func:`repair` restarts IPv6 on them (``disable_ipv6`` 1 then 0, which runs addrconf again,
with the pool refilled by then).

Both work in the network namespace that is current (call them inside
``railab.testbed.namespaces.entered``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path

from railab.testbed.rtnl import (
    IFA_F_DADFAILED,
    IFA_F_TENTATIVE,
    RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
    Rtnl,
    link_status,
)

#: RT_SCOPE_LINK, RTN_LOCAL, RTN_MULTICAST (include/uapi/linux/rtnetlink.h)
RT_SCOPE_LINK, RTN_LOCAL, RTN_MULTICAST = 253, 2, 5


def port_faults(ports: Iterable[str]) -> dict[str, str]:
    """Which of ``ports`` (interface names in the current namespace) lack part of the IPv6
    link-local state unnumbered BGP needs (module docstring): ``{port: what is missing}``, in
    words (``"no fe80::/64 route"``). Only ports that are up with carrier are judged; a port that
    is down, has no carrier yet, still has a tentative link-local (DAD, RFC 4862 section 5.4) or
    does not exist is left out. Three rtnetlink dumps (links, IPv6 addresses, IPv6 routes).
    Raises OSError when the namespace's netlink socket cannot be opened."""
    nl = Rtnl()
    try:
        links = {row.ifname: row for row in nl.link_details()}
        addrs = nl.addresses(socket.AF_INET6)
        routes = nl.routes(None, family=socket.AF_INET6)
    finally:
        nl.close()
    faults: dict[str, str] = {}
    for port in ports:
        row = links.get(port)
        if row is None or link_status(row.flags, row.operstate) != "up":
            continue
        lls = [a for a in addrs if a.index == row.index and a.scope == RT_SCOPE_LINK]
        if any(a.flags & IFA_F_TENTATIVE and not a.flags & IFA_F_DADFAILED for a in lls):
            continue
        good = [a for a in lls if not a.flags & IFA_F_DADFAILED]
        missing = []
        if not good:
            missing.append("no link-local address" + (" (DAD failed)" if lls else ""))
        if not any(r.table == RT_TABLE_MAIN and r.dst == "fe80::" and r.dst_len == 64
                   and row.index in r.oifs for r in routes):
            missing.append("no fe80::/64 route")
        for a in good:
            if not any(r.table == RT_TABLE_LOCAL and r.type == RTN_LOCAL and r.dst == a.address
                       and r.dst_len == 128 for r in routes):
                missing.append(f"no local route for {a.address}")
        if not any(r.table == RT_TABLE_LOCAL and r.type == RTN_MULTICAST and r.dst == "ff00::"
                   and r.dst_len == 8 and row.index in r.oifs for r in routes):
            missing.append("no ff00::/8 route")
        if missing:
            faults[port] = ", ".join(missing)
    return faults


def repair(ports: Iterable[str]) -> None:
    """Restart IPv6 on each of ``ports`` (current namespace): ``net.ipv6.conf.PORT.disable_ipv6``
    1 then 0 (Documentation/networking/ip-sysctl.rst), so addrconf makes the link-local
    address and its routes again (the same EUI-64 address: the peers' view of it stays right).
    A port that is gone is skipped. Raises OSError when the sysctl cannot be written."""
    for port in ports:
        path = Path("/proc/sys/net/ipv6/conf") / port / "disable_ipv6"
        if not path.exists():
            continue
        path.write_text("1\n")
        path.write_text("0\n")
