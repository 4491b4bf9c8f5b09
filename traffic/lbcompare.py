"""``railab lb compare``: one workload run once per load-balancing mode, side by side.

Workload ``elephants`` (issue 30): one long flow per server NIC of one leaf (as many flows as
that leaf has uplinks), each with the fixed UDP source port (``sport_mode="fixed"``) to a
server NIC of the same rail on a leaf of another group; the imbalance is over that leaf's
uplinks. Every mode runs the same flows (same byte counts) on the lab's load engine
(railab.traffic.load, ``cc`` as given); the uplink bytes are the leaf's uplink TX byte counters
(measured, before/after) and the reorder figures the receivers' PSN accounting (measured).
The mode is switched with railab.testbed.lb and put back to ``ecmp`` at the end.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from railab.errors import UsageError
from railab.testbed import lb
from railab.testbed.namespaces import exec_argv
from railab.topologies.labspec import LabSpec
from railab.traffic.load import LoadFlow, run_load
from railab.traffic.patterns import Flow, route

WORKLOADS = ("elephants",)
DEFAULT_MODES = ("ecmp", "spray-rr", "spray-random", "flowlet", "pbr")


def elephants(spec: LabSpec, leaf: str | None = None) -> tuple[str, list[Flow]]:
    """``(leaf, flows)`` of the elephants workload: the first leaf with uplinks (or ``leaf``),
    one flow per server NIC on it, up to its uplink count, each to a NIC of the same rail in
    another group (distinct destinations, round robin). UsageError when the lab has no such
    pair (a single group, or a rail-only lab)."""
    plans = {p.leaf: p for p in lb.plan(spec, "ecmp")}
    if not plans:
        raise UsageError("the elephants workload needs leaf uplinks; this lab has none (rail-only)")
    leaf = leaf or sorted(plans)[0]
    if leaf not in plans:
        raise UsageError(f"{leaf!r} is not a leaf with uplinks: use one of {', '.join(sorted(plans))}")
    srcs = sorted((n for n in spec.nics if n.leaf == leaf), key=lambda n: n.leaf_port)
    srcs = srcs[:len(plans[leaf].uplinks)]
    flows = []
    for i, s in enumerate(srcs):
        dsts = sorted((n for n in spec.nics if n.rail == s.rail and n.group != s.group),
                      key=lambda n: (n.server, n.nic))
        if not dsts:
            raise UsageError(f"no NIC of rail {s.rail} in another group: elephants needs 2 groups")
        d = dsts[i % len(dsts)]
        flows.append(route(spec, Flow((s.server, s.gpu), (d.server, d.gpu))))
    return leaf, flows


def _tx_bytes(ns: str, ports: list[str]) -> dict[str, int]:
    out = subprocess.run(exec_argv(ns, ["ip", "-s", "-j", "link"]), capture_output=True, text=True,
                         check=True).stdout
    return {d["ifname"]: d["stats64"]["tx"]["bytes"] for d in json.loads(out) if d["ifname"] in ports}


@dataclass
class ModeResult:
    """One mode's row: ``uplink_bytes`` port -> bytes (measured); ``uplink_imbalance`` max/mean
    of them; ``reordered_pct`` packets the receivers saw below the highest PSN, % of received;
    ``max_psn_distance`` the largest reorder depth (packets); ``drops`` packets sent and not
    received; ``ce_marks``, ``fct_p50_s``/``fct_p99_s``/``straggler`` (slowest FCT over the
    median) from the load run (lab s)."""

    mode: str
    uplink_bytes: dict[str, int]
    uplink_imbalance: float
    uplink_max_mean: tuple[int, float]
    reordered_pct: float
    max_psn_distance: int
    drops: int
    ce_marks: int
    fct_p50_s: float | None
    fct_p99_s: float | None
    straggler: float | None

    def to_json(self) -> dict:
        return {"mode": self.mode, "uplink_bytes": self.uplink_bytes,
                "uplink_imbalance": self.uplink_imbalance,
                "uplink_max_bytes": self.uplink_max_mean[0],
                "uplink_mean_bytes": self.uplink_max_mean[1],
                "reordered_pct": self.reordered_pct, "max_psn_distance": self.max_psn_distance,
                "drops": self.drops, "ce_marks": self.ce_marks, "fct_p50_s": self.fct_p50_s,
                "fct_p99_s": self.fct_p99_s, "straggler": self.straggler}


def _pct(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    v = sorted(vals)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def compare(spec: LabSpec, netns_of: Callable[[str], str], *, workload: str = "elephants",
            modes: tuple[str, ...] = DEFAULT_MODES, flow_bytes: int = 1 << 20,
            cc: str = "dcqcn") -> dict:
    """Run ``workload`` once per mode (same flows, same bytes) and return
    ``{"workload", "leaf", "flows", "flow_bytes", "modes": [ModeResult.to_json()]}``.
    UsageError for an unknown workload or mode (checked before anything runs). The lab is left
    on ``ecmp``."""
    if workload not in WORKLOADS:
        raise UsageError(f"unknown workload {workload!r}: built so far: {', '.join(WORKLOADS)}")
    for m in modes:
        lb.check_mode(m)
    leaf, flows = elephants(spec)
    ups = lb.plan(spec, "ecmp")
    ports = next(p.uplinks for p in ups if p.leaf == leaf)
    ns = netns_of(leaf)
    rows = []
    try:
        for mode in modes:
            lb.apply(spec, netns_of, mode)
            before = _tx_bytes(ns, ports)
            r = run_load(spec, netns_of, [LoadFlow(f, bytes=flow_bytes) for f in flows], cc=cc,
                         sport_mode="fixed")
            after = _tx_bytes(ns, ports)
            per = {p: after[p] - before[p] for p in ports}
            mx, mean = max(per.values()), sum(per.values()) / len(per)
            rx = sum(f["rx_packets"] for f in r.flows)
            fcts = [f["fct_s"] for f in r.flows if f.get("fct_s") is not None]
            p50 = _pct(fcts, 0.5)
            rows.append(ModeResult(
                mode, per, round(mx / mean, 3) if mean else 0.0, (mx, round(mean, 1)),
                round(100.0 * sum(f["ooo"] for f in r.flows) / rx, 3) if rx else 0.0,
                max((f.get("max_psn_distance", 0) for f in r.flows), default=0),
                sum(f["lost"] for f in r.flows), sum(f["ce_marked"] for f in r.flows),
                p50, _pct(fcts, 0.99),
                round(max(fcts) / p50, 3) if fcts and p50 else None).to_json())
    finally:
        lb.apply(spec, netns_of, "ecmp")
    return {"workload": workload, "leaf": leaf, "flows": len(flows), "flow_bytes": flow_bytes,
            "cc": cc, "modes": rows}
