"""The ESGBench verifier: a question-answer pair is kept only when every evidence text occurs on its
cited 0-based page of the report, and, for a numeric answer, when the answer's number (with its unit)
is in the evidence. Builders call :func:`verify_pair`; ``python -m esgexp.verify
dataset.path=FILE corpus=PATH`` audits any ESGBench-format file against an ingested corpus.

Texts are compared after the ingestion's cleaning (``data/pdf.clean_text``: NFKC, hyphen breaks,
invisible characters) with every run of whitespace made one space, so line breaks never matter.
Numbers are read with ``eval/numbers.py``: ``225.7 ktCO2e`` in the answer matches ``225,700 tCO2e``
in the evidence; only whole numbers of the evidence count (``3 t`` is not in ``1.843,3 t``); a bare
number in a table row takes the unit of a label before it (``MWh 280,903``, ``(in %) 5.9``), never of
one after it, which belongs to the next cell (``3,167 Employee turnover rate (in %)``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from esgexp.data.corpus import Corpus
from esgexp.data.esgbench import GOLD, read_jsonl, row_to_item
from esgexp.data.pdf import clean_text
from esgexp.errors import UserError
from esgexp.eval.numbers import Quantity, find_quantities, parse_quantity, unit_labels

log = logging.getLogger(__name__)

REASONS = (
    "unknown_document",
    "page_out_of_range",
    "evidence_not_found",
    "evidence_on_other_page",
    "number_not_in_evidence",
)
_TONNES = frozenset({"t", "tCO2e"})  # one family, as the ESGBench metric judges them


def normal(text: str) -> str:
    """``text`` cleaned as ingestion cleans a page, whitespace runs made one space."""
    return " ".join(clean_text(text).split())


@dataclass(frozen=True)
class Verdict:
    """``kept`` or the first failing check's ``reason`` (one of REASONS) and a ``detail`` naming it."""

    kept: bool
    reason: str | None = None
    detail: str = ""


class PageTexts:
    """Each document's normalised page texts by 0-based page index, from a corpus's page map."""

    def __init__(self, corpus: Corpus):
        self.pages = {
            doc: {page.page_index: normal(page.text) for page in pages} for doc, pages in corpus.pages.items()
        }

    def pages_with(self, doc: str, text: str, among: Iterable[int] | None = None) -> list[int]:
        """The 0-based indexes of the pages of ``doc`` (or of those ``among`` them) whose text holds ``text`` (normalised)."""
        wanted, pages = normal(text), self.pages.get(doc, {})
        indexes = pages if among is None else [i for i in among if i in pages]
        return sorted(index for index in indexes if wanted and wanted in pages[index])


def verify_pair(pages: PageTexts, doc: str, answer: str, evidence: list[tuple[int, str]]) -> Verdict:
    """Check one pair: each (0-based page, text) of ``evidence`` on its page, then the answer's number."""
    if doc not in pages.pages:
        return Verdict(False, "unknown_document", f"document {doc!r} is not in the corpus")
    for page, text in evidence:
        if page not in pages.pages[doc]:
            return Verdict(
                False, "page_out_of_range", f"page {page} (0-based) is not in {doc!r} ({len(pages.pages[doc])} pages)"
            )
        found = pages.pages_with(doc, text)
        if page not in found:
            if found:
                return Verdict(False, "evidence_on_other_page", f"cited page {page}, found on page(s) {found}")
            return Verdict(False, "evidence_not_found", f"evidence {text[:60]!r} is on no page of {doc!r}")
    target = parse_quantity(answer)
    if target is not None and not any(number_in(target, text) for _, text in evidence):
        return Verdict(False, "number_not_in_evidence", f"{target.raw!r} is not in the evidence")
    return Verdict(True)


def number_in(target: Quantity, text: str) -> bool:
    """Whether ``text`` holds a whole number of ``target``'s value (as ``eval/numbers.py`` reads it: never
    part of a longer one) in its unit family, or a bare one whose unit label comes before it in ``text``
    (a row label or column head: ``MWh 280,903``, ``(in %) 5.9``; a unit after it is the next cell's)."""
    text = normal(text)
    quantities = find_quantities(text)
    labels = unit_labels(text, quantities) if target.unit else []
    for quantity in quantities:
        if quantity.unit is not None or target.unit is None:
            if close(quantity.value, target.value) and (target.unit is None or same_family(quantity.unit, target.unit)):
                return True
            continue
        for start, unit, factor in labels:
            if (
                start < quantity.start
                and same_family(unit, target.unit)
                and close(quantity.value * factor, target.value)
            ):
                return True
    return False


def same_family(unit: str | None, other: str) -> bool:
    return unit == other or {unit, other} <= _TONNES


def close(value: float, target: float) -> bool:
    return math.isclose(value, target, rel_tol=1e-6, abs_tol=1e-9)


def audit(rows: list[tuple[int, dict]], corpus: Corpus) -> tuple[list[dict], Counter]:
    """A verdict per ESGBench gold row (line number, row) and the count per outcome (``kept`` or a reason)."""
    pages = PageTexts(corpus)
    verdicts, counts = [], Counter()
    for line, row in rows:
        evidence = [
            (e.get("evidence_page_num"), e.get("evidence_text") or "")
            for e in row.get("evidence") or []
            if isinstance(e, dict)
        ]
        verdict = verify_pair(pages, str(row.get("doc_name", "")).strip(), str(row.get("answer", "")), evidence)
        counts["kept" if verdict.kept else verdict.reason] += 1
        verdicts.append(
            {
                "line": line,
                "doc_name": row.get("doc_name"),
                "question": row.get("question"),
                "kept": verdict.kept,
                "reason": verdict.reason,
                "detail": verdict.detail,
            }
        )
    return verdicts, counts


def main_audit(dataset_path: str, corpus_path: str, out_dir: Path) -> dict:
    """Audit the file at ``dataset_path`` against the corpus folder; writes verdicts.jsonl and verify_report.json.

    Lines that are not ESGBench gold lines are skipped (a file of them refused); a corpus holding none of
    the file's reports is refused, named against the one its build recorded (provenance.json)."""
    import json

    from esgexp.core.outputs import write_atomic, write_json

    skipped: list[str] = []
    rows = list(read_jsonl(dataset_path, skipped, GOLD_ROWS))
    if not rows:
        raise UserError(f"{dataset_path}: no usable ESGBench line (lines skipped: {len(skipped)})")
    corpus = Corpus.load(corpus_path)
    check_corpus(dataset_path, rows, corpus)
    verdicts, counts = audit(rows, corpus)
    write_atomic(out_dir / "verdicts.jsonl", "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in verdicts))
    report = {
        "dataset": str(dataset_path),
        "corpus": str(corpus_path),
        "corpus_hash": corpus.hash,
        "n_rows": len(rows),
        "n_skipped_lines": len(skipped),
        "n_kept": counts["kept"],
        "rejected": {reason: counts[reason] for reason in REASONS if counts[reason]},
    }
    write_json(out_dir / "verify_report.json", report)
    return report


def gold_row(row: dict, line: int) -> dict:
    """``row`` once it reads as an ESGBench gold line (ValueError naming the bad field otherwise)."""
    row_to_item(row, line)
    return row


GOLD_ROWS = dataclasses.replace(GOLD, read=gold_row)  # the audit reads the rows as written


def check_corpus(dataset_path: str, rows: list[tuple[int, dict]], corpus: Corpus) -> None:
    """Refuse ``corpus`` when it holds none of the reports the rows name: the wrong corpus, named against the
    one the dataset's build recorded (``provenance.json`` beside it) when there is one; a build's other
    corpus that holds some of them is a warning."""
    recorded = built_from(Path(dataset_path))
    other = recorded is not None and recorded.get("corpus_hash") != corpus.hash
    where = (
        f"; {dataset_path} was built from corpus {recorded.get('path')} (corpus_hash "
        f"{str(recorded.get('corpus_hash'))[:16]}, this one's {corpus.hash[:16]})"
        if other
        else ""
    )
    named = {str(row.get("doc_name", "")).strip() for _, row in rows}
    if not named & set(corpus.pages):
        example = sorted(named)[0]
        raise UserError(
            f"wrong corpus: none of the {len(named)} reports {dataset_path} names (e.g. {example!r}) is in "
            f"{corpus.path} (it holds {len(corpus.pages)} document(s)){where}: pass the corpus those reports were ingested "
            "into, corpus=PATH"
        )
    if other:
        log.warning("not the build's corpus%s: its pages are checked in %s", where, corpus.path)


def built_from(dataset: Path) -> dict | None:
    """The corpus (``path``, ``corpus_hash``) that the build of ``dataset`` recorded in the provenance.json
    beside it, or None (no build card, or one of another file)."""
    import json

    card = dataset.parent / "provenance.json"
    try:
        recorded = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or Path(str(recorded.get("dataset"))).name != dataset.name:
        return None
    corpus = recorded.get("corpus")
    return corpus if isinstance(corpus, dict) else None
