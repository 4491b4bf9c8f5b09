"""Port capacity of a netns lab: egress queues, WRED/ECN marking, and their counters.

What ``lab.capacity`` (``LabSpec.qos.capacity``, :class:`railab.topologies.qos.CapacityProfile`)
puts on every link end of a lab (every leaf and spine egress port and every server NIC egress
port; docs/congestion.md):

* **Queues** (tc, built in here): an ``htb`` root ``1:`` on the port, one class ``1:1`` at the
  port's lab rate (:func:`port_rate_bps`), and two leaf classes under it, each with a ``bfifo``
  child (a tail-drop byte limit, so ``tc -s`` and :func:`port_counters` count backlog and drops):

  - ``1:13`` **lossless** (traffic class ``qos.roce_tc`` = 3: RoCEv2 data, DSCP ``qos.roce_dscp``
    = 26, picked by a ``u32`` filter on the IPv4 DSCP), rate 90 % of the port, ceil the port;
    limit ``buffer_bytes`` on a switch, :data:`NIC_BUFFER_BYTES` on a server NIC (a NIC's own
    send queue back-pressures its sender instead of dropping);
  - ``1:10`` **control/default** (everything else: BGP, BFD, ND/RA, ARP, CNPs at DSCP 48),
    rate 10 % of the port guaranteed (:data:`CONTROL_SHARE`), ceil the port, and first claim on
    spare bandwidth (htb ``prio 0``), limit ``buffer_bytes``. The PFC emulation
    (:mod:`railab.testbed.pfc`) only ever changes ``1:13``, so a pause never stops BGP or BFD.

* **WRED/ECN** (nftables, switch ports only; NICs do not mark): one ``netdev`` table
  :data:`NFT_TABLE` per switch namespace with one chain per port on the **egress** hook. The
  hook runs before the qdisc, where the queue depth is not visible, so marking runs on a
  *virtual queue*: ``limit rate over R bytes/second burst B bytes`` on RoCE (DSCP 26) packets, at
  the port rate ``R``, is a token bucket whose "over" verdict means "a queue served at ``R`` holds
  more than ``B`` bytes". :data:`ECN_BANDS` buckets with ``B`` from ``Kmin`` up to ``Kmax`` give
  the depth band of each packet; a packet in band ``i`` (depth between band edges) is marked CE
  with the WRED probability at the band's midpoint, ``Pmax x (mid - Kmin) / (Kmax - Kmin)``
  (``numgen random``), every packet beyond ``Kmax`` is marked, and a packet beyond
  ``buffer_bytes`` (which the bfifo is about to tail-drop) is not marked. Only ECN-capable packets
  (ECN bits != 00) are marked (``ip ecn != not-ect``), as WRED's ``ecn_all`` does; a named nft
  counter ``ce_<port>`` counts the marks. Kmin/Kmax/Pmax: ``qos.ecn`` (SONiC's
  ``WRED_PROFILE|AZURE_LOSSLESS`` by default, the same numbers ``config_db.json`` gets).

Counters (:func:`port_counters`, :class:`CapacitySampler`) come from tc class statistics over
rtnetlink (pyroute2), the nft counters (``nft -j``) and the PFC emulation's state file.

Everything here lives inside the lab's namespaces: deleting them (``railab down``, a failed or
interrupted ``up``) removes every qdisc, filter and nft table with them.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from railab.errors import RailabError, UsageError
from railab.testbed.namespaces import entered, exec_argv
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import QosProfile

#: htb handles: root qdisc ``1:``, port class ``1:1``, leaf class of traffic class ``t`` is
#: ``1:(0x10 + t)`` (``1:10`` control/default = TC 0, ``1:13`` lossless = TC 3).
ROOT_HANDLE = 0x10000
PORT_CLASS = 0x10001
CLASS_BASE = 0x10
#: Guaranteed share of the port for the control/default class (BGP, BFD, ND, CNP).
CONTROL_SHARE = 0.10
#: Lossless-class byte limit of a server NIC's egress queue (its send queue): large, so a paused
#: NIC back-pressures its sender (which reads the backlog) instead of dropping.
NIC_BUFFER_BYTES = 64 * 1048576
#: Depth bands between Kmin and Kmax for the WRED probability (each marks at its midpoint).
ECN_BANDS = 4
#: nftables table (family ``netdev``) holding the ECN chains of a switch namespace.
NFT_TABLE = "railab_ecn"
#: Per-port state file of the PFC emulation, under the lab's run directory.
PFC_STATE_FILE = "pfc.json"


def lossless_class(qos: QosProfile) -> int:
    """tc handle (major 1) of the lossless class: ``1:(0x10 + roce_tc)``, i.e. ``1:13``."""
    return ROOT_HANDLE | (CLASS_BASE + qos.roce_tc)


def control_class(qos: QosProfile) -> int:
    """tc handle of the control/default class: ``1:(0x10 + default_tc)``, i.e. ``1:10``."""
    return ROOT_HANDLE | (CLASS_BASE + qos.default_tc)


def _tc_id(handle: int) -> str:
    return f"{handle >> 16:x}:{handle & 0xFFFF:x}"


@dataclass(frozen=True)
class Port:
    """One shaped egress port: ``node:interface`` sending to ``peer:peer_interface``.
    ``switch``: a leaf/spine/super-spine port (ECN-marking); else a server NIC.
    ``rate_bps``: lab rate, bit/s; ``lossless_limit`` / ``control_limit``: bfifo limits, bytes;
    ``mtu``: the link MTU, bytes."""

    node: str
    interface: str
    peer: str
    peer_interface: str
    switch: bool
    rate_bps: int
    lossless_limit: int
    control_limit: int
    mtu: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.node, self.interface)


def port_rate_bps(spec: LabSpec, speed_gbps: int) -> int:
    """Lab rate (bit/s) of a port of production speed ``speed_gbps``: ``port_rate_mbps`` scaled
    by ``speed_gbps / fabric_rate_gbps`` (an 800G uplink runs at twice a 400G NIC's lab rate)."""
    cap = spec.qos.capacity
    return int(round(cap.port_rate_mbps * 1e6 * speed_gbps / cap.fabric_rate_gbps))


def enabled(spec: LabSpec) -> bool:
    """True when the lab has ``lab.capacity`` on (``qos.capacity.enabled``)."""
    return bool(spec.qos.capacity.enabled)


def ports(spec: LabSpec) -> list[Port]:
    """Every egress port the capacity block shapes: both ends of every link, in link order."""
    cap = spec.qos.capacity
    out = []
    for link in spec.links:
        rate = port_rate_bps(spec, link.speed_gbps)
        for me, far in ((link.a, link.b), (link.b, link.a)):
            sw = spec.node(me.node).role != "server"
            out.append(Port(node=me.node, interface=me.interface, peer=far.node,
                            peer_interface=far.interface, switch=sw, rate_bps=rate,
                            lossless_limit=cap.buffer_bytes if sw else max(NIC_BUFFER_BYTES,
                                                                           cap.buffer_bytes),
                            control_limit=cap.buffer_bytes, mtu=link.mtu))
    return out


# ---- queues -----------------------------------------------------------------------------------
def _burst(p: Port) -> int:
    """htb burst, bytes: two maximum-size frames (a class sends a whole jumbo frame at once)."""
    return 2 * (p.mtu + 14)


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
        f"qdisc add dev {dev} parent {_tc_id(ll)} handle {ll & 0xFFFF:x}: bfifo "
        f"limit {p.lossless_limit}\n"
        f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dsfield "
        f"{dsfield:#04x} 0xfc flowid {_tc_id(ll)}\n"
    )


def lossless_rate_bps(p: Port) -> int:
    """The lossless class's guaranteed rate on ``p`` (what a RESUME restores), bit/s."""
    return p.rate_bps - max(int(p.rate_bps * CONTROL_SHARE), 8000)


# ---- ECN --------------------------------------------------------------------------------------
def ecn_bands(qos: QosProfile) -> list[tuple[int, float]]:
    """WRED on the virtual queue as ``[(depth threshold bytes, mark probability)]``, shallowest
    first: band ``i`` starts at ``Kmin + i (Kmax - Kmin) / ECN_BANDS`` and marks with the WRED
    probability at its midpoint (``Pmax x (i + 0.5) / ECN_BANDS``); the last row is Kmax, 1.0."""
    e = qos.ecn
    step = (e.kmax_bytes - e.kmin_bytes) / ECN_BANDS
    rows = [(int(e.kmin_bytes + i * step), e.pmax_percent / 100 * (i + 0.5) / ECN_BANDS)
            for i in range(ECN_BANDS)]
    return rows + [(e.kmax_bytes, 1.0)]


def nft_script(node_ports: Iterable[Port], qos: QosProfile) -> str:
    """The nft script (one ``netdev`` table, a chain per port) of the ECN marking of one switch
    (module docstring). ``meta mark`` carries the depth band from the buckets to the marking
    rules and is cleared at the end of the chain."""
    bands = ecn_bands(qos)
    lines = [f"table netdev {NFT_TABLE} {{"]
    for p in node_ports:
        rate = p.rate_bps // 8
        lines.append(f"  counter ce_{p.interface} {{ }}")
        lines.append(f"  chain {p.interface} {{")
        lines.append(f"    type filter hook egress device \"{p.interface}\" priority 0; "
                     "policy accept;")
        lines.append("    meta protocol != ip accept")
        lines.append(f"    ip dscp != {qos.roce_dscp} accept")
        for k, (depth, _pr) in enumerate(bands, start=1):
            lines.append(f"    limit rate over {rate} bytes/second burst {depth} bytes "
                         f"meta mark set {k}")
        # beyond the buffer: the bfifo drops it; no mark (WRED marks what it enqueues)
        lines.append(f"    limit rate over {rate} bytes/second burst {p.lossless_limit} bytes "
                     "meta mark set 0 accept")
        for k, (_depth, prob) in enumerate(bands, start=1):
            rand = "" if prob >= 1 else f"numgen random mod 1000000 < {int(round(prob * 1e6))} "
            lines.append(f"    meta mark {k} {rand}ip ecn != not-ect ip ecn set ce "
                         f"counter name ce_{p.interface} meta mark set 0 accept")
        lines.append("    meta mark set 0")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- apply ------------------------------------------------------------------------------------
def _run_parallel(jobs: Mapping[str, tuple[list[str], str]], what: str) -> None:
    """Run ``{node: (argv, stdin)}`` concurrently; RailabError naming the first nodes that fail."""
    procs = {}
    try:
        for node, (argv, script) in jobs.items():
            procs[node] = (subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True), script)
        bad = []
        for node, (p, script) in procs.items():
            out, _ = p.communicate(script, timeout=60)
            if p.returncode != 0:
                bad.append(f"{node}: {out.strip()[:300]}")
    except FileNotFoundError as exc:
        raise RailabError(f"{what}: {exc.filename} not found (iproute2, nftables, util-linux)") \
            from None
    finally:
        for p, _ in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    if bad:
        raise RailabError(f"{what} failed on " + " | ".join(bad[:3]))


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
    _run_parallel({n: (exec_argv(netns_of(n), ["tc", "-batch", "-"]),
                       "".join(tc_batch(p, qos) for p in ps)) for n, ps in by_node.items()},
                  "tc (port queues)")
    _run_parallel({n: (exec_argv(netns_of(n), ["nft", "-f", "-"]), nft_script(ps, qos))
                   for n, ps in by_node.items() if ps[0].switch}, "nft (ECN marking)")
    return all_ports


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
                self._index.update(_ifindexes(self.netns_of(node),
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
            marks = _nft_many({p.node: self.netns_of(p.node) for p in self._ports if p.switch})
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
                ce_marked=(marks.get(p.node, {}).get(p.interface, 0) if p.switch else 0)
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


def _ifindexes(ns: str, names: list[str], node: str) -> dict[tuple[str, str], int]:
    """``{(node, ifname): ifindex}`` in namespace ``ns``; RailabError for a missing interface."""
    with entered(ns):
        ipr = IPRoute()
    try:
        out = {}
        for name in names:
            idx = ipr.link_lookup(ifname=name)
            if not idx:
                raise RailabError(f"{node}:{name} does not exist: is the lab up?")
            out[(node, name)] = idx[0]
        return out
    finally:
        ipr.close()


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
    ``after``): what a run did, net of what the lab did before it."""
    cum = ("tx_bytes", "tx_packets", "lossless_tx_bytes", "dropped", "lossless_dropped",
           "pause_events", "resume_events")
    out = {}
    for k, a in after.items():
        b = before.get(k)
        d = PortCounters(**asdict(a))
        if b is not None:
            for f in cum:
                setattr(d, f, getattr(a, f) - getattr(b, f))
            if a.ce_marked is not None and b.ce_marked is not None:
                d.ce_marked = a.ce_marked - b.ce_marked
            d.paused_s = a.paused_s - b.paused_s
        out[k] = d
    return out


# ---- fast qdisc statistics (raw rtnetlink) -----------------------------------------------------
#: rtnetlink constants (linux/rtnetlink.h, linux/pkt_sched.h, linux/gen_stats.h)
_RTM_GETQDISC, _NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_DONE, _NLMSG_ERROR = 38, 1, 0x300, 3, 2
_TCA_KIND, _TCA_STATS2 = 1, 7
_TCA_STATS_BASIC, _TCA_STATS_QUEUE = 1, 3


@dataclass(frozen=True)
class QdiscStat:
    """One qdisc's statistics: interface ``index``, ``parent`` and ``handle`` (tc handles),
    ``kind``; ``bytes``/``packets`` dequeued, ``backlog`` bytes queued, ``qlen`` packets queued,
    ``drops`` packets."""

    index: int
    parent: int
    handle: int
    kind: str
    bytes: int
    packets: int
    backlog: int
    qlen: int
    drops: int


class QdiscReader:
    """Every qdisc's statistics of one network namespace in one ``RTM_GETQDISC`` dump over a raw
    rtnetlink socket opened in that namespace.

    Why not pyroute2 here: it decodes every attribute of every message in Python, 11.6 ms for
    the 49 qdiscs of a mini-lossless leaf (measured), too slow for the PFC emulation's control
    loop and for 50-100 ms time series; this reads only the kind and TCA_STATS2 (basic and
    queue), ~1.3 ms for the same dump. Setup and changes still go through tc / pyroute2."""

    def __init__(self, ns: str) -> None:
        import socket

        with entered(ns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
        self._sock.bind((0, 0))
        self._seq = 0

    def read(self) -> list[QdiscStat]:
        """One dump: a :class:`QdiscStat` per qdisc. OSError when the namespace is gone."""
        import struct

        self._seq += 1
        req = struct.pack("=LHHLLBxxxiLLL", 36, _RTM_GETQDISC, _NLM_F_REQUEST | _NLM_F_DUMP,
                          self._seq, 0, 0, 0, 0, 0, 0)
        self._sock.send(req)
        out: list[QdiscStat] = []
        while True:
            data = self._sock.recv(1 << 20)
            off = 0
            while off + 16 <= len(data):
                ln, typ, _fl, seq, _pid = struct.unpack_from("=LHHLL", data, off)
                if ln < 16:
                    return out
                if typ == _NLMSG_DONE:
                    return out
                if typ == _NLMSG_ERROR:
                    err = struct.unpack_from("=i", data, off + 16)[0]
                    if err:
                        raise OSError(-err, "RTM_GETQDISC dump failed")
                    return out
                if typ == 36 and seq == self._seq:  # RTM_NEWQDISC
                    out.append(_parse_qdisc(data, off + 16, off + ln))
                off += (ln + 3) & ~3

    def close(self) -> None:
        self._sock.close()


def _parse_qdisc(data: bytes, off: int, end: int) -> QdiscStat:
    import struct

    _fam, index, handle, parent, _info = struct.unpack_from("=BxxxiLLL", data, off)
    off += 20
    kind, basic, queue = "", (0, 0), (0, 0, 0)
    while off + 4 <= end:
        alen, atyp = struct.unpack_from("=HH", data, off)
        if alen < 4:
            break
        atyp &= 0x3FFF
        if atyp == _TCA_KIND:
            kind = data[off + 4:off + alen].split(b"\0", 1)[0].decode()
        elif atyp == _TCA_STATS2:
            o, e = off + 4, off + alen
            while o + 4 <= e:
                sl, st_ = struct.unpack_from("=HH", data, o)
                if sl < 4:
                    break
                if st_ == _TCA_STATS_BASIC:
                    basic = struct.unpack_from("=QL", data, o + 4)
                elif st_ == _TCA_STATS_QUEUE:
                    q = struct.unpack_from("=LLLLL", data, o + 4)
                    queue = (q[0], q[1], q[2])
                o += (sl + 3) & ~3
        off += (alen + 3) & ~3
    return QdiscStat(index=index, parent=parent, handle=handle, kind=kind, bytes=basic[0],
                     packets=basic[1], qlen=queue[0], backlog=queue[1], drops=queue[2])
