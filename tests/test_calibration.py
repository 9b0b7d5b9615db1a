"""Calibration of letter scores on hand-made confidences: probabilities, ECE bins, Brier, coverage."""

import math

import pytest

from esgexp.eval.calibration import (
    accuracy_above,
    brier_score,
    calibration_bins,
    calibration_report,
    coverage_curve,
    coverage_threshold,
    expected_calibration_error,
    letter_probabilities,
)


def test_letter_probabilities_are_a_softmax_over_the_offered_letters():
    scores = {"A": math.log(0.2), "B": math.log(0.1), "C": math.log(0.1), "D": -math.inf, "Z": 0.0}
    assert letter_probabilities(scores, "ABCD") == pytest.approx({"A": 0.5, "B": 0.25, "C": 0.25, "D": 0.0})


def test_fifteen_equal_bins_and_the_expected_calibration_error():
    confidences = [0.3, 0.3, 0.95, 0.95, 1.0, 0.0, 1 / 3]
    correct = [True, False, True, True, False, False, True]
    bins = calibration_bins(confidences, correct)
    assert len(bins) == 15 and bins[0]["low"] == 0 and bins[-1]["high"] == 1
    assert [b["count"] for b in bins] == [1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    assert bins[1]["accuracy"] is None and bins[1]["confidence"] is None
    # (4/15, 5/15] holds 0.3, 0.3 and 1/3 (a right edge belongs to its bin); 0 goes to the first bin
    assert bins[4]["accuracy"] == pytest.approx(2 / 3) and bins[4]["confidence"] == pytest.approx((0.6 + 1 / 3) / 3)
    assert bins[14]["accuracy"] == pytest.approx(2 / 3) and bins[14]["confidence"] == pytest.approx(2.9 / 3)
    expected = 3 / 7 * abs(2 / 3 - (0.6 + 1 / 3) / 3) + 3 / 7 * abs(2 / 3 - 2.9 / 3) + 1 / 7 * 0
    assert expected_calibration_error(bins) == pytest.approx(expected)


def test_perfectly_calibrated_answers_have_zero_error():
    confidences, correct = [0.75] * 4 + [0.5] * 2, [True, True, True, False, True, False]
    assert expected_calibration_error(calibration_bins(confidences, correct)) == pytest.approx(0.0)


def test_brier_score_is_multi_class_over_the_offered_letters():
    sure_a = {"A": 0.7, "B": 0.1, "C": 0.1, "D": 0.1}
    assert brier_score([sure_a], ["A"]) == pytest.approx(0.09 + 3 * 0.01)
    assert brier_score([sure_a], ["B"]) == pytest.approx(0.49 + 0.81 + 2 * 0.01)
    assert brier_score([dict.fromkeys("ABCD", 0.25), {"A": 1.0, "B": 0, "C": 0, "D": 0}], ["C", "B"]) == pytest.approx(
        (0.75 + 2) / 2
    )


def test_accuracy_against_coverage_when_abstaining_below_a_threshold():
    confidences, correct = [0.9, 0.8, 0.7, 0.6, 0.5], [True, True, False, True, False]
    curve = coverage_curve(confidences, correct, points=5)
    assert [p["threshold"] for p in curve] == [0.9, 0.8, 0.7, 0.6, 0.5]
    assert [p["coverage"] for p in curve] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert [p["accuracy"] for p in curve] == pytest.approx([1, 1, 2 / 3, 3 / 4, 3 / 5])
    assert coverage_threshold(confidences, 0.5) == 0.7  # the 3rd most confident of 5
    assert accuracy_above(confidences, correct, 0.95) == {"threshold": 0.95, "coverage": 0.0, "accuracy": None}
    # tied confidences are answered together: asking for 1/3 coverage answers 2 of 3
    assert accuracy_above([0.9, 0.9, 0.5], [True, False, True], coverage_threshold([0.9, 0.9, 0.5], 1 / 3)) == {
        "threshold": 0.9,
        "coverage": pytest.approx(2 / 3),
        "accuracy": 0.5,
    }


def test_the_report_leaves_out_answers_no_offered_letter_can_get_right():
    def record(gold, parsed, p_chosen, **extra):
        rest = (1 - p_chosen) / 3
        scores = {L: math.log(p_chosen if L == parsed else rest) for L in "ABCD"}
        return {"gold": gold, "parsed": parsed, "correct": gold == parsed, "scores": scores, **extra}

    records = [
        record("A", "A", 0.85),
        record("B", "A", 0.55),
        record("C", "C", 0.4),
        record("Z", "A", 0.9),
        record("AB", "A", 0.9),
        {"gold": "A", "parsed": "INVALID", "correct": False, "failed": True},
    ]
    metrics, report = calibration_report(records, list("ABCD"))
    assert metrics["calibration/n_items"] == 3 and report["n_left_out"] == 3 and report["n_items"] == 3
    assert metrics["calibration/ece"] == pytest.approx((abs(1 - 0.85) + abs(0 - 0.55) + abs(1 - 0.4)) / 3)
    assert metrics["calibration/mean_confidence"] == pytest.approx((0.85 + 0.55 + 0.4) / 3)
    # the most confident half (2 of 3) are 0.85 right and 0.55 wrong
    assert metrics["calibration/accuracy_at_coverage_50"] == 0.5 and metrics[
        "calibration/accuracy_at_coverage_90"
    ] == pytest.approx(2 / 3)
    assert report["ece"] == metrics["calibration/ece"] and report["brier"] == metrics["calibration/brier"]
    assert sum(b["count"] for b in report["bins"]) == 3 and set(report["bins"][0]) == {
        "low",
        "high",
        "confidence",
        "accuracy",
        "count",
    }
    assert [p["coverage"] for p in report["coverage"]] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert calibration_report([records[-1]], list("ABCD")) == ({}, None)
