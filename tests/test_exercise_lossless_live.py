"""Live training exercises of the lossless level (level 4: issue 45's PFC storm and PFC priority
mismatch) on the session's ``mini-lossless`` lab (tests/conftest.py ``lossless_lab``, not a lab
of its own): each kind passes the case every catalogue kind passes
(tests/test_exercise_live.py ``check_kind_case``: hidden, graded wrong and right, repaired
through ``railab exec``, ``fix`` green, revealed); and a storm's link reset outside railab's
tools ends the storm but is not credited, while railab check names the pfc failure by its node
only and the trainee's journaled reset, at the far end of the storming link, is."""

from __future__ import annotations

import json
import os
import re

import pytest

from railab.checks import exercise as X
from railab.testbed import exercise as store
from railab.testbed import state as st
from tests.test_exercise_live import SEED, _cli, _exec, check_kind_case, ex  # noqa: F401 (ex: a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]

CASES = [(level, kind) for level in sorted(X.LOSSLESS_LEVELS) for kind in X.LEVELS[level]]


@pytest.fixture(scope="module")
def lab(lossless_lab, tmp_path_factory):
    """The session's mini-lossless lab, with this module's exercise records in a directory of its
    own; no exercise record is left on it afterwards."""
    old = os.environ.get("RAILAB_EXERCISE_DIR")
    os.environ["RAILAB_EXERCISE_DIR"] = str(tmp_path_factory.mktemp("exercises-lossless"))
    try:
        yield lossless_lab
    finally:
        store.remove(lossless_lab.name)
        if old is None:
            os.environ.pop("RAILAB_EXERCISE_DIR", None)
        else:
            os.environ["RAILAB_EXERCISE_DIR"] = old


@pytest.mark.parametrize("level,kind", CASES, ids=[k for _, k in CASES])
def test_lossless_kind_graded_repaired_and_revealed(ex, level, kind):  # noqa: F811 (pytest fixture)
    assert ex.spec.qos.capacity.enabled and SEED == 11
    check_kind_case(ex, level, kind, precheck=kind == CASES[0][1])


def _paused(lab, node: str, port: str) -> bool:
    out = lab.exec(node, ["tc", "qdisc", "show", "dev", port]).stdout
    return bool(re.search(r"tbf \S+ parent \S+ rate 8Kbit", out))


def test_a_storm_reset_outside_railabs_tools_is_not_credited(ex):  # noqa: F811 (pytest fixture)
    """Seed 4 storms from srv9:eth2 (g2-leaf2:eth1 held): railab check names `pfc at g2-leaf2`
    (no port, no repair); srv9's NIC reset straight in its namespace ends the storm at check's
    next look but `fix` does not credit it, nor a journaled look; the reset of the same link at
    the leaf through railab exec is credited."""
    lab, name = ex, ex.name
    (planned,) = X.plan_faults(lab.spec, 4, 4, "pfc-storm")
    assert planned["accept"] == ["srv9:eth2", "g2-leaf2:eth1"]
    r = _cli("exercise", "start", name, "--level", 4, "--seed", 4, "--kind", "pfc-storm", "--no-precheck")
    assert r.exit_code == 0, r.output
    assert _paused(lab, "g2-leaf2", "eth1")
    out = _cli("check", name, "--only", "pfc")
    assert out.exit_code == 1 and "pfc at g2-leaf2" in out.stdout, out.output
    doc = json.loads(_cli("check", name, "--only", "pfc", "--json").stdout)
    assert doc["exercise_detail"] == "node"
    for text in (out.stdout, json.dumps(doc)):
        assert not re.search(r"(g2-leaf2|srv9):eth\d|shut its port|watchdog drop|ip link set|prio-pfc", text)

    nic = next(n for n in lab.spec.nics_of("srv9") if n.interface == "eth2")
    lab.exec("srv9", ["sh", "-c", "ip link set eth2 down && ip link set eth2 up"])  # not railab exec
    lab.exec("srv9", ["ip", "route", "replace", "default", "via", str(nic.gateway), "dev", "eth2",
                      "table", str(nic.table)])
    outside = _cli("exercise", "fix", name, "--wait", "30")
    assert outside.exit_code == 1 and "NOT CREDITED" in outside.stdout, outside.output
    assert not _paused(lab, "g2-leaf2", "eth1")  # the check's look ended the storm: the reset did
    _exec("srv9", "--", "ip", "-br", "link", "show", "eth2", lab=name)  # a journaled look
    looked = _cli("exercise", "fix", name, "--wait", "0")
    assert looked.exit_code == 1 and "NOT CREDITED" in looked.stdout, looked.output
    _exec("g2-leaf2", "--", "sh", "-c", "ip link set eth1 down && ip link set eth1 up", lab=name)
    fixed = _cli("exercise", "fix", name, "--wait", "30")
    assert fixed.exit_code == 0 and fixed.stdout.startswith("REPAIRED:"), fixed.output
    stop = _cli("exercise", "stop", name)
    assert stop.exit_code == 0 and "nothing left to heal" in stop.stdout, stop.output
    assert store.load(name) is None and st.load(name).faults == []
