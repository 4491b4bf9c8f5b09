"""FRR configuration rendering: ``configs/<switch>/frr.conf`` and ``configs/<switch>/daemons``.

One integrated ``frr.conf`` per switch (Jinja text template ``templates/frr.conf.j2``: the format
is text, so a text template is the right tool here; YAML/JSON are emitted from data structures).
What each part implements:

* ``frr defaults datacenter``: FRR's data-center profile (fast timers, ``bgp deterministic-med``,
  eBGP multipath). It does *not* set ``bgp bestpath as-path multipath-relax`` (ECMP over paths of
  equal length whose AS_PATHs differ, e.g. spines with distinct ASNs or a mixed-vendor spine
  layer), so it is set explicitly (issue 3).
* ASNs (RFC 7938 section 5.2, private 4-byte ASNs of RFC 6996): spines share one ASN so a route
  never leaves a spine towards another spine (AS_PATH loop detection), leaves have unique ASNs.
* Fabric links: BGP unnumbered - ``neighbor ethX interface peer-group FABRIC`` over the IPv6
  link-local address learnt from router advertisements (``ipv6 nd ra-interval N``,
  ``no ipv6 nd suppress-ra``; N = 3 s on small labs, scaled with the fabric port count by
  :func:`railab.topologies.bfd.scaled_ra_interval`), IPv4 NLRI with IPv6 next hops (RFC 5549 / RFC 8950,
  ``capability extended-nexthop``). Seed guide: "Leveraging IPv6 Link-Local, unnumbered BGP
  neighbors are established to exchange Rail subnet routes".
* Rail aggregate: ``ip route <rail subnet> blackhole`` (staticd) + ``network <rail subnet>``. The
  static route makes the aggregate present in the RIB regardless of how many server links are up
  (``bgp network import-check`` is on in FRR 8), and the /31s to servers stay connected routes that
  are never redistributed, so only the aggregate is announced (seed: "Independent subnets per
  Rail"). ``aggregate-address`` was not chosen: it needs the /31s in BGP first and withdraws the
  aggregate when every server link is down.
* ``maximum-paths``: at least the node's fabric links (ECMP across every uplink; seed: 1:1
  non-blocking), capped by the node kind's ``max_ecmp``
  (:data:`railab.topologies.nodekinds.FRR_MAX_ECMP`, Debian build: 256).
* ``bgp route-map delay-timer 0``: removes the 5 s route-map delay timer (peer NOTES.md).
* ``coalesce-time 200``: how long bgpd holds a new update subgroup's first UPDATE so that peers
  coming up together share one (FRR ``bgpd/bgp_updgrp.h``: by default 1 s plus 50 ms per peer,
  at most 10 s, i.e. 4.2 s on a leaf with 64 uplinks and 7.4 s on a spine with 128 downlinks,
  paid once per tier while the fabric first converges). 200 ms took the full 1024-GPU fabric's
  convergence after the daemons start from 6.9 s to 1.7 s.
* ``neighbor FABRIC sender-as-path-loop-detection``: a router does not send a peer the routes
  whose AS_PATH already holds that peer's ASN, which the peer would drop on receipt (RFC 4271
  section 9.1.2 loop detection). In this Clos every spine shares one ASN, so a leaf no longer
  re-advertises each spine's routes to every other spine and a spine no longer sends a leaf its
  own prefixes back: at 4096 GPUs a leaf otherwise sends ~128 prefixes x 64 uplinks of UPDATEs
  that are all discarded, while the fabric converges. Routing is unchanged (same best paths,
  same ECMP).
* ``neighbor ethX passive`` on the upper end of every fabric link (a spine's leaf-facing ports, a
  super-spine's spine-facing ports): the lower tier opens each session and the upper tier only
  listens (RFC 4271 section 8.2.1, PassiveTcpEstablishment). With both ends opening, nearly
  every session starts with a connection collision (RFC 4271 section 6.8): bgpd builds a second
  peer for the incoming connection and tears one down, and every attempt that meets a bgpd not
  yet listening ends in a reset, each costing bgpd a 640 KiB buffer clear (FRR 8.4 ``bgp_stop``).
  Measured on the full 1024-GPU fabric: bgpd 26.5 -> 9.6 CPU-s while it converges, ``up``
  23.9 -> 17.2 s. Routing is unchanged; a session re-forms on the leaf's 1 s connect retry.
* Loading: the file is an integrated config; apply it with ``vtysh -f``/``vtysh -b`` to running
  daemons. The whole file as every daemon's ``-f`` does not work (a daemon that does not know a
  block's opening line runs its ``exit`` at the top level and drops the rest of the file: staticd
  lost the blackhole routes); :func:`split_frr_conf` cuts it into each daemon's own part, which
  the netns runtime gives each daemon at start (no vtysh round trip per line).
* BFD (bfdd) on every fabric session, timers from :class:`railab.topologies.bfd.BfdProfile`
  (300 ms x 5 on small labs: detects a dead link in 1.5 s while tolerating a busy 2-core host;
  slower, then off, as the lab grows: :func:`railab.topologies.bfd.scaled_bfd`).
* ``daemons``: the node kind's ordered FRR daemons (:mod:`railab.topologies.nodekinds`).
* ``no zebra nexthop kernel enable``: zebra installs routes with their next hops inline
  (RFC 5549 routes as ``via 169.254.0.1 onlink`` plus a permanent neighbour entry, FRR's classic
  scheme) instead of kernel nexthop objects. With nexthop objects, FRR 8.4.4 on Linux 6.x leaves
  a nexthop group short of a member after a fabric link goes down and up while its RIB shows the
  full ECMP set installed (docs/checks.md; regression test ``tests/test_frr_regressions.py``).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2

from railab.topologies.bfd import DEFAULT_BFD, RA_MIN_S, BfdProfile
from railab.topologies.frrsplit import (  # noqa: F401 - re-exported: callers import it from here
    _TOP_LEVEL,
    _ZEBRA_INTERFACE,
    _owner,
    split_frr_conf,
)
from railab.topologies.nodekinds import (
    FRR_DAEMON_OPTIONS,
    FRR_DAEMONS,
    FRR_DEFAULT_OPTIONS,
    FRR_MAX_ECMP,
    FRR_PACKAGED_DAEMONS,
)

FRR_VERSION = "8.4.4"
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Port:
    """One interface in ``frr.conf``: ``address`` is ``a.b.c.d/31`` on server-facing ports;
    ``passive`` on a fabric port whose peer is the lower tier (this end listens, see the module
    docstring)."""

    interface: str
    description: str
    address: str | None = None
    passive: bool = False


@dataclass
class SwitchConfig:
    """Everything ``frr.conf`` needs for one switch.

    ``rail_subnets``: the aggregates a leaf announces (empty on spines); ``fabric_ports``:
    unnumbered BGP interfaces; ``server_ports``: routed /31 ports to server NICs;
    ``loopback_interface``: ``lo`` on FRR nodes, ``None`` on sonic-vs (Loopback0 comes from
    config_db's LOOPBACK_INTERFACE); ``bfd``: the fabric BFD timers; ``ra_interval_s``: IPv6
    RA interval on fabric ports, seconds; ``max_ecmp``: the node
    kind's ECMP cap (None: FRR's).
    """

    name: str
    role: str
    asn: int
    router_id: str
    loopback: str
    group: int | None = None
    rails: list[int] = field(default_factory=list)
    rail_subnets: list[str] = field(default_factory=list)
    server_ports: list[Port] = field(default_factory=list)
    fabric_ports: list[Port] = field(default_factory=list)
    loopback_interface: str | None = "lo"
    bfd: BfdProfile = DEFAULT_BFD
    ra_interval_s: int = RA_MIN_S
    bgp_keepalive_s: int = 3
    bgp_hold_s: int = 9
    max_ecmp: int | None = None
    #: the ``frr version`` line (None: omitted; sonic-vs images ship their own FRR release)
    frr_version: str | None = FRR_VERSION

    @property
    def maximum_paths(self) -> int:
        """ECMP width to configure: every fabric link (>= any prefix's path count), at least 1."""
        return max(1, len(self.fabric_ports))


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_frr_conf(cfg: SwitchConfig) -> str:
    """Render ``frr.conf`` text for one switch.

    Raises ValueError when the switch needs more ECMP paths than FRR supports
    (``cfg.max_ecmp``, default :data:`FRR_MAX_ECMP`).
    """
    cap = cfg.max_ecmp or FRR_MAX_ECMP
    if cfg.maximum_paths > cap:
        raise ValueError(
            f"{cfg.name}: {cfg.maximum_paths} fabric links exceed FRR's ECMP limit "
            f"({cap}); use fewer spines or parallel links"
        )
    return _env().get_template("frr.conf.j2").render(
        frr_version=cfg.frr_version,
        name=cfg.name,
        role=cfg.role,
        group=cfg.group,
        rails=cfg.rails,
        asn=cfg.asn,
        router_id=cfg.router_id,
        loopback=cfg.loopback,
        loopback_interface=cfg.loopback_interface,
        server_ports=cfg.server_ports,
        fabric_ports=cfg.fabric_ports,
        rail_subnets=cfg.rail_subnets,
        maximum_paths=cfg.maximum_paths,
        bfd=cfg.bfd,
        ra_interval_s=cfg.ra_interval_s,
        bgp_keepalive_s=cfg.bgp_keepalive_s,
        bgp_hold_s=cfg.bgp_hold_s,
    )


def render_daemons(daemons: tuple[str, ...] = FRR_DAEMONS,
                   options: Mapping[str, str] = FRR_DAEMON_OPTIONS) -> str:
    """The FRR ``daemons`` file (``/etc/frr/daemons``) enabling ``daemons`` (default: railab's
    zebra, staticd, bgpd, bfdd), every other packaged daemon off, in the packaging's order;
    then one ``<daemon>_options`` line per enabled daemon from ``options`` (a node kind's
    ``daemon_options``; missing: ``FRR_DEFAULT_OPTIONS``) **in start order** (``daemons``' order).
    FRR's init script ignores the order of the lines; the netns runtime
    (``railab.testbed.clabfile``) starts the daemons in the order of the ``_options`` lines.

    Raises ValueError for a daemon FRR does not package.
    """
    unknown = [d for d in daemons if d not in FRR_PACKAGED_DAEMONS]
    if unknown:
        raise ValueError(f"FRR has no daemon {', '.join(unknown)}; one of "
                         f"{', '.join(FRR_PACKAGED_DAEMONS)}")
    on = set(daemons)
    lines = ["# generated by railab (topologies/frr.py): FRR daemons for a railab switch",
             f"# start order (the _options lines): {' '.join(daemons)}"]
    lines += [f"{d}={'yes' if d in on else 'no'}" for d in FRR_PACKAGED_DAEMONS]
    lines.append("vtysh_enable=yes")
    lines += [f'{d}_options="{options.get(d, FRR_DEFAULT_OPTIONS)}"'
              for d in dict.fromkeys(daemons)]
    lines.append('frr_profile="datacenter"')
    return "\n".join(lines) + "\n"


def vtysh_path() -> str | None:
    """Path of ``vtysh`` if FRR is installed, else None."""
    return shutil.which("vtysh") or (
        "/usr/bin/vtysh" if Path("/usr/bin/vtysh").exists() else None
    )


def dry_run(path: str | Path, *, timeout: float = 30.0) -> tuple[bool, str]:
    """Check a config with FRR's own parser: ``vtysh --dryrun -f FILE`` (FRR 8.4).

    vtysh knows every daemon's commands, so one call checks zebra, bgpd, staticd and bfdd
    sections; it exits 0 when every line parses (``bgpd -C`` alone rejects the zebra lines).
    Returns ``(ok, output)``; raises FileNotFoundError when FRR is not installed.
    """
    vtysh = vtysh_path()
    if vtysh is None:
        raise FileNotFoundError("vtysh not found: install FRR (Debian package `frr`)")
    r = subprocess.run(
        [vtysh, "--dryrun", "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = (r.stdout + r.stderr).strip()
    return r.returncode == 0 and "Unknown command" not in out and "% " not in out, out

