"""Table extraction beside page text: where the time goes, and what ``tables=true`` costs an ingest.

For every PDF in --pdfs and --large (the shared sample reports; by default only the two ~300-page ones in
pdfs-large/, ``--all`` adds the short ones), best of --repeats:

* text:    ``esgexp.data.pdf.read_pages`` (PDFium page text and cleaning), the anchor;
* layout:  ``page_layout`` of every page (PDFium page load, its paths read into clipped rules);
* words:   the words of the pages with two or more horizontal rules (the only pages the default ``rules``
  strategy reads further);
* tables:  ``TableExtractor().found`` (all of the above, grids, headers, titles), and the tables kept;
* pdfplumber: ``pdfplumber``'s ``find_tables`` on every page with the previous extractor's settings (lines
  strategy; its rules strategy added explicit borders on top), the anchor the issue measured at 33 s for
  Vonovia (``--no-pdfplumber`` skips it: about a minute a report);
* ingest:  ``esgexp.data.corpus.ingest`` of the long reports into an empty folder, without and with
  ``tables=TableExtractor()`` (default chunker, one worker), and their ratio.

Run from the repository root (the machine's load average is recorded: measure anchors in the same run):

    .venv/bin/python benchmarks/tables.py [--repeats 3] [--all] [--no-pdfplumber]

Writes benchmarks/tables.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from ingestion import PARAGRAPHS, add_report_folders, best_time, report_files

from esgexp.data.corpus import ingest
from esgexp.data.page_layout import open_pdf, page_layout
from esgexp.data.pdf import read_pages
from esgexp.data.tables import TableExtractor

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "tables.json"


def layouts(path: Path) -> tuple[int, list[int]]:
    """Every page's layout read and closed; the page count and the pages with two or more horizontal rules."""
    document = open_pdf(path)
    ruled = []
    try:
        for number in range(1, len(document) + 1):
            layout = page_layout(document, number)
            if sum(edge["orientation"] == "h" for edge in layout.edges) >= 2:
                ruled.append(number)
            layout.close()
        return len(document), ruled
    finally:
        document.close()


def words(path: Path, pages: list[int]) -> int:
    """The words of ``pages`` read (layouts included); how many."""
    document = open_pdf(path)
    count = 0
    try:
        for number in pages:
            layout = page_layout(document, number)
            count += len(layout.words())
            layout.close()
        return count
    finally:
        document.close()


def plumber(path: Path) -> int:
    """pdfplumber's ``find_tables`` on every page (lines strategy, as the previous extractor); tables found."""
    import pdfplumber

    found = 0
    with pdfplumber.open(path, password="") as document:
        for page in document.pages:
            found += len(page.find_tables({"vertical_strategy": "lines", "horizontal_strategy": "lines"}))
            page.close()
    return found


def measure_file(path: Path, repeats: int, with_plumber: bool) -> dict:
    extractor = TableExtractor()
    text_s, pages = best_time(repeats, lambda: read_pages(path))
    layout_s, (n_pages, ruled) = best_time(repeats, lambda: layouts(path))
    words_s, n_words = best_time(repeats, lambda: words(path, ruled))
    tables_s, found = best_time(repeats, lambda: extractor.found(path))
    kept = extractor.keep(found, path.stem)
    row = {
        "file": path.name,
        "pages": n_pages,
        "ruled_pages": len(ruled),
        "pages_with_tables": len({t.page for t in kept}),
        "tables": len(kept),
        "text_s": round(text_s, 3),
        "layout_s": round(layout_s, 3),
        "words_s": round(words_s, 3),
        "words": n_words,
        "tables_s": round(tables_s, 3),
        "tables_pages_per_s": round(n_pages / tables_s, 1),
        "text_pages_per_s": round(len(pages) / text_s, 1),
    }
    if with_plumber:
        seconds, n_found = best_time(1, lambda: plumber(path))
        row |= {"pdfplumber_s": round(seconds, 3), "pdfplumber_found": n_found}
    return row


def measure_ingest(files: list[Path], repeats: int) -> dict:
    """Text-only and ``tables=true`` ingests of ``files`` (best of ``repeats``) and their ratio."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for path in files:
            (folder / path.name).symlink_to(path)
        out = Path(scratch) / "corpus"
        result = {"files": [p.name for p in files]}
        for label, tables in (("text", None), ("tables", TableExtractor())):

            def fresh(tables=tables):
                shutil.rmtree(out, ignore_errors=True)
                return ingest(folder, out, PARAGRAPHS, progress=False, tables=tables, workers=1)

            seconds, report = best_time(repeats, fresh)
            result[label] = {"seconds": round(seconds, 3), "pages": report["n_pages"], "tables": report["n_tables"]}
        result["ratio"] = round(result["tables"]["seconds"] / result["text"]["seconds"], 2)
    return result


def table(rows: list[dict], ingests: dict) -> str:
    plumber_col = any("pdfplumber_s" in r for r in rows)
    lines = [
        "| file | pages | ruled pages | pages with tables / tables | text s | layout s | ruled pages read s | tables s "
        "| tables / text" + (" | pdfplumber find_tables s |" if plumber_col else " |"),
        "|---|---:|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if plumber_col else ""),
    ]
    for r in rows:
        line = (
            f"| {r['file']} | {r['pages']} | {r['ruled_pages']} | {r['pages_with_tables']} / {r['tables']} | "
            f"{r['text_s']} | {r['layout_s']} | {r['words_s']} | {r['tables_s']} | {r['tables_s'] / r['text_s']:.1f}x |"
        )
        lines.append(line + (f" {r.get('pdfplumber_s', '')} |" if plumber_col else ""))
    t, w = ingests["text"], ingests["tables"]
    lines += [
        "",
        "| ingest (one worker, default chunker) | pages | s | pages/s | tables |",
        "|---|---:|---:|---:|---:|",
        f"| text only | {t['pages']} | {t['seconds']} | {t['pages'] / t['seconds']:.1f} | |",
        f"| tables=true | {w['pages']} | {w['seconds']} | {w['pages'] / w['seconds']:.1f} | {w['tables']} |",
        f"| ratio | | **{ingests['ratio']}x** | | |",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_report_folders(parser)
    parser.add_argument("--all", action="store_true", help="the short reports in --pdfs too (default: --large only)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best counts")
    parser.add_argument("--no-pdfplumber", action="store_true", help="skip the pdfplumber anchor (slow)")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    files = report_files(args) if args.all else sorted(Path(args.large).glob("*.pdf"))
    if not files:
        raise SystemExit(f"no PDFs in {args.large}")
    load = os.getloadavg()
    rows = [measure_file(path, args.repeats, not args.no_pdfplumber) for path in files]
    large = [path for path in files if path.parent == Path(args.large)] or files
    ingests = measure_ingest(large, args.repeats)
    print(table(rows, ingests))
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "load_avg_at_start": [round(v, 2) for v in load],
            "load_avg_at_end": [round(v, 2) for v in os.getloadavg()],
            "python": platform.python_version(),
        },
        "pypdfium2": version("pypdfium2"),
        "pdfplumber": version("pdfplumber"),
        "repeats": args.repeats,
        "files": rows,
        "ingest": ingests,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average at start: {load[0]:.2f}; raw numbers: {args.json}")


if __name__ == "__main__":
    main()
