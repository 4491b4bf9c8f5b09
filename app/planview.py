"""Rich rendering of a production plan (topologies.planner.Plan), shared by ``railab plan``
and ``railab demo``.

``show_plan(console, plan)``: title line, then the Switches, Sizing, Scaling limits, Paths,
Optics and cables, and Leaves tables, the spines (and super-spines), the assumptions behind the
optics and three-tier figures with their sources, and the planner's warnings.
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
    tiers = ", three tiers (beyond the seed)" if p.tiers == 3 else ""
    nic, fab = p.nic_speed_gbps or p.port_speed_gbps, p.fabric_speed_gbps
    speeds = (f"{nic}G NICs, {fab}G fabric" if fab and fab != nic else f"{nic}G ports")
    return (
        f"{arch} fabric{how}{tiers}: {p.gpus:,} GPUs = {p.servers:,} servers x "
        f"{p.gpus_per_server} GPUs, {speeds}"
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
    if p.superspine_switches:
        ssp = p.ports["superspine"]
        sw.add_row("super-spine", p.superspine_model or "-", fmt(p.superspine_switches),
                   fmt(ssp.ports_per_switch), fmt(ssp.used), fmt(ssp.free),
                   fmt(p.superspine_latency_ns))
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
    if p.tiers == 3:
        ss = fmt(p.links_per_spine_superspine_pair)
        if p.links_per_spine_superspine_pair_max != p.links_per_spine_superspine_pair:
            ss += f"-{p.links_per_spine_superspine_pair_max}"
        rows += [
            ("pods (groups per pod)", f"{p.pods} ({p.groups_per_pod})"),
            ("spines per pod", fmt(p.spines_per_pod)),
            ("pod spine downlinks / uplinks", f"{p.spine_downlinks} / {p.spine_uplinks}"),
            ("super-spines (per plane)", f"{p.superspine_switches} ({p.superspines_per_plane})"),
            ("links per spine-super-spine pair", ss),
        ]
    rows += [
        ("server-leaf links", fmt(p.server_leaf_links)),
        ("leaf-spine links", fmt(p.leaf_spine_links)),
    ]
    if p.spine_superspine_links:
        rows.append(("spine-super-spine links", fmt(p.spine_superspine_links)))
    rows.append(("optics (breakout-aware)", fmt(p.optics)))
    for k, v in rows:
        sz.add_row(k, v)
    con.print(sz)

    lim = Table(title="Scaling limits", title_justify="left", show_header=False)
    lim.add_column("item")
    lim.add_column("value", justify="right")
    lim.add_row("max groups", fmt(p.limits.max_groups))
    lim.add_row("max leaves", fmt(p.limits.max_leaves))
    lim.add_row("max servers", fmt(p.limits.max_servers))
    if p.limits.max_pods is not None:
        lim.add_row("max pods", fmt(p.limits.max_pods))
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

    if p.optics_detail:
        op = Table(title="Optics and cables", title_justify="left")
        for col in ("where", "part", "count", "links each"):
            op.add_column(col, justify="right" if col in ("count", "links each") else "left")
        for o in p.optics_detail:
            op.add_row(o.where, o.part, fmt(o.count), fmt(o.links_each))
        for c in p.cables:
            op.add_row(f"{c.kind} ({c.speed_gbps}G)", c.part, fmt(c.count), "")
        con.print(op)

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
    if p.superspines:
        names = (p.superspines[0] if len(p.superspines) == 1
                 else f"{p.superspines[0]} .. {p.superspines[-1]}")
        con.print(f"Super-spines: {names} (pod spine i -> plane i)", soft_wrap=True)
    for a in p.assumptions:
        con.print(f"[dim]assumption:[/dim] {a}", highlight=False, soft_wrap=True)
    for w in p.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
