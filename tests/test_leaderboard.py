"""The leaderboard's rows, marks and question matrix from synthetic finished runs in a real MLflow store,
and the read-only command on a missing or empty store (issue 13)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cli import run_cli
from conftest import SAMPLE_CSV

SAMPLE_DATASET = {
    "_target_": "esgexp.data.esgenius.ESGeniusCSV",
    "name": "esg_sample",
    "path": str(SAMPLE_CSV),
    "hf_id": None,
    "split": "train",
    "limit": None,
    "seed": 42,
}
TEMPLATE = "Question: {query}\nA: {A}\nB: {B}\nC: {C}\nD: {D}\nAnswer:"


def sample_items():
    from esgexp.data.esgenius import ESGeniusCSV

    return ESGeniusCSV("esg_sample", str(SAMPLE_CSV)).load().items


def wrong_letter(gold: str) -> str:
    return "B" if gold != "B" else "C"


def mcq_records(items, correct: set[int], invalid: set[int] = frozenset()) -> list[dict]:
    """predictions.jsonl records as the MCQ task writes them: right on the ``correct`` positions."""
    records = []
    for index, item in enumerate(items):
        parsed = "INVALID" if index in invalid else item.answer if index in correct else wrong_letter(item.answer)
        records.append(
            {
                "id": item.id,
                "gold": item.answer,
                "output": parsed if parsed != "INVALID" else "hmm",
                "parsed": parsed,
                "correct": parsed == item.answer,
            }
        )
    return records


def log_run(
    uri: str, run_dir: Path, tags: dict, params: dict, metrics: dict, files: dict[str, str], experiment: str = "default"
) -> str:
    """One finished run shaped like a real job's: run folder files (config.yaml, metrics.json, ...),
    the tags job_tags writes, flattened config params, metrics and the files as artifacts."""
    import mlflow

    from esgexp.core.tracking import metric_name, use_store

    run_dir.mkdir(parents=True, exist_ok=True)
    files = {"metrics.json": json.dumps(metrics), **files}
    for name, text in files.items():
        (run_dir / name).write_text(text, encoding="utf-8")
    experiment_id = use_store(uri, str(run_dir.parent / "artifacts"), experiment)
    tags = {
        "run_dir": str(run_dir),
        "git_commit": "0123abc",
        "versions": "python 3.11.7, torch 2.13.0",
        "data_sha256": "ab" * 32,
        "config_hash": run_dir.name,
        **tags,
    }
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_dir.name, tags=tags) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(
            {metric_name(k): v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        )
        for name in files:
            mlflow.log_artifact(str(run_dir / name))
    return run.info.run_id


def mcq_run(
    uri: str,
    root: Path,
    model: str,
    size: float,
    records: list[dict],
    strategy: str = "zero_shot",
    scoring: str = "generate",
    extra_files: dict | None = None,
) -> str:
    from esgexp.eval.stats import wilson

    n = len(records)
    hits = sum(r["correct"] for r in records)
    interval = wilson(hits, n)
    metrics = {
        "n_items": n,
        "accuracy": hits / n,
        "invalid_rate": sum(r["parsed"] == "INVALID" for r in records) / n,
        "accuracy/ci_low": interval.low,
        "accuracy/ci_high": interval.high,
        "accuracy/stderr": interval.stderr,
        "baseline/random": 0.25,
        "baseline/longest_option": 0.3125,
        "accuracy/framework/IFRS": hits / n,
        "accuracy/framework/GRI": 0.5,
        "headline_metric": "accuracy",
        "higher_is_better": True,
    }
    config = {
        "task": "mcq",
        "dataset": SAMPLE_DATASET,
        "model": {"name": model, "size_b": size},
        "strategy": {"name": strategy},
        "scoring": {"name": scoring},
        "template": {"name": "plain", "text": TEMPLATE},
    }
    params = {
        "model.name": model,
        "model.family": model.split("-")[0],
        "model.size_b": str(size),
        "strategy.name": strategy,
        "scoring.name": scoring,
        "scoring.max_new_tokens": "16",
        "template.name": "plain",
        "template.text": TEMPLATE,
        "dataset.path": str(SAMPLE_CSV),
        "backend.name": "hf",
        "seed": "42",
    }
    tags = {
        "task": "mcq",
        "dataset": "esg_sample",
        "model": model,
        "backend": "hf",
        "strategy": strategy,
        "scoring": scoring,
        "headline_metric": "accuracy",
        "higher_is_better": "true",
    }
    files = {
        "config.yaml": json.dumps(config),
        "predictions.jsonl": "".join(json.dumps(r) + "\n" for r in records),
        **(extra_files or {}),
    }
    return log_run(uri, root / f"{model}-{strategy}-{scoring}", tags, params, metrics, files)


CALIBRATION = {
    "bins": [
        {"low": 0.2, "high": 0.6, "confidence": 0.45, "accuracy": 0.3, "count": 10},
        {"low": 0.6, "high": 1.0, "confidence": 0.8, "accuracy": 0.85, "count": 38},
    ],
    "coverage": [
        {"threshold": 0.0, "coverage": 1.0, "accuracy": 0.74},
        {"threshold": 0.6, "coverage": 0.79, "accuracy": 0.85},
    ],
}
# alpha: right on 46 of 48; beta: 45 (it misses two that alpha gets and gets one alpha misses: McNemar
# p = 1); gamma: 12 (34 discordant pairs, all alpha's: p ~ 1e-10). Question 47 is missed by all three.
ALPHA, BETA, GAMMA = set(range(46)), set(range(44)) | {46}, set(range(12))


def build_store(root: Path, empty_db: Path | None = None) -> dict[str, str]:
    """A sqlite store (a copy of ``empty_db`` when given) with three zero-shot MCQ models, a context run,
    a retrieval run and an open-QA run; their ids by name, and the store's ``uri``."""
    items = sample_items()
    db = root / "mlruns" / "mlflow.db"
    if empty_db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(empty_db, db)
    uri = f"sqlite:///{db}"
    runs = {"uri": uri}
    runs["alpha"] = mcq_run(uri, root / "runs", "alpha-7b", 7.0, mcq_records(items, ALPHA))
    runs["beta"] = mcq_run(
        uri,
        root / "runs",
        "beta-1b",
        1.0,
        mcq_records(items, BETA, invalid={45}),
        extra_files={"calibration.json": json.dumps(CALIBRATION)},
    )
    runs["gamma"] = mcq_run(uri, root / "runs", "gamma-0.5b", 0.5, mcq_records(items, GAMMA))
    runs["beta_context"] = mcq_run(
        uri, root / "runs", "beta-1b", 1.0, mcq_records(items, set(range(47))), strategy="context"
    )
    retrieval = {
        "n_queries": 6,
        "recall@5": 0.4,
        "recall@10": 0.6,
        "recall@20": 0.8,
        "random/recall@10": 0.1,
        "recall@10/ci_low": 0.35,
        "recall@10/ci_high": 0.8,
        "recall@10/stderr": 0.1,
    }
    runs["bm25"] = log_run(
        uri,
        root / "runs" / "bm25",
        {
            "task": "retrieval",
            "dataset": "climretrieve_sample",
            "retriever": "bm25",
            "query": "question",
            "headline_metric": "recall@10",
            "higher_is_better": "true",
        },
        {"retriever.name": "bm25", "retrieval.ks": "[5, 10, 20]"},
        retrieval,
        {
            "config.yaml": json.dumps(
                {"task": "retrieval", "retriever": {"name": "bm25"}, "query": {"mode": "question"}}
            )
        },
    )
    qa = {
        "n_items": 5,
        "factoid/f1": 0.5,
        "factoid/em": 0.2,
        "factoid/by_spans/1/f1": 0.6,
        "factoid/by_spans/2/f1": 0.3,
        "table/rougeL": 0.25,
    }
    esgbench = {
        "n_items": 8,
        "numeric_accuracy": 0.5,
        "category/Water/accuracy": 0.75,
        "category/Emissions/accuracy": 0.25,
        "headline_metric": "numeric_accuracy",
        "higher_is_better": True,
    }
    runs["esgbench"] = log_run(
        uri,
        root / "runs" / "score",
        {
            "task": "esgbench_score",
            "dataset": "esgbench_sample",
            "model": "external",
            "predictions": "preds.jsonl",
            "headline_metric": "numeric_accuracy",
        },
        {},
        esgbench,
        {"config.yaml": json.dumps({"task": "esgbench_score", "predictions": "preds.jsonl"})},
    )
    runs["qa"] = log_run(
        uri,
        root / "runs" / "qa",
        {"task": "qa", "dataset": "sustainableqa_sample", "model": "alpha-7b"},
        {"model.size_b": "7.0"},
        qa,
        {"config.yaml": "{}"},
    )
    return runs


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_db) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("board")
    return root, build_store(root, empty_db)


def test_rows_rank_by_the_declared_headline_with_its_interval_and_the_mark(store):
    from esgexp.eval.stats import wilson
    from esgexp.leaderboard.board import collect_rows

    _, runs = store
    rows = collect_rows(runs["uri"])
    zero_shot = [r for r in rows if r["dataset"] == "esg_sample" and r["strategy"] == "zero_shot"]
    assert [r["model"] for r in zero_shot] == ["alpha-7b", "beta-1b", "gamma-0.5b"]
    alpha = next(r for r in rows if r["run_id"] == runs["alpha"])
    assert alpha["headline"] == "accuracy" and alpha["value"] == pytest.approx(46 / 48)
    assert alpha["ci_low"] == pytest.approx(wilson(46, 48).low) and alpha["ci_high"] == pytest.approx(
        wilson(46, 48).high
    )
    # The context run (47/48) is the group's best; alpha (46/48) differs on 1 item: not worse; gamma is.
    marks = {r["run_id"]: r["not_worse"] for r in rows if r["dataset"] == "esg_sample"}
    assert marks[runs["beta_context"]] == "best" and marks[runs["alpha"]] == "yes" and marks[runs["gamma"]] == "no"
    qa = next(r for r in rows if r["task"] == "qa")
    assert qa["headline"] == "factoid/f1" and qa["value"] == 0.5 and qa["ci_low"] == ""  # an old run: no declaration
    assert next(r for r in rows if r["task"] == "retrieval")["ci_high"] == 0.8


def test_csv_and_markdown_carry_the_interval_and_mark_columns(store, tmp_path, capsys):
    import csv

    from esgexp.cli.leaderboard import main

    _, runs = store
    main([f"tracking.uri={runs['uri']}", f"out_dir={tmp_path}/out", "format=[csv,md]"])
    markdown = (tmp_path / "out" / "leaderboard.md").read_text()
    assert (
        capsys.readouterr().out
        == markdown + f"written: {tmp_path}/out/leaderboard.csv, {tmp_path}/out/leaderboard.md\n"
    )
    with open(tmp_path / "out" / "leaderboard.csv", newline="") as handle:
        rows = {row["run_id"]: row for row in csv.DictReader(handle)}
    gamma = rows[runs["gamma"]]
    assert (gamma["headline"], gamma["value"], gamma["not_worse"]) == ("accuracy", "0.2500", "no")
    from esgexp.eval.stats import wilson

    assert gamma["ci_low"] == f"{wilson(12, 48).low:.4f}" and float(gamma["p_vs_best"]) < 1e-6
    assert "| headline | value | ci_low | ci_high | stderr | not_worse | p_vs_best |" in markdown
    assert markdown.count("\n") == 2 + 7 and not (tmp_path / "out" / "index.html").exists()


def test_question_matrix_orders_models_by_accuracy_and_questions_by_difficulty(store):
    from esgexp.leaderboard.questions import question_matrix
    from esgexp.leaderboard.store import finished_runs

    _, runs = store
    found = [r for r in finished_runs(runs["uri"]) if r.tags.get("strategy") == "zero_shot" and r.tags["task"] == "mcq"]
    matrix = question_matrix(found)
    items = sample_items()
    assert matrix.models == ["alpha-7b", "beta-1b", "gamma-0.5b"]
    assert matrix.accuracy == pytest.approx([46 / 48, 45 / 48, 12 / 48])
    # 12 easy questions nobody misses, then 32 gamma misses, then four missed by two and the last by all.
    assert matrix.difficulty == pytest.approx([0] * 12 + [1 / 3] * 32 + [2 / 3] * 3 + [1.0])
    assert matrix.ids[-1] == items[47].id and set(matrix.ids[:12]) == {item.id for item in items[:12]}
    last = matrix.ids.index(items[45].id)
    assert matrix.answers[1][last] == "INVALID" and matrix.correct[1][last] == 0 and matrix.correct[0][last] == 1
    prompt, options, gold = matrix.questions[-1]
    assert (
        prompt == items[47].question
        and options.startswith(f"A: {items[47].options['A']}\nB: ")
        and gold == items[47].answer
    )


def leaderboard_cli(*overrides: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(
        "esgexp.leaderboard",
        *overrides,
        env=env,
        cwd=cwd,
    )


def test_a_missing_store_is_named_and_not_created(tmp_path, clean_env):
    missing = tmp_path / "x" / "mistyped.db"
    out = leaderboard_cli(f"tracking.uri=sqlite:///{missing}", env=clean_env, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("error:") == 1 and "Traceback" not in out.stderr
    assert f"no MLflow store at {missing}" in out.stderr
    assert not missing.exists() and not missing.parent.exists() and not (tmp_path / "leaderboard").exists()


def test_an_empty_store_says_so_and_fails(tmp_path, clean_env, empty_db):
    shutil.copy(empty_db, tmp_path / "empty.db")
    uri = f"sqlite:///{tmp_path}/empty.db"
    out = leaderboard_cli(f"tracking.uri={uri}", env=clean_env, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: no finished runs in {uri}" and not (tmp_path / "leaderboard").exists()


def test_circular_rotations_are_one_question_right_only_when_every_rotation_is():
    from esgexp.leaderboard.questions import by_question

    records = [
        {
            "id": f"q1#r{k}",
            "item_id": "q1",
            "rotation": k,
            "gold": "ABCD"[k],
            "parsed": "ABCD"[k] if k != 2 else "A",
            "correct": k != 2,
        }
        for k in (3, 1, 0, 2)
    ]
    records += [
        {"id": f"q2#r{k}", "item_id": "q2", "rotation": k, "gold": "B", "parsed": "B", "correct": True}
        for k in range(4)
    ]
    folded = by_question([*records, {"id": "q3", "gold": "C", "parsed": "Z", "correct": False}])
    assert folded["q1"] == {"id": "q1", "gold": "A", "parsed": "A (right in 3 of 4 rotations)", "correct": False}
    assert folded["q2"]["correct"] is True and folded["q2"]["parsed"] == "B (right in 4 of 4 rotations)"
    assert folded["q3"]["parsed"] == "Z" and list(folded) == ["q1", "q2", "q3"]


def test_an_unknown_format_is_refused_before_the_store_is_read(tmp_path):
    from esgexp.errors import UserError
    from esgexp.leaderboard.board import export

    with pytest.raises(UserError, match="format must be one of csv, md, html or all, got pdf"):
        export(f"sqlite:///{tmp_path}/none.db", tmp_path / "out", formats=("html", "pdf"))
    assert not (tmp_path / "none.db").exists()


def test_a_tracking_server_that_does_not_answer_is_named_at_once(tmp_path, clean_env):
    out = leaderboard_cli(
        "tracking.uri=http://127.0.0.1:9", "tracking.connect_timeout_s=2", env=clean_env, cwd=tmp_path
    )
    assert out.returncode == 2 and out.stderr.count("error:") == 1 and "Traceback" not in out.stderr
    assert "tracking.uri=http://127.0.0.1:9: the MLflow tracking server does not answer" in out.stderr


def test_every_figure_a_task_kind_names_is_drawn_by_the_page():
    from esgexp.leaderboard import figures
    from esgexp.leaderboard.page import FIGURES, TASK_FIGURES
    from esgexp.tasks.kinds import KINDS

    named = {name for names in TASK_FIGURES.values() for name in names}
    assert named == set(FIGURES) and all(callable(getattr(figures, name)) for name in FIGURES)
    assert set(TASK_FIGURES) <= {name for name, kind in KINDS.items() if kind.scoring.ranked}
