"""The load engine's compiled fast path (traffic/fastpath.c) held against railab's Python rules,
without a lab: DCQCN's reaction point event for event against ``DcqcnRP``, the per-packet ICRC
against a zlib pass over the whole frame, and the receive path (PSN order, CE, the NP's CNP
pacing, a CNP's rate cut) on frames built with scapy, CNPs read off a socket pair."""

from __future__ import annotations

import ctypes
import random
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railab.topologies.qos import DCQCN_400G, DEFAULT_QOS, CapacityProfile, QosProfile
from railab.traffic import fastpath as fp
from railab.traffic import roce
from railab.traffic.load import DcqcnRP, rp_params

QOS = QosProfile(capacity=CapacityProfile(port_rate_mbps=200), dcqcn=DCQCN_400G)
RP_KW = rp_params(QOS)


def _same(py: DcqcnRP, c: fp.FastRP) -> None:
    for name in ("rc", "rt", "alpha", "cuts", "fast", "additive", "hyper", "lowest_bps",
                 "next_alpha", "next_rate"):
        assert getattr(c, name) == getattr(py, name), name


events = st.lists(st.tuples(st.sampled_from(["cnp", "sent", "tick", "hold"]),
                            st.floats(min_value=0.0, max_value=0.5),
                            st.integers(min_value=1, max_value=4_000_000)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(events)
def test_compiled_reaction_point_is_dcqcnrp_event_for_event(seq):
    py, c = DcqcnRP(**RP_KW, now=0.0), fp.FastRP(**RP_KW, now=0.0)
    now = 0.0
    for kind, dt, nbytes in seq:
        now += dt
        if kind == "cnp":
            py.on_cnp(now), c.on_cnp(now)
        elif kind == "sent":
            py.on_sent(nbytes), c.on_sent(nbytes)
        elif kind == "tick":
            py.tick(now), c.tick(now)
        else:
            py.hold(dt), c.hold(dt)
        _same(py, c)


def test_compiled_reaction_point_cuts_by_half_alpha_and_recovers():
    c = fp.FastRP(**RP_KW, now=0.0)
    line = RP_KW["line_bps"]
    c.on_cnp(0.001)
    assert c.rc == pytest.approx(line / 2)  # alpha starts at 1: RC x (1 - 1/2)
    assert c.cuts == 1 and c.lowest_bps == c.rc
    c.tick(0.001 + 20 * RP_KW["rate_timer_s"])
    assert line / 2 < c.rc <= line and c.fast >= 1


def test_bad_reaction_point_arguments_are_refused():
    with pytest.raises(ValueError):
        fp.FastRP(**{**RP_KW, "rate_timer_s": 0.0})


def _tpl(op: int, payload: int = 256) -> roce.FrameTemplate:
    return roce.FrameTemplate(roce.roce_packet(
        src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
        dst_ip="10.0.1.1", dst_qpn=0x1234, psn=0, opcode=op, payload=bytes(range(256)) * (payload // 256),
        va=0x7F0000000000, rkey=0x1234, dmalen=1 << 20))


@pytest.mark.parametrize("op", [roce.RC_RDMA_WRITE_FIRST, roce.RC_RDMA_WRITE_MIDDLE,
                                roce.RC_RDMA_WRITE_LAST, roce.RC_RDMA_WRITE_ONLY])
def test_compiled_frames_carry_the_icrc_a_full_crc_pass_gives(op):
    ft = _tpl(op, 4096)
    t, _buf = fp.make_tpl(ft.raw(), ft.icrc_tables())
    rnd = random.Random(op)
    for psn in [0, 1, 0xFFFFFF, 0x800000] + [rnd.randrange(1 << 24) for _ in range(50)]:
        for ack in (False, True):
            assert fp.frame(t, psn, ack) == bytes(ft.frame(psn, ack))  # zlib over BTH..payload
            assert roce.parse_bth(fp.frame(t, psn, ack))[2] == psn


def _rx_ctx(interval_s: float, cc: bool = True):
    """A one-QP context whose CNPs go to a socket pair (returned: ctx, qp array, read end)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.setblocking(False)
    qps = (fp.Qp * 1)()
    q = qps[0]
    q.dqpn, q.sqpn, q.start_psn, q.max_idx = 0x100, 0x101, 1000, -1
    q.last_cnp = -1e18
    cnp = roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                           src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101, psn=0,
                           opcode=roce.CNP, ecn=roce.ECN_NOT_ECT)
    buf = ctypes.create_string_buffer(bytes(cnp), len(bytes(cnp)))
    q.cnp_frame, q.cnp_len, q.cnp_fd = ctypes.addressof(buf), len(bytes(cnp)), a.fileno()
    q.cc = int(cc)
    if cc:
        fp.rp_init(q.rp, **RP_KW, now=0.0)
    ctx = fp.Ctx()
    ctx.qps, ctx.nqp, ctx.cnp_interval = qps, 1, interval_s
    return ctx, qps, (a, b, buf)


def _data(psn: int, ecn: int = roce.ECN_ECT0, qpn: int = 0x100, ttl: int = 61) -> bytes:
    return bytes(roce.roce_packet(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                                  src_ip="10.0.0.1", dst_ip="10.0.1.1", dst_qpn=qpn, psn=psn,
                                  opcode=roce.RC_RDMA_WRITE_MIDDLE, payload=b"x" * 64, ecn=ecn,
                                  ttl=ttl))


def test_receive_path_counts_psn_order_ce_and_paces_cnps():
    ctx, qps, (a, b, _buf) = _rx_ctx(interval_s=0.05)
    try:
        q = qps[0]
        for k, (i, ecn, t) in enumerate([(0, roce.ECN_ECT0, 0.0), (2, roce.ECN_CE, 0.01),
                                          (1, roce.ECN_CE, 0.02), (5, roce.ECN_CE, 0.07),
                                          (3, roce.ECN_ECT0, 0.08)]):
            fp.rx(ctx, _data(1000 + i, ecn), t)
            assert q.rx == k + 1
        assert q.ooo == 2 and q.max_psn_dist == 2  # PSN 1 after 2; PSN 3 after 5
        assert q.ce == 3
        assert q.cnp_sent == 2  # CE at 0.01 and 0.07: the one at 0.02 is within 50 ms of 0.01
        cnps = [b.recv(2048) for _ in range(2)]
        assert all(roce.parse_bth(f)[:2] == (roce.CNP, 0x101) for f in cnps)
        assert q.ttl == 61
        fp.rx(ctx, _data(1000, qpn=0x999), 0.09)  # another QP's packet: not counted
        assert q.rx == 5
    finally:
        fp.release(ctx)
        a.close(), b.close()


def test_a_cnp_cuts_the_senders_rate_at_once():
    ctx, qps, (a, b, _buf) = _rx_ctx(interval_s=0.05)
    try:
        q = qps[0]
        line = RP_KW["line_bps"]
        cnp = bytes(roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                                     src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101, psn=0,
                                     opcode=roce.CNP, ecn=roce.ECN_NOT_ECT))
        fp.rx(ctx, cnp, 0.5)
        assert q.cnp_rx == 1 and q.rp.cuts == 1
        assert q.rp.rc == pytest.approx(line / 2)
    finally:
        fp.release(ctx)
        a.close(), b.close()


def test_library_is_rebuilt_for_another_source(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_CACHE", str(tmp_path))
    path = fp.build()
    assert path.parent == tmp_path and path.exists()
    assert fp.build() == path  # built once per source
    src = tmp_path / "fastpath.c"
    src.write_text(fp.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(fp, "SOURCE", src)
    assert fp.library_path() != path


def test_no_compiler_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(fp.FastPathUnavailable, match="fast path"):
        fp.build(force=True)
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".fastpath-*"))


def test_default_qos_has_a_reaction_point_too():
    c = fp.FastRP(**rp_params(DEFAULT_QOS), now=0.0)
    assert c.rc == DEFAULT_QOS.capacity.port_rate_mbps * 1e6
