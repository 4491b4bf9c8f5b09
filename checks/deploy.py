"""Bring a lab up and wait until it has converged: the one place deploy meets observation.

``bring_up(runtime, labdir)`` = ``runtime.up(labdir)`` (mechanical deploy, railab.testbed) +
``wait_converged`` (railab.checks.converge: BGP sessions Established, expected prefixes in the FIB
with their ECMP width) + ``runtime.mark_converged``. Any failure, Ctrl-C, SIGTERM or SIGHUP
during the wait rolls the lab back (``runtime.down``) before the exception propagates, so a
caller never holds a half-converged lab it did not ask for.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from railab.checks.converge import (
    ConvergeProgress,
    default_timeout,
    plan_mismatches,
    wait_converged,
)
from railab.errors import LabGoneError, RailabError
from railab.testbed import lb, state
from railab.testbed.runtime.base import Deployer, Runtime
from railab.testbed.runtime.phases import timed
from railab.testbed.signals import interruption, signals_ignored, signals_raise
from railab.testbed.state import LabState
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name


class LabDiffersError(RailabError):
    """The lab converged, but runs something else than ``lab.json`` plans (a unique wrong ASN:
    every session comes up with ``remote-as external``); the message lists the differences."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block (issue 47: the 4,096 in a minute),
    back on after it if it was on; objects freed by reference counting go at once as ever.

    While a lab comes up, railab's process holds the lab's plan (every link, node and route of
    lab.json and the clab file: millions of objects at 4096 GPUs) and keeps allocating, so the
    collector's automatic runs, each full one walking every live object, took ~20 % of its CPU
    on ``rail-optimized-4096-full`` (perf, 17:05 on 2026-12-06: 1.35 of 6.8 CPU-s in
    ``gc_collect_main`` and its visits; ``gc.callbacks`` on 1024-full: 0.22 of 1.47 CPU-s, three
    full collections 0.17 s). What ``up`` leaves in cycles is collected by the next automatic
    run after the block, or with the process."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def bring_up(runtime: Deployer, labdir: str | Path, *, timeout: float | None = None,
             on_progress: Callable[[ConvergeProgress], None] | None = None,
             keep_on_failure: bool = False, **up_kwargs: Any) -> LabState:
    """Deploy ``labdir`` (a lab directory or its ``.clab.yml``) on ``runtime`` and wait until
    it has converged; return the record (phase ``running``, ``timings["converge_s"]``).

    ``timeout`` (s) bounds the convergence wait (None: ``default_timeout(spec)``, which scales
    with the lab); ``on_progress`` receives a ConvergeProgress after every poll;
    ``up_kwargs`` go to ``runtime.up`` (e.g. ``reconfigure=True`` for containerlab).
    Raises RailabError (deploy failure, or no convergence within ``timeout``: the message names
    the likely cause, :func:`railab.checks.converge.likely_causes`), LabDiffersError (converged,
    but a switch runs another ASN / router-id than ``lab.json``,
    :func:`railab.checks.converge.plan_mismatches`) and KeyboardInterrupt (Ctrl-C; SIGTERM/SIGHUP
    as railab.testbed.signals.Interrupted), in every case after the lab was brought down again
    -- except with ``keep_on_failure``, which leaves a lab that did not converge up for
    debugging (phase ``not-converged``) and a converged lab that differs running (phase
    ``running``: it works, the LabDiffersError says how it differs); the message says how to
    remove it.
    Ctrl-C always rolls back, and so does a config line a daemon refused at start
    (``runtime.startup_problems``, read while the wait runs; it fails the wait at once), even
    with ``keep_on_failure``: that lab does not run the config its files say.
    """
    record: LabState | None = None
    with signals_raise(), gc_paused():
        try:
            record = runtime.up(Path(labdir), **up_kwargs)
            lab = record.lab
            spec = LabSpec.load(record.labdir)
            budget = timeout if timeout is not None else default_timeout(spec)
            record.phase = "converging"
            state.update(record)  # not save: never brings back a lab another down removed
            t0 = time.monotonic()
            refused = _StartupProblems(runtime, lab)

            def progress(p: ConvergeProgress) -> None:
                if state.taken_down(record):  # by another command: waiting on is pointless
                    raise LabGoneError(lab, "up", ": up stopped and removed what was left")
                refused.raise_if_any(wait=False)  # fail fast: a refused line may stop convergence
                if on_progress is not None:
                    on_progress(p)

            try:
                views = wait_converged(spec, runtime.executor(lab), timeout=budget,
                                       on_progress=progress,
                                       netns_of=lambda node: record.namespaces.get(node) or netns_name(lab, node),
                                       on_stalled=lambda ports: unstick(runtime, lab, ports))
            except RailabError as exc:
                refused.raise_if_any(wait=True)  # the refused line explains the timeout
                _keep_or_raise(record, keep_on_failure, "not-converged", str(exc))
                raise
            refused.raise_if_any(wait=True)
            if state.taken_down(record):  # converged just as another command took it down
                raise LabGoneError(lab, "up", ": up stopped and removed what was left")
            differs = plan_mismatches(spec, views or {})
            if differs:
                msg = (f"lab {lab} converged but differs from lab.json: " + "; ".join(differs))
                if keep_on_failure:  # it converged: keep it running, and say how it differs
                    record = runtime.mark_converged(lab, time.monotonic() - t0)
                    raise _Kept(LabDiffersError(f"{msg}\nthe lab is kept (--keep-on-failure): "
                                                f"railab check {lab}; railab down {lab} removes it"))
                raise LabDiffersError(msg)
            record = runtime.mark_converged(lab, time.monotonic() - t0)
            return _load_balancing(runtime, spec, record)
        except _Kept as kept:
            raise kept.error from None
        except BaseException as exc:
            if record is None:  # from up: rolled back there, unless the interrupt came as it returned
                if getattr(runtime, "made", None) is None:
                    raise
                with signals_ignored():
                    runtime.down(runtime.made)
                    runtime.made = None
                raise
            gone = isinstance(exc, LabGoneError) or state.taken_down(record)  # by another command
            with signals_ignored():
                if gone and state.load(lab) is None:  # what up made after that down: all of it
                    state.resave(record)
                runtime.down(lab)
                runtime.made = None
            intr = interruption(exc)  # a helper killed by the same Ctrl-C: the Ctrl-C
            if intr is not None and intr is not exc:
                raise intr from None
            if gone and not isinstance(exc, (KeyboardInterrupt, LabGoneError)):
                raise LabGoneError(lab, "up", ": up stopped and removed what was left") from None
            raise


def _load_balancing(runtime: Runtime, spec: LabSpec, record: LabState) -> LabState:
    """The bring-up phase ``load_balancing``: once the fabric converged, apply lab.json's
    ``load_balancing.mode`` on the leaves (railab.testbed.lb; its member tables copy the
    converged routes), timed as ``timings["load_balancing_s"]`` and recorded in the state.
    Nothing for ``ecmp`` or on a runtime other than netns (lab.json ``load_balancing.runtimes``).
    A failure raises (bring_up then removes the lab)."""
    mode = spec.load_balancing.mode
    if mode == "ecmp" or runtime.name != "netns":
        return record
    with timed(record.timings, "load_balancing_s"):
        lb.apply(spec, lambda n: record.namespaces.get(n) or netns_name(record.lab, n), mode,
                 state.lab_dir(record.lab))
    record.load_balancing = mode
    return state.update(record)


def unstick(runtime: Runtime, lab: str, ports: list[tuple[str, str]]) -> None:
    """What the convergence wait does when it stalls (``on_stalled``): restart IPv6 on the ports
    of ``ports`` whose kernel state is incomplete (:meth:`Runtime.repair_ports`), then ask every
    port's peer to advertise again (:meth:`Runtime.resolicit`)."""
    runtime.repair_ports(lab, ports)
    runtime.resolicit(lab, ports)


class _StartupProblems:
    """``runtime.startup_problems(lab)`` read in a daemon thread while the caller waits for
    convergence (on the netns runtime it waits for every split-started FRR daemon to answer,
    8.3 s of the 4096-GPU fabric's up when it ran before the wait)."""

    def __init__(self, runtime: Runtime, lab: str) -> None:
        self.lab = lab
        self.result: list[str] | BaseException | None = None
        self.done = threading.Event()

        def run() -> None:
            try:
                self.result = runtime.startup_problems(lab)
            except RailabError as exc:  # re-raised in the caller's thread
                self.result = exc
            except Exception as exc:  # noqa: BLE001 - an unreadable log, say so in one line
                self.result = RailabError(f"lab {lab}: could not read what the daemons refused at "
                                          f"start ({type(exc).__name__}: {exc})")
            finally:
                self.done.set()

        threading.Thread(target=run, name=f"startup-problems-{lab}", daemon=True).start()

    def raise_if_any(self, *, wait: bool) -> None:
        """RailabError naming the refused lines (at most 5), once the read has finished (``wait``:
        wait for it); the read's own error, if it failed; else return."""
        if wait:
            self.done.wait()
        if not self.done.is_set():
            return
        if isinstance(self.result, BaseException):
            raise self.result
        if self.result:
            raise RailabError(f"lab {self.lab}: FRR rejected part of the config at daemon start: "
                              + " | ".join(self.result[:5])
                              + "; fix these lines of the node's frr.conf (or regenerate it)")


class _Kept(Exception):
    """Internal: carry the error of a failed bring-up past the rollback (keep_on_failure)."""

    def __init__(self, error: RailabError) -> None:
        super().__init__(str(error))
        self.error = error


def _keep_or_raise(record: LabState, keep: bool, phase: str, msg: str) -> None:
    """With ``keep``: record ``phase`` and raise _Kept (no rollback) with ``msg`` plus how to
    look at and remove the lab; without: return (the caller raises and rolls back)."""
    if not keep:
        return
    record.phase = phase
    state.update(record)
    raise _Kept(RailabError(f"{msg}\nthe lab is kept for debugging (--keep-on-failure): railab check "
                    f"{record.lab}, railab status {record.lab}; railab down {record.lab} removes it"))
