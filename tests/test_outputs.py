"""Run-folder file writing."""

import os
import stat

from esgexp.core.outputs import write_atomic


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
