"""Registrations from the user's own modules reach the ``railab`` command (issue 11 review,
item 5): plugins named by the ``railab.plugins`` entry-point group or ``RAILAB_PLUGINS`` are
imported at CLI start (after the built-ins) and by the pytest plugin; a broken one is one
``error:`` line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from railab.errors import EXIT_USAGE
from railab.topologies.intent import INTENTS_DIR

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "railab"]


def _railab(*args: str, plugins: str | None, pythonpath: Path | str = TESTS, cwd: Path | None = None
            ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAILAB_PLUGINS"}
    if plugins is not None:
        env["RAILAB_PLUGINS"] = plugins
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "200"
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=cwd or TESTS.parent / "docs", check=False)


def test_kinds_shows_plugin_registrations():
    import dummy_registrations as dummy  # noqa: F401  (names only; PYTHONPATH has tests/)

    r = _railab("kinds", "--json", plugins="dummy_registrations")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert dummy.KIND in rec["node_kinds"]
    assert rec["node_kinds"][dummy.KIND]["daemons"] == ["zebra", "bgpd"]
    assert dummy.PATH_CLASS in rec["path_classes"]
    assert dummy.PATTERN in rec["patterns"] and dummy.CROSS_POD_PATTERN in rec["patterns"]
    # without the plugin: none of them
    r = _railab("kinds", "--json", plugins=None)
    rec = json.loads(r.stdout)
    assert dummy.KIND not in rec["node_kinds"] and dummy.PATTERN not in rec["patterns"]


def test_plugin_pattern_in_help_and_generate_accepts_plugin_kind(tmp_path):
    r = _railab("traffic", "--help", plugins="dummy_registrations")
    assert r.returncode == 0 and "dummy-pairs" in r.stdout, r.stderr
    intent = tmp_path / "k.yml"

    data = yaml.safe_load((INTENTS_DIR / "mini.yml").read_text())
    data["lab"]["kind"] = "dummy-sw"
    intent.write_text(yaml.safe_dump(data))
    out = tmp_path / "lab"
    r = _railab("generate", str(intent), "--name", f"pg{os.getpid()}", "-o", str(out),
                plugins="dummy_registrations")
    assert r.returncode == 0, r.stderr
    spec = json.loads((out / "lab.json").read_text())
    assert "dummy-sw" in spec["node_kinds"] and spec["expected_hops"]["dummy-cross-pod"] == 5
    r = _railab("generate", str(intent), "--name", f"ph{os.getpid()}", "-o", str(tmp_path / "x"),
                plugins=None)
    assert r.returncode == EXIT_USAGE and "dummy-sw" in r.stderr


def test_check_only_accepts_plugin_check():
    """``--only dummy`` passes option validation with the plugin (the lab then is not up: exit 1,
    a lab error); without it, it is a usage error naming --only (exit 2)."""
    lab = f"nolab{os.getpid()}"
    r = _railab("check", lab, "--only", "dummy", plugins="dummy_check:register")
    assert r.returncode == 1, r.stderr
    assert "--only" not in r.stderr and f"lab {lab!r} is not up" in r.stderr
    r = _railab("check", lab, "--only", "dummy", plugins=None)
    assert r.returncode == EXIT_USAGE and "unknown check dummy" in r.stderr


@pytest.mark.parametrize("plugins, name", [
    ("nosuchmod_railab", "nosuchmod_railab"),
    ("dummy_registrations,broken_plugin_railab", "broken_plugin_railab"),
    ("dummy_check:nosuchfunc", "dummy_check:nosuchfunc"),
])
def test_broken_plugin_is_one_error_line(tmp_path, plugins, name):
    (tmp_path / "broken_plugin_railab.py").write_text("raise RuntimeError('boom')\n")
    pp = os.pathsep.join([str(tmp_path), str(TESTS)])
    for args in (["kinds"], ["check", "x", "--only", "dummy"]):
        r = _railab(*args, plugins=plugins, pythonpath=pp)
        assert r.returncode == EXIT_USAGE, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: railab plugin "), r.stderr
        assert repr(name) in lines[0] and "RAILAB_PLUGINS" in lines[0]
        assert "Traceback" not in r.stderr


def test_entry_point_plugin(tmp_path):
    """A package that declares the entry point is loaded without RAILAB_PLUGINS."""
    dist = tmp_path / "railab_ep_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: railab-ep-demo\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[railab.plugins]\ndemo = dummy_registrations\n")
    pp = os.pathsep.join([str(tmp_path), str(TESTS)])
    r = _railab("kinds", "--json", plugins=None, pythonpath=pp)
    assert r.returncode == 0, r.stderr
    assert "dummy-sw" in json.loads(r.stdout)["node_kinds"]
    (dist / "entry_points.txt").write_text("[railab.plugins]\ndemo = nosuchmod_railab\n")
    r = _railab("kinds", plugins=None, pythonpath=pp)
    assert r.returncode == EXIT_USAGE
    assert "entry point 'demo' of group railab.plugins" in r.stderr.strip().splitlines()[0]


def test_pytest_plugin_loads_plugins(pytester, monkeypatch):
    pytester.makepyfile(test_x="""
        from railab.topologies.nodekinds import node_kinds
        from railab.checks.base import CHECKS

        def test_registered():
            assert "dummy-sw" in node_kinds() and "dummy" in CHECKS
        """)
    monkeypatch.setenv("RAILAB_PLUGINS", "dummy_registrations,dummy_check:register")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    monkeypatch.setenv("RAILAB_PLUGINS", "nosuchmod_railab")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert res.ret != 0
    assert "railab plugin 'nosuchmod_railab'" in res.stderr.str()
