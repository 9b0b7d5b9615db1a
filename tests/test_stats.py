"""esgexp.eval.stats against hand-computed values: Wilson, standard errors, bootstrap, McNemar, paired bootstrap, Holm."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.eval.stats import (
    ItemScores,
    StatsSettings,
    binomial_two_sided,
    holm,
    item_cluster,
    mcnemar_exact,
    mean_interval,
    mean_stderr,
    normal_quantile,
    paired_bootstrap,
    proportion_interval,
    ratio_interval,
    ratio_stderr,
    statistic_interval,
    wilson,
    with_interval,
)

SETTINGS = StatsSettings(bootstrap=1000, seed=0, confidence=0.95)


def test_normal_quantile():
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "successes, n, low, high",
    [
        # By hand, z = 1.959964: centre (p + z^2/2n) / (1 + z^2/n), half-width z/(1 + z^2/n) sqrt(p(1-p)/n + z^2/4n^2).
        (8, 10, 0.490162, 0.943318),
        (0, 10, 0.0, 0.277533),  # upper end z^2 / (n + z^2)
        (10, 10, 0.722467, 1.0),
        (50, 100, 0.403832, 0.596168),
    ],
)
def test_wilson_interval_on_known_counts(successes, n, low, high):
    found = wilson(successes, n)
    assert (found.low, found.high) == (pytest.approx(low, abs=1e-6), pytest.approx(high, abs=1e-6))
    assert found.estimate == successes / n and found.method == "wilson"
    assert found.stderr == pytest.approx(math.sqrt(successes / n * (1 - successes / n) / n))


def test_wilson_of_nothing_is_undefined():
    assert math.isnan(wilson(0, 0).low)


def test_standard_errors_by_hand():
    # [1, 2, 3, 4]: sample variance 5/3, SE sqrt(5/3 / 4).
    assert mean_stderr([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 12))
    # Singleton clusters add no cross terms: the clustered SE is the CLT one.
    assert mean_stderr([1, 2, 3, 4], ["a", "b", "c", "d"]) == pytest.approx(math.sqrt(5 / 12))
    # [1, 1, 3, 3] in clusters {1, 1}, {3, 3}: residuals -1 -1 1 1, CLT term (4/3)/4; within-cluster cross
    # products 2 * (1 + 1) = 4 over n^2 = 16: SE^2 = 1/3 + 1/4.
    assert mean_stderr([1, 1, 3, 3], ["a", "a", "b", "b"]) == pytest.approx(math.sqrt(1 / 3 + 1 / 4))
    # A ratio with denominators all 1 is a mean.
    assert ratio_stderr([1, 2, 3, 4], [1, 1, 1, 1]) == pytest.approx(math.sqrt(5 / 12))


def test_bootstrap_is_reproducible_and_covers_the_estimate():
    values = np.random.default_rng(7).random(300)
    first, again = mean_interval(values, None, SETTINGS), mean_interval(values, None, SETTINGS)
    assert first == again and first.method == "bootstrap"
    assert first.low < values.mean() < first.high and first.estimate == pytest.approx(values.mean())
    other_seed = mean_interval(values, None, StatsSettings(seed=1))
    assert other_seed.low != first.low
    # For 300 items the percentile interval is close to mean +- 1.96 SE.
    assert first.high - first.low == pytest.approx(2 * 1.96 * first.stderr, rel=0.1)


def test_clustered_interval_is_wider_on_clustered_data():
    # 30 passages of 10 questions each, every question of a passage right or wrong together.
    passage_right = np.random.default_rng(3).random(30) < 0.6
    hits = np.repeat(passage_right, 10).astype(float)
    clusters = np.repeat(np.arange(30), 10).tolist()
    plain = proportion_interval(hits, None, SETTINGS)
    clustered = proportion_interval(hits, clusters, SETTINGS)
    assert plain.method == "wilson" and clustered.method == "cluster_bootstrap"
    assert clustered.estimate == plain.estimate
    assert clustered.high - clustered.low > 2 * (plain.high - plain.low)
    # Perfectly correlated clusters of 10: the clustered SE is about sqrt(10) times the plain one.
    assert clustered.stderr / mean_stderr(hits) == pytest.approx(math.sqrt(10), rel=0.05)


def test_pooled_ratio_interval_resamples_queries():
    hits, relevant = [2, 0, 3, 1, 4, 2], [4, 2, 3, 2, 5, 4]
    found = ratio_interval(hits, relevant, None, SETTINGS)
    assert found.estimate == pytest.approx(12 / 20) and found.low < 0.6 < found.high
    # A corpus statistic of summed rows resamples the same items: same interval as the ratio.
    same = statistic_interval(np.column_stack([hits, relevant]), lambda s: s[0] / s[1], None, SETTINGS)
    assert (same.low, same.high) == pytest.approx((found.low, found.high))
    assert ItemScores(list("abcdef"), hits, "ratio", weights=relevant).interval(SETTINGS) == found


def test_corpus_bleu_interval_from_sacrebleu_counts():
    from esgexp.eval.text_metrics import Bleu

    predictions = [
        "the plant emitted 120 tonnes",
        "water use fell by ten percent",
        "the board has five members",
        "no answer",
    ]
    references = [
        ("the plant emitted 120 tonnes of CO2",),
        ("water use fell ten percent",),
        ("five members sit on the board",),
        ("scope 3 is not reported",),
    ]
    result = Bleu().score(predictions, references)
    counts = result.corpus["bleu"]
    found = statistic_interval(counts.rows, counts.compute, None, SETTINGS)
    assert found.estimate == pytest.approx(result.summary["bleu"]) and found.low <= found.estimate <= found.high


@pytest.mark.parametrize(
    "only_a, only_b, p",
    [
        (2, 8, 2 * (1 + 10 + 45) / 1024),  # 2 P(X <= 2), X ~ Bin(10, 1/2)
        (1, 9, 2 * 11 / 1024),
        (0, 5, 2 / 32),
        (3, 3, 1.0),
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact_p_on_hand_made_tables(only_a, only_b, p):
    assert mcnemar_exact(only_a, only_b) == pytest.approx(p)


def test_binomial_tail_is_exact_for_large_n():
    # 2 P(X <= 0) with n = 60: 2^-59.
    assert binomial_two_sided(0, 60) == pytest.approx(2.0**-59, rel=1e-9)


def test_paired_bootstrap_detects_a_real_difference():
    rng = np.random.default_rng(11)
    a = (rng.random(200) < 0.5).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 0)[:25]] = 1.0  # B fixes 25 of A's misses and loses none
    found = paired_bootstrap(a, b, None, SETTINGS)
    assert found.difference == pytest.approx(25 / 200)
    assert 0 < found.low <= found.difference <= found.high and found.p_value < 0.01


def test_paired_bootstrap_finds_no_difference_in_a_null_pair():
    rng = np.random.default_rng(12)
    a = rng.random(200)
    b = a + rng.normal(0, 0.1, 200)  # noise around the same scores
    b -= b.mean() - a.mean()  # exactly the same mean
    found = paired_bootstrap(a, b, None, SETTINGS)
    assert found.low < 0 < found.high and found.p_value > 0.5


def test_clustered_paired_bootstrap_is_wider():
    rng = np.random.default_rng(5)
    gain = np.repeat(rng.normal(0.05, 0.2, 20), 10)  # per-report effects
    a = rng.random(200)
    plain = paired_bootstrap(a, a + gain, None, SETTINGS)
    clustered = paired_bootstrap(a, a + gain, np.repeat(np.arange(20), 10).tolist(), SETTINGS)
    assert clustered.method == "paired_cluster_bootstrap"
    assert clustered.high - clustered.low > 2 * (plain.high - plain.low)


def test_holm_adjusts_in_input_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])
    adjusted = holm([0.01, float("nan")])
    assert adjusted[0] == pytest.approx(0.01) and math.isnan(adjusted[1])


def test_settings_are_checked_by_the_compare_command_too(tmp_path):
    from esgexp.cli.compare import main

    with pytest.raises(
        UserError,
        match=r"stats.bootstrap must be an integer >= 100, got 10; stats.confidence must be a number >= 0.5 and < 1, got 95",
    ):
        main([str(tmp_path), str(tmp_path), "stats.bootstrap=10", "stats.confidence=95"])


def test_item_cluster_by_passage_or_field():
    one = QAItem("q1", "?", ("a",), "factoid", context=("Passage one.",), meta={"report": "R1"})
    two = QAItem("q2", "?", ("b",), "factoid", context=("Passage one.",), meta={"report": "R2"})
    assert item_cluster(one, "passage") == item_cluster(two, "passage")
    assert item_cluster(one, "report") == "R1"
    with pytest.raises(UserError, match=r"cluster_key='doc_name'.*'q1'"):
        item_cluster(one, "doc_name")


def test_summary_value_shows_its_interval():
    metrics = {"accuracy": 0.5, "accuracy/ci_low": 0.25, "accuracy/ci_high": 0.75, "mrr": float("nan")}
    assert with_interval(metrics, "accuracy") == "0.500 [0.250, 0.750]"
    assert with_interval({"f1": 0.5}, "f1") == "0.500" and with_interval(metrics, "mrr") == "n/a"


@pytest.mark.parametrize(
    "compute",
    [
        lambda: proportion_interval([1, 0, 1, 1], ["r", "r", "r", "r"], SETTINGS),
        lambda: mean_interval([0.2, 0.4, 0.6], ["r", "r", "r"], SETTINGS),
        lambda: ratio_interval([1, 2], [2, 2], ["r", "r"], SETTINGS),
        lambda: statistic_interval([[1, 2], [2, 2]], lambda row: row[0] / row[1], ["r", "r"], SETTINGS),
    ],
)
def test_one_cluster_gives_no_interval_and_says_why(compute):
    found = compute()
    assert math.isnan(found.low) and math.isnan(found.high) and math.isnan(found.stderr)
    assert found.method == "none" and found.note == "one cluster" and not math.isnan(found.estimate)
    metrics = {"accuracy": found.estimate, **found.as_metrics("accuracy")}
    assert metrics["accuracy/ci_note"] == "one cluster"
    assert with_interval(metrics, "accuracy") == f"{found.estimate:.3f} [interval n/a: one cluster]"


def test_one_item_without_clusters_has_no_bootstrap_interval_but_wilson_holds():
    assert mean_interval([0.5], None, SETTINGS).note == "one item"
    assert wilson(1, 1).low == pytest.approx(0.206549, abs=1e-6)  # Wilson is defined from one item on
    two = mean_interval([0.0, 1.0], ["a", "b"], SETTINGS)
    assert two.note == "" and two.low < two.high


def test_a_paired_test_over_one_cluster_has_no_p_value():
    found = paired_bootstrap([1, 1, 0, 0], [0, 0, 0, 0], ["r"] * 4, SETTINGS)
    assert found.difference == pytest.approx(-0.5) and found.note == "one cluster"
    assert math.isnan(found.p_value) and math.isnan(found.low) and found.method == "none"


def test_a_clustered_share_of_0_or_1_gets_a_wilson_interval_over_its_clusters():
    """Resampling all-equal hits has nothing to vary ([1, 1] would claim certainty from 5 items): Wilson over
    the 5 clusters instead; one cluster stays without an interval."""
    from esgexp.eval.stats import StatsSettings, proportion_interval, wilson

    settings = StatsSettings()
    found = proportion_interval([1.0] * 8, ["a", "a", "b", "c", "c", "d", "e", "e"], settings)
    expected = wilson(5, 5)
    assert (found.estimate, found.low, found.high, found.method) == (1.0, expected.low, 1.0, "cluster_wilson")
    assert round(found.low, 3) == 0.566
    assert proportion_interval([0.0] * 4, ["a"] * 4, settings).method == "none"
    assert proportion_interval([0.0, 1.0, 1.0], ["a", "b", "c"], settings).method == "cluster_bootstrap"


def test_a_mean_of_values_all_0_or_all_1_gets_the_shares_interval():
    """F1 of 1.0 on every one of 6 items is not certainty: Wilson's interval for 6 of 6, not the bootstrap's [1, 1]."""
    from esgexp.eval.stats import StatsSettings, mean_interval, wilson

    found = mean_interval([1.0] * 6, None, StatsSettings())
    assert (found.low, found.high, found.method) == (wilson(6, 6).low, 1.0, "wilson")
    assert mean_interval([0.0] * 6, list("aabbcc"), StatsSettings()).method == "cluster_wilson"
    assert mean_interval([0.5] * 6, None, StatsSettings()).method != "wilson"  # a constant that is no share


def test_every_metric_of_items_all_hits_gets_the_same_share_interval():
    """Pooled recall@K (a ratio of sums), MRR and nDCG (means) and a share of queries whose every relevant
    passage was found: one rule, Wilson over the queries (or their clusters), never the bootstrap's [1, 1]."""
    from esgexp.eval.stats import ItemScores, StatsSettings, wilson

    settings = StatsSettings()
    ids, reports = [f"q{i}" for i in range(6)], list("aabbcd")
    recall = ItemScores(ids, [2, 1, 3, 1, 1, 2], "ratio", weights=[2, 1, 3, 1, 1, 2], clusters=reports)
    mrr = ItemScores(ids, [1.0] * 6, "mean", clusters=reports)
    share = ItemScores(ids, [1.0] * 6, "proportion", clusters=reports)
    found = [s.interval(settings) for s in (recall, mrr, share)]
    assert {(f.low, f.high, f.method) for f in found} == {(wilson(4, 4).low, 1.0, "cluster_wilson")}
    plain = ItemScores(ids, [0, 0, 0, 0, 0, 0], "ratio", weights=[2, 1, 3, 1, 1, 2]).interval(settings)
    assert (plain.low, plain.high, plain.method) == (0.0, wilson(0, 6).high, "wilson")


def test_a_clustered_share_over_few_clusters_is_never_narrower_than_wilson():
    """ESGBench's Strategy category: 10 of 11 answers right, from 7 reports. The cluster bootstrap alone gives
    [0.81, 1.0], narrower than Wilson's [0.62, 0.98] for 10 of 11 independent answers: floored at Wilson."""
    from esgexp.eval.stats import StatsSettings, mean_interval, proportion_interval, wilson

    reports = ["a", "a", "b", "b", "c", "c", "d", "e", "f", "g", "g"]
    hits = [1.0] * 10 + [0.0]
    found = proportion_interval(hits, reports, StatsSettings())
    plain = wilson(10, 11)
    assert found.low <= plain.low and found.high >= plain.high
    assert (round(found.low, 3), found.high, found.method) == (0.623, 1.0, "cluster_bootstrap_floored")
    scores = [0.2, 0.9, 0.4, 0.5, 0.7, 0.1, 0.8, 0.6, 0.3, 0.95, 0.05]
    mean = mean_interval(scores, reports, StatsSettings())
    unclustered = mean_interval(scores, None, StatsSettings())
    assert mean.low <= unclustered.low and mean.high >= unclustered.high
