"""``builder=sustainableqa``: passage and table QA in SustainableQA's published schema, split by report.

Stages (each counted in ``build_report.json``): ``candidates`` (text and table passages long enough),
``classify`` (EU Taxonomy / ESG / Sustainability / unrelated; unrelated ones are discarded), ``factoid``
(questions whose answers are lists of spans: one span, or a labelled multi-span group) and ``verbatim``
(a pair is kept only when every span occurs in its passage after ingestion's text normalisation),
``nonfactoid`` (explanatory answers), ``table_passage`` (a table's Markdown rewritten as a captioned
passage), ``table_qa`` and ``table_cells`` (a table pair is kept only when a cell of its table prints its answer:
``answer_cells`` names them by row and column), then ``judge`` (faithfulness and relevance scored 1-5 against the passage by
the judge model; both at least ``min_score`` keeps a pair), ``repair`` (a failing pair rewritten once,
span-checked again for a factoid and cell-checked for a table pair, judged again: kept or discarded with its reason) and ``dedupe`` (one
question per passage and wording). The reports are split into train/validation/test with the build's
``seed``, no report in two splits.

Beyond the published fields, a chunk's ``metadata`` keeps ``passage_id`` and ``page_end`` (pages are the
corpus's 1-based pages), a table's keeps ``passage_id`` and ``table_markdown``, and every QA pair says
whether it was ``repaired``; a multi-span answer is its spans joined by ``"; "``.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, replace
from pathlib import Path

from esgexp.builders.candidates import by_document, interleave, span_candidates
from esgexp.builders.context import BuildContext
from esgexp.builders.generate import Ask, Rejection, StructuredGenerator
from esgexp.builders.report import BuildReport, StageCounts
from esgexp.builders.schema import object_schema, question_schema
from esgexp.builders.table_cells import answer_cells
from esgexp.builders.verify import normal
from esgexp.core.config import CONF_DIR
from esgexp.core.outputs import write_atomic
from esgexp.core.records import Passage
from esgexp.data.corpus import Corpus
from esgexp.data.sustainableqa import CHUNKS, SPLIT_FILES, TABLES
from esgexp.errors import UserError

log = logging.getLogger(__name__)

UNRELATED = "unrelated"
SPLITS = tuple(name.removesuffix(".json") for name in SPLIT_FILES)
FEWER_REPORTS_ORDER = ("test", "train", "validation")  # who gets a report when there are fewer reports than splits
SPAN_JOIN = "; "  # the span separator the factoid metric splits on (eval/qa_metrics.py)
MAX_SPAN_OPTIONS = 30
TYPES = {"factoid": "Factoid", "non_factoid": "Descriptive, non-factoid"}


@dataclass(frozen=True)
class Pair:
    """One QA pair on its way through the stages: ``spans`` for a factoid (the answer is them joined),
    ``context`` the text it was written from (a table's generated passage for table pairs)."""

    id: str
    passage_id: str
    qtype: str
    question: str
    answer: str
    context: str
    spans: tuple[str, ...] = ()
    label: str = "Individual"
    repaired: bool = False
    cells: tuple[tuple[str, str], ...] = ()  # a table pair's: the cells (row, column) that print its answer


@dataclass
class SustainableQABuilder:
    """Settings from ``conf/builder/sustainableqa.yaml``; ``prompts`` holds one template per stage."""

    name: str
    prompts: dict[str, str]
    categories: list[str]
    splits: dict[str, float]
    max_candidates: int | None = 30
    min_chars: int = 80
    max_passage_chars: int = 1500
    max_new_tokens: int = 256
    factoid_per_passage: int = 3
    nonfactoid_per_passage: int = 2
    table_per_passage: int = 3
    max_spans: int = 4
    max_question_chars: int = 130
    max_span_chars: int = 80
    spans_from_passage: bool = True
    max_answer_chars: int = 600
    judge: str | None = None
    min_score: int = 3

    def __post_init__(self):
        """Bad settings are named when the builder is made, before any model loads or run opens."""
        if (
            set(self.splits) != set(SPLITS)
            or any(not isinstance(v, (int, float)) or v < 0 for v in self.splits.values())
            or not sum(self.splits.values())
        ):
            raise UserError(
                f"builder.splits: give a share of 0 or more for each of {', '.join(SPLITS)} "
                f"(not all 0), got {dict(self.splits)}"
            )
        if self.judge is not None and not (CONF_DIR / "model" / f"{self.judge}.yaml").is_file():
            known = ", ".join(sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml")))
            raise UserError(
                f"builder.judge: no model config {self.judge!r} (conf/model/{self.judge}.yaml); known: {known}"
            )

    def build(self, corpus: Corpus, context: BuildContext) -> Path:
        """Write ``train.json``, ``validation.json``, ``test.json`` and ``splits.json`` (report -> split) in
        ``<out>/sustainableqa``; returns that folder (``dataset.path``)."""
        generator, report = context.generator, context.report
        judge = self.judge_generator(context)
        passages = self.candidates(corpus.passages, report.stage("candidates"))
        classes = self.classify(passages, generator, report.stage("classify"))
        related = [p for p in passages if p.id in classes]
        texts, tables = [p for p in related if p.kind != "table"], [p for p in related if p.kind == "table"]
        pairs = self.factoids(texts, generator, report)
        pairs += self.nonfactoids(texts, generator, report.stage("nonfactoid"))
        table_texts = self.table_passages(tables, generator, report.stage("table_passage"))
        pairs += self.in_cells(
            self.table_pairs(tables, table_texts, generator, report.stage("table_qa")), tables, generator, report
        )
        by_id = {p.id: p for p in related}
        kept, failed = self.judged(pairs, by_id, judge, report.stage("judge"))
        kept += self.repaired(failed, by_id, generator, judge, report.stage("repair"))
        kept = dedupe(sorted(kept, key=lambda pair: pair.id), report.stage("dedupe"))
        split_of = assign_splits(sorted({by_id[p.passage_id].doc_id for p in kept}), self.splits, context.seed)
        folder = context.out_dir / self.name
        for split in SPLITS:
            records = dataset_records(kept, by_id, classes, table_texts, {d for d, s in split_of.items() if s == split})
            write_atomic(folder / f"{split}.json", json.dumps(records, ensure_ascii=False, indent=1) + "\n")
        write_atomic(folder / "splits.json", json.dumps(dict(sorted(split_of.items())), indent=1) + "\n")
        report.n_items = len(kept)
        return folder

    def judge_generator(self, context: BuildContext) -> StructuredGenerator:
        """The build's own generator (``judge: null``), or one on the judge model's backend."""
        if self.judge is None:
            return context.generator
        own = context.generator
        return StructuredGenerator(context.solver(self.judge), self.max_new_tokens, own.rejected_file, own.progress)

    # ---- stages -------------------------------------------------------------------------------------

    def candidates(self, passages: list[Passage], counts: StageCounts) -> list[Passage]:
        """Passages of at least ``min_chars`` characters, documents interleaved, at most ``max_candidates``."""
        per_doc = []
        for group in by_document(passages):
            counts.n_in += len(group)
            long_enough = [p for p in group if len(p.text.strip()) >= self.min_chars]
            counts.discarded.update({"too_short": len(group) - len(long_enough)})
            per_doc.append(long_enough)
        chosen = interleave(per_doc, self.max_candidates)
        counts.discarded.update({"over_max_candidates": sum(map(len, per_doc)) - len(chosen)})
        counts.discarded = +counts.discarded  # reasons that did not occur are not listed
        counts.n_out = len(chosen)
        return chosen

    def classify(self, passages: list[Passage], generator: StructuredGenerator, counts: StageCounts) -> dict[str, str]:
        """The category of every passage that is not unrelated, by passage id."""
        schema = object_schema(category={"type": "string", "enum": [*self.categories, UNRELATED]})
        asks = [Ask(p.id, self._prompt("classify", p, categories=", ".join(self.categories)), schema) for p in passages]
        answers = generator.ask("classify", asks, counts)
        unrelated = [i for i, a in answers.items() if a["category"] == UNRELATED]
        counts.n_out -= len(unrelated)
        if unrelated:
            counts.discarded[UNRELATED] += len(unrelated)
        return {i: a["category"] for i, a in answers.items() if a["category"] != UNRELATED}

    def factoids(self, passages: list[Passage], generator: StructuredGenerator, report: BuildReport) -> list[Pair]:
        """Factoid pairs whose spans are all verbatim in their passage (stage ``verbatim`` counts the rest)."""
        if not self.factoid_per_passage:
            return []

        def schema(passage: Passage) -> dict:
            label = {"label": {"type": "string", "minLength": 1, "maxLength": 40}} if self.max_spans > 1 else {}
            pair = object_schema(question=self._question(), **label, spans=self._spans(passage.text))
            return object_schema(
                qa_pairs={"type": "array", "minItems": 1, "maxItems": self.factoid_per_passage, "items": pair}
            )

        asks = [Ask(p.id, self._prompt("factoid", p, n=self.factoid_per_passage), schema(p)) for p in passages]
        answers = _tolerant(generator, "factoid", asks, report.stage("factoid"))
        by_id, counts, pairs = {p.id: p for p in passages}, report.stage("verbatim"), []
        for passage_id, answer in answers.items():
            for number, raw in enumerate(answer["qa_pairs"]):
                spans = tuple(dict.fromkeys(s.strip() for s in raw["spans"]))
                label = raw["label"].strip() if len(spans) > 1 else "Individual"  # a group of one is not labelled
                candidate = Pair(
                    f"{passage_id}/f{number}",
                    passage_id,
                    "factoid",
                    raw["question"].strip(),
                    SPAN_JOIN.join(spans),
                    by_id[passage_id].text,
                    spans,
                    label,
                )
                counts.n_in += 1
                problem = span_problem(spans, candidate.context)
                if problem:
                    counts.discarded[problem[0]] += 1
                    generator.reject(Rejection(candidate.id, "verbatim", *problem, json.dumps(raw, ensure_ascii=False)))
                    continue
                counts.n_out += 1
                pairs.append(candidate)
        return pairs

    def nonfactoids(self, passages: list[Passage], generator: StructuredGenerator, counts: StageCounts) -> list[Pair]:
        if not self.nonfactoid_per_passage:
            return []
        asks = [
            Ask(
                p.id,
                self._prompt("nonfactoid", p, n=self.nonfactoid_per_passage),
                self._free_pairs(self.nonfactoid_per_passage),
            )
            for p in passages
        ]
        answers = _tolerant(generator, "nonfactoid", asks, counts)
        by_id = {p.id: p for p in passages}
        return [
            Pair(f"{pid}/n{k}", pid, "non_factoid", raw["question"].strip(), raw["answer"].strip(), by_id[pid].text)
            for pid, answer in answers.items()
            for k, raw in enumerate(answer["qa_pairs"])
        ]

    def table_passages(
        self, tables: list[Passage], generator: StructuredGenerator, counts: StageCounts
    ) -> dict[str, dict]:
        """Each table's caption and plain-text passage, by table passage id (none when no table QA is asked for)."""
        if not self.table_per_passage:
            return {}
        schema = object_schema(
            caption={"type": "string", "minLength": 1, "maxLength": 150},
            passage={"type": "string", "minLength": 20, "maxLength": self.max_passage_chars},
        )
        answers = _tolerant(
            generator, "table_passage", [Ask(t.id, self._prompt("table_passage", t), schema) for t in tables], counts
        )
        return {i: {"caption": a["caption"].strip(), "passage": a["passage"].strip()} for i, a in answers.items()}

    def table_pairs(
        self, tables: list[Passage], texts: dict[str, dict], generator: StructuredGenerator, counts: StageCounts
    ) -> list[Pair]:
        asks = [
            Ask(
                t.id,
                self._prompt("table_qa", replace(t, text=texts[t.id]["passage"]), n=self.table_per_passage),
                self._free_pairs(self.table_per_passage),
            )
            for t in tables
            if t.id in texts
        ]
        answers = _tolerant(generator, "table_qa", asks, counts)
        return [
            Pair(f"{tid}/t{k}", tid, "table", raw["question"].strip(), raw["answer"].strip(), table_context(texts[tid]))
            for tid, answer in answers.items()
            for k, raw in enumerate(answer["qa_pairs"])
        ]

    def in_cells(
        self, pairs: list[Pair], tables: list[Passage], generator: StructuredGenerator, report: BuildReport
    ) -> list[Pair]:
        """The table pairs whose answer a cell of their table prints, each with those cells named (stage
        ``table_cells``: an answer no cell states, a sum or a figure of the generated passage only, is discarded)."""
        markdown, counts, kept = {t.id: t.text for t in tables}, report.stage("table_cells"), []
        for pair in pairs:
            counts.n_in += 1
            cells = answer_cells(pair.answer, markdown[pair.passage_id])
            if not cells:
                counts.discarded["answer_in_no_cell"] += 1
                detail = f"no cell of table {pair.passage_id} prints {pair.answer!r}"
                generator.reject(Rejection(pair.id, "table_cells", "answer_in_no_cell", detail, pair.question))
                continue
            counts.n_out += 1
            kept.append(replace(pair, cells=cells))
        return kept

    def judged(
        self, pairs: list[Pair], by_id: dict[str, Passage], judge: StructuredGenerator, counts: StageCounts
    ) -> tuple[list[Pair], list[tuple[Pair, str]]]:
        """The pairs the judge passes, and those it fails with its problem (``unfaithful``/``irrelevant`` counted)."""
        verdicts = judge.ask("judge", [self._judge_ask(p, by_id[p.passage_id]) for p in pairs], counts)
        kept, failed = [], []
        for pair in pairs:
            verdict = verdicts.get(pair.id)
            if verdict is None:
                continue  # the judge's output was rejected: counted and written by the generator
            reason = self.failing(verdict)
            if reason is None:
                kept.append(pair)
            else:
                counts.n_out -= 1
                counts.discarded[reason] += 1
                failed.append(
                    (
                        pair,
                        f"{reason} (faithfulness {verdict['faithfulness']}, relevance {verdict['relevance']}): {verdict['problem']}",
                    )
                )
        return kept, failed

    def repaired(
        self,
        failed: list[tuple[Pair, str]],
        by_id: dict[str, Passage],
        generator: StructuredGenerator,
        judge: StructuredGenerator,
        counts: StageCounts,
    ) -> list[Pair]:
        """Each failed pair rewritten once, span-checked (factoid) and judged again; the ones that pass."""
        asks = [self._repair_ask(pair, by_id[pair.passage_id], problem) for pair, problem in failed]
        answers = _tolerant(generator, "repair", asks, counts)
        rewritten = []
        for pair, _ in failed:
            answer = answers.get(pair.id)
            if answer is None:
                continue
            if pair.qtype == "factoid":
                spans = tuple(dict.fromkeys(s.strip() for s in answer["spans"]))
                problem = span_problem(spans, pair.context)
                if problem:
                    counts.n_out -= 1
                    counts.discarded[problem[0]] += 1
                    generator.reject(Rejection(pair.id, "repair", *problem, json.dumps(answer, ensure_ascii=False)))
                    continue
                new = replace(
                    pair,
                    question=answer["question"].strip(),
                    answer=SPAN_JOIN.join(spans),
                    spans=spans,
                    label=pair.label if len(spans) > 1 else "Individual",
                    repaired=True,
                )
            else:
                new = replace(pair, question=answer["question"].strip(), answer=answer["answer"].strip(), repaired=True)
                if pair.qtype == "table":  # a table pair's rewrite must still be printed in a cell
                    new = replace(new, cells=answer_cells(new.answer, by_id[pair.passage_id].text))
                    if not new.cells:
                        counts.n_out -= 1
                        counts.discarded["answer_in_no_cell"] += 1
                        detail = f"no cell of table {pair.passage_id} prints {new.answer!r}"
                        generator.reject(Rejection(pair.id, "repair", "answer_in_no_cell", detail, json.dumps(answer)))
                        continue
            rewritten.append(new)
        scratch = StageCounts()
        verdicts = _tolerant(
            judge, "repair (judge)", [self._judge_ask(p, by_id[p.passage_id]) for p in rewritten], scratch
        )
        for reason, n in scratch.discarded.items():
            counts.discarded[f"judge_{reason}"] += n
        kept = []
        for pair in rewritten:
            verdict = verdicts.get(pair.id)
            reason = "judge_rejected" if verdict is None else self.failing(verdict)
            if reason is None:
                kept.append(pair)
                continue
            counts.n_out -= 1
            if verdict is not None:
                counts.discarded[f"still_{reason}"] += 1
                generator.reject(
                    Rejection(
                        pair.id,
                        "repair",
                        f"still_{reason}",
                        verdict["problem"],
                        json.dumps({"question": pair.question, "answer": pair.answer}, ensure_ascii=False),
                    )
                )
        counts.n_repaired += len(kept)
        return kept

    def failing(self, verdict: dict) -> str | None:
        """``unfaithful`` or ``irrelevant`` when that score is under ``min_score`` (faithfulness checked first)."""
        if verdict["faithfulness"] < self.min_score:
            return "unfaithful"
        if verdict["relevance"] < self.min_score:
            return "irrelevant"
        return None

    # ---- requests -----------------------------------------------------------------------------------

    def _prompt(self, stage: str, passage: Passage, **fields) -> str:
        pages = passage.page_span
        return self.prompts[stage].format(
            doc=passage.doc_id, passage=passage.text[: self.max_passage_chars], pages=pages, **fields
        )

    def _judge_ask(self, pair: Pair, passage: Passage) -> Ask:
        scores = {"type": "integer", "enum": [1, 2, 3, 4, 5]}
        # the reason first, then the scores it leads to (a judge that scores first explains a number it already gave)
        schema = object_schema(
            problem={"type": "string", "minLength": 1, "maxLength": 120}, faithfulness=scores, relevance=scores
        )
        shown = replace(passage, text=pair.context)
        return Ask(pair.id, self._prompt("judge", shown, question=pair.question, answer=pair.answer), schema)

    def _repair_ask(self, pair: Pair, passage: Passage, problem: str) -> Ask:
        if pair.qtype == "factoid":
            schema = object_schema(question=self._question(), spans=self._spans(pair.context))
            rule = self.prompts["factoid_rule"]
        else:
            schema = object_schema(question=self._question(), answer=self._answer())
            rule = self.prompts["free_rule"]
        shown = replace(passage, text=pair.context)
        return Ask(
            pair.id,
            self._prompt(
                "repair", shown, question=pair.question, answer=pair.answer, problem=problem, answer_rule=rule
            ),
            schema,
        )

    def _free_pairs(self, n: int) -> dict:
        pair = object_schema(question=self._question(), answer=self._answer())
        return object_schema(qa_pairs={"type": "array", "minItems": 1, "maxItems": n, "items": pair})

    def _question(self) -> dict:
        return question_schema(self.max_question_chars)

    def _spans(self, text: str) -> dict:
        """1 to ``max_spans`` strings; with ``spans_from_passage`` each one of the passage's span candidates."""
        span: dict = {"type": "string", "minLength": 1, "maxLength": self.max_span_chars}
        options = span_candidates(text, self.max_span_chars) if self.spans_from_passage else []
        if options:
            span = {"type": "string", "enum": options[:MAX_SPAN_OPTIONS]}
        return {"type": "array", "minItems": 1, "maxItems": self.max_spans, "items": span}

    def _answer(self) -> dict:
        return {"type": "string", "minLength": 1, "maxLength": self.max_answer_chars}


def _tolerant(generator: StructuredGenerator, stage: str, asks: list[Ask], counts: StageCounts) -> dict[str, dict]:
    """``generator.ask``, except that a stage whose every output was rejected is logged, not fatal: the model
    has already produced a schema (classify), and the other stages' items are kept."""
    try:
        return generator.ask(stage, asks, counts)
    except UserError as error:
        log.warning("%s", error)
        return {}


def span_problem(spans: tuple[str, ...], passage: str) -> tuple[str, str] | None:
    """(reason, detail) when a span is empty or not verbatim in ``passage`` (both normalised as ingestion does)."""
    text = normal(passage)
    for span in spans:
        wanted = normal(span)
        if not wanted:
            return "empty_span", "a span is empty"
        if wanted not in text:
            return "span_not_in_passage", f"span {wanted[:80]!r} is not in the passage"
    return None


def table_context(text: dict) -> str:
    """What the loader shows for a table item: its caption, then its passage."""
    return f"{text['caption']}\n{text['passage']}"


def dedupe(pairs: list[Pair], counts: StageCounts) -> list[Pair]:
    """One pair per passage, question type and question wording (case and spacing ignored)."""
    seen, kept = set(), []
    for pair in pairs:
        counts.n_in += 1
        key = (pair.passage_id, pair.qtype, " ".join(pair.question.lower().split()))
        if key in seen:
            counts.discarded["repeated_question"] += 1
            continue
        seen.add(key)
        kept.append(pair)
    counts.n_out += len(kept)
    return kept


def assign_splits(reports: list[str], shares: dict[str, float], seed: int) -> dict[str, str]:
    """Each report's split: the reports shuffled with ``seed``, then cut in the order train, validation, test
    at sizes proportional to ``shares``, every split with a share getting at least one report. With fewer
    reports than such splits, test gets the first, then train, then validation."""
    order = sorted(reports)
    random.Random(seed).shuffle(order)
    sizes = split_sizes(len(order), shares)
    out, start = {}, 0
    for split in SPLITS:
        out.update(dict.fromkeys(order[start : start + sizes[split]], split))
        start += sizes[split]
    return out


def split_sizes(n: int, shares: dict[str, float]) -> dict[str, int]:
    """How many of ``n`` reports each split gets (see :func:`assign_splits`)."""
    wanted = [s for s in SPLITS if shares[s] > 0]
    if n < len(wanted):
        first = [s for s in FEWER_REPORTS_ORDER if s in wanted][:n]
        return {s: int(s in first) for s in SPLITS}
    total = sum(shares.values())
    sizes = {s: max(1, round(n * shares[s] / total)) if s in wanted else 0 for s in SPLITS}
    while sum(sizes.values()) > n:  # take from the largest split (the first of equals), never below one
        largest = max(SPLITS, key=lambda s: sizes[s])
        sizes[largest] -= 1
    while sum(sizes.values()) < n:  # give to the split with the largest share
        sizes[max(wanted, key=lambda s: shares[s])] += 1
    return sizes


def dataset_records(
    pairs: list[Pair],
    by_id: dict[str, Passage],
    classes: dict[str, str],
    table_texts: dict[str, dict],
    reports: set[str],
) -> dict:
    """One split file's content: a chunk record per text passage with pairs, a table record per table with pairs."""
    grouped: dict[str, list[Pair]] = {}
    for pair in pairs:
        if by_id[pair.passage_id].doc_id in reports:
            grouped.setdefault(pair.passage_id, []).append(pair)
    chunks, tables = [], []
    for passage_id, own in grouped.items():
        passage, category = by_id[passage_id], classes[passage_id]
        if passage.kind == "table":
            tables.append(table_record(passage, category, table_texts[passage_id], own))
        else:
            chunks.append(chunk_record(passage, category, own, len(chunks) + 1))
    return {CHUNKS: chunks, TABLES: tables}


def chunk_record(passage: Passage, category: str, pairs: list[Pair], number: int) -> dict:
    """A text passage with its factoid pairs (and their span groups) and non-factoid pairs."""
    factoids = [p for p in pairs if p.qtype == "factoid"]
    groups = [{"label": p.label, "spans": list(p.spans)} for p in factoids if len(p.spans) > 1]
    single = [p.spans[0] for p in factoids if len(p.spans) == 1]
    return {
        "metadata": {
            "chunk_number": number,
            "page_number": passage.page_start,
            "titles": [],
            "subtitles": [],
            "paragraph": passage.text,
            "classification": category,
            "report_name": passage.doc_id,
            "passage_id": passage.id,
            "page_end": passage.page_end,
        },
        "spans": {"groups": groups + ([{"label": "Individual", "spans": single}] if single else [])},
        "qa_pairs_factoid": {"qa_pairs": [_qa(p, category) for p in factoids]},
        "qa_pairs_non_factoid": {"qa_pairs": [_qa(p, category) for p in pairs if p.qtype == "non_factoid"]},
    }


def table_record(passage: Passage, category: str, text: dict, pairs: list[Pair]) -> dict:
    """A table with its caption, generated passage, Markdown and QA pairs."""
    return {
        "metadata": {
            "page_number": passage.page_start,
            "table_caption": text["caption"],
            "paragraph": text["passage"],
            "classification": category,
            "report_name": passage.doc_id,
            "passage_id": passage.id,
            "table_markdown": passage.text,
        },
        "qa_pairs": [
            {
                "question": p.question,
                "answer": p.answer,
                "answer_cells": [{"row": row, "column": column} for row, column in p.cells],
                "repaired": p.repaired,
            }
            for p in pairs
        ],
    }


def _qa(pair: Pair, category: str) -> dict:
    return {
        "question": pair.question,
        "answer": pair.answer,
        "type": TYPES[pair.qtype],
        "tag": category,
        "repaired": pair.repaired,
    }
