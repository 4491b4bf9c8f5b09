"""Rich rendering of a production plan (topologies.planner.Plan), shared by ``railab plan``
and ``railab demo``.

``show_plan(console, plan)``: title line, then the Switches, Sizing, Scaling limits, Paths and
Leaves tables, the spines and the planner's warnings.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from railab.topologies.planner import PATH_CLASSES, Plan, hop_text


def fmt(v: object) -> str:
    """A table cell: ``-`` for None, thousands separators for ints, else ``str``."""
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def title(p: Plan) -> str:
    """The one-line headline of a plan (architecture, GPUs, servers, port speed)."""
    arch = "Rail-only" if p.architecture == "rail-only" else "Rail-optimized"
    how = " (picked by --arch auto)" if p.selected_by == "auto" else ""
    return (
        f"{arch} fabric{how}: {p.gpus:,} GPUs = {p.servers:,} servers x {p.gpus_per_server} GPUs, "
        f"{p.port_speed_gbps}G ports"
    )


def show_plan(con: Console, p: Plan) -> None:
    """Print ``p`` on ``con`` as rich tables (see the module docstring)."""
    con.print(f"[bold]{title(p)}[/bold]")

    sw = Table(title="Switches", title_justify="left")
    for col in ("tier", "model", "switches", "ports each", "used", "free", "latency ns"):
        sw.add_column(col, justify="left" if col in ("tier", "model") else "right")
    lp = p.ports["leaf"]
    sw.add_row("leaf", p.leaf_model, fmt(p.leaf_switches), fmt(lp.ports_per_switch),
               fmt(lp.used), fmt(lp.free), fmt(p.leaf_latency_ns))
    if p.spine_switches:
        spp = p.ports["spine"]
        sw.add_row("spine", p.spine_model or "-", fmt(p.spine_switches),
                   fmt(spp.ports_per_switch), fmt(spp.used), fmt(spp.free),
                   fmt(p.spine_latency_ns))
    sw.add_row("total", "", fmt(p.total_switches), "", "", "", "")
    con.print(sw)

    sz = Table(title="Sizing", title_justify="left", show_header=False)
    sz.add_column("item")
    sz.add_column("value", justify="right")
    groups = fmt(p.groups)
    if p.partial_last_group:
        groups += f" (last group partial: {p.partial_last_group} servers)"
    rows = [
        ("rails", fmt(p.rails)),
        ("groups", groups),
        ("servers per group", fmt(p.servers_per_group)),
        ("leaves per group", fmt(p.leaves_per_group)),
        ("rails per leaf", fmt(p.rails_per_leaf)),
        ("leaf downlinks / uplinks", f"{p.leaf_downlinks} / {p.leaf_uplinks}"),
    ]
    if p.architecture == "rail-optimized":
        pair = fmt(p.links_per_leaf_spine_pair)
        if p.links_per_leaf_spine_pair_max != p.links_per_leaf_spine_pair:
            pair += f"-{p.links_per_leaf_spine_pair_max}"
        rows += [
            ("oversubscription (planned)", f"{p.oversubscription_actual}"),
            ("leaf downlink / uplink Gb/s", f"{p.leaf_downlink_gbps:,} / {p.leaf_uplink_gbps:,}"),
            ("links per leaf-spine pair", pair),
        ]
    rows += [
        ("server-leaf links", fmt(p.server_leaf_links)),
        ("leaf-spine links", fmt(p.leaf_spine_links)),
        ("optics (2 per link)", fmt(p.optics)),
    ]
    for k, v in rows:
        sz.add_row(k, v)
    con.print(sz)

    lim = Table(title="Scaling limits", title_justify="left", show_header=False)
    lim.add_column("item")
    lim.add_column("value", justify="right")
    lim.add_row("max groups", fmt(p.limits.max_groups))
    lim.add_row("max leaves", fmt(p.limits.max_leaves))
    lim.add_row("max servers", fmt(p.limits.max_servers))
    lim.add_row("max GPUs", fmt(p.limits.max_gpus))
    con.print(lim)

    hops = Table(title="Paths", title_justify="left")
    hops.add_column("path class")
    hops.add_column("hops", justify="right")
    hops.add_column("switch latency ns", justify="right")
    hops.add_column("via")
    for cls in PATH_CLASSES:
        hops.add_row(cls, hop_text(p, cls), fmt(p.latency_ns.get(cls)),
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
                       fmt(leaf.servers))
    else:
        for g, leaves in by_group.items():
            names = leaves[0].name if len(leaves) == 1 else f"{leaves[0].name} .. {leaves[-1].name}"
            lv.add_row(str(g), names, f"{leaves[0].rails[0]}-{leaves[-1].rails[-1]} (one each)",
                       fmt(leaves[0].servers))
    con.print(lv)
    if p.spines:
        names = p.spines[0] if len(p.spines) == 1 else f"{p.spines[0]} .. {p.spines[-1]}"
        con.print(f"Spines: {names}", soft_wrap=True)
    for w in p.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
