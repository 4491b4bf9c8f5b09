"""Processes of a lab: namespace inodes, the PIDs inside a lab's namespaces, liveness and command lines."""

from __future__ import annotations

import os

from railab.testbed.namespaces import netns_path


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


def _visiting(pid: int, inodes: set[tuple[int, int]]) -> bool:
    """Whether process ``pid`` holds an fd on a network namespace that is not one of ``inodes``
    (a lab's namespaces): a railab command (``up``, ``check``, ``drill`` ...), which holds one on
    the namespace it started in for its whole life (railab.testbed.namespaces ``HOME_NET``), so
    that while its main thread visits one of the lab's namespaces (``/proc/PID/ns/net`` is the
    main thread's) it is not taken for a process of the lab. False for a process gone meanwhile."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        where = f"/proc/{pid}/fd/{fd}"
        try:  # HOME_NET, opened on /proc/self/ns/net, reads "net:[INODE]" (one on /run/netns/NAME, its path)
            if not os.readlink(where).startswith("net:["):
                continue
            s = os.stat(where)
        except OSError:
            continue
        if (s.st_dev, s.st_ino) not in inodes:
            return True
    return False


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


