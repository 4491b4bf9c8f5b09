#!/usr/bin/env python3
"""One plot per stored ns-3 incast: ns-3, railab's fluid model, its per-packet reference and the
emulation over time (issue 44 item 3).

For each scenario stored in ``tests/data/ns3/*.json.gz`` (``railab.traffic.ns3ref.stored``;
written by ``scripts/ns3_reference.py``) this writes ``<out>/<scenario>.png`` with two panels on
one time axis (fabric us, 0-15 ms):

1. each sender's rate over time (Gb/s, frames leaving the switch's egress queue per 50 us bin,
   headers included), the fair share dashed;
2. the switch queue depth (MB = 10^6 bytes; the largest in each 50 us bin), with ECN's Kmin and
   Kmax, the PFC pause depth and, PFC off, the tail-drop depth drawn as lines.

The series, all in fabric units:

* **ns-3** (computed by ns-3: HPCC's RDMA model, the commit stored in the record; its one run),
  the record's ``series`` (``rate_gbps``, ``queue_bytes_max`` every 50 us);
* **fluid model** (computed, ``railab.traffic.fluid.simulate`` with
  ``FluidParams.from_qos`` of the lab ``mini-lossless``'s QoS and the record's DCQCN profile,
  as ``tests/test_ns3_reference.py`` builds them; variant ``aligned``: R_HAI = R_AI). Its
  senders are one mean (one line). Not drawn for the ``windowed`` variant: the fluid model has
  no in-flight window;
* **per-packet reference** (computed, ``railab.traffic.packetsim.simulate(...,
  series_bin_us=50)``, seed 1: one run, as ns-3's) with railab's DCQCN (``rp="railab"``, the
  paper's) and with ns-3's rules (``rp="ns3"``); ``windowed``: with ``window_bytes =
  bdp_bytes(params)``;
* **emulation** (measured, only with ``--emulation DIR``): the saved ``railab traffic
  --pattern incast --json`` outputs in DIR (``scripts/bench_fidelity.py --save DIR`` names them
  ``<lab>-<N>-<on|off>-<run>[-dcqcn-ns3].json``) whose senders, PFC and DCQCN profile are the
  scenario's (plain scenarios only: the lab runs neither ``aligned`` nor a window): each
  sender's ``congestion.flows[].series`` ``rx_mbps`` (lab Mb/s x ``time_scale`` / 1000 = fabric
  Gb/s) at ``t`` (lab s / ``time_scale`` = fabric s), and the receiver port's
  ``congestion.ports[receiver_port].backlog_bytes`` where the run sampled it.

Each legend entry carries the figure railab's tables read, the port used over the last half
(7.5-15 ms, shaded). Usage::

    python scripts/ns3_plots.py                              # all 28 -> docs/img/ns3/
    python scripts/ns3_plots.py --only 8-on-400g,incast-2-pfc-off-400g --out /tmp/plots
    python scripts/ns3_plots.py --only 2-on-400g --emulation runs/   # with bench_fidelity --save
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from railab.topologies.intent import load_intent  # noqa: E402
from railab.topologies.qos import DCQCN_PROFILES  # noqa: E402
from railab.traffic import ns3ref  # noqa: E402
from railab.traffic.fluid import FluidParams  # noqa: E402
from railab.traffic.fluid import simulate as fluid_simulate  # noqa: E402
from railab.traffic.packetsim import bdp_bytes  # noqa: E402
from railab.traffic.packetsim import simulate as packet_simulate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "img" / "ns3"
#: The lab whose QoS the stored runs map (each record's ``lab_qos``).
LAB = "mini-lossless"
BIN_US = 50.0
SEED = 1
DPI = 90
MB = 1e6
COLORS = {"ns3": "black", "fluid": "tab:blue", "railab": "tab:orange", "rp_ns3": "tab:green",
          "emu": "tab:red", "emu_ns3": "tab:purple"}
#: bench_fidelity.py --save's file names: <lab>-<N>-<on|off>-<run>[-<k>][-<profile>][-<cc>].json
EMU_NAME = re.compile(r"^(?P<lab>.+)-(?P<n>\d+)-(?P<pfc>on|off)-(?P<run>\d+)(?P<rest>-.+)?\.json$")


def scenario_key(name: str) -> str:
    """``2-on-400g`` (as ``scripts/ns3_reference.py --only``) or the full stem -> the stem."""
    if name.startswith("incast-"):
        return name
    m = re.fullmatch(r"(\d+)-(on|off)-(.+)", name)
    return f"incast-{m[1]}-pfc-{m[2]}-{m[3]}" if m else name


def params_of(rec: dict) -> FluidParams:
    """The railab side's parameters of a stored scenario, as tests/test_ns3_reference.py builds
    them: the record's lab QoS at 400 Gb/s, its senders, PFC and DCQCN profile; ``aligned``
    sets R_HAI to R_AI (what the record gave ns-3)."""
    qos = load_intent(rec.get("lab_qos") or LAB).lab.capacity.qos(400)
    p = FluidParams.from_qos(qos, rec["senders"], pfc=rec["pfc"], dcqcn=DCQCN_PROFILES[rec["dcqcn"]])
    if rec.get("variant") == "aligned":
        p = replace(p, hai_rate_mbps=p.ai_rate_mbps)
    return p


def railab_series(rec: dict, seed: int = SEED) -> dict:
    """The computed series of railab's models for one record: ``fluid`` (None for ``windowed``)
    and the per-packet runs ``railab`` and ``rp_ns3``, each {"t_us", "rates" (per sender, Gb/s),
    "queue" (bytes), "utilization"}."""
    p = params_of(rec)
    fabric_us = float(rec["fabric_us"])
    out: dict = {"fluid": None}
    window = bdp_bytes(p) if rec.get("variant") == "windowed" else None
    if window is None:
        f = fluid_simulate(p, fabric_us, sample_us=10.0)
        out["fluid"] = {"t_us": f.t_us.tolist(), "rates": [f.delivered_gbps[0].tolist()],
                        "queue": f.q_bytes.tolist(), "utilization": f.summary()["utilization"]}
    for key, rp in (("railab", "railab"), ("rp_ns3", "ns3")):
        r = packet_simulate(p, fabric_us, seed=seed, rp=rp, window_bytes=window,
                            series_bin_us=BIN_US)
        s = r.series
        scale = 8 / (BIN_US * 1e-6) / 1e9
        out[key] = {"t_us": s["t_us"], "rates": [[b * scale for b in row]
                                                 for row in s["delivered_bytes"]],
                    "queue": s["queue_bytes_max"], "utilization": r.utilization}
    return out


def emulation_runs(folder: Path, rec: dict) -> list[dict]:
    """The saved emulation runs in ``folder`` of the record's scenario (measured): each
    {"name", "cc", "t_us", "rates" (fabric Gb/s per sender), "queue" (bytes or None),
    "queue_t_us", "utilization"}; ``.json`` or gzipped ``.json.gz``. Only plain scenarios (the
    lab runs no ns-3 variant)."""
    if rec.get("variant"):
        return []
    runs = []
    for path in sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")]):
        m = EMU_NAME.match(path.name.removesuffix(".gz"))
        if not m or int(m["n"]) != rec["senders"] or (m["pfc"] == "on") != rec["pfc"]:
            continue
        try:
            d = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz"
                           else path.read_text())
        except (OSError, ValueError):
            continue
        c = d.get("congestion") or {}
        if (d.get("pattern") != "incast" or d.get("senders") != rec["senders"]
                or d.get("pfc") != ("on" if rec["pfc"] else "off")
                or d.get("dcqcn") != rec["dcqcn"] or not c.get("flows")):
            continue
        scale = float(d.get("time_scale") or c.get("time_scale"))
        to_us = 1e6 / scale
        rates, t_us = [], None
        for f in c["flows"]:
            s = f["series"]
            t_us = [t * to_us for t in s["t"]]
            rates.append([x * scale / 1000 for x in s["rx_mbps"]])
        port = (c.get("ports") or {}).get(d.get("receiver_port") or "") or {}
        backlog = port.get("backlog_bytes")
        runs.append({"name": path.stem, "cc": d.get("cc", "dcqcn"), "t_us": t_us, "rates": rates,
                     "queue": backlog if backlog else None,
                     "queue_t_us": [t * to_us for t in port.get("t", [])] if backlog else None,
                     "utilization": c.get("utilization")})
    return runs


def _title(rec: dict) -> str:
    v = rec.get("variant")
    what = {"aligned": ", variant aligned (ns-3's R_HAI = R_AI)",
            "windowed": ", variant windowed (HAS_WIN 1: a window of one BDP per QP)"}.get(v, "")
    return (f"{rec['scenario']}: {rec['senders']}:1 incast, PFC {'on' if rec['pfc'] else 'off'}, "
            f"DCQCN {rec['dcqcn']}{what}")


def plot(rec: dict, models: dict, emu: list[dict], path: Path) -> Path:
    """Draw one scenario into ``path`` (PNG)."""
    s = rec["series"]
    commit = rec["ns3"]["commit"]
    summ = rec["summary"]
    n = rec["senders"]
    ecn = rec["params"]["railab"]["qos"]["ecn"]
    cap = rec["params"]["railab"]["qos"]["capacity"]
    qos = load_intent(rec.get("lab_qos") or LAB).lab.capacity.qos(400)
    pause = qos.pfc_pause_bytes
    drop = qos.capacity.drop_limit_bytes
    end_us = float(rec["fabric_us"])
    fig = Figure(figsize=(10.0, 7.4), layout="constrained")
    ax_r, ax_q = fig.subplots(2, 1, sharex=True, height_ratios=[1.25, 1])
    handles: list[Line2D] = []

    def series(key: str, t: list, rates: list, queue: list | None, label: str, *, lw=0.7,
               alpha=0.55, ls="-", qt: list | None = None) -> None:
        col = COLORS[key]
        for row in rates:
            ax_r.plot(t, row, color=col, lw=lw, alpha=alpha, ls=ls)
        if queue is not None:
            ax_q.plot(qt or t, [q / MB for q in queue], color=col, lw=lw + 0.3, alpha=0.8, ls=ls)
        handles.append(Line2D([], [], color=col, lw=1.6, ls=ls, label=label))

    series("ns3", s["t_us"], s["rate_gbps"], s["queue_bytes_max"],
           f"ns-3 (HPCC's RDMA model, commit {commit[:7]}; computed, 1 run): port "
           f"{summ['utilization']:.1%}, queue peak {summ['queue_peak_bytes'] / MB:.2f} MB", lw=0.9,
           alpha=0.7)
    f = models.get("fluid")
    if f is not None:
        series("fluid", f["t_us"], f["rates"], f["queue"],
               f"railab fluid model (computed; every sender the same): port {f['utilization']:.1%}, "
               f"queue peak {max(f['queue']) / MB:.2f} MB", lw=1.6, alpha=0.9, ls="--")
    else:
        handles.append(Line2D([], [], color="none", label="railab fluid model: not drawn (it has "
                              "no in-flight window)"))
    win = " with the BDP window" if rec.get("variant") == "windowed" else ""
    for key, who in (("railab", "railab's DCQCN"), ("rp_ns3", "ns-3's DCQCN rules")):
        m = models[key]
        series(key, m["t_us"], m["rates"], m["queue"],
               f"railab per-packet reference, {who}{win} (computed, seed {SEED}): port "
               f"{m['utilization']:.1%}, queue peak {max(m['queue']) / MB:.2f} MB")
    for cc, key in (("dcqcn", "emu"), ("dcqcn-ns3", "emu_ns3")):
        mine = [r for r in emu if r["cc"] == cc]
        if not mine:
            continue
        for r in mine:
            series(key, r["t_us"], r["rates"], r["queue"], "", qt=r["queue_t_us"], alpha=0.6)
            handles.pop()
        ports = ", ".join(f"{r['utilization']:.1%}" for r in mine if r["utilization"] is not None)
        noq = "" if any(r["queue"] for r in mine) else "; no port backlog series"
        handles.append(Line2D([], [], color=COLORS[key], lw=1.6, label=(
            f"emulation, --cc {cc} ({len(mine)} run{'s' if len(mine) > 1 else ''}; measured): "
            f"port {ports}{noq}")))

    share = summ.get("port_service_gbps", cap["fabric_rate_gbps"]) / n
    ax_r.axhline(share, color="grey", lw=0.8, ls=":")
    ax_r.text(end_us * 0.005, share, f"fair share {share:.0f} Gb/s", ha="left", va="bottom",
              fontsize=7, color="0.3", bbox={"fc": "white", "ec": "none", "pad": 0.5, "alpha": 0.8})
    for ax in (ax_r, ax_q):
        ax.axvspan(end_us / 2, end_us, color="0.93", zorder=0, lw=0)
        ax.grid(alpha=0.3, lw=0.5)
        ax.tick_params(labelsize=8)
    rmax = max([max(row) for row in s["rate_gbps"]]
               + [max(row) for k in ("railab", "rp_ns3") for row in models[k]["rates"]]
               + [max(row) for m in [models.get("fluid")] if m for row in m["rates"]]
               + [max(row) for r in emu for row in r["rates"] if row])
    rtop = min(max(rmax, share) * 1.15, cap["fabric_rate_gbps"] * 1.1)
    ax_r.set_ylim(0, rtop)
    ax_r.set_ylabel("each sender's delivered rate\n(Gb/s, per 50 us)", fontsize=9)
    ax_r.text(end_us * 0.75, rtop * 0.96, "last half: the tables' window", ha="center",
              va="top", fontsize=7, color="0.4")

    peaks = [summ["queue_peak_bytes"], *(max(m["queue"]) for m in
                                         (models.get("fluid"), models["railab"], models["rp_ns3"])
                                         if m is not None)]
    peaks += [max(r["queue"]) for r in emu if r["queue"]]
    top = max(*peaks, pause, ecn["kmax_bytes"]) * 1.12
    lines = [(ecn["kmin_bytes"], f"Kmin {ecn['kmin_bytes'] / MB:.2f} MB", "tab:olive", "--"),
             (ecn["kmax_bytes"], f"Kmax {ecn['kmax_bytes'] / MB:.2f} MB", "tab:olive", "-."),
             (pause, f"PFC pause depth {pause / MB:.2f} MB" + ("" if rec["pfc"] else
                                                                " (PFC off in this run)"),
              "tab:red" if rec["pfc"] else "0.6", ":")]
    if not rec["pfc"] and drop <= top:
        lines.append((drop, f"tail-drop depth {drop / MB:.1f} MB (PFC off)", "tab:red", ":"))
    for k, (y, text, col, ls) in enumerate(lines):  # ECN's labels left, PFC's and drops' right
        ax_q.axhline(y / MB, color=col, lw=0.9, ls=ls)
        ax_q.text(end_us * (0.3 + 0.12 * k if k < 2 else 0.995), y / MB, text,
                  ha="left" if k < 2 else "right", va="bottom", fontsize=7, color=col,
                  bbox={"fc": "white", "ec": "none", "pad": 0.5, "alpha": 0.8})
    ax_q.set_ylim(0, top / MB)
    ax_q.set_ylabel("switch queue depth (MB, max per 50 us)", fontsize=9)
    ax_q.set_xlim(0, end_us)
    ax_q.set_xlabel("fabric time (us) from the flows' start", fontsize=9)
    fig.suptitle(_title(rec) + "\nns-3: computed by ns-3; fluid and per-packet: computed by "
                 "railab's models" + ("; emulation: measured on the lab" if emu else ""),
                 fontsize=10)
    leg = fig.legend(handles=handles, loc="outside lower center", ncol=1, fontsize=7,
                     frameon=False, title_fontsize=6.5, alignment="left",
                     title=f"ns-3: {rec['ns3']['repository']} {commit}, {rec['ns3']['version']}, "
                     f"run {rec['date'][:10]};\nstored in tests/data/ns3/{rec['scenario']}.json.gz, "
                     "drawn by scripts/ns3_plots.py")
    leg.get_title().set_color("0.4")
    path.parent.mkdir(parents=True, exist_ok=True)
    _save_png(fig, path)
    return path


def _save_png(fig: Figure, path: Path) -> None:
    """``fig`` as a small PNG: rendered at :data:`DPI`, reduced to a 256-colour palette
    (Pillow, matplotlib's own dependency), no metadata that changes from run to run."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(
            path, format="PNG", optimize=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="scenarios, comma-separated (incast-2-pfc-on-400g "
                    "or 2-on-400g); default: every stored one")
    ap.add_argument("--out", default=str(OUT), help=f"where the PNGs go (default {OUT})")
    ap.add_argument("--emulation", default=None, metavar="DIR",
                    help="saved `railab traffic --pattern incast --json` outputs "
                    "(bench_fidelity.py --save DIR) to draw as measured")
    ap.add_argument("--data", default=None, help="the stored ns-3 records (default: ns3ref's)")
    a = ap.parse_args(argv)
    recs = ns3ref.stored(Path(a.data) if a.data else None)
    if not recs:
        print("no stored ns-3 records", file=sys.stderr)
        return 2
    if a.only:
        want = [scenario_key(x.strip()) for x in a.only.split(",") if x.strip()]
        names = {r["scenario"] for r in recs}
        missing = [w for w in want if w not in names]
        if missing:
            print(f"not stored: {', '.join(missing)}", file=sys.stderr)
            return 2
        recs = [r for r in recs if r["scenario"] in want]
    emu_dir = Path(a.emulation) if a.emulation else None
    if emu_dir is not None and not emu_dir.is_dir():
        print(f"--emulation: {emu_dir} is not a directory", file=sys.stderr)
        return 2
    out = Path(a.out)
    for rec in recs:
        t0 = time.monotonic()
        emu = emulation_runs(emu_dir, rec) if emu_dir else []
        path = plot(rec, railab_series(rec), emu, out / f"{rec['scenario']}.png")
        print(f"{path} ({path.stat().st_size / 1024:.0f} KB, {len(emu)} emulation runs, "
              f"{time.monotonic() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
