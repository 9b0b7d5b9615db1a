"""Data files read as text in the dataset's encoding (``dataset.encoding``, default utf-8).

A byte that does not decode is a UserError naming the file, the line and column, the byte and what
to do (re-save the file as UTF-8, or set the encoding it was saved in), instead of Python's
``UnicodeDecodeError`` with a byte offset.
"""

from __future__ import annotations

import codecs
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from esgexp.errors import UserError

SETTING = "dataset.encoding"


def codec(encoding: str) -> str:
    """The codec to open a file with: UTF-8 also skips a byte-order mark (files saved by Excel have one)."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def open_text(path: str | Path, encoding: str = "utf-8") -> IO[str]:
    """``path`` opened for reading as text (newlines kept as written, for the csv module)."""
    return Path(path).open(newline="", encoding=codec(encoding))


@contextmanager
def decoding(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING):
    """Inside: reading ``path``; a UnicodeDecodeError becomes the UserError of ``decode_error``."""
    try:
        yield
    except UnicodeDecodeError:
        raise decode_error(path, encoding, setting) from None


def decode_error(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING) -> UserError:
    """The UserError for the first byte of ``path`` that ``encoding`` cannot decode."""
    return UserError(f"{path} {decoding_problem(path, encoding, setting)}")


def decoding_problem(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING) -> str:
    """Where the first byte of ``path`` that ``encoding`` cannot decode is (found line by line), and what
    to do: ``line 3, column 13: byte 0xe9 is not valid utf-8 (invalid continuation byte); re-save ...``."""
    decoder = codecs.getincrementaldecoder(codec(encoding))()
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                decoder.decode(line)
            except UnicodeDecodeError as error:
                start = max(error.start, 0)
                column = len(line[:start].decode(codec(encoding), errors="replace")) + 1
                bad = " ".join(f"0x{byte:02x}" for byte in line[start : max(error.end, start + 1)])
                return f"line {number}, column {column}: byte {bad} is not valid {encoding} ({error.reason}); {_todo(setting)}"
    return f"not valid {encoding} text; {_todo(setting)}"


def _todo(setting: str | None) -> str:
    todo = "re-save the file as UTF-8"
    if setting:
        todo += f", or give the encoding it was saved in with {setting}=... (e.g. {setting}=cp1252)"
    return todo


class Utf8Reader:
    """A binary reader giving the UTF-8 bytes of a text handle (for ijson, which parses UTF-8 bytes)."""

    def __init__(self, handle: IO[str]):
        self.handle = handle

    def read(self, size: int = -1) -> bytes:
        return self.handle.read(size).encode("utf-8")


def csv_records(handle: IO[str], path: str | Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the data records of the CSV ``path`` open in ``handle``, each with the file line it
    starts on (a quoted cell may span lines; blank lines are skipped). A record shorter than the header
    lacks the missing cells; a cell of any size is read. A line the csv module cannot parse (a NUL byte, a
    quote left open at the end) is a UserError naming it."""
    import csv

    csv.field_size_limit(2**31 - 1)
    reader = csv.reader(handle)
    records, end = [], 0
    try:
        header = next(reader, [])
        end = reader.line_num
        for cells in reader:
            start, end = end + 1, reader.line_num
            if cells:
                records.append((start, dict(zip(header, cells))))
    except csv.Error as error:
        raise UserError(f"{path} line {end + 1}: not readable as CSV ({error})") from None
    return header, records


def valid_unicode(value: str, field: str) -> str:
    """``value``, or a ValueError naming ``field`` when it holds a lone surrogate (valid in JSON as
    ``\\ud800``, but not text that can be written anywhere)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"field '{field}': not valid Unicode (lone surrogate U+{ord(value[error.start]):04X} "
            f"at character {error.start + 1})"
        ) from None
    return value
