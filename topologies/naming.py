"""Naming: the one home for every name railab derives (lab, namespace, container, node, port).

Rules (docs/architecture.md, "Naming"):

* lab name: ``LAB_NAME`` (``^[a-z][a-z0-9-]{0,31}$``);
* network namespace of a node: ``clab-<lab>-<node>`` on both runtimes (containerlab's own scheme,
  ``clab-<lab>-<node>`` is also the container name), so traffic and executors work on either.
"""

from __future__ import annotations

import re

LAB_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
LAB_NAME = re.compile(LAB_NAME_PATTERN)


def netns_name(lab: str, node: str) -> str:
    """Network namespace (and containerlab container) name of ``node`` in ``lab``."""
    return f"clab-{lab}-{node}"


def container_name(lab: str, node: str) -> str:
    """containerlab's container name for ``node`` (``clab-<lab>-<node>``, the same as the netns)."""
    return netns_name(lab, node)
