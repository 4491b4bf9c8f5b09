"""Regressions in how railab runs FRR 8.4 on the netns runtime (root + Debian frr; integration).

* Kernel nexthop groups after a link flap (docs/checks.md, "Known FRR 8.4 behaviour"): with
  zebra's kernel nexthop objects, a leaf-spine link that goes down and comes back left the
  kernel's nexthop group with only the surviving member while zebra's RIB showed full ECMP.
  The generated ``frr.conf`` now says ``no zebra nexthop kernel enable``; the test flaps a real
  uplink with pyroute2 and reads the kernel route back with pyroute2.
* Host-wide neighbour tables (docs/runtime.md): ``up`` sizes ``net.ipv{4,6}.neigh.default.
  gc_thresh3`` for the lab, or sends fail with EINVAL once the shared table overflows.

The lab is this module's own ``mini`` (``fr<pid>``), so the shared session labs are never flapped.
"""

from __future__ import annotations

import json
import os
import time
from ipaddress import ip_network
from pathlib import Path

import pytest
from pyroute2 import NetNS

from railab.checks.deploy import bring_up
from railab.testbed.runtime.netns import NEIGH_PER_ENDPOINT, NetnsExecutor, raise_neighbour_tables
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from tests.conftest import integration_skip_reason

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


@pytest.fixture(scope="module")
def flap_lab(tmp_path_factory):
    """A dedicated ``mini`` lab, up and converged: ``(name, LabSpec, record)``."""
    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"fr{os.getpid()}"
    rt = NetnsDeployer()
    try:
        d = generate(ROOT / "topologies" / "intents" / "mini.yml", tmp_path_factory.mktemp(name) / name, name=name)
        record = bring_up(rt, d)
        yield name, LabSpec.load(d), record
    finally:
        rt.down(name)


def _kernel_paths(ns, prefix: str) -> list[int]:
    """Output interface indexes of ``prefix`` in the kernel main table (one per ECMP path).

    A full dump filtered here: ``get_routes(dst=...)`` would be a FIB lookup returning the one
    path the kernel picks, not the route."""
    net = ip_network(prefix)
    for msg in ns.get_routes(family=2, table=254):
        if msg.get_attr("RTA_DST") == str(net.network_address) and msg["dst_len"] == net.prefixlen:
            paths = msg.get_attr("RTA_MULTIPATH")
            if paths:
                return sorted(p["oif"] for p in paths)
            oif = msg.get_attr("RTA_OIF")
            return [oif] if oif else []
    return []


def _wait(pred, timeout: float, step: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > end:
            return value
        time.sleep(step)


def test_generated_config_disables_kernel_nexthop_groups(flap_lab):
    name, spec, _ = flap_lab
    leaf = next(n.name for n in spec.nodes if n.role == "leaf")
    running = NetnsExecutor(name).vtysh(leaf, "show running-config").stdout
    assert "no zebra nexthop kernel enable" in running


def test_fib_regains_full_ecmp_after_leaf_spine_flap(flap_lab):
    """Flap one uplink of a leaf; every multipath route through it must come back to its
    planned ECMP width in the kernel (not only in zebra's RIB)."""
    name, spec, record = flap_lab
    leaf = next(n.name for n in spec.nodes if n.role == "leaf")
    routes = [r for r in spec.expected_routes[leaf] if r.ecmp_width > 1]
    assert routes, f"{leaf} has no ECMP route in lab.json"
    port = routes[0].interfaces[0]
    via_port = [r for r in routes if port in r.interfaces]
    ns = NetNS(record["namespaces"][leaf])
    try:
        names = {lk["index"]: lk.get_attr("IFLA_IFNAME") for lk in ns.get_links()}
        idx = ns.link_lookup(ifname=port)[0]

        def widths():
            return {r.prefix: _kernel_paths(ns, r.prefix) for r in via_port}

        assert all(len(p) == r.ecmp_width for r, p in zip(via_port, widths().values(), strict=True)), widths()
        ns.link("set", index=idx, state="down")
        try:
            # the flap took effect: every route through the port lost exactly that path
            shrunk = _wait(lambda: all(len(p) == r.ecmp_width - 1 and idx not in p
                                       for r, p in zip(via_port, widths().values(), strict=True)), 15)
            assert shrunk, f"{leaf}:{port} down, kernel still has {widths()}"
        finally:
            ns.link("set", index=idx, state="up")
        restored = _wait(lambda: all(len(p) == r.ecmp_width
                                     for r, p in zip(via_port, widths().values(), strict=True)), 30)
        observed = {pfx: sorted(names.get(i, str(i)) for i in p) for pfx, p in widths().items()}
        want = [(r.prefix, r.ecmp_width) for r in via_port]
        assert restored, f"{leaf}:{port} flapped; kernel FIB widths {observed}, expected {want}"
        for r in via_port:
            assert observed[r.prefix] == sorted(r.interfaces), (r.prefix, observed[r.prefix])
    finally:
        ns.close()
    # zebra agrees with the kernel (every RIB next hop marked installed)
    rib = json.loads(NetnsExecutor(name).vtysh(leaf, f"show ip route {via_port[0].prefix} json").stdout)
    entry = rib[via_port[0].prefix][0]
    assert sum(1 for nh in entry["nexthops"] if nh.get("fib")) == via_port[0].ecmp_width


def test_host_neighbour_tables_sized_for_the_lab(flap_lab):
    """``up`` raised the shared ND/ARP limits to hold this lab's endpoints (the kernel default,
    1024 entries for the whole host, is what stalled the 1024-GPU fabric)."""
    _, spec, _ = flap_lab
    need = NEIGH_PER_ENDPOINT * 2 * len(spec.links)

    def thresholds():
        return {(af, n): int(Path(f"/proc/sys/net/{af}/neigh/default/gc_thresh{n}").read_text())
                for af in ("ipv6", "ipv4") for n in (2, 3)}

    before = thresholds()
    for (af, n), value in before.items():
        if n == 3:
            assert value >= need, (af, value, need)
    changed = raise_neighbour_tables(0)  # only ever raises, never lowers
    after = thresholds()
    assert all(after[k] >= before[k] for k in before), (before, after)
    assert all(new > old for old, new in changed.values())
