"""builder=esgenius: balanced, seeded gold letters; the review CSV round trip; a SmolLM2 build with one
solver whose output loads through the ESGenius loader and evaluates."""

from __future__ import annotations

import csv
import json
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


def test_esgenius_build_with_a_solver_then_a_review_evaluates(tmp_path):
    """Three passages -> questions SmolLM2 writes and answers (one rewrite round for those it solves); the
    review then drops one question and edits another on a rerun that asks no model anything."""
    from hydra import compose, initialize_config_dir
    from test_build import build_cfg, make_corpus

    from esgexp.build.run import run_build
    from esgexp.config import CONF_DIR
    from esgexp.data.esgenius import ESGeniusCSV
    from esgexp.run import run_job

    corpus = make_corpus(tmp_path / "report")
    settings = ("builder=esgenius", f"corpus={corpus}", "builder.min_chars=40", "builder.solvers=[smollm2-135m]",
                "builder.max_new_tokens=160", "builder.max_question_chars=60", "builder.max_option_chars=16")
    dataset = run_build(build_cfg(tmp_path, *settings))
    out = tmp_path / "built"
    report = json.loads((out / "build_report.json").read_text())
    stages = report["stages"]
    assert stages["candidates"]["n_out"] == 3 and stages["generate"]["n_in"] == 3
    assert stages["refine"]["n_in"] == stages["refine"]["n_out"] == report["n_items"]  # refinement rewrites or flags, never drops
    loaded = ESGeniusCSV(name="built", path=str(dataset)).load()
    n = report["n_items"]
    assert n >= 2 and len(loaded.items) == n and not loaded.skipped
    counts = Counter(item.answer for item in loaded.items)
    assert max(counts.values()) - min(counts.get(letter, 0) for letter in "ABCD") <= 1
    assert all(item.meta["ref_doc"] == "acme" and item.context for item in loaded.items)

    review = list(csv.DictReader((out / "review.csv").open()))
    assert [r["query_id"] for r in review] == [item.id for item in loaded.items]
    assert all(r["solver_answers"].startswith("smollm2-135m: ") for r in review)
    review[0]["decision"] = "drop"
    review[1].update(decision="edit", query="Which Scope 1 figure did Acme report for 2023?")
    edited = write_review(tmp_path / "reviewed.csv", review, columns=tuple(review[0]))
    dataset = run_build(build_cfg(tmp_path, *settings, "resume=true", f"builder.review={edited}"))
    again = json.loads((out / "build_report.json").read_text())
    assert again["requests"]["n_requests"] == 0 and again["solver_requests"]["smollm2-135m"]["n_requests"] == 0
    assert again["stages"]["review"] == {"n_in": n, "n_out": n - 1, "n_repaired": 1, "n_discarded": 1,
                                         "discarded": {"dropped_by_reviewer": 1}}
    reviewed = ESGeniusCSV(name="built", path=str(dataset)).load().items
    assert [item.id for item in reviewed] == [r["query_id"] for r in review[1:]]
    assert reviewed[0].question == "Which Scope 1 figure did Acme report for 2023?"

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"paths.root_dir={tmp_path}", f"paths.output_dir={tmp_path}/eval", "trainer.progress_bar=false",
                                           f"paths.request_cache={tmp_path}/requests.sqlite", "experiment=esgenius_zero_shot",
                                           f"dataset.path={dataset}", "scoring=logprob"])
    assert run_job(cfg)["n_items"] == n - 1
