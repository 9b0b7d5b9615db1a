"""Retrieval metrics against hand-computed values (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest

from esgexp.errors import UserError
from esgexp.eval.retrieval_metrics import page_recall_at_k, per_query_metrics, retrieval_metrics

L3 = math.log2(3)  # the rank-2 discount
QRELS = {
    "q1": {"a": 3, "b": 2, "c": 1, "d": 0},  # relevant at threshold 2: a, b
    "q2": {"e": 2, "f": 2, "g": 2, "h": 3},  # relevant: e, f, g, h
    "q3": {"i": 1},  # nothing relevant at threshold 2
}
RANKINGS = {"q1": ["c", "a", "x", "b"], "q2": ["e", "y", "z", "f"], "q3": ["i", "j"]}
N_CANDIDATES = {"q1": 10, "q2": 8, "q3": 5}


@pytest.fixture(scope="module")
def metrics():
    return retrieval_metrics(RANKINGS, QRELS, N_CANDIDATES, ks=(2, 3), threshold=2)


def test_counts_and_mrr(metrics):
    assert metrics["n_queries"] == 3 and metrics["n_queries_without_relevant"] == 1
    # q1: first relevant (a) at rank 2 -> 1/2; q2: e at rank 1 -> 1; q3 left out
    assert metrics["mrr"] == pytest.approx(0.75)


def test_pooled_and_macro_differ(metrics):
    # @2: q1 [c, a] 1 hit of 2 relevant; q2 [e, y] 1 hit of 4 relevant; q3 [i, j] 0 hits, 0 relevant.
    # pooled: hits 2, relevant 2 + 4 + 0 = 6, retrieved 2 + 2 + 2 = 6 -> R = P = F1 = 1/3
    assert metrics["recall@2"] == pytest.approx(1 / 3)
    assert metrics["precision@2"] == pytest.approx(1 / 3)
    assert metrics["f1@2"] == pytest.approx(1 / 3)
    # macro over q1, q2: R = (1/2 + 1/4) / 2 = 0.375, P = (1/2 + 1/2) / 2 = 0.5,
    # F1 = (0.5 + 2 * 0.5 * 0.25 / 0.75) / 2 = (1/2 + 1/3) / 2 = 5/12
    assert metrics["macro/recall@2"] == pytest.approx(0.375)
    assert metrics["macro/precision@2"] == pytest.approx(0.5)
    assert metrics["macro/f1@2"] == pytest.approx(5 / 12)


def test_pooled_and_macro_at_3(metrics):
    # @3: hits still 1 + 1 + 0 = 2; retrieved 3 + 3 + 2 (q3's ranking holds 2) = 8:
    # R = 2/6, P = 2/8, F1 = 2 * (1/3)(1/4) / (7/12) = 2/7
    assert (metrics["recall@3"], metrics["precision@3"], metrics["f1@3"]) == pytest.approx((1 / 3, 1 / 4, 2 / 7))
    # per query: q1 P 1/3, R 1/2, F1 0.4; q2 P 1/3, R 1/4, F1 2/7
    assert (metrics["macro/recall@3"], metrics["macro/precision@3"], metrics["macro/f1@3"]) == pytest.approx(
        (0.375, 1 / 3, (0.4 + 2 / 7) / 2)
    )


def test_graded_ndcg(metrics):
    # q1 @2: [c (grade 1 < 2: gain 0), a (3)] -> DCG = 3/log2(3); ideal [3, 2] -> 3 + 2/log2(3)
    # q2 @2: [e (2), y] -> DCG = 2; ideal [3, 2] -> 3 + 2/log2(3)
    q1_2, q2_2 = (3 / L3) / (3 + 2 / L3), 2 / (3 + 2 / L3)
    assert (q1_2, q2_2) == pytest.approx((0.444123, 0.469279), abs=1e-6)  # 1.892789 / 4.261860, 2 / 4.261860
    assert metrics["ndcg@2"] == pytest.approx((q1_2 + q2_2) / 2)
    # @3: q1 unchanged (x is not relevant, only 2 relevant for the ideal);
    # q2 [e, y, z] -> DCG 2; ideal [3, 2, 2] -> 3 + 2/log2(3) + 2/log2(4) = 5.261860
    assert metrics["ndcg@3"] == pytest.approx((q1_2 + 2 / (3 + 2 / L3 + 1)) / 2)


def test_random_baseline_closed_form(metrics):
    # expected hits R * min(K, N) / N; @2: q1 2 * 2/10 = 0.4, q2 4 * 2/8 = 1.0, q3 0 -> 1.4
    # recall 1.4 / 6, precision 1.4 / (2 + 2 + 2)
    assert (metrics["random/recall@2"], metrics["random/precision@2"], metrics["random/f1@2"]) == pytest.approx(
        (1.4 / 6, 1.4 / 6, 1.4 / 6)
    )
    # @3: 2 * 3/10 + 4 * 3/8 = 0.6 + 1.5 = 2.1 -> recall 0.35, precision 2.1 / min(3, N) summed (3 + 3 + 3), F1 = 2 * 0.35 * (7/30) / (0.35 + 7/30) = 0.28
    assert (metrics["random/recall@3"], metrics["random/precision@3"], metrics["random/f1@3"]) == pytest.approx(
        (0.35, 2.1 / 9, 0.28)
    )


def test_random_baseline_with_k_above_the_candidates():
    # N = 2 < K = 5: a random ranking retrieves both candidates, so the one relevant passage always
    m = retrieval_metrics({"q": ["b", "a"]}, {"q": {"a": 2}}, {"q": 2}, ks=(5,))
    assert (m["random/recall@5"], m["random/precision@5"]) == (1.0, 0.5)
    assert (m["recall@5"], m["precision@5"], m["mrr"]) == (1.0, 0.5, 0.5)


@pytest.mark.parametrize(
    ("threshold", "recall", "ndcg", "mrr"),
    [
        # threshold 1: q1 relevant a, b, c; [c, a] hits 2 of 3; DCG 1 + 3/log2(3), ideal [3, 2] 3 + 2/log2(3); c at rank 1
        (1, 2 / 3, (1 + 3 / L3) / (3 + 2 / L3), 1.0),
        # threshold 2: a, b; [c, a] 1 of 2; DCG 3/log2(3), same ideal; a at rank 2
        (2, 1 / 2, (3 / L3) / (3 + 2 / L3), 0.5),
        # threshold 3: a only; 1 of 1; DCG 3/log2(3), ideal [3] -> 3
        (3, 1.0, (3 / L3) / 3, 0.5),
    ],
)
def test_thresholds(threshold, recall, ndcg, mrr):
    m = retrieval_metrics({"q1": RANKINGS["q1"]}, {"q1": QRELS["q1"]}, {"q1": 10}, ks=(2,), threshold=threshold)
    assert (m["recall@2"], m["ndcg@2"], m["mrr"]) == pytest.approx((recall, ndcg, mrr))


def test_per_query_values():
    per_query = per_query_metrics(RANKINGS, QRELS, ks=(2,))
    assert per_query["q1"] == {
        "n_relevant": 2,
        "rr": 0.5,
        "retrieved@2": 2,
        "tp@2": 1,
        "recall@2": 0.5,
        "precision@2": 0.5,
        "f1@2": 0.5,
        "ndcg@2": pytest.approx(0.444123, abs=1e-6),
    }
    q3 = per_query["q3"]
    assert (q3["n_relevant"], q3["tp@2"], q3["precision@2"]) == (0, 0, 0.0)
    assert all(math.isnan(q3[key]) for key in ("rr", "recall@2", "f1@2", "ndcg@2"))


def test_no_relevant_anywhere_is_nan_not_zero():
    m = retrieval_metrics({"q": ["a"]}, {"q": {"a": 1}}, {"q": 3}, ks=(1,), threshold=2)
    assert m["n_queries_without_relevant"] == 1 and m["precision@1"] == 0.0
    assert all(math.isnan(m[key]) for key in ("recall@1", "f1@1", "macro/recall@1", "ndcg@1", "mrr", "random/recall@1"))


def test_bad_input_is_a_user_error():
    with pytest.raises(UserError, match="threshold must be 1, 2 or 3"):
        retrieval_metrics(RANKINGS, QRELS, N_CANDIDATES, threshold=0)
    with pytest.raises(UserError, match="same queries"):
        retrieval_metrics({"q1": ["a"]}, QRELS, N_CANDIDATES)
    with pytest.raises(UserError, match="'q3' needs n_candidates >= 2"):
        retrieval_metrics(RANKINGS, QRELS, {**N_CANDIDATES, "q3": 1})
    with pytest.raises(UserError, match="lists a passage more than once"):
        retrieval_metrics({"q": ["a", "a"]}, {"q": {"a": 2}}, {"q": 5})
    with pytest.raises(UserError, match="ks must be positive integers"):
        retrieval_metrics(RANKINGS, QRELS, N_CANDIDATES, ks=(0,))


def test_page_recall_at_k():
    retrieved, gold = [[3, 5, 7], [1, 2]], [{7}, {9}]
    assert page_recall_at_k(retrieved, gold, 2) == [0.0, 0.0]
    assert page_recall_at_k(retrieved, gold, 3) == [1.0, 0.0]
    assert page_recall_at_k([[0]], [{0, 4}], 1) == [1.0]
    with pytest.raises(ValueError, match="2 retrieved lists for 1 gold sets"):
        page_recall_at_k(retrieved, gold[:1], 1)
