"""CLI conventions users of containerlab/netlab expect, the same in every command: ``--version``,
``-h``, one meaning per option name, ``railab list``, exit codes 0/1/2/130 from railab.errors,
``down --all`` asking before it removes other users' labs, and the optional extras' error.

No root needed: labs are state records under a private ``RAILAB_RUN_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import railab
from railab.cli import app
from railab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from railab.testbed import state as st
from tests.conftest import PID

ENTRY = "import sys; from railab.__main__ import main; sys.argv[0] = 'railab'; main()"


def _railab(*args: str, pre: str = "", env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The console-script entry (railab.__main__:main) in a child; ``pre``: Python run first."""
    return subprocess.run([sys.executable, "-c", pre + ENTRY, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})}, **kw)


def _commands() -> dict:
    return typer.main.get_command(app).commands


def test_version():
    res = _railab("--version")
    assert res.returncode == EXIT_OK and res.stdout.strip() == f"railab {railab.__version__}"
    assert railab.__version__ != "0+unknown"  # the installed distribution's version


@pytest.mark.parametrize("command", sorted(typer.main.get_command(app).commands))
def test_dash_h_is_help_on_every_command(command):
    runner = CliRunner()
    short, long = runner.invoke(app, [command, "-h"]), runner.invoke(app, [command, "--help"])
    assert short.exit_code == long.exit_code == EXIT_OK, short.output
    assert short.output == long.output and "Usage:" in short.output


@pytest.mark.parametrize("command", [None, *sorted(typer.main.get_command(app).commands)])
def test_help_is_plain_text(command):
    """Help shows no RST markup (double backticks, :func: roles) from the docstrings."""
    res = CliRunner().invoke(app, [command, "-h"] if command else ["-h"], env={"COLUMNS": "300"})
    assert res.exit_code == EXIT_OK, res.output
    for markup in ("``", ":func:", ":class:", ":mod:", ":meth:"):
        assert markup not in res.output, res.output


def test_dash_h_on_the_top_level():
    res = _railab("-h")
    assert res.returncode == EXIT_OK and "list" in res.stdout and "--version" in res.stdout


def test_one_meaning_per_option_name():
    """-o is always output (--out), --all always every lab, -v always --verbose, -y --yes."""
    meaning = {"-o": "--out", "-v": "--verbose", "-y": "--yes", "-h": "--help"}
    seen: dict[str, set] = {}
    for name, cmd in _commands().items():
        for param in cmd.params:
            opts = set(param.opts) | set(getattr(param, "secondary_opts", []))
            for short, long in meaning.items():
                if short in opts:
                    assert long in opts, f"railab {name}: {short} must mean {long}, not {sorted(opts)}"
            for opt in opts:
                seen.setdefault(opt, set()).add(name)
    # --all: every lab (down), or every fault of the lab (`railab fault LAB heal --all`, issue 13)
    assert seen["--all"] == {"down", "fault"}, seen["--all"]
    assert "-o" not in {o for p in _commands()["plan"].params for o in p.opts}  # oversubscription
    assert {"generate", "up", "demo", "report", "graph"} <= seen["-o"]


def test_check_all_is_no_longer_verbose():
    r = CliRunner().invoke(app, ["check", "whatever", "--all"])
    assert r.exit_code == EXIT_USAGE and "No such option" in r.output


def test_generate_out_and_its_old_name(tmp_path):
    for opt in ("--out", "-o", "--outdir"):
        r = CliRunner().invoke(app, ["generate", "mini", opt, str(tmp_path / opt), "--name", f"o{PID}"])
        assert r.exit_code == EXIT_OK, r.output
        assert (tmp_path / opt / "lab.json").is_file()


def test_a_bad_intent_exits_2_from_up_as_from_generate(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\ndesign: {gpus: -3}\n")
    for cmd in (["generate", str(bad)], ["up", str(bad), "--no-progress"]):
        res = _railab(*cmd, cwd=tmp_path, env={"RAILAB_RUN_DIR": str(tmp_path / "run")})
        assert res.returncode == EXIT_USAGE, (cmd, res.stderr)
        assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr
    assert not (tmp_path / "labs").exists()


def _boom(exc: str) -> subprocess.CompletedProcess:
    pre = ("from railab.cli import app; from railab.errors import RailabError, UsageError\n"
           f"@app.command('boom')\ndef boom() -> None:\n    raise {exc}\n")
    return _railab("boom", pre=pre)


@pytest.mark.parametrize("exc, code", [("UsageError('bad option x')", EXIT_USAGE),
                                       ("RailabError('flow lost')", EXIT_FAILED),
                                       ("ValueError('gpus: must be > 0')", EXIT_USAGE)])
def test_main_maps_errors_to_exit_codes(exc, code):
    res = _boom(exc)
    assert res.returncode == code, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_ctrl_c_in_a_command_exits_130_without_traceback():
    res = _boom("KeyboardInterrupt()")
    assert res.returncode == EXIT_INTERRUPTED and "Traceback" not in res.stderr


def test_ctrl_c_while_modules_import_exits_130_without_traceback():
    """SIGINT arrives while the CLI's heavy imports load (here: when Typer is imported)."""
    pre = ("import os, signal, sys\n"
           "class _Interrupt:\n"
           "    def find_spec(self, name, path=None, target=None):\n"
           "        if name == 'typer':\n"
           "            os.kill(os.getpid(), signal.SIGINT)\n"
           "        return None\n"
           "sys.meta_path.insert(0, _Interrupt())\n")
    res = _railab("--version", pre=pre)
    assert res.returncode == EXIT_INTERRUPTED, res.stderr
    assert res.stderr == "error: interrupted by SIGINT while starting: nothing was done\n" and res.stdout == ""


def test_start_up_stays_lazy():
    """`railab -h` never imports the runtimes' or the traffic engine's heavy modules."""
    code = ("import sys; sys.argv = ['railab', '-h']\nfrom railab.__main__ import main\ntry:\n    main()\n"
            "except SystemExit:\n    pass\nprint(sorted(m for m in ('scapy', 'jinja2', 'docker', 'paramiko', "
            "'railab.traffic.engine', 'railab.testbed.runtime.netns') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout[-300:]


# ---- railab list / down --all over state records ------------------------------------------------
def _record(lab: str, user: str | None, labdir: Path) -> dict:
    rec = {"lab": lab, "runtime": "netns", "phase": "running", "labdir": str(labdir),
           "namespaces": {"spine1": f"clab-{lab}-spine1", "srv1": f"clab-{lab}-srv1"},
           "links": [], "routers": {}}
    if user is not None:
        rec["user"] = user
    return rec


@pytest.fixture()
def run_dir(tmp_path, monkeypatch):
    """A private run root with three recorded labs: mine, another user's, and a pre-user record."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("SUDO_USER", "alice")
    for lab, user in ((f"mine{PID}", "alice"), (f"bobs{PID}", "bob"), (f"old{PID}", None)):
        st.save(_record(lab, user, tmp_path / lab))
    return tmp_path / "run"


def test_list_shows_the_labs_of_this_host(run_dir):
    rows = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    assert [r["name"] for r in rows] == sorted([f"mine{PID}", f"bobs{PID}", f"old{PID}"])
    bobs = next(r for r in rows if r["name"] == f"bobs{PID}")
    assert bobs == {"name": f"bobs{PID}", "runtime": "netns", "phase": "running", "nodes": 2, "user": "bob",
                    "labdir": str(run_dir.parent / f"bobs{PID}")}
    human = CliRunner().invoke(app, ["list"], env={"COLUMNS": "200"})
    assert human.exit_code == EXIT_OK and f"bobs{PID}" in human.output and "bob" in human.output


def test_list_with_no_lab(tmp_path, monkeypatch):
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "empty"))
    r = CliRunner().invoke(app, ["list"])
    assert r.exit_code == EXIT_OK and "no lab is up here" in r.output
    assert json.loads(CliRunner().invoke(app, ["list", "--json"]).output) == []


def test_down_all_without_a_terminal_refuses_other_users_labs(run_dir):
    res = _railab("down", "--all", stdin=subprocess.DEVNULL)
    assert res.returncode == EXIT_USAGE, res.stderr
    assert f"bobs{PID} (user bob)" in res.stderr and "--yes" in res.stderr and "Traceback" not in res.stderr
    assert st.load(f"bobs{PID}") is not None  # another user's lab stays up
    assert st.load(f"mine{PID}") is None and st.load(f"old{PID}") is None  # mine (and unowned) are gone
    res = _railab("down", "--all", "--yes", stdin=subprocess.DEVNULL)
    assert res.returncode == EXIT_OK and f"bobs{PID}" in res.stdout
    assert st.labs() == []


@pytest.mark.parametrize("answer, kept", [("n\n", True), ("y\n", False)])
def test_down_all_asks_on_a_terminal(run_dir, monkeypatch, answer, kept):
    monkeypatch.setattr("railab.cli.lab._can_ask", lambda: True)
    r = CliRunner().invoke(app, ["down", "--all"], input=answer)
    assert r.exit_code == EXIT_OK, r.output
    assert f"lab bobs{PID} was brought up by bob: remove it?" in r.output
    assert r.output.count("remove it?") == 1  # only the other user's lab is asked about
    assert (st.load(f"bobs{PID}") is not None) == kept
    assert st.load(f"mine{PID}") is None


def _corrupt(run_dir: Path, lab: str) -> None:
    """A lab whose state.json is corrupt (truncated JSON): its owner is unknown."""
    (run_dir / lab).mkdir(parents=True, exist_ok=True)
    (run_dir / lab / "state.json").write_text('{\n "lab": "' + lab + '",\n "user": "bo')


def test_list_shows_a_lab_with_an_unreadable_record(run_dir):
    _corrupt(run_dir, f"torn{PID}")
    rows = json.loads(CliRunner().invoke(app, ["list", "--json"]).output)
    torn = next(r for r in rows if r["name"] == f"torn{PID}")
    assert torn == {"name": f"torn{PID}", "runtime": None, "phase": "unreadable", "nodes": 0, "user": None,
                    "labdir": None}
    assert len(rows) == 4
    human = CliRunner().invoke(app, ["list"], env={"COLUMNS": "200"})
    assert human.exit_code == EXIT_OK and f"torn{PID}" in human.output and "unreadable" in human.output


def test_down_all_without_a_terminal_keeps_a_lab_with_an_unreadable_record(run_dir):
    _corrupt(run_dir, f"torn{PID}")
    res = _railab("down", "--all", stdin=subprocess.DEVNULL)
    assert res.returncode == EXIT_USAGE, res.stderr
    assert f"torn{PID} (unreadable record)" in res.stderr and "Traceback" not in res.stderr
    assert (run_dir / f"torn{PID}" / "state.json").exists()  # owner unknown: left alone
    assert st.load(f"mine{PID}") is None
    res = _railab("down", "--all", "--yes", stdin=subprocess.DEVNULL)
    assert res.returncode == EXIT_OK and f"torn{PID}" in res.stdout, res.stderr
    assert st.labs() == []


@pytest.mark.parametrize("answer, kept", [("n\n", True), ("y\n", False)])
def test_down_all_asks_about_a_lab_with_an_unreadable_record(run_dir, monkeypatch, answer, kept):
    st.remove_lab_dir(f"bobs{PID}")  # only the unreadable lab needs a question
    _corrupt(run_dir, f"torn{PID}")
    monkeypatch.setattr("railab.cli.lab._can_ask", lambda: True)
    r = CliRunner().invoke(app, ["down", "--all"], input=answer)
    assert r.exit_code == EXIT_OK, r.output
    assert f"lab torn{PID} has an unreadable state record" in r.output and "owner is unknown" in r.output
    assert r.output.count("remove it?") == 1
    assert (run_dir / f"torn{PID}").exists() == kept


def test_down_of_a_named_lab_with_an_unreadable_record_removes_it(run_dir):
    _corrupt(run_dir, f"torn{PID}")
    r = CliRunner().invoke(app, ["down", f"torn{PID}"])
    assert r.exit_code == EXIT_OK and f"lab torn{PID} is down" in r.output, r.output
    assert not (run_dir / f"torn{PID}").exists()


def test_root_shells_are_one_user(run_dir, monkeypatch):
    """Without sudo every root shell records user root: down --all treats them as one user."""
    monkeypatch.delenv("SUDO_USER")
    monkeypatch.setenv("LOGNAME", "root")
    monkeypatch.setenv("USER", "root")
    assert st.invoking_user() == "root"
    st.save(_record(f"roota{PID}", "root", run_dir.parent / "a"))
    monkeypatch.setattr("railab.cli.lab._can_ask", lambda: True)
    r = CliRunner().invoke(app, ["down", "--all"], input="n\nn\nn\n")  # bob, alice, alice
    assert st.load(f"roota{PID}") is None, r.output  # another root shell's lab: the same user
    assert "alice: remove it?" in r.output and st.load(f"mine{PID}") is not None


# ---- optional extras ------------------------------------------------------------------------------
@pytest.mark.parametrize("module, extra, call", [
    ("docker", "containerlab", "from railab.testbed.docker_exec import docker_client; docker_client()"),
    ("paramiko", "ssh", "from railab.testbed.ssh_exec import SshExecutor; SshExecutor({})"),
])
def test_a_missing_extra_names_the_pip_extra(module, extra, call):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "import railab.testbed.runtime.containerlab, railab.testbed.docker_exec, railab.testbed.ssh_exec\n"
            "from railab.errors import MissingExtraError\n"
            f"try:\n    {call}\nexcept MissingExtraError as exc:\n    print(exc)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"pip install 'railab[{extra}]'" in res.stdout and repr(module) in res.stdout


def test_an_interrupt_wrapped_by_class_creation_is_still_an_interrupt():
    """Python 3.11 re-raises an exception from a class body's ``__set_name__`` as a RuntimeError
    whose cause it is: a SIGTERM landing while pydantic built a model at start-up gave a
    traceback and exit 1 (CI); the entry point finds the interrupt inside it."""
    from railab.testbed.signals import wrapped_interrupt as _interrupt_in  # what the entry point calls

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as k:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from k
    except RuntimeError as exc:
        assert isinstance(_interrupt_in(exc), KeyboardInterrupt)
    assert _interrupt_in(RuntimeError("not an interrupt")) is None
