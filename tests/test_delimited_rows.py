"""A CSV record whose fields do not line up with its header (a cell left out or added, a quote left open that
swallows the rows after it) is skipped and reported with its file lines, never read with its columns shifted."""

import pytest
from conftest import SAMPLE_CSV

from esgexp.builders.esgenius import read_review
from esgexp.data.climretrieve import ClimRetrieveReportLevel, load_base_annotations, load_core_questions
from esgexp.data.esgenius import ESGeniusCSV
from esgexp.errors import UserError

# One option cell (D) left out: 11 fields under the sample's 12-field header.
SHORT_ROW = (
    '"9999","99","Which framework asks for Scope 3?","A","GHG Protocol","IFRS S2","TCFD",'
    '"Not sure","CDP guidance","4","Scope 3 covers value-chain emissions."\n'
)
MCQ_HEADER = "query_id,query,answer,A,B,C,D\n"


def sample_with(tmp_path, *extra: str):
    """The bundled sample with ``extra`` lines appended; its path and the file line the first one is on."""
    text = SAMPLE_CSV.read_text(encoding="utf-8")
    path = tmp_path / "bad.csv"
    path.write_text(text + "".join(extra), encoding="utf-8")
    return path, text.count("\n") + 1


def load(path):
    return ESGeniusCSV(name="x", path=str(path)).load()


def test_a_row_missing_a_cell_is_skipped_and_the_good_rows_are_kept_as_they_were(tmp_path):
    path, line = sample_with(tmp_path, SHORT_ROW)
    loaded = load(path)
    assert loaded.skipped == [f"{path} line {line}: 11 fields, the header has 12; row skipped"]
    assert loaded.items == load(SAMPLE_CSV).items  # the 9999 row is not scored with its columns shifted


def test_a_row_with_a_cell_too_many_is_skipped(tmp_path):
    path, line = sample_with(tmp_path, SHORT_ROW.replace('"TCFD",', '"TCFD","ISSB","SASB",'))
    assert load(path).skipped == [f"{path} line {line}: 13 fields, the header has 12; row skipped"]


def test_an_unclosed_quote_never_becomes_a_question(tmp_path):
    rows = [
        '1,"Spans two lines,\nwith, commas, in, it, and, more?",A,a,b,c,d\n',  # a good multi-line cell stays
        '2,"Which is open,A,a,b,c,d\n',  # the quote swallows rows 3-5; the record still has 7 fields
        "3,Third?,B,a,b,c,d\n",
        "4,Fourth?,C,a,b,c,d\n",
        '5,Say "yes",D,a,b,c,d\n',
        "6,Sixth?,A,a,b,c,d\n",
        '7,Seventh?,A,a,b,c,"d\n',  # open at the end: the last cell takes the line after it
        "8,Eighth?,A,a,b,c,d\n",
    ]
    path = tmp_path / "q.csv"
    path.write_text(MCQ_HEADER + "".join(rows), encoding="utf-8")
    loaded = load(path)
    assert [item.id for item in loaded.items] == ["1", "6"]
    assert loaded.skipped == [
        f"{path} lines 4-7: field 'query' runs on into what looks like another row ('3,Third?,B,a,b,c,d'): "
        "a quote left open; row skipped",
        f"{path} lines 9-10: field 'D' runs on into what looks like another row ('8,Eighth?,A,a,b,c,d'): "
        "a quote left open; row skipped",
    ]


def test_an_unclosed_quote_in_a_quoted_file_is_skipped_with_its_lines(tmp_path):
    rows = [
        '"1","First?","A","a","b","c","d"\n',
        '"2","Second?","B","a","b","c","d\n',
        '"3","Third?","C","a","b","c","d"\n',
    ]
    path = tmp_path / "q.csv"
    path.write_text(MCQ_HEADER + "".join(rows), encoding="utf-8")
    loaded = load(path)
    assert [item.id for item in loaded.items] == ["1"]
    assert loaded.skipped == [
        f'{path} lines 3-4: field \'D\' opens a quote that is closed only on a later line (\'"d\\n"3","Third?"\'): '
        "a quote left open; row skipped"
    ]


def test_a_quote_that_opens_mid_field_is_named_even_when_the_field_count_matches(tmp_path):
    """``2866,"56,"Which of ...``: the csv module glues 56 to the question and cuts the question at its comma,
    which gives the header's field count; the row is skipped, naming its line and field."""
    lines = SAMPLE_CSV.read_text(encoding="utf-8").splitlines(keepends=True)
    bad = '2866,"56,"Which of the following, is a Scope 3 category?",A,a,b,c,d,z,doc,1,text\n'
    path = tmp_path / "esgenius.csv"
    path.write_text(lines[0] + bad + "".join(lines[1:]), encoding="utf-8")
    loaded = load(path)
    assert loaded.skipped == [
        f"{path} line 2: field 'new_id' is quoted, but text follows its closing quote ('\"56,\"Which of th'): a quote "
        'that opens mid-field or is not escaped (write "" for a quote inside a quoted cell); row skipped'
    ]
    assert loaded.items == load(SAMPLE_CSV).items


def test_the_run_lists_the_skipped_row_before_any_model_loads(make_cfg, tmp_path):
    from esgexp.run import make_job

    path, line = sample_with(tmp_path, SHORT_ROW)
    job = make_job(make_cfg(f"dataset.path={path}", "tracking.offline=true"))
    job.save(job.load())
    skipped = (job.output_dir / "skipped_rows.txt").read_text(encoding="utf-8")
    assert skipped == f"{path} line {line}: 11 fields, the header has 12; row skipped\n"


def test_climretrieve_rows_that_do_not_line_up_are_skipped(tmp_path):
    report = tmp_path / "rl.csv"
    report.write_text(
        ",paragraph,report,question,relevance\n0,Para A.,R.pdf,Q1?,2\n1,Para B.,R.pdf,Q1?\n2,Para C.,R.pdf,Q1?,1,3\n",
        encoding="utf-8",
    )
    data = ClimRetrieveReportLevel("x", str(report)).load()
    assert data.skipped == [
        f"{report} line 3: 4 fields, the header has 5; row skipped",
        f"{report} line 4: 6 fields, the header has 5; row skipped",
    ]
    assert [passage.text for passage in data.passages] == ["Para A."]
    base = tmp_path / "base.csv"
    base.write_text(
        "Document,Question,Relevant,Page,Source From,Source Relevance Score,Core 16 Question\n"
        "R.pdf,Q1?,Some text.,4,text,3,1\nR.pdf,Q1?,Some text.,text,3,1\n",
        encoding="utf-8",
    )
    loaded = load_base_annotations(base)
    assert loaded.skipped == [f"{base} line 3: 6 fields, the header has 7; row skipped"] and len(loaded.items) == 1


def test_tables_without_a_skipped_list_refuse_a_row_that_does_not_line_up(tmp_path):
    core = tmp_path / "core.csv"
    core.write_text("question,Definition,Information Retrieval Background\nQ1?,A definition.\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"core\.csv line 2: 2 fields, the header has 3$"):
        load_core_questions(core)
    review = tmp_path / "review.csv"
    review.write_text(
        "query_id,decision,query,correct,distractor_1,distractor_2,distractor_3\nq1,keep,Q?,right,w1,w2\n",
        encoding="utf-8",
    )
    with pytest.raises(UserError, match=r"review\.csv line 2: 6 fields, the header has 7$"):
        read_review(review)
