"""Calibration of letter scores (scoring=logprob): ECE, Brier score and accuracy against coverage.

An answer's confidence is the probability of the chosen letter after a softmax over the offered
letters' log-probabilities. Only answers with scores whose gold is one of the offered letters count
(a failed item, a ``Z`` or multi-letter gold is left out: no single offered letter can be right).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

log = logging.getLogger(__name__)

N_BINS = 15
COVERAGES = (0.5, 0.8, 0.9)
CURVE_POINTS = 100


def letter_probabilities(scores: dict[str, float], letters: Sequence[str]) -> dict[str, float]:
    """Softmax of the log-probabilities of ``letters`` (a letter scored ``-inf`` gets 0)."""
    values = [scores.get(letter, -math.inf) for letter in letters]
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = sum(weights)
    return {letter: w / total for letter, w in zip(letters, weights)}


def calibration_bins(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS) -> list[dict]:
    """``n_bins`` equal-width bins over [0, 1]; bin i holds confidences in (i/n, (i+1)/n] (0 goes to the
    first). Each: ``low``, ``high``, mean ``confidence``, ``accuracy`` (None when empty) and ``count``."""
    members: list[list[int]] = [[] for _ in range(n_bins)]
    for index, confidence in enumerate(confidences):
        members[min(max(math.ceil(confidence * n_bins) - 1, 0), n_bins - 1)].append(index)
    bins = []
    for b, inside in enumerate(members):
        count = len(inside)
        bins.append(
            {
                "low": b / n_bins,
                "high": (b + 1) / n_bins,
                "confidence": sum(confidences[i] for i in inside) / count if count else None,
                "accuracy": sum(bool(correct[i]) for i in inside) / count if count else None,
                "count": count,
            }
        )
    return bins


def expected_calibration_error(bins: Sequence[dict]) -> float:
    """Sum over bins of (share of answers in the bin) x |accuracy - mean confidence|."""
    total = sum(b["count"] for b in bins)
    return sum(b["count"] / total * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"])


def brier_score(probabilities: Sequence[dict[str, float]], golds: Sequence[str]) -> float:
    """Multi-class Brier score over the offered letters: the mean over answers of
    sum_L (p_L - [L is gold])^2, from 0 (certain and right) to 2 (certain and wrong)."""
    return sum(
        sum((p - (letter == gold)) ** 2 for letter, p in probs.items()) for probs, gold in zip(probabilities, golds)
    ) / len(golds)


def accuracy_above(confidences: Sequence[float], correct: Sequence[bool], threshold: float) -> dict:
    """Answer only when confidence >= ``threshold``, abstain otherwise: ``coverage`` (share answered)
    and ``accuracy`` of the answered ones (None when none is)."""
    kept = [ok for c, ok in zip(confidences, correct) if c >= threshold]
    return {
        "threshold": threshold,
        "coverage": len(kept) / len(confidences),
        "accuracy": sum(kept) / len(kept) if kept else None,
    }


def coverage_threshold(confidences: Sequence[float], coverage: float) -> float:
    """The confidence of the ceil(coverage x n)-th most confident answer: abstaining below it answers
    at least that share (more when confidences tie)."""
    ranked = sorted(confidences, reverse=True)
    return ranked[max(math.ceil(coverage * len(ranked)), 1) - 1]


def coverage_curve(confidences: Sequence[float], correct: Sequence[bool], points: int = CURVE_POINTS) -> list[dict]:
    """Accuracy against coverage at the thresholds reaching coverage 1/points, 2/points, ..., 1
    (one entry per distinct threshold, highest threshold first)."""
    thresholds = sorted({coverage_threshold(confidences, p / points) for p in range(1, points + 1)}, reverse=True)
    return [accuracy_above(confidences, correct, t) for t in thresholds]


def calibration_report(records: Sequence[dict], letters: Sequence[str]) -> tuple[dict[str, float], dict | None]:
    """Metrics ``calibration/*`` and the calibration.json content for MCQ ``records`` with ``scores``;
    ({}, None) when no record can be scored."""
    usable = [r for r in records if not r.get("failed") and r.get("scores") and r["gold"] in letters]
    if not usable:
        log.warning("no answer with letter scores and a single offered gold letter: no calibration")
        return {}, None
    probabilities = [letter_probabilities(r["scores"], letters) for r in usable]
    confidences = [probs.get(r["parsed"], 0.0) for probs, r in zip(probabilities, usable)]
    correct = [bool(r["correct"]) for r in usable]
    bins = calibration_bins(confidences, correct)
    metrics = {
        "calibration/n_items": len(usable),
        "calibration/ece": expected_calibration_error(bins),
        "calibration/brier": brier_score(probabilities, [r["gold"] for r in usable]),
        "calibration/mean_confidence": sum(confidences) / len(confidences),
    }
    for coverage in COVERAGES:
        point = accuracy_above(confidences, correct, coverage_threshold(confidences, coverage))
        metrics[f"calibration/accuracy_at_coverage_{round(coverage * 100)}"] = point["accuracy"]
    report = {
        "letters": list(letters),
        "definitions": {
            "confidence": "probability of the chosen letter, softmax over the offered letters' log-probabilities",
            "brier": "multi-class over the offered letters, 0 (certain and right) to 2 (certain and wrong)",
            "bins": f"{N_BINS} equal-width bins, (low, high]",
            "coverage": "answer only when confidence >= threshold",
        },
        "n_items": len(usable),
        "n_left_out": len(records) - len(usable),
        "ece": metrics["calibration/ece"],
        "brier": metrics["calibration/brier"],
        "bins": bins,
        "coverage": coverage_curve(confidences, correct),
    }
    return metrics, report
