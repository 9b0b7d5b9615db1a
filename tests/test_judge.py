"""The LLM judge of open answers (judge=..., esgexp/eval/judge.py): its prompt, how replies are read, its metrics
on hand-made records with known values, and whole runs with the real SmolLM2-135M as judge (transformers here,
and llama.cpp's OpenAI-compatible server)."""

from __future__ import annotations

import json

import mlflow
import pytest
from cli import run_cli
from helpers import read_jsonl

from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.eval.judge import (
    EVIDENCE_CHARS,
    agreement_metrics,
    judge_metrics,
    judge_prompt,
    judge_request,
    kappa,
    parse_verdict,
    run_judge,
    set_verdict,
)
from esgexp.eval.stats import StatsSettings
from esgexp.jobs.identity import job_identity
from esgexp.jobs.settings import problems
from esgexp.tasks.qa import item_scores

FACTOID = ("experiment=sustainableqa_factoid", "dataset=sustainableqa_sample")


def test_the_prompt_shows_question_gold_evidence_and_answer():
    prompt = judge_prompt(
        "esg-judge-v1",
        "What were Scope 1 emissions in 2024?",
        ("1,482,300 tCO2e",),
        " 1.48 Mt ",
        ("Gross  Scope 1\n: 1,482,300",),
    )
    assert "compare the candidate answer with the gold answer and the evidence from the report" in prompt.lower()
    assert prompt.endswith(
        "Question: What were Scope 1 emissions in 2024?\nGold answer: 1,482,300 tCO2e\n"
        "Evidence: Gross Scope 1 : 1,482,300\nCandidate answer: 1.48 Mt\n\n"
        'Reply with a JSON object: first "reason", one short line on what in the candidate answer matches or differs\n'
        'from the gold answer; then "verdict": correct, partially_correct or incorrect.'
    )
    bare = judge_prompt("esg-judge-v1", "Q?", ("a", "b"), "a", ())
    assert "Evidence:" not in bare and "Gold answer: a | b\nCandidate answer: a" in bare and "evidence" not in bare
    long = judge_prompt("esg-judge-v1", "Q?", ("a",), "a", ("x" * (EVIDENCE_CHARS + 50),))
    assert "x" * EVIDENCE_CHARS + " ...\n" in long and "x" * (EVIDENCE_CHARS + 1) not in long
    with pytest.raises(UserError, match=r"judge\.prompt_version must be one of esg-judge-v1, got 'v0'"):
        judge_prompt("v0", "Q?", ("a",), "a", ())


def test_a_request_carries_the_verdict_schema_and_leaves_the_evidence_out_when_told(make_cfg):
    spec = make_cfg(*FACTOID, "judge=default", "judge.evidence=false").judge
    item = QAItem("i1", "Which year?", ("2023",), "factoid", context=("Since 2023.",))
    request = judge_request(item, "2023", spec)
    assert request.id == "i1" and request.max_new_tokens == 96 and "Since 2023." not in request.prompt
    schema = json.loads(request.json_schema)
    assert list(schema["properties"]) == ["reason", "verdict"]
    assert schema["properties"]["verdict"]["enum"] == ["correct", "partially_correct", "incorrect"]


@pytest.mark.parametrize(
    "reply, verdict, why",
    [
        ('{"reason": "Same figure, other notation.", "verdict": "correct"}', "correct", "Same figure, other notation."),
        (
            '{"reason": "Two of\\n three items.", "verdict": "partially_correct"}',
            "partially_correct",
            "Two of three items.",
        ),
        ('{"reason": "The year differs', None, "not JSON (cut off by judge.max_new_tokens?)"),
        (
            '{"reason": "x", "verdict": "right"}',
            None,
            "verdict 'right' is not one of correct, partially_correct, incorrect",
        ),
        ('{"verdict": "correct"}', None, "no reason given"),
        ('["correct"]', None, "not a JSON object"),
        ("correct", None, "not JSON"),
        ("", None, "empty reply"),
    ],
)
def test_a_reply_is_a_verdict_or_says_why_not(reply, verdict, why):
    assert parse_verdict(reply) == (verdict, why)


def judged(item_id: str, qtype: str, verdict: str, **values) -> dict:
    record = {"id": item_id, "qtype": qtype, "answer": "x", "metrics": dict(values)}
    set_verdict(record, verdict, "hand-made")
    return record


HAND_MADE = [
    judged("r1", "factoid", "correct", f1=1.0, em=1),
    judged("r2", "factoid", "correct", f1=0.8, em=0),
    judged("r3", "factoid", "incorrect", f1=0.6, em=0),  # a high F1 the judge calls incorrect
    judged("r4", "factoid", "partially_correct", f1=0.2, em=0),
    judged("r5", "factoid", "correct", f1=0.0, em=0),  # a low F1 the judge calls correct
    judged("r6", "factoid", "incorrect", f1=0.0, em=0),
    judged("r7", "non_factoid", "correct", rougeL=0.7),
    judged("r8", "non_factoid", "incorrect", rougeL=0.1),
]


def test_metrics_of_hand_made_verdicts():
    metrics = judge_metrics(HAND_MADE, StatsSettings(bootstrap=200))
    assert metrics["judge/accuracy"] == 4 / 8 and metrics["judge/credit"] == 4.5 / 8
    assert metrics["factoid/judge_accuracy"] == 3 / 6 and metrics["factoid/judge_credit"] == 3.5 / 6
    assert metrics["non_factoid/judge_accuracy"] == 1 / 2
    assert metrics["judge/accuracy/ci_method"] == "wilson" and metrics["judge/credit/ci_method"] == "bootstrap"
    assert metrics["judge/accuracy/ci_low"] < 0.5 < metrics["judge/accuracy/ci_high"]
    assert (metrics["judge/n_correct"], metrics["judge/n_partially_correct"], metrics["judge/n_incorrect"]) == (4, 1, 3)
    assert metrics["judge/n_invalid"] == 0 and metrics["judge/n_not_asked"] == 0
    agree = agreement_metrics(HAND_MADE)
    assert agree == {
        "judge/agree/n_f1_high": 3,
        "judge/agree/n_f1_low": 3,
        "judge/agree/f1_high_judged_incorrect": pytest.approx(1 / 3),
        "judge/agree/f1_low_judged_correct": pytest.approx(1 / 3),
        "judge/agree/n_rougeL_high": 1,
        "judge/agree/n_rougeL_low": 1,
        "judge/agree/rougeL_high_judged_incorrect": 0.0,
        "judge/agree/rougeL_low_judged_correct": 0.0,
        "judge/agree/n_em": 6,
        "judge/agree/em_rate": pytest.approx(4 / 6),
        "judge/agree/em_kappa": pytest.approx(1 / 3),  # observed 2/3, chance 1/2
    }
    assert kappa([True, True], [True, False]) == 0.0  # observed 1/2, chance 1/2
    assert kappa([True, False], [True, False]) == 1.0 and kappa([True, True], [True, True]) is None


def test_compare_and_intervals_read_the_per_item_verdicts(make_cfg):
    cfg = make_cfg(*FACTOID)
    overall = item_scores(HAND_MADE, "judge/accuracy", cfg)
    assert overall.kind == "proportion" and sum(overall.values) == 4 and len(overall.ids) == 8
    per_type = item_scores(HAND_MADE, "factoid/judge_credit", cfg)
    assert per_type.kind == "mean" and per_type.values == [1.0, 1.0, 0.0, 0.5, 1.0, 0.0]


def test_judge_is_part_of_the_identity_and_refused_outside_open_qa(make_cfg):
    plain, judged_cfg = make_cfg(*FACTOID), make_cfg(*FACTOID, "judge=default")
    assert "judge" not in plain  # runs made before judges existed keep their config_hash
    assert job_identity(plain) != job_identity(judged_cfg) != job_identity(make_cfg(*FACTOID, "judge=gpt-4o"))
    assert job_identity(judged_cfg) != job_identity(make_cfg(*FACTOID, "judge=default", "judge.evidence=false"))
    # the judge's speed settings are not: how many requests at a time, batch or live
    faster = make_cfg(*FACTOID, "judge=default", "+judge.backend_overrides={max_concurrency: 32, batch: true}")
    assert job_identity(judged_cfg) == job_identity(faster)
    assert job_identity(judged_cfg) != job_identity(
        make_cfg(*FACTOID, "judge=default", "+judge.backend_overrides.api=completions")
    )
    assert problems(judged_cfg) == []
    assert problems(make_cfg("judge=default")) == [
        "judge grades open answers (task=qa|esgbench_score); task=mcq has none: drop judge=... (or set judge=null)"
    ]
    assert problems(make_cfg(*FACTOID, "judge=default", "judge.prompt_version=v9", "judge.backend=ollama")) == [
        "judge.backend must be one of hf, openai, vllm or null, got 'ollama'",
        "judge.prompt_version must be one of esg-judge-v1, got 'v9'",
    ]


@pytest.mark.usefixtures("made_store")
def test_an_unknown_judge_model_is_named_before_any_answer(tiny_cfg, tmp_path):
    from esgexp.run import run_job

    cfg = tiny_cfg(*FACTOID, "dataset.limit=2", "judge=default", "judge.model=no-such-model")
    with pytest.raises(UserError, match=r"judge.model: no model config 'no-such-model' .*known: .*smollm2-135m"):
        run_job(cfg)
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_unanswered_items_are_not_asked_and_replies_cut_off_count_as_invalid(make_cfg):
    """SmolLM2 as judge with a 4-token budget: every reply is cut off mid-JSON, so invalid and incorrect; the
    unanswered and the empty answer are not asked at all."""
    cfg = make_cfg(*FACTOID, "judge=default", "judge.max_new_tokens=4")
    items = [QAItem(f"q{i}", "Which year?", ("2023",), "factoid") for i in range(4)]
    records = [
        {"id": "q0", "qtype": "factoid", "answer": "2023", "metrics": {"em": 1, "f1": 1.0}},
        {"id": "q1", "qtype": "factoid", "answer": "2021", "metrics": {"em": 0, "f1": 0.0}},
        {"id": "q2", "qtype": "factoid", "answer": "", "failed": True, "metrics": {"em": 0, "f1": 0.0}},
        {"id": "q3", "qtype": "factoid", "answer": "  ", "metrics": {"em": 0, "f1": 0.0}},
    ]
    metrics = run_judge(cfg, items, records)
    assert metrics["judge/n_asked"] == 2 and metrics["judge/n_not_asked"] == 2 and metrics["judge/n_invalid"] == 2
    assert metrics["judge/accuracy"] == 0.0 and metrics["judge/n_incorrect"] == 4
    assert records[2]["judge"] == {"verdict": "incorrect", "reason": "never answered", "not_asked": True}
    assert records[3]["judge"]["reason"] == "empty answer"
    assert records[0]["judge"]["invalid"] and records[0]["judge"]["raw"].startswith("{")
    assert records[0]["judge"]["reason"].startswith("invalid judge reply (not JSON")
    assert records[0]["metrics"]["judge_accuracy"] == 0.0


@pytest.mark.usefixtures("made_store")
def test_a_run_with_a_judge_logs_verdicts_and_a_rerun_asks_the_judge_nothing(tmp_path, tiny_model_dir, clean_env):
    from esgexp.leaderboard.board import export

    args = (
        *FACTOID,
        "dataset.limit=3",
        "scoring.max_new_tokens=4",
        "model=local",
        f"model.path={tiny_model_dir}",
        "judge=default",
        "judge.max_new_tokens=40",  # a reply cut off is invalid (scored incorrect): enough for this test
        f"paths.root_dir={tmp_path}",
        "trainer.progress_bar=false",
    )
    first = run_cli("esgexp", *args, f"paths.output_dir={tmp_path}/r1", cwd=tmp_path, env=clean_env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "judge/accuracy" in first.stdout
    metrics = json.loads((tmp_path / "r1" / "metrics.json").read_text())
    records = read_jsonl(tmp_path / "r1" / "predictions.jsonl")
    assert len(records) == 3 and all(
        r["judge"]["verdict"] in ("correct", "partially_correct", "incorrect") for r in records
    )
    assert all(isinstance(r["judge"]["reason"], str) and "judge_accuracy" in r["metrics"] for r in records)
    correct = sum(r["judge"]["verdict"] == "correct" for r in records)
    assert metrics["judge/accuracy"] == correct / 3 and metrics["factoid/judge_accuracy"] == correct / 3
    assert {"judge/accuracy/ci_low", "judge/accuracy/ci_high", "judge/credit", "judge/agree/n_em"} <= set(metrics)
    asked = metrics["judge/n_asked"]
    assert asked + metrics["judge/n_not_asked"] == 3 and metrics.get("judge/n_cached", 0) == 0
    # The same config again: every answer and every verdict comes from the request cache.
    second = run_cli("esgexp", *args, f"paths.output_dir={tmp_path}/r2", cwd=tmp_path, env=clean_env)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads((tmp_path / "r2" / "metrics.json").read_text())
    assert again["judge/n_cached"] == asked and again["judge/n_requests"] == 0
    assert again["judge/accuracy"] == metrics["judge/accuracy"]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = mlflow.search_runs(search_all_experiments=True, output_format="list")[0]
    assert run.data.tags["judge_model"] == "smollm2-135m" and run.data.tags["judge_prompt"] == "esg-judge-v1"
    assert run.data.metrics["judge/accuracy"] == pytest.approx(metrics["judge/accuracy"])
    export(f"sqlite:///{tmp_path}/mlruns/mlflow.db", tmp_path / "board", formats=("csv", "html"))
    lines = (tmp_path / "board" / "leaderboard.csv").read_text().splitlines()
    rows = [dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:]]
    assert rows and all(r["judge"] == "smollm2-135m" and r["judge_prompt"] == "esg-judge-v1" for r in rows)
    assert all(r["judge_accuracy"] == f"{metrics['judge/accuracy']:.4f}" for r in rows)
    page = (tmp_path / "board" / "index.html").read_text()
    assert "<th>judge</th>" in page and "smollm2-135m (esg-judge-v1)</td>" in page
    assert f">{metrics['judge/accuracy']:.3f} [" in page  # judge/accuracy with its interval


def test_a_judge_behind_an_openai_compatible_server(make_cfg, llama_server):
    """SmolLM2 served by llama.cpp's server as the judge (judge.backend=openai): its replies come back under the
    schema (response_format), and asking again is answered from the request cache."""
    cfg = make_cfg(
        *FACTOID,
        "judge=default",
        "judge.backend=openai",
        f"+judge.backend_overrides.base_url={llama_server}",
        "+judge.backend_overrides.response_format=json_object",
    )
    items = [
        QAItem("a", "What were Scope 1 emissions in 2024?", ("1,482,300 tCO2e",), "factoid"),
        QAItem("b", "Which share came from alternative fuels in 2024?", ("18.6%",), "factoid"),
    ]

    def records() -> list[dict]:
        return [
            {"id": "a", "qtype": "factoid", "answer": "1,482,300 tCO2e", "metrics": {"em": 1, "f1": 1.0}},
            {"id": "b", "qtype": "factoid", "answer": "15.2%", "metrics": {"em": 0, "f1": 0.0}},
        ]

    first = records()
    metrics = run_judge(cfg, items, first)
    assert metrics["judge/n_asked"] == 2 and metrics["judge/n_failed"] == 0 and metrics["judge/n_requests"] == 2
    valid = [r for r in first if not r["judge"].get("invalid")]
    assert valid, [r["judge"] for r in first]  # at least one reply parsed (the other may be cut off)
    again = run_judge(cfg, items, records())
    assert again["judge/n_cached"] == 2 and again["judge/n_requests"] == 0
    assert again["judge/accuracy"] == metrics["judge/accuracy"]


@pytest.mark.usefixtures("made_store")
def test_a_rerun_answered_from_the_cache_needs_no_judge_server(make_cfg, tmp_path):
    """The judge on a server is probed only when something will be asked: a first run probes it (a server check
    and a judge request), then asks it 2 verdicts (after its run's own server check); the same run again, every answer and verdict in the request cache, asks
    nothing and runs with both servers gone (before: the probe failed it). A rerun whose answers are cached but
    whose verdicts are not (another prompt version) probes the judge first, and is told it is down."""
    from openai_server import FakeOpenAI

    from esgexp.run import run_job

    verdict = json.dumps({"reason": "It matches.", "verdict": "correct"})
    with FakeOpenAI(answer="18.6%") as model, FakeOpenAI(answer=verdict) as judge:
        args = (
            *FACTOID, "dataset.limit=2", "backend=openai", f"backend.base_url={model.base_url}", "judge=default",
            "judge.backend=openai", f"+judge.backend_overrides.base_url={judge.base_url}",
            "+judge.backend_overrides.backoff_s=0.01", "backend.backoff_s=0.01",
        )  # fmt: skip
        first = run_job(make_cfg(*args, f"paths.output_dir={tmp_path}/r1"))
        assert first["judge/n_requests"] == 2 and judge.count == 2 + 1 + 2
    again = run_job(make_cfg(*args, f"paths.output_dir={tmp_path}/r2"))
    assert again["judge/n_cached"] == 2 and again["judge/n_requests"] == 0 and again["n_cached"] == 2
    assert again["judge/accuracy"] == first["judge/accuracy"] == 1.0
    with pytest.raises(UserError, match=r"^judge smollm2-135m: the server at http://127.0.0.1:\d+/v1 does not answer"):
        run_job(make_cfg(*args, "judge.evidence=false", f"paths.output_dir={tmp_path}/r3"))


def test_a_judge_through_the_batch_api(make_cfg, llama_server, tmp_path):
    """The judge's requests as one batch (the stand-in Batch API in front of llama.cpp's server): the verdict is
    the live judge's."""
    from batch_api import FakeBatchAPI

    items = [QAItem("a", "What were Scope 1 emissions in 2024?", ("1,482,300 tCO2e",), "factoid")]
    records = [{"id": "a", "qtype": "factoid", "answer": "1,482,300 tCO2e", "metrics": {"em": 1, "f1": 1.0}}]
    judge = ("judge=default", "judge.backend=openai", "+judge.backend_overrides.response_format=json_object")
    live = make_cfg(*FACTOID, *judge, f"+judge.backend_overrides.base_url={llama_server}", "cache=off")
    expected = [dict(r) for r in records]
    run_judge(live, items, expected)
    with FakeBatchAPI(llama_server) as api:
        batched = make_cfg(
            *FACTOID,
            *judge,
            f"+judge.backend_overrides.base_url={api.base_url}",
            "+judge.backend_overrides.batch=true",
            "+judge.backend_overrides.batch_poll_s=0.05",
            "cache=off",
            f"paths.cache_dir={tmp_path}/cache",  # the batch registry: this test's own
        )
        found = [dict(r) for r in records]
        run_judge(batched, items, found)
        assert api.created == ["batch_1"] and api.live == 0
    assert found[0]["judge"] == expected[0]["judge"]


def test_a_dry_run_prices_the_judges_requests(tmp_path, clean_env):
    """judge=gpt-4o: one judge request per item at GPT-4o's prices, live and as a batch (half)."""
    env = {**clean_env, "OPENAI_API_KEY": "not-used"}
    args = (*FACTOID, "judge=gpt-4o", "dry_run=true", f"paths.runs_dir={tmp_path}/runs")
    done = run_cli("esgexp", *args, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (plan,) = tmp_path.glob("runs/**/memory_plan.json")
    judged = json.loads(plan.read_text())["cost"]["judge gpt-4o"]
    assert judged["requests"] > 0 and judged["batch"] == pytest.approx(judged["live"] / 2)
    assert f"judge gpt-4o: {judged['requests']} requests" in done.stdout


def test_a_judge_grades_an_external_esgbench_predictions_file(make_cfg, tmp_path):
    """experiment=esgbench_score judge=default: the predictions file's answers judged beside EM, F1 and the numeric
    rule; verdicts in the records, agreement with EM and F1, and compare reads the per-item verdicts."""
    from esgexp.core.config import BUNDLED_DIR
    from esgexp.run import run_job
    from esgexp.tasks.esgbench_score import item_scores as scoring_item_scores

    cfg = make_cfg(
        "experiment=esgbench_score",
        "dataset=esgbench_sample",
        f"predictions={BUNDLED_DIR / 'esgbench' / 'preds_sample.jsonl'}",
        "dataset.limit=3",
        "judge=default",
        "judge.max_new_tokens=40",
    )
    metrics = run_job(cfg)
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(records) == 3 and all(
        r["judge"]["verdict"] in ("correct", "partially_correct", "incorrect") for r in records
    )
    correct = sum(r["judge"]["verdict"] == "correct" for r in records)
    assert metrics["judge/accuracy"] == correct / 3 and metrics["judge/n_asked"] + metrics["judge/n_not_asked"] == 3
    assert {"judge/accuracy/ci_low", "judge/agree/em_rate", "judge/agree/n_f1_high"} <= set(metrics)
    scores = scoring_item_scores(records, "judge/accuracy")
    assert scores.kind == "proportion" and sum(scores.values) == correct


def test_the_judge_is_checked_before_the_first_item(make_cfg, llama_server, monkeypatch):
    """The judge's key is checked at the start, and its server and response format by one request before the
    first thing it is asked: llama-cpp-python's server fails the default json_schema form (HTTP 500) and the
    error names json_object; the judge's key unset and its server down are one line each."""
    from openai_server import free_port

    from esgexp.eval.judge import check_judge, probe_judge

    def probed(cfg) -> None:
        probe_judge(cfg, check_judge(cfg))

    served = ("judge=default", "judge.backend=openai", f"+judge.backend_overrides.base_url={llama_server}")
    quick = "+judge.backend_overrides.backoff_s=0.05"
    with pytest.raises(UserError, match=r"for it, \+judge.backend_overrides.response_format=json_object$"):
        probed(make_cfg(*FACTOID, *served, quick, "cache=off"))
    probed(make_cfg(*FACTOID, *served, "+judge.backend_overrides.response_format=json_object", "cache=off"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(
        UserError, match=r"^judge: model gpt-4o: API key not set \(environment variable OPENAI_API_KEY\)"
    ):
        check_judge(make_cfg(*FACTOID, "judge=default", "judge.model=gpt-4o"))
    down = f"+judge.backend_overrides.base_url=http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(UserError, match=r"^judge smollm2-135m: the server at http://127.0.0.1:\d+/v1 does not answer"):
        probed(make_cfg(*FACTOID, "judge=default", "judge.backend=openai", down))


def test_failed_judge_requests_make_the_run_incomplete():
    """A judge request that failed is a verdict never given: the job ends incomplete (exit 3), never exit 0."""
    from esgexp.run import INCOMPLETE_EXIT, exit_if_incomplete

    with pytest.raises(SystemExit) as ended:
        exit_if_incomplete({"n_failed": 0, "judge/n_failed": 2, "judge/accuracy": 1.0})
    assert ended.value.code == INCOMPLETE_EXIT
    assert exit_if_incomplete({"n_failed": 0, "judge/n_failed": 0}) == {"n_failed": 0, "judge/n_failed": 0}
