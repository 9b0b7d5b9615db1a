"""Retrieval metrics from ranked ids and graded or page-level gold."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from esgexp.errors import UserError


def page_recall_at_k(
    retrieved_pages: Sequence[Sequence[int]], gold_pages: Sequence[Collection[int]], k: int
) -> list[float]:
    """Per item 1.0 when a gold page is among the first ``k`` retrieved pages, else 0.0.

    Pages are compared as given (ESGBench uses 0-based page indexes on both sides)."""
    if len(retrieved_pages) != len(gold_pages):
        raise ValueError(f"{len(retrieved_pages)} retrieved lists for {len(gold_pages)} gold sets")
    return [1.0 if set(pages[:k]) & set(gold) else 0.0 for pages, gold in zip(retrieved_pages, gold_pages)]


def _check_inputs(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], ks: Sequence[int], threshold: int
) -> None:
    if threshold not in (1, 2, 3):
        raise UserError(f"retrieval metrics: threshold must be 1, 2 or 3, got {threshold!r}")
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise UserError(f"retrieval metrics: ks must be positive integers, got {list(ks)!r}")
    if set(rankings) != set(qrels):
        missing = sorted(set(qrels) - set(rankings))[:3] or sorted(set(rankings) - set(qrels))[:3]
        raise UserError(
            f"retrieval metrics: rankings and qrels must cover the same queries; e.g. {missing} is in only one"
        )
    for qid, ranking in rankings.items():
        if len(set(ranking)) != len(ranking):
            raise UserError(f"retrieval metrics: the ranking of query {qid!r} lists a passage more than once")


def per_query_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    ks: Sequence[int] = (5, 10, 15),
    threshold: int = 2,
) -> dict[str, dict[str, float]]:
    """Per query: ``n_relevant``, ``rr`` (reciprocal rank of the first relevant passage in the whole
    ranking, 0 when none) and for each K ``retrieved@K``, ``tp@K``, ``recall@K``, ``precision@K``,
    ``f1@K`` and ``ndcg@K``.

    A passage is relevant when its grade is >= ``threshold``. nDCG@K = DCG@K / ideal DCG@K with
    gain = grade of a relevant passage (0 below the threshold; threshold 1 gives the usual graded
    nDCG) and discount log2(rank + 1); the ideal ranking sorts the query's qrels by grade.
    Precision of an empty ranking is 0. A query without a relevant passage gets NaN (undefined)
    for recall, F1, nDCG and ``rr``.
    """
    _check_inputs(rankings, qrels, ks, threshold)
    nan = float("nan")
    out: dict[str, dict[str, float]] = {}
    for qid, ranking in rankings.items():
        gains = {pid: grade for pid, grade in qrels[qid].items() if grade >= threshold}
        ideal = sorted(gains.values(), reverse=True)
        first = next((rank for rank, pid in enumerate(ranking, start=1) if pid in gains), None)
        values: dict[str, float] = {"n_relevant": len(gains), "rr": (1.0 / first if first else 0.0) if gains else nan}
        for k in ks:
            top = ranking[:k]
            tp = sum(pid in gains for pid in top)
            precision = tp / len(top) if top else 0.0
            recall = tp / len(gains) if gains else nan
            dcg = sum(gains.get(pid, 0) / math.log2(rank + 1) for rank, pid in enumerate(top, start=1))
            idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal[:k], start=1))
            values.update(
                {
                    f"retrieved@{k}": len(top),
                    f"tp@{k}": tp,
                    f"recall@{k}": recall,
                    f"precision@{k}": precision,
                    f"f1@{k}": _f1(precision, recall) if gains else nan,
                    f"ndcg@{k}": dcg / idcg if gains else nan,
                }
            )
        out[qid] = values
    return out


def retrieval_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    n_candidates: Mapping[str, int],
    ks: Sequence[int] = (5, 10, 15),
    threshold: int = 2,
    per_query: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, float]:
    """Run-level retrieval metrics over ``rankings`` (query id -> passage ids, best first).

    ``qrels``: graded relevance (0-3) per query and passage; relevant means grade >= ``threshold``.
    ``n_candidates``: how many passages each query was ranked among (its document's passages).

    - ``recall@K``, ``precision@K``, ``f1@K``: pooled over all (passage, query) pairs as in
      ClimRetrieve: sum of hits in the top K / sum of relevant passages, sum of hits / sum of passages
      retrieved, and the F1 of those two. Every query counts, with or without a relevant passage.
    - ``macro/recall@K``, ``macro/precision@K``, ``macro/f1@K``, ``ndcg@K``, ``mrr``: per-query values
      (see ``per_query_metrics``) averaged over the queries WITH a relevant passage; queries without
      one are left out of these (counted in ``n_queries_without_relevant``).
    - ``random/recall@K``, ``random/precision@K``, ``random/f1@K``: the expected values for a
      uniformly random ranking of each query's N candidates with R relevant, pooled the same way:
      expected hits R * min(K, N) / N, passages retrieved min(K, N).

    A value without any query to define it (no relevant passage anywhere) is NaN. ``per_query``:
    ``per_query_metrics`` of the same arguments, when the caller has it already.
    """
    if per_query is None:
        per_query = per_query_metrics(rankings, qrels, ks, threshold)
    for qid, values in per_query.items():
        n, least = n_candidates.get(qid), max(1, values["n_relevant"], len(rankings[qid]))
        if n is None or n < least:
            raise UserError(
                f"retrieval metrics: query {qid!r} needs n_candidates >= {least} (its relevant and ranked passages), got {n!r}"
            )
    with_relevant = [v for v in per_query.values() if v["n_relevant"]]
    relevant = sum(v["n_relevant"] for v in per_query.values())
    summary: dict[str, float] = {
        "n_queries": len(per_query),
        "n_queries_without_relevant": len(per_query) - len(with_relevant),
        "mrr": _mean([v["rr"] for v in with_relevant]),
    }
    for k in ks:
        tp = sum(v[f"tp@{k}"] for v in per_query.values())
        retrieved = sum(v[f"retrieved@{k}"] for v in per_query.values())
        expected_tp = sum(v["n_relevant"] * min(k, n_candidates[q]) / n_candidates[q] for q, v in per_query.items())
        expected_retrieved = sum(min(k, n_candidates[q]) for q in per_query)
        for prefix, hits, count in (("", tp, retrieved), ("random/", expected_tp, expected_retrieved)):
            precision = _ratio(hits, count)
            recall = _ratio(hits, relevant)
            summary.update(
                {
                    f"{prefix}recall@{k}": recall,
                    f"{prefix}precision@{k}": precision,
                    f"{prefix}f1@{k}": _f1(precision, recall),
                }
            )
        for name in ("recall", "precision", "f1"):
            summary[f"macro/{name}@{k}"] = _mean([v[f"{name}@{k}"] for v in with_relevant])
        summary[f"ndcg@{k}"] = _mean([v[f"ndcg@{k}"] for v in with_relevant])
    return summary


def _ratio(num: float, den: float) -> float:
    return num / den if den else float("nan")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _f1(precision: float, recall: float) -> float:
    if math.isnan(precision) or math.isnan(recall):
        return float("nan")
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0
