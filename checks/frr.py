"""FRR's vtysh commands, the JSON field paths railab reads, and the single convergence predicate.

One table for everything that talks to FRR 8.4: the convergence wait
(:mod:`railab.checks.converge`), the bgp and routes checks and the tests all read FRR through
these command strings and parsers, and decide "converged" / "routes check passes" with the same
two functions:

* :func:`session_up`: a planned unnumbered session is up when the peer keyed by its
  *interface* in ``show bgp vrf default ipv4 unicast summary json`` (``peers[<ifname>].state``)
  is ``Established``;
* :func:`route_verdict`: an expected prefix holds when an entry of ``show ip route json`` is
  ``selected`` and ``installed`` and its FIB next hops (``nexthops[]`` with ``fib: true``,
  blackholes excluded) are exactly ``ecmp_width`` wide over the planned ``interfaces`` (when
  lab.json lists them). A selected entry that is not BGP (the node's own connected/static route)
  only has to be present and installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: ``show bgp vrf default ipv4 unicast summary json``: {"as", "routerId", "peers": {ifname: {...}}}
CMD_SUMMARY = "show bgp vrf default ipv4 unicast summary json"
#: ``show ip route json``: zebra's IPv4 RIB, prefix -> [entry {selected, installed, nexthops}]
CMD_RIB = "show ip route json"
#: ``show bgp vrf default ipv4 unicast json``: the BGP table, {"routes": {prefix: [path]}}
CMD_BGP_TABLE = "show bgp vrf default ipv4 unicast json"

ESTABLISHED = "Established"


def cmd_bgp_prefix(prefix: str) -> str:
    """``show bgp vrf default ipv4 unicast PREFIX json``: one prefix's BGP paths,
    ``{"prefix", "paths": [{"aspath": {"length"}, "sourced", "peer": {"peerId"}}]}`` (a few KB,
    where the whole table is MBs at 64-way ECMP)."""
    return f"show bgp vrf default ipv4 unicast {prefix} json"


def cmd_neighbor(interface: str) -> str:
    """``show bgp neighbors IF json`` for one unnumbered neighbor (keyed by ``interface``)."""
    return f"show bgp neighbors {interface} json"


# ---- parsers (JSON documents of the commands above) ----------------------------------------------
def summary_of(doc: Any) -> dict:
    """The IPv4 unicast summary of a ``CMD_SUMMARY`` (or ``show bgp summary json``) document.

    ``show bgp summary json`` wraps per-AFI dicts (``{"ipv4Unicast": {...}}``); the vrf/afi form
    is the dict itself. Returns ``{"as", "routerId", "peers", ...}``, or {} for anything else.
    """
    if not isinstance(doc, dict):
        return {}
    if "ipv4Unicast" in doc:
        return doc["ipv4Unicast"] or {}
    return doc


def peers_by_interface(doc: Any) -> dict[str, dict]:
    """``{ifname: peer dict}`` of a summary document (unnumbered peers are keyed by interface)."""
    return summary_of(doc).get("peers") or {}


def session_states(doc: Any) -> dict[str, str]:
    """``{ifname: state}`` (``Established``, ``Idle (Admin)``, ``Active`` ...) of a summary doc."""
    return {p: str(v.get("state", "?")) for p, v in peers_by_interface(doc).items()}


def session_up(state: str | None) -> bool:
    """The session predicate: the peer's ``state`` is exactly ``Established``."""
    return state == ESTABLISHED


def neighbor_of(doc: Any, interface: str) -> dict:
    """The neighbor dict of a ``cmd_neighbor(interface)`` document ({} when unknown)."""
    return doc.get(interface, {}) if isinstance(doc, dict) else {}


def rib_of(doc: Any) -> dict[str, list[dict]]:
    """prefix -> entries of a ``CMD_RIB`` document ({} for anything else)."""
    return doc if isinstance(doc, dict) else {}


def bgp_routes_of(doc: Any) -> dict[str, list[dict]]:
    """prefix -> paths of a ``CMD_BGP_TABLE`` document ({} for anything else)."""
    return (doc or {}).get("routes", {}) if isinstance(doc, dict) else {}


def selected_entry(entries: list[dict] | None) -> dict | None:
    """The RIB entry zebra ``selected`` among ``entries`` (None when none is)."""
    for e in entries or []:
        if e.get("selected"):
            return e
    return None


def fib_nexthops(entry: dict) -> list[str]:
    """Sorted interfaces of the FIB next hops of one RIB entry: ``nexthops[]`` with ``fib: true``,
    blackholes excluded (``interfaceName``, else the next-hop ``ip``)."""
    return sorted(nh.get("interfaceName", nh.get("ip", "?")) for nh in entry.get("nexthops", [])
                  if nh.get("fib") and not nh.get("blackhole"))


def originated_here(doc: Any) -> bool:
    """True when a :func:`cmd_bgp_prefix` document has a locally sourced path (empty AS path,
    ``sourced``, peer ``0.0.0.0``): the node announces the prefix itself (``network``)."""
    paths = doc.get("paths") if isinstance(doc, dict) else None
    return any((p.get("aspath") or {}).get("length", 1) == 0 and p.get("sourced")
               and (p.get("peer") or {}).get("peerId") == "0.0.0.0" for p in paths or [])


def locally_originated(paths: list[dict] | None) -> bool:
    """True when a BGP table entry has a local path (empty AS path, peer ``(unspec)``)."""
    return any(p.get("path", None) == "" and p.get("peerId") == "(unspec)" for p in paths or [])


def rib_entries_of_fib(route: Any) -> list[dict] | None:
    """The ``show ip route json`` entries a kernel FIB route stands for, so the one route
    predicate (:func:`route_verdict`) judges routes read over netlink too.

    ``route``: a :class:`railab.checks.base.FibRoute` (``kind``, ``oifs``, ``protocol``) or None
    (no such prefix in the FIB: returns None, which the predicate reads as ``missing``). A FIB
    route is by definition selected and installed; each path becomes one next hop with
    ``fib: true`` on its interface, a blackhole route one ``blackhole`` next hop."""
    if route is None:
        return None
    if route.kind == "blackhole":
        hops = [{"blackhole": True, "fib": True}]
    else:
        hops = [{"interfaceName": oif, "fib": True} for oif in route.oifs]
    return [{"selected": True, "installed": True, "protocol": route.protocol, "nexthops": hops}]


# ---- the route predicate -----------------------------------------------------------------------
RouteState = Literal["ok", "local", "missing", "not-installed", "width", "interfaces"]


@dataclass(frozen=True)
class RouteVerdict:
    """How one expected prefix looks in one node's RIB.

    ``state``: ``ok`` (BGP route, selected + installed, exactly ``ecmp_width`` FIB next hops over
    the planned interfaces), ``local`` (selected + installed, not BGP: the node's own route,
    presence only), ``missing`` (nothing selected), ``not-installed`` (selected, not in the FIB),
    ``width`` (wrong number of FIB next hops) or ``interfaces`` (right width, wrong interfaces).
    ``hops``: sorted FIB next-hop interfaces; ``missing_ifs`` / ``extra_ifs`` against the plan.
    """

    state: RouteState
    protocol: str | None = None
    hops: tuple[str, ...] = ()
    missing_ifs: tuple[str, ...] = ()
    extra_ifs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True for ``ok`` and ``local``."""
        return self.state in ("ok", "local")


def route_verdict(entries: list[dict] | None, ecmp_width: int,
                  interfaces: list[str] | tuple[str, ...] = ()) -> RouteVerdict:
    """Apply the route predicate (see the module docstring) to the ``show ip route json``
    entries of one prefix. ``ecmp_width``: planned next-hop count; ``interfaces``: planned
    next-hop interfaces (empty: any)."""
    entry = selected_entry(entries)
    if entry is None:
        return RouteVerdict("missing")
    proto = entry.get("protocol")
    hops = tuple(fib_nexthops(entry))
    if not entry.get("installed"):
        return RouteVerdict("not-installed", proto, hops)
    if proto != "bgp":
        return RouteVerdict("local", proto, hops)
    want = sorted(set(interfaces))
    missing = tuple(i for i in want if i not in hops)
    extra = tuple(i for i in hops if want and i not in want)
    if len(hops) != ecmp_width:
        return RouteVerdict("width", proto, hops, missing, extra)
    if missing or extra:
        return RouteVerdict("interfaces", proto, hops, missing, extra)
    return RouteVerdict("ok", proto, hops)
