"""``railab exercise ...``: break-fix training exercises that railab sets, watches and grades
(railab.checks.exercise; docs/training.md).

``start`` injects hidden faults and prints the customer's symptom; ``hint``, ``answer``, ``fix``,
``status``, ``score`` and ``reveal`` follow the trainee; ``stop`` calls it off without showing
the faults; ``swap-cables`` is the trainee's hands
at the rack (the repair of crossed cables). :func:`gate` is the "commands switched off" check
the root callback runs before every command.

Exit codes: ``answer`` 0 when it names an injected fault, 1 when not; ``fix`` 0 when the lab is
green, 1 when not; 2 for bad input (unknown lab, node, port, kind; no exercise running).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import typer

from railab.errors import EXIT_FAILED, UsageError

exercise_app = typer.Typer(
    name="exercise", no_args_is_help=True,
    help="Break-fix training: railab injects hidden faults, prints the customer's symptom, gives "
         "graded hints and grades the answer and the repair (docs/training.md).")


def _out(data: dict, as_json: bool, out: Path | None = None) -> bool:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    return as_json


@exercise_app.command("start")
def start(
    lab: str = typer.Argument(..., help="running lab name or its lab directory"),
    level: int = typer.Option(1, "--level", "-l", help="1: a link or NIC down; 2: crossed cables, a shut "
                              "or mis-configured BGP session, a dead daemon; 3: grey loss, MTU, two at once; "
                              "4 (a lossless lab, e.g. mini-lossless): a PFC storm, PFC on the wrong priority"),
    seed: int | None = typer.Option(None, "--seed", help="same seed + same lab shape = same faults "
                                    "(default: random, printed by reveal)"),
    kind: str | None = typer.Option(None, "--kind", help="force one kind of the level (trainer's choice), "
                                    "e.g. cross-cable or two-faults"),
    disable: str | None = typer.Option(None, "--disable", help="commands switched off for the trainee, "
                                       "comma-separated (e.g. check,report at level 3)"),
    precheck: bool = typer.Option(True, "--precheck/--no-precheck",
                                  help="refuse a lab whose daemons, cabling, policy or bgp checks fail "
                                       "(--no-precheck: you know it is green)"),
    check_detail: str | None = typer.Option(
        None, "--check-detail", help="what railab check names while it runs: symptom, node, element or full "
        "(full: the check's own words, repair commands included); default: level 1 element, 2 node, 3 symptom"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (symptoms, level, disabled; no faults)"),
) -> None:
    """Inject the exercise's faults (hidden from status/inspect/report/fault list) and print the
    symptom the customer reports."""
    from railab.checks import exercise as X

    cmds = [c.strip() for c in (disable or "").split(",") if c.strip()]
    view = X.start(lab, level, seed, kind=kind, disable=cmds, precheck=precheck, check_detail=check_detail)
    if _out({k: v for k, v in view.items() if k != "seed"}, as_json):
        return
    typer.echo(f"exercise started on lab {view['lab']} (level {view['level']}); the customer says:")
    for s in view["symptoms"]:
        typer.echo(f"  \"{s}\"")
    if view["disabled"]:
        typer.echo(f"switched off for this exercise: {', '.join(view['disabled'])}")
    typer.echo(f"railab exercise hint {view['lab']} | answer {view['lab']} --element NODE[:PORT] --kind KIND "
               f"| fix {view['lab']}")


@exercise_app.command("hint")
def hint(
    lab: str = typer.Argument(..., help="lab name"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The next graded hint (1: where to look, 2: which node, 3: which element); each costs points."""
    from railab.checks import exercise as X

    h = X.hint(lab)
    if _out(h, as_json):
        return
    if h["hint"] is None:
        typer.echo("no more hints: answer, or railab exercise reveal")
    else:
        typer.echo(f"hint {h['grade']}/3 (fault {h['fault']}): {h['hint']}")


@exercise_app.command("answer")
def answer(
    lab: str = typer.Argument(..., help="lab name"),
    text: str | None = typer.Argument(None, help="the diagnosis in words, e.g. \"g1-leaf2 eth3 is admin down\""),
    element: str | None = typer.Option(None, "--element", "-e", help="NODE or NODE:PORT (srv2:eth1, srv2:gpu0)"),
    kind: str | None = typer.Option(None, "--kind", "-k", help="link-down, nic-down, cross-cable, session-shut, "
                                    "wrong-asn, daemon-kill, grey-loss, mtu, pfc-storm, pfc-priority"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Grade a diagnosis: exit 0 when it names an injected fault, 1 when not (after reveal:
    still graded, not scored)."""
    from railab.checks import exercise as X

    res = X.answer(lab, element=element, kind=kind, text=text)
    if not _out(res, as_json):
        typer.echo(("RIGHT: " if res["right"] else "WRONG: ") + res["message"])
    if not res["right"]:
        raise typer.Exit(EXIT_FAILED)


@exercise_app.command("fix")
def fix(
    lab: str = typer.Argument(..., help="lab name"),
    wait: float = typer.Option(60.0, "--wait", help="seconds to wait for the lab to turn green"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Check that your repair made the lab green (every check family), with the exercise's faults
    still recorded as injected and your repair of each of them in the exercise's record (railab
    exec on the faulty element with a command that repairs it, restart, swap-cables). Exit 0
    green and credited (a blunt repair, a restart that reloaded a mis-configured node: fewer
    points), 1 not."""
    from railab.checks import exercise as X

    res = X.fix(lab, wait=wait)
    if not _out(res, as_json):
        if res["green"] and not res["credited"]:
            typer.echo(f"NOT CREDITED: every check passes (after {res['elapsed_s']:g} s), but the exercise's "
                       "record shows no repair of yours of what was broken (railab exec on the faulty element "
                       "with a command that repairs it, railab restart, railab exercise swap-cables, since "
                       "the start); nothing else repairs a lab during an exercise")
        elif res["green"] and res.get("blunt"):
            typer.echo(f"REPAIRED (blunt): every check passes (after {res['elapsed_s']:g} s, attempt "
                       f"{res['attempts']}), but a fault was undone wholesale (a node restart or a whole-config "
                       "reload resets every session of the node), not repaired where it was: "
                       "25 of the 50 repair points")
        elif res["green"]:
            typer.echo(f"REPAIRED: every check passes (after {res['elapsed_s']:g} s, attempt {res['attempts']})")
        else:
            typer.echo(f"NOT REPAIRED: {res['n_failing']} check(s) still fail after {res['elapsed_s']:g} s"
                       + (" (railab check is switched off for this exercise: which ones is yours to find)"
                          if res.get("rows_hidden") else ", e.g.:"))
            for f in res["failing"][:5]:
                typer.echo(f"  {f}")
    if not res["credited"]:
        raise typer.Exit(EXIT_FAILED)


@exercise_app.command("status")
def status(
    lab: str = typer.Argument(..., help="lab name"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The running exercise without its answers: symptoms, time, faults found, hints used."""
    import time

    from railab.checks import exercise as X
    from railab.testbed import exercise as store

    rec = store.load(X._lab(lab)[0])
    if rec is None:
        raise UsageError(f"lab {lab} runs no exercise")
    view = {**X.public_view(rec), "score": X.score_sheet(rec["lab"], rec)}
    view["score"].pop("seed", None)
    view["score"].pop("faults", None)
    if _out(view, as_json):
        return
    s = view["score"]
    typer.echo(f"exercise on {view['lab']}: level {view['level']}, {time.time() - view['started_ts']:.0f} s "
               f"running{' (revealed)' if view['revealed'] else ''}")
    for sym in view["symptoms"]:
        typer.echo(f"  \"{sym}\"")
    typer.echo(f"found {s['faults_found']}/{s['faults_total']}, hints {s['hints_used']}, wrong answers "
               f"{s['wrong_answers']}, repair {X.repair_words(s['repair'])}")
    if not view["revealed"]:
        typer.echo(f"railab check names failures at {view['check_detail']} detail"
                   + (f"; switched off: {', '.join(view['disabled'])}" if view["disabled"] else ""))


@exercise_app.command("score")
def score(
    lab: str = typer.Argument(..., help="lab name"),
    out: Path | None = typer.Option(None, "--out", "-o", help="also write the score sheet JSON here"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The score sheet (faults found, time to diagnosis, hints, wrong answers, repair, points);
    names the faults only after reveal."""
    from railab.checks import exercise as X

    sheet = X.score_sheet(X._lab(lab)[0])
    if sheet is None:
        raise UsageError(f"lab {lab} runs no exercise")
    if not sheet["revealed"]:
        sheet.pop("seed", None)
    if not _out(sheet, as_json, out):
        typer.echo(X.report_line(sheet["lab"]))


@exercise_app.command("reveal")
def reveal(
    lab: str = typer.Argument(..., help="lab name"),
    keep_faults: bool = typer.Option(False, "--keep-faults", help="leave the faults the repair did not "
                                     "verify in the lab (listed by `railab fault LAB list`) instead of healing them"),
    out: Path | None = typer.Option(None, "--out", "-o", help="also write the score sheet JSON here"),
    as_json: bool = typer.Option(False, "--json", help="print the score sheet JSON, with faults: "
                                 "[{element, kind, ...}]"),
) -> None:
    """End the exercise and show the injected faults and the score sheet. Faults the repair did
    not verify are healed (--keep-faults: left in the lab, in `railab fault LAB list`)."""
    from railab.checks import exercise as X

    sheet = X.reveal(lab, heal=not keep_faults)
    if _out(sheet, as_json, out):
        return
    typer.echo(X.report_line(sheet["lab"]))
    for f in sheet["faults"]:
        typer.echo(f"  {f['kind']} at {f['element']}: {f['note']}")
    if not sheet["repair"]["verified"]:
        typer.echo(f"unrepaired faults left in the lab: railab fault {sheet['lab']} heal --all undoes them"
                   if keep_faults else "unrepaired faults healed")


@exercise_app.command("stop")
def stop(
    lab: str = typer.Argument(..., help="lab name"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """End the exercise without showing its faults: heal what the repair did not verify, remove
    the record (the score sheet is printed, then gone); the lab takes a new exercise. Use
    reveal instead to keep the sheet and show the faults."""
    from railab.checks import exercise as X

    res = X.stop(lab)
    if _out(res, as_json):
        return
    s = res["score"]
    typer.echo(f"exercise on {res['lab']} stopped{' (it was revealed)' if res['was_revealed'] else ''}: "
               f"found {s['faults_found']}/{s['faults_total']}, hints {s['hints_used']}, wrong answers "
               f"{s['wrong_answers']}, repair {X.repair_words(s['repair'])}, "
               f"{s['points']}/{s['max_points']} points; "
               + (f"{res['healed']} unrepaired fault(s) healed" if res["healed"] else "nothing left to heal")
               + "; record removed")


@exercise_app.command("swap-cables")
def swap_cables(
    lab: str = typer.Argument(..., help="lab name"),
    a: str = typer.Argument(..., help="a server NIC, e.g. srv2:eth1"),
    b: str = typer.Argument(..., help="another server NIC, e.g. srv2:eth3"),
) -> None:
    """Your hands at the rack: swap the cables plugged into two server NICs (the repair of
    crossed cables). The NICs keep names, MACs and addresses; routes are re-added."""
    from railab.testbed import faults as F

    (la, pa), (lb, pb) = F.swap_cables(lab, a, b)
    typer.echo(f"swapped: {a} is now on {la}:{pa}, {b} on {lb}:{pb}")


def gate_commands(app: typer.Typer) -> None:
    """Wrap every registered command a trainer can switch off (``GATEABLE``) so that it calls
    :func:`gate` with its ``lab`` argument first (the wrapper keeps the signature Typer reads)."""
    from railab.testbed.exercise import GATEABLE

    for info in app.registered_commands:
        name = info.name or info.callback.__name__.strip("_").replace("_", "-")
        if name in GATEABLE and not getattr(info.callback, "_railab_gated", False):
            info.callback = _gated(name, info.callback)


def _gated(name: str, fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        lab = kwargs.get("lab")
        if lab is not None:
            gate(name, [str(lab)])
        return fn(*args, **kwargs)

    run._railab_gated = True
    return run


def gate(command: str | None, args: list[str]) -> None:
    """Refuse ``command`` (a top-level railab command) when a running exercise on a lab named in
    ``args`` (by name or lab directory) switched it off. Costs one directory listing when no
    exercise runs on this host. UsageError (exit 2) naming the exercise."""
    if not command or command == "exercise":
        return
    from railab.testbed import exercise as store

    for lab in store.labs():
        pub = store.load_public(lab) or {}
        if command not in pub.get("disabled", []) or pub.get("revealed"):
            continue
        labdir = pub.get("labdir")
        for arg in args:
            if arg == lab or (labdir and arg and not arg.startswith("-") and _same_dir(arg, labdir)):
                on = [c for c in ("exec", "traceroute", "traffic", "check", "status")
                      if c not in pub.get("disabled", [])]
                tools = ", ".join(f"railab {c}" for c in on[:3]) or "railab exercise hint"
                raise UsageError(f"railab {command} is switched off for the exercise on lab {lab} "
                                 f"(the trainer's choice): work with the tools still on ({tools}, ...)")


def _same_dir(arg: str, labdir: str) -> bool:
    p = Path(arg)
    try:
        if p.is_file():
            p = p.parent
        return p.exists() and p.resolve() == Path(labdir).resolve()
    except OSError:
        return False


def register(app: typer.Typer) -> None:
    """Attach ``exercise`` to ``app``."""
    app.add_typer(exercise_app, name="exercise")
