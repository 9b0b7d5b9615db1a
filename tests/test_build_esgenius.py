"""builder=esgenius: balanced, seeded gold letters, rows in the ESGenius_w_ref layout, seeded solver order,
review-file errors. (SmolLM2 repeats an option in every question of the test report even after the retry,
so no end-to-end build with it here.)"""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from esgexp.build.esgenius import Question, gold_letters, letter_rows, read_review, shuffled
from esgexp.errors import UserError
from esgexp.records import Passage

PASSAGE = Passage("acme#0", "acme", "Scope 1 emissions were 1,772.6 tCO2e in 2023.", 1, 1)


@pytest.mark.parametrize("n", [4, 10, 37])
def test_gold_letters_are_balanced_and_follow_no_row_cycle(n):
    letters = gold_letters(n, seed=42)
    counts = Counter(letters)
    assert set(counts) == set("ABCD") and max(counts.values()) - min(counts.values()) <= 1
    assert letters == gold_letters(n, seed=42) and letters != gold_letters(n, seed=7)
    if n > 4:
        assert letters != [("ABCD" * n)[i] for i in range(n)]


def test_rows_put_the_correct_option_at_its_gold_letter():
    questions = [Question(f"q{i}", PASSAGE, f"Question {i}?", f"right {i}", [f"w{i}a", f"w{i}b", f"w{i}c"]) for i in range(8)]
    rows = letter_rows(questions, seed=3)
    assert [r["answer"] for r in rows] == gold_letters(8, seed=3)
    for i, row in enumerate(rows):
        assert row[row["answer"]] == f"right {i}" and row["Z"] == "Not sure"
        assert [row[x] for x in "ABCD" if x != row["answer"]] == [f"w{i}a", f"w{i}b", f"w{i}c"]  # distractors keep their order
        assert (row["ref_doc"], row["ref_page"], row["source_text"]) == ("acme", "1", PASSAGE.text)


def test_solver_order_is_seeded_per_question():
    question = Question("q", PASSAGE, "Q?", "right", ["a", "b", "c"])
    options, letter = shuffled(question, "42:m:q:Q?")
    assert options[letter] == "right" and sorted(options.values()) == ["a", "b", "c", "right"]
    assert shuffled(question, "42:m:q:Q?") == (options, letter)


def write_review(path, rows, columns=("query_id", "decision", "query", "correct", "distractor_1", "distractor_2", "distractor_3")):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_review_file_errors_name_the_line_and_field(tmp_path):
    row = {"query_id": "q", "decision": "maybe", "query": "Q?", "correct": "r", "distractor_1": "a", "distractor_2": "b", "distractor_3": "c"}
    with pytest.raises(UserError, match=r"line 2: field 'decision': 'maybe' is not one of keep, edit, drop"):
        read_review(write_review(tmp_path / "r.csv", [row]))
    with pytest.raises(UserError, match=r"line 2: field 'correct': empty in an edited row"):
        read_review(write_review(tmp_path / "r.csv", [{**row, "decision": "edit", "correct": " "}]))
    with pytest.raises(UserError, match="missing column.*decision"):
        read_review(write_review(tmp_path / "r.csv", [{"query_id": "q"}], columns=("query_id",)))
    with pytest.raises(UserError, match="file not found"):
        read_review(tmp_path / "absent.csv")
