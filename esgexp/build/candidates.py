"""Choosing the passages a builder writes questions from, and cutting them into sentences."""

from __future__ import annotations

import re
from collections.abc import Sequence

from esgexp.data.chunking import sentence_spans
from esgexp.eval.numbers import find_quantities
from esgexp.records import Passage


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
