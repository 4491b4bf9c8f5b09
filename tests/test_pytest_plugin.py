"""The ``railab`` pytest plugin, driven with pytester: a user's test file run against a live lab."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
def test_rail1(lab):
    assert lab.hops("srv1:gpu0", "srv2:gpu0") == 1

def test_inter_rail(lab):
    assert lab.hops("srv1:gpu0", "srv2:gpu1") == 3
    assert lab.hops("srv1:gpu0", "srv2:gpu1", pxn=True) == 1

def test_spec_and_exec(lab):
    assert lab.spec.architecture == "rail-optimized"
    assert lab.exec("g1-leaf1", ["vtysh", "-c", "show bgp summary json"]).ok

def test_bgp_routes(lab):
    res = lab.check(only="bgp,routes")
    assert res and not [r.message() for r in res if r.status == "fail"]

def test_wrong_expectation_fails(lab):
    assert lab.hops("srv1:gpu0", "srv3:gpu0") == 1   # cross-group is 3: must fail
'''


def test_without_a_lab_the_fixture_skips(pytester):
    pytester.makepyfile("def test_x(lab):\n    assert False\n")
    res = pytester.runpytest_inprocess("-p", "railab")
    res.assert_outcomes(skipped=1)
    assert "--railab-intent" in res.stdout.str() or res.ret == 0


def test_options_are_registered(pytester):
    res = pytester.runpytest_inprocess("--help")
    out = res.stdout.str()
    assert "--railab-intent" in out and "--railab-lab" in out


@pytest.mark.integration
def test_user_tests_against_running_lab(pytester, mini_lab):
    pytester.makepyfile(USER_TESTS)
    res = pytester.runpytest_inprocess("--railab-lab", mini_lab.name, "-p", "no:cacheprovider")
    res.assert_outcomes(passed=4, failed=1)
    res.stdout.fnmatch_lines(["*test_wrong_expectation_fails*", "*assert 3 == 1*"])
    # an attached lab is left running
    assert os.path.exists(f"/run/netns/clab-{mini_lab.name}-srv1")


@pytest.mark.integration
@pytest.mark.usefixtures("no_leaks")
def test_intent_is_brought_up_once_and_torn_down(pytester):
    name = f"ptk{os.getpid()}"
    pytester.makepyfile(
        'SEEN = []\n'
        f'def test_a(lab):\n    SEEN.append(id(lab)); assert lab.name == "{name}"\n'
        'def test_b(lab):\n    SEEN.append(id(lab)); assert len(set(SEEN)) == 1\n'
        '    assert lab.hops("srv1:gpu1", "srv2:gpu1") == 1\n')
    res = pytester.runpytest_inprocess("--railab-intent", "mini", "--railab-name", name)
    res.assert_outcomes(passed=2)
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"clab-{name}-")]
    assert not os.path.exists(f"/run/railab/{name}")
