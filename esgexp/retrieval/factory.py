"""A retriever from its config node: the ``_target_`` class instantiated (hybrid builds its halves from its
own nested nodes), wrapped in the cross-encoder second stage when the node sets ``rerank`` (rerank.py builds
it from the node's own keys), then indexed, its index kept in the index cache (esgexp/retrieval/cache.py).

What the rest of esgexp asks of a retriever node, it asks here, and here the classes answer: the rules of
its settings, why it could not run here, the packages whose version matters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esgexp.core.records import Passage, passages_hash
from esgexp.core.rules import Rule, declared_rules
from esgexp.errors import UserError
from esgexp.retrieval.base import Retriever
from esgexp.retrieval.cache import IndexCache
from esgexp.retrieval.rerank import RerankedRetriever


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
    retriever = spec if isinstance(spec, Retriever) else from_node(spec)
    cache = None if cache_dir is None else IndexCache(cache_dir, corpus_hash or passages_hash(passages))
    retriever.index(passages, cache)
    return retriever


def from_node(node: Mapping[str, Any]) -> Retriever:
    """The (not yet indexed) retriever a config node builds: its first stage, reranked when it says so."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    first_node = first_stage(node)
    try:
        retriever = instantiate(first_node) if "_target_" in first_node else None
        if isinstance(retriever, Retriever) and RerankedRetriever.applies(node):
            retriever = RerankedRetriever.from_node(retriever, node)
    except InstantiationException as error:  # a bad setting: the retriever's own message
        if isinstance(error.__cause__, UserError):
            raise error.__cause__ from None
        raise
    if not isinstance(retriever, Retriever):
        raise UserError(f"retriever config must name a Retriever class in _target_, got {first_node.get('_target_')!r}")
    missing = [message for cls, _ in component_classes(node) for message in cls.missing_requirements()]
    if missing:  # its constructor imports nothing heavy: the first search would
        raise UserError(missing[0])
    return retriever


def first_stage(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A retriever node without the second stage's keys (``rerank``, ``rerank_depth``); a node without them
    comes back as it is."""
    if not any(key in node for key in RerankedRetriever.keys):
        return node
    from omegaconf import DictConfig, OmegaConf

    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    return {k: v for k, v in plain.items() if k not in RerankedRetriever.keys}


def component_classes(node) -> list[tuple[type[Retriever], Any]]:
    """Each class a retriever node builds, with its node: the node's ``_target_``, those of the nodes nested in
    it (a hybrid's ``bm25`` and ``dense``), and the second stage (with the whole node) when it sets ``rerank``."""
    from hydra.utils import get_class
    from omegaconf import DictConfig

    found = []
    if node.get("_target_"):
        found.append((get_class(str(node["_target_"])), node))
    for _, child in node.items_ex(resolve=False) if isinstance(node, DictConfig) else node.items():
        if isinstance(child, (dict, DictConfig)):
            found += component_classes(child)
    if RerankedRetriever.applies(node):
        found.append((RerankedRetriever, node))
    return found


def reads_query(node) -> bool:
    """Whether the retriever a node builds ranks by the query text (False for ``retriever=random`` alone)."""
    return any(cls.reads_query for cls, _ in component_classes(node))


def retriever_rules(node, prefix: str = "retriever.") -> dict[str, Rule]:
    """The rules of a retriever node's settings, keyed ``prefix + key``: its classes' (a hybrid's halves' at
    ``retriever.bm25.<key>``...) and the second stage's, which any retriever node may set."""
    return {**declared_rules(node, prefix), **{prefix + key: rule for key, rule in RerankedRetriever.rules.items()}}


def preflight(node) -> list[str]:
    """Why the retriever a node builds could not run here now: an optional module not installed, and what each
    of its classes' ``preflight`` finds (an encoder not on disk, a key not set). Nothing is loaded or sent."""
    return [
        problem for cls, part in component_classes(node) for problem in cls.missing_requirements() + cls.preflight(part)
    ]


def packages(node) -> tuple[str, ...]:
    """The packages whose version can change the rankings of the retriever a node builds (its classes'; none
    when a ``_target_`` names no class: that is reported where the retriever is built)."""
    try:
        classes = component_classes(node)
    except (ImportError, AttributeError, ValueError):
        return ()
    return tuple(dict.fromkeys(name for cls, _ in classes for name in cls.packages))


def job_retriever(node: Mapping[str, Any], passages: Sequence[Passage], index_dir: str | Path) -> Retriever:
    """A job's retriever from its config node (``cfg.retriever``) over ``passages``, its index cached in
    ``index_dir`` (``paths.index_dir``); what else it needs (a request cache) its node names itself."""
    return build_retriever(node, passages, cache_dir=index_dir)
