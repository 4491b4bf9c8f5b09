"""A corpus of bad intents and the one clear error each must give (naming the key)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from railab.topologies.generator import generate
from railab.topologies.intent import IntentError, load_intent, parse_intent

INTENTS = Path(__file__).resolve().parents[1] / "topologies" / "intents"
MINI = yaml.safe_load((INTENTS / "mini.yml").read_text())
RAIL_ONLY = yaml.safe_load((INTENTS / "rail-only-512.yml").read_text())


def _set(base: dict, path: str, value):
    d = copy.deepcopy(base)
    cur = d
    *parents, last = path.split(".")
    for p in parents:
        cur = cur[p]
    cur[last] = value
    return d


CORPUS = [
    # (id, intent data, expected fragments of the message)
    ("unknown-top-key", _set(MINI, "labz", 1), ["labz: unknown key", "allowed keys: description, design, lab, name"]),
    ("unknown-lab-key", _set(MINI, "lab.spinez", 2), ["lab.spinez: unknown key", "spines"]),
    ("unknown-design-key", _set(MINI, "design.gpu", 8), ["design.gpu: unknown key", "gpus"]),
    ("unknown-image-key", _set(MINI, "lab.images", {"frr": "x", "ceos": "y"}), ["lab.images.ceos: unknown key"]),
    ("missing-design", {k: v for k, v in MINI.items() if k != "design"}, ["design: required key is missing"]),
    ("missing-servers", _set(MINI, "lab", {k: v for k, v in MINI["lab"].items() if k != "servers_per_group"}),
     ["lab.servers_per_group: required key is missing"]),
    ("missing-spines", _set(MINI, "lab", {k: v for k, v in MINI["lab"].items() if k != "spines"}),
     ["lab.spines: required key is missing"]),
    ("negative-gpus", _set(MINI, "design.gpus", -8), ["design.gpus:", "greater than 0"]),
    ("zero-servers", _set(MINI, "lab.servers_per_group", 0), ["lab.servers_per_group:", "greater than or equal to 1"]),
    ("bad-arch", _set(MINI, "design.architecture", "fat-tree"), ["design.architecture:", "rail-only"]),
    ("bad-kind", _set(MINI, "lab.kind", "ceos"), ["lab.kind:", "frr", "sonic-vs"]),
    ("tiny-mtu", _set(MINI, "lab.mtu", 576), ["lab.mtu:", "1280"]),
    ("bad-ratio", _set(MINI, "design.oversubscription", "one-to-one"), ["design.oversubscription:", "1:1"]),
    # same explanation as `railab plan -o 1:0` (topologies.planner.parse_oversubscription)
    ("ratio-no-uplinks", _set(MINI, "design.oversubscription", "1:0"),
     ["design.oversubscription:", "leaves no uplinks to the spines"]),
    ("lab-ratio-no-servers", _set(MINI, "lab.oversubscription", "0:1"),
     ["lab.oversubscription:", "leaves no ports for servers"]),
    # the lab's own ratio is named, not just the key (a new user's find)
    ("lab-ratio-mismatch", _set(MINI, "lab.oversubscription", "4:1"),
     ["lab.spines:", "oversubscription is 4:1", "or set lab.oversubscription to 1:1"]),
    ("bad-pool", _set(MINI, "lab.rail_pool", "10.0.0.0/33"), ["lab.rail_pool:", "IPv4 network"]),
    ("lab-string", _set(MINI, "lab", "half"), ["lab: must be a mapping or the string 'full'"]),
    ("lab-name-upper", _set(MINI, "name", "Mini_Lab"), ["name: 'Mini_Lab' is not a valid lab name"]),
    ("lab-name-long", _set(MINI, "name", "a" * 33), ["name:", "not a valid lab name"]),
    ("lab-name-digit", _set(MINI, "name", "1lab"), ["name:", "starting with a letter"]),
    ("unknown-leaf", _set(MINI, "design.leaf", "CX999"), ["design.leaf:", "CX864E-N"]),
    ("unknown-spine", _set(MINI, "design.spine", "QFX"), ["design.spine:", "CX732Q-N"]),
    ("not-1to1", _set(MINI, "lab.spines", 3), ["lab.spines:", "2:3", "oversubscription is 1:1",
                                                "spines x links_per_pair = 2"]),
    ("not-2to1", _set(_set(MINI, "lab.oversubscription", "2:1"), "lab.spines", 2),
     ["lab.spines:", "2:2", "oversubscription is 2:1", "spines x links_per_pair = 1"]),
    ("too-many-rails", _set(MINI, "lab.rails", 9), ["lab.rails: 9 rails exceed design.gpus_per_server (8)"]),
    ("rail-opt-two-rails-per-leaf", _set(MINI, "lab.rails_per_leaf", 2), ["lab.rails_per_leaf:", "exactly one rail"]),
    ("rail-only-spines", _set(RAIL_ONLY, "lab.spines", 2), ["lab.spines: a rail-only fabric has no spine layer"]),
    ("rail-only-groups", _set(RAIL_ONLY, "lab.groups", 2), ["lab.groups: a rail-only fabric is one group"]),
    ("rail-only-links", _set(RAIL_ONLY, "lab.links_per_pair", 2), ["lab.links_per_pair:", "no leaf-spine links"]),
    ("rail-only-uneven", _set(RAIL_ONLY, "lab.rails_per_leaf", 3), ["lab.rails_per_leaf:", "evenly"]),
    ("sonic-too-many-ports", _set(_set(_set(MINI, "lab.kind", "sonic-vs"), "lab.servers_per_group", 20),
                                  "lab.spines", 20), ["lab.kind:", "sonic-vs leaf would need 40 data ports", "32"]),
    ("sonic-spine-ports", _set(_set(_set(MINI, "lab.kind", "sonic-vs"), "lab.groups", 10), "lab.links_per_pair", 1),
     ["lab.kind:", "sonic-vs spine would need 40 data ports"]),
    ("pools-overlap", _set(MINI, "lab.loopback_pool", "10.0.200.0/24"),
     ["lab.loopback_pool: 10.0.200.0/24 overlaps lab.rail_pool 10.0.0.0/16"]),
    ("rail-pool-small", _set(MINI, "lab.rail_pool", "10.0.0.0/22"), ["lab.rail_pool:", "holds 4", "needs 8"]),
    ("rail-prefix-short", _set(MINI, "lab.rail_prefixlen", 12), ["lab.rail_prefixlen: /12 is shorter"]),
    ("rail-subnet-small", _set(MINI, "lab.rail_prefixlen", 31), ["lab.rail_prefixlen:", "holds 1 server /31s"]),
    ("loopback-pool-small", _set(MINI, "lab.loopback_pool", "10.255.0.0/29"),
     ["lab.loopback_pool:", "6 usable addresses", "10 switches"]),
    ("full-with-size", _set(_set(MINI, "lab", {"scale": "full", "spines": 2}), "name", "x"),
     ["lab.spines: not allowed with `scale: full`"]),
    ("full-partial-group", _set(_set(MINI, "lab", "full"), "design.gpus", 800),
     ["lab: full", "partial", "whole groups"]),
    ("full-sonic", _set(MINI, "lab", {"scale": "full", "kind": "sonic-vs"}), ["lab.kind:", "sonic-vs"]),
]


@pytest.mark.parametrize("data,fragments", [(d, f) for _, d, f in CORPUS], ids=[c[0] for c in CORPUS])
def test_bad_intent(data, fragments):
    with pytest.raises(IntentError) as ei:
        parse_intent(data, "bad.yml")
    msg = str(ei.value)
    assert msg.startswith("intent bad.yml: "), msg
    assert "Traceback" not in msg and "\n" not in msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"


def test_missing_intent_lists_shipped():
    with pytest.raises(IntentError) as ei:
        load_intent("no-such-intent")
    for n in ("mini", "rail-only-256", "rail-only-512", "rail-optimized-1024", "rail-optimized-4096"):
        assert n in str(ei.value)


def test_invalid_yaml(tmp_path):
    p = tmp_path / "x.yml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(IntentError, match="not valid YAML"):
        load_intent(p)
    p.write_text("- a list\n")
    with pytest.raises(IntentError, match="mapping"):
        load_intent(p)


def test_bad_intent_file_writes_nothing(tmp_path):
    p = tmp_path / "bad.yml"
    p.write_text(yaml.safe_dump(_set(MINI, "lab.spines", 3)))
    with pytest.raises(IntentError, match="lab.spines"):
        generate(p, tmp_path / "out")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.yml"]


def test_cli_bad_intent_exit_2(tmp_path):
    from typer.testing import CliRunner

    from railab.cli import app

    p = tmp_path / "bad.yml"
    p.write_text(yaml.safe_dump(_set(MINI, "lab.spinez", 2)))
    r = CliRunner().invoke(app, ["generate", str(p), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "error: " in r.output and "lab.spinez: unknown key" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key", ["design", "lab"])
def test_unquoted_ratio_is_yaml_base60(tmp_path, key):
    """YAML 1.1 reads `oversubscription: 3:1` as the integer 181; the error says to quote it."""
    text = yaml.safe_dump(MINI, sort_keys=False)
    body = yaml.safe_load(text)
    body[key]["oversubscription"] = "@@"
    p = tmp_path / "x.yml"
    p.write_text(yaml.safe_dump(body, sort_keys=False).replace("'@@'", "3:1"))
    assert yaml.safe_load(p.read_text())[key]["oversubscription"] == 181
    with pytest.raises(IntentError) as ei:
        load_intent(p)
    msg = str(ei.value)
    assert f"{key}.oversubscription: got the number 181" in msg
    assert 'quote it, e.g. oversubscription: "3:1"' in msg
    assert "valid string" not in msg
