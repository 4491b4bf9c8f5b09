"""Signal guards for deploy and rollback (main thread only; no-ops in other threads).

* :func:`signals_raise`: SIGTERM/SIGHUP raise :class:`Interrupted` (a KeyboardInterrupt), SIGINT
  raises KeyboardInterrupt, so ``try/except BaseException`` rollback code runs on all three.
* :func:`signals_ignored`: ignore SIGINT/SIGTERM/SIGHUP while rolling back, so a second Ctrl-C
  cannot cut a rollback short.
* :func:`signals_blocked`: hold the three signals (``pthread_sigmask``) while children are
  spawned, so a signal cannot land between fork and the Popen object existing; they are
  delivered when the block ends. A child inherits the mask: unblock it before exec
  (:data:`HELD_SIGNALS`).
* :func:`sigint_event`: SIGINT only sets an Event that long-running work (the traffic engine,
  the checks) polls at safe points, so a Ctrl-C never lands inside pyroute2's asyncio loop.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The signals ``up`` turns into a rollback.
HELD_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class Interrupted(KeyboardInterrupt):
    """Raised by the handlers :func:`signals_raise` installs (SIGTERM, SIGHUP) so rollback runs.

    ``signum``: the signal number (exit code 128 + signum by convention).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def signals_raise() -> Iterator[None]:
    """Make SIGTERM/SIGHUP raise Interrupted (SIGINT raises KeyboardInterrupt) in the main thread;
    the previous handlers come back on exit."""
    if not _main_thread():
        yield
        return

    def handler(signum, _frame):
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP (main thread) until exit; then restore the old handlers."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_blocked() -> Iterator[None]:
    """Block SIGINT/SIGTERM/SIGHUP for the calling thread until exit (pending ones are delivered
    then). Used around ``subprocess.Popen`` so every spawn is atomic with its bookkeeping."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP in Python until exit, then re-send the first one that came to
    this process, so the handlers in force outside the block act on it (under
    :func:`signals_raise`: KeyboardInterrupt or Interrupted right at the exit). Unlike
    :func:`signals_blocked` the kernel signal mask is untouched, so children spawned inside the
    block start with a clean mask and default handlers (no ``preexec_fn`` needed to unblock).
    Main thread only (elsewhere a no-op: Python runs handlers in the main thread)."""
    if not _main_thread():
        yield
        return
    got: list[int] = []

    def handler(signum, _frame):
        got.append(signum)

    old = {s: signal.signal(s, handler) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        signal.raise_signal(got[0])


@contextmanager
def sigint_event() -> Iterator[threading.Event]:
    """While the body runs, SIGINT (Ctrl-C) only sets the yielded Event (pass it to
    ``Engine(stop=...)`` or ``run_checks(stop=...)``, which raise KeyboardInterrupt at a safe
    point); the previous handler is restored afterwards. In a thread other than the main one
    (where no handler can be installed) the Event is yielded and never set by a signal."""
    ev = threading.Event()
    if not _main_thread():
        yield ev
        return
    prev = signal.signal(signal.SIGINT, lambda *_: ev.set())
    try:
        yield ev
    finally:
        signal.signal(signal.SIGINT, prev)
