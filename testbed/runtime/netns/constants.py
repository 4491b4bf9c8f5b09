"""Limits, paths and settings of the netns runtime (module constants, some read from the environment)."""

from __future__ import annotations

import os
from pathlib import Path

GIB = 1 << 30

#: threads that spawn one FRR start wave's daemons (NetnsRuntime._start_frr)
SPAWN_THREADS = 16

#: nftables table that holds back the router advertisements every router namespace receives
#: while FRR starts (:func:`ra_gate_script`, ``up``'s RA gate). Why: FRR 8.4's bgpd asks zebra
#: for the interfaces twice when it connects (``zclient_start`` and the instance registration),
#: and the second answer, arriving ~15 ms after the first, stops every unnumbered session that
#: had started on the first one and is not Established yet (``bgp_start_interface_nbrs``: BGP_Stop
#: then BGP_Start, and the stop flushes the queued start), which then waits bgpd's 1 s start
#: timer. A session whose peer link-local reaches bgpd only after both answers starts at once.
RA_GATE_TABLE = "railab_ra_gate"
#: Seconds after the wave that starts bgpd before the gate opens: each bgpd connects to zebra and
#: gets both interface answers within milliseconds of starting; a late one costs only its 1 s.
RA_GATE_SETTLE_S = 0.1
#: ``RAILAB_RA_GATE=0`` starts FRR without the gate (the RAs are then solicited between the
#: daemon waves). On by default where ``nft`` exists. (It was opt-in while one gated run of the
#: 1024-GPU fabric in ~7 left a session in Active for good; the cause was the kernel's, gated or
#: not: a port without its fe80::/64 route, railab.testbed.linklocal, now repaired by the wait.)
RA_GATE_ENV = "RAILAB_RA_GATE"

FRR_BIN = Path(os.environ.get("RAILAB_FRR_BIN", "/usr/lib/frr"))
#: File descriptors per FRR daemon. FRR sizes per-fd tables from the limit (the host's may be
#: 1M), so an explicit limit keeps each daemon's RSS small; 4096 covers 256+ BGP peers.
FRR_FD_LIMIT = 4096
#: Debian's FRR is built with --enable-vty-group=frrvty: the daemons must run as a member of that
#: group (the packaged ``frr`` user; it keeps the capabilities it needs). Node run directories
#: are chowned to it.
FRR_USER = os.environ.get("RAILAB_FRR_USER", "frr")
#: Neighbour entries a link endpoint may hold at once in the kernel's IPv6 ND / IPv4 ARP tables:
#: the peer's link-local (unnumbered BGP, BFD, RFC 5549 next hop), ff02::1 (RAs), ff02::2,
#: ff02::16 (MLDv2 reports), the peer's solicited-node group, plus slack.
NEIGH_PER_ENDPOINT = 8
#: Headroom kept above the entries already in the tables when a lab raises the limits.
NEIGH_HEADROOM = 1024
#: Memory left to the host and everything else besides a lab's estimate, bytes.
MEM_HEADROOM_BYTES = 1 * GIB
#: Environment variable that replaces ``MemAvailable`` in the preflight (bytes; tests, or a
#: host whose ``/proc/meminfo`` misleads, e.g. a memory-limited cgroup).
MEM_AVAILABLE_ENV = "RAILAB_MEM_AVAILABLE_BYTES"
#: File descriptors ``up`` holds per node: a namespace fd while building, then per switch a UTS
#: namespace fd and a stdout pipe per daemon (4) while its FRR daemons start.
FDS_PER_NODE = 5
#: Descriptors kept free for everything else the process opens (vtysh pipes, files, logs).
FD_HEADROOM = 256
