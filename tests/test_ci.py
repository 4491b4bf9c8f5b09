"""`.ci/run`: bootstrap, lint (ruff pinned, rules in pyproject), then the README's test command
verbatim; pytest's exit 5 (no tests ran) fails the run. Run here with stub tools, no installs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_TEST = "scripts/bootstrap.sh --test && python3 -m pytest -q"


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
