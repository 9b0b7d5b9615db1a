"""PDF ingestion speed: pages per second on the two real sample reports, per stage and per chunker.

* parse:   ``esgexp.data.pdf.read_pages`` (pypdf text extraction and cleaning) per PDF.
* chunk:   each chunker on the pages already in memory (both PDFs).
* ingest:  ``esgexp.data.corpus.ingest`` into an empty folder (hash, parse, chunk, write).
* reingest: the same folder again with nothing changed (hashes checked, stored results reused).

Each time is the best of --repeats runs. Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/ingestion.py [--pdfs ../shared/data/samples/pdfs] [--repeats 3]

Writes benchmarks/ingestion.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from esgexp.data.chunking import CharChunker, MarkdownChunker, SentenceChunker, WindowChunker
from esgexp.data.corpus import ingest
from esgexp.data.pdf import read_pages

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PDFS = ROOT.parent / "shared" / "data" / "samples" / "pdfs"
DEFAULT_JSON = ROOT / "benchmarks" / "ingestion.json"
FILES = ("1_1_AG.pdf", "MAX_AUTOMATION_SE.pdf")
CHUNKERS = (CharChunker(), SentenceChunker(), WindowChunker(), MarkdownChunker())


def best_time(repeats: int, work) -> tuple[float, object]:
    """The shortest of ``repeats`` timed calls of ``work()`` and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def row(stage: str, target: str, pages: int, seconds: float, passages: int | None = None) -> dict:
    return {"stage": stage, "target": target, "pages": pages, "seconds": round(seconds, 5),
            "pages_per_s": round(pages / seconds, 1), "passages": passages}


def measure(pdf_dir: Path, repeats: int) -> list[dict]:
    rows, pages = [], {}
    for name in FILES:
        seconds, pages[name] = best_time(repeats, lambda: read_pages(pdf_dir / name))
        rows.append(row("parse", name, len(pages[name]), seconds))
    total = sum(len(p) for p in pages.values())
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for name in FILES:
            (folder / name).symlink_to(pdf_dir / name)
        for chunker in CHUNKERS:
            seconds, passages = best_time(repeats, lambda: [p for name in FILES for p in chunker.chunk(name, pages[name])])
            rows.append(row("chunk", chunker.name, total, seconds, len(passages)))
            fresh = iter(range(repeats))
            seconds, report = best_time(
                repeats, lambda: ingest(folder, Path(scratch) / f"{chunker.name}-{next(fresh)}", chunker, progress=False)
            )
            rows.append(row("ingest", chunker.name, total, seconds, report["n_chunks"]))
            seconds, report = best_time(repeats, lambda: ingest(folder, Path(scratch) / f"{chunker.name}-0", chunker, progress=False))
            assert report["n_parsed"] == 0, "re-ingest parsed a file"
            rows.append(row("reingest", chunker.name, total, seconds, report["n_chunks"]))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| stage | target | pages | ms | pages/s | passages |", "|---|---|---|---|---|---|"]
    for r in rows:
        passages = "" if r["passages"] is None else r["passages"]
        lines.append(f"| {r['stage']} | {r['target']} | {r['pages']} | {r['seconds'] * 1000:,.1f} | {r['pages_per_s']:,.1f} | {passages} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", default=str(DEFAULT_PDFS), help="folder holding the two sample PDFs")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best counts")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    rows = measure(Path(args.pdfs).resolve(), args.repeats)
    print(table(rows))
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "load_avg_1min_at_start": round(load, 2), "python": platform.python_version()},
        "pypdf": version("pypdf"),
        "repeats": args.repeats,
        "rows": rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average at start: {load:.2f}; raw numbers: {args.json}")


if __name__ == "__main__":
    main()
