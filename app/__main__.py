"""``railab`` console-script entry point (also ``python3 -m railab``).

This module imports nothing heavy: it installs the signal handling first
(``railab.testbed.signals.install_handlers``: SIGINT, SIGTERM and SIGHUP raise an interrupt
naming the signal) and only then imports the command line (Typer, rich, pydantic and the model
take a few hundred ms), so an interrupt while modules load exits 128 + the signal (130 for
Ctrl-C, 143 for SIGTERM) with one ``error: interrupted by SIG...`` line instead of a traceback.
A signal that came earlier, while the console script imported the ``railab`` package, was
recorded there (``railab.EARLY_SIGNALS``) and is reported the same way. Before that, in the
interpreter's own start (``site`` and the ``.pth`` files of installed packages), no railab code
runs: a signal there is Python's (a traceback, exit 1).
"""

from __future__ import annotations

import _signal  # first, the C module (no enum set-up): the window without a handler stays short
import sys

_early: list[int] = []


def _early_handler(signum, _frame):
    _early.append(signum)
    raise KeyboardInterrupt


for _s in (2, 15, 1):  # SIGINT, SIGTERM, SIGHUP, until install_handlers replaces this
    _signal.signal(_s, _early_handler)
try:
    from railab import EARLY_SIGNALS  # a signal while the console script imported the package

    if EARLY_SIGNALS:
        _early.append(EARLY_SIGNALS[0])
        raise KeyboardInterrupt
    import signal

    from railab.testbed.signals import install_handlers, signum_of, wrapped_interrupt
except KeyboardInterrupt:
    _name = {2: "SIGINT", 15: "SIGTERM", 1: "SIGHUP"}[_early[0] if _early else 2]
    print(f"error: interrupted by {_name} while starting: nothing was done", file=sys.stderr)
    sys.exit(128 + (_early[0] if _early else 2))


def _interrupted_while_starting(exc: KeyboardInterrupt) -> None:
    """Exit 128 + the signal with one line: an interrupt before the command line's own
    handling (``railab.cli.main``) begins, when nothing was done yet."""
    sig = signum_of(exc)
    print(f"error: interrupted by {signal.Signals(sig).name} while starting: nothing was done",
          file=sys.stderr)
    sys.exit(128 + sig)


def main() -> None:
    """Run the ``railab`` command line (``railab.cli.main``); exit 128 + the signal on SIGINT
    (130), SIGTERM (143) or SIGHUP (129) during start-up.

    Never returns: exits with the command's code (railab.errors: 0 ok, 1 failed, 2 usage,
    130 interrupted, 143 terminated).
    """
    install_handlers()
    try:
        from railab.cli import main as cli_main  # lazy: the heavy imports happen in here
    except (KeyboardInterrupt, RuntimeError) as exc:  # RuntimeError: one wrapping the interrupt
        ki = wrapped_interrupt(exc)
        if ki is None:
            raise
        _interrupted_while_starting(ki)
    try:
        cli_main()
    except KeyboardInterrupt as exc:  # a signal in the few lines before cli_main's own handling
        _interrupted_while_starting(exc)  # (CI: SIGINT 0.15 s into `railab check`: a traceback)


if __name__ == "__main__":
    main()
