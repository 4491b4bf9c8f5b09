"""A graphviz diagram of a lab's fabric, drawn from ``lab.json`` alone.

Layout (top to bottom): spines on the top rank, then each group as a cluster holding its leaves
above its servers. Every rail has one colour everywhere (a leaf's fill, a server NIC cell and the
server-leaf link), so "NIC N to Leaf N" (seed guide, Rail-optimized design principles) is visible
at a glance. Traced paths (traceroute or traffic-engine hop lists) are drawn on top as bold
coloured edges, one colour per path, with their label in the legend.

Public API:

* ``RAIL_COLOURS`` / ``rail_colour(rail)``: the rail palette shared with the HTML report.
* ``TracedPath``: a path to overlay (list of ``node`` or ``node:ethN`` hops).
* ``FabricMarks``: what is broken, drawn in its own style: injected faults (``LabState.faults``)
  bold red with their id and kind, links that are down dashed red, links whose BGP session is
  down (link up) dotted orange; a node a fault names (daemon killed, node off) gets a red border.
* ``fabric_graph(spec, paths=(), marks=None) -> graphviz.Graph``: the diagram (DOT source via
  ``.source``).
* ``render_svg(spec, paths=(), marks=None) -> str``: the SVG text (needs Graphviz's ``dot``).
* ``write_diagram(spec, out, paths=(), marks=None) -> Path``: ``.svg``, ``.png``, ``.pdf`` or ``.dot``.

The NVLink hop of PXN (two consecutive hops on one server, ``srv1:eth1`` then ``srv1:eth2``) is
drawn inside the server box: a bar in the path's colour under the NIC cells, from the source
GPU's NIC to the rail-aligned peer NIC that sends.
"""

from __future__ import annotations

import html
import shutil
from collections.abc import Iterable
from pathlib import Path

import graphviz
from pydantic import BaseModel, Field

from railab.checks.base import link_id
from railab.errors import RailabError
from railab.topologies.labspec import LabSpec

# Colour-blind-friendly qualitative palette (Okabe-Ito, then Tol's bright set); rail n uses
# RAIL_COLOURS[(n - 1) % len]. Consistent across the diagram and the HTML report.
RAIL_COLOURS: tuple[str, ...] = (
    "#0072B2",  # rail 1 blue
    "#E69F00",  # rail 2 orange
    "#009E73",  # rail 3 green
    "#CC79A7",  # rail 4 pink
    "#56B4E9",  # rail 5 sky
    "#D55E00",  # rail 6 vermillion
    "#7B3294",  # rail 7 purple
    "#8C6D1F",  # rail 8 brown
    "#228833",
    "#AA3377",
    "#4477AA",
    "#BBBBBB",
)

# Colours of traced paths (distinct from the rail palette: dark, saturated).
PATH_COLOURS: tuple[str, ...] = ("#D00000", "#111111", "#1B9E77", "#6A3D9A", "#E7298A", "#00838F")

SPINE_FILL = "#3B3B3B"
FABRIC_EDGE = "#9A9A9A"
#: styles of what is broken (FabricMarks)
FAULT_COLOUR = "#C00000"
DOWN_COLOUR = "#C00000"
SESSION_COLOUR = "#E07000"


class FabricMarks(BaseModel):
    """What to draw as broken: ``down_links`` link id (:func:`railab.checks.base.link_id`) ->
    why (``admin-down``, ``carrier-lost``, ``link down``); ``down_sessions``: link ids whose BGP
    session is not Established; ``faults``: injected fault records (``LabState.faults`` as
    dicts: ``id``, ``kind``, ``node``, ``port``, ``peer_node``, ``peer_port``, ``note``)."""

    down_links: dict[str, str] = Field(default_factory=dict)
    down_sessions: list[str] = Field(default_factory=list)
    faults: list[dict] = Field(default_factory=list)

    def fault_links(self, spec: LabSpec) -> dict[str, list[dict]]:
        """Link id -> the faults on it: a fault names a port (``node:port``, or its peer end),
        or a node pair (``node`` and ``peer_node``: the first link between them)."""
        out: dict[str, list[dict]] = {}
        for f in self.faults:
            node, port, peer = f.get("node"), f.get("port"), f.get("peer_node")
            for ln in spec.links:
                ends = {(ln.a.node, ln.a.interface), (ln.b.node, ln.b.interface)}
                hit = ((node, port) in ends or (peer, f.get("peer_port")) in ends) if port else (
                    peer is not None and {node, peer} == {ln.a.node, ln.b.node})
                if hit:
                    out.setdefault(link_id(ln.a.node, ln.a.interface, ln.b.node,
                                           ln.b.interface), []).append(f)
                    if not port:
                        break
        return out

    def fault_nodes(self) -> dict[str, list[dict]]:
        """Node -> the faults that name the node alone (no port, no peer: a daemon killed, a
        node powered off)."""
        out: dict[str, list[dict]] = {}
        for f in self.faults:
            if f.get("node") and not f.get("port") and not f.get("peer_node"):
                out.setdefault(f["node"], []).append(f)
        return out


def rail_colour(rail: int) -> str:
    """The ``#rrggbb`` colour of rail ``rail`` (1-based), shared by diagram and report."""
    if rail < 1:
        raise ValueError(f"rail numbers are 1-based, got {rail}")
    return RAIL_COLOURS[(rail - 1) % len(RAIL_COLOURS)]


class TracedPath(BaseModel):
    """One path to draw over the fabric.

    ``hops`` lists the nodes in order, source NIC first, e.g.
    ``["srv1:eth1", "g1-leaf1", "spine2", "g1-leaf2", "srv2:eth2"]``. A server hop may name its
    interface (``srvN:ethK``); two consecutive hops on the same server (``srv1:eth1``,
    ``srv1:eth2``) are the NVLink hop of PXN and are drawn dashed inside the server.
    """

    label: str = Field(description="legend text, e.g. 'inter-rail srv1:gpu0 -> srv2:gpu1'")
    hops: list[str]
    colour: str | None = Field(None, description="#rrggbb; default: next PATH_COLOURS entry")


def _node_id(hop: str) -> tuple[str, str | None]:
    node, _, port = hop.partition(":")
    return node, (port or None)


def _dot_id(name: str) -> str:
    # Node names are [a-z0-9-]: quote them so graphviz accepts the dash.
    return name


def _server_label(spec: LabSpec, server: str,
                  nvlinks: Iterable[tuple[str, str, str]] = ()) -> str:
    """The server box: one cell per NIC (port ``ethN``, rail colour), one row per NVLink hop
    ``(from ifname, to ifname, colour)`` drawn as a bar under the NICs it joins, the name."""
    nics = spec.nics_of(server)
    cells = "".join(
        f'<TD PORT="{n.interface}" BGCOLOR="{rail_colour(n.rail)}" WIDTH="22" HEIGHT="18">'
        f'<FONT COLOR="white" POINT-SIZE="9">{n.nic}</FONT></TD>'
        for n in nics
    )
    span = max(1, len(nics))
    col = {n.interface: i for i, n in enumerate(nics)}
    rows = ""
    for a, b, colour in nvlinks:
        if a not in col or b not in col:
            continue
        lo, hi = sorted((col[a], col[b]))
        arrow = f"{col[a] + 1}&#8594;{col[b] + 1}" if col[a] < col[b] else f"{col[b] + 1}&#8592;{col[a] + 1}"
        pre = f'<TD COLSPAN="{lo}"></TD>' if lo else ""
        post = f'<TD COLSPAN="{span - hi - 1}"></TD>' if span - hi - 1 > 0 else ""
        rows += (f'<TR>{pre}<TD COLSPAN="{hi - lo + 1}" BGCOLOR="{colour}" HEIGHT="8" '
                 f'TOOLTIP="NVLink (PXN) NIC {arrow}"><FONT COLOR="white" POINT-SIZE="7">'
                 f"NVLink {arrow}</FONT></TD>{post}</TR>")
    return (
        '<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="1" CELLPADDING="1" BGCOLOR="#F4F4F4">'
        f"<TR>{cells}</TR>{rows}"
        f'<TR><TD COLSPAN="{span}"><B>{html.escape(server)}</B></TD></TR></TABLE>>'
    )


def _leaf_attrs(spec: LabSpec, leaf) -> dict[str, str]:
    rails = leaf.rails or []
    if len(rails) == 1:
        fill = rail_colour(rails[0])
        label = f"{leaf.name}\nrail {rails[0]}"
    elif rails:
        # Rail-only leaf carrying several rails: name on top, one coloured cell per rail.
        cells = "".join(
            f'<TD BGCOLOR="{rail_colour(r)}"><FONT COLOR="white" POINT-SIZE="10"><B>rail {r}</B>'
            "</FONT></TD>"
            for r in rails
        )
        return {
            "shape": "plain",
            "label": (
                '<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="4" COLOR="black">'
                f'<TR><TD COLSPAN="{len(rails)}" BGCOLOR="#3B3B3B"><FONT COLOR="white">'
                f"<B>{html.escape(leaf.name)}</B></FONT></TD></TR><TR>{cells}</TR></TABLE>>"
            ),
        }
    else:
        fill = "#DDDDDD"
        label = leaf.name
    attrs = {
        "label": label,
        "shape": "box",
        "style": "filled,rounded",
        "fillcolor": fill,
        "fontcolor": "white" if rails else "black",
        "fontsize": "11",
        "fontname": "Helvetica-Bold",
        "penwidth": "1.2",
    }
    return attrs


def fabric_graph(spec: LabSpec, paths: Iterable[TracedPath] = (),
                 marks: FabricMarks | None = None) -> graphviz.Graph:
    """Build the fabric diagram of ``spec`` with ``paths`` drawn on it and ``marks`` (faults,
    down links, down sessions) in their own styles.

    Raises ValueError naming the hop if a traced path names a node that is not in the lab.
    """
    paths = list(paths)
    marks = marks or FabricMarks()
    on_link = marks.fault_links(spec)
    on_node = marks.fault_nodes()
    nvlinks: dict[str, list[tuple[str, str, str]]] = {}
    for i, path in enumerate(paths):
        colour = path.colour or PATH_COLOURS[i % len(PATH_COLOURS)]
        hops = [_node_id(h) for h in path.hops]
        for (n1, p1), (n2, p2) in zip(hops, hops[1:], strict=False):
            if n1 == n2 and p1 and p2 and p1 != p2:  # NVLink hop inside a server (PXN)
                nvlinks.setdefault(n1, []).append((p1, p2, colour))
    g = graphviz.Graph(name=spec.name, engine="dot")
    g.attr(
        rankdir="TB",
        newrank="true",
        nodesep="0.18",
        ranksep="1.1",
        fontname="Helvetica",
        fontsize="12",
        splines="true",
        outputorder="edgesfirst",
    )
    g.attr("node", fontname="Helvetica", fontsize="11")
    g.attr("edge", color=FABRIC_EDGE, penwidth="0.8")

    names = {n.name for n in spec.nodes}
    spines = spec.by_role("spine")
    leaves = spec.by_role("leaf")
    servers = spec.by_role("server")

    supers = spec.by_role("superspine")  # three tiers: above the pod spines
    if supers:
        with g.subgraph(name="superspines") as s:
            s.attr(rank="min")
            for ss in supers:
                s.node(_dot_id(ss.name), label=ss.name, shape="box", style="filled,rounded",
                       fillcolor=SPINE_FILL, fontcolor="white", fontname="Helvetica-Bold")
    if spines:
        with g.subgraph(name="spines") as s:
            s.attr(rank="same" if supers else "min")
            for sp in spines:
                s.node(
                    _dot_id(sp.name),
                    label=sp.name,
                    shape="box",
                    style="filled,rounded",
                    fillcolor=SPINE_FILL,
                    fontcolor="white",
                    fontname="Helvetica-Bold",
                    **_node_fault_attrs(on_node.get(sp.name)),
                )

    groups = sorted({n.group for n in leaves + servers if n.group is not None})
    for grp in groups:
        with g.subgraph(name=f"cluster_group{grp}") as c:
            c.attr(
                label=f"group {grp}",
                style="rounded,dashed",
                color="#777777",
                fontname="Helvetica-Bold",
                fontsize="13",
                margin="14",
            )
            with c.subgraph(name=f"leaves_g{grp}") as lr:
                lr.attr(rank="same")
                for lf in sorted((n for n in leaves if n.group == grp), key=lambda n: n.rails or [0]):
                    lr.node(_dot_id(lf.name), **(_leaf_attrs(spec, lf)
                                                 | _node_fault_attrs(on_node.get(lf.name))))
            with c.subgraph(name=f"servers_g{grp}") as sr:
                sr.attr(rank="same")
                for sv in (n for n in servers if n.group == grp):
                    sr.node(
                        _dot_id(sv.name), label=_server_label(spec, sv.name, nvlinks.get(sv.name, ())),
                        shape="plain", **_node_fault_attrs(on_node.get(sv.name), xlabel_only=True)
                    )

    # Leaves / servers without a group (should not happen, but never drop a node silently).
    for n in leaves + servers:
        if n.group is None:
            if n.role == "leaf":
                g.node(_dot_id(n.name), **_leaf_attrs(spec, n))
            else:
                g.node(_dot_id(n.name), label=_server_label(spec, n.name), shape="plain")

    rail_of = {(n.server, n.interface): n.rail for n in spec.nics}
    styles_used: set[str] = set()
    for link in spec.links:
        lid = link_id(link.a.node, link.a.interface, link.b.node, link.b.interface)
        mark = _link_mark(lid, marks, on_link)
        if mark:
            styles_used.add(mark.pop("_kind"))
        if link.role in ("leaf-spine", "spine-superspine"):
            # a is the lower tier (leaf, or pod spine); the upper end written first.
            g.edge(_dot_id(link.b.node), _dot_id(link.a.node), **mark)
        else:
            rail = rail_of.get((link.a.node, link.a.interface))
            colour = rail_colour(rail) if rail else FABRIC_EDGE
            g.edge(
                _dot_id(link.b.node),
                f"{_dot_id(link.a.node)}:{link.a.interface}:n",
                **({"color": colour, "penwidth": "1.6"} | mark),
            )
    if on_node:
        styles_used.add("fault")

    legend_rows: list[tuple[str, str, str]] = []
    for kind in ("fault", "down", "session"):
        if kind in styles_used:
            legend_rows.append(_MARK_LEGEND[kind])
    for i, path in enumerate(paths):
        colour = path.colour or PATH_COLOURS[i % len(PATH_COLOURS)]
        legend_rows.append((colour, path.label, "solid"))
        hops = [_node_id(h) for h in path.hops]
        for node, _ in hops:
            if node not in names:
                raise ValueError(
                    f"traced path {path.label!r} names {node!r}, which is not a node of lab "
                    f"{spec.name!r}"
                )
        for (n1, p1), (n2, p2) in zip(hops, hops[1:], strict=False):
            if n1 == n2:
                continue  # NVLink hop (PXN): drawn inside the server box (_server_label)
            a = f"{n1}:{p1}:n" if p1 else n1
            b = f"{n2}:{p2}:n" if p2 else n2
            g.edge(a, b, color=colour, penwidth="3.4", constraint="false")

    # Title, rail colours and traced paths as the graph label under the fabric.
    g.attr(label=_legend_label(spec, legend_rows), labelloc="b", labeljust="c")
    return g


_MARK_LEGEND = {
    "fault": (FAULT_COLOUR, "injected fault (id and kind on the link or node)", "fault"),
    "down": (DOWN_COLOUR, "link down (dashed)", "down"),
    "session": (SESSION_COLOUR, "BGP session down, link up (dotted)", "session"),
}
_MARK_SYMBOL = {"fault": "━━ fault", "down": "╌╌ down", "session": "┈┈ BGP", "solid": "━━ path"}


def _link_mark(lid: str, marks: FabricMarks, on_link: dict[str, list[dict]]) -> dict[str, str]:
    """Graphviz edge attributes for link ``lid`` (plus ``_kind`` for the legend), {} when
    healthy: an injected fault wins over a down link, which wins over a down session."""
    faults = on_link.get(lid)
    if faults:
        text = ", ".join(f"{f.get('id', '?')} {f.get('kind', '')}".strip() for f in faults)
        notes = "; ".join(str(f.get("note") or "") for f in faults if f.get("note"))
        return {"_kind": "fault", "color": FAULT_COLOUR, "penwidth": "3.2", "style": "bold",
                "label": text, "fontcolor": FAULT_COLOUR, "fontsize": "9",
                "tooltip": notes or text}
    if lid in marks.down_links:
        return {"_kind": "down", "color": DOWN_COLOUR, "penwidth": "2.4", "style": "dashed",
                "tooltip": f"{lid}: {marks.down_links[lid]}"}
    if lid in marks.down_sessions:
        return {"_kind": "session", "color": SESSION_COLOUR, "penwidth": "2.4", "style": "dotted",
                "tooltip": f"{lid}: BGP session not Established"}
    return {}


def _node_fault_attrs(faults: list[dict] | None, xlabel_only: bool = False) -> dict[str, str]:
    """A red border and an ``f3 daemon-kill`` label for a node a fault names ({} for none)."""
    if not faults:
        return {}
    text = ", ".join(f"{f.get('id', '?')} {f.get('kind', '')}".strip() for f in faults)
    out = {"xlabel": text, "fontcolor": FAULT_COLOUR} if xlabel_only else {
        "xlabel": text, "color": FAULT_COLOUR, "penwidth": "3"}
    return out


def _legend_label(spec: LabSpec, paths: list[tuple[str, str, str]]) -> str:
    rails = sorted({n.rail for n in spec.nics}) or list(range(1, spec.rails + 1))
    cells = "".join(
        f'<TD BGCOLOR="{rail_colour(r)}" WIDTH="56"><FONT COLOR="white"><B>rail {r}</B></FONT></TD>'
        for r in rails
    )
    span = len(rails)
    title = (
        f"{spec.name}: {spec.architecture}, {spec.groups} group(s) x {spec.rails} rail(s), "
        f"{len(spec.by_role('spine'))} spine(s), {len(spec.by_role('server'))} server(s), "
        f"{spec.port_speed_gbps}G links"
    )
    rows = [
        f'<TR><TD COLSPAN="{span + 1}"><B>{html.escape(title)}</B></TD></TR>',
        f'<TR><TD ALIGN="LEFT"><B>rails</B></TD>{cells}</TR>',
    ]
    for colour, label, kind in paths:
        rows.append(
            f'<TR><TD ALIGN="LEFT"><FONT COLOR="{colour}"><B>{_MARK_SYMBOL.get(kind, "━━ path")}'
            f'</B></FONT></TD><TD COLSPAN="{span}" ALIGN="LEFT">{html.escape(label)}</TD></TR>'
        )
    return (
        '<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="3" CELLPADDING="3" COLOR="#999999">'
        + "".join(rows)
        + "</TABLE>>"
    )


def _require_dot() -> None:
    if shutil.which("dot") is None:
        raise RailabError(
            "Graphviz's `dot` is not installed: run `apt-get install graphviz` "
            "(scripts/bootstrap.sh does it)"
        )


def render_svg(spec: LabSpec, paths: Iterable[TracedPath] = (),
               marks: FabricMarks | None = None) -> str:
    """Render the diagram to SVG text (UTF-8). Raises RailabError if ``dot`` is missing."""
    _require_dot()
    svg = fabric_graph(spec, paths, marks).pipe(format="svg").decode("utf-8")
    # Drop the XML prolog and DOCTYPE so the SVG can be inlined in HTML.
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def write_diagram(spec: LabSpec, out: str | Path, paths: Iterable[TracedPath] = (),
                  marks: FabricMarks | None = None) -> Path:
    """Write the diagram to ``out``; the format follows the suffix (.svg, .png, .pdf, .dot).

    Raises ValueError for another suffix, RailabError if ``dot`` is missing.
    """
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in {"svg", "png", "pdf", "dot", "gv"}:
        raise ValueError(f"{out}: unsupported diagram format {fmt!r}; use .svg, .png, .pdf or .dot")
    graph = fabric_graph(spec, list(paths), marks)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt in {"dot", "gv"}:
        out.write_text(graph.source)
        return out
    _require_dot()
    out.write_bytes(graph.pipe(format=fmt))
    return out
