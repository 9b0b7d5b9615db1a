"""Leaderboard rows: one per finished evaluation run, its headline metric with the interval, the
"not significantly worse than the best" mark, as CSV and Markdown.

A run's headline metric is the one its job declared (tags ``headline_metric`` and ``higher_is_better``);
runs logged before jobs declared it fall back to the first of LEGACY_HEADLINES they have."""

from __future__ import annotations

import csv
import io
import math

from esgexp.leaderboard.store import Run
from esgexp.tracking import metric_name

# (column, where MLflow keeps it): the first source a run has fills the cell.
RUN_COLUMNS = [
    ("dataset", ("tags.dataset",)),
    ("task", ("tags.task",)),
    ("model", ("tags.model",)),
    ("backend", ("tags.backend",)),
    ("finetuned_from", ("tags.finetuned_from",)),
    ("family", ("params.model.family",)),
    ("size_b", ("params.model.size_b",)),
    ("instruct", ("params.model.instruct",)),
    ("strategy", ("tags.strategy",)),
    ("retriever", ("tags.retriever",)),
    ("query", ("tags.query",)),
    ("scoring", ("tags.scoring",)),
    ("predictions", ("tags.predictions",)),
    ("n", ("metrics.n_items", "metrics.n_queries")),
]
METRIC_COLUMNS = [
    ("accuracy", ("metrics.accuracy",)),
    ("invalid_rate", ("metrics.invalid_rate",)),
    ("factoid_f1", ("metrics.factoid/f1",)),
    ("nonfactoid_rouge_l", ("metrics.non_factoid/rougeL",)),
    ("nonfactoid_bertscore", ("metrics.non_factoid/bertscore_f1",)),
    ("table_rouge_l", ("metrics.table/rougeL",)),
    ("esgbench_numeric_acc", ("metrics.esgbench/numeric_accuracy", "metrics.numeric_accuracy")),
    ("recall@10", ("metrics.recall_at_10",)),
]
# The headline metric, its 95% interval and standard error, and the comparison with the best run.
HEADLINE_COLUMNS = ["headline", "value", "ci_low", "ci_high", "stderr", "not_worse", "p_vs_best"]
COLUMN_NAMES = [name for name, _ in RUN_COLUMNS] + HEADLINE_COLUMNS + [name for name, _ in METRIC_COLUMNS] + ["run_id"]
# Runs logged before jobs declared a headline metric: the first of these they have (all higher-is-better).
LEGACY_HEADLINES = (
    "accuracy",
    "factoid/f1",
    "non_factoid/rougeL",
    "table/rougeL",
    "esgbench/numeric_accuracy",
    "numeric_accuracy",
    "recall@10",
)
RATE_COLUMNS = {"value", "ci_low", "ci_high", "stderr", *(name for name, _ in METRIC_COLUMNS)}


def headline(run: Run) -> tuple[str, bool] | None:
    """(metrics.json key, higher is better) of the run's headline metric; None when it has none."""
    declared = run.tags.get("headline_metric")
    if declared:
        return declared, run.tags.get("higher_is_better", "true").lower() != "false"
    key = next((key for key in LEGACY_HEADLINES if metric_name(key) in run.metrics), None)
    return (key, True) if key else None


def headline_values(run: Run) -> dict:
    """``headline``, ``value``, ``ci_low``, ``ci_high``, ``stderr`` of ``run`` ("" where not logged)."""
    declared = headline(run)
    if declared is None:
        return dict.fromkeys(["headline", "value", "ci_low", "ci_high", "stderr"], "")
    key, _ = declared
    name = metric_name(key)
    out = {"headline": key, "value": run.metrics.get(name, "")}
    out.update({part: run.metrics.get(f"{name}/{part}", "") for part in ("ci_low", "ci_high", "stderr")})
    return out


def signed_value(run: Run) -> float:
    """The headline value with larger meaning better (-inf when the run has none)."""
    declared = headline(run)
    value = run.metrics.get(metric_name(declared[0])) if declared else None
    if value is None or math.isnan(value):
        return -math.inf
    return value if declared[1] else -value


def run_row(run: Run) -> dict:
    """The CSV/Markdown cells of one run (the mark columns are filled by :func:`mark_rows`)."""
    flat = {f"tags.{k}": v for k, v in run.tags.items()}
    # Jobs that run no model (retrieval with a fixed query, scoring a file) still carry the default
    # model's params; only a run tagged with a model shows them.
    uses_model = run.tags.get("model") not in (None, "external")
    flat.update({f"params.{k}": v for k, v in run.params.items() if uses_model or not k.startswith("model.")})
    flat.update({f"metrics.{k}": v for k, v in run.metrics.items()})
    row = {name: next((flat[s] for s in sources if s in flat), "") for name, sources in RUN_COLUMNS + METRIC_COLUMNS}
    row.update(headline_values(run), not_worse="", p_vs_best="", run_id=run.run_id)
    return row


def board_groups(runs: list[Run]) -> dict[tuple[str, str], list[Run]]:
    """Runs per (dataset, task), best headline first (ties by model name)."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.tags.get("dataset", ""), run.tags.get("task", "")), []).append(run)
    return {
        key: sorted(group, key=lambda r: (-signed_value(r), r.tags.get("model", "")))
        for key, group in sorted(groups.items())
    }


def format_value(name: str, value) -> str:
    """Rates with four decimals, counts as integers, the rest as MLflow stored them."""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if name == "p_vs_best":
            return f"{value:.3g}"
        return f"{value:.4f}" if name in RATE_COLUMNS else str(int(value))
    return str(value)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMN_NAMES)
    writer.writerows([[format_value(name, row[name]) for name in COLUMN_NAMES] for row in rows])
    return buffer.getvalue()


def to_markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMN_NAMES) + " |", "|" + "---|" * len(COLUMN_NAMES)]
    lines += [
        "| " + " | ".join(format_value(name, row[name]).replace("|", "\\|") for name in COLUMN_NAMES) + " |"
        for row in rows
    ]
    return "\n".join(lines) + "\n"
