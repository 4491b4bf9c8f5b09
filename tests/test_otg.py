"""``railab otg``: the Open Traffic Generator API over a lab (railab.otg; docs/otg.md).

Unit tests (no root): the API's shapes and errors with Starlette's TestClient on a generated
``mini-lossless`` lab (not up: its lab.json only): a config is checked against the lab (unknown
location, malformed header, unsupported features get OTG's ``Error`` object with 400 / 501),
the units (fabric rate / time scale), metrics requests, the token rules of ``railab ui``.

Live tests (root, Debian FRR): a real ``snappi`` client (PyPI, pinned in the ``test`` extra)
against ``railab otg`` serving the session's ``mini-lossless`` lab on a free port: a two-port
IPv4/UDP flow of a fixed number of frames arrives whole (tx = rx, loss 0) through the expected
number of hops; a config with an unknown port location gets a 400 Error through snappi; a port
link down / up through control state is a railab fault; a 4:1 RoCEv2 incast with DCQCN has CE
and CNPs and its rates match ``railab traffic --pattern incast``'s on the same lab within 15 %;
a server with ``--token`` refuses a tokenless snappi and answers one that sends it. On the
session's ``mini`` lab: a flow aimed by ``udp.src_port`` at the path ``railab drill`` found
lossy, its uplink taken down through control state: the convergence metric within 25 % of the
drill's outage.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from starlette.testclient import TestClient

from railab import otg as O
from railab.errors import UsageError
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec


# ---- unit: a Lab over a generated lab.json -------------------------------------------------------
@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return generate("mini-lossless", tmp_path_factory.mktemp("otg") / "otgu", name="otgu")


def _lab(spec_dir) -> O.Lab:
    lab = O.Lab.__new__(O.Lab)
    lab.name = "otgu"
    lab.spec = LabSpec.load(spec_dir)
    lab.labdir = spec_dir
    lab.netns_of = lambda node: f"clab-otgu-{node}"
    lab.units = O.Units.of(lab.spec)
    return lab


@pytest.fixture()
def client(spec_dir):
    server = O.OtgServer(O.OtgConfig(lab="otgu"), lab=_lab(spec_dir))
    server.lab_faults = list  # the lab is not up: no fault records
    server.lab_gone = lambda: False  # ... and stands for one that is
    with TestClient(server.app, base_url="http://127.0.0.1:8443") as c:
        c.server = server
        yield c


def _cfg(**flow_over) -> dict:
    flow = {"name": "f1", "tx_rx": {"choice": "port", "port": {"tx_name": "p1", "rx_names": ["p2"]}},
            "packet": [{"choice": "ethernet", "ethernet": {}}, {"choice": "ipv4", "ipv4": {}},
                       {"choice": "udp", "udp": {}}],
            "size": {"choice": "fixed", "fixed": 130},
            "rate": {"choice": "pps", "pps": 1000},
            "duration": {"choice": "fixed_packets", "fixed_packets": {"packets": 100}}}
    flow.update(flow_over)
    return {"ports": [{"name": "p1", "location": "srv1:eth1"}, {"name": "p2", "location": "srv3:gpu0"}],
            "flows": [flow]}


def _error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) >= {"code", "errors"} and body["code"] == status and body["errors"], body
    assert body.get("kind") in (None, "validation", "internal")
    return body


def test_version(client):
    r = client.get("/capabilities/version")
    assert r.status_code == 200
    assert r.json()["api_spec_version"] == O.API_VERSION and r.json()["app_version"].startswith("railab ")


def test_config_set_and_get(client):
    r = client.post("/config", json=_cfg())
    assert r.status_code == 200, r.text
    warns = r.json()["warnings"]
    assert any("time scale" in w for w in warns), warns  # the units are said
    assert client.get("/config").json() == _cfg()
    fl = client.server.state.flows["f1"]
    assert (fl.tx, fl.rx, fl.frame, fl.payload, fl.packets) == ("p1", "p2", 130, 68, 100)
    p2 = client.server.state.ports["p2"]
    assert (p2.server, p2.nic) == ("srv3", 1)  # gpu0 is NIC 1


def test_units_fabric_rate_over_time_scale(spec_dir):
    lab = _lab(spec_dir)
    u = lab.units
    cap = lab.spec.qos.capacity
    assert u.time_scale == pytest.approx(cap.fabric_rate_gbps * 1000 / cap.port_rate_mbps)
    assert u.lab_pps({"choice": "pps", "pps": 1e6}, 130) == pytest.approx(1e6 / u.time_scale)
    # 100 % of a fabric line in frames of 130 bytes (+20 of preamble and gap) = the lab's line
    lab_line_pps = cap.port_rate_mbps * 1e6 / (150 * 8)
    assert u.lab_pps({"choice": "percentage", "percentage": 100}, 130) == pytest.approx(lab_line_pps)
    assert u.lab_pps({"choice": "gbps", "gbps": 1}, 130) == pytest.approx(1e9 / 1200 / u.time_scale)
    assert O.Units().lab_pps({"choice": "pps", "pps": 500}, 64) == 500
    with pytest.raises(O.OtgError) as exc:
        O.Units().lab_pps({"choice": "percentage", "percentage": 50}, 64)
    assert exc.value.status == 501


@pytest.mark.parametrize("cfg, status, words", [
    ({"ports": [{"name": "p1", "location": "srv99:eth1"}]}, 400, "srv99:eth1"),
    ({"ports": [{"name": "p1", "location": "srv1:eth9"}]}, 400, "not a NIC"),
    ({"ports": [{"name": "p1", "location": "; rm -rf /"}]}, 400, "not SERVER:ethN"),
    ({"ports": [{"name": "p1", "location": "srv1:eth1"}, {"name": "p1", "location": "srv2:eth1"}]}, 400, "twice"),
    ({"ports": [{"location": "srv1:eth1"}]}, 400, "name"),
    ([1, 2], 400, "JSON object"),
    ({"lags": [{"name": "l"}]}, 501, "config.lags"),
    ({"ports": [{"name": "p1", "location": "g1-leaf1"}]}, 400, "not SERVER:ethN"),
    ({"captures": [{"name": "c"}]}, 501, "config.captures"),
])
def test_bad_config_gets_the_error_object(client, cfg, status, words):
    body = _error(client.post("/config", json=cfg), status)
    assert words in " ".join(body["errors"]), body


@pytest.mark.parametrize("over, status, words", [
    ({"packet": [{"choice": "ethernet", "ethernet": {}}, {"choice": "bogus", "bogus": {}}]}, 400, "bogus"),
    ({"packet": [{"choice": "ethernet", "ethernet": {}}, {"choice": "ipv4", "ipv4": {}},
                 {"choice": "tcp", "tcp": {}}]}, 501, "tcp"),
    ({"packet": [{"choice": "udp", "udp": {}}, {"choice": "ipv4", "ipv4": {}}]}, 400, "order"),
    ({"packet": [{"choice": "ipv4", "ipv4": {"src": {"choice": "increment", "increment": {}}}}]}, 501, "increment"),
    ({"packet": "eth"}, 400, "list"),
    ({"tx_rx": {"choice": "port", "port": {"tx_name": "p1", "rx_names": ["nope"]}}}, 400, "nope"),
    ({"tx_rx": {"choice": "port", "port": {"tx_name": "p1"}}}, 400, "needs ipv4.dst"),
    ({"tx_rx": {"choice": "port", "port": {"tx_name": "p1"}},
      "packet": [{"choice": "ethernet", "ethernet": {}}, {"choice": "vlan", "vlan": {}}]}, 501, "vlan"),
    ({"tx_rx": {"choice": "port", "port": {"tx_name": "p1"}},
      "packet": [{"choice": "ethernet", "ethernet": {}}, {"choice": "ipv4", "ipv4": {
          "dst": {"choice": "value", "value": "300.1.1.1"}}}]}, 400, "not an IPv4 address"),
    ({"tx_rx": {"choice": "port", "port": {"tx_name": "p1", "rx_names": ["p1"]}}}, 400, "same port"),
    ({"size": {"choice": "fixed", "fixed": 20}}, 400, "size.fixed"),
    ({"size": {"choice": "increment", "increment": {}}}, 501, "size.increment"),
    ({"rate": {"choice": "pps", "pps": 0}}, 400, "> 0"),
    ({"duration": {"choice": "burst", "burst": {}}}, 501, "burst"),
    ({"duration": {"choice": "fixed_packets", "fixed_packets": {"packets": 0}}}, 400, "packets"),
    ({"metrics": {"enable": True, "latency": {"enable": True}}}, 501, "latency"),
])
def test_bad_flow_gets_the_error_object(client, over, status, words):
    body = _error(client.post("/config", json=_cfg(**over)), status)
    assert words in " ".join(body["errors"]), body
    assert client.server.state.flows == {}  # nothing was kept


def test_header_values_are_replaced_with_warnings(client):
    over = {"packet": [{"choice": "ethernet", "ethernet": {"src": {"choice": "value", "value": "00:11:22:33:44:55"}}},
                       {"choice": "ipv4", "ipv4": {"dst": {"choice": "value", "value": "20.1.1.1"}}},
                       {"choice": "udp", "udp": {"dst_port": {"choice": "value", "value": 6010}}}],
            "size": {"choice": "fixed", "fixed": 128}}
    r = client.post("/config", json=_cfg(**over))
    assert r.status_code == 200, r.text
    w = " ".join(r.json()["warnings"])
    for words in ("00:11:22:33:44:55", "20.1.1.1 replaced", "6010", "126 bytes, not 128"):
        assert words in w, w


def test_udp_src_port_aims_the_flow(client):
    """A two-port flow's ``udp.src_port`` (a fixed value) is the UDP source port its packets
    carry, the ECMP entropy the switches hash: the engines' flow gets it (a script aims the flow
    at a path, e.g. the one ``railab drill`` or ``railab traceroute`` found); without it the
    flow carries its QP pair's port, QP #0 for the first flow between two NICs (as ``railab
    traffic`` numbers them), #1 for a second one. Not a port, or a list of them: 400 / 501."""
    from railab.traffic import load, stream

    udp = {"choice": "udp", "udp": {"src_port": {"choice": "value", "value": 49999},
                                    "dst_port": {"choice": "value", "value": 4791}}}
    cfg = _cfg(packet=[{"choice": "ethernet", "ethernet": {}}, {"choice": "ipv4", "ipv4": {}}, udp])
    cfg["flows"].append(dict(_cfg()["flows"][0], name="f2"))
    r = client.post("/config", json=cfg)
    assert r.status_code == 200, r.text
    assert not any("src_port" in w or "dst_port" in w for w in r.json()["warnings"])  # kept; 4791 is RoCEv2's
    srv = client.server
    flows = [srv.state.flows["f1"], srv.state.flows["f2"]]
    assert [f.sport for f in flows] == [49999, None]
    qps = srv._qp_numbers(flows)
    assert qps == {"f1": 0, "f2": 1}  # two flows between the same NICs: two QPs
    aimed, own = (srv._engine_flow(f, srv.state.ports, 1, qps[f.name]) for f in flows)
    assert stream.flow_sport(aimed) == load.qp_sport(aimed, "per-qp") == 49999
    assert own.sport is None and own.qp == 1  # its QP pair's port: QP #1's, not #0's
    assert stream.flow_sport(own) != stream.flow_sport(dataclasses.replace(own, qp=0))
    for value, status in ((0, 400), (70000, 400), ("x", 400)):
        udp["udp"]["src_port"]["value"] = value
        _error(client.post("/config", json=cfg), status)
    udp["udp"]["src_port"] = {"choice": "values", "values": [5000, 5001]}
    assert "src_port.values" in " ".join(_error(client.post("/config", json=cfg), 501)["errors"])


def test_tx_only_flow_sends_its_frames_as_configured(client):
    """A flow with a tx port only (OTG's quickstart): the frames exactly as configured, the
    patterns cycled (values, increment), custom bytes after the headers, padded to size - FCS."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    cus = b"..QUICKSTART SNAPPI.."
    flow = {"name": "flow", "tx_rx": {"choice": "port", "port": {"tx_name": "p1"}},
            "metrics": {"enable": True, "loss": False, "timestamps": False},
            "duration": {"choice": "fixed_packets", "fixed_packets": {"packets": 100}},
            "size": {"choice": "fixed", "fixed": 128},
            "packet": [{"choice": "ethernet", "ethernet": {"src": {"choice": "value", "value": "00:11:22:33:44:55"},
                                                           "dst": {"choice": "value", "value": "00:11:22:33:44:66"}}},
                       {"choice": "ipv4", "ipv4": {"src": {"choice": "value", "value": "10.1.1.1"},
                                                   "dst": {"choice": "value", "value": "20.1.1.1"}}},
                       {"choice": "udp", "udp": {
                           "src_port": {"choice": "values", "values": [5010, 5015, 5020, 5025, 5030]},
                           "dst_port": {"choice": "increment", "increment": {"start": 6010, "step": 5, "count": 5}}}},
                       {"choice": "custom", "custom": {"bytes": cus.hex()}}]}
    r = client.post("/config", json={"ports": [{"name": "p1", "location": "srv1:eth1"}], "flows": [flow]})
    assert r.status_code == 200, r.text
    assert any("nothing counts them" in w for w in r.json()["warnings"])
    fs = client.server.state.flows["flow"]
    frames = client.server.raw_frames(fs)
    assert len(frames) == 5 and {len(b) for b in frames} == {124}
    pkts = [Ether(b) for b in frames]
    assert [(p[UDP].sport, p[UDP].dport) for p in pkts] == [(5010 + 5 * i, 6010 + 5 * i) for i in range(5)]
    assert {(p.src, p.dst, p[IP].src, p[IP].dst) for p in pkts} == {
        ("00:11:22:33:44:55", "00:11:22:33:44:66", "10.1.1.1", "20.1.1.1")}
    assert all(bytes(p[UDP].payload).startswith(cus) and p[IP].len == 124 - 14 for p in pkts)
    row = client.post("/monitor/metrics", json={"choice": "flow", "flow": {}}).json()["flow_metrics"][0]
    assert "port_rx" not in row and "loss" not in row and row["frames_rx"] == 0


def test_devices_as_flow_endpoints(client, spec_dir):
    spec = LabSpec.load(spec_dir)
    nic = spec.nic("srv1", 1)
    cfg = {"ports": [{"name": "p1", "location": "srv1:eth1"}, {"name": "p2", "location": "srv2:eth1"}],
           "devices": [{"name": "d1", "ethernets": [{"name": "d1e", "connection": {"choice": "port_name",
                                                                                  "port_name": "p1"},
                                                     "ipv4_addresses": [{"name": "d1ip", "address": str(nic.address.ip),
                                                                         "gateway": "1.2.3.4"}]}]},
                       {"name": "d2", "ethernets": [{"name": "d2e", "connection": {"port_name": "p2"},
                                                     "ipv4_addresses": [{"name": "d2ip", "address": "9.9.9.9"}]}]}],
           "flows": [{"name": "f", "tx_rx": {"choice": "device", "device": {"tx_names": ["d1ip"],
                                                                             "rx_names": ["d2ip"]}}}]}
    r = client.post("/config", json=cfg)
    assert r.status_code == 200, r.text
    w = " ".join(r.json()["warnings"])
    assert "gateway 1.2.3.4 replaced" in w and "address 9.9.9.9 replaced" in w
    assert str(nic.address.ip) + " replaced" not in w  # the lab's own address is no warning
    f = client.server.state.flows["f"]
    assert (f.tx, f.rx) == ("p1", "p2")
    cfg["devices"][0]["bgp"] = {"router_id": "1.1.1.1"}
    assert "bgp" in " ".join(_error(client.post("/config", json=cfg), 501)["errors"])


def test_control_and_metrics_errors(client):
    client.post("/config", json=_cfg())
    _error(client.post("/control/state", json={"choice": "traffic", "traffic": {
        "choice": "flow_transmit", "flow_transmit": {"state": "start", "flow_names": ["nope"]}}}), 400)
    _error(client.post("/control/state", json={"choice": "traffic", "traffic": {
        "choice": "flow_transmit", "flow_transmit": {"state": "pause"}}}), 501)
    _error(client.post("/control/state", json={"choice": "port", "port": {
        "choice": "capture", "capture": {"state": "start"}}}), 501)
    _error(client.post("/control/state", json={"choice": "port", "port": {
        "choice": "link", "link": {"state": "down", "port_names": ["nope"]}}}), 400)
    _error(client.post("/control/state", json={"choice": "bogus"}), 400)
    _error(client.post("/monitor/metrics", json={"choice": "bgpv4"}), 501)
    _error(client.post("/monitor/metrics", json={"choice": "flow", "flow": {"flow_names": ["nope"]}}), 400)
    _error(client.post("/monitor/metrics", json={"choice": "flow", "flow": {"metric_names": ["bogus"]}}), 400)
    _error(client.patch("/config/append", json={}), 501)
    _error(client.post("/monitor/capture", json={}), 501)
    _error(client.get("/nowhere"), 404)
    _error(client.get("/control/state"), 405)
    r = client.post("/config", content=b"{not json")
    _error(r, 400)


def test_link_change_during_an_exercise_gets_the_clis_message(client, tmp_path, monkeypatch):
    """Issue 48 review (E): while an exercise runs on the lab, a port link change answers 409
    with the exercise lock's own message (the one `railab fault` and the console print), and
    changes nothing."""
    from railab.testbed import exercise as store

    monkeypatch.setenv("RAILAB_EXERCISE_DIR", str(tmp_path / "ex"))
    pub = {"lab": "otgu", "level": 1, "disabled": [], "revealed": False}
    store.save("otgu", {"lab": "otgu", "faults": []}, pub)
    client.post("/config", json=_cfg())
    body = _error(client.post("/control/state", json={"choice": "port", "port": {
        "choice": "link", "link": {"state": "down", "port_names": ["p1"]}}}), 409)
    assert body["errors"] == [store.refusal("otgu", pub)]
    with pytest.raises(UsageError) as exc:  # the CLI's words for the same lock
        store.guard("otgu", "fault")
    assert str(exc.value) == body["errors"][0]
    assert client.server.state.faults == {}


def test_switch_ports_and_events(client):
    """A switch's end of a lab link is a port for link events only; control-plane events are
    not done; convergence needs a flow that ran as a probe stream."""
    cfg = _cfg()
    cfg["ports"].append({"name": "up", "location": "g1-leaf1:eth9"})
    cfg["events"] = {"dp_events": {"enable": True, "rx_rate_threshold": 95}, "cp_events": {"enable": False}}
    assert client.post("/config", json=cfg).status_code == 200
    up = client.server.state.ports["up"]
    assert (up.server, up.interface, up.nic) == ("g1-leaf1", "eth9", 0) and client.server.state.dp_events
    _error(client.post("/config", json=dict(cfg, ports=cfg["ports"][:2] + [
        {"name": "up", "location": "g1-leaf1:eth99"}])), 400)
    bad = json.loads(json.dumps(cfg))
    bad["flows"][0]["tx_rx"]["port"]["rx_names"] = ["up"]
    assert "switch port" in " ".join(_error(client.post("/config", json=bad), 400)["errors"])
    bad = dict(cfg, events={"cp_events": {"enable": True}})
    assert "cp_events" in " ".join(_error(client.post("/config", json=bad), 501)["errors"])
    body = _error(client.post("/monitor/metrics", json={"choice": "convergence", "convergence": {
        "flow_names": ["f1"]}}), 400)
    assert "probe stream" in " ".join(body["errors"])


def test_stopping_part_of_a_run_is_refused(client):
    cfg = _cfg()
    cfg["flows"].append(dict(cfg["flows"][0], name="f2"))
    assert client.post("/config", json=cfg).status_code == 200
    client.server.state.counters["f1"].running = True  # as the traffic thread marks a running flow
    body = _error(client.post("/control/state", json={"choice": "traffic", "traffic": {
        "choice": "flow_transmit", "flow_transmit": {"state": "stop", "flow_names": ["f2"]}}}), 501)
    assert "f1" in " ".join(body["errors"])


def test_metrics_before_start_are_zero(client):
    client.post("/config", json=_cfg())
    rows = client.post("/monitor/metrics", json={"choice": "flow", "flow": {}}).json()["flow_metrics"]
    assert [(r["name"], r["port_tx"], r["port_rx"], r["transmit"], r["frames_tx"], r["frames_rx"])
            for r in rows] == [("f1", "p1", "p2", "stopped", 0, 0)]
    rows = client.post("/monitor/metrics", json={"choice": "flow", "flow": {"metric_names": ["frames_tx"]}}
                       ).json()["flow_metrics"]
    assert set(rows[0]) == {"name", "port_tx", "port_rx", "frames_tx"}
    ports = client.post("/monitor/metrics", json={"choice": "port", "port": {}}).json()["port_metrics"]
    assert [p["name"] for p in ports] == ["p1", "p2"] and ports[0]["link"] == "up"
    assert ports[0]["speed"] == 400 * 1000 * 1000 // 8  # KBps of a 400 Gb/s fabric port


def test_flow_counters_to_metrics(client):
    """Counters the engine filled become the API's rates: lab rates times the time scale."""
    client.post("/config", json=_cfg())
    s = client.server
    c = s.state.counters["f1"]
    c.frames_tx, c.frames_rx, c.bytes_tx, c.bytes_rx = 100, 90, 13000, 11700
    c.started, c.ended = 10.0, 12.0
    row = client.post("/monitor/metrics", json={"choice": "flow", "flow": {}}).json()["flow_metrics"][0]
    scale = s.lab.units.time_scale
    assert row["loss"] == pytest.approx(10.0)
    assert row["frames_tx_rate"] == pytest.approx(50 * scale)
    assert row["tx_rate_bps"] == pytest.approx(13000 * 8 / 2 * scale)
    assert row["rx_l1_rate_bps"] == pytest.approx(45 * scale * 150 * 8)


def incast_config(api, senders: list[str], receiver: str, addr_of: dict[str, str], *, dcqcn: bool = True,
                  size_kb: int = 256, line: int = 100):
    """An N:1 RoCEv2 incast in snappi's model: a device per port (Ethernet, IPv4, a RoCEv2
    peer towards the receiver with one QP), one ``Rocev2Flow`` per sender (RDMA WRITE of
    ``size_kb`` KiB at ``line`` % of the port), DCQCN on every sender's port."""
    cfg = api.config()
    cfg.ports.port(name="rx", location=receiver)
    for i, loc in enumerate(senders):
        p = cfg.ports.port(name=f"tx{i}", location=loc)[-1]
        d = cfg.devices.device(name=f"d{i}")[-1]
        e = d.ethernets.add(name=f"d{i}e")
        e.connection.port_name = p.name
        ip = e.ipv4_addresses.add(name=f"d{i}ip", address=addr_of[loc], gateway="0.0.0.0", prefix=31)
        peer = d.rocev2.ipv4_interfaces.add(ipv4_name=ip.name).peers.add(
            name=f"d{i}peer", destination_ip_address=addr_of[receiver])
        peer.qps.add(qp_name=f"qp{i}")
    d = cfg.devices.device(name="drx")[-1]
    e = d.ethernets.add(name="drxe")
    e.connection.port_name = "rx"
    e.ipv4_addresses.add(name="drxip", address=addr_of[receiver], gateway="0.0.0.0", prefix=31)
    sf = cfg.stateful_flows.rocev2.add()
    for i in range(len(senders)):
        tp = sf.tx_ports.add(port_name=f"tx{i}")
        tp.transmit_type.target_line_rate.value = line
        fl = tp.transmit_type.target_line_rate.flows.add(tx_endpoint=f"qp{i}", rx_endpoint="rx", name=f"flow{i}")
        fl.message_size, fl.message_size_unit = size_kb, "kb"
        cfg.options.per_port_options.add(port_name=f"tx{i}").protocols.add().rocev2.dcqcn_settings.enable_dcqcn = dcqcn
    return cfg


def _addr_of(spec: LabSpec, locs: list[str]) -> dict[str, str]:
    out = {}
    for loc in locs:
        srv, eth = loc.split(":")
        out[loc] = str(spec.nic(srv, int(eth[3:])).address.ip)
    return out


def test_rocev2_incast_config(client, spec_dir):
    snappi = pytest.importorskip("snappi")
    api = snappi.api(location="http://127.0.0.1:1", loglevel=50)
    locs = ["srv2:eth1", "srv3:eth1", "srv4:eth1", "srv9:eth1", "srv1:eth1"]
    spec = LabSpec.load(spec_dir)
    cfg = incast_config(api, locs[:4], locs[4], _addr_of(spec, locs))
    r = client.post("/config", content=cfg.serialize(encoding=cfg.JSON))
    assert r.status_code == 200, r.text
    assert any("qos.dcqcn" in w for w in r.json()["warnings"])  # the config's DCQCN constants are not applied
    fl = client.server.state.flows
    assert sorted(fl) == ["flow0", "flow1", "flow2", "flow3"]
    assert all(f.roce.dcqcn and f.roce.bytes == 256 * 1024 and f.roce.dst == ("srv1", 0) for f in fl.values())
    assert fl["flow3"].roce.src == ("srv9", 0) and fl["flow3"].tx == "tx3" and fl["flow3"].rx == "rx"
    rows = client.post("/monitor/metrics", json={"choice": "rocev2_flow", "rocev2_flow": {"choice": "per_qp"}}
                       ).json()["rocev2_flow_per_qp_metrics"]
    assert [r["flow_name"] for r in rows] == ["flow0", "flow1", "flow2", "flow3"]
    assert rows[0]["src_ipv4"] == _addr_of(spec, locs)["srv2:eth1"] and rows[0]["ecn_ce_rx"] == 0
    # a QP towards an address that is no NIC of the lab, a verb railab does not send
    bad = json.loads(cfg.serialize(encoding=cfg.JSON))
    bad["devices"][0]["rocev2"]["ipv4_interfaces"][0]["peers"][0]["destination_ip_address"] = "192.0.2.1"
    assert "192.0.2.1" in " ".join(_error(client.post("/config", json=bad), 400)["errors"])
    bad = json.loads(cfg.serialize(encoding=cfg.JSON))
    bad["stateful_flows"]["rocev2"][0]["tx_ports"][0]["transmit_type"]["target_line_rate"]["flows"][0][
        "rocev2_verb"] = {"choice": "read"}
    assert "read" in " ".join(_error(client.post("/config", json=bad), 501)["errors"])
    bad = json.loads(cfg.serialize(encoding=cfg.JSON))
    bad["stateful_flows"]["rocev2"][0]["tx_ports"][0]["transmit_type"]["target_line_rate"]["flows"][0][
        "tx_endpoint"] = "qp3"
    assert "qp3 is on port tx3" in " ".join(_error(client.post("/config", json=bad), 400)["errors"])


# ---- unit: security as railab ui ------------------------------------------------------------------
def test_token_rules(spec_dir):
    server = O.OtgServer(O.OtgConfig(lab="otgu", host="0.0.0.0", token="s3cret"), lab=_lab(spec_dir))
    with TestClient(server.app, base_url="http://10.1.2.3:8443") as c:
        assert _error(c.get("/capabilities/version"), 401)
        assert _error(c.get("/capabilities/version", headers={"Authorization": "Bearer wrong"}), 403)
        _error(c.post("/config", json=_cfg(), headers={"Authorization": "Bearer wrong"}), 403)
        assert server.state.flows == {}  # a refused request changed nothing
        r = c.get("/capabilities/version", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200


def test_a_web_pages_request_is_refused(client):
    """A browser page may POST text/plain to a loopback server without a preflight (review: a
    page took a link down that way); requests with a foreign Origin are refused and change
    nothing. snappi sends no Origin; the server's own origin passes."""
    body = json.dumps(_cfg())
    r = client.post("/config", content=body, headers={"Origin": "http://evil.example",
                                                      "Content-Type": "text/plain"})
    assert "web pages" in " ".join(_error(r, 403)["errors"])
    assert client.server.state.flows == {}
    _error(client.post("/control/state", json={"choice": "port", "port": {"choice": "link", "link": {
        "port_names": ["p1"], "state": "down"}}}, headers={"Origin": "null"}), 403)
    assert client.post("/config", content=body, headers={"Origin": "http://127.0.0.1:8443"}).status_code == 200


def test_sizes_and_rates_out_of_range_are_400_and_kept_nothing(client):
    """Review: packets = 10**400 and gbps = 1e6 were accepted and the server built without end."""
    for over in ({"duration": {"choice": "fixed_packets", "fixed_packets": {"packets": 10**400}}},
                 {"duration": {"choice": "fixed_packets", "fixed_packets": {"packets": 10**18}}},
                 {"duration": {"choice": "fixed_packets", "fixed_packets": {"packets": True}}},
                 {"rate": {"choice": "gbps", "gbps": 1e6}, "duration": {"choice": "continuous"}},
                 {"rate": {"choice": "gbps", "gbps": 401}},  # over mini-lossless's 400 Gb/s line
                 {"rate": {"choice": "pps", "pps": 1e30}},
                 {"rate": {"choice": "pps", "pps": float("nan")}}):
        _error(client.post("/config", content=json.dumps(_cfg(**over))), 400)
        assert client.server.state.flows == {}, over
    ok = _cfg(rate={"choice": "gbps", "gbps": 400},
              duration={"choice": "fixed_packets", "fixed_packets": {"packets": O.MAX_FLOW_PACKETS}})
    assert client.post("/config", json=ok).status_code == 200  # the line rate itself, the most packets


def test_a_deeply_nested_body_is_the_error_object(client):
    _error(client.post("/config", content=b"[" * 100_000 + b"]" * 100_000), 400)


def test_start_and_link_changes_on_a_lab_taken_down_are_409(client):
    """Review: after railab down from another shell a start answered 200 and failed later."""
    assert client.post("/config", json=_cfg()).status_code == 200
    client.server.lab_gone = lambda: True
    start = {"choice": "traffic", "traffic": {"choice": "flow_transmit", "flow_transmit": {"state": "start"}}}
    assert "not up any more" in " ".join(_error(client.post("/control/state", json=start), 409)["errors"])
    link = {"choice": "port", "port": {"choice": "link", "link": {"port_names": ["p1"], "state": "down"}}}
    _error(client.post("/control/state", json=link), 409)
    assert not client.server._running()


def test_loopback_server_refuses_other_host_names(client):
    _error(client.get("/capabilities/version", headers={"Host": "evil.example:8443"}), 403)
    assert client.get("/capabilities/version", headers={"Host": "localhost:8443"}).status_code == 200


def test_bind_rule():
    with pytest.raises(UsageError):
        O.check_bind("0.0.0.0", None)
    O.check_bind("0.0.0.0", "T")
    O.check_bind("127.0.0.1", None)


def test_cli_refuses_non_loopback_without_token():
    env = {k: v for k, v in os.environ.items() if k != "RAILAB_OTG_TOKEN"}
    p = subprocess.run([sys.executable, "-m", "railab", "otg", "anylab", "--bind", "0.0.0.0:8443"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "loopback" in p.stderr and "--token" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# ---- live: the real snappi client against railab otg on mini-lossless ------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(lab: str, *args: str):
    """Start ``railab otg LAB ARGS`` and wait until it listens; returns (process, base URL)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAILAB_OTG_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "railab", "otg", lab, "--bind", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"railab otg exited {proc.returncode}: {proc.stdout.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("railab otg did not start listening within 30 s")


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def otg_server(lossless_lab):
    proc, url = _serve(lossless_lab.name)
    try:
        yield lossless_lab, url
    finally:
        _stop(proc)


def _api(url: str):
    snappi = pytest.importorskip("snappi")
    return snappi, snappi.api(location=url, verify=False)


def _wait_stopped(api, flow: str, limit_s: float = 60):
    req = api.metrics_request()
    req.flow.flow_names = [flow]
    deadline = time.monotonic() + limit_s
    while True:
        m = api.get_metrics(req).flow_metrics[0]
        if m.transmit == m.STOPPED:
            return m
        assert time.monotonic() < deadline, f"flow {flow} still transmitting after {limit_s} s"
        time.sleep(0.2)


@pytest.mark.integration
def test_live_two_port_ipv4_udp_fixed_frames(otg_server):
    lab, url = otg_server
    snappi, api = _api(url)
    assert api.get_version().api_spec_version == O.API_VERSION
    cfg = api.config()
    p1, p2 = cfg.ports.port(name="p1", location="srv1:eth1").port(name="p2", location="srv9:gpu1")
    f = cfg.flows.flow(name="f1")[-1]
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = p1.name, [p2.name]
    f.packet.ethernet().ipv4().udp()
    f.size.fixed = 130
    f.rate.percentage = 1  # 1 % of a 400 Gb/s port: ~1300 lab frames/s on mini-lossless
    f.duration.fixed_packets.packets = 200
    f.metrics.enable = True
    warn = api.set_config(cfg)
    assert any("time scale" in w for w in warn.warnings)
    cs = api.control_state()
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
    api.set_control_state(cs)
    m = _wait_stopped(api, "f1")
    assert (m.frames_tx, m.frames_rx, m.loss) == (200, 200, 0)
    assert m.bytes_tx == m.bytes_rx == 200 * 130
    assert m.port_tx == "p1" and m.port_rx == "p2"
    # through the expected number of hops (the stop's warnings: the engine's TTL count and the
    # lab's expected hops for the path class; srv1:gpu0 -> srv9:gpu1 crosses groups and rails:
    # leaf, spine, leaf and more)
    from railab.traffic.patterns import hops

    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.STOP
    summary = " ".join(api.set_control_state(cs).warnings)
    expected = hops(lab.spec, "srv1:gpu0", "srv9:gpu1")
    assert expected >= 3, expected
    assert f"200/200 frames delivered through {expected} hops (expected {expected})" in summary, summary
    req = api.metrics_request()
    req.port.port_names = ["p1", "p2"]
    ports = {p.name: p for p in api.get_metrics(req).port_metrics}
    assert ports["p1"].frames_tx == 200 and ports["p2"].frames_rx == 200
    assert ports["p1"].link == "up"
    assert "srv1:eth1" in ports["p1"].location and "time scale" in ports["p1"].location


@pytest.mark.integration
def test_live_continuous_and_fixed_seconds(otg_server):
    """A continuous flow runs until stop and a fixed-seconds flow for its fabric seconds times
    the time scale: both arrive whole, at the configured rate (fabric frames/s)."""
    lab, url = otg_server
    snappi, api = _api(url)
    scale = lab.spec.qos.capacity.time_scale
    cfg = api.config()
    p1, p2, p3 = (cfg.ports.port(name="p1", location="srv5:eth1").port(name="p2", location="srv13:eth1")
                  .port(name="p3", location="srv6:eth2"))
    fc, fs = cfg.flows.flow(name="cont").flow(name="secs")
    for f, rx in ((fc, p2), (fs, p3)):
        f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = p1.name, [rx.name]
        f.packet.ethernet().ipv4().udp()
        f.size.fixed = 130
        f.rate.pps = int(400 * scale)  # 400 lab frames/s
    fc.duration.continuous.gap = 12
    fs.duration.fixed_seconds.seconds = 1.0 / scale  # one lab second
    api.set_config(cfg)
    cs = api.control_state()
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
    api.set_control_state(cs)
    time.sleep(1.5)
    m = _wait_stopped(api, "secs", 30)
    assert 300 <= m.frames_tx <= 440 and m.frames_rx == m.frames_tx, m.serialize()
    req = api.metrics_request()
    req.flow.flow_names = ["cont"]
    assert api.get_metrics(req).flow_metrics[0].transmit == "started"
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.STOP
    api.set_control_state(cs)
    m = api.get_metrics(req).flow_metrics[0]
    assert m.transmit == "stopped" and m.frames_tx >= 400 and m.frames_rx == m.frames_tx, m.serialize()
    assert abs(m.frames_tx_rate - 400 * scale) <= 0.2 * 400 * scale, m.serialize()


def _stop_and_convergence(api, cs, flow: str):
    """Stop the run ``cs`` started, then ``flow``'s Convergence.Metric."""
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.STOP
    api.set_control_state(cs)
    req = api.metrics_request()
    req.convergence.flow_names = [flow]
    return api.get_metrics(req).convergence_metrics[0]


@pytest.mark.integration
def test_live_link_events_convergence(otg_server):
    """A continuous flow with data-plane events on runs as the drill's probe stream (every
    probe numbered and timestamped). Through snappi's control state, a spine port the flow
    crosses (a switch port as an OTG port) goes down and up, then the flow's destination NIC:
    the convergence metric lists the four link events and gives the flow's longest outage after
    a link-down, which must be the lost probes' time at 1000 probes/s. On mini-lossless the
    spine has parallel links to the leaf and reroutes at once (measured: nothing lost); the NIC
    down loses everything until it is back and its /31 is routed again."""
    from railab.testbed import faults as F
    from railab.traffic.fib import FabricView
    from railab.traffic.patterns import Flow, route

    lab, url = otg_server
    snappi, api = _api(url)
    view = FabricView(lab.spec, lab.netns_of)  # the drill's FIB trace: the path flow 0 takes
    try:
        tr = view.trace(route(lab.spec, Flow(("srv9", 1), ("srv1", 0), qp=0)))
    finally:
        view.close()
    spine, _, out = tr.hops[-2]
    scale = lab.spec.qos.capacity.time_scale
    cfg = api.config()
    p1, p2, up = (cfg.ports.port(name="p1", location="srv9:gpu1").port(name="p2", location="srv1:eth1")
                  .port(name="uplink", location=f"{spine}:{out}"))
    f = cfg.flows.flow(name="f1")[-1]
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = p1.name, [p2.name]
    f.packet.ethernet().ipv4().udp()
    f.size.fixed = 130
    f.rate.pps = int(1000 * scale)  # 1000 lab probes/s: 1 ms resolution, as railab drill
    f.duration.continuous.gap = 12
    cfg.events.dp_events.enable = True
    api.set_config(cfg)
    cs = api.control_state()
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
    api.set_control_state(cs)
    link = api.control_state()
    try:
        # the NIC held down 2 s: ~0.2 s of it goes to applying the fault on a busy host, and
        # the assertion below wants at least 0.9 s of lost probes (a 1 s hold lost 768 in CI)
        for port, hold in (("uplink", 1.0), ("p2", 2.0)):
            time.sleep(1.0)
            link.port.link.port_names, link.port.link.state = [port], link.port.link.DOWN
            api.set_control_state(link)
            assert len(F.list_faults(lab.name)) == 1
            time.sleep(hold)
            link.port.link.state = link.port.link.UP
            api.set_control_state(link)
    finally:
        for port in ("uplink", "p2"):
            link.port.link.port_names, link.port.link.state = [port], link.port.link.UP
            api.set_control_state(link)
    assert F.list_faults(lab.name) == []
    time.sleep(3.0)
    m = _stop_and_convergence(api, cs, "f1")
    assert [(e.type, e.source) for e in m.events] == [("link_down", "uplink"), ("link_up", "uplink"),
                                                      ("link_down", "p2"), ("link_up", "p2")]
    freq = api.metrics_request()
    freq.flow.flow_names = ["f1"]
    fm = api.get_metrics(freq).flow_metrics[0]
    lost = fm.frames_tx - fm.frames_rx
    print(f"spine port {spine}:{out}, then srv1:eth1: lost {lost} of {fm.frames_tx}, "
          f"data-plane convergence {m.data_plane_convergence_us} us")
    assert lost >= 900, fm.serialize()  # the NIC was down for 1 s at 1000 probes/s
    # one outage: its length is the lost probes' send times (1 ms each)
    assert abs(m.data_plane_convergence_us - lost * 1000) <= 0.1 * lost * 1000 + 5000, (lost, m.serialize())
    down = m.events[2]
    assert down.end_timestamp_ns - down.begin_timestamp_ns >= 0.9e9  # back after the NIC's second down


@pytest.fixture(scope="module")
def otg_mini(mini_lab):
    """``railab otg`` serving the session's ``mini`` lab: one link per leaf-spine pair, so a
    leaf uplink's link-down loses the spine -> leaf flows until the other leaves withdraw the
    spine (mini-lossless' parallel links reroute at once and lose nothing)."""
    proc, url = _serve(mini_lab.name)
    try:
        yield mini_lab, url
    finally:
        _stop(proc)


@pytest.mark.integration
def test_live_convergence_matches_railab_drill(otg_mini):
    """Issue 46: link-down on a leaf uplink during a running flow, through snappi's control
    state, against ``railab drill LAB link-down g1-leaf1 spine1`` for the same fault (the same
    end, g1-leaf1's; held 1 s; 1000 probes/s of 256-byte payloads) on the same flow and path.
    The drill (its Python API, what the CLI runs) picks the flows that cross the link from the
    switches' FIBs; its flow that lost probes is aimed at through OTG by its UDP source port
    (``udp.src_port``: the FIB takes the OTG flow over the same path, checked), sent as a
    continuous flow with data-plane events on, the uplink (a switch port as an OTG port) taken
    down and up. Both figures are the flow's longest outage during the fault: from the first
    lost probe's send time to the first delivered one's (OTG's ``data_plane_convergence_us``,
    the drill's outage ``ms``); they agree within 25 %."""
    from railab.checks.drill import run_drill, settle
    from railab.traffic.fib import FabricView
    from railab.traffic.patterns import Flow, parse_endpoint, route

    lab, url = otg_mini
    spec = lab.spec
    d = run_drill(lab, "link-down", "g1-leaf1", "spine1", duration=1.0, flows=2, control=0)
    fault = d["fault"]
    assert (fault["kind"], fault["node"]) == ("link-down", "g1-leaf1"), fault
    held = d["timeline_s"]["heal"] - d["timeline_s"]["inject"]

    def outage_ms(f: dict) -> float:  # the flow's longest outage that began while the fault was in
        return max((o["ms"] for o in f["outages"] if 0 <= o["at_s"] < held), default=0.0)

    lossy = max((f for f in d["flows"] if f["role"] == "crossing"), key=outage_ms)
    drill_ms = outage_ms(lossy)
    # the spine -> g1-leaf1 direction loses until the other leaves hear spine1's withdrawal
    assert drill_ms > 0 and lossy["lost_during_fault"] > 0, d["flows"]
    src, dst = parse_endpoint(spec, lossy["src"]), parse_endpoint(spec, lossy["dst"])
    with FabricView(spec, lab.netns_of) as view:
        aimed = view.trace(route(spec, Flow(src, dst, sport=lossy["sport"])))
    assert aimed.text() == lossy["path"], (aimed.text(), lossy)  # the OTG flow's path: the drill flow's

    snappi, api = _api(url)
    cfg = api.config()
    cfg.ports.port(name="p1", location=lossy["src"]).port(name="p2", location=lossy["dst"]).port(
        name="uplink", location=f"{fault['node']}:{fault['port']}")
    f = cfg.flows.flow(name="f1")[-1]
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = "p1", ["p2"]
    _eth, _ip, udp = f.packet.ethernet().ipv4().udp()
    udp.src_port.value = lossy["sport"]
    f.size.fixed = O.FRAME_OVERHEAD + 256  # the drill's probes: 256 payload bytes
    f.rate.pps = int(d["rate_pps"])  # time scale 1 on mini: lab probes/s
    f.duration.continuous.gap = 12
    cfg.events.dp_events.enable = True
    assert not any("src_port" in w for w in api.set_config(cfg).warnings)  # kept, not replaced
    cs = api.control_state()
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
    api.set_control_state(cs)
    link = api.control_state()
    link.port.link.port_names = ["uplink"]
    try:
        time.sleep(1.0)  # the drill's baseline
        link.port.link.state = link.port.link.DOWN
        api.set_control_state(link)
        time.sleep(1.0)  # held as the drill held it
    finally:
        link.port.link.state = link.port.link.UP
        api.set_control_state(link)
    time.sleep(1.5)
    m = _stop_and_convergence(api, cs, "f1")
    assert [(e.type, e.source) for e in m.events] == [("link_down", "uplink"), ("link_up", "uplink")]
    otg_ms = m.data_plane_convergence_us / 1000
    print(f"{lossy['name']} sport {lossy['sport']} via {' '.join(lossy['path'])}: link-down "
          f"{fault['node']}:{fault['port']} held 1 s: OTG data-plane convergence {otg_ms:.1f} ms, "
          f"railab drill outage {drill_ms:.1f} ms ({lossy['lost_during_fault']} probes lost): "
          f"{100 * (otg_ms / drill_ms - 1):+.1f} %")
    assert abs(otg_ms - drill_ms) <= 0.25 * drill_ms, (otg_ms, drill_ms, m.serialize())
    with FabricView(spec, lab.netns_of) as view:  # the session lab green again for the next tests
        settle(lab, view)


@pytest.mark.integration
def test_live_bad_config_400_through_snappi(otg_server):
    lab, url = otg_server
    snappi, api = _api(url)
    cfg = api.config()
    cfg.ports.port(name="p1", location="srv42:eth1")
    with pytest.raises(Exception) as exc:
        api.set_config(cfg)
    err = exc.value.args[0]
    assert err.code == 400 and any("srv42:eth1" in e for e in err.errors), err
    cfg = api.config()
    p1, p2 = cfg.ports.port(name="p1", location="srv1:eth1").port(name="p2", location="srv3:eth1")
    f = cfg.flows.flow(name="f1")[-1]
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = p1.name, [p2.name]
    f.packet.ethernet().ipv4().tcp()
    with pytest.raises(Exception) as exc:
        api.set_config(cfg)
    assert exc.value.args[0].code == 501 and "tcp" in " ".join(exc.value.args[0].errors)


@pytest.mark.integration
def test_live_port_link_down_is_a_railab_fault(otg_server):
    """control state port link down: a railab link-down fault on the rx NIC (the lab's fault
    records name it), the port metric reads down, a flow to it loses every frame; link up heals
    it and the same flow arrives whole."""
    from railab.testbed import faults as F

    lab, url = otg_server
    snappi, api = _api(url)
    cfg = api.config()
    p1, p2 = cfg.ports.port(name="p1", location="srv2:eth1").port(name="p2", location="srv10:eth1")
    f = cfg.flows.flow(name="f1")[-1]
    f.tx_rx.port.tx_name, f.tx_rx.port.rx_names = p1.name, [p2.name]
    f.packet.ethernet().ipv4().udp()
    f.size.fixed = 130
    f.rate.percentage = 1
    f.duration.fixed_packets.packets = 50
    api.set_config(cfg)
    link = api.control_state()
    link.port.link.port_names, link.port.link.state = ["p2"], link.port.link.DOWN
    warn = " ".join(api.set_control_state(link).warnings)
    try:
        recs = F.list_faults(lab.name)
        assert [(r.kind, r.node, r.port) for r in recs] == [("link-down", "srv10", "eth1")], recs
        assert recs[0].id in warn
        req = api.metrics_request()
        req.port.port_names = ["p2"]
        assert api.get_metrics(req).port_metrics[0].link == "down"
        start = api.control_state()
        start.traffic.flow_transmit.state = start.traffic.flow_transmit.START
        api.set_control_state(start)
        m = _wait_stopped(api, "f1")
        assert (m.frames_tx, m.frames_rx, m.loss) == (50, 0, 100.0)
    finally:
        link.port.link.state = link.port.link.UP
        api.set_control_state(link)
    assert F.list_faults(lab.name) == []
    assert api.get_metrics(req).port_metrics[0].link == "up"
    deadline = time.monotonic() + 30  # the fabric re-learns the NIC's /31 (BGP) after the heal
    while True:
        api.set_control_state(start)
        m = _wait_stopped(api, "f1")
        if m.frames_rx == 50 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert (m.frames_tx, m.frames_rx, m.loss) == (50, 50, 0)


#: runs of each side the incast comparison averages, and MiB a QP. A 4 MiB 4:1 incast keeps the
#: receiver's port full (384-400 of 400 Gb/s) and its four QPs near an even share (96-98 Gb/s
#: each, PFC pausing the senders while DCQCN's first cuts come), but in about 2 of 5 runs a
#: sender on the receiver's own leaf (srv2, srv3) finishes first and reads 104-118 Gb/s, through
#: OTG and through railab traffic alike (measured on mini-lossless, 2026-12-06: ~45 runs a side).
#: One run a side would miss a 15 % band by that chance alone; the mean of five does not (its
#: spread: about 5 % a sender). With 8 MiB DCQCN's cuts decide the rates and a QP's varied
#: 53-100 Gb/s from run to run on a busy host, on either side.
INCAST_RUNS = 5
INCAST_MIB = 4


def _otg_incast(api, senders: list[str], receiver: str, addr_of: dict[str, str]):
    """One 4:1 RoCEv2 incast through snappi: the per-QP rows (flow order = ``senders``) and
    the receiving port's rate (fabric Gb/s: its bytes over the longest flow completion)."""
    cfg = incast_config(api, senders, receiver, addr_of, size_kb=INCAST_MIB * 1024)
    api.set_config(cfg)
    cs = api.control_state()
    cs.traffic.flow_transmit.state = cs.traffic.flow_transmit.START
    api.set_control_state(cs)
    deadline = time.monotonic() + 120
    req = api.metrics_request()
    req.flow.flow_names = [f"flow{i}" for i in range(len(senders))]
    while any(m.transmit != "stopped" for m in api.get_metrics(req).flow_metrics):
        assert time.monotonic() < deadline, "the incast did not finish in 120 s"
        time.sleep(0.2)
    qreq = api.metrics_request()
    qreq.rocev2_flow.per_qp.column_names = []
    rows = api.get_metrics(qreq).rocev2_flow_per_qp_metrics
    preq = api.metrics_request()
    preq.port.port_names = ["rx"]
    return rows, api.get_metrics(preq).port_metrics[0].bytes_rx_rate * 8 / 1e9


def _traffic_incast(lab, receiver: str) -> dict:
    """``railab traffic LAB --pattern incast --senders 4 --dst RECEIVER --bytes 4M --cc dcqcn
    --json``, the command itself: its JSON. Exit 0, or 1 for an engine that fell short of its
    rate on a busy host only (the command's own verdict, as tests/test_load_rootcause.py takes
    it): the rates then still have to meet the band."""
    p = subprocess.run([sys.executable, "-m", "railab", "traffic", lab, "--pattern", "incast", "--senders", "4",
                        "--dst", receiver, "--bytes", f"{INCAST_MIB}M", "--cc", "dcqcn", "--json"],
                       capture_output=True, text=True, timeout=180)
    doc = json.loads(p.stdout) if p.stdout.startswith("{") else {}
    assert p.returncode == 0 or (p.returncode == 1 and doc.get("failures") and all(
        "short of its configured rate" in f for f in doc["failures"])), p.stdout[-2000:] + p.stderr[-2000:]
    return doc


@pytest.mark.integration
def test_live_rocev2_incast_matches_railab_traffic(otg_server):
    """Issue 46: a 4:1 RoCEv2 incast with DCQCN through snappi's RoCEv2 model and the same
    incast through ``railab traffic --pattern incast`` on the same lab (the same four sender
    NICs, railab's own choice for 4 senders into srv1:gpu0; 4 MiB a QP; DCQCN on). Per run:
    every QP's message arrives (PFC keeps the class lossless), the receiver's NIC saw ECN-CE
    marks and the senders got CNPs. Then the rates, in the fabric's units (Gb/s: lab bytes
    over lab seconds, times the time scale): each sender's (its message's bytes over its
    completion time, OTG's ``data_rx_rate``) and the aggregate (the receiving port's bytes over
    the longest completion, OTG's port ``bytes_rx_rate``) agree within 15 %, the mean of
    :data:`INCAST_RUNS` runs a side, run in turns."""
    from railab.traffic.patterns import incast_pairs

    lab, url = otg_server
    snappi, api = _api(url)
    stop = api.control_state()  # the server is shared by the module's tests: none of theirs runs on
    stop.traffic.flow_transmit.state = stop.traffic.flow_transmit.STOP
    api.set_control_state(stop)
    spec = lab.spec
    scale = spec.qos.capacity.time_scale
    line = spec.qos.capacity.fabric_rate_gbps
    pairs = incast_pairs(spec, 4, ("srv1", 0))  # what railab traffic --senders 4 --dst srv1:gpu0 sends
    srcs = [f"{s}:gpu{g}" for (s, g), _dst in pairs]
    senders = [f"{s}:eth{g + 1}" for (s, g), _dst in pairs]
    addr = _addr_of(spec, [*senders, "srv1:eth1"])
    otg = {k: [] for k in [*srcs, "all"]}
    rt = {k: [] for k in [*srcs, "all"]}
    for _ in range(INCAST_RUNS):
        rows, agg = _otg_incast(api, senders, "srv1:eth1", addr)
        assert [r.flow_name for r in rows] == [f"flow{i}" for i in range(4)]
        for src, r in zip(srcs, rows, strict=True):
            assert r.data_frames_tx > 0 and r.data_frames_rx == r.data_frames_tx, r
            assert r.message_complete_rx == 1 and r.flow_completion_time > 0, r
            assert 0 < r.data_rx_rate <= 1.02 * line, r.serialize()
            otg[src].append(r.data_rx_rate)
        assert sum(r.ecn_ce_rx for r in rows) > 0 and sum(r.cnp_rx for r in rows) > 0, [r.serialize() for r in rows]
        assert 0 < agg <= 1.02 * line, agg  # the receiver's port takes no more than its line
        otg["all"].append(agg)
        doc = _traffic_incast(lab.name, "srv1:gpu0")
        flows = {f["src"]: f for f in doc["congestion"]["flows"]}
        assert sorted(flows) == sorted(srcs) and doc["time_scale"] == scale, doc["congestion"]["flows"]
        for src in srcs:
            f = flows[src]
            assert f["fct_s"] and f["rx_packets"] == f["goal_packets"] and f["rx_bytes"] == f["tx_bytes"], f
            rt[src].append(f["rx_bytes"] * 8 / f["fct_s"] * scale / 1e9)
        rt["all"].append(sum(f["rx_bytes"] for f in flows.values()) * 8 / max(f["fct_s"] for f in flows.values())
                         * scale / 1e9)
        assert 0 < rt["all"][-1] <= 1.02 * line, rt["all"]
        assert doc["congestion"]["ce_marked"] > 0 and doc["congestion"]["cnp_received"] > 0
    print("\n".join(f"{r.flow_name} ({src}): {r.data_frames_rx} frames, CE {r.ecn_ce_rx}, CNP tx {r.cnp_tx} rx "
                    f"{r.cnp_rx}, {r.data_rx_rate} Gb/s, FCT {r.flow_completion_time} ms"
                    for src, r in zip(srcs, rows, strict=True)))  # the last OTG run's rows
    mean = {k: (sum(otg[k]) / INCAST_RUNS, sum(rt[k]) / INCAST_RUNS) for k in otg}
    print("\n".join(f"{k}: OTG {' '.join(f'{v:.1f}' for v in otg[k])} (mean {o:.1f}) Gb/s, railab traffic "
                    f"{' '.join(f'{v:.1f}' for v in rt[k])} (mean {t:.1f}) Gb/s: {100 * (o / t - 1):+.1f} %"
                    for k, (o, t) in mean.items()))
    for k, (o, t) in mean.items():
        assert abs(o - t) <= 0.15 * t, (k, otg[k], rt[k])


@pytest.mark.integration
def test_live_token(lossless_lab):
    proc, url = _serve(lossless_lab.name, "--token", "tok46")
    try:
        snappi, api = _api(url)
        with pytest.raises(Exception) as exc:
            api.get_version()
        assert exc.value.args[0].code == 401
        api._transport._session.headers["Authorization"] = "Bearer tok46"
        assert api.get_version().api_spec_version == O.API_VERSION
    finally:
        _stop(proc)
