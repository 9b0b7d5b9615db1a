"""Leaderboard rows: one per finished evaluation run, its headline metric with the interval, the
"not significantly worse than the best" mark, as CSV and Markdown.

A run's headline metric is the one its job declared (tags ``headline_metric`` and ``higher_is_better``);
runs logged before jobs declared it fall back to the first of LEGACY_HEADLINES they have."""

from __future__ import annotations

import csv
import io
import math

from esgexp.core.tracking import metric_name
from esgexp.leaderboard.store import Run

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
    ("encoder", ("tags.encoder",)),
    ("predictions", ("tags.predictions",)),
    ("judge", ("tags.judge_model",)),  # judge=...: the judge model and its prompt version (esgexp/eval/judge.py)
    ("judge_prompt", ("tags.judge_prompt",)),
    ("n", ("metrics.n_items", "metrics.n_queries")),
    ("unanswered", ("metrics.n_failed",)),
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
    ("judge_accuracy", ("metrics.judge/accuracy",)),
    ("judge_credit", ("metrics.judge/credit",)),
]
# The headline metric, its 95% interval and standard error, and the comparison with the best run.
# ``ci_note``: why there is no interval (one cluster); ``items``: the item set the run's table ranks it in;
# ``variant``: the settings that tell it apart from runs of the same model, strategy and scoring.
HEADLINE_COLUMNS = ["headline", "value", "ci_low", "ci_high", "stderr", "not_worse", "p_vs_best", "ci_note"]
COLUMN_NAMES = (
    [name for name, _ in RUN_COLUMNS]
    + ["items", "variant"]
    + HEADLINE_COLUMNS
    + [name for name, _ in METRIC_COLUMNS]
    + ["run_id"]
)
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


def interval_note(run: Run) -> str:
    """Why the run's headline has no interval: ``one cluster`` / ``one item`` (too few to resample); ""
    when it has one, or for a run logged before jobs said so."""
    values = headline_values(run)
    if values["value"] == "" or values["ci_low"] != "":
        return ""
    clustered = run.param("dataset.cluster_key") is not None
    units = run.metrics.get("stats/n_clusters")
    if units is None or units >= 2:
        return ""
    return f"one {'cluster' if clustered else 'item'}" if units == 1 else ""


def n_unanswered(run: Run) -> int:
    """How many of the run's items were never answered (retries ran out): the run is incomplete when > 0."""
    return int(run.metrics.get("n_failed") or 0)


def uses_model(run: Run) -> bool:
    """Whether a language model gave the run's answers: jobs that run none (retrieval with a fixed query,
    scoring a predictions file) still log the default model's params, but carry no ``model`` tag (or
    ``external``)."""
    return run.tags.get("model") not in (None, "", "external")


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
    with_model = uses_model(run)
    flat.update({f"params.{k}": v for k, v in run.params.items() if with_model or not k.startswith("model.")})
    flat.update({f"metrics.{k}": v for k, v in run.metrics.items()})
    row = {name: next((flat[s] for s in sources if s in flat), "") for name, sources in RUN_COLUMNS + METRIC_COLUMNS}
    row.update(headline_values(run), not_worse="", p_vs_best="", run_id=run.run_id)
    row.update(items=run.item_set, variant=run.variant, ci_note=interval_note(run))
    return row


# The settings that pick a run's items from its data file (the file itself: its sha256, else its path).
SAMPLING_PARAMS = (
    "dataset.hf_id",
    "dataset.split",
    "dataset.limit",
    "dataset.qtypes",
    "dataset.core_only",
    "scoring.circular",
    "retrieval.corpus",
)


def item_set(run: Run) -> dict[str, str]:
    """What decides the items a run was scored on: the data file (its name and sha256, else its path),
    the sampling settings (a limit with its seed) and the number of items scored."""
    path = run.param("dataset.path") or ""
    digest = run.tags.get("data_sha256", "")[:8]
    found = {"dataset.file": f"{path.rsplit('/', 1)[-1]}@{digest}" if digest else path}
    found.update({key: run.param(key) or "" for key in SAMPLING_PARAMS})
    limit = run.param("dataset.limit")
    found["dataset.limit"] = f"{limit} (seed {run.param('dataset.seed')})" if limit else "none"
    n = run.metrics.get("n_items", run.metrics.get("n_queries"))
    found["n"] = str(int(n)) if n is not None else ""
    return found


def item_set_labels(runs: list[Run]) -> dict[str, str]:
    """``48 items`` per run id, with the settings that set apart the item sets of ``runs`` when there
    are several (``3 items · limit=3 (seed 42)``; ``48 items · limit=none``)."""
    import json

    from esgexp.analysis.variants import variant_labels

    sets = {run.run_id: item_set(run) for run in runs}
    distinct = {json.dumps(found, sort_keys=True): found for found in sets.values()}
    differing = variant_labels({key: {k: v for k, v in found.items() if k != "n"} for key, found in distinct.items()})
    labels = {}
    for run_id, found in sets.items():
        text = f"{found['n']} items" if found["n"] else "items"
        extra = differing[json.dumps(found, sort_keys=True)]
        labels[run_id] = f"{text} · {extra}" if extra else text
    return labels


def base_label(run: Run) -> str:
    """What a run is called before its variant: model · strategy · scoring (retrieval: retriever · query;
    scoring a file: its name)."""
    from esgexp.leaderboard.figures import label

    return label(run, with_variant=False)


def set_variants(runs: list[Run]) -> None:
    """``run.variant`` for runs sharing one base label: the settings in which they differ."""
    from esgexp.analysis.variants import variant_labels

    same: dict[str, list[Run]] = {}
    for run in runs:
        same.setdefault(base_label(run), []).append(run)
    for group in same.values():
        labels = variant_labels({run.run_id: run.params for run in group})
        for run in group:
            run.variant = labels[run.run_id] or (run.run_id[:8] if len(group) > 1 else "")


def rank_key(run: Run) -> tuple:
    """Complete runs first, best headline first, ties by model name; incomplete runs (items never
    answered) after them: they are not ranked."""
    return (n_unanswered(run) > 0, -signed_value(run), run.tags.get("model", ""))


def board_groups(runs: list[Run]) -> dict[tuple[str, str, str], list[Run]]:
    """Runs per (dataset, task, item set), ranked (:func:`rank_key`). The item set is "" when the (dataset,
    task) has one, else its label (``3 items · limit=3 (seed 42)``); each run's ``item_set`` and ``variant``
    are set."""
    by_task: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        by_task.setdefault((run.tags.get("dataset", ""), run.tags.get("task", "")), []).append(run)
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for (dataset, task), found in sorted(by_task.items()):
        labels = item_set_labels(found)
        several = len(set(labels.values())) > 1
        set_variants(found)
        for run in found:
            run.item_set = labels[run.run_id]
            groups.setdefault((dataset, task, labels[run.run_id] if several else ""), []).append(run)
    return {key: sorted(group, key=rank_key) for key, group in sorted(groups.items(), key=group_order)}


def group_order(entry) -> tuple:
    """(dataset, task), then the item set with most items first."""
    (dataset, task, _), runs = entry
    n = runs[0].metrics.get("n_items", runs[0].metrics.get("n_queries")) or 0
    return dataset, task, -n, entry[0][2]


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
