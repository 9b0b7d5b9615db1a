"""python -m esgexp.build: a generated 3-page report -> corpus -> builder=esgbench with SmolLM2 under
constrained decoding -> a file the ESGBench loader reads and the qa experiment evaluates; a rerun asks
nothing; bad input stops with a clear message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli import run_cli
from conftest import compose_config
from helpers import composed
from pdf_factory import write_pdf

from esgexp.builders.run import run_build
from esgexp.builders.verify import PageTexts, verify_pair
from esgexp.data.chunking import CharChunker
from esgexp.data.corpus import Corpus, ingest
from esgexp.errors import UserError

REPORT = [
    ["Climate 2023", "Scope 1 emissions were 1,772.6 tCO2e in 2023.", "Scope 2 emissions were 456.4 tCO2e in 2023."],
    [
        "People 2023",
        "Women made up 38% of all employees in 2023.",
        "The lost time injury rate was 0.8 per million hours.",
    ],
    ["History", "Our company was founded in Berlin in 1990 and has grown ever since then."],
]


def make_corpus(root: Path) -> Path:
    """The report as a corpus with one passage per page (each page is under max_chars, the next does not fit)."""
    write_pdf(root / "pdfs" / "acme.pdf", REPORT)
    ingest(root / "pdfs", root / "corpus", CharChunker(min_chars=10, max_chars=120), progress=False)
    return root / "corpus"


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("report"))


@pytest.fixture
def store(tmp_path, empty_db) -> None:
    """The MLflow store under ``tmp_path`` (paths.mlruns_dir) with its tables made: no migrations per test."""
    (tmp_path / "mlruns").mkdir()
    shutil.copy(empty_db, tmp_path / "mlruns" / "mlflow.db")


def build_cfg(root: Path, *overrides: str):
    """The build config with every path under ``root``, no progress bars."""
    base = [
        f"paths.root_dir={root}",
        f"paths.request_cache={root}/requests.sqlite",
        f"out={root}/built",
        "progress=false",
        "trainer.progress_bar=false",
    ]
    return composed("build", overrides=[*base, *overrides])


# Budgets that keep SmolLM2's JSON short (about 85 tokens at most) and the test quick.
SMALL = ("builder.max_new_tokens=100", "builder.max_question_chars=60", "builder.max_answer_chars=16")


def test_esgbench_build_gives_verified_items_that_evaluate_and_a_rerun_asks_nothing(
    corpus_dir, tmp_path, store, tiny_model_dir
):
    from esgexp.data.esgbench import ESGBenchGold
    from esgexp.run import run_job

    dataset = run_build(build_cfg(tmp_path, f"corpus={corpus_dir}", *SMALL))
    out = tmp_path / "built"
    assert dataset == out / "esgbench_open_source.jsonl"
    report = json.loads((out / "build_report.json").read_text())
    stages = report["stages"]
    # pages 1 and 2 name KPIs with measured numbers; page 3 names none
    assert stages["candidates"] == {
        "n_in": 3,
        "n_out": 2,
        "n_repaired": 0,
        "n_discarded": 1,
        "discarded": {"no_kpi_term": 1},
    }
    for name, following in (("generate", "verify"), ("verify", "dedupe")):
        assert stages[name]["n_in"] == stages[name]["n_out"] + stages[name]["n_discarded"]
        assert stages[following]["n_in"] == stages[name]["n_out"]
    assert stages["generate"]["n_in"] == 2 and report["requests"]["n_requests"] >= 2

    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert rows and len(rows) == stages["dedupe"]["n_out"]
    pages = PageTexts(Corpus.load(corpus_dir))
    for row in rows:
        evidence = row["evidence"][0]
        assert verify_pair(
            pages, "acme", row["answer"], [(evidence["evidence_page_num"], evidence["evidence_text"])]
        ).kept
        assert row["doc_name"] == "acme" and row["category"] in ("Environmental", "Social")
    loaded = ESGBenchGold(name="built", path=str(dataset)).load()
    assert len(loaded.items) == len(rows) and not loaded.skipped
    card = json.loads((out / "provenance.json").read_text())
    assert card["corpus"]["corpus_hash"] == Corpus.load(corpus_dir).hash and card["n_items"] == len(rows)
    assert card["backend_identity"]["backend"] == "hf" and card["builder"]["name"] == "esgbench"

    # the same build again, into the same folder: every answer from the request cache
    run_build(build_cfg(tmp_path, f"corpus={corpus_dir}", *SMALL, "resume=true"))
    again = json.loads((out / "build_report.json").read_text())
    assert again["requests"]["n_requests"] == 0 and again["stages"] == stages
    assert dataset.read_text() == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    # evaluated with no conversion step (by the tiny random Llama: what is shown is that the file runs as a job)
    cfg = compose_config(
        tmp_path,
        f"paths.output_dir={tmp_path}/eval",
        "experiment=esgbench",
        f"dataset.path={dataset}",
        "strategy=zero_context",
        "model=local",
        f"model.path={tiny_model_dir}",
        "scoring.max_new_tokens=8",
    )
    metrics = run_job(cfg)
    assert metrics["n_items"] == len(rows)
    # the evaluation run names where its data came from (the leaderboard's reproducibility card shows it)
    from esgexp.jobs.lifecycle import job_tags

    built = job_tags(cfg, tmp_path / "eval")["data_provenance"]
    assert built.startswith("built by esgexp.build builder=esgbench from corpus " + card["corpus"]["corpus_hash"][:16])
    assert "with model smollm2-135m on backend hf" in built


def test_bad_input_is_named_before_any_model_loads(corpus_dir, tmp_path):
    with pytest.raises(UserError, match=r"corpus folder not found: .*nowhere"):
        run_build(build_cfg(tmp_path, f"corpus={tmp_path}/nowhere"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "passages.jsonl").write_text("")
    with pytest.raises(UserError, match="has no passages"):
        run_build(build_cfg(tmp_path, f"corpus={empty}", f"out={tmp_path}/b2"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="is not empty and holds no build: set out=NEW_DIR"):
        run_build(build_cfg(tmp_path, f"corpus={corpus_dir}", f"out={tmp_path}/full"))
    with pytest.raises(UserError, match="is not empty and holds no build: set out=NEW_DIR"):
        run_build(build_cfg(tmp_path, f"corpus={corpus_dir}", f"out={tmp_path}/full", "resume=true"))
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


def test_a_model_that_cannot_finish_the_schema_stops_the_build_and_keeps_its_outputs(
    corpus_dir, tmp_path, store, tiny_model_dir
):
    """Four tokens cannot hold the JSON object: both outputs and their retries are cut short (the tiny random
    Llama under the same constrained decoding: any model's four tokens are too few)."""
    tiny = ("model=local", f"model.path={tiny_model_dir}")
    with pytest.raises(UserError, match=r"stage generate: every one of 2 outputs was rejected \(cut_off 2\)"):
        run_build(build_cfg(tmp_path, f"corpus={corpus_dir}", *tiny, "builder.max_new_tokens=4"))
    out = tmp_path / "built"
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["reason"]) for r in rejected] == [("generate", "cut_off")] * 2
    assert all(r["raw"].startswith('{"') for r in rejected)  # the raw text is kept
    report = json.loads((out / "build_report.json").read_text())
    assert report["stages"]["generate"]["n_repaired"] == 0 and report["stages"]["generate"]["discarded"] == {
        "cut_off": 2
    }


def test_unknown_builder_is_one_error_line(tmp_path, clean_env):
    done = run_cli("esgexp.build", "builder=nope", f"corpus={tmp_path}", env=clean_env, cwd=tmp_path, timeout=60)
    assert done.returncode != 0
    assert "Could not find 'builder/nope'" in done.stderr and "esgbench" in done.stderr


def test_smollm2_esgbench_build_on_the_shared_reports_gives_verified_items(shared_corpus, tmp_path, store):
    """The default model and constrained decoding on the two real report PDFs: every kept pair passes the
    verifier against the real pages, and the file loads as ESGBench."""
    from esgexp.data.esgbench import ESGBenchGold

    dataset = run_build(
        build_cfg(tmp_path, f"corpus={shared_corpus}", "builder.max_candidates=1", "builder.max_new_tokens=128")
    )
    report = json.loads((tmp_path / "built" / "build_report.json").read_text())
    assert report["stages"]["candidates"]["n_out"] == 1
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert len(rows) == report["n_items"] >= 1
    pages = PageTexts(Corpus.load(shared_corpus))
    for row in rows:
        evidence = row["evidence"][0]
        assert verify_pair(
            pages, row["doc_name"], row["answer"], [(evidence["evidence_page_num"], evidence["evidence_text"])]
        ).kept
        assert row["question"].endswith("?") and row["answer"] in evidence["evidence_text"]
    assert len(ESGBenchGold(name="built", path=str(dataset)).load().items) == len(rows)
