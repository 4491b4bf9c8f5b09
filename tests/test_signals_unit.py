"""Root-free: railab.testbed.signals turns a failure that a signal caused into the interrupt it
is, and its blocks never lose a signal or skip a rollback."""

from __future__ import annotations

import signal

import pytest

from railab.errors import RailabError
from railab.testbed import signals as S


def test_a_deferred_block_whose_body_failed_still_delivers_its_signal():
    """The helper died of the same Ctrl-C (the body raises a failure): the signal wins."""
    with pytest.raises(S.Interrupted) as err:
        with S.signals_raise():
            with S.signals_deferred():
                signal.raise_signal(signal.SIGINT)
                raise RailabError("creating 96 veth pairs failed: host: exit -2")
    assert err.value.signum == signal.SIGINT
    assert isinstance(err.value.__context__, RailabError)  # what failed is kept as the context


def test_interruption_names_the_signal_that_came():
    with S.signals_raise():
        assert S.interruption(RailabError("x")) is None  # a failure of its own
        with pytest.raises(S.Interrupted):
            with S.signals_deferred():
                signal.raise_signal(signal.SIGTERM)
        intr = S.interruption(RailabError("nft: exit -15"))
        assert isinstance(intr, S.Interrupted) and intr.signum == signal.SIGTERM
        assert S.received() == signal.SIGTERM
        own = KeyboardInterrupt()
        assert S.interruption(own) is own


def test_an_outermost_block_outside_the_command_line_starts_a_new_record():
    """A test or the console: a signal long past never turns a later failure into one."""
    with pytest.raises(S.Interrupted):
        with S.signals_raise():
            signal.raise_signal(signal.SIGINT)
    assert S.received() == signal.SIGINT
    with S.signals_raise():
        assert S.received() is None
        assert S.interruption(RailabError("x")) is None


def test_a_rollback_runs_whole_and_the_held_signal_comes_after_it():
    """A signal held by signals_deferred, a rollback under signals_ignored (a second Ctrl-C in
    it is ignored): the rollback runs to its end, then the first signal surfaces."""
    ran = []
    with pytest.raises(S.Interrupted) as err:
        with S.signals_raise():
            with S.signals_deferred():
                signal.raise_signal(signal.SIGINT)  # recorded, held until the block ends
                with S.signals_ignored():
                    signal.raise_signal(signal.SIGTERM)  # ignored here
                    ran.append("rollback")
    assert ran == ["rollback"] and err.value.signum == signal.SIGINT


def test_sigint_event_takes_sigterm_too_and_records_it():
    with S.sigint_event() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.is_set()
    assert S.received() == signal.SIGTERM


def test_settle_is_a_no_op_outside_the_command_line():
    before = signal.getsignal(signal.SIGINT)
    S.settle()
    assert signal.getsignal(signal.SIGINT) is before
