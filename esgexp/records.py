"""Record types shared by every dataset of a task."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MCQItem:
    """One multiple-choice question.

    ``options`` maps a letter (A-D) to its text; ``answer`` holds the gold letters sorted
    (usually one); ``context`` holds the linked source passages, if any.
    """

    id: str
    question: str
    options: dict[str, str]
    answer: str
    context: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
