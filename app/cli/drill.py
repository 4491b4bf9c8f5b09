"""``railab drill LAB KIND NODE_A [NODE_B] ...``: a fault drill with measured loss and reconvergence.

Continuous RoCEv2 probe streams over flows that cross the faulty element (traced through the
switches' kernel FIBs with each flow's UDP source port) and over control flows that must not be
affected; the fault is injected and healed through ``railab.testbed.faults`` (the same kinds and
arguments as ``railab fault``); prints lost packets, longest gap, time to reroute and time to
green (bgp, routes and FIB, polled every <= 200 ms), per flow the clabgen fields. ``--json`` for
scripts. Exit 1 when a control flow lost anything or the lab is not green again in time.
Orchestration: :mod:`railab.checks.drill`.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED

_KINDS = ("link-down | link-flap | carrier-loss | cable-pull | cross-cable | session-shut | "
          "wrong-asn | daemon-kill | node-off | grey-loss | mtu (as railab fault)")


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=200)


def _num(v, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def render(res: dict, con: Console) -> None:
    """The drill result as a rich table of flows and a summary."""
    f = res["fault"]
    bfd = res["bfd"]
    t = Table(title=f"{res['lab']}: {f['kind']} {res['fault']['element']} ({f['note']}), "
                    f"BFD {'on' if bfd['enabled'] else 'off'}{' (pushed live)' if bfd['pushed_live'] else ''}, "
                    f"{res['rate_pps']:g} probes/s per flow")
    cols = ("role", "flow", "path before", "path during fault", "tx", "lost", "loss %",
            "longest gap ms", "reroute s", "reord", "dup", "lat avg/max us")
    for c in cols:
        t.add_column(c, justify="right" if c in ("tx", "lost", "loss %", "longest gap ms",
                                                   "reroute s", "reord", "dup") else "left")
    for d in res["flows"]:
        lat = d["latency_us"]
        bad = d["role"] == "control" and d["lost"]
        style = "red" if bad else ("yellow" if d["lost"] else "green")
        t.add_row(d["role"], d["name"], " > ".join(p.split(":")[0] for p in d["path"]),
                  " > ".join(p.split(":")[0] for p in d.get("path_during_fault", [])) or "-",
                  str(d["tx"]), f"[{style}]{d['lost']}[/{style}]", f"{d['loss_pct']:g}",
                  f"{d['longest_gap_ms']:g}",
                  "at heal" if d.get("recovered_only_at_heal") else _num(d["reroute_s"]),
                  str(d["reordered"]), str(d["duplicate"]),
                  "-" if lat is None else f"{lat['avg']:g}/{lat['max']:g}")
    con.print(t)
    g = res["green"]
    con.print(f"lost packets {res['lost_packets']} (control flows {res['control_lost_packets']}), "
              f"longest gap {res['longest_gap_ms']:g} ms, traffic rerouted after "
              f"{_num(res['time_to_reroute_s'])} s (FIB paths {_num(res['fib_reroute_s'])} s), "
              f"green {_num(res['time_to_green_s'])} s after the heal "
              f"(polled every {_num(g['poll_period_ms']['mean'])} ms)", highlight=False)
    if not bfd["enabled"] or f["kind"] == "link-down":
        con.print(f"[dim]{bfd['note']}[/dim]", highlight=False)
    ld = res["load"]
    con.print(f"[dim]host load {ld['before'][0]:g} before, {ld['after'][0]:g} after "
              f"({ld['cpus']} CPUs)[/dim]", highlight=False)
    if not g["confirmed"]:
        con.print(f"[red]not green after the heal:[/red] {'; '.join(g['pending'][:5])}", highlight=False)


def register(app: typer.Typer) -> None:
    """Attach ``drill`` to ``app``."""

    @app.command(context_settings={"allow_interspersed_args": True})
    def drill(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        kind: str = typer.Argument(..., help=_KINDS),
        targets: list[str] = typer.Argument(
            ..., help="NODE_A [NODE_B] (first link between them), NODE:PORT, two SERVER:PORT for "
                      "cross-cable, a node for daemon-kill/node-off"),
        port: str | None = typer.Option(None, "--port", help="the port of NODE_A (instead of NODE_B)"),
        end: str | None = typer.Option(None, "--end", help="which end the fault acts on: NODE_A (default) or NODE_B"),
        bfd: bool | None = typer.Option(None, "--bfd/--no-bfd",
                                        help="BFD on/off for the drill, pushed live (default: as lab.json)"),
        rate: float = typer.Option(1000.0, "--rate", help="probe packets/s per flow (1000 = 1 ms resolution)"),
        duration: float | None = typer.Option(
            None, "--duration", help="seconds the fault is held before the heal (default: detection time + 3 s, >= 4)"),
        flows: int = typer.Option(4, "--flows", "-n", help="flows that cross the faulty element"),
        control: int = typer.Option(4, "--control", help="control flows that must not be affected"),
        green_timeout: float = typer.Option(60.0, "--green-timeout", help="seconds to wait for green after the heal"),
        count: int = typer.Option(3, "--count", help="link-flap: how many down/up cycles"),
        down_s: float = typer.Option(1.0, "--down", help="link-flap: seconds down per cycle"),
        up_s: float = typer.Option(1.0, "--up", help="link-flap: seconds up between cycles"),
        percent: float | None = typer.Option(None, "--percent", help="grey-loss: % of egress packets dropped"),
        roce_only: bool = typer.Option(False, "--roce-only", help="grey-loss: drop only RoCEv2 (UDP 4791)"),
        mtu: int | None = typer.Option(None, "--mtu", help="mtu: the MTU to set on the end"),
        asn: int | None = typer.Option(None, "--asn", help="wrong-asn: the peer ASN to push"),
        daemon: str = typer.Option("bgpd", "--daemon", help="daemon-kill: bgpd, zebra, bfdd or staticd"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    ) -> None:
        """Fault drill: probe streams across a fault and its heal; lost packets, longest gap,
        time to reroute and time to green. `railab drill LAB link-down g1-leaf1 spine1 --json`."""
        from railab.checks.drill import run_drill
        from railab.checks.lab import LiveLab
        from railab.errors import UsageError

        if len(targets) > 2:
            raise UsageError(f"drill LAB {kind} takes NODE_A [NODE_B] (or NODE:PORT), got {' '.join(targets)}")
        from railab.testbed import exercise as ex
        from railab.testbed import faults as F
        from railab.testbed.labname import lab_name

        ex.guard(lab_name(lab), "drill")  # refused before anything runs while an exercise runs there
        params = F.cli_params(kind, end=end, count=count, down_s=down_s, up_s=up_s, percent=percent,
                              roce_only=roce_only, mtu=mtu, asn=asn, daemon=daemon)
        live = LiveLab.attach(lab)
        con = _console()
        say = None if as_json else (lambda text: con.print(f"[dim]{text}[/dim]", highlight=False))
        res = run_drill(live, kind, targets[0], targets[1] if len(targets) > 1 else None, port=port,
                        params=params, bfd=bfd, rate=rate, duration=duration, flows=flows,
                        control=control, green_timeout=green_timeout, on_event=say)
        if as_json:
            typer.echo(json.dumps(res, indent=2, sort_keys=True))
        else:
            render(res, con)
        if res["control_lost_packets"] or not res["green"]["confirmed"]:
            raise typer.Exit(EXIT_FAILED)
