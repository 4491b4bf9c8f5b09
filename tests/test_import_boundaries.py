"""The start-up boundaries of docs/architecture.md ("Imports"): what the commands on a running lab
load, and the name a ``LAB`` argument gives with and without the lab model."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from railab.errors import RailabError
from railab.testbed.labname import lab_name
from railab.testbed.labref import resolve
from railab.topologies.generator import generate

ROOT = Path(__file__).resolve().parents[1]


def _loaded(imports: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``imports``."""
    code = f"import sys\n{imports}\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-500:]
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])


UP_ONLY = ("railab.topologies.labspec", "railab.testbed.capacity", "railab.testbed.stitch",
           "railab.testbed.runtime.netns.preflight", "railab.testbed.runtime.netns.build",
           "railab.testbed.runtime.netns.deploy", "railab.testbed.labref")


def test_list_loads_the_state_record_only():
    """`railab list`: the state module, no clab file reader, no lab model."""
    assert _loaded("import railab.cli.lab, railab.testbed.state",
                   ("railab.testbed.clabfile", "railab.topologies.labspec", "railab.testbed.labname",
                    "railab.testbed.runtime")) == []


def test_down_exec_inspect_load_no_deploy_phase_and_no_lab_model():
    """`railab down` / `exec` / `inspect`: the runtime registry (the netns runtime of a recorded
    lab) and the lab name, never up's phases or the lab model."""
    assert _loaded("import railab.cli.lab, railab.testbed.runtime, railab.testbed.labname", UP_ONLY) == []


def test_the_deployer_registry_loads_ups_phases():
    loaded = _loaded("from railab.testbed.runtime.deploy import get_deployer\nget_deployer('netns')", UP_ONLY)
    assert set(loaded) == set(UP_ONLY) - {"railab.testbed.labref"}


def test_a_netns_deployer_is_the_netns_runtime_with_up():
    from railab.testbed.runtime import get_runtime
    from railab.testbed.runtime.base import Deployer
    from railab.testbed.runtime.deploy import get_deployer
    from railab.testbed.runtime.netns import NetnsRuntime

    rt, dep = get_runtime("netns"), get_deployer("netns")
    assert isinstance(dep, NetnsRuntime) and isinstance(dep, Deployer) and dep.name == rt.name == "netns"
    assert not hasattr(rt, "up") and callable(dep.up)


def test_lab_name_matches_resolve(tmp_path):
    labdir = Path(generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path / "lab", name="lnm"))
    clab = next(labdir.glob("*.clab.yml"))
    only_clab = Path(shutil.copytree(labdir, tmp_path / "only"))
    (only_clab / "lab.json").unlink()  # a lab directory with its .clab.yml only
    for ref in (labdir, labdir / "lab.json", clab, only_clab, only_clab / clab.name, "lnm"):
        assert lab_name(ref) == resolve(ref).name == "lnm", ref
    assert resolve(labdir).labdir == labdir.absolute() and resolve(labdir).spec().name == "lnm"
    with pytest.raises(RailabError, match="neither a lab directory nor a lab name"):
        lab_name("Not-A-Lab")
