"""Partition a lab over several hosts and emit what multi-host engines deploy (pure, no I/O but
:func:`write_partition`).

A fabric larger than one machine runs on an existing distributed engine: containerlab on every
host, its cut links as ``vxlan`` links (``railab generate INTENT --hosts N``), or Clabernetes on
Kubernetes (:mod:`railab.topologies.clabernetes`, which takes the whole containerlab topology).
railab decides *where* each node runs and *which* links cross hosts:

* **groups stay whole**: a group's leaves and its servers go to one host, so server-leaf (rail)
  links never leave a host (rail traffic, the bulk of an AI fabric's bytes, stays local); groups
  are dealt out in contiguous blocks, as evenly as their count allows (:func:`assign`);
* **switches above the leaves spread**: spine ``i`` (and super-spine ``i``, and pod spines) goes to
  host ``(i - 1) mod N``, so every host carries part of the spine tier;
* **only fabric links are cut**: on two tiers only leaf-spine links cross hosts (a three-tier lab
  may also cut spine-superspine links). Each cut link becomes one ``vxlan`` link at each end.

VXLAN (RFC 7348): each cut link gets its own VNI, ``VNI_BASE + k`` for the k-th cut link in
lab.json's link order (:data:`VNI_BASE`; at most 16,777,215), UDP destination port 4789 (IANA),
``remote`` = the far host's underlay address. The overlay link keeps the lab MTU (``mtu``), so the
underlay between hosts must carry ``mtu + 50`` bytes over IPv4 (outer IPv4 20 + UDP 8 + VXLAN 8 +
inner Ethernet 14; ``+ 70`` over IPv6): :func:`underlay_mtu`. VXLAN adds no routed hop (the
inner frame is bridged; its TTL is untouched), so hop counts stay what lab.json expects.

Hosts default to ``host1..hostN`` with underlay addresses from :data:`UNDERLAY_POOL`
(``10.253.0.0/24``: host ``k`` = ``.k``); both are placeholders for real machines and are
overridden with ``--hosts name=address,...``.

Names (clabernetes#252): containerlab's ``tools vxlan delete --prefix`` deleted every tunnel whose
name *starts with* the given one, so ``vx-leaf1-eth1`` took ``vx-leaf1-eth10`` with it. Node
interfaces stay ``ethK``; the tunnel names railab itself makes (:func:`tunnel_name`,
``vx`` + the VNI in 8 digits) all have the same length, so none is a prefix of another
(:func:`railab.topologies.clabernetes.prefix_free`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from railab.topologies import clab as clab_mod
from railab.topologies import clabernetes
from railab.topologies.atomicfile import write_atomic
from railab.topologies.clab import vxlan_link
from railab.topologies.generator import OutputError, build_lab, generate
from railab.topologies.labspec import LabSpec
from railab.topologies.partition_model import (  # noqa: F401 - re-exported: the record, its rules
    _HOST_NAME,
    CUTTABLE,
    PARTITION_FILE,
    RESERVED_HOST_NAMES,
    UNDERLAY_POOL,
    VNI_BASE,
    VNI_MAX,
    VXLAN_OVERHEAD_V4,
    VXLAN_OVERHEAD_V6,
    VXLAN_PORT,
    CutEnd,
    CutLink,
    Host,
    Partition,
    PartitionError,
    _Strict,
    _unicast_problem,
    parse_hosts,
    tunnel_name,
    underlay_mtu,
)


def assign(spec: LabSpec, hosts: list[Host]) -> dict[str, str]:
    """node -> host name (see the module docstring): group ``g`` of ``G`` on host
    ``floor((g - 1) * N / G)``, spines / super-spines / pod spines round-robin by their index.

    PartitionError when the lab cannot be split that way: a Rail-only lab (one group and no
    spine tier: every link is a rail link) on more than one host, or more hosts than groups
    (a host would hold only spines and no rail traffic)."""
    n = len(hosts)
    names = [h.name for h in hosts]
    if n == 1:
        return {nd.name: names[0] for nd in spec.nodes}
    if spec.architecture == "rail-only" or not spec.by_role("spine"):
        raise PartitionError(f"lab {spec.name} is Rail-only: its leaves meet only through the "
                             f"servers (no spine tier), so it cannot be cut without cutting "
                             f"rail links; use --hosts 1, or a Rail-optimized lab")
    groups = spec.groups if spec.tiers == 2 else spec.pods * spec.groups_per_pod
    if n > groups:
        raise PartitionError(f"--hosts {n}: lab {spec.name} has {groups} groups and each group "
                             f"stays on one host; use at most {groups} hosts (or a lab with more "
                             f"groups: lab.groups in the intent)")
    out: dict[str, str] = {}
    upper: dict[str, int] = {}
    for nd in spec.nodes:
        if nd.role in ("leaf", "server"):
            out[nd.name] = names[(nd.group - 1) * n // groups]
        else:
            upper[nd.role] = upper.get(nd.role, 0) + 1
            out[nd.name] = names[(upper[nd.role] - 1) % n]
    return out


def build_partition(spec: LabSpec, hosts: list[Host]) -> Partition:
    """The partition of ``spec`` over ``hosts``: placement (:func:`assign`), the cut links with
    VNIs ``VNI_BASE + k`` in lab.json link order, the underlay MTU. PartitionError for a lab
    that cannot be split, or a cut through a server-leaf link (a bug: groups stay whole)."""
    node_host = assign(spec, hosts)
    cut: list[CutLink] = []
    for lk in spec.links:
        ha, hb = node_host[lk.a.node], node_host[lk.b.node]
        if ha == hb:
            continue
        if lk.role not in CUTTABLE:
            raise PartitionError(f"partition would cut {lk.role} link {lk.a.node}:{lk.a.interface}"
                                 f" - {lk.b.node}:{lk.b.interface}: rail links stay on one host")
        vni = VNI_BASE + len(cut)
        if vni > VNI_MAX:
            raise PartitionError(f"lab {spec.name} cuts more than {VNI_MAX - VNI_BASE + 1} links: "
                                 f"VXLAN has 24-bit VNIs; use fewer hosts")
        cut.append(CutLink(vni=vni, role=lk.role, mtu=lk.mtu,
                           a=CutEnd(node=lk.a.node, interface=lk.a.interface, host=ha),
                           b=CutEnd(node=lk.b.node, interface=lk.b.interface, host=hb)))
    mtu = max([c.mtu for c in cut], default=spec.mtu)
    return Partition(lab=spec.name, hosts=hosts, node_host=node_host, cut=cut,
                     underlay_mtu=underlay_mtu(mtu, hosts[0].underlay))


def _rebase_binds(node: dict, up: str) -> dict:
    """A node dict whose relative ``binds`` sources are seen from a sub-directory ``up`` levels
    down (``../configs/...``): containerlab resolves bind sources against the clab file."""
    if "binds" not in node:
        return node
    out = dict(node)
    binds = []
    for b in node["binds"]:
        src, sep, rest = b.partition(":")
        binds.append(b if os.path.isabs(src) else f"{up}{src}{sep}{rest}")
    out["binds"] = binds
    return out


def host_topology(part: Partition, topo: dict, host: str) -> dict:
    """The containerlab topology of ``host``'s part of ``topo`` (the whole lab's clab dict,
    :func:`railab.topologies.clab.build_topology`), as written to ``DIR/<host>/<lab>.clab.yml``:
    the host's nodes (binds rebased to ``../configs/...``), its local links unchanged, and one
    ``vxlan`` link per cut link end on this host (``endpoint``, ``remote`` = far host's
    underlay, ``vni``, ``dst-port`` 4789, the lab ``mtu``)."""
    here = set(part.nodes_of(host))
    nodes = {n: _rebase_binds(d, "../") for n, d in topo["topology"]["nodes"].items() if n in here}
    links: list[dict[str, Any]] = []
    for lk in topo["topology"]["links"]:
        (na, _), (nb, _) = (e.split(":", 1) for e in lk["endpoints"])
        if na in here and nb in here:
            links.append(lk)
    for c in sorted(part.cut, key=lambda c: c.vni):
        for end, far in ((c.a, c.b), (c.b, c.a)):
            if end.host != host:
                continue
            links.append(vxlan_link(end.node, end.interface, remote=part.host(far.host).underlay,
                                    vni=c.vni, dst_port=part.dst_port, mtu=c.mtu))
    return {"name": topo["name"], "topology": {"nodes": nodes, "links": links}}


def union_check(part: Partition, topo: dict, host_topos: dict[str, dict]) -> None:
    """Raise PartitionError unless the host topologies together hold exactly ``topo``'s nodes
    (each once) and links (local links once, each cut link as two ``vxlan`` ends with one VNI on
    different hosts whose ``remote`` is the other end's host)."""
    seen: dict[str, str] = {}
    for host, t in host_topos.items():
        for n in t["topology"]["nodes"]:
            if n in seen:
                raise PartitionError(f"node {n} is on {seen[n]} and {host}")
            seen[n] = host
    if set(seen) != set(topo["topology"]["nodes"]):
        raise PartitionError(f"host topologies hold {len(seen)} nodes, the lab "
                             f"{len(topo['topology']['nodes'])}")
    want = {frozenset(lk["endpoints"]) for lk in topo["topology"]["links"]}
    got: set[frozenset] = set()
    vx: dict[int, list[tuple[str, str, str]]] = {}
    for host, t in host_topos.items():
        for lk in t["topology"]["links"]:
            if lk.get("type") == "vxlan":
                ep = lk["endpoint"]
                vx.setdefault(lk["vni"], []).append((host, f"{ep['node']}:{ep['interface']}", lk["remote"]))
            else:
                got.add(frozenset(lk["endpoints"]))
    for vni, ends in vx.items():
        if len(ends) != 2 or ends[0][0] == ends[1][0]:
            raise PartitionError(f"VNI {vni} has {len(ends)} ends ({ends}); a cut link has one per host")
        (h1, e1, r1), (h2, e2, r2) = ends
        if r1 != part.host(h2).underlay or r2 != part.host(h1).underlay:
            raise PartitionError(f"VNI {vni}: remotes {r1}/{r2} do not point at {h2}/{h1}")
        got.add(frozenset((e1, e2)))
    if got != want:
        raise PartitionError(f"host topologies hold {len(got)} links, the lab {len(want)} "
                             f"(missing {sorted(map(sorted, want - got))[:3]})")


def emit(spec: LabSpec, topo: dict, hosts: list[Host],
         lab_files: dict[str, str]) -> tuple[Partition, dict[str, str]]:
    """Everything ``railab generate --hosts`` adds to the lab directory, in memory:
    ``(partition, {relative path: text})`` (``lab_files``: the lab directory texts,
    ``BuiltLab.files``, for the manifest's ConfigMaps) with ``partition.json``, ``<host>/<lab>.clab.yml``
    per host (each validated against containerlab's schema, their union checked against the
    lab: :func:`union_check`) and ``<lab>.clabernetes.yaml``
    (:func:`railab.topologies.clabernetes.manifest`, validated against the Topology CRD).
    PartitionError / ClabSchemaError / ClabernetesSchemaError (all exit 2) on failure."""
    part = build_partition(spec, hosts)
    host_topos = {h.name: host_topology(part, topo, h.name) for h in hosts}
    union_check(part, topo, host_topos)
    files = {PARTITION_FILE: part.dump()}
    for h, t in host_topos.items():
        clab_mod.validate_topology(t)
        files[f"{h}/{spec.name}.clab.yml"] = clab_mod.dump_topology(t)
    files[f"{spec.name}.clabernetes.yaml"] = clabernetes.dump(clabernetes.manifest(spec, topo, lab_files))
    return part, files


def write_partition(labdir: str | Path, files: dict[str, str]) -> list[Path]:
    """Write :func:`emit`'s files under ``labdir`` (each through a temporary file renamed into
    place); returns the paths written. OSError propagates (the caller names the directory)."""
    out = []
    base = Path(labdir)
    for rel, text in sorted(files.items()):
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, text)
        out.append(p)
    return out


def generate_hosts(intent: Any, outdir: str | Path, hosts: list[Host], *,
                   name: str | None = None) -> tuple[Path, Partition]:
    """``railab generate INTENT --hosts ...``: build the lab and its partition in memory
    (:func:`emit`: every file validated), then write the lab directory
    (:func:`railab.topologies.generator.generate`) and the partition's files into it. Returns
    ``(lab directory, partition)``. A lab that cannot be split raises PartitionError before
    anything is written; IntentError / OutputError as ``generate``."""
    built = build_lab(intent, name=name)
    part, files = emit(built.spec, built.topology, hosts, built.files)
    labdir = generate(intent, outdir, name=name)
    try:
        write_partition(labdir, files)
    except OSError as exc:
        raise OutputError(f"cannot write the partition under {labdir} ({exc.strerror or exc}): "
                          f"free space or pick another -o") from None
    return labdir, part

