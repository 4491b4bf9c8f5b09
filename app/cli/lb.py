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

from railab.errors import UsageError


def register(app: typer.Typer) -> None:
    """Attach ``lb`` to ``app``."""

    @app.command()
    def lb(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        mode: str | None = typer.Argument(
            None, help="ecmp | spray-rr | spray-random | flowlet | pbr | wcmp; "
                       "omitted: print the current mode"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        workload: str = typer.Option("elephants", "--workload",
                                     help="compare: elephants | incast | all-to-all | all-reduce"),
        modes: str | None = typer.Option(None, "--modes", help="compare: comma-separated modes "
                                         "(default ecmp,spray-rr,spray-random,flowlet,pbr,wcmp)"),
        flow_bytes: int | None = typer.Option(None, "--bytes", help="compare: bytes per elephant "
                                              "flow / per collective rank (default 4 MiB)"),
        cc: str = typer.Option("dcqcn", "--cc", help="compare: congestion control (dcqcn or none)"),
    ) -> None:
        """Set the switches' load-balancing mode: `railab lb LAB spray-rr`; `railab lb LAB ecmp`
        restores the per-flow hash; `railab lb compare LAB --workload elephants` compares the
        modes on one workload."""
        from railab.testbed import lb as LB
        from railab.testbed import state as S

        if lab == "compare":
            if mode is None:
                raise UsageError("railab lb compare LAB [--workload elephants|incast|all-to-all|all-reduce] "
                                 "[--modes a,b] [--json]")
            _compare(mode, workload, modes, flow_bytes, cc, as_json)
            return
        if mode is not None:
            LB.check_mode(mode)  # before anything else: a bad name is a usage error
        ref = S.resolve(lab)
        if not ref.running:
            raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
        rec = ref.require_up()
        if mode is None:
            out = {"lab": ref.name, "load_balancing": rec.load_balancing}
            agent = LB.agent_state(S.lab_dir(ref.name))
            if agent:
                out["agent"] = agent
        else:
            plans = LB.apply(ref.spec(), ref.netns_of, mode, S.lab_dir(ref.name))
            rec.load_balancing = mode
            S.save(rec)
            out = {"lab": ref.name, "load_balancing": mode,
                   "leaves": {p.leaf: {"uplinks": p.uplinks, "pbr": p.binding} for p in plans}}
        if as_json:
            typer.echo(json.dumps(out, indent=2, sort_keys=True))
        else:
            leaves = out.get("leaves")
            typer.echo(f"lab {ref.name}: load balancing {out['load_balancing']}"
                       + (f" on {len(leaves)} leaves" if leaves else "")
                       + (f" (agent: {out['agent']['cycles']} cycles)" if out.get("agent") else ""))


def _compare(lab: str, workload: str, modes: str | None, flow_bytes: int | None, cc: str,
             as_json: bool) -> None:
    """``railab lb compare``: checks first (exit 2, nothing run), then one run per mode."""
    from railab.testbed import lb as LB
    from railab.testbed import state as S
    from railab.traffic import lbcompare as C

    ms = tuple(m.strip() for m in modes.split(",") if m.strip()) if modes else C.DEFAULT_MODES
    if workload not in C.WORKLOADS:
        raise UsageError(f"unknown workload {workload!r}: use one of {', '.join(C.WORKLOADS)}")
    for m in ms:
        LB.check_mode(m)
    if cc not in ("dcqcn", "none"):
        raise UsageError(f"--cc must be dcqcn or none (got {cc!r})")
    ref = S.resolve(lab)
    if not ref.running:
        raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
    spec = ref.spec()
    for m in ms:
        LB.plan(spec, m)  # a mode this lab cannot carry: exit 2 before anything runs
    from railab.testbed.signals import sigint_event

    try:
        with sigint_event() as stop:
            res = C.compare(spec, ref.netns_of, workload=workload, modes=ms,
                            flow_bytes=flow_bytes, cc=cc, stop=stop,
                            on_mode=None if as_json else
                            (lambda m: typer.echo(f"  running {m} ...", err=True)))
            interrupted = stop.is_set()
    finally:
        rec = ref.require_up()
        rec.load_balancing = "ecmp"  # compare leaves the lab on ecmp
        S.save(rec)
    if interrupted:
        raise KeyboardInterrupt
    if as_json:
        typer.echo(json.dumps(res, indent=2, sort_keys=True))
        return
    typer.echo(text(res))


def text(res: dict) -> str:
    """The comparison as a table (what ``railab lb compare`` prints)."""
    coll = res["workload"] not in ("elephants", "incast")
    head = (f"workload {res['workload']}: {res['flows']} flows x {res['flow_bytes']} B"
            + (f" from {res['leaf']}, cc {res['cc']}" if not coll else " per rank")
            + (f", idle gap {res['gap_s']:g} lab s after each message" if res.get("gap_s") else ""))
    if res.get("time_scale"):
        head += f"; time scale {res['time_scale']:g} (fabric s = lab s / scale)"
    lines = [head, f"measured: {res['measured']}",
             f"{'mode':<13} {'imbalance':>9} {'reord%':>7} {'maxPSNd':>7} {'drops':>6} "
             f"{'pauses':>6} {'CE':>6} {'FCT p50 s':>9} {'p99 s':>7} {'strag':>6}"
             + (f" {'busbw Gb/s':>10} {'fabric':>8}" if coll else "")]
    for r in res["modes"]:
        def n(v, w, f=""):
            return f"{'-':>{w}}" if v is None else f"{v:>{w}{f}}"
        line = (f"{r['mode']:<13} {r['uplink_imbalance']:>9.3f} {r['reordered_pct']:>7.2f} "
                f"{r['max_psn_distance']:>7} {r['drops']:>6} {n(r['pauses'], 6)} "
                f"{n(r['ce_marks'], 6)} {n(r['fct_p50_s'], 9, '.3f')} {n(r['fct_p99_s'], 7, '.3f')} "
                f"{n(r['straggler'], 6, '.2f')}")
        if coll:
            line += f" {n(r['busbw_gbps'], 10, '.4f')} {n(r['fabric_busbw_gbps'], 8, '.1f')}"
            if r.get("engine_kept_rate") is False:
                line += "  (engine short of its rate: host-bound)"
        lines.append(line)
    return "\n".join(lines)
