"""RoCE traceroute: TTL-limited copies of a flow's own packets name the path it takes.

Each probe is the flow's first RoCEv2 packet with the same IP addresses and UDP ports (so an
L4 ECMP hash, ``fib_multipath_hash_policy=3`` over the 5-tuple, sends it where the flow goes) and TTL 1, 2, ...;
the switch where the TTL runs out answers ICMP time-exceeded (RFC 792), whose source address
names the hop. Linux picks that address by routing back to the sender
(``icmp_errors_use_inbound_ifaddr=0``): a leaf answers from its /31 towards the source NIC when
it is the first hop, and from its loopback otherwise (leaf-spine links are unnumbered, RFC 5549,
and carry no IPv4); a spine always answers from its loopback. Addresses are mapped back to node
names with ``lab.json`` (loopbacks, NIC gateways). The last hop is the destination NIC itself,
recognised by the receiver. Switches need ``icmp_ratelimit=0`` (set by both runtimes).
"""

from __future__ import annotations

from railab.traffic.engine import Engine, Hop
from railab.traffic.patterns import Flow


def trace(engine: Engine, flow: Flow, max_ttl: int = 8, timeout: float = 0.3) -> list[Hop]:
    """Probe ``flow`` with TTL 1..``max_ttl``; stop at the destination, an ICMP unreachable, a
    source NIC that is down (one ``nic-down`` hop, nothing sent), or two silent hops in a row.
    Returns one :class:`Hop` per TTL sent.

    Intra-server flows never reach a switch: the list is the single destination hop.
    """
    hops: list[Hop] = []
    silent = 0
    for ttl in range(1, max_ttl + 1):
        hop = engine.probe(flow, ttl, timeout=timeout)
        hops.append(hop)
        if hop.kind in ("destination", "unreachable", "nic-down", "mtu-exceeded", "tx-refused"):
            break
        silent = silent + 1 if hop.kind == "timeout" else 0
        if silent >= 2:
            break
    return hops


def switch_path(hops: list[Hop]) -> list[str]:
    """The switch names of a trace, in order (``["g1-leaf1", "spine2", "g2-leaf1"]``)."""
    return [h.node or h.address or "?" for h in hops if h.kind == "time-exceeded"]


#: ICMP destination-unreachable codes (RFC 792; 13 from RFC 1812) in words.
ICMP_UNREACHABLE = {
    0: "net unreachable",
    1: "host unreachable",
    2: "protocol unreachable",
    3: "port unreachable",
    4: "fragmentation needed",
    13: "administratively prohibited",
}


def unreachable_text(node: str | None, code: int | None = None) -> str:
    """``unreachable at leaf1 (ICMP net unreachable)``: a switch answered the probe with ICMP
    destination unreachable (type 3) instead of forwarding it, typically no route (a Rail-only
    inter-rail flow without PXN). ``code`` is the ICMP code; None or unknown says only ICMP."""
    what = ICMP_UNREACHABLE.get(code, f"unreachable, code {code}") if code is not None \
        else "destination unreachable"
    return f"unreachable at {node or '?'} (ICMP {what})"


def format_path(hops: list[Hop]) -> str:
    """``g1-leaf1 -> spine2 -> g2-leaf1 -> srv3:eth1`` (``*`` for a silent hop); a switch that
    answered ICMP unreachable ends it with ``unreachable at leaf1 (ICMP net unreachable)``; a
    source NIC that is down reads ``srv1:eth1 is down: probe not sent``."""
    parts = []
    for h in hops:
        if h.kind == "nic-down":
            parts.append(f"{h.node} is down: probe not sent")
        elif h.kind == "mtu-exceeded":
            parts.append(f"{h.node}'s MTU is below the probe: not sent")
        elif h.kind == "tx-refused":
            parts.append(f"{h.node} refused the probe (ENOBUFS: an egress filter or a full "
                         "queue): not sent")
        elif h.kind == "timeout":
            parts.append("*")
        elif h.kind == "unreachable":
            parts.append(unreachable_text(h.node or h.address, h.code))
        else:
            parts.append(h.node or h.address or "?")
    return " -> ".join(parts)
