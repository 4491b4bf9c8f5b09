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
from railab.topologies.catalog import get_model, load_catalog, parse_speed
from railab.topologies.planner import (
    DEFAULT_TABLE_GPUS,
    PATH_CLASSES,
    Design,
    Plan,
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


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _title(p: Plan) -> str:
    arch = "Rail-only" if p.architecture == "rail-only" else "Rail-optimized"
    how = " (picked by --arch auto)" if p.selected_by == "auto" else ""
    return (
        f"{arch} fabric{how}: {p.gpus:,} GPUs = {p.servers:,} servers x {p.gpus_per_server} GPUs, "
        f"{p.port_speed_gbps}G ports"
    )


def _show_plan(con: Console, p: Plan) -> None:
    con.print(f"[bold]{_title(p)}[/bold]")

    sw = Table(title="Switches", title_justify="left")
    for col in ("tier", "model", "switches", "ports each", "used", "free", "latency ns"):
        sw.add_column(col, justify="left" if col in ("tier", "model") else "right")
    lp = p.ports["leaf"]
    sw.add_row("leaf", p.leaf_model, _fmt(p.leaf_switches), _fmt(lp.ports_per_switch),
               _fmt(lp.used), _fmt(lp.free), _fmt(p.leaf_latency_ns))
    if p.spine_switches:
        spp = p.ports["spine"]
        sw.add_row("spine", p.spine_model or "-", _fmt(p.spine_switches),
                   _fmt(spp.ports_per_switch), _fmt(spp.used), _fmt(spp.free),
                   _fmt(p.spine_latency_ns))
    sw.add_row("total", "", _fmt(p.total_switches), "", "", "", "")
    con.print(sw)

    sz = Table(title="Sizing", title_justify="left", show_header=False)
    sz.add_column("item")
    sz.add_column("value", justify="right")
    groups = _fmt(p.groups)
    if p.partial_last_group:
        groups += f" (last group partial: {p.partial_last_group} servers)"
    rows = [
        ("rails", _fmt(p.rails)),
        ("groups", groups),
        ("servers per group", _fmt(p.servers_per_group)),
        ("leaves per group", _fmt(p.leaves_per_group)),
        ("rails per leaf", _fmt(p.rails_per_leaf)),
        ("leaf downlinks / uplinks", f"{p.leaf_downlinks} / {p.leaf_uplinks}"),
    ]
    if p.architecture == "rail-optimized":
        pair = _fmt(p.links_per_leaf_spine_pair)
        if p.links_per_leaf_spine_pair_max != p.links_per_leaf_spine_pair:
            pair += f"-{p.links_per_leaf_spine_pair_max}"
        rows += [
            ("oversubscription (planned)", f"{p.oversubscription_actual}"),
            ("leaf downlink / uplink Gb/s", f"{p.leaf_downlink_gbps:,} / {p.leaf_uplink_gbps:,}"),
            ("links per leaf-spine pair", pair),
        ]
    rows += [
        ("server-leaf links", _fmt(p.server_leaf_links)),
        ("leaf-spine links", _fmt(p.leaf_spine_links)),
        ("optics (2 per link)", _fmt(p.optics)),
    ]
    for k, v in rows:
        sz.add_row(k, v)
    con.print(sz)

    lim = Table(title="Scaling limits", title_justify="left", show_header=False)
    lim.add_column("item")
    lim.add_column("value", justify="right")
    lim.add_row("max groups", _fmt(p.limits.max_groups))
    lim.add_row("max leaves", _fmt(p.limits.max_leaves))
    lim.add_row("max servers", _fmt(p.limits.max_servers))
    lim.add_row("max GPUs", _fmt(p.limits.max_gpus))
    con.print(lim)

    hops = Table(title="Paths", title_justify="left")
    hops.add_column("path class")
    hops.add_column("hops", justify="right")
    hops.add_column("switch latency ns", justify="right")
    hops.add_column("via")
    for cls in PATH_CLASSES:
        hops.add_row(cls, hop_text(p, cls), _fmt(p.latency_ns.get(cls)),
                     p.hop_notes.get(cls, ""))
    con.print(hops)

    lv = Table(title="Leaves", title_justify="left")
    lv.add_column("group", justify="right")
    lv.add_column("leaves")
    lv.add_column("rails")
    lv.add_column("servers", justify="right")
    by_group: dict[int, list] = {}
    for leaf in p.leaves:
        by_group.setdefault(leaf.group, []).append(leaf)
    if p.architecture == "rail-only":
        for leaf in p.leaves:
            lv.add_row(str(leaf.group), leaf.name, ",".join(map(str, leaf.rails)),
                       _fmt(leaf.servers))
    else:
        for g, leaves in by_group.items():
            names = leaves[0].name if len(leaves) == 1 else f"{leaves[0].name} .. {leaves[-1].name}"
            lv.add_row(str(g), names, f"{leaves[0].rails[0]}-{leaves[-1].rails[-1]} (one each)",
                       _fmt(leaves[0].servers))
    con.print(lv)
    if p.spines:
        names = p.spines[0] if len(p.spines) == 1 else f"{p.spines[0]} .. {p.spines[-1]}"
        con.print(f"Spines: {names}", soft_wrap=True)
    for w in p.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)


def _show_compare(con: Console, result: dict, gpus: int) -> None:
    t = Table(title=f"Rail-only vs Rail-optimized for {gpus:,} GPUs", title_justify="left")
    t.add_column("")
    archs = ("rail-only", "rail-optimized")
    for a in archs:
        t.add_column(a, justify="right")
    plans = {a: result[a]["plan"] for a in archs}

    def row(label: str, get) -> None:
        t.add_row(label, *("-" if plans[a] is None else get(plans[a]) for a in archs))

    row("leaf switches", lambda p: _fmt(p["leaf_switches"]))
    row("spine switches", lambda p: _fmt(p["spine_switches"]))
    row("total switches", lambda p: _fmt(p["total_switches"]))
    row("groups", lambda p: _fmt(p["groups"]))
    row("server-leaf links", lambda p: _fmt(p["server_leaf_links"]))
    row("leaf-spine links", lambda p: _fmt(p["leaf_spine_links"]))
    row("optics", lambda p: _fmt(p["optics"]))
    for cls in PATH_CLASSES:
        row(f"hops {cls}", lambda p, c=cls: hop_text(p, c))
    row("max GPUs", lambda p: _fmt(p["limits"]["max_gpus"]))
    con.print(t)
    for a in archs:
        if result[a]["error"]:
            con.print(f"[yellow]{a}:[/yellow] {result[a]['error']}", highlight=False,
                      soft_wrap=True)
        elif plans[a]["warnings"]:
            for w in plans[a]["warnings"]:
                con.print(f"[yellow]{a} warning:[/yellow] {w}", highlight=False, soft_wrap=True)


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
            "400G", "--port-speed", help="Fabric port speed, e.g. 400G."
        ),
        oversubscription: str = typer.Option(
            "1:1", "--oversubscription", help="Leaf downlink:uplink ratio, e.g. 1:1, 3:1."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the Plan JSON only."),
        do_compare: bool = typer.Option(
            False, "--compare", help="Plan both architectures side by side."
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
            design = Design(
                architecture=arch.value, gpus=gpus, gpus_per_server=gpus_per_server, leaf=leaf,
                spine=spine, port_speed_gbps=speed, oversubscription=oversubscription,
            )
            if do_compare:
                result = compare(design, cat)
                if as_json:
                    typer.echo(json.dumps(result, indent=2))
                else:
                    _show_compare(con, result, gpus)
                return
            p = plan(design, cat)
        except ValueError as exc:  # PlanError, CatalogError, pydantic ValidationError
            _fail(str(exc))
            return
        if as_json:
            typer.echo(p.model_dump_json(indent=2))
        else:
            _show_plan(con, p)
