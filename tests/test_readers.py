"""PDF page text through pdfium (the default) or pypdf, and many files read at once in processes: the same
corpus whatever the number of workers, every unreadable file named, pages without a text layer counted."""

import json
import multiprocessing
import random

import pytest
from cli import run_cli
from pdf_factory import encrypted, pdf_bytes, write_pdf

from esgexp.data import pdf
from esgexp.data.chunking import CharChunker
from esgexp.data.corpus import ingest

LINES = [["Scope 1 emissions fell by 12% in 2023.", "The sustain-", "ability report covers water."], ["Page two."]]


@pytest.fixture
def folder(tmp_path):
    """Four readable PDFs (one with a blank page), a damaged one and one that needs a password."""
    docs = tmp_path / "docs"
    for n in range(4):
        write_pdf(docs / f"report{n}.pdf", [[f"Report {n} says scope {n} fell."], *LINES[1:]])
    write_pdf(docs / "mixed.pdf", [LINES[0], [], ["After the scanned page."]])
    (docs / "damaged.pdf").write_bytes(random.Random(3).randbytes(3000))
    (docs / "locked.pdf").write_bytes(encrypted(pdf_bytes([["Secret."]]), "hunter2"))
    return docs


def test_pdfium_and_pypdf_give_the_same_cleaned_page_text(tmp_path):
    path = write_pdf(tmp_path / "a.pdf", LINES)
    by_pdfium, by_pypdf = pdf.read_pages(path, "pdfium"), pdf.read_pages(path, "pypdf")
    assert [p.text for p in by_pdfium] == [p.text for p in by_pypdf]
    assert by_pdfium[0].text == "Scope 1 emissions fell by 12% in 2023. The sustainability report covers water."


def test_pdfium_line_end_hyphen_markers_of_old_and_new_builds_read_as_a_hyphen(monkeypatch, tmp_path):
    """PDFium writes U+FFFE for a hyphen it found at a line end (older builds U+0002 and a line break);
    both are a line-end hyphen for the cleaning, so a broken word is joined and a compound keeps its hyphen."""
    import pypdfium2

    raw = ["Our sustain\ufffeability and Non\ufffeFinancial", "expla\x02\r\nnations of CO2\r\ne"]
    pages = iter(raw)
    monkeypatch.setattr(pypdfium2.PdfTextPage, "get_text_range", lambda self, *a, **k: next(pages))
    texts = [page.text for page in pdf.read_pages(write_pdf(tmp_path / "a.pdf", [["x"], ["y"]]), "pdfium")]
    assert texts == ["Our sustainability and Non-Financial", "explanations of CO2e"]


def test_both_readers_open_an_empty_password_and_name_a_real_one(tmp_path):
    opened = tmp_path / "open.pdf"
    opened.write_bytes(encrypted(pdf_bytes([["Opened with the empty password."]]), ""))
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypted(pdf_bytes([["Secret."]]), "hunter2"))
    for reader in pdf.READERS:
        assert pdf.read_pages(opened, reader)[0].text == "Opened with the empty password."
        with pytest.raises(pdf.UnreadableDocument, match="needs a password"):
            pdf.read_pages(locked, reader)


def test_two_workers_write_the_corpus_one_worker_writes(folder, tmp_path):
    one = ingest(folder, tmp_path / "one", CharChunker(), progress=False, workers=1)
    two = ingest(folder, tmp_path / "two", CharChunker(), progress=False, workers=2)
    for name in ("pages.jsonl", "passages.jsonl", "manifest.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    assert one["corpus_hash"] == two["corpus_hash"] and (one["workers"], two["workers"]) == (1, 2)
    assert [s["file"] for s in two["skipped"]] == ["damaged.pdf", "locked.pdf"]  # the others were read
    assert two["n_docs"] == 5 and two["pages_without_text"] == {"mixed.pdf": 1}
    assert two["reader"].startswith("pdfium ")


def test_ctrl_c_during_a_parallel_ingest_leaves_the_stored_corpus_as_it_was(folder, tmp_path, monkeypatch):
    import multiprocessing

    import tqdm

    out = tmp_path / "corpus"
    ingest(folder, out, CharChunker(), progress=False, workers=1)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    for n in range(3):  # three changed files: read again, two at a time
        write_pdf(folder / f"report{n}.pdf", [[f"A new report {n}."]])

    def interrupt(self, n=1):
        raise KeyboardInterrupt

    monkeypatch.setattr(tqdm.tqdm, "update", interrupt)  # Ctrl-C once the first file is read
    with pytest.raises(KeyboardInterrupt):
        ingest(folder, out, CharChunker(), progress=False, workers=2)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    assert not multiprocessing.active_children()  # the file still being read was stopped


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the crash is patched in before the fork")
def test_a_worker_that_crashes_on_a_file_skips_that_file_only(folder, tmp_path, monkeypatch):
    """A process killed while reading one file (a PDF library segfaulting, the OOM killer) costs that file,
    named, not the ingest."""
    import os
    import signal

    read = pdf.read_pages

    def crash_on_report2(path, reader="pdfium"):
        if path.name == "report2.pdf":
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does; a segfault: SIGSEGV
        return read(path, reader)

    monkeypatch.setattr(pdf, "read_pages", crash_on_report2)
    report = ingest(folder, tmp_path / "corpus", CharChunker(), progress=False, workers=2)
    assert {s["file"]: s["reason"] for s in report["skipped"]}[
        "report2.pdf"
    ] == "reading it crashed (killed by SIGKILL)"
    assert report["n_docs"] == 4 and len(report["skipped"]) == 3
    monkeypatch.setattr(pdf, "read_pages", read)  # it may have been out of memory: the next ingest tries again
    again = ingest(folder, tmp_path / "corpus", CharChunker(), progress=False, workers=2)
    assert (again["n_docs"], again["n_parsed"], again["n_reused"]) == (5, 1, 6)


def test_a_changed_reader_reads_every_document_again(folder, tmp_path):
    out = tmp_path / "corpus"
    first = ingest(folder, out, CharChunker(), progress=False)
    again = ingest(folder, out, CharChunker(), progress=False)
    other = ingest(folder, out, CharChunker(), progress=False, reader="pypdf")
    assert (first["n_parsed"], again["n_parsed"], again["n_reused"], other["n_parsed"]) == (7, 0, 7, 7)
    assert json.loads((out / "manifest.json").read_text())["reader"].startswith("pypdf ")


def test_the_command_names_pages_without_text_and_refuses_bad_settings(folder, tmp_path, clean_env):
    args = [f"corpus.pdf_dir={folder}", "corpus.name=c", f"paths.root_dir={tmp_path}", "progress=false"]
    done = run_cli("esgexp.ingest", *args, "workers=2", cwd=tmp_path, env=clean_env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pages without a text layer (scanned? OCR them first; esgexp does not): mixed.pdf (1)" in done.stdout
    bad = run_cli("esgexp.ingest", *args, "workers=0", "corpus.reader=fitz", cwd=tmp_path, env=clean_env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: corpus.reader must be one of pdfium, pypdf, got 'fitz'; workers must be an integer >= 1 or null, got 0"
    )


def test_on_the_shared_reports_pdfium_keeps_the_words_pypdf_reads(shared_samples):
    """Real sustainability reports: per report at least 99% of pypdf's words on the same pages, and the
    line-end hyphen of a compound (``Non-``/``Financial``) kept as pypdf keeps it."""
    from collections import Counter

    for name in ("MAX_AUTOMATION_SE.pdf", "1_1_AG.pdf"):
        path = shared_samples / "pdfs" / name
        by_pdfium, by_pypdf = pdf.read_pages(path, "pdfium"), pdf.read_pages(path, "pypdf")
        assert len(by_pdfium) == len(by_pypdf)
        kept = total = 0
        for a, b in zip(by_pdfium, by_pypdf):
            words_a, words_b = Counter(a.text.lower().split()), Counter(b.text.lower().split())
            kept, total = kept + sum((words_a & words_b).values()), total + sum(words_b.values())
        assert kept / total >= 0.99, (name, kept / total)
    max_text = " ".join(page.text for page in pdf.read_pages(shared_samples / "pdfs" / "MAX_AUTOMATION_SE.pdf"))
    assert "Non-Financial Statement" in max_text and "Non\ufffe" not in max_text


def test_a_long_pdf_read_in_page_ranges_by_two_workers_gives_the_corpus_one_worker_gives(tmp_path):
    """Page ranges of one PDF read in parallel: every corpus file byte for byte as one worker writes it, also
    where a passage runs across the end of a range, where a word broken at a line end on a late page is a
    compound written whole on page 1 (kept hyphenated, as a reading of the whole file keeps it) and where the
    tables are read as a unit of their own."""
    from pdf_factory import write_pdf as write

    pages = [["Employee well-being is a priority; see the table."]]
    pages += [[f"Page {n} reports scope {n} emissions and sustain-", "ability targets."] for n in range(2, 7)]
    pages += [["Our programmes for employee well-", "being and safety.", "The sustain-", "ability report."]]
    folder = tmp_path / "docs"
    grid = [["Metric", "2023", "2024"], ["Scope 1", "10", "9"], ["Scope 2", "4", "3"]]
    write(folder / "long.pdf", pages, [[grid]] + [[] for _ in pages[1:]])
    write(folder / "short.pdf", [["A short report."]])
    from esgexp.data.tables import TableExtractor

    one = ingest(folder, tmp_path / "one", CharChunker(), progress=False, workers=1, tables=TableExtractor())
    two = ingest(
        folder, tmp_path / "two", CharChunker(), progress=False, workers=2, pages_per_unit=2, tables=TableExtractor()
    )
    for name in ("pages.jsonl", "passages.jsonl", "tables.jsonl", "manifest.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    assert one["corpus_hash"] == two["corpus_hash"] and one["n_tables"] == 1
    last = json.loads((tmp_path / "two" / "pages.jsonl").read_text().splitlines()[6])
    assert "employee well-being and safety" in last["text"] and "sustainability report" in last["text"]
    passages = [json.loads(line) for line in (tmp_path / "two" / "passages.jsonl").read_text().splitlines()]
    assert any(p["doc_id"] == "long" and p["page_start"] <= 2 < p["page_end"] for p in passages)  # across ranges


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the count is patched in before the fork")
def test_two_workers_chunk_whole_files_in_the_workers_and_start_with_the_split_pdf(tmp_path, monkeypatch):
    """The ingest process chunks only what it joined (a PDF split into page ranges); a whole file is chunked
    in the worker that read it; the split PDF's ranges are read first, before a larger whole file, so that
    its joining and chunking overlap the reading of the rest."""
    from pdf_factory import write_pdf as write

    from esgexp.data.corpus import parse, parse_range, work_units

    folder = tmp_path / "docs"
    write(folder / "long.pdf", [[f"Page {n} reports scope {n} emissions."] for n in range(1, 6)])
    write(folder / "large.pdf", [[f"Line {n} of a large two-page report on water use." for n in range(40)]] * 2)
    (folder / "notes.md").write_text("# Notes\nScope 3 is estimated.\n", encoding="utf-8")
    assert (folder / "large.pdf").stat().st_size > (folder / "long.pdf").stat().st_size
    chunked, chunk = [], CharChunker.chunk
    monkeypatch.setattr(
        CharChunker, "chunk", lambda self, doc_id, pages: chunked.append(doc_id) or chunk(self, doc_id, pages)
    )

    ingest(folder, tmp_path / "one", CharChunker(), progress=False, workers=1)
    assert chunked == ["large", "long", "notes"]
    chunked.clear()
    ingest(folder, tmp_path / "two", CharChunker(), progress=False, workers=2, pages_per_unit=2)
    assert chunked == ["long"]
    for name in ("pages.jsonl", "passages.jsonl", "manifest.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name

    jobs = [(folder / name, name.split(".")[0], "pdfium", None, CharChunker()) for name in ("large.pdf", "long.pdf")]
    units = [(function, args[0].name) for function, args in work_units(jobs, 2, 2)]
    assert units == [(parse_range, "long.pdf")] * 3 + [(parse, "large.pdf")]
