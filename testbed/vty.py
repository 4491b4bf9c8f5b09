"""A client of FRR's vty unix sockets: one ``show`` command to one daemon, without ``vtysh``.

``vtysh -c CMD`` costs ~50 ms of CPU per call before it sends anything (it builds every
daemon's command tree and connects to every daemon), which is most of what the convergence wait
and ``check`` spend reading FRR: 96 routers x one summary per poll on the 4096-GPU fabric. The
daemon's own socket (``<daemon>.vty`` in the node's run directory) answers the same command in
~2-3 ms. The protocol is vtysh's (FRR ``vtysh/vtysh.c`` ``vtysh_client_run``, ``lib/vty.c``
``vtysh_read``): the client writes the command line and a NUL; the daemon runs it and writes
its output followed by three NULs and one status byte (the ``CMD_*`` code, 0 = success). Like
vtysh, the client sends ``enable`` first.

Only commands one daemon owns go this way (:func:`owner`); anything else (``show
running-config``, which vtysh merges from every daemon) is left to ``vtysh``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Leading words of a show command -> the daemon that owns it (vtysh sends these to that daemon
#: alone: their DEFUNs live in bgpd/, bfdd/, zebra/ only).
OWNERS: tuple[tuple[str, str], ...] = (
    ("show bgp ", "bgpd"),
    ("show ip bgp ", "bgpd"),
    ("show ipv6 bgp ", "bgpd"),
    ("show bfd ", "bfdd"),
    ("show ip route", "zebra"),
    ("show ipv6 route", "zebra"),
)

_TERMINATOR = b"\0\0\0"


class VtyUnavailable(OSError):
    """The daemon's vty socket is absent or refuses the connection (daemon not running)."""


def owner(command: str) -> str | None:
    """The FRR daemon that alone answers ``command`` (``show bgp ... json`` -> ``bgpd``), or
    None when vtysh must merge several daemons' answers or the command is not a show command."""
    text = " ".join(command.split()) + " "
    for prefix, daemon in OWNERS:
        if text.startswith(prefix):
            return daemon
    return None


def _exchange(s: socket.socket, path, command: str, timeout: float) -> tuple[int, str]:
    s.sendall(command.encode() + b"\0")
    buf = bytearray()
    while True:
        try:
            chunk = s.recv(262144)
        except TimeoutError:
            raise TimeoutError(f"{path}: {command!r} did not finish within {timeout:g} s") from None
        if not chunk:
            raise ConnectionResetError(f"{path}: the daemon closed the connection mid-answer")
        buf += chunk
        if len(buf) >= 4 and buf[-4:-1] == _TERMINATOR:
            return buf[-1], bytes(buf[:-4]).decode(errors="replace")


@contextmanager
def _enabled(path: str | Path, timeout: float) -> Iterator[socket.socket]:
    """A connection to the daemon behind the vty socket ``path`` in ENABLE node, closed after
    the block. vtysh enters ENABLE node on every daemon first (``vtysh_execute("enable")`` at
    start): some daemons install their show commands there only (bfdd's ``show bfd peers``).
    Raises VtyUnavailable when the socket is missing, refuses the connection or refuses
    ``enable``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise VtyUnavailable(f"{path}: {exc.strerror}") from exc
        status, _ = _exchange(s, path, "enable", timeout)
        if status != 0:
            raise VtyUnavailable(f"{path}: `enable` refused (status {status})")
        yield s
    finally:
        s.close()


def vty_command(path: str | Path, command: str, *, timeout: float = 30.0) -> tuple[int, str]:
    """Run ``command`` on the daemon listening on the vty socket ``path``; returns ``(status,
    output)``: status is FRR's ``CMD_*`` code (0 success, 1 warning, 2 no such command, ...).

    Raises VtyUnavailable when the socket is missing or refuses the connection, TimeoutError
    when the daemon does not finish its answer within ``timeout`` seconds, OSError on a broken
    connection."""
    with _enabled(path, timeout) as s:
        return _exchange(s, path, command, timeout)


def vty_configure(path: str | Path, commands: list[str], *, timeout: float = 30.0) -> tuple[int, str]:
    """Run ``commands`` in order in one session on the daemon behind the vty socket ``path``
    (after ``enable``, as vtysh does), e.g. ``["configure terminal", "no zebra work-queue"]``;
    stops at the first that fails. Returns ``(status, output)`` of the last one run; raises as
    :func:`vty_command`."""
    status, out = 0, ""
    with _enabled(path, timeout) as s:
        for command in commands:
            status, out = _exchange(s, path, command, timeout)
            if status != 0:
                break
    return status, out


def wait_answering(paths: list[Path], *, timeout: float = 10.0, workers: int = 32) -> list[Path]:
    """Wait, up to ``timeout`` seconds in all, until the daemon behind each vty socket of
    ``paths`` answers a command (checked from ``workers`` threads at once). A daemon started
    with ``-f FILE`` reads that file in the first event of its main loop, so its first answer
    comes after its config is in. Returns the sockets that never answered (empty: all did)."""
    from concurrent.futures import ThreadPoolExecutor

    end = time.monotonic() + timeout

    def answered(sock: Path) -> bool:
        # the lab's run directory gone (down, a rollback): nothing left to wait for
        while time.monotonic() < end and sock.parent.exists():
            try:
                vty_command(sock, "show version", timeout=max(0.1, end - time.monotonic()))
                return True
            except (OSError, TimeoutError):
                time.sleep(0.02)
        return False

    if not paths:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(paths))) as pool:
        return [p for p, ok in zip(paths, pool.map(answered, paths), strict=True) if not ok]

