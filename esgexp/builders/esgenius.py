"""``builder=esgenius``: multiple-choice questions from passages, ESGenius's ``_w_ref`` CSV format.

Stages: ``candidates`` (text passages of at least ``min_chars`` with ``min_sentences`` sentences of
prose, documents interleaved), ``generate``
(a question and its options as JSON), ``refine`` (each solver model answers; a question every solver
gets right is rewritten harder, up to ``rounds`` times, then flagged ``too_easy``) and ``review`` (an
expert's ``review.csv`` imported with ``builder.review=FILE``: keep, edit or drop per row).

Options come one of two ways. With ``options_from_passage`` (the default) the schema makes the correct
option one of the passage's figures, years or names, and each of the three distractors, asked one at a
time (stages ``generate_distractor_1`` to ``_3``), one of the corpus's spans of the same kind (another
percentage, year, tonnage or name) not chosen yet: the four always differ and the answer is always in
the passage, which a small model cannot manage on its own. Without it the model writes all four in one
answer; four that repeat one are asked again once, then discarded as ``repeated_option``. Either way a
question that contains its answer is asked again, then discarded as ``answer_in_question``.

Gold letters are a seeded permutation of a balanced sequence (A-D counts differ by at most one), so
their order follows no row pattern; option Z is always "Not sure".
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
from esgexp.builders.candidates import by_document, interleave, prose_sentences, span_candidates, span_kind
from esgexp.builders.context import BuildContext
from esgexp.builders.generate import Ask
from esgexp.builders.schema import object_schema, question_schema
from esgexp.builders.verify import normal
from esgexp.core.outputs import write_atomic
from esgexp.core.records import Passage
from esgexp.data.corpus import Corpus
from esgexp.data.text_files import csv_records, decoding, open_text
from esgexp.errors import UserError

log = logging.getLogger(__name__)

OUTPUT_FILE = "ESGenius_w_ref.csv"
REVIEW_FILE = "review.csv"
LETTERS = "ABCD"
COLUMNS = (
    "query_id",
    "new_id",
    "query",
    "answer",
    "A",
    "B",
    "C",
    "D",
    "Z",
    "ref_doc",
    "ref_page",
    "source_text",
    "flag",
)
REVIEW_COLUMNS = (
    "query_id",
    "decision",
    "query",
    "correct",
    "distractor_1",
    "distractor_2",
    "distractor_3",
    "solver_answers",
    "flag",
    "ref_doc",
    "ref_page",
    "source_text",
)
DECISIONS = ("keep", "edit", "drop")
# Three named properties rather than an array: each distractor is written after its own key, which keeps
# a small model from repeating the one before.
DISTRACTORS = ("distractor_1", "distractor_2", "distractor_3")
MAX_ANSWER_CHOICES = 30  # spans offered as the correct option per passage
MIN_COMMON = 3  # passages a span must be in before it can be too common to be a correct option


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
    distractor_prompt: str
    solver_prompt: str
    fields: dict[str, str]
    options_from_passage: bool = True
    max_candidates: int | None = 20
    min_chars: int = 200
    min_sentences: int = 2
    max_passage_chars: int = 1500
    max_new_tokens: int = 200
    max_question_chars: int = 400
    max_option_chars: int = 100
    max_distractor_choices: int = 20
    max_answer_share: float = 0.1
    solvers: list[str] = field(default_factory=list)
    rounds: int = 1
    review: str | None = None

    def build(self, corpus: Corpus, context: BuildContext) -> Path:
        """Write ``ESGenius_w_ref.csv`` (and ``review.csv`` for an expert) in the build folder; returns the CSV's path."""
        for name in self.solvers:  # an unknown solver model fails here, before any generation
            context.solver(name)
        reviewed = read_review(Path(self.review)) if self.review else None
        pool = (
            SpanPool(corpus.passages, self.max_option_chars, self.max_answer_share)
            if self.options_from_passage
            else None
        )
        chosen = self.candidates(corpus.passages, pool, context)
        prompts = {p.id: self.prompt.format(passage=self.text(p), fields=self.fields_text()) for p in chosen}
        questions = self.write("generate", [(p.id, p, prompts[p.id]) for p in chosen], pool, context, required=True)
        if self.solvers:
            questions = self.refine(questions, pool, context)
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

    def fields_text(self) -> str:
        return self.fields["passage" if self.options_from_passage else "free"]

    def candidates(self, passages: list[Passage], pool: SpanPool | None, context: BuildContext) -> list[Passage]:
        counts = context.report.stage("candidates")
        groups = []
        for group in by_document(passages):
            counts.n_in += len(group)
            kept = [p for p in group if p.kind == "text" and len(p.text) >= self.min_chars]
            counts.discarded["short_or_not_text"] += len(group) - len(kept)
            prose = [p for p in kept if prose_sentences(self.text(p)) >= self.min_sentences]
            counts.discarded["not_prose"] += len(kept) - len(prose)
            kept = prose
            if pool is not None:
                answerable = [p for p in kept if pool.answers(p, self.text(p))]
                counts.discarded["no_answer_span"] += len(kept) - len(answerable)
                kept = answerable
            groups.append(kept)
        chosen = interleave(groups, self.max_candidates)
        counts.discarded["over_max_candidates"] += sum(map(len, groups)) - len(chosen)
        counts.n_out = len(chosen)
        return chosen

    def write(
        self,
        stage: str,
        items: list[tuple[str, Passage, str]],
        pool: SpanPool | None,
        context: BuildContext,
        required: bool,
    ) -> list[Question]:
        """Questions for (id, passage, prompt) items, in their order: written whole, or (``pool``) the correct
        option and question first, then one distractor per round. A ``required`` stage with nothing valid stops the build."""
        generator = context.generator
        if pool is None:
            asks = [Ask(item_id, prompt, self.free_schema()) for item_id, _, prompt in items]
            answers = generator.ask(
                stage, asks, context.report.stage(stage), required=required, check=free_option_problem
            )
            return [
                question_of(item_id, passage, answers[item_id]) for item_id, passage, _ in items if item_id in answers
            ]
        asks = [
            Ask(item_id, prompt, self.answer_schema(pool.answers(passage, self.text(passage))))
            for item_id, passage, prompt in items
        ]
        answers = generator.ask(stage, asks, context.report.stage(stage), required=required, check=answer_in_question)
        questions = [
            Question(item_id, passage, answers[item_id]["question"].strip(), answers[item_id]["correct"], [])
            for item_id, passage, _ in items
            if item_id in answers
        ]
        for number in range(1, len(DISTRACTORS) + 1):
            questions = self.add_distractor(f"{stage}_distractor_{number}", questions, pool, context, required)
        return questions

    def add_distractor(
        self, stage: str, questions: list[Question], pool: SpanPool, context: BuildContext, required: bool
    ) -> list[Question]:
        """Each question with one more distractor, chosen by the model among spans like its correct option not used yet."""
        counts = context.report.stage(stage)
        asks, kept = [], []
        for question in questions:
            choices = pool.distractors(
                question.correct,
                [question.correct, *question.distractors],
                question.passage.doc_id,
                self.max_distractor_choices,
            )
            if not choices:
                counts.n_in += 1
                counts.discarded["too_few_distractors"] += 1
                continue
            prompt = self.distractor_prompt.format(
                question=question.query,
                correct=question.correct,
                options="; ".join([question.correct, *question.distractors]),
            )
            asks.append(Ask(question.id, prompt, object_schema(distractor={"type": "string", "enum": choices})))
            kept.append(question)
        answers = context.generator.ask(stage, asks, counts, required=required)
        for question in kept:
            if question.id in answers:
                question.distractors.append(answers[question.id]["distractor"])
        return [q for q in kept if q.id in answers]

    def free_schema(self) -> dict:
        option = {"type": "string", "minLength": 1, "maxLength": self.max_option_chars}
        return object_schema(
            question=question_schema(self.max_question_chars), correct=option, **dict.fromkeys(DISTRACTORS, option)
        )

    def answer_schema(self, answers: list[str]) -> dict:
        return object_schema(
            correct={"type": "string", "enum": answers[:MAX_ANSWER_CHOICES]},
            question=question_schema(self.max_question_chars),
        )

    def refine(self, questions: list[Question], pool: SpanPool | None, context: BuildContext) -> list[Question]:
        """Rewrite questions every solver gets right, up to ``rounds`` times; those still solved are flagged."""
        counts = context.report.stage("refine")
        counts.n_in = len(questions)
        current = {q.id: q for q in questions}
        easy = self.solve(list(current.values()), context)
        for round_number in range(1, self.rounds + 1):
            if not easy:
                break
            items = [
                (
                    q.id,
                    q.passage,
                    self.harder_prompt.format(
                        passage=self.text(q.passage),
                        question=q.query,
                        correct=q.correct,
                        distractors="; ".join(q.distractors),
                        fields=self.fields_text(),
                    ),
                )
                for q in easy
            ]
            harder = self.write(f"rewrite_{round_number}", items, pool, context, required=False)
            current.update({q.id: q for q in harder})
            replaced = {q.id for q in harder}
            still_easy = self.solve(harder, context)
            counts.n_repaired += len(harder) - len(still_easy)
            easy = still_easy + [q for q in easy if q.id not in replaced]  # a failed rewrite leaves the easy question
        for question in easy:
            question.flag = "too_easy"
        counts.n_out = len(current)  # nothing is dropped here: a question still easy is kept with its flag
        return [current[q.id] for q in questions]

    @staticmethod
    def solved_marker(name: str, gold: dict[str, str], by_id: dict[str, Question]):
        """A backend callback that marks each answered question solved (or not) by solver ``name``."""

        def take(responses) -> None:
            for response in responses:
                by_id[response.id].solved_by[name] = not response.failed and response.output == gold[response.id]

        return take

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
            if requests:
                backend.run(requests, self.solved_marker(name, gold, {q.id: q for q in questions}))
        return [q for q in questions if q.solved_by and all(q.solved_by.get(name) for name in self.solvers)]


def answer_in_question(answer: dict) -> tuple[str, str] | None:
    """A question that contains its correct option gives it away: asked again, then discarded."""
    if normal(answer["correct"]).lower() in normal(answer["question"]).lower():
        return "answer_in_question", "the question must not contain its correct option"
    return None


def free_option_problem(answer: dict) -> tuple[str, str] | None:
    """The check of a question written whole: its four options must differ (case and outer spaces aside),
    and the question must not contain the correct one."""
    options = [answer["correct"], *(answer[key] for key in DISTRACTORS)]
    if len({o.strip().lower() for o in options}) < 4:
        return "repeated_option", "the correct option and the three distractors must all differ"
    return answer_in_question(answer)


class SpanPool:
    """The spans (figures with a unit, years, names) of a corpus's text passages, by kind: the correct
    options a passage offers, and the distractors like a given one. A span found in more than
    ``max_share`` of its report's passages (the reporting year, the company's name) pins down no fact
    and is never a correct option."""

    def __init__(self, passages: list[Passage], max_chars: int, max_share: float = 0.1):
        self.max_chars = max_chars
        self.by_kind: dict[str, dict[str, tuple[str, str]]] = {}  # kind -> lower-case span -> (span, first document)
        seen_in: Counter = Counter()
        n_passages: Counter = Counter()
        for passage in passages:
            if passage.kind == "text":
                n_passages[passage.doc_id] += 1
                for span in span_candidates(passage.text, max_chars):
                    self.by_kind.setdefault(span_kind(span), {}).setdefault(key_of(span), (span, passage.doc_id))
                    seen_in[passage.doc_id, key_of(span)] += 1
        # (document, lower-case span) found in too many of the document's passages
        self.common = {key for key, n in seen_in.items() if n >= MIN_COMMON and n > max_share * n_passages[key[0]]}

    def answers(self, passage: Passage, text: str) -> list[str]:
        """The spans of ``text`` (from ``passage``) that are not common in its report and whose kind has at
        least three other spans in the corpus to serve as distractors."""
        return [
            span
            for span in span_candidates(text, self.max_chars)
            if (passage.doc_id, key_of(span)) not in self.common and len(self.by_kind.get(span_kind(span), ())) >= 4
        ]

    def distractors(self, correct: str, used: list[str], doc: str, limit: int) -> list[str]:
        """Up to ``limit`` spans of ``correct``'s kind not in ``used`` (any case), those of document ``doc`` first."""
        taken = {key_of(span) for span in used}
        found = [
            (span, source)
            for key, (span, source) in self.by_kind.get(span_kind(correct), {}).items()
            if key not in taken
        ]
        return [span for span, source in sorted(found, key=lambda entry: entry[1] != doc)][:limit]


def key_of(span: str) -> str:
    return " ".join(span.lower().split())


def question_of(item_id: str, passage: Passage, answer: dict) -> Question:
    return Question(
        item_id,
        passage,
        answer["question"].strip(),
        answer["correct"].strip(),
        [answer[key].strip() for key in DISTRACTORS],
    )


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
        rows.append(
            {
                "query_id": question.id,
                "new_id": str(number),
                "query": question.query,
                "answer": gold,
                **options,
                "Z": "Not sure",
                "ref_doc": question.passage.doc_id,
                "ref_page": question.passage.page_span,
                "source_text": question.passage.text,
                "flag": question.flag,
            }
        )
    return rows


def review_row(question: Question) -> dict:
    return {
        "query_id": question.id,
        "decision": "keep",
        "query": question.query,
        "correct": question.correct,
        **{f"distractor_{i}": d for i, d in enumerate(question.distractors, start=1)},
        "solver_answers": "; ".join(
            f"{name}: {'right' if ok else 'wrong'}" for name, ok in sorted(question.solved_by.items())
        ),
        "flag": question.flag,
        "ref_doc": question.passage.doc_id,
        "ref_page": question.passage.page_span,
        "source_text": question.passage.text,
    }


def csv_text(columns: tuple[str, ...], rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_review(path: Path) -> dict[str, dict]:
    """An expert's review.csv by query_id; a missing column, a row that does not line up with the header, an
    unknown decision or an emptied field is a UserError naming the row's file line."""
    if not path.is_file():
        raise UserError(f"builder.review: file not found: {path}")
    with decoding(path, setting=None), open_text(path) as handle:
        header, records = csv_records(handle, path)
    missing = [
        c
        for c in ("query_id", "decision", "query", "correct", "distractor_1", "distractor_2", "distractor_3")
        if c not in header
    ]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
    rows = {}
    for number, row in records:
        decision = row["decision"].strip().lower()
        if decision not in DECISIONS:
            raise UserError(
                f"{path} line {number}: field 'decision': {row['decision']!r} is not one of {', '.join(DECISIONS)}"
            )
        if decision == "edit":
            empty = [
                c for c in ("query", "correct", "distractor_1", "distractor_2", "distractor_3") if not row[c].strip()
            ]
            if empty:
                raise UserError(f"{path} line {number}: field '{empty[0]}': empty in an edited row")
        rows[row["query_id"]] = {**row, "decision": decision}
    return rows


def apply_review(
    questions: list[Question], reviewed: dict[str, dict], path: Path, context: BuildContext
) -> list[Question]:
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
