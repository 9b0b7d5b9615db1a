"""Passage retrieval behind one interface: BM25, bi-encoders (dense.py), late interaction (late.py),
OpenAI-compatible embeddings (embeddings.py), the random baseline, hybrid (RRF), the oracle, and a
cross-encoder second stage (rerank.py); docs/retrieval.md lists their configs.

``build_retriever(cfg.retriever, passages, cache_dir=...)`` gives an indexed retriever;
``retriever.search(queries, k, doc_scope)`` ranks passages per query. Importing this package
loads no heavy library: bm25s, sentence-transformers, transformers, torch and faiss load on first use.
"""

from esgexp.retrieval.base import Hit, Retriever
from esgexp.retrieval.cache import IndexCache
from esgexp.retrieval.factory import build_retriever
from esgexp.retrieval.hybrid import rrf

__all__ = ["Hit", "IndexCache", "Retriever", "build_retriever", "rrf"]
