"""The phase clock of a runtime's ``up``: every phase and sub-phase of the phase table
(``railab inspect``; railab.cli.lab ``phase_rows`` nests them) is timed here, in wall-clock
seconds rounded to the millisecond, into the state record's ``timings`` (``<phase>_s`` keys).

:meth:`railab.testbed.runtime.netns.deploy.NetnsDeployer.up` lists its phases (``preflight``, ``build``
and its steps ``namespaces``, ``links``, ``servers``, ``capacity``, ``frr``) and times each with
:func:`timed`; the FRR phase times its daemon waves and RA steps with the same clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


def since(t0: float, timings: dict[str, float], key: str, *, add: bool = False) -> None:
    """Record the seconds from ``t0`` (``time.monotonic()``) to now as ``timings[key]`` (rounded
    to the ms); ``add`` adds them to what ``key`` already holds (a phase run in two parts)."""
    elapsed = time.monotonic() - t0
    timings[key] = round(timings.get(key, 0) + elapsed, 3) if add else round(elapsed, 3)


@contextmanager
def timed(timings: dict[str, float], key: str | None, *, add: bool = False) -> Iterator[None]:
    """Time the ``with`` block as phase ``key`` (see :func:`since`); recorded only when the block
    completes (a failed ``up`` is rolled back with its record). ``key`` None: not timed (a step
    the phase table counts in its parent's ``other``)."""
    t0 = time.monotonic()
    yield
    if key is not None:
        since(t0, timings, key, add=add)
