"""Time dilation of a capacity lab for one run: every shaped port slowed to a lower lab rate.

A capacity lab (``lab.capacity``, :mod:`railab.testbed.capacity`) runs its ports at
``port_rate_mbps`` and stands for ``fabric_rate_gbps`` ports, so one lab second is
``time_scale`` fabric seconds' worth of bytes (``qos.capacity.time_scale``). Every threshold is
in bytes (queues, ECN Kmin/Kmax, PFC xOFF/xON, the shared buffer) and every timer in fabric time
(DCQCN, the CNP interval, the PFC and load-balancing agents' cycles, flowlet gaps): the
emulation is the same fabric at any lab rate, only slower or faster in wall time. That is the
time-dilation technique of network emulation (Gupta et al., "To Infinity and Beyond:
Time-Warped Network Emulation", NSDI 2006): run the whole fabric slower than real time so the
host, not fast enough for real time, keeps up.

Why railab needs it: an incast fills one port, so 8 senders need one port's packets per second;
a collective runs every NIC at line rate at once. ``mini-lossless`` has 32 NICs at 200 Mb/s:
~193,000 RoCE frames/s each way, each forwarded by one to three switches on the same 2 CPUs. A
collective on it measured the host (keeps_rate false, an all-reduce's busbw 41-46 % of its
line-rate bound). At 50 Mb/s the same all-reduce keeps its rate with busbw 94-97 % of the
bound; the all-to-all, whose frames cross more switches, at 20-25 Mb/s. So ``railab collective`` and
``railab lb compare --workload <collective>`` slow the ports for the run to a rate the host can
carry (:func:`railab.traffic.collective.fitting_rate_mbps`), state it (``port_rate_mbps``,
``time_scale``, ``lab_port_rate_mbps``) and put the lab's own rate back.

What changes, per shaped port: the htb classes' rate and ceil (``tc class change``: queues
keep their packets), the lines of :func:`railab.testbed.capacity.tc_batch` for the new rate,
and the lossless tbf's unpaused rate (twice the port's): the PFC agent of a dilated run writes
that tbf at the run's rate and leaves it so when it closes, so the restore must put the lab's
back (before 2026-12-06 it did not: after a collective every lossless class stayed capped at
twice the dilated rate, 40 Mb/s on a 200 Mb/s lab, and later incasts built no queue). A tbf a
``pfc-storm`` fault holds (the lab's storm file) stays paused, and a link a ``link-speed`` fault
holds (the lab's state record, :func:`railab.testbed.capacity.trained_speeds`) runs at its
trained share of the run's rate, and of the lab's once restored; a fault healed meanwhile is
not put back. The nft ECN tables and the PFC agent read their rates from the spec the run
passes them (:func:`dilated` yields it; the agent's ports carry the trained speeds too).

A marker file (``/run/railab/<lab>/dilation.json``: the PID, the lab's rate and the run's) lives
while the lab is slowed; :func:`restore_leftover` (every load run calls it) puts the lab's own
rate back when the process that slowed it is gone (``kill -9``): a later run never measures a
lab slower than its spec says. ``railab down`` removes the marker with the lab.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed import capacity
from railab.testbed import state as st
from railab.testbed.namespaces import exec_argv, run_batches
from railab.testbed.runtime.netns.procs import _alive  # a zombie (a killed run not reaped) is dead
from railab.testbed.signals import signals_deferred
from railab.topologies.labspec import LabSpec

#: the marker in the lab's run directory while its ports run slower than its spec says
MARKER = "dilation.json"
#: the slowest lab port rate a run may use (Mb/s): a 1 MiB collective then takes ~20 lab s a
#: NIC; slower, a run looks hung (a reviewer's 0.001 Mb/s was still running after 60 s) and
#: the rate nears the PFC emulation's paused rate (8 kbit/s)
MIN_RATE_MBPS = 1.0

__all__ = ["MARKER", "at_rate", "dilated", "leftover", "restore_leftover", "retime", "running_spec",
           "slowed_by"]


def at_rate(spec: LabSpec, rate_mbps: float) -> LabSpec:
    """A copy of ``spec`` whose ``qos.capacity.port_rate_mbps`` is ``rate_mbps`` (its
    ``time_scale`` follows). UsageError for a rate <= 0 or a lab without lab.capacity."""
    cap = spec.qos.capacity
    if not cap.enabled:
        raise UsageError(f"lab {spec.name} has no lab.capacity: its ports have no rate to change")
    if not rate_mbps >= MIN_RATE_MBPS:
        raise UsageError(f"port rate {rate_mbps:g} Mb/s: it must be at least {MIN_RATE_MBPS:g} Mb/s")
    cap2 = cap.model_copy(update={"port_rate_mbps": float(rate_mbps)})
    return spec.model_copy(update={"qos": spec.qos.model_copy(update={"capacity": cap2})})


def _change_lines(spec: LabSpec, paused: frozenset[tuple[str, str]] = frozenset(),
                  speeds: Mapping[tuple[str, str], float] | None = None) -> dict[str, str]:
    """Per node, the ``tc -batch`` lines that move every shaped port to ``spec``'s rates
    (:func:`railab.testbed.capacity.rate_lines`: the htb classes of
    :func:`railab.testbed.capacity.tc_batch` as ``class change``, and the lossless tbf as the
    PFC agent writes it at rest) -- paused for the ports in ``paused`` ``(node, port)``: a
    ``pfc-storm`` fault holds them (a reviewer saw a dilated run's restore clear a storm the
    fault list still showed, and ``check`` then pass); at the speed ``speeds`` gives a link end
    (``{(node, port): Gb/s}``: a ``link-speed`` fault's link, both ends,
    :func:`railab.testbed.capacity.trained_speeds`), else its planned one. The root qdisc, the
    DSCP filter and the control queue stay as they are."""
    out: dict[str, list[str]] = {}
    for p in capacity.ports(spec, speeds):
        out.setdefault(p.node, []).append(capacity.rate_lines(p, spec.qos, paused=p.key in paused))
    return {n: "".join(lines) for n, lines in out.items()}


def retime(spec: LabSpec, netns_of: Callable[[str], str]) -> None:
    """Set every shaped port of the running lab to ``spec``'s rates (``at_rate(...)`` for a
    dilated run, the lab's own spec to restore): one ``tc -batch`` per node, in parallel. The
    faults the lab holds now are kept: a ``pfc-storm``'s port stays paused, a ``link-speed``
    fault's link at its trained share of the rate (both read from the lab's run directory and
    state record at the call, so a fault healed during a dilated run is not put back by its
    restore). RailabError naming the node when tc refuses."""
    held = frozenset(capacity.read_storms(st.lab_dir(spec.name)))
    speeds = capacity.trained_speeds(spec.name)
    run_batches({n: (exec_argv(netns_of(n), ["tc", "-batch", "-"]), text)
                 for n, text in _change_lines(spec, held, speeds).items()}, "tc (port rate)")


def running_spec(spec: LabSpec) -> LabSpec:
    """``spec`` at the rate the running lab's ports run at now: a live dilated run's
    (:func:`slowed_by` names a live PID: :func:`at_rate` of its ``run_rate_mbps``), else
    ``spec`` itself (a leftover marker of a dead run is :func:`restore_leftover`'s to undo)."""
    m = slowed_by(spec.name)
    if m is None or not _alive(int(m.get("pid", 0))) or not m.get("run_rate_mbps"):
        return spec
    return at_rate(spec, float(m["run_rate_mbps"]))


def _marker(lab: str) -> Path:
    return st.lab_dir(lab) / MARKER


def slowed_by(lab: str) -> dict | None:
    """The marker of a lab whose ports run slower than its spec (``{"pid", "lab_rate_mbps",
    "run_rate_mbps"}``), or None."""
    try:
        return json.loads(_marker(lab).read_text())
    except (OSError, ValueError):
        return None


def leftover(lab: str) -> dict | None:
    """The marker (:func:`slowed_by`) of a process that slowed ``lab`` and is gone (killed before
    its restore: the ports still run at its rate), or None."""
    m = slowed_by(lab)
    return None if m is None or _alive(int(m.get("pid", 0))) else m


def restore_leftover(spec: LabSpec, netns_of: Callable[[str], str]) -> bool:
    """Put the lab's own port rate (``spec``'s) back when a process that slowed it is gone
    (:func:`leftover`); True when it did. A live process's marker (the run in progress, this
    one included) is left alone."""
    m = leftover(spec.name)
    if m is None:
        return False
    own = float(m.get("lab_rate_mbps") or spec.qos.capacity.port_rate_mbps)
    with signals_deferred():
        retime(at_rate(spec, own), netns_of)  # the marker's own rate, whatever spec says
        _marker(spec.name).unlink(missing_ok=True)
    return True


@contextmanager
def dilated(spec: LabSpec, netns_of: Callable[[str], str], rate_mbps: float) -> Iterator[LabSpec]:
    """Run the block with every shaped port of the running lab ``spec`` at ``rate_mbps`` (lab
    Mb/s) and yield the spec of that rate (:func:`at_rate`: pass it to everything the block
    runs, so rates, the time scale and the agents agree). At the lab's own rate nothing changes
    and ``spec`` itself is yielded. The lab's rate is back when the block exits, however it
    exits (a Ctrl-C waits for the restore; ``kill -9``: :func:`restore_leftover`).
    UsageError for a rate <= 0 or above the lab's own (a lab is never run faster than it was
    built: its queues and agents were sized for its rate)."""
    own = spec.qos.capacity.port_rate_mbps
    if rate_mbps > own:
        raise UsageError(f"port rate {rate_mbps:g} Mb/s is above lab {spec.name}'s own {own:g} "
                         f"Mb/s: a run may only slow the lab down")
    restore_leftover(spec, netns_of)
    if rate_mbps == own:
        yield spec
        return
    slow = at_rate(spec, rate_mbps)
    if st.gone(spec.name):
        raise RailabError(f"lab {spec.name} is not up (or went down meanwhile)")
    with signals_deferred():
        _marker(spec.name).write_text(json.dumps(
            {"pid": os.getpid(), "lab_rate_mbps": own, "run_rate_mbps": float(rate_mbps)}))
        try:
            retime(slow, netns_of)
        except BaseException:
            retime(spec, netns_of)
            _marker(spec.name).unlink(missing_ok=True)
            raise
    try:
        yield slow
    finally:
        with signals_deferred():
            retime(spec, netns_of)
            _marker(spec.name).unlink(missing_ok=True)
