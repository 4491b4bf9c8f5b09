"""Shared by the ns-3 test modules: the QoS the stored ns-3 runs map and the repository's
scripts as modules (they are not part of the installed package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from railab.topologies.intent import load_intent

ROOT = Path(__file__).resolve().parent.parent


def lossless_qos():
    """``mini-lossless``'s QoS at 400 Gb/s: the one every stored ns-3 run maps."""
    return load_intent("mini-lossless").lab.capacity.qos(400)


def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` loaded as a module (e.g. ``ns3_reference``)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
