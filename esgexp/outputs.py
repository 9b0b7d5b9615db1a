"""Run-folder files: atomic JSON/YAML writes and an append-only, resumable predictions.jsonl."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600; a written file reads like any other
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def no_nan(data):
    """``data`` with every NaN float made None (JSON has no NaN; an undefined metric reads as null)."""
    if isinstance(data, float) and math.isnan(data):
        return None
    if isinstance(data, dict):
        return {key: no_nan(value) for key, value in data.items()}
    if isinstance(data, list):
        return [no_nan(value) for value in data]
    return data


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(no_nan(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n")


class PredictionLog:
    """predictions.jsonl: one JSON record per item, appended and synced batch by batch."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> list[dict]:
        """All complete records; a line cut short by an interrupted write is dropped with a warning."""
        if not self.path.is_file():
            return []
        records = []
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    log.warning("%s line %d is incomplete (interrupted write); it will be redone", self.path, number)
        return records

    def append(self, records: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def rewrite(self, records: list[dict]) -> None:
        write_atomic(self.path, "".join(json.dumps(no_nan(r), ensure_ascii=False) + "\n" for r in records))
