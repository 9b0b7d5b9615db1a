"""Multiple-choice questions (ESGenius): letters parsed strictly, accuracy and baselines."""

from __future__ import annotations

from omegaconf import DictConfig

from esgexp.core.records import MCQItem
from esgexp.errors import UserError
from esgexp.eval.calibration import calibration_report
from esgexp.eval.circular import circular_metrics, position_bias, rotated_items
from esgexp.eval.mcq import ABSTAIN, INVALID, UNFINISHED, UNFINISHED_RATE, mcq_metrics, parse_answer, reply_answer
from esgexp.eval.stats import (
    ItemScores,
    StatsSettings,
    cluster_records,
    interval_metrics,
    record_clusters,
    scored,
    with_interval,
)
from esgexp.jobs.lifecycle import rate
from esgexp.strategies.mcq import MCQPrompter

CALIBRATION_FILE = "calibration.json"
OPTIONAL_ROWS = (
    ("circular accuracy", "circular/accuracy"),
    ("position bias: RStd", "position_bias/rstd"),
    ("calibration: ECE", "calibration/ece"),
    ("calibration: Brier", "calibration/brier"),
)


class MCQTask:
    """Builds MCQ prompts from the strategy and template, parses letters, scores accuracy, position bias
    and (scoring.circular) every cyclic option order, (scoring=logprob) calibration."""

    name = "mcq"
    headline_metric = "accuracy"
    higher_is_better = True

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.prompter = MCQPrompter(template=cfg.template.text, name=cfg.strategy.name, context=cfg.strategy.context)
        self.circular = bool(cfg.scoring.get("circular", False))
        self.stats = StatsSettings.from_node(cfg.stats)
        self.reports: dict[str, dict] = {}  # run-folder file name -> what ``score`` found for it

    def prepare(self, items: list) -> list:
        """Check the dataset suits the strategy; return the items to ask: with scoring.circular=true
        each question in its four option rotations (esgexp/eval/circular.py), else the items as they are."""
        if items and not isinstance(items[0], MCQItem):
            raise UserError(f"task=mcq needs a multiple-choice dataset; {self.cfg.dataset.name!r} holds open questions")
        if self.prompter.context and not any(item.context for item in items):
            raise UserError(
                f"strategy={self.prompter.name} needs each question's source passage (column source_text), "
                f"and dataset {self.cfg.dataset.name!r} has none: use the _w_ref file or strategy=zero_shot"
            )
        return rotated_items(items) if self.circular else items

    def prompt(self, item: MCQItem, passages: list[str] | None) -> str:
        return self.prompter.build(item, passages)

    def to_record(self, result: dict, item: MCQItem) -> dict:
        record = {"gold": item.answer}
        if "rotation" in item.meta:
            record.update(item_id=item.meta["item_id"], rotation=item.meta["rotation"])
        if result.get("failed"):
            return {**record, "output": None, "parsed": INVALID, "correct": False}
        output = result["output"]
        answer = reply_answer(output, self.cfg.model, self.cfg.scoring)
        parsed = parse_answer(answer)  # an unfinished reasoning (None) is INVALID, whatever the model config says
        record.update(output=output, parsed=parsed, correct=parsed == item.answer)
        if answer is None:
            record[UNFINISHED] = True
        if "scores" in result:
            record["scores"] = result["scores"]
        return record

    def score(self, items: list[MCQItem], records: list[dict]) -> tuple[list[dict], dict, dict]:
        """Accuracy and baselines over every asked item (all rotations), position bias, circular metrics
        and, for letter scores, calibration (calibration.json goes into the run folder)."""
        unfinished = [bool(r.get(UNFINISHED)) for r in records]
        counted = self.cfg.model.reasoning or any(unfinished)
        metrics = mcq_metrics(items, [r["parsed"] for r in records], unfinished if counted else None)
        # The rotations of one question are one cluster unless the dataset declares its own key.
        cluster_key = self.cfg.dataset.get("cluster_key") or ("item_id" if self.circular else None)
        records = cluster_records(records, items, cluster_key)
        # An item never answered (its retries ran out) counts as wrong in ``accuracy``, is no invalid answer,
        # and is left out of ``accuracy/answered``.
        metrics["invalid_rate"] = sum(OUTCOMES["invalid_rate"](r) for r in records) / len(records)
        keys = [key for key in OUTCOMES if key in metrics]
        if any(r.get("failed") for r in records):
            found = item_scores(records, ANSWERED)
            metrics[ANSWERED] = sum(found.values) / len(found.values) if found else float("nan")
            keys.append(ANSWERED)
        intervals = interval_metrics({key: item_scores(records, key) for key in keys}, self.stats)
        tags = scored(metrics, intervals, records, cluster_key, self.headline_metric, self.higher_is_better)
        metrics.update(position_bias(records))
        if self.circular:
            metrics.update(circular_metrics(records))
        if self.cfg.scoring.name == "logprob":
            metrics.update(self.calibration(records))
        return records, metrics, tags

    def calibration(self, records: list[dict]) -> dict:
        """``calibration/*`` metrics; the bins and the coverage curve kept in ``reports`` for calibration.json."""
        metrics, report = calibration_report(records, list(self.cfg.scoring.letters))
        if report is not None:
            self.reports[CALIBRATION_FILE] = report
        return metrics

    def summary_rows(self, metrics: dict) -> list[tuple[str, str]]:
        answered = [("accuracy over answered items", with_interval(metrics, ANSWERED))] if ANSWERED in metrics else []
        unfinished = (
            [("invalid: unfinished reasoning", with_interval(metrics, UNFINISHED_RATE))]
            if UNFINISHED_RATE in metrics
            else []
        )
        return [
            ("accuracy" + (" (unanswered = wrong)" if answered else ""), with_interval(metrics, "accuracy")),
            *answered,
            ("invalid rate", with_interval(metrics, "invalid_rate")),
            *unfinished,
            ("abstention rate", with_interval(metrics, "abstention_rate")),
            ("baseline: random", rate(metrics["baseline/random"])),
            ("baseline: longest option", rate(metrics["baseline/longest_option"])),
        ] + [(name, rate(metrics[key])) for name, key in OPTIONAL_ROWS if metrics.get(key) is not None]


# The 0/1 outcome per record behind each rate (as mcq_metrics counts it: Z and INVALID are never correct;
# an item never answered, ``failed``, is wrong and not an invalid answer; a reasoning model's answer that never
# left its reasoning is invalid, and counted apart too).
OUTCOMES = {
    "accuracy": lambda r: bool(r.get("correct")) and r["parsed"] not in (ABSTAIN, INVALID),
    "invalid_rate": lambda r: r["parsed"] == INVALID and not r.get("failed"),
    UNFINISHED_RATE: lambda r: bool(r.get(UNFINISHED)),
    "abstention_rate": lambda r: r["parsed"] == ABSTAIN,
}
# Accuracy over the answered items only (written when some item was never answered).
ANSWERED = "accuracy/answered"


def item_scores(records: list[dict], key: str, config=None) -> ItemScores | None:
    """The 0/1 outcomes behind ``accuracy``, ``accuracy/answered`` (items not ``failed``), ``invalid_rate``,
    ``invalid/unfinished_reasoning`` or ``abstention_rate``; None for another key or no answered item."""
    if key == ANSWERED:
        records, key = [r for r in records if not r.get("failed")], "accuracy"
    if key not in OUTCOMES or not records:
        return None
    hits = [float(OUTCOMES[key](r)) for r in records]
    return ItemScores([r["id"] for r in records], hits, "proportion", clusters=record_clusters(records))
