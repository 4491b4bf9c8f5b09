"""The lab-name rule matches the whole name: Python's ``$`` also matches before a final newline,
so ``'rvx\\n'`` used to pass (issue 11 review, item 4)."""

from __future__ import annotations

import copy
import os

import pytest
import yaml
from typer.testing import CliRunner

from railab.errors import EXIT_USAGE, RailabError
from railab.testbed.labref import resolve
from railab.topologies import naming
from railab.topologies.generator import build_lab
from railab.topologies.intent import INTENTS_DIR, IntentError, parse_intent

PID = os.getpid()
BAD = ["rvx\n", "rvx\n\n", "\nrvx", "rvx ", "a" * 33, "Rvx", "1vx", ""]


@pytest.mark.parametrize("name", BAD)
def test_rule_rejects(name):
    assert not naming.is_lab_name(name)
    assert not naming.LAB_NAME.match(name)  # anchored: even .match() cannot accept it
    with pytest.raises(naming.NamingError):
        naming.check_lab_name(name)


@pytest.mark.parametrize("name", ["r", "rvx", "mini-2", "a" * 32])
def test_rule_accepts(name):
    assert naming.is_lab_name(name) and naming.check_lab_name(name) == name


def test_generator_intent_and_resolver_reject_trailing_newline():
    data = copy.deepcopy(yaml.safe_load((INTENTS_DIR / "mini.yml").read_text()))
    with pytest.raises(IntentError):
        build_lab(parse_intent(data), name="rvx\n")
    data["name"] = "rvx\n"
    with pytest.raises(IntentError, match="not a valid lab name"):
        parse_intent(data)
    with pytest.raises(RailabError):
        resolve(f"nolab{PID}\n")


def test_cli_generate_rejects_trailing_newline(tmp_path):
    from railab.cli import app

    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["generate", "mini", "--name", "rvx\n", "-o", str(out)])
    assert r.exit_code == EXIT_USAGE, r.output
    assert "not a valid lab name" in r.output
    assert not out.exists()
