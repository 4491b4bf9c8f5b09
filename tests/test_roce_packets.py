"""RoCEv2 packet layers, builders and the ICRC (root-free unit tests)."""

from __future__ import annotations

import binascii
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from railab.traffic import roce
from railab.traffic.roce import AETH, BTH, RETH, CNPPadding

MACS = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02")
IPS = dict(src_ip="10.0.1.1", dst_ip="10.0.2.1")


def _bitwise_crc32(data: bytes, crc: int = 0xFFFFFFFF) -> int:
    """CRC-32 register update, bit by bit (IEEE 802.3 polynomial 0x04C11DB7, reflected
    0xEDB88320), written from the polynomial definition: independent of zlib."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc


def _spec_icrc(*, src_ip: str, dst_ip: str, sport: int, bth_opcode: int, pkey: int, dqpn: int,
               ackreq: int, psn: int, padcount: int, after_bth: bytes) -> bytes:
    """ICRC spelled out from IBTA Vol 1 Annex A17.3.3 (RoCEv2 over IPv4), field by field:

    64 bits of 1s in place of the LRH; IPv4 header with Type of Service, Time to Live and
    Header Checksum all 1s; UDP header with Checksum all 1s; BTH with the 8-bit field holding
    FECN, BECN and Reserved all 1s; then everything up to the ICRC. CRC-32 (init 0xFFFFFFFF,
    final XOR, i.e. the Ethernet FCS algorithm), transmitted least-significant byte first.
    """
    udp_len = 8 + 12 + len(after_bth) + 4
    total = 20 + udp_len
    ipv4 = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, total, 0, 0x4000, 0xFF, 17, 0xFFFF,
                       bytes(map(int, src_ip.split("."))), bytes(map(int, dst_ip.split("."))))
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0xFFFF)
    bth = struct.pack("!BBHII", bth_opcode, padcount << 4, pkey, 0xFF000000 | dqpn,
                      (ackreq << 31) | psn)
    reg = _bitwise_crc32(b"\xff" * 8 + ipv4 + udp + bth + after_bth)
    return struct.pack("<I", reg ^ 0xFFFFFFFF)


def test_icrc_matches_spec_derivation():
    """ICRC of a SEND_ONLY equals a bitwise CRC over the masked pseudo-header (IBTA A17.3.3)."""
    payload = b"railab RoCEv2 ICRC vector\x00\x00\x00"  # 28 bytes, no pad
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=0x000D2A, src_qpn=0x11, psn=0x12345,
                         opcode=roce.RC_SEND_ONLY, payload=payload, ackreq=True, pkey=0xFFFF)
    raw = bytes(p)
    want = _spec_icrc(src_ip=IPS["src_ip"], dst_ip=IPS["dst_ip"], sport=p[UDP].sport,
                      bth_opcode=0x04, pkey=0xFFFF, dqpn=0x0D2A, ackreq=1, psn=0x12345,
                      padcount=0, after_bth=payload)
    assert raw[-4:] == want
    # pinned vector: sport 57289 (udp_sport(0x11, 0xD2A)), ICRC bytes on the wire
    assert p[UDP].sport == 57289
    assert raw[-4:].hex() == "2d6e2e1e"


def test_icrc_write_first_with_reth_and_pad_matches_spec():
    payload = b"\xa5" * 1021  # pad count 3
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=0x42, src_qpn=0x41, psn=7,
                         opcode=roce.RC_RDMA_WRITE_FIRST, payload=payload, va=0x7F0000001000,
                         rkey=0xBEEF, dmalen=65536)
    assert p[BTH].padcount == 3
    reth = struct.pack("!QII", 0x7F0000001000, 0xBEEF, 65536)
    want = _spec_icrc(src_ip=IPS["src_ip"], dst_ip=IPS["dst_ip"], sport=p[UDP].sport,
                      bth_opcode=0x06, pkey=0xFFFF, dqpn=0x42, ackreq=0, psn=7, padcount=3,
                      after_bth=reth + payload + b"\x00" * 3)
    assert bytes(p)[-4:] == want


def test_lrh_seed_matches_linux_rxe_constant():
    """Linux rxe (drivers/infiniband/sw/rxe/rxe_icrc.c) seeds its CRC with 0xdebb20e3: the
    register after 8 bytes of 0xFF from 0xFFFFFFFF. Both our CRC routines agree with it."""
    assert _bitwise_crc32(b"\xff" * 8) == 0xDEBB20E3
    assert binascii.crc32(b"\xff" * 8) ^ 0xFFFFFFFF == 0xDEBB20E3


def test_scapy_bth_icrc_agrees_with_fast_path():
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=9, psn=100, opcode=roce.RC_RDMA_WRITE_ONLY,
                         payload=b"x" * 64)
    raw = bytes(p)
    again = Ether(raw)
    assert bytes(BTH.compute_icrc(again[BTH], None)) == raw[-4:]
    assert roce.check_icrc(raw)


@pytest.mark.parametrize("mutate", ["ce", "ttl", "dscp", "fecn"])
def test_variant_fields_keep_icrc_valid(mutate):
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=9, psn=100, opcode=roce.RC_SEND_ONLY,
                         payload=b"y" * 256, ecn=roce.ECN_ECT0)
    b = bytearray(bytes(p))
    if mutate == "ce":
        b[15] |= 0x03  # ECT(0) -> CE, as a congested switch marks it
    elif mutate == "ttl":
        b[22] -= 3  # three routed hops
    elif mutate == "dscp":
        b[15] = (10 << 2) | (b[15] & 3)
    elif mutate == "fecn":
        b[14 + 20 + 8 + 4] |= 0xC0
    # routers recompute the IPv4 header checksum; the ICRC masks it
    hdr = Ether(bytes(b))
    del hdr[IP].chksum
    b2 = bytes(hdr)
    assert b2 != bytes(p)
    assert roce.check_icrc(b2)


@pytest.mark.parametrize("where", ["payload", "psn", "dqpn", "dst_ip", "sport"])
def test_invariant_changes_break_icrc(where):
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=9, psn=100, opcode=roce.RC_SEND_ONLY,
                         payload=b"z" * 256)
    b = bytearray(bytes(p))
    bth = 14 + 20 + 8
    off = {"payload": bth + 12 + 100, "psn": bth + 11, "dqpn": bth + 7, "dst_ip": 33,
           "sport": 35}[where]
    b[off] ^= 0x01
    assert not roce.check_icrc(b)


def test_layers_dissect_every_opcode():
    kinds = {
        roce.RC_SEND_ONLY: None,
        roce.RC_RDMA_WRITE_FIRST: RETH,
        roce.RC_RDMA_WRITE_MIDDLE: None,
        roce.RC_RDMA_WRITE_LAST: None,
        roce.RC_RDMA_WRITE_ONLY: RETH,
        roce.RC_ACKNOWLEDGE: AETH,
        roce.CNP: CNPPadding,
    }
    for op, ext in kinds.items():
        data = b"" if op in (roce.RC_ACKNOWLEDGE, roce.CNP) else b"q" * 40
        p = Ether(bytes(roce.roce_packet(**MACS, **IPS, dst_qpn=0xABCDEF, psn=0xFFFFFF, opcode=op,
                                         payload=data, syndrome=0x1F, msn=3)))
        assert p[UDP].dport == 4791 and p[UDP].chksum == 0
        assert p[BTH].opcode == op and p[BTH].dqpn == 0xABCDEF and p[BTH].psn == 0xFFFFFF
        assert 49152 <= p[UDP].sport <= 65535
        if ext is not None:
            assert p.haslayer(ext), (hex(op), p.summary())
        if op == roce.CNP:
            assert p[IP].tos >> 2 == roce.DSCP_CNP and p[BTH].becn == 1
        else:
            assert p[IP].tos >> 2 == roce.DSCP_ROCE
        assert p[IP].tos & 3 == roce.ECN_ECT0
        assert roce.check_icrc(bytes(p))
    ack = Ether(bytes(roce.roce_packet(**MACS, **IPS, dst_qpn=1, psn=1, opcode=roce.RC_ACKNOWLEDGE,
                                       syndrome=0x1F, msn=77)))
    assert ack[AETH].syndrome == 0x1F and ack[AETH].msn == 77


def test_unsupported_opcode_and_bad_dscp_raise():
    with pytest.raises(ValueError, match="not supported"):
        roce.roce_packet(**MACS, **IPS, dst_qpn=1, psn=1, opcode=0x13)
    with pytest.raises(ValueError, match="DSCP"):
        roce.roce_packet(**MACS, **IPS, dst_qpn=1, psn=1, dscp=64)


def test_udp_sport_follows_linux_derivation():
    # ib_verbs.h: v = l*r; v ^= v>>20; v ^= v>>40; fl = v & 0xFFFFF; sport = fold14(fl) | 0xC000
    v = 0x11 * 0x12
    fl = (v ^ (v >> 20) ^ ((v ^ (v >> 20)) >> 40)) & 0xFFFFF
    assert roce.udp_sport(0x11, 0x12) == ((fl & 0x3FFF) ^ (fl >> 14)) | 0xC000
    ports = {roce.udp_sport(0x100 + i, 0x200 + i) for i in range(256)}
    assert all(49152 <= s <= 65535 for s in ports)
    assert len(ports) > 200  # entropy: distinct QPs give distinct ports


def test_template_patches_psn_and_icrc():
    p = roce.roce_packet(**MACS, **IPS, dst_qpn=5, psn=0, opcode=roce.RC_RDMA_WRITE_MIDDLE,
                         payload=b"m" * 1024)
    t = roce.FrameTemplate(p)
    assert bytes(t.frame(0)) == bytes(p)
    for psn, ack in ((1, False), (0xFFFFFF, True), (123456, False)):
        f = t.frame(psn, ack)
        assert roce.check_icrc(f)
        assert roce.parse_bth(f) == (roce.RC_RDMA_WRITE_MIDDLE, 5, psn, int(ack))
        assert Ether(bytes(f))[BTH].psn == psn
