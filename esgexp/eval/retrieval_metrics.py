"""Retrieval metrics from ranked ids and graded or page-level gold."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def page_recall_at_k(retrieved_pages: Sequence[Sequence[int]], gold_pages: Sequence[Collection[int]], k: int) -> list[float]:
    """Per item 1.0 when a gold page is among the first ``k`` retrieved pages, else 0.0.

    Pages are compared as given (ESGBench uses 0-based page indexes on both sides)."""
    if len(retrieved_pages) != len(gold_pages):
        raise ValueError(f"{len(retrieved_pages)} retrieved lists for {len(gold_pages)} gold sets")
    return [1.0 if set(pages[:k]) & set(gold) else 0.0 for pages, gold in zip(retrieved_pages, gold_pages)]
