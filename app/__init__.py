"""railab: an emulation testbed for AI GPU backend fabrics (Rail-only / Rail-optimized RoCEv2).

The package is layered, top to bottom (enforced by import-linter, see pyproject.toml and
docs/architecture.md):

* application: ``railab.cli``, ``railab.demo``, ``railab.report``, ``railab.graph``,
  ``railab.pytest_plugin`` (everything that prints or renders for a person);
* ``railab.checks``: observation of a running lab, the convergence predicate, the checks;
* ``railab.traffic``: RoCEv2 packets, the traffic engine, patterns, traceroute;
* ``railab.testbed``: executors, runtime state, the runtimes (mechanical deploy only);
* ``railab.topologies``: the pure fabric model (naming, node kinds, path classes, QoS, intent,
  planner, generator); never touches the kernel;
* ``railab.errors``: the error hierarchy and exit codes, below everything.
"""

from __future__ import annotations

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("railab")
except _metadata.PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"
