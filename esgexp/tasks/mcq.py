"""Multiple-choice questions (ESGenius): letters parsed strictly, accuracy and baselines."""

from __future__ import annotations

from omegaconf import DictConfig

from esgexp.errors import UserError
from esgexp.eval.mcq import INVALID, mcq_metrics, parse_answer, strip_reasoning
from esgexp.jobs import rate
from esgexp.records import MCQItem
from esgexp.strategies.mcq import MCQPrompter


class MCQTask:
    """Builds MCQ prompts from the strategy and template, parses letters, scores accuracy."""

    name = "mcq"
    main_metric = "accuracy"

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.prompter = MCQPrompter(template=cfg.template.text, name=cfg.strategy.name, context=cfg.strategy.context)

    def prepare(self, items: list) -> None:
        if items and not isinstance(items[0], MCQItem):
            raise UserError(f"task=mcq needs a multiple-choice dataset; {self.cfg.dataset.name!r} holds open questions")
        if self.prompter.context and not any(item.context for item in items):
            raise UserError(
                f"strategy={self.prompter.name} needs each question's source passage (column source_text), "
                f"and dataset {self.cfg.dataset.name!r} has none: use the _w_ref file or strategy=zero_shot"
            )

    def prompt(self, item: MCQItem, passages: list[str] | None) -> str:
        return self.prompter.build(item, passages)

    def to_record(self, result: dict, item: MCQItem) -> dict:
        record = {"gold": item.answer}
        if result.get("failed"):
            return {**record, "output": None, "parsed": INVALID, "correct": False}
        output = result["output"]
        parsed = parse_answer(strip_reasoning(output) if self.cfg.model.reasoning else output)
        record.update(output=output, parsed=parsed, correct=parsed == item.answer)
        if "scores" in result:
            record["scores"] = result["scores"]
        return record

    def score(self, items: list[MCQItem], records: list[dict]) -> tuple[list[dict], dict, dict]:
        return records, mcq_metrics(items, [r["parsed"] for r in records]), {}

    def summary_rows(self, metrics: dict) -> list[tuple[str, str]]:
        return [
            ("accuracy", rate(metrics["accuracy"])),
            ("invalid rate", rate(metrics["invalid_rate"])),
            ("abstention rate", rate(metrics["abstention_rate"])),
            ("baseline: random", rate(metrics["baseline/random"])),
            ("baseline: longest option", rate(metrics["baseline/longest_option"])),
        ]
