"""Paired comparison of evaluation runs over their shared items (the command: ``esgexp-compare RUN [RUN ...]``).

A RUN is a run folder or an MLflow run id. Items are joined by id (only those both runs have; the
dropped ones are counted); the metric (default: the first run's headline) is compared per pair:

- a 0/1 outcome (MCQ accuracy, EM, page recall): the paired difference with a paired-bootstrap interval
  and McNemar's exact test (with clusters, whose items are not independent, the clustered paired
  bootstrap's p-value instead);
- a mean of per-item scores (F1, ROUGE-L, nDCG@K, MRR): a paired bootstrap of the mean difference;
- a pooled retrieval value (recall@K = hits / relevant over queries): a paired bootstrap over queries of
  the difference of the two ratios. Per-query resampling keeps what the metric pools and, unlike a
  Wilcoxon or sign-flip test on per-query values, tests the metric itself and resamples whole reports
  when the dataset declares them clusters.

More than two runs: every run against the first (``against=first``) or every pair (``against=all``),
p-values Holm-corrected. Writes compare.json and compare.md to ``out_dir``.

Items a run never answered (its retries ran out: ``failed`` records) are left out of its pairs and
counted (``n_unanswered_a``/``_b``); the table names such a run incomplete. With fewer than two items
(or clusters) shared there is no interval nor p-value: ``ci_note`` says why. Runs of one name (model /
strategy / scoring) are told apart by the settings in which they differ (``limit=3``).
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from esgexp.core.outputs import PredictionLog
from esgexp.errors import UserError
from esgexp.eval.stats import ItemScores, StatsSettings, holm, mcnemar_exact, paired_bootstrap
from esgexp.tasks.kinds import TaskKind, kind_of

RUN_ID = re.compile(r"[0-9a-f]{32}")
# Dataset settings that pick items of the same file (only the shared ones are compared) or do not change
# them; every other dataset key must agree.
SAMPLING_KEYS = ("limit", "seed", "qtypes", "core_only", "encoding", "cluster_key")


@dataclass
class RunData:
    """One run read back: its folder, MLflow id and tags (when tracked), resolved config, metrics and
    per-item records (predictions.jsonl, or rankings.jsonl for retrieval) by id."""

    ref: str
    run_dir: Path
    config: dict
    metrics: dict
    records: dict[str, dict]
    run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    variant: str = ""  # what tells it apart from compared runs of the same label (set by compare_runs)

    @property
    def task(self) -> str:
        return str(self.config.get("task"))

    @property
    def dataset(self) -> str:
        return str(self.config.get("dataset", {}).get("name"))

    @property
    def kind(self) -> TaskKind:
        return kind_of(self.task)

    @property
    def label(self) -> str:
        """What the run varied, as its run name says it: model/strategy/scoring, retriever/encoder/query, or
        the scored predictions file (esgexp/tasks/kinds.py)."""
        return self.kind.run_label(folder_tags(self.config))

    @property
    def name(self) -> str:
        """The label, with the variant (``(limit=3)``) when one is set."""
        return f"{self.label} ({self.variant})" if self.variant else self.label

    @property
    def n_unanswered(self) -> int:
        """Items this run never answered (retries ran out): left out of every comparison."""
        return sum(1 for r in self.records.values() if r.get("failed"))

    @property
    def headline(self) -> str:
        found = self.metrics.get("headline_metric") or self.tags.get("headline_metric")
        if not found:
            raise UserError(f"run {self.ref} names no headline metric (made before intervals existed): pass metric=KEY")
        return str(found)

    @property
    def higher_is_better(self) -> bool:
        value = self.metrics.get("higher_is_better", self.tags.get("higher_is_better", True))
        return value is True or str(value).lower() == "true"

    def scores(self, metric: str) -> ItemScores:
        """The per-item values behind ``metric`` (the task's own definition of them) of the answered items."""
        records = [r for r in self.records.values() if not r.get("failed")]
        if self.kind.scoring.item_scores is None:
            raise UserError(f"run {self.ref}: task={self.task} has no per-item scores to compare")
        found = self.kind.scoring.scores(records, metric, self.config)
        if found is None or not found.ids:
            raise UserError(f"run {self.ref} has no per-item values for metric {metric!r} (task={self.task})")
        if (
            self.kind.scoring.corpus_statistics
            and self.metrics.get(metric) is not None
            and len(found.ids) == len(records_of(self, metric))
        ):
            mean = sum(found.values) / len(found.values)
            if abs(mean - float(self.metrics[metric])) > 1e-9 * max(1.0, abs(mean)):
                raise UserError(
                    f"{metric} of run {self.ref} is a corpus statistic, not a mean of per-item values: "
                    "compare a per-item metric (e.g. rougeL, f1)"
                )
        return found


def records_of(run: RunData, metric: str) -> list[dict]:
    """The QA records of ``metric``'s question type."""
    qtype = metric.split("/")[0]
    return [r for r in run.records.values() if r.get("qtype") == qtype]


def load_run(ref: str | Path, tracking_uri: str | None = None) -> RunData:
    """The run at ``ref``: a run folder, or an MLflow run id (its ``run_dir`` tag, or else its logged
    artifacts downloaded) from ``tracking_uri`` (default: MLflow's current one)."""
    path = Path(ref)
    if path.is_dir():
        return read_run_folder(path, str(ref))
    if not RUN_ID.fullmatch(str(ref)):
        from esgexp.data.text_files import missing

        where = missing(path) if not path.exists() else "a file"
        raise UserError(f"{ref}: neither a run folder nor an MLflow run id (32 hex digits): {where}")
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(tracking_uri)
    try:
        run = client.get_run(str(ref))
    except MlflowException as error:
        raise UserError(
            f"MLflow run {ref} not found at {tracking_uri or mlflow.get_tracking_uri()}: {error.message}"
        ) from None
    if run.info.status != "FINISHED":
        raise UserError(
            f"run {ref} {unfinished(run.info.status)} (MLflow status {run.info.status}): compare finished runs"
        )
    tags = dict(run.data.tags)
    folder = Path(tags.get("run_dir", ""))
    if not tags.get("run_dir") or not folder.is_dir():
        folder = Path(
            mlflow.artifacts.download_artifacts(run_id=str(ref), tracking_uri=tracking_uri, dst_path=tempfile.mkdtemp())
        )
    data = read_run_folder(folder, str(ref))
    data.run_id, data.tags = str(ref), tags
    return data


def unfinished(status: str) -> str:
    """How a run in MLflow ``status`` (not FINISHED) stands, for a message."""
    return {"FAILED": "failed", "KILLED": "was stopped"}.get(status, "has not finished")


def read_run_folder(folder: Path, ref: str) -> RunData:
    """The run in ``folder``; one its ``FAILED`` file marks is refused with the reason it holds."""
    from omegaconf import OmegaConf

    from esgexp.core.sweep import FAILED_FILE

    if (folder / FAILED_FILE).is_file():
        reason = (folder / FAILED_FILE).read_text(encoding="utf-8", errors="replace").strip() or "no reason kept"
        raise UserError(f"run {ref} failed: {reason} ({folder / FAILED_FILE}); compare finished runs")
    for name in ("config.yaml", "metrics.json"):
        if not (folder / name).is_file():
            raise UserError(f"run {ref}: no {name} in {folder} (not a finished run folder)")
    config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    name = kind_of(config.get("task")).scoring.records
    if not name or not (folder / name).is_file():
        raise UserError(f"run {ref}: no {name} in {folder}: nothing per item to compare")
    records = {r["id"]: r for r in PredictionLog(folder / name).read()}
    return RunData(ref=ref, run_dir=folder, config=config, metrics=metrics, records=records)


def folder_tags(config: dict) -> dict:
    """The tags a run's label is made of, read from its folder's config.yaml (the values its MLflow tags hold)."""
    from omegaconf import OmegaConf

    from esgexp.tasks.retrieval import encoder_name

    tags = {group: (config.get(group) or {}).get("name") for group in ("model", "strategy", "scoring", "retriever")}
    tags["query"] = (config.get("query") or {}).get("name")
    tags["encoder"] = encoder_name(OmegaConf.create(config["retriever"])) if config.get("retriever") else None
    tags["predictions"] = config.get("predictions")
    return tags


def dotted(config: dict, key: str):
    value = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_comparable(a: RunData, b: RunData) -> None:
    """Refuse, naming the difference, runs of different tasks, datasets, item sets or scoring settings."""
    if a.task != b.task:
        raise UserError(f"runs {a.ref} and {b.ref} are of different tasks: task={a.task} vs task={b.task}")
    if a.dataset != b.dataset:
        raise UserError(
            f"runs {a.ref} and {b.ref} are on different datasets: dataset={a.dataset} vs dataset={b.dataset}"
        )
    dataset_a, dataset_b = a.config.get("dataset", {}), b.config.get("dataset", {})
    for key in sorted(set(dataset_a) | set(dataset_b)):
        if key not in SAMPLING_KEYS and dataset_a.get(key) != dataset_b.get(key):
            raise UserError(
                f"runs {a.ref} and {b.ref} hold different item sets: dataset.{key}={dataset_a.get(key)!r} "
                f"vs {dataset_b.get(key)!r}"
            )
    for key in a.kind.scoring.scoring_keys:
        if dotted(a.config, key) != dotted(b.config, key):
            raise UserError(
                f"runs {a.ref} and {b.ref} score items differently: {key} differs "
                f"({_short(dotted(a.config, key))} vs {_short(dotted(b.config, key))})"
            )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def gold_of(record: dict):
    """What an item is scored against, as its record keeps it (an item id must mean the same item in both runs)."""
    for key in ("gold", "references", "answer", "gold_pages"):
        if key in record:
            return record[key]
    return record.get("metrics", {}).get("n_relevant")


def compare_pair(a: RunData, b: RunData, metric: str | None = None, settings: StatsSettings | None = None) -> dict:
    """``b`` against ``a`` on ``metric`` (default: ``a``'s headline) over their shared items.

    Returns ``n_shared``, ``n_only_a``, ``n_only_b``, ``a_value``, ``b_value``, ``difference`` (b - a),
    ``ci_low``, ``ci_high``, ``p_value`` (two-sided), ``test``, the cluster key used and, for 0/1
    outcomes, the discordant counts ``only_a_right`` and ``only_b_right``."""
    settings = settings or StatsSettings()
    check_comparable(a, b)
    metric = metric or a.headline
    scores_a, scores_b = a.scores(metric), b.scores(metric)
    index_b = {item_id: i for i, item_id in enumerate(scores_b.ids)}
    pairs = [(i, index_b[item_id]) for i, item_id in enumerate(scores_a.ids) if item_id in index_b]
    if not pairs:
        raise UserError(f"runs {a.ref} and {b.ref} share no item with a value for {metric}")
    for i, _ in pairs:
        item_id = scores_a.ids[i]
        if gold_of(a.records[item_id]) != gold_of(b.records[item_id]):
            raise UserError(
                f"runs {a.ref} and {b.ref} hold different item sets: item {item_id!r} has gold "
                f"{_short(gold_of(a.records[item_id]))} vs {_short(gold_of(b.records[item_id]))}"
            )
    rows_a, rows_b = [i for i, _ in pairs], [j for _, j in pairs]
    va, vb = _pick(scores_a.values, rows_a), _pick(scores_b.values, rows_b)
    wa, wb = _pick(scores_a.weights, rows_a), _pick(scores_b.weights, rows_b)
    clusters = _pick(scores_a.clusters, rows_a) if scores_a.clusters and scores_b.clusters else None
    paired = paired_bootstrap(va, vb, clusters, settings, wa, wb)
    result = {
        "a": a.name,
        "b": b.name,
        "a_ref": a.ref,
        "b_ref": b.ref,
        "task": a.task,
        "dataset": a.dataset,
        "metric": metric,
        "kind": scores_a.kind,
        "higher_is_better": a.higher_is_better,
        "n_shared": len(pairs),
        "n_only_a": len(scores_a.ids) - len(pairs),
        "n_only_b": len(scores_b.ids) - len(pairs),
        "n_unanswered_a": a.n_unanswered,
        "n_unanswered_b": b.n_unanswered,
        "a_value": sum(va) / (sum(wa) if wa else len(va)),
        "b_value": sum(vb) / (sum(wb) if wb else len(vb)),
        "difference": paired.difference,
        "ci_low": paired.low,
        "ci_high": paired.high,
        "confidence": settings.confidence,
        "p_value": paired.p_value,
        "test": paired.method,
        "ci_note": paired.note,
        "cluster_key": a.metrics.get("stats/cluster_key") if clusters else None,
        "n_clusters": len(set(clusters)) if clusters else len(pairs),
    }
    if scores_a.kind == "proportion":
        only_a = sum(1 for x, y in zip(va, vb) if x and not y)
        only_b = sum(1 for x, y in zip(va, vb) if y and not x)
        result.update(only_a_right=only_a, only_b_right=only_b)
        if clusters is None and not paired.note:
            result.update(p_value=mcnemar_exact(only_a, only_b), test="mcnemar_exact")
    return result


def _pick(values: list | None, rows: list[int]) -> list | None:
    return None if values is None else [values[k] for k in rows]


def compare_runs(
    runs: list[RunData], against: str = "first", metric: str | None = None, settings: StatsSettings | None = None
) -> dict:
    """Every run against the first (``first``) or every pair (``all``); ``p_holm`` Holm-corrects the pairs' p-values."""
    if len(runs) < 2:
        raise UserError(f"compare needs at least two runs, got {len(runs)}")
    if against not in ("first", "all"):
        raise UserError(f"against must be first or all, got {against!r}")
    set_variants(runs)
    pairs = [(runs[0], run) for run in runs[1:]] if against == "first" else list(itertools.combinations(runs, 2))
    metric = metric or runs[0].headline
    comparisons = [compare_pair(a, b, metric, settings) for a, b in pairs]
    for comparison, adjusted in zip(comparisons, holm([c["p_value"] for c in comparisons])):
        comparison["p_holm"] = adjusted
    return {"metric": metric, "against": against, "runs": [r.ref for r in runs], "comparisons": comparisons}


def set_variants(runs: list[RunData]) -> None:
    """``run.variant`` for runs that share a label: the settings in which their configs differ."""
    from esgexp.analysis.variants import variant_labels
    from esgexp.core.config import flatten

    same: dict[str, list[RunData]] = {}
    for run in runs:
        same.setdefault(run.label, []).append(run)
    for group in same.values():
        labels = variant_labels({run.ref: flatten(run.config) for run in group})
        for run in group:
            run.variant = labels[run.ref]


def fmt(value, digits: int = 4) -> str:
    return "n/a" if value is None or value != value else f"{value:.{digits}f}"


def interval_text(c: dict) -> str:
    """``[low, high]``, or why there is none (``interval n/a: one cluster``)."""
    from esgexp.eval.stats import interval_na

    return interval_na(c["ci_note"]) if c.get("ci_note") else f"[{fmt(c['ci_low'])}, {fmt(c['ci_high'])}]"


def to_markdown(report: dict) -> str:
    """The comparison table (and who holds which items) as Markdown."""
    first = report["comparisons"][0]
    lines = [
        f"# {first['dataset']} | {first['task']} | {report['metric']} "
        f"({'higher' if first['higher_is_better'] else 'lower'} is better)",
        "",
        f"| A | B | n shared | dropped A/B | A | B | B - A | {first['confidence']:.0%} CI | test | p | p (Holm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report["comparisons"]:
        lines.append(
            f"| {c['a']} | {c['b']} | {c['n_shared']} | {c['n_only_a']}/{c['n_only_b']} | {fmt(c['a_value'])} | "
            f"{fmt(c['b_value'])} | {fmt(c['difference'])} | {interval_text(c)} | {c['test']} | "
            f"{fmt(c['p_value'])} | {fmt(c['p_holm'])} |"
        )
    lines += ["", "Runs: " + ", ".join(f"`{ref}`" for ref in report["runs"])]
    incomplete = {}
    for c in report["comparisons"]:
        for side in ("a", "b"):
            if c[f"n_unanswered_{side}"]:
                incomplete[c[f"{side}_ref"]] = (c[side], c[f"n_unanswered_{side}"])
    for ref, (name, n) in incomplete.items():
        lines.append(
            f"Incomplete: {name} (`{ref}`) never answered {n} items; they are left out of its comparisons "
            "(rerun it with resume=true to finish them)."
        )
    if first["cluster_key"]:
        lines.append(f"Clustered on `{first['cluster_key']}` ({first['n_clusters']} clusters).")
    return "\n".join(lines) + "\n"
