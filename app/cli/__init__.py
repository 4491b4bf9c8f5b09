"""The ``railab`` command line (Typer). Each area registers its own sub-commands.

Conventions, the same in every command: ``-h``/``--help``, ``railab --version``, ``-o``/``--out``
is always where output goes, ``--json`` prints machine-readable output, ``--verbose``/``-v``
lists every row, ``--all`` means every lab, ``--yes``/``-y`` skips a question. Exit codes come
from :mod:`railab.errors`: 0 ok, 1 a check or run failed, 2 usage error or bad input, 130
interrupted (and 127 for ``railab exec`` of a command that does not exist).

Plugins (railab.plugins: entry points ``railab.plugins``, ``RAILAB_PLUGINS``) are loaded at
start, after the built-ins and before the commands are built (so ``--help`` lists what they
register); one that fails is one ``error:`` line, exit 2.
"""

from __future__ import annotations

import sys

import typer

import railab
from railab.errors import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    RailabError,
    clear_interrupted,
    interrupted_reported,
    report_interrupted,
)
from railab.plugins import PluginError, load_plugins

try:  # before the commands are built: their help texts list the registries
    load_plugins()
except PluginError:
    pass  # reported by the root callback and by main() (load_plugins retries a failed plugin)

app = typer.Typer(
    name="railab",
    help="Plan, emulate and test Rail-only / Rail-optimized RoCEv2 GPU backend fabrics.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"railab {railab.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="print railab's version and exit"
    ),
) -> None:
    """Plan, emulate and test Rail-only / Rail-optimized RoCEv2 GPU backend fabrics."""
    load_plugins()  # no-op once loaded; raises PluginError (exit 2) for a broken plugin


from railab.cli import check as _check  # noqa: E402
from railab.cli import collective as _collective  # noqa: E402
from railab.cli import demo as _demo  # noqa: E402
from railab.cli import drill as _drill  # noqa: E402
from railab.cli import exercise as _exercise  # noqa: E402
from railab.cli import fault as _fault  # noqa: E402
from railab.cli import generate as _generate  # noqa: E402
from railab.cli import lab as _lab  # noqa: E402
from railab.cli import plan as _plan  # noqa: E402
from railab.cli import registry as _registry  # noqa: E402
from railab.cli import traffic as _traffic  # noqa: E402

for _mod in (_plan, _generate, _lab, _traffic, _check, _demo, _registry, _fault, _drill,
             _collective, _exercise):
    _mod.register(app)
_collective.register_ecmp(app)
_exercise.gate_commands(app)  # commands a trainer switched off for a running exercise (after all)


# Newer Typer vendors click as typer._click (and no longer installs click): take the usage-error
# base class from Typer's own BadParameter, which works with either layout.
_TYPER_CLICK_EXCEPTION = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def main() -> None:
    """Run the command line and exit with the code of :mod:`railab.errors`; never returns.

    A ``RailabError`` that escapes a command is printed as one ``error: ...`` line on stderr and
    exits with its ``exit_code`` (1, or 2 for a ``UsageError`` such as a bad intent or plan);
    a model ``ValueError`` (pydantic validation) or a missing file is bad input: exit 2. Typer
    usage errors exit 2, Ctrl-C (or an aborted question) 130; no traceback for any of them.
    """
    try:
        load_plugins()
        clear_interrupted()
        rc = app(standalone_mode=False)
        if rc == EXIT_INTERRUPTED and not interrupted_reported():
            # Typer turns a Ctrl-C outside a command's own handling (parsing the options, a
            # command's first imports) into a returned 130 with nothing printed
            report_interrupted()
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) and not interrupted_reported():
            report_interrupted()  # Typer turns Ctrl-C into a silent Exit(130)
        sys.exit(exc.exit_code)
    except RailabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        if not interrupted_reported():
            report_interrupted()
        sys.exit(EXIT_INTERRUPTED)
    except _TYPER_CLICK_EXCEPTION as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
