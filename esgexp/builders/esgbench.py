"""``builder=esgbench``: KPI questions with verbatim evidence and its 0-based page, ESGBench's format.

Stages: ``candidates`` (passages naming a KPI of the vocabulary and holding a number with a unit),
``generate`` (question, answer, evidence, page, category, KPI as JSON), ``verify`` (build/verify.py:
evidence on its cited page, a numeric answer's number in the evidence) and ``dedupe`` (one question
per report and wording). The answer comes as ``fact``: evidence, its page, answer. With
``evidence_from_sentences`` the schema offers one alternative per sentence of the passage that holds a
figure with a unit and lies on one page: the evidence is that sentence, the page the one it is on, the
answer one of its figures. A small model then cannot invent evidence, cite the wrong page or answer with
a sentence, and the verifier still checks all three. A question that contains its answer is asked again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from esgexp.builders.candidates import by_document, has_measure, interleave, sentences, term_pattern
from esgexp.builders.context import BuildContext
from esgexp.builders.generate import Ask, Rejection, StructuredGenerator
from esgexp.builders.report import BuildReport
from esgexp.builders.schema import object_schema, question_schema
from esgexp.builders.verify import PageTexts, normal, verify_pair
from esgexp.core.outputs import write_atomic
from esgexp.core.records import Passage
from esgexp.data.corpus import Corpus
from esgexp.eval.numbers import find_quantities

OUTPUT_FILE = "esgbench_open_source.jsonl"
MAX_FACTS = 20  # sentences offered as evidence per passage


@dataclass
class ESGBenchBuilder:
    """Settings from ``conf/builder/esgbench.yaml``: ``kpis`` maps category -> KPI name -> terms."""

    name: str
    kpis: dict[str, dict[str, list[str]]]
    prompt: str
    max_candidates: int | None = 20
    max_new_tokens: int = 256
    evidence_from_sentences: bool = True
    max_evidence_chars: int = 400
    max_passage_chars: int = 2000
    max_answer_chars: int = 80
    max_question_chars: int = 130
    kinds: list[str] = field(default_factory=lambda: ["text", "table"])

    def build(self, corpus: Corpus, context: BuildContext) -> Path:
        """Write ``esgbench_open_source.jsonl`` in the build folder; returns its path."""
        pages = PageTexts(corpus)
        chosen = self.candidates(corpus.passages, pages, context.report)
        asks = [self.ask(p, kpis, facts) for p, kpis, facts in chosen]
        answers = context.generator.ask("generate", asks, context.report.stage("generate"), check=answer_in_question)
        by_id = {p.id: p for p, _, _ in chosen}
        rows = self.verified(answers, by_id, pages, context.generator, context.report)
        path = context.out_dir / OUTPUT_FILE
        write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        context.report.n_items = len(rows)
        return path

    def candidates(
        self, passages: list[Passage], pages: PageTexts, report: BuildReport
    ) -> list[tuple[Passage, list, list[dict]]]:
        """(passage, its KPIs, its facts) for passages with a KPI term and a measured number (with
        ``evidence_from_sentences``: a sentence on one page holding a figure), most KPIs first within each
        document, documents interleaved."""
        counts = report.stage("candidates")
        patterns = {(cat, kpi): term_pattern(terms) for cat, kpis in self.kpis.items() for kpi, terms in kpis.items()}
        per_doc = []
        for group in by_document(passages):
            scored = []
            for passage in group:
                counts.n_in += 1
                if passage.kind not in self.kinds:
                    counts.discarded["kind"] += 1
                    continue
                hits = [key for key, pattern in patterns.items() if pattern.search(passage.text)]
                if not hits:
                    counts.discarded["no_kpi_term"] += 1
                    continue
                if not has_measure(passage.text):
                    counts.discarded["no_measured_number"] += 1
                    continue
                facts = self.facts(passage, pages) if self.evidence_from_sentences else []
                if self.evidence_from_sentences and not facts:
                    counts.discarded["no_sentence_with_figure"] += 1
                    continue
                scored.append((passage, hits, facts))
            per_doc.append(sorted(scored, key=lambda entry: -len(entry[1])))
        chosen = interleave(per_doc, self.max_candidates)
        counts.discarded["over_max_candidates"] += sum(map(len, per_doc)) - len(chosen)
        counts.n_out = len(chosen)
        return chosen

    def facts(self, passage: Passage, pages: PageTexts) -> list[dict]:
        """The schema alternatives for ``fact``: one per sentence of the passage that lies on one of its pages
        and holds a figure with a unit (evidence: that sentence; page: where it is; answer: one of its figures)."""
        alternatives = []
        for sentence in sentences(passage.text[: self.max_passage_chars], self.max_evidence_chars):
            figures = [
                q.raw for q in find_quantities(sentence) if q.unit is not None and len(q.raw) <= self.max_answer_chars
            ]
            on = pages.pages_with(passage.doc_id, sentence, among=passage.page_indexes)
            if figures and on:
                alternatives.append(
                    fact_schema(
                        {"type": "string", "enum": [sentence]},
                        on,
                        {"type": "string", "enum": list(dict.fromkeys(figures))},
                    )
                )
        return alternatives[:MAX_FACTS]

    def ask(self, passage: Passage, kpis: list[tuple[str, str]], facts: list[dict]) -> Ask:
        text = passage.text[: self.max_passage_chars]
        indexes = list(passage.page_indexes)
        prompt = self.prompt.format(
            doc=passage.doc_id,
            passage=text,
            first_page=indexes[0],
            last_page=indexes[-1],
            kpis=", ".join(kpi for _, kpi in kpis),
        )
        if facts:
            fact = {"anyOf": facts}
        else:
            fact = fact_schema(
                {"type": "string", "minLength": 1, "maxLength": self.max_evidence_chars},
                indexes,
                {"type": "string", "minLength": 1, "maxLength": self.max_answer_chars},
            )
        return Ask(
            passage.id,
            prompt,
            object_schema(
                category={"type": "string", "enum": sorted({cat for cat, _ in kpis})},
                kpi_name={"type": "string", "enum": sorted({kpi for _, kpi in kpis})},
                fact=fact,
                question=question_schema(self.max_question_chars),
            ),
        )

    def verified(
        self,
        answers: dict[str, dict],
        by_id: dict[str, Passage],
        pages: PageTexts,
        generator: StructuredGenerator,
        report: BuildReport,
    ) -> list[dict]:
        """ESGBench rows of the answers that pass the verifier, one per (report, question)."""
        verify, dedupe = report.stage("verify"), report.stage("dedupe")
        rows, seen = [], set()
        for passage_id in (i for i in by_id if i in answers):  # candidate order, whatever order the answers came in
            answer = answers[passage_id]
            verify.n_in += 1
            doc = by_id[passage_id].doc_id
            fact = answer["fact"]
            verdict = verify_pair(pages, doc, fact["answer"], [(fact["evidence_page"], fact["evidence"])])
            if not verdict.kept:
                verify.discarded[verdict.reason] += 1
                generator.reject(
                    Rejection(
                        passage_id, "verify", verdict.reason, verdict.detail, json.dumps(answer, ensure_ascii=False)
                    )
                )
                continue
            verify.n_out += 1
            dedupe.n_in += 1
            key = (doc, answer["question"].strip())
            if key in seen:
                dedupe.discarded["repeated_question"] += 1
                generator.reject(
                    Rejection(
                        passage_id,
                        "dedupe",
                        "repeated_question",
                        f"same question as an earlier pair of {doc!r}",
                        json.dumps(answer, ensure_ascii=False),
                    )
                )
                continue
            seen.add(key)
            dedupe.n_out += 1
            rows.append(row_of(doc, passage_id, answer))
        return rows


def fact_schema(evidence: dict, pages: list[int], answer: dict) -> dict:
    """The ``fact`` object: evidence text, its 0-based page (one of ``pages``), the answer."""
    return object_schema(evidence=evidence, evidence_page={"type": "integer", "enum": pages}, answer=answer)


def answer_in_question(answer: dict) -> tuple[str, str] | None:
    """The generate check: a question that states its own answer is asked again, then discarded."""
    if normal(answer["fact"]["answer"]).lower() in normal(answer["question"]).lower():
        return "answer_in_question", "the question must not contain its answer"
    return None


def row_of(doc: str, passage_id: str, answer: dict) -> dict:
    """One ``esgbench_open_source.jsonl`` line, with the passage it came from."""
    fact = answer["fact"]
    return {
        "esgbench_id": None,
        "company": doc,
        "doc_name": doc,
        "category": answer["category"],
        "kpi_name": answer["kpi_name"],
        "question": answer["question"].strip(),
        "answer": fact["answer"].strip(),
        "evidence": [
            {"evidence_text": fact["evidence"], "evidence_page_num": fact["evidence_page"], "evidence_doc_name": doc}
        ],
        "source_passage": passage_id,
    }
