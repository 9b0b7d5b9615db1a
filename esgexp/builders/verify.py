"""The ESGBench verifier: a question-answer pair is kept only when every evidence text occurs on its
cited 0-based page of the report, and, for a numeric answer, when the answer's number (with its unit)
is in the evidence. Builders call :func:`verify_pair`; ``python -m esgexp.builders.verify
dataset.path=FILE corpus=PATH`` audits any ESGBench-format file against an ingested corpus.

Texts are compared after the ingestion's cleaning (``data/pdf.clean_text``: NFKC, hyphen breaks,
invisible characters) with every run of whitespace made one space, so line breaks never matter.
Numbers are read with ``eval/numbers.py``: ``225.7 ktCO2e`` in the answer matches ``225,700 tCO2e``
in the evidence; only whole numbers of the evidence count (``3 t`` is not in ``1.843,3 t``); a bare
number in a table row takes the unit of a label before it (``MWh 280,903``, ``(in %) 5.9``), never of
one after it, which belongs to the next cell (``3,167 Employee turnover rate (in %)``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from esgexp.data.corpus import Corpus
from esgexp.data.pdf import clean_text
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
    """Audit the file at ``dataset_path`` against the corpus folder; writes verdicts.jsonl and verify_report.json."""
    import json

    from esgexp.data.esgbench import read_jsonl
    from esgexp.outputs import write_atomic, write_json

    skipped: list[str] = []
    rows = list(read_jsonl(dataset_path, skipped))
    corpus = Corpus.load(corpus_path)
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


def cli() -> None:
    """``esgexp-verify`` and ``python -m esgexp.builders.verify``."""
    import hydra
    from omegaconf import DictConfig

    from esgexp.config import CONF_DIR
    from esgexp.errors import check_command_line, exit_on_user_error, run_command

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="verify")
    def main(cfg: DictConfig) -> None:
        with exit_on_user_error(log):
            check_command_line(cfg, log)
            out_dir = Path(cfg.out).resolve()
            report = main_audit(cfg.dataset.path, cfg.corpus, out_dir)
        rejected = ", ".join(f"{reason} {n}" for reason, n in report["rejected"].items()) or "none"
        print(f"{report['n_kept']} of {report['n_rows']} pairs verified; rejected: {rejected}")
        print(f"report: {out_dir / 'verify_report.json'}")

    run_command(main, "verify")


if __name__ == "__main__":
    cli()
