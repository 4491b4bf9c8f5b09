#!/usr/bin/env python3
"""Do the senders of an 8:1 DCQCN incast converge to a fair share? (issue 14)

Usage (root): ``python scripts/bench_fairshare.py --lab NAME [--senders 8] [--seconds 6,8]
[--runs 3] [--dcqcn 400g,paper] [--pfc on] [--json FILE]``

Runs ``railab traffic LAB --pattern incast --senders N --cc dcqcn --pfc P --dcqcn PROFILE
--seconds S --json`` (in process, the command's own code path) ``--runs`` times for every
profile and run length, and prints per run the ``congestion.fair_share`` block railab computes
(:func:`railab.traffic.load.fair_share`): each sender's receive rate over the last half of the
run as a share of 1/N of the port (min and max), whether all are within 25 %, the DCQCN rates'
shares (``cc_ratios``: near 1 when DCQCN itself holds the share), the PFC PAUSEs of the last
half, drops, and the engine's shortfall and exit code; then per profile and length how many
runs met the criterion. ``/proc/loadavg`` before and after each run is printed: the machine is
shared, and a run whose engine fell short of its rate (exit 1, ``shortfall`` > 10 %) says the
host, not the fabric, set part of the figures -- re-run it.

The lab must be up and have ``lab.capacity`` (e.g. ``railab generate mini-lossless --name
fairml -o /tmp/fairml && railab up /tmp/fairml``); the script does not bring labs up or down.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_once(lab: str, senders: int, seconds: float, profile: str, pfc: str) -> dict:
    """One incast through the CLI (typer's runner, in process); returns the parsed JSON with
    ``exit`` and the load averages added. Raises SystemExit with the output when it is not
    JSON (a usage error, a lab that is not up)."""
    from typer.testing import CliRunner

    from railab.cli import app

    before = _load()
    res = CliRunner().invoke(app, ["traffic", lab, "--pattern", "incast", "--senders",
                                   str(senders), "--cc", "dcqcn", "--pfc", pfc, "--dcqcn",
                                   profile, "--seconds", f"{seconds:g}", "--json"])
    try:
        d = json.loads(res.output)
    except ValueError:
        raise SystemExit(f"exit {res.exit_code}: {res.output}") from None
    d["exit"] = res.exit_code
    d["load_before"], d["load_after"] = before, _load()
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab", required=True, help="a running lab with lab.capacity")
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--seconds", default="8", help="run lengths, lab s, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dcqcn", default="400g", help="profiles, comma-separated (400g, paper)")
    ap.add_argument("--pfc", default="on", choices=("on", "off"))
    ap.add_argument("--json", type=Path, help="write every run's JSON summary here")
    a = ap.parse_args(argv)
    lengths = [float(x) for x in a.seconds.split(",")]
    profiles = a.dcqcn.split(",")
    rows, met = [], {}
    print(f"{a.lab}: {a.senders}:1 incast, --cc dcqcn --pfc {a.pfc}, {a.runs} runs each")
    print(f"{'profile':7} {'s':>4} {'ratio min-max':>14} {'within':>6} {'cc min-max':>11} "
          f"{'sum':>6} {'late PAUSE':>10} {'drops':>6} {'short':>6} {'exit':>4}  load")
    for prof in profiles:
        for secs in lengths:
            for _ in range(a.runs):
                d = run_once(a.lab, a.senders, secs, prof, a.pfc)
                c = d["congestion"]
                fs = c["fair_share"]
                row = {"profile": prof, "seconds": secs, "exit": d["exit"],
                       "ratios": fs["ratios"], "cc_ratios": fs["cc_ratios"],
                       "within": fs["within"], "sum_mbps": fs["sum_mbps"],
                       "pause_events_last_half": fs["pause_events_last_half"],
                       "dropped": c["dropped"], "engine_shortfall": c["engine_shortfall"],
                       "load": [d["load_before"], d["load_after"]]}
                rows.append(row)
                met.setdefault((prof, secs), []).append(fs["within"])
                print(f"{prof:7} {secs:4g} {fs['min']:6.2f}-{fs['max']:<7.2f} "
                      f"{'yes' if fs['within'] else 'NO':>6} {min(fs['cc_ratios']):5.2f}-"
                      f"{max(fs['cc_ratios']):<5.2f} {fs['sum_mbps']:6.1f} "
                      f"{fs['pause_events_last_half'] or 0:>10} {c['dropped']:>6} "
                      f"{c['engine_shortfall']:6.1%} {d['exit']:>4}  {d['load_before']} -> "
                      f"{d['load_after']}", flush=True)
    print()
    for (prof, secs), oks in met.items():
        print(f"{prof} {secs:g} s: {sum(oks)} of {len(oks)} runs within 25 % of the fair share")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(all(v) for v in met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
