"""Which lab a user's ``LAB`` argument names: :func:`lab_name`.

``LAB`` is a lab directory, its ``lab.json`` or ``<lab>.clab.yml``, or the name of a recorded
(running) lab. What ``railab down``, ``status``, ``exec`` and ``inspect`` need of it; the record
and the lab model come with railab.testbed.labref ``resolve``, which loads the lab model
(railab.topologies.labspec) those commands do not need. This module reads a ``.clab.yml`` with
railab.testbed.clabfile, which the runtimes they load import anyway; ``railab list`` imports
neither (docs/architecture.md, "Imports").
"""

from __future__ import annotations

import json
from pathlib import Path

from railab.errors import RailabError, UsageError
from railab.testbed.clabfile import load_clab
from railab.testbed.state import running_labs
from railab.topologies.naming import is_lab_name


def lab_json_name(path: Path) -> str:
    """The ``name`` in the lab.json at ``path``; UsageError (exit 2) naming the file when it is
    not JSON or names no lab."""
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}): regenerate it (railab generate INTENT -o DIR)") from None
    name = doc.get("name") if isinstance(doc, dict) else None
    if not isinstance(name, str):
        raise UsageError(f"{path}: no lab name (a lab.json holds a top-level \"name\")")
    return name


def lab_name(ref: str | Path) -> str:
    """The name of the lab ``ref`` names: the ``name`` of the lab.json of an existing lab
    directory (or of that lab.json), else the clab file's ``name:`` (a ``.clab.yml``, or a
    directory holding one), else ``ref`` itself as a lab name.

    Raises RailabError when ``ref`` is neither an existing lab path nor a valid lab name
    (``^[a-z][a-z0-9-]{0,31}$``, railab.topologies.naming); UsageError (exit 2) naming the file
    for a lab.json that is not JSON or names no lab, or a clab file that is not valid
    (railab.testbed.clabfile ``load_clab``)."""
    p = Path(ref)
    if p.exists():
        labdir = p if p.is_dir() else p.parent
        if (labdir / "lab.json").is_file():
            return lab_json_name(labdir / "lab.json")
        return load_clab(p).name
    name = str(ref)
    if not is_lab_name(name):
        raise RailabError(f"{name!r} is neither a lab directory nor a lab name; {running_labs()}")
    return name
