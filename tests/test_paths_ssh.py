"""Issue 13: `railab check LABDIR --inventory FILE` with every family (no --only) over a real
OpenSSH server: the rows that cannot run over SSH (hops, which injects traffic from the server
namespaces; cabling and oversub, which read netlink) are `skip` with a reason, nothing crashes
(before: `AttributeError: 'NoneType' object has no attribute 'startswith'` in the engine)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from railab.cli import app
from railab.testbed import state as st
from tests.test_ssh_exec import PORT, _known_hosts, in_ns, sshd  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


def test_every_family_over_ssh_passes_or_skips_with_a_reason(mini_lab, in_ns, tmp_path):  # noqa: F811
    _ns, tmp, key, host_key = in_ns
    inventory = {
        n.name: {"host": "127.0.0.1", "port": PORT, "user": "root", "key_file": str(key),
                 "vtysh": ["vtysh", "--vty_socket", str(st.node_dir(mini_lab.name, n.name))]}
        for n in mini_lab.spec.nodes if n.role != "server"
    }
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    res = CliRunner().invoke(app, ["check", str(mini_lab.dir), "--inventory", str(inv),
                                   "--known-hosts", str(_known_hosts(tmp, host_key)), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    status = {}
    for r in out["results"]:
        status.setdefault(r["check"], set()).add(r["status"])
    assert status["bgp"] == {"pass"}
    assert status["hops"] == {"skip"} and status["cabling"] == {"skip"}
    assert status["oversub"] == {"skip"}
    hops = next(r for r in out["results"] if r["check"] == "hops")
    assert "network namespace" in hops["reason"] and "--only" in hops["reason"]
