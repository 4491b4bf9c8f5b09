"""``railab check LAB [--only daemons,cabling,pfc,speed,policy,bgp,routes,oversub,hops] [--json]
[--junit FILE] [--verbose] [--wait S]``.

Runs the check families (checks.runner) against a running lab and prints a rich table: one
summary row per family, then each root-cause failure (and skip) with node, expected, observed
and the likely cause, followed by how many failures follow from it
(:func:`checks.runner.group_failures`); ``--verbose`` / ``-v`` lists every row. ``--json``
and ``--junit`` always carry every row. ``--wait SECONDS`` re-checks until green or the deadline
and prints the time to green (``time_to_green_s`` in the JSON). While a training exercise runs
on the lab, rows are named at its detail (railab.checks.exercise.disclose: element, node or
symptom; never a repair command) until it is revealed.
Exit code 0 when nothing failed, 1 when any check failed, 2 for bad usage.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, report_interrupted

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def _console() -> Console:
    con = Console()
    return con if con.is_terminal else Console(width=220)


def _follow(n: int) -> str:
    """``1 more failure follows`` / ``3 more failures follow``."""
    return f"{n} more failure follows" if n == 1 else f"{n} more failures follow"


def root_summary(roots: int, follow: int) -> str:
    """The failure line's tail: ``1 root cause shown, 1 more failure follows from it``,
    ``2 root causes shown, 33 more failures follow from them``."""
    shown = f"{roots} root cause{'' if roots == 1 else 's'} shown"
    return f"{shown}, {_follow(follow)} from {'it' if roots == 1 else 'them'}"


def register(app: typer.Typer) -> None:
    """Attach ``check`` to ``app``."""

    @app.command()
    def check(
        lab: str = typer.Argument(..., help="running lab name or its lab directory"),
        only: str | None = typer.Option(
            None, "--only", help="comma-separated subset of daemons,cabling,pfc,speed,policy,bgp,routes,oversub,hops"),
        as_json: bool = typer.Option(False, "--json", help="print every result as JSON"),
        junit: Path | None = typer.Option(None, "--junit", help="also write JUnit XML here"),
        show_all: bool = typer.Option(
            False, "--verbose", "-v",
            help="list every row: passing checks, and failures that follow from a root cause"),
        inventory: Path | None = typer.Option(
            None, "--inventory",
            help="check a real fabric over SSH: YAML node -> {host, port, user, key_file, sudo, vtysh}; "
                 "LAB is then the lab directory (or lab.json) that describes the fabric"),
        known_hosts: Path | None = typer.Option(
            None, "--known-hosts", help="with --inventory: known_hosts file to verify host keys against"),
        wait: float | None = typer.Option(
            None, "--wait", min=0,
            help="re-check (quietly) until every check passes or SECONDS have passed, then print "
                 "the last run and the time to green"),
    ) -> None:
        """Check a running lab against its lab.json: BGP, routes/ECMP, hops, cabling, oversubscription.

        Ctrl-C at any point: error: interrupted, exit 130 (the checks stop at their next safe point).
        """
        from railab.testbed.signals import sigint_event

        try:
            with sigint_event() as stop:  # SIGINT only sets stop: never lands inside pyroute2
                if wait is not None:
                    n_fail = _check_wait(lab, only, as_json, junit, show_all, inventory, known_hosts,
                                         stop, wait)
                else:
                    n_fail = _check(lab, only, as_json, junit, show_all, inventory, known_hosts, stop)
                if stop.is_set():
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            report_interrupted()
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if n_fail:
            raise typer.Exit(EXIT_FAILED)


#: pause between two runs of ``check --wait`` (s); the run itself takes ~1 s on mini
WAIT_POLL_S = 0.2


def _check_wait(lab: str, only: str | None, as_json: bool, junit: Path | None, show_all: bool,
                inventory: Path | None, known_hosts: Path | None, stop, wait: float) -> int:
    """``check --wait SECONDS``: run the checks quietly until none fails or ``wait`` seconds
    passed (at least one run), then print the last run as ``check`` does, with ``time_to_green_s``
    (seconds from the start to the first green run; None when it never got green) in the JSON
    and one line for humans. Returns the last run's number of failures."""
    import time

    t0 = time.monotonic()
    repaired: list[str] = []
    while True:
        rows: list = []
        quiet = _check(lab, only, False, None, False, inventory, known_hosts, stop, render=False,
                       out=rows)
        elapsed = time.monotonic() - t0
        if not quiet or elapsed >= wait or stop.is_set():
            break
        # a lab of ours: repair what the kernel left out, as up does (not while an exercise runs)
        if inventory is None and not _exercise_runs(lab):
            repaired += _repair_link_local(lab, rows)
        time.sleep(WAIT_POLL_S)
    if repaired and not as_json:
        typer.echo(f"note: IPv6 link-local repaired on {', '.join(repaired[:8])} (IPv6 restarted on "
                   "the port: the kernel had left it incomplete)")
    green = None if quiet else round(elapsed, 2)
    n_fail = _check(lab, only, as_json, junit, show_all, inventory, known_hosts, stop,
                    extra={"time_to_green_s": green, "wait_s": wait})
    if not as_json:
        if green is not None:
            typer.echo(f"green after {green:.2f} s (railab check --wait {wait:g})")
        else:
            typer.echo(f"not green after {elapsed:.2f} s (--wait {wait:g}): {quiet} failing")
    return n_fail


def _exercise_runs(lab: str) -> bool:
    """True while a training exercise runs on ``lab``: railab changes nothing in it then (only the
    trainee's repair counts, railab.testbed.exercise.guard)."""
    from railab.cli.lab import _lab_name
    from railab.testbed import exercise as ex

    return ex.running(_lab_name(lab)) is not None


def _repair_link_local(lab: str, rows: list) -> list[str]:
    """Ports the bgp check found without their IPv6 link-local state (cause
    ``link-local-missing``): repaired by the lab's runtime (``Runtime.repair_ports``: IPv6
    restarted on each), as ``railab up``'s convergence wait does. Returns what it repaired."""
    ports = sorted({(r.cause.node, r.cause.port) for r in rows
                    if r.cause is not None and r.cause.kind == "link-local-missing"})
    if not ports:
        return []
    from railab.cli.lab import _lab_name, _runtime_of

    name = _lab_name(lab)
    return _runtime_of(name).repair_ports(name, ports)


def _check(lab: str, only: str | None, as_json: bool, junit: Path | None, show_all: bool,
           inventory: Path | None, known_hosts: Path | None, stop, *, render: bool = True,
           extra: dict | None = None, out: list | None = None) -> int:
    """The body of ``railab check``: run, print, return the number of failures (``out``, when
    given, receives the results). KeyboardInterrupt once ``stop`` is set (run_checks raises it
    at a safe point; the output is not printed)."""
    from railab.checks.lab import LiveLab
    from railab.checks.runner import (
        group_failures,
        joint_roots,
        parse_only,
        root_causes,
        run_checks,
        summary,
    )

    try:
        names = parse_only(only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--only") from None
    if inventory is not None:
        # a real fabric: FRR over SSH; no namespaces here, so netlink-based rows are skips
        from railab.testbed.ssh_exec import SshExecutor, load_inventory
        from railab.topologies.labspec import LabSpec

        spec = LabSpec.load(lab)
        executor = SshExecutor(load_inventory(inventory), known_hosts=known_hosts)
        lab_name, netns_of = spec.name, (lambda node: None)
    else:
        live = LiveLab.attach(lab)
        spec, executor, lab_name, netns_of = live.spec, live.executor, live.name, live.netns_of
    try:
        results = run_checks(spec, executor, only=names, netns_of=netns_of, stop=stop)
    finally:
        if inventory is not None:
            executor.close()
    if stop.is_set():
        raise KeyboardInterrupt
    if out is not None:
        out.extend(results)
    n_fail = sum(r.status == "fail" for r in results)
    if not render:
        return n_fail
    detail = None
    if inventory is None:  # a training exercise runs: name what fails at the level's detail only
        from railab.checks.exercise import check_detail, disclose

        detail = check_detail(lab_name)
        results = disclose(lab_name, results)
    if junit is not None:
        from railab.checks.junit import write_junit

        write_junit(results, junit, lab_name)
    if as_json:
        # every row with its status and structured references, plus the root causes
        typer.echo(json.dumps({
            "lab": lab_name, "ok": n_fail == 0, "summary": summary(results),
            "results": [r.model_dump() for r in results],
            "root_causes": root_causes(results),
            **({"note": f"no checks ran: {'--only ' + only if only else 'the families'} found "
                        f"nothing to check on lab {lab_name} (speed and pfc check the capacity "
                        "dataplane of a lab with lab.capacity)"} if not results else {}),
            **({"exercise_detail": detail} if detail else {}),
            **(extra or {}),
        }, indent=2))
    else:
        con = _console()
        tab = Table(title=f"railab check {lab_name}")
        for col in ("check", "pass", "fail", "skip"):
            tab.add_column(col, justify="left" if col == "check" else "right")
        for fam, c in summary(results).items():
            tab.add_row(fam, str(c["pass"]), f"[bold red]{c['fail']}[/]" if c["fail"] else "0",
                        str(c["skip"]))
        if results:
            con.print(tab)
        groups = group_failures(results)
        joint = joint_roots(groups)  # rows two or more roots explain together: listed under each
        follow = len({id(c) for _, cons in groups for c in cons})
        det = Table(title="details" if show_all else "failures and skips", show_lines=True)
        for col in ("check", "name", "status", "node", "expected", "observed", "likely cause"):
            det.add_column(col, overflow="fold")

        def row(r) -> None:
            det.add_row(r.check, r.name, f"[{STYLE[r.status]}]{r.status}[/]", r.node or "",
                        r.expected or "", r.observed or "", r.reason or "")

        if show_all:  # every row, in run order (JSON and JUnit always carry every row)
            for r in results:
                row(r)
        else:  # root causes, each followed by how many failures it explains
            for root, cons in groups:
                row(root)
                if cons:
                    fams = {}
                    for c in cons:
                        fams[c.check] = fams.get(c.check, 0) + 1
                    shared = [c for c in cons if id(c) in joint]
                    others = list(dict.fromkeys(o.name for c in shared for o in joint[id(c)]
                                                if o is not root))
                    det.add_row("", f"+{len(cons)} more", "", "", "", "",
                                f"{_follow(len(cons))} from {root.name} ("
                                + ", ".join(f"{k} {v}" for k, v in fams.items())
                                + (f"; {len(shared)} of them together with "
                                   + ", ".join(others) if shared else "")
                                + f"): --verbose lists {'it' if len(cons) == 1 else 'them'}", style="dim")
            for r in results:
                if r.status == "skip":
                    row(r)
        if det.row_count:
            con.print(det)
        n_skip = sum(1 for r in results if r.status == "skip")
        if detail:
            con.print(f"[dim]a training exercise runs on {lab_name}: failures are named at {detail} "
                      "detail until railab exercise reveal[/dim]", highlight=False)
        if not n_fail and n_skip:
            con.print(f"[green]{len(results) - n_skip} passed, {n_skip} skipped[/]",
                      highlight=False)
        elif not results:  # e.g. --only speed on a lab without lab.capacity: nothing to check
            con.print(f"[yellow]no checks ran[/]: {'--only ' + only if only else 'the families'} "
                      f"found nothing to check on lab {lab_name} (speed and pfc check the capacity "
                      "dataplane of a lab with lab.capacity, e.g. mini-lossless)",
                      highlight=False, soft_wrap=True)
        elif not n_fail:
            con.print(f"[green]all {len(results)} checks passed[/]")
        elif follow and not show_all:
            con.print(f"[bold red]{n_fail} failed[/]: {root_summary(len(groups), follow)} "
                      "(railab check --verbose lists every row)", highlight=False)
        else:
            con.print(f"[bold red]{n_fail} failed[/]")
    return n_fail
