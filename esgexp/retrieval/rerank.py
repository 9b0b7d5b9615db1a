"""A second stage for any retriever (``retriever.rerank=MODEL``): a sentence-transformers CrossEncoder scores
each query against the first stage's top ``rerank_depth`` passages and reorders them."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from esgexp.core.records import Passage
from esgexp.core.rules import Integer
from esgexp.retrieval.base import Hit, Retriever, top_k
from esgexp.retrieval.dense import encoder_problems, hub_offline, pick_device, resolve_source

if TYPE_CHECKING:
    from esgexp.retrieval.cache import IndexCache


@lru_cache(maxsize=2)
def load_cross_encoder(source: str, device: str) -> Any:
    from sentence_transformers import CrossEncoder

    return CrossEncoder(source, device=pick_device(device), local_files_only=hub_offline())


class RerankedRetriever(Retriever):
    """``first`` ranks ``max(k, depth)`` passages per query (its index cached as itself); the cross-encoder
    ``model`` (a hub id from the local Hugging Face cache, or a folder) scores each (query, passage) pair,
    and the ``k`` best by that score come back, with it. Takes the first stage's name.

    Its own keys sit in the first stage's node (``retriever.rerank``, ``retriever.rerank_depth``): ``from_node``
    builds it from them, ``rules`` and ``preflight`` check them."""

    keys = ("rerank", "rerank_depth")
    rules: ClassVar[dict] = {"rerank_depth": Integer(1)}
    packages = ("sentence-transformers",)

    @classmethod
    def applies(cls, node) -> bool:
        """Whether a retriever ``node`` asks for this second stage (sets ``rerank``)."""
        return bool(node.get("rerank"))

    @classmethod
    def preflight(cls, node) -> list[str]:
        return encoder_problems(node, ("rerank",))

    @classmethod
    def from_node(cls, first: Retriever, node) -> RerankedRetriever:
        """``first`` reranked as its ``node`` says: ``rerank`` (the model), ``rerank_depth`` (default 50), ``device``."""
        return cls(first, node["rerank"], depth=node.get("rerank_depth", 50), device=node.get("device", "auto"))

    def __init__(
        self, first: Retriever, model: str, depth: int = 50, batch_size: int = 32, device: str = "auto"
    ) -> None:
        super().__init__(first.name)
        self.first, self.depth, self.batch_size, self.device = first, int(depth), int(batch_size), device
        self.model = resolve_source(model, first.name, "rerank")

    def index(self, passages: Sequence[Passage], cache: IndexCache | None = None) -> None:
        super().index(passages)
        self.first.index(passages, cache)

    def build_index(self, passages: list[Passage]) -> None:
        """Nothing of its own: ``index`` indexes the first stage."""

    def stats(self) -> dict[str, int]:
        return self.first.stats()

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        candidates = self.first._search(queries, max(k, self.depth), scopes)
        text = {p.id: p.text for p in self.passages}
        pairs = [(query, text[hit.passage_id]) for query, hits in zip(queries, candidates) for hit in hits]
        encoder = load_cross_encoder(self.model, self.device)
        scores = encoder.predict(pairs, batch_size=self.batch_size, show_progress_bar=False) if pairs else []
        results, at = [], 0
        for hits in candidates:
            mine = np.asarray(scores[at : at + len(hits)], dtype=np.float64)
            at += len(hits)
            results.append([Hit(hits[i].passage_id, float(mine[i])) for i in top_k(mine, k)])
        return results
