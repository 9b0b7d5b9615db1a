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


def test_one_json_lines_reader_numbers_lines_and_names_a_bad_one(tmp_path):
    import pytest

    from esgexp.core.outputs import json_lines
    from esgexp.errors import UserError

    lines = ['{"a": 1}', "", "[2]", '{"cut": ']
    with pytest.raises(UserError, match=r"^f.jsonl line 4: not valid JSON \(Expecting value\)$"):
        list(json_lines(lines, "f.jsonl"))
    bad = []
    assert list(json_lines(lines, "f.jsonl", lambda number, line, error: bad.append((number, line)))) == [
        (1, {"a": 1}),
        (3, [2]),
    ]
    assert bad == [(4, '{"cut": ')]
