"""``railab kinds [--json]``: what is registered (node kinds, path classes, traffic patterns).

Each concept with variants has one registry: node kinds in :mod:`railab.topologies.nodekinds`,
path classes in :mod:`railab.topologies.pathclasses`, traffic patterns in
:mod:`railab.traffic.patterns`. A module that registers a new one (imported before the command
runs) shows up here with no other change.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table


def registry_record() -> dict:
    """``{"node_kinds": {name: record}, "path_classes": {name: description},
    "patterns": {name: description}}``: the JSON of ``railab kinds --json``."""
    from railab.topologies.nodekinds import node_kinds
    from railab.topologies.pathclasses import path_classes
    from railab.traffic.patterns import PATTERNS

    return {
        "node_kinds": {n: k.record() for n, k in node_kinds().items()},
        "path_classes": {n: c.description for n, c in path_classes().items()},
        "patterns": {n: p.description for n, p in PATTERNS.items()},
    }


def register(app: typer.Typer) -> None:
    """Attach ``kinds`` to ``app``."""

    @app.command("kinds")
    def kinds_cmd(
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """List the registered node kinds, path classes and traffic patterns."""
        rec = registry_record()
        if as_json:
            typer.echo(json.dumps(rec, indent=2, sort_keys=True))
            return
        con = Console()
        if not con.is_terminal:
            con = Console(width=200)
        t = Table(title="node kinds")
        for col in ("kind", "role", "clab kind", "image", "daemons", "max ports", "description"):
            t.add_column(col, overflow="fold")
        for n, k in rec["node_kinds"].items():
            t.add_row(n, k["role"], k["clab_kind"], k["image"], ",".join(k["daemons"]) or "-",
                      "-" if k["max_ports"] is None else str(k["max_ports"]), k["description"])
        con.print(t)
        for title, key in (("path classes", "path_classes"), ("traffic patterns", "patterns")):
            t = Table(title=title)
            t.add_column("name", no_wrap=True)
            t.add_column("description", overflow="fold")
            for n, d in rec[key].items():
                t.add_row(n, d)
            con.print(t)
