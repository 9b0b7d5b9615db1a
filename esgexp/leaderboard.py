"""``python -m esgexp.leaderboard``: all finished MLflow evaluation runs as a CSV and a Markdown table.

One row per run: MCQ accuracy, open-QA main metrics and retrieval recall side by side; a model
evaluated with a LoRA adapter names its base in ``finetuned_from``. Training runs are left out."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from esgexp.config import CONF_DIR
from esgexp.outputs import write_atomic

# (column, where MLflow keeps it): the first source a run has fills the cell.
COLUMNS = [
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
    ("accuracy", ("metrics.accuracy",)),
    ("invalid_rate", ("metrics.invalid_rate",)),
    ("factoid_f1", ("metrics.factoid/f1",)),
    ("nonfactoid_rouge_l", ("metrics.non_factoid/rougeL",)),
    ("nonfactoid_bertscore", ("metrics.non_factoid/bertscore_f1",)),
    ("table_rouge_l", ("metrics.table/rougeL",)),
    ("esgbench_numeric_acc", ("metrics.esgbench/numeric_accuracy", "metrics.numeric_accuracy")),
    ("recall@10", ("metrics.recall_at_10",)),
    ("run_id", ("run_id",)),
]
# The columns that rank rows within a dataset, in order of precedence.
RANK_COLUMNS = ("accuracy", "factoid_f1", "nonfactoid_rouge_l", "table_rouge_l", "esgbench_numeric_acc", "recall@10")


def collect_rows(tracking_uri: str, latest_only: bool = True) -> list[dict]:
    """One row per finished run of every experiment, best accuracy first within each dataset.

    With ``latest_only`` a config run several times (same ``config_hash`` tag) shows its newest run only.
    """
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    runs = mlflow.search_runs(
        search_all_experiments=True,
        filter_string="attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        output_format="list",
    )
    seen: set[str] = set()
    rows = []
    for run in runs:
        if run.data.tags.get("task") == "finetune":  # training runs: curves, not scores
            continue
        config_hash = run.data.tags.get("config_hash")
        if latest_only and config_hash:
            if config_hash in seen:
                continue
            seen.add(config_hash)
        flat = {"run_id": run.info.run_id}
        flat.update({f"tags.{k}": v for k, v in run.data.tags.items()})
        # Jobs that run no model (retrieval with a fixed query, scoring a file) still carry the
        # default model's params; only a run tagged with a model shows them.
        uses_model = run.data.tags.get("model") not in (None, "external")
        flat.update({f"params.{k}": v for k, v in run.data.params.items() if uses_model or not k.startswith("model.")})
        flat.update({f"metrics.{k}": v for k, v in run.data.metrics.items()})
        rows.append({name: next((flat[s] for s in sources if s in flat), "") for name, sources in COLUMNS})
    rows.sort(key=lambda r: (r["dataset"], -rank_value(r), r["model"]))
    return rows


def rank_value(row: dict) -> float:
    return next((float(row[name]) for name in RANK_COLUMNS if row[name] != ""), 0.0)


RATE_COLUMNS = {"accuracy", "invalid_rate", *RANK_COLUMNS}


def format_value(name: str, value) -> str:
    """Rates with four decimals, counts as integers, the rest as MLflow stored them."""
    if isinstance(value, float):
        return f"{value:.4f}" if name in RATE_COLUMNS else str(int(value))
    return str(value)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _ in COLUMNS])
    writer.writerows([[format_value(name, row[name]) for name, _ in COLUMNS] for row in rows])
    return buffer.getvalue()


def to_markdown(rows: list[dict]) -> str:
    names = [name for name, _ in COLUMNS]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(format_value(name, row[name]) for name in names) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def export(tracking_uri: str, out_dir: Path, latest_only: bool = True) -> str:
    """Write leaderboard.csv and leaderboard.md into ``out_dir``; return the Markdown."""
    rows = collect_rows(tracking_uri, latest_only)
    markdown = to_markdown(rows)
    write_atomic(out_dir / "leaderboard.csv", to_csv(rows))
    write_atomic(out_dir / "leaderboard.md", markdown)
    return markdown


def main(overrides: list[str]) -> None:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("leaderboard", overrides=overrides)
    out_dir = Path(cfg.out_dir)
    print(export(cfg.tracking.uri, out_dir, cfg.latest_only), end="")
    print(f"written: {out_dir / 'leaderboard.csv'}, {out_dir / 'leaderboard.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
