"""SONiC-VS ``config_db.json`` rendering (bound to ``/etc/sonic/config_db.json`` in the node).

Table and field names follow SONiC's *Configuration Database Manual*
(sonic-net/SONiC ``doc/Configuration.md``) and the YANG models in ``sonic-yang-models``:

* ``DEVICE_METADATA|localhost``: ``hostname``, ``bgp_asn``, ``hwsku``, ``type`` and
  ``docker_routing_config_mode``. railab emits one integrated ``frr.conf`` (bound to
  ``/etc/frr/frr.conf``), which SONiC's FRR container uses unchanged only in mode
  ``split-unified`` (``dockers/docker-fpm-frr/docker_init.sh``: ``split`` expects per-daemon
  files, ``unified`` regenerates ``frr.conf`` from config_db templates). "Split" in the issue
  means "FRR config managed outside config_db"; ``split-unified`` is that mode for one file.
* ``PORT|EthernetN``: ``lanes``, ``alias``, ``mtu``, ``speed``, ``admin_status``. Lanes and speed
  are those of the sonic-vs default HwSKU (Force10-S6000, 32 x 40G, ``port_config.ini``): the vs
  SAI maps ``eth<k>`` to the port whose index is ``k-1`` (``eth1 -> Ethernet0``,
  ``eth2 -> Ethernet4``), and a port whose lanes differ from the HwSKU never comes up. The
  production speed (400G) is recorded in ``lab.json``.
* ``INTERFACE``: fabric ports ``{"ipv6_use_link_local_only": "enable"}`` (BGP unnumbered, RFC
  5549/8950); server-facing ports carry the leaf side of the NIC's /31 (``INTERFACE|EthernetN|ip``).
* ``LOOPBACK_INTERFACE|Loopback0|<loopback>/32`` (router-id).
* RoCE QoS (seed: "Easy RoCE": PFC + ECN, DCQCN), every number from the lab's
  :class:`railab.topologies.qos.QosProfile` (``lab.json`` ``qos``; the FRR lab reads the same):
  ``DSCP_TO_TC_MAP|AZURE`` with DSCP 26 -> TC 3 (RoCEv2 data; SONiC's default map puts 26 in a
  lossy class) and DSCP 48 -> TC 6 (CNP), everything else TC 0; ``TC_TO_QUEUE_MAP``;
  ``PORT_QOS_MAP|EthernetN`` with ``pfc_enable "3,4"`` and the DSCP map;
  ``WRED_PROFILE|AZURE_LOSSLESS`` with ``wred_green_enable``, ``ecn "ecn_all"`` and the Kmin/Kmax/
  Pmax thresholds; ``QUEUE|EthernetN|3`` and ``|4`` binding it.
* Port names: :func:`railab.topologies.naming.sonic_port` (``eth<k>`` -> ``Ethernet<4(k-1)>``).
"""

from __future__ import annotations

import json
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

@dataclass
class SonicSwitch:
    """Input for one sonic-vs node's config_db: ``server_ports`` maps ``ethK`` -> ``a.b.c.d/31``
    (leaf side), ``fabric_ports`` lists unnumbered ``ethK`` ports, ``descriptions`` ``ethK`` -> peer,
    ``max_ports`` the kind's data ports (sonic-vs: 32), ``qos`` the lab's QoS profile."""

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


def config_db(sw: SonicSwitch) -> dict:
    """Build the config_db document (a dict of tables) for one sonic-vs switch."""
    ports = sorted(list(sw.server_ports) + list(sw.fabric_ports), key=eth_index)
    qp = sw.qos
    lossless = ",".join(map(str, qp.lossless_queues))
    port_tbl: dict[str, dict] = {}
    intf: dict[str, dict] = {}
    qos: dict[str, dict] = {}
    queue: dict[str, dict] = {}
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
        else:
            intf[sp] = {"ipv6_use_link_local_only": "enable"}
        qos[sp] = {
            "dscp_to_tc_map": "AZURE",
            "tc_to_queue_map": "AZURE",
            "pfc_enable": lossless,
        }
        for q in qp.lossless_queues:
            queue[f"{sp}|{q}"] = {"wred_profile": qp.name}
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
    return {
        "DEVICE_METADATA": {
            "localhost": {
                "bgp_asn": str(sw.asn),
                "docker_routing_config_mode": "split-unified",
                "hostname": sw.name,
                "hwsku": HWSKU,
                "platform": "x86_64-kvm_x86_64-r0",
                "type": "LeafRouter" if sw.role == "leaf" else "SpineRouter",
            }
        },
        "PORT": port_tbl,
        "INTERFACE": intf,
        "LOOPBACK_INTERFACE": {"Loopback0": {}, f"Loopback0|{sw.loopback}/32": {}},
        "DSCP_TO_TC_MAP": {"AZURE": dscp_map},
        "TC_TO_QUEUE_MAP": {"AZURE": {str(t): str(q) for t, q in qp.tc_to_queue().items()}},
        "PORT_QOS_MAP": qos,
        "WRED_PROFILE": {qp.name: wred},
        "QUEUE": queue,
    }


def render_config_db(sw: SonicSwitch) -> str:
    """Deterministic JSON text of :func:`config_db` (sorted keys, 2-space indent)."""
    return json.dumps(config_db(sw), indent=2, sort_keys=True) + "\n"
