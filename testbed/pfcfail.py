"""PFC's failure modes on a lab with ``lab.capacity`` (issue 45): the ``pfc-storm`` and
``pfc-priority`` faults (:func:`inject_pfc_priority`) and the cyclic-buffer-dependency deadlock
scenario. The PFC watchdog that breaks both is the switch
agent's (:class:`railab.testbed.pfc.Watchdog`); docs/congestion.md "PFC failure modes".

``pfc-storm`` (``railab fault LAB pfc-storm srv2:eth1``): the end named (a server NIC or a
switch port) keeps sending PAUSE (IEEE 802.1Qbb PFC frames, XOFF with the maximum quanta) on
the lossless priority, so its link peer's egress queue of that priority stops for as long as
the storm lasts. veth links carry no PFC frames, so the storm is emulated as the PFC emulation
emulates any PAUSE: the peer port's lossless ``tbf`` is held at the paused rate
(:data:`railab.testbed.pfc.PAUSED_RATE_BPS`) and the port is listed in the lab's storm file
(:data:`railab.testbed.pfc.STORM_FILE`) so that a switch agent (a traffic run's) keeps it
paused, lets its watchdog see it, and :func:`railab.testbed.capacity.reset` leaves it paused.
Traffic bound for the stormed port piles up in that queue; once it passes xOFF the switch
PAUSEs its other neighbours (the emulation's congestion spreading) and flows that never touch
the storming NIC stop too: the storm's victims. Heal: the port is RESUMEd and leaves the file.
A reset of the storming NIC or port ends the storm too, as it ends a stuck NIC's: its link
taken down (and up) at either end (:func:`railab.testbed.pfc.settle_storms`, run by railab
exec, the ``pfc`` check and the switch agent); the fault record stays until healed.

The deadlock (:func:`deadlock_loop`): a cyclic buffer dependency needs traffic whose path
turns around, e.g. a routing loop (a static route left behind, a misconfigured
redistribution; Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, section
4.2) or a leaf-spine-leaf-spine path rerouted around a cut link. :func:`deadlock_loop` installs
such a loop for one /32 over two leaves and two spines (leaf A -> spine 1 -> leaf B -> spine 2
-> leaf A, kernel routes beside FRR's); lossless traffic sent to it goes round the loop until
its TTL runs out, each of the four queues fills past xOFF, each switch PAUSEs the one before it,
and once the traffic stops the four queues stay full and paused for good: nothing in the cycle
can send. The watchdog breaks it (each queue held paused with bytes for the detection time is
dropped, the cycle drains).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from railab.errors import RailabError, UsageError
from railab.testbed import capacity as cap
from railab.testbed import faults as F  # faults imports this module too: F is used at call time only
from railab.testbed import state as st
from railab.testbed.namespaces import entered, exec_argv
from railab.testbed.pfc import (
    PFC_PRIORITY_FILE,
    Port,
    forget_storm_link,
    read_pfc_priorities,
    read_storms,
    remember_storm_link,
    set_watchdog,
    tbf_line,
    write_storms,
)
from railab.topologies.atomicfile import write_atomic
from railab.topologies.labspec import LabSpec

if TYPE_CHECKING:
    from railab.testbed.faults import _Lab
    from railab.testbed.state import FaultRecord

#: A destination no lab prefix covers (TEST-NET-2, RFC 5737), for the deadlock's routing loop.
LOOP_DESTINATION = "198.51.100.45"


def _port(spec: LabSpec, node: str, interface: str) -> Port:

    for p in cap.ports(spec):
        if p.key == (node, interface):
            return p
    raise UsageError(f"{node}:{interface} is not a shaped port of lab {spec.name}")


def _agent_running(lab: _Lab) -> bool:
    pid = lab.record.agents.get("pfc")
    return bool(pid) and Path(f"/proc/{pid}").exists()


def _hold(lab: _Lab, node: str, port: str, paused: bool) -> None:
    """Set ``node:port``'s lossless tbf paused or not (static limit), unless a switch agent
    runs: it reads the storm file within a cycle and owns the tbf (its headroom, watchdog)."""

    if _agent_running(lab):
        return
    p = _port(lab.spec, node, port)
    res = subprocess.run(exec_argv(lab.ns(node), ["tc", "-batch", "-"]),
                         input=tbf_line(p, cap.lossless_class(lab.spec.qos), paused=paused, extra=0),
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RailabError(f"{node}: tc refused the lossless queue's change on {port}: "
                          f"{res.stderr.strip()[:300]}")


def inject_pfc_storm(lab: _Lab, node_a, node_b, port, params) -> FaultRecord:
    """The ``pfc-storm`` fault (module docstring): ``node_a``'s end (``srv2:eth1``, or the
    first link between ``node_a`` and ``node_b``; ``end=`` picks the other end) sends PAUSE
    without end; its peer's lossless queue is held. UsageError on a lab without
    ``lab.capacity`` (no lossless queue to pause) or an element another fault holds."""

    if not lab.spec.qos.capacity.enabled:
        raise UsageError(f"pfc-storm needs a lab with lab.capacity (lossless queues and PFC), "
                         f"e.g. mini-lossless; lab {lab.name} has none")
    node, p, peer, pp = F._link_end(lab, node_a, node_b, port, params)
    F._no_more("pfc-storm", params)
    F._busy(lab, {(node, p), (peer, pp)})
    rec = F._new(lab, "pfc-storm", node, p, peer, pp, params={"paused": f"{peer}:{pp}"},
                 note=f"{node}:{p} keeps sending PFC PAUSE on the lossless priority "
                      f"(TC {lab.spec.qos.roce_tc}): {peer}:{pp} cannot send it")
    run_dir = st.lab_dir(lab.name)
    storms = read_storms(run_dir)
    storms[(peer, pp)] = rec.id
    write_storms(run_dir, storms)
    _hold(lab, peer, pp, True)
    # the storm ends when its link is reset (either end down and up): railab.testbed.pfc.settle_storms
    remember_storm_link(run_dir, (peer, pp), ns=lab.ns(peer), fault=rec.id,
                        resume=tbf_line(_port(lab.spec, peer, pp), cap.lossless_class(lab.spec.qos),
                                        paused=False, extra=0))
    return rec


def heal_pfc_storm(lab: _Lab, rec: FaultRecord) -> None:
    """End the storm: the peer's queue leaves the storm file and is RESUMEd. Idempotent."""
    run_dir = st.lab_dir(lab.name)
    storms = {k: v for k, v in read_storms(run_dir).items() if v != rec.id}
    if run_dir.is_dir():
        write_storms(run_dir, storms)
        forget_storm_link(run_dir, (rec.peer_node, rec.peer_port))
    _hold(lab, rec.peer_node, rec.peer_port, False)


def inject_pfc_priority(lab: _Lab, node_a, node_b, port, params) -> FaultRecord:
    """The ``pfc-priority`` fault: PFC enabled on another priority than the lossless one on
    ``node_a``'s end (``priority``, default the lossless priority + 1 modulo 8), as a QoS
    misconfiguration does (SONiC ``PORT_QOS_MAP|<port> pfc_enable``). The port neither sends
    PAUSE for RoCE's priority nor honours one, so under congestion its peer (or itself) keeps
    sending and the lossless queue it feeds can overflow: "lossless" becomes lossy there.
    Emulated by listing the port in :data:`railab.testbed.pfc.PFC_PRIORITY_FILE` (the agent
    skips its PAUSEs); nothing in the kernel changes. UsageError on a lab without
    ``lab.capacity``, for a priority outside 0-7 or equal to the lossless one, or an element
    another fault holds."""

    if not lab.spec.qos.capacity.enabled:
        raise UsageError(f"pfc-priority needs a lab with lab.capacity (lossless queues and PFC), "
                         f"e.g. mini-lossless; lab {lab.name} has none")
    node, p, peer, pp = F._link_end(lab, node_a, node_b, port, params)
    lossless = lab.spec.qos.roce_tc
    prio = F._pop(params, "priority", (lossless + 1) % 8, int)
    F._no_more("pfc-priority", params)
    if not 0 <= prio <= 7 or prio == lossless:
        raise UsageError(f"priority {prio}: give 0-7 other than the lossless priority {lossless}")
    _port(lab.spec, node, p)
    F._busy(lab, {(node, p), (peer, pp)})
    rec = F._new(lab, "pfc-priority", node, p, peer, pp, params={"priority": prio},
                 note=f"{node}:{p} has PFC on priority {prio} instead of {lossless}: it neither "
                      f"sends nor honours PAUSE for RoCE (link to {peer}:{pp})")
    run_dir = st.lab_dir(lab.name)
    prios = read_pfc_priorities(run_dir)
    prios[(node, p)] = prio
    write_atomic(run_dir / PFC_PRIORITY_FILE,
                 json.dumps({f"{n}:{q}": v for (n, q), v in sorted(prios.items())}, indent=1))
    return rec


def heal_pfc_priority(lab: _Lab, rec: FaultRecord) -> None:
    """PFC back on the lossless priority: the port leaves the file. Idempotent."""

    run_dir = st.lab_dir(lab.name)
    prios = {k: v for k, v in read_pfc_priorities(run_dir).items() if k != (rec.node, rec.port)}
    if run_dir.is_dir():
        write_atomic(run_dir / PFC_PRIORITY_FILE,
                     json.dumps({f"{n}:{q}": v for (n, q), v in sorted(prios.items())}, indent=1))


# ---- the deadlock scenario -----------------------------------------------------------------
@dataclass(frozen=True)
class Loop:
    """A routing loop for :data:`LOOP_DESTINATION` through four switches: ``hops`` is the
    cycle's egress ports ``(node, interface)`` in order (leaf A -> spine 1 -> leaf B -> spine 2
    -> back to leaf A); ``entries``: a server NIC ``(server, interface)`` on leaf A and one on
    leaf B that inject into the loop; ``destination``: the /32 that loops."""

    hops: tuple[tuple[str, str], ...]
    entries: tuple[tuple[str, str], ...]
    destination: str = LOOP_DESTINATION


def loop_plan(spec: LabSpec) -> Loop:
    """The deadlock's cycle on ``spec``: the first two leaves of rail 1 in different groups or
    the same (any two leaves sharing two spines), the first two spines they share. UsageError
    when the lab has no such pair."""
    leaves = [n.name for n in spec.nodes if n.role == "leaf"]
    up: dict[str, dict[str, str]] = {}  # leaf -> spine -> the leaf's port to it
    down: dict[str, dict[str, str]] = {}  # spine -> leaf -> the spine's port to it
    for leaf in leaves:
        for port, peer, peer_port in spec.links_of(leaf):
            if spec.node(peer).role == "spine":
                up.setdefault(leaf, {}).setdefault(peer, port)
                down.setdefault(peer, {}).setdefault(leaf, peer_port)
    for i, a in enumerate(leaves):
        for b in leaves[i + 1:]:
            shared = sorted(set(up.get(a, {})) & set(up.get(b, {})))
            na = [n for n in spec.nics if n.leaf == a]
            nb = [n for n in spec.nics if n.leaf == b]
            if len(shared) >= 2 and na and nb:
                s1, s2 = shared[:2]
                return Loop(hops=((a, up[a][s1]), (s1, down[s1][b]), (b, up[b][s2]),
                                  (s2, down[s2][a])),
                            entries=((na[0].server, na[0].interface), (nb[0].server, nb[0].interface)))
    raise UsageError(f"lab {spec.name} has no two leaves sharing two spines: no deadlock cycle")


def _link_local(ns: str, ifname: str) -> str:
    out = subprocess.run(exec_argv(ns, ["ip", "-6", "-j", "addr", "show", "dev", ifname, "scope", "link"]),
                         capture_output=True, text=True, check=True).stdout
    for a in json.loads(out or "[]"):
        for info in a.get("addr_info", []):
            if info.get("family") == "inet6":
                return info["local"]
    raise RailabError(f"{ifname} in {ns} has no IPv6 link-local address")


@contextmanager
def deadlock_loop(spec: LabSpec, netns_of: Callable[[str], str]) -> Iterator[Loop]:
    """Install :func:`loop_plan`'s routing loop for the block (an IPv4 /32 via each next hop's
    IPv6 link-local, RFC 5549, as FRR's unnumbered BGP routes; plus the entry NIC's route to it
    via its leaf, on each entry NIC), remove it at the end. What is queued in the cycle stays queued: only the
    watchdog or a RESUME drains it. RailabError when ``ip`` refuses a route."""
    loop = loop_plan(spec)
    peers = spec.peers
    added: list[tuple[str, list[str]]] = []
    try:
        for node, port in loop.hops:
            peer, peer_port = peers[(node, port)]
            nh = _link_local(netns_of(peer), peer_port)
            argv = ["ip", "route", "replace", f"{loop.destination}/32", "via", "inet6", nh, "dev", port]
            _ip(netns_of(node), argv)
            added.append((node, ["ip", "route", "del", f"{loop.destination}/32"]))
        for srv, nic in loop.entries:
            gw = _link_local(netns_of(peers[(srv, nic)][0]), peers[(srv, nic)][1])
            _ip(netns_of(srv), ["ip", "route", "replace", f"{loop.destination}/32", "via", "inet6",
                                gw, "dev", nic])
            added.append((srv, ["ip", "route", "del", f"{loop.destination}/32"]))
        yield loop
    finally:
        for node, argv in reversed(added):
            subprocess.run(exec_argv(netns_of(node), argv), capture_output=True, text=True)


def _ip(ns: str, argv: list[str]) -> None:
    res = subprocess.run(exec_argv(ns, argv), capture_output=True, text=True)
    if res.returncode != 0:
        raise RailabError(f"{' '.join(argv)} in {ns}: {res.stderr.strip()[:300]}")


__all__ = ["LOOP_DESTINATION", "Loop", "deadlock_loop", "heal_pfc_priority", "heal_pfc_storm",
           "inject_pfc_priority", "inject_pfc_storm", "loop_plan"]


# ---- measured scenarios (tests/test_pfc_failures.py, scripts/pfc_failures.py) ---------------
#: The sender of the scenarios, run in a server's namespace: ``dst src mbps seconds start_at
#: size``: UDP to port 4791 with DSCP 26 (the lossless class) and ECT(0), paced in 2 ms bursts,
#: from a wall-clock start; prints the datagrams sent. A full NIC queue (its paused tbf) blocks
#: nothing: the socket buffer is forced to 64 MiB and sends that fail are counted as sent.
SENDER = r"""
import socket, sys, time
dst, src = sys.argv[1], sys.argv[2]
mbps, secs, start_at, size = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, (26 << 2) | 2)
s.setsockopt(socket.SOL_SOCKET, 32, 64 << 20)
s.bind((src, 0)); s.setblocking(False)
gap = size * 8 / (mbps * 1e6); n = 0
time.sleep(max(0.0, start_at - time.time())); t0 = time.monotonic()
while (now := time.monotonic()) - t0 < secs:
    while n < int((now - t0) / gap) + 1:
        try:
            s.sendto(b"x" * size, (dst, 4791))
        except OSError:
            pass
        n += 1
    time.sleep(0.002)
print(n)
"""
#: UDP payload of the scenarios' datagrams, bytes (few, large packets: little CPU).
PAYLOAD = 4000


class Arrivals:
    """Arrival times (``time.monotonic()``, s) of RoCEv2 (UDP 4791) packets at a server NIC,
    read off an AF_PACKET socket in a thread; a context manager."""

    def __init__(self, ns: str, ifname: str) -> None:
        import socket
        import threading


        with entered(ns):
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
        self._sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self._sock.bind((ifname, 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self.times: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time

        while not self._stop.is_set():
            try:
                d = self._sock.recv(2048)
            except OSError:
                continue
            if len(d) > 23 and d[9] == 17 and d[22:24] == b"\x12\xb7":
                self.times.append(time.monotonic())

    def __enter__(self) -> Arrivals:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without an arrival within ``[start, end]``, s (the whole span when
    nothing arrived)."""
    pts = [start] + [t for t in times if start <= t <= end] + [end]
    return max(b - a for a, b in zip(pts, pts[1:], strict=False))


def _send(spec: LabSpec, netns_of: Callable[[str], str], src, dst, mbps: float, seconds: float,
          start_at: float) -> subprocess.Popen:
    import sys

    return subprocess.Popen(exec_argv(netns_of(src.server),
                                      [sys.executable, "-c", SENDER, str(dst.address.ip),
                                       str(src.address.ip), str(mbps), str(seconds), str(start_at),
                                       str(PAYLOAD)]),
                            stdout=subprocess.PIPE, text=True)


def _first_after(times: list[float], t: float) -> float | None:
    later = [x for x in times if x > t]
    return min(later) if later else None


def storm_victims(lab: str, spec: LabSpec, netns_of: Callable[[str], str], watchdog, *,
                  off_s: float = 1.5, on_s: float = 1.5) -> dict:
    """The storm scenario, measured (lab seconds throughout): on the first leaf with four
    server NICs, the third NIC storms (``pfc-storm``, injected here, healed at the end); the
    first NIC sends 97.5 % of the port rate to it (its queue at the leaf fills past xOFF and the
    leaf PAUSEs its other neighbours) and the second sends 50 % of the port rate to the fourth:
    the victim, whose path never crosses the stormed port. A switch agent runs with PFC on and
    the watchdog off for ``off_s`` of traffic, then with ``watchdog``
    (:class:`railab.testbed.pfc.Watchdog`, started live as ``pfcwd start`` would) for ``on_s``;
    then the storm is healed.

    Returns ``stall_off_s`` (the victim's longest time without a packet while the watchdog was
    off, from 0.1 s after the start), ``stuck_s`` (how long the victim had had no packet when
    the watchdog started), ``recovered_s`` (from the watchdog's start to the victim's
    next packet; None: none came), ``stall_on_s`` (the longest gap from that packet to the
    end), ``victim_sent``/``victim_rx`` (received once its NIC's backlog drained, or 0.5 s
    without progress) and ``culprit_sent``/``culprit_rx`` (packets),
    ``pauses`` (the leaf's PAUSE decisions), ``watchdog`` (the agent's per-port record, with
    ``restore_lag_s``: from the last PAUSE's end, the heal, to the port's restoration) and
    the ports involved."""
    import time


    leaf = next(n.name for n in spec.nodes if n.role == "leaf"
                and sum(1 for nic in spec.nics if nic.leaf == n.name) >= 4)
    a, b, storm, d = [nic for nic in spec.nics if nic.leaf == leaf][:4]
    rate = spec.qos.capacity.port_rate_mbps
    run_dir = st.lab_dir(lab)
    rec = F.inject(lab, "pfc-storm", f"{storm.server}:{storm.interface}")
    out: dict = {"stormed": f"{leaf}:{storm.leaf_port}", "storming": f"{storm.server}:{storm.interface}",
                 "victim": f"{b.server}:{b.interface} -> {d.server}:{d.interface}"}
    try:
        with cap.pfc_session(spec, netns_of, enabled=True, watchdog=False) as sess, \
                Arrivals(netns_of(d.server), d.interface) as vic, \
                Arrivals(netns_of(storm.server), storm.interface) as cul:
            start_at = time.time() + 1.0
            t0 = time.monotonic() + 1.0
            procs = [_send(spec, netns_of, a, storm, 0.975 * rate, off_s + on_s, start_at),
                     _send(spec, netns_of, b, d, 0.5 * rate, off_s + on_s, start_at)]
            time.sleep(max(0.0, t0 + off_s - time.monotonic()))
            set_watchdog(run_dir, watchdog)
            t_wd = time.monotonic()
            sent = [int(p.communicate()[0] or 0) for p in procs]
            t1 = time.monotonic()
            # the victim NIC's backlog (held while it was paused) drains after the senders end
            seen, still = len(vic.times), time.monotonic()
            while len(vic.times) < sent[1] and time.monotonic() - still < 0.5:
                time.sleep(0.05)
                if len(vic.times) != seen:
                    seen, still = len(vic.times), time.monotonic()
            first = _first_after(vic.times, t_wd)
            before = [x for x in vic.times if x <= t_wd]
            out.update(stall_off_s=round(longest_gap(vic.times, t0 + 0.1, t_wd), 3),
                       stuck_s=round(t_wd - max(before), 3) if before else None,
                       recovered_s=round(first - t_wd, 3) if first else None,
                       stall_on_s=round(longest_gap(vic.times, first, t1), 3) if first else None,
                       victim_rx=len(vic.times), victim_sent=sent[1],
                       culprit_rx=len(cul.times), culprit_sent=sent[0])
            F.heal(lab, rec.id)
            end = time.monotonic() + 3 * watchdog.restoration_time_ms / 1000 + 1.0
            while time.monotonic() < end:  # the agent writes its record every 0.1 s
                wp = sess.state().get("watchdog_ports", {}).get(out["stormed"], {})
                if wp.get("restorations"):
                    break
                time.sleep(0.05)
        state = sess.state()
    finally:
        set_watchdog(run_dir, None)
        if any(f.id == rec.id for f in F.list_faults(lab)):
            F.heal(lab, rec.id)
    out["watchdog"] = state.get("watchdog_ports", {})
    out["pauses"] = state.get("switches", {}).get(leaf, {}).get("pauses")
    return out


def deadlock_run(spec: LabSpec, netns_of: Callable[[str], str], watchdog, *,
                 seconds: float = 4.0, hold: float = 1.0, wait: float = 3.0) -> dict:
    """The deadlock scenario, measured (lab seconds): a switch agent with PFC on and the
    watchdog off; :func:`deadlock_loop` installed; each entry NIC sends 97.5 % of its port rate
    of lossless traffic into the loop (a packet goes round until its TTL of 64 runs out, ~16
    times) until the cycle is full: every one of its four queues has reached xOFF
    (``qos.pfc_pause_bytes``: it has paused its feeder; seen in a 50 ms reading of the queue, or
    as the agent's PAUSE of the cycle port that feeds it, which catches a crossing between two
    readings) and none has drained to xON since
    (``qos.pfc_resume_bytes``: none resumed it), in one 50 ms reading (~1 s on an idle host), or
    ``seconds`` passed (``filled_s``: when, None for never). Not "all at xOFF at once": a queue
    that paused its feeder keeps draining until the next hop pauses it in turn, so a full cycle
    sits between xON and xOFF (CI: 4.11-4.25 MB around a 4.19 MB xOFF, deadlocked, and no reading
    with all four above it); the senders stop, the loop's routes are removed; ``hold`` s later the cycle's four
    queues are read (``deadlocked``: each still holds bytes and is paused: nothing will ever
    move them); then ``watchdog`` is started live and the queues read every 50 ms until all
    four are empty (``broken_s``: from the watchdog's start; None: not within ``wait``).

    Returns ``loop`` (the cycle's egress ports), ``filled_s``, ``max_bytes`` (the most each queue held
    while the traffic ran), ``held_bytes`` and ``paused`` (after the hold), ``deadlocked``,
    ``broken_s`` and ``watchdog`` (the agent's per-port record)."""
    import time


    rate = spec.qos.capacity.port_rate_mbps
    loop = loop_plan(spec)
    keys = [f"{n}:{p}" for n, p in loop.hops]
    srcs = [n for n in spec.nics if (n.server, n.interface) in loop.entries]
    run_dir = st.lab_dir(spec.name)

    class _Dst:  # the loop's destination, as a NIC-like target for _send
        class address:
            ip = LOOP_DESTINATION

    def backlog(smp) -> dict[str, int]:
        return {k: c.lossless_backlog_bytes for k, c in
                ((f"{n}:{p}", c) for (n, p), c in smp.sample().items()) if k in keys}

    try:
        with cap.pfc_session(spec, netns_of, enabled=True, watchdog=False) as sess, \
                cap.CapacitySampler(spec, netns_of, nodes=sorted({n for n, _ in loop.hops})) as smp:
            peak = dict.fromkeys(keys, 0)
            xoff, xon = spec.qos.pfc_pause_bytes, spec.qos.pfc_resume_bytes
            filled = None
            with deadlock_loop(spec, netns_of):
                start_at = time.time() + 1.0
                t_start = time.monotonic() + 1.0
                procs = [_send(spec, netns_of, src, _Dst, 0.975 * rate, seconds, start_at)
                         for src in srcs]
                while any(proc.poll() is None for proc in procs):
                    now = backlog(smp)
                    for k, v in now.items():
                        peak[k] = max(peak[k], v)
                    # reached xOFF: seen by a reading, or by the agent, which pauses a queue's
                    # feeder (the cycle port before it, keys[i - 1]) when its switch reaches
                    # xOFF: a crossing between two 50 ms readings counts too (the agent's record
                    # is read only for a queue no reading saw there)
                    unseen = [i for i, k in enumerate(keys) if peak[k] < xoff]
                    ports = sess.state().get("ports", {}) if unseen else {}
                    reached = all(ports.get(keys[i - 1], {}).get("paused") for i in unseen)
                    if len(now) == len(keys) and reached and all(v >= xon for v in now.values()):
                        filled = round(time.monotonic() - t_start, 3)
                        for proc in procs:
                            proc.terminate()
                        break
                    time.sleep(0.05)
                for proc in procs:
                    proc.communicate()
            time.sleep(hold)
            held = backlog(smp)
            ports = sess.state().get("ports", {})
            # a cycle port is paused when the next switch PAUSEs it (the agent pauses a
            # congested switch's feeders: the cycle port itself)
            paused = {k: bool(ports.get(k, {}).get("paused")) for k in keys}
            set_watchdog(run_dir, watchdog)
            t_wd = time.monotonic()
            broken = None
            while time.monotonic() < t_wd + wait:
                if not any(backlog(smp).values()):
                    broken = round(time.monotonic() - t_wd, 3)
                    break
                time.sleep(0.05)
            time.sleep(0.2)  # one more state write of the agent
            state = sess.state()
    finally:
        set_watchdog(run_dir, None)
    return {"loop": keys, "max_bytes": peak, "held_bytes": held, "paused": paused, "filled_s": filled,
            "deadlocked": all(held[k] > 0 for k in keys) and all(paused.values()),
            "broken_s": broken, "watchdog": state.get("watchdog_ports", {})}


def priority_run(lab: str, spec: LabSpec, netns_of: Callable[[str], str], *,
                 seconds: float = 1.5) -> dict:
    """The ``pfc-priority`` scenario, measured: on the first leaf with three server NICs, the
    first NIC gets PFC on the wrong priority (injected here, healed at the end); it and the
    second send 97.5 % of the port rate each to the third (2:1) for ``seconds`` with PFC on.
    Returns per sending NIC (``node:port``) the agent's ``pause_events`` and ``pause_ignored``
    (PAUSEs the leaf decided but the misconfigured port did not take), the leaf port's
    ``lossless_dropped`` packets and most queued bytes (``max_bytes``), and ``misconfigured``
    / ``correct`` (the two senders)."""
    import time


    leaf = next(n.name for n in spec.nodes if n.role == "leaf"
                and sum(1 for nic in spec.nics if nic.leaf == n.name) >= 3)
    a, b, c = [nic for nic in spec.nics if nic.leaf == leaf][:3]
    rate = spec.qos.capacity.port_rate_mbps
    rec = F.inject(lab, "pfc-priority", f"{a.server}:{a.interface}")
    port = (leaf, c.leaf_port)
    try:
        with cap.pfc_session(spec, netns_of, enabled=True) as sess, \
                cap.CapacitySampler(spec, netns_of, nodes=[leaf]) as smp:
            before = smp.sample()
            start_at = time.time() + 1.0
            procs = [_send(spec, netns_of, s, c, 0.975 * rate, seconds, start_at) for s in (a, b)]
            peak = 0
            while any(p.poll() is None for p in procs):
                peak = max(peak, smp.sample()[port].lossless_backlog_bytes)
                time.sleep(0.05)
            for p in procs:
                p.communicate()
            after = smp.sample()
            state = sess.state()
    finally:
        F.heal(lab, rec.id)
    ports = state.get("ports", {})
    out = {"misconfigured": f"{a.server}:{a.interface}", "correct": f"{b.server}:{b.interface}",
           "leaf_port": f"{port[0]}:{port[1]}", "max_bytes": peak,
           "lossless_dropped": after[port].lossless_dropped - before[port].lossless_dropped}
    for nic in (a, b):
        k = f"{nic.server}:{nic.interface}"
        out[k] = {"pause_events": ports.get(k, {}).get("pause_events", 0),
                  "pause_ignored": ports.get(k, {}).get("pause_ignored", 0)}
    return out
