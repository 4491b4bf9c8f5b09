"""Control-plane figures of a running lab, per router and per role (issue 47 item 5).

What a planner asks of a fabric at scale: how many routes each leaf and spine holds, how wide
their ECMP is, whether every BGP session is up, how much memory each router's FRR takes, and
how long the lab took to converge. Every figure is measured on the running lab, never taken
from the plan, and says where it comes from and when it was read:

* routes and ECMP width: the router's **kernel FIB** (IPv4, table main), one raw RTM_GETROUTE
  dump per router (:meth:`railab.testbed.rtnl.Rtnl.route_census`: counts by protocol and next
  hops, no per-route object), split by who installed each route (``rtm_protocol``: ``bgp`` 186,
  ``connected`` 2 ``kernel``, ``static`` 4 or FRR staticd's 196, ``other``); the ECMP width is
  the next-hop count of each BGP route (every next hop the kernel holds, as the convergence
  predicate counts them);
* BGP sessions: FRR's ``show bgp ... summary json`` of every router
  (:func:`railab.checks.converge.read_session_states`), each router's planned session ends
  Established (a leaf's uplinks, a spine's downlinks);
* memory: **PSS** from ``/proc/PID/smaps_rollup`` of each FRR daemon the state record lists for
  the router (``LabState.routers[node].pids``; netns runtime only), a PID counted only while its
  command line still names the router's run directory. PSS splits a shared page among every
  process that maps it, so the figure is the router's share of the host's memory (other labs'
  FRR daemons share the same libraries);
* convergence: the state record's ``timings["converge_s"]``, what the bring-up's convergence
  wait measured (:func:`railab.checks.deploy.bring_up`: FRR started -> every planned session
  Established and every expected route installed with its ECMP width). Reconvergence after a
  spine fails is ``railab drill LAB node-off spineN``'s.

:func:`observe_control_plane` gives the whole document (``railab status --json``'s
``control_plane``; in JSON the ``ecmp_widths`` keys are strings), :func:`role_summary` its
per-role part, :func:`summary_only` the document without the per-router figures (the report's
"Control plane" section, and all ``status`` shows while a training exercise hides where its
faults are).
"""

from __future__ import annotations

import datetime as _dt
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from railab.checks.converge import read_session_states
from railab.checks.frr import session_up
from railab.testbed import state as st
from railab.testbed.executor import Executor
from railab.testbed.namespaces import entered
from railab.testbed.rtnl import RT_TABLE_MAIN, Rtnl
from railab.testbed.runtime.netns.procs import _cmdline
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name

#: ``rtm_protocol`` numbers (linux/rtnetlink.h; FRR's zebra/rt_netlink.h) -> the route kinds counted
ROUTE_KINDS = {186: "bgp", 2: "connected", 4: "static", 196: "static"}
#: the route kinds of :func:`fib_figures`' ``routes``, in print order (``other``: anything else)
KIND_ORDER = ("bgp", "connected", "static", "other")
#: Where each figure comes from (the document's ``sources``).
SOURCES = {
    "routes": "kernel FIB, IPv4 table main: one rtnetlink RTM_GETROUTE dump per router",
    "ecmp_width": "next hops of each BGP route in the kernel FIB",
    "sessions": "FRR show bgp vrf default ipv4 unicast summary json of every router (planned session ends Established)",
    "memory_mib": "PSS of the router's FRR daemons, /proc/PID/smaps_rollup (MiB = 2^20 bytes)",
    "convergence": "state record timings.converge_s: the bring-up's convergence wait "
                   "(FRR started -> every planned session Established, every expected route installed)",
}
MIB_KIB = 1024.0


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def spread(values: Iterable[float]) -> dict[str, float] | None:
    """``{"min", "median", "max"}`` of ``values`` (:func:`statistics.median`, to 3 decimals),
    None for no values."""
    vals = sorted(values)
    if not vals:
        return None
    return {"min": vals[0], "median": round(statistics.median(vals), 3), "max": vals[-1]}


def histogram_spread(hist: Mapping[int, int]) -> dict[str, float] | None:
    """:func:`spread` of the values a histogram ``{value: how many}`` holds (counts <= 0
    ignored), without expanding it: one ECMP width per route over a whole role."""
    items = sorted((v, c) for v, c in hist.items() if c > 0)
    n = sum(c for _, c in items)
    if not n:
        return None

    def nth(k: int) -> int:  # the k-th value (0-based) in sorted order
        for v, c in items:
            if k < c:
                return v
            k -= c
        return items[-1][0]

    med = nth(n // 2) if n % 2 else (nth(n // 2 - 1) + nth(n // 2)) / 2
    return {"min": items[0][0], "median": med, "max": items[-1][0]}


def fib_figures(census: Mapping[tuple[int, int], int]) -> dict[str, Any]:
    """A router's FIB figures from :meth:`~railab.testbed.rtnl.Rtnl.route_census`
    (``{(protocol, next hops): routes}``): ``routes`` ``{"total", "bgp", "connected",
    "static", "other"}`` (route counts), ``ecmp_widths`` ``{next hops: BGP routes}`` and
    ``ecmp_width`` (:func:`histogram_spread` of it; None without BGP routes)."""
    routes = dict.fromkeys(KIND_ORDER, 0)
    widths: dict[int, int] = {}
    for (proto, hops), n in census.items():
        kind = ROUTE_KINDS.get(proto, "other")
        routes[kind] += n
        if kind == "bgp":
            widths[hops] = widths.get(hops, 0) + n
    return {"routes": {"total": sum(routes.values()), **routes},
            "ecmp_widths": dict(sorted(widths.items())), "ecmp_width": histogram_spread(widths)}


def smaps_kib(pid: int) -> dict[str, int]:
    """``/proc/PID/smaps_rollup`` as ``{field: KiB}`` (``Rss``, ``Pss``, ``Private_Dirty``,
    ...); {} when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, val = line.partition(":")
        parts = val.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0])
    return out


def router_memory(lab: str, node: str, pids: Mapping[str, int]) -> dict[str, Any] | None:
    """Memory of one router's FRR daemons (``pids``: daemon -> PID from the state record):
    ``{"pss", "private", "daemons": {daemon: PSS}}`` in MiB (2 decimals; ``private``: its
    Private_Clean + Private_Dirty, the part no other process shares). A daemon that is gone or
    whose PID now runs something else is left out; None when none is readable."""
    where = f"{st.node_dir(lab, node)}/"
    per: dict[str, dict[str, int]] = {}
    for daemon, pid in pids.items():
        if where in _cmdline(pid):  # not a PID reused by another process
            sm = smaps_kib(pid)
            if "Pss" in sm:
                per[daemon] = sm
    if not per:
        return None
    pss = sum(sm["Pss"] for sm in per.values())
    private = sum(sm.get("Private_Clean", 0) + sm.get("Private_Dirty", 0) for sm in per.values())
    return {"pss": round(pss / MIB_KIB, 2), "private": round(private / MIB_KIB, 2),
            "daemons": {d: round(sm["Pss"] / MIB_KIB, 2) for d, sm in per.items()}}


def fib_census(ns: str) -> dict[tuple[int, int], int]:
    """Network namespace ``ns``'s IPv4 main-table routes by ``(protocol, next hops)``
    (:meth:`~railab.testbed.rtnl.Rtnl.route_census`; feed it to :func:`fib_figures`).
    OSError (FileNotFoundError) when the namespace cannot be entered."""
    with entered(ns):
        rtnl = Rtnl()
    try:
        return rtnl.route_census(RT_TABLE_MAIN)
    finally:
        rtnl.close()


def role_summary(routers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per role (``leaf``, ``spine``, ``superspine``), from :func:`observe_control_plane`'s
    ``routers``: ``routers`` (count), ``routes`` and ``bgp_routes`` (:func:`spread` of the
    routers' FIB route counts), ``ecmp_width`` (:func:`histogram_spread` over every BGP route of
    the role's routers: next hops), ``memory_mib`` (:func:`spread` of the routers' PSS, MiB;
    None when none was read), ``sessions`` ``{"up", "expected"}`` summed (None when not read),
    ``unread`` (routers
    whose FIB could not be read). Names no router, so it gives no fault's place away."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for fig in routers.values():
        by.setdefault(str(fig.get("role")), []).append(fig)
    out: dict[str, dict[str, Any]] = {}
    for role in sorted(by, key=lambda r: ({"leaf": 0, "spine": 1, "superspine": 2}.get(r, 3), r)):
        figs = by[role]
        read = [f for f in figs if f.get("routes") is not None]
        widths: dict[int, int] = {}
        for f in read:
            for w, n in (f.get("ecmp_widths") or {}).items():
                widths[int(w)] = widths.get(int(w), 0) + n
        mem = [f["memory_mib"]["pss"] for f in figs if f.get("memory_mib")]
        ses = [f["sessions"] for f in figs if f.get("sessions")]
        out[role] = {
            "routers": len(figs),
            "routes": spread(f["routes"]["total"] for f in read),
            "bgp_routes": spread(f["routes"]["bgp"] for f in read),
            "ecmp_width": histogram_spread(widths),
            "memory_mib": spread(mem),
            "sessions": ({"up": sum(s["up"] for s in ses), "expected": sum(s["expected"] for s in ses)}
                         if ses else None),
            "unread": len(figs) - len(read),
        }
    return out


def observe_control_plane(spec: LabSpec, *, lab: str | None = None, record: st.LabState | None = None,
                          executor: Executor | None = None,
                          states: Mapping[str, Mapping[str, str]] | None = None,
                          netns_of: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """The control-plane figures of running lab ``lab`` (default ``spec.name``), every router
    (leaves, spines, super-spines; servers run no FRR):

    ``{"measured_at": ISO-8601 UTC, "took_s": seconds the reading took, "sources": SOURCES,
    "convergence": {"converge_s", "brought_up_at"}, "roles": role_summary(routers),
    "routers": {node: {"role", "routes": {"total", "bgp", "connected", "static", "other",
    "planned"}, "ecmp_width": {"min", "median", "max"} | None, "ecmp_widths": {next hops: BGP
    routes}, "sessions": {"up", "expected"}, "memory_mib": router_memory(...) | None,
    "error": why the FIB was not read (only then)}}}``. Counts are routes; ``planned`` is
    lab.json's expected routes of the node (``expected_routes``), for comparison.

    ``record``: the lab's state record (default: loaded; PIDs, namespaces, ``converge_s``).
    ``states``: ``node -> {interface: BGP state}`` of both ends of every planned session
    (:func:`~railab.checks.converge.read_session_states` with ``both_ends``) when the caller has
    read them already (``railab status``); else read through ``executor`` (neither: no
    ``sessions`` figures). ``netns_of``: node -> namespace (default: the
    record's, else ``clab-<lab>-<node>``). Reading costs one FIB dump and one smaps_rollup per
    daemon per router (``took_s`` says how long; the sessions, when read here, are in it)."""
    t0 = time.monotonic()
    lab = lab or spec.name
    record = record if record is not None else st.load(lab)
    spaces = dict(record.namespaces) if record is not None else {}
    ns_of = netns_of or (lambda node: spaces.get(node) or netns_name(lab, node))
    if states is None and executor is not None:
        states = read_session_states(spec, executor, both_ends=True)
    per_session: dict[str, list[int]] = {}  # node -> [up, expected], both ends of every session
    if states is not None:
        for s in spec.bgp_sessions:
            for node, iface in ((s.node, s.interface), (s.peer, s.peer_interface)):
                if node in states:
                    c = per_session.setdefault(node, [0, 0])
                    c[0] += session_up((states.get(node) or {}).get(iface))
                    c[1] += 1
    routers: dict[str, dict[str, Any]] = {}
    for n in spec.nodes:
        if n.role == "server":
            continue
        fig: dict[str, Any] = {"role": n.role}
        ns = ns_of(n.name)
        try:
            if not ns:
                raise FileNotFoundError("no network namespace")
            fig.update(fib_figures(fib_census(ns)))
            fig["routes"]["planned"] = len(spec.expected_routes.get(n.name) or [])
        except OSError as exc:
            fig.update({"routes": None, "ecmp_width": None, "ecmp_widths": {},
                        "error": f"kernel FIB of {ns or n.name} not read: {exc.strerror or exc}"})
        if states is not None and n.name in per_session:
            up, expected = per_session[n.name]
            fig["sessions"] = {"up": up, "expected": expected}
        router = record.routers.get(n.name) if record is not None else None
        fig["memory_mib"] = router_memory(lab, n.name, router.pids) if router is not None else None
        routers[n.name] = fig
    timings = record.timings if record is not None else {}
    created = record.created if record is not None else None
    roles = role_summary(routers)
    return {
        "measured_at": _now(),
        "took_s": round(time.monotonic() - t0, 3),
        "sources": dict(SOURCES),
        "convergence": {
            "converge_s": timings.get("converge_s"),
            "brought_up_at": (_dt.datetime.fromtimestamp(created, _dt.UTC).isoformat(timespec="seconds")
                              if created else None),
        },
        "roles": roles,
        "routers": routers,
    }


def summary_only(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (:func:`observe_control_plane`'s) without its per-router figures: what the
    report keeps, and what ``railab status`` shows while a training exercise hides where its
    faults are (``routers`` dropped, ``routers_hidden`` True)."""
    return {**{k: v for k, v in doc.items() if k != "routers"}, "routers_hidden": True}
