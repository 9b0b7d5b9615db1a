"""ESGBench: unit-aware numbers, EM/F1/numeric metrics, the JSONL loaders and their join."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from fractions import Fraction as F

import pytest

from esgexp.core.config import BUNDLED_DIR
from esgexp.data.esgbench import ESGBenchGold, join, load_predictions
from esgexp.errors import UserError
from esgexp.eval.esgbench_metrics import (
    ESGBenchMetrics,
    category_accuracy,
    exact_match,
    numeric_verdict,
    score_esgbench,
    token_f1,
    tokens,
)
from esgexp.eval.numbers import find_quantities, parse_quantity

BUNDLED_GOLD = BUNDLED_DIR / "esgbench" / "gold_sample.jsonl"
BUNDLED_PREDS = BUNDLED_DIR / "esgbench" / "preds_sample.jsonl"


def score_files(gold, preds, **gold_options):
    items = ESGBenchGold("esgbench", str(gold), **gold_options).load().items
    joined = join(items, load_predictions(preds))
    return score_esgbench(items, joined)


# --- numbers: the edge cases the brief names, one test each ---


def test_thousands_separator_tonnes_match_kilotonnes():
    assert numeric_verdict("225.7 ktCO2e", "225,700 tCO2e").correct


def test_percentage_within_two_percent_relative_is_right():
    # 12% vs 12.2%: 1.6% relative and 0.2 points: both rules hold.
    assert numeric_verdict("12.2 %", "12%").correct
    # 12% vs 12.4%: 0.4 points but 3.3% relative: the relative rule fails.
    assert not numeric_verdict("12.4 %", "12%").correct
    # 0.3% vs 0.8%: 0.5 points, 167% relative: wrong (a points-only rule would accept it).
    assert not numeric_verdict("0.8%", "0.3%").correct


def test_large_percentage_also_needs_half_a_point():
    # 92.3% vs 94%: 1.84% relative but 1.7 points: wrong; 92.3% vs 92.6%: 0.3% and 0.3 points: right.
    assert not numeric_verdict("94%", "92.3%").correct
    assert numeric_verdict("92.6%", "92.3%").correct


def test_scale_word_equals_digits():
    assert numeric_verdict("3,000,000", "3 million").correct
    assert numeric_verdict("3 million", "3,000,000").correct


def test_megatonnes_are_not_tonnes():
    verdict = numeric_verdict("5 tCO2e", "5 MtCO2e")
    assert verdict.item and not verdict.correct


def test_bare_number_against_a_gold_unit_is_wrong():
    verdict = numeric_verdict("225,700", "225,700 tCO2e")
    assert verdict.item and not verdict.correct


def test_other_unit_family_is_wrong():
    assert not numeric_verdict("225,700 MWh", "225,700 tCO2e").correct


def test_gold_without_unit_accepts_any_unit():
    assert numeric_verdict("15,273 Tonnes", "15,273").correct


def test_relative_tolerance_is_two_percent_of_gold():
    assert numeric_verdict("102 MWh", "100 MWh").correct
    assert numeric_verdict("98 MWh", "100 MWh").correct
    assert not numeric_verdict("102.1 MWh", "100 MWh").correct


def test_prediction_number_in_gold_unit_is_the_one_compared():
    # Years have no unit, so the first percentage is compared.
    assert numeric_verdict("In 2023 the share was 29.2%", "29.2 %").correct


def test_gold_without_number_is_not_a_numeric_item():
    verdict = numeric_verdict("five elements", "five elements")
    assert not verdict.item and not verdict.correct


def test_unknown_unit_is_counted_and_named(caplog):
    with caplog.at_level(logging.WARNING):
        result = ESGBenchMetrics().score(["52,000 MMBtu", "5", "5 MWh"], [("52,000 MMBtu",), ("5 tCH4",), ("5 MWh",)])
    # Same unknown unit on both sides compares; a bare 5 against "5 tCH4" is unit-less, so wrong.
    assert [v["numeric"] for v in result.per_item] == [1.0, 0.0, 1.0]
    assert result.summary["n_unknown_unit"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "MMBtu" in warnings[0] and "tCH4" in warnings[1]


@pytest.mark.parametrize(
    "text, value, unit",
    [
        ("1,23,456 MWh", 123456, "MWh"),  # Indian digit grouping
        ("-3.5%", -3.5, "%"),
        ("100 percent recycled cobalt", 100, "%"),
        ("86,400 GJ", 24000, "MWh"),  # 1 MWh = 3.6 GJ
        ("3.1 TWh", 3.1e6, "MWh"),
        ("2,350 megalitres", 2.35e6, "m3"),
        ("2.35 million m³", 2.35e6, "m3"),
        ("5m3", 5, "m3"),  # m3 is a unit, not 5 million
        ("€5m", 5e6, "EUR"),  # a lone m is million
        ("USD 3.2bn", 3.2e9, "USD"),
        ("₹ 1,200 crore", 1.2e10, "INR"),
        ("5 metric tons of CO2 equivalent", 5, "tCO2e"),
        ("5 MTCO2e", 5, "tCO2e"),  # EPA's metric tonnes, not megatonnes
        ("2 tCO₂e", 2, "tCO2e"),
        ("15,273 Tonnes", 15273, "t"),
        ("0.5 kgCO2e/kWh", 0.5, "tCO2e/MWh"),
        ("3 tCO2e per employee", 3, "tCO2e/employee"),
        ("12 MWh per year", 12, "MWh"),
        ("1 hectare", 1e4, "m2"),
        ("42 employees", 42, None),
        ("$1.2m", 1.2e6, "USD"),
        ("5 Mio. EUR", 5e6, "EUR"),
        ("Rs. 500 Cr.", 5e9, "INR"),
    ],
)
def test_parse_quantity(text, value, unit):
    quantity = parse_quantity(text)
    assert quantity.value == pytest.approx(value)
    assert quantity.unit == unit


def test_digits_glued_to_letters_are_not_numbers():
    assert find_quantities("CO2 from the M2 chip in FY2024") == []
    assert [q.value for q in find_quantities("December 31, 2024.")] == [31, 2024]


def test_unknown_unit_token_is_kept_and_plain_words_are_not():
    assert parse_quantity("5 MMBtu of gas").unknown_unit == "MMBtu"
    assert parse_quantity("42 employees").unknown_unit is None
    assert parse_quantity("2024 ESG report").unknown_unit is None  # an acronym, not a unit


# --- EM and token F1, computed by hand ---


def test_exact_match_ignores_case_and_whitespace_runs():
    assert exact_match("  The\n CEO  ", "the ceo") == 1.0
    assert exact_match("In half.", "in half") == 0.0  # punctuation counts


def test_f1_empty_cases():
    assert token_f1("", "") == 1.0
    assert token_f1("...", "—") == 1.0  # no tokens on either side
    assert token_f1("", "18%") == 0.0
    assert token_f1("18%", "") == 0.0


def test_tokens_keep_percent_slash_degree_and_unicode_letters():
    assert tokens("12% of 50°C, policy/legal") == ["12", "%", "of", "50", "°", "c", "policy", "/", "legal"]
    assert tokens("92.3%%") == ["92", "3", "%%"]
    assert tokens("Émissions de Nestlé: CO₂ 東京") == ["émissions", "de", "nestlé", "co₂", "東京"]


def test_f1_hand_computed():
    # 5 of 6 tokens shared both ways: P = R = 5/6.
    assert token_f1("21 parameters and 4 broader areas.", "21 parameters covering 4 broader areas") == pytest.approx(
        5 / 6
    )
    # [38, %] vs [0, 05, %]: only % shared, P = 1/3, R = 1/2, F1 = 2/5.
    assert token_f1("0.05%", "38%") == pytest.approx(0.4)
    # [é, s, g] vs [e, s, g]: é and e differ, 2 shared of 3.
    assert token_f1("É S G", "E S G") == pytest.approx(2 / 3)
    # [tco2e, /, yr] vs [tco2e]: P = 1/3, R = 1, F1 = 1/2.
    assert token_f1("tCO2e / yr", "tCO2e") == pytest.approx(0.5)


def test_best_reference_counts():
    result = ESGBenchMetrics().score(["5 %"], [("four percent", "5%")])
    # EM: "5 %" is neither text; F1: [5, %] equals the second; numeric: 5 % = 5% (the first has no number),
    # by either rule.
    assert result.per_item == [
        {
            "em": 0.0,
            "f1": 1.0,
            "numeric": 1.0,
            "numeric_item": 1.0,
            "alt/esgbench/numeric": 1.0,
            "alt/esgbench/numeric_item": 1.0,
        }
    ]
    with pytest.raises(ValueError, match="1 predictions for 2 reference sets"):
        ESGBenchMetrics().score(["x"], [("x",), ("y",)])


def test_category_accuracy_counts_em_or_numeric():
    per_item = [
        {"em": 1.0, "numeric": 0.0},
        {"em": 0.0, "numeric": 1.0},
        {"em": 0.0, "numeric": 0.0},
        {"em": 0.0, "numeric": 0.0},
    ]
    result = category_accuracy(per_item, ["Social", "Social", "Social - Diversity & Inclusion", "Governance"])
    assert result == {
        "category/Governance/accuracy": 0.0,
        "category/Governance/n": 1,
        "category/Social/accuracy": pytest.approx(1.0),
        "category/Social/n": 2,
        "category/Social - Diversity & Inclusion/accuracy": 0.0,  # as written; tracking.metric_name makes it MLflow-safe
        "category/Social - Diversity & Inclusion/n": 1,
    }


# --- the real ESGBench sample (gold and the repo's own RAG predictions) ---

# (line, gold, prediction, em, f1, numeric, numeric_item, recall@5), each checked by hand:
REAL_ITEMS = [
    # [18, %] vs [29, %]: F1 1/2; 29 is 11 pp from 18. Page 81 retrieved first.
    (1, "18%", "29%", 0, F(1, 2), 0, 1, 1),
    # [280, 903, mwh] vs [321, 456, mwh]: F1 1/3; 321,456 is 14% over. Page 42 second.
    (3, "280,903 MWh", "321,456 MWh", 0, F(1, 3), 0, 1, 1),
    # 4 gold tokens, 2 predicted, both shared: P 1, R 1/2, F1 2/3; 100 percent = 100%.
    (6, "100 percent recycled cobalt", "100 percent", 0, F(2, 3), 1, 1, 1),
    # Identical text, but no digits: not a numeric item.
    (7, "five elements", "five elements", 1, 1, 0, 0, 1),
    # Unit-less 53 vs 49 (7.5% off); no shared token. Page 76 not among [72, 34, 35, 30, 3].
    (14, "53", "49%", 0, 0, 0, 1, 0),
    (16, "225,700 tCO2e", "225,700 tCO2e", 1, 1, 1, 1, 1),
    # The full stop breaks EM, not the tokens.
    (17, "in half", "In half.", 0, 1, 0, 0, 1),
    # 9 gold tokens all found among 12 (years add 3): P 3/4, R 1, F1 6/7; first % is 29.2%.
    (23, "29.2 %, 30.6 %, 30.6 %", "2021: 29.2%  \n2022: 30.6%  \n2023: 30.6%", 0, F(6, 7), 1, 1, 1),
    # [97, %] of 7 gold tokens: P 1, R 2/7, F1 4/9; the first number, 97%, matches.
    (24, "97% completion of 11,401 employees", "97%", 0, F(4, 9), 1, 1, 1),
    # Page 5 not among [50, 50, 45, 46, 50].
    (33, "15,849 acres", "15,849 acres", 1, 1, 1, 1, 0),
    # 3 of 5 gold tokens, P 1: F1 3/4; gold's first number is a bare 3 ("Risk" is no scale), pred 3 million.
    (35, "almost 3 Risk Management million", "almost 3 million", 0, F(3, 4), 0, 1, 1),
    # [15, 273] vs [15, 273, tonnes]: P 2/3, R 1, F1 4/5; gold has no unit, so Tonnes is accepted.
    (37, "15,273", "15,273 Tonnes", 0, F(4, 5), 1, 1, 1),
    # [included] vs [yes, included]: F1 2/3.
    (40, "Included", "Yes — Included.", 0, F(2, 3), 0, 0, 1),
]


@pytest.fixture
def real_scores(shared_samples):
    folder = shared_samples / "esgbench"
    return score_files(folder / "esgbench_open_source_sample40.jsonl", folder / "esgbench_preds_sample40.jsonl")


@pytest.mark.parametrize("line, gold, pred, em, f1, numeric, numeric_item, recall", REAL_ITEMS)
def test_real_sample_items(real_scores, line, gold, pred, em, f1, numeric, numeric_item, recall):
    records, _ = real_scores
    record = records[line - 1]
    assert (record["answer"], record["prediction"]) == (gold, pred)
    assert record["em"] == em
    assert record["f1"] == pytest.approx(float(f1))
    assert (record["numeric"], record["numeric_item"], record["recall@5"]) == (numeric, numeric_item, recall)


def test_real_sample_totals(real_scores):
    records, metrics = real_scores
    # EM on lines 7, 9, 15, 16, 31, 33. Numeric right on 6, 8, 9, 15, 16, 23, 24, 30, 33, 36, 37, 39.
    # No number in gold on 7, 10, 11, 12, 13, 17, 31, 32, 34, 38, 40: 29 numeric items.
    # Evidence page missed on 2, 5, 10, 14, 18, 21, 22, 25, 28, 29, 33, 38: 28 of 40 found.
    assert metrics["n_items"] == 40
    assert metrics["em"] == pytest.approx(6 / 40)
    assert metrics["numeric_accuracy"] == pytest.approx(12 / 40)
    assert metrics["n_numeric_items"] == 29
    assert metrics["numeric_accuracy/numeric_items"] == pytest.approx(12 / 29)
    assert metrics["recall@5"] == pytest.approx(28 / 40)
    assert metrics["f1"] == pytest.approx(sum(r["f1"] for r in records) / 40)
    assert (metrics["n_unknown_unit"], metrics["n_unjoined_predictions"], metrics["n_missing_predictions"]) == (0, 0, 0)
    # Environmental: lines 2, 3, 5, 6, 14, 18, 30, 32, 33, 37, 39; right: 6, 30, 33, 37, 39.
    assert (metrics["category/Environmental/accuracy"], metrics["category/Environmental/n"]) == (
        pytest.approx(5 / 11),
        11,
    )
    # Governance: 4, 8, 10, 25, 29, 31, 34, 38, 40; right: 8 (numeric), 31 (EM).
    assert (metrics["category/Governance/accuracy"], metrics["category/Governance/n"]) == (pytest.approx(2 / 9), 9)
    assert metrics["category/Social - Diversity & Inclusion/accuracy"] == 0.5  # line 23 right, 27 not stated
    assert sum(v for k, v in metrics.items() if k.startswith("category/") and k.endswith("/n")) == 40


def test_real_sample_items_carry_the_benchmark_fields(shared_samples):
    loaded = ESGBenchGold("esgbench", str(shared_samples / "esgbench" / "esgbench_open_source_sample40.jsonl")).load()
    assert loaded.skipped == []
    first = loaded.items[0]
    assert first.answers == ("18%",) and first.qtype == "esgbench"
    assert first.context == ("Economic Empowerment 0.62 18%",)
    assert first.meta == {
        "doc_name": "MTN_NIGERIA_COMMUNICATIONS_PLC_2024_Sustainability",
        "company": "Mtn Nigeria Communications Plc",
        "category": "Social",
        "kpi_name": "Health: Economic Empowerment",
        "evidence_pages": [81],
        "line": 1,
    }
    assert len({item.id for item in loaded.items}) == 40


# --- our bundled sample ---


def test_bundled_sample_scores():
    records, metrics = score_files(BUNDLED_GOLD, BUNDLED_PREDS)
    # Right: 1.48 MtCO2e ~ 1,482,300 t (0.2%); 2.35 million m³ = 2,350 ML; 0.41; 3,100 GWh = 3.1 TWh;
    # 32 % vs 31.5% (0.5 pp); 24,000 MWh = 86,400 GJ; $1.2m = USD 1.2 million; 52,000 MMBtu.
    # Wrong: 18% vs 18.6% (0.6 pp, 3.2%); "Seven" has no digits; 412 tCO2e vs 412 ktCO2e.
    assert [r["numeric"] for r in records] == [1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0]
    assert [r["em"] for r in records] == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    # 1: [1, 482, 300, tco2e] vs 9 tokens of "Scope 1 emissions totalled 1.48 MtCO2e in 2024.", one
    #    "1" shared: P 1/9, R 1/4, F1 2/13 (its numeric check skips the unit-less "Scope 1").
    # 2: [18, 6, %] vs [18, %]: 4/5. 3: [2, 350, megalitres] vs [2, 35, million, m³]: 2/7.
    # 5: [7, of, 11, directors] vs 7 tokens, "of" and "directors" shared: 4/11. 6: [3, 1, twh] vs
    #    [3, 100, gwh]: 1/3. 7: [412, ktco2e] vs [412, tco2e]: 1/2. 8: [31, 5, %] vs [32, %]: 2/5.
    # 9: 5 gold tokens in 7 predicted: 5/6. 11: [usd, 1, 2, million] vs [1, 2m]: P 1/2, R 1/4, 1/3.
    f1 = [F(2, 13), F(4, 5), F(2, 7), 1, F(4, 11), F(1, 3), F(1, 2), F(2, 5), F(5, 6), 0, F(1, 3), 1, 0]
    assert [r["f1"] for r in records] == pytest.approx([float(v) for v in f1])
    assert metrics["f1"] == pytest.approx(float(sum(f1) / 13))
    assert metrics["numeric_accuracy"] == pytest.approx(8 / 13)
    assert (metrics["n_numeric_items"], metrics["n_unknown_unit"]) == (11, 1)
    assert metrics["recall@5"] == pytest.approx(10 / 13)  # pages 52, 37 and 91 not retrieved
    assert metrics["category/Environmental/accuracy"] == pytest.approx(5 / 7)
    assert metrics["category/Social/accuracy"] == 1.0
    assert metrics["category/Governance/accuracy"] == 0.0


# --- bad input ---

GOOD = {
    "company": "Fictional Co",
    "doc_name": "DOC_A",
    "category": "Environmental",
    "kpi_name": "Scope 1",
    "question": "Q1?",
    "answer": "5 tCO2e",
    "evidence": [{"evidence_text": "Scope 1: 5 tCO2e", "evidence_page_num": 3, "evidence_doc_name": "DOC_A"}],
}


def gold_line(**changes):
    row = {**GOOD, **changes}
    return json.dumps({k: v for k, v in row.items() if v is not ...})


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_gold_bad_lines_are_reported_and_skipped(tmp_path):
    bad_page = [{"evidence_text": "x", "evidence_page_num": "7"}]
    gold = write(
        tmp_path / "gold.jsonl",
        [
            gold_line(),
            '{"doc_name": "DOC_A", "question": ',
            gold_line(question="Q3?", answer=...),
            gold_line(question="Q4?", answer="  "),
            gold_line(question="Q5?", evidence=bad_page),
            gold_line(question="Q6?", evidence=[]),
            "",
            gold_line(question=" Q1? "),
            "[1, 2]",
            gold_line(question="Q9?", evidence=[{"evidence_page_num": True}]),
            gold_line(question="Q10?", answer="7%"),
            gold_line(question="Q11?", evidence=[{"evidence_text": "no page"}]),
            gold_line(question="Q12?", evidence=[{"evidence_page_num": 3.0}]),
        ],
    )
    loaded = ESGBenchGold("g", str(gold)).load()
    assert [item.question for item in loaded.items] == ["Q1?", "Q10?"]
    assert [item.meta["line"] for item in loaded.items] == [1, 11]
    assert loaded.skipped == [
        f"{gold} line 2: invalid JSON (Expecting value at column 35)",
        f"{gold} line 3: field 'answer': missing",
        f"{gold} line 4: field 'answer': empty",
        f"{gold} line 5: field 'evidence[0].evidence_page_num': expected a 0-based page number (an integer >= 0), got str '7'",
        f"{gold} line 6: field 'evidence': expected a non-empty list of objects, got list []",
        f"{gold} line 8: field 'question': repeats line 1 (same doc_name and question)",
        f"{gold} line 9: not a JSON object",
        f"{gold} line 10: field 'evidence[0].evidence_page_num': expected a 0-based page number (an integer >= 0), got bool True",
        f"{gold} line 12: field 'evidence[0].evidence_page_num': missing",
        f"{gold} line 13: field 'evidence[0].evidence_page_num': expected a 0-based page number (an integer >= 0), got float 3.0",
    ]


def test_gold_file_missing_or_empty_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        ESGBenchGold("g", str(tmp_path / "nope.jsonl")).load()
    with pytest.raises(UserError, match="is empty"):
        ESGBenchGold("g", str(write(tmp_path / "empty.jsonl", ["", "  "]))).load()
    with pytest.raises(UserError, match="no usable question"):
        ESGBenchGold("g", str(write(tmp_path / "bad.jsonl", [gold_line(answer="")]))).load()
    with pytest.raises(UserError, match=r"dataset.path is not set"):
        ESGBenchGold("g").load()


def test_unjoined_and_missing_predictions_are_counted_and_named(tmp_path):
    gold = write(tmp_path / "gold.jsonl", [gold_line(), gold_line(question="Q2?", answer="Yes")])
    preds = write(
        tmp_path / "preds.jsonl",
        [
            json.dumps({"doc_name": "DOC_A", "question": "Q1?", "pred": "5 tCO2e", "retrieved_pages": [9, 3]}),
            json.dumps({"doc_name": "DOC_B", "question": "Q1?", "pred": "5 tCO2e"}),
            json.dumps({"doc_name": "DOC_A", "question": "Q1?", "pred": "again"}),
            json.dumps({"doc_name": "DOC_A", "question": "Q2?", "pred": None}),
            json.dumps({"doc_name": "DOC_A", "question": "Q2?", "pred": "Yes", "retrieved_pages": [1.5]}),
        ],
    )
    items = ESGBenchGold("g", str(gold)).load().items
    predictions = load_predictions(preds)
    assert predictions.skipped == [
        f"{preds} line 3: field 'question': repeats line 1 (same doc_name and question)",
        f"{preds} line 4: field 'pred': expected a string, got null",
        f"{preds} line 5: field 'retrieved_pages': expected a list of 0-based page numbers, got list [1.5]",
    ]
    joined = join(items, predictions, str(gold))
    assert joined.unjoined == [
        f"{preds} line 2: field 'question': no gold question with doc_name 'DOC_B' and question 'Q1?'"
    ]
    assert joined.missing == [f"{gold} line 2: no prediction in {preds} for doc_name 'DOC_A' and question 'Q2?'"]
    records, metrics = score_esgbench(items, joined)
    assert [r["id"] for r in records] == [items[0].id]  # the item without a prediction is left out
    assert (metrics["n_items"], metrics["n_unjoined_predictions"], metrics["n_missing_predictions"]) == (1, 1, 1)
    assert (metrics["em"], metrics["recall@5"], records[0]["retrieved_pages"]) == (1.0, 1.0, [9, 3])


def test_no_joined_prediction_is_a_user_error(tmp_path):
    gold = write(tmp_path / "gold.jsonl", [gold_line()])
    preds = write(tmp_path / "preds.jsonl", [json.dumps({"doc_name": "DOC_B", "question": "Q1?", "pred": "x"})])
    items = ESGBenchGold("g", str(gold)).load().items
    with pytest.raises(UserError, match="no prediction matches a gold question"):
        score_esgbench(items, join(items, load_predictions(preds)))


def test_recall_needs_retrieved_pages(tmp_path):
    gold = write(tmp_path / "gold.jsonl", [gold_line()])
    preds = write(
        tmp_path / "preds.jsonl", [json.dumps({"doc_name": "DOC_A", "question": "Q1?", "pred": "5.05 tCO2e"})]
    )
    items = ESGBenchGold("g", str(gold)).load().items
    records, metrics = score_esgbench(items, join(items, load_predictions(preds)))
    assert "recall@5" not in metrics and "recall@5" not in records[0]
    assert metrics["numeric_accuracy"] == 1.0  # 5.05 is 1% from 5
    with pytest.raises(UserError, match="positive number of retrieved pages"):
        score_esgbench(items, join(items, load_predictions(preds)), k=0)


def test_limit_keeps_a_seeded_subset():
    first = ESGBenchGold("g", str(BUNDLED_GOLD), limit=4, seed=1).load().items
    again = ESGBenchGold("g", str(BUNDLED_GOLD), limit=4, seed=1).load().items
    assert len(first) == 4 and [i.id for i in first] == [i.id for i in again]


# --- determinism ---

_SCORE_SCRIPT = """
import json, sys
from esgexp.data.esgbench import ESGBenchGold, join, load_predictions
from esgexp.eval.esgbench_metrics import score_esgbench
items = ESGBenchGold("g", sys.argv[1]).load().items
print(json.dumps(score_esgbench(items, join(items, load_predictions(sys.argv[2])))))
"""


def test_scores_and_ids_do_not_depend_on_hash_seed():
    outputs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", _SCORE_SCRIPT, str(BUNDLED_GOLD), str(BUNDLED_PREDS)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    records, _ = json.loads(outputs[0])
    assert records[0]["id"] == ESGBenchGold("g", str(BUNDLED_GOLD)).load().items[0].id
    assert records[0]["id"].startswith("NORTHWIND_CEMENT_LTD_2024_Sustainability#")


def test_predictions_may_carry_the_answer_under_answer(tmp_path):
    from esgexp.data.esgbench import load_predictions

    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"doc_name": "D", "question": "Q?", "answer": "12%"}\n{"doc_name": "D", "question": "R?", "pred": 5}\n'
    )
    loaded = load_predictions(path)
    assert loaded.by_key[("D", "Q?")].text == "12%"
    assert len(loaded.skipped) == 1 and "field 'pred'" in loaded.skipped[0]


def test_a_leading_year_is_not_taken_for_the_value():
    assert numeric_verdict("In 2023, 15,273", "15,273").correct
    assert numeric_verdict("In FY 2024 it fell to 15", "15").correct
    # A gold year is compared with the prediction's first number, years included.
    assert numeric_verdict("The target year is 2050", "2050").correct
    assert numeric_verdict("2030", "2030").correct


def test_plain_tonnes_compare_with_tonnes_of_co2e():
    assert numeric_verdict("9,397 tCO2e", "9,397 tonnes").correct
    assert numeric_verdict("9.4 kt", "9,397 tCO2e").correct
    assert not numeric_verdict("9,397 MWh", "9,397 tonnes").correct
