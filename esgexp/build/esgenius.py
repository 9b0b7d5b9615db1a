"""``builder=esgenius``: multiple-choice questions from passages, ESGenius's ``_w_ref`` CSV format.

Stages: ``candidates`` (text passages of at least ``min_chars``, documents interleaved), ``generate``
(question, the correct option, three distractors as JSON; four options that repeat one are asked again
once, then discarded as ``repeated_option``),
``refine`` (each solver model answers; a question every solver gets right is rewritten harder, up to
``rounds`` times, then flagged ``too_easy``) and ``review`` (an expert's ``review.csv`` imported with
``builder.review=FILE``: keep, edit or drop per row). Gold letters are a seeded permutation of a
balanced sequence (A-D counts differ by at most one), so their order follows no row pattern; option
Z is always "Not sure".
"""

from __future__ import annotations

import csv
import io
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from esgexp.backends.base import LetterRequest
from esgexp.build.candidates import by_document, interleave
from esgexp.build.context import BuildContext
from esgexp.build.generate import Ask
from esgexp.data.corpus import Corpus
from esgexp.errors import UserError
from esgexp.outputs import write_atomic
from esgexp.records import Passage

log = logging.getLogger(__name__)

OUTPUT_FILE = "ESGenius_w_ref.csv"
REVIEW_FILE = "review.csv"
LETTERS = "ABCD"
COLUMNS = ("query_id", "new_id", "query", "answer", "A", "B", "C", "D", "Z", "ref_doc", "ref_page", "source_text", "flag")
REVIEW_COLUMNS = ("query_id", "decision", "query", "correct", "distractor_1", "distractor_2", "distractor_3",
                  "solver_answers", "flag", "ref_doc", "ref_page", "source_text")
DECISIONS = ("keep", "edit", "drop")
# Three named properties rather than an array: each distractor is written after its own key, which keeps
# a small model from repeating the one before.
DISTRACTORS = ("distractor_1", "distractor_2", "distractor_3")


@dataclass
class Question:
    """One question before its letters are fixed: the correct option first, then the distractors."""

    id: str
    passage: Passage
    query: str
    correct: str
    distractors: list[str]
    solved_by: dict[str, bool] = field(default_factory=dict)
    flag: str = ""


@dataclass
class ESGeniusBuilder:
    """Settings from ``conf/builder/esgenius.yaml``."""

    name: str
    prompt: str
    harder_prompt: str
    solver_prompt: str
    max_candidates: int | None = 20
    min_chars: int = 200
    max_passage_chars: int = 1500
    max_new_tokens: int = 200
    max_question_chars: int = 250
    max_option_chars: int = 100
    solvers: list[str] = field(default_factory=list)
    rounds: int = 1
    review: str | None = None

    def build(self, corpus: Corpus, context: BuildContext) -> Path:
        """Write ``ESGenius_w_ref.csv`` (and ``review.csv`` for an expert) in the build folder; returns the CSV's path."""
        for name in self.solvers:  # an unknown solver model fails here, before any generation
            context.solver(name)
        reviewed = read_review(Path(self.review)) if self.review else None
        chosen = self.candidates(corpus.passages, context)
        answers = context.generator.ask("generate", [self.ask(p, self.prompt.format(passage=self.text(p))) for p in chosen],
                                        context.report.stage("generate"), check=repeated_option)
        questions = [question_of(p.id, p, answers[p.id]) for p in chosen if p.id in answers]
        if self.solvers:
            questions = self.refine(questions, context)
        if reviewed is not None:
            questions = apply_review(questions, reviewed, Path(self.review), context)
        rows = letter_rows(questions, context.seed)
        path = context.out_dir / OUTPUT_FILE
        write_atomic(path, csv_text(COLUMNS, rows))
        context.report.n_items = len(rows)
        if reviewed is None:
            write_atomic(context.out_dir / REVIEW_FILE, csv_text(REVIEW_COLUMNS, [review_row(q) for q in questions]))
        return path

    def text(self, passage: Passage) -> str:
        return passage.text[: self.max_passage_chars]

    def candidates(self, passages: list[Passage], context: BuildContext) -> list[Passage]:
        counts = context.report.stage("candidates")
        groups = []
        for group in by_document(passages):
            counts.n_in += len(group)
            kept = [p for p in group if p.kind == "text" and len(p.text) >= self.min_chars]
            counts.discarded["short_or_not_text"] += len(group) - len(kept)
            groups.append(kept)
        chosen = interleave(groups, self.max_candidates)
        counts.discarded["over_max_candidates"] += sum(map(len, groups)) - len(chosen)
        counts.n_out = len(chosen)
        return chosen

    def ask(self, passage: Passage, prompt: str, ask_id: str | None = None) -> Ask:
        option = {"type": "string", "minLength": 1, "maxLength": self.max_option_chars}
        properties = {"question": {"type": "string", "minLength": 10, "maxLength": self.max_question_chars}, "correct": option,
                      **{key: option for key in DISTRACTORS}}
        schema = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
        return Ask(ask_id or passage.id, prompt, schema)

    def refine(self, questions: list[Question], context: BuildContext) -> list[Question]:
        """Rewrite questions every solver gets right, up to ``rounds`` times; those still solved are flagged."""
        counts = context.report.stage("refine")
        counts.n_in = len(questions)
        current = {q.id: q for q in questions}
        easy = self.solve(list(current.values()), context)
        for round_number in range(1, self.rounds + 1):
            if not easy:
                break
            asks = [self.ask(q.passage, self.harder_prompt.format(passage=self.text(q.passage), question=q.query, correct=q.correct,
                                                                  distractors="; ".join(q.distractors)), q.id) for q in easy]
            rewritten = context.generator.ask(f"rewrite_{round_number}", asks, context.report.stage(f"rewrite_{round_number}"),
                                              required=False, check=repeated_option)
            harder = [question_of(q.id, q.passage, rewritten[q.id]) for q in easy if q.id in rewritten]
            current.update({q.id: q for q in harder})
            replaced = {q.id for q in harder}
            still_easy = self.solve(harder, context)
            counts.n_repaired += len(harder) - len(still_easy)
            easy = still_easy + [q for q in easy if q.id not in replaced]  # a failed rewrite leaves the easy question
        for question in easy:
            question.flag = "too_easy"
        counts.n_out = len(current)  # nothing is dropped here: a question still easy is kept with its flag
        return [current[q.id] for q in questions]

    def solve(self, questions: list[Question], context: BuildContext) -> list[Question]:
        """Ask every solver; the questions all of them answer right (in the solver's seeded option order)."""
        for name in self.solvers:
            backend = context.solver(name)
            requests, gold = [], {}
            for question in questions:
                options, answer = shuffled(question, f"{context.seed}:{name}:{question.id}:{question.query}")
                prompt = self.solver_prompt.format(query=question.query, **options)
                requests.append(LetterRequest(question.id, prompt, letters=("A", "B", "C", "D", "Z")))
                gold[question.id] = answer
            by_id = {q.id: q for q in questions}

            def take(responses) -> None:
                for response in responses:
                    by_id[response.id].solved_by[name] = not response.failed and response.output == gold[response.id]

            if requests:
                backend.run(requests, take)
        return [q for q in questions if q.solved_by and all(q.solved_by.get(name) for name in self.solvers)]


def repeated_option(answer: dict) -> tuple[str, str] | None:
    """The generate check: the correct option and the three distractors must differ (case and outer spaces aside)."""
    options = [answer["correct"], *(answer[key] for key in DISTRACTORS)]
    if len({o.strip().lower() for o in options}) < 4:
        return "repeated_option", "the correct option and the three distractors must all differ"
    return None


def question_of(item_id: str, passage: Passage, answer: dict) -> Question:
    return Question(item_id, passage, answer["question"].strip(), answer["correct"].strip(), [answer[key].strip() for key in DISTRACTORS])


def shuffled(question: Question, key: str) -> tuple[dict[str, str], str]:
    """The four options in an order seeded by ``key``, and the correct one's letter."""
    texts = [question.correct, *question.distractors]
    order = list(range(4))
    random.Random(key).shuffle(order)
    return {LETTERS[slot]: texts[index] for slot, index in enumerate(order)}, LETTERS[order.index(0)]


def gold_letters(n: int, seed: int) -> list[str]:
    """``n`` letters, each of A-D ``n // 4`` or ``n // 4 + 1`` times, in a seeded random order."""
    letters = [LETTERS[i % 4] for i in range(n)]
    random.Random(seed).shuffle(letters)
    return letters


def letter_rows(questions: list[Question], seed: int) -> list[dict]:
    """ESGenius_w_ref rows: the correct option at its gold letter, the distractors in the other slots in order."""
    rows = []
    for number, (question, gold) in enumerate(zip(questions, gold_letters(len(questions), seed)), start=1):
        distractors = iter(question.distractors)
        options = {letter: question.correct if letter == gold else next(distractors) for letter in LETTERS}
        rows.append({"query_id": question.id, "new_id": str(number), "query": question.query, "answer": gold, **options, "Z": "Not sure",
                     "ref_doc": question.passage.doc_id, "ref_page": question.passage.page_span, "source_text": question.passage.text,
                     "flag": question.flag})
    return rows


def review_row(question: Question) -> dict:
    return {"query_id": question.id, "decision": "keep", "query": question.query, "correct": question.correct,
            **{f"distractor_{i}": d for i, d in enumerate(question.distractors, start=1)},
            "solver_answers": "; ".join(f"{name}: {'right' if ok else 'wrong'}" for name, ok in sorted(question.solved_by.items())),
            "flag": question.flag, "ref_doc": question.passage.doc_id, "ref_page": question.passage.page_span,
            "source_text": question.passage.text}


def csv_text(columns: tuple[str, ...], rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_review(path: Path) -> dict[str, dict]:
    """An expert's review.csv by query_id; a missing column, unknown decision or emptied field is a UserError naming the row."""
    if not path.is_file():
        raise UserError(f"builder.review: file not found: {path}")
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("query_id", "decision", "query", "correct", "distractor_1", "distractor_2", "distractor_3")
                   if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
        rows = {}
        for number, row in enumerate(reader, start=2):
            decision = (row["decision"] or "").strip().lower()
            if decision not in DECISIONS:
                raise UserError(f"{path} line {number}: field 'decision': {row['decision']!r} is not one of {', '.join(DECISIONS)}")
            if decision == "edit":
                empty = [c for c in ("query", "correct", "distractor_1", "distractor_2", "distractor_3") if not (row[c] or "").strip()]
                if empty:
                    raise UserError(f"{path} line {number}: field '{empty[0]}': empty in an edited row")
            rows[row["query_id"]] = {**row, "decision": decision}
    return rows


def apply_review(questions: list[Question], reviewed: dict[str, dict], path: Path, context: BuildContext) -> list[Question]:
    """Keep, edit or drop each question as the review says; a question the review does not list is kept and counted."""
    counts = context.report.stage("review")
    out, decisions = [], Counter()
    for question in questions:
        counts.n_in += 1
        row = reviewed.get(question.id)
        decision = row["decision"] if row else "not_reviewed"
        decisions[decision] += 1
        if decision == "drop":
            counts.discarded["dropped_by_reviewer"] += 1
            continue
        if decision == "edit":
            question.query, question.correct = row["query"].strip(), row["correct"].strip()
            question.distractors = [row[f"distractor_{i}"].strip() for i in (1, 2, 3)]
            counts.n_repaired += 1
        out.append(question)
    counts.n_out = len(out)
    if decisions["not_reviewed"]:
        log.warning("%d question(s) are not in %s; kept as generated", decisions["not_reviewed"], path)
    return out
