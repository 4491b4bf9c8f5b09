"""Probe-stream statistics on synthetic sequences (railab.traffic.stream.SeqStats): gaps,
reordering (RFC 4737), duplicates, latency; and the drill's pure helpers. No root, no lab."""

from __future__ import annotations

import pytest

from railab.traffic.stream import SeqStats

RATE = 1000.0  # 1 ms between probes


def _stream(n: int, rate: float = RATE) -> tuple[SeqStats, list[float]]:
    s = SeqStats(rate)
    ts = [10.0 + i / rate for i in range(n)]
    for t in ts:
        s.sent(t)
    return s, ts


def test_clean_stream_has_no_loss_and_latency_from_send_time():
    s, ts = _stream(100)
    for i, t in enumerate(ts):
        assert s.received(i, t + 50e-6) == "new"
    out = s.summary()
    assert (out["tx"], out["rx"], out["lost"], out["loss_pct"]) == (100, 100, 0, 0.0)
    assert out["longest_gap_ms"] == 0.0 and out["outages"] == []
    assert out["reordered"] == out["duplicate"] == out["stray"] == 0
    assert out["latency_us"] == {"min": 50.0, "avg": 50.0, "max": 50.0}


def test_gap_lasts_from_first_lost_send_to_first_delivered_send():
    s, ts = _stream(1000)
    lost = set(range(200, 250)) | {700}  # a 50 ms outage and a single lost probe
    for i, t in enumerate(ts):
        if i not in lost:
            s.received(i, t + 1e-4)
    out = s.summary()
    assert out["lost"] == 51 and out["loss_pct"] == pytest.approx(5.1)
    assert [o["packets"] for o in out["outages"]] == [50, 1]
    assert out["outages"][0]["ms"] == pytest.approx(50.0, abs=1e-6)
    assert out["outages"][1]["ms"] == pytest.approx(1.0, abs=1e-6)  # resolution = 1 / rate
    assert out["longest_gap_ms"] == pytest.approx(50.0, abs=1e-6)
    assert all(o["recovered"] for o in out["outages"])


def test_trailing_loss_is_an_unrecovered_outage_to_the_end_of_sending():
    s, ts = _stream(100)
    for i in range(90):
        s.received(i, ts[i])
    s.end = ts[-1] + 0.001
    (o,) = s.outages()
    assert (o.first, o.packets, o.recovered) == (90, 10, False)
    assert o.ms == pytest.approx(10.0, abs=1e-6)


def test_reordered_per_rfc4737_and_not_lost():
    s, ts = _stream(10)
    order = [0, 1, 3, 2, 4, 6, 7, 5, 8, 9]  # 2 and 5 arrive late
    kinds = [s.received(i, ts[i] + 0.002) for i in order]
    assert kinds.count("reordered") == 2
    assert [order[k] for k, v in enumerate(kinds) if v == "reordered"] == [2, 5]
    out = s.summary()
    assert out["reordered"] == 2 and out["lost"] == 0 and out["outages"] == []


def test_one_early_packet_reorders_only_the_late_ones():
    s, ts = _stream(6)
    for i in [5, 0, 1, 2, 3, 4]:  # index 5 overtakes: 0..4 are all below NextExp = 6
        s.received(i, ts[-1])
    assert s.reordered == 5


def test_duplicates_are_counted_once_each_and_never_as_delivered():
    s, ts = _stream(5)
    for i in [0, 1, 1, 2, 2, 2, 3, 4]:
        s.received(i, ts[i])
    out = s.summary()
    assert out["rx"] == 5 and out["duplicate"] == 3 and out["lost"] == 0


def test_strays_and_unsent_indexes_do_not_count():
    s, ts = _stream(3)
    assert s.received(3, ts[-1]) == "stray"
    assert s.received(-1, ts[-1]) == "stray"
    assert s.summary()["rx"] == 0 and s.summary()["stray"] == 2


def test_all_lost_has_no_latency_and_one_outage():
    s, ts = _stream(20)
    out = s.summary()
    assert out["lost"] == 20 and out["loss_pct"] == 100.0 and out["latency_us"] is None
    assert len(out["outages"]) == 1 and out["outages"][0]["recovered"] is False


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate"):
        SeqStats(0)
