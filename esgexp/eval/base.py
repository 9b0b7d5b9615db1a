"""What every open-QA metric returns, so the runner can log any of them the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class MetricResult:
    """``per_item``: one dict of values per prediction (saved in predictions.jsonl);
    ``summary``: the run-level values (metrics.json, MLflow); ``info``: what was used
    (a model path, a fallback taken), recorded as MLflow tags; ``corpus``: the summary values that are
    not means of per-item values (corpus BLEU), so their intervals can be resampled."""

    per_item: list[dict[str, float]]
    summary: dict[str, float]
    info: dict[str, str] = field(default_factory=dict)
    corpus: dict[str, CorpusStatistic] = field(default_factory=dict)


@dataclass(frozen=True)
class CorpusStatistic:
    """A summary value computed from per-item counts summed over the corpus: ``rows`` one list of
    counts per item, ``compute`` the value of their column sums."""

    rows: list[list[float]]
    compute: Callable[[Sequence[float]], float]
