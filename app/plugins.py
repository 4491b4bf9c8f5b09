"""Plugins: registrations from your own package that reach the ``railab`` command and pytest.

A plugin is a module that calls ``register_node_kind`` (railab.topologies.nodekinds),
``register_path_class`` (railab.topologies.pathclasses), ``register_pattern``
(railab.traffic.patterns) or ``register_check`` (railab.checks.base) when it is imported. Two
ways to name one, both loaded at CLI start (and by the pytest plugin), after railab's built-in
registrations, in this order:

* a Python entry point in the group ``railab.plugins`` of your package's metadata::

      [project.entry-points."railab.plugins"]
      mykinds = "mypkg.railab_kinds"            # imported
      mychecks = "mypkg.checks:register"        # imported, then register() called

* the environment variable ``RAILAB_PLUGINS=mod1,mod2`` (the same ``module[:function]`` form).

Each plugin is loaded once per process. A plugin that fails to import (or whose function
raises) is a :class:`PluginError` (a UsageError: exit 2) naming it, printed as one ``error:``
line by ``railab``.
"""

from __future__ import annotations

import functools
import importlib
import os

from railab.errors import UsageError

#: The entry-point group railab loads plugins from.
ENTRY_POINT_GROUP = "railab.plugins"
#: Comma-separated ``module[:function]`` list loaded after the entry points.
ENV_VAR = "RAILAB_PLUGINS"

#: Modules whose import registers railab's built-ins (node kinds, path classes, patterns, check
#: families): imported before any plugin, so a plugin adds to (or replaces) them, never the
#: other way round.
BUILTINS = (
    "railab.topologies.nodekinds",
    "railab.topologies.pathclasses",
    "railab.traffic.patterns",
    "railab.checks.runner",
)

_loaded: dict[str, str] = {}


class PluginError(UsageError):
    """A railab plugin that cannot be loaded (exit 2); the message names it and its source."""


@functools.cache
def _entry_point_plugins() -> tuple[tuple[str, str], ...]:
    """``(target, source)`` of the ``railab.plugins`` entry points, scanned once per process
    (importlib.metadata reads every installed distribution's metadata: ~14 ms a scan here, and
    one ``railab up`` asks 3 times)."""
    from importlib.metadata import entry_points

    return tuple((ep.value.strip(), f"entry point {ep.name!r} of group {ENTRY_POINT_GROUP}")
                 for ep in entry_points(group=ENTRY_POINT_GROUP))


def configured() -> list[tuple[str, str]]:
    """``(target, source)`` of every configured plugin, entry points first, then ``RAILAB_PLUGINS``;
    ``target`` is ``module`` or ``module:function``, ``source`` says where it was named."""
    out = list(_entry_point_plugins())
    for item in os.environ.get(ENV_VAR, "").split(","):
        if item.strip():
            out.append((item.strip(), ENV_VAR))
    return out


def load_plugins() -> list[str]:
    """Import every configured plugin (once per process) after the built-ins; return the targets
    loaded by this call. Raises PluginError naming the first plugin that fails."""
    todo = [(t, src) for t, src in configured() if t not in _loaded]
    if not todo:
        return []
    for mod in BUILTINS:
        importlib.import_module(mod)
    done = []
    for target, source in todo:
        module, _, func = target.partition(":")
        try:
            mod = importlib.import_module(module)
            if func:
                getattr(mod, func)()
        except Exception as exc:  # any failure of a user's module is that plugin's failure
            what = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            raise PluginError(f"railab plugin {target!r} (from {source}) failed to load: "
                              f"{what}") from None
        _loaded[target] = source
        done.append(target)
    return done


def loaded() -> dict[str, str]:
    """Plugins loaded so far: ``{target: source}``."""
    return dict(_loaded)
