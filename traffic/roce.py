"""RoCEv2 packets: scapy layers, builders, and a byte-level ICRC for the fast path.

Frame layout (RoCEv2, IBTA Vol 1 Annex A17 "RoCEv2"):

    Ether / IPv4 (DSCP, ECN) / UDP (dport 4791, checksum 0) / BTH (12 B)
          [/ RETH (16 B) on RDMA WRITE FIRST/ONLY and READ REQUEST]
          [/ AETH (4 B) on ACKNOWLEDGE]
          [/ CNPPadding (16 B) on CNP]
          / payload / ICRC (4 B)

scapy's ``scapy.contrib.roce`` provides BTH (with ICRC computation), AETH, GRH, CNPPadding and the
opcode table; this module adds the extended transport headers it lacks -- RETH, DETH, ImmDt and
AtomicETH/AtomicAckETH (IBTA Vol 1 sections 9.3.2 to 9.3.6) -- as scapy layers bound with
``bind_layers`` like the rest, so ``Ether(raw_bytes)`` dissects our frames completely.

ICRC (IBTA Vol 1 Annex A17.3.3 "ICRC" for RoCEv2 over IPv4): CRC-32 (the Ethernet/zlib
polynomial, 0x04C11DB7 reflected) over

    8 bytes of 0xFF (stand-in for the LRH that RoCEv2 does not carry)
    the IPv4 header with  ToS (DSCP+ECN) = 0xFF, TTL = 0xFF, header checksum = 0xFFFF
    the UDP header with   checksum = 0xFFFF
    the BTH with          byte 4 (FECN, BECN, 6 reserved bits) = 0xFF
    every header and byte after the BTH (extended headers, payload, pad), excluding the ICRC

The variant fields (those a router may rewrite: ECN/CE, DSCP remarking, TTL and the IPv4
checksum that follows them, FECN/BECN) are masked, so a CE mark or a TTL decrement on the way
leaves the ICRC valid. The ICRC is sent least-significant byte first (little-endian), as scapy
and the Linux soft-RoCE driver (drivers/infiniband/sw/rxe/rxe_icrc.c) do.

UDP source port (ECMP entropy): derived per QP pair exactly like Linux
``rdma_get_udp_sport()`` (include/rdma/ib_verbs.h): flow label ``fl = lqpn*rqpn`` folded
(``fl ^= fl>>20; fl ^= fl>>40``) to 20 bits, then folded to 14 bits and OR-ed with 0xC000, which
always lands in 49152-65535 (RFC 6335 dynamic range, IBTA A17.4.1 leaves the source port to the
sender for entropy).
"""

from __future__ import annotations

import functools
import struct
import zlib

from scapy.contrib.roce import AETH, BTH, CNP_OPCODE, GRH, CNPPadding  # noqa: F401 (re-export)
from scapy.fields import BitField, IntField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from railab.topologies.qos import DEFAULT_QOS, QosProfile

ROCEV2_UDP_PORT = 4791
"""IANA-assigned UDP destination port of RoCEv2 (IBTA Annex A17.2.1)."""

DSCP_ROCE = DEFAULT_QOS.roce_dscp
"""Default DSCP of RoCE data: ``railab.topologies.qos.DEFAULT_QOS.roce_dscp`` (the one home)."""
DSCP_CNP = DEFAULT_QOS.cnp_dscp
"""Default DSCP of CNPs: ``railab.topologies.qos.DEFAULT_QOS.cnp_dscp`` (the one home)."""

ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3
"""IP ECN codepoints (RFC 3168 section 5)."""

DEFAULT_TTL = 64

# ---- opcodes (IBTA Vol 1 Table 38, RC transport = 0x00 prefix) ------------------------------
RC_SEND_FIRST = 0x00
RC_SEND_MIDDLE = 0x01
RC_SEND_LAST = 0x02
RC_SEND_ONLY = 0x04
RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_MIDDLE = 0x07
RC_RDMA_WRITE_LAST = 0x08
RC_RDMA_WRITE_ONLY = 0x0A
RC_RDMA_READ_REQUEST = 0x0C
RC_ACKNOWLEDGE = 0x11
#: AETH syndromes (IBTA 9.7.5.2.5, table 42): ACK with the credit count invalid (0x1F), and
#: NAK code 0, PSN sequence error (0x60: bits 6-5 = 11 NAK)
AETH_ACK = 0x1F
AETH_NAK_PSN_SEQ = 0x60
RC_ATOMIC_ACKNOWLEDGE = 0x12
RC_COMPARE_SWAP = 0x13
RC_FETCH_ADD = 0x14
UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65
CNP = CNP_OPCODE  # 0x81, RoCEv2 Congestion Notification Packet (Annex A17.9.3)

OPCODE_NAMES = {
    RC_SEND_FIRST: "SEND_FIRST",
    RC_SEND_MIDDLE: "SEND_MIDDLE",
    RC_SEND_LAST: "SEND_LAST",
    RC_SEND_ONLY: "SEND_ONLY",
    RC_RDMA_WRITE_FIRST: "RDMA_WRITE_FIRST",
    RC_RDMA_WRITE_MIDDLE: "RDMA_WRITE_MIDDLE",
    RC_RDMA_WRITE_LAST: "RDMA_WRITE_LAST",
    RC_RDMA_WRITE_ONLY: "RDMA_WRITE_ONLY",
    RC_ACKNOWLEDGE: "ACKNOWLEDGE",
    CNP: "CNP",
}

# Extended-header length after the BTH, per opcode (bytes): RETH 16, AETH 4, CNP padding 16.
EXT_LEN = {
    RC_RDMA_WRITE_FIRST: 16,
    RC_RDMA_WRITE_ONLY: 16,
    RC_RDMA_READ_REQUEST: 16,
    RC_ACKNOWLEDGE: 4,
    RC_ATOMIC_ACKNOWLEDGE: 12,
    RC_COMPARE_SWAP: 28,
    RC_FETCH_ADD: 28,
    UD_SEND_ONLY: 8,
    UD_SEND_ONLY_IMM: 12,
    CNP: 16,
}

DEFAULT_PKEY = 0xFFFF


# ---- extra layers (IBTA Vol 1 section 9.3) ------------------------------------------------------
class RETH(Packet):
    """RDMA Extended Transport Header (IBTA Vol 1 9.3.3): VA (64 b), R_Key (32 b), DMA length."""

    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dmalen", 0)]


class DETH(Packet):
    """Datagram Extended Transport Header (IBTA Vol 1 9.3.2): Q_Key, source QP (UD only)."""

    name = "DETH"
    fields_desc = [XIntField("qkey", 0), BitField("resv8", 0, 8), BitField("srcqp", 0, 24)]


class ImmDt(Packet):
    """Immediate Data Extended Transport Header (IBTA Vol 1 9.3.4)."""

    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class AtomicETH(Packet):
    """Atomic Extended Transport Header (IBTA Vol 1 9.3.5): VA, R_Key, swap/add, compare."""

    name = "AtomicETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("rkey", 0),
        XLongField("swap_add", 0),
        XLongField("compare", 0),
    ]


class AtomicAckETH(Packet):
    """Atomic Acknowledge Extended Transport Header (IBTA Vol 1 9.3.6): original remote data."""

    name = "AtomicAckETH"
    fields_desc = [XLongField("orig", 0)]


for _op in (RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_ONLY, RC_RDMA_READ_REQUEST):
    bind_layers(BTH, RETH, opcode=_op)
for _op in (RC_COMPARE_SWAP, RC_FETCH_ADD):
    bind_layers(BTH, AtomicETH, opcode=_op)
bind_layers(BTH, DETH, opcode=UD_SEND_ONLY)
bind_layers(BTH, DETH, opcode=UD_SEND_ONLY_IMM)
bind_layers(DETH, ImmDt)
bind_layers(AETH, AtomicAckETH)  # only meaningful after ATOMIC_ACKNOWLEDGE (AETH is bound there)
bind_layers(BTH, AETH, opcode=RC_ATOMIC_ACKNOWLEDGE)


# ---- UDP source port ------------------------------------------------------------------------
def udp_sport(src_qpn: int, dst_qpn: int) -> int:
    """UDP source port for a QP pair, in 49152-65535.

    Same derivation as Linux ``rdma_calc_flow_label()`` + ``rdma_flow_label_to_udp_sport()``
    (include/rdma/ib_verbs.h): ``v = lqpn * rqpn; v ^= v >> 20; v ^= v >> 40; fl = v & 0xFFFFF``;
    ``sport = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000``.
    """
    v = (src_qpn & 0xFFFFFF) * (dst_qpn & 0xFFFFFF)
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    return ((fl & 0x03FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000


def tos(dscp: int, ecn: int) -> int:
    """IPv4 ToS byte from DSCP (0-63) and ECN (0-3); raises ValueError out of range."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"DSCP {dscp} out of range: use 0-63")
    if not 0 <= ecn <= 3:
        raise ValueError(f"ECN {ecn} out of range: use 0 (Not-ECT), 1 (ECT(1)), 2 (ECT(0)), 3 (CE)")
    return (dscp << 2) | ecn


# ---- builders (scapy) -------------------------------------------------------------------------
def roce_packet(
    *,
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    dst_qpn: int,
    psn: int,
    opcode: int = RC_SEND_ONLY,
    src_qpn: int | None = None,
    sport: int | None = None,
    payload: bytes = b"",
    pkey: int = DEFAULT_PKEY,
    ackreq: bool = False,
    dscp: int | None = None,
    qos: QosProfile | None = None,
    ecn: int = ECN_ECT0,
    ttl: int = DEFAULT_TTL,
    va: int = 0,
    rkey: int = 0,
    dmalen: int | None = None,
    syndrome: int = 0,
    msn: int = 0,
) -> Packet:
    """Build one RoCEv2 frame as a scapy packet (ICRC computed when the packet is built).

    ``opcode`` is an RC opcode (SEND_ONLY, RDMA_WRITE_FIRST/MIDDLE/LAST/ONLY, ACKNOWLEDGE) or
    CNP (0x81). RETH is added on WRITE_FIRST/WRITE_ONLY (``va``, ``rkey``, ``dmalen`` bytes,
    default ``len(payload)``), AETH on ACKNOWLEDGE (``syndrome``, ``msn``), the 16-byte padding on
    CNP (with BECN set, IBTA A17.9.3). ``dscp`` defaults to the QoS profile's (``qos``, a lab's
    ``LabSpec.qos``; default ``DEFAULT_QOS``) ``roce_dscp`` for data and ``cnp_dscp`` for CNP; UDP
    checksum is 0 as RoCE NICs send it; ``sport`` defaults to :func:`udp_sport` of the QPs.
    Payload bytes beyond a multiple of 4 are padded and the BTH pad count set (IBTA 9.2.3).
    Raises ValueError on an unsupported opcode.
    """
    if dscp is None:
        profile = qos if qos is not None else DEFAULT_QOS
        dscp = profile.cnp_dscp if opcode == CNP else profile.roce_dscp
    if sport is None:
        sport = udp_sport(src_qpn if src_qpn is not None else dst_qpn, dst_qpn)
    pad = (-len(payload)) % 4
    bth = BTH(opcode=opcode, pkey=pkey, dqpn=dst_qpn, psn=psn & 0xFFFFFF, ackreq=int(ackreq),
              padcount=pad)
    if opcode in (RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_ONLY):
        layers = bth / RETH(va=va, rkey=rkey, dmalen=len(payload) if dmalen is None else dmalen)
    elif opcode == RC_ACKNOWLEDGE:
        layers = bth / AETH(syndrome=syndrome, msn=msn)
    elif opcode == CNP:
        bth.becn = 1
        bth.padcount = 0
        pad = 0
        layers = bth / CNPPadding()
    elif opcode in (RC_SEND_ONLY, RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST,
                    RC_RDMA_WRITE_MIDDLE, RC_RDMA_WRITE_LAST):
        layers = bth
    else:
        raise ValueError(f"opcode {opcode:#x} not supported: use one of "
                         + ", ".join(f"{k:#x} {v}" for k, v in OPCODE_NAMES.items()))
    body = payload + b"\x00" * pad
    if body:
        layers = layers / Raw(body)
    pkt = (
        Ether(src=src_mac, dst=dst_mac)
        / IP(src=src_ip, dst=dst_ip, tos=tos(dscp, ecn), ttl=ttl, flags="DF", id=0)
        / UDP(sport=sport, dport=ROCEV2_UDP_PORT, chksum=0)
        / layers
    )
    return Ether(bytes(pkt))


# ---- byte-level ICRC (fast path; also used by the receiver) ----------------------------------
_LRH_MASK_CRC = zlib.crc32(b"\xff" * 8)


def icrc_ipv4(ip_and_rest: bytes | bytearray | memoryview) -> int:
    """ICRC (as an int, before little-endian packing) of an IPv4 RoCEv2 datagram.

    ``ip_and_rest`` starts at the IPv4 header and ends just before the ICRC (IPv4 options
    allowed). Masks per IBTA Vol 1 Annex A17.3.3 (see module docstring).
    """
    b = bytearray(ip_and_rest)
    ihl = (b[0] & 0x0F) * 4
    b[1] = 0xFF  # ToS: DSCP + ECN
    b[8] = 0xFF  # TTL
    b[10] = b[11] = 0xFF  # header checksum
    b[ihl + 6] = b[ihl + 7] = 0xFF  # UDP checksum
    b[ihl + 8 + 4] = 0xFF  # BTH: FECN, BECN, resv6
    return zlib.crc32(b, _LRH_MASK_CRC)


def check_icrc(frame: bytes | bytearray | memoryview) -> bool:
    """True when an Ethernet/IPv4 RoCEv2 frame's trailing ICRC matches its contents."""
    ip_len = struct.unpack_from("!H", frame, 16)[0]
    end = 14 + ip_len
    got = struct.unpack_from("<I", frame, end - 4)[0]
    return got == icrc_ipv4(memoryview(frame)[14:end - 4])


@functools.lru_cache(maxsize=64)
def _psn_tables(n: int, base: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """The ICRC's PSN-byte tables (bits 23-16, 15-8, 7-0) and ack-request term for a CRC message
    of ``n`` bytes whose BTH starts at ``base``: the linear part of CRC-32 depends on a byte's
    position from the end only, so every frame of one length shares them (one build per length,
    not per QP: an all-to-all of 960 QPs builds 3 sets, not 2,880)."""
    zero = bytearray(n)
    cz = zlib.crc32(zero)

    def table(pos: int) -> tuple[int, ...]:
        bits = []
        for j in range(8):
            zero[pos] = 1 << j
            bits.append(zlib.crc32(zero) ^ cz)
        zero[pos] = 0
        t = [0] * 256
        for v in range(1, 256):
            low = v & -v
            t[v] = t[v ^ low] ^ bits[low.bit_length() - 1]
        return tuple(t)

    return table(base + 9), table(base + 10), table(base + 11), table(base + 8)[0x80]


class FrameTemplate:
    """A prebuilt frame whose PSN (and ack-request bit) is patched per packet, ICRC recomputed.

    Built once per (flow, opcode) with scapy; ``frame(psn, ackreq)`` costs one bytearray copy,
    a few byte stores and one ``zlib.crc32`` pass over BTH..payload (the constant masked
    LRH/IP/UDP prefix CRC is precomputed). Offsets assume a 20-byte IPv4 header.
    """

    __slots__ = ("_buf", "_prefix_crc", "_end", "opcode", "size", "_fast")

    BTH_OFF = 14 + 20 + 8

    def __init__(self, pkt: Packet) -> None:
        raw = bytearray(bytes(pkt))
        if raw[14] != 0x45:
            raise ValueError("FrameTemplate needs an IPv4 header without options")
        self._buf = raw
        self.size = len(raw)
        self._end = len(raw) - 4
        self.opcode = raw[self.BTH_OFF]
        masked = bytearray(raw[14:self.BTH_OFF])
        masked[1] = 0xFF
        masked[8] = 0xFF
        masked[10] = masked[11] = 0xFF
        masked[20 + 6] = masked[20 + 7] = 0xFF  # UDP checksum
        self._prefix_crc = zlib.crc32(masked, _LRH_MASK_CRC)
        self._fast = None

    def frame(self, psn: int, ackreq: bool = False) -> bytearray:
        """The frame bytes for ``psn`` (24-bit, wraps) with the ICRC recomputed."""
        b = self._buf[:]
        o = self.BTH_OFF
        b[o + 8] = 0x80 if ackreq else 0
        b[o + 9] = (psn >> 16) & 0xFF
        b[o + 10] = (psn >> 8) & 0xFF
        b[o + 11] = psn & 0xFF
        save = b[o + 4]
        b[o + 4] = 0xFF
        crc = zlib.crc32(memoryview(b)[o:self._end], self._prefix_crc)
        b[o + 4] = save
        struct.pack_into("<I", b, self._end, crc)
        return b


    def _precompute(self) -> tuple:
        """Tables for :meth:`frame_shared`: CRC-32 is affine over GF(2), so for messages of one
        length ``crc(M0 ^ D) = crc(M0) ^ (crc(D) ^ crc(0...0))``; the ICRC of the frame with PSN
        bytes p2 p1 p0 and ack-request bit a is the ICRC with them zero XOR one table entry per
        byte (each table linear in its byte, built from 8 single-bit CRCs)."""
        o = self.BTH_OFF
        b = bytearray(self._buf)
        b[o + 8] = b[o + 9] = b[o + 10] = b[o + 11] = 0
        b[o + 4] = 0xFF
        c0 = zlib.crc32(memoryview(b)[o:self._end], self._prefix_crc)
        n = 8 + (o - 14) + (self._end - o)  # LRH stand-in + IPv4/UDP + BTH..payload
        base = 8 + (o - 14)  # where the BTH starts in the CRC's message
        return (c0, *_psn_tables(n, base))

    def raw(self) -> bytes:
        """The template's frame bytes as built (PSN 0, ICRC of that PSN)."""
        return bytes(self._buf)

    def icrc_tables(self) -> tuple:
        """``(c0, t2, t1, t0, ta)``: the ICRC with PSN and ack-request zero, one 256-entry table
        per PSN byte (bits 23-16, 15-8, 7-0) and the ack-request bit's term; the ICRC of PSN
        ``p`` is ``c0 ^ t2[p >> 16] ^ t1[(p >> 8) & 255] ^ t0[p & 255] ^ (ta if ackreq else 0)``
        (what :meth:`frame_shared` and the load engine's compiled fast path compute)."""
        if self._fast is None:
            self._fast = self._precompute()
        return self._fast

    def frame_shared(self, psn: int, ackreq: bool = False) -> bytearray:
        """Like :meth:`frame` but patches and returns the template's own buffer (no copy) and
        takes the ICRC from precomputed tables (no CRC pass over the payload): send it before
        the next call. Same bytes as :meth:`frame`."""
        f = self._fast
        if f is None:
            f = self._fast = self._precompute()
        c0, t2, t1, t0, ta = f
        b = self._buf
        o = self.BTH_OFF
        p2, p1, p0 = (psn >> 16) & 0xFF, (psn >> 8) & 0xFF, psn & 0xFF
        b[o + 8] = 0x80 if ackreq else 0
        b[o + 9], b[o + 10], b[o + 11] = p2, p1, p0
        struct.pack_into("<I", b, self._end, c0 ^ t2[p2] ^ t1[p1] ^ t0[p0] ^ (ta if ackreq else 0))
        return b


def parse_bth(frame: bytes | bytearray | memoryview, ip_off: int = 14) -> tuple[int, int, int, int]:
    """(opcode, dest QP, PSN, ackreq) of a RoCEv2/IPv4 frame; assumes ``ip_off`` is the IPv4 header."""
    o = ip_off + (frame[ip_off] & 0x0F) * 4 + 8
    dqpn = (frame[o + 5] << 16) | (frame[o + 6] << 8) | frame[o + 7]
    psn = (frame[o + 9] << 16) | (frame[o + 10] << 8) | frame[o + 11]
    return frame[o], dqpn, psn, frame[o + 8] >> 7
