"""Paired comparison of runs (esgexp.analysis.compare): synthetic run folders in the real format, built through the
tasks' own scoring, and the CLI on two real retrieval runs."""

from __future__ import annotations

import json
import re

import pytest
from cli import run_cli
from conftest import REPO, SAMPLE_CSV
from hydra.utils import instantiate
from omegaconf import OmegaConf

from esgexp.analysis.compare import compare_pair, compare_runs, load_run
from esgexp.cli.compare import main
from esgexp.core.outputs import PredictionLog, write_atomic, write_json
from esgexp.errors import UserError
from esgexp.eval.stats import StatsSettings, mcnemar_exact
from esgexp.run import run_job

CLIM = ("experiment=climretrieve_retrieval", "dataset=climretrieve_sample")


def write_run(folder, cfg, records, metrics):
    """A run folder as a job leaves it: resolved config.yaml, metrics.json, predictions.jsonl."""
    write_atomic(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    write_json(folder / "metrics.json", metrics)
    PredictionLog(folder / "predictions.jsonl").rewrite(records)
    return folder


@pytest.fixture
def mcq_run(make_cfg, tmp_path):
    """``mcq_run(name, wrong, drop=(), *overrides)``: an MCQ run on the bundled sample, wrong on the items at
    positions ``wrong``, without the items at ``drop``, scored by MCQTask.score."""
    from esgexp.tasks.mcq import MCQTask

    def build(name, wrong=(), drop=(), *overrides):
        cfg = make_cfg(f"paths.output_dir={tmp_path}/{name}", *overrides)
        items = [item for i, item in enumerate(instantiate(cfg.dataset).load().items) if i not in drop]
        records = []
        for i, item in enumerate(items):
            answer = next(letter for letter in "ABCD" if letter != item.answer) if i in wrong else item.answer
            records.append(
                {
                    "id": item.id,
                    "gold": item.answer,
                    "output": answer,
                    "parsed": answer,
                    "correct": answer == item.answer,
                }
            )
        records, metrics, _ = MCQTask(cfg).score(items, records)
        return write_run(tmp_path / name, cfg, records, metrics)

    return build


def test_mcq_runs_get_mcnemar_and_a_paired_interval(mcq_run):
    best = load_run(mcq_run("best"))
    worse = load_run(mcq_run("worse", range(12)))
    assert best.metrics["accuracy/ci_method"] == "wilson" and best.metrics["headline_metric"] == "accuracy"
    found = compare_pair(best, worse)
    assert found["n_shared"] == 48 and found["n_only_a"] == found["n_only_b"] == 0
    assert found["difference"] == pytest.approx(-12 / 48) and found["ci_high"] < 0
    assert (found["only_a_right"], found["only_b_right"]) == (12, 0)
    assert found["test"] == "mcnemar_exact" and found["p_value"] == pytest.approx(2 * 0.5**12)


def test_a_null_pair_is_not_significant(mcq_run):
    a, b = load_run(mcq_run("a", range(6))), load_run(mcq_run("b", range(6, 12)))
    found = compare_pair(a, b)
    assert found["difference"] == 0.0 and found["ci_low"] < 0 < found["ci_high"] and found["p_value"] == 1.0


def test_only_shared_items_are_compared(mcq_run):
    found = compare_pair(load_run(mcq_run("all")), load_run(mcq_run("fewer", (), range(8))))
    assert (found["n_shared"], found["n_only_a"], found["n_only_b"]) == (40, 8, 0)


def test_more_runs_are_holm_corrected(mcq_run):
    runs = [load_run(mcq_run(name, wrong)) for name, wrong in (("r0", ()), ("r1", range(10)), ("r2", range(3)))]
    first = compare_runs(runs, "first", settings=StatsSettings())
    assert [c["b_ref"] for c in first["comparisons"]] == [runs[1].ref, runs[2].ref]
    p = [mcnemar_exact(0, 10), mcnemar_exact(0, 3)]
    assert [c["p_holm"] for c in first["comparisons"]] == pytest.approx([2 * p[0], max(2 * p[0], p[1])])
    assert len(compare_runs(runs, "all")["comparisons"]) == 3
    with pytest.raises(UserError, match="against must be first or all"):
        compare_runs(runs, "best")


def test_refused_comparisons_name_the_difference(mcq_run, tmp_path):
    base = load_run(mcq_run("base"))
    other_data = load_run(mcq_run("other", (), (), "dataset.name=esg_copy"))
    with pytest.raises(UserError, match="different datasets: dataset=esg_sample vs dataset=esg_copy"):
        compare_pair(base, other_data)
    copy = tmp_path / "elsewhere.csv"
    copy.write_bytes(SAMPLE_CSV.read_bytes())
    other_file = load_run(mcq_run("file", (), (), f"dataset.path={copy}"))
    with pytest.raises(UserError, match=r"different item sets: dataset.path="):
        compare_pair(base, other_file)
    edited = load_run(mcq_run("edited"))
    item_id = next(iter(edited.records))
    edited.records[item_id]["gold"] = "Z"
    with pytest.raises(UserError, match=f"item {item_id!r} has gold"):
        compare_pair(base, edited)
    qa = load_run(mcq_run("qa"))
    qa.config["task"] = "qa"
    with pytest.raises(UserError, match="different tasks: task=mcq vs task=qa"):
        compare_pair(base, qa)
    with pytest.raises(UserError, match="neither a run folder nor an MLflow run id"):
        load_run(str(tmp_path / "missing"))


def test_qa_scores_are_clustered_on_the_passage(make_cfg, tmp_path):
    from esgexp.tasks.qa import QATask

    runs = []
    for name in ("gold", "half"):
        cfg = make_cfg(
            "experiment=sustainableqa_factoid", "dataset=sustainableqa_sample", f"paths.output_dir={tmp_path}/{name}"
        )
        items = instantiate(cfg.dataset).load().items
        records = [
            {
                "id": item.id,
                "qtype": item.qtype,
                "category": None,
                "references": list(item.answers),
                "output": "",
                "answer": item.answers[0] if name == "gold" or i % 2 else "",
            }
            for i, item in enumerate(items)
        ]
        records, metrics, info = QATask(cfg).score(items, records)
        runs.append(load_run(write_run(tmp_path / name, cfg, records, metrics)))
    gold, half = runs
    assert info == {**info, "headline_metric": "factoid/f1", "higher_is_better": "true"}
    assert gold.metrics["stats/cluster_key"] == "passage" and gold.metrics["stats/n_clusters"] < gold.metrics["n_items"]
    clustered = ("cluster_bootstrap", "cluster_bootstrap_floored")  # floored at the unclustered one: few passages
    assert half.metrics["factoid/f1/ci_method"] in clustered and half.metrics["factoid/em/ci_method"] in clustered
    assert half.metrics["factoid/f1/ci_low"] < half.metrics["factoid/f1"] < half.metrics["factoid/f1/ci_high"]
    found = compare_pair(gold, half)
    assert (
        found["metric"] == "factoid/f1"
        and found["test"] == "paired_cluster_bootstrap"
        and found["cluster_key"] == "passage"
    )
    assert found["difference"] == pytest.approx(half.metrics["factoid/f1"] - 1.0) and found["ci_high"] < 0
    assert found["p_value"] < 0.01


def test_retrieval_per_query_values_give_the_run_metrics():
    from esgexp.eval.retrieval_metrics import per_query_metrics, retrieval_metrics
    from esgexp.tasks.retrieval import item_scores

    rankings = {"q1": ["a", "b", "c"], "q2": ["d", "e", "f"], "q3": ["g", "h", "i"]}
    qrels = {"q1": {"a": 3, "c": 2, "x": 2}, "q2": {"f": 2}, "q3": {"g": 1}}  # q3: nothing at threshold 2
    per_query = per_query_metrics(rankings, qrels, (1, 3), 2)
    metrics = retrieval_metrics(rankings, qrels, dict.fromkeys(rankings, 10), (1, 3), 2, per_query)
    records = [{"id": q, "metrics": values} for q, values in per_query.items()]
    assert metrics["recall@3"] == pytest.approx(3 / 4)  # pooled: hits 2 + 1 over relevant 3 + 1
    for key in ("recall@1", "recall@3", "precision@3", "macro/recall@3", "macro/f1@1", "ndcg@3", "mrr"):
        found = item_scores(records, key)
        estimate = sum(found.values) / (sum(found.weights) if found.weights else len(found.values))
        assert estimate == pytest.approx(metrics[key]), key
    assert item_scores(records, "mrr").ids == ["q1", "q2"] and item_scores(records, "recall@3").kind == "ratio"
    assert item_scores(records, "random/recall@3") is None and item_scores(records, "f1@3") is None


def test_esgbench_score_values_give_the_run_metrics():
    from esgexp.core.config import BUNDLED_DIR
    from esgexp.data.esgbench import ESGBenchGold, join, load_predictions
    from esgexp.eval.esgbench_metrics import score_esgbench
    from esgexp.tasks.esgbench_score import item_scores

    items = ESGBenchGold("esgbench_sample", str(BUNDLED_DIR / "esgbench" / "gold_sample.jsonl")).load().items
    joined = join(items, load_predictions(BUNDLED_DIR / "esgbench" / "preds_sample.jsonl"), gold_source="gold")
    records, metrics = score_esgbench(items, joined, k=5)
    for key, kind in (
        ("em", "proportion"),
        ("f1", "mean"),
        ("numeric_accuracy", "proportion"),
        ("numeric_accuracy/numeric_items", "proportion"),
    ):
        found = item_scores(records, key)
        assert found.kind == kind and sum(found.values) / len(found.values) == pytest.approx(metrics[key]), key
    assert len(item_scores(records, "numeric_accuracy/numeric_items").ids) == metrics["n_numeric_items"]
    assert item_scores(records, "category/x/accuracy") is None


def test_compare_cli_on_two_real_retrieval_runs(make_cfg, tmp_path, clean_env, capsys):
    for name in ("bm25", "oracle"):  # real jobs; offline: their run folders only, no MLflow store to create
        run_job(make_cfg(*CLIM, f"retriever={name}", f"paths.output_dir={tmp_path}/{name}", "tracking.offline=true"))
    summary = capsys.readouterr().out
    assert re.search(r"recall@10 +\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", summary)  # the headline with its interval
    saved = json.loads((tmp_path / "bm25" / "metrics.json").read_text())
    assert saved["headline_metric"] == "recall@10" and saved["stats/cluster_key"] == "report"
    assert (
        saved["recall@10/ci_method"] == "cluster_wilson"  # BM25 finds every relevant passage: a share of 1
        and saved["recall@10/ci_low"] < 1.0
        and saved["recall@10/ci_low"] <= saved["recall@10"] <= saved["recall@10/ci_high"]
    )
    assert {"ndcg@10/stderr", "mrr/ci_low", "macro/recall@5/ci_high", "precision@5/stderr"} <= set(saved)

    out = tmp_path / "compare"
    command = [str(tmp_path / "bm25"), str(tmp_path / "oracle"), f"out_dir={out}"]
    done = run_cli("esgexp.compare", *command, cwd=REPO, env=clean_env)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "compare.json").read_text())
    [found] = report["comparisons"]
    oracle = json.loads((tmp_path / "oracle" / "metrics.json").read_text())
    assert found["metric"] == "recall@10" and found["test"] == "paired_cluster_bootstrap" and found["n_shared"] == 6
    assert (
        found["difference"] == pytest.approx(oracle["recall@10"] - saved["recall@10"])
        and found["ci_low"] <= found["difference"]
    )
    assert "recall@10" in done.stdout and "paired_cluster_bootstrap" in (out / "compare.md").read_text()
    with pytest.raises(UserError, match="at least two runs"):
        main([str(tmp_path / "bm25"), f"out_dir={out}"])

    # A run id is read from the tracking store: one that is down is one error naming it, in seconds.
    command = [str(tmp_path / "bm25"), "0123abcd", "tracking.uri=http://127.0.0.1:9"]
    done = run_cli("esgexp.compare", *command, cwd=REPO, env=clean_env, timeout=60)
    assert done.returncode == 2 and done.stderr.count("tracking.uri=http://127.0.0.1:9") == 1
    assert "tracking.offline" not in done.stderr  # reading runs: running offline is no way out
    assert "Traceback" not in done.stderr


def test_a_run_is_read_by_its_mlflow_id_even_without_its_folder(make_cfg, tmp_path):
    import shutil

    import mlflow

    run_job(make_cfg(*CLIM, "retriever=oracle", f"paths.output_dir={tmp_path}/oracle"))
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    mlflow.set_tracking_uri(uri)
    [run] = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert (run.data.tags["headline_metric"], run.data.tags["higher_is_better"]) == ("recall@10", "true")
    assert run.data.metrics["recall_at_10/ci_low"] <= run.data.metrics["recall_at_10"]
    by_id = load_run(run.info.run_id, uri)
    assert by_id.run_dir == tmp_path / "oracle" and by_id.tags["retriever"] == "oracle"
    shutil.rmtree(tmp_path / "oracle")  # the folder gone: its logged artifacts are read instead
    again = load_run(run.info.run_id, uri)
    assert again.run_dir != tmp_path / "oracle" and again.records.keys() == by_id.records.keys()
    assert again.metrics == by_id.metrics and again.headline == "recall@10"


def test_esgbench_scoring_runs_under_different_numeric_rules_are_refused(mcq_run):
    paper, ours = load_run(mcq_run("paper_rule")), load_run(mcq_run("our_rule"))
    for run, rule in ((paper, "esgbench"), (ours, "unit_aware")):
        run.config.update(task="esgbench_score", recall_k=5, metrics={"numeric": rule})
    with pytest.raises(UserError, match=r"score items differently: metrics\.numeric differs"):
        compare_pair(paper, ours)
