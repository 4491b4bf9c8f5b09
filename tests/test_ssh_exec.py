"""SshExecutor against a real OpenSSH server (Debian's openssh-server).

The module fixture creates a network namespace of its own (``rlssh-<pid>``), starts ``sshd -D``
inside it on 127.0.0.1 with a host key and a user key generated for the test, and removes both
afterwards. The client connects from inside the same namespace (``pyroute2.netns.pushns``), so
nothing is added to the host's network. Needs root (namespaces).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from railab.errors import RailabError
from railab.testbed.namespaces import exec_argv
from railab.testbed.ssh_exec import SshExecutor, SshTarget, load_inventory

pytestmark = pytest.mark.integration

PORT = 2222
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def sshd():
    """(namespace, tmpdir, user key path, host public key line) of a live sshd; cleaned up."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace, sshd)")
    if not os.path.exists(SSHD):
        pytest.skip("sshd is not installed (Debian: apt-get install openssh-server)")
    from pyroute2 import NetNS, netns

    ns = f"rlssh-{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix="rl-ssh-"))
    made_privsep = False
    proc = None
    netns.create(ns)
    try:
        with NetNS(ns) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        if not os.path.isdir("/run/sshd"):  # sshd's compiled-in privilege separation dir
            os.makedirs("/run/sshd", mode=0o755)
            made_privsep = True
        for name in ("host_ed25519", "user_ed25519", "other_host_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(tmp / name)],
                           check=True)
        shutil.copy(tmp / "user_ed25519.pub", tmp / "authorized_keys")
        (tmp / "sshd_config").write_text(
            f"Port {PORT}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_ed25519'}\n"
            f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPidFile {tmp / 'sshd.pid'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        )
        proc = subprocess.Popen(  # nsenter execs sshd in the namespace: no code in the forked child
            exec_argv(ns, [SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")]),
            stdout=subprocess.DEVNULL, stderr=open(tmp / "sshd.log", "wb"),
        )
        host_pub = (tmp / "host_ed25519.pub").read_text().split()
        yield ns, tmp, tmp / "user_ed25519", f"{host_pub[0]} {host_pub[1]}"
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        netns.remove(ns)
        if made_privsep:
            shutil.rmtree("/run/sshd", ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def in_ns(sshd):
    """Run the test body with this thread in the sshd namespace; wait until sshd listens."""
    import socket

    from pyroute2 import netns

    netns.pushns(sshd[0])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield sshd
    finally:
        netns.popns()


def _known_hosts(tmp: Path, keyline: str) -> Path:
    p = tmp / f"known_hosts.{abs(hash(keyline))}"
    p.write_text(f"[127.0.0.1]:{PORT} {keyline}\n")
    return p


def _inventory(key: Path) -> dict:
    return {"leaf1": {"host": "127.0.0.1", "port": PORT, "user": "root", "key_file": str(key)}}


def test_runs_commands_with_rc_stdout_stderr(in_ns):
    ns, tmp, key, host_key = in_ns
    with SshExecutor(_inventory(key), known_hosts=_known_hosts(tmp, host_key)) as ex:
        res = ex.run("leaf1", ["sh", "-c", "echo out; echo err >&2; exit 5"])
        assert (res.rc, res.stdout, res.stderr) == (5, "out\n", "err\n")
        # argv arrives verbatim through the remote shell (shlex quoting)
        res = ex.run("leaf1", ["printf", "%s|", "a b", "$HOME", "it's"])
        assert res.rc == 0 and res.stdout == "a b|$HOME|it's|"
        # it is the namespace the test made: only lo
        res = ex.run("leaf1", ["cat", "/proc/net/dev"])
        assert [ln.split(":")[0].strip() for ln in res.stdout.splitlines()[2:]] == ["lo"]
        # the connection is reused across commands
        assert len(ex._clients) == 1


def test_unknown_host_key_is_refused_by_default(in_ns, monkeypatch):
    ns, tmp, key, host_key = in_ns
    home = tmp / "emptyhome"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))  # default: ~/.ssh/known_hosts, here empty
    with SshExecutor(_inventory(key)) as ex:
        with pytest.raises(RailabError, match=r"host key of \[127.0.0.1\]:2222 is unknown"):
            ex.run("leaf1", ["true"])


def test_changed_host_key_is_refused_even_when_accepting_unknown(in_ns):
    ns, tmp, key, host_key = in_ns
    other = (tmp / "other_host_ed25519.pub").read_text().split()
    kh = _known_hosts(tmp, f"{other[0]} {other[1]}")
    with SshExecutor(_inventory(key), known_hosts=kh, accept_unknown_hosts=True) as ex:
        with pytest.raises(RailabError, match="CHANGED"):
            ex.run("leaf1", ["true"])


def test_accept_unknown_hosts_opt_in(in_ns, monkeypatch):
    ns, tmp, key, host_key = in_ns
    monkeypatch.setenv("HOME", str(tmp / "emptyhome2"))
    with SshExecutor(_inventory(key), accept_unknown_hosts=True) as ex:
        assert ex.run("leaf1", ["echo", "ok"]).stdout == "ok\n"


def test_timeout(in_ns):
    ns, tmp, key, host_key = in_ns
    pidfile = tmp / "sleep.pid"
    with SshExecutor(_inventory(key), known_hosts=_known_hosts(tmp, host_key)) as ex:
        t0 = time.monotonic()
        try:
            with pytest.raises(TimeoutError, match="within 1 s"):
                ex.run("leaf1", ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 29"], timeout=1.0)
            assert time.monotonic() - t0 < 4
            # the connection stays usable after a timed-out command
            assert ex.run("leaf1", ["echo", "after"]).stdout == "after\n"
        finally:
            # sshd ignores the RFC 4254 signal request for root sessions (no privilege
            # separation), so the test reaps its own sleeper by pid
            try:
                os.kill(int(pidfile.read_text()), 9)
            except (OSError, ValueError):
                pass


def test_wrong_user_key_and_unreachable_are_clear_errors(in_ns):
    ns, tmp, key, host_key = in_ns
    kh = _known_hosts(tmp, host_key)
    inv = _inventory(tmp / "other_host_ed25519")  # a key sshd does not authorize
    with SshExecutor(inv, known_hosts=kh) as ex:
        with pytest.raises(RailabError, match="SSH to root@\\[127.0.0.1\\]:2222 failed"):
            ex.run("leaf1", ["true"])
    inv = {"leaf1": {"host": "127.0.0.1", "port": PORT + 1, "key_file": str(key), "connect_timeout": 2}}
    with SshExecutor(inv, known_hosts=kh) as ex:
        with pytest.raises(RailabError, match="cannot reach"):
            ex.run("leaf1", ["true"])


def test_inventory_and_command_line(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text("spine1: {host: 10.0.0.1, user: admin, sudo: true}\ng1-leaf1: leaf1.dc1\n")
    targets = load_inventory(inv)
    assert targets["spine1"] == SshTarget(host="10.0.0.1", user="admin", sudo=True)
    assert targets["g1-leaf1"].host == "leaf1.dc1" and targets["g1-leaf1"].port == 22
    ex = SshExecutor(targets)
    assert ex.command_line("spine1", ["vtysh", "-c", "show bgp summary json"]) == \
        "sudo -n -- vtysh -c 'show bgp summary json'"
    assert ex.command_line("g1-leaf1", ["ip", "-j", "route"]) == "ip -j route"
    with pytest.raises(RailabError, match="not in the SSH inventory"):
        ex.run("srv1", ["true"])
    bad = tmp_path / "bad.yml"
    bad.write_text("spine1: {host: 10.0.0.1, port: 70000}\n")
    with pytest.raises(RailabError, match=r"bad.yml: node 'spine1', port"):
        load_inventory(bad)
    with pytest.raises(RailabError, match="known_hosts file .* does not exist"):
        SshExecutor(targets, known_hosts=tmp_path / "nope")

