"""SustainableQA loader: passage QA (factoid, non-factoid) and table QA from one folder of split files.

``path`` holds ``train.json``, ``validation.json`` and ``test.json``, each
``{"all_chunks_qas": [chunk, ...], "all_table_qas": [table, ...]}``. A chunk has ``metadata``
(``paragraph``, ``classification``, ``report_name``, ``page_number``, ...) and the sections
``qa_pairs_factoid`` and ``qa_pairs_non_factoid``, each ``{"qa_pairs": [{question, answer, ...}]}``;
a table has ``metadata`` (or ``meta_data``: ``table_caption``, ``paragraph``, ...) and ``qa_pairs``.

Files are streamed with ijson, one pass per top-level key, so only one record at a time is held
besides the items. Bad records and QA pairs are listed and skipped; a missing file or top-level key,
malformed JSON and a byte that is not valid in ``encoding`` are fatal. A missing or unknown classification is kept and logged; a page number
that is not a whole number (the source writes ``N/A``) becomes ``None``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import ijson

from esgexp.core.records import LoadedDataset, QAItem
from esgexp.data.base import Dataset
from esgexp.data.text_files import (
    Utf8Reader,
    codec,
    decode_error,
    decoding,
    existing_folder,
    open_bytes,
    open_text,
    valid_unicode,
)
from esgexp.errors import UserError

log = logging.getLogger(__name__)

QTYPES = ("factoid", "non_factoid", "table")
CATEGORIES = ("ESG", "EU Taxonomy", "Sustainability")
SPLIT_FILES = ("train.json", "validation.json", "test.json")
CHUNKS = "all_chunks_qas"
TABLES = "all_table_qas"
# qtype -> (chunk section key, id letter)
CHUNK_SECTIONS = {"factoid": ("qa_pairs_factoid", "f"), "non_factoid": ("qa_pairs_non_factoid", "n")}


@dataclass
class SustainableQA(Dataset):
    """Loads one SustainableQA split as QAItems, keeping the question types in ``qtypes``."""

    split: str = "test"
    qtypes: Sequence[str] = QTYPES

    def load(self) -> LoadedDataset:
        """The items of ``split``; with ``limit``, that many after a seeded shuffle."""
        loaded = self.load_split(self.split)
        return loaded.sample(self.limit, self.seed)

    def load_split(self, split: str) -> LoadedDataset:
        """Every item of ``split`` (e.g. ``train`` for few-shot examples) of the wanted qtypes, in file order."""
        qtypes = self._qtypes()
        path = split_file(self.path, split)
        loaded = read_split(path, split, qtypes, self.encoding)
        if not loaded.items:
            raise UserError(
                f"{path}: no usable question of type(s) {', '.join(qtypes)} (records skipped: {len(loaded.skipped)})"
            )
        return loaded

    def _qtypes(self) -> tuple[str, ...]:
        qtypes = (self.qtypes,) if isinstance(self.qtypes, str) else tuple(str(q) for q in self.qtypes)
        unknown = [q for q in qtypes if q not in QTYPES]
        if unknown or not qtypes:
            raise UserError(f"dataset.qtypes: {', '.join(unknown) or 'empty'} - choose from {', '.join(QTYPES)}")
        return qtypes


def split_file(folder: str | None, split: str) -> Path:
    """``folder/split.json``, or a UserError saying what is wrong with the folder."""
    hint = f"set dataset.path=DIR holding {', '.join(SPLIT_FILES)}"
    if not folder:
        raise UserError(f"dataset.path is not set: {hint}")
    directory = existing_folder(folder, "dataset.path", f"holding {', '.join(SPLIT_FILES)}")
    path = directory / f"{split}.json"
    if not path.is_file():
        held = sorted(entry.name for entry in directory.iterdir())
        raise UserError(f"split file not found: {path} ({directory} holds: {', '.join(held) or 'nothing'})")
    return path


def read_split(path: Path, split: str, qtypes: Sequence[str], encoding: str = "utf-8") -> LoadedDataset:
    """Stream ``path`` into items whose ids start with ``split``; skipped records are logged once, summed up."""
    reader = _SplitReader(path, split, qtypes)
    if any(q in CHUNK_SECTIONS for q in qtypes):
        for index, chunk in stream_records(path, CHUNKS, encoding):
            reader.chunk(index, chunk)
    if "table" in qtypes:
        for index, table in stream_records(path, TABLES, encoding):
            reader.table(index, table)
    if reader.loaded.skipped:
        log.warning("%s: %d record(s) skipped, first: %s", path, len(reader.loaded.skipped), reader.loaded.skipped[0])
    for category in sorted(reader.odd_categories, key=str):
        log.warning("%s: classification %r is not one of %s; items kept", path, category, ", ".join(CATEGORIES))
    return reader.loaded


def stream_records(path: Path, key: str, encoding: str = "utf-8") -> Iterator[tuple[int, object]]:
    """Yield ``(index, record)`` for the top-level list ``key``, holding one record at a time. UTF-8 is
    parsed as bytes; another ``encoding`` is decoded and handed to ijson as UTF-8."""
    count = 0
    utf8 = codec(encoding) == "utf-8-sig"
    with decoding(path, encoding), open_bytes(path) if utf8 else open_text(path, encoding) as handle:
        try:
            for count, record in enumerate(ijson.items(_bytes(handle, utf8), f"{key}.item", use_float=True), start=1):
                yield count - 1, record
            if not count:
                handle.seek(0)
                _check_empty_list(_bytes(handle, utf8), path, key)
        except ijson.JSONError as problem:
            if utf8 and "invalid bytes in UTF8" in str(problem):
                raise decode_error(path, encoding) from None
            raise UserError(f"{path}: not valid JSON ({problem})") from None


def _bytes(handle, utf8: bool):
    return handle if utf8 else Utf8Reader(handle)


def _check_empty_list(handle, path: Path, key: str) -> None:
    """Accept an empty list at ``key``; a missing key, another type or top level is a UserError."""
    events = ijson.parse(handle)
    if next(events, ("", None, None))[1] != "start_map":
        raise UserError(f"{path}: the top level is not a JSON object with keys '{CHUNKS}' and '{TABLES}'")
    for prefix, event, value in events:
        if prefix == "" and event == "map_key" and value == key:
            if next(events)[1] != "start_array":
                raise UserError(f"{path}: top-level key '{key}' is not a list")
            return
    raise UserError(f"{path}: missing top-level key '{key}'")


class _SplitReader:
    """Turns chunk and table records of one file into items, listing what it skips."""

    def __init__(self, path: Path, split: str, qtypes: Sequence[str]):
        self.source = path.name
        self.split = split
        self.qtypes = qtypes
        self.loaded = LoadedDataset(items=[])
        self.odd_categories: set = set()

    def skip(self, where: str, problem: object) -> None:
        self.loaded.skipped.append(f"{self.source} {where}: {problem}")

    def chunk(self, index: int, chunk: object) -> None:
        where = f"{CHUNKS}[{index}]"
        if not isinstance(chunk, dict):
            self.skip(where, "not a JSON object")
            return
        sections = []
        for qtype, (key, letter) in CHUNK_SECTIONS.items():
            if qtype not in self.qtypes:
                continue
            section = chunk.get(key)
            if section is None:  # the source writes null for chunks it did not classify
                continue
            pairs = section.get("qa_pairs") if isinstance(section, dict) else None
            if not isinstance(pairs, list):
                self.skip(f"{where}.{key}", "field 'qa_pairs' is missing or not a list")
                continue
            sections.append((qtype, key, letter, pairs))
        count = sum(len(pairs) for *_, pairs in sections)
        if not count:
            return
        try:
            context, meta = self._source(chunk, "metadata", "chunk", index)
        except ValueError as problem:
            self.skip(where, f"{problem}; {count} QA pair(s) skipped")
            return
        for qtype, key, letter, pairs in sections:
            self._add_pairs(pairs, f"{where}.{key}.qa_pairs", f"{self.split}/c{index}/{letter}", qtype, context, meta)

    def table(self, index: int, table: object) -> None:
        where = f"{TABLES}[{index}]"
        if not isinstance(table, dict):
            self.skip(where, "not a JSON object")
            return
        pairs = table.get("qa_pairs")
        if not isinstance(pairs, list):
            self.skip(where, "field 'qa_pairs' is missing or not a list")
            return
        if not pairs:
            return
        label = "meta_data" if "meta_data" in table and "metadata" not in table else "metadata"
        try:
            context, meta = self._source(table, label, "table", index)
        except ValueError as problem:
            self.skip(where, f"{problem}; {len(pairs)} QA pair(s) skipped")
            return
        self._add_pairs(pairs, f"{where}.qa_pairs", f"{self.split}/t{index}/", "table", context, meta)

    def _source(self, record: dict, label: str, kind: str, index: int) -> tuple[tuple[str], dict]:
        """The context passage and shared meta of a chunk or table; ValueError names a bad field."""
        metadata = record.get(label)
        if not isinstance(metadata, dict):
            raise ValueError(f"field '{label}' is missing or not an object")
        passage = text_field(metadata, "paragraph", f"{label}.")
        category = metadata.get("classification")
        if category not in CATEGORIES:
            self.odd_categories.add(category if isinstance(category, (str, int, float, type(None))) else repr(category))
        meta = {
            "category": category,
            "report": metadata.get("report_name"),
            "page": whole_number(metadata.get("page_number")),
            kind: index,
        }
        if kind == "table":
            caption = metadata.get("table_caption")
            meta["caption"] = (
                valid_unicode(caption, f"{label}.table_caption").strip() if isinstance(caption, str) else None
            )
            if meta["caption"]:
                passage = f"{meta['caption']}\n{passage}"
        return (passage,), meta

    def _add_pairs(self, pairs: list, where: str, id_prefix: str, qtype: str, context: tuple, meta: dict) -> None:
        for number, pair in enumerate(pairs):
            try:
                if not isinstance(pair, dict):
                    raise ValueError("not a JSON object")
                question = text_field(pair, "question")
                answer = text_field(pair, "answer")
            except ValueError as problem:
                self.skip(f"{where}[{number}]", problem)
                continue
            item_meta = dict(meta)
            if isinstance(pair.get("tag"), str):
                item_meta["tag"] = pair["tag"]
            self.loaded.items.append(
                QAItem(
                    id=f"{id_prefix}{number}",
                    question=question,
                    answers=(answer,),
                    qtype=qtype,
                    context=context,
                    meta=item_meta,
                    doc_id=item_meta.get("report"),
                    page=item_meta.get("page"),
                )
            )


def text_field(record: dict, field: str, prefix: str = "") -> str:
    """The stripped, non-empty string at ``record[field]``; ValueError naming ``prefix + field`` otherwise."""
    value = record.get(field)
    if value is None:
        raise ValueError(f"field '{prefix}{field}' is missing")
    if not isinstance(value, str):
        raise ValueError(f"field '{prefix}{field}' is not text ({type(value).__name__})")
    if not value.strip():
        raise ValueError(f"field '{prefix}{field}' is empty")
    return valid_unicode(value, prefix + field).strip()


def whole_number(value: object) -> int | None:
    """An int page number, also from a digit string; anything else (``N/A``, missing) is ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None
