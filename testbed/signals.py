"""Signal guards for deploy and rollback (main thread only; no-ops in other threads).

* :func:`signals_raise`: SIGTERM/SIGHUP raise :class:`Interrupted` (a KeyboardInterrupt), SIGINT
  raises KeyboardInterrupt, so ``try/except BaseException`` rollback code runs on all three.
* :func:`signals_ignored`: ignore SIGINT/SIGTERM/SIGHUP while rolling back, so a second Ctrl-C
  cannot cut a rollback short.
* :func:`signals_blocked`: hold the three signals (``pthread_sigmask``) while children are
  spawned, so a signal cannot land between fork and the Popen object existing; they are
  delivered when the block ends. A child inherits the mask: unblock it before exec
  (:data:`HELD_SIGNALS`).
* :func:`sigint_event`: SIGINT (and SIGTERM, SIGHUP) only set an Event that long-running work
  (the traffic engine, the checks) polls at safe points, so a Ctrl-C never lands inside
  pyroute2's asyncio loop.
* :func:`install_handlers` (the console script, first thing) and :func:`settle` (a command that
  is done and has said so: signals ignored until the process exits).
* :func:`received`: the first of the three signals this process got (every handler here records
  it; a signal still pending counts too). A helper process (``ip -batch``, ``nft``, an FRR
  daemon) in the same process group gets the terminal's Ctrl-C at the same time as railab and
  dies of it, or closes the pipe railab writes to: :func:`interruption` turns the failure that
  follows into the interrupt it is (:class:`Interrupted`), so it is never reported as a failure.
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


_received: list[int] = []


def _record(signum: int) -> None:
    if not _received:
        _received.append(signum)


def received() -> int | None:
    """The first of SIGINT/SIGTERM/SIGHUP that came to this process since :func:`clear_received`
    (recorded by every handler of this module), else one pending now (blocked in this thread),
    else None."""
    if _received:
        return _received[0]
    pending = signal.sigpending() & HELD_SIGNALS
    return int(min(pending)) if pending else None


def clear_received() -> None:
    """Forget the signals :func:`received` reports (the start of one command line run)."""
    _received.clear()


def wrapped_interrupt(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt ``exc`` is or wraps (its ``__cause__``/``__context__`` chain, at
    most 10 deep), else None. Python 3.11 re-raises a signal that lands while a class is being
    created (a pydantic model imported at start-up or by a command) as ``RuntimeError: Error
    calling __set_name__``, the interrupt its cause (CI: SIGTERM 0.15 s into ``railab up``)."""
    for _ in range(10):
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def interruption(exc: BaseException | None = None) -> KeyboardInterrupt | None:
    """The interrupt behind a failure: the KeyboardInterrupt ``exc`` is or wraps
    (:func:`wrapped_interrupt`), else :class:`Interrupted` for the signal :func:`received`
    reports (a helper killed by the same Ctrl-C, a pipe it closed), else None: a failure of its
    own."""
    if (ki := wrapped_interrupt(exc)) is not None:
        return ki
    signum = received()
    return Interrupted(signum) if signum is not None else None


def signum_of(exc: BaseException) -> int:
    """The signal number of an interrupt (:class:`Interrupted`'s, else SIGINT: a plain
    KeyboardInterrupt is Python's Ctrl-C)."""
    return int(getattr(exc, "signum", signal.SIGINT))


def _raiser(signum, _frame):
    _record(signum)
    raise Interrupted(signum)


_installed: list[bool] = []
_settled: list[bool] = []


def _restoring(old: dict) -> dict:
    """The handlers a block puts back on exit: ``old``, or after :func:`settle` SIG_IGN."""
    return dict.fromkeys(old, signal.SIG_IGN) if _settled else old


def settle() -> None:
    """The command is done and has said so: from now on SIGINT/SIGTERM/SIGHUP are ignored until
    the process exits, so a late Ctrl-C cannot turn a finished ``up`` into an interrupted one
    (or leave it up while it says it was interrupted). Only in the command line's own process
    (after :func:`install_handlers`); elsewhere, e.g. a test calling the CLI in process, a no-op."""
    if _installed and _main_thread():
        _settled.append(True)  # the blocks of this module that end later keep them ignored
        _swap(dict.fromkeys(HELD_SIGNALS, signal.SIG_IGN))


def install_handlers() -> None:
    """For the command line's process (``railab.__main__``): SIGINT, SIGTERM and SIGHUP raise
    :class:`Interrupted` (a KeyboardInterrupt) and are recorded for :func:`received`, so a
    SIGTERM anywhere exits like a Ctrl-C (128 + the signal) instead of killing the process
    without a word. Main thread only."""
    if not _main_thread():
        return
    for s in HELD_SIGNALS:
        signal.signal(s, _raiser)
    _installed.append(True)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _swap(handlers: dict) -> tuple[dict, KeyboardInterrupt | None]:
    """Install ``handlers`` ({signal: handler}) and return the ones they replace, every one even
    when a handler raises on the way (``signal.signal`` first runs the handler of a signal
    already pending, which may raise): the first such KeyboardInterrupt is returned, not raised.
    """
    old: dict = {}
    late: KeyboardInterrupt | None = None
    for s, h in handlers.items():
        while s not in old:
            try:
                old[s] = signal.signal(s, h)
            except KeyboardInterrupt as exc:
                late = late or exc
    return old, late


_depth: list[int] = [0]


@contextmanager
def _handled(handler) -> Iterator[None]:
    """``handler`` for SIGINT/SIGTERM/SIGHUP during the block (main thread), the old handlers
    back after it (:func:`_restoring`). Outside the command line (a test, the console) the
    outermost such block starts a new record for :func:`received`, so a signal long past never
    turns a later failure into an interrupt; the command line clears it when it starts."""
    if _depth[0] == 0 and not _installed:
        _received.clear()
    old, late = _swap(dict.fromkeys(HELD_SIGNALS, handler))
    if late is not None:  # came just before the block
        _swap(old)
        raise late
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        _, late = _swap(_restoring(old))
        if late is not None:
            raise late


@contextmanager
def signals_raise() -> Iterator[None]:
    """Make SIGINT/SIGTERM/SIGHUP raise Interrupted (a KeyboardInterrupt naming the signal) in
    the main thread, recorded for :func:`received`; the previous handlers come back on exit."""
    if not _main_thread():
        yield
        return
    with _handled(_raiser):
        yield


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP (main thread) until exit; then restore the old handlers. A
    signal that came just before the block (still pending) is recorded and ignored too: the
    block (a rollback) always runs."""
    if not _main_thread():
        yield
        return
    old, _ = _swap(dict.fromkeys(HELD_SIGNALS, signal.SIG_IGN))
    try:
        yield
    finally:
        _, late = _swap(_restoring(old))
        if late is not None:
            raise late


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
        _record(signum)
        got.append(signum)

    try:
        with _handled(handler):
            yield
    finally:
        if got:  # also when the body failed: a helper killed by the same signal is no failure
            signal.raise_signal(got[0])


@contextmanager
def sigint_event() -> Iterator[threading.Event]:
    """While the body runs, SIGINT (Ctrl-C), SIGTERM and SIGHUP only set the yielded Event (pass
    it to ``Engine(stop=...)`` or ``run_checks(stop=...)``, which raise KeyboardInterrupt at a
    safe point) and are recorded (:func:`received`: the exit code and line name the signal); the
    previous handlers are restored afterwards. In a thread other than the main one (where no
    handler can be installed) the Event is yielded and never set by a signal."""
    ev = threading.Event()
    if not _main_thread():
        yield ev
        return

    def handler(signum, _frame):
        _record(signum)
        ev.set()

    with _handled(handler):
        yield ev
