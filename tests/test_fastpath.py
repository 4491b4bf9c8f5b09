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
from railab.traffic.load import DcqcnRP, Ns3MlxRP, rp_params

QOS = QosProfile(capacity=CapacityProfile(port_rate_mbps=200), dcqcn=DCQCN_400G)
RP_KW = rp_params(QOS)


def _same(py: DcqcnRP | Ns3MlxRP, c: fp.FastRP) -> None:
    for name in ("rc", "rt", "alpha", "cnps", "cuts", "fast", "additive", "hyper", "lowest_bps",
                 "next_alpha", "next_rate"):
        assert getattr(c, name) == getattr(py, name), name


events = st.lists(st.tuples(st.sampled_from(["cnp", "sent", "tick", "hold"]),
                            st.floats(min_value=0.0, max_value=0.5),
                            st.integers(min_value=1, max_value=4_000_000)), max_size=60)


@pytest.mark.parametrize("rules", ["paper", "ns3"])
@settings(max_examples=300, deadline=None)
@given(seq=events)
def test_compiled_reaction_point_is_dcqcnrp_event_for_event(rules, seq):
    """The C reaction point against the Python one, event for event: the paper's rules
    (``DcqcnRP``) and, with a CNP interval, HPCC ns-3's (``Ns3MlxRP``, ``dp_rp_ns3``)."""
    if rules == "paper":
        py, c = DcqcnRP(**RP_KW, now=0.0), fp.FastRP(**RP_KW, now=0.0)
    else:
        kw = {**RP_KW, "cnp_interval_s": QOS.capacity.lab_seconds(QOS.dcqcn.cnp_interval_us)}
        py, c = Ns3MlxRP(**kw, now=0.0), fp.FastRP(**kw, now=0.0)
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


def _cnp_to_sender() -> bytes:
    return bytes(roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                                  src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101, psn=0,
                                  opcode=roce.CNP, ecn=roce.ECN_NOT_ECT))


def test_cnp_transit_pairs_each_cnp_with_the_nps_send_in_order():
    """Issue 44: the engine measures each CNP's transit, from the NP's send to the RP's read
    (both ends are in the one engine process, on one clock): CNPs sent at 1.0 and 1.1 s (a
    CNP per marked packet, interval 0) and read at 1.004 and 1.112 s transit 4 and 12 ms; a
    CNP with no send left to pair (not this engine's) is not counted; the Python engine keeps
    the same figures (load._transit)."""
    from railab.traffic.load import _transit

    ctx, qps, (a, b, _buf) = _rx_ctx(interval_s=0.0)
    try:
        q = qps[0]
        fp.rx(ctx, _data(1000, roce.ECN_CE), 1.0)
        fp.rx(ctx, _data(1001, roce.ECN_CE), 1.1)
        assert q.cnp_sent == 2 and q.cnp_w == 2
        fp.rx(ctx, _cnp_to_sender(), 1.004)
        fp.rx(ctx, _cnp_to_sender(), 1.112)
        fp.rx(ctx, _cnp_to_sender(), 1.2)   # nothing left to pair with
        assert q.cnp_rx == 3 and q.cnp_lat_n == 2
        assert q.cnp_lat_sum == pytest.approx(0.016) and q.cnp_lat_max == pytest.approx(0.012)
        t = _transit([q.cnp_lat_n, q.cnp_lat_sum, q.cnp_lat_max], 2000.0)
        assert t == {"cnps": 2, "mean_s": 0.008, "max_s": 0.012, "fabric_mean_us": 4.0,
                     "fabric_max_us": 6.0}
        assert _transit([0, 0.0, 0.0], 2000.0) is None
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


# ---- the RC transport (IBTA 9.7): responder and requester rules on packets ------------------
ACK_EVERY, NAK_AFTER = 4, 3


def _rc_ctx(nic: int, goal: int = 100):
    """One QP with the transport on (nic 1 gbn, 2 ooo): its ACK/NAK frames go to a socket pair
    (returned read end); data frames are fed with :func:`fp.rx`."""
    ctx, qps, (a, b, buf) = _rx_ctx(interval_s=1.0, cc=False)
    q = qps[0]
    q.nic, q.goal, q.rtx_one = nic, goal, -1
    keep = [buf]
    acks = (fp.Tpl * 2)()
    for j, syn in enumerate((roce.AETH_ACK, roce.AETH_NAK_PSN_SEQ)):
        ft = roce.FrameTemplate(roce.roce_packet(
            src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01", src_ip="10.0.1.1",
            dst_ip="10.0.0.1", dst_qpn=0x101, psn=0, opcode=roce.RC_ACKNOWLEDGE, syndrome=syn))
        t, tb = fp.make_tpl(ft.raw(), ft.icrc_tables())
        acks[j] = t
        keep.append(tb)
    q.ack_tpl = ctypes.cast(acks, ctypes.POINTER(fp.Tpl))
    keep.append(acks)
    ctx.ack_every, ctx.ooo_nak_after, ctx.rto = ACK_EVERY, NAK_AFTER, 0.5
    return ctx, qps, (a, b, keep)


def _acks(sock) -> list[tuple[str, int]]:
    """(ACK|NAK, PSN index) of every frame the responder sent, in order."""
    out = []
    while True:
        try:
            f = sock.recv(4096)
        except BlockingIOError:
            return out
        op, _qpn, psn, _ = roce.parse_bth(f)
        assert op == roce.RC_ACKNOWLEDGE
        syn = f[14 + 20 + 8 + 12]  # AETH's syndrome, right after the BTH
        kind = "NAK" if (syn & 0x60) == 0x60 else "ACK"
        out.append((kind, (psn - 1000) & 0xFFFFFF))


def _feed(ctx, idxs, t0=0.0, ackreq=()):
    for k, i in enumerate(idxs):
        f = bytearray(_data(1000 + i))
        if i in ackreq:
            f[14 + 20 + 8 + 8] |= 0x80  # BTH ack request (the ICRC is not checked on receive)
        fp.rx(ctx, bytes(f), t0 + k * 1e-3)


def test_gbn_responder_acks_in_order_and_naks_a_gap_once():
    ctx, qps, (a, b, _k) = _rc_ctx(nic=1)
    try:
        q = qps[0]
        _feed(ctx, [0, 1, 2, 3])                 # in order: one coalesced ACK at 4 packets
        assert q.epsn == 4 and _acks(b) == [("ACK", 3)]
        _feed(ctx, [5, 6, 7], t0=0.01)           # 4 lost: NAK(4) once, the rest dropped
        assert q.epsn == 4 and _acks(b) == [("NAK", 4)] and q.naks_tx == 1
        _feed(ctx, [4, 5], t0=0.02)              # go-back-N resend from 4: in order again
        assert q.epsn == 6 and q.nak_out == 0
        _feed(ctx, [3], t0=0.03, ackreq=(3,))    # a duplicate with an ack request: re-ACKed
        assert q.dup_rx == 1 and _acks(b)[-1] == ("ACK", 5)
    finally:
        fp.release(ctx)
        a.close(), b.close()


def test_gbn_requester_goes_back_to_the_naks_psn_and_acks_move_it_on():
    ctx, qps, (a, b, _k) = _rc_ctx(nic=1)
    try:
        q = qps[0]
        q.nxt = q.hi = 10                        # packets 0..9 sent
        q.last_ack_t = 0.0
        nak = bytes(roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                                     src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101,
                                     psn=1000 + 4, opcode=roce.RC_ACKNOWLEDGE,
                                     syndrome=roce.AETH_NAK_PSN_SEQ))
        fp.rx(ctx, nak, 0.1)
        fp.take_acks(ctx, 0, 0.1)
        assert (q.nxt, q.una, q.naks_rx) == (4, 4, 1)   # resend 4, 5, ... (everything from 4)
        ack = bytes(roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                                     src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101,
                                     psn=1000 + 9, opcode=roce.RC_ACKNOWLEDGE,
                                     syndrome=roce.AETH_ACK))
        fp.rx(ctx, ack, 0.2)
        fp.take_acks(ctx, 0, 0.2)
        assert q.una == 10 and q.acks_rx == 1
    finally:
        fp.release(ctx)
        a.close(), b.close()


def _ack(idx: int, nak: bool = False) -> bytes:
    """The responder's ACK (or NAK) of PSN index ``idx`` as the requester receives it."""
    return bytes(roce.roce_packet(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01",
                                  src_ip="10.0.1.1", dst_ip="10.0.0.1", dst_qpn=0x101,
                                  psn=1000 + idx, opcode=roce.RC_ACKNOWLEDGE,
                                  syndrome=roce.AETH_NAK_PSN_SEQ if nak else roce.AETH_ACK))


@pytest.mark.parametrize("nic", [1, 2])
def test_a_lost_tail_is_resent_after_the_timeout(nic):
    ctx, qps, (a, b, _k) = _rc_ctx(nic=nic)
    try:
        q = qps[0]
        q.nxt = q.hi = 10
        q.una, q.last_ack_t = 8, 1.0             # 8 and 9 lost: no later packet reveals them
        fp.take_acks(ctx, 0, 1.0 + 0.4)          # within rto (0.5 s): nothing
        assert q.timeouts == 0
        fp.take_acks(ctx, 0, 1.0 + 0.6)
        assert q.timeouts == 1
        if nic == 1:  # go-back-N: everything from the oldest unacked
            assert q.nxt == 8 and q.rtx_one == -1
        else:  # selective repeat: that one, then the next on every partial ACK (NewReno)
            assert q.rtx_one == 8 and q.rec_hi == 10 and q.nxt == 10
            q.rtx_one = -1                           # 8 resent ...
            fp.rx(ctx, _ack(8), 1.7)                 # ... and acknowledged, 9 still missing:
            fp.take_acks(ctx, 0, 1.7)                # resent at once, not a timeout later
            assert q.una == 9 and q.rtx_one == 9 and q.timeouts == 1
            q.rtx_one = -1
            fp.rx(ctx, _ack(9), 1.8)
            fp.take_acks(ctx, 0, 1.8)
            assert q.una == 10 and q.rec_hi == 0 and q.rtx_one == -1   # recovered
    finally:
        fp.release(ctx)
        a.close(), b.close()


def test_ooo_responder_places_past_a_gap_and_naks_only_a_lasting_hole():
    ctx, qps, (a, b, _k) = _rc_ctx(nic=2)
    try:
        q = qps[0]
        _feed(ctx, [0, 2, 3])                    # 1 late (reordered): 2 later packets, no NAK
        assert q.epsn == 1 and q.naks_tx == 0
        _feed(ctx, [1], t0=0.01)                 # the hole fills: 1, 2, 3 in order at once
        assert q.epsn == 4 and q.naks_tx == 0
        _feed(ctx, [5, 6, 7, 8], t0=0.02)        # 4 lost: NAK(4) after 3 later packets
        assert q.naks_tx == 1 and ("NAK", 4) in _acks(b)
        _feed(ctx, [4], t0=0.03)                 # selective repeat of 4 alone completes 4..8
        assert q.epsn == 9
    finally:
        fp.release(ctx)
        a.close(), b.close()


def test_ooo_responder_naks_the_next_hole_as_soon_as_a_resend_fills_one():
    """A lost burst under out-of-order placement: once a resent packet fills the first hole,
    the next hole (packets already placed past it) is older than that resend, so lost: it is
    NAKed at once, one hole per round trip, not one per timeout; a hole with nothing placed
    past it ends the episode."""
    ctx, qps, (a, b, _k) = _rc_ctx(nic=2)
    try:
        q = qps[0]
        _feed(ctx, [0, 3, 5, 6, 7])              # 1, 2 and 4 lost: NAK(1) after 3 later packets
        assert q.epsn == 1 and q.naks_tx == 1 and _acks(b) == [("NAK", 1)]
        _feed(ctx, [1], t0=0.01)                 # the resend of 1: 2 is the next hole, 3+ placed
        assert q.epsn == 2 and q.naks_tx == 2 and _acks(b) == [("NAK", 2)]
        _feed(ctx, [2], t0=0.02)                 # 2, 3 in order; 4 missing, 5-7 placed: NAK(4)
        assert q.epsn == 4 and q.naks_tx == 3 and _acks(b) == [("NAK", 4)]
        _feed(ctx, [4], t0=0.03)                 # 4..7 in order, nothing placed past: episode over
        assert q.epsn == 8 and q.naks_tx == 3 and q.nak_out == 0
    finally:
        fp.release(ctx)
        a.close(), b.close()


@pytest.mark.parametrize("nic", [1, 2])
def test_a_nak_after_the_last_packet_resends_at_once_not_at_the_timeout(nic):
    """A QP that has sent every packet waits for ACKs until the timeout (next_t = last ACK +
    rto); a NAK then must wake it: the resend goes now (it used to wait out the timeout)."""
    ctx, qps, (a, b, _k) = _rc_ctx(nic=nic, goal=10)
    try:
        q = qps[0]
        q.nxt = q.hi = 10                        # every packet sent
        q.una, q.last_ack_t, q.next_t = 4, 1.0, 1.0 + 0.5
        fp.rx(ctx, _ack(6, nak=True), 1.1)       # 6 missing
        fp.take_acks(ctx, 0, 1.1)
        assert q.next_t == pytest.approx(1.1) and q.una == 6
        assert (q.nxt if nic == 1 else q.rtx_one) == 6
    finally:
        fp.release(ctx)
        a.close(), b.close()
