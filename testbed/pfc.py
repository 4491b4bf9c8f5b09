"""The switch agent of a lab with ``lab.capacity``: ECN marking and the PFC emulation.

One process (``python -m railab.testbed.pfc``, its own GIL; started and stopped per traffic run
by :func:`railab.testbed.capacity.pfc_session`, which hands it an :class:`AgentPlan` as JSON)
runs a control loop over every switch: each cycle reads the
lossless-queue backlog of every switch port (one raw rtnetlink qdisc dump per switch,
:class:`railab.testbed.capacity.QdiscReader`) and

* **ECN**: keeps each port's marking probability at the WRED value of its depth
  (:func:`railab.testbed.capacity.ecn_probability`) in the nft set that the peer end's ingress
  chain reads (:func:`railab.testbed.capacity.mark_point`: a packet is marked as it leaves the
  queue, on dequeue, as ASICs mark), so marks follow the real queue;
* **PFC** (when on). Real PFC (IEEE 802.1Qbb): when a lossless priority's buffer use on a switch
  passes xOFF, the switch sends PAUSE frames for that priority upstream, and the upstream port
  stops sending that priority until RESUME (XON) once the use falls under xON; other priorities
  keep flowing. veth links carry no PAUSE frames and the kernel has no PFC, so railab emulates
  the effect: when any lossless queue of switch ``S`` holds at least
  ``QosProfile.pfc_pause_bytes`` (the port buffer minus the PFC headroom, above ECN's Kmax: ECN
  first, PFC second), ``S`` PAUSEs its upstream neighbours: the egress port of every neighbour
  facing ``S`` (except the neighbours on the congested ports, downstream of those queues) gets
  the ``tbf`` under its **lossless class only** (``1:13``) changed to 8 kbit/s, which holds its
  backlog without dropping (``tc qdisc change`` of a tbf keeps the queue and refills the bucket:
  at most one two-frame burst gets out after PAUSE, like the frame on the wire when a PAUSE
  arrives); a paused server NIC's QPs stop at once (the agent sets the NIC's byte of the
  sender NICs' PAUSE board, :class:`NicPauseBoard`, which the load engine reads before each
  send: no backlog builds in the host to leave at the port rate on RESUME), and its queue holds
  what it has (its limit is large). The control class (BGP, BFD, ND, CNP) is never touched,
  so a pause never flaps a session. Once every lossless queue of ``S`` is at or under ``QosProfile.pfc_resume_bytes``
  (xOFF - xON lower), ``S`` RESUMEs them (full rate again) and sends a kick frame out of each so
  the kernel runs the queue at once.

* **Shared buffer** (when the lab has ``lab.capacity.shared_buffer``): keeps each switch's
  lossless queues' tail-drop limit at the dynamic threshold of its pool's free space
  (:func:`dt_limit`, alpha x (pool - what the switch's lossless queues hold); Choudhury and
  Hahne 1998), rewriting a queue's tbf limit as the pool fills (:meth:`PfcLoop._threshold`);
  the static limit comes back when the loop stops.

Each change is one line written to a long-lived ``tc -batch`` (PFC) or ``nft -i`` (ECN) process
in the node's namespace (the ECN ones in the namespace of each port's peer; no round trip in
the loop; they run on the other core).

What differs from a switch (docs/congestion.md): the pause decision is per switch (any lossless
queue over xOFF pauses all its other neighbours), not per ingress port and priority group; the
loop's reaction time (one cycle at :data:`RT_PRIORITY`; ``mean_busy_cycle_s`` in the state file:
4.1 ms while busy in an 8:1 incast on mini-lossless, measured, since the per-cycle read skips
everything but the lossless backlogs, :meth:`QdiscReader.backlogs`; the mean over all cycles
was 9.3-11.4 ms before, 4.8-5.5 ms after; at mini-lossless's time scale of 2000 a lab ms is
0.5 us of fabric time) lets more bytes arrive
after the threshold than a switch's sub-us response would, so while PFC runs each switch's
lossless queue limit grows by an **emulation headroom** (:data:`REACTION_BUDGET_S` x the sum of
the switch's port rates) beyond ``buffer_bytes``; it is restored when the loop stops. Counts per
paused port: PAUSE and RESUME events and the paused time (lab seconds), written to
``/run/railab/<lab>/pfc.json`` every :data:`STATE_EVERY_S` and at exit
(:func:`railab.testbed.capacity.pfc_state` reads it), with the loop's cycle times.

This module imports only the standard library, :mod:`railab.testbed.namespaces` and the raw
rtnetlink reader :mod:`railab.testbed.rtnl` (the agent
starts in well under a second even on a loaded machine; pydantic and pyroute2 would take
seconds); the lab model side (ports from ``lab.json``, the session) is
:mod:`railab.testbed.capacity`.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from railab.errors import RailabError
from railab.testbed.namespaces import entered, exec_argv
from railab.testbed.rtnl import Rtnl
from railab.topologies.atomicfile import write_atomic

#: Lab seconds of arrivals the emulation headroom absorbs after the pause threshold: the loop's
#: worst cycle plus the time tc takes to apply a change, with margin.
REACTION_BUDGET_S = 0.05
#: How often the loop rewrites its state file, s.
STATE_EVERY_S = 0.1
#: Pause between two cycles of the loop, s (keeps a core for the load engine).
POLL_S = 0.001
#: Pause between cycles while no lossless queue holds Kmin/4 and nothing is paused, s: a queue
#: needs ~100 ms at 8:1 incast to grow from there to xOFF, so the loop speeds up in time.
IDLE_POLL_S = 0.01
#: Real-time priority (SCHED_RR) of the agent and its tc/nft writers: a switch's PFC and WRED
#: are hardware that never waits for the CPU; the agent sleeps POLL_S between cycles, so it
#: takes at most a share of one core. Falls back to nice -10, then to normal priority.
RT_PRIORITY = 10
#: Seconds to wait for the loop to report ready (capacity.pfc_session), and for it to stop.
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
#: nftables table (family ``netdev``) holding the ECN chains of a switch namespace.
NFT_TABLE = "railab_ecn"
#: Per-port state file of the switch agent, under the lab's run directory.
PFC_STATE_FILE = "pfc.json"
#: Guaranteed share of a port for the control/default class (BGP, BFD, ND, CNP).
CONTROL_SHARE = 0.10
#: The PFC storms of a lab (``railab fault LAB pfc-storm``), under its run directory: a JSON
#: object ``{"node:port": fault id}`` of the egress ports a storming peer holds in PAUSE
#: (:func:`read_storms`; written by :mod:`railab.testbed.pfcfail`).
STORM_FILE = "pfc-storms.json"
#: Ports of a lab whose PFC is enabled on another priority than the lossless one
#: (``railab fault LAB pfc-priority``), under its run directory: ``{"node:port": priority}``, the
#: emulated ports' PFC configuration (a SONiC switch's ``PORT_QOS_MAP|<port> pfc_enable``). Such a
#: port neither sends PAUSE for the lossless priority nor honours one (:func:`read_pfc_priorities`).
PFC_PRIORITY_FILE = "pfc-priority.json"
#: The PFC watchdog's setting of a running lab, under its run directory: a :class:`Watchdog` as
#: JSON, or no file (off). The agent re-reads it when it changes, so the watchdog starts and
#: stops at run time, as SONiC's ``pfcwd start`` / ``pfcwd stop`` do (:func:`set_watchdog`).
WATCHDOG_FILE = "pfcwd.json"
#: tbf limit of a queue the PFC watchdog drops (``action drop``), bytes: tc refuses 0, and no
#: frame fits in one byte, so every new arrival is dropped.
DROP_LIMIT_BYTES = 1

#: The sender NICs' PAUSE board of a running agent, under the lab's run directory: a record of
#: :data:`NIC_PAUSE_RECORD` bytes per server NIC port (:class:`NicPauseBoard`), and its index,
#: the ports in record order.
NIC_PAUSE_FILE = "nic-pause"
NIC_PAUSE_INDEX = "nic-pause.json"
#: One port's record on the board: the monotonic time (s, CLOCK_MONOTONIC, as Python's
#: ``time.monotonic``) of its last RESUME as a little-endian double at offset 0, and at offset 8
#: one byte, 1 while paused; the rest padding (``dp_pause`` in traffic/fastpath.c).
NIC_PAUSE_RECORD = 16


class NicPauseBoard:
    """The sender NICs' PAUSE board: a shared record per server NIC port (``(node,
    interface)``, :data:`NIC_PAUSE_RECORD`), paused while the switch agent's PFC holds that NIC
    (its xOFF; not a PFC storm, whose NIC queue fills and refuses as before), with the time of
    its last RESUME. The load engine reads it before each send and holds the QPs of a paused
    NIC without banking their time: a NIC's scheduler does not serve a paused priority and
    resumes each QP at its rate, no catch-up (IEEE 802.1Qbb; HPCC's ns-3: ``qbb-net-device.cc``
    ``RdmaEgressQueue::GetNextQindex`` skips a QP whose priority is paused, and ``rdma-hw.cc``
    ``UpdateNextAvail`` schedules its next packet from the current time). A QP goes on from the
    RESUME's time, not from when its engine thread saw it (one thread that also receives saw
    it later than the other: two senders sharing a link got 0.70 and 0.80 of their share, one
    thread 0.68 each). Without the board the engine kept pacing into the paused NIC's queue (up
    to its send buffer, ~100 frames), which left at the port rate on RESUME (docs/congestion.md).

    :meth:`create` (the agent) writes a zeroed board and its index (:data:`NIC_PAUSE_FILE`,
    :data:`NIC_PAUSE_INDEX` under ``run_dir``); :meth:`attach` (the engine) maps an existing one,
    None when there is none or it is unreadable. ``offset(key)`` is a port's record number
    (None: not on the board); :meth:`address` its address for the compiled fast path (valid
    until :meth:`close`). OSError from :meth:`create` when the run directory is not writable."""

    def __init__(self, run_dir: Path, keys: list[tuple[str, str]], mm: mmap.mmap,
                 owner: bool, pid: int | None = None) -> None:
        self.run_dir, self.keys, self.mm, self.owner = run_dir, keys, mm, owner
        #: the agent that writes the board (None: unknown; the engine checks it is alive)
        self.pid = pid
        self._index = {k: i for i, k in enumerate(keys)}
        self._base: Any = None  # ctypes view of the map (address()), released at close()

    @classmethod
    def create(cls, run_dir: str | Path, keys: list[tuple[str, str]]) -> NicPauseBoard:
        run_dir = Path(run_dir)
        keys = sorted(set(keys))
        size = NIC_PAUSE_RECORD * max(1, len(keys))
        with open(run_dir / NIC_PAUSE_FILE, "w+b") as f:
            f.write(bytes(size))
            f.flush()
            mm = mmap.mmap(f.fileno(), size)
        write_atomic(run_dir / NIC_PAUSE_INDEX,
                     json.dumps({"ports": [f"{n}:{p}" for n, p in keys], "pid": os.getpid()}))
        return cls(run_dir, keys, mm, owner=True, pid=os.getpid())

    @classmethod
    def attach(cls, run_dir: str | Path) -> NicPauseBoard | None:
        run_dir = Path(run_dir)
        try:
            doc = json.loads((run_dir / NIC_PAUSE_INDEX).read_text())
            keys = [tuple(k.split(":", 1)) for k in doc["ports"]]
            with open(run_dir / NIC_PAUSE_FILE, "r+b") as f:
                mm = mmap.mmap(f.fileno(), 0)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if len(mm) < NIC_PAUSE_RECORD * len(keys):
            mm.close()
            return None
        pid = doc.get("pid")
        return cls(run_dir, keys, mm, owner=False, pid=pid if isinstance(pid, int) else None)

    def release_all(self, now: float | None = None) -> None:
        """RESUME every port (what is left of a killed agent's board: nothing can RESUME it)."""
        t = time.monotonic() if now is None else now
        for k in self.keys:
            if self.paused(k):
                self.set(k, False, t)

    @staticmethod
    def remove(run_dir: str | Path) -> None:
        """Remove a board a killed agent left behind (nothing when there is none)."""
        for name in (NIC_PAUSE_INDEX, NIC_PAUSE_FILE):
            try:
                (Path(run_dir) / name).unlink()
            except FileNotFoundError:
                pass

    def offset(self, key: tuple[str, str]) -> int | None:
        return self._index.get(key)

    def paused(self, key: tuple[str, str]) -> bool:
        i = self._index.get(key)
        return i is not None and self.paused_at(i)

    def paused_at(self, offset: int) -> bool:
        """Whether record ``offset`` is paused now."""
        return self.mm[NIC_PAUSE_RECORD * offset + 8] != 0

    def resumed_at(self, offset: int) -> float:
        """The monotonic time (s) of record ``offset``'s last RESUME (0.0: none yet)."""
        return struct.unpack_from("<d", self.mm, NIC_PAUSE_RECORD * offset)[0]

    def set(self, key: tuple[str, str], paused: bool, now: float | None = None) -> None:
        """PAUSE or RESUME ``key`` (a port not on the board: nothing); a RESUME's time is
        ``now`` (monotonic s; default: the clock now), written before the flag clears."""
        i = self._index.get(key)
        if i is None:
            return
        at = NIC_PAUSE_RECORD * i
        if not paused:
            struct.pack_into("<d", self.mm, at, time.monotonic() if now is None else now)
        self.mm[at + 8] = 1 if paused else 0

    def address(self, offset: int) -> int:
        """The address of record ``offset`` in this process (for ``dp_qp.pause``)."""
        import ctypes  # the engine's side only

        if self._base is None:
            self._base = ctypes.c_char.from_buffer(self.mm)
        return ctypes.addressof(self._base) + NIC_PAUSE_RECORD * offset

    def close(self) -> None:
        """Unmap; the agent's board is zeroed first (nothing stays paused) and its files
        removed."""
        if self.mm.closed:
            return
        if self.owner:
            self.mm[:] = bytes(len(self.mm))
            self.remove(self.run_dir)
        self._base = None
        self.mm.close()


@dataclass(frozen=True)
class Watchdog:
    """The PFC watchdog of the switches (SONiC's ``pfcwd``, the ``PFC_WD`` table: SONiC PFC
    watchdog design doc, sonic-net/SONiC doc/pfc_watchdog): a switch egress queue of the
    lossless priority that stays paused (by the peer's PFC, a storm or a congested neighbour)
    while holding bytes for ``detection_time_ms`` is declared stormed and the ``action`` taken:
    ``drop`` (PAUSE ignored, the queue's backlog and new arrivals dropped), ``forward`` (PAUSE
    ignored, the queue sends at line rate) or ``alert`` (detected and counted, nothing done);
    once no PAUSE has held it for ``restoration_time_ms`` it is lossless again. Times are
    **lab** milliseconds (wall clock; SONiC's are fabric ms: at a time scale of 2000 its 200 ms
    default would be 400 lab s, so a lab's 200 ms is 0.1 ms of fabric time); the intent's
    ``lab.capacity.pfc_watchdog`` gives SONiC's numbers, used as such. SONiC's default is
    200 ms for both; its detection runs every polling interval, the agent's every cycle
    (``mean_busy_cycle_s``, ~4 ms). Server NICs have none (pfcwd is a switch feature)."""

    detection_time_ms: float = 200.0
    restoration_time_ms: float = 200.0
    action: str = "drop"

    def __post_init__(self) -> None:
        if self.action not in ("drop", "forward", "alert"):
            raise ValueError(f"PFC watchdog action {self.action!r}: drop, forward or alert")
        if not (self.detection_time_ms > 0 and self.restoration_time_ms > 0):
            raise ValueError("PFC watchdog detection_time_ms and restoration_time_ms must be > 0")


def set_watchdog(run_dir: str | Path, wd: Watchdog | None) -> None:
    """Start (``wd``) or stop (None) the PFC watchdog of the lab whose run directory is
    ``run_dir``: a running agent applies it within a cycle (stopping it restores every queue it
    acts on), a later one at its start."""
    path = Path(run_dir) / WATCHDOG_FILE
    if wd is None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    else:
        write_atomic(path, json.dumps(asdict(wd)))


def read_watchdog(run_dir: str | Path) -> Watchdog | None:
    """The lab's PFC watchdog setting (:data:`WATCHDOG_FILE`), None when off or unreadable."""
    try:
        return Watchdog(**json.loads((Path(run_dir) / WATCHDOG_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _read_port_map(path: Path) -> dict[tuple[str, str], Any]:
    """A JSON object keyed ``"node:port"`` as ``{(node, port): value}``; ``{}`` when the file
    is missing or unreadable, keys without both parts left out."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for k, v in doc.items() if isinstance(doc, dict) else ():
        node, _, port = str(k).partition(":")
        if node and port:
            out[(node, port)] = v
    return out


def read_pfc_priorities(run_dir: str | Path) -> dict[tuple[str, str], int]:
    """The ports whose PFC is on another priority (:data:`PFC_PRIORITY_FILE` under
    ``run_dir``): ``{(node, port): priority}``; ``{}`` when none (or unreadable)."""
    return {k: v for k, v in _read_port_map(Path(run_dir) / PFC_PRIORITY_FILE).items()
            if isinstance(v, int)}


def read_storms(run_dir: str | Path) -> dict[tuple[str, str], str]:
    """The lab's PFC storms (:data:`STORM_FILE` under ``run_dir``): ``{(node, port): fault
    id}`` of each egress port held in PAUSE by its storming peer; ``{}`` when none (or the file
    is unreadable)."""
    return {k: str(v) for k, v in _read_port_map(Path(run_dir) / STORM_FILE).items()}


def write_storms(run_dir: str | Path, storms: dict[tuple[str, str], str]) -> None:
    """Write the lab's storms (:data:`STORM_FILE`): ``{(node, port): fault id}``."""
    write_atomic(Path(run_dir) / STORM_FILE,
                 json.dumps({f"{n}:{p}": fid for (n, p), fid in sorted(storms.items())}, indent=1))


# ---- the end of a storm: its link reset ---------------------------------------------------------
# A NIC (or port) stuck sending PAUSE stops once it is reset: its link taken down and up (`ip
# link set eth1 down`, `up`, at either end: a switch port shut and re-enabled resets the NIC's
# link too). veths carry no PAUSE, so nothing in the kernel ends an emulated storm on its own:
# at the start railab records the stormed port's link (its ifindex and carrier down count), and
# whoever looks at the lab's PFC state next (railab exec, the pfc check, the switch agent of a
# traffic run) calls settle_storms, which ends each storm whose link lost its carrier since.
#: The link of each stormed port when its storm began, under the run directory: ``{"node:port":
#: {"ns", "ifname", "ifindex", "carrier_down", "fault", "resume"}}`` (``resume``: the tc line that
#: RESUMEs the port's lossless queue when no switch agent runs).
STORM_LINKS_FILE = "pfc-storm-links.json"
#: Seconds between two :func:`settle_storms` of the switch agent.
SETTLE_EVERY_S = 0.2
#: The lock of the lab's fault changes, under its run directory (railab.testbed.faults._locked).
FAULTS_LOCK = "faults.lock"


def link_identity(ns: str, ifname: str) -> tuple[int, int] | None:
    """``(ifindex, carrier down count)`` of link ``ifname`` in namespace ``ns``; ``(0, 0)`` when
    the namespace has no such link; None when the namespace cannot be read (gone)."""
    try:
        with entered(ns):
            rt = Rtnl()
    except OSError:
        return None
    try:
        return rt.carrier_downs().get(ifname, (0, 0))
    except OSError:
        return None
    finally:
        rt.close()


def _read_links(run_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads((run_dir / STORM_LINKS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in doc.items() if isinstance(v, dict)} if isinstance(doc, dict) else {}


def _write_links(run_dir: Path, links: dict[str, dict[str, Any]]) -> None:
    write_atomic(run_dir / STORM_LINKS_FILE, json.dumps(dict(sorted(links.items())), indent=1))


def remember_storm_link(run_dir: str | Path, key: tuple[str, str], *, ns: str, fault: str,
                        resume: str) -> None:
    """Record the link of stormed port ``key`` (``(node, port)``, in namespace ``ns``) as it is
    at the start of storm ``fault``, for :func:`settle_storms`; ``resume``: the tc batch line
    that RESUMEs its lossless queue. Called under the lab's fault lock. Nothing recorded when the
    link cannot be read: that storm ends at its heal only."""
    run_dir = Path(run_dir)
    now = link_identity(ns, key[1])
    if now is None or now == (0, 0):
        return
    links = _read_links(run_dir)
    links[f"{key[0]}:{key[1]}"] = {"ns": ns, "ifname": key[1], "ifindex": now[0], "carrier_down": now[1],
                                   "fault": fault, "resume": resume}
    _write_links(run_dir, links)


def forget_storm_link(run_dir: str | Path, key: tuple[str, str]) -> None:
    """Drop stormed port ``key``'s record (its storm healed). Idempotent."""
    run_dir = Path(run_dir)
    links = _read_links(run_dir)
    if links.pop(f"{key[0]}:{key[1]}", None) is not None:
        _write_links(run_dir, links)


def _was_reset(link: dict[str, Any]) -> bool:
    """True when the recorded link lost its carrier since (a down at either end), was re-made
    (another ifindex) or is gone from its namespace; False when unchanged or unreadable."""
    now = link_identity(str(link.get("ns")), str(link.get("ifname")))
    if now is None:
        return False
    return now == (0, 0) or now[0] != link.get("ifindex") or now[1] > int(link.get("carrier_down") or 0)


def _agent_alive(run_dir: Path) -> bool:
    try:
        doc = json.loads((run_dir / PFC_STATE_FILE).read_text())
    except (OSError, ValueError):
        return False
    pid = doc.get("pid") if isinstance(doc, dict) else None
    return bool(pid) and not doc.get("final") and os.path.exists(f"/proc/{pid}")


def settle_storms(run_dir: str | Path, *, resume: bool = True) -> list[str]:
    """End the storms whose link was reset since they began (the block comment above): each
    leaves the storm file (:data:`STORM_FILE`) and, with ``resume`` and no switch agent running
    (a running one RESUMEs what leaves the file), its queue is RESUMEd with the recorded tc
    line. Returns the stormed ports ended (``"node:port"``). Nothing when the lab has no storm
    or a fault change holds the lab's fault lock (the next look settles); the fault records
    stay (``railab fault LAB heal`` is idempotent). Cost without storms: one failed open."""
    run_dir = Path(run_dir)
    links = _read_links(run_dir)
    if not links or not any(_was_reset(v) for v in links.values()):
        return []
    try:
        lock = open(run_dir / FAULTS_LOCK, "a")
    except OSError:
        return []
    ended: list[tuple[str, dict[str, Any]]] = []
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return []
        try:
            links, storms = _read_links(run_dir), read_storms(run_dir)
            for key, link in sorted(links.items()):
                if _was_reset(link):
                    ended.append((key, links.pop(key)))
                    node, _, port = key.partition(":")
                    if storms.get((node, port)) == link.get("fault"):
                        del storms[(node, port)]
            if ended:
                write_storms(run_dir, storms)
                _write_links(run_dir, links)
                if resume and not _agent_alive(run_dir):
                    for _key, link in ended:
                        subprocess.run(exec_argv(str(link["ns"]), ["tc", "-batch", "-"]),
                                       input=str(link.get("resume") or ""), capture_output=True,
                                       text=True, timeout=30)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return [k for k, _ in ended]



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



def _burst(p: Port) -> int:
    """htb burst, bytes: two maximum-size frames (a class sends a whole jumbo frame at once)."""
    return 2 * (p.mtu + 14)


#: Rate of a paused lossless queue (the PFC emulation): the lowest tbf rate whose bucket still
#: holds a jumbo frame (tc's tick arithmetic overflows below it); see railab.testbed.pfc.
PAUSED_RATE_BPS = 8000


def lossless_qdisc(p: Port, *, paused: bool = False, extra_bytes: int = 0,
                   limit: int | None = None, drop: bool = False) -> str:
    """The lossless class's leaf qdisc as tc arguments: a ``tbf`` at twice the port rate (the
    htb class above it shapes to the port rate; the tbf only has to stop when paused: then
    :data:`PAUSED_RATE_BPS`) with a two-frame bucket and ``lossless_limit + extra_bytes`` of
    queue (tail drop beyond; ``limit`` replaces ``lossless_limit``: the shared buffer's dynamic
    threshold). A tbf, not a bfifo, because ``tc qdisc change`` of a tbf refills its bucket and
    keeps its queue (a smaller limit drops only new arrivals): the PFC emulation's PAUSE/RESUME
    and the dynamic threshold (railab.testbed.pfc)."""
    rate = PAUSED_RATE_BPS if paused else 2 * p.rate_bps
    burst = (p.mtu + 14) if paused else _burst(p)
    base = p.lossless_limit if limit is None else limit
    if drop:  # the PFC watchdog's drop action: line rate, every new arrival dropped
        return f"tbf rate {2 * p.rate_bps}bit burst {_burst(p)} limit {DROP_LIMIT_BYTES}"
    return f"tbf rate {rate}bit burst {burst} limit {base + extra_bytes}"


def lossless_rate_bps(p: Port) -> int:
    """The lossless class's guaranteed rate on ``p`` (what a RESUME restores), bit/s."""
    return p.rate_bps - max(int(p.rate_bps * CONTROL_SHARE), 8000)



#: Resolution of the marking probability: the set holds random numbers below ``p x`` this.
ECN_SCALE = 1_000_000


def ecn_set_update(port: str, probability: float) -> str:
    """The nft line that makes port ``port`` mark with ``probability``: the set flushed and
    refilled by commands on **one** line, which ``nft -i`` runs as one transaction (the set is
    never seen empty between them, and it costs one ruleset-cache refresh: ~0.9 ms against
    ~2.1 ms for two lines, measured on mini-lossless with a load run on the machine, 2026-12-05)."""
    n = int(round(max(0.0, min(1.0, probability)) * ECN_SCALE))
    line = f"flush set netdev {NFT_TABLE} p_{port}"
    if n > 0:
        line += f"; add element netdev {NFT_TABLE} p_{port} {{ 0-{n - 1} }}"
    return line + "\n"


def ifindexes(ns: str, names: list[str], node: str) -> dict[tuple[str, str], int]:
    """``{(node, ifname): ifindex}`` in namespace ``ns`` (``if_nametoindex`` from inside it);
    RailabError for a missing interface."""
    out = {}
    with entered(ns):
        for name in names:
            try:
                out[(node, name)] = socket.if_nametoindex(name)
            except OSError:
                raise RailabError(f"{node}:{name} does not exist (a pulled cable? railab fault "
                                  "LAB list names it; heal it first, or the lab is not fully up)"
                                  ) from None
    return out


@dataclass(frozen=True)
class AgentPlan:
    """Everything the agent needs, as plain data (built by
    :func:`railab.testbed.capacity.agent_plan` from lab.json): ``lab``; ``pfc`` on/off;
    ``pause_bytes`` / ``resume_bytes`` (``QosProfile.pfc_pause_bytes`` / ``pfc_resume_bytes``);
    the WRED ``kmin_bytes`` / ``kmax_bytes`` / ``pmax_percent``; ``lossless_handle`` (tc handle
    of the lossless class, ``1:13``); every shaped ``ports``; ``namespaces`` node -> netns;
    ``pool_bytes`` / ``alpha``: each switch's shared buffer and its dynamic threshold
    (:class:`railab.topologies.qos.SharedBufferProfile`; 0: static limits)."""

    lab: str
    pfc: bool
    pause_bytes: int
    resume_bytes: int
    kmin_bytes: int
    kmax_bytes: int
    pmax_percent: float
    lossless_handle: int
    ports: tuple[Port, ...]
    namespaces: dict[str, str]
    pool_bytes: int = 0
    alpha: float = 0.0
    #: the PFC watchdog (None: off), and the lab's run directory (its storms, :func:`read_storms`)
    watchdog: Watchdog | None = None
    run_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ports"] = [asdict(p) for p in self.ports]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AgentPlan:
        wd = d.get("watchdog")
        return cls(**{**d, "ports": tuple(Port(**p) for p in d["ports"]),
                      "watchdog": Watchdog(**wd) if wd else None})


def wred_probability(kmin_bytes: int, kmax_bytes: int, pmax_percent: float,
                     depth_bytes: int) -> float:
    """WRED/ECN marking probability (0..1) at queue depth ``depth_bytes``: 0 under ``Kmin``,
    rising linearly to ``Pmax`` at ``Kmax``, 1 from ``Kmax`` on (WRED marks every packet above
    the max threshold). Source: SONiC ``WRED_PROFILE`` semantics (``qos.ecn``)."""
    if depth_bytes < kmin_bytes:
        return 0.0
    if depth_bytes >= kmax_bytes:
        return 1.0
    return pmax_percent / 100 * (depth_bytes - kmin_bytes) / (kmax_bytes - kmin_bytes)


def tbf_line(p: Port, lossless_handle: int, *, paused: bool, extra: int,
             limit: int | None = None, drop: bool = False) -> str:
    """``tc -batch`` line setting port ``p``'s lossless tbf (paused or not, ``limit`` (default
    ``p.lossless_limit``) + ``extra``; ``drop``: the watchdog's drop action)."""
    ll = lossless_handle & 0xFFFF
    return (f"qdisc change dev {p.interface} parent 1:{ll:x} handle {ll:x}: "
            f"{lossless_qdisc(p, paused=paused, extra_bytes=extra, limit=limit, drop=drop)}\n")


def dt_limit(pool_bytes: int, alpha: float, used_bytes: int) -> int:
    """The dynamic threshold (Choudhury and Hahne, IEEE/ACM ToN 1998): a queue of a shared
    pool of ``pool_bytes`` may grow while it holds less than ``alpha x (pool - used)``, bytes,
    and never beyond the pool (0 to ``pool_bytes``); ``used_bytes``: what every queue of the
    switch holds."""
    return max(0, min(pool_bytes, int(alpha * (pool_bytes - used_bytes))))


#: A port's dynamic-threshold limit is rewritten when it moves by this share of the pool (or
#: more), and only while the port's queue holds an eighth of it: a tc write per port per cycle
#: would crowd out the PAUSE/RESUME writes on the same tc process.
DT_QUANTUM = 1 / 256


@dataclass
class _PortState:
    pause_events: int = 0
    resume_events: int = 0
    paused_s: float = 0.0
    paused_since: float | None = None
    #: the PFC watchdog (a switch port): since when the queue has been held paused with bytes in
    #: it, since when it has been in the watchdog's action (None: operational), since when no
    #: PAUSE has held it in that state; detections and restorations
    stuck_since: float | None = None
    wd_since: float | None = None
    clear_since: float | None = None
    wd_detections: int = 0
    wd_restorations: int = 0
    wd_s: float = 0.0
    restore_lag_s: float | None = None
    #: PAUSEs the port should have got but did not: PFC on another priority at either end
    pause_ignored: int = 0

    def record(self, now: float) -> dict[str, Any]:
        run = (now - self.paused_since) if self.paused_since is not None else 0.0
        return {"pause_events": self.pause_events, "resume_events": self.resume_events,
                "paused_s": round(self.paused_s + run, 6), "paused": self.paused_since is not None,
                "pause_ignored": self.pause_ignored}

    def watchdog_record(self, now: float) -> dict[str, Any]:
        """``state`` (``stormed``: in the action; ``operational``), ``detections``,
        ``restorations``, ``stormed_s`` (lab s in the action), ``restore_lag_s`` (lab s from the
        end of the last PAUSE to the last restoration: the restoration time plus up to a cycle)."""
        run = (now - self.wd_since) if self.wd_since is not None else 0.0
        return {"state": "stormed" if self.wd_since is not None else "operational",
                "detections": self.wd_detections, "restorations": self.wd_restorations,
                "stormed_s": round(self.wd_s + run, 6),
                "restore_lag_s": (round(self.restore_lag_s, 6)
                                  if self.restore_lag_s is not None else None)}


@dataclass
class _Switch:
    name: str
    ports: list[Port]
    feeders: dict[str, tuple[str, str]]  # S's port -> (neighbour, its port facing S)
    pauses: int = 0
    paused: set[tuple[str, str]] = field(default_factory=set)
    max_depth: int = 0
    #: dynamic threshold (shared buffer only): limit rewrites, the lowest limit written, the
    #: most the switch's lossless queues held at once (bytes)
    dt_writes: int = 0
    dt_min_limit: int | None = None
    max_used: int = 0


def _headroom_bytes(sw_ports: list[Port]) -> int:
    """Emulation headroom of a switch, bytes: :data:`REACTION_BUDGET_S` x its ports' rates."""
    return int(REACTION_BUDGET_S * sum(p.rate_bps for p in sw_ports) / 8)


#: The kick frame's EtherType (IEEE 802 local experimental) and destination (the 802.1 MAC
#: control group, never forwarded): the peer drops it.
KICK_ETHERTYPE = b"\x88\xb5"
KICK_DST = bytes.fromhex("0180c2000001")
#: The cycles after a RESUME in which the port gets a kick frame. tc applies a change when its
#: writer process runs, and a kick that comes before the change restarts nothing. A server NIC
#: whose sender is held (its socket buffer full: railab.traffic.load) gets no other frame that
#: would run its queue, so it stayed stopped until the tbf's paused-rate watchdog: with kicks in
#: the first 3 cycles only, all four same-leaf senders of an 8:1 incast sent nothing for
#: 0.2-0.5 lab s after RESUMEs in 3 of 7 runs, while the spines (which keep receiving) ran, and
#: they came out with the DCQCN rates they had recovered meanwhile (issue 28; none longer than
#: 0.1 s in 11 runs since). Spaced out, so a change applied late waits at most ~60 % longer than
#: it took.
KICK_AT = (1, 2, 3, 5, 8, 13, 21, 34)


def raise_priority() -> str:
    """Put this process under SCHED_RR at :data:`RT_PRIORITY` (children inherit it), else nice
    -10; returns what it got (``"SCHED_RR 10"``, ``"nice -10"`` or ``"normal"``)."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(RT_PRIORITY))
        return f"SCHED_RR {RT_PRIORITY}"
    except (OSError, AttributeError):
        pass
    try:
        os.nice(-10)
        return "nice -10"
    except OSError:
        return "normal"


class PfcLoop:
    """The switch agent's loop (module docstring): ECN marking probability from each switch
    port's real lossless depth, and with ``pfc`` the PAUSE/RESUME emulation. ``netns_of``: node
    -> namespace; ``state_path``: where the counts go; ``stop``: set to end :meth:`run`."""

    def __init__(self, plan: AgentPlan, state_path: Path) -> None:
        self.plan, self.pfc, self.state_path = plan, plan.pfc, Path(state_path)
        self.netns_of = plan.namespaces.__getitem__
        self.pause_bytes, self.resume_bytes = plan.pause_bytes, plan.resume_bytes
        self.ll = plan.lossless_handle
        all_ports = list(plan.ports)
        self.by_key = {p.key: p for p in all_ports}
        by_node: dict[str, list[Port]] = {}
        for p in all_ports:
            by_node.setdefault(p.node, []).append(p)
        self.switches = [
            _Switch(name=n, ports=ps, feeders={p.interface: (p.peer, p.peer_interface)
                                               for p in ps})
            for n, ps in sorted(by_node.items()) if ps[0].switch]
        self.ports = {p.key: _PortState() for p in all_ports}
        self.stop = threading.Event()
        self.cycles = 0
        self.max_cycle_s = 0.0
        self._tc: dict[str, subprocess.Popen] = {}
        self._nft: dict[str, subprocess.Popen] = {}
        self._ecn: dict[tuple[str, str], float] = {}
        self.ecn_updates = 0
        self._kick: dict[tuple[str, str], int] = {}
        self._kick_socks: dict[tuple[str, str], Any] = {}
        #: emulation headroom per switch while the loop runs, bytes
        self.extra = {sw.name: _headroom_bytes(sw.ports) for sw in self.switches} if self.pfc else {}
        #: the dynamic-threshold limit written per switch port (shared buffer), bytes
        self.limit: dict[tuple[str, str], int] = {}
        self._readers: dict[str, QdiscReader] = {}
        self._ifname: dict[str, dict[int, str]] = {}
        self.started = time.monotonic()
        self.busy = False
        #: cycles that ran while busy (a queue at Kmin/4 or more, or a port paused) and the time
        #: from each one's start to the next one's (its reaction time), s
        self.busy_cycles = 0
        self.busy_s = 0.0
        #: the PFC watchdog (None: off) and the lab's storms: (node, port) -> fault id
        self.wd = plan.watchdog
        self.storms: dict[tuple[str, str], str] = {}
        self._storm_stamp: tuple[int, int] | None = None
        self._wd_stamp: tuple[int, int] | None = None
        #: ports whose PFC is on another priority (node, port) -> priority, and their file's stamp
        self.misprio: dict[tuple[str, str], int] = {}
        self._prio_stamp: tuple[int, int] | None = None
        #: when the loop next looks for storms whose link was reset (:func:`settle_storms`)
        self._settle_at = 0.0
        #: the sender NICs' PAUSE board (PFC on and a run directory; :class:`NicPauseBoard`)
        self.board: NicPauseBoard | None = None

    # -- tc writers -----------------------------------------------------------------------------
    # The writers run in their own session: a terminal's Ctrl-C reaches the traffic command's
    # process group (the agent included, which then restores every limit, rate and ECN set
    # through them in close()), not the writers; they exit at EOF when the agent closes their
    # stdin or dies. (In the agent's group, Ctrl-C killed them first and the restore went into
    # dead pipes: a pool-size limit and a 100 % marking set stayed behind.)
    def _tc_write(self, node: str, line: str) -> None:
        p = self._tc.get(node)
        if p is None:
            p = subprocess.Popen(exec_argv(self.netns_of(node), ["tc", "-force", "-batch", "-"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True, start_new_session=True)
            self._tc[node] = p
        p.stdin.write(line)
        p.stdin.flush()

    def _line(self, key: tuple[str, str]) -> str:
        """The port's tbf line: paused while the agent or a storm holds it, unless the
        watchdog acts on it (then line rate, and with ``drop`` a one-byte limit)."""
        p, ps = self.by_key[key], self.ports[key]
        tripped = ps.wd_since is not None and self.wd is not None and self.wd.action != "alert"
        held = ps.paused_since is not None or key in self.storms
        return tbf_line(p, self.ll, paused=held and not tripped,
                        extra=self.extra.get(p.node, 0), limit=self.limit.get(key),
                        drop=tripped and self.wd is not None and self.wd.action == "drop")

    def _refresh_storms(self) -> None:
        """Re-read the lab's storms when their file changed (one stat a cycle): a port a storm
        starts holding is paused at once, one it stops holding is RESUMEd (and kicked)."""
        if not self.plan.run_dir:
            return
        try:
            stt = os.stat(Path(self.plan.run_dir) / STORM_FILE)
            stamp = (stt.st_mtime_ns, stt.st_size)
        except OSError:
            stamp = None
        if stamp == self._storm_stamp:
            return
        self._storm_stamp = stamp
        new = {k: v for k, v in read_storms(self.plan.run_dir).items() if k in self.by_key}
        old, self.storms = self.storms, new
        for key in sorted(set(old) ^ set(new)):
            self._tc_write(key[0], self._line(key))
            if key not in new:
                self._kick[key] = 0
            if self.board is not None:  # a storm is not on the board; the agent's own PAUSE is
                self.board.set(key, key not in new and self.ports[key].paused_since is not None)

    def _refresh_priorities(self) -> None:
        """Re-read the ports whose PFC is on another priority when their file changed."""
        if not self.plan.run_dir:
            return
        try:
            stt = os.stat(Path(self.plan.run_dir) / PFC_PRIORITY_FILE)
            stamp = (stt.st_mtime_ns, stt.st_size)
        except OSError:
            stamp = None
        if stamp != self._prio_stamp:
            self._prio_stamp = stamp
            self.misprio = read_pfc_priorities(self.plan.run_dir)

    def _refresh_watchdog(self) -> None:
        """Re-read the watchdog setting when its file changed (:func:`set_watchdog`); when it
        stops, every queue in its action is lossless again at once."""
        if not self.plan.run_dir:
            return
        path = Path(self.plan.run_dir) / WATCHDOG_FILE
        try:
            stt = os.stat(path)
            stamp = (stt.st_mtime_ns, stt.st_size)
        except OSError:
            stamp = None
        if stamp == self._wd_stamp:
            return
        self._wd_stamp = stamp
        self.wd = read_watchdog(self.plan.run_dir)
        now = time.monotonic()
        for key, ps in self.ports.items():
            ps.stuck_since = ps.clear_since = None
            if ps.wd_since is not None and self.wd is None:
                ps.wd_s += now - ps.wd_since
                ps.wd_since = None
                ps.wd_restorations += 1
                self._tc_write(key[0], self._line(key))
                self._kick[key] = 0

    def _watch(self, sw: _Switch, depth: dict[str, int], now: float) -> None:
        """The PFC watchdog over switch ``sw``'s lossless queues (``depth``: port -> backlog,
        bytes; :class:`Watchdog`): a queue held paused with bytes in it for the detection time
        goes into the action; one no PAUSE (the agent's or a storm's) has held for the
        restoration time comes back."""
        wd = self.wd
        for port, d in depth.items():
            key = (sw.name, port)
            ps = self.ports[key]
            held = ps.paused_since is not None or key in self.storms
            if ps.wd_since is None:
                if not (held and d > 0):
                    ps.stuck_since = None
                elif ps.stuck_since is None:
                    ps.stuck_since = now
                elif now - ps.stuck_since >= wd.detection_time_ms / 1000:
                    ps.wd_since, ps.stuck_since, ps.clear_since = now, None, None
                    ps.wd_detections += 1
                    line = self._line(key)
                    if wd.action == "drop":  # the queued packets are discarded too: a new tbf
                        ll = self.ll & 0xFFFF
                        line = (f"qdisc del dev {port} parent 1:{ll:x} handle {ll:x}:\n"
                                + line.replace("qdisc change ", "qdisc add ", 1))
                    self._tc_write(sw.name, line)
                    self._kick[key] = 0
            elif held:
                ps.clear_since = None
            elif ps.clear_since is None:
                ps.clear_since = now
            elif now - ps.clear_since >= wd.restoration_time_ms / 1000:
                ps.wd_s += now - ps.wd_since
                ps.restore_lag_s = now - ps.clear_since
                ps.wd_since = ps.clear_since = None
                ps.wd_restorations += 1
                self._tc_write(sw.name, self._line(key))

    # -- nft writers ----------------------------------------------------------------------------
    # One ``nft -i`` per node that applies marks, started in open() and confirmed ready before
    # the loop reports ready. Started on a node's first mark, as until 2026-12-05, a writer's
    # start fell in the incast's onset (a process, a netns, nft's start: 3-5 ms on an idle
    # machine, 54-56 ms measured while a load run held the cores), and no CE came in the first
    # 0.1 lab s of any 2:1 run: the queue passed Kmax and reached 3.7-4.1 MB, the senders took
    # 4-5 cuts at the onset where the per-packet reference takes 3, and a 2:1 run's last half
    # found them still climbing back (port 93-96 % used, the reference 99 %).
    def _nft_spawn(self, node: str) -> subprocess.Popen:
        p = self._nft.get(node)
        if p is None:
            p = subprocess.Popen(exec_argv(self.netns_of(node), ["nft", "-i"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, start_new_session=True)
            self._nft[node] = p
        return p

    def _nft_write(self, node: str, text: str) -> None:
        p = self._nft_spawn(node)
        p.stdin.write(text)
        p.stdin.flush()

    def _nft_ack(self, timeout: float) -> list[str]:
        """Ask every nft writer to list the ECN table and wait (at most ``timeout`` s in all) for
        each whole answer (through the table's closing brace, so no stale output is left for
        the next ask): an answer means every command written before it has run. Returns the
        nodes whose writer did not answer (dead, or stuck)."""
        pending: dict[int, tuple[str, bytearray]] = {}
        for node, p in self._nft.items():
            try:
                p.stdin.write(f"list table netdev {NFT_TABLE}\n")
                p.stdin.flush()
                pending[p.stdout.fileno()] = (node, bytearray())
            except (OSError, ValueError):
                pass
        asked = {node for node, _ in pending.values()}
        missing = [n for n in self._nft if n not in asked]
        deadline = time.monotonic() + timeout
        while pending and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(pending), [], [], left)
            for fd in ready:
                node, buf = pending[fd]
                chunk = os.read(fd, 65536)  # the raw pipe: the text wrapper is never read
                if not chunk:  # EOF: the writer is gone
                    missing.append(node)
                    del pending[fd]
                    continue
                buf += chunk
                if buf.endswith(b"\n}\n"):  # the table's own closing brace (inner ones are indented)
                    del pending[fd]
        return sorted(missing + [node for node, _ in pending.values()])

    def _mark(self, node: str, port: str, depth: int) -> None:
        """Keep ``node:port``'s marking probability at the WRED value of ``depth`` (steps of
        0.1 %, so a steady queue costs no update)."""
        pl = self.plan
        prob = wred_probability(pl.kmin_bytes, pl.kmax_bytes, pl.pmax_percent, depth)
        prob = 1.0 if prob >= 1 else round(prob, 3)
        if self._ecn.get((node, port), 0.0) != prob:
            self._ecn[(node, port)] = prob
            p = self.by_key[(node, port)]  # marked at the peer's ingress: on dequeue
            self._nft_write(p.peer, ecn_set_update(p.peer_interface, prob))
            self.ecn_updates += 1

    def _set(self, key: tuple[str, str], paused: bool, now: float) -> None:
        ps = self.ports[key]
        if paused == (ps.paused_since is not None):
            return
        if paused:
            ps.pause_events += 1
            ps.paused_since = now
            self._kick.pop(key, None)
        else:
            ps.resume_events += 1
            ps.paused_s += now - (ps.paused_since or now)
            ps.paused_since = None
            if key not in self.storms:
                self._kick[key] = 0
        if key in self.storms:  # a storm holds the port either way: nothing to change (a tbf
            return              # rewritten refills its bucket: two frames got out each time)
        if self.board is not None:  # a sender NIC's QPs stop (or go on) now; its tbf follows
            self.board.set(key, paused, now)
        self._tc_write(key[0], self._line(key))

    def _send_kicks(self, *, now: bool = False) -> None:
        """A tiny frame out of each just-resumed port in the cycles :data:`KICK_AT` after its
        RESUME (every pending one with ``now``): an enqueue makes the kernel run the port's
        qdisc at once (a tbf changed back to full rate otherwise waits for its old watchdog, up
        to seconds at the paused rate)."""
        for key in list(self._kick):
            n = self._kick[key] = self._kick[key] + 1
            if n >= KICK_AT[-1]:
                del self._kick[key]
            if not now and n not in KICK_AT:
                continue
            sock = self._kick_socks.get(key)
            if sock is None:
                with entered(self.netns_of(key[0])):
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                sock.bind((key[1], 0))
                self._kick_socks[key] = sock
            try:
                sock.send(KICK_DST + sock.getsockname()[4] + KICK_ETHERTYPE
                          + b"railab-pfc-kick".ljust(46, b"\0"))
            except OSError:
                pass

    # -- the loop -------------------------------------------------------------------------------
    def open(self) -> None:
        """Read the lab's storms, open the qdisc readers, grow the switches' lossless limits by
        the headroom (a stormed port stays paused), hold any stormed server NIC, and start
        an nft writer on every node that applies a switch port's marks (the peer end,
        :func:`railab.testbed.capacity.mark_point`), ready before the loop reports ready.
        Raises RailabError naming the nodes whose writer did not start."""
        self._refresh_storms()
        self._refresh_watchdog()
        if self.plan.run_dir:
            NicPauseBoard.remove(self.plan.run_dir)  # an earlier agent's, if it was killed
            if self.pfc:
                self.board = NicPauseBoard.create(
                    self.plan.run_dir, [k for k, p in self.by_key.items() if not p.switch])
        for sw in self.switches:
            ns = self.netns_of(sw.name)
            self._readers[sw.name] = QdiscReader(ns)
            idx = ifindexes(ns, [p.interface for p in sw.ports], sw.name)
            self._ifname[sw.name] = {i: k[1] for k, i in idx.items()}
            self._tc_write(sw.name, "".join(self._line(p.key) for p in sw.ports))
        for node in sorted({p.peer for sw in self.switches for p in sw.ports}):
            self._nft_spawn(node)
        late = self._nft_ack(START_TIMEOUT_S)
        if late:
            raise RailabError(f"switch agent: nft did not start in {', '.join(late)} within "
                              f"{START_TIMEOUT_S:g} s (is nftables installed, the lab up?)")

    def cycle(self) -> None:
        """One pass over every switch: read its lossless backlogs, PAUSE or RESUME."""
        if self.plan.run_dir and time.monotonic() >= self._settle_at:
            # a storm whose link was reset leaves the storm file: _refresh_storms RESUMEs it
            self._settle_at = time.monotonic() + SETTLE_EVERY_S
            settle_storms(self.plan.run_dir, resume=False)
        self._refresh_storms()
        self._refresh_watchdog()
        self._refresh_priorities()
        if self._kick:
            self._send_kicks()
        self.busy = False
        for sw in self.switches:
            names = self._ifname[sw.name]
            depth = {names[i]: b for i, b in self._readers[sw.name].backlogs(self.ll).items()
                     if i in names}
            now = time.monotonic()
            for port, d in depth.items():
                self._mark(sw.name, port, d)
            if self.plan.pool_bytes:
                self._threshold(sw, depth)
            if self.wd is not None:
                self._watch(sw, depth, now)
            top = max(depth.values(), default=0)
            sw.max_depth = max(sw.max_depth, top)
            self.busy = self.busy or top >= self.plan.kmin_bytes // 4 or bool(sw.paused)
            if not self.pfc:
                continue
            if not sw.paused and top >= self.pause_bytes:
                hot = {port for port, d in depth.items() if d >= self.pause_bytes}
                sw.pauses += 1
                for port, feeder in sw.feeders.items():
                    if port in hot:
                        continue
                    if (sw.name, port) in self.misprio or feeder in self.misprio:
                        # PFC on another priority at one end: no PAUSE for the lossless one is
                        # sent, or none honoured; the feeder keeps sending
                        self.ports[feeder].pause_ignored += 1
                        continue
                    self._set(feeder, True, now)
                    sw.paused.add(feeder)
            elif sw.paused and top <= self.resume_bytes:
                for feeder in sorted(sw.paused):
                    self._set(feeder, False, now)
                sw.paused.clear()

    def _threshold(self, sw: _Switch, depth: dict[str, int]) -> None:
        """Shared buffer: keep each lossless queue's tail-drop limit of switch ``sw`` at the
        dynamic threshold of the pool's free space (:func:`dt_limit`; ``depth``: port -> its
        lossless backlog, bytes). A port is rewritten only when its limit moved by
        :data:`DT_QUANTUM` of the pool and its queue holds an eighth of the limit: a queue far
        under its limit cannot reach it within one cycle."""
        pl = self.plan
        used = sum(depth.values())
        sw.max_used = max(sw.max_used, used)
        limit = dt_limit(pl.pool_bytes, pl.alpha, used)
        step = max(int(pl.pool_bytes * DT_QUANTUM), 1)
        lines = []
        for port, d in depth.items():
            key = (sw.name, port)
            cur = self.limit.get(key, self.by_key[key].lossless_limit)
            if abs(limit - cur) < step or 8 * d < min(limit, cur):
                continue
            self.limit[key] = limit
            sw.dt_writes += 1
            sw.dt_min_limit = limit if sw.dt_min_limit is None else min(sw.dt_min_limit, limit)
            lines.append(self._line(key))
        if lines:
            self._tc_write(sw.name, "".join(lines))

    def write_state(self, *, ready: bool = True, final: bool = False) -> None:
        now = time.monotonic()
        doc = {
            "lab": self.plan.lab, "pid": os.getpid(), "ready": ready, "final": final,
            "pfc": self.pfc, "ecn_updates": self.ecn_updates,
            "priority": getattr(self, "priority", "normal"),
            "pause_bytes": self.pause_bytes, "resume_bytes": self.resume_bytes,
            "reaction_budget_s": REACTION_BUDGET_S, "cycles": self.cycles,
            "max_cycle_s": round(self.max_cycle_s, 6),
            "mean_cycle_s": round((now - self.started) / self.cycles, 6) if self.cycles else None,
            "busy_cycles": self.busy_cycles,
            "mean_busy_cycle_s": (round(self.busy_s / self.busy_cycles, 6)
                                  if self.busy_cycles else None),
            "switches": {sw.name: {"pauses": sw.pauses, "max_lossless_backlog_bytes": sw.max_depth,
                                   "headroom_bytes": _headroom_bytes(sw.ports),
                                   "max_lossless_used_bytes": sw.max_used if self.plan.pool_bytes else None,
                                   "dt_writes": sw.dt_writes,
                                   "dt_min_limit_bytes": sw.dt_min_limit}
                         for sw in self.switches},
            "shared_buffer": ({"pool_bytes": self.plan.pool_bytes, "alpha": self.plan.alpha}
                              if self.plan.pool_bytes else None),
            "ports": {f"{k[0]}:{k[1]}": ps.record(now) for k, ps in self.ports.items()
                      if ps.pause_events or ps.pause_ignored},
            "watchdog": asdict(self.wd) if self.wd is not None else None,
            "watchdog_ports": {f"{k[0]}:{k[1]}": ps.watchdog_record(now)
                               for k, ps in self.ports.items() if ps.wd_detections},
            "storms": sorted(f"{k[0]}:{k[1]}" for k in self.storms),
        }
        write_atomic(self.state_path, json.dumps(doc, indent=1, sort_keys=True))

    def run(self, parent: int | None = None) -> None:
        """Open, loop until :attr:`stop` is set (or ``parent`` dies), then RESUME everything,
        restore the limits and write the final state."""
        self.priority = raise_priority()
        try:
            self.open()
            self.started = time.monotonic()
            self.write_state()
            last = time.monotonic()
            prev: float | None = None  # the start of the last cycle, if it was busy
            while not self.stop.is_set():
                t0 = time.monotonic()
                if prev is not None:
                    self.busy_cycles += 1
                    self.busy_s += t0 - prev
                self.cycle()
                self.cycles += 1
                t1 = time.monotonic()
                self.max_cycle_s = max(self.max_cycle_s, t1 - t0)
                if t1 - last >= STATE_EVERY_S:
                    self.write_state()
                    last = t1
                    if parent is not None and os.getppid() != parent:
                        break
                prev = t0 if self.busy else None
                self.stop.wait(POLL_S if self.busy or self._kick else IDLE_POLL_S)
        finally:
            self.close()

    def close(self) -> None:
        now = time.monotonic()
        for key, ps in self.ports.items():
            if ps.paused_since is not None:
                try:
                    self._set(key, False, now)
                except OSError:
                    pass
        if self.board is not None:
            self.board.close()
            self.board = None
        self.extra = {}
        self.limit = {}
        for ps in self.ports.values():
            if ps.wd_since is not None:
                ps.wd_s += now - ps.wd_since
                ps.wd_since = None
        for key in self.storms:  # a stormed server NIC (the switches' ports are rewritten below)
            if not self.by_key[key].switch:
                try:
                    self._tc_write(key[0], self._line(key))
                except OSError:
                    pass
        for key, prob in list(self._ecn.items()):
            if prob:
                p = self.by_key[key]
                try:
                    self._nft_write(p.peer, ecn_set_update(p.peer_interface, 0.0))
                except OSError:
                    pass
        self._ecn.clear()
        for sw in self.switches:
            sw.paused.clear()
            if sw.name in self._tc:
                try:
                    self._tc_write(sw.name, "".join(self._line(p.key) for p in sw.ports))
                except OSError:
                    pass
        procs = list(self._tc.values()) + list(self._nft.values())
        for p in procs:  # at EOF each writer runs what it was given, then exits
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
        self._tc.clear()
        self._nft.clear()
        if self._kick:  # the writers have exited: every change is in place
            self._send_kicks(now=True)
        for sock in self._kick_socks.values():
            sock.close()
        self._kick_socks.clear()
        for r in self._readers.values():
            r.close()
        self._readers.clear()
        try:
            self.write_state(final=True)
        except OSError:
            pass


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
    queue), ~1.3 ms for the same dump; :meth:`backlogs` reads less still. Setup and changes
    still go through tc / pyroute2."""

    def __init__(self, ns: str) -> None:
        with entered(ns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
        self._sock.bind((0, 0))
        self._seq = 0

    def _dump(self) -> Iterator[tuple[bytes, int, int]]:
        """One RTM_GETQDISC dump: ``(buffer, offset, length)`` of each RTM_NEWQDISC message that
        answers it, read off the socket until NLMSG_DONE (consume it whole). OSError when the
        kernel answers with an error (the namespace is gone)."""
        self._seq += 1
        seq = self._seq
        self._sock.send(struct.pack("=LHHLLBxxxiLLL", 36, _RTM_GETQDISC,
                                    _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0, 0, 0, 0, 0, 0))
        hdr = _NLMSGHDR.unpack_from
        while True:
            data = self._sock.recv(1 << 20)
            off, n = 0, len(data)
            while off + 16 <= n:
                ln, typ, _fl, mseq, _pid = hdr(data, off)
                if ln < 16 or typ == _NLMSG_DONE:
                    return
                if typ == _NLMSG_ERROR:
                    err = struct.unpack_from("=i", data, off + 16)[0]
                    if err:
                        raise OSError(-err, "RTM_GETQDISC dump failed")
                    return
                if typ == 36 and mseq == seq:  # RTM_NEWQDISC
                    yield data, off, ln
                off += (ln + 3) & ~3

    def read(self) -> list[QdiscStat]:
        """One dump: a :class:`QdiscStat` per qdisc. OSError when the namespace is gone."""
        return [_parse_qdisc(data, off + 16, off + ln) for data, off, ln in self._dump()]

    def backlogs(self, parent: int) -> dict[int, int]:
        """One dump, but only the backlog (bytes) of each qdisc whose parent is ``parent`` (a tc
        handle, e.g. the lossless class ``1:13``), by interface index: the switch agent's
        per-cycle read. It skips every other qdisc's attributes and reads only the queue
        statistics of the ones it wants: 1.4 ms for the 8 switches of mini-lossless against
        4.6-4.9 ms for :meth:`read` (measured, 2026-12-04, idle machine); the agent's cycle is
        its PAUSE/RESUME reaction time. OSError when the namespace is gone."""
        out: dict[int, int] = {}
        tcm = _TCMSG_IDX_PARENT.unpack_from
        for data, off, ln in self._dump():
            index, _handle, par = tcm(data, off + 20)
            if par == parent:
                backlog = _stats2_backlog(data, off + 36, off + ln)
                if backlog is not None:
                    out[index] = backlog
        return out

    def close(self) -> None:
        self._sock.close()


_NLMSGHDR = struct.Struct("=LHHLL")
_TCMSG_IDX_PARENT = struct.Struct("=iLL")  # tcmsg's ifindex, handle, parent (after 4 bytes)
_NLATTR = struct.Struct("=HH")
_U32 = struct.Struct("=L")


def _stats2_backlog(data: bytes, off: int, end: int) -> int | None:
    """The ``backlog`` of the TCA_STATS2 / TCA_STATS_QUEUE attribute among a qdisc message's
    attributes ``data[off:end]`` (struct gnet_stats_queue: qlen, backlog, ...), or None."""
    attr = _NLATTR.unpack_from
    while off + 4 <= end:
        alen, atyp = attr(data, off)
        if alen < 4:
            return None
        if atyp & 0x3FFF == _TCA_STATS2:
            o, e = off + 4, off + alen
            while o + 4 <= e:
                sl, st_ = attr(data, o)
                if sl < 4:
                    return None
                if st_ == _TCA_STATS_QUEUE:
                    return _U32.unpack_from(data, o + 8)[0]
                o += (sl + 3) & ~3
            return None
        off += (alen + 3) & ~3
    return None


def _parse_qdisc(data: bytes, off: int, end: int) -> QdiscStat:
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


def main(argv: list[str] | None = None) -> int:
    """``python -m railab.testbed.pfc --plan PATH --state PATH [--parent PID] [--no-pfc]``: run
    the loop until SIGTERM/SIGINT (or the parent process exits)."""
    ap = argparse.ArgumentParser(prog="python -m railab.testbed.pfc",
                                 description="PFC emulation loop of a railab lab")
    ap.add_argument("--plan", required=True, help="the AgentPlan JSON (AgentPlan.to_json)")
    ap.add_argument("--state", required=True, help="state file (under the lab's run directory)")
    ap.add_argument("--parent", type=int, default=None, help="exit when this process is gone")
    ap.add_argument("--no-pfc", action="store_true", help="ECN marking only, no PAUSE")
    a = ap.parse_args(argv)
    plan = AgentPlan.from_json(json.loads(Path(a.plan).read_text()))
    if a.no_pfc:
        plan = replace(plan, pfc=False)
    loop = PfcLoop(plan, Path(a.state))

    def _stop(*_: object) -> None:
        loop.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    loop.run(parent=a.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
