"""containerlab topology emission (``<lab>.clab.yml``) and validation against clab's JSON schema.

The topology is built as a dict and written with ``yaml.safe_dump`` (sorted keys): never from a
text template (peer NOTES.md). It is then validated against containerlab's own schema
(``clab.schema.json``) with ``jsonschema.Draft202012Validator``: the schema declares draft-07,
but its link ``endpoints`` use ``prefixItems``, a 2020-12 keyword that draft-07 ignores.

Node mapping (docs/architecture.md):

* FRR switches: kind ``linux``, image ``railab/frr:8.4.4`` (pinned; built from images/frr), binds
  ``configs/<n>/frr.conf -> /etc/frr/frr.conf`` and ``configs/<n>/daemons -> /etc/frr/daemons``.
* sonic-vs switches: kind ``sonic-vs``, binds ``config_db.json -> /etc/sonic/config_db.json`` (the
  kind ignores ``startup-config``) and the integrated ``frr.conf`` (see :mod:`topologies.sonic`).
* Servers: kind ``linux`` with ``exec:`` lines giving each NIC its /31, a policy rule and a
  per-NIC table (the same data as ``lab.json``'s ``nics``).
* ``sysctls`` per node and ``labels`` (role, group, rails); links ``endpoints: [a:ethX, b:ethY]``
  with an explicit ``mtu`` (SONiC ports default to 9100, containerlab veths to 9500: a mismatch
  breaks peering).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from railab.topologies import routing
from railab.topologies.labspec import LabSpec

VENDORED_SCHEMA = Path(__file__).resolve().parent / "schema" / "clab.schema.json"
SHARED_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "containerlab" / "clab.schema.json"

#: Switch sysctls (docs/architecture.md): routing on, L4 ECMP hash so the RoCEv2 UDP source port
#: spreads flows (fib_multipath_hash_policy=1), no ICMP rate limit (traceroute-style hop probes),
#: no DAD (link-local addresses usable at once for BGP unnumbered), IPv6 enabled.
SWITCH_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.forwarding": "1",
    "net.ipv6.conf.all.forwarding": "1",
    "net.ipv6.conf.default.forwarding": "1",
    "net.ipv4.fib_multipath_hash_policy": "1",
    "net.ipv6.fib_multipath_hash_policy": "1",
    "net.ipv4.icmp_ratelimit": "0",
    "net.ipv6.icmp.ratelimit": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv6.conf.default.disable_ipv6": "0",
}
#: Server sysctls: a server never transits (ip_forward=0); ARP answered only for the address on
#: the asking interface and sourced from it (arp_ignore=1, arp_announce=2, the usual multi-NIC
#: host settings); loose reverse-path filtering (rp_filter=2) since replies use per-NIC tables.
SERVER_SYSCTLS = {
    "net.ipv4.ip_forward": "0",
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.default.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
    "net.ipv4.conf.default.arp_announce": "2",
    "net.ipv4.conf.all.rp_filter": "2",
    "net.ipv4.conf.default.rp_filter": "2",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv6.conf.default.disable_ipv6": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
}


class ClabSchemaError(ValueError):
    """The emitted topology does not validate against containerlab's schema."""


def find_schema() -> Path | None:
    """Locate ``clab.schema.json``: ``$RAILAB_CLAB_SCHEMA``, ``<repo>/../shared/containerlab/``,
    then the vendored copy ``topologies/schema/`` (BSD-3, see SOURCE.md). None if none exists."""
    env = os.environ.get("RAILAB_CLAB_SCHEMA")
    for cand in ([Path(env)] if env else []) + [SHARED_SCHEMA, VENDORED_SCHEMA]:
        if cand.is_file():
            return cand
    return None


@lru_cache(maxsize=4)
def _validator(path: str):
    import jsonschema

    schema = json.loads(Path(path).read_text())
    return jsonschema.Draft202012Validator(schema)


def validate_topology(topo: dict, schema: str | Path | None = None) -> Path | None:
    """Validate a topology dict; returns the schema path used (None if no schema was found).

    Raises :class:`ClabSchemaError` listing the first errors with their JSON paths.
    """
    path = Path(schema) if schema else find_schema()
    if path is None:
        return None
    errors = sorted(_validator(str(path)).iter_errors(topo), key=lambda e: list(e.absolute_path))
    if errors:
        msgs = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5]]
        raise ClabSchemaError(f"clab topology fails {path.name}: " + "; ".join(msgs))
    return path


def _labels(role: str, group: int | None, rails: list[int]) -> dict[str, str]:
    labels = {"role": role, "graph-level": {"spine": "1", "leaf": "2", "server": "3"}[role],
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
    for nic in sorted((n for n in spec.nics if n.server == server), key=lambda n: n.nic):
        lines += routing.nic_lines(nic=nic.nic, interface=nic.interface, address=nic.address,
                                   gateway=nic.gateway, table=nic.table, mtu=spec.mtu)
    return lines


def build_topology(spec: LabSpec, images: Any) -> dict:
    """The containerlab topology dict for ``spec`` (``images``: ``topologies.intent.Images``)."""
    nodes: dict[str, dict] = {}
    for n in spec.nodes:
        if n.role == "server":
            node = {
                "kind": "linux",
                "image": images.server,
                "exec": server_exec(spec, n.name),
                "sysctls": dict(SERVER_SYSCTLS),
            }
        elif n.kind == "sonic-vs":
            node = {
                "kind": "sonic-vs",
                "image": images.sonic_vs,
                "binds": [
                    f"configs/{n.name}/config_db.json:/etc/sonic/config_db.json",
                    f"configs/{n.name}/frr.conf:/etc/frr/frr.conf",
                ],
                "sysctls": dict(SWITCH_SYSCTLS),
            }
        else:
            node = {
                "kind": "linux",
                "image": images.frr,
                "binds": [
                    f"configs/{n.name}/frr.conf:/etc/frr/frr.conf",
                    f"configs/{n.name}/daemons:/etc/frr/daemons",
                ],
                "sysctls": dict(SWITCH_SYSCTLS),
            }
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


def dump_topology(topo: dict) -> str:
    """Deterministic YAML text (sorted keys, block style)."""
    return yaml.safe_dump(topo, sort_keys=True, default_flow_style=False, width=200)
