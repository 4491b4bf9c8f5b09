"""Observation of a running lab, the single convergence predicate, the check families and
root-cause grouping.

* :mod:`railab.checks.frr`: FRR vtysh commands, JSON field paths, parsers and the shared
  session / route predicate (convergence wait and checks);
* :mod:`railab.checks.base`: :class:`~railab.checks.base.CheckResult` with structured
  references and causes, the :class:`~railab.checks.base.Observer` (FRR JSON + netlink), the
  one link-up rule, and the check registry (``CHECKS``, ``register_check``);
* :mod:`railab.checks.cabling`, ``bgp``, ``routes``, ``oversub``, ``hops``: the built-in
  families (registered when :mod:`railab.checks.runner` is imported);
* :mod:`railab.checks.runner`: ``run_checks``, ``group_failures``, ``root_causes``;
* :mod:`railab.checks.converge`: waiting for convergence; :mod:`railab.checks.junit`: the one
  JUnit writer; :mod:`railab.checks.lab`: ``LiveLab``.
"""
