"""Check results and the shared observation layer (FRR JSON + netlink) every check reads.

A check compares what it *observes* on a running lab with the expected state in ``lab.json``
(:class:`topologies.labspec.LabSpec`) and returns :class:`CheckResult` rows. Observations come
only from structured sources:

* FRR's JSON output through an :class:`testbed.executor.Executor` (``vtysh -c '... json'``);
* netlink (pyroute2) inside the node's network namespace, named by ``netns_of(node)``
  (default :func:`testbed.runtime.base.netns_name`, ``clab-<lab>-<node>``, the same on the netns
  and containerlab runtimes).

Nothing is screen-scraped. Every observation is cached for one :class:`Observer`, so the checks
of one run share one ``show bgp summary`` per node.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from ipaddress import ip_network
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from railab.testbed.executor import Executor
from railab.errors import RailabError
from railab.topologies.naming import netns_name
from railab.topologies.labspec import LabSpec

Status = Literal["pass", "fail", "skip"]

#: Check families in the order they run and are reported.
CHECKS = ("cabling", "bgp", "routes", "oversub", "hops")

NETNS_DIR = "/var/run/netns"

CMD_SUMMARY = "show bgp vrf default ipv4 unicast summary json"
CMD_RIB = "show ip route json"
CMD_BGP_TABLE = "show bgp vrf default ipv4 unicast json"


class CheckResult(BaseModel):
    """One pass/fail answer.

    Fields:
        check: family (``bgp``, ``routes``, ``hops``, ``cabling``, ``oversub``).
        name: what was checked, unique within a run, e.g. ``g1-leaf1:eth3 <-> spine1:eth1``.
        status: ``pass``, ``fail`` or ``skip`` (could not observe; says why in ``reason``).
        node: the node the answer is about (the failing end for a failure), if any.
        subject: the session, prefix, NIC or path class checked, e.g. ``10.0.3.0/24``.
        expected: expected state from ``lab.json``, as text.
        observed: what the live lab shows, as text.
        reason: for failures the likely cause and what to look at; for skips why.
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

    @property
    def ok(self) -> bool:
        """True unless the status is ``fail`` (skips are not failures)."""
        return self.status != "fail"

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
    return CheckResult(check=check, name=name, status="pass", **kw)


def failed(check: str, name: str, **kw: Any) -> CheckResult:
    return CheckResult(check=check, name=name, status="fail", **kw)


def skipped(check: str, name: str, reason: str, **kw: Any) -> CheckResult:
    return CheckResult(check=check, name=name, status="skip", reason=reason, **kw)


class ObservationError(RuntimeError):
    """A node could not be observed (FRR not answering, namespace missing); the message says which."""


_NOT_RUNNING = re.compile(r"\b(zebra|bgpd|staticd|bfdd|ospfd|watchfrr)\b is not running")
_COMMAND = re.compile(r"`([^`]+)`")


def frr_unreadable(node: str, err: Exception | str, daemon: str) -> str:
    """One clean sentence for an FRR daemon that did not answer ``vtysh`` on ``node``.

    ``"bgpd is not running on g1-leaf2 (`show bgp ... summary json` failed): restart the lab
    (railab down, then railab up)"`` when vtysh says so, else ``"cannot read <daemon> on
    <node>: <error>; is <daemon> running?"`` (the error without a repeated node prefix).
    """
    msg = str(err)
    m = _NOT_RUNNING.search(msg)
    cmd = _COMMAND.search(msg)
    if m:
        what = f" (`{cmd.group(1)}` failed)" if cmd else ""
        return (f"{m.group(1)} is not running on {node}{what}: restart the lab "
                "(railab down, then railab up)")
    if msg.startswith(f"{node}: "):
        msg = msg[len(node) + 2:]
    return f"cannot read {daemon} on {node}: {msg}; is {daemon} running?"


@dataclass(frozen=True)
class LinkState:
    """One interface as netlink reports it inside a node's namespace.

    ``peer_ifindex``/``peer_nsid`` are the veth peer's ifindex (IFLA_LINK) and the peer
    namespace id *relative to this namespace* (IFLA_LINK_NETNSID), None when not a cross-ns veth.
    """

    ifname: str
    index: int
    up: bool
    operstate: str
    kind: str | None
    peer_ifindex: int | None
    peer_nsid: int | None


@dataclass(frozen=True)
class FibRoute:
    """A kernel route in the main table: ``prefix`` and its next-hop interfaces (one per path)."""

    prefix: str
    kind: str  # unicast | blackhole | unreachable | local ...
    oifs: tuple[str, ...]

    @property
    def width(self) -> int:
        return len(self.oifs)


def _unwrap_summary(data: Any) -> dict:
    """``show bgp summary json`` wraps per-AFI dicts (``ipv4Unicast``); the vrf/afi form does not."""
    if not isinstance(data, dict):
        return {}
    if "ipv4Unicast" in data:
        return data["ipv4Unicast"] or {}
    return data


class Observer:
    """Cached, structured observations of one lab.

    Args:
        spec: the lab's ``lab.json``.
        executor: runs ``vtysh`` on switches.
        netns_of: node name -> network namespace name; default ``clab-<lab>-<node>``. Pass
            ``None``-returning callables for nodes without a reachable namespace (real devices).
    """

    def __init__(
        self,
        spec: LabSpec,
        executor: Executor | None,
        netns_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.spec = spec
        self.executor = executor
        self.netns_of = netns_of or (lambda node: netns_name(spec.name, node))
        self._frr: dict[tuple[str, str], Any] = {}
        self._links: dict[str, dict[str, LinkState]] = {}
        self._fib: dict[str, dict[str, FibRoute]] = {}
        self._nsids: dict[str, dict[int, str | None]] = {}
        self._ifnames: dict[str, dict[int, str]] = {}
        self._sockets: dict[str, Any] = {}

    # ---- FRR ---------------------------------------------------------------------------------
    def frr(self, node: str, command: str) -> Any:
        """Parsed JSON of ``vtysh -c COMMAND`` on ``node`` (cached).

        Raises ObservationError naming the node and command when vtysh fails or prints non-JSON.
        """
        key = (node, command)
        if key not in self._frr:
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
        from concurrent.futures import ThreadPoolExecutor

        jobs = [(n, c) for n in nodes for c in commands if (n, c) not in self._frr]
        if not jobs or self.executor is None:
            return

        def one(job):
            try:
                self.frr(*job)
            except ObservationError:
                pass

        with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
            list(pool.map(one, jobs))

    def bgp_summary(self, node: str) -> dict:
        """The IPv4 unicast BGP summary: ``{"as", "routerId", "peers": {ifname: {...}}}``."""
        return _unwrap_summary(self.frr(node, CMD_SUMMARY))

    def bgp_neighbor(self, node: str, interface: str) -> dict:
        """``show bgp neighbors IF json`` for one unnumbered neighbor ({} when unknown)."""
        data = self.frr(node, f"show bgp neighbors {interface} json")
        return data.get(interface, {}) if isinstance(data, dict) else {}

    def rib(self, node: str) -> dict[str, list[dict]]:
        """zebra's IPv4 RIB: ``show ip route json`` (prefix -> list of route entries)."""
        data = self.frr(node, CMD_RIB)
        return data if isinstance(data, dict) else {}

    def bgp_table(self, node: str) -> dict[str, list[dict]]:
        """The IPv4 unicast BGP table: prefix -> paths (``show bgp vrf default ipv4 unicast json``)."""
        data = self.frr(node, CMD_BGP_TABLE)
        return (data or {}).get("routes", {}) if isinstance(data, dict) else {}

    # ---- netlink -----------------------------------------------------------------------------
    def namespace(self, node: str) -> str:
        """The node's namespace name; raises ObservationError when it does not exist."""
        ns = self.netns_of(node)
        if not ns:
            raise ObservationError(f"{node}: no network namespace to read netlink from")
        if not os.path.exists(os.path.join(NETNS_DIR, ns)):
            raise ObservationError(f"{node}: namespace {ns} not found (is the lab up?)")
        return ns

    def _ipr(self, node: str):
        """A netlink socket in ``node``'s namespace, opened once per Observer (see close())."""
        if node in self._sockets:
            return self._sockets[node]
        from pyroute2 import IPRoute

        ns = self.namespace(node)
        try:
            # flags=0: never create a missing namespace (pyroute2's default is O_CREAT)
            ipr = IPRoute(netns=ns, flags=0)
        except OSError as exc:
            raise ObservationError(f"{node}: cannot open namespace {ns}: {exc}") from exc
        self._sockets[node] = ipr
        return ipr

    def close(self) -> None:
        """Close the netlink sockets this observer opened (idempotent)."""
        for ipr in self._sockets.values():
            try:
                ipr.close()
            except OSError:
                pass
        self._sockets.clear()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def links(self, node: str) -> dict[str, LinkState]:
        """Interfaces of ``node`` by name (netlink RTM_GETLINK dump in its namespace, cached)."""
        if node not in self._links:
            ipr = self._ipr(node)
            out: dict[str, LinkState] = {}
            for msg in ipr.get_links():
                name = msg.get("ifname")
                info = msg.get("linkinfo")
                kind = info.get("kind") if info is not None else None
                nsid = msg.get("link_netnsid")
                out[name] = LinkState(
                    ifname=name,
                    index=msg["index"],
                    up=msg.get("operstate") == "UP" or (
                        name == "lo" and bool(msg["flags"] & 1)
                    ),
                    operstate=msg.get("operstate") or "UNKNOWN",
                    kind=kind,
                    peer_ifindex=msg.get("link"),
                    peer_nsid=nsid,
                )
            self._links[node] = out
            self._ifnames[node] = {v.index: k for k, v in out.items()}
        return self._links[node]

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
            links = self.links(node)
            names = {v.index: k for k, v in links.items()}
            kinds = {1: "unicast", 2: "local", 6: "blackhole", 7: "unreachable", 8: "prohibit"}
            out: dict[str, FibRoute] = {}
            ipr = self._ipr(node)
            for msg in ipr.get_routes(family=2, table=254):
                dst = msg.get("dst") or "0.0.0.0"
                prefix = str(ip_network(f"{dst}/{msg['dst_len']}", strict=False))
                paths = msg.get("multipath")
                if paths:
                    oifs = tuple(names.get(p["oif"], f"if{p['oif']}") for p in paths)
                elif msg.get("oif") is not None:
                    oifs = (names.get(msg.get("oif"), f"if{msg.get('oif')}"),)
                else:
                    oifs = ()
                out[prefix] = FibRoute(prefix, kinds.get(msg["type"], str(msg["type"])), oifs)
            self._fib[node] = out
        return self._fib[node]

    def _nsid_map(self, node: str, wanted: set[int]) -> dict[int, str]:
        """nsid (as seen from ``node``) -> lab node name, for the nsids in ``wanted``."""
        known = self._nsids.setdefault(node, {})
        missing = set(wanted) - set(known)
        if not missing:
            return known
        # resolve every peer namespace of this node in one pass
        missing |= {l.peer_nsid for l in self.links(node).values() if l.peer_nsid is not None}
        missing -= set(known)
        candidates = [n.name for n in self.spec.nodes if n.name != node]
        # leaves first: a server's peers are leaves, a spine's are leaves
        candidates.sort(key=lambda n: (self.spec.node(n).role != "leaf", n))
        ipr = self._ipr(node)
        for cand in candidates:
            if not missing:
                break
            ns = self.netns_of(cand)
            path = os.path.join(NETNS_DIR, ns) if ns else None
            if not path or not os.path.exists(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                res = ipr.get_netnsid(fd=fd) or {}
            finally:
                os.close(fd)
            nsid = res.get("nsid")
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
    def switches(self) -> list[str]:
        return [n.name for n in self.spec.nodes if n.role in ("leaf", "spine")]
