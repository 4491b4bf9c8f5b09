"""``railab traffic`` and ``railab traceroute``: RoCEv2 flows between GPU NICs of a running lab.

``railab traffic LAB --pattern P [--pxn] [--flows N] [--json]`` runs a named pattern (see
traffic.patterns) with hop measurement (TTL and switch port counters), prints one row per flow
and a spine/uplink spread summary, and exits 1 when any flow is lost or takes an unexpected hop
count (flows unreachable by design pass when nothing arrives). ``railab traceroute LAB SRC DST``
names the switches one flow crosses.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from railab.traffic.patterns import PATTERNS


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=200)


def _hops(v) -> str:
    return "unreachable" if v is None else str(v)


def _usage(msg: str) -> None:
    """One ``error: ...`` line on stderr, exit 2 (usage error)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(EXIT_USAGE)


def check_options(*, flows: int | None, size: int, messages: int, mtu: int) -> None:
    """Validate ``railab traffic`` numbers one by one; raise typer.Exit(EXIT_USAGE) after printing
    ``error: --OPTION ...`` for the first bad one. ``--mtu`` is the RoCE path MTU (IBTA: 256,
    512, 1024, 2048 or 4096 payload bytes; any value in between is accepted here)."""
    if flows is not None and flows < 1:
        _usage(f"--flows must be at least 1 (got {flows})")
    if size < 1:
        _usage(f"--size must be at least 1 byte per message (got {size})")
    if messages < 1:
        _usage(f"--messages must be at least 1 per flow (got {messages})")
    if not 256 <= mtu <= 4096:
        _usage(f"--mtu must be 256-4096 (RoCE path MTU, payload bytes per packet; got {mtu})")


def _interrupted() -> None:
    typer.echo("error: interrupted", err=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _link_up(eng):
    """``link_up(node, ifname) -> bool | None`` for spread_warnings: the one link-up rule
    (:func:`railab.checks.base.link_status`, as ``Observer.link_up`` applies it) over the engine's
    own raw netlink dump of each switch asked about (read once per switch; a pyroute2 dump of a
    129-port leaf costs ~0.1 s, eight of them most of `railab traffic -n 8` on a full fabric)."""
    from railab.checks.base import link_status
    from railab.errors import RailabError

    seen: dict[str, dict[str, tuple[int, str]]] = {}

    def link_up(node: str, ifname: str) -> bool | None:
        if node not in seen:
            try:
                seen[node] = eng.link_flags(node)
            except (RailabError, OSError):
                seen[node] = {}
        st = seen[node].get(ifname)
        return None if st is None else link_status(*st) == "up"

    return link_up


def register(app: typer.Typer) -> None:
    """Attach ``traffic`` and ``traceroute`` to ``app``."""

    @app.command()
    def traffic(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        pattern: str = typer.Option(..., "--pattern", "-p", help=f"one of {', '.join(PATTERNS)}"),
        pxn: bool = typer.Option(False, "--pxn", help="NCCL PXN: cross NVLink first, stay on the rail"),
        flows: int | None = typer.Option(None, "--flows", "-n",
                                            help="number of flows (repeats pairs with new QPs)"),
        size: int = typer.Option(4096, help="bytes per message (>= 1)"),
        messages: int = typer.Option(4, help="messages per flow (>= 1)"),
        mtu: int = typer.Option(1024, help="RoCE path MTU, payload bytes per packet (256-4096)"),
        op: str = typer.Option("write", help="write | send | mixed"),
        measure: bool = typer.Option(True, "--measure/--no-measure",
                                     help="one flow at a time with switch counters (paths)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """Send a RoCEv2 traffic pattern and check hops, loss and paths."""
        from railab.testbed.state import resolve
        from railab.traffic.engine import Engine, sigint_event, spread, spread_warnings
        from railab.traffic.patterns import flows_for, sample_text

        if pattern not in PATTERNS:
            _usage(f"--pattern must be one of {', '.join(PATTERNS)} (got {pattern!r})")
        if op not in ("write", "send", "mixed"):
            _usage(f"--op must be write, send or mixed (got {op!r})")
        check_options(flows=flows, size=size, messages=messages, mtu=mtu)
        try:
            ref = resolve(lab)
            spec, netns_of = ref.spec(), ref.netns_of
            fl = flows_for(spec, pattern, pxn=pxn, n=flows, size=size, messages=messages,
                           mtu=mtu, op=op)
            with sigint_event() as stop:
                with Engine(spec, netns_of, stop=stop) as eng:  # closes every socket, Ctrl-C too
                    results = eng.run(fl, measure=measure)
                    warnings = spread_warnings(spec, results, _link_up(eng))
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            _interrupted()
        sp = spread(spec, results)
        bad = [r for r in results if not r.ok]
        if as_json:
            print(json.dumps({
                "lab": spec.name, "pattern": pattern, "pxn": pxn,
                "flows": [r.to_dict() for r in results],
                "spread": {"per_spine": sp.per_spine, "per_link": sp.per_link,
                           "spine_imbalance": round(sp.imbalance(sp.per_spine), 3),
                           "link_imbalance": round(sp.imbalance(sp.per_link), 3)},
                "failed": len(bad), "warnings": warnings, "sampled": sample_text(spec, fl),
            }, indent=2, sort_keys=True))
        else:
            con = _console()
            t = Table(title=f"{spec.name}: {pattern}{' (PXN)' if pxn else ''}, {len(results)} flows")
            for col in ("flow", "NICs", "delivered", "lost", "hops exp", "hops TTL",
                        "hops ctr", "path", "verdict"):
                t.add_column(col, justify="right" if col in ("delivered", "lost") else "left")
            for r in results:
                f = r.flow
                nics = f"nic{f.src_nic}->nic{f.dst_nic}" + (" +NVLink" if f.nvlink else "")
                path = ">".join(p.split(":")[0] for p in r.path) or (
                    "NVLink/local" if f.path_class == "intra-server" else "-")
                if r.unreachable_at:
                    path += f" (unreachable at {r.unreachable_at})"
                style = "green" if r.ok else "red"
                t.add_row(f.name, nics, f"{r.delivered}/{r.sent}", str(r.lost),
                          _hops(f.expected_hops), _hops(r.hops_ttl),
                          "-" if r.hops_counters is None else str(r.hops_counters), path,
                          f"[{style}]{r.verdict}[/{style}]")
            con.print(t)
            con.print(sample_text(spec, fl), highlight=False)
            if sp.per_spine:
                con.print("spines: " + ", ".join(f"{k}={v}" for k, v in sp.per_spine.items())
                          + "  " + sp.spread_text(sp.per_spine, "spines"), highlight=False)
                con.print("uplinks: " + ", ".join(f"{k}={v}" for k, v in sp.per_link.items())
                          + "  " + sp.spread_text(sp.per_link, "uplinks", "imbalance"),
                          highlight=False)
            for w in warnings:  # traffic rerouted around a fault: say so, exit code unchanged
                con.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
            con.print(f"{len(results) - len(bad)}/{len(results)} flows as expected")
        if bad:
            raise typer.Exit(EXIT_FAILED)

    @app.command()
    def traceroute(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        src: str = typer.Argument(..., help="source GPU, e.g. srv1:gpu0 (or srv1:nic1)"),
        dst: str = typer.Argument(..., help="destination GPU, e.g. srv3:gpu0"),
        pxn: bool = typer.Option(False, "--pxn",
                                 help="NCCL PXN: cross NVLink to the destination's rail first"),
        qp: int = typer.Option(0, help="flow index (changes the UDP source port, so the ECMP path)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output (hops as JSON)"),
    ) -> None:
        """RoCE traceroute: TTL-limited copies of the flow's packets, leaf -> spine -> leaf."""
        from railab.testbed.state import resolve
        from railab.traffic.engine import Engine, sigint_event
        from railab.traffic.patterns import Flow, parse_endpoint, route
        from railab.traffic.traceroute import format_path, trace

        try:
            ref = resolve(lab)
            spec, netns_of = ref.spec(), ref.netns_of
            flow = route(spec, Flow(parse_endpoint(spec, src), parse_endpoint(spec, dst), qp=qp,
                                    pxn=pxn))
            with sigint_event() as stop:
                with Engine(spec, netns_of, stop=stop) as eng:
                    hops = trace(eng, flow)
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            _interrupted()
        if as_json:
            print(json.dumps({"flow": flow.name, "src_nic": flow.src_nic, "dst_nic": flow.dst_nic,
                              "nvlink": flow.nvlink, "hops": [h.__dict__ for h in hops]}, indent=2))
        else:
            con = _console()
            t = Table(title=f"{flow.name} (nic{flow.src_nic} -> nic{flow.dst_nic}"
                      f"{', NVLink first' if flow.nvlink else ''})")
            for col in ("ttl", "address", "node", "rtt ms", "reply"):
                t.add_column(col)
            for h in hops:
                t.add_row(str(h.ttl), h.address or "*", h.node or "?",
                          "-" if h.rtt_ms is None else f"{h.rtt_ms:.3f}", h.kind)
            con.print(t)
            con.print(format_path(hops))
        if not hops or hops[-1].kind != "destination":
            raise typer.Exit(EXIT_FAILED)
