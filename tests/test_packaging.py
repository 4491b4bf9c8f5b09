"""A wheel of railab holds only ``railab/...`` (and its dist-info): a stale ``build/`` from an
older layout (``build/lib/testbed``) never leaks a generic top-level name into ``pip install .``
(setup.py's build_py empties build_lib first). No root needed. With setuptools >= 68 and
wheel installed the build is offline (``--no-build-isolation``), else pip's isolated build
fetches pyproject's build requirements (its cache or the index)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", "build", "dist", "labs", "out", "*.egg-info", "__pycache__",
                                ".pytest_cache", ".hypothesis")


def _offline_build() -> bool:
    """The installed setuptools and wheel can build railab (pyproject: setuptools>=68)."""
    if find_spec("setuptools") is None or find_spec("wheel") is None:
        return False
    return int(version("setuptools").split(".")[0]) >= 68  # metadata only: nothing imported


def test_a_stale_build_dir_does_not_leak_into_the_wheel(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    stale = src / "build" / "lib" / "testbed"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text("STALE = 1\n")
    (src / "build" / "lib" / "stale_module.py").write_text("STALE = 1\n")
    out = tmp_path / "wheels"
    isolation = ["--no-build-isolation"] if _offline_build() else []
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation,
                          "--disable-pip-version-check", "-w", str(out), "."],
                         cwd=src, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    (wheel,) = out.glob("railab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"railab", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, sorted(tops)
    assert "railab/testbed/__init__.py" in names and "railab/cli/__init__.py" in names
    assert not any("stale" in n.lower() for n in names)
