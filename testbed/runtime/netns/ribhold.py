"""zebra's RIB work-queue hold while a lab comes up (issue 47: the 4,096-GPU fabric in a minute).

zebra queues every route bgpd sends and processes the queue ``hold`` ms after the first entry
(FRR ``zebra work-queue``, ``ZEBRA_RIB_PROCESS_HOLD_TIME``: 10 ms): each processing resolves
the route's next hops again and installs it in the kernel. While a fabric comes up, a leaf's
ECMP routes grow one path at a time as its sessions come up (64 paths on the full fabrics), so
with 10 ms zebra resolves and installs each route once per new path. Held 1 s during the
bring-up (on routers with at least :data:`HOLD_FROM_SESSIONS` sessions), the paths that arrive
within a second are processed together: on ``rail-optimized-4096-full`` the zebras' CPU from
start to converged went from 42-44 to 18-28 CPU-s (docs/runtime.md "Issue 47, the 4,096 in a
minute").

The hold is a line of zebra's own start-up part of the config (the run directory's
``zebra.conf``; the node's ``frr.conf`` is unchanged), and once the lab has converged
:func:`release` puts FRR's default back on every zebra through its vty socket, so route changes
after ``up`` (a link down, a drill) are processed as fast as before. A zebra restarted later
(``railab fault``) starts without it. ``RAILAB_RIB_HOLD_MS`` sets the hold (``0``: none, FRR's
default throughout); default :data:`BRINGUP_HOLD_MS`.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from railab.errors import UsageError
from railab.testbed import state as st
from railab.testbed.vty import vty_configure

HOLD_ENV = "RAILAB_RIB_HOLD_MS"
#: zebra's RIB work-queue hold during the bring-up, ms
BRINGUP_HOLD_MS = 1000
#: a router gets the hold from this many BGP sessions (its ECMP width): the full fabrics' leaves
#: (64) and spines (128); on small labs, whose routes have a few paths, the hold would only add
#: up to its length to the convergence
HOLD_FROM_SESSIONS = 32
#: FRR's ``zebra work-queue`` range
MAX_HOLD_MS = 10000
#: what :func:`release` sends (``no zebra work-queue``: FRR's default hold, 10 ms)
RELEASE = ("configure terminal", "no zebra work-queue")


def hold_ms() -> int:
    """The bring-up hold: ``$RAILAB_RIB_HOLD_MS`` (0-10000; unset or empty: the default);
    UsageError for anything else."""
    raw = os.environ.get(HOLD_ENV, "").strip()
    if not raw:
        return BRINGUP_HOLD_MS
    if not raw.isdigit() or int(raw) > MAX_HOLD_MS:
        raise UsageError(f"{HOLD_ENV}={raw!r}: zebra's RIB hold during up, in ms (0-{MAX_HOLD_MS}; 0: "
                         f"FRR's default throughout), or unset it for {BRINGUP_HOLD_MS}")
    return int(raw)


def start_line(ms: int, bgpd_conf: str) -> str:
    """The line appended to zebra's start-up config of a router whose bgpd start-up config is
    ``bgpd_conf``: empty for 0 or a router with fewer than :data:`HOLD_FROM_SESSIONS` sessions."""
    sessions = sum(1 for line in bgpd_conf.splitlines()
                   if line.startswith(" neighbor ") and " interface" in line)
    return f"zebra work-queue {ms}\n" if ms > 0 and sessions >= HOLD_FROM_SESSIONS else ""


def held(lab: str, node: str) -> bool:
    """Whether ``node``'s zebra was started with the hold (its start-up config has the line)."""
    try:
        text = (st.node_dir(lab, node) / "zebra.conf").read_text()
    except OSError:
        return False
    return any(line.startswith("zebra work-queue ") for line in text.splitlines())


def release(lab: str, nodes: list[str], *, workers: int = 16, timeout: float = 10.0) -> list[str]:
    """Put FRR's default hold back on the zebras of ``nodes`` that were started with the bring-up
    hold, from ``workers`` threads; returns ``"node: reason"`` for each that did not take it."""
    todo = [n for n in nodes if held(lab, n)]

    def one(node: str) -> str | None:
        sock: Path = st.node_dir(lab, node) / "zebra.vty"
        try:
            status, out = vty_configure(sock, list(RELEASE), timeout=timeout)
        except (OSError, TimeoutError) as exc:
            return f"{node}: {exc}"
        return None if status == 0 else f"{node}: status {status} {out.strip()[:120]}"

    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(todo))) as pool:
        return [r for r in pool.map(one, todo) if r]
