"""IPv6 Router Solicitations out of fabric ports: a library call, or a process of its own.

``up`` (railab.testbed.runtime.netns) solicits once on every fabric port after zebra's wave, then
runs ``python3 -m railab.testbed.solicit`` beside the wave that starts bgpd for the ports whose
new veth had no carrier yet (the kernel's linkwatch reports it up to 1 s late: most ports of a
small lab, built in a few ms, none of the full 1024-GPU fabric's). Retrying them from a thread
of ``up`` instead took 10.6 s there, the 16 threads spawning daemons holding the GIL between
every two ``sendto``; as its own process it only shares the CPUs. This module imports nothing but
railab.testbed.namespaces. ``up`` waits for the zebras to answer before the first pass, so the
process does not wait for anything.

Protocol (stdin, one JSON object): ``{"ports": {namespace: [interface, ...]}}``; stdout:
``{"sent": N, "send_s": S}`` (how many were sent, how long the sending and its retries took);
exit 0, or 1 with the error on stderr.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Mapping

from railab.testbed.namespaces import entered

#: ICMPv6 Router Solicitation (RFC 4861 section 4.1): type 133, code 0, checksum (the kernel fills
#: it in on raw ICMPv6 sockets, RFC 3542 section 3.1), 4 reserved bytes; no options.
ROUTER_SOLICITATION = bytes([133, 0, 0, 0, 0, 0, 0, 0])


def solicit_once(ports: Mapping[str, set[str] | list[str]]) -> tuple[int, dict[str, set[str]]]:
    """One pass of :func:`send_solicitations`: how many were sent, and the ports not ready yet
    (namespace -> interfaces that failed with ENETUNREACH or EADDRNOTAVAIL, see there)."""
    sent = 0
    failed: dict[str, set[str]] = {}
    for ns, names in ports.items():
        try:
            with entered(ns):  # the socket and the interface indexes belong to the namespace
                s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
                index = {name: i for i, name in socket.if_nameindex()}
        except OSError:  # the namespace is gone (FileNotFoundError) or the socket failed
            continue
        with s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
            for name in sorted(set(names) & index.keys()):
                try:
                    s.sendto(ROUTER_SOLICITATION, ("ff02::2", 0, 0, index[name]))
                    sent += 1
                except OSError:
                    failed.setdefault(ns, set()).add(name)
    return sent, failed


def send_solicitations(ports: Mapping[str, set[str] | list[str]], *, retry_s: float = 2.0) -> int:
    """Send one Router Solicitation (to ff02::2, hop limit 255) out of each interface of
    ``ports`` (network namespace name -> interface names); returns how many were sent.

    Ports not ready yet are retried every 50 ms for up to ``retry_s`` seconds: ENETUNREACH (no
    IPv6 on the port yet: the kernel's linkwatch reports a new veth's carrier up to 1 s late)
    and EADDRNOTAVAIL (a link-local still tentative, DAD, RFC 4862 section 5.4, where it is on).
    A namespace that is gone, or an interface it does not have, is skipped silently."""
    total = 0
    deadline = time.monotonic() + retry_s
    pending = ports
    while True:
        sent, pending = solicit_once(pending)
        total += sent
        if not pending or time.monotonic() > deadline:
            return total
        time.sleep(0.05)


def main() -> None:
    """The process: solicit on the ports given, retrying those not ready yet (protocol in the
    module docstring)."""
    try:
        req = json.load(sys.stdin)
        t0 = time.monotonic()
        sent = send_solicitations(req["ports"])
    except Exception as exc:  # noqa: BLE001 - one line for the parent
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"sent": sent, "send_s": round(time.monotonic() - t0, 3)}))


if __name__ == "__main__":
    main()
