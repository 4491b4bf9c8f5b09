"""Multi-host partitions (issue 17): ``railab generate --hosts``, containerlab ``vxlan`` links, the
Clabernetes manifest, and the one-machine proof on the netns runtime (hosts as namespaces, cut
links as kernel VXLAN devices)."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from railab.cli import app
from railab.testbed.clabfile import load_clab
from railab.topologies import clabernetes as C
from railab.topologies import partition as P
from railab.topologies.clab import ClabSchemaError, validate_topology
from railab.topologies.generator import build_lab
from railab.topologies.intent import load_intent

ROOT = Path(__file__).resolve().parents[1]
PID = str(os.getpid())


@pytest.fixture(scope="module")
def ro1024(tmp_path_factory):
    """rail-optimized-1024 generated with --hosts 2 (the issue's 'done when' lab)."""
    out = tmp_path_factory.mktemp("p") / "pt"
    res = CliRunner().invoke(app, ["generate", "rail-optimized-1024", "--hosts", "2", "-o", str(out),
                                   "--name", "pt"])
    assert res.exit_code == 0, res.output
    return out, res.output


def _endpoints(clab) -> set[frozenset]:
    return {frozenset((f"{lk.a[0]}:{lk.a[1]}", f"{lk.b[0]}:{lk.b[1]}")) for lk in clab.links}


def test_two_host_files_and_a_manifest_whose_union_is_the_lab(ro1024):
    out, text = ro1024
    assert "16 leaf-spine links cut as vxlan" in text and "MTU 9150" in text
    whole = load_clab(out, validate=True)
    spec = json.loads((out / "lab.json").read_text())
    part = P.Partition.load(out)
    assert [h.name for h in part.hosts] == ["host1", "host2"]
    assert [h.underlay for h in part.hosts] == ["10.253.0.1", "10.253.0.2"]
    parts = {h: load_clab(out / h / "pt.clab.yml", validate=True) for h in ("host1", "host2")}
    # every node exactly once
    names = [n for c in parts.values() for n in c.nodes]
    assert sorted(names) == sorted(whole.nodes) and len(names) == len(set(names)) == 22
    # local links + cut links paired by VNI == the lab's links
    links = set().union(*(_endpoints(c) for c in parts.values()))
    by_vni: dict[int, list] = {}
    for host, c in parts.items():
        for x in c.external_links:
            assert x.type == "vxlan" and x.options["dst-port"] == 4789 and x.mtu == spec["mtu"]
            far = "host2" if host == "host1" else "host1"
            assert x.options["remote"] == part.host(far).underlay
            by_vni.setdefault(x.options["vni"], []).append((host, f"{x.endpoint[0]}:{x.endpoint[1]}"))
    assert sorted(by_vni) == list(range(P.VNI_BASE, P.VNI_BASE + 16))
    for vni, ends in by_vni.items():
        assert len(ends) == 2 and ends[0][0] != ends[1][0], vni
        links.add(frozenset(e for _, e in ends))
    assert links == _endpoints(whole)
    # only leaf-spine links are cut; groups stay whole; spines spread
    roles = {frozenset((f"{lk['a']['node']}:{lk['a']['interface']}", f"{lk['b']['node']}:{lk['b']['interface']}")):
             lk["role"] for lk in spec["links"]}
    cut = {frozenset(e for _, e in ends) for ends in by_vni.values()}
    assert {roles[c] for c in cut} == {"leaf-spine"}
    for n in spec["nodes"]:
        if n["role"] in ("leaf", "server"):
            assert part.node_host[n["name"]] == f"host{n['group']}"
    assert part.node_host["spine1"] == "host1" and part.node_host["spine2"] == "host2"
    # the binds of a host file reach the lab's configs (containerlab resolves them from the file)
    for c in parts.values():
        for node in c.routers:
            assert node.frr_conf.is_file() and node.frr_conf.parent.parent.name == "configs"
    assert part.underlay_mtu == spec["mtu"] + 50


def test_manifest_is_a_valid_clabernetes_topology_of_the_whole_lab(ro1024):
    out, _ = ro1024
    docs = C.load(out / "pt.clabernetes.yaml")
    C.validate_manifest(docs)
    topo = [d for d in docs if d["kind"] == "Topology"]
    assert len(topo) == 1 and topo[0]["apiVersion"] == "clabernetes.containerlab.dev/v1alpha1"
    spec = topo[0]["spec"]
    assert spec["naming"] == "prefixed" and spec["connectivity"] == "vxlan"
    inner = yaml.safe_load(spec["definition"]["containerlab"])
    assert inner == yaml.safe_load((out / "pt.clab.yml").read_text())  # the unpartitioned lab
    validate_topology(inner)
    cms = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    switches = [n for n, d in inner["topology"]["nodes"].items() if d.get("binds")]
    assert sorted(cms) == sorted(f"pt-{n}" for n in switches)
    for node, mounts in spec["deployment"]["filesFromConfigMap"].items():
        binds = {b.split(":")[0] for b in inner["topology"]["nodes"][node]["binds"]}
        assert {m["filePath"] for m in mounts} == binds
        for m in mounts:
            assert cms[m["configMapName"]]["data"][m["configMapPath"]] == (out / m["filePath"]).read_text()


def test_manifest_validation_catches_what_the_crd_refuses(ro1024):
    out, _ = ro1024
    docs = C.load(out / "pt.clabernetes.yaml")
    topo_i = next(i for i, d in enumerate(docs) if d["kind"] == "Topology")
    cases = [
        (lambda t: t["spec"].pop("naming"), "'naming' is a required property"),
        (lambda t: t["spec"].pop("definition"), "'definition' is a required property"),
        (lambda t: t["spec"].__setitem__("connectivity", "gre"), "'gre' is not one of"),
        (lambda t: t["spec"]["definition"].__setitem__("containerlab", 7), "7 is not of type 'string'"),
        (lambda t: t.__setitem__("apiVersion", "clabernetes.containerlab.dev/v1"), "apiVersion"),
        (lambda t: t["spec"]["definition"].__setitem__("containerlab", "a: [1"), "not YAML"),
    ]
    for mutate, words in cases:
        bad = copy.deepcopy(docs)
        mutate(bad[topo_i])
        with pytest.raises(C.ClabernetesSchemaError, match=words.replace("[", r"\[").replace("(", r"\(")):
            C.validate_manifest(bad)
    bad = copy.deepcopy(docs)
    bad[0]["metadata"]["name"] = "PT_leaf"
    with pytest.raises(C.ClabernetesSchemaError, match="DNS-1123"):
        C.validate_manifest(bad)


def test_vxlan_links_validate_and_schema_refuses_bad_ones():
    """The validator translates containerlab's ECMA-262 ``\\p{..}`` patterns (a vxlan ``remote``'s
    IPv6 zone) and enforces the vxlan link's own rules."""
    base = {"name": "v", "topology": {"nodes": {"a": {"kind": "linux"}}, "links": []}}
    good = [{"type": "vxlan", "endpoint": {"node": "a", "interface": "eth1"}, "remote": "192.0.2.2",
             "vni": 10000, "dst-port": 4789, "mtu": 9100},
            {"type": "vxlan", "endpoint": {"node": "a", "interface": "eth2"}, "remote": "fe80::1%eth0",
             "vni": 16777215, "dst-port": 4789}]
    t = copy.deepcopy(base)
    t["topology"]["links"] = good
    validate_topology(t)
    for change in ({"vni": 0}, {"vni": 16777216}, {"dst-port": None}, {"remote": "host-b"}, {"ttl": 3}):
        t = copy.deepcopy(base)
        lk = dict(good[0], **change)
        t["topology"]["links"] = [{k: v for k, v in lk.items() if v is not None}]
        with pytest.raises(ClabSchemaError):
            validate_topology(t)


def test_parse_hosts_counts_names_and_errors():
    hs = P.parse_hosts("3")
    assert [(h.name, h.underlay) for h in hs] == [("host1", "10.253.0.1"), ("host2", "10.253.0.2"),
                                                 ("host3", "10.253.0.3")]
    assert P.parse_hosts("2", pool=ipaddress.ip_network("192.0.2.0/28"))[1].underlay == "192.0.2.2"
    named = P.parse_hosts("gpu-a=192.0.2.10, gpu-b=192.0.2.11")
    assert [h.name for h in named] == ["gpu-a", "gpu-b"]
    for bad, words in [("0", "at least 1"), ("a=1.2.3.4,a=1.2.3.5", "name a is given twice"),
                       ("a=1.2.3.4,b=1.2.3.4", "address 1.2.3.4 is given twice"),
                       ("a=1.2.3", "not an IPv4 or IPv6"), ("A=1.2.3.4", "must match"),
                       ("a=1.2.3.4,b=2001:db8::1", "mix of IPv4 and IPv6"), ("a", "NAME=ADDRESS"),
                       ("300", "holds 254")]:
        with pytest.raises(P.PartitionError, match=words):
            P.parse_hosts(bad)


def test_labs_that_cannot_be_split_say_why():
    ro = build_lab(load_intent("rail-only-512"), name="pro")
    with pytest.raises(P.PartitionError, match="Rail-only"):
        P.build_partition(ro.spec, P.parse_hosts("2"))
    assert set(P.build_partition(ro.spec, P.parse_hosts("1")).node_host.values()) == {"host1"}
    mini = build_lab(load_intent("mini"), name="pm")
    with pytest.raises(P.PartitionError, match="at most 2 hosts"):
        P.build_partition(mini.spec, P.parse_hosts("3"))


def test_three_tier_partition_cuts_only_fabric_links():
    b = build_lab(load_intent("rail-optimized-3tier-mini"), name="p3")
    part, files = P.emit(b.spec, b.topology, P.parse_hosts("2"), b.files)
    roles = {c.role for c in part.cut}
    assert roles <= {"leaf-spine", "spine-superspine"} and "leaf-spine" in roles
    for n in b.spec.nodes:
        if n.role == "server":
            nic = b.spec.nics_of(n.name)[0]
            assert part.node_host[n.name] == part.node_host[nic.leaf]
    assert len({c.vni for c in part.cut}) == len(part.cut)


def test_ipv6_underlay_needs_70_bytes_more():
    b = build_lab(load_intent("mini"), name="p6")
    part, files = P.emit(b.spec, b.topology, P.parse_hosts("a=2001:db8::1,b=2001:db8::2"), b.files)
    assert part.underlay_mtu == b.spec.mtu + 70
    doc = yaml.safe_load(files["a/p6.clab.yml"])
    assert {lk["remote"] for lk in doc["topology"]["links"] if lk.get("type") == "vxlan"} == {"2001:db8::2"}


def test_names_railab_makes_are_prefix_free():
    """clabernetes#252: a tool that matches by prefix must not confuse two of railab's names."""
    assert C.prefix_free(["vx-leaf1-eth1", "vx-leaf1-eth10", "vx-leaf1-eth2"]) == [
        ("vx-leaf1-eth1", "vx-leaf1-eth10")]
    tunnels = [P.tunnel_name(v) for v in (1, 9, 10, 99, 10000, 10001, 100000, P.VNI_MAX)]
    assert not C.prefix_free(tunnels) and {len(t) for t in tunnels} == {10}
    from railab.testbed.stitch import bridge_port
    assert not C.prefix_free([bridge_port(k) for k in range(1, 255)])
    with pytest.raises(ValueError):
        P.tunnel_name(0)


def test_clabernetes_tunnel_name_clashes_are_named(ro1024):
    """The names Clabernetes itself makes (``vx-<node>-<iface>``) do clash on a spine with
    eth1 and eth10..eth16: the CLI says which version is needed."""
    out, text = ro1024
    clashes = C.tunnel_clashes(yaml.safe_load((out / "pt.clab.yml").read_text()))
    assert ("vx-spine1-eth1", "vx-spine1-eth10") in clashes
    assert "newer than v0.4.1" in " ".join(text.split()) and "clabernetes#252" in text


def test_cli_refuses_an_impossible_partition_and_writes_nothing(tmp_path):
    out = tmp_path / "none"
    res = CliRunner().invoke(app, ["generate", "mini", "--hosts", "3", "-o", str(out)])
    assert res.exit_code == 2 and "at most 2 hosts" in res.output
    assert not out.exists() and not any(tmp_path.iterdir())
    res = CliRunner().invoke(app, ["generate", "mini", "--hosts", "2", "--underlay-pool", "10.1.2.3/33",
                                   "-o", str(out)])
    assert res.exit_code == 2 and "--underlay-pool" in res.output


def test_containerlab_host_dry_run_deploys_only_that_part(ro1024):
    out, _ = ro1024
    res = CliRunner().invoke(app, ["up", str(out), "--runtime", "containerlab", "--host", "host2", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"containerlab deploy -t {out / 'host2' / 'pt.clab.yml'}"
    res = subprocess.run([sys.executable, "-c", "from railab.cli import main; main()", "up", str(out),
                          "--runtime", "containerlab", "--host", "h9", "--dry-run"], capture_output=True, text=True)
    assert res.returncode == 2 and "its hosts: host1, host2" in res.stderr
    res = CliRunner().invoke(app, ["up", str(out), "--host", "host1"])
    assert res.exit_code == 2 and "--runtime containerlab" in res.output
    res = CliRunner().invoke(app, ["up", str(out), "--runtime", "containerlab", "--stitch"])
    assert res.exit_code == 2 and "--stitch is the netns runtime" in res.output


def test_stitch_plan_reads_the_host_files(ro1024, tmp_path):
    from railab.testbed.stitch import stitch_plan

    out, _ = ro1024
    plan = stitch_plan(out)
    assert len(plan.tunnels) == 32 and len(plan.clab.links) == 64 - 16 and len(plan.all_links) == 64
    assert {t.host for t in plan.tunnels} == {"host1", "host2"}
    assert plan.namespaces == ["railab-pt-host1", "railab-pt-host2", "railab-pt-underlay"]
    plain = CliRunner().invoke(app, ["generate", "mini", "-o", str(tmp_path / "plain"), "--name", "pp"])
    assert plain.exit_code == 0
    with pytest.raises(Exception, match="no partition.json"):
        stitch_plan(tmp_path / "plain")


# ---- live: the one-machine proof -------------------------------------------------------------
def _ours() -> list[str]:
    try:
        return sorted(n for n in os.listdir("/run/netns") if f"mh{PID}" in n)
    except FileNotFoundError:
        return []


@pytest.fixture(scope="module")
def stitched(tmp_path_factory):
    from tests.conftest import integration_skip_reason

    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    from railab.checks.deploy import bring_up
    from railab.testbed.runtime.netns.deploy import NetnsDeployer

    name = f"mh{PID}"
    labdir, part = P.generate_hosts(load_intent("mini"), tmp_path_factory.mktemp("mh") / name,
                                    P.parse_hosts("2"), name=name)
    rt = NetnsDeployer()
    try:
        rec = bring_up(rt, labdir, stitch=True)
        yield name, labdir, part, rec
    finally:
        rt.down(name)
        assert _ours() == [], "namespaces left after down"


@pytest.mark.integration
def test_two_namespace_hosts_converge_check_and_keep_hop_counts(stitched):
    from railab.checks.runner import run_checks
    from railab.testbed.runtime.netns import NetnsExecutor
    from railab.topologies.labspec import LabSpec
    from railab.traffic.engine import Engine
    from railab.traffic.patterns import flows_for

    name, labdir, part, rec = stitched
    spec = LabSpec.load(labdir)
    assert rec.phase == "running" and rec.stitch["underlay_mtu"] == spec.mtu + 50
    assert len(part.cut) == 8 and {c.role for c in part.cut} == {"leaf-spine"}
    # the cut links are real VXLAN devices whose underlay is the host namespace
    c = part.cut[0]
    ns_a = rec.namespaces[c.a.node]
    d = json.loads(subprocess.run(["ip", "-n", ns_a, "-d", "-j", "link", "show", "dev", c.a.interface],
                                  capture_output=True, text=True, check=True).stdout)[0]
    assert d["linkinfo"]["info_kind"] == "vxlan" and d["linkinfo"]["info_data"]["id"] == c.vni
    assert d["linkinfo"]["info_data"]["port"] == 4789 and d["mtu"] == spec.mtu
    assert d["linkinfo"]["info_data"]["remote"] == part.host(c.b.host).underlay
    # every check passes, the cut links' cabling rows name their VNI
    res = run_checks(spec, NetnsExecutor(name))
    bad = [r for r in res if r.status != "pass"]
    assert not bad, "\n".join(r.message() for r in bad)
    vx = [r for r in res if r.check == "cabling" and "vxlan VNI" in (r.observed or "")]
    assert len(vx) == 8
    # hop counts are what lab.json expects (VXLAN adds no routed hop), and bytes crossed the underlay
    def ul_tx() -> int:
        out = subprocess.run(["ip", "-n", f"railab-{name}-host1", "-s", "-j", "link", "show", "dev", "ul0"],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)[0]["stats64"]["tx"]["packets"]
    before = ul_tx()
    with Engine(spec, lambda node: rec.namespaces[node]) as eng:
        for pattern, want in (("inter-rail", 3), ("cross-group", 3), ("intra-rail", 1)):
            results = eng.run(flows_for(spec, pattern), measure=True)
            assert results and spec.expected_hops[pattern] == want
            for r in results:
                assert r.ok and r.lost == 0 and r.hops_ttl == want == r.hops_counters, r.to_dict()
            if want == 3:  # some of these flows took a cut (VXLAN) uplink, delivered all the same
                over = [r for r in results for u in r.uplinks if part.cut_at(*u.split(">")[0].split(":"))]
                assert over, [r.uplinks for r in results]
    assert ul_tx() - before >= 8  # cross-group flows leave host1 through the VXLAN underlay


@pytest.mark.integration
def test_a_failed_stitched_up_leaves_nothing(tmp_path, monkeypatch):
    """A failure after the hosts, underlay and tunnels exist (here: right after they were made)
    rolls all of it back with the lab's namespaces."""
    from tests.conftest import integration_skip_reason

    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    from railab.errors import RailabError
    from railab.testbed import stitch
    from railab.testbed.runtime.netns.deploy import NetnsDeployer

    name = f"mhf{PID}"
    labdir, _ = P.generate_hosts(load_intent("mini"), tmp_path / name, P.parse_hosts("2"), name=name)
    real = stitch.build
    made: list[str] = []

    def build_then_fail(plan, fds):
        real(plan, fds)
        made.extend(sorted(n for n in os.listdir("/run/netns") if name in n))
        raise RailabError("injected failure after the stitching")

    monkeypatch.setattr(stitch, "build", build_then_fail)
    with pytest.raises(RailabError, match="injected"):
        NetnsDeployer().up(labdir, stitch=True)
    assert f"railab-{name}-underlay" in made and f"railab-{name}-host2" in made
    assert sorted(n for n in os.listdir("/run/netns") if name in n) == []


# ---- review (rev17): refusals found by trying the feature --------------------------------------
def test_underlay_addresses_must_be_unicast_and_host_names_not_reserved():
    """A multicast remote turned the tunnel into a flood group (up --stitch died in netlink), a
    loopback one never left the host (the lab did not converge); ``underlay`` is the name of
    the one-machine proof's bridge namespace (up --stitch failed on ``ip netns add``)."""
    for bad, words in [("a=224.0.0.1,b=10.0.0.2", "multicast"), ("a=127.0.0.1,b=10.0.0.2", "loopback"),
                       ("a=0.0.0.0,b=10.0.0.2", "unspecified"), ("a=169.254.0.1,b=10.0.0.2", "link-local"),
                       ("a=255.255.255.255,b=10.0.0.2", "reserved"), ("a=fe80::1,b=fe80::2", "link-local"),
                       ("underlay=10.0.0.1,b=10.0.0.2", "reserved")]:
        with pytest.raises(P.PartitionError, match=words):
            P.parse_hosts(bad)
    for pool, words in [("224.0.0.0/24", "multicast"), ("127.0.0.0/24", "loopback")]:
        with pytest.raises(P.PartitionError, match=words):
            P.parse_hosts("2", pool=ipaddress.ip_network(pool))
    with pytest.raises(P.PartitionError, match="holds 0 host addresses"):
        P.parse_hosts("2", pool=ipaddress.ip_network("10.253.0.0/32"))
    assert P.parse_hosts("2", pool=ipaddress.ip_network("fd00::/64"))[1].underlay == "fd00::2"


def test_underlay_pool_without_a_host_count_is_refused(tmp_path):
    for extra in ([], ["--hosts", "a=10.0.0.1,b=10.0.0.2"]):
        out = tmp_path / f"x{len(extra)}"
        res = CliRunner().invoke(app, ["generate", "mini", "--underlay-pool", "10.9.0.0/24", "-o", str(out),
                                       *extra])
        assert res.exit_code == 2 and "applies to --hosts N" in res.output, res.output
        assert not out.exists()


def test_stitch_and_host_on_an_intent_or_a_host_file_say_what_to_give(ro1024, tmp_path, monkeypatch):
    from railab.testbed.stitch import stitch_plan

    monkeypatch.chdir(tmp_path)
    for extra in (["--stitch"], ["--runtime", "containerlab", "--host", "host1"]):
        res = CliRunner().invoke(app, ["up", "mini", "--name", "r17nogen", *extra])
        assert res.exit_code == 2 and "--hosts N -o DIR first" in res.output, res.output
    assert not (tmp_path / "labs").exists()  # nothing generated for a refusal
    out, _ = ro1024
    with pytest.raises(Exception, match="one host's part of a partitioned lab: give --stitch the lab directory"):
        stitch_plan(out / "host1" / "pt.clab.yml")


def test_fault_kinds_that_remake_veths_refuse_cut_links(ro1024):
    """cable-pull deleted a cut link's VXLAN device and its heal then failed with a netlink
    traceback (File exists), leaving the link gone: both veth kinds refuse cut links."""
    from types import SimpleNamespace

    from railab.errors import UsageError
    from railab.testbed import faults as F
    from railab.testbed.state import LabState
    from railab.testbed.stitch import stitch_plan

    out, _ = ro1024
    rec = LabState(lab="pt", stitch=stitch_plan(out).record())
    lab = SimpleNamespace(name="pt", record=rec)
    c = P.Partition.load(out).cut[0]
    assert [t["vni"] for t in F.cut_links_at(rec, {(c.a.node, c.a.interface)})] == [c.vni]
    assert F.cut_links_at(rec, {("srv1", "eth1"), ("g1-leaf1", "eth1")}) == []
    assert F.cut_links_at(LabState(lab="plain"), {(c.a.node, c.a.interface)}) == []
    for kind in ("cable-pull", "cross-cable"):
        with pytest.raises(UsageError, match=f"fault {kind}: .* is a cut link \\(VXLAN VNI {c.vni}"):
            F._refuse_cut(lab, kind, {(c.b.node, c.b.interface)})
    F._refuse_cut(lab, "cable-pull", {("srv1", "eth1")})  # a local link: allowed


@pytest.mark.integration
def test_cable_pull_on_a_live_cut_link_is_refused_and_changes_nothing(stitched):
    from railab.errors import UsageError
    from railab.testbed import faults as F

    name, labdir, part, rec = stitched
    c = part.cut[0]
    with pytest.raises(UsageError, match="is a cut link"):
        F.inject(name, "cable-pull", c.a.node, c.b.node)
    assert F.list_faults(name) == []
    d = json.loads(subprocess.run(["ip", "-n", rec.namespaces[c.a.node], "-d", "-j", "link", "show", "dev",
                                   c.a.interface], capture_output=True, text=True, check=True).stdout)[0]
    assert d["linkinfo"]["info_kind"] == "vxlan" and d["operstate"] != "DOWN"
    res = subprocess.run([sys.executable, "-c", "from railab.cli import main; main()", "fault", name,
                          "cable-pull", c.a.node, c.b.node], capture_output=True, text=True)
    assert res.returncode == 2 and "cannot act on it" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.integration
def test_cabling_of_cut_links_sees_the_underlay(stitched):
    """A VXLAN device stays up when its underlay is cut: the cut links' rows passed while no
    frame crossed. They now read the hosts' ``ul0`` (state and the partition's underlay MTU)."""
    from railab.checks.runner import run_checks
    from railab.testbed.runtime.netns import NetnsExecutor
    from railab.topologies.labspec import LabSpec

    name, labdir, part, rec = stitched
    spec = LabSpec.load(labdir)

    def cut_rows(words: str) -> list:
        res = run_checks(spec, NetnsExecutor(name), only="cabling")
        return [r for r in res if "over vxlan VNI" in (r.expected or "") and words in (r.reason or "")
                and r.status == "fail"]

    def ip(ns: str, *argv: str) -> None:
        subprocess.run(["ip", "-n", ns, "link", "set", *argv], check=True)

    under, host1 = rec.stitch["underlay_namespace"], rec.stitch["hosts"]["host1"]["namespace"]
    try:
        ip(under, "p001", "down")
        rows = cut_rows("underlay down")
        assert len(rows) == 8 and all(r.cause.kind == "link-down" for r in rows), [r.reason for r in rows]
    finally:
        ip(under, "p001", "up")
    try:
        ip(host1, "ul0", "mtu", "1500")
        rows = cut_rows("underlay MTU too small")
        assert len(rows) == 8 and f"need {spec.mtu + 50}" in rows[0].reason
    finally:
        ip(host1, "ul0", "mtu", str(spec.mtu + 50))
    res = run_checks(spec, NetnsExecutor(name), only="cabling")
    assert all(r.status == "pass" for r in res), [r.message() for r in res if r.status != "pass"]


def test_up_of_one_host_file_on_netns_is_a_usage_error(ro1024):
    """A host file's vxlan links are bad input for the netns runtime: exit 2 (was 1), before any
    host prerequisite is looked at."""
    out, _ = ro1024
    res = subprocess.run([sys.executable, "-c", "from railab.cli import main; main()", "up",
                          str(out / "host1" / "pt.clab.yml"), "--no-progress"], capture_output=True, text=True)
    assert res.returncode == 2 and "vxlan link(s)" in res.stderr and "--stitch" in res.stderr, res.stderr
