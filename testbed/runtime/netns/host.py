"""Host limits of ``up``: memory estimate, neighbour-table and file-descriptor limits, root and FRR installed.

Light on purpose (the lab model only in annotations): NetnsRuntime re-exports these and every
command on a running lab (``down``, ``status``, ``exec``) loads the runtime."""

from __future__ import annotations

import os
import resource
import shutil
from typing import TYPE_CHECKING

from railab.errors import RailabError
from railab.testbed.runtime.netns.constants import (
    FD_HEADROOM,
    FDS_PER_NODE,
    FRR_BIN,
    GIB,
    MEM_AVAILABLE_ENV,
    MEM_HEADROOM_BYTES,
    NEIGH_HEADROOM,
    NEIGH_PER_ENDPOINT,
)
from railab.testbed.runtime.netns.frrmem import lean_in_effect
from railab.topologies.estimate import MemoryEstimate, estimate_memory
from railab.topologies.nodekinds import FRR_DAEMONS

if TYPE_CHECKING:
    from railab.topologies.labspec import LabSpec


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
    est = estimate_memory(spec, lean=lean_in_effect())  # the daemons' memory settings (frrmem)
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




def check_prerequisites() -> None:
    """Raise RailabError unless we are root and Debian's frr (daemons + vtysh) is installed."""
    if os.geteuid() != 0:
        raise RailabError("the netns runtime needs root (network namespaces, FRR): run with sudo")
    missing = [d for d in FRR_DAEMONS if not (FRR_BIN / d).exists()]
    if missing or shutil.which("vtysh") is None:
        what = ", ".join(str(FRR_BIN / d) for d in missing) or "vtysh"
        raise RailabError(f"FRR is not installed ({what} missing): apt-get install frr")
