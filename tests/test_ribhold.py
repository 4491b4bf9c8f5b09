"""zebra's bring-up RIB hold (issue 47, railab.testbed.runtime.netns.ribhold): the setting, which
routers get the line, and its release over the vty socket (a fake daemon speaking vtysh's
protocol)."""

from __future__ import annotations

import socket
import threading

import pytest

from railab.errors import UsageError
from railab.testbed import state as st
from railab.testbed.runtime.netns import ribhold
from railab.testbed.vty import vty_configure


def test_hold_ms(monkeypatch):
    monkeypatch.delenv(ribhold.HOLD_ENV, raising=False)
    assert ribhold.hold_ms() == ribhold.BRINGUP_HOLD_MS == 1000
    for raw, ms in (("0", 0), (" 250 ", 250), ("", 1000), ("10000", 10000)):
        monkeypatch.setenv(ribhold.HOLD_ENV, raw)
        assert ribhold.hold_ms() == ms
    for raw in ("-1", "1s", "10001", "yes"):
        monkeypatch.setenv(ribhold.HOLD_ENV, raw)
        with pytest.raises(UsageError, match=ribhold.HOLD_ENV):
            ribhold.hold_ms()


def _bgpd(sessions: int) -> str:
    return "router bgp 65000\n" + "".join(f" neighbor eth{i} interface peer-group FABRIC\n"
                                          for i in range(sessions)) + " neighbor FABRIC peer-group\nexit\n"


def test_start_line_only_on_wide_routers():
    """The full fabrics' leaves (64 sessions) and spines (128) are held; small labs' routers,
    whose routes have a few paths, are not (the hold would only delay their convergence)."""
    assert ribhold.start_line(1000, _bgpd(64)) == "zebra work-queue 1000\n"
    assert ribhold.start_line(1000, _bgpd(ribhold.HOLD_FROM_SESSIONS)) == "zebra work-queue 1000\n"
    assert ribhold.start_line(1000, _bgpd(ribhold.HOLD_FROM_SESSIONS - 1)) == ""
    assert ribhold.start_line(0, _bgpd(128)) == ""
    assert ribhold.start_line(1000, "") == ""


def _fake_zebra(path, seen: list[str], status: int = 0) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def serve():
        conn, _ = srv.accept()
        buf = b""
        with conn:
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    cmd, buf = buf.split(b"\0", 1)
                    seen.append(cmd.decode())
                    last = cmd.decode() == "no zebra work-queue"
                    conn.sendall(b"\0\0\0" + bytes([status if last else 0]))
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_release(monkeypatch, tmp_path):
    monkeypatch.setattr(st, "node_dir", lambda lab, node: tmp_path / node)
    for node, line in (("leaf1", "zebra work-queue 1000\n"), ("leaf2", ""), ("leaf3", "zebra work-queue 1000\n")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "zebra.conf").write_text("hostname x\ninterface eth1\nexit\n" + line)
    seen: list[str] = []
    t = _fake_zebra(tmp_path / "leaf1" / "zebra.vty", seen)
    assert ribhold.held("lab", "leaf1") and not ribhold.held("lab", "leaf2")
    assert not ribhold.held("lab", "nowhere")
    failed = ribhold.release("lab", ["leaf1", "leaf2", "leaf3"], timeout=5)
    t.join(5)
    assert seen == ["enable", "configure terminal", "no zebra work-queue"]
    # leaf2 was not held (not asked); leaf3's zebra is gone: named
    assert len(failed) == 1 and failed[0].startswith("leaf3: ")


def test_vty_configure_stops_at_a_refused_command(tmp_path):
    seen: list[str] = []
    t = _fake_zebra(tmp_path / "z.vty", seen, status=2)
    assert vty_configure(tmp_path / "z.vty", ["configure terminal", "no zebra work-queue", "end"],
                         timeout=5)[0] == 2
    t.join(5)
    assert seen == ["enable", "configure terminal", "no zebra work-queue"]
