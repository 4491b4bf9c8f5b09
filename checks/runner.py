"""Run the check families against a lab: ``run_checks(spec, executor) -> list[CheckResult]``,
and group failures under their root cause (:func:`group_failures`, by structured fields).

Importing this module registers the built-in families (daemons, cabling, pfc, speed, policy, bgp, routes, oversub,
hops; see
:func:`railab.checks.base.register_check`); a family registered anywhere else runs the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from railab.checks import bgp as _bgp  # noqa: F401  (registers "bgp")
from railab.checks import cabling as _cabling  # noqa: F401  (registers "cabling")
from railab.checks import daemons as _daemons  # noqa: F401  (registers "daemons")
from railab.checks import hops as _hops  # noqa: F401  (registers "hops")
from railab.checks import oversub as _oversub  # noqa: F401  (registers "oversub")
from railab.checks import pfc as _pfc  # noqa: F401  (registers "pfc")
from railab.checks import policy as _policy  # noqa: F401  (registers "policy")
from railab.checks import routes as _routes  # noqa: F401  (registers "routes")
from railab.checks import speed as _speed  # noqa: F401  (registers "speed")
from railab.checks.base import CHECKS, Cause, CheckResult, Observer
from railab.testbed.executor import Executor
from railab.topologies.labspec import LabSpec


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """Normalise ``--only`` (``"bgp,routes"`` or a list) to check names in run order.

    Raises ValueError naming the valid checks for an unknown one.
    """
    valid = list(CHECKS)
    if only is None:
        return valid
    items = only.split(",") if isinstance(only, str) else list(only)
    names = [i.strip() for i in items if i and i.strip()]
    bad = [n for n in names if n not in CHECKS]
    if bad:
        raise ValueError(f"unknown check {', '.join(bad)}: use one or more of {','.join(valid)}")
    if not names:
        raise ValueError(f"--only is empty: use one or more of {','.join(valid)}")
    return [c for c in valid if c in names]


def run_checks(
    spec: LabSpec,
    executor: Executor | None,
    only: str | Iterable[str] | None = None,
    netns_of: Callable[[str], str | None] | None = None,
    *,
    hops_runner=None,
    stop: threading.Event | None = None,
) -> list[CheckResult]:
    """Run the checks named in ``only`` (default all registered, see ``checks.base.CHECKS``)
    and return every result (pass, fail and skip) in family order.

    ``executor`` runs vtysh on switches; ``netns_of(node)`` names the node's network namespace for
    the netlink reads (default ``clab-<lab>-<node>``; return None for nodes without one).
    ``hops_runner`` overrides how the hops check measures a flow (see :mod:`checks.hops`).
    ``stop``: an Event a SIGINT handler sets (``railab check`` uses
    ``railab.traffic.engine.sigint_event``): the run raises KeyboardInterrupt at its next safe
    point (between families, before a vtysh run or a namespace's netlink socket, inside the
    traffic engine of the hops check), with every socket closed.
    Raises ValueError for an unknown check name; observation problems become failing or
    skipped results, never exceptions.
    """
    names = parse_only(only)
    families = [CHECKS.get(n) for n in names]
    out: list[CheckResult] = []
    # the hops family files a failed flow under the root cause of an earlier family's failure
    # on its path (checks.hops.attribute_flows): it reads them through this
    options = {"groups_so_far": lambda: group_failures(out)}
    if hops_runner:
        options["hops_runner"] = hops_runner
    obs = Observer(spec, executor, netns_of, options=options, stop=stop)
    cmds = list(dict.fromkeys(c for f in families for c in f.frr_commands))
    try:
        obs.prefetch(obs.switches, cmds)
        for fam in families:
            obs.check_stop()
            out += fam.run(obs)
        obs.check_stop()
    finally:
        obs.close()
    return out


def summary(results: list[CheckResult]) -> dict[str, dict[str, int]]:
    """Per family: ``{"bgp": {"pass": 16, "fail": 0, "skip": 0}, ...}`` in run order."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        out.setdefault(r.check, {"pass": 0, "fail": 0, "skip": 0})[r.status] += 1
    return {k: out[k] for k in sorted(out, key=lambda c: CHECKS.index(c) if c in CHECKS else 99)}


#: families that read the kernel (netlink), not FRR: a dead daemon on their row's node does
#: not explain them (a cable, an MTU, an nft table, a NIC's table route)
KERNEL_FAMILIES = frozenset({"cabling", "policy", "pfc", "speed"})
#: causes that name a culprit no dead daemon makes (a wrong ASN, a miswire, a missing neighbor
#: or announcement, an MTU, a filter, a session its own end shut): a row blaming one does not
#: follow a dead daemon merely because it is about that daemon's node (a session failing with
#: Bad Peer AS on a leaf whose staticd died is the wrong ASN's)
CULPRIT_KINDS = frozenset({"wrong-asn", "miswired", "port-missing", "neighbor-missing", "not-announced",
                           "mtu-mismatch", "port-filter", "pfc-storm",
                           "pfc-priority", "session-shut", "link-speed"})


def _keys(node: str | None, c: Cause | None, check: str | None = None) -> tuple[set[tuple], set[tuple]]:
    """(specific, node-wide) root-cause keys a failure of family ``check`` about ``node`` blamed
    on ``c`` (one of its :attr:`~railab.checks.base.CheckResult.causes`) *needs*.

    Specific: the cause's link (``("link", L)``) and the cause itself (``("cause", ...)``);
    node-wide: the node of a dead daemon (``("dead", N)``: any row about ``N`` that reads FRR,
    not :data:`KERNEL_FAMILIES`, or blaming ``N``).
    """
    spec: set[tuple] = set()
    wide: set[tuple] = set()
    if node and check not in KERNEL_FAMILIES and (c is None or c.kind not in CULPRIT_KINDS):
        wide.add(("dead", node))
    if c is None:
        return spec, wide
    if c.link:
        spec.add(("link", c.link))
    if c.kind == "daemon-dead":
        wide.add(("dead", c.node))
    else:
        spec.add(_cause_key(c))
    if c.kind == "node-down" and c.node:
        # the node is off (every link down at its end): its daemons died with it. A link down
        # at one end is not: a dead daemon never takes a cable out, so a pulled cable at a node
        # whose zebra is dead is a root of its own
        wide.add(("dead", c.node))
    if c.kind == "session-down" and c.link:
        # a session is down when either end's bgpd (or bfdd resetting it) is dead
        wide.update(("dead", n) for n in _link_nodes(c.link))
    return spec, wide


def _link_nodes(link: str) -> list[str]:
    """The two node names of a :func:`~railab.checks.base.link_id` (``a:eth1--b:eth3``)."""
    return [end.rsplit(":", 1)[0] for end in link.split("--")]


def _cause_key(c: Cause) -> tuple:
    if c.kind == "config" or (c.kind == "wrong-asn" and not c.port):
        return ("node", c.kind, c.node)  # node-wide: every row blaming the node is one cause
    if c.kind == "not-announced":
        return ("announce", c.node, c.prefix)
    return ("cause", c.kind, c.node, c.port, c.link, c.daemon, c.prefix)


def _links(r: CheckResult) -> set[tuple]:
    """The links a follower row is about (its own ``link`` and its cause's): a row attached to
    a root passes them on, so a row blamed on one of them follows from the same root (a BGP
    session down because the far end's bgpd is dead -> the routes missing via that session)."""
    out = {("link", r.link)} if r.link else set()
    if r.cause is not None and r.cause.link:
        out.add(("link", r.cause.link))
    return out


def _provides(r: CheckResult) -> set[tuple]:
    """Keys a root ``r`` explains: its own link, its causes (and their links), a dead daemon's
    node."""
    out: set[tuple] = set()
    if r.link:
        out.add(("link", r.link))
    for c in r.causes:
        if c.link:
            out.add(("link", c.link))
        out.add(("dead", c.node) if c.kind == "daemon-dead" else _cause_key(c))
    return out


def group_failures(results: list[CheckResult]) -> list[tuple[CheckResult, list[CheckResult]]]:
    """Group failing results under their root cause: ``[(root, [consequences...]), ...]`` in run
    order (cabling and BGP run before routes, so causes come first). Every failure appears
    once, except a row with joint causes (``CheckResult.joint``), which is listed under every
    root one of its causes follows from (:func:`joint_roots` names them).

    Works on structured fields only (``link``, ``node``, ``prefix`` and ``cause`` / ``joint``,
    see :class:`checks.base.Cause`), never on message text. Each cause of a failure (its
    ``cause``, then each of ``joint``) follows from an earlier root when:

    * it names the root's link (``Cause.link`` == the root's ``link`` or its cause's link), or
      is the same cause (the same wrong ASN, the same missing announcement);
    * otherwise (node-wide, weaker than a link match) the root's cause is a dead daemon on node
      ``N`` and the failure is about ``N`` (``node``; a row that reads FRR, not of
      :data:`KERNEL_FAMILIES`, and blames no :data:`CULPRIT_KINDS` cause), its cause is that
      dead daemon, ``N`` down (``node-down``: node-off), or a BGP session down on a link to
      ``N``; a link down at ``N``'s end is not (a dead daemon takes no cable out);
    * it is ``upstream`` (the neighbor ``N`` behind a port lacks ``prefix`` itself): it
      follows whatever roots ``N``'s failures for the same prefix follow (all of them, to a
      fixed point: a spine lacks the prefix because its session to the origin is down), else
      a dead daemon on ``N``;
    * transitively: a row attached to a root passes its own links on to that root, so a row
      whose cause names such a link follows the same root (bgpd dead on a spine -> the leaves'
      sessions to it -> the routes and ECMP width missing via those sessions: one root).

    A failure follows from every root one of its causes follows from (a prefix cut off by a
    leaf's uplink down and the other spine's dead bgpd follows from both: two roots, the row
    listed under each); a cause no root explains adds nothing while another of the row's
    causes is explained. A failure none of whose causes is explained is a root of its own.
    Used by ``railab check`` to print root causes and "N more failures follow from ..."
    (``--all`` lists every row).
    """
    fails = [r for r in results if r.status == "fail"]
    roots: list[int] = []
    provided: dict[int, set[tuple]] = {}
    roots_of: dict[int, set[int]] = {}  # failure index -> indexes of the roots it follows from
    refs: dict[int, list[tuple[str | None, str | None]]] = {}  # upstream (node, prefix) per row

    def hit_of(node: str | None, c: Cause | None, check: str) -> int | None:
        spec, wide = _keys(node, c, check)
        hit = next((j for j in roots if spec & provided[j]), None)
        return hit if hit is not None else next((j for j in roots if wide & provided[j]), None)

    for i, r in enumerate(fails):
        causes = r.causes
        ups = [(c.node, c.prefix) for c in causes if c.kind == "upstream"]
        direct = [c for c in causes if c.kind != "upstream"] or ([] if ups else [None])
        hits: set[int] = set()
        for k, c in enumerate(direct):
            hit = hit_of(r.node, c, r.check)
            if hit is None:
                continue
            hits.add(hit)
            # what follows from a follower follows from its root: a cause's link to the root
            # that cause follows from (and the row's own link, with its first cause)
            provided[hit] |= {("link", c.link)} if c is not None and c.link else set()
            if r.link and ((k == 0 and c is r.cause) or (r.check in KERNEL_FAMILIES and len(hits) == 1)):
                # a cabling or policy row is its link: whichever of its causes explains it
                # explains the link (a cable between two powered-off nodes, its first cause
                # the node whose other rows come later)
                provided[hit].add(("link", r.link))
        if ups:
            refs[i] = ups
            roots_of[i] = hits
            continue
        if hits:
            roots_of[i] = hits
            continue
        roots.append(i)
        roots_of[i] = {i}
        provided[i] = _provides(r)
    if refs:
        _resolve_upstream(fails, roots, provided, roots_of, refs)
    roots.sort()
    out: dict[int, tuple[CheckResult, list[CheckResult]]] = {j: (fails[j], []) for j in roots}
    for i in sorted(roots_of):
        for j in sorted(roots_of[i]):
            if i != j:
                out[j][1].append(fails[i])
    return [_powered_off_first(*out[j]) for j in roots]


def _resolve_upstream(fails: list[CheckResult], roots: list[int], provided: dict[int, set[tuple]],
                      roots_of: dict[int, set[int]],
                      refs: dict[int, list[tuple[str | None, str | None]]]) -> None:
    """Attach the rows with ``upstream`` causes (``refs``: row -> [(neighbor, prefix)]) to the
    roots the neighbor's own failures for that prefix follow from, to a fixed point (a chain
    leaf -> spine -> origin, or a spine and a leaf blaming each other, settle); a neighbor
    without such failures refers to a dead daemon on it. A row nothing explains becomes a root
    of its own, first in run order, and the others are resolved again (the rows that blame it
    follow from it). Updates ``roots``, ``provided`` and ``roots_of`` in place."""
    about: dict[tuple[str | None, str | None], list[int]] = {}
    for k, o in enumerate(fails):
        about.setdefault((o.node, o.prefix), []).append(k)
    blamers: dict[tuple[str | None, str | None], list[int]] = {}  # (node, prefix) -> rows citing it
    for i, ups in refs.items():
        for ref in ups:
            blamers.setdefault(ref, []).append(i)
    # a worklist, not sweeps: a row is looked at again only when a row it cites gained a root
    # (linear in the rows and roots on the largest fabrics, where sweeps after each new root
    # were quadratic)
    todo = list(refs)

    def settle() -> None:
        while todo:
            i = todo.pop()
            if roots_of[i] == {i}:
                continue  # made a root of its own below
            new: set[int] = set()
            for node, prefix in refs[i]:
                rows = [k for k in about.get((node, prefix), []) if k != i]
                if rows:
                    new |= set().union(*(roots_of.get(k, set()) for k in rows))
                else:  # the neighbor lacking the prefix has a dead daemon (staticd)
                    new |= {j for j in roots if ("dead", node) in provided.get(j, ())}
            if new - roots_of[i]:
                roots_of[i] |= new
                todo.extend(blamers.get((fails[i].node, fails[i].prefix), []))

    settle()
    for i in sorted(refs):
        if roots_of[i]:
            continue
        roots.append(i)
        roots_of[i] = {i}
        provided[i] = _provides(fails[i])
        todo.extend(blamers.get((fails[i].node, fails[i].prefix), []))  # they follow from it
        settle()


def joint_roots(groups: list[tuple[CheckResult, list[CheckResult]]]) -> dict[int, list[CheckResult]]:
    """For :func:`group_failures`' ``groups``: ``{id(row): [its roots]}`` for every row listed
    under more than one root (a failure two faults cause together), roots in run order."""
    seen: dict[int, list[CheckResult]] = {}
    for root, cons in groups:
        for c in cons:
            seen.setdefault(id(c), []).append(root)
    return {k: v for k, v in seen.items() if len(v) > 1}


def _powered_off_first(root: CheckResult, cons: list[CheckResult]) -> tuple[CheckResult, list[CheckResult]]:
    """A dead daemon on node ``N`` whose followers include ``N`` down (every link of it down at
    its end: ``railab fault node-off``): the node is off, which explains its dead daemons, so
    the first ``node-down`` row becomes the root and the daemon row one of its followers."""
    c = root.cause
    if c is None or c.kind != "daemon-dead":
        return root, cons
    off = next((r for r in cons if r.cause is not None and r.cause.kind == "node-down"
                and r.cause.node == c.node), None)
    if off is None:
        return root, cons
    return off, [root] + [r for r in cons if r is not off]


def root_causes(results: list[CheckResult]) -> list[dict]:
    """:func:`group_failures` as JSON-ready dicts: ``{"root": name, "check", "cause": {...} or
    None, "refs": {...}, "explains": [{"check", "name"}, ...]}`` per root, in run order. A row
    several roots explain together (:func:`joint_roots`) is listed in the ``explains`` of each,
    its entry adding ``"joint_with": [{"check", "root"}, ...]``: the other roots it needs."""
    groups = group_failures(results)
    joint = joint_roots(groups)

    def entry(root: CheckResult, c: CheckResult) -> dict:
        e: dict = {"check": c.check, "name": c.name}
        if id(c) in joint:
            e["joint_with"] = [{"check": o.check, "root": o.name} for o in joint[id(c)]
                               if o is not root]
        return e

    return [{"check": root.check, "root": root.name,
             "cause": root.cause.model_dump(exclude_none=True) if root.cause else None,
             "refs": root.refs(),
             "explains": [entry(root, c) for c in cons]}
            for root, cons in groups]
