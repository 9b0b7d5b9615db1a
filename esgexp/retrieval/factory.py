"""A retriever from its config node: the ``_target_`` class instantiated (hybrid builds its halves from its
own nested nodes), a second stage when the node names a cross-encoder (``rerank``), then indexed, its index
kept in the index cache (esgexp/retrieval/cache.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esgexp.core.records import Passage, passages_hash
from esgexp.errors import UserError
from esgexp.retrieval.base import Retriever
from esgexp.retrieval.cache import IndexCache


def build_retriever(
    spec: Retriever | Mapping[str, Any],
    passages: Sequence[Passage],
    corpus_hash: str | None = None,
    cache_dir: str | Path | None = None,
) -> Retriever:
    """An indexed retriever from a config (``conf/retriever/*.yaml``, with ``_target_``) or an instance.

    With ``cache_dir`` the index is loaded from / saved to an ``IndexCache``; ``corpus_hash``
    identifies the corpus (default: ``passages_hash(passages)``, as in the corpus's report.json).
    """
    if isinstance(spec, Retriever):
        retriever = spec
    else:
        from hydra.errors import InstantiationException
        from hydra.utils import instantiate

        spec, rerank = without_rerank(spec)
        try:
            retriever = instantiate(spec) if "_target_" in spec else None
            if isinstance(retriever, Retriever) and rerank.get("rerank"):
                from esgexp.retrieval.rerank import RerankedRetriever

                depth, device = rerank.get("rerank_depth", 50), spec.get("device", "auto")
                retriever = RerankedRetriever(retriever, rerank["rerank"], depth=depth, device=device)
        except InstantiationException as error:  # a bad setting: the retriever's own message
            if isinstance(error.__cause__, UserError):
                raise error.__cause__ from None
            raise
        if not isinstance(retriever, Retriever):
            raise UserError(f"retriever config must name a Retriever class in _target_, got {spec.get('_target_')!r}")
    cache = None if cache_dir is None else IndexCache(cache_dir, corpus_hash or passages_hash(passages))
    retriever.index(passages, cache)
    return retriever


RERANK_KEYS = ("rerank", "rerank_depth")


def without_rerank(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """A retriever node without its second-stage keys (``rerank``: a cross-encoder, ``rerank_depth``), and
    those keys; a node without them comes back as it is."""
    if not any(key in spec for key in RERANK_KEYS):
        return spec, {}
    from omegaconf import DictConfig, OmegaConf

    plain = OmegaConf.to_container(spec, resolve=True) if isinstance(spec, DictConfig) else dict(spec)
    return {k: v for k, v in plain.items() if k not in RERANK_KEYS}, {k: plain[k] for k in RERANK_KEYS if k in plain}


def job_retriever(node: Mapping[str, Any], passages: Sequence[Passage], index_dir: str | Path) -> Retriever:
    """A job's retriever from its config node (``cfg.retriever``) over ``passages``, its index cached in
    ``index_dir`` (``paths.index_dir``); what else it needs (a request cache) its node names itself."""
    return build_retriever(node, passages, cache_dir=index_dir)
