"""Table extraction: generated PDFs with known ruled tables (cells, pages, boxes), table passages in the
corpus (reuse, settings), the CLI, and the two real report PDFs in ../shared."""

import json
import re

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
    # the first rule lies at 740 - 14 - 30 - 20 = 676 (116 from the top); the box starts at the header's top
    # line (10 pt Helvetica 6 pt above the rule)
    assert table.bbox == (72.0, 100.0, 456.0, 156.0)
    assert table.title == "" and table.units == () and table.cut == ()
    assert TableExtractor(strategy="lines").extract(path, "kpi") == []


def test_small_tables_are_dropped_by_the_size_settings(report):
    raw = TableExtractor().found(report)
    assert [(f.page, len(f.cells), len(f.cells[0])) for f in raw] == [(2, 3, 3), (3, 4, 2), (3, 2, 2), (3, 3, 1)]
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
    # underlined rows only, the current year highlighted above the others' header; the heading in a larger
    # font above the years is the table's title
    assert (emissions.title, emissions.header) == ("GHG Inventory in t CO2e(8)", ("", "2023", "2022(12)", "2021"))
    assert emissions.rows[0] == ("Scope 1: Direct emissions", "1,772.6 t", "1,293.5 t", "1,107.3 t")
    assert diversity.header == ("", "2023", "2022", "2021")
    assert ("Woman", "35.1", "36.1", "37.1") in diversity.rows
    assert TableExtractor(strategy="lines").extract(reports / "1_1_AG.pdf", "1_1_AG", pages=[16, 40]) == []
    # MAX Automation's page 29 frames criteria and answers in a grid of dotted borders (each dot a tiny square
    # of one path): read as drawn, three columns, by both strategies
    max_automation = reports / "MAX_AUTOMATION_SE.pdf"
    for strategy in ("lines", "rules"):
        (answers,) = TableExtractor(strategy=strategy).extract(max_automation, "MAX", pages=[29])
        assert answers.header == ("Incentive systems", "", "")
        assert answers.rows[0][0].startswith("The company discloses how the target agreements")
        assert answers.rows[1][1:] == ("n.a.", answers.rows[1][2])
        assert answers.rows[1][2].startswith("The Remuneration Report is available on the MAX website")


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
    # the ticks are drawn (a box and a tick inside it), not typed: read as ☑ in the column they stand in
    ticks = {row[0]: row[3:] for row in table.rows}
    assert len(ticks) == 10 and ticks["CCM 7.7"] == ("☑", "☑", "☑") and ticks["CCM 4.1"] == ("☑", "", "")
    assert ticks["CCM 7.2/CE 3.2"] == ticks["CE 1.2"] == ("", "☑", "")


@pytest.fixture(scope="module")
def taxonomy_forms(tmp_path_factory):
    """Vonovia's EU-Taxonomy reporting forms (pages 60-65 of pdfs-large/Vonovia_SE.pdf: turnover, CapEx, OpEx,
    each a spread over two pages) cut into a PDF of their own, as its pages 1-6 (the shared folder is read-only)."""
    import pypdfium2 as pdfium
    from conftest import SHARED_SAMPLES

    source = SHARED_SAMPLES / "pdfs-large" / "Vonovia_SE.pdf"
    if not source.is_file():
        pytest.skip(f"the long sample reports are not present at {source.parent}")
    report, forms = pdfium.PdfDocument(str(source)), pdfium.PdfDocument.new()
    forms.import_pages(report, list(range(59, 65)))
    path = tmp_path_factory.mktemp("vonovia") / "forms.pdf"
    forms.save(str(path))
    forms.close()
    report.close()
    return TableExtractor().extract(path, "vonovia")


def test_a_taxonomy_form_reads_as_printed_stacked_headers_groups_units_and_notes(taxonomy_forms):
    turnover = taxonomy_forms[0]
    assert (turnover.page, turnover.title) == (1, "Turnover")
    # each column's header is printed on up to five short lines ("Propor-" / "tion of" / ...): read whole
    assert turnover.header[:6] == (
        "Economic Activities",
        "Code(s)",
        "Turnover",
        "Proportion of Turnover, year 2023",
        "Climate change mitigation",
        "Climate change adaptation",
    )
    assert turnover.groups[4:] == ("Substantial contribution criteria",) * 6 and not any(turnover.groups[:4])
    assert turnover.columns()[4] == "Substantial contribution criteria: Climate change mitigation"
    assert turnover.units[2:5] == ("€ million", "%", "Y; N; N/EL**")
    # no header cell holds another column's values (the page-edge spill once landed in one of ~2,000 characters)
    assert all(len(cell) <= 40 and not re.search(r"\d", cell.replace("2023", "")) for cell in turnover.header)
    assert ("Construction of new buildings", "CCM 7.1", "250", "4.1", "Y", "N/EL") == turnover.rows[2][:6]
    assert turnover.rows[-1][:4] == ("Total", "", "6,096", "100.0")
    assert turnover.notes.startswith("* With regard to EU environmental objectives 3 to 6")
    markdown = turnover.passage().text
    assert markdown.startswith("Turnover\n\n(Table continues on page 2: its further columns are there.)\n\n")
    assert (
        "| Economic Activities | Code(s) | Turnover | Proportion of Turnover, year 2023 | Substantial contribution"
        in markdown
    )
    assert "\n|  |  | € million | % | Y; N; N/EL** |" in markdown


def test_a_form_cut_by_the_page_edge_is_marked_and_what_lies_beyond_stays_out(taxonomy_forms):
    """The report is laid out as spreads: each page holds the whole form, half of it beyond the page's edge.
    What a reader of a page does not see stays out of its table; the two halves say where the other is, and
    the right half repeats the left half's row labels (same heights: the rules run across both pages)."""
    left, right = taxonomy_forms[0], taxonomy_forms[1]
    assert (left.cut, left.continues_on, left.continued_from) == (("right",), 2, None)
    assert (right.page, right.cut, right.continued_from, right.continues_on) == (2, ("left",), 1, None)
    assert "safeguards" not in left.passage().text
    assert "€ million" not in right.passage().text and "CCM 7.1" not in right.passage().text
    assert right.header[0] == "Economic Activities" and right.header[7:] == (
        "Minimum safeguards",
        "Proportion of Taxonomy aligned (A.1.) or eligible (A.2.) Turnover, year 2022",
        "Category enabling activity",
        "Category transitional activity",
    )
    assert right.groups[:2] == ("", 'DNSH criteria ("Does Not Significantly Harm")')
    assert right.passage().text.startswith("(Table continued from page 1: its first columns are there")
    assert ("Construction of new buildings", *("Y",) * 7, "3.9", "", "") in right.rows
    assert ("of which Transitional", *("Y",) * 7, "0.0", "", "T") in right.rows
    assert right.rows[-1] == ("Total",) + ("",) * 10


def test_the_capex_and_opex_forms_read_like_the_turnover_form(taxonomy_forms):
    capex, opex = (t for t in taxonomy_forms if t.title in ("CapEx", "OpEx"))
    for table, kpi in ((capex, "CapEx"), (opex, "OpEx")):
        assert table.header[2:5] == (kpi, f"Proportion of {kpi}, year 2023", "Climate change mitigation")
        assert table.continues_on == table.page + 1 and table.rows[-1][0] == "Total"
    assert ("Renovation of existing buildings", "CCM 7.2", "95", "7.9", "Y") == capex.rows[2][:5]
    assert opex.rows[-1][:4] == ("Total", "", "412", "100.0")
    assert [t.page for t in taxonomy_forms] == [1, 2, 3, 4, 5, 6]


def test_a_taxonomy_form_names_the_cell_that_prints_an_answer(taxonomy_forms):
    """The SustainableQA builder keeps a table pair only where a cell prints its answer (builders/table_cells.py):
    on the real turnover form, a figure is found in its row and its whole stacked header."""
    from esgexp.builders.table_cells import answer_cells

    markdown = taxonomy_forms[0].passage().text
    assert answer_cells("4.1%", markdown) == (("Construction of new buildings", "Proportion of Turnover, year 2023"),)
    assert ("Total", "Turnover") in answer_cells("EUR 6,096 million", markdown)
    assert answer_cells("14.1%", markdown) == () and answer_cells("EUR 7,000 million", markdown) == ()
