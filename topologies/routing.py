"""Server policy routing: one home for the per-NIC table, the rule priority and the commands.

A server NIC ``eth<n>`` (1-based) sends from its own address through its own leaf: policy rule
``from <address> lookup <table>`` at priority ``pref``, and a default route via the leaf in that
table. Pure data and strings; used by the generator (lab.json ``nics[].table``, the containerlab
``exec:`` lines) and by the netns runtime (the same rule and route over netlink).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface

#: table of NIC n = TABLE_BASE + n (``100 + n``)
TABLE_BASE = 100
#: rule priority of NIC n = RULE_PREF_BASE + n (``1000 + n``): before the ``main`` table's rule
#: (32766), after the ``local`` one (0)
RULE_PREF_BASE = 1000


def table_for(nic: int) -> int:
    """Routing table id of 1-based NIC ``nic`` (``100 + nic``)."""
    return TABLE_BASE + nic


def rule_priority(nic: int) -> int:
    """Priority (``pref``) of NIC ``nic``'s source rule (``1000 + nic``)."""
    return RULE_PREF_BASE + nic


def nic_argvs(*, nic: int, interface: str, address: str | IPv4Interface, gateway: str | IPv4Address,
              table: int | None = None, mtu: int | None = None) -> list[list[str]]:
    """``ip`` argvs that configure one server NIC: MTU (when given), ``address`` (``a.b.c.d/31``)
    on ``interface``, the source rule (priority :func:`rule_priority`) and the default route via
    ``gateway`` in ``table`` (default :func:`table_for`, lab.json's ``nics[].table``)."""
    address, gateway = str(address), str(gateway)
    ip = address.split("/")[0]
    table = str(table_for(nic) if table is None else table)
    out = []
    if mtu is not None:
        out.append(["ip", "link", "set", interface, "mtu", str(mtu)])
    out += [
        ["ip", "addr", "add", address, "dev", interface],
        ["ip", "rule", "add", "from", ip, "lookup", table, "pref", str(rule_priority(nic))],
        ["ip", "route", "add", "default", "via", gateway, "dev", interface, "table", table],
    ]
    return out


def nic_lines(**kwargs) -> list[str]:
    """:func:`nic_argvs` as shell lines (containerlab ``exec:`` entries); same keywords."""
    return [" ".join(argv) for argv in nic_argvs(**kwargs)]
