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
from dataclasses import dataclass, field
from pathlib import Path

from railab.errors import UsageError
from railab.topologies import clab as clab_mod
from railab.topologies import routing
from railab.topologies.bfd import BfdProfile, control_plane
from railab.topologies.frr import FRR_VERSION, Port, SwitchConfig, render_daemons, render_frr_conf
from railab.topologies.intent import Intent, IntentError, LabShape, load_intent, resolve_lab
from railab.topologies.labspec import (
    BgpSession,
    Endpoint,
    ExpectedRoute,
    LabSpec,
    Link,
    Nic,
    Node,
    RailSubnet,
)
from railab.topologies.naming import (
    eth,
    is_lab_name,
    lab_name_rule,
    leaf_name,
    nos_port,
    server_name,
    spine_name,
)
from railab.topologies.nodekinds import SERVER_KIND, get_node_kind
from railab.topologies.pathclasses import Fabric, lab_hops
from railab.topologies.qos import DEFAULT_QOS
from railab.topologies.sonic import SonicSwitch, render_config_db

SPINE_ASN = 4200000000
TABLE_BASE = routing.TABLE_BASE


@dataclass
class _Sw:
    name: str
    role: str
    index: int  # 1-based within its role (leaf index is lab-wide)
    group: int | None
    rails: list[int]
    asn: int = 0
    loopback: str = ""
    ports: list[tuple[str, str, str]] = field(default_factory=list)  # (iface, peer, peer_iface)

    def next_port(self) -> str:
        return eth(len(self.ports) + 1)


@dataclass
class BuiltLab:
    """A lab in memory: the ``LabSpec`` plus per-file texts keyed by relative path."""

    spec: LabSpec
    files: dict[str, str]
    topology: dict


def build_lab(intent: Intent, *, name: str | None = None) -> BuiltLab:
    """Build the whole lab in memory (no file I/O). Raises IntentError on impossible labs."""
    shape = resolve_lab(intent)
    lab_name = name or intent.name
    if name is not None and not is_lab_name(name):
        raise IntentError(lab_name_rule(name, "name"))
    spec = _build_spec(intent, shape, lab_name)
    files = _render_configs(spec, shape)
    topo = clab_mod.build_topology(spec, shape.images, sonic_image=shape.sonic_image)
    clab_mod.validate_topology(topo)
    files[f"{lab_name}.clab.yml"] = clab_mod.dump_topology(topo)
    files["lab.json"] = spec.dump()
    return BuiltLab(spec=spec, files=files, topology=topo)


def _build_spec(intent: Intent, s: LabShape, lab_name: str) -> LabSpec:
    rail_opt = s.architecture == "rail-optimized"
    kind = s.node_kind

    def nos(port: str) -> str:  # the switch NOS's name of a lab port (lab.json records it)
        return nos_port(port, kind.port_naming, kind.max_ports)

    spines = [_Sw(spine_name(i), "spine", i, None, [], asn=SPINE_ASN) for i in range(1, s.spines + 1)]
    leaves: list[_Sw] = []
    leaf_of: dict[tuple[int, int], _Sw] = {}
    idx = 0
    for g in range(1, s.groups + 1):
        for j in range(s.leaves_per_group):
            idx += 1
            rails = list(range(j * s.rails_per_leaf + 1, (j + 1) * s.rails_per_leaf + 1))
            nm = leaf_name(idx, group=g, rail=rails[0]) if rail_opt else leaf_name(idx)
            lf = _Sw(nm, "leaf", idx, g, rails, asn=SPINE_ASN + idx)
            leaves.append(lf)
            for r in rails:
                leaf_of[(g, r)] = lf
    pool = s.loopback_pool.network_address
    for sw in spines:
        sw.loopback = str(pool + sw.index)
    for lf in leaves:
        lf.loopback = str(pool + s.spines + lf.index)

    # rail subnets, in (group, rail) order
    subnets = s.rail_pool.subnets(new_prefix=s.rail_prefixlen)
    rail_net: dict[tuple[int, int], ipaddress.IPv4Network] = {}
    for g in range(1, s.groups + 1):
        for r in range(1, s.rails + 1):
            rail_net[(g, r)] = next(subnets)

    nodes: list[Node] = []
    nics: list[Nic] = []
    links: list[Link] = []
    servers: list[tuple[str, int]] = []
    # downlinks: server order, then rail order (a leaf sees its servers in order)
    for g in range(1, s.groups + 1):
        for k in range(s.servers_per_group):
            srv = server_name((g - 1) * s.servers_per_group + k + 1)
            servers.append((srv, g))
            for n in range(1, s.rails + 1):
                lf = leaf_of[(g, n)]
                port = lf.next_port()
                net = rail_net[(g, n)]
                leaf_ip = net.network_address + 2 * k
                iface = eth(n)
                lf.ports.append((port, srv, iface))
                nics.append(Nic(
                    server=srv, nic=n, gpu=n - 1, interface=iface, group=g, rail=n,
                    address=f"{leaf_ip + 1}/31", gateway=str(leaf_ip), table=TABLE_BASE + n,
                    leaf=lf.name, leaf_port=nos(port),
                ))
                links.append(Link(
                    a=Endpoint(node=srv, interface=iface), b=Endpoint(node=lf.name, interface=port),
                    role="server-leaf", speed_gbps=s.port_speed_gbps, mtu=s.mtu,
                ))
    # uplinks: leaf order; per leaf spine order, then parallel link; spine ports in leaf order
    sessions: list[BgpSession] = []
    for lf in leaves:
        for sp in spines:
            for _p in range(s.links_per_pair):
                lport, sport = lf.next_port(), sp.next_port()
                lf.ports.append((lport, sp.name, sport))
                sp.ports.append((sport, lf.name, lport))
                links.append(Link(
                    a=Endpoint(node=lf.name, interface=lport),
                    b=Endpoint(node=sp.name, interface=sport),
                    role="leaf-spine", speed_gbps=s.port_speed_gbps, mtu=s.mtu,
                ))
                sessions.append(BgpSession(
                    node=lf.name, interface=nos(lport), peer=sp.name, peer_interface=nos(sport),
                    local_asn=lf.asn, remote_asn=sp.asn,
                ))

    for sw in spines + leaves:
        nodes.append(Node(
            name=sw.name, role=sw.role, kind=s.kind, group=sw.group, rails=sw.rails, asn=sw.asn,
            router_id=sw.loopback, loopback=f"{sw.loopback}/32", ports=len(sw.ports),
        ))
    for srv, g in servers:
        nodes.append(Node(name=srv, role="server", kind=SERVER_KIND, group=g,
                          rails=list(range(1, s.rails + 1)), ports=s.rails))

    rail_subnets = [
        RailSubnet(group=g, rail=r, prefix=str(net), leaf=leaf_of[(g, r)].name)
        for (g, r), net in rail_net.items()
    ]
    expected = _expected_routes(spines, leaves, rail_net, s, nos)
    hops = lab_hops(Fabric(s.architecture, s.rails, s.rails_per_leaf, s.groups))
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
        spines=s.spines,
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
        qos=DEFAULT_QOS,
        bfd=bfd,
        ra_interval_s=timers.ra_interval_s,
        control_plane_rule=timers.rule,
    )


def _expected_routes(spines: list[_Sw], leaves: list[_Sw], rail_net: dict, s: LabShape,
                     nos=lambda p: p) -> dict[str, list[ExpectedRoute]]:
    """BGP-learned prefixes per switch with their ECMP width (RFC 7938 routing).

    Leaf: every other leaf's rail subnets and loopback via all uplinks (width spines x
    links_per_pair); each spine's loopback via the links to that spine (spines share an ASN, so a
    spine loopback is never re-advertised by another spine). Spine: each leaf's rail subnets and
    loopback via the links to that leaf; other spines' loopbacks are never learnt (AS_PATH loop).
    Rail-only leaves have no BGP neighbours: nothing learnt, so no route between rails that do
    not share a leaf. ``nos`` maps a lab port to the NOS's name (route interfaces as FRR shows them).
    """
    def prefixes(lf: _Sw) -> list[str]:
        return [str(rail_net[(lf.group, r)]) for r in lf.rails] + [f"{lf.loopback}/32"]

    def ports_to(sw: _Sw, peer: str) -> list[str]:
        return [nos(p) for p, pn, _ in sw.ports if pn == peer]

    out: dict[str, list[ExpectedRoute]] = {}
    spine_names = {sp.name for sp in spines}
    for lf in leaves:
        routes: list[ExpectedRoute] = []
        uplinks = [nos(p) for p, pn, _ in lf.ports if pn in spine_names]
        if spines:
            for other in leaves:
                if other is lf:
                    continue
                for pfx in prefixes(other):
                    routes.append(ExpectedRoute(prefix=pfx, ecmp_width=len(uplinks),
                                                interfaces=uplinks))
            for sp in spines:
                via = ports_to(lf, sp.name)
                routes.append(ExpectedRoute(prefix=f"{sp.loopback}/32", ecmp_width=len(via),
                                            interfaces=via))
        out[lf.name] = _sorted_routes(routes)
    for sp in spines:
        routes = []
        for lf in leaves:
            via = ports_to(sp, lf.name)
            for pfx in prefixes(lf):
                routes.append(ExpectedRoute(prefix=pfx, ecmp_width=len(via), interfaces=via))
        out[sp.name] = _sorted_routes(routes)
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
                fabric_ports.append(Port(ifname(iface), desc))
        cfg = SwitchConfig(
            name=node.name, role=node.role, asn=node.asn, router_id=node.router_id,
            loopback=node.router_id, group=node.group, rails=node.rails,
            rail_subnets=rails_of_leaf.get(node.name, []), server_ports=server_ports,
            fabric_ports=fabric_ports, loopback_interface=kind.loopback_interface,
            bfd=spec.bfd, ra_interval_s=spec.ra_interval_s, max_ecmp=kind.max_ecmp,
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


def generate(intent: Intent | str | Path, outdir: str | Path, *, name: str | None = None) -> Path:
    """Generate the lab for ``intent`` into ``outdir`` and return the lab directory.

    ``intent``: an :class:`Intent`, a shipped intent name (``"mini"``) or a YAML path. ``outdir``
    is the lab directory itself (docs/architecture.md: ``railab generate INTENT -o DIR``); it is
    replaced if it exists and holds a previous railab lab (a ``lab.json``), and refused if it is a
    non-empty directory of something else. ``name`` overrides the lab name.

    The lab is written to a temporary sibling directory and renamed into place, so a failure
    leaves nothing half-written. Raises IntentError (a UsageError) for bad intents and
    OutputError (a UsageError) when ``outdir``'s parent cannot be created or written.
    """
    if not isinstance(intent, Intent):
        intent = load_intent(intent)
    built = build_lab(intent, name=name)
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
