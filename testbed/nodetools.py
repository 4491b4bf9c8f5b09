"""railab's tools for a lab's nodes, first on ``PATH`` in ``railab exec`` (light: ``exec`` loads
it, not the lab model).

``dcb`` (iproute2's Data Center Bridging tool) is railab's emulation of it for the ports of a
lab with ``lab.capacity`` (:mod:`railab.testbed.dcb`: ``dcb pfc show|set``, the emulated
ports' PFC configuration); on any other lab, or outside ``railab exec``, it runs the system's
``dcb`` (which a veth answers with "Operation not supported").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from railab.testbed.state import cache_dir
from railab.topologies.atomicfile import write_atomic

#: the tools and the railab module each one runs
TOOLS: dict[str, str] = {"dcb": "railab.testbed.dcb"}


def _script(module: str) -> str:
    return ("#!/bin/sh\n"
            f"# railab exec puts this first on PATH: {module} (the lab and node come from\n"
            "# RAILAB_LAB and RAILAB_NODE; without them, or on a lab without lab.capacity, the system's tool)\n"
            f"exec '{sys.executable}' -m {module} \"$@\"\n")


def tool_dir() -> Path:
    """The directory of railab's node tools (``/run/railab/.cache/bin``), each written when it
    is missing or out of date (another interpreter). Raises OSError when it cannot be written."""
    d = cache_dir() / "bin"
    for name, module in TOOLS.items():
        path, text = d / name, _script(module)
        try:
            if path.read_text() == text and os.access(path, os.X_OK):
                continue
        except OSError:
            pass
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text, mode=0o755)
    return d
