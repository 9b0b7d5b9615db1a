"""Table extraction: generated PDFs with known ruled tables (cells, pages, boxes), table passages in the
corpus (reuse, settings), the CLI, and the two real report PDFs in ../shared."""

import json

import pytest
from cli import run_cli
from pdf_factory import write_pdf

from esgexp.data import pdf
from esgexp.data import tables as tables_module
from esgexp.data.chunking import CharChunker
from esgexp.data.corpus import Corpus, ingest
from esgexp.data.tables import Table, TableExtractor
from esgexp.errors import UserError

EMISSIONS = [["Scope", "2022", "2023"], ["Scope 1", "1,200", "1,100"], ["Scope 2 (market)", "800", "650"]]
WATER = [["Site", "Water (m3)"], ["Berlin", "5,000"], ["Munich", "3,200"], ["Total", "8,200"]]
TWO_ROWS = [["Only", "two rows"], ["a", "b"]]
FRAMED_BOX = [["Framed note one"], ["line two"], ["line three"]]


@pytest.fixture
def report(tmp_path):
    """Page 1 text only; page 2 the emissions table; page 3 the water table, a two-row table and a framed box."""
    return write_pdf(
        tmp_path / "docs" / "report.pdf",
        [["Intro text."], ["Emissions table below."], ["Two tables."]],
        [[], [EMISSIONS], [WATER, TWO_ROWS, FRAMED_BOX]],
    )


def test_ruled_tables_come_back_with_their_page_box_header_and_cells(report):
    found = TableExtractor().extract(report, "report")
    assert [(t.id, t.page) for t in found] == [("report#t0", 2), ("report#t1", 3)]
    emissions, water = found
    assert emissions.header == tuple(EMISSIONS[0]) and emissions.rows == tuple(map(tuple, EMISSIONS[1:]))
    assert water.header == tuple(WATER[0]) and water.rows == tuple(map(tuple, WATER[1:]))
    # one text line (14 pt) and 30 pt below y=740 on a 792 pt page: top 96; 3 columns of 130 pt, 3 rows of 20 pt
    assert emissions.bbox == (72.0, 96.0, 462.0, 156.0)
    assert emissions.passage().text == (
        "| Scope | 2022 | 2023 |\n| --- | --- | --- |\n| Scope 1 | 1,200 | 1,100 |\n| Scope 2 (market) | 800 | 650 |"
    )
    assert (emissions.passage().kind, emissions.passage().page_span) == ("table", "2")


def test_underlined_rows_are_a_table_for_rules_and_nothing_for_lines(tmp_path):
    kpis = [["GHG emissions (t)", "2023", "2022"], ["Scope 1", "1,772.6", "1,293.5"], ["Scope 2", "456.4", "359.8"]]
    path = write_pdf(tmp_path / "kpi.pdf", [["Key figures."]], [[kpis]], underlined=True)
    (table,) = TableExtractor().extract(path, "kpi")
    assert (table.page, table.header, table.rows) == (1, tuple(kpis[0]), tuple(map(tuple, kpis[1:])))
    # the first rule lies at 740 - 14 - 30 - 20 = 676 (116 from the top); the header row above it is one row (20) high
    assert table.bbox == (72.0, 96.0, 456.0, 156.0)
    assert TableExtractor(strategy="lines").extract(path, "kpi") == []


def test_small_tables_are_dropped_by_the_size_settings(report):
    raw = TableExtractor().found(report)
    assert [(page, len(cells), len(cells[0])) for page, _, cells in raw] == [(2, 3, 3), (3, 4, 2), (3, 2, 2), (3, 3, 1)]
    loose = TableExtractor(min_rows=2, min_cols=1).extract(report, "r")
    assert [t.header for t in loose] == [tuple(EMISSIONS[0]), tuple(WATER[0]), tuple(TWO_ROWS[0]), tuple(FRAMED_BOX[0])]
    assert [t.page for t in TableExtractor().extract(report, "r", pages=[3])] == [3]
    with pytest.raises(UserError, match="strategy must be one of rules, lines, text, got 'stream'"):
        TableExtractor(strategy="stream")
    with pytest.raises(UserError, match="min_rows >= 2"):
        TableExtractor(min_rows=1)


def test_markdown_escapes_pipes_and_keeps_blank_cells():
    table = Table("d#t0", "d", 4, (0, 0, 1, 1), ("Metric", ""), (("a|b", ""), ("", "7")))
    assert table.markdown() == "| Metric |  |\n| --- | --- |\n| a\\|b |  |\n|  | 7 |"
    assert Table.from_record(json.loads(json.dumps(table.record()))) == table
    assert table.record()["page_index"] == 3


def test_ingest_stores_table_passages_beside_the_text_and_reuses_them(report, tmp_path, monkeypatch):
    calls = {"pages": 0, "tables": 0}
    read_pages, extract = pdf.read_pages, tables_module.TableExtractor.extract
    monkeypatch.setattr(
        pdf,
        "read_pages",
        lambda path, reader="pdfium": calls.__setitem__("pages", calls["pages"] + 1) or read_pages(path, reader),
    )
    monkeypatch.setattr(
        tables_module.TableExtractor,
        "extract",
        lambda self, *a: calls.__setitem__("tables", calls["tables"] + 1) or extract(self, *a),
    )
    out = tmp_path / "corpus"
    first = ingest(report.parent, out, CharChunker(), progress=False, tables=TableExtractor())
    assert (first["n_tables"], first["n_chunks"], first["tables"]["strategy"]) == (2, 3, "rules")
    corpus = Corpus.load(out)
    assert [(p.id, p.kind, p.page_span) for p in corpus.passages] == [
        ("report#0", "text", "1-3"),
        ("report#t0", "table", "2"),
        ("report#t1", "table", "3"),
    ]
    # the page text keeps the table's words: evidence checks read the page as printed
    assert "Scope 2 (market) 800 650" in corpus.passages[0].text
    assert corpus.tables["report#t1"].rows[-1] == ("Total", "8,200")
    assert corpus.on_pages("report", [1]) == ["report#0", "report#t0"]
    assert calls == {"pages": 1, "tables": 1}

    again = ingest(report.parent, out, CharChunker(), progress=False, tables=TableExtractor())
    assert (again["n_parsed"], again["corpus_hash"], calls) == (0, first["corpus_hash"], {"pages": 1, "tables": 1})
    looser = ingest(report.parent, out, CharChunker(), progress=False, tables=TableExtractor(min_rows=2))
    assert (looser["n_tables"], calls) == (3, {"pages": 1, "tables": 2})
    plain = ingest(report.parent, out, CharChunker(), progress=False)
    assert (plain["n_tables"], [p.kind for p in Corpus.load(out).passages]) == (0, ["text"])
    assert not (out / "tables.jsonl").exists() and Corpus.load(out).tables == {}


def test_cli_tables_true_reports_the_tables(report, tmp_path, clean_env):
    command = [
        f"corpus.pdf_dir={report.parent}",
        "corpus.name=demo",
        "progress=false",
    ]
    result = run_cli("esgexp.ingest", *command, "tables=true", cwd=tmp_path, env=clean_env)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "data" / "corpora" / "demo" / "paragraphs"
    assert "1 documents, 3 pages, 3 passages (2 tables)" in result.stdout
    assert result.stdout.splitlines()[-1] == f"corpus: {folder}"
    assert [json.loads(line)["id"] for line in (folder / "tables.jsonl").read_text().splitlines()] == [
        "report#t0",
        "report#t1",
    ]
    wrong = run_cli("esgexp.ingest", *command, "tables=maybe", cwd=tmp_path, env=clean_env)
    assert wrong.returncode == 2 and "error: tables must be true or false, got 'maybe'" in wrong.stderr


def test_real_reports_tables(shared_samples):
    reports = shared_samples / "pdfs"
    found = TableExtractor().extract(reports / "1_1_AG.pdf", "1_1_AG", pages=[10, 16, 40])
    assert [(t.page, len(t.header), len(t.rows)) for t in found] == [(10, 3, 4), (16, 4, 14), (40, 4, 26)]
    materiality, emissions, diversity = found
    # a drawn grid; "Significant Sustainability Issues" spans the first two columns
    assert materiality.header == ("Significant Sustainability Issues", "", "CSR-RUG Non-financial Aspects")
    assert materiality.rows[0] == ("", "Decarbonisation Material Efficiency and Circularity", "Environmental Matters")
    # underlined rows only, the current year highlighted above the others' header
    assert emissions.header == ("GHG Inventory in t CO e 2", "2023", "2022(12)", "2021")
    assert emissions.rows[0] == ("Scope 1: Direct emissions", "1,772.6 t", "1,293.5 t", "1,107.3 t")
    assert diversity.header == ("", "2023", "2022", "2021")
    assert ("Woman", "35.1", "36.1", "37.1") in diversity.rows
    assert TableExtractor(strategy="lines").extract(reports / "1_1_AG.pdf", "1_1_AG", pages=[16, 40]) == []
    # MAX Automation's page 29 frames criteria and answers in boxes: one-column for lines, two for rules
    max_automation = reports / "MAX_AUTOMATION_SE.pdf"
    assert {len(cells[0]) for _, _, cells in TableExtractor(strategy="lines").found(max_automation, pages=[29])} == {1}
    (answers,) = TableExtractor().extract(max_automation, "MAX", pages=[29])
    assert answers.header[0].startswith("The company discloses how the target")
    assert answers.rows[0][1].startswith("The Remuneration Report is available on the MAX website")


def test_a_header_word_over_a_column_border_stays_whole_on_a_real_taxonomy_table(shared_samples):
    """Vonovia's EU-Taxonomy KPI table (page 55 of pdfs-large/Vonovia_SE.pdf): column borders taken from the
    rules below its header used to cut header words (``Tu`` | ``rnover``, ``Capi pen`` | ``tal Exditures``)."""
    path = shared_samples / "pdfs-large" / "Vonovia_SE.pdf"
    if not path.is_file():
        pytest.skip(f"the long sample reports are not present at {path.parent}")
    table = TableExtractor().extract(path, "vonovia", pages=[55])[0]
    assert [cell for cell in table.header if cell] == [
        "EU Taxonomy Criteria",
        "Activities undertaken by Vonovia",
        "Turnover",
        "Capital Expenditures",
        "Operating Expenses",
    ]
    assert table.rows[0][:3] == ("CCM 7.1/CE 3.1", "Construction of new buildings", "Turnover from Development to sell")
