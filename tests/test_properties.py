"""Property-based tests: the MCQ answer parser on any text, and each loader on generated malformed rows
(wrong types, missing fields, odd Unicode, huge fields): it loads, or it names the row and the field;
it never raises anything but a UserError."""

import csv
import json
import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from esgexp.data.climretrieve import ClimRetrieveReportLevel
from esgexp.data.esgbench import ESGBenchGold
from esgexp.data.esgenius import ESGeniusCSV
from esgexp.data.sustainableqa import SustainableQA
from esgexp.errors import UserError
from esgexp.eval.mcq import parse_answer

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text a data file may hold: letters, digits, marks and spaces of any script, quotes, newlines, NUL,
# invisible and right-to-left characters, and now and then a cell of 200,000 characters.
ODD = st.sampled_from(["", " ", "\n", '"', "\x00", "\u200b", "\u202e", "\ufeff", "é", "😀", "e\u0301", "Ⅻ", "３"])
CELL = st.one_of(st.text(max_size=12), ODD, st.integers(-5, 5).map(str), st.just("x" * 200_000))
# Values a JSON field may hold instead of its type, including a lone surrogate (valid JSON, not valid Unicode).
JSON_VALUE = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8), ODD, st.just("\ud800")
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def written(name: str, data: bytes) -> Path:
    path = Path(tempfile.mkdtemp()) / name
    path.write_bytes(data)
    return path


def csv_file(header: list[str], rows: list[list[str]]) -> Path:
    path = Path(tempfile.mkdtemp()) / "data.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


def assert_loads_or_reports(load, where: str) -> None:
    """``load()`` returns, or raises a UserError; every skipped-row message names ``where`` N (or ``where``s N-M, a
    record over several lines) and a field."""
    try:
        loaded = load()
    except UserError:
        return
    for message in loaded.skipped:
        assert (re.search(rf"{where}s? ?\[?\d", message) and "field" in message) or "not a JSON object" in message, (
            message
        )


# --- the MCQ answer parser ---


@FEW
@given(st.one_of(st.none(), st.text(), st.text(alphabet="ABCDZabcdz ,.;:()/\n-", max_size=40)))
def test_the_parser_returns_invalid_z_or_sorted_unique_letters(raw):
    answer = parse_answer(raw)
    assert answer in ("INVALID", "Z") or (list(answer) == sorted(set(answer)) and set(answer) <= set("ABCD") and answer)


@FEW
@given(st.sets(st.sampled_from("ABCD"), min_size=1), st.sampled_from([", ", " and ", "/", " "]))
def test_the_parser_reads_back_any_set_of_letters(letters, separator):
    assert parse_answer(f"Answer: {separator.join(sorted(letters, reverse=True))}.") == "".join(sorted(letters))


# --- loaders ---

ESGENIUS_COLUMNS = ["query_id", "query", "answer", "A", "B", "C", "D"]


@FEW
@given(st.lists(st.lists(CELL, min_size=0, max_size=9), min_size=1, max_size=5))
@example([["1", "q\x00", "A", "a", "b", "c", "d"], ["2", "x" * 200_000, "B", "a", "b", "c", "d"], ["3", '"', "A"]])
def test_esgenius_csv_rows(rows):
    path = csv_file(ESGENIUS_COLUMNS, rows)
    assert_loads_or_reports(lambda: ESGeniusCSV(name="x", path=str(path)).load(), "line")


ESGBENCH_FIELDS = ["doc_name", "question", "answer", "category", "company", "kpi_name", "evidence"]
GOOD_GOLD = {
    "doc_name": "D",
    "question": "Q?",
    "answer": "A",
    "category": "C",
    "evidence": [{"evidence_page_num": 0, "evidence_text": "t"}],
}


@FEW
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries({}, optional=dict.fromkeys(ESGBENCH_FIELDS, JSON_VALUE)),
            st.builds(lambda field, value: {**GOOD_GOLD, field: value}, st.sampled_from(ESGBENCH_FIELDS), JSON_VALUE),
            st.builds(
                lambda value: {**GOOD_GOLD, "evidence": [{"evidence_page_num": value, "evidence_text": value}]},
                JSON_VALUE,
            ),
            JSON_VALUE,
        ),
        min_size=1,
        max_size=5,
    )
)
@example([{**GOOD_GOLD, "doc_name": "\ud800"}, {**GOOD_GOLD, "question": "x" * 200_000}])
def test_esgbench_gold_lines(rows):
    path = written("gold.jsonl", "\n".join(json.dumps(row) for row in rows).encode())
    assert_loads_or_reports(lambda: ESGBenchGold("g", str(path)).load(), "line")


CHUNK = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(
            JSON_VALUE,
            st.fixed_dictionaries(
                {},
                optional={
                    "paragraph": JSON_VALUE,
                    "classification": JSON_VALUE,
                    "report_name": JSON_VALUE,
                    "page_number": JSON_VALUE,
                },
            ),
        ),
        "qa_pairs_factoid": st.one_of(
            JSON_VALUE,
            st.fixed_dictionaries(
                {
                    "qa_pairs": st.lists(
                        st.one_of(
                            JSON_VALUE,
                            st.fixed_dictionaries({}, optional={"question": JSON_VALUE, "answer": JSON_VALUE}),
                        ),
                        max_size=3,
                    )
                }
            ),
        ),
    },
)
TABLE = st.fixed_dictionaries(
    {},
    optional={
        "meta_data": st.one_of(
            JSON_VALUE, st.fixed_dictionaries({}, optional={"paragraph": JSON_VALUE, "table_caption": JSON_VALUE})
        ),
        "qa_pairs": st.one_of(
            JSON_VALUE,
            st.lists(st.fixed_dictionaries({}, optional={"question": JSON_VALUE, "answer": JSON_VALUE}), max_size=3),
        ),
    },
)


@FEW
@given(st.lists(st.one_of(CHUNK, JSON_VALUE), max_size=4), st.lists(st.one_of(TABLE, JSON_VALUE), max_size=3))
@example(
    [{"metadata": {"paragraph": "\ud800"}, "qa_pairs_factoid": {"qa_pairs": [{"question": "Q", "answer": "\udfff"}]}}],
    [{"metadata": {"paragraph": "p", "classification": ["a"]}, "qa_pairs": [{"question": "Q", "answer": "A"}]}],
)
def test_sustainableqa_records(chunks, tables):
    folder = written("test.json", json.dumps({"all_chunks_qas": chunks, "all_table_qas": tables}).encode()).parent
    assert_loads_or_reports(lambda: SustainableQA("s", str(folder)).load(), r"(all_chunks_qas|all_table_qas)")


CLIMRETRIEVE_HEADER = ["", "paragraph", "report", "question", "relevant_text", "relevance"]


@FEW
@given(
    st.lists(
        st.lists(
            st.one_of(CELL, st.sampled_from(["0", "3", "2.0", "4", "-1", "nan", "1e400", "high"])),
            min_size=0,
            max_size=7,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_climretrieve_report_level_rows(rows):
    path = csv_file(CLIMRETRIEVE_HEADER, rows)
    assert_loads_or_reports(lambda: ClimRetrieveReportLevel("c", str(path)).load(), "line")
