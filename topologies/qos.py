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

Capacity and time scale (:class:`CapacityProfile`, the intent's ``lab.capacity``): a lab port
cannot run at 400 Gb/s, so every port runs at ``port_rate_mbps`` and time is scaled by
``time_scale = fabric rate / lab rate`` (10000 at the 40 Mb/s default). Byte thresholds
(Kmin/Kmax, buffers, xOFF/xON, DCQCN's byte counter) keep their production values; every time
constant (CNP interval, DCQCN timers) is multiplied by the scale and every rate (DCQCN's
additive/hyper increase, minimum rate) divided by it (:meth:`CapacityProfile.lab_seconds`,
:meth:`CapacityProfile.lab_bps`).

DCQCN (:class:`DcqcnProfile`): Zhu et al., "Congestion Control for Large-Scale RDMA
Deployments", SIGCOMM 2015, section 3 (the reaction point's alpha update with gain ``g``, rate
decrease ``Rc * (1 - alpha/2)``, fast recovery for ``F`` steps, additive then hyper increase,
driven by a timer and a byte counter). Three named profiles (:data:`DCQCN_PROFILES`):

* ``paper`` (:data:`DCQCN_PAPER`): the paper's values for 40 Gb/s NICs (section 5: g = 1/256,
  alpha timer 55 us, rate-increase timer 55 us, byte counter 10 MB, F = 5, R_AI 40 Mb/s), the
  hyper-increase step ``R_HAI`` 10x R_AI and the CNP interval of the notification point 50 us
  (one CNP per QP per interval at most, as the paper's NP);
* ``400g`` (:data:`DCQCN_400G`, the default of :class:`QosProfile`): the same algorithm, timers
  and NP, with the rate steps and byte counter for a 400 Gb/s line (R_AI 400 Mb/s, R_HAI
  800 Mb/s, B 100 MB) and alpha updated as the NVIDIA ConnectX firmware does by default (every
  1 us, g = 5/1024);
* ``connectx`` (:data:`DCQCN_CONNECTX`): the NVIDIA ConnectX firmware's defaults as a whole,
  for comparison.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

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


class DcqcnProfile(BaseModel):
    """DCQCN reaction-point (sender NIC) and notification-point (receiver NIC) parameters, in
    fabric units (us, Mb/s, bytes); the lab engine converts them with the lab's
    :class:`CapacityProfile`. Source: Zhu et al., SIGCOMM 2015 (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    g: float = Field(1 / 256, gt=0, lt=1, description="alpha gain")
    alpha_timer_us: float = Field(55.0, gt=0, description="alpha update period without CNP, us")
    rate_timer_us: float = Field(55.0, gt=0, description="rate-increase timer T, us")
    byte_counter_bytes: int = Field(10 * 1000 * 1000, gt=0, description="byte counter B, bytes")
    fast_recovery_steps: int = Field(5, ge=1, description="F: fast-recovery steps")
    ai_rate_mbps: float = Field(40.0, gt=0, description="R_AI additive increase, Mb/s")
    hai_rate_mbps: float = Field(400.0, gt=0, description="R_HAI hyper increase, Mb/s")
    min_rate_mbps: float = Field(10.0, gt=0, description="floor of the current rate, Mb/s")
    cnp_interval_us: float = Field(50.0, gt=0, description="NP: at most one CNP per QP per "
                                   "interval, us")
    initial_alpha: float = Field(1.0, ge=0, le=1)
    name: str = Field("paper", description="the named profile these values come from "
                      "(DCQCN_PROFILES), recorded with every run")


#: The DCQCN values of Zhu et al., SIGCOMM 2015, section 5 (set for 40 Gb/s NICs).
DCQCN_PAPER = DcqcnProfile()

#: DCQCN for a 400 Gb/s fabric (``400g``, railab's default): the paper's algorithm, NP
#: (50 us CNP interval), rate timer (55 us) and F (5), with
#:
#: * R_AI 400 Mb/s and the minimum rate 100 Mb/s at the same fraction of the line rate as the
#:   paper's at 40 Gb/s (x10; the paper: R_AI 40 Mb/s = 1/1000 of 40G);
#: * R_HAI 800 Mb/s: HPCC's DCQCN setting at 400 Gb/s (alibaba-edu
#:   High-Precision-Congestion-Control, ``simulation/run.py``: ``hai = 50 * bw / 25`` Mb/s,
#:   with ``bw`` in Gb/s). It was 4 Gb/s (x10 the paper's) until the DCQCN fluid model
#:   (:mod:`railab.traffic.fluid`) showed what that does at 2:1: after each quiet spell the
#:   hyper increase overshoots the port, the queue climbs to the PFC pause threshold every
#:   ~5 ms (11 % of the run's last half at xOFF) and PFC, which pauses ports and not flows,
#:   splits the port unevenly (measured: senders at 0.47-1.42 of their share); at 800 Mb/s the
#:   model never reaches xOFF after the onset and 4:1 and 8:1 are unchanged
#:   (docs/congestion.md "Fidelity");
#: * alpha updated every 1 us with g = 5/1024: the NVIDIA ConnectX-4-and-later firmware
#:   defaults ``dce_tcp_rtt`` 1 us and ``dce_tcp_g`` 1019 (alpha keeps 1019/1024 per period;
#:   NVIDIA DOCA "DCQCN CC Parameters", networking-docs.nvidia.com), HPCC's ``t_alpha=1``,
#:   instead of the paper's 55 us with 1/256: alpha's time constant is 205 us instead of
#:   14 ms, so after an incast's first cuts alpha falls within a few hundred microseconds and
#:   the later cuts are small (a few %), so the senders are not cut far below their share.
#:
#: * byte counter B 100 MB: the paper's 10 MB is 2 ms of sending at its 40 Gb/s line; the same
#:   2 ms at 400 Gb/s is 100 MB (scaled with the line, as R_AI and the minimum rate are). With
#:   10 MB the counter fired every 0.4 ms per sender at 2:1, so a sender that escaped one queue
#:   episode's marks reached hyper increase (both the timer and the counter past F) within
#:   ~2.4 ms and grew by i x R_HAI until the next; which sender that was is random, and a 2:1
#:   incast ended 15 ms with a sender outside 15 % of its share in about a third of the runs.
#:   The per-packet reference (:mod:`railab.traffic.packetsim`, 12 runs) went from 8/12 fair
#:   runs to 12/12 at 2:1 (4:1 and 8:1 6/6 both ways), the fluid model's 2:1 utilization from
#:   96.6 % to 99.0 %; measured side by side on mini-lossless (2:1, PFC on, 3 runs each, load
#:   8-13): senders at 0.94-1.04 of their share against 0.67-1.28 (docs/congestion.md).
#:
#: The paper's rate-reduction path is kept (a cut per CNP, the NP's 50 us interval): the
#: firmware's 4 us ``rate_reduce_monitor_period`` with CNPs as often as marks arrive cut
#: every sender to the minimum rate on mini-lossless (branch ``tune``: the marks of a 4 MiB
#: queue arrive up to 84 us late), and the fluid model agrees (a 4 us cut interval leaves
#: 2:1 at 45 % of the port after 15 ms). Tuned for railab's 400 Gb/s NICs and 1-2 MiB
#: Kmin/Kmax; another line rate or marking profile is not tuned by it.
DCQCN_400G = DcqcnProfile(name="400g", ai_rate_mbps=400.0, hai_rate_mbps=800.0,
                          min_rate_mbps=100.0, g=5 / 1024, alpha_timer_us=1.0,
                          byte_counter_bytes=100_000_000)

#: The NVIDIA ConnectX (mlx5) firmware's DCQCN defaults (``connectx``), as the Linux mlx5
#: driver names them (``drivers/infiniband/hw/mlx5/cong.c``, the ``rp_*``/``np_*``
#: parameters) and NVIDIA documents them (DOCA "DCQCN CC Parameters"): ``rp_time_reset``
#: 300 us (rate timer), ``rp_byte_reset`` 32,767 B (byte counter), ``rp_threshold`` 1 (F),
#: ``rp_ai_rate`` 5 Mb/s, ``rp_hai_rate`` 50 Mb/s, ``rp_min_rate`` 1 Mb/s, ``dce_tcp_g`` 1019
#: (g = 5/1024), ``dce_tcp_rtt`` 1 us (alpha period), ``initial_alpha_value`` 1023 (~1), and
#: ``rate_reduce_monitor_period`` 4 us, here as at most one CNP, so one cut, per QP per 4 us
#: (a cut, ``1 - alpha/2``, never goes below ``rp_min_dec_fac`` 50 %). Not the default: the
#: fluid model leaves mini-lossless's port 83-89 % used after 15 ms and a measured 2:1 run
#: starved one sender (docs/congestion.md "Profiles"); it is here so that a planner can set
#: what the NICs ship with beside what railab tunes.
DCQCN_CONNECTX = DcqcnProfile(name="connectx", g=5 / 1024, alpha_timer_us=1.0,
                              rate_timer_us=300.0, byte_counter_bytes=32767,
                              fast_recovery_steps=1, ai_rate_mbps=5.0, hai_rate_mbps=50.0,
                              min_rate_mbps=1.0, cnp_interval_us=4.0)

#: The named DCQCN profiles (``railab traffic --dcqcn NAME``; the JSON records ``dcqcn.name``).
DCQCN_PROFILES: dict[str, DcqcnProfile] = {"paper": DCQCN_PAPER, "400g": DCQCN_400G,
                                           "connectx": DCQCN_CONNECTX}


def dcqcn_profile(name: str) -> DcqcnProfile:
    """The named DCQCN profile (:data:`DCQCN_PROFILES`); raises ValueError naming the known
    profiles for an unknown name."""
    try:
        return DCQCN_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown DCQCN profile {name!r}: use one of "
                         f"{', '.join(DCQCN_PROFILES)}") from None


class SharedBufferProfile(BaseModel):
    """A switch's shared egress buffer with a dynamic threshold (intent
    ``lab.capacity.shared_buffer``; lab.json ``qos.capacity.shared_buffer``).

    Switch ASICs do not give each port a fixed buffer: every queue draws cells from one shared
    pool, and a queue may grow while it holds less than ``alpha x (pool - used)``, the free
    space scaled by alpha (the dynamic threshold of Choudhury and Hahne, "Dynamic queue length
    thresholds for shared-memory packet switches", IEEE/ACM ToN 6(2), 1998). ``dynamic_th`` is
    SONiC's ``BUFFER_PROFILE`` field (sonic-buffer-profile.yang: -8..7) and SAI's
    ``SAI_BUFFER_PROFILE_ATTR_SHARED_DYNAMIC_TH``: alpha = 2^dynamic_th (0: alpha 1, a lone hot
    queue takes half the pool). The default 7 (alpha 128: a lone hot queue may take 128/129 of
    the pool, n hot queues about 1/n each) is SONiC's ``egress_lossless_profile`` default
    (sonic-buildimage's Mellanox buffer templates; Broadcom's give that profile a static
    threshold of the whole pool instead). ``pool_bytes``: the pool, bytes, default 64 MiB (the
    on-chip buffer of a 12.8-25.6 Tb/s ASIC is some 64-113 MB, parts of it reserved: set your
    switch's; railab does not model per-pipe partitions).

    Without one the lab's queues have the static ``buffer_bytes`` each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # strict: YAML's true or "7" is not a number of bytes or an exponent; at most 2 GiB, so the
    # agent's tc limit (the pool plus PFC's emulation headroom) stays within tc's 32 bits
    pool_bytes: StrictInt = Field(64 * 1048576, gt=0, le=1 << 31, description="shared pool, bytes")
    dynamic_th: StrictInt = Field(7, ge=-8, le=7, description="alpha = 2^dynamic_th (SONiC/SAI)")

    @property
    def alpha(self) -> float:
        """The dynamic threshold's alpha: ``2 ** dynamic_th``."""
        return 2.0 ** self.dynamic_th

    def share_bytes(self, hot_queues: int = 1) -> int:
        """Steady depth, bytes, of each of ``hot_queues`` queues that fill at once (the others
        empty): the fixed point q = alpha (pool - n q), so ``alpha pool / (1 + n alpha)``. The
        rule itself runs in the switch agent (railab.testbed.pfc ``dt_limit``)."""
        a = self.alpha
        return int(a * self.pool_bytes / (1 + hot_queues * a))


class PfcWatchdogProfile(BaseModel):
    """The switches' PFC watchdog (intent ``lab.capacity.pfc_watchdog``; lab.json
    ``qos.capacity.pfc_watchdog``; SONiC's ``PFC_WD`` table, sonic-pfcwd.yang, whose ranges
    these are): a lossless queue held paused for ``detection_time_ms`` is declared stormed and
    ``action`` taken (``drop``, ``forward``, or ``alert``: counted only); it is restored after
    ``restoration_time_ms`` without PAUSE. Rendered as such (fabric ms) into each switch's
    ``PFC_WD``; the lab's switch agent runs the same numbers as **lab** ms (scaled, SONiC's
    200 ms would be 400 lab s at a time scale of 2000; railab.testbed.pfc.Watchdog,
    docs/congestion.md "PFC failure modes")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    detection_time_ms: StrictInt = Field(200, ge=100, le=5000, description="ms (SONiC: 100-5000)")
    restoration_time_ms: StrictInt = Field(200, ge=100, le=60000, description="ms (SONiC: 100-60000)")
    action: Literal["drop", "forward", "alert"] = "drop"


class CapacityProfile(BaseModel):
    """Port capacity, queues and time scale of an FRR lab (intent ``lab.capacity``; lab.json
    ``qos.capacity``). ``enabled`` false: veth links stay unlimited (the path-test labs).

    ``port_rate_mbps`` is the lab rate of every leaf, spine and NIC egress port, Mb/s;
    ``buffer_bytes`` the egress buffer per port (a tail-drop byte limit beyond which packets
    drop; PFC's pause threshold is computed from it either way); ``pfc`` whether the lossless
    class is paused at xOFF (the PFC emulation); ``shared_buffer`` (optional) replaces the
    static tail-drop limit of the switches' lossless queues by a dynamic threshold over a shared
    pool (:class:`SharedBufferProfile`, kept by the switch agent, docs/congestion.md);
    ``pfc_watchdog`` (optional) the switches' PFC watchdog (:class:`PfcWatchdogProfile`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    port_rate_mbps: float = Field(40.0, gt=0, le=10000, description="lab port rate, Mb/s")
    fabric_rate_gbps: int = Field(400, gt=0, description="the production port rate it stands "
                                  "for, Gb/s")
    buffer_bytes: int = Field(4 * 1048576, gt=0, description="egress buffer per port, bytes")
    pfc: bool = Field(True, description="PFC emulation on the lossless class")
    shared_buffer: SharedBufferProfile | None = Field(
        None, description="shared pool with a dynamic threshold (drop limit); None: static")
    pfc_watchdog: PfcWatchdogProfile | None = Field(
        None, description="the switches' PFC watchdog (SONiC PFC_WD); None: off")

    @property
    def drop_limit_bytes(self) -> int:
        """Depth, bytes, at which one congested lossless queue tail-drops: ``buffer_bytes``, or
        with a shared buffer the dynamic threshold's share of a lone hot queue
        (:meth:`SharedBufferProfile.share_bytes`); the single-bottleneck models use it."""
        if self.shared_buffer is None:
            return self.buffer_bytes
        return self.shared_buffer.share_bytes(1)

    @property
    def time_scale(self) -> float:
        """Lab seconds per fabric second: ``fabric_rate_gbps * 1000 / port_rate_mbps``."""
        return self.fabric_rate_gbps * 1000.0 / self.port_rate_mbps

    def lab_seconds(self, fabric_us: float) -> float:
        """A fabric time constant (us) in lab seconds (multiplied by the time scale)."""
        return fabric_us * 1e-6 * self.time_scale

    def fabric_us(self, lab_s: float) -> float:
        """A measured lab time (s) back in fabric microseconds."""
        return lab_s / self.time_scale * 1e6

    def lab_bps(self, fabric_mbps: float) -> float:
        """A fabric rate (Mb/s) in lab bits per second (divided by the time scale)."""
        return fabric_mbps * 1e6 / self.time_scale


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
    dcqcn: DcqcnProfile = Field(default_factory=lambda: DCQCN_400G)
    capacity: CapacityProfile = Field(default_factory=CapacityProfile)

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
    def pfc_pause_bytes(self) -> int:
        """Lossless-queue depth (bytes) at which the PFC emulation PAUSEs the upstream port:
        the port buffer minus the PFC headroom (``pfc.xoff_bytes``), so the headroom absorbs what
        is in flight when PAUSE is sent. Above ECN's Kmax by design (ECN first, PFC second);
        raises ValueError if the buffer is too small for that."""
        pause = self.capacity.buffer_bytes - self.pfc.xoff_bytes
        if pause <= self.ecn.kmax_bytes:
            raise ValueError(
                f"capacity.buffer_bytes {self.capacity.buffer_bytes} leaves a PFC pause threshold "
                f"of {pause} B, not above ECN Kmax {self.ecn.kmax_bytes} B: raise "
                f"lab.capacity.buffer_bytes above {self.ecn.kmax_bytes + self.pfc.xoff_bytes}")
        return pause

    @property
    def pfc_resume_bytes(self) -> int:
        """Depth (bytes) under which a paused upstream port RESUMEs: the pause threshold less
        the xOFF-xON hysteresis."""
        return self.pfc_pause_bytes - (self.pfc.xoff_bytes - self.pfc.xon_bytes)

    @property
    def lossless_queues(self) -> tuple[int, ...]:
        """Queues that carry PFC and the WRED/ECN profile (= the PFC priorities)."""
        return self.pfc.priorities


#: railab's default profile (the one every generated lab records).
DEFAULT_QOS = QosProfile()
