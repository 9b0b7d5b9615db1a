"""ESGBench answer metrics: exact match, token F1, numeric accuracy, per-category accuracy.

Numeric rule. The gold answer's first number is the target; gold without a number is not a
numeric item (it counts as wrong in ``numeric_accuracy``, which runs over all items as the
ESGBench paper reports it). When gold has a unit (known or not), the prediction's first number in
that unit family is compared and a prediction with none (a bare number, another family) is wrong;
when gold has no unit, the prediction's first number is compared whatever its unit, skipping bare
years (1900-2100) unless gold is one ("In 2023, 15,273" answers "15,273"). Plain tonnes and tonnes
of CO2e are one family ("9,397 tonnes" for 9,397 tCO2e; kt and Mt scale both). A number is
right within 2% of gold (relative, in the base unit, as the ESGBench evaluator checks it); a
percentage must also be within 0.5 percentage points, so 94% for 92.3% (1.8% relative, 1.7 points)
is wrong, and so is 12.4% for 12% (3.3% relative). Small percentages are never judged more leniently
than ESGBench's own rule.

ESGBench's own rule (``numeric="esgbench"``, its ``scripts/evaluate_esgbench.py``): each text's first
number once every comma is deleted (no scale words: ``3 million`` is 3), and the first of a few unit
names found anywhere in the lower-cased text (``%`` counts, ``percent`` does not). Right when both texts
have a number, gold has no unit or the prediction has the same one, and the two are within 2% of gold.
Where the two rules differ: docs/protocols.md (ESGBench).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from esgexp.core.records import QAItem
from esgexp.data.esgbench import JoinResult
from esgexp.errors import UserError
from esgexp.eval.base import MetricResult
from esgexp.eval.numbers import Quantity, find_quantities, parse_quantity
from esgexp.eval.retrieval_metrics import page_recall_at_k

log = logging.getLogger(__name__)

RELATIVE_TOLERANCE = 0.02
PERCENT_POINTS_TOLERANCE = 0.5
_TOKEN = re.compile(r"[^\W_]+|[%/°]+")


def normalize(text: str) -> str:
    """Lower-cased, with whitespace runs collapsed to one space and the ends stripped."""
    return " ".join(text.lower().split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalized texts are equal."""
    return float(normalize(prediction) == normalize(gold))


def tokens(text: str) -> list[str]:
    """Runs of letters and digits (any script), and runs of ``%``, ``/`` and ``°``, lower-cased."""
    return _TOKEN.findall(text.lower())


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the token multisets; 1.0 when both are empty, 0.0 when only one is."""
    predicted, expected = tokens(prediction), tokens(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class NumericVerdict:
    """``item``: gold has a number; ``correct``: the prediction matches it; ``unknown_units``:
    unit tokens the parser does not know among the compared numbers."""

    item: bool
    correct: bool
    unknown_units: tuple[str, ...] = ()


def numeric_verdict(prediction: str, gold: str) -> NumericVerdict:
    """Judge ``prediction`` against the first number in ``gold`` (see the module rule)."""
    target = parse_quantity(gold)
    if target is None:
        return NumericVerdict(item=False, correct=False)
    family = _family(target)
    found = find_quantities(prediction)
    if family is None and not _is_year(target):
        found = [q for q in found if not _is_year(q)] or found  # "In 2023, 15,273" answers "15,273"
    candidates = [q for q in found if _family(q) == family] if family else found
    compared = candidates[0] if candidates else (found[0] if found else None)
    correct = bool(candidates) and _close(candidates[0].value, target.value, target.unit == "%")
    unknown = [q.unknown_unit for q in (target, compared) if q is not None and q.unknown_unit]
    return NumericVerdict(item=True, correct=correct, unknown_units=tuple(dict.fromkeys(unknown)))


def _is_year(quantity: Quantity) -> bool:
    """A bare four-digit number from 1900 to 2100 written without separators: a year, not a value."""
    return quantity.unit is None and quantity.raw.strip().isdigit() and 1900 <= quantity.value <= 2100


# Families compared as one: tonnes of CO2e written as plain tonnes ("9,397 tonnes" for 9,397 tCO2e).
SAME_FAMILY = {"t": "tCO2e"}


def _family(quantity: Quantity) -> str | None:
    """Known units by base unit (plain tonnes with tCO2e); an unknown unit token is a family of its own."""
    if quantity.unit:
        return SAME_FAMILY.get(quantity.unit, quantity.unit)
    return f"unknown:{quantity.unknown_unit}" if quantity.unknown_unit else None


def _close(value: float, gold: float, percent: bool) -> bool:
    bound = RELATIVE_TOLERANCE * abs(gold)
    if percent:  # both: 2% relative and at most 0.5 points (92.3% vs 94% is 1.8% relative but 1.7 points off)
        bound = min(bound, PERCENT_POINTS_TOLERANCE)
    return abs(value - gold) <= bound * (1 + 1e-9)


# ESGBench's reading of a number once commas are deleted: digits, a decimal point, an exponent.
_PAPER_NUMBER = re.compile(r"[-+]?\d+\.?\d*(?:e[+-]?\d+)?")
# The unit names ESGBench's evaluator looks for as substrings of the lower-cased text. It tries them in
# a Python set's order, which changes from process to process; here in this order, the kilo and mega
# CO2e units before the ``tco2e`` they contain.
PAPER_UNITS = ("mtco2e", "ktco2e", "tco2e", "tco₂e", "mwh", "gj", "%", "usd", "eur", "inr")


def paper_number(text: str) -> tuple[float | None, str | None]:
    """(value, unit) as ESGBench's evaluator reads ``text``: its first number once every comma is
    deleted (``1,40,987`` is 140987, ``3 million`` is 3), or None; the first of PAPER_UNITS found
    anywhere in the lower-cased text, or None."""
    found = _PAPER_NUMBER.search(text.replace(",", ""))
    lowered = text.lower()
    unit = next((name for name in PAPER_UNITS if name in lowered), None)
    return (float(found.group()) if found else None), unit


def paper_numeric_verdict(prediction: str, gold: str) -> NumericVerdict:
    """ESGBench's own numeric rule: right when both texts have a number, gold has no unit or the
    prediction the same one, and the prediction is within 2% of gold (1e-9 when gold is 0)."""
    target, gold_unit = paper_number(gold)
    if target is None:
        return NumericVerdict(item=False, correct=False)
    value, unit = paper_number(prediction)
    if value is None or gold_unit not in (None, unit):
        return NumericVerdict(item=True, correct=False)
    return NumericVerdict(item=True, correct=abs(target - value) <= max(1e-9, RELATIVE_TOLERANCE * abs(target)))


# metrics.numeric: the rule behind ``numeric`` and ``numeric_accuracy``; the other's values go under alt/<rule>/.
NUMERIC_RULES = {"unit_aware": numeric_verdict, "esgbench": paper_numeric_verdict}


def other_rules(selected: str) -> list[str]:
    """The numeric rules other than ``selected``, whose values are logged under ``alt/<rule>/``."""
    return [rule for rule in NUMERIC_RULES if rule != selected]


class ESGBenchMetrics:
    """EM, token F1 and numeric accuracy of answers against reference texts (best reference counts);
    ``numeric``: the numeric rule of ``numeric`` and ``numeric_accuracy`` (a key of NUMERIC_RULES)."""

    name = "esgbench"

    def __init__(self, numeric: str = "unit_aware"):
        if numeric not in NUMERIC_RULES:
            raise UserError(f"metrics.numeric={numeric!r}: expected one of {', '.join(NUMERIC_RULES)}")
        self.numeric = numeric

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        """Per item ``em``, ``f1``, ``numeric``, ``numeric_item``; summary ``em``, ``f1``,
        ``numeric_accuracy`` (all items), ``numeric_accuracy/numeric_items`` (when any gold has a
        number), ``n_numeric_items`` and, for the unit-aware rule, ``n_unknown_unit`` (items warned
        about an unknown unit). The other rule's numeric values come again under ``alt/<rule>/``."""
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions for {len(references)} reference sets")
        per_item = [
            {
                "em": max(exact_match(prediction, gold) for gold in golds),
                "f1": max(token_f1(prediction, gold) for gold in golds),
            }
            for prediction, golds in zip(predictions, references)
        ]
        summary = {"em": _mean(v["em"] for v in per_item), "f1": _mean(v["f1"] for v in per_item)}
        for rule in [self.numeric, *other_rules(self.numeric)]:
            prefix = "" if rule == self.numeric else f"alt/{rule}/"
            values, rule_summary = numeric_scores(rule, predictions, references)
            for row, found in zip(per_item, values):
                row.update({prefix + key: value for key, value in found.items()})
            summary.update({prefix + key: value for key, value in rule_summary.items()})
        return MetricResult(per_item=per_item, summary=summary)


def numeric_scores(
    rule: str, predictions: Sequence[str], references: Sequence[tuple[str, ...]]
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Per item ``numeric`` and ``numeric_item`` under ``rule`` (best reference counts), and the summary
    ``numeric_accuracy``, ``n_numeric_items``, ``n_unknown_unit`` (unit-aware rule only) and
    ``numeric_accuracy/numeric_items`` (when any gold has a number)."""
    judge = NUMERIC_RULES[rule]
    per_item, n_unknown = [], 0
    for index, (prediction, golds) in enumerate(zip(predictions, references)):
        verdicts = [judge(prediction, gold) for gold in golds]
        unknown = list(dict.fromkeys(unit for v in verdicts for unit in v.unknown_units))
        if unknown:
            n_unknown += 1
            names = ", ".join(unknown)
            log.warning("answer %d (gold %r): unit %s unknown to the number parser", index, golds[0], names)
        per_item.append(
            {"numeric": float(any(v.correct for v in verdicts)), "numeric_item": float(any(v.item for v in verdicts))}
        )
    numeric_items = [values for values in per_item if values["numeric_item"]]
    summary = {"numeric_accuracy": _mean(v["numeric"] for v in per_item), "n_numeric_items": len(numeric_items)}
    if rule == "unit_aware":
        summary["n_unknown_unit"] = n_unknown
    if numeric_items:
        summary["numeric_accuracy/numeric_items"] = _mean(v["numeric"] for v in numeric_items)
    return per_item, summary


def category_accuracy(
    per_item: Sequence[Mapping[str, float]], categories: Sequence[str], prefix: str = ""
) -> dict[str, float]:
    """``<prefix>category/<name>/accuracy`` and ``<prefix>category/<name>/n``, names sorted; an item is
    right when its EM or its ``<prefix>numeric`` value is (``prefix``: ``alt/<rule>/`` for another
    numeric rule). (MLflow gets names it accepts from ``tracking.metric_name``.)"""
    outcomes: dict[str, list[float]] = {}
    for values, category in zip(per_item, categories, strict=True):
        right = float(values["em"] == 1.0 or values[f"{prefix}numeric"] == 1.0)
        outcomes.setdefault(category, []).append(right)
    summary: dict[str, float] = {}
    for name in sorted(outcomes):
        summary[f"{prefix}category/{name}/accuracy"] = _mean(outcomes[name])
        summary[f"{prefix}category/{name}/n"] = len(outcomes[name])
    return summary


def score_esgbench(
    items: Sequence[QAItem], joined: JoinResult, k: int = 5, numeric: str = "unit_aware"
) -> tuple[list[dict], dict[str, float]]:
    """Score the gold items that have a prediction: one record per item and the run metrics, the
    numeric ones by the ``numeric`` rule (the other rules' again under ``alt/<rule>/``).

    ``recall@k`` (page recall of the gold evidence pages among the first ``k`` retrieved) is added
    when predictions carry ``retrieved_pages``, over those items (``n_retrieval_items``)."""
    if k < 1:
        raise UserError(f"k must be a positive number of retrieved pages, got {k}")
    scored = [item for item in items if item.id in joined.by_item]
    if not scored:
        raise UserError(
            f"{joined.source}: no prediction matches a gold question (rows join on doc_name and question); "
            f"{len(joined.unjoined)} prediction rows unmatched"
        )
    predictions = [joined.by_item[item.id] for item in scored]
    result = ESGBenchMetrics(numeric).score([p.text for p in predictions], [item.answers for item in scored])
    records = [
        {
            "id": item.id,
            "doc_name": item.meta["doc_name"],
            "category": item.meta["category"],
            "question": item.question,
            "answer": item.answers[0],
            "prediction": prediction.text,
            **values,
        }
        for item, prediction, values in zip(scored, predictions, result.per_item)
    ]
    metrics = {"n_items": len(scored), **result.summary}
    with_pages = [i for i, prediction in enumerate(predictions) if prediction.retrieved_pages is not None]
    if with_pages:
        retrieved = [predictions[i].retrieved_pages for i in with_pages]
        hits = page_recall_at_k(retrieved, [scored[i].meta["evidence_pages"] for i in with_pages], k)
        for i, hit in zip(with_pages, hits):
            records[i]["retrieved_pages"] = list(predictions[i].retrieved_pages)
            records[i][f"recall@{k}"] = hit
        metrics[f"recall@{k}"] = _mean(hits)
        metrics["n_retrieval_items"] = len(with_pages)
    categories = [item.meta["category"] for item in scored]
    for prefix in ["", *(f"alt/{rule}/" for rule in other_rules(numeric))]:
        metrics.update(category_accuracy(result.per_item, categories, prefix))
    metrics["n_unjoined_predictions"] = len(joined.unjoined)
    metrics["n_missing_predictions"] = len(joined.missing)
    return records, metrics


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
