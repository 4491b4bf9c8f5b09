"""Memory settings of the FRR daemons the netns runtime starts (issue 47: memory per router and
per BGP session end).

Where bgpd's memory went (Debian FRR 8.4.4, the full 1024-GPU fabric, measured with smaps and
``show memory``; docs/runtime.md "Issue 47"): each BGP peer holds

* ``struct peer``, 741,464 bytes, most of it ``ibuf_scratch`` (10 x 64 KiB, the socket read
  buffer), allocated with ``calloc``;
* ``ibuf_work``, a ring buffer of the same 655,350 bytes, which ``bgp_stop`` and
  ``bgp_fsm_change_status`` clear with ``ringbuf_wipe`` (a ``memset`` of all of it): nearly every
  session passes through a stop while the fabric starts (a refused connect, zebra's second
  interface answer), so every peer's ring buffer ends up resident although a converged session
  only ever uses a few KiB of it;
* a spine accepts each session on a temporary peer (another ``struct peer``) and frees it; with
  glibc's dynamic mmap threshold the first free raises the threshold, later peers come from the
  heap, whose ``calloc`` clears (and so makes resident) all 724 KiB, and the freed ones stay in
  the heap.

Two settings, both in the environment of every daemon (:func:`daemon_env`), none in FRR's config:

* ``MALLOC_MMAP_THRESHOLD_=131072`` (glibc, mallopt(3) ``M_MMAP_THRESHOLD``; a fixed value turns
  the dynamic threshold off): every block of 128 KiB or more is its own mapping, which the kernel
  hands out zeroed and backs only where written, and which goes back to the kernel when freed;
* ``LD_PRELOAD`` of a ``ringbuf_wipe`` with FRR's semantics (:data:`WIPE_SOURCE`: the buffer reads
  as zeros, empty, start = end = 0) that gives the whole pages of the buffer back with
  ``madvise(MADV_DONTNEED)`` (a private anonymous page then reads as zeros) instead of writing
  zeros into them; and a ``ringbuf_get`` (FRR's own, then) that moves an emptied buffer's start
  and end back to 0, where no ringbuf function can tell the difference: FRR never does, so each
  session's reads walk through the whole 640 KiB, a keepalive (19 bytes every 3 s) at a time,
  and would make it all resident again within about a day; and a ``memset`` that clears a range of
  256 KiB or more to zero the same way (any other ``memset`` is glibc's): bgpd's ``peer_free``
  clears the whole ``struct peer`` just before freeing it, which faulted in and zeroed ~180 pages
  never used (``ibuf_scratch``) for every temporary peer a spine accepts a session on. Neither
  reads the dropped pages back (an earlier ``ringbuf_wipe`` read every page to check it was
  zero, faulting each one in): ``madvise(MADV_FREE)``, which the kernel accepts on private
  anonymous memory only, tells that ``MADV_DONTNEED`` left zeros, and where either is refused
  (a shared mapping) the range is written with zeros instead. At 4096 GPUs that took bgpd's
  page faults from ~5.0 to ~0.45 million and its CPU by a fifth (docs/runtime.md "Issue 47, the
  4,096 in a minute"). It is built once with the system's
  C compiler into :func:`railab.testbed.cbuild.cache_dir` ``/frr-lean/`` (beside the load
  engine's fast path) and used only with an FRR whose ``struct ringbuf`` layout was checked
  (:data:`SUPPORTED_FRR`, the version lab configs name).

``RAILAB_FRR_LEAN=0`` starts the daemons as before (no setting; ``scripts/bench_up.py --lean-ab``
runs both side by side); any value but ``0`` or ``1`` is refused. Without a C compiler or with
another FRR, only the allocator setting applies and the preflight's estimate uses the old figures
(:func:`wipe_library` is None).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from railab.errors import UsageError
from railab.testbed import cbuild
from railab.testbed.runtime.netns.constants import FRR_BIN

#: ``0``: the daemons start without the memory settings (the behaviour before issue 47).
LEAN_ENV = "RAILAB_FRR_LEAN"
#: glibc allocator settings for every FRR daemon (module docstring).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
#: FRR versions (``major.minor``) whose ``struct ringbuf`` (lib/ringbuf.h) is the one
#: :data:`WIPE_SOURCE` declares: size_t size at 0, ssize_t start 8, ssize_t end 16, bool empty
#: 24, uint8_t *data 32 (read from Debian 8.4.4's libfrr: ``ringbuf_wipe`` memsets ``0x20(%rdi)``
#: for ``(%rdi)`` bytes, ``ringbuf_reset`` stores 16 zero bytes at 8 and 1 at 24).
SUPPORTED_FRR = ("8.4",)
#: FRR's ``ringbuf_wipe`` (lib/ringbuf.c) with the same result, its whole pages given back; FRR's
#: ``ringbuf_get`` that starts an emptied buffer over at its first byte; ``memset`` that clears
#: a zeroed range of 256 KiB or more the same way (bgpd's ``peer_free``).
WIPE_SOURCE = r"""// railab (testbed/runtime/netns/frrmem.py): FRR's ringbuf_wipe without touching the pages,
// a ringbuf_get that starts an emptied ring buffer over at its first byte, and a memset that
// clears a large zeroed range by giving its whole pages back
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef MADV_FREE
#define MADV_FREE 8
#endif

struct ringbuf {
	size_t size;
	ssize_t start;
	ssize_t end;
	bool empty;
	uint8_t *data;
};

// glibc's memset, reached through __memset_chk (exported; it jumps to memset inside libc, not
// through our memset) and a volatile pointer, which the compiler cannot fold back into a memset call
extern void *__memset_chk(void *s, int c, size_t n, size_t destlen);
static void *(*volatile libc_memset_chk)(void *, int, size_t, size_t) = __memset_chk;

static void libc_memset(void *s, int c, size_t n)
{
	if (n)
		libc_memset_chk(s, c, n, (size_t)-1);
}

// zero [a, e): the whole pages in it are dropped (MADV_DONTNEED: a private anonymous page, as
// malloc's, then reads back as zeros without being resident), the partial pages at both ends
// written. MADV_FREE, which the kernel accepts on private anonymous memory only, tells that
// the dropped pages were such memory; where it (or MADV_DONTNEED) refuses, the range is written.
// Nothing is read, so no page is faulted in.
static void zero_range(uintptr_t a, uintptr_t e)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t pa = (a + pg - 1) & ~(pg - 1), pe = e & ~(pg - 1);

	if (pe > pa && madvise((void *)pa, pe - pa, MADV_DONTNEED) == 0
		&& madvise((void *)pa, pe - pa, MADV_FREE) == 0) {
		libc_memset((void *)a, 0, pa - a);
		libc_memset((void *)pe, 0, e - pe);
	} else {
		libc_memset((void *)a, 0, e - a);
	}
}

void ringbuf_wipe(struct ringbuf *buf)
{
	zero_range((uintptr_t)buf->data, (uintptr_t)buf->data + buf->size);
	buf->start = buf->end = 0;
	buf->empty = true;
}

// bgpd's peer_free clears the whole struct peer (741,464 bytes in FRR 8.4, most of it buffers
// never touched) just before freeing it: writing it faults in and zeroes ~180 pages per peer
#define RAILAB_ZERO_PAGES_FROM (256 * 1024)

void *memset(void *s, int c, size_t n)
{
	if (c == 0 && n >= RAILAB_ZERO_PAGES_FROM)
		zero_range((uintptr_t)s, (uintptr_t)s + n);
	else
		libc_memset(s, c, n);
	return s;
}

static size_t (*frr_ringbuf_get)(struct ringbuf *, void *, size_t);

__attribute__((constructor)) static void railab_init(void)
{
	frr_ringbuf_get = (size_t(*)(struct ringbuf *, void *, size_t))dlsym(RTLD_NEXT, "ringbuf_get");
}

size_t ringbuf_get(struct ringbuf *buf, void *data, size_t size)
{
	size_t n;

	if (!frr_ringbuf_get)
		railab_init();
	if (!frr_ringbuf_get)
		abort(); /* no libfrr: nothing could have called this */
	n = frr_ringbuf_get(buf, data, size);
	// empty: where start and end stand is invisible to every ringbuf function, so the next
	// bytes go to the start again and the reads do not walk through (and make resident)
	// the whole buffer at one keepalive every few seconds
	if (buf->empty)
		buf->start = buf->end = 0;
	return n;
}
"""


def lean_wanted() -> bool:
    """Whether the daemons get the memory settings: ``$RAILAB_FRR_LEAN`` unset, empty or ``1``
    yes, ``0`` no; UsageError for any other value (a misspelt setting must not silently mean on)."""
    value = os.environ.get(LEAN_ENV, "").strip() or "1"
    if value not in ("0", "1"):
        raise UsageError(f"{LEAN_ENV}={value!r}: set it to 1 (FRR daemons with the memory settings, the "
                         f"default) or 0 (without), or unset it")
    return value == "1"


def _frr_identity() -> bytes:
    """bgpd's path, inode, size, mtime and ctime: a reinstall of FRR changes them."""
    f = FRR_BIN / "bgpd"
    try:
        i = os.stat(f)
    except OSError:
        return f"{f}\0-".encode()
    return f"{os.path.realpath(f)}\0{i.st_ino}\0{i.st_size}\0{i.st_mtime_ns}\0{i.st_ctime_ns}".encode()


def frr_version() -> str | None:
    """The installed FRR's version (``bgpd --version``: ``bgpd version 8.4.4``), or None."""
    try:
        r = subprocess.run([str(FRR_BIN / "bgpd"), "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"version\s+(\d+\.\d+(?:\.\d+)?)", r.stdout + r.stderr)
    return m.group(1) if m else None


def wipe_library() -> Path | None:
    """The ``ringbuf_wipe`` library for the installed FRR, built on first use
    (:func:`railab.testbed.cbuild.build_library`: the SHA-256 of :data:`WIPE_SOURCE` and FRR's
    identity in its name, under ``frr-lean/``). None when FRR's version is not in
    :data:`SUPPORTED_FRR`, there is no C compiler or compiling fails."""
    key = _frr_identity()
    out = cbuild.library_path("ringbuf-wipe", WIPE_SOURCE, key=key, subdir="frr-lean")
    if out.exists():
        return out
    version = frr_version()
    if version is None or not version.startswith(tuple(v + "." for v in SUPPORTED_FRR)):
        return None
    try:
        return cbuild.build_library("ringbuf-wipe", WIPE_SOURCE, key=key, subdir="frr-lean")
    except cbuild.BuildError:
        return None


def daemon_env(base: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment to start an FRR daemon with: ``base`` (default ``os.environ``) plus
    :data:`MALLOC_ENV` and, where :func:`wipe_library` builds, ``LD_PRELOAD`` of it (ahead of
    any ``LD_PRELOAD`` already set). None (inherit ours unchanged) with ``RAILAB_FRR_LEAN=0``."""
    if not lean_wanted():
        return None
    env = dict(os.environ if base is None else base)
    env.update(MALLOC_ENV)
    lib = wipe_library()
    if lib is not None:
        env["LD_PRELOAD"] = " ".join(x for x in (str(lib), env.get("LD_PRELOAD", "")) if x)
    return env


def lean_in_effect() -> bool:
    """Whether daemons started now get both settings (what the preflight's estimate assumes)."""
    return lean_wanted() and wipe_library() is not None
