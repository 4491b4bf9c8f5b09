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
  the fabric's multipath routes restricted to that member's next hop. With ``spines`` (and
  several links per leaf-spine pair) the spines spray too: every packet from a leaf is marked
  ``mod`` the links per pair and member table i holds each multipath route's i-th next hop.
* ``flowlet``: ARS flowlets. A dynamic nft map keyed by (source, destination, UDP source
  port) with a timeout = the flowlet gap (:data:`FLOWLET_GAP_US`, time-scaled) holds each
  flow's member mark; every packet refreshes it, so a flow keeps its member while packets keep
  coming; after a gap longer than the timeout the entry has expired and the next packet opens
  a new flowlet on the member of the next slot of the leaf's ``slots`` map (``numgen inc mod
  SLOTS``), which the load-balancing agent (:mod:`railab.testbed.lbagent`) refills every cycle
  from the uplinks' measured utilization and queue: idle members get the slots.
* ``pbr``: static paths: ``ip rule iif <server port>`` binds each server NIC's traffic to one
  member table, planned so that the NICs of one leaf never share an uplink while there are at
  least as many uplinks as NICs (1:1, as the seed describes); with more NICs than uplinks they
  share round robin (said by :func:`plan`).

* ``wcmp``: dynamic weighted ECMP. One kernel next-hop object per uplink
  (:data:`NH_BASE` + i, ``via 169.254.0.1 dev <uplink> onlink`` as zebra's RFC 5549 routes),
  one group :data:`GROUP_ID` over them, table :data:`WCMP_TABLE` holding the main table's
  multipath routes over the uplinks pointed at the group, and ``ip rule iif <server port>
  lookup WCMP_TABLE``; the agent rewrites the group's weights from the members' measured load.

Member tables are numbered from :data:`TABLE_BASE` (zebra manages only the main table, 254,
so it never rewrites them); rules use priorities from :data:`RULE_PRIO`. A destination a member
table lacks (a server on the same leaf) falls through to the main table. ``flowlet`` and
``wcmp`` need the lab's capacity model (``lab.capacity``: the agent rates members by their
queues); on a lab without it :func:`plan` refuses them with a usage error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed import lbagent
from railab.testbed import state as st
from railab.testbed.namespaces import entered, exec_argv
from railab.testbed.rtnl import Rtnl, link_status

#: every mode :func:`apply` knows, in the order ``lb compare`` runs them
MODES = ("ecmp", "spray-random", "spray-rr", "flowlet", "pbr", "wcmp")
#: the modes the load-balancing agent (railab.testbed.lbagent) steers: they need lab.capacity
AGENT_MODES = ("flowlet", "wcmp")
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
#: wcmp: next-hop object ids (NH_BASE + member), the group's id and the policy table
NH_BASE = 20000
GROUP_ID = 21000
WCMP_TABLE = 2100
#: seconds to wait for the agent to report ready
AGENT_START_S = 10.0


@dataclass
class LeafPlan:
    """One leaf's mechanism: ``uplinks`` (its uplink ports, port order; member i uses table
    ``TABLE_BASE + i`` and mark ``MARK_BASE + i``), ``servers`` (its server-facing ports) and,
    for ``pbr``, ``binding`` server port -> member index."""

    leaf: str
    uplinks: list[str]
    servers: list[str]
    binding: dict[str, int] = field(default_factory=dict)
    #: a spine's plan (spray modes): ``servers`` are its leaf-facing ports (where packets are
    #: marked), ``ways`` the parallel links per leaf-spine pair (members by next-hop index)
    spine: bool = False
    ways: int = 0

    @property
    def n(self) -> int:
        """How many members (mark values, member tables) this switch uses."""
        return self.ways or len(self.uplinks)


def check_mode(mode: str) -> str:
    """``mode`` when it is a mode that can be applied; UsageError (exit 2) otherwise."""
    if mode not in MODES:
        raise UsageError(f"unknown load-balancing mode {mode!r}: use one of {', '.join(MODES)}")
    return mode


def plan(spec, mode: str, *, spines: bool = False) -> list[LeafPlan]:
    """Per leaf with uplinks, what ``mode`` installs (see :class:`LeafPlan`), from ``lab.json``.

    With ``spines`` (spray modes only, a lab with several links per leaf-spine pair) the spines
    get a plan too (``spine=True``): they spray over their parallel links down to a leaf
    (member i = the i-th next hop of each multipath route, :func:`indexed_member_routes`).
    UsageError for ``spines`` with another mode or on a lab with one link per pair.

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
    cap = getattr(getattr(spec, "qos", None), "capacity", None)
    if mode in AGENT_MODES and not (cap is not None and getattr(cap, "enabled", False)):
        raise UsageError(f"load-balancing mode {mode!r} needs lab.capacity (its agent rates the "
                         "uplinks by their queues): use an intent with lab.capacity, e.g. "
                         "mini-lossless")
    out = []
    for leaf in sorted(ups):
        lp = LeafPlan(leaf, ups[leaf], sorted(srv.get(leaf, [])))
        if mode == "pbr":
            lp.binding = {p: i % len(lp.uplinks) for i, p in enumerate(lp.servers)}
        out.append(lp)
    ways = getattr(spec, "links_per_leaf_spine_pair", 1)
    if spines and not mode.startswith("spray"):
        raise UsageError(f"--spines sprays the spines' parallel links: it goes with spray-rr or "
                         f"spray-random, not {mode}")
    if spines and ways < 2:
        raise UsageError("--spines: this lab has one link per leaf-spine pair, nothing for a "
                         "spine to spray over")
    if spines:
        # spines spray too, over their parallel links down to each leaf
        downs: dict[str, list[str]] = {}
        for ln in spec.links:
            if ln.role == "leaf-spine":
                downs.setdefault(ln.b.node, []).append(ln.b.interface)
        out += [LeafPlan(sp, [], downs[sp], spine=True, ways=ways) for sp in sorted(downs)]
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
    n = lp.n
    if mode == "flowlet":
        ms = max(1, round(gap_s * 1000))
        key = "ip saddr . ip daddr . udp sport"
        slots = ", ".join(f"{k} : {MARK_BASE + m:#x}"
                          for k, m in enumerate(lbagent.slot_table([1.0] * n)))
        return (f"table ip {NFT_TABLE} {{\n"
                f"  map flowlets {{\n    type ipv4_addr . ipv4_addr . inet_service : mark\n"
                f"    flags dynamic, timeout\n    timeout {ms}ms\n  }}\n"
                f"  map slots {{\n    typeof numgen inc mod {lbagent.SLOTS} : meta mark\n"
                f"    elements = {{ {slots} }}\n  }}\n"
                f"  chain pre {{\n    type filter hook prerouting priority mangle; policy accept;\n"
                f"    iifname {{ {ports} }} meta l4proto udp meta mark set {key} map @flowlets\n"
                f"    iifname {{ {ports} }} meta l4proto udp meta mark 0 "
                f"meta mark set numgen inc mod {lbagent.SLOTS} map @slots\n"
                f"    iifname {{ {ports} }} meta l4proto udp update @flowlets "
                f"{{ {key} timeout {ms}ms : meta mark }}\n  }}\n}}\n")
    gen = "inc" if mode == "spray-rr" else "random"
    return (f"table ip {NFT_TABLE} {{\n"
            f"  chain pre {{\n    type filter hook prerouting priority mangle; policy accept;\n"
            f"    iifname {{ {ports} }} meta mark set numgen {gen} mod {n} "
            f"offset {MARK_BASE:#x}\n  }}\n}}\n")


def member_routes(routes: list[dict], uplinks: list[str]) -> list[str]:
    """``ip route add`` lines (for ``ip -batch``) filling the member tables from the main
    table's routes (``ip -j route show table main`` objects): each multipath route whose next hops
    include uplink i is copied into table ``TABLE_BASE + i`` with that next hop only."""
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


def indexed_member_routes(routes: list[dict], ways: int) -> list[str]:
    """A spine's member tables: for each multipath route (``ip -j route`` objects), its next
    hops in port order, the i-th (mod their count) into table ``TABLE_BASE + i``, for
    ``i < ways``. Single-path routes are left to the main table (a lookup miss falls through)."""
    def key(h: dict) -> tuple:
        d = h.get("dev", "")
        head = d.rstrip("0123456789")
        return (head, int(d[len(head):] or 0))
    lines = []
    for r in routes:
        hops = sorted(r.get("nexthops") or [], key=key)
        if len(hops) < 2:
            continue
        for i in range(ways):
            h = hops[i % len(hops)]
            gw = h.get("gateway")
            if not gw:
                continue
            lines.append(f"route replace {r.get('dst', 'default')} via {gw} dev {h['dev']} onlink "
                         f"table {TABLE_BASE + i}")
    return lines


def _run(ns: str, argv: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(exec_argv(ns, argv), input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{ns}: {' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


@contextmanager
def _rtnl(ns: str) -> Iterator[Rtnl]:
    """A raw rtnetlink socket in namespace ``ns`` for the block (railab.testbed.rtnl)."""
    with entered(ns):
        r = Rtnl()
    try:
        yield r
    finally:
        r.close()


def up_ports(ns: str) -> set[str]:
    """The interfaces of namespace ``ns`` that are up by the one link-up rule
    (:func:`railab.testbed.rtnl.link_status`: admin up and carrier), one RTM_GETLINK dump."""
    with _rtnl(ns) as r:
        return {n for n, (flags, oper) in r.link_flags().items() if link_status(flags, oper) == "up"}


def tx_bytes(ns: str, ports: list[str]) -> dict[str, int]:
    """TX byte counters of ``ports`` in namespace ``ns`` (one RTM_GETLINK and one RTM_GETSTATS
    dump)."""
    with _rtnl(ns) as r:
        names = {i: n for i, (n, _mac) in r.links().items()}
        return {names[i]: v[3] for i, v in r.stats().items() if names.get(i) in ports}


def remove(ns: str, lp: LeafPlan) -> None:
    """Remove whatever any mode installed on one leaf namespace (idempotent): the nft table,
    every rule at :data:`RULE_PRIO`, the member tables, the wcmp table, group and next hops
    (one ``nft`` and one ``ip -batch``)."""
    subprocess.run(exec_argv(ns, ["nft", "delete", "table", "ip", NFT_TABLE]), capture_output=True)
    with _rtnl(ns) as r:
        ours = sum(1 for rule in r.rules() if rule.priority == RULE_PRIO)
    lines = [f"rule del priority {RULE_PRIO}"] * ours
    lines += [f"route flush table {TABLE_BASE + i}" for i in range(lp.n)]
    lines += [f"route flush table {WCMP_TABLE}", f"nexthop del id {GROUP_ID}"]
    lines += [f"nexthop del id {NH_BASE + i}" for i in range(len(lp.uplinks))]
    subprocess.run(exec_argv(ns, ["ip", "-force", "-batch", "-"]), input="\n".join(lines) + "\n",
                   capture_output=True, text=True)


def wcmp_lines(routes: list[dict], uplinks: list[str], servers: list[str],
               up: list[str] | None = None) -> list[str]:
    """``ip -batch`` lines of the ``wcmp`` mechanism on one leaf: a next-hop object per uplink
    that is up (``NH_BASE + i``; ``up`` None: all), the group ``GROUP_ID`` over them (equal
    weights until the agent's first cycle; the agent adds an uplink that comes up later),
    table ``WCMP_TABLE`` with every main-table route over the uplinks pointed at the group, and
    one ``iif`` rule per server port. Empty when no uplink is up."""
    live = [(i, u) for i, u in enumerate(uplinks) if up is None or u in up]
    if not live:
        return []
    lines = [f"nexthop add id {NH_BASE + i} via 169.254.0.1 dev {u} onlink" for i, u in live]
    lines.append(f"nexthop add id {GROUP_ID} group "
                 + "/".join(f"{NH_BASE + i},1" for i, _ in live))
    for r in routes:
        hops = r.get("nexthops") or [r]
        if r.get("dst", "default") != "default" and any(h.get("dev") in uplinks for h in hops):
            lines.append(f"route replace {r['dst']} nhid {GROUP_ID} table {WCMP_TABLE}")
    lines += [f"rule add priority {RULE_PRIO} iif {p} lookup {WCMP_TABLE}" for p in servers]
    return lines


def apply_leaf(ns: str, lp: LeafPlan, mode: str, gap_s: float = 0.5) -> None:
    """Install ``mode`` on one leaf namespace after removing any previous mode. RuntimeError
    when a kernel command fails (the caller removes what was half-installed)."""
    remove(ns, lp)
    if mode == "ecmp":
        return
    routes = json.loads(_run(ns, ["ip", "-j", "route", "show", "table", "main"]) or "[]")
    if mode == "wcmp":
        lines = wcmp_lines(routes, lp.uplinks, lp.servers, sorted(up_ports(ns)))
        if not lines:
            return  # no uplink up (a powered-off leaf): it stays on ECMP, the others get WCMP
    elif lp.spine:
        lines = indexed_member_routes(routes, lp.ways)
    else:
        lines = member_routes(routes, lp.uplinks)
    if mode.startswith("spray") or mode == "flowlet":
        lines += [f"rule add priority {RULE_PRIO} fwmark {MARK_BASE + i:#x} lookup {TABLE_BASE + i}"
                  for i in range(lp.n)]
    elif mode == "pbr":
        lines += [f"rule add priority {RULE_PRIO} iif {p} lookup {TABLE_BASE + i}"
                  for p, i in lp.binding.items()]
    if lines:
        _run(ns, ["ip", "-batch", "-"], "\n".join(lines) + "\n")
    script = nft_script(lp, mode, gap_s)
    if script:
        _run(ns, ["nft", "-f", "-"], script)


def stale(spec, netns_of, mode: str, *, spines: bool = False) -> list[str]:
    """Switches whose ``mode`` tables no longer match their routes, in words (``"g1-leaf1:
    member table 2000 has 0 of 7 routes"``): the spray, flowlet and pbr member tables are
    copied from the main table when the mode is applied, so a route change after it (a fault,
    and its heal) leaves them short until the mode is applied again. Empty for ecmp and wcmp
    (the agent follows the links) and when every table is complete."""
    if mode in ("ecmp", "wcmp"):
        return []
    out = []
    for lp in plan(spec, mode, spines=spines):
        ns = netns_of(lp.leaf)
        try:
            routes = json.loads(_run(ns, ["ip", "-j", "route", "show", "table", "main"]) or "[]")
        except RuntimeError:
            continue
        want = (indexed_member_routes(routes, lp.ways) if lp.spine
                else member_routes(routes, lp.uplinks))
        need: dict[int, int] = {}
        for line in want:
            t = int(line.rsplit(" ", 1)[1])
            need[t] = need.get(t, 0) + 1
        have = dict.fromkeys(range(TABLE_BASE, TABLE_BASE + lp.n), 0)
        with _rtnl(ns) as r:
            for row in r.routes(None):  # one dump of every table
                if row.table in have:
                    have[row.table] += 1
        short = [t for t in sorted(have) if have[t] < need.get(t, 0)]
        if short:
            t = short[0]
            out.append(f"{lp.leaf}: member table {t} has {have[t]} of {need[t]} routes")
    return out


# ---- the load-balancing agent (flowlet, wcmp) -------------------------------------------------
def agent_plan(spec, netns_of, plans: list[LeafPlan], mode: str) -> lbagent.LbAgentPlan:
    """The :class:`railab.testbed.lbagent.LbAgentPlan` of ``mode`` over ``plans``: the cycle is
    :data:`railab.testbed.lbagent.CYCLE_US` of fabric time in lab seconds, the port rate and
    ECN Kmin the lab's."""
    cap = spec.qos.capacity
    return lbagent.LbAgentPlan(
        lab=spec.name, mode=mode, nft_table=NFT_TABLE, cycle_s=cap.lab_seconds(lbagent.CYCLE_US),
        port_rate_bps=cap.port_rate_mbps * 1e6, kmin_bytes=spec.qos.ecn.kmin_bytes,
        leaves=[lbagent.LeafAgent(node=lp.leaf, ns=netns_of(lp.leaf), uplinks=lp.uplinks,
                                  marks=[MARK_BASE + i for i in range(len(lp.uplinks))],
                                  nh_ids=[NH_BASE + i for i in range(len(lp.uplinks))],
                                  group_id=GROUP_ID) for lp in plans if not lp.spine])


def agent_state(run_dir: str | Path) -> dict | None:
    """The agent's state file (:mod:`railab.testbed.lbagent`) with ``running`` (its PID is
    alive and is the agent), or None when there is none."""
    try:
        d = json.loads((Path(run_dir) / lbagent.STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    try:
        cmd = Path(f"/proc/{int(d.get('pid', 0))}/cmdline").read_bytes()
    except (OSError, ValueError):
        cmd = b""
    d["running"] = b"railab.testbed.lbagent" in cmd and not d.get("final")
    return d


def stop_agent(run_dir: str | Path) -> None:
    """Stop the lab's load-balancing agent if one runs (SIGTERM, then SIGKILL after 3 s) and
    remove its files. Idempotent."""
    d = Path(run_dir)
    try:
        pid = int((d / "lb-agent.pid").read_text())
    except (OSError, ValueError):
        pid = None
    if pid is not None:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            cmd = b""
        if b"railab.testbed.lbagent" in cmd:
            os.kill(pid, signal.SIGTERM)
            end = time.monotonic() + 3
            while time.monotonic() < end and Path(f"/proc/{pid}").exists():
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        break
                except ChildProcessError:
                    pass
                time.sleep(0.01)
            if Path(f"/proc/{pid}").exists():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    _kill_orphans(d)
    for f in ("lb-agent.pid", "lb-plan.json", lbagent.STATE_FILE):
        try:
            (d / f).unlink()
        except FileNotFoundError:
            pass


def _kill_orphans(run_dir: Path) -> None:
    """SIGKILL any load-balancing agent still naming ``run_dir`` (one whose PID file was
    overwritten, e.g. by a concurrent ``railab lb`` before the lock existed)."""
    needle = f"{run_dir}/".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"railab.testbed.lbagent" in cmd and needle in cmd:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_agent(run_dir: str | Path, plan: lbagent.LbAgentPlan) -> int:
    """Start the agent on ``plan`` (a process of its own, its arguments naming ``run_dir`` so
    ``railab down`` kills it) and wait until it reports ready; returns its PID. RuntimeError
    (with its log) when it does not start within :data:`AGENT_START_S`."""
    d = Path(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "lb-plan.json").write_text(json.dumps(plan.to_json()))
    state = d / lbagent.STATE_FILE
    with open(d / "lb-agent.log", "w") as log:
        p = subprocess.Popen([sys.executable, "-m", "railab.testbed.lbagent",
                              "--plan", str(d / "lb-plan.json"), "--state", str(state)],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
    (d / "lb-agent.pid").write_text(str(p.pid))
    end = time.monotonic() + AGENT_START_S
    while time.monotonic() < end:
        if state.exists():
            return p.pid
        if p.poll() is not None:
            break
        time.sleep(0.02)
    stop_agent(d)
    raise RuntimeError(f"the load-balancing agent did not start: {(d / 'lb-agent.log').read_text()[-500:]}")


def lab_lock(run_dir: str | Path, purpose: str = "railab lb") -> AbstractContextManager[None]:
    """The lab's load-balancing lock (``lb.lock`` in its run directory) for the block: one
    ``railab lb`` or ``railab lb compare`` at a time per lab (railab.testbed.state.holder_lock).
    Re-entrant within this process (a comparison applies modes under its own lock). When another
    ``railab lb LAB MODE`` holds it this waits; when a comparison holds it (for minutes) it
    raises UsageError naming it."""
    def busy(holder: str) -> None:
        if "compare" in holder:
            raise UsageError(f"{holder} is running on this lab: wait for it to finish (it "
                             "puts the lab's mode back) or stop it with Ctrl-C")

    return st.holder_lock(Path(run_dir) / "lb.lock", purpose, busy)


def _every_switch(spec) -> list[LeafPlan]:
    """A removal plan for every switch any mode may touch (leaves, and spines when they can
    spray)."""
    ways = getattr(spec, "links_per_leaf_spine_pair", 1)
    return plan(spec, "spray-rr", spines=ways >= 2) if plan(spec, "ecmp") else []


def apply(spec, netns_of, mode: str, run_dir: str | Path | None = None, *,
          spines: bool = False, on_applied=None) -> list[LeafPlan]:
    """Apply ``mode`` on every leaf of a running lab (``netns_of``: node -> namespace), and
    with ``spines`` (spray modes) on the spines too; every other switch is put back to ECMP.
    All-or-nothing: on any failure every switch is put back to ``ecmp`` and the error re-raised.
    ``run_dir`` (the lab's ``/run/railab/<lab>``) holds the load-balancing agent of ``flowlet``
    and ``wcmp``: any agent running there is stopped first, and one is started for those modes
    (UsageError without ``run_dir``); ``on_applied()`` runs after success while the lab's lb
    lock is still held (record the mode there, so concurrent ``railab lb`` calls record the one
    applied last). Returns the plans applied."""
    plans = plan(spec, mode, spines=spines)
    if mode in AGENT_MODES and run_dir is None:
        raise UsageError(f"load-balancing mode {mode!r} runs an agent: give the lab's run directory")
    if run_dir is None:
        return _apply(spec, netns_of, mode, plans, None)
    with lab_lock(run_dir):  # one `railab lb` at a time per lab: no orphan agent
        stop_agent(run_dir)
        out = _apply(spec, netns_of, mode, plans, run_dir)
        if on_applied is not None:
            on_applied()
        return out


def _apply(spec, netns_of, mode: str, plans: list[LeafPlan], run_dir) -> list[LeafPlan]:
    mine = {lp.leaf for lp in plans}
    rest = [lp for lp in _every_switch(spec) if lp.leaf not in mine]
    try:
        for lp in rest:
            remove(netns_of(lp.leaf), lp)
        for lp in plans:
            apply_leaf(netns_of(lp.leaf), lp, mode, flowlet_gap_s(spec))
        if mode in AGENT_MODES:
            start_agent(run_dir, agent_plan(spec, netns_of, plans, mode))
    except Exception as exc:
        if run_dir is not None:
            stop_agent(run_dir)
        for lp in plans + rest:
            remove(netns_of(lp.leaf), lp)
        if isinstance(exc, RuntimeError):
            raise RailabError(f"load balancing {mode} could not be applied ({exc}); every switch "
                              "is back on ecmp") from exc
        raise
    return plans


# ---- per-flow receive steering (RPS) for reorder measurements ---------------------------------
def set_rps(namespaces: list[str], mask: int) -> None:
    """Write ``mask`` (CPU bit mask; 0 = off) to every interface's ``rps_cpus`` in each
    namespace (``ip netns exec`` mounts the namespace's sysfs), the namespaces concurrently."""
    script = (f"for f in /sys/class/net/*/queues/rx-*/rps_cpus; do echo {mask:x} > $f; done "
              "2>/dev/null; true")
    # ``ip netns exec`` (not nsenter): it mounts the namespace's own /sys
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", script],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for ns in namespaces]
    for p in procs:
        p.wait()


@contextmanager
def flow_steering(spec, netns_of) -> Iterator[None]:
    """Receive Packet Steering on every port of the lab for the block, off after it.

    Why: a veth hands each packet to the backlog of the CPU that sent it, so when a port's
    queue is served from two CPUs in turn (the sender migrates, a qdisc timer fires on the
    other core), the two CPUs' backlogs can deliver that port's packets out of order: about
    0.1 % of packets on paths that cannot reorder (ECMP, PBR: measured on mini-lossless,
    all-to-all), which a switch port (one FIFO) never does. With RPS on every interface
    (``rps_cpus`` = all CPUs) each flow's packets are processed on the CPU its hash picks at
    every hop, so a port keeps each flow's order and the receivers' out-of-order counts are
    the paths' (spraying, WCMP moves), not the host's. Costs CPU (inter-processor interrupts),
    so it is on only while ``railab lb compare`` measures."""
    nss = [netns_of(n.name) for n in spec.nodes]
    set_rps(nss, (1 << (os.cpu_count() or 1)) - 1)
    try:
        yield
    finally:
        set_rps(nss, 0)
