"""``railab up | down | status | exec | inspect``: run a lab on the embedded netns runtime.

``LAB`` is a lab name (for down/status/exec/inspect), a lab directory, a ``.clab.yml``, or (for
``up``) an intent (shipped name such as ``mini``, or an intent YAML) generated first into
``./labs/<name>`` or ``--out DIR``. Errors print one ``error: ...`` line (railab.cli.main).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import RailabError


def _runtime(name: str = "netns"):
    from railab.testbed.runtime import get_runtime

    return get_runtime(name)


def _runtime_of(lab: str):
    """The runtime that recorded ``lab`` (``/run/railab/<lab>/state.json``), netns by default."""
    from railab.testbed import state

    record = state.load(lab) or {}
    return _runtime(record.get("runtime", "netns"))


def _resolve_up_target(lab: str, out: Optional[Path], name: Optional[str]) -> Path:
    """A lab directory or .clab.yml as is; an intent (name or YAML) generated first.

    Refuses, before writing anything, an intent whose lab is already up or whose output
    directory holds a running lab (regenerating it would change what checks compare against).
    """
    from railab.testbed import state

    p = Path(lab)
    if p.is_dir() or (p.is_file() and p.name.endswith((".clab.yml", ".clab.yaml"))):
        if name:
            raise RailabError(
                f"--name applies to intents; {lab} is a generated lab: regenerate it under a new name "
                f"(railab generate INTENT --name {name})"
            )
        return p
    from railab.topologies.generator import generate
    from railab.topologies.intent import load_intent

    intent = load_intent(lab)
    lab_name = name or intent.name
    if state.load(lab_name) is not None:
        raise RailabError(f"lab {lab_name} is already up: railab down {lab_name} (or --name NEW for a second lab)")
    target = out if out is not None else Path("labs") / lab_name
    holder = state.running_lab_in(target)
    if holder:
        raise RailabError(f"{target} holds running lab {holder}: railab down {holder} first, or pick another --out")
    return generate(intent, target, name=name)


def _exit_code(exc: BaseException) -> int:
    """128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(getattr(exc, "signum", 2))


def _lab_name(lab: str) -> str:
    """A lab name, or the name inside a lab directory / .clab.yml (testbed.state.resolve)."""
    from railab.testbed import state

    return state.resolve(lab).name


def register(app: typer.Typer) -> None:
    """Attach ``up``, ``down``, ``status``, ``exec``, ``inspect`` to ``app``."""

    @app.command()
    def up(
        lab: str = typer.Argument(..., help="lab directory, .clab.yml, intent name or intent YAML"),
        out: Optional[Path] = typer.Option(None, "--out", "-o", help="where to generate an intent (default ./labs/<name>)"),
        timeout: Optional[float] = typer.Option(None, help="convergence budget in s (default scales with the lab)"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="show the convergence display"),
        runtime: str = typer.Option("netns", "--runtime", "-r", help="netns (embedded, default) or containerlab"),
        reconfigure: bool = typer.Option(False, "--reconfigure", help="containerlab: redeploy over a running lab"),
        name: Optional[str] = typer.Option(None, "--name", help="lab name for an intent (default: the intent's name)"),
    ) -> None:
        """Bring a lab up (network namespaces + FRR, or containerlab) and wait until it has converged."""
        rt = _runtime(runtime)
        target = _resolve_up_target(lab, out, name)
        t0 = time.monotonic()
        kwargs = {"reconfigure": True} if reconfigure and runtime == "containerlab" else {}
        from railab.checks.deploy import bring_up
        from railab.progress import ConvergeBar

        try:
            with ConvergeBar() as bar:
                rec = bring_up(rt, target, timeout=timeout, on_progress=bar if progress else None, **kwargs)
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: up has rolled back already
            typer.echo(f"error: {str(exc) or 'interrupted by SIGINT'}: everything up made was removed", err=True)
            raise typer.Exit(_exit_code(exc)) from None
        typer.echo(
            f"lab {rec['lab']} is up and converged in {time.monotonic() - t0:.1f} s "
            f"({len(rec['namespaces'])} nodes, {len(rec['links'])} links); railab down {rec['lab']} removes it"
        )

    @app.command()
    def down(
        lab: Optional[str] = typer.Argument(None, help="lab name, directory or .clab.yml"),
        all_: bool = typer.Option(False, "--all", help="remove every railab lab and orphaned railab namespace"),
    ) -> None:
        """Remove everything ``up`` made (idempotent; works after a crash)."""
        if all_ and lab:
            raise typer.BadParameter(f"give a lab or --all, not both (got {lab!r} and --all)")
        if all_:
            from railab.testbed import state

            # containerlab labs go to containerlab; the netns sweep handles the rest
            for rec_dir in sorted(state.run_root().glob("*/state.json")):
                name = rec_dir.parent.name
                if (state.load(name) or {}).get("runtime") == "containerlab":
                    _runtime("containerlab").down(name)
            gone = _runtime("netns").down_all()
            typer.echo(f"removed {len(gone)} lab(s)" + (f": {', '.join(gone)}" if gone else ""))
            return
        if not lab:
            raise RailabError("name a lab (railab down LAB) or pass --all")
        name = _lab_name(lab)
        from railab.testbed import state

        if state.load(name) is None and name not in state.ledger().values():
            typer.echo(f"lab {name} is not up: nothing to remove ({state.running_labs()})")
            return
        _runtime_of(name).down(name)
        typer.echo(f"lab {name} is down")

    @app.command()
    def status(
        lab: str = typer.Argument(..., help="lab name, directory or .clab.yml"),
        as_json: bool = typer.Option(False, "--json", help="print JSON"),
    ) -> None:
        """Nodes, FRR daemons alive, BGP sessions up/expected."""
        from railab.checks.converge import observe_sessions
        from railab.topologies.labspec import LabSpec

        name = _lab_name(lab)
        rt = _runtime_of(name)
        s = rt.status(name)
        try:
            up_, down_ = observe_sessions(LabSpec.load(rt.record(name).labdir), rt.executor(name))
            s["sessions"] = {"up": len(up_), "expected": len(up_) + len(down_), "down": sorted(down_)}
        except (FileNotFoundError, RuntimeError, TimeoutError, RailabError) as exc:
            s["sessions"] = {"error": str(exc)}
        if as_json:
            typer.echo(json.dumps(s, indent=2, sort_keys=True))
            return
        con = Console()
        t = Table(title=f"lab {s['lab']} ({s['phase']})")
        for col in ("node", "namespace", "present", "daemons"):
            t.add_column(col)
        for name, n in s["nodes"].items():
            ds = " ".join(f"{d}{'' if ok else '(dead)'}" for d, ok in n["daemons"].items()) or "-"
            t.add_row(name, n["namespace"], "yes" if n["present"] else "NO", ds)
        con.print(t)
        ses = s["sessions"]
        if "error" in ses:
            con.print(f"sessions: unavailable ({ses['error']})")
        else:
            con.print(f"BGP sessions Established: {ses['up']}/{ses['expected']}")
            for d in ses["down"][:20]:
                con.print(f"  down: {d}")

    @app.command(name="exec", context_settings={"allow_interspersed_args": False})
    def exec_(
        lab: str = typer.Argument(..., help="lab name"),
        node: str = typer.Argument(..., help="node name, e.g. g1-leaf1 or srv1"),
        cmd: List[str] = typer.Argument(..., help="command (after --); vtysh is pointed at the node's daemons"),
    ) -> None:
        """Run CMD inside NODE's namespace (e.g. ``railab exec mini g1-leaf1 -- vtysh -c 'show bgp summary'``)."""
        from railab.testbed.runtime.netns import NetnsExecutor, exec_argv, netns_path

        cmd = list(cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise RailabError("give a command after --, e.g. railab exec LAB NODE -- vtysh -c 'show bgp summary'")
        name = _lab_name(lab)
        rt = _runtime_of(name)
        if rt.name != "netns":  # containerlab: docker exec through the runtime's executor
            res = rt.executor(name).run(node, cmd, timeout=300.0)
            typer.echo(res.stdout, nl=False)
            typer.echo(res.stderr, nl=False, err=True)
            raise typer.Exit(res.rc)
        ex = NetnsExecutor(name)
        ns = rt.netns_name(name, node)
        if not netns_path(ns).exists():
            raise RailabError(f"lab {name!r} has no node {node!r} (no namespace {ns})")
        try:
            rc = subprocess.run(exec_argv(ns, ex.argv_for(node, list(cmd)))).returncode
        except FileNotFoundError:
            raise RailabError(f"{cmd[0]}: command not found") from None
        raise typer.Exit(rc)

    @app.command()
    def inspect(
        lab: str = typer.Argument(..., help="lab name, directory or .clab.yml"),
        as_json: bool = typer.Option(False, "--json", help="print the whole recorded state as JSON"),
    ) -> None:
        """The recorded state of a lab (namespaces, links, PIDs, paths, timings)."""
        name = _lab_name(lab)
        record = _runtime_of(name).inspect(name)
        if as_json:
            typer.echo(json.dumps(record, indent=2, sort_keys=True))
            return
        con = Console()
        con.print(
            f"lab {record['lab']} ({record.get('runtime', 'netns')} runtime, phase {record.get('phase')}), "
            f"lab directory {record.get('labdir')}"
        )
        t = Table()
        for col in ("node", "namespace", "FRR daemons (PID)"):
            t.add_column(col)
        routers = record.get("routers") or {}
        for node, ns in sorted(record.get("namespaces", {}).items()):
            pids = (routers.get(node) or {}).get("pids") or {}
            t.add_row(node, ns, " ".join(f"{d}({pid})" for d, pid in pids.items()) or "-")
        con.print(t)
        timings = record.get("timings") or {}
        if timings:
            con.print("timings (s): " + ", ".join(f"{k.removesuffix('_s')} {v}" for k, v in timings.items()))
        con.print(f"{len(record.get('links', []))} links; railab inspect {name} --json for everything")
