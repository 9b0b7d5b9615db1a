"""Factoid metrics: SQuAD exact match and token precision/recall/F1, extended to multi-span answers.

Normalisation is SQuAD's: lower-case, drop punctuation, drop the articles a/an/the, collapse
whitespace. Punctuation is ASCII punctuation plus every Unicode punctuation character (curly
quotes, dashes), which PDF-extracted gold answers are full of.

Spans: an answer text is a set of spans separated by ";" or by a comma that is not between two
digits, so "solar, wind; hydro" has 3 spans and "1,000 t" or "2,5" one. "and" does not separate.
Spans are normalised; empty and repeated ones are dropped.

Per item, against one reference text:

* ``em``: 1.0 when the prediction's span set equals the reference's (order and repeats
  ignored); with one span on each side this is SQuAD exact match.
* ``precision``, ``recall``, ``f1``: SQuAD token overlap between the bags of tokens of all
  spans (SustainableQA reports token-level F1; for a single span this is SQuAD F1 exactly).
  An empty side scores 1.0 only against an empty other side, as in SQuAD.

With several reference texts the one with the highest (f1, em) gives all four values. ``spans``
is the span count of the first reference (at least 1), which the run-level breakdown groups by.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from statistics import fmean

from esgexp.eval.base import MetricResult
from esgexp.eval.metric_inputs import check_inputs

VALUES = ("em", "precision", "recall", "f1")
BUCKETS = ("1", "2", "3", "4", "5+")

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPAN_SEPARATOR = re.compile(r";|(?<!\d),|,(?!\d)")


@lru_cache(maxsize=4096)
def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def normalize(text: str) -> str:
    """SQuAD answer normalisation (see the module docstring)."""
    text = "".join(char for char in text.lower() if not _is_punctuation(char))
    return " ".join(_ARTICLES.sub(" ", text).split())


def split_spans(text: str) -> list[str]:
    """The distinct non-empty normalised spans of an answer text, in order of appearance."""
    spans = (normalize(part) for part in _SPAN_SEPARATOR.split(text))
    return list(dict.fromkeys(span for span in spans if span))


def span_bucket(n_spans: int) -> str:
    """The breakdown bucket of a span count: "1" .. "4", then "5+"."""
    return "5+" if n_spans >= 5 else str(max(n_spans, 1))


def compare(predicted: list[str], gold: list[str]) -> dict[str, float]:
    """em, precision, recall and f1 of one predicted span list against one gold span list."""
    em = float(set(predicted) == set(gold))
    predicted_tokens = [token for span in predicted for token in span.split()]
    gold_tokens = [token for span in gold for token in span.split()]
    common = sum((Counter(predicted_tokens) & Counter(gold_tokens)).values())
    if not predicted_tokens or not gold_tokens:
        precision = recall = f1 = float(predicted_tokens == gold_tokens)
    elif common == 0:
        precision = recall = f1 = 0.0
    else:
        precision = common / len(predicted_tokens)
        recall = common / len(gold_tokens)
        f1 = 2 * precision * recall / (precision + recall)
    return {"em": em, "precision": precision, "recall": recall, "f1": f1}


def score_item(prediction: str, references: Sequence[str]) -> dict[str, float]:
    """The per-item values of one prediction against its reference texts (best reference)."""
    predicted = split_spans(prediction)
    golds = [split_spans(reference) for reference in references]
    best = max((compare(predicted, gold) for gold in golds), key=lambda values: (values["f1"], values["em"]))
    return {**best, "spans": float(max(len(golds[0]), 1))}


def summarise(per_item: list[dict[str, float]]) -> dict[str, float]:
    """Means of em/precision/recall/f1, overall and per span bucket (``by_spans/<bucket>/<value>``).

    Every bucket reports its item count ``by_spans/<bucket>/n``; an empty bucket reports only that."""
    summary = {key: fmean(item[key] for item in per_item) for key in VALUES}
    for bucket in BUCKETS:
        group = [item for item in per_item if span_bucket(int(item["spans"])) == bucket]
        summary[f"by_spans/{bucket}/n"] = float(len(group))
        if group:
            summary.update({f"by_spans/{bucket}/{key}": fmean(item[key] for item in group) for key in VALUES})
    return summary


class SpanMatch:
    """Factoid exact match and token precision/recall/F1 over answer spans, with a span-count breakdown."""

    name = "span_match"

    def score(self, predictions: list[str], references: list[tuple[str, ...]]) -> MetricResult:
        check_inputs(predictions, references)
        per_item = [score_item(prediction, refs) for prediction, refs in zip(predictions, references)]
        return MetricResult(per_item=per_item, summary=summarise(per_item))
