"""Issue 31, on mini-lossless (4 spines, 2 links per leaf-spine pair): one fault is one root
cause in ``railab check --json``, two independent faults are two, and every failed row is
listed under its root (``explains``)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leaks")]


def _cli(*args):
    from railab.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def _check(lab, cond, timeout=45.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        r = _cli("check", lab.name, "--json")
        doc = json.loads(r.output)
        if cond(doc) or time.monotonic() > end:
            return doc
        time.sleep(0.5)


def _failed(doc: dict) -> list[tuple[str, str]]:
    return [(r["check"], r["name"]) for r in doc["results"] if r["status"] == "fail"]


def _covered(doc: dict) -> set[tuple[str, str]]:
    """Every (check, name) a root cause stands for: the root row and the rows it explains."""
    return {x for rc in doc["root_causes"]
            for x in [(rc["check"], rc["root"]), *((e["check"], e["name"]) for e in rc["explains"])]}


def test_dead_spine_bgpd_is_one_root_cause_and_a_second_fault_is_another(lossless_lab):
    lab = lossless_lab
    try:
        r = _cli("fault", lab.name, "daemon-kill", "spine3")
        assert r.exit_code == 0, r.output
        # the leaves' 8 sessions to spine3 go down, their routes and ECMP width via it shrink.
        # Judged from 2 s after the kill, as a person's next command would: within the first
        # second zebra has withdrawn spine3's routes while the leaves' sessions still look
        # Established, and those route rows have no cause yet (a root of their own each)
        time.sleep(2.0)
        doc = _check(lab, lambda d: sum(x["check"] == "bgp" and x["status"] == "fail"
                                        and "spine3:" in x["name"] for x in d["results"]) >= 8
                     and any(x["check"] == "routes" and x["status"] == "fail" for x in d["results"]))
        assert len(doc["root_causes"]) == 1, [rc["cause"] for rc in doc["root_causes"]]
        (rc,) = doc["root_causes"]
        assert rc["cause"]["kind"] == "daemon-dead"
        assert (rc["cause"]["node"], rc["cause"]["daemon"]) == ("spine3", "bgpd")
        assert len(_failed(doc)) > 8 and set(_failed(doc)) <= _covered(doc)
        # an independent second fault is a second root cause
        r = _cli("fault", lab.name, "link-down", "g2-leaf2", "spine1")
        assert r.exit_code == 0, r.output
        time.sleep(2.0)  # as above: the next command a person runs
        doc = _check(lab, lambda d: any(x["check"] == "cabling" and x["status"] == "fail"
                                        for x in d["results"]))
        kinds = sorted((rc["cause"] or {}).get("kind", "none") + ":" + str((rc["cause"] or {}).get("node"))
                       for rc in doc["root_causes"])
        assert kinds == ["daemon-dead:spine3", "link-down:g2-leaf2"], (kinds, doc["root_causes"])
        assert set(_failed(doc)) <= _covered(doc)
    finally:
        _cli("fault", lab.name, "heal", "--all")
    doc = _check(lab, lambda d: not _failed(d), timeout=60)
    assert not _failed(doc), _failed(doc)
