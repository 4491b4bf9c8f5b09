"""Cabling audit: every link of ``lab.json`` joins the recorded ports and is up, read from the LIVE lab.

The wiring is read from netlink, never from the lab files: for the ``a`` end of every link the
veth's peer ifindex (IFLA_LINK) and peer namespace id (IFLA_LINK_NETNSID) are resolved to the lab
node whose namespace has that id and to the interface with that index there
(:meth:`checks.base.Observer.peer`). A server NIC must land on the Rail-N leaf of its group
(seed guide: NIC N of every server connects to the Rail-N leaf); a swapped cable is reported as
``srv3 NIC 3 is on g1-leaf5:eth2 (rail 5), expected g1-leaf3:eth2 (rail 3)``.

A link that is down is worded by its end and its kind (:func:`railab.checks.base.link_status`):
``admin down at g1-leaf1:eth3`` (IFF_UP clear: someone downed it), ``carrier lost on
g1-leaf1:eth3`` (its far end is down, powered off or unplugged: the far end is not in the lab),
``cable missing`` (neither end exists: the veth was deleted). Each link end also gets an MTU row
(live IFLA_MTU vs lab.json's link MTU), and a port with an nftables netdev filter chain that drops
packets (a grey failure: silent loss on a link that is up) fails a ``filter`` row naming the
port, the hook and what is dropped. Faults recorded in the lab state
(railab.testbed.faults) that touch a failing link are named in its reason.

The rows audited are the cabling plan's rows (:func:`railab.topologies.cabling.lab_cables`, the
same rows ``railab generate --cabling`` writes, one per ``lab.json`` link), and each expected
end names its production port too (``= Ethernet4, cage 1/2``: the SONiC name and cage/sub-port
of that lab port on the design's switch model, :func:`railab.topologies.cabling.production_end`),
so a field engineer auditing a real fabric reads the same numbering as the CSV.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from railab.checks.base import (
    Cause,
    CheckResult,
    ObservationError,
    Observer,
    failed,
    link_id,
    passed,
    register_check,
    skipped,
)
from railab.errors import UsageError
from railab.testbed import state as st
from railab.testbed.namespaces import exec_argv
from railab.topologies.cabling import lab_cables, production_end, spec_breakouts
from railab.topologies.labspec import Endpoint
from railab.topologies.partition import Partition

CHECK = "cabling"


def _production(node: str, port: str, breakouts: dict) -> str:
    """`` = Ethernet<n>, cage <c>/<s>`` for a switch port (the cabling plan's numbering), else
    ""."""
    if node not in breakouts:
        return ""
    try:
        cage, sub, sonic, _alias = production_end(port, *breakouts[node])
    except ValueError:
        return ""
    return f" = {sonic}, cage {cage}/{sub}"


def _rail_of(obs: Observer, leaf: str, port: str | None) -> int | None:
    """Rail of ``leaf:port`` per the plan (the NIC planned there), else the leaf's only rail."""
    for nic in obs.spec.nics:
        if nic.leaf == leaf and nic.leaf_port == port:
            return nic.rail
    try:
        rails = obs.spec.node(leaf).rails
    except KeyError:
        return None
    return rails[0] if len(rails) == 1 else None


def _where(obs: Observer, node: str, iface: str | None) -> str:
    try:
        n = obs.spec.node(node)
    except KeyError:
        return f"{node}:{iface}"
    if n.role == "leaf":
        rail = _rail_of(obs, node, iface)
        return f"{node}:{iface}" + (f" (rail {rail})" if rail is not None else "")
    return f"{node}:{iface}"


def _node_down(spec, rows: list[CheckResult], admin: dict[str, set[str]] | None = None) -> list[CheckResult]:
    """Rows whose link is down at node ``N``'s end, when every link of ``N`` (two or more) is
    (``railab fault node-off``, a server powered off): one cause, ``node-down`` on ``N``, so
    they are one root cause (behind ``N``'s dead daemons on a switch) instead of one per link.
    ``admin``: row name -> the nodes whose end of the row's link is admin down (a link between
    two powered-off nodes is down at both ends, and counts for each; its row's cause names the
    node its cause named, else the other)."""
    admin = admin or {}

    def at(r: CheckResult) -> set[str]:
        return {r.cause.node} | admin.get(r.name, set())

    down: dict[str, int] = {}
    for r in rows:
        if r.status == "fail" and r.cause is not None and r.cause.kind == "link-down":
            for n in at(r):
                down[n] = down.get(n, 0) + 1
    off = {n for n, k in down.items() if k >= 2 and k == len(spec.links_of(n))}
    if not off:
        return rows
    out = []
    for r in rows:
        if r.status == "fail" and r.cause is not None and r.cause.kind == "link-down" and at(r) & off:
            node = r.cause.node if r.cause.node in off else min(at(r) & off)
            r = r.model_copy(update={"cause": Cause(kind="node-down", node=node)})
        out.append(r)
    return out


def _crossed(obs: Observer, spec, a: Endpoint, b: Endpoint, peer: tuple[str, str]) -> Cause | None:
    """One cause for both ends of a crossed pair: ``a`` lands on ``peer``, which ``lab.json``
    cables to another end ``c``, and ``c`` lands on ``a``'s planned far end ``b`` (two cables
    swapped, ``railab fault cross-cable``). The cause names the first of ``a`` and ``c`` (by
    name) and its planned link, so both rows are one root cause; None for any other miswire."""
    try:
        c = spec.peer(*peer)
        back = obs.peer(*c)
    except (KeyError, ObservationError, OSError):
        return None
    if back != (b.node, b.interface):
        return None
    node, port = min((a.node, a.interface), c)
    far = spec.peer(node, port)
    return Cause(kind="miswired", node=node, port=port, link=link_id(node, port, *far))


def check_cabling(obs: Observer) -> list[CheckResult]:
    """One result per ``lab.json`` link: wired to the planned peer port, and up on both ends.

    Results are ``skip`` for links whose namespaces cannot be read (real devices over SSH).
    """
    spec = obs.spec
    results: list[CheckResult] = []
    faults = _faults(spec.name)
    admin: dict[str, set[str]] = {}  # row name -> nodes whose end of its link is admin down
    nic_by_port = {(n.server, n.interface): n for n in spec.nics}
    breakouts = spec_breakouts(spec)
    partition = _partition(spec.name)
    underlays = _underlays(spec.name)
    for cable in lab_cables(spec):
        a = Endpoint(node=cable.a_node, interface=cable.a_port)
        b = Endpoint(node=cable.b_node, interface=cable.b_port)
        nic = nic_by_port.get((a.node, a.interface)) if cable.kind == "server-leaf" else None
        if nic is not None:
            name = f"{a.node} NIC {nic.nic}"
            subject = f"{a.node}:{a.interface} rail {nic.rail}"
        else:
            name = f"{a.node}:{a.interface} <-> {b.node}:{b.interface}"
            subject = f"{cable.kind} link"
        expected = _where(obs, b.node, b.interface) + _production(b.node, b.interface, breakouts)
        lid = link_id(a.node, a.interface, b.node, b.interface)
        ref = {"node": a.node, "subject": subject, "port": a.interface, "link": lid}
        try:
            peer = obs.peer(a.node, a.interface)
            a_link = obs.links(a.node).get(a.interface)
        except (ObservationError, OSError) as exc:
            results.append(skipped(CHECK, name, f"cannot read netlink: {exc}", **ref,
                                   expected=expected))
            continue
        b_read = True
        try:
            b_link = obs.links(b.node).get(b.interface)
        except (ObservationError, OSError):
            b_link, b_read = None, False
        note = _fault_note(faults, a.node, a.interface, b.node, b.interface)
        if b_read and (a_link is None or b_link is None or (peer is None and a_link.status != "up")):
            down = _unplugged(a, b, a_link, b_link)
            if down is not None:
                observed, reason, end = down
                results.append(failed(CHECK, name, **ref, expected=f"{expected}, up",
                                      observed=observed, reason=reason + note,
                                      cause=Cause(kind="link-down", node=end[0], port=end[1],
                                                  link=lid)))
                continue
        if a_link is None:
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=f"{a.node} has no interface {a.interface}",
                                  reason=f"the runtime did not create {a.node}:{a.interface}; "
                                         f"redeploy the lab" + note,
                                  cause=Cause(kind="port-missing", node=a.node, port=a.interface,
                                              link=lid)))
            continue
        if peer is None and a_link.kind == "vxlan":  # a link cut between hosts (topologies.partition)
            results.append(_vxlan_row(obs, name, ref, expected, a, b, a_link, b_link,
                                      partition, note, lid, underlays))
            continue
        if peer is None:
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=f"{a.interface} leads to no lab node",
                                  reason="the veth peer is missing or in a namespace outside the "
                                         "lab (cable unplugged or moved)" + note,
                                  cause=Cause(kind="miswired", node=a.node, port=a.interface,
                                              link=lid)))
            continue
        if peer != (b.node, b.interface):
            where = _where(obs, *peer)
            if nic is not None:
                msg = f"{a.node} NIC {nic.nic} is on {where}, expected {expected}"
                if peer[0] != b.node:
                    reason = msg + ": swap the cable back (NIC N belongs on the rail-N leaf)"
                else:
                    reason = msg + ": wrong leaf port (addressing on that port will not match)"
            else:
                reason = (f"{a.node}:{a.interface} is wired to {where}, expected {expected}: "
                          f"re-cable per lab.json")
            results.append(failed(CHECK, name, **ref, expected=expected,
                                  observed=where, reason=reason + note,
                                  cause=_crossed(obs, spec, a, b, peer) or Cause(
                                      kind="miswired", node=a.node, port=a.interface, link=lid)))
            continue
        ends = [(n, i, st_) for n, i, st_ in
                ((a.node, a.interface, a_link), (b.node, b.interface, b_link))
                if st_ is not None and not st_.up]
        if ends:
            down = [f"{n}:{i} {st_.operstate}" for n, i, st_ in ends]
            # the end that is administratively down is the one to fix; else the first
            first = next((e for e in ends if e[2].status == "admin-down"), ends[0])
            admin[name] = {n for n, _, st_ in ends if st_.status == "admin-down"}
            results.append(failed(
                CHECK, name, **ref, expected=f"{expected}, up",
                observed=f"{expected}, " + ", ".join(down),
                reason=_down_words(ends) + note,
                cause=Cause(kind="link-down", node=first[0], port=first[1], link=lid)))
            continue
        results.append(passed(CHECK, name, **ref,
                              expected=f"{expected}, up", observed=f"{expected}, up"))
    if not results:
        results.append(skipped(CHECK, "links", "lab.json lists no links"))
        return results
    results = _node_down(spec, results, admin)
    results += _mtu_rows(obs)
    results += _filter_rows(obs, faults)
    return results


def _partition(lab: str) -> Partition | None:
    """The partition of ``lab`` (``partition.json`` of its recorded lab directory) or None."""
    record = st.load(lab)
    if record is None or not record.labdir:
        return None
    try:
        return Partition.load(record.labdir)
    except UsageError:
        return None


def _underlays(lab: str) -> dict[str, dict]:
    """The one-machine proof's hosts of ``lab`` (``railab up DIR --stitch``: the record's
    ``stitch`` entry, railab.testbed.stitch): ``{(node, interface): {"host", "namespace",
    "mtu"}}`` per cut-link end, ``mtu`` the underlay MTU the partition needs; {} otherwise."""
    record = st.load(lab)
    stitch = record.get("stitch") if record is not None else None
    if not stitch:
        return {}
    hosts = stitch.get("hosts", {})
    return {(t["node"], t["interface"]): {"host": t["host"], "mtu": stitch.get("underlay_mtu"),
                                          "namespace": hosts.get(t["host"], {}).get("namespace")}
            for t in stitch.get("tunnels", [])}


def underlay_link(namespace: str, ifname: str = "ul0") -> dict | None:
    """``{"operstate", "mtu"}`` of a stitched host's underlay interface (``ip -j link show``
    in the host's namespace), None when it cannot be read."""
    try:
        res = subprocess.run(exec_argv(namespace, ["ip", "-j", "link", "show", "dev", ifname]),
                             capture_output=True, text=True, timeout=10)
        doc = json.loads(res.stdout or "[]")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return {"operstate": doc[0].get("operstate"), "mtu": doc[0].get("mtu")} if doc else None


def vxlan_info(obs: Observer, node: str, ifname: str) -> dict | None:
    """The VXLAN parameters of ``node:ifname`` read live (``ip -d -j link show``, iproute2's
    ``linkinfo.info_data``): ``{"vni", "local", "remote", "port"}``, None when the interface is
    not a VXLAN device or cannot be read."""
    try:
        ns = obs.namespace(node)
    except ObservationError:
        return None
    try:
        res = subprocess.run(exec_argv(ns, ["ip", "-d", "-j", "link", "show", "dev", ifname]),
                             capture_output=True, text=True, timeout=10)
        doc = json.loads(res.stdout or "[]")
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    info = (doc[0].get("linkinfo") or {}) if doc else {}
    if info.get("info_kind") != "vxlan":
        return None
    d = info.get("info_data") or {}
    return {"vni": d.get("id"), "local": d.get("local") or d.get("local6"),
            "remote": d.get("remote") or d.get("remote6") or d.get("group") or d.get("group6"),
            "port": d.get("port")}


def _vxlan_row(obs: Observer, name: str, ref: dict, expected: str, a: Endpoint, b: Endpoint,
               a_link, b_link, partition: Partition | None, note: str, lid: str,
               underlays: dict | None = None) -> CheckResult:
    """The row of a link cut between hosts and stitched with VXLAN (RFC 7348): both ends are
    VXLAN devices with one VNI whose ``remote`` is the other end's ``local`` (and, with the lab's
    partition.json, the partition's VNI for this link, the far host's underlay address and UDP
    port 4789), and both are up. A tunnel has no carrier: a far end that is down shows only
    there, so both ends are read. On a stitched lab (``underlays``: :func:`_underlays`) each
    end's host underlay interface must be up and carry the partition's underlay MTU: a VXLAN
    device stays up when its underlay is cut."""
    va, vb = vxlan_info(obs, a.node, a.interface), vxlan_info(obs, b.node, b.interface)
    cut = partition.cut_at(a.node, a.interface) if partition is not None else None
    exp = expected + (f" over vxlan VNI {cut.vni} ({cut.a.host} <-> {cut.b.host})" if cut else " over vxlan")
    problems = []
    if va is None:
        problems.append(f"cannot read {a.node}:{a.interface}'s VXLAN parameters")
    elif vb is None:
        problems.append(f"{b.node}:{b.interface} is not a VXLAN device (the far end of VNI {va['vni']})")
    else:
        if va["vni"] != vb["vni"]:
            problems.append(f"VNIs differ: {a.node}:{a.interface} {va['vni']}, {b.node}:{b.interface} {vb['vni']}")
        if va["remote"] != vb["local"] or vb["remote"] != va["local"]:
            problems.append(f"remotes do not meet: {va['local']} -> {va['remote']} and "
                            f"{vb['local']} -> {vb['remote']}")
        if cut is not None:
            ha, hb = partition.host(cut.a.host).underlay, partition.host(cut.b.host).underlay
            want = {(a.node, a.interface): (ha, hb), (b.node, b.interface): (hb, ha)}
            for (n, i), v in (((a.node, a.interface), va), ((b.node, b.interface), vb)):
                if v["vni"] != cut.vni:
                    problems.append(f"{n}:{i} carries VNI {v['vni']}, the partition gives this link {cut.vni}")
                if (v["local"], v["remote"]) != want[(n, i)]:
                    problems.append(f"{n}:{i} tunnels {v['local']} -> {v['remote']}, the partition "
                                    f"{want[(n, i)][0]} -> {want[(n, i)][1]}")
                if v["port"] != partition.dst_port:
                    problems.append(f"{n}:{i} uses UDP port {v['port']}, not {partition.dst_port}")
    if va is not None:
        seen = f"vxlan VNI {va['vni']} {va['local']} -> {va['remote']}"
    else:
        seen = f"{a.interface} is a vxlan device"
    if problems:
        return failed(CHECK, name, **ref, expected=exp, observed=seen,
                      reason="VXLAN stitching wrong: " + "; ".join(problems[:3]) +
                             ": redeploy the hosts' parts from one railab generate --hosts" + note,
                      cause=Cause(kind="miswired", node=a.node, port=a.interface, link=lid))
    ends = [(n, i, st_) for n, i, st_ in ((a.node, a.interface, a_link), (b.node, b.interface, b_link))
            if st_ is not None and not st_.up]
    if not ends:
        for n, i in ((a.node, a.interface), (b.node, b.interface)):
            u = (underlays or {}).get((n, i))
            if not u or not u["namespace"]:
                continue
            ul = underlay_link(u["namespace"])
            if ul is None or ul["operstate"] != "UP":
                state = ul["operstate"] if ul else "missing"
                return failed(CHECK, name, **ref, expected=f"{exp}, up",
                              observed=f"{seen}, underlay of {u['host']} {state}",
                              reason=f"underlay down: {u['host']}'s ul0 ({u['namespace']}) is {state}, so "
                                     f"VNI {va['vni'] if va else '?'} carries nothing although both VXLAN "
                                     f"ends are up: bring the host's underlay link up" + note,
                              cause=Cause(kind="link-down", node=n, port=i, link=lid))
            if u["mtu"] and ul["mtu"] < u["mtu"]:
                return failed(CHECK, name, **ref, expected=f"{exp}, up, underlay MTU {u['mtu']}",
                              observed=f"{seen}, underlay of {u['host']} MTU {ul['mtu']}",
                              reason=f"underlay MTU too small: {u['host']}'s ul0 carries {ul['mtu']} bytes, "
                                     f"the cut links need {u['mtu']} (lab MTU + VXLAN overhead): set the "
                                     f"underlay MTU" + note,
                              cause=Cause(kind="mtu-mismatch", node=n, port=i, link=lid))
    if ends:
        first = next((e for e in ends if e[2].status == "admin-down"), ends[0])
        return failed(CHECK, name, **ref, expected=f"{exp}, up",
                      observed=f"{seen}, " + ", ".join(f"{n}:{i} {s.operstate}" for n, i, s in ends),
                      reason=_down_words(ends) + note,
                      cause=Cause(kind="link-down", node=first[0], port=first[1], link=lid))
    return passed(CHECK, name, **ref, expected=f"{exp}, up", observed=f"{seen}, up")


def _faults(lab: str) -> list:
    """The faults recorded for ``lab`` (railab.testbed.faults), [] when none or not a local lab."""
    record = st.load(lab)
    return list(record.faults) if record is not None else []


def _fault_note(faults: list, *ends: str) -> str:
    """`` (injected fault f3: admin down ...)`` for recorded faults on the ends
    ``node_a, if_a, node_b, if_b``, else ``""``."""
    pairs = {(ends[0], ends[1]), (ends[2], ends[3])}
    hit = [f for f in faults if {(f.node, f.port), (f.peer_node, f.peer_port)} & pairs
           or (f.kind == "node-off" and f.node in (ends[0], ends[2]))]
    if not hit:
        return ""
    return " (injected fault " + "; ".join(f"{f.id}: {f.note}" for f in hit) + ")"


def _down_words(ends: list) -> str:
    """``link down: admin down at a:eth3 (spine1:eth1 sees carrier lost): bring a:eth3 up``."""
    admin = [f"{n}:{i}" for n, i, s in ends if s.status == "admin-down"]
    lost = [f"{n}:{i}" for n, i, s in ends if s.status == "carrier-lost"]
    if admin:
        text = f"link down: admin down at {' and '.join(admin)}"
        if lost:
            text += f" ({', '.join(lost)} sees carrier lost)"
        return text + f": bring {' and '.join(admin)} up (ip link set ... up)"
    return (f"link down: carrier lost on {' and '.join(lost)} while admin up: the far end has no "
            f"carrier (transceiver, cable or far end powered off)")


def _unplugged(a, b, a_link, b_link) -> tuple[str, str, tuple[str, str]] | None:
    """Words for a link with an end that is gone: ``(observed, reason, (node, port) to fix)``,
    or None when both ends exist and lead somewhere (other rules apply)."""
    ea, eb = f"{a.node}:{a.interface}", f"{b.node}:{b.interface}"
    if a_link is None and b_link is None:
        return (f"{ea} and {eb} missing",
                f"cable missing: neither {ea} nor {eb} exists (the cable is pulled): re-plug it",
                (a.node, a.interface))
    for here, gone, link, gone_end in ((ea, eb, a_link, b), (eb, ea, b_link, a)):
        if link is not None and (gone_end is b and b_link is None or gone_end is a and a_link is None):
            state = "carrier lost" if link.status == "carrier-lost" else link.status
            return (f"{here} {state}, {gone} not in its node",
                    f"link down: carrier lost on {here}: its far end {gone} is gone from "
                    f"{gone_end.node} (unplugged, moved or powered off): plug {gone} back",
                    (gone_end.node, gone_end.interface))
    return None


def _mtu_rows(obs: Observer) -> list[CheckResult]:
    """One row per link end: live MTU (IFLA_MTU) == lab.json's link MTU. Ends that cannot be
    read or do not exist are left to the link rows."""
    out: list[CheckResult] = []
    for link in obs.spec.links:
        lid = link_id(link.a.node, link.a.interface, link.b.node, link.b.interface)
        for end, far in ((link.a, link.b), (link.b, link.a)):
            try:
                live = obs.links(end.node).get(end.interface)
            except (ObservationError, OSError):
                continue
            if live is None or live.mtu is None:
                continue
            ref = {"node": end.node, "port": end.interface, "link": lid,
                   "subject": f"MTU towards {far.node}:{far.interface}"}
            name = f"{end.node}:{end.interface} MTU"
            if live.mtu == link.mtu:
                out.append(passed(CHECK, name, **ref, expected=f"MTU {link.mtu}",
                                  observed=f"MTU {live.mtu}"))
                continue
            out.append(failed(
                CHECK, name, **ref, expected=f"MTU {link.mtu}", observed=f"MTU {live.mtu}",
                reason=(f"MTU mismatch on {end.node}:{end.interface} ({live.mtu}, lab.json and "
                        f"{far.node}:{far.interface} expect {link.mtu}): BGP stays up and small "
                        f"packets pass, but frames above {min(live.mtu, link.mtu)} bytes are "
                        f"dropped; set it back to {link.mtu}"),
                cause=Cause(kind="mtu-mismatch", node=end.node, port=end.interface, link=lid)))
    return out


def _nft(ns: str, *args: str) -> str | None:
    try:
        res = subprocess.run(exec_argv(ns, ["nft", *args]), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


_CHAIN_DEV = re.compile(r'hook\s+(?:egress|ingress)\s+devices?\s*=?\s*\{?\s*"?([^"\s;},]+)')


def _nft_ruleset(ns: str) -> dict | None:
    """``nft -j list ruleset netdev`` inside namespace ``ns`` (None when nft fails), with each
    base chain's ``dev`` filled in: nft 1.0.6 (Debian 12) leaves the device of a netdev chain
    out of its JSON, so it is taken from the text listing's ``hook ... device "eth2"`` line."""
    raw = _nft(ns, "-j", "list", "ruleset", "netdev")
    if raw is None:
        return None
    try:
        doc = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return None
    chains = [it["chain"] for it in doc.get("nftables", []) if "chain" in it and "hook" in it["chain"]]
    if any("dev" not in c for c in chains):
        text = _nft(ns, "list", "ruleset", "netdev") or ""
        devs: dict[tuple[str, str], str] = {}
        table = chain = None
        for line in text.splitlines():
            words = line.split()
            if words[:2] == ["table", "netdev"]:
                table = words[2]
            elif words[:1] == ["chain"]:
                chain = words[1]
            m = _CHAIN_DEV.search(line)
            if m and table and chain:
                devs[(table, chain)] = m.group(1)
        for c in chains:
            c.setdefault("dev", devs.get((c.get("table"), c.get("name"))))
    return doc


def _dropping_chains(doc: dict) -> list[tuple[str, str, str, str]]:
    """``(device, hook, table, what)`` for every netdev base chain with a rule that drops."""
    items = doc.get("nftables", [])
    chains = {}
    for it in items:
        c = it.get("chain")
        if c and c.get("hook") in ("egress", "ingress"):
            dev = c.get("dev") or c.get("device")
            devs = dev if isinstance(dev, list) else [dev]
            chains[(c["table"], c["name"])] = (devs, c["hook"])
    out = []
    for it in items:
        r = it.get("rule")
        if not r or (r.get("table"), r.get("chain")) not in chains:
            continue
        expr = r.get("expr", [])
        if not any("drop" in e for e in expr):
            continue
        what = []
        for e in expr:
            m = e.get("match", {})
            left, right = m.get("left", {}), m.get("right")
            if "numgen" in left:
                mod = left["numgen"].get("mod") or 1
                if isinstance(right, int):
                    what.append(f"{100 * right / mod:g} % at random")
            elif "payload" in left and left["payload"].get("field") == "dport":
                what.append(f"{left['payload'].get('protocol', '')} dport {right}".strip())
        devs, hook = chains[(r["table"], r["chain"])]
        for dev in devs:
            if dev is None:
                continue
            out.append((dev, hook, r["table"], ", ".join(what) or "every packet"))
    return out


def _filter_rows(obs: Observer, faults: list) -> list[CheckResult]:
    """A failing row per lab port that an nftables netdev chain drops packets on (skipped
    entirely when ``nft`` is not installed or no namespace can be read)."""
    if shutil.which("nft") is None:
        return []
    nodes = obs.namespaces()
    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=8) as pool:
        docs = list(pool.map(lambda item: (item[0], _nft_ruleset(item[1])), nodes))
    out: list[CheckResult] = []
    for node, doc in docs:
        for dev, hook, table, what in _dropping_chains(doc or {}):
            peer = obs.spec.peers.get((node, dev))
            lid = link_id(node, dev, *peer) if peer else None
            note = _fault_note(faults, node, dev, *(peer or ("", "")))
            direction = "leaving" if hook == "egress" else "entering"
            out.append(failed(
                CHECK, f"{node}:{dev} {hook} filter", node=node, port=dev, link=lid,
                subject=f"packet filter towards {peer[0]}:{peer[1]}" if peer else "packet filter",
                expected="no packet filter drops traffic", observed=f"nft table {table} drops {what}",
                reason=(f"silent loss: packets {direction} {node}:{dev} are dropped by nftables "
                        f"({what}) while the link and BGP stay up: remove table netdev {table}")
                       + note,
                cause=Cause(kind="port-filter", node=node, port=dev, link=lid)))
    return out


register_check(CHECK, check_cabling, order=10,
               description="every link of lab.json is up and joins the recorded ports "
                           "(veth peers via netlink), its ends carry the planned MTU, and no "
                           "port filter drops packets")
