#!/usr/bin/env python3
"""Does the load engine keep its configured rate? (issue 14: within 10 %)

Usage (root): ``python scripts/bench_load.py [--lab NAME] [--qps 8] [--rates 40,80]
[--seconds 5] [--runs 3] [--json FILE]``

Runs ``--qps`` QPs between distinct server pairs (server 2k -> server 2k+1 on the same leaves,
so no two QPs share a sender NIC, a receiver NIC or any fabric link: nothing congests), ``--cc
none``, each at the line rate ``R`` of ``--rates`` (Mb/s), for ``--seconds`` lab seconds,
``--runs`` times per rate, and reports per run the configured aggregate ``qps x R``, what the
engine sent (tx) and what arrived (rx), both as Mb/s and as a share of the configured rate, the
engine's own shortfall (:attr:`railab.traffic.load.LoadResult.engine_shortfall`: time it lost
to the host) and the back-pressure count; then the median per rate and PASS when the median tx
is within 10 % of the configured rate. Rates count Ethernet frame bytes (what tbf/htb count),
4096-byte RoCE payloads.

``--lab`` uses a running lab (on a lab with ``lab.capacity`` the NIC queues shape at the port
rate, so a rate above it is back-pressured, not an engine failure: the script says so);
without it the script brings up ``mini`` under its own name and takes it down at the end.
``/proc/loadavg`` before and after each rate is printed: figures from a loaded machine (other
labs, other helpers) are not comparable to an idle one's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _flows(spec, qps: int):
    from railab.traffic.load import LoadFlow
    from railab.traffic.patterns import Flow, route

    servers = [n.name for n in spec.by_role("server")]
    # neighbours on one leaf (1 hop): no fabric link is shared, so ECMP cannot collide
    pairs = [(servers[k], servers[k + 1]) for k in range(0, len(servers) - 1, 2)]
    out = []
    G = spec.gpus_per_server
    for i in range(qps):
        a, b = pairs[i % len(pairs)]
        gpu = (i // len(pairs)) % G
        if i // len(pairs) >= G:
            raise SystemExit(f"--qps {qps}: this lab has room for {len(pairs) * G} QPs on "
                             "distinct NICs")
        out.append(LoadFlow(route(spec, Flow((a, gpu), (b, gpu)))))
    return out


def bench(lab: str, qps: int, rates: list[float], seconds: float, runs: int) -> dict:
    from railab.testbed.labref import resolve
    from railab.traffic.load import run_load

    ref = resolve(lab)
    spec = ref.spec()
    flows = _flows(spec, qps)
    cap = spec.qos.capacity
    out = {"lab": spec.name, "qps": qps, "seconds": seconds, "runs": runs,
           "capacity": cap.enabled, "port_rate_mbps": cap.port_rate_mbps if cap.enabled else None,
           "rates": []}
    for rate in rates:
        load_before = _load()
        rows = []
        for _ in range(runs):
            r = run_load(spec, ref.netns_of, flows, cc="none", seconds=seconds, line_mbps=rate)
            rx = sum(f["rx_bytes"] for f in r.flows) * 8 / r.seconds / 1e6
            rows.append({"configured_mbps": qps * rate, "tx_mbps": r.offered_mbps,
                         "rx_mbps": round(rx, 3), "tx_share": round(r.offered_mbps / (qps * rate), 4),
                         "rx_share": round(rx / (qps * rate), 4),
                         "engine_shortfall": r.engine_shortfall, "backpressure": r.backpressure,
                         "lost": r.lost})
        med = statistics.median(x["tx_share"] for x in rows)
        out["rates"].append({"line_mbps": rate, "runs": rows, "median_tx_share": med,
                             "median_rx_share": statistics.median(x["rx_share"] for x in rows),
                             "pass": abs(1 - med) <= 0.10,
                             "shaped_below": bool(cap.enabled and rate > cap.port_rate_mbps),
                             "loadavg_before": load_before, "loadavg_after": _load()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", help="a running lab (default: bring up mini under a name of its own)")
    ap.add_argument("--qps", type=int, default=8)
    ap.add_argument("--rates", default="40,80", help="line rates per QP, Mb/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    rates = [float(x) for x in a.rates.split(",") if x]
    lab, tmp = a.lab, None
    railab = [sys.executable, "-m", "railab"]
    if lab is None:
        lab = f"bl{os.getpid() % 100000}"
        tmp = tempfile.mkdtemp(prefix="bench-load-")
        subprocess.run([*railab, "generate", "mini", "-o", f"{tmp}/{lab}", "--name", lab],
                       check=True, capture_output=True)
        subprocess.run([*railab, "up", f"{tmp}/{lab}"], check=True)
    try:
        res = bench(lab, a.qps, rates, a.seconds, a.runs)
    finally:
        if tmp is not None:
            subprocess.run([*railab, "down", lab], capture_output=True)
    for r in res["rates"]:
        print(f"{res['qps']} QPs x {r['line_mbps']:g} Mb/s = {res['qps'] * r['line_mbps']:g} Mb/s "
              f"configured ({res['seconds']:g} s, {res['runs']} runs, lab {res['lab']}):")
        for x in r["runs"]:
            print(f"  tx {x['tx_mbps']:8.2f} Mb/s ({x['tx_share']:.1%})  rx {x['rx_mbps']:8.2f} "
                  f"Mb/s ({x['rx_share']:.1%})  shortfall {x['engine_shortfall']:.1%}  "
                  f"back-pressure {x['backpressure']}  lost {x['lost']}")
        verdict = "PASS" if r["pass"] else "FAIL"
        note = (" (above the lab's port rate: the NIC queues hold it back)"
                if r["shaped_below"] else "")
        print(f"  median tx {r['median_tx_share']:.1%} of configured: {verdict} (within 10 %)"
              f"{note}; loadavg {r['loadavg_before']} -> {r['loadavg_after']}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return 0 if all(r["pass"] or r["shaped_below"] for r in res["rates"]) else 1


if __name__ == "__main__":
    sys.exit(main())
