"""Retrieval for strategy=rag: passages per item with citation markers, and what was retrieved.

Each item's record keeps the retrieved passage ids, pages and scores and whether its gold evidence
was among them, so a wrong answer can be put down to a retrieval miss or a generation miss.
"""

from __future__ import annotations

import logging
import unicodedata

from omegaconf import DictConfig

from esgexp.core.records import Passage
from esgexp.errors import UserError

log = logging.getLogger(__name__)


def item_doc(item) -> str | None:
    """The report an item is about (its loader's ``doc_id``), NFC as corpus doc ids are."""
    return None if not item.doc_id else unicodedata.normalize("NFC", str(item.doc_id))


def dataset_passages(items: list) -> tuple[list[Passage], dict[str, list[str]]]:
    """A corpus of the items' own passages (one passage per distinct text of a report) and each item's gold ids."""
    passages: dict[tuple[str, str], Passage] = {}
    gold: dict[str, list[str]] = {}
    for item in items:
        doc = item_doc(item) or "dataset"
        page = item.page or 0
        gold[item.id] = []
        for text in item.context:
            key = (doc, text.strip())
            if not key[1]:
                continue
            if key not in passages:
                passages[key] = Passage(f"{doc}#{len(passages)}", doc, key[1], page, page)
            gold[item.id].append(passages[key].id)
    if not passages:
        raise UserError(
            "strategy.corpus=dataset needs items with passages; this dataset has none (give an ingested corpus)"
        )
    return list(passages.values()), gold


def corpus_passages(path: str, items: list) -> tuple[list[Passage], dict[str, list[str]]]:
    """An ingested corpus; an item's gold are the passages on its evidence pages (0-based) of its report."""
    from esgexp.data.corpus import Corpus

    corpus = Corpus.load(path)
    return corpus.passages, {
        item.id: corpus.on_pages(item_doc(item), item.meta.get("evidence_pages") or ()) for item in items
    }


def cite(passage: Passage, template: str) -> str:
    """``[doc p.N] text``; passages without a known page (0) cite the document alone."""
    if passage.page_start == 0:
        return f"[{passage.doc_id}] {passage.text}"
    return template.format(doc=passage.doc_id, pages=passage.page_span, text=passage.text)


def retrieve_for_items(
    strategy: DictConfig, retriever_node: DictConfig, index_dir: str, items: list
) -> tuple[dict[str, list[str]], dict[str, dict]]:
    """Per item: the formatted top-k passages (the ``strategy`` node's corpus, scope, top_k, passage_format;
    the ``retriever`` node's retriever, its index cached under ``index_dir``), and the record of what was retrieved."""
    from esgexp.retrieval.factory import job_retriever

    if strategy.corpus == "dataset":
        passages, gold = dataset_passages(items)
    else:
        passages, gold = corpus_passages(strategy.corpus, items)
    known_docs = {p.doc_id for p in passages}
    scopes = [item_doc(item) if strategy.scope == "doc" else None for item in items]
    searchable = [i for i, doc in enumerate(scopes) if doc is None or doc in known_docs]
    missing = sorted({str(doc) for doc in scopes if doc is not None and doc not in known_docs})
    if missing:
        log.warning(
            "strategy.scope=doc: %d report(s) not in the corpus (%d docs), their questions get no passage: %s",
            len(missing),
            len(known_docs),
            ", ".join(missing[:10]),
        )
    retriever = job_retriever(retriever_node, passages, index_dir)
    chosen_items = [items[i] for i in searchable]
    extra = {"gold": [gold[item.id] for item in chosen_items]} if retriever.needs_gold else {}
    hits = retriever.search(
        [item.question for item in chosen_items], strategy.top_k, [scopes[i] for i in searchable], **extra
    )
    found_by_id = {item.id: found for item, found in zip(chosen_items, hits)}
    by_id = {p.id: p for p in passages}
    texts, records = {}, {}
    for item, doc in zip(items, scopes):
        if item.id not in found_by_id:
            texts[item.id] = []
            records[item.id] = {"passages": [], "gold_retrieved": None, "missing_report": doc}
            continue
        found = found_by_id[item.id]
        chosen = [by_id[hit.passage_id] for hit in found]
        texts[item.id] = [cite(p, strategy.passage_format) for p in chosen]
        records[item.id] = {
            "passages": [
                {"id": p.id, "doc": p.doc_id, "pages": p.page_span, "score": hit.score} for p, hit in zip(chosen, found)
            ],
            "gold_retrieved": bool(set(gold[item.id]) & {p.id for p in chosen}) if gold[item.id] else None,
        }
    return texts, records


def attribution_metrics(records: list[dict]) -> dict[str, float]:
    """Over the items with gold evidence and a right/wrong verdict: how often the gold was retrieved,
    and the share of items wrong with the gold missing (retrieval miss) or present (generation miss)."""
    judged = [r for r in records if r.get("retrieval", {}).get("gold_retrieved") is not None]
    out: dict[str, float] = {
        "rag/n_with_gold": len(judged),
        "rag/n_missing_report": sum(1 for r in records if r.get("retrieval", {}).get("missing_report")),
    }
    if not judged:
        return out
    out["rag/gold_retrieved_rate"] = sum(r["retrieval"]["gold_retrieved"] for r in judged) / len(judged)
    verdicts = [r for r in judged if "correct" in r]
    if verdicts:
        wrong = [r for r in verdicts if not r["correct"]]
        out["rag/retrieval_miss_rate"] = sum(not r["retrieval"]["gold_retrieved"] for r in wrong) / len(verdicts)
        out["rag/generation_miss_rate"] = sum(r["retrieval"]["gold_retrieved"] for r in wrong) / len(verdicts)
    return out
