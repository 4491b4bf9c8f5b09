#!/usr/bin/env python3
"""The load engine against the kernel's limit (issue 43): packets/s and CPU per packet, the
compiled fast path and the Python loop side by side in one run, with the machine load stated.

Usage (root): ``python scripts/bench_engine.py [--seconds 3] [--runs 3] [--rates 200,100]
[--collective-runs 3] [--json FILE] [--keep]``

Brings up labs of the ``mini-lossless`` intent under its own names (down at the end unless
``--keep``): one per ``--rates`` port rate (200 Mb/s: as shipped) and one with its ports at 10 Gb/s (the shaper
then never holds a packet, so what limits the rate is the kernel's per-packet work: the same
queues, classifier, WRED/ECN chains, routing and veths, only faster tokens). On the fast lab,
32 QPs cross the fabric in a permutation (server k of group 1 <-> server k of group 2, every
rail: NIC, leaf, spine, leaf, NIC; 3 routed hops each) and, per run, interleaved:

* ``limit``: the blaster (:meth:`railab.traffic.load.LoadEngine.blast`: the fast path sending
  round robin, unpaced, no DCQCN, receiving nothing) on one worker per CPU; its packets/s
  is what the receivers' leaf ports sent to them (switch tx counters): the most this machine
  forwards through the lab's 3-hop path;
* ``c``: the load engine's fast path at a 10 Gb/s line rate per QP (so it sends as fast as it
  can), pacing, receiving and accounting every packet (``cc none``);
* ``c-1`` the same on one worker (``RAILAB_ENGINE_THREADS=1``);
* ``python``: the engine's Python loop, same flows.

Each row: delivered packets/s (receiver counted), share of the run's limit, CPU seconds per
packet of the threads doing the work (kernel forwarding in their context included). Then, on a
mini-lossless lab per ``--rates`` port rate, ``railab collective``'s all-reduce and all-to-all
(1 MiB per rank) ``--collective-runs`` times on the fast path and once on the Python loop:
keeps_rate, busbw over the line-rate bound, the engine's packets/s. ``/proc/loadavg`` before
and after every row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _railab(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "railab", *args], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def _perm(spec):
    from railab.traffic.load import LoadFlow
    from railab.traffic.patterns import Flow, route

    servers = [s.name for s in spec.by_role("server")]
    half = len(servers) // 2
    out = []
    for k in range(half):
        for g in range(spec.gpus_per_server):
            out.append(LoadFlow(route(spec, Flow((servers[k], g), (servers[k + half], g)))))
            out.append(LoadFlow(route(spec, Flow((servers[k + half], g), (servers[k], g)))))
    return out


def _delivered(reader, spec) -> int:
    """Packets the leaves sent to server NICs (tx packets of every leaf server port)."""
    ports = {f"{n.leaf}:{n.leaf_port}" for n in spec.nics}
    return sum(v for k, v in reader.read_packets().items() if k in ports)


class _Reader:
    def __init__(self, spec, netns_of):
        from railab.traffic.engine import Rtnl, in_netns

        self._nl, self._names = {}, {}
        for n in spec.nodes:
            if n.role == "leaf":
                with in_netns(netns_of(n.name)):
                    nl = self._nl[n.name] = Rtnl()
                self._names[n.name] = {i: name for i, (name, _m) in nl.links().items()}

    def read_packets(self) -> dict[str, int]:
        out = {}
        for node, nl in self._nl.items():
            for idx, st in nl.stats().items():
                out[f"{node}:{self._names[node].get(idx)}"] = st[1]
        return out

    def close(self):
        for nl in self._nl.values():
            nl.close()


def limit_row(spec, netns_of, flows, seconds: float) -> dict:
    from railab.traffic.load import LOAD_RT_PRIORITY, LoadEngine

    reader = _Reader(spec, netns_of)
    try:
        with LoadEngine(spec, netns_of, cc="none", line_mbps=10_000) as eng:
            for lf in flows:
                eng.add(lf)
            a = _delivered(reader, spec)
            # at the load engine's real-time priority, as run_load's child runs the engine
            prev = os.sched_getscheduler(0), os.sched_getparam(0)
            try:
                os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(LOAD_RT_PRIORITY))
            except OSError:
                pass
            try:
                r = eng.blast(seconds)
            finally:
                os.sched_setscheduler(0, prev[0], prev[1])
            time.sleep(0.3)  # what is in flight arrives
            b = _delivered(reader, spec)
    finally:
        reader.close()
    return {"pps": round((b - a) / r["seconds"]), "sent_pps": round(r["sent"] / r["seconds"]),
            "cpu_us_per_packet": round(1e6 * r["cpu_s"] / max(1, r["sent"]), 2),
            "threads": r["threads"]}


def engine_row(spec, netns_of, flows, seconds: float, engine: str) -> dict:
    from railab.traffic.load import run_load

    r = run_load(spec, netns_of, flows, cc="none", seconds=seconds, line_mbps=10_000,
                 engine=engine)
    rx = sum(f["rx_packets"] for f in r.flows)
    sent = sum(f["tx_packets"] for f in r.flows)
    return {"pps": round(rx / r.seconds), "lost": r.lost, "threads": r.engine_threads,
            "cpu_us_per_packet": (round(1e6 * r.engine_cpu_s / max(1, sent), 2)
                                  if r.engine_cpu_s is not None else None)}


def collective_row(lab: str, op: str, engine: str) -> dict:
    from railab.testbed.capacity import pfc_session
    from railab.testbed.labref import resolve
    from railab.traffic.collective import run_collective, schedule

    ref = resolve(lab)
    spec = ref.spec()
    with pfc_session(spec, ref.netns_of, enabled=spec.qos.capacity.pfc):
        # at the lab's own rate (no time dilation): the rows say which port rates this host
        # carries at line rate, what railab.traffic.collective.HOST_FRAME_HOPS_PER_CPU is drawn from
        c = run_collective(spec, ref.netns_of, schedule(spec, op, 1 << 20), engine=engine,
                           port_rate="lab")
    d = c.to_dict()
    return {"keeps_rate": d["keeps_rate"], "busbw_of_bound": d["busbw_of_bound"],
            "host_lag": d["sender_lag"], "time_s": d["time_s"], "lost": d["lost"],
            "engine_pps": d["engine_pps"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rates", default="200", help="port rates (Mb/s) of the mini-lossless labs "
                    "the collectives run on, comma-separated (200: the shipped intent)")
    ap.add_argument("--collective-runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="leave the labs up")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_engine: run as root (network namespaces)")
    pid = os.getpid()
    fast = f"bef{pid}"
    rates = [float(r) for r in a.rates.split(",")]
    bases = {r: f"be{int(r)}x{pid}"[:10] for r in rates}
    tmp = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    intent = (ROOT / "topologies/intents/mini-lossless.yml").read_text()
    (tmp / "fast.yml").write_text(intent.replace("port_rate_mbps: 200", "port_rate_mbps: 10000"))
    for r in rates:
        (tmp / f"r{int(r)}.yml").write_text(intent.replace("port_rate_mbps: 200", f"port_rate_mbps: {r:g}"))
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_start": _load()}, "seconds": a.seconds,
                 "runs": a.runs, "rows": [], "collectives": []}
    try:
        _railab("up", str(tmp / "fast.yml"), "--name", fast)
        for r, lab in bases.items():
            _railab("up", str(tmp / f"r{int(r)}.yml"), "--name", lab)
        from railab.testbed.labref import resolve

        ref = resolve(fast)
        spec = ref.spec()
        flows = _perm(spec)
        for run in range(a.runs):
            for kind in ("limit", "c", "c-1", "python"):
                before = _load()
                if kind == "limit":
                    row = limit_row(spec, ref.netns_of, flows, a.seconds)
                elif kind == "c-1":
                    os.environ["RAILAB_ENGINE_THREADS"] = "1"
                    try:
                        row = engine_row(spec, ref.netns_of, flows, a.seconds, "c")
                    finally:
                        del os.environ["RAILAB_ENGINE_THREADS"]
                else:
                    row = engine_row(spec, ref.netns_of, flows, a.seconds, kind)
                row.update(kind=kind, run=run, load_before=before, load_after=_load())
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
        for r, lab in bases.items():
            for op in ("all-reduce", "all-to-all"):
                for k in range(a.collective_runs + 1):
                    engine = "python" if k == a.collective_runs else "c"  # the old engine once
                    row = collective_row(lab, op, engine)
                    row.update(rate_mbps=r, op=op, engine=engine, load=_load())
                    out["collectives"].append(row)
                    print(json.dumps(row), flush=True)
    finally:
        if not a.keep:
            for lab in (fast, *bases.values()):
                subprocess.run([sys.executable, "-m", "railab", "down", lab], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = {}
    for kind in ("limit", "c", "c-1", "python"):
        rows = [r for r in out["rows"] if r["kind"] == kind]
        summary[kind] = {"pps_median": statistics.median(r["pps"] for r in rows),
                         "cpu_us_per_packet_median": statistics.median(
                             r["cpu_us_per_packet"] for r in rows if r["cpu_us_per_packet"] is not None)}
    lim = summary["limit"]["pps_median"]
    for s in summary.values():
        s["share_of_limit"] = round(s["pps_median"] / lim, 3) if lim else None
    out["summary"] = summary
    out["machine"]["load_end"] = _load()
    print("\nmedian over runs (3-hop permutation, 32 QPs, mini-lossless at 10 Gb/s ports):")
    for kind, s in summary.items():
        print(f"  {kind:7s} {s['pps_median']:>9,.0f} packets/s delivered  {s['share_of_limit']:.0%} of "
              f"the limit  {s['cpu_us_per_packet_median']:.2f} us CPU per packet")
    print("collectives (1 MiB per rank, 32 ranks; keeps_rate runs, busbw / line-rate bound median):")
    for r in rates:
        for op in ("all-reduce", "all-to-all"):
            for engine in ("c", "python"):
                rows = [c for c in out["collectives"]
                        if c["rate_mbps"] == r and c["op"] == op and c["engine"] == engine]
                if rows:
                    print(f"  {r:g} Mb/s {op:10s} {engine:6s} keeps rate {sum(c['keeps_rate'] for c in rows)}"
                          f"/{len(rows)}, busbw {statistics.median(c['busbw_of_bound'] or 0 for c in rows):.0%} "
                          f"of the bound, {statistics.median(c['engine_pps'] or 0 for c in rows):,.0f} "
                          "packets/s")
    print(f"load average: start {out['machine']['load_start']}, end {out['machine']['load_end']}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
