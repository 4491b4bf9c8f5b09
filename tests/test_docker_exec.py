"""DockerExecutor against a real Docker engine (Debian's docker.io).

The module fixture uses a running engine (``DOCKER_HOST`` or /var/run/docker.sock) when there is
one, else starts its own ``dockerd`` with a private data-root, exec-root and socket under a temp
dir (vfs storage, no bridge, no iptables, no ip_forward change: it touches nothing on the host)
and stops it afterwards. The node image is built locally from a root filesystem made of
busybox-static (``docker import``), so no registry is needed. Skipped, with the reason, only
when dockerd is not installed or cannot start here.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from railab.errors import RailabError  # noqa: E402
from railab.testbed.docker_exec import DockerExecutor, container_name  # noqa: E402

pytestmark = pytest.mark.docker

BUSYBOX = shutil.which("busybox")
APPLETS = ["sh", "echo", "cat", "sleep", "ps", "head", "yes", "printf", "true", "false", "ls"]


def _busybox_static() -> str | None:
    """Path of a statically linked busybox (the image has no libc), or None."""
    for cand in ("/bin/busybox", "/usr/bin/busybox", BUSYBOX):
        if cand and os.path.exists(cand):
            with open(cand, "rb") as fh:
                head = fh.read(4096)
            if b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head:
                return cand
    return None


def _start_dockerd(tmp: Path) -> tuple[subprocess.Popen, str]:
    sock = tmp / "docker.sock"
    log = open(tmp / "dockerd.log", "wb")
    proc = subprocess.Popen(
        [
            "dockerd",
            "--data-root", str(tmp / "root"),
            "--exec-root", str(tmp / "exec"),
            "--pidfile", str(tmp / "docker.pid"),
            "--host", f"unix://{sock}",
            "--storage-driver", "vfs",
            "--bridge", "none",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, f"unix://{sock}"


def _stop_dockerd(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@pytest.fixture(scope="module")
def engine():
    """A docker.DockerClient on a live engine; yields and cleans up what it started."""
    if os.environ.get("DOCKER_HOST") or os.path.exists("/var/run/docker.sock"):
        try:
            client = docker.from_env(timeout=10)
            client.ping()
            client.railab_url = None  # the environment's engine
            yield client
            client.close()
            return
        except docker.errors.DockerException:
            pass
    if shutil.which("dockerd") is None:
        pytest.skip("dockerd is not installed (Debian: apt-get install docker.io, or scripts/bootstrap.sh --test)")
    tmp = Path(tempfile.mkdtemp(prefix="rl-dk-"))
    proc, url = _start_dockerd(tmp)
    client = None
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                log = (tmp / "dockerd.log").read_text(errors="replace")[-800:]
                pytest.skip(f"dockerd cannot start in this environment (rc={proc.returncode}): {log}")
            try:
                client = docker.DockerClient(base_url=url, timeout=10)
                client.ping()
                client.railab_url = url
                break
            except docker.errors.DockerException:
                if time.monotonic() > deadline:
                    pytest.skip("dockerd did not answer within 30 s")
                time.sleep(0.2)
        yield client
    finally:
        if client is not None:
            client.close()
        _stop_dockerd(proc)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def node(engine):
    """A running container named like a clab node (``clab-<lab>-leaf1``) from a busybox image."""
    bb = _busybox_static()
    if bb is None:
        pytest.skip("no static busybox for the test image (Debian: apt-get install busybox-static)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(bb, arcname="bin/busybox")
        for name in APPLETS:
            ti = tarfile.TarInfo(f"bin/{name}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tf.addfile(ti)
        for d in ("proc", "sys", "dev", "etc", "tmp"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
    tag = f"railab-test/busybox:{os.getpid()}"
    engine.api.import_image_from_data(buf.getvalue(), repository=tag.split(":")[0], tag=tag.split(":")[1])
    lab = f"dkt{os.getpid()}"
    ctr = engine.containers.run(tag, ["sleep", "3600"], name=container_name(lab, "leaf1"),
                                detach=True, network_mode="none", environment={"HOME": "/root"})
    try:
        yield lab, ctr
    finally:
        ctr.remove(force=True)
        engine.images.remove(tag, force=True)


@pytest.fixture
def ex(engine, node):
    return DockerExecutor(node[0], client=engine)


def test_container_name_is_clab_scheme():
    assert container_name("mini", "g1-leaf3") == "clab-mini-g1-leaf3"


def test_run_stdout_rc(ex):
    res = ex.run("leaf1", ["echo", "hello", "rail"])
    assert (res.rc, res.stdout, res.stderr) == (0, "hello rail\n", "")
    assert res.ok


def test_output_sent_with_the_upgrade_headers_is_not_lost(ex, monkeypatch):
    """The engine's frames arrive in the same read as its ``101 UPGRADED`` headers.

    Delaying the client's header read until the command has run puts both in one ``recv`` (what
    a loaded host does at random): read from the raw socket, the output was gone, rc 0 with
    empty stdout (docker/docker-py#3332; CI saw it on ``echo``).
    """
    import http.client

    begin = http.client.HTTPResponse.begin

    def late_begin(self):
        time.sleep(0.4)
        return begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    for _ in range(3):
        res = ex.run("leaf1", ["sh", "-c", "echo out; echo err >&2"])
        assert (res.rc, res.stdout, res.stderr) == (0, "out\n", "err\n")


def test_stdout_stderr_and_rc_are_separate(ex):
    res = ex.run("leaf1", ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert res.rc == 3
    assert res.stdout == "out\n"
    assert res.stderr == "err\n"
    assert not res.ok


def test_argv_is_not_shell_interpreted(ex):
    res = ex.run("leaf1", ["echo", "$HOME; false"])
    assert res.stdout == "$HOME; false\n" and res.rc == 0


def test_large_output_is_reassembled(ex):
    res = ex.run("leaf1", ["sh", "-c", "yes 0123456789abcdef | head -c 300000"])
    assert res.rc == 0
    assert len(res.stdout) == 300000
    assert res.stdout.startswith("0123456789abcdef\n")


def test_missing_program_gives_127(ex):
    res = ex.run("leaf1", ["vtysh", "-c", "show version"])
    assert res.rc == 127
    assert "vtysh" in res.stderr


def test_timeout_raises_and_kills(ex):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="within 1 s"):
        ex.run("leaf1", ["sleep", "37"], timeout=1.0)
    assert time.monotonic() - t0 < 5
    ps = ex.run("leaf1", ["ps"])
    assert ps.rc == 0 and "sleep 3600" in ps.stdout
    assert "sleep 37" not in ps.stdout


def test_unknown_node_is_one_clear_error(ex, node):
    with pytest.raises(RailabError, match=rf"clab-{node[0]}-spine9 does not exist"):
        ex.run("spine9", ["true"])


def test_stopped_container_is_reported(engine, node):
    lab = node[0]
    ctr = engine.containers.create(node[1].image.id, ["sleep", "3600"],
                                   name=container_name(lab, "srv1"), network_mode="none")
    try:
        with pytest.raises(RailabError, match="srv1"):
            DockerExecutor(lab, client=engine).run("srv1", ["true"])
    finally:
        ctr.remove(force=True)


def test_preflight_names_images_missing_locally(engine, node):
    """ContainerlabRuntime's prerequisite check against the real engine: the imported test image
    is found, a railab image that was never built is named with how to build it."""
    from railab.testbed.runtime.containerlab import missing_images, preflight

    present = node[1].image.tags[0]
    assert missing_images([present, "railab/gpu-server:never-built"], engine) == ["railab/gpu-server:never-built"]
    with pytest.raises(RailabError) as err:
        preflight([present, "railab/gpu-server:never-built"], binary="sh", docker_url=engine.railab_url)
    msg = str(err.value)
    assert "image(s) not present locally: railab/gpu-server:never-built" in msg
    assert "docker build -t railab/gpu-server:never-built images/gpu-server" in msg
    assert "containerlab binary" not in msg and "--runtime netns" in msg
    assert preflight([present], binary="sh", docker_url=engine.railab_url) is not None
