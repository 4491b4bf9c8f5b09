"""On-disk records of running labs: ``/run/railab/<lab>/state.json`` and the namespace ledger.

Ownership rule (see docs/runtime.md): railab removes only what it recorded.

* ``/run/railab/<lab>/state.json`` is written *before* anything is created and rewritten after
  each step, so a crash at any point leaves a record that ``railab down <lab>`` can act on.
* ``/run/railab/netns.d/<namespace>`` (the ledger) holds the lab name of every network namespace
  railab created; a namespace gets its ledger file before it exists and loses it only after it
  is deleted. ``railab down --all`` sweeps ledger namespaces, never other ``clab-*`` namespaces
  (containerlab's own labs use the same prefix).

The record itself is :class:`LabState` (pydantic), stored as JSON. ``RAILAB_RUN_DIR``
overrides ``/run/railab`` (tests only).

Light on purpose: every command reads state (``railab list`` nothing else). Which lab a user's
``LAB`` argument names is railab.testbed.labname ``lab_name`` (reads a ``.clab.yml``) and, with
its record and lab model, railab.testbed.labref ``resolve`` (docs/architecture.md, "Imports").
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from railab.errors import RailabError, UsageError
from railab.topologies.atomicfile import write_atomic

STATE_VERSION = 1


def invoking_user() -> str:
    """The user who ran railab: ``$SUDO_USER`` when set (``sudo railab up``), else the login
    user (``getpass.getuser``: ``LOGNAME``/``USER``/... then the password database)."""
    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class _Record(BaseModel):
    """Base of the state models: unknown keys are kept (records of other versions), and a
    read-only dict view (``rec["lab"]``, ``rec.get("phase")``, ``"lab" in rec``) for callers
    that still treat the record as the JSON dict."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    def _keys(self) -> set[str]:
        return set(type(self).model_fields) | set(self.model_extra or {})

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` when there is no such field (or it is None)."""
        value = getattr(self, key, None) if key in self._keys() else None
        return default if value is None else value


class RouterState(_Record):
    """One FRR node of a netns lab: run ``dir`` (``/run/railab/<lab>/<node>``), ``config``
    (its frr.conf), ``daemons`` in start order, ``pids`` daemon -> PID once started."""

    dir: str
    config: str
    daemons: list[str] = Field(default_factory=list)
    pids: dict[str, int] = Field(default_factory=dict)


#: Fault kinds :mod:`railab.testbed.faults` injects (``FaultRecord.kind``).
FAULT_KINDS = ("link-down", "link-flap", "carrier-loss", "cable-pull", "cross-cable", "session-shut",
               "wrong-asn", "daemon-kill", "node-off", "grey-loss", "mtu", "pfc-storm",
               "pfc-priority", "link-speed")


class FaultRecord(_Record):
    """One injected fault (railab.testbed.faults), kept in ``LabState.faults`` until healed.

    ``id``: ``f1``, ``f2``, ... in injection order; ``kind``: one of :data:`FAULT_KINDS`;
    ``node``/``port``: the faulty element (the end acted on); ``peer_node``/``peer_port``: the
    far end of its link (or the second NIC of a cross-cable), None when the fault is node-wide;
    ``params``: what the heal needs and the knobs used (e.g. ``{"percent": 5, "roce_only":
    true}``, ``{"mtu": 1500, "old_mtu": 9100}``, ``{"daemon": "bgpd"}``, MACs of a pulled
    cable); ``injected_at``: Unix time (s); ``note``: one human sentence, e.g. ``"admin down
    g1-leaf1:eth3 (link to spine1:eth1)"``. Recorded *before* the kernel is touched, so a crash
    mid-way is still healable (every heal step is idempotent).
    """

    id: str
    kind: str
    node: str
    port: str | None = None
    peer_node: str | None = None
    peer_port: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    injected_at: float = Field(default_factory=time.time)
    note: str = ""


class LabState(_Record):
    """The runtime record of one lab (``/run/railab/<lab>/state.json``).

    ``phase``: ``creating`` / ``deploying`` (being made), ``started`` (deployed, not yet known
    converged), ``converging``, ``running`` (converged: :meth:`Runtime.mark_converged`).
    ``created``: Unix time (s); ``user``: who brought it up (:func:`invoking_user`);
    ``namespaces``: node -> network namespace; ``links``: ``[a "node:if", b "node:if", mtu]``;
    ``routers``: FRR nodes (netns runtime); ``containers``: node -> container (containerlab);
    ``timings``: step -> seconds; ``solicit``: the Router Solicitations of the netns runtime's
    ``up`` (``sent``, ``wait_s`` for the zebras, ``send_s``); ``host_sysctls``: host-wide sysctls raised, ``{key: [old,
    new]}`` (never undone); ``host_limits``: resource limits ``up`` raised in its own process,
    ``{"RLIMIT_NOFILE": [old soft, new soft]}``; ``faults``: the faults injected and not yet
    healed (:class:`FaultRecord`, railab.testbed.faults); ``fault_seq``: the last fault number
    given out (ids are never reused within a lab's life); ``agents``: helper processes running
    for the lab, name -> PID (the PFC emulation, railab.testbed.pfc; ``down`` kills them);
    ``ipv6_repairs``: the ports whose IPv6 link-local state the kernel left incomplete and the
    convergence wait restarted, ``"node:port: what was missing"`` (Runtime.repair_ports);
    ``load_balancing``: the leaves' load-balancing mode (railab.testbed.lb: ``ecmp``, the
    default, ``spray-rr``, ``spray-random``, ``flowlet``, ``pbr``, ``wcmp``), set by ``railab lb
    LAB MODE`` or at bring-up from lab.json; ``load_balancing_spines``: the spray modes spray at
    the spines too (``--spines``).
    """

    version: int = STATE_VERSION
    lab: str
    runtime: str = "netns"
    phase: str = "creating"
    labdir: str | None = None
    clab_file: str | None = None
    created: float = Field(default_factory=time.time)
    user: str = Field(default_factory=invoking_user)
    namespaces: dict[str, str] = Field(default_factory=dict)
    links: list[tuple[str, str, int]] = Field(default_factory=list)
    routers: dict[str, RouterState] = Field(default_factory=dict)
    containers: dict[str, str] = Field(default_factory=dict)
    docker_url: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    solicit: dict[str, float] = Field(default_factory=dict)
    host_sysctls: dict[str, tuple[int, int]] = Field(default_factory=dict)
    host_limits: dict[str, tuple[int, int]] = Field(default_factory=dict)
    faults: list[FaultRecord] = Field(default_factory=list)
    fault_seq: int = 0
    agents: dict[str, int] = Field(default_factory=dict)
    ipv6_repairs: list[str] = Field(default_factory=list)
    load_balancing: str = "ecmp"
    load_balancing_spines: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON document as stored (plain dicts and lists)."""
        return self.model_dump(mode="json")


def run_root() -> Path:
    """Root of railab's runtime records (``/run/railab``, or ``$RAILAB_RUN_DIR``)."""
    return Path(os.environ.get("RAILAB_RUN_DIR", "/run/railab"))


def cache_dir() -> Path:
    """``/run/railab/.cache``: what railab remembers across labs: FRR configs ``vtysh -C``
    already passed (``frr-config-ok/``, railab.testbed.runtime.netns) and clab topologies that
    passed containerlab's schema (``clab-schema-ok/``, ``railab up`` of an intent). Not a lab:
    lab names never start with a dot, and :func:`labs` skips it. Removing it only costs a
    re-check."""
    return run_root() / ".cache"


def lab_dir(lab: str) -> Path:
    """``/run/railab/<lab>``: the lab's state file and per-node FRR run directories."""
    return run_root() / lab


def exercise_root() -> Path:
    """Root of the hidden training-exercise records (``/var/lib/railab/exercises``, or
    ``$RAILAB_EXERCISE_DIR``): outside ``/run/railab`` and outside every lab directory, so
    ``status``, ``inspect`` and the lab directory do not show them (railab.testbed.exercise)."""
    return Path(os.environ.get("RAILAB_EXERCISE_DIR", "/var/lib/railab/exercises"))


def exercise_dir(lab: str) -> Path:
    """``<exercise root>/<lab>``: one lab's exercise record; removed with the lab
    (:func:`remove_lab_dir`, called by every runtime's ``down``)."""
    return exercise_root() / lab


def node_dir(lab: str, node: str) -> Path:
    """``/run/railab/<lab>/<node>``: pid files, vty sockets, zserv socket, logs of one node."""
    return lab_dir(lab) / node


def state_path(lab: str) -> Path:
    """``/run/railab/<lab>/state.json``."""
    return lab_dir(lab) / "state.json"


def ledger_dir() -> Path:
    """``/run/railab/netns.d``: one file per namespace railab made, holding its lab name."""
    return run_root() / "netns.d"


def load(lab: str) -> LabState | None:
    """The recorded state of ``lab``, or None when there is none (or it is unreadable)."""
    try:
        return LabState.model_validate_json(state_path(lab).read_text())
    except (FileNotFoundError, NotADirectoryError, ValidationError):
        return None


def unreadable(lab: str) -> bool:
    """True when ``lab`` has a state.json that cannot be read as a LabState (corrupt, truncated,
    not JSON, or not readable): its owner and runtime are unknown (see ``railab down --all``)."""
    path = state_path(lab)
    if not path.exists():
        return False
    try:
        LabState.model_validate_json(path.read_text())
    except (ValidationError, OSError, UnicodeDecodeError):
        return True
    return False


def save(state: LabState | Mapping[str, Any]) -> LabState:
    """Atomically write ``state`` (a LabState, or a mapping validated into one: it must hold
    ``lab``) to its state.json; returns the LabState written. ValidationError on a bad mapping."""
    rec = state if isinstance(state, LabState) else LabState.model_validate(dict(state))
    path = state_path(rec.lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(rec.to_json(), indent=2, sort_keys=True) + "\n")
    return rec


def resave(state: LabState, tries: int = 100) -> None:
    """:func:`save` for a rollback that must record what it made while another command's
    ``down`` removes the lab's run directory: that down's ``rmtree`` can take the directory away
    between save's ``mkdir`` and its rename (FileNotFoundError: CI, an ``up`` taken down at its
    first record); retried every 20 ms, 2 s at most, then raised."""
    for _ in range(tries - 1):
        try:
            save(state)
            return
        except FileNotFoundError:
            time.sleep(0.02)
    save(state)


def update(state: LabState) -> LabState:
    """:func:`save` for a lab that is up: RailabError (``lab ... went down meanwhile``) instead
    of writing when the lab is gone or a ``down`` is removing it (:func:`gone`). A command on a
    running lab (a fault, a drill's heal, the PFC agent's record) must not bring back the state
    file and run directory another command's ``down`` removed: the lab would read as up (and
    be left behind) while its namespaces are gone."""
    if gone(state.lab):
        raise RailabError(f"lab {state.lab} went down meanwhile (railab down from another command)")
    d = lab_dir(state.lab)
    path = state_path(state.lab)
    gone_msg = f"lab {state.lab} went down meanwhile (railab down from another command)"
    if not d.is_dir():  # a down finished between the check and here
        raise RailabError(gone_msg)
    try:
        write_atomic(path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    except FileNotFoundError:  # ... or took the directory while this wrote into it
        raise RailabError(gone_msg) from None
    return state


#: ``LabState.phase`` values of a lab that is still being brought up (not yet ``running``)
COMING_UP = ("creating", "deploying", "started", "converging")


def already_up(lab: str) -> str:
    """The refusal for a second ``up`` of lab ``lab`` whose run directory exists: "is already
    up" for a lab that converged, "is coming up (phase ...)" while another ``up`` is still
    making it, both ending with what to do."""
    rec = None
    try:
        rec = load(lab)
    except (OSError, ValueError, RailabError):
        pass
    if rec is not None and rec.phase in COMING_UP:
        return (f"lab {lab} is coming up (phase {rec.phase}, another railab up): wait for it, or "
                f"railab down {lab} to stop it (or --name NEW for a second lab)")
    return f"lab {lab} is already up: railab down {lab} (or --name NEW for a second lab)"


STATE_LOCK_FILE = "state.lock"
_STATE_RLOCK = threading.RLock()  # the threads of one process (the flock is per process)
_STATE_HELD: dict[str, int] = {}  # lab -> depth of state_lock this process holds


@contextmanager
def state_lock(lab: str) -> Iterator[None]:
    """An exclusive lock on ``lab``'s record for one read-modify-write: an flock on
    ``/run/railab/<lab>/state.lock`` (other processes) under a lock of this process's threads,
    re-entrant within the process. Waits for the holder (a write takes milliseconds); the lock
    goes with its process. RailabError (``lab ... went down meanwhile``) when the lab's run
    directory is gone: the lock file is never made outside it, so it never brings back a lab
    another command's ``down`` removed. Used by :func:`modify`."""
    gone_msg = f"lab {lab} went down meanwhile (railab down from another command)"
    with _STATE_RLOCK:
        if _STATE_HELD.get(lab):
            _STATE_HELD[lab] += 1
            try:
                yield
            finally:
                _STATE_HELD[lab] -= 1
            return
        try:
            f = open(lab_dir(lab) / STATE_LOCK_FILE, "a")  # noqa: SIM115 (held across the yield)
        except FileNotFoundError:
            raise RailabError(gone_msg) from None
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            _STATE_HELD[lab] = 1
            try:
                yield
            finally:
                _STATE_HELD.pop(lab, None)


def modify(lab: str, change: Callable[[LabState], None]) -> LabState:
    """Re-read ``lab``'s record, apply ``change`` to it and write it back, under
    :func:`state_lock` (:func:`update`'s rules: RailabError when the lab went down meanwhile).
    Every write to a running lab's record goes through it, so two commands changing different
    fields at the same moment (a fault injected while a load run records its PFC agent, ``railab
    lb compare`` putting the lab's mode back) both keep their change: a record read at a
    command's start and saved at its end wrote back every field of that moment (a reviewer,
    2026-12-06: a healed ``link-speed`` fault reapplied by the next dilated run)."""
    with state_lock(lab):
        rec = load(lab)
        if rec is None:
            raise RailabError(f"lab {lab} went down meanwhile (railab down from another command)")
        change(rec)
        return update(rec)


def labs() -> list[str]:
    """Names of every lab with a run directory under the run root (sorted)."""
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and p.name != ledger_dir().name and not p.name.startswith("."))


def ledger_add(namespaces: list[str], lab: str) -> None:
    """Record that railab (lab ``lab``) owns ``namespaces``; call before creating them."""
    d = ledger_dir()
    d.mkdir(parents=True, exist_ok=True)
    for ns in namespaces:
        write_atomic(d / ns, lab + "\n")  # a reader never sees an entry half written


def ledger_remove(ns: str) -> None:
    """Forget ``ns`` (after it was deleted)."""
    try:
        (ledger_dir() / ns).unlink()
    except FileNotFoundError:
        pass


def ledger() -> dict[str, str]:
    """Namespace -> owning lab name, for every namespace railab created and not yet removed.
    Another lab's ``down`` may remove entries while this reads: those are left out, not raised
    (a FileNotFoundError here failed a session teardown while a second lab went down)."""
    d = ledger_dir()
    if not d.is_dir():
        return {}
    out: dict[str, str] = {}
    for p in sorted(d.iterdir()):
        if p.name.startswith("."):
            continue
        try:
            out[p.name] = p.read_text().strip()
        except FileNotFoundError:
            continue
    return out


_HELD_LOCKS: set[str] = set()  # lock files this process holds (the locks are re-entrant)


def _try_flock(f) -> str | None:
    """Take an exclusive flock on open file ``f`` without waiting: None when taken, else the
    holder's record that the file holds (``another process`` when it is empty)."""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        return f.read().strip() or "another process"
    return None


@contextmanager
def holder_lock(path: str | Path, purpose: str, busy: Callable[[str], None]) -> Iterator[None]:
    """An exclusive flock on ``path`` for the block that records its holder (``purpose``, pid).
    When another process holds it, ``busy(holder)`` is called with that record: it raises to
    refuse, or returns to wait for the lock. Re-entrant within a process; the lock goes with
    its process, so a killed holder never leaves it taken. Used by :func:`load_lock` and
    railab.testbed.lb's ``lab_lock``."""
    path = Path(path)
    key = str(path.resolve()) if path.exists() else str(path)
    if key in _HELD_LOCKS:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        holder = _try_flock(f)
        if holder is not None:
            busy(holder)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"{purpose} (pid {os.getpid()})")
        f.flush()
        _HELD_LOCKS.add(key)
        try:
            yield
        finally:
            _HELD_LOCKS.discard(key)
            f.seek(0)
            f.truncate()
            f.flush()


LOAD_LOCK_FILE = "load.lock"


def load_lock(lab: str) -> AbstractContextManager[None]:
    """One load run at a time per lab: :func:`holder_lock` on ``/run/railab/<lab>/load.lock``,
    recording the command line. Two switch agents on one lab would pause, resume and reset each
    other's queues, and two engines' packets would share the ports each one measures. Raises
    UsageError naming the holder when another process holds it (``railab traffic``,
    ``collective``, ``lb compare`` or the console's load run). Re-entrant within a process (the
    traffic CLI takes it before the switch agent's session does). A lab that is not up (no
    ``/run/railab/<lab>``) gets no lock and no directory: one made here would list it as up
    (:func:`labs`) after the load run, which then fails anyway."""
    if not lab_dir(lab).is_dir():
        return nullcontext()

    def refuse(holder: str) -> None:
        raise UsageError(f"lab {lab} is busy: a load run is on it ({holder}); wait for it to "
                         "end or stop it with Ctrl-C, then run this again")

    argv = [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv else ["railab"]
    return holder_lock(lab_dir(lab) / LOAD_LOCK_FILE, " ".join(argv)[:200], refuse)


def load_holder(lab: str) -> str | None:
    """Who holds lab ``lab``'s load lock (:func:`load_lock`): the holder's record (command line
    and pid), or None when no load run is on the lab (or the lab is not up). Takes the lock for
    an instant to find out, never waits."""
    path = lab_dir(lab) / LOAD_LOCK_FILE
    if not path.is_file() or str(path.resolve()) in _HELD_LOCKS:
        return None
    with open(path, "a+") as f:
        holder = _try_flock(f)
        if holder is None:
            fcntl.flock(f, fcntl.LOCK_UN)
    return holder


def remove_lab_dir(lab: str) -> None:
    """Delete ``/run/railab/<lab>`` and the lab's exercise record, if any (idempotent). The
    state file goes first: a command still running on the lab reads the lab as gone
    (:func:`gone`) from the moment the :data:`REMOVING` marker is written until the end, never
    in between (``rmtree`` could remove the marker before the state file)."""
    try:
        state_path(lab).unlink()
    except FileNotFoundError:
        pass
    shutil.rmtree(lab_dir(lab), ignore_errors=True)
    shutil.rmtree(exercise_dir(lab), ignore_errors=True)


def running_lab_in(directory: str | Path) -> str | None:
    """The name of the running lab whose lab directory is ``directory``, or None.

    ``railab generate`` and ``railab up INTENT`` refuse to write into such a directory: the
    checks and traffic read the running lab's lab.json from there.
    """
    want = Path(directory).resolve()
    for lab in labs():
        record = load(lab)
        if record is not None and record.labdir and Path(record.labdir).resolve() == want:
            return lab
    return None


def running_labs() -> str:
    """``labs up here: a, b`` or ``no lab is up here`` (for error messages)."""
    names = labs()
    return f"labs up here: {', '.join(names)}" if names else "no lab is up here"


#: Marker a ``down`` leaves in the lab's run directory while it removes the lab (it goes with
#: the directory): a command still running on the lab (``up`` above all) can tell a lab another
#: command takes down from a failure of its own (:func:`taken_down`).
REMOVING = "removing"


def mark_removing(lab: str) -> None:
    """Say that ``lab`` is being taken down (``down`` calls it first; see :data:`REMOVING`)."""
    d = lab_dir(lab)
    if d.is_dir():
        (d / REMOVING).touch()


def gone(lab: str) -> bool:
    """Whether ``lab`` (known to have been up) has no state file any more, or a ``down`` is
    removing it (:data:`REMOVING`)."""
    return not state_path(lab).exists() or (lab_dir(lab) / REMOVING).exists()


def taken_down(state: LabState) -> bool:
    """Whether the lab of ``state`` (a command's own copy of the record) is being or was taken
    down by another command: its state file gone, the :data:`REMOVING` marker there, or, for
    the netns runtime, one of its recorded namespaces gone while the caller still holds it (call
    only once those namespaces were made)."""
    if gone(state.lab):
        return True
    return state.runtime == "netns" and any(
        not os.path.exists(f"/run/netns/{ns}") for ns in state.namespaces.values())
