"""The containerlab runtime: deploy the same lab directory as real containers with containerlab.

railab drives containerlab's CLI and never reimplements it:

* ``up``: ``containerlab deploy -t <lab>.clab.yml [--reconfigure]`` and a record in
  ``/run/railab/<lab>/state.json`` (testbed.state) with ``runtime: containerlab``. Waiting for
  convergence is the caller's (railab.checks.deploy.bring_up, through a DockerExecutor).
* sonic-vs nodes: containerlab's own post-deploy only starts ``supervisord`` and bgpd, so ``up``
  then runs railab's post-deploy steps in every sonic-vs node (``docker exec``, all nodes in
  parallel; :func:`railab.topologies.sonic.post_deploy_steps`): wait for redis and start.sh's
  CONFIG_DB load, load the bound config_db.json into CONFIG_DB (202305 generation), wait for
  ``PORT_TABLE:PortInitDone``, start zebra/staticd/bgpd, ``vtysh -f`` the bound frr.conf.
  :meth:`ContainerlabRuntime.plan` (``railab up --runtime containerlab --dry-run``) prints the
  whole sequence without running it;
* ``down``: ``containerlab destroy -t <lab>.clab.yml --cleanup`` (``--name <lab>`` when the file
  is gone), then the record is removed; without a record (a crash, ``/run`` wiped) containerlab
  itself is asked (``inspect --name <lab>``) and the lab destroyed by name if it has containers.
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
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.clabfile import ClabFile, find_clab_file, load_clab
from railab.testbed.runtime.base import Runtime
from railab.testbed.signals import signals_ignored, signals_raise
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import container_name, netns_name, netns_prefix
from railab.topologies.nodekinds import kind_of_clab
from railab.topologies.sonic import Step

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


# ---- sonic-vs post-deploy (pure plan, executed through an Executor) ---------------------------
#: seconds each sonic-vs boot wait may take (redis, CONFIG_DB, PortInitDone).
SONIC_BOOT_TIMEOUT_S = 300.0


def post_deploy_plan(clab: ClabFile, *, boot_timeout_s: float = SONIC_BOOT_TIMEOUT_S) -> dict[str, list[Step]]:
    """``{node: [Step, ...]}`` for every node of ``clab`` (file order) whose registered node kind
    has a ``post_deploy`` hook (sonic-vs: :func:`railab.topologies.sonic.post_deploy_for_binds`),
    for the paths the node binds its files on.

    Raises UsageError naming the node when the hook refuses its binds (sonic-vs: a bind onto a
    path docker-sonic-vs's start.sh moves onto, e.g. ``/etc/sonic/config_db.json``: start.sh's
    ``mv`` fails with EBUSY and it stops before redis).
    """
    plan: dict[str, list[Step]] = {}
    for node in clab.nodes.values():
        binds = {target: src.name for target, src in node.binds.items()}
        kind = kind_of_clab(node.kind, binds)
        if kind is None or kind.post_deploy is None:
            continue
        try:
            plan[node.name] = kind.post_deploy(binds, boot_timeout_s=boot_timeout_s)
        except ValueError as exc:
            raise UsageError(f"{clab.path.name}: {kind.name} node {node.name} {exc}") from None
    return plan


def run_steps(executor: Any, node: str, steps: list[Step], *,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep,
              stop: threading.Event | None = None) -> list[dict[str, Any]]:
    """Run ``steps`` in ``node`` through ``executor`` (``run(node, argv, timeout=)``), in order;
    a step with ``expect`` is polled until its stripped stdout equals it. Returns one record
    per step ``{step, command, seconds, polls}``.

    Raises RailabError naming the node, the step, the command and its last output when a step
    fails (non-zero exit with ``check``) or a wait times out; RailabError("stopped") as soon as
    ``stop`` is set (Ctrl-C in the caller: no poll outlives ``up``'s rollback).
    """
    done: list[dict[str, Any]] = []
    for step in steps:
        t0, polls, last = clock(), 0, None
        while True:
            if stop is not None and stop.is_set():
                raise RailabError(f"sonic-vs node {node}: stopped at step '{step.name}'")
            polls += 1
            try:
                last = executor.run(node, list(step.argv), timeout=max(5.0, min(step.timeout_s, 60.0)))
            except TimeoutError as exc:
                last = None
                err = str(exc)
            else:
                err = (last.stderr or last.stdout).strip()[-300:]
            if step.expect is None:
                if last is not None and (last.rc == 0 or not step.check):
                    break
                raise RailabError(f"sonic-vs node {node}: step '{step.name}' (`{step.text()}`) failed"
                                  f"{f' (rc={last.rc})' if last is not None else ''}: {err}")
            if last is not None and last.rc == 0 and last.stdout.strip() == step.expect:
                break
            if clock() - t0 > step.timeout_s:
                seen = last.stdout.strip()[-200:] if last is not None else err
                raise RailabError(f"sonic-vs node {node}: '{step.name}' not reached within "
                                  f"{step.timeout_s:g} s (`{step.text()}` printed {seen!r}, wanted "
                                  f"{step.expect!r}); docker logs {node} shows SONiC's start.sh")
            sleep(step.interval_s)
        done.append({"step": step.name, "command": step.text(), "seconds": round(clock() - t0, 3),
                     "polls": polls})
    return done


def plan_lines(clab: ClabFile, *, reconfigure: bool = False, binary: str = BINARY,
               boot_timeout_s: float = SONIC_BOOT_TIMEOUT_S) -> list[str]:
    """The commands ``up`` runs for ``clab``, as shell lines: ``containerlab deploy ...``, then
    per sonic-vs node its post-deploy steps as ``docker exec <container> ...`` (a waited step is
    marked ``# until ... prints X``). Raises what :func:`sonic_plan` raises."""
    import shlex

    lines = [shlex.join(deploy_argv(clab.path, reconfigure=reconfigure, binary=binary))]
    for node, steps in post_deploy_plan(clab, boot_timeout_s=boot_timeout_s).items():
        ctr = container_name(clab.name, node)
        for step in steps:
            line = f"docker exec {ctr} {step.text()}"
            if step.expect is not None:
                line += f"  # {step.name}: until it prints {step.expect} (<= {step.timeout_s:g} s)"
            else:
                line += f"  # {step.name}"
            lines.append(line)
    return lines


def host_clab_file(labdir: str | Path, host: str) -> Path:
    """``DIR/<host>/<lab>.clab.yml``: one host's part of a lab partitioned with ``railab
    generate --hosts`` (railab.topologies.partition). UsageError naming the hosts the
    directory has when ``host`` is not one of them."""
    top = find_clab_file(labdir)
    path = top.parent / host / top.name
    if not path.is_file():
        have = sorted(p.parent.name for p in top.parent.glob(f"*/{top.name}"))
        raise UsageError(f"{top.parent} has no part for host {host!r} ({path} missing); "
                         + (f"its hosts: {', '.join(have)}" if have else
                            "generate it with railab generate INTENT --hosts N"))
    return path


# ---- runtime ---------------------------------------------------------------------------------
Runner = Callable[..., subprocess.CompletedProcess]


class ContainerlabRuntime(Runtime):
    """Containerlab + Docker (see the module docstring).

    ``binary``: the containerlab executable; ``docker_url``: Docker endpoint (default from the
    environment); ``reconfigure``: pass ``--reconfigure`` to deploy (also an ``up`` keyword).
    """

    name = "containerlab"

    def __init__(self, *, binary: str = BINARY, docker_url: str | None = None, reconfigure: bool = False,
                 boot_timeout_s: float = SONIC_BOOT_TIMEOUT_S) -> None:
        self.binary = binary
        self.docker_url = docker_url
        self.reconfigure = reconfigure
        self.boot_timeout_s = boot_timeout_s

    def plan(self, labdir: Path, *, reconfigure: bool | None = None, host: str | None = None) -> list[str]:
        """The commands ``up`` would run for ``labdir`` (dry run: nothing is executed, no
        binary or Docker needed): :func:`plan_lines`; ``host``: that host's part
        (:func:`host_clab_file`). Raises UsageError for a topology containerlab's schema
        rejects or a sonic-vs bind start.sh would break."""
        reconf = self.reconfigure if reconfigure is None else reconfigure
        clab = load_clab(host_clab_file(labdir, host) if host else labdir, validate=True)
        return plan_lines(clab, reconfigure=reconf, binary=self.binary, boot_timeout_s=self.boot_timeout_s)

    def post_deploy(self, clab: ClabFile, executor: Any = None) -> dict[str, list[dict[str, Any]]]:
        """Run the post-deploy steps (:func:`post_deploy_plan`) in every node that has them
        (sonic-vs), all nodes in parallel; returns ``{node: step records}``. ``executor``: default a
        DockerExecutor on the lab. Raises RailabError for the first node that fails (the
        others are finished first)."""
        plan = post_deploy_plan(clab, boot_timeout_s=self.boot_timeout_s)
        if not plan:
            return {}
        from concurrent.futures import ThreadPoolExecutor

        ex = executor if executor is not None else self.executor(clab.name)
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=min(8, len(plan)))
        try:
            futs = {n: pool.submit(run_steps, ex, n, steps, stop=stop) for n, steps in plan.items()}
            out, errors = {}, []
            for n, f in futs.items():
                try:
                    out[n] = f.result()
                except RailabError as exc:
                    errors.append(str(exc))
        finally:  # Ctrl-C: the workers stop at their next poll instead of running out their waits
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
        if errors:
            more = f" (and {len(errors) - 1} more node(s))" if len(errors) > 1 else ""
            raise RailabError(errors[0] + more)
        return out

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
    def up(self, labdir: Path, *, reconfigure: bool | None = None, host: str | None = None) -> st.LabState:
        """Deploy ``labdir`` (directory or ``.clab.yml``) with ``containerlab deploy``; returns
        the record (phase ``started``) without waiting for convergence.

        ``host``: deploy only that host's part of a partitioned lab (``DIR/<host>/<lab>.clab.yml``,
        :func:`host_clab_file`; its cut links are containerlab ``vxlan`` links to the other
        hosts, which deploy their parts themselves); the record's ``labdir`` stays ``DIR``.

        ``reconfigure`` (default: the constructor's) passes ``--reconfigure``. Raises
        RailabError when containerlab, Docker or an image is missing (one message naming each,
        suggesting ``--runtime netns``), when the lab is already up (unless reconfigure), or when
        deploy fails, after destroying what was deployed; KeyboardInterrupt (Ctrl-C, SIGTERM,
        SIGHUP) likewise after destroying it.
        """
        reconf = self.reconfigure if reconfigure is None else reconfigure
        clab = load_clab(host_clab_file(labdir, host) if host else labdir, validate=True)
        post_deploy_plan(clab)  # e.g. a bind start.sh would break: one usage error before anything runs
        lab = clab.name
        spec_dir = clab.directory.parent if host else clab.directory
        try:
            LabSpec.load(spec_dir)
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
            labdir=str(spec_dir),
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
                if post_deploy_plan(clab):
                    record.phase = "post-deploy"
                    st.save(record)
                    t1 = time.monotonic()
                    self.post_deploy(clab)
                    record.timings["post_deploy_s"] = round(time.monotonic() - t1, 3)
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
        """``containerlab destroy --cleanup`` the lab and drop its record. Idempotent. Without a
        record, :meth:`destroy_by_name` (containerlab finds the lab by name; nothing happens when
        containerlab is not installed or knows no such lab). RailabError when containerlab
        fails."""
        record = st.load(lab)
        if record is None:
            self.destroy_by_name(lab)
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

    def destroy_by_name(self, lab: str) -> bool:
        """Destroy a lab containerlab knows by name although railab has no record of it
        (``containerlab inspect --name LAB`` lists containers -> ``containerlab destroy --name LAB
        --cleanup``). Returns True when something was destroyed; False when containerlab is not
        on PATH or has no container of ``lab``. RailabError when containerlab fails."""
        if shutil.which(self.binary) is None:
            return False
        try:
            rows = parse_inspect(self._clab(inspect_argv(lab=lab, binary=self.binary), "inspect"))
        except RailabError:
            return False  # containerlab says "no containers found" with a non-zero exit on some releases
        if not [c for c in rows if c.lab in ("", lab)]:
            return False
        self._clab(destroy_argv(lab=lab, binary=self.binary), "destroy")
        st.remove_lab_dir(lab)
        return True

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
