"""``builder=esgbench``: KPI questions with verbatim evidence and its 0-based page, ESGBench's format.

Stages: ``candidates`` (passages naming a KPI of the vocabulary and holding a number with a unit),
``generate`` (question, answer, evidence, page, category, KPI as JSON), ``verify`` (build/verify.py:
evidence on its cited page, a numeric answer's number in the evidence) and ``dedupe`` (one question
per report and wording). With ``evidence_from_sentences`` the schema lets the evidence be only one of
the passage's own sentences that hold a number, and the page only one the passage covers: a small
model then cannot invent evidence, and the verifier still checks the page and the answer's number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from esgexp.build.candidates import by_document, has_measure, interleave, sentences, term_pattern
from esgexp.build.context import BuildContext
from esgexp.build.generate import Ask, Rejection, StructuredGenerator
from esgexp.build.report import BuildReport
from esgexp.build.verify import PageTexts, verify_pair
from esgexp.data.corpus import Corpus
from esgexp.outputs import write_atomic
from esgexp.records import Passage

OUTPUT_FILE = "esgbench_open_source.jsonl"


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
    max_question_chars: int = 300
    kinds: list[str] = field(default_factory=lambda: ["text", "table"])

    def build(self, corpus: Corpus, context: BuildContext) -> Path:
        """Write ``esgbench_open_source.jsonl`` in the build folder; returns its path."""
        chosen = self.candidates(corpus.passages, context.report)
        answers = context.generator.ask("generate", [self.ask(p, kpis) for p, kpis in chosen], context.report.stage("generate"))
        by_id = {p.id: p for p, _ in chosen}
        rows = self.verified(answers, by_id, PageTexts(corpus), context.generator, context.report)
        path = context.out_dir / OUTPUT_FILE
        write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        context.report.n_items = len(rows)
        return path

    def candidates(self, passages: list[Passage], report: BuildReport) -> list[tuple[Passage, list[tuple[str, str]]]]:
        """Passages with a KPI term and a measured number, best first within each document, documents interleaved."""
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
                elif not has_measure(passage.text):
                    counts.discarded["no_measured_number"] += 1
                else:
                    scored.append((passage, hits))
            per_doc.append(sorted(scored, key=lambda entry: -len(entry[1])))
        chosen = interleave(per_doc, self.max_candidates)
        counts.discarded["over_max_candidates"] += sum(map(len, per_doc)) - len(chosen)
        counts.n_out = len(chosen)
        return chosen

    def ask(self, passage: Passage, kpis: list[tuple[str, str]]) -> Ask:
        text = passage.text[: self.max_passage_chars]
        pages = list(passage.page_indexes)
        prompt = self.prompt.format(doc=passage.doc_id, passage=text, first_page=pages[0], last_page=pages[-1],
                                    kpis=", ".join(kpi for _, kpi in kpis))
        return Ask(passage.id, prompt, self.schema(text, pages, kpis))

    def schema(self, text: str, pages: list[int], kpis: list[tuple[str, str]]) -> dict:
        evidence: dict = {"type": "string", "minLength": 1, "maxLength": self.max_evidence_chars}
        if self.evidence_from_sentences:
            options = [s for s in sentences(text, self.max_evidence_chars) if has_measure(s)] or sentences(text, self.max_evidence_chars)
            if options:
                evidence = {"type": "string", "enum": options[:20]}
        properties = {
            "category": {"type": "string", "enum": sorted({cat for cat, _ in kpis})},
            "kpi_name": {"type": "string", "enum": sorted({kpi for _, kpi in kpis})},
            "evidence": evidence,
            "evidence_page": {"type": "integer", "enum": pages},
            "answer": {"type": "string", "minLength": 1, "maxLength": self.max_answer_chars},
            "question": {"type": "string", "minLength": 10, "maxLength": self.max_question_chars},
        }
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    def verified(self, answers: dict[str, dict], by_id: dict[str, Passage], pages: PageTexts,
                 generator: StructuredGenerator, report: BuildReport) -> list[dict]:
        """ESGBench rows of the answers that pass the verifier, one per (report, question)."""
        verify, dedupe = report.stage("verify"), report.stage("dedupe")
        rows, seen = [], set()
        for passage_id in (i for i in by_id if i in answers):  # candidate order, whatever order the answers came in
            answer = answers[passage_id]
            verify.n_in += 1
            doc = by_id[passage_id].doc_id
            verdict = verify_pair(pages, doc, answer["answer"], [(answer["evidence_page"], answer["evidence"])])
            if not verdict.kept:
                verify.discarded[verdict.reason] += 1
                generator.reject(Rejection(passage_id, "verify", verdict.reason, verdict.detail, json.dumps(answer, ensure_ascii=False)))
                continue
            verify.n_out += 1
            dedupe.n_in += 1
            key = (doc, answer["question"].strip())
            if key in seen:
                dedupe.discarded["repeated_question"] += 1
                generator.reject(Rejection(passage_id, "dedupe", "repeated_question", f"same question as an earlier pair of {doc!r}",
                                           json.dumps(answer, ensure_ascii=False)))
                continue
            seen.add(key)
            dedupe.n_out += 1
            rows.append(row_of(doc, passage_id, answer))
        return rows


def row_of(doc: str, passage_id: str, answer: dict) -> dict:
    """One ``esgbench_open_source.jsonl`` line, with the passage it came from."""
    return {
        "esgbench_id": None, "company": doc, "doc_name": doc, "category": answer["category"], "kpi_name": answer["kpi_name"],
        "question": answer["question"].strip(), "answer": answer["answer"].strip(),
        "evidence": [{"evidence_text": answer["evidence"], "evidence_page_num": answer["evidence_page"], "evidence_doc_name": doc}],
        "source_passage": passage_id,
    }
