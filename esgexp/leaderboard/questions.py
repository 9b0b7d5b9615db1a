"""The model x question matrix of multiple-choice runs (the ESGenius portal's heatmap): each run's
predictions.jsonl joined with the dataset's questions, models ordered by accuracy, questions by
difficulty (the share of models that miss them)."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

from esgexp.errors import UserError
from esgexp.leaderboard.store import Run

log = logging.getLogger(__name__)


@dataclass
class QuestionMatrix:
    """Rows: models, best first; columns: questions, easiest first. ``correct[r][c]``: 1, 0 or None
    (the run has no record of it); ``answers[r][c]``: the parsed answer ("" when none)."""

    models: list[str]
    accuracy: list[float]
    ids: list[str]
    difficulty: list[float]
    questions: list[list[str]]  # [prompt, options as "A: ...\nB: ...", gold] per column
    correct: list[list[int | None]]
    answers: list[list[str]]


def dataset_questions(run: Run, cache: dict) -> dict[str, object]:
    """The items (id -> MCQItem) of the dataset ``run`` evaluated, read again from its config.yaml's
    dataset node (no limit); {} when the config or the data file is gone."""
    path = run.file("config.yaml")
    if path is None:
        return {}
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    node = OmegaConf.load(path).get("dataset")
    if node is None or "_target_" not in node:
        return {}
    key = OmegaConf.to_yaml({k: v for k, v in node.items() if k not in ("limit", "seed")})
    if key not in cache:
        try:
            with quiet("esgexp.data"):  # the run reported its own skipped rows (its skipped_rows.txt)
                loaded = instantiate(node, limit=None).load()
            cache[key] = {item.id: item for item in loaded.items}
        except (UserError, OSError, ValueError) as error:
            log.warning("questions of run %s not readable (%s): the heatmap shows ids only", run.run_id, error)
            cache[key] = {}
    return cache[key]


@contextmanager
def quiet(logger: str):
    """Within the block, ``logger`` (and its children) logs errors only, not warnings."""
    log_to = logging.getLogger(logger)
    level = log_to.level
    log_to.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log_to.setLevel(level)


def run_label(run: Run, taken: set[str]) -> str:
    """The run's row name: its model, with what tells it apart from runs of that model (``limit=3``)."""
    label = run.tags.get("model") or run.run_id[:8]
    if run.variant:
        label = f"{label} ({run.variant})"
    if label in taken:
        label = f"{label} · {run.run_id[:8]}"
    taken.add(label)
    return label


def by_question(records: list[dict]) -> dict[str, dict]:
    """One record per question: as written, or (scoring.circular, records ``<id>#r<k>``) its rotations
    folded into one, correct when every rotation is, its answer the unrotated one with the count."""
    rotations: dict[str, list[dict]] = {}
    for record in records:
        if "id" in record:
            rotations.setdefault(record.get("item_id", record["id"]), []).append(record)
    out = {}
    for question, found in rotations.items():
        if len(found) == 1:
            out[question] = found[0]
            continue
        found.sort(key=lambda r: r.get("rotation", 0))
        right = sum(bool(r.get("correct")) for r in found)
        answer = f"{found[0].get('parsed') or ''} (right in {right} of {len(found)} rotations)"
        out[question] = {
            "id": question,
            "gold": found[0].get("gold", ""),
            "parsed": answer,
            "correct": right == len(found),
        }
    return out


def question_matrix(runs: list[Run], cache: dict | None = None) -> QuestionMatrix | None:
    """The matrix of ``runs`` (one dataset, strategy and scoring); None when no run has predictions."""
    cache = {} if cache is None else cache
    records, items, taken = {}, {}, set()
    for run in runs:
        rows = by_question(run.json_lines("predictions.jsonl"))
        if rows:
            records[run_label(run, taken)] = rows
            items.update(dataset_questions(run, cache))
    if not records:
        return None
    ids = sorted({item_id for rows in records.values() for item_id in rows})
    accuracy = {
        label: sum(bool(r.get("correct")) for r in rows.values()) / len(rows) for label, rows in records.items()
    }
    models = sorted(records, key=lambda label: (-accuracy[label], label))
    misses = {}
    for item_id in ids:
        seen = [records[m][item_id] for m in models if item_id in records[m]]
        misses[item_id] = sum(not r.get("correct") for r in seen) / len(seen)
    ids.sort(key=lambda item_id: (misses[item_id], item_id))
    questions = []
    for item_id in ids:
        item = items.get(item_id)
        gold = next(records[m][item_id].get("gold", "") for m in models if item_id in records[m])
        if item is None:
            questions.append(["", "", str(gold)])
        else:
            options = "\n".join(f"{letter}: {text}" for letter, text in item.options.items())
            questions.append([item.question, options, str(gold)])
    correct = [[int(bool(records[m][i].get("correct"))) if i in records[m] else None for i in ids] for m in models]
    answers = [[str(records[m][i].get("parsed") or "") if i in records[m] else "" for i in ids] for m in models]
    return QuestionMatrix(
        models, [accuracy[m] for m in models], ids, [misses[i] for i in ids], questions, correct, answers
    )
