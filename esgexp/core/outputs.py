"""Run-folder files: atomic JSON/YAML writes and an append-only, resumable predictions.jsonl.

A full disk (or quota) never leaves half a file or half a record: the write is undone and
:class:`NoSpace` (a user error: one ``error:`` line, exit 2) names the full file system, what is kept
and that ``resume=true`` continues.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from esgexp.errors import RESUME, UserError

log = logging.getLogger(__name__)

FULL = (errno.ENOSPC, errno.EDQUOT)


class NoSpace(UserError):
    """No space left on the file system holding ``path``; ``kept`` says what is safe on disk; ``needed``: the
    bytes the write needed (named with the space free there, so freeing that much lets it succeed)."""

    def __init__(self, path: Path, kept: str, needed: int | None = None):
        self.path, self.kept, self.needed = Path(path), kept, needed
        where = mount_point(self.path)
        free = "some space"
        if needed:
            try:
                left = shutil.disk_usage(where).free
            except OSError:
                left = 0
            kept += f"; this write needs {human(needed)} and {human(left)} is free there"
            free = f"at least {human(max(needed - left, 0) + (1 << 20))}"  # a MiB on top: logs, the cache
        super().__init__(
            f"no space left on the file system at {where} (writing {self.path}): {kept}. Free {free} there, then "
            f"{RESUME}"
        )


def no_space(path: Path, kept: str, needed: int | None = None) -> NoSpace:
    """The NoSpace error to raise for ``path`` (a write of ``needed`` bytes). From now on, log lines the run's
    log file on the full disk cannot take are dropped, not printed with a traceback each."""
    logging.raiseExceptions = False
    return NoSpace(path, kept, needed)


def human(size: int | None) -> str:
    """``size`` bytes as a reader says it (``3.4 MiB``); ``size ?`` for None."""
    if size is None:
        return "size ?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return ""


def is_full(error: BaseException) -> bool:
    """Whether ``error`` is a file system refusing a write for want of space (ENOSPC, EDQUOT)."""
    return isinstance(error, OSError) and error.errno in FULL


def mount_point(path: Path) -> Path:
    """The mount point of the file system that holds ``path`` (or would hold it)."""
    folder = Path(os.path.abspath(path))
    while not os.path.ismount(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def file_in_the_way(path: Path) -> Path | None:
    """The file (not a folder) that stands at ``path`` or at one of its parents, if any."""
    for place in (Path(os.path.abspath(path)), *Path(os.path.abspath(path)).parents):
        if place.exists():
            return None if place.is_dir() else place
    return None


def unwritable(path: Path, error: OSError, fix: str) -> UserError:
    """The one-line mistake for ``path`` that cannot be created or written (``error``), with ``fix``:
    a file in the way, a read-only file system, or the system's reason."""
    blocker = file_in_the_way(path)
    if blocker is not None:
        why = f"{blocker} is a file, not a folder"
    elif error.errno == errno.EROFS:
        why = f"the file system at {mount_point(path)} is read-only"
    else:
        why = f"{error.strerror} ({error.filename or path})"
    return UserError(f"cannot write {path}: {why}; {fix}")


def make_folder(folder: Path, fix: str) -> Path:
    """Create ``folder`` (and its parents) and check that a file can be made in it (a read-only file
    system, or permissions for a user other than root); UserError naming it and ``fix`` when not."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        if is_full(error):
            raise no_space(folder, "nothing was written there") from error
        raise unwritable(folder, error, fix) from error
    return folder


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8 when a str) to ``path`` through a temporary file and a rename: never half a file
    (on a full disk :class:`NoSpace`, ``path`` as it was)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600; a written file reads like any other
        os.replace(temp, path)
    except BaseException as error:
        Path(temp).unlink(missing_ok=True)
        if is_full(error):
            kept = f"{path.name} is as it was" if path.exists() else f"{path.name} was not written"
            raise no_space(path, f"{kept}, and every other file in {path.parent} is kept", len(data)) from error
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


def json_lines(lines: Iterable[str], where: object, bad_line: Callable | None = None) -> Iterator[tuple[int, object]]:
    """The value of each non-blank line of a JSON Lines text (``lines``: an open file, a list of lines) with its
    1-based number. A line that is not JSON goes to ``bad_line(number, line, error)`` and is passed over; without
    ``bad_line`` it is a UserError: ``WHERE line N: not valid JSON (why)``."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            if bad_line is None:
                raise UserError(f"{where} line {number}: not valid JSON ({error.msg})") from error
            bad_line(number, line, error)
            continue
        yield number, value


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

        def cut_short(number: int, line: str, error: ValueError) -> None:
            log.warning("%s line %d is incomplete (interrupted write); it will be redone", self.path, number)

        with self.path.open(encoding="utf-8") as handle:
            return [record for _, record in json_lines(handle, self.path, cut_short)]

    def append(self, records: list[dict]) -> None:
        """Add ``records`` (one line each) and sync them: all of them or, when the write fails (a full
        disk: :class:`NoSpace`), none; the file is cut back to its size before."""
        data = memoryview("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8"))
        needed = len(data)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            size = os.fstat(fd).st_size
            try:
                while data:  # a write to a filling disk may take only part of the bytes, then fail
                    data = data[os.write(fd, data) :]
                os.fsync(fd)  # a file system that allocates late reports a full disk here
            except BaseException as error:
                os.ftruncate(fd, size)
                if is_full(error):
                    kept = f"the {self.count()} predictions in it are complete and kept"
                    raise no_space(self.path, kept, needed) from error
                raise
        finally:
            os.close(fd)

    def count(self) -> int:
        """How many lines the file holds."""
        with self.path.open("rb") as handle:
            return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))

    def rewrite(self, records: list[dict]) -> None:
        write_atomic(self.path, "".join(json.dumps(no_nan(r), ensure_ascii=False) + "\n" for r in records))
