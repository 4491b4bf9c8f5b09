"""sonic-vs post-deploy of the containerlab runtime (a pure plan, executed through an
Executor), ``up --dry-run``'s command list, and a partitioned lab's host file."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed.clabfile import ClabFile, find_clab_file
from railab.testbed.runtime.containerlab.commands import BINARY, deploy_argv
from railab.topologies.naming import container_name
from railab.topologies.nodekinds import kind_of_clab
from railab.topologies.sonic import Step

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
