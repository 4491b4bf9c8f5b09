"""The switch agent of a lab with ``lab.capacity``: ECN marking and the PFC emulation.

One process (``python -m railab.testbed.pfc``, its own GIL; started and stopped per traffic run
by :func:`pfc_session`) runs a control loop over every switch: each cycle reads the
lossless-queue backlog of every switch port (one raw rtnetlink qdisc dump per switch,
:class:`railab.testbed.capacity.QdiscReader`) and

* **ECN**: keeps each port's marking probability at the WRED value of its depth
  (:func:`railab.testbed.capacity.ecn_probability`; the nft set the egress chain reads), so
  marks follow the real queue;
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
  arrives); a paused server NIC's queue grows (its limit is large; the load engine reads it to
  stop sending). The control class (BGP, BFD, ND, CNP) is never touched, so a pause never flaps
  a session. Once every lossless queue of ``S`` is at or under ``QosProfile.pfc_resume_bytes``
  (xOFF - xON lower), ``S`` RESUMEs them (full rate again) and sends a kick frame out of each so
  the kernel runs the queue at once.

Each change is one line written to a long-lived ``tc -batch`` (PFC) or ``nft -i`` (ECN) process
in the node's namespace (no round trip in the loop; they run on the other core).

What differs from a switch (docs/congestion.md): the pause decision is per switch (any lossless
queue over xOFF pauses all its other neighbours), not per ingress port and priority group; the
loop's reaction time (one cycle: ~5 ms on an idle machine, tens of ms on a loaded one; at the
default time scale of 10000 that is 0.5 us to a few us of fabric time) lets more bytes arrive
after the threshold than a switch's sub-us response would, so while PFC runs each switch's
lossless queue limit grows by an **emulation headroom** (:data:`REACTION_BUDGET_S` x the sum of
the switch's port rates) beyond ``buffer_bytes``; it is restored when the loop stops. Counts per
paused port: PAUSE and RESUME events and the paused time (lab seconds), written to
``/run/railab/<lab>/pfc.json`` every :data:`STATE_EVERY_S` and at exit
(:func:`railab.testbed.capacity.pfc_state` reads it), with the loop's cycle times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import capacity
from railab.testbed import state as st
from railab.testbed.namespaces import entered, exec_argv
from railab.topologies.labspec import LabSpec

#: Lab seconds of arrivals the emulation headroom absorbs after the pause threshold: the loop's
#: worst cycle plus the time tc takes to apply a change, with margin.
REACTION_BUDGET_S = 0.05
#: How often the loop rewrites its state file, s.
STATE_EVERY_S = 0.1
#: Pause between two cycles of the loop, s (keeps a core for the load engine).
POLL_S = 0.001
#: Seconds pfc_session waits for the loop to report ready, and for it to stop.
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


@dataclass
class _PortState:
    pause_events: int = 0
    resume_events: int = 0
    paused_s: float = 0.0
    paused_since: float | None = None

    def record(self, now: float) -> dict[str, Any]:
        run = (now - self.paused_since) if self.paused_since is not None else 0.0
        return {"pause_events": self.pause_events, "resume_events": self.resume_events,
                "paused_s": round(self.paused_s + run, 6), "paused": self.paused_since is not None}


@dataclass
class _Switch:
    name: str
    ports: list[capacity.Port]
    feeders: dict[str, tuple[str, str]]  # S's port -> (neighbour, its port facing S)
    pauses: int = 0
    paused: set[tuple[str, str]] = field(default_factory=set)
    max_depth: int = 0


def _headroom_bytes(sw_ports: list[capacity.Port]) -> int:
    """Emulation headroom of a switch, bytes: :data:`REACTION_BUDGET_S` x its ports' rates."""
    return int(REACTION_BUDGET_S * sum(p.rate_bps for p in sw_ports) / 8)


def _tbf_line(p: capacity.Port, spec: LabSpec, *, paused: bool, extra: int) -> str:
    """``tc -batch`` line setting port ``p``'s lossless tbf (paused or not, limit + ``extra``)."""
    ll = capacity.lossless_class(spec.qos) & 0xFFFF
    return (f"qdisc change dev {p.interface} parent 1:{ll:x} handle {ll:x}: "
            f"{capacity.lossless_qdisc(p, paused=paused, extra_bytes=extra)}\n")


#: The kick frame's EtherType (IEEE 802 local experimental) and destination (the 802.1 MAC
#: control group, never forwarded): the peer drops it.
KICK_ETHERTYPE = b"\x88\xb5"
KICK_DST = bytes.fromhex("0180c2000001")
#: Cycles after a RESUME during which the port gets a kick frame (tc applies asynchronously).
KICK_CYCLES = 3


def reset(spec: LabSpec, netns_of: Callable[[str], str]) -> None:
    """Undo any emulation state a killed loop left behind: every lossless class back to its
    rate and limit (``buffer_bytes``), every ECN set empty (no marks). Idempotent."""
    by_node: dict[str, list[capacity.Port]] = {}
    for p in capacity.ports(spec):
        by_node.setdefault(p.node, []).append(p)
    jobs = {}
    for node, ps in by_node.items():
        script = "".join(_tbf_line(p, spec, paused=False, extra=0) for p in ps)
        jobs[node] = (exec_argv(netns_of(node), ["tc", "-batch", "-"]), script)
    capacity.run_batches(jobs, "tc (PFC reset)")
    capacity.run_batches({node: (exec_argv(netns_of(node), ["nft", "-f", "-"]),
                                 "".join(capacity.ecn_set_update(p.interface, 0.0) for p in ps))
                          for node, ps in by_node.items() if ps[0].switch}, "nft (ECN reset)")


class PfcLoop:
    """The switch agent's loop (module docstring): ECN marking probability from each switch
    port's real lossless depth, and with ``pfc`` the PAUSE/RESUME emulation. ``netns_of``: node
    -> namespace; ``state_path``: where the counts go; ``stop``: set to end :meth:`run`."""

    def __init__(self, spec: LabSpec, netns_of: Callable[[str], str], state_path: Path,
                 *, pfc: bool = True) -> None:
        self.pfc = pfc
        if not capacity.enabled(spec):
            raise UsageError(f"lab {spec.name} has no lab.capacity: nothing to pause")
        self.spec, self.netns_of, self.state_path = spec, netns_of, Path(state_path)
        qos = spec.qos
        self.pause_bytes, self.resume_bytes = qos.pfc_pause_bytes, qos.pfc_resume_bytes
        self.ll = capacity.lossless_class(qos)
        all_ports = capacity.ports(spec)
        self.by_key = {p.key: p for p in all_ports}
        by_node: dict[str, list[capacity.Port]] = {}
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
        self.extra = {sw.name: _headroom_bytes(sw.ports) for sw in self.switches} if pfc else {}
        self._readers: dict[str, capacity.QdiscReader] = {}
        self._ifname: dict[str, dict[int, str]] = {}
        self.started = time.monotonic()

    # -- tc writers -----------------------------------------------------------------------------
    def _tc_write(self, node: str, line: str) -> None:
        p = self._tc.get(node)
        if p is None:
            p = subprocess.Popen(exec_argv(self.netns_of(node), ["tc", "-force", "-batch", "-"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            self._tc[node] = p
        p.stdin.write(line)
        p.stdin.flush()

    def _line(self, key: tuple[str, str]) -> str:
        p = self.by_key[key]
        return _tbf_line(p, self.spec, paused=self.ports[key].paused_since is not None,
                         extra=self.extra.get(p.node, 0))

    def _nft_write(self, node: str, text: str) -> None:
        p = self._nft.get(node)
        if p is None:
            p = subprocess.Popen(exec_argv(self.netns_of(node), ["nft", "-i"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            self._nft[node] = p
        p.stdin.write(text)
        p.stdin.flush()

    def _mark(self, node: str, port: str, depth: int) -> None:
        """Keep ``node:port``'s marking probability at the WRED value of ``depth`` (steps of
        0.1 %, so a steady queue costs no update)."""
        prob = capacity.ecn_probability(self.spec.qos, depth)
        prob = 1.0 if prob >= 1 else round(prob, 3)
        if self._ecn.get((node, port), 0.0) != prob:
            self._ecn[(node, port)] = prob
            self._nft_write(node, capacity.ecn_set_update(port, prob))
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
            self._kick[key] = KICK_CYCLES
        self._tc_write(key[0], self._line(key))

    def _send_kicks(self) -> None:
        """A tiny frame out of each just-resumed port: an enqueue makes the kernel run the
        port's qdisc at once (a tbf changed back to full rate otherwise waits for its old
        watchdog, up to a second at the paused rate)."""
        import socket

        for key in list(self._kick):
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
            self._kick[key] -= 1
            if self._kick[key] <= 0:
                del self._kick[key]

    # -- the loop -------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the qdisc readers, grow the switches' lossless limits by the headroom."""
        for sw in self.switches:
            ns = self.netns_of(sw.name)
            self._readers[sw.name] = capacity.QdiscReader(ns)
            idx = capacity.ifindexes(ns, [p.interface for p in sw.ports], sw.name)
            self._ifname[sw.name] = {i: k[1] for k, i in idx.items()}
            self._tc_write(sw.name, "".join(self._line(p.key) for p in sw.ports))

    def cycle(self) -> None:
        """One pass over every switch: read its lossless backlogs, PAUSE or RESUME."""
        if self._kick:
            self._send_kicks()
        for sw in self.switches:
            names = self._ifname[sw.name]
            depth = {names[q.index]: q.backlog for q in self._readers[sw.name].read()
                     if q.parent == self.ll and q.index in names}
            now = time.monotonic()
            for port, d in depth.items():
                self._mark(sw.name, port, d)
            top = max(depth.values(), default=0)
            sw.max_depth = max(sw.max_depth, top)
            if not self.pfc:
                continue
            if not sw.paused and top >= self.pause_bytes:
                hot = {port for port, d in depth.items() if d >= self.pause_bytes}
                sw.pauses += 1
                for port, feeder in sw.feeders.items():
                    if port not in hot:
                        self._set(feeder, True, now)
                        sw.paused.add(feeder)
            elif sw.paused and top <= self.resume_bytes:
                for feeder in sorted(sw.paused):
                    self._set(feeder, False, now)
                sw.paused.clear()

    def write_state(self, *, ready: bool = True, final: bool = False) -> None:
        now = time.monotonic()
        doc = {
            "lab": self.spec.name, "pid": os.getpid(), "ready": ready, "final": final,
            "pfc": self.pfc, "ecn_updates": self.ecn_updates,
            "pause_bytes": self.pause_bytes, "resume_bytes": self.resume_bytes,
            "reaction_budget_s": REACTION_BUDGET_S, "cycles": self.cycles,
            "max_cycle_s": round(self.max_cycle_s, 6),
            "mean_cycle_s": round((now - self.started) / self.cycles, 6) if self.cycles else None,
            "switches": {sw.name: {"pauses": sw.pauses, "max_lossless_backlog_bytes": sw.max_depth,
                                   "headroom_bytes": _headroom_bytes(sw.ports)}
                         for sw in self.switches},
            "ports": {f"{k[0]}:{k[1]}": ps.record(now) for k, ps in self.ports.items()
                      if ps.pause_events},
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, self.state_path)

    def run(self, parent: int | None = None) -> None:
        """Open, loop until :attr:`stop` is set (or ``parent`` dies), then RESUME everything,
        restore the limits and write the final state."""
        try:
            self.open()
            self.started = time.monotonic()
            self.write_state()
            last = time.monotonic()
            while not self.stop.is_set():
                t0 = time.monotonic()
                self.cycle()
                self.cycles += 1
                t1 = time.monotonic()
                self.max_cycle_s = max(self.max_cycle_s, t1 - t0)
                if t1 - last >= STATE_EVERY_S:
                    self.write_state()
                    last = t1
                    if parent is not None and os.getppid() != parent:
                        break
                self.stop.wait(POLL_S)
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
        self.extra = {}
        for (node, port), prob in list(self._ecn.items()):
            if prob:
                try:
                    self._nft_write(node, capacity.ecn_set_update(port, 0.0))
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
        for p in procs:
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
        if self._kick:
            self._send_kicks()
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


# ---- the session a traffic run opens ----------------------------------------------------------
@dataclass
class PfcSession:
    """What :func:`pfc_session` yields: ``enabled``; ``state()`` reads the loop's record
    (``{}`` when off); ``pid`` of the loop (None when off)."""

    lab: str
    enabled: bool
    pid: int | None = None

    @property
    def state_path(self) -> Path:
        return st.lab_dir(self.lab) / capacity.PFC_STATE_FILE

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}


@contextmanager
def pfc_session(spec: LabSpec, netns_of: Callable[[str], str],
                enabled: bool | None = None) -> Iterator[PfcSession]:
    """Run the switch agent for the block (a traffic run): ECN marking from the real queue
    depths always, the PFC emulation when ``enabled`` (default the lab's ``qos.capacity.pfc``;
    off: tail drops only). The agent is a process of its own, recorded in
    ``LabState.agents["pfc"]``; the block starts once it watches every switch, and its end stops
    it (RESUME everything, limits back, marking off) and removes the record. Any state a killed
    agent left behind is undone first (:func:`reset`). The counts of the session (``pfc.json``)
    start at zero and stay readable after it (:func:`railab.testbed.capacity.port_counters`
    with ``run_dir``).

    UsageError for a lab without ``lab.capacity``; RailabError when the loop does not start
    (its stderr in the message)."""
    if not capacity.enabled(spec):
        raise UsageError(f"lab {spec.name} has no lab.capacity: PFC needs port queues (use an "
                         "intent with lab.capacity, e.g. mini-lossless)")
    on = spec.qos.capacity.pfc if enabled is None else bool(enabled)
    sess = PfcSession(lab=spec.name, enabled=on)
    reset(spec, netns_of)
    try:
        sess.state_path.unlink()
    except FileNotFoundError:
        pass
    log = st.lab_dir(spec.name) / "pfc.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "railab.testbed.pfc", "--lab", spec.name,
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
                raise RailabError(f"lab {spec.name}: the PFC emulation did not start: "
                                  f"{log.read_text().strip()[-400:] or 'no output'}")
            time.sleep(0.02)
        yield sess
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                reset(spec, netns_of)
        _record_agent(spec.name, None)


def _record_agent(lab: str, pid: int | None) -> None:
    rec = st.load(lab)
    if rec is None:
        return
    agents = dict(rec.agents)
    if pid is None:
        agents.pop("pfc", None)
    else:
        agents["pfc"] = pid
    rec.agents = agents
    st.save(rec)


def main(argv: list[str] | None = None) -> int:
    """``python -m railab.testbed.pfc --lab LAB --state PATH [--parent PID]``: run the loop until
    SIGTERM/SIGINT (or the parent process exits)."""
    ap = argparse.ArgumentParser(prog="python -m railab.testbed.pfc",
                                 description="PFC emulation loop of a railab lab")
    ap.add_argument("--lab", required=True)
    ap.add_argument("--state", required=True, help="state file (under the lab's run directory)")
    ap.add_argument("--parent", type=int, default=None, help="exit when this process is gone")
    ap.add_argument("--no-pfc", action="store_true", help="ECN marking only, no PAUSE")
    a = ap.parse_args(argv)
    rec = st.load(a.lab)
    if rec is None or not rec.labdir:
        print(f"lab {a.lab} is not up", file=sys.stderr)
        return 2
    spec = LabSpec.load(rec.labdir)
    loop = PfcLoop(spec, rec.namespaces.__getitem__, Path(a.state), pfc=not a.no_pfc)

    def _stop(*_: object) -> None:
        loop.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    loop.run(parent=a.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
