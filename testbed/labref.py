"""The lab a user's ``LAB`` argument names, with its record and lab model: :func:`resolve`
(the one lab resolver) -> :class:`LabRef`.

Imports the lab model (railab.topologies.labspec) at the top, for :meth:`LabRef.spec`: the
commands that need only a lab's name (``railab down``, ``status``, ``exec``, ``inspect``) take
railab.testbed.labname ``lab_name`` instead, and ``railab list`` neither (docs/architecture.md,
"Imports").
"""

from __future__ import annotations

from pathlib import Path

from railab.errors import RailabError
from railab.testbed.labname import lab_name
from railab.testbed.state import LabState, load, running_labs, state_path
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name


class LabRef:
    """What a user's ``LAB`` argument names: a lab directory, its ``lab.json`` or
    ``<lab>.clab.yml``, or the name of a recorded (running) lab.

    ``name``: the lab name; ``labdir``: the lab directory (None when only a name was given and
    nothing is recorded); ``record``: the runtime state (None when the lab is not up).
    """

    def __init__(self, name: str, labdir: Path | None, record: LabState | None) -> None:
        self.name, self.labdir, self.record = name, labdir, record

    @property
    def running(self) -> bool:
        """True when the lab is recorded and converged (phase ``running``)."""
        return self.record is not None and self.record.phase == "running"

    def spec(self) -> LabSpec:
        """The lab's LabSpec; RailabError when there is no lab directory or no lab.json."""
        if self.labdir is None:
            raise RailabError(f"lab {self.name!r} is not up and no lab directory was given ({running_labs()})")
        try:
            return LabSpec.load(self.labdir)
        except FileNotFoundError as exc:
            raise RailabError(f"lab {self.name}: {exc}") from None

    def require_up(self) -> LabState:
        """The runtime record; RailabError naming the running labs when the lab is not up."""
        if self.record is None:
            raise RailabError(f"lab {self.name!r} is not up (no {state_path(self.name)}): "
                              f"`railab up` it first ({running_labs()})")
        return self.record

    def netns_of(self, node: str) -> str:
        """The node's recorded namespace, else the shared ``clab-<lab>-<node>`` name."""
        recorded = self.record.namespaces if self.record is not None else {}
        return recorded.get(node) or netns_name(self.name, node)


def resolve(ref: str | Path) -> LabRef:
    """Resolve a ``LAB`` argument (see LabRef; its name as railab.testbed.labname ``lab_name``
    reads it). Raises RailabError when ``ref`` is neither an existing lab path nor a valid lab
    name (``^[a-z][a-z0-9-]{0,31}$``); UsageError (exit 2) for a lab.json or clab file that
    names no lab."""
    name = lab_name(ref)
    p = Path(ref)
    if p.exists():
        return LabRef(name, (p if p.is_dir() else p.parent).absolute(), load(name))
    record = load(name)
    labdir = Path(record.labdir) if record is not None and record.labdir else None
    return LabRef(name, labdir, record)
