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


# ClimRetrieve's own analysis (Experiments/analyse_results.py in its repository): every (paragraph, question) row
# of a searched report is a binary prediction, "in the top K", against relevance >= 2, scored with scikit-learn's
# precision, recall and F1 over all rows at once; Table R.1 averages the F1 over K = 5, 10, 15.
PAPER_KS = (5, 10, 15)
PAPER_THRESHOLD = 2
PAPER_PREFIX = "climretrieve/"


def climretrieve_counts(
    rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, list[float]]:
    """Per query the counts the paper's metric pools: hits and passages retrieved at each K of PAPER_KS, then
    the relevant passages (grade >= PAPER_THRESHOLD)."""
    per_query = per_query_metrics(rankings, qrels, PAPER_KS, PAPER_THRESHOLD)
    return {
        qid: [v for k in PAPER_KS for v in (values[f"tp@{k}"], values[f"retrieved@{k}"])] + [values["n_relevant"]]
        for qid, values in per_query.items()
    }


def climretrieve_values(sums: Sequence[float], ks: Sequence[int] = PAPER_KS) -> dict[str, float]:
    """The paper's metrics from pooled counts (hits and retrieved at each of ``ks``, then relevant: summed
    ``climretrieve_counts``): ``precision@K``, ``recall@K``, ``f1@K`` = 2 hits / (retrieved + relevant) as
    scikit-learn computes them (0 with nothing to divide), and, over the paper's K = 5, 10, 15, ``f1``, their mean
    (a Table R.1 cell); keys prefixed ``climretrieve/``."""
    relevant = sums[-1]
    out: dict[str, float] = {}
    for i, k in enumerate(ks):
        tp, retrieved = sums[2 * i], sums[2 * i + 1]
        out[f"{PAPER_PREFIX}precision@{k}"] = tp / retrieved if retrieved else 0.0
        out[f"{PAPER_PREFIX}recall@{k}"] = tp / relevant if relevant else 0.0
        out[f"{PAPER_PREFIX}f1@{k}"] = 2 * tp / (retrieved + relevant) if retrieved + relevant else 0.0
    if tuple(ks) == PAPER_KS:
        out[f"{PAPER_PREFIX}f1"] = sum(out[f"{PAPER_PREFIX}f1@{k}"] for k in PAPER_KS) / len(PAPER_KS)
    return out


def climretrieve_metrics(
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    clusters: Sequence[str] | None,
    settings,
    searched_k: int = max(PAPER_KS),
) -> dict:
    """The ClimRetrieve paper's metrics (``climretrieve_values``) with a percentile bootstrap interval each
    (queries resampled, or whole ``clusters``; ``settings``: an esgexp.eval.stats.StatsSettings). The rankings must
    go down to K = 15 (``searched_k``: how deep they were searched)."""
    if searched_k < max(PAPER_KS):
        raise UserError(
            f"the ClimRetrieve metric (retrieval.climretrieve_metric) needs rankings down to K = {max(PAPER_KS)}: "
            f"set retrieval.ks to include {max(PAPER_KS)} (they reach {searched_k})"
        )
    counts = climretrieve_counts(rankings, qrels)
    return pooled_climretrieve([counts[qid] for qid in rankings], clusters, settings)


def pooled_climretrieve(
    rows: Sequence[Sequence[float]], clusters: Sequence[str] | None, settings, ks: Sequence[int] = PAPER_KS
) -> dict:
    """``climretrieve_values`` of the summed per-query ``rows`` (hits and retrieved at each of ``ks``, then
    relevant), each with a percentile bootstrap interval (queries resampled, or whole ``clusters``)."""
    from esgexp.eval.stats import statistic_interval

    metrics: dict = {}
    for key in climretrieve_values([0.0] * (2 * len(ks) + 1), ks):
        found = statistic_interval(rows, lambda sums, key=key: climretrieve_values(sums, ks)[key], clusters, settings)
        metrics[key] = found.estimate
        metrics.update(found.as_metrics(key))
    return metrics
