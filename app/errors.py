"""railab's error hierarchy and process exit codes: the one home, below every layer.

Every user-facing failure is a ``RailabError`` (or a subclass) whose message says what is wrong
and what to change. The CLI maps them to exit codes the same way in every command:

* ``EXIT_OK`` (0): done, every check passed;
* ``EXIT_FAILED`` (1): a check, a flow or a run failed (``RailabError``);
* ``EXIT_USAGE`` (2): usage error or bad input (``UsageError``: an impossible intent, a bad
  option, a missing file, a lab name clash or a lab already up, an unknown runtime or node, a
  directory without a .clab.yml, a lab.json that is not JSON);
* ``EXIT_INTERRUPTED`` (130): Ctrl-C (128 + SIGINT); SIGTERM and SIGHUP exit 128 + their
  number too (143, 129), each with one line naming the signal and what was cleaned up.

A lab taken down by another command while a command ran on it is a ``LabGoneError`` (exit 1).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 127
EXIT_INTERRUPTED = 130

_interrupted_reported = False
_interrupt_line = None


def set_interrupt_line(line) -> None:
    """Set what :func:`report_interrupted` prints when given no message: ``line()``, a callable
    the command line installs (the signal that came, what the command cleans up), or None for
    ``error: interrupted``."""
    global _interrupt_line
    _interrupt_line = line


def report_interrupted(message: str | None = None) -> None:
    """Print the interrupted line (``message``, else the one :func:`set_interrupt_line` set, else
    ``error: interrupted``) on stderr and remember that it was printed, so the CLI's top level
    (``railab.cli.main``, which clears the mark when it starts) does not print another for the
    exit 130 that follows."""
    global _interrupted_reported
    import sys

    if message is None:
        message = _interrupt_line() if _interrupt_line is not None else "error: interrupted"
    print(message, file=sys.stderr, flush=True)
    _interrupted_reported = True


def interrupted_reported() -> bool:
    """Whether :func:`report_interrupted` ran since :func:`clear_interrupted`."""
    return _interrupted_reported


def clear_interrupted() -> None:
    """Forget an earlier :func:`report_interrupted` (the start of one command line run)."""
    global _interrupted_reported
    _interrupted_reported = False


class RailabError(Exception):
    """A user-facing error: one message that says what is wrong and what to change (exit 1)."""

    exit_code: int = EXIT_FAILED


class UsageError(RailabError, ValueError):
    """Bad input: an impossible intent, a bad option, a missing file, a name clash (exit 2)."""

    exit_code: int = EXIT_USAGE


class LabGoneError(RailabError):
    """The lab was taken down by another command (``railab down`` from another shell) while this
    one ran on it (exit 1): the message says so, not which of its steps then failed."""

    def __init__(self, lab: str, command: str, after: str = "") -> None:
        self.lab = lab
        super().__init__(f"lab {lab} was taken down by another command (railab down) while "
                         f"{command} ran{after}")


class MissingExtraError(RailabError):
    """An optional dependency is not installed (exit 1): the message names the pip extra.

    ``module``: the import name that failed (``docker``, ``paramiko``); ``extra``: railab's
    extra that installs it (``containerlab``, ``ssh``); ``needed_for``: what the user asked for.
    """

    def __init__(self, module: str, extra: str, needed_for: str) -> None:
        self.module, self.extra = module, extra
        super().__init__(
            f"{needed_for} needs the Python package {module!r}, which is not installed: "
            f"pip install 'railab[{extra}]'"
        )
