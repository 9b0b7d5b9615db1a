"""Hybrid retrieval: reciprocal rank fusion (RRF) of a BM25 and a dense ranking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from esgexp.core.records import Passage
from esgexp.core.rules import Integer, Number
from esgexp.errors import UserError
from esgexp.retrieval.base import Hit, Retriever
from esgexp.retrieval.bm25 import BM25Retriever
from esgexp.retrieval.dense import DenseRetriever

if TYPE_CHECKING:
    from esgexp.retrieval.cache import IndexCache


def rrf(rankings: Sequence[Sequence[str]], k: float = 60) -> list[tuple[str, float]]:
    """Fuse rankings (ids best first): score(d) = sum over rankings of 1 / (k + rank of d), rank from 1.

    Best first; equal scores go to the id met first when reading the rankings rank by rank
    (rank 1 of each ranking in order, then rank 2, ...).
    """
    if k < 0:
        raise UserError(f"rrf: k must be >= 0, got {k}")
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        if len(set(ranking)) != len(ranking):
            raise UserError(f"rrf: ranking {which} lists an id more than once")
        for rank, pid in enumerate(ranking, start=1):
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (k + rank)
            first_seen[pid] = min(first_seen.get(pid, (rank, which)), (rank, which))
    return sorted(scores.items(), key=lambda item: (-item[1], first_seen[item[0]]))


class HybridRetriever(Retriever):
    """RRF of ``bm25`` and ``dense``: each ranks ``max(k, depth)`` passages, the fused top ``k`` is kept.

    The two parts are indexed (and cached) as themselves, so a hybrid run reuses their indexes.
    """

    rules: ClassVar[dict] = {"rrf_k": Number(0), "depth": Integer(1)}  # its halves' own: their classes'

    @classmethod
    def encoder_label(cls, node) -> str | None:
        """Its dense half's encoder."""
        from hydra.utils import get_class

        return get_class(str(node.dense._target_)).encoder_label(node.dense)

    @classmethod
    def encoder_arithmetic(cls, node) -> str | None:
        """Its dense half's."""
        from hydra.utils import get_class

        return get_class(str(node.dense._target_)).encoder_arithmetic(node.dense)

    def __init__(
        self, bm25: BM25Retriever, dense: DenseRetriever, name: str = "hybrid", rrf_k: float = 60, depth: int = 100
    ) -> None:
        super().__init__(name)
        self.bm25, self.dense = bm25, dense
        self.rrf_k, self.depth = rrf_k, depth

    def index(self, passages: Sequence[Passage], cache: IndexCache | None = None) -> None:
        super().index(passages)
        self.bm25.index(passages, cache)
        self.dense.index(passages, cache)

    def build_index(self, passages: list[Passage]) -> None:
        """Nothing of its own: ``index`` indexes the two parts."""

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        depth = max(k, self.depth)
        runs = [part._search(queries, depth, scopes) for part in (self.bm25, self.dense)]
        fused = []
        for hits in zip(*runs):
            ranked = rrf([[h.passage_id for h in run] for run in hits], self.rrf_k)
            fused.append([Hit(pid, score) for pid, score in ranked[:k]])
        return fused
