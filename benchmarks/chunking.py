"""Passage size against ClimRetrieve's expert-annotated paragraphs: which chunker settings cut reports into
passages the size of the paragraphs experts cite.

For each candidate chunker, over the ClimRetrieve report PDFs that have annotations:

* passages, passages per page, passage length (characters: p10 / median / p90), beside the same
  figures for the annotated source paragraphs (the ``Context`` column: the paragraph around an expert's
  cited text);
* alignment: for each annotated paragraph found in the report text, the single passage sharing most of
  its word trigrams; ``cover`` is the share of the paragraph's trigrams in that passage (1 = not split),
  ``precision`` the share of the passage's trigrams that are the paragraph's (1 = nothing else around
  it), ``f1`` their harmonic mean;
* retrieval: the queries ``annotations_to_queries`` builds from the annotations (one per report and
  question, graded passages matched as the retrieval task matches them), their recall@15 for 15
  random passages of the report (exact expectation: min(15, n) / n) and for BM25 (bm25s, Lucene
  scoring, scoped to the report), and the relevant passages per query.

The ClimRetrieve reports and the full annotation workbook are in the ClimRetrieve repository
(``Reports/*.pdf``, ``Expert-Annotated Relevant Sources Dataset/ClimRetrieve_base.xlsx``); the sample
CSV in ../shared holds annotations of reports that are not stored there. Run from the repository root:

    .venv/bin/python benchmarks/chunking.py --reports DIR --annotations ClimRetrieve_base.xlsx

Passages per page on other reports (e.g. ../shared/data/samples/pdfs) come with ``--pages-only DIR``.
Writes benchmarks/chunking.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
from pathlib import Path

from esgexp.data.chunking import CharChunker, Chunker
from esgexp.data.climretrieve import annotations_to_queries, doc_id_for, load_base_annotations, normalise, read_rows
from esgexp.data.pdf import read_pages

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "chunking.json"
SHARED_PDFS = ROOT.parent / "shared" / "data" / "samples" / "pdfs"
K = 15
BUDGET = 6000  # characters of retrieved text a prompt can hold (about 1,500 tokens)
SIZES = ((2000, 300), (1500, 300), (1200, 300), (1000, 200), (700, 200), (600, 150))  # (max_chars, min_chars)


def candidates() -> list[Chunker]:
    """The configured chunkers (conf/chunker/*.yaml but markdown, which needs headings) and more sizes of ``chars``."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    configured = [instantiate(OmegaConf.load(path)) for path in sorted((ROOT / "conf" / "chunker").glob("*.yaml"))]
    sweep = [CharChunker(name=f"chars-{high}", min_chars=low, max_chars=high) for high, low in SIZES]
    return [c for c in configured if c.name != "markdown"] + sweep


WORD = re.compile(r"\w+")


def trigrams(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(normalise(text))
    return set(zip(words, words[1:], words[2:]))


def quantiles(values: list[int]) -> dict:
    if not values:
        return {"n": 0}
    cuts = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return {"n": len(values), "p10": round(cuts[0]), "median": round(statistics.median(values)), "p90": round(cuts[-1])}


def annotated_paragraphs(path: Path, docs: set[str] | None) -> list[dict]:
    """The distinct annotated text paragraphs (``Context``; ``Source From`` text) per document."""
    seen, out = set(), []
    for _, row in read_rows(path, ("Document", "Context", "Source From"), "ClimRetrieve base"):
        doc, context = doc_id_for(row["Document"] or ""), (row.get("Context") or "").strip()
        if (row.get("Source From") or "").strip().lower() != "text" or not context or (doc, context) in seen:
            continue
        if docs is None or doc in docs:
            seen.add((doc, context))
            out.append({"doc": doc, "text": context})
    return out


def alignment(paragraphs: list[dict], passages: list, min_found: float = 0.5) -> dict:
    """Best single passage per annotated paragraph (see the module docstring); a paragraph whose trigrams
    are less than ``min_found`` in the whole report text (extraction differs, a figure) is not counted."""
    by_doc: dict[str, list[set]] = {}
    for passage in passages:
        by_doc.setdefault(passage.doc_id, []).append(trigrams(passage.text))
    covers, precisions, found = [], [], 0
    for paragraph in paragraphs:
        grams = trigrams(paragraph["text"])
        doc = by_doc.get(paragraph["doc"], [])
        if not grams or not doc or len(grams & set().union(*doc)) / len(grams) < min_found:
            continue
        found += 1
        best = max(doc, key=lambda passage: len(grams & passage))
        shared = len(grams & best)
        covers.append(shared / len(grams))
        precisions.append(shared / len(best) if best else 0.0)
    cover, precision = statistics.fmean(covers), statistics.fmean(precisions)
    return {
        "paragraphs": len(paragraphs),
        "found": found,
        "cover": round(cover, 3),
        "precision": round(precision, 3),
        "f1": round(2 * cover * precision / (cover + precision), 3),
    }


def retrieval(annotations, passages: list) -> dict:
    """Random and BM25 recall@K of the queries graded on these passages."""
    from esgexp.retrieval.bm25 import BM25Retriever

    dataset = annotations_to_queries(annotations, passages)
    queries = dataset.queries
    sizes = {}
    for passage in passages:
        sizes[passage.doc_id] = sizes.get(passage.doc_id, 0) + 1
    random_recall = statistics.fmean(min(K, sizes[q.doc_scope]) / sizes[q.doc_scope] for q in queries)
    retriever = BM25Retriever()
    retriever.index(passages)
    ranked = retriever.search([q.text for q in queries], max(sizes.values()), [q.doc_scope for q in queries])
    length = {passage.id: len(passage.text) for passage in passages}

    def recall(query, ids) -> float:
        return len(set(ids) & set(query.relevance)) / len(query.relevance)

    def within_budget(hits) -> list[str]:
        ids, used = [], 0
        for hit in hits:
            used += length[hit.passage_id]
            if used > BUDGET:
                break
            ids.append(hit.passage_id)
        return ids

    at_k = statistics.fmean(recall(q, [h.passage_id for h in hits[:K]]) for q, hits in zip(queries, ranked))
    budget = statistics.fmean(recall(q, within_budget(hits)) for q, hits in zip(queries, ranked))
    return {
        "queries": len(queries),
        "relevant_per_query": round(statistics.fmean(len(q.relevance) for q in queries), 2),
        "random_recall": round(random_recall, 3),
        "bm25_recall": round(at_k, 3),
        "bm25_recall_budget": round(budget, 3),
    }


def measure(reports: Path, annotations_path: Path) -> dict:
    pdfs = sorted(reports.glob("*.pdf"))
    loaded = load_base_annotations(annotations_path).items
    annotated = {doc_id_for(a.document) for a in loaded}
    pages = {path.stem: read_pages(path) for path in pdfs if path.stem in annotated}
    if not pages:
        raise SystemExit(f"no PDF in {reports} has an annotation in {annotations_path}")
    annotations = [a for a in loaded if doc_id_for(a.document) in pages]
    paragraphs = annotated_paragraphs(annotations_path, set(pages))
    n_pages = sum(len(p) for p in pages.values())
    rows = []
    for chunker in candidates():
        passages = [passage for doc, doc_pages in pages.items() for passage in chunker.chunk(doc, doc_pages)]
        rows.append(
            {
                "chunker": chunker.name,
                "config": chunker.config(),
                "passages": len(passages),
                "per_page": round(len(passages) / n_pages, 2),
                "length": quantiles([len(p.text) for p in passages]),
                "alignment": alignment(paragraphs, passages),
                "retrieval": retrieval(annotations, passages),
            }
        )
    return {
        "reports": {doc: len(p) for doc, p in pages.items()},
        "pages": n_pages,
        "annotations": len(annotations),
        "paragraph_length": quantiles([len(p["text"]) for p in paragraphs]),
        "paragraph_length_all_reports": quantiles(
            [len(p["text"]) for p in annotated_paragraphs(annotations_path, None)]
        ),
        "rows": rows,
    }


def per_page(folder: Path) -> list[dict]:
    """Passages per page of every candidate on the PDFs of another folder (no annotations needed)."""
    pages = {path.stem: read_pages(path) for path in sorted(folder.glob("*.pdf"))}
    n_pages = sum(len(p) for p in pages.values())
    out = []
    for chunker in candidates():
        passages = [passage for doc, doc_pages in pages.items() for passage in chunker.chunk(doc, doc_pages)]
        out.append(
            {
                "chunker": chunker.name,
                "pages": n_pages,
                "passages": len(passages),
                "per_page": round(len(passages) / n_pages, 2),
                "length": quantiles([len(p.text) for p in passages]),
            }
        )
    return out


def table(result: dict) -> str:
    lines = [
        f"{len(result['reports'])} reports, {result['pages']} pages, {result['annotations']} annotations "
        f"({result['rows'][0]['retrieval']['queries']} queries); {result['rows'][0]['alignment']['found']} of "
        f"{result['rows'][0]['alignment']['paragraphs']} annotated text paragraphs found in the PDF text, their "
        f"length (chars) p10/median/p90: {_spread(result['paragraph_length'])} "
        f"(all reports: {_spread(result['paragraph_length_all_reports'])})",
        "",
        f"| chunker | passages | per page | chars p10/med/p90 | cover | precision | f1 | rel./query | random R@{K} | BM25 R@{K} | BM25 R@{BUDGET} chars |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        a, q = r["alignment"], r["retrieval"]
        lines.append(
            f"| {r['chunker']} | {r['passages']} | {r['per_page']} | {_spread(r['length'])} | {a['cover']} | "
            f"{a['precision']} | {a['f1']} | {q['relevant_per_query']} | {q['random_recall']} | {q['bm25_recall']} | {q['bm25_recall_budget']} |"
        )
    return "\n".join(lines)


def _spread(q: dict) -> str:
    return f"{q['p10']}/{q['median']}/{q['p90']}" if q.get("n") else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", required=True, help="folder of ClimRetrieve report PDFs")
    parser.add_argument("--annotations", required=True, help="ClimRetrieve_base.xlsx (or a CSV of it)")
    parser.add_argument("--pages-only", default=str(SHARED_PDFS), help="other PDFs: passages per page only")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    result = measure(Path(args.reports), Path(args.annotations))
    print(table(result))
    other = Path(args.pages_only)
    if other.is_dir():
        result["other_reports"] = {"folder": str(other), "rows": per_page(other)}
        print(f"\npassages per page on {other}:")
        print(
            "\n".join(
                f"  {r['chunker']}: {r['passages']} passages / {r['pages']} pages = {r['per_page']} "
                f"(chars {_spread(r['length'])})"
                for r in result["other_reports"]["rows"]
            )
        )
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        **result,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nraw numbers: {args.json}")


if __name__ == "__main__":
    main()
