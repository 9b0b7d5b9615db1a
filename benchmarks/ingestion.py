"""PDF ingestion speed: pages per second on the PDFs of a folder (default: the two short
shared sample reports), per stage and per chunker.

* parse:   ``esgexp.data.pdf.read_pages`` (text extraction by --reader, pdfium or pypdf, and cleaning) per PDF.
* chunk:   each chunker on the pages already in memory (both PDFs).
* ingest:  ``esgexp.data.corpus.ingest`` into an empty folder (hash, parse, chunk, write), --workers files at
  once.
* reingest: the same folder again with nothing changed (hashes checked, stored results reused).
* tables:  ``esgexp.data.tables.TableExtractor.found`` (PDFium's rules and words; pdfplumber's finder for
  drawn grids) per PDF and strategy (``rules``, the default: drawn grids and underlined rows; ``lines``:
  drawn grids, pdfplumber's default; ``text``: columns guessed from word positions), with how many tables
  it finds and how many the default size filter keeps (3+ rows, 2+ columns). The long reports, where the
  time goes and the pdfplumber anchor: benchmarks/tables.py.
* ingest+tables: ``ingest`` with ``tables=TableExtractor()`` (the default chunker) into an empty folder.

Each time is the best of --repeats runs (table extraction: --table-repeats, default 1: it is slow). Run from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/ingestion.py [--pdfs ../shared/data/samples/pdfs] [--repeats 3] [--reader pypdf] [--workers 2]

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
from collections.abc import Iterator
from functools import partial
from importlib.metadata import version
from itertools import repeat
from pathlib import Path

from esgexp.data.chunking import CharChunker, MarkdownChunker, SentenceChunker, WindowChunker
from esgexp.data.corpus import ingest
from esgexp.data.pdf import READERS, read_pages
from esgexp.data.tables import TableExtractor

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT.parent / "shared" / "data" / "samples"
DEFAULT_PDFS = SAMPLES / "pdfs"
DEFAULT_JSON = ROOT / "benchmarks" / "ingestion.json"
PARAGRAPHS = CharChunker(name="paragraphs", min_chars=200, max_chars=800)  # conf/chunker/paragraphs.yaml, the default
CHUNKERS = (PARAGRAPHS, CharChunker(), SentenceChunker(), WindowChunker(), MarkdownChunker())
STRATEGIES = ("rules", "lines", "text")


def add_report_folders(parser: argparse.ArgumentParser) -> None:
    """``--pdfs`` and ``--large``: the shared report PDFs, the short ones and the two long ones."""
    parser.add_argument("--pdfs", default=str(DEFAULT_PDFS), help="a folder of report PDFs")
    parser.add_argument("--large", default=str(SAMPLES / "pdfs-large"), help="a second folder (the long reports)")


def report_files(args: argparse.Namespace) -> list[Path]:
    """The PDFs in ``args.pdfs`` and ``args.large`` (a folder that is absent is passed over), sorted; SystemExit
    naming both folders when there is none."""
    folders = [Path(folder) for folder in (args.pdfs, args.large) if Path(folder).is_dir()]
    files = sorted(path for folder in folders for path in folder.glob("*.pdf"))
    if not files:
        raise SystemExit(f"no PDFs in {args.pdfs} or {args.large}")
    return files


def best_time(repeats: int, work) -> tuple[float, object]:
    """The shortest of ``repeats`` timed calls of ``work()`` and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def row(stage: str, target: str, pages: int, seconds: float, passages: int | None = None, **extra) -> dict:
    return {
        "stage": stage,
        "target": target,
        "pages": pages,
        "seconds": round(seconds, 5),
        "pages_per_s": round(pages / seconds, 1),
        "passages": passages,
        **extra,
    }


def measure_tables(pdf_dir: Path, pages: dict, repeats: int) -> list[dict]:
    """Table extraction per PDF and strategy; ``passages`` is the tables kept, ``found`` all found,
    ``kept`` the (page, rows, columns) of each kept table."""
    rows = []
    for strategy in STRATEGIES:
        extractor = TableExtractor(strategy=strategy)
        for name in pages:
            seconds, found = best_time(repeats, partial(extractor.found, pdf_dir / name))
            kept = extractor.keep(found, name)
            rows.append(
                row(
                    "tables",
                    f"{name} {strategy}",
                    len(pages[name]),
                    seconds,
                    len(kept),
                    found=len(found),
                    kept=[(t.page, len(t.rows) + 1, len(t.header)) for t in kept],
                )
            )
    return rows


def chunk_all(chunker, pages: dict) -> list:
    """Every file's passages from ``pages`` (file name -> page texts)."""
    return [p for name, doc_pages in pages.items() for p in chunker.chunk(name, doc_pages)]


def ingest_into(folder: Path, out_dirs: Iterator[Path], chunker, reader: str, workers: int) -> dict:
    """``ingest`` of ``folder`` into the next folder of ``out_dirs``, without a progress bar."""
    return ingest(folder, next(out_dirs), chunker, progress=False, reader=reader, workers=workers)


def measure(
    pdf_dir: Path, repeats: int, table_repeats: int = 0, reader: str = "pdfium", workers: int = 1
) -> list[dict]:
    """Every stage's rows; the table stages only with ``table_repeats`` >= 1."""
    rows, pages = [], {}
    names = sorted(path.name for path in pdf_dir.glob("*.pdf"))
    for name in names:
        seconds, pages[name] = best_time(repeats, partial(read_pages, pdf_dir / name, reader))
        rows.append(row("parse", name, len(pages[name]), seconds))
    total = sum(len(p) for p in pages.values())
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for name in names:
            (folder / name).symlink_to(pdf_dir / name)
        for chunker in CHUNKERS:
            seconds, passages = best_time(repeats, partial(chunk_all, chunker, pages))
            rows.append(row("chunk", chunker.name, total, seconds, len(passages)))
            fresh = (Path(scratch) / f"{chunker.name}-{n}" for n in range(repeats))
            seconds, report = best_time(repeats, partial(ingest_into, folder, fresh, chunker, reader, workers))
            rows.append(row("ingest", chunker.name, total, seconds, report["n_chunks"]))
            seconds, report = best_time(
                repeats,
                partial(ingest_into, folder, repeat(Path(scratch) / f"{chunker.name}-0"), chunker, reader, workers),
            )
            assert report["n_parsed"] == 0, "re-ingest parsed a file"
            rows.append(row("reingest", chunker.name, total, seconds, report["n_chunks"]))
        if table_repeats < 1:
            return rows
        rows += measure_tables(pdf_dir, pages, table_repeats)
        fresh = iter(range(table_repeats))
        seconds, report = best_time(
            table_repeats,
            lambda: ingest(
                folder,
                Path(scratch) / f"tables-{next(fresh)}",
                PARAGRAPHS,
                progress=False,
                tables=TableExtractor(),
                reader=reader,
                workers=workers,
            ),
        )
        rows.append(
            row("ingest+tables", PARAGRAPHS.name, total, seconds, report["n_chunks"], tables=report["n_tables"])
        )
    return rows


def corpus_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a corpus folder but report.json (which holds the seconds and the workers)."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.name != "report.json"}


def spin(n: int) -> int:
    """Pure CPU work of one process (no memory traffic, no library): the machine's own parallel ceiling."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def ceiling(workers: int, n: int = 3_000_000) -> float:
    """How much faster ``workers`` processes do ``workers`` equal pieces of pure CPU work than one process does
    them in turn: what a perfectly parallel job could gain on this machine right now (a shared or throttled
    machine gives less than ``workers``)."""
    import multiprocessing

    started = time.perf_counter()
    for _ in range(workers):
        spin(n)
    serial = time.perf_counter() - started
    with multiprocessing.get_context().Pool(workers) as pool:
        started = time.perf_counter()
        pool.map(spin, [n] * workers)
        parallel = time.perf_counter() - started
    return serial / parallel


def measure_scaling(files: list[Path], repeats: int, reader: str, workers: int) -> dict:
    """``ingest`` of ``files`` end to end (hash, parse, chunk, write, the worker processes' start) with 1 and
    with ``workers`` workers, alternating which goes first, ``repeats`` rounds with the load average of each
    and the machine's own ceiling (``ceiling``) measured right before; the best of each, their ratio, the best
    ceiling, and whether every corpus file came out byte for byte the same."""
    rounds, best, corpora = [], {1: float("inf"), workers: float("inf")}, {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for path in files:
            (folder / path.name).symlink_to(path)
        for round_ in range(repeats):
            order = (1, workers) if round_ % 2 == 0 else (workers, 1)
            rounds.append({"ceiling": round(ceiling(workers), 3)})
            for n in order:
                out = Path(scratch) / f"corpus-{n}-{round_}"
                load = os.getloadavg()[0]
                started = time.perf_counter()
                report = ingest(folder, out, PARAGRAPHS, progress=False, reader=reader, workers=n)
                seconds = time.perf_counter() - started
                best[n] = min(best[n], seconds)
                corpora.setdefault(n, corpus_bytes(out))
                rounds.append({"workers": n, "seconds": round(seconds, 3), "load_avg_1min": round(load, 2)})
    return {
        "files": [path.name for path in files],
        "pages": report["n_pages"],
        "passages": report["n_chunks"],
        "best_s": {str(n): round(s, 3) for n, s in best.items()},
        "speedup": round(best[1] / best[workers], 3),
        "ceiling": max(r["ceiling"] for r in rounds if "ceiling" in r),
        "identical_corpus": corpora[1] == corpora[workers],
        "rounds": rounds,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| stage | target | pages | ms | pages/s | passages | tables found / kept |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        passages = "" if r["passages"] is None or r["stage"] == "tables" else r["passages"]
        tables = f"{r['found']} / {r['passages']}" if "found" in r else r.get("tables", "")
        lines.append(
            f"| {r['stage']} | {r['target']} | {r['pages']} | {r['seconds'] * 1000:,.1f} | {r['pages_per_s']:,.1f} | "
            f"{passages} | {tables} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_report_folders(parser)  # --pdfs: the stages' PDFs; with --large: the scaling run's
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best counts")
    parser.add_argument("--table-repeats", type=int, default=1, help="runs per table-extraction measurement")
    parser.add_argument("--reader", default="pdfium", choices=READERS, help="PDF page text reader")
    parser.add_argument("--workers", type=int, default=1, help="files an ingest reads at once")
    parser.add_argument(
        "--scaling",
        type=int,
        default=0,
        metavar="N",
        help="also ingest every PDF of --pdfs and --large with 1 and N workers, --repeats rounds alternating",
    )
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    rows = measure(Path(args.pdfs).resolve(), args.repeats, args.table_repeats, args.reader, args.workers)
    print(table(rows))
    scaling = measure_scaling(report_files(args), args.repeats, args.reader, args.scaling) if args.scaling else None
    if scaling:
        print(
            f"\ningest of {len(scaling['files'])} files, {scaling['pages']} pages: 1 worker {scaling['best_s']['1']} s, "
            f"{args.scaling} workers {scaling['best_s'][str(args.scaling)]} s: {scaling['speedup']}x (the machine's ceiling, "
            f"pure CPU work in {args.scaling} processes: {scaling['ceiling']}x); corpus identical: "
            f"{scaling['identical_corpus']}; rounds: {scaling['rounds']}"
        )
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1min_at_start": round(load, 2),
            "python": platform.python_version(),
        },
        "reader": args.reader,
        "workers": args.workers,
        "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
        "pypdf": version("pypdf"),
        "pypdfium2": version("pypdfium2"),
        "pdfplumber": version("pdfplumber"),
        "repeats": args.repeats,
        "rows": rows,
        "scaling": scaling,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average at start: {load:.2f}; raw numbers: {args.json}")


if __name__ == "__main__":
    main()
