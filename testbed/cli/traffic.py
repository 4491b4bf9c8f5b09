"""``railab traffic`` and ``railab traceroute``: RoCEv2 flows between GPU NICs of a running lab.

``railab traffic LAB --pattern P [--pxn] [--flows N] [--json]`` runs a named pattern (see
traffic.patterns) with hop measurement (TTL and switch port counters), prints one row per flow
and a spine/uplink spread summary, and exits 1 when any flow is lost or takes an unexpected hop
count (flows unreachable by design pass when nothing arrives). ``railab traceroute LAB SRC DST``
names the switches one flow crosses.
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from traffic.patterns import PATTERNS


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=200)


def _hops(v) -> str:
    return "unreachable" if v is None else str(v)


def register(app: typer.Typer) -> None:
    """Attach ``traffic`` and ``traceroute`` to ``app``."""

    @app.command()
    def traffic(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        pattern: str = typer.Option(..., "--pattern", "-p", help=f"one of {', '.join(PATTERNS)}"),
        pxn: bool = typer.Option(False, "--pxn", help="NCCL PXN: cross NVLink first, stay on the rail"),
        flows: Optional[int] = typer.Option(None, "--flows", "-n", min=1,
                                            help="number of flows (repeats pairs with new QPs)"),
        size: int = typer.Option(4096, help="bytes per message"),
        messages: int = typer.Option(4, help="messages per flow"),
        mtu: int = typer.Option(1024, help="RoCE path MTU (payload bytes per packet)"),
        op: str = typer.Option("write", help="write | send | mixed"),
        measure: bool = typer.Option(True, "--measure/--no-measure",
                                     help="one flow at a time with switch counters (paths)"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    ) -> None:
        """Send a RoCEv2 traffic pattern and check hops, loss and paths."""
        from traffic.engine import Engine, resolve_lab, spread
        from traffic.patterns import flows_for

        if pattern not in PATTERNS:
            raise typer.BadParameter(f"use one of {', '.join(PATTERNS)}", param_hint="--pattern")
        if op not in ("write", "send", "mixed"):
            raise typer.BadParameter("use write, send or mixed", param_hint="--op")
        spec, netns_of = resolve_lab(lab)
        fl = flows_for(spec, pattern, pxn=pxn, n=flows, size=size, messages=messages, mtu=mtu, op=op)
        with Engine(spec, netns_of) as eng:
            results = eng.run(fl, measure=measure)
        sp = spread(spec, results)
        bad = [r for r in results if not r.ok]
        if as_json:
            print(json.dumps({
                "lab": spec.name, "pattern": pattern, "pxn": pxn,
                "flows": [r.to_dict() for r in results],
                "spread": {"per_spine": sp.per_spine, "per_link": sp.per_link,
                           "spine_imbalance": round(sp.imbalance(sp.per_spine), 3),
                           "link_imbalance": round(sp.imbalance(sp.per_link), 3)},
                "failed": len(bad),
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
            if sp.per_spine:
                con.print("spines: " + ", ".join(f"{k}={v}" for k, v in sp.per_spine.items())
                          + f"  imbalance(max/mean)={sp.imbalance(sp.per_spine):.2f}")
                con.print("uplinks: " + ", ".join(f"{k}={v}" for k, v in sp.per_link.items())
                          + f"  imbalance={sp.imbalance(sp.per_link):.2f}")
            con.print(f"{len(results) - len(bad)}/{len(results)} flows as expected")
        if bad:
            raise typer.Exit(1)

    @app.command()
    def traceroute(
        lab: str = typer.Argument(..., help="running lab name or lab directory"),
        src: str = typer.Argument(..., help="source GPU, e.g. srv1:gpu0 (or srv1:nic1)"),
        dst: str = typer.Argument(..., help="destination GPU, e.g. srv3:gpu0"),
        pxn: bool = typer.Option(False, "--pxn"),
        qp: int = typer.Option(0, help="flow index (changes the UDP source port, so the ECMP path)"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """RoCE traceroute: TTL-limited copies of the flow's packets, leaf -> spine -> leaf."""
        from traffic.engine import Engine, resolve_lab
        from traffic.patterns import Flow, parse_endpoint, route
        from traffic.traceroute import format_path, trace

        spec, netns_of = resolve_lab(lab)
        flow = route(spec, Flow(parse_endpoint(spec, src), parse_endpoint(spec, dst), qp=qp, pxn=pxn))
        with Engine(spec, netns_of) as eng:
            hops = trace(eng, flow)
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
            raise typer.Exit(1)
