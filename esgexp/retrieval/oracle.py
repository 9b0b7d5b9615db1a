"""The oracle: each query's own linked passages, an upper bound for retrieval (ESGenius "context")."""

from __future__ import annotations

from collections.abc import Sequence

from esgexp.core.records import Passage
from esgexp.errors import UserError
from esgexp.retrieval.base import Hit, Retriever


class OracleRetriever(Retriever):
    """Returns the gold passages it is handed: ``search(queries, k, doc_scope, gold=...)``.

    ``gold[i]`` lists query ``i``'s linked passage ids, best first (for graded qrels: highest grade
    first); the first ``k`` come back, each with score 1.0. Every id must be indexed and, when
    the query is scoped, belong to that document. ``needs_gold`` tells a runner to pass ``gold``.
    """

    needs_gold = True

    def __init__(self, name: str = "oracle") -> None:
        super().__init__(name)
        self._by_id: dict[str, Passage] = {}

    def build_index(self, passages: list[Passage]) -> None:
        self._by_id = {p.id: p for p in passages}

    def search(
        self,
        queries: Sequence[str],
        k: int,
        doc_scope: Sequence[str | None] | None = None,
        *,
        gold: Sequence[Sequence[str]],
    ) -> list[list[Hit]]:
        scopes = self._scopes(queries, k, doc_scope)
        if len(gold) != len(queries):
            raise UserError(f"retriever {self.name}: {len(gold)} gold lists for {len(queries)} queries")
        return self._search(list(queries), k, scopes, gold)

    def _search(
        self, queries: list[str], k: int, scopes: list[str | None], gold: Sequence[Sequence[str]] = ()
    ) -> list[list[Hit]]:
        results = []
        for i, (ids, doc) in enumerate(zip(gold, scopes)):
            for pid in ids:
                passage = self._by_id.get(pid)
                if passage is None:
                    raise UserError(f"retriever {self.name}: gold passage {pid!r} of query {i} is not indexed")
                if doc is not None and passage.doc_id != doc:
                    raise UserError(
                        f"retriever {self.name}: gold passage {pid!r} of query {i} is in {passage.doc_id!r}, not in its scope {doc!r}"
                    )
            results.append([Hit(pid, 1.0) for pid in list(ids)[:k]])
        return results
