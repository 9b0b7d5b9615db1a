"""builder=esgenius: options from the corpus's spans (the pool, distractor rounds), stage accounting and
difficulty refinement on scripted outputs, balanced and seeded gold letters, rows in the ESGenius_w_ref
layout, seeded solver order, review-file errors; and a SmolLM2 build on the shared report PDFs that
loads and evaluates."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import compose_config
from helpers import composed
from hydra.utils import instantiate
from omegaconf import OmegaConf

from esgexp.backends.base import Backend, Response
from esgexp.builders.context import BuildContext
from esgexp.builders.esgenius import Question, SpanPool, gold_letters, letter_rows, read_review, shuffled
from esgexp.builders.generate import StructuredGenerator
from esgexp.builders.report import BuildReport
from esgexp.core.config import CONF_DIR
from esgexp.core.records import Passage
from esgexp.data.corpus import Corpus
from esgexp.data.esgenius import ESGeniusCSV
from esgexp.errors import UserError

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
    questions = [
        Question(f"q{i}", PASSAGE, f"Question {i}?", f"right {i}", [f"w{i}a", f"w{i}b", f"w{i}c"]) for i in range(8)
    ]
    rows = letter_rows(questions, seed=3)
    assert [r["answer"] for r in rows] == gold_letters(8, seed=3)
    for i, row in enumerate(rows):
        assert row[row["answer"]] == f"right {i}" and row["Z"] == "Not sure"
        assert [row[x] for x in "ABCD" if x != row["answer"]] == [
            f"w{i}a",
            f"w{i}b",
            f"w{i}c",
        ]  # distractors keep their order
        assert (row["ref_doc"], row["ref_page"], row["source_text"]) == ("acme", "1", PASSAGE.text)


def test_solver_order_is_seeded_per_question():
    question = Question("q", PASSAGE, "Q?", "right", ["a", "b", "c"])
    options, letter = shuffled(question, "42:m:q:Q?")
    assert options[letter] == "right" and sorted(options.values()) == ["a", "b", "c", "right"]
    assert shuffled(question, "42:m:q:Q?") == (options, letter)


def write_review(
    path, rows, columns=("query_id", "decision", "query", "correct", "distractor_1", "distractor_2", "distractor_3")
):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_review_file_errors_name_the_line_and_field(tmp_path):
    row = {
        "query_id": "q",
        "decision": "maybe",
        "query": "Q?",
        "correct": "r",
        "distractor_1": "a",
        "distractor_2": "b",
        "distractor_3": "c",
    }
    with pytest.raises(UserError, match=r"line 2: field 'decision': 'maybe' is not one of keep, edit, drop"):
        read_review(write_review(tmp_path / "r.csv", [row]))
    with pytest.raises(UserError, match=r"line 2: field 'correct': empty in an edited row"):
        read_review(write_review(tmp_path / "r.csv", [{**row, "decision": "edit", "correct": " "}]))
    with pytest.raises(UserError, match=r"missing column.*decision"):
        read_review(write_review(tmp_path / "r.csv", [{"query_id": "q"}], columns=("query_id",)))
    with pytest.raises(UserError, match="file not found"):
        read_review(tmp_path / "absent.csv")


# Three reports with shares, years and names enough for distractors; the last passage names no span.
TEXTS = {
    "alpha": [
        "In 2023 women held 38% of management roles at Alpha AG, up from 31% in 2021.",
        "Alpha AG bought 64% of its electricity from renewable sources in 2022.",
    ],
    "beta": ["Beta SE cut water use by 12% in 2020 and recycled 85% of its waste."],
    "gamma": ["no figure or name is given here, only words in lower case."],
}
CORPUS_PASSAGES = [
    Passage(f"{doc}#{i}", doc, text, i + 1, i + 1) for doc, texts in TEXTS.items() for i, text in enumerate(texts)
]


def test_the_pool_offers_answers_with_three_distractors_of_their_kind_and_never_a_used_one():
    pool = SpanPool(CORPUS_PASSAGES, max_chars=100)
    # shares: 38%, 31%, 64%, 12%, 85%; years: 2023, 2021, 2022, 2020; names: Alpha AG, Beta SE (too few)
    assert pool.answers(CORPUS_PASSAGES[0], TEXTS["alpha"][0]) == ["2023", "38%", "31%", "2021"]
    assert pool.answers(CORPUS_PASSAGES[-1], TEXTS["gamma"][0]) == []
    # same document first, corpus order after; the correct option and those chosen are never offered
    assert pool.distractors("38%", ["38%"], "beta", 20) == ["12%", "85%", "31%", "64%"]
    assert pool.distractors("38%", ["38%", "12%"], "alpha", 2) == ["31%", "64%"]
    assert pool.distractors("2023", ["2023", "2021", "2022", "2020"], "alpha", 20) == []


def test_a_span_in_many_of_its_reports_passages_is_no_correct_option_but_still_a_distractor():
    texts = [
        "In 2023 Alpha AG cut its emissions by 12%.",
        "In 2023 Alpha AG bought 64% green power.",
        "In 2023 waste fell 85%.",
        "Water use was 31% lower in 2021.",
        "In 2020 women held 38% of roles, against 2022 targets.",
    ]
    passages = [Passage(f"alpha#{i}", "alpha", text, 1, 1) for i, text in enumerate(texts)]
    pool = SpanPool(passages, max_chars=100, max_share=0.5)
    assert pool.answers(passages[0], texts[0]) == [
        "12%"
    ]  # 2023 is in 3 of 5 passages; Alpha AG has too few of its kind
    assert "2023" in pool.distractors("2021", ["2021"], "alpha", 20)


class FirstChoice(Backend):
    """Answers every structured request with the first allowed value of each property (a question where
    the schema asks one); the distractor prompts are logged. ``question`` maps a prompt's start to it."""

    name = "first-choice"

    def __init__(self, question: str = "Which share of management roles did women hold?"):
        self.question = question
        self.distractor_prompts: list[str] = []

    def identity(self) -> dict:
        return {"backend": self.name}

    def supports(self, kind: str) -> bool:
        return kind == "generate"

    def run(self, requests, on_results) -> None:
        responses = []
        for request in requests:
            properties = json.loads(request.json_schema)["properties"]
            if "distractor" in properties:
                self.distractor_prompts.append(request.prompt)
            answer = {name: sub["enum"][0] if "enum" in sub else self.question for name, sub in properties.items()}
            responses.append(Response(request.id, output=json.dumps(answer)))
        on_results(responses)


def esgenius_builder(**overrides):
    node = OmegaConf.load(CONF_DIR / "builder" / "esgenius.yaml")
    return instantiate(OmegaConf.merge(node, {"min_chars": 20, "min_sentences": 1, **overrides}), _convert_="all")


def scripted_build(tmp_path: Path, backend: Backend, solvers: dict | None = None, **overrides):
    corpus = Corpus(tmp_path / "corpus", CORPUS_PASSAGES, {})
    generator = StructuredGenerator(backend, 128, tmp_path / "rejected.jsonl", progress=False)
    report = BuildReport()
    path = esgenius_builder(solvers=sorted(solvers or {}), **overrides).build(
        corpus, BuildContext(generator, report, tmp_path, 42, (solvers or {}).get)
    )
    return path, report.to_dict()


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_options_from_the_passage_are_four_different_spans_of_one_kind(tmp_path):
    backend = FirstChoice()
    path, report = scripted_build(tmp_path, backend)
    stages = report["stages"]
    assert stages["candidates"]["discarded"] == {"no_answer_span": 1}  # gamma
    assert stages["candidates"]["n_out"] == 3
    for number in (1, 2, 3):
        assert stages[f"generate_distractor_{number}"]["n_in"] == stages[f"generate_distractor_{number}"]["n_out"] == 3
    rows = read_rows(path)
    assert len(rows) == report["n_items"] == 3
    first = {r["query_id"]: r for r in rows}["alpha#0"]
    # the first span of the passage with enough of its kind is 2023; the pool's years follow, same report first
    assert sorted(first[x] for x in "ABCD") == ["2020", "2021", "2022", "2023"] and first[first["answer"]] == "2023"
    assert first["Z"] == "Not sure" and first["ref_doc"] == "alpha" and first["ref_page"] == "1"
    # each distractor prompt lists the options chosen before it
    assert any("Options so far: 2023; 2021\n" in prompt for prompt in backend.distractor_prompts)
    loaded = ESGeniusCSV(name="built", path=str(path)).load()
    assert len(loaded.items) == 3 and not loaded.skipped


def test_a_question_that_states_its_answer_is_asked_again_then_discarded(tmp_path):
    with pytest.raises(
        UserError, match=r"stage generate: every one of 3 outputs was rejected \(answer_in_question 3\)"
    ):
        scripted_build(tmp_path, FirstChoice(question="Which was it: 2023, 64% or 12%?"))
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in rejected} == {"answer_in_question"} and len(rejected) == 3


FIRST_SPANS = {
    "alpha#0": "2023",
    "alpha#1": "64%",
    "beta#0": "12%",
}  # each passage's first offered span: FirstChoice's answer


class Solver(Backend):
    """Answers a solver prompt with the letter of the right option when it ``knows``, else Z."""

    name = "solver"

    def __init__(self, knows: bool):
        self.knows = knows
        self.n_prompts = 0

    def identity(self) -> dict:
        return {"backend": self.name}

    def supports(self, kind: str) -> bool:
        return kind == "logprob"

    def run(self, requests, on_results) -> None:
        responses = []
        for request in requests:
            self.n_prompts += 1
            options = dict(
                line.split(": ", 1) for line in request.prompt.splitlines() if line[:2] in ("A:", "B:", "C:", "D:")
            )
            right = next(letter for letter, text in options.items() if text == FIRST_SPANS[request.id])
            responses.append(Response(request.id, output=right if self.knows else "Z"))
        on_results(responses)


def test_questions_every_solver_gets_right_are_rewritten_then_flagged(tmp_path):
    easy = Solver(knows=True)
    path, report = scripted_build(tmp_path, FirstChoice(), {"sharp": easy}, rounds=2)
    stages = report["stages"]
    # every question is solved, rewritten twice (the rewrite is solved again), then flagged
    assert stages["rewrite_1"]["n_in"] == stages["rewrite_2"]["n_in"] == 3
    assert stages["refine"] == {"n_in": 3, "n_out": 3, "n_repaired": 0, "n_discarded": 0, "discarded": {}}
    assert easy.n_prompts == 9
    assert [r["flag"] for r in read_rows(path)] == ["too_easy"] * 3
    review = read_rows(tmp_path / "review.csv")
    assert [r["solver_answers"] for r in review] == ["sharp: right"] * 3 and [r["decision"] for r in review] == [
        "keep"
    ] * 3


def test_a_question_a_solver_misses_is_kept_as_it_is(tmp_path):
    path, report = scripted_build(tmp_path, FirstChoice(), {"blind": Solver(knows=False)})
    assert "rewrite_1" not in report["stages"] and [r["flag"] for r in read_rows(path)] == [""] * 3


def test_smollm2_build_on_the_shared_reports_loads_evaluates_and_a_rerun_asks_nothing(
    shared_corpus, tmp_path, empty_db, tiny_model_dir
):
    """The default model under constrained decoding, on the two real report PDFs: every item has four
    different options with the correct one in its source passage, and evaluates with no conversion step
    (by the tiny random Llama: what is shown there is that the file runs as a job)."""

    from esgexp.builders.run import run_build
    from esgexp.run import run_job

    (tmp_path / "mlruns").mkdir()  # the build's and the evaluation's store, its tables already made
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")

    overrides = [
        f"paths.root_dir={tmp_path}",
        f"paths.request_cache={tmp_path}/requests.sqlite",
        f"out={tmp_path}/built",
        "progress=false",
        "trainer.progress_bar=false",
        "builder=esgenius",
        f"corpus={shared_corpus}",
        "builder.max_candidates=2",
        "builder.max_passage_chars=500",
        "builder.max_question_chars=100",
        "builder.max_new_tokens=64",
    ]
    dataset = run_build(composed("build", overrides))
    report = json.loads((tmp_path / "built" / "build_report.json").read_text())
    stages = report["stages"]
    assert stages["candidates"]["n_out"] == 2 and stages["generate"]["n_in"] == 2
    for name in ("generate", "generate_distractor_1", "generate_distractor_2", "generate_distractor_3"):
        assert stages[name]["n_in"] == stages[name]["n_out"] + stages[name]["n_discarded"], name
    rows = read_rows(dataset)
    assert len(rows) == report["n_items"] == stages["generate_distractor_3"]["n_out"] >= 1
    for row in rows:
        options = [row[x] for x in "ABCD"]
        assert len(set(options)) == 4 and row[row["answer"]] in row["source_text"] and row["query"].endswith("?")
        assert row["ref_doc"] in ("1_1_AG", "MAX_AUTOMATION_SE") and row["Z"] == "Not sure"
    counts = Counter(r["answer"] for r in rows)
    assert max(counts.values()) - min(counts.get(x, 0) for x in "ABCD") <= 1  # balanced gold letters
    loaded = ESGeniusCSV(name="built", path=str(dataset)).load()
    assert len(loaded.items) == len(rows) and not loaded.skipped

    run_build(composed("build", [*overrides, "resume=true"]))
    again = json.loads((tmp_path / "built" / "build_report.json").read_text())
    assert again["requests"]["n_requests"] == 0 and again["stages"] == stages and read_rows(dataset) == rows

    cfg = compose_config(
        tmp_path,
        f"paths.output_dir={tmp_path}/eval",
        "experiment=esgenius_zero_shot",
        f"dataset.path={dataset}",
        "model=local",
        f"model.path={tiny_model_dir}",
    )
    metrics = run_job(cfg)
    assert metrics["n_items"] == len(rows) and 0 <= metrics["accuracy"] <= 1


def test_contents_pages_and_key_figure_rows_are_not_prose():
    from esgexp.builders.candidates import prose_sentences

    assert prose_sentences("Governance Information 46 Responsible Corporate Governance 47 EU-Taxonomy 55 Annex 62") == 0
    assert prose_sentences("2023 2022 2021 Revenue (in €m) 4,096.7 3,963.7 3,909.7 EBITDA (in €m) 653.8 693.3") == 0
    assert (
        prose_sentences(
            "In 2023 women held 38% of management roles. We bought 64% of our power from renewable plants. Thanks!"
        )
        == 2
    )


def test_an_experts_review_keeps_edits_and_drops_rows_on_the_rebuild(tmp_path):
    scripted_build(tmp_path / "first", FirstChoice())
    review = read_rows(tmp_path / "first" / "review.csv")
    assert [r["query_id"] for r in review] == ["alpha#0", "beta#0", "alpha#1"] and {r["decision"] for r in review} == {
        "keep"
    }
    review[0].update(
        decision="edit", query="In which year did women hold 38% of management roles?", distractor_1="2019"
    )
    review[1]["decision"] = "drop"
    edited = write_review(tmp_path / "edited.csv", review, columns=tuple(review[0]))

    path, report = scripted_build(tmp_path / "second", FirstChoice(), review=str(edited))
    assert report["stages"]["review"] == {
        "n_in": 3,
        "n_out": 2,
        "n_repaired": 1,
        "n_discarded": 1,
        "discarded": {"dropped_by_reviewer": 1},
    }
    rows = {r["query_id"]: r for r in read_rows(path)}
    assert sorted(rows) == ["alpha#0", "alpha#1"]
    assert rows["alpha#0"]["query"] == "In which year did women hold 38% of management roles?"
    assert sorted(rows["alpha#0"][x] for x in "ABCD") == ["2019", "2020", "2022", "2023"]
    assert rows["alpha#0"][rows["alpha#0"]["answer"]] == "2023"
    assert not (tmp_path / "second" / "review.csv").exists()  # an imported review is not overwritten by a new export
