"""containerlab topology emission (``<lab>.clab.yml``) and validation against clab's JSON schema.

The topology is built as a dict and written with ``yaml.safe_dump`` (sorted keys): never from a
text template (peer NOTES.md). It is then validated against containerlab's own schema
(``clab.schema.json``) with ``jsonschema.Draft202012Validator``: the schema declares draft-07,
but its link ``endpoints`` use ``prefixItems``, a 2020-12 keyword that draft-07 ignores. Its
patterns are ECMA-262 (``\\p{L}``, ``\\p{N}``), which Python's ``re`` rejects: they are translated
first (:func:`ecma_pattern`, :func:`python_schema`).

Node mapping (docs/architecture.md):

* every node: ``restart-policy: "no"`` (:data:`RESTART_POLICY`); containerlab kind, image, binds
  and sysctls of its node kind (sonic-vs binds: :func:`railab.topologies.sonic.sonic_binds`, by
  image generation)
  (:mod:`railab.topologies.nodekinds`: ``frr``, ``sonic-vs``, the ``linux`` GPU server, or a
  registered one); the intent's ``lab.images`` overrides the image;
* servers also get ``exec:`` lines giving each NIC its /31, a policy rule and a per-NIC table
  (the same data as ``lab.json``'s ``nics``);
* ``labels`` (role, group, rails); links ``endpoints: [a:ethX, b:ethY]``
  with an explicit ``mtu`` (SONiC ports default to 9100, containerlab veths to 9500: a mismatch
  breaks peering).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from railab.errors import UsageError
from railab.topologies import routing
from railab.topologies.nodekinds import get_node_kind
from railab.topologies.sonic import sonic_binds

if TYPE_CHECKING:  # annotations only: railab.testbed.clabfile (every runtime command) validates with this module
    from railab.topologies.labspec import LabSpec

#: containerlab's ``restart-policy`` for every node. The linux kind's default is ``always``:
#: Docker would restart a crashed FRR or server container without its data veths
#: (srl-labs/containerlab#730), a node that looks alive with no links. netlab emits ``no`` too.
RESTART_POLICY = "no"

VENDORED_SCHEMA = Path(__file__).resolve().parent / "schema" / "clab.schema.json"
SHARED_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "containerlab" / "clab.schema.json"

class ClabSchemaError(UsageError):
    """The emitted topology does not validate against containerlab's schema."""


#: Longest schema error text kept per error: jsonschema puts the whole failing instance in
#: its message (a strict schema refusing the root repeats the full topology, ~15 KB at mini).
MAX_SCHEMA_MESSAGE = 300


def _short(message: str) -> str:
    if len(message) <= MAX_SCHEMA_MESSAGE:
        return message
    return f"{message[:MAX_SCHEMA_MESSAGE]}... ({len(message)} characters)"


def find_schema() -> Path | None:
    """Locate ``clab.schema.json``: ``$RAILAB_CLAB_SCHEMA``, ``<repo>/../shared/containerlab/``,
    then the vendored copy ``topologies/schema/`` (BSD-3, see SOURCE.md). None if none exists;
    UsageError when ``$RAILAB_CLAB_SCHEMA`` is set but names no file (a misspelt path must not
    fall back to another schema silently)."""
    env = os.environ.get("RAILAB_CLAB_SCHEMA")
    if env and not Path(env).is_file():
        raise UsageError(f"RAILAB_CLAB_SCHEMA={env} is not a file: point it at containerlab's "
                         f"clab.schema.json, or unset it to use {VENDORED_SCHEMA.name} from "
                         f"railab (or ../shared/containerlab/)")
    for cand in ([Path(env)] if env else []) + [SHARED_SCHEMA, VENDORED_SCHEMA]:
        if cand.is_file():
            return cand
    return None


#: ECMA-262 Unicode property escapes containerlab's schema uses, as Python ``re`` classes:
#: ``\p{L}`` letters (``[^\W\d_]``), ``\p{N}`` numbers (``\d`` plus ``str.isnumeric``
#: characters: inside ``\w`` minus letters and ``_``). A class holding both is ``[^\W_]``.
_PROPS = {frozenset("L"): r"[^\W\d_]", frozenset("N"): r"(?:(?![^\W\d_])[^\W_])",
          frozenset("LN"): r"[^\W_]"}
_PROP = re.compile(r"\\p\{([LN])\}")


def ecma_pattern(pattern: str) -> str:
    r"""Translate an ECMA-262 regular expression (JSON Schema's dialect) into Python ``re``.

    Python rejects ``\p{...}`` (``re.error: bad escape \p``); containerlab's schema uses
    ``\p{L}`` and ``\p{N}`` (alone or in a class, e.g. the zone of ``mgmt-ipv4``,
    ``ports``, ``ipv4-range`` and a vxlan link's ``remote``: ``(%[\p{N}\p{L}]+)?``). Each is
    replaced by the equivalent Python class (:data:`_PROPS`); a class mixing them with other
    members becomes an alternation. Other syntax is left as is (the rest of the schema's
    patterns mean the same in both dialects). Raises ValueError for another ``\p{X}``.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            m = _PROP.match(pattern, i)
            if m:
                out.append(_PROPS[frozenset(m[1])])
                i = m.end()
                continue
            if pattern[i + 1] in "pP":
                raise ValueError(f"unsupported ECMA-262 property escape in {pattern!r} at {i}")
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            j, members, props = i + 1, [], set()
            negated = j < len(pattern) and pattern[j] == "^"
            j += negated
            while j < len(pattern) and (pattern[j] != "]" or j == i + 1 + negated and not members):
                m = _PROP.match(pattern, j)
                if m:
                    props.add(m[1])
                    j = m.end()
                elif pattern[j] == "\\":
                    members.append(pattern[j:j + 2])
                    j += 2
                else:
                    members.append(pattern[j])
                    j += 1
            if not props:
                out.append(pattern[i:j + 1])
            elif negated:
                raise ValueError(f"negated class with a property escape in {pattern!r}")
            else:
                alt = [_PROPS[frozenset(props)]] + ([f"[{''.join(members)}]"] if members else [])
                out.append(alt[0] if len(alt) == 1 else f"(?:{'|'.join(alt)})")
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def python_schema(node: Any) -> Any:
    """A copy of a JSON schema whose ``pattern`` values and ``patternProperties`` keys are
    Python regular expressions (:func:`ecma_pattern`)."""
    if isinstance(node, list):
        return [python_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "pattern" and isinstance(v, str):
            out[k] = ecma_pattern(v)
        elif k == "patternProperties" and isinstance(v, dict):
            out[k] = {ecma_pattern(p): python_schema(sub) for p, sub in v.items()}
        else:
            out[k] = python_schema(v)
    return out


@lru_cache(maxsize=4)
def _validator(path: str):
    import jsonschema  # here: ~0.1 s, and only a validation needs it

    schema = python_schema(json.loads(Path(path).read_text()))
    return jsonschema.Draft202012Validator(schema)


def _passed_key(topo: dict, schema: Path) -> str | None:
    """SHA-256 (hex) naming one validation: the schema file's bytes, this module's source (its
    pattern translation), the Python and jsonschema versions and the topology as canonical JSON.
    None when there is no exact key: a value JSON cannot hold as it is (a set, a non-string
    key, ...), or no jsonschema metadata; the topology is then validated."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = (schema.read_bytes(), Path(__file__).read_bytes(), sys.version.encode(),
                 version("jsonschema").encode(),
                 json.dumps(topo, sort_keys=True, separators=(",", ":")).encode())
    except (TypeError, ValueError, OSError, PackageNotFoundError):
        return None
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def validate_topology(topo: dict, schema: str | Path | None = None, *,
                      cache: str | Path | None = None) -> Path | None:
    """Validate a topology dict; returns the schema path used (None if no schema was found).

    ``cache``: a directory of markers, one per validation that passed (:func:`_passed_key`:
    schema, validator and topology); a topology that passed before is not validated again
    (validating the full 1024-GPU fabric took 0.6 s plus 0.1 s to import jsonschema, at every
    ``railab up`` of the same intent). None (default): always validate. A cache that cannot be
    read or written only costs the validation.

    Raises :class:`ClabSchemaError` listing the first errors with their JSON paths.
    """
    path = Path(schema) if schema else find_schema()
    if path is None:
        return None
    key = _passed_key(topo, path) if cache is not None else None
    marker = Path(cache) / key if key is not None else None
    try:
        if marker is not None and marker.exists():
            return path
    except OSError:  # e.g. a cache directory this user may not read
        marker = None
    errors = sorted(_validator(str(path)).iter_errors(topo), key=lambda e: list(e.absolute_path))
    if errors:
        msgs = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {_short(e.message)}"
                for e in errors[:5]]
        raise ClabSchemaError(f"clab topology fails {path.name}: " + "; ".join(msgs))
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass
    return path


def _labels(role: str, group: int | None, rails: list[int]) -> dict[str, str]:
    labels = {"role": role, "graph-level": {"superspine": "0", "spine": "1", "leaf": "2", "server": "3"}[role],
              "graph-icon": "host" if role == "server" else "switch"}
    if group is not None:
        labels["group"] = str(group)
    if rails:
        labels["rails"] = ",".join(map(str, rails))
    return labels


def server_exec(spec: LabSpec, server: str) -> list[str]:
    """``exec:`` lines for one server: per NIC address, policy rule and per-NIC default route.

    Same data as ``lab.json``: ``ip addr add <address> dev eth<n>``,
    ``ip rule add from <ip> lookup <table>``, ``ip route add default via <gateway> dev eth<n>
    table <table>``.
    """
    lines: list[str] = []
    for nic in spec.nics_of(server):
        lines += routing.nic_lines(nic=nic.nic, interface=nic.interface, address=nic.address,
                                   gateway=nic.gateway, table=nic.table, mtu=spec.mtu)
    return lines


def build_topology(spec: LabSpec, images: Any, *, sonic_image: str | None = None) -> dict:
    """The containerlab topology dict for ``spec`` (``images``: ``topologies.intent.Images``;
    ``sonic_image``: the docker-sonic-vs image generation, :data:`railab.topologies.sonic.SONIC_IMAGES`,
    None for the default), with ``restart-policy: "no"`` on every node.

    Raises NodeKindError for a node whose kind is not registered, ValueError for an unknown
    ``sonic_image``.
    """
    nodes: dict[str, dict] = {}
    for n in spec.nodes:
        kind = get_node_kind(n.kind)
        node: dict[str, Any] = {"kind": kind.clab_kind, "image": images.for_kind(kind),
                                "restart-policy": RESTART_POLICY}
        if kind.clab_kind == "sonic-vs":
            node["binds"] = sonic_binds(n.name, sonic_image)
        elif kind.binds:
            node["binds"] = kind.clab_binds(n.name)
        if n.role == "server":
            node["exec"] = server_exec(spec, n.name)
        node["sysctls"] = dict(kind.sysctls)
        node["labels"] = _labels(n.role, n.group, n.rails)
        nodes[n.name] = node
    links = [
        {
            "endpoints": [f"{lk.a.node}:{lk.a.interface}", f"{lk.b.node}:{lk.b.interface}"],
            "mtu": lk.mtu,
        }
        for lk in spec.links
    ]
    return {"name": spec.name, "topology": {"nodes": nodes, "links": links}}


def vxlan_link(node: str, interface: str, *, remote: str, vni: int, dst_port: int = 4789,
               mtu: int) -> dict:
    """A containerlab ``vxlan`` link (schema ``link-type-vxlan``: ``type``, ``endpoint``,
    ``remote``, ``vni``, ``dst-port`` required): ``node:interface`` tunnelled to the host at
    ``remote`` (IPv4/IPv6 underlay address) with VNI ``vni`` (1..16777215), UDP ``dst_port``
    (4789, IANA) and the overlay ``mtu`` (bytes; the underlay must carry ``mtu + 50`` over IPv4,
    :func:`railab.topologies.partition.underlay_mtu`). One per end of a link cut between hosts
    (:mod:`railab.topologies.partition`)."""
    return {"type": "vxlan", "endpoint": {"node": node, "interface": interface},
            "remote": remote, "vni": vni, "dst-port": dst_port, "mtu": mtu}


def dump_topology(topo: dict) -> str:
    """Deterministic YAML text (sorted keys, block style). libyaml's emitter when PyYAML is
    built with it (same text as the pure-Python one, checked on the shipped intents; 3x faster:
    12 s of the 4096-GPU fabric's ``generate`` under a profiler)."""
    return yaml.dump(topo, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=True,
                     default_flow_style=False, width=200)
