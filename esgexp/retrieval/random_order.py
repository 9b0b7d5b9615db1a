"""The random baseline (ClimRetrieve Table R.1's "random"): passages in a seeded random order."""

from __future__ import annotations

import hashlib
from typing import ClassVar

import numpy as np

from esgexp.core.records import Passage
from esgexp.core.rules import Integer
from esgexp.retrieval.base import Hit, Retriever, top_k


class RandomRetriever(Retriever):
    """Each passage of a searched document scores a uniform random number in [0, 1) drawn from ``seed`` and the
    document's id (a search of the whole corpus: from ``seed`` alone), whatever the query says. Every query of a
    document, however it is phrased, gets the same ranking in any batch, order or run, and a document's ranking
    does not depend on which other documents are indexed; the ``k`` highest come back. ClimRetrieve's random row
    is one value across its query formulations, which a ranking drawn from the query text would not give."""

    rules: ClassVar[dict] = {"seed": Integer(0, 2**32 - 1)}
    reads_query = False

    def __init__(self, name: str = "random", seed: int = 0) -> None:
        super().__init__(name)
        self.seed = int(seed)

    def build_index(self, passages: list[Passage]) -> None:
        """Nothing to build."""

    def scores(self, doc: str | None) -> np.ndarray:
        """One random score per passage of ``doc`` (index order; None: the whole corpus), fixed by the seed and ``doc``."""
        if doc is None:
            return np.random.default_rng([self.seed]).random(len(self.passages))
        digest = hashlib.sha256(doc.encode("utf-8")).digest()
        return np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")]).random(len(self.rows(doc)))

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        drawn: dict[str | None, np.ndarray] = {}
        results = []
        for doc in scopes:
            if doc not in drawn:
                drawn[doc] = self.scores(doc)
            rows, scores = self.rows(doc), drawn[doc]
            best = top_k(scores, k)
            results.append(self._hits(best if rows is None else rows[best], scores[best]))
        return results
