"""Cabling: the one rule that assigns every cable its two ports, for a plan and for a lab.

"NIC N to Leaf N" (seed guide, Rail-optimized design principles) and the port order of
``docs/architecture.md`` live here and only here; the generator builds its links from
:func:`wire`, ``railab plan --cabling`` / ``railab generate --cabling`` write :func:`write_csv`
rows and the cabling check (``railab.checks.cabling``) reads :func:`lab_cables`, so all three
number ports the same way:

* servers ``srv<i>`` in group order; server NIC ``n`` = ``eth<n>`` = rail ``n`` goes to the leaf
  carrying rail ``n`` in the server's group;
* leaf ports: downlinks first (server order, then rail order), then uplinks (spine order, then
  parallel link);
* spine ports: leaf order, then parallel link; three-tier pod spines then their super-spine
  uplinks (the plane's super-spines in order, then parallel link);
* super-spine ports: pod order (the spine of its plane in each pod), then parallel link.

Three tiers (pods under super-spines, a 5-stage folded Clos as in RFC 7938 section 3.2): pod
spine ``i`` of every pod connects to the super-spines of *plane* ``i`` only (``superspines /
spines_per_pod`` per plane), so each super-spine reaches every pod once per plane.

Production ports (:func:`railab.topologies.naming.production_port_name`): each switch's ports
fill its cages in order, first the ports at the NIC speed (leaf downlinks), then the ports at
the fabric speed starting on a fresh cage; ``breakout`` = native cage speed / port speed
(CX864E-N: 800G cages, 2 x 400G per cage).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from railab.errors import UsageError
from railab.topologies.catalog import get_model, load_catalog
from railab.topologies.naming import (
    breakout_alias,
    breakout_port,
    eth,
    leaf_name,
    pod_spine_name,
    production_port,
    server_name,
    spine_name,
    superspine_name,
)

__all__ = ["Layout", "Cable", "Wiring", "SwitchPorts", "wire", "lab_cables", "write_csv",
           "csv_text", "CSV_COLUMNS", "CablingError", "plan_layout", "plan_wiring",
           "extra_link_spines",
           "layout_breakouts", "spec_breakouts"]

#: The CSV header (one line), then one row per cable.
CSV_COLUMNS = ("kind", "a_node", "a_port", "a_cage", "a_subport", "a_sonic", "a_alias",
               "b_node", "b_port", "b_cage", "b_subport", "b_sonic", "b_alias",
               "rail", "group", "pod", "speed_gbps")


class CablingError(UsageError):
    """A layout that cannot be cabled, or a cabling file that cannot be written."""


@dataclass(frozen=True)
class Layout:
    """What the cabling depends on (a plan at full size, or a lab).

    * ``architecture``: ``rail-only`` or ``rail-optimized``;
    * ``rails`` (= NICs per server), ``rails_per_leaf`` (Rail-only may carry several);
    * ``group_servers``: servers in each group, group 1 first (a partial last group is smaller);
    * ``spines``: spines (per pod when ``superspines``), ``links_per_pair``: leaf-spine links per
      pair, ``extra_links``: each leaf gives ``extra_links`` spines one more link (an uneven
      split, the planner's ``links_per_leaf_spine_pair_max``), rotated leaf by leaf
      (:func:`extra_link_spines`);
    * ``groups_per_pod``, ``superspines`` (total; a multiple of ``spines``),
      ``superspine_links``: three tiers when ``superspines`` > 0;
    * ``nic_speed_gbps`` / ``fabric_speed_gbps`` and the breakouts (ports per cage) of the leaf,
      spine and super-spine models at those speeds, for the production port names.
    """

    architecture: str
    rails: int
    rails_per_leaf: int
    group_servers: tuple[int, ...]
    spines: int
    links_per_pair: int = 1
    extra_links: int = 0
    groups_per_pod: int = 0
    superspines: int = 0
    superspine_links: int = 1
    nic_speed_gbps: int = 400
    fabric_speed_gbps: int = 400
    leaf_breakout_nic: int = 1
    leaf_breakout_fabric: int = 1
    spine_breakout: int = 1
    superspine_breakout: int = 1

    @property
    def three_tier(self) -> bool:
        return self.superspines > 0

    @property
    def groups(self) -> int:
        return len(self.group_servers)

    @property
    def pods(self) -> int:
        if not self.three_tier:
            return 1
        return -(-self.groups // self.groups_per_pod)

    def pod_of_group(self, group: int) -> int | None:
        """Pod (1-based) of ``group``; None on a two-tier fabric."""
        return (group - 1) // self.groups_per_pod + 1 if self.three_tier else None


@dataclass(frozen=True)
class Cable:
    """One cable: ``kind`` (``server-leaf``, ``leaf-spine``, ``spine-superspine``), the lower
    tier end ``a`` and the upper tier end ``b`` (node, lab port), the rail and group of a
    server-leaf cable (group and rail of the leaf for leaf-spine, None above), the pod (three
    tiers), and the link speed [Gb/s]."""

    kind: str
    a_node: str
    a_port: str
    b_node: str
    b_port: str
    rail: int | None
    group: int | None
    pod: int | None
    speed_gbps: int


@dataclass
class SwitchPorts:
    """A switch as :func:`wire` lays it out: ``name``, ``role`` (``leaf``/``spine``/
    ``superspine``), 1-based ``index`` within the role (leaves lab-wide), ``group``, ``pod``,
    ``rails``, the plane of a spine or super-spine, and its ports ``(port, peer, peer port)`` in
    port order; ``nic_ports``: how many leading ports run at the NIC speed."""

    name: str
    role: str
    index: int
    group: int | None = None
    pod: int | None = None
    rails: list[int] = field(default_factory=list)
    plane: int | None = None
    ports: list[tuple[str, str, str]] = field(default_factory=list)
    nic_ports: int = 0

    def next_port(self) -> str:
        return eth(len(self.ports) + 1)


@dataclass
class Wiring:
    """The result of :func:`wire`: switches by role (in lab order), servers ``(name, group,
    index in group)``, and the cables in CSV order."""

    layout: Layout
    leaves: list[SwitchPorts]
    spines: list[SwitchPorts]
    superspines: list[SwitchPorts]
    servers: list[tuple[str, int, int]]
    cables: list[Cable]
    leaf_of: dict[tuple[int, int], SwitchPorts]


def extra_link_spines(leaf_pos: int, spines: int, extra: int) -> set[int]:
    """The spines (0-based positions) that take one more link from the leaf at position
    ``leaf_pos`` (0-based within its pod) when its uplinks split unevenly (``extra`` =
    uplinks mod spines): rotated leaf by leaf, ``(leaf_pos x extra + k) mod spines``, so the
    extra links spread over every spine and no spine is cabled past its share (e.g. 24 leaves x
    64 uplinks over 12 x 128-port spines: every spine gets exactly 128 links)."""
    if not extra or not spines:
        return set()
    return {(leaf_pos * extra + k) % spines for k in range(extra)}


def wire(lay: Layout) -> Wiring:
    """Lay out every switch, server and cable of ``lay`` by the rules of the module docstring.

    Raises CablingError for a layout the rules cannot cable (rails not split evenly over leaves,
    super-spines not a multiple of the pod spines).
    """
    if lay.rails % lay.rails_per_leaf:
        raise CablingError(f"{lay.rails} rails do not split over leaves of "
                           f"{lay.rails_per_leaf} rails")
    if lay.three_tier and (lay.spines < 1 or lay.superspines % lay.spines
                           or lay.groups_per_pod < 1):
        raise CablingError(f"{lay.superspines} super-spines are not a whole number of planes "
                           f"of {lay.spines} pod spines")
    rail_opt = lay.architecture == "rail-optimized"
    lpg = lay.rails // lay.rails_per_leaf
    leaves: list[SwitchPorts] = []
    leaf_of: dict[tuple[int, int], SwitchPorts] = {}
    idx = 0
    for g in range(1, lay.groups + 1):
        for j in range(lpg):
            idx += 1
            rails = list(range(j * lay.rails_per_leaf + 1, (j + 1) * lay.rails_per_leaf + 1))
            nm = leaf_name(idx, group=g, rail=rails[0]) if rail_opt else leaf_name(idx)
            lf = SwitchPorts(nm, "leaf", idx, group=g, pod=lay.pod_of_group(g), rails=rails)
            leaves.append(lf)
            for r in rails:
                leaf_of[(g, r)] = lf
    spines: list[SwitchPorts] = []
    for p in range(1, lay.pods + 1):
        for i in range(1, lay.spines + 1):
            nm = pod_spine_name(p, i) if lay.three_tier else spine_name(i)
            spines.append(SwitchPorts(nm, "spine", len(spines) + 1,
                                      pod=p if lay.three_tier else None, plane=i))
    per_plane = lay.superspines // lay.spines if lay.three_tier else 0
    supers = [SwitchPorts(superspine_name(k), "superspine", k, plane=(k - 1) // per_plane + 1)
              for k in range(1, lay.superspines + 1)]

    cables: list[Cable] = []
    servers: list[tuple[str, int, int]] = []
    n = 0
    for g, count in enumerate(lay.group_servers, start=1):
        for k in range(count):
            n += 1
            srv = server_name(n)
            servers.append((srv, g, k))
            for r in range(1, lay.rails + 1):
                lf = leaf_of[(g, r)]
                port = lf.next_port()
                lf.ports.append((port, srv, eth(r)))
                lf.nic_ports += 1
                cables.append(Cable("server-leaf", srv, eth(r), lf.name, port, r, g,
                                    lay.pod_of_group(g), lay.nic_speed_gbps))
    pos_in_pod: dict[int | None, int] = {}
    for lf in leaves:
        pod_spines = [sp for sp in spines if sp.pod == lf.pod] if lay.three_tier else spines
        pos = pos_in_pod.get(lf.pod, 0)
        pos_in_pod[lf.pod] = pos + 1
        more = extra_link_spines(pos, len(pod_spines), lay.extra_links)
        for j, sp in enumerate(pod_spines):
            links = lay.links_per_pair + (1 if j in more else 0)
            for _ in range(links):
                lport, sport = lf.next_port(), sp.next_port()
                lf.ports.append((lport, sp.name, sport))
                sp.ports.append((sport, lf.name, lport))
                cables.append(Cable("leaf-spine", lf.name, lport, sp.name, sport,
                                    lf.rails[0] if rail_opt else None, lf.group, lf.pod,
                                    lay.fabric_speed_gbps))
    for sp in spines:
        for ss in (s for s in supers if s.plane == sp.plane):
            for _ in range(lay.superspine_links):
                pport, sport = sp.next_port(), ss.next_port()
                sp.ports.append((pport, ss.name, sport))
                ss.ports.append((sport, sp.name, pport))
                cables.append(Cable("spine-superspine", sp.name, pport, ss.name, sport,
                                    None, None, sp.pod, lay.fabric_speed_gbps))
    return Wiring(lay, leaves, spines, supers, servers, cables, leaf_of)


def lab_cables(spec) -> list[Cable]:
    """The cables of a generated lab, read back from its ``lab.json`` (a
    :class:`railab.topologies.labspec.LabSpec`): one per ``links`` entry, in file order, with
    rail/group from the NIC (server-leaf) or the leaf (leaf-spine), and the pod of the
    lower-tier node. These are the rows ``railab generate --cabling`` writes and the cabling
    check audits."""
    out: list[Cable] = []
    pods = {n.name: getattr(n, "pod", None) for n in spec.nodes}
    for ln in spec.links:
        a, b = ln.a, ln.b
        rail = group = None
        if ln.role == "server-leaf":
            nic = next((x for x in spec.nics_of(a.node) if x.interface == a.interface), None)
            if nic is not None:
                rail, group = nic.rail, nic.group
        elif ln.role == "leaf-spine":
            node = spec.node(a.node)
            group = node.group
            rail = node.rails[0] if spec.architecture == "rail-optimized" and node.rails else None
        out.append(Cable(ln.role, a.node, a.interface, b.node, b.interface, rail, group,
                         pods.get(a.node), ln.speed_gbps))
    return out


def layout_breakouts(lay: Layout, w: Wiring) -> dict[str, tuple[int, int, int]]:
    """Per-switch port layout of ``w`` for :func:`csv_rows`: ``node -> (ports at the NIC
    speed, their breakout, breakout of the fabric ports)``."""
    out: dict[str, tuple[int, int, int]] = {}
    for lf in w.leaves:
        out[lf.name] = (lf.nic_ports, lay.leaf_breakout_nic, lay.leaf_breakout_fabric)
    for sp in w.spines:
        out[sp.name] = (0, 1, lay.spine_breakout)
    for ss in w.superspines:
        out[ss.name] = (0, 1, lay.superspine_breakout)
    return out


def production_end(port: str, nic_ports: int, nic_breakout: int, fabric_breakout: int
                   ) -> tuple[int, int, str, str]:
    """``(cage, sub-port, SONiC name, alias)`` of lab port ``port`` (``eth<k>``) on a switch
    whose first ``nic_ports`` ports run at the NIC speed (``nic_breakout`` per cage) and the
    rest at the fabric speed (``fabric_breakout`` per cage, starting on the next free cage)."""
    k = int(port.removeprefix("eth"))
    if k <= nic_ports:
        cage, sub = production_port(k, breakout=nic_breakout)
        brk = nic_breakout
    else:
        first = -(-nic_ports // nic_breakout) if nic_ports else 0
        cage, sub = production_port(k - nic_ports, breakout=fabric_breakout)
        cage += first
        brk = fabric_breakout
    return cage, sub, breakout_port(cage, sub, breakout=brk), breakout_alias(cage, sub,
                                                                             breakout=brk)


def csv_rows(cables: Iterable[Cable], breakouts: dict[str, tuple[int, int, int]]
             ) -> list[dict[str, object]]:
    """CSV rows (dicts keyed by :data:`CSV_COLUMNS`) of ``cables``; a switch end gets its
    production cage, sub-port, SONiC name and alias from ``breakouts`` (see
    :func:`production_end`), a server end (a NIC) leaves them empty."""
    rows = []
    for c in cables:
        row: dict[str, object] = {"kind": c.kind, "rail": c.rail or "", "group": c.group or "",
                                  "pod": c.pod or "", "speed_gbps": c.speed_gbps}
        for end, node, port in (("a", c.a_node, c.a_port), ("b", c.b_node, c.b_port)):
            row[f"{end}_node"], row[f"{end}_port"] = node, port
            if node in breakouts:
                cage, sub, sonic, alias = production_end(port, *breakouts[node])
                row.update({f"{end}_cage": cage, f"{end}_subport": sub, f"{end}_sonic": sonic,
                            f"{end}_alias": alias})
            else:
                row.update({f"{end}_cage": "", f"{end}_subport": "", f"{end}_sonic": "",
                            f"{end}_alias": ""})
        rows.append(row)
    return rows


def csv_text(cables: Iterable[Cable], breakouts: dict[str, tuple[int, int, int]]) -> str:
    """The cabling CSV: one header line (:data:`CSV_COLUMNS`), then one row per cable."""
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    wr.writeheader()
    wr.writerows(csv_rows(cables, breakouts))
    return buf.getvalue()


def write_csv(path: str | Path, cables: Iterable[Cable],
              breakouts: dict[str, tuple[int, int, int]]) -> Path:
    """Write :func:`csv_text` to ``path`` atomically (a temporary sibling renamed into place);
    raises CablingError naming the path when it cannot be written."""
    p = Path(path)
    text = csv_text(cables, breakouts)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CablingError(f"cannot write the cabling file {p} ({exc.strerror or exc}): "
                           "pick another path") from None
    return p


def spec_breakouts(spec) -> dict[str, tuple[int, int, int]]:
    """Per-switch port layout of a generated lab (``LabSpec``) for :func:`csv_rows`: the
    breakouts recorded in ``lab.json`` ``design.cabling`` (production models at the NIC and
    fabric speeds) and each leaf's count of NIC-speed ports (its server links)."""
    brk = (spec.design or {}).get("cabling", {})
    nic_b, fab_b = brk.get("leaf_breakout_nic", 1), brk.get("leaf_breakout_fabric", 1)
    sp_b, ss_b = brk.get("spine_breakout", 1), brk.get("superspine_breakout", 1)
    out: dict[str, tuple[int, int, int]] = {}
    down: dict[str, int] = {}
    for nic in spec.nics:
        down[nic.leaf] = down.get(nic.leaf, 0) + 1
    for n in spec.nodes:
        if n.role == "leaf":
            out[n.name] = (down.get(n.name, 0), nic_b, fab_b)
        elif n.role == "spine":
            out[n.name] = (0, 1, sp_b)
        elif n.role == "superspine":
            out[n.name] = (0, 1, ss_b)
    return out


def plan_layout(plan, catalog=None) -> Layout:
    """The :class:`Layout` of a production plan (:class:`railab.topologies.planner.Plan`) at
    full size: its groups (a partial last group smaller), spines per pod, links per pair (the
    first spines take the extra link of an uneven split), pods and super-spines, and the
    breakouts of its leaf/spine/super-spine models (``catalog``: default the shipped one) at
    the NIC and fabric speeds.

    Raises CablingError when the spine to super-spine links do not split evenly (cable it by
    hand from the plan's warning).
    """
    cat = catalog if catalog is not None else load_catalog()
    rail_opt = plan.architecture == "rail-optimized"
    spg = plan.servers_per_group
    groups = [spg] * (plan.groups - 1) + [plan.partial_last_group or spg]
    if not rail_opt:
        groups = [plan.servers]
    seen = plan.spines_per_pod or plan.spine_switches
    lo = plan.links_per_leaf_spine_pair
    extra = plan.leaf_uplinks - lo * seen if seen else 0
    three = plan.tiers == 3
    if three and (plan.links_per_spine_superspine_pair
                  != plan.links_per_spine_superspine_pair_max):
        raise CablingError("the pod spine uplinks do not split evenly over the super-spines: "
                           "the cabling plan needs an even split (see the plan's warning)")
    nic = plan.nic_speed_gbps or plan.port_speed_gbps
    fab = plan.fabric_speed_gbps or plan.port_speed_gbps
    leaf = get_model(cat, plan.leaf_model)
    spine = get_model(cat, plan.spine_model) if plan.spine_model else None
    ss = get_model(cat, plan.superspine_model) if plan.superspine_model else None
    return Layout(
        architecture=plan.architecture, rails=plan.rails, rails_per_leaf=plan.rails_per_leaf,
        group_servers=tuple(groups), spines=seen if rail_opt else 0, links_per_pair=max(lo, 1),
        extra_links=extra, groups_per_pod=plan.groups_per_pod or 0,
        superspines=plan.superspine_switches, superspine_links=plan.links_per_spine_superspine_pair
        or 1, nic_speed_gbps=nic, fabric_speed_gbps=fab,
        leaf_breakout_nic=leaf.breakout_at(nic),
        leaf_breakout_fabric=leaf.breakout_at(fab) if rail_opt else 1,
        spine_breakout=spine.breakout_at(fab) if spine and rail_opt else 1,
        superspine_breakout=ss.breakout_at(fab) if ss else 1,
    )


def plan_wiring(plan, catalog=None) -> tuple[Wiring, dict[str, tuple[int, int, int]]]:
    """``(wiring, breakouts)`` of a production plan: :func:`wire` of :func:`plan_layout`, and
    the per-switch port layout for :func:`write_csv` (``railab plan --cabling``)."""
    lay = plan_layout(plan, catalog)
    w = wire(lay)
    return w, layout_breakouts(lay, w)
