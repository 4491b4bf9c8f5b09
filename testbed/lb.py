"""Load-balancing modes on a lab's leaf switches: the seed's answers to ECMP collisions.

The design guide's load-balancing chapter (/work/shared/seed/) says per-flow ECMP fails AI
traffic (few, long, low-entropy flows) and offers packet spraying, flowlet ARS, static PBR
paths and WCMP. This module builds the per-packet and static ones from real kernel pieces in
each leaf's namespace, over the leaf's uplinks (``lab.json`` ``leaf-spine`` links, port order):

* ``ecmp``: the kernel's per-flow multipath hash over the routes FRR (zebra) installs: the
  default; applying it removes everything the other modes added.
* ``spray-rr`` / ``spray-random``: per packet. An nftables table ``railab_lb`` marks every IPv4
  packet arriving on a server port with ``numgen inc|random mod N`` (N = uplinks) offset
  :data:`MARK_BASE`; one ``ip rule fwmark`` per member selects a policy table holding copies of
  the fabric's multipath routes restricted to that member's next hop.
* ``flowlet``: ARS-like flowlets. A dynamic nft map keyed by (source, destination, UDP source
  port) with a timeout = the flowlet gap (:data:`FLOWLET_GAP_US`, time-scaled) holds each
  flow's member mark; every packet refreshes it, so a flow keeps its member while packets keep
  coming; after a gap longer than the timeout the entry has expired and the next packet opens
  a new flowlet on the member ``numgen inc`` gives (round robin over new flowlets: the switch
  agent's "most idle member" rating is not wired yet).
* ``pbr``: static paths: ``ip rule iif <server port>`` binds each server NIC's traffic to one
  member table, planned so that the NICs of one leaf never share an uplink while there are at
  least as many uplinks as NICs (1:1, as the seed describes); with more NICs than uplinks they
  share round robin (said by :func:`plan`).

Member tables are numbered from :data:`TABLE_BASE` (zebra manages only the main table, 254,
so it never rewrites them); rules use priorities from :data:`RULE_PRIO`. A destination a member
table lacks (a server on the same leaf) falls through to the main table. ``wcmp`` needs
the switch agent (railab.testbed.pfc) to rate members and is not built yet: :func:`check_mode`
refuses it with a usage error.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field

from railab.errors import UsageError
from railab.testbed.namespaces import exec_argv

#: every mode :func:`apply` knows, in the order ``lb compare`` runs them
MODES = ("ecmp", "spray-random", "spray-rr", "flowlet", "pbr", "wcmp")
#: the modes built so far (wcmp needs the agent's member rating: not yet)
BUILT = ("ecmp", "spray-random", "spray-rr", "flowlet", "pbr")
#: the flowlet gap in fabric microseconds. The seed's ARS text gives no figure; 50 us is the
#: low end of the gaps the flowlet literature uses (LetFlow, Vanini et al., NSDI 2017: 50-500 us;
#: CONGA, Alizadeh et al., SIGCOMM 2014: 500 us) and the figure in /work/shared/NOTES.md.
#: Scaled to lab time like the DCQCN constants (qos.capacity.lab_seconds: 0.5 s at 10000).
FLOWLET_GAP_US = 50.0
#: the gap used on a lab without ``lab.capacity`` (no time scale): 50 us of wall time is below
#: nft's timeout resolution, so it is set at the 40 Mb/s default's scale
DEFAULT_TIME_SCALE = 10000.0
NFT_TABLE = "railab_lb"
TABLE_BASE = 2000
MARK_BASE = 0x2000
RULE_PRIO = 2000


@dataclass
class LeafPlan:
    """One leaf's mechanism: ``uplinks`` (its uplink ports, port order; member i uses table
    ``TABLE_BASE + i`` and mark ``MARK_BASE + i``), ``servers`` (its server-facing ports) and,
    for ``pbr``, ``binding`` server port -> member index."""

    leaf: str
    uplinks: list[str]
    servers: list[str]
    binding: dict[str, int] = field(default_factory=dict)


def check_mode(mode: str) -> str:
    """``mode`` when it is a mode that can be applied; UsageError (exit 2) otherwise."""
    if mode not in MODES:
        raise UsageError(f"unknown load-balancing mode {mode!r}: use one of {', '.join(MODES)}")
    if mode not in BUILT:
        raise UsageError(f"load-balancing mode {mode!r} is not built yet (needs the switch agent's "
                         f"member rating): use one of {', '.join(BUILT)}")
    return mode


def plan(spec, mode: str) -> list[LeafPlan]:
    """Per leaf with uplinks, what ``mode`` installs (see :class:`LeafPlan`), from ``lab.json``.

    UsageError when ``mode`` is unknown or not built (:func:`check_mode`) or when the lab has no
    leaf with uplinks (a rail-only lab: there is nothing to balance)."""
    check_mode(mode)
    ups: dict[str, list[str]] = {}
    srv: dict[str, list[str]] = {}
    for ln in spec.links:
        if ln.role == "leaf-spine":
            ups.setdefault(ln.a.node, []).append(ln.a.interface)
        elif ln.role == "server-leaf":
            srv.setdefault(ln.b.node, []).append(ln.b.interface)
    if not ups and mode != "ecmp":
        raise UsageError(f"load-balancing mode {mode!r} needs leaf uplinks and this lab has none "
                         "(rail-only): only ecmp applies")
    out = []
    for leaf in sorted(ups):
        lp = LeafPlan(leaf, ups[leaf], sorted(srv.get(leaf, [])))
        if mode == "pbr":
            lp.binding = {p: i % len(lp.uplinks) for i, p in enumerate(lp.servers)}
        out.append(lp)
    return out


def flowlet_gap_s(spec) -> float:
    """The flowlet gap in lab seconds: :data:`FLOWLET_GAP_US` times the lab's time scale
    (``qos.capacity``), or :data:`DEFAULT_TIME_SCALE` when the lab has no capacity model."""
    cap = getattr(getattr(spec, "qos", None), "capacity", None)
    if cap is not None and getattr(cap, "enabled", False):
        return cap.lab_seconds(FLOWLET_GAP_US)
    return FLOWLET_GAP_US * 1e-6 * DEFAULT_TIME_SCALE


def nft_script(lp: LeafPlan, mode: str, gap_s: float = 0.5) -> str:
    """The ``nft -f`` script of a spray or flowlet mode on one leaf (empty for other modes):
    mark each IPv4 packet from a server port with its member. ``gap_s``: the flowlet gap, lab s."""
    if not (mode.startswith("spray") or mode == "flowlet") or not lp.servers:
        return ""
    ports = ", ".join(f'"{p}"' for p in lp.servers)
    n = len(lp.uplinks)
    if mode == "flowlet":
        ms = max(1, round(gap_s * 1000))
        key = "ip saddr . ip daddr . udp sport"
        return (f"table ip {NFT_TABLE} {{\n"
                f"  map flowlets {{\n    type ipv4_addr . ipv4_addr . inet_service : mark\n"
                f"    flags dynamic, timeout\n    timeout {ms}ms\n  }}\n"
                f"  chain pre {{\n    type filter hook prerouting priority mangle; policy accept;\n"
                f"    iifname {{ {ports} }} meta l4proto udp meta mark set {key} map @flowlets\n"
                f"    iifname {{ {ports} }} meta l4proto udp meta mark 0 "
                f"meta mark set numgen inc mod {n} offset {MARK_BASE:#x}\n"
                f"    iifname {{ {ports} }} meta l4proto udp update @flowlets "
                f"{{ {key} timeout {ms}ms : meta mark }}\n  }}\n}}\n")
    gen = "inc" if mode == "spray-rr" else "random"
    return (f"table ip {NFT_TABLE} {{\n"
            f"  chain pre {{\n    type filter hook prerouting priority mangle; policy accept;\n"
            f"    iifname {{ {ports} }} meta mark set numgen {gen} mod {len(lp.uplinks)} "
            f"offset {MARK_BASE:#x}\n  }}\n}}\n")


def member_routes(routes: list[dict], ifindex_port: list[str], uplinks: list[str]) -> list[str]:
    """``ip route add`` lines (for ``ip -batch``) filling the member tables from the main
    table's routes (``ip -j route show table main`` objects): each multipath route whose next hops
    include uplink i is copied into table ``TABLE_BASE + i`` with that next hop only."""
    del ifindex_port
    lines = []
    for r in routes:
        hops = r.get("nexthops") or ([r] if r.get("dev") in uplinks and r.get("dst") != "default" else [])
        for h in hops:
            dev = h.get("dev")
            if dev not in uplinks:
                continue
            gw = h.get("gateway")
            via = h.get("via") or {}
            if gw:
                nh = f"via {gw}"
            elif via.get("host"):
                nh = f"via {'inet6' if via.get('family') == 'inet6' else 'inet'} {via['host']}"
            else:
                continue
            dst = r.get("dst", "default")
            lines.append(f"route replace {dst} {nh} dev {dev} onlink table {TABLE_BASE + uplinks.index(dev)}")
    return lines


def _run(ns: str, argv: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(exec_argv(ns, argv), input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{ns}: {' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


def remove(ns: str, lp: LeafPlan) -> None:
    """Remove whatever any mode installed on one leaf namespace (idempotent): the nft table,
    every rule at :data:`RULE_PRIO`, the member tables."""
    subprocess.run(exec_argv(ns, ["nft", "delete", "table", "ip", NFT_TABLE]), capture_output=True)
    rules = json.loads(_run(ns, ["ip", "-j", "rule", "show"]) or "[]")
    for r in rules:
        if r.get("priority") == RULE_PRIO:
            subprocess.run(exec_argv(ns, ["ip", "rule", "del", "priority", str(RULE_PRIO)]),
                           capture_output=True)
    for i in range(len(lp.uplinks)):
        subprocess.run(exec_argv(ns, ["ip", "route", "flush", "table", str(TABLE_BASE + i)]),
                       capture_output=True)


def apply_leaf(ns: str, lp: LeafPlan, mode: str, gap_s: float = 0.5) -> None:
    """Install ``mode`` on one leaf namespace after removing any previous mode. RuntimeError
    when a kernel command fails (the caller removes what was half-installed)."""
    remove(ns, lp)
    if mode == "ecmp":
        return
    routes = json.loads(_run(ns, ["ip", "-j", "route", "show", "table", "main"]) or "[]")
    lines = member_routes(routes, [], lp.uplinks)
    if mode.startswith("spray") or mode == "flowlet":
        lines += [f"rule add priority {RULE_PRIO} fwmark {MARK_BASE + i:#x} lookup {TABLE_BASE + i}"
                  for i in range(len(lp.uplinks))]
    elif mode == "pbr":
        lines += [f"rule add priority {RULE_PRIO} iif {p} lookup {TABLE_BASE + i}"
                  for p, i in lp.binding.items()]
    if lines:
        _run(ns, ["ip", "-batch", "-"], "\n".join(lines) + "\n")
    script = nft_script(lp, mode, gap_s)
    if script:
        _run(ns, ["nft", "-f", "-"], script)


def apply(spec, netns_of, mode: str) -> list[LeafPlan]:
    """Apply ``mode`` on every leaf of a running lab (``netns_of``: node -> namespace).
    All-or-nothing: on any failure every leaf is put back to ``ecmp`` and the error re-raised.
    Returns the plans applied."""
    plans = plan(spec, mode)
    try:
        for lp in plans:
            apply_leaf(netns_of(lp.leaf), lp, mode, flowlet_gap_s(spec))
    except Exception:
        for lp in plans:
            remove(netns_of(lp.leaf), lp)
        raise
    return plans
