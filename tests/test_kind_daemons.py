"""A node kind's ordered daemon list is what the netns runtime starts (issue 11 review, item 1):
the generated daemons file, ``load_clab`` and the runtime's argv builder all follow the kind,
and zebra's ``-s`` has one home (the kind's ``daemon_options``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from railab.testbed import state as st
from railab.testbed.clabfile import load_clab
from railab.testbed.runtime.netns import FRR_BIN, NetnsRuntime, _alive, _cmdline
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies.generator import generate
from railab.topologies.intent import INTENTS_DIR
from railab.topologies.nodekinds import (
    FRR_CONF,
    FRR_DAEMONS,
    FRR_DAEMONS_FILE,
    SWITCH_SYSCTLS,
    ZEBRA_NL_BUFSIZE,
    NodeKind,
    NodeKindError,
    get_node_kind,
    register_node_kind,
    unregister_node_kind,
)

PID = os.getpid()
KIND = "ospf-sw"
ORDER = ("zebra", "bgpd", "staticd", "ospfd")


@pytest.fixture
def ospf_kind():
    register_node_kind(NodeKind(
        name=KIND, role="switch", clab_kind="linux", image="example/ospf-sw:1.0",
        binds=(FRR_CONF, FRR_DAEMONS_FILE), sysctls=SWITCH_SYSCTLS, daemons=ORDER,
        daemon_options={"zebra": f"-A 127.0.0.1 -s {ZEBRA_NL_BUFSIZE}", "ospfd": "-A 127.0.0.2"},
        description="FRR with ospfd (tests)"), replace=True)
    yield KIND
    unregister_node_kind(KIND)


def _lab(tmp_path: Path, name: str, kind: str) -> Path:
    data = yaml.safe_load((INTENTS_DIR / "mini.yml").read_text())
    data["lab"]["kind"] = kind
    path = tmp_path / "intent.yml"
    path.write_text(yaml.safe_dump(data))
    return generate(path, tmp_path / name, name=name)


def test_load_clab_follows_kind_order(tmp_path, ospf_kind):
    labdir = _lab(tmp_path, f"kd{PID}", ospf_kind)
    text = (labdir / "configs/g1-leaf1/daemons").read_text()
    assert "ospfd=yes" in text and "bfdd=no" in text
    clab = load_clab(labdir)
    assert clab.routers
    for r in clab.routers:
        assert r.daemons == ORDER
        assert r.daemon_options["ospfd"] == ["-A", "127.0.0.2"]
        assert r.daemon_options["zebra"] == ["-A", "127.0.0.1", "-s", str(ZEBRA_NL_BUFSIZE)]


def test_argv_uses_kind_options_once(tmp_path, ospf_kind):
    labdir = _lab(tmp_path, f"ka{PID}", ospf_kind)
    node = load_clab(labdir).routers[0]
    rt = NetnsRuntime()
    zebra = rt._daemon_argv("lab", node.name, "zebra", node.daemon_options["zebra"])
    assert zebra[0] == str(FRR_BIN / "zebra")
    assert zebra.count("-s") == 1 and zebra[zebra.index("-s") + 1] == str(ZEBRA_NL_BUFSIZE)
    ospfd = rt._daemon_argv("lab", node.name, "ospfd", node.daemon_options["ospfd"])
    assert ospfd[0] == str(FRR_BIN / "ospfd") and ospfd[-2:] == ["-A", "127.0.0.2"] and "-s" not in ospfd
    # no options given: the builder adds none of its own (zebra's -s lives in the node kind)
    assert "-s" not in rt._daemon_argv("lab", node.name, "zebra")


def test_frr_kind_daemons_file_round_trip(tmp_path):
    labdir = _lab(tmp_path, f"kf{PID}", "frr")
    for r in load_clab(labdir).routers:
        assert r.daemons == FRR_DAEMONS == get_node_kind("frr").daemons
        assert r.daemon_options["zebra"].count("-s") == 1


def test_zebra_must_come_first():
    with pytest.raises(NodeKindError, match="zebra must be the first"):
        register_node_kind(NodeKind(name="bad-sw", role="switch", clab_kind="linux", image="x",
                                    daemons=("bgpd", "zebra")))
    with pytest.raises(NodeKindError):
        get_node_kind("bad-sw")


def _starttime(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.skipif(not (FRR_BIN / "ospfd").exists(), reason="ospfd not installed")
def test_netns_runtime_starts_kind_daemons_in_order(tmp_path, ospf_kind):
    """Live: the kind's ospfd runs in every switch, started after zebra with the kind's other
    daemons (zebra's wave first, then the rest of the kind's list at once)."""
    name = f"ko{PID}"
    labdir = _lab(tmp_path, name, ospf_kind)
    rt = NetnsDeployer()
    try:
        rt.up(labdir)
        record = st.load(name)
        assert record is not None and record.routers
        for node, r in record.routers.items():
            assert r.daemons == list(ORDER)
            assert set(r.pids) == set(ORDER), node
            # zebra first; the others together once its zserv socket exists (two waves)
            zebra = _starttime(r.pids[ORDER[0]])
            assert all(_starttime(r.pids[d]) >= zebra for d in ORDER[1:]), node
            assert all(_alive(p) for p in r.pids.values())
            assert "ospfd" in _cmdline(r.pids["ospfd"])
        assert "frr_zebra_s" in record.timings
        assert any(k.startswith("frr_") and "ospfd" in k for k in record.timings), record.timings
    finally:
        rt.down(name)
