"""Record types shared by every dataset of a task."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MCQItem:
    """One multiple-choice question.

    ``options`` maps a letter (A-D) to its text; ``answer`` holds the gold letters sorted
    (usually one); ``context`` holds the linked source passages, if any; ``doc_id`` and ``page`` (1-based)
    where that passage comes from, as the loader read them (ESGenius's ``ref_doc``, ``ref_page``).
    """

    id: str
    question: str
    options: dict[str, str]
    answer: str
    context: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
    doc_id: str | None = None
    page: int | None = None


@dataclass(frozen=True)
class QAItem:
    """One open question.

    ``answers`` holds the reference answers (usually one text; a factoid answer may list several
    spans separated by commas or semicolons inside one text); ``qtype`` is ``factoid``,
    ``non_factoid`` or ``table``; ``context`` holds the item's own passage(s); ``meta`` keeps
    benchmark fields such as ``category``, ``report``, ``page`` and ``evidence_pages`` (0-based);
    ``doc_id`` names the report the question is about and ``page`` (1-based) its passage's page, whatever
    the benchmark calls them (SustainableQA's ``report``, ESGBench's ``doc_name``).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    qtype: str
    context: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
    doc_id: str | None = None
    page: int | None = None


@dataclass(frozen=True)
class Passage:
    """A retrievable chunk of one document with its 1-based page span (``page_start`` to ``page_end``)."""

    id: str
    doc_id: str
    text: str
    page_start: int
    page_end: int
    kind: str = "text"

    @property
    def page_span(self) -> str:
        """``12`` or ``12-13``, as printed in citations."""
        if self.page_end == self.page_start:
            return str(self.page_start)
        return f"{self.page_start}-{self.page_end}"

    @property
    def page_indexes(self) -> range:
        """The 0-based page indexes the passage covers (ESGBench counts pages this way)."""
        return range(self.page_start - 1, self.page_end)

    def record(self) -> dict:
        """The fields by name, in order (``dataclasses.asdict`` without its deep copy, which costs: all are str or
        int)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def passages_hash(passages: Sequence[Passage]) -> str:
    """sha256 over the passages' fields in order: the corpus identity (report.json, index cache keys)."""
    return lines_hash("".join(map(hash_line, passages)).encode())


def hash_line(passage: Passage) -> str:
    """A passage's line of the corpus hash: its fields as JSON, keys sorted."""
    return json.dumps(passage.record(), sort_keys=True, ensure_ascii=False) + "\n"


def lines_hash(lines: bytes) -> str:
    """``passages_hash`` of the passages whose ``hash_line``s, in order and in UTF-8, make ``lines``."""
    return hashlib.sha256(lines).hexdigest()


@dataclass(frozen=True)
class RetrievalQuery:
    """A query with graded relevance (0-3) per passage id; ``doc_scope`` limits the search to one document."""

    id: str
    text: str
    relevance: dict[str, int]
    doc_scope: str | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class LoadedDataset:
    """The usable items and one message per skipped row or record (file, row, field, reason)."""

    items: list[Any]
    skipped: list[str] = field(default_factory=list)

    def sample(self, limit: int | None, seed: int) -> LoadedDataset:
        """A dataset of ``limit`` (>= 1, checked with the settings) items drawn by a seeded shuffle, the same
        skipped rows (this one when ``limit`` is None); this one is left as it is."""
        if limit is None:
            return self
        drawn = list(self.items)
        random.Random(seed).shuffle(drawn)
        return LoadedDataset(drawn[:limit], list(self.skipped))


# Item fields that restate what ``meta`` already holds: left out of an item's fingerprint, so the
# fingerprints (and resumable answers) of runs made before they existed stay valid.
DERIVED_FIELDS = ("doc_id", "page")
