"""Open questions (SustainableQA, ESGBench): generated answers scored by the metrics of each question type."""

from __future__ import annotations

import logging
import re
from collections import defaultdict

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.eval.mcq import UNFINISHED, UNFINISHED_RATE, reply_answer
from esgexp.eval.stats import (
    ItemScores,
    StatsSettings,
    cluster_records,
    record_clusters,
    scored,
    statistic_interval,
    with_interval,
)
from esgexp.models.scoring import cut_after_text
from esgexp.strategies.qa import QAPrompter, draw_examples

log = logging.getLogger(__name__)

ANSWER_LABEL = re.compile(r"^\s*answer\s*:\s*", flags=re.IGNORECASE)


def clean_answer(output: str, model, scoring) -> str | None:
    """The answer text: the reasoning block dropped first (``reply_answer``: from the reply itself, whatever the
    ``model`` config says), then cut at the first of ``scoring.stop``, a leading ``Answer:`` label and outer blanks
    removed; None when the reasoning never closed."""
    text = reply_answer(output, model, scoring)
    if text is None:
        return None
    return ANSWER_LABEL.sub("", cut_after_text(text, list(scoring.get("stop") or ())).lstrip()).strip()


class QATask:
    """Prompts per strategy and template, cleans answers, scores them per question type (``metrics`` config)."""

    name = "qa"

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.prompter = QAPrompter(template=OmegaConf.to_container(cfg.template), context=cfg.strategy.context)
        self.stats = StatsSettings.from_node(cfg.stats)
        self.reports: dict[str, dict] = {}  # run-folder file name -> what ``score`` found for it (none here)

    def prepare(self, items: list) -> list:
        """Check the dataset suits the strategy; draw the few-shot examples; return the items to ask."""
        if self.cfg.scoring.name != "generate":
            raise UserError(
                f"open questions are answered by generation: scoring={self.cfg.scoring.name} is for multiple choice"
            )
        if not isinstance(items[0], QAItem):
            raise UserError(
                f"task=qa needs open questions; dataset {self.cfg.dataset.name!r} is multiple-choice (task=mcq)"
            )
        if self.prompter.context and not any(item.context for item in items):
            raise UserError(
                f"strategy={self.cfg.strategy.name} needs each item's passage and dataset {self.cfg.dataset.name!r} has none"
            )
        missing = sorted({item.qtype for item in items} - set(self.cfg.metrics.by_qtype))
        if missing:
            raise UserError(f"metrics={self.cfg.metrics.name} has no metrics for question type(s) {', '.join(missing)}")
        if self.cfg.strategy.shots:
            self.prompter.examples = self._examples(items)
        return items

    def _examples(self, items: list[QAItem]) -> dict[str, list[QAItem]]:
        split = self.cfg.strategy.get("split", "train")
        if split == "test":
            raise UserError(
                "few-shot examples never come from the test split: set strategy.split=train (or validation)"
            )
        loader = instantiate(self.cfg.dataset)
        if not hasattr(loader, "load_split"):
            raise UserError(f"dataset {self.cfg.dataset.name!r} has no train split to draw few-shot examples from")
        pool = loader.load_split(split).items
        exclude = {item.id for item in items} | {item.question for item in items}
        examples = draw_examples(pool, self.cfg.strategy.shots, self.cfg.seed, exclude)
        short = sorted({item.qtype for item in items} - {t for t, found in examples.items() if found})
        if short:
            raise UserError(
                f"the {split} split has no example of question type(s) {', '.join(short)} for few-shot prompts"
            )
        return examples

    def prompt(self, item: QAItem, passages: list[str] | None) -> str:
        return self.prompter.build(item, passages)

    def to_record(self, result: dict, item: QAItem) -> dict:
        record = {"qtype": item.qtype, "category": item.meta.get("category"), "references": list(item.answers)}
        if result.get("failed"):
            return {**record, "output": None, "answer": ""}
        answer = clean_answer(result["output"], self.cfg.model, self.cfg.scoring)
        record.update(output=result["output"], answer=answer or "")
        if answer is None:  # scored as an empty answer, and counted
            record[UNFINISHED] = True
        return record

    def score(self, items: list[QAItem], records: list[dict]) -> tuple[list[dict], dict, dict]:
        """Each question type scored by its metrics; per-item values go into the records."""
        scorers = {name: instantiate(spec) for name, spec in self.cfg.metrics.scorers.items()}
        positions: dict[str, list[int]] = defaultdict(list)
        for index, item in enumerate(items):
            positions[item.qtype].append(index)
        metrics: dict = {"n_items": len(items)}
        info: dict[str, str] = {}
        corpus = {}
        records = cluster_records([{**r, "metrics": {}} for r in records], items, self.cfg.dataset.get("cluster_key"))
        for qtype, where in sorted(positions.items()):
            metrics[f"{qtype}/n"] = len(where)
            for name in self.cfg.metrics.by_qtype[qtype]:
                if name not in scorers:
                    raise UserError(f"metrics.by_qtype.{qtype} names {name!r}, which is not in metrics.scorers")
                result = scorers[name].score([records[i]["answer"] for i in where], [items[i].answers for i in where])
                for i, values in zip(where, result.per_item):
                    records[i]["metrics"].update(values)
                metrics.update({f"{qtype}/{key}": value for key, value in result.summary.items()})
                corpus.update({f"{qtype}/{key}": (where, statistic) for key, statistic in result.corpus.items()})
                info.update(result.info)
            verdict_keys = self.cfg.metrics.get("correct_when", {}).get(qtype)
            if verdict_keys:
                for i in where:
                    records[i]["correct"] = any(records[i]["metrics"].get(key) for key in verdict_keys)
                    records[i]["metrics"]["accuracy"] = float(records[i]["correct"])
                metrics[f"{qtype}/accuracy"] = sum(records[i]["correct"] for i in where) / len(where)
            metrics.update(category_breakdown(qtype, [items[i] for i in where], [records[i]["metrics"] for i in where]))
        if self.cfg.model.reasoning or any(r.get(UNFINISHED) for r in records):
            metrics.update(self.unfinished(records))
        metrics.update(self.intervals(metrics, records, corpus))
        metrics.update(self.over_answered(metrics, records, corpus))
        tags = scored(metrics, {}, records, self.cfg.dataset.get("cluster_key"), self.headline_metric(metrics))
        return records, metrics, {**info, **tags}

    def unfinished(self, records: list[dict]) -> dict:
        """``invalid/unfinished_reasoning``: the share of items whose reasoning never closed (scored as empty
        answers), with its interval."""
        hits = [float(bool(r.get(UNFINISHED))) for r in records]
        scores = ItemScores([r["id"] for r in records], hits, "proportion", clusters=record_clusters(records))
        return {UNFINISHED_RATE: sum(hits) / len(hits), **scores.interval(self.stats).as_metrics(UNFINISHED_RATE)}

    def intervals(self, metrics: dict, records: list[dict], corpus: dict) -> dict:
        """The interval of every ``<qtype>/<value>`` metric: from its per-item values when it is their mean,
        by resampling the per-item counts of a corpus statistic (BLEU)."""
        out: dict = {}
        for key in [k for k in metrics if is_run_value(k)]:
            if key in corpus:
                where, statistic = corpus[key]
                clusters = record_clusters([records[i] for i in where])
                out.update(statistic_interval(statistic.rows, statistic.compute, clusters, self.stats).as_metrics(key))
                continue
            scores = item_scores(records, key, self.cfg)
            if scores is None:
                continue
            if abs(sum(scores.values) / len(scores.values) - metrics[key]) > 1e-9 * max(1.0, abs(metrics[key])):
                log.warning("no interval for %s: it is not the mean of the per-item values %r", key, key.split("/")[1])
                continue
            out.update(scores.interval(self.stats).as_metrics(key))
        return out

    def over_answered(self, metrics: dict, records: list[dict], corpus: dict) -> dict:
        """When some item was never answered (it counts as an empty answer in ``<qtype>/<value>``):
        ``<qtype>/<value>/answered``, the mean over the answered items, with its interval, for every value
        that is a mean of per-item values; nothing when every item was answered."""
        answered = [r for r in records if not r.get("failed")]
        if len(answered) == len(records):
            return {}
        out: dict = {}
        for key in [k for k in metrics if is_run_value(k) and k not in corpus and f"{k}/ci_low" in metrics]:
            scores = item_scores(answered, key, self.cfg)
            if scores is not None:
                out[f"{key}/answered"] = sum(scores.values) / len(scores.values)
                out.update(scores.interval(self.stats).as_metrics(f"{key}/answered"))
        return out

    def headline_metric(self, metrics: dict) -> str:
        """The first of ``metrics.headline`` this run has (higher is better), else its first run value."""
        declared = [key for key in self.cfg.metrics.get("headline") or () if key in metrics]
        return declared[0] if declared else next(k for k in metrics if is_run_value(k))

    def summary_rows(self, metrics: dict) -> list[tuple[str, str]]:
        """Every run-level value that is not a breakdown."""
        rows = []
        for key, value in metrics.items():
            if (
                "/category/" in key
                or "/by_spans/" in key
                or key.startswith(("n_", "stats/"))
                or key.endswith(INTERVAL_SUFFIXES)
            ):
                continue
            if key in ("headline_metric", "higher_is_better"):
                continue
            if key.startswith("judge/") and key.rsplit("/", 1)[-1].startswith("n_") and key not in JUDGE_PROBLEMS:
                continue
            rows.append((key, with_interval(metrics, key) if isinstance(value, float) else str(value)))
        return rows


INTERVAL_SUFFIXES = ("/ci_low", "/ci_high", "/stderr", "/ci_method", "/ci_note")
# The judge's counts worth a summary row (the others are in metrics.json).
JUDGE_PROBLEMS = ("judge/n_invalid", "judge/n_failed")
# judge=...: ``judge/<value>`` is over every item, from the per-item ``judge_<value>`` (esgexp/eval/judge.py);
# ``judge_accuracy`` is a 0/1 outcome.
JUDGE = "judge"
JUDGE_PROPORTIONS = ("judge_accuracy",)


def is_run_value(key: str) -> bool:
    """``<qtype>/<value>`` without a breakdown or a count (``factoid/f1``, not ``factoid/n``, nor
    ``invalid/unfinished_reasoning``)."""
    parts = key.split("/")
    return (
        len(parts) == 2 and parts[0] not in ("stats", "invalid") and parts[1] != "n" and not parts[1].startswith("n_")
    )


def item_scores(records: list[dict], key: str, config) -> ItemScores | None:
    """The per-item values behind ``<qtype>/<value>`` (the ``item_values`` alias when the per-item name
    differs), 0/1 outcomes when the value is among ``proportions`` of the run's ``metrics`` config; None if absent."""
    metrics_cfg = config.get("metrics") or {}
    qtype, _, name = key.partition("/")
    if qtype == JUDGE:
        name = f"judge_{name}"
    name = (metrics_cfg.get("item_values") or {}).get(name, name)
    chosen = [
        r
        for r in records
        if (qtype == JUDGE or r.get("qtype") == qtype) and isinstance(r.get("metrics", {}).get(name), (int, float))
    ]
    if not chosen:
        return None
    kind = "proportion" if name in (*(metrics_cfg.get("proportions") or ()), *JUDGE_PROPORTIONS) else "mean"
    values = [float(r["metrics"][name]) for r in chosen]
    return ItemScores([r["id"] for r in chosen], values, kind, clusters=record_clusters(chosen))


def category_breakdown(qtype: str, items: list[QAItem], per_item: list[dict]) -> dict[str, float]:
    """Mean of each per-item value and the count, per category (``<qtype>/category/<name>/<key>``)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for item, values in zip(items, per_item):
        groups[str(item.meta.get("category") or "unknown")].append(values)
    out: dict[str, float] = {}
    for category, rows in sorted(groups.items()):
        prefix = f"{qtype}/category/{category}"
        out[f"{prefix}/n"] = len(rows)
        for key in sorted({k for row in rows for k, v in row.items() if isinstance(v, (int, float))}):
            values = [row[key] for row in rows if isinstance(row.get(key), (int, float))]
            out[f"{prefix}/{key}"] = sum(values) / len(values)
    return out
