"""`.ci/run`: bootstrap, lint (ruff pinned, rules in pyproject), then the README's test command
verbatim; pytest's exit 5 (no tests ran) fails the run. Run here with stub tools, no installs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_TEST = "scripts/bootstrap.sh --test && python3 -m pytest -q -n 2 --dist loadgroup"


def test_ci_runs_the_readme_test_command_after_the_lint_steps():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci/run").read_text()
    assert README_TEST in readme and README_TEST in ci
    assert ci.index("ruff check") < ci.index(README_TEST)
    assert ci.index("scripts/bootstrap.sh --test") < ci.index("ruff check")  # ruff comes with the bootstrap
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["target-version"] == "py311" and ruff["line-length"] == 120 and ruff["lint"]["select"]


def _fake_repo(tmp_path: Path, pytest_rc: int, ruff_rc: int = 0) -> tuple[Path, dict]:
    """A copy of .ci/run with a no-op bootstrap and a python3 whose pytest/ruff exit as told."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / ".ci/run", tmp_path / ".ci/run")
    (tmp_path / "scripts/bootstrap.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "scripts/bootstrap.sh").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\ncase "$*" in *pytest*) echo "stub pytest"; exit {pytest_rc};; '
        f'*ruff*) exit {ruff_rc};; esac\nexit 0\n')
    (bin_dir / "python3").chmod(0o755)
    return tmp_path, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _ci(repo: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / ".ci/run")], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_ci_passes_when_pytest_passes(tmp_path):
    res = _ci(*_fake_repo(tmp_path, 0))
    assert res.returncode == 0 and "stub pytest" in res.stdout, res.stderr


def test_ci_fails_when_pytest_ran_no_tests(tmp_path):
    res = _ci(*_fake_repo(tmp_path, 5))
    assert res.returncode == 5 and "ran no tests" in res.stderr


def test_ci_fails_on_a_ruff_finding_before_the_suite(tmp_path):
    res = _ci(*_fake_repo(tmp_path, 0, ruff_rc=1))
    assert res.returncode == 1 and "stub pytest" not in res.stdout


def test_the_suites_live_modules_run_on_one_xdist_worker(tmp_path):
    """The README's ``-n 2 --dist loadgroup`` keeps every live module on one worker (labs up
    once, load runs never side by side). CI once ran them on both workers: the conftest's
    grouping hook ran after xdist's, which had already read the (missing) group marks."""
    shutil.copy(ROOT / "tests/conftest.py", tmp_path / "conftest.py")
    out = tmp_path / "workers"
    out.mkdir()
    body = ('import os, pytest\n'
            '@pytest.mark.parametrize("k", range(6))\n'
            'def test_x(k{arg}):\n'
            '    w = os.environ["PYTEST_XDIST_WORKER"]\n'
            '    (__import__("pathlib").Path({out!r}) / f"{{__name__}}-{{k}}").write_text(w)\n')
    # live by a lab fixture (overridden here with a stand-in: nothing comes up) and by the mark
    (tmp_path / "test_live_a.py").write_text("import pytest\n@pytest.fixture\ndef mini_lab():\n    return None\n"
                                             + body.format(arg=", mini_lab", out=str(out)))
    (tmp_path / "test_live_b.py").write_text("import pytest\npytestmark = pytest.mark.integration\n"
                                             + body.format(arg="", out=str(out)))
    for m in "cdef":
        (tmp_path / f"test_unit_{m}.py").write_text(body.format(arg="", out=str(out)))
    r = subprocess.run(["python3", "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                        "-p", "no:randomly", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = {p.name: p.read_text() for p in out.iterdir()}
    live = {w for n, w in ran.items() if n.startswith("test_live")}
    integration_runs = os.geteuid() == 0 and Path("/usr/lib/frr/zebra").exists()
    assert sum(n.startswith("test_live") for n in ran) == (12 if integration_runs else 6)
    # every live test on one worker: xdist's loadgroup read the conftest's groups (under pytest
    # 9.2 it could not: node ids stayed without their "@group", pyproject.toml's test extra)
    assert len(live) == 1, (pytest.__version__, ran)
    assert {w for n, w in ran.items() if n.startswith("test_unit")} - live, ran  # the other worker ran the rest


def test_the_suites_module_lists_name_live_modules():
    """conftest's OWN_LAB_MODULES (second worker) and TIMED_MODULES (take turns with them) name
    test modules that exist and are live, and no module is in both."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests/conftest.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    assert not conf.OWN_LAB_MODULES & conf.TIMED_MODULES
    for name in conf.OWN_LAB_MODULES | conf.TIMED_MODULES:
        text = (ROOT / "tests" / f"{name}.py").read_text()
        assert "pytest.mark.integration" in text or any(f in text for f in conf.LAB_FIXTURES), name
    for name in conf.OWN_LAB_MODULES:  # no session lab: the other worker would bring up its own copy
        assert not any(f in (ROOT / "tests" / f"{name}.py").read_text() for f in conf.LAB_FIXTURES), name
    for entry in conf.UNTIMED_TESTS:  # exempt from the turn: a test of a timed module that exists
        module, _, func = entry.partition("::")
        assert module in conf.TIMED_MODULES, entry
        assert f"def {func}(" in (ROOT / "tests" / f"{module}.py").read_text(), entry
