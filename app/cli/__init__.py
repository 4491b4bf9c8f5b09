"""The ``railab`` command line (Typer). Each area registers its own sub-commands.

Conventions, the same in every command: ``-h``/``--help``, ``railab --version``, ``-o``/``--out``
is always where output goes, ``--json`` prints machine-readable output, ``--verbose``/``-v``
lists every row, ``--all`` means every lab, ``--yes``/``-y`` skips a question. Exit codes come
from :mod:`railab.errors`: 0 ok, 1 a check or run failed, 2 usage error or bad input, 128 + the
signal when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; one line names the signal and what
was cleaned up: :data:`CLEANED_UP`) (and 127 for ``railab exec`` of a command that does not
exist).

Plugins (railab.plugins: entry points ``railab.plugins``, ``RAILAB_PLUGINS``) are loaded at
start, after the built-ins and before the commands are built (so ``--help`` lists what they
register); one that fails is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

import typer

import railab
from railab.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    LabGoneError,
    RailabError,
    clear_interrupted,
    interrupted_reported,
    report_interrupted,
    set_interrupt_line,
)
from railab.plugins import PluginError, load_plugins

try:  # before the commands are built: their help texts list the registries
    load_plugins()
except PluginError:
    pass  # reported by the root callback and by main() (load_plugins retries a failed plugin)

#: Each command's home module under railab.cli (its ``register`` adds it). ``main`` imports only
#: the home of the command on the command line (a whole registration imports every area's
#: models: ~0.8 s of every command's start); tests/test_cli_plan.py checks this table against
#: a full registration.
COMMAND_HOMES: dict[str, str] = {
    "plan": "plan", "generate": "generate",
    "up": "lab", "down": "lab", "list": "lab", "status": "lab", "exec": "lab", "inspect": "lab",
    "traffic": "traffic", "traceroute": "traffic", "check": "check",
    "demo": "demo", "report": "demo", "graph": "demo", "kinds": "registry",
    "fault": "fault", "restart": "fault", "drill": "drill",
    "collective": "collective", "ecmp": "collective", "exercise": "exercise", "model": "model",
    "ui": "ui", "lb": "lb", "otg": "otg",
}
_ORDER = ("plan", "generate", "lab", "traffic", "check", "demo", "registry", "fault", "drill",
          "collective", "exercise", "model", "ui", "lb", "otg")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"railab {railab.__version__}")
        raise typer.Exit()


_STARTED: list[bool] = []


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="print railab's version and exit"
    ),
) -> None:
    """Plan, emulate and test Rail-only / Rail-optimized RoCEv2 GPU backend fabrics."""
    _STARTED.append(True)  # a command runs from here on (an interrupt before: nothing was done)
    load_plugins()  # no-op once loaded; raises PluginError (exit 2) for a broken plugin


def make_app(commands: Iterable[str] | None = None) -> typer.Typer:
    """The ``railab`` Typer app with the commands named in ``commands`` (None: every command).

    A name's whole home module (``COMMAND_HOMES``) is registered, so its sibling commands come
    too; names not in the table are ignored. Commands a trainer switched off for a running
    exercise are gated as in the full app (railab.cli.exercise.gate_commands)."""
    app = typer.Typer(
        name="railab",
        help="Plan, emulate and test Rail-only / Rail-optimized RoCEv2 GPU backend fabrics.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
    )
    app.callback()(_root)
    homes = set(_ORDER) if commands is None else {COMMAND_HOMES[c] for c in commands if c in COMMAND_HOMES}
    for home in _ORDER:
        if home in homes:
            mod = importlib.import_module(f"railab.cli.{home}")
            mod.register(app)
            if home == "collective":
                mod.register_ecmp(app)
    from railab.cli import exercise as _exercise

    _exercise.gate_commands(app)  # commands a trainer switched off for a running exercise (after all)
    return app


def _command_of(argv: list[str]) -> str | None:
    """The command named on ``argv`` (its first word that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


_APP: typer.Typer | None = None


def __getattr__(name: str):
    """``railab.cli.app``: the whole command line (every command), built on first use."""
    global _APP
    if name == "app":
        if _APP is None:
            _APP = make_app()
        return _APP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Newer Typer vendors click as typer._click (and no longer installs click): take the usage-error
# base class from Typer's own BadParameter, which works with either layout.
_TYPER_CLICK_EXCEPTION = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


#: What an interrupt leaves, per command (the line names the signal, then this); a command that
#: knows more prints its own line (``up``: what it removed).
CLEANED_UP: dict[str, str] = {
    "check": "the checks stopped (they change nothing)",
    "traffic": "the flows stopped and what the run set up was removed",
    "drill": "the drill healed any fault it injected and put BFD back as lab.json says",
    # down's line is read off the host when the signal comes (down_left): the teardown finishes
    # before a signal takes effect, but one that comes before it began leaves the lab up
    # up prints its own line when its rollback ran; this is the same line for an interrupt that
    # reaches the top first (seen at 0.47 s of a mini bring-up in CI: a bare "interrupted by")
    "up": "everything up started was removed",
}


def down_left(labs: list[str], all_: bool = False) -> str:
    """What an interrupted ``railab down`` of ``labs`` (lab names; ``all_``: ``--all``, every lab
    recorded or owning a namespace) leaves, read off the host now: ``down finished first, lab X
    is removed`` when none of them is recorded any more, else which are still up and the
    command that removes them (``down stopped before it removed lab X (still up): railab down X
    removes it``). The teardown itself defers a signal until it is done
    (railab.testbed.runtime.netns.teardown), but a signal before it began (``down`` loading its
    modules, reading the record) leaves the lab up."""
    from railab.testbed import state

    try:
        present = set(state.labs()) | set(state.ledger().values())
    except OSError:
        present = set()
    left = sorted(present) if all_ else [lab for lab in labs if lab in present]
    if not left:
        if all_:
            return "down --all finished first, no lab is left"
        return f"down finished first, lab {', '.join(labs)} is removed" if labs else "down removed nothing"
    again = "railab down --all" if all_ else f"railab down {left[0]}"
    return (f"down stopped before it removed lab {', '.join(left)} (still up): {again} removes "
            + ("them" if len(left) > 1 else "it"))


def _down_argv(argv: list[str]) -> tuple[list[str], bool]:
    """(lab names, ``--all``) of a ``railab down`` command line (a lab directory read as its
    lab's name; an unreadable one as given)."""
    words = argv[argv.index("down") + 1:] if "down" in argv else []
    names = []
    for w in words:
        if w.startswith("-"):
            continue
        try:
            from railab.testbed.labname import lab_name

            names.append(lab_name(w))
        except Exception:  # noqa: BLE001 - not a lab directory: the word is the name
            names.append(w)
    return names, "--all" in words


def _interrupt_line(sig: int | None = None) -> str:
    """``error: interrupted by SIGX: <what>``: the signal that came (``sig``, else the one
    railab.testbed.signals recorded, else SIGINT) and what the command cleaned up (for ``down``,
    what is left on the host now: :func:`down_left`)."""
    from railab.testbed.signals import received

    sig = sig or received() or signal.SIGINT
    command = _command_of(sys.argv[1:]) or ""
    if command == "down":  # before its callback too: "nothing was done" would not say the lab is up
        what = down_left(*_down_argv(sys.argv[1:]))
    elif not _STARTED:
        what = "nothing was done"
    else:
        what = CLEANED_UP.get(command, "")
    return f"error: interrupted by {signal.Signals(sig).name}" + (f": {what}" if what else "")


def _interrupted(exc: BaseException | None = None) -> int:
    """Exit code of an interrupt (128 + the signal: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), after
    printing its one line unless the command printed its own (what it cleaned up)."""
    from railab.testbed.signals import Interrupted, received

    sig = exc.signum if isinstance(exc, Interrupted) else (received() or signal.SIGINT)
    if not interrupted_reported():
        report_interrupted(_interrupt_line(sig))
    return 128 + sig


def _labs_named(argv: list[str]) -> list[str]:
    """The labs up now that ``argv`` names (a lab name, or a lab directory of a running lab)."""
    from railab.testbed import state

    up = set(state.labs())
    if not up:
        return []
    named = []
    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]  # not a command run in a node
    for word in words:
        if word.startswith("-"):
            continue
        if word in up:
            named.append(word)
        elif (Path(word) / "lab.json").is_file() or word.endswith((".clab.yml", "lab.json")):
            try:
                from railab.testbed.labname import lab_name

                if lab_name(word) in up:
                    named.append(lab_name(word))
            except Exception:  # noqa: BLE001 - not a lab directory: nothing to watch
                pass
    return named


def _lab_gone(labs: list[str]) -> bool:
    """When one of ``labs`` (up when the command started) was taken down by another command
    meanwhile: print that as the command's error line and say so (the command's own failure,
    a step on a missing namespace, is not the news)."""
    from railab.testbed import state

    for lab in labs:
        if state.gone(lab):
            command = _command_of(sys.argv[1:]) or "the command"
            print(f"error: {LabGoneError(lab, command)}", file=sys.stderr)
            return True
    return False


def main() -> None:
    """Run the command line and exit with the code of :mod:`railab.errors`; never returns.

    A ``RailabError`` that escapes a command is printed as one ``error: ...`` line on stderr and
    exits with its ``exit_code`` (1, or 2 for a ``UsageError`` such as a bad intent or plan);
    a model ``ValueError`` (pydantic validation) or a missing file is bad input: exit 2. Typer
    usage errors exit 2, Ctrl-C (or an aborted question) 130, SIGTERM 143, SIGHUP 129; no
    traceback for any of them, nor for a RuntimeError that wraps one (Python 3.11's
    ``__set_name__`` wrapper). A failure after one of those signals came (a helper process
    killed by the same Ctrl-C, a pipe it closed: railab.testbed.signals.received) is the
    interrupt, not a failure. A command that fails on a lab another command took down meanwhile
    (``railab down`` from another shell; the lab was up when it started) says that, exit 1
    (railab.errors.LabGoneError).
    """
    from railab.testbed.signals import clear_received, interruption, received, settle

    watched: list[str] = []
    try:
        clear_received()
        _STARTED.clear()
        set_interrupt_line(_interrupt_line)
        load_plugins()
        clear_interrupted()
        command = _command_of(sys.argv[1:])
        # the whole app when something already built it (and may have added to it), else
        # only the command's home module
        app = _APP if _APP is not None else make_app([command] if command in COMMAND_HOMES else None)
        watched = _labs_named(sys.argv[1:]) if command not in ("up", "down") else []
        try:
            rc = app(standalone_mode=False)
        except (KeyboardInterrupt, SystemExit, LabGoneError):
            raise
        except Exception:
            if received() is None and _lab_gone(watched):
                sys.exit(EXIT_FAILED)
            raise
        if isinstance(rc, int) and rc and rc != EXIT_INTERRUPTED and received() is None \
                and _lab_gone(watched):
            sys.exit(EXIT_FAILED)
        if rc == EXIT_INTERRUPTED or (isinstance(rc, int) and rc and received() is not None):
            # Typer turns a Ctrl-C outside a command's own handling (parsing the options, a
            # command's first imports) into a returned 130 with nothing printed (and a SIGTERM
            # too: the signal says which)
            rc = _interrupted()
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except typer.Exit as exc:
        if exc.exit_code and exc.exit_code != EXIT_INTERRUPTED and received() is None \
                and _lab_gone(watched):
            sys.exit(EXIT_FAILED)
        if isinstance(exc.__cause__, KeyboardInterrupt):  # Typer turns Ctrl-C into a silent Exit(130)
            sys.exit(_interrupted(exc.__cause__))
        if exc.exit_code and received() is not None:
            sys.exit(_interrupted())
        sys.exit(exc.exit_code)
    except RailabError as exc:
        if received() is not None:
            sys.exit(_interrupted())
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (ValueError, OSError) as exc:
        if received() is not None:
            sys.exit(_interrupted())
        if not isinstance(exc, (ValueError, FileNotFoundError)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt as exc:
        sys.exit(_interrupted(exc))
    except RuntimeError as exc:  # one wrapping an interrupt (signals.wrapped_interrupt), or after one
        if (ki := interruption(exc)) is None:
            raise
        sys.exit(_interrupted(ki))
    except _TYPER_CLICK_EXCEPTION as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        settle()  # the command is over and has said how: a late signal changes nothing now
