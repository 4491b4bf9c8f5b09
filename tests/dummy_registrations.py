"""One module that adds a node kind, a path class and traffic patterns (tests/test_registries.py;
also a ``railab.plugins`` plugin: ``RAILAB_PLUGINS=dummy_registrations`` with ``PYTHONPATH=tests``).

Importing it registers them all; :func:`unregister` removes them again. Nothing else in railab
changes: that is the point (issue 11, "adding a node kind, a check or a traffic pattern touches
one module each").
"""

from __future__ import annotations

from railab.topologies.nodekinds import (
    FRR_CONF,
    FRR_DAEMONS_FILE,
    SWITCH_SYSCTLS,
    NodeKind,
    register_node_kind,
    unregister_node_kind,
)
from railab.topologies.pathclasses import PathClass, register_path_class, unregister_path_class
from railab.traffic.patterns import register_pattern, unregister_pattern

KIND = "dummy-sw"
PATH_CLASS = "dummy-cross-pod"  # the shipped three-tier class is "cross-pod"
PATTERN = "dummy-pairs"

register_node_kind(NodeKind(
    name=KIND, role="switch", clab_kind="linux", image="example/dummy-sw:1.0",
    binds=(FRR_CONF, FRR_DAEMONS_FILE), sysctls=SWITCH_SYSCTLS, daemons=("zebra", "bgpd"),
    max_ports=64, max_ecmp=64, description="a dummy switch kind (tests)",
), replace=True)

CROSS_POD_PATTERN = "dummy-cross-pod"

# How a flow is classified into the class is declared here too: a stand-in for a pod boundary,
# cross-group flows between different GPUs without PXN (tried before cross-group); its pattern
# is what the demo runs for it.
register_path_class(PathClass(
    PATH_CLASS, "cross-pod (leaf, spine, super-spine, spine, leaf)",
    hops=lambda f: 5 if f.rail_optimized else None,
    occurs=lambda f: f.rail_optimized and f.groups > 1,
    in_plan=False,
    matches=lambda p: not p.same_group and not p.same_gpu and not p.pxn, precedence=30,
    pattern=CROSS_POD_PATTERN,
), replace=True)


@register_pattern(PATTERN, "srv1 GPU 0 -> the last server's GPU 0 (tests)", replace=True)
def _dummy_pairs(ctx):
    servers = [s for g in sorted(ctx.groups) for s in ctx.groups[g]]
    return [((servers[0], 0), (servers[-1], 0))]


@register_pattern(CROSS_POD_PATTERN, "srv1 GPU 0 -> the last server's GPU 1 (tests: cross-pod)",
                  replace=True)
def _dummy_cross_pod(ctx):
    servers = [s for g in sorted(ctx.groups) for s in ctx.groups[g]]
    return [((servers[0], 0), (servers[-1], 1))]


def unregister() -> None:
    """Remove the registrations."""
    unregister_node_kind(KIND)
    unregister_path_class(PATH_CLASS)
    unregister_pattern(PATTERN)
    unregister_pattern(CROSS_POD_PATTERN)
