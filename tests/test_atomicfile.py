"""railab.topologies.atomicfile: the one whole-file write every rewritten record goes through."""

import os
import stat

import pytest

from railab.topologies.atomicfile import write_atomic


def test_text_and_bytes_land_whole_with_the_mode_asked(tmp_path):
    p = tmp_path / "state.json"
    write_atomic(p, '{"a": 1}\n')
    assert p.read_text() == '{"a": 1}\n' and stat.S_IMODE(p.stat().st_mode) == 0o644
    write_atomic(p, b"\x00secret", mode=0o600)  # replaces it, now readable by its owner only
    assert p.read_bytes() == b"\x00secret" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["state.json"]  # no temporary file left beside it


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "record"
    target.mkdir()  # rename(2) cannot put a file over a directory
    with pytest.raises(OSError):
        write_atomic(target, "x")
    assert sorted(os.listdir(tmp_path)) == ["record"] and target.is_dir()
    with pytest.raises(OSError):  # a missing directory: OSError, nothing made
        write_atomic(tmp_path / "absent" / "f", "x")
    assert sorted(os.listdir(tmp_path)) == ["record"]
