"""The seed papers' tables: published cells against the papers' text, the grids, the ClimRetrieve metric
against scikit-learn on its row-level form, ours beside theirs, and the table command end to end (ESGBench
from the reference predictions, ClimRetrieve's random and BM25 rows on the shared sample: no language model)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

import pytest
from cli import run_cli, start_cli

from esgexp.papers import TABLES
from esgexp.papers.cells import Cell, load_cells, parse_value
from esgexp.papers.grid import Column, Grid, Job, load_grid, sweeps
from esgexp.papers.report import compare, leaderboard_sections, table_json, to_markdown

REPO = Path(__file__).resolve().parent.parent
PAPERS = REPO.parent / "shared" / "papers"
SAMPLES = REPO.parent / "shared" / "data" / "samples"


@pytest.fixture
def papers() -> Path:
    if not PAPERS.is_dir():
        pytest.skip(f"../shared papers' text not present at {PAPERS}")
    return PAPERS


def paper_cfg(*overrides: str):
    from esgexp.cli.paper import compose_paper

    return compose_paper(list(overrides))


# --- published cells ---


def test_every_published_cell_is_on_the_line_it_names(papers):
    for name in TABLES:
        cells = load_cells(name)
        assert cells, name
        for cell in cells:
            file, _, line = cell.source.partition(", line ")
            text = (papers / file.split(",")[0]).read_text(encoding="utf-8").splitlines()[int(line) - 1]
            fields = [f.strip().rstrip("%") for f in text.split("\t")]
            assert cell.text in fields, (name, cell, text)


def test_a_few_cells_read_as_the_paper_prints_them(papers):
    def one(name, row, column):
        (found,) = [c for c in load_cells(name) if (c.row, c.column) == (row, column)]
        return found

    assert one("esgenius_table2", "o3", "Zero-Shot").value == 0.7254
    assert one("esgenius_table2", "Gemma-3 27B I-T", "RAG").value == 0.8336
    assert one("esgenius_table2", "Qwen3 0.6B", "RAG").value == 0.0942
    assert one("sustainableqa_table4", "Zero+Context | Llama 3.3 70B", "Factoid R").value == 60.76
    assert one("sustainableqa_table4", "Finetune | Llama 3.1 8B-FT", "Tabular BLU").value == 57.56
    assert one("sustainableqa_table5", "Non-Fact. | BGE", "MRR").value == 57.9
    assert one("climretrieve_table_r1", "text-embedding-3-large", "inf_all").value == 0.179
    assert one("climretrieve_table_r1", "DRAGON+", "question").value == 0.139
    assert one("esgbench", "RAG baseline", "EM").value == 21.0
    recall = one("esgbench", "RAG baseline", "Recall@5")
    assert (recall.value, recall.low, recall.high) == (None, 70.0, 80.0)
    table2 = load_cells("esgenius_table2")
    assert len({c.row for c in table2}) == 50
    assert len(table2) == 50 + 43  # the 7 API models have no RAG value
    assert len(load_cells("sustainableqa_table4")) == 19 * 12
    assert len(load_cells("climretrieve_table_r1")) == 8 * 6


def test_a_published_range_and_a_bad_value():
    assert parse_value("70–80") == (None, 70.0, 80.0)
    assert parse_value("45.3%") == (45.3, 45.3, 45.3)
    with pytest.raises(ValueError):
        parse_value("n/a")


# --- grids ---


def test_esgenius_table2_grid_has_93_jobs_over_existing_model_configs(tmp_path):
    """100 cells, 7 of them "–" in the paper (the API models' RAG): left out unless rows=/columns= name them."""
    cfg = paper_cfg("table=esgenius_table2", f"paths.root_dir={tmp_path}")
    grid = load_grid(cfg, check=False)
    assert len(grid.jobs) == 93
    assert sorted(row for row, column in grid.left_out if column == "RAG") == sorted(
        ["DeepSeek-R1", "DeepSeek-V3", "Qwen2.5-Max", "GPT-4o-mini", "GPT-4o", "o4-mini", "o3"]
    )
    named = load_grid(
        paper_cfg("table=esgenius_table2", f"paths.root_dir={tmp_path}", "columns=[Zero-Shot,RAG]"), check=False
    )
    assert len(named.jobs) == 100 and not named.left_out
    assert len(grid.rows) == 50
    assert not [p for job in grid.jobs for p in job.problems if p.startswith("no config")]
    # no data file under tmp_path: every job says which setting to pass
    assert all(any(p.startswith("data.esgenius") for p in job.problems) for job in grid.jobs)


def test_climretrieve_grid_averages_the_four_explanation_variants(tmp_path):
    cfg = paper_cfg("table=climretrieve_table_r1", f"paths.root_dir={tmp_path}")
    grid = load_grid(cfg, check=False)
    assert len(grid.jobs) == 8 * (3 + 3 * 4)
    generic = grid.jobs_of("BM25", "generic")
    assert len(generic) == 4
    assert {tuple(o for o in job.overrides if o.startswith("query.")) for job in generic} == {
        ("query.words=60", "query.with_question=true"),
        ("query.words=60", "query.with_question=false"),
        ("query.words=150", "query.with_question=true"),
        ("query.words=150", "query.with_question=false"),
    }


def test_unknown_row_column_and_data_settings_are_named(tmp_path):
    from esgexp.errors import UserError

    for override, named in (
        ("rows=[no-such-row]", "no-such-row"),
        ("columns=[R@99]", "R@99"),
        ("data.nope=x", "data.nope"),
    ):
        with pytest.raises(UserError, match=named):
            load_grid(paper_cfg("table=sustainableqa_table5", override), check=False)
    with pytest.raises(UserError, match="tables: climretrieve_table_r1"):
        load_grid(paper_cfg("table=no_such_table"), check=False)


class _Cfg:
    def __init__(self, name):
        self.experiment_name = name


def _job(i, *overrides, experiment="e"):
    job = Job(f"j{i}", f"row{i}", list(overrides))
    job.cfg = _Cfg(experiment)
    return job


def test_sweeps_run_exactly_the_jobs():
    full = [
        _job(i, "experiment=e", f"query={q}", f"retriever={r}")
        for i, (q, r) in enumerate([(q, r) for q in "ab" for r in "xyz"])
    ]
    (only,) = sweeps(full)
    assert only[1] == ["experiment=e", "query=a,b", "retriever=x,y,z"] and only[2] == ["query", "retriever"]
    partial = full[:4]  # not a product: one sweep per query, each over the retrievers it has
    found = sweeps(partial)
    assert sorted(o for _, overrides, _ in found for o in overrides if o.startswith("retriever")) == [
        "retriever=x",
        "retriever=x,y,z",
    ]
    assert sorted(j.id for jobs, _, _ in found for j in jobs) == sorted(j.id for j in partial)
    apart = [_job(1, "model=m", experiment="a"), _job(2, "model=m", experiment="b")]
    assert len(sweeps(apart)) == 2


def test_data_paths_reach_the_jobs_whole():
    """A path with a space, a comma or a quote is one value to Hydra (a bare comma would make it a sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from esgexp.papers.grid import quote

    parser = OverridesParser.create()
    for path in ("/data/ESGenius_1136q.csv", "/my data/a,b.csv", "/it's/x.jsonl"):
        assert parser.parse_override(f"dataset.path={quote(path)}").value() == path


# --- ours beside theirs ---


def _grid(cells, columns, jobs):
    rows = list(dict.fromkeys(c.row for c in cells))
    return Grid("t", "T", cells, rows, columns, jobs, {})


def test_compare_interval_difference_range_and_variants():
    cells = [
        Cell("P", "T", "r", "a", "m", 0.5, 0.5, 0.5, "p.txt, T, line 1", "0.5"),
        Cell("P", "T", "r", "b", "m", None, 70.0, 80.0, "p.txt, T, line 2", "70–80"),
        Cell("P", "T", "r", "c", "m", 0.2, 0.2, 0.2, "p.txt, T, line 3", "0.2"),
    ]
    j1, j2, j3, j4 = (Job(f"j{i}", "r", []) for i in range(4))
    j1.cells = [("r", "a")]
    j2.cells = [("r", "b")]
    j3.cells = j4.cells = [("r", "c")]
    columns = {"a": Column("a", [[]], 1.0), "b": Column("b", [[]], 100.0), "c": Column("c", [[], []], 1.0)}
    results = {
        "j0": {"m": 0.45, "m/ci_low": 0.40, "m/ci_high": 0.52, "n_items": 10},
        "j1": {"m": 0.85, "m/ci_low": 0.78, "m/ci_high": 0.90},
        "j2": {"m": 0.10, "m/ci_low": 0.05, "m/ci_high": 0.15},
    }
    entries = {e["column"]: e for e in compare(_grid(cells, columns, [j1, j2, j3, j4]), results, {"j3": "failed: x"})}
    assert entries["a"]["ours"] == 0.45 and entries["a"]["verdict"] == "within"
    assert math.isclose(entries["a"]["difference"], -0.05)
    assert entries["b"]["ours"] == 85.0 and entries["b"]["verdict"] == "within"  # 78-90 overlaps 70-80
    assert math.isclose(entries["b"]["difference"], 5.0)  # 85 against the nearer end, 80
    assert "ours" not in entries["c"] and entries["c"]["why"] == "failed: x"
    results["j3"] = {"m": 0.30, "m/ci_low": 0.25, "m/ci_high": 0.35}
    entries = {e["column"]: e for e in compare(_grid(cells, columns, [j1, j2, j3, j4]), results, {})}
    assert math.isclose(entries["c"]["ours"], 0.2) and math.isclose(entries["c"]["ci_low"], 0.15)
    assert entries["c"]["verdict"] == "within" and math.isclose(entries["c"]["difference"], 0.0, abs_tol=1e-12)


# --- the ClimRetrieve metric ---


def test_climretrieve_metric_is_sklearn_on_every_report_row():
    """Rows = (paragraph, question) of each searched report; prediction = in the top K; gold = grade >= 2."""
    import random

    from esgexp.eval.retrieval_metrics import climretrieve_metrics
    from esgexp.eval.stats import StatsSettings

    metrics_module = pytest.importorskip("sklearn.metrics")  # scikit-learn comes with sentence-transformers
    f1_score, precision_score, recall_score = (
        metrics_module.f1_score,
        metrics_module.precision_score,
        metrics_module.recall_score,
    )
    rng = random.Random(3)
    qrels, rankings = {}, {}
    for q in range(12):
        passages = [f"d{q % 3}#p{i}" for i in range(40)]
        qrels[f"q{q}"] = {pid: rng.choice([0, 0, 0, 0, 1, 2, 3]) for pid in passages}
        rankings[f"q{q}"] = rng.sample(passages, 15)
    metrics = climretrieve_metrics(rankings, qrels, None, StatsSettings(bootstrap=200, seed=0))
    f1s = []
    for k in (5, 10, 15):
        gold, predicted = [], []
        for q, grades in qrels.items():
            top = set(rankings[q][:k])
            for pid, grade in grades.items():
                gold.append(int(grade >= 2))
                predicted.append(int(pid in top))
        assert math.isclose(metrics[f"climretrieve/precision@{k}"], precision_score(gold, predicted))
        assert math.isclose(metrics[f"climretrieve/recall@{k}"], recall_score(gold, predicted))
        assert math.isclose(metrics[f"climretrieve/f1@{k}"], f1_score(gold, predicted))
        f1s.append(f1_score(gold, predicted))
    assert math.isclose(metrics["climretrieve/f1"], sum(f1s) / 3)
    assert metrics["climretrieve/f1/ci_low"] < metrics["climretrieve/f1"] < metrics["climretrieve/f1/ci_high"]


def test_climretrieve_metric_needs_rankings_to_15():
    from esgexp.errors import UserError
    from esgexp.eval.retrieval_metrics import climretrieve_metrics
    from esgexp.eval.stats import StatsSettings

    with pytest.raises(UserError, match=r"retrieval.ks to include 15"):
        climretrieve_metrics({"q": ["a"]}, {"q": {"a": 2}}, None, StatsSettings(), searched_k=10)


# --- model configs of the tables' systems ---


def test_new_model_configs_compose(make_cfg):
    expected = {
        "o3": ("openai", "o3", True),
        "o4-mini": ("openai", "o4-mini", True),
        "qwen2.5-max": ("openai", "qwen-max-2025-01-25", False),
        "llama-3-8b": ("hf", "meta-llama/Meta-Llama-3-8B", False),
        "mistral-7b-instruct": ("hf", "mistralai/Mistral-7B-Instruct-v0.3", False),
    }
    for name, (backend, hub_id, reasoning) in expected.items():
        cfg = make_cfg(f"model={name}", "experiment=esgenius_zero_shot")
        assert (cfg.backend.name, cfg.model.hub_id, cfg.model.reasoning) == (backend, hub_id, reasoning), name
        if backend == "openai":
            assert cfg.model.price.prompt > 0 and cfg.backend.api_key_env
            assert cfg.model.api.get("params") == ("reasoning" if reasoning else None), name  # the o-series rule


# --- the table command ---


def test_esgenius_dry_run_prices_the_api_rows_and_names_what_cannot_run(tmp_path, monkeypatch, shared_samples):
    from esgexp.cli.paper import dry_run
    from esgexp.papers.estimate import CHARS_PER_TOKEN, dollars, estimate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    cfg = paper_cfg(
        "table=esgenius_table2",
        f"paths.root_dir={tmp_path}",
        f"data.esgenius={questions}",
        "rows=[GPT-4o,o3,'Meta-Llama-3 8B']",
    )
    grid = load_grid(cfg)
    text = dry_run(grid)
    assert len(grid.jobs) == 6 and text.startswith("ESGenius Table 2")
    (gpt4o,) = [j for j in grid.jobs if j.row == "GPT-4o" and j.cells == [("GPT-4o", "Zero-Shot")]]
    assert gpt4o.problems == ["model gpt-4o: API key not set (environment variable OPENAI_API_KEY)"]
    found = estimate(gpt4o.cfg, {})
    assert found.requests == 40
    assert found.prompt_tokens > 40 * 50  # every prompt holds a question and four options
    assert math.isclose(found.cost, found.prompt_tokens * 2.50 / 1e6 + found.completion_budget * 10.00 / 1e6)
    assert (
        f"[40 requests, ~{found.prompt_tokens} prompt tokens, up to 20 completion tokens each, at most "
        f"{dollars(found.cost)} live"
    ) in text
    assert math.isclose(found.batch_cost, found.cost / 2)  # OpenAI's Batch API: half price
    assert f", {dollars(found.batch_cost)} batch]" in text
    (o3,) = [j for j in grid.jobs if j.row == "o3" and j.cells == [("o3", "Zero-Shot")]]
    assert estimate(o3.cfg, {}).completion_budget == 40 * 8192  # a reasoning model's whole budget
    (llama,) = [j for j in grid.jobs if j.row == "Meta-Llama-3 8B" and j.cells[0][1] == "Zero-Shot"]
    assert llama.problems and "meta-llama/Meta-Llama-3-8B" in llama.problems[0]
    rag = [j for j in grid.jobs if j.cells[0][1] == "RAG"]
    assert all(j.problems[0].startswith("data.esgenius_w_ref not found") for j in rag)
    assert f"{CHARS_PER_TOKEN} characters per token" in text


def test_climretrieve_dry_run_prices_the_llm_written_queries(tmp_path, monkeypatch, shared_samples):
    from esgexp.papers.estimate import estimate, tokens
    from esgexp.retrieval.explain import prompt_for

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    cfg = paper_cfg(
        "table=climretrieve_table_r1",
        f"paths.root_dir={tmp_path}",
        f"data.climretrieve={sample}",
        "rows=[BM25]",
        "columns=[question,generic]",
        "overrides=['model=gpt-4o']",
    )
    grid = load_grid(cfg)
    (question,) = grid.jobs_of("BM25", "question")
    assert question.runnable and estimate(question.cfg, {}).requests == 0
    loaded = {}
    for job in grid.jobs_of("BM25", "generic"):
        assert job.problems == ["model gpt-4o: API key not set (environment variable OPENAI_API_KEY)"]
        found = estimate(job.cfg, loaded)
        (data,) = loaded.values()
        prompts = {prompt_for(job.cfg.query, q, data.queries, job.cfg.seed)[0] for q in data.queries}
        assert found.requests == len(prompts) == 6  # one explanation per question of the one report
        assert found.prompt_tokens == sum(map(tokens, prompts))
        assert math.isclose(found.cost, found.prompt_tokens * 2.5e-6 + 6 * job.cfg.query.max_new_tokens * 10e-6)


def test_sustainableqa_grids_compose_on_our_sample_in_its_schema(tmp_path, monkeypatch):
    """Tables 4 and 5 on the bundled SustainableQA files (the published ones are not public here)."""
    from esgexp.core.config import BUNDLED_DIR
    from esgexp.papers.estimate import estimate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = BUNDLED_DIR / "sustainableqa"
    rows = "rows=['Zero-shot | GPT-4o','Few-shot | Mistral 7B','Finetune | Llama 3.1 8B-FT']"
    grid = load_grid(
        paper_cfg("table=sustainableqa_table4", f"paths.root_dir={tmp_path}", f"data.sustainableqa={folder}", rows)
    )
    assert len(grid.jobs) == 9  # 3 rows x factoid, non-factoid, tabular (the columns of one type share a job)
    by = {(job.row, job.cfg.experiment_name): job for job in grid.jobs}
    gpt4o = by[("Zero-shot | GPT-4o", "sustainableqa_factoid")]
    assert gpt4o.problems == ["model gpt-4o: API key not set (environment variable OPENAI_API_KEY)"]
    assert len(gpt4o.cells) == 4 and estimate(gpt4o.cfg, {}).requests == 21  # EM, F1, P, R; the sample's factoids
    mistral = by[("Few-shot | Mistral 7B", "sustainableqa_table")]
    assert mistral.cfg.strategy.name == "few_shot" and "Mistral-7B-Instruct-v0.3" in mistral.problems[0]
    assert estimate(mistral.cfg, {}).requests == 9
    tuned = by[("Finetune | Llama 3.1 8B-FT", "sustainableqa_nonfactoid")]
    assert tuned.problems[0].startswith("data.adapter not found") and "model.adapter=null" in tuned.overrides
    table5 = load_grid(
        paper_cfg("table=sustainableqa_table5", f"paths.root_dir={tmp_path}", f"data.sustainableqa={folder}")
    )
    assert len(table5.jobs) == 8
    (bm25,) = table5.jobs_of("Factoid | BM25", "MRR")
    assert bm25.runnable and list(bm25.cfg.dataset.qtypes) == ["factoid"] and bm25.cfg.task == "retrieval"


def run_paper(tmp_path, *args, timeout=300):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("HYDRA_FULL_ERROR", None)
    result = run_cli("esgexp.paper", *args, cwd=tmp_path, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_a_table_none_of_whose_jobs_can_run_says_why_once_and_fails(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = run_cli("esgexp.paper", "table=esgbench", f"paths.root_dir={tmp_path}", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: no job of table esgbench can run here: data.gold")
    text = (tmp_path / "papers" / "esgbench.md").read_text(encoding="utf-8")
    assert text.count("data.gold not found") == 1  # under Runs; the eight cells point there
    assert text.count("| no value: see [1] | [1] |") == 8
    # the rerun command names the missing file as the table's data key, not as null
    assert "`python -m esgexp experiment=esgbench_score 'dataset.path=${data.gold}'" in text


def test_a_table_that_cannot_run_keeps_the_filled_table_an_earlier_run_wrote(tmp_path):
    papers = tmp_path / "papers"
    papers.mkdir()
    filled = {"table": "esgbench", "cells": [{"row": "r", "column": "c", "ours": 0.5}]}
    (papers / "esgbench.json").write_text(json.dumps(filled), encoding="utf-8")
    (papers / "esgbench.md").write_text("the filled table\n", encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = run_cli("esgexp.paper", "table=esgbench", f"paths.root_dir={tmp_path}", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "kept: " in result.stdout and "an earlier run's values" in result.stdout
    assert json.loads((papers / "esgbench.json").read_text(encoding="utf-8")) == filled
    assert (papers / "esgbench.md").read_text(encoding="utf-8") == "the filled table\n"


def test_a_stopped_table_says_how_to_continue_and_that_command_does(tmp_path, clean_env):
    """SIGTERM (as Ctrl-C) while the table's jobs run: the stop reaches the job, its answers are kept, and one
    line gives the table's command with resume=true; that command asks only the rest."""
    from openai_server import FakeOpenAI

    sample = REPO / "esgexp" / "data" / "bundled" / "esg_mcq_sample.csv"
    env = dict(clean_env, OPENAI_API_KEY="test-key")

    def table(server, *more):
        args = [
            "table=esgenius_table2",
            f"data.esgenius={sample}",
            "rows=[GPT-4o]",
            "columns=[Zero-Shot]",
            f"overrides=['backend.base_url={server.base_url}','backend.max_concurrency=1','cache=off']",
            f"paths.root_dir={tmp_path}",
            "tracking.offline=true",
            *more,
        ]
        return start_cli("esgexp.paper", *args, cwd=tmp_path, env=env)

    with FakeOpenAI(delay=0.3, answer="A") as server:
        job = table(server)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and job.poll() is None and server.count < 5:
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
        _, stderr = job.communicate(timeout=60)
        assert job.returncode == 143, stderr[-3000:]
        line = stderr.strip().splitlines()[-1]
        assert line.startswith("interrupted (SIGTERM): the jobs' answers so far are kept in "), line
        assert line.endswith("tracking.offline=true resume=true continues the table"), line
        (kept,) = tmp_path.glob("runs/esgenius_zero_shot/paper-esgenius_table2/*/0/predictions.jsonl")
        answered = len(kept.read_text().splitlines())
        assert 0 < answered < 48
        server.delay, asked = 0.0, server.count
        job = table(server, "resume=true")
        stdout, stderr = job.communicate(timeout=120)
        assert job.returncode == 0, stderr[-3000:]
        assert server.count - asked - 1 == 48 - answered  # the probe, then only the items not answered before
    assert "written: " in stdout


@pytest.fixture(scope="module")
def esgbench_table(tmp_path_factory):
    """The ESGBench table from the shared sample's published gold and predictions, by the command (once)."""
    if not SAMPLES.is_dir():
        pytest.skip(f"../shared benchmark samples not present at {SAMPLES}")
    root = tmp_path_factory.mktemp("esgbench-table")
    gold = SAMPLES / "esgbench" / "esgbench_open_source_sample40.jsonl"
    preds = SAMPLES / "esgbench" / "esgbench_preds_sample40.jsonl"
    result = run_paper(root, "table=esgbench", f"data.gold={gold}", f"data.predictions={preds}")
    return root, gold, preds, result


def test_esgbench_table_from_the_reference_predictions(esgbench_table):
    from esgexp.eval.esgbench_metrics import normalize

    root, gold, preds, result = esgbench_table
    table = json.loads((root / "papers" / "esgbench.json").read_text())
    cells = {e["column"]: e for e in table["cells"]}
    answers = {(r["doc_name"], r["question"]): r["answer"] for r in map(json.loads, gold.read_text().splitlines())}
    said = {(r["doc_name"], r["question"]): r["pred"] for r in map(json.loads, preds.read_text().splitlines())}
    em = sum(normalize(said[key]) == normalize(answer) for key, answer in answers.items()) / len(answers)
    assert math.isclose(cells["EM"]["ours"], 100 * em) and cells["EM"]["published"] == "21.0"
    assert cells["EM"]["ci_low"] <= cells["EM"]["ours"] <= cells["EM"]["ci_high"]
    # a 40-item sample of the paper's files: the re-scored cells are not comparable, and say why
    assert cells["EM"]["verdict"] == "not comparable"
    assert f"data.gold: {gold} is not the paper's data" in cells["EM"]["verdict_note"]
    assert cells["Recall@5"]["published"] == "70–80" and cells["Recall@5"]["n"] == 40
    assert cells["Strategy"]["n"] == 2  # the items of the category
    (run,) = cells["EM"]["runs"]
    assert len(run["run_id"]) == 32 and run["data"]["path"] == str(gold) and run["n"] == 40
    assert run["command"].startswith("python -m esgexp experiment=esgbench_score ")
    assert "| RAG baseline | 21.0 → " in (root / "papers" / "esgbench.md").read_text()
    assert "RAG baseline" in result.stdout


def test_the_leaderboard_page_shows_the_paper_table(esgbench_table, tmp_path):
    from esgexp.leaderboard.board import export

    root = esgbench_table[0]
    sections = leaderboard_sections(root / "papers")
    export(f"sqlite:///{root}/mlruns/mlflow.db", tmp_path, formats=("html",), paper_sections=sections)
    page = (tmp_path / "index.html").read_text()
    assert "Paper tables" in page and "ESGBench Table 2" in page and "21.0 → " in page


def test_climretrieve_random_and_bm25_rows_on_the_shared_sample(tmp_path, shared_samples):
    from esgexp.data.climretrieve import ClimRetrieveReportLevel

    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    run_paper(
        tmp_path,
        "table=climretrieve_table_r1",
        "rows=[random,BM25]",
        "columns=[question]",
        f"data.climretrieve={sample}",
        "overrides=['dataset.cluster_key=null']",  # the sample is one report: intervals over its questions
    )
    table = json.loads((tmp_path / "papers" / "climretrieve_table_r1.json").read_text())
    cells = {e["row"]: e for e in table["cells"]}
    assert set(cells) == {"random", "BM25"} and cells["BM25"]["published"] == "0.113"
    # ours recomputed from the job's rankings: every (paragraph, question) row, top K against grade >= 2
    data = ClimRetrieveReportLevel(name="c", path=str(sample)).load()
    (job,) = [j for j in table["jobs"] if j["row"] == "BM25"]
    rankings = {
        r["id"]: [h["id"] for h in r["retrieved"]]
        for r in map(json.loads, (Path(job["run_dir"]) / "rankings.jsonl").open())
    }
    f1s = []
    for k in (5, 10, 15):
        hits = sum(q.relevance.get(p, 0) >= 2 for q in data.queries for p in rankings[q.id][:k])
        retrieved = sum(len(rankings[q.id][:k]) for q in data.queries)
        relevant = sum(g >= 2 for q in data.queries for g in q.relevance.values())
        f1s.append(2 * hits / (retrieved + relevant))
    assert math.isclose(cells["BM25"]["ours"], sum(f1s) / 3)
    assert cells["BM25"]["ours"] > cells["random"]["ours"]
    assert cells["BM25"]["ci_low"] <= cells["BM25"]["ours"] <= cells["BM25"]["ci_high"]


def test_leaderboard_sections_show_each_written_table(tmp_path):
    cells = [Cell("P", "T", "r", "a", "m", 0.5, 0.5, 0.5, "p.txt, T, line 1", "0.5")]
    job = Job("j0", "r", [])
    job.cells = [("r", "a")]
    grid = Grid("esgbench", "A table", cells, ["r"], {"a": Column("a", [[]], 1.0)}, [job], {})
    table = table_json(grid, compare(grid, {"j0": {"m": 0.4, "m/ci_low": 0.3, "m/ci_high": 0.6}}, {}), [])
    assert "| r | 0.5 → 0.4 [0.3, 0.6] within |" in to_markdown(table)
    assert leaderboard_sections(tmp_path) == [] and leaderboard_sections(None) == []
    (tmp_path / "esgbench.json").write_text(json.dumps(table))
    (tmp_path / "not-a-table.json").write_text("{}")
    sections = leaderboard_sections(tmp_path)
    assert len(sections) == 2 and "A table" in sections[1] and "mark-yes" in sections[1]


def test_the_dry_run_shows_each_command_as_it_will_run_and_random_writes_no_query(
    tmp_path, monkeypatch, shared_samples
):
    """The command's overrides= follow the grid's in each job's command (the grid's model alone is not what runs);
    the random row ranks whatever the query says, so its generic / inf jobs ask no model: no key, no price."""
    from esgexp.cli.paper import dry_run
    from esgexp.papers.estimate import estimate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    cfg = paper_cfg(
        "table=esgenius_table2",
        f"paths.root_dir={tmp_path}",
        f"data.esgenius={questions}",
        "rows=['Qwen2.5 0.5B I-T']",
        "columns=[Zero-Shot]",
        "overrides=['model=gpt-4o']",
    )
    text = dry_run(load_grid(cfg))
    (command,) = [line.strip() for line in text.splitlines() if line.strip().startswith("python -m esgexp ")]
    assert "model=qwen2.5-0.5b-instruct experiment=esgenius_zero_shot" in command
    assert command.endswith(" model=gpt-4o model.chat_template=false")  # the grid's setting kept (docs/papers.md)
    assert "API key not set (environment variable OPENAI_API_KEY)" in text  # gpt-4o's key: what runs
    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    cfg = paper_cfg(
        "table=climretrieve_table_r1",
        f"paths.root_dir={tmp_path}",
        f"data.climretrieve={sample}",
        "rows=[random,BM25]",
        "columns=[generic,inf_3]",
    )
    grid = load_grid(cfg)
    text = dry_run(grid)
    random_jobs = grid.jobs_of("random", "generic") + grid.jobs_of("random", "inf_3")
    assert len(random_jobs) == 8 and all(job.runnable for job in random_jobs)
    assert all(estimate(job.cfg, {}).requests == 0 and estimate(job.cfg, {}).cost is None for job in random_jobs)
    assert all(not job.runnable for job in grid.jobs_of("BM25", "generic"))
    assert "8 priced jobs" in text  # BM25's eight LLM-written query jobs only


def test_informed_queries_that_fall_back_to_the_generic_one_say_so_and_are_not_comparable(
    tmp_path, shared_samples, monkeypatch
):
    """On a file with one report no other report has an annotated passage for a question, so every inf_3 query is
    the generic explanation: the cell and the .json say the variants collapse, and it is not comparable."""
    from openai_server import FakeOpenAI

    sample = shared_samples / "climretrieve" / "report_level_sample.csv"
    with FakeOpenAI(answer="Scenario analysis of transition and physical climate risks, emission targets") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
        run_paper(
            tmp_path,
            "table=climretrieve_table_r1",
            "rows=[BM25]",
            "columns=[inf_3]",
            f"data.climretrieve={sample}",
            f"overrides=['backend.base_url={server.base_url}','dataset.cluster_key=null']",
        )
    table = json.loads((tmp_path / "papers" / "climretrieve_table_r1.json").read_text())
    (cell,) = table["cells"]
    assert cell["verdict"] == "not comparable" and "the variants collapse" in cell["collapsed"]
    assert "all 6 queries have the generic explanation" in cell["verdict_note"]
    assert all(run["collapsed"] for run in cell["runs"]) and len(cell["runs"]) == 4
    markdown = (tmp_path / "papers" / "climretrieve_table_r1.md").read_text()
    assert "not comparable (variants collapse: the query texts are generic's)" in markdown


def test_the_dry_run_shows_the_budget_priced_the_price_date_and_what_has_no_batch_price(
    tmp_path, monkeypatch, shared_samples
):
    """An API reasoning row is priced at its own budget (8,192 tokens), not the grid's scoring.max_new_tokens=20,
    and says so; DeepSeek's prices carry the date they were read; the batch total names the live-priced models."""
    from esgexp.cli.paper import dry_run

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    questions = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    cfg = paper_cfg(
        "table=esgenius_table2",
        f"paths.root_dir={tmp_path}",
        f"data.esgenius={questions}",
        "rows=[DeepSeek-R1,GPT-4o]",
        "columns=[Zero-Shot]",
    )
    text = dry_run(load_grid(cfg))
    r1, gpt4o = (line for line in text.splitlines() if " | Zero-Shot  [" in line)
    assert "up to 8192 completion tokens each" in r1 and "prices as of 2025-02" in r1
    assert "up to 20 completion tokens each" in gpt4o
    assert "(live prices for deepseek-r1: no batch price)" in text.splitlines()[-1]
