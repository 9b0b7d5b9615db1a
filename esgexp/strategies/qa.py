"""Open-question prompts: zero-shot, with the item's passage, with worked examples, or with retrieved passages."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from esgexp.core.records import QAItem
from esgexp.errors import UserError

TEMPLATE_PARTS = ("instruction", "context", "example", "question")


def draw_examples(pool: list[QAItem], shots: int, seed: int, exclude: set[str]) -> dict[str, list[QAItem]]:
    """``shots`` examples per question type from ``pool``, drawn with ``seed``; items whose id or
    question is in ``exclude`` (the evaluated ones) are never drawn."""
    by_type: dict[str, list[QAItem]] = {}
    for item in sorted(pool, key=lambda i: i.id):
        if item.id not in exclude and item.question not in exclude:
            by_type.setdefault(item.qtype, []).append(item)
    rng = random.Random(seed)
    return {qtype: rng.sample(items, min(shots, len(items))) for qtype, items in sorted(by_type.items())}


@dataclass
class QAPrompter:
    """Fills the template parts: instruction, examples of the item's type, context, question."""

    template: Mapping[str, str]
    context: str | None = None
    examples: dict[str, list[QAItem]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [part for part in TEMPLATE_PARTS if part not in self.template]
        if missing:
            raise UserError(
                f"the QA template lacks the part(s) {', '.join(missing)} (needs {', '.join(TEMPLATE_PARTS)})"
            )

    def build(self, item: QAItem, passages: list[str] | None = None) -> str:
        """The prompt; ``passages`` (retrieved, already formatted) replace the item's own passage."""
        parts = [self.template["instruction"]]
        for example in self.examples.get(item.qtype, []):
            if self.context:
                parts.append(self._fill("context", example, passages="\n".join(example.context)))
            parts.append(self._fill("example", example, answer=example.answers[0]))
        if passages is not None:
            parts.append(self._fill("context", item, passages="\n".join(passages) or "No relevant passage found."))
        elif self.context:
            parts.append(self._fill("context", item, passages="\n".join(item.context)))
        parts.append(self._fill("question", item))
        return "".join(parts)

    def _fill(self, part: str, item: QAItem, **fields: str) -> str:
        values = {"question": item.question, "answer": "", "context": "\n".join(item.context), "passages": ""}
        values.update(fields)
        try:
            return self.template[part].format_map(values)
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(
                f"template part {part!r}: field {exc} is not available; QA templates may use "
                "{question} {answer} {context} {passages} (write literal braces as {{ }})"
            ) from None
