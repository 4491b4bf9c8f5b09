"""``railab lb LAB MODE``: switch a running lab's leaves to a load-balancing mode
(railab.testbed.lb: ecmp, spray-rr, spray-random, pbr), recorded in the lab state and shown by
``status``/``inspect``; ``railab lb LAB`` prints the current mode. A bad mode, a mode the lab
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
            None, help="ecmp | spray-rr | spray-random | pbr (flowlet, wcmp: not built yet); "
                       "omitted: print the current mode"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    ) -> None:
        """Set the switches' load-balancing mode: `railab lb LAB spray-rr`; `railab lb LAB ecmp`
        restores the per-flow hash."""
        from railab.testbed import lb as LB
        from railab.testbed import state as S

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
