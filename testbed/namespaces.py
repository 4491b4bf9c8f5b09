"""Network and UTS namespaces without code in forked children.

Two ways in, both safe next to thread pools (nothing runs in a forked child but ``exec``):

* :func:`exec_argv`: a command line that enters a named network namespace itself
  (``nsenter --net=/run/netns/<ns> -- argv``, util-linux). ``nsenter`` exits 127 when the
  command does not exist, 126 when it cannot be executed.
* :func:`entered`: move the *calling thread* into a network namespace (and optionally a UTS
  namespace) for the duration of a block, then back. Namespaces are per thread on Linux: sockets
  opened and children spawned inside the block live there; other threads are unaffected.
  ``setns(2)`` / ``unshare(2)`` are called through ctypes (``os.setns`` needs Python 3.12).

Named namespaces are made by :func:`create_netns` (one ``ip -batch`` process for many:
iproute2's ``ip netns add``, which bind-mounts them under ``/run/netns``) and removed with
pyroute2's public ``pyroute2.netns.remove``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path

from railab.errors import RailabError

NETNS_RUN_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000

_libc = ctypes.CDLL(None, use_errno=True)


def _home_net() -> int | None:
    try:
        return os.open("/proc/self/ns/net", os.O_RDONLY)  # not inherited across exec
    except OSError:
        return None


#: An fd on the network namespace this process started in, held for its whole life (never
#: used to enter it: :func:`entered` returns each thread to its own). It is how a lab's ``down``
#: (railab.testbed.runtime.netns.procs ``_visiting``) tells a railab command whose main thread is
#: inside one of the lab's namespaces for a moment (``up`` bringing each new one's loopback up,
#: a check, a drill) from a process of the lab: ``/proc/PID/ns/net`` alone shows both as inside,
#: and that ``down`` SIGKILLed an ``up`` still running (CI: exit -9). An fd that :func:`entered`
#: held only for the visit left a race: the command between two visits (fd closed) when read,
#: inside the next one when its namespace was read. A process started inside a lab namespace
#: (an agent run with ``nsenter``) holds one on that namespace and stays a process of the lab.
HOME_NET = _home_net()


def netns_path(ns: str) -> Path:
    """``/run/netns/<ns>``: the bind mount that names network namespace ``ns``."""
    return NETNS_RUN_DIR / ns


def exec_argv(ns: str, argv: Iterable[str]) -> list[str]:
    """``argv`` run inside network namespace ``ns``: ``nsenter --net=/run/netns/<ns> -- argv``."""
    return ["nsenter", f"--net={netns_path(ns)}", "--", *argv]


def setns(fd: int, nstype: int) -> None:
    """``setns(2)`` for the calling thread; OSError on failure."""
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """``unshare(2)`` for the calling thread; OSError on failure."""
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def _own(kind: str) -> int:
    return os.open(f"/proc/thread-self/ns/{kind}", os.O_RDONLY)


@contextmanager
def entered(ns: str, *, uts: int | None = None, hostname: str | None = None) -> Iterator[int | None]:
    """Run the block with the calling thread in network namespace ``ns`` (a name under
    ``/run/netns``) and, when asked, in a UTS namespace: ``uts`` (an open namespace fd) or, with
    ``hostname``, a new one whose hostname is ``hostname``. Yields an fd of that UTS namespace
    (a new fd, for re-entering it later; the caller closes it) or None. The thread returns to its
    own namespaces on exit. FileNotFoundError when ``ns`` does not exist; OSError from the
    syscalls."""
    target = os.open(netns_path(ns), os.O_RDONLY)
    home_net = _own("net")
    home_uts = _own("uts") if (uts is not None or hostname) else None
    try:
        setns(target, CLONE_NEWNET)
        try:
            held = None
            if uts is not None:
                setns(uts, CLONE_NEWUTS)
                held = os.dup(uts)
            elif hostname:
                unshare(CLONE_NEWUTS)
                socket.sethostname(hostname)
                held = _own("uts")
            yield held
        finally:
            if home_uts is not None:
                setns(home_uts, CLONE_NEWUTS)
            setns(home_net, CLONE_NEWNET)
    finally:
        for fd in (target, home_net, home_uts):
            if fd is not None:
                os.close(fd)


#: netdevice(7) ioctls and flags (linux/sockios.h, linux/if.h)
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def set_link_up(ifname: str) -> None:
    """Set interface ``ifname`` of the calling thread's network namespace administratively up
    (``ip link set IFNAME up``): the SIOCGIFFLAGS / SIOCSIFFLAGS ioctls of netdevice(7) on a
    socket opened here. ``up`` uses it for every namespace's loopback, where a pyroute2
    ``IPRoute`` per namespace cost its package import (~0.3 s) plus an event loop each
    (~10-20 ms; 2.6 s for the 608 namespaces of the 4096-GPU fabric). OSError (ENODEV) when the
    interface does not exist."""
    name = ifname.encode()
    if not 0 < len(name) < 16:  # IFNAMSIZ: the kernel would cut a longer name to another one
        raise OSError(errno.EINVAL, f"interface name {ifname!r}: 1-15 bytes")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # struct ifreq: 40 bytes
        req = fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH22x", name, 0))
        flags = struct.unpack_from("16sH", req)[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", name, flags | _IFF_UP))


def _close_quietly(stream) -> None:
    """Close a pipe whose reader is gone: the unwritten rest is dropped (its flush raises
    BrokenPipeError; the reader's exit status and stderr tell what happened)."""
    try:
        stream.close()
    except BrokenPipeError:
        try:
            stream.close()  # the failed flush left it open once; now it closes
        except OSError:
            pass


#: fds ``ip`` keeps open per ``netns NAME`` argument of a batch line, for the process's life
#: (iproute2 6.1: ``link add ... netns A type veth peer ... netns B`` under ``ulimit -n 100``
#: stops at the 47th line with 'Invalid "netns" value')
FDS_PER_NETNS_LINE = 2


def netns_lines_per_batch() -> int:
    """How many ``link add ... netns A ... peer ... netns B`` lines one ``ip -batch`` process
    can take before it runs out of file descriptors: (soft RLIMIT_NOFILE - 32) /
    :data:`FDS_PER_NETNS_LINE`, at least 64 (soft limit 1,024: 496 lines; 20,000: 9,984)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(64, (int(soft) - 32) // FDS_PER_NETNS_LINE)


def ip_batch(scripts: dict[str | None, list[str]], *, what: str, parallel: int = 8,
             force: bool = False, max_lines: int | None = None) -> None:
    """Run iproute2 batches: ``scripts`` maps a namespace name (None: this process's own) to the
    ``ip`` command lines to run there (``ip [-n NS] -batch -``), up to ``parallel`` processes at
    once. One process per namespace applies hundreds of lines at kernel speed where one
    pyroute2 request per line costs 2-4 ms of Python each (measured: 1,000 veth pairs 1.2 s
    against 6.2 s). Raises RailabError naming ``what``, the namespace, iproute2's message and the
    failing line (``ip -batch`` stops there; with ``force``, ``ip -force -batch`` goes on past
    a failing line and fails at the end). A batch that stops early while railab still writes it
    (a script larger than the pipe: 16,384 veth pairs are ~2 MB) is the same error with the same
    line, never a broken pipe. An ``ip`` killed by the terminal's Ctrl-C fails like
    any other: ``up`` reports the interrupt instead (railab.testbed.signals.interruption).
    ``max_lines``: at most that many lines per ``ip`` process (a longer script is cut into
    consecutive parts, each its own process, run in order for one namespace; e.g.
    :func:`netns_lines_per_batch` for lines that name namespaces).

    A namespace's ``ip`` is started from inside it (:func:`entered`, the child inherits the
    thread's namespace), not with ``ip -n NS``: ``-n`` also gives each process a mount namespace
    of its own (``unshare(CLONE_NEWNS)`` and a fresh ``/sys``, which no link, address, route or
    rule line needs), a copy of the host's whole mount table, which holds one bind mount per
    network namespace, torn down again at exit. At 4096 GPUs (608 namespaces, ~608 processes
    for the veth peers and the server NICs) that copying and teardown was ~0.8 of the ~5.4
    CPU-s ``ip`` used in ``up`` (perf, 2026-12-06; issue 47)."""
    step = max_lines or 0
    pending = [(ns, lines[i:i + step] if step else lines)
               for ns, lines in scripts.items() if lines
               for i in (range(0, len(lines), step) if step else (0,))]
    running: list[tuple[str | None, list[str], subprocess.Popen, object]] = []
    errors: list[tuple[str, str | None]] = []  # (message, namespace)

    def reap(item) -> None:
        ns, lines, p, errf = item
        p.wait()
        errf.seek(0)
        err = errf.read()
        errf.close()
        if p.returncode != 0:
            msg = err.strip().splitlines()
            where = ""
            for line in msg:  # "Command failed -:LINE"
                if line.startswith("Command failed -:"):
                    try:
                        where = f" at `{lines[int(line.rsplit(':', 1)[1]) - 1]}`"
                    except (ValueError, IndexError):
                        pass
            text = "; ".join(m for m in msg if not m.startswith("Command failed"))[:300]
            errors.append((f"{ns or 'host'}: {text or f'exit {p.returncode}'}{where}", ns))

    try:
        while pending or running:
            busy = {item[0] for item in running}
            while len(running) < parallel:
                # one part at a time per namespace, in order (a later line may need an earlier)
                nxt = next((k for k, (ns, _) in enumerate(pending) if ns not in busy), None)
                if nxt is None:
                    break
                ns, lines = pending.pop(nxt)
                busy.add(ns)
                argv = ["ip"] + (["-force"] if force else []) + ["-batch", "-"]
                # stderr to a file: with -force every failing line writes one, and a full pipe
                # would stop ip while railab still writes its stdin
                errf = tempfile.TemporaryFile(mode="w+")
                try:
                    with entered(ns) if ns else nullcontext():
                        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                             stderr=errf, text=True)
                except OSError as exc:  # the namespace is gone (or ip is missing)
                    errf.close()
                    errors.append((f"{ns or 'host'}: {exc}", ns))
                    if not force:
                        pending = [item for item in pending if item[0] != ns]
                    continue
                running.append((ns, lines, p, errf))
                try:
                    p.stdin.write("\n".join(lines) + "\n")
                    p.stdin.close()
                except BrokenPipeError:  # ip stopped early (a failing line): reap says which
                    _close_quietly(p.stdin)
            before = len(errors)
            reap(running.pop(0))
            if len(errors) > before and not force:  # ip stopped at a failing line: so do the rest
                failed_ns = errors[-1][1]
                pending = [item for item in pending if item[0] != failed_ns]
    finally:
        for _, _, p, errf in running:  # interrupted: do not leave ip processes behind
            p.kill()
            p.wait()
            errf.close()
    if errors:
        raise RailabError(f"{what} failed: " + " | ".join(e for e, _ in errors[:5]))


def create_netns(names: Iterable[str]) -> None:
    """Create the named network namespaces ``names`` (``ip -batch -``, one process; each gets a
    loopback, down). RailabError with iproute2's message when one cannot be made (e.g. exists)."""
    script = "".join(f"netns add {n}\n" for n in names)
    if not script:
        return
    res = subprocess.run(["ip", "-batch", "-"], input=script, capture_output=True, text=True)
    if res.returncode != 0:
        raise RailabError(f"ip netns add failed: {(res.stderr or res.stdout).strip()[:400]}")


def run_batches(jobs: Mapping[str, tuple[list[str], str]], what: str) -> None:
    """Run ``{node: (argv, stdin)}`` concurrently (e.g. one ``tc -batch -`` or ``nft -f -`` per
    namespace, argv from :func:`exec_argv`); RailabError naming the first nodes that fail.
    railab.testbed.capacity (port queues, ECN tables) and the netns runtime's RA gate use it."""
    procs = {}
    try:
        for node, (argv, script) in jobs.items():
            procs[node] = (subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True), script)
        bad = []
        for node, (p, script) in procs.items():
            out, _ = p.communicate(script, timeout=60)
            if p.returncode != 0:
                why = out.strip()[:300] or (f"killed by signal {-p.returncode}" if p.returncode < 0
                                            else f"exit {p.returncode}, no output")
                bad.append(f"{node}: {why}")
    except FileNotFoundError as exc:
        raise RailabError(f"{what}: {exc.filename} not found (iproute2, nftables, util-linux)") \
            from None
    finally:
        for p, _ in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    if bad:
        raise RailabError(f"{what} failed on " + " | ".join(bad[:3]))
