"""The ``pfc`` check family (issue 45): lossless queues held in PAUSE with no congestion behind
them (a PFC storm: a NIC or port that keeps sending PAUSE, IEEE 802.1Qbb) and the PFC
watchdog's actions (SONiC ``pfcwd``: a queue it declared stormed).

Labs without ``lab.capacity`` get no row. On a lab with it, every port's lossless ``tbf`` is
read from the kernel (``tc -j qdisc show`` in each namespace, concurrently); a port whose queue
runs at the PFC emulation's paused rate (:data:`railab.testbed.pfc.PAUSED_RATE_BPS`) is held by
a PAUSE. While a switch agent runs (a traffic run) its record (``pfc.json``) says which ports it
paused for congestion (not a failure: PFC doing its job) and which ones its watchdog has in the
storm action; any other paused port, and any port the watchdog acts on, fails with cause
``pfc-storm`` naming the paused port and its link (whose far end sends the PAUSE). A port
whose PFC is enabled on another priority than the lossless one (the emulated ports' PFC
configuration, :data:`railab.testbed.pfc.PFC_PRIORITY_FILE`; on SONiC ``PORT_QOS_MAP``) fails
with cause ``pfc-priority``. Clean: one ``pass`` row for the lab. A storm whose link was reset
since it began (its NIC or port taken down and up) is ended first
(:func:`railab.testbed.pfc.settle_storms`): the check RESUMEs its queue, as the reset did.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

from railab.checks.base import (
    Cause,
    CheckResult,
    Observer,
    failed,
    passed,
    register_check,
)
from railab.testbed import capacity as cap
from railab.testbed import state as st
from railab.testbed.capacity import PfcSession
from railab.testbed.namespaces import exec_argv
from railab.testbed.pfc import read_pfc_priorities, settle_storms
from railab.topologies.naming import link_id

CHECK = "pfc"


def _paused_ports(ns: str, lossless: str, paused_bytes_s: int) -> set[str] | None:
    """Interfaces of namespace ``ns`` whose lossless class's tbf (parent ``lossless``, e.g.
    ``1:13``) runs at ``paused_bytes_s`` bytes/s or less; None when tc cannot be read."""
    try:
        res = subprocess.run(exec_argv(ns, ["tc", "-j", "qdisc", "show"]), capture_output=True,
                             text=True, timeout=20)
        doc = json.loads(res.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    out = set()
    for q in doc:
        if q.get("kind") == "tbf" and q.get("parent") == lossless:
            rate = (q.get("options") or {}).get("rate")
            if isinstance(rate, int) and rate <= paused_bytes_s:
                out.add(q.get("dev"))
    return out


def _agent(lab: str) -> dict:
    """The running switch agent's record (``pfc.json``), ``{}`` when none runs."""

    doc = PfcSession(lab=lab, enabled=True).state()
    pid = doc.get("pid")
    if not doc or doc.get("final") or not pid or not os.path.exists(f"/proc/{pid}"):
        return {}
    return doc


def check_pfc(obs: Observer) -> list[CheckResult]:
    """One failing row per lossless queue held in PAUSE without congestion or in the PFC
    watchdog's storm action (cause ``pfc-storm``), else one passing row; nothing for a lab
    without ``lab.capacity``."""

    spec = obs.spec
    if not spec.qos.capacity.enabled:
        return []
    # a storm whose link was reset since it began (a NIC or port taken down and up) is over:
    # its queue is RESUMEd before it is read (railab.testbed.pfc.settle_storms)
    settle_storms(st.lab_dir(spec.name))
    lossless = cap._tc_id(cap.lossless_class(spec.qos))
    nodes = obs.namespaces()
    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = dict(zip([n for n, _ in nodes],
                       pool.map(lambda item: _paused_ports(item[1], lossless, cap.PAUSED_RATE_BPS // 8),
                                nodes), strict=True))
    agent = _agent(spec.name)
    # paused by the agent for congestion: PFC at work (a stormed port stays a storm even when
    # congestion behind it would pause it too)
    congested = ({k for k, v in agent.get("ports", {}).items() if v.get("paused")}
                 - set(agent.get("storms", [])))
    stormed = {k: v for k, v in agent.get("watchdog_ports", {}).items() if v.get("state") == "stormed"}
    held = {f"{node}:{dev}" for node, devs in got.items() for dev in (devs or ())}
    bad = sorted((held - congested) | set(stormed))
    faults = {f"{f.peer_node}:{f.peer_port}": f for f in
              (st.load(spec.name).faults if st.load(spec.name) else []) if f.kind == "pfc-storm"}
    out: list[CheckResult] = []
    for key in bad:
        node, _, dev = key.partition(":")
        peer = spec.peers.get((node, dev))
        lid = link_id(node, dev, *peer) if peer else None
        src = f"{peer[0]}:{peer[1]}" if peer else "its peer"
        wd = stormed.get(key)
        observed = (f"PFC watchdog: storm detected, action {agent['watchdog']['action']} "
                    f"({wd['detections']} detection(s), {wd['stormed_s']:g} s in the action)"
                    if wd else f"held in PAUSE (lossless tbf at {cap.PAUSED_RATE_BPS} bit/s) "
                               "with no congestion behind it")
        f = faults.get(key)
        note = f" (injected fault {f.id}: {f.note})" if f else ""
        out.append(failed(
            CHECK, f"{key} lossless queue", node=node, port=dev, link=lid,
            subject=f"TC {spec.qos.roce_tc} towards {src}",
            expected="a lossless queue is paused only while its peer is congested",
            observed=observed,
            reason=(f"PFC storm: {src} keeps sending PAUSE on the lossless priority, so {key} "
                    f"cannot send it and traffic behind it backs up (congestion spreading): "
                    f"find why {src} pauses (a stuck NIC), shut its port, or let the PFC "
                    f"watchdog drop the queue") + note,
            cause=Cause(kind="pfc-storm", node=node, port=dev, link=lid)))
    lossless_tc = spec.qos.roce_tc
    for (node, dev), prio in sorted(read_pfc_priorities(st.lab_dir(spec.name)).items()):
        peer = spec.peers.get((node, dev))
        lid = link_id(node, dev, *peer) if peer else None
        f = next((f for f in (st.load(spec.name).faults if st.load(spec.name) else [])
                  if f.kind == "pfc-priority" and (f.node, f.port) == (node, dev)), None)
        note = f" (injected fault {f.id}: {f.note})" if f else ""
        out.append(failed(
            CHECK, f"{node}:{dev} PFC priority", node=node, port=dev, link=lid,
            subject=f"PFC towards {peer[0]}:{peer[1]}" if peer else "PFC",
            expected=f"PFC on priority {lossless_tc} (qos.roce_tc, the lossless class)",
            observed=f"PFC on priority {prio}",
            reason=(f"QoS misconfiguration: {node}:{dev} neither sends nor honours PAUSE for "
                    f"RoCE's priority {lossless_tc}, so the lossless queue it feeds can overflow "
                    f"and drop: enable PFC on priority {lossless_tc} there") + note,
            cause=Cause(kind="pfc-priority", node=node, port=dev, link=lid)))
    if not out:
        out.append(passed(CHECK, "lossless queues", subject=f"TC {spec.qos.roce_tc}",
                          expected="no lossless queue held in PAUSE without congestion, PFC on "
                                   f"priority {spec.qos.roce_tc} on every port",
                          observed=f"{len(held)} paused, all by congestion" if held else "none paused"))
    return out


register_check(CHECK, check_pfc, order=12,
               description="no lossless queue is held in PAUSE without congestion behind it (a "
                           "PFC storm) or dropped by the PFC watchdog (labs with lab.capacity)")
