"""On-disk records of running labs: ``/run/railab/<lab>/state.json`` and the namespace ledger.

Ownership rule (see docs/runtime.md): railab removes only what it recorded.

* ``/run/railab/<lab>/state.json`` is written *before* anything is created and rewritten after
  each step, so a crash at any point leaves a record that ``railab down <lab>`` can act on.
* ``/run/railab/netns.d/<namespace>`` (the ledger) holds the lab name of every network namespace
  railab created; a namespace gets its ledger file before it exists and loses it only after it
  is deleted. ``railab down --all`` sweeps ledger namespaces, never other ``clab-*`` namespaces
  (containerlab's own labs use the same prefix).

``RAILAB_RUN_DIR`` overrides ``/run/railab`` (tests only).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from railab.topologies.naming import LAB_NAME

STATE_VERSION = 1

def run_root() -> Path:
    """Root of railab's runtime records (``/run/railab``, or ``$RAILAB_RUN_DIR``)."""
    return Path(os.environ.get("RAILAB_RUN_DIR", "/run/railab"))


def lab_dir(lab: str) -> Path:
    """``/run/railab/<lab>``: the lab's state file and per-node FRR run directories."""
    return run_root() / lab


def node_dir(lab: str, node: str) -> Path:
    """``/run/railab/<lab>/<node>``: pid files, vty sockets, zserv socket, logs of one node."""
    return lab_dir(lab) / node


def state_path(lab: str) -> Path:
    return lab_dir(lab) / "state.json"


def ledger_dir() -> Path:
    return run_root() / "netns.d"


def load(lab: str) -> dict[str, Any] | None:
    """The recorded state of ``lab``, or None when there is none (or it is unreadable)."""
    try:
        return json.loads(state_path(lab).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def save(state: dict[str, Any]) -> None:
    """Atomically write ``state`` (must hold ``lab``) to its state.json."""
    path = state_path(state["lab"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def labs() -> list[str]:
    """Names of every lab with a run directory under the run root (sorted)."""
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != ledger_dir().name)


def ledger_add(namespaces: list[str], lab: str) -> None:
    """Record that railab (lab ``lab``) owns ``namespaces``; call before creating them."""
    d = ledger_dir()
    d.mkdir(parents=True, exist_ok=True)
    for ns in namespaces:
        (d / ns).write_text(lab + "\n")


def ledger_remove(ns: str) -> None:
    """Forget ``ns`` (after it was deleted)."""
    try:
        (ledger_dir() / ns).unlink()
    except FileNotFoundError:
        pass


def ledger() -> dict[str, str]:
    """Namespace -> owning lab name, for every namespace railab created and not yet removed."""
    d = ledger_dir()
    if not d.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(d.iterdir())}


def remove_lab_dir(lab: str) -> None:
    """Delete ``/run/railab/<lab>`` (idempotent)."""
    shutil.rmtree(lab_dir(lab), ignore_errors=True)


def running_lab_in(directory: str | Path) -> str | None:
    """The name of the running lab whose lab directory is ``directory``, or None.

    ``railab generate`` and ``railab up INTENT`` refuse to write into such a directory: the
    checks and traffic read the running lab's lab.json from there.
    """
    want = Path(directory).resolve()
    for lab in labs():
        record = load(lab) or {}
        if record.get("labdir") and Path(record["labdir"]).resolve() == want:
            return lab
    return None


class LabRef:
    """What a user's ``LAB`` argument names: a lab directory, its ``lab.json`` or
    ``<lab>.clab.yml``, or the name of a recorded (running) lab.

    ``name``: the lab name; ``labdir``: the lab directory (None when only a name was given and
    nothing is recorded); ``record``: the runtime state (None when the lab is not up).
    """

    def __init__(self, name: str, labdir: Path | None, record: dict[str, Any] | None) -> None:
        self.name, self.labdir, self.record = name, labdir, record

    @property
    def running(self) -> bool:
        return bool(self.record) and self.record.get("phase") == "running"

    def spec(self):
        """The lab's LabSpec; RailabError when there is no lab directory or no lab.json."""
        from railab.errors import RailabError
        from railab.topologies.labspec import LabSpec

        if self.labdir is None:
            raise RailabError(f"lab {self.name!r} is not up and no lab directory was given ({running_labs()})")
        try:
            return LabSpec.load(self.labdir)
        except FileNotFoundError as exc:
            raise RailabError(f"lab {self.name}: {exc}") from None

    def require_up(self) -> dict[str, Any]:
        """The runtime record; RailabError naming the running labs when the lab is not up."""
        from railab.errors import RailabError

        if self.record is None:
            raise RailabError(f"lab {self.name!r} is not up (no {state_path(self.name)}): "
                              f"`railab up` it first ({running_labs()})")
        return self.record

    def netns_of(self, node: str) -> str:
        """The node's recorded namespace, else the shared ``clab-<lab>-<node>`` name."""
        from railab.topologies.naming import netns_name

        return ((self.record or {}).get("namespaces") or {}).get(node) or netns_name(self.name, node)


def running_labs() -> str:
    """``labs up here: a, b`` or ``no lab is up here`` (for error messages)."""
    names = labs()
    return f"labs up here: {', '.join(names)}" if names else "no lab is up here"


def resolve(ref: str | Path) -> LabRef:
    """Resolve a ``LAB`` argument (see LabRef). Raises RailabError when ``ref`` is neither an
    existing lab path nor a valid lab name (``^[a-z][a-z0-9-]{0,31}$``)."""
    from railab.errors import RailabError

    p = Path(ref)
    if p.exists():
        labdir = p if p.is_dir() else p.parent
        if (labdir / "lab.json").is_file():
            name = json.loads((labdir / "lab.json").read_text())["name"]
        else:
            from railab.testbed.clabfile import load_clab

            name = load_clab(p).name
        return LabRef(name, labdir.absolute(), load(name))
    name = str(ref)
    if not LAB_NAME.match(name):
        raise RailabError(f"{name!r} is neither a lab directory nor a lab name; {running_labs()}")
    record = load(name)
    labdir = Path(record["labdir"]) if record and record.get("labdir") else None
    return LabRef(name, labdir, record)
