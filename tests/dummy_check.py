"""A dummy check family for tests/test_checks_unit.py: one module registers it, and it then runs
via ``run_checks``, is selectable with ``railab check --only dummy`` and shows in the CLI."""

from __future__ import annotations

from railab.checks.base import CheckResult, Observer, passed, register_check


def check_dummy(obs: Observer) -> list[CheckResult]:
    """One row: how many switches ``lab.json`` lists."""
    n = len(obs.switches)
    return [passed("dummy", "switch count", expected="any", observed=str(n))]


def register() -> None:
    """Register ``dummy`` after every built-in family (idempotent)."""
    register_check("dummy", check_dummy, order=1000, description="counts switches",
                   replace=True)
