"""``railab model incast``: the DCQCN fluid model's prediction for an N:1 incast (computed, not
measured), in fabric units, with the lab's (or railab's default) ECN, PFC and DCQCN numbers, and
the per-packet reference's spread of the senders around their share
(:mod:`railab.traffic.packetsim`, ``--packet-runs``).

The model is :mod:`railab.traffic.fluid` (Zhu et al., CoNEXT 2016, Fig. 2); ``railab traffic
--pattern incast`` puts the same prediction beside every emulated incast (``congestion.reference``).
"""

from __future__ import annotations

import json

import typer

from railab.errors import EXIT_USAGE


def _usage(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(EXIT_USAGE)


def model_record(qos, senders: int, *, pfc: bool, dcqcn=None, fabric_ms: float = 15.0,
                 points: int = 16, mark_at_enqueue: bool = False) -> dict:
    """The JSON of ``railab model incast``: ``params`` (the model's inputs, fabric units),
    ``summary`` (last half: ``utilization``, ``per_flow_gbps``, ``rc_gbps``, ``queue_bytes``,
    ``dropped_bytes``, ``time_to_fair_us``; ``dropped_pct`` is the whole run's),
    ``fixed_point`` (the paper's equation 9: ``p``, ``q_bytes``, ``rate_gbps``), ``series``
    (``points`` samples: ``t_us``, ``rate_gbps`` per flow (what each flow delivers through the
    port), ``rc_gbps`` per flow (its DCQCN sending rate RC), ``queue_bytes``, ``utilization``),
    ``queue_peak_bytes`` (the whole run's, onset included) and ``lab`` (the same run in lab
    units at the lab's time scale: ``seconds``, ``per_flow_mbps``)."""
    from dataclasses import asdict

    import numpy as np

    from railab.traffic.fluid import FluidParams, fixed_point, simulate

    p = FluidParams.from_qos(qos, senders, dcqcn=dcqcn, pfc=pfc, mark_at_enqueue=mark_at_enqueue)
    run = simulate(p, fabric_ms * 1000)
    s = run.summary()
    idx = np.linspace(0, len(run.t_us) - 1, min(points, len(run.t_us))).astype(int)
    scale = qos.capacity.time_scale
    fp = fixed_point(p)
    return {"model": "DCQCN fluid model (Zhu et al., CoNEXT 2016, Fig. 2, equations 1-5)",
            "source": "computed", "units": "fabric: us, Gb/s, bytes", "params": asdict(p),
            "summary": s, "queue_peak_bytes": int(run.q_bytes.max()),
            "fixed_point": {"p": fp["p"], "q_bytes": round(fp["q_bytes"]),
                            "rate_gbps": fp["rate_gbps"]},
            "series": {"t_us": [round(float(t), 1) for t in run.t_us[idx]],
                       "rate_gbps": [[round(float(x), 2) for x in row[idx]] for row in run.delivered_gbps],
                       "rc_gbps": [[round(float(x), 2) for x in row[idx]] for row in run.rc_gbps],
                       "queue_bytes": [int(x) for x in run.q_bytes[idx]],
                       "utilization": [round(float(x), 3) for x in run.util[idx]]},
            "lab": {"time_scale": scale, "seconds": round(fabric_ms / 1000 * scale, 3),
                    "port_rate_mbps": qos.capacity.port_rate_mbps,
                    "per_flow_mbps": [round(g * 1000 / scale, 3) for g in s["per_flow_gbps"]]}}


def ns3_reference(qos, senders: int, pfc: bool, profile: str, rec: dict) -> dict | None:
    """The ``reference.ns3`` object: ns-3's stored figures for the same N, PFC setting and
    DCQCN profile (:mod:`railab.traffic.ns3ref`, HPCC's RDMA model, computed by ns-3), whether
    ns-3 ran with the same ECN thresholds, PFC pause depth and drop depth as ``qos``
    (``same_qos``; the stored runs use ``mini-lossless``'s) and the fluid model's figures of
    ``rec`` against ns-3's in issue 44's bands (``fluid_vs_ns3``; ``same_fabric_time``: the
    stored run is as long as ``rec``'s). None when nothing is stored."""
    from railab.traffic import ns3ref

    stored = ns3ref.load(senders, pfc, profile)
    if stored is None:
        return None
    s, share = rec["summary"], qos.capacity.fabric_rate_gbps / senders
    out = ns3ref.beside(stored, qos, pfc, s["fabric_us"], utilization=s["utilization"],
                        ratios=[g / share for g in s["per_flow_gbps"]],
                        queue_peak_bytes=rec["queue_peak_bytes"])
    out["fluid_vs_ns3"] = out.pop("vs")
    return out


def ns3_head(ns3: dict, what: str) -> str:
    """The start of a line that sets ns-3's stored run (``reference.ns3``) beside railab's
    figures: its provenance, ``what`` (e.g. the scenario), whether it ran this QoS and fabric
    time, and its port use, shares and queue peak (computed by ns-3)."""
    return (f"ns-3 (HPCC's RDMA model, {ns3['repository']}@{(ns3['commit'] or '?')[:10]}, {what}"
            + ("" if ns3["same_qos"] else ", [yellow]not this run's ECN/PFC/buffer[/yellow]")
            + ("" if ns3["same_fabric_time"] else
               f", [yellow]{ns3['fabric_us'] / 1000:g} ms of fabric time[/yellow]")
            + f"): port used {ns3['utilization']:.1%}, senders at {min(ns3['ratios']):.2f}-"
            f"{max(ns3['ratios']):.2f} of their share, queue peak {ns3['queue_peak_bytes']:,} B")


def ns3_text(ns3: dict) -> str:
    """One line for ``reference.ns3`` in the text output."""
    c = ns3["fluid_vs_ns3"]
    ttf = ns3["time_to_fair_us"]
    return (ns3_head(ns3, f"computed by ns-3, {ns3['lab_qos']}'s QoS")
            + f" (mean {ns3['queue_bytes']['mean']:,} B over the last half), PAUSEs "
            f"{ns3['pauses_received']}, drops {ns3['dropped_pct']:.2f} %, within 10 % of the "
            "share after " + (f"{ttf:g} us" if ttf is not None else "- (not by the end)")
            + "; the fluid model " + ("is not judged against it" if c["agrees"] is None else
                                      "[green]agrees[/green]" if c["agrees"] else
                                      "[red]differs[/red]")
            + f" (port {c['utilization_points']:g} points, shares {c['share_max_diff']:.2f}, "
            f"queue peak {c['queue_peak_rel']:.0%}; bands 3 points, 0.15, 30 %; ns-3's DCQCN "
            "is not the paper's: docs/congestion.md \"ns-3 (HPCC) side by side\")")


def register(app: typer.Typer) -> None:
    """Attach ``model incast`` to ``app``."""
    model = typer.Typer(help="Reference models (computed, not measured): the DCQCN fluid model.",
                        no_args_is_help=True)
    app.add_typer(model, name="model")

    @model.command("incast")
    def incast(
        senders: int = typer.Option(8, "--senders", help="N of the N:1 incast (1-256)"),
        dcqcn: str | None = typer.Option(None, "--dcqcn", help="DCQCN profile (default: the "
                                         "lab's qos.dcqcn, else railab's default)"),
        pfc: str | None = typer.Option(None, "--pfc", help="on | off (default: the lab's "
                                       "lab.capacity.pfc, else on)"),
        lab: str | None = typer.Option(None, "--lab", help="take the QoS numbers (ECN, PFC, "
                                       "DCQCN, time scale) from this lab (running lab name or "
                                       "lab directory)"),
        fabric_ms: float = typer.Option(15.0, "--fabric-ms", help="fabric time to model, ms "
                                        "(0.1-200)"),
        enqueue: bool = typer.Option(False, "--enqueue-marking", help="mark as a packet enters "
                                     "the queue (the queueing delay joins the control loop) "
                                     "instead of as it leaves it (ASICs and the lab: on dequeue)"),
        packet_runs: int = typer.Option(5, "--packet-runs", help="also run the per-packet "
                                        "reference (random marks) this many times and report "
                                        "the senders' spread; 0: the fluid model only (0-50)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """The DCQCN fluid model of an N:1 incast onto one port: per-flow rates, port
        utilization, queue depth over time and the time to within 10 % of the fair share,
        in fabric units (computed, Zhu et al. CoNEXT 2016)."""
        from railab.topologies.qos import DCQCN_PROFILES, DEFAULT_QOS, CapacityProfile

        if not 1 <= senders <= 256:
            _usage(f"--senders must be 1-256 (got {senders})")
        if not 0.1 <= fabric_ms <= 200:
            _usage(f"--fabric-ms must be 0.1-200 (got {fabric_ms:g})")
        if dcqcn is not None and dcqcn not in DCQCN_PROFILES:
            _usage(f"--dcqcn must be one of {', '.join(DCQCN_PROFILES)} (got {dcqcn!r})")
        if pfc is not None and pfc not in ("on", "off"):
            _usage(f"--pfc must be on or off (got {pfc!r})")
        if not 0 <= packet_runs <= 50:
            _usage(f"--packet-runs must be 0-50 (got {packet_runs})")
        if lab is not None:
            from railab.testbed.labref import resolve

            qos = resolve(lab).spec().qos  # RailabError (exit 1, as for any command) names it
        else:
            qos = DEFAULT_QOS.model_copy(update={"capacity": CapacityProfile(enabled=True)})
        pfc_on = qos.capacity.pfc if pfc is None else pfc == "on"
        rec = model_record(qos, senders, pfc=pfc_on,
                           dcqcn=DCQCN_PROFILES[dcqcn] if dcqcn else None, fabric_ms=fabric_ms,
                           mark_at_enqueue=enqueue)
        if packet_runs:
            from railab.traffic.fluid import FluidParams
            from railab.traffic.packetsim import spread

            rec["packet"] = spread(
                FluidParams.from_qos(qos, senders, pfc=pfc_on, mark_at_enqueue=enqueue,
                                     dcqcn=DCQCN_PROFILES[dcqcn] if dcqcn else None),
                fabric_ms * 1000, seeds=tuple(range(1, packet_runs + 1)))
        ns3 = ns3_reference(qos, senders, pfc_on, dcqcn or qos.dcqcn.name, rec)
        ns3_note = None  # why ns-3 has nothing beside this scenario
        if ns3 is not None:
            rec["reference"] = {"ns3": ns3}
        else:
            from railab.traffic import ns3ref

            ns3_note = ns3ref.missing_note(senders, pfc_on, dcqcn or qos.dcqcn.name)
            rec["reference"] = {"ns3": None, "ns3_note": ns3_note}
        if as_json:
            typer.echo(json.dumps(rec, indent=2, sort_keys=True))
            return
        from rich.console import Console
        from rich.table import Table

        s, p = rec["summary"], rec["params"]
        con = Console()
        con.print(f"[bold]{rec['model']}[/bold] (computed): {senders}:1 incast onto one "
                  f"{p['line_gbps']:g} Gb/s port, DCQCN {p['dcqcn_name']}, PFC "
                  f"{'on' if p['pfc'] else 'off'}, ECN {p['kmin_bytes']:,}-{p['kmax_bytes']:,} B "
                  f"at {p['pmax']:.0%}, marking on {'enqueue' if p['mark_at_enqueue'] else 'dequeue'}, "
                  + (f"PFC pauses at {p['pause_bytes']:,} B, " if p['pfc'] else
                     f"tail drop beyond {p['buffer_bytes']:,} B, ")
                  + f"{fabric_ms:g} ms of fabric time; "
                  + (f"lab {lab}'s QoS" if lab is not None else
                     "railab's generic QoS profile (--lab LAB for a lab's buffer and thresholds)"),
                  highlight=False, soft_wrap=True)
        t = Table(title="over time (fabric)")
        for col in ("t (us)", "port used", "queue (B)", "delivered per sender (Gb/s)",
                    "sending, RC (Gb/s)"):
            t.add_column(col, justify="right")
        se = rec["series"]

        def flows(rows: list, i: int) -> str:
            return ", ".join(f"{r[i]:.1f}" for r in rows[:4]) + (" ..." if len(rows) > 4 else "")

        for i, tu in enumerate(se["t_us"]):
            t.add_row(f"{tu:g}", f"{se['utilization'][i]:.0%}", f"{se['queue_bytes'][i]:,}",
                      flows(se["rate_gbps"], i), flows(se["rc_gbps"], i))
        con.print(t)
        ttf = s["time_to_fair_us"]
        con.print(f"last half ({s['window_us'][0]:g}-{s['window_us'][1]:g} us): port used "
                  f"{s['utilization']:.1%}, each sender delivers {s['per_flow_gbps'][0]:.1f} Gb/s "
                  f"(fair share {p['line_gbps'] / senders:.1f}; sending at RC "
                  f"{s['rc_gbps'][0]:.1f}), queue mean {s['queue_bytes']['mean']:,} B, max "
                  f"{s['queue_bytes']['max']:,} B over the last half (the whole run's peak "
                  f"{rec['queue_peak_bytes']:,} B); tail drops {s['dropped_pct']:.2f} % of what "
                  "was sent over the whole run; within 10 % of the fair share after "
                  + (f"{ttf:g} us" if ttf is not None else "- (not by the end)"), highlight=False)
        fp = rec["fixed_point"]
        con.print(f"fixed point (paper eq. 9): p* {fp['p']:.2e}, q* {fp['q_bytes']:,} B, "
                  f"{fp['rate_gbps']:.1f} Gb/s per flow", highlight=False)
        pk = rec.get("packet")
        if pk is not None:
            from railab.traffic.packetsim import spread_text

            con.print(f"{spread_text(pk)}; dropped {pk['dropped_pct']['min']:.2f}-"
                      f"{pk['dropped_pct']['max']:.2f} %", highlight=False, soft_wrap=True)
        if ns3 is not None:
            con.print(ns3_text(ns3), highlight=False, soft_wrap=True)
        elif ns3_note:
            con.print(ns3_note, highlight=False, soft_wrap=True)
        lab_rec = rec["lab"]
        con.print(f"in the lab (time scale x{lab_rec['time_scale']:g}): {lab_rec['seconds']:g} lab s, "
                  f"each sender {lab_rec['per_flow_mbps'][0]:.2f} Mb/s of "
                  f"{lab_rec['port_rate_mbps']:g}", highlight=False)
