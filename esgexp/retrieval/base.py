"""The retriever interface: index passages once, then rank them for batches of queries."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from esgexp.core.records import Passage
from esgexp.errors import UserError

if TYPE_CHECKING:
    from esgexp.retrieval.cache import IndexCache


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and its score; a result list is ranked best first."""

    passage_id: str
    score: float


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first; equal scores keep their position order."""
    n = len(scores)
    k = min(k, n)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        ties = np.flatnonzero(scores == kth)[: k - len(above)]
        rows = np.concatenate([above, ties])
    else:
        rows = np.arange(n)
    return rows[np.lexsort((rows, -scores[rows]))]


def clean_queries(queries: Sequence[str]) -> list[str]:
    """Queries cleaned as passages are at ingestion (NFKC: ``CO₂`` -> ``CO2``, ligatures split, invisibles dropped)."""
    from esgexp.data.pdf import clean_text

    return [clean_text(query) for query in queries]


class Retriever(ABC):
    """Ranks indexed passages for queries, optionally within one document per query.

    ``search(queries, k, doc_scope)`` returns, per query, up to ``k`` hits best first; ``doc_scope[i]``
    (a doc id, or None for the whole corpus) restricts query ``i`` to that document's passages.
    Equal scores (e.g. BM25 zeros for passages sharing no term with the query) rank in index order.
    Subclasses implement ``build_index`` and ``_search``; those with an on-disk form also
    ``save_index``/``load_index`` and ``settings`` (the knobs that change the index, for the cache key).
    """

    #: True when ``search`` needs ``gold=`` (the oracle).
    needs_gold: bool = False
    #: False for a retriever whose ranking ignores the query text (random): no query text is written for it.
    reads_query: bool = True

    # What the class declares for the rest of esgexp (its YAML's keys are its constructor's arguments):
    rules: ClassVar[dict] = {}  # its settings' rules (esgexp/core/rules.py), checked before any job starts
    packages: tuple[str, ...] = ()  # the packages whose version can change its rankings (a run's ``versions`` tag)
    requires: ClassVar[dict[str, str]] = {}  # optional modules it imports -> the message naming what to install

    @classmethod
    def preflight(cls, node) -> list[str]:
        """Why a retriever of config ``node`` could not run here now (an encoder not on disk, a key not set);
        nothing is loaded or sent. The paper grid's dry run asks it of every retrieval job."""
        return []

    @classmethod
    def missing_requirements(cls) -> list[str]:
        """The message of each optional module of ``requires`` not installed here."""
        from esgexp.core.requirements import missing

        return missing(cls.requires)

    @classmethod
    def encoder_label(cls, node) -> str | None:
        """The encoder a retriever of config ``node`` embeds with (a run's ``encoder`` tag); None: none (bm25)."""
        return None

    @classmethod
    def encoder_arithmetic(cls, node) -> str | None:
        """What an encoder of config ``node`` computes in on this machine (a run's ``encoder_arithmetic`` tag,
        e.g. ``bfloat16, openvino``); None: no local encoder."""
        return None

    def __init__(self, name: str) -> None:
        self.name = name
        self.passages: list[Passage] = []
        self._doc_rows: dict[str, np.ndarray] = {}

    def index(self, passages: Sequence[Passage], cache: IndexCache | None = None) -> None:
        """Index ``passages`` (row ``i`` is ``passages[i]``); with a cache, reuse a saved index."""
        if not passages:
            raise UserError(f"retriever {self.name}: cannot index an empty corpus (no passages)")
        by_doc: dict[str, list[int]] = {}
        seen: set[str] = set()
        for row, passage in enumerate(passages):
            if passage.id in seen:
                raise UserError(f"retriever {self.name}: passage id {passage.id!r} occurs more than once")
            seen.add(passage.id)
            by_doc.setdefault(passage.doc_id, []).append(row)
        self.passages = list(passages)
        self._doc_rows = {doc: np.asarray(rows) for doc, rows in by_doc.items()}
        if cache is None or self.settings() is None:
            self.build_index(self.passages)
        else:
            cache.load_or_build(self)

    def search(self, queries: Sequence[str], k: int, doc_scope: Sequence[str | None] | None = None) -> list[list[Hit]]:
        """Up to ``k`` hits per query (fewer when the scope holds fewer passages), best first."""
        scopes = self._scopes(queries, k, doc_scope)
        return self._search(clean_queries(queries), k, scopes) if queries else []

    def _scopes(self, queries: Sequence[str], k: int, doc_scope: Sequence[str | None] | None) -> list[str | None]:
        """Check a search call; per query its doc id, or None for the whole corpus."""
        if not self.passages:
            raise UserError(f"retriever {self.name}: search called before index")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"retriever {self.name}: k must be a positive integer, got {k!r}")
        if doc_scope is None:
            return [None] * len(queries)
        if len(doc_scope) != len(queries):
            raise UserError(f"retriever {self.name}: {len(doc_scope)} doc scopes for {len(queries)} queries")
        for doc in doc_scope:
            if doc is not None and doc not in self._doc_rows:
                raise UserError(
                    f"retriever {self.name}: doc_scope {doc!r} is not an indexed document "
                    f"({len(self._doc_rows)} documents indexed)"
                )
        return list(doc_scope)

    def rows(self, doc: str | None) -> np.ndarray | None:
        """The passage rows of an indexed document in index order; None for the whole corpus."""
        return None if doc is None else self._doc_rows[doc]

    def _hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        return [Hit(self.passages[r].id, float(s)) for r, s in zip(rows.tolist(), scores.tolist())]

    @abstractmethod
    def build_index(self, passages: list[Passage]) -> None:
        """Build the index over ``passages`` in order."""

    @abstractmethod
    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        """Rank for each query; ``scopes[i]`` is query ``i``'s (checked) doc id, None for all."""

    def stats(self) -> dict[str, int]:
        """Counts worth logging with the run's metrics (requests sent, cache hits); empty by default."""
        return {}

    def settings(self) -> dict[str, Any] | None:
        """The knobs the built index depends on (part of the cache key); None: nothing worth caching."""
        return None

    def save_index(self, directory: Path) -> None:
        """Write the built index into ``directory`` (retrievers whose ``settings`` is not None)."""
        raise NotImplementedError

    def load_index(self, directory: Path) -> None:
        """Read an index written by ``save_index`` for the same passages."""
        raise NotImplementedError
