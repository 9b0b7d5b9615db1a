"""builder=sustainableqa: the stage accounting on known model outputs (a scripted backend), the verbatim
span check, report splits; and a SmolLM2 build on generated report PDFs whose output loads through
dataset=sustainableqa and evaluates with experiment=sustainableqa_factoid."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import compose_config
from helpers import composed
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from esgexp.backends.base import Backend, Response
from esgexp.builders.candidates import span_candidates
from esgexp.builders.context import BuildContext
from esgexp.builders.generate import StructuredGenerator
from esgexp.builders.report import BuildReport
from esgexp.builders.sustainableqa import SustainableQABuilder, assign_splits, span_problem, split_sizes
from esgexp.core.config import CONF_DIR
from esgexp.core.records import Passage
from esgexp.data.corpus import Corpus
from esgexp.data.sustainableqa import SustainableQA
from esgexp.errors import UserError

ALPHA = "Alpha AG emitted 1,772 tCO2e in 2023.\nAlpha AG buys electricity from solar and wind plants."
TABLE = "| Activity | Turnover |\n| --- | --- |\n| Wind power | EUR 40m |\n| Solar power | EUR 10m |"
PASSAGES = [
    Passage("alpha#0", "alpha", ALPHA, 3, 3),
    Passage("alpha#1", "alpha", "Contents", 4, 4),
    Passage(
        "beta#0", "beta", "This report is published under German law and may be reproduced with permission only.", 1, 1
    ),
    Passage("gamma#t0", "gamma", TABLE, 7, 7, kind="table"),
]
TABLE_TEXT = "Wind power brought EUR 40m of turnover and solar power EUR 10m."


def pairs(*entries) -> str:
    return json.dumps({"qa_pairs": [dict(e) for e in entries]})


def between(prompt: str, start: str, end: str = "\n") -> str:
    return prompt.split(start, 1)[1].split(end, 1)[0]


class Scripted(Backend):
    """Known JSON answers per stage, recognised by the prompt's wording; each prompt is logged."""

    name = "scripted"

    def __init__(self, judge_only: bool = False):
        self.judge_only = judge_only
        self.prompts: list[str] = []

    def identity(self) -> dict:
        return {"backend": "scripted"}

    def supports(self, kind: str) -> bool:
        return kind == "generate"

    def run(self, requests, on_results) -> None:
        responses = []
        for request in requests:
            self.prompts.append(request.prompt)
            responses.append(Response(request.id, output=self.answer(request.prompt)))
        on_results(responses)

    def answer(self, prompt: str) -> str:
        if prompt.startswith("You check"):
            return self.judge(between(prompt, "Question: "))
        assert not self.judge_only, "a generation request reached the judge's backend"
        if prompt.startswith("Classify"):
            return json.dumps(
                {"category": "ESG" if "alpha" in prompt else "unrelated" if "beta" in prompt else "EU Taxonomy"}
            )
        if "factoid questions" in prompt:
            return pairs(
                {"question": "How much did Alpha AG emit in 2023?", "label": "x", "spans": ["1,772 tCO2e"]},
                {
                    "question": "From which plants does Alpha AG buy power?",
                    "label": "Plants",
                    "spans": ["solar", "wind", "solar"],
                },
                {"question": "How much did Alpha AG emit in 2022?", "label": "x", "spans": ["2,000 tCO2e"]},
            )
        if "explanatory questions" in prompt:
            return pairs(
                {"question": "How does Alpha AG source electricity?", "answer": "From solar and wind plants."},
                {"question": "Why is the sky blue?", "answer": "Light scatters."},
                {
                    "question": "How does ALPHA AG  source electricity?",
                    "answer": "It buys it from solar and wind plants.",
                },
            )
        if "Rewrite the table" in prompt:
            return json.dumps({"caption": "Turnover by activity", "passage": TABLE_TEXT})
        if "describing a table" in prompt:
            return pairs({"question": "What turnover came from wind power?", "answer": "EUR 40m"})
        if "was rejected" in prompt:
            question = between(prompt, "Question: ")
            if "plants" in question:  # a factoid rewrite with a span that is not in the passage
                return json.dumps({"question": "Which plants supply Alpha AG?", "spans": ["solar", "hydro"]})
            return json.dumps({"question": "What does Alpha AG buy from solar plants?", "answer": "Electricity."})
        raise AssertionError(f"unexpected prompt: {prompt[:80]}")

    @staticmethod
    def judge(question: str) -> str:
        scores = {"From which plants does Alpha AG buy power?": (2, 5), "Why is the sky blue?": (5, 1)}.get(
            question, (5, 4)
        )
        return json.dumps({"faithfulness": scores[0], "relevance": scores[1], "problem": "none"})


def builder(**overrides):
    node = OmegaConf.load(CONF_DIR / "builder" / "sustainableqa.yaml")
    settings = {
        "min_chars": 20,
        "nonfactoid_per_passage": 3,
        "spans_from_passage": False,
        **overrides,
    }  # free spans: the check decides
    return instantiate(OmegaConf.merge(node, settings), _convert_="all")


def scripted_build(tmp_path: Path, backend: Scripted, judge_backend: Scripted | None = None, **overrides):
    corpus = Corpus(tmp_path / "corpus", PASSAGES, {})
    generator = StructuredGenerator(backend, 256, tmp_path / "rejected.jsonl", progress=False)
    report = BuildReport()
    solver = {"smollm2-135m": judge_backend}.get
    folder = builder(**overrides).build(corpus, BuildContext(generator, report, tmp_path, 42, solver))
    return folder, report.to_dict()


def test_every_stage_counts_its_discards_by_reason_on_known_outputs(tmp_path):
    folder, report = scripted_build(tmp_path, Scripted())
    stages = {name: (s["n_in"], s["n_out"], s["n_repaired"], s["discarded"]) for name, s in report["stages"].items()}
    assert stages == {
        "candidates": (4, 3, 0, {"too_short": 1}),
        "classify": (3, 2, 0, {"unrelated": 1}),
        "factoid": (1, 1, 0, {}),
        "verbatim": (3, 2, 0, {"span_not_in_passage": 1}),  # 2,000 tCO2e is not in the passage
        "nonfactoid": (1, 1, 0, {}),
        "table_passage": (1, 1, 0, {}),
        "table_qa": (1, 1, 0, {}),
        "table_cells": (1, 1, 0, {}),  # EUR 40m is printed in the Wind power row's Turnover cell
        "judge": (6, 4, 0, {"irrelevant": 1, "unfaithful": 1}),
        "repair": (2, 1, 1, {"span_not_in_passage": 1}),  # the factoid rewrite names hydro; the sky one passes
        "dedupe": (5, 4, 0, {"repeated_question": 1}),  # the same question in other case and spacing
    }
    assert report["n_items"] == 4
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["stage"], r["reason"]) for r in rejected) == [
        ("alpha#0/f1", "repair", "span_not_in_passage"),
        ("alpha#0/f2", "verbatim", "span_not_in_passage"),
    ]

    # two reports with items: the first of the seeded order goes to test, the second to train
    splits = json.loads((folder / "splits.json").read_text())
    assert sorted(splits) == ["alpha", "gamma"] and sorted(splits.values()) == ["test", "train"]
    assert json.loads((folder / "validation.json").read_text()) == {"all_chunks_qas": [], "all_table_qas": []}
    items = {}
    for split in ("train", "test"):
        loaded = SustainableQA(name="built", path=str(folder), split=split).load()
        assert not loaded.skipped and {item.meta["report"] for item in loaded.items} == {
            r for r, s in splits.items() if s == split
        }
        items.update({(item.qtype, item.question): item for item in loaded.items})
    assert sorted(items) == [
        ("factoid", "How much did Alpha AG emit in 2023?"),
        ("non_factoid", "How does Alpha AG source electricity?"),
        ("non_factoid", "What does Alpha AG buy from solar plants?"),  # the repaired pair
        ("table", "What turnover came from wind power?"),
    ]
    emitted = items[("factoid", "How much did Alpha AG emit in 2023?")]
    assert emitted.answers == ("1,772 tCO2e",) and emitted.context == (ALPHA,)
    assert emitted.meta == {"category": "ESG", "report": "alpha", "page": 3, "chunk": 0, "tag": "ESG"}
    table = items[("table", "What turnover came from wind power?")]
    assert table.context == (f"Turnover by activity\n{TABLE_TEXT}",) and table.meta["category"] == "EU Taxonomy"
    (table_record,) = json.loads((folder / f"{splits['gamma']}.json").read_text())["all_table_qas"]
    assert table_record["qa_pairs"][0]["answer_cells"] == [{"row": "Wind power", "column": "Turnover"}]
    chunk = json.loads((folder / f"{splits['alpha']}.json").read_text())["all_chunks_qas"][0]
    assert chunk["spans"] == {"groups": [{"label": "Individual", "spans": ["1,772 tCO2e"]}]}
    assert chunk["metadata"]["passage_id"] == "alpha#0"


def test_a_table_answer_no_cell_prints_is_discarded_and_named(tmp_path):
    """A table pair whose answer is a figure of the generated passage only (a sum: EUR 50m) never reaches the judge."""

    class Summing(Scripted):
        def answer(self, prompt: str) -> str:
            if "describing a table" in prompt:
                return pairs(
                    {"question": "What turnover came from solar power?", "answer": "EUR 10m"},
                    {"question": "What turnover came from wind and solar power?", "answer": "EUR 50m"},
                )
            return super().answer(prompt)

    folder, report = scripted_build(tmp_path, Summing())
    assert report["stages"]["table_cells"] == {
        "n_in": 2,
        "n_out": 1,
        "n_repaired": 0,
        "n_discarded": 1,
        "discarded": {"answer_in_no_cell": 1},
    }
    rejected = [json.loads(line) for line in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert ("gamma#t0/t1", "table_cells", "answer_in_no_cell") in {(r["id"], r["stage"], r["reason"]) for r in rejected}
    splits = json.loads((folder / "splits.json").read_text())
    (table,) = json.loads((folder / f"{splits['gamma']}.json").read_text())["all_table_qas"]
    assert [(qa["answer"], qa["answer_cells"]) for qa in table["qa_pairs"]] == [
        ("EUR 10m", [{"row": "Solar power", "column": "Turnover"}])
    ]


def test_a_multi_span_group_is_kept_with_its_label_and_spans_joined(tmp_path):
    """With the judge passing everything, the solar/wind group survives: one answer, its spans once each."""

    class Lenient(Scripted):
        @staticmethod
        def judge(question):
            return json.dumps({"faithfulness": 5, "relevance": 5, "problem": "none"})

    folder, report = scripted_build(tmp_path, Lenient())
    assert report["stages"]["repair"]["n_in"] == 0 and report["n_items"] == 5
    split = json.loads((folder / "splits.json").read_text())["alpha"]
    chunk = json.loads((folder / f"{split}.json").read_text())["all_chunks_qas"][0]
    assert chunk["spans"]["groups"][0] == {"label": "Plants", "spans": ["solar", "wind"]}
    assert chunk["qa_pairs_factoid"]["qa_pairs"][1]["answer"] == "solar; wind"


def test_a_judge_model_of_its_own_answers_every_judge_request(tmp_path):
    main, judge = Scripted(), Scripted(judge_only=True)
    _, report = scripted_build(tmp_path, main, judge, judge="smollm2-135m")
    assert report["n_items"] == 4
    assert not any(p.startswith("You check") for p in main.prompts)
    assert sum(p.startswith("You check") for p in judge.prompts) == 6 + 1  # every pair, then the one repaired pair


def test_bad_settings_are_named_when_the_builder_is_made():
    """Hydra's instantiate wraps the UserError; the CLI prints it as one line."""
    with pytest.raises(
        InstantiationException,
        match=r"builder.judge: no model config 'nope' \(conf/model/nope.yaml\); known: .*smollm2-135m",
    ):
        builder(judge="nope")
    with pytest.raises(InstantiationException, match=r"builder.splits: give a share .* train, validation, test"):
        builder(splits={"dev": 0.2})
    with pytest.raises(UserError, match=r"builder.splits: .*got \{'train': 0, 'validation': 0, 'test': 0\}"):
        SustainableQABuilder(name="s", prompts={}, categories=[], splits={"train": 0, "validation": 0, "test": 0})


def test_span_check_normalises_like_ingestion_and_names_the_missing_span():
    assert span_problem(("1,772 tCO2e", "solar"), ALPHA) is None
    assert span_problem(("Alpha AG buys",), "Alpha  AG\nbuys") is None
    assert span_problem(("Solar",), ALPHA) == ("span_not_in_passage", "span 'Solar' is not in the passage")
    assert span_problem(("solar", "  "), ALPHA) == ("empty_span", "a span is empty")


def test_span_choices_are_the_passages_figures_years_and_names():
    text = "Scope 1 emissions of Alpha AG were 1,772 tCO2e in 2023, with 4,200 staff. EUR 40m went to Science Based Targets work."
    assert span_candidates(text, 80) == [
        "Scope 1",
        "Alpha AG",
        "1,772 tCO2e",
        "2023",
        "EUR 40m",
        "Science Based Targets",
    ]
    assert span_candidates(text, 8) == ["Scope 1", "Alpha AG", "2023", "EUR 40m"]
    spans = builder(spans_from_passage=True)._spans(text)
    assert spans["items"] == {"type": "string", "enum": span_candidates(text, 80)} and spans["maxItems"] == 4


@pytest.mark.parametrize(
    "n, sizes",
    [
        (10, (8, 1, 1)),
        (3, (1, 1, 1)),
        (4, (2, 1, 1)),
        (2, (1, 0, 1)),
        (1, (0, 0, 1)),
        (0, (0, 0, 0)),
        (61, (49, 6, 6)),
    ],
)
def test_split_sizes_give_each_split_a_report_when_there_are_enough(n, sizes):
    got = split_sizes(n, {"train": 0.8, "validation": 0.1, "test": 0.1})
    assert (got["train"], got["validation"], got["test"]) == sizes


def test_reports_are_split_by_seed_and_never_shared():
    reports = [f"r{i:02d}" for i in range(20)]
    split_of = assign_splits(reports, {"train": 0.8, "validation": 0.1, "test": 0.1}, seed=42)
    assert sorted(split_of) == reports  # every report in exactly one split
    assert sorted(list(split_of.values()).count(s) for s in ("train", "validation", "test")) == [2, 2, 16]
    assert split_of == assign_splits(list(reversed(reports)), {"train": 0.8, "validation": 0.1, "test": 0.1}, seed=42)
    assert split_of != assign_splits(reports, {"train": 0.8, "validation": 0.1, "test": 0.1}, seed=7)
    assert not re.search(
        "validation", json.dumps(assign_splits(reports, {"train": 0.5, "validation": 0, "test": 0.5}, seed=1))
    )


# ---- the real default model ------------------------------------------------------------------------

REPORT = [
    ["Scope 1 emissions of Alpha AG were 1,772 tCO2e in 2023.", "Alpha AG buys electricity from solar and wind plants."]
]


def build_cfg(root: Path, corpus: Path, *overrides: str):
    """A small build: one passage, one factoid pair, no other kinds; the judge keeps every pair it can score."""

    base = [
        f"paths.root_dir={root}",
        f"paths.request_cache={root}/requests.sqlite",
        f"out={root}/built",
        "progress=false",
        "trainer.progress_bar=false",
        "builder=sustainableqa",
        f"corpus={corpus}",
        "builder.max_new_tokens=100",
        "builder.factoid_per_passage=1",
        "builder.nonfactoid_per_passage=0",
        "builder.table_per_passage=0",
        "builder.max_spans=1",
        "builder.max_question_chars=60",
        "builder.min_score=1",
    ]
    return composed("build", overrides=[*base, *overrides])


def with_store(root: Path, empty_db: Path) -> Path:
    """``root`` with its MLflow store (paths.mlruns_dir) a copy of one whose tables are made: no migrations."""
    (root / "mlruns").mkdir()
    shutil.copy(empty_db, root / "mlruns" / "mlflow.db")
    return root


def test_smollm2_build_gives_verbatim_factoids_that_evaluate_and_a_rerun_asks_nothing(
    tmp_path, empty_db, tiny_model_dir
):
    from pdf_factory import write_pdf

    from esgexp.builders.run import run_build
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest
    from esgexp.run import run_job

    with_store(tmp_path, empty_db)
    write_pdf(tmp_path / "pdfs" / "alpha.pdf", REPORT)
    ingest(tmp_path / "pdfs", tmp_path / "corpus", CharChunker(min_chars=5, max_chars=400), progress=False)
    dataset = run_build(build_cfg(tmp_path, tmp_path / "corpus"))
    out = tmp_path / "built"
    assert dataset == out / "sustainableqa"
    report = json.loads((out / "build_report.json").read_text())
    stages = report["stages"]
    assert stages["candidates"] == {"n_in": 1, "n_out": 1, "n_repaired": 0, "n_discarded": 0, "discarded": {}}
    for name in ("factoid", "verbatim", "judge", "repair", "dedupe"):
        assert stages[name]["n_in"] == stages[name]["n_out"] + stages[name]["n_discarded"], name
    assert stages["dedupe"]["n_in"] == stages["judge"]["n_out"] + stages["repair"]["n_out"]
    assert stages["nonfactoid"]["n_in"] == stages["table_passage"]["n_in"] == 0

    # one report: all of it in test; the items are schema-valid and their spans verbatim
    assert json.loads((dataset / "splits.json").read_text()) == {"alpha": "test"}
    chunks = json.loads((dataset / "test.json").read_text())["all_chunks_qas"]
    assert json.loads((dataset / "train.json").read_text()) == {"all_chunks_qas": [], "all_table_qas": []}
    loaded = SustainableQA(name="built", path=str(dataset), qtypes=["factoid"]).load()
    assert len(loaded.items) == report["n_items"] == stages["dedupe"]["n_out"] >= 1 and not loaded.skipped
    for chunk in chunks:
        assert chunk["metadata"]["classification"] in ("EU Taxonomy", "ESG", "Sustainability")
        for pair in chunk["qa_pairs_factoid"]["qa_pairs"]:
            assert pair["answer"] in chunk["metadata"]["paragraph"] and pair["type"] == "Factoid"
    card = json.loads((out / "provenance.json").read_text())
    assert card["builder"]["name"] == "sustainableqa" and card["n_items"] == report["n_items"]

    # the same build again into the same folder: every answer from the request cache, the same files
    before = {name: (dataset / name).read_text() for name in ("train.json", "validation.json", "test.json")}
    run_build(build_cfg(tmp_path, tmp_path / "corpus", "resume=true"))
    again = json.loads((out / "build_report.json").read_text())
    assert again["requests"]["n_requests"] == 0 and again["stages"] == stages
    assert before == {name: (dataset / name).read_text() for name in before}

    # evaluated with no conversion step (by the tiny random Llama: what is shown is that the files run as a job)
    cfg = compose_config(
        tmp_path,
        f"paths.output_dir={tmp_path}/eval",
        "experiment=sustainableqa_factoid",
        f"dataset.path={dataset}",
        "model=local",
        f"model.path={tiny_model_dir}",
        "scoring.max_new_tokens=8",
    )
    metrics = run_job(cfg)
    assert metrics["n_items"] == len(loaded.items) and 0 <= metrics["factoid/f1"] <= 1


def test_smollm2_build_on_the_shared_reports_gives_verbatim_factoids(shared_corpus, tmp_path, empty_db):
    """The default model and constrained decoding on the two real report PDFs (the judge keeps what it can
    score): factoid pairs whose spans are verbatim in their paragraphs, loaded by dataset=sustainableqa."""
    from esgexp.builders.run import run_build

    dataset = run_build(build_cfg(with_store(tmp_path, empty_db), shared_corpus, "builder.max_candidates=2"))
    report = json.loads((tmp_path / "built" / "build_report.json").read_text())
    assert report["stages"]["candidates"]["n_out"] == 2
    splits = json.loads((dataset / "splits.json").read_text())
    assert set(splits) <= {"1_1_AG", "MAX_AUTOMATION_SE"}
    n_pairs = 0
    for name in ("train", "validation", "test"):
        chunks = json.loads((dataset / f"{name}.json").read_text())["all_chunks_qas"]
        for chunk in chunks:
            for pair in chunk["qa_pairs_factoid"]["qa_pairs"]:
                assert all(span in chunk["metadata"]["paragraph"] for span in pair["answer"].split("; ")) and pair[
                    "question"
                ].endswith("?")
                n_pairs += 1
        if chunks:  # a split with no report (two reports, three splits) holds nothing to load
            loaded = SustainableQA(name="built", path=str(dataset), split=name, qtypes=["factoid"]).load()
            assert (
                len(loaded.items) == sum(len(c["qa_pairs_factoid"]["qa_pairs"]) for c in chunks) and not loaded.skipped
            )
    assert n_pairs == report["n_items"] >= 1
