"""Every generated sonic-vs config_db.json against SONiC's own YANG models (libyang).

The models are sonic-buildimage's rendered ``sonic-*.yang`` of 202305 and master
(``../shared/sonic-yang-models/{202305,master}``, see its SOURCE.md). railab translates each
config_db table into SONiC YANG JSON (:mod:`railab.topologies.sonic_yang`, the shape of
sonic-yang-mgmt's ``sonic_yang_ext.py``) and libyang parses it strictly and validates it (types,
patterns, leafrefs, mandatory leaves). Mutated configs must be rejected, so the validator is
shown to be able to fail.

In CI (env ``CI`` set) missing models or a missing libyang binding FAIL these tests; elsewhere
they skip with the reason.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml

from railab.topologies.generator import build_lab
from railab.topologies.intent import parse_intent
from railab.topologies.sonic_yang import MODEL_SETS, SonicYangError, find_models, load_models

INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the YANG tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="module", params=MODEL_SETS)
def models(request):
    try:
        import libyang  # noqa: F401
    except ImportError:
        _missing("the libyang Python binding is not installed (scripts/bootstrap.sh --test: "
                 "libyang2-dev + pip 'libyang>=2.7,<2.8')")
    path = find_models(request.param)
    if path is None:
        _missing(f"SONiC YANG models {request.param} not found: ../shared/sonic-yang-models/"
                 f"{request.param} next to the repo, or set RAILAB_SONIC_YANG")
    return load_models(str(path))


def _sonic(intent: str, links_per_pair: int) -> dict[str, dict]:
    """config_db documents of every switch of ``intent`` generated with kind sonic-vs."""
    data = yaml.safe_load((INTENTS / f"{intent}.yml").read_text())
    lab = data["lab"]
    lab["kind"] = "sonic-vs"
    if links_per_pair != lab.get("links_per_pair", 1):
        # keep leaf uplinks = downlinks (1:1): spines x links_per_pair stays the same
        lab["spines"] = lab["spines"] * lab.get("links_per_pair", 1) // links_per_pair
        lab["links_per_pair"] = links_per_pair
    built = build_lab(parse_intent(data), name=f"yang{links_per_pair}")
    return {rel.split("/")[1]: json.loads(text) for rel, text in built.files.items()
            if rel.endswith("/config_db.json")}


LABS = {(i, n): None for i in ("mini", "rail-optimized-1024") for n in (1, 2)}
LABS[("mini-lossless", 2)] = None  # lab.capacity with a shared buffer (BUFFER_QUEUE)


@pytest.fixture(scope="module")
def configs():
    return {key: _sonic(*key) for key in LABS}


@pytest.mark.parametrize("intent, links_per_pair", list(LABS))
def test_every_config_db_validates(models, configs, intent, links_per_pair):
    docs = configs[(intent, links_per_pair)]
    assert len(docs) >= (8 if intent == "mini-lossless" else 9)  # every leaf and spine
    bad = {node: errs for node, db in docs.items() if (errs := models.errors(db))}
    assert not bad, f"{models.path}: {bad}"
    if links_per_pair == 2:  # numbered /31 on every fabric port of a parallel link
        leaf = docs["g1-leaf1"]
        fabric = [k for k, v in leaf["INTERFACE"].items()
                  if "|" not in k and v == {"ipv6_use_link_local_only": "enable"}]
        assert fabric and all(any(k.startswith(f"{p}|") for k in leaf["INTERFACE"]) for p in fabric)


MUTATIONS = [
    ("port mtu not a number", lambda d: d["PORT"]["Ethernet0"].update(mtu="jumbo"), "uint16"),
    ("device type not a SONiC tier", lambda d: d["DEVICE_METADATA"]["localhost"].update(type="Leaf"),
     "pattern"),
    ("queue names a WRED profile that does not exist",
     lambda d: d["QUEUE"]["Ethernet0|3"].update(wred_profile="NOPE"), "leafref"),
    ("PG profile that does not exist",
     lambda d: next(iter(d["BUFFER_PG"].values())).update(profile="pg_none"), "union"),
    ("buffer profile without its mandatory pool", lambda d: next(iter(d["BUFFER_PROFILE"].values())).pop("pool"),
     "pool"),
    ("interface on a port that does not exist", lambda d: d["INTERFACE"].update({"Ethernet200": {}}), "Ethernet200"),
    ("address with a bad prefix length",
     lambda d: d["INTERFACE"].update({"Ethernet0|10.0.0.0/33": {}}), "10.0.0.0/33"),
    ("DSCP beyond 63", lambda d: d["DSCP_TO_TC_MAP"]["AZURE"].update({"64": "0"}), "dscp"),
    ("cable length without unit", lambda d: d["CABLE_LENGTH"]["AZURE"].update(Ethernet0="100"), "cable length"),
    ("table no model knows", lambda d: d.update(NOT_A_TABLE={"x": {}}), "no SONiC YANG model"),
    ("field no model knows", lambda d: d["PORT"]["Ethernet0"].update(colour="blue"), "colour"),
]


@pytest.mark.parametrize("what, mutate, needle", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_config_db_is_rejected(models, configs, what, mutate, needle):
    good = configs[("mini", 1)]["g1-leaf1"]
    assert models.errors(good) == []
    bad = copy.deepcopy(good)
    mutate(bad)
    errs = models.errors(bad)
    assert errs, f"{what}: accepted by {models.path}"
    assert needle.lower() in " ".join(errs).lower(), errs
    with pytest.raises(SonicYangError, match="fails SONiC's YANG models"):
        models.validate(bad, where="g1-leaf1/config_db.json")


def test_translation_shape(models, configs):
    """The shape sonic_yang_ext produces: module:top container, TABLE_LIST entries with split
    keys, typed values (RFC 7951), maps as inner lists, leaf containers for DEVICE_METADATA."""
    y = models.translate(configs[("mini", 1)]["g1-leaf1"])
    ports = y["sonic-port:sonic-port"]["PORT"]["PORT_LIST"]
    p0 = next(p for p in ports if p["name"] == "Ethernet0")
    assert p0["mtu"] == 9100 and p0["lanes"] == "25,26,27,28" and p0["admin_status"] == "up"
    intf = y["sonic-interface:sonic-interface"]["INTERFACE"]
    assert {"name", "ip-prefix"} <= set(intf["INTERFACE_IPPREFIX_LIST"][0])
    dscp = y["sonic-dscp-tc-map:sonic-dscp-tc-map"]["DSCP_TO_TC_MAP"]["DSCP_TO_TC_MAP_LIST"][0]
    assert {"dscp": "26", "tc": 3} in dscp["DSCP_TO_TC_MAP"]
    meta = y["sonic-device_metadata:sonic-device_metadata"]["DEVICE_METADATA"]["localhost"]
    assert meta["type"] == "BackEndToRRouter" and meta["bgp_asn"] == 4200000001
    pg = y["sonic-buffer-pg:sonic-buffer-pg"]["BUFFER_PG"]["BUFFER_PG_LIST"][0]
    assert pg["pg_num"] == "3-4" and pg["profile"].startswith("pg_lossless_")


def test_lossless_numbers_come_from_the_qos_profile(configs):
    """BUFFER_PROFILE / CABLE_LENGTH / maps carry the one QoS profile's numbers (topologies.qos)."""
    from railab.topologies.qos import DEFAULT_QOS as Q

    db = configs[("mini", 1)]["spine1"]
    (name, prof), = db["BUFFER_PROFILE"].items()
    assert name == f"pg_lossless_{Q.pfc.speed_gbps * 1000}_{int(Q.pfc.cable_m)}m_profile"
    assert (int(prof["xoff"]), int(prof["xon"]), int(prof["size"])) == (
        Q.pfc.xoff_bytes, Q.pfc.xon_bytes, Q.pfc.headroom_bytes)
    assert set(db["CABLE_LENGTH"]["AZURE"].values()) == {f"{int(Q.pfc.cable_m)}m"}
    assert all(q["tc_to_pg_map"] == "AZURE" and q["pfc_to_queue_map"] == "AZURE"
               for q in db["PORT_QOS_MAP"].values())
    assert set(db["BUFFER_PG"]) == {f"{p}|3-4" for p in db["PORT"]}


def test_cli_generate_sonic_yang(models, tmp_path):
    """``railab generate --sonic-yang DIR`` validates the lab it writes (and a wrong DIR is one
    usage error)."""
    from typer.testing import CliRunner

    from railab.cli import app

    data = yaml.safe_load((INTENTS / "mini.yml").read_text())
    data["lab"]["kind"] = "sonic-vs"
    intent = tmp_path / "sv.yml"
    intent.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["generate", str(intent), "-o", str(tmp_path / "lab"), "--name", "yangcli",
                                 "--sonic-yang", str(models.path)])
    assert r.exit_code == 0, r.output
    assert "config_db.json files valid against" in r.output
    r = CliRunner().invoke(app, ["generate", str(intent), "-o", str(tmp_path / "lab2"), "--name", "yangcli",
                                 "--sonic-yang", str(tmp_path)])
    assert r.exit_code == 2 and "holds no sonic-*.yang" in r.output


def test_shared_buffer_is_the_egress_lossless_profile(models, configs):
    """lab.capacity.shared_buffer (mini-lossless) becomes SONiC's egress pool, its profile with
    the same dynamic_th, and a BUFFER_QUEUE entry binding every port's lossless queues to it; the
    YANG models accept it, and a queue bound to a profile that does not exist is refused. Labs
    without one carry none of it."""
    import yaml as _yaml

    sb = _yaml.safe_load((INTENTS / "mini-lossless.yml").read_text())["lab"]["capacity"]["shared_buffer"]
    db = configs[("mini-lossless", 2)]["g1-leaf1"]
    assert db["BUFFER_POOL"]["egress_lossless_pool"] == {
        "mode": "dynamic", "size": str(sb["pool_bytes"]), "type": "egress"}
    assert db["BUFFER_PROFILE"]["egress_lossless_profile"] == {
        "dynamic_th": str(sb["dynamic_th"]), "pool": "egress_lossless_pool", "size": "0"}
    assert db["BUFFER_QUEUE"] == {f"{p}|3-4": {"profile": "egress_lossless_profile"}
                                  for p in db["PORT"]}
    assert models.errors(db) == []
    bad = copy.deepcopy(db)
    bad["BUFFER_QUEUE"]["Ethernet0|3-4"]["profile"] = "egress_nope"
    assert models.errors(bad)
    assert "BUFFER_QUEUE" not in configs[("mini", 1)]["g1-leaf1"]
