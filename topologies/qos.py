"""The RoCEv2 QoS profile: ECN/WRED thresholds, PFC priorities, xOFF/xON headroom, DSCP map.

The one home of these numbers: the SONiC ``config_db.json`` (:mod:`railab.topologies.sonic`)
renders them, ``lab.json`` records them (``qos``), and the FRR lab's ECN/PFC emulation reads the
same :class:`QosProfile` object, so the two kinds of lab never disagree.

Seed guide ("Easy RoCE": PFC + ECN under DCQCN): ECN first (the switch marks CE once an egress
queue passes the WRED thresholds, the receiver answers with CNPs), PFC second (a PAUSE upstream
when the lossless queue reaches xOFF, RESUME below xON). The seed gives no numbers; sources:

* ECN/WRED ``Kmin`` 1 MiB (1048576 B), ``Kmax`` 2 MiB (2097152 B), ``Pmax`` 5 %, ``ecn_all``:
  SONiC's ``WRED_PROFILE|AZURE_LOSSLESS`` defaults (sonic-buildimage
  ``files/build_templates/qos_config.j2``), applied to green, yellow and red alike;
* lossless priorities / queues 3 and 4 (``pfc_enable "3,4"``): the same template's
  ``PORT_QOS_MAP`` default;
* RoCEv2 data DSCP 26 -> TC 3 and CNP DSCP 48 -> TC 6: common NIC defaults (NVIDIA/Mellanox
  RoCE DSCP 26, CNP priority 6 / DSCP 48); every other DSCP -> TC 0; TC n -> queue n;
* xOFF / xON / headroom: SONiC derives them per port speed and cable length from the platform's
  ``pg_profile_lookup.ini`` (there is no platform-independent default), so railab sizes them
  with the classic PFC headroom formula (:func:`pfc_headroom_bytes`): the bytes in flight during
  one cable round trip plus the PFC response time, plus two maximum-size frames (one being sent
  when PAUSE arrives, one being received), for 400G, 100 m and 9216-byte frames; xON is two
  frames below xOFF (hysteresis so PAUSE/RESUME do not oscillate).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

#: Propagation delay in fibre, ns per metre (light at ~2/3 c).
FIBRE_NS_PER_M = 5.0
#: Allowance for the peer's reaction to PAUSE (MAC/PHY and interface delays), bits: railab's
#: round figure of 3840 bytes (IEEE 802.1Qbb Annex N lists these delays in its headroom budget).
PFC_RESPONSE_BITS = 3840 * 8


def pfc_headroom_bytes(speed_gbps: int, cable_m: float, mtu: int) -> int:
    """PFC headroom (xOFF) in bytes for one lossless queue of a ``speed_gbps`` port.

    ``2 x cable delay x rate`` (round trip) + the PFC response time + ``2 x mtu`` (a frame in
    transmission at each end), rounded up to whole bytes. Raises ValueError for non-positive input.
    """
    if speed_gbps <= 0 or cable_m < 0 or mtu <= 0:
        raise ValueError("pfc_headroom_bytes: speed and MTU must be positive, cable length >= 0")
    rtt_bits = 2 * cable_m * FIBRE_NS_PER_M * speed_gbps  # ns x Gb/s = bits
    return math.ceil((rtt_bits + PFC_RESPONSE_BITS) / 8) + 2 * mtu


class EcnProfile(BaseModel):
    """WRED/ECN marking on the lossless queues: marks from ``kmin_bytes`` queue depth, with
    probability rising linearly to ``pmax_percent`` at ``kmax_bytes`` (bytes, percent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kmin_bytes: int = Field(1048576, gt=0)
    kmax_bytes: int = Field(2097152, gt=0)
    pmax_percent: int = Field(5, ge=0, le=100)
    mode: str = Field("ecn_all", description="SONiC WRED 'ecn' field")


class PfcProfile(BaseModel):
    """PFC on the lossless priorities: PAUSE at ``xoff_bytes`` of headroom use, RESUME at
    ``xon_bytes`` (bytes per priority group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    priorities: tuple[int, ...] = (3, 4)
    xoff_bytes: int = Field(pfc_headroom_bytes(400, 100, 9216), gt=0)
    xon_bytes: int = Field(pfc_headroom_bytes(400, 100, 9216) - 2 * 9216, gt=0)
    headroom_bytes: int = Field(pfc_headroom_bytes(400, 100, 9216), gt=0)
    cable_m: float = 100.0
    speed_gbps: int = 400


class QosProfile(BaseModel):
    """The whole RoCEv2 QoS profile of a lab (``lab.json`` ``qos``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "AZURE_LOSSLESS"
    roce_dscp: int = Field(26, ge=0, le=63)
    roce_tc: int = Field(3, ge=0, le=7)
    cnp_dscp: int = Field(48, ge=0, le=63)
    cnp_tc: int = Field(6, ge=0, le=7)
    default_tc: int = Field(0, ge=0, le=7)
    ecn: EcnProfile = Field(default_factory=EcnProfile)
    pfc: PfcProfile = Field(default_factory=PfcProfile)

    def dscp_to_tc(self) -> dict[int, int]:
        """DSCP (0-63) -> traffic class: RoCE and CNP DSCPs to their TCs, the rest default."""
        m = {d: self.default_tc for d in range(64)}
        m[self.roce_dscp] = self.roce_tc
        m[self.cnp_dscp] = self.cnp_tc
        return m

    def tc_to_queue(self) -> dict[int, int]:
        """Traffic class -> egress queue (identity, 0-7)."""
        return {t: t for t in range(8)}

    @property
    def lossless_queues(self) -> tuple[int, ...]:
        """Queues that carry PFC and the WRED/ECN profile (= the PFC priorities)."""
        return self.pfc.priorities


#: railab's default profile (the one every generated lab records).
DEFAULT_QOS = QosProfile()
