"""The small C libraries railab compiles on first use: built with the system's C compiler
(``$CC``, ``cc`` or ``gcc``; ``scripts/bootstrap.sh`` installs gcc), cached under
:func:`cache_dir` by the SHA-256 of their source (and of anything else they were built for), so
an edit or a new target builds a new file and an unchanged one is never built twice.

Two use it: the load engine's fast path (``traffic/fastpath.c``,
:mod:`railab.traffic.fastpath`) and the FRR daemons' ``ringbuf_wipe``
(:mod:`railab.testbed.runtime.netns.frrmem`). A library is written beside its final name and
renamed, so a concurrent build never loads (or preloads) half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from railab.errors import RailabError

__all__ = ["BuildError", "build_library", "cache_dir", "compiler", "library_path"]


class BuildError(RailabError):
    """No C compiler, or compiling failed (the message has the compiler's first lines)."""


def cache_dir() -> Path:
    """Where built libraries go: ``$RAILAB_CACHE``, else ``/var/cache/railab`` for root, else
    ``$XDG_CACHE_HOME/railab`` (``~/.cache/railab``)."""
    if os.environ.get("RAILAB_CACHE"):
        return Path(os.environ["RAILAB_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/railab")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "railab"


def compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc`` or ``gcc`` on PATH; None without one."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _text(source: Path | str) -> bytes:
    return source.read_bytes() if isinstance(source, Path) else source.encode()


def library_path(name: str, source: Path | str, *, key: bytes = b"", subdir: str = "") -> Path:
    """``cache_dir()/subdir/<name>-<16 hex of SHA-256(source + key)>.so``: the library of this
    source (a file, or the C text itself) built for ``key`` (e.g. the binary it is preloaded
    into)."""
    digest = hashlib.sha256(_text(source) + key).hexdigest()[:16]
    return cache_dir() / subdir / f"{name}-{digest}.so"


def build_library(name: str, source: Path | str, *, flags: tuple[str, ...] = ("-O2",),
                  key: bytes = b"", subdir: str = "", force: bool = False) -> Path:
    """Compile ``source`` (a ``.c`` file, or the C text) as a shared library (``cc <flags>
    -shared -fPIC``) unless :func:`library_path` exists already (``force``: again); returns
    its path. Raises BuildError without a C compiler or when compiling fails or times out
    (120 s), and leaves no temporary file behind."""
    out = library_path(name, source, key=key, subdir=subdir)
    if out.exists() and not force:
        return out
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler: apt-get install gcc (scripts/bootstrap.sh installs it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=out.parent)
    os.close(fd)
    src = source if isinstance(source, Path) else Path(tmp).with_suffix(".c")
    try:
        if not isinstance(source, Path):
            src.write_text(source)
        try:
            r = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", tmp, str(src)],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BuildError(f"{cc}: {e}") from None
        if r.returncode != 0:
            first = "\n".join((r.stderr or r.stdout).strip().splitlines()[:5])
            raise BuildError(f"{cc}: {first}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        for f in (tmp, src if not isinstance(source, Path) else None):
            if f is not None and os.path.exists(f):
                os.unlink(f)
    return out
