"""Run the check families against a lab: ``run_checks(spec, executor) -> list[CheckResult]``."""

from __future__ import annotations

import re
from typing import Callable, Iterable

from railab.checks.base import CHECKS, CMD_BGP_TABLE, CMD_RIB, CMD_SUMMARY, CheckResult, Observer
from railab.testbed.executor import Executor
from railab.topologies.labspec import LabSpec


def parse_only(only: str | Iterable[str] | None) -> list[str]:
    """Normalise ``--only`` (``"bgp,routes"`` or a list) to check names in run order.

    Raises ValueError naming the valid checks for an unknown one.
    """
    if only is None:
        return list(CHECKS)
    items = only.split(",") if isinstance(only, str) else list(only)
    names = [i.strip() for i in items if i and i.strip()]
    bad = [n for n in names if n not in CHECKS]
    if bad:
        raise ValueError(f"unknown check {', '.join(bad)}: use one or more of {','.join(CHECKS)}")
    if not names:
        raise ValueError(f"--only is empty: use one or more of {','.join(CHECKS)}")
    return [c for c in CHECKS if c in names]


def run_checks(
    spec: LabSpec,
    executor: Executor | None,
    only: str | Iterable[str] | None = None,
    netns_of: Callable[[str], str | None] | None = None,
    *,
    hops_runner=None,
) -> list[CheckResult]:
    """Run the checks named in ``only`` (default all, see ``checks.base.CHECKS``) and return
    every result (pass, fail and skip) in family order.

    ``executor`` runs vtysh on switches; ``netns_of(node)`` names the node's network namespace for
    the netlink reads (default ``clab-<lab>-<node>``; return None for nodes without one).
    ``hops_runner`` overrides how the hops check measures a flow (see :mod:`checks.hops`).
    Raises ValueError for an unknown check name; observation problems become failing or
    skipped results, never exceptions.
    """
    names = parse_only(only)
    obs = Observer(spec, executor, netns_of)
    cmds = ([CMD_SUMMARY] if {"bgp", "routes"} & set(names) else []) + (
        [CMD_RIB, CMD_BGP_TABLE] if "routes" in names else [])
    obs.prefetch(obs.switches, cmds)
    out: list[CheckResult] = []
    try:
        out = _run(obs, names, hops_runner)
    finally:
        obs.close()
    return out


def _run(obs: Observer, names: list[str], hops_runner) -> list[CheckResult]:
    out: list[CheckResult] = []
    for name in names:
        if name == "bgp":
            from railab.checks.bgp import check_bgp

            out += check_bgp(obs)
        elif name == "routes":
            from railab.checks.routes import check_routes

            out += check_routes(obs)
        elif name == "cabling":
            from railab.checks.cabling import check_cabling

            out += check_cabling(obs)
        elif name == "oversub":
            from railab.checks.oversub import check_oversub

            out += check_oversub(obs)
        elif name == "hops":
            from railab.checks.hops import check_hops

            out += check_hops(obs, runner=hops_runner)
    return out


def summary(results: list[CheckResult]) -> dict[str, dict[str, int]]:
    """Per family: ``{"bgp": {"pass": 16, "fail": 0, "skip": 0}, ...}`` in run order."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        out.setdefault(r.check, {"pass": 0, "fail": 0, "skip": 0})[r.status] += 1
    return {k: out[k] for k in sorted(out, key=lambda c: CHECKS.index(c) if c in CHECKS else 99)}


def _word(token: str) -> re.Pattern:
    return re.compile(rf"(?<![\w-]){re.escape(token)}(?!\w)")


def group_failures(results: list[CheckResult]) -> list[tuple[CheckResult, list[CheckResult]]]:
    """Group failing results under their root cause: ``[(root, [consequences...]), ...]`` in run
    order (cabling and BGP run before routes, so causes come first). Every failure appears once.

    A failure follows from an earlier root when its name, observed state or reason names:

    * the root's link (``A:x <-> B:y``) or one of its ends (``A:x``), or, on node ``A``, the
      interface ``x`` (``next hops missing via x``);
    * the node of a node-wide root: for a daemon that is not running, any row about the node
      or naming it; for a wrong ``NODE ASN``, rows whose observation or cause names the node
      (link matches win over node-wide ones);
    * a node whose rows for the same subject already follow from the root (``see spine2's
      rows``).

    Anything else is a root of its own. Used by ``railab check`` to print root causes and
    "N more failures follow from ..." (``--all`` lists every row).
    """
    fails = [r for r in results if r.status == "fail"]
    root_of: dict[int, int] = {}  # failure index -> index of its root failure
    roots: list[int] = []
    matchers: dict[int, tuple[list, list]] = {}
    deferred: list[tuple[int, list[str]]] = []
    for i, r in enumerate(fails):
        text = " ".join(x for x in (r.name, r.observed or "", r.reason or "") if x)
        # a root's specific matchers (its link) win over any root's node-wide ones
        hit = next((j for j in roots if any(m(r, text) for m in matchers[j][0])), None)
        if hit is None:
            hit = next((j for j in roots if any(m(r, text) for m in matchers[j][1])), None)
        if hit is not None:
            root_of[i] = hit
            continue
        refs = re.findall(r"see ([\w-]+)'s rows", text)
        if refs:
            deferred.append((i, refs))  # decided once the referenced node's rows are
            continue
        roots.append(i)
        root_of[i] = i
        matchers[i] = _root_matchers(r)
    changed = True
    while changed and deferred:
        changed = False
        for item in list(deferred):
            i, refs = item
            r = fails[i]
            same = [root_of[j] for j, o in enumerate(fails) if j in root_of and o.node in refs
                    and o.subject == r.subject]
            if same:
                root_of[i] = same[0]
                deferred.remove(item)
                changed = True
    for i, _ in deferred:  # nothing explains them: roots of their own
        roots.append(i)
        root_of[i] = i
    roots.sort()
    out = {j: (fails[j], []) for j in roots}
    for i, j in sorted(root_of.items()):
        if i != j:
            out[j][1].append(fails[i])
    return [out[j] for j in roots]


def _root_matchers(root: CheckResult) -> tuple[list, list]:
    """(specific, node-wide) predicates ``(row, text) -> bool`` for rows following ``root``."""
    out: list[Callable[[CheckResult, str], bool]] = []
    wide: list[Callable[[CheckResult, str], bool]] = []
    if "<->" in root.name:
        out.append(lambda r, text, p=_word(root.name.strip()): bool(p.search(text)))
        for end in (e.strip() for e in root.name.split("<->")):
            if ":" not in end:
                continue
            node, iface = end.split(":", 1)
            out.append(lambda r, text, p=_word(end): bool(p.search(text)))
            out.append(lambda r, text, n=node, p=_word(iface): r.node == n and bool(p.search(text)))
    node = root.node
    if node and re.search(rf"is not running on {re.escape(node)}(?!\w)", root.reason or ""):
        # a dead daemon: nothing about the node can be read, and its peers lose it
        wide.append(lambda r, text, n=node, p=_word(node): r.node == n or bool(p.search(text)))
    elif node and root.name == f"{node} ASN":
        # a wrong ASN / router-id: rows whose observation or cause names the node
        wide.append(lambda r, text, p=_word(node): bool(
            p.search(" ".join(x for x in (r.observed, r.reason) if x))))
    return out, wide
