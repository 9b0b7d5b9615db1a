"""End-to-end jobs on the tiny random Llama: run folder, MLflow run, resume, interruption, leaderboard."""

import json
import signal

import mlflow
import pytest
from conftest import compose_config
from helpers import read_jsonl
from omegaconf import OmegaConf

import esgexp.tasks.generation
from esgexp.errors import UserError
from esgexp.eval.mcq import parse_answer
from esgexp.leaderboard.board import export
from esgexp.run import run_job

# Jobs log to a store made in advance (tmp_path/mlruns, see conftest made_store); the first test makes its own.
pytestmark = pytest.mark.usefixtures("made_store")


def test_job_writes_run_folder_and_mlflow_run(tiny_cfg, tmp_path, capsys):
    cfg = tiny_cfg("scoring=logprob", "dataset.limit=12", f"paths.mlruns_dir={tmp_path}/new")  # no store there yet
    metrics = run_job(cfg)
    run_dir = tmp_path / "run"

    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved == metrics
    for key in ("n_items", "accuracy", "invalid_rate", "abstention_rate", "baseline/random", "baseline/longest_option"):
        assert key in saved
    assert saved["n_items"] == 12 and saved["invalid_rate"] == 0.0  # logprob never returns INVALID
    assert any(key.startswith("accuracy/framework/") for key in saved)

    records = read_jsonl(run_dir / "predictions.jsonl")
    assert len(records) == 12 and len({r["id"] for r in records}) == 12
    for r in records:
        assert set(r["scores"]) == set("ABCD") and r["output"] == max(r["scores"], key=r["scores"].get)
        assert r["parsed"] == parse_answer(r["output"]) and r["correct"] == (r["parsed"] == r["gold"])
    assert saved["accuracy"] == pytest.approx(sum(r["correct"] for r in records) / 12)
    assert OmegaConf.load(run_dir / "config.yaml").model.path == cfg.model.path

    mlflow.set_tracking_uri(cfg.tracking.uri)
    [run] = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "FINISHED"
    assert run.data.tags["dataset"] == "esg_sample" and run.data.tags["scoring"] == "logprob"
    assert run.data.tags["model"] == "local" and "git_commit" in run.data.tags
    assert run.data.params["strategy.name"] == "zero_shot" and run.data.params["seed"] == "42"
    assert run.data.metrics["accuracy"] == pytest.approx(saved["accuracy"])
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"config.yaml", "predictions.jsonl", "metrics.json"} <= artifacts

    out = capsys.readouterr().out
    assert "accuracy" in out and "baseline: longest option" in out and run.info.run_id in out and str(run_dir) in out


def test_same_config_gives_same_predictions(tiny_cfg, tmp_path):
    outputs = []
    for name in ("a", "b"):
        run_job(tiny_cfg("dataset.limit=6", f"paths.output_dir={tmp_path}/{name}", "scoring.max_new_tokens=4"))
        outputs.append([r["output"] for r in read_jsonl(tmp_path / name / "predictions.jsonl")])
    assert outputs[0] == outputs[1]


def test_context_strategy_on_data_without_passages_is_refused(tiny_cfg, tmp_path, shared_samples):
    path = shared_samples / "esgenius" / "ESGenius_1136q_sample40.csv"
    with pytest.raises(UserError, match="needs each question's source passage"):
        run_job(tiny_cfg("strategy=context", f"dataset.path={path}"))


def test_resume_reuses_finished_predictions(tiny_cfg, tmp_path, monkeypatch):
    first = tiny_cfg("scoring=logprob", f"paths.output_dir={tmp_path}/runs/esg_sample/d/t1")
    run_job(first)
    done = read_jsonl(tmp_path / "runs/esg_sample/d/t1/predictions.jsonl")
    # Simulate an interrupted run: 10 finished lines, one failure and a line cut short.
    partial = tmp_path / "runs/esg_sample/d/t2"
    partial.mkdir(parents=True)
    (partial / "config.yaml").write_text((tmp_path / "runs/esg_sample/d/t1/config.yaml").read_text())
    lines = [json.dumps(r) for r in done[:10]] + [json.dumps({**done[10], "failed": True}), '{"id": "cut']
    (partial / "predictions.jsonl").write_text("\n".join(lines))

    asked = []
    real_predict = esgexp.tasks.generation.predict
    monkeypatch.setattr(
        esgexp.tasks.generation,
        "predict",
        lambda cfg, task, src, items, *a: (asked.extend(items), real_predict(cfg, task, src, items, *a))[1],
    )
    metrics = run_job(tiny_cfg("scoring=logprob", "resume=true", f"paths.output_dir={tmp_path}/runs/esg_sample/d/t3"))
    assert metrics["n_resumed"] == 10
    assert len(asked) == len(done) - 10  # the failed and the cut item are redone
    final = read_jsonl(tmp_path / "runs/esg_sample/d/t3/predictions.jsonl")
    assert sorted(r["id"] for r in final) == sorted(r["id"] for r in done)
    assert {r["id"]: r["output"] for r in final} == {r["id"]: r["output"] for r in done}


def test_resume_ignores_runs_of_another_config(tiny_cfg, tmp_path):
    run_job(tiny_cfg("dataset.limit=5", f"paths.output_dir={tmp_path}/runs/esg_sample/d/t1", "scoring=logprob"))
    metrics = run_job(
        tiny_cfg(
            "dataset.limit=5",
            "resume=true",
            f"paths.output_dir={tmp_path}/runs/esg_sample/d/t2",
            "scoring.max_new_tokens=2",
        )
    )
    assert metrics["n_resumed"] == 0


def test_interrupted_job_keeps_finished_batches(tiny_cfg, tmp_path, monkeypatch):
    from esgexp.models import scoring

    calls = []
    real_call = scoring.LogprobScorer.__call__

    def interrupt_third_batch(self, model, ids, input_ids, attention_mask):
        calls.append(len(input_ids))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_call(self, model, ids, input_ids, attention_mask)

    monkeypatch.setattr(scoring.LogprobScorer, "__call__", interrupt_third_batch)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises((KeyboardInterrupt, SystemExit)):
            run_job(tiny_cfg("scoring=logprob", "trainer.batch_size=4"))
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores Ctrl-C after catching one
    assert len(read_jsonl(tmp_path / "run" / "predictions.jsonl")) == 8
    mlflow.set_tracking_uri(compose_config(tmp_path).tracking.uri)
    [run] = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.status == "KILLED"


def test_leaderboard_lists_every_finished_run(tiny_cfg, tmp_path):
    run_job(tiny_cfg("scoring=logprob", "dataset.limit=4", f"paths.output_dir={tmp_path}/r1"))
    run_job(
        tiny_cfg("strategy=context", "dataset.limit=4", "scoring.max_new_tokens=2", f"paths.output_dir={tmp_path}/r2")
    )
    cfg = compose_config(tmp_path, name="leaderboard")
    markdown = export(cfg.tracking.uri, tmp_path / "board")
    csv_lines = (tmp_path / "board" / "leaderboard.csv").read_text().splitlines()
    assert csv_lines[0] == (
        "dataset,task,model,backend,finetuned_from,family,size_b,instruct,strategy,retriever,query,scoring,encoder,"
        "predictions,judge,judge_prompt,n,unanswered,items,variant,headline,value,ci_low,ci_high,stderr,not_worse,"
        "p_vs_best,ci_note,accuracy,invalid_rate,factoid_f1,nonfactoid_rouge_l,nonfactoid_bertscore,table_rouge_l,"
        "esgbench_numeric_acc,recall@10,judge_accuracy,judge_credit,run_id"
    )
    rows = [dict(zip(csv_lines[0].split(","), line.split(","))) for line in csv_lines[1:]]
    assert len(rows) == 2
    assert {row["strategy"] + "/" + row["scoring"] for row in rows} == {"zero_shot/logprob", "context/generate"}
    assert all(row["n"] == "4" and row["task"] == "mcq" and row["factoid_f1"] == "" for row in rows)
    assert all(len(row["accuracy"]) == 6 for row in rows)  # accuracy as 0.xxxx, even 0 or 1
    assert markdown.count("\n") == 4 and (tmp_path / "board" / "leaderboard.md").read_text() == markdown


def test_a_folder_with_predictions_is_never_overwritten_silently(tiny_cfg, tmp_path):
    run_job(tiny_cfg("scoring=logprob", "dataset.limit=3"))
    with pytest.raises(UserError, match=r"already holds predictions.jsonl: pass resume=true"):
        run_job(tiny_cfg("scoring=logprob", "dataset.limit=3"))
    with pytest.raises(UserError, match=r"already holds predictions.jsonl of another config"):
        run_job(tiny_cfg("scoring=logprob", "dataset.limit=3", "seed=7", "resume=true"))
    assert run_job(tiny_cfg("scoring=logprob", "dataset.limit=3", "resume=true"))["n_resumed"] == 3


def test_leaderboard_shows_the_newest_run_of_a_repeated_config(tiny_cfg, tmp_path):
    for name in ("first", "second"):
        run_job(tiny_cfg("scoring=logprob", "dataset.limit=3", f"paths.output_dir={tmp_path}/{name}"))
    uri = compose_config(tmp_path, name="leaderboard").tracking.uri
    mlflow.set_tracking_uri(uri)
    newest = mlflow.search_runs(
        search_all_experiments=True, order_by=["attributes.start_time DESC"], output_format="list"
    )[0]
    latest = export(uri, tmp_path / "latest")
    everything = export(uri, tmp_path / "all", latest_only=False)
    assert latest.count("\n") == 3 and newest.info.run_id in latest
    assert everything.count("\n") == 4


def test_rag_for_multiple_choice_retrieves_among_all_source_passages(tiny_cfg, tmp_path):
    metrics = run_job(tiny_cfg("strategy=rag", "scoring=logprob", "strategy.top_k=2"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert metrics["rag/n_with_gold"] == 48 and len(records) == 48
    found = sum(r["retrieval"]["gold_retrieved"] for r in records)
    assert metrics["rag/gold_retrieved_rate"] == found / 48
    # BM25 over the 48 source passages finds every question's own passage in the top 2.
    assert found == 48
    wrong_missed = sum(not r["correct"] and not r["retrieval"]["gold_retrieved"] for r in records)
    assert metrics["rag/retrieval_miss_rate"] == wrong_missed / 48
    oracle = run_job(
        tiny_cfg(
            "strategy=rag", "retriever=oracle", "scoring=logprob", "strategy.top_k=1", f"paths.output_dir={tmp_path}/o"
        )
    )
    assert oracle["rag/gold_retrieved_rate"] == 1.0 and oracle["rag/retrieval_miss_rate"] == 0.0


def test_a_run_where_every_item_failed_is_kept_on_disk_but_marked_failed(tiny_cfg, tmp_path, monkeypatch):
    import torch

    def out_of_memory(self, model, ids, input_ids, attention_mask):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("esgexp.models.scoring.GenerateScorer.__call__", out_of_memory)
    with pytest.raises(UserError, match="every item failed"):
        run_job(tiny_cfg("dataset.limit=3"))
    assert len(read_jsonl(tmp_path / "run" / "predictions.jsonl")) == 3
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["n_failed"] == 3
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert mlflow.search_runs(search_all_experiments=True, output_format="list")[0].info.status == "FAILED"


def test_a_setting_nobody_listed_decides_resume_and_a_declared_runtime_setting_does_not(tiny_cfg, tmp_path):
    """Every setting is part of a run's identity (esgexp/jobs/identity.py) unless it is declared not to change
    outputs: a new config group (``+grader.strictness``) changed means no answer is reused; a change of
    the batch size, the progress bar or the interval settings alone resumes every answer."""

    def job(folder, *more):
        return tiny_cfg(
            "scoring=logprob", "dataset.limit=4", f"paths.output_dir={tmp_path}/runs/esg_sample/d/{folder}", *more
        )

    run_job(job("t1", "+grader.strictness=1"))
    assert run_job(job("t2", "+grader.strictness=2", "resume=true"))["n_resumed"] == 0
    same = job("t3", "+grader.strictness=1", "resume=true", "trainer.batch_size=2", "stats.bootstrap=200")
    assert run_job(same)["n_resumed"] == 4


@pytest.mark.numerics
def test_logprob_in_bf16_autocast_rechecks_close_calls_in_float32(tiny_cfg, tmp_path):
    """The tiny random model's letters are all close calls: with a margin wider than any gap, every answer is
    scored again in float32 and the run's scores are float32's; with margin 0 none is, and bf16's stand."""
    common = ("scoring=logprob", "dataset.limit=6")
    autocast = (*common, "backend.logprob_autocast=bfloat16")
    assert "n_rechecked" not in run_job(tiny_cfg(*common, f"paths.output_dir={tmp_path}/fp32"))
    every = run_job(tiny_cfg(*autocast, "backend.recheck_margin=1000", f"paths.output_dir={tmp_path}/all"))
    none = run_job(tiny_cfg(*autocast, "backend.recheck_margin=0", f"paths.output_dir={tmp_path}/none"))
    assert every["n_rechecked"] == 6 and none["n_rechecked"] == 0
    scores = {
        name: {r["id"]: r["scores"] for r in read_jsonl(tmp_path / name / "predictions.jsonl")}
        for name in ("fp32", "all", "none")
    }
    for key, expected in scores["fp32"].items():
        assert scores["all"][key] == pytest.approx(expected, abs=1e-5)
    assert scores["none"] != scores["fp32"]
    with pytest.raises(UserError, match=r"logprob_autocast=bfloat16 computes over float32 weights.*model.dtype=bf"):
        run_job(tiny_cfg(*autocast, "model.dtype=bfloat16", f"paths.output_dir={tmp_path}/bf16"))


@pytest.mark.numerics
def test_logprob_autocast_on_a_cpu_without_native_bf16_says_it_is_slower_there(tiny_cfg, tmp_path, monkeypatch, caplog):
    import esgexp.models.loading

    monkeypatch.setattr(
        esgexp.models.loading, "cpu_has_fast_bf16", lambda: (False, "CPU capability AVX2 has no native bf16")
    )
    run_job(tiny_cfg("scoring=logprob", "dataset.limit=2", "backend.logprob_autocast=bfloat16"))
    assert "CPU capability AVX2 has no native bf16; bf16 is emulated on this CPU and slower than float32" in caplog.text
