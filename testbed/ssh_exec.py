"""Run commands on real switches and hosts over SSH (paramiko), for checks against a real fabric.

Host keys are verified by default: the server's key must be in ``known_hosts`` (the given file,
else the user's ``~/.ssh/known_hosts`` and ``/etc/ssh/ssh_known_hosts``); an unknown or changed
key is refused with a RailabError that says how to add it. Only ``accept_unknown_hosts=True``
(labs you just built) relaxes that, and even then a *changed* key is refused.

The inventory maps each lab node to its SSH target::

    spine1:   {host: 10.0.0.1, user: admin, key_file: ~/.ssh/fabric_ed25519}
    g1-leaf1: {host: leaf1.dc1, port: 2222, user: admin, sudo: true}

(YAML or JSON; ``load_inventory(path)``). ``argv`` is quoted with ``shlex.join`` for the remote
POSIX shell, so arguments arrive exactly as given.
"""

from __future__ import annotations

import errno
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from railab.errors import MissingExtraError, RailabError
from railab.testbed.executor import ExecResult, Executor
from railab.topologies.yamlio import YamlFileError, read_yaml_file

try:  # optional: the ssh extra (pip install 'railab[ssh]')
    import paramiko
except ImportError:  # SshExecutor() says what to install
    paramiko = None


class SshTarget(BaseModel):
    """Where and how to reach one node: ``host`` (name or address), ``port`` (TCP), ``user``,
    ``key_file`` (private key; None = ssh-agent and ~/.ssh/id_*), ``sudo`` (prefix ``sudo -n``,
    e.g. vtysh on SONiC needs it), ``connect_timeout`` (s), ``vtysh`` (argv that replaces a
    leading ``vtysh``: where FRR's shell lives on that node)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1)
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("root", min_length=1)
    key_file: Path | None = None
    sudo: bool = False
    connect_timeout: float = Field(10.0, gt=0)
    vtysh: list[str] = Field(
        default_factory=lambda: ["vtysh"],
        description="how FRR's shell is reached on this node; replaces a leading `vtysh`, e.g. "
        "['docker', 'exec', 'bgp', 'vtysh'] on SONiC, or "
        "['vtysh', '--vty_socket', '/run/railab/<lab>/<node>'] for a railab netns node",
    )


def load_inventory(path: str | Path) -> dict[str, SshTarget]:
    """Read a node -> target mapping from a YAML or JSON file.

    Raises RailabError naming the file and the bad node/key.
    """
    p = Path(path)
    try:
        doc = read_yaml_file(p, "SSH inventory")  # YAML, or JSON (a subset)
    except YamlFileError as exc:
        raise RailabError(str(exc)) from None
    if not isinstance(doc, dict) or not doc:
        raise RailabError(f"SSH inventory {p} must map node names to {{host, user, ...}}")
    return parse_inventory(doc, where=str(p))


def parse_inventory(doc: Mapping[str, Any], *, where: str = "inventory") -> dict[str, SshTarget]:
    """Validate a node -> {host, port, user, key_file, sudo} mapping; RailabError on bad input."""
    out: dict[str, SshTarget] = {}
    for node, spec in doc.items():
        if isinstance(spec, SshTarget):
            out[str(node)] = spec
            continue
        if isinstance(spec, str):
            spec = {"host": spec}
        try:
            out[str(node)] = SshTarget.model_validate(spec)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "(node)"
            raise RailabError(f"{where}: node {node!r}, {loc}: {first['msg']}") from None
    return out


def _send_signal(chan: paramiko.Channel, name: str) -> None:
    """Ask the server to deliver signal ``name`` (no ``SIG``) to the channel's process:
    the "signal" channel request of RFC 4254 section 6.9. OpenSSH honours it for privilege-
    separated sessions, i.e. non-root users; for root logins sshd refuses it ("session signalling
    requires privilege separation") and the process runs on until it exits or writes to the
    closed channel. paramiko has no public call for it, so the message is built by hand."""
    m = paramiko.Message()
    m.add_byte(bytes([paramiko.common.MSG_CHANNEL_REQUEST]))
    m.add_int(chan.remote_chanid)
    m.add_string("signal")
    m.add_boolean(False)
    m.add_string(name)
    try:
        chan.transport._send_user_message(m)
    except (EOFError, OSError, paramiko.SSHException):
        pass


class SshExecutor(Executor):
    """Run argv on nodes over SSH, one cached connection per node.

    ``inventory``: node -> SshTarget (or a dict of its fields, or a bare host name).
    ``known_hosts``: a known_hosts file to trust; default the system and user files.
    ``accept_unknown_hosts``: add unknown host keys for this session instead of refusing them
    (a changed key is still refused). Default False: unknown keys are refused.
    Raises MissingExtraError when paramiko is not installed (``pip install 'railab[ssh]'``).
    """

    def __init__(
        self,
        inventory: Mapping[str, Any],
        *,
        known_hosts: str | Path | None = None,
        accept_unknown_hosts: bool = False,
    ) -> None:
        if paramiko is None:
            raise MissingExtraError("paramiko", "ssh", "checking a real fabric over SSH")
        self.inventory = parse_inventory(inventory)
        self.known_hosts = Path(known_hosts).expanduser() if known_hosts else None
        if self.known_hosts is not None and not self.known_hosts.is_file():
            raise RailabError(f"known_hosts file {self.known_hosts} does not exist")
        self.accept_unknown_hosts = accept_unknown_hosts
        self._clients: dict[str, paramiko.SSHClient] = {}

    def target(self, node: str) -> SshTarget:
        try:
            return self.inventory[node]
        except KeyError:
            raise RailabError(
                f"node {node!r} is not in the SSH inventory (has: {', '.join(sorted(self.inventory))})"
            ) from None

    def _connect(self, node: str) -> paramiko.SSHClient:
        client = self._clients.get(node)
        if client is not None and client.get_transport() and client.get_transport().is_active():
            return client
        t = self.target(node)
        client = paramiko.SSHClient()
        if self.known_hosts is not None:
            client.load_host_keys(str(self.known_hosts))
        else:
            client.load_system_host_keys()
        policy = paramiko.AutoAddPolicy() if self.accept_unknown_hosts else paramiko.RejectPolicy()
        client.set_missing_host_key_policy(policy)
        hostname = t.host if t.port == 22 else f"[{t.host}]:{t.port}"
        try:
            client.connect(
                t.host,
                port=t.port,
                username=t.user,
                key_filename=str(Path(t.key_file).expanduser()) if t.key_file else None,
                timeout=t.connect_timeout,
                banner_timeout=t.connect_timeout,
                auth_timeout=t.connect_timeout,
                look_for_keys=t.key_file is None,
                allow_agent=t.key_file is None,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise RailabError(
                f"node {node!r}: host key of {hostname} CHANGED (got {exc.key.get_name()} "
                f"{exc.key.get_fingerprint().hex()}): possible man-in-the-middle; if the device was "
                f"re-imaged, remove the old entry (`ssh-keygen -R '{hostname}'`) and re-add it"
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                where = self.known_hosts or "~/.ssh/known_hosts"
                raise RailabError(
                    f"node {node!r}: host key of {hostname} is unknown ({where}); verify and add it "
                    f"(`ssh-keyscan -p {t.port} {t.host} >> {where}`), or pass a known_hosts file"
                ) from None
            raise RailabError(f"node {node!r}: SSH to {t.user}@{hostname} failed: {exc}") from None
        except (TimeoutError, OSError) as exc:
            client.close()
            errs = getattr(exc, "errors", None) or {}  # paramiko NoValidConnectionsError
            if isinstance(exc, ConnectionRefusedError) or any(
                    getattr(e, "errno", None) == errno.ECONNREFUSED for e in errs.values()):
                raise RailabError(f"node {node!r}: cannot reach {hostname}: TCP connection "
                                  f"refused (nothing listens on port {t.port})") from None
            raise RailabError(f"node {node!r}: cannot reach {hostname}: {exc}") from None
        self._clients[node] = client
        return client

    def command_line(self, node: str, argv: list[str]) -> str:
        """The remote command string for ``argv`` (shell-quoted; ``sudo -n`` if the node asks)."""
        if not argv:
            raise ValueError("argv must not be empty")
        words = [str(a) for a in argv]
        if words[0] == "vtysh":
            words = [*self.target(node).vtysh, *words[1:]]
        if self.target(node).sudo:
            words = ["sudo", "-n", "--", *words]
        return shlex.join(words)

    def run(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        """Run ``argv`` on ``node``; returns rc/stdout/stderr (UTF-8, errors replaced).

        Raises TimeoutError when the command runs longer than ``timeout`` seconds (the process
        gets SIGKILL through an RFC 4254 "signal" request where the server honours it, see
        ``_send_signal``; then the channel is closed), RailabError when the node cannot be
        reached or its host key is unknown or changed.
        """
        cmd = self.command_line(node, argv)
        client = self._connect(node)
        transport = client.get_transport()
        chan = transport.open_session(timeout=timeout)
        try:
            chan.settimeout(0.2)
            chan.exec_command(cmd)
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    if chan.eof_received or chan.closed:
                        break
                if time.monotonic() > deadline:
                    _send_signal(chan, "KILL")
                    raise TimeoutError(f"{node}: {cmd!r} did not finish within {timeout:g} s")
                if not got:
                    chan.status_event.wait(0.02)
            rc = chan.recv_exit_status()
        finally:
            chan.close()
        return ExecResult(rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def close(self) -> None:
        """Close every cached connection."""
        for c in self._clients.values():
            c.close()
        self._clients.clear()

    def __enter__(self) -> SshExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SshExecutor", "SshTarget", "load_inventory", "parse_inventory"]
