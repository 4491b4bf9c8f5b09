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
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from railab.checks.deploy import bring_up
from railab.checks.lab import LiveLab
from railab.testbed.runtime.netns import NetnsExecutor, NetnsRuntime
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.testbed.state import holder_lock
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


#: The session's lab fixtures: a module that uses one (or has an integration test) is live.
LAB_FIXTURES = frozenset({"mini_lab", "railonly_lab", "lossless_lab"})
#: xdist group of every test of a live module: one worker runs them all, in file order, so the
#: session's labs come up once and no two load runs share the 2 cores.
LIVE_GROUP = "live"
#: Live modules that bring up labs of their own (no session lab) and measure no rate or timing:
#: xdist group :data:`OWN_LAB_GROUP`, run by the other worker beside the first one's untimed
#: live tests (about 3 of the live worker's 13.6 min, measured 2026-12-05).
OWN_LAB_MODULES = frozenset({"test_faults_live", "test_exercise_live", "test_paths_deploy", "test_linklocal",
                             "test_scale_plane", "test_partition", "test_interrupts_live",
                             "test_docs_blocks"})
OWN_LAB_GROUP = "live-own"
#: Live modules that measure rates, losses or timings on a lab (load runs, drills, the console's
#: load run): each of their tests waits its turn (:func:`cpu_turn`) while an own-lab test runs
#: on the other worker, and holds it off while it runs; only the niced unit tests run beside it.
TIMED_MODULES = frozenset({"test_load", "test_lb", "test_capacity", "test_load_rootcause", "test_collective",
                           "test_ui_live", "test_drill_live", "test_traffic_live", "test_demo_e2e",
                           "test_ecmp_load", "test_otg", "test_pfc_failures"})
#: Tests of :data:`TIMED_MODULES` that measure no rate, loss or timing (settings, refusals, static
#: reads of the dataplane, reports): they take no turn (:func:`cpu_turn`), so they run beside the
#: other worker's own-lab tests as the untimed live modules do (the suite reached its 15-minute
#: budget with the live worker waiting out own-lab tests: 2026-12-06, 905 s)
UNTIMED_TESTS = frozenset({
    "test_capacity::test_live_every_port_shaped_and_bgp_converged",
    "test_capacity::test_live_down_removes_everything",
    "test_capacity::test_live_failed_capacity_step_rolls_the_lab_back",
    "test_capacity::test_containerlab_runtime_refuses_capacity",
    "test_otg::test_live_token",
    "test_otg::test_live_port_link_down_is_a_railab_fault",
    "test_otg::test_cli_refuses_non_loopback_without_token",
    "test_otg::test_bad_config_gets_the_error_object",
    "test_otg::test_rocev2_incast_config",
    "test_pfc_failures::test_live_link_speed_halves_both_ends_one_root_cause_and_heals",
    "test_pfc_failures::test_watchdog_setting_is_validated_and_survives_the_plan",
    "test_pfc_failures::test_pfc_watchdog_in_the_intent_reaches_the_agent_and_sonic_pfc_wd",
    "test_lb::test_cli_bad_mode_and_lab_not_up_exit_2_with_one_error_line",
    "test_lb::test_cli_compare_options_only_with_compare",
    "test_lb::test_report_draws_an_lb_comparison",
    "test_lb::test_live_up_applies_the_intents_mode_as_a_phase_and_down_removes_it",
    "test_collective::test_report_plots_load_runs_and_keeps_them",
    "test_collective::test_report_cli_adds_runs_to_a_lab_that_is_down",
    "test_drill_live::test_drill_bad_input_is_one_error_and_changes_nothing",
    "test_traffic_live::test_engine_open_reads_each_switch_once",
})
#: Nice of a worker while it runs a test of a model/unit module: it takes the CPU the live tests
#: leave idle (FRR convergence waits, lab sleeps), not the CPU their load runs measure with.
UNIT_NICE = 19


def _live_modules(items) -> set[str]:
    return {item.module.__name__ for item in items
            if "integration" in item.keywords or LAB_FIXTURES & set(getattr(item, "fixturenames", ()))}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark every test of a live module with its xdist group (:data:`LIVE_GROUP`, or
    :data:`OWN_LAB_GROUP` for :data:`OWN_LAB_MODULES`). Before xdist's own hook (``tryfirst``):
    that hook turns the marks into the node ids' ``@group`` suffix the loadgroup scheduler
    reads, and a conftest hook registered before it runs after it; without ``tryfirst`` the
    group was never seen and the live tests ran on both workers, each bringing up its own
    session labs and load runs side by side (measured in CI: ml<pid> on gw0, ro<pid> on gw1)."""
    live = _live_modules(items)
    for item in items:
        name = item.module.__name__
        if name in live:
            item.add_marker(pytest.mark.xdist_group(OWN_LAB_GROUP if name in OWN_LAB_MODULES else LIVE_GROUP))
    # The live worker runs its untimed modules first, whole modules in their order (a stable
    # sort: module fixtures stay together), then the timed ones. The other worker starts on the
    # own-lab group (xdist hands out the largest groups first), which takes the CPU turn test by
    # test: in alphabetical order the live worker met a timed test (test_capacity) at once and
    # waited out own-lab tests while its untimed ones were still to come (fresh-clone suites at
    # 905-945 s); now both groups' untimed work overlaps and the timed tests follow.
    items.sort(key=lambda it: (it.module.__name__ in live and it.module.__name__ in TIMED_MODULES))
    reason = integration_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Under xdist (``-n 2 --dist loadgroup``, the README's test command), a worker runs live
    tests at nice 0 and the rest at :data:`UNIT_NICE`: before the item's fixtures, so a lab a
    live test brings up (its FRR daemons inherit the nice) is never started from a niced worker.
    Nice is per thread on Linux: this is pytest's main thread, the one that forks."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.geteuid() == 0:
        live = item.get_closest_marker("xdist_group") is not None
        os.setpriority(os.PRIO_PROCESS, 0, 0 if live else UNIT_NICE)


def _cpu_turn_path(controller_pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"railab-suite-{controller_pid}.cpu.lock")


def pytest_unconfigure(config):
    """The controller removes the workers' turn lock file once they are gone."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            os.unlink(_cpu_turn_path(os.getpid()))
        except FileNotFoundError:
            pass


@contextmanager
def cpu_turn(item):
    """Under xdist, an exclusive flock shared by the run's workers (railab's own
    :func:`railab.testbed.state.holder_lock`, waiting) around a test of
    :data:`TIMED_MODULES` (but :data:`UNTIMED_TESTS`) or :data:`OWN_LAB_MODULES` (its setup,
    call and teardown, session lab teardown included): a load run never shares the CPU with the other worker's lab
    bring-ups, only with niced unit tests. Elsewhere (one process) it does nothing."""
    if (not os.environ.get("PYTEST_XDIST_WORKER") or item.module.__name__ not in TIMED_MODULES | OWN_LAB_MODULES
            or f"{item.module.__name__}::{item.originalname}" in UNTIMED_TESTS):
        yield
        return
    # the workers' parent is xdist's controller; busy() returns: wait for the turn
    with holder_lock(_cpu_turn_path(os.getppid()), f"test {item.nodeid}", lambda holder: None):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with cpu_turn(item):
        yield


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
    """The ``mini-lossless`` intent (200 Mb/s ports, ECN, PFC; 8 uplinks per leaf), up and
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
