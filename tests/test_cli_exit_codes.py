"""Bad input exits 2 (railab.errors.UsageError) with one ``error: ...`` line naming what is
wrong, in every command: an unknown runtime, a directory without a .clab.yml, a corrupt lab.json
(no lab needed; the live cases are in tests/test_cli_lab.py). Also the check summary's grammar."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from railab.cli import main; main()"]


def _railab(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=60, env=env)


def _one_error_line(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_unknown_runtime_exits_2(tmp_path):
    res = _railab("up", "mini", "--runtime", "bogus", "--no-progress", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    line = _one_error_line(res)
    assert "unknown runtime 'bogus'" in line and "netns" in line and "containerlab" in line
    assert not (tmp_path / "labs").exists()  # refused before generating anything


def test_get_runtime_raises_usage_error():
    from railab.errors import UsageError
    from railab.testbed.runtime import get_runtime

    with pytest.raises(UsageError, match="unknown runtime 'bogus'"):
        get_runtime("bogus")


@pytest.mark.parametrize("command", [["up", "--no-progress"], ["status"], ["check"]])
def test_directory_without_a_clab_file_exits_2(tmp_path, command):
    empty = tmp_path / "emptylab"
    empty.mkdir()
    res = _railab(command[0], str(empty), *command[1:], cwd=tmp_path)
    assert res.returncode == 2, (res.returncode, res.stderr)
    line = _one_error_line(res)
    assert str(empty) in line and ".clab.yml" in line


def test_find_clab_file_raises_usage_error(tmp_path):
    from railab.errors import UsageError
    from railab.testbed.clabfile import find_clab_file

    with pytest.raises(UsageError, match=r"no \*\.clab\.yml, so it is not a lab directory: pass one "
                       "that `railab generate` wrote"):
        find_clab_file(tmp_path)
    (tmp_path / "a.clab.yml").write_text("name: a\n")
    (tmp_path / "b.clab.yml").write_text("name: b\n")
    with pytest.raises(UsageError, match=r"several \*\.clab\.yml \(a\.clab\.yml, b\.clab\.yml\): "
                       "pass the .clab.yml file itself"):
        find_clab_file(tmp_path)
    with pytest.raises(UsageError, match="no such lab directory"):
        find_clab_file(tmp_path / "absent")


@pytest.mark.parametrize("command", [["check"], ["status"], ["down"], ["up", "--no-progress"]])
def test_corrupt_lab_json_names_the_file_and_exits_2(tmp_path, command):
    labdir = tmp_path / "broken"
    labdir.mkdir()
    (labdir / "lab.json").write_text("{\n 'name': 'x'\n")
    (labdir / "broken.clab.yml").write_text("name: broken\ntopology:\n  nodes:\n    a: {kind: linux}\n")
    res = _railab(command[0], str(labdir), *command[1:], cwd=tmp_path,
                  env={**__import__("os").environ, "RAILAB_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 2, (res.returncode, res.stderr)
    line = _one_error_line(res)
    assert f"{labdir / 'lab.json'}: not valid JSON" in line, line


def test_labspec_load_of_corrupt_json_names_the_file(tmp_path):
    from railab.errors import UsageError
    from railab.testbed.labref import resolve
    from railab.topologies.labspec import LabSpec

    (tmp_path / "lab.json").write_text("{\n")
    with pytest.raises(UsageError, match=f"{tmp_path / 'lab.json'}: not valid JSON"):
        LabSpec.load(tmp_path)
    with pytest.raises(UsageError, match=f"{tmp_path / 'lab.json'}: not valid JSON"):
        resolve(tmp_path)


def test_check_summary_grammar():
    from railab.cli.check import _follow, root_summary

    assert root_summary(1, 1) == "1 root cause shown, 1 more failure follows from it"
    assert root_summary(1, 33) == "1 root cause shown, 33 more failures follow from it"
    assert root_summary(2, 1) == "2 root causes shown, 1 more failure follows from them"
    assert root_summary(3, 5) == "3 root causes shown, 5 more failures follow from them"
    assert _follow(1) == "1 more failure follows" and _follow(2) == "2 more failures follow"


def _kinds_exit(monkeypatch, capsys, body) -> tuple[int, str]:
    """Run ``railab kinds --json`` through ``railab.cli.main`` with its work replaced by
    ``body``; returns (exit code, stderr)."""
    import railab.cli.registry as reg
    from railab.cli import main

    monkeypatch.setattr(reg, "registry_record", body)
    monkeypatch.setattr(sys, "argv", ["railab", "kinds", "--json"])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


def test_ctrl_c_outside_a_commands_own_handling_prints_one_line(monkeypatch, capsys):
    """A Ctrl-C that lands before a command handles it (Typer turns it into a returned 130 in
    non-standalone mode, with nothing printed): exit 130 and exactly one `error: interrupted by
    SIGINT` (kinds cleans up nothing). It was the silent exit of `railab check` interrupted at
    0.8 s under load."""
    def boom():
        raise KeyboardInterrupt

    assert _kinds_exit(monkeypatch, capsys, boom) == (130, "error: interrupted by SIGINT\n")


def test_a_command_that_reports_its_interrupt_is_not_reported_twice(monkeypatch, capsys):
    """`up`'s own Ctrl-C line, then exit 130: the top level adds nothing."""
    import typer

    from railab import errors

    msg = "error: interrupted by SIGINT: everything up started was removed"

    def own():
        errors.report_interrupted(msg)
        raise typer.Exit(130)

    assert _kinds_exit(monkeypatch, capsys, own) == (130, msg + "\n")


def test_a_signal_while_the_console_script_imports_railab_is_one_line(tmp_path):
    """Issue 48 review (E): SIGINT in the first ~50 ms of `railab` (the console script importing
    the package, before railab.__main__'s handlers) gave a Python traceback. The package records
    it when the console script imports it, and railab.__main__ reports it: exit 130, one line.
    Here the signal lands deterministically at that moment (after `import railab`, before
    `railab.__main__`), with the console script's argv[0]."""
    code = ("import os, signal, sys; sys.argv = ['/usr/local/bin/railab', 'kinds']; import railab; "
            "os.kill(os.getpid(), signal.SIGINT); from railab.__main__ import main; main()")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert res.returncode == 130, res.stderr
    assert res.stderr == "error: interrupted by SIGINT while starting: nothing was done\n", res.stderr
    # anything else importing railab keeps Python's own handling (nothing recorded, nothing swallowed)
    other = subprocess.run([sys.executable, "-c", "import signal, railab; "
                            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert other.stdout.strip() == "True", other.stderr


def _down_exit(monkeypatch, capsys, tmp_path, where: str) -> tuple[int, str]:
    """``railab down dl1`` through ``railab.cli.main`` with lab dl1 recorded (a state file under a
    private run root) and Ctrl-C landing at ``where``: ``name`` (reading the lab's name, before
    the command's own handling) or ``runtime`` (choosing the runtime, inside it, before the
    teardown began). (exit code, stderr)."""
    import railab.cli.lab as lab_cli
    from railab.cli import main
    from railab.testbed import state

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    state.save(state.LabState(lab="dl1"))

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(lab_cli, "_lab_name" if where == "name" else "_runtime_of", boom)
    monkeypatch.setattr(sys, "argv", ["railab", "down", "dl1"])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


@pytest.mark.parametrize("where", ["name", "runtime"])
def test_down_interrupted_before_its_teardown_says_the_lab_is_still_up(monkeypatch, capsys, tmp_path, where):
    """Issue 48 review (D): `railab down` interrupted ~0.25 s in (before the teardown began)
    claimed `down finished first, the lab is removed` while the lab was still up. The line is
    read off the host: still up, and the command that removes it; exit 130."""
    from railab.testbed import state

    rc, err = _down_exit(monkeypatch, capsys, tmp_path, where)
    assert rc == 130
    assert err == ("error: interrupted by SIGINT: down stopped before it removed lab dl1 (still up): "
                   "railab down dl1 removes it\n"), err
    assert state.load("dl1") is not None


def test_down_left_reads_the_host(monkeypatch, tmp_path):
    from railab.cli import down_left
    from railab.testbed import state

    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    assert down_left(["dl1"]) == "down finished first, lab dl1 is removed"
    state.save(state.LabState(lab="dl1"))
    state.save(state.LabState(lab="dl2"))
    assert down_left(["dl1"]).endswith("lab dl1 (still up): railab down dl1 removes it")
    assert down_left([], all_=True) == ("down stopped before it removed lab dl1, dl2 (still up): "
                                        "railab down --all removes them")
    state.remove_lab_dir("dl1")
    assert down_left(["dl1"]) == "down finished first, lab dl1 is removed"


def test_an_interrupt_wrapped_in_a_runtime_error_is_the_interrupt(monkeypatch, capsys):
    """CI (2026-12-06): SIGINT 0.15 s into ``railab up`` landed while a pydantic model class was
    being created; Python 3.11 re-raised it as ``RuntimeError: Error calling __set_name__`` (the
    KeyboardInterrupt its cause), and railab printed a traceback and exited 1. It is the interrupt:
    exit 130, one line. A RuntimeError of its own stays a failure."""
    class Model:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    def late_import():
        type("LoadBalancing", (), {"_sonic_note": Model()})  # what a model's class body does

    assert _kinds_exit(monkeypatch, capsys, late_import) == (130, "error: interrupted by SIGINT\n")

    def own():
        raise RuntimeError("a bug of its own")

    with pytest.raises(RuntimeError, match="a bug of its own"):
        _kinds_exit(monkeypatch, capsys, own)
