"""The Clabernetes manifest of a lab: ``<lab>.clabernetes.yaml`` (emitted, validated; pure).

Clabernetes (https://github.com/clabernetes/clabernetes) runs a containerlab topology on
Kubernetes: it takes the *whole* topology (``spec.definition.containerlab``, a string) and
splits it itself, one launcher pod per node, every link between pods a VXLAN tunnel it makes
(``spec.connectivity: vxlan``). So railab's partition does not apply there: the manifest holds
the unpartitioned lab. What railab adds is what a pod cannot read from the user's disk: each
switch's config files (``configs/<node>/frr.conf``, ``daemons``, ``config_db.json``) as one
ConfigMap per node (``<lab>-<node>``, keys = file names), mounted by
``spec.deployment.filesFromConfigMap`` at the relative path the topology's binds name
(``configs/<node>/<file>``).

The file is a multi-document YAML stream: the ConfigMaps, then the ``Topology``
(``clabernetes.containerlab.dev/v1alpha1``). ``kubectl apply -f <lab>.clabernetes.yaml``
deploys it where the Clabernetes controller runs. The Topology is validated against the CRD's
OpenAPI schema (an excerpt kept in ``schema/clabernetes-topology.json`` with its SOURCE note)
with jsonschema; ConfigMaps against the Kubernetes rules railab relies on (name a DNS-1123
subdomain of at most 253 characters, keys ``[-._a-zA-Z0-9]+``, at most 1 MiB of data).

Minimum version: a Clabernetes whose launcher deletes stale tunnels by exact name (it used
``containerlab tools vxlan delete --prefix`` up to v0.4.1, which on a node with ``eth1`` and
``eth10`` deleted the ``eth10`` tunnel while setting up ``eth1``: clabernetes#252; fixed by
deleting with netlink by name, 2026-08). docs/scale-out.md states it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from railab.errors import UsageError
from railab.topologies.clab import dump_topology
from railab.topologies.labspec import LabSpec
from railab.topologies.yamlio import load_yaml, load_yaml_all, yaml_error_text

API_VERSION = "clabernetes.containerlab.dev/v1alpha1"
KIND = "Topology"
SCHEMA = Path(__file__).resolve().parent / "schema" / "clabernetes-topology.json"
#: Kubernetes: a ConfigMap holds at most 1 MiB (etcd's object limit)
CONFIGMAP_MAX_BYTES = 1 << 20
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CM_KEY = re.compile(r"[-._a-zA-Z0-9]+")


class ClabernetesSchemaError(UsageError):
    """The emitted manifest does not validate (CRD schema or Kubernetes rules)."""


def prefix_free(names: list[str]) -> list[tuple[str, str]]:
    """Pairs ``(a, b)`` of ``names`` where ``a`` is a proper prefix of ``b`` (empty: no tool
    matching by prefix can confuse them). Sorted order puts a prefix right before its
    extensions, so one pass over neighbours finds every clash's shortest form."""
    out = []
    s = sorted(set(names))
    for i, a in enumerate(s):
        for b in s[i + 1:]:
            if not b.startswith(a):
                break
            out.append((a, b))
    return out


def tunnel_clashes(topo: dict) -> list[tuple[str, str]]:
    """Pairs of the host-side tunnel names a Clabernetes launcher makes for ``topo``'s links
    (``vx-<node>-<interface>``, one per link end: every node is its own pod) where one name is a
    prefix of the other, e.g. ``vx-spine1-eth1`` / ``vx-spine1-eth10``: on Clabernetes up to
    v0.4.1, whose launcher deleted stale tunnels with ``containerlab tools vxlan delete --prefix``,
    setting up the first deleted the second (clabernetes#252). Node interfaces stay ``ethK``, so
    a node with 10 or more ports always has such pairs: the CLI names the minimum version."""
    names = [f"vx-{e}".replace(":", "-") for lk in topo["topology"]["links"] for e in lk.get("endpoints", [])]
    return prefix_free(names)


def configmap_name(lab: str, node: str) -> str:
    """``<lab>-<node>``: the ConfigMap of ``node``'s config files."""
    return f"{lab}-{node}"


def manifest(spec: LabSpec, topo: dict, files: dict[str, str], *,
             namespace: str | None = None) -> list[dict[str, Any]]:
    """The documents of ``<lab>.clabernetes.yaml``: one ConfigMap per node that has files under
    ``configs/<node>/`` in ``files`` (the lab directory's texts by relative path,
    ``railab.topologies.generator.BuiltLab.files``), then the Topology holding ``topo`` (the
    whole lab's clab dict) with ``naming: prefixed`` and ``filesFromConfigMap`` mounting each
    file at ``configs/<node>/<file>``. ``namespace``: Kubernetes namespace (None: kubectl's
    current one)."""
    per_node: dict[str, dict[str, str]] = {}
    for rel, text in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "configs" and parts[1] in topo["topology"]["nodes"]:
            per_node.setdefault(parts[1], {})[parts[2]] = text
    meta = {"namespace": namespace} if namespace else {}
    docs: list[dict[str, Any]] = []
    mounts: dict[str, list[dict[str, str]]] = {}
    for node, data in per_node.items():
        name = configmap_name(spec.name, node)
        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": name, "labels": {"railab/lab": spec.name}, **meta},
                     "data": data})
        mounts[node] = [{"configMapName": name, "configMapPath": key,
                         "filePath": f"configs/{node}/{key}"} for key in sorted(data)]
    docs.append({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": spec.name, "labels": {"railab/lab": spec.name}, **meta},
        "spec": {
            "connectivity": "vxlan",
            "naming": "prefixed",
            "definition": {"containerlab": dump_topology(topo)},
            "deployment": {"filesFromConfigMap": mounts},
        },
    })
    validate_manifest(docs)
    return docs


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def validate_manifest(docs: list[dict[str, Any]]) -> None:
    """Validate a manifest's documents: the Topology against the CRD excerpt (and its
    ``apiVersion``/``kind``; its ``definition.containerlab`` must parse as YAML with a
    ``topology``), each ConfigMap against Kubernetes' name/key/size rules. Raises
    ClabernetesSchemaError naming the document and the JSON path."""
    topologies = [d for d in docs if d.get("kind") == KIND]
    if len(topologies) != 1:
        raise ClabernetesSchemaError(f"manifest holds {len(topologies)} Topology documents, needs 1")
    for d in docs:
        name = (d.get("metadata") or {}).get("name", "")
        if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
            raise ClabernetesSchemaError(f"{d.get('kind')} name {name!r} is not a DNS-1123 subdomain "
                                         f"(lower-case letters, digits, '-', '.'; at most 253)")
        if d.get("kind") == "ConfigMap":
            if d.get("apiVersion") != "v1":
                raise ClabernetesSchemaError(f"ConfigMap {name}: apiVersion must be v1")
            data = d.get("data") or {}
            bad = [k for k in data if not _CM_KEY.fullmatch(k)]
            if bad:
                raise ClabernetesSchemaError(f"ConfigMap {name}: key {bad[0]!r} is not [-._a-zA-Z0-9]+")
            size = sum(len(k) + len(v.encode()) for k, v in data.items())
            if size > CONFIGMAP_MAX_BYTES:
                raise ClabernetesSchemaError(f"ConfigMap {name} holds {size} bytes, more than "
                                             f"Kubernetes' {CONFIGMAP_MAX_BYTES}")
    topo = topologies[0]
    if topo.get("apiVersion") != API_VERSION:
        raise ClabernetesSchemaError(f"Topology apiVersion {topo.get('apiVersion')!r}, needs {API_VERSION}")
    errors = sorted(_validator().iter_errors(topo), key=lambda e: list(e.absolute_path))
    if errors:
        msgs = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5]]
        raise ClabernetesSchemaError(f"Topology fails {SCHEMA.name}: " + "; ".join(msgs))
    text = (topo["spec"].get("definition") or {}).get("containerlab")
    try:
        inner = load_yaml(text) if isinstance(text, str) else None
    except yaml.YAMLError as exc:
        why = yaml_error_text(exc, text)
        raise ClabernetesSchemaError(f"spec.definition.containerlab is not YAML: {why}") from None
    if not isinstance(inner, dict) or "topology" not in inner:
        raise ClabernetesSchemaError("spec.definition.containerlab holds no containerlab topology")


def dump(docs: list[dict[str, Any]]) -> str:
    """The manifest as a YAML stream (``---`` between documents; keys sorted, block style)."""
    return yaml.safe_dump_all(docs, sort_keys=True, default_flow_style=False, width=200)


def load(path: str | Path) -> list[dict[str, Any]]:
    """The documents of a manifest file (:func:`railab.topologies.yamlio.load_yaml_all`)."""
    return [d for d in load_yaml_all(Path(path).read_text()) if d is not None]
