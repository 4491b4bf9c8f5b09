"""Lab generation: intent -> lab directory (``<lab>.clab.yml``, ``lab.json``, ``configs/``).

Stages (netlab-style transform, typed): :func:`topologies.intent.resolve_lab` (size, checks) ->
:func:`build_lab` (names, ports, addressing, ASNs, expected state as a ``LabSpec``) ->
per-device rendering (:mod:`topologies.frr`, :mod:`topologies.sonic`, :mod:`topologies.clab`) ->
atomic write. Every convention is docs/architecture.md's:

* names (:mod:`railab.topologies.naming`): ``spine<i>``, ``g<g>-leaf<r>`` (Rail-optimized),
  ``leaf<i>`` (Rail-only), ``srv<i>``, ports ``eth<k>``; lab.json's session interfaces, expected
  route interfaces and NIC leaf ports use the switch NOS's name (``naming.nos_port``:
  ``Ethernet<4(k-1)>`` on sonic-vs), links keep ``eth<k>``;
* sonic-vs: parallel leaf-spine links get numbered /31s from ``lab.p2p_pool``
  (:func:`_p2p_addresses`), no BFD (no bfdd in the image), binds by ``lab.sonic_image``;
* node kinds (:mod:`railab.topologies.nodekinds`): images, binds, sysctls, daemons, port limits;
  ``expected_hops`` from the path class registry (:mod:`railab.topologies.pathclasses`); the QoS
  and BFD profiles and the RA interval (:mod:`railab.topologies.qos`, :mod:`railab.topologies.bfd`,
  scaled with the number of fabric sessions unless the intent sets them) are recorded in ``lab.json``;
* cabling "NIC N to Leaf N" (seed guide): server NIC ``n`` = ``eth<n>`` = rail ``n`` goes to the
  leaf carrying rail ``n`` in the server's group;
* switch ports: leaf downlinks first (server order, then rail order), then uplinks (spine order,
  then parallel link); spine ports in leaf order, then parallel link;
* addressing: one rail subnet per (group, rail) carved in order from ``rail_pool``; server ``k``
  (0-based in its group) gets the /31 at ``subnet + 2k`` (leaf ``+2k``, server ``+2k+1``);
  loopbacks from ``loopback_pool``: spines ``pool+1..S``, then leaves ``pool+S+1..``;
* ASNs (RFC 7938, RFC 6996 private 4-byte): spines ``4200000000``, leaf ``i`` ``4200000000+i``;
* servers: NIC ``n`` in table ``100+n`` with ``from <addr> lookup 100+n``.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from railab.errors import UsageError
from railab.topologies import clab as clab_mod
from railab.topologies import routing
from railab.topologies.bfd import BfdProfile, control_plane
from railab.topologies.cabling import Layout, Wiring, wire
from railab.topologies.frr import FRR_VERSION, Port, SwitchConfig, render_daemons, render_frr_conf
from railab.topologies.intent import Intent, IntentError, LabShape, load_intent, resolve_lab
from railab.topologies.labspec import (
    BgpSession,
    Endpoint,
    ExpectedRoute,
    LabSpec,
    Link,
    LoadBalancing,
    Nic,
    Node,
    RailSubnet,
)
from railab.topologies.naming import is_lab_name, lab_name_rule, nos_port
from railab.topologies.nodekinds import SERVER_KIND, get_node_kind
from railab.topologies.pathclasses import Fabric, lab_hops
from railab.topologies.sonic import SonicSwitch, render_config_db

SPINE_ASN = 4200000000
#: three tiers: the spines of pod ``p`` share ``POD_SPINE_ASN + p`` (RFC 7938 section 5.2.1)
POD_SPINE_ASN = 4200100000
#: three tiers: every super-spine
SUPERSPINE_ASN = 4200200000
TABLE_BASE = routing.TABLE_BASE


@dataclass
class BuiltLab:
    """A lab in memory: the ``LabSpec`` plus per-file texts keyed by relative path."""

    spec: LabSpec
    files: dict[str, str]
    topology: dict


def build_lab(intent: Intent, *, name: str | None = None,
              schema_cache: str | Path | None = None) -> BuiltLab:
    """Build the whole lab in memory (no file I/O but ``schema_cache``, the directory of
    containerlab-schema validations that passed: :func:`railab.topologies.clab.validate_topology`).
    Raises IntentError on impossible labs."""
    shape = resolve_lab(intent)
    lab_name = name or intent.name
    if name is not None and not is_lab_name(name):
        raise IntentError(lab_name_rule(name, "name"))
    spec = _build_spec(intent, shape, lab_name)
    files = _render_configs(spec, shape)
    topo = clab_mod.build_topology(spec, shape.images, sonic_image=shape.sonic_image)
    clab_mod.validate_topology(topo, cache=schema_cache)
    files[f"{lab_name}.clab.yml"] = clab_mod.dump_topology(topo)
    files["lab.json"] = spec.dump()
    return BuiltLab(spec=spec, files=files, topology=topo)


def layout_of(s: LabShape) -> Layout:
    """The :class:`railab.topologies.cabling.Layout` of a resolved lab shape (the one cabling
    rule builds the lab's ports, ``railab generate --cabling`` and the cabling check)."""
    b = s.breakouts or {}
    return Layout(
        architecture=s.architecture, rails=s.rails, rails_per_leaf=s.rails_per_leaf,
        group_servers=(s.servers_per_group,) * s.groups, spines=s.spines,
        links_per_pair=s.links_per_pair, groups_per_pod=s.groups_per_pod,
        superspines=s.superspines, superspine_links=s.superspine_links,
        nic_speed_gbps=s.nic_speed, fabric_speed_gbps=s.fabric_speed,
        leaf_breakout_nic=b.get("leaf_breakout_nic", 1),
        leaf_breakout_fabric=b.get("leaf_breakout_fabric", 1),
        spine_breakout=b.get("spine_breakout", 1),
        superspine_breakout=b.get("superspine_breakout", 1),
    )


def _asns(w: Wiring) -> dict[str, int]:
    """ASNs (RFC 7938 section 5.2, RFC 6996 private 4-byte): leaf ``i`` ``4200000000 + i``;
    two tiers: every spine :data:`SPINE_ASN`; three tiers: the spines of pod ``p`` share
    ``POD_SPINE_ASN + p``, every super-spine :data:`SUPERSPINE_ASN` (a shared ASN per tier
    keeps routes from turning back down and up: AS_PATH loop detection)."""
    out = {lf.name: SPINE_ASN + lf.index for lf in w.leaves}
    for sp in w.spines:
        out[sp.name] = POD_SPINE_ASN + sp.pod if sp.pod is not None else SPINE_ASN
    for ss in w.superspines:
        out[ss.name] = SUPERSPINE_ASN
    return out


def _build_spec(intent: Intent, s: LabShape, lab_name: str) -> LabSpec:
    w = wire(layout_of(s))
    spines, leaves, supers = w.spines, w.leaves, w.superspines
    asn = _asns(w)
    kind = s.node_kind

    def nos(port: str) -> str:  # the switch NOS's name of a lab port (lab.json records it)
        return nos_port(port, kind.port_naming, kind.max_ports)

    pool = s.loopback_pool.network_address
    # loopbacks: spines pool+1.., then leaves, then super-spines (two-tier labs unchanged)
    loop: dict[str, str] = {}
    for i, sw in enumerate(spines + leaves + supers, start=1):
        loop[sw.name] = str(pool + i)

    # rail subnets, in (group, rail) order
    subnets = s.rail_pool.subnets(new_prefix=s.rail_prefixlen)
    rail_net: dict[tuple[int, int], ipaddress.IPv4Network] = {}
    for g in range(1, s.groups + 1):
        for r in range(1, s.rails + 1):
            rail_net[(g, r)] = next(subnets)

    slot = {srv: (g, k) for srv, g, k in w.servers}
    nodes: list[Node] = []
    nics: list[Nic] = []
    links: list[Link] = []
    sessions: list[BgpSession] = []
    for c in w.cables:
        links.append(Link(a=Endpoint(node=c.a_node, interface=c.a_port),
                          b=Endpoint(node=c.b_node, interface=c.b_port),
                          role=c.kind, speed_gbps=c.speed_gbps, mtu=s.mtu))
        if c.kind == "server-leaf":
            g, k = slot[c.a_node]
            net = rail_net[(g, c.rail)]
            leaf_ip = net.network_address + 2 * k
            nics.append(Nic(
                server=c.a_node, nic=c.rail, gpu=c.rail - 1, interface=c.a_port, group=g,
                rail=c.rail, address=f"{leaf_ip + 1}/31", gateway=str(leaf_ip),
                table=TABLE_BASE + c.rail, leaf=c.b_node, leaf_port=nos(c.b_port),
            ))
        else:
            sessions.append(BgpSession(
                node=c.a_node, interface=nos(c.a_port), peer=c.b_node, peer_interface=nos(c.b_port),
                local_asn=asn[c.a_node], remote_asn=asn[c.b_node],
            ))

    for sw in spines + leaves + supers:
        nodes.append(Node(
            name=sw.name, role=sw.role, kind=s.kind, group=sw.group, rails=sw.rails,
            asn=asn[sw.name], router_id=loop[sw.name], loopback=f"{loop[sw.name]}/32",
            ports=len(sw.ports), pod=sw.pod,
        ))
    for srv, g, _k in w.servers:
        nodes.append(Node(name=srv, role="server", kind=SERVER_KIND, group=g,
                          rails=list(range(1, s.rails + 1)), ports=s.rails,
                          pod=w.layout.pod_of_group(g)))

    rail_subnets = [
        RailSubnet(group=g, rail=r, prefix=str(net), leaf=w.leaf_of[(g, r)].name)
        for (g, r), net in rail_net.items()
    ]
    expected = _expected_routes(w, loop, rail_net, nos)
    hops = lab_hops(Fabric(s.architecture, s.rails, s.rails_per_leaf, s.groups,
                           s.groups_per_pod))
    d = intent.design
    design = {
        "intent": intent.name,
        "description": intent.description,
        "architecture": d.architecture,
        "gpus": d.gpus,
        "gpus_per_server": d.gpus_per_server,
        "leaf": d.leaf,
        "spine": d.spine,
        "port_speed_gbps": d.port_speed_gbps,
        "oversubscription": d.oversubscription,
        "lab_scale": s.scale,
        "rails_per_leaf": s.rails_per_leaf,
        "plan": s.plan,
    }
    for key in ("nic_speed_gbps", "fabric_speed_gbps", "tiers"):
        if getattr(d, key) is not None:
            design[key] = getattr(d, key)
    if s.breakouts:
        design["cabling"] = dict(s.breakouts)
    timers = control_plane(len(sessions), s.bfd, s.ra_interval_s)
    bfd = timers.bfd if "bfdd" in kind.daemons else BfdProfile(enabled=False)  # sonic-vs: no bfdd
    return LabSpec(
        name=lab_name,
        architecture=s.architecture,
        kind=s.kind,
        design=design,
        gpus_per_server=s.rails,
        rails=s.rails,
        groups=s.groups,
        servers_per_group=s.servers_per_group,
        spines=s.spines * s.pods,
        links_per_leaf_spine_pair=s.links_per_pair if s.spines else 0,
        port_speed_gbps=s.port_speed_gbps,
        oversubscription=s.oversubscription,
        mtu=s.mtu,
        nodes=nodes,
        nics=nics,
        links=links,
        rail_subnets=rail_subnets,
        bgp_sessions=sessions,
        expected_routes=expected,
        expected_hops=hops,
        node_kinds={k: get_node_kind(k).record() for k in dict.fromkeys([s.kind, SERVER_KIND])},
        qos=s.qos,
        load_balancing=LoadBalancing(mode=s.load_balancing),
        bfd=bfd,
        ra_interval_s=timers.ra_interval_s,
        bgp_keepalive_s=timers.bgp_keepalive_s,
        bgp_hold_s=timers.bgp_hold_s,
        control_plane_rule=timers.rule,
        tiers=3 if s.three_tier else 2,
        pods=s.pods,
        groups_per_pod=s.groups_per_pod,
        superspines=s.superspines,
        warnings=list(s.warnings),
    )


def _expected_routes(w: Wiring, loop: dict[str, str], rail_net: dict,
                     nos=lambda p: p) -> dict[str, list[ExpectedRoute]]:
    """BGP-learned prefixes per switch with their ECMP width (RFC 7938 routing).

    Two tiers. Leaf: every other leaf's rail subnets and loopback via all uplinks (width spines
    x links_per_pair); each spine's loopback via the links to that spine (spines share an ASN,
    so a spine loopback is never re-advertised by another spine). Spine: each leaf's rail
    subnets and loopback via the links to that leaf; other spines' loopbacks are never learnt
    (AS_PATH loop). Rail-only leaves have no BGP neighbours: nothing learnt, so no route
    between rails that do not share a leaf.

    Three tiers (pod spines share an ASN per pod, super-spines one ASN). Leaf: every other
    leaf's prefixes (any pod) via all its uplinks; the loopback of its pod's spine ``i`` via
    the links to it; a super-spine's or another pod's spine ``i`` loopback via the links to its
    own pod's spine ``i`` (plane ``i``). Pod spine ``i``: its pod's leaves via the links to
    each; other pods' leaves via every link to the super-spines of plane ``i``; a plane-``i``
    super-spine loopback via the links to it; other pods' spine ``i`` loopbacks via every
    plane-``i`` super-spine link. Super-spine: every leaf's prefixes and its plane's spine
    loopbacks via the links to that pod's plane spine. Nothing else is learnt (a route back
    through the own pod's or the super-spine ASN is an AS_PATH loop). ``nos`` maps a lab port to
    the NOS's name (route interfaces as FRR shows them).
    """
    def prefixes(lf) -> list[str]:
        return [str(rail_net[(lf.group, r)]) for r in lf.rails] + [f"{loop[lf.name]}/32"]

    def ports_to(sw, peers: set[str]) -> list[str]:
        return [nos(p) for p, pn, _ in sw.ports if pn in peers]

    out: dict[str, list[ExpectedRoute]] = {}
    spines, leaves, supers = w.spines, w.leaves, w.superspines
    spine_names = {sp.name for sp in spines}
    three = bool(supers)

    def add(routes, pfx, via):
        routes.append(ExpectedRoute(prefix=pfx, ecmp_width=len(via), interfaces=via))

    for lf in leaves:
        routes: list[ExpectedRoute] = []
        uplinks = ports_to(lf, spine_names)
        if spines:
            for other in leaves:
                if other is not lf:
                    for pfx in prefixes(other):
                        add(routes, pfx, uplinks)
            mine = [sp for sp in spines if sp.pod == lf.pod]
            for sp in mine:
                add(routes, f"{loop[sp.name]}/32", ports_to(lf, {sp.name}))
            if three:
                by_plane = {sp.plane: sp for sp in mine}
                for sp in spines:
                    if sp.pod != lf.pod:
                        add(routes, f"{loop[sp.name]}/32", ports_to(lf, {by_plane[sp.plane].name}))
                for ss in supers:
                    add(routes, f"{loop[ss.name]}/32", ports_to(lf, {by_plane[ss.plane].name}))
        out[lf.name] = _sorted_routes(routes)
    for sp in spines:
        routes = []
        plane_ss = {ss.name for ss in supers if ss.plane == sp.plane}
        up = ports_to(sp, plane_ss)
        for lf in leaves:
            via = ports_to(sp, {lf.name}) if lf.pod == sp.pod else up
            for pfx in prefixes(lf):
                add(routes, pfx, via)
        for ss in supers:
            if ss.plane == sp.plane:
                add(routes, f"{loop[ss.name]}/32", ports_to(sp, {ss.name}))
        for other in spines:
            if three and other.pod != sp.pod and other.plane == sp.plane:
                add(routes, f"{loop[other.name]}/32", up)
        out[sp.name] = _sorted_routes(routes)
    for ss in supers:
        routes = []
        plane = {sp.pod: sp for sp in spines if sp.plane == ss.plane}
        for lf in leaves:
            for pfx in prefixes(lf):
                add(routes, pfx, ports_to(ss, {plane[lf.pod].name}))
        for sp in plane.values():
            add(routes, f"{loop[sp.name]}/32", ports_to(ss, {sp.name}))
        out[ss.name] = _sorted_routes(routes)
    return out


def _sorted_routes(routes: list[ExpectedRoute]) -> list[ExpectedRoute]:
    return sorted(routes, key=lambda r: ipaddress.IPv4Network(r.prefix))


def _render_configs(spec: LabSpec, s: LabShape) -> dict[str, str]:
    files: dict[str, str] = {}
    rails_of_leaf: dict[str, list[str]] = {}
    for rs in spec.rail_subnets:
        rails_of_leaf.setdefault(rs.leaf, []).append(rs.prefix)
    kind = s.node_kind
    sonic = kind.port_naming == "sonic"

    def ifname(e: str) -> str:
        return nos_port(e, kind.port_naming, kind.max_ports)

    def peer_port(peer: str, port: str) -> str:  # a switch peer's port as its NOS names it
        return port if spec.node(peer).role == "server" else ifname(port)

    p2p = _p2p_addresses(spec, s) if sonic else {}
    # the upper end of each fabric link (Link.b) listens: railab.topologies.frr, passive
    upper_ends = {(ln.b.node, ln.b.interface) for ln in spec.links if ln.role != "server-leaf"}
    for node in spec.nodes:
        if node.role == "server":
            continue
        links = spec.links_of(node.name)  # port order
        server_ports, fabric_ports = [], []
        srv_addr: dict[str, str] = {}
        for iface, peer, peer_if in links:
            desc = f"{peer}:{peer_port(peer, peer_if)}"
            nic = spec.nic_at(node.name, ifname(iface))
            if nic is not None:
                addr = f"{nic.gateway}/31"
                srv_addr[iface] = addr
                server_ports.append(Port(ifname(iface), desc, None if sonic else addr))
            else:
                fabric_ports.append(Port(ifname(iface), desc, passive=(node.name, iface) in upper_ends))
        cfg = SwitchConfig(
            name=node.name, role=node.role, asn=node.asn, router_id=node.router_id,
            loopback=node.router_id, group=node.group, rails=node.rails,
            rail_subnets=rails_of_leaf.get(node.name, []), server_ports=server_ports,
            fabric_ports=fabric_ports, loopback_interface=kind.loopback_interface,
            bfd=spec.bfd, ra_interval_s=spec.ra_interval_s, max_ecmp=kind.max_ecmp,
            bgp_keepalive_s=spec.bgp_keepalive_s, bgp_hold_s=spec.bgp_hold_s,
            frr_version=None if sonic else FRR_VERSION,
        )
        base = f"configs/{node.name}"
        files[f"{base}/frr.conf"] = render_frr_conf(cfg)
        files[f"{base}/daemons"] = render_daemons(kind.daemons, kind.daemon_options)
        if "config_db.json" in kind.files:
            files[f"{base}/config_db.json"] = render_config_db(SonicSwitch(
                name=node.name, role=node.role, asn=node.asn, loopback=node.router_id,
                mtu=s.mtu, server_ports=srv_addr,
                fabric_ports=[e for e, _, _ in links if e not in srv_addr],
                descriptions={e: f"{pn}:{peer_port(pn, pi)}" for e, pn, pi in links},
                max_ports=kind.max_ports, qos=spec.qos,
                fabric_addresses={e: a for (n, e), a in p2p.items() if n == node.name},
            ))
    return files


def _p2p_addresses(spec: LabSpec, s: LabShape) -> dict[tuple[str, str], str]:
    """Numbered /31s of the leaf-spine links when a pair has parallel links (sonic-vs: every
    port has the switch MAC, so parallel unnumbered links share one IPv6 link-local,
    sonic-net/sonic-buildimage#12042): link ``i`` (lab.json order) takes the ``i``-th /31 of
    ``lab.p2p_pool``, leaf side the even address. ``{(node, ethK): "a.b.c.d/31"}``; empty with
    one link per pair."""
    if spec.links_per_leaf_spine_pair < 2:
        return {}
    subnets = s.p2p_pool.subnets(new_prefix=31)
    out: dict[tuple[str, str], str] = {}
    for lk in spec.links:
        if lk.role != "leaf-spine":
            continue
        net = next(subnets)
        out[(lk.a.node, lk.a.interface)] = f"{net.network_address}/31"
        out[(lk.b.node, lk.b.interface)] = f"{net.network_address + 1}/31"
    return out


class OutputError(UsageError):
    """The output directory cannot be created or written (the message names it and says why)."""


def generate(intent: Intent | str | Path, outdir: str | Path, *, name: str | None = None,
             schema_cache: str | Path | None = None) -> Path:
    """Generate the lab for ``intent`` into ``outdir`` and return the lab directory.

    ``intent``: an :class:`Intent`, a shipped intent name (``"mini"``) or a YAML path. ``outdir``
    is the lab directory itself (docs/architecture.md: ``railab generate INTENT -o DIR``); it is
    replaced if it exists and holds a previous railab lab (a ``lab.json``), and refused if it is a
    non-empty directory of something else. ``name`` overrides the lab name. ``schema_cache``: see
    :func:`build_lab` (None: validate against containerlab's schema every time).

    The lab is written to a temporary sibling directory and renamed into place, so a failure
    leaves nothing half-written. Raises IntentError (a UsageError) for bad intents and
    OutputError (a UsageError) when ``outdir``'s parent cannot be created or written.
    """
    if not isinstance(intent, Intent):
        intent = load_intent(intent)
    built = build_lab(intent, name=name, schema_cache=schema_cache)
    out = Path(outdir).absolute()
    if out.exists():
        if not out.is_dir():
            raise IntentError(f"output {out} exists and is not a directory; pick another -o")
        if any(out.iterdir()) and not (out / "lab.json").exists():
            raise IntentError(
                f"output {out} is a non-empty directory without a lab.json; refusing to replace "
                "it: pick an empty or new directory"
            )
    if out.parent.exists() and not out.parent.is_dir():
        raise OutputError(f"output directory {out.parent} is not a directory: pick another -o")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise OutputError(
            f"output directory {out.parent} cannot be written ({exc.strerror or exc}): "
            "pick another -o (a writable directory)"
        ) from None
    try:
        for rel, text in sorted(built.files.items()):
            p = tmp / rel
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)
            except OSError as exc:
                raise OutputError(
                    f"cannot write the lab under {out.parent} ({exc.strerror or exc}): "
                    "free space or pick another -o"
                ) from None
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / "lab")
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
