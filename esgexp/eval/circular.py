"""Circular option order (each question asked once per cyclic shift of its options A-D) and position bias.

Rotation ``k`` moves every option ``k`` letters down: the option shown at A in the data file is shown at
the ``k``-th letter after A (wrapping round), so its gold letters move the same way; ``Z`` ("Not sure")
stays last and unchanged. Rotation 0 is the file's own order. A rotated item's id is
``<item id>#r<k>`` and its ``meta`` keeps ``item_id`` and ``rotation``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence

from esgexp.core.records import MCQItem
from esgexp.errors import UserError
from esgexp.eval.mcq import ANSWER_LETTERS

ROTATIONS = len(ANSWER_LETTERS)


def rotate_letters(letters: str, k: int) -> str:
    """Gold (or parsed) letters after rotation ``k``, sorted; ``Z`` stays ``Z``."""
    moved = (ANSWER_LETTERS[(ANSWER_LETTERS.index(c) + k) % ROTATIONS] if c in ANSWER_LETTERS else c for c in letters)
    return "".join(sorted(moved))


def rotate_item(item: MCQItem, k: int) -> MCQItem:
    """``item`` asked in rotation ``k`` (see the module docstring); refused unless its options are exactly A-D."""
    if sorted(item.options) != list(ANSWER_LETTERS):
        raise UserError(
            f"scoring.circular=true rotates the four options A-D; item {item.id!r} has options "
            f"{', '.join(sorted(item.options)) or 'none'}"
        )
    options = {ANSWER_LETTERS[(j + k) % ROTATIONS]: item.options[letter] for j, letter in enumerate(ANSWER_LETTERS)}
    return dataclasses.replace(
        item,
        id=f"{item.id}#r{k}",
        options=dict(sorted(options.items())),
        answer=rotate_letters(item.answer, k),
        meta={**item.meta, "item_id": item.id, "rotation": k},
    )


def rotated_items(items: Sequence[MCQItem]) -> list[MCQItem]:
    """Every item in rotations 0-3, the rotations of one item next to each other."""
    return [rotate_item(item, k) for item in items for k in range(ROTATIONS)]


def circular_metrics(records: Sequence[dict]) -> dict[str, float]:
    """``circular/accuracy`` (a question counts only if answered correctly in every rotation, as in
    OpenCompass's CircularEval and MMBench), the accuracy of each rotation and the number of questions.

    ``records`` carry ``item_id``, ``rotation`` and ``correct``; a failed answer counts as wrong."""
    by_question: dict[str, dict[int, bool]] = defaultdict(dict)
    by_rotation: dict[int, list[bool]] = defaultdict(list)
    for record in records:
        by_question[record["item_id"]][record["rotation"]] = bool(record["correct"])
        by_rotation[record["rotation"]].append(bool(record["correct"]))
    incomplete = [q for q, answers in by_question.items() if len(answers) != ROTATIONS]
    if incomplete:
        raise ValueError(f"{len(incomplete)} question(s) lack some of the {ROTATIONS} rotations, e.g. {incomplete[:3]}")
    metrics = {
        "circular/n_questions": len(by_question),
        "circular/accuracy": sum(all(a.values()) for a in by_question.values()) / len(by_question)
        if by_question
        else math.nan,
    }
    for k in sorted(by_rotation):
        metrics[f"circular/rotation_{k}/accuracy"] = sum(by_rotation[k]) / len(by_rotation[k])
    return metrics


def position_bias(records: Sequence[dict], letters: str = ANSWER_LETTERS) -> dict[str, float]:
    """How often each letter is answered against how often it is the gold one, and RStd.

    ``position_bias/pick_rate/<L>``: share of answers that are exactly ``L``; ``position_bias/gold_rate/<L>``:
    share of golds that are exactly ``L``; ``position_bias/recall/<L>``: share of the questions with gold
    ``L`` answered ``L``; ``position_bias/rstd``: the standard deviation (population) of those recalls
    over the letters that are gold at least once (Zheng et al. 2023, "Large Language Models Are Not
    Robust Multiple Choice Selectors"). Multi-letter and ``Z`` golds count in no letter's recall."""
    n = len(records)
    if n == 0:
        return {}
    metrics: dict[str, float] = {}
    recalls = []
    for letter in letters:
        gold = [r for r in records if r["gold"] == letter]
        metrics[f"position_bias/pick_rate/{letter}"] = sum(r["parsed"] == letter for r in records) / n
        metrics[f"position_bias/gold_rate/{letter}"] = len(gold) / n
        if gold:
            recall = sum(r["parsed"] == letter for r in gold) / len(gold)
            metrics[f"position_bias/recall/{letter}"] = recall
            recalls.append(recall)
    if recalls:
        mean = sum(recalls) / len(recalls)
        metrics["position_bias/rstd"] = math.sqrt(sum((r - mean) ** 2 for r in recalls) / len(recalls))
    return metrics
