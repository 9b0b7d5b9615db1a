import pytest

from esgexp.errors import UserError
from esgexp.eval.qa_metrics import SpanMatch, normalize, span_bucket, split_spans


def one(prediction, *references):
    return SpanMatch().score([prediction], [tuple(references)]).per_item[0]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The  Paris!", "paris"),
        ("an Apple a day", "apple day"),
        ("Theatre", "theatre"),  # "the" only as a whole word
        ("“Net-zero” – 2050", "netzero 2050"),  # Unicode quotes and dash count as punctuation
        ("€15.2 million", "€152 million"),  # SQuAD drops the decimal point; € is a symbol, kept
    ],
)
def test_normalize(text, expected):
    assert normalize(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("solar, wind; hydro", ["solar", "wind", "hydro"]),
        ("1,000 tonnes", ["1000 tonnes"]),  # a comma between digits is a thousands separator
        ("2022, 2023", ["2022", "2023"]),  # a comma followed by a space separates
        ("GRI,SASB", ["gri", "sasb"]),
        ("Solar, solar;", ["solar"]),  # repeats and empty pieces are dropped
        ("research and development", ["research and development"]),
        ("", []),
    ],
)
def test_split_spans(text, expected):
    assert split_spans(text) == expected


def test_single_span_exact_match_after_normalisation():
    assert one("The EU Taxonomy.", "EU taxonomy") == {
        "em": 1.0,
        "precision": 1.0,
        "recall": 1.0,
        "f1": 1.0,
        "spans": 1.0,
    }


def test_single_span_partial_overlap():
    # pred tokens [green, bond, framework], gold [green, bond]: common 2
    # P = 2/3, R = 2/2 = 1, F1 = 2 * (2/3) * 1 / (2/3 + 1) = (4/3) / (5/3) = 0.8
    values = one("the green bond framework", "Green bond")
    assert values["em"] == 0.0
    assert values["precision"] == pytest.approx(2 / 3)
    assert values["recall"] == 1.0
    assert values["f1"] == pytest.approx(0.8)


def test_repeated_tokens_are_clipped():
    # pred [co2, co2, emissions], gold [co2, emissions]: Counter overlap = 1 co2 + 1 emissions = 2
    # P = 2/3, R = 1, F1 = 0.8
    values = one("CO2 CO2 emissions", "CO2 emissions")
    assert (values["precision"], values["recall"], values["f1"]) == pytest.approx((2 / 3, 1.0, 0.8))


def test_multi_span_exact_match_ignores_order_and_separator():
    values = one("Scope 2; Scope 1", "Scope 1, Scope 2")
    assert values["em"] == 1.0 and values["f1"] == 1.0 and values["spans"] == 2.0


def test_multi_span_partial():
    # gold spans {solar, wind, hydro}, pred {solar, wind}: not the same set, em 0
    # tokens: pred [solar, wind], gold [solar, wind, hydro]; common 2
    # P = 2/2 = 1, R = 2/3, F1 = 2 * 1 * (2/3) / (1 + 2/3) = (4/3) / (5/3) = 0.8
    values = one("solar, wind", "solar, wind, hydro")
    assert values == pytest.approx({"em": 0.0, "precision": 1.0, "recall": 2 / 3, "f1": 0.8, "spans": 3.0})


def test_thousands_separator_is_not_a_span_boundary():
    # gold "1,000 tonnes" is one span "1000 tonnes"; so is the prediction
    assert one("1000 tonnes", "1,000 tonnes")["em"] == 1.0
    assert one("1,000 tonnes", "1,000 tonnes")["spans"] == 1.0


def test_same_tokens_different_spans_is_not_exact():
    # {"new york"} vs {"new", "york"}: different span sets, identical token bags
    values = one("New York", "New, York")
    assert values["em"] == 0.0 and values["f1"] == 1.0


def test_best_reference_wins_and_spans_come_from_the_first():
    # vs "wind, hydro": no common token -> f1 0
    # vs "solar power": pred [solar], gold [solar, power]: P 1, R 1/2, F1 = 2 * 0.5 / 1.5 = 2/3
    values = one("solar", "wind, hydro", "solar power")
    assert values == pytest.approx({"em": 0.0, "precision": 1.0, "recall": 0.5, "f1": 2 / 3, "spans": 2.0})


def test_empty_prediction_scores_zero():
    assert one("", "renewable energy") == {"em": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "spans": 1.0}
    assert one(" ; , ", "renewable energy")["f1"] == 0.0


def test_reference_empty_after_normalisation_matches_only_empty():
    # SQuAD: both token lists empty -> 1; one empty -> 0
    assert one("", "The")["f1"] == 1.0 and one("", "The")["em"] == 1.0
    assert one("something", "The")["f1"] == 0.0


@pytest.mark.parametrize("n, bucket", [(0, "1"), (1, "1"), (4, "4"), (5, "5+"), (10, "5+")])
def test_span_bucket(n, bucket):
    assert span_bucket(n) == bucket


def test_summary_means_and_span_breakdown():
    golds = ["a1", "b1, b2", "c1, c2, c3", "d1; d2; d3; d4", "e1, e2, e3, e4, e5", "f1, f2, f3, f4, f5, f6"]
    predictions = [
        "a1",  # 1 span: em 1, P 1, R 1, F1 1
        "b1",  # 2 spans: P 1, R 1/2, F1 2/3
        "zz",  # 3 spans: all 0
        "d1, d2, d3, d4",  # 4 spans: em 1, all 1
        "e1, e2, e3, e4, e5",  # 5 spans: em 1, all 1
        "f1, f2, f3",  # 6 spans: P 1, R 3/6, F1 2/3
    ]
    summary = SpanMatch().score(predictions, [(g,) for g in golds]).summary
    # em: (1 + 0 + 0 + 1 + 1 + 0) / 6 = 0.5
    # precision: (1 + 1 + 0 + 1 + 1 + 1) / 6 = 5/6
    # recall: (1 + 0.5 + 0 + 1 + 1 + 0.5) / 6 = 4/6
    # f1: (1 + 2/3 + 0 + 1 + 1 + 2/3) / 6 = (13/3) / 6 = 13/18
    assert summary["em"] == pytest.approx(0.5)
    assert summary["precision"] == pytest.approx(5 / 6)
    assert summary["recall"] == pytest.approx(4 / 6)
    assert summary["f1"] == pytest.approx(13 / 18)
    assert [summary[f"by_spans/{b}/n"] for b in ("1", "2", "3", "4", "5+")] == [1.0, 1.0, 1.0, 1.0, 2.0]
    assert summary["by_spans/1/f1"] == 1.0
    assert summary["by_spans/2/recall"] == pytest.approx(0.5)
    assert summary["by_spans/3/f1"] == 0.0
    # 5+: the 5-span item (em 1, f1 1) and the 6-span item (em 0, f1 2/3)
    assert summary["by_spans/5+/em"] == pytest.approx(0.5)
    assert summary["by_spans/5+/f1"] == pytest.approx((1 + 2 / 3) / 2)


def test_empty_bucket_reports_only_its_count():
    summary = SpanMatch().score(["x"], [("x",)]).summary
    assert summary["by_spans/2/n"] == 0.0
    assert "by_spans/2/f1" not in summary
    assert summary["by_spans/1/n"] == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="2 predictions for 1"):
        SpanMatch().score(["a", "b"], [("a",)])
    with pytest.raises(ValueError, match="tuple of str"):
        SpanMatch().score(["a"], ["a"])
    with pytest.raises(UserError, match="no reference"):
        SpanMatch().score(["a"], [()])
    with pytest.raises(UserError, match="0 predictions"):
        SpanMatch().score([], [])
