"""The load engine (traffic/load.py): DCQCN reaction point, CNP pacing, source port modes, CNP
frames, the incast pattern, and live incast runs.

Unit tests feed the pure classes synthetic CNP sequences and check the numbers of Zhu et al.
2015 (section 3) by hand. Live tests (``integration``) run on the ``mini`` lab with the
receiver's leaf port shaped in the test itself (htb-free: tbf at 40 Mb/s with a 4 MiB limit, and
an nftables egress virtual queue that marks CE past 1 MiB), so the engine is proven
independently of the capacity dataplane; the mini-lossless runs are in the same module and skip
when the capacity dataplane is not installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railab.errors import RailabError
from railab.topologies.qos import (
    DCQCN_400G,
    DCQCN_CONNECTX,
    DCQCN_PAPER,
    DCQCN_PROFILES,
    DEFAULT_QOS,
    CapacityProfile,
    QosProfile,
    dcqcn_profile,
)
from railab.traffic import roce
from railab.traffic.load import (
    _QP,
    CATCH_UP,
    FIXED_SPORT,
    LOAD_RT_PRIORITY,
    PACING_JITTER,
    CnpPacer,
    DcqcnRP,
    LoadEngine,
    LoadFlow,
    LoadResult,
    _reset,
    fair_share,
    fairness,
    qp_sport,
    run_load,
    spray_ports,
    steady_state_check,
)
from railab.traffic.patterns import Flow, PatternError, flows_for, incast_pairs, route
from railab.traffic.stream import flow_sport, run_sender_child, scheduling

ROOT = Path(__file__).resolve().parents[1]


def _rp(**kw) -> DcqcnRP:
    args = dict(g=1 / 256, alpha_timer_s=0.55, rate_timer_s=0.55, byte_counter=10_000_000,
                fast_recovery_steps=5, rai_bps=4000.0, rhai_bps=40000.0, min_bps=1000.0)
    args.update(kw)
    return DcqcnRP(40e6, **args)


# ---- DCQCN reaction point ----------------------------------------------------------------------
def test_dcqcn_cut_and_alpha_on_a_cnp_sequence():
    rp = _rp()
    assert rp.rate == 40e6 and rp.alpha == 1.0 and rp.lowest_bps == 40e6
    rp.on_cnp(0.0)  # alpha 1: RC halves, RT keeps the old rate, alpha = (1-g)*1 + g = 1
    assert rp.rate == 20e6 and rp.rt == 40e6 and rp.alpha == pytest.approx(1.0)
    rp.on_cnp(0.1)
    assert rp.rate == 10e6 and rp.rt == 20e6 and rp.lowest_bps == 10e6
    rp.on_sent(10_000_000)  # a rate-increase event (fast recovery) raises RC, not the lowest
    assert rp.rate == 15e6 and rp.lowest_bps == 10e6
    # alpha decays by (1-g) per alpha period without a CNP: 3 periods after 0.1 s
    rp.tick(0.1 + 3 * 0.55 + 1e-9)
    assert rp.alpha == pytest.approx((1 - 1 / 256) ** 3)
    # the next cut uses the decayed alpha, then raises it by g
    a = rp.alpha
    before = rp.rate
    rp.on_cnp(2.0)
    assert rp.rate == pytest.approx(before * (1 - a / 2))
    assert rp.alpha == pytest.approx((1 - 1 / 256) * a + 1 / 256)
    assert rp.cnps == rp.cuts == 3


def test_dcqcn_timers_hold_over_time_lost_to_the_host():
    """Time the host took from a QP (the engine dropped its debt) is not DCQCN time: alpha and
    the rate timer stand still over it, and run as before afterwards."""
    rp, ref = _rp(), _rp()
    rp.hold(100 * 0.55)  # a hundred alpha periods in which the QP could not send
    rp.tick(100 * 0.55 + 1e-9)
    assert rp.alpha == 1.0 and rp.t_steps == 0  # nothing decayed, no rate event
    rp.tick(101 * 0.55 + 1e-9)
    ref.tick(0.55 + 1e-9)
    assert rp.alpha == ref.alpha == pytest.approx(1 - 1 / 256)
    rp.on_cnp(102 * 0.55)  # a CNP after the hold cuts with the undecayed alpha: RC x 0.5
    assert rp.rate == pytest.approx(40e6 * (1 - (1 - 1 / 256) / 2))
    # the engine's order: the timers ran through the lost time before it was known; the hold
    # then makes those periods up with as many without an event
    late, ref = _rp(), _rp()
    late.tick(10 * 0.55 + 1e-9)  # 10 periods ran, all of them lost to the host
    late.hold(10 * 0.55)
    late.tick(20 * 0.55 + 1e-9)  # the next 10 have no event
    assert late.alpha == pytest.approx((1 - 1 / 256) ** 10) and late.t_steps == 10
    late.tick(30 * 0.55 + 1e-9)
    ref.tick(20 * 0.55 + 1e-9)
    assert late.alpha == pytest.approx(ref.alpha) and late.t_steps == ref.t_steps == 20


def test_dcqcn_fast_recovery_then_additive_then_hyper():
    rp = _rp(byte_counter=1000)  # a small byte counter so BC steps can be driven by hand
    rp.on_cnp(0.0)
    rc, rt = rp.rate, rp.rt
    # F = 5 timer events: fast recovery, RC halves the distance to RT, RT unchanged
    for k in range(1, 6):
        rp.tick(k * 0.55 + 1e-9)
        rc = (rt + rc) / 2
        assert rp.rate == pytest.approx(rc) and rp.rt == rt
    assert rp.fast == 5 and rp.additive == 0
    # timer step 6 (T > F, BC = 0): additive increase, RT += R_AI
    rp.tick(6 * 0.55 + 1e-9)
    assert rp.additive == 1
    # the target is capped at line rate (RT was 40e6 already, R_AI pushes it to the cap)
    assert rp.rt == 40e6
    # byte-counter steps: T = 6 and BC = 6 > F -> hyper increase
    rp2 = _rp(byte_counter=1000)
    rp2.on_cnp(0.0)
    rp2.on_cnp(0.01)
    rp2.on_cnp(0.02)  # RC 5 Mb/s, RT 10 Mb/s
    for k in range(1, 7):
        rp2.tick(0.02 + k * 0.55 + 1e-9)
    assert rp2.t_steps == 6 and rp2.additive == 1
    for _ in range(6):
        rp2.on_sent(1000)
    assert rp2.bc_steps == 6 and rp2.hyper == 1  # min(T, BC) = 6 > F = 5
    assert rp2.rate <= rp2.rt <= 40e6


def test_dcqcn_floor_and_from_qos_scaling():
    rp = _rp(min_bps=5e6)
    for i in range(10):
        rp.on_cnp(i * 0.01)
    assert rp.rate == 5e6  # never below the floor
    q = QosProfile(capacity=CapacityProfile(enabled=True, port_rate_mbps=40), dcqcn=DCQCN_PAPER)
    rp = DcqcnRP.from_qos(q)
    scale = 400 * 1000 / 40
    assert rp.line_bps == 40e6
    assert rp.rate_timer_s == pytest.approx(55e-6 * scale)  # 0.55 lab s
    assert rp.rai == pytest.approx(40e6 / scale)  # R_AI 40 Mb/s fabric -> 4 kb/s lab
    assert rp.byte_counter == DCQCN_PAPER.byte_counter_bytes  # bytes keep their value
    # the default (400g) profile: rate steps x10, alpha every 1 us fabric = 10 ms lab
    rp = DcqcnRP.from_qos(QosProfile(capacity=CapacityProfile(enabled=True, port_rate_mbps=40)))
    assert rp.rai == pytest.approx(400e6 / scale) and rp.rhai == pytest.approx(800e6 / scale)
    assert rp.alpha_timer_s == pytest.approx(1e-6 * scale) and rp.g == 5 / 1024
    # connectx: 300 us rate timer = 3 lab s, the byte counter keeps its 32,767 B, R_AI 5 Mb/s
    cx = DcqcnRP.from_qos(q.model_copy(update={"dcqcn": DCQCN_CONNECTX}))
    assert cx.rate_timer_s == pytest.approx(300e-6 * scale) and cx.byte_counter == 32767
    assert cx.rai == pytest.approx(5e6 / scale) and cx.F == 1
    assert rp.rate_timer_s == pytest.approx(55e-6 * scale)
    with pytest.raises(ValueError, match="positive"):
        DcqcnRP(0, g=0.1, alpha_timer_s=1, rate_timer_s=1, byte_counter=1, fast_recovery_steps=1,
                rai_bps=1, rhai_bps=1, min_bps=1)


def test_dcqcn_profiles_are_named_and_sourced():
    assert set(DCQCN_PROFILES) == {"paper", "400g", "connectx"}
    assert DEFAULT_QOS.dcqcn == DCQCN_400G and QosProfile().dcqcn.name == "400g"
    p, f = DCQCN_PAPER, DCQCN_400G
    # the paper's section-5 values, kept as they were
    assert (p.g, p.alpha_timer_us, p.rate_timer_us, p.byte_counter_bytes, p.fast_recovery_steps,
            p.ai_rate_mbps, p.hai_rate_mbps, p.cnp_interval_us) == (1 / 256, 55, 55, 10_000_000,
                                                                   5, 40, 400, 50)
    # 400g: R_AI and the byte counter at the same share of a 10x faster line (B: the paper's
    # 2 ms of line-rate bytes), R_HAI HPCC's 50 * 400 / 25 Mb/s (the fluid model: 10x the
    # paper's overshoots into PFC at 2:1); alpha as ConnectX firmware (dce_tcp_rtt 1 us,
    # dce_tcp_g 1019/1024); the rate timer, F and the NP unchanged
    assert f.ai_rate_mbps == 10 * p.ai_rate_mbps and f.hai_rate_mbps == 50 * 400 / 25
    assert f.min_rate_mbps == 10 * p.min_rate_mbps
    assert f.byte_counter_bytes == 10 * p.byte_counter_bytes
    assert f.alpha_timer_us == 1 and f.g == 1 - 1019 / 1024
    assert (f.rate_timer_us, f.fast_recovery_steps, f.cnp_interval_us) == (
        p.rate_timer_us, p.fast_recovery_steps, p.cnp_interval_us)
    assert dcqcn_profile("paper") is p
    with pytest.raises(ValueError,
                       match="unknown DCQCN profile 'mlx5': use one of paper, 400g, connectx"):
        dcqcn_profile("mlx5")
    # connectx: the mlx5 firmware's defaults (rp_time_reset, rp_byte_reset, rp_threshold,
    # rp_ai_rate, rp_hai_rate, rp_min_rate, dce_tcp_rtt, rate_reduce_monitor_period; dce_tcp_g)
    c = DCQCN_CONNECTX
    assert (c.rate_timer_us, c.byte_counter_bytes, c.fast_recovery_steps, c.ai_rate_mbps,
            c.hai_rate_mbps, c.min_rate_mbps, c.alpha_timer_us, c.cnp_interval_us) == (
        300, 32767, 1, 5, 50, 1, 1, 4)
    assert c.g == f.g and dcqcn_profile("connectx") is c
    # a lab.json written before the profiles existed (no name) reads as the paper's values
    old = {k: v for k, v in p.model_dump().items() if k != "name"}
    assert QosProfile.model_validate({"dcqcn": old}).dcqcn == p


def test_alpha_of_the_400g_profile_falls_between_cnps():
    """Under a CNP every 50 us (the NP's interval), alpha settles near g / (1 - (1-g)^50),
    ~0.022, so a cut costs ~1 %; with the paper's profile it stays near 1 (halving)."""
    q = QosProfile(capacity=CapacityProfile(enabled=True, port_rate_mbps=40))
    rp = DcqcnRP.from_qos(q)
    interval = q.capacity.lab_seconds(q.dcqcn.cnp_interval_us)  # 0.5 lab s
    for k in range(200):
        rp.tick(k * interval)
        rp.on_cnp(k * interval)
    g = 5 / 1024
    assert rp.alpha == pytest.approx(g / (1 - (1 - g) ** 50), rel=0.1)
    paper = DcqcnRP.from_qos(q.model_copy(update={"dcqcn": DCQCN_PAPER}))
    for k in range(200):
        paper.tick(k * interval)
        paper.on_cnp(k * interval)
    assert paper.alpha > 0.9


def test_cnp_pacer_one_per_qp_per_interval():
    p = CnpPacer(0.5)
    marks = [0.0, 0.1, 0.49, 0.5, 0.7, 1.2, 1.21]
    assert [p.due(7, t) for t in marks] == [True, False, False, True, False, True, False]
    assert p.due(9, 0.1)  # another QP has its own interval
    assert CnpPacer(0.0).due(1, 0.0) and CnpPacer(0.0).due(1, 0.0)


# ---- source ports and frames ---------------------------------------------------------------------
def test_source_port_modes():
    spec = _mini_spec()
    f = route(spec, Flow(("srv2", 0), ("srv1", 0)))
    g = route(spec, Flow(("srv3", 0), ("srv1", 0)))
    assert qp_sport(f, "per-qp") == flow_sport(f) != flow_sport(g)
    assert qp_sport(f, "fixed") == qp_sport(g, "fixed") == FIXED_SPORT
    ports = spray_ports(qp_sport(f, "spray"))
    assert len(set(ports)) == len(ports) == 16 and all(49152 <= p <= 65535 for p in ports)
    assert ports[0] == flow_sport(f)
    with pytest.raises(RailabError, match="per-qp, fixed, spray"):
        qp_sport(f, "random")


def test_cnp_frame_is_ibta_a17():
    pkt = roce.roce_packet(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                           src_ip="10.0.0.1", dst_ip="10.0.0.2", dst_qpn=0x1235, psn=0,
                           opcode=roce.CNP, ecn=roce.ECN_NOT_ECT, qos=DEFAULT_QOS)
    raw = bytes(pkt)
    e = Ether(raw)
    assert e[IP].tos >> 2 == DEFAULT_QOS.cnp_dscp == 48 and e[IP].tos & 3 == 0
    assert e[UDP].dport == 4791
    bth = e[roce.BTH]
    assert bth.opcode == 0x81 and bth.becn == 1 and bth.dqpn == 0x1235
    assert len(raw) == 14 + 20 + 8 + 12 + 16 + 4  # BTH + 16 reserved bytes + ICRC
    assert roce.check_icrc(raw)


# ---- incast pattern ------------------------------------------------------------------------------
_SPEC = {}


def _mini_spec():
    if "mini" not in _SPEC:
        import tempfile

        from railab.topologies.generator import generate
        from railab.topologies.labspec import LabSpec

        d = generate(ROOT / "topologies" / "intents" / "mini.yml",
                     Path(tempfile.mkdtemp()) / "ldu", name="ldu")
        _SPEC["mini"] = LabSpec.load(d)
    return _SPEC["mini"]


def test_incast_senders_on_distinct_servers_across_the_fabric():
    spec = _mini_spec()
    pairs = incast_pairs(spec, 3)
    assert {b for _a, b in pairs} == {("srv1", 0)}
    assert len({a[0] for a, _b in pairs}) == 3  # three distinct servers first
    assert {"srv3", "srv4"} & {a[0] for a, _ in pairs}  # the other group too
    eight = incast_pairs(spec, 8)
    assert len(set(eight)) == 8 and all(a[0] != "srv1" for a, _ in eight)
    fl = flows_for(spec, "incast")
    assert len(fl) == 8 and all(f.dst_nic == 1 and f.expected_hops for f in fl)
    with pytest.raises(PatternError, match="use --senders 12 or fewer"):
        incast_pairs(spec, 13)
    with pytest.raises(PatternError, match="at least 1"):
        incast_pairs(spec, 0)


def test_fairness_and_result_shape():
    r = LoadResult(cc="dcqcn", sport_mode="per-qp", seconds=1, sample_s=0.1, port_rate_mbps=40,
                   time_scale=1e4, flows=[{"rx_mbps_last_half": 5.0}, {"rx_mbps_last_half": 15.0}])
    assert fairness(r) == [0.25, 0.75]
    d = r.to_dict()
    assert {"ce_marked", "cnp_sent", "cnp_received", "dropped", "pause_events", "flows",
            "ports", "keeps_rate"} <= set(d)
    json.dumps(d)


def _flow_rx(rx: float, cc: float, n: int = 10) -> dict:
    t = [round(0.1 * (i + 1), 1) for i in range(n)]
    return {"rx_mbps_last_half": rx, "series": {"t": t, "cc_mbps": [40.0] * (n // 2) + [cc] * (n - n // 2)}}


def test_fair_share_block():
    r = LoadResult(cc="dcqcn", sport_mode="per-qp", seconds=1, sample_s=0.1, port_rate_mbps=40,
                   time_scale=1e4, flows=[_flow_rx(5.0, 5.0), _flow_rx(3.8, 6.0),
                                          _flow_rx(6.2, 20.0), _flow_rx(5.0, 5.0)],
                   pause_events=3, pause_events_last_half=1)
    fs = fair_share(r)  # share 10 Mb/s (40 / 4)
    assert fs["share_mbps"] == 10.0 and fs["tolerance"] == 0.25
    assert fs["ratios"] == [0.5, 0.38, 0.62, 0.5] and fs["within"] is False
    assert fs["cc_ratios"] == [0.5, 0.6, 2.0, 0.5] and fs["pause_events_last_half"] == 1
    assert fs["window_s"] == [0.5, 1.0] and fs["sum_mbps"] == 20.0
    # 8 senders at 4.0-6.2 Mb/s of a 40 Mb/s port (share 5): within 25 % each (0.8-1.24)
    r.flows = [_flow_rx(x, x) for x in (4.0, 5.0, 6.2, 5.5, 4.5, 5.0, 4.8, 5.0)]
    fs = fair_share(r)
    assert fs["within"] is True and fs["min"] == 0.8 and fs["max"] == 1.24
    r.flows[0] = _flow_rx(3.7, 3.7)  # 0.74: one sender out, the verdict fails
    assert fair_share(r)["within"] is False
    r.flows = []
    assert fair_share(r)["within"] is False


class _Tpl:
    size = 4170

    def frame_shared(self, psn, ack):
        return b"x"


class _Sock:
    def __init__(self):
        self.n = 0

    def send(self, frame, flags):
        self.n += 1
        return len(frame)


def _stalled_qp(eng, spec, behind_s, now):
    q = _QP()
    _reset(q)
    q.lf = LoadFlow(route(spec, Flow(("srv2", 0), ("srv1", 0))))
    q.flow, q.tx, q.ppm, q.goal, q.ntpl, q.start_psn = q.lf.flow, _Sock(), 1, None, 1, 0
    q.tpls = [{roce.RC_RDMA_WRITE_ONLY: _Tpl()}]
    q.rp = DcqcnRP.from_qos(eng.qos, now=0.0, line_bps=eng.line_bps)
    q.next_t = now - behind_s
    return q


def test_engine_holds_dcqcn_timers_over_time_lost_to_the_host():
    """A QP the host kept from sending for longer than MAX_LAG_S: the engine drops the debt
    (counted as shortfall, not burst) and holds the QP's DCQCN timers over the same time."""
    spec = _mini_spec()
    eng = LoadEngine(spec)
    now = 10.0
    q = _stalled_qp(eng, spec, 0.5, now)
    alpha_t, rate_t = q.rp.next_alpha, q.rp.next_rate
    eng._send_due(q, now)
    assert q.tx.n == CATCH_UP and q.deficit_bytes > 0 and q.next_t == now
    gaps = CATCH_UP * _Tpl.size * 8 / eng.line_bps * (1 + PACING_JITTER)
    assert 0.5 - gaps <= q.rp.next_alpha - alpha_t <= 0.5
    assert q.rp.next_rate - rate_t == pytest.approx(q.rp.next_alpha - alpha_t)
    # a QP a few ms late catches up in a burst: no debt dropped, no time held
    late = _stalled_qp(eng, spec, 0.002, now)
    alpha_t = late.rp.next_alpha
    eng._send_due(late, now)
    assert late.deficit_bytes == 0 and late.rp.next_alpha == alpha_t


def _sched_child(conn, rt) -> None:
    run_sender_child(os.getppid(), conn, scheduling, rt_priority=rt)


@pytest.mark.skipif(os.geteuid() != 0, reason="real-time scheduling needs root (CAP_SYS_NICE)")
def test_sender_child_runs_at_real_time_priority_when_asked():
    """A load engine's child runs under SCHED_RR at the priority asked (the NICs are hardware
    that never waits for a CPU, LOAD_RT_PRIORITY); a probe stream's stays at nice -10."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    got = {}
    for rt in (LOAD_RT_PRIORITY, None):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_sched_child, args=(child, rt))
        proc.start()
        child.close()
        assert parent.poll(10)
        got[rt] = parent.recv()
        proc.join(5)
    assert got[LOAD_RT_PRIORITY] == ("done", f"SCHED_RR {LOAD_RT_PRIORITY}")
    assert got[None] == ("done", "nice -10")


def test_steady_state_check_is_dcqcns_published_steady_state():
    """With PFC on: the port >= 90 % used and every sender within 15 % of its share; with it
    off: >= 85 % used and <= 1 % of the packets dropped (edges included)."""
    on = steady_state_check(0.95, [0.85, 1.15], 0.0, pfc=True)
    assert on["met"] and on["band"] == 0.15 and on["ratio"] == {"min": 0.85, "max": 1.15}
    assert not steady_state_check(0.95, [0.84, 1.0], 0.0, pfc=True)["met"]
    assert not steady_state_check(0.95, [0.9, 1.24], 0.0, pfc=True)["met"]
    assert not steady_state_check(0.89, [1.0, 1.0], 0.0, pfc=True)["met"]
    off = steady_state_check(0.85, [0.5, 1.5], 1.0, pfc=False)
    assert off["met"] and off["dropped_max_pct"] == 1.0 and "band" not in off
    assert not steady_state_check(0.97, [1.0, 1.0], 1.01, pfc=False)["met"]
    assert not steady_state_check(0.84, [1.0, 1.0], 0.0, pfc=False)["met"]
    with pytest.raises(ValueError, match="no sender"):
        steady_state_check(0.9, [], 0.0, pfc=True)


def test_run_load_rejects_bad_input_before_forking():
    spec = _mini_spec()
    f = route(spec, Flow(("srv2", 0), ("srv1", 0)))
    with pytest.raises(RailabError, match="congestion control"):
        run_load(spec, lambda n: "x", [LoadFlow(f)], cc="reno", seconds=1)
    with pytest.raises(RailabError, match="run length"):
        run_load(spec, lambda n: "x", [LoadFlow(f)], seconds=0)
    with pytest.raises(RailabError, match="no load flows"):
        run_load(spec, lambda n: "x", [], seconds=1)


# ---- live --------------------------------------------------------------------------------------
def _shape_receiver_port(lab, rate_mbit: int = 40, limit: int = 4 << 20, kmin: int = 1 << 20):
    """tbf + an nft CE virtual queue on the incast receiver's leaf port; returns (sampler, undo)."""
    nic = lab.spec.nic("srv1", 1)
    ns = lab.record["namespaces"][nic.leaf]
    dev = nic.leaf_port

    def sh(*a, **kw):
        return subprocess.run(["ip", "netns", "exec", ns, *a], check=True, capture_output=True,
                              text=True, **kw)

    sh("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit", "burst",
       "32k", "limit", str(limit))
    sh("nft", "-f", "-", input=(
        f"table netdev loadtest {{\n chain eg {{\n type filter hook egress device {dev} "
        f"priority 0;\n meta protocol ip udp dport 4791 limit rate over {rate_mbit // 8} "
        f"mbytes/second burst {kmin} bytes ip ecn set ce\n }}\n}}\n"))

    def sampler():
        q = json.loads(sh("tc", "-s", "-j", "qdisc", "show", "dev", dev).stdout)[0]
        return {f"{nic.leaf}:{dev}": {"backlog_bytes": q.get("backlog", 0),
                                      "dropped": q.get("drops", 0)}}

    def undo():
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "netdev",
                        "loadtest"], capture_output=True)
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                       capture_output=True)
    return sampler, undo


@pytest.fixture(scope="module")
def shaped_mini(mini_lab):
    sampler, undo = _shape_receiver_port(mini_lab)
    try:
        yield mini_lab, sampler
    finally:
        undo()


def _incast(lab, sampler, cc, seconds, n=8):
    ns = lab.record["namespaces"]
    fl = [LoadFlow(f) for f in flows_for(lab.spec, "incast")[:n]]
    return run_load(lab.spec, ns.__getitem__, fl, cc=cc, seconds=seconds, port_sampler=sampler)


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_incast_none_drops_dcqcn_marks_cnps_and_drops_less(shaped_mini):
    lab, sampler = shaped_mini
    none = _incast(lab, sampler, "none", 3.0)
    # 8 senders at line rate into one 40 Mb/s port: 7/8 of the load is dropped at the leaf
    # (the 10 % rate claim is scripts/bench_load.py's; on the shared machine allow 25 % here)
    assert none.engine_shortfall < 0.25, none.engine_shortfall
    assert none.offered_mbps == pytest.approx(8 * 40 * (1 - none.engine_shortfall), rel=0.05)
    assert none.dropped > 0 and none.lost >= none.dropped * 0.9
    assert none.ce_marked > 0 and none.cnp_sent > 0
    assert none.cnp_received == none.cnp_sent  # CNPs are never queued behind the data
    assert all(f["tx_packets"] > 0.7 * 3.0 * 40e6 / 8 / 4170 for f in none.flows)  # line rate
    dc = _incast(lab, sampler, "dcqcn", 3.0)
    assert dc.ce_marked > 0 and dc.cnp_sent > 0 and dc.cnp_received > 0
    # every CE-marked QP got a CNP from the receiver NIC, and every CNP a QP received cut it
    # once. Not "every QP was cut": this test's dataplane marks at the nft hook before the tbf
    # tail-drops, so a QP can lose every marked packet (measured: a QP with 152 of 3,605
    # delivered and none marked; the old assertion failed in about a third of isolated runs,
    # on the code before issue 28's first-CNP change as after it)
    assert all(f["cnp_sent"] >= 1 for f in dc.flows if f["ce_marked"] > 0)
    assert all(f["dcqcn"]["cuts"] == f["cnp_received"] for f in dc.flows)
    assert sum(f["dcqcn"]["cuts"] >= 1 for f in dc.flows) >= len(dc.flows) // 2
    # fewer drops; "clearly less" (under half) is judged on railab's own dataplane, where ECN
    # comes from the real queue depth (test_live_lossless_incast_pfc_off_dcqcn_drops_less_than_none):
    # this lab's test-made token-bucket marking varied 0.23-0.59 of none's drops over 3 s runs
    assert dc.dropped < none.dropped, (dc.dropped, none.dropped)
    # the receiver's port carried the bottleneck rate, and the series says so
    port = f"{lab.spec.nic('srv1', 1).leaf}:{lab.spec.nic('srv1', 1).leaf_port}"
    s = dc.ports[port]
    assert len(s["t"]) >= 8 and max(s["tx_mbps"]) < 40 * 1.25  # the port never beats its rate
    assert sum(s["tx_mbps"]) / len(s["tx_mbps"]) > 20  # ... and was busy most of the run
    f0 = dc.flows[0]["series"]
    assert len(f0["t"]) == len(f0["tx_mbps"]) == len(f0["cc_mbps"]) >= 15
    # DCQCN cut the rate by about half: read off the reaction point, which records each cut
    # (the series samples RC every ~0.2 lab s, between troughs: a run's flow 0 was at 21.2 Mb/s
    # at its lowest sample). One cut multiplies RC by 1 - alpha/2, and alpha has decayed from 1
    # by the first CNP (this lab's alpha timer is 10 lab ms: (1-5/1024)^n over the ~30-40 ms the
    # queue takes to pass 1 MiB), so a QP cut once sits just above half: "below 20 Mb/s" held
    # only for QPs cut twice (CI: flow 0 at 20.252 = 40 x 0.506, one cut at alpha 0.987). The
    # bound is one cut at alpha >= 0.9; the series shows a cut too
    f0_rp = dc.flows[0]["dcqcn"]
    assert f0_rp["cuts"] >= 1 and f0_rp["lowest_rate_mbps"] <= 40 * (1 - 0.9 / 2), f0_rp
    assert min(f0["cc_mbps"]) < 40


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_byte_flows_complete_and_spray_reorders(mini_lab):
    ns = mini_lab.record["namespaces"]
    spec = mini_lab.spec
    # two QPs of 2 MiB each across the spines (unshaped: the engine's pace is the limit)
    fl = [LoadFlow(route(spec, Flow(("srv3", 0), ("srv1", 0))), bytes=2 << 20),
          LoadFlow(route(spec, Flow(("srv4", 1), ("srv2", 1))), bytes=2 << 20)]
    r = run_load(spec, ns.__getitem__, fl, cc="none", sport_mode="spray")
    for f in r.flows:
        assert f["rx_packets"] == f["goal_packets"] == 512 and f["lost"] == 0
        # 2 MiB at 40 Mb/s is ~0.43 s
        assert 0.3 < f["fct_s"] < 1.5
        assert f["hops"] == f["expected_hops"] == 3
    fixed = run_load(spec, ns.__getitem__, fl[:1], cc="none", sport_mode="fixed", seconds=0.5)
    assert fixed.flows[0]["sport"] == FIXED_SPORT and fixed.flows[0]["ooo"] == 0


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_cli_incast_json_and_exit_codes(mini_lab):
    from typer.testing import CliRunner

    from railab.cli import app

    res = CliRunner().invoke(app, ["traffic", mini_lab.name, "--pattern", "incast",
                                   "--senders", "3", "--cc", "none", "--seconds", "1", "--json"])
    d = json.loads(res.output)
    assert _ok(res.exit_code, d), res.output
    c = d["congestion"]
    for k in ("ce_marked", "cnp_sent", "cnp_received", "dropped", "pause_events"):
        assert isinstance(c[k], int), k
    assert d["senders"] == 3 and d["receiver"] == "srv1:gpu0" and len(c["flows"]) == 3
    assert all(0 <= f["shortfall"] <= 1 for f in c["flows"]) and d["dcqcn"] is None  # cc none
    # mini has no lab.capacity: its links are unlimited, so no port is used up or shared
    # (a reviewer got "receiver port used 797 %" against the generic profile's 40 Mb/s)
    assert c["fair_share"] is None and c["utilization"] is None and c["fabric_ms"] is None
    text = CliRunner().invoke(app, ["traffic", mini_lab.name, "--pattern", "incast", "--senders", "2",
                                    "--cc", "none", "--seconds", "1"]).output
    assert "links unlimited" in text and "port used" not in text and "us fabric" not in text, text
    # mini has no lab.capacity: dropped is the end-to-end loss (the module's own tbf on the
    # receiver port may still be there, so it need not be 0)
    assert c["dropped"] == c["lost"] and d["capacity"] is False and d["pfc"] == "off"
    bad = CliRunner().invoke(app, ["traffic", mini_lab.name, "--pattern", "incast",
                                   "--pfc", "on"])
    assert bad.exit_code == 2 and "no lab.capacity" in bad.output
    bad = CliRunner().invoke(app, ["traffic", mini_lab.name, "--pattern", "incast",
                                   "--senders", "99"])
    assert bad.exit_code == 2 and "--senders 12 or fewer" in bad.output


# ---- live, mini-lossless (the capacity dataplane: queues, ECN, PFC) -------------------------------
# ``lossless_lab`` is the session's (tests/conftest.py): each run opens and closes its own PFC
# session and is judged on counter deltas, so it shares the one bring-up with the other modules.


def _ok(rc: int, d: dict) -> bool:
    """Exit 0, or exit 1 whose only failure is the engine falling short on a busy host (the
    shared 2-core machine): the fabric figures are still measured, just at a lower load."""
    return rc == 0 or (rc == 1 and all("short of its configured rate" in f for f in d["failures"]))


def _cli_incast(lab, cc: str, pfc: str, seconds: float = 6.0,
                dcqcn: str | None = None, seed: int | str | None = None, senders: int = 8) -> tuple[int, dict]:
    from typer.testing import CliRunner

    from railab.cli import app

    res = CliRunner().invoke(app, ["traffic", lab.name, "--pattern", "incast", "--senders", str(senders),
                                   "--cc", cc, "--pfc", pfc, "--seconds", str(seconds), "--json",
                                   *(["--dcqcn", dcqcn] if dcqcn else []),
                                   *(["--seed", str(seed)] if seed is not None else [])])
    try:
        return res.exit_code, json.loads(res.output)
    except ValueError:
        pytest.fail(f"exit {res.exit_code}: {res.output}")


def _drops_at_meant_rate(run: dict, port: str, *, baseline: bool) -> float:
    """The drops had the engine sent all it meant to: ``dropped`` plus the packets it fell short
    by (``engine_shortfall`` s of what it meant, so tx x s / (1 - s)), i.e. as if every packet
    more had been dropped. For a run that is compared (``baseline=False``) that is an upper
    bound, so no weaker than its bare count. For the ``baseline`` it must not overstate, so
    it holds only while ``port`` (the receiver's) was saturated, asserted when s > 0: every
    packet more would have queued behind a full port. Two runs on a shared 2-core host fall
    short by different amounts (a CI run's ``--cc none`` baseline once offered about half its
    line rate, and so dropped 20,889 packets instead of ~48,400): bare counts do not compare."""
    c = run["congestion"]
    s = c["engine_shortfall"]
    if s == 0:
        return c["dropped"]
    if baseline:
        tx = c["ports"][port]["tx_mbps"]
        assert sum(tx) / len(tx) >= 0.9 * c["port_rate_mbps"], (port, sum(tx) / len(tx), s)
        assert s < 0.75, s  # a quarter of the line rate still overloads 8:1, but less is no baseline
    return c["dropped"] + sum(f["tx_packets"] for f in c["flows"]) * s / (1 - s)


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_lossless_incast_pfc_off_dcqcn_drops_less_than_none(lossless_lab):
    rc, none = _cli_incast(lossless_lab, "none", "off")
    assert _ok(rc, none), none["failures"]  # drops PFC-off predicts are a result, not a failure
    c = none["congestion"]
    assert none["senders"] == 8 and len({f["src"].split(":")[0] for f in c["flows"]}) == 8
    assert c["dropped"] > 0 and c["lost"] > 0 and c["pause_events"] == 0
    # the default profile (400g): DCQCN, not PFC, does the work -- under half of none's drops
    rc, fast = _cli_incast(lossless_lab, "dcqcn", "off")
    assert _ok(rc, fast), fast["failures"]
    f = fast["congestion"]
    assert fast["dcqcn"] == "400g" and f["dcqcn"]["name"] == "400g"
    assert f["ce_marked"] > 0 and f["cnp_sent"] > 0 and f["cnp_received"] > 0
    nic = lossless_lab.spec.nic("srv1", 1)
    port = f"{nic.leaf}:{nic.leaf_port}"
    base = _drops_at_meant_rate(none, port, baseline=True)
    assert _drops_at_meant_rate(fast, port, baseline=False) < 0.5 * base, (f["dropped"], c["dropped"], base)
    # the paper's profile (set for 40 Gb/s: halving per CNP, slow recovery) cuts harder
    rc, dc = _cli_incast(lossless_lab, "dcqcn", "off", dcqcn="paper")
    assert _ok(rc, dc), dc["failures"]
    d = dc["congestion"]
    assert dc["dcqcn"] == "paper"
    assert d["ce_marked"] > 0 and d["cnp_sent"] > 0 and d["cnp_received"] > 0
    assert _drops_at_meant_rate(dc, port, baseline=False) < 0.5 * base, (d["dropped"], base)  # DCQCN does the work
    # ... and stops the overload: the receiver port drops in the incast's first seconds, not
    # in the last half of the run (line-rate senders drop all along; the 400g profile's small
    # late cuts leave some drops there, docs/congestion.md "Fair share"), and the senders
    # together never get more than the port through
    for run, most in ((d, 0.1), (c, None)):
        drops = run["ports"][port]["dropped"]
        first, last = sum(drops[:len(drops) // 2]), sum(drops[len(drops) // 2:])
        if most is None:
            assert last > 0.3 * first  # --cc none: still dropping in the last half
        else:
            assert last <= most * max(1, first), (first, last)
    total = sum(f["rx_mbps_last_half"] for f in d["flows"])
    assert 0 < total <= none["port_rate_mbps"] * 1.05


def _incast_seed(lab, collide: bool, senders: int = 8) -> tuple[int, dict[str, list[str]]]:
    """The first ``fib_multipath_hash_seed`` (1-200) under which the N:1 incast's flows, traced
    through the switches' FIBs, share no link but the receiver's own (``collide=False``), or
    under which exactly two of them share links (``collide=True``); with those shared links.
    Which flows collide follows the hash: with the lab's own seed (random per boot) two of
    the four cross-group flows shared an uplink at every bring-up on one boot and at none on
    another, so a fair-share verdict must say which paths it was taken on."""
    from railab.traffic.ecmp import hashing
    from railab.traffic.fib import FabricView, shared_links
    from railab.traffic.load import qp_sport
    from railab.traffic.patterns import Flow, incast_pairs, route

    spec = lab.spec
    flows = [route(spec, Flow(a, b)) for a, b in incast_pairs(spec, senders, None, False)]
    for seed in range(1, 201):
        with hashing(spec, lab.netns_of, policy=None, seed=seed), \
                FabricView(spec, lab.netns_of) as view:
            traces = {f.name: view.trace(f, qp_sport(f, "per-qp")) for f in flows}
        assert all(t.delivered for t in traces.values()), {k: t.end for k, t in traces.items()}
        shared = shared_links(traces)
        if (not shared) if not collide else len({n for v in shared.values() for n in v}) == 2:
            return seed, shared
    pytest.fail(f"no hash seed in 1-200 gives {'a two-flow collision' if collide else 'link-disjoint paths'}")


def _needs_pfc() -> None:
    from railab.testbed import capacity

    if not hasattr(capacity, "pfc_session"):
        pytest.importorskip("railab.testbed.pfc", reason="the PFC emulation is not installed")


def _pfc_incast(lab, seed: int, check, enough, seconds: float = 8.0, senders: int = 8,
                cc: str = "dcqcn") -> dict:
    """An N:1 incast (8:1 for 8 lab s unless ``senders``, ``seconds``) with DCQCN and PFC on
    under hash seed ``seed``, measured once more
    when the engine fell > 10 % short of its rate and ``enough(congestion)`` is false (the
    host's CPU, not the fabric: measured 0.54 of the share for one QP whose DCQCN rate was
    1.39 shares, shortfall 27 %, load 15: that run says nothing about the fabric). Every run
    must exit as ``_ok`` says, lose nothing and pass ``check(json)``; returns the last JSON."""
    for _attempt in range(2):
        rc, dc = _cli_incast(lab, cc, "on", seconds=seconds, seed=seed, senders=senders)
        d = dc["congestion"]
        assert _ok(rc, dc), dc["failures"]
        assert d["dropped"] == 0 and d["lost"] == 0
        check(dc)
        if enough(d) or d["keeps_rate"]:
            break
    return dc


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_lossless_incast_dcqcn_pfc_on_is_lossless_and_fair(lossless_lab):
    """Issue 14's fair share: an 8:1 incast with DCQCN (default profile 400g) and PFC on (the
    intent's), ``railab traffic``'s default length, on link-disjoint paths (a hash
    seed under which no two flows share a link but the receiver's: docs/congestion.md "Fair
    share"): no loss, and each sender's receive rate over the last half within 25 % of 1/8 of
    the port."""
    _needs_pfc()
    seed, _ = _incast_seed(lossless_lab, collide=False)

    def check(dc: dict) -> None:
        d = dc["congestion"]
        assert d["hash_seed"] == seed and d["shared_links"] == {}, d["shared_links"]  # railab's own trace agrees
        assert all(f["path"] and f["path"][0].split(":")[0] == lossless_lab.spec.nic(
            f["src"].split(":")[0], f["src_nic"]).leaf for f in d["flows"])
        assert d["ce_marked"] > 0 and d["cnp_sent"] > 0

    from railab.cli.traffic import default_load_seconds

    # railab traffic's default length: 15 ms of fabric time since 2026-12-04 (30 lab s at
    # mini-lossless's 200 Mb/s); 8 lab s was the default (and 0.8 ms) at 40 Mb/s
    dc = _pfc_incast(lossless_lab, seed, check, lambda d: d["fair_share"]["within"],
                     seconds=default_load_seconds(lossless_lab.spec))
    d = dc["congestion"]
    fs = d["fair_share"]
    why = (fs["ratios"], fs["cc_ratios"], d["engine_shortfall"], os.getloadavg())
    if not fs["within"] and not d["keeps_rate"]:
        pytest.skip(f"the engine could not keep its rate twice (host load): no fair-share "
                    f"verdict; {why}")
    port = d["port_rate_mbps"]  # the intent's lab rate (mini-lossless: 200 Mb/s)
    assert dc["dcqcn"] == "400g" and fs["share_mbps"] == pytest.approx(port / 8)
    assert fs["within"] and all(0.75 <= r <= 1.25 for r in fs["ratios"]), why
    # every sender within 25 % keeps the port at least 3/4 busy (no fair share of an idle
    # port); the receivers never get more than the port through
    assert fs["sum_mbps"] <= port * 1.05, (fs["sum_mbps"], why)
    # DCQCN itself holds the senders well under line rate (8 shares): not PFC alone
    assert all(r < 4 for r in fs["cc_ratios"]), why


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_lossless_incast_ecmp_collision_pfc_shares_per_port(lossless_lab):
    """An incast under a hash seed that puts two senders on one link: PFC pauses a port, not a
    flow, so while PFC holds the senders' excess the two get less than the senders that have a
    link each, though their senders offer as much; railab names the shared links.

    Until 2026-12-04 this ran DCQCN (8:1, 8 lab s = 800 us of fabric time, measured 0.57-0.58
    against 1.10-1.14 shares): then PFC held DCQCN's excess for the incast's first ms. Since
    the lab marks on dequeue at time scale 2000, DCQCN holds the rates itself within a ms (the
    onset cuts every sender below its share; measured 1.10 and 1.05 for the colliding pair in
    an 8 s run), so PFC alone is tested here: ``--cc none`` (every QP at line rate), 4:1 (two
    senders across the spines), 4 lab s."""
    _needs_pfc()
    seed, shared = _incast_seed(lossless_lab, collide=True, senders=4)

    def check(dc: dict) -> None:
        d = dc["congestion"]
        assert d["pause_events"] > 0
        # the senders on the receiver's leaf are PAUSEd at their NIC (NicPauseBoard): their QPs
        # are held, for no more than the run, and nothing the board holds is counted as a NIC
        # that refused frames
        f0 = d["flows"][0]
        leaf = lossless_lab.spec.nic(f0["dst"].split(":")[0], f0["dst_nic"]).leaf
        local = [f for f in d["flows"] if lossless_lab.spec.nic(
            f["src"].split(":")[0], f["src_nic"]).leaf == leaf]
        assert local and all(f["pfc_holds"] > 0 for f in local), [
            (f["name"], f["pfc_holds"]) for f in d["flows"]]
        assert all(0 < f["pfc_held_s"] < d["seconds"] for f in local)

    d = _pfc_incast(lossless_lab, seed, check, lambda d: False, seconds=4.0, senders=4,
                    cc="none")["congestion"]
    if not d["keeps_rate"]:
        pytest.skip(f"the engine could not keep its rate twice (host load): {d['engine_shortfall']}")
    assert d["shared_links"] == shared  # the CLI's trace finds the collision the test found
    fs = d["fair_share"]
    both = {n for v in shared.values() for n in v}
    names = [f["name"] for f in d["flows"]]
    hit = [r for n, r in zip(names, fs["ratios"], strict=True) if n in both]
    free = [r for n, r in zip(names, fs["ratios"], strict=True) if n not in both]
    why = (shared, fs["ratios"], fs["cc_ratios"], os.getloadavg())
    assert len(hit) == 2 and max(hit) < 0.85 and max(hit) < min(free), why
    assert not fs["within"], why
    # their senders are not what holds them: they offer at least a share, like everyone
    assert all(r >= 0.75 for n, r in zip(names, fs["cc_ratios"], strict=True) if n in both), why


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_a_switch_agent_killed_mid_run_fails_the_run_and_is_undone(lossless_lab):
    """A fresh-user review (2026-12-07) SIGKILLed the switch agent in the middle of a PFC-on
    load run: the run did not say so, the sender NICs' PAUSE board stayed frozen (its QPs held
    to the end, counted as PFC holds) and the agent's paused ports stayed paused until the
    next session. Now the engine releases a board whose writer is gone, the session undoes
    what the agent held when the run ends, and the run fails naming the agent."""
    import signal
    import sys
    import time

    from railab.testbed import state as st
    from railab.testbed.pfc import NIC_PAUSE_INDEX

    _needs_pfc()
    run_dir = st.lab_dir(lossless_lab.name)
    p = subprocess.Popen([sys.executable, "-m", "railab", "traffic", lossless_lab.name, "--pattern",
                          "incast", "--senders", "4", "--cc", "none", "--pfc", "on", "--seconds",
                          "4", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid, end = None, time.monotonic() + 60
        while pid is None and time.monotonic() < end and p.poll() is None:
            rec = st.load(lossless_lab.name)
            if rec is not None and rec.agents.get("pfc") and (run_dir / NIC_PAUSE_INDEX).exists():
                pid = rec.agents["pfc"]
            time.sleep(0.05)
        assert pid is not None, "the run's switch agent never started"
        time.sleep(1.5)  # into the run: the receiver's leaf PAUSEs its senders' NICs
        os.kill(pid, signal.SIGKILL)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    d = json.loads(out)
    assert p.returncode == 1, err
    assert any("the switch agent (ECN marking, PFC) exited during the run" in w
               for w in d["failures"]), d["failures"]
    assert d["congestion"]["switch_agent_lost"] is True
    assert not list(run_dir.glob("nic-pause*"))  # no stale board for the next run or run_load
    for n in ("g1-leaf1", "srv2", "srv3", "spine1", "spine2"):  # nothing left paused
        for dev in lossless_lab.exec(n, ["ls", "/sys/class/net"]).stdout.split():
            if dev.startswith("eth"):
                shown = lossless_lab.exec(n, ["tc", "qdisc", "show", "dev", dev]).stdout
                assert not re.search(r"tbf \S+ parent \S+ rate 8Kbit", shown), (n, dev, shown)


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_ctrl_c_stops_the_load_run(mini_lab):
    import signal
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-m", "railab", "traffic", mini_lab.name, "--pattern",
                          "incast", "--senders", "2", "--cc", "dcqcn", "--seconds", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cmd = f"traffic {mini_lab.name} --pattern incast --senders 2"
        end = time.monotonic() + 60
        while time.monotonic() < end:  # until the engine's child is forked (it then sends)
            ps = subprocess.run(["pgrep", "-f", cmd], capture_output=True, text=True)
            if len(ps.stdout.split()) >= 2:
                break
            time.sleep(0.2)
        time.sleep(1.0)
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=20)
        assert p.returncode == 130, err
        assert time.monotonic() - t < 10
        assert "interrupted" in err
        # no load engine left sending: the forked child (same command line) is gone too
        time.sleep(0.5)
        left = subprocess.run(["pgrep", "-f", cmd], capture_output=True, text=True)
        assert left.stdout.strip() == "", left.stdout
    finally:
        if p.poll() is None:
            p.kill()


def test_frame_shared_is_frame_without_the_copy_or_the_crc_pass():
    import random

    pkt = roce.roce_packet(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                           src_ip="10.0.0.1", dst_ip="10.0.0.2", dst_qpn=0x1235, psn=0,
                           opcode=roce.RC_RDMA_WRITE_MIDDLE, payload=bytes(range(256)) * 16)
    t = roce.FrameTemplate(pkt)
    rnd = random.Random(14)
    for psn in [0, 1, 0xFFFFFF, 0x800000] + [rnd.randrange(1 << 24) for _ in range(300)]:
        for ack in (False, True):
            assert bytes(t.frame_shared(psn, ack)) == bytes(t.frame(psn, ack))
            assert roce.check_icrc(t.frame_shared(psn, ack))
    assert t.frame_shared(5) is t.frame_shared(6)  # one buffer, patched in place


def test_cli_dcqcn_profile_option_is_checked_before_the_lab():
    from typer.testing import CliRunner

    from railab.cli import app

    r = CliRunner().invoke(app, ["traffic", "no-such-lab", "--pattern", "incast", "--dcqcn", "mlx5"])
    assert r.exit_code == 2 and "--dcqcn must be one of paper, 400g, connectx (got 'mlx5')" in r.output
    # a profile with --cc none once ran silently without it (JSON dcqcn null)
    r = CliRunner().invoke(app, ["traffic", "no-such-lab", "--pattern", "incast", "--cc", "none",
                                 "--dcqcn", "paper"])
    assert r.exit_code == 2 and "--dcqcn paper with --cc none" in r.output, r.output


def test_cli_senders_zero_is_a_usage_error_not_the_default(tmp_path):
    """--senders 0 once fell through ``senders or 8`` and ran an 8:1 incast (exit 0/1)."""
    from typer.testing import CliRunner

    from railab.cli import app
    from railab.topologies.generator import generate

    root = Path(__file__).resolve().parents[1]
    labdir = generate(root / "topologies" / "intents" / "mini.yml", tmp_path / "rvz", name="rvz")
    r = CliRunner().invoke(app, ["traffic", str(labdir), "--pattern", "incast", "--senders", "0",
                                 "--cc", "none", "--seconds", "1"])
    assert r.exit_code == 2 and "--senders must be at least 1 (got 0)" in r.output, r.output


def test_load_verdict_exit_rules():
    from railab.cli.traffic import load_verdict

    def res(dropped=0, lost=0, short=0.0, flows=()):
        return LoadResult(cc="dcqcn", sport_mode="per-qp", seconds=1, sample_s=0.1,
                          port_rate_mbps=40, time_scale=1e4, flows=list(flows), lost=lost,
                          dropped=dropped, engine_shortfall=short)

    ok = {"name": "a", "expected_hops": 3, "hops": 3, "rx_packets": 5, "tx_packets": 5}
    assert load_verdict(res(flows=[ok]), pfc_on=True, capacity=True) == []
    # drops with PFC off (or no capacity at all) are a measured result
    assert load_verdict(res(dropped=9, lost=9), pfc_on=False, capacity=True) == []
    assert load_verdict(res(lost=9), pfc_on=True, capacity=False) == []
    # loss where PFC promises lossless, a slow engine, an unexpected path, a black hole
    assert "PFC on" in load_verdict(res(dropped=1), pfc_on=True, capacity=True)[0]
    assert "PFC on" in load_verdict(res(lost=1), pfc_on=True, capacity=True)[0]
    assert "short" in load_verdict(res(short=0.11), pfc_on=False, capacity=True)[0]
    assert load_verdict(res(short=0.09), pfc_on=False, capacity=True) == []
    odd = dict(ok, hops=5)
    assert "unexpected path" in load_verdict(res(flows=[odd]), pfc_on=False, capacity=True)[0]
    dead = dict(ok, rx_packets=0, hops=None)
    assert "nothing arrived" in load_verdict(res(flows=[dead]), pfc_on=False, capacity=True)[0]
    by_design = dict(dead, expected_hops=None)  # Rail-only across rails, no PXN
    assert load_verdict(res(flows=[by_design]), pfc_on=False, capacity=True) == []
    # issue 31: grey loss on the sender NIC (an nftables egress drop: every send ENOBUFS) sent
    # nothing and the run exited 0
    refused = dict(ok, tx_packets=0, rx_packets=0, hops=None, backpressure=831)
    (why,) = load_verdict(res(flows=[refused]), pfc_on=False, capacity=False)
    assert why.startswith("a: nothing sent: its NIC refused every frame (831 times")
    # a sender whose NIC is down (railab fault node-off srvN) sent nothing and the run exited 0
    down = dict(ok, tx_packets=0, rx_packets=0, hops=None, nic_down=True)
    (why,) = load_verdict(res(flows=[down]), pfc_on=False, capacity=False)
    assert why == "a: its sender NIC is down (ENETDOWN): 0 sent; railab check names the link"


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_incast_carries_the_fluid_model_reference(lossless_lab):
    """Issue 28: an incast load run puts the DCQCN fluid model (computed) beside what it
    measured, for the same N, profile, PFC setting and fabric time, and says how much fabric
    time it covered; a 3 ms run is a transient only. (Whether they agree on a full-length run
    is measured by scripts/bench_fidelity.py: it needs an idle machine.)"""
    rc, dc = _cli_incast(lossless_lab, "dcqcn", "on", seconds=6.0)
    assert _ok(rc, dc), dc["failures"]
    c = dc["congestion"]
    scale = lossless_lab.spec.qos.capacity.time_scale
    assert c["fabric_ms"] == pytest.approx(c["seconds"] / scale * 1000, rel=1e-3)
    assert c["steady"] is False  # 6 lab s at scale 2000 = 3 ms of fabric time
    rx = [f["rx_mbps_last_half"] for f in c["flows"]]
    assert c["utilization"] == pytest.approx(sum(rx) / c["port_rate_mbps"], abs=1e-3)
    ref = c["reference"]
    assert ref["source"] == "computed" and ref["fabric_ms"] == pytest.approx(c["fabric_ms"], rel=0.01)
    assert ref["dcqcn"] == dc["dcqcn"] == "400g" and ref["pfc"] == "on"
    assert len(ref["per_flow_mbps"]) == len(c["flows"]) == 8
    assert 0 < ref["utilization"] <= 1 and ref["steady"] is False
    assert ref["measured_utilization"] == pytest.approx(c["utilization"], abs=1e-3)
    # agrees is exactly the 15 % rule on the two figures it names, and drops within 1 point
    mean_m, mean_r = sum(rx) / len(rx), sum(ref["per_flow_mbps"]) / len(rx)
    sent = sum(f["tx_packets"] for f in c["flows"])
    assert ref["measured_dropped_pct"] == pytest.approx(100 * c["dropped"] / sent, abs=1e-3)
    rule = (abs(c["utilization"] - ref["utilization"]) <= 0.15 * ref["utilization"]
            and abs(mean_m - mean_r) <= 0.15 * mean_r
            and abs(ref["measured_dropped_pct"] - ref["dropped_pct"]) <= 1.0)
    assert ref["agrees"] is rule, ref["disagreements"]
    assert ref["series"]["t"][-1] == pytest.approx(c["seconds"], rel=0.02)
    # the deepest queue sampled: the largest backlog any sampled port's series holds; 8:1
    # onto one port with PFC on reaches ECN's Kmin (it marked) at a switch on the way
    peaks = {p: max(s.get("backlog_bytes") or [0]) for p, s in c["ports"].items()}
    assert c["queue_peak_bytes"] >= max(peaks.values())
    assert c["queue_peak_bytes"] >= lossless_lab.spec.qos.ecn.kmin_bytes and c["ce_marked"] > 0
    spec = lossless_lab.spec
    rcv = spec.nic(c["flows"][0]["dst"].split(":")[0], c["flows"][0]["dst_nic"])
    assert dc["receiver_port"] == f"{rcv.leaf}:{rcv.leaf_port}"
    # DCQCN's steady-state check is the stated rule on this run's own figures (PFC on)
    chk = c["steady_state_check"]
    assert chk["pfc"] == "on" and chk["ratio"] == {"min": round(min(c["fair_share"]["ratios"]), 3),
                                                   "max": round(max(c["fair_share"]["ratios"]), 3)}
    assert chk["met"] is (c["utilization"] >= 0.9 and chk["ratio"]["min"] >= 0.85
                          and chk["ratio"]["max"] <= 1.15)
    # the engine ran as hardware does, at real-time priority under the switch agent's
    assert c["engine_priority"] == f"SCHED_RR {LOAD_RT_PRIORITY}"
    assert c["queue_peak_port"].split(":")[0] in {n.name for r in ("leaf", "spine")
                                                  for n in spec.by_role(r)}
    # the per-packet reference: the same N, profile and fabric time, run 40 times, and the
    # measured spread set beside it; the check carries how often DCQCN itself met its band
    pk = ref["packet"]
    assert pk["source"] == "computed" and pk["runs"] == 40 and len(pk["per_run"]) == 40
    assert pk["fair_rate"]["fair"] == pk["fair_runs"] == sum(
        1 for lo, hi in pk["per_run"] if lo >= 0.85 and hi <= 1.15)
    assert chk["reference_fair_rate"] == pk["fair_rate"]
    assert pk["fabric_ms"] == pytest.approx(c["fabric_ms"], rel=0.01)
    ratios = c["fair_share"]["ratios"]
    assert pk["measured_ratio"] == {"min": min(ratios), "max": max(ratios)}
    assert pk["spread_like_reference"] is (min(ratios) >= pk["ratio"]["min"] - 0.05
                                           and max(ratios) <= pk["ratio"]["max"] + 0.05)
    # the text says the same in words: what is measured, what is computed and by which
    # model, the fabric time, the two fair-share bands apart, and the check's verdict
    from typer.testing import CliRunner

    from railab.cli import app

    out = CliRunner().invoke(app, ["traffic", lossless_lab.name, "--pattern", "incast", "--senders", "2",
                                   "--cc", "dcqcn", "--pfc", "on", "--seconds", "2"],
                             env={"COLUMNS": "250"}).output
    words = " ".join(out.split())
    # (the run's own length: 2.001 lab s is 1.0005 ms, printed as measured)
    assert re.search(r"fabric time covered: 1(\.\d+)? ms \(2(\.\d+)? lab s at time scale x2000\): "
                     r"transient only", words), out
    assert "receiver port used (measured, last half)" in words and "model (DCQCN fluid model" in words
    # the deepest queue says when it is not the receiver's own port (PFC holds the excess upstream)
    deep = re.search(r"deepest queue \(measured, sampled every [\d.]+ lab s\): [\d,]+ B at (\S+?)(,|\s)", words)
    if deep is not None:
        rx_port = f"{rcv.leaf}:{rcv.leaf_port}"  # the same receiver: srv1's first GPU
        assert (deep.group(1) == rx_port) is (f"not the receiver's port {rx_port}" not in words), out
    assert ("the emulation agrees (port use and mean rate within 15%, drops within 1 point)" in words
            or "the emulation disagrees on what follows (the band: " in words), out
    assert re.search(r"per-packet reference \(40 runs, computed, random marks\): .* every sender within "
                     r"15% in (\d+) of 40 runs \(95% interval \d+%-\d+% of runs\)", words), out
    assert "within 25% (the loose band; the steady-state check below holds each sender to 15%)" in words
    assert re.search(r"DCQCN steady-state check \(measured, last half; port >= 90% used and every sender "
                     r"within 15% of its share\): port [\d.]+%, every sender [\d.]+-[\d.]+ of its share: "
                     r"(met|NOT met) \(not steady: a transient\); DCQCN itself \(per-packet reference\) "
                     r"keeps every sender within 15% in \d+ of 40 runs of this length", words), out


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_incast_under_ns3s_rules_is_set_beside_ns3(lossless_lab):
    """Issue 44: ``--cc dcqcn-ns3`` runs HPCC ns-3's DCQCN rules in the engine (its NP sends a
    CNP for every marked packet, not one per QP per interval) and carries ns-3's stored run of
    the same scenario as its only reference (the fluid model and the per-packet reference are
    the paper's DCQCN), with the run's measured figures against it in issue 44's bands."""
    from railab.traffic import ns3ref

    seconds = 2.0
    rc, dc = _cli_incast(lossless_lab, "dcqcn-ns3", "on", seconds=seconds, senders=2)
    assert rc in (0, 1), dc
    c = dc["congestion"]
    assert dc["cc"] == c["cc"] == "dcqcn-ns3" and dc["dcqcn"] == "400g"
    assert c["steady_state_check"] is None and set(c["reference"]) == {"ns3"}
    ns3 = c["reference"]["ns3"]
    assert ns3["rules"] == "ns3" and ns3["scenario"] == "incast-2-pfc-on-400g"
    assert ns3["same_qos"] is True and ns3["same_fabric_time"] is False  # 1 ms of fabric, not 15
    # the differences are given, no verdict: this run is not ns-3's 15 ms scenario
    assert ns3["comparable"] is False and ns3["vs"] == {
        **ns3ref.compare(ns3, utilization=c["utilization"], ratios=c["fair_share"]["ratios"],
                         queue_peak_bytes=c["queue_peak_bytes"]), "agrees": None}
    # a 2:1 onset marks; the paper's NP would send at most one CNP per QP per 50 us of fabric
    # time (0.1 lab s here): 2 QPs x 2 s / 0.1 s = 40; ns-3's NP one for (nearly) every mark
    interval = lossless_lab.spec.qos.capacity.lab_seconds(lossless_lab.spec.qos.dcqcn.cnp_interval_us)
    paced_max = 2 * (c["seconds"] / interval + 1)
    assert c["ce_marked"] > 2 * paced_max, c["ce_marked"]
    assert c["cnp_sent"] > 2 * paced_max and c["cnp_sent"] >= 0.9 * c["ce_marked"], (c["cnp_sent"], c["ce_marked"])


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_load_run_takes_mtu_1024_when_asked(lossless_lab):
    """``--mtu 1024`` on a load run sends 1024-byte payloads (it used to be read as "not given",
    the path engine's default, and the run sent 4096); without ``--mtu`` a load run sends 4096."""
    from typer.testing import CliRunner

    from railab.cli import app

    def frame_bytes(*extra: str) -> float:
        res = CliRunner().invoke(app, ["traffic", lossless_lab.name, "--pattern", "incast",
                                       "--senders", "2", "--seconds", "0.3", "--json", *extra])
        f = json.loads(res.output)["congestion"]["flows"][0]
        return f["tx_bytes"] / f["tx_packets"]

    assert 1024 < frame_bytes("--mtu", "1024") < 1200
    assert 4096 < frame_bytes() < 4300


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_live_seed_disjoint_keeps_an_incasts_flows_apart_as_ns3s_one_switch(lossless_lab):
    """Issue 44: ns-3's stored runs are one switch; on mini-lossless an 8:1 incast's four
    cross-group flows cross the spines, and under most hash seeds two of them share a spine's
    downlink (a second congestion point). ``--seed disjoint`` picks the first seed under which
    no link but the receiver's carries two of them: the run says which seed, its traced paths
    share nothing, ns-3's line is comparable (one bottleneck), and the switches' own seed is
    back afterwards. A seed under which two flows collide gets no verdict against ns-3."""
    from railab.cli.traffic import SEED_DISJOINT, _trace_paths, disjoint_seed
    from railab.traffic.ecmp import read_hashing
    from railab.traffic.fib import shared_links
    from railab.traffic.patterns import Flow, incast_pairs, route

    spec = lossless_lab.spec
    before = read_hashing(spec, lossless_lab.netns_of)
    rc, d = _cli_incast(lossless_lab, "dcqcn-ns3", "on", seconds=0.5, seed=SEED_DISJOINT)
    assert rc in (0, 1), d
    c = d["congestion"]
    flows = [route(spec, Flow(a, b)) for a, b in incast_pairs(spec, 8, None, False)]
    assert c["hash_seed_picked"] == SEED_DISJOINT
    assert c["hash_seed"] == disjoint_seed(spec, lossless_lab.netns_of, flows, "per-qp")
    assert c["shared_links"] == {} and {f["hops"] for f in c["flows"]} == {1, 3}
    assert c["reference"]["ns3"]["one_bottleneck"] is True
    assert read_hashing(spec, lossless_lab.netns_of) == before  # the lab's own seed is back
    # a seed under which two cross-group flows share a link: not ns-3's scenario
    from railab.traffic.ecmp import hashing
    for seed in range(1, 64):
        with hashing(spec, lossless_lab.netns_of, policy=None, seed=seed):
            shared = shared_links({f.name: tr for f, tr in zip(
                flows, _trace_paths(spec, lossless_lab.netns_of, flows, "per-qp"), strict=True)})
        if shared:
            break
    assert shared, "no colliding seed in 1-63"
    rc, d = _cli_incast(lossless_lab, "dcqcn-ns3", "on", seconds=0.5, seed=seed)
    ns3 = d["congestion"]["reference"]["ns3"]
    assert d["congestion"]["shared_links"] == shared and d["congestion"]["hash_seed_picked"] is None
    assert ns3["one_bottleneck"] is False and ns3["shared"] == shared and ns3["vs"]["agrees"] is None


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("seed", ["5", "disjoint"])
def test_live_packets_take_the_traced_paths(lossless_lab, seed):
    """The switch ports an 8:1 incast's packets leave by (tx counters, read before and after)
    are the ports railab's FIB trace gave its flows, under a chosen seed and under the one
    ``--seed disjoint`` picks. Under ``fib_multipath_hash_policy`` 1 they were not: a forwarded
    packet that carries an L4 hash is hashed with that per-boot hash, not the seed (a reviewer,
    2026-12-06: seeds 5, 9 and 200 moved the traced paths, never the packets); the lab's L4
    hash is policy 3 over the 5-tuple (railab.traffic.ecmp.HASH_POLICIES)."""
    from railab.traffic.ecmp import switch_names
    from railab.traffic.engine import in_netns

    spec = lossless_lab.spec
    fabric = [n for n in switch_names(spec) if n.startswith(("spine", "g2-"))]

    def tx() -> dict[str, int]:
        out = {}
        for node in fabric:
            with in_netns(lossless_lab.netns_of(node)), open("/proc/self/net/dev") as f:
                for line in f.readlines()[2:]:  # the entered namespace's (sysfs is the host's)
                    port, counters = line.split(":", 1)
                    if port.strip().startswith("eth"):
                        out[f"{node}:{port.strip()}"] = int(counters.split()[8])  # tx bytes
        return out

    before = tx()
    rc, d = _cli_incast(lossless_lab, "none", "off", seconds=1.0, seed=seed)
    after = tx()
    assert rc in (0, 1), d
    traced = {hop for f in d["congestion"]["flows"] for hop in (f["path"] or [])
              if hop.split(":")[0] in fabric}
    moved = {p for p in before if after[p] - before[p] > 500_000}  # BGP/BFD/ND are far below
    assert traced and moved == traced, (sorted(traced), sorted(moved))


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_seed_must_be_a_number_or_disjoint_and_disjoint_needs_one_path_per_flow(lossless_lab):
    from typer.testing import CliRunner

    from railab.cli import app

    for args, words in ((["--seed", "often"], "--seed must be a number"),
                        (["--seed", "disjoint", "--sport", "spray"], "--sport spray")):
        res = CliRunner().invoke(app, ["traffic", lossless_lab.name, "--pattern", "incast", *args])
        assert res.exit_code == 2 and words in res.output, res.output


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("nic", ["gbn", "ooo"])
def test_live_byte_sized_incast_reports_fct_and_what_recovery_cost(lossless_lab, nic):
    """Issue 45: an 8:1 incast of 16 MiB a QP, PFC off, no congestion control (128 MiB into a
    port whose queue can hold ~66 MB: drops), ``--bytes`` ends the run when every QP delivered
    its bytes: FCT p50/p99 (lab s and fabric us) and the RC transport's NAKs and resends. The
    rules on packets: go-back-N resends more than it lost (everything after each hole that had
    arrived); out-of-order placement resends only what it lost (each hole once, and one packet
    a timeout); both deliver every byte."""
    from typer.testing import CliRunner

    from railab.cli import app

    res = CliRunner().invoke(app, ["traffic", lossless_lab.name, "--pattern", "incast", "--cc", "none",
                                   "--pfc", "off", "--bytes", "16M", "--nic", nic, "--json"])
    out = json.loads(res.output)
    c = out["congestion"]
    assert out["bytes_per_qp"] == 16 << 20 and out["seconds"] is None
    fct, tr = c["fct"], c["transport"]
    assert fct["qps"] == fct["completed"] == 8, (fct, tr)
    assert 0 < fct["p50_s"] <= fct["p99_s"] <= fct["max_s"]
    assert fct["fabric_p99_us"] == pytest.approx(fct["p99_s"] / out["time_scale"] * 1e6, rel=1e-3)
    assert tr["fct_p99_s"] == fct["p99_s"]
    assert c["dropped"] > 0 and tr["naks"] > 0, (c["dropped"], tr)
    if nic == "gbn":
        assert tr["retx_packets"] > c["dropped"], tr
    else:
        assert c["dropped"] <= tr["retx_packets"] <= c["dropped"] + tr["timeouts"], (c["dropped"], tr)
    assert all(f["rx_bytes"] >= 16 << 20 for f in c["flows"])
