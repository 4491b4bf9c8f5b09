"""``railab lb LAB MODE``: switch a running lab's leaves to a load-balancing mode
(railab.testbed.lb: ecmp, spray-rr, spray-random, flowlet, pbr), recorded in the lab state and shown by
``status``/``inspect``; ``railab lb LAB`` prints the current mode; ``railab lb compare LAB
--workload elephants [--modes ...] [--json]`` runs one workload once per mode side by side
(railab.traffic.lbcompare). A bad mode, a mode the lab
cannot carry, or a lab that is not up is one ``error:`` line, exit 2, with nothing applied.
"""

from __future__ import annotations

import json

import typer

from railab.errors import RailabError, UsageError


def register(app: typer.Typer) -> None:
    """Attach ``lb`` to ``app``."""

    @app.command(context_settings={"help_option_names": ["-h", "--help"]})
    def lb(
        lab: str = typer.Argument(..., help="running lab name or its lab directory; or the word "
                                  "`compare` followed by the lab"),
        mode: str | None = typer.Argument(
            None, help="ecmp | spray-rr | spray-random | flowlet | pbr | wcmp; omitted: print "
                       "the current mode (after `compare`: the lab)"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        spines: bool = typer.Option(False, "--spines", help="spray modes: the spines spray too, "
                                    "over their parallel links down to each leaf"),
        workload: str | None = typer.Option(None, "--workload", help="compare: elephants | "
                                            "incast | all-to-all | all-reduce (default elephants)"),
        modes: str | None = typer.Option(None, "--modes", help="compare: comma-separated modes "
                                         "(default: every mode the lab can carry)"),
        flow_bytes: str | None = typer.Option(None, "--bytes", help="compare: bytes per "
                                              "elephant/incast flow or per collective rank, e.g. "
                                              "4M (default 4 MiB; incast 1 MiB)"),
        cc: str | None = typer.Option(None, "--cc", help="compare, load-engine workloads: "
                                      "congestion control, dcqcn (default) or none"),
        nic: str | None = typer.Option(None, "--nic", help="compare: the NICs' RC transport, "
                                       "none (default) | gbn (go-back-N) | ooo (out-of-order "
                                       "placement, selective repeat)"),
        port_rate: str | None = typer.Option(
            None, "--port-rate", help="compare, collective workloads on a lab with port "
            "capacity: the lab port rate of the runs, auto (default: the fastest at which this "
            "host keeps every NIC at line rate; time dilation) | lab | Mb/s"),
    ) -> None:
        """Set the switches' load-balancing mode, or compare the modes on one workload.

        railab lb LAB spray-rr [--spines]: apply a mode (railab lb LAB ecmp restores the hash).

        railab lb LAB: print the mode.

        railab lb compare LAB --workload W [--modes a,b] [--bytes 4M] [--cc C] [--spines]: the
        workload once per mode; the lab is left on its mode (docs/loadbalancing.md).
        """
        from railab.testbed import lb as LB
        from railab.testbed import state as S
        from railab.testbed.labref import resolve

        if lab == "compare":
            if mode is None:
                raise UsageError("railab lb compare LAB [--workload elephants|incast|all-to-all|"
                                 "all-reduce] [--modes a,b] [--bytes 4M] [--cc dcqcn|none] "
                                 "[--nic none|gbn|ooo] [--port-rate auto|MBPS] [--spines] [--json]")
            _compare(mode, workload or "elephants", modes, flow_bytes, cc or "dcqcn", spines,
                     as_json, nic or "none", port_rate or "auto")
            return
        given = [o for o, v in (("--workload", workload), ("--modes", modes),
                                ("--bytes", flow_bytes), ("--cc", cc), ("--nic", nic),
                                ("--port-rate", port_rate))
                 if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: only with `railab lb compare LAB`")
        if mode is not None:
            LB.check_mode(mode)  # before anything else: a bad name is a usage error
        elif spines:
            raise UsageError("--spines goes with a spray mode: railab lb LAB spray-rr --spines")
        ref = resolve(lab)
        if not ref.running:
            raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
        rec = ref.require_up()
        if mode is None:
            out = {"lab": ref.name, "load_balancing": rec.load_balancing,
                   "spines": rec.load_balancing_spines,
                   "stale": LB.stale(ref.spec(), ref.netns_of, rec.load_balancing,
                                     spines=rec.load_balancing_spines)}
            agent = LB.agent_state(S.lab_dir(ref.name))
            if agent:
                out["agent"] = agent
        else:
            def setmode(m: str, sp: bool) -> None:
                def change(rec) -> None:
                    rec.load_balancing, rec.load_balancing_spines = m, sp
                S.modify(ref.name, change)  # the record as it is now: faults made meanwhile stay

            def record() -> None:
                setmode(mode, spines)
            try:
                plans = LB.apply(ref.spec(), ref.netns_of, mode, S.lab_dir(ref.name),
                                 spines=spines, on_applied=record)
            except RailabError:
                setmode("ecmp", False)  # apply put every switch back on ecmp: say so
                raise
            out = {"lab": ref.name, "load_balancing": mode, "spines": spines,
                   "leaves": {p.leaf: ({"uplinks": p.uplinks, "pbr": p.binding} if mode == "pbr"
                                       else {"uplinks": p.uplinks})
                              for p in plans if not p.spine},
                   "spine_plans": {p.leaf: {"downlinks": p.servers, "ways": p.ways}
                                   for p in plans if p.spine}}
        if as_json:
            typer.echo(json.dumps(out, indent=2, sort_keys=True))
        else:
            leaves, sp = out.get("leaves"), out.get("spine_plans")
            agent = out.get("agent")
            typer.echo(f"lab {ref.name}: load balancing {out['load_balancing']}"
                       + (" (spines too)" if out.get("spines") else "")
                       + (f" on {len(leaves)} leaves" if leaves else "")
                       + (f" and {len(sp)} spines" if sp else "")
                       + ((f" (agent: {agent['cycles']} cycles)" if agent.get("running") else
                           " (its agent is not running: apply the mode again)") if agent else ""))
            for line in out.get("stale") or []:
                typer.echo(f"warning: {line} (routes changed since the mode was applied: "
                           f"railab lb {ref.name} {out['load_balancing']} applies it again)")


def _compare(lab: str, workload: str, modes: str | None, flow_bytes: str | None, cc: str,
             spines: bool, as_json: bool, nic: str = "none", port_rate: str = "auto") -> None:
    """``railab lb compare``: checks first (exit 2, nothing run), then one run per mode."""
    from railab.cli.collective import parse_bytes
    from railab.testbed import state as S
    from railab.testbed.labref import resolve
    from railab.testbed.signals import sigint_event
    from railab.traffic import lbcompare as C

    if workload not in C.WORKLOADS:
        raise UsageError(f"unknown workload {workload!r}: use one of {', '.join(C.WORKLOADS)}")
    if cc not in ("dcqcn", "none"):
        raise UsageError(f"--cc must be dcqcn or none (got {cc!r})"
                         + ("; dcqcn-ns3 (ns-3's DCQCN rules) is for railab traffic's incast, "
                            "beside ns-3's stored runs" if cc == "dcqcn-ns3" else ""))
    if nic not in ("none", "gbn", "ooo"):
        raise UsageError(f"--nic must be none, gbn or ooo (got {nic!r})")
    try:
        size = parse_bytes(flow_bytes) if flow_bytes is not None else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    C.check_bytes(workload, size)
    ms = tuple(m.strip() for m in modes.split(",")) if modes is not None else None
    if ms is not None:
        from railab.testbed import lb as LB

        for m in ms:
            if m:
                LB.check_mode(m)
    ref = resolve(lab)
    if not ref.running:
        raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
    spec = ref.spec()
    ms = C.check_modes(spec, ms)
    rec = ref.require_up()
    import signal

    # Ctrl-C, SIGTERM and SIGHUP only set ``stop``: the running mode ends early, compare puts
    # the lab's own mode back, then exit 130. (Raising from the handler could land in a fork
    # hook of the load engine's child, where Python ignores the exception.)
    with sigint_event() as stop:
        prev = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            res = C.compare(spec, ref.netns_of, workload=workload, modes=ms, flow_bytes=size,
                            cc=cc, stop=stop, spines=spines, nic=nic, port_rate=port_rate,
                            restore=(rec.load_balancing, rec.load_balancing_spines),
                            on_mode=None if as_json else
                            (lambda m: typer.echo(f"  running {m} ...", err=True)))
        finally:
            for s, h in prev.items():
                signal.signal(s, h)
        interrupted = stop.is_set()
    def left_on(rec) -> None:
        rec.load_balancing = res["left_on"]["mode"]
        rec.load_balancing_spines = res["left_on"]["spines"]
    S.modify(ref.name, left_on)  # re-read: a fault injected or healed during the runs stays so
    if interrupted:
        raise KeyboardInterrupt
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    typer.echo(text(res))


def text(res: dict) -> str:
    """The comparison as a table (what ``railab lb compare`` prints)."""
    coll = res["workload"] not in ("elephants", "incast")
    nic = res.get("nic") not in (None, "none")
    head = (f"workload {res['workload']}: {res['flows']} flows x {res['flow_bytes']} B"
            + (f" from {res['leaf']}, cc {res['cc']}" if not coll else " per rank")
            + (f", idle gap {res['gap_s']:g} lab s after each message" if res.get("gap_s") else ""))
    if res.get("time_scale"):
        head += f"; time scale {res['time_scale']:g} (fabric s = lab s / scale)"
    if res.get("port_rate_mbps") and res.get("lab_port_rate_mbps") \
            and res["port_rate_mbps"] < res["lab_port_rate_mbps"]:
        head += (f"\nlab ports at {res['port_rate_mbps']:g} Mb/s for these runs (the lab's "
                 f"{res['lab_port_rate_mbps']:g} Mb/s slowed so this host keeps every NIC at line "
                 "rate: time dilation, --port-rate)")
    if res.get("spines"):
        head += "; spray modes spray at the spines too"
    if nic:
        head += (f"; NICs: {res['nic']} (RC transport: goodput Mb/s, packets retransmitted, NAKs, "
                 "timeouts; FCT to the responder's last packet)")
    left = res.get("left_on") or {}
    if left:
        head += f"\nthe lab is back on {left['mode']}" + (" (spines too)" if left.get("spines") else "")
    if res.get("down_uplinks"):
        head += (f"\nnote: uplinks down at the start: {', '.join(res['down_uplinks'])} (a fault: "
                 "they count in the imbalance with the bytes they carried)")
    lines = [head, f"measured: {res['measured']}",
             f"{'mode':<13} {'imbalance':>9} {'reord%':>7} {'maxPSNd':>7} {'drops':>6} "
             f"{'pauses':>6} {'CE':>6} {'FCT p50 s':>9} {'p99 s':>7} {'strag':>6}"
             + (f" {'busbw Gb/s':>10} {'fabric':>8}" if coll else "")
             + (f" {'goodput':>8} {'retx':>7} {'NAKs':>5} {'RTOs':>5}" if nic else "")]
    for r in res["modes"]:
        if "error" in r:
            lines.append(f"{r['mode']:<13} not run: {r['error']}")
            continue

        def n(v, w, f=""):
            return f"{'-':>{w}}" if v is None else f"{v:>{w}{f}}"
        line = (f"{r['mode']:<13} {n(r['uplink_imbalance'], 9, '.3f')} {r['reordered_pct']:>7.2f} "
                f"{r['max_psn_distance']:>7} {r['drops']:>6} {n(r['pauses'], 6)} "
                f"{n(r['ce_marks'], 6)} {n(r['fct_p50_s'], 9, '.3f')} {n(r['fct_p99_s'], 7, '.3f')} "
                f"{n(r['straggler'], 6, '.2f')}")
        if coll:
            line += f" {n(r['busbw_gbps'], 10, '.4f')} {n(r['fabric_busbw_gbps'], 8, '.1f')}"
        if nic:
            line += (f" {n(r.get('goodput_mbps'), 8, '.1f')} {n(r.get('retx_packets'), 7)} "
                     f"{n(r.get('naks'), 5)} {n(r.get('timeouts'), 5)}")
        if coll and r.get("engine_kept_rate") is False:
            line += "  (engine short of its rate: host-bound)"
        lines.append(line)
    return "\n".join(lines)
