#!/usr/bin/env python3
"""Random sets of stacked faults on a live lab, each audited against the root-cause rules
(issue 48, ``railab.checks.rootaudit``); optionally recorded for the offline tests.

    python3 scripts/stacked_faults.py LAB [--sets 20] [--seed 1] [--min 2] [--max 6]
                                          [--singles N] [--record FILE] [--fault 'KIND ARGS...' ...]

Per set: inject the faults (``railab fault``; a fault refused because another holds its
element is left out), wait until two ``railab check --json`` runs 1 s apart fail the same
rows (hops rows aside: grey loss makes them flicker; at most 40 s), audit the last one, heal
everything and wait for green (``railab check --wait 60``). ``--singles N`` runs N catalog
faults drawn at random (-1: every one), each alone, instead of random sets; ``--fault``
(repeatable) runs one given set. ``--record`` writes ``{"lab", "sets": [{"faults": [records],
"results": [rows], "root_causes", "settle_s", "violations"}]}`` (``tests/data/checks/
stacked_mini.json`` holds such sets). Exit 1 when a set breaks a rule.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import time

from railab.checks.rootaudit import audit, catalog, compact_rows
from railab.testbed.labref import resolve


def _railab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["railab", *args], capture_output=True, text=True, timeout=timeout)


def _failed(doc: dict) -> set[tuple[str, str]]:
    return {(r["check"], r["name"]) for r in doc["results"] if r["status"] == "fail" and r["check"] != "hops"}


def settled_check(lab: str, limit: float = 40.0) -> tuple[dict, float]:
    """``railab check --json`` once two runs 1 s apart fail the same non-hops rows (or at the
    limit): (document, seconds waited)."""
    t0 = time.monotonic()
    prev = None
    while True:
        doc = json.loads(_railab("check", lab, "--json").stdout)
        if prev is not None and _failed(doc) == _failed(prev) or time.monotonic() - t0 > limit:
            return doc, round(time.monotonic() - t0, 1)
        prev = doc
        time.sleep(1.0)


def run_set(lab: str, spec, faults: list[list[str]], spare: list[list[str]] | None = None) -> dict:
    """Inject ``faults``, audit the settled check, heal, wait green; the record of the set. A
    fault refused (exit 2: another fault holds its element) is replaced by the next of
    ``spare`` (at most 10 tries), so a set keeps its size."""
    spare = list(spare or [])
    try:
        todo = list(faults)
        tries = 0
        while todo:
            f = todo.pop(0)
            r = _railab("fault", lab, *f)
            if r.returncode == 2 and spare and tries < 10:
                tries += 1
                todo.append(spare.pop(0))
            elif r.returncode not in (0, 2):
                raise RuntimeError(f"railab fault {' '.join(f)}: {r.stdout}{r.stderr}")
        recs = json.loads(_railab("fault", lab, "list", "--json").stdout)
        time.sleep(2.0)
        doc, waited = settled_check(lab)
        return {"faults": recs, "results": doc["results"], "root_causes": doc["root_causes"],
                "settle_s": waited, "violations": audit(doc, recs, spec)}
    finally:
        _railab("fault", lab, "heal", "--all")
        r = _railab("check", lab, "--wait", "60")
        if r.returncode != 0:
            print(f"warning: {lab} not green 60 s after the heal", file=sys.stderr)


def add_to(path: str, section: str, sets: list[dict], lab: str) -> None:
    """Add recorded ``sets`` to the test data file ``path`` (gzip JSON ``{"order", "singles",
    "sets", "five"}``): per set its fault records and failed rows (:func:`compact_rows`);
    ``order`` (every row name of a healthy check, in run order) is read from ``lab`` when the
    file has none. ``five`` is one set, replaced."""
    try:
        with gzip.open(path, "rt") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        data = {"order": [], "singles": [], "sets": [], "five": None}
    if not data["order"]:
        doc = json.loads(_railab("check", lab, "--json").stdout)
        data["order"] = [[r["check"], r["name"]] for r in doc["results"]]
    recs = [{"faults": x["faults"], "rows": compact_rows(x["results"]), "settle_s": x["settle_s"]}
            for x in sets]
    if section == "five":
        data["five"] = recs[0]
    else:
        data[section] += recs
    with gzip.open(path, "wt") as fh:
        json.dump(data, fh, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    """Run the sets, print one line each, write ``--record``; exit 1 on a rule broken."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lab")
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min", type=int, default=2)
    ap.add_argument("--max", type=int, default=6)
    ap.add_argument("--singles", type=int, default=0, metavar="N",
                    help="N catalog faults drawn at random, each alone (-1: all of them)")
    ap.add_argument("--fault", action="append", default=[], help="one fault of a given set: 'KIND ARGS'")
    ap.add_argument("--record", help="write every set's faults and check rows to this JSON file")
    ap.add_argument("--into", help="add the sets (faults, failed rows) to this .json.gz test data file")
    ap.add_argument("--as", dest="section", default="sets", choices=("sets", "singles", "five"),
                    help="--into's section (five: the issue's five-fault set, replaced)")
    a = ap.parse_args(argv)
    ref = resolve(a.lab)
    spec = ref.spec()
    rng = random.Random(a.seed)
    cat = catalog(spec)
    if a.fault:
        plans = [[f.split() for f in a.fault]]
    elif a.singles:
        plans = [[f] for f in (cat if a.singles < 0 else rng.sample(cat, a.singles))]
    else:
        plans = [rng.sample(cat, rng.randint(a.min, a.max)) for _ in range(a.sets)]
    sets = []
    bad = 0
    for k, plan in enumerate(plans):
        rec = run_set(ref.name, spec, plan, rng.sample(cat, 10) if len(plan) > 1 else None)
        sets.append(rec)
        bad += bool(rec["violations"])
        print(f"set {k + 1}/{len(plans)}: {len(rec['faults'])} faults, {len(rec['root_causes'])} roots, "
              f"settled {rec['settle_s']} s, {len(rec['violations'])} violations", flush=True)
        for v in rec["violations"]:
            print(f"  {v}", flush=True)
        if a.record:
            with open(a.record, "w") as fh:
                json.dump({"lab": ref.name, "sets": sets}, fh, indent=1)
    if a.into:
        add_to(a.into, a.section, sets, ref.name)
    print(f"{len(plans) - bad} of {len(plans)} sets keep every rule")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
