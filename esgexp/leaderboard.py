"""``python -m esgexp.leaderboard``: all finished MLflow runs as a CSV and a Markdown table."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from esgexp.config import CONF_DIR
from esgexp.outputs import write_atomic

COLUMNS = [
    ("dataset", "tags.dataset"),
    ("model", "tags.model"),
    ("family", "params.model.family"),
    ("size_b", "params.model.size_b"),
    ("instruct", "params.model.instruct"),
    ("strategy", "tags.strategy"),
    ("scoring", "tags.scoring"),
    ("n", "metrics.n_items"),
    ("accuracy", "metrics.accuracy"),
    ("invalid_rate", "metrics.invalid_rate"),
    ("run_id", "run_id"),
]


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
        config_hash = run.data.tags.get("config_hash")
        if latest_only and config_hash:
            if config_hash in seen:
                continue
            seen.add(config_hash)
        flat = {"run_id": run.info.run_id}
        flat.update({f"tags.{k}": v for k, v in run.data.tags.items()})
        flat.update({f"params.{k}": v for k, v in run.data.params.items()})
        flat.update({f"metrics.{k}": v for k, v in run.data.metrics.items()})
        rows.append({name: flat.get(source, "") for name, source in COLUMNS})
    rows.sort(key=lambda r: (r["dataset"], -float(r["accuracy"] or 0), r["model"]))
    return rows


RATE_COLUMNS = {"accuracy", "invalid_rate"}


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
