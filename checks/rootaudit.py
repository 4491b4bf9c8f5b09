"""Audit root causes against the faults that were injected (issue 48): the rules attribution
must keep for any set of faults, however they share nodes, links and prefixes.

``audit(doc, faults, spec) -> [violation, ...]`` (empty: every rule holds), where ``doc`` is
``railab check --json``'s document (``results`` and ``root_causes``) and ``faults`` the lab's
fault records (``railab fault LAB list --json``, :class:`railab.testbed.state.FaultRecord`
dumps). The rules:

1. every failed row is a root or listed under one (``explains``);
2. no root without a cause;
3. every root names a fault: its cause's kind is one the fault's kind produces
   (:data:`CAUSE_OF`) on the fault's element (the fault's node for node-wide kinds, an end of
   the fault's link otherwise);
4. no fault is named by two roots, and a fault whose own row fails (a failed row whose own
   cause names it, as in 3) is named by a root;
5. every (row, root) pair is on one path: the root's fault element lies in the row's scope
   (:func:`row_scope`: a cabling row's link, a session's two ends, a prefix's way from its
   origin through the spines to the row's node, a flow's servers, leaves and spines); a
   cabling or policy row is never under a daemon (a dead daemon takes no cable out).

Used by ``tests/test_rootcause_props.py`` (hypothesis over recorded real check rows),
``tests/test_rootcause_live.py`` and ``scripts/stacked_faults.py`` (random fault sets on a
live lab).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from railab.topologies.labspec import LabSpec

#: fault kind -> the cause kinds a root naming it may carry
CAUSE_OF: dict[str, frozenset[str]] = {
    "link-down": frozenset({"link-down"}),
    "carrier-loss": frozenset({"link-down", "port-missing"}),
    "cable-pull": frozenset({"link-down", "port-missing"}),
    "link-flap": frozenset({"link-down", "session-down", "policy-route-missing", "link-local-missing"}),
    "cross-cable": frozenset({"miswired", "port-missing"}),
    "session-shut": frozenset({"session-shut", "session-down"}),
    "wrong-asn": frozenset({"wrong-asn", "session-down"}),
    "daemon-kill": frozenset({"daemon-dead", "session-down"}),
    "node-off": frozenset({"node-down", "daemon-dead", "link-down"}),
    "grey-loss": frozenset({"port-filter"}),
    "mtu": frozenset({"mtu-mismatch"}),
    "pfc-storm": frozenset({"pfc-storm"}),
    "pfc-priority": frozenset({"pfc-priority"}),
    "link-speed": frozenset({"link-speed"}),
}
#: fault kinds whose element is a whole node
NODE_KINDS = frozenset({"daemon-kill", "node-off"})
_ENDPOINT = re.compile(r"\b(srv\d+):(gpu|nic)(\d+)\b")


def fault_element(fault: dict, spec: LabSpec) -> tuple[frozenset[str], frozenset[str]]:
    """(nodes, ``node:port`` ends) a fault acts on: the node for node-wide kinds; the end and
    the far end of its link otherwise (both NICs and their planned leaf ports for cross-cable)."""
    if fault["kind"] in NODE_KINDS:
        return frozenset({fault["node"]}), frozenset()
    ends = {f"{fault['node']}:{fault['port']}"}
    if fault.get("peer_node") and fault.get("peer_port"):
        ends.add(f"{fault['peer_node']}:{fault['peer_port']}")
    if fault["kind"] == "cross-cable":
        for nic in spec.nics:
            if f"{nic.server}:{nic.interface}" in ends:
                ends.add(f"{nic.leaf}:{nic.leaf_port}")
    return frozenset(), frozenset(ends)


def _link_ends(link: str | None) -> set[str]:
    return set(link.split("--")) if link else set()


def cause_element(cause: dict | None) -> tuple[set[str], set[str]]:
    """(nodes, ends) a structured cause names: its link's ends and ``node:port``; its node
    for the node-wide kinds (``daemon-dead``, ``node-down``, ``wrong-asn`` without a port)."""
    if not cause:
        return set(), set()
    ends = _link_ends(cause.get("link"))
    if cause.get("port") and cause.get("node"):
        ends.add(f"{cause['node']}:{cause['port']}")
    nodes = set()
    if cause.get("node") and (cause["kind"] in ("daemon-dead", "node-down", "node-unreachable")
                              or not ends):
        nodes.add(cause["node"])
    return nodes, ends


def names(cause: dict | None, fault: dict, spec: LabSpec) -> bool:
    """True when ``cause`` (a root's or a row's) names ``fault``: a kind the fault's kind
    produces (:data:`CAUSE_OF`), on the fault's element."""
    if not cause or cause["kind"] not in CAUSE_OF.get(fault["kind"], ()):
        return False
    fnodes, fends = fault_element(fault, spec)
    cnodes, cends = cause_element(cause)
    if fnodes:  # a node-wide fault: the cause is at that node (or a link end of it, node-off)
        return bool(fnodes & (cnodes | {e.rsplit(":", 1)[0] for e in cends}))
    return bool(fends & cends)


def _links_of(spec: LabSpec, nodes: Iterable[str]) -> set[str]:
    want = set(nodes)
    out: set[str] = set()
    for lk in spec.links:
        if lk.a.node in want or lk.b.node in want:
            out |= {f"{lk.a.node}:{lk.a.interface}", f"{lk.b.node}:{lk.b.interface}"}
    return out


def _origin(spec: LabSpec, prefix: str | None) -> str | None:
    for rs in spec.rail_subnets:
        if rs.prefix == prefix:
            return rs.leaf
    for n in spec.nodes:
        if prefix and n.loopback and prefix == f"{n.loopback.ip}/32":
            return n.name
    return None


def row_scope(row: dict, spec: LabSpec) -> tuple[set[str], set[str]]:
    """(nodes, ends) a failed row's own path crosses, from the plan and the row's references:

    * cabling, policy: the row's link (its two ends) and ``node:port``; no node (a node-wide
      fault reaches it only by taking the node off: :func:`audit` allows ``node-off`` there);
    * daemons: the node;
    * bgp: the session's / link's two ends and their nodes;
    * routes, oversub: the row's node, the prefix's origin and every spine, with their links'
      ends (a prefix travels origin -> spine -> node);
    * hops: the flow's servers (from the row's name, ``srvN:gpuK``), their leaves, every spine,
      with their links' ends;
    * any family: the ends and nodes its own causes name.
    """
    nodes: set[str] = set()
    ends: set[str] = _link_ends(row.get("link"))
    if row.get("node") and row.get("port"):
        ends.add(f"{row['node']}:{row['port']}")
    for c in [row.get("cause"), *(row.get("joint") or [])]:
        cn, ce = cause_element(c)
        ends |= ce
        if row["check"] not in ("cabling", "policy"):
            nodes |= cn
    fam = row["check"]
    spines = {n.name for n in spec.by_role("spine")} | {n.name for n in spec.by_role("superspine")}
    if fam == "daemons":
        nodes.add(row["node"])
    elif fam == "bgp":
        s = row.get("session") or {}
        for n, i in ((s.get("node"), s.get("interface")), (s.get("peer"), s.get("peer_interface"))):
            if n and i:
                ends.add(f"{n}:{i}")
        nodes |= {e.rsplit(":", 1)[0] for e in ends}
        if row.get("node"):
            nodes.add(row["node"])
    elif fam in ("routes", "oversub"):
        on = {row["node"], _origin(spec, row.get("prefix"))} - {None}
        nodes |= on | spines
        ends |= _links_of(spec, on | spines)
    elif fam == "hops":
        servers = {m.group(1) for m in _ENDPOINT.finditer(row.get("name", ""))}
        if row.get("node"):
            servers.add(row["node"])
        leaves = {nic.leaf for nic in spec.nics if nic.server in servers}
        nodes |= servers | leaves | spines
        ends |= _links_of(spec, servers | leaves | spines)
    return nodes, ends


def _on_path(fault: dict, row: dict, spec: LabSpec) -> bool:
    fnodes, fends = fault_element(fault, spec)
    nodes, ends = row_scope(row, spec)
    if row["check"] in ("cabling", "policy"):
        # a cable or a NIC's table route: only a fault on that link, or the node switched off
        link_nodes = {e.rsplit(":", 1)[0] for e in ends}
        return bool(fends & ends) or (fault["kind"] == "node-off" and bool(fnodes & link_nodes))
    return bool(fends & ends) or bool(fnodes & nodes)


def audit(doc: dict, faults: list[dict], spec: LabSpec) -> list[str]:
    """The rules of the module docstring for one ``railab check --json`` document and the
    lab's fault records: one line per violation, [] when every rule holds."""
    out: list[str] = []
    rows = {(r["check"], r["name"]): r for r in doc["results"]}
    failed = {k for k, r in rows.items() if r["status"] == "fail"}
    covered: set[tuple[str, str]] = set()
    named_by: dict[str, list[str]] = {f["id"]: [] for f in faults}
    for rc in doc["root_causes"]:
        key = (rc["check"], rc["root"])
        root = f"{rc['check']} {rc['root']}"
        covered.add(key)
        covered |= {(e["check"], e["name"]) for e in rc["explains"]}
        if rc["cause"] is None:
            out.append(f"root {root} has no cause")
            continue
        mine = [f for f in faults if names(rc["cause"], f, spec)]
        if not mine:
            out.append(f"root {root} (cause {rc['cause']}) names no injected fault")
            continue
        for f in mine:
            named_by[f["id"]].append(root)
        daemon = rc["cause"]["kind"] == "daemon-dead"
        for e in rc["explains"]:
            row = rows.get((e["check"], e["name"]))
            if row is None:
                out.append(f"root {root} explains {e['check']} {e['name']}, which is no row")
                continue
            if daemon and row["check"] in ("cabling", "policy"):
                out.append(f"{row['check']} row {row['name']} is under a dead daemon ({root})")
            elif not any(_on_path(f, row, spec) for f in mine):
                out.append(f"{row['check']} row {row['name']} is under {root}, "
                           f"whose fault ({', '.join(f['id'] for f in mine)}) is off its path")
    for k in sorted(failed - covered):
        out.append(f"failed row {k[0]} {k[1]} is under no root")
    for f in faults:
        roots = named_by[f["id"]]
        if len(roots) > 1:
            out.append(f"fault {f['id']} ({f['kind']} {f.get('note', '')}) is named by {len(roots)} roots: {roots}")
        own = [k for k in failed if names(rows[k].get("cause"), f, spec)]
        if own and not roots:
            out.append(f"fault {f['id']} ({f['kind']}) has failed rows of its own ({own[0][0]} "
                       f"{own[0][1]}) but no root names it")
    return out


def catalog(spec) -> list[list[str]]:
    """Every candidate fault of the lab as ``railab fault`` arguments (kind, targets, options):
    each kind on leaf-spine links, server NICs and nodes, so random sets share nodes, links
    and prefixes."""
    leaves = [n.name for n in spec.by_role("leaf")]
    spines = [n.name for n in spec.by_role("spine")]
    servers = sorted({n.server for n in spec.nics})
    out: list[list[str]] = []
    for leaf in leaves:
        for sp in spines:
            out += [["link-down", leaf, sp], ["link-down", leaf, sp, "--end", sp],
                    ["carrier-loss", leaf, sp], ["carrier-loss", leaf, sp, "--end", sp],
                    ["session-shut", leaf, sp], ["wrong-asn", leaf, sp], ["wrong-asn", sp, leaf],
                    ["grey-loss", leaf, sp, "--percent", "5"], ["mtu", leaf, sp, "--mtu", "1500"]]
    for nic in spec.nics:
        out += [["link-down", nic.server, "--port", nic.interface],
                ["cable-pull", nic.server, "--port", nic.interface],
                ["grey-loss", nic.leaf, "--port", nic.leaf_port, "--percent", "5"],
                ["mtu", nic.server, "--port", nic.interface, "--mtu", "1500"]]
    for sw in leaves + spines:
        out += [["daemon-kill", sw, "--daemon", d] for d in ("bgpd", "zebra", "staticd")]
    out += [["node-off", n] for n in leaves + servers]
    by_server: dict[str, list] = {}
    for nic in spec.nics:
        by_server.setdefault(nic.server, []).append(nic)
    for s, nics in by_server.items():
        out.append(["cross-cable", f"{s}:{nics[0].interface}", f"{s}:{nics[-1].interface}"])
    return out


def compact_rows(results: list[dict]) -> list[dict]:
    """The failed rows of a ``railab check --json`` ``results`` list, in run order, as the
    offline tests keep them: structured fields only (no ``expected`` / ``observed`` /
    ``reason`` / ``subject`` text, no None fields)."""
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return [strip({k: v for k, v in r.items() if k not in ("expected", "observed", "reason", "subject")})
            for r in results if r["status"] == "fail"]
