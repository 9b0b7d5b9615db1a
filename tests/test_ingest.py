"""Documents -> corpus folder: files written, skipped files, re-ingest reuse, Corpus.load, the CLI."""

import json
import os
import random
import shutil

import pytest
from cli import run_cli
from helpers import read_jsonl
from pdf_factory import encrypted, pdf_bytes, write_pdf

from esgexp.core.records import Passage, passages_hash
from esgexp.data import pdf
from esgexp.data.chunking import CharChunker, MarkdownChunker, WindowChunker
from esgexp.data.corpus import Corpus, ingest
from esgexp.errors import UserError

GOOD = [["Alpha report page one. It covers scope 1."], ["Page two talks about water."], ["Page three ends it."]]


@pytest.fixture
def docs(tmp_path):
    """A folder with two readable PDFs, a Markdown file and four unreadable PDFs."""
    folder = tmp_path / "docs"
    write_pdf(folder / "alpha.pdf", GOOD)
    (folder / "locked_empty.pdf").write_bytes(encrypted(pdf_bytes([["Opened with the empty password."]]), ""))
    (folder / "locked_secret.pdf").write_bytes(encrypted(pdf_bytes([["Hidden."]]), "hunter2"))
    (folder / "corrupt.pdf").write_bytes(random.Random(1).randbytes(4000))
    write_pdf(folder / "scan.pdf", [[], []])
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.md").write_text("# Notes\nFirst section.\n\n## More\nSecond section.\n", encoding="utf-8")
    (folder / "ignored.csv").write_text("a,b\n", encoding="utf-8")
    return folder


@pytest.fixture
def parses(monkeypatch):
    """Counts PDF parses by file name."""
    calls = []
    real = pdf.read_pages

    def counting(path, reader="pdfium"):
        calls.append(path.name)
        return real(path, reader)

    monkeypatch.setattr(pdf, "read_pages", counting)
    return calls


def test_ingest_writes_pages_passages_and_a_report_and_skips_unreadable_files(docs, tmp_path, caplog):
    out = tmp_path / "corpus"
    report = ingest(docs, out, WindowChunker(size=40, overlap=10), progress=False)
    assert (report["n_docs"], report["n_pages"]) == (3, 5)
    assert report["skipped"] == [
        {"file": "corrupt.pdf", "reason": report["skipped"][0]["reason"]},
        {"file": "locked_secret.pdf", "reason": "encrypted and the empty password does not open it (needs a password)"},
        {"file": "scan.pdf", "reason": "no extractable text (a scanned PDF?); OCR not supported"},
    ]
    assert report["skipped"][0]["reason"].startswith("not a readable PDF")
    for item in report["skipped"]:
        assert f"skipped: {docs / item['file']}: {item['reason']}" in caplog.text
    pages = read_jsonl(out / "pages.jsonl")
    assert [(p["doc_id"], p["page"], p["page_index"]) for p in pages] == [
        ("alpha", 1, 0),
        ("alpha", 2, 1),
        ("alpha", 3, 2),
        ("locked_empty", 1, 0),
        ("sub/notes", 1, 0),
    ]
    assert pages[1]["text"] == "Page two talks about water."
    assert pages[4]["text"] == "# Notes\nFirst section.\n\n## More\nSecond section."
    passages = [Passage(**p) for p in read_jsonl(out / "passages.jsonl")]
    assert report["n_chunks"] == len(passages) and report["n_parsed"] == 6 and report["n_reused"] == 0
    alpha = [p for p in passages if p.doc_id == "alpha"]
    assert [(p.id, p.text, p.page_span) for p in alpha] == [
        ("alpha#0", "Alpha report page one. It covers scope", "1"),
        ("alpha#1", "scope 1.\nPage two talks about water.", "1-2"),
        ("alpha#2", "water.\nPage three ends it.", "2-3"),
    ]
    assert report["chunker"] == {
        "_target_": "esgexp.data.chunking.WindowChunker",
        "name": "window",
        "size": 40,
        "overlap": 10,
    }
    assert report["corpus_hash"] == passages_hash(passages) and report["seconds"] > 0
    assert json.loads((out / "report.json").read_text()) == report
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["documents"]["alpha"]["n_pages"] == 3
    assert len(manifest["documents"]["alpha"]["sha256"]) == 64


def test_corpus_load_reads_the_folder_back(docs, tmp_path):
    out = tmp_path / "corpus"
    report = ingest(docs, out, MarkdownChunker(), progress=False)
    corpus = Corpus.load(out)
    assert corpus.hash == report["corpus_hash"]
    assert len(corpus.passages) == report["n_chunks"]
    assert corpus.doc_ids == ["alpha", "locked_empty", "sub/notes"]
    assert [p.text for p in corpus.by_doc("sub/notes")] == ["# Notes\nFirst section.", "## More\nSecond section."]
    assert [p.page for p in corpus.pages["alpha"]] == [1, 2, 3]
    with pytest.raises(UserError, match="'nope' is not in corpus"):
        corpus.by_doc("nope")


def test_a_missing_corpus_tells_how_to_build_it(tmp_path):
    with pytest.raises(
        UserError, match=r"corpus not found: .*python -m esgexp.ingest corpus.pdf_dir=DIR corpus.name=NAME"
    ):
        Corpus.load(tmp_path / "nothing")


def test_a_damaged_corpus_file_names_file_and_line(docs, tmp_path):
    out = tmp_path / "corpus"
    ingest(docs, out, CharChunker(), progress=False)
    (out / "passages.jsonl").write_text('{"id": "a#0"\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"passages.jsonl line 1: not valid JSON"):
        Corpus.load(out)


def test_reingest_reuses_unchanged_files_and_redoes_only_what_changed(docs, tmp_path, parses):
    out = tmp_path / "corpus"
    first = ingest(docs, out, CharChunker(), progress=False)
    assert sorted(parses) == ["alpha.pdf", "corrupt.pdf", "locked_empty.pdf", "locked_secret.pdf", "scan.pdf"]

    parses.clear()
    again = ingest(docs, out, CharChunker(), progress=False)
    assert parses == [] and (again["n_parsed"], again["n_reused"]) == (0, 6)
    assert again["corpus_hash"] == first["corpus_hash"] and again["skipped"] == first["skipped"]

    write_pdf(docs / "alpha.pdf", [["Alpha, second edition."]])
    write_pdf(docs / "beta.pdf", [["Beta one."], ["Beta two."]])
    (docs / "scan.pdf").unlink()
    changed = ingest(docs, out, CharChunker(), progress=False)
    assert sorted(parses) == ["alpha.pdf", "beta.pdf"] and changed["n_reused"] == 4
    corpus = Corpus.load(out)
    assert [p.text for p in corpus.by_doc("alpha")] == ["Alpha, second edition."]
    assert [(p.text, p.page_span) for p in corpus.by_doc("beta")] == [("Beta one.\nBeta two.", "1-2")]
    assert [s["file"] for s in changed["skipped"]] == ["corrupt.pdf", "locked_secret.pdf"]
    assert corpus.hash == changed["corpus_hash"] != first["corpus_hash"]


def test_a_new_reader_version_reads_every_file_again(docs, tmp_path, parses, monkeypatch):
    out = tmp_path / "corpus"
    ingest(docs, out, CharChunker(), progress=False)
    parses.clear()
    monkeypatch.setattr(pdf, "CLEANING_VERSION", pdf.CLEANING_VERSION + 1)
    again = ingest(docs, out, CharChunker(), progress=False)
    assert len(parses) == 5 and again["n_reused"] == 0


def test_a_new_chunker_config_rechunks_stored_pages_without_parsing(docs, tmp_path, parses):
    out = tmp_path / "corpus"
    ingest(docs, out, WindowChunker(size=40, overlap=10), progress=False)
    parses.clear()
    report = ingest(docs, out, WindowChunker(size=1000, overlap=10), progress=False)
    assert parses == []
    assert [p.text for p in Corpus.load(out).by_doc("alpha")] == [
        "Alpha report page one. It covers scope 1.\nPage two talks about water.\nPage three ends it."
    ]
    assert report["chunker"]["size"] == 1000


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: None, "document folder not found: {d}"),
        (lambda d: d.mkdir(), r"no .pdf, .md or .txt files in {d}"),
        (lambda d: write_pdf(d / "scan.pdf", [[]]), r"no readable document in {d}: scan.pdf: no extractable text"),
    ],
    ids=["missing", "empty", "nothing-readable"],
)
def test_folder_mistakes_are_user_errors_naming_the_folder(tmp_path, setup, message):
    folder = tmp_path / "in"
    setup(folder)
    with pytest.raises(UserError, match=message.format(d=folder)):
        ingest(folder, tmp_path / "out", CharChunker(), progress=False)
    assert not (tmp_path / "out").exists()


def test_the_two_real_reports(shared_samples, shared_corpus, tmp_path, parses):
    """Their pages as the session's corpus of them stored them (conftest: the same ``ingest``, another
    chunker), chunked anew with the default one: the two files are parsed once per test process."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("1_1_AG.pdf", "MAX_AUTOMATION_SE.pdf"):
        (folder / name).symlink_to(shared_samples / "pdfs" / name)
    shutil.copytree(shared_corpus, tmp_path / "corpus")
    report = ingest(folder, tmp_path / "corpus", CharChunker(), progress=False)
    assert (report["n_docs"], report["n_pages"], report["skipped"]) == (2, 99, [])
    assert parses == [] and (report["n_parsed"], report["n_reused"]) == (0, 2)
    corpus = Corpus.load(tmp_path / "corpus")
    assert [p.page for p in corpus.pages["1_1_AG"]] == list(range(1, 65))
    (hit,) = [p for p in corpus.by_doc("MAX_AUTOMATION_SE") if "2,630 photovoltaic modules" in p.text]
    assert 11 in range(hit.page_start, hit.page_end + 1)
    assert all(150 <= len(p.text) <= 4500 for p in corpus.passages)


def run_ingest(cwd, env, *args):
    return run_cli("esgexp.ingest", *args, cwd=cwd, env=env)


def test_cli_prints_the_corpus_folder_last_and_warns_about_skipped_files(docs, tmp_path, clean_env):
    work = tmp_path / "work"
    work.mkdir()
    result = run_ingest(
        work, clean_env, f"corpus.pdf_dir={docs}", "corpus.name=demo", "chunker=window", "progress=false"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folder = work / "data" / "corpora" / "demo" / "window"
    assert result.stdout.splitlines()[-1] == f"corpus: {folder}"
    assert f"skipped: {docs / 'corrupt.pdf'}: not a readable PDF" in result.stdout
    assert json.loads((folder / "report.json").read_text())["n_docs"] == 3
    assert sorted(p.name for p in work.rglob("*") if p.is_file()) == [
        "manifest.json",
        "pages.jsonl",
        "passages.jsonl",
        "report.json",
    ]


def test_cli_mistakes_are_one_line_errors(tmp_path, clean_env):
    result = run_ingest(tmp_path, clean_env, f"corpus.pdf_dir={tmp_path / 'none'}")
    assert result.returncode == 2 and "error: " in result.stderr and "corpus.name" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_ingest(tmp_path, clean_env, f"corpus.pdf_dir={tmp_path / 'none'}", "corpus.name=x")
    assert (
        result.returncode == 2 and f"error: corpus.pdf_dir={tmp_path / 'none'}: no such file or folder" in result.stderr
    )


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_ingested(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "ok.md").write_text("Water withdrawal fell by four percent.")
    with open(os.path.join(os.fsencode(source), b"Soci\xe9t\xe9.md"), "wb") as handle:  # Latin-1 bytes
        handle.write(b"Text.")
    report = ingest(source, tmp_path / "out", WindowChunker(), progress=False)
    assert report["n_docs"] == 1 and len(report["skipped"]) == 1
    assert report["skipped"][0]["reason"] == "the file name is not valid UTF-8; rename it"
