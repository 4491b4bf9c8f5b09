"""The embedded runtime: a lab on Linux network namespaces with Debian's FRR, no Docker.

Every node of ``<lab>.clab.yml`` becomes a namespace ``clab-<lab>-<node>`` (containerlab's scheme,
so the traffic engine and checks run unchanged on either runtime); every link a veth pair whose
two ends are created directly inside the two namespaces with the endpoint names (no root-ns
names, so the 15-character limit applies only to the endpoint names themselves). Per-node
sysctls come from the clab file, server NIC addressing and policy routing (``from <addr> lookup
100+n`` plus a per-table default route) from ``lab.json``. Every node that binds an
``frr.conf`` runs the FRR daemons its ``daemons`` file enables (its node kind's ordered list,
railab.testbed.clabfile ``ClabNode.daemons``, with that file's ``<daemon>_options``) inside its
namespace, with pid files, vty sockets, zserv socket, bfdd control socket and logs under
``/run/railab/<lab>/<node>/`` (never FRR's shared ``/var/run/frr``). Each daemon reads its own
part of the node's integrated frr.conf at start (``<daemon>.conf`` in that directory, cut by
railab.topologies.frr ``split_frr_conf``); a node whose file holds something the split does not
place gets the whole file pushed with ``vtysh -f`` once its daemons run, the way FRR's own init
script does it.

Namespaces are made by one ``ip -batch`` process, veth pairs by another (the kernel places both
ends), the b-ends set up and the server NICs addressed by one ``ip -n NS -batch`` per namespace
(railab.testbed.namespaces ``ip_batch``: iproute2 at kernel speed where one pyroute2 request per
item cost 2-6 ms of Python each). The calling thread enters each new namespace only long
enough to bring its loopback up (one ioctl) and write its sysctls. FRR daemons are spawned
from a thread inside the node's network namespace and a UTS namespace named after the node
(railab.testbed.namespaces), so no Python code runs in a forked child. Daemons start in two
waves across all nodes: zebra everywhere, then, once every zserv socket exists, every other
daemon of every node at once (every bgpd first, the top tier first), with the Router
Solicitations sent from a thread beside that wave.

``up`` deploys only: it returns once FRR runs with its config (phase ``started``); waiting for
convergence is the caller's job (railab.checks.deploy.bring_up), which then records it with
:meth:`NetnsRuntime.mark_converged`.

Ownership: see testbed.state; ``up`` records everything before creating it, and rolls back on
any failure, Ctrl-C (SIGINT), SIGTERM or SIGHUP.

A lab with ``lab.capacity`` gets its port queues and ECN tables (railab.testbed.capacity) once
its links and server addresses exist, before FRR starts; the PFC emulation's agent
(railab.testbed.pfc) runs only inside a traffic run and is recorded in ``LabState.agents``;
``down`` kills it with the lab's other processes (its command line names the lab's run
directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed import vty
from railab.testbed.clabfile import ClabFile, load_clab
from railab.testbed.executor import ExecResult, Executor
from railab.testbed.namespaces import create_netns, entered, exec_argv, ip_batch, netns_path, set_link_up
from railab.testbed.runtime.base import Runtime
from railab.testbed.signals import Interrupted, signals_deferred, signals_ignored, signals_raise
from railab.topologies import routing
from railab.topologies.naming import is_lab_name, lab_name_rule, netns_name
from railab.topologies.nodekinds import FRR_DAEMONS

if TYPE_CHECKING:  # what only `up` needs is imported there: `down` and the rest start faster
    from railab.topologies.estimate import MemoryEstimate
    from railab.topologies.labspec import LabSpec

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


__all__ = ["Interrupted", "NetnsExecutor", "NetnsRuntime", "exec_argv", "netns_path"]


# ---- namespace helpers ----------------------------------------------------------------------
def _ns_inode(ns: str) -> tuple[int, int] | None:
    try:
        s = os.stat(netns_path(ns))
    except OSError:
        return None
    return (s.st_dev, s.st_ino)


def _pids_in_namespaces(inodes: set[tuple[int, int]]) -> list[int]:
    """PIDs of live processes whose network namespace is one of ``inodes``."""
    out = []
    if not inodes:
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            s = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (s.st_dev, s.st_ino) in inodes:
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pids_naming(path: str) -> list[int]:
    """PIDs of live processes whose command line names ``path`` (a lab's run directory).

    FRR daemons carry their lab's ``/run/railab/<lab>/<node>`` paths in argv, so this finds a
    daemon even after its namespace is gone (a daemon that forked while ``up`` was interrupted).
    """
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            pid = int(entry.name)
            if path in _cmdline(pid) and _alive(pid):
                out.append(pid)
    return out


def _write_sysctl(key: str, value: str) -> bool:
    """Write ``key`` (dotted) in the current thread's namespace; False when it does not exist."""
    path = "/proc/sys/" + key.replace(".", "/")
    try:
        with open(path, "w") as f:
            f.write(str(value))
    except FileNotFoundError:
        return False
    return True


def _neigh_entries(table: str) -> int:
    """Entries now in the kernel neighbour table ``table`` (``ndisc_cache`` or ``arp_cache``).

    ``/proc/net/stat/<table>``: a header line, then one line per CPU whose first column is the
    table-wide entry count (hex)."""
    try:
        with open(f"/proc/net/stat/{table}") as f:
            f.readline()
            return int(f.readline().split()[0], 16)
    except (OSError, IndexError, ValueError):
        return 0


def raise_neighbour_tables(endpoints: int) -> dict[str, tuple[int, int]]:
    """Make room for ``endpoints`` more link endpoints in the kernel's neighbour tables.

    The IPv6 ND and IPv4 ARP tables are shared by *every* network namespace, and their limits
    ``net.ipv{4,6}.neigh.default.gc_thresh{2,3}`` exist only in the initial namespace (not
    per-netns, unlike most of ``net.*``). The defaults are 512/1024 entries for the whole host.
    Each unnumbered fabric port needs several ND entries (peer link-local, ff02::1 for RAs,
    ff02::2, ff02::16, ...). Past ``gc_thresh3`` the kernel logs ``neighbour: ndisc_cache:
    neighbor table overflow!`` and every send that needs a new entry fails with EINVAL
    (``ip6_finish_output2``): zebra's ``Tx RA failed ... error 22``, BFD and BGP connects fail,
    and sessions flap forever. The converged 1024-GPU full fabric holds ~11,900 ND entries.

    Sets ``gc_thresh3`` to at least entries-now + ``NEIGH_PER_ENDPOINT`` x ``endpoints`` +
    ``NEIGH_HEADROOM`` and ``gc_thresh2`` to at least half of that, for IPv6 and IPv4. Only ever
    raises (other labs share the tables), never lowers, and is not undone by ``down``: a larger
    limit costs nothing until entries exist. Must run in the initial network namespace.
    Returns ``{sysctl: (old, new)}`` for the values changed. When a value cannot be written (e.g.
    read-only ``/proc/sys`` in a container) it is skipped if the lab still fits without the
    headroom; otherwise RailabError says which sysctl to raise and to what.
    """
    changed: dict[str, tuple[int, int]] = {}
    for af, table in (("ipv6", "ndisc_cache"), ("ipv4", "arp_cache")):
        bare = _neigh_entries(table) + NEIGH_PER_ENDPOINT * endpoints  # without headroom
        need3 = bare + NEIGH_HEADROOM
        for n, need in ((3, need3), (2, need3 // 2)):
            key = f"net.{af}.neigh.default.gc_thresh{n}"
            path = "/proc/sys/" + key.replace(".", "/")
            try:
                with open(path) as f:
                    old = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # no such table (IPv6 disabled): nothing to size
            if old >= need:
                continue
            try:
                with open(path, "w") as f:
                    f.write(str(need))
            except OSError as exc:
                if n == 2 or old >= bare:
                    continue  # cannot write (read-only /proc/sys) but the lab still fits
                raise RailabError(
                    f"{key} is {old} but this lab needs {need} neighbour entries ({exc}): "
                    f"run `sysctl -w {key}={need}` as root in the host namespace"
                ) from None
            changed[key] = (old, need)
    return changed


def mem_available_bytes() -> tuple[int, str]:
    """Memory the host can give a new lab, bytes, and where the figure came from:
    ``$RAILAB_MEM_AVAILABLE_BYTES`` when set (an integer), else ``MemAvailable`` of
    ``/proc/meminfo``. RailabError for a malformed override."""
    raw = os.environ.get(MEM_AVAILABLE_ENV)
    if raw is not None:
        try:
            return int(raw), MEM_AVAILABLE_ENV
        except ValueError:
            raise RailabError(f"{MEM_AVAILABLE_ENV}={raw!r}: must be a number of bytes") from None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable"
    raise RailabError("/proc/meminfo has no MemAvailable line")


def check_memory(spec: LabSpec) -> MemoryEstimate:
    """Preflight: refuse a lab whose estimated memory (railab.topologies.estimate) exceeds what
    the host has available minus :data:`MEM_HEADROOM_BYTES`. Returns the estimate; raises
    RailabError naming the estimate, the available memory and what to change."""
    from railab.topologies.estimate import estimate_memory

    est = estimate_memory(spec)
    avail, source = mem_available_bytes()
    room = avail - MEM_HEADROOM_BYTES
    if est.total_bytes > room:
        biggest = max(est.parts, key=lambda k: est.parts[k][1])
        fix = ("Replace `lab: full` with a smaller `lab:` block" if spec.design.get("lab_scale") == "full"
               else "Use a smaller `lab:` block")
        fix += (" in the intent (fewer groups, servers_per_group, spines or links_per_pair; the "
                f"largest part is {biggest})")
        raise RailabError(
            f"lab {spec.name} needs an estimated {est.describe()} but this host has "
            f"{avail / GIB:.2f} GiB available ({source}), {max(room, 0) / GIB:.2f} GiB after "
            f"{MEM_HEADROOM_BYTES / GIB:.0f} GiB headroom: nothing was created. {fix}, or free "
            f"memory"
        )
    return est


def raise_nofile(nodes: int) -> dict[str, tuple[int, int]]:
    """Make room for the fds ``up`` holds while building a lab of ``nodes`` nodes
    (``FDS_PER_NODE x nodes + FD_HEADROOM``): when the soft RLIMIT_NOFILE is below that, raise it
    in this process to the hard limit. Returns ``{"RLIMIT_NOFILE": (old soft, new soft)}`` when
    raised, else ``{}``; RailabError when even the hard limit is too small."""
    need = FDS_PER_NODE * nodes + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return {}
    if hard != resource.RLIM_INFINITY and hard < need:
        raise RailabError(
            f"this lab needs {need} open files ({nodes} nodes) but the hard limit is {hard}: "
            f"raise it (`ulimit -Hn {need}`, or LimitNOFILE / limits.conf) and retry"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return {"RLIMIT_NOFILE": (int(soft), int(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))}


def ra_gate_wanted() -> bool:
    """Whether ``up`` should use the RA gate: ``$RAILAB_RA_GATE`` unset, empty or ``1`` (True),
    ``0`` (False). UsageError for any other value (a misspelt setting must not silently mean
    on); an empty value (``RAILAB_RA_GATE= railab up ...``) reads as unset, as shells mean it."""
    value = os.environ.get(RA_GATE_ENV, "").strip() or "1"
    if value not in ("0", "1"):
        raise UsageError(f"{RA_GATE_ENV}={value!r}: set it to 1 (the RA gate, the default) or 0 (no gate), "
                         f"or unset it")
    return value == "1"


def ra_gate_script(on: bool) -> str:
    """The ``nft -f -`` script that closes (``on``) or opens the RA gate of one namespace: a table
    :data:`RA_GATE_TABLE` whose input chain drops ICMPv6 router advertisements (type 134) before
    any socket, zebra's raw ICMPv6 socket included, sees them. Nothing else is dropped."""
    if not on:
        return f"delete table ip6 {RA_GATE_TABLE}\n"
    return (f"add table ip6 {RA_GATE_TABLE}\n"
            f"add chain ip6 {RA_GATE_TABLE} input {{ type filter hook input priority -300; }}\n"
            f"add rule ip6 {RA_GATE_TABLE} input icmpv6 type nd-router-advert drop\n")


def set_ra_gate(namespaces: Iterable[str], on: bool) -> None:
    """Close (``on``) or open the RA gate in each of ``namespaces``.

    Closing runs one ``nft -f`` per namespace, all at once
    (:func:`railab.testbed.capacity.run_batches`), before the zebra wave while the host is quiet.
    Opening deletes the table over nfnetlink from this process (railab.testbed.nfnl), from up to
    :data:`SPAWN_THREADS` threads: each deletion waits one RCU grace period in the kernel
    (~10 ms: the base chain's hook goes), so they overlap. It runs while every bgpd starts, where
    16 ``nft`` processes took 0.3 s at 4 x 16. A namespace whose table is already gone is
    skipped. Raises RailabError naming the namespaces where nft or the request failed."""
    if on:
        from railab.testbed.capacity import run_batches

        try:
            run_batches({ns: (exec_argv(ns, ["nft", "-f", "-"]), ra_gate_script(True))
                         for ns in namespaces}, "closing the RA gate")
        except RailabError as exc:
            raise RailabError(f"{exc} (the RA gate needs a working nft; {RA_GATE_ENV}=0 brings "
                              "the lab up without it, converging ~1 s slower)") from exc
        return
    from railab.testbed import nfnl

    def open_one(ns: str) -> str | None:
        try:
            with entered(ns):
                nfnl.delete_table(socket.AF_INET6, RA_GATE_TABLE)
        except OSError as exc:  # the namespace is gone, or the kernel refused
            return f"{ns}: {exc}"
        return None

    nss = list(namespaces)
    with ThreadPoolExecutor(max_workers=max(1, min(SPAWN_THREADS, len(nss)))) as pool:
        bad = [r for r in pool.map(open_one, nss) if r]
    if bad:
        raise RailabError("opening the RA gate failed on " + " | ".join(bad[:3]))


def check_prerequisites() -> None:
    """Raise RailabError unless we are root and Debian's frr (daemons + vtysh) is installed."""
    if os.geteuid() != 0:
        raise RailabError("the netns runtime needs root (network namespaces, FRR): run with sudo")
    missing = [d for d in FRR_DAEMONS if not (FRR_BIN / d).exists()]
    if missing or shutil.which("vtysh") is None:
        what = ", ".join(str(FRR_BIN / d) for d in missing) or "vtysh"
        raise RailabError(f"FRR is not installed ({what} missing): apt-get install frr")


# ---- executor --------------------------------------------------------------------------------
class NetnsExecutor(Executor):
    """Run commands on the nodes of a running netns lab.

    ``run(node, argv)`` executes argv inside ``clab-<lab>-<node>``; an argv starting with
    ``vtysh`` is pointed at that node's vty sockets (``--vty_socket /run/railab/<lab>/<node>``).
    Raises RailabError if the lab is not up, TimeoutError after ``timeout`` seconds.
    """

    def __init__(self, lab: str) -> None:
        self.lab = lab
        if st.load(lab) is None:
            raise RailabError(f"lab {lab!r} is not up (no {st.state_path(lab)}): railab up first")

    def argv_for(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` with ``vtysh`` pointed at the node's sockets."""
        if argv and os.path.basename(argv[0]) == "vtysh":
            return [argv[0], "--vty_socket", str(st.node_dir(self.lab, node)), *argv[1:]]
        return list(argv)

    def command(self, node: str, argv: list[str]) -> list[str]:
        """The full command line that runs ``argv`` on ``node``: vtysh pointed at the node's
        sockets (it talks to the daemons over unix sockets, no namespace needed), anything else
        under ``nsenter --net`` (railab.testbed.namespaces.exec_argv). RailabError when the
        node's namespace does not exist."""
        ns = netns_name(self.lab, node)
        if not netns_path(ns).exists():
            raise UsageError(f"lab {self.lab!r} has no node {node!r} (no namespace {ns})")
        argv = self.argv_for(node, argv)
        if argv and os.path.basename(argv[0]) == "vtysh":
            return argv
        return exec_argv(ns, argv)

    def run(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        full = self.command(node, argv)
        try:
            p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{node}: {' '.join(argv)} did not finish within {timeout:g} s") from None
        except FileNotFoundError:
            return ExecResult(127, "", f"{full[0]}: command not found")
        if p.returncode == 127 and full[0] == "nsenter" and "failed to execute" in p.stderr:
            return ExecResult(127, p.stdout, f"{argv[0]}: command not found")
        return ExecResult(p.returncode, p.stdout, p.stderr)

    def vtysh(self, node: str, command: str, *, timeout: float = 30.0) -> ExecResult:
        """``command`` on ``node``'s FRR: straight to the owning daemon's vty socket when one
        daemon owns it (railab.testbed.vty, ~2 ms instead of ~50 ms for a ``vtysh`` process),
        else, or when that daemon is not running, through ``vtysh -c`` (same ExecResult: output
        on stdout, rc 0 on success, 1 when FRR refused the command)."""
        daemon = vty.owner(command)
        if daemon is not None:
            path = st.node_dir(self.lab, node) / f"{daemon}.vty"
            try:
                status, out = vty.vty_command(path, command, timeout=timeout)
            except TimeoutError:
                raise TimeoutError(f"{node}: vtysh -c {command!r} did not finish within {timeout:g} s") from None
            except OSError:  # VtyUnavailable (daemon down) or a broken connection: vtysh says why
                pass
            else:
                return ExecResult(0 if status == 0 else 1, out, "")
        return self.run(node, ["vtysh", "-c", command], timeout=timeout)


# ---- runtime ---------------------------------------------------------------------------------
def ports_by_namespace(ports: Iterable[tuple[str, str]], namespaces: dict[str, str]) -> dict[str, set[str]]:
    """``(node, port)`` pairs grouped by network namespace (``namespaces``: node -> netns name;
    nodes without one are left out): how railab.testbed.solicit takes its ports."""
    out: dict[str, set[str]] = {}
    for node, port in ports:
        if node in namespaces:
            out.setdefault(namespaces[node], set()).add(port)
    return out


def fabric_ports(clab: ClabFile, namespaces: dict[str, str]) -> dict[str, set[str]]:
    """The ports of ``clab``'s router-router links by network namespace (``namespaces``: node ->
    netns name; nodes without one are left out): where the Router Solicitations go."""
    routers = {n.name for n in clab.routers}
    return ports_by_namespace((end for ln in clab.links if ln.a[0] in routers and ln.b[0] in routers
                               for end in (ln.a, ln.b)), namespaces)


def solicit_router_advertisements(clab: ClabFile, namespaces: dict[str, str]) -> int:
    """Send one IPv6 Router Solicitation out of both ends of every router-router link of
    ``clab`` (``namespaces``: node -> netns name; railab.testbed.solicit.send_solicitations);
    returns how many were sent.

    Why: unnumbered BGP learns the peer's link-local address from the peer's router
    advertisements, and zebra ignores RAs received on an interface whose own RA is not enabled yet
    (FRR ``zebra/rtadv.c``: ``rtadv_process_packet`` drops them unless ``AdvSendAdvertisements``).
    The zebras of a large lab start seconds apart (17 s for the 96 of the 4096-GPU fabric), so
    the first fast RAs (4, one per second) of early routers are lost on late ones, and the
    session then waits a whole ``ra-interval`` (32 s on the full 1024-GPU fabric) for the next
    one. Once every zebra runs with its config, a solicitation makes the peer's zebra answer at
    once (``rtadv_process_solicit`` with fast retransmit on, FRR's default). ``up`` sends them
    between the daemon waves, and retries the ports not ready yet from a process of its own beside
    the wave that starts bgpd (``NetnsRuntime._solicit``)."""
    from railab.testbed.solicit import send_solicitations

    return send_solicitations(fabric_ports(clab, namespaces))


def tier_order(clab: ClabFile) -> dict[str, int]:
    """Each router of ``clab`` -> its tier counted from the top (0: routers that are never the
    lower end ``a`` of a router-router link, e.g. spines of a two-tier fabric or super-spines of
    a three-tier one; a router's tier is one more than the deepest of the routers its links go
    up to). railab's generator writes every fabric link lower end first (Link.a) and puts
    ``passive`` on the upper end, so tier 0 only listens."""
    routers = {n.name for n in clab.routers}
    up: dict[str, set[str]] = {n: set() for n in routers}
    for ln in clab.links:
        (na, _), (nb, _) = ln.a, ln.b
        if na in routers and nb in routers:
            up[na].add(nb)
    tier: dict[str, int] = {}

    def depth(n: str, seen: frozenset = frozenset()) -> int:
        if n not in tier:
            above = [m for m in up[n] if m not in seen]  # a cycle (not a Clos): cut it
            tier[n] = 1 + max((depth(m, seen | {n}) for m in above), default=-1)
        return tier[n]

    for n in sorted(routers):
        depth(n)
    return tier


class NetnsRuntime(Runtime):
    """Network namespaces + Debian FRR (see the module docstring)."""

    name = "netns"

    def executor(self, lab: str) -> NetnsExecutor:
        return NetnsExecutor(lab)

    # -- up ------------------------------------------------------------------------------------
    def up(self, labdir: Path, *, stitch: bool = False) -> st.LabState:
        """Deploy the lab in ``labdir`` (a directory or its ``.clab.yml``): namespaces, veths,
        sysctls, server addressing and policy routing, FRR started with its config. Does not wait
        for convergence (railab.checks.deploy.bring_up does, then :meth:`mark_converged`).

        ``stitch``: deploy a partitioned lab (``railab generate --hosts``) from its host files,
        every host a namespace on one underlay and the cut links kernel VXLAN devices
        (railab.testbed.stitch; recorded as the state's ``stitch`` entry).

        Returns the recorded state (phase ``started``). Raises RailabError for non-root, missing
        FRR, a lab name clash, a config FRR rejects or a failed step, after removing everything
        made so far; KeyboardInterrupt (Ctrl-C; SIGTERM and SIGHUP as
        railab.testbed.signals.Interrupted) likewise after rolling back.
        """
        clab = load_clab(labdir)  # bad input (UsageError, exit 2) before the host's prerequisites
        plan = None
        if stitch:
            from railab.testbed import stitch as stitch_mod

            plan = stitch_mod.stitch_plan(labdir)
        if plan is not None:
            clab = plan.clab
        if clab.external_links:
            x = clab.external_links[0]
            raise UsageError(f"lab {clab.name}: {len(clab.external_links)} {x.type} link(s) ({x.endpoint[0]}:"
                             f"{x.endpoint[1]} ...): the netns runtime makes veth pairs only; "
                             f"use --runtime containerlab (for one host of a partitioned lab: "
                             f"--host HOST), or deploy every host of the partition on this "
                             f"machine with railab up LABDIR --stitch")
        check_prerequisites()
        self._children: list[subprocess.Popen] = []
        lab = clab.name
        foreign = sorted(n.name for n in clab.nodes.values() if n.kind != "linux")
        if foreign:
            kinds = sorted({clab.nodes[n].kind for n in foreign})
            raise RailabError(
                f"lab {lab}: {len(foreign)} node(s) of kind {', '.join(kinds)} ({', '.join(foreign[:4])}"
                f"{', ...' if len(foreign) > 4 else ''}) need their own images: the netns runtime runs "
                f"FRR on `linux` nodes only. Use --runtime containerlab, or set `kind: frr` in the intent's lab:"
            )
        if not is_lab_name(lab):
            raise RailabError(lab_name_rule(lab, "lab"))
        try:
            from railab.topologies.labspec import LabSpec

            spec = LabSpec.load(clab.directory)
        except FileNotFoundError as exc:
            raise RailabError(str(exc)) from None
        if spec.name != lab:
            raise RailabError(f"{clab.path.name} names lab {lab!r} but lab.json names {spec.name!r}")
        from railab.testbed import capacity

        if capacity.enabled(spec) and shutil.which("nft") is None:
            raise RailabError(f"lab {lab} has lab.capacity (ECN marking, PFC counters in nftables "
                              f"tables) but nft is not installed: apt-get install nftables")
        ra_gate_wanted()  # a misspelt RAILAB_RA_GATE is refused before anything is made
        if st.lab_dir(lab).exists():
            raise UsageError(f"lab {lab} is already up: railab down {lab}")
        extra_ns = plan.namespaces if plan is not None else []
        clash = [ns for ns in [netns_name(lab, n) for n in clab.nodes] + extra_ns if netns_path(ns).exists()]
        if clash:
            owner = st.ledger().get(clash[0])
            whose = f"it belongs to lab {owner}" if owner else "railab did not make it"
            raise UsageError(
                f"namespace {clash[0]} already exists ({whose}): give this lab another name "
                f"(railab up INTENT --name NEW, or railab generate INTENT --name NEW)"
            )
        t_pre = time.monotonic()
        check_memory(spec)
        limits = raise_nofile(len(clab.nodes))
        self._dry_run(clab)
        missing = sorted({d for n in clab.routers for d in n.daemons if not (FRR_BIN / d).exists()})
        if missing:
            raise RailabError(f"lab {lab}: FRR daemon {', '.join(missing)} not installed in {FRR_BIN}")
        preflight_s = round(time.monotonic() - t_pre, 3)

        record = st.LabState(
            lab=lab,
            runtime=self.name,
            phase="creating",
            labdir=str(clab.directory),
            clab_file=str(clab.path),
            namespaces={n: netns_name(lab, n) for n in clab.nodes},
            links=[(f"{lk.a[0]}:{lk.a[1]}", f"{lk.b[0]}:{lk.b[1]}", lk.mtu) for lk in clab.links],
            routers={
                n.name: st.RouterState(dir=str(st.node_dir(lab, n.name)), config=str(n.frr_conf),
                                       daemons=list(n.daemons))
                for n in clab.routers
            },
            host_limits=limits,
            timings={"preflight_s": preflight_s},
        )
        if plan is not None:
            record.stitch = plan.record()
        self._stitch = plan
        try:
            with signals_raise():
                try:
                    st.save(record)
                    st.ledger_add(list(record.namespaces.values()) + extra_ns, lab)
                    self._build(clab, spec, record)
                    return record
                except BaseException:
                    with signals_ignored():
                        self._kill_children()
                        self.down(lab)
                    raise
        except RailabError:
            raise
        except KeyboardInterrupt:
            raise
        except OSError as exc:
            raise RailabError(f"lab {lab}: up failed ({exc}); everything it made was removed") from exc

    def _dry_run(self, clab: ClabFile) -> None:
        """Check every node's frr.conf with ``vtysh -C`` (parallel); RailabError names the node.

        A config this vtysh already passed is not checked again: a pass leaves a marker named
        by the SHA-256 of vtysh's and bgpd's identity (path, inode, size, mtime, ctime) and the file's bytes
        under :func:`railab.testbed.state.cache_dir` (``frr-config-ok/``). ``vtysh -C`` builds
        every daemon's command tree per call, ~0.1 CPU-s per node: 2.4 CPU-s of the full
        1024-GPU fabric's ``up`` and 96 processes on the 4096-GPU one, for configs that
        ``generate`` writes byte-identical on every run. A rejected config leaves no marker."""
        vtysh = shutil.which("vtysh") or "vtysh"
        try:  # vtysh and the daemons' package: a reinstall changes ctime, which no one can set
            identity = b"".join(
                f"{os.path.realpath(f)}\0{i.st_ino}\0{i.st_size}\0{i.st_mtime_ns}\0{i.st_ctime_ns}\0".encode()
                for f in (vtysh, FRR_BIN / "bgpd") for i in (os.stat(f),))
        except OSError:
            identity = None  # no vtysh: let Popen say so
        ok_dir = st.cache_dir() / "frr-config-ok"
        todo: dict[str, tuple[Path, Path | None, bytes]] = {}
        for n in clab.routers:
            conf = Path(n.frr_conf)
            marker, text = None, b""
            try:
                text = conf.read_bytes()
                if identity is not None:
                    marker = ok_dir / hashlib.sha256(identity + text).hexdigest()
                    if marker.exists():
                        continue
            except OSError:
                pass  # unreadable file (vtysh -C reports it) or cache: check it
            todo[n.name] = (conf, marker, text)
        procs = {
            name: subprocess.Popen(
                [vtysh, "-C", "-f", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for name, (conf, _, _) in todo.items()
        }
        bad = []
        for name, p in procs.items():
            out, _ = p.communicate()
            if p.returncode != 0:
                lines = [line.strip() for line in out.splitlines() if line.strip()]
                bad.append(f"{name} ({clab.nodes[name].frr_conf}): " + "; ".join(lines[:5]))
            elif (marker := todo[name][1]) is not None:
                conf, _, text = todo[name]
                try:
                    if conf.read_bytes() == text:  # what vtysh read is what was hashed
                        marker.parent.mkdir(parents=True, exist_ok=True)
                        marker.touch()
                except OSError:
                    pass  # a read-only run root: check again next time
        if bad:
            raise RailabError("FRR rejected the config of " + " | ".join(bad))

    @staticmethod
    def _open_node_ns(node, ns: str, deferred: dict[str, dict[str, str]], fds: dict[str, int]) -> None:
        """In namespace ``ns`` (already created): bring its loopback up, apply the namespace-wide
        sysctls (interface ones go to ``deferred``) and keep an fd on it (``fds``) for placing
        veth peers and the stitch's tunnels."""
        with entered(ns):
            set_link_up("lo")
            later = {}
            for key, value in node.sysctls.items():
                if not _write_sysctl(key, value):
                    later[key] = value
            deferred[node.name] = later
        fds[node.name] = os.open(netns_path(ns), os.O_RDONLY)

    def _build(self, clab: ClabFile, spec: LabSpec, record: st.LabState) -> None:
        timings = record.timings
        fds: dict[str, int] = {}
        deferred: dict[str, dict[str, str]] = {}
        t0 = time.monotonic()
        # 0. host-wide neighbour tables (shared by all namespaces) sized for this lab's links.
        plan = getattr(self, "_stitch", None)
        raised = raise_neighbour_tables(2 * len(plan.all_links if plan is not None else clab.links))
        if raised:
            record.host_sysctls = dict(raised)
        try:
            # 1. namespaces (one `ip -batch`), loopback up, namespace-wide sysctls (accept_dad
            # before any link).
            with signals_deferred():
                create_netns(record.namespaces[n] for n in clab.nodes)
            for node in clab.nodes.values():
                with signals_deferred():  # every fd opened is in fds before a Ctrl-C lands
                    self._open_node_ns(node, record.namespaces[node.name], deferred, fds)
            timings["namespaces_s"] = round(time.monotonic() - t0, 3)

            # 2. veth pairs, both ends made in place with their MTU (one `ip -batch`: the
            # kernel places each end in its namespace), the a-ends up at creation, then the
            # b-ends up, one batch per namespace.
            t1 = time.monotonic()
            ns_of = record.namespaces
            peers_up: dict[str | None, list[str]] = {}
            adds = []
            for link in clab.links:
                (na, ia), (nb, ib) = link.a, link.b
                adds.append(f"link add name {ia} netns {ns_of[na]} mtu {link.mtu} up "
                            f"type veth peer name {ib} netns {ns_of[nb]} mtu {link.mtu}")
                peers_up.setdefault(ns_of[nb], []).append(f"link set {ib} up")
            with signals_deferred():
                ip_batch({None: adds}, what=f"lab {clab.name}: creating {len(adds)} veth pairs")
                ip_batch(peers_up, what=f"lab {clab.name}: setting the veth peers up")
            if plan is not None:  # the one-machine proof: hosts, underlay, VXLAN cut links
                from railab.testbed import stitch as stitch_mod

                with signals_deferred():
                    stitch_mod.build(plan, fds)
                for t in plan.tunnels:
                    with entered(record.namespaces[t.node]):
                        set_link_up(t.interface)
            timings["links_s"] = round(time.monotonic() - t1, 3)

            # 3. per-interface sysctls, now that interfaces exist.
            for name, later in deferred.items():
                if not later:
                    continue
                with entered(record.namespaces[name]):
                    for key, value in later.items():
                        if not _write_sysctl(key, value):
                            raise RailabError(f"{clab.path.name}: node {name}: sysctl {key} does not exist")

            # 4. server NICs: address, per-NIC table default route, source rule (lab.json,
            # numbering and priorities from railab.topologies.routing).
            t2 = time.monotonic()
            ends = {(n, i) for ln in clab.links for n, i in (ln.a, ln.b)}
            nic_lines: dict[str | None, list[str]] = {}
            for nic in spec.nics:
                if nic.server not in fds:
                    raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} names a node absent from "
                                      f"{clab.path.name}")
                if (nic.server, nic.interface) not in ends:
                    raise RailabError(f"lab.json NIC {nic.server}:{nic.interface} has no link in {clab.path.name}")
                addr, plen = str(nic.address.ip), nic.address.network.prefixlen
                nic_lines.setdefault(ns_of[nic.server], []).extend([
                    f"address add {addr}/{plen} dev {nic.interface}",
                    f"route add default via {nic.gateway} dev {nic.interface} table {nic.table}",
                    f"rule add from {addr}/32 table {nic.table} priority {routing.rule_priority(nic.nic)}",
                ])
            with signals_deferred():
                ip_batch(nic_lines, what=f"lab {clab.name}: addressing the server NICs")
            timings["servers_s"] = round(time.monotonic() - t2, 3)

            # 4b. lab.capacity: egress queues on every link end, ECN tables on the switches
            # (railab.testbed.capacity); they live in the namespaces and go with them.
            from railab.testbed import capacity

            if capacity.enabled(spec):
                t_cap = time.monotonic()
                capacity.apply(spec, record.namespaces.__getitem__)
                timings["capacity_s"] = round(time.monotonic() - t_cap, 3)
        finally:
            for fd in fds.values():
                os.close(fd)

        # 5. FRR: each daemon wave in parallel across nodes, then push the configs.
        t3 = time.monotonic()
        if plan is not None:
            from railab.testbed import stitch as stitch_mod

            clab = stitch_mod.with_cut_links(plan)
        self._start_frr(clab, record)
        timings["frr_s"] = round(time.monotonic() - t3, 3)
        timings["build_s"] = round(time.monotonic() - t0, 3)
        record.phase = "started"
        st.save(record)

    def _spawn(self, argv: list[str], *, ns: str | None = None, uts: int | None = None,
               hostname: str | None = None, **kwargs: Any) -> tuple[subprocess.Popen, int | None]:
        """Popen ``argv`` (in namespace ``ns`` and a UTS namespace: ``uts`` or a new one named
        ``hostname``, see railab.testbed.namespaces.entered), remembered so a rollback can kill
        it (see _kill_children). Signals are deferred until the child is recorded. Returns the
        process and an fd of its UTS namespace (None without ``ns``; the caller closes it)."""
        with signals_deferred():
            held = None
            if ns is None:
                p = subprocess.Popen(argv, **kwargs)
            else:
                with entered(ns, uts=uts, hostname=hostname) as held:
                    p = subprocess.Popen(argv, **kwargs)
            self._children.append(p)
        return p, held

    def _kill_children(self) -> None:
        """Kill and reap every process this ``up`` spawned that is still running.

        Runs before ``down`` sweeps the lab, so no child can fork a daemon after the sweep.
        """
        for p in getattr(self, "_children", []):
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._children = []

    def _daemon_argv(self, lab: str, node: str, daemon: str,
                     options: list[str] | None = None, config: Path | None = None) -> list[str]:
        """argv of FRR ``daemon`` on ``node``: railab's per-node paths, then ``options`` (the
        node's ``<daemon>_options`` from its daemons file, ``ClabNode.daemon_options``: the node
        kind's ``daemon_options`` are their one home, e.g. zebra's ``-s``). ``config``: the
        daemon's own part of the node's frr.conf, read at start (None: start bare, ``/dev/null``,
        and let ``vtysh -f`` push the config)."""
        d = st.node_dir(lab, node)
        argv = [
            str(FRR_BIN / daemon), "-d", "-u", FRR_USER, "-g", FRR_USER,
            "-f", str(config or "/dev/null"),  # never the host's /etc/frr
            "-i", str(d / f"{daemon}.pid"),
            "--vty_socket", str(d),
            "-P", "0",  # no TCP vty
            "-z", str(d / "zserv.api"),
            "--log", f"file:{d / (daemon + '.log')}",
            "--limit-fds", str(FRR_FD_LIMIT),
        ]
        if daemon == "bfdd":
            argv += ["--bfdctl", str(d / "bfdd.sock")]
        return argv + list(options or [])

    def _start_frr(self, clab: ClabFile, record: st.LabState) -> None:
        from railab.topologies.frr import split_frr_conf

        lab = clab.name
        routers = clab.routers
        try:
            pw = pwd.getpwnam(FRR_USER)
        except KeyError:
            raise RailabError(f"user {FRR_USER!r} missing (Debian's frr package creates it): "
                              "apt-get install frr") from None
        # Each daemon reads its own part of the node's frr.conf at start (split_frr_conf), so
        # no vtysh round trip per config line (that push was 158 s of the 4096-GPU fabric's up
        # on 2 cores). Nodes whose file holds a statement the split does not place are pushed
        # whole with `vtysh -f` after the daemons start, as FRR's init script does.
        parts: dict[str, dict[str, Path]] = {}
        for n in routers:
            d = st.node_dir(lab, n.name)
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, pw.pw_uid, pw.pw_gid)
            split = split_frr_conf(Path(n.frr_conf).read_text(), n.daemons)
            if split is not None:
                parts[n.name] = {}
                for daemon, text in split.items():
                    f = d / f"{daemon}.conf"
                    f.write_text(text)
                    parts[n.name][daemon] = f
        timings = record.timings
        # The RA gate (RA_GATE_TABLE): every router drops the RAs it receives until its bgpd has
        # had both of zebra's interface answers; the gate then opens tier by tier, top first, each
        # tier soliciting its peers' RAs (_open_ra_gate). Without nft, or with RAILAB_RA_GATE=0,
        # the RAs are solicited between the waves instead, as before.
        # A lab without router-router links (Rail-only) has no unnumbered session to hold back.
        gate_ports = fabric_ports(clab, record.namespaces)
        gate = (ra_gate_wanted() and shutil.which("nft") is not None
                and bool(gate_ports))
        gate_open = not gate
        if gate:
            t_gate = time.monotonic()
            set_ra_gate([record.namespaces[n.name] for n in routers], True)
            timings["frr_ra_gate_s"] = round(time.monotonic() - t_gate, 3)
        # One UTS namespace per node, named after it (BGP's hostname capability and `show bgp
        # summary` then name the peer switch, not the host), shared by the node's daemons.
        uts: dict[str, int] = {}
        solicit: subprocess.Popen | None = None
        t_rs, err = 0.0, ""
        try:
            for wave in self._daemon_waves(routers, clab):
                t_wave = time.monotonic()

                def spawn(nd: tuple[Any, str]) -> tuple[subprocess.Popen, int | None]:
                    n, daemon = nd
                    return self._spawn(
                        self._daemon_argv(lab, n.name, daemon, n.daemon_options.get(daemon),
                                          parts.get(n.name, {}).get(daemon)),
                        ns=record.namespaces[n.name], uts=uts.get(n.name), hostname=n.name,
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    )

                # From several threads: Popen returns only once its child has exec'd, and on a
                # host kept busy by the daemons already started each child waits for a CPU (the
                # 4096-GPU fabric: ~1 s per spawn, one at a time, while bgpd converged). A
                # Ctrl-C waits until every spawned daemon is recorded for the rollback.
                # Every spawned daemon's UTS fd is kept or closed before an error or the signal
                # leaves the block (the children themselves are in self._children for rollback).
                procs: dict[str, subprocess.Popen] = {}
                failure: BaseException | None = None
                with signals_deferred(), ThreadPoolExecutor(max_workers=SPAWN_THREADS) as pool:
                    futures = [(nd, pool.submit(spawn, nd)) for nd in wave]
                    for (n, daemon), fut in futures:
                        try:
                            proc, held = fut.result()
                        except BaseException as exc:  # noqa: BLE001 - raised after the loop
                            failure = failure or exc
                            continue
                        procs[f"{n.name} {daemon}"] = proc
                        if n.name in uts:
                            os.close(held)
                        else:  # the zebra wave: one daemon per node, its new UTS namespace
                            uts[n.name] = held
                if failure is not None:
                    raise failure
                names = "/".join(dict.fromkeys(d for _, d in wave))  # the wave is in start order
                self._reap(procs, names, lab)
                zebra_wave = names == "zebra"
                if zebra_wave:
                    self._wait_files([st.node_dir(lab, n.name) / "zserv.api" for n, _ in wave],
                                     "zebra's zserv socket")
                for n, daemon in wave:
                    pidfile = st.node_dir(lab, n.name) / f"{daemon}.pid"
                    record.routers[n.name].pids[daemon] = int(pidfile.read_text().split()[0])
                timings[f"frr_{names}_s"] = round(time.monotonic() - t_wave, 3)
                st.save(record)
                if not gate_open and "bgpd" in names:
                    time.sleep(RA_GATE_SETTLE_S)
                    t_open = time.monotonic()
                    gate_open = True  # even if opening fails: the rollback removes the namespaces
                    record.solicit["gate"] = self._open_ra_gate(clab, record, gate_ports)
                    timings["frr_ra_release_s"] = round(time.monotonic() - t_open, 3)
                if zebra_wave and not gate:
                    # Once every zebra runs with its RA config, solicit the RAs so that each zebra
                    # knows its peers' link-locals (bgpd learns them from zebra) and no session
                    # waits an RA interval: once on every port now, then, from a process of its
                    # own beside the next wave, on the ports whose new veth had no carrier yet
                    # (railab.testbed.solicit; bgpd needs a few hundred ms to start anyway).
                    t_rs = time.monotonic()
                    solicit = self._solicit(clab, lab, parts, record)
                    timings["frr_ra_solicit_s"] = round(time.monotonic() - t_rs, 3)
                    t_rs = time.monotonic()
            if not gate_open:  # no bgpd in any wave (a lab of zebra-only nodes): open it all the same
                gate_open = True
                record.solicit["gate"] = self._open_ra_gate(clab, record, gate_ports)
        finally:
            try:
                if solicit is not None:
                    # bounded (2 s of retries); on an error or a Ctrl-C the
                    # rollback kills it (it is one of self._children)
                    try:
                        out, err = solicit.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        solicit.kill()
                        out, err = solicit.communicate()
                    timings["frr_ra_solicit_beside_s"] = round(time.monotonic() - t_rs, 3)
                    try:
                        record.solicit["later"] = json.loads(out or "{}").get("sent", 0)
                    except (ValueError, AttributeError):
                        pass
            finally:
                for fd in uts.values():
                    os.close(fd)
        if solicit is not None and solicit.returncode != 0:
            raise RailabError(f"lab {lab}: soliciting the router advertisements failed "
                              f"(exit {solicit.returncode}): {(err or '').strip()[-300:]}")
        # The lines a split-started daemon refused are read while bring_up waits for convergence
        # (startup_problems): each daemon answers only once it has read its config, which took
        # 8.3 s of the 4096-GPU fabric's up when waited for here.
        t_conf = time.monotonic()
        # The nodes without a split: the integrated config, applied as FRR's init script does
        # (vtysh pushes each daemon its part).
        procs = {
            n.name: self._spawn(
                ["vtysh", "--vty_socket", str(st.node_dir(lab, n.name)), "-f", str(n.frr_conf)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )[0]
            for n in routers if n.name not in parts
        }
        self._reap(procs, "vtysh -f frr.conf", lab)
        timings["frr_config_s"] = round(time.monotonic() - t_conf, 3)
        if procs:  # nodes configured only now by vtysh: solicit their peers' RAs again
            t_rs = time.monotonic()
            solicit_router_advertisements(clab, record.namespaces)
            timings["frr_ra_solicit_s"] = round(timings.get("frr_ra_solicit_s", 0) + time.monotonic() - t_rs, 3)

    @staticmethod
    def _open_ra_gate(clab: ClabFile, record: st.LabState, ports: dict[str, set[str]]) -> int:
        """Open the RA gate tier by tier from the top (:func:`tier_order`): each tier's gate,
        then one RS from each of its fabric ports (retried while a port has no carrier,
        railab.testbed.solicit), so its zebras hear their peers' RAs now. An upper tier (the
        passive end) thus knows a lower tier's link-locals before the lower tier connects to it.
        ``ports``: :func:`fabric_ports` of the lab. Returns the solicitations sent."""
        from railab.testbed.solicit import send_solicitations

        rank = tier_order(clab)
        sent = 0
        for tier in sorted(set(rank.values())):
            nss = [record.namespaces[n.name] for n in clab.routers if rank.get(n.name) == tier]
            set_ra_gate(nss, False)
            sent += send_solicitations({ns: ports[ns] for ns in nss if ns in ports})
        return sent

    def resolicit(self, lab: str, ports: list[tuple[str, str]]) -> int:
        """One Router Solicitation out of each ``(node, interface)`` of ``ports``, in the node's
        namespace (railab.testbed.solicit, no retries): an unnumbered session whose bgpd still
        waits for its peer's link-local ("Waiting for Peer IPv6 LLA") otherwise waits the next
        RA, up to the lab's ``ra-interval`` (128 s on the 4096-GPU fabric). Nodes or ports that
        are gone are skipped; returns how many were sent."""
        from railab.testbed.solicit import solicit_once

        return solicit_once(ports_by_namespace(ports, self.record(lab).namespaces))[0]

    def repair_ports(self, lab: str, ports: list[tuple[str, str]]) -> list[str]:
        """Restart IPv6 on the ``(node, interface)`` ports that lack their link-local address or
        one of its routes (railab.testbed.linklocal: the kernel's atomic per-CPU pool ran dry
        while thousands of ports came up); returns ``"node:port: what was missing"`` per port
        repaired, also appended to the record's ``ipv6_repairs``. Nodes or namespaces that are
        gone are skipped. RailabError when the lab is not up."""
        from railab.testbed import linklocal

        record = self.record(lab)
        node_of = {ns: node for node, ns in record.namespaces.items()}
        repaired: list[str] = []
        for ns, names in ports_by_namespace(ports, record.namespaces).items():
            try:
                with entered(ns):
                    faults = linklocal.port_faults(sorted(names))
                    linklocal.repair(faults)
            except OSError:  # the namespace is gone (FileNotFoundError) or its netlink failed
                continue
            repaired += [f"{node_of[ns]}:{port}: {what}" for port, what in faults.items()]
        if repaired:
            record.ipv6_repairs += repaired
            st.save(record)
        return repaired

    def startup_problems(self, lab: str) -> list[str]:
        """The lines of the split configs (railab.topologies.frr.split_frr_conf) that ``lab``'s
        daemons refused at start, once each answers on its vty socket (up to 60 s in all, checked
        in parallel; it runs beside the convergence wait, not before it):
        ``"NODE DAEMON: frr.conf line N: MESSAGE: LINE"`` (see _config_rejections).
        RailabError when the lab is not up."""
        record = self.record(lab)
        clab = load_clab(record.clab_file or record.labdir)
        parts: dict[str, dict[str, Path]] = {}
        for n in clab.routers:
            files = {d: st.node_dir(lab, n.name) / f"{d}.conf" for d in n.daemons}
            files = {d: f for d, f in files.items() if f.exists()}
            if files:  # a node pushed with vtysh -f has none: vtysh reported its errors
                parts[n.name] = files
        return self._config_rejections(clab, lab, parts, timeout=60.0)

    @staticmethod
    def _daemon_waves(routers: list, clab: ClabFile | None = None) -> list[list[tuple[Any, str]]]:
        """The FRR start waves, each a list of ``(node, daemon)`` started together and waited for
        (a daemon started with ``-d`` returns once it runs, its pid file written) before the next:
        zebra everywhere (the others connect to it), then every other daemon of every node at
        once (they only need zebra, not each other), by position in each node's own daemon
        list (its daemons file's start order). Empty waves are left out.

        The second wave starts every bgpd first, top tier first (:func:`tier_order` of
        ``clab``'s links), then the other daemons. The upper end of every fabric link only
        listens (railab.topologies.frr, ``passive``): a lower-tier bgpd whose first connect
        meets a bgpd not listening yet is refused and waits bgpd's 1 s idle hold before it
        tries again (FRR 8.4 ``BGP_INIT_START_TIMER``; on the 4 x 16 Clos with every bgpd
        spawned in node order, 3 of a leaf's 4 sessions did). Spawned first, the listeners are
        up first, and the other daemons start while bgpd reads its config and learns its
        interfaces. Measured: it does not prevent those retries (3-10 of a spine's 16 sessions
        still retried: zebra's neighbour updates kill first connects too, docs/runtime.md
        "Issue 12, fourth pass"), and no gain in ``up`` was measurable.

        Measured, not kept: starting the listening tier's bgpd in a wave of its own before the
        other nodes' took the full 1024-GPU fabric's ``up`` from 17.7-18.7 s to 19.1-21.1 s
        (the lower tier's sessions then start later)."""
        rank = tier_order(clab) if clab is not None else {}
        routers = sorted(routers, key=lambda n: rank.get(n.name, 0))
        first = [(n, n.daemons[0]) for n in routers if n.daemons]
        rest = [(n, d, pos) for n in routers for pos, d in enumerate(n.daemons) if pos]
        rest.sort(key=lambda x: (x[1] != "bgpd", x[2]))  # stable: tier order within each
        return [w for w in (first, [(n, d) for n, d, _ in rest]) if w]

    @staticmethod
    def _config_rejections(clab: ClabFile, lab: str, parts: dict[str, dict[str, Path]],
                           timeout: float = 10.0) -> list[str]:
        """The lines of the split configs that their daemons refused at start, one text each
        (``"NODE DAEMON: frr.conf line N: MESSAGE: LINE"``; empty: every line was taken).

        A daemon started with ``-f FILE`` reads it in the first event of its main loop and does
        not stop on a refused line: it logs ``<message> on config line N: <line>`` (FRR 8.4
        ``lib/vty.c`` ``vty_read_file``, EC 100663304) and runs without it, and its stderr is
        closed, so nothing else shows it. ``vtysh -C`` before up only parses: it cannot see a
        line a running daemon refuses (e.g. a second ``router bgp`` with another ASN). So once
        each daemon answers on its vty socket (its config is read), its log is read for those
        lines; N is mapped back to the node's frr.conf by the line's text."""
        found: list[str] = []
        pat = re.compile(r"\] (?P<msg>.*?) on config line \d+: (?P<line>.*)$")
        # every daemon at once (288 on the 4096-GPU fabric, each busy converging)
        vty.wait_answering([st.node_dir(lab, n.name) / f"{d}.vty" for n in clab.routers
                            if n.name in parts for d in parts[n.name]], timeout=timeout)
        for n in clab.routers:
            if n.name not in parts:
                continue
            d = st.node_dir(lab, n.name)
            conf_lines = None
            for daemon in parts[n.name]:
                try:
                    log = (d / f"{daemon}.log").read_text(errors="replace")
                except OSError:
                    continue
                for m in filter(None, map(pat.search, log.splitlines())):
                    if conf_lines is None:
                        conf_lines = [x.rstrip() for x in Path(n.frr_conf).read_text().splitlines()]
                    text = m.group("line").rstrip()
                    where = next((f"frr.conf line {i}" for i, x in enumerate(conf_lines, 1) if x == text),
                                 f"{daemon}.conf")
                    found.append(f"{n.name} {daemon}: {where}: {m.group('msg')}: {text.strip()}")
        return found

    def _solicit(self, clab: ClabFile, lab: str, parts: dict[str, dict[str, Path]],
                 record: st.LabState) -> subprocess.Popen | None:
        """Once the zebra of every node whose config was split answers on its vty (it has read
        its config; one that does not within 10 s is left to the RA interval), send one Router
        Solicitation out of every fabric port (railab.testbed.solicit.solicit_once) and start
        ``python3 -m railab.testbed.solicit`` for the ports not ready yet (a new veth's carrier
        comes up to 1 s late), which the caller collects after the next wave; None when every
        port took it."""
        from railab.testbed.solicit import solicit_once

        vty.wait_answering([st.node_dir(lab, n.name) / "zebra.vty" for n in clab.routers if n.name in parts],
                           timeout=10.0)
        sent, later = solicit_once(fabric_ports(clab, record.namespaces))
        record.solicit = {"sent": sent}
        if not later:
            return None
        req = {"ports": {ns: sorted(p) for ns, p in later.items()}}
        proc, _ = self._spawn([sys.executable, "-m", "railab.testbed.solicit"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.stdin.write(json.dumps(req))
            proc.stdin.close()
        except OSError:
            pass  # it died at once: its exit code and stderr say why
        proc.stdin = None  # written and closed: communicate() must not flush it
        return proc

    def _reap(self, procs: dict[str, subprocess.Popen], what: str, lab: str) -> None:
        bad = []
        for name, p in procs.items():
            out, _ = p.communicate(timeout=60)
            if p.returncode != 0:
                text = (out or b"").decode(errors="replace").strip().splitlines()
                bad.append(f"{name}: {'; '.join(text[-3:]) or f'exit {p.returncode}'}")
        if bad:
            raise RailabError(f"lab {lab}: {what} failed on " + " | ".join(bad))

    @staticmethod
    def _wait_files(paths: list[Path], what: str, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        pending = list(paths)
        while pending:
            pending = [p for p in pending if not p.exists()]
            if pending and time.monotonic() > end:
                raise RailabError(f"{what} did not appear within {timeout:g} s: {', '.join(map(str, pending[:5]))}")
            if pending:
                time.sleep(0.01)

    # -- one node's daemons (faults, restart) -------------------------------------------------
    def node_daemons(self, lab: str, node: str) -> dict[str, bool]:
        """``{daemon: alive}`` for the FRR daemons ``node`` runs (its recorded start order; empty
        for a server). Alive means the recorded PID exists and names the lab's run directory.
        RailabError when the lab is not up; UsageError when ``node`` is not one of its FRR nodes."""
        r = self._router(lab, node)
        return {d: (d in r.pids and _alive(r.pids[d]) and str(st.lab_dir(lab)) in _cmdline(r.pids[d]))
                for d in r.daemons}

    def _router(self, lab: str, node: str) -> st.RouterState:
        record = self.record(lab)
        r = record.routers.get(node)
        if r is None:
            raise UsageError(f"lab {lab}: {node!r} runs no FRR daemons (FRR nodes: "
                             f"{', '.join(sorted(record.routers)) or 'none'})")
        return r

    def kill_daemons(self, lab: str, node: str, daemons: list[str] | None = None) -> list[str]:
        """SIGKILL ``daemons`` of ``node`` (default all it runs) and wait until they are gone
        (at most 5 s). A killed daemon cleans up nothing: the kernel routes zebra installed stay
        (a dead bgpd's routes are withdrawn by zebra, which sees its client go). Returns the
        daemons that were alive and were killed. UsageError for an unknown node or daemon."""
        r = self._router(lab, node)
        names = list(r.daemons) if daemons is None else list(daemons)
        bad = [d for d in names if d not in r.daemons]
        if bad:
            raise UsageError(f"{node} runs {', '.join(r.daemons)}, not {', '.join(bad)}")
        alive = self.node_daemons(lab, node)
        killed = [d for d in names if alive.get(d)]
        for d in killed:
            try:
                os.kill(r.pids[d], signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 5
        while time.monotonic() < end and any(_alive(r.pids[d]) for d in killed):
            time.sleep(0.01)
        return killed

    def start_daemons(self, lab: str, node: str, daemons: list[str] | None = None) -> list[str]:
        """Start the FRR ``daemons`` of ``node`` that are not running (default: every daemon it
        runs, in its start order), record their PIDs, then push the node's frr.conf with
        ``vtysh -f`` (each daemon takes its part; re-applying to running daemons is harmless).
        Returns the daemons started. RailabError when a daemon or vtysh fails (its last lines)."""
        record = self.record(lab)
        r = self._router(lab, node)
        clab = load_clab(record.clab_file or record.labdir)
        cnode = clab.nodes[node]
        alive = self.node_daemons(lab, node)
        want = list(r.daemons) if daemons is None else [d for d in r.daemons if d in daemons]
        todo = [d for d in want if not alive.get(d)]
        self._children = []
        ns = record.namespaces[node]
        # zebra first, the others after its zserv socket exists (as in up)
        for daemon in todo:
            pidfile = st.node_dir(lab, node) / f"{daemon}.pid"
            pidfile.unlink(missing_ok=True)
            if daemon == "zebra":
                (st.node_dir(lab, node) / "zserv.api").unlink(missing_ok=True)
            p, held = self._spawn(self._daemon_argv(lab, node, daemon, cnode.daemon_options.get(daemon)),
                                  ns=ns, hostname=node, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if held is not None:
                os.close(held)
            self._reap({node: p}, daemon, lab)
            if daemon == "zebra":
                self._wait_files([st.node_dir(lab, node) / "zserv.api"], "zebra's zserv socket")
            r.pids[daemon] = int(pidfile.read_text().split()[0])
            record.routers[node] = r
            st.save(record)
        self.push_config(lab, node)
        return todo

    def push_config(self, lab: str, node: str) -> None:
        """Apply ``node``'s integrated frr.conf again (``vtysh -f``, as ``up`` does).
        RailabError with vtysh's last lines when it fails."""
        r = self._router(lab, node)
        self._children = getattr(self, "_children", [])
        p, _ = self._spawn(["vtysh", "--vty_socket", str(st.node_dir(lab, node)), "-f", r.config],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._reap({node: p}, "vtysh -f frr.conf", lab)

    # -- down ----------------------------------------------------------------------------------
    def down(self, lab: str) -> None:
        """Remove everything recorded for ``lab``: FRR processes (recorded PIDs and any process
        inside the lab's namespaces), namespaces (their veths go with them), the ledger entries
        and ``/run/railab/<lab>``. Idempotent; works from a partial record after a crash.

        A Ctrl-C (SIGINT, SIGTERM, SIGHUP) during the teardown takes effect once it is done
        (railab.testbed.signals.signals_deferred; the sweep is bounded, 3.5 s at 4096 GPUs): an
        interrupted ``down`` used to leave the state record of a lab whose namespaces and
        daemons were gone, which ``list`` still showed as running."""
        with signals_deferred():
            self._down(lab)

    def _down(self, lab: str) -> None:
        record = st.load(lab)
        if record is not None and record.runtime != self.name:
            raise RailabError(
                f"lab {lab!r} runs on the {record.runtime} runtime: "
                f"`railab down {lab}` hands it to that runtime"
            )
        namespaces = set(record.namespaces.values()) if record is not None else set()
        namespaces |= {ns for ns, owner in st.ledger().items() if owner == lab}
        inodes = {i for i in (_ns_inode(ns) for ns in namespaces) if i}
        run_dir = str(st.lab_dir(lab)) + "/"
        # Sweep until a pass finds nothing: processes in the lab's namespaces, and any process
        # naming the lab's run directory (a daemon that double-forked late, or whose namespace
        # was already deleted). Recorded PIDs are covered by both.
        end = time.monotonic() + 10
        while time.monotonic() < end:
            victims = set(_pids_in_namespaces(inodes)) | set(_pids_naming(run_dir))
            if not victims:
                break
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            while victims and time.monotonic() < end:
                victims = {p for p in victims if _alive(p)}
                if victims:
                    time.sleep(0.01)
        # one `ip -batch` deletes them all (pyroute2's netns.remove per namespace needs its
        # 0.7 s package import and a call each); the ledger entries go once they are gone
        present = [ns for ns in sorted(namespaces) if netns_path(ns).exists()]
        try:
            ip_batch({None: [f"netns delete {ns}" for ns in present]}, what=f"lab {lab}: deleting namespaces")
        except RailabError:
            left = [ns for ns in present if netns_path(ns).exists()]
            if left:
                raise RailabError(f"could not delete namespace {left[0]} (and {len(left) - 1} more): "
                                  f"`ip netns delete {left[0]}` says why") from None
        for ns in sorted(namespaces):
            st.ledger_remove(ns)
        st.remove_lab_dir(lab)

    def down_all(self) -> list[str]:
        """Down every lab under /run/railab and every ledger namespace (orphans); return lab names."""
        labs = set(st.labs()) | set(st.ledger().values())
        # labs recorded by another runtime (containerlab) are not ours to tear down
        labs = {lab for lab in labs if (st.load(lab) or st.LabState(lab=lab)).runtime == self.name}
        for lab in sorted(labs):
            self.down(lab)
        return sorted(labs)

    # -- status / inspect ----------------------------------------------------------------------
    def inspect(self, lab: str) -> dict[str, Any]:
        """The recorded state as its JSON document; RailabError when the lab is not up."""
        return self.record(lab).to_json()

    def status(self, lab: str) -> dict[str, Any]:
        """``{lab, runtime, phase, nodes: {node: {namespace, present, daemons: {d: alive}}}}``
        from the record and /proc; ``daemons`` in start order (zebra, then bgpd, ...). BGP
        sessions are not observed here (railab.checks.converge.observe_sessions does that).
        RailabError when the lab is not up."""
        record = self.record(lab)
        nodes = {}
        for name, ns in record.namespaces.items():
            info: dict[str, Any] = {"namespace": ns, "present": netns_path(ns).exists(), "daemons": {}}
            r = record.routers.get(name)
            if r:
                # start order (RouterState.daemons), not the record's sorted JSON keys
                order = [d for d in r.daemons if d in r.pids] + [d for d in r.pids if d not in r.daemons]
                info["daemons"] = {d: (_alive(r.pids[d]) and str(st.lab_dir(lab)) in _cmdline(r.pids[d]))
                                   for d in order}
            nodes[name] = info
        return {"lab": lab, "runtime": self.name, "phase": record.phase, "nodes": nodes}
