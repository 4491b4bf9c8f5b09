#!/usr/bin/env python3
"""Benchmark: issue 30's load-balancing comparison on ``mini-lossless``, measured, with the
issue's targets checked.

Brings up ``mini-lossless`` (lab ``bl<pid>``), runs ``railab lb compare`` for ``elephants``
(``--runs`` times, default 2) and ``all-to-all`` (same) and once for ``incast``, prints each
table with the machine load before and after, then the targets of the issue per run:

- elephants: ecmp imbalance >= 1.8; spray-rr <= 1.15 with reordered % > 0; flowlet <= 1.35 with
  reordered % at most a tenth of spray-rr's; pbr <= 1.05 with 0 reordered; wcmp below ecmp;
- all-to-all: the best busbw of spray-rr / flowlet at least ecmp's.

Timing-sensitive (the engine shares 2 cores with the lab), so these live here, not in the
suite. Usage: ``python scripts/bench_lb.py [--runs N] [--keep]``. Exit 0 when every target held
in every run, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def loadavg() -> str:
    return open("/proc/loadavg").read().split()[0]


def compare(lab: str, workload: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "railab", "lb", "compare", lab, "--workload",
                        workload, "--json"], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"lb compare {workload} failed: {r.stderr}")
    return json.loads(r.stdout)


def table(res: dict) -> str:
    rows = [f"  {'mode':<13} {'imbalance':>9} {'reord%':>7} {'maxPSNd':>7} {'drops':>5} "
            f"{'pauses':>6} {'FCT p50 s':>9} {'strag':>6} {'busbw(fabric Gb/s)':>18}"]
    for m in res["modes"]:
        rows.append(f"  {m['mode']:<13} {m['uplink_imbalance']:>9.3f} {m['reordered_pct']:>7.2f} "
                    f"{m['max_psn_distance']:>7} {m['drops']:>5} {m['pauses'] or 0:>6} "
                    f"{m['fct_p50_s'] or 0:>9.3f} {m['straggler'] or 0:>6.2f} "
                    f"{m['fabric_busbw_gbps'] if m['fabric_busbw_gbps'] is not None else '-':>18}")
    return "\n".join(rows)


def elephant_targets(res: dict) -> list[str]:
    m = {x["mode"]: x for x in res["modes"]}
    bad = []
    if m["ecmp"]["uplink_imbalance"] < 1.8:
        bad.append("ecmp imbalance < 1.8")
    if not (m["spray-rr"]["uplink_imbalance"] <= 1.15 and m["spray-rr"]["reordered_pct"] > 0):
        bad.append("spray-rr: imbalance <= 1.15 with reordering")
    if not (m["flowlet"]["uplink_imbalance"] <= 1.35
            and m["flowlet"]["reordered_pct"] <= m["spray-rr"]["reordered_pct"] / 10):
        bad.append("flowlet: imbalance <= 1.35, reordering <= spray-rr's / 10")
    if not (m["pbr"]["uplink_imbalance"] <= 1.05 and m["pbr"]["reordered_pct"] == 0):
        bad.append("pbr: imbalance <= 1.05 with no reordering")
    if not m["wcmp"]["uplink_imbalance"] < m["ecmp"]["uplink_imbalance"]:
        bad.append("wcmp below ecmp")
    return bad


def a2a_targets(res: dict) -> list[str]:
    m = {x["mode"]: x for x in res["modes"]}
    best = max(m["spray-rr"]["busbw_gbps"] or 0, m["flowlet"]["busbw_gbps"] or 0)
    return [] if best >= (m["ecmp"]["busbw_gbps"] or 0) else ["best of spray-rr/flowlet busbw < ecmp's"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="leave the lab up")
    a = ap.parse_args()
    lab = f"bl{os.getpid()}"
    subprocess.run([sys.executable, "-m", "railab", "up", "mini-lossless", "--name", lab],
                   check=True, capture_output=True)
    failed = 0
    try:
        for workload, runs, check in (("elephants", a.runs, elephant_targets),
                                      ("all-to-all", a.runs, a2a_targets),
                                      ("incast", 1, None)):
            for i in range(runs):
                before = loadavg()
                res = compare(lab, workload)
                print(f"{workload} run {i + 1} (load1 {before} -> {loadavg()}; time scale "
                      f"{res['time_scale']:g}; measured)")
                print(table(res))
                if check is not None:
                    bad = check(res)
                    failed += bool(bad)
                    print("  targets: " + ("met" if not bad else "MISSED: " + "; ".join(bad)))
    finally:
        if not a.keep:
            subprocess.run([sys.executable, "-m", "railab", "down", lab], capture_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
