r"""Read a containerlab topology (``<lab>.clab.yml``) into what the netns runtime deploys.

Only the parts a runtime needs are read: the lab ``name``, nodes (kind, image, binds, sysctls,
labels, merged from ``topology.defaults`` < ``topology.kinds[<kind>]`` < the node, as containerlab
merges them), and links (``endpoints: ["a:eth1", "b:eth3"]`` plus an optional ``mtu``).
Bind sources are resolved relative to the clab file's directory, as containerlab does.

Links are containerlab's short form (``endpoints: ["a:eth1", "b:eth3"]``) or its extended form
(``type: veth`` with ``endpoints: [{node, interface}, ...]``); single-ended links (``vxlan``,
``vxlan-stitch``, ``host``, ``mgmt-net``, ``macvlan``, ``dummy``: one ``endpoint``) are kept
apart in ``ClabFile.external_links`` (only containerlab can make them). With ``validate=True``
(the containerlab runtime's ``up``), after railab's own checks the whole document is validated
against containerlab's JSON schema
(:func:`railab.topologies.clab.validate_topology`, whose ECMA-262 patterns such as the
``\p{L}`` of a vxlan ``remote`` are translated for Python).

A node runs FRR when it binds a file onto ``/etc/frr/frr.conf`` (``frr`` nodes in railab's
layout, see docs/architecture.md; sonic-vs nodes bind theirs under ``/etc/railab/`` and only the
containerlab runtime runs them); its ``/etc/frr/daemons`` bind, if any, says which
daemons to start, in which order and with which options (``ClabNode.daemons``,
``ClabNode.daemon_options``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from railab.errors import UsageError
from railab.topologies.clab import validate_topology
from railab.topologies.nodekinds import FRR_DAEMON_OPTIONS, FRR_DAEMONS, FRR_DEFAULT_OPTIONS
from railab.topologies.yamlio import read_yaml_file

FRR_CONF_TARGET = "/etc/frr/frr.conf"
FRR_DAEMONS_TARGET = "/etc/frr/daemons"
DEFAULT_MTU = 1500
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_YES_NO = re.compile(r"^\s*([a-z0-9]+)\s*=\s*(yes|no)\b")
_OPTIONS = re.compile(r"^\s*([a-z0-9]+)_options\s*=\s*\"([^\"]*)\"")


@dataclass(frozen=True)
class ClabNode:
    """One node: ``binds`` maps the container path to the host file (absolute)."""

    name: str
    kind: str
    image: str | None = None
    binds: dict[str, Path] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def frr_conf(self) -> Path | None:
        """Host path of the integrated FRR config this node binds, or None (not a router)."""
        return self.binds.get(FRR_CONF_TARGET)

    @property
    def daemons(self) -> tuple[str, ...]:
        """FRR daemons to run, in start order; empty for non-FRR nodes.

        Read from the bound FRR ``daemons`` file: the enabled daemons (``<d>=yes``) in the order
        of their ``<d>_options`` lines (railab's generator writes them in the node kind's start
        order, ``railab.topologies.frr.render_daemons``); an enabled daemon without an options
        line follows (FRR_DAEMONS' order, then file order); zebra always runs, first (the others
        connect to it).
        Without a daemons file: FRR_DAEMONS.
        """
        return tuple(self._daemons_file[0])

    @property
    def daemon_options(self) -> dict[str, list[str]]:
        """Command-line options of each daemon in :attr:`daemons` (``<d>_options`` of the daemons
        file split into words; without a line or a file: the node kind defaults of
        ``railab.topologies.nodekinds``)."""
        return self._daemons_file[1]

    @cached_property
    def _daemons_file(self) -> tuple[list[str], dict[str, list[str]]]:
        # parsed once per ClabNode (the runtime asks for daemons and options per wave and spawn)
        if self.frr_conf is None:
            return [], {}
        path = self.binds.get(FRR_DAEMONS_TARGET)
        text = path.read_text() if path is not None and path.exists() else None
        if text is None:
            return list(FRR_DAEMONS), {d: _default_options(d) for d in FRR_DAEMONS}
        enabled: list[str] = ["zebra"]
        options: dict[str, list[str]] = {}
        for line in text.splitlines():
            m = _YES_NO.match(line)
            if m and m.group(2) == "yes" and m.group(1) not in enabled:
                enabled.append(m.group(1))
            m = _OPTIONS.match(line)
            if m:
                options[m.group(1)] = shlex.split(m.group(2))
        on = set(enabled)
        order = ["zebra"] + [d for d in options if d in on and d != "zebra"]
        rest = [d for d in enabled if d not in order]
        order += [d for d in FRR_DAEMONS if d in rest] + [d for d in rest if d not in FRR_DAEMONS]
        return order, {d: options[d] if d in options else _default_options(d) for d in order}




def _default_options(daemon: str) -> list[str]:
    return shlex.split(FRR_DAEMON_OPTIONS.get(daemon, FRR_DEFAULT_OPTIONS))


@dataclass(frozen=True)
class ClabLink:
    """A point-to-point link between ``a`` and ``b`` (node, interface) with its MTU (bytes)."""

    a: tuple[str, str]
    b: tuple[str, str]
    mtu: int = DEFAULT_MTU


@dataclass(frozen=True)
class ClabExternalLink:
    """A single-ended containerlab link (``type`` vxlan, host, macvlan ...): ``endpoint``
    ``(node, interface)``, the rest of its keys in ``options`` (``remote``, ``vni`` ...)."""

    type: str
    endpoint: tuple[str, str]
    options: dict[str, Any] = field(default_factory=dict)
    mtu: int = DEFAULT_MTU


@dataclass(frozen=True)
class ClabFile:
    """A parsed ``<lab>.clab.yml``: ``nodes`` in file order, ``links`` (veth pairs) and
    ``external_links`` (single-ended) in file order."""

    path: Path
    name: str
    nodes: dict[str, ClabNode]
    links: list[ClabLink]
    external_links: list[ClabExternalLink] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def routers(self) -> list[ClabNode]:
        """Nodes that run FRR (bind an frr.conf)."""
        return [n for n in self.nodes.values() if n.frr_conf is not None]


def find_clab_file(path: str | Path) -> Path:
    """Return the ``*.clab.yml`` of a lab directory (or ``path`` itself if it is one).

    Raises UsageError (exit 2) when the directory holds none or several.
    """
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise UsageError(f"{p}: no such lab directory or .clab.yml file")
    found = sorted(p.glob("*.clab.yml")) + sorted(p.glob("*.clab.yaml"))
    if not found:
        raise UsageError(f"{p} holds no *.clab.yml, so it is not a lab directory: pass one that "
                         "`railab generate` wrote (or its .clab.yml file), or the name of a lab "
                         "that is up")
    if len(found) > 1:
        raise UsageError(f"{p} holds several *.clab.yml ({', '.join(f.name for f in found)}): "
                         "pass the .clab.yml file itself")
    return found[0]


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be a mapping, got {type(value).__name__}")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _binds(value: Any, base: Path, where: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in value or []:
        parts = str(item).split(":")
        if len(parts) < 2:
            raise UsageError(f"{where}: bind {item!r} is not 'host-path:container-path[:ro]'")
        src = Path(parts[0])
        out[parts[1]] = src if src.is_absolute() else (base / src)
    return out


def _endpoint(text: Any, where: str, nodes: dict[str, ClabNode]) -> tuple[str, str]:
    if isinstance(text, dict):  # extended form: {node: a, interface: eth1}
        text = f"{text.get('node', '')}:{text.get('interface', '')}"
    node, sep, ifname = str(text).partition(":")
    if not sep or not node or not ifname:
        raise UsageError(f"{where}: endpoint {text!r} is not 'node:interface'")
    if node not in nodes:
        raise UsageError(f"{where}: endpoint {text!r} names unknown node {node!r}")
    if not _IFNAME.match(ifname):
        raise UsageError(f"{where}: interface name {ifname!r} is not a Linux name (1-15 chars)")
    return node, ifname


#: containerlab link types with one endpoint (the other end is outside the lab's containers).
SINGLE_ENDED = ("vxlan", "vxlan-stitch", "host", "mgmt-net", "macvlan", "dummy")


def load_clab(path: str | Path, *, validate: bool = False) -> ClabFile:
    """Parse a clab file (or the one in a lab directory).

    Raises UsageError (exit 2) for unreadable YAML, a missing ``name``/``topology.nodes``, a bad endpoint,
    an endpoint used twice, a bound frr.conf that does not exist, an unknown link ``type``, or
    (``validate``) a document containerlab's schema rejects (ClabSchemaError, naming the JSON
    paths).
    """
    p = find_clab_file(path).resolve()
    doc = read_yaml_file(p, "clab file")  # YamlFileError: a UsageError (exit 2)
    if not isinstance(doc, dict) or "name" not in doc:
        raise UsageError(f"{p}: missing top-level 'name'")
    topo = doc.get("topology") or {}
    raw_nodes = topo.get("nodes") or {}
    if not raw_nodes:
        raise UsageError(f"{p}: no topology.nodes")
    defaults = topo.get("defaults") or {}
    kinds = topo.get("kinds") or {}
    base = p.parent
    nodes: dict[str, ClabNode] = {}
    for name, spec in raw_nodes.items():
        spec = spec or {}
        kind = spec.get("kind", defaults.get("kind", "linux"))
        layers = [defaults, kinds.get(kind) or {}, spec]
        binds: dict[str, Path] = {}
        sysctls: dict[str, str] = {}
        labels: dict[str, str] = {}
        image = None
        for layer in layers:
            where = f"{p.name}: node {name}"
            binds.update(_binds(layer.get("binds"), base, where))
            sysctls.update(_str_map(layer.get("sysctls"), f"{where} sysctls"))
            labels.update(_str_map(layer.get("labels"), f"{where} labels"))
            image = layer.get("image", image)
        node = ClabNode(str(name), str(kind), image, binds, sysctls, labels)
        if node.frr_conf is not None and not node.frr_conf.exists():
            raise UsageError(f"{p.name}: node {name} binds {node.frr_conf}, which does not exist")
        nodes[str(name)] = node
    links: list[ClabLink] = []
    external: list[ClabExternalLink] = []
    used: set[tuple[str, str]] = set()

    def use(ep: tuple[str, str], where: str) -> None:
        if ep in used:
            raise UsageError(f"{where}: endpoint {ep[0]}:{ep[1]} is used by another link")
        used.add(ep)

    for i, link in enumerate(topo.get("links") or []):
        where = f"{p.name}: links[{i}]"
        kind = str(link.get("type", "veth"))
        mtu = int(link.get("mtu") or DEFAULT_MTU)
        if kind in SINGLE_ENDED:
            ep = _endpoint(link.get("endpoint") or {}, where, nodes)
            use(ep, where)
            opts = {k: v for k, v in link.items() if k not in ("type", "endpoint", "mtu")}
            external.append(ClabExternalLink(kind, ep, opts, mtu))
            continue
        if kind != "veth":
            raise UsageError(f"{where}: unknown link type {kind!r}; containerlab knows veth, "
                             f"{', '.join(SINGLE_ENDED)}")
        eps = link.get("endpoints") or []
        if len(eps) != 2:
            raise UsageError(f"{where}: needs exactly two endpoints, got {eps!r}")
        a, b = (_endpoint(e, where, nodes) for e in eps)
        for ep in (a, b):
            use(ep, where)
        links.append(ClabLink(a, b, mtu))
    if validate:
        validate_topology(doc)
    return ClabFile(p, str(doc["name"]), nodes, links, external)
