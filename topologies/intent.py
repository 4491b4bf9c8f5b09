"""Intent files: a production design (the planner's inputs) plus a ``lab:`` scale-down.

An intent is a YAML document::

    name: mini                      # lab name, ^[a-z][a-z0-9-]{0,31}$ (docs/architecture.md)
    description: free text
    design:                         # the production fabric (planner inputs, seed guide tables 1-5)
      architecture: rail-optimized  # or rail-only
      gpus: 1024
      gpus_per_server: 8            # = rails (seed: "Leaf nodes per Group = GPUs per server")
      leaf: CX864E-N
      spine: CX864E-N               # rail-optimized only
      port_speed_gbps: 400
      nic_speed_gbps: 400           # optional: server NIC speed (default port_speed_gbps)
      fabric_speed_gbps: 800        # optional: leaf-spine speed (default port_speed_gbps)
      oversubscription: "1:1"       # downlink:uplink bandwidth on a leaf (seed: 1:1 recommended)
      tiers: 3                      # optional: 2 or 3 (default: 3 past the two-tier limit)
    lab:                            # the scaled-down copy that runs here, or the string `full`
      groups: 2
      servers_per_group: 2
      rails: 4                      # NICs per lab server (NIC N = ethN = rail N)
      rails_per_leaf: 1             # rail-only may put several rails on one leaf (seed: 512 GPUs)
      spines: 2
      links_per_pair: 1             # parallel links per leaf-spine pair
      pods: 2                       # three tiers: pods (lab.groups split evenly over them)
      superspines: 2                # three tiers: a multiple of lab.spines (one plane per spine)
      superspine_links_per_pair: 4  # three tiers: pod spine 1:1 (leaf links = these links)
      kind: frr                     # or sonic-vs: a registered switch kind (railab kinds)
      mtu: 9100
      rail_pool: 10.0.0.0/16        # rail subnets per (group, rail)
      rail_prefixlen: 24
      loopback_pool: 10.255.0.0/24  # switch loopbacks / router-ids
      bfd: {tx_ms: 300, rx_ms: 300, multiplier: 5, enabled: true}  # fabric BFD (topologies.bfd)
      ra_interval_s: 3              # IPv6 RA interval on fabric ports (topologies.bfd)
      sonic_image: "202305"         # sonic-vs image generation: 202305 (any image) or master
      p2p_pool: 10.254.0.0/16       # /31s of parallel sonic-vs fabric links (topologies.sonic)
      capacity:                     # port capacity, queues, ECN, PFC (topologies.qos, docs/congestion.md)
        port_rate_mbps: 40          # lab rate of a port at the NIC speed; time scale = fabric / lab
        buffer_bytes: 4194304       # egress buffer per port (tail drop beyond it)
        pfc: true                   # PFC emulation on the lossless class (railab traffic --pfc)
        shared_buffer: {pool_bytes: 67108864, dynamic_th: 7}  # switches' shared pool, dynamic
                                    # threshold alpha = 2^dynamic_th (absent: static buffer_bytes)
        pfc_watchdog: {detection_time_ms: 200, restoration_time_ms: 200, action: drop}  # SONiC
                                    # PFC_WD; the lab runs it in lab ms (absent: off)
        ecn: {kmin_bytes: 1048576, kmax_bytes: 2097152, pmax_percent: 5}  # WRED override
      load_balancing: ecmp          # leaves' mode at bring-up: ecmp, spray-rr, spray-random,
                                    # flowlet, pbr, wcmp (docs/loadbalancing.md; railab lb)

``lab.bfd`` and ``lab.ra_interval_s`` default to the lab-size rules of
:mod:`railab.topologies.bfd` (300 ms x 5 and 3 s on small labs; BFD off and slower RAs on the
full-size fabrics).

``lab.capacity`` (absent: unlimited veth links, the path-test labs) gives every leaf, spine and
server NIC egress port a queue at ``port_rate_mbps`` (scaled by the link's speed over
``fabric_rate_gbps``, default the design's NIC speed), WRED/ECN marking and the PFC emulation;
its numbers default to :class:`railab.topologies.qos.CapacityProfile` and the ECN override to
SONiC's ``AZURE_LOSSLESS`` WRED profile, recorded in lab.json ``qos``.

``lab: full`` (or ``lab: {scale: full, kind: ..., rail_pool: ...}``) builds the lab at the
planner's full size (``topologies.planner.plan``).

Every lab switch must fit its design model's port budget (:func:`_budget_errors`: one error
per violated limit, naming the key); a lab larger than its production plan is a warning
(``LabShape.warnings``, with the plan's own warnings, into ``lab.json``).

Every model forbids unknown keys; every error names the key (``lab.spines: ...``) and is raised as
:class:`IntentError` (a ``railab.errors.UsageError``, so a ``ValueError``; exit 2), which the CLI
prints as one ``error: ...`` line.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from railab.errors import UsageError
from railab.topologies import planner
from railab.topologies.bfd import BfdProfile
from railab.topologies.catalog import get_model, load_catalog
from railab.topologies.naming import is_lab_name, lab_name_rule, nos_port
from railab.topologies.nodekinds import (
    FRR,
    LINUX,
    SONIC_VS,
    NodeKind,
    get_node_kind,
    switch_kind_names,
)
from railab.topologies.qos import (
    DEFAULT_QOS,
    CapacityProfile,
    EcnProfile,
    PfcWatchdogProfile,
    QosProfile,
    SharedBufferProfile,
)
from railab.topologies.units import RatioError, ratio_parts
from railab.topologies.yamlio import YamlFileError, read_yaml_file

INTENTS_DIR = Path(__file__).resolve().parent / "intents"

#: Default images per intent ``lab.images`` key (from the node kind registry).
DEFAULT_IMAGES = {"frr": FRR.image, "sonic-vs": SONIC_VS.image, "server": LINUX.image}


class IntentError(UsageError):
    """An intent that cannot be built; the message names the key and says what to change."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ratio(value: str, key: str) -> Fraction:
    """``"d:u"`` -> Fraction(d, u). Raises ValueError with the one ratio parser's explanation
    (:func:`railab.topologies.units.ratio_parts`: malformed, no uplinks, no server ports)."""
    try:
        d, u = ratio_parts(value, key)
    except RatioError as exc:
        raise ValueError(str(exc)) from None
    return Fraction(d, u)


def _ratio_text(v: Any) -> Any:
    """Before-validator for ratio keys: YAML 1.1 reads an unquoted ``3:1`` as the base-60 integer
    181 (``3 x 60 + 1``); say so and show the quoted form instead of pydantic's "valid string"."""
    if isinstance(v, int) and not isinstance(v, bool):
        hint = f'"{v // 60}:{v % 60}"' if v >= 60 else '"1:1"'
        raise ValueError(
            f"got the number {v}: YAML reads an unquoted ratio such as 3:1 as a base-60 number; "
            f"quote it, e.g. oversubscription: {hint}"
        )
    return v


class DesignIntent(_Strict):
    """The production design; fields mirror ``topologies.planner.Design``."""

    architecture: Literal["rail-only", "rail-optimized"]
    gpus: int = Field(gt=0, description="GPUs in the production cluster")
    gpus_per_server: int = Field(8, ge=1, le=64, description="GPUs (= NICs = rails) per server")
    leaf: str = Field(min_length=1, description="leaf switch model, e.g. CX864E-N")
    spine: str | None = Field(None, description="spine model (rail-optimized); None = same as leaf")
    port_speed_gbps: int = Field(400, gt=0, description="port speed, Gb/s: the NIC and the "
                                 "fabric speed unless nic_/fabric_speed_gbps say otherwise")
    nic_speed_gbps: int | None = Field(None, gt=0, description="server NIC (server-leaf) speed")
    fabric_speed_gbps: int | None = Field(None, gt=0, description="leaf-spine (and spine-"
                                          "super-spine) link speed")
    oversubscription: str = Field("1:1", description="leaf downlink:uplink bandwidth ratio")
    tiers: Literal[2, 3] | None = Field(None, description="switch tiers; None: 2, or 3 past "
                                        "the two-tier limit (railab.topologies.planner)")

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _ratio_is_text(cls, v: Any) -> Any:
        return _ratio_text(v)

    @field_validator("oversubscription")
    @classmethod
    def _check_ratio(cls, v: str) -> str:
        _ratio(v, "oversubscription")
        return v


class Images(_Strict):
    """Container images for containerlab (pinned tags)."""

    frr: str = DEFAULT_IMAGES["frr"]
    sonic_vs: str = Field(DEFAULT_IMAGES["sonic-vs"], alias="sonic-vs")
    server: str = DEFAULT_IMAGES["server"]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def for_kind(self, kind: NodeKind) -> str:
        """The image of a node of ``kind``: this intent's ``images.<kind.image_key>`` when the
        key exists here, else the kind's registered default image."""
        override = getattr(self, kind.image_key, None) if kind.image_key else None
        return override or kind.image


class CapacityIntent(_Strict):
    """The intent's ``lab.capacity`` block: present means on (``enabled`` defaults to true).
    Units as :class:`railab.topologies.qos.CapacityProfile` (Mb/s, Gb/s, bytes); ``ecn``
    overrides the WRED/ECN profile (bytes, percent) of the lab and of its SONiC config alike."""

    enabled: bool = True
    port_rate_mbps: float = Field(CapacityProfile.model_fields["port_rate_mbps"].default, gt=0,
                                  le=10000, description="lab port rate at the NIC speed, Mb/s")
    fabric_rate_gbps: int | None = Field(None, gt=0, description="the production rate a "
                                         "port_rate_mbps port stands for; default: NIC speed")
    buffer_bytes: int = Field(CapacityProfile.model_fields["buffer_bytes"].default, gt=0,
                              le=1 << 30, description="egress buffer per port, bytes")
    pfc: bool = Field(True, description="PFC emulation on the lossless class")
    ecn: EcnProfile | None = Field(None, description="WRED/ECN override (default AZURE_LOSSLESS)")
    shared_buffer: SharedBufferProfile | None = Field(
        None, description="switches' shared pool with a dynamic threshold (default: static "
        "buffer_bytes per queue)")
    pfc_watchdog: PfcWatchdogProfile | None = Field(
        None, description="the switches' PFC watchdog, SONiC PFC_WD (default: off)")

    @model_validator(mode="after")
    def _thresholds(self) -> CapacityIntent:
        ecn = self.ecn or DEFAULT_QOS.ecn
        if ecn.kmin_bytes >= ecn.kmax_bytes:
            raise ValueError(f"ecn.kmin_bytes ({ecn.kmin_bytes}) must be below ecn.kmax_bytes "
                             f"({ecn.kmax_bytes})")
        if ecn.kmax_bytes >= self.buffer_bytes:
            raise ValueError(f"ecn.kmax_bytes ({ecn.kmax_bytes}) must be below buffer_bytes "
                             f"({self.buffer_bytes}): marks must start before the queue drops")
        try:
            _ = self.qos(400).pfc_pause_bytes
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        sb = self.shared_buffer
        if sb is not None and sb.share_bytes(1) < self.buffer_bytes:
            need = -(-self.buffer_bytes * (1 + sb.alpha) // sb.alpha)
            raise ValueError(
                f"shared_buffer gives a lone hot queue {sb.share_bytes(1)} B (alpha "
                f"{sb.alpha:g} x pool / (1 + alpha)), less than buffer_bytes "
                f"({self.buffer_bytes}), where PFC pauses and its headroom must still fit: "
                f"raise shared_buffer.pool_bytes to at least {int(need)}"
                + (f" or dynamic_th (at most 7; {sb.dynamic_th} now)" if sb.dynamic_th < 7 else ""))
        return self

    def qos(self, nic_speed_gbps: int) -> QosProfile:
        """The lab's :class:`QosProfile`: :data:`DEFAULT_QOS` with this capacity (and ECN
        override); ``fabric_rate_gbps`` defaults to ``nic_speed_gbps``."""
        cap = CapacityProfile(enabled=self.enabled, port_rate_mbps=self.port_rate_mbps,
                              fabric_rate_gbps=self.fabric_rate_gbps or nic_speed_gbps,
                              buffer_bytes=self.buffer_bytes, pfc=self.pfc,
                              shared_buffer=self.shared_buffer, pfc_watchdog=self.pfc_watchdog)
        return DEFAULT_QOS.model_copy(update={"capacity": cap, "ecn": self.ecn or DEFAULT_QOS.ecn})


class LabIntent(_Strict):
    """The lab scale-down. Size fields must be omitted when ``scale`` is ``full``."""

    scale: Literal["lab", "full"] = "lab"
    groups: int | None = Field(None, ge=1, le=64)
    servers_per_group: int | None = Field(None, ge=1, le=1024)
    rails: int | None = Field(None, ge=1, le=64)
    rails_per_leaf: int | None = Field(None, ge=1, le=64)
    spines: int | None = Field(None, ge=0, le=256)
    links_per_pair: int | None = Field(None, ge=1, le=64)
    pods: int | None = Field(None, ge=1, le=64, description="three tiers: pods (groups split "
                             "evenly over them)")
    superspines: int | None = Field(None, ge=1, le=256, description="three tiers: super-spines, "
                                    "a multiple of lab.spines (one plane per pod spine)")
    superspine_links_per_pair: int | None = Field(None, ge=1, le=64, description="three tiers: "
                                                  "links per pod spine - super-spine pair")
    kind: str = Field("frr", description="switch node kind (railab.topologies.nodekinds)")
    mtu: int = Field(9100, ge=1280, le=9216, description="link MTU, bytes (IPv6 minimum 1280)")
    oversubscription: str | None = Field(None, description="lab ratio; default: the design's")
    rail_pool: ipaddress.IPv4Network = ipaddress.IPv4Network("10.0.0.0/16")
    rail_prefixlen: int = Field(24, ge=8, le=31)
    loopback_pool: ipaddress.IPv4Network = ipaddress.IPv4Network("10.255.0.0/24")
    images: Images = Field(default_factory=Images)
    bfd: BfdProfile | None = Field(
        None, description="fabric BFD timers; default: scaled with the lab (topologies.bfd)")
    ra_interval_s: int | None = Field(
        None, ge=1, le=1800,
        description="IPv6 RA interval on fabric ports, s; default: scaled (topologies.bfd)")
    sonic_image: Literal["202305", "master"] = Field(
        "202305", description="docker-sonic-vs image generation (topologies.sonic.SONIC_IMAGES): "
                              "202305 loads configs after boot on any image; master binds "
                              "/var/sonic/config_db.json (images since 2026-03)")
    p2p_pool: ipaddress.IPv4Network = Field(
        ipaddress.IPv4Network("10.254.0.0/16"),
        description="numbered /31s for parallel leaf-spine links on sonic-vs (topologies.sonic)")
    capacity: CapacityIntent | None = Field(
        None, description="port capacity, queues, ECN/WRED and PFC (docs/congestion.md); "
                          "absent: unlimited links")
    load_balancing: Literal["ecmp", "spray-random", "spray-rr", "flowlet", "pbr", "wcmp"] = Field(
        "ecmp", description="the leaves' load-balancing mode, applied at bring-up once the "
                            "fabric converged (railab.testbed.lb, docs/loadbalancing.md); "
                            "flowlet and wcmp need lab.capacity, rail-only labs only ecmp")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        kinds = switch_kind_names()
        if v not in kinds:
            raise ValueError(f"unknown switch kind {v!r}; registered switch kinds: "
                             f"{', '.join(kinds)} (railab kinds lists them)")
        return v

    @model_validator(mode="before")
    @classmethod
    def _full_shorthand(cls, data: Any) -> Any:
        if data == "full":
            return {"scale": "full"}
        if isinstance(data, str):
            raise ValueError(f"must be a mapping or the string 'full', got {data!r}")
        return data

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _ratio_is_text(cls, v: Any) -> Any:
        return _ratio_text(v)

    @field_validator("oversubscription")
    @classmethod
    def _check_ratio(cls, v: str | None) -> str | None:
        if v is not None:
            _ratio(v, "oversubscription")
        return v


class Intent(_Strict):
    """A whole intent file. Use :func:`load_intent` to read one with clear errors."""

    name: str = Field(description="lab name, ^[a-z][a-z0-9-]{0,31}$")
    description: str = ""
    design: DesignIntent
    lab: LabIntent

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not is_lab_name(v):
            raise ValueError(lab_name_rule(v, ""))
        return v


@dataclass(frozen=True)
class LabShape:
    """The resolved lab size (after ``lab: full`` is expanded through the planner).

    ``leaves_per_group`` = rails / rails_per_leaf. Oversubscription is the leaf's
    downlink:uplink bandwidth ratio (downlinks at ``nic_speed_gbps``, uplinks at
    ``fabric_speed_gbps``; both ``port_speed_gbps`` unless the design splits them). Three tiers
    when ``superspines`` > 0: ``groups`` (total) split into ``pods`` of ``groups_per_pod``,
    ``spines`` per pod, pod spine ``i`` cabled to the super-spines of plane ``i``
    (``superspines / spines`` each, ``superspine_links`` per pair). ``warnings``: the
    production plan's and the lab's (lab.json ``warnings``).
    """

    architecture: str
    groups: int
    servers_per_group: int
    rails: int
    rails_per_leaf: int
    spines: int
    links_per_pair: int
    kind: str
    mtu: int
    oversubscription: str
    port_speed_gbps: int
    rail_pool: ipaddress.IPv4Network
    rail_prefixlen: int
    loopback_pool: ipaddress.IPv4Network
    images: Images
    scale: str
    plan: dict = field(default_factory=dict)
    bfd: BfdProfile | None = None  # None: the lab-size rule (railab.topologies.bfd)
    ra_interval_s: int | None = None  # None: the lab-size rule
    nic_speed_gbps: int = 0  # 0: port_speed_gbps
    fabric_speed_gbps: int = 0  # 0: port_speed_gbps
    pods: int = 1
    groups_per_pod: int = 0
    superspines: int = 0
    superspine_links: int = 1
    warnings: tuple[str, ...] = ()
    breakouts: dict = field(default_factory=dict)  # production ports per cage (cabling)
    sonic_image: str = "202305"  # sonic-vs image generation (topologies.sonic.SONIC_IMAGES)
    p2p_pool: ipaddress.IPv4Network = ipaddress.IPv4Network("10.254.0.0/16")
    qos: QosProfile = DEFAULT_QOS  # lab.capacity applied (CapacityIntent.qos)
    load_balancing: str = "ecmp"  # lab.load_balancing (railab.testbed.lb)

    @property
    def node_kind(self) -> NodeKind:
        """The switches' :class:`NodeKind` (registry :mod:`railab.topologies.nodekinds`)."""
        return get_node_kind(self.kind)

    @property
    def leaves_per_group(self) -> int:
        return self.rails // self.rails_per_leaf

    @property
    def leaves(self) -> int:
        return self.groups * self.leaves_per_group

    @property
    def servers(self) -> int:
        return self.groups * self.servers_per_group

    @property
    def leaf_downlinks(self) -> int:
        return self.servers_per_group * self.rails_per_leaf

    @property
    def leaf_uplinks(self) -> int:
        return self.spines * self.links_per_pair

    @property
    def three_tier(self) -> bool:
        return self.superspines > 0

    @property
    def nic_speed(self) -> int:
        """Server-leaf link speed [Gb/s]."""
        return self.nic_speed_gbps or self.port_speed_gbps

    @property
    def fabric_speed(self) -> int:
        """Leaf-spine / spine-super-spine link speed [Gb/s]."""
        return self.fabric_speed_gbps or self.port_speed_gbps

    @property
    def leaves_per_pod(self) -> int:
        return self.groups_per_pod * self.leaves_per_group if self.three_tier else self.leaves

    @property
    def spine_downlinks(self) -> int:
        """Ports of one (pod) spine towards its leaves."""
        return self.leaves_per_pod * self.links_per_pair

    @property
    def spine_uplinks(self) -> int:
        """Ports of one pod spine towards the super-spines of its plane (0 on two tiers)."""
        if not self.three_tier:
            return 0
        return self.superspines // self.spines * self.superspine_links

    @property
    def spine_ports(self) -> int:
        return self.spine_downlinks + self.spine_uplinks

    @property
    def superspine_ports(self) -> int:
        """Ports of one super-spine: one link bundle to its plane's spine in every pod."""
        return self.pods * self.superspine_links if self.three_tier else 0

    @property
    def switches(self) -> int:
        return self.leaves + self.spines * self.pods + self.superspines


# ---- loading ------------------------------------------------------------------------------------


def shipped_intents() -> list[str]:
    """Names of the intents shipped in ``topologies/intents/`` (sorted)."""
    return sorted(p.stem for p in INTENTS_DIR.glob("*.yml"))


def _fmt_loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(top level)"


def _format_validation(err: ValidationError, model: type[BaseModel], source: str) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if p not in ("function-before[_full_shorthand()]",))
        key = _fmt_loc(loc)
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            parent: Any = model
            for part in loc[:-1]:
                ann = parent.model_fields.get(str(part)) if hasattr(parent, "model_fields") else None
                parent = _model_of(ann.annotation) if ann else None
                if parent is None:
                    break
            allowed = sorted(
                (f.alias or n) for n, f in parent.model_fields.items()
            ) if parent is not None and hasattr(parent, "model_fields") else []
            msg = "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        lines.append(f"{key}: {msg}")
    return f"intent {source}: " + "; ".join(lines)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        m = _model_of(arg)
        if m is not None:
            return m
    return None


def parse_intent(data: Any, source: str = "<data>") -> Intent:
    """Validate a mapping as an :class:`Intent`; raises :class:`IntentError` naming the key."""
    if not isinstance(data, dict):
        raise IntentError(f"intent {source}: expected a YAML mapping at the top level")
    try:
        intent = Intent.model_validate(data)
    except ValidationError as exc:
        raise IntentError(_format_validation(exc, Intent, source)) from None
    try:
        resolve_lab(intent, source=source)  # cross-field checks
    except IntentError as exc:
        raise IntentError(f"intent {source}: {exc}") from None
    return intent


def load_intent(name_or_path: str | Path) -> Intent:
    """Load a shipped intent by name (``"mini"``) or an intent YAML file by path.

    Raises :class:`IntentError` when the file is missing (listing the shipped intents), is not
    YAML, or does not validate (the message names the offending key).
    """
    p = Path(name_or_path)
    if not p.is_file():
        # A shipped name wins over a same-named directory (e.g. ./mini made by `railab up mini`).
        cand = INTENTS_DIR / f"{name_or_path}.yml"
        if cand.exists() and "/" not in str(name_or_path):
            p = cand
        elif p.is_dir():
            raise IntentError(f"intent {p} is a directory: give an intent YAML file")
        elif p.exists():  # /dev/null, a FIFO (reading one could block), a socket
            raise IntentError(f"intent {p} is not a regular file: give an intent YAML file")
        else:
            raise IntentError(
                f"intent {str(name_or_path)!r} not found: give a YAML path or one of the shipped "
                f"intents: {', '.join(shipped_intents())}"
            )
    if p.is_dir():
        raise IntentError(f"intent {p} is a directory: give an intent YAML file")
    try:
        data = read_yaml_file(p, "intent")
    except YamlFileError as exc:
        raise IntentError(str(exc)) from None
    return parse_intent(data, source=str(p))


# ---- cross-field rules --------------------------------------------------------------------------


def _plan_for(design: DesignIntent) -> Any:
    """Run the planner on the design (``topologies.planner``); raises IntentError naming design."""
    catalog = load_catalog()
    for key in ("leaf", "spine"):
        model = getattr(design, key)
        if model is not None:
            try:
                get_model(catalog, model)
            except ValueError as exc:
                raise IntentError(f"design.{key}: {exc}") from None
    kwargs = dict(
        architecture=design.architecture,
        gpus=design.gpus,
        gpus_per_server=design.gpus_per_server,
        leaf=design.leaf,
        spine=design.spine,
        port_speed_gbps=design.port_speed_gbps,
        nic_speed_gbps=design.nic_speed_gbps,
        fabric_speed_gbps=design.fabric_speed_gbps,
        oversubscription=design.oversubscription,
        tiers=design.tiers,
    )
    try:
        return planner.plan(planner.Design(**kwargs))
    except ValidationError as exc:
        raise IntentError(_format_validation(exc, DesignIntent, "design").replace(
            "intent design: ", "design.")) from None
    except ValueError as exc:
        raise IntentError(f"design: {exc}") from None


def _plan_summary(p: Any) -> dict:
    if p is None:
        return {}
    dump = p.model_dump(mode="json") if hasattr(p, "model_dump") else dict(p)
    keep = ("servers", "rails", "groups", "servers_per_group", "leaf_switches", "spine_switches",
            "links_per_leaf_spine_pair", "links_per_leaf_spine_pair_max", "tiers", "pods",
            "groups_per_pod", "spines_per_pod", "superspine_switches",
            "links_per_spine_superspine_pair", "nic_speed_gbps", "fabric_speed_gbps", "warnings")
    return {k: dump[k] for k in keep if k in dump}


def _breakouts(d: DesignIntent, arch: str) -> dict:
    """Production ports per cage of the design's models at its NIC and fabric speeds (the
    cabling file's cage/sub-port and SONiC names: :mod:`railab.topologies.cabling`)."""
    cat = load_catalog()
    nic = d.nic_speed_gbps or d.port_speed_gbps
    fab = d.fabric_speed_gbps or d.port_speed_gbps
    leaf = get_model(cat, d.leaf)
    spine = get_model(cat, d.spine) if d.spine else leaf
    out = {"leaf_breakout_nic": leaf.breakout_at(nic)}
    if arch == "rail-optimized":
        out.update(leaf_breakout_fabric=leaf.breakout_at(fab),
                   spine_breakout=spine.breakout_at(fab), superspine_breakout=spine.breakout_at(fab))
    return out


def _budget_errors(s: LabShape, d: DesignIntent) -> list[str]:
    """One message per port budget a lab switch breaks (lab level; the planner checks the
    production design the same way): every leaf, spine and super-spine's downlinks + uplinks
    must fit the design model's ports at the chosen speeds. A leaf at one speed counts ports
    (``ports_at``); with NIC and fabric speeds apart it counts cages, each cage running one
    speed (``native_ports`` cages, ``breakout_at`` ports each)."""
    cat = load_catalog()
    leaf = get_model(cat, d.leaf)
    spine = get_model(cat, d.spine) if d.spine else leaf
    nic, fab = s.nic_speed, s.fabric_speed
    errs = []
    down, up = s.leaf_downlinks, s.leaf_uplinks
    leaf_key = "lab.spines" if up > down else "lab.servers_per_group"
    if nic == fab or not up:
        cap = leaf.ports_at(nic)
        if down + up > cap:
            errs.append(
                f"{leaf_key}: a leaf would use {down + up} ports ({down} server downlinks = "
                f"lab.servers_per_group x lab.rails_per_leaf, + {up} uplinks = lab.spines x "
                f"lab.links_per_pair) but its port budget is {cap} x {nic}G ({leaf.name}): lower "
                f"{leaf_key} so the sum is at most {cap}")
    else:
        bn, bf = leaf.breakout_at(nic), leaf.breakout_at(fab)
        cages = -(-down // bn) + -(-up // bf)
        if cages > leaf.native_ports:
            errs.append(
                f"{leaf_key}: a leaf would fill {cages} cages ({down} x {nic}G downlinks, {bn} "
                f"per cage, + {up} x {fab}G uplinks, {bf} per cage) but its port budget is "
                f"{leaf.native_ports} cages ({leaf.name}): lower {leaf_key}")
    if s.spines:
        cap = spine.ports_at(fab)
        if s.spine_ports > cap:
            where = ("(lab.groups / lab.pods) x lab.rails" if s.three_tier
                     else "lab.groups x lab.rails")
            up_txt = (f" + {s.spine_uplinks} super-spine uplinks (lab.superspines / lab.spines x "
                      "lab.superspine_links_per_pair)" if s.three_tier else "")
            errs.append(
                f"lab.groups: a spine would use {s.spine_ports} ports ({s.spine_downlinks} leaf "
                f"links = {where} leaves x lab.links_per_pair{up_txt}) but its port budget is "
                f"{cap} x {fab}G ({spine.name}): lower lab.groups or lab.links_per_pair so it "
                f"is at most {cap}")
    if s.three_tier:
        cap = spine.ports_at(fab)
        if s.superspine_ports > cap:
            errs.append(
                f"lab.pods: a super-spine would use {s.superspine_ports} ports (lab.pods x "
                f"lab.superspine_links_per_pair) but its port budget is {cap} x {fab}G "
                f"({spine.name}): lower lab.pods or lab.superspine_links_per_pair")
    return errs


def _bigger_than_plan(s: LabShape, p: Any) -> list[str]:
    """Warnings for a lab larger than its production design (more groups, servers per group,
    spines or pods than the plan)."""
    out = []
    spines = p.spines_per_pod or p.spine_switches
    for key, lab_v, plan_v in (("groups", s.groups, p.groups),
                               ("servers_per_group", s.servers_per_group, p.servers_per_group),
                               ("spines", s.spines, spines),
                               ("pods", s.pods, p.pods)):
        if plan_v and lab_v > plan_v:
            out.append(f"lab.{key} is {lab_v} but the production design has {plan_v}: the lab "
                       f"is larger than the fabric it models (design {p.gpus} GPUs)")
    return out


def resolve_lab(intent: Intent, source: str = "intent") -> LabShape:
    """Expand ``lab`` into a :class:`LabShape` and check every cross-field rule.

    Rules (each error names the key):

    * rail-only: no spines, one group (seed: single-tier, "8 independent rails");
      ``rails`` divisible by ``rails_per_leaf`` (seed's 512-GPU example puts 2 rails per leaf).
    * rail-optimized: one rail per leaf ("NIC N to Leaf N", leaves per group = rails), at least one
      spine, and the leaf downlink:uplink port ratio equal to the lab's oversubscription
      (default: the design's, the seed recommends 1:1).
    * ``rails`` <= ``design.gpus_per_server``.
    * ``kind: sonic-vs``: at most 32 data ports per node; FRR: ECMP width <= 256.
    * pools: big enough, and ``rail_pool`` / ``loopback_pool`` must not overlap.

    ``lab: full`` calls the planner (``topologies.planner.plan``).
    """
    d, lab = intent.design, intent.lab
    arch = d.architecture
    plan_summary: dict = {}
    three: dict = {}
    if lab.scale == "full":
        for key in ("groups", "servers_per_group", "rails", "rails_per_leaf", "spines",
                    "links_per_pair", "oversubscription", "pods", "superspines",
                    "superspine_links_per_pair"):
            if getattr(lab, key) is not None:
                raise IntentError(
                    f"lab.{key}: not allowed with `scale: full` (the planner sizes the lab); "
                    f"remove it or use `scale: lab`"
                )
        p = _plan_for(d)
        plan_summary = _plan_summary(p)
        if getattr(p, "partial_last_group", None):
            raise IntentError(
                f"lab: full: the plan's last group is partial ({p.partial_last_group} of "
                f"{p.servers_per_group} servers), which a full-size lab does not model; use a "
                f"GPU count that fills whole groups ({p.servers_per_group * p.gpus_per_server} "
                "GPUs per group) or a scaled lab"
            )
        if p.tiers == 3 and (p.groups % p.groups_per_pod or p.links_per_spine_superspine_pair
                             != p.links_per_spine_superspine_pair_max):
            raise IntentError("lab: full: the plan's last pod is partial or its super-spine "
                              "links split unevenly, which a full-size lab does not model; use "
                              "a scaled lab")
        shape = dict(
            groups=int(p.groups),
            servers_per_group=int(p.servers_per_group),
            rails=int(p.rails),
            rails_per_leaf=int(p.rails_per_leaf),
            spines=int(p.spines_per_pod or p.spine_switches or 0),
            links_per_pair=int(p.links_per_leaf_spine_pair or 1),
            oversubscription=d.oversubscription,
        )
        if p.tiers == 3:
            three = dict(pods=p.pods, groups_per_pod=p.groups_per_pod,
                         superspines=p.superspine_switches,
                         superspine_links=p.links_per_spine_superspine_pair)
    else:
        p = _plan_for(d)  # the production design must be plannable
        plan_summary = _plan_summary(p)
        if lab.servers_per_group is None:
            raise IntentError("lab.servers_per_group: required key is missing (servers per group)")
        rails = lab.rails if lab.rails is not None else d.gpus_per_server
        shape = dict(
            groups=lab.groups if lab.groups is not None else 1,
            servers_per_group=lab.servers_per_group,
            rails=rails,
            rails_per_leaf=lab.rails_per_leaf if lab.rails_per_leaf is not None else 1,
            spines=lab.spines if lab.spines is not None else 0,
            links_per_pair=lab.links_per_pair if lab.links_per_pair is not None else 1,
            oversubscription=lab.oversubscription or d.oversubscription,
        )
        if rails > d.gpus_per_server:
            raise IntentError(
                f"lab.rails: {rails} rails exceed design.gpus_per_server ({d.gpus_per_server}); "
                "a lab server has at most one NIC per GPU"
            )
        if arch == "rail-only":
            if shape["spines"]:
                raise IntentError(
                    f"lab.spines: a rail-only fabric has no spine layer (seed: single-tier), got "
                    f"{shape['spines']}; remove lab.spines or use architecture rail-optimized"
                )
            if shape["groups"] != 1:
                raise IntentError(
                    f"lab.groups: a rail-only fabric is one group, got {shape['groups']}; "
                    "use architecture rail-optimized to stack groups"
                )
            if lab.links_per_pair is not None:
                raise IntentError("lab.links_per_pair: a rail-only fabric has no leaf-spine links")
            if rails % shape["rails_per_leaf"]:
                raise IntentError(
                    f"lab.rails_per_leaf: {rails} rails cannot be split evenly over leaves "
                    f"carrying {shape['rails_per_leaf']} rails each"
                )
        else:
            if shape["rails_per_leaf"] != 1:
                raise IntentError(
                    "lab.rails_per_leaf: rail-optimized leaves carry exactly one rail "
                    "(seed: leaf nodes per group = GPUs per server); remove it"
                )
            if lab.spines is None:
                raise IntentError("lab.spines: required key is missing (spines in the lab)")
            if shape["spines"] < 1:
                raise IntentError("lab.spines: a rail-optimized fabric needs at least 1 spine")
        three = _three_tier_lab(lab, shape, p, arch)
    if lab.load_balancing != "ecmp":
        if arch == "rail-only":
            raise IntentError(f"lab.load_balancing: {lab.load_balancing} balances leaf uplinks and "
                              "a rail-only lab has none: remove it (or use ecmp)")
        if lab.load_balancing in ("flowlet", "wcmp") and not (lab.capacity and lab.capacity.enabled):
            raise IntentError(f"lab.load_balancing: {lab.load_balancing} needs lab.capacity (its "
                              "agent rates the uplinks by their queues): add lab.capacity or "
                              "pick ecmp, spray-rr, spray-random or pbr")
    s = LabShape(
        architecture=arch,
        kind=lab.kind,
        mtu=lab.mtu,
        port_speed_gbps=d.port_speed_gbps,
        rail_pool=lab.rail_pool,
        rail_prefixlen=lab.rail_prefixlen,
        loopback_pool=lab.loopback_pool,
        images=lab.images,
        scale=lab.scale,
        plan=plan_summary,
        bfd=lab.bfd,
        ra_interval_s=lab.ra_interval_s,
        nic_speed_gbps=d.nic_speed_gbps or 0,
        fabric_speed_gbps=d.fabric_speed_gbps or 0,
        breakouts=_breakouts(d, arch),
        **three,
        sonic_image=lab.sonic_image,
        p2p_pool=lab.p2p_pool,
        qos=lab.capacity.qos(d.nic_speed_gbps or d.port_speed_gbps) if lab.capacity else DEFAULT_QOS,
        load_balancing=lab.load_balancing,
        **shape,
    )
    errs = _budget_errors(s, d)
    if errs:
        raise IntentError("; ".join(errs))
    _check_shape(s)
    warnings = list(plan_summary.get("warnings", []))
    if lab.scale == "lab":
        warnings += _bigger_than_plan(s, p)
    return replace(s, warnings=tuple(warnings))


def _three_tier_lab(lab: LabIntent, shape: dict, p: Any, arch: str) -> dict:
    """Check the three-tier keys of a scaled lab (``lab.pods``, ``lab.superspines``,
    ``lab.superspine_links_per_pair``) and return the LabShape fields they set (empty for a
    two-tier lab). Rules: all or none of pods/superspines given; rail-optimized only; the
    production plan is three-tier (``design.tiers: 3`` or past the two-tier limit); groups
    split evenly over pods; super-spines a whole number of planes (one per pod spine); pod
    spines 1:1 (leaf links down = super-spine links up)."""
    keys = {k: getattr(lab, k) for k in ("pods", "superspines", "superspine_links_per_pair")}
    if all(v is None for v in keys.values()):
        return {}
    if arch != "rail-optimized":
        raise IntentError("lab.pods: pods and super-spines need architecture rail-optimized")
    if p.tiers != 3:
        raise IntentError(
            f"lab.pods: the production design is {p.tiers}-tier ({p.gpus} GPUs fit two tiers): "
            "set design.tiers: 3 for a three-tier design, or remove lab.pods/lab.superspines")
    for k in ("pods", "superspines"):
        if keys[k] is None:
            raise IntentError(f"lab.{k}: required key is missing (three-tier labs give lab.pods "
                              "and lab.superspines)")
    pods, ss, links = keys["pods"], keys["superspines"], keys["superspine_links_per_pair"] or 1
    if shape["groups"] % pods:
        raise IntentError(f"lab.groups: {shape['groups']} groups do not split evenly over "
                          f"{pods} pods; use a multiple of lab.pods")
    if ss % shape["spines"]:
        raise IntentError(f"lab.superspines: {ss} super-spines are not a whole number of planes "
                          f"(one plane per pod spine, lab.spines = {shape['spines']}); use a "
                          "multiple of lab.spines")
    gpp = shape["groups"] // pods
    down = gpp * shape["rails"] // shape["rails_per_leaf"] * shape["links_per_pair"]
    up = ss // shape["spines"] * links
    if down != up:
        raise IntentError(
            f"lab.superspine_links_per_pair: a pod spine has {down} leaf links down and {up} "
            f"super-spine links up (lab.superspines / lab.spines x "
            f"lab.superspine_links_per_pair); every tier is 1:1, so make them equal")
    return dict(pods=pods, groups_per_pod=gpp, superspines=ss, superspine_links=links)


def _check_shape(s: LabShape) -> None:
    over_key = "lab.oversubscription" if s.scale == "lab" else "design.oversubscription"
    if s.architecture == "rail-optimized" and s.scale == "lab":
        want = _ratio(s.oversubscription, over_key)
        have = Fraction(s.leaf_downlinks * s.nic_speed, s.leaf_uplinks * s.fabric_speed)
        if have != want:
            need = Fraction(s.leaf_downlinks * s.nic_speed, s.fabric_speed) / want
            fix = (f"make spines x links_per_pair = {need}" if need.denominator == 1
                   else "change servers_per_group or spines")
            raise IntentError(
                f"lab.spines: leaf downlinks:uplinks is {s.leaf_downlinks}:{s.leaf_uplinks} "
                f"(servers_per_group x rails_per_leaf : spines x links_per_pair) but the "
                f"oversubscription is {s.oversubscription}; {fix}, or set lab.oversubscription "
                f"to {have.numerator}:{have.denominator}"
            )
    # ports per node
    worst = [("leaf", s.leaf_downlinks + s.leaf_uplinks)]
    if s.spines:
        worst.append(("spine", s.spine_ports))
    if s.three_tier:
        worst.append(("super-spine", s.superspine_ports))
    nk = s.node_kind
    if nk.max_ports is not None:
        for role, ports in worst:
            if ports > nk.max_ports:
                last = f"eth{nk.max_ports}"
                where = (f" (eth1..{last} -> {nos_port('eth1', 'sonic')}..{nos_port(last, 'sonic')})"
                         if nk.port_naming == "sonic" else "")
                raise IntentError(
                    f"lab.kind: a {nk.name} {role} would need {ports} data ports but {nk.name} has "
                    f"{nk.max_ports}{where}; use kind: frr or fewer servers/spines/links"
                )
    widest = max(s.leaf_uplinks, s.links_per_pair if s.spines else 1, s.spine_uplinks)
    if nk.max_ecmp is not None and widest > nk.max_ecmp:
        raise IntentError(
            f"lab.spines: a leaf would need {widest}-way ECMP but FRR (Debian 8.4, "
            f"--enable-multipath={nk.max_ecmp}) installs at most {nk.max_ecmp} paths"
        )
    # pools
    if s.rail_pool.overlaps(s.loopback_pool):
        raise IntentError(
            f"lab.loopback_pool: {s.loopback_pool} overlaps lab.rail_pool {s.rail_pool}; "
            "pick disjoint pools"
        )
    if nk.port_naming == "sonic" and s.links_per_pair > 1 and s.spines:
        for key, pool in (("lab.rail_pool", s.rail_pool), ("lab.loopback_pool", s.loopback_pool)):
            if s.p2p_pool.overlaps(pool):
                raise IntentError(f"lab.p2p_pool: {s.p2p_pool} overlaps {key} {pool}; pick disjoint pools")
        need = s.leaves * s.spines * s.links_per_pair
        if need > s.p2p_pool.num_addresses // 2:
            raise IntentError(f"lab.p2p_pool: {s.p2p_pool} holds {s.p2p_pool.num_addresses // 2} /31s "
                              f"but the parallel sonic-vs links need {need}; use a larger pool")
    if s.rail_prefixlen < s.rail_pool.prefixlen:
        raise IntentError(
            f"lab.rail_prefixlen: /{s.rail_prefixlen} is shorter than lab.rail_pool "
            f"{s.rail_pool}; use a prefix length >= {s.rail_pool.prefixlen}"
        )
    subnets = s.groups * s.rails
    avail = 2 ** (s.rail_prefixlen - s.rail_pool.prefixlen)
    if subnets > avail:
        raise IntentError(
            f"lab.rail_pool: {s.rail_pool} holds {avail} /{s.rail_prefixlen} rail subnets but the "
            f"lab needs {subnets} (groups x rails); use a larger pool or a longer rail_prefixlen"
        )
    per_rail = 2 * s.servers_per_group
    size = 2 ** (32 - s.rail_prefixlen)
    if per_rail > size:
        raise IntentError(
            f"lab.rail_prefixlen: a /{s.rail_prefixlen} rail subnet holds {size // 2} server /31s "
            f"but a rail has {s.servers_per_group} servers; use a shorter prefix length"
        )
    switches = s.switches
    if switches > s.loopback_pool.num_addresses - 2:
        raise IntentError(
            f"lab.loopback_pool: {s.loopback_pool} has {max(0, s.loopback_pool.num_addresses - 2)} "
            f"usable addresses but the lab has {switches} switches; use a larger pool"
        )
