"""Data files read as text in the dataset's encoding (``dataset.encoding``, default utf-8).

A byte that does not decode is a UserError naming the file, the line and column, the byte and what
to do (re-save the file as UTF-8, or set the encoding it was saved in), instead of Python's
``UnicodeDecodeError`` with a byte offset. A CSV record whose fields do not line up with the header
(``record_problem``) is skipped and reported with its lines, never read with its columns shifted.

A path that is not what a setting takes says what it is instead (``existing_file``, ``existing_folder``):
nothing there (and where the path stops existing), a folder where a file is expected, a file where a
folder is, a ``~`` left unexpanded by a config file. A gzip, zip (xlsx, docx), PDF, old Excel or Parquet
file opened as text is named as such, with what to do, instead of a byte that does not decode.
"""

from __future__ import annotations

import codecs
import difflib
import logging
import re
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from esgexp.errors import UserError

log = logging.getLogger(__name__)

SETTING = "dataset.encoding"


def codec(encoding: str) -> str:
    """The codec to open a file with: UTF-8 also skips a byte-order mark (files saved by Excel have one)."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def open_text(path: str | Path, encoding: str = "utf-8") -> IO[str]:
    """``path`` opened for reading as text (newlines kept as written, for the csv module); a file whose
    first bytes say it is not text is a UserError (``not_text``)."""
    _refuse_binary(path)
    return Path(path).open(newline="", encoding=codec(encoding))


def open_bytes(path: str | Path) -> IO[bytes]:
    """``path`` (a UTF-8 text file, parsed as bytes) opened for reading, after the same check as ``open_text``."""
    _refuse_binary(path)
    return Path(path).open("rb")


# The first bytes of files often given where a text file goes: what they are and what to do.
MAGIC = {
    b"\x1f\x8b": ("a gzip archive", "unpack it first (gunzip -k {path}) and give the file inside"),
    b"%PDF": (
        "a PDF",
        "give the text file (CSV, JSON or JSONL); PDFs go into a corpus: esgexp-ingest corpus.pdf_dir=DIR",
    ),
    b"\xd0\xcf\x11\xe0": ("an old Excel or Word file (.xls, .doc)", "save it as CSV UTF-8 and give that file"),
    b"PAR1": ("a Parquet file", "convert it to CSV or JSONL (pandas: read_parquet, then to_csv or to_json)"),
    b"PK\x03\x04": ("a zip archive", "unzip it and give the file inside"),
}
# A zip archive by its suffix.
ZIP_KINDS = {
    ".xlsx": ("an Excel workbook (xlsx)", "save the sheet as CSV UTF-8 and give that file"),
    ".docx": ("a Word document (docx)", "give the text file (CSV, JSON or JSONL)"),
}


def not_text(path: str | Path) -> str | None:
    """What ``path`` is when its first bytes say it is not text, and what to do (``a gzip archive, not a
    text file: unpack it first ...``); None for anything else."""
    with Path(path).open("rb") as handle:
        head = handle.read(4096)
    magic = next((m for m in MAGIC if head.startswith(m)), None)
    if magic is None:
        # control bytes other than tab, line ends and NUL (UTF-16 text is half NULs): random or binary data,
        # which no encoding setting would read
        control = sum((byte < 32 and byte not in b"\t\n\r\0") or byte == 127 for byte in head)
        if control > len(head) // 20:
            return "binary data (not text in any encoding), not a text file: give the CSV, JSON or JSONL file"
        return None
    kind, todo = ZIP_KINDS.get(Path(path).suffix.lower(), MAGIC[magic]) if magic == b"PK\x03\x04" else MAGIC[magic]
    return f"{kind}, not a text file: {todo.format(path=path)}"


def _refuse_binary(path: str | Path) -> None:
    kind = not_text(path)
    if kind:
        raise UserError(f"{path} is {kind}")


def existing_file(path: str | Path, setting: str | None = None) -> Path:
    """``path`` (given as ``setting``) when it is a file; else a UserError saying what is there instead."""
    path = Path(path)
    if path.is_file():
        return path
    named = f"{setting}={path}" if setting else str(path)
    if path.is_dir():
        held = ", ".join(sorted(p.name for p in path.iterdir() if p.is_file())[:5])
        raise UserError(
            f"{named} is a folder, not a file: give a file ({f'it holds: {held}' if held else 'it holds none'})"
        )
    raise UserError(f"{named}: {missing(path, setting)}")


def existing_folder(path: str | Path, setting: str | None = None, holding: str = "") -> Path:
    """``path`` (given as ``setting``) when it is a folder; else a UserError saying what is there instead
    (``holding`` says what the folder must hold: ``of .pdf, .md or .txt files``)."""
    path = Path(path)
    if path.is_dir():
        return path
    named = f"{setting}={path}" if setting else str(path)
    if path.exists():
        raise UserError(f"{named} is a file, not a folder: give the folder {holding}".rstrip())
    raise UserError(f"{named}: {missing(path, setting)}")


def missing(path: Path, setting: str | None = None) -> str:
    """Why nothing is at ``path``: a ``~`` nothing expanded (a path from a config file), a folder on the
    way that does not exist, or no such entry in its folder (with the closest name there)."""
    if str(path).startswith("~"):
        absolute = f"{setting}={path.expanduser()}" if setting else path.expanduser()
        return f"no such file or folder: ~ is not expanded here; give the absolute path ({absolute})"
    parent = next((p for p in reversed(path.parents) if not p.exists()), None)
    if parent is not None:
        return f"no such file or folder: the folder {parent} does not exist"
    names = [p.name for p in path.parent.iterdir()]
    near = difflib.get_close_matches(path.name, names, n=1, cutoff=0.8)
    folder = path.parent if path.parent != Path(".") else f"the current folder ({Path.cwd()})"
    hint = f"; did you mean {path.parent / near[0]}?" if near else f" in {folder}"
    return f"no such file or folder{hint}"


@contextmanager
def decoding(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING):
    """Inside: reading ``path``; a UnicodeDecodeError becomes the UserError of ``decode_error``."""
    try:
        yield
    except UnicodeDecodeError:
        raise decode_error(path, encoding, setting) from None


def decode_error(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING) -> UserError:
    """The UserError for the first byte of ``path`` that ``encoding`` cannot decode (or for what the file is,
    when it is not text)."""
    kind = not_text(path)
    return UserError(f"{path} is {kind}" if kind else f"{path} {decoding_problem(path, encoding, setting)}")


def decoding_problem(path: str | Path, encoding: str = "utf-8", setting: str | None = SETTING) -> str:
    """Where the first byte of ``path`` that ``encoding`` cannot decode is (found line by line), and what
    to do: ``line 3, column 13: byte 0xe9 is not valid utf-8 (invalid continuation byte); re-save ...``;
    for a file that is not text, what it is (``not_text``)."""
    kind = not_text(path)
    if kind:
        return kind
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


def csv_records(
    handle: IO[str], path: str | Path, skipped: list[str] | None = None
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the data records of the CSV ``path`` open in ``handle``, each with the file line it
    starts on (a quoted cell may span lines; blank lines are skipped; a cell of any size is read).

    A record that ``record_problem`` finds wrong is logged and added to ``skipped`` as ``PATH line(s) L:
    problem; row skipped``; without a ``skipped`` list it is a UserError. A line the csv module cannot parse
    (a NUL byte) is a UserError naming it."""
    import csv

    csv.field_size_limit(2**31 - 1)
    raw: list[str] = []  # the file lines of the record being read, for stray_quote

    def lines():
        for line in handle:
            raw.append(line)
            yield line

    reader = csv.reader(lines())
    records, end = [], 0
    try:
        header = next(reader, [])
        end = reader.line_num
        raw.clear()
        for cells in reader:
            start, end = end + 1, reader.line_num
            text = "".join(raw)
            raw.clear()
            if not cells:
                continue
            problem = record_problem(cells, header, text) if header else None
            if problem:
                _skip_record(f"{path} {_line_span(start, end)}: {problem}", skipped)
            else:
                records.append((start, dict(zip(header, cells))))
    except csv.Error as error:
        raise UserError(f"{path} line {end + 1}: not readable as CSV ({error})") from None
    return header, records


def stray_quote(text: str, header: list[str], across_lines: bool = False) -> str | None:
    """Why the CSV record ``text`` (its file lines) cannot be split into cells, or None: a quoted cell whose
    closing quote is followed by more text (``2866,"56,"Which of ...``: a quote that opened mid-field or was
    left unescaped, so the reader glues cells together and cuts the one after them); ``across_lines``: only
    such a cell whose quote is closed on a later line (a quote left open), else only one within a line."""
    text = text.rstrip("\r\n")
    field, i = 0, 0
    while i < len(text):
        if text[i] == '"':  # a quoted cell: up to its closing quote ("" is a quote inside it)
            close = i + 1
            while (close := text.find('"', close)) >= 0 and text.startswith('""', close):
                close += 2
            if close < 0:  # open to the record's end: record_problem's case
                return None
            if close + 1 < len(text) and text[close + 1] != ",":  # the first such cell says what went wrong
                if ("\n" in text[i:close]) != across_lines:
                    return None
                name = repr(header[field]) if field < len(header) else str(field + 1)
                if across_lines:
                    shown = text[i : close + 12][:60]
                    return (
                        f"field {name} opens a quote that is closed only on a later line ({shown!r}): a quote left open"
                    )
                return (
                    f"field {name} is quoted, but text follows its closing quote ({text[i : close + 12]!r}): a quote "
                    'that opens mid-field or is not escaped (write "" for a quote inside a quoted cell)'
                )
            i = close + 1
        else:
            i = len(text) if (comma := text.find(",", i)) < 0 else comma
        field, i = field + 1, i + 1  # past the comma
    return None


def record_problem(cells: list[str], header: list[str], text: str) -> str | None:
    """Why a CSV record (its ``cells`` as read, the file lines ``text`` they came from) cannot be read by its
    header, or None, the likeliest cause first: a quote that opens mid-field (``stray_quote``); a cell
    holding, after a line break, a line that looks like another row (as many fields, a first field of the same
    shape as the record's: a quote left open swallowed the rows after it); a quote closed only on a later
    line; a field count other than the header's (a cell left out or added shifts every column after it)."""
    problem = stray_quote(text, header)
    if problem:
        return problem
    for name, value in zip(header, cells):
        row = next((line for line in value.splitlines()[1:] if _looks_like_row(line, cells[0], len(header))), None)
        if row is not None:
            return f"field {name!r} runs on into what looks like another row ({row[:60]!r}): a quote left open"
    problem = stray_quote(text, header, across_lines=True)
    if problem:
        return problem
    if len(cells) != len(header):
        return f"{len(cells)} field{'s' * (len(cells) != 1)}, the header has {len(header)}"
    return None


def _looks_like_row(line: str, first: str, width: int) -> bool:
    import csv

    fields = next(csv.reader([line]), [])
    return len(fields) >= width and bool(fields[0].strip()) and _shape(fields[0]) == _shape(first)


def _shape(text: str) -> str:
    """``text`` with each run of digits as 0 and of letters as a (``Q-104`` -> ``a-0``)."""
    return re.sub(r"\d+", "0", re.sub(r"[^\W\d_]+", "a", text.strip()))


def _line_span(start: int, end: int) -> str:
    """``line 5``, or ``lines 5-9`` for a record that spans several file lines."""
    return f"line {start}" if start == end else f"lines {start}-{end}"


def _skip_record(message: str, skipped: list[str] | None) -> None:
    if skipped is None:
        raise UserError(message)
    log.warning("%s; row skipped", message)
    skipped.append(f"{message}; row skipped")


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
