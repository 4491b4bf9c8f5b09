"""ContainerlabRuntime: command lines, inspect parsing, and the clean failure without containerlab.

No containerlab binary can be installed on this project's machines, so the commands railab would
run are checked as argv lists, and ``containerlab inspect --format json`` parsing runs on samples
in the documented formats (tests/data/clab-inspect-*.json):

* ``clab-inspect-0.68.json`` / ``clab-inspect-all-0.68.json``: the keyed-by-lab form, as shown in
  containerlab's docs/cmd/inspect/index.md ("Provide information about a specific running lab in
  json format") and introduced by PR srl-labs/containerlab#2552 (containerlab 0.68): lab name ->
  list of rows with lab_name, labPath, absLabPath, name, container_id, image, kind, state, status,
  ipv4_address, ipv6_address, owner. Rows rewritten for railab's ``mini`` lab; the ``vlan`` lab
  rows are the docs' own.
* ``clab-inspect-legacy.json``: the flat ``{"containers": [...]}`` form of containerlab < 0.68, as
  quoted in issue srl-labs/containerlab#2549 (no absLabPath/status, has group).
The first releases printed a bare list (cmd/inspect.go of 2020); that is tested inline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from railab.cli import app
from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.runtime import get_runtime
from railab.testbed.runtime.containerlab import (
    ContainerlabRuntime,
    deploy_argv,
    destroy_argv,
    inspect_argv,
    parse_inspect,
)
from railab.testbed.runtime.netns import NetnsRuntime
from railab.topologies.generator import generate

DATA = Path(__file__).parent / "data"


def test_deploy_argv():
    assert deploy_argv("labs/mini/mini.clab.yml") == ["containerlab", "deploy", "-t", "labs/mini/mini.clab.yml"]
    assert deploy_argv(Path("/l/mini.clab.yml"), reconfigure=True, binary="/usr/bin/clab") == [
        "/usr/bin/clab", "deploy", "-t", "/l/mini.clab.yml", "--reconfigure"]


def test_destroy_and_inspect_argv():
    assert destroy_argv(clab_file="/l/mini.clab.yml", lab="mini") == [
        "containerlab", "destroy", "-t", "/l/mini.clab.yml", "--cleanup"]
    assert destroy_argv(lab="mini") == ["containerlab", "destroy", "--name", "mini", "--cleanup"]
    assert inspect_argv(clab_file="/l/mini.clab.yml") == [
        "containerlab", "inspect", "-t", "/l/mini.clab.yml", "--format", "json"]
    assert inspect_argv(lab="mini") == ["containerlab", "inspect", "--name", "mini", "--format", "json"]
    with pytest.raises(ValueError):
        destroy_argv()


def test_parse_keyed_format_068():
    rows = parse_inspect((DATA / "clab-inspect-0.68.json").read_text())
    assert [(c.node, c.state) for c in rows] == [
        ("g1-leaf1", "running"), ("spine1", "running"), ("srv1", "exited")]
    leaf = rows[0]
    assert leaf.name == "clab-mini-g1-leaf1" and leaf.lab == "mini"
    assert leaf.image == "quay.io/frrouting/frr:8.4.4" and leaf.container_id == "4f1d2c3b5a69"
    assert leaf.lab_path == "/root/railab/labs/mini/mini.clab.yml"  # absLabPath preferred
    assert leaf.running and not rows[2].running
    assert rows[2].status.startswith("Exited")


def test_parse_flat_containers_format():
    rows = parse_inspect((DATA / "clab-inspect-legacy.json").read_text())
    assert [c.node for c in rows] == ["g1-leaf1", "spine1"]
    assert rows[0].status == "" and rows[0].lab_path == "labs/mini/mini.clab.yml"


def test_parse_all_labs_and_bare_list_and_empty():
    rows = parse_inspect((DATA / "clab-inspect-all-0.68.json").read_text())
    assert [(c.lab, c.node) for c in rows] == [("mini", "spine1"), ("vlan", "client1")]
    bare = [{"lab_name": "mini", "name": "/clab-mini-spine2", "state": "running"}]
    assert [(c.name, c.node) for c in parse_inspect(json.dumps(bare))] == [("clab-mini-spine2", "spine2")]
    assert parse_inspect("{}") == [] and parse_inspect("") == []


def test_parse_bad_output_is_one_error():
    with pytest.raises(RailabError, match="non-JSON"):
        parse_inspect("INFO[0000] no containers found")
    with pytest.raises(RailabError, match="without a container name"):
        parse_inspect('{"mini": [{"lab_name": "mini"}]}')


def test_registry_and_naming():
    rt = get_runtime("containerlab")
    assert isinstance(rt, ContainerlabRuntime) and rt.name == "containerlab"
    assert rt.netns_name("mini", "g1-leaf3") == "clab-mini-g1-leaf3"


@pytest.fixture
def mini_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    shipped = Path(__file__).resolve().parents[1] / "topologies" / "intents" / "mini.yml"
    return Path(generate(shipped, tmp_path / "lab"))


@pytest.mark.skipif(shutil.which("containerlab") is not None, reason="containerlab is installed here")
def test_up_without_containerlab_fails_cleanly(mini_lab, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(RailabError) as err:
        ContainerlabRuntime().up(mini_lab)
    msg = str(err.value)
    assert "containerlab binary ('containerlab') is not on PATH" in msg
    assert "Docker engine not reachable" in msg
    assert "--runtime netns" in msg
    assert "\n" not in msg  # one line
    assert not (tmp_path / "run" / "mini").exists()  # nothing recorded, nothing half-built


def test_down_of_unknown_lab_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    ContainerlabRuntime().down("nosuchlab")
    with pytest.raises(RailabError, match="is not up"):
        ContainerlabRuntime().inspect("nosuchlab")


def test_down_refuses_a_netns_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    st.save({"lab": "other", "runtime": "netns", "namespaces": {}})
    with pytest.raises(RailabError, match="netns runtime"):
        ContainerlabRuntime().down("other")
    assert st.load("other") is not None


def test_cli_up_runtime_containerlab(mini_lab, tmp_path, monkeypatch):
    """Through the CLI: one `error:` line and a non-zero exit (needs `railab up --runtime`)."""
    up_help = CliRunner().invoke(app, ["up", "--help"]).output
    if "--runtime" not in up_help:
        pytest.skip("`railab up` has no --runtime option yet (testbed/cli/lab.py)")
    if shutil.which("containerlab") is not None:
        pytest.skip("containerlab is installed here")
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
               RAILAB_RUN_DIR=str(tmp_path / "run"))
    res = subprocess.run([shutil.which("railab") or "railab", "up", str(mini_lab), "--runtime", "containerlab",
                          "--no-progress"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode != 0
    assert res.stderr.startswith("error: the containerlab runtime cannot run here")
    assert "--runtime netns" in res.stderr and "Traceback" not in res.stderr


def test_netns_runtime_leaves_containerlab_labs_alone(tmp_path, monkeypatch):
    """`down --all` on the netns runtime never tears down a lab containerlab recorded."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    st.save({"lab": "clabonly", "runtime": "containerlab", "namespaces": {"n1": "clab-clabonly-n1"}})
    with pytest.raises(RailabError, match="containerlab runtime"):
        NetnsRuntime().down("clabonly")
    assert "clabonly" not in NetnsRuntime().down_all()
    assert st.load("clabonly") is not None
