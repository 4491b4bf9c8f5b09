"""Port capacity, ECN and the PFC emulation (railab.testbed.capacity, railab.testbed.pfc).

Unit tests: the intent's ``lab.capacity`` block and its checks, lab.json ``qos``, the queue and
nft scripts, the WRED probability. Live tests (the session's ``mini-lossless`` lab, real FRR and
kernel; the ``down`` test takes a lab of its own):
BGP converges with every port shaped; a flood through one leaf port drops there with PFC off and
is CE-marked (as seen by the receiver) beyond Kmin; with PFC on the same flood pauses upstream
ports, drops nothing and leaves BGP Established; ``down`` leaves no namespace and no agent.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.testbed import capacity as cap
from railab.testbed import pfc
from railab.testbed import state as st
from railab.testbed.namespaces import entered, exec_argv, netns_path
from railab.testbed.pfcfail import SENDER
from railab.topologies.generator import build_lab, generate
from railab.topologies.intent import IntentError, load_intent
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import DEFAULT_QOS
from tests.conftest import PID, integration_skip_reason

NAME = f"cap{PID}"


def _intent_text(capacity: str) -> str:
    return f"""
name: capx
design: {{architecture: rail-optimized, gpus: 1024, gpus_per_server: 8, leaf: CX864E-N,
          spine: CX864E-N, port_speed_gbps: 400, oversubscription: "1:1"}}
lab:
  groups: 1
  servers_per_group: 2
  rails: 2
  spines: 2
  {capacity}
"""


def _load(tmp_path, capacity: str):
    p = tmp_path / "i.yml"
    p.write_text(_intent_text(capacity))
    return load_intent(p)


# ---- unit -----------------------------------------------------------------------------------
def test_mini_lossless_shape():
    spec = build_lab(load_intent("mini-lossless")).spec
    c = spec.qos.capacity
    assert spec.name == "mini-lossless" and c.enabled and c.pfc
    assert (c.port_rate_mbps, c.buffer_bytes, c.time_scale) == (200.0, 4194304, 2000.0)
    servers = [n for n in spec.nodes if n.role == "server"]
    assert len(servers) == 16
    for leaf in (n for n in spec.nodes if n.role == "leaf"):
        ups = [p for p, peer, _ in spec.links_of(leaf.name) if spec.node(peer).role == "spine"]
        assert len(ups) >= 4, leaf.name
    # ECN profile = SONiC's AZURE_LOSSLESS WRED, the same object the SONiC config renders
    assert spec.qos.ecn == DEFAULT_QOS.ecn
    assert spec.qos.pfc_pause_bytes > spec.qos.ecn.kmax_bytes


def test_capacity_block_reaches_lab_json(tmp_path):
    intent = _load(tmp_path, "capacity: {port_rate_mbps: 25, buffer_bytes: 8388608, pfc: false, "
                             "ecn: {kmin_bytes: 100000, kmax_bytes: 400000, pmax_percent: 10}}")
    out = generate(intent, tmp_path / "lab")
    doc = json.loads((out / "lab.json").read_text())
    assert doc["qos"]["capacity"] == {"enabled": True, "port_rate_mbps": 25.0,
                                      "fabric_rate_gbps": 400, "buffer_bytes": 8388608,
                                      "pfc": False, "shared_buffer": None, "pfc_watchdog": None}
    assert doc["qos"]["ecn"]["kmin_bytes"] == 100000 and doc["qos"]["ecn"]["pmax_percent"] == 10
    spec = LabSpec.load(out)
    assert spec.qos.capacity.time_scale == 16000.0


def test_no_capacity_block_leaves_links_unlimited(tmp_path):
    spec = build_lab(_load(tmp_path, "")).spec
    assert not spec.qos.capacity.enabled and not cap.enabled(spec)


@pytest.mark.parametrize("block, words", [
    ("capacity: {ecn: {kmin_bytes: 3000000, kmax_bytes: 2000000}}", ["kmin_bytes", "kmax_bytes"]),
    ("capacity: {buffer_bytes: 2000000}", ["kmax_bytes", "buffer_bytes"]),
    ("capacity: {buffer_bytes: 2100000}", ["buffer_bytes", "raise"]),
    ("capacity: {port_rate_mbps: 0}", ["port_rate_mbps"]),
    ("capacity: {queues: 3}", ["queues"]),
    ("capacity: {shared_buffer: {pool_bytes: 6291456, dynamic_th: 0}}",
     ["shared_buffer.pool_bytes to at least 8388608"]),
    ("capacity: {shared_buffer: {dynamic_th: 8}}", ["dynamic_th"]),
    ("capacity: {shared_buffer: {dynamic_th: true}}", ["dynamic_th", "integer"]),
    ("capacity: {shared_buffer: {pool_bytes: \"67108864\"}}", ["pool_bytes", "integer"]),
    ("capacity: {shared_buffer: {pool_bytes: 4294967296}}", ["pool_bytes"]),
])
def test_bad_capacity_block_names_the_key(tmp_path, block, words):
    with pytest.raises(IntentError) as e:
        _load(tmp_path, block)
    msg = str(e.value)
    assert "capacity" in msg and all(w in msg for w in words), msg


def test_ports_rates_and_limits():
    spec = build_lab(load_intent("mini-lossless")).spec
    ports = cap.ports(spec)
    assert len(ports) == 2 * len(spec.links)
    nic = next(p for p in ports if not p.switch)
    sw = next(p for p in ports if p.switch)
    assert nic.rate_bps == sw.rate_bps == 200_000_000  # mini-lossless: 200 Mb/s ports
    # mini-lossless has a shared buffer: a lone hot queue's share, 128/129 of 64 MiB (alpha 128)
    assert sw.lossless_limit == spec.qos.capacity.drop_limit_bytes == 66_588_640
    assert sw.control_limit == 4194304 and nic.lossless_limit >= cap.NIC_BUFFER_BYTES
    # an 800G uplink runs at twice the lab rate of a 400G NIC
    assert cap.port_rate_bps(spec, 800) == 400_000_000


def test_tc_batch_keeps_control_apart_from_lossless():
    spec = build_lab(load_intent("mini-lossless")).spec
    p = next(q for q in cap.ports(spec) if q.switch)
    text = cap.tc_batch(p, spec.qos)
    assert "htb default 10" in text  # everything unclassified (BGP, BFD, ND, CNP) is control
    assert "classid 1:10 htb rate 20000000bit ceil 200000000bit" in text and "prio 0" in text
    assert "classid 1:13 htb rate 180000000bit" in text
    assert "match ip dsfield 0x68 0xfc flowid 1:13" in text  # DSCP 26 only
    assert "handle 13: tbf rate 400000000bit" in text and "limit 66588640" in text
    assert "bfifo limit 4194304" in text  # the control class keeps the static buffer
    assert cap.lossless_class(spec.qos) == 0x10013 and cap.control_class(spec.qos) == 0x10010


def test_wred_probability_and_set_updates():
    q = DEFAULT_QOS
    k0, k1 = q.ecn.kmin_bytes, q.ecn.kmax_bytes
    assert cap.ecn_probability(q, k0 - 1) == 0.0
    assert cap.ecn_probability(q, k0) == 0.0
    assert cap.ecn_probability(q, (k0 + k1) // 2) == pytest.approx(0.025, abs=1e-6)
    assert cap.ecn_probability(q, k1) == 1.0
    assert cap.ecn_set_update("eth3", 0.0) == f"flush set netdev {cap.NFT_TABLE} p_eth3\n"
    # flush and refill on one line: nft -i runs them as one transaction (never an empty set)
    assert cap.ecn_set_update("eth3", 0.025) == (f"flush set netdev {cap.NFT_TABLE} p_eth3; add element "
                                                 f"netdev {cap.NFT_TABLE} p_eth3 {{ 0-24999 }}\n")
    assert "{ 0-24999 }" in cap.ecn_set_update("eth3", 0.025)
    assert "{ 0-999999 }" in cap.ecn_set_update("eth3", 1.0)
    spec = build_lab(load_intent("mini-lossless")).spec
    leaf = [p for p in cap.ports(spec) if p.node == "g1-leaf1"]
    # marks on dequeue: g1-leaf1's ports are marked at their peers' ingress (srv1's eth1, ...)
    assert cap.mark_point(leaf[0]) == (leaf[0].peer, leaf[0].peer_interface)
    by_node = cap.marked_by_node(cap.ports(spec))
    assert set(by_node) == {n.name for n in spec.nodes}  # every node receives from a switch
    assert not any(p.node == n for n, ps in by_node.items() for p in ps)  # never at itself
    srv1 = by_node["srv1"]
    assert {p.node for p in srv1} == {"g1-leaf1", "g1-leaf2"}
    text = cap.nft_script(srv1, spec.qos)
    assert f"hook ingress device \"{srv1[0].peer_interface}\"" in text and "hook egress" not in text
    assert "ip ecn not-ect accept" in text and "ip dscp != 26 accept" in text
    assert text.count("chain ") == len(srv1) == 2


def test_pfc_lines_touch_only_the_lossless_queue():
    spec = build_lab(load_intent("mini-lossless")).spec
    p = next(q for q in cap.ports(spec) if q.switch)
    ll = cap.lossless_class(spec.qos)
    paused = pfc.tbf_line(p, ll, paused=True, extra=0)
    resumed = pfc.tbf_line(p, ll, paused=False, extra=1000)
    assert paused.startswith(f"qdisc change dev {p.interface} parent 1:13 handle 13: tbf rate 8000bit")
    assert "rate 400000000bit" in resumed and f"limit {p.lossless_limit + 1000}" in resumed
    assert "1:10" not in paused + resumed


def test_shared_buffer_dynamic_threshold():
    """The dynamic threshold (Choudhury and Hahne 1998): a queue may hold alpha x the pool's
    free space; n queues filling at once settle at alpha pool / (1 + n alpha) each, the fixed
    point of that rule, as the switch agent runs it (pfc.dt_limit), never beyond the pool."""
    from railab.topologies.qos import SharedBufferProfile

    mib = 1048576
    half = SharedBufferProfile(pool_bytes=64 * mib, dynamic_th=0)
    assert half.alpha == 1 and half.share_bytes(1) == 32 * mib and half.share_bytes(3) == 16 * mib
    for sb in (half, SharedBufferProfile(pool_bytes=64 * mib), SharedBufferProfile(dynamic_th=-3)):
        for n in (1, 2, 8):
            q = sb.share_bytes(n)
            assert abs(pfc.dt_limit(sb.pool_bytes, sb.alpha, n * q) - q) <= n * sb.alpha + 1, (sb, n)
    assert SharedBufferProfile().dynamic_th == 7  # SONiC's egress_lossless_profile
    assert pfc.dt_limit(64 * mib, 1.0, 0) == 64 * mib and pfc.dt_limit(64 * mib, 1.0, 80 * mib) == 0
    assert pfc.dt_limit(64 * mib, 128.0, 10 * mib) == 64 * mib  # never beyond the pool


def _agent(spec):
    """A switch agent of ``spec`` that is never opened: its tc lines are collected, not run."""
    plan = cap.agent_plan(spec, lambda n: f"ns-{n}", pfc=False)
    loop = pfc.PfcLoop(plan, state_path="/nonexistent/pfc.json")
    written: list[str] = []
    loop._tc_write = lambda node, text: written.extend(text.splitlines())
    return loop, written


def test_agent_keeps_each_queue_at_the_dynamic_threshold():
    """With a shared buffer the agent rewrites a hot queue's tail-drop limit to alpha x the
    pool's free space as the switch's queues fill (and leaves idle queues alone); a PAUSE then
    keeps that limit; a lab without one has nothing to keep (pool 0, the static limits)."""
    data = load_intent("mini-lossless").model_dump(mode="json", exclude_none=True)
    data["lab"]["capacity"]["shared_buffer"] = {"pool_bytes": 64 * 1048576, "dynamic_th": 0}
    from railab.topologies.intent import parse_intent

    spec = build_lab(parse_intent(data)).spec
    loop, written = _agent(spec)
    sw = next(s for s in loop.switches if s.name == "g1-leaf1")
    hot, cold = sw.ports[0].interface, sw.ports[1].interface
    static = sw.ports[0].lossless_limit
    assert static == 32 * 1048576  # alpha 1: a lone hot queue's half of 64 MiB
    loop._threshold(sw, {hot: 1_000_000, cold: 0})
    assert written == []  # far under its limit: nothing to write
    loop._threshold(sw, {hot: 20 * 1048576, cold: 0})
    (line,) = written
    assert f"dev {hot} " in line and f"limit {44 * 1048576}" in line  # 64 - 20 MiB free
    loop._threshold(sw, {hot: 20 * 1048576 + 1000, cold: 0})
    assert len(written) == 1  # moved by less than DT_QUANTUM of the pool: no write
    loop._threshold(sw, {hot: 30 * 1048576, cold: 12 * 1048576})
    assert len(written) == 3 and all(f"limit {22 * 1048576}" in w for w in written[1:])
    assert sw.dt_writes == 3 and sw.dt_min_limit == 22 * 1048576 and sw.max_used == 42 * 1048576
    assert f"limit {22 * 1048576}" in loop._line((sw.name, hot))  # a PAUSE keeps the limit
    del data["lab"]["capacity"]["shared_buffer"]  # static buffers: nothing to keep
    loop2, _ = _agent(build_lab(parse_intent(data)).spec)
    assert loop2.plan.pool_bytes == 0 and loop2.plan.alpha == 0
    assert {p.lossless_limit for s in loop2.switches for p in s.ports} == {4194304}


class _KickSock:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def getsockname(self):
        return ("eth1", 0, 0, 1, b"\x02\x00\x00\x00\x00\x01")

    def send(self, frame: bytes) -> int:
        self.sent.append(frame)
        return len(frame)


def test_agent_kicks_a_resumed_port_until_a_late_change_must_have_landed():
    """After a RESUME the agent sends a kick frame out of the port in the cycles KICK_AT after
    it (a tc change lands when its writer runs; a kick before it restarts nothing, and a held
    NIC gets no other frame that would run its queue), a PAUSE cancels the rest, and at close
    every pending port gets one at once."""
    loop, written = _agent(build_lab(load_intent("mini-lossless")).spec)
    key = ("srv2", "eth1")
    sock = loop._kick_socks[key] = _KickSock()
    loop._set(key, True, 1.0)
    loop._set(key, False, 1.1)
    assert "rate 8000bit" in written[0] and "rate 8000bit" not in written[1]
    kicked = []
    for cycle in range(1, 41):
        before = len(sock.sent)
        loop._send_kicks()
        if len(sock.sent) > before:
            kicked.append(cycle)
    assert kicked == list(pfc.KICK_AT) and key not in loop._kick
    frame = sock.sent[0]
    assert frame[:6] == pfc.KICK_DST and frame[12:14] == pfc.KICK_ETHERTYPE and len(frame) == 60
    loop._set(key, True, 2.0)
    loop._set(key, False, 2.1)
    loop._send_kicks()
    loop._set(key, True, 2.2)  # paused again before the rest: no more kicks for it
    n = len(sock.sent)
    for _ in range(40):
        loop._send_kicks()
    assert len(sock.sent) == n and key not in loop._kick
    loop._set(key, False, 3.0)
    loop._send_kicks(now=True)  # close(): every pending port at once, whatever the cycle
    assert len(sock.sent) == n + 1


def _nlattr(atype: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _qdisc_msg(seq: int, index: int, parent: int, backlog: int, *, stats: bool = True) -> bytes:
    """An RTM_NEWQDISC message as the kernel dumps it: kind, options, TCA_STATS2 with
    TCA_STATS_BASIC before TCA_STATS_QUEUE (linux/gen_stats.h)."""
    tcm = struct.pack("=BxxxiLLL", 0, index, 0x130000, parent, 1)
    attrs = _nlattr(1, b"tbf\0") + _nlattr(2, _nlattr(1, b"\x07" * 36))
    if stats:
        attrs += _nlattr(7, _nlattr(1, struct.pack("=QL", 1234, 5) + b"\0" * 4)
                         + _nlattr(3, struct.pack("=LLLLL", 3, backlog, 9, 0, 0)))
    body = tcm + attrs
    return struct.pack("=LHHLL", 16 + len(body), 36, 2, seq, 0) + body


class _DumpSock:
    """A netlink socket that answers a dump with canned messages (two recv batches)."""

    def __init__(self, batches):
        self.batches, self.sent = list(batches), []

    def send(self, data):
        self.sent.append(data)

    def recv(self, _n):
        return self.batches.pop(0)


def test_backlogs_reads_only_the_lossless_queues_of_a_dump():
    """QdiscReader.backlogs (the agent's per-cycle read) returns the backlog of each qdisc whose
    parent is the asked class, by interface index, across recv batches, and skips the rest
    (another parent, another dump's sequence, a message without statistics)."""
    ll = lossless = 0x10013
    r = object.__new__(pfc.QdiscReader)
    r._seq = 6
    done = struct.pack("=LHHLL", 20, 3, 2, 7, 0) + b"\0" * 4
    r._sock = _DumpSock([
        _qdisc_msg(7, 2, ll, 4_122_032) + _qdisc_msg(7, 2, 0x10010, 999)
        + _qdisc_msg(6, 5, ll, 777),                       # a stale reply: not this dump
        _qdisc_msg(7, 3, lossless, 0) + _qdisc_msg(7, 4, ll, 1, stats=False) + done])
    assert r.backlogs(ll) == {2: 4_122_032, 3: 0}
    assert struct.unpack_from("=LHH", r._sock.sent[0])[1:] == (38, 0x301)  # RTM_GETQDISC dump
    # read() walks the same dump (QdiscReader._dump) and agrees on those queues
    done8 = struct.pack("=LHHLL", 20, 3, 2, 8, 0) + b"\0" * 4
    r._sock = _DumpSock([_qdisc_msg(8, 2, ll, 4_122_032) + _qdisc_msg(8, 2, 0x10010, 999)
                         + _qdisc_msg(8, 3, ll, 0) + done8])
    assert {q.index: q.backlog for q in r.read() if q.parent == ll} == {2: 4_122_032, 3: 0}
    r._sock = _DumpSock([struct.pack("=LHHLL", 20, 2, 0, 8, 0) + struct.pack("=i", -19)])
    with pytest.raises(OSError):
        r.backlogs(ll)


def test_load_lock_refuses_a_second_load_run_and_names_the_holder(tmp_path, monkeypatch):
    """One load run per lab: while another process holds the lab's load lock, a second is
    refused with UsageError naming the holder's pid; the lock goes with its holder. A lab that
    is not up gets no run directory from it (it would be listed as up afterwards)."""
    from railab.errors import UsageError

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path))
    lab = f"locktest{PID}"
    with st.load_lock(lab):
        pass
    assert not st.lab_dir(lab).exists() and st.labs() == []
    st.lab_dir(lab).mkdir()  # the lab is up
    ready, release = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # the holder: takes the lock, says so, waits to be told to go
        try:
            with st.load_lock(lab):
                os.write(ready[1], b"1")
                os.read(release[0], 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready[0], 1) == b"1"
        with pytest.raises(UsageError, match=rf"lab {lab} is busy: a load run is on it \(.+ \(pid {child}\)\)"):
            with st.load_lock(lab):
                pass
        # railab down refuses it too, naming the holder (a reviewer's down under a running
        # load run left the run to report the missing fabric as a black hole at g1-leaf1)
        assert st.load_holder(lab).endswith(f"(pid {child})")
        st.save({"lab": lab, "runtime": "netns"})
        from railab.cli import app

        r = CliRunner().invoke(app, ["down", lab])  # UsageError: railab's main() exits 2 with it
        assert isinstance(r.exception, UsageError), r.output
        assert f"lab {lab} is busy: a load run is on it" in str(r.exception)
        assert "stop it with Ctrl-C" in str(r.exception) and st.load(lab) is not None  # nothing removed
    finally:
        os.write(release[1], b"1")
        os.waitpid(child, 0)
    assert st.load_holder(lab) is None
    with st.load_lock(lab):  # free again once the holder is gone
        assert (st.lab_dir(lab) / st.LOAD_LOCK_FILE).read_text().endswith(f"(pid {os.getpid()})")
    st.remove_lab_dir(lab)


def test_run_batches_says_why_a_silent_command_failed():
    """A batch command that dies of a signal (Ctrl-C reaches the whole process group) or exits
    non-zero without a word is reported as such, not as an empty reason."""
    from railab.errors import RailabError
    from railab.testbed.namespaces import run_batches

    with pytest.raises(RailabError, match=r"nft \(x\) failed on a: killed by signal 2 \| b: exit 3, no output"):
        run_batches({"a": (["sh", "-c", "kill -INT $$"], ""), "b": (["sh", "-c", "exit 3"], "")},
                    "nft (x)")


def test_containerlab_runtime_refuses_capacity(tmp_path):
    from railab.errors import UsageError
    from railab.testbed.runtime.containerlab import ContainerlabRuntime

    labdir = generate("mini-lossless", tmp_path / "lab", name="capclab")
    with pytest.raises(UsageError, match="only the netns runtime builds"):
        ContainerlabRuntime().up(labdir)


# ---- live -----------------------------------------------------------------------------------
#: The flood's sender (UDP to 4791, DSCP 26 + ECT(0), paced in 2 ms bursts from a wall-clock
#: start; argv ``dst src mbps seconds start_at size``): the PFC failure scenarios' own.
FLOOD = SENDER


#: UDP payload of the flood (few, large packets: the 2:1 at 200 Mb/s is ~12,000 packets/s).
FLOOD_SIZE = 4000


class _Receiver(threading.Thread):
    """Counts UDP 4791 packets and their CE marks on a server NIC (AF_PACKET, cooked)."""

    def __init__(self, ns: str, ifname: str):
        super().__init__(daemon=True)
        with entered(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.packets = self.ce = 0

    def run(self):
        while not self.stop.is_set():
            try:
                d = self.sock.recv(65535)
            except TimeoutError:
                continue
            if len(d) > 23 and d[9] == 17 and d[22:24] == b"\x12\xb7":
                self.packets += 1
                self.ce += (d[1] & 3) == 3


def _flood(lab, seconds: float) -> dict:
    """srv1:nic1 and srv2:nic1 each send 97.5 % of the port rate (mini-lossless: 195 of
    200 Mb/s) of ECT RoCE-DSCP UDP (:data:`FLOOD_SIZE`-byte payloads) to srv3:nic1 for
    ``seconds``: 2:1 onto g1-leaf1's port to srv3. Returns the receiver's counts and the port's
    counters over the run."""
    spec = lab.spec
    dst = spec.nic("srv3", 1)
    srcs = [spec.nic("srv1", 1), spec.nic("srv2", 1)]
    port = ("g1-leaf1", dst.leaf_port)
    rx = _Receiver(lab.netns_of("srv3"), dst.interface)
    rx.start()
    with cap.CapacitySampler(spec, lab.netns_of, nodes=["g1-leaf1", "srv1", "srv2"],
                             run_dir=st.lab_dir(lab.name)) as s:
        before = s.sample(ce=True)
        start_at = str(time.time() + 3.0)
        procs = [subprocess.Popen(exec_argv(lab.netns_of(n.server),
                                            [sys.executable, "-c", FLOOD, str(dst.address.ip),
                                             str(n.address.ip),
                                             str(0.975 * spec.qos.capacity.port_rate_mbps),
                                             str(seconds), start_at, str(FLOOD_SIZE)]),
                                  stdout=subprocess.PIPE, text=True) for n in srcs]
        depth = 0
        while any(p.poll() is None for p in procs):
            depth = max(depth, s.sample()[port].lossless_backlog_bytes)
            time.sleep(0.05)
        sent = sum(int(p.communicate()[0]) for p in procs)
        end = time.monotonic() + 15  # let the queues drain (a paused NIC holds its backlog)
        while time.monotonic() < end:
            now = s.sample()
            if all(c.backlog_bytes == 0 for c in now.values()):
                break
            time.sleep(0.1)
        time.sleep(0.3)
        after = s.sample(ce=True)
    rx.stop.set()
    rx.join()
    d = cap.delta(before, after)
    nic_bytes = sum(d[(n.server, n.interface)].lossless_tx_bytes for n in srcs)
    return {"sent": sent, "received": rx.packets, "ce_seen": rx.ce, "port": d[port],
            "max_depth": depth, "all": d, "nic_bytes": nic_bytes}


@pytest.fixture(scope="module")
def lab(lossless_lab):
    """The session's ``mini-lossless`` (tests/conftest.py): the flood tests measure counter
    deltas and close their PFC sessions, so they leave nothing other tests would see."""
    return lossless_lab


@pytest.fixture(scope="module")
def own_lab():
    """A ``mini-lossless`` of this module alone, for the test that takes it down."""
    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    from railab.checks.lab import LiveLab

    live = LiveLab.bring_up("mini-lossless", name=NAME)
    try:
        yield live
    finally:
        live.close()


def _sessions_established(lab, node: str) -> tuple[int, int]:
    r = lab.executor.vtysh(node, "show bgp summary json")
    peers = json.loads(r.stdout)["ipv4Unicast"]["peers"]
    return sum(p["state"] == "Established" for p in peers.values()), len(peers)


@pytest.mark.integration
def test_live_every_port_shaped_and_bgp_converged(lab):
    # the session's lab may have carried floods before: judge a quiet interval's deltas
    before = cap.port_counters(lab.spec, lab.netns_of, run_dir=st.lab_dir(lab.name))
    assert set(before) == {p.key for p in cap.ports(lab.spec)}
    time.sleep(4.0)
    after = cap.port_counters(lab.spec, lab.netns_of, run_dir=st.lab_dir(lab.name))
    counters = cap.delta(before, after)
    assert all(c.ce_marked == 0 and c.dropped == 0 for c in counters.values())
    # control traffic (BGP, BFD, RAs) went through the control class, not the lossless one
    leaf = [c for (n, _), c in counters.items() if n == "g1-leaf1"]
    assert sum(c.tx_bytes for c in leaf) > 0 and sum(c.lossless_tx_bytes for c in leaf) == 0
    up, total = _sessions_established(lab, "g1-leaf1")
    assert up == total == 8
    # the agent's per-cycle read finds every shaped port's lossless queue, and agrees with the
    # full dump
    ll = cap.lossless_class(lab.spec.qos)
    for node in ("g1-leaf1", "spine1"):
        names = [p.interface for p in cap.ports(lab.spec) if p.node == node]
        idx = pfc.ifindexes(lab.netns_of(node), names, node)
        reader = pfc.QdiscReader(lab.netns_of(node))
        try:
            got = reader.backlogs(ll)
            full = {q.index: q.backlog for q in reader.read() if q.parent == ll}
        finally:
            reader.close()
        assert set(got) == set(idx.values()) == set(full) and len(got) == len(names) > 0


@pytest.mark.integration
def test_live_pfc_off_drops_at_the_port_and_marks_ce(lab):
    # the 2:1 overload (2 x 97.5 % of the port) must fill the leaf queue's shared-buffer share
    # (mini-lossless: 128/129 of a 64 MiB pool) with 2 s to spare
    capacity = lab.spec.qos.capacity
    share = capacity.drop_limit_bytes
    excess = (2 * 0.975 - 1) * capacity.port_rate_mbps * 1e6 / 8
    with cap.pfc_session(lab.spec, lab.netns_of, enabled=False) as sess:
        assert sess.pid and not sess.state().get("pfc")
        r = _flood(lab, share / excess + 2.0)
        agent = sess.state()
        # the session holds the lab's load lock: a second load run is refused before it touches
        # anything (it used to start a second agent whose reset cleared this one's queues)
        busy = subprocess.run([sys.executable, "-m", "railab", "traffic", lab.name, "--pattern",
                               "incast", "--senders", "2", "--seconds", "1", "--json"],
                              capture_output=True, text=True, timeout=120)
        assert busy.returncode == 2 and f"lab {lab.name} is busy" in busy.stderr, busy
        assert busy.stdout == ""  # with --json too: an error before the run is stderr only (README)
        assert sess.state().get("ready") and not sess.state().get("final")
    port = r["port"]
    assert port.lossless_dropped > 0 and port.dropped == port.lossless_dropped
    # the agent's close() flushed every marking set before it stopped its nft writers (it waits
    # for each writer's answer, then kills it): nothing marks after the session
    for node in cap.marked_by_node(cap.ports(lab.spec)):
        table = subprocess.run(exec_argv(lab.netns_of(node), ["nft", "list", "table", "netdev", cap.NFT_TABLE]),
                               capture_output=True, text=True, check=True).stdout
        assert "elements" not in table, (node, table)
    # ... where the dynamic threshold stops it, far beyond the static buffer (a 50 ms sample
    # misses at most 50 ms of growth; the agent rewrites the limit once a cycle, so the queue
    # may pass the fixed point by what arrives in its slowest cycle)
    lag = excess * (agent["max_cycle_s"] + pfc.POLL_S) + 2 * 9300
    assert share - excess * 0.06 <= r["max_depth"] <= share + lag, (r["max_depth"], share, lag)
    leaf = agent["switches"]["g1-leaf1"]
    assert agent["shared_buffer"]["pool_bytes"] == capacity.shared_buffer.pool_bytes
    assert leaf["dt_writes"] >= 1 and leaf["max_lossless_used_bytes"] >= share - excess * 0.06
    assert port.ce_marked > 0 and r["ce_seen"] > 0  # marked at the leaf, seen by the receiver
    frame = FLOOD_SIZE + 8 + 20 + 14  # UDP payload + UDP + IPv4 + Ethernet, as the qdisc counts it
    # every byte the NICs sent either left the leaf port or was dropped there
    assert r["nic_bytes"] == port.lossless_tx_bytes + port.lossless_dropped * frame
    assert cap.totals(r["all"])["pause_events"] == 0
    assert r["max_depth"] >= lab.spec.qos.ecn.kmax_bytes


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d.name))
    return out


@pytest.mark.integration
def test_live_agent_writers_survive_a_terminal_ctrl_c(lab):
    """The agent's tc/nft writers run in a session of their own, so a Ctrl-C to the traffic
    command's process group (the agent's too) cannot kill them before the agent's close()
    restores the limits and ECN sets through them (a reviewer found a pool-size limit and a
    100 % marking set left behind). The agent then undoes everything on SIGINT."""
    def tbf(node: str) -> list[str]:
        out = subprocess.run(exec_argv(lab.netns_of(node), ["tc", "qdisc", "show"]),
                             capture_output=True, text=True, check=True).stdout
        return sorted(line for line in out.splitlines() if "tbf" in line)

    before = {n: tbf(n) for n in ("g1-leaf1", "spine1")}
    with cap.pfc_session(lab.spec, lab.netns_of, enabled=True) as sess:
        deadline = time.monotonic() + 5
        writers = []
        while not writers and time.monotonic() < deadline:
            writers = _children(sess.pid)
            time.sleep(0.05)
        assert writers, "the agent started no tc writer"
        agent_sid = os.getsid(sess.pid)
        assert all(os.getsid(w) != agent_sid for w in writers), (agent_sid, writers)
        # a terminal's Ctrl-C: SIGINT to every process of the agent's group (here by hand: the
        # group is pytest's own), the writers first, as the kernel may order it
        group = os.getpgid(sess.pid)
        for pid in [w for w in writers if os.getpgid(w) == group] + [sess.pid]:
            os.kill(pid, signal.SIGINT)
        end = time.monotonic() + 5
        while time.monotonic() < end and Path(f"/proc/{sess.pid}").exists():
            time.sleep(0.05)
        final = sess.state()
    assert final.get("final") is True
    # the PFC headroom the agent added to every switch's lossless limit is gone again: each tbf
    # (rate, burst, and the limit tc shows as latency) is as before the session
    assert {n: tbf(n) for n in before} == before


@pytest.mark.integration
def test_live_agent_has_every_nft_writer_ready_before_it_reports_ready(lab):
    """The agent starts one `nft -i` per node that applies a switch port's marks and waits for
    each to answer before it reports ready: a writer started on the first mark made an
    incast's first CE ~60 lab ms late (~55 ms of nft's start), the queue overshot Kmax and the
    senders took one or two more cuts at the onset than DCQCN does (docs/congestion.md). At the
    end every writer is gone."""
    nodes = cap.marked_by_node(cap.ports(lab.spec))
    want = {os.stat(netns_path(lab.netns_of(n))).st_ino: n for n in nodes}

    def nft_writers(pid: int) -> dict[str, int]:  # node -> pid of the agent's `nft -i` there
        out = {}
        for c in _children(pid):
            try:
                argv = Path(f"/proc/{c}/cmdline").read_text().split("\0")
                ino = os.stat(f"/proc/{c}/ns/net").st_ino  # nsenter exec'd nft in the node's netns
            except OSError:
                continue
            if argv[:2] == ["nft", "-i"] and ino in want:
                out[want[ino]] = c
        return out

    with cap.pfc_session(lab.spec, lab.netns_of, enabled=True) as sess:
        writers = nft_writers(sess.pid)  # at once: no queue has marked anything yet
        assert set(writers) == set(nodes), sorted(set(nodes) ^ set(writers))
    assert not any(Path(f"/proc/{w}").exists() for w in writers.values())


@pytest.mark.integration
def test_live_pfc_on_pauses_upstream_without_drops_and_keeps_bgp(lab):
    with cap.pfc_session(lab.spec, lab.netns_of, enabled=True) as sess:
        assert st.load(lab.name).agents == {"pfc": sess.pid}
        up_during: list[tuple[int, int, bool]] = []
        flooding = threading.Event()

        def watch():  # BGP sessions of the congested leaf, and whether a port is paused then
            while not flooding.is_set():
                paused = any(v.get("paused") for v in cap.pfc_state(st.lab_dir(lab.name)).values())
                up_during.append((*_sessions_established(lab, "g1-leaf1"), paused))
                time.sleep(0.2)

        t = threading.Thread(target=watch)
        t.start()
        try:
            r = _flood(lab, 3.0)
        finally:
            flooding.set()
            t.join()
    state = sess.state()  # the final record stays readable after the session
    assert st.load(lab.name).agents == {}
    port, tot = r["port"], cap.totals(r["all"])
    assert port.dropped == 0 and tot["lossless_dropped"] == 0, r
    assert r["nic_bytes"] == port.lossless_tx_bytes == r["sent"] * (FLOOD_SIZE + 8 + 20 + 14)
    assert tot["pause_events"] > 0 and tot["resume_events"] == tot["pause_events"], r["max_depth"]
    paused = r["all"][("srv1", "eth1")]
    assert paused.pause_events > 0 and paused.paused_s > 0 and not paused.paused
    assert port.ce_marked > 0  # ECN first: the queue passed Kmax before xOFF
    assert state["final"] and state["switches"]["g1-leaf1"]["pauses"] > 0
    # the loop's reaction time while the queues were hot, from its own clock
    assert state["busy_cycles"] > 0 and pfc.POLL_S < state["mean_busy_cycle_s"] < 1.0, state
    # the control class is never paused: BGP stays Established while ports are paused
    assert any(p for _, _, p in up_during), up_during
    assert all(u == total == 8 for u, total, _ in up_during), up_during


@pytest.mark.integration
def test_live_down_removes_everything(own_lab):
    lab = own_lab
    # an agent left running (a traffic run killed hard) is still removed by down
    plan = st.lab_dir(lab.name) / "pfc-plan.json"
    plan.write_text(json.dumps(cap.agent_plan(lab.spec, lab.netns_of, pfc=True).to_json()))
    proc = subprocess.Popen([sys.executable, "-m", "railab.testbed.pfc", "--plan", str(plan),
                             "--state", str(st.lab_dir(lab.name) / "pfc.json")])
    ready = cap.PfcSession(lab=lab.name, enabled=True)
    end = time.monotonic() + 10
    while ready.state().get("pid") != proc.pid and time.monotonic() < end:
        time.sleep(0.05)
    assert ready.state().get("ready") and ready.state().get("pid") == proc.pid
    lab.close()
    proc.wait(timeout=10)
    assert not [n for n in _netns() if NAME in n]
    left = subprocess.run(["pgrep", "-f", f"railab.testbed.pfc --plan {st.lab_dir(lab.name)}/"],
                          capture_output=True, text=True)
    assert left.stdout.strip() == ""


def _netns() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


@pytest.mark.integration
def test_live_failed_capacity_step_rolls_the_lab_back(tmp_path, monkeypatch):
    if integration_skip_reason():
        pytest.skip(integration_skip_reason())
    from railab.errors import RailabError
    from railab.testbed.runtime.netns.deploy import NetnsDeployer

    name = f"capf{PID}"
    labdir = generate("mini-lossless", tmp_path / "lab", name=name)
    real = cap.apply

    def half_then_fail(spec, netns_of):
        real(spec, netns_of)  # queues and nft tables exist, then the step fails
        raise RailabError("injected: capacity step failed")

    monkeypatch.setattr(cap, "apply", half_then_fail)
    with pytest.raises(RailabError, match="injected"):
        NetnsDeployer().up(labdir)
    assert not [n for n in _netns() if name in n]
    assert not st.lab_dir(name).exists()


def test_capacity_lab_without_nft_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    """A lab.capacity intent on a host without nftables: one error naming the package, raised
    in the preflight (no namespace, no state), not half-way through the capacity step."""
    if integration_skip_reason():  # root and FRR: the preflight checks those first
        pytest.skip(integration_skip_reason())
    from railab.errors import RailabError
    from railab.testbed.runtime import netns as rt_netns
    from railab.testbed.runtime.netns.deploy import NetnsDeployer

    name = f"capn{PID}"
    labdir = generate("mini-lossless", tmp_path / "lab", name=name)
    real = rt_netns.shutil.which
    monkeypatch.setattr(rt_netns.shutil, "which", lambda cmd, *a, **k: None if cmd == "nft" else real(cmd, *a, **k))
    with pytest.raises(RailabError, match="nft is not installed: apt-get install nftables"):
        NetnsDeployer().up(labdir)
    assert not [n for n in _netns() if name in n]
    assert not st.lab_dir(name).exists()


def test_agent_sets_the_sender_nics_pause_board_and_leaves_a_stormed_port_alone(tmp_path):
    """A PAUSE of a server NIC sets its record on the board and writes its tbf; a RESUME clears
    it with the RESUME's time. A port a PFC storm holds is neither on the board nor rewritten by
    the agent's own PAUSE/RESUME (each rewrite refilled the tbf's bucket: two frames got out of
    a stormed NIC per PAUSE cycle); when the storm ends, the board has the agent's own state."""
    loop, written = _agent(build_lab(load_intent("mini-lossless")).spec)
    loop.board = pfc.NicPauseBoard.create(tmp_path, [k for k, p in loop.by_key.items() if not p.switch])
    try:
        nic = ("srv2", "eth1")
        i = loop.board.offset(nic)
        loop._set(nic, True, 5.0)
        assert loop.board.paused(nic) and len(written) == 1 and "dev eth1" in written[0]
        loop._set(nic, False, 5.5)
        assert not loop.board.paused(nic) and loop.board.resumed_at(i) == 5.5 and len(written) == 2
        loop.storms = {nic: "f1"}
        loop._set(nic, True, 6.0)
        loop._set(nic, False, 6.5)
        assert len(written) == 2 and not loop.board.paused(nic)  # the storm rules the port
        assert nic not in loop._kick
        assert loop.ports[nic].pause_events == 2  # still counted
        loop._set(nic, True, 7.0)
        (tmp_path / pfc.STORM_FILE).write_text("{}")  # the storm ends while the agent pauses it
        loop.plan = replace(loop.plan, run_dir=str(tmp_path))
        loop._refresh_storms()
        assert loop.storms == {} and loop.board.paused(nic)
    finally:
        loop.board.close()


def test_a_board_whose_agent_is_gone_is_released_by_the_engine(tmp_path):
    """The engine looks every BOARD_CHECK_S whether the board's writer runs; a SIGKILLed agent
    can never RESUME what it paused, so the engine releases every record and says so
    (``switch_agent_lost``)."""
    from railab.traffic.load import LoadEngine

    board = pfc.NicPauseBoard.create(tmp_path, [("srv2", "eth1"), ("srv3", "eth1")])
    try:
        board.set(("srv2", "eth1"), True)
        seen = pfc.NicPauseBoard.attach(tmp_path)
        assert seen.pid == os.getpid()
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        doc = json.loads((tmp_path / pfc.NIC_PAUSE_INDEX).read_text())
        (tmp_path / pfc.NIC_PAUSE_INDEX).write_text(json.dumps(dict(doc, pid=dead.pid)))
        gone = pfc.NicPauseBoard.attach(tmp_path)
        assert gone is not None and gone.pid == dead.pid
        eng = object.__new__(LoadEngine)
        eng._board, eng._board_lost, eng._board_check_t = seen, False, 0.0
        eng._watch_board(10.0)
        assert not eng._board_lost and board.paused(("srv2", "eth1"))  # its writer runs
        eng._board, eng._board_check_t = gone, 0.0
        eng._watch_board(11.0)
        assert eng._board_lost and not board.paused(("srv2", "eth1"))
        assert gone.resumed_at(0) == 11.0 or gone.resumed_at(1) == 11.0
        seen.close(), gone.close()
    finally:
        board.close()
