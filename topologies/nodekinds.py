"""Node kinds: the one registry of what a lab node runs (image, binds, sysctls, daemons, limits).

A :class:`NodeKind` holds everything the generator, ``lab.json``, the clab topology, the netns
runtime and the CLI need to know about one kind of node. Three are shipped:

* ``frr``: a switch running Debian's FRR 8.4 (containerlab kind ``linux``, image
  ``railab/frr:8.4.4`` built from ``images/frr``), binds ``configs/<n>/frr.conf`` and
  ``configs/<n>/daemons``;
* ``sonic-vs``: a SONiC virtual switch (containerlab kind ``sonic-vs``), binds
  ``config_db.json`` and the integrated ``frr.conf`` under ``/etc/railab/`` (or config_db.json at
  ``/var/sonic/`` on master images), loaded after boot by the containerlab runtime
  (:mod:`railab.topologies.sonic`); 32 data ports (the vs HwSKU Force10-S6000:
  ``eth1..eth32 -> Ethernet0..Ethernet124``); FRR zebra, staticd, bgpd (no bfdd in the image);
* ``linux``: the GPU server (containerlab kind ``linux``), one NIC per rail.

Add a kind with :func:`register_node_kind` (one module, one call); the intent's ``lab.kind``
accepts every registered switch kind, ``lab.json`` records the kinds a lab uses
(``node_kinds``) and ``railab kinds`` lists them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Literal

from railab.errors import UsageError
from railab.topologies.sonic import (
    DEFAULT_SONIC_IMAGE,
    SONIC_FRR_DAEMONS,
    SONIC_IMAGES,
    post_deploy_for_binds,
)
from railab.topologies.sonic import FRR_CONF_TARGET as SONIC_FRR_CONF_TARGET

#: FRR's ECMP cap: Debian's frr 8.4 is built with ``--enable-multipath=256`` (``vtysh -h`` shows
#: the configure line), so ``maximum-paths`` accepts 1..256 and zebra installs at most 256 paths.
FRR_MAX_ECMP = 256

#: Every daemon of FRR's packaged ``/etc/frr/daemons`` file, in that file's order.
FRR_PACKAGED_DAEMONS = (
    "zebra", "bgpd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd", "nhrpd",
    "eigrpd", "babeld", "sharpd", "pbrd", "fabricd", "vrrpd", "pathd", "staticd", "bfdd",
)
#: zebra's netlink receive buffer (``-s``, bytes): Debian's ``/etc/frr/daemons`` value. A switch
#: with 128 ports gets bursts of link, address and route notifications at bring-up; the default
#: socket buffer (``net.core.rmem_default``) can overrun and force a full resync.
ZEBRA_NL_BUFSIZE = 90_000_000
#: Options of a daemon a kind does not list in ``daemon_options``: vty on localhost only.
FRR_DEFAULT_OPTIONS = "-A 127.0.0.1"
#: The one home of the FRR daemons' command-line options (``NodeKind.daemon_options``' default):
#: vty on localhost only; zebra's netlink receive buffer ``-s``. The generator writes them as the
#: ``<daemon>_options`` lines of the ``daemons`` file; the netns runtime reads them back from
#: that file and passes them to the daemon (so both runtimes run the same options).
FRR_DAEMON_OPTIONS = MappingProxyType({
    "zebra": f"-A 127.0.0.1 -s {ZEBRA_NL_BUFSIZE}",
    "bgpd": FRR_DEFAULT_OPTIONS,
    "staticd": FRR_DEFAULT_OPTIONS,
    "bfdd": FRR_DEFAULT_OPTIONS,
})
#: railab's FRR daemons in start order (zebra first: the others connect to it): zebra (RIB/FIB),
#: staticd (rail blackhole aggregates), bgpd, bfdd (fabric BFD).
FRR_DAEMONS = ("zebra", "staticd", "bgpd", "bfdd")

#: Switch sysctls (docs/architecture.md): routing on, L4 ECMP hash so the RoCEv2 UDP source port
#: spreads flows (fib_multipath_hash_policy=3 over fib_multipath_hash_fields 0x37 = 55: source
#: and destination IP, protocol, source and destination port; not policy 1, which reuses a
#: forwarded packet's own per-boot hash and ignores the seed, railab.traffic.ecmp.HASH_POLICIES),
#: no ICMP rate limit (traceroute-style hop probes),
#: no DAD (link-local addresses usable at once for BGP unnumbered), IPv6 enabled.
SWITCH_SYSCTLS = MappingProxyType({
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.forwarding": "1",
    "net.ipv6.conf.all.forwarding": "1",
    "net.ipv6.conf.default.forwarding": "1",
    "net.ipv4.fib_multipath_hash_fields": "55",
    "net.ipv4.fib_multipath_hash_policy": "3",
    "net.ipv6.fib_multipath_hash_fields": "55",
    "net.ipv6.fib_multipath_hash_policy": "3",
    "net.ipv4.icmp_ratelimit": "0",
    "net.ipv6.icmp.ratelimit": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv6.conf.default.disable_ipv6": "0",
})
#: Server sysctls: a server never transits (ip_forward=0); ARP answered only for the address on
#: the asking interface and sourced from it (arp_ignore=1, arp_announce=2, the usual multi-NIC
#: host settings); loose reverse-path filtering (rp_filter=2) since replies use per-NIC tables.
SERVER_SYSCTLS = MappingProxyType({
    "net.ipv4.ip_forward": "0",
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.default.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
    "net.ipv4.conf.default.arp_announce": "2",
    "net.ipv4.conf.all.rp_filter": "2",
    "net.ipv4.conf.default.rp_filter": "2",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv6.conf.default.disable_ipv6": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
})

FRR_CONF = ("frr.conf", "/etc/frr/frr.conf")
FRR_DAEMONS_FILE = ("daemons", "/etc/frr/daemons")
#: sonic-vs binds: never a path docker-sonic-vs's start.sh moves onto (topologies.sonic); the
#: default image generation's target here, ``lab.sonic_image`` picks another in the clab file.
SONIC_CONFIG_DB = ("config_db.json", SONIC_IMAGES[DEFAULT_SONIC_IMAGE].config_db_target)
SONIC_FRR_CONF = ("frr.conf", SONIC_FRR_CONF_TARGET)


class NodeKindError(UsageError):
    """An unknown or clashing node kind (exit 2); the message lists the registered kinds."""


@dataclass(frozen=True)
class NodeKind:
    """One kind of lab node.

    * ``name``: the kind in ``lab.json`` (``nodes[].kind``) and in the intent's ``lab.kind``;
    * ``role``: ``switch`` (leaf/spine) or ``server``;
    * ``clab_kind``: containerlab's node kind; ``image``: the default image (pinned tag), which
      ``lab.images.<image_key>`` of the intent overrides;
    * ``binds``: ``(file under configs/<node>/, path in the node)`` pairs, in clab bind order;
      ``config_db.json`` among them makes the generator render a SONiC config_db;
    * ``sysctls``: set in the node (clab ``sysctls``, the netns runtime writes them too);
    * ``daemons``: FRR daemons in start order (empty: no routing stack; zebra first: the others
      connect to it); the netns runtime starts exactly these, in this order;
    * ``daemon_options``: command-line options per daemon (``<daemon>_options`` of the
      ``daemons`` file; a daemon not listed gets :data:`FRR_DEFAULT_OPTIONS`);
    * ``max_ports``: data ports the node has (None: no limit); ``max_ecmp``: widest ECMP set;
    * ``port_naming``: how ``frr.conf``/config_db name a port: ``eth`` (the lab's ``eth<k>``) or
      ``sonic`` (``Ethernet<4(k-1)>``); ``loopback_interface``: where the loopback /32 sits in
      ``frr.conf`` (None: elsewhere, e.g. config_db's ``Loopback0``);
    * ``post_deploy``: the steps the containerlab runtime runs in the node after ``containerlab
      deploy``, as data: ``post_deploy(binds, boot_timeout_s=...)`` -> a list of
      ``railab.topologies.sonic.Step`` for ``binds`` ``{container path: bound file name}``
      (None: nothing to run; sonic-vs: :func:`railab.topologies.sonic.post_deploy_for_binds`).
    """

    name: str
    role: Literal["switch", "server"]
    clab_kind: str
    image: str
    image_key: str = ""
    binds: tuple[tuple[str, str], ...] = ()
    sysctls: Mapping[str, str] = field(default_factory=dict)
    daemons: tuple[str, ...] = ()
    daemon_options: Mapping[str, str] = field(default_factory=lambda: FRR_DAEMON_OPTIONS)
    max_ports: int | None = None
    max_ecmp: int | None = None
    port_naming: Literal["eth", "sonic"] = "eth"
    loopback_interface: str | None = "lo"
    description: str = ""
    post_deploy: Callable[..., list] | None = None

    def clab_binds(self, node: str) -> list[str]:
        """containerlab ``binds`` lines for ``node``: ``configs/<node>/<file>:<path>``."""
        return [f"configs/{node}/{src}:{dst}" for src, dst in self.binds]

    @property
    def files(self) -> tuple[str, ...]:
        """Config files bound into the node (names under ``configs/<node>/``)."""
        return tuple(src for src, _ in self.binds)

    def options_of(self, daemon: str) -> str:
        """The command-line options of ``daemon`` on this kind (``<daemon>_options``)."""
        return self.daemon_options.get(daemon, FRR_DEFAULT_OPTIONS)

    def record(self) -> dict:
        """The JSON record of this kind in ``lab.json`` ``node_kinds`` (and ``railab kinds``)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["sysctls"] = dict(self.sysctls)
        d["binds"] = [list(b) for b in self.binds]
        d["daemons"] = list(self.daemons)
        d["daemon_options"] = {n: self.options_of(n) for n in self.daemons}
        d["post_deploy"] = (f"{self.post_deploy.__module__}.{self.post_deploy.__qualname__}"
                            if self.post_deploy else None)
        return d


_KINDS: dict[str, NodeKind] = {}


def register_node_kind(kind: NodeKind, *, replace: bool = False) -> NodeKind:
    """Add ``kind`` to the registry and return it.

    Raises NodeKindError when a kind of that name exists (unless ``replace``) or when a switch
    kind has no FRR daemons (the generator renders FRR configs for every switch).
    """
    if kind.name in _KINDS and not replace:
        raise NodeKindError(f"node kind {kind.name!r} is already registered")
    if kind.role == "switch" and not kind.daemons:
        raise NodeKindError(f"switch kind {kind.name!r} needs FRR daemons (e.g. FRR_DAEMONS)")
    if kind.daemons and kind.daemons[0] != "zebra":
        raise NodeKindError(f"kind {kind.name!r}: zebra must be the first daemon (the others "
                            f"connect to it), got {', '.join(kind.daemons)}")
    _KINDS[kind.name] = kind
    return kind


def unregister_node_kind(name: str) -> None:
    """Remove a kind (tests registering a dummy kind clean up with this); no-op if absent."""
    _KINDS.pop(name, None)


def node_kinds(role: str | None = None) -> dict[str, NodeKind]:
    """Registered kinds by name, in registration order; ``role`` filters (``switch``/``server``)."""
    return {n: k for n, k in _KINDS.items() if role is None or k.role == role}


def get_node_kind(name: str) -> NodeKind:
    """The kind called ``name``; raises NodeKindError listing the registered kinds."""
    try:
        return _KINDS[name]
    except KeyError:
        raise NodeKindError(
            f"unknown node kind {name!r}; registered kinds: {', '.join(_KINDS)}") from None


def kind_of_clab(clab_kind: str, binds: Mapping[str, str] | None = None) -> NodeKind | None:
    """The registered kind a containerlab node of kind ``clab_kind`` is: the one kind with that
    ``clab_kind`` (several share ``linux``: then the one whose bind targets match ``binds``
    ``{container path: file name}``, else None)."""
    cands = [k for k in _KINDS.values() if k.clab_kind == clab_kind]
    if len(cands) > 1 and binds is not None:
        cands = [k for k in cands if {dst for _, dst in k.binds} == set(binds)]
    return cands[0] if len(cands) == 1 else None


def switch_kind_names() -> list[str]:
    """Names of the registered switch kinds (what ``lab.kind`` accepts)."""
    return list(node_kinds("switch"))


FRR = register_node_kind(NodeKind(
    name="frr", role="switch", clab_kind="linux", image="railab/frr:8.4.4", image_key="frr",
    binds=(FRR_CONF, FRR_DAEMONS_FILE), sysctls=SWITCH_SYSCTLS, daemons=FRR_DAEMONS,
    max_ecmp=FRR_MAX_ECMP, description="FRR 8.4 router (Debian build, images/frr)",
))
SONIC_VS = register_node_kind(NodeKind(
    name="sonic-vs", role="switch", clab_kind="sonic-vs", image="docker-sonic-vs:202305",
    image_key="sonic_vs", binds=(SONIC_CONFIG_DB, SONIC_FRR_CONF), sysctls=SWITCH_SYSCTLS,
    daemons=SONIC_FRR_DAEMONS, max_ports=32, max_ecmp=FRR_MAX_ECMP, port_naming="sonic",
    loopback_interface=None, post_deploy=post_deploy_for_binds,
    description="SONiC virtual switch (HwSKU Force10-S6000, 32 ports), FRR via vtysh -f, no BFD",
))
LINUX = register_node_kind(NodeKind(
    name="linux", role="server", clab_kind="linux", image="railab/gpu-server:latest",
    image_key="server", sysctls=SERVER_SYSCTLS,
    description="GPU server: one NIC per rail, policy routing per NIC (images/gpu-server)",
))
#: The GPU server kind (``nodes[].kind`` of every server).
SERVER_KIND = LINUX.name
