"""The entry point's error handling works without the standalone `click` package (Typer >= 0.2x
vendors click and no longer installs it), so a usage error is never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Block `import click` in the child, as in a fresh venv where only Typer is installed.
PROG = "import sys; sys.modules['click'] = None; from railab.cli import main; sys.argv[0] = 'railab'; main()"


def _railab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROG, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [["plan", "--bogus"], ["frobnicate"]])
def test_usage_errors_exit_2_without_traceback(args):
    res = _railab(*args)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "Error:" in res.stderr


def test_model_errors_are_one_line(tmp_path):
    res = _railab("plan", "--gpus", "16384", "--arch", "rail-optimized", "--leaf", "CX864E-N",
                  "--tiers", "2")  # two tiers forced: past their limit
    assert res.returncode == 2
    assert res.stderr.startswith("error: 16384 GPUs needs 32 groups") and "Traceback" not in res.stderr
