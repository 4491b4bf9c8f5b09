"""Training exercises: railab sets a fault, watches the trainee and grades the diagnosis and the
repair (``railab exercise``; docs/training.md).

The faults are railab's own (:mod:`railab.testbed.faults`, the same kinds as ``railab fault``):
an exercise injects them, then takes their records out of the lab state
(:func:`railab.testbed.faults.detach`) into the sealed exercise record
(:mod:`railab.testbed.exercise`), so ``status``, ``inspect``, ``check``'s reasons, the report,
``fault list`` and ``fault heal`` do not see them, while ``check`` and ``traffic`` still
diagnose what the lab shows.

Catalogue (exercise kind -> the fault it injects; the answer names ``--element NODE[:PORT]`` and
``--kind KIND`` with these spellings, which ``reveal`` prints):

level 1  ``link-down``     a leaf-spine link admin down at one end (element: that end)
         ``nic-down``      a server NIC admin down (element ``srvN:ethK``; it also loses its
                           ``default ... table 100+K`` route, which the repair must put back)
level 2  ``cross-cable``   two NICs of one server re-cabled to each other's leaf ports
                           (element: either NIC); repaired with ``railab exercise swap-cables``
         ``session-shut``  ``neighbor <port> shutdown`` on one end of a leaf-spine session
         ``wrong-asn``     one end peers with a wrong ``remote-as`` (a mis-configured session)
         ``daemon-kill``   bgpd killed on a leaf or a spine (element: the node)
level 3  ``grey-loss``     a leaf's port towards a server silently drops some egress packets
                           (all, or only RoCEv2) through an nftables netdev table
         ``mtu``           one end of a server link runs MTU 1500 (planned: lab.json's MTU)
         ``two-faults``    two of the kinds above (not cross-cable, daemon-kill) at once, on
                           different nodes
level 4  ``pfc-storm``     a server NIC or a switch port keeps sending PFC PAUSE: its link
                           peer's lossless queue is held (element: the storming end); repaired
                           by a reset of that link (either end down and up: a NIC or port reset
                           ends a storm, railab.testbed.pfc.settle_storms)
         ``pfc-priority``  PFC on another priority than RoCE's on one end of a server link
                           (element: that end); repaired with ``dcb pfc set dev PORT prio-pfc
                           3:on N:off`` in the node (railab.testbed.dcb)
         Level 4 runs on labs with ``lab.capacity`` only (lossless queues and PFC: the
         ``mini-lossless`` intent).

A link-scoped fault is named by either end of its link (or session); a cross-cable by either
NIC; a daemon-kill by its node. The same ``--seed`` on the same lab shape (node and port names)
gives the same faults: the choice is drawn from candidates sorted by name with
``random.Random(f"railab-exercise:{seed}:{level}:{kind}")``.

Scoring (the score sheet): 100 points per fault found, minus 15 per hint and 5 per wrong
answer, plus 50 when ``exercise fix`` verified the repair (every check family green, with the
faults still recorded as injected, and the record's journal showing the trainee's own repair of
each fault on its element: :func:`repair_of`), 25 when a fault was undone bluntly (a ``railab
restart`` or a whole-config reload that undid a wrong-asn or a shut session); never below 0.
"""

from __future__ import annotations

import datetime as _dt
import random
import re
import secrets
import time
from pathlib import Path
from typing import Any

from railab.checks.base import Cause, CheckResult
from railab.checks.controlplane import summary_only
from railab.checks.lab import LiveLab
from railab.checks.runner import group_failures
from railab.errors import RailabError, UsageError
from railab.testbed import exercise as store
from railab.testbed import faults as F
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.topologies.labspec import LabSpec

__all__ = ["KINDS", "LEVELS", "plan_faults", "start", "hint", "answer", "grade", "fix", "reveal", "stop",
           "score_sheet", "public_view", "normalise_kind", "GATEABLE", "report_line", "CHECK_DETAILS",
           "check_detail", "disclose", "repair_of", "repair_credit", "repair_words", "disclose_status"]

#: exercise kinds by level (``two-faults`` draws two of :data:`PAIRABLE`)
LEVELS: dict[int, tuple[str, ...]] = {
    1: ("link-down", "nic-down"),
    2: ("cross-cable", "session-shut", "wrong-asn", "daemon-kill"),
    3: ("grey-loss", "mtu", "two-faults"),
    4: ("pfc-storm", "pfc-priority"),
}
#: levels that need a lab with ``lab.capacity`` (lossless queues and the PFC emulation)
LOSSLESS_LEVELS: frozenset[int] = frozenset({4})
#: every kind a fault of an exercise can have (what ``reveal`` prints and ``answer`` takes)
KINDS: tuple[str, ...] = ("link-down", "nic-down", "cross-cable", "session-shut", "wrong-asn",
                          "daemon-kill", "grey-loss", "mtu", "pfc-storm", "pfc-priority")
PAIRABLE: tuple[str, ...] = ("link-down", "nic-down", "session-shut", "wrong-asn", "grey-loss", "mtu")
GATEABLE = store.GATEABLE  # commands a trainer may switch off (exercise start --disable)
#: other spellings an answer may use, -> the kind
ALIASES: dict[str, str] = {
    "port-down": "link-down", "interface-down": "link-down", "admin-down": "link-down",
    "link-flap": "link-down", "cable-down": "link-down",
    "nic-shut": "nic-down", "server-nic-down": "nic-down",
    "crossed-cables": "cross-cable", "crossed-cable": "cross-cable", "swapped-cables": "cross-cable",
    "miswire": "cross-cable", "miscabled": "cross-cable",
    "bgp-shut": "session-shut", "neighbor-shutdown": "session-shut", "session-shutdown": "session-shut",
    "bad-peer-as": "wrong-asn", "asn-mismatch": "wrong-asn", "remote-as": "wrong-asn",
    "bgp-misconfig": "wrong-asn",
    "dead-daemon": "daemon-kill", "bgpd-dead": "daemon-kill", "bgpd-down": "daemon-kill",
    "daemon-dead": "daemon-kill",
    "gray-loss": "grey-loss", "packet-loss": "grey-loss", "loss": "grey-loss",
    "mtu-mismatch": "mtu",
    "pause-storm": "pfc-storm", "pfc-pause-storm": "pfc-storm", "storm": "pfc-storm",
    "pfc-prio": "pfc-priority", "priority-mismatch": "pfc-priority", "pfc-mismatch": "pfc-priority",
    "wrong-priority": "pfc-priority", "pfc-misconfig": "pfc-priority", "pfc-enable": "pfc-priority",
}
#: kinds a grader counts as the same fault (a NIC down is a link down at the server end)
_SAME = {"nic-down": {"nic-down", "link-down"}, "link-down": {"link-down", "nic-down"}}
_POINTS_FOUND, _POINTS_HINT, _POINTS_WRONG, _POINTS_REPAIR = 100, 15, 5, 50
#: a blunt repair (a node restart or a whole-config reload that undid a mis-configured line,
#: :func:`repair_of`): the lab is green, but not by a repair of what was broken
_POINTS_BLUNT = 25
_MTU_WRONG = 1500
#: the nft table (family netdev) of an exercise's grey-loss fault: an unremarkable name, not
#: ``railab_f<N>`` like ``railab fault``'s (that would say "railab put this here")
GREY_TABLE = "filter"
#: the families ``start`` requires green and ``fix`` polls before running every family (and, at
#: a lossless level, ``pfc``: :func:`_quick`)
_QUICK = "daemons,cabling,policy,bgp"
#: what ``railab check`` names while an exercise runs (``exercise start --check-detail``):
#: ``element`` the failing element and its likely cause; ``node`` the check family and the node;
#: ``symptom`` the family's symptom only; ``full`` the check's own words (repair commands included)
CHECK_DETAILS: tuple[str, ...] = ("symptom", "node", "element", "full")
#: each level's default detail
LEVEL_DETAIL: dict[int, str] = {1: "element", 2: "node", 3: "symptom", 4: "node"}
#: what a failing row of each family means, without naming where (``symptom`` detail)
SYMPTOMS: dict[str, str] = {
    "daemons": "a routing daemon is not running as planned",
    "cabling": "a link is not up, or not as planned (cabling, MTU, filters)",
    "policy": "a server NIC's policy routing is incomplete",
    "bgp": "a BGP session is not Established",
    "routes": "a prefix is missing, or has fewer paths than planned",
    "oversub": "the capacity differs from the plan",
    "hops": "a path takes other hops than planned",
    "pfc": "a lossless queue is held in PAUSE, or a port's PFC is not on the lossless priority",
    "speed": "a link runs at another speed than planned",
}
#: a cause kind in words, without the repair (``element`` detail)
_CAUSE_WORDS: dict[str, str] = {
    "link-down": "link down", "node-down": "node powered off", "miswired": "cabled to another port",
    "port-missing": "port missing", "session-down": "BGP session not Established",
    "session-shut": "BGP session shut administratively",
    "daemon-dead": "FRR daemon not answering", "node-unreachable": "node unreachable",
    "wrong-asn": "AS number differs from the plan", "neighbor-missing": "no BGP neighbor on the port",
    "not-announced": "prefix not announced", "upstream": "the neighbor lacks the route itself",
    "config": "configuration differs from the plan", "mtu-mismatch": "MTU differs from the plan",
    "link-local-missing": "IPv6 link-local state missing", "port-filter": "a packet filter drops on the port",
    "policy-route-missing": "policy routing incomplete",
    "pfc-storm": "lossless queue held in PAUSE by its link peer",
    "pfc-priority": "PFC on another priority than the lossless one",
    "link-speed": "link running at another speed than planned",
}
#: text that tells the repair (a command, a config line, a railab verb that heals): never shown
#: while an exercise runs below ``full`` detail
REPAIR_WORDS = re.compile(
    r"no neighbor|neighbor \S+ (interface|shutdown)|peer-group|ip link set|ip route (add|replace)|"
    r"ip rule add|railab (restart|fault|exercise|heal)|nft (delete|flush)|swap-cables|vtysh|frr\.conf|"
    r"\bheal(s|ed|ing)?\b|re-add|restores it|bring \S+ (up|back)|router bgp|dcb pfc set|prio-pfc|"
    r"enable PFC|shut its port|`", re.I)


def _quick(level: int) -> str:
    """The cheap families of an exercise of ``level`` (:data:`_QUICK`, with ``pfc`` at a lossless
    level: its faults fail nothing else for sure)."""
    return _QUICK + (",pfc" if level in LOSSLESS_LEVELS else "")


def normalise_kind(kind: str) -> str:
    """An answer's kind in catalogue spelling (``"Crossed cables"`` -> ``cross-cable``).
    UsageError listing the kinds for an unknown one."""
    k = re.sub(r"[\s_]+", "-", kind.strip().lower())
    k = ALIASES.get(k, k)
    if k not in KINDS:
        raise UsageError(f"unknown fault kind {kind!r}: use one of {', '.join(KINDS)}")
    return k


def _element(spec: LabSpec, ref: str) -> str:
    """``NODE[:PORT]`` checked against the lab (``srv2:gpu0`` / ``srv2:nic1`` -> ``srv2:eth1``).
    UsageError for a node or port the lab does not have."""
    node, _, port = ref.strip().partition(":")
    try:
        spec.node(node)
    except KeyError:
        raise UsageError(f"lab {spec.name} has no node {node!r}") from None
    if not port:
        return node
    m = re.fullmatch(r"(gpu|nic)(\d+)", port)
    if m and spec.nics_of(node):
        port = f"eth{int(m.group(2)) + (1 if m.group(1) == 'gpu' else 0)}"
    if port not in {p for p, _, _ in spec.links_of(node)}:
        raise UsageError(f"{node} has no port {port!r} (its ports: "
                         f"{', '.join(p for p, _, _ in spec.links_of(node))})")
    return f"{node}:{port}"


# ---- choosing the faults (pure: lab.json + seed) ----------------------------------------------
def _leaf_spine(spec: LabSpec) -> list[tuple[str, str, str, str]]:
    return sorted((lk.a.node, lk.a.interface, lk.b.node, lk.b.interface)
                  for lk in spec.links if lk.role == "leaf-spine")


def _gpu(port: str) -> int:
    return int(port.removeprefix("eth")) - 1


def _far_server(spec: LabSpec, server: str, rng: random.Random) -> str:
    me = next(n for n in spec.nics if n.server == server)
    others = sorted({n.server for n in spec.nics if n.server != server and n.group != me.group}) or \
        sorted({n.server for n in spec.nics if n.server != server})
    return rng.choice(others) if others else server


def _rail_of_leaf(spec: LabSpec, leaf: str) -> tuple[int | None, int | None]:
    nic = next((n for n in spec.nics if n.leaf == leaf), None)
    return (nic.rail, nic.group) if nic else (None, None)


def _link_fault(spec: LabSpec, rng: random.Random, kind: str) -> dict[str, Any]:
    a, pa, b, pb = rng.choice(_leaf_spine(spec))
    (node, port, peer, pp) = (a, pa, b, pb) if rng.random() < 0.5 else (b, pb, a, pa)
    leaf = a
    rail, group = _rail_of_leaf(spec, leaf)
    where = f"rail {rail}" + (f" of group {group}" if spec.groups > 1 else "")
    fault = {"kind": {"link-down": "link-down", "session-shut": "session-shut",
                      "wrong-asn": "wrong-asn"}[kind], "node_a": f"{node}:{port}", "params": {}}
    cross = "between the groups" if spec.groups > 1 else "across rails"
    symptom = {
        "link-down": f"Since this morning all-reduce {cross} on {where} runs at about half its speed; "
                     f"nothing else changed on our side.",
        "session-shut": f"After last night's maintenance window, collective traffic {cross} on {where} "
                        f"is slower than before; no job fails.",
        "wrong-asn": f"After a configuration change on the network last night, NCCL all-to-all {cross} "
                     f"on {where} only reaches half its usual bandwidth.",
    }[kind]
    look = {"link-down": ("Start at the physical layer: is every fabric link up? "
                          "(railab check --only cabling, or `ip -br link` on the switches)"),
            "session-shut": ("Look at the routing layer: are all BGP sessions Established? "
                             "(`vtysh -c 'show bgp summary'` on the switches)"),
            "wrong-asn": ("Look at the routing layer: are all BGP sessions Established, and why "
                          "not? (`vtysh -c 'show bgp neighbors'`: the last notification)")}[kind]
    detail = {"link-down": f"`railab exec LAB {node} -- ip -br link show {port}`",
              "session-shut": f"`railab exec LAB {node} -- vtysh -c 'show bgp neighbors {port}'`",
              "wrong-asn": f"`railab exec LAB {node} -- vtysh -c 'show running-config bgpd'` "
                           f"(compare neighbor {port} with the others)"}[kind]
    return {"kind": kind, "element": f"{node}:{port}", "accept": [f"{node}:{port}", f"{peer}:{pp}"],
            "fault": fault, "symptom": symptom,
            "hints": [look, f"The trouble is on the link between {leaf} and {b}.",
                      f"Look closely at {node}:{port}: {detail}."]}


def _nic_fault(spec: LabSpec, rng: random.Random, kind: str) -> dict[str, Any]:
    nic = rng.choice(sorted(spec.nics, key=lambda n: (n.server, n.nic)))
    s, i = nic.server, nic.interface
    leaf, lp = nic.leaf, nic.leaf_port
    far = _far_server(spec, s, rng)
    if kind == "nic-down":
        return {"kind": kind, "element": f"{s}:{i}", "accept": [f"{s}:{i}", f"{leaf}:{lp}"],
                "fault": {"kind": "link-down", "node_a": f"{s}:{i}", "params": {}},
                "symptom": f"{s} cannot reach {far} on GPU {nic.gpu}; its other GPUs work.",
                "hints": ["Start at the server: does every NIC of the server have its link, address "
                          "and route? (`ip -br link`, `ip route show table all` in the server)",
                          f"Look at {s}, rail {nic.rail}.",
                          f"{s}:{i}: `railab exec LAB {s} -- ip -br link show {i}` and its route in "
                          f"table {nic.table} (`ip route show table {nic.table}`)."]}
    if kind == "grey-loss":
        roce_only = rng.random() < 0.5
        percent = 100.0 if roce_only else float(rng.choice((10, 20, 30)))
        params = {"percent": percent, "roce_only": roce_only, "table": GREY_TABLE}
        return {"kind": kind, "element": f"{leaf}:{lp}", "accept": [f"{leaf}:{lp}", f"{s}:{i}"],
                "fault": {"kind": "grey-loss", "node_a": f"{leaf}:{lp}", "params": params},
                "symptom": (f"All-reduce on rail {nic.rail} is slow, and NCCL on {s} logs retransmissions "
                            f"on GPU {nic.gpu}; ping looks fine." if not roce_only else
                            f"{s} GPU {nic.gpu} cannot receive RDMA traffic from anyone, but ping to it works."),
                "hints": ["A link can be up and still lose packets: look for loss and for filters "
                          "on the path (railab traffic, `nft list ruleset` on the switches)",
                          f"Look at the rail-{nic.rail} leaf {leaf}.",
                          f"{leaf}:{lp} (towards {s}): `railab exec LAB {leaf} -- nft list ruleset`."]}
    if kind == "mtu":
        node, port, peer, pp = (s, i, leaf, lp) if rng.random() < 0.5 else (leaf, lp, s, i)
        return {"kind": kind, "element": f"{node}:{port}", "accept": [f"{node}:{port}", f"{peer}:{pp}"],
                "fault": {"kind": "mtu", "node_a": f"{node}:{port}", "params": {"mtu": _MTU_WRONG}},
                "symptom": (f"{s} GPU {nic.gpu}: small messages go through, but large transfers to and "
                            f"from {far} stall."),
                "hints": ["Small packets pass, large ones do not: compare the interface settings of "
                          f"both ends of every link on the path with the plan (MTU {spec.mtu})",
                          f"Look at the link between {s} and {leaf}.",
                          f"`ip link show {port}` on {node}."]}
    raise AssertionError(kind)


def _cross_fault(spec: LabSpec, rng: random.Random) -> dict[str, Any]:
    servers = sorted({n.server for n in spec.nics if len(spec.nics_of(n.server)) >= 2})
    if not servers:
        raise UsageError(f"lab {spec.name} has no server with two NICs: no cross-cable exercise")
    s = rng.choice(servers)
    a, b = sorted(rng.sample(spec.nics_of(s), 2), key=lambda n: n.nic)
    return {"kind": "cross-cable", "element": f"{s}:{a.interface}",
            "accept": [f"{s}:{a.interface}", f"{s}:{b.interface}"],
            "fault": {"kind": "cross-cable", "node_a": f"{s}:{a.interface}", "node_b": f"{s}:{b.interface}",
                      "params": {}},
            "symptom": (f"Since the hardware swap on {s} yesterday, jobs using GPUs {a.gpu} and {b.gpu} of "
                        f"{s} hang; its other GPUs are fine."),
            "hints": ["Rail alignment: NIC N belongs on the rail-N leaf. Compare the live cabling with "
                      "the plan (railab check --only cabling, `ip -d link` shows a veth's far namespace)",
                      f"Look at the cables of {s}.",
                      f"{s}:{a.interface} and {s}:{b.interface}: where does each cable land? "
                      f"(`railab exec LAB {s} -- ip -d link show {a.interface}`)"]}


def _daemon_fault(spec: LabSpec, rng: random.Random) -> dict[str, Any]:
    switches = sorted(n.name for n in spec.nodes if n.role in ("leaf", "spine"))
    node = rng.choice(switches)
    rail, group = _rail_of_leaf(spec, node)
    if rail is None:
        symptom = ("Every job that spans the groups got slower at the same time last night; jobs inside "
                   "one rail are fine.")
    else:
        other = "the other group" if spec.groups > 1 else "the other rails"
        symptom = (f"GPU {rail - 1} of the servers in group {group} cannot reach {other} any more; "
                   f"between those servers on rail {rail} it still works.")
    return {"kind": "daemon-kill", "element": node, "accept": [node],
            "fault": {"kind": "daemon-kill", "node_a": node, "params": {"daemon": "bgpd"}},
            "symptom": symptom,
            "hints": ["Look at the control plane of the switches: does every switch run all its "
                      "routing daemons? (railab status, `ps` in the node)",
                      f"Look at {node}.",
                      f"`railab exec LAB {node} -- vtysh -c 'show bgp summary'`: who answers?"]}


def _watchdog_words(spec: LabSpec) -> str:
    """What the switches' PFC watchdog does on ``spec`` (a hint's words: the storm's scenario)."""
    wd = spec.qos.capacity.pfc_watchdog
    if wd is None:
        return ("This fabric's switches run no PFC watchdog: nothing drops a stormed queue, the "
                "pause lasts as long as the storm")
    return (f"The switches' PFC watchdog ({wd.action} after {wd.detection_time_ms:g} ms) acts only "
            "while traffic runs, and only contains a storm: it does not end it")


def _pfc_fault(spec: LabSpec, rng: random.Random, kind: str) -> dict[str, Any]:
    """A level-4 fault: ``pfc-storm`` from a server NIC (two in three) or a switch port of a
    leaf-spine link, or ``pfc-priority`` on one end of a server link."""
    tc = spec.qos.roce_tc
    look_storm = ("Lossless (RoCE) traffic stops while ping and TCP pass: look for a lossless queue "
                  "held in PAUSE with nothing congested behind it (`tc -s qdisc show` on the switches: "
                  f"the lossless class's tbf at 8Kbit is paused; TC {tc}). "
                  + _watchdog_words(spec) + ".")
    cross = "between the groups" if spec.groups > 1 else "across rails"
    if kind == "pfc-storm" and (rng.random() < 2 / 3 or not _leaf_spine(spec)):
        nic = rng.choice(sorted(spec.nics, key=lambda n: (n.server, n.nic)))
        s, i, leaf, lp = nic.server, nic.interface, nic.leaf, nic.leaf_port
        return {"kind": kind, "element": f"{s}:{i}", "accept": [f"{s}:{i}", f"{leaf}:{lp}"],
                "fault": {"kind": "pfc-storm", "node_a": f"{s}:{i}", "params": {}},
                "symptom": (f"RDMA to {s} GPU {nic.gpu} hangs while ping to it works, and since then "
                            f"other jobs on rail {nic.rail} stall under load although they never touch {s}."),
                "hints": [look_storm,
                          f"Look at the rail-{nic.rail} leaf {leaf} and the servers cabled to it ({s} among them).",
                          f"{leaf}:{lp} (towards {s}:{i}) cannot send: `railab exec LAB {leaf} -- tc -s qdisc "
                          f"show dev {lp}`. A NIC that keeps sending PAUSE is stuck until it is reset."]}
    if kind == "pfc-storm":
        a, pa, b, pb = rng.choice(_leaf_spine(spec))
        (node, port, peer, pp) = (a, pa, b, pb) if rng.random() < 0.5 else (b, pb, a, pa)
        rail, group = _rail_of_leaf(spec, a)
        where = f"rail {rail}" + (f" of group {group}" if spec.groups > 1 else "")
        return {"kind": kind, "element": f"{node}:{port}", "accept": [f"{node}:{port}", f"{peer}:{pp}"],
                "fault": {"kind": "pfc-storm", "node_a": f"{node}:{port}", "params": {}},
                "symptom": (f"Since this morning some RDMA flows {cross} on {where} hang while others "
                            f"between the same servers run, and ping works; under load the whole rail stalls."),
                "hints": [look_storm, f"The trouble is on a link between {a} and {b}.",
                          f"{peer}:{pp} (towards {node}:{port}) cannot send: `railab exec LAB {peer} -- "
                          f"tc -s qdisc show dev {pp}`. A port that keeps sending PAUSE is stuck until it is reset."]}
    nic = rng.choice(sorted(spec.nics, key=lambda n: (n.server, n.nic)))
    s, i, leaf, lp = nic.server, nic.interface, nic.leaf, nic.leaf_port
    node, port, peer, pp = (s, i, leaf, lp) if rng.random() < 0.5 else (leaf, lp, s, i)
    prio = rng.choice([q for q in range(8) if q != tc])
    far = _far_server(spec, s, rng)
    return {"kind": kind, "element": f"{node}:{port}", "accept": [f"{node}:{port}", f"{peer}:{pp}"],
            "fault": {"kind": "pfc-priority", "node_a": f"{node}:{port}", "params": {"priority": prio}},
            "symptom": (f"Under load, RDMA between {s} GPU {nic.gpu} and {far} drops packets and NCCL "
                        f"logs retransmissions, although the fabric is lossless; light traffic is fine."),
            "hints": ["Lossless holds only where PFC is on RoCE's priority at both ends of every link: "
                      f"compare the ports' PFC configuration with the plan (TC {tc}; `dcb pfc show dev PORT` "
                      "in a node, railab check --only pfc)",
                      f"Look at the link between {s} and {leaf}.",
                      f"`railab exec LAB {node} -- dcb pfc show dev {port}`."]}


def _one(spec: LabSpec, rng: random.Random, kind: str) -> dict[str, Any]:
    if kind in ("link-down", "session-shut", "wrong-asn"):
        return _link_fault(spec, rng, kind)
    if kind in ("nic-down", "grey-loss", "mtu"):
        return _nic_fault(spec, rng, kind)
    if kind == "cross-cable":
        return _cross_fault(spec, rng)
    if kind == "daemon-kill":
        return _daemon_fault(spec, rng)
    if kind in ("pfc-storm", "pfc-priority"):
        return _pfc_fault(spec, rng, kind)
    raise UsageError(f"unknown exercise kind {kind!r}: use one of {', '.join(KINDS)} or two-faults")


def _nodes(f: dict[str, Any]) -> set[str]:
    return {e.partition(":")[0] for e in f["accept"]}


def plan_faults(spec: LabSpec, level: int, seed: int, kind: str | None = None) -> list[dict[str, Any]]:
    """The faults an exercise of ``level`` (1-4) with ``seed`` injects on lab ``spec``: a list of
    ``{"kind", "element", "accept" (elements that name it), "fault" (railab.testbed.faults.inject
    arguments), "symptom", "hints" (3, graded: area, node, element)}``. ``kind`` forces one
    catalogue kind of that level (or ``two-faults`` at level 3). Deterministic in (lab shape,
    level, kind, seed). UsageError for a level outside 1-4, a kind not of that level, or a
    lossless level (4) on a lab without ``lab.capacity``."""
    if level not in LEVELS:
        raise UsageError(f"--level {level}: use {', '.join(map(str, sorted(LEVELS)[:-1]))} or {max(LEVELS)}")
    if level in LOSSLESS_LEVELS and not spec.qos.capacity.enabled:
        raise UsageError(f"level {level} (PFC storms and priority mismatches) needs a lossless lab: lab "
                         f"{spec.name} has no lab.capacity (no lossless queues, no PFC); use the mini-lossless "
                         f"intent: railab generate mini-lossless -o labs/NAME --name NAME && railab up labs/NAME")
    if kind is not None and kind not in LEVELS[level]:
        lv = next((lv for lv, ks in LEVELS.items() if kind in ks), None)
        raise UsageError(f"kind {kind!r} is not a level-{level} fault"
                         + (f" (it is level {lv}: --level {lv})" if lv else
                            f": level {level} has {', '.join(LEVELS[level])}"))
    rng = random.Random(f"railab-exercise:{seed}:{level}:{kind or ''}")
    kind = kind or rng.choice(LEVELS[level])
    if kind != "two-faults":
        return [_one(spec, rng, kind)]
    for _ in range(100):
        k1, k2 = rng.sample(PAIRABLE, 2)
        f1, f2 = _one(spec, rng, k1), _one(spec, rng, k2)
        if not _nodes(f1) & _nodes(f2):
            return [f1, f2]
    raise UsageError(f"lab {spec.name} is too small for two faults on different nodes")


# ---- the record ------------------------------------------------------------------------------
def _now() -> float:
    return time.time()


def _iso(t: float | None) -> str | None:
    return None if t is None else _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="seconds")


def _lab(labdir: Path | str) -> tuple[str, LabSpec, st.LabState]:
    ref = resolve(labdir)
    return ref.name, ref.spec(), ref.require_up()


def _require(name: str, *, running: bool = True) -> dict[str, Any]:
    rec = store.load(name)
    if rec is None:
        raise UsageError(f"lab {name} runs no exercise: railab exercise start {name} --level N")
    if running and rec.get("revealed_at"):
        raise UsageError(f"the exercise on lab {name} has ended (revealed): railab exercise score {name}, "
                         f"or railab exercise start {name} for a new one")
    return rec


def public_view(rec: dict[str, Any]) -> dict[str, Any]:
    """What every command may show of an exercise record: no fault names until revealed."""
    return {"lab": rec["lab"], "level": rec["level"], "started_at": _iso(rec["started_at"]),
            "started_ts": rec["started_at"], "symptoms": [f["symptom"] for f in rec["faults"]],
            "disabled": rec.get("disabled", []), "labdir": rec.get("labdir"),
            "revealed": bool(rec.get("revealed_at")),
            "check_detail": rec.get("check_detail") or LEVEL_DETAIL.get(rec["level"], "symptom")}


def check_detail(lab: str) -> str | None:
    """The detail ``railab check`` may show on ``lab`` (:data:`CHECK_DETAILS`): None when no
    exercise runs there (or it was revealed) or the trainer chose ``full``."""
    pub = store.running(lab)
    if pub is None:
        return None
    detail = pub.get("check_detail") or LEVEL_DETAIL.get(pub.get("level"), "symptom")
    return None if detail == "full" else detail


def _clean(text: str | None) -> str | None:
    return None if text and REPAIR_WORDS.search(text) else text


def _where(c: Cause) -> str:
    if c.port and c.node:
        return f"{c.node}:{c.port}"
    return c.link or c.node or c.prefix or "?"


def _culprit(r: CheckResult) -> str | None:
    """The node a failing row is blamed on (its cause's node, else its link's first end, else
    its own node)."""
    c = r.cause
    if c is not None and c.node:
        return c.node
    if c is not None and c.link:
        return c.link.split("--")[0].rsplit(":", 1)[0]
    return r.node


def disclose(lab: str, results: list[CheckResult], *, pub: dict[str, Any] | None = None) -> list[CheckResult]:
    """``results`` as ``railab check`` may show them while an exercise runs on ``lab`` (unchanged
    without one, after reveal, or at ``full`` detail; ``pub``: the exercise's public view, when
    the caller has it). One row per row (the counts stay true), never a repair command
    (:data:`REPAIR_WORDS`):

    ``element``  names and elements kept; a failure's reason is its cause in words at its element
                 (``link down at srv1:eth4``), expected/observed kept unless they tell the repair;
    ``node``     every row named ``<family> at <node>`` with the family's symptom
                 (:data:`SYMPTOMS`); a failure is grouped under the node it is blamed on;
    ``symptom``  every row named by its family only, with the family's symptom.

    At ``node`` and ``symptom`` the rows' ports, links, sessions, prefixes, expected and observed
    are dropped, and each failure's cause is reduced to its root's node (or family), the root
    :func:`railab.checks.runner.group_failures` files it under: ``check`` still prints one root
    per root it would print, named at the detail."""
    if pub is not None:
        detail = None if pub.get("revealed") else (pub.get("check_detail") or LEVEL_DETAIL.get(pub["level"]))
        detail = None if detail == "full" else detail
    else:
        detail = check_detail(lab)
    if detail is None:
        return list(results)
    root_of: dict[int, CheckResult] = {}  # each failing row -> the root check files it under
    if detail != "element":
        for root, cons in group_failures(results):
            for r in (root, *cons):
                root_of.setdefault(id(r), root)
    out: list[CheckResult] = []
    for r in results:
        words = SYMPTOMS.get(r.check, f"a {r.check} check fails")
        if detail == "element":
            if r.status == "fail":
                reason = (f"{_CAUSE_WORDS.get(r.cause.kind, r.cause.kind)} at {_where(r.cause)}"
                          if r.cause is not None else f"{words} ({r.node or r.name})")
            else:
                reason = _clean(r.reason)
            out.append(r.model_copy(update={"reason": reason, "expected": _clean(r.expected),
                                             "observed": _clean(r.observed)}))
            continue
        # a failure's reduced cause: its root's node (or family), so the rows group as the
        # check itself groups them, one root per node (or family) shown
        root = root_of.get(id(r), r)
        node = (root.node or _culprit(root)) if r.status == "fail" else r.node
        if detail == "node":
            at = r.node or node
            name = f"{r.check} at {at}" if at else r.check
            cause = Cause(kind="exercise-node", node=node) if r.status == "fail" and node else None
            reason = (f"{words} ({r.node or node})" if r.status == "fail" else
                      "could not be observed" if r.status == "skip" else None)
        else:
            name, node = r.check, None
            cause = Cause(kind="exercise-symptom", prefix=root.check) if r.status == "fail" else None
            reason = words if r.status == "fail" else "could not be observed" if r.status == "skip" else None
        out.append(CheckResult(check=r.check, name=name, status=r.status,
                               node=r.node if detail == "node" else None, reason=reason, cause=cause))
    return out


def disclose_status(lab: str, status: dict[str, Any]) -> dict[str, Any]:
    """``railab status``'s document (``{"nodes": {node: {"daemons": {daemon: alive}}, ...},
    "sessions": {"up", "expected", "down": ["node:port", ...]}, ...}``) as it may be shown while
    an exercise runs on ``lab``, by the rule :func:`disclose` applies to ``check``: unchanged
    without an exercise, after reveal, or at ``element`` / ``full`` detail; at ``node`` the down
    sessions name their node only (``"g2-leaf3"``, no port); at ``symptom`` neither the down
    sessions nor the dead daemons name a node (``down`` empty, every node's ``daemons`` empty:
    the counts say what fails). At ``node`` and ``symptom`` the ``control_plane`` keeps its
    per-role summary only (:func:`railab.checks.controlplane.summary_only`: a router with fewer
    routes or sessions than its peers would point at the fault). Adds ``exercise_detail`` when
    it changed anything. The caller keeps its exit code from the full document."""
    detail = check_detail(lab)
    if detail in (None, "element"):
        return status
    out = {**status, "exercise_detail": detail}
    if isinstance(status.get("control_plane"), dict) and "routers" in status["control_plane"]:
        out["control_plane"] = summary_only(status["control_plane"])
    ses = status.get("sessions") or {}
    if "down" in ses:
        down = ses["down"]
        nodes = list(dict.fromkeys(str(d).partition(":")[0] for d in down))
        out["sessions"] = {**ses, "down": nodes if detail == "node" else [], "down_count": len(down)}
    if detail == "symptom":
        dead = sum(1 for n in status.get("nodes", {}).values() for ok in n.get("daemons", {}).values() if not ok)
        out["nodes"] = {k: {**n, "daemons": {}} for k, n in status.get("nodes", {}).items()}
        out["dead_daemons"] = dead
    return out


def _save(rec: dict[str, Any]) -> None:
    store.save(rec["lab"], rec, public_view(rec))


def _refuse_running(name: str) -> None:
    if store.exists(name) and not (store.load(name) or {}).get("revealed_at"):
        raise UsageError(f"lab {name} already has an exercise: railab exercise reveal {name} ends it "
                         f"(railab down {name} removes it)")


def start(labdir: Path | str, level: int = 1, seed: int | None = None, *, kind: str | None = None,
          disable: list[str] | tuple[str, ...] = (), precheck: bool = True,
          check_detail: str | None = None) -> dict[str, Any]:
    """Start an exercise on a running lab: choose the faults (:func:`plan_faults`), inject them
    (railab.testbed.faults), hide their records, and return :func:`public_view` (the symptoms
    to tell the trainee) plus ``seed``.

    ``disable``: commands switched off for the trainee while it runs (:data:`GATEABLE`).
    ``precheck``: refuse a lab that is not green before (daemons, cabling, policy, bgp), since
    ``exercise fix`` could never pass there. ``check_detail``: what ``railab check`` names while
    it runs (:data:`CHECK_DETAILS`; default: the level's, :data:`LEVEL_DETAIL`). UsageError
    (nothing injected) when the lab already runs an exercise, has recorded faults, is not green,
    or for a bad level/kind/command; a fault that fails half-way is healed before the error is raised."""
    if check_detail is not None and check_detail not in CHECK_DETAILS:
        raise UsageError(f"--check-detail {check_detail}: use one of {', '.join(CHECK_DETAILS)}")
    name, spec, record = _lab(labdir)
    bad = [c for c in disable if c not in GATEABLE]
    if bad:
        raise UsageError(f"--disable {','.join(bad)}: commands that can be switched off: {', '.join(GATEABLE)}")
    _refuse_running(name)
    if record.faults:
        raise UsageError(f"lab {name} has injected faults ({', '.join(f.id for f in record.faults)}): "
                         f"railab fault {name} heal --all first")
    if seed is None:
        seed = secrets.randbelow(1_000_000)
    planned = plan_faults(spec, level, seed, kind)
    if precheck:
        failing = [r for r in LiveLab.attach(name).check(only=_quick(level)) if r.status == "fail"]
        if failing:
            raise UsageError(f"lab {name} is not green before the exercise ({len(failing)} failing checks, "
                             f"e.g. {failing[0].check}: {failing[0].name}): railab check {name}, fix it first")
    injected: list[st.FaultRecord] = []
    with store.locked(name):  # hint, answer and reveal wait until the faults are hidden
        _refuse_running(name)
        rec = {"lab": name, "labdir": str(resolve(name).labdir), "level": level, "seed": seed,
               "kind": kind, "started_at": _now(), "faults": planned, "disabled": sorted(set(disable)),
               "check_detail": check_detail or LEVEL_DETAIL[level], "repairs": [],
               "found": [], "answers": [], "hints": [], "fix": {"attempts": 0, "verified_at": None}}
        # the exercise acts on its own lab: the lock (railab.testbed.exercise.guard) lets it through
        with store.acting(name):
            try:
                # the record first: whoever sees a fault in the lab state from here on (the console's
                # watcher marks fault events secret while an exercise runs) sees the exercise too
                _save(rec)
                for f in planned:
                    a = f["fault"]
                    injected.append(F.inject(name, a["kind"], a["node_a"], a.get("node_b"), **a["params"]))
                for f, r in zip(planned, injected, strict=True):
                    f["record"] = r.model_dump(mode="json")
                _save(rec)
                F.detach(name, [r.id for r in injected])
            except BaseException:
                store.remove(name)
                for r in reversed(injected):
                    try:
                        F.heal(name, r.id)
                    except Exception:
                        pass
                raise
    return {**public_view(rec), "seed": seed}


def hint(labdir: Path | str) -> dict[str, Any]:
    """The next graded hint (area, then node, then element) for the first fault not yet found:
    ``{"hint", "grade" (1-3), "fault" (1-based), "hints_used"}``; ``hint`` is None when the three
    hints of every unfound fault are used (or all are found). Each hint costs points."""
    name, _, _ = _lab(labdir)
    with store.locked(name):
        rec = _require(name)
        open_ = [i for i in range(len(rec["faults"])) if i not in rec["found"]]
        for i in open_:
            given = sum(1 for h in rec["hints"] if h["fault"] == i)
            if given < len(rec["faults"][i]["hints"]):
                text = rec["faults"][i]["hints"][given].replace("LAB", name)
                rec["hints"].append({"fault": i, "grade": given + 1, "at": _now()})
                _save(rec)
                return {"hint": text, "grade": given + 1, "fault": i + 1, "hints_used": len(rec["hints"])}
        return {"hint": None, "grade": None, "fault": None, "hints_used": len(rec["hints"])}


def grade(rec: dict[str, Any], element: str, kind: str) -> tuple[int | None, str]:
    """Which fault of ``rec`` the answer (``element`` in lab spelling, ``kind`` normalised)
    names: ``(index, why)``; index None when it names none (``why`` says how close it was,
    without naming the fault)."""
    node = element.partition(":")[0]
    close = ""
    for i, f in enumerate(rec["faults"]):
        same = _SAME.get(f["kind"], {f["kind"]})
        if element in f["accept"] and kind in same:
            return i, f"right: {kind} at {element}"
        if kind in same and node in _nodes(f) and ":" not in element and any(":" in e for e in f["accept"]):
            close = "the right kind on the right node, but name the port (NODE:PORT)"
        elif element in f["accept"] and not close:
            close = "the right place, but another kind of fault"
    return None, close or "no injected fault is that"


def _format_hint(read: str, node: str) -> str:
    """The hint for a port railab could not tie to its node in a free-text answer."""
    return (f"read {read!r} as node {node} and a port railab cannot tie to it: name the port as "
            f"{node}:eth3, '{node} eth3', '{node} port 3' or 'eth3 on {node}' (servers also 'nic 3', "
            "'gpu 2'), or answer with --element NODE:PORT --kind KIND")


def _parse_text(spec: LabSpec, text: str) -> tuple[list[str], str | None]:
    """Elements and a kind read from a free-text answer (``"g1-leaf2 eth3 is admin down"``,
    ``"swp4 on srv1 is down"``): ``(["NODE" or "NODE:PORT", ...], kind or None)``. UsageError
    for a port the named node does not have, or a port railab cannot tie to the one node named
    (a hint on the format)."""
    t = text.lower()
    names = sorted((n.name for n in spec.nodes), key=len, reverse=True)
    nodes = "|".join(map(re.escape, names))
    words = r"(eth|gpu|nic|port|interface|if|swp)\s*(\d+)\b"
    elements: list[str] = []
    # the port after its node ("g1-leaf1 port 3", "srv1:eth4") or before it ("swp4 on srv1",
    # "eth3 of g1-leaf2", "port 3 at the leaf g1-leaf1")
    before = (r"(?<![\w-])" + words + r"\s+(?:on|of|at|in)\s+(?:(?:the|node|server|switch|leaf|spine)\s+){0,2}"
              r"(" + nodes + r")(?![\w-])")
    after = (r"(?<![\w-])(" + nodes +
             r")(?![\w-])(?:(?:[:/\s]|\s+on\s+)+" + words + r")?(?:(?:[:/\s])+([a-z]*\d+)\b)?")
    found = [(m.start(), m.group(3), m.group(1), m.group(2), None) for m in re.finditer(before, t)]
    taken = [(m.start(), m.end()) for m in re.finditer(before, t)]
    found += [(m.start(), m.group(1), m.group(2), m.group(3), m.group(4)) for m in re.finditer(after, t)
              if not any(a <= m.start() < b for a, b in taken)]
    ports = [m for m in re.finditer(r"(?<![\w-])" + words, t)
             if not any(a <= m.start() < b for a, b in taken)]
    for _, node, word, num, tail in sorted(found):
        # a port the node lacks ("srv4 nic 9") is bad input, as with --element: not silently
        # graded (and charged) as the bare node
        prefix = {"port": "eth", "interface": "eth", "if": "eth", "swp": "eth"}.get(word, word)
        if not word and tail:
            # "g1-leaf1 3", "g1-leaf1 e3": a port in a spelling not read; say how to write it
            raise UsageError(_format_hint(f"{node} {tail}", node))
        if not word and ports and len(found) == 1:
            # a port named apart from its node ("eth4 is down, on srv1"): say how to write it
            # rather than grade (and charge) the bare node
            raise UsageError(_format_hint(f"{node} ... {ports[0].group(0)}", node))
        elements.append(_element(spec, node + (f":{prefix}{num}" if word else "")))
    rules = [(r"storm|(keeps?|endless|constant|non-?stop|flood\w*)\s+(\w+\s+){0,2}paus", "pfc-storm"),
             (r"priorit|\bprio\b|pfc.*\b(wrong|mismatch|ignor\w*)|\b(wrong|mismatch|ignor\w*)\b.*\b(pfc|pause)",
              "pfc-priority"),
             (r"cross|swap|miswir|mis-cabl|wrong (rail|leaf|port)", "cross-cable"),
             (r"\bmtu\b|jumbo|frame size", "mtu"),
             (r"loss|drop|grey|gray|nft|filter|discard", "grey-loss"),
             (r"\basn?\b|remote-as|bad peer|as number|autonomous", "wrong-asn"),
             (r"bgpd|daemon|dead|killed|crash|not running", "daemon-kill"),
             (r"(shut|shutdown|admin).*(session|neighbou?r|bgp)|(session|neighbou?r|bgp).*(shut|shutdown)",
              "session-shut"),
             (r"\bnic\b.*down|down.*\bnic\b", "nic-down"),
             (r"down|unplug|no carrier|disabled", "link-down")]
    kind = next((k for pat, k in rules if re.search(pat, t)), None)
    return elements, kind


def answer(labdir: Path | str, element: str | None = None, kind: str | None = None,
           text: str | None = None) -> dict[str, Any]:
    """Grade one answer against the injected faults and record it: ``{"right": bool, "message",
    "found" (faults found so far), "total"}``. Structured (``element`` ``NODE[:PORT]`` and
    ``kind``) or free ``text`` (nodes, ports and a kind read from it). UsageError for an
    unknown node, port or kind, or nothing to grade."""
    name, spec, _ = _lab(labdir)
    if text and not (element and kind):
        els, k = _parse_text(spec, text)
        elements = [element] if element else els
        kind = kind or k
        if not elements or not kind:
            raise UsageError("the answer names no " + ("element (NODE or NODE:PORT)" if not elements else
                             f"fault kind ({', '.join(KINDS)})") + ": or use --element and --kind")
    elif element and kind:
        elements = [element]
    else:
        raise UsageError("answer with --element NODE[:PORT] --kind KIND, or a sentence")
    kind = normalise_kind(kind)
    elements = [_element(spec, e) for e in elements]
    with store.locked(name):
        rec = _require(name, running=False)
        hit, why = None, ""
        for e in elements:
            hit, why = grade(rec, e, kind)
            if hit is not None:
                element = e
                break
        scored = not rec.get("revealed_at")  # after reveal: graded for practice, not scored
        if scored:
            rec["answers"].append({"element": elements[0] if hit is None else element, "kind": kind,
                                   "right": hit is not None, "at": _now(), "text": text})
            if hit is not None and hit not in rec["found"]:
                rec["found"].append(hit)
                rec["faults"][hit]["found_at"] = _now()
            _save(rec)
        total = len(rec["faults"])
        msg = why if hit is None else f"{why} ({len(rec['found'])}/{total} found)"
        if not scored:
            msg += " (the exercise was revealed: not scored)"
        return {"right": hit is not None, "message": msg, "found": len(rec["found"]), "total": total,
                "scored": scored}


_SHELLS = (["(shell)"], ["vtysh"])  # interactive: what was typed in them is not journaled


def repair_of(fault: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """How the journaled trainee action ``entry`` (``{"tool": "exec" | "restart" |
    "swap-cables", "node", "argv": [str, ...]}``, :func:`railab.testbed.exercise.note_repair`)
    repairs the hidden ``fault`` (a planned fault of the record): ``"full"`` when it acts on the
    fault's own element with a command that plausibly undoes that kind of fault, ``"blunt"``
    when it undoes it wholesale (a ``railab restart`` or a ``vtysh -b``/``-f`` config reload on
    the node of a wrong-asn or a shut session: the whole configuration reloaded, every session
    of the node reset, instead of the one neighbor fixed), None when it does not repair it (a
    look such as ``ip -br link``, another node, another port).

    Per kind (``N``/``P``: the faulty end, the fault's ``node_a``): link-down and nic-down
    ``ip link set P up`` (any spelling that is not a ``show``, or vtysh ``no shutdown``) on N; session-shut
    and wrong-asn a vtysh configuration change naming ``neighbor P`` on N; daemon-kill
    ``railab restart N`` or a command starting bgpd on N; cross-cable ``railab exercise
    swap-cables`` of its two NICs; grey-loss ``nft delete``/``flush`` on N; mtu a command naming
    ``mtu`` and P on N; pfc-storm a reset of the storming link at either end (a command taking
    that end's port down, ``ip link set P down``: railab ends a storm whose link went down,
    :func:`railab.testbed.pfc.settle_storms`), on either end's node; pfc-priority ``dcb pfc set``
    naming P on N (railab.testbed.dcb). An interactive shell (``railab exec LAB N``, or
    ``vtysh`` alone for the BGP kinds) on N (either end for pfc-storm) counts as a full repair of
    every kind but cross-cable: what was typed in it is not journaled."""
    kind, ref = fault["kind"], fault["fault"]
    node, _, port = str(ref["node_a"]).partition(":")
    tool, at = entry.get("tool"), entry.get("node")
    argv = [str(a) for a in entry.get("argv") or []]
    if kind == "cross-cable":
        pair = {str(ref["node_a"]), str(ref.get("node_b"))}
        return "full" if tool == "swap-cables" and set(argv) == pair else None
    if kind == "pfc-storm":
        # either end of the storming link: a reset there ends the storm
        for end in fault["accept"]:
            n, _, p = end.partition(":")
            if at == n and tool == "exec" and (argv == ["(shell)"] or _takes_down(argv, p)):
                return "full"
        return None
    if at != node:
        return None
    if tool == "restart":
        return "full" if kind == "daemon-kill" else "blunt" if kind in ("wrong-asn", "session-shut") else None
    if tool != "exec":
        return None
    if argv == ["(shell)"] or (argv == ["vtysh"] and kind in ("link-down", "nic-down", "session-shut",
                                                                "wrong-asn")):
        return "full"
    text = " ".join(argv).lower()

    def has(pattern: str) -> bool:
        return re.search(pattern, text) is not None

    on_port = bool(port) and has(rf"(?<![\w.-]){re.escape(port.lower())}(?![\w.-])")
    vtysh = has(r"\bvtysh\b")
    configures = vtysh and has(r"\bconf(igure)?\b")
    if kind in ("link-down", "nic-down"):
        # `ip link set P up` (`ip l s P up`, ifconfig, ifup), not a look (`ip link show P up`)
        return "full" if on_port and ((has(r"\bup\b") and not has(r"\b(show|sh|list|ls|vtysh)\b"))
                                      or (configures and has(r"no shutdown"))) else None
    if kind in ("session-shut", "wrong-asn"):
        if configures and has(rf"\bneighbor\s+{re.escape(port.lower())}\b"):
            return "full"
        if vtysh and has(r"(^|\s)-(b|f)(\s|$)|--boot\b|--inputfile\b"):
            return "blunt"
        return None
    if kind == "daemon-kill":
        return "full" if has(r"\bbgpd\b") and not has(r"\b(kill|pkill|killall|show|pgrep|ps)\b") else None
    if kind == "grey-loss":
        return "full" if has(r"\bnft\b") and has(r"\b(delete|flush|destroy)\b") else None
    if kind == "mtu":
        return "full" if on_port and has(r"\bmtu\b") else None
    if kind == "pfc-priority":
        # `dcb pfc set dev P prio-pfc ...`, not a look (`dcb pfc show dev P`)
        return "full" if on_port and has(r"\bdcb\b") and has(r"\bpfc\b") and has(r"\bset\b") else None
    return None


def _takes_down(argv: list[str], port: str) -> bool:
    """True when the journaled command ``argv`` takes ``port`` down (``ip link set P down``,
    ``ifdown P``, in a ``sh -c`` too), not when it only looks (``ip link show P down``)."""
    text = " ".join(argv).lower()
    return (re.search(rf"(?<![\w.-]){re.escape(port.lower())}(?![\w.-])", text) is not None
            and re.search(r"\bdown\b|\bifdown\b", text) is not None
            and re.search(r"\b(show|list|ls|vtysh|grep)\b|\b(link|l)\s+sh\b", text) is None)


def repair_credit(rec: dict[str, Any]) -> dict[str, Any]:
    """What the record's journal (``rec["repairs"]``) shows the trainee repaired:
    ``{"repaired": bool (every hidden fault has a repair, :func:`repair_of`), "blunt": bool (at
    least one only bluntly), "unrepaired": int (faults without one)}``. A green lab is credited
    only when ``repaired``; nothing here names a fault."""
    grades = []
    for f in rec["faults"]:
        got = {repair_of(f, e) for e in rec.get("repairs", [])}
        grades.append("full" if "full" in got else "blunt" if "blunt" in got else None)
    missing = sum(1 for g in grades if g is None)
    return {"repaired": missing == 0, "blunt": missing == 0 and "blunt" in grades, "unrepaired": missing}


def fix(labdir: Path | str, wait: float = 60.0, poll: float = 1.0) -> dict[str, Any]:
    """Check that the trainee's repair made the lab green: every check family passes (polled for
    up to ``wait`` seconds), and the exercise's faults are still recorded as injected and hidden
    (none was handed to ``railab fault LAB heal``). ``{"green": bool, "credited": bool,
    "blunt": bool, "elapsed_s", "failing": [first failing rows], "n_failing", "rows_hidden",
    "attempts"}``; ``credited``: green, and the record journals the trainee's repair of every
    hidden fault: a ``railab exec`` (or ``railab restart``, ``railab exercise swap-cables``)
    since the start, on the fault's own element, with a command that plausibly repairs that
    kind of fault (:func:`repair_of`); only that verifies the repair. ``blunt``: credited, but a
    fault was undone wholesale (a node restart or config reload that undid a BGP misconfig): 25
    points on the sheet instead of 50. ``failing`` is empty (``rows_hidden`` true) when the
    trainer switched ``check`` off, so ``fix`` does not stand in for it; else named at the
    exercise's check detail (:func:`disclose`). Records the verdict for the score sheet.
    UsageError when the lab runs no exercise or its faults were handed to ``railab fault``."""
    name, _, record = _lab(labdir)
    with store.locked(name):
        rec = _require(name)
        rec["fix"]["attempts"] += 1
        _save(rec)
    hidden = [st.FaultRecord.model_validate(f["record"]) for f in rec["faults"]]
    if any(r in record.faults for r in hidden):  # the records, not ids: a later fault may reuse one
        raise UsageError(f"the exercise's faults are in lab {name}'s fault list: the exercise is not "
                         f"hidden any more (railab exercise reveal {name})")
    live = LiveLab.attach(name)
    t0 = time.monotonic()
    while True:
        # the cheap families first (no traffic, no RIB walk); the whole set once they pass
        failing = [r for r in live.check(only=_quick(rec["level"])) if r.status == "fail"]
        if not failing:
            failing = [r for r in live.check() if r.status == "fail"]
        elapsed = time.monotonic() - t0
        if not failing or elapsed >= wait:
            break
        time.sleep(poll)
    green = not failing
    with store.locked(name):
        rec = _require(name)
        # credited only when the record shows the trainee's repair of every hidden fault (on its
        # element, by a command that repairs that kind): nothing else may change the lab's faults
        # while it runs (railab.testbed.exercise.guard), and a journaled look (`ip -br link`) or
        # a command elsewhere is no repair of it: a green lab without one was repaired outside
        credit = repair_credit(rec)
        credited = green and credit["repaired"]
        if credited and rec["fix"]["verified_at"] is None:
            rec["fix"]["verified_at"] = _now()
            rec["fix"]["blunt"] = credit["blunt"]
        _save(rec)
    # with `check` switched off, the failing rows would be `railab check` by another name (they
    # name the faulty element): only their number is told; else named at the exercise's detail
    rows = disclose(name, failing[:10], pub=public_view(rec))
    shown = [] if "check" in rec.get("disabled", []) else [f"{r.check}: {r.name}" for r in rows]
    return {"green": green, "credited": credited, "blunt": bool(rec["fix"].get("blunt")) if credited else False,
            "elapsed_s": round(elapsed, 2),
            "attempts": rec["fix"]["attempts"], "failing": shown, "n_failing": len(failing),
            "rows_hidden": bool(failing) and not shown}


def reveal(labdir: Path | str, *, heal: bool = True) -> dict[str, Any]:
    """End the exercise and return the full :func:`score_sheet` (with ``faults``: ``[{"element",
    "kind", ...}]``). Faults the repair did not verify go back into the lab's fault list and,
    with ``heal`` (the default), are healed at once (every heal step is idempotent, so a fault
    the trainee half-repaired heals too); ``heal=False`` leaves them in the lab, listed by
    ``railab fault LAB list`` for ``railab fault LAB heal --all``. The command gate is lifted;
    answers are still graded afterwards but not scored. Revealing again returns the same
    sheet."""
    name, _, _ = _lab(labdir)
    with store.locked(name):
        rec = _require(name, running=False)
        if not rec.get("revealed_at"):
            rec["revealed_at"] = _now()
            _save(rec)
    if rec["fix"]["verified_at"] is None and not rec.get("returned"):
        _hand_back(name, rec, heal=heal)
    return score_sheet(name, rec)


def _hand_back(name: str, rec: dict[str, Any], *, heal: bool) -> int:
    """Put the exercise's hidden faults back into lab ``name``'s fault list and, with ``heal``,
    heal them (railab's heal: idempotent). Returns how many were healed."""
    with store.acting(name):  # the exercise's own action: the lock lets it through
        # attach may renumber a record whose id a later `railab fault` took (detach rewinds the
        # lab's fault counter so that it does not count hidden faults)
        back = F.attach(name, [st.FaultRecord.model_validate(f["record"]) for f in rec["faults"]])
        with store.locked(name):
            for f, r in zip(rec["faults"], back, strict=True):
                f["record"] = r.model_dump(mode="json")
            rec["returned"] = True
            _save(rec)
        healed = 0
        if heal:
            for r in reversed(back):
                try:
                    F.heal(name, r.id)
                    healed += 1
                except UsageError:
                    pass  # already healed
        return healed


def stop(labdir: Path | str) -> dict[str, Any]:
    """End the exercise on a lab without showing its faults (the trainer calls a running exercise
    off, or clears a revealed one): faults the repair did not verify are healed (as
    :func:`reveal` does; faults a ``reveal --keep-faults`` handed to ``railab fault`` stay in its
    list), the record is removed, and the lab takes a new ``exercise start``. Returns ``{"lab",
    "was_revealed", "healed" (faults healed now), "score" (the sheet at the stop, without seed
    and faults unless it was revealed)}``. UsageError when the lab runs no exercise."""
    name, _, _ = _lab(labdir)
    with store.locked(name):
        rec = _require(name, running=False)
        revealed = bool(rec.get("revealed_at"))
        if not revealed:
            rec["revealed_at"] = _now()  # the gate and the lock lift from here on
            rec["stopped"] = True
            _save(rec)
    healed = 0
    if rec["fix"]["verified_at"] is None and not rec.get("returned"):
        healed = _hand_back(name, rec, heal=True)
    sheet = score_sheet(name, rec)
    if not revealed:
        sheet.pop("seed", None)
        sheet.pop("faults", None)
        sheet["revealed"] = False
    store.remove(name)
    return {"lab": name, "was_revealed": revealed, "healed": healed, "score": sheet}


def score_sheet(lab: str, rec: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The score sheet of ``lab``'s exercise (None without one): level, seed, start, faults
    found/total, ``time_to_diagnosis_s`` (start to the last fault found; None until all are),
    hints used, wrong answers, the repair verdict, points; ``faults`` (element, kind, symptom,
    found, hints, note) only once revealed, so the sheet can be shown while it runs."""
    rec = rec or store.load(lab)
    if rec is None:
        return None
    t0 = rec["started_at"]
    n = len(rec["faults"])
    found = sorted(rec["found"])
    found_at = [rec["faults"][i].get("found_at") for i in found]
    ttd = round(max(found_at) - t0, 1) if found and len(found) == n else None
    wrong = sum(1 for a in rec["answers"] if not a["right"])
    verified = rec["fix"]["verified_at"]
    blunt = verified is not None and bool(rec["fix"].get("blunt"))
    points = (_POINTS_FOUND * len(found) - _POINTS_HINT * len(rec["hints"]) - _POINTS_WRONG * wrong
              + (0 if verified is None else _POINTS_BLUNT if blunt else _POINTS_REPAIR))
    sheet: dict[str, Any] = {
        "lab": rec["lab"], "level": rec["level"], "seed": rec["seed"], "started_at": _iso(t0),
        "revealed": bool(rec.get("revealed_at")), "faults_total": n, "faults_found": len(found),
        "time_to_diagnosis_s": ttd, "hints_used": len(rec["hints"]), "answers": len(rec["answers"]),
        "wrong_answers": wrong,
        "repair": {"verified": verified is not None, "blunt": blunt, "attempts": rec["fix"]["attempts"],
                   "verified_after_s": None if verified is None else round(verified - t0, 1)},
        "points": max(0, points), "max_points": _POINTS_FOUND * n + _POINTS_REPAIR,
        "disabled": rec.get("disabled", []),
    }
    if rec.get("revealed_at"):
        sheet["faults"] = [
            {"element": f["element"], "kind": f["kind"], "also_accepted": [e for e in f["accept"] if e != f["element"]],
             "symptom": f["symptom"], "found": i in found,
             "hints_used": sum(1 for h in rec["hints"] if h["fault"] == i),
             "note": (f.get("record") or {}).get("note", "")}
            for i, f in enumerate(rec["faults"])]
    return sheet


def repair_words(repair: dict[str, Any]) -> str:
    """The sheet's repair verdict in words: ``verified``, ``verified (blunt)``, ``not verified``."""
    if not repair["verified"]:
        return "not verified"
    return "verified (blunt)" if repair.get("blunt") else "verified"


def report_line(lab: str) -> str | None:
    """One line for the HTML report (no fault named while the exercise runs), or None."""
    try:
        sheet = score_sheet(lab)
    except RailabError:
        return None
    if sheet is None:
        return None
    ttd = sheet["time_to_diagnosis_s"]
    seed = f", seed {sheet['seed']}" if sheet["revealed"] else ""  # the seed gives the faults away
    words = [f"Training exercise (level {sheet['level']}{seed}, started {sheet['started_at']}"
             f"{', revealed' if sheet['revealed'] else ', running'}):",
             f"{sheet['faults_found']}/{sheet['faults_total']} fault(s) found"
             + (f" in {ttd:g} s" if ttd is not None else ""),
             f"{sheet['hints_used']} hint(s)", f"{sheet['wrong_answers']} wrong answer(s)",
             f"repair {repair_words(sheet['repair'])}",
             f"{sheet['points']}/{sheet['max_points']} points"]
    if sheet.get("faults"):
        words.append("faults: " + "; ".join(f"{f['kind']} at {f['element']}" for f in sheet["faults"]))
    return words[0] + " " + ", ".join(words[1:])
