#!/usr/bin/env python3
"""Measure PFC's failure modes on a running ``mini-lossless`` lab (issue 45; docs/congestion.md
"PFC failure modes"): the storm scenario and the deadlock scenario of
:mod:`railab.testbed.pfcfail`, ``--runs`` times each, with the PFC watchdog off, then started
live with ``--detection-ms`` / ``--restoration-ms`` / ``--action``. Prints one JSON line per run
(lab seconds; bytes) and the host's load average before and after.

    scripts/pfc_failures.py LAB [--runs 3] [--detection-ms 300] [--restoration-ms 200]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from railab.checks.lab import LiveLab
from railab.testbed import pfcfail
from railab.testbed.pfc import Watchdog


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lab")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--detection-ms", type=float, default=300.0)
    ap.add_argument("--restoration-ms", type=float, default=200.0)
    ap.add_argument("--action", default="drop", choices=["drop", "forward"])
    ap.add_argument("--only", choices=["storm", "deadlock"], default=None)
    a = ap.parse_args()
    lab = LiveLab.attach(a.lab)
    wd = Watchdog(detection_time_ms=a.detection_ms, restoration_time_ms=a.restoration_ms,
                  action=a.action)
    for i in range(a.runs):
        for what in ("storm", "deadlock"):
            if a.only and what != a.only:
                continue
            load = os.getloadavg()[0]
            t = time.monotonic()
            if what == "storm":
                r = pfcfail.storm_victims(lab.name, lab.spec, lab.netns_of, wd)
                row = {k: r[k] for k in ("stall_off_s", "stuck_s", "recovered_s", "stall_on_s", "victim_rx",
                                         "victim_sent", "culprit_rx", "culprit_sent", "pauses")}
                row["restore_lag_s"] = r["watchdog"].get(r["stormed"], {}).get("restore_lag_s")
            else:
                r = pfcfail.deadlock_run(lab.spec, lab.netns_of, wd)
                row = {"filled_s": r["filled_s"], "deadlocked": r["deadlocked"], "broken_s": r["broken_s"],
                       "held_bytes": sorted(r["held_bytes"].values()),
                       "detections": sum(v["detections"] for v in r["watchdog"].values())}
            print(json.dumps({"scenario": what, "run": i + 1, **row, "watchdog":
                              {"detection_time_ms": wd.detection_time_ms,
                               "restoration_time_ms": wd.restoration_time_ms, "action": wd.action},
                              "wall_s": round(time.monotonic() - t, 2),
                              "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
