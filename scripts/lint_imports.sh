#!/usr/bin/env bash
# Lint railab's layering with import-linter on a clean, NON-editable install, from outside the
# repository, after importing every railab.* submodule, checking that the old top-level names
# (testbed, topologies, traffic, checks) are gone and that `railab generate mini` works. First,
# on the sources: no function-local import of railab.* outside app/ but the doors to optional
# dependencies listed in docs/architecture.md ("Imports").
#
# Why not the developer's editable install: setuptools' package-dir mapping (railab.testbed =
# testbed/ ...) is served by an import hook that import-linter (grimp) cannot walk. The wheel is
# built from `git ls-files` only, so a stale build/ or untracked file never leaks into it.
#
# Usage: scripts/lint_imports.sh  (exit status: import-linter's, or 1 when an import check fails)
# Env: IMPORT_LINTER_VERSION (default pinned below), KEEP_LINT_VENV=1 keeps the scratch dir.
set -euo pipefail
IMPORT_LINTER_VERSION="${IMPORT_LINTER_VERSION:-2.16}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d /tmp/railab-lint.XXXXXX)"
cleanup() { [ -n "${KEEP_LINT_VENV:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT

# Function-local imports of railab.* outside app/ (docs/architecture.md, "Imports"): only the
# listed doors to optional dependencies; `if TYPE_CHECKING:` blocks are not imports at run time.
python3 - "$repo" <<'PY'
import ast
import sys
from pathlib import Path

ALLOWED = {  # (file, module): the optional `containerlab` extra (docker)
    ("testbed/runtime/containerlab/prereq.py", "railab.testbed.docker_exec"),
    ("testbed/runtime/__init__.py", "railab.testbed.runtime.containerlab"),
}
repo = Path(sys.argv[1])
found = []


def walk(node, rel, in_function):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for sub in child.orelse:
                walk(sub, rel, in_function)
            continue
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
            if isinstance(child, ast.ImportFrom):  # the module, or module.name for a submodule
                mod = ("railab." if child.level else "") + (child.module or "")
                names = [(mod, f"{mod}.{a.name}") for a in child.names]
            else:
                names = [(a.name, a.name) for a in child.names]
            for mod, full in names:
                if mod.split(".")[0] == "railab" and not {(rel, mod), (rel, full)} & ALLOWED:
                    found.append(f"{rel}:{child.lineno}: {full}")
        walk(child, rel, inner)


for top in ("testbed", "topologies", "traffic", "checks"):
    for path in sorted((repo / top).rglob("*.py")):
        rel = str(path.relative_to(repo))
        walk(ast.parse(path.read_text(), rel), rel, False)
if found:
    sys.exit("function-local railab imports outside app/ (import at the top, or defer at a "
             "boundary: docs/architecture.md, \"Imports\"):\n  " + "\n  ".join(found))
print(f"function-local railab imports outside app/: only the {len(ALLOWED)} optional-dependency doors")
PY

mkdir "$tmp/src" "$tmp/run"
# tracked files, plus files the working tree adds that git already knows about (staged)
(cd "$repo" && git ls-files -z --cached | tar --null -T - -c) | tar -x -C "$tmp/src"
python3 -m venv --system-site-packages "$tmp/venv"
py="$tmp/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check --no-warn-script-location "import-linter==${IMPORT_LINTER_VERSION}"
"$py" -m pip install -q --disable-pip-version-check --no-warn-script-location --no-deps "$tmp/src"

cd "$tmp/run"  # outside the repository: only the installed package is importable as railab
"$py" - <<'PY'
import importlib
import pkgutil
import sys

import railab

if "/site-packages/" not in railab.__file__:
    sys.exit(f"railab imported from {railab.__file__}, not from the scratch install")
failed = []
names = ["railab"] + [m.name for m in pkgutil.walk_packages(railab.__path__, "railab.")]
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:  # report every broken module, not just the first
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
for old in ("testbed", "topologies", "traffic", "checks"):
    try:
        importlib.import_module(old)
    except ImportError:
        continue
    failed.append(f"`import {old}` works: the old top-level name leaked into the install")
if failed:
    sys.exit("import check failed:\n  " + "\n  ".join(failed))
print(f"imported {len(names)} railab modules; old top-level names absent")
PY
# the installed CLI works from outside the repository (package data: intents, templates, schema)
"$tmp/venv/bin/railab" generate mini >/dev/null
[ -f labs/mini/lab.json ] || { echo "railab generate mini wrote no labs/mini/lab.json" >&2; exit 1; }
echo "railab generate mini: ok"
exec "$tmp/venv/bin/lint-imports" --config "$repo/.importlinter"
