"""The web console's live view of a lab (``railab ui``): ONE observation per interval, shared by
every open page, and the lab's event log.

A :class:`LabWatch` runs one thread per watched lab while at least one page follows it (it stops
``IDLE_STOP_S`` after the last page left). Each tick it publishes a :class:`Snapshot` (JSON,
encoded once, handed to every page):

* **links**: one netlink socket per node namespace subscribed to ``RTNLGRP_LINK`` (the kernel's
  link notifications, ``include/uapi/linux/rtnetlink.h``); a namespace is re-read (one
  ``RTM_GETLINK`` dump, :class:`railab.testbed.rtnl.Rtnl`) only when it sent a notification, and
  a change wakes the thread at once (no waiting for the tick: the page sees a link go down within
  tens of ms). Every ``RESYNC_S`` all namespaces are re-read in case a notification was lost. The
  up rule is :func:`railab.testbed.rtnl.link_status`, the checks' one rule. At idle this costs
  nothing but the tick.
* **BGP sessions**: ``show bgp ... summary json`` (:data:`railab.checks.frr.CMD_SUMMARY`) through
  the lab's executor (the daemon's vty socket on netns labs), for the switches next to a link
  that just changed, then round-robin over the other switches within ``bgp_budget_s`` of each
  tick; on ``mini`` every switch every tick, on the 1024-GPU fabric each one every few seconds
  (the snapshot says how old the oldest reading is: ``sessions.age_s``).
* **daemons**: the FRR PIDs of the lab's state record (``/proc/<pid>``); **faults**: the lab's
  fault records (``railab.testbed.faults``; hidden exercise faults are not there).
* **capacity labs** (``lab.capacity``): per shaped port the transmit rate (Gb/s, measured from
  the qdisc byte counters over the tick, lab time), queue depth (bytes queued now), drops, PFC
  pauses, and every ``CE_EVERY`` ticks the CE marks (one ``nft`` process per switch), through
  :class:`railab.testbed.capacity.CapacitySampler`.

Events (link up/down, session up/down, daemon died/back, fault injected/healed, and what pages
did: check runs, faults, heals) are kept in memory, newest last, with Unix timestamps. A fault
event while an exercise runs on the lab is ``secret``: trainee pages never get it (the CLI hides
an exercise's faults the same way).
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from railab.checks import frr as FRR
from railab.testbed import capacity as C
from railab.testbed import lb as LB
from railab.testbed import state as st
from railab.testbed.labref import LabRef, resolve
from railab.testbed.namespaces import entered, netns_path
from railab.testbed.rtnl import Rtnl, link_status
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import link_id

#: seconds between two observations (the issue asks for at least one per second)
INTERVAL_S = 1.0
#: a watch with no page following it stops after this many seconds
IDLE_STOP_S = 30.0
#: every namespace's links are re-read this often even without a notification
RESYNC_S = 30.0
#: CE marks (an nft process per switch) every this many ticks on a capacity lab
CE_EVERY = 5
#: events kept per lab
EVENTS_KEPT = 500
#: RTMGRP_LINK (include/uapi/linux/rtnetlink.h): the link notification group, as a bind mask
RTMGRP_LINK = 0x1


@dataclass
class Event:
    """One line of a lab's event log: ``seq`` (1, 2, ... per lab), ``t`` (Unix time, s),
    ``kind`` (``link``, ``session``, ``daemon``, ``fault``, ``check``, ``action``, ``lab``),
    ``text``, ``level`` (``info``, ``bad``, ``good``), ``secret`` (names a hidden exercise fault:
    never sent to a trainee page)."""

    seq: int
    t: float
    kind: str
    text: str
    level: str = "info"
    secret: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "t": self.t, "kind": self.kind, "text": self.text, "level": self.level}


@dataclass
class Snapshot:
    """One published observation. ``data``: the trainer's view; ``public``: the trainee's (no
    fault records while an exercise runs, no secret events); both JSON-encoded once."""

    version: int
    data: dict[str, Any]
    trainer_json: bytes = b""
    trainee_json: bytes = b""


#: the commands whose output is the live state (links, sessions, daemons): a trainer who switched
#: one of them off for an exercise hides the live state from the trainee's page too
LIVE_STATE_COMMANDS = ("status", "graph", "inspect")
#: event kinds that are live state
LIVE_EVENT_KINDS = ("link", "session", "daemon")


def exercise_public(lab: str) -> dict[str, Any] | None:
    """The public record of ``lab``'s running (not revealed) exercise, or None
    (railab.testbed.exercise; names no fault)."""
    from railab.testbed import exercise as store

    pub = store.load_public(lab)
    return pub if pub and not pub.get("revealed") else None


def exercise_running(lab: str) -> bool:
    """True when ``lab`` runs a training exercise that is not revealed yet."""
    return exercise_public(lab) is not None


def live_state_hidden(pub: dict[str, Any] | None) -> bool:
    """True when a running exercise switched off a command that shows the live state."""
    return bool(pub) and bool(set(LIVE_STATE_COMMANDS) & set(pub.get("disabled", [])))


class _LinkFeed:
    """Link notifications and dumps for one node namespace: a multicast socket (RTMGRP_LINK) and
    an :class:`Rtnl` for dumps, both opened inside the namespace."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        with entered(ns):
            self.mc = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, 0)
            try:
                self.mc.bind((0, RTMGRP_LINK))
                self.rtnl = Rtnl()
            except OSError:
                self.mc.close()
                raise

    def drain(self) -> bool:
        """Read every pending notification; True when there was one."""
        got = False
        while True:
            try:
                if not self.mc.recv(1 << 16):
                    return got
                got = True
            except BlockingIOError:
                return got
            except OSError:  # ENOBUFS: notifications lost; a re-read covers them
                got = True

    def close(self) -> None:
        self.mc.close()
        self.rtnl.close()


@dataclass
class LabWatch:
    """The shared live observation of one running lab (see the module doc). ``lab``: a name
    of :func:`railab.testbed.state.labs` (the caller validated it). Start it with :meth:`follow`
    (a page arrives) and :meth:`unfollow`; :meth:`wait` gives the next snapshot."""

    lab: str
    interval: float = INTERVAL_S
    bgp_budget_s: float = 0.05
    spec: LabSpec = field(init=False)
    events: deque = field(init=False)
    _seq: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        ref = resolve(self.lab)
        self.record = ref.require_up()
        self.spec = ref.spec()
        self.labdir = ref.labdir
        self.events = deque(maxlen=EVENTS_KEPT)
        self.lock = threading.Lock()  # the netlink sockets: the watch thread and detail requests
        self._feeds: dict[str, _LinkFeed] = {}
        self._executor = None
        self._followers = 0
        self._last_follow = time.monotonic()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._wlock = threading.Lock()
        self.snapshot = Snapshot(0, {"lab": self.lab, "up": True, "ready": False})
        # planned cabling: (node, port) -> link id; the switches; session ends
        self.port_link: dict[tuple[str, str], str] = {}
        for ln in self.spec.links:
            lid = link_id(ln.a.node, ln.a.interface, ln.b.node, ln.b.interface)
            self.port_link[(ln.a.node, ln.a.interface)] = lid
            self.port_link[(ln.b.node, ln.b.interface)] = lid
        self.switches = [n.name for n in self.spec.nodes if n.role != "server"]
        self.link_ends: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
            link_id(ln.a.node, ln.a.interface, ln.b.node, ln.b.interface):
                ((ln.a.node, ln.a.interface), (ln.b.node, ln.b.interface)) for ln in self.spec.links}
        self.session_ends = {(s.node, s.interface) for s in self.spec.bgp_sessions}
        # live state
        self.ifstatus: dict[str, dict[str, str]] = {}  # node -> ifname -> link_status
        self.sessions: dict[str, dict[str, str]] = {}  # node -> ifname -> BGP state
        self.session_read: dict[str, float] = {}  # node -> monotonic time of the last reading
        self.session_error: dict[str, str] = {}
        self.daemons: dict[str, dict[str, bool]] = {}
        self.faults: list[dict] = [f.model_dump(mode="json") for f in self.record.faults]
        self.capacity: dict[str, dict[str, float]] = {}
        self._rr = 0
        self._sampler = None
        self._cap_prev: dict = {}
        self._ce_prev: dict = {}
        self._ce_rate: dict = {}
        self._tick = 0
        self._state_mtime = 0.0
        self.observe_s = 0.0  # CPU (thread time) of the last tick, s
        self.add_event("lab", f"console watching lab {self.lab} ({len(self.spec.nodes)} nodes, "
                       f"{len(self.spec.links)} links, runtime {self.record.runtime})")

    # ---- identity helpers -----------------------------------------------------------------
    def netns_of(self, node: str) -> str:
        """The node's namespace (recorded, else ``clab-<lab>-<node>``)."""
        return self.record.namespaces.get(node) or LabRef(self.lab, None, self.record).netns_of(node)

    @property
    def executor(self):
        """The lab's executor (vtysh on its switches), made on first use."""
        if self._executor is None:
            from railab.testbed.runtime import get_runtime

            self._executor = get_runtime(self.record.runtime).executor(self.lab)
        return self._executor

    # ---- events -------------------------------------------------------------------------------
    def add_event(self, kind: str, text: str, level: str = "info", *, secret: bool = False) -> Event:
        """Append one event to the log (thread-safe) and return it."""
        with self._wlock:
            self._seq += 1
            ev = Event(self._seq, time.time(), kind, text, level, secret)
            self.events.append(ev)
        return ev

    def event_list(self, *, trainee: bool, since: int = 0, limit: int = 200, live: bool = True) -> list[dict]:
        """The log newest last (after ``since``), without secret events for a trainee (and
        without link, session and daemon events when not ``live``)."""
        with self._wlock:
            evs = [e for e in self.events if e.seq > since and not (trainee and e.secret)
                   and (live or e.kind not in LIVE_EVENT_KINDS)]
        return [e.to_json() for e in evs[-limit:]]

    # ---- following ----------------------------------------------------------------------------
    def follow(self) -> None:
        """A page started following: start the thread if it is not running."""
        with self._wlock:
            self._followers += 1
            self._last_follow = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name=f"railab-ui-{self.lab}", daemon=True)
                self._thread.start()

    def unfollow(self) -> None:
        """A page left."""
        with self._wlock:
            self._followers = max(0, self._followers - 1)
            self._last_follow = time.monotonic()

    def poke(self) -> None:
        """Observe again now (after an action of a page)."""
        self._wake.set()

    def show_run_sample(self, sample: Mapping[str, Mapping[str, float]]) -> None:
        """Put a load run's own port sample on the diagram now (the page's load run calls it at
        every sample of :func:`railab.traffic.load.run_load`).

        ``sample``: ``{"node:port": {"backlog_bytes": bytes, "dropped": packets, ...}}`` as the
        run's :class:`railab.testbed.capacity.CapacitySampler` read it (measured, instantaneous
        backlog). Each link's row takes the deeper backlog of its two ends; rates, drops and CE
        stay the live view's own (its next tick replaces the row). Without it the diagram saw a
        queue only if the live view's own tick, which also reads every BGP session and can take
        seconds on a loaded host, fell inside a run of a few seconds.
        """
        deepest: dict[str, tuple[int, str]] = {}
        for key, row in sample.items():
            node, _, port = key.partition(":")
            lid = self.port_link.get((node, port))
            if lid is None:
                continue
            b = int(row.get("backlog_bytes") or 0)
            if lid not in deepest or b > deepest[lid][0]:
                deepest[lid] = (b, key)
        out = dict(self.capacity)
        for lid, (b, key) in deepest.items():
            row = dict(out.get(lid) or {"port": key, "gbps": 0.0, "backlog_bytes": 0, "drops": 0,
                                        "pause_events": 0, "paused": False, "ce": None})
            row["backlog_bytes"] = b
            if b:
                row["port"] = key
            out[lid] = row
        self.capacity = out
        self.poke()

    async def wait(self, version: int, timeout: float = 15.0) -> Snapshot:
        """The first snapshot newer than ``version`` (or the current one after ``timeout``)."""
        if self.snapshot.version > version:
            return self.snapshot
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._wlock:
            self._waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            pass
        finally:
            with self._wlock:
                self._waiters = [(lp, f) for lp, f in self._waiters if f is not fut]
        return self.snapshot

    def _publish(self, data: dict[str, Any]) -> None:
        version = self.snapshot.version + 1
        data["version"] = version
        public = dict(data)
        ex = data.get("exercise", {})
        if ex.get("running"):
            public["faults"] = []
        if ex.get("live_hidden"):
            public.update(links_down={}, sessions_down=[], daemons_dead=[], capacity={},
                          sessions={"up": None, "total": None, "read": 0, "age_s": None})
        trainer_events = self.event_list(trainee=False, limit=100)
        trainee_events = self.event_list(trainee=True, limit=100, live=not ex.get("live_hidden"))
        snap = Snapshot(version, data,
                        json.dumps({**data, "events": trainer_events}).encode(),
                        json.dumps({**public, "events": trainee_events}).encode())
        self.snapshot = snap
        with self._wlock:
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))

    # ---- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._open_feeds()
            last_full = 0.0
            next_tick = time.monotonic()
            while not self._stop.is_set():
                with self._wlock:
                    idle = self._followers == 0 and time.monotonic() - self._last_follow > IDLE_STOP_S
                if idle:
                    break
                now = time.monotonic()
                full = now - last_full >= RESYNC_S
                if full:
                    last_full = now
                c0 = time.thread_time()
                if not self._observe(full=full, tick=now >= next_tick):
                    break
                self.observe_s = time.thread_time() - c0
                if now >= next_tick:
                    next_tick = now + self.interval
                self._sleep(max(0.0, next_tick - time.monotonic()))
        except Exception as exc:  # never let the thread die silently: the page shows why
            self.add_event("lab", f"live view stopped: {type(exc).__name__}: {exc}", "bad")
            self._publish({**self.snapshot.data, "error": str(exc)})
        finally:
            self._close_feeds()
            with self._wlock:
                self._thread = None

    def _sleep(self, timeout: float) -> None:
        """Wait until the next tick, a link notification or :meth:`poke`."""
        socks = [f.mc for f in self._feeds.values()]
        end = time.monotonic() + timeout
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0 or self._wake.is_set():
                break
            try:
                ready, _, _ = select.select(socks, [], [], min(left, 0.25)) if socks else ([], [], [])
            except (OSError, ValueError):
                ready = []
                time.sleep(min(left, 0.25))
            if ready:
                time.sleep(0.02)  # let a burst of notifications land: one re-read for all
                break
        self._wake.clear()

    def _open_feeds(self) -> None:
        for n in self.spec.nodes:
            ns = self.netns_of(n.name)
            if n.name in self._feeds or not netns_path(ns).exists():
                continue
            try:
                self._feeds[n.name] = _LinkFeed(ns)
            except OSError:
                continue

    def _close_feeds(self) -> None:
        with self.lock:
            for f in self._feeds.values():
                f.close()
            self._feeds.clear()
            if self._sampler is not None:
                self._sampler.close()
                self._sampler = None

    def stop(self) -> None:
        """Stop the thread (the console is shutting down)."""
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None:
            t.join(timeout=5)

    # ---- one observation ----------------------------------------------------------------------
    def _reload_record(self) -> bool:
        """Re-read state.json when it changed; False when the lab is gone."""
        path = st.state_path(self.lab)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return False
        if mtime != self._state_mtime:
            rec = st.load(self.lab)
            if rec is None:
                return False
            self._state_mtime, self.record = mtime, rec
        return True

    def _observe(self, *, full: bool, tick: bool) -> bool:
        """One observation; publishes a snapshot. False when the lab went down."""
        if not self._reload_record():
            self.add_event("lab", f"lab {self.lab} is down", "bad")
            self._publish({"lab": self.lab, "up": False, "ready": True, "t": time.time()})
            return False
        pub = exercise_public(self.lab)
        ex = pub is not None
        changed_nodes = self._read_links(full)
        self._read_faults(ex)  # cheap (the record is re-read only when state.json changed)
        if tick:
            self._read_daemons()
            self._read_sessions(changed_nodes)
            self._read_capacity()
            self._tick += 1
        data = self._data(ex)
        data["exercise"]["live_hidden"] = live_state_hidden(pub)
        self._publish(data)
        return True

    def _read_links(self, full: bool) -> set[str]:
        changed: set[str] = set()
        with self.lock:
            if full:
                self._open_feeds()
            for node, feed in list(self._feeds.items()):
                notified = feed.drain()
                if not (notified or full or node not in self.ifstatus):
                    continue
                try:
                    flags = feed.rtnl.link_flags()
                except OSError:
                    feed.close()
                    del self._feeds[node]
                    flags = {}
                new = {name: link_status(fl, op) for name, (fl, op) in flags.items()}
                old = self.ifstatus.get(node)
                self.ifstatus[node] = new
                if old is not None and old != new:
                    changed.add(node)
                    self._link_events(node, old, new)
        return changed

    def _link_events(self, node: str, old: dict[str, str], new: dict[str, str]) -> None:
        for port in sorted(set(old) | set(new)):
            a, b = old.get(port, "missing"), new.get(port, "missing")
            if a == b or (node, port) not in self.port_link:
                continue
            lid = self.port_link[(node, port)]
            if b == "up":
                self.add_event("link", f"{node}:{port} up ({lid})", "good")
            else:
                self.add_event("link", f"{node}:{port} {b} ({lid})", "bad")

    def _read_daemons(self) -> None:
        for node, r in self.record.routers.items():
            now = {}
            for d, pid in r.pids.items():
                now[d] = os.path.exists(f"/proc/{pid}")
            old = self.daemons.get(node)
            if old is not None:
                for d, alive in now.items():
                    if old.get(d) != alive:
                        self.add_event("daemon", f"{node}: {d} {'running' if alive else 'dead'}",
                                       "good" if alive else "bad")
            self.daemons[node] = now

    def _read_faults(self, exercise: bool) -> None:
        new = [f.model_dump(mode="json") for f in self.record.faults]
        old_ids = {(f["id"], f["injected_at"]) for f in self.faults}
        new_ids = {(f["id"], f["injected_at"]) for f in new}
        for f in new:
            if (f["id"], f["injected_at"]) not in old_ids:
                self.add_event("fault", f"fault {f['id']} {f['kind']} injected: {f['note']}", "bad",
                               secret=exercise)
        for f in self.faults:
            if (f["id"], f["injected_at"]) not in new_ids:
                self.add_event("fault", f"fault {f['id']} {f['kind']} gone (healed): {f['note']}", "good",
                               secret=exercise)
        self.faults = new

    def _read_sessions(self, changed_nodes: set[str]) -> None:
        """BGP summaries: switches next to a change first, then round-robin within the budget."""
        if not self.switches:
            return
        near = set()
        for node in changed_nodes:
            for (n, _p), lid in self.port_link.items():
                if n == node:
                    near.update(e[0] for e in self.link_ends[lid])
        order = [s for s in self.switches if s in near]
        n = len(self.switches)
        order += [self.switches[(self._rr + i) % n] for i in range(n) if self.switches[(self._rr + i) % n] not in near]
        t0 = time.monotonic()
        done = 0
        first = not self.sessions  # the first reading covers every switch (no half-read page)
        for node in order:
            if done and not first and time.monotonic() - t0 > self.bgp_budget_s:
                break
            if node not in near:
                self._rr = (self.switches.index(node) + 1) % n
            self._read_session(node)
            done += 1

    def _read_session(self, node: str) -> None:
        try:
            doc = self.executor.vtysh_json(node, FRR.CMD_SUMMARY, timeout=5.0)
            new = FRR.session_states(doc)
            self.session_error.pop(node, None)
        except Exception as exc:  # a dead bgpd, a gone namespace: every session of the node down
            new = {}
            self.session_error[node] = str(exc)[:200]
        old = self.sessions.get(node)
        self.sessions[node] = new
        self.session_read[node] = time.monotonic()
        if old is None:
            return
        for port in sorted(p for (n, p) in self.session_ends if n == node):
            a, b = FRR.session_up(old.get(port)), FRR.session_up(new.get(port))
            if a != b:
                lid = self.port_link.get((node, port), f"{node}:{port}")
                self.add_event("session", f"BGP {node}:{port} {'Established' if b else new.get(port, 'down')}"
                               f" ({lid})", "good" if b else "bad")

    def _read_capacity(self) -> None:
        if not C.enabled(self.spec):
            return
        with self.lock:
            if self._sampler is None:
                try:
                    self._sampler = C.CapacitySampler(self.spec, self.netns_of, run_dir=st.lab_dir(self.lab))
                except Exception:
                    return
            ce = self._tick % CE_EVERY == 0
            try:
                now = self._sampler.sample(ce=ce)
            except Exception:
                self._sampler.close()
                self._sampler = None
                return
        prev, self._cap_prev = self._cap_prev, now
        if ce:  # CE marks over the last CE_EVERY ticks, shown until the next reading
            self._ce_rate = {k: c.ce_marked - self._ce_prev[k] for k, c in now.items()
                             if c.ce_marked is not None and k in self._ce_prev}
            self._ce_prev = {k: c.ce_marked for k, c in now.items() if c.ce_marked is not None}
        out: dict[str, dict[str, float]] = {}
        for key, c in now.items():
            lid = self.port_link.get(key)
            if lid is None:
                continue
            p = prev.get(key)
            dt = (c.t - p.t) if p is not None else 0.0
            row = {"port": f"{key[0]}:{key[1]}",
                   "gbps": round((c.tx_bytes - p.tx_bytes) * 8 / dt / 1e9, 6) if p and dt > 0 else 0.0,
                   "backlog_bytes": c.backlog_bytes,
                   "drops": c.dropped - (p.dropped if p else c.dropped),
                   "pause_events": c.pause_events - (p.pause_events if p else c.pause_events),
                   "paused": c.paused,
                   "ce": self._ce_rate.get(key)}
            # per link: the busier end
            cur = out.get(lid)
            if cur is None or row["gbps"] + row["backlog_bytes"] > cur["gbps"] + cur["backlog_bytes"]:
                out[lid] = row
        self.capacity = out

    def _data(self, exercise: bool) -> dict[str, Any]:
        down: dict[str, str] = {}
        for lid, ends in self.link_ends.items():
            why = []
            for node, port in ends:
                s = self.ifstatus.get(node, {}).get(port, "missing" if node in self.ifstatus else None)
                if s is not None and s != "up":
                    why.append(f"{node}:{port} {s}")
            if why:
                down[lid] = ", ".join(why)
        s_down, s_up = set(), 0
        for node, port in self.session_ends:
            if node not in self.sessions:
                continue
            if FRR.session_up(self.sessions[node].get(port)):
                s_up += 1
            else:
                s_down.add(self.port_link.get((node, port), f"{node}:{port}"))
        now = time.monotonic()
        ages = [now - self.session_read[n] for n in self.switches if n in self.session_read]
        dead = sorted(f"{n}:{d}" for n, ds in self.daemons.items() for d, ok in ds.items() if not ok)
        return {
            "lab": self.lab, "up": True, "ready": True, "t": time.time(), "phase": self.record.phase,
            "links_down": down, "links_total": len(self.link_ends),
            "sessions_down": sorted(s_down),
            "sessions": {"up": s_up, "total": len(self.session_ends),
                         "read": sum(1 for n, _ in self.session_ends if n in self.sessions),
                         "age_s": round(max(ages), 1) if ages else None},
            "daemons_dead": dead, "faults": self.faults,
            "load_balancing": self._load_balancing(),
            "capacity": {k: v for k, v in self.capacity.items()
                         if v["gbps"] or v["backlog_bytes"] or v["drops"] or v["pause_events"] or v["ce"]},
            "capacity_lab": C.enabled(self.spec),
            "port_rate_mbps": self.spec.qos.capacity.port_rate_mbps if C.enabled(self.spec) else None,
            "exercise": {"running": exercise},
            "observe_ms": round(self.observe_s * 1000, 1),
        }

    def _load_balancing(self) -> dict[str, Any]:
        """The switches' load-balancing mode (railab.testbed.lb) and, for flowlet/wcmp, what its
        agent last rated: per leaf the uplinks up, utilization and slots or weights."""
        rec = self.record
        out: dict[str, Any] = {"mode": rec.load_balancing, "spines": rec.load_balancing_spines}
        agent = LB.agent_state(st.lab_dir(self.lab)) if rec.load_balancing in LB.AGENT_MODES else None
        if agent:
            out["agent"] = {"cycles": agent.get("cycles"), "leaves": agent.get("leaves", {})}
        return out

    # ---- details on demand ----------------------------------------------------------------------
    def node_detail(self, node: str) -> dict[str, Any]:
        """What a click on ``node`` shows: its planned ports with live status, MTU, packet and
        byte counters (``RTM_GETSTATS``, since the port was made), the BGP session on each
        (from the last reading), its kernel route count (main table, IPv4) and daemons."""
        spec_node = self.spec.node(node)
        ns = self.netns_of(node)
        ports = sorted(((p, lid) for (n, p), lid in self.port_link.items() if n == node),
                       key=lambda x: (len(x[0]), x[0]))
        counters: dict[str, tuple[int, int, int, int]] = {}
        mtus: dict[str, int | None] = {}
        routes = None
        err = None
        try:
            with self.lock:
                with entered(ns):
                    r = Rtnl()
                try:
                    rows = r.link_details()
                    stats = r.stats()
                    names = {row.index: row.ifname for row in rows}
                    mtus = {row.ifname: row.mtu for row in rows}
                    counters = {names[i]: v for i, v in stats.items() if i in names}
                    routes = len(r.routes(254))
                finally:
                    r.close()
        except OSError as exc:
            err = f"namespace {ns}: {exc}"
        out_ports = []
        for p, lid in ports:
            a, b = self.link_ends[lid]
            peer = b if a == (node, p) else a
            c = counters.get(p)
            sess = self.sessions.get(node, {}).get(p) if (node, p) in self.session_ends else None
            out_ports.append({
                "port": p, "peer": f"{peer[0]}:{peer[1]}", "link": lid,
                "status": self.ifstatus.get(node, {}).get(p, "missing"), "mtu": mtus.get(p),
                "rx_packets": c[0] if c else None, "tx_packets": c[1] if c else None,
                "rx_bytes": c[2] if c else None, "tx_bytes": c[3] if c else None,
                "bgp": sess if (node, p) in self.session_ends else None,
                "capacity": self.capacity.get(lid),
            })
        return {"node": node, "role": spec_node.role, "group": spec_node.group, "rails": spec_node.rails,
                "asn": spec_node.asn, "router_id": str(spec_node.router_id) if spec_node.router_id else None,
                "namespace": ns, "ports": out_ports, "routes": routes,
                "daemons": self.daemons.get(node, {}), "bgp_error": self.session_error.get(node),
                "error": err}

    def link_detail(self, lid: str) -> dict[str, Any]:
        """What a click on link ``lid`` shows: both ends (status, session, counters)."""
        ends = self.link_ends[lid]
        out = []
        for node, port in ends:
            d = self.node_detail(node)
            out.append({"node": node, **next(p for p in d["ports"] if p["port"] == port)})
        return {"link": lid, "ends": out, "capacity": self.capacity.get(lid)}


class Hub:
    """The console's watches, one per lab, made on first use (``make``: a factory for tests)."""

    def __init__(self, interval: float = INTERVAL_S, bgp_budget_s: float = 0.05,
                 make: Callable[[str], LabWatch] | None = None) -> None:
        self.interval = interval
        self.bgp_budget_s = bgp_budget_s
        self._make = make or (lambda lab: LabWatch(lab, interval=self.interval, bgp_budget_s=self.bgp_budget_s))
        self._watches: dict[str, LabWatch] = {}
        self._lock = threading.Lock()

    def get(self, lab: str) -> LabWatch:
        """The watch of ``lab`` (a validated running lab name); a new one when the lab was
        brought up again since (its state record is newer)."""
        with self._lock:
            w = self._watches.get(lab)
            rec = st.load(lab)
            if w is not None and rec is not None and rec.created != w.record.created:
                w.stop()
                w = None
            if w is None:
                w = self._make(lab)
                self._watches[lab] = w
            return w

    def peek(self, lab: str) -> LabWatch | None:
        """The watch of ``lab`` if one exists (no new one)."""
        return self._watches.get(lab)

    def stop(self) -> None:
        """Stop every watch."""
        with self._lock:
            for w in self._watches.values():
                w.stop()
