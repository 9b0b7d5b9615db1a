"""Score an external ESGBench predictions file against the gold set, without a model."""

from __future__ import annotations

import re
from pathlib import Path

from hydra.utils import instantiate

from esgexp.core.outputs import PredictionLog
from esgexp.core.records import QAItem
from esgexp.data.esgbench import join, load_predictions
from esgexp.data.registry import published_as
from esgexp.errors import UserError
from esgexp.eval.esgbench_metrics import other_rules, score_esgbench
from esgexp.eval.stats import (
    ItemScores,
    StatsSettings,
    cluster_records,
    interval_metrics,
    record_clusters,
    scored,
    with_interval,
)
from esgexp.jobs.lifecycle import Job, data_sha256

# The headline metric (higher is better): numeric accuracy over all items, as the ESGBench paper reports it.
HEADLINE = "numeric_accuracy"
# The prefix of another numeric rule's values (``alt/esgbench/numeric_accuracy``).
ALT_RULE = re.compile(r"alt/[a-z_]+/")
CATEGORY_ACCURACY = re.compile(r"category/(.+)/accuracy")


class ScoringJob(Job):
    """Join predictions to gold on (doc_name, question); EM, F1, numeric accuracy, page recall, per category."""

    files = ("predictions.jsonl", "skipped_rows.txt")

    def load(self) -> list[str]:
        cfg = self.cfg
        if not Path(cfg.predictions).exists():
            raise UserError(
                f"predictions={cfg.predictions}: file not found (the predictions JSONL to score, one "
                "{doc_name, question, pred} object per line)"
            )
        refuse_gold_as_predictions(Path(cfg.predictions), Path(cfg.dataset.path))
        self.stats = StatsSettings.from_node(cfg.stats)
        full = instantiate(cfg.dataset, limit=None).load()
        self.loaded = full.sample(cfg.dataset.limit, cfg.dataset.seed)
        self.predictions = load_predictions(cfg.predictions)
        # With dataset.limit, rows for the gold questions left out are set aside, not reported as unjoined.
        left_out = {gold_key(item) for item in full.items} - {gold_key(item) for item in self.loaded.items}
        self.predictions.by_key = {key: row for key, row in self.predictions.by_key.items() if key not in left_out}
        self.joined = join(self.loaded.items, self.predictions, gold_source=str(cfg.dataset.path))
        self.judge = None
        if cfg.get("judge"):  # the judge's model config and packages, checked before any scoring
            from esgexp.eval.judge import check_judge

            self.judge = check_judge(cfg)
        return self.loaded.skipped + self.predictions.skipped + self.joined.unjoined + self.joined.missing

    def tags(self) -> dict:
        return {
            "model": "external",
            "strategy": "external",
            "predictions": str(self.cfg.predictions),
            "predictions_sha256": data_sha256(self.cfg.predictions),
            "predictions_registry": published_as(self.cfg.predictions),
        }

    def work(self, run) -> tuple[dict, dict]:
        items = self.loaded.items
        records, metrics = score_esgbench(items, self.joined, k=self.cfg.recall_k, numeric=self.cfg.metrics.numeric)
        metrics["n_skipped_rows"] = len(self.loaded.skipped) + len(self.predictions.skipped)
        cluster_key = self.cfg.dataset.get("cluster_key")
        by_id = {item.id: item for item in items}
        records = cluster_records(records, [by_id[r["id"]] for r in records], cluster_key)
        if self.cfg.get("judge"):
            metrics.update(self.judged(records))
        intervals = interval_metrics({key: item_scores(records, key) for key in list(metrics)}, self.stats)
        tags = scored(metrics, intervals, records, cluster_key, HEADLINE)
        PredictionLog(self.output_dir / "predictions.jsonl").rewrite(records)
        return metrics, tags

    def judged(self, records: list[dict]) -> dict:
        """The judge's verdicts on the predictions (``judge=...``), written into ``records`` (``judge``,
        ``judge_accuracy``, ``judge_credit``); its metrics, agreement with EM and F1 included."""
        from esgexp.eval.judge import run_judge

        views = [
            {**{k: r[k] for k in ("id", "cluster") if k in r}, "qtype": "esgbench", "answer": r["prediction"] or ""}
            | {"metrics": {"em": r["em"], "f1": r["f1"]}}
            for r in records
        ]
        metrics = run_judge(self.cfg, self.loaded.items, views, config=self.judge, probe=True)
        for record, view in zip(records, views):
            record["judge"] = view["judge"]
            record.update({key: view["metrics"][key] for key in ("judge_accuracy", "judge_credit")})
        return metrics

    def summary(self, metrics: dict) -> tuple[str, list[tuple[str, str]]]:
        rows = [("items", str(metrics["n_items"]))]
        numeric = ("numeric_accuracy", "numeric_accuracy/numeric_items")
        alt = [f"alt/{rule}/{key}" for rule in other_rules(self.cfg.metrics.numeric) for key in numeric]
        rows += [
            (key, with_interval(metrics, key))
            for key in ("em", "f1", *numeric, *alt, f"recall@{self.cfg.recall_k}", "judge/accuracy", "judge/credit")
            if key in metrics
        ]
        rows += [
            (key.replace("_", " "), str(metrics[key]))
            for key in ("n_unjoined_predictions", "n_missing_predictions", "n_skipped_rows")
            if metrics.get(key)
        ]
        return f"{self.cfg.dataset.name} | {Path(self.cfg.predictions).name}", rows


def gold_key(item: QAItem) -> tuple[str, str]:
    """The (doc_name, question) pair predictions join on."""
    return item.meta["doc_name"], item.question


def item_scores(records: list[dict], key: str, config=None) -> ItemScores | None:
    """The per-item values behind ``em``, ``f1`` (a mean), ``numeric_accuracy`` (over all items),
    ``numeric_accuracy/numeric_items`` (over items whose gold has a number), ``category/<name>/accuracy``
    (the category's items), those of another numeric rule (``alt/<rule>/numeric_accuracy``...) and
    ``recall@K`` (items with retrieved pages), ``judge/accuracy`` and ``judge/credit`` (judge=...); None for any
    other key."""
    if key in ("judge/accuracy", "judge/credit"):  # judge=...: the per-item verdicts
        name = key.replace("/", "_")
        chosen = [r for r in records if isinstance(r.get(name), (int, float))]
        kind = "proportion" if name == "judge_accuracy" else "mean"
        values = [float(r[name]) for r in chosen]
        return ItemScores([r["id"] for r in chosen], values, kind, clusters=record_clusters(chosen)) if chosen else None
    rule = ALT_RULE.match(key)
    prefix = rule.group() if rule else ""
    rest = key[len(prefix) :]
    category = CATEGORY_ACCURACY.fullmatch(rest)
    if category:
        return category_scores(records, category.group(1), prefix)
    name = "numeric" if rest in ("numeric_accuracy", "numeric_accuracy/numeric_items") else rest
    if name != "numeric" and (prefix or (name not in ("em", "f1") and not name.startswith("recall@"))):
        return None
    name = prefix + name
    chosen = [r for r in records if isinstance(r.get(name), (int, float))]
    if rest == "numeric_accuracy/numeric_items":
        chosen = [r for r in chosen if r[f"{prefix}numeric_item"]]
    if not chosen:
        return None
    kind = "mean" if name == "f1" else "proportion"
    return ItemScores(
        [r["id"] for r in chosen], [float(r[name]) for r in chosen], kind, clusters=record_clusters(chosen)
    )


def category_scores(records: list[dict], category: str, prefix: str) -> ItemScores | None:
    """Right (EM or the numeric rule of ``prefix``) or not, for each item of ``category``."""
    chosen = [r for r in records if r.get("category") == category]
    if not chosen:
        return None
    right = [float(r["em"] == 1.0 or r[f"{prefix}numeric"] == 1.0) for r in chosen]
    return ItemScores([r["id"] for r in chosen], right, "proportion", clusters=record_clusters(chosen))


def refuse_gold_as_predictions(predictions: Path, gold: Path) -> None:
    """Raise UserError when ``predictions`` is the gold file itself or a copy of it: its answers would be
    scored against themselves (every item right)."""
    if not gold.is_file():
        return  # the loader names a missing gold file
    if predictions.resolve() == gold.resolve():
        same = "is"
    elif predictions.stat().st_size == gold.stat().st_size and predictions.read_bytes() == gold.read_bytes():
        same = "holds the same bytes as"
    else:
        return
    raise UserError(
        f"predictions={predictions} {same} the gold file dataset.path={gold}: its answers would be scored "
        "against themselves; give the file of the system's answers ({doc_name, question, pred} per line)"
    )
