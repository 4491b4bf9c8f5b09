r"""SONiC-VS: ``config_db.json`` rendering and how configs get into a docker-sonic-vs node.

Table and field names follow SONiC's *Configuration Database Manual*
(sonic-net/SONiC ``doc/Configuration.md``) and the YANG models in ``sonic-yang-models``; every
generated document is checked against the 202305 and master models in the tests
(:mod:`railab.topologies.sonic_yang`).

How configs get in (sources: sonic-buildimage ``platform/vs/docker-sonic-vs/start.sh`` and
``Dockerfile.j2`` on 202305 and master; containerlab ``nodes/sonic/sonic.go``). containerlab's
``sonic-vs`` kind sets the entrypoint to ``/bin/bash`` and, after deploy, runs ``supervisord``
(whose ``start.sh`` program builds the config) and ``supervisorctl start bgpd``: it handles no
config itself. ``start.sh`` runs under ``bash -e`` and, when ``/etc/sonic/config_db.json``
exists, merges it with ``init_cfg.json`` into ``/tmp/config_db.json`` and ``mv``\ s that back:
a bind mount on ``/etc/sonic/config_db.json`` makes that ``mv`` fail (EBUSY) and start.sh stops
before redis, syncd, orchagent, zebra and staticd. So railab never binds a path start.sh writes:

* image generation ``202305`` (:data:`SONIC_IMAGES`; the default, it works on every image):
  config_db.json and frr.conf are bound under railab's own ``/etc/railab/`` and loaded after
  boot (:func:`post_deploy_steps`): wait for redis, wait for start.sh's own load
  (``CONFIG_DB_INITIALIZED``), ``sonic-cfggen -j ... --write-to-db``, wait for
  ``PORT_TABLE:PortInitDone``, start zebra/staticd/bgpd under supervisord and apply the FRR
  config with ``vtysh -f`` (nothing in docker-sonic-vs runs ``vtysh -b``, FRR daemons do not
  read frr.conf, and the image deletes ``/etc/frr/frr.conf`` on purpose);
* ``master`` (images built since 2026-03): ``start.sh`` copies ``/var/sonic/config_db.json``
  (``cp``, not ``mv``) onto ``/etc/sonic/config_db.json`` before its merge, so config_db.json is
  bound there and loaded at boot; the FRR config is applied as above.

Tables:

* ``DEVICE_METADATA|localhost``: ``hostname``, ``bgp_asn``, ``hwsku``, ``platform``, ``type``
  (SONiC reads it as the tier: leaves ``BackEndToRRouter``, spines ``BackEndLeafRouter``, SONiC's
  types for back-end (GPU) fabrics, accepted by the 202305 and master models; ``SpineRouter``
  makes bgpcfgd look for a chassis DB and crash in a container) and
  ``docker_routing_config_mode: split-unified`` (FRR's config is one file managed outside
  config_db, so no SONiC template regenerates it);
* ``PORT|EthernetN``: ``lanes``, ``alias``, ``mtu``, ``speed``, ``admin_status``. Lanes and speed
  are those of the sonic-vs default HwSKU (Force10-S6000, 32 x 40G, ``port_config.ini``): the vs
  SAI maps ``eth<k>`` to the port whose index is ``k-1`` (``eth1 -> Ethernet0``,
  ``eth2 -> Ethernet4``, :func:`railab.topologies.naming.nos_port`), and a port whose lanes differ
  from the HwSKU never comes up. The production speed (400G) is recorded in ``lab.json``;
* ``INTERFACE``: fabric ports ``{"ipv6_use_link_local_only": "enable"}`` (BGP unnumbered, RFC
  5549/8950); server-facing ports carry the leaf side of the NIC's /31. With 2 or more links per
  leaf-spine pair every fabric port also gets a /31 (``fabric_addresses``): docker-sonic-vs gives
  every port the switch MAC, so parallel links between two switches share one IPv6 link-local
  address and only one unnumbered session forms (sonic-net/sonic-buildimage#12042). FRR's
  ``neighbor EthernetN interface`` then peers with the other address of the /31 over IPv4
  (bgpd ``bgp_peer_conf_if_to_su_update_v4``: a /30 or /31 on the interface is tried before the
  IPv6 link-local), so sessions stay keyed by interface in ``show bgp summary json``;
* ``LOOPBACK_INTERFACE|Loopback0|<loopback>/32`` (router-id);
* RoCE QoS (seed: "Easy RoCE": PFC + ECN, DCQCN), every number from the lab's
  :class:`railab.topologies.qos.QosProfile` (``lab.json`` ``qos``; the FRR lab's ECN/PFC
  emulation reads the same): ``DSCP_TO_TC_MAP|AZURE`` (DSCP 26 -> TC 3, CNP 48 -> TC 6, the rest
  TC 0), ``TC_TO_QUEUE_MAP``, ``TC_TO_PRIORITY_GROUP_MAP`` and ``MAP_PFC_PRIORITY_TO_QUEUE``
  (identity), ``PORT_QOS_MAP|EthernetN`` (``pfc_enable "3,4"`` and the four maps),
  ``WRED_PROFILE|AZURE_LOSSLESS`` (ECN ``ecn_all``, Kmin/Kmax/Pmax on every colour),
  ``QUEUE|EthernetN|3`` and ``|4`` binding it; and the lossless buffers SONiC needs for PFC to
  hold: ``CABLE_LENGTH|AZURE`` (the profile's cable length per port), ``BUFFER_POOL``
  ``ingress_lossless_pool`` (dynamic, sized for every lossless priority group's headroom),
  ``BUFFER_PROFILE|pg_lossless_<speed>_<cable>_profile`` (``xoff``/``xon``/``size`` = the
  profile's xOFF/xON/headroom, SONiC's naming) and ``BUFFER_PG|EthernetN|3-4``; with
  ``lab.capacity.shared_buffer`` also ``BUFFER_POOL|egress_lossless_pool`` (its ``pool_bytes``),
  ``BUFFER_PROFILE|egress_lossless_profile`` (its ``dynamic_th``) and
  ``BUFFER_QUEUE|EthernetN|3-4`` binding it, the numbers the lab's switch agent emulates; with
  ``lab.capacity.pfc_watchdog`` ``PFC_WD|EthernetN`` (``action``, ``detection_time``,
  ``restoration_time`` in ms; SONiC's PFC watchdog design doc, sonic-pfcwd.yang).
* BFD: docker-sonic-vs ships no ``bfdd`` program, so sonic-vs frr.conf carries no BFD (the
  ``daemons`` file lists what railab's FRR nodes run; on sonic-vs supervisord starts
  :data:`SONIC_FRR_DAEMONS`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from railab.topologies.naming import eth_index, sonic_port
from railab.topologies.qos import DEFAULT_QOS, QosProfile

#: Force10-S6000 (sonic-vs default HwSKU) lanes, Ethernet0..Ethernet124, in port order.
S6000_LANES = [
    "25,26,27,28", "29,30,31,32", "33,34,35,36", "37,38,39,40", "45,46,47,48", "41,42,43,44",
    "1,2,3,4", "5,6,7,8", "13,14,15,16", "9,10,11,12", "17,18,19,20", "21,22,23,24",
    "53,54,55,56", "49,50,51,52", "57,58,59,60", "61,62,63,64", "69,70,71,72", "65,66,67,68",
    "73,74,75,76", "77,78,79,80", "109,110,111,112", "105,106,107,108", "113,114,115,116",
    "117,118,119,120", "125,126,127,128", "121,122,123,124", "81,82,83,84", "85,86,87,88",
    "93,94,95,96", "89,90,91,92", "101,102,103,104", "97,98,99,100",
]
HWSKU = "Force10-S6000"
HWSKU_SPEED_MBPS = 40000
#: SONiC device types (``DEVICE_METADATA.type``) of railab's tiers (back-end fabric types).
DEVICE_TYPES = {"leaf": "BackEndToRRouter", "spine": "BackEndLeafRouter"}
#: railab's own directory in a sonic-vs node: no path docker-sonic-vs writes or moves onto.
CONFIG_DIR = "/etc/railab"
#: Where frr.conf is bound in a sonic-vs node (applied with ``vtysh -f`` after boot).
FRR_CONF_TARGET = f"{CONFIG_DIR}/frr.conf"
#: The config_db.json path start.sh copies from on master images since 2026-03.
VAR_SONIC_CONFIG_DB = "/var/sonic/config_db.json"
#: Paths start.sh ``mv``\ s or writes onto: never a bind target.
START_SH_WRITES = ("/etc/sonic/config_db.json", "/etc/sonic/init_cfg.json", "/etc/sonic/copp_cfg.json")
#: FRR daemons railab starts in a sonic-vs node (supervisord programs; no bfdd in the image).
SONIC_FRR_DAEMONS = ("zebra", "staticd", "bgpd")
#: Redis DB numbers of SONiC's database_config.json (APPL_DB 0, CONFIG_DB 4).
APPL_DB, CONFIG_DB = "APPL_DB", "CONFIG_DB"
#: Lossless buffer pool / PG names (SONiC's conventions, ``buffers_config.j2``).
LOSSLESS_POOL = "ingress_lossless_pool"
#: The egress pool and queue profile of a lab with ``lab.capacity.shared_buffer`` (SONiC's
#: names: sonic-buildimage's buffer templates bind lossless queues 3-4 to
#: ``egress_lossless_profile`` in ``egress_lossless_pool``).
EGRESS_LOSSLESS_POOL = "egress_lossless_pool"
EGRESS_LOSSLESS_PROFILE = "egress_lossless_profile"
MAP_NAME = "AZURE"


@dataclass(frozen=True)
class SonicImage:
    """One docker-sonic-vs image generation: where ``config_db.json`` is bound
    (``config_db_target``) and whether railab loads it into CONFIG_DB after boot
    (``load_after_boot``; False: start.sh loads it itself)."""

    name: str
    config_db_target: str
    load_after_boot: bool
    description: str


#: The image generations an intent names with ``lab.sonic_image`` (default: ``202305``).
SONIC_IMAGES = {
    "202305": SonicImage(
        "202305", f"{CONFIG_DIR}/config_db.json", True,
        "any docker-sonic-vs (202012..202505, master): config_db.json loaded into CONFIG_DB "
        "after boot"),
    "master": SonicImage(
        "master", VAR_SONIC_CONFIG_DB, False,
        "master images since 2026-03: start.sh copies /var/sonic/config_db.json at boot"),
}
DEFAULT_SONIC_IMAGE = "202305"


def sonic_image(name: str | None) -> SonicImage:
    """The :class:`SonicImage` called ``name`` (None: the default). ValueError naming the
    generations for an unknown one."""
    try:
        return SONIC_IMAGES[name or DEFAULT_SONIC_IMAGE]
    except KeyError:
        raise ValueError(f"unknown sonic-vs image generation {name!r}: use one of "
                         f"{', '.join(SONIC_IMAGES)}") from None


def sonic_binds(node: str, image: str | None = None) -> list[str]:
    """containerlab ``binds`` of a sonic-vs node for image generation ``image``:
    ``configs/<node>/config_db.json`` at the generation's target and ``configs/<node>/frr.conf``
    at :data:`FRR_CONF_TARGET`. None of them is a path start.sh moves onto."""
    gen = sonic_image(image)
    return [f"configs/{node}/config_db.json:{gen.config_db_target}",
            f"configs/{node}/frr.conf:{FRR_CONF_TARGET}"]


@dataclass(frozen=True)
class Step:
    """One post-deploy command in a sonic-vs node: ``argv`` run in the container; with
    ``expect`` set the step is polled (every ``interval_s`` up to ``timeout_s`` seconds) until
    its stdout, stripped, equals ``expect``; ``check`` False ignores a non-zero exit."""

    name: str
    argv: tuple[str, ...]
    expect: str | None = None
    timeout_s: float = 60.0
    interval_s: float = 1.0
    check: bool = True

    def text(self) -> str:
        """The command as a shell line (for dry runs and messages)."""
        return shlex.join(self.argv)


def post_deploy_steps(config_db_target: str | None, frr_conf_target: str | None, *,
                      boot_timeout_s: float = 300.0) -> list[Step]:
    """What railab runs in a sonic-vs node after ``containerlab deploy`` (whose own post-deploy
    started supervisord), in order:

    1. wait until redis answers (``sonic-db-cli PING`` prints ``PONG``, as configdb-load.sh waits);
    2. wait until start.sh's ``configdb-load.sh`` loaded CONFIG_DB (``CONFIG_DB_INITIALIZED`` 1:
       loading before it would be overwritten by the image's defaults, ports admin-down);
    3. when config_db.json is staged (not at :data:`VAR_SONIC_CONFIG_DB`): merge it into
       CONFIG_DB (``sonic-cfggen -j FILE --write-to-db``, what ``config load`` runs);
    4. wait for SONiC's port readiness (``PORT_TABLE:PortInitDone`` in APPL_DB);
    5. start :data:`SONIC_FRR_DAEMONS` under supervisord (``already started`` is fine) and wait
       until ``supervisorctl status`` shows each RUNNING;
    6. apply the FRR config: ``vtysh -f <frr.conf>``.

    ``config_db_target`` / ``frr_conf_target``: where the node binds them (None: not bound, the
    step is left out). ``boot_timeout_s`` bounds each wait.
    """
    t = boot_timeout_s
    steps = [
        Step("redis answers", ("sh", "-c", "sonic-db-cli PING | grep -q PONG && echo PONG"),
             expect="PONG", timeout_s=t),
        Step("start.sh loaded CONFIG_DB", ("sonic-db-cli", CONFIG_DB, "GET", "CONFIG_DB_INITIALIZED"),
             expect="1", timeout_s=t),
    ]
    if config_db_target and config_db_target != VAR_SONIC_CONFIG_DB:
        steps.append(Step("load config_db.json into CONFIG_DB",
                          ("sonic-cfggen", "-j", config_db_target, "--write-to-db")))
    steps.append(Step("ports initialised", ("sonic-db-cli", APPL_DB, "EXISTS", "PORT_TABLE:PortInitDone"),
                      expect="1", timeout_s=t))
    if frr_conf_target:
        daemons = " ".join(SONIC_FRR_DAEMONS)
        steps += [
            Step("start FRR daemons", ("supervisorctl", "start", *SONIC_FRR_DAEMONS), check=False),
            Step("FRR daemons running",
                 ("sh", "-c", f"supervisorctl status {daemons} | grep -c RUNNING"),
                 expect=str(len(SONIC_FRR_DAEMONS)), timeout_s=60.0),
            Step("apply frr.conf", ("vtysh", "-f", frr_conf_target)),
        ]
    return steps


def post_deploy_for_binds(binds: Mapping[str, str], *,
                          boot_timeout_s: float = 300.0) -> list[Step]:
    """The sonic-vs node kind's post-deploy hook (``NodeKind.post_deploy``): the steps of
    :func:`post_deploy_steps` for a node whose ``binds`` map container paths to the names of
    the bound files (``{"/etc/railab/config_db.json": "config_db.json", ...}``).

    Raises ValueError naming the path when a bind targets a path start.sh moves or writes onto
    (:data:`START_SH_WRITES`: the ``mv`` fails with EBUSY and SONiC never starts).
    """
    bad = sorted(t for t in binds if t in START_SH_WRITES)
    if bad:
        raise ValueError(f"binds {', '.join(bad)}, which docker-sonic-vs's start.sh moves onto (mv fails "
                         f"with EBUSY and SONiC never starts): regenerate the lab (railab generate), "
                         f"which binds /etc/railab/ or /var/sonic/ (docs/containerlab.md)")
    by_file = {name: target for target, name in binds.items()}
    return post_deploy_steps(by_file.get("config_db.json"), by_file.get("frr.conf"),
                             boot_timeout_s=boot_timeout_s)


@dataclass
class SonicSwitch:
    """Input for one sonic-vs node's config_db: ``server_ports`` maps ``ethK`` -> ``a.b.c.d/31``
    (leaf side), ``fabric_ports`` lists the leaf-spine ``ethK`` ports (unnumbered unless in
    ``fabric_addresses``: ``ethK`` -> ``a.b.c.d/31``, used for parallel links),
    ``descriptions`` ``ethK`` -> peer, ``max_ports`` the kind's data ports (sonic-vs: 32),
    ``qos`` the lab's QoS profile."""

    name: str
    role: str
    asn: int
    loopback: str
    mtu: int
    server_ports: dict[str, str] = field(default_factory=dict)
    fabric_ports: list[str] = field(default_factory=list)
    descriptions: dict[str, str] = field(default_factory=dict)
    max_ports: int | None = len(S6000_LANES)
    qos: QosProfile = DEFAULT_QOS
    fabric_addresses: dict[str, str] = field(default_factory=dict)


def lossless_profile_name(qp: QosProfile) -> str:
    """SONiC's name of the lossless PG profile: ``pg_lossless_<speed Mb/s>_<cable>m_profile``."""
    return f"pg_lossless_{qp.pfc.speed_gbps * 1000}_{int(qp.pfc.cable_m)}m_profile"


def config_db(sw: SonicSwitch) -> dict:
    """Build the config_db document (a dict of tables) for one sonic-vs switch.

    Raises NamingError (a ValueError) for a port beyond the HwSKU's 32 and KeyError for a
    ``role`` other than leaf/spine."""
    ports = sorted(list(sw.server_ports) + list(sw.fabric_ports), key=eth_index)
    qp = sw.qos
    lossless = ",".join(map(str, qp.lossless_queues))
    pg_range = f"{min(qp.lossless_queues)}-{max(qp.lossless_queues)}" \
        if len(qp.lossless_queues) > 1 else str(qp.lossless_queues[0])
    profile = lossless_profile_name(qp)
    port_tbl: dict[str, dict] = {}
    intf: dict[str, dict] = {}
    qos: dict[str, dict] = {}
    queue: dict[str, dict] = {}
    buffer_queue: dict[str, dict] = {}
    buffer_pg: dict[str, dict] = {}
    cable: dict[str, str] = {}
    for eth in ports:
        sp = sonic_port(eth, min(sw.max_ports or len(S6000_LANES), len(S6000_LANES)))
        idx = eth_index(eth) - 1
        port_tbl[sp] = {
            "admin_status": "up",
            "alias": f"fortyGigE0/{4 * idx}",
            "description": sw.descriptions.get(eth, ""),
            "index": str(idx),
            "lanes": S6000_LANES[idx],
            "mtu": str(sw.mtu),
            "speed": str(HWSKU_SPEED_MBPS),
        }
        if eth in sw.server_ports:
            intf[sp] = {}
            intf[f"{sp}|{sw.server_ports[eth]}"] = {}
        elif eth in sw.fabric_addresses:
            intf[sp] = {"ipv6_use_link_local_only": "enable"}
            intf[f"{sp}|{sw.fabric_addresses[eth]}"] = {}
        else:
            intf[sp] = {"ipv6_use_link_local_only": "enable"}
        qos[sp] = {
            "dscp_to_tc_map": MAP_NAME,
            "tc_to_queue_map": MAP_NAME,
            "tc_to_pg_map": MAP_NAME,
            "pfc_to_queue_map": MAP_NAME,
            "pfc_enable": lossless,
        }
        for q in qp.lossless_queues:
            queue[f"{sp}|{q}"] = {"wred_profile": qp.name}
        buffer_pg[f"{sp}|{pg_range}"] = {"profile": profile}
        buffer_queue[f"{sp}|{pg_range}"] = {"profile": EGRESS_LOSSLESS_PROFILE}
        cable[sp] = f"{int(qp.pfc.cable_m)}m"
    dscp_map = {str(d): str(t) for d, t in qp.dscp_to_tc().items()}
    ecn = qp.ecn
    wred = {"ecn": ecn.mode}
    for color in ("green", "yellow", "red"):
        wred |= {
            f"{color}_drop_probability": str(ecn.pmax_percent),
            f"{color}_max_threshold": str(ecn.kmax_bytes),
            f"{color}_min_threshold": str(ecn.kmin_bytes),
            f"wred_{color}_enable": "true",
        }
    pfc = qp.pfc
    # the pool holds every lossless PG's headroom (ports x lossless priorities x headroom)
    pool_size = len(ports) * len(qp.lossless_queues) * pfc.headroom_bytes
    pools = {LOSSLESS_POOL: {"mode": "dynamic", "size": str(pool_size), "type": "ingress"}}
    profiles = {profile: {
        "dynamic_th": "0",
        "pool": LOSSLESS_POOL,
        "size": str(pfc.headroom_bytes),
        "xoff": str(pfc.xoff_bytes),
        "xon": str(pfc.xon_bytes),
    }}
    shared = {}
    sb = qp.capacity.shared_buffer
    if sb is not None:  # the lossless queues' shared egress pool and dynamic threshold
        pools[EGRESS_LOSSLESS_POOL] = {"mode": "dynamic", "size": str(sb.pool_bytes),
                                       "type": "egress"}
        profiles[EGRESS_LOSSLESS_PROFILE] = {"dynamic_th": str(sb.dynamic_th),
                                             "pool": EGRESS_LOSSLESS_POOL, "size": "0"}
        shared = {"BUFFER_QUEUE": buffer_queue}
    wd = qp.capacity.pfc_watchdog
    if wd is not None:  # SONiC's PFC watchdog on every port (sonic-pfcwd.yang)
        shared["PFC_WD"] = {port: {"action": wd.action, "detection_time": str(wd.detection_time_ms),
                                   "restoration_time": str(wd.restoration_time_ms)}
                            for port in port_tbl}
    return {
        "DEVICE_METADATA": {
            "localhost": {
                "bgp_asn": str(sw.asn),
                "docker_routing_config_mode": "split-unified",
                "hostname": sw.name,
                "hwsku": HWSKU,
                "platform": "x86_64-kvm_x86_64-r0",
                "type": DEVICE_TYPES[sw.role],
            }
        },
        "PORT": port_tbl,
        "INTERFACE": intf,
        "LOOPBACK_INTERFACE": {"Loopback0": {}, f"Loopback0|{sw.loopback}/32": {}},
        "DSCP_TO_TC_MAP": {MAP_NAME: dscp_map},
        "TC_TO_QUEUE_MAP": {MAP_NAME: {str(t): str(q) for t, q in qp.tc_to_queue().items()}},
        "TC_TO_PRIORITY_GROUP_MAP": {MAP_NAME: {str(t): str(t) for t in range(8)}},
        "MAP_PFC_PRIORITY_TO_QUEUE": {MAP_NAME: {str(p): str(q) for p, q in qp.tc_to_queue().items()}},
        "PORT_QOS_MAP": qos,
        "WRED_PROFILE": {qp.name: wred},
        "QUEUE": queue,
        "CABLE_LENGTH": {MAP_NAME: cable},
        "BUFFER_POOL": pools,
        "BUFFER_PROFILE": profiles,
        "BUFFER_PG": buffer_pg,
    } | shared


def render_config_db(sw: SonicSwitch) -> str:
    """Deterministic JSON text of :func:`config_db` (sorted keys, 2-space indent)."""
    return json.dumps(config_db(sw), indent=2, sort_keys=True) + "\n"
