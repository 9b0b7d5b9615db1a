"""Indexes saved on disk, keyed by corpus and retriever settings, and the retriever factory."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esgexp.errors import UserError
from esgexp.records import Passage, passages_hash
from esgexp.retrieval.base import Retriever

log = logging.getLogger(__name__)

# Bump when a saved index's layout changes: every old entry then misses.
FORMAT = 1


class IndexCache:
    """Indexes under ``<cache_dir>/retrieval/<name>-<key>``.

    ``key``: sha256 of the corpus hash, the retriever class and its ``settings()`` (the knobs the
    index depends on: search-time knobs such as a dense backend share one entry). A hit loads the
    index instead of building it; a miss builds it and saves it (written aside, then renamed into
    place) with ``ids.json`` (the passage ids in row order, checked on every hit) and ``settings.json``.
    """

    def __init__(self, cache_dir: str | Path, corpus_hash: str) -> None:
        self.root = Path(cache_dir) / "retrieval"
        self.corpus_hash = corpus_hash

    def directory(self, retriever: Retriever) -> Path:
        cls = type(retriever)
        spec = {
            "format": FORMAT,
            "corpus": self.corpus_hash,
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "settings": retriever.settings(),
        }
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:16]
        return self.root / f"{retriever.name}-{key}"

    def load_or_build(self, retriever: Retriever) -> None:
        """Load ``retriever``'s saved index, or build and save it."""
        path = self.directory(retriever)
        ids = [p.id for p in retriever.passages]
        if path.is_dir():
            try:
                cached_ids = json.loads((path / "ids.json").read_text(encoding="utf-8"))
                if cached_ids == ids:
                    retriever.load_index(path)
            except (OSError, ValueError) as error:  # an entry cut short or from an older layout
                log.warning(
                    "retriever %s: the cached index %s is unreadable (%s); rebuilding it", retriever.name, path, error
                )
                shutil.rmtree(path, ignore_errors=True)
            else:
                if cached_ids != ids:
                    raise UserError(
                        f"retriever {retriever.name}: the cached index {path} holds other passages; corpus hash {self.corpus_hash!r} names two corpora"
                    )
                log.info("retriever %s: reusing the index in %s", retriever.name, path)
                return
        retriever.build_index(retriever.passages)
        partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
        partial.mkdir(parents=True, exist_ok=True)
        retriever.save_index(partial)
        (partial / "ids.json").write_text(json.dumps(ids), encoding="utf-8")
        (partial / "settings.json").write_text(
            json.dumps({"corpus": self.corpus_hash, **retriever.settings()}, indent=2), encoding="utf-8"
        )
        try:
            partial.rename(path)
        except OSError:  # another process saved the same index first
            shutil.rmtree(partial)
        log.info("retriever %s: index saved in %s", retriever.name, path)


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
