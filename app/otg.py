"""``railab otg LAB``: the Open Traffic Generator (OTG) REST API over a running lab (docs/otg.md).

A Starlette app (served by uvicorn, as ``railab ui``) answering the part of the OTG API a
fabric test uses, so that `snappi <https://pypi.org/project/snappi/>`_ scripts drive railab's
engines. The paths and objects are those of the OTG models' OpenAPI document
(open-traffic-generator/models ``artifacts/openapi.yaml``; snappi 1.62.0 is the client tested):

* ``POST /config`` / ``GET /config`` (``paths./config``, schema ``Config``): ports are server
  NICs (``location`` ``srv1:eth1``, ``srv1:nic1`` or ``srv1:gpu0``) or, for link events only, a
  switch's end of a lab link (``g1-leaf1:eth9``); devices with Ethernet and IPv4 on those ports
  (the lab's addresses) and RoCEv2 peers and QPs; flows with Ethernet / IPv4 / UDP headers, a
  fixed ``size``, a ``rate`` (pps, bps, kbps, mbps, gbps, percentage of line) and a ``duration``
  (fixed_packets, fixed_seconds, continuous), from one port (or device) to one other, or from a
  tx port only (frames exactly as configured); ``stateful_flows.rocev2`` (RDMA WRITE messages,
  DCQCN on/off); ``events.dp_events``.
* ``POST /control/state`` (``Control.State``): ``traffic.flow_transmit`` start/stop,
  ``port.link`` up/down (a railab ``link-down`` fault), ``protocol.all`` start (the lab's
  interfaces are always up: a warning says so).
* ``POST /monitor/metrics`` (``Metrics.Request`` / ``Metrics.Response``): ``port``, ``flow``,
  ``rocev2_flow`` (per QP: CE, CNPs, rates, FCT) and ``convergence`` (the drill's probe streams).
* ``GET /capabilities/version`` (``Version``).

Everything else the API has answers the API's error object (``Error``: ``code``, ``kind``,
``errors``) with status 501 (a feature railab does not do) or 400 (a malformed config, an
unknown port location, a name that does not exist), never a silent success.

Two-port packet flows run on the path engine (:class:`railab.traffic.engine.Engine`; as
probe streams, :class:`railab.traffic.stream.StreamProcess`, when data-plane events are on;
RoCEv2 flows on the load engine, :func:`railab.traffic.load.run_load`): each OTG frame is one
RoCEv2 SEND_ONLY packet (Ethernet / IPv4 / UDP 4791 / BTH / payload / ICRC) from the tx port's
NIC to the rx port's, with the lab's addresses (the fabric routes by them) and the flow's
``udp.src_port`` when it sets one (the ECMP entropy: a script aims the flow at a path; else its
QP pair's port, QPs numbered per NIC pair as ``railab traffic`` numbers them); the engine counts
what arrived, in PSN order, and the hops it took (TTL). Rates are the fabric's: on a lab with
``qos.capacity`` (e.g. ``mini-lossless``) a fabric rate is divided by the lab's time scale
(``QosProfile.time_scale``, fabric rate / lab rate) to get the lab's, and measured lab rates are
multiplied by it; labs without capacity have time scale 1 and no line rate.

Security as ``railab ui`` (docs/ui.md): loopback by default, ``--token`` required for any other
bind, the token checked on every request (``Authorization: Bearer T``; 401 without, 403 wrong),
loopback ``Host`` names only on a loopback bind; names are checked against the lab's
``lab.json`` and every action is a Python call: nothing from a request reaches a shell.
"""

from __future__ import annotations

import hmac
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.topologies.labspec import LabSpec
from railab.ui import check_bind, is_loopback, parse_bind

#: the OTG API version this server speaks (the snappi release it is tested with, pinned in the
#: ``test`` extra; its models' ``artifacts/openapi.yaml`` paths and objects used here are the
#: same as in 1.61.0's, the newest the project's mirror holds)
API_VERSION = "1.62.0"
#: RoCEv2 SEND_ONLY frame without payload: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4,
#: plus the 4-byte FCS that OTG's frame size counts
FRAME_OVERHEAD = 62
MIN_FRAME = 64
MAX_FRAME = FRAME_OVERHEAD + 4096
#: The most lab packets/s a packet flow may ask for (the kernel under a lab forwards ~400,000;
#: the path engine builds each chunk of a flow's packets ahead: a rate beyond any line made the
#: server build without end, found in review)
MAX_LAB_PPS = 1_000_000.0
#: The most packets a fixed_packets duration may ask for (1,000,000: ~25 s at the path engine's
#: 40,000 packets/s)
MAX_FLOW_PACKETS = 1_000_000
#: preamble + start delimiter + inter-frame gap, bytes: what a line's percentage counts
L1_EXTRA = 20
#: flow metrics and port metrics columns (``Flow.Metric``, ``Port.Metric``)
FLOW_COLUMNS = ("transmit", "frames_tx", "frames_rx", "bytes_tx", "bytes_rx", "frames_tx_rate", "frames_rx_rate",
                "loss", "tx_l1_rate_bps", "rx_l1_rate_bps", "tx_rate_bytes", "rx_rate_bytes", "tx_rate_bps",
                "rx_rate_bps", "tx_rate_kbps", "rx_rate_kbps", "tx_rate_mbps", "rx_rate_mbps")
PORT_COLUMNS = ("transmit", "location", "link", "frames_tx", "frames_rx", "bytes_tx", "bytes_rx",
                "frames_tx_rate", "frames_rx_rate", "bytes_tx_rate", "bytes_rx_rate", "speed")
_NAME_RE = re.compile(r"^[\sa-zA-Z0-9-_()><\[\]]+$")  # Port.name's pattern in the OpenAPI document
_LOC_RE = re.compile(r"^(?P<srv>[a-z][a-z0-9-]{0,40}):(?P<kind>eth|nic|gpu)(?P<idx>\d{1,3})$")
#: packets per path-engine run of a continuous or fixed-seconds flow (counters move per chunk)
CHUNK_S = 0.5


class OtgError(Exception):
    """A request the API answers with its ``Error`` object: ``status`` (400 malformed or
    unknown name, 401/403 token, 409 busy, 501 not implemented by railab, 500 engine failure),
    ``kind`` (``validation`` or ``internal``) and ``errors`` (one line each)."""

    def __init__(self, status: int, *errors: str, kind: str = "validation") -> None:
        super().__init__("; ".join(errors))
        self.status = status
        self.errors = list(errors)
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """The ``Error`` object (``components.schemas.Error``)."""
        return {"code": self.status, "kind": self.kind, "errors": self.errors}


def unsupported(what: str) -> OtgError:
    """501: ``what`` is in the OTG API but railab does not do it."""
    return OtgError(501, f"{what}: not implemented by railab's OTG server (docs/otg.md lists what is)")


# ---- the lab's units --------------------------------------------------------------------------
@dataclass(frozen=True)
class Units:
    """The lab's units: ``time_scale`` lab seconds per fabric second (1 without
    ``qos.capacity``), ``fabric_gbps`` the line rate a port stands for (None: no line rate)."""

    time_scale: float = 1.0
    fabric_gbps: float | None = None

    @classmethod
    def of(cls, spec: LabSpec) -> Units:
        """From ``spec.qos.capacity`` (enabled: its time scale and fabric rate)."""
        cap = spec.qos.capacity
        if getattr(cap, "enabled", False):
            return cls(time_scale=float(cap.time_scale), fabric_gbps=float(cap.fabric_rate_gbps))
        return cls()

    def lab_pps(self, rate: dict[str, Any], frame: int) -> float:
        """An OTG ``Flow.Rate`` (fabric units) as lab packets/s for frames of ``frame`` bytes.
        501 for ``percentage`` on a lab without a line rate; 400 for a rate <= 0."""
        choice = rate.get("choice", "pps")
        if choice == "pps":
            fabric_pps = float(rate.get("pps", 1000))
        elif choice in ("bps", "kbps", "mbps", "gbps"):
            mult = {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}[choice]
            fabric_pps = float(rate.get(choice, 0)) * mult / ((frame + L1_EXTRA) * 8)
        elif choice == "percentage":
            if self.fabric_gbps is None:
                raise unsupported("rate.percentage on a lab without qos.capacity (no line rate; use pps)")
            pct = float(rate.get("percentage", 100))
            if not 0 < pct <= 100:
                raise OtgError(400, f"rate.percentage {pct:g} is not in (0, 100]")
            fabric_pps = pct / 100 * self.fabric_gbps * 1e9 / ((frame + L1_EXTRA) * 8)
        else:
            raise OtgError(400, f"rate.choice {choice!r} is not one of pps, bps, kbps, mbps, gbps, percentage")
        if not fabric_pps > 0:
            raise OtgError(400, f"flow rate must be > 0 (got {fabric_pps:g} packets/s)")
        line_pps = (self.fabric_gbps * 1e9 / ((frame + L1_EXTRA) * 8)) if self.fabric_gbps else None
        if line_pps is not None and fabric_pps > line_pps * (1 + 1e-9):
            raise OtgError(400, f"flow rate {fabric_pps:.6g} packets/s of {frame}-byte frames is over the "
                                f"port's line rate ({self.fabric_gbps:g} Gb/s: {line_pps:.6g} packets/s)")
        if fabric_pps / self.time_scale > MAX_LAB_PPS:
            raise OtgError(400, f"flow rate {fabric_pps:.6g} packets/s is {fabric_pps / self.time_scale:.6g} lab "
                                f"packets/s, over railab's {MAX_LAB_PPS:g} (lower its rate)")
        return fabric_pps / self.time_scale

    def speed_kbps(self) -> int:
        """``Port.Metric.speed`` (KBps, the API's unit) of the fabric's line; 0 without one."""
        return int(self.fabric_gbps * 1e6 / 8) if self.fabric_gbps else 0


# ---- the parsed configuration -----------------------------------------------------------------
@dataclass
class PortSpec:
    """A configured port: ``name``, ``location`` as given, the server and its 1-based NIC."""

    name: str
    location: str
    server: str
    nic: int
    #: a switch port (``g1-leaf1:eth5``, a fabric link's end): ``server`` is the switch, ``nic``
    #: 0; it carries no test traffic, only link events (control state port link down / up)
    switch_port: str | None = None

    @property
    def interface(self) -> str:
        """The port's interface: ``eth<nic>`` on the server, or the switch port."""
        return self.switch_port or f"eth{self.nic}"


@dataclass
class FlowSpec:
    """A configured flow: ``tx``/``rx`` port names, ``frame`` bytes (with FCS), ``pps`` lab
    packets/s, ``packets`` (None: by ``seconds`` or continuous), ``seconds`` lab seconds (None),
    ``continuous``."""

    name: str
    tx: str
    rx: str
    frame: int
    payload: int
    pps: float
    packets: int | None = None
    seconds: float | None = None
    continuous: bool = False
    #: a flow without a receive port: its frames exactly as configured (:class:`RawHeaders`),
    #: sent from the tx NIC with a raw socket; nothing is counted at a receiver
    raw: RawHeaders | None = None
    #: a RoCEv2 flow (``config.stateful_flows.rocev2``): its QP on the load engine
    roce: RoceFlow | None = None
    #: the UDP source port its packets carry (``udp.src_port``, a fixed value: the ECMP
    #: entropy, so a script aims the flow at a path); None: its QP pair's own
    sport: int | None = None


@dataclass
class RoceFlow:
    """A RoCEv2 flow of ``stateful_flows.rocev2``: the QP's name, the source and destination
    (server, 0-based GPU), the message ``bytes``, the tx port's target line rate (percent of
    line) and whether DCQCN is on (``options.per_port_options[].protocols[].rocev2``)."""

    qp: str
    src: tuple[str, int]
    dst: tuple[str, int]
    bytes: int
    line_pct: float
    dcqcn: bool


@dataclass
class RawHeaders:
    """The headers of a tx-only flow, field by field: each field a list of values the frames
    cycle through (OTG's value / values / increment / decrement patterns); None for a field
    left to the port (``eth_src``: the NIC's MAC, ``eth_dst``: the gateway's, ``ip_src``: the
    NIC's address). ``custom``: bytes after the headers; ``frame``: bytes without FCS."""

    eth_src: list[str] | None = None
    eth_dst: list[str] | None = None
    ip_src: list[str] | None = None
    ip_dst: list[str] | None = None
    sport: list[int] | None = None
    dport: list[int] | None = None
    custom: bytes = b""
    kinds: tuple[str, ...] = ()
    frame: int = 60

    def cycle(self) -> int:
        """How many distinct frames the patterns make (the lcm of their lengths)."""
        import math

        n = 1
        for v in (self.eth_src, self.eth_dst, self.ip_src, self.ip_dst, self.sport, self.dport):
            if v:
                n = math.lcm(n, len(v))
        return n


def _pattern_values(obj: Any, where: str, kind: str) -> list | None:
    """All values of an OTG pattern: ``value``, ``values``, ``increment`` / ``decrement``
    (``start``, ``step``, ``count``; integers, IPv4 addresses and MACs); None when unset.
    501 for ``random``, ``auto`` and metric tags."""
    import ipaddress

    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise OtgError(400, f"{where} must be an object")
    if obj.get("metric_tags"):
        raise unsupported(f"{where}.metric_tags")
    choice = obj.get("choice", "value")
    if choice == "value":
        return [obj.get("value")] if obj.get("value") is not None else None
    if choice == "values":
        vals = list(obj.get("values") or [])
        if not vals:
            raise OtgError(400, f"{where}.values is empty")
        return vals
    if choice in ("increment", "decrement"):
        inc = obj.get(choice) or {}
        start, step, count = inc.get("start"), inc.get("step", 1), inc.get("count", 1)
        if start is None or not isinstance(count, int) or not 1 <= count <= 1024:
            raise OtgError(400, f"{where}.{choice}: start is required and count must be 1-1024")
        sign = 1 if choice == "increment" else -1
        if isinstance(start, int):
            return [start + sign * i * int(step) for i in range(count)]
        try:
            if ":" in str(start):  # a MAC
                a, st_ = int(str(start).replace(":", ""), 16), int(str(step).replace(":", ""), 16)
                return [":".join(f"{(a + sign * i * st_) & (2**48 - 1):012x}"[k:k + 2] for k in range(0, 12, 2))
                        for i in range(count)]
            a, st_ = int(ipaddress.IPv4Address(start)), int(ipaddress.IPv4Address(step))
            return [str(ipaddress.IPv4Address((a + sign * i * st_) & 0xFFFFFFFF)) for i in range(count)]
        except (ValueError, TypeError):
            raise OtgError(400, f"{where}.{choice}: start/step {start!r}/{step!r} are not numbers, "
                                "IPv4 addresses or MACs") from None
    raise unsupported(f"{where}.{choice}")


_RAW_HEADERS_OK = ("ethernet", "ipv4", "udp", "custom")


def _parse_raw(where: str, packet: list, frame: int) -> RawHeaders:
    """The headers of a tx-only flow (:class:`RawHeaders`): Ethernet, IPv4, UDP, custom in that
    order; 501 for other headers, 400 for malformed ones or headers longer than the frame."""
    import ipaddress

    raw = RawHeaders(frame=frame - 4)
    kinds = []
    for j, h in enumerate(packet):
        if not isinstance(h, dict):
            raise OtgError(400, f"{where}: packet[{j}] must be an object")
        kind = h.get("choice")
        if kind not in FLOW_HEADER_CHOICES:
            raise OtgError(400, f"{where}: packet[{j}].choice {str(kind)[:30]!r} is not an OTG flow header")
        if kind not in _RAW_HEADERS_OK:
            raise unsupported(f"{where}: packet[{j}] header {kind} (a tx-only flow sends Ethernet / IPv4 / UDP / "
                              "custom)")
        kinds.append(kind)
        hw = f"{where} packet[{j}].{kind}"
        body = h.get(kind) or {}
        if not isinstance(body, dict):
            raise OtgError(400, f"{hw} must be an object")
        if kind == "ethernet":
            raw.eth_src = _pattern_values(body.get("src"), f"{hw}.src", "mac")
            raw.eth_dst = _pattern_values(body.get("dst"), f"{hw}.dst", "mac")
            for v in (raw.eth_src or []) + (raw.eth_dst or []):
                if not isinstance(v, str) or not re.fullmatch(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}", v):
                    raise OtgError(400, f"{hw}: {str(v)[:30]!r} is not a MAC address")
        elif kind == "ipv4":
            raw.ip_src = _pattern_values(body.get("src"), f"{hw}.src", "ipv4")
            raw.ip_dst = _pattern_values(body.get("dst"), f"{hw}.dst", "ipv4")
            for v in (raw.ip_src or []) + (raw.ip_dst or []):
                try:
                    ipaddress.IPv4Address(v)
                except (ValueError, TypeError):
                    raise OtgError(400, f"{hw}: {str(v)[:30]!r} is not an IPv4 address") from None
        elif kind == "udp":
            raw.sport = _pattern_values(body.get("src_port"), f"{hw}.src_port", "int")
            raw.dport = _pattern_values(body.get("dst_port"), f"{hw}.dst_port", "int")
            for v in (raw.sport or []) + (raw.dport or []):
                if not isinstance(v, int) or not 0 <= v <= 65535:
                    raise OtgError(400, f"{hw}: {str(v)[:30]!r} is not a UDP port")
        elif kind == "custom":
            try:
                raw.custom += bytes.fromhex(body.get("bytes") or "")
            except ValueError:
                raise OtgError(400, f"{hw}.bytes is not a hex string") from None
    order = [k for k in _RAW_HEADERS_OK if k in kinds]
    if kinds != order or (kinds and kinds[0] != "ethernet") or ("udp" in kinds and "ipv4" not in kinds):
        raise OtgError(400, f"{where}: headers {'/'.join(kinds)} are not ethernet [/ ipv4 [/ udp]] [/ custom]")
    if not raw.ip_dst and "ipv4" in kinds:
        raise OtgError(400, f"{where}: a flow without rx port needs ipv4.dst (where its frames go)")
    raw.kinds = tuple(kinds)
    head = 14 + (20 if "ipv4" in kinds else 0) + (8 if "udp" in kinds else 0) + len(raw.custom)
    if head > raw.frame:
        raise OtgError(400, f"{where}: headers and custom bytes ({head} bytes) do not fit a {frame}-byte frame")
    if raw.cycle() > 4096:
        raise unsupported(f"{where}: header patterns making {raw.cycle()} distinct frames (at most 4096)")
    return raw


@dataclass
class FlowCounters:
    """What a flow did since its last start: frames and bytes, ``hops`` (TTL) and the expected
    hop count, lab seconds from start to the last counted packet, and whether it runs."""

    frames_tx: int = 0
    frames_rx: int = 0
    bytes_tx: int = 0
    bytes_rx: int = 0
    started: float | None = None
    ended: float | None = None
    running: bool = False
    hops: int | None = None
    expected_hops: int | None = None
    error: str | None = None
    #: a RoCEv2 flow: its QP's record from the load run (:attr:`railab.traffic.load.LoadResult.flows`)
    qp: dict | None = None
    #: a probe stream (data-plane events on): its outages (railab.traffic.stream.Outage dicts,
    #: monotonic s) once stopped
    outages: list[dict] | None = None

    #: lab seconds the engine spent on the flow's packets (first sent to last received, summed
    #: over its runs): what its rates are measured over
    active_s: float = 0.0

    def seconds(self) -> float:
        """Lab seconds the rates are measured over: the engine's time on the flow, else (no
        packet counted yet) the time since start; 0 before any start."""
        if self.active_s > 0:
            return self.active_s
        if self.started is None:
            return 0.0
        return max((self.ended or time.monotonic()) - self.started, 1e-9)


def _str(obj: dict, key: str, where: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v:
        raise OtgError(400, f"{where}: {key} must be a non-empty string")
    return v


def _pattern_value(obj: Any, where: str) -> str | int | None:
    """The single value of an OTG pattern (``{"choice": "value", "value": X}``); None when the
    field is not set; 501 for value lists, increments, random and metric tags."""
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise OtgError(400, f"{where} must be an object")
    choice = obj.get("choice", "value")
    if choice in ("value", "auto") and not obj.get("metric_tags"):
        return obj.get("value")
    raise unsupported(f"{where}.{choice if not obj.get('metric_tags') else 'metric_tags'}")


class Lab:
    """A running lab as the OTG server sees it: name, ``spec``, namespaces, lab directory."""

    def __init__(self, lab: str) -> None:
        if lab not in st.labs():
            raise UsageError(f"no lab {lab!r} is up on this host ({st.running_labs()})")
        ref = resolve(lab)
        self.record = ref.require_up()
        self.name = lab
        self.spec = ref.spec()
        self.labdir = ref.labdir
        self.netns_of = ref.netns_of
        self.units = Units.of(self.spec)

    def switch_port(self, location: Any) -> tuple[str, str] | None:
        """``g1-leaf1:eth5`` -> (switch, port) when it is a switch's end of one of the lab's
        links (a leaf uplink, a leaf's server port, a spine port); None otherwise."""
        if not isinstance(location, str) or location.count(":") != 1:
            return None
        node, port = location.strip().split(":")
        roles = {n.name: n.role for n in self.spec.nodes}
        if roles.get(node) in (None, "server"):
            return None
        for ln in self.spec.links:
            for e in (ln.a, ln.b):
                if (e.node, e.interface) == (node, port):
                    return node, port
        return None

    def locate(self, location: str, where: str) -> tuple[str, int]:
        """``srv1:eth1`` / ``srv1:nic1`` (1-based) / ``srv1:gpu0`` (0-based) -> (server, NIC);
        400 naming the lab's servers and NICs otherwise."""
        m = _LOC_RE.match(location.strip()) if isinstance(location, str) else None
        servers = [n.name for n in self.spec.by_role("server")]
        g = self.spec.gpus_per_server
        hint = (f"lab {self.name} has servers {servers[0]}..{servers[-1]} with NICs eth1..eth{g}"
                f" (or gpu0..gpu{g - 1})" if servers else f"lab {self.name} has no servers")
        if not m:
            raise OtgError(400, f"{where}: location {str(location)[:60]!r} is not SERVER:ethN, SERVER:nicN or "
                                f"SERVER:gpuN; {hint}")
        nic = int(m["idx"]) + (1 if m["kind"] == "gpu" else 0)
        try:
            self.spec.nic(m["srv"], nic)
        except KeyError:
            raise OtgError(400, f"{where}: location {location!r} is not a NIC of lab {self.name}; {hint}") from None
        return m["srv"], nic


_CONFIG_KEYS_501 = ("lags", "layer1", "captures", "lldp", "egress_only_tracking")


def parse_config(lab: Lab, cfg: Any) -> tuple[dict[str, PortSpec], dict[str, FlowSpec], list[str]]:
    """Check an OTG ``Config`` (``paths./config.post``) against the lab: ports, devices, flows.

    Returns (ports by name, flows by name, warnings). Raises OtgError 400 for a malformed config
    or a name or location that does not exist, 501 for what railab does not do."""
    if not isinstance(cfg, dict):
        raise OtgError(400, "the config must be a JSON object (OTG Config)")
    warnings: list[str] = []
    for key in _CONFIG_KEYS_501:
        if cfg.get(key):
            raise unsupported(f"config.{key}")
    dp_events = _parse_events(cfg.get("events"))
    ports: dict[str, PortSpec] = {}
    taken: dict[tuple[str, int], str] = {}
    for i, p in enumerate(cfg.get("ports") or []):
        where = f"ports[{i}]"
        if not isinstance(p, dict):
            raise OtgError(400, f"{where} must be an object")
        name = _str(p, "name", where)
        if not _NAME_RE.match(name):
            raise OtgError(400, f"{where}: name {name[:40]!r} does not match the API's name pattern")
        if name in ports:
            raise OtgError(400, f"{where}: port name {name!r} is used twice")
        sw = lab.switch_port(p.get("location"))
        if sw is not None:
            key: tuple = sw
        else:
            key = lab.locate(p.get("location"), f"port {name}")
        if key in taken:
            raise OtgError(400, f"port {name}: location {p.get('location')!r} is also port {taken[key]!r}")
        taken[key] = name
        ports[name] = (PortSpec(name, p["location"], sw[0], 0, switch_port=sw[1]) if sw is not None
                       else PortSpec(name, p["location"], key[0], key[1]))
    # devices: Ethernet and IPv4 on a port; the lab's addresses are the device's
    ipv4_port: dict[str, str] = {}  # device / ethernet / ipv4 names usable as flow endpoints
    for i, d in enumerate(cfg.get("devices") or []):
        where = f"devices[{i}]"
        if not isinstance(d, dict):
            raise OtgError(400, f"{where} must be an object")
        dname = _str(d, "name", where)
        extra = sorted(k for k, v in d.items() if k not in ("name", "ethernets", "rocev2") and v)
        if extra:
            raise unsupported(f"device {dname}: {', '.join(extra)} (railab's devices are the lab's NICs: "
                              "Ethernet and IPv4 only; BGP runs on the lab's switches)")
        for j, e in enumerate(d.get("ethernets") or []):
            ew = f"device {dname} ethernets[{j}]"
            if not isinstance(e, dict):
                raise OtgError(400, f"{ew} must be an object")
            ename = _str(e, "name", ew)
            conn = e.get("connection") or {}
            pname = conn.get("port_name") or e.get("port_name")
            if pname not in ports:
                raise OtgError(400, f"{ew}: connection.port_name {str(pname)[:40]!r} is not a configured port")
            if e.get("vlans") or e.get("ipv6_addresses"):
                raise unsupported(f"{ew}: vlans / ipv6_addresses")
            port = ports[pname]
            if port.switch_port:
                raise OtgError(400, f"{ew}: port {pname} is a switch port ({port.location}): devices sit on "
                                    "server NICs")
            nic = lab.spec.nic(port.server, port.nic)
            ipv4_port[ename] = pname
            mac = e.get("mac")
            if mac:
                warnings.append(f"{ew}: mac {mac} is not used: the lab's NIC {port.server}:{port.interface} "
                                "keeps its MAC")
            for k, a in enumerate(e.get("ipv4_addresses") or []):
                aw = f"{ew} ipv4_addresses[{k}]"
                if not isinstance(a, dict):
                    raise OtgError(400, f"{aw} must be an object")
                aname = _str(a, "name", aw)
                ipv4_port[aname] = pname
                addr, gw = a.get("address"), a.get("gateway")
                if addr and addr != str(nic.address.ip):
                    warnings.append(f"{aw}: address {addr} replaced by the lab's {nic.address.ip} on "
                                    f"{port.server}:{port.interface} (the fabric routes by the lab's addresses)")
                if gw and gw != str(nic.gateway):
                    warnings.append(f"{aw}: gateway {gw} replaced by the lab's {nic.gateway} ({nic.leaf})")
            ipv4_port.setdefault(dname, pname)
    qps = _parse_rocev2_devices(lab, cfg.get("devices") or [], ports, ipv4_port)
    rocev2, w = _parse_stateful_flows(lab, cfg, ports, qps)
    warnings.extend(w)
    flows: dict[str, FlowSpec] = {}
    for i, f in enumerate(cfg.get("flows") or []):
        fl, w = _parse_flow(lab, f, i, ports, ipv4_port)
        if fl.name in flows or fl.name in rocev2:
            raise OtgError(400, f"flows[{i}]: flow name {fl.name!r} is used twice")
        flows[fl.name] = fl
        warnings.extend(w)
    flows.update(rocev2)
    if flows:
        u = lab.units
        warnings.append(f"rates are the fabric's ({u.fabric_gbps:g} Gb/s ports): lab rate x time scale "
                        f"{u.time_scale:g}" if u.fabric_gbps else
                        "this lab has no qos.capacity: time scale 1, rates are the lab's own")
    for fl in flows.values():
        _no_switch_port(ports, [fl.tx, fl.rx] if fl.rx else [fl.tx], f"flow {fl.name}")
    return ports, flows, warnings, dp_events


def _no_switch_port(ports: dict[str, PortSpec], names: list[str], where: str) -> None:
    """400 when a flow names a switch port (link events only, no test traffic)."""
    for pn in names:
        if ports[pn].switch_port:
            raise OtgError(400, f"{where}: port {pn} is a switch port ({ports[pn].location}): it carries no test "
                                "traffic, only link events")


def _parse_events(ev: Any) -> bool:
    """``config.events`` (``Event``): True when data-plane events are on (``dp_events.enable``:
    continuous flows then run as timestamped probe streams and answer convergence metrics);
    501 for control-plane events."""
    if not ev:
        return False
    if not isinstance(ev, dict):
        raise OtgError(400, "events must be an object (Event)")
    if (ev.get("cp_events") or {}).get("enable"):
        raise unsupported("events.cp_events (control-plane event timestamps)")
    return bool((ev.get("dp_events") or {}).get("enable"))


_HEADERS_OK = ("ethernet", "ipv4", "udp")


def _parse_flow(lab: Lab, f: Any, i: int, ports: dict[str, PortSpec],
                ipv4_port: dict[str, str]) -> tuple[FlowSpec, list[str]]:
    where = f"flows[{i}]"
    if not isinstance(f, dict):
        raise OtgError(400, f"{where} must be an object")
    name = _str(f, "name", where)
    where = f"flow {name}"
    warnings: list[str] = []
    for key in ("egress_packet",):
        if f.get(key):
            raise unsupported(f"{where}: {key}")
    txrx = f.get("tx_rx")
    if not isinstance(txrx, dict):
        raise OtgError(400, f"{where}: tx_rx is required (port or device)")
    choice = txrx.get("choice", "port")
    if choice == "port":
        pr = txrx.get("port") or {}
        tx = pr.get("tx_name")
        rx_names = list(pr.get("rx_names") or []) or ([pr["rx_name"]] if pr.get("rx_name") else [])
        for n in [tx, *rx_names]:
            if n not in ports:
                raise OtgError(400, f"{where}: tx_rx.port names {str(n)[:40]!r}, not a configured port")
        _no_switch_port(ports, [tx, *rx_names], where)
        if not rx_names:
            return _parse_raw_flow(lab, f, where, name, tx)
    elif choice == "device":
        dv = txrx.get("device") or {}
        if dv.get("mode", "mesh") not in ("mesh", "one_to_one"):
            raise OtgError(400, f"{where}: tx_rx.device.mode must be mesh or one_to_one")
        txs, rxs = list(dv.get("tx_names") or []), list(dv.get("rx_names") or [])
        for n in txs + rxs:
            if n not in ipv4_port:
                raise OtgError(400, f"{where}: tx_rx.device names {str(n)[:40]!r}, not a configured device, "
                                    "ethernet or ipv4 name")
        if len(txs) != 1 or len(rxs) != 1:
            raise unsupported(f"{where}: tx_rx.device with {len(txs)} tx and {len(rxs)} rx names "
                              "(one of each per flow)")
        if dv.get("bidirectional"):
            raise unsupported(f"{where}: tx_rx.device.bidirectional")
        tx, rx_names = ipv4_port[txs[0]], [ipv4_port[rxs[0]]]
    else:
        raise OtgError(400, f"{where}: tx_rx.choice {choice!r} is not port or device")
    if len(rx_names) != 1:
        raise unsupported(f"{where}: {len(rx_names)} rx ports (one per flow: make one flow per receiver)")
    rx = rx_names[0]
    _no_switch_port(ports, [tx, rx], where)
    if rx == tx:
        raise OtgError(400, f"{where}: tx and rx are the same port {tx!r}")
    # headers
    src_nic, dst_nic = lab.spec.nic(ports[tx].server, ports[tx].nic), lab.spec.nic(ports[rx].server, ports[rx].nic)
    packet = f.get("packet") or []
    if not isinstance(packet, list):
        raise OtgError(400, f"{where}: packet must be a list of headers")
    kinds = []
    sport = None
    for j, h in enumerate(packet):
        if not isinstance(h, dict):
            raise OtgError(400, f"{where}: packet[{j}] must be an object")
        kind = h.get("choice")
        if kind not in FLOW_HEADER_CHOICES:
            raise OtgError(400, f"{where}: packet[{j}].choice {str(kind)[:30]!r} is not an OTG flow header")
        if kind not in _HEADERS_OK:
            raise unsupported(f"{where}: packet[{j}] header {kind} (railab sends Ethernet / IPv4 / UDP, "
                              "a RoCEv2 frame)")
        kinds.append(kind)
        hw = f"{where} packet[{j}].{kind}"
        body = h.get(kind) or {}
        if not isinstance(body, dict):
            raise OtgError(400, f"{hw} must be an object")
        if kind == "ethernet":
            for fld in ("src", "dst"):
                v = _pattern_value(body.get(fld), f"{hw}.{fld}")
                if v is not None:
                    warnings.append(f"{hw}.{fld} {v} replaced: frames leave with the NIC's MAC and the leaf's "
                                    "(the lab's ARP)")
        elif kind == "ipv4":
            want = {"src": str(src_nic.address.ip), "dst": str(dst_nic.address.ip)}
            for fld, lab_v in want.items():
                v = _pattern_value(body.get(fld), f"{hw}.{fld}")
                if v is not None and v != lab_v:
                    warnings.append(f"{hw}.{fld} {v} replaced by the lab's {lab_v} (the fabric routes by the "
                                    "lab's addresses)")
            for fld in ("priority", "time_to_live"):
                if body.get(fld):
                    warnings.append(f"{hw}.{fld} is not used: the lab's QoS profile sets DSCP/ECN, TTL is 64")
        elif kind == "udp":
            v = _pattern_value(body.get("src_port"), f"{hw}.src_port")
            if v is not None:  # the ECMP entropy: the packets carry it, so a script aims the flow at a path
                if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535:
                    raise OtgError(400, f"{hw}.src_port {str(v)[:20]!r} is not a UDP port 1-65535")
                sport = v
            v = _pattern_value(body.get("dst_port"), f"{hw}.dst_port")
            if v is not None and v != 4791:
                warnings.append(f"{hw}.dst_port {v} replaced: RoCEv2 goes to UDP 4791")
    if kinds and kinds != list(_HEADERS_OK[:len(kinds)]):
        raise OtgError(400, f"{where}: headers {'/'.join(kinds)} are not in the order ethernet / ipv4 / udp")
    if f.get("payload"):
        raise unsupported(f"{where}: payload")
    # size
    size = f.get("size") or {"choice": "fixed", "fixed": 64}
    if size.get("choice", "fixed") != "fixed":
        raise unsupported(f"{where}: size.{size.get('choice')} (fixed sizes only)")
    frame = size.get("fixed", 64)
    if not isinstance(frame, int) or not MIN_FRAME <= frame <= MAX_FRAME:
        raise OtgError(400, f"{where}: size.fixed must be an integer {MIN_FRAME}-{MAX_FRAME} bytes")
    payload = (frame - FRAME_OVERHEAD) // 4 * 4  # RoCEv2 pads the payload to 4 bytes
    sent = FRAME_OVERHEAD + payload
    if sent != frame:
        warnings.append(f"{where}: frames are {sent} bytes, not {frame} (RoCEv2 pads its payload to a multiple "
                        "of 4 bytes; sizes 62 + 4k are exact)")
    fs = FlowSpec(name, tx, rx, sent, payload, 0.0, sport=sport)
    _rate_duration(lab, f, where, fs)
    return fs, warnings


def _rate_duration(lab: Lab, f: dict, where: str, fs: FlowSpec) -> None:
    """Fill ``fs.pps`` (lab packets/s), ``packets`` / ``seconds`` (lab s) / ``continuous``
    from the flow's ``rate``, ``duration`` and ``metrics``; 400 / 501 as the API says."""
    fs.pps = lab.units.lab_pps(f.get("rate") or {"choice": "pps", "pps": 1000}, fs.frame)
    dur = f.get("duration") or {"choice": "continuous"}
    dchoice = dur.get("choice", "continuous")
    if dchoice == "fixed_packets":
        n = (dur.get("fixed_packets") or {}).get("packets", 1)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_FLOW_PACKETS:
            raise OtgError(400, f"{where}: duration.fixed_packets.packets must be an integer in 1.."
                                f"{MAX_FLOW_PACKETS:,}")
        fs.packets = n
    elif dchoice == "fixed_seconds":
        s = (dur.get("fixed_seconds") or {}).get("seconds", 1.0)
        if not isinstance(s, (int, float)) or s <= 0:
            raise OtgError(400, f"{where}: duration.fixed_seconds.seconds must be > 0")
        fs.seconds = float(s) * lab.units.time_scale
        if fs.seconds > 600:
            raise OtgError(400, f"{where}: {s:g} fabric s is {fs.seconds:g} lab s at time scale "
                                f"{lab.units.time_scale:g} (at most 600)")
    elif dchoice == "continuous":
        fs.continuous = True
    elif dchoice == "burst":
        raise unsupported(f"{where}: duration.burst")
    else:
        raise OtgError(400, f"{where}: duration.choice {dchoice!r} is not an OTG duration")
    delay = (dur.get(dchoice) or {}).get("delay") or {}
    if any(v for k, v in delay.items() if k != "choice"):
        raise unsupported(f"{where}: duration.{dchoice}.delay")
    met = f.get("metrics") or {}
    if (met.get("latency") or {}).get("enable"):
        raise unsupported(f"{where}: metrics.latency (the path engine does not timestamp frames)")
    if met.get("timestamps"):
        raise unsupported(f"{where}: metrics.timestamps")
    if met.get("predefined_metric_tags"):
        raise unsupported(f"{where}: metrics.predefined_metric_tags")


def _parse_raw_flow(lab: Lab, f: dict, where: str, name: str, tx: str) -> tuple[FlowSpec, list[str]]:
    """A flow with a tx port only: its frames exactly as configured (:func:`_parse_raw`),
    fixed size 64-9000 bytes; nothing counted at a receiver (a warning says so)."""
    packet = f.get("packet") or []
    if not isinstance(packet, list):
        raise OtgError(400, f"{where}: packet must be a list of headers")
    if f.get("payload"):
        raise unsupported(f"{where}: payload")
    size = f.get("size") or {"choice": "fixed", "fixed": 64}
    if size.get("choice", "fixed") != "fixed":
        raise unsupported(f"{where}: size.{size.get('choice')} (fixed sizes only)")
    frame = size.get("fixed", 64)
    if not isinstance(frame, int) or not MIN_FRAME <= frame <= 9000:
        raise OtgError(400, f"{where}: size.fixed must be an integer {MIN_FRAME}-9000 bytes")
    raw = _parse_raw(where, packet, frame)
    fs = FlowSpec(name, tx, "", frame, 0, 0.0, raw=raw)
    _rate_duration(lab, f, where, fs)
    return fs, [f"{where}: no rx port: its frames leave {tx} exactly as configured and nothing counts them "
                "at a receiver (frames_rx stays 0; give tx_rx.port.rx_names to measure delivery)"]


_UNIT_BYTES = {"bytes": 1, "kb": 1024, "mb": 1024 ** 2, "gb": 1024 ** 3}


def _nic_by_address(lab: Lab, addr: Any):
    for nic in lab.spec.nics:
        if str(nic.address.ip) == addr:
            return nic
    return None


def _parse_rocev2_devices(lab: Lab, devices: list, ports: dict[str, PortSpec],
                          ipv4_port: dict[str, str]) -> dict[str, tuple[str, Any]]:
    """``devices[].rocev2.ipv4_interfaces[].peers[].qps[]`` (``Device.Rocev2Peer``): QP name ->
    (tx port name, the destination NIC). 400 for an unknown ipv4_name, a destination that is no
    NIC of the lab, a QP name used twice; 501 for IPv6 interfaces."""
    qps: dict[str, tuple[str, Any]] = {}
    for d in devices:
        r = d.get("rocev2") if isinstance(d, dict) else None
        if not r:
            continue
        where = f"device {d.get('name')} rocev2"
        if r.get("ipv6_interfaces"):
            raise unsupported(f"{where}.ipv6_interfaces")
        for itf in r.get("ipv4_interfaces") or []:
            pname = ipv4_port.get(itf.get("ipv4_name"))
            if pname is None:
                raise OtgError(400, f"{where}: ipv4_name {str(itf.get('ipv4_name'))[:40]!r} is not an ipv4 address "
                                    "of a configured device")
            for peer in itf.get("peers") or []:
                nic = _nic_by_address(lab, peer.get("destination_ip_address"))
                if nic is None:
                    raise OtgError(400, f"{where} peer {peer.get('name')}: destination_ip_address "
                                        f"{str(peer.get('destination_ip_address'))[:40]!r} is no NIC of lab {lab.name}")
                for qp in peer.get("qps") or []:
                    name = qp.get("qp_name")
                    if not isinstance(name, str) or not name or name in qps:
                        raise OtgError(400, f"{where}: qp_name {str(name)[:40]!r} is missing or used twice")
                    ct = (qp.get("connection_type") or {}).get("choice", "reliable_connection")
                    if ct != "reliable_connection":
                        raise unsupported(f"{where} qp {name}: connection_type {ct}")
                    qps[name] = (pname, nic)
    return qps


def _parse_stateful_flows(lab: Lab, cfg: dict, ports: dict[str, PortSpec],
                          qps: dict[str, tuple[str, Any]]) -> tuple[dict[str, FlowSpec], list[str]]:
    """``stateful_flows.rocev2[].tx_ports[].transmit_type.target_line_rate.flows[]``
    (``Rocev2.Flow``) as :class:`FlowSpec` with a :class:`RoceFlow`: RDMA WRITE messages of
    ``message_size`` on the load engine; DCQCN from ``options.per_port_options``. 400 for
    unknown names, 501 for other verbs, a lab without ``qos.capacity``, mixed DCQCN."""
    sf = cfg.get("stateful_flows")
    if not sf:
        return {}, []
    if not isinstance(sf, dict) or sf.get("choice", "rocev2") != "rocev2":
        raise OtgError(400, "stateful_flows.choice must be rocev2")
    if lab.units.fabric_gbps is None:
        raise unsupported("stateful_flows.rocev2 on a lab without qos.capacity (the load engine needs the lab's "
                          "port rates, ECN and PFC: e.g. mini-lossless)")
    dcqcn_of: dict[str, bool] = {}
    warnings: list[str] = []
    for ppo in (cfg.get("options") or {}).get("per_port_options") or []:
        pname = ppo.get("port_name")
        if pname not in ports:
            raise OtgError(400, f"options.per_port_options: port_name {str(pname)[:40]!r} is not a configured port")
        for pr in ppo.get("protocols") or []:
            if pr.get("choice") != "rocev2":
                raise unsupported(f"options.per_port_options protocol {pr.get('choice')}")
            rs = pr.get("rocev2") or {}
            dc = rs.get("dcqcn_settings") or {}
            dcqcn_of[pname] = bool(dc.get("enable_dcqcn"))
            if dcqcn_of[pname] and len(dc) > 1:
                warnings.append(f"port {pname}: DCQCN's constants are the lab's qos.dcqcn profile (docs/congestion.md),"
                                " not the config's dcqcn_settings values")
    flows: dict[str, FlowSpec] = {}
    for k, group in enumerate(sf.get("rocev2") or []):
        for tp in group.get("tx_ports") or []:
            pname = tp.get("port_name")
            if pname not in ports:
                raise OtgError(400, f"stateful_flows.rocev2[{k}]: tx port {str(pname)[:40]!r} is not a configured port")
            tt = tp.get("transmit_type") or {}
            tlr = tt.get("target_line_rate") or {}
            pct = float(tlr.get("value", 98))
            if not 0 < pct <= 100:
                raise OtgError(400, f"port {pname}: target_line_rate {pct:g} is not in (0, 100]")
            for fl in tlr.get("flows") or []:
                name = fl.get("name")
                where = f"rocev2 flow {name}"
                if not isinstance(name, str) or not name or name in flows:
                    raise OtgError(400, f"{where}: name is missing or used twice")
                qp = fl.get("tx_endpoint")
                if qp not in qps:
                    raise OtgError(400, f"{where}: tx_endpoint {str(qp)[:40]!r} is not a configured qp_name")
                qport, dst_nic = qps[qp]
                if qport != pname:
                    raise OtgError(400, f"{where}: qp {qp} is on port {qport}, not on tx port {pname}")
                rx = fl.get("rx_endpoint")
                if rx in qps:
                    rx = qps[rx][0]
                if rx not in ports:
                    raise OtgError(400, f"{where}: rx_endpoint {str(rx)[:40]!r} is not a configured port or qp_name")
                rp = ports[rx]
                if (rp.server, rp.nic) != (dst_nic.server, dst_nic.nic):
                    raise OtgError(400, f"{where}: rx_endpoint {rx} ({rp.location}) is not the QP's peer "
                                        f"{dst_nic.address.ip} ({dst_nic.server}:{dst_nic.interface})")
                verb = (fl.get("rocev2_verb") or {}).get("choice", "write")
                if verb != "write":
                    raise unsupported(f"{where}: rocev2_verb {verb} (RDMA WRITE only)")
                unit = fl.get("message_size_unit", "mb")
                if unit not in _UNIT_BYTES:
                    raise OtgError(400, f"{where}: message_size_unit {unit!r} is not bytes, kb, mb or gb")
                size = fl.get("message_size", 1)
                if not isinstance(size, int) or size < 1:
                    raise OtgError(400, f"{where}: message_size must be an integer >= 1")
                tx = ports[pname]
                roce = RoceFlow(qp, (tx.server, tx.nic - 1), (rp.server, rp.nic - 1), size * _UNIT_BYTES[unit], pct,
                                dcqcn_of.get(pname, False))
                flows[name] = FlowSpec(name, pname, rx, 0, 0, 0.0, packets=None, roce=roce)
    if len({f.roce.dcqcn for f in flows.values()}) > 1:
        raise unsupported("DCQCN on some RoCEv2 tx ports and not on others (one congestion control per run)")
    return flows, warnings


#: ``Flow.Header.choice`` values of the OpenAPI document (components.schemas.Flow.Header)
FLOW_HEADER_CHOICES = frozenset({
    "custom", "ethernet", "vlan", "vxlan", "ipv4", "ipv6", "pfcpause", "ethernetpause", "tcp", "udp", "gre",
    "gtpv1", "gtpv2", "arp", "icmp", "icmpv6", "ppp", "igmpv1", "mpls", "snmpv2c", "rsvp", "macsec", "lacp",
    "ipv6_extension_header", "cfm", "rocev2"})


# ---- the server -------------------------------------------------------------------------------
@dataclass
class OtgConfig:
    """The server's settings: ``lab``, the bind (``host``, ``port``) and the ``token`` (None on
    an open loopback server)."""

    lab: str
    host: str = "127.0.0.1"
    port: int = 8443
    token: str | None = None

    @property
    def loopback(self) -> bool:
        """True when the bind is a loopback address (no token needed)."""
        return is_loopback(self.host)


@dataclass
class _State:
    config: dict[str, Any] = field(default_factory=dict)
    ports: dict[str, PortSpec] = field(default_factory=dict)
    flows: dict[str, FlowSpec] = field(default_factory=dict)
    counters: dict[str, FlowCounters] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)  # port name -> fault id it injected
    link_change: dict[str, int] = field(default_factory=dict)  # port -> ns since the epoch
    dp_events: bool = False  # config.events.dp_events.enable
    #: link events while traffic ran: (type, port name, ns since the epoch, monotonic s)
    events: list[tuple[str, str, int, float]] = field(default_factory=list)


class OtgServer:
    """The OTG API for one lab: :attr:`app` is the Starlette app. ``lab`` may be given as a
    :class:`Lab` (tests) or is opened from ``config.lab``."""

    def __init__(self, config: OtgConfig, lab: Lab | None = None) -> None:
        self.config = config
        self.lab = lab or Lab(config.lab)
        self.state = _State()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._runner: threading.Thread | None = None
        self.app = Starlette(routes=[
            Route("/config", self.config_route, methods=["GET", "POST", "PATCH"]),
            Route("/config/append", self.not_implemented("PATCH /config/append"), methods=["PATCH"]),
            Route("/config/delete", self.not_implemented("PATCH /config/delete"), methods=["PATCH"]),
            Route("/control/state", self.control_state, methods=["POST"]),
            Route("/control/action", self.not_implemented("POST /control/action (ping, protocol actions)"),
                  methods=["POST"]),
            Route("/monitor/metrics", self.metrics, methods=["POST"]),
            Route("/monitor/states", self.not_implemented("POST /monitor/states"), methods=["POST"]),
            Route("/monitor/capture", self.not_implemented("POST /monitor/capture"), methods=["POST"]),
            Route("/capabilities/version", self.version, methods=["GET"]),
        ], exception_handlers={404: self._not_found, 405: self._not_allowed})

    # ---- plumbing --------------------------------------------------------------------------------
    async def _not_found(self, request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(OtgError(404, f"{request.url.path[:80]}: no such OTG path").body(), status_code=404)

    async def _not_allowed(self, request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(OtgError(405, f"{request.method} {request.url.path[:80]}: method not allowed").body(),
                            status_code=405)

    def authorize(self, request: Request) -> None:
        """The token rule of ``railab ui``: OtgError 403 for a non-loopback ``Host`` on a
        loopback bind (DNS rebinding), 401 without a token where one is needed, 403 with a
        wrong one (compared in constant time)."""
        if self.config.loopback:
            host = request.headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if not (is_loopback(name.strip("[]")) or name == self.config.host):
                raise OtgError(403, "this server answers loopback host names only (Host header)")
        origin = request.headers.get("origin")
        if origin is not None and not self._own_origin(origin):
            # a web page's request (a browser sends no preflight for a text/plain POST): the
            # API's clients (snappi, curl) send no Origin
            raise OtgError(403, f"requests from web pages ({origin[:60]}) are refused: this API is for "
                                "test scripts (snappi), not browsers")
        if self.config.token is None:
            return
        auth = request.headers.get("authorization", "")
        tok = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if not tok:
            raise OtgError(401, "this server needs a token: Authorization: Bearer T")
        if not hmac.compare_digest(tok.encode(), self.config.token.encode()):
            raise OtgError(403, "this token is not valid here")

    def _own_origin(self, origin: str) -> bool:
        """True for an ``Origin`` of this server itself (a loopback name, or its bind host)."""
        from urllib.parse import urlsplit

        try:
            host = urlsplit(origin).hostname or ""
        except ValueError:
            return False
        return is_loopback(host) or host == self.config.host.strip("[]")

    async def _body(self, request: Request) -> Any:
        raw = await request.body()
        if len(raw) > 4 << 20:
            raise OtgError(400, "request body over 4 MiB")
        try:
            return json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise OtgError(400, f"request body is not JSON: {exc}") from None
        except RecursionError:
            raise OtgError(400, "request body is nested too deeply") from None

    def _answer(self, fn):
        async def handler(request: Request) -> JSONResponse:
            try:
                self.authorize(request)
                body = await self._body(request) if request.method in ("POST", "PATCH") else None
                out = await run_in_threadpool(fn, request.method, body)
                return JSONResponse(out, headers={"Cache-Control": "no-store"})
            except OtgError as exc:
                return JSONResponse(exc.body(), status_code=exc.status)
            except UsageError as exc:
                return JSONResponse(OtgError(400, str(exc)).body(), status_code=400)
            except RailabError as exc:
                return JSONResponse(OtgError(500, str(exc), kind="internal").body(), status_code=500)
        return handler

    def not_implemented(self, what: str):
        """A route answering 501 (after the token check)."""
        def fn(method: str, body: Any) -> dict:
            raise unsupported(what)
        return self._answer(fn)

    @property
    def config_route(self):
        """``/config`` (GET, POST, PATCH): :meth:`_config`."""
        return self._answer(self._config)

    @property
    def control_state(self):
        """``POST /control/state``: :meth:`_control_state`."""
        return self._answer(self._control_state)

    @property
    def metrics(self):
        """``POST /monitor/metrics``: :meth:`_metrics`."""
        return self._answer(self._metrics)

    @property
    def version(self):
        """``GET /capabilities/version``: ``Version`` (API_VERSION, railab's version)."""
        return self._answer(lambda method, body: {"api_spec_version": API_VERSION, "sdk_version": "",
                                                  "app_version": f"railab {_railab_version()}"})

    # ---- /config ---------------------------------------------------------------------------------
    def _config(self, method: str, body: Any) -> dict:
        """``GET /config``: the config last set (``Config``); ``POST /config``: check and keep a
        new one (``Warning``); ``PATCH /config`` (update): 501."""
        if method == "GET":
            with self.lock:
                return self.state.config
        if method == "PATCH":
            raise unsupported("PATCH /config (update flows in place)")
        if self._running():
            raise OtgError(409, "traffic is running: stop it (control state traffic.flow_transmit stop) first")
        ports, flows, warnings, dp_events = parse_config(self.lab, body)
        with self.lock:
            self.state.dp_events = dp_events
            self.state.events = []
            self.state.config = body
            self.state.ports, self.state.flows = ports, flows
            self.state.counters = {n: FlowCounters() for n in flows}
        return {"warnings": warnings}

    # ---- /control/state --------------------------------------------------------------------------
    def _control_state(self, method: str, body: Any) -> dict:
        """``POST /control/state`` (``Control.State``): traffic flow_transmit start / stop, port
        link up / down, protocol all start. 501 for pause/resume, capture, other protocols."""
        if not isinstance(body, dict):
            raise OtgError(400, "control state must be an object (Control.State)")
        choice = body.get("choice")
        if choice == "traffic":
            tr = body.get("traffic") or {}
            if tr.get("choice", "flow_transmit") != "flow_transmit":
                raise OtgError(400, f"traffic.choice {tr.get('choice')!r} is not flow_transmit")
            ft = tr.get("flow_transmit") or {}
            return self._flow_transmit(ft.get("state"), list(ft.get("flow_names") or []))
        if choice == "port":
            pt = body.get("port") or {}
            if pt.get("choice") == "capture":
                raise unsupported("port capture")
            if pt.get("choice") != "link":
                raise OtgError(400, f"port.choice {pt.get('choice')!r} is not link or capture")
            lk = pt.get("link") or {}
            return self._link(lk.get("state"), list(lk.get("port_names") or []))
        if choice == "protocol":
            pr = body.get("protocol") or {}
            if pr.get("choice") == "all" and (pr.get("all") or {}).get("state") == "start":
                return {"warnings": ["protocols: the lab's NICs are configured and up, its BGP runs on the "
                                     "switches: nothing to start"]}
            raise unsupported(f"protocol state {pr.get('choice')!r} (railab emulates no protocols on its ports)")
        raise OtgError(400, f"control state choice {str(choice)[:30]!r} is not port, protocol or traffic")

    def _streamed(self, f: FlowSpec) -> bool:
        """A continuous two-port packet flow while data-plane events are on: a probe stream."""
        return self.state.dp_events and f.continuous and f.raw is None and f.roce is None

    def _running(self) -> bool:
        return self._runner is not None and self._runner.is_alive()

    def _flow_transmit(self, state: Any, names: list[str]) -> dict:
        with self.lock:
            flows = dict(self.state.flows)
        for n in names:
            if n not in flows:
                raise OtgError(400, f"flow_transmit.flow_names: no flow {str(n)[:40]!r} is configured")
        chosen = [flows[n] for n in (names or list(flows))]
        if state == "start":
            self._require_lab()
            if not chosen:
                raise OtgError(400, "no flows are configured (POST /config first)")
            if len({f.roce is None for f in chosen}) > 1:
                raise unsupported("starting RoCEv2 flows and packet flows at once (start each kind by flow_names)")
            from railab.traffic.stream import MAX_RATE

            fast = [f.name for f in chosen if self._streamed(f) and f.pps > MAX_RATE]
            if fast:
                raise unsupported(f"flows {', '.join(fast)}: with data-plane events a continuous flow is a probe "
                                  f"stream, at most {MAX_RATE:g} lab packets/s (lower its rate)")
            if self._running():
                raise OtgError(409, "traffic is already running: stop it first")
            with self.lock:
                for f in chosen:
                    self.state.counters[f.name] = FlowCounters(running=True, started=time.monotonic())
            self._stop.clear()
            self._runner = threading.Thread(target=self._run, args=(chosen,), name="otg-traffic", daemon=True)
            self._runner.start()
            return {"warnings": []}
        if state == "stop":
            with self.lock:
                running = {n for n, c in self.state.counters.items() if c.running}
            if running - {f.name for f in chosen}:
                raise unsupported(f"stopping some flows of a run ({', '.join(sorted(running - set(names)))[:200]} "
                                  "would go on): stop them all (no flow_names)")
            self._stop.set()
            if self._runner is not None:
                self._runner.join(timeout=30)
            return {"warnings": self.flow_summaries([f.name for f in chosen])}
        if state in ("pause", "resume"):
            raise unsupported(f"flow_transmit {state}")
        raise OtgError(400, f"flow_transmit.state {str(state)[:20]!r} is not start, stop, pause or resume")

    def flow_summaries(self, names: list[str]) -> list[str]:
        """One line per flow for the stop's ``Warning``: frames delivered, the hops the engine
        saw (64 - received TTL) and the lab's expected hop count, the lab seconds it ran."""
        out = []
        with self.lock:
            for n in names:
                c = self.state.counters.get(n)
                if c is None or c.started is None:
                    continue
                f = self.state.flows.get(n)
                if f is not None and f.raw is not None:
                    out.append(f"flow {n}: {c.frames_tx} frames sent from {f.tx} (no rx port: not counted at a "
                               f"receiver) in {c.seconds():.3f} lab s" + (f"; error: {c.error}" if c.error else ""))
                    continue
                hops = "-" if c.hops is None else str(c.hops)
                exp = "-" if c.expected_hops is None else str(c.expected_hops)
                fabric_us = c.seconds() / self.lab.units.time_scale * 1e6
                out.append(f"flow {n}: {c.frames_rx}/{c.frames_tx} frames delivered through {hops} hops "
                           f"(expected {exp}) in {c.seconds():.3f} lab s ({fabric_us:.1f} fabric us)"
                           + (f"; engine error: {c.error}" if c.error else ""))
        return out

    def _link(self, state: Any, names: list[str]) -> dict:
        from railab.errors import UsageError
        from railab.testbed import exercise as store
        from railab.testbed import faults as F

        if state not in ("up", "down"):
            raise OtgError(400, f"link.state {str(state)[:20]!r} is not up or down")
        self._require_lab()
        with self.lock:
            ports = dict(self.state.ports)
        for n in names:
            if n not in ports:
                raise OtgError(400, f"link.port_names: no port {str(n)[:40]!r} is configured")
        try:  # the exercise lock: the same words as the CLI's and the console's refusal
            store.guard(self.lab.name, "otg")
        except UsageError as exc:
            raise OtgError(409, str(exc)) from None
        warnings = []
        for n in names or list(ports):
            p = ports[n]
            # the event's time is when the change was asked for, before the fault is applied
            # (as railab drill's t_inject): the link goes down inside the call, which takes
            # 10 ms to 0.4 s on a busy host, and an outage that starts then is the event's
            t_ns, t_mono = time.time_ns(), time.monotonic()
            if state == "down":
                if n in self.state.faults:
                    warnings.append(f"port {n} is already down (fault {self.state.faults[n]})")
                    continue
                rec = F.inject(self.lab.labdir, "link-down", p.server, port=p.interface)
                self.state.faults[n] = rec.id
                warnings.append(f"port {n}: railab fault {rec.id} link-down {p.server}:{p.interface}")
            else:
                fid = self.state.faults.pop(n, None)
                if fid is None:
                    warnings.append(f"port {n} was not taken down by this server: left as it is")
                    continue
                F.heal(self.lab.labdir, fid)
                warnings.append(f"port {n}: railab fault {fid} healed")
            self.state.link_change[n] = t_ns
            if self._running():
                with self.lock:
                    self.state.events.append((f"link_{state}", n, t_ns, t_mono))
        return {"warnings": warnings}

    # ---- the traffic ---------------------------------------------------------------------------
    def _engine_flow(self, fs: FlowSpec, ports: dict[str, PortSpec], packets: int, qp: int):
        from railab.traffic.patterns import Flow, route

        tx, rx = ports[fs.tx], ports[fs.rx]
        return route(self.lab.spec, Flow((tx.server, tx.nic - 1), (rx.server, rx.nic - 1), qp=qp, sport=fs.sport,
                                         size=max(fs.payload, 1), messages=packets,
                                         mtu=max(256, fs.payload), rate=fs.pps, op="send"))

    def _mac(self, node: str, ifname: str) -> str:
        from pyroute2 import IPRoute

        with IPRoute(netns=self.lab.netns_of(node), flags=0) as ipr:
            idx = ipr.link_lookup(ifname=ifname)
            if not idx:
                raise RailabError(f"{node}:{ifname} does not exist (a pulled cable?)")
            return ipr.get_links(idx[0])[0].get_attr("IFLA_ADDRESS")

    def raw_frames(self, f: FlowSpec) -> list[bytes]:
        """The distinct frames of a tx-only flow (:class:`RawHeaders`), built with scapy: the
        configured fields, the NIC's MAC and address and the leaf port's MAC where unset, the
        custom bytes, zero padding to the frame size (without FCS)."""
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

        raw = f.raw
        assert raw is not None
        port = self.state.ports[f.tx]
        nic = self.lab.spec.nic(port.server, port.nic)
        src_mac = raw.eth_src or [self._mac(port.server, port.interface)]
        dst_mac = raw.eth_dst or [self._mac(nic.leaf, nic.leaf_port)]
        out = []
        for i in range(raw.cycle()):
            pkt = Ether(src=src_mac[i % len(src_mac)], dst=dst_mac[i % len(dst_mac)])
            if "ipv4" in raw.kinds:
                ip_src = raw.ip_src or [str(nic.address.ip)]
                pkt = pkt / IP(src=ip_src[i % len(ip_src)], dst=raw.ip_dst[i % len(raw.ip_dst)])
                if "udp" in raw.kinds:
                    sp, dp = raw.sport or [0], raw.dport or [0]
                    pkt = pkt / UDP(sport=sp[i % len(sp)], dport=dp[i % len(dp)])
            data = bytes(pkt / Raw(raw.custom)) if raw.custom else bytes(pkt)
            # pad inside the IP datagram (its lengths count the padding) up to the frame size
            pad = raw.frame - len(data)
            if pad > 0:
                data = bytes(pkt / Raw(raw.custom + bytes(pad)))
            out.append(data[:raw.frame])
        return out

    def _send_raw(self, f: FlowSpec) -> None:
        """A tx-only flow: its frames from the tx NIC's raw socket at the flow's lab rate until
        its packets or seconds are sent or traffic stops; frames_tx counts what the kernel took."""
        import socket

        from railab.traffic.engine import in_netns

        c = self.state.counters[f.name]
        try:
            frames = self.raw_frames(f)
            port = self.state.ports[f.tx]
            with in_netns(self.lab.netns_of(port.server)):
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            try:
                sock.bind((port.interface, 0))
                t0 = time.monotonic()
                sent = 0
                while not self._stop.is_set():
                    now = time.monotonic()
                    if f.packets is not None and sent >= f.packets:
                        break
                    if f.seconds is not None and now - t0 >= f.seconds:
                        break
                    due = int((now - t0) * f.pps) + 1 - sent
                    if f.packets is not None:
                        due = min(due, f.packets - sent)
                    for _ in range(max(0, min(due, 256))):
                        try:
                            sock.send(frames[sent % len(frames)])
                        except OSError as exc:  # ENOBUFS / ENETDOWN: the frame did not leave
                            if exc.errno not in (105, 100):
                                raise
                            continue
                        finally:
                            sent += 1
                        with self.lock:
                            c.frames_tx += 1
                            c.bytes_tx += f.frame
                            c.active_s = time.monotonic() - t0
                    if due <= 0:
                        time.sleep(min(0.005, 1.0 / f.pps))
            finally:
                sock.close()
        except Exception as exc:
            with self.lock:
                c.error = f"{type(exc).__name__}: {exc}"

    def _run(self, flows: list[FlowSpec]) -> None:
        """The traffic thread: tx-only flows from raw sockets (one thread each), the others on
        the path engine, interleaved, in chunks for continuous and fixed-seconds flows, until
        done or stopped."""
        qps = self._qp_numbers(flows)
        if any(f.roce is not None for f in flows):
            try:
                self._run_roce(flows, qps)
            finally:
                with self.lock:
                    for f in flows:
                        self.state.counters[f.name].running = False
            return
        raws = [threading.Thread(target=self._send_raw, args=(f,), daemon=True, name=f"otg-raw-{i}")
                for i, f in enumerate(flows) if f.raw is not None]
        raws += [threading.Thread(target=self._stream, args=(f, qps[f.name]), daemon=True, name=f"otg-stream-{i}")
                 for i, f in enumerate(flows) if self._streamed(f)]
        for t in raws:
            t.start()
        try:
            self._run_engine([f for f in flows if f.raw is None and not self._streamed(f)], qps)
        finally:
            for t in raws:
                t.join()
            now = time.monotonic()
            with self.lock:
                for f in flows:
                    c = self.state.counters[f.name]
                    c.running = False
                    c.ended = c.ended or now

    def _qp_numbers(self, flows: list[FlowSpec]) -> dict[str, int]:
        """Each flow's QP index among the run's flows between the same two NICs, in config order
        (0 for the first): as ``railab traffic`` and ``railab drill`` number a NIC pair's QPs, so
        a flow without ``udp.src_port`` carries the source port of their QP #0 between the same
        NICs (``rdma_get_udp_sport`` of the QP pair), hence takes its ECMP path; a second flow
        between the same NICs is QP #1, and so on. Tx-only flows have none."""
        out: dict[str, int] = {}
        seen: dict[tuple, int] = {}
        for f in flows:
            if f.roce is not None:
                key: tuple = (f.roce.src, f.roce.dst)
            elif f.rx:
                tx, rx = self.state.ports[f.tx], self.state.ports[f.rx]
                key = (tx.server, tx.nic, rx.server, rx.nic)
            else:
                continue
            out[f.name] = seen.get(key, 0)
            seen[key] = out[f.name] + 1
        return out

    def _stream(self, f: FlowSpec, qp: int) -> None:
        """A continuous flow with data-plane events on: a probe stream
        (:class:`railab.traffic.stream.StreamProcess`, the drill's machinery: every probe
        numbered and timestamped, outages found per flow) at the flow's lab rate until stop."""
        from railab.traffic.stream import StreamProcess

        c = self.state.counters[f.name]
        try:
            flow = self._engine_flow(f, dict(self.state.ports), 1, qp)
            sp = StreamProcess(self.lab.spec, self.lab.netns_of, [flow], rate=f.pps,
                               probe_bytes=max(16, f.payload), max_s=600.0)
            with sp:
                t0 = sp.start()
                self._stop.wait()
                res = sp.stop()[0]
            with self.lock:
                c.frames_tx, c.frames_rx = res["tx"], res["rx"]
                c.bytes_tx, c.bytes_rx = res["tx"] * f.frame, res["rx"] * f.frame
                c.active_s = time.monotonic() - t0
                c.outages = res.get("outages") or []
                c.hops = None if res.get("ttl_min") is None else 64 - res["ttl_min"]
                c.expected_hops = flow.expected_hops
        except Exception as exc:
            with self.lock:
                c.error = f"{type(exc).__name__}: {exc}"

    def convergence_rows(self, names: list[str]) -> list[dict]:
        """``convergence_metrics`` (``Convergence.Metric``) of probe-stream flows: per flow, the
        link events while it ran (``link_down`` / ``link_up``, the port, begin = when the change
        was asked for, before the fault was applied, as ``railab drill``'s inject time; end =
        when the flow's outage after it ended; ns since the epoch, lab time) and
        ``data_plane_convergence_us``: the longest outage of the flow between a link-down event
        and the next event (an outage as the drill's: from the send time of its first lost probe,
        or the event if it began before, to that of the first probe delivered after it; the
        model's "below threshold" to "above threshold" for a threshold of every probe), in us,
        NOT divided by the time scale (the switches' kernels and FRR reroute in real time; only
        the data plane's rates are scaled: ``railab drill``'s figures are the same lab times); 0
        when the flow lost nothing. 400 for a flow that was not a probe stream, 409 while
        traffic runs."""
        if self._running():
            raise OtgError(409, "convergence is measured when traffic stops: stop it first")
        out = []
        with self.lock:
            events = list(self.state.events)
            for n in names:
                f, c = self.state.flows.get(n), self.state.counters.get(n)
                if f is None:
                    raise OtgError(400, f"convergence.flow_names: no flow {str(n)[:40]!r} is configured")
                if c is None or c.outages is None:
                    raise OtgError(400, f"flow {n} did not run as a probe stream: set config.events.dp_events.enable "
                                        "and a continuous duration, then start and stop it")
                row: dict[str, Any] = {"name": n, "events": []}
                worst = 0.0
                for k, (typ, port, ns, mono) in enumerate(events):
                    nxt = events[k + 1][3] if k + 1 < len(events) else float("inf")
                    after = [o for o in c.outages if o["end"] >= mono and o["start"] < nxt]
                    o = max(after, key=lambda o: o["end"] - o["start"], default=None)
                    end_ns = ns + int(max(0.0, (o["end"] - mono)) * 1e9) if o else ns
                    row["events"].append({"type": typ, "source": port, "begin_timestamp_ns": ns,
                                          "end_timestamp_ns": end_ns})
                    if typ == "link_down" and o is not None:
                        worst = max(worst, o["end"] - max(o["start"], mono))
                if events:
                    row["data_plane_convergence_us"] = round(worst * 1e6, 3)
                out.append(row)
        return out

    def _run_roce(self, flows: list[FlowSpec], qps: dict[str, int]) -> None:
        """RoCEv2 flows on the load engine (:func:`railab.traffic.load.run_load`, engine auto):
        one QP per flow sending its message as RDMA WRITEs, at its port's target line rate,
        DCQCN or none, with the capacity dataplane's switch agent (ECN marking, PFC as the lab
        says) and port sampler, as ``railab traffic --pattern incast`` runs; the QPs' records
        become the flows' counters."""
        from railab.cli.traffic import _capacity_sampler, _pfc
        from railab.traffic.load import LoadFlow, run_load
        from railab.traffic.patterns import Flow, route

        spec = self.lab.spec
        cap = spec.qos.capacity
        cc = "dcqcn" if flows[0].roce.dcqcn else "none"
        load = [LoadFlow(route(spec, Flow(f.roce.src, f.roce.dst, qp=qps[f.name])), bytes=f.roce.bytes,
                         rate_mbps=None if f.roce.line_pct >= 100 else cap.port_rate_mbps * f.roce.line_pct / 100)
                for f in flows]
        try:
            sampler, close = _capacity_sampler(resolve(self.lab.name), spec)
            try:
                with _pfc(spec, self.lab.netns_of, bool(cap.pfc), True):
                    res = run_load(spec, self.lab.netns_of, load, cc=cc, seconds=None, sport_mode="per-qp",
                                   port_sampler=sampler, stop=self._stop.is_set)
            finally:
                if close is not None:
                    close()
        except Exception as exc:
            with self.lock:
                for f in flows:
                    self.state.counters[f.name].error = f"{type(exc).__name__}: {exc}"
            return
        now = time.monotonic()
        with self.lock:
            for f, q in zip(flows, res.flows, strict=True):
                c = self.state.counters[f.name]
                c.qp = q
                c.frames_tx, c.frames_rx = q["tx_packets"], q["rx_packets"]
                c.bytes_tx, c.bytes_rx = q["tx_bytes"], q["rx_bytes"]
                c.hops, c.expected_hops = q.get("hops"), q.get("expected_hops")
                c.active_s = q["fct_s"] or res.seconds
                c.ended = now

    def qp_rows(self, names: list[str], cols: list[str]) -> list[dict]:
        """``rocev2_flow_per_qp_metrics`` (``Rocev2Flow.Metric.PerQP``) of the RoCEv2 flows:
        frames, bytes, ECN-CE received, CNPs sent by the receiver and received by the sender,
        the rate (Gb/s, fabric: lab Mb/s x time scale / 1000; a completed message's bytes over
        its completion time, else the last half of the run),
        the flow completion time (whole ms as the model has it, rounded up; fabric: lab s /
        time scale x 1000)."""
        scale = self.lab.units.time_scale
        out = []
        with self.lock:
            for n in names:
                f, c = self.state.flows[n], self.state.counters[n]
                if f.roce is None:
                    continue
                q = c.qp or {}
                fct = q.get("fct_s")
                if fct:  # a completed message: its mean rate over its completion time
                    tx_mbps, rx_mbps = c.bytes_tx * 8 / fct / 1e6, c.bytes_rx * 8 / fct / 1e6
                else:  # still sending or stopped: the last half of the run
                    tx_mbps, rx_mbps = q.get("rate_mbps_last_half", 0.0), q.get("rx_mbps_last_half", 0.0)
                src = self.lab.spec.nic(f.roce.src[0], f.roce.src[1] + 1)
                dst = self.lab.spec.nic(f.roce.dst[0], f.roce.dst[1] + 1)
                row = {"flow_name": n, "port_tx": f.tx, "port_rx": f.rx, "src_qp": q.get("qpn", 0),
                       "dest_qp": q.get("dest_qpn", 0), "src_ipv4": str(src.address.ip),
                       "dest_ipv4": str(dst.address.ip), "data_frames_tx": c.frames_tx,
                       "data_frames_rx": c.frames_rx, "frame_delta": max(0, c.frames_tx - c.frames_rx),
                       "frame_sequence_error": q.get("ooo", 0), "tx_bytes": c.bytes_tx, "rx_bytes": c.bytes_rx,
                       "data_tx_rate": round(tx_mbps * scale / 1000, 3),
                       "data_rx_rate": round(rx_mbps * scale / 1000, 3),
                       "ecn_ce_rx": q.get("ce_marked", 0), "cnp_tx": q.get("cnp_sent", 0),
                       "cnp_rx": q.get("cnp_received", 0), "message_tx": 1 if c.frames_tx else 0,
                       "message_complete_rx": 1 if q.get("fct_s") is not None else 0,
                       "message_fail": 1 if q and q.get("fct_s") is None else 0}
                if q.get("fct_s") is not None:
                    # the model's unit is whole ms; a fabric FCT is often less: rounded up (the
                    # stop's warnings give it in fabric us)
                    row["flow_completion_time"] = math.ceil(q["fct_s"] / scale * 1000)
                out.append({k: v for k, v in row.items() if not cols or k in cols or k == "flow_name"})
        return out

    def _run_engine(self, flows: list[FlowSpec], qps: dict[str, int]) -> None:
        from railab.traffic.engine import Engine

        if not flows:
            return
        with self.lock:
            ports = dict(self.state.ports)
        left = {f.name: f.packets for f in flows}
        t0 = time.monotonic()
        try:
            with Engine(self.lab.spec, self.lab.netns_of) as eng:
                t0 = time.monotonic()  # fixed seconds count from the engine's first chunk
                while not self._stop.is_set():
                    batch, fmap = [], []
                    for f in flows:
                        if f.packets is not None:
                            n = left[f.name]
                        elif f.seconds is not None:
                            remain = f.seconds - (time.monotonic() - t0)
                            n = int(min(remain, CHUNK_S) * f.pps) if remain > 0 else 0
                        else:
                            n = max(1, int(CHUNK_S * f.pps))
                        if n and n > 0:
                            batch.append(self._engine_flow(f, ports, n, qps[f.name]))
                            fmap.append(f)
                        else:  # this flow is done while others run on
                            with self.lock:
                                self.state.counters[f.name].running = False
                    if not batch:
                        break
                    results = eng.run(batch, acks=False)
                    now = time.monotonic()
                    with self.lock:
                        for f, r in zip(fmap, results, strict=True):
                            c = self.state.counters[f.name]
                            c.frames_tx += r.sent
                            c.frames_rx += r.delivered
                            c.bytes_tx += r.sent * f.frame
                            c.bytes_rx += r.delivered * f.frame
                            c.ended = now
                            c.active_s += r.seconds
                            c.hops = r.hops_ttl if r.hops_ttl is not None else c.hops
                            c.expected_hops = r.flow.expected_hops
                            if f.packets is not None:
                                left[f.name] = 0
        except Exception as exc:  # the error is the flows' metric state; the server keeps serving
            with self.lock:
                for f in flows:
                    self.state.counters[f.name].error = f"{type(exc).__name__}: {exc}"

    # ---- /monitor/metrics ------------------------------------------------------------------------
    def _metrics(self, method: str, body: Any) -> dict:
        """``POST /monitor/metrics``: ``port`` and ``flow`` (``Port.Metric``, ``Flow.Metric``);
        501 for the other choices (protocols, convergence, RoCEv2, LAG, ...)."""
        if not isinstance(body, dict):
            raise OtgError(400, "metrics request must be an object (Metrics.Request)")
        choice = body.get("choice", "port")
        if choice == "flow":
            return {"choice": "flow_metrics", "flow_metrics": self._flow_metrics(body.get("flow") or {})}
        if choice == "port":
            return {"choice": "port_metrics", "port_metrics": self._port_metrics(body.get("port") or {})}
        if choice == "convergence":
            names = list((body.get("convergence") or {}).get("flow_names") or [])
            with self.lock:
                names = names or [n for n, c in self.state.counters.items() if c.outages is not None]
            return {"choice": "convergence_metrics", "convergence_metrics": self.convergence_rows(names)}
        if choice == "rocev2_flow":
            rq = body.get("rocev2_flow") or {}
            if rq.get("choice", "per_qp") != "per_qp":
                raise OtgError(400, f"rocev2_flow.choice {str(rq.get('choice'))[:20]!r} is not per_qp")
            with self.lock:
                names = [n for n, f in self.state.flows.items() if f.roce is not None]
                errs = [f"flow {n}: the load engine failed: {self.state.counters[n].error}" for n in names
                        if self.state.counters[n].error]
            if errs:
                raise OtgError(500, *errs, kind="internal")
            cols = list((rq.get("per_qp") or {}).get("column_names") or [])
            return {"choice": "rocev2_flow_per_qp_metrics", "rocev2_flow_per_qp_metrics": self.qp_rows(names, cols)}
        if choice in METRIC_CHOICES:
            raise unsupported(f"metrics {choice}")
        raise OtgError(400, f"metrics choice {str(choice)[:30]!r} is not an OTG metrics choice")

    def _flow_row(self, f: FlowSpec, c: FlowCounters) -> dict[str, Any]:
        s = c.seconds() or 1.0  # never started: every count is 0
        scale = self.lab.units.time_scale
        fps_tx, fps_rx = c.frames_tx / s * scale, c.frames_rx / s * scale
        bps_tx, bps_rx = c.bytes_tx * 8 / s * scale, c.bytes_rx * 8 / s * scale
        row: dict[str, Any] = {
            "transmit": "started" if c.running else "stopped",
            "frames_tx": c.frames_tx, "frames_rx": c.frames_rx, "bytes_tx": c.bytes_tx, "bytes_rx": c.bytes_rx,
            "frames_tx_rate": round(fps_tx, 3), "frames_rx_rate": round(fps_rx, 3),
            "loss": round(100.0 * (c.frames_tx - c.frames_rx) / c.frames_tx, 4) if c.frames_tx else 0.0,
            "tx_l1_rate_bps": round(bps_tx + fps_tx * L1_EXTRA * 8, 3),
            "rx_l1_rate_bps": round(bps_rx + fps_rx * L1_EXTRA * 8, 3),
            "tx_rate_bytes": round(bps_tx / 8, 3), "rx_rate_bytes": round(bps_rx / 8, 3),
            "tx_rate_bps": round(bps_tx, 3), "rx_rate_bps": round(bps_rx, 3),
            "tx_rate_kbps": round(bps_tx / 1e3, 3), "rx_rate_kbps": round(bps_rx / 1e3, 3),
            "tx_rate_mbps": round(bps_tx / 1e6, 6), "rx_rate_mbps": round(bps_rx / 1e6, 6),
        }
        return row

    def _flow_metrics(self, req: dict) -> list[dict]:
        names = list(req.get("flow_names") or [])
        cols = list(req.get("metric_names") or [])
        with self.lock:
            flows, counters = dict(self.state.flows), dict(self.state.counters)
        for n in names:
            if n not in flows:
                raise OtgError(400, f"flow.flow_names: no flow {str(n)[:40]!r} is configured")
        for c in cols:
            if c not in FLOW_COLUMNS:
                raise OtgError(400, f"flow.metric_names: {str(c)[:30]!r} is not a Flow.Metric column")
        out = []
        for n in names or list(flows):
            f, c = flows[n], counters[n]
            if c.error:
                raise OtgError(500, f"flow {n}: the engine failed: {c.error}", kind="internal")
            row = self._flow_row(f, c)
            if f.raw is not None:
                row.pop("loss")  # nothing counts its frames at a receiver
            row = {k: v for k, v in row.items() if not cols or k in cols}
            out.append({"name": n, "port_tx": f.tx, **({"port_rx": f.rx} if f.rx else {}), **row})
        return out

    def _port_metrics(self, req: dict) -> list[dict]:
        names = list(req.get("port_names") or [])
        cols = list(req.get("column_names") or [])
        with self.lock:
            ports, flows, counters = dict(self.state.ports), dict(self.state.flows), dict(self.state.counters)
        for n in names:
            if n not in ports:
                raise OtgError(400, f"port.port_names: no port {str(n)[:40]!r} is configured")
        for c in cols:
            if c not in PORT_COLUMNS:
                raise OtgError(400, f"port.column_names: {str(c)[:30]!r} is not a Port.Metric column")
        down = set()
        for rec in self.lab_faults():
            if rec.kind in LINK_DOWN_KINDS:
                down.update({f"{rec.node}:{rec.port}", f"{rec.peer_node}:{rec.peer_port}"})
        scale = self.lab.units.time_scale
        out = []
        for n in names or list(ports):
            p = ports[n]
            ftx = [(flows[k], counters[k]) for k in flows if flows[k].tx == n]
            frx = [(flows[k], counters[k]) for k in flows if flows[k].rx == n]
            secs = max([c.seconds() for _, c in ftx + frx] or [0.0]) or 1.0
            row: dict[str, Any] = {
                "location": f"{p.location} ({self.lab.name}, time scale {scale:g})",
                "link": "down" if n in self.state.faults or f"{p.server}:{p.interface}" in down else "up",
                "transmit": "started" if any(c.running for _, c in ftx) else "stopped",
                "frames_tx": sum(c.frames_tx for _, c in ftx), "frames_rx": sum(c.frames_rx for _, c in frx),
                "bytes_tx": sum(c.bytes_tx for _, c in ftx), "bytes_rx": sum(c.bytes_rx for _, c in frx),
                "speed": self.lab.units.speed_kbps(),
            }
            row["frames_tx_rate"] = round(row["frames_tx"] / secs * scale, 3)
            row["frames_rx_rate"] = round(row["frames_rx"] / secs * scale, 3)
            row["bytes_tx_rate"] = round(row["bytes_tx"] / secs * scale, 3)
            row["bytes_rx_rate"] = round(row["bytes_rx"] / secs * scale, 3)
            if n in self.state.link_change:
                row["last_change"] = self.state.link_change[n]
            out.append({"name": n, **{k: v for k, v in row.items() if not cols or k in cols}})
        return out

    def lab_gone(self) -> bool:
        """True when the lab this server serves is no longer up (taken down by another command,
        e.g. ``railab down`` in another shell): starting traffic or a link change is then a 409."""
        return self.lab.name not in st.labs()

    def _require_lab(self) -> None:
        if self.lab_gone():
            raise OtgError(409, f"lab {self.lab.name} is not up any more (taken down by another command): "
                                f"railab up it again and restart railab otg")

    def lab_faults(self) -> list:
        """The lab's fault records (:func:`railab.testbed.faults.list_faults`): what a port's
        ``link`` metric reads."""
        from railab.testbed import faults as F

        return F.list_faults(self.lab.labdir)

    def shutdown(self) -> None:
        """Stop the traffic thread and heal the link faults this server injected."""
        from railab.testbed import faults as F

        self._stop.set()
        if self._runner is not None:
            self._runner.join(timeout=30)
        for n, fid in list(self.state.faults.items()):
            try:
                F.heal(self.lab.labdir, fid)
            except (RailabError, UsageError):
                pass
            self.state.faults.pop(n, None)


#: fault kinds that take a link down (a port's ``link`` metric reads ``down`` for either end)
LINK_DOWN_KINDS = frozenset({"link-down", "carrier-loss", "cable-pull"})
#: ``Metrics.Request.choice`` values of the OpenAPI document besides port and flow
METRIC_CHOICES = frozenset({
    "bgpv4", "bgpv6", "isis", "lag", "lacp", "lldp", "rsvp", "dhcpv4_client", "dhcpv4_server", "dhcpv6_client",
    "dhcpv6_server", "ospfv2", "convergence", "macsec", "mka", "ospfv3", "rocev2_ipv4", "rocev2_ipv6",
    "rocev2_flow", "egress_only_tracking", "bmp_server"})


def _railab_version() -> str:
    import railab

    return railab.__version__


def make_server(config: OtgConfig, lab: Lab | None = None) -> OtgServer:
    """The server for ``config`` (its Starlette app is ``.app``); UsageError for a lab that is
    not up."""
    return OtgServer(config, lab)


def serve(config: OtgConfig, *, log_level: str = "warning") -> None:
    """Serve the OTG API for ``config`` with uvicorn until Ctrl-C/SIGTERM (:func:`serve_server`)."""
    serve_server(make_server(config), log_level=log_level)


def serve_server(server: OtgServer, *, log_level: str = "warning") -> None:
    """Serve ``server`` with uvicorn until Ctrl-C/SIGTERM; then stop the traffic and heal the
    link faults it injected."""
    import uvicorn

    config = server.config
    try:
        uvicorn.run(server.app, host=config.host.strip("[]"), port=config.port, log_level=log_level,
                    timeout_graceful_shutdown=2, access_log=False)
    finally:
        server.shutdown()


__all__ = ["OtgConfig", "OtgServer", "OtgError", "Lab", "Units", "parse_config", "make_server", "serve", "serve_server",
           "parse_bind", "check_bind", "API_VERSION"]
