"""Rich progress display of a convergence wait (application layer: all rich output lives here
and in the CLI).

``with ConvergeBar() as bar: bring_up(rt, labdir, on_progress=bar)``: two bars, BGP sessions
Established and prefixes installed with their ECMP width, updated on every poll.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from railab.checks.converge import ConvergeProgress


class ConvergeBar:
    """A callable ``on_progress`` for railab.checks.deploy.bring_up / converge.wait_converged.

    Starts on the first report (so a failed deploy prints nothing) and stops on ``__exit__`` /
    :meth:`close`. ``console``: where to draw (default: rich's stderr-aware default console).
    """

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console, transient=False)
        self._tasks: tuple | None = None

    def __call__(self, p: ConvergeProgress) -> None:
        if self._tasks is None:
            self._progress.start()
            self._tasks = (self._progress.add_task(f"BGP sessions ({p.lab})", total=p.sessions_total),
                           self._progress.add_task("prefixes x ECMP", total=p.routes_total))
        t_s, t_r = self._tasks
        self._progress.update(t_s, completed=p.sessions_up)
        self._progress.update(t_r, completed=p.routes_ok)

    def close(self) -> None:
        """Stop drawing (idempotent)."""
        if self._tasks is not None:
            self._progress.stop()

    def __enter__(self) -> ConvergeBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
