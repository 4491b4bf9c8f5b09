"""The containerlab runtime: deploy the same lab directory as real containers with containerlab.

railab drives containerlab's CLI and never reimplements it:

* ``up``: ``containerlab deploy -t <lab>.clab.yml [--reconfigure]`` and a record in
  ``/run/railab/<lab>/state.json`` (testbed.state) with ``runtime: containerlab``. Waiting for
  convergence is the caller's (railab.checks.deploy.bring_up, through a DockerExecutor).
* ``down``: ``containerlab destroy -t <lab>.clab.yml --cleanup`` (``--name <lab>`` when the file
  is gone), then the record is removed.
* ``status`` / ``inspect``: ``containerlab inspect --format json``, whose shape changed: since
  containerlab 0.68 (PR srl-labs/containerlab#2552) it is keyed by lab name
  (``{"<lab>": [ {...}, ... ]}``); before, a flat ``{"containers": [ ... ]}`` (and, in the first
  releases, a bare list). ``parse_inspect`` reads all three.

Containerlab names every node's container and network namespace ``clab-<lab>-<node>`` (the netns
runtime uses the same names, so the traffic engine works on both). Command lines are built by
pure functions (``deploy_argv`` ...) so they are unit-tested without the binary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.clabfile import load_clab
from railab.testbed.runtime.base import Runtime
from railab.testbed.signals import signals_ignored, signals_raise
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name, netns_prefix

BINARY = "containerlab"
#: Suggestion appended to every "missing piece" error.
USE_NETNS = "or run the lab without Docker: `railab up LAB --runtime netns`"
DEPLOY_TIMEOUT_S = 900.0


# ---- command lines (pure) --------------------------------------------------------------------
def deploy_argv(clab_file: str | Path, *, reconfigure: bool = False, binary: str = BINARY) -> list[str]:
    """``containerlab deploy -t FILE [--reconfigure]`` (``--reconfigure`` re-creates a running
    lab's nodes from the file instead of failing on existing containers)."""
    argv = [binary, "deploy", "-t", str(clab_file)]
    if reconfigure:
        argv.append("--reconfigure")
    return argv


def destroy_argv(*, clab_file: str | Path | None = None, lab: str | None = None, binary: str = BINARY) -> list[str]:
    """``containerlab destroy -t FILE --cleanup`` or, without the file, ``--name LAB``.

    ``--cleanup`` also removes containerlab's lab directory (``clab-<lab>/``). ValueError when
    neither is given.
    """
    return [binary, "destroy", *_target(clab_file, lab), "--cleanup"]


def inspect_argv(*, clab_file: str | Path | None = None, lab: str | None = None, binary: str = BINARY) -> list[str]:
    """``containerlab inspect -t FILE --format json`` (or ``--name LAB``)."""
    return [binary, "inspect", *_target(clab_file, lab), "--format", "json"]


def _target(clab_file: str | Path | None, lab: str | None) -> list[str]:
    if clab_file is not None:
        return ["-t", str(clab_file)]
    if lab:
        return ["--name", lab]
    raise ValueError("give clab_file or lab")


# ---- inspect output (pure) -------------------------------------------------------------------
@dataclass(frozen=True)
class ClabContainer:
    """One row of ``containerlab inspect --format json``; ``node`` is the topology node name
    (container name without the ``clab-<lab>-`` prefix), "" when the prefix does not match."""

    lab: str
    name: str
    node: str
    container_id: str
    image: str
    kind: str
    state: str
    status: str
    ipv4_address: str
    ipv6_address: str
    owner: str
    lab_path: str

    @property
    def running(self) -> bool:
        return self.state == "running"


def parse_inspect(text: str) -> list[ClabContainer]:
    """Containers in ``containerlab inspect --format json`` output, sorted by (lab, name).

    Accepts the keyed form (``{"<lab>": [..]}``, containerlab >= 0.68), the flat form
    (``{"containers": [..]}``) and a bare list; ``{}`` / empty text mean no containers. Raises
    RailabError when the text is not JSON or rows lack ``name``.
    """
    text = text.strip()
    if not text:
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RailabError(f"containerlab inspect printed non-JSON output ({exc}): {text[:200]!r}") from None
    if isinstance(doc, list):
        rows: Iterable[Any] = doc
    elif isinstance(doc, dict):
        rows = [r for v in doc.values() if isinstance(v, list) for r in v]
    else:
        raise RailabError(f"containerlab inspect JSON is neither an object nor a list: {text[:200]!r}")
    out = []
    for r in rows:
        if not isinstance(r, dict) or not r.get("name"):
            raise RailabError(f"containerlab inspect row without a container name: {r!r}")
        lab = str(r.get("lab_name", ""))
        name = str(r["name"]).lstrip("/")
        prefix = netns_prefix(lab)
        out.append(ClabContainer(
            lab=lab,
            name=name,
            node=name[len(prefix):] if lab and name.startswith(prefix) else str(r.get("nodeName", "")),
            container_id=str(r.get("container_id", "")),
            image=str(r.get("image", "")),
            kind=str(r.get("kind", "")),
            state=str(r.get("state", "")),
            status=str(r.get("status", "")),
            ipv4_address=str(r.get("ipv4_address", "")),
            ipv6_address=str(r.get("ipv6_address", "")),
            owner=str(r.get("owner", "")),
            lab_path=str(r.get("absLabPath") or r.get("labPath") or ""),
        ))
    return sorted(out, key=lambda c: (c.lab, c.name))


# ---- prerequisites ---------------------------------------------------------------------------
def missing_images(images: Iterable[str], client: Any) -> list[str]:
    """The images (sorted, unique) that ``client`` (docker.DockerClient) does not hold locally."""
    from docker.errors import ImageNotFound

    missing = []
    for image in sorted(set(images)):
        try:
            client.images.get(image)
        except ImageNotFound:
            missing.append(image)
    return missing


def _image_hint(images: list[str]) -> str:
    hints = []
    for img in images:
        if img.startswith("railab/gpu-server"):
            hints.append(f"docker build -t {img} images/gpu-server")
        elif img.startswith("railab/frr"):
            hints.append(f"docker build -t {img} images/frr")
        elif "sonic" in img:
            hints.append(f"docker load -i docker-sonic-vs.gz and tag it {img} (docs/containerlab.md)")
        else:
            hints.append(f"docker pull {img}")
    return "; ".join(hints)


def preflight(images: Iterable[str], *, binary: str = BINARY, docker_url: str | None = None) -> Any:
    """Check the pieces ``up`` needs: the containerlab binary, a reachable Docker engine and
    every image present locally. Returns the docker client.

    Raises ONE RailabError naming every missing piece and suggesting ``--runtime netns``.
    """
    problems = []
    if shutil.which(binary) is None:
        problems.append(f"the containerlab binary ({binary!r}) is not on PATH "
                        "(install: https://containerlab.dev/install/)")
    client = None
    try:
        from railab.testbed.docker_exec import docker_client  # optional dependency: docker

        client = docker_client(docker_url, timeout=5)
    except RailabError as exc:
        problems.append(str(exc).split("; start dockerd")[0])
    if client is not None:
        gone = missing_images(images, client)
        if gone:
            problems.append(f"image(s) not present locally: {', '.join(gone)} ({_image_hint(gone)})")
    if problems:
        raise RailabError("the containerlab runtime cannot run here: " + "; ".join(problems) + f"; {USE_NETNS}")
    return client


# ---- runtime ---------------------------------------------------------------------------------
Runner = Callable[..., subprocess.CompletedProcess]


class ContainerlabRuntime(Runtime):
    """Containerlab + Docker (see the module docstring).

    ``binary``: the containerlab executable; ``docker_url``: Docker endpoint (default from the
    environment); ``reconfigure``: pass ``--reconfigure`` to deploy (also an ``up`` keyword).
    """

    name = "containerlab"

    def __init__(self, *, binary: str = BINARY, docker_url: str | None = None, reconfigure: bool = False) -> None:
        self.binary = binary
        self.docker_url = docker_url
        self.reconfigure = reconfigure

    def executor(self, lab: str):
        """A DockerExecutor on the lab's containers (``clab-<lab>-<node>``)."""
        from railab.testbed.docker_exec import DockerExecutor  # optional dependency: docker

        return DockerExecutor(lab, base_url=self.docker_url)

    def _clab(self, argv: list[str], what: str, timeout: float = 300.0) -> str:
        """Run a containerlab command; RailabError with its last output lines on failure."""
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise RailabError(f"the containerlab binary ({self.binary!r}) is not on PATH; {USE_NETNS}") from None
        except subprocess.TimeoutExpired:
            raise RailabError(f"`{' '.join(argv)}` ({what}) did not finish within {timeout:g} s") from None
        if res.returncode != 0:
            tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-8:])
            raise RailabError(f"`{' '.join(argv)}` ({what}) failed (rc={res.returncode}):\n{tail}")
        return res.stdout

    # -- up ------------------------------------------------------------------------------------
    def up(self, labdir: Path, *, reconfigure: bool | None = None) -> st.LabState:
        """Deploy ``labdir`` (directory or ``.clab.yml``) with ``containerlab deploy``; returns
        the record (phase ``started``) without waiting for convergence.

        ``reconfigure`` (default: the constructor's) passes ``--reconfigure``. Raises
        RailabError when containerlab, Docker or an image is missing (one message naming each,
        suggesting ``--runtime netns``), when the lab is already up (unless reconfigure), or when
        deploy fails, after destroying what was deployed; KeyboardInterrupt (Ctrl-C, SIGTERM,
        SIGHUP) likewise after destroying it.
        """
        reconf = self.reconfigure if reconfigure is None else reconfigure
        clab = load_clab(labdir)
        lab = clab.name
        try:
            LabSpec.load(clab.directory)
        except FileNotFoundError as exc:
            raise RailabError(str(exc)) from None
        images = [n.image for n in clab.nodes.values() if n.image]
        preflight(images, binary=self.binary, docker_url=self.docker_url)
        prior = st.load(lab)
        if prior is not None and prior.runtime != self.name:
            raise UsageError(f"lab {lab} is already up on the {prior.runtime} runtime: railab down {lab}")
        if prior is not None and not reconf:
            raise UsageError(f"lab {lab} is already up ({prior.runtime} runtime): "
                              f"railab down {lab}, or pass --reconfigure")
        record = st.LabState(
            lab=lab,
            runtime=self.name,
            phase="deploying",
            labdir=str(clab.directory),
            clab_file=str(clab.path),
            namespaces={n: netns_name(lab, n) for n in clab.nodes},
            containers={n: netns_name(lab, n) for n in clab.nodes},
            links=[(f"{lk.a[0]}:{lk.a[1]}", f"{lk.b[0]}:{lk.b[1]}", lk.mtu) for lk in clab.links],
            docker_url=self.docker_url,
        )
        st.save(record)
        with signals_raise():
            try:
                t0 = time.monotonic()
                self._clab(deploy_argv(clab.path, reconfigure=reconf, binary=self.binary), "deploy",
                           timeout=DEPLOY_TIMEOUT_S)
                record.timings["deploy_s"] = round(time.monotonic() - t0, 3)
                record.phase = "started"
                return st.save(record)
            except BaseException:
                with signals_ignored():
                    try:
                        self.down(lab)
                    except RailabError:
                        pass
                raise

    # -- down ----------------------------------------------------------------------------------
    def down(self, lab: str) -> None:
        """``containerlab destroy --cleanup`` the lab and drop its record. Idempotent: a lab
        with no record is left alone. RailabError when containerlab is missing or fails."""
        record = st.load(lab)
        if record is None:
            return
        if record.runtime != self.name:
            raise RailabError(f"lab {lab} runs on the {record.runtime} runtime: "
                              f"railab down {lab} --runtime {record.runtime}")
        clab_file = record.clab_file
        argv = destroy_argv(clab_file=clab_file if clab_file and Path(clab_file).exists() else None,
                            lab=lab, binary=self.binary)
        if shutil.which(self.binary) is not None:
            self._clab(argv, "destroy")
        elif record.phase != "deploying":
            raise RailabError(f"lab {lab} was deployed with containerlab, which is no longer on PATH: "
                              f"reinstall it and run railab down {lab}")
        st.remove_lab_dir(lab)

    # -- status / inspect ----------------------------------------------------------------------
    def containers(self, lab: str) -> list[ClabContainer]:
        """Live containers of ``lab`` from ``containerlab inspect --format json``."""
        record = st.load(lab)
        clab_file = record.clab_file if record is not None else None
        argv = inspect_argv(clab_file=clab_file if clab_file and Path(clab_file).exists() else None,
                            lab=lab, binary=self.binary)
        return [c for c in parse_inspect(self._clab(argv, "inspect")) if c.lab in ("", lab)]

    def inspect(self, lab: str) -> dict[str, Any]:
        """The recorded state (JSON) plus ``live``: containerlab's view of each container.
        RailabError when the lab is not up or containerlab fails."""
        out = self.record(lab).to_json()
        out["live"] = [asdict(c) for c in self.containers(lab)]
        return out

    def status(self, lab: str) -> dict[str, Any]:
        """``{lab, runtime, phase, nodes: {node: {namespace, container, present, state, image,
        kind, ipv4_address, daemons}}}``; the shape of the netns runtime's status, with
        containerlab's container state per node (BGP sessions: railab.checks.converge)."""
        record = self.inspect(lab)
        live = {c["node"]: c for c in record["live"]}
        nodes = {}
        for node, ns in record["namespaces"].items():
            c = live.get(node) or {}
            nodes[node] = {
                "namespace": ns,
                "container": c.get("name", netns_name(lab, node)),
                "present": c.get("state") == "running",
                "state": c.get("state", "absent"),
                "image": c.get("image", ""),
                "kind": c.get("kind", ""),
                "ipv4_address": c.get("ipv4_address", ""),
                "daemons": {},
            }
        return {"lab": lab, "runtime": self.name, "phase": record.get("phase"), "nodes": nodes}
