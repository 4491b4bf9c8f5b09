"""``railab up | down | list | status | exec | inspect``: run a lab on the embedded netns runtime.

``LAB`` is a lab name (for down/status/exec/inspect), a lab directory, a ``.clab.yml``, or (for
``up``) an intent (shipped name such as ``mini``, or an intent YAML) generated first into
``./labs/<name>`` or ``--out DIR``. Errors print one ``error: ...`` line (railab.cli.main);
exit codes are railab.errors': a name clash or a bad intent is a usage error (2).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer

from railab.errors import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    LabGoneError,
    RailabError,
    UsageError,
    report_interrupted,
)
from railab.testbed import state
from railab.topologies.naming import container_name
from railab.topologies.nodekinds import FRR_DAEMONS


def _runtime(name: str = "netns"):
    """The runtime called ``name`` (imported lazily: `railab -h` stays fast)."""
    from railab.testbed.runtime import get_runtime

    return get_runtime(name)


def _deployer(name: str = "netns"):
    """The runtime called ``name`` that deploys (``up``; imported lazily: its deploy phases load
    the lab model, which `railab down` and `railab status` do not need)."""
    from railab.testbed.runtime.deploy import get_deployer

    return get_deployer(name)


def _runtime_of(lab: str):
    """The runtime that recorded ``lab`` (``/run/railab/<lab>/state.json``), netns by default."""
    record = state.load(lab) or {}
    return _runtime(record.get("runtime", "netns"))


def lab_rows() -> list[dict]:
    """One row per lab recorded on this host (``/run/railab/*/state.json``), sorted by name.

    Each row: ``name``, ``runtime`` (netns | containerlab), ``phase`` (e.g. running, deploying),
    ``nodes`` (count of recorded namespaces or containers), ``user`` (who brought it up; None for
    records older than the ``user`` field) and ``labdir`` (the generated lab directory, or None).
    A lab whose state.json cannot be read is listed with phase ``unreadable`` (runtime, user and
    directory unknown: None), never hidden.
    """
    rows = []
    for name in state.labs():
        record = state.load(name)
        if record is None and state.unreadable(name):
            rows.append({"name": name, "runtime": None, "phase": "unreadable", "nodes": 0, "user": None,
                         "labdir": None})
            continue
        if record is None:  # a run directory without a state file: not a lab (yet)
            continue
        nodes = record.get("namespaces") or record.get("containers") or {}
        rows.append({
            "name": record.get("lab", name), "runtime": record.get("runtime", "netns"),
            "phase": record.get("phase"), "nodes": len(nodes), "user": record.get("user"),
            "labdir": record.get("labdir"),
        })
    return rows


def _can_ask() -> bool:
    """Whether a question can be asked: stdin is a terminal (CI and pipes have none)."""
    return sys.stdin.isatty()


def _interactive_shell() -> list[str]:
    """``$SHELL`` if it is set and exists, else ``/bin/bash``, else ``/bin/sh`` (for ``railab exec``)."""
    for sh in (os.environ.get("SHELL"), "/bin/bash", "/bin/sh"):
        if sh and shutil.which(sh):
            return [sh]
    return ["/bin/sh"]


#: railab.testbed.pfc.STORM_LINKS_FILE: a lab's PFC storms that a link reset ends (tested equal)
_STORM_LINKS = "pfc-storm-links.json"


def _settle_storms(lab: str) -> None:
    """After a ``railab exec``: end the lab's PFC storms whose link the command reset
    (railab.testbed.pfc.settle_storms: a NIC or port taken down and up stops sending PAUSE).
    One stat when the lab has no storm."""
    if (state.lab_dir(lab) / _STORM_LINKS).exists():
        from railab.testbed.pfc import settle_storms

        settle_storms(state.lab_dir(lab))


def _exec_env(lab: str, node: str) -> dict[str, str]:
    """The environment of a command ``railab exec`` runs in ``node``: the caller's, with
    ``RAILAB_LAB`` and ``RAILAB_NODE`` set and railab's node tools first on ``PATH`` (``dcb``:
    the emulated ports' PFC configuration on a lab with ``lab.capacity``, railab.testbed.dcb)."""
    from railab.testbed.nodetools import tool_dir

    env = dict(os.environ, RAILAB_LAB=lab, RAILAB_NODE=node)
    try:
        env["PATH"] = f"{tool_dir()}{os.pathsep}{env.get('PATH', os.defpath)}"
    except OSError:
        pass  # the tools could not be written: the system's
    return env


def _generated_lab(lab: str, name: str | None) -> Path | None:
    """``lab`` as a Path when it is a lab directory or a .clab.yml, None when it is an intent.

    Raises UsageError (exit 2) for ``--name`` on a generated lab (the name is in its lab.json).
    """
    p = Path(lab)
    if p.is_dir() or (p.is_file() and p.name.endswith((".clab.yml", ".clab.yaml"))):
        if name:
            raise UsageError(
                f"--name applies to intents; {lab} is a generated lab: regenerate it under a new name "
                f"(railab generate INTENT --name {name})"
            )
        return p
    return None


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (``labs/mini``), else
    as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _intent_target(lab_name: str, out: Path | None) -> Path:
    """Where ``up`` generates the intent of lab ``lab_name``: ``out`` or ``./labs/<lab_name>``.

    Refuses, before anything is written, a lab that is already up or an output directory that
    holds a running lab (regenerating it would change what checks compare against): UsageError
    (exit 2), as ``railab generate`` does.
    """
    if state.load(lab_name) is not None:
        raise UsageError(state.already_up(lab_name))
    target = out if out is not None else Path("labs") / lab_name
    holder = state.running_lab_in(target)
    if holder:
        raise UsageError(f"{target} holds running lab {holder}: railab down {holder} first, or pick another --out")
    return target


def _exit_code(exc: BaseException) -> int:
    """128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _interrupt_name(exc: BaseException) -> str:
    """``interrupted by SIGINT`` (or the signal ``exc`` names)."""
    return f"interrupted by {signal.Signals(_exit_code(exc) - 128).name}"


def _lab_name(lab: str) -> str:
    """A lab name, or the name inside a lab directory / .clab.yml (railab.testbed.labname: no lab
    model; imported here, as `railab list` needs none of it)."""
    from railab.testbed.labname import lab_name

    return lab_name(lab)


#: How the recorded ``timings`` nest: phase -> its sub-phases (netns runtime; containerlab
#: records ``deploy_s``). ``frr`` holds one ``frr_<daemons>_s`` per daemon wave (``frr_zebra_s``,
#: then e.g. ``frr_bgpd/staticd/bfdd_s``), ``frr_ra_gate_s`` before them and ``frr_ra_release_s``
#: after them (the RA gate closed, then opened tier by tier with the solicitations:
#: railab.testbed.runtime.netns ``RA_GATE_TABLE``), ``frr_config_s`` (the ``vtysh -f`` push of nodes
#: whose config was not split) and ``frr_ra_solicit_s`` (labs recorded before the refused-line
#: check moved into the convergence wait also have ``frr_config_check_s``). The top level sums
#: to the time from ``up`` to converged. ``frr_ra_solicit_beside_s`` (the solicitations retried
#: by a process beside the second daemon wave) is shown under ``frr`` without a share: it
#: overlaps the wave, so it is not part of their sum.
_PHASES: dict[str, tuple[str, ...]] = {
    # capacity_s (mini-lossless: queues and ECN tables) is timed inside build
    "build_s": ("namespaces_s", "links_s", "servers_s", "capacity_s", "frr_s"),
}
_TOP = ("preflight_s", "build_s", "deploy_s", "converge_s")
#: Sub-phases that ran beside their siblings (shown, never summed; see above).
_BESIDE = ("frr_ra_solicit_beside_s",)


def _kids(key: str, timings: dict[str, float]) -> list[str]:
    if key == "frr_s":  # the daemon waves in start order (state.json sorts keys), then the push
        # the split configs' check, the push, the solicitation
        before = ("frr_ra_gate_s",)
        after = ("frr_ra_release_s", "frr_config_check_s", "frr_config_s", "frr_ra_solicit_s",
                 *_BESIDE)
        waves = [k for k in timings if k.startswith("frr_") and k.endswith("_s")
                 and k != "frr_s" and k not in after and k not in before]
        # a wave is named by its daemons ("frr_staticd/bgpd/bfdd_s"): order by the first
        order = {d: i for i, d in enumerate(FRR_DAEMONS)}
        waves.sort(key=lambda k: (order.get(k[4:-2].split("/")[0], len(order)), k))
        return [k for k in before if k in timings] + waves + [k for k in after if k in timings]
    return [k for k in _PHASES.get(key, ()) if k in timings]


def phase_rows(timings: dict[str, float]) -> list[tuple[int, str, float, float | None]]:
    """The phase breakdown of a lab's recorded ``timings`` (step -> seconds), as rows
    ``(depth, phase, seconds, percent of the total or None)`` in the order the phases run.

    Top-level phases (``preflight``, ``build``/``deploy``, ``converge``, then any unknown key)
    sum to the total, which ends the list at depth 0; sub-phases follow their parent at depth
    + 1, with an ``other`` row for the parent's time its sub-phases do not account for (> 5 ms).
    Empty ``timings`` give no rows.
    """
    nested = {c for key in timings for c in _kids(key, timings)}
    top = [k for k in _TOP if k in timings]
    top += [k for k in timings if k not in top and k not in nested]
    total = sum(timings[k] for k in top)
    rows: list[tuple[int, str, float, float | None]] = []

    def add(key: str, depth: int) -> None:
        sec = float(timings[key])
        share = None if key in _BESIDE or not total else 100 * sec / total
        rows.append((depth, key.removesuffix("_s"), sec, share))
        kids = _kids(key, timings)
        for k in kids:
            add(k, depth + 1)
        rest = sec - sum(float(timings[k]) for k in kids if k not in _BESIDE)
        if kids and rest > 0.005:
            rows.append((depth + 1, "other", round(rest, 3), 100 * rest / total if total else None))

    for key in top:
        add(key, 0)
    if rows:
        rows.append((0, "total", round(total, 3), 100.0 if total else None))
    return rows


def register(app: typer.Typer) -> None:
    """Attach ``up``, ``down``, ``list``, ``status``, ``exec``, ``inspect`` to ``app``."""

    @app.command()
    def up(
        lab: str = typer.Argument(..., help="lab directory, .clab.yml, intent name or intent YAML"),
        out: Path | None = typer.Option(
            None, "--out", "-o", help="where to generate an intent (default ./labs/<name>)"),
        timeout: float | None = typer.Option(None, help="convergence budget in s (default scales with the lab)"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="show the convergence display"),
        runtime: str = typer.Option("netns", "--runtime", "-r", help="netns (embedded, default) or containerlab"),
        reconfigure: bool = typer.Option(False, "--reconfigure", help="containerlab: redeploy over a running lab"),
        name: str | None = typer.Option(None, "--name", help="lab name for an intent (default: the intent's name)"),
        keep_on_failure: bool = typer.Option(
            False, "--keep-on-failure",
            help="keep a lab that does not converge (or differs from lab.json) for debugging "
                 "instead of removing it"),
        dry_run: bool = typer.Option(False, "--dry-run", help="containerlab: print the commands up would run "
                                     "(deploy, sonic-vs post-deploy steps) and exit"),
        host: str | None = typer.Option(
            None, "--host", metavar="HOST",
            help="containerlab: deploy only HOST's part of a partitioned lab "
                 "(DIR/HOST/<lab>.clab.yml from generate --hosts; docs/scale-out.md)"),
        stitch: bool = typer.Option(
            False, "--stitch",
            help="netns: deploy a partitioned lab (generate --hosts) on this machine, every host "
                 "a namespace, the cut links kernel VXLAN over their underlay (docs/scale-out.md)"),
    ) -> None:
        """Bring a lab up (network namespaces + FRR, or containerlab) and wait until it has converged.

        A lab that does not converge is removed (the error names the likely cause), unless
        --keep-on-failure; so is one that converged but runs another ASN than lab.json.
        """
        if dry_run and runtime != "containerlab":
            typer.echo("error: --dry-run shows the containerlab runtime's commands: add --runtime containerlab",
                       err=True)
            raise typer.Exit(EXIT_USAGE)
        if host is not None and runtime != "containerlab":
            typer.echo("error: --host deploys one host's part with containerlab: add --runtime containerlab "
                       "(on one machine, --stitch deploys every host's part with the netns runtime)", err=True)
            raise typer.Exit(EXIT_USAGE)
        if stitch and runtime != "netns":
            typer.echo("error: --stitch is the netns runtime's one-machine proof; with containerlab deploy "
                       "each host's part with --host HOST on that host", err=True)
            raise typer.Exit(EXIT_USAGE)
        started, generated, target = False, False, None
        try:  # before bring_up: nothing is made yet (it rolls back its own part)
            rt = _deployer(runtime)
            target = _generated_lab(lab, name)
            if target is None and (stitch or host is not None):  # nothing generated for a refusal
                typer.echo(f"error: {'--stitch' if stitch else '--host'} deploys a partitioned lab directory, "
                           f"and {lab} is an intent: railab generate {lab} --hosts N -o DIR first, then "
                           f"railab up DIR {'--stitch' if stitch else '--runtime containerlab --host HOST'}",
                           err=True)
                raise typer.Exit(EXIT_USAGE)
            generated = target is None
            if target is None:  # an intent: generate it first (lazy: jinja2 and the model, ~50 ms)
                from railab.topologies.generator import generate
                from railab.topologies.intent import load_intent

                intent = load_intent(lab)  # IntentError: a usage error (exit 2)
                # containerlab-schema validations that passed are remembered with FRR's (0.7 s at
                # 1024 GPUs for the same intent's same file, every up)
                target = generate(intent, _intent_target(name or intent.name, out), name=name,
                                  schema_cache=state.cache_dir() / "clab-schema-ok")
            if dry_run:
                for line in rt.plan(Path(target), reconfigure=reconfigure, **({"host": host} if host else {})):
                    typer.echo(line)
                return
            if host is not None:  # one host's part: the others deploy theirs; no local view of the whole lab
                started = True  # the runtime rolls its own part back on an interrupt
                rec = rt.up(Path(target), host=host, **({"reconfigure": True} if reconfigure else {}))
                typer.echo(f"lab {rec['lab']}: host {host}'s part deployed ({len(rec['namespaces'])} nodes); it "
                           f"converges once every host has deployed its part (docs/scale-out.md); "
                           f"railab down {rec['lab']} removes this host's part")
                return
            t0 = time.monotonic()
            kwargs: dict = {"reconfigure": True} if reconfigure and runtime == "containerlab" else {}
            if stitch:
                kwargs["stitch"] = True
            from contextlib import nullcontext

            from railab.checks.deploy import bring_up

            if progress:
                from railab.progress import ConvergeBar  # rich.progress, ~35 ms: only when drawn
            from railab.testbed.signals import settle, signals_ignored, signals_raise

            rec = None
            try:
                with signals_raise():  # until the line that says it is up: an interrupt rolls back
                    with ConvergeBar() if progress else nullcontext() as bar:
                        rec = bring_up(rt, target, timeout=timeout, on_progress=bar,
                                       keep_on_failure=keep_on_failure, **kwargs)
                    if state.taken_down(rec):  # by another command, since it converged
                        with signals_ignored():
                            rt.down(rec['lab'])
                        raise LabGoneError(rec['lab'], "up", ": up stopped and removed what was left")
                    typer.echo(
                        f"lab {rec['lab']} is up and converged in {time.monotonic() - t0:.1f} s "
                        f"({len(rec['namespaces'])} nodes, {len(rec['links'])} links"
                        + (f" + {len(rec['stitch']['tunnels']) // 2} cut links as VXLAN over "
                           f"{len(rec['stitch']['hosts'])} namespace hosts" if "stitch" in rec else "")
                        + f"); railab down {rec['lab']} removes it"
                    )
                    settle()  # it is up, and said so: a signal from here on no longer undoes it
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: up has rolled back already
                made = rec['lab'] if rec is not None else getattr(rt, "made", None)
                if made is not None:  # converged, but interrupted before it said so: roll back here
                    with signals_ignored():
                        rt.down(made)
                where = _shown(Path(target))
                kept = (f" (the generated files stay in {where}, as after down: railab up {where} "
                        f"starts from them)" if generated else "")
                report_interrupted(f"error: {_interrupt_name(exc)}: everything up "
                                   f"started was removed{kept}")
                raise typer.Exit(_exit_code(exc)) from None
            repairs = rec.get("ipv6_repairs") or []
            if repairs:  # the kernel left a port without its link-local state: say so (docs/runtime.md)
                typer.echo(f"note: IPv6 restarted on {len(repairs)} port(s) found without their link-local state "
                           f"(usually the kernel's: see dmesg for 'percpu: allocation failed'; nothing to do, the "
                           f"lab converged): " + "; ".join(repairs[:5]) + (" ..." if len(repairs) > 5 else ""))
        except KeyboardInterrupt as exc:
            kept = (f" (the generated files stay in {_shown(Path(target))}: railab up {_shown(Path(target))} "
                    f"starts from them)" if generated and target is not None else "")
            report_interrupted(f"error: {_interrupt_name(exc)}: " + (
                "everything up started was removed" if started else "up had not started anything yet") + kept)
            raise typer.Exit(_exit_code(exc)) from None

    @app.command()
    def down(
        lab: str | None = typer.Argument(None, help="lab name, directory or .clab.yml"),
        all_: bool = typer.Option(False, "--all", help="remove every railab lab and orphaned railab namespace"),
        yes: bool = typer.Option(False, "--yes", "-y", help="with --all: do not ask before removing other users' labs"),
    ) -> None:
        """Remove everything "railab up" made (idempotent; works after a crash).

        --all asks before removing a lab another user brought up, or one whose state record is
        unreadable (its owner is unknown); --yes does not ask. Without a terminal to ask on it
        leaves those labs up, removes the rest and exits 2. "Another user" is the record's user
        field (SUDO_USER, else the login user): every root shell without sudo is one user, root.
        """
        if all_ and lab:
            raise typer.BadParameter(f"give a lab or --all, not both (got {lab!r} and --all)")
        if all_:
            me, ask, gone, kept = state.invoking_user(), _can_ask(), [], []
            # every recorded lab and every lab that still owns a ledger namespace (an orphan)
            for name in sorted(set(state.labs()) | set(state.ledger().values())):
                record = state.load(name) or {}
                owner = record.get("user")
                if state.unreadable(name) and not yes:  # owner unknown: as careful as with another user's lab
                    if not ask or not typer.confirm(
                            f"lab {name} has an unreadable state record ({state.state_path(name)}), so its "
                            "owner is unknown: remove it?", default=False):
                        kept.append(f"{name} (unreadable record)")
                        continue
                elif owner and owner != me and not yes:
                    if not ask or not typer.confirm(f"lab {name} was brought up by {owner}: remove it?",
                                                    default=False):
                        kept.append(f"{name} (user {owner})")
                        continue
                try:
                    _runtime(record.get("runtime", "netns")).down(name)
                except KeyboardInterrupt as exc:  # after that lab's teardown (or before it began): stop there
                    from railab.cli import down_left

                    up_now = set(state.labs()) | set(state.ledger().values())
                    done = ", ".join([*gone, *([name] if name not in up_now else [])]) or "nothing"
                    report_interrupted(f"error: {_interrupt_name(exc)}: down --all stopped after "
                                       f"removing {done}" + ("" if not up_now else
                                                             "; " + down_left([], all_=True)))
                    raise typer.Exit(_exit_code(exc)) from None
                gone.append(name)
            typer.echo(f"removed {len(gone)} lab(s)" + (f": {', '.join(gone)}" if gone else ""))
            if kept and not ask:  # nobody to ask: refuse other users' labs, loudly (exit 2)
                typer.echo(f"error: left up {len(kept)} lab(s) of other users or unknown owners: {', '.join(kept)} "
                           "(no terminal to ask on): railab down --all --yes removes them too", err=True)
                raise typer.Exit(EXIT_USAGE)
            if kept:  # the user answered no: that is what they asked for
                typer.echo(f"left up {len(kept)} lab(s) of other users or unknown owners: {', '.join(kept)}")
            return
        if not lab:
            raise UsageError("name a lab (railab down LAB) or pass --all")
        name = _lab_name(lab)
        if state.load(name) is None and name not in state.ledger().values() and not state.unreadable(name):
            if _runtime("containerlab").destroy_by_name(name):  # no record, but containerlab knows it
                typer.echo(f"lab {name} is down (no railab record: containerlab destroy --name {name})")
                return
            typer.echo(f"lab {name} is not up: nothing to remove ({state.running_labs()})")
            return
        holder = state.load_holder(name)
        if holder is not None:  # its engine and switch agent would go on against a missing fabric
            raise UsageError(f"lab {name} is busy: a load run is on it ({holder}); stop it with "
                             f"Ctrl-C (it removes what it set up), then railab down {name} again")
        try:
            _runtime_of(name).down(name)  # a signal takes effect once the teardown is done
        except KeyboardInterrupt as exc:
            from railab.cli import down_left

            # the teardown defers a signal until it is done, but one before it began (reading
            # the record, choosing the runtime) leaves the lab up: say what is true now
            report_interrupted(f"error: {_interrupt_name(exc)}: {down_left([name])}")
            raise typer.Exit(_exit_code(exc)) from None
        typer.echo(f"lab {name} is down")

    @app.command("list")
    def list_(
        as_json: bool = typer.Option(
            False, "--json", help="print JSON: a list of {name, runtime, phase, nodes, user, labdir}"),
    ) -> None:
        """The labs on this host (from their state records under /run/railab)."""
        rows = lab_rows()
        if as_json:
            typer.echo(json.dumps(rows, indent=2, sort_keys=True))
            return
        if not rows:
            typer.echo("no lab is up here")
            return
        from rich.console import Console  # lazy: `railab down` need not load rich
        from rich.table import Table
        t = Table()
        for col in ("lab", "runtime", "phase", "nodes", "user", "lab directory"):
            t.add_column(col, justify="right" if col == "nodes" else "left", overflow="fold")
        for r in rows:
            t.add_row(r["name"], r["runtime"] or "-", r["phase"] or "-", str(r["nodes"]), r["user"] or "-",
                      r["labdir"] or "-")
        Console().print(t)

    @app.command()
    def status(
        lab: str = typer.Argument(..., help="lab name, directory or .clab.yml"),
        as_json: bool = typer.Option(
            False, "--json", help="print JSON (control_plane: per router and per role, routes in the kernel "
                                  "FIB, ECMP width, BGP sessions, FRR memory as PSS, convergence time)"),
    ) -> None:
        """Nodes, FRR daemons alive, BGP sessions up/expected, injected faults, and the control
        plane per role (routes and ECMP width from the kernel FIBs, FRR memory, convergence
        time; ~0.1 s on the 1024-GPU full fabric). Exit 1 when a daemon is dead or sessions are
        missing."""
        from railab.checks.controlplane import observe_control_plane
        from railab.checks.converge import observe_sessions, read_session_states
        from railab.topologies.labspec import LabSpec

        name = _lab_name(lab)
        rt = _runtime_of(name)
        s = rt.status(name)
        spec = None
        record = rt.record(name)
        try:
            spec = LabSpec.load(record.labdir)
            # both ends: the control plane's per-router sessions (the spines' too), one read each
            states = read_session_states(spec, rt.executor(name), both_ends=True)
            up_, down_ = observe_sessions(spec, None, states)
            s["sessions"] = {"up": len(up_), "expected": len(up_) + len(down_), "down": sorted(down_)}
        except (FileNotFoundError, RuntimeError, TimeoutError, RailabError) as exc:
            s["sessions"] = {"error": str(exc)}
            states = None
        if spec is not None:
            try:
                s["control_plane"] = observe_control_plane(spec, lab=name, record=record, states=states)
            except (OSError, RailabError) as exc:
                s["control_plane"] = {"error": str(exc)}
        dead = sorted(f"{n}:{d}" for n, info in s["nodes"].items()
                      for d, ok in info.get("daemons", {}).items() if not ok)
        ses_ = s["sessions"]
        missing = "error" in ses_ or ses_.get("up", 0) < ses_.get("expected", 0)
        s["healthy"] = not dead and not missing
        rec_ = record
        s["faults"] = [f.model_dump(mode="json") for f in rec_.faults]
        s["ipv6_repairs"] = list(getattr(rec_, "ipv6_repairs", []) or [])
        s["load_balancing"] = rec_.load_balancing
        s["load_balancing_spines"] = rec_.load_balancing_spines
        code = 0 if s["healthy"] else EXIT_FAILED  # a dead daemon or a missing session: exit 1
        from railab.checks.exercise import disclose_status

        # while an exercise runs: the level's detail, as railab check names it (level 2: the
        # node of a down session, not its port), so status does not give the answer away
        n_dead = len(dead)
        s = disclose_status(name, s)
        if s.get("exercise_detail") == "symptom":
            dead = []
        if as_json:
            typer.echo(json.dumps(s, indent=2, sort_keys=True))
            if code:
                raise typer.Exit(code)
            return
        from rich.console import Console  # lazy: `railab down` need not load rich
        from rich.table import Table
        con = Console()
        t = Table(title=f"lab {s['lab']} ({s['phase']})")
        for col in ("node", "namespace", "present", "daemons"):
            t.add_column(col)
        for name, n in s["nodes"].items():
            ds = " ".join(f"{d}{'' if ok else '(dead)'}" for d, ok in n["daemons"].items()) or "-"
            t.add_row(name, n["namespace"], "yes" if n["present"] else "NO", ds)
        con.print(t)
        if "control_plane" in s:
            _print_control_plane(con, s["control_plane"])
        ses = s["sessions"]
        if "error" in ses:
            con.print(f"sessions: unavailable ({ses['error']})")
        else:
            con.print(f"BGP sessions Established: {ses['up']}/{ses['expected']}")
            for d in ses["down"][:20]:
                con.print(f"  down: {d}" if ":" in d or "exercise_detail" not in s else f"  down: a session of {d}")
        for f in s["faults"]:
            con.print(f"fault {f['id']} ({f['kind']}): {f['note']}", highlight=False)
        if s["ipv6_repairs"]:
            con.print(f"IPv6 link-local repaired at up on {len(s['ipv6_repairs'])} port(s): "
                      + ", ".join(s["ipv6_repairs"][:8]), highlight=False)
        if s["load_balancing"] != "ecmp":
            con.print(f"load balancing: {s['load_balancing']}"
                      + (" at the spines too" if s["load_balancing_spines"] else "")
                      + f" (railab lb {s['lab']} ecmp resets it)", highlight=False)
        if code:
            con.print(f"[bold red]not healthy[/]: {n_dead} dead daemon(s) {', '.join(dead[:8])}".rstrip()
                      if n_dead else "[bold red]not healthy[/]: BGP sessions missing", highlight=False)
            raise typer.Exit(code)

    def _print_control_plane(con, cp: dict) -> None:
        """The per-role table of ``railab status`` (railab.checks.controlplane)."""
        from rich import box
        from rich.table import Table

        if "error" in cp:
            con.print(f"control plane: unavailable ({cp['error']})", highlight=False)
            return

        def mmm(v: dict | None, fmt: str = "{:g}") -> str:
            if not v:
                return "-"
            vals = [fmt.format(v[k]) for k in ("min", "median", "max")]
            return vals[0] if len(set(vals)) == 1 else "/".join(vals)

        t = Table(title="control plane per role (min/median/max per router)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for col in ("role", "routers", "routes", "BGP routes", "ECMP width", "sessions", "FRR MiB"):
            t.add_column(col, justify="left" if col == "role" else "right", no_wrap=True)
        for role, r in cp["roles"].items():
            ses = r.get("sessions")
            t.add_row(role, str(r["routers"]) + (f" ({r['unread']} unread)" if r.get("unread") else ""),
                      mmm(r["routes"]), mmm(r["bgp_routes"]), mmm(r["ecmp_width"]),
                      f"{ses['up']}/{ses['expected']}" if ses else "-", mmm(r["memory_mib"], "{:.1f}"))
        con.print(t)
        conv = cp.get("convergence") or {}
        took = f"converged in {conv['converge_s']:g} s at bring-up; " if conv.get("converge_s") is not None else ""
        con.print(f"{took}read {cp['measured_at']} in {cp['took_s']:g} s", highlight=False)
        con.print("(routes: kernel FIBs; sessions: FRR; MiB: PSS from /proc/PID/smaps_rollup)",
                  highlight=False)

    def _known_node(name: str, node: str) -> None:
        """UsageError listing the lab's nodes when ``node`` is not one of them (as railab fault)."""
        from railab.testbed.labref import resolve

        names = [n.name for n in resolve(name).spec().nodes]
        if node not in names:
            shown = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
            raise UsageError(f"lab {name} has no node {node!r} (nodes: {shown})")

    @app.command(name="exec", context_settings={"allow_interspersed_args": False})
    def exec_(
        lab: str = typer.Argument(..., help="lab name"),
        node: str = typer.Argument(..., help="node name, e.g. g1-leaf1 or srv1"),
        cmd: list[str] | None = typer.Argument(
            None, help="command (after --; default: an interactive $SHELL); vtysh is pointed at the node's daemons"),
    ) -> None:
        """Run CMD inside NODE, e.g. railab exec mini g1-leaf1 -- vtysh -c 'show bgp summary'.

        Without CMD: an interactive shell in the node ($SHELL, else /bin/bash).

        Exits with the command's exit code; 127 when the command does not exist.
        """
        from railab.testbed.runtime.netns import NetnsExecutor, exec_argv, netns_path

        cmd = list(cmd or [])
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        name = _lab_name(lab)
        rt = _runtime_of(name)
        _known_node(name, node)
        from railab.testbed import exercise as ex

        ex.note_repair(name, "exec", node, cmd or ["(shell)"])  # the trainee's hands, for exercise fix
        if rt.name != "netns":  # containerlab: docker exec through the runtime's executor
            if not cmd:  # an interactive shell needs a terminal: the docker CLI, like containerlab exec
                record = state.load(name) or {}
                host = ["-H", record["docker_url"]] if record.get("docker_url") else []
                tty = ["-it"] if sys.stdin.isatty() else ["-i"]
                shell = "command -v bash >/dev/null && exec bash || exec sh"
                raise typer.Exit(subprocess.run(
                    ["docker", *host, "exec", *tty, container_name(name, node), "sh", "-c", shell]).returncode)
            res = rt.executor(name).run(node, cmd, timeout=300.0)
            typer.echo(res.stdout, nl=False)
            typer.echo(res.stderr, nl=False, err=True)
            raise typer.Exit(res.rc)
        ex = NetnsExecutor(name)
        ns = rt.netns_name(name, node)
        if not netns_path(ns).exists():
            raise UsageError(f"lab {name!r} has no node {node!r} (no namespace {ns})")
        cmd = cmd or _interactive_shell()
        # a network namespace shares the host's file system: the host's PATH answers for the node
        if shutil.which(cmd[0]) is None:
            typer.echo(f"error: {cmd[0]}: command not found (railab exec runs host programs inside "
                       f"{node}'s network namespace)", err=True)
            raise typer.Exit(EXIT_NOT_FOUND)
        try:
            rc = subprocess.run(exec_argv(ns, ex.argv_for(node, list(cmd))), env=_exec_env(name, node)).returncode
        except FileNotFoundError:
            typer.echo(f"error: {cmd[0]}: command not found", err=True)
            raise typer.Exit(EXIT_NOT_FOUND) from None
        _settle_storms(name)
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
        from rich.console import Console  # lazy: `railab down` need not load rich
        from rich.table import Table
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
            router = routers.get(node) or {}
            pids = router.get("pids") or {}
            started = router.get("daemons") or []
            order = [d for d in started if d in pids] + sorted(set(pids) - set(started))
            t.add_row(node, ns, " ".join(f"{d}({pids[d]})" for d in order) or "-")  # start order
        con.print(t)
        rows = phase_rows(record.get("timings") or {})
        if rows:
            pt = Table(title="phases (up to converged)")
            pt.add_column("phase")
            pt.add_column("s", justify="right")
            pt.add_column("%", justify="right")
            for depth, phase, sec, pct in rows:
                pt.add_row("  " * depth + phase, f"{sec:.3f}", "-" if pct is None else f"{pct:.0f}")
            con.print(pt)
        raised = {**(record.get("host_sysctls") or {}), **(record.get("host_limits") or {})}
        if raised:
            con.print("raised for this lab: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in raised.items()))
        repairs = record.get("ipv6_repairs") or []
        if repairs:
            con.print(f"IPv6 link-local repaired on {len(repairs)} port(s) (the kernel left them "
                      f"incomplete; docs/runtime.md): {', '.join(repairs[:8])}"
                      + (f" (+{len(repairs) - 8} more)" if len(repairs) > 8 else ""), highlight=False)
        con.print(f"{len(record.get('links', []))} links; railab inspect {name} --json for everything")
