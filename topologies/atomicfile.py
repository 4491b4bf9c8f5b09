"""Whole-file writes: a reader sees a file's old content or its new content, never a part.

One helper for every record railab rewrites while something may read it (the lab's state, the
switch agents' state files, the exercise record, a multi-host partition's files): the data goes
into a temporary file in the same directory (created mode 0600 by :func:`tempfile.mkstemp`, so
a secret is never readable by others, even for a moment), which is given its final mode and then
renamed over the target (:func:`os.replace`, atomic within one file system, POSIX rename(2)).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` whole, with permissions ``mode``.

    The temporary file is ``.<name>.<random>`` beside ``path``; it is removed if the write
    fails. The directory must exist. Raises OSError (the directory is missing or not writable,
    the disk is full)."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["write_atomic"]
