"""The ``speed`` check family: does every link of a lab with ``lab.capacity`` run at its planned
speed? A link that trained down (a 400G link up at 200G or 100G after a lane or FEC failure;
the ``link-speed`` fault, :mod:`railab.testbed.faults`) passes every other check: its sessions
are up, its routes are there, only its capacity is gone, and the ECMP, spraying and collectives
crossing it slow down or reorder. The way a field engineer finds it (``show interfaces status``
on the switch, ``ethtool``'s Speed on a NIC) is the port's speed; here the port's speed is its
shaper.

Labs without ``lab.capacity`` get no row (a veth has no speed). On a lab with it, each shaped
port's htb port class (``1:1``, :mod:`railab.testbed.capacity`) is read from the kernel (one
raw ``RTM_GETTCLASS`` dump per port, :meth:`railab.testbed.rtnl.Rtnl.htb_classes`) and its rate
compared with the lab rate of the link's planned speed (``links[].speed_gbps``,
:func:`railab.testbed.capacity.port_rate_bps`), at the rate the lab runs at now (a dilated run's
while one runs, :func:`railab.testbed.dilation.running_spec`). Rates are shown in Gb/s of the
real fabric (lab rate x ``fabric_rate_gbps / port_rate_mbps``). A link with an end off by more
than :data:`TOLERANCE` fails, one row a link (both ends of a link negotiate one speed: one
cause, ``link-speed``, naming the link and its first slow end). A port without an htb root
(absent, or re-made without queues) is not this family's to report (cabling names a missing
port). Clean: one ``pass`` row for the lab.
"""

from __future__ import annotations

from railab.checks.base import Cause, CheckResult, ObservationError, Observer, failed, passed, register_check
from railab.testbed import capacity as cap
from railab.testbed import state as st
from railab.testbed.dilation import leftover, running_spec
from railab.topologies.naming import link_id

CHECK = "speed"
#: Relative difference between a port's htb rate and its planned lab rate that fails: tc keeps
#: rates in bytes/s (a lab rate is off by < 8 bit/s), so 1 % is far above rounding and far below
#: any speed a link trains down to (half, a quarter).
TOLERANCE = 0.01


def fabric_gbps(rate_bps: float, port_rate_mbps: float, fabric_rate_gbps: float) -> float:
    """A lab rate ``rate_bps`` (bit/s) in Gb/s of the real fabric: a port at ``port_rate_mbps``
    stands for one at ``fabric_rate_gbps``."""
    return rate_bps / (port_rate_mbps * 1e6) * fabric_rate_gbps


def port_rates(obs: Observer, node: str, interfaces: list[str]) -> dict[str, int]:
    """``{interface: rate of its htb port class 1:1, bit/s}`` of ``node``'s ``interfaces`` that
    exist and have one (raw rtnetlink, one class dump each). Raises ObservationError when the
    namespace cannot be read."""
    links = obs.links(node)
    out = {}
    for ifname in interfaces:
        link = links.get(ifname)
        if link is None:
            continue
        try:
            classes = obs._rtnl(node).htb_classes(link.index)
        except OSError:
            continue
        for c in classes:
            if c.handle == cap.PORT_CLASS:
                out[ifname] = c.rate_bps
    return out


def check_speed(obs: Observer) -> list[CheckResult]:
    """One failing row per link whose ends' htb rate differs from the planned speed's lab rate
    (cause ``link-speed``), else one passing row; nothing for a lab without ``lab.capacity``."""
    spec = obs.spec
    if not cap.enabled(spec):
        return []
    m = leftover(spec.name)
    if m is not None:
        # a dilated run (railab collective, lb compare) killed before its restore: every port
        # is at the run's rate; one row that says so, not one "trained down" per link
        return [failed(
            CHECK, "port speeds", subject="every shaped port",
            expected=f"the lab's rate, {spec.qos.capacity.port_rate_mbps:g} Mb/s a "
                     f"{spec.qos.capacity.fabric_rate_gbps:g} Gb/s port",
            observed=f"the rate of a slowed run, {m.get('run_rate_mbps')} Mb/s, left by process "
                     f"{m.get('pid')}, which is gone (dilation.json in the lab's run directory)",
            reason="a load run that slows the lab's ports (time dilation) was killed before it put "
                   "their rate back; the next load run restores it (e.g. railab traffic LAB "
                   "--pattern incast --seconds 1), as does railab down and up")]
    now = running_spec(spec)
    c = now.qos.capacity
    planned = {p.key: p.rate_bps for p in cap.ports(now)}
    by_node: dict[str, list[str]] = {}
    for node, ifname in planned:
        by_node.setdefault(node, []).append(ifname)
    seen: dict[tuple[str, str], int] = {}
    for node, ifnames in by_node.items():
        obs.check_stop()
        try:
            seen.update({(node, i): r for i, r in port_rates(obs, node, ifnames).items()})
        except ObservationError:
            continue  # an unreadable node: its own checks say so
    rec = st.load(spec.name)
    faults = [f for f in (rec.faults if rec else []) if f.kind == cap.LINK_SPEED_FAULT]
    out: list[CheckResult] = []

    def gbps(bps: float) -> float:
        return round(fabric_gbps(bps, c.port_rate_mbps, c.fabric_rate_gbps), 1)

    for lk in spec.links:
        ends = [(lk.a.node, lk.a.interface), (lk.b.node, lk.b.interface)]
        off = [e for e in ends if e in seen and abs(seen[e] - planned[e]) > TOLERANCE * planned[e]]
        if not off:
            continue
        lid = link_id(lk.a.node, lk.a.interface, lk.b.node, lk.b.interface)
        node, port = off[0]
        observed = ", ".join(f"{n}:{p} at {gbps(seen[(n, p)]):g} Gb/s ({seen[(n, p)]} bit/s)"
                             for n, p in ends if (n, p) in seen)
        f = next((f for f in faults if {(f.node, f.port), (f.peer_node, f.peer_port)} & set(ends)), None)
        note = f" (injected fault {f.id}: {f.note})" if f else ""
        out.append(failed(
            CHECK, f"{lid} speed", node=node, port=port, link=lid,
            subject=f"{node}:{port} towards {lk.b.node if node == lk.a.node else lk.a.node}",
            expected=f"{lk.speed_gbps} Gb/s at both ends ({planned[off[0]]} bit/s of lab rate)",
            observed=observed,
            reason=(f"port {node}:{port} runs at {gbps(seen[off[0]]):g} Gb/s, planned "
                    f"{lk.speed_gbps}: " + (
                        "the link trained down (a lane or FEC failure, a bad optic or cable), so "
                        "the paths across it have less capacity than their ECMP peers: check the "
                        "optics and the cable, re-seat or replace them"
                        if seen[off[0]] < planned[off[0]] else
                        "its shaper is faster than the plan (rebuild the lab's queues: railab "
                        "down, railab up)")) + note,
            cause=Cause(kind="link-speed", node=node, port=port, link=lid)))
    if not out:
        out.append(passed(CHECK, "port speeds", subject=f"{len(seen)} shaped ports",
                          expected="every port at its link's planned speed",
                          observed=f"{len(seen)} of {len(planned)} ports read, all at their planned speed"))
    return out


register_check(CHECK, check_speed, order=13,
               description="every link of a lab with lab.capacity runs at its planned speed (none "
                           "trained down to a lower one)")
