"""`railab plan` through Typer's CliRunner: JSON contract, human tables, error lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from railab.cli.plan import register


@pytest.fixture(scope="module")
def run():
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:  # keep `plan` a sub-command even if it is the only one
        pass

    register(app)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, ["plan", *args])

    return invoke


def test_json_seed_1024(run):
    r = run("--gpus", "1024", "--arch", "rail-optimized", "--leaf", "CX864E-N", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # stdout is the JSON document only
    assert doc["architecture"] == "rail-optimized"
    assert (doc["groups"], doc["leaf_switches"], doc["spine_switches"]) == (2, 16, 8)
    assert doc["links_per_leaf_spine_pair"] == 8
    assert doc["limits"] == {"max_gpus": 8192, "max_servers": 1024, "max_groups": 16, "max_leaves": 128,
                             "max_pods": None}
    assert doc["leaves"][8]["name"] == "g2-leaf1" and doc["leaves"][8]["rails"] == [1]


def test_human_output(run):
    r = run("--gpus", "4096", "--arch", "rail-optimized")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "Rail-optimized fabric: 4,096 GPUs = 512 servers x 8 GPUs" in out
    assert "g8-leaf1 .. g8-leaf8" in out and "spine1 .. spine32" in out
    assert "8,192" in out  # max GPUs
    assert "1,680" in out  # inter-rail switch latency


def test_rail_only_human_lists_rails_per_leaf(run):
    r = run("--gpus", "512", "--arch", "rail-only")
    assert r.exit_code == 0, r.output
    assert "leaf4" in r.stdout and "7,8" in r.stdout


def test_auto_and_options(run, tmp_path: Path):
    f = tmp_path / "sw.yml"
    f.write_text("switches:\n  LAB-64:\n    native_ports: 64\n    latency_ns: 900\n")
    r = run("--gpus", "1024", "--leaf", "LAB-64", "--catalog", str(f), "--gpus-per-server", "4",
            "--oversubscription", "3:1", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    # Rail-only limit 4 x 64 = 256 GPUs, so auto goes Rail-optimized: 48 servers per group
    assert doc["architecture"] == "rail-optimized" and doc["selected_by"] == "auto"
    assert (doc["servers_per_group"], doc["leaf_uplinks"], doc["groups"]) == (48, 16, 6)
    r = run("--gpus", "1024", "--port-speed", "800G", "--arch", "rail-optimized", "--json")
    assert json.loads(r.stdout)["leaf_ports"] == 64


def test_compare(run):
    r = run("--gpus", "512", "--compare", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rail-only"]["plan"]["leaf_switches"] == 4
    assert doc["rail-optimized"]["plan"]["total_switches"] == 12
    r = run("--gpus", "2048", "--compare")
    assert r.exit_code == 0, r.output
    assert "rail-only" in r.stdout and "use rail-optimized" in r.stdout
    assert "hops inter-rail" in r.stdout


def test_compare_hops_read_like_the_single_plan(run):
    """--compare and --arch rail-only show the same hop text (planner.hop_text)."""
    def hop_cells(out: str, label: str) -> list[str]:
        line = next(ln for ln in out.splitlines() if label in ln)
        return [c.strip() for c in line.split("│") if c.strip()]

    single = run("--gpus", "512", "--arch", "rail-only")
    both = run("--gpus", "512", "--compare")
    assert single.exit_code == 0 and both.exit_code == 0, both.output
    # single plan: "│ inter-rail │ 1 or none │ ..." ; compare: "│ hops inter-rail │ <ro> │ <opt> │"
    assert hop_cells(single.stdout, "│ inter-rail ")[1] == "1 or none"
    assert hop_cells(both.stdout, "hops inter-rail ")[1:] == ["1 or none", "3"]
    assert hop_cells(single.stdout, "│ cross-group")[1] == "n/a"
    assert hop_cells(both.stdout, "hops cross-group")[1:] == ["n/a", "3"]


def test_table(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells at the width (80 without a terminal)
    r = run("--table", "CX864E-N", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(x["gpus"], x["spines"]) for x in rows] == [
        (256, 4), (512, 4), (1024, 8), (2048, 16), (4096, 32), (8192, 64)]
    r = run("--table", "CX732Q-N")
    assert r.exit_code == 0, r.output
    assert "past limit" in r.stdout and "Rail-optimized node requirements: CX732Q-N" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--gpus", "1001"], "use 1000 or 1008 GPUs"),
        (["--gpus", "2048", "--arch", "rail-only"], "use rail-optimized"),
        (["--gpus", "16384", "--arch", "rail-optimized", "--tiers", "2"], "Use at most 8192 GPUs"),
        (["--gpus", "1024", "--leaf", "NOPE"], "known models: CX732Q-N, CX864E-N"),
        (["--gpus", "1024", "--arch", "rail-optimized", "--oversubscription", "1:0"], "no uplinks"),
        # malformed ratios are errors whatever --arch picks (auto -> rail-only here)
        (["--gpus", "512", "--oversubscription", "abc"], "oversubscription 'abc' is malformed"),
        (["--gpus", "512", "--arch", "rail-only", "--oversubscription", "1:0"], "no uplinks"),
        (["--gpus", "1024", "--port-speed", "fast"], "e.g. 400G"),
        (["--gpus", "1024", "--catalog", "/nonexistent/x.yml"], "cannot read switch catalog"),
        (["--arch", "rail-only"], "--gpus N"),
        (["--table", "NOPE"], "unknown switch model 'NOPE'"),
    ],
)
def test_errors_exit_2_on_stderr(run, args: list[str], needle: str):
    r = run(*args)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.startswith("error: ") and needle in r.stderr
    assert "Traceback" not in r.output and r.stderr.count("\n") == 1


def test_console_entry_point_errors():
    """The real `railab` entry point (railab.cli:main): error line, exit 2, no traceback."""
    import subprocess
    import sys

    code = "import sys; from railab.cli import main; sys.argv[0] = 'railab'; main()"
    for args, needle in ((["plan", "--gpus", "1001"], "error: 1001 GPUs"),
                         (["plan", "--bogus"], "No such option: --bogus")):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr and "Traceback" not in r.stderr


def test_spine_defaults_to_leaf_model_is_said(run, tmp_path: Path):
    f = tmp_path / "sw.yml"
    f.write_text("switches:\n  TINY-4:\n    native_ports: 4\n    latency_ns: 500\n")
    r = run("--gpus", "64", "--leaf", "TINY-4", "--catalog", str(f))
    assert r.exit_code == 2
    assert "spine model defaults to the leaf model TINY-4" in r.stderr
    assert "pass --spine MODEL with at least 8 ports" in r.stderr
    r = run("--gpus", "64", "--leaf", "TINY-4", "--spine", "TINY-4", "--catalog", str(f))
    assert r.exit_code == 2 and r.stderr.startswith("error: spine TINY-4 has 4 x 400G ports")
    r = run("--gpus", "512", "--oversubscription", "3:1")  # well-formed, but Rail-only has no uplinks: a warning
    assert r.exit_code == 0 and "oversubscription 3:1 does not apply" in r.stdout


def test_command_homes_match_a_full_registration():
    """railab.cli.COMMAND_HOMES (what ``main`` imports for one command) names every command of
    the whole app, each with the module that registers it."""
    import typer.main

    import railab.cli as cli

    full = typer.main.get_command(cli.make_app())
    assert set(cli.COMMAND_HOMES) == set(full.commands)
    for name, home in cli.COMMAND_HOMES.items():
        one = typer.main.get_command(cli.make_app([name]))
        assert name in one.commands, (name, home)
        cmd = one.commands[name]
        if hasattr(cmd, "commands"):  # a Typer group (exercise, model): its callback is Typer's
            assert set(cmd.commands), (name, home)
            continue
        cb = cmd.callback
        assert getattr(cb, "__wrapped__", cb).__module__ in (f"railab.cli.{home}", "railab.cli.exercise")


def test_one_command_imports_only_its_home():
    """``railab down`` does not import the other areas' command modules (their models cost most of
    a command's start); an unknown command still gets the whole app's "No such command"."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['railab', 'list', '--json']\n"
            "import railab.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('railab.cli.')), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = r.stderr.strip().splitlines()[-1]
    assert "railab.cli.lab" in loaded and "railab.cli.traffic" not in loaded and "railab.cli.plan" not in loaded
    r = subprocess.run([sys.executable, "-m", "railab", "upp"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "No such command 'upp'" in r.stderr
