"""The hidden record of a training exercise (``railab exercise``): where it lives, how it is
sealed, and its removal with the lab.

A running exercise keeps two files in ``<exercise root>/<lab>/`` (``/var/lib/railab/exercises``,
or ``$RAILAB_EXERCISE_DIR``: outside ``/run/railab/<lab>`` and outside the lab directory, so
``railab status``, ``railab inspect``, the report and the lab directory never show it):

``public.json``  what every command may read: level, start time, the commands the trainer
                 switched off, the lab directory (the command gate, ``exercise status``). It
                 names no fault.
``sealed``       everything else (the injected faults, their symptoms and hints, answers,
                 hints given, the repair verdict) as JSON, encrypted: a PRF stream cipher
                 (SHA-256 in counter mode over a random 16-byte nonce) with an HMAC-SHA-256
                 tag (encrypt-then-MAC), keyed by ``HMAC(host key, lab name)``. The host key
                 is 32 random bytes in ``<exercise root>/.key`` (mode 0600), never in a lab
                 directory. This keeps the faults out of plain sight; a root trainee can
                 always dig (the key is on the same host).

``railab down`` removes the lab's folder (``railab.testbed.state.remove_lab_dir``).

While an exercise runs (recorded, not revealed), :func:`guard` is the one lock on every path
that changes the lab's faults: ``railab.testbed.faults`` (inject, heal, attach, detach, restart,
swap-cables) and the drill call it, so ``railab fault``, ``railab drill``, the console's actions
and any script are refused with the same message (:func:`refusal`), except the trainee's repair
tools the level allows (:data:`REPAIR_TOOLS`) and the exercise's own start, reveal and stop
(:func:`acting`). The trainee's repairs through railab are journaled in the record
(:func:`note_repair`); ``exercise fix`` credits only a green lab the journal shows a repair for.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.topologies.atomicfile import write_atomic

#: commands a trainer may switch off for an exercise (``railab exercise start --disable``); the
#: CLI wraps them (railab.cli.exercise.gate_commands)
GATEABLE: tuple[str, ...] = ("check", "traffic", "traceroute", "report", "drill", "status", "inspect",
                             "graph", "fault", "restart", "exec")

#: railab commands that change the lab which the trainee may still use while an exercise of that
#: level runs (their repair tools; every other path that changes faults is refused, :func:`guard`):
#: ``exec`` at every level, ``restart`` (a dead daemon) and ``swap-cables`` (crossed cables) at
#: level 2 only (elsewhere they would bring up the very link or NIC the exercise took down; at
#: level 4, PFC, a restart or a re-plug would reset the storming link for the trainee)
REPAIR_TOOLS: dict[int, tuple[str, ...]] = {1: ("exec",), 2: ("exec", "restart", "swap-cables"), 3: ("exec",),
                                            4: ("exec",)}
_TOOL_WORDS = {"exec": "railab exec", "restart": "railab restart", "swap-cables": "railab exercise swap-cables"}

__all__ = ["GATEABLE", "REPAIR_TOOLS", "exists", "save", "load", "load_public", "remove", "locked", "labs",
           "seal", "unseal", "running", "guard", "refusal", "acting", "note_repair"]

#: the lab whose exercise is acting (start, reveal, stop inject and heal its own faults)
_ACTING: ContextVar[str | None] = ContextVar("railab_exercise_acting", default=None)

_NONCE = 16
_TAG = 32


def _host_key() -> bytes:
    root = st.exercise_root()
    path = root / ".key"
    try:
        key = path.read_bytes()
        if len(key) == 32:
            return key
    except FileNotFoundError:
        pass
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    key = secrets.token_bytes(32)
    tmp = root / f".key.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    try:
        os.link(tmp, path)  # atomic: the first writer's key wins, a racing one reads it
    except FileExistsError:
        key = path.read_bytes()
    finally:
        tmp.unlink()
    return key


def _lab_key(lab: str) -> bytes:
    return hmac.new(_host_key(), f"railab-exercise:{lab}".encode(), hashlib.sha256).digest()


def _stream(key: bytes, nonce: bytes, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(key + nonce + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:n])


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def seal(lab: str, data: dict[str, Any]) -> bytes:
    """``data`` (JSON-able) as sealed bytes: nonce | ciphertext | tag (see the module doc)."""
    key = _lab_key(lab)
    plain = json.dumps(data, sort_keys=True).encode()
    nonce = secrets.token_bytes(_NONCE)
    ct = _xor(plain, _stream(key, nonce, len(plain)))
    tag = hmac.new(key, nonce + ct, hashlib.sha256).digest()
    return nonce + ct + tag


def unseal(lab: str, blob: bytes) -> dict[str, Any]:
    """The inverse of :func:`seal`. RailabError when the tag does not match (the record was
    edited, or sealed for another lab or host key)."""
    key = _lab_key(lab)
    if len(blob) < _NONCE + _TAG:
        raise RailabError(f"exercise record of lab {lab} is truncated")
    nonce, ct, tag = blob[:_NONCE], blob[_NONCE:-_TAG], blob[-_TAG:]
    if not hmac.compare_digest(tag, hmac.new(key, nonce + ct, hashlib.sha256).digest()):
        raise RailabError(f"exercise record of lab {lab} does not verify (edited, or another host key): "
                          f"railab exercise reveal cannot read it; railab down {lab} removes it")
    plain = _xor(ct, _stream(key, nonce, len(ct)))
    return json.loads(plain)


def exists(lab: str) -> bool:
    """True when lab ``lab`` has an exercise record (running, or revealed and not yet down)."""
    return (st.exercise_dir(lab) / "sealed").exists()


def save(lab: str, secret: dict[str, Any], public: dict[str, Any]) -> None:
    """Write both files of ``lab``'s exercise (``public`` must name no fault)."""
    d = st.exercise_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    # readable by root only, from the first byte (write_atomic's temp file is 0600)
    write_atomic(d / "sealed", seal(lab, secret), mode=0o600)
    write_atomic(d / "public.json", json.dumps(public, indent=2, sort_keys=True), mode=0o600)


def load(lab: str) -> dict[str, Any] | None:
    """The unsealed record of ``lab``'s exercise, or None when there is none."""
    try:
        blob = (st.exercise_dir(lab) / "sealed").read_bytes()
    except FileNotFoundError:
        return None
    return unseal(lab, blob)


def load_public(lab: str) -> dict[str, Any] | None:
    """``public.json`` of ``lab``'s exercise, or None (no exercise, or unreadable)."""
    try:
        return json.loads((st.exercise_dir(lab) / "public.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def labs() -> list[str]:
    """Names of the labs that have an exercise record on this host."""
    root = st.exercise_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "public.json").exists())


def remove(lab: str) -> None:
    """Delete ``lab``'s exercise record (idempotent)."""
    shutil.rmtree(st.exercise_dir(lab), ignore_errors=True)


@contextmanager
def locked(lab: str) -> Iterator[None]:
    """Serialise changes to one lab's exercise record (flock on ``<exercise root>/<lab>/lock``)."""
    d = st.exercise_dir(lab)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    path = d / "lock"
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def running(lab: str) -> dict[str, Any] | None:
    """``public.json`` of ``lab``'s exercise while it runs (recorded and not revealed), else None."""
    pub = load_public(lab)
    return pub if pub and not pub.get("revealed") else None


def repair_tools(pub: dict[str, Any]) -> list[str]:
    """The repair tools (:data:`REPAIR_TOOLS`) open in the running exercise ``pub`` (the level's,
    minus the commands the trainer switched off)."""
    off = set(pub.get("disabled", []))
    return [t for t in REPAIR_TOOLS.get(pub.get("level"), ("exec",)) if t not in off]


def refusal(lab: str, pub: dict[str, Any]) -> str:
    """The one message every refused fault change gets while ``lab``'s exercise runs (the same for
    every command and console action, so it says nothing about the hidden faults)."""
    tools = ", ".join(_TOOL_WORDS[t] for t in repair_tools(pub)) or "none (the trainer switched them off)"
    return (f"an exercise runs on lab {lab}: nothing injects, heals or restores faults in it until the "
            f"exercise is revealed or stopped (railab exercise reveal {lab} / railab exercise stop {lab}); "
            f"the trainee's repair tools at level {pub.get('level')}: {tools}")


@contextmanager
def acting(lab: str) -> Iterator[None]:
    """The exercise of ``lab`` itself changes its faults in this block (start, reveal, stop):
    :func:`guard` lets it through."""
    token = _ACTING.set(lab)
    try:
        yield
    finally:
        _ACTING.reset(token)


def guard(lab: str, command: str) -> None:
    """The lock on fault changes: UsageError (exit 2, :func:`refusal`) when ``command`` (``fault``,
    ``drill``, ``restart``, ``swap-cables``, ...) would change lab ``lab`` while its exercise runs,
    unless it is one of the level's repair tools (:func:`repair_tools`) or the exercise's own
    action (:func:`acting`). Costs one small file read when no exercise runs."""
    if _ACTING.get() == lab:
        return
    pub = running(lab)
    if pub is None or command in repair_tools(pub):
        return
    raise UsageError(refusal(lab, pub))


def note_repair(lab: str, tool: str, node: str | None, argv: list[str] | None = None) -> None:
    """Journal a trainee's repair action (``exec`` with its command, ``restart``,
    ``swap-cables``) in ``lab``'s running exercise record: ``exercise fix`` credits only a green
    lab whose journal shows a repair. Nothing when no exercise runs."""
    if running(lab) is None:
        return
    with locked(lab):
        try:
            rec = load(lab)
        except RailabError:
            return  # a record that does not verify: exercise fix says so; exec still runs
        if rec is None or rec.get("revealed_at"):
            return
        rec.setdefault("repairs", []).append({"tool": tool, "node": node, "argv": list(argv or [])[:40],
                                              "at": time.time()})
        save(lab, rec, {**(load_public(lab) or {})})
