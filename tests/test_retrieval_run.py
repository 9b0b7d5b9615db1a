"""Jobs without a model: ClimRetrieve retrieval evaluation and ESGBench scoring of an external file."""

from __future__ import annotations

import hashlib
import json

import mlflow
import pytest
from helpers import read_jsonl

from esgexp.core.config import BUNDLED_DIR
from esgexp.data.climretrieve import ClimRetrieveReportLevel
from esgexp.errors import UserError
from esgexp.retrieval.dense import DenseRetriever
from esgexp.run import run_job

CLIM = ("experiment=climretrieve_retrieval", "dataset=climretrieve_sample")
REQUIRED = ["n_queries", "mrr"] + [
    f"{name}@{k}"
    for k in (5, 10, 15)
    for name in ("recall", "precision", "f1", "macro/recall", "ndcg", "random/recall")
]


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_climretrieve_job_reports_every_required_metric(make_cfg, tmp_path, retriever):
    metrics = run_job(make_cfg(*CLIM, f"retriever={retriever}"))
    assert set(REQUIRED) <= set(metrics) and metrics["n_queries"] == 6
    # Retrieval beats the random baseline on our sample, where the relevant paragraphs share the question's words.
    assert metrics["recall@5"] > metrics["random/recall@5"]
    rankings = read_jsonl(tmp_path / "run" / "rankings.jsonl")
    assert len(rankings) == 6 and all(len(r["retrieved"]) == 12 for r in rankings)  # 12 paragraphs per report
    assert all(hit["id"].startswith(r["doc"]) for r in rankings for hit in r["retrieved"])  # scoped to its report
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    assert run.data.tags["retriever"] == retriever and run.data.metrics["recall_at_5"] == pytest.approx(
        metrics["recall@5"]
    )
    # what the dense encoder computed in on this machine: precision and runtime as auto resolved them
    here = DenseRetriever(device="cpu")
    arithmetic = None if retriever == "bm25" else f"{here.precision}, {here.runtime}"
    assert run.data.tags.get("encoder_arithmetic") == arithmetic


def test_oracle_is_the_upper_bound(make_cfg):
    metrics = run_job(make_cfg(*CLIM, "retriever=oracle"))
    assert metrics["mrr"] == 1.0 and metrics["ndcg@15"] == 1.0


def test_threshold_changes_what_counts_as_relevant(make_cfg, tmp_path):
    strict = run_job(make_cfg(*CLIM, "retrieval.threshold=3", f"paths.output_dir={tmp_path}/a"))
    loose = run_job(make_cfg(*CLIM, "retrieval.threshold=1", f"paths.output_dir={tmp_path}/b"))
    assert strict["random/recall@5"] == loose["random/recall@5"]  # same candidates, N fixed per query
    assert strict["precision@5"] <= loose["precision@5"]


def test_query_formulations_change_the_query_text(make_cfg, tmp_path):
    run_job(
        make_cfg(*CLIM, "query=definition", "query.core_questions=${bundled:climretrieve/core_questions_sample.csv}")
    )
    first = read_jsonl(tmp_path / "run" / "rankings.jsonl")[0]
    assert "\n" in first["query"]  # question, newline, definition


def test_real_climretrieve_sample_end_to_end(make_cfg, shared_samples):
    path = shared_samples / "climretrieve" / "report_level_sample.csv"
    metrics = run_job(make_cfg(*CLIM, f"dataset.path={path}"))
    # 6 questions over the 32 distinct paragraphs of one report; 20 pairs graded >= 2.
    assert metrics["n_queries"] == 6
    assert metrics["random/recall@5"] == pytest.approx(5 / 32)


def test_bad_relevance_rows_are_listed_and_counted(make_cfg, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        ",paragraph,report,question,relevant_text,relevance,relevant_text_sim,sim_text_relevance\n"
        "0,Water use fell by 4%.,R1,Does it report water use?,,3,,\n"
        "1,We plant trees.,R1,Does it report water use?,,,,\n"
        "2,Board has 9 members.,R1,Does it report water use?,,0,,\n"
    )
    metrics = run_job(make_cfg(*CLIM, f"dataset.path={bad}"))
    assert metrics["n_skipped_rows"] == 1
    assert "field 'relevance'" in (tmp_path / "run" / "skipped_rows.txt").read_text()


def test_esgbench_score_on_our_sample(make_cfg, tmp_path):
    metrics = run_job(
        make_cfg(
            "experiment=esgbench_score", "dataset=esgbench_sample", "predictions=${bundled:esgbench/preds_sample.jsonl}"
        )
    )
    assert {"n_items", "em", "f1", "numeric_accuracy", "numeric_accuracy/numeric_items", "recall@5"} <= set(metrics)
    assert metrics["n_items"] == 13
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert metrics["em"] == pytest.approx(sum(r["em"] for r in records) / 13)
    # the scored file is known by its bytes, as the gold file is: its sha256 (no registry entry: our own sample)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    tags = mlflow.search_runs(search_all_experiments=True, output_format="list")[0].data.tags
    preds = BUNDLED_DIR / "esgbench" / "preds_sample.jsonl"
    assert tags["predictions_sha256"] == hashlib.sha256(preds.read_bytes()).hexdigest()
    assert "data_sha256" in tags and "predictions_registry" not in tags


def test_esgbench_score_on_the_real_sample(make_cfg, shared_samples):
    folder = shared_samples / "esgbench"
    metrics = run_job(
        make_cfg(
            "experiment=esgbench_score",
            f"dataset.path={folder / 'esgbench_open_source_sample40.jsonl'}",
            f"predictions={folder / 'esgbench_preds_sample40.jsonl'}",
        )
    )
    # Hand-checked in test_esgbench.py: EM 6/40, numeric 12/40, recall@5 28/40.
    assert (metrics["n_items"], metrics["em"], metrics["numeric_accuracy"], metrics["recall@5"]) == (
        40,
        6 / 40,
        12 / 40,
        28 / 40,
    )


def test_esgbench_score_needs_a_predictions_file(make_cfg):
    with pytest.raises(UserError, match="predictions"):
        run_job(make_cfg("experiment=esgbench_score", "dataset=esgbench_sample"))


def test_explanation_queries_are_generated_once_and_cached(tiny_cfg, tmp_path):
    common = (*CLIM, "query=explanation", "query.max_new_tokens=5")
    first = run_job(tiny_cfg(*common, f"paths.output_dir={tmp_path}/a"))
    second = run_job(
        tiny_cfg(*common, "query.with_question=false", "retriever=dense", f"paths.output_dir={tmp_path}/b")
    )
    # 3 distinct questions in our sample: generated by the first run, answered from the request cache in the second
    assert (first["n_requests"], first["n_cached"]) == (3, 0)
    assert (second["n_requests"], second["n_cached"]) == (0, 3)
    with_question = read_jsonl(tmp_path / "a" / "rankings.jsonl")
    alone = read_jsonl(tmp_path / "b" / "rankings.jsonl")
    sample = ClimRetrieveReportLevel("s", str(BUNDLED_DIR / "climretrieve" / "report_level_sample.csv"))
    questions = {query.text for query in sample.load().queries}
    assert all(r["query"].split("\n")[0] in questions for r in with_question)
    assert all(r["query"] == a["query"].split("\n", 1)[1] for r, a in zip(alone, with_question))


def test_scores_of_two_prediction_files_are_two_leaderboard_rows(make_cfg, tmp_path):
    from esgexp.leaderboard.board import export

    preds = BUNDLED_DIR / "esgbench" / "preds_sample.jsonl"
    empty = tmp_path / "na.jsonl"
    empty.write_text(
        "".join(json.dumps({**json.loads(line), "pred": "n/a"}) + "\n" for line in preds.read_text().splitlines())
    )
    for name, path in (("a", preds), ("b", empty)):
        run_job(
            make_cfg(
                "experiment=esgbench_score",
                "dataset=esgbench_sample",
                f"predictions={path}",
                f"paths.output_dir={tmp_path}/{name}",
            )
        )
    board = export(f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "board")
    assert str(preds) in board and str(empty) in board


def test_metric_names_mlflow_refuses_are_rewritten():
    from esgexp.core.tracking import metric_name

    assert metric_name("recall@5") == "recall_at_5"
    assert metric_name("esgbench/category/Water//n") == "esgbench/category/Water/_/n"
    assert metric_name("esgbench/category/../n") == "esgbench/category/_/n"
    long = metric_name("esgbench/category/" + "x" * 300 + "/accuracy")
    assert len(long) == 250 and long != metric_name("esgbench/category/" + "y" * 300 + "/accuracy")


def test_esgbench_score_with_a_limit_sets_the_other_rows_aside(make_cfg):
    metrics = run_job(
        make_cfg(
            "experiment=esgbench_score",
            "dataset=esgbench_sample",
            "dataset.limit=5",
            "predictions=${bundled:esgbench/preds_sample.jsonl}",
        )
    )
    assert metrics["n_items"] == 5 and metrics["n_unjoined_predictions"] == 0 and metrics["n_missing_predictions"] == 0


# A published ClimRetrieve run's rankings (Experiments/Embedding_Search_Results/<embedding>__<K>.csv): the
# report-level columns, then one 0/1 column per query setup (1: among the K retrieved); an empty flag is a row the
# paper's analysis drops.
RANKINGS = (
    ",paragraph,report,question,relevant_text,relevance,relevant_text_sim,sim_text_relevance,"
    "question__question_with_IR_150len,IR_all__question_with_IR_150len\n"
    "0,p1,R1.pdf,Q1,,3.0,0.5,1.0,1,1\n"
    "1,p2,R1.pdf,Q1,,2.0,0.5,1.0,0,1\n"
    "2,p3,R1.pdf,Q1,,0.0,0.5,1.0,1,0\n"
    "3,p4,R1.pdf,Q1,,1.0,0.5,1.0,1,0\n"
    "4,p1,R1.pdf,Q2,,0.0,0.5,1.0,1,1\n"
    "5,p2,R1.pdf,Q2,,2.0,0.5,1.0,1,\n"
    "6,p5,R2.pdf,Q1,,3.0,0.5,1.0,0,1\n"
    "7,p6,R2.pdf,Q1,,0.0,0.5,1.0,0,0\n"
)


def test_climretrieve_score_gives_the_papers_metric_of_published_rankings(make_cfg, tmp_path):
    """By hand, relevance >= 2 and every row one prediction (sklearn's P/R/F1 over rows, allMetrics_allThreholds):
    question__: 5 rows flagged, 4 relevant, 2 both: P 2/5, R 2/4, F1 4/9. IR_all__: its empty flag drops row 5;
    4 flagged, 3 relevant, 3 both: P 3/4, R 1, F1 6/7."""
    path = tmp_path / "text-embedding-3-small__5.csv"
    path.write_text(RANKINGS)
    common = ("experiment=climretrieve_score", f"dataset.path={path}")
    question = run_job(make_cfg(*common, "dataset.column=question__question_with_IR_150len"))
    assert (question["n_queries"], question["n_rows"], question["n_rows_without_flag"]) == (3, 8, 0)
    assert question["climretrieve/precision@5"] == pytest.approx(2 / 5)
    assert question["climretrieve/recall@5"] == pytest.approx(2 / 4)
    assert question["climretrieve/f1@5"] == pytest.approx(4 / 9)
    assert question["headline_metric"] == "climretrieve/f1@5" and "climretrieve/f1@5/ci_low" in question
    records = read_jsonl(tmp_path / "run" / "rankings.jsonl")
    assert records[0]["metrics"] == {"tp@5": 1, "retrieved@5": 3, "n_relevant": 2} and records[0]["doc"] == "R1.pdf"
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.data.tags["task"] == "climretrieve_score" and run.data.tags["k"] == "5"
    assert run.data.tags["data_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert run.data.metrics["climretrieve/f1_at_5"] == pytest.approx(4 / 9)
    informed = run_job(
        make_cfg(*common, "dataset.column=IR_all__question_with_IR_150len", f"paths.output_dir={tmp_path}/b")
    )
    assert (informed["n_rows"], informed["n_rows_without_flag"]) == (7, 1)
    assert informed["climretrieve/precision@5"] == pytest.approx(3 / 4)
    assert informed["climretrieve/recall@5"] == 1.0
    assert informed["climretrieve/f1@5"] == pytest.approx(6 / 7)


def test_climretrieve_rankings_name_their_setup_columns_and_k(tmp_path):
    from esgexp.data.climretrieve import ClimRetrieveRankings

    path = tmp_path / "text-embedding-3-small__15.csv"
    path.write_text(RANKINGS)
    with pytest.raises(UserError, match=r"choose the query setup to score with dataset\.column=NAME") as chosen:
        ClimRetrieveRankings(name="x", path=str(path)).load()
    assert str(chosen.value).endswith("question__question_with_IR_150len, IR_all__question_with_IR_150len")
    with pytest.raises(UserError, match=r"dataset\.column=IR__x: .* has no such column"):
        ClimRetrieveRankings(name="x", path=str(path), column="IR__x").load()
    loaded = ClimRetrieveRankings(name="x", path=str(path), column="IR_all__question_with_IR_150len").load()
    assert loaded.k == 15 and [q.id for q in loaded.queries] == ["R1#q1", "R1#q2", "R2#q1"]
    other = tmp_path / "mine.csv"
    other.write_text(RANKINGS)
    with pytest.raises(UserError, match=r"dataset.k: .*mine.csv is not named <embedding>__<K>.csv"):
        ClimRetrieveRankings(name="x", path=str(other), column="IR_all__question_with_IR_150len").load()
    assert (
        ClimRetrieveRankings(name="x", path=str(other), column="IR_all__question_with_IR_150len", k=10).load().k == 10
    )
