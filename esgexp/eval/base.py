"""What every open-QA metric returns, so the runner can log any of them the same way."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MetricResult:
    """``per_item``: one dict of values per prediction (saved in predictions.jsonl);
    ``summary``: the run-level values (metrics.json, MLflow); ``info``: what was used
    (a model path, a fallback taken), recorded as MLflow tags."""

    per_item: list[dict[str, float]]
    summary: dict[str, float]
    info: dict[str, str] = field(default_factory=dict)
