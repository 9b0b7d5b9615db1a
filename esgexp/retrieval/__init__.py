"""Passage retrieval: BM25, dense, hybrid (RRF) and oracle retrievers behind one interface.

``build_retriever(cfg.retriever, passages, cache_dir=...)`` gives an indexed retriever;
``retriever.search(queries, k, doc_scope)`` ranks passages per query. Importing this package
loads no heavy library: bm25s, sentence-transformers, torch and faiss load on first use.
"""

from esgexp.retrieval.base import Hit, Retriever
from esgexp.retrieval.cache import IndexCache, build_retriever
from esgexp.retrieval.hybrid import rrf

__all__ = ["Hit", "IndexCache", "Retriever", "build_retriever", "rrf"]
