"""PFC failure-mode scenarios (railab.testbed.pfcfail) without a lab: what they ask of the
switch agent."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def test_pfc_failure_scenarios_run_their_watchdog_off_phase_with_it_off(monkeypatch):
    """scripts/pfc_failures.py on an intent with ``pfc_watchdog`` on ran the storm and deadlock
    scenarios' "watchdog off" phase with the lab's watchdog on (pfc_session's default is the
    intent's); both now ask the agent for none and start the given one live."""
    from contextlib import contextmanager

    from railab.testbed import pfcfail
    from railab.topologies.generator import _build_spec, resolve_lab
    from railab.topologies.intent import load_intent

    intent = load_intent("mini-lossless")
    spec = _build_spec(intent, resolve_lab(intent), "wdoff")
    seen = []

    class Stop(Exception):
        pass

    @contextmanager
    def session(spec, netns_of, enabled=None, *, watchdog=None):
        seen.append(watchdog)
        raise Stop

    monkeypatch.setattr(pfcfail.cap, "pfc_session", session)
    with pytest.raises(Stop):
        pfcfail.deadlock_run(spec, lambda n: n, object())
    monkeypatch.setattr(pfcfail.F, "inject", lambda *a, **k: SimpleNamespace(id="f1"))
    monkeypatch.setattr(pfcfail.F, "list_faults", lambda lab: [])
    with pytest.raises(Stop):
        pfcfail.storm_victims("wdoff", spec, lambda n: n, object())
    assert seen == [False, False]
