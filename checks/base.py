"""Check results and the shared observation layer (FRR JSON + netlink) every check reads.

A check compares what it *observes* on a running lab with the expected state in ``lab.json``
(:class:`topologies.labspec.LabSpec`) and returns :class:`CheckResult` rows. Observations come
only from structured sources:

* FRR's JSON output through an :class:`testbed.executor.Executor` (``vtysh -c '... json'``);
* netlink inside the node's network namespace, named by ``netns_of(node)`` (default
  :func:`railab.topologies.naming.netns_name`, ``clab-<lab>-<node>``, the same on the netns and
  containerlab runtimes): link, route, rule and nsid dumps read raw by
  :class:`railab.testbed.rtnl.Rtnl` (pyroute2's per-attribute decoding made a cabling pass of
  the 4096-GPU fabric take a minute).

Nothing is screen-scraped: FRR commands and JSON field paths come from :mod:`railab.checks.frr`.
Every observation is cached for one :class:`Observer`, so the checks of one run share one
``show bgp summary`` per node.

Results carry structured references (``node``, ``port``, ``link``, ``session``, ``prefix``) and a
structured root-cause key (``cause``, a :class:`Cause`), so :func:`railab.checks.runner.group_failures`
groups consequences under their root cause by fields, never by message text. The check families
live in a registry (:data:`CHECKS`, :func:`register_check`).

"Is this link up" has one rule, :func:`link_status` (its home is railab.testbed.rtnl, so the
testbed layer uses it too): ``admin-down`` (IFF_UP clear),
``carrier-lost`` (IFF_UP set, IFF_LOWER_UP clear or operstate not UP/UNKNOWN: the far end is
down or the cable is out), ``up``; :meth:`Observer.link_status` adds ``missing``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from ipaddress import ip_network
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from railab.checks import frr as F
from railab.errors import RailabError
from railab.testbed.executor import Executor
from railab.testbed.namespaces import entered
from railab.testbed.rtnl import IFF_LOWER_UP, IFF_UP, LinkStatus, Rtnl, link_status  # noqa: F401 - re-exported
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import link_id, netns_name

Status = Literal["pass", "fail", "skip"]

NETNS_DIR = "/var/run/netns"

#: ``rtm_protocol`` values (linux/rtnetlink.h; FRR's own in zebra/rt_netlink.h: RTPROT_BGP 186,
#: RTPROT_ZSTATIC 196 for staticd routes, RTPROT_ZEBRA 11) -> the protocol names FRR's RIB uses.
RTM_PROTOCOLS = {2: "kernel", 3: "boot", 4: "static", 11: "zebra", 186: "bgp", 196: "static"}

#: The cause kinds the built-in families set (``Cause.kind``; a registered family may add its
#: own, which then group by equal causes or by their ``link``):
CAUSE_KINDS = {
    "link-down": "link: a cable/veth is down (admin down or carrier lost)",
    "node-down": "node: every link of the node is down at its own end (powered off)",
    "miswired": "link: the planned link lands on another port",
    "port-missing": "node, port: the interface does not exist",
    "session-down": "link (+ node, port): a BGP session is not Established",
    "session-shut": "node, port, link: that end shut the session administratively (neighbor IF shutdown)",
    "daemon-dead": "node, daemon: an FRR daemon does not answer",
    "node-unreachable": "node: the executor cannot reach the node (SSH refused or timed out)",
    "wrong-asn": "node: the node runs another ASN / router-id than planned; with port, link: "
                 "that end of a session expects another remote AS than the peer's planned ASN",
    "neighbor-missing": "node, port: no BGP neighbor configured on the port",
    "not-announced": "node, prefix: the origin does not announce the prefix",
    "upstream": "node, prefix: the neighbor behind a port lacks the route itself",
    "config": "node: anything else found in the node's configuration",
    "mtu-mismatch": "node, port, link: a link end's live MTU differs from lab.json",
    "link-local-missing": "node, port, link: a port lacks its IPv6 link-local address or routes (unnumbered BGP)",
    "port-filter": "node, port, link: a packet filter (nftables netdev chain) drops on the port",
    "policy-route-missing": "node, port, link: a server NIC is up but lacks its rule or table route",
    "pfc-storm": "node, port, link: the port's lossless queue is held in PAUSE by its peer (a PFC storm)",
    "pfc-priority": "node, port, link: the port's PFC is enabled on another priority than the lossless one",
    "link-speed": "node, port, link: the link runs below (or above) its planned speed (node, port: its first such end)",
}


class SessionRef(BaseModel):
    """A planned unnumbered eBGP session: ``node:interface`` <-> ``peer:peer_interface``."""

    model_config = ConfigDict(frozen=True)

    node: str
    interface: str
    peer: str
    peer_interface: str

    @property
    def link(self) -> str:
        """The :func:`link_id` the session runs over."""
        return link_id(self.node, self.interface, self.peer, self.peer_interface)


class Cause(BaseModel):
    """A structured root-cause key: ``kind`` (see :data:`CAUSE_KINDS`) plus the fields that name
    the culprit, e.g. ``Cause(kind="link-down", link="a:eth1--b:eth3")`` or
    ``Cause(kind="daemon-dead", node="g1-leaf2", daemon="bgpd")``. Two rows with equal causes
    have the same root cause. ``kind``: one of :data:`CAUSE_KINDS` (or a registered family's
    own, lower-case with dashes)."""

    model_config = ConfigDict(frozen=True)

    kind: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    node: str | None = None
    port: str | None = None
    link: str | None = None
    daemon: str | None = None
    prefix: str | None = None


class CheckResult(BaseModel):
    """One pass/fail answer.

    Fields:
        check: family (``bgp``, ``routes``, ``hops``, ``cabling``, ``oversub``, or a registered one).
        name: what was checked, unique within a run, e.g. ``g1-leaf1:eth3 <-> spine1:eth1``.
        status: ``pass``, ``fail`` or ``skip`` (could not observe; says why in ``reason``).
        node: the node the answer is about (the failing end for a failure), if any.
        subject: the session, prefix, NIC or path class checked, e.g. ``10.0.3.0/24``.
        expected: expected state from ``lab.json``, as text.
        observed: what the live lab shows, as text.
        reason: for failures the likely cause and what to look at; for skips why.
        port: the interface of ``node`` the row is about (``eth4``), if any.
        link: the :func:`link_id` of the link the row is about, if any.
        session: the planned BGP session the row is about, if any.
        prefix: the IPv4 prefix the row is about, if any.
        cause: for failures, the structured root-cause key (None: the row is its own cause).
        joint: further causes that explain the row only together with ``cause`` (each cuts some
            of the paths the row needs, all of them every path: a prefix missing at a leaf
            whose one uplink is down while the other spine's bgpd is dead); None for a row
            one cause explains. :func:`railab.checks.runner.group_failures` lists such a row
            under every root one of its causes follows from.
    """

    model_config = ConfigDict(frozen=True)

    check: str
    name: str
    status: Status
    node: str | None = None
    subject: str | None = None
    expected: str | None = None
    observed: str | None = None
    reason: str | None = None
    port: str | None = None
    link: str | None = None
    session: SessionRef | None = None
    prefix: str | None = None
    cause: Cause | None = None
    joint: tuple[Cause, ...] | None = None

    @property
    def ok(self) -> bool:
        """True unless the status is ``fail`` (skips are not failures)."""
        return self.status != "fail"

    @property
    def causes(self) -> list[Cause]:
        """Every cause the row names: ``cause``, then ``joint`` ([] for a row without)."""
        return [c for c in (self.cause, *(self.joint or ())) if c is not None]

    def refs(self) -> dict[str, Any]:
        """The structured references that are set (``node``, ``port``, ``link``, ``session``,
        ``prefix``, ``cause``, ``joint``), JSON-ready."""
        return {k: v for k, v in self.model_dump(
            include={"node", "port", "link", "session", "prefix", "cause", "joint"},
            exclude_none=True).items()}

    def message(self) -> str:
        """One line for humans: ``[fail] bgp g1-leaf1:eth3 ...: expected X, observed Y (cause)``."""
        text = f"[{self.status}] {self.check} {self.name}"
        if self.status != "pass":
            if self.expected is not None or self.observed is not None:
                text += f": expected {self.expected}, observed {self.observed}"
            if self.reason:
                text += f" -- {self.reason}"
        return text


def passed(check: str, name: str, **kw: Any) -> CheckResult:
    """A ``pass`` row of family ``check``; ``kw``: any other :class:`CheckResult` field."""
    return CheckResult(check=check, name=name, status="pass", **kw)


def failed(check: str, name: str, **kw: Any) -> CheckResult:
    """A ``fail`` row of family ``check``; ``kw``: any other :class:`CheckResult` field."""
    return CheckResult(check=check, name=name, status="fail", **kw)


def skipped(check: str, name: str, reason: str, **kw: Any) -> CheckResult:
    """A ``skip`` row of family ``check`` saying ``reason`` (why it could not be observed)."""
    return CheckResult(check=check, name=name, status="skip", reason=reason, **kw)


# ---- check registry ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckFamily:
    """One registered check family.

    ``run(obs) -> list[CheckResult]``; ``order``: run/report position (lower first);
    ``frr_commands``: vtysh commands the family reads on every switch, prefetched in parallel
    before the families run; ``description``: one line for ``--help`` and docs.
    """

    name: str
    run: Callable[[Observer], list[CheckResult]]
    order: int
    frr_commands: tuple[str, ...] = ()
    description: str = ""


class CheckRegistry:
    """The check families by name, iterated in run order (``list(CHECKS)`` gives the names).

    Families register themselves at import with :func:`register_check`; the built-in ones
    (cabling, bgp, routes, oversub, hops) are imported by :mod:`railab.checks.runner`.
    """

    def __init__(self) -> None:
        self._families: dict[str, CheckFamily] = {}

    def register(self, family: CheckFamily, *, replace: bool = False) -> CheckFamily:
        """Add ``family``; raises ValueError when the name is taken (unless ``replace``)."""
        if family.name in self._families and not replace:
            raise ValueError(f"check {family.name!r} is already registered")
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", family.name):
            raise ValueError(f"check name {family.name!r}: use lower-case letters, digits, - and _")
        self._families[family.name] = family
        return family

    def unregister(self, name: str) -> None:
        """Remove ``name`` (no error when absent)."""
        self._families.pop(name, None)

    def names(self) -> list[str]:
        """Registered names in run order (``order``, then name)."""
        return [f.name for f in sorted(self._families.values(), key=lambda f: (f.order, f.name))]

    def get(self, name: str) -> CheckFamily:
        """The family ``name``; raises KeyError when unknown."""
        return self._families[name]

    def index(self, name: str) -> int:
        """Position of ``name`` in run order; raises ValueError when unknown."""
        return self.names().index(name)

    def __contains__(self, name: object) -> bool:
        return name in self._families

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._families)


#: Every check family, in the order they run and are reported.
CHECKS = CheckRegistry()


def register_check(name: str, run: Callable[[Observer], list[CheckResult]], *, order: int,
                   frr_commands: tuple[str, ...] | list[str] = (), description: str = "",
                   replace: bool = False) -> CheckFamily:
    """Register a check family: ``run(obs) -> list[CheckResult]`` then runs via
    ``run_checks``, is selectable with ``railab check --only NAME`` and shows in the CLI.

    Built-in orders: daemons 5, cabling 10, pfc 12, speed 13, policy 15, bgp 20, routes 30,
    oversub 40, hops 50. Raises ValueError for a taken name (unless ``replace``) or a name that
    is not ``[a-z][a-z0-9_-]*``.
    """
    return CHECKS.register(CheckFamily(name, run, order, tuple(frr_commands), description),
                           replace=replace)


class ObservationError(RuntimeError):
    """A node could not be observed (FRR not answering, namespace missing); the message says which."""


_NOT_RUNNING = re.compile(r"\b(zebra|bgpd|staticd|bfdd|ospfd|watchfrr)\b is not running")
_COMMAND = re.compile(r"`([^`]+)`")
#: executor errors that mean the node was never reached (testbed.ssh_exec wording, errno text)
_UNREACHABLE = re.compile(r"cannot reach |Connection refused|SSH to \S+ failed|host key of ")


def frr_unreadable(node: str, err: Exception | str, daemon: str) -> str:
    """One clean sentence for an FRR daemon that did not answer ``vtysh`` on ``node``.

    ``"bgpd is not running on g1-leaf2 (`show bgp ... summary json` failed): restart the lab
    (railab down, then railab up)"`` when vtysh says so, else ``"cannot read <daemon> on
    <node>: <error>; is <daemon> running?"`` (the error without a repeated node prefix).
    """
    msg = str(err)
    if _UNREACHABLE.search(msg):
        # the executor never reached the node (SSH refused, timed out, host key): FRR was not
        # asked, so guessing at a dead daemon would send the reader the wrong way
        return (f"cannot reach {node} to run vtysh: {msg.removeprefix(f'{node}: ')}; check the "
                "inventory's host and port, and that sshd listens there")
    m = _NOT_RUNNING.search(msg)
    cmd = _COMMAND.search(msg)
    if m:
        what = f" (`{cmd.group(1)}` failed)" if cmd else ""
        return (f"{m.group(1)} is not running on {node}{what}: restart the lab "
                "(railab down, then railab up)")
    if msg.startswith(f"{node}: "):
        msg = msg[len(node) + 2:]
    return f"cannot read {daemon} on {node}: {msg}; is {daemon} running?"


def cause_fields(causes: list[Cause | None]) -> dict[str, Any]:
    """``{"cause": first, "joint": the others or None}`` for :class:`CheckResult` from the
    causes that together explain a row (duplicates and Nones dropped, order kept); an empty
    list gives ``cause`` None."""
    uniq = list(dict.fromkeys(c for c in causes if c is not None))
    return {"cause": uniq[0] if uniq else None, "joint": tuple(uniq[1:]) or None}


def daemon_cause(node: str, err: Exception | str, daemon: str) -> Cause:
    """The :class:`Cause` for an FRR daemon that did not answer on ``node`` (``daemon-dead``;
    the daemon vtysh names as not running, else ``daemon``); ``node-unreachable`` when the
    executor never reached the node (a refused or timed-out SSH connection)."""
    if _UNREACHABLE.search(str(err)):
        return Cause(kind="node-unreachable", node=node)
    m = _NOT_RUNNING.search(str(err))
    return Cause(kind="daemon-dead", node=node, daemon=m.group(1) if m else daemon)


@dataclass(frozen=True)
class LinkState:
    """One interface as netlink reports it inside a node's namespace.

    ``status``: :func:`link_status` of its flags and operstate (``up``, ``admin-down``,
    ``carrier-lost``). ``peer_ifindex``/``peer_nsid`` are the veth peer's ifindex (IFLA_LINK)
    and the peer namespace id *relative to this namespace* (IFLA_LINK_NETNSID), None when not a
    cross-ns veth. ``mtu``: IFLA_MTU (bytes).
    """

    ifname: str
    index: int
    status: LinkStatus
    operstate: str
    kind: str | None
    peer_ifindex: int | None
    peer_nsid: int | None
    mtu: int | None = None

    @property
    def up(self) -> bool:
        """True when :attr:`status` is ``up``."""
        return self.status == "up"


@dataclass(frozen=True)
class FibRoute:
    """A kernel route in the main table: ``prefix`` and its next-hop interfaces (one per path)."""

    prefix: str
    kind: str  # unicast | blackhole | unreachable | local ...
    oifs: tuple[str, ...]
    #: who installed it (``rtm_protocol``): ``bgp``, ``static`` (FRR staticd), ``kernel``
    #: (connected), ``boot``, ``zebra`` or the number (linux/rtnetlink.h, FRR zebra/rt_netlink.h)
    protocol: str = "kernel"

    @property
    def width(self) -> int:
        """Number of paths (ECMP width)."""
        return len(self.oifs)


class Observer:
    """Cached, structured observations of one lab.

    Args:
        spec: the lab's ``lab.json``.
        executor: runs ``vtysh`` on switches.
        netns_of: node name -> network namespace name; default ``clab-<lab>-<node>``. Pass
            ``None``-returning callables for nodes without a reachable namespace (real devices).
        options: per-run options the check families read (e.g. ``hops_runner``).
        stop: an Event a SIGINT handler sets (``railab check``); :meth:`check_stop` raises
            KeyboardInterrupt once it is set, at a safe point (before a vtysh run, before a
            namespace's netlink socket opens, between families), never inside a netlink call.
    """

    def __init__(
        self,
        spec: LabSpec,
        executor: Executor | None,
        netns_of: Callable[[str], str | None] | None = None,
        options: dict[str, Any] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.spec = spec
        self.stop = stop
        self.executor = executor
        self.netns_of = netns_of or (lambda node: netns_name(spec.name, node))
        self.options: dict[str, Any] = dict(options or {})
        self._frr: dict[tuple[str, str], Any] = {}
        self._links: dict[str, dict[str, LinkState]] = {}
        self._fib: dict[str, dict[str, FibRoute]] = {}
        self._nsids: dict[str, dict[int, str | None]] = {}
        self._ifnames: dict[str, dict[int, str]] = {}
        self._rtnls: dict[str, Rtnl] = {}

    def check_stop(self) -> None:
        """Raise KeyboardInterrupt when the stop Event is set (Ctrl-C under ``railab check``)."""
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt

    # ---- FRR ---------------------------------------------------------------------------------
    def frr(self, node: str, command: str) -> Any:
        """Parsed JSON of ``vtysh -c COMMAND`` on ``node`` (cached).

        Raises ObservationError naming the node and command when vtysh fails or prints non-JSON.
        """
        key = (node, command)
        if key not in self._frr:
            self.check_stop()
            if self.executor is None:
                raise ObservationError(f"{node}: no executor to run vtysh")
            try:
                self._frr[key] = self.executor.vtysh_json(node, command)
            except (RailabError, RuntimeError, ValueError, TimeoutError, OSError) as exc:
                msg = str(exc)  # executors already say "NODE: `COMMAND` failed ...": no repeat
                self._frr[key] = ObservationError(
                    msg if msg.startswith(f"{node}: ") else f"{node}: `{command}`: {msg}")
        val = self._frr[key]
        if isinstance(val, ObservationError):
            raise val
        return val

    def prefetch(self, nodes: list[str], commands: list[str], workers: int = 8) -> None:
        """Run ``commands`` on ``nodes`` in parallel threads (vtysh is a subprocess) so the
        checks then read the cache; failures are cached as ObservationError like in frr()."""
        jobs = [(n, c) for n in nodes for c in commands if (n, c) not in self._frr]
        if not jobs or self.executor is None:
            return

        def one(job):
            if self.stop is not None and self.stop.is_set():
                return  # interrupted: leave the rest (the main thread raises below)
            try:
                self.frr(*job)
            except ObservationError:
                pass

        with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            list(pool.map(one, jobs))
        self.check_stop()

    def bgp_summary(self, node: str) -> dict:
        """The IPv4 unicast BGP summary: ``{"as", "routerId", "peers": {ifname: {...}}}``."""
        return F.summary_of(self.frr(node, F.CMD_SUMMARY))

    def peers(self, node: str) -> dict[str, dict]:
        """``{ifname: peer dict}`` of the summary (unnumbered peers keyed by interface)."""
        return F.peers_by_interface(self.frr(node, F.CMD_SUMMARY))

    def bgp_neighbor(self, node: str, interface: str) -> dict:
        """``show bgp neighbors IF json`` for one unnumbered neighbor ({} when unknown)."""
        return F.neighbor_of(self.frr(node, F.cmd_neighbor(interface)), interface)

    def rib(self, node: str) -> dict[str, list[dict]]:
        """zebra's IPv4 RIB: ``show ip route json`` (prefix -> list of route entries)."""
        return F.rib_of(self.frr(node, F.CMD_RIB))

    def bgp_table(self, node: str) -> dict[str, list[dict]]:
        """The IPv4 unicast BGP table: prefix -> paths (``show bgp vrf default ipv4 unicast json``)."""
        return F.bgp_routes_of(self.frr(node, F.CMD_BGP_TABLE))

    # ---- netlink -----------------------------------------------------------------------------
    def namespaces(self) -> list[tuple[str, str]]:
        """``(node, namespace)`` of every node of the lab whose namespace exists, in lab order
        (the ones that cannot be read are left out: their own checks say so)."""
        out = []
        for n in self.spec.nodes:
            try:
                out.append((n.name, self.namespace(n.name)))
            except ObservationError:
                continue
        return out

    def namespace(self, node: str) -> str:
        """The node's namespace name; raises ObservationError when it does not exist."""
        ns = self.netns_of(node)
        if not ns:
            raise ObservationError(f"{node}: no network namespace to read netlink from")
        if not os.path.exists(os.path.join(NETNS_DIR, ns)):
            raise ObservationError(f"{node}: namespace {ns} not found (is the lab up?)")
        return ns

    def _rtnl(self, node: str) -> Rtnl:
        """A raw rtnetlink reader (railab.testbed.rtnl) in ``node``'s namespace, opened once
        per Observer. Raises ObservationError when the namespace cannot be entered."""
        if node in self._rtnls:
            return self._rtnls[node]
        self.check_stop()
        ns = self.namespace(node)
        try:
            with entered(ns):
                r = Rtnl()
        except OSError as exc:
            raise ObservationError(f"{node}: cannot open namespace {ns}: {exc}") from exc
        self._rtnls[node] = r
        return r

    def close(self) -> None:
        """Close the netlink sockets this observer opened (idempotent)."""
        for r in self._rtnls.values():
            r.close()
        self._rtnls.clear()

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def links(self, node: str) -> dict[str, LinkState]:
        """Interfaces of ``node`` by name (one raw RTM_GETLINK dump in its namespace,
        railab.testbed.rtnl; cached)."""
        if node not in self._links:
            out: dict[str, LinkState] = {}
            for row in self._rtnl(node).link_details():
                out[row.ifname] = LinkState(
                    ifname=row.ifname,
                    index=row.index,
                    status=link_status(row.flags, row.operstate),
                    operstate=row.operstate,
                    kind=row.kind,
                    peer_ifindex=row.link,
                    peer_nsid=row.link_netnsid,
                    mtu=row.mtu,
                )
            self._links[node] = out
            self._ifnames[node] = {v.index: k for k, v in out.items()}
        return self._links[node]

    def link_status(self, node: str, ifname: str) -> LinkStatus:
        """:func:`link_status` of ``node:ifname``, or ``missing`` when the interface does not
        exist. Raises ObservationError when the namespace cannot be read."""
        link = self.links(node).get(ifname)
        return "missing" if link is None else link.status

    def link_up(self, node: str, ifname: str) -> bool | None:
        """``node:ifname`` is ``up`` (True), down (False: admin-down or carrier-lost), or
        unknown (None: missing interface or unreadable namespace). Fits
        ``railab.traffic.engine.spread_warnings(..., link_up)``."""
        try:
            status = self.link_status(node, ifname)
        except (ObservationError, OSError):
            return None
        return None if status == "missing" else status == "up"

    def _index_names(self, node: str) -> dict[int, str]:
        """ifindex -> interface name of ``node`` (:meth:`links`' raw dump, cached). Raises
        ObservationError when the namespace cannot be read."""
        self.links(node)
        return self._ifnames[node]

    def ifname(self, node: str, index: int) -> str | None:
        """Interface name of ``index`` on ``node`` (None when absent)."""
        self.links(node)
        return self._ifnames[node].get(index)

    def fib(self, node: str) -> dict[str, FibRoute]:
        """Kernel IPv4 main-table routes of ``node`` by prefix (``10.0.1.0/24``).

        ECMP routes appear as RTA_MULTIPATH (the kernel expands zebra's nexthop-group objects in
        dumps, ``net.ipv4.nexthop_compat_mode=1``); width is the number of paths.
        """
        if node not in self._fib:
            names = self._index_names(node)
            kinds = {1: "unicast", 2: "local", 6: "blackhole", 7: "unreachable", 8: "prohibit"}
            out: dict[str, FibRoute] = {}
            for r in self._rtnl(node).routes(254):
                prefix = str(ip_network(f"{r.dst}/{r.dst_len}", strict=False))
                oifs = tuple(names.get(i, f"if{i}") for i in r.oifs)
                out[prefix] = FibRoute(prefix, kinds.get(r.type, str(r.type)), oifs,
                                       RTM_PROTOCOLS.get(r.protocol, str(r.protocol)))
            self._fib[node] = out
        return self._fib[node]

    def _nsid_map(self, node: str, wanted: set[int]) -> dict[int, str]:
        """nsid (as seen from ``node``) -> lab node name, for the nsids in ``wanted``."""
        known = self._nsids.setdefault(node, {})
        missing = set(wanted) - set(known)
        if not missing:
            return known
        # resolve every peer namespace of this node in one pass
        missing |= {lk.peer_nsid for lk in self.links(node).values() if lk.peer_nsid is not None}
        missing -= set(known)
        # the node's planned neighbours first (lab.json links: a cabling fault still lands on a
        # neighbour's namespace most of the time), then leaves, then the rest: a leaf of the
        # 4096-GPU fabric otherwise asked the kernel about up to 600 namespaces
        planned = self._neighbours.get(node, set())
        roles = self._roles
        candidates = sorted((n for n in roles if n != node),
                            key=lambda n: (n not in planned, roles[n] != "leaf", n))
        rtnl = self._rtnl(node)
        for cand in candidates:
            if not missing:
                break
            ns = self.netns_of(cand)
            path = os.path.join(NETNS_DIR, ns) if ns else None
            if not path or not os.path.exists(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                nsid = rtnl.netnsid(fd)
            finally:
                os.close(fd)
            if nsid is not None and nsid in missing:
                known[nsid] = cand
                missing.discard(nsid)
        for nsid in missing:  # not a lab namespace: remember, do not rescan
            known[nsid] = None
        return known

    def peer(self, node: str, ifname: str) -> tuple[str, str] | None:
        """Where the veth ``node:ifname`` lands: ``(peer node, peer ifname)``, read live.

        Uses the veth's IFLA_LINK (peer ifindex) and IFLA_LINK_NETNSID (peer namespace id as seen
        from ``node``), resolved to a lab node by asking the kernel for the nsid of every lab
        namespace (RTM_GETNSID). None when the interface is missing or not a cross-namespace veth,
        or when the peer namespace is not one of the lab's.
        """
        link = self.links(node).get(ifname)
        if link is None or link.peer_nsid is None or link.peer_ifindex is None:
            return None
        peer_node = self._nsid_map(node, {link.peer_nsid}).get(link.peer_nsid)
        if peer_node is None:
            return None
        peer_if = self.ifname(peer_node, link.peer_ifindex)
        return (peer_node, peer_if) if peer_if else None

    # ---- spec helpers ------------------------------------------------------------------------
    @cached_property
    def _neighbours(self) -> dict[str, set[str]]:
        """node -> the nodes lab.json cables it to."""
        out: dict[str, set[str]] = {}
        for lk in self.spec.links:
            out.setdefault(lk.a.node, set()).add(lk.b.node)
            out.setdefault(lk.b.node, set()).add(lk.a.node)
        return out

    @cached_property
    def _roles(self) -> dict[str, str]:
        """node -> role, in lab.json's node order."""
        return {n.name: n.role for n in self.spec.nodes}

    @cached_property
    def switches(self) -> list[str]:
        """Names of the switches (leaves, spines, super-spines)."""
        return [n.name for n in self.spec.nodes if n.role != "server"]

    @cached_property
    def _port_links(self) -> dict[tuple[str, str], tuple[str, str]]:
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for ln in self.spec.links:
            out[(ln.a.node, ln.a.interface)] = (ln.b.node, ln.b.interface)
            out[(ln.b.node, ln.b.interface)] = (ln.a.node, ln.a.interface)
        return out

    def planned_peer(self, node: str, port: str) -> tuple[str, str] | None:
        """``(peer node, peer port)`` that ``lab.json`` cables to ``node:port`` (None: none)."""
        return self._port_links.get((node, port))

    def link_of(self, node: str, port: str) -> str | None:
        """The :func:`link_id` of the planned link on ``node:port`` (None when unplanned)."""
        peer = self.planned_peer(node, port)
        return link_id(node, port, *peer) if peer else None
