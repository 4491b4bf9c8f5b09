"""``railab traffic`` and ``railab traceroute``: RoCEv2 flows between GPU NICs of a running lab.

``railab traffic LAB --pattern P [--pxn] [--flows N] [--json]`` runs a named pattern (see
traffic.patterns) with hop measurement (TTL and switch port counters), prints one row per flow
and a spine/uplink spread summary, and exits 1 when any flow is lost or takes an unexpected hop
count (flows unreachable by design pass when nothing arrives). ``railab traceroute LAB SRC DST``
names the switches one flow crosses.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, report_interrupted
from railab.traffic.patterns import PATTERNS


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=200)


def _hops(v) -> str:
    return "unreachable" if v is None else str(v)


def _usage(msg: str) -> None:
    """One ``error: ...`` line on stderr, exit 2 (usage error)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(EXIT_USAGE)


#: the path engine's RoCE path MTU when ``--mtu`` is not given (a load run's is 4096)
PATH_MTU = 1024


def check_options(*, flows: int | None, size: int, messages: int, mtu: int) -> None:
    """Validate ``railab traffic`` numbers one by one; raise typer.Exit(EXIT_USAGE) after printing
    ``error: --OPTION ...`` for the first bad one. ``--mtu`` is the RoCE path MTU (IBTA: 256,
    512, 1024, 2048 or 4096 payload bytes; any value in between is accepted here)."""
    if flows is not None and flows < 1:
        _usage(f"--flows must be at least 1 (got {flows})")
    if size < 1:
        _usage(f"--size must be at least 1 byte per message (got {size})")
    if messages < 1:
        _usage(f"--messages must be at least 1 per flow (got {messages})")
    if not 256 <= mtu <= 4096:
        _usage(f"--mtu must be 256-4096 (RoCE path MTU, payload bytes per packet; got {mtu})")


def _interrupted() -> None:
    report_interrupted()
    raise typer.Exit(EXIT_INTERRUPTED)


def _link_state(eng):
    """``link_state(node, ifname) -> "up" | "admin-down" | "carrier-lost" | "missing" | None``
    over the engine's raw netlink dumps (one per switch asked about), by the one link-up rule
    (:func:`railab.checks.base.link_status`); None when the switch cannot be read."""
    from railab.checks.base import link_status
    from railab.errors import RailabError

    seen: dict[str, dict[str, tuple[int, str]] | None] = {}

    def link_state(node: str, ifname: str) -> str | None:
        if node not in seen:
            try:
                seen[node] = eng.link_flags(node)
            except (RailabError, OSError):
                seen[node] = None
        links = seen[node]
        if links is None:
            return None
        st = links.get(ifname)
        return "missing" if st is None else link_status(*st)

    return link_state


def _link_up(eng):
    """``link_up(node, ifname) -> bool | None`` for spread_warnings: the one link-up rule
    (:func:`railab.checks.base.link_status`, as ``Observer.link_up`` applies it) over the engine's
    own raw netlink dump of each switch asked about (read once per switch; a pyroute2 dump of a
    129-port leaf costs ~0.1 s, eight of them most of `railab traffic -n 8` on a full fabric)."""
    from railab.checks.base import link_status
    from railab.errors import RailabError

    seen: dict[str, dict[str, tuple[int, str]]] = {}

    def link_up(node: str, ifname: str) -> bool | None:
        if node not in seen:
            try:
                seen[node] = eng.link_flags(node)
            except (RailabError, OSError):
                seen[node] = {}
        st = seen[node].get(ifname)
        return None if st is None else link_status(*st) == "up"

    return link_up


def black_hole_text(spec, eng, flow, hops) -> str | None:
    """Why a traceroute stopped short of the destination, in words, or None when it arrived
    (or a switch answered ICMP unreachable, which the path line already says):
    ``black-holed at g2-leaf2: srv4 NIC 2 is down`` (the destination NIC administratively
    down), ``black-holed at g2-leaf2: its port eth2 to srv4 NIC 2 is carrier-lost``,
    ``black-holed at spine1: every port to g2-leaf2 is down (eth6 admin-down)``,
    ``black-holed at g1-leaf2: every uplink is down``, else ``black-holed after g1-leaf2: the
    next hop did not answer; run railab check (bgp, routes)``. Link state is read live with
    the one link-up rule (:func:`railab.checks.base.link_status`) over the engine's netlink
    dumps; the destination NIC through :meth:`Engine.nic_is_down`."""
    from railab.checks.base import link_status
    from railab.errors import RailabError

    if not hops or hops[-1].kind in ("destination", "unreachable", "nic-down", "mtu-exceeded",
                                     "tx-refused"):
        return None
    answered = [h.node for h in hops if h.kind == "time-exceeded" and h.node]
    last = answered[-1] if answered else None
    dst = spec.nic(flow.dst[0], flow.dst_nic)
    what = f"{dst.server} NIC {dst.nic}"

    def state(node: str, port: str) -> str | None:
        try:
            st = eng.link_flags(node).get(port)
        except (RailabError, OSError):
            return None
        return "missing" if st is None else link_status(*st)

    if eng.nic_is_down(dst.server, dst.nic):
        return f"black-holed at {dst.leaf}: {what} is down"
    leaf_side = state(dst.leaf, dst.leaf_port)
    if leaf_side not in (None, "up"):
        return f"black-holed at {dst.leaf}: its port {dst.leaf_port} to {what} is {leaf_side}"
    roles = {n.name: n.role for n in spec.nodes}
    if last is not None and last != dst.leaf:
        role = roles.get(last)
        if role == "spine":
            ports = [(p, st) for p, peer, _pp in spec.links_of(last) if peer == dst.leaf
                     for st in [state(last, p)]]
            if ports and all(st not in (None, "up") for _p, st in ports):
                return (f"black-holed at {last}: every port to {dst.leaf} is down ("
                        + ", ".join(f"{p} {st}" for p, st in ports) + ")")
        elif role == "leaf":
            ups = [(p, state(last, p)) for p, peer, _pp in spec.links_of(last)
                   if roles.get(peer) == "spine"]
            if ups and all(st not in (None, "up") for _p, st in ups):
                return (f"black-holed at {last}: every uplink is down ("
                        + ", ".join(f"{p} {st}" for p, st in ups) + ")")
    where = f"after {last}" if last else f"before {spec.nic(flow.src[0], flow.src_nic).leaf}"
    return f"black-holed {where}: the next hop did not answer; run railab check (bgp, routes)"


def cause_text(root, lab: str = "LAB") -> str:
    """Words for a root-cause row of :func:`flow_root_causes`, naming the element as ``railab
    check`` does: ``srv4:eth2 is down (link g2-leaf2:eth3--srv4:eth2)``, ``bgpd is dead on
    g1-leaf1``, ``srv1:eth1 is miswired (planned link ...)``, ``a packet filter drops on
    g1-leaf1:eth3 (link ...)``, ``MTU on ...``; ``dropped at g2-leaf2`` / ``... answered ICMP
    unreachable`` when no element is named (not attributed), or the flow's own verdict."""
    c = root.cause
    if c is None:
        return f"{root.name}: {root.reason} (not attributed to an element: run railab check)"
    at = f"{c.node}:{c.port}" if c.port else f"{c.node}"
    words = {"at": at, "link": f" (link {c.link})" if c.link else "", "node": c.node,
             "planned": c.link, "daemon": c.daemon or "an FRR daemon", "lab": lab,
             "session": c.link or at, "prefix": c.prefix, "reason": root.reason, "kind": c.kind}
    kind = "wrong-remote-as" if c.kind == "wrong-asn" and c.port else c.kind
    return _CAUSE_WORDS.get(kind, "{kind} at {at}{link}").format(**words)


#: Words per cause kind (:data:`railab.checks.base.CAUSE_KINDS`) for :func:`cause_text`.
_CAUSE_WORDS = {
    "link-down": "{at} is down{link}",
    "miswired": "{at} is miswired (cabled elsewhere than its planned link {planned}: check cabling)",
    "mtu-mismatch": "MTU on {at}{link}: {reason}",
    "node-down": "{node} is down (every link of it down at its end: powered off?)",
    "daemon-dead": "{daemon} is dead on {node}: railab restart {lab} {node}",
    "session-down": "BGP session on {session} is down",
    "session-shut": "BGP session on {session} is shut at {at} (neighbor shutdown)",
    "port-filter": "a packet filter (nftables) drops on {at}{link}",
    "link-speed": "{at} runs below its planned speed{link}",
    "port-missing": "{at} does not exist{link}",
    "policy-route-missing": "{at} lacks its policy route{link}",
    "link-local-missing": "{at} lacks its IPv6 link-local state{link}",
    "wrong-asn": "{node} runs another ASN than planned",
    "wrong-remote-as": "{at} expects another remote AS than its peer's planned ASN{link}",
    "not-announced": "{node} does not announce {prefix}",
    "node-unreachable": "{node} cannot be reached",
    "unreachable": "{node} answered ICMP unreachable (no route; not attributed to an element: "
                   "run railab check)",
    "dropped": "packets dropped at {node} (black hole; not attributed to an element: run "
               "railab check, railab traceroute)",
}


def attributed(cause: dict | None) -> bool:
    """True when a root cause (a ``cause`` dict of :func:`flow_root_causes`) names the element
    that broke, False when it only says where packets stopped (``dropped``/``unreachable``) or
    names nothing."""
    from railab.checks.hops import WEAK_KINDS

    return cause is not None and cause.get("kind") not in WEAK_KINDS


def check_groups(lab: str, stop=None) -> list | None:
    """``railab check``'s root-cause groups (:func:`railab.checks.runner.group_failures`) of
    every family but hops, run now on ``lab`` (about 1 s on mini): what :func:`flow_root_causes`
    files failed flows under. None when the lab cannot be checked (an error is not a cause) or
    a training exercise on it switched ``railab check`` off, or runs below ``full`` check detail
    (railab.checks.exercise.check_detail: its answer, and the repair, would leak)."""
    from railab.checks.base import CHECKS
    from railab.checks.exercise import check_detail
    from railab.checks.lab import LiveLab
    from railab.checks.runner import group_failures, run_checks
    from railab.cli.exercise import gate
    from railab.errors import RailabError, UsageError

    try:
        gate("check", [lab])
    except UsageError:
        return None
    try:
        live = LiveLab.attach(lab)
        if check_detail(live.name) is not None:
            return None  # an exercise runs: check's words (and repair commands) are held back
        results = run_checks(live.spec, live.executor, only=[n for n in CHECKS if n != "hops"],
                             netns_of=live.netns_of, stop=stop)
    except (RailabError, OSError, ValueError):
        return None
    return group_failures(results)


def flow_root_causes(spec, results, link_state=None, groups=None) -> list[dict]:
    """Failed flows grouped under their root cause, the way ``railab check`` groups rows
    (:func:`railab.checks.runner.group_failures` over :func:`railab.checks.hops.flow_rows`):
    ``[{"text", "root" (first flow), "cause" (dict or None), "attributed" (bool: the cause
    names the element that broke), "explains" [flow names]}]``, plus ``"joint"`` [flow names]
    on an entry whose flows failed only because of it and another entry together (two faults
    cut the destination prefix off: the flow is listed under both). ``link_state(node, port)``
    names a leaf port that is down (see ``flow_cause``); ``groups`` (:func:`check_groups`)
    files each failed flow under the check root cause on its path
    (:func:`railab.checks.hops.attribute_flows`), so traffic and check name the same element."""
    from railab.checks.hops import attribute_flows, flow_rows
    from railab.checks.runner import group_failures

    rows = flow_rows(spec, results, link_state)
    if groups:
        rows = attribute_flows(spec, rows, results, groups)
    # a flow two faults cut off together (``joint`` causes: its source leaf lost the prefix
    # because one uplink is down and the other spine's bgpd is dead) fails because of each:
    # one copy of it per cause, so it is listed under each root cause
    split = [r.model_copy(update={"cause": c, "joint": None})
             for r in rows for c in (r.causes if r.joint else [r.cause])]
    out = []
    groups_ = group_failures(split)
    under: dict[str, list[str]] = {}
    for root, cons in groups_:
        for c in (root, *cons):
            under.setdefault(c.name, []).append(root.name)
    for root, cons in groups_:
        cause = root.cause.model_dump(exclude_none=True) if root.cause else None
        entry = {"text": cause_text(root, spec.name), "root": root.name, "cause": cause,
                 "attributed": attributed(cause), "explains": [c.name for c in cons]}
        joint = [c.name for c in (root, *cons) if len(under[c.name]) > 1]
        if joint:
            entry["joint"] = joint
        out.append(entry)
    return out


def unattributed(causes: list[dict]) -> list[str]:
    """The failed flows of ``causes`` (:func:`flow_root_causes`) whose cause names no broken
    element (``attributed`` false) and no other cause does: every flow name, root first."""
    named = {n for c in causes if c["attributed"] for n in [c["root"], *c["explains"]]}
    return list(dict.fromkeys(n for c in causes if not c["attributed"]
                              for n in [c["root"], *c["explains"]] if n not in named))


#: Default load run (``--seconds``) on a lab without ``lab.capacity`` (nothing is time-scaled
#: there), and the longest run, lab seconds.
DEFAULT_LOAD_S = 8.0
MAX_LOAD_S = 120.0
#: Default fabric time a load run covers on a shaped lab: an incast's DCQCN needs 5-13 ms at
#: 400 Gb/s to settle (the fluid model, railab.traffic.fluid; docs/congestion.md "Fidelity").
DEFAULT_LOAD_FABRIC_US = 15_000.0
#: ... but at most this many lab seconds (a lab with a large time scale is cut short) ...
DEFAULT_LOAD_MAX_S = 60.0
#: ... unless that would leave it less fabric time than this: a run cut shorter sees DCQCN's
#: transient only (issue 43: a 3:1 incast at 40 Mb/s ports, 6 ms by the old cap, ended at 81 %
#: of the port with "steady state: not met"); such a run takes up to MAX_LOAD_S.
MIN_LOAD_FABRIC_US = 10_000.0


def default_load_seconds(spec) -> float:
    """The default ``--seconds`` of a load run on ``spec``: :data:`DEFAULT_LOAD_FABRIC_US` of
    fabric time in lab seconds (``qos.capacity.lab_seconds``), at least :data:`DEFAULT_LOAD_S`
    and at most :data:`DEFAULT_LOAD_MAX_S`, or the lab seconds of :data:`MIN_LOAD_FABRIC_US`
    where those are more (within :data:`MAX_LOAD_S`: a lab below ~33 Mb/s ports at 400 Gb/s
    gets less); :data:`DEFAULT_LOAD_S` on a lab without ``lab.capacity``."""
    cap = spec.qos.capacity
    if not cap.enabled:
        return DEFAULT_LOAD_S
    longest = max(DEFAULT_LOAD_MAX_S, min(MAX_LOAD_S, cap.lab_seconds(MIN_LOAD_FABRIC_US)))
    return round(min(longest, max(DEFAULT_LOAD_S, cap.lab_seconds(DEFAULT_LOAD_FABRIC_US))), 3)


#: Most zero counters :func:`counts_text` lists by name (a 1024-GPU fabric has 4,096 uplinks).
COUNTS_SHOWN = 16


def counts_text(counts: dict[str, int]) -> str:
    """``name=n`` for every counter that moved, then the ones at zero: by name while there are
    at most :data:`COUNTS_SHOWN` of them, else as a count (``... and 4,088 more at 0``); the
    JSON (``spread``) keeps every counter."""
    moved = [f"{k}={v}" for k, v in counts.items() if v]
    zero = [k for k, v in counts.items() if not v]
    if len(zero) <= COUNTS_SHOWN:
        return ", ".join(moved + [f"{k}=0" for k in zero])
    return ", ".join(moved + [f"... and {len(zero):,} more at 0"])


def load_verdict(res, *, pfc_on: bool, capacity: bool) -> list[str]:
    """Why a load run failed (empty: it passed), from a :class:`railab.traffic.load.LoadResult`:
    loss where PFC promises lossless (queue drops or end-to-end loss with ``pfc_on``), an
    engine that fell more than 10 % short of what it meant to send, or a flow that arrived over
    an unexpected hop count or not at all although the design reaches it. Drops with PFC off,
    or on a lab without ``lab.capacity``, are a measured result, not a failure. A flow whose NIC
    refused every frame of the run (nothing sent, back-pressure counted: an egress filter on the
    NIC, ``railab fault grey-loss``), whose sender NIC is down, that needs an interface that does
    not exist (a pulled cable) or whose packets exceed a NIC's MTU fails too
    (:func:`load_flow_failures`; a flow's share of the PFC loss is in the run's line)."""
    out = []
    if pfc_on and capacity and ((res.dropped or 0) > 0 or res.lost > 0):
        out.append(f"loss with PFC on (lossless promised): {res.dropped or 0} queue drops, "
                   f"{res.lost} packets lost end to end")
    if not res.keeps_rate:
        out.append(f"the engine fell {res.engine_shortfall:.0%} short of its configured rate "
                   "(host too busy): the figures understate the offered load")
    if res.switch_agent_lost:
        out.append("the switch agent (ECN marking, PFC) exited during the run: from then on no "
                   "port marked or paused, so the figures are not the fabric's; railab undid "
                   "its queue changes after the run: run it again")
    return out + [f"{f['name']}: {w}" for f in res.flows for w in [_flow_failure(f, lossless=False)] if w]


def load_flow_failures(res, *, pfc_on: bool, capacity: bool) -> list[str | None]:
    """Per flow of a load run (``res.flows`` order) why it failed, in words (without the flow's
    name), or None: the per-flow reasons of :func:`load_verdict`, and with PFC on a capacity
    lab any lost packet (``lost N of M with PFC on``): the flows :func:`flow_root_causes` files
    under a root cause. Flows unreachable by design (``expected_hops`` None) never fail here."""
    return [_flow_failure(f, lossless=pfc_on and capacity) for f in res.flows]


def nic_pause_line(flows: list[dict], time_scale: float, most: int = 6) -> str | None:
    """The text output's line on the sender NICs PFC held (each load flow dict's
    ``pfc_holds`` and ``pfc_held_s``: the PAUSEs that held its QP at its NIC and for how long,
    measured; railab.testbed.pfc.NicPauseBoard), the longest-held first, at most ``most`` named;
    None when PFC held none. ``time_scale``: lab s per fabric s."""
    held = sorted((f for f in flows if f.get("pfc_holds")), key=lambda f: -f["pfc_held_s"])
    if not held:
        return None
    parts = [f"{f['src']} {f['pfc_holds']} x, {f['pfc_held_s'] * 1e3:.1f} lab ms "
             f"({f['pfc_held_s'] / time_scale * 1e6:.2f} us fabric)" for f in held[:most]]
    more = f" and {len(held) - most} more" if len(held) > most else ""
    return ("sender NICs held by PFC PAUSE (measured; their QPs sent nothing until RESUME): "
            + "; ".join(parts) + more)


def _flow_failure(f: dict, *, lossless: bool) -> str | None:
    """One load flow dict's failure in words (None: none), see :func:`load_flow_failures`."""
    if f["expected_hops"] is None:
        return None
    tx, rx = f["tx_packets"], f["rx_packets"]
    if f.get("port_missing"):
        return (f"needs {f['port_missing']}, which does not exist (cable pulled or "
                "unplugged): not sent")
    if f.get("nic_down"):
        return (f"its sender NIC is down (ENETDOWN): {tx} sent; railab check names "
                "the link")
    if f.get("mtu_exceeded"):
        return f"MTU: {f.get('mtu_note') or f['mtu_exceeded']}; sent {tx}, {rx} arrived"
    if f.get("down_nic"):
        return f"{f['down_nic']} is down: sent {tx}, {rx} arrived"
    if tx == 0 and f.get("backpressure", 0) > 0:
        return (f"nothing sent: its NIC refused every frame ({f['backpressure']} times: "
                "an egress filter drops them, or a queue never drained); railab check names a "
                "filter on the port")
    if rx == 0 and tx > 0:
        return (f"nothing arrived ({tx} sent), the design reaches it in "
                f"{f['expected_hops']} hops")
    if f["hops"] is not None and f["hops"] != f["expected_hops"]:
        return (f"arrived over {f['hops']} hops, expected {f['expected_hops']} "
                "(unexpected path)")
    if lossless and f.get("lost", 0) > 0:
        return f"lost {f['lost']} of {tx} with PFC on"
    return None


def print_root_causes(con, causes: list[dict]) -> None:
    """One ``root cause:`` line per entry of :func:`flow_root_causes` (not one per failed
    flow), then the flows no broken element explains (``not attributed: ...``)."""
    for c in causes:
        n = 1 + len(c["explains"])
        more = f" (+{n - 1} more)" if n > 1 else ""
        both = (f"; {len(c['joint'])} of them only together with another root cause"
                if c.get("joint") else "")
        con.print(f"[red]root cause:[/red] {c['text']}: {n} flow{'' if n == 1 else 's'} "
                  f"failed{both}, e.g. {c['root']}{more}", highlight=False, soft_wrap=True)
    lost = unattributed(causes)
    if lost:
        con.print(f"[yellow]not attributed:[/yellow] {len(lost)} failed "
                  f"flow{'' if len(lost) == 1 else 's'} could not be tied to a broken "
                  f"element (railab check names none on their paths): "
                  + ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else ""),
                  highlight=False, soft_wrap=True)


def load_root_causes(lab: str, spec, flows, res, failures: list[str | None]) -> list[dict]:
    """The root causes of a load run's failed flows, as for the packet patterns
    (:func:`flow_root_causes` over :func:`railab.traffic.load.flow_results`, with
    ``railab check``'s families run now: :func:`check_groups`); ``[]`` when no flow failed
    (a run that fails only on the engine's shortfall has no element to name)."""
    from railab.traffic.load import flow_results

    if not any(failures):
        return []
    return flow_root_causes(spec, flow_results(flows, res, failures), None, check_groups(lab))


def load_error_causes(lab: str, spec, flows, error: str) -> tuple[list[dict], list[str]]:
    """A load run that could not run (``error``): the ``railab check`` root causes on the
    flows' paths (:func:`railab.checks.hops.attribute_flows`, every flow counted as failed
    with ``not run: ERROR``) and the flows none of them explains: ``(root_causes,
    unattributed flow names)``; ``([], [])`` without flows or when the lab cannot be
    checked."""
    from railab.traffic.load import LoadFlowResult

    if spec is None or not flows:
        return [], []
    groups = check_groups(lab)
    if not groups:
        return [], [f.name for f in flows]
    results = [LoadFlowResult(flow=f, failure=f"not run: {error}") for f in flows]
    causes = flow_root_causes(spec, results, None, groups)
    return [c for c in causes if c["attributed"]], unattributed(causes)


def ns3_run_text(ns3: dict, util: float, ratios: list[float], queue_peak: int) -> str:
    """One line for an incast load run beside ns-3's stored run of the same scenario
    (``congestion.reference.ns3``, :func:`railab.traffic.ns3ref.beside`): ns-3's figures
    (computed), this run's (measured) and whether they are within issue 44's bands; no verdict
    when the run is not ns-3's scenario (another fabric time, ECN/PFC/buffer or packet size)."""
    from railab.cli.model import ns3_head

    c, b = ns3["vs"], ns3["bands"]
    out = (ns3_head(ns3, f"computed, {ns3['scenario']}") + "; "
           f"this run (measured): {util:.1%}, {min(ratios):.2f}-{max(ratios):.2f}, "
           f"{queue_peak:,} B: "
           + _verdict_word(c["agrees"])
           + f" its bands (port {c['utilization_points']:g} of {b['utilization_points']:g} points, "
           f"shares {c['share_max_diff']:.2f} of {b['share']:g}, queue peak "
           f"{c['queue_peak_rel']:.0%} of {b['queue_peak']:.0%})")
    if c["agrees"] is None:
        out += _not_scenario_text(ns3, (("the fabric time", "same_fabric_time"),))
    if (sp := ns3.get("ns3_spread")) is not None:
        out += "; " + ns3_spread_text(sp, ns3.get("within_spread"))
    if (ls := ns3.get("leafspine")) is not None:  # the run's own layout: senders behind spines
        v = ls["vs"]
        out += (f"; ns-3 in this run's leaf-spine layout ({ls['scenario']}, computed): port used "
                f"{ls['utilization']:.1%}, queue peak {ls['queue_peak_bytes']:,} B: "
                + _verdict_word(v["agrees"])
                + f" the bands (port {v['utilization_points']:g} points, shares "
                f"{v['share_max_diff']:.2f}, queue peak {v['queue_peak_rel']:.0%})")
        if (lsp := ls.get("ns3_spread")) is not None:
            out += "; " + ns3_spread_text(lsp, ls.get("within_spread"))
    if ns3["rules"] == "paper":
        out += ("; ns-3's DCQCN rules are not the paper's: --cc dcqcn-ns3 runs ns-3's "
                "(docs/congestion.md \"ns-3 (HPCC) side by side\")")
    return out


def ns3_fct_text(ns3: dict, fct: dict) -> str:
    """One line for a ``--bytes`` incast beside ns-3's stored finite-flow run of the same
    scenario (``congestion.reference.ns3``, :func:`railab.traffic.ns3ref.beside_fct`): ns-3's
    flow completion p50/p99/max (computed; fabric us, a flow's start to its last packet
    delivered), this run's (measured, ``congestion.fct``'s ``fabric_*_us``), the differences and
    whether p50 and p99 are within railab's band (:data:`railab.traffic.ns3ref.FCT_BAND`); no
    verdict when the run is not ns-3's scenario. With senders behind the spines, also ns-3's
    finite-flow run of that leaf-spine layout (``leafspine``) and the run against it."""
    n, c, b = ns3["fct"], ns3["vs"], ns3["band"]

    def us(v):
        return "-" if v is None else f"{v:,.1f}"

    def rel(v):
        return "-" if v is None else f"{v:+.0%}"
    out = (f"ns-3 (HPCC's RDMA model, {ns3['repository']}@{(ns3['commit'] or '?')[:10]}, computed, "
           f"{ns3['scenario']}, {ns3['flow_size_bytes']:,} B a flow"
           + ("" if ns3["same_qos"] else ", [yellow]not this run's ECN/PFC/buffer[/yellow]")
           + f"): flow completion p50 {us(n['delivered_p50_us'])}, p99 {us(n['delivered_p99_us'])}, "
           f"max {us(n['delivered_max_us'])} us (fabric; start to last packet delivered); this run "
           f"(measured): {us(fct['fabric_p50_us'])}, {us(fct['fabric_p99_us'])}, "
           f"{us(fct['fabric_max_us'])} us ({rel(c['p50_rel'])}, {rel(c['p99_rel'])}, "
           f"{rel(c['max_rel'])}): "
           + _verdict_word(c["agrees"])
           + f" railab's band (p50 and p99 within {b['p50']:.0%} of ns-3's; railab's choice, "
           "not issue 44's)")
    if c["agrees"] is None:
        out += _not_scenario_text(ns3, (("the bytes per QP", "same_bytes"),
                                        ("whether every QP completed", "all_completed")))
    if (ls := ns3.get("leafspine")) is not None:  # the run's own layout: senders behind spines
        n, v = ls["fct"], ls["vs"]
        out += (f"; ns-3 in this run's leaf-spine layout ({ls['scenario']}, computed): p50 "
                f"{us(n['delivered_p50_us'])}, p99 {us(n['delivered_p99_us'])}, max "
                f"{us(n['delivered_max_us'])} us; this run {rel(v['p50_rel'])}, {rel(v['p99_rel'])}, "
                f"{rel(v['max_rel'])}: "
                + _verdict_word(v["agrees"])
                + " the band")
    if ns3["rules"] == "paper":
        out += ("; ns-3's DCQCN rules are not the paper's: --cc dcqcn-ns3 runs ns-3's "
                "(docs/congestion.md \"ns-3 (HPCC) side by side\")")
    return out


def _verdict_word(agrees: bool | None) -> str:
    """A verdict against ns-3 in the text: within, not within, or no verdict (None)."""
    if agrees is None:
        return "no verdict against"
    return "[green]within[/green]" if agrees else "[red]not within[/red]"


def _not_scenario_text(ns3: dict, more: tuple[tuple[str, str], ...] = ()) -> str:
    """Why a run beside ns-3 gets no verdict: which of its conditions differ (``ns3``'s
    ``same_qos``, ``same_payload`` and the ``more`` (words, key) pairs) and, when its flows share
    a link short of the receiver's port (``one_bottleneck`` false), which flows and link."""
    conds = (("the ECN/PFC/buffer", "same_qos"),
             ("the packet size (ns-3: 4096-byte payloads)", "same_payload"), *more)
    why = [w for w, key in conds if not ns3[key]]
    out = ""
    if why:
        out += (f" [yellow](this run is not ns-3's scenario: {' and '.join(why)} "
                f"differ{'s' if len(why) == 1 else ''})[/yellow]")
    if ns3.get("one_bottleneck") is False:
        links = "; ".join(f"{', '.join(n.split('->')[0] for n in names)} share {link}"
                          for link, names in ns3["shared"].items())
        out += (f" [yellow](this run is not ns-3's one-switch scenario: {links} before the "
                "receiver's port, a second congestion point; --seed disjoint picks a hash seed "
                "that keeps them apart)[/yellow]")
    return out


def ns3_spread_text(sp: dict, within: bool | None) -> str:
    """A few words on ns-3's own run-to-run range (``reference.ns3.ns3_spread``,
    :func:`railab.traffic.ns3ref.spread`: RngRun 1..K), how often ns-3's other seeds meet
    the bands of its run 1 (``self_agreement``) and whether this run lies within the range
    widened by issue 44's bands (``within_spread``; None: no verdict)."""
    (ulo, uhi), (qlo, qhi) = sp["utilization"], sp["queue_peak_bytes"]
    out = (f"ns-3 over {sp['k']} seeds: port {ulo:.1%}-{uhi:.1%}, queue peak "
           f"{qlo / 1e6:.2f}-{qhi / 1e6:.2f} MB")
    if (sa := sp.get("self_agreement")) is not None:
        out += (f", its other seeds within the bands of its run 1 in {sa['agree']} of "
                f"{sa['of']}")
    if within is None:
        return out
    v = sp["vs"]
    miss = [w for w, ok in (("port", v["utilization_ok"]), ("shares", v["share_ok"]),
                            ("queue peak", v["queue_peak_ok"])) if not ok]
    return out + (": this run [green]within[/green] ns-3's own spread (widened by the bands)"
                  if within else f": this run [red]outside[/red] ns-3's own spread "
                  f"(widened by the bands: {', '.join(miss)})")


def _capacity_sampler(ref, spec):
    """A :data:`railab.traffic.load.PortSampler` over the capacity dataplane's counters
    (:class:`railab.testbed.capacity.CapacitySampler`, CE marks read too), and its closer;
    ``(None, None)`` for a lab without ``lab.capacity``."""
    if not spec.qos.capacity.enabled:
        return None, None
    from railab.testbed import capacity
    from railab.testbed.state import lab_dir

    smp = capacity.CapacitySampler(spec, ref.netns_of, run_dir=lab_dir(spec.name))

    def sample() -> dict[str, dict[str, float]]:
        return {f"{n}:{p}": {"backlog_bytes": c.backlog_bytes, "dropped": c.dropped,
                             "pause_events": c.pause_events, "paused_s": c.paused_s}
                for (n, p), c in smp.sample().items()}
    return sample, smp.close


def fct_summary(res, capacity: bool) -> dict:
    """Flow completion of a load run whose QPs each sent a byte count (``--bytes``): ``p50_s``,
    ``p99_s``, ``max_s`` (lab s, measured: a QP's first packet to its last one delivered, or to
    the responder's last packet with an RC transport), the same in fabric us on a lab with
    lab.capacity (``fabric_p50_us`` ...), and ``completed`` / ``qps`` (QPs that delivered their
    bytes / all). Percentiles by nearest rank over the completed QPs; None when none completed."""
    from railab.traffic.load import _pct

    fcts = sorted(f["fct_s"] for f in res.flows if f.get("fct_s") is not None)
    out = {"qps": len(res.flows), "completed": len(fcts),
           "p50_s": _pct(fcts, 0.5), "p99_s": _pct(fcts, 0.99), "max_s": fcts[-1] if fcts else None}
    for k in ("p50", "p99", "max"):
        v = out[f"{k}_s"]
        out[f"fabric_{k}_us"] = (round(v / res.time_scale * 1e6, 3)
                                 if capacity and v is not None else None)
    return out


def load_command(lab: str, *, pattern, src, dst, pxn, flows, senders, cc, pfc, seconds, sport,
                 mtu, as_json, dcqcn=None, seed=None, nic=None, nbytes=None) -> None:
    """``railab traffic`` on the load engine (:func:`railab.traffic.load.run_load`): see the
    command's help; prints a per-flow table or the JSON object with ``congestion``.

    Before the run every flow is traced through the switches' FIBs (:mod:`railab.traffic.fib`,
    with the run's hash seed when ``seed`` is given): each flow dict gets ``path`` (egress
    ``node:port`` per switch, None for ``--sport spray`` or when a namespace cannot be read) and
    ``congestion.shared_links`` names the links two or more flows share (ECMP collisions)."""
    from railab.errors import RailabError, UsageError
    from railab.testbed.labref import resolve
    from railab.testbed.state import load_lock
    from railab.topologies.qos import DCQCN_PROFILES
    from railab.traffic.engine import sigint_event
    from railab.traffic.load import (
        CC_MODES,
        NIC_MODES,
        SPORT_MODES,
        LoadFlow,
        fair_share,
        fairness,
        run_load,
        steady_state_check,
    )
    from railab.traffic.patterns import (
        DEFAULT_INCAST_SENDERS,
        PatternError,
        flows_for,
        incast_pairs,
        parse_endpoint,
        parse_endpoints,
        route,
    )
    from railab.traffic.patterns import Flow as _Flow

    cc = cc or "dcqcn"
    sport = sport or "per-qp"
    nic = nic or "none"
    if cc not in CC_MODES:
        _usage(f"--cc must be one of {', '.join(CC_MODES)} (got {cc!r})")
    if nic not in NIC_MODES:
        _usage(f"--nic must be one of {', '.join(NIC_MODES)} (got {nic!r})")
    if pfc is not None and pfc not in ("on", "off"):
        _usage(f"--pfc must be on or off (got {pfc!r})")
    if sport not in SPORT_MODES:
        _usage(f"--sport must be one of {', '.join(SPORT_MODES)} (got {sport!r})")
    if dcqcn is not None and dcqcn not in DCQCN_PROFILES:
        _usage(f"--dcqcn must be one of {', '.join(DCQCN_PROFILES)} (got {dcqcn!r})")
    if dcqcn is not None and cc == "none":
        _usage(f"--dcqcn {dcqcn} with --cc none: no DCQCN profile runs under --cc none "
               "(senders at line rate); drop --dcqcn or use --cc dcqcn")
    if seconds is not None and not 0 < seconds <= MAX_LOAD_S:
        _usage(f"--seconds must be > 0 and <= {MAX_LOAD_S:g} (got {seconds:g})")
    if nbytes is not None and seconds is not None:
        _usage("--bytes ends the run when every QP has delivered its bytes: drop --seconds "
               "(or drop --bytes for a timed run)")
    if senders is not None and pattern != "incast":
        _usage("--senders counts incast sender NICs: use it with --pattern incast")
    if pattern is None and (src is None or dst is None):
        _usage("give --pattern (e.g. incast), or both --src and --dst")
    if mtu is not None and not 256 <= mtu <= 4096:
        _usage(f"--mtu must be 256-4096 (got {mtu})")
    if seed is not None and seed != SEED_DISJOINT:
        try:
            seed = int(seed)
        except ValueError:
            _usage(f"--seed must be a number 0..{2 ** 32 - 1} or {SEED_DISJOINT} (got {seed!r})")
        if not 0 <= seed < 2 ** 32:
            _usage(f"--seed must be 0..{2 ** 32 - 1} (got {seed})")
    seed_picked = False  # --seed disjoint: railab chose the seed
    if seed == SEED_DISJOINT and sport == "spray":
        _usage(f"--seed {SEED_DISJOINT} picks the seed from each flow's one path: --sport spray "
               "sends each flow over many; use --sport per-qp or fixed")
    spec = fl = None
    try:
        ref = resolve(lab)
        spec = ref.spec()
        capacity = spec.qos.capacity.enabled
        secs = default_load_seconds(spec) if seconds is None else seconds
        pfc_on = (spec.qos.capacity.pfc if pfc is None else pfc == "on") and capacity
        if pfc == "on" and not capacity:
            _usage(f"--pfc on: lab {spec.name} has no lab.capacity (no queues to pause); "
                   "use an intent with lab.capacity, e.g. mini-lossless")
        try:
            if pattern == "incast":
                rcv = parse_endpoint(spec, dst) if dst is not None else None
                pairs = incast_pairs(spec, DEFAULT_INCAST_SENDERS if senders is None else senders,
                                     rcv, pxn)
                fl = [route(spec, _Flow(a, b, pxn=pxn)) for a, b in pairs]
            else:
                sel = {"src": parse_endpoints(spec, src) if src is not None else None,
                       "dst": parse_endpoints(spec, dst) if dst is not None else None}
                fl = [f for f in flows_for(spec, pattern, pxn=pxn, n=flows, **sel)
                      if f.path_class != "intra-server"]
                if not fl:
                    _usage("every flow of this selection is intra-server (NVLink): a load run "
                           "needs flows between servers")
        except PatternError as exc:
            _usage(str(exc))
        sampler, close = _capacity_sampler(ref, spec)
        try:
            with sigint_event() as stop, load_lock(spec.name):
                if seed == SEED_DISJOINT:
                    seed, seed_picked = disjoint_seed(spec, ref.netns_of, fl, sport), True
                with _hash_seed(spec, ref.netns_of, seed), \
                        _pfc(spec, ref.netns_of, pfc_on, capacity) as agent:
                    paths = _trace_paths(spec, ref.netns_of, fl, sport)
                    res = run_load(spec, ref.netns_of, [LoadFlow(f, bytes=nbytes) for f in fl], cc=cc,
                                   seconds=None if nbytes else secs, sport_mode=sport,
                                   port_sampler=sampler,
                                   stop=stop.is_set, **({"mtu": mtu} if mtu else {}),
                                   dcqcn=DCQCN_PROFILES[dcqcn] if dcqcn else None,
                                   per_flow_faults=True, nic=nic)
                    if stop.is_set():
                        raise KeyboardInterrupt
                if agent is not None and agent.lost is not None:
                    res.switch_agent_lost = True  # the session undid what it held
        finally:
            if close is not None:
                close()
    except KeyboardInterrupt:
        _interrupted()
    except (RailabError, OSError) as exc:  # the run could not run: say why, and what broke
        if isinstance(exc, UsageError):
            raise
        _load_failed(lab, spec, fl, pattern, exc, as_json)
    if res.dropped is None:
        res.dropped = res.lost  # no queues to count: the fabric's loss is what was measured
    if paths is not None:
        for f, tr in zip(res.flows, paths, strict=True):
            f["path"] = tr.text() if tr is not None else None
    try:  # failed flows under check's root causes, as the packet patterns do (issue 31)
        causes = load_root_causes(lab, spec, fl, res, load_flow_failures(
            res, pfc_on=pfc_on, capacity=capacity))
    except KeyboardInterrupt:
        _interrupted()
    if res.pause_events is None:
        res.pause_events = 0
    fair = fairness(res)
    fshare = fair_share(res)
    bad = load_verdict(res, pfc_on=pfc_on, capacity=capacity)
    fabric_ms = round(res.seconds / res.time_scale * 1000, 3) if capacity else None
    # without lab.capacity the links are unlimited: no port rate to use or share (the engine's
    # port_rate_mbps is then the generic profile's, not the lab's)
    util = (round(sum(f["rx_mbps_last_half"] for f in res.flows) / res.port_rate_mbps, 4)
            if pattern == "incast" and res.flows and capacity else None)
    reference = None
    fct = fct_summary(res, capacity) if nbytes else None
    # the models' references are of a timed run (every sender until the end): not of QPs that
    # each stop once their bytes are delivered
    if pattern == "incast" and capacity and cc == "dcqcn" and res.flows and not nbytes:
        from railab.traffic.fluid import incast_reference

        sent = sum(f["tx_packets"] for f in res.flows)
        reference = incast_reference(spec.qos, len(res.flows), res.seconds, pfc=pfc_on,
                                     dcqcn=DCQCN_PROFILES[dcqcn] if dcqcn else None,
                                     mtu=mtu or 4096, port_rate_mbps=res.port_rate_mbps,
                                     measured_mbps=[f["rx_mbps_last_half"] for f in res.flows],
                                     measured_dropped_pct=100 * (res.dropped or 0) / sent if sent else 0.0)
        from railab.traffic.packetsim import packet_reference

        reference["packet"] = packet_reference(
            spec.qos, len(res.flows), res.seconds, pfc=pfc_on,
            dcqcn=DCQCN_PROFILES[dcqcn] if dcqcn else None, mtu=mtu or 4096,
            measured_ratios=fshare["ratios"] if fshare else None)
    shared: dict[str, list[str]] = {}  # links some flows share (ECMP collisions), not all
    if paths is not None:
        from railab.traffic.fib import shared_links

        shared = shared_links({f["name"]: tr for f, tr in zip(res.flows, paths, strict=True)
                               if tr is not None})
    ns3_side = None  # ns-3's stored figures for the same incast, if any, beside this run's
    ns3_note = None  # why there are none
    if pattern == "incast" and capacity and cc != "none" and res.flows:
        from railab.traffic import ns3ref

        profile = dcqcn or spec.qos.dcqcn.name
        # the senders behind the spines (not on the receiver's leaf): ns-3's leaf-spine run
        rcv_leaf = spec.nic(fl[0].dst[0], fl[0].dst_nic).leaf
        remote = [f.src[0] for f in fl if spec.nic(f.src[0], f.src_nic).leaf != rcv_leaf]
        if nbytes:  # finite flows: ns-3's flow completion times of the same incast, if stored
            if (ns3 := ns3ref.load_fct(len(res.flows), pfc_on, profile, nbytes)) is None:
                ns3_note = ns3ref.missing_fct_note(len(res.flows), pfc_on, profile, nbytes)
            else:
                ns3_side = ns3ref.beside_fct(
                    ns3, spec.qos, pfc_on, nbytes, p50_us=fct["fabric_p50_us"],
                    p99_us=fct["fabric_p99_us"], max_us=fct["fabric_max_us"],
                    completed=fct["completed"], payload_bytes=mtu or 4096,
                    shared_links=shared if paths is not None else None, remote=remote)
                ns3_side["rules"] = "ns3" if cc == "dcqcn-ns3" else "paper"
        elif (ns3 := ns3ref.load(len(res.flows), pfc_on, profile)) is None:
            ns3_note = ns3ref.missing_note(len(res.flows), pfc_on, profile)
        else:
            ns3_side = ns3ref.beside(ns3, spec.qos, pfc_on, fabric_ms * 1000, utilization=util,
                                     ratios=fshare["ratios"],
                                     queue_peak_bytes=res.queue_peak_bytes or 0,
                                     payload_bytes=mtu or 4096,
                                     shared_links=shared if paths is not None else None,
                                     remote=remote)
            ns3_side["rules"] = "ns3" if cc == "dcqcn-ns3" else "paper"
    # ns-3's side of the reference; under --cc dcqcn-ns3 (no fluid or per-packet reference: they
    # model the paper's rules) the whole of it
    ns3_part = ({"ns3": ns3_side, **({"ns3_note": ns3_note} if ns3_note else {})}
                if ns3_side is not None or ns3_note else None)
    if reference is not None and ns3_part:
        reference.update(ns3_part)
    check = None
    if reference is not None:
        check = steady_state_check(util, fshare["ratios"], reference["measured_dropped_pct"],
                                   pfc=pfc_on)
        if pfc_on:  # how often DCQCN itself meets the same band in runs of this length
            check["reference_fair_rate"] = reference["packet"]["fair_rate"]
    steady = bool(reference["steady"]) if reference else (
        fabric_ms is not None and fabric_ms >= 10.0)
    rx_port = None  # the leaf port lab.json cables the incast's receiver NIC to
    if pattern == "incast" and fl:
        n = spec.nic(fl[0].dst[0], fl[0].dst_nic)
        rx_port = f"{n.leaf}:{n.leaf_port}"
    if as_json:
        cong = res.to_dict()
        cong["fairness_last_half"] = fair
        cong["fair_share"] = fshare if capacity else None
        cong["shared_links"] = shared
        cong["hash_seed"] = seed
        cong["hash_seed_picked"] = SEED_DISJOINT if seed_picked else None
        cong["utilization"] = util
        cong["fabric_ms"] = fabric_ms
        cong["steady"] = steady
        cong["reference"] = reference if reference is not None else ns3_part
        cong["steady_state_check"] = check
        cong["fct"] = fct
        print(json.dumps({
            "lab": spec.name, "pattern": pattern, "pxn": pxn, "cc": cc, "mtu": mtu or 4096,
            "pfc": "on" if pfc_on else "off", "capacity": capacity,
            "seconds": None if nbytes else secs, "bytes_per_qp": nbytes,
            "senders": len(fl) if pattern == "incast" else None,
            "receiver": (f"{fl[0].dst[0]}:gpu{fl[0].dst[1]}" if pattern == "incast" else None),
            "receiver_port": rx_port,
            "port_rate_mbps": res.port_rate_mbps, "time_scale": res.time_scale,
            "dcqcn": res.dcqcn["name"] if res.dcqcn else None, "congestion": cong, "failures": bad,
            "root_causes": causes, "unattributed": unattributed(causes), "error": None,
        }, indent=2, sort_keys=True))
    else:
        con = _console()
        prof = f" ({res.dcqcn['name']} profile)" if res.dcqcn else ""
        t = Table(title=f"{spec.name}: {pattern or f'{src} -> {dst}'} load, {len(fl)} QPs, "
                  f"cc {cc}{prof}, PFC {'on' if pfc_on else 'off'}, {res.seconds:g} lab s "
                  + (f"(= {res.seconds / res.time_scale * 1e6:.0f} us fabric, x{res.time_scale:g})"
                     if capacity else "(links unlimited: no lab.capacity)"))
        for col in ("flow", "NICs", "tx Mb/s", "rx Mb/s", "rx/fair", "CE", "CNP", "lost",
                    "hops"):
            t.add_column(col, justify="left" if col in ("flow", "NICs") else "right")
        for f, share in zip(res.flows, fair, strict=True):
            t.add_row(f["name"], f"nic{f['src_nic']}->nic{f['dst_nic']}",
                      f"{f['rate_mbps_last_half']:.2f}", f"{f['rx_mbps_last_half']:.2f}",
                      f"{share:.2f}" if capacity else "-", str(f["ce_marked"]), str(f["cnp_received"]),
                      str(f["lost"]), "-" if f["hops"] is None else str(f["hops"]))
        con.print(t)
        if capacity:
            con.print(f"port rate {res.port_rate_mbps:g} Mb/s; rates over the last half of the run; "
                      f"rx/fair = rx rate / (port rate / {len(fl)})", highlight=False)
        if fabric_ms is not None:
            con.print(f"fabric time covered: {fabric_ms:g} ms ({res.seconds:g} lab s at time scale "
                      f"x{res.time_scale:g}): "
                      + ("steady state (the last half)" if steady else
                         "[yellow]transient only[/yellow] (DCQCN has not settled: "
                         + ("more --bytes" if nbytes else "a longer --seconds")
                         + ", or a faster lab port rate)"), highlight=False)
        if seed is not None:
            con.print(f"ECMP hash seed {seed} on every switch"
                      + (f" (--seed {SEED_DISJOINT}: the first that puts no two flows on one link "
                         "short of the receiver's port)" if seed_picked else ""), highlight=False)
        if util is not None:
            con.print(f"receiver port used (measured, last half): {util:.0%}", highlight=False)
        if fct is not None:
            fab = (f" (fabric {fct['fabric_p50_us']:g} / {fct['fabric_p99_us']:g} / "
                   f"{fct['fabric_max_us']:g} us)" if fct["fabric_p50_us"] is not None else "")
            con.print(f"flow completion, {nbytes:,} B per QP (measured): "
                      + (f"p50 {fct['p50_s']:g} s, p99 {fct['p99_s']:g} s, max {fct['max_s']:g} s "
                         f"(lab){fab}" if fct["p50_s"] is not None else "no QP completed")
                      + f"; {fct['completed']} of {fct['qps']} QPs delivered their bytes",
                      highlight=False, soft_wrap=True)
        if res.queue_peak_bytes:
            con.print(f"deepest queue (measured, sampled every {res.sample_s:g} lab s): "
                      f"{res.queue_peak_bytes:,} B at {res.queue_peak_port}"
                      + ("" if rx_port is None or res.queue_peak_port == rx_port else
                         f", not the receiver's port {rx_port}"
                         + (" (PFC pauses held the excess upstream of it)"
                            if pfc_on and res.pause_events else "")), highlight=False)
        if (held := nic_pause_line(res.flows, res.time_scale)) is not None:
            con.print(held, highlight=False, soft_wrap=True)
        if reference is not None:
            r = reference
            ttf = (f"within 10 % of the fair share after {r['time_to_fair_ms']:g} ms"
                   if r["time_to_fair_ms"] is not None else "not within 10 % of the fair share by the end")
            con.print(f"model ({r['model']}, computed): port used {r['utilization']:.0%}, each "
                      f"sender {r['per_flow_mbps'][0]:.2f} Mb/s, queue mean (last half) "
                      f"{r['queue_bytes']['mean']:,} B, drops {r['dropped_pct']:.1f} % "
                      f"(measured {r['measured_dropped_pct']:.1f} %), {ttf}; the emulation "
                      + ("[green]agrees[/green] (" if r["agrees"] else
                         "[red]disagrees[/red] on what follows (the band: ")
                      + f"port use and mean rate within {r['tolerance']:.0%}, drops within "
                      f"{r['drop_tolerance_points']:g} point)",
                      highlight=False, soft_wrap=True)
            for d in r["disagreements"]:
                con.print(f"  differs beyond the band: {d}", highlight=False)
            pk = r.get("packet")
            if pk is not None:
                from railab.traffic.packetsim import spread_text

                con.print(f"{spread_text(pk)}; measured "
                          f"{pk['measured_ratio']['min']:.2f}-{pk['measured_ratio']['max']:.2f}"
                          + (" (within the reference's range)" if pk["spread_like_reference"] else
                             " ([yellow]outside the reference's range, widened by 0.05[/yellow])"),
                          highlight=False, soft_wrap=True)
        if ns3_side is not None:
            con.print(ns3_fct_text(ns3_side, fct) if nbytes else
                      ns3_run_text(ns3_side, util, fshare["ratios"], res.queue_peak_bytes or 0),
                      highlight=False, soft_wrap=True)
        elif ns3_note:
            con.print(ns3_note, highlight=False, soft_wrap=True)
        con.print(f"ce_marked {res.ce_marked}, cnp_sent {res.cnp_sent}, cnp_received "
                  f"{res.cnp_received}, dropped {res.dropped}, lost {res.lost}, pause_events "
                  f"{res.pause_events}; offered {res.offered_mbps:g} Mb/s, engine shortfall "
                  f"{res.engine_shortfall:.1%}"
                  + (f" (engine at {res.engine_priority})" if res.engine_priority else ""),
                  highlight=False)
        if res.cnp_transit is not None:
            ct = res.cnp_transit
            con.print(f"CNP transit (measured, the NP's send to the RP's read, {ct['cnps']} CNPs): "
                      f"mean {ct['mean_s'] * 1e3:.3g} ms, max {ct['max_s'] * 1e3:.3g} ms (lab)"
                      + (f" = {ct['fabric_mean_us']:g} / {ct['fabric_max_us']:g} us of fabric time"
                         if capacity else ""), highlight=False)
        if res.transport is not None:
            tr = res.transport
            con.print(f"RC transport ({tr['nic']}: "
                      + ("go-back-N" if tr["nic"] == "gbn" else "out-of-order placement, selective "
                         "repeat")
                      + f", timeout {tr['rto_lab_s']:g} lab s): goodput {tr['goodput_mbps']:g} Mb/s, "
                      f"{tr['retx_packets']} packets retransmitted ({tr['retx_bytes']:,} B), "
                      f"{tr['naks']} NAKs, {tr['timeouts']} timeouts"
                      + (f"; FCT p50 {tr['fct_p50_s']:g} s, p99 {tr['fct_p99_s']:g} s (lab)"
                         if tr["fct_p50_s"] is not None else ""), highlight=False, soft_wrap=True)
        if cc != "none" and res.flows and capacity:
            con.print(f"fair share {fshare['share_mbps']:g} Mb/s (port / {len(fl)}): every "
                      f"sender {fshare['min']:.2f}-{fshare['max']:.2f} of it over the last half: "
                      f"{'within' if fshare['within'] else 'NOT within'} "
                      f"{fshare['tolerance']:.0%}"
                      + (" (the loose band; the steady-state check below holds each sender to "
                         f"{check['band']:.0%})" if check is not None and "band" in check else ""),
                      highlight=False)
        if check is not None:
            extra = (f"every sender {check['ratio']['min']:.2f}-{check['ratio']['max']:.2f} of its "
                     "share" if pfc_on else f"{check['dropped_pct']:.2f} % dropped")
            con.print(f"DCQCN steady-state check (measured, last half; {check['rule']}): port "
                      f"{check['utilization']:.1%}, {extra}: "
                      + ("[green]met[/green]" if check["met"] else "[red]NOT met[/red]")
                      + (" (not steady: a transient)" if not steady else "")
                      + (f"; DCQCN itself (per-packet reference) keeps every sender within "
                         f"{check['band']:.0%} in {rf['fair']} of {rf['runs']} runs of this length"
                         if (rf := check.get("reference_fair_rate")) else ""),
                      highlight=False, soft_wrap=True)
        for link, names in shared.items():
            con.print(f"ECMP: {len(names)} flows share {link}: {', '.join(names)}",
                      highlight=False, soft_wrap=True)
        if shared and pfc_on and cc != "none" and res.flows and not fshare["within"]:
            con.print("[yellow]note:[/yellow] PFC pauses a port, not a flow: flows that share "
                      "a link get less than their share while PFC holds the excess, until DCQCN "
                      "alone holds the rates (a longer --seconds, or another --seed; "
                      "docs/congestion.md \"Fair share\")", highlight=False)
        if not capacity:
            con.print(f"[yellow]note:[/yellow] lab {spec.name} has no lab.capacity: links are "
                      "unlimited, nothing congests (use an intent with lab.capacity, e.g. "
                      "mini-lossless)", highlight=False)
        for b in bad:
            con.print(f"[red]failed:[/red] {b}", highlight=False, soft_wrap=True)
        print_root_causes(con, causes)
        if causes:
            con.print(f"{len(causes)} root cause{'' if len(causes) == 1 else 's'}", highlight=False)
    if bad:
        raise typer.Exit(EXIT_FAILED)


def _load_failed(lab: str, spec, flows, pattern, exc: Exception, as_json: bool) -> None:
    """A load run that ended in an error (the engine could not start or run, the lab is not
    up): with ``--json`` the JSON object ``{"lab", "pattern", "error", "failures": [error],
    "root_causes", "unattributed", "congestion": null}`` (:func:`load_error_causes`), else
    ``error: ...`` on stderr and the root-cause lines; raises typer.Exit(EXIT_FAILED)."""
    try:
        causes, lost = load_error_causes(lab, spec, flows, str(exc))
    except KeyboardInterrupt:
        _interrupted()
    if as_json:
        print(json.dumps({"lab": spec.name if spec is not None else lab, "pattern": pattern,
                          "error": str(exc), "failures": [str(exc)], "root_causes": causes,
                          "unattributed": lost, "congestion": None}, indent=2, sort_keys=True))
    else:
        typer.echo(f"error: {exc}", err=True)
        con = _console()
        print_root_causes(con, causes)
        if lost and causes:  # some flows lie on no broken element's path
            con.print(f"[yellow]not attributed:[/yellow] {len(lost)} flow"
                      f"{'' if len(lost) == 1 else 's'} cross no element railab check names: "
                      + ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else ""),
                      highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_FAILED)


@contextmanager
def _hash_seed(spec, netns_of, seed: int | None):
    """``fib_multipath_hash_seed`` = ``seed`` on every switch for the block, put back after
    (:func:`railab.traffic.ecmp.hashing`); nothing when ``seed`` is None."""
    if seed is None:
        yield None
        return
    from railab.traffic.ecmp import hashing

    with hashing(spec, netns_of, policy=None, seed=seed) as before:
        yield before


#: ``--seed disjoint``: the first ``fib_multipath_hash_seed`` of 1..:data:`DISJOINT_TRIES`
#: under which the run's flows share no link but the ones every flow crosses
SEED_DISJOINT = "disjoint"
DISJOINT_TRIES = 256


def disjoint_seed(spec, netns_of, flows, sport_mode: str, tries: int = DISJOINT_TRIES) -> int:
    """The first ``fib_multipath_hash_seed`` in 1..``tries`` under which no two of ``flows``
    (:class:`railab.traffic.patterns.Flow`, routed) share a link that not every one of them
    crosses (:func:`railab.traffic.fib.shared_links` of the paths the switches' FIBs give each
    flow with its QP's UDP source port): an incast whose flows meet only at the receiver's port,
    the one-switch scenario of ns-3's stored runs. Each seed is set on every switch, the flows
    traced, and the switches' own seeds put back (:func:`railab.traffic.ecmp.hashing`). Raises
    UsageError when the paths cannot be traced (``--sport spray``, a switch namespace gone) or
    when no seed in the range separates them (e.g. more flows cross the spines than the
    receiver's leaf has spine links), naming the fewest shared links found."""
    from railab.errors import UsageError
    from railab.traffic.ecmp import hashing
    from railab.traffic.fib import shared_links

    best: tuple[int, dict] | None = None
    for seed in range(1, tries + 1):
        with hashing(spec, netns_of, policy=None, seed=seed):
            paths = _trace_paths(spec, netns_of, flows, sport_mode)
        if paths is None or any(tr is None for tr in paths):
            raise UsageError(f"--seed {SEED_DISJOINT}: the flows' paths could not be traced "
                             "through the switches' FIBs (is the lab up?)")
        shared = shared_links({f.name: tr for f, tr in zip(flows, paths, strict=True)})
        if not shared:
            return seed
        if best is None or len(shared) < len(best[1]):
            best = (seed, shared)
    assert best is not None
    raise UsageError(f"--seed {SEED_DISJOINT}: none of seeds 1-{tries} puts these "
                     f"{len(flows)} flows on separate links (fewest shared: seed {best[0]}, "
                     f"{'; '.join(f'{k}: {len(v)} flows' for k, v in best[1].items())}); "
                     "use fewer senders or a number")


def _trace_paths(spec, netns_of, flows, sport_mode: str) -> list | None:
    """The :class:`railab.traffic.fib.Trace` of each load flow (in ``flows`` order; None for a
    flow that cannot be traced) through the switches' FIBs with the UDP source port its QP
    sends with; None for ``spray`` (no one path per flow) or when the switch namespaces cannot
    be read."""
    if sport_mode == "spray":
        return None
    from railab.errors import RailabError
    from railab.traffic.fib import FabricView
    from railab.traffic.load import qp_sport

    try:
        with FabricView(spec, netns_of) as view:
            out = []
            for f in flows:
                try:
                    out.append(view.trace(f, qp_sport(f, sport_mode)))
                except (KeyError, OSError):
                    out.append(None)
            return out
    except (RailabError, OSError):
        return None


@contextmanager
def _pfc(spec, netns_of, on: bool, capacity: bool):
    """The capacity dataplane's switch agent for one load run
    (:func:`railab.testbed.capacity.pfc_session`: ECN marking always, the PFC emulation when
    ``on``; it runs while the block does); nothing on a lab without ``lab.capacity``."""
    if not capacity:
        yield None
        return
    from railab.testbed import capacity as _cap

    pfc_session = getattr(_cap, "pfc_session", None)
    if pfc_session is None:
        try:
            from railab.testbed.pfc import pfc_session
        except ImportError:
            pfc_session = None
    if pfc_session is None:  # a railab without the switch agent: only "off" can be honoured
        if on:
            from railab.errors import RailabError

            raise RailabError("this railab has no PFC emulation (railab.testbed.pfc): "
                              "run with --pfc off") from None
        yield None
        return
    with pfc_session(spec, netns_of, enabled=on) as sess:
        yield sess


def register(app: typer.Typer) -> None:
    """Attach ``traffic`` and ``traceroute`` to ``app``."""

    @app.command()
    def traffic(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        pattern: str | None = typer.Option(
            None, "--pattern", "-p",
            help=f"one of {', '.join(PATTERNS)}; by default it covers every server NIC"),
        src: str | None = typer.Option(
            None, "--src", help="sources: SERVER, SERVER:gpuN or SERVER:nicN, comma-separated"),
        dst: str | None = typer.Option(
            None, "--dst", help="destinations: SERVER, SERVER:gpuN or SERVER:nicN, comma-separated"),
        pxn: bool = typer.Option(False, "--pxn", help="NCCL PXN: cross NVLink first, stay on the rail"),
        flows: int | None = typer.Option(
            None, "--flows", "-n",
            help="number of flows: below the pattern's full coverage a sample spread over "
                 "servers and rails, above it the pairs repeated with new QPs"),
        size: int = typer.Option(4096, help="bytes per message (>= 1)"),
        messages: int = typer.Option(4, help="messages per flow (>= 1)"),
        mtu: int | None = typer.Option(
            None, help="RoCE path MTU, payload bytes per packet (256-4096; default 1024 for the "
            "path engine's probes, 4096 for a load run)"),
        op: str = typer.Option("write", help="write | send | mixed"),
        measure: bool = typer.Option(True, "--measure/--no-measure",
                                     help="one flow at a time with switch counters (paths)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        senders: int | None = typer.Option(
            None, "--senders", help="incast: number of sender NICs (default 8); the receiver "
            "is one NIC"),
        cc: str | None = typer.Option(
            None, "--cc", help="load run: dcqcn (the paper's rules) | dcqcn-ns3 (HPCC ns-3's "
            "DCQCN rules: a CNP per marked packet, the first cut one interval late, no byte "
            "counter; for runs beside ns-3's stored results) | none (senders at line rate "
            "whatever CNPs say); default dcqcn"),
        pfc: str | None = typer.Option(
            None, "--pfc", help="load run: PFC emulation on | off (default: the intent's "
            "lab.capacity.pfc)"),
        seconds: float | None = typer.Option(
            None, "--seconds", help="load run length, lab seconds (default: 15 ms of fabric time "
            f"on a lab with lab.capacity, at most {DEFAULT_LOAD_MAX_S:g} s unless that is under "
            f"{MIN_LOAD_FABRIC_US / 1000:g} ms of fabric time; {DEFAULT_LOAD_S:g} s without; at "
            f"most {MAX_LOAD_S:g})"),
        sport: str | None = typer.Option(
            None, "--sport", help="load run: UDP source port per QP: per-qp (Linux "
            "rdma_get_udp_sport) | fixed (one port: low entropy) | spray (per packet)"),
        dcqcn: str | None = typer.Option(
            None, "--dcqcn", help="load run: DCQCN profile, 400g (rate steps and alpha for "
            "400 Gb/s) | "
            "paper (Zhu et al. 2015, set for 40 Gb/s) | connectx (NVIDIA ConnectX firmware "
            "defaults); default the lab's qos.dcqcn"),
        seed: str | None = typer.Option(
            None, "--seed", help="load run: fib_multipath_hash_seed on every switch for the "
            "run (which uplink each flow hashes to), or disjoint: the first seed of 1-256 "
            "under which the flows share no link but the receiver's (an incast with one "
            "bottleneck, as ns-3's stored runs); default: the lab's, random per boot"),
        nic: str | None = typer.Option(
            None, "--nic", help="load run: the NICs' RC transport: none (every packet sent "
            "once; default) | gbn (go-back-N on a NAK or timeout) | ooo (out-of-order placement, "
            "selective repeat)"),
        load_bytes: str | None = typer.Option(
            None, "--bytes", help="load run: bytes per QP, e.g. 4M: each QP sends that many "
            "and the run ends once every QP delivered them (flow completion times p50/p99); "
            "default: a timed run (--seconds)"),
    ) -> None:
        """Send a RoCEv2 traffic pattern and check hops, loss and paths.

        By default the pattern covers every server NIC (every rail of every server) at least
        once; --src/--dst pick the endpoints; failed flows are grouped under their root cause
        (one dead NIC is one cause).

        Load runs (--pattern incast, or any of --cc/--pfc/--seconds/--sport): every flow is a
        QP sending at the lab's port rate, paced, with DCQCN (--cc dcqcn) reacting to the CNPs
        the receiver NIC sends for CE-marked packets; the result is the congestion object
        (CE marks, CNPs, drops, PAUSE events, per-flow and per-port series). Drops the
        configuration predicts (PFC off) exit 0; loss with PFC on, an engine that could not
        keep its rate or a flow on an unexpected path exit 1.
        """
        if pattern == "incast" or any(v is not None for v in (senders, cc, pfc, seconds, sport,
                                                              dcqcn, seed, nic, load_bytes)):
            nbytes = None
            if load_bytes is not None:
                from railab.cli.collective import parse_bytes

                try:
                    nbytes = parse_bytes(load_bytes)
                except ValueError as exc:
                    _usage(str(exc))
                if nbytes < 1:
                    _usage(f"--bytes {load_bytes}: a QP sends at least 1 byte")
            load_command(lab, pattern=pattern, src=src, dst=dst, pxn=pxn, flows=flows,
                         senders=senders, cc=cc, pfc=pfc, seconds=seconds, sport=sport,
                         mtu=mtu, as_json=as_json, dcqcn=dcqcn,
                         seed=seed, nic=nic, nbytes=nbytes)
            return
        from railab.testbed.labref import resolve
        from railab.traffic.engine import Engine, sigint_event, spread, spread_warnings
        from railab.traffic.patterns import (
            PatternError,
            coverage_text,
            flows_for,
            parse_endpoints,
            pattern_pairs,
            sample_text,
        )

        if pattern is not None and pattern not in PATTERNS:
            _usage(f"--pattern must be one of {', '.join(PATTERNS)} (got {pattern!r})")
        if pattern is None and (src is None or dst is None):
            _usage(f"give --pattern (one of {', '.join(PATTERNS)}), or both --src and --dst")
        if op not in ("write", "send", "mixed"):
            _usage(f"--op must be write, send or mixed (got {op!r})")
        mtu = PATH_MTU if mtu is None else mtu
        check_options(flows=flows, size=size, messages=messages, mtu=mtu)
        try:
            ref = resolve(lab)
            spec, netns_of = ref.spec(), ref.netns_of
            try:
                sel = {"src": parse_endpoints(spec, src) if src is not None else None,
                       "dst": parse_endpoints(spec, dst) if dst is not None else None}
                full = len(pattern_pairs(spec, pattern, pxn, **sel))
                fl = flows_for(spec, pattern, pxn=pxn, n=flows, size=size, messages=messages,
                               mtu=mtu, op=op, **sel)
            except PatternError as exc:
                _usage(str(exc))
            with sigint_event() as stop:
                with Engine(spec, netns_of, stop=stop) as eng:  # closes every socket, Ctrl-C too
                    results = eng.run(fl, measure=measure)
                    warnings = spread_warnings(spec, results, _link_up(eng),
                                               link_state=_link_state(eng))
                    causes = flow_root_causes(
                        spec, results, _link_state(eng), check_groups(lab, stop)) if any(
                        not r.ok for r in results) else []
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            _interrupted()
        sp = spread(spec, results)
        bad = [r for r in results if not r.ok]
        cover = coverage_text(spec, fl, full)
        title = pattern or f"{src} -> {dst}"
        if as_json:
            from railab.traffic.patterns import coverage

            cov = coverage(spec, fl)
            print(json.dumps({
                "lab": spec.name, "pattern": pattern, "pxn": pxn, "src": src, "dst": dst,
                "flows": [r.to_dict() for r in results],
                "spread": {"per_spine": sp.per_spine, "per_link": sp.per_link,
                           "spine_imbalance": round(sp.imbalance(sp.per_spine), 3),
                           "link_imbalance": round(sp.imbalance(sp.per_link), 3)},
                "failed": len(bad), "warnings": warnings, "sampled": sample_text(spec, fl),
                "coverage": {"text": cover, "full_coverage_flows": full,
                             "sampled": len(fl) < full, "nics": len(cov.nics),
                             "nics_total": cov.nics_total, "servers": len(cov.servers),
                             "servers_total": cov.servers_total, "rails": len(cov.rails),
                             "rails_total": cov.rails_total,
                             "nics_not_covered": cov.missing_nics},
                "root_causes": causes, "unattributed": unattributed(causes),
            }, indent=2, sort_keys=True))
        else:
            con = _console()
            t = Table(title=f"{spec.name}: {title}{' (PXN)' if pxn else ''}, {len(results)} flows")
            for col in ("flow", "NICs", "delivered", "lost", "hops exp", "hops TTL",
                        "hops ctr", "path", "verdict"):
                t.add_column(col, justify="right" if col in ("delivered", "lost") else "left")
            for r in results:
                f = r.flow
                nics = f"nic{f.src_nic}->nic{f.dst_nic}" + (" +NVLink" if f.nvlink else "")
                path = ">".join(p.split(":")[0] for p in r.path) or (
                    "NVLink/local" if f.path_class == "intra-server" else "-")
                if r.unreachable_at:
                    path += f" (unreachable at {r.unreachable_at})"
                if getattr(r, "sprayed", None):  # a switch split it per packet (railab lb)
                    path += f" (sprayed over {len(r.sprayed)} ports)"
                style = "green" if r.ok else "red"
                t.add_row(f.name, nics, f"{r.delivered}/{r.sent}", str(r.lost),
                          _hops(f.expected_hops), "-" if r.hops_ttl is None else str(r.hops_ttl),
                          "-" if r.hops_counters is None else str(r.hops_counters), path,
                          f"[{style}]{r.verdict}[/{style}]")
            con.print(t)
            con.print(cover, highlight=False)
            con.print(f"GPU pairs sent: {sample_text(spec, fl)}", highlight=False)
            n_spr = sum(1 for r in results if getattr(r, "sprayed", None))
            if n_spr:
                con.print(f"sprayed: {n_spr} flow{'' if n_spr == 1 else 's'} split per packet "
                          "(railab lb); below, each counts once on every uplink and spine it "
                          "crossed", highlight=False)
            if sp.per_spine:
                con.print(f"spines: {counts_text(sp.per_spine)}  "
                          + sp.spread_text(sp.per_spine, "spines"), highlight=False)
                con.print(f"uplinks: {counts_text(sp.per_link)}  "
                          + sp.spread_text(sp.per_link, "uplinks", "imbalance"), highlight=False)
            for w in warnings:  # traffic rerouted around a fault: say so, exit code unchanged
                con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
            print_root_causes(con, causes)  # one line per root cause, not one per failed flow
            con.print(f"{len(results) - len(bad)}/{len(results)} flows as expected"
                      + (f"; {len(causes)} root cause{'' if len(causes) == 1 else 's'}"
                         if causes else ""))
        if bad:
            raise typer.Exit(EXIT_FAILED)

    @app.command()
    def traceroute(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        src: str = typer.Argument(..., help="source GPU, e.g. srv1:gpu0 (or srv1:nic1)"),
        dst: str = typer.Argument(..., help="destination GPU, e.g. srv3:gpu0"),
        pxn: bool = typer.Option(False, "--pxn",
                                 help="NCCL PXN: cross NVLink to the destination's rail first"),
        qp: int = typer.Option(0, help="flow index (changes the UDP source port, so the ECMP path)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output (hops as JSON)"),
    ) -> None:
        """RoCE traceroute: TTL-limited copies of the flow's packets, leaf -> spine -> leaf."""
        from railab.testbed.labref import resolve
        from railab.traffic.engine import Engine, sigint_event
        from railab.traffic.patterns import Flow, parse_endpoint, route
        from railab.traffic.traceroute import format_path, trace

        try:
            ref = resolve(lab)
            spec, netns_of = ref.spec(), ref.netns_of
            flow = route(spec, Flow(parse_endpoint(spec, src), parse_endpoint(spec, dst), qp=qp,
                                    pxn=pxn))
            with sigint_event() as stop:
                with Engine(spec, netns_of, stop=stop) as eng:
                    hops = trace(eng, flow)
                    why = black_hole_text(spec, eng, flow, hops)
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            _interrupted()
        if as_json:
            print(json.dumps({"flow": flow.name, "src_nic": flow.src_nic, "dst_nic": flow.dst_nic,
                              "nvlink": flow.nvlink, "hops": [h.__dict__ for h in hops],
                              "black_hole": why}, indent=2))
        else:
            con = _console()
            t = Table(title=f"{flow.name} (nic{flow.src_nic} -> nic{flow.dst_nic}"
                      f"{', NVLink first' if flow.nvlink else ''})")
            for col in ("ttl", "address", "node", "rtt ms", "reply"):
                t.add_column(col)
            for h in hops:
                t.add_row(str(h.ttl), h.address or "*", h.node or "?",
                          "-" if h.rtt_ms is None else f"{h.rtt_ms:.3f}", h.kind)
            con.print(t)
            con.print(format_path(hops))
            if why:
                con.print(f"[red]{why}[/red]", highlight=False)
        if not hops or hops[-1].kind != "destination":
            raise typer.Exit(EXIT_FAILED)
