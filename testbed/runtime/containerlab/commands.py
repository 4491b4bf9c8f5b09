"""containerlab's command lines and its ``inspect`` output, as pure functions (unit-tested
without the binary): the command side of railab.testbed.runtime.containerlab."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from railab.errors import RailabError
from railab.topologies.naming import netns_prefix

BINARY = "containerlab"
#: Suggestion appended to every "missing piece" error.
USE_NETNS = "or run the lab without Docker: `railab up LAB --runtime netns`"
DEPLOY_TIMEOUT_S = 900.0


# ---- command lines (pure) --------------------------------------------------------------------
def deploy_argv(clab_file: str | Path, *, reconfigure: bool = False, binary: str = BINARY) -> list[str]:
    """``containerlab deploy -t FILE [--reconfigure]`` (``--reconfigure`` re-creates a running
    lab's nodes from the file instead of failing on existing containers)."""
    argv = [binary, "deploy", "-t", str(clab_file)]
    if reconfigure:
        argv.append("--reconfigure")
    return argv


def destroy_argv(*, clab_file: str | Path | None = None, lab: str | None = None, binary: str = BINARY) -> list[str]:
    """``containerlab destroy -t FILE --cleanup`` or, without the file, ``--name LAB``.

    ``--cleanup`` also removes containerlab's lab directory (``clab-<lab>/``). ValueError when
    neither is given.
    """
    return [binary, "destroy", *_target(clab_file, lab), "--cleanup"]


def inspect_argv(*, clab_file: str | Path | None = None, lab: str | None = None, binary: str = BINARY) -> list[str]:
    """``containerlab inspect -t FILE --format json`` (or ``--name LAB``)."""
    return [binary, "inspect", *_target(clab_file, lab), "--format", "json"]


def _target(clab_file: str | Path | None, lab: str | None) -> list[str]:
    if clab_file is not None:
        return ["-t", str(clab_file)]
    if lab:
        return ["--name", lab]
    raise ValueError("give clab_file or lab")


# ---- inspect output (pure) -------------------------------------------------------------------
@dataclass(frozen=True)
class ClabContainer:
    """One row of ``containerlab inspect --format json``; ``node`` is the topology node name
    (container name without the ``clab-<lab>-`` prefix), "" when the prefix does not match."""

    lab: str
    name: str
    node: str
    container_id: str
    image: str
    kind: str
    state: str
    status: str
    ipv4_address: str
    ipv6_address: str
    owner: str
    lab_path: str

    @property
    def running(self) -> bool:
        return self.state == "running"


def parse_inspect(text: str) -> list[ClabContainer]:
    """Containers in ``containerlab inspect --format json`` output, sorted by (lab, name).

    Accepts the keyed form (``{"<lab>": [..]}``, containerlab >= 0.68), the flat form
    (``{"containers": [..]}``) and a bare list; ``{}`` / empty text mean no containers. Raises
    RailabError when the text is not JSON or rows lack ``name``.
    """
    text = text.strip()
    if not text:
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RailabError(f"containerlab inspect printed non-JSON output ({exc}): {text[:200]!r}") from None
    if isinstance(doc, list):
        rows: Iterable[Any] = doc
    elif isinstance(doc, dict):
        rows = [r for v in doc.values() if isinstance(v, list) for r in v]
    else:
        raise RailabError(f"containerlab inspect JSON is neither an object nor a list: {text[:200]!r}")
    out = []
    for r in rows:
        if not isinstance(r, dict) or not r.get("name"):
            raise RailabError(f"containerlab inspect row without a container name: {r!r}")
        lab = str(r.get("lab_name", ""))
        name = str(r["name"]).lstrip("/")
        prefix = netns_prefix(lab)
        out.append(ClabContainer(
            lab=lab,
            name=name,
            node=name[len(prefix):] if lab and name.startswith(prefix) else str(r.get("nodeName", "")),
            container_id=str(r.get("container_id", "")),
            image=str(r.get("image", "")),
            kind=str(r.get("kind", "")),
            state=str(r.get("state", "")),
            status=str(r.get("status", "")),
            ipv4_address=str(r.get("ipv4_address", "")),
            ipv6_address=str(r.get("ipv6_address", "")),
            owner=str(r.get("owner", "")),
            lab_path=str(r.get("absLabPath") or r.get("labPath") or ""),
        ))
    return sorted(out, key=lambda c: (c.lab, c.name))
