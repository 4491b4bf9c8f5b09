#!/usr/bin/env python3
"""Benchmark: is the emulated incast what the DCQCN fluid model says, and how much fabric time
does a run cover per wall second?

For each lab (running, with lab.capacity), each N in --senders and each PFC setting, runs
``railab traffic LAB --pattern incast --senders N --pfc on|off --json`` --runs times and prints
per run: the receiver port used over the last half (measured), the senders' receive rates over
their fair share (min-max), the drop share, the model's utilization and drop share
(``congestion.reference``, computed), ``agrees``, the fabric time covered, the wall time, fabric
milliseconds per wall second and the engine's achieved packet rate (data packets sent per wall
second of sending). Then the done-when verdict of issue 28 per (lab, N, PFC): PFC on, port >= 90 %
and every sender within 15 %; PFC off, port >= 85 % and drops <= 1 %. With PFC on the verdict
sets beside it how often DCQCN itself meets the 15 % band in runs of the same length (the
per-packet reference's ``fair_rate``, computed, 40 runs) and Fisher's exact test (one-sided,
``scipy.stats.fisher_exact``) of whether the emulation meets it less often than that.

Usage (labs up first, e.g. ``railab up mini-lossless``)::

    python scripts/bench_fidelity.py --labs mini-lossless --senders 2,4,8 --pfc on,off --runs 3
    python scripts/bench_fidelity.py --labs old40,mini-lossless --senders 2 --runs 1   # side by side
    python scripts/bench_fidelity.py --labs fx --senders 2 --dcqcn 400g,connectx     # profiles
    python scripts/bench_fidelity.py --senders 8 --pfc off --runs 5 \
        --railab railab,/work/venvs/old/bin/railab                              # two revisions
    python scripts/bench_fidelity.py --senders 8 --pfc off --runs 3 --save runs/  # keep each --json

``--railab`` takes one or more railab executables (e.g. an older revision's venv, or
``RAILAB_LOAD_ENGINE=python railab``: the load engine's Python loop) and runs them
interleaved, run by run, on the same lab, so both see the same machine load. The "start" column
is the senders' sending rate over the first 0.5 lab s (min-max, Mb/s, measured): a host-bound
start shows there.

``--ns3`` also sets each run beside ns-3's stored run of the same scenario (HPCC's RDMA model,
``tests/data/ns3``, computed by ns-3; ``congestion.reference.ns3`` of the run's JSON): the
differences and issue 44's bands (port within 3 points, every sender's share within 0.15, queue
peak within 30 %, :func:`railab.traffic.ns3ref.compare`), against the literal mapping and
against the ``aligned`` variant (railab's 400g DCQCN in ns-3's terms as far as ns-3 can say it),
and a verdict per scenario (issue 44: "2 emulation runs each on an idle machine").
``--cc dcqcn,dcqcn-ns3`` runs each scenario under the paper's DCQCN rules and under HPCC ns-3's
(``railab traffic --cc dcqcn-ns3``: a CNP per marked packet, the first cut one interval late, no
byte counter), interleaved: the second checks the emulation's machinery against ns-3 under
ns-3's own rules (issue 28's criterion is printed for ``dcqcn`` runs only). ns-3's scenario is
one switch, so with ``--ns3`` every run takes ``railab traffic --seed disjoint`` (the first ECMP
hash seed under which the flows share no link short of the receiver's port) unless ``--seed``
says otherwise; a run whose flows share one gets the differences but no verdict. A run with
senders behind the spines is also set beside ns-3's run of that leaf-spine layout when stored
(``leafspine``). Each count per scenario comes with how often ns-3 itself meets the same bands
against its run 1 (its RngRun 2-10, :func:`railab.traffic.ns3ref.self_agreement`), Fisher's exact
test (one-sided) that the emulation meets them less often, and, from 2 runs on, the runs' port
use as a sample beside ns-3's 10 seeds (Mann-Whitney U, two-sided, ``scipy.stats.mannwhitneyu``).

``--read DIR[,DIR]`` runs nothing: it reads the runs ``--save`` kept (``*.json``, ``*.json.gz``)
and prints the same lines and counts, each run set beside the ns-3 records stored now
(:func:`renew_ns3`)::

    python scripts/bench_fidelity.py --ns3 --read docs/data/ns3-emulation-2026-12-06/set4

The machine's load average is printed before and after: quote it with any figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

from scipy.stats import fisher_exact, mannwhitneyu

from railab.traffic import ns3ref
from railab.traffic.load import CC_MODES, steady_state_check

NO_VERDICT = " [no verdict: not ns-3's scenario]"


def _ok(flag: bool) -> str:
    return "ok" if flag else "OUT"


def _bands_text(d: dict) -> str:
    """One :func:`railab.traffic.ns3ref.compare` result as text: each difference, in or out
    of its band, and no verdict when the run was not ns-3's scenario."""
    return (f"port {d['utilization_points']} points ({_ok(d['utilization_ok'])}), share "
            f"{d['share_max_diff']} ({_ok(d['share_ok'])}), queue {d['queue_peak_rel']:.0%} "
            f"({_ok(d['queue_peak_ok'])})" + (NO_VERDICT if d["agrees"] is None else ""))


def _less_often(v: list[bool], agree: int, of: int, what: str) -> str:
    """Fisher's exact test (one-sided, ``scipy.stats.fisher_exact``) that the runs ``v`` (a
    verdict each) meet a criterion less often than a reference that met it ``agree`` of ``of``
    times, as a clause of a count line."""
    p = fisher_exact([[sum(v), len(v) - sum(v)], [agree, of - agree]], alternative="less").pvalue
    return (f"Fisher's exact test (one-sided, scipy.stats.fisher_exact) that the emulation meets "
            f"{what} less often: p = {p:.2f}" + (" (shown worse at 5 %)" if p < 0.05 else " (not shown worse)"))


def read_saved(dirs: list[str]) -> list[tuple[str, dict]]:
    """The runs kept by ``--save`` (or any ``railab traffic --pattern incast --json`` output) in
    ``dirs``: ``*.json`` and ``*.json.gz``, sorted by path, as (path, parsed JSON). Raises
    SystemExit with one line naming what to change: a directory that is missing, is a file,
    holds no runs or is named twice (its runs would count twice), or a file that is not JSON or
    not an incast load run's output."""
    import glob
    import gzip

    out = []
    seen: set[str] = set()
    for d in (x.strip() for x in dirs):
        if not d:
            continue
        where = os.path.realpath(d)
        if not os.path.exists(d):
            raise SystemExit(f"bench_fidelity: --read {d}: no such directory")
        if not os.path.isdir(d):
            raise SystemExit(f"bench_fidelity: --read {d}: a file, not a directory of kept runs")
        if where in seen:
            raise SystemExit(f"bench_fidelity: --read names {d} twice: its runs would count twice")
        seen.add(where)
        paths = sorted(glob.glob(os.path.join(d, "*.json")) + glob.glob(os.path.join(d, "*.json.gz")))
        if not paths:
            raise SystemExit(f"bench_fidelity: --read {d}: no *.json or *.json.gz there")
        for p in paths:
            try:
                with (gzip.open(p, "rt") if p.endswith(".gz") else open(p)) as fh:
                    d_ = json.load(fh)
            except (OSError, ValueError) as exc:
                raise SystemExit(f"bench_fidelity: --read {p}: not JSON ({exc})") from None
            if not (isinstance(d_, dict) and d_.get("pattern") == "incast"
                    and all(k in d_ for k in ("lab", "senders", "pfc"))
                    and isinstance(d_.get("congestion"), dict) and "cc" in d_["congestion"]):
                raise SystemExit(f"bench_fidelity: --read {p}: not the output of railab traffic "
                                 "LAB --pattern incast --json on a lab with lab.capacity")
            out.append((p, d_))
    if not seen:
        raise SystemExit("bench_fidelity: --read: name one or more directories of kept runs (DIR[,DIR])")
    return out


@functools.cache
def _lab_spec(lab: str):
    """The lab spec of a shipped intent, built once per lab for every kept run read."""
    from railab.topologies.generator import build_lab
    from railab.topologies.intent import load_intent

    return build_lab(load_intent(lab)).spec


def renew_ns3(d: dict) -> dict:
    """A kept run's ``railab traffic --json`` output with ``congestion.reference.ns3`` set
    beside the ns-3 records stored now (:func:`railab.traffic.ns3ref.beside`, as a run today
    would get it: the leaf-spine run of its placement, ns-3's spread and self-agreement);
    unchanged when it is not an incast of long flows with a stored scenario."""
    c = d["congestion"]
    ref = c.get("reference") or {}
    old = ref.get("ns3")
    if old is None or d.get("bytes_per_qp") or c.get("queue_peak_bytes") is None:
        return d
    pfc = d["pfc"] == "on"
    stored = ns3ref.load(d["senders"], pfc, old["scenario"].rsplit("-", 1)[-1])
    if stored is None:
        return d
    spec = _lab_spec(d["lab"])

    def leaf(end: str):
        srv, gpu = end.split(":")
        return spec.nic(srv, int(gpu.removeprefix("gpu")) + 1).leaf  # gpuN: NIC N+1
    rcv_leaf = leaf(d["receiver"])
    remote = [f["src"].split(":")[0] for f in c["flows"] if leaf(f["src"]) != rcv_leaf]
    new = ns3ref.beside(stored, spec.qos, pfc, c["fabric_ms"] * 1000, utilization=c["utilization"],
                        ratios=c["fair_share"]["ratios"], queue_peak_bytes=c["queue_peak_bytes"],
                        payload_bytes=c.get("mtu") or d.get("mtu") or 4096,
                        shared_links=c.get("shared_links"), remote=remote)
    new["rules"] = old.get("rules")
    return {**d, "congestion": {**c, "reference": {**ref, "ns3": new}}}


def run_one(lab: str, n: int, pfc: str, seconds: float | None, dcqcn: str | None = None,
            railab: str = "railab", save: str | None = None, cc: str = "dcqcn",
            seed: str | None = None) -> dict:
    # "RAILAB_LOAD_ENGINE=python railab": environment assignments before the executable
    words = railab.split()
    env = dict(os.environ, **dict(w.split("=", 1) for w in words[:-1]))
    argv = [words[-1], "traffic", lab, "--pattern", "incast", "--senders", str(n), "--pfc", pfc,
            "--json"] + (["--cc", cc] if cc != "dcqcn" else [])
    if dcqcn is not None:
        argv += ["--dcqcn", dcqcn]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    if seed is not None:
        argv += ["--seed", seed]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1) or not p.stdout.strip():
        return {"error": (p.stderr or p.stdout).strip().removeprefix("error: ")[-300:], "wall_s": wall}
    if save:
        with open(save, "w") as fh:
            fh.write(p.stdout)
    return figures_of(json.loads(p.stdout), n, pfc, cc, wall)


def figures_of(d: dict, n: int, pfc: str, cc: str, wall: float) -> dict:
    """A run's figures from its ``railab traffic --json`` output ``d`` (``n`` senders, ``pfc``
    "on"/"off", ``cc``, ``wall`` s): what :func:`run_one` returns."""
    c = d["congestion"]
    ref = c.get("reference") or {}
    sent = sum(f["tx_packets"] for f in c["flows"])
    ratios = c["fair_share"]["ratios"]
    start = []
    for f in c["flows"]:
        ser = f["series"]
        head = [m for t, m in zip(ser["t"], ser["tx_mbps"], strict=True) if t <= 0.5]
        start.append(sum(head) / len(head) if head else 0.0)
    vs_ns3 = {}
    ns3 = ref.get("ns3")
    if ns3 is not None and c.get("queue_peak_bytes") is not None:
        figures = {"utilization": c["utilization"], "ratios": ratios,
                   "queue_peak_bytes": c["queue_peak_bytes"]}
        # not ns-3's scenario: the differences, no verdict (ns3ref.beside's "comparable")
        comparable = ns3.get("comparable", True)
        vs_ns3["literal"] = ns3ref.compare(ns3, **figures, comparable=comparable)
        aligned = (ns3ref.load(n, pfc == "on", ns3["scenario"].rsplit("-", 1)[-1] + "-aligned")
                   if cc == "dcqcn" else None)  # railab's 400g in ns-3's terms: not ns-3's rules
        if aligned is not None:
            vs_ns3["aligned"] = ns3ref.compare(aligned["summary"], **figures, comparable=comparable)
        vs_ns3["ns3"] = {k: ns3[k] for k in ("utilization", "ratios", "queue_peak_bytes", "pauses_received")}
        # ns-3's own run-to-run range (RngRun 1..K), beside the verdict on its one stored run
        sp = ns3ref.spread(ns3ref.load(n, pfc == "on", ns3["scenario"].rsplit("-", 1)[-1]) or {})
        if sp is not None:
            vs_ns3["spread"] = dict(sp, vs=ns3ref.within_spread(sp, **figures, comparable=comparable))
        if aligned is not None:
            vs_ns3["ns3_aligned"] = {k: aligned["summary"][k] for k in ("utilization", "ratios", "queue_peak_bytes")}
        if ns3.get("leafspine"):  # senders behind the spines: ns-3's run of that same layout
            vs_ns3["leafspine"] = ns3["leafspine"]
    return {"vs_ns3": vs_ns3, "hash_seed": c.get("hash_seed"), "shared_links": c.get("shared_links") or {},
            "queue_peak_bytes": c.get("queue_peak_bytes"), "pauses": c.get("pause_events"),
            "util": c["utilization"], "ratio_min": min(ratios), "ratio_max": max(ratios),
            "drop_pct": 100 * c["dropped"] / sent if sent else 0.0, "fabric_ms": c["fabric_ms"],
            "model_util": ref.get("utilization"), "model_drop_pct": ref.get("dropped_pct"),
            "agrees": ref.get("agrees"), "wall_s": wall, "lab_s": c["seconds"],
            "pkts_per_s": sent / c["seconds"] if c["seconds"] else 0.0,
            "shortfall": c["engine_shortfall"], "port_rate_mbps": c["port_rate_mbps"],
            "start_min": min(start), "start_max": max(start),
            "met": (c.get("steady_state_check") or {}).get("met"),  # None: an older railab
            "ref_fair": (c.get("steady_state_check") or {}).get("reference_fair_rate")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labs", default="mini-lossless", help="running labs with lab.capacity, "
                    "comma-separated (default: mini-lossless; railab up mini-lossless first)")
    ap.add_argument("--senders", default="2,4,8", help="incast fan-ins N, comma-separated (default 2,4,8)")
    ap.add_argument("--pfc", default="on,off", help="PFC settings, comma-separated (default on,off)")
    ap.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    ap.add_argument("--seconds", type=float, default=None, help="lab seconds (default: railab's)")
    ap.add_argument("--dcqcn", default=None, help="DCQCN profile(s), comma-separated, run side by "
                    "side (default: the lab's)")
    ap.add_argument("--railab", default="railab", help="railab executable(s), comma-separated, "
                    "run interleaved (e.g. another revision's venv)")
    ap.add_argument("--save", default=None, metavar="DIR",
                    help="keep each run's --json output in DIR (lab-N-pfc-run[-k].json)")
    ap.add_argument("--cc", default="dcqcn", help="congestion control(s), comma-separated, run "
                    "interleaved: dcqcn (the paper's rules) and/or dcqcn-ns3 (HPCC ns-3's rules)")
    ap.add_argument("--ns3", action="store_true", help="each run beside ns-3's stored run of the same "
                    "scenario, with issue 44's bands")
    ap.add_argument("--seed", default=None, help="railab traffic --seed for every run: a number, or "
                    "disjoint (the flows share no link short of the receiver's port: ns-3's one-switch "
                    "scenario); default: disjoint with --ns3, else the lab's own ECMP hash")
    ap.add_argument("--read", default=None, metavar="DIR[,DIR]",
                    help="run nothing: read the runs --save kept in DIR(s) (*.json, *.json.gz; "
                    "their own lab, N, PFC and --cc) and print the same lines and counts")
    a = ap.parse_args()
    bad = [c for c in a.cc.split(",") if c not in CC_MODES]
    if bad:
        ap.error(f"--cc {','.join(bad)}: use one or more of {', '.join(CC_MODES)}")
    seed = a.seed if a.seed is not None else ("disjoint" if a.ns3 else None)
    if a.save:
        os.makedirs(a.save, exist_ok=True)
    if a.read is not None and not a.read.strip(",").strip():
        ap.error("--read: name one or more directories of kept runs (DIR[,DIR])")
    saved = read_saved(a.read.split(",")) if a.read is not None else None
    if saved is None:
        print(f"load average before: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    hdr = ("lab", "DCQCN", "N", "PFC", "run", "port used", "rx/fair", "drops %", "model used", "model drops %",
           "agrees", "fabric ms", "wall s", "fabric ms/wall s", "pkt/s", "shortfall",
           "start Mb/s")
    print(" | ".join(hdr), flush=True)
    verdicts = {}
    ns3_verdicts: dict = {}
    ns3_skipped: dict = {}  # runs that were not ns-3's scenario (e.g. an ECMP collision)
    ns3_self: dict = {}  # (key, var) -> ns3ref.self_agreement of the record the runs were set beside

    def tally(k: tuple, verdict: bool | None) -> None:
        """Count a run's verdict against ns-3 (None: not ns-3's scenario, counted apart)."""
        if verdict is None:
            ns3_skipped[k] = ns3_skipped.get(k, 0) + 1
        else:
            ns3_verdicts.setdefault(k, []).append(verdict)
    ref_fair = {}  # (lab, N, PFC) -> the per-packet reference's fair_rate (PFC on; same seeds)
    profiles = a.dcqcn.split(",") if a.dcqcn else [None]
    exes = a.railab.split(",")
    ccs = a.cc.split(",")
    emu_util: dict = {}  # (key, var) -> the emulation's port use of each run (fractions)
    ns3_util: dict = {}  # (key, var) -> ns-3's port use of each of its seeds (fractions)
    cases = ([(d["lab"], d["senders"], d["pfc"], k, None, "railab", d["congestion"]["cc"])
              for k, (_path, d) in enumerate(saved)] if saved is not None else
             [(lab, n, pfc, k, prof, exe, cc) for lab in a.labs.split(",")
              for n in (int(x) for x in a.senders.split(",")) for pfc in a.pfc.split(",")
              for k in range(a.runs) for prof in profiles for exe in exes for cc in ccs])
    for lab, n, pfc, k, prof, exe, cc in cases:
        label = (lab if len(exes) == 1 else f"{lab} ({exe})") + ("" if cc == "dcqcn" else f" --cc {cc}")
        key = (f"{label} | {prof or 'lab'}", n, pfc)
        save = (os.path.join(a.save, f"{lab}-{n}-{pfc}-{k + 1}"
                             + (f"-{exes.index(exe)}" if len(exes) > 1 else "")
                             + (f"-{prof}" if prof else "") + ("" if cc == "dcqcn" else f"-{cc}")
                             + ".json") if a.save else None)
        if saved is not None:  # a kept run: its figures as run_one gives them (no wall time)
            r = figures_of(renew_ns3(saved[k][1]), n, pfc, cc, 0.0)
            k = sum(1 for x in cases[:k] if x[1:3] == (n, pfc) and x[6] == cc)
        else:
            r = run_one(lab, n, pfc, a.seconds, prof, exe, save=save, cc=cc, seed=seed)
        if "error" in r:
            print(f"{key[0]} | {n} | {pfc} | {k + 1} | error: {r['error']}", flush=True)
            verdicts.setdefault(key, []).append(False)
            continue
        if cc == "dcqcn":  # issue 28's criterion is the paper's DCQCN's, not ns-3's
            ok = r["met"] if r["met"] is not None else steady_state_check(  # an older railab's run
                r["util"], [r["ratio_min"], r["ratio_max"]], r["drop_pct"], pfc=pfc == "on")["met"]
            verdicts.setdefault(key, []).append(ok)
        if r.get("ref_fair"):
            ref_fair[key] = r["ref_fair"]
        mu = "-" if r["model_util"] is None else f"{r['model_util']:.1%}"
        md = "-" if r["model_drop_pct"] is None else f"{r['model_drop_pct']:.2f}"
        rate = f"{r['fabric_ms'] / r['wall_s']:.3f}" if r["wall_s"] else "-"
        wall = f"{r['wall_s']:.1f}" if r["wall_s"] else "-"
        print(f"{key[0]} | {n} | {pfc} | {k + 1} | {r['util']:.1%} | {r['ratio_min']:.2f}-"
              f"{r['ratio_max']:.2f} | {r['drop_pct']:.2f} | {mu} | {md} | {r['agrees']} | "
              f"{r['fabric_ms']:g} | {wall} | {rate} | "
              f"{r['pkts_per_s']:.0f} | {r['shortfall']:.1%} | {r['start_min']:.0f}-"
              f"{r['start_max']:.0f}", flush=True)
        if a.ns3:
            vs = r["vs_ns3"]
            shared = "; ".join(f"{len(v)} flows share {k}" for k, v in r["shared_links"].items())
            print(f"  ECMP hash seed {r['hash_seed'] if r['hash_seed'] is not None else 'the lab’s'}: "
                  + (shared + " (not ns-3's one-switch scenario: no verdict)" if shared else
                     "no link shared short of the receiver's port"), flush=True)
            if not vs:
                print(f"  ns-3: no stored run of {n}:1 PFC {pfc} at this profile", flush=True)
            else:
                q = r["queue_peak_bytes"] / 1e6
                for var in ("literal", "aligned"):
                    if var not in vs:
                        continue
                    ref3 = vs["ns3" if var == "literal" else "ns3_aligned"]
                    d = vs[var]
                    print(f"  vs ns-3 {var}: ns-3 port {ref3['utilization']:.1%}, shares "
                          f"{min(ref3['ratios']):.2f}-{max(ref3['ratios']):.2f}, queue peak "
                          f"{ref3['queue_peak_bytes'] / 1e6:.2f} MB; emulation queue peak {q:.2f} MB; "
                          + _bands_text(d), flush=True)
                    tally((key, var), d["agrees"])
                    if var == "literal" and (sa := (vs.get("spread") or {}).get("self_agreement")):
                        ns3_self[(key, var)] = sa
                    if var == "literal" and d["agrees"] is not None and (
                            us := (vs.get("spread") or {}).get("utilization_runs")):
                        emu_util.setdefault((key, var), []).append(r["util"])
                        ns3_util[(key, var)] = us
                if sp := vs.get("spread"):
                    w = sp["vs"]
                    print(f"  vs ns-3's own spread (RngRun {sp['rng_runs'][0]}-{sp['rng_runs'][-1]}): "
                          f"port {sp['utilization'][0]:.1%}-{sp['utilization'][1]:.1%}, shares "
                          f"{sp['ratios'][0]:.2f}-{sp['ratios'][1]:.2f}, queue peak "
                          f"{sp['queue_peak_bytes'][0] / 1e6:.2f}-{sp['queue_peak_bytes'][1] / 1e6:.2f} MB; "
                          f"widened by the bands: port {_ok(w['utilization_ok'])}, shares "
                          f"{_ok(w['share_ok'])}, queue {_ok(w['queue_peak_ok'])}"
                          + (NO_VERDICT if w["within"] is None else ""), flush=True)
                    tally((key, "spread"), w["within"])
                if ls := vs.get("leafspine"):
                    d = ls["vs"]
                    print(f"  vs ns-3 in the run's leaf-spine layout ({ls['scenario']}): ns-3 port "
                          f"{ls['utilization']:.1%}, queue peak {ls['queue_peak_bytes'] / 1e6:.2f} MB; "
                          + _bands_text(d), flush=True)
                    tally((key, "leafspine"), d["agrees"])
                    if sa := (ls.get("ns3_spread") or {}).get("self_agreement"):
                        ns3_self[(key, "leafspine")] = sa
                    if d["agrees"] is not None and (us := (ls.get("ns3_spread") or {}).get("utilization_runs")):
                        emu_util.setdefault((key, "leafspine"), []).append(r["util"])
                        ns3_util[(key, "leafspine")] = us
    if saved is None:
        print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
    for key, var in dict.fromkeys([*ns3_verdicts, *ns3_skipped]):
        v = ns3_verdicts.get((key, var), [])
        skip = ns3_skipped.get((key, var), 0)
        what = ("ns-3's own spread (its seeds, widened by issue 44's bands)" if var == "spread"
                else "issue 44's bands")
        line = (f"ns-3 {var} {key[0]} {key[1]}:1 PFC {key[2]}: {sum(v)} of {len(v)} runs within {what}"
                + (f" ({skip} more not ns-3's scenario, no verdict)" if skip else ""))
        if (sa := ns3_self.get((key, var))) is not None and v:
            # beside how often ns-3 meets the same bands against its own run 1 (its other seeds)
            line += (f"; ns-3 itself (its other seeds against its run 1) in {sa['agree']} of "
                     f"{sa['of']}; " + _less_often(v, sa["agree"], sa["of"], "them"))
        if len(eu := emu_util.get((key, var), [])) >= 2 and (nu := ns3_util.get((key, var))):
            # the runs' port use as a sample beside ns-3's seeds as a sample (not one draw)
            p = mannwhitneyu(eu, nu, alternative="two-sided").pvalue
            line += (f"; port use: emulation mean {100 * sum(eu) / len(eu):.1f} % over {len(eu)} "
                     f"runs, ns-3 {100 * sum(nu) / len(nu):.1f} % over its {len(nu)} seeds; "
                     f"Mann-Whitney U (two-sided, scipy.stats.mannwhitneyu) p = {p:.2f}"
                     + (" (the two differ at 5 %)" if p < 0.05 else " (no difference shown)"))
        print(line)
    for key, v in verdicts.items():
        lab, n, pfc = key
        line = f"verdict {lab} {n}:1 PFC {pfc}: {sum(v)} of {len(v)} runs meet issue 28's criterion"
        rf = ref_fair.get(key)
        if rf is not None:  # beside DCQCN's own rate (the per-packet reference, computed)
            line += (f"; DCQCN itself (per-packet reference) keeps every sender within 15 % in "
                     f"{rf['fair']} of {rf['runs']} runs ({rf['confidence']:.0%} interval "
                     f"{rf['low']:.0%}-{rf['high']:.0%}); " + _less_often(v, rf["fair"], rf["runs"], "it"))
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
