"""pytest plugin (entry point ``railab``): test a lab from your own repository.

Options (command line, or the same names in ``[pytest]`` ini with ``_`` for ``-``):

* ``--railab-intent NAME|PATH``: generate this intent (shipped name such as ``mini`` or a YAML
  path) and bring it up on the netns runtime once per session, converged; torn down at the end.
* ``--railab-lab NAME|DIR``: use an already running lab (never torn down).
* ``--railab-name NAME``: lab name when bringing an intent up (default ``pt<pid>``).
* ``--railab-timeout S``: convergence budget when bringing up.

railab plugins (entry points ``railab.plugins`` and ``RAILAB_PLUGINS``, see railab.plugins)
are loaded at ``pytest_configure``: a node kind, check, pattern or path class from your own
package is known to the fixtures.

Fixture ``lab`` (session scope, alias ``railab_lab``): a :class:`checks.lab.LiveLab` with
``.spec``, ``.hops("srv1:gpu3", "srv2:gpu3", pxn=False) -> int | None`` (one real RoCEv2 flow,
hops by TTL), ``.check(only="bgp,routes") -> list[CheckResult]`` and ``.exec(node, argv)``.
Tests using it are skipped when neither option is given::

    def test_rail3(lab):
        assert lab.hops("srv1:gpu3", "srv2:gpu3") == 1

    def test_fabric(lab):
        assert not [r.message() for r in lab.check() if r.status == "fail"]
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("railab", "railab lab under test")
    for opt, help_ in (
        ("intent", "intent name or YAML to bring up for the session (torn down after)"),
        ("lab", "running lab name or lab directory to test (left running)"),
        ("name", "lab name when bringing --railab-intent up (default pt<pid>)"),
        ("timeout", "convergence budget in seconds when bringing up"),
    ):
        group.addoption(f"--railab-{opt}", dest=f"railab_{opt}", default=None, help=help_)
        parser.addini(f"railab_{opt}", help_, default=None)


def pytest_configure(config: pytest.Config) -> None:
    """Load railab plugins (railab.plugins: entry points ``railab.plugins``, ``RAILAB_PLUGINS``)
    so the registrations they make reach ``lab.check()`` and the fixtures."""
    from railab.plugins import PluginError, load_plugins

    try:
        load_plugins()
    except PluginError as exc:
        raise pytest.UsageError(str(exc)) from None


def _opt(config: pytest.Config, name: str) -> str | None:
    val = config.getoption(f"railab_{name}")
    if val is None:
        val = config.getini(f"railab_{name}") or None
    return val


@pytest.fixture(scope="session")
def railab_lab(request: pytest.FixtureRequest):
    """The lab under test (see the module docstring); skips when none is configured."""
    from railab.checks.lab import LiveLab
    from railab.errors import RailabError

    config = request.config
    intent, existing = _opt(config, "intent"), _opt(config, "lab")
    if intent and existing:
        raise pytest.UsageError("give --railab-intent or --railab-lab, not both")
    if not intent and not existing:
        pytest.skip("no railab lab: pass --railab-intent NAME|PATH or --railab-lab NAME|DIR")
    try:
        if existing:
            live = LiveLab.attach(existing)
        else:
            timeout = _opt(config, "timeout")
            live = LiveLab.bring_up(intent, name=_opt(config, "name") or f"pt{os.getpid()}",
                                    timeout=float(timeout) if timeout else None)
    except (RailabError, ValueError) as exc:
        raise pytest.UsageError(f"railab: {exc}") from None
    try:
        yield live
    finally:
        live.close()


@pytest.fixture(scope="session")
def lab(railab_lab):
    """Alias of ``railab_lab``: ``def test_x(lab): assert lab.hops("srv1:gpu0", "srv2:gpu0") == 1``."""
    return railab_lab
