#!/usr/bin/env python3
"""Benchmark the netns runtime: up-to-converged time, down time, peak RSS of the lab's processes.

Usage (root, Debian frr): ``python scripts/bench_up.py [INTENT ...] [--keep-dirs]``
(default intents: mini, rail-optimized-1024, rail-optimized-1024-full). Each intent is generated
into a temp dir under a unique lab name, brought up with ``railab.checks.deploy.bring_up`` (convergence
checked against lab.json), sampled for RSS while converging and for 2 s after, then brought down.
Prints one JSON line per intent and a table. Targets (issue 4): mini < 10 s; full 1024-GPU
fabric < 60 s and < 4 GiB.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from railab.checks.deploy import bring_up  # noqa: E402
from railab.errors import RailabError  # noqa: E402
from railab.progress import ConvergeBar  # noqa: E402
from railab.testbed import state as st  # noqa: E402
from railab.testbed.runtime.netns import NetnsRuntime, _ns_inode, _pids_in_namespaces  # noqa: E402
from railab.topologies.generator import generate  # noqa: E402
from railab.topologies.labspec import LabSpec  # noqa: E402


def lab_rss_bytes(lab: str) -> tuple[int, int]:
    """(total RSS in bytes, process count) of every process inside the lab's namespaces."""
    rec = st.load(lab)
    inodes = {i for i in (_ns_inode(ns) for ns in (rec.namespaces if rec else {}).values()) if i}
    total = n = 0
    for pid in _pids_in_namespaces(inodes):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        n += 1
        except OSError:
            pass
    return total, n


def bench(intent: str, workdir: Path) -> dict:
    name = f"bench{os.getpid() % 10000}-{intent[:12].strip('-')}".lower()
    labdir = generate(ROOT / "topologies" / "intents" / f"{intent}.yml", workdir / name, name=name)
    spec = LabSpec.load(labdir)
    rt = NetnsRuntime()
    peak = [0, 0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            rss, n = lab_rss_bytes(name)
            if rss > peak[0]:
                peak[:] = [rss, n]
            stop.wait(0.25)

    th = threading.Thread(target=sampler, daemon=True)
    load_before = os.getloadavg()[0]
    th.start()
    t0 = time.monotonic()
    error = None
    rec = {"timings": {}}
    try:
        try:
            with ConvergeBar() as bar:
                rec = bring_up(rt, labdir, on_progress=bar if sys.stderr.isatty() else None)
            t_up = time.monotonic() - t0
            time.sleep(2)  # keep sampling RSS on the converged lab
        except RailabError as exc:  # e.g. convergence timeout: still report time and memory
            t_up = time.monotonic() - t0
            error = str(exc).splitlines()[0] + " " + " ".join(line.strip()[:160] for line in str(exc).splitlines()[1:])
    finally:
        stop.set()
        th.join()
        t1 = time.monotonic()
        rt.down(name)
        t_down = time.monotonic() - t1
    return {
        "intent": intent,
        "nodes": len(spec.nodes),
        "switches": sum(1 for n in spec.nodes if n.role != "server"),
        "links": len(spec.links),
        "bgp_sessions": len(spec.bgp_sessions),
        "up_s": round(t_up, 2),
        "down_s": round(t_down, 2),
        "peak_rss_mib": round(peak[0] / 2**20, 1),
        "processes": peak[1],
        "timings": rec["timings"],
        "load1_before": round(load_before, 2),  # the 2-core host is shared: say what else ran
        "load1_after": round(os.getloadavg()[0], 2),
        "converged": error is None,
        "error": error,
    }


def main() -> None:
    intents = [a for a in sys.argv[1:] if not a.startswith("-")] or [
        "mini", "rail-optimized-1024", "rail-optimized-1024-full"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="railab-bench-") as tmp:
        for intent in intents:
            row = bench(intent, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| lab | nodes | links | sessions | up->converged | down | peak RSS (procs) | load1 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["timings"]
        up = f"{r['up_s']} s (build {t.get('build_s', '?')} s, converge {t.get('converge_s', '?')} s)"
        if not r["converged"]:
            up = f"did not converge ({r['up_s']} s)"
        print(f"| {r['intent']} | {r['nodes']} | {r['links']} | {r['bgp_sessions']} | {up} | "
              f"{r['down_s']} s | {r['peak_rss_mib']} MiB ({r['processes']}) | "
              f"{r['load1_before']} -> {r['load1_after']} |")


if __name__ == "__main__":
    main()
