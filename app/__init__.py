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

``railab.__version__`` is the installed distribution's version (``0+unknown`` in a source tree
without an install); it is looked up on first access, so importing ``railab`` stays cheap for the
console-script entry point (``railab.__main__``).
"""

from __future__ import annotations

import sys as _sys
from typing import Any

#: signals (numbers) that came while the ``railab`` console script was importing this package,
#: before ``railab.__main__`` installed its handlers: ``railab.__main__`` reports the first as an
#: interrupt "while starting" (exit 128 + it, one line) instead of a traceback. Only the console
#: script records them (its ``sys.argv[0]`` is the ``railab`` script); an import by anything
#: else leaves the signal handling alone.
EARLY_SIGNALS: list[int] = []


def _note_early(signum: int, _frame: Any) -> None:
    EARLY_SIGNALS.append(signum)


if _sys.argv and _sys.argv[0].rsplit("/", 1)[-1] == "railab":
    import _signal  # the C module: no enum set-up, the first thing the console script runs of railab

    for _s in (2, 15, 1):  # SIGINT, SIGTERM, SIGHUP: recorded, never raised (nothing here could catch it)
        _signal.signal(_s, _note_early)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib import metadata  # ~10 ms (email parsing): only when asked for

        try:
            return metadata.version("railab")
        except metadata.PackageNotFoundError:  # running from a source tree without an install
            return "0+unknown"
    raise AttributeError(f"module 'railab' has no attribute {name!r}")
