"""The traffic engine's DSCP comes from the lab's QoS profile (lab.json ``qos``,
railab.topologies.qos), not from numbers of its own (issue 11 review, item 3)."""

from __future__ import annotations

import json
import os

import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from railab.topologies.generator import generate
from railab.topologies.intent import INTENTS_DIR
from railab.topologies.labspec import LabSpec
from railab.topologies.qos import DEFAULT_QOS, QosProfile
from railab.traffic import roce
from railab.traffic.engine import Engine
from railab.traffic.patterns import flows_for

PID = os.getpid()


class _FakeSock:
    def getsockname(self):
        return ("eth1", 0)


def _engine(spec: LabSpec) -> Engine:
    """An engine whose sockets and MACs are stand-ins: enough to build a flow's packets."""
    eng = Engine(spec)
    for nic in spec.nics:
        key = (nic.server, int(nic.interface.removeprefix("eth")))
        eng._tx[key] = _FakeSock()
        eng._src_mac[key] = "02:00:00:00:00:01"
        eng._gw_mac[key] = "02:00:00:00:00:02"
    for srv in spec.by_role("server"):
        eng._lo[srv.name] = _FakeSock()
    return eng


def _dscps(eng: Engine, pattern: str) -> set[int]:
    out = set()
    for flow in flows_for(eng.spec, pattern):
        st = eng._prepare(flow, acks=True)
        frames = [t.frame(0) for t in st.seq] + [st.ack_tpl.frame(0)]
        out |= {Ether(bytes(f))[IP].tos >> 2 for f in frames}
    return out


@pytest.fixture(scope="module")
def labdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("qos")
    return generate(INTENTS_DIR / "mini.yml", d / f"qs{PID}", name=f"qs{PID}")


def test_defaults_are_the_qos_module(labdir):
    assert (roce.DSCP_ROCE, roce.DSCP_CNP) == (DEFAULT_QOS.roce_dscp, DEFAULT_QOS.cnp_dscp)
    spec = LabSpec.load(labdir)
    assert spec.qos == DEFAULT_QOS
    assert _dscps(_engine(spec), "intra-rail") == {DEFAULT_QOS.roce_dscp}


@pytest.mark.parametrize("pattern", ["intra-rail", "intra-server"])
def test_lab_json_roce_dscp_reaches_the_packets(labdir, pattern):
    doc = json.loads((labdir / "lab.json").read_text())
    doc["qos"]["roce_dscp"] = 10
    (labdir / "lab.json").write_text(json.dumps(doc))
    try:
        spec = LabSpec.load(labdir)
        assert spec.qos.roce_dscp == 10
        assert _dscps(_engine(spec), pattern) == {10}
    finally:
        doc["qos"]["roce_dscp"] = DEFAULT_QOS.roce_dscp
        (labdir / "lab.json").write_text(json.dumps(doc))


def test_roce_packet_reads_a_profile():
    prof = QosProfile(roce_dscp=12, cnp_dscp=40)
    kw = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
              dst_ip="10.0.0.2", dst_qpn=0x10, psn=0)
    assert roce.roce_packet(qos=prof, **kw)[IP].tos >> 2 == 12
    assert roce.roce_packet(qos=prof, opcode=roce.CNP, **kw)[IP].tos >> 2 == 40
    assert roce.roce_packet(**kw)[IP].tos >> 2 == DEFAULT_QOS.roce_dscp
    assert roce.roce_packet(opcode=roce.CNP, **kw)[IP].tos >> 2 == DEFAULT_QOS.cnp_dscp
