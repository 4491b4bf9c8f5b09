"""Run commands in containerlab nodes through the Docker engine (the ``docker`` SDK).

Containerlab names each node's container ``clab-<lab>-<node>`` (the same string as the node's
network namespace, see docs/architecture.md), so a node name is all a check needs.

Docker's exec API has no timeout of its own. ``DockerExecutor.run`` reads the exec stream in a
worker thread and, when ``timeout`` expires, kills the exec'd process tree (only when the engine
is local and the process is verifiably inside the node's PID namespace), closes the stream and
raises ``TimeoutError``.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
from pathlib import Path
from typing import Any

from railab.errors import MissingExtraError, RailabError
from railab.testbed.executor import ExecResult, Executor

try:  # optional: the containerlab extra (pip install 'railab[containerlab]')
    import docker
    from docker.errors import APIError, DockerException, NotFound
    from docker.utils.socket import STDERR as _STDERR
    from docker.utils.socket import consume_socket_output, demux_adaptor, frames_iter
except ImportError:  # docker_client() says what to install; nothing below runs without a client
    docker = None
    APIError = DockerException = NotFound = type("DockerMissing", (Exception,), {})
from railab.topologies.naming import container_name  # noqa: F401  (re-export)


def docker_client(base_url: str | None = None, *, timeout: float = 10.0) -> docker.DockerClient:
    """A Docker client for ``base_url`` (e.g. ``unix:///var/run/docker.sock``) or the environment
    (``DOCKER_HOST``); raises RailabError naming the endpoint when the engine does not answer,
    MissingExtraError when the ``docker`` package is not installed.
    """
    if docker is None:
        raise MissingExtraError("docker", "containerlab", "the containerlab runtime")
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, timeout=int(timeout))
        else:
            client = docker.from_env(timeout=int(timeout))
        client.ping()
    except DockerException as exc:
        where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise RailabError(
            f"Docker engine not reachable at {where} ({exc.__class__.__name__}: {exc}); start "
            "dockerd (Debian: apt-get install docker.io) or use `--runtime netns`"
        ) from None
    return client


def _buffered_stream(sock: Any) -> Any | None:
    """The buffered reader that parsed the exec-start response's headers, or None.

    ``exec start`` is an HTTP upgrade: the engine answers ``101 UPGRADED`` and writes the output
    frames on the same connection. ``http.client`` reads those headers through a BufferedReader
    that fills up to 8 KiB per ``recv``, so when the headers and the first frames arrive
    together (a loaded host, a short command) the frames sit in that buffer and reading the raw
    socket, as docker-py's ``frames_iter`` does, loses them: rc 0 with empty output
    (docker/docker-py#3332; fix proposed in docker/docker-py#3438). docker-py keeps the response
    on the socket it returns (``sock._response``); its reader is ``response.raw._fp.fp``.
    """
    try:
        reader = sock._response.raw._fp.fp
    except AttributeError:
        return None
    return reader if hasattr(reader, "read") and hasattr(reader, "peek") else None


def _read_frames(reader: Any) -> tuple[bytes, bytes]:
    """(stdout, stderr) bytes of a non-TTY exec stream read to its end from ``reader``.

    Frames as the Docker Engine API's "stream format" gives them: an 8-byte header (stream
    type: 1 stdout, 2 stderr; three zero bytes; payload length, big-endian uint32), then the
    payload. A stream cut short (the connection closed mid-frame) keeps what arrived.
    """
    out, err = bytearray(), bytearray()
    while True:
        head = reader.read(8)
        if len(head) < 8:
            break
        kind, size = struct.unpack(">BxxxL", head)
        data = reader.read(size)
        (err if kind == _STDERR else out).extend(data)
        if len(data) < size:
            break
    return bytes(out), bytes(err)


def _pidns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children first), read from /proc."""
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                stack.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
    return list(reversed(out))


class DockerExecutor(Executor):
    """Run argv in the containers of one containerlab lab (``docker exec``, no shell).

    ``lab``: the clab lab name; node ``n`` runs in container ``clab-<lab>-<n>``.
    ``client``: an existing ``docker.DockerClient``; else one is made from ``base_url`` or the
    environment (RailabError when the engine does not answer).
    ``user``: run as this user inside the container (default: the image's user).
    """

    def __init__(
        self,
        lab: str,
        *,
        client: docker.DockerClient | None = None,
        base_url: str | None = None,
        user: str = "",
    ) -> None:
        self.lab = lab
        self.client = client if client is not None else docker_client(base_url)
        self.user = user
        self._containers: dict[str, Any] = {}

    def container(self, node: str) -> Any:
        """The node's container (cached); RailabError when missing or not running."""
        c = self._containers.get(node)
        if c is None:
            name = container_name(self.lab, node)
            try:
                c = self.client.containers.get(name)
            except NotFound:
                raise RailabError(
                    f"node {node!r}: container {name} does not exist; is lab {self.lab!r} "
                    "deployed (`railab up LAB --runtime containerlab`)?"
                ) from None
            self._containers[node] = c
        return c

    def run(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        """Run ``argv`` (list of str, no shell) in ``node``'s container.

        Returns rc/stdout/stderr (UTF-8, undecodable bytes replaced); a program missing from the
        image gives rc 127 (as a shell would). Raises TimeoutError after ``timeout`` seconds (the
        process tree is killed when the engine is local), RailabError when the container is
        missing or stopped.
        """
        if not argv:
            raise ValueError("argv must not be empty")
        c = self.container(node)
        api = self.client.api
        try:
            exec_id = api.exec_create(c.id, [str(a) for a in argv], stdout=True, stderr=True,
                                      user=self.user)["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except NotFound:
            self._containers.pop(node, None)
            raise RailabError(f"node {node!r}: container {c.name} is gone") from None
        except APIError as exc:
            raise RailabError(f"node {node!r}: docker exec {argv[0]!r} failed: {exc.explanation}") from None
        result: dict[str, Any] = {}

        reader_of = _buffered_stream(sock)

        def _read() -> None:
            try:
                if reader_of is not None:
                    result["out"] = _read_frames(reader_of)
                    return
                frames = (demux_adaptor(*f) for f in frames_iter(sock, tty=False))
                result["out"] = consume_socket_output(frames, demux=True)
            except Exception as exc:  # noqa: BLE001 - reported below, or ignored after a kill
                result["error"] = exc

        reader = threading.Thread(target=_read, name=f"docker-exec-{node}", daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self._kill(c, exec_id)
            self._close(sock)
            reader.join(2.0)
            raise TimeoutError(f"{node}: {' '.join(argv)!r} did not finish within {timeout:g} s")
        self._close(sock)
        if "error" in result:
            raise RailabError(f"node {node!r}: reading docker exec output failed: {result['error']}")
        info = api.exec_inspect(exec_id)
        stdout, stderr = result.get("out") or (None, None)
        rc = info.get("ExitCode")
        if rc is None:
            rc = -1
        res = ExecResult(int(rc), (stdout or b"").decode(errors="replace"),
                         (stderr or b"").decode(errors="replace"))
        if res.rc in (126, 127) and "executable file not found" in res.stdout + res.stderr:
            # runc reports a missing program on the exec stream; give it the shell's rc and stderr
            return ExecResult(127, "", f"{argv[0]}: not found in {c.name}: {res.stdout + res.stderr}")
        return res

    def _kill(self, container: Any, exec_id: str) -> None:
        """SIGKILL the exec'd process tree if it is on this host and in the container's PID ns."""
        try:
            pid = int(self.client.api.exec_inspect(exec_id).get("Pid") or 0)
            container.reload()
            init = int(container.attrs["State"]["Pid"] or 0)
        except (APIError, KeyError, ValueError):
            return
        if pid <= 0 or init <= 0 or _pidns(pid) is None or _pidns(pid) != _pidns(init):
            return  # remote engine, or the process already exited: nothing safe to kill
        for p in _descendants(pid):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @staticmethod
    def _close(sock: Any) -> None:
        raw = getattr(sock, "_sock", sock)
        for obj in (raw, sock):
            try:
                if hasattr(obj, "shutdown"):
                    obj.shutdown(2)
            except OSError:
                pass
            try:
                obj.close()
            except OSError:
                pass

    def close(self) -> None:
        """Release the Docker client's connections."""
        self.client.close()

    def __enter__(self) -> DockerExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
