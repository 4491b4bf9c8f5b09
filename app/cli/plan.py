"""``railab plan``: size a Rail-only / Rail-optimized GPU backend fabric (topologies.planner).

Human output is rich tables; ``--json`` prints only the Plan JSON (docs/planner.md). Bad input
prints one ``error: ...`` line on stderr and exits 2.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_USAGE
from railab.planview import fmt as _fmt
from railab.planview import show_plan as _show_plan
from railab.topologies.cabling import plan_wiring, write_csv
from railab.topologies.catalog import get_model, load_catalog, parse_speed
from railab.topologies.planner import (
    DEFAULT_TABLE_GPUS,
    PATH_CLASSES,
    Design,
    compare,
    hop_text,
    node_table,
    plan,
)


class Arch(StrEnum):
    """Architecture choices of ``--arch``."""

    auto = "auto"
    rail_only = "rail-only"
    rail_optimized = "rail-optimized"


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _show_compare(con: Console, result: dict, gpus: int) -> None:
    """Every column of :func:`railab.topologies.planner.compare` in one table; an impossible
    column shows ``impossible`` in its cells and its reason below the table."""
    cols = list(result)
    models = list(dict.fromkeys(result[c]["leaf"] for c in cols))
    what = ("Rail-only vs Rail-optimized" if len(models) == 1
            else f"Rail-only vs Rail-optimized on {', '.join(models)}")
    t = Table(title=f"{what} for {gpus:,} GPUs", title_justify="left")
    t.add_column("")
    for c in cols:
        t.add_column(c, justify="right")
    plans = {c: result[c]["plan"] for c in cols}

    def row(label: str, get) -> None:
        t.add_row(label, *("impossible" if plans[c] is None else get(plans[c]) for c in cols))

    if len(models) > 1:
        row("leaf / spine model", lambda p: f"{p['leaf_model']} / {p['spine_model'] or '-'}")
    row("tiers", lambda p: _fmt(p["tiers"]))
    row("leaf switches", lambda p: _fmt(p["leaf_switches"]))
    row("spine switches", lambda p: _fmt(p["spine_switches"]))
    row("super-spine switches", lambda p: _fmt(p["superspine_switches"]))
    row("total switches", lambda p: _fmt(p["total_switches"]))
    row("groups", lambda p: _fmt(p["groups"]))
    row("pods", lambda p: _fmt(p["pods"]))
    row("server-leaf links", lambda p: _fmt(p["server_leaf_links"]))
    row("leaf-spine links", lambda p: _fmt(p["leaf_spine_links"]))
    row("spine-super-spine links", lambda p: _fmt(p["spine_superspine_links"]))
    row("optics", lambda p: _fmt(p["optics"]))
    for cls in PATH_CLASSES:
        row(f"hops {cls}", lambda p, c=cls: hop_text(p, c))
    row("max GPUs", lambda p: _fmt(p["limits"]["max_gpus"]))
    con.print(t)
    for c in cols:
        if result[c]["error"]:
            con.print(f"[yellow]{c} is impossible:[/yellow] {result[c]['error']}",
                      highlight=False, soft_wrap=True)
        elif plans[c]["warnings"]:
            for w in plans[c]["warnings"]:
                con.print(f"[yellow]{c} warning:[/yellow] {w}", highlight=False, soft_wrap=True)


def _show_table(con: Console, rows: list[dict], model: str, spine: str, rails: int) -> None:
    t = Table(
        title=f"Rail-optimized node requirements: {model} leaves, {spine} spines, "
        f"{rails} GPUs per server",
        title_justify="left",
    )
    cols = [
        ("GPUs", "gpus"), ("servers", "servers"), ("groups", "groups"), ("leaves", "leaves"),
        ("spines", "spines"), ("switches", "switches"), ("links/pair", "links_per_leaf_spine_pair"),
        ("server-leaf links", "server_leaf_links"), ("leaf-spine links", "leaf_spine_links"),
        ("optics", "optics"),
    ]
    for label, _ in cols:
        t.add_column(label, justify="right")
    notes: list[str] = []
    past: list[str] = []
    for r in rows:
        if r["error"]:
            label = "not whole servers" if "whole number" in r["error"] else "past limit"
            t.add_row(_fmt(r["gpus"]), label, *[""] * (len(cols) - 2))
            past.append(r["error"])
            continue
        cells = [_fmt(r[k]) for _, k in cols]
        if r["partial_last_group"]:
            cells[2] += "*"
            notes.append(
                f"* {r['gpus']:,} GPUs: the last group is partial ({r['partial_last_group']} "
                "servers)"
            )
        t.add_row(*cells)
    con.print(t)
    for note in notes:
        con.print(note, highlight=False, soft_wrap=True)
    for note in past:
        con.print(note, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach ``railab plan`` to ``app``."""

    @app.command("plan")
    def plan_cmd(
        gpus: int | None = typer.Option(None, "--gpus", "-g", help="Total GPU count."),
        arch: Arch = typer.Option(Arch.auto, "--arch", "-a", help="Architecture."),
        leaf: str = typer.Option("CX864E-N", "--leaf", help="Leaf switch model."),
        spine: str | None = typer.Option(None, "--spine", help="Spine model (default: leaf)."),
        gpus_per_server: int = typer.Option(
            8, "--gpus-per-server", help="GPUs (= NICs = rails) per server."
        ),
        port_speed: str = typer.Option(
            "400G", "--port-speed", help="Port speed of NICs and fabric, e.g. 400G."
        ),
        nic_speed: str | None = typer.Option(
            None, "--nic-speed", help="Server NIC speed (default: --port-speed), e.g. 400G."
        ),
        fabric_speed: str | None = typer.Option(
            None, "--fabric-speed",
            help="Leaf-spine (and spine-super-spine) speed (default: --port-speed), e.g. 800G.",
        ),
        tiers: int | None = typer.Option(
            None, "--tiers", min=2, max=3,
            help="Switch tiers: 2, or 3 (super-spines above pods; default: 3 past the 2-tier "
            "limit).",
        ),
        superspine: str | None = typer.Option(
            None, "--superspine", help="Super-spine model (three tiers; default: spine)."
        ),
        cabling: Path | None = typer.Option(
            None, "--cabling", metavar="FILE.csv",
            help="Write the cabling plan: one row per cable (server-leaf, leaf-spine, "
            "spine-superspine) with both ends' lab port, cage/sub-port and SONiC name.",
        ),
        oversubscription: str = typer.Option(
            "1:1", "--oversubscription", help="Leaf downlink:uplink ratio, e.g. 1:1, 3:1."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the Plan JSON only."),
        do_compare: bool = typer.Option(
            False, "--compare",
            help="Plan both architectures side by side; with --leaf A,B (or --leaf all) on "
            "each leaf model.",
        ),
        catalog: Path | None = typer.Option(
            None, "--catalog",
            help="Extra switch-model YAML (same layout as topologies/catalog.yml).",
        ),
        table: str | None = typer.Option(
            None, "--table", metavar="MODEL",
            help="Print the Rail-optimized node-requirements table for MODEL (256..8192 GPUs).",
        ),
    ) -> None:
        """Size a Rail-only or Rail-optimized GPU backend fabric (seed design guide rules)."""
        # a pipe or a test runner has no width: give the tables room instead of rich's 80
        wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
        con = Console(highlight=False, width=wide)
        try:
            cat = load_catalog(catalog)
            speed = parse_speed(port_speed)
            if table is not None:
                counts = (gpus,) if gpus else DEFAULT_TABLE_GPUS
                rows = node_table(
                    table, gpus_per_server, counts, spine=spine, port_speed_gbps=speed,
                    oversubscription=oversubscription, catalog=cat,
                )
                if as_json:
                    typer.echo(json.dumps(rows, indent=2))
                else:
                    name = get_model(cat, table).name
                    _show_table(con, rows, name, get_model(cat, spine).name if spine else name,
                                gpus_per_server)
                return
            if gpus is None:
                _fail("give the GPU count with --gpus N (or --table MODEL for the sizing table)")
            models = [m.strip() for m in leaf.split(",") if m.strip()]
            if models == ["all"]:
                models = sorted(cat)
            if len(models) > 1 and not do_compare:
                _fail(f"--leaf {leaf}: several leaf models need --compare")
            design = Design(
                architecture=arch.value, gpus=gpus, gpus_per_server=gpus_per_server,
                leaf=models[0] if models else leaf, spine=spine, port_speed_gbps=speed,
                nic_speed_gbps=parse_speed(nic_speed) if nic_speed else None,
                fabric_speed_gbps=parse_speed(fabric_speed) if fabric_speed else None,
                oversubscription=oversubscription, tiers=tiers, superspine=superspine,
            )
            if do_compare:
                if cabling is not None:
                    _fail("--cabling writes one plan's cables: drop --compare")
                result = compare(design, cat, models)
                if as_json:
                    typer.echo(json.dumps(result, indent=2))
                else:
                    _show_compare(con, result, gpus)
                return
            p = plan(design, cat)
            if cabling is not None:
                wiring, brk = plan_wiring(p, cat)
                write_csv(cabling, wiring.cables, brk)
        except ValueError as exc:  # PlanError, CatalogError, CablingError, ValidationError
            _fail(str(exc))
            return
        if cabling is not None and not as_json:
            con.print(f"cabling plan: {len(wiring.cables):,} cables -> {cabling}",
                      highlight=False)
        if as_json:
            typer.echo(p.model_dump_json(indent=2))
        else:
            _show_plan(con, p)
