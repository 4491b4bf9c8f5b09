#!/usr/bin/env python3
"""railab against IPMininet on the same eBGP Clos shapes, side by side in one run.

Usage (root): ``python scripts/bench_peer.py [--runs N] [--shapes 2x4,4x16] [--json FILE]``

For each shape (``SxL``: S spines, L leaves) it alternates A B A B ... ``--runs`` times:

* railab: ``railab up scripts/peer-intents/clos-SxL.yml`` then ``railab down``, each its own
  process, timed from the first launch to the end of ``down`` (whole process: interpreter start,
  generate, build, FRR start, convergence checked against lab.json, teardown). The railab lab
  also has servers (2 at 2x4, 8 at 4x16) that IPMininet's has not.
* IPMininet 1.0: ``../shared/peer-bench/ipmn_clos_bench.py --spines S --leaves L`` (build,
  start, convergence = every prefix in every router's FIB, stop), timed the same way. Install
  it first with ``../shared/peer-bench/install-ipmininet.sh`` (into /tmp/ipmn-venv); without
  it only railab is measured and the ratio column says so.

Prints medians, the ratio railab/IPMininet, the railab phase breakdown (``railab inspect``'s
table of the last run) and ``/proc/loadavg`` before and after: figures from a loaded machine
are not comparable to idle ones. Target (issue 12): ratio <= 0.25 at both shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT.parent / "shared" / "peer-bench"
IPMN_PY = Path("/tmp/ipmn-venv/bin/python")


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _railab_argv() -> list[str]:
    """The ``railab`` console script beside this interpreter (what pip installed), else the
    one on PATH. A version manager's shim on PATH (pyenv: a bash script that resolves the
    version, ~0.1-0.3 s per call) would add its own start-up to every railab command, while
    IPMininet runs from its venv's interpreter directly."""
    beside = Path(sys.executable).with_name("railab")
    exe = str(beside) if beside.exists() else shutil.which("railab")
    return [exe] if exe else [sys.executable, "-m", "railab"]


def run_railab(shape: str, workdir: Path) -> dict:
    """One railab up + down of ``clos-<shape>``: wall seconds and the recorded phase timings."""
    intent = ROOT / "scripts" / "peer-intents" / f"clos-{shape}.yml"
    name = f"peer{shape}{os.getpid() % 10000}"
    labdir = workdir / name
    t0 = time.monotonic()
    up = subprocess.run([*_railab_argv(), "up", str(intent), "--name", name, "-o", str(labdir)],
                        capture_output=True, text=True)
    t_up = time.monotonic() - t0
    timings = {}
    if up.returncode == 0:
        insp = subprocess.run([*_railab_argv(), "inspect", name, "--json"], capture_output=True, text=True)
        try:
            timings = json.loads(insp.stdout).get("timings", {})
        except json.JSONDecodeError:
            pass
    t1 = time.monotonic()
    down = subprocess.run([*_railab_argv(), "down", name], capture_output=True, text=True)
    t_down = time.monotonic() - t1
    shutil.rmtree(labdir, ignore_errors=True)
    ok = up.returncode == 0 and down.returncode == 0
    return {"ok": ok, "wall_s": round(t_up + t_down, 3), "up_s": round(t_up, 3), "down_s": round(t_down, 3),
            "timings": timings, "error": None if ok else (up.stderr or down.stderr)[-500:]}


def run_ipmininet(shape: str, workdir: Path) -> dict | None:
    """One IPMininet build + start + convergence + stop; None when IPMininet is not installed."""
    if not IPMN_PY.exists() or not (PEER / "ipmn_clos_bench.py").exists():
        return None
    spines, leaves = shape.split("x")
    out = workdir / f"ipmn-{shape}.json"
    env = {**os.environ, "PATH": f"/usr/lib/frr:{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    p = subprocess.run([str(IPMN_PY), str(PEER / "ipmn_clos_bench.py"), "--spines", spines, "--leaves", leaves,
                        "--json", str(out)], capture_output=True, text=True, env=env, cwd=workdir)
    wall = time.monotonic() - t0
    detail = json.loads(out.read_text()) if out.exists() else {}
    return {"ok": p.returncode == 0, "wall_s": round(wall, 3), "detail": detail,
            "error": None if p.returncode == 0 else p.stderr[-500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per tool and shape (alternating)")
    ap.add_argument("--shapes", default="2x4,4x16", help="comma-separated SxL shapes")
    ap.add_argument("--json", type=Path, help="write every run as JSON here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_peer.py needs root (network namespaces, FRR)", file=sys.stderr)
        return 2
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in shapes:
        if not (ROOT / "scripts" / "peer-intents" / f"clos-{s}.yml").exists():
            print(f"no intent scripts/peer-intents/clos-{s}.yml: shapes are 2x4 and 4x16", file=sys.stderr)
            return 2
    load_before = _load()
    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="railab-peer-") as tmp:
        work = Path(tmp)
        for shape in shapes:
            runs = results.setdefault(shape, {"railab": [], "ipmininet": []})
            for i in range(args.runs):
                r = run_railab(shape, work)
                runs["railab"].append(r)
                print(f"{shape} run {i + 1}: railab {r['wall_s']:.2f} s{'' if r['ok'] else ' FAILED'}", flush=True)
                m = run_ipmininet(shape, work)
                if m is not None:
                    runs["ipmininet"].append(m)
                    print(f"{shape} run {i + 1}: IPMininet {m['wall_s']:.2f} s{'' if m['ok'] else ' FAILED'}",
                          flush=True)
    load_after = _load()
    print(f"\nload1/5/15 before {load_before}, after {load_after}")
    print("| shape | IPMininet (median) | railab up + down (median) | ratio railab/IPMininet |")
    print("|---|---|---|---|")
    summary = {}
    for shape, runs in results.items():
        rl = [r["wall_s"] for r in runs["railab"] if r["ok"]]
        im = [r["wall_s"] for r in runs["ipmininet"] if r["ok"]]
        med_r = statistics.median(rl) if rl else None
        med_i = statistics.median(im) if im else None
        ratio = round(med_r / med_i, 2) if med_r and med_i else None
        summary[shape] = {"railab_s": med_r, "ipmininet_s": med_i, "ratio": ratio}
        fmt = lambda v: f"{v:.2f} s" if v else "not measured"  # noqa: E731
        print(f"| {shape} | {fmt(med_i)} | {fmt(med_r)} | {ratio if ratio else '-'} |")
    for shape, runs in results.items():
        last = next((r for r in reversed(runs["railab"]) if r["timings"]), None)
        if last:
            print(f"\nrailab {shape} phases (last run): "
                  + ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in last["timings"].items()))
    if args.json:
        args.json.write_text(json.dumps({"load_before": load_before, "load_after": load_after,
                                         "summary": summary, "runs": results}, indent=1))
    return 0 if all(r["ok"] for runs in results.values() for rs in runs.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
