"""`railab up/down/inspect` guard rails on a live lab: nothing is written over a running lab,
`down` says what it did, usage errors (name clashes, bad options) exit 2 (integration: root +
Debian frr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PID

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]
CLI = [sys.executable, "-c", "from railab.cli import main; main()"]


def _railab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_up_of_a_running_lab_name_writes_nothing(mini_lab, tmp_path):
    res = _railab("up", "mini", "--name", mini_lab.name, "--no-progress", cwd=tmp_path)
    assert res.returncode == 2  # a name clash is a usage error, as in `railab generate`
    assert res.stderr.startswith(f"error: lab {mini_lab.name} is already up")
    assert not (tmp_path / "labs").exists()


def test_up_into_a_running_labs_directory_is_refused_before_generating(mini_lab, tmp_path):
    before = (mini_lab.dir / "lab.json").read_bytes()
    res = _railab("up", "rail-only-512", "--name", f"other{PID}", "--out", str(mini_lab.dir), "--no-progress",
                  cwd=tmp_path)
    assert res.returncode == 2  # the same refusal and exit code as `railab generate -o DIR`
    assert f"holds running lab {mini_lab.name}" in res.stderr
    assert (mini_lab.dir / "lab.json").read_bytes() == before


def test_name_only_applies_to_intents(mini_lab, tmp_path):
    res = _railab("up", str(mini_lab.dir), "--name", "x", cwd=tmp_path)
    assert res.returncode == 2 and "--name applies to intents" in res.stderr


def test_down_says_when_there_is_nothing_to_remove(mini_lab, tmp_path):
    res = _railab("down", f"nope{PID}", cwd=tmp_path)
    assert res.returncode == 0
    assert f"lab nope{PID} is not up: nothing to remove" in res.stdout
    assert mini_lab.name in res.stdout  # lists the labs that are up
    res = _railab("down", "labs/not-here", cwd=tmp_path)
    assert res.returncode == 1 and "neither a lab directory nor a lab name" in res.stderr


def test_down_with_a_lab_and_all_is_a_usage_error(mini_lab, tmp_path):
    res = _railab("down", mini_lab.name, "--all", cwd=tmp_path)
    assert res.returncode == 2 and "not both" in res.stderr
    assert _railab("status", mini_lab.name, "--json", cwd=tmp_path).returncode == 0  # untouched


def test_inspect_human_and_json(mini_lab, tmp_path):
    human = _railab("inspect", mini_lab.name, cwd=tmp_path)
    assert human.returncode == 0 and "g1-leaf1" in human.stdout and "bgpd(" in human.stdout
    assert "phases (up to converged)" in human.stdout  # the phase breakdown, as a table
    for phase in ("preflight", "namespaces", "frr_config", "converge", "total"):
        assert phase in human.stdout
    data = json.loads(_railab("inspect", mini_lab.name, "--json", cwd=tmp_path).stdout)
    assert data["lab"] == mini_lab.name and data["runtime"] == "netns"
    assert set(data["namespaces"]) == {n.name for n in mini_lab.spec.nodes}


def test_bgp_peers_are_named_after_their_switch(mini_lab):
    """Each FRR daemon runs with its node's hostname, so BGP's hostname capability names peers."""
    peers = mini_lab.executor.vtysh_json("g1-leaf1", "show bgp neighbors json")
    assert {p["hostname"] for p in peers.values()} == {n.name for n in mini_lab.spec.by_role("spine")}


def test_generate_over_a_running_labs_directory_is_refused(mini_lab, tmp_path):
    before = (mini_lab.dir / "lab.json").read_bytes()
    res = _railab("generate", "rail-only-512", "-o", str(mini_lab.dir), "--name", mini_lab.name, cwd=tmp_path)
    assert res.returncode == 2 and f"holds running lab {mini_lab.name}" in res.stderr
    assert (mini_lab.dir / "lab.json").read_bytes() == before


def test_exec_of_a_missing_command_exits_127(mini_lab, tmp_path):
    res = _railab("exec", mini_lab.name, "srv1", "--", f"no-such-command-{PID}", cwd=tmp_path)
    assert res.returncode == 127, res.stderr
    assert f"no-such-command-{PID}: command not found" in res.stderr and "Traceback" not in res.stderr


def test_exec_without_a_command_opens_a_shell_in_the_node(mini_lab, tmp_path):
    """The shell runs in srv1's network namespace; its exit code is railab's."""
    ns = mini_lab.record["namespaces"]["srv1"]
    res = subprocess.run([*CLI, "exec", mini_lab.name, "srv1"], input="readlink /proc/self/ns/net; exit 7\n",
                         capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={**os.environ, "SHELL": "/bin/sh"})
    assert res.returncode == 7, res.stderr
    assert res.stdout.strip() == f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]"


def test_up_of_a_running_lab_directory_is_a_usage_error(mini_lab, tmp_path):
    """A lab of that name is already up: a name clash (exit 2), and the running lab is untouched."""
    res = _railab("up", str(mini_lab.dir), "--no-progress", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"error: lab {mini_lab.name} is already up") and "Traceback" not in res.stderr
    assert _railab("status", mini_lab.name, "--json", cwd=tmp_path).returncode == 0


def test_exec_on_an_unknown_node_is_a_usage_error(mini_lab, tmp_path):
    res = _railab("exec", mini_lab.name, f"nonode{PID}", "--", "true", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"has no node 'nonode{PID}'" in res.stderr and "Traceback" not in res.stderr


def test_status_and_inspect_list_daemons_in_start_order(mini_lab, tmp_path):
    started = mini_lab.record["routers"]["g1-leaf1"]["daemons"]
    assert started != sorted(started)  # zebra first: start order is not alphabetical here
    from railab.testbed.runtime.netns import NetnsRuntime

    assert list(NetnsRuntime().status(mini_lab.name)["nodes"]["g1-leaf1"]["daemons"]) == started
    env = {**os.environ, "COLUMNS": "250"}
    human = subprocess.run([*CLI, "status", mini_lab.name], capture_output=True, text=True, cwd=tmp_path,
                           timeout=120, env=env)
    assert human.returncode == 0 and " ".join(started) in human.stdout, human.stdout
    inspect = subprocess.run([*CLI, "inspect", mini_lab.name], capture_output=True, text=True, cwd=tmp_path,
                             timeout=120, env=env)
    row = next(line for line in inspect.stdout.splitlines() if "g1-leaf1" in line)
    assert [w.split("(")[0] for w in row.split("│")[3].split()] == started, row
