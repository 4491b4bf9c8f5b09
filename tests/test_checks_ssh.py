"""`railab check LABDIR --inventory` checks a fabric over SSH (real OpenSSH, real FRR).

The live `mini` lab stands in for a real fabric: one sshd (the fixture of test_ssh_exec, in its
own namespace) serves every switch, and each switch's inventory entry points `vtysh` at that
node's FRR sockets, as an operator would point it at `docker exec bgp vtysh` on SONiC.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from railab.cli import app
from railab.testbed import state as st
from tests.test_ssh_exec import PORT, _known_hosts, in_ns, sshd  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


def test_checks_over_ssh_pass_and_skip_what_needs_namespaces(mini_lab, in_ns, tmp_path):  # noqa: F811 (pytest fixture)
    _ns, tmp, key, host_key = in_ns
    inventory = {
        n.name: {"host": "127.0.0.1", "port": PORT, "user": "root", "key_file": str(key),
                 "vtysh": ["vtysh", "--vty_socket", str(st.node_dir(mini_lab.name, n.name))]}
        for n in mini_lab.spec.nodes if n.role != "server"
    }
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    res = CliRunner().invoke(app, ["check", str(mini_lab.dir), "--inventory", str(inv),
                                   "--known-hosts", str(_known_hosts(tmp, host_key)),
                                   "--only", "bgp,routes,cabling", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["ok"] and out["lab"] == mini_lab.name
    by_family: dict[str, set[str]] = {}
    for r in out["results"]:
        by_family.setdefault(r["check"], set()).add(r["status"])
    assert by_family["bgp"] == {"pass"}  # every session and ASN read over SSH
    assert "pass" in by_family["routes"]  # RIB over SSH; kernel FIB rows need a namespace
    assert by_family["cabling"] == {"skip"}  # netlink wiring needs the node's namespace


def test_unknown_host_key_fails_the_run_clearly(mini_lab, in_ns, tmp_path):  # noqa: F811 (pytest fixture)
    _ns, tmp, key, _host_key = in_ns
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"spine1": {"host": "127.0.0.1", "port": PORT, "key_file": str(key)}}))
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    res = CliRunner().invoke(app, ["check", str(mini_lab.dir), "--inventory", str(inv),
                                   "--known-hosts", str(empty), "--only", "bgp", "--json"])
    out = json.loads(res.output)
    assert res.exit_code == 1 and not out["ok"]
    assert any("host key" in (r.get("reason") or "") + (r.get("observed") or "") for r in out["results"]), out
