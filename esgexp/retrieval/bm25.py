"""Lexical retrieval: BM25 (Lucene variant) via bm25s."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from esgexp.core.records import Passage
from esgexp.core.rules import Choice, Number
from esgexp.retrieval.base import Hit, Retriever, top_k

TOKEN_PATTERN = r"(?u)\b\w+\b"


class BM25Retriever(Retriever):
    """BM25 with Lucene's scoring (bm25s ``method="lucene"``): a passage scores, summed over the query's
    terms, ``ln(1 + (N - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * dl / avgdl))``.

    Text is lower-cased and split by ``token_pattern`` (default: every run of word characters, so the
    digits of "Scope 1" and "Scope 3" stay apart; bm25s's own default drops one-character tokens);
    ``stopwords`` (bm25s's English list, or None) are dropped, then ``stemmer`` (PyStemmer english, or
    None) stems the rest.
    A scoped query ranks its document's passages with the statistics (idf, average length) of the
    whole indexed corpus, as a filter does in Lucene.
    """

    rules: ClassVar[dict] = {
        "k1": Number(0),
        "b": Number(0, 1),
        "stemmer": Choice(("english",), optional=True),
        "stopwords": Choice(("english",), optional=True),
    }
    packages = ("bm25s",)

    def __init__(
        self,
        name: str = "bm25",
        k1: float = 1.5,
        b: float = 0.75,
        stemmer: str | None = "english",
        stopwords: str | None = "english",
        token_pattern: str = TOKEN_PATTERN,
    ) -> None:
        super().__init__(name)
        self.k1, self.b = float(k1), float(b)
        self.stemmer, self.stopwords, self.token_pattern = stemmer, stopwords, token_pattern
        self._bm25: Any = None

    def settings(self) -> dict[str, Any]:
        return {
            "method": "lucene",
            "k1": self.k1,
            "b": self.b,
            "stemmer": self.stemmer,
            "stopwords": self.stopwords,
            "token_pattern": self.token_pattern,
        }

    def tokenize(self, texts: list[str], return_ids: bool = True) -> Any:
        """bm25s tokens with this retriever's settings: a ``Tokenized`` (ids, vocabulary), or token lists."""
        import bm25s

        stemmer = None
        if self.stemmer:
            import Stemmer

            stemmer = Stemmer.Stemmer(self.stemmer)
        return bm25s.tokenize(
            texts,
            stopwords=self.stopwords,
            stemmer=stemmer,
            token_pattern=self.token_pattern,
            return_ids=return_ids,
            show_progress=False,
        )

    def build_index(self, passages: list[Passage]) -> None:
        import bm25s

        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        self._bm25.index(self.tokenize([p.text for p in passages]), show_progress=False)

    def save_index(self, directory: Path) -> None:
        self._bm25.save(str(directory), show_progress=False)

    def load_index(self, directory: Path) -> None:
        import bm25s

        self._bm25 = bm25s.BM25.load(str(directory), show_progress=False)

    def _search(self, queries: list[str], k: int, scopes: list[str | None]) -> list[list[Hit]]:
        results = []
        for tokens, doc in zip(self.tokenize(queries, return_ids=False), scopes):
            rows = self.rows(doc)
            scores = self._bm25.get_scores_from_ids(self._bm25.get_tokens_ids(tokens))
            if rows is not None:
                scores = scores[rows]
            best = top_k(scores, k)
            results.append(self._hits(best if rows is None else rows[best], scores[best]))
        return results
