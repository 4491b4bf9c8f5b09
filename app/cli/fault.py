"""``railab fault LAB KIND ...`` / ``railab fault LAB heal [ID|--all]`` / ``railab fault LAB list``
and ``railab restart LAB NODE``: inject and heal faults on a running lab (railab.testbed.faults).

Every fault is recorded in the lab's state (``status``, ``check``, the report and the diagram
read it) until healed. Bad input (unknown kind, node, link, parameter, an element another
fault holds) is one ``error:`` line, exit 2, with nothing changed.
"""

from __future__ import annotations

import json
import time

import typer

from railab.errors import UsageError

_KINDS_HELP = (
    "link-down | link-up | link-flap | carrier-loss | cable-pull | re-plug | cross-cable | "
    "session-shut | wrong-asn | daemon-kill | node-off | grey-loss | mtu | pfc-storm | pfc-priority | "
    "link-speed, "
    "or heal / list"
)
#: verbs that heal the fault on the named element instead of injecting one
_UNDO = {"link-up": ("link-down", "link-flap"), "re-plug": ("cable-pull",)}


def _row(f) -> str:
    age = time.time() - f.injected_at
    return f"{f.id:<4} {f.kind:<13} {age:7.1f} s ago  {f.note}"


def _refuse_during_exercise(lab: str) -> None:
    """No ``railab fault`` injection or heal while an exercise runs on ``lab`` and is not
    revealed: the one lock on fault changes (:func:`railab.testbed.exercise.guard`, the same
    message for every command and console action, naming nothing hidden). ``list`` stays open."""
    from railab.testbed import exercise as store
    from railab.testbed.labname import lab_name

    store.guard(lab_name(lab), "fault")


def register(app: typer.Typer) -> None:
    """Attach ``fault`` and ``restart`` to ``app``."""

    @app.command(context_settings={"allow_interspersed_args": True})
    def fault(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        action: str = typer.Argument(..., help=_KINDS_HELP),
        targets: list[str] = typer.Argument(
            None, help="NODE_A [NODE_B] (first link between them), NODE:PORT, two SERVER:PORT for "
                       "cross-cable, a node for daemon-kill/node-off, a fault id for heal"),
        port: str | None = typer.Option(None, "--port", help="the port of NODE_A (instead of NODE_B)"),
        end: str | None = typer.Option(None, "--end", help="which end to act on: NODE_A (default) or NODE_B"),
        count: int = typer.Option(3, "--count", "-n", help="link-flap: how many down/up cycles"),
        down_s: float = typer.Option(1.0, "--down", help="link-flap: seconds down per cycle"),
        up_s: float = typer.Option(1.0, "--up", help="link-flap: seconds up between cycles"),
        percent: float | None = typer.Option(None, "--percent", help="grey-loss: % of egress packets dropped"),
        roce_only: bool = typer.Option(False, "--roce-only", help="grey-loss: drop only RoCEv2 (UDP 4791)"),
        mtu: int | None = typer.Option(None, "--mtu", help="mtu: the MTU to set on the end"),
        asn: int | None = typer.Option(None, "--asn", help="wrong-asn: the peer ASN to push (default 4199999999)"),
        priority: int | None = typer.Option(None, "--priority",
                                            help="pfc-priority: the wrong priority PFC runs on (default 4)"),
        daemon: str = typer.Option("bgpd", "--daemon", help="daemon-kill: bgpd, zebra, bfdd or staticd"),
        gbps: float | None = typer.Option(
            None, "--gbps", help="link-speed: the speed the link trained to, Gb/s of the real fabric "
                                 "(10, 25, 40, 50, 100, 200 or 400, below its planned speed in lab.json; e.g. 200 "
                                 "on a 400G link)"),
        heal_all: bool = typer.Option(False, "--all", help="heal: every fault"),
        as_json: bool = typer.Option(False, "--json", help="print the fault records as JSON"),
    ) -> None:
        """Inject a fault, heal faults, or list them: `railab fault LAB link-down g1-leaf1 spine1`,
        `railab fault LAB heal --all`, `railab fault LAB list`."""
        from railab.testbed import faults as F

        targets = list(targets or [])

        def show(records, verb: str) -> None:
            if as_json:
                typer.echo(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
                return
            if not records:
                typer.echo(f"no faults {verb.rstrip(':')}")
            for r in records:
                typer.echo(f"{verb} {_row(r)}" if verb != "injected:" else _row(r))

        if action == "list":
            if targets:
                raise UsageError("fault LAB list takes no arguments")
            show(F.list_faults(lab), "injected:")
            return
        if action == "heal":
            if heal_all == bool(targets) or len(targets) > 1:
                raise UsageError("fault LAB heal takes one fault ID (railab fault LAB list) or --all")
            _refuse_during_exercise(lab)
            show(F.heal(lab, targets[0] if targets else None), "healed")
            return
        if action in _UNDO:
            if not targets:
                raise UsageError(f"fault LAB {action} NODE_A NODE_B (or NODE:PORT)")
            _refuse_during_exercise(lab)
            from railab.testbed.labref import resolve

            spec = resolve(lab).spec()
            node, p, peer, pp = F.resolve_link(spec, targets[0], targets[1] if len(targets) > 1 else None, port)
            ends = {(node, p), (peer, pp)}
            match = [f for f in F.list_faults(lab) if f.kind in _UNDO[action]
                     and {(f.node, f.port), (f.peer_node, f.peer_port)} & ends]
            if not match:
                raise UsageError(f"no {'/'.join(_UNDO[action])} fault on {node}:{p} <-> {peer}:{pp} "
                                 f"(railab fault {lab} list)")
            healed = []
            for f in match:
                healed += F.heal(lab, f.id)
            show(healed, "healed")
            return
        if action not in F.FAULT_KINDS:
            raise UsageError(f"unknown fault action {action!r}: use {_KINDS_HELP}")
        if not targets or len(targets) > 2:
            raise UsageError(f"fault LAB {action} takes NODE_A [NODE_B] (or NODE:PORT)")
        params = F.cli_params(action, end=end, count=count, down_s=down_s, up_s=up_s, percent=percent,
                              roce_only=roce_only, mtu=mtu, asn=asn, daemon=daemon, priority=priority,
                              gbps=gbps)
        _refuse_during_exercise(lab)
        rec = F.inject(lab, action, targets[0], targets[1] if len(targets) > 1 else None, port=port, **params)
        if as_json:
            typer.echo(json.dumps(rec.model_dump(mode="json"), indent=2))
        else:
            typer.echo(f"injected {rec.id}: {rec.note} (heal: railab fault {lab} heal {rec.id})")

    @app.command()
    def restart(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        node: str = typer.Argument(..., help="the node to bring back (after node-off or daemon-kill)"),
    ) -> None:
        """Bring one node back without tearing the lab down: links up, FRR daemons started with
        their config, server routes re-added."""
        from railab.testbed import faults as F

        did = F.restart_node(lab, node)
        if not did["started"] and not did["healed"]:
            typer.echo(f"{node} needed no restart: every FRR daemon of it is running and no node-off "
                       f"or daemon-kill fault holds it (its links were set up all the same)")
            return
        parts = ([f"started {', '.join(did['started'])}"] if did["started"] else []) + (
            [f"healed {', '.join(did['healed'])}"] if did["healed"] else [])
        typer.echo(f"restarted {node}: {'; '.join(parts)}")
