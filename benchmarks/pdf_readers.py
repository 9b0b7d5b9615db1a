"""PDF page text by pdfium against pypdf: speed, text kept, and whole ingests with 1 and 2 worker processes.

For every PDF in --pdfs and --large (the shared sample reports; the two ~300-page ones in pdfs-large/):

* parse: ``esgexp.data.pdf.read_pages(path, reader)`` (extraction and cleaning), pages/s, best of --repeats;
* text: characters and words per page of each reader, the share of pypdf's words pdfium also has on the
  same page (multiset overlap), and the share of pypdf's sentences (40+ characters) found verbatim in
  pdfium's page text and the other way round: what an evidence check against the page map sees;
* hyphens: line-end hyphenations each reader's text keeps joined (``sustain-ability`` -> one word);
* ingest: ``esgexp.data.corpus.ingest`` of all the PDFs into an empty folder (hash, parse, chunk, write)
  with each reader and 1 and 2 workers.

Run from the repository root on an otherwise idle machine (the load average is recorded):

    .venv/bin/python benchmarks/pdf_readers.py [--repeats 3]

Writes benchmarks/pdf_readers.json (--json PATH). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from ingestion import (  # benchmarks/ingestion.py: the default chunker, best of N runs
    PARAGRAPHS,
    add_report_folders,
    best_time,
    report_files,
)

from esgexp.data.corpus import ingest
from esgexp.data.pdf import READERS, read_pages

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "pdf_readers.json"
WORD = re.compile(r"\w+")
SENTENCE = re.compile(r"[^.!?]{40,}[.!?]")


def overlap(ours: list[str], theirs: list[str]) -> float:
    """The share of ``theirs``'s words (as a multiset, page by page) that ``ours`` has too."""
    kept = total = 0
    for a, b in zip(ours, theirs):
        words_a, words_b = Counter(WORD.findall(a.lower())), Counter(WORD.findall(b.lower()))
        kept += sum((words_a & words_b).values())
        total += sum(words_b.values())
    return kept / total if total else 1.0


def verbatim(ours: list[str], theirs: list[str]) -> float:
    """The share of ``theirs``'s sentences of 40+ characters found verbatim in ``ours`` on the same page."""
    found = total = 0
    for a, b in zip(ours, theirs):
        for sentence in SENTENCE.findall(b):
            total += 1
            found += sentence.strip() in a
    return found / total if total else 1.0


def joined_hyphens(texts: list[str]) -> int:
    """Words a line-end hyphenation was joined into (``sustainability`` from ``sustain-`` + ``ability``):
    counted as lowercase words of 10+ letters, the likely joins."""
    return sum(len(re.findall(r"\b[a-z]{10,}\b", text)) for text in texts)


def measure_file(path: Path, repeats: int) -> dict:
    texts, row = {}, {"file": path.name}
    for reader in READERS:
        seconds, pages = best_time(repeats, lambda reader=reader: read_pages(path, reader))
        texts[reader] = [page.text for page in pages]
        row[reader] = {
            "pages": len(pages),
            "seconds": round(seconds, 4),
            "pages_per_s": round(len(pages) / seconds, 1),
            "chars_per_page": round(sum(map(len, texts[reader])) / len(pages), 1),
            "words_per_page": round(sum(len(WORD.findall(t)) for t in texts[reader]) / len(pages), 1),
            "long_words": joined_hyphens(texts[reader]),
        }
    row["speedup"] = round(row["pypdf"]["seconds"] / row["pdfium"]["seconds"], 1)
    row["pdfium_has_pypdf_words"] = round(overlap(texts["pdfium"], texts["pypdf"]), 4)
    row["pypdf_has_pdfium_words"] = round(overlap(texts["pypdf"], texts["pdfium"]), 4)
    row["pypdf_sentences_verbatim_in_pdfium"] = round(verbatim(texts["pdfium"], texts["pypdf"]), 4)
    row["pdfium_sentences_verbatim_in_pypdf"] = round(verbatim(texts["pypdf"], texts["pdfium"]), 4)
    return row


def measure_ingest(files: list[Path], repeats: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "pdfs"
        folder.mkdir()
        for path in files:
            (folder / path.name).symlink_to(path)
        for reader in READERS:
            for workers in (1, 2):
                out = Path(scratch) / "corpus"

                def fresh(reader=reader, workers=workers, out=out):
                    shutil.rmtree(out, ignore_errors=True)
                    return ingest(folder, out, PARAGRAPHS, progress=False, reader=reader, workers=workers)

                seconds, report = best_time(repeats, fresh)
                rows.append(
                    {
                        "reader": reader,
                        "workers": workers,
                        "pages": report["n_pages"],
                        "seconds": round(seconds, 3),
                        "pages_per_s": round(report["n_pages"] / seconds, 1),
                        "passages": report["n_chunks"],
                    }
                )
    return rows


def tables(files: list[dict], ingests: list[dict]) -> str:
    lines = [
        "| file | pages | pypdf pages/s | pdfium pages/s | × | chars/page pypdf / pdfium | words/page pypdf / pdfium "
        "| pypdf words in pdfium | pdfium words in pypdf | sentences verbatim pypdf→pdfium / pdfium→pypdf |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---|",
    ]
    for r in files:
        a, b = r["pypdf"], r["pdfium"]
        lines.append(
            f"| {r['file']} | {a['pages']} | {a['pages_per_s']:,} | {b['pages_per_s']:,} | {r['speedup']} | "
            f"{a['chars_per_page']:,} / {b['chars_per_page']:,} | {a['words_per_page']} / {b['words_per_page']} | "
            f"{r['pdfium_has_pypdf_words']:.1%} | {r['pypdf_has_pdfium_words']:.1%} | "
            f"{r['pypdf_sentences_verbatim_in_pdfium']:.1%} / {r['pdfium_sentences_verbatim_in_pypdf']:.1%} |"
        )
    lines += [
        "",
        "| ingest (hash, parse, chunk, write) | workers | pages | s | pages/s | passages |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in ingests:
        lines.append(
            f"| {r['reader']} | {r['workers']} | {r['pages']} | {r['seconds']:,} | {r['pages_per_s']:,} | {r['passages']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_report_folders(parser)
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best counts")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the numbers")
    args = parser.parse_args(argv)
    files = report_files(args)
    load = os.getloadavg()[0]
    file_rows = [measure_file(path, args.repeats) for path in files]
    ingest_rows = measure_ingest(files, args.repeats)
    print(tables(file_rows, ingest_rows))
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "load_avg_1min_at_start": round(load, 2),
            "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
        },
        "pypdf": version("pypdf"),
        "pypdfium2": version("pypdfium2"),
        "repeats": args.repeats,
        "files": file_rows,
        "ingest": ingest_rows,
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average: {load:.2f} at the start; raw numbers: {args.json}")


if __name__ == "__main__":
    main()
