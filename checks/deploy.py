"""Bring a lab up and wait until it has converged: the one place deploy meets observation.

``bring_up(runtime, labdir)`` = ``runtime.up(labdir)`` (mechanical deploy, railab.testbed) +
``wait_converged`` (railab.checks.converge: BGP sessions Established, expected prefixes in the FIB
with their ECMP width) + ``runtime.mark_converged``. Any failure, Ctrl-C, SIGTERM or SIGHUP
during the wait rolls the lab back (``runtime.down``) before the exception propagates, so a
caller never holds a half-converged lab it did not ask for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from railab.checks.converge import ConvergeProgress, default_timeout, wait_converged
from railab.testbed import state
from railab.testbed.runtime.base import Runtime
from railab.testbed.signals import signals_ignored, signals_raise
from railab.testbed.state import LabState
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name


def bring_up(runtime: Runtime, labdir: str | Path, *, timeout: float | None = None,
             on_progress: Callable[[ConvergeProgress], None] | None = None,
             **up_kwargs: Any) -> LabState:
    """Deploy ``labdir`` (a lab directory or its ``.clab.yml``) on ``runtime`` and wait until
    it has converged; return the record (phase ``running``, ``timings["converge_s"]``).

    ``timeout`` (s) bounds the convergence wait (None: ``default_timeout(spec)``, which scales
    with the lab); ``on_progress`` receives a ConvergeProgress after every poll;
    ``up_kwargs`` go to ``runtime.up`` (e.g. ``reconfigure=True`` for containerlab).
    Raises RailabError (deploy failure, or no convergence within ``timeout``) and
    KeyboardInterrupt (Ctrl-C; SIGTERM/SIGHUP as railab.testbed.signals.Interrupted), in every
    case after the lab was brought down again.
    """
    record = runtime.up(Path(labdir), **up_kwargs)
    lab = record.lab
    with signals_raise():
        try:
            spec = LabSpec.load(record.labdir)
            budget = timeout if timeout is not None else default_timeout(spec)
            record.phase = "converging"
            state.save(record)
            t0 = time.monotonic()
            wait_converged(spec, runtime.executor(lab), timeout=budget, on_progress=on_progress,
                           netns_of=lambda node: record.namespaces.get(node) or netns_name(lab, node))
            return runtime.mark_converged(lab, time.monotonic() - t0)
        except BaseException:
            with signals_ignored():
                runtime.down(lab)
            raise
