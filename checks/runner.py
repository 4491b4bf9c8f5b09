"""Run the check families against a lab: ``run_checks(spec, executor) -> list[CheckResult]``."""

from __future__ import annotations

from typing import Callable, Iterable

from checks.base import CHECKS, CMD_BGP_TABLE, CMD_RIB, CMD_SUMMARY, CheckResult, Observer
from testbed.executor import Executor
from topologies.labspec import LabSpec


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
            from checks.bgp import check_bgp

            out += check_bgp(obs)
        elif name == "routes":
            from checks.routes import check_routes

            out += check_routes(obs)
        elif name == "cabling":
            from checks.cabling import check_cabling

            out += check_cabling(obs)
        elif name == "oversub":
            from checks.oversub import check_oversub

            out += check_oversub(obs)
        elif name == "hops":
            from checks.hops import check_hops

            out += check_hops(obs, runner=hops_runner)
    return out


def summary(results: list[CheckResult]) -> dict[str, dict[str, int]]:
    """Per family: ``{"bgp": {"pass": 16, "fail": 0, "skip": 0}, ...}`` in run order."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        out.setdefault(r.check, {"pass": 0, "fail": 0, "skip": 0})[r.status] += 1
    return {k: out[k] for k in sorted(out, key=lambda c: CHECKS.index(c) if c in CHECKS else 99)}
