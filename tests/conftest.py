"""Shared fixtures: live labs on the netns runtime (root + Debian frr), and a leak check.

Live labs are session-scoped and named with this pytest process's PID (``m<pid>``, ``ro<pid>``),
so parallel runs and other people's labs never clash; they are always brought down at the end.
Integration modules opt into the leak check with ``pytestmark = [pytest.mark.integration,
pytest.mark.usefixtures("no_leaks")]``.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from railab.checks.deploy import bring_up
from railab.checks.lab import LiveLab
from railab.testbed.runtime.netns import NetnsExecutor, NetnsRuntime
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name

PID = str(os.getpid())


def pytest_configure(config):
    """Give the suite's processes a SIGINT they can receive. A shell that starts a job in the
    background without job control (``cmd &`` in a script, ``nohup``) sets SIGINT to ignored,
    and children inherit that across exec, so the Ctrl-C tests' ``railab`` would never see the
    signal (exit 0 instead of 130). A handled SIGINT is reset to the default at exec."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def integration_skip_reason() -> str | None:
    """Why integration tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "integration tests need root (network namespaces, FRR)"
    if not Path("/usr/lib/frr/zebra").exists() or shutil.which("vtysh") is None:
        return "integration tests need Debian's frr: apt-get install frr"
    return None


def pytest_collection_modifyitems(config, items):
    reason = integration_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def our_namespaces() -> set[str]:
    """Namespaces of labs made by this pytest process (their names carry its PID)."""
    try:
        return {n for n in os.listdir("/run/netns") if n.startswith("clab-") and PID in n}
    except FileNotFoundError:
        return set()


_LIVE: dict[str, LiveLab] = {}


def _live_namespaces() -> set[str]:
    return {netns_name(lab.name, n.name) for lab in _LIVE.values() for n in lab.spec.nodes}


@pytest.fixture(scope="module")
def no_leaks():
    """Fail the module if it leaves namespaces of this process behind (live session labs aside)."""
    before = our_namespaces() - _live_namespaces()
    yield
    after = our_namespaces() - _live_namespaces()
    leaked = sorted(after - before)
    assert not leaked, f"namespaces leaked by this module: {leaked}"


def _bring_up(intent: str, name: str, tmp_path_factory) -> LiveLab:
    reason = integration_skip_reason()
    if reason:
        pytest.skip(reason)
    root = Path(__file__).resolve().parents[1]
    labdir = generate(root / "topologies" / "intents" / f"{intent}.yml", tmp_path_factory.mktemp(name) / name,
                      name=name)
    bring_up(NetnsDeployer(), labdir)
    lab = LiveLab(LabSpec.load(labdir), labdir, "netns", NetnsExecutor(name))  # the package's one LiveLab
    _LIVE[name] = lab
    return lab


def _bring_down(name: str) -> None:
    _LIVE.pop(name, None)
    NetnsRuntime().down(name)


@pytest.fixture(scope="session")
def mini_lab(tmp_path_factory):
    """The ``mini`` intent (Rail-optimized, 2 groups x 4 rails, 2 spines), up and converged."""
    name = f"m{PID}"
    try:
        yield _bring_up("mini", name, tmp_path_factory)
    finally:
        _bring_down(name)


@pytest.fixture(scope="session")
def railonly_lab(tmp_path_factory):
    """The ``rail-only-512`` intent (Rail-only, one group, no spines), up and converged."""
    name = f"ro{PID}"
    try:
        yield _bring_up("rail-only-512", name, tmp_path_factory)
    finally:
        _bring_down(name)


@pytest.fixture(scope="session")
def lossless_lab(tmp_path_factory):
    """The ``mini-lossless`` intent (40 Mb/s ports, ECN, PFC; 8 uplinks per leaf), up and
    converged."""
    name = f"ml{PID}"
    try:
        yield _bring_up("mini-lossless", name, tmp_path_factory)
    finally:
        _bring_down(name)


def swap_server_cables(netns: str, a: str = "eth1", b: str = "eth3") -> None:
    """Cross two of a server's cables, as the tutorial does: swap the names of NICs ``a`` and
    ``b`` inside ``netns`` (their addresses move with the names). Calling it again undoes it."""
    with IPRoute(netns=netns, flags=0) as ipr:
        ia, ib = ipr.link_lookup(ifname=a)[0], ipr.link_lookup(ifname=b)[0]
        for i in (ia, ib):
            ipr.link("set", index=i, state="down")
        ipr.link("set", index=ia, ifname="swaptmp")
        ipr.link("set", index=ib, ifname=a)
        ipr.link("set", index=ia, ifname=b)
        for i in (ia, ib):
            ipr.link("set", index=i, state="up")
