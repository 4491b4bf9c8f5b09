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
            None, help="ecmp | spray-rr | spray-random | flowlet | pbr (wcmp: not built yet); "
                       "omitted: print the current mode"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        workload: str = typer.Option("elephants", "--workload", help="compare: the workload (elephants)"),
        modes: str | None = typer.Option(None, "--modes", help="compare: comma-separated modes "
                                         "(default ecmp,spray-rr,spray-random,flowlet,pbr)"),
        flow_bytes: int = typer.Option(1 << 20, "--bytes", help="compare: bytes per flow"),
        cc: str = typer.Option("dcqcn", "--cc", help="compare: congestion control (dcqcn or none)"),
    ) -> None:
        """Set the switches' load-balancing mode: `railab lb LAB spray-rr`; `railab lb LAB ecmp`
        restores the per-flow hash; `railab lb compare LAB --workload elephants` compares the
        modes on one workload."""
        from railab.testbed import lb as LB
        from railab.testbed import state as S

        if lab == "compare":
            if mode is None:
                raise UsageError("railab lb compare LAB [--workload elephants] [--modes a,b] [--json]")
            from railab.traffic import lbcompare as C

            ms = tuple(m.strip() for m in modes.split(",") if m.strip()) if modes else C.DEFAULT_MODES
            if workload not in C.WORKLOADS:
                raise UsageError(f"unknown workload {workload!r}: built so far: {', '.join(C.WORKLOADS)}")
            for m in ms:
                LB.check_mode(m)
            ref = S.resolve(mode)
            if not ref.running:
                raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
            res = C.compare(ref.spec(), ref.netns_of, workload=workload, modes=ms,
                            flow_bytes=flow_bytes, cc=cc)
            rec = ref.require_up()
            rec.load_balancing = "ecmp"  # compare leaves the lab on ecmp
            S.save(rec)
            if as_json:
                typer.echo(json.dumps(res, indent=2, sort_keys=True))
                return
            typer.echo(f"workload {res['workload']}: {res['flows']} flows x {res['flow_bytes']} B "
                       f"from {res['leaf']} (measured: uplink TX bytes, receivers' PSNs; cc {res['cc']})")
            typer.echo(f"{'mode':<13} {'imbalance':>9} {'max/mean B':>19} {'reord%':>7} "
                       f"{'maxPSNd':>7} {'drops':>5} {'CE':>5} {'FCT p50 s':>9} {'p99 s':>7} {'strag':>6}")
            for r in res["modes"]:
                typer.echo(f"{r['mode']:<13} {r['uplink_imbalance']:>9.3f} "
                           f"{r['uplink_max_bytes']:>9}/{r['uplink_mean_bytes']:<9.0f} "
                           f"{r['reordered_pct']:>7.2f} {r['max_psn_distance']:>7} {r['drops']:>5} "
                           f"{r['ce_marks']:>5} {r['fct_p50_s'] or 0:>9.3f} {r['fct_p99_s'] or 0:>7.3f} "
                           f"{r['straggler'] or 0:>6.2f}")
            return
        if mode is not None:
            LB.check_mode(mode)  # before anything else: a bad name is a usage error
        ref = S.resolve(lab)
        if not ref.running:
            raise UsageError(f"lab {ref.name!r} is not up: `railab up` it first ({S.running_labs()})")
        rec = ref.require_up()
        if mode is None:
            out = {"lab": ref.name, "load_balancing": rec.load_balancing}
        else:
            plans = LB.apply(ref.spec(), ref.netns_of, mode)
            rec.load_balancing = mode
            S.save(rec)
            out = {"lab": ref.name, "load_balancing": mode,
                   "leaves": {p.leaf: {"uplinks": p.uplinks, "pbr": p.binding} for p in plans}}
        if as_json:
            typer.echo(json.dumps(out, indent=2, sort_keys=True))
        else:
            leaves = out.get("leaves")
            typer.echo(f"lab {ref.name}: load balancing {out['load_balancing']}"
                       + (f" on {len(leaves)} leaves" if leaves else ""))
