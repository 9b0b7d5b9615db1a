"""Multiple-choice scoring: the strict ESGenius answer parser, metrics and baselines."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from esgexp.backends.base import REASONING_CLOSE, REASONING_OPEN
from esgexp.core.records import MCQItem

INVALID = "INVALID"
ABSTAIN = "Z"
ANSWER_LETTERS = "ABCD"

_NON_LETTER = re.compile(r"[^A-Za-z]")
# A record's key and the run's metric for an answer that never left its reasoning (its token budget ran out).
UNFINISHED = "unfinished_reasoning"
UNFINISHED_RATE = "invalid/unfinished_reasoning"


def parse_answer(raw: str | None) -> str:
    """The answer in a model's output ``raw``: its sorted, de-duplicated letters A-D, ``Z`` ("Not sure")
    or ``INVALID``.

    The kept words are the upper-case words (split at non-letters) made only of A-D and Z, joined
    into one string. That string exactly ``Z`` is an abstention; Z with anything else (``ZZ``,
    ``Z A``) is INVALID, and so is an output with no kept word."""
    if raw is None:
        return INVALID
    words = _NON_LETTER.sub(" ", raw).split()
    answer = "".join(w for w in words if w.isupper() and set(w) <= set(ANSWER_LETTERS + ABSTAIN))
    if ABSTAIN in answer:
        return ABSTAIN if answer == ABSTAIN else INVALID
    return "".join(sorted(set(answer))) or INVALID


def final_answer(raw: str, delimiters: Sequence[str] | None = None) -> str | None:
    """The answer part of a model's output ``raw``: the text after its last closing delimiter (``</think>``, or
    the model's own ``delimiters``: open, close; the block opened in ``raw``, or in the prompt by a chat
    template that ends with ``<think>``); ``raw`` as it is when it holds no delimiter; None when a reasoning
    block opens and never closes (the budget ran out mid-thought), whichever model wrote it."""
    pairs = {(REASONING_OPEN, REASONING_CLOSE), tuple(delimiters or (REASONING_OPEN, REASONING_CLOSE))}
    ends = [raw.rfind(close) + len(close) for _, close in pairs if close in raw]
    if ends:
        return raw[max(ends) :]
    return None if any(opening in raw for opening, _ in pairs) else raw


def reply_answer(raw: str, model, scoring) -> str | None:
    """The part of ``raw`` a task parses: ``final_answer`` (with the ``model`` config's ``reasoning_delimiters``),
    or the whole reply where ``scoring.reasoning_block=keep`` (a paper's code that parses it all: ESGenius)."""
    if scoring.get("reasoning_block") == "keep":
        return raw
    return final_answer(raw, model.get("reasoning_delimiters"))


def longest_option(options: dict[str, str]) -> str:
    """The letter of the longest option text; ties go to the earliest letter."""
    letters = sorted(options)
    return max(letters, key=lambda letter: (len(options[letter]), -letters.index(letter)))


def _acronyms(*names: str) -> str:
    """Whole acronyms, bounded by non-letters (so ``IFRS_S2`` and ``GRI-305`` match, ``GRIP`` does not)."""
    return "|".join(rf"(?<![a-z]){name}(?![a-z])" for name in names)


_FRAMEWORK_PATTERNS = {
    "GRI": _acronyms("gri") + r"|global reporting initiative",
    # SASB's industry standards are titled "<Industry> - Sustainability Accounting Standard".
    "SASB": _acronyms("sasb") + r"|sustainability accounting standard",
    # The IFRS Foundation also wrote "Progress on Corporate Climate-related Disclosures - 2024 Report".
    "IFRS/ISSB": _acronyms("ifrs", "issb") + r"|progress on corporate climate[- ]related disclosures",
    "TCFD": _acronyms("tcfd") + r"|task force on climate[- ]related financial disclosures",
    "CDP": _acronyms("cdp") + r"|carbon disclosure project",
    "IPCC": _acronyms("ipcc", "ar6")
    + r"|intergovernmental panel on climate change|climate change 20(?:1[4-9]|2[0-9])"
    + r"|ocean and cryosphere in a changing climate|global warming of 1\.5|climate change and land",
    "SDG": _acronyms("sdgs?") + r"|sustainable development(?:al)? goals?|2030 agenda",
}
OTHER_FRAMEWORK = "other"


def detect_framework(text: str) -> str:
    """The framework named earliest in ``text`` (GRI, SASB, IFRS/ISSB, TCFD, CDP, IPCC, SDG) or ``other``."""
    found = []
    for name, pattern in _FRAMEWORK_PATTERNS.items():
        match = re.search(pattern, text, flags=re.IGNORECASE)
        if match:
            found.append((match.start(), name))
    return min(found)[1] if found else OTHER_FRAMEWORK


def item_framework(item: MCQItem) -> str:
    """Framework of an item: from its reference document when known, else from the question."""
    ref_doc = item.meta.get("ref_doc") or ""
    from_ref = detect_framework(ref_doc) if ref_doc else OTHER_FRAMEWORK
    return from_ref if from_ref != OTHER_FRAMEWORK else detect_framework(item.question)


def mcq_metrics(
    items: Sequence[MCQItem], predictions: Iterable[str], unfinished: Iterable[bool] | None = None
) -> dict[str, float]:
    """Accuracy, invalid and abstention rates, per-framework accuracy and the two baselines.

    ``predictions`` are parsed answers aligned with ``items``; a prediction is correct only
    when it equals the gold letters exactly (``Z`` and ``INVALID`` are always wrong). ``unfinished``
    (a reasoning model's run), aligned too, flags the invalid answers whose reasoning never closed:
    their share is ``invalid/unfinished_reasoning``.
    """
    predictions = list(predictions)
    if len(predictions) != len(items):
        raise ValueError(f"{len(predictions)} predictions for {len(items)} items")
    n = len(items)
    if n == 0:
        return {"n_items": 0}
    correct = [p == item.answer and p not in (ABSTAIN, INVALID) for item, p in zip(items, predictions)]
    by_framework: dict[str, list[bool]] = defaultdict(list)
    for item, ok in zip(items, correct):
        by_framework[item_framework(item)].append(ok)
    metrics = {
        "n_items": n,
        "accuracy": sum(correct) / n,
        "invalid_rate": predictions.count(INVALID) / n,
        "abstention_rate": predictions.count(ABSTAIN) / n,
        "baseline/random": sum(1 / len(item.options) for item in items) / n,
        "baseline/longest_option": sum(longest_option(item.options) == item.answer for item in items) / n,
    }
    if unfinished is not None:
        metrics[UNFINISHED_RATE] = sum(map(bool, unfinished)) / n
    for name in sorted(by_framework):
        hits = by_framework[name]
        metrics[f"accuracy/framework/{name}"] = sum(hits) / len(hits)
        metrics[f"n_items/framework/{name}"] = len(hits)
    return metrics
