"""The random baseline (ClimRetrieve Table R.1's "random"): passages in a seeded random order."""

from __future__ import annotations

import hashlib

import numpy as np

from esgexp.records import Passage
from esgexp.retrieval.base import Hit, Retriever, top_k


class RandomRetriever(Retriever):
    """Each passage scores a uniform random number in [0, 1) drawn from ``seed`` and the query's text, so a
    query gets the same ranking in any batch, order or run; the ``k`` highest come back."""

    def __init__(self, name: str = "random", seed: int = 0) -> None:
        super().__init__(name)
        self.seed = int(seed)

    def build_index(self, passages: list[Passage]) -> None:
        """Nothing to build."""

    def scores(self, query: str) -> np.ndarray:
        """One random score per indexed passage, fixed by the seed and the query."""
        digest = hashlib.sha256(query.encode("utf-8")).digest()
        rng = np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])
        return rng.random(len(self.passages))

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        results = []
        for query, doc in zip(queries, scopes):
            rows, scores = self.rows(doc), self.scores(query)
            if rows is not None:
                scores = scores[rows]
            best = top_k(scores, k)
            results.append(self._hits(best if rows is None else rows[best], scores[best]))
        return results
