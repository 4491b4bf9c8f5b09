"""The load-balancing agent of a lab in ``flowlet`` or ``wcmp`` mode: it rates each leaf's uplinks
and steers new flowlets (ARS) or the next-hop weights (WCMP) toward the idle ones.

The design guide's load-balancing chapter (/work/shared/seed/) describes both answers as driven
by the switch's own measurements: ARS sends a new flowlet "to the most idle member by measured
queue and utilization", dynamic intelligent routing recomputes WCMP weights from telemetry.
Here one process (``python -m railab.testbed.lbagent --plan P --state S``; started and stopped by
:func:`railab.testbed.lb.apply`, named by its run-directory arguments so ``railab down`` kills it
with the lab) runs a loop every :attr:`LbAgentPlan.cycle_s` (lab seconds: :data:`CYCLE_US` of
fabric time, time-scaled like the DCQCN constants). Each cycle, per leaf, it reads every
uplink's egress qdisc (bytes dequeued and backlog, one raw rtnetlink dump per leaf:
:class:`railab.testbed.pfc.QdiscReader`) and rates each member

* ``utilization`` = bytes dequeued since the last cycle over what the port rate allows,
  smoothed (EWMA, weight :data:`EWMA`);
* ``idleness`` = ``1 - utilization``, or 0 while the member's queue holds more than the lab's
  ECN Kmin (a queue that deep is congested whatever its recent rate).

Then it writes, only when something changed:

Members whose link is down (``IFF_UP`` and carrier, the same rule as ``railab check``) are left
out: no flowlet slots, no place in the WCMP group (the kernel deleted their next-hop object
with the link; the agent re-creates it when the link comes back).

* ``flowlet``: the leaf's nft map ``slots`` (:data:`SLOTS` entries) that new flowlets index
  round robin (``numgen inc mod SLOTS``): each member gets slots in proportion to its idleness
  (largest remainder; every member when none is idle). A flowlet that starts now goes to an idle
  member; several that start within one cycle spread over the idle members instead of all
  herding onto the single idlest one (a hardware ARS sees its own choice fill the port at once;
  a cycle-based agent cannot, so it spreads). One ``nft -i`` line per update: one transaction.
* ``wcmp``: the weights of the leaf's next-hop group (``ip nexthop replace id G group
  a,w/b,w...``): ``1 + round(15 x idleness)`` per member (1-16). The kernel hashes flows over the
  group's hash-threshold regions, so a weight change moves the flows near the region boundaries
  off the hot members: WCMP as switches do it, per flow.

The state file (``lb-agent.json`` in the lab's run directory) holds the cycle count, the cycle
time and per leaf the members' last utilization, slots or weights, and how many updates were
written. Standard library only (starts in well under a second), like the PFC agent.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from railab.testbed.namespaces import entered, exec_argv
from railab.testbed.pfc import QdiscReader, ifindexes, raise_priority
from railab.testbed.rtnl import Rtnl, link_status
from railab.topologies.atomicfile import write_atomic

#: Agent cycle in fabric microseconds (scaled to lab time by the lab's time scale: 20 ms at
#: mini-lossless's 2000). Hardware ARS re-rates its members every few microseconds; 10 us keeps
#: the agent's cost to a few percent of a core at mini-lossless scale.
CYCLE_US = 10.0
#: Weight of the newest sample in the members' smoothed utilization.
EWMA = 0.5
#: Size of the flowlet slot table new flowlets index round robin.
SLOTS = 16
#: Largest WCMP weight (an idle member); a saturated one gets 1.
MAX_WEIGHT = 16
#: State file of the agent, under the lab's run directory.
STATE_FILE = "lb-agent.json"
#: How often the state file is rewritten, s.
STATE_EVERY_S = 0.2
#: tc's "root" parent handle: the uplink's root qdisc carries all its egress bytes and backlog.
TC_H_ROOT = 0xFFFFFFFF


@dataclass(frozen=True)
class LeafAgent:
    """One leaf the agent steers: ``node``, namespace ``ns``, ``uplinks`` (member i = index i),
    member ``marks`` (flowlet: fwmark of member i), ``nh_ids`` (wcmp: nexthop object id of
    member i) and ``group_id`` (wcmp: the group's id)."""

    node: str
    ns: str
    uplinks: list[str]
    marks: list[int] = field(default_factory=list)
    nh_ids: list[int] = field(default_factory=list)
    group_id: int = 0


@dataclass(frozen=True)
class LbAgentPlan:
    """Everything the agent needs as plain data: ``lab``, ``mode`` (``flowlet`` or ``wcmp``),
    ``nft_table`` (flowlet), ``cycle_s`` (lab s), ``port_rate_bps`` (lab, bit/s), ``kmin_bytes``
    (the lab's ECN Kmin), ``leaves``."""

    lab: str
    mode: str
    nft_table: str
    cycle_s: float
    port_rate_bps: float
    kmin_bytes: int
    leaves: list[LeafAgent]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LbAgentPlan:
        return cls(**{**d, "leaves": [LeafAgent(**x) for x in d["leaves"]]})


def idleness(util: float, backlog: int, kmin_bytes: int) -> float:
    """A member's idleness in [0, 1]: ``1 - util`` (util clipped to [0, 1]), 0 when its queue
    holds more than ``kmin_bytes``."""
    if backlog > kmin_bytes:
        return 0.0
    return 1.0 - min(1.0, max(0.0, util))


def slot_table(idle: list[float], slots: int = SLOTS, alive: list[bool] | None = None) -> list[int]:
    """Member index per slot (``slots`` long): member i gets slots in proportion to ``idle[i]``
    (largest remainder; ties to the lower index); every member equally when all are 0.
    Members not ``alive`` (their link is down) get none, unless none is alive.
    Interleaved (member order repeats) so consecutive new flowlets go to different members."""
    n = len(idle)
    live = alive if alive is not None and any(alive) else [True] * n
    idle = [x if ok else 0.0 for x, ok in zip(idle, live, strict=True)]
    tot = sum(idle)
    k = sum(live)
    share = ([slots / k if ok else 0.0 for ok in live] if tot <= 1e-9
             else [slots * x / tot for x in idle])
    cnt = [int(s) for s in share]
    for i in sorted(range(n), key=lambda i: (-(share[i] - cnt[i]), i))[:slots - sum(cnt)]:
        cnt[i] += 1
    out: list[int] = []
    while len(out) < slots:
        for i in range(n):
            if cnt[i] > 0:
                out.append(i)
                cnt[i] -= 1
    return out


def weights(idle: list[float]) -> list[int]:
    """WCMP weights: ``1 + round((MAX_WEIGHT - 1) x idleness)`` per member."""
    return [1 + round((MAX_WEIGHT - 1) * x) for x in idle]


def slots_line(table: str, marks: list[int], slots: list[int]) -> str:
    """The one ``nft -i`` line (one transaction) that refills ``slots`` of ``table``."""
    els = ", ".join(f"{k} : {marks[m]:#x}" for k, m in enumerate(slots))
    return f"flush map ip {table} slots; add element ip {table} slots {{ {els} }}\n"


def group_line(group_id: int, nh_ids: list[int], w: list[int],
               alive: list[bool] | None = None) -> str:
    """The ``ip -batch`` line that sets the next-hop group's weights, over the ``alive``
    members only (the kernel deletes a next-hop object whose link goes down); empty when none
    is alive."""
    keep = [(h, x) for i, (h, x) in enumerate(zip(nh_ids, w, strict=True))
            if alive is None or alive[i]]
    if not keep:
        return ""
    return f"nexthop replace id {group_id} group " + "/".join(f"{h},{x}" for h, x in keep) + "\n"


def member_line(nh_id: int, uplink: str) -> str:
    """The ``ip -batch`` line that (re)creates a member's next-hop object (after its link came
    back up: the kernel deleted it when the link went down)."""
    return f"nexthop replace id {nh_id} via 169.254.0.1 dev {uplink} onlink\n"


class LbLoop:
    """The agent's loop (module docstring). ``stop``: set to end :meth:`run`."""

    def __init__(self, plan: LbAgentPlan, state_path: Path) -> None:
        self.plan, self.state_path = plan, state_path
        self.stop = threading.Event()
        self.cycles = 0
        self.cycle_ms: list[float] = []
        self._readers: dict[str, QdiscReader] = {}
        self._index: dict[str, dict[int, int]] = {}  # leaf -> ifindex -> member
        self._writers: dict[str, subprocess.Popen] = {}
        self._prev: dict[str, list[int]] = {}
        self._util: dict[str, list[float]] = {}
        self._cur: dict[str, list[int]] = {}
        self._updates: dict[str, int] = {}
        self._rtnl: dict[str, Rtnl] = {}
        self._alive: dict[str, list[bool]] = {}
        self._t_prev = 0.0

    def open(self) -> None:
        log = open(self.state_path.with_name("lb-agent.log"), "a")  # noqa: SIM115 - the writers' stderr
        for lf in self.plan.leaves:
            self._readers[lf.node] = QdiscReader(lf.ns)
            with entered(lf.ns):
                self._rtnl[lf.node] = Rtnl()
            idx = ifindexes(lf.ns, lf.uplinks, lf.node)
            self._index[lf.node] = {idx[(lf.node, p)]: i for i, p in enumerate(lf.uplinks)}
            argv = ["nft", "-i"] if self.plan.mode == "flowlet" else ["ip", "-force", "-batch", "-"]
            self._writers[lf.node] = subprocess.Popen(
                exec_argv(lf.ns, argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=log, text=True)
            self._util[lf.node] = [0.0] * len(lf.uplinks)
            self._updates[lf.node] = 0
        self._read_all()
        self._t_prev = time.monotonic()

    def _read_all(self) -> dict[str, tuple[list[int], list[int]]]:
        out = {}
        for lf in self.plan.leaves:
            by, bl = [0] * len(lf.uplinks), [0] * len(lf.uplinks)
            idx = self._index[lf.node]
            for q in self._readers[lf.node].read():
                m = idx.get(q.index)
                if m is not None and q.parent == TC_H_ROOT:
                    by[m], bl[m] = q.bytes, q.backlog
            out[lf.node] = (by, bl)
        return out

    def cycle(self) -> None:
        """One cycle: read, rate, write what changed."""
        now = time.monotonic()
        dt = max(1e-6, now - self._t_prev)
        self._t_prev = now
        reads = self._read_all()
        for lf in self.plan.leaves:
            flags = self._rtnl[lf.node].link_flags()
            alive = [u in flags and link_status(*flags[u]) == "up" for u in lf.uplinks]
            was = self._alive.get(lf.node)
            self._alive[lf.node] = alive
            by, bl = reads[lf.node]
            prev = self._prev.get(lf.node, by)
            self._prev[lf.node] = by
            u = self._util[lf.node]
            for i in range(len(by)):
                inst = (by[i] - prev[i]) * 8 / dt / self.plan.port_rate_bps
                u[i] = (1 - EWMA) * u[i] + EWMA * inst
            idle = [idleness(u[i], bl[i], self.plan.kmin_bytes) for i in range(len(by))]
            if self.plan.mode == "flowlet":
                new = slot_table(idle, alive=alive)
                line = slots_line(self.plan.nft_table, lf.marks, new) if new != self._cur.get(lf.node) else ""
            else:
                new = weights(idle)
                old = self._cur.get(lf.node)
                changed = (old is None or alive != was
                           or any(abs(a - b) >= 2 for a, b in zip(new, old, strict=True)))
                back = [i for i, ok in enumerate(alive) if ok and was is not None and not was[i]]
                line = "".join(member_line(lf.nh_ids[i], lf.uplinks[i]) for i in back)
                line += group_line(lf.group_id, lf.nh_ids, new, alive) if changed else ""
                if not changed:
                    new = old
            if line:
                w = self._writers[lf.node]
                assert w.stdin is not None
                w.stdin.write(line)
                w.stdin.flush()
                self._updates[lf.node] += 1
                self._cur[lf.node] = new
        self.cycles += 1
        self.cycle_ms.append((time.monotonic() - now) * 1000)
        del self.cycle_ms[:-200]

    def _shown(self, node: str) -> list | None:
        """The slots, or the weights with None for a member that is down (not in the group)."""
        cur = self._cur.get(node)
        alive = self._alive.get(node)
        if cur is None or self.plan.mode == "flowlet" or alive is None:
            return cur
        return [w if ok else None for w, ok in zip(cur, alive, strict=True)]

    def write_state(self, *, final: bool = False) -> None:
        cyc = sorted(self.cycle_ms)
        d = {"lab": self.plan.lab, "mode": self.plan.mode, "pid": os.getpid(), "ready": True,
             "final": final, "cycles": self.cycles, "cycle_s": self.plan.cycle_s,
             "cycle_work_ms_median": round(cyc[len(cyc) // 2], 3) if cyc else None,
             "leaves": {lf.node: {"uplinks": lf.uplinks,
                                  "up": self._alive.get(lf.node),
                                  "utilization": [round(x, 3) for x in self._util[lf.node]],
                                  ("slots" if self.plan.mode == "flowlet" else "weights"):
                                      self._shown(lf.node),
                                  "updates": self._updates[lf.node]}
                        for lf in self.plan.leaves}}
        write_atomic(self.state_path, json.dumps(d))

    def run(self) -> None:
        """Cycle until :attr:`stop` is set or a namespace is gone (the lab went down)."""
        self.open()
        self.write_state()
        next_state = time.monotonic() + STATE_EVERY_S
        nxt = time.monotonic()
        try:
            while not self.stop.is_set():
                nxt += self.plan.cycle_s
                try:
                    self.cycle()
                except (OSError, BrokenPipeError):
                    break
                now = time.monotonic()
                if now >= next_state:
                    self.write_state()
                    next_state = now + STATE_EVERY_S
                if nxt < now:
                    nxt = now
                self.stop.wait(nxt - now)
        finally:
            self.close()

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        for r in self._rtnl.values():
            r.close()
        for w in self._writers.values():
            try:
                if w.stdin is not None:
                    w.stdin.close()
                w.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                w.kill()
        try:
            self.write_state(final=True)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    """``python -m railab.testbed.lbagent --plan PATH --state PATH``: run until SIGTERM/SIGINT."""
    ap = argparse.ArgumentParser(prog="python -m railab.testbed.lbagent",
                                 description="load-balancing agent (flowlet/wcmp) of a railab lab")
    ap.add_argument("--plan", required=True, help="the LbAgentPlan JSON")
    ap.add_argument("--state", required=True, help="state file (in the lab's run directory)")
    a = ap.parse_args(argv)
    plan = LbAgentPlan.from_json(json.loads(Path(a.plan).read_text()))
    raise_priority()
    loop = LbLoop(plan, Path(a.state))

    def _stop(*_: object) -> None:
        loop.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
