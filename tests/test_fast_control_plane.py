"""Issue 12: the cheap paths of bring-up and observation.

* ``split_frr_conf`` cuts the integrated frr.conf into each daemon's own start-up file (no
  ``vtysh -f`` round trip per line), and declines files it cannot place;
* ``railab.testbed.vty`` answers single-daemon show commands over the daemon's vty socket
  (no ``vtysh`` process), with the same answers as ``vtysh -c``;
* ``railab.testbed.rtnl.Rtnl`` reads links and routes (RTA_MULTIPATH's ``rtnexthop`` array)
  from raw dumps, agreeing with pyroute2's full decode;
* ``ip_batch`` makes veths and server addressing through iproute2 batches and names the
  failing line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from railab.checks.base import Observer
from railab.errors import RailabError
from railab.testbed import vty
from railab.testbed.namespaces import create_netns, entered, ip_batch
from railab.testbed.rtnl import Rtnl
from railab.testbed.runtime.netns import NetnsExecutor
from railab.topologies.frr import split_frr_conf
from railab.topologies.frrsplit import END_CONFIG, START_CONFIG, zebra_read_order

PID = os.getpid()
DAEMONS = ("zebra", "staticd", "bgpd", "bfdd")


def _conf(mini_dir) -> str:
    return (mini_dir / "configs" / "g1-leaf1" / "frr.conf").read_text()


@pytest.fixture(scope="module")
def mini_dir(tmp_path_factory):
    from railab.topologies.generator import generate

    out = tmp_path_factory.mktemp("mini")
    generate("mini", out, name=f"fc{PID}")
    return out


def test_split_gives_each_daemon_its_own_blocks(mini_dir):
    parts = split_frr_conf(_conf(mini_dir), DAEMONS)
    assert parts is not None and set(parts) == set(DAEMONS)
    for text in parts.values():  # the shared header first, in every part
        assert text.splitlines()[:4] == ["frr version 8.4.4", "frr defaults datacenter", "hostname g1-leaf1",
                                         "no service cputime-stats"]
        assert "service integrated-vtysh-config" not in text and "!" not in text
    z, s, b = parts["zebra"], parts["staticd"], parts["bgpd"]
    assert "no zebra nexthop kernel enable" in z and "ipv6 nd ra-interval" in z and "router bgp" not in z
    assert [ln for ln in s.splitlines()[4:]] == [ln for ln in _conf(mini_dir).splitlines()
                                                 if ln.startswith("ip route")]
    assert b.splitlines()[4].startswith("router bgp ") and b.rstrip().endswith("exit")
    assert " exit-address-family" in b and "\ninterface " not in b
    # every config line of the file lands in exactly one part (or all parts, for the header)
    body = [ln for ln in _conf(mini_dir).splitlines() if ln.strip() and not ln.strip().startswith("!")
            and ln not in ("service integrated-vtysh-config", "exit")]
    for ln in body:
        owners = [d for d, t in parts.items() if ln in t.splitlines()]
        assert owners, ln


def test_every_daemon_runs_without_cputime_stats(mini_dir):
    """Issue 47: frr.conf turns FRR's per-task CPU-time statistics off (a thread CPU clock
    read, a system call, around every task), and the split gives the line to every daemon."""
    assert "\nno service cputime-stats\n" in _conf(mini_dir)
    parts = split_frr_conf(_conf(mini_dir), DAEMONS)
    assert all("no service cputime-stats" in text.splitlines() for text in parts.values())


def test_zebra_read_order_keeps_the_statements_with_fewer_commits(mini_dir):
    """Issue 47: zebra's part is read between XFRR_start/end_configuration, each interface
    block with its description (a northbound line) last and no exit between two interface
    blocks; the header stays first, every other line stays, the last block is closed."""
    zebra = split_frr_conf(_conf(mini_dir), DAEMONS)["zebra"]
    out = zebra_read_order(zebra)
    lines, old = out.splitlines(), zebra.splitlines()
    assert lines[:3] == old[:3] and lines[-1] == END_CONFIG
    first = next(i for i, ln in enumerate(lines) if ln.startswith("interface "))
    assert lines[first - 1] == START_CONFIG and lines.count(START_CONFIG) == 1
    assert sorted(ln for ln in lines if ln not in (START_CONFIG, END_CONFIG, "exit")) == \
        sorted(ln for ln in old if ln != "exit")
    assert lines.count("exit") == 1 and lines[-2] == "exit"
    blocks = [[lines[i]] for i in range(len(lines)) if lines[i].startswith("interface ")]
    for b in blocks:  # in each block: classic lines, then description
        i = lines.index(b[0]) + 1
        body = []
        while i < len(lines) and lines[i].startswith(" "):
            body.append(lines[i].strip())
            i += 1
        desc = [n for n, ln in enumerate(body) if ln.startswith("description")]
        assert desc == list(range(len(body) - len(desc), len(body))), body
    assert any(" ipv6 nd ra-interval" in ln for ln in lines) and any(" description" in ln for ln in lines)
    # a block followed by something else than an interface keeps its exit; no interface: unchanged
    assert zebra_read_order("interface a\n description x\nexit\nzebra work-queue 9\n").splitlines() == [
        START_CONFIG, "interface a", " description x", "exit", "zebra work-queue 9", END_CONFIG]
    assert zebra_read_order("hostname x\nip forwarding\n") == "hostname x\nip forwarding\n"


@pytest.mark.parametrize("extra", [
    "router ospf\n ospf router-id 1.1.1.1\nexit\n",     # a daemon the table does not place
    "interface eth1\n ip ospf area 0\nexit\n",          # an interface line that is not zebra's
    " neighbor x interface\n",                          # an indented line outside any block
])
def test_split_declines_what_it_cannot_place(mini_dir, extra):
    assert split_frr_conf(_conf(mini_dir) + extra, DAEMONS) is None


def test_split_declines_a_block_for_a_daemon_the_node_does_not_run(mini_dir):
    text = _conf(mini_dir) + "bfd\n profile x\n exit\nexit\n"
    assert split_frr_conf(text, DAEMONS) is not None
    assert split_frr_conf(text, ("zebra", "staticd", "bgpd")) is None


def test_vty_owner_table():
    assert vty.owner("show bgp vrf default ipv4 unicast summary json") == "bgpd"
    assert vty.owner("show  ip   bgp json") == "bgpd"
    assert vty.owner("show ip route json") == "zebra"
    assert vty.owner("show bfd peers json") == "bfdd"
    assert vty.owner("show running-config") is None  # vtysh merges every daemon's
    assert vty.owner("configure terminal") is None


def test_vty_unavailable_for_a_missing_socket(tmp_path):
    with pytest.raises(vty.VtyUnavailable):
        vty.vty_command(tmp_path / "bgpd.vty", "show bgp summary json")


def test_raw_rtnetlink_reads_match_pyroute2():
    """A scratch namespace with a veth pair, a 3-way ECMP route and a blackhole: Rtnl's raw
    link and route dumps give what pyroute2's full decode gives (names, flags, MTU, kind,
    peer ifindex; each route's type, protocol and every ECMP next hop's interface)."""
    ns = f"fcmp{PID}"
    create_netns([ns])
    try:
        lines = ["link set lo up"]
        for i in range(3):
            lines += [f"link add d{i} mtu 9000 type veth peer name p{i}", f"link set d{i} up",
                      f"link set p{i} up", f"address add 10.9.{i}.1/24 dev d{i}"]
        lines += ["route add 10.77.0.0/16 nexthop via 10.9.0.2 dev d0 onlink nexthop via 10.9.1.2 dev d1 "
                  "onlink nexthop via 10.9.2.2 dev d2 onlink",
                  "route add blackhole 10.66.0.0/24 proto static"]
        ip_batch({ns: lines}, what="test routes")
        from pyroute2 import IPRoute
        with entered(ns):
            ipr, raw = IPRoute(), Rtnl()
        try:
            want = {}
            for m in ipr.get_routes(family=2, table=254):
                paths = m.get("multipath")
                oifs = tuple(p["oif"] for p in paths) if paths else ((m.get("oif"),) if m.get("oif") else ())
                want[(m.get("dst") or "0.0.0.0", m["dst_len"])] = (m["type"], m["proto"], oifs)
            got = {(r.dst, r.dst_len): (r.type, r.protocol, r.oifs) for r in raw.routes(254)}
            assert got == want
            assert len(got[("10.77.0.0", 16)][2]) == 3 and got[("10.66.0.0", 24)][:1] == (6,)
            # veth carrier comes up asynchronously after `link set up` (LOWERLAYERDOWN, then UP):
            # wait for it, so both dumps read the same settled state, not two moments of a change
            deadline = time.monotonic() + 5
            while any(m.get("operstate") == "LOWERLAYERDOWN" for m in ipr.get_links()):
                assert time.monotonic() < deadline, "veth carrier never came up"
                time.sleep(0.02)
            links = {m.get("ifname"): m for m in ipr.get_links()}
            rows = {r.ifname: r for r in raw.link_details()}
            assert set(rows) == set(links)
            for name, m in links.items():
                info = m.get("linkinfo")
                assert (rows[name].index, rows[name].flags, rows[name].mtu, rows[name].operstate,
                        rows[name].link, rows[name].kind) == \
                    (m["index"], m["flags"], m.get("mtu"), m.get("operstate"), m.get("link"),
                     info.get("kind") if info is not None else None), name
            assert rows["d0"].kind == "veth" and rows["d0"].mtu == 9000
        finally:
            ipr.close()
            raw.close()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_ip_batch_names_the_failing_line():
    ns = f"fcb{PID}"
    create_netns([ns])
    try:
        line = "link add d0 type veth peer name p0"
        with pytest.raises(RailabError, match=rf"test batch failed: {ns}: .*exists.* at `{line}`"):
            ip_batch({ns: [line, line]}, what="test batch")
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_ip_batch_in_parts_stays_within_the_fd_limit_and_keeps_each_namespaces_order():
    """iproute2 keeps two fds per ``netns NAME`` line until it exits: 500 veth pairs under a soft
    limit of 200 fail in one process and are all made in parts of netns_lines_per_batch(); parts
    of one namespace run in order, and a failing part stops that namespace's later parts."""
    a, b = f"fpa{PID}", f"fpb{PID}"
    create_netns([a, b])
    try:
        child = (
            "import resource, sys\n"
            "from railab.errors import RailabError\n"
            "from railab.testbed.namespaces import ip_batch, netns_lines_per_batch\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
            f"lines = [f'link add v{{i}} netns {a} type veth peer name w{{i}} netns {b}' for i in range(500)]\n"
            "try:\n"
            "    ip_batch({None: lines[:250]}, what='whole')\n"
            "except RailabError as e:\n"
            "    print('whole failed:', e)\n"
            "ip_batch({None: lines[250:]}, what='parts', max_lines=netns_lines_per_batch())\n"
            "print('parts of', netns_lines_per_batch())\n")
        r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "whole failed:" in r.stdout and "netns" in r.stdout, r.stdout
        assert "parts of 84" in r.stdout, r.stdout
        made = subprocess.run(["ip", "-n", a, "-o", "link", "show", "type", "veth"], capture_output=True,
                              text=True, check=True).stdout
        assert sum(f" v{i}@" in made for i in range(250, 500)) == 250
        # order within a namespace, one line per part: the set needs the add before it
        pair = "link add d{0} type veth peer name e{0}".format
        ip_batch({a: [pair(0), "link set d0 up", pair(1)]}, what="ordered", max_lines=1)
        with pytest.raises(RailabError, match=rf"stopped failed: .* at `{pair(0)}`"):
            ip_batch({a: [pair(2), pair(0), pair(3)]}, what="stopped", max_lines=1)
        names = subprocess.run(["ip", "-n", a, "-o", "link", "show"], capture_output=True,
                               text=True, check=True).stdout
        made = set(re.findall(r"^\d+: ([^:@]+)", names, re.M))
        assert {"d0", "d1", "d2"} <= made and "d3" not in made, names
    finally:
        subprocess.run(["ip", "netns", "del", a], check=False)
        subprocess.run(["ip", "netns", "del", b], check=False)


def test_ip_batch_that_stops_early_in_a_script_larger_than_the_pipe_names_the_line():
    """A batch that fails at its second line while railab still writes ~2 MB of it (the 8,192
    fabric's veth script is that size): the same one error with the line, no broken pipe."""
    ns = f"fcc{PID}"
    create_netns([ns])
    try:
        line = "link add d0 type veth peer name p0"
        rest = [f"link add d{i} type veth peer name p{i}" for i in range(1, 60_000)]  # never run
        with pytest.raises(RailabError, match=rf"big batch failed: {ns}: .*exists.* at `{line}`"):
            ip_batch({ns: [line, line, *rest]}, what="big batch")
        # -force goes on past failing lines: every one writes to stderr, far beyond a pipe's
        # 64 KiB; the batch still ends and says what failed
        dup = ["link add lo type dummy"] * 20_000
        with pytest.raises(RailabError, match=rf"forced batch failed: {ns}: .*exists"):
            ip_batch({ns: dup}, what="forced batch", force=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.mark.integration
def test_live_daemons_read_their_split_config_and_vty_matches_vtysh(mini_lab):
    """On the session's mini lab: every daemon was started with its own part of frr.conf (no
    push), the blackhole routes staticd owns are in the kernel, and the vty client's answer is
    the same JSON ``vtysh -c`` gives."""
    from railab.testbed import state as st

    record = st.load(mini_lab.name)
    for node, r in record.routers.items():
        for daemon, pid in r.pids.items():
            cmdline = open(f"/proc/{pid}/cmdline").read().split("\0")
            conf = cmdline[cmdline.index("-f") + 1]
            assert conf == str(st.node_dir(mini_lab.name, node) / f"{daemon}.conf"), (node, daemon)
    assert record.timings.get("frr_config_s", 0) < 0.05  # nothing was pushed with vtysh -f
    ex = NetnsExecutor(mini_lab.name)
    leaf = next(n for n in record.routers if "leaf" in n)
    out = subprocess.run(["ip", "-n", record.namespaces[leaf], "route", "show", "type", "blackhole"],
                         capture_output=True, text=True).stdout
    assert "blackhole" in out
    cmd = "show bgp vrf default ipv4 unicast summary json"
    fast = json.loads(ex.vtysh(leaf, cmd).stdout)
    slow = json.loads(ex.run(leaf, ["vtysh", "-c", cmd]).stdout)
    assert fast["routerId"] == slow["routerId"] and fast["as"] == slow["as"]
    assert set(fast["peers"]) == set(slow["peers"]) and len(fast["peers"]) >= 2
    # bfdd installs its show commands in ENABLE node only: the client enters it as vtysh does
    bfd = "show bfd peers json"
    assert json.loads(ex.vtysh(leaf, bfd).stdout) and \
        len(json.loads(ex.vtysh(leaf, bfd).stdout)) == len(json.loads(ex.run(leaf, ["vtysh", "-c", bfd]).stdout))
    bad = ex.vtysh(leaf, "show bgp no-such-thing json")
    assert bad.rc != 0
    obs = Observer(mini_lab.spec, ex, record.namespaces.get)
    try:
        fib = obs.fib(leaf)
        assert any(len(r.oifs) > 1 for r in fib.values())  # ECMP read through the raw parse
    finally:
        obs.close()
