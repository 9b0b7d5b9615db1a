"""Retrieval evaluation without generation: rank passages per query, score against graded or page-level gold.

Two kinds of gold: graded relevance per passage (ClimRetrieve: ``dataset.load()`` gives passages,
queries and candidate counts) and evidence pages (ESGBench gold over an ingested corpus: questions
scoped to their report, Recall@K of the gold 0-based page among the retrieved chunks' pages).
"""

from __future__ import annotations

import logging

from hydra.utils import instantiate
from omegaconf import DictConfig

from esgexp.core.outputs import PredictionLog
from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.eval.retrieval_metrics import (
    PAPER_KS,
    climretrieve_metrics,
    page_recall_at_k,
    per_query_metrics,
    retrieval_metrics,
)
from esgexp.eval.stats import (
    ItemScores,
    StatsSettings,
    cluster_records,
    interval_metrics,
    record_clusters,
    scored,
    with_interval,
)
from esgexp.jobs.lifecycle import Job
from esgexp.tasks.kinds import explained_queries

log = logging.getLogger(__name__)


class RetrievalJob(Job):
    """Index the passages, search every query, write rankings.jsonl and metrics.json, track the run."""

    files = ("rankings.jsonl", "skipped_rows.txt")

    def load(self) -> list[str]:
        self.stats = StatsSettings.from_node(self.cfg.stats)
        self.loaded = instantiate(self.cfg.dataset).load()
        self.ks = sorted(set(self.cfg.retrieval.ks))
        return self.loaded.skipped

    def tags(self) -> dict:
        cfg = self.cfg
        explained = explained_queries(cfg)
        return {
            "retriever": cfg.retriever.name,
            "encoder": encoder_name(cfg.retriever),
            "encoder_arithmetic": encoder_name(cfg.retriever, arithmetic=True),
            "query": cfg.query.name,
            "model": cfg.model.name if explained else None,
            "query_examples": OTHER_REPORTS if explained and cfg.query.get("examples") is not None else None,
        }

    def work(self, run) -> tuple[dict, dict]:
        cfg, loaded, ks = self.cfg, self.loaded, self.ks
        if hasattr(loaded, "queries"):
            records, metrics = graded_retrieval(cfg, loaded, ks)
        else:
            records, metrics = page_retrieval(cfg, loaded.items, ks)
        metrics["n_skipped_rows"] = len(loaded.skipped)
        cluster_key = cfg.dataset.get("cluster_key")
        intervals = interval_metrics({key: item_scores(records, key) for key in list(metrics)}, self.stats)
        tags = scored(metrics, intervals, records, cluster_key, headline_metric(ks))
        PredictionLog(self.output_dir / "rankings.jsonl").rewrite(records)
        return metrics, tags

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        rows = [("queries", str(metrics["n_queries"]))]
        rows += [(name, with_interval(metrics, name)) for name in summary_keys(metrics, self.ks)]
        if metrics["n_skipped_rows"]:
            rows.append(("skipped rows", str(metrics["n_skipped_rows"])))
        return f"{self.cfg.dataset.name} | {self.cfg.retriever.name} | query={self.cfg.query.name}", rows


def encoder_name(node, arithmetic: bool = False) -> str | None:
    """The encoder a retriever of config ``node`` embeds with, as its class says (``encoder_label``: a hybrid
    its dense half's), or with ``arithmetic`` what it computes in here (``encoder_arithmetic``); None for one
    without (bm25) or whose class this esgexp lacks."""
    from hydra.utils import get_class

    try:
        cls = get_class(str(node._target_))
    except (ImportError, AttributeError, ValueError):  # a class an older esgexp had
        return None
    return cls.encoder_arithmetic(node) if arithmetic else cls.encoder_label(node)


# Where an informed explanation's examples come from (tag query_examples): never the report being searched.
OTHER_REPORTS = "annotated passages of the other reports only (the searched report is left out)"

# The headline metric: pooled Recall@K at this K when the job has it, else at its largest K (higher is better).
HEADLINE_K = 10


def headline_metric(ks: list[int]) -> str:
    return f"recall@{HEADLINE_K if HEADLINE_K in ks else max(ks)}"


def item_scores(records: list[dict], key: str, config=None) -> ItemScores | None:
    """The per-query values behind ``key``: pooled ``recall@K`` / ``precision@K`` as hits over relevant /
    retrieved passages (a ratio of sums; ESGBench page recall: 0/1 per question), the mean of the
    per-query value for ``macro/*@K``, ``ndcg@K`` and ``mrr`` over queries with a relevant passage;
    None for any other key (baselines, counts, pooled F1)."""
    if not records:
        return None
    name, at, k = key.removeprefix("macro/").partition("@")
    pooled = not key.startswith("macro/") and name in ("recall", "precision") and at
    if "gold_pages" in records[0]:  # ESGBench page recall
        if not (pooled and name == "recall"):
            return None
        return ItemScores(
            [r["id"] for r in records],
            [r["metrics"][key] for r in records],
            "proportion",
            clusters=record_clusters(records),
        )
    if pooled:
        weights = [r["metrics"]["n_relevant" if name == "recall" else f"retrieved@{k}"] for r in records]
        values = [r["metrics"][f"tp@{k}"] for r in records]
        return ItemScores(
            [r["id"] for r in records], values, "ratio", weights=weights, clusters=record_clusters(records)
        )
    value = "rr" if key == "mrr" else f"{name}@{k}"
    if not (key == "mrr" or (at and (key.startswith("macro/") or name == "ndcg"))):
        return None
    chosen = [r for r in records if r["metrics"]["n_relevant"] and isinstance(r["metrics"].get(value), (int, float))]
    return ItemScores(
        [r["id"] for r in chosen], [r["metrics"][value] for r in chosen], "mean", clusters=record_clusters(chosen)
    )


def summary_keys(metrics: dict, ks: list[int]) -> list[str]:
    names = [
        f"{prefix}{name}@{k}"
        for k in ks
        for name, prefix in (("recall", ""), ("recall", "random/"), ("precision", ""), ("ndcg", ""))
    ]
    return [name for name in [*names, "mrr", "climretrieve/f1"] if name in metrics]


def graded_retrieval(cfg: DictConfig, data, ks: list[int]) -> tuple[list[dict], dict]:
    """ClimRetrieve: each query searches its report; pooled, macro, nDCG, MRR and the random baseline."""
    from esgexp.data.climretrieve import query_texts
    from esgexp.retrieval.factory import job_retriever

    if not data.queries:
        raise UserError(f"dataset {cfg.dataset.name!r} has no usable queries (skipped rows: {len(data.skipped)})")
    if explained_queries(cfg):  # explanations, unless the retriever ignores the query text
        from esgexp.jobs.lifecycle import job_backend
        from esgexp.retrieval.explain import explanation_queries

        with job_backend(cfg, "generate") as backend:
            explained = explanation_queries(cfg.query, data.queries, backend, cfg.seed)
        texts, backend_stats = explained.texts, explained.stats
        if cfg.query.get("examples") is not None:
            backend_stats = {**backend_stats, "query/n_uninformed": explained.n_uninformed}
    elif cfg.query.mode == "explanation":  # retriever=random: the question stands in, nothing is generated
        texts, backend_stats = {q.id: q.text for q in data.queries}, {"query/not_generated": len(data.queries)}
    else:
        texts, backend_stats = query_texts(data.queries, cfg.query.mode, cfg.query.core_questions), {}
    retriever = job_retriever(cfg.retriever, data.passages, cfg.paths.index_dir)
    search = {"gold": [ranked_gold(q.relevance) for q in data.queries]} if retriever.needs_gold else {}
    hits = retriever.search([texts[q.id] for q in data.queries], max(ks), [q.doc_scope for q in data.queries], **search)
    rankings = {q.id: [hit.passage_id for hit in found] for q, found in zip(data.queries, hits)}
    qrels = {q.id: dict(q.relevance) for q in data.queries}
    threshold = int(cfg.retrieval.threshold)
    per_query = per_query_metrics(rankings, qrels, ks, threshold)
    metrics = retrieval_metrics(rankings, qrels, data.n_candidates, ks, threshold, per_query)
    metrics.update(qtype_metrics(data, rankings, qrels, ks, threshold, per_query))
    records = [
        {
            "id": q.id,
            "doc": q.doc_scope,
            "query": texts[q.id],
            "retrieved": [
                {"id": h.passage_id, "score": h.score, "grade": q.relevance.get(h.passage_id, 0)} for h in found
            ],
            "metrics": per_query[q.id],
        }
        for q, found in zip(data.queries, hits)
    ]
    counts = {**backend_stats, **retriever.stats()}
    records = cluster_records(records, data.queries, cfg.dataset.get("cluster_key"))
    if cfg.retrieval.get("climretrieve_metric") and max(ks) < max(PAPER_KS):
        log.warning(
            "ClimRetrieve's own metric needs K = %d in retrieval.ks (it has %s): not computed", max(PAPER_KS), ks
        )
    elif cfg.retrieval.get("climretrieve_metric"):  # the ClimRetrieve paper's own P/R/F1 (eval/retrieval_metrics.py)
        settings = StatsSettings.from_node(cfg.stats)
        metrics.update(climretrieve_metrics(rankings, qrels, record_clusters(records), settings, max(ks)))
    return records, {**metrics, **counts}


def qtype_metrics(data, rankings: dict, qrels: dict, ks: list[int], threshold: int, per_query: dict) -> dict:
    """``<qtype>/<metric>`` for each question type when the queries have more than one (SustainableQA)."""
    by_type: dict[str, list[str]] = {}
    for query in data.queries:
        if "qtype" in query.meta:
            by_type.setdefault(query.meta["qtype"], []).append(query.id)
    if len(by_type) < 2:
        return {}
    metrics = {}
    for qtype, ids in by_type.items():
        part = retrieval_metrics(
            {i: rankings[i] for i in ids},
            {i: qrels[i] for i in ids},
            {i: data.n_candidates[i] for i in ids},
            ks,
            threshold,
            {i: per_query[i] for i in ids},
        )
        metrics.update({f"{qtype}/{key}": value for key, value in part.items() if not key.startswith("random/")})
    return metrics


def ranked_gold(relevance: dict[str, int]) -> list[str]:
    """Passage ids with a grade above 0, highest grade first (the oracle's ranking)."""
    return [pid for pid, grade in sorted(relevance.items(), key=lambda kv: (-kv[1], kv[0])) if grade > 0]


def page_retrieval(cfg: DictConfig, items: list[QAItem], ks: list[int]) -> tuple[list[dict], dict]:
    """ESGBench: questions search their own report in an ingested corpus; Recall@K of the gold page."""
    from esgexp.data.corpus import Corpus
    from esgexp.retrieval.factory import job_retriever
    from esgexp.strategies.rag import item_doc

    if cfg.query.mode != "question":
        raise UserError(
            f"query={cfg.query.mode} is a ClimRetrieve formulation; ESGBench retrieval searches with the question (query=question)"
        )
    corpus = Corpus.load(cfg.retrieval.corpus)
    known = set(corpus.doc_ids)
    usable = [item for item in items if item_doc(item) in known]
    missing = sorted({str(item_doc(item)) for item in items} - known)
    if missing:
        log.warning(
            "%d report(s) are not in the corpus %s: their questions are not evaluated (%s)",
            len(missing),
            cfg.retrieval.corpus,
            ", ".join(repr(doc) for doc in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
        )
    if not usable:
        raise UserError(
            f"no question's report is in the corpus {cfg.retrieval.corpus} ({len(known)} docs, e.g. {sorted(known)[:3]})"
        )
    retriever = job_retriever(cfg.retriever, corpus.passages, cfg.paths.index_dir)
    by_id = {p.id: p for p in corpus.passages}
    gold = [item.meta["evidence_pages"] for item in usable]
    search = {}
    if retriever.needs_gold:
        search["gold"] = [corpus.on_pages(item_doc(item), pages) for item, pages in zip(usable, gold)]
    hits = retriever.search([item.question for item in usable], max(ks), [item_doc(item) for item in usable], **search)
    metrics: dict = {"n_queries": len(usable), "n_missing_reports": len(items) - len(usable), **retriever.stats()}
    per_query: list[dict] = [{} for _ in usable]
    for k in ks:
        # The 0-based pages of the first k chunks, in rank order (a chunk over two pages gives both).
        pages = [[i for hit in found[:k] for i in by_id[hit.passage_id].page_indexes] for found in hits]
        values = page_recall_at_k(pages, gold, k=max(map(len, pages), default=0))
        metrics[f"recall@{k}"] = sum(values) / len(values)
        for values_of_query, value in zip(per_query, values):
            values_of_query[f"recall@{k}"] = value
    records = [
        {
            "id": item.id,
            "doc": item_doc(item),
            "query": item.question,
            "gold_pages": item.meta["evidence_pages"],
            "retrieved": [
                {"id": h.passage_id, "score": h.score, "pages": list(by_id[h.passage_id].page_indexes)} for h in found
            ],
            "metrics": values,
        }
        for item, found, values in zip(usable, hits, per_query)
    ]
    return cluster_records(records, usable, cfg.dataset.get("cluster_key")), metrics
