"""pyproject.toml declares exactly what railab imports: every third-party import of the package
is a dependency (docker, paramiko and pytest only as the containerlab / ssh / pytest extras), every dependency
is imported, and the tests' imports are in the test extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("app", "testbed", "topologies", "traffic", "checks")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    """``pyroute2>=0.7.12,<0.10`` -> ``pyroute2`` (normalized as PyPI does)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", req).group(0)).lower()


def _imported(dirs) -> dict[str, set[str]]:
    """Top-level third-party import name -> files importing it (function-local imports included)."""
    out: dict[str, set[str]] = {}
    for d in dirs:
        for f in (ROOT / d).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for n in names:
                    top = n.split(".")[0]
                    local = (f.parent / f"{top}.py").exists()  # e.g. tests' `from conftest import`
                    if top not in sys.stdlib_module_names and top not in ("railab", "tests", "__future__") \
                            and not local:
                        out.setdefault(top, set()).add(str(f.relative_to(ROOT)))
    return out


def _dists(modules) -> dict[str, str]:
    """Import name -> distribution name (normalized), from the installed packages' metadata."""
    by_module = metadata.packages_distributions()
    return {m: _name(by_module[m][0]) for m in modules}


def test_every_import_is_declared_and_every_dependency_is_imported():
    deps = {_name(r) for r in PROJECT["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in PROJECT["optional-dependencies"].items()}
    used = _dists(_imported(PACKAGE_DIRS))
    # optional imports: the containerlab runtime, SSH checks, and the pytest plugin (pytest loads it)
    optional = {"docker": "containerlab", "paramiko": "ssh", "pytest": "pytest", "libyang": "sonic-yang"}
    assert _imported(PACKAGE_DIRS)["pytest"] == {"app/pytest_plugin.py"}
    for module, dist in used.items():
        if module in optional:
            assert dist in extras[optional[module]] and dist not in deps, (module, dist)
        else:
            assert dist in deps, f"{module} is imported but {dist} is not a dependency"
    assert deps <= set(used.values()), f"declared but never imported: {deps - set(used.values())}"
    assert not {"networkx", "pytest-benchmark"} & (deps | set().union(*extras.values()))


def test_the_tests_imports_are_in_the_test_extra():
    test = {_name(r) for r in PROJECT["optional-dependencies"]["test"]}
    deps = {_name(r) for r in PROJECT["dependencies"]} | test
    deps |= {_name(r) for k in ("containerlab", "ssh") for r in PROJECT["optional-dependencies"][k]}
    for module, dist in _dists(_imported(["tests"])).items():
        assert dist in deps, f"tests import {module} ({dist}): add it to the test extra"
    pinned = [r for r in PROJECT["optional-dependencies"]["test"] if r.startswith("ruff==")]
    assert pinned, "ruff must be pinned (its defaults move between releases)"


def test_versions_we_rely_on_have_an_upper_bound():
    for req in PROJECT["dependencies"]:
        if _name(req) in ("pyroute2", "pydantic", "typer", "scapy"):
            assert "<" in req, f"{req}: bound it below the next major"
