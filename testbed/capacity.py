"""Port capacity of a netns lab: egress queues, WRED/ECN marking, and their counters.

What ``lab.capacity`` (``LabSpec.qos.capacity``, :class:`railab.topologies.qos.CapacityProfile`)
puts on every link end of a lab (every leaf and spine egress port and every server NIC egress
port; docs/congestion.md):

* **Queues** (tc, built in here): an ``htb`` root ``1:`` on the port, one class ``1:1`` at the
  port's lab rate (:func:`port_rate_bps`), and two leaf classes under it, each with a ``bfifo``
  child qdisc (a tail-drop byte limit, so ``tc -s`` and :func:`port_counters` count backlog
  and drops):

  - ``1:13`` **lossless** (traffic class ``qos.roce_tc`` = 3: RoCEv2 data, DSCP ``qos.roce_dscp``
    = 26, picked by a ``u32`` filter on the IPv4 DSCP), rate 90 % of the port, ceil the port,
    its child a ``tbf`` (the PFC emulation's pause point, :func:`lossless_qdisc`)
    with a limit of ``buffer_bytes`` on a switch (with ``shared_buffer``, a lone hot queue's
    share of the pool, which the switch agent then keeps at the dynamic threshold of the pool's
    free space), :data:`NIC_BUFFER_BYTES` on a server NIC (a NIC's own send queue
    back-pressures its sender instead of dropping);
  - ``1:10`` **control/default** (everything else: BGP, BFD, ND/RA, ARP, CNPs at DSCP 48),
    rate 10 % of the port guaranteed (:data:`CONTROL_SHARE`), ceil the port, and first claim on
    spare bandwidth (htb ``prio 0``), a ``bfifo`` child of ``buffer_bytes``. The PFC emulation
    (:mod:`railab.testbed.pfc`) only ever changes the tbf under ``1:13``: a pause never stops BGP
    or BFD.

* **WRED/ECN** (nftables, switch ports only; NICs do not mark), **on dequeue**: a switch
  port's marks are applied where its packets arrive the instant they leave its queue, on the
  **ingress** hook of the peer interface (:func:`mark_point`; a server NIC's, or the next
  switch's), so the queueing delay is not in DCQCN's loop, as on an ASIC (until 2026-12-04
  railab marked on the port's egress hook, i.e. on enqueue). One ``netdev`` table
  :data:`NFT_TABLE` per namespace that receives from a switch, one chain per such interface. An
  ECN-capable (ECN bits != 00, as WRED's ``ecn_all``) RoCE (DSCP 26) packet is marked CE with
  probability ``p``: a random number below ``p x ECN_SCALE`` (``numgen random``) must be in the
  set ``p_<peer interface>``. The switch agent
  (:mod:`railab.testbed.pfc`, which also runs the PFC emulation) reads the real lossless-queue
  depth of every switch port each cycle (a few ms of lab time, well under a microsecond of
  fabric time) and keeps the set at the WRED probability of that depth
  (:func:`ecn_probability`: 0 under Kmin, linear to Pmax at Kmax, 1 beyond), so marks follow
  the queue as a switch's WRED on the instantaneous depth does. A named nft counter
  ``ce_<peer interface>`` counts the marks (:class:`PortCounters` reports them under the switch
  port whose queue they stand for). Kmin/Kmax/Pmax: ``qos.ecn`` (SONiC's ``WRED_PROFILE|AZURE_LOSSLESS`` by
  default, the same numbers ``config_db.json`` gets). Why not a virtual queue in nft: a
  ``limit rate over`` bucket in byte mode holds one second of the rate on top of its burst (5 MB
  at 40 Mb/s, above Kmax), and in any mode an "over" packet does not count, so once full the
  bucket admits packets as "under" while the real queue stands above Kmax (measured: marks stop).
  Without the agent running (outside a traffic run that opens :func:`pfc_session`) the sets
  are empty and nothing is marked.

Counters (:func:`port_counters`, :class:`CapacitySampler`) come from qdisc statistics over
rtnetlink (:class:`QdiscReader`), the nft counters (``nft -j``) and the PFC emulation's state
file. A traffic run opens :func:`pfc_session` (``--pfc on|off``) to run the switch agent
(:mod:`railab.testbed.pfc`) for its duration.

A link that trained below its planned speed (the ``link-speed`` fault, recorded in the lab's
state) runs both ends at that speed's lab rate: :func:`trained_speeds` reads the faults,
:func:`ports` takes the speeds, :func:`retune` changes the two ends in place (:func:`rate_lines`),
and every later rewrite of the rates (:func:`reset`, :func:`agent_plan`, :func:`reapply`,
:func:`railab.testbed.dilation.retime`) keeps it until the heal.

Everything here lives inside the lab's namespaces: deleting them (``railab down``, a failed or
interrupted ``up``) removes every qdisc, filter and nft table with them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.namespaces import entered, exec_argv, run_batches  # noqa: F401 - run_batches re-exported
from railab.testbed.pfc import (  # noqa: F401 - re-exported: the agent's plain-data side
    CONTROL_SHARE,
    ECN_SCALE,
    NFT_TABLE,
    PAUSED_RATE_BPS,
    PFC_STATE_FILE,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    AgentPlan,
    NicPauseBoard,
    Port,
    QdiscReader,
    QdiscStat,
    Watchdog,
    _burst,
    ecn_set_update,
    ifindexes,
    lossless_qdisc,
    lossless_rate_bps,
    read_storms,
    set_watchdog,
    tbf_line,
    wred_probability,
)
from railab.testbed.signals import Interrupted, received
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import QosProfile

#: htb handles: root qdisc ``1:``, port class ``1:1``, leaf class of traffic class ``t`` is
#: ``1:(0x10 + t)`` (``1:10`` control/default = TC 0, ``1:13`` lossless = TC 3).
ROOT_HANDLE = 0x10000
PORT_CLASS = 0x10001
CLASS_BASE = 0x10
#: a root qdisc's parent handle (TC_H_ROOT, include/uapi/linux/pkt_sched.h)
TC_H_ROOT = 0xFFFFFFFF
#: Lossless-class byte limit of a server NIC's egress queue (its send queue): large, so a paused
#: NIC back-pressures its sender (which reads the backlog) instead of dropping.
NIC_BUFFER_BYTES = 64 * 1048576


def lossless_class(qos: QosProfile) -> int:
    """tc handle (major 1) of the lossless class: ``1:(0x10 + roce_tc)``, i.e. ``1:13``."""
    return ROOT_HANDLE | (CLASS_BASE + qos.roce_tc)


def control_class(qos: QosProfile) -> int:
    """tc handle of the control/default class: ``1:(0x10 + default_tc)``, i.e. ``1:10``."""
    return ROOT_HANDLE | (CLASS_BASE + qos.default_tc)


def _tc_id(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


def port_rate_bps(spec: LabSpec, speed_gbps: float) -> int:
    """Lab rate (bit/s) of a port of production speed ``speed_gbps``: ``port_rate_mbps`` scaled
    by ``speed_gbps / fabric_rate_gbps`` (an 800G uplink runs at twice a 400G NIC's lab rate)."""
    cap = spec.qos.capacity
    return int(round(cap.port_rate_mbps * 1e6 * speed_gbps / cap.fabric_rate_gbps))


#: The fault kind whose link runs below its planned speed (:mod:`railab.testbed.faults`).
LINK_SPEED_FAULT = "link-speed"


def trained_speeds(lab: str) -> dict[tuple[str, str], float]:
    """``{(node, interface): Gb/s}`` of every link end a ``link-speed`` fault holds below its
    planned speed (both ends of each such link: a link runs at the speed both ends negotiated),
    read from the lab's state record (``LabState.faults``, the faults injected and not yet
    healed); ``{}`` when there is none or the lab is not up. Everything that (re)writes the
    ports' rates (:func:`reset`, :func:`agent_plan`, :func:`reapply`, the time dilation's
    restore, :mod:`railab.testbed.dilation`) reads it, so no rate change undoes such a fault
    and none outlives its heal."""
    rec = st.load(lab)
    out: dict[tuple[str, str], float] = {}
    for f in (rec.faults if rec is not None else ()):
        if f.kind == LINK_SPEED_FAULT and f.port and f.peer_node and f.peer_port:
            gbps = float(f.params["gbps"])
            out[(f.node, f.port)] = gbps
            out[(f.peer_node, f.peer_port)] = gbps
    return out


def enabled(spec: LabSpec) -> bool:
    """True when the lab has ``lab.capacity`` on (``qos.capacity.enabled``)."""
    return bool(spec.qos.capacity.enabled)


def ports(spec: LabSpec, speeds: Mapping[tuple[str, str], float] | None = None) -> list[Port]:
    """Every egress port the capacity block shapes: both ends of every link, in link order, at
    the lab rate of the link's planned speed (``links[].speed_gbps``), or of the speed
    ``speeds`` gives the end (``{(node, interface): Gb/s}``, :func:`trained_speeds`)."""
    cap = spec.qos.capacity
    speeds = speeds or {}
    out = []
    for link in spec.links:
        for me, far in ((link.a, link.b), (link.b, link.a)):
            rate = port_rate_bps(spec, speeds.get((me.node, me.interface), link.speed_gbps))
            sw = spec.node(me.node).role != "server"
            out.append(Port(node=me.node, interface=me.interface, peer=far.node,
                            peer_interface=far.interface, switch=sw, rate_bps=rate,
                            lossless_limit=cap.drop_limit_bytes if sw else max(
                                NIC_BUFFER_BYTES, cap.buffer_bytes),
                            control_limit=cap.buffer_bytes, mtu=link.mtu))
    return out


# ---- queues -----------------------------------------------------------------------------------

def tc_batch(p: Port, qos: QosProfile) -> str:
    """The ``tc -batch`` lines that build port ``p``'s queues (module docstring)."""
    dev, rate, b = p.interface, p.rate_bps, _burst(p)
    ctl, ll = control_class(qos), lossless_class(qos)
    ctl_rate = max(int(rate * CONTROL_SHARE), 8000)
    q = p.mtu + 14
    dsfield = qos.roce_dscp << 2
    return (
        f"qdisc add dev {dev} root handle 1: htb default {CLASS_BASE + qos.default_tc:x}\n"
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
        f"burst {b} cburst {b} quantum {q}\n"
        f"class add dev {dev} parent 1:1 classid {_tc_id(ctl)} htb rate {ctl_rate}bit "
        f"ceil {rate}bit burst {b} cburst {b} prio 0 quantum {q}\n"
        f"class add dev {dev} parent 1:1 classid {_tc_id(ll)} htb rate {rate - ctl_rate}bit "
        f"ceil {rate}bit burst {b} cburst {b} prio 1 quantum {q}\n"
        f"qdisc add dev {dev} parent {_tc_id(ctl)} handle {ctl & 0xFFFF:x}: bfifo "
        f"limit {p.control_limit}\n"
        f"qdisc add dev {dev} parent {_tc_id(ll)} handle {ll & 0xFFFF:x}: "
        f"{lossless_qdisc(p)}\n"
        f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dsfield "
        f"{dsfield:#04x} 0xfc flowid {_tc_id(ll)}\n"
    )


def rate_lines(p: Port, qos: QosProfile, *, paused: bool = False) -> str:
    """The ``tc -batch`` lines that move port ``p``'s queues to ``p.rate_bps`` in place: the htb
    classes of :func:`tc_batch` as ``class change`` (queued packets stay), and the lossless tbf
    as the PFC agent writes it at rest (:func:`railab.testbed.pfc.tbf_line`, unpaused; paused
    when ``paused``: a ``pfc-storm`` fault holds it). The root qdisc, the DSCP filter and the
    control queue stay as they are."""
    lines = ["class change " + line[len("class add "):]
             for line in tc_batch(p, qos).splitlines() if line.startswith("class add ")]
    lines.append(tbf_line(p, lossless_class(qos), paused=paused, extra=0).rstrip("\n"))
    return "\n".join(lines) + "\n"


def retune(spec: LabSpec, netns_of: Callable[[str], str], ends: Iterable[tuple[str, str]], *,
           speeds: Mapping[tuple[str, str], float] | None = None) -> list[Port]:
    """Set the rates of link ends ``ends`` (``(node, interface)``) of the running lab to
    ``spec``'s rates (pass the spec of the rate the lab's ports run at now:
    :func:`railab.testbed.dilation.running_spec`) at the speeds ``speeds`` gives them (the
    planned speed for an end it does not name): :func:`rate_lines`, one ``tc -batch`` per node,
    a port a ``pfc-storm`` holds staying paused. The ``link-speed`` fault and its heal. Returns
    the ports set; nothing without ``lab.capacity``; RailabError naming the node when tc
    refuses."""
    if not enabled(spec):
        return []
    want = set(ends)
    storms = read_storms(st.lab_dir(spec.name))
    by_node: dict[str, list[Port]] = {}
    for p in ports(spec, speeds):
        if p.key in want:
            by_node.setdefault(p.node, []).append(p)
    run_batches({n: (exec_argv(netns_of(n), ["tc", "-batch", "-"]),
                     "".join(rate_lines(p, spec.qos, paused=p.key in storms) for p in ps))
                 for n, ps in by_node.items()}, "tc (port rate)")
    return [p for ps in by_node.values() for p in ps]


# ---- ECN --------------------------------------------------------------------------------------

def ecn_probability(qos: QosProfile, depth_bytes: int) -> float:
    """WRED/ECN marking probability (0..1) of lossless queue depth ``depth_bytes`` under the
    lab's ``qos.ecn`` (:func:`railab.testbed.pfc.wred_probability`)."""
    e = qos.ecn
    return wred_probability(e.kmin_bytes, e.kmax_bytes, e.pmax_percent, depth_bytes)


def mark_point(p: Port) -> tuple[str, str]:
    """Where switch port ``p``'s ECN marks are applied: ``(peer node, peer interface)``, the
    far end's ingress, which a packet reaches the instant it leaves ``p``'s queue. So a packet
    is marked as it is **dequeued**, as switch ASICs mark (Zhu et al., CoNEXT 2016, section 5:
    marking on dequeue keeps the queueing delay out of DCQCN's control loop), with the
    probability of ``p``'s queue depth, which the switch agent keeps in the peer's set."""
    return (p.peer, p.peer_interface)


def nft_script(marked_ports: Iterable[Port], qos: QosProfile) -> str:
    """The nft script of one namespace (module docstring): for each switch port ``p`` whose
    peer end is in this namespace (:func:`mark_point`), a chain on the **ingress** hook of the
    peer interface marking ECN-capable RoCE packets CE when a random number in
    ``[0, ECN_SCALE)`` is in the set ``p_<peer interface>`` (the switch agent,
    :mod:`railab.testbed.pfc`, keeps it at ``[0, p x ECN_SCALE)`` for the WRED probability ``p``
    of the upstream port's real queue depth), and a named counter ``ce_<peer interface>`` of the
    marks. ``meta mark`` carries the random number only within the chain."""
    lines = [f"table netdev {NFT_TABLE} {{"]
    for p in marked_ports:
        dev = p.peer_interface
        lines += [
            f"  counter ce_{dev} {{ }}",
            f"  set p_{dev} {{ type mark; flags interval; }}",
            f"  chain {dev} {{",
            f"    type filter hook ingress device \"{dev}\" priority 0; policy accept;",
            "    meta protocol != ip accept",
            f"    ip dscp != {qos.roce_dscp} accept",
            "    ip ecn not-ect accept",
            f"    meta mark set numgen random mod {ECN_SCALE}",
            f"    meta mark @p_{dev} meta mark set 0 ip ecn set ce counter name ce_{dev} accept",
            "    meta mark set 0",
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def marked_by_node(all_ports: Iterable[Port]) -> dict[str, list[Port]]:
    """The switch ports grouped by the node that applies their marks (:func:`mark_point`)."""
    out: dict[str, list[Port]] = {}
    for p in all_ports:
        if p.switch:
            out.setdefault(mark_point(p)[0], []).append(p)
    return out


# ---- apply ------------------------------------------------------------------------------------
def apply(spec: LabSpec, netns_of: Callable[[str], str]) -> list[Port]:
    """Build the queues of every port and the ECN tables of every switch (module docstring),
    one ``tc -batch`` and one ``nft -f`` process per namespace, run in parallel. A lab without
    ``lab.capacity`` gets nothing (returns ``[]``). Returns the ports shaped; RailabError naming
    the node when tc or nft refuses (the caller rolls the lab back)."""
    if not enabled(spec):
        return []
    qos = spec.qos
    qos.pfc_pause_bytes  # noqa: B018 - raises ValueError for a buffer below Kmax + xOFF
    all_ports = ports(spec)
    by_node: dict[str, list[Port]] = {}
    for p in all_ports:
        by_node.setdefault(p.node, []).append(p)
    run_batches({n: (exec_argv(netns_of(n), ["tc", "-batch", "-"]),
                       "".join(tc_batch(p, qos) for p in ps)) for n, ps in by_node.items()},
                  "tc (port queues)")
    run_batches({n: (exec_argv(netns_of(n), ["nft", "-f", "-"]), nft_script(ps, qos))
                   for n, ps in marked_by_node(all_ports).items()}, "nft (ECN marking)")
    steer = rps_script(rps_mask(len(os.sched_getaffinity(0))))
    run_batches({n.name: (["ip", "netns", "exec", netns_of(n.name), "sh", "-s"], steer)
                 for n in spec.nodes}, "rps (receive steering)")
    return all_ports


def reapply(spec: LabSpec, netns_of: Callable[[str], str], ends: Iterable[tuple[str, str]]) -> list[Port]:
    """Rebuild the port queues and receive steering of link ends that were re-made: a veth the
    faults deleted and created again (``cable-pull``'s heal, ``cross-cable``, ``swap-cables``)
    or moved out of its namespace and back (``carrier-loss``'s heal). The kernel drops a
    device's qdiscs and ``rps_cpus`` with it, so such an end sent at the veth's speed with no
    queue to fill and no ECN marks (measured: a 4:1 incast into a re-plugged receiver ran at
    714 of the 400 Gb/s fabric port, no CE) until ``up`` ran again. ``ends`` are ``(node,
    interface)``; an end that still has its queues (an ``htb`` root) is left as it is, one that
    does not exist is skipped. The ECN chain of an end needs nothing: an nftables ``netdev``
    chain names its device and is hooked again when a device of that name appears. Returns the
    ports rebuilt; nothing without ``lab.capacity``; RailabError when tc refuses."""
    if not enabled(spec):
        return []
    from pyroute2 import IPRoute  # optional-cost import: ~0.7 s, paid by the faults that re-make veths only

    want = set(ends)
    redo: dict[str, list[Port]] = {}
    for p in ports(spec, trained_speeds(spec.name)):  # a link-speed fault's link stays slow
        if (p.node, p.interface) not in want:
            continue
        with entered(netns_of(p.node)):  # the socket is opened there, used from here
            ipr = IPRoute()
        try:
            idx = ipr.link_lookup(ifname=p.interface)
            kinds = {q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=idx[0])
                     if q["parent"] == TC_H_ROOT} if idx else None
        finally:
            ipr.close()
        if kinds is None or "htb" in kinds:  # gone, or its queues are there
            continue
        redo.setdefault(p.node, []).append(p)
    if not redo:
        return []
    run_batches({n: (exec_argv(netns_of(n), ["tc", "-batch", "-"]), "".join(tc_batch(p, spec.qos) for p in ps))
                 for n, ps in redo.items()}, "tc (port queues)")
    mask = rps_mask(len(os.sched_getaffinity(0)))
    run_batches({n: (["ip", "netns", "exec", netns_of(n), "sh", "-s"],
                     "".join(rps_script(mask, p.interface) for p in ps)) for n, ps in redo.items()},
                "rps (receive steering)")
    return [p for ps in redo.values() for p in ps]


def rps_mask(cpus: int) -> str:
    """The ``rps_cpus`` bitmap of CPUs 0..``cpus``-1 as sysfs writes it: hex, 32 bits a group,
    groups comma-separated, most significant first (``3`` for 2 CPUs, ``1,ffffffff`` for 33)."""
    if cpus < 1:
        raise ValueError("at least one CPU")
    bits = (1 << cpus) - 1
    groups = []
    while bits:
        groups.append(f"{bits & 0xFFFFFFFF:x}")
        bits >>= 32
    return ",".join(reversed(groups))


def rps_script(mask: str, interface: str | None = None) -> str:
    """``sh`` lines that set receive packet steering (RPS) on every interface of the namespace
    but ``lo`` (or on ``interface`` only) to ``mask`` (run under ``ip netns exec``, which mounts
    that namespace's sysfs).

    Why: the kernel forwards a packet through the lab in the softirq of the CPU that sent or
    dequeued it, and a veth hands it to that CPU's backlog; when two CPUs dequeue one queue in
    turn, two packets of one flow can swap (1-4 per flow in a 30 s incast, 8-15 in a
    960-flow all-to-all on mini-lossless, measured 2026-12-06). With RPS every packet of a flow
    goes to the backlog of the CPU its flow hash picks, at every hop, so the host never
    reorders a flow (0 in the same all-to-all) and the lab's reordering figures are the
    fabric's (spraying, WCMP). Cost: none measurable (131,000 vs 128,500 packets/s through
    mini-lossless's 3-hop path at 10 Gb/s ports, load 18)."""
    if interface is not None:
        return f"for f in /sys/class/net/{interface}/queues/rx-*/rps_cpus; do echo {mask} > $f; done\n"
    return ("for f in /sys/class/net/*/queues/rx-*/rps_cpus; do\n"
            "  case $f in /sys/class/net/lo/*) continue;; esac\n"
            f"  echo {mask} > $f\n"
            "done\n")


# ---- counters ---------------------------------------------------------------------------------
@dataclass
class PortCounters:
    """Counters of one egress port ``node:port`` since the lab came up (PFC ones: since the PFC
    emulation last started). Bytes and packets are as the qdisc saw them (IP packet + Ethernet
    header).

    ``tx_bytes``/``tx_packets``: sent by the port (all classes); ``lossless_tx_bytes``: by the
    lossless class; ``backlog_bytes`` / ``lossless_backlog_bytes``: queued now (all / lossless);
    ``dropped``: tail drops (all classes); ``lossless_dropped``: of the lossless class;
    ``ce_marked``: packets this port marked CE (switch ports; None when not read);
    ``pause_events`` / ``resume_events``: PAUSE/RESUME the port received from its downstream
    switch; ``paused_s``: lab seconds it spent paused (see :mod:`railab.testbed.pfc`);
    ``paused``: paused right now; ``t``: monotonic time of the reading, s."""

    node: str
    port: str
    t: float = 0.0
    tx_bytes: int = 0
    tx_packets: int = 0
    lossless_tx_bytes: int = 0
    backlog_bytes: int = 0
    lossless_backlog_bytes: int = 0
    dropped: int = 0
    lossless_dropped: int = 0
    ce_marked: int | None = None
    pause_events: int = 0
    resume_events: int = 0
    paused_s: float = 0.0
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def nft_counters(ns: str) -> dict[str, int]:
    """CE marks per port of the switch in namespace ``ns``: ``{port: packets}`` from the named
    counters ``ce_<port>`` of table :data:`NFT_TABLE` (``nft -j``). ``{}`` without the table."""
    res = subprocess.run(exec_argv(ns, ["nft", "-j", "list", "counters", "table", "netdev",
                                        NFT_TABLE]), capture_output=True, text=True, timeout=30)
    return _parse_nft(res.stdout) if res.returncode == 0 else {}


def _parse_nft(text: str) -> dict[str, int]:
    out = {}
    for item in json.loads(text or '{"nftables": []}').get("nftables", []):
        c = item.get("counter")
        if c and c.get("name", "").startswith("ce_"):
            out[c["name"][3:]] = int(c.get("packets", 0))
    return out


def pfc_state(lab_run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The PFC emulation's per-port record (``<run dir>/pfc.json``, written by
    :mod:`railab.testbed.pfc`): ``{"node:port": {pause_events, resume_events, paused_s,
    paused}}``; ``{}`` when it never ran."""
    try:
        return json.loads((Path(lab_run_dir) / PFC_STATE_FILE).read_text()).get("ports", {})
    except (OSError, ValueError):
        return {}


@dataclass
class CapacitySampler:
    """Cheap repeated readings of the port counters (for time series every 50-100 ms): one raw
    rtnetlink socket per namespace held open (:class:`QdiscReader`), one qdisc dump per node per
    reading (~1.3 ms for a 16-port leaf). ``nodes``: only these nodes' ports. ``ce`` adds the nft
    counters (one ``nft`` process per switch, run concurrently: tens of ms); ``run_dir`` (the
    lab's ``/run/railab/<lab>``) the PFC emulation's counts. Use as a context manager or call
    :meth:`close`. UsageError for a lab without ``lab.capacity``; RailabError when it is not up."""

    spec: LabSpec
    netns_of: Callable[[str], str]
    nodes: Iterable[str] | None = None
    run_dir: str | Path | None = None
    _readers: dict[str, QdiscReader] = field(default_factory=dict, init=False)
    _index: dict[tuple[str, str], int] = field(default_factory=dict, init=False)
    _ports: list[Port] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not enabled(self.spec):
            raise UsageError(f"lab {self.spec.name} has no lab.capacity: its links have no "
                             "queues to count (use an intent with lab.capacity, e.g. "
                             "mini-lossless)")
        want = set(self.nodes) if self.nodes is not None else None
        self._ports = [p for p in ports(self.spec) if want is None or p.node in want]
        node = ""
        try:
            for node in dict.fromkeys(p.node for p in self._ports):
                self._readers[node] = QdiscReader(self.netns_of(node))
                self._index.update(ifindexes(self.netns_of(node),
                                              [p.interface for p in self._ports if p.node == node],
                                              node))
        except FileNotFoundError:
            self.close()
            raise RailabError(f"lab {self.spec.name} is not up (no namespace for {node})") \
                from None
        except BaseException:
            self.close()
            raise

    @property
    def ports(self) -> list[Port]:
        return list(self._ports)

    def sample(self, *, ce: bool = False) -> dict[tuple[str, str], PortCounters]:
        """``{(node, port): PortCounters}`` now (see :class:`PortCounters`); ``ce`` reads the
        nft mark counters too (else ``ce_marked`` is None)."""
        qos = self.spec.qos
        ll, ctl = lossless_class(qos), control_class(qos)
        marks: dict[str, dict[str, int]] = {}
        if ce:
            marks = _nft_many({mark_point(p)[0]: self.netns_of(mark_point(p)[0])
                               for p in self._ports if p.switch})
        pfc = pfc_state(self.run_dir) if self.run_dir else {}
        stats: dict[str, dict[tuple[int, int], QdiscStat]] = {}
        times: dict[str, float] = {}
        for node, r in self._readers.items():
            stats[node] = {(q.index, q.parent): q for q in r.read()}
            times[node] = time.monotonic()
        out = {}
        none = QdiscStat(0, 0, 0, "", 0, 0, 0, 0, 0)
        for p in self._ports:
            idx, st = self._index[p.key], stats[p.node]
            root = st.get((idx, 0xFFFFFFFF), none)
            lossl, ctrl = st.get((idx, ll), none), st.get((idx, ctl), none)
            c = PortCounters(
                node=p.node, port=p.interface, t=times[p.node], tx_bytes=root.bytes,
                tx_packets=root.packets, lossless_tx_bytes=lossl.bytes,
                backlog_bytes=lossl.backlog + ctrl.backlog, lossless_backlog_bytes=lossl.backlog,
                dropped=lossl.drops + ctrl.drops, lossless_dropped=lossl.drops,
                ce_marked=(marks.get(p.peer, {}).get(p.peer_interface, 0) if p.switch else 0)
                if ce else None)
            f = pfc.get(f"{p.node}:{p.interface}")
            if f:
                c.pause_events = int(f.get("pause_events", 0))
                c.resume_events = int(f.get("resume_events", 0))
                c.paused_s, c.paused = float(f.get("paused_s", 0.0)), bool(f.get("paused"))
            out[p.key] = c
        return out

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __enter__(self) -> CapacitySampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def _nft_many(nss: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """:func:`nft_counters` of several switches at once: ``{node: {port: marks}}``."""
    procs = {n: subprocess.Popen(exec_argv(ns, ["nft", "-j", "list", "counters", "table",
                                                "netdev", NFT_TABLE]),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for n, ns in nss.items()}
    out = {}
    for n, p in procs.items():
        text, _ = p.communicate(timeout=30)
        out[n] = _parse_nft(text) if p.returncode == 0 else {}
    return out


def port_counters(spec: LabSpec, netns_of: Callable[[str], str], *,
                  run_dir: str | Path | None = None, ce: bool = True,
                  nodes: Iterable[str] | None = None) -> dict[tuple[str, str], PortCounters]:
    """One reading of every shaped port's counters (``nodes``: only these nodes' ports):
    ``{(node, port): PortCounters}``. ``run_dir`` (the lab's ``/run/railab/<lab>``) adds the PFC
    emulation's counts. UsageError for a lab without ``lab.capacity``; RailabError when the lab
    is not up."""
    with CapacitySampler(spec, netns_of, nodes=nodes, run_dir=run_dir) as s:
        return s.sample(ce=ce)


def totals(counters: Mapping[tuple[str, str], PortCounters]) -> dict[str, float]:
    """Integer totals over ports: ``dropped``, ``lossless_dropped``, ``ce_marked``,
    ``pause_events``, ``resume_events`` and the summed ``paused_s`` (a float)."""
    keys = ("dropped", "lossless_dropped", "ce_marked", "pause_events", "resume_events")
    out: dict[str, float] = {k: sum(int(getattr(c, k) or 0) for c in counters.values())
                             for k in keys}
    out["paused_s"] = math.fsum(c.paused_s for c in counters.values())
    return out


def delta(before: Mapping[tuple[str, str], PortCounters],
          after: Mapping[tuple[str, str], PortCounters]) -> dict[tuple[str, str], PortCounters]:
    """``after - before`` per port for the cumulative counters (backlog and ``paused`` from
    ``after``): what a run did, net of what the lab did before it. PFC counts that went down
    (a new :func:`pfc_session` in between) are the new session's."""
    cum = ("tx_bytes", "tx_packets", "lossless_tx_bytes", "dropped", "lossless_dropped",
           "pause_events", "resume_events")
    out = {}
    for k, a in after.items():
        b = before.get(k)
        d = PortCounters(**asdict(a))
        if b is not None:
            for f in cum:
                setattr(d, f, getattr(a, f) - getattr(b, f))
            if a.pause_events < b.pause_events or a.paused_s < b.paused_s:
                # a new PFC session started in between: its counts start at zero
                d.pause_events, d.resume_events = a.pause_events, a.resume_events
                b = PortCounters(**{**asdict(b), "paused_s": 0.0})
            if a.ce_marked is not None and b.ce_marked is not None:
                d.ce_marked = a.ce_marked - b.ce_marked
            d.paused_s = a.paused_s - b.paused_s
        out[k] = d
    return out


# ---- the switch agent (ECN + PFC emulation) of a traffic run ---------------------------------
def agent_plan(spec: LabSpec, netns_of: Callable[[str], str], *, pfc: bool,
               watchdog: Watchdog | None = None) -> AgentPlan:
    """The switch agent's :class:`railab.testbed.pfc.AgentPlan` of lab ``spec``: thresholds from
    ``qos`` (raises ValueError for a buffer too small for PFC), every shaped port, namespaces,
    the PFC ``watchdog`` (None: off) and the lab's run directory (where its storms are)."""
    q = spec.qos
    sb = q.capacity.shared_buffer
    return AgentPlan(lab=spec.name, pfc=pfc, pause_bytes=q.pfc_pause_bytes,
                     resume_bytes=q.pfc_resume_bytes, kmin_bytes=q.ecn.kmin_bytes,
                     kmax_bytes=q.ecn.kmax_bytes, pmax_percent=q.ecn.pmax_percent,
                     lossless_handle=lossless_class(q),
                     ports=tuple(ports(spec, trained_speeds(spec.name))),  # link-speed faults
                     namespaces={n.name: netns_of(n.name) for n in spec.nodes},
                     pool_bytes=sb.pool_bytes if sb else 0, alpha=sb.alpha if sb else 0.0,
                     watchdog=watchdog, run_dir=str(st.lab_dir(spec.name)))


def reset(spec: LabSpec, netns_of: Callable[[str], str]) -> None:
    """Undo any emulation state a killed loop left behind: every lossless class back to its
    rate and limit (``Port.lossless_limit``; a port a PFC storm holds stays paused,
    :func:`railab.testbed.pfc.read_storms`; a link a ``link-speed`` fault holds at its trained
    speed, :func:`trained_speeds`), every ECN set empty (no marks). Idempotent."""
    by_node: dict[str, list[Port]] = {}
    for p in ports(spec, trained_speeds(spec.name)):
        by_node.setdefault(p.node, []).append(p)
    storms = read_storms(st.lab_dir(spec.name))
    NicPauseBoard.remove(st.lab_dir(spec.name))  # a killed agent's: no NIC stays held
    jobs = {}
    for node, ps in by_node.items():
        script = "".join(tbf_line(p, lossless_class(spec.qos), paused=p.key in storms, extra=0)
                         for p in ps)
        jobs[node] = (exec_argv(netns_of(node), ["tc", "-batch", "-"]), script)
    run_batches(jobs, "tc (PFC reset)")
    run_batches({node: (exec_argv(netns_of(node), ["nft", "-f", "-"]),
                        "".join(ecn_set_update(p.peer_interface, 0.0) for p in ps))
                 for node, ps in marked_by_node(ports(spec)).items()}, "nft (ECN reset)")


@dataclass
class PfcSession:
    """What :func:`pfc_session` yields: ``enabled``; ``state()`` reads the loop's record
    (``{}`` when off); ``pid`` of the loop (None when off)."""

    lab: str
    enabled: bool
    pid: int | None = None
    #: the agent's exit status when it exited during the block by itself (killed, crashed):
    #: its marks and PAUSEs stopped there, and the session undid its queue changes
    #: (:func:`reset`) when the block ended; None when it ran to the end
    lost: int | None = None

    @property
    def state_path(self) -> Path:
        return st.lab_dir(self.lab) / PFC_STATE_FILE

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}


def watchdog_of(spec: LabSpec) -> Watchdog | None:
    """The lab's PFC watchdog from ``qos.capacity.pfc_watchdog`` (its ms as lab ms), None when
    the intent sets none."""
    wd = spec.qos.capacity.pfc_watchdog
    if wd is None:
        return None
    return Watchdog(detection_time_ms=float(wd.detection_time_ms),
                    restoration_time_ms=float(wd.restoration_time_ms), action=wd.action)


@contextmanager
def pfc_session(spec: LabSpec, netns_of: Callable[[str], str],
                enabled: bool | None = None, *,
                watchdog: Watchdog | bool | None = None) -> Iterator[PfcSession]:
    """Run the switch agent for the block (a traffic run): ECN marking from the real queue
    depths always, the PFC emulation when ``enabled`` (default the lab's ``qos.capacity.pfc``;
    off: tail drops only), and the PFC watchdog: ``watchdog`` (a
    :class:`railab.testbed.pfc.Watchdog`), False for none, None (default) for the lab's
    ``qos.capacity.pfc_watchdog`` (:func:`watchdog_of`; none when absent); its per-port
    detections in ``state()["watchdog_ports"]`` (docs/congestion.md "PFC failure modes"). The
    agent is a process of its own, recorded in
    ``LabState.agents["pfc"]``; the block starts once it watches every switch, and its end stops
    it (RESUME everything, limits back, marking off) and removes the record. Any state a killed
    agent left behind is undone first (:func:`reset`), and when the agent exits during the
    block without closing (killed, crashed) the block's end undoes what it held and sets the
    session's ``lost`` (its exit status). The counts of the session (``pfc.json``)
    start at zero and stay readable after it (:func:`port_counters`
    with ``run_dir``).

    UsageError for a lab without ``lab.capacity`` and when another load run holds the lab
    (:func:`railab.testbed.state.load_lock`); RailabError when the loop does not start (its stderr in the
    message)."""
    if not spec.qos.capacity.enabled:
        raise UsageError(f"lab {spec.name} has no lab.capacity: PFC needs port queues (use an "
                         "intent with lab.capacity, e.g. mini-lossless)")
    if watchdog is None or watchdog is True:
        watchdog = watchdog_of(spec)
    with st.load_lock(spec.name):
        with _agent_session(spec, netns_of, enabled, watchdog or None) as sess:
            yield sess


@contextmanager
def _agent_session(spec: LabSpec, netns_of: Callable[[str], str],
                   enabled: bool | None, watchdog: Watchdog | None = None) -> Iterator[PfcSession]:
    """:func:`pfc_session`'s body, under the lab's load lock."""
    on = spec.qos.capacity.pfc if enabled is None else bool(enabled)
    sess = PfcSession(lab=spec.name, enabled=on)
    prev, rec = sess.state(), st.load(spec.name)
    if (prev and not prev.get("final")) or (rec is not None and rec.agents.get("pfc")):
        reset(spec, netns_of)  # an earlier agent was killed before it could undo its changes
    try:
        sess.state_path.unlink()
    except FileNotFoundError:
        pass
    log = st.lab_dir(spec.name) / "pfc.log"
    plan_path = st.lab_dir(spec.name) / "pfc-plan.json"
    set_watchdog(st.lab_dir(spec.name), watchdog)  # the session's; set_watchdog changes it live
    plan_path.write_text(json.dumps(agent_plan(spec, netns_of, pfc=on, watchdog=watchdog).to_json()))
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "railab.testbed.pfc", "--plan", str(plan_path),
                                 "--state", str(sess.state_path), "--parent", str(os.getpid()),
                                 *([] if on else ["--no-pfc"])],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    sess.pid = proc.pid
    try:
        _record_agent(spec.name, proc.pid)
        end = time.monotonic() + START_TIMEOUT_S
        while not sess.state().get("ready"):
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                proc.wait()
                sig = received()
                if sig is not None or proc.returncode == -signal.SIGINT:
                    # the terminal's Ctrl-C (or a SIGTERM) reached the starting agent too: an
                    # interrupt (the CLI's one line), not a failure with the agent's traceback
                    raise Interrupted(sig or signal.SIGINT)
                raise RailabError(f"lab {spec.name}: the PFC emulation did not start: "
                                  f"{log.read_text().strip()[-400:] or 'no output'}")
            time.sleep(0.02)
        yield sess
    finally:
        if proc.poll() is not None and not sess.state().get("final"):
            # it exited during the block by itself (a SIGKILL, a crash): whatever it held stays
            # held (paused ports, marking sets, the sender NICs' PAUSE board) until undone here
            sess.lost = proc.returncode
            reset(spec, netns_of)
        elif proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reset(spec, netns_of)
        _record_agent(spec.name, None)


def _record_agent(lab: str, pid: int | None) -> None:
    """Record the PFC agent's pid in the lab's ``agents`` (None: take it out), changing that
    field only (:func:`railab.testbed.state.modify`); nothing when the lab went down."""
    def change(rec: st.LabState) -> None:
        agents = dict(rec.agents)
        if pid is None:
            agents.pop("pfc", None)
        else:
            agents["pfc"] = pid
        rec.agents = agents
    try:
        st.modify(lab, change)
    except RailabError:
        pass  # the lab went down meanwhile: nothing to record (its down killed the agent)
