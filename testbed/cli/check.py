"""``railab check LAB [--only bgp,routes,hops,cabling,oversub] [--json] [--junit FILE] [--all]``.

Runs the check families (checks.runner) against a running lab and prints a rich table: one
summary row per family, then every failure (and skip) with node, expected, observed and the
likely cause. Exit code 0 when nothing failed, 1 when any check failed, 2 for bad usage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=220)


def register(app: typer.Typer) -> None:
    """Attach ``check`` to ``app``."""

    @app.command()
    def check(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        only: Optional[str] = typer.Option(
            None, "--only", help="comma-separated subset of cabling,bgp,routes,oversub,hops"),
        as_json: bool = typer.Option(False, "--json", help="print every result as JSON"),
        junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML here"),
        show_all: bool = typer.Option(False, "--all", help="list passing checks too"),
    ) -> None:
        """Check a running lab against its lab.json: BGP, routes/ECMP, hops, cabling, oversubscription."""
        from checks.lab import LiveLab
        from checks.runner import parse_only, run_checks, summary

        try:
            names = parse_only(only)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--only") from None
        live = LiveLab.attach(lab)
        results = run_checks(live.spec, live.executor, only=names, netns_of=live.netns_of)
        if junit is not None:
            from checks.junit import write_junit

            write_junit(results, junit, live.name)
        n_fail = sum(r.status == "fail" for r in results)
        if as_json:
            typer.echo(json.dumps({
                "lab": live.name, "ok": n_fail == 0, "summary": summary(results),
                "results": [r.model_dump() for r in results],
            }, indent=2))
        else:
            con = _console()
            tab = Table(title=f"railab check {live.name}")
            for col in ("check", "pass", "fail", "skip"):
                tab.add_column(col, justify="left" if col == "check" else "right")
            for fam, c in summary(results).items():
                tab.add_row(fam, str(c["pass"]), f"[bold red]{c['fail']}[/]" if c["fail"] else "0",
                            str(c["skip"]))
            con.print(tab)
            rows = [r for r in results if show_all or r.status != "pass"]
            if rows:
                det = Table(title="details" if show_all else "failures and skips", show_lines=True)
                for col in ("check", "name", "status", "node", "expected", "observed", "likely cause"):
                    det.add_column(col, overflow="fold")
                for r in rows:
                    det.add_row(r.check, r.name, f"[{STYLE[r.status]}]{r.status}[/]", r.node or "",
                                r.expected or "", r.observed or "", r.reason or "")
                con.print(det)
            con.print(f"[bold red]{n_fail} failed[/]" if n_fail else
                      f"[green]all {len(results)} checks passed[/]")
        if n_fail:
            raise typer.Exit(1)
