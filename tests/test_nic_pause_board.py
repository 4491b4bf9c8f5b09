"""PFC at the sender NIC (issue 44): the switch agent's PAUSE board and the load engine's hold,
without a lab.

While the agent's PFC pauses a server NIC, the load engine's QPs on that NIC send nothing and
bank no time: a NIC's scheduler skips a paused priority and resumes each QP at its rate
(HPCC ns-3 ``RdmaEgressQueue::GetNextQindex`` and ``UpdateNextAvail``). Before the board the
engine kept pacing into the paused NIC's queue, which left at the port rate on RESUME
(docs/congestion.md "PFC emulation")."""

from __future__ import annotations

import ctypes
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from railab.testbed.pfc import NIC_PAUSE_FILE, NIC_PAUSE_INDEX, NicPauseBoard
from railab.traffic import fastpath as fp
from railab.traffic import roce
from railab.traffic.load import LoadEngine

KEYS = [("srv2", "eth1"), ("srv1", "eth1"), ("srv2", "eth1")]


def test_the_agents_board_is_read_by_the_engines_side(tmp_path):
    board = NicPauseBoard.create(tmp_path, KEYS)
    try:
        assert board.keys == [("srv1", "eth1"), ("srv2", "eth1")]  # sorted, once each
        assert json.loads((tmp_path / NIC_PAUSE_INDEX).read_text())["ports"] == ["srv1:eth1",
                                                                                "srv2:eth1"]
        seen = NicPauseBoard.attach(tmp_path)
        assert seen is not None and seen.offset(("srv2", "eth1")) == 1
        assert seen.offset(("leaf1", "eth1")) is None
        assert not seen.paused(("srv2", "eth1"))
        board.set(("srv2", "eth1"), True)
        board.set(("leaf1", "eth1"), True)  # not on the board: nothing
        assert seen.paused(("srv2", "eth1")) and not seen.paused(("srv1", "eth1"))
        addr = seen.address(1)  # what the fast path reads: dp_pause {t_resume, paused}
        assert ctypes.c_uint8.from_address(addr + 8).value == 1
        board.set(("srv2", "eth1"), False, now=12.5)
        assert ctypes.c_double.from_address(addr).value == 12.5 == seen.resumed_at(1)
        assert not seen.paused(("srv2", "eth1"))
        board.set(("srv2", "eth1"), True)
        assert seen.paused_at(1) and seen.resumed_at(1) == 12.5  # a PAUSE keeps the last RESUME
        seen.close()
    finally:
        board.close()
    # the agent's close: nothing stays paused, and the files are gone
    assert not (tmp_path / NIC_PAUSE_FILE).exists() and not (tmp_path / NIC_PAUSE_INDEX).exists()
    assert NicPauseBoard.attach(tmp_path) is None


def test_no_board_or_a_garbled_one_is_none(tmp_path):
    assert NicPauseBoard.attach(tmp_path) is None
    (tmp_path / NIC_PAUSE_INDEX).write_text("{not json")
    (tmp_path / NIC_PAUSE_FILE).write_bytes(b"\0")
    assert NicPauseBoard.attach(tmp_path) is None
    (tmp_path / NIC_PAUSE_INDEX).write_text(json.dumps({"ports": ["a:eth1", "b:eth1"]}))
    assert NicPauseBoard.attach(tmp_path) is None  # one byte for two ports
    NicPauseBoard.remove(tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_python_engine_holds_a_paused_qp_and_banks_nothing(tmp_path):
    board = NicPauseBoard.create(tmp_path, [("srv2", "eth1")])
    try:
        eng = object.__new__(LoadEngine)
        eng._board = board
        q = SimpleNamespace(pause_at=0, held_since=0.0, pfc_holds=0, pfc_held_s=0.0,
                            next_t=0.9, frame_bits=8000, line_bps=8e6, ppm=1, goal=0, sent=0,
                            active=True)
        board.set(("srv2", "eth1"), True)
        eng._send_due(q, 1.0)
        assert (q.pfc_holds, q.held_since, q.active) == (1, 1.0, True)
        assert q.next_t == pytest.approx(1.001)  # looks again a frame time at the line rate on
        eng._send_due(q, 1.1)
        assert q.pfc_holds == 1 and q.held_since == 1.0  # the same PAUSE
        board.set(("srv2", "eth1"), False, now=1.25)
        eng._send_due(q, 1.3)  # seen 50 ms late: it goes on from the RESUME
        assert q.pfc_held_s == pytest.approx(0.25) and q.held_since == 0.0
        assert q.next_t == 1.25
        assert not q.active  # it went on to send (its goal, 0 packets, is met)
        board.set(("srv2", "eth1"), True)
        eng._send_due(q, 2.0)
        board.set(("srv2", "eth1"), False, now=1.9)  # a RESUME older than the hold: from now
        eng._send_due(q, 2.2)
        assert q.pfc_holds == 2 and q.pfc_held_s == pytest.approx(0.45) and q.next_t == 2.2
    finally:
        board.close()


def test_the_fast_path_sends_nothing_while_its_nic_is_paused_and_no_burst_after(tmp_path):
    """One QP at 2,000 frames/s on a socket pair for 0.6 s, its NIC PAUSEd from 0.2 to 0.4 s:
    nothing leaves while paused (one frame at most, read before the flag), and after RESUME it
    goes on at its rate from the RESUME's time, with no catch-up of the paused time."""
    fp.load()
    board = NicPauseBoard.create(tmp_path, [("srv2", "eth1")])
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.settimeout(0.05)
    frame = roce.FrameTemplate(roce.roce_packet(
        src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
        dst_ip="10.0.1.1", dst_qpn=0x100, psn=0, opcode=roce.RC_RDMA_WRITE_ONLY,
        payload=b"x" * 64))
    tpls = (fp.Tpl * 4)()
    keep = []
    for j in range(4):
        t, buf = fp.make_tpl(frame.raw(), frame.icrc_tables())
        tpls[j] = t
        keep.append(buf)
    qps = (fp.Qp * 1)()
    q = qps[0]
    pps = 2000.0
    q.tx_fd = q.cnp_fd = a.fileno()
    q.tpl = ctypes.cast(tpls, ctypes.POINTER(fp.Tpl))
    q.ntpl, q.ppm, q.goal = 1, 1, -1
    q.dqpn, q.sqpn, q.start_psn, q.max_idx, q.rtx_one = 0x100, 0x101, 1000, -1, -1
    q.last_cnp = -1e18
    q.frame_bits = 8 * len(frame.raw())
    q.line_bps = q.frame_bits * pps
    q.active = 1
    q.pause = board.address(0)
    ctx = fp.Ctx()
    rx_none = (ctypes.c_int32 * 1)()
    ctx.qps, ctx.nqp, ctx.rx_fds, ctx.nrx = qps, 1, rx_none, 0
    ctx.jitter, ctx.max_lag, ctx.catch_up = 0.0, 0.05, 4
    ctx.drain_idle, ctx.drain_max, ctx.nthreads = 0.01, 0.05, 1
    ctx.rto, ctx.ack_every, ctx.ooo_nak_after = 1.0, 1, 1
    t0 = time.monotonic() + 0.05
    q.start_t = q.next_t = ctx.t0 = t0
    ctx.end_t, ctx.deadline = t0 + 0.6, t0 + 5.0

    got = []
    done = threading.Event()

    def drain() -> None:  # every frame the QP sent, until the run is over and the socket idle
        while True:
            try:
                got.append(b.recv(4096))
            except TimeoutError:
                if done.is_set():
                    return
            except OSError:
                return

    marks: dict[str, tuple[float, int]] = {}

    def toggle() -> None:
        start = ctx.t0 if ctx.t0 > t0 else t0  # dp_run moves t0 when its workers start late
        time.sleep(max(0.0, start + 0.2 - time.monotonic()))
        board.set(("srv2", "eth1"), True)
        marks["pause"] = (time.monotonic(), q.sent)
        time.sleep(0.2)
        marks["held"] = (time.monotonic(), q.sent)
        board.set(("srv2", "eth1"), False)

    reader = threading.Thread(target=drain)
    toggler = threading.Thread(target=toggle)
    reader.start()
    toggler.start()
    try:
        assert fp.run(ctx) == 0
    finally:
        done.set()
        toggler.join()
        reader.join()
        fp.release(ctx)
        a.close()
        b.close()
        board.close()
    (t_pause, s_pause), (t_resume, s_resume) = marks["pause"], marks["held"]
    assert s_resume - s_pause <= 1, "frames left while the NIC was paused"
    assert q.pfc_holds == 1
    assert q.pfc_held_s == pytest.approx(t_resume - t_pause, abs=0.03)
    after = q.sent - s_resume
    due = (ctx.t_end - t_resume) * pps  # its rate from RESUME on
    assert after <= due + 5, f"{after} frames after RESUME, {due:.0f} due: the paused time came back"
    assert after >= 0.5 * due, f"{after} frames after RESUME, {due:.0f} due"
    assert len(got) == q.sent  # each counted frame left on the socket


def test_the_text_output_names_the_sender_nics_pfc_held():
    from railab.cli.traffic import nic_pause_line

    flows = [{"src": "srv9:gpu0", "pfc_holds": 0, "pfc_held_s": 0.0},
             {"src": "srv2:gpu0", "pfc_holds": 5, "pfc_held_s": 0.0359},
             {"src": "srv3:gpu0", "pfc_holds": 9, "pfc_held_s": 0.2}]
    line = nic_pause_line(flows, 2000.0)
    assert line == ("sender NICs held by PFC PAUSE (measured; their QPs sent nothing until RESUME): "
                    "srv3:gpu0 9 x, 200.0 lab ms (100.00 us fabric); "
                    "srv2:gpu0 5 x, 35.9 lab ms (17.95 us fabric)")
    assert nic_pause_line(flows[:1], 2000.0) is None
    assert nic_pause_line([{"src": "a"}], 2000.0) is None  # a run without the board's counts
    many = [{"src": f"srv{i}:gpu0", "pfc_holds": 1, "pfc_held_s": i / 1000} for i in range(1, 9)]
    assert nic_pause_line(many, 2000.0, most=6).endswith("and 2 more")
