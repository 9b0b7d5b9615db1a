"""Choosing the passages a builder writes questions from, cutting them into sentences, and finding the
spans (figures, years, names) a schema may offer as answers."""

from __future__ import annotations

import re
from collections.abc import Sequence

from esgexp.core.records import Passage
from esgexp.data.chunking import sentence_spans
from esgexp.eval.numbers import find_quantities

YEAR = re.compile(r"(?:19|20)\d\d")
# Alpha AG, Scope 1: capitalised words (a lower-case word or a full stop ends a name), not from an article or preposition.
NAME = re.compile(
    r"\b(?!(?:The|A|An|In|On|At|Of|For|By|To|As|Our|This|These|Its|We)\b)[A-Z][\w&-]*(?:\.[\w&-]+)*(?:[ ][A-Z0-9][\w&-]*(?:\.[\w&-]+)*)+"
)


def term_pattern(terms: Sequence[str]) -> re.Pattern:
    """Any of ``terms`` as whole words, case-insensitive (``scope 1`` matches ``Scope 1`` but not ``scope 12``)."""
    alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{alternatives})(?![^\W_])", re.IGNORECASE)


def has_measure(text: str) -> bool:
    """Whether ``text`` holds a number with a unit (``12,400 tCO2e``, ``38%``), not only bare numbers or years."""
    return any(q.unit is not None for q in find_quantities(text))


def interleave(groups: Sequence[Sequence], limit: int | None) -> list:
    """The first of every group, then the second of every group, ...; at most ``limit`` (None: all)."""
    out, depth = [], max((len(g) for g in groups), default=0)
    for index in range(depth):
        out += [group[index] for group in groups if index < len(group)]
    return out if limit is None else out[:limit]


def by_document(passages: Sequence[Passage]) -> list[list[Passage]]:
    """Passages grouped by document, documents in first-seen order."""
    groups: dict[str, list[Passage]] = {}
    for passage in passages:
        groups.setdefault(passage.doc_id, []).append(passage)
    return list(groups.values())


def sentences(text: str, max_chars: int) -> list[str]:
    """The passage's sentences (whitespace collapsed), each at most ``max_chars`` long, duplicates dropped."""
    found = [" ".join(text[a:b].split()) for a, b in sentence_spans(text, (0, len(text)))]
    return list(dict.fromkeys(s for s in found if s and len(s) <= max_chars))


def prose_sentences(text: str) -> int:
    """How many sentences of ``text`` read as prose: six words or more, ending in a full stop, ! or ?
    (a contents page or a row of key figures has none)."""
    return sum(1 for s in sentences(text, len(text)) if len(s.split()) >= 6 and s[-1] in ".!?")


def span_candidates(text: str, max_chars: int) -> list[str]:
    """The passage's verbatim figures with a unit, years and capitalised names of two or more words, in order."""
    found = [q.raw for q in find_quantities(text) if q.unit is not None or YEAR.fullmatch(q.raw)]
    found += [m.group(0) for m in NAME.finditer(text)]
    found.sort(key=lambda span: text.find(span))
    return list(dict.fromkeys(span for span in found if span in text and len(span) <= max_chars))


def span_kind(span: str) -> str:
    """What a span is, for choosing others like it: ``year``, ``unit:<unit>`` (a figure) or ``name``."""
    if YEAR.fullmatch(span):
        return "year"
    quantities = find_quantities(span)
    if len(quantities) == 1 and quantities[0].unit is not None:
        return f"unit:{quantities[0].unit}"
    return "name"
