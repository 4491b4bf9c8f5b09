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

Modules: this one is the runtime (the lab's record, deploy/destroy, status); ``commands``
(containerlab's command lines and ``inspect`` output, pure), ``postdeploy`` (the sonic-vs
post-deploy plan and its runner, ``--dry-run``'s lines, a partitioned lab's host file),
``prereq`` (binary, Docker engine, images; the one import of the optional ``docker`` side,
railab.testbed.docker_exec). Everything is re-exported here.
"""

import shutil
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.clabfile import ClabFile, load_clab
from railab.testbed.runtime.base import Deployer
from railab.testbed.runtime.containerlab.commands import (
    BINARY,
    DEPLOY_TIMEOUT_S,
    USE_NETNS,
    ClabContainer,
    deploy_argv,
    destroy_argv,
    inspect_argv,
    parse_inspect,
)
from railab.testbed.runtime.containerlab.postdeploy import (
    SONIC_BOOT_TIMEOUT_S,
    host_clab_file,
    plan_lines,
    post_deploy_plan,
    run_steps,
)
from railab.testbed.runtime.containerlab.prereq import docker_exec, missing_images, preflight
from railab.testbed.runtime.phases import timed
from railab.testbed.signals import signals_ignored, signals_raise
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name

#: what the single-module runtime exported (tests and callers import these from here)
__all__ = [
    "BINARY", "DEPLOY_TIMEOUT_S", "SONIC_BOOT_TIMEOUT_S", "USE_NETNS", "ClabContainer", "ContainerlabRuntime",
    "deploy_argv", "destroy_argv", "host_clab_file", "inspect_argv", "missing_images", "parse_inspect",
    "plan_lines", "post_deploy_plan", "preflight", "run_steps",
]

Runner = Callable[..., subprocess.CompletedProcess]


class ContainerlabRuntime(Deployer):
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
        return docker_exec().DockerExecutor(lab, base_url=self.docker_url)

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
        SIGHUP) likewise after destroying it. UsageError for a lab with ``lab.capacity`` (the
        queues, ECN and PFC emulation are built by the netns runtime only).
        """
        self.made = None
        reconf = self.reconfigure if reconfigure is None else reconfigure
        clab = load_clab(host_clab_file(labdir, host) if host else labdir, validate=True)
        post_deploy_plan(clab)  # e.g. a bind start.sh would break: one usage error before anything runs
        lab = clab.name
        spec_dir = clab.directory.parent if host else clab.directory
        try:
            spec = LabSpec.load(spec_dir)
        except FileNotFoundError as exc:
            raise RailabError(str(exc)) from None
        if spec.qos.capacity.enabled:
            raise UsageError(f"lab {lab} has lab.capacity (port queues, ECN, PFC: "
                             "docs/congestion.md), which only the netns runtime builds; use "
                             "--runtime netns, or remove lab.capacity from the intent")
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
        with signals_raise():
            try:
                st.save(record)
                self.made = lab  # a late interrupt (after the return below) is the caller's to undo
                with timed(record.timings, "deploy_s"):
                    self._clab(deploy_argv(clab.path, reconfigure=reconf, binary=self.binary), "deploy",
                               timeout=DEPLOY_TIMEOUT_S)
                if post_deploy_plan(clab):
                    record.phase = "post-deploy"
                    st.update(record)
                    with timed(record.timings, "post_deploy_s"):
                        self.post_deploy(clab)
                record.phase = "started"
                return st.update(record)
            except BaseException:
                with signals_ignored():
                    try:
                        self.down(lab)
                        self.made = None
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
