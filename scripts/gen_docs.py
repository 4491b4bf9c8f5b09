#!/usr/bin/env python3
"""Fill the docs' marked output blocks from real runs, or check them against real runs.

A marked block in a markdown file (docs/tutorial.md, docs/training.md)::

    <!-- railab-output show='1-9,~2' volatile=ecmp after='railab fault tut1024 heal --all' -->
    ```console
    # railab traffic tut1024 -p inter-rail
    (output, written by this script)
    ```
    <!-- /railab-output -->

Every line of the block starting with ``# `` is a command (a trailing ``\\`` continues it on the
next line); the rest is its output. The script runs the commands of every marked block of a file
in document order, in one scratch directory, with ``bash`` (stdout and stderr together, no
terminal: railab prints its tables at their fixed non-terminal widths, or at ``COLUMNS=120``
where they follow the terminal), and writes each command's real output under it. Attributes of
the opening comment (shell-quoted):

``show``      per command, separated by ``;``: which output lines to keep, comma-separated
              ``N``, ``N-M``, ``N-`` (1-based), ``~N`` (the last N lines), ``/regex/`` (lines
              matching) or ``none``; a gap between kept lines becomes one ``...`` line. Empty or
              absent: every line.
``before``    shell commands run before the block, output discarded (``&&``/``;`` as in bash).
``after``     the same, after the block (e.g. heal the fault the block injected).
``volatile``  extra parts that differ between real runs and are normalized when checking:
              ``ecmp`` (which spine a flow hashes to, per-spine counts, the per-uplink count
              lists, whose order is by count; the kernel's multipath hash seed is random per
              bring-up), ``rtt`` (3-decimal figures), ``num``
              (every number: the block is checked for its shape only), ``mac``.
``test``      ``live`` (default) or ``static``: whether ``tests/test_docs_blocks.py`` reruns it
              (``static`` blocks are regenerated here but only checked structurally there: their
              commands must still parse).

Lab names: a file declares the labs its commands create (``<!-- railab-docs labs=tut1024,tutml
-->``). Each run maps every such name to a fresh name of the same length (so no table changes
width) that no other lab on the host has, in the commands, and maps it back in the output; the
scratch directory is shown as ``/tmp/railab-tut`` (same length too). Every mapped lab is brought
down at the end, whatever happened.

Volatile parts are always normalized when checking (never when writing): durations (``5.3 s``,
``0:00:02``, ``0m14.274s``), timestamps, load averages; then runs of blanks and of table rule
characters collapse, so a wider figure in a table cell is no drift. Nothing else is tolerated.

Usage::

    scripts/gen_docs.py                      # regenerate docs/tutorial.md and docs/training.md
    scripts/gen_docs.py docs/tutorial.md     # one file
    scripts/gen_docs.py --check              # exit 1 and print a diff when a block drifted
    scripts/gen_docs.py --check --live-only  # only the blocks the test reruns

Run as root (it brings labs up). The lead reruns it after output changes; commit the docs it
rewrote with the change.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import re
import shlex
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from railab.testbed.signals import Interrupted, signals_raise

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "tutorial.md", ROOT / "docs" / "training.md"]
OPEN = re.compile(r"^<!-- railab-output(?P<attrs>.*?)-->\s*$")
CLOSE = re.compile(r"^<!-- /railab-output -->\s*$")
LABS = re.compile(r"^<!-- railab-docs labs=(?P<labs>[a-z0-9,-]+) -->\s*$", re.M)
#: The scratch directory as the docs show it; the real one has the same length.
SHOWN_DIR = "/tmp/railab-tut"
PROMPT = "# "
#: The attributes an opening comment may carry (see the module doc).
ATTRS = frozenset({"show", "before", "after", "volatile", "test"})
COMMAND_TIMEOUT = 900
#: The width the commands' tables are rendered at where they follow the terminal (``COLUMNS``);
#: tables with a fixed width of their own (check, traffic, drill: 200-220) keep it.
COLUMNS = 120


@dataclass
class Command:
    """One ``# command`` of a block and the output lines the markdown shows under it."""

    text: str            # the command as the reader types it (continuations joined with \\\n)
    lines: list[str]     # its raw command lines in the file
    output: list[str] = field(default_factory=list)


@dataclass
class Block:
    """A marked block: where it is in the file, its attributes and its commands."""

    start: int           # index of the opening comment line
    end: int             # index of the closing comment line
    attrs: dict[str, str]
    fence: str           # the opening fence line, e.g. ```console
    commands: list[Command]

    @property
    def live(self) -> bool:
        """Whether the drift test reruns this block."""
        return self.attrs.get("test", "live") == "live"

    @property
    def volatile(self) -> set[str]:
        """The block's extra volatile classes."""
        return {v for v in self.attrs.get("volatile", "").split(",") if v}

    def show(self, i: int) -> str:
        """The ``show`` spec of command ``i`` (empty: every line)."""
        specs = self.attrs.get("show", "").split(";")
        return specs[i].strip() if i < len(specs) else ""


def parse_attrs(text: str) -> dict[str, str]:
    """``key=value`` pairs of an opening comment, shell-quoted."""
    out = {}
    for tok in shlex.split(text):
        key, _, value = tok.partition("=")
        out[key] = value
    return out


def parse(text: str) -> tuple[list[str], list[str], list[Block]]:
    """The file's lines, the lab names it declares and its marked blocks."""
    lines = text.split("\n")
    m = LABS.search(text)
    labs = m.group("labs").split(",") if m else []
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not CLOSE.match(lines[j]):
            if OPEN.match(lines[j]):
                raise ValueError(f"line {j + 1}: railab-output block opened inside another (line {start + 1})")
            j += 1
        if j >= len(lines):
            raise ValueError(f"line {start + 1}: railab-output block is never closed")
        body = lines[start + 1:j]
        if len(body) < 2 or not body[0].startswith("```") or body[-1].strip() != "```":
            raise ValueError(f"line {start + 1}: a railab-output block holds exactly one fenced block")
        cmds: list[Command] = []
        k = 1
        while k < len(body) - 1:
            line = body[k]
            if line.startswith(PROMPT):
                raw = [line]
                while raw[-1].endswith("\\") and k + 1 < len(body) - 1:
                    k += 1
                    raw.append(body[k])
                text_ = "\n".join(raw)[len(PROMPT):]
                cmds.append(Command(text_, raw))
            elif cmds:
                cmds[-1].output.append(line)
            else:
                raise ValueError(f"line {start + 2 + k}: output before the first '# command' of the block")
            k += 1
        if not cmds:
            raise ValueError(f"line {start + 1}: a railab-output block needs at least one '# command'")
        attrs = parse_attrs(m.group("attrs"))
        bad = sorted(set(attrs) - ATTRS)
        if bad:
            raise ValueError(f"line {start + 1}: unknown railab-output attribute(s) {bad} (known: {sorted(ATTRS)})")
        unknown = sorted({v for v in attrs.get("volatile", "").split(",") if v} - set(_VOLATILE))
        if unknown or attrs.get("test", "live") not in ("live", "static"):
            raise ValueError(f"line {start + 1}: volatile must be of {sorted(_VOLATILE)}, test live or static")
        blocks.append(Block(start, j, attrs, body[0], cmds))
        i = j + 1
    return lines, labs, blocks


def select(out: list[str], spec: str) -> list[str]:
    """The lines of ``out`` that ``spec`` keeps (see the module doc), ``...`` for each gap."""
    if not spec:
        return out
    if spec == "none":
        return []
    keep: set[int] = set()
    items = re.findall(r"/(?:[^/\\]|\\.)*/|[^,]+", spec)
    n = len(out)
    for item in items:
        item = item.strip()
        if not item or item == ",":
            continue
        if item.startswith("/") and item.endswith("/") and len(item) >= 2:
            rx = re.compile(item[1:-1])
            keep.update(i for i, line in enumerate(out) if rx.search(line))
        elif item.startswith("~"):
            keep.update(range(max(0, n - int(item[1:])), n))
        elif "-" in item:
            a, b = item.split("-", 1)
            keep.update(range(int(a) - 1, min(n, int(b)) if b else n))
        else:
            if int(item) <= n:
                keep.add(int(item) - 1)
    res: list[str] = []
    prev = -1
    for i in sorted(k for k in keep if 0 <= k < n):
        if res and i > prev + 1:
            res.append("...")
        res.append(out[i])
        prev = i
    if res and prev < n - 1:
        res.append("...")
    return res


_ALWAYS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "<clock>"),
    (re.compile(r"\b\d+m\d+(?:\.\d+)?s\b"), "<dur>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|us|µs)\b"), "<dur>"),
    (re.compile(r"load average:?\s*[\d.]+(?:,\s*[\d.]+)*"), "load average <load>"),
    (re.compile(r"host load [\d.]+ before, [\d.]+ after"), "host load <load>"),
]
_VOLATILE = {
    "ecmp": [
        (re.compile(r"spine\d+"), "spine#"),
        (re.compile(r"(spine#[:\w]*)(=| )\d+"), r"\1\2#"),
        (re.compile(r"imbalance(\(max/mean\))?=[\d.]+"), r"imbalance\1=#"),
        (re.compile(r"10\.255\.\d+\.\d+"), "10.255.#"),
    ],
    "rtt": [(re.compile(r"\b\d+\.\d{3}\b"), "#")],
    "num": [(re.compile(r"\d+(?:[.,]\d+)*"), "#")],
    "mac": [(re.compile(r"\b[0-9a-f]{2}(?::[0-9a-f]{2}){5}\b"), "<mac>")],
}
#: a line of ``railab traffic``'s per-uplink counts (``uplinks: a=1, b=0, ...  tail``, wrapped
#: over several lines): which uplinks moved, and so their order, is the hash's
_UPLINK_LIST = re.compile(r"^(uplinks: )?(?:\S+:eth\d+>\S+:eth\d+=\d+(?:, |,$|$|(?=\s{2})))+(?P<tail>\s{2}.*)?$")
_BLANKS = re.compile(r"[ \t]+")
_RULES = re.compile(r"([─━═┈┄])\1+")


def normalize(lines: list[str], volatile: set[str] = frozenset()) -> list[str]:
    """``lines`` with the volatile parts replaced and table padding collapsed, for comparing a
    block with a fresh run (see the module doc)."""
    subs = list(_ALWAYS)
    for v in sorted(volatile):
        subs += _VOLATILE[v]
    out = []
    for line in lines:
        m = _UPLINK_LIST.match(line.strip()) if "ecmp" in volatile else None
        if m:
            line = (m.group(1) or "") + "<uplink counts>" + (m.group("tail") or "")
        for rx, rep in subs:
            line = rx.sub(rep, line)
        line = _RULES.sub(r"\1", _BLANKS.sub(" ", line)).strip()
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return out


class Runner:
    """Runs a file's commands in one scratch directory with its labs under fresh names."""

    def __init__(self, labs: list[str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="rd", dir="/tmp")  # /tmp/rdXXXXXXXX: as long as SHOWN_DIR
        assert len(self.dir) == len(SHOWN_DIR), self.dir
        taken = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        rng = random.Random()
        self.names: dict[str, str] = {}
        for lab in labs:
            while True:
                real = "z" + "".join(rng.choice(string.ascii_lowercase + string.digits)
                                     for _ in range(len(lab) - 1))
                if not any(f"-{real}-" in f"-{t}-" or t.startswith(f"clab-{real}-") for t in taken) \
                        and real not in self.names.values():
                    break
            self.names[lab] = real
        self.env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.env["COLUMNS"] = str(COLUMNS)  # tables that follow the terminal's width use this one
        self.env["RAILAB_DOCS_GEN"] = "1"

    def _to_real(self, text: str) -> str:
        text = text.replace(SHOWN_DIR, self.dir)
        for doc, real in self.names.items():
            text = re.sub(rf"(?<![\w-]){re.escape(doc)}(?![\w])", real, text)
        return text

    def _to_doc(self, text: str) -> str:
        for doc, real in self.names.items():
            text = text.replace(real, doc)
        return text.replace(self.dir, SHOWN_DIR)

    def sh(self, command: str) -> tuple[int, list[str]]:
        """Run one command line (bash, in the scratch directory); its exit code and output."""
        p = subprocess.run(["bash", "-c", self._to_real(command.replace("\\\n", " "))],
                           cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT)
        out = self._to_doc(p.stdout).rstrip("\n")
        return p.returncode, [line.rstrip() for line in out.split("\n")] if out else []

    def close(self) -> None:
        """Bring every mapped lab down and remove the scratch directory: each ``down`` on its
        own (one that fails or times out does not keep the others up), the directory last
        whatever happened."""
        try:
            for real in self.names.values():
                try:
                    subprocess.run(["railab", "down", real], env=self.env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT)
                except (OSError, subprocess.TimeoutExpired) as exc:
                    print(f"gen_docs: railab down {real}: {exc}", file=sys.stderr)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def run_block(runner: Runner, block: Block, log=None) -> list[list[str]]:
    """Run a block (its ``before``, its commands, its ``after``); each command's shown output."""
    outs = []
    if block.attrs.get("before"):
        runner.sh(block.attrs["before"])
    for i, cmd in enumerate(block.commands):
        t0 = time.monotonic()
        rc, out = runner.sh(cmd.text)
        if log:
            log(f"  [exit {rc}, {time.monotonic() - t0:.1f} s] {cmd.text.splitlines()[0][:100]} ({len(out)} lines)")
        outs.append(select(out, block.show(i)))
    if block.attrs.get("after"):
        runner.sh(block.attrs["after"])
    return outs


def render(lines: list[str], blocks: list[Block], outputs: dict[int, list[list[str]]]) -> str:
    """The file's text with the blocks in ``outputs`` (by block index) rewritten."""
    res: list[str] = []
    pos = 0
    for bi, b in enumerate(blocks):
        if bi not in outputs:
            continue
        res += lines[pos:b.start + 2]  # up to and including the fence
        for cmd, out in zip(b.commands, outputs[bi], strict=True):
            res += cmd.lines + out
        res += lines[b.end - 1:b.end + 1]  # closing fence and comment
        pos = b.end + 1
    res += lines[pos:]
    return "\n".join(res)


def diff_block(path: Path, block: Block, outs: list[list[str]]) -> list[str]:
    """A unified diff of the block's normalized output against a fresh run's, or []."""
    have, got = [], []
    for cmd, out in zip(block.commands, outs, strict=True):
        have += [PROMPT + cmd.text] + normalize(cmd.output, block.volatile)
        got += [PROMPT + cmd.text] + normalize(out, block.volatile)
    if have == got:
        return []
    return list(difflib.unified_diff(have, got, f"{path.name} line {block.start + 1} (docs)",
                                     "fresh run", lineterm="", n=2))


def process(path: Path, check: bool, live_only: bool, log=print) -> list[str]:
    """Regenerate (``check`` False) or check one file; the diffs found when checking."""
    text = path.read_text()
    lines, labs, blocks = parse(text)
    outputs: dict[int, list[list[str]]] = {}
    diffs: list[str] = []
    # SIGTERM and SIGHUP raise while the labs run (railab's signals_raise), so the finally below
    # brings them down: Python's default for them ends the process without it (a test run
    # stopped by `timeout` left the tutorial's lab up with a fault injected, 2026-12-06); they
    # end the script with 128 + the signal once the labs are down
    try:
        with signals_raise():
            runner = Runner(labs)
            try:
                for bi, b in enumerate(blocks):
                    if live_only and not b.live:
                        continue
                    log(f"{path.name}:{b.start + 1}: {b.commands[0].text.splitlines()[0][:90]}")
                    outs = run_block(runner, b, log)
                    outputs[bi] = outs
                    if check:
                        diffs += diff_block(path, b, outs)
            finally:
                runner.close()
    except Interrupted as exc:
        if exc.signum == signal.SIGINT:
            raise  # Ctrl-C stays Python's KeyboardInterrupt
        raise SystemExit(128 + exc.signum) from None
    if not check:
        # others may have edited the file while the labs ran: write the outputs into the file as
        # it is now, provided its marked blocks still hold the same commands
        now = path.read_text()
        lines, _labs, blocks_now = parse(now)
        if [[c.text for c in b.commands] for b in blocks_now] != [[c.text for c in b.commands] for b in blocks]:
            raise SystemExit(f"{path}: its marked blocks changed during the run; run the script again")
        new = render(lines, blocks_now, outputs)
        if new != now:
            path.write_text(new)
            log(f"rewrote {path}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    """The command line: regenerate, or check with ``--check``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="markdown files (default: the tutorial and the training guide)")
    ap.add_argument("--check", action="store_true", help="compare with fresh runs, write nothing, exit 1 on drift")
    ap.add_argument("--live-only", action="store_true", help="only the blocks the drift test reruns (test=live)")
    a = ap.parse_args(argv)
    diffs: list[str] = []
    for path in a.files or DOCS:
        diffs += process(path.resolve(), a.check, a.live_only)
    if diffs:
        print("\n".join(diffs))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
