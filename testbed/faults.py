"""Fault injection and healing on a running lab: the mechanical kernel and FRR actions.

Every fault is a :class:`railab.testbed.state.FaultRecord` in ``LabState.faults``, saved
*before* the kernel or FRR is touched, so a crash mid-way leaves a record that ``heal`` acts
on (every heal step is idempotent). ``railab down`` removes whatever a fault created: the
parking namespace is in the namespace ledger, nft tables and veths live inside the lab's
namespaces and go with them.

Kinds (``FAULT_KINDS``) and what they do to the lab (``node:port`` is the end acted on, the
far end is the other end of its link in ``lab.json``):

``link-down``     admin down of one end (``ip link set down``); the far end sees carrier lost.
``link-flap``     ``count`` cycles of down ``down_s`` / up ``up_s``; ends up, but a flapped
                  server NIC has lost its ``default ... table 100+N`` route (heal re-adds it).
``carrier-loss``  the far end moved into the lab's parking namespace (``clab-<lab>-parking``):
                  the near end stays admin up with carrier lost, the far end is gone from its node.
``cable-pull``    the veth deleted (both ends gone); heal re-plugs it with the same names, MACs
                  and MTU, and the server's address and policy route (FRR re-applies a switch
                  port's addresses when the interface reappears).
``cross-cable``   two server NICs re-cabled to each other's leaf ports (veths re-made), keeping
                  their names, MACs and addresses: a real miswire.
                  Both refuse (UsageError) an end of a link cut between hosts on a stitched
                  partitioned lab (``railab up DIR --stitch``): that end is a VXLAN device, not a veth.
``session-shut``  ``neighbor <port> shutdown`` on the node (vtysh).
``wrong-asn``     ``neighbor <port> remote-as <asn>`` pushed live (the generated config peers with
                  ``remote-as external``): the session goes down with Bad Peer AS.
``daemon-kill``   SIGKILL one FRR daemon (bgpd, zebra, bfdd, staticd). A dead zebra leaves the
                  kernel routes in place (the data plane keeps forwarding, nothing updates it);
                  a dead bgpd's routes are withdrawn by zebra (FRR without graceful restart),
                  so that node keeps only its connected and static routes; a dead bfdd makes
                  FRR 8.4 reset the node's BFD-tracked sessions once (~4 s without BGP routes
                  on mini), after which they run without BFD.
``node-off``      every daemon of the node killed and every link end of the node admin down.
``grey-loss``     an nftables ``netdev`` table on the end's egress hook dropping ``percent`` % of
                  packets (``numgen random``), or only RoCEv2 (UDP dport 4791) with ``roce_only``.
``mtu``           the end's MTU set to ``mtu`` (lab.json has the planned one).
``pfc-storm``     the end keeps sending PFC PAUSE on the lossless priority: its peer's lossless
                  queue is held paused (labs with ``lab.capacity`` only; :mod:`railab.testbed.pfcfail`).
``pfc-priority``  PFC enabled on another priority (``priority``, default 4) on the end: it
                  neither sends nor honours PAUSE for RoCE's (``lab.capacity`` only, as above).
``link-speed``    the link trained to ``gbps`` Gb/s of the real fabric, below its planned speed
                  (``links[].speed_gbps`` in lab.json), as a 400G link that came up at 200G or 100G
                  after a lane or FEC failure: both ends (a link runs at the speed both ends
                  negotiated) get their htb classes and lossless tbf at ``gbps / planned`` of
                  their lab rate (:func:`railab.testbed.capacity.retune`; ``lab.capacity`` only).
                  Every later rate change (a dilated run and its restore, the switch agent,
                  a re-made veth) reads the record and keeps it (:func:`railab.testbed.capacity.trained_speeds`);
                  the heal puts the planned rates back.

Runtimes: everything on ``netns``. On ``containerlab`` the nodes' namespaces have the same names
(``clab-<lab>-<node>``) and vtysh runs through the lab's executor, so the link, MTU, grey-loss
and BGP kinds work the same; the kinds that re-make veths or manage FRR processes
(cable-pull, cross-cable, carrier-loss, daemon-kill, node-off, restart) raise UsageError there.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from railab.errors import RailabError, UsageError
from railab.testbed import (
    capacity,
    dilation,
    pfcfail,  # PFC's failure modes (imports this module: used at call time)
)
from railab.testbed import exercise as ex
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.testbed.namespaces import create_netns, entered, exec_argv, netns_path
from railab.testbed.runtime import get_runtime
from railab.testbed.runtime.netns import NetnsRuntime
from railab.testbed.signals import signals_ignored
from railab.topologies import routing
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name

if TYPE_CHECKING:
    from pyroute2 import IPRoute

FAULT_KINDS = st.FAULT_KINDS
#: kinds that need the netns runtime (they re-make veths or manage FRR processes)
NETNS_ONLY = ("carrier-loss", "cable-pull", "cross-cable", "daemon-kill", "node-off")
#: FRR daemons ``daemon-kill`` accepts
KILLABLE = ("bgpd", "zebra", "bfdd", "staticd")
#: the parking namespace's node-name part: ``clab-<lab>-parking`` (no lab node has this name)
PARKING = "parking"
#: default peer ASN of ``wrong-asn``: a private 4-byte ASN (RFC 6996) below railab's range
WRONG_ASN_DEFAULT = 4199999999
#: nft table name of a grey-loss fault: ``railab_<fault id>`` (family netdev), unless the
#: ``table`` param names it (training exercises: a name that does not say railab)
NFT_PREFIX = "railab_"
ROCE_UDP_PORT = 4791

__all__ = ["FAULT_KINDS", "inject", "heal", "list_faults", "restart_node", "parking_namespace",
           "detach", "attach", "swap_cables"]


# ---- lab handle -----------------------------------------------------------------------------
class _Lab:
    """The lab a fault call acts on: name, record, spec, runtime."""

    def __init__(self, labdir: Path | str) -> None:
        ref = resolve(labdir)
        self.record = ref.require_up()
        self.name = ref.name
        self.spec: LabSpec = ref.spec()
        self.runtime = self.record.runtime

    def ns(self, node: str) -> str:
        return self.record.namespaces.get(node) or netns_name(self.name, node)

    def save(self) -> None:
        """Write this command's ``faults`` and ``fault_seq`` into the lab's record as it is now
        (:func:`railab.testbed.state.modify`): the fields a fault command owns (fault commands
        run one at a time, ``_locked``), never the rest of a record read earlier, which another
        command (a load run's PFC agent record, ``lb``) may have changed meanwhile. Never brings
        back a lab another command took down (RailabError)."""
        faults, seq = list(self.record.faults), self.record.fault_seq

        def mine(rec: st.LabState) -> None:
            rec.faults, rec.fault_seq = faults, seq
        self.record = st.modify(self.name, mine)

    def reload(self) -> None:
        rec = st.load(self.name)
        if rec is None:
            raise RailabError(f"lab {self.name} went down meanwhile")
        self.record = rec

    @property
    def netns_rt(self):
        rt = get_runtime(self.runtime)
        if not isinstance(rt, NetnsRuntime):
            raise UsageError(f"lab {self.name} runs on {self.runtime}: this needs the netns runtime "
                             f"(railab up --runtime netns)")
        return rt

    def vtysh(self, node: str, *lines: str) -> None:
        """Run ``conf t`` + ``lines`` on ``node``; RailabError with vtysh's words on failure
        (vtysh exits 0 on some config errors: its output is checked too)."""
        argv = ["vtysh", "-c", "conf t"]
        for line in lines:
            argv += ["-c", line]
        res = get_runtime(self.runtime).executor(self.name).run(node, argv)
        text = (res.stdout + res.stderr).strip()
        if not res.ok or re.search(r"^%|Unknown command|error", text, re.M | re.I):
            raise RailabError(f"{node}: vtysh {' / '.join(lines)} failed: {text[:300] or res.rc}")


@contextmanager
def _locked(lab: str) -> Iterator[None]:
    """Serialise fault changes of one lab (``/run/railab/<lab>/faults.lock``, flock)."""
    path = st.lab_dir(lab) / "faults.lock"
    if st.gone(lab) or not path.parent.is_dir():  # its down removed the run directory: no re-making it
        raise RailabError(f"lab {lab} went down meanwhile (railab down from another command)")
    try:
        f = open(path, "w")
    except FileNotFoundError:
        raise RailabError(f"lab {lab} went down meanwhile (railab down from another command)") from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _ipr(ns: str) -> Iterator[IPRoute]:
    """An rtnetlink socket inside namespace ``ns`` (opened there, then used from here).
    pyroute2 is imported here, not at module load: its package import costs ~0.7 s, which every
    ``railab`` command paid."""
    from pyroute2 import IPRoute

    if not netns_path(ns).exists():
        raise RailabError(f"namespace {ns} does not exist")
    with entered(ns):
        ipr = IPRoute()
    try:
        yield ipr
    finally:
        ipr.close()


def _index(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def _ignore_exists(fn, *args, **kw) -> None:
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        fn(*args, **kw)
    except NetlinkError as exc:
        if exc.code != 17:  # EEXIST
            raise


# ---- element resolution ---------------------------------------------------------------------
def _split(ref: str) -> tuple[str, str | None]:
    node, _, port = ref.partition(":")
    return node, (port or None)


def _node(spec: LabSpec, node: str) -> None:
    try:
        spec.node(node)
    except KeyError:
        names = ", ".join(n.name for n in spec.nodes[:12])
        raise UsageError(f"lab {spec.name} has no node {node!r} (nodes: {names}, ...)") from None


def resolve_link(spec: LabSpec, node_a: str, node_b: str | None = None,
                 port: str | None = None) -> tuple[str, str, str, str]:
    """``(node, port, peer_node, peer_port)`` of the link a user names: ``node_a`` with ``port``
    (or ``node_a`` given as ``node:port``), or the first link (port order) between ``node_a`` and
    ``node_b``. The returned ``node`` is ``node_a``'s end. UsageError naming the node's links
    when there is no such link."""
    node_a, p = _split(node_a)
    port = port or p
    peer_hint, peer_port_hint = _split(node_b) if node_b else (None, None)
    _node(spec, node_a)
    if peer_hint:
        _node(spec, peer_hint)
    links = spec.links_of(node_a)
    if port:
        match = [lk for lk in links if lk[0] == port]
        if not match:
            raise UsageError(f"{node_a} has no link on {port} (its links: "
                             f"{', '.join(f'{p}->{n}:{q}' for p, n, q in links[:8])})")
    elif peer_hint:
        match = [lk for lk in links if lk[1] == peer_hint and (peer_port_hint in (None, lk[2]))]
        if not match:
            raise UsageError(f"{node_a} has no link to {node_b}: give a port (NODE:PORT); its links: "
                             f"{', '.join(f'{p}->{n}:{q}' for p, n, q in links[:8])}")
    else:
        raise UsageError(f"name the link: {node_a} NODE_B, or {node_a}:PORT")
    p, peer, peer_port = match[0]
    if peer_hint and peer != peer_hint:
        raise UsageError(f"{node_a}:{p} leads to {peer}:{peer_port}, not {node_b}")
    return node_a, p, peer, peer_port


def parking_namespace(lab: str) -> str:
    """The namespace where ``carrier-loss`` parks far ends: ``clab-<lab>-parking``."""
    return netns_name(lab, PARKING)


# ---- server policy routing ------------------------------------------------------------------
def restore_server_nic(lab: _Lab, server: str, iface: str) -> bool:
    """Re-add what ``lab.json`` says server NIC ``server:iface`` holds: its address, its source
    rule (``pref 1000+N``) and its ``default via <leaf> table 100+N`` route (all idempotent).
    Skips silently (returns False) when the interface is absent or down (a route via a down
    link cannot be added; the heal of that fault re-adds it); True when restored."""
    nic = next((n for n in lab.spec.nics_of(server) if n.interface == iface), None)
    if nic is None:
        return False
    with _ipr(lab.ns(server)) as ipr:
        idx = _index(ipr, iface)
        if idx is None:
            return False
        link = ipr.get_links(idx)[0]
        if not link["flags"] & 1:
            return False
        addr, plen = str(nic.address.ip), int(nic.address.network.prefixlen)
        _ignore_exists(ipr.addr, "add", index=idx, address=addr, prefixlen=plen)
        _ignore_exists(ipr.rule, "add", src=addr, src_len=32, table=nic.table,
                       priority=routing.rule_priority(nic.nic))
        ipr.route("replace", dst="0.0.0.0/0", gateway=str(nic.gateway), oif=idx, table=nic.table)
    return True


def _restore_ends(lab: _Lab, *ends: tuple[str | None, str | None]) -> None:
    for node, port in ends:
        if node and port and lab.spec.nics_of(node):
            restore_server_nic(lab, node, port)


def _set_state(lab: _Lab, node: str, port: str, state: str) -> None:
    with _ipr(lab.ns(node)) as ipr:
        idx = _index(ipr, port)
        if idx is None:
            raise RailabError(f"{node} has no interface {port} (is another fault holding it? "
                              f"railab fault {lab.name} list)")
        ipr.link("set", index=idx, state=state)


# ---- the record -----------------------------------------------------------------------------
def _busy(lab: _Lab, elements: set[tuple[str, str | None]]) -> None:
    """UsageError when a fault already holds one of ``elements`` (node, port; port None = node)."""
    for f in lab.record.faults:
        held = {(f.node, f.port), (f.peer_node, f.peer_port)}
        if f.kind == "node-off" or (f.kind == "daemon-kill"):
            held.add((f.node, None))
        for node, port in elements:
            if (node, port) in held or (node, None) in held and f.kind == "node-off":
                raise UsageError(f"{node}{':' + port if port else ''} already has fault {f.id} "
                                 f"({f.kind}: {f.note}): heal it first (railab fault {lab.name} heal {f.id})")


def _new(lab: _Lab, kind: str, node: str, port: str | None = None, peer_node: str | None = None,
         peer_port: str | None = None, params: dict[str, Any] | None = None, note: str = "") -> st.FaultRecord:
    lab.record.fault_seq += 1
    rec = st.FaultRecord(id=f"f{lab.record.fault_seq}", kind=kind, node=node, port=port,
                         peer_node=peer_node, peer_port=peer_port, params=dict(params or {}),
                         note=note)
    lab.record.faults = [*lab.record.faults, rec]
    lab.save()
    return rec


def _update(lab: _Lab, rec: st.FaultRecord) -> None:
    lab.record.faults = [rec if f.id == rec.id else f for f in lab.record.faults]
    lab.save()


def list_faults(labdir: Path | str) -> list[st.FaultRecord]:
    """The faults injected into the lab and not yet healed, in injection order.
    RailabError when the lab is not up."""
    return list(_Lab(labdir).record.faults)


def detach(labdir: Path | str, fault_ids: list[str]) -> list[st.FaultRecord]:
    """Take faults ``fault_ids`` out of ``LabState.faults`` without healing them and return
    their records: the fault stays in the lab, but ``status``, ``inspect``, ``check``'s reasons,
    the report and ``fault list/heal`` no longer see it (training exercises,
    railab.checks.exercise, keep the records hidden). When the detached faults are the newest
    ones (``f<K>`` .. ``f<fault_seq>``), ``fault_seq`` is rewound to ``K - 1``, so the counter in
    ``inspect`` does not count hidden faults either; a later fault may then reuse a hidden id,
    which :func:`attach` renumbers (kernel names never derive from a hidden fault's id: an
    exercise's grey-loss table is named by its ``table`` param). RailabError when the lab is not
    up."""
    lab = _Lab(labdir)
    with _locked(lab.name):
        ex.guard(lab.name, "fault")
        lab.reload()
        out = [f for f in lab.record.faults if f.id in set(fault_ids)]
        lab.record.faults = [f for f in lab.record.faults if f.id not in set(fault_ids)]
        nums = sorted(int(f.id[1:]) for f in out)
        if nums and nums == list(range(nums[0], lab.record.fault_seq + 1)):
            lab.record.fault_seq = nums[0] - 1
        lab.save()
        return out


def attach(labdir: Path | str, records: list[st.FaultRecord]) -> list[st.FaultRecord]:
    """Put detached fault ``records`` back into ``LabState.faults`` (a record already there, equal
    in every field, is kept as it is) so ``railab fault LAB heal`` can undo them
    (every heal step is idempotent: a fault the trainee already repaired heals to the same
    planned state), and return them as attached: a record whose id another fault took
    meanwhile gets the next free id (``fault_seq`` + 1), and ``fault_seq`` never ends below an
    attached id."""
    lab = _Lab(labdir)
    with _locked(lab.name):
        ex.guard(lab.name, "fault")
        lab.reload()
        have = {f.id: f for f in lab.record.faults}
        out: list[st.FaultRecord] = []
        for r in records:
            f = have.get(r.id)
            if f is not None and f == r:
                out.append(f)
                continue
            if f is not None:
                lab.record.fault_seq += 1
                r = r.model_copy(update={"id": f"f{lab.record.fault_seq}"})
            lab.record.fault_seq = max(lab.record.fault_seq, int(r.id[1:]))
            have[r.id] = r
            lab.record.faults = [*lab.record.faults, r]
            out.append(r)
        lab.save()
        return out


# ---- inject ---------------------------------------------------------------------------------
def inject(labdir: Path | str, kind: str, node_a: str, node_b: str | None = None, *,
           port: str | None = None, **params: Any) -> st.FaultRecord:
    """Inject one fault of ``kind`` (see the module docstring) and return its record (already
    saved in ``LabState.faults``).

    ``node_a``/``node_b``: the element. Link kinds take ``node_a node_b`` (first link between
    them) or ``node_a`` with ``port`` (or ``"node:port"``); the end acted on is ``node_a``'s
    unless ``end="<node_b>"`` (or ``end="b"``). ``cross-cable`` takes two server NICs
    (``"srv1:eth1", "srv2:eth1"``); ``daemon-kill`` a node and ``daemon=``; ``node-off`` a node.
    Params: ``count`` (3), ``down_s`` (1.0), ``up_s`` (1.0) for link-flap; ``percent`` (0-100)
    and ``roce_only`` (and ``table``, the nft table's name) for grey-loss; ``mtu`` for mtu; ``asn`` for wrong-asn
    (default :data:`WRONG_ASN_DEFAULT`); ``daemon`` for daemon-kill; ``gbps`` (Gb/s of the real
    fabric, above 0 and below the link's planned speed) for link-speed.

    Raises UsageError (nothing changed) for an unknown kind, element or parameter, an element
    another fault already holds, a lab that runs a training exercise
    (:func:`railab.testbed.exercise.guard`: so do :func:`heal`, :func:`attach`, :func:`detach`,
    and :func:`restart_node` and :func:`swap_cables` where the level does not allow them), or a
    kind the lab's runtime does not support; RailabError
    when the kernel or FRR refuses (the record stays: ``heal`` undoes the part done).
    """
    if kind not in FAULT_KINDS:
        raise UsageError(f"unknown fault kind {kind!r}: use one of {', '.join(FAULT_KINDS)}")
    lab = _Lab(labdir)
    if lab.runtime != "netns" and kind in NETNS_ONLY:
        raise UsageError(f"fault {kind} needs the netns runtime; lab {lab.name} runs on {lab.runtime} "
                         f"(supported there: {', '.join(k for k in FAULT_KINDS if k not in NETNS_ONLY)})")
    with _locked(lab.name):
        ex.guard(lab.name, "fault")  # the exercise lock: nothing changes a lab's faults while it runs
        lab.reload()
        seq = lab.record.fault_seq
        try:
            return _INJECT[kind](lab, node_a, node_b, port, dict(params))
        except BaseException:
            # a step failed, or Ctrl-C / SIGTERM came (e.g. mid link-flap), after the record was
            # saved: undo the part done, then drop it (a second Ctrl-C does not cut the undo short)
            with signals_ignored():
                lab.reload()
                mine = [f for f in lab.record.faults if int(f.id[1:]) > seq]
                for rec in mine:
                    try:
                        _HEAL[rec.kind](lab, rec)
                    except Exception:
                        continue  # keep the record: `railab fault LAB heal ID` retries
                    lab.reload()
                    lab.record.faults = [f for f in lab.record.faults if f.id != rec.id]
                    lab.save()
            raise


def cli_params(kind: str, *, end: str | None = None, count: int = 3, down_s: float = 1.0, up_s: float = 1.0,
               percent: float | None = None, roce_only: bool = False, mtu: int | None = None,
               asn: int | None = None, daemon: str = "bgpd",
               priority: int | None = None, gbps: float | None = None) -> dict[str, Any]:
    """The ``**params`` of :func:`inject` for fault ``kind`` from the command-line options that
    ``railab fault`` and ``railab drill`` share (only the ones that kind reads; :func:`inject`
    validates them). ``down_s``/``up_s`` seconds, ``percent`` 0-100, ``mtu`` bytes, ``priority``
    0-7 (pfc-priority), ``gbps`` Gb/s of the real fabric (link-speed)."""
    params: dict[str, Any] = {}
    if end is not None:
        params["end"] = end
    if kind == "link-flap":
        params.update(count=count, down_s=down_s, up_s=up_s)
    if kind == "grey-loss":
        params.update(percent=percent, roce_only=roce_only)
    if kind == "mtu":
        params["mtu"] = mtu
    if kind == "wrong-asn" and asn is not None:
        params["asn"] = asn
    if kind == "daemon-kill":
        params["daemon"] = daemon
    if kind == "pfc-priority" and priority is not None:
        params["priority"] = priority
    if kind == "link-speed" and gbps is not None:
        params["gbps"] = gbps
    return params


def _pop(params: dict, key: str, default: Any = None, cast=None) -> Any:
    value = params.pop(key, default)
    if value is None or cast is None:
        return value
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise UsageError(f"{key}={value!r}: must be a {cast.__name__}") from None


def _no_more(kind: str, params: dict) -> None:
    if params:
        raise UsageError(f"fault {kind} takes no parameter {', '.join(sorted(params))}")


def _link_end(lab: _Lab, node_a, node_b, port, params) -> tuple[str, str, str, str]:
    node, p, peer, peer_port = resolve_link(lab.spec, node_a, node_b, port)
    end = params.pop("end", None)
    if end in (None, "a", node):
        return node, p, peer, peer_port
    if end in ("b", peer):
        return peer, peer_port, node, p
    raise UsageError(f"--end {end!r}: use {node} or {peer} (the two ends of {node}:{p} <-> {peer}:{peer_port})")


def _inject_link_down(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    _no_more("link-down", params)
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "link-down", node, p, peer, pp,
               note=f"admin down {node}:{p} (link to {peer}:{pp})")
    _set_state(lab, node, p, "down")
    return rec


def _inject_link_flap(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    count = _pop(params, "count", 3, int)
    down_s = _pop(params, "down_s", 1.0, float)
    up_s = _pop(params, "up_s", 1.0, float)
    _no_more("link-flap", params)
    if count < 1 or down_s < 0 or up_s < 0:
        raise UsageError("link-flap: count >= 1 and down/up times >= 0 s")
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "link-flap", node, p, peer, pp,
               params={"count": count, "down_s": down_s, "up_s": up_s},
               note=f"flapped {node}:{p} (link to {peer}:{pp}) {count} times, {down_s:g} s down / {up_s:g} s up")
    for i in range(count):
        _set_state(lab, node, p, "down")
        time.sleep(down_s)
        _set_state(lab, node, p, "up")
        if i < count - 1:
            time.sleep(up_s)
    return rec


def _ensure_parking(lab: _Lab) -> str:
    ns = parking_namespace(lab.name)
    if not netns_path(ns).exists():
        st.ledger_add([ns], lab.name)  # before it exists: `railab down` removes it
        create_netns([ns])
    return ns


def _move(src_ns: str, ifname: str, dst_ns: str) -> None:
    fd = os.open(netns_path(dst_ns), os.O_RDONLY)
    try:
        with _ipr(src_ns) as ipr:
            idx = _index(ipr, ifname)
            if idx is None:
                return  # already moved (an earlier, interrupted call)
            ipr.link("set", index=idx, state="down")
            ipr.link("set", index=idx, net_ns_fd=fd)
    finally:
        os.close(fd)


def _inject_carrier_loss(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    _no_more("carrier-loss", params)
    _busy(lab, {(node, p), (peer, pp)})
    # the parked interface keeps its name; two parked ends with one name would clash
    if any(f.kind == "carrier-loss" and f.peer_port == pp for f in lab.record.faults):
        raise UsageError(f"another carrier-loss already parks a {pp}: heal it first")
    park = parking_namespace(lab.name)
    rec = _new(lab, "carrier-loss", node, p, peer, pp, params={"parking": park},
               note=f"carrier lost on {node}:{p}: far end {peer}:{pp} unplugged (parked)")
    _ensure_parking(lab)
    _move(lab.ns(peer), pp, park)
    return rec


def _veth_ends(lab: _Lab, node: str, port: str) -> dict[str, Any]:
    with _ipr(lab.ns(node)) as ipr:
        idx = _index(ipr, port)
        if idx is None:
            raise RailabError(f"{node} has no interface {port}")
        link = ipr.get_links(idx)[0]
        return {"mac": link.get_attr("IFLA_ADDRESS"), "mtu": link.get_attr("IFLA_MTU")}


def _mtu_of(lab: _Lab, node: str, port: str) -> int:
    return lab.spec.link_on(node, port).mtu


def _make_veth(lab: _Lab, a: tuple[str, str, str | None], b: tuple[str, str, str | None], mtu: int) -> None:
    """A veth ``a`` <-> ``b`` (each ``(node, ifname, mac)``), both ends up, MTU ``mtu``; an end
    that already exists is left alone (idempotent re-plug)."""
    (na, ia, ma), (nb, ib, mb) = a, b
    with _ipr(lab.ns(na)) as ipa:
        if _index(ipa, ia) is None:
            fd = os.open(netns_path(lab.ns(nb)), os.O_RDONLY)
            try:
                peer = {"ifname": ib, "net_ns_fd": fd, "mtu": mtu}
                if mb:
                    peer["address"] = mb
                kw = {"address": ma} if ma else {}
                ipa.link("add", ifname=ia, kind="veth", mtu=mtu, peer=peer, **kw)
            finally:
                os.close(fd)
        ipa.link("set", index=_index(ipa, ia), state="up")
    with _ipr(lab.ns(nb)) as ipb:
        idx = _index(ipb, ib)
        if idx is not None:
            ipb.link("set", index=idx, state="up")


def _reshape(lab: _Lab, *ends: tuple[str, str]) -> None:
    """Rebuild the ``lab.capacity`` queues and receive steering of link ends a fault re-made or
    moved back (:func:`railab.testbed.capacity.reapply`): the kernel drops them with the veth,
    and a re-plugged port then ran unshaped (no queue, no ECN marks) for the rest of the lab's
    life. Nothing on a lab without ``lab.capacity``."""
    capacity.reapply(lab.spec, lab.ns, ends)


def _delete_link(lab: _Lab, node: str, port: str) -> None:
    with _ipr(lab.ns(node)) as ipr:
        idx = _index(ipr, port)
        if idx is not None:
            ipr.link("del", index=idx)


def cut_links_at(record: st.LabState, ends: set[tuple[str, str]]) -> list[dict]:
    """The tunnels of ``record``'s one-machine partition proof (``railab up DIR --stitch``, the
    record's ``stitch`` entry: railab.testbed.stitch) whose ``(node, interface)`` is in ``ends``:
    the ends of a cut link, which are kernel VXLAN devices, not veths. [] on an unstitched lab."""
    tunnels = (record.get("stitch") or {}).get("tunnels", [])
    return [t for t in tunnels if (t["node"], t["interface"]) in ends]


def _refuse_cut(lab: _Lab, kind: str, ends: set[tuple[str, str]]) -> None:
    """UsageError (nothing changed) when ``kind`` (which deletes and re-makes veths) would act on
    a link cut between hosts: healing would plug a veth where the VXLAN device was."""
    cut = cut_links_at(lab.record, ends)
    if cut:
        t = cut[0]
        raise UsageError(f"fault {kind}: {t['node']}:{t['interface']} is a cut link (VXLAN VNI {t['vni']}, "
                         f"{t['host']} -> {t['remote']}) of partitioned lab {lab.name}: {kind} deletes and "
                         f"re-makes veths, so it cannot act on it; inject link-down, carrier-loss or "
                         f"link-flap on a cut link instead (docs/scale-out.md)")


def _inject_cable_pull(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    _no_more("cable-pull", params)
    _refuse_cut(lab, "cable-pull", {(node, p), (peer, pp)})
    _busy(lab, {(node, p), (peer, pp)})
    a, b = _veth_ends(lab, node, p), _veth_ends(lab, peer, pp)
    rec = _new(lab, "cable-pull", node, p, peer, pp,
               params={"mac": a["mac"], "peer_mac": b["mac"], "mtu": a["mtu"]},
               note=f"cable {node}:{p} <-> {peer}:{pp} pulled (veth deleted)")
    _delete_link(lab, node, p)
    return rec


def _inject_cross_cable(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    _no_more("cross-cable", params)
    (s1, i1), (s2, i2) = _split(node_a), _split(node_b or "")
    if port and not i1:
        i1 = port
    if not (i1 and i2):
        raise UsageError("cross-cable takes two server NICs: SERVER:PORT SERVER:PORT (e.g. srv2:eth1 srv2:eth3)")
    ends = []
    for s, i in ((s1, i1), (s2, i2)):
        _node(lab.spec, s)
        if not any(n.interface == i for n in lab.spec.nics_of(s)):
            raise UsageError(f"{s}:{i} is not a server NIC of lab {lab.name}")
        ends.append((s, i, *lab.spec.peer(s, i)))
    if (s1, i1) == (s2, i2):
        raise UsageError("cross-cable needs two different NICs")
    (_, _, l1, p1), (_, _, l2, p2) = ends
    _refuse_cut(lab, "cross-cable", {(s1, i1), (s2, i2), (l1, p1), (l2, p2)})
    _busy(lab, {(s1, i1), (s2, i2), (l1, p1), (l2, p2)})
    macs = {f"{n}:{i}": _veth_ends(lab, n, i)["mac"] for n, i in ((s1, i1), (s2, i2), (l1, p1), (l2, p2))}
    rec = _new(lab, "cross-cable", s1, i1, s2, i2,
               params={"macs": macs, "leaf": l1, "leaf_port": p1, "peer_leaf": l2, "peer_leaf_port": p2},
               note=f"{s1}:{i1} and {s2}:{i2} re-cabled to each other's leaf ports "
                    f"({s1}:{i1} -> {l2}:{p2}, {s2}:{i2} -> {l1}:{p1})")
    _delete_link(lab, s1, i1)
    _delete_link(lab, s2, i2)
    _make_veth(lab, (s1, i1, macs[f"{s1}:{i1}"]), (l2, p2, macs[f"{l2}:{p2}"]), _mtu_of(lab, s1, i1))
    _make_veth(lab, (s2, i2, macs[f"{s2}:{i2}"]), (l1, p1, macs[f"{l1}:{p1}"]), _mtu_of(lab, s2, i2))
    _reshape(lab, (s1, i1), (s2, i2), (l1, p1), (l2, p2))
    _restore_ends(lab, (s1, i1), (s2, i2))
    return rec


def _session(lab: _Lab, node_a, node_b, port) -> tuple[str, str, str, str, int]:
    node, p, peer, pp = resolve_link(lab.spec, node_a, node_b, port)
    s = lab.spec.session_on(node, p)
    if s is None:
        raise UsageError(f"no BGP session runs on {node}:{p} (server links carry none): name a "
                         f"leaf-spine link")
    asn = s.local_asn if (s.node, s.interface) == (node, p) else s.remote_asn
    return node, p, peer, pp, asn


def _inject_session_shut(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    _no_more("session-shut", params)
    node, p, peer, pp, asn = _session(lab, node_a, node_b, port)
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "session-shut", node, p, peer, pp, params={"asn": asn},
               note=f"BGP session {node}:{p} <-> {peer}:{pp} shut on {node} (neighbor {p} shutdown)")
    lab.vtysh(node, f"router bgp {asn}", f"neighbor {p} shutdown")
    return rec


def _neighbor_lines(config: str, asn: int, port: str) -> list[list[str]]:
    """The vtysh line sequences that (re)configure neighbor ``port`` as ``config`` (an frr.conf)
    does: ``[["router bgp A", "neighbor p interface peer-group X"], ["router bgp A",
    "address-family ipv4 unicast", "neighbor p activate"], ...]``."""
    out: list[list[str]] = []
    ctx: list[str] = []
    in_bgp = False
    for raw in config.splitlines():
        line = raw.strip()
        if raw.startswith("router bgp"):
            in_bgp = raw.split()[2:3] == [str(asn)]
            ctx = [line]
            continue
        if not in_bgp:
            continue
        if line.startswith("address-family"):
            ctx = ctx[:1] + [line]
        elif line == "exit-address-family":
            ctx = ctx[:1]
        elif line == "exit" and len(ctx) == 1:
            in_bgp = False
        elif line.startswith(f"neighbor {port} "):
            out.append([*ctx, line])
    return out


def _inject_wrong_asn(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp, asn = _session(lab, node_a, node_b, port)
    wrong = _pop(params, "asn", WRONG_ASN_DEFAULT, int)
    _no_more("wrong-asn", params)
    if not 1 <= wrong <= 4294967295:
        raise UsageError(f"asn {wrong}: must be 1..4294967295")
    real = lab.spec.node(peer).asn
    if wrong == real:
        raise UsageError(f"asn {wrong} is {peer}'s real ASN: give another (--asn)")
    config = Path(lab.record.routers[node].config).read_text() if node in lab.record.routers else ""
    if not _neighbor_lines(config, asn, p):
        raise UsageError(f"{node}'s frr.conf has no `neighbor {p}` under router bgp {asn}")
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "wrong-asn", node, p, peer, pp, params={"asn": wrong, "local_asn": asn, "peer_asn": real},
               note=f"{node} expects AS {wrong} on {p} (peer {peer} is AS {real}): neighbor {p} remote-as {wrong}")
    # a peer-group member cannot override the group's `remote-as external`: the neighbour
    # leaves the group and comes back with an explicit (wrong) remote-as
    lab.vtysh(node, f"router bgp {asn}", f"no neighbor {p} interface",
              f"neighbor {p} interface remote-as {wrong}", f"neighbor {p} timers connect 1")
    return rec


def _inject_daemon_kill(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    daemon = _pop(params, "daemon", "bgpd")
    _no_more("daemon-kill", params)
    node, _ = _split(node_a)
    _node(lab.spec, node)
    if node_b:
        raise UsageError("daemon-kill takes one node")
    if daemon not in KILLABLE:
        raise UsageError(f"daemon {daemon!r}: use one of {', '.join(KILLABLE)}")
    rt = lab.netns_rt
    alive = rt.node_daemons(lab.name, node)
    if daemon not in alive:
        raise UsageError(f"{node} does not run {daemon} (it runs {', '.join(alive)})")
    if not alive[daemon]:
        raise UsageError(f"{daemon} on {node} is already dead: railab restart {lab.name} {node}")
    if any(f.node == node and f.kind in ("daemon-kill", "node-off") and
           (f.kind == "node-off" or f.params.get("daemon") == daemon) for f in lab.record.faults):
        raise UsageError(f"{node} {daemon} is already held by a fault: railab fault {lab.name} list")
    effect = {"bgpd": "zebra withdraws its BGP routes from the kernel (no graceful restart)",
              "zebra": "the kernel keeps the routes it has; FIB updates stop",
              "bfdd": "BGP resets its BFD-tracked sessions once, then runs without BFD",
              "staticd": "the kernel keeps the blackhole aggregate"}[daemon]
    rec = _new(lab, "daemon-kill", node, params={"daemon": daemon},
               note=f"{daemon} killed on {node} (SIGKILL: {effect})")
    rt.kill_daemons(lab.name, node, [daemon])
    return rec


def _inject_node_off(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    _no_more("node-off", params)
    node, _ = _split(node_a)
    _node(lab.spec, node)
    if node_b:
        raise UsageError("node-off takes one node")
    ports = [p for p, _, _ in lab.spec.links_of(node)]
    _busy(lab, {(node, None), *((node, p) for p in ports)})
    if any(f.node == node or f.peer_node == node for f in lab.record.faults):
        held = next(f for f in lab.record.faults if node in (f.node, f.peer_node))
        raise UsageError(f"{node} already has fault {held.id} ({held.kind}): heal it first "
                         f"(railab fault {lab.name} heal {held.id})")
    rt = lab.netns_rt
    what = "every daemon killed, " if node in lab.record.routers else ""  # a server runs no daemon
    rec = _new(lab, "node-off", node, params={"ports": ports},
               note=f"{node} powered off: {what}{len(ports)} link(s) down")
    if node in lab.record.routers:
        rt.kill_daemons(lab.name, node)
    for p in ports:
        _set_state(lab, node, p, "down")
    return rec


def _nft(lab: _Lab, node: str, script: str, *, check: bool = True) -> subprocess.CompletedProcess:
    argv = exec_argv(lab.ns(node), ["nft", "-f", "-"])
    try:
        res = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise RailabError("nsenter not found (util-linux)") from None
    if res.returncode == 127 or "failed to execute nft" in res.stderr:
        raise UsageError("grey-loss needs nftables: apt-get install nftables")
    if check and res.returncode != 0:
        raise RailabError(f"{node}: nft refused the grey-loss table: {res.stderr.strip()[:300]}")
    return res


def _inject_grey_loss(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    roce_only = bool(params.pop("roce_only", False))
    percent = _pop(params, "percent", None, float)
    table = params.pop("table", None)
    if percent is None and roce_only:
        percent = 100.0
    _no_more("grey-loss", params)
    if percent is None:
        raise UsageError("grey-loss: give --percent P (0 < P <= 100), or --roce-only")
    if not 0 < percent <= 100:
        raise UsageError(f"percent {percent:g}: must be > 0 and <= 100")
    if table is not None and not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", str(table)):
        raise UsageError(f"grey-loss table {table!r}: use 1-32 of a-z, 0-9, _ (starting with a letter)")
    _busy(lab, {(node, p), (peer, pp)})
    what = "RoCEv2 (UDP 4791) packets" if roce_only else "packets"
    extra = {} if table is None else {"table": str(table)}
    rec = _new(lab, "grey-loss", node, p, peer, pp,
               params={"percent": percent, "roce_only": roce_only, **extra},
               note=f"{node}:{p} silently drops {percent:g} % of egress {what} (link to {peer}:{pp})")
    table = _grey_table(rec)
    match = f"meta l4proto udp udp dport {ROCE_UDP_PORT} " if roce_only else ""
    # numgen random mod 10000 < percent x 100: 0.01 % resolution
    rand = "" if percent >= 100 else f"numgen random mod 10000 < {int(round(percent * 100))} "
    _nft(lab, node, f"table netdev {table} {{\n chain egress {{\n"
                    f"  type filter hook egress device \"{p}\" priority 0; policy accept;\n"
                    f"  {match}{rand}counter drop\n }}\n}}\n")
    return rec


def _inject_mtu(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    mtu = _pop(params, "mtu", None, int)
    _no_more("mtu", params)
    if mtu is None:
        raise UsageError("mtu: give --mtu N (68..65535)")
    if not 68 <= mtu <= 65535:  # IPv4's minimum (RFC 791) .. the kernel's maximum
        raise UsageError(f"mtu: --mtu {mtu} is out of range: give 68..65535")
    planned = _mtu_of(lab, node, p)
    if mtu == planned:
        raise UsageError(f"{node}:{p} is planned with MTU {planned} already: give another --mtu")
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "mtu", node, p, peer, pp, params={"mtu": mtu, "planned_mtu": planned},
               note=f"MTU of {node}:{p} set to {mtu} (planned {planned}; far end {peer}:{pp})")
    with _ipr(lab.ns(node)) as ipr:
        ipr.link("set", index=_index(ipr, p), mtu=mtu)
    return rec


#: The speeds (Gb/s) a ``link-speed`` fault may train a link to: IEEE 802.3's Ethernet rates from
#: 10 Gb/s up (a 400G port falls back to 200G or 100G after a lane or FEC failure). Not any
#: number: a speed within the ``speed`` check's 1 % of the planned one would hide the fault from
#: it, and far below 10 Gb/s the lab rate's htb classes fall under tc's resolution (a reviewer's
#: 0.01 Gb/s left a class at a wrapped 18446744 Tbit/s).
TRAINED_SPEEDS = (10.0, 25.0, 40.0, 50.0, 100.0, 200.0, 400.0, 800.0)


def planned_speed(spec: LabSpec, node: str, port: str) -> int:
    """The planned speed (Gb/s of the real fabric, ``links[].speed_gbps`` in lab.json) of the
    link on ``node:port``."""
    for lk in spec.links:
        if (node, port) in ((lk.a.node, lk.a.interface), (lk.b.node, lk.b.interface)):
            return int(lk.speed_gbps)
    raise UsageError(f"{node}:{port} is on no link of lab {spec.name}")


def _retune_link(lab: _Lab, ends: list[tuple[str, str]]) -> None:
    """Put ``ends`` at the rate the faults recorded now give them (a ``link-speed`` fault's
    trained speed, else the planned one), at the rate the lab runs at now (a dilated run's
    while one runs: :func:`railab.testbed.dilation.running_spec`)."""
    capacity.retune(dilation.running_spec(lab.spec), lab.ns, ends,
                    speeds=capacity.trained_speeds(lab.name))


def _inject_link_speed(lab: _Lab, node_a, node_b, port, params) -> st.FaultRecord:
    if not capacity.enabled(lab.spec):
        raise UsageError(f"link-speed needs a lab with lab.capacity (ports shaped at a lab rate), "
                         f"e.g. mini-lossless; lab {lab.name} has none: its veths have no speed to lower")
    node, p, peer, pp = _link_end(lab, node_a, node_b, port, params)
    gbps = _pop(params, "gbps", None, float)
    _no_more("link-speed", params)
    planned = planned_speed(lab.spec, node, p)
    if gbps is None:
        raise UsageError(f"link-speed: give --gbps G, the speed {node}:{p} <-> {peer}:{pp} trained to "
                         f"(Gb/s of the real fabric, below its planned {planned})")
    speeds = [g for g in TRAINED_SPEEDS if g < planned]
    if not 0 < gbps < planned:
        raise UsageError(f"link-speed: --gbps {gbps:g} must be above 0 and below the link's planned "
                         f"speed, {planned} Gb/s: one of {', '.join(f'{g:g}' for g in speeds)}")
    if gbps not in speeds:
        raise UsageError(f"link-speed: --gbps {gbps:g} is not a speed an Ethernet port trains to: use one of "
                         f"{', '.join(f'{g:g}' for g in speeds)} (Gb/s, below the planned {planned})")
    _busy(lab, {(node, p), (peer, pp)})
    rec = _new(lab, "link-speed", node, p, peer, pp, params={"gbps": gbps, "planned_gbps": planned},
               note=f"{node}:{p} <-> {peer}:{pp} trained to {gbps:g} Gb/s (planned {planned}): "
                    f"both ends run at {gbps / planned:.0%} of their rate")
    _retune_link(lab, [(node, p), (peer, pp)])  # the record is saved: the trained speed applies
    return rec


def _heal_link_speed(lab: _Lab, rec: st.FaultRecord) -> None:
    """Both ends back at the planned rate (or at another link-speed fault's, none: one fault a
    link); idempotent."""
    ends = [(rec.node, rec.port), (rec.peer_node, rec.peer_port)]
    speeds = {k: v for k, v in capacity.trained_speeds(lab.name).items() if k not in ends}
    capacity.retune(dilation.running_spec(lab.spec), lab.ns, ends, speeds=speeds)


_INJECT = {
    "link-down": _inject_link_down,
    "link-flap": _inject_link_flap,
    "carrier-loss": _inject_carrier_loss,
    "cable-pull": _inject_cable_pull,
    "cross-cable": _inject_cross_cable,
    "session-shut": _inject_session_shut,
    "wrong-asn": _inject_wrong_asn,
    "daemon-kill": _inject_daemon_kill,
    "node-off": _inject_node_off,
    "grey-loss": _inject_grey_loss,
    "mtu": _inject_mtu,
    "pfc-storm": lambda *a: pfcfail.inject_pfc_storm(*a),
    "pfc-priority": lambda *a: pfcfail.inject_pfc_priority(*a),
    "link-speed": _inject_link_speed,
}


# ---- heal -----------------------------------------------------------------------------------
def heal(labdir: Path | str, fault_id: str | None = None) -> list[st.FaultRecord]:
    """Heal fault ``fault_id`` (``"f3"``), or every fault (None, newest first); return the
    records healed. Healing restores everything the fault removed: links up, veths re-made
    with their names, MACs and MTU, server addresses and ``default ... table 100+N`` routes,
    BGP neighbour config, daemons restarted with their config, nft tables deleted, the parking
    namespace removed once empty. A fault leaves ``LabState.faults`` only once healed.
    UsageError naming the injected faults for an unknown id; RailabError when a step fails (the
    record stays, heal again)."""
    lab = _Lab(labdir)
    with _locked(lab.name):
        ex.guard(lab.name, "fault")
        lab.reload()
        faults = list(lab.record.faults)
        if fault_id is not None:
            faults = [f for f in faults if f.id == fault_id]
            if not faults:
                have = ", ".join(f"{f.id} ({f.kind})" for f in lab.record.faults) or "none"
                raise UsageError(f"lab {lab.name} has no fault {fault_id!r} (injected: {have})")
        healed = []
        for rec in reversed(faults):
            _HEAL[rec.kind](lab, rec)
            lab.reload()
            lab.record.faults = [f for f in lab.record.faults if f.id != rec.id]
            lab.save()
            healed.append(rec)
        if not any(f.kind == "carrier-loss" for f in lab.record.faults):
            _drop_parking(lab)
        return healed


def _heal_link_down(lab: _Lab, rec: st.FaultRecord) -> None:
    _set_state(lab, rec.node, rec.port, "up")
    _restore_ends(lab, (rec.node, rec.port), (rec.peer_node, rec.peer_port))


def _heal_carrier_loss(lab: _Lab, rec: st.FaultRecord) -> None:
    park = rec.params.get("parking") or parking_namespace(lab.name)
    if netns_path(park).exists():
        _move(park, rec.peer_port, lab.ns(rec.peer_node))
    mtu = _mtu_of(lab, rec.peer_node, rec.peer_port)
    with _ipr(lab.ns(rec.peer_node)) as ipr:
        idx = _index(ipr, rec.peer_port)
        if idx is None:
            raise RailabError(f"{rec.peer_node}:{rec.peer_port} is neither parked nor back")
        ipr.link("set", index=idx, mtu=mtu, state="up")
    _reapply_switch_port(lab, rec.peer_node)
    _reshape(lab, (rec.peer_node, rec.peer_port))
    _restore_ends(lab, (rec.node, rec.port), (rec.peer_node, rec.peer_port))


def _reapply_switch_port(lab: _Lab, node: str) -> None:
    """A switch port that left and re-entered its namespace lost its addresses: FRR's config
    puts them back (``vtysh -f`` of the node's frr.conf)."""
    if node in lab.record.routers and lab.runtime == "netns":
        lab.netns_rt.push_config(lab.name, node)


def _heal_cable_pull(lab: _Lab, rec: st.FaultRecord) -> None:
    mtu = rec.params.get("mtu") or _mtu_of(lab, rec.node, rec.port)
    _make_veth(lab, (rec.node, rec.port, rec.params.get("mac")),
               (rec.peer_node, rec.peer_port, rec.params.get("peer_mac")), int(mtu))
    for n in (rec.node, rec.peer_node):
        _reapply_switch_port(lab, n)
    _reshape(lab, (rec.node, rec.port), (rec.peer_node, rec.peer_port))
    _restore_ends(lab, (rec.node, rec.port), (rec.peer_node, rec.peer_port))


def _heal_cross_cable(lab: _Lab, rec: st.FaultRecord) -> None:
    macs = rec.params.get("macs", {})
    s1, i1, s2, i2 = rec.node, rec.port, rec.peer_node, rec.peer_port
    _delete_link(lab, s1, i1)
    _delete_link(lab, s2, i2)
    for s, i in ((s1, i1), (s2, i2)):
        leaf, lp = lab.spec.peer(s, i)
        _make_veth(lab, (s, i, macs.get(f"{s}:{i}")), (leaf, lp, macs.get(f"{leaf}:{lp}")), _mtu_of(lab, s, i))
    leaves = [lab.spec.peer(s, i) for s, i in ((s1, i1), (s2, i2))]
    for leaf in {rec.params.get("leaf"), rec.params.get("peer_leaf")} - {None}:
        _reapply_switch_port(lab, leaf)
    _reshape(lab, (s1, i1), (s2, i2), *leaves)
    _restore_ends(lab, (s1, i1), (s2, i2))


def _heal_session_shut(lab: _Lab, rec: st.FaultRecord) -> None:
    lab.vtysh(rec.node, f"router bgp {rec.params['asn']}", f"no neighbor {rec.port} shutdown")


def _heal_wrong_asn(lab: _Lab, rec: st.FaultRecord) -> None:
    asn = rec.params["local_asn"]
    config = Path(lab.record.routers[rec.node].config).read_text()
    # the neighbour is re-made as frr.conf has it (peer-group membership, remote-as external)
    lab.vtysh(rec.node, f"router bgp {asn}", f"no neighbor {rec.port} interface")
    for lines in _neighbor_lines(config, asn, rec.port):
        lab.vtysh(rec.node, *lines)


def _heal_daemon_kill(lab: _Lab, rec: st.FaultRecord) -> None:
    lab.netns_rt.start_daemons(lab.name, rec.node)


def _heal_node_off(lab: _Lab, rec: st.FaultRecord) -> None:
    for p in rec.params.get("ports", []):
        _set_state(lab, rec.node, p, "up")
    if rec.node in lab.record.routers:
        lab.netns_rt.start_daemons(lab.name, rec.node)
    for p in rec.params.get("ports", []):
        _restore_ends(lab, (rec.node, p), lab.spec.peer(rec.node, p))


def _grey_table(rec: st.FaultRecord) -> str:
    """The nft table of grey-loss fault ``rec``: its ``table`` param, else ``railab_<id>``."""
    return str(rec.params.get("table") or NFT_PREFIX + rec.id)


def _heal_grey_loss(lab: _Lab, rec: st.FaultRecord) -> None:
    table = _grey_table(rec)
    res = _nft(lab, rec.node, f"delete table netdev {table}\n", check=False)
    if res.returncode != 0 and "No such file" not in res.stderr:
        raise RailabError(f"{rec.node}: could not delete nft table {table}: {res.stderr.strip()[:300]}")


def _heal_mtu(lab: _Lab, rec: st.FaultRecord) -> None:
    with _ipr(lab.ns(rec.node)) as ipr:
        ipr.link("set", index=_index(ipr, rec.port), mtu=int(rec.params["planned_mtu"]))


_HEAL = {
    "link-down": _heal_link_down,
    "link-flap": _heal_link_down,
    "carrier-loss": _heal_carrier_loss,
    "cable-pull": _heal_cable_pull,
    "cross-cable": _heal_cross_cable,
    "session-shut": _heal_session_shut,
    "wrong-asn": _heal_wrong_asn,
    "daemon-kill": _heal_daemon_kill,
    "node-off": _heal_node_off,
    "grey-loss": _heal_grey_loss,
    "mtu": _heal_mtu,
    "pfc-storm": lambda *a: pfcfail.heal_pfc_storm(*a),
    "pfc-priority": lambda *a: pfcfail.heal_pfc_priority(*a),
    "link-speed": _heal_link_speed,
}


def _drop_parking(lab: _Lab) -> None:
    from pyroute2 import netns as pnetns

    ns = parking_namespace(lab.name)
    if netns_path(ns).exists():
        pnetns.remove(ns)
    st.ledger_remove(ns)


# ---- a field engineer's hands: swap two server cables ------------------------------------------
def _live_peer(lab: _Lab, node: str, port: str) -> tuple[str, str] | None:
    """The switch port the veth at server NIC ``node:port`` is plugged into now, among the
    planned leaf ends of every server NIC (a crossed cable lands on one of those): the
    candidate whose ifindex is the NIC's IFLA_LINK and whose IFLA_LINK is the NIC's ifindex.
    None when the NIC is absent or plugged into none of them."""
    with _ipr(lab.ns(node)) as ipr:
        idx = _index(ipr, port)
        if idx is None:
            return None
        peer_idx = ipr.get_links(idx)[0].get_attr("IFLA_LINK")
    by_leaf: dict[str, list[str]] = {}
    for nic in lab.spec.nics:
        leaf, lp = lab.spec.peer(nic.server, nic.interface)
        by_leaf.setdefault(leaf, []).append(lp)
    for leaf, ports in sorted(by_leaf.items()):
        with _ipr(lab.ns(leaf)) as ipr:
            for lp in ports:
                li = _index(ipr, lp)
                if li == peer_idx and ipr.get_links(li)[0].get_attr("IFLA_LINK") == idx:
                    return leaf, lp
    return None


def swap_cables(labdir: Path | str, a: str, b: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """Swap the server ends of the cables at server NICs ``a`` and ``b`` (``"srv2:eth1"``), as a
    field engineer does at the rack: whatever switch port is plugged into ``a`` now is plugged
    into ``b`` and the other way round. The NICs keep their names, MACs and addresses (what a
    re-patch keeps); the leaf ports get their FRR config re-applied and the servers' policy
    routes are re-added. Not a fault and not recorded: it is the trainee's repair of crossed
    cables (``railab exercise swap-cables``) and works on any two server NICs. Returns the new
    ``((leaf, port) at a, (leaf, port) at b)``. UsageError when a NIC is not a server NIC, is
    unplugged, or a recorded fault holds it; needs the netns runtime."""
    lab = _Lab(labdir)
    lab.netns_rt  # noqa: B018 -- raises UsageError on another runtime
    ends = []
    for ref in (a, b):
        s, i = _split(ref)
        _node(lab.spec, s)
        if not i or not any(n.interface == i for n in lab.spec.nics_of(s)):
            raise UsageError(f"{ref} is not a server NIC of lab {lab.name} (give SERVER:ethN)")
        ends.append((s, i))
    if ends[0] == ends[1]:
        raise UsageError("swap-cables needs two different NICs")
    with _locked(lab.name):
        ex.guard(lab.name, "swap-cables")
        lab.reload()
        (s1, i1), (s2, i2) = ends
        peers = [_live_peer(lab, s, i) for s, i in ends]
        for (s, i), p in zip(ends, peers, strict=True):
            if p is None:
                raise UsageError(f"{s}:{i} is not plugged into any leaf port: nothing to swap")
        (l1, p1), (l2, p2) = peers
        _busy(lab, {(s1, i1), (s2, i2), (l1, p1), (l2, p2)})
        macs = {f"{n}:{i}": _veth_ends(lab, n, i)["mac"] for n, i in ((s1, i1), (s2, i2), (l1, p1), (l2, p2))}
        with signals_ignored():  # half a swap leaves two NICs unplugged: finish it
            _delete_link(lab, s1, i1)
            _delete_link(lab, s2, i2)
            _make_veth(lab, (s1, i1, macs[f"{s1}:{i1}"]), (l2, p2, macs[f"{l2}:{p2}"]), _mtu_of(lab, s1, i1))
            _make_veth(lab, (s2, i2, macs[f"{s2}:{i2}"]), (l1, p1, macs[f"{l1}:{p1}"]), _mtu_of(lab, s2, i2))
            for leaf in {l1, l2}:
                _reapply_switch_port(lab, leaf)
            _reshape(lab, (s1, i1), (s2, i2), (l1, p1), (l2, p2))
            _restore_ends(lab, (s1, i1), (s2, i2))
    ex.note_repair(lab.name, "swap-cables", s1, [f"{s1}:{i1}", f"{s2}:{i2}"])  # after the faults lock
    return (l2, p2), (l1, p1)


# ---- restart --------------------------------------------------------------------------------
def restart_node(labdir: Path | str, node: str) -> dict[str, list[str]]:
    """Bring ``node`` back without tearing the lab down: its link ends admin up (those no other
    fault holds), every FRR daemon that is not running started with its config, server policy
    routes re-added; its ``node-off`` and ``daemon-kill`` faults are healed (dropped from the
    record). Returns what it did: ``{"started": [daemon...], "healed": [fault id...]}`` (both
    empty for a node that needed nothing: every daemon running, no fault of these kinds).
    UsageError for an unknown node or a runtime other than netns."""
    lab = _Lab(labdir)
    _node(lab.spec, node)
    rt = lab.netns_rt
    with _locked(lab.name):
        ex.guard(lab.name, "restart")
        lab.reload()
        mine = [f for f in lab.record.faults if f.node == node and f.kind in ("node-off", "daemon-kill")]
        held = {(f.node, f.port) for f in lab.record.faults if f not in mine} | {
            (f.peer_node, f.peer_port) for f in lab.record.faults if f not in mine}
        ports = [p for p, _, _ in lab.spec.links_of(node) if (node, p) not in held]
        for p in ports:
            try:
                _set_state(lab, node, p, "up")
            except RailabError:
                pass  # absent (a pulled cable the record does not know): nothing to bring up
        started = rt.start_daemons(lab.name, node) if node in lab.record.routers else []
        for p in ports:
            _restore_ends(lab, (node, p), lab.spec.peer(node, p))
        lab.reload()
        lab.record.faults = [f for f in lab.record.faults if f not in mine]
        lab.save()
    ex.note_repair(lab.name, "restart", node)  # after the faults lock (exercise start takes them the other way)
    return {"started": list(started), "healed": [f.id for f in mine]}
