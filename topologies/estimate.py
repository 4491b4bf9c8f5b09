"""Memory a lab needs on one host, estimated from ``lab.json`` before anything is built.

The netns runtime's preflight (``railab up``) compares :func:`estimate_memory` with the memory the
host has available and refuses a lab that does not fit, naming both figures and what to change,
instead of failing half-built after minutes (the 4096-GPU full fabric reached 10.5 GiB and timed
out on a host where it did not fit).

Model (bytes, summed; constants measured on Debian FRR 8.4.4, Linux 6.x, 2-core host):

* per router (:data:`ROUTER_BYTES`, 24 MiB): zebra, staticd, bgpd, bfdd of a router without BGP
  sessions, with the netns runtime's memory settings (``railab.testbed.runtime.netns.frrmem``,
  issue 47). Measured as PSS (smaps_rollup: a shared library page counted once over the processes
  that map it, as ``MemAvailable`` sees it): the intercept of bgpd against its session ends plus
  the other daemons, 21.6 MiB per router on the full 1024-GPU fabric converged (18.8 MiB on
  ``mini``); a ``railab check`` adds ~2.5 MiB (zebra's and bgpd's JSON replies). Per daemon:
  zebra 8.1, bgpd ~8-9 without sessions, staticd 2.3, bfdd 2.4 MiB.
* per BGP peer, i.e. per session end (:data:`PEER_BYTES`, 80 KiB): bgpd's per-peer state with
  those settings; measured slope 64-72 KiB (1024-GPU full fabric, mini). Before them it was
  0.75-0.83 MiB: bgpd's 640 KiB input ring buffer of every peer became resident (frrmem).
* per installed path (:data:`PATH_BYTES`, 1 KiB): one ECMP member of one expected route
  (``lab.json`` ``expected_routes``, ``ecmp_width`` summed): Adj-RIB-In, RIB, zebra, kernel FIB.
* per namespace (:data:`NAMESPACE_BYTES`, 0.5 MiB) and per link (:data:`LINK_BYTES`, 64 KiB:
  two veth devices with their IPv4/IPv6 state and sysctl tables): kernel memory, in no RSS.

``estimate_memory(spec, lean=False)`` is the model for daemons started without the memory
settings (``RAILAB_FRR_LEAN=0``, or without a C compiler for the preloaded ``ringbuf_wipe``):
:data:`ROUTER_BYTES_BEFORE` 30 MiB and :data:`PEER_BYTES_BEFORE` 0.75 MiB, calibrated on RSS:
``rail-optimized-1024-full`` (24 routers, 128 servers, 2048 links, 1024 sessions, 33,792 paths)
estimates 2.43 GiB against 2.48 GiB measured (lab RSS, docs/runtime.md);
``rail-optimized-4096-full`` (96 routers, 512 servers, 8192 links, 4096 sessions, 528,384 paths)
estimates 10.11 GiB, against 10.5 GiB in use when the attempt of issue 12 failed (with its
sessions not yet shown up). With the settings: 0.95 GiB and 4.18 GiB (docs/runtime.md, "Issue 47").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the netns runtime's preflight is loaded by `down` too
    from railab.topologies.labspec import LabSpec

MIB = 2**20
GIB = 2**30
#: FRR daemons of one router without BGP sessions, bytes (with the netns runtime's memory settings).
ROUTER_BYTES = 24 * MIB
#: One BGP session end (bgpd peer), bytes (with the netns runtime's memory settings).
PEER_BYTES = 80 * 1024
#: Per router, bytes, for daemons started without the memory settings (before issue 47).
ROUTER_BYTES_BEFORE = 30 * MIB
#: Per BGP session end, bytes, without the memory settings (before issue 47).
PEER_BYTES_BEFORE = 768 * 1024
#: One installed ECMP path of one expected route, bytes.
PATH_BYTES = 1024
#: One network namespace (kernel), bytes.
NAMESPACE_BYTES = 512 * 1024
#: One link: a veth pair (kernel), bytes.
LINK_BYTES = 64 * 1024


@dataclass(frozen=True)
class MemoryEstimate:
    """A lab's estimated memory: ``parts`` maps a component (``routers``, ``bgp peers``,
    ``paths``, ``namespaces``, ``links``) to ``(count, bytes)``; ``total_bytes`` is their sum."""

    lab: str
    parts: dict[str, tuple[int, int]]

    @property
    def total_bytes(self) -> int:
        """Sum of the parts, bytes."""
        return sum(b for _, b in self.parts.values())

    def describe(self) -> str:
        """One line: total in GiB, then each part as ``count component (MiB)``."""
        bits = ", ".join(f"{n} {k} {b / MIB:.0f} MiB" for k, (n, b) in self.parts.items())
        return f"{self.total_bytes / GIB:.2f} GiB ({bits})"


def estimate_memory(spec: LabSpec, lean: bool = True) -> MemoryEstimate:
    """Estimate the memory of lab ``spec`` once converged (module docstring model); ``lean``:
    its FRR daemons start with the netns runtime's memory settings (False: the figures from
    before them, :data:`ROUTER_BYTES_BEFORE`, :data:`PEER_BYTES_BEFORE`).

    Counts from ``lab.json``: routers = non-server nodes, peers = 2 x ``bgp_sessions``, paths =
    the sum of ``ecmp_width`` over ``expected_routes``, namespaces = nodes, links = ``links``.
    Returns a :class:`MemoryEstimate` (bytes)."""
    routers = sum(1 for n in spec.nodes if n.role != "server")
    peers = 2 * len(spec.bgp_sessions)
    paths = sum(r.ecmp_width for routes in spec.expected_routes.values() for r in routes)
    nodes = len(spec.nodes)
    links = len(spec.links)
    router_b, peer_b = (ROUTER_BYTES, PEER_BYTES) if lean else (ROUTER_BYTES_BEFORE, PEER_BYTES_BEFORE)
    return MemoryEstimate(spec.name, {
        "routers": (routers, routers * router_b),
        "bgp peers": (peers, peers * peer_b),
        "paths": (paths, paths * PATH_BYTES),
        "namespaces": (nodes, nodes * NAMESPACE_BYTES),
        "links": (links, links * LINK_BYTES),
    })
