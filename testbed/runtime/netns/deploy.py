"""``up`` of the netns runtime: :class:`NetnsDeployer`, a NetnsRuntime that deploys, its phases
in order.

Its phases' modules (:mod:`.preflight`, :mod:`.build`) are imported at the top here: they load
the lab model (railab.topologies.labspec), ``lab.capacity`` with the PFC plan
(railab.testbed.capacity) and the stitch (railab.testbed.stitch), which the commands on a running
lab (``down``, ``status``, ``exec``, ``inspect``) do not need. Those load
railab.testbed.runtime.netns (the registry's ``NetnsRuntime``) and never this module; whoever
brings a lab up takes a Deployer from railab.testbed.runtime.deploy ``get_deployer`` (or this
class) instead (docs/architecture.md, "Imports").
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from railab.errors import LabGoneError, RailabError
from railab.testbed import state as st
from railab.testbed.runtime.base import Deployer
from railab.testbed.runtime.netns import NetnsRuntime, build, preflight, ribhold
from railab.testbed.runtime.phases import timed
from railab.testbed.signals import interruption, signals_ignored, signals_raise

__all__ = ["NetnsDeployer"]


class NetnsDeployer(NetnsRuntime, Deployer):
    """The netns runtime with ``up`` (see the module docstring and railab.testbed.runtime.netns)."""

    def up(self, labdir: Path, *, stitch: bool = False) -> st.LabState:
        """Deploy the lab in ``labdir`` (a directory or its ``.clab.yml``): namespaces, veths,
        sysctls, server addressing and policy routing, FRR started with its config. Does not wait
        for convergence (railab.checks.deploy.bring_up does, then :meth:`mark_converged`).

        ``stitch``: deploy a partitioned lab (``railab generate --hosts``) from its host files,
        every host a namespace on one underlay and the cut links kernel VXLAN devices
        (railab.testbed.stitch; recorded as the state's ``stitch`` entry).

        The phases, in order, each timed once into the record's ``timings`` (the phase table of
        ``railab inspect``): ``preflight``, then ``build`` = ``namespaces``, ``links``, (sysctls),
        ``servers``, ``capacity`` (lab.capacity only), ``frr``.

        Returns the recorded state (phase ``started``). Raises RailabError for non-root, missing
        FRR, a lab name clash, a config FRR rejects or a failed step, after removing everything
        made so far; KeyboardInterrupt (Ctrl-C; SIGTERM and SIGHUP as
        railab.testbed.signals.Interrupted) likewise after rolling back, also when what failed
        first was a helper the same signal killed (railab.testbed.signals.interruption).
        """
        self._children: list[subprocess.Popen] = []
        self.made = None
        clab, plan, spec = preflight.load(labdir, stitch)
        pre: dict[str, float] = {}
        with timed(pre, "preflight_s"):
            limits = preflight.host(self, clab, spec)
        record = preflight.new_record(self, clab, plan, limits, pre)
        lab, timings, b = clab.name, record.timings, build.Build(clab, spec, record, plan)
        try:
            with signals_raise():
                saved = False
                try:
                    st.save(record)
                    saved = True  # from here a missing record means another command's down
                    self.made = lab  # a late interrupt (after the return below) is the caller's to undo
                    st.ledger_add(list(record.namespaces.values()) + (plan.namespaces if plan is not None else []), lab)
                    with timed(timings, "build_s"):
                        try:
                            for key, step in b.steps():
                                with timed(timings, key):
                                    step()
                        finally:
                            b.close()
                        with timed(timings, "frr_s"):
                            self._start_frr(b.frr_clab(), record)
                    if st.taken_down(record):  # by another command meanwhile: not up after all
                        raise LabGoneError(lab, "up", ": up stopped and removed what was left")
                    record.phase = "started"
                    return st.update(record)
                except BaseException as exc:
                    gone = isinstance(exc, LabGoneError) or (saved and st.gone(lab)) or (  # another's down
                        "namespaces_s" in timings and st.taken_down(record))
                    with signals_ignored():
                        self._kill_children()
                        if gone and st.load(lab) is None:  # what up made after that down: all of it
                            st.resave(record)
                        self.down(lab, also=list(record.namespaces.values())
                                  + (plan.namespaces if plan is not None else []))
                        self.made = None
                    intr = interruption(exc)  # a helper killed by the same Ctrl-C: the Ctrl-C
                    if intr is not None and intr is not exc:
                        raise intr from None
                    if gone and not isinstance(exc, (KeyboardInterrupt, LabGoneError)):
                        raise LabGoneError(lab, "up", ": up stopped and removed what was left") from None
                    raise
        except RailabError:
            raise
        except KeyboardInterrupt:
            raise
        except OSError as exc:
            raise RailabError(f"lab {lab}: up failed ({exc}); everything it made was removed") from exc

    def mark_converged(self, lab: str, converge_s: float) -> st.LabState:
        """Record the convergence (:meth:`Runtime.mark_converged`), then put FRR's default RIB
        hold back on the zebras ``up`` started with the bring-up hold (railab.testbed.runtime.netns
        .ribhold), timed as ``timings["rib_release_s"]``; a zebra that did not take it is named in
        ``notes`` (it still routes, with route changes processed up to the hold later)."""
        record = super().mark_converged(lab, converge_s)
        if not any(ribhold.held(lab, n) for n in record.routers):
            return record
        t0 = time.monotonic()
        failed = ribhold.release(lab, list(record.routers))
        record.timings["rib_release_s"] = round(time.monotonic() - t0, 3)
        if failed:
            print(f"note: lab {lab}: zebra's bring-up RIB hold not released on {len(failed)} router(s) "
                  "(route changes there are processed up to "
                  f"{ribhold.hold_ms()} ms late): " + "; ".join(failed[:5]), file=sys.stderr)
        return st.update(record)
