"""ESGBench-style evidence found verbatim by the verifier in corpora of each PDF reader (pypdf, pdfium).

ESGBench's evidence texts were copied from pdfplumber's page text (its ``evidence_page_num`` counts pages as
pdfplumber does) and cut at 400 characters; the shared samples hold no gold for the shared reports, so this
makes such evidence from them: for every --step-th page of every PDF in --pdfs and --large,

* line: each line of pdfplumber's ``extract_text()`` with 3+ words and 20+ characters (a KPI row, a
  sentence piece: most ESGBench evidence is one line);
* passage: each run of 3 such consecutive lines, joined by a space, cut at 400 characters.

Each reader's corpus (``esgexp.data.corpus.ingest``, the default chunker) is then checked as the builders
check a pair (``esgexp.builders.verify.PageTexts.pages_with`` on the cited 0-based page: the ingestion's
cleaning on both sides, whitespace runs one space). Printed: the share found per file, kind and reader.

    .venv/bin/python benchmarks/evidence_verbatim.py [--step 1]

Writes benchmarks/evidence_verbatim.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from ingestion import PARAGRAPHS, add_report_folders, report_files  # benchmarks/ingestion.py: the default chunker

from esgexp.builders.verify import PageTexts
from esgexp.data.corpus import Corpus, document_id, ingest
from esgexp.data.pdf import READERS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "evidence_verbatim.json"
KINDS = ("line", "passage")


def evidence(path: Path, step: int) -> list[tuple[str, int, str]]:
    """(kind, 0-based page, text) of one PDF's pages read by pdfplumber."""
    import pdfplumber

    found = []
    with pdfplumber.open(path, password="") as document:
        for index, page in enumerate(document.pages):
            if index % step == 0:
                lines = [line for line in (page.extract_text() or "").split("\n") if usable(line)]
                found += [("line", index, line) for line in lines]
                found += [("passage", index, " ".join(lines[i : i + 3])[:400]) for i in range(0, len(lines) - 2, 3)]
            page.close()
    return found


def usable(line: str) -> bool:
    return len(line.split()) >= 3 and len(line.strip()) >= 20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_report_folders(parser)
    parser.add_argument("--step", type=int, default=1, help="evidence from every STEP-th page")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    files = report_files(args)
    started, load = time.perf_counter(), os.getloadavg()[0]
    items = {path.name: evidence(path, args.step) for path in files}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for path in files:
            (folder / path.name).symlink_to(path)
        pages = {}
        for reader in READERS:
            ingest(folder, Path(scratch) / reader, PARAGRAPHS, progress=False, reader=reader, workers=2)
            pages[reader] = PageTexts(Corpus.load(Path(scratch) / reader))
    for name, found in items.items():
        doc = document_id(name)
        for kind in KINDS:
            texts = [(page, text) for k, page, text in found if k == kind]
            row = {"file": name, "kind": kind, "n": len(texts)}
            for reader in READERS:
                hits = sum(1 for page, text in texts if pages[reader].pages_with(doc, text, [page]))
                row[reader] = round(hits / max(len(texts), 1), 4)
            rows.append(row)
    print("| file | kind | evidence texts | found by the verifier, pypdf corpus | pdfium corpus |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['file']} | {r['kind']} | {r['n']:,} | {r['pypdf']:.1%} | {r['pdfium']:.1%} |")
    result = {
        "date": datetime.date.today().isoformat(),
        "load_avg_1min_at_start": round(load, 2),
        "seconds": round(time.perf_counter() - started, 1),
        "versions": {name: version(name) for name in ("pdfplumber", "pypdf", "pypdfium2")},
        "step": args.step,
        "rows": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average {load:.2f} at the start; raw numbers: {args.json}")


if __name__ == "__main__":
    main()
