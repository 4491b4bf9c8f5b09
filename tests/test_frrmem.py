"""The FRR daemons' memory settings (issue 47, railab.testbed.runtime.netns.frrmem): the switch,
the environment the daemons get, and the preloaded ``ringbuf_wipe`` against the installed libfrr's
own ring buffer (layout and result)."""

from __future__ import annotations

import ctypes
import mmap
import shutil
import subprocess
from pathlib import Path

import pytest

from railab.errors import UsageError
from railab.testbed.runtime.netns import frrmem

LIBFRR = Path("/usr/lib/x86_64-linux-gnu/frr/libfrr.so.0")


def test_lean_switch(monkeypatch):
    monkeypatch.delenv(frrmem.LEAN_ENV, raising=False)
    assert frrmem.lean_wanted()
    for value, want in (("1", True), ("", True), (" 0 ", False), ("0", False)):
        monkeypatch.setenv(frrmem.LEAN_ENV, value)
        assert frrmem.lean_wanted() is want
    monkeypatch.setenv(frrmem.LEAN_ENV, "yes")
    with pytest.raises(UsageError, match="RAILAB_FRR_LEAN='yes'"):
        frrmem.lean_wanted()
    with pytest.raises(UsageError):
        frrmem.daemon_env()


def test_daemon_env(monkeypatch, tmp_path):
    monkeypatch.setenv(frrmem.LEAN_ENV, "0")
    assert frrmem.daemon_env() is None  # old behaviour: the daemons inherit railab's environment
    monkeypatch.setenv(frrmem.LEAN_ENV, "1")
    lib = tmp_path / "wipe.so"
    monkeypatch.setattr(frrmem, "wipe_library", lambda: lib)
    env = frrmem.daemon_env({"PATH": "/bin", "LD_PRELOAD": "/x.so"})
    assert env == {"PATH": "/bin", "MALLOC_MMAP_THRESHOLD_": "131072", "LD_PRELOAD": f"{lib} /x.so"}
    monkeypatch.setattr(frrmem, "wipe_library", lambda: None)  # no compiler / another FRR
    assert frrmem.daemon_env({}) == {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert not frrmem.lean_in_effect()


PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct ringbuf;
struct ringbuf *ringbuf_new(size_t size);
size_t ringbuf_put(struct ringbuf *buf, const void *data, size_t size);
size_t ringbuf_peek(struct ringbuf *buf, size_t offset, void *data, size_t size);
size_t ringbuf_get(struct ringbuf *buf, void *data, size_t size);
size_t ringbuf_remain(struct ringbuf *buf);
size_t ringbuf_space(struct ringbuf *buf);
void ringbuf_wipe(struct ringbuf *buf);
void ringbuf_del(struct ringbuf *buf);

static long rss_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/smaps_rollup", "r"); /* page tables walked: exact, VmRSS is not */
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Rss:", 4))
			kib = atol(line + 4);
	if (f)
		fclose(f);
	return kib;
}

int main(void)
{
	static unsigned char src[655350];
	size_t size = sizeof(src), i, nonzero = 0;
	Dl_info info;
	char out[4] = "";
	for (i = 0; i < size; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	struct ringbuf *b = ringbuf_new(size); /* bgpd's ibuf_work: 65535 x 10 bytes */
	ringbuf_put(b, src, size - 7);
	long before = rss_kib();
	ringbuf_wipe(b);
	long after = rss_kib();
	size_t remain = ringbuf_remain(b), space = ringbuf_space(b);
	unsigned char *data = *(unsigned char **)((char *)b + 32);
	for (i = 0; i < size; i++)
		nonzero += data[i] != 0;
	ringbuf_put(b, "abc", 3);
	ringbuf_peek(b, 0, out, 3);
	size_t remain3 = ringbuf_remain(b);
	char got[4] = "", at[4] = "";
	ringbuf_get(b, got, 3); /* empty again: ours starts the next bytes at data[0] */
	ringbuf_put(b, "xyz", 3);
	memcpy(at, data, 3);
	dladdr((void *)ringbuf_wipe, &info);
	printf("%s %zu %zu %zu %s %zu %ld %s %s %zu\n", info.dli_fname, remain, space, nonzero, out,
		remain3, before - after, got, at, ringbuf_remain(b));
	ringbuf_del(b);
	return 0;
}
"""


@pytest.mark.skipif(not LIBFRR.exists() or not (shutil.which("cc") or shutil.which("gcc")),
                    reason="needs Debian's frr (libfrr) and a C compiler")
def test_wipe_preloaded_over_libfrr(monkeypatch, tmp_path):
    """The mechanism the daemons use: a program linked with the installed libfrr, the library
    in LD_PRELOAD. Its ``ringbuf_wipe`` is ours; libfrr then sees the ring buffer empty, all
    space free, every byte zero, and it still works; most of the 640 KiB written are no longer
    resident; once emptied by a read, the next bytes go to its first byte."""
    monkeypatch.setenv("RAILAB_CACHE", str(tmp_path))
    if not (frrmem.frr_version() or "").startswith(tuple(v + "." for v in frrmem.SUPPORTED_FRR)):
        pytest.skip(f"FRR {frrmem.frr_version()} is not one whose ring buffer layout was checked")
    lib = frrmem.wipe_library()
    assert lib is not None and lib.parent == tmp_path / "frr-lean"
    assert frrmem.wipe_library() == lib  # built once
    (tmp_path / "probe.c").write_text(PROBE)
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O1", "-o", str(tmp_path / "probe"), str(tmp_path / "probe.c"), f"-L{LIBFRR.parent}",
                    "-l:libfrr.so.0", f"-Wl,-rpath,{LIBFRR.parent}", "-ldl"], check=True, timeout=60)
    r = subprocess.run([str(tmp_path / "probe")], env={"LD_PRELOAD": str(lib)}, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    where, remain, space, nonzero, out, remain3, freed_kib, got, at, left = r.stdout.split()
    same = [remain, space, nonzero, out, remain3, got]
    assert where == str(lib)
    assert same == ["0", "655350", "0", "abc", "3", "abc"] and left == "3"
    assert int(freed_kib) >= 400  # of the 640 KiB written (smaps_rollup: 440-568 KiB measured)
    assert at == "xyz"  # emptied, then written again from the first byte
    # the installed libfrr's own functions: same results, nothing freed, the next bytes after the
    # last (what the daemons did before)
    r = subprocess.run([str(tmp_path / "probe")], env={}, capture_output=True, text=True, timeout=30)
    where, remain, space, nonzero, out, remain3, freed_kib, got, at, left = r.stdout.split()
    same = [remain, space, nonzero, out, remain3, got]
    assert "libfrr" in where and same == ["0", "655350", "0", "abc", "3", "abc"] and left == "3"
    assert int(freed_kib) < 100 and at == "abc"


def test_wipe_residency(monkeypatch, tmp_path):
    monkeypatch.setenv("RAILAB_CACHE", str(tmp_path))
    lib = frrmem.wipe_library()
    if lib is None:
        pytest.skip("no C compiler or an FRR whose ring buffer layout was not checked")
    ours = ctypes.CDLL(str(lib))
    # residency: a written private anonymous mapping (as malloc's), wiped, keeps only its partial
    # first and last pages (smaps Rss of that mapping; the zero page a read maps is in no RSS);
    # a shared one, which madvise does not clear, is zeroed all the same
    page = mmap.PAGESIZE

    class Ring(ctypes.Structure):
        _fields_ = [("size", ctypes.c_size_t), ("start", ctypes.c_ssize_t), ("end", ctypes.c_ssize_t),
                    ("empty", ctypes.c_bool), ("data", ctypes.c_void_p)]

    for flags, rss_kib in ((mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, 5 * page // 1024),
                           (mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, None)):
        m = mmap.mmap(-1, 64 * page, flags=flags)
        cbuf = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(cbuf)
        m[:] = b"\xab" * (64 * page)
        ring = Ring(60 * page + 100, 5, 9, False, base + 100)
        ours.ringbuf_wipe(ctypes.byref(ring))
        assert (ring.start, ring.end, ring.empty) == (0, 0, True)
        assert m[:100] == b"\xab" * 100
        assert m[100:60 * page + 300] == b"\0" * (60 * page + 100) + b"\xab" * 100
        if rss_kib is not None:
            assert _mapping_rss_kib(base) == rss_kib  # pages 0, 60, 61-63
        del cbuf
        m.close()


def _mapping_rss_kib(start: int) -> int:
    """Rss (KiB) of this process's mapping that starts at ``start`` (/proc/self/smaps)."""
    found = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[0].isupper() or line.startswith("VmFlags"):
                if "-" in line.split()[0] and not line.startswith("VmFlags"):
                    found = int(line.split("-")[0], 16) == start
                continue
            if found and line.startswith("Rss:"):
                return int(line.split()[1])
    raise AssertionError(f"no mapping at {start:#x}")


def test_memset_gives_large_zeroed_ranges_back(monkeypatch, tmp_path):
    """The preloaded ``memset`` (bgpd's ``peer_free`` clears a 724 KiB ``struct peer`` before freeing
    it): a zero fill of 256 KiB or more reads back as zeros with its whole pages dropped, not
    written (private anonymous memory, as malloc's), and zeroed all the same where the kernel does
    not drop pages to zeros (a shared mapping); smaller or non-zero fills are glibc's."""
    monkeypatch.setenv("RAILAB_CACHE", str(tmp_path))
    lib = frrmem.wipe_library()
    if lib is None:
        pytest.skip("no C compiler or an FRR whose ring buffer layout was not checked")
    ours = ctypes.CDLL(str(lib))
    ours.memset.restype = ctypes.c_void_p
    ours.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    page = mmap.PAGESIZE
    n = 200 * page
    for flags, private in ((mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, True),
                           (mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, False)):
        m = mmap.mmap(-1, n, flags=flags)
        cbuf = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(cbuf)
        m[:] = b"\xab" * n
        before = _mapping_rss_kib(base)  # (the kernel may have merged it with a neighbour)
        # from the middle of page 0 to the middle of page 199: pages 1-198 dropped
        assert ours.memset(base + 100, 0, n - 200) == base + 100
        dropped = before - _mapping_rss_kib(base)
        assert m[:100] == b"\xab" * 100 and m[n - 100:] == b"\xab" * 100
        assert m[100:n - 100] == b"\0" * (n - 200)
        if private:  # pages 1-198 no longer resident
            assert dropped == 198 * page // 1024
        ours.memset(base, 7, n)  # not a zero fill: written
        assert m[:] == b"\x07" * n
        ours.memset(base + 1, 0, 3 * page)  # below 256 KiB: written
        assert m[:2] == b"\x07\0" and m[1:3 * page + 1] == b"\0" * (3 * page) and m[3 * page + 1] == 7
        del cbuf
        m.close()
