"""backend=openai against a real OpenAI-compatible server (llama.cpp's, serving SmolLM2), through a fault proxy."""

import json
import logging
import re
import signal
import time
from pathlib import Path

import pytest
from cli import run_cli, start_cli
from helpers import read_jsonl
from omegaconf import OmegaConf

from esgexp.backends.base import GenerationRequest, LetterRequest, RunContext
from esgexp.backends.openai import OpenAIBackend
from esgexp.backends.openai_client import retry_after
from esgexp.errors import UserError
from esgexp.run import run_job

REFERENCE = Path(__file__).parent / "data" / "smollm2_sample_predictions.jsonl"
REPO = Path(__file__).resolve().parent.parent

# Every job here logs to a store made in advance: none of these tests is about creating one.
pytestmark = pytest.mark.usefixtures("made_store")


def api(base_url: str, *extra: str) -> tuple[str, ...]:
    """Overrides for SmolLM2 through the server at ``base_url`` (quick retries for the fault tests; a timeout
    long enough for a busy machine, where 8 requests queue for the one slot)."""
    return ("backend=openai", f"backend.base_url={base_url}", "backend.backoff_s=0.05", "backend.timeout_s=120", *extra)


def model_cfg():
    return OmegaConf.create({"name": "smollm2-135m", "hub_id": None, "adapter": None})


def hf_reference(scoring: str) -> dict:
    return {r["id"]: r for r in read_jsonl(REFERENCE) if r["scoring"] == scoring}


def test_generate_mode_agrees_with_hf_and_a_rerun_makes_no_request(make_cfg, fault_proxy, tmp_path):
    metrics = run_job(make_cfg(*api(fault_proxy.base_url), "dataset.limit=12"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    reference = hf_reference("generate")
    agree = sum(r["parsed"] == reference[r["id"]]["parsed"] for r in records) / len(records)
    # The server runs the Q4_1 weights as they are, HF the dequantised ones: greedy letters agree on most
    # items (on all 48: see benchmarks/RESULTS.md). 12 items: a request costs the server 1-2 CPU-seconds.
    assert metrics["n_items"] == 12 and metrics["invalid_rate"] < 0.5 and agree >= 0.9, agree
    assert (
        metrics["n_requests"] == 12
        and metrics["usage/prompt_tokens"] > 12 * 50
        and metrics["usage/completion_tokens"] > 0
    )
    sent = fault_proxy.count_path("/v1/chat/completions")
    assert sent == 12 + 1  # the items and the one start-up probe

    again = run_job(make_cfg(*api(fault_proxy.base_url), "dataset.limit=12", f"paths.output_dir={tmp_path}/again"))
    assert fault_proxy.count_path("/v1/chat/completions") == sent  # nothing reached the server
    assert (again["n_cached"], again["n_requests"]) == (12, 0)
    rerun = read_jsonl(tmp_path / "again" / "predictions.jsonl")
    assert [(r["id"], r["output"], r["parsed"]) for r in rerun] == [
        (r["id"], r["output"], r["parsed"]) for r in records
    ]


def test_logprob_mode_scores_every_letter(make_cfg, llama_server, tmp_path):
    metrics = run_job(make_cfg(*api(llama_server), "scoring=logprob", "dataset.limit=12"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert metrics["invalid_rate"] == 0.0 and len(records) == 12
    for record in records:
        assert set(record["scores"]) == set("ABCD")
        assert record["parsed"] == max(record["scores"], key=record["scores"].get)
    reference = hf_reference("logprob")  # the same chat prompt as HF's: the letters agree with the dequantised model's
    assert sum(r["parsed"] == reference[r["id"]]["parsed"] for r in records) >= 10
    assert metrics["n_letters_missing"] == sum(1 for r in records for v in r["scores"].values() if v == float("-inf"))


def test_completions_scores_the_letters_from_the_top_list(llama_server, tmp_path):
    backend = OpenAIBackend(
        model_cfg(), RunContext(str(tmp_path), "", 0), llama_server, api="completions", progress_bar=False
    )
    prompt = "<|im_start|>user\nWhich letter comes first in the alphabet? Answer with one letter: A, B, C or D.<|im_end|>\n<|im_start|>assistant\n"
    answer = backend.answer_letters(LetterRequest("q", prompt))
    assert answer.output == "A" and set(answer.scores) == set("ABCD") and -5.0 < answer.scores["A"] < 0


def test_a_model_that_ends_its_answer_at_once_has_every_letter_missing(llama_server, tmp_path):
    """SmolLM2 given a raw (not chat) prompt emits end-of-turn first: no letter, counted, parsed as the empty text;
    a run of such answers only is refused (see test_logprob_on_completions_with_no_letter_...)."""
    backend = OpenAIBackend(
        model_cfg(), RunContext(str(tmp_path), "", 0), llama_server, api="completions", progress_bar=False
    )
    answer = backend.answer_letters(LetterRequest("q", "Question: Which?\nA. x\nB. y\nAnswer:"))
    assert answer.scores == {letter: float("-inf") for letter in "ABCD"} and answer.output == ""
    assert backend.stats()["n_letters_missing"] == 4
    with pytest.raises(UserError, match=r"gave no log-probability to any answer letter on the first 1 question"):
        backend.run([LetterRequest("q", "Question: Which?\nA. x\nB. y\nAnswer:")], [].extend)


def test_faults_are_retried_and_counted(make_cfg, fault_proxy, tmp_path):
    fault_proxy.fail_when("carbon", "429", times=2, retry_after=1)
    fault_proxy.fail_when("emission", "500", times=2)
    fault_proxy.fail_when("Scope", "drop", times=1)
    fault_proxy.fail_when("GRI", "delay", times=1, delay=7)
    start = time.monotonic()
    # 8 items: every rule finds its word (in items 0, 5, 6 and 7) and each request costs the server CPU
    metrics = run_job(
        make_cfg(*api(fault_proxy.base_url, "backend.timeout_s=6", "backend.max_concurrency=2"), "dataset.limit=8")
    )
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(records) == 8 and not any(r.get("failed") for r in records)
    applied = fault_proxy.faults
    # every fault costs one retry (a machine this busy may add timeouts of its own)
    assert metrics["n_retries"] >= len(applied) >= 3 and metrics["n_failed"] == 0, applied
    if "429" in applied:  # Retry-After: 1 was honoured, not the 0.05 s backoff
        assert time.monotonic() - start >= 1.0


def test_an_item_whose_retries_run_out_is_recorded_failed_and_resume_redoes_only_it(make_cfg, fault_proxy, tmp_path):
    cfg = make_cfg(*api(fault_proxy.base_url, "backend.max_retries=1"), "dataset.limit=6")
    question = first_question(cfg)
    fault_proxy.fail_when(lambda r: question in json.dumps(r.json()), "500")  # every request for this one item
    metrics = run_job(cfg)
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    failed = [r for r in records if r.get("failed")]
    assert len(records) == 6 and len(failed) == 1 and "HTTP 500" in failed[0]["error"] and metrics["n_failed"] == 1
    assert metrics["n_failed_requests"] == 1 and metrics["n_retries"] == 1

    fault_proxy.reset()
    resumed = run_job(make_cfg(*api(fault_proxy.base_url), "dataset.limit=6", "resume=true"))
    assert resumed["n_resumed"] == 5 and resumed["n_failed"] == 0 and resumed["n_requests"] == 1
    assert fault_proxy.count_path("/v1/chat/completions") == 2  # the probe and that one item
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(records) == 6 and not any(r.get("failed") for r in records)


def first_question(cfg) -> str:
    """The question of the first item of ``cfg``'s dataset, JSON-escaped as it appears in a request body."""
    from hydra.utils import instantiate

    return json.dumps(instantiate(cfg.dataset).load().items[0].question)[1:-1]


def test_a_client_error_fails_the_item_at_once_with_the_servers_message(llama_server, tmp_path):
    backend = OpenAIBackend(
        model_cfg(), RunContext(str(tmp_path), "", 0), llama_server, backoff_s=0.01, progress_bar=False
    )
    answers: list = []
    long = "word " * 5000  # past the server's 2,048-token context: a 400, not worth a retry
    backend.run(
        [GenerationRequest("long", long), GenerationRequest("short", "Say hi.", max_new_tokens=3)], answers.extend
    )
    by_id = {a.id: a for a in answers}
    assert by_id["long"].failed and "HTTP 400" in by_id["long"].error and "context" in by_id["long"].error.lower()
    assert not by_id["short"].failed and backend.stats()["n_retries"] == 0


def test_an_unreachable_server_is_one_clear_message_before_any_item(make_cfg):
    import time

    started = time.monotonic()  # with the default 5 retries: no server there is said at once, not after them
    with pytest.raises(
        UserError,
        match=r"the server at http://127.0.0.1:9/v1 does not answer \(connection failed: \[Errno 111\] Connection refused\)",
    ):
        run_job(make_cfg(*api("http://127.0.0.1:9/v1")))
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "override, message",
    [
        ("backend.max_concurrency=abc", "backend.max_concurrency must be an integer >= 1, got 'abc'"),
        ("backend.max_concurrency=0", "backend.max_concurrency must be an integer >= 1, got 0"),
        ("backend.timeout_s=-1", "backend.timeout_s must be a number > 0, got -1"),
        ("backend.max_retries=-2", "backend.max_retries must be an integer >= 0"),
        ("backend.api=rest", "backend.api must be one of chat, completions, got 'rest'"),
        ("backend.base_url=localhost", "backend.base_url must be a server URL"),
        ("cache=sometimes", "cache must be one of read_write, read_only, refresh, off"),
    ],
)
def test_bad_backend_settings_are_named_before_any_work(make_cfg, override, message):
    with pytest.raises(UserError, match=re.escape(message)):
        run_job(make_cfg("backend=openai", override, "dataset.limit=2"))


def test_retry_after_reads_seconds_and_dates():
    assert retry_after("3") == 3.0 and retry_after(None) is None
    assert 0 <= retry_after("Wed, 21 Oct 2015 07:28:00 GMT") < 1  # a past date: no wait


def test_the_key_reaches_the_server_and_nothing_else(make_cfg, fault_proxy, tmp_path, monkeypatch):
    secret = "sk-test-5d1b9c0e7a"
    monkeypatch.setenv("ESGEXP_TEST_KEY", secret)
    run_job(make_cfg(*api(fault_proxy.base_url, "backend.api_key_env=ESGEXP_TEST_KEY"), "dataset.limit=2"))
    assert all(r.headers.get("Authorization") == f"Bearer {secret}" for r in fault_proxy.requests)
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []  # not in config.yaml, params, tags, logs, predictions or the request cache


def test_kill_9_mid_run_then_resume_loses_and_repeats_nothing(fault_proxy, tmp_path, clean_env):
    """A CLI run is killed while it answers; resume=true finishes it without resending a finished request."""
    fault_proxy.fail_when(lambda request: True, "delay", delay=0.3)  # every answer slowed: the kill lands mid-run
    args = cli_args(fault_proxy.base_url, tmp_path, "backend.max_concurrency=1", "dataset.limit=8")
    process = start_cli("esgexp", *args, cwd=REPO, env=clean_env)
    deadline = time.monotonic() + 200  # a busy machine takes a minute to start a job
    predictions = None
    while time.monotonic() < deadline:
        found = list(tmp_path.glob("runs/**/predictions.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 3:
            predictions = found[0]
            break
        time.sleep(0.1)
    process.kill()
    _, stderr = process.communicate()
    assert predictions is not None, stderr[-2000:]
    answered = {r["id"] for r in read_jsonl(predictions)}
    first_bodies = fault_proxy.bodies("/v1/chat/completions")
    fault_proxy.reset()

    done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)  # no signal: no new process
    assert done.returncode == 0, done.stderr[-2000:]
    (latest,) = [p for p in tmp_path.glob("runs/**/predictions.jsonl") if p != predictions]
    records = read_jsonl(latest)
    assert len(records) == 8 and len({r["id"] for r in records}) == 8 and not any(r.get("failed") for r in records)
    resent = [b for b in fault_proxy.bodies("/v1/chat/completions")[1:] if b in first_bodies[1 : len(answered) + 1]]
    assert len(first_bodies) >= len(answered) and resent == []


# --- faults a user meets (issue 19) -----------------------------------------------------------------------


def cli_args(base_url: str, tmp_path, *extra: str) -> list[str]:
    """The arguments of ``python -m esgexp`` on SmolLM2 through ``base_url``, its runs and request cache under
    ``tmp_path``."""
    return [
        *api(base_url),
        f"paths.root_dir={tmp_path}",
        f"paths.request_cache={tmp_path}/requests.sqlite",
        "trainer.progress_bar=false",
        *extra,
    ]


def questions(cfg, n: int) -> list[str]:
    """The first ``n`` questions of ``cfg``'s dataset, JSON-escaped as they appear in a request body."""
    from hydra.utils import instantiate

    return [json.dumps(item.question)[1:-1] for item in instantiate(cfg.dataset).load().items[:n]]


def test_a_reply_cut_off_after_its_headers_is_retried_and_counted(make_cfg, fault_proxy, tmp_path, clean_env):
    """200, headers and half the body, then the connection closes: on the probe and on an item (a CLI run)."""
    [question] = questions(make_cfg("dataset.limit=6"), 1)
    fault_proxy.fail_next(1, "truncate")  # the start-up probe
    fault_proxy.fail_when(question, "truncate", times=1)
    done = run_cli("esgexp", *cli_args(fault_proxy.base_url, tmp_path, "dataset.limit=6"), cwd=REPO, env=clean_env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert fault_proxy.faults == ["truncate", "truncate"]
    (metrics_file,) = tmp_path.glob("runs/**/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert metrics["n_retries"] == 2 and metrics["n_failed"] == 0 and metrics["n_failed_requests"] == 0
    records = read_jsonl(metrics_file.parent / "predictions.jsonl")
    assert len(records) == 6 and not any(r.get("failed") for r in records)


@pytest.fixture
def slow_api():
    """A stand-in API answering every request after 1.5 s, behind a counting FaultProxy (``.base_url``)."""
    from openai_server import FakeOpenAI, FaultProxy

    with FakeOpenAI(delay=1.5) as fake, FaultProxy(fake.base_url) as proxy:
        yield proxy


def test_ctrl_c_keeps_every_answer_the_server_sent_and_resume_finishes(slow_api, tmp_path, clean_env):
    """SIGINT while requests are in flight: their answers (arriving during the shutdown) are written too."""
    args = cli_args(slow_api.base_url, tmp_path, "backend.max_concurrency=3", "dataset.limit=12")
    process = start_cli("esgexp", *args, cwd=REPO, env=clean_env)
    deadline, predictions = time.monotonic() + 200, None
    while time.monotonic() < deadline and predictions is None:
        found = list(tmp_path.glob("runs/**/predictions.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 3:
            predictions = found[0]
        time.sleep(0.05)
    if predictions is None:
        process.kill()
        pytest.fail(f"no 3 answers within 200 s: {process.communicate()[1][-2000:]}")
    time.sleep(0.5)  # the next three are on their way
    in_flight = slow_api.count - slow_api.answered
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0 and in_flight >= 1
    records = read_jsonl(predictions)
    # every item answer the server sent (all but the probe) is in predictions.jsonl, none twice, none failed
    assert len(records) == slow_api.answered - 1 == len({r["id"] for r in records}), stderr[-2000:]
    assert len(records) >= 3 + in_flight and not any(r.get("failed") for r in records)
    assert slow_api.count == slow_api.answered  # nothing was sent after the signal but never answered

    kept = len(records)
    slow_api.reset()
    done = run_cli("esgexp", *args, "resume=true", cwd=REPO, env=clean_env)  # no signal: no new process
    assert done.returncode == 0, done.stderr[-2000:]
    (latest,) = [p for p in tmp_path.glob("runs/**/predictions.jsonl") if p != predictions]
    assert len(read_jsonl(latest)) == 12 and slow_api.count_path("/v1/chat/completions") == 1 + 12 - kept


def test_timeouts_on_a_one_slot_server_lower_the_concurrency_instead_of_snowballing(make_cfg, caplog):
    """timeout_s=1.5 against a single-slot server that takes 3 s on one item (issue 19, at half its times: 6 items
    made 30 requests and 5 of them failed): the client lowers its concurrency and lengthens the timeouts instead."""
    from openai_server import FakeOpenAI, FaultProxy

    [slow] = questions(make_cfg("dataset.limit=6"), 1)
    with FakeOpenAI(delay=0.15) as fake, FaultProxy(fake.base_url, slots=1) as proxy:
        proxy.fail_when(slow, "delay", delay=3)  # every try of that item: a long answer, holding the one slot
        logger = logging.getLogger("esgexp.backends.openai_client")
        logger.addHandler(caplog.handler)
        try:
            metrics = run_job(
                make_cfg(*api(proxy.base_url, "backend.timeout_s=1.5", "backend.max_concurrency=8"), "dataset.limit=6")
            )
        finally:
            logger.removeHandler(caplog.handler)
        sent = proxy.count
    assert metrics["n_failed"] == 0 and metrics["n_items"] == 6
    assert sent <= 16 and metrics["n_retries"] <= 10, (sent, metrics["n_retries"])  # before: 32 requests, 5 failed
    assert any("did not answer within its timeout: now at most 4 request(s) at a time" in m for m in caplog.messages)


def test_a_long_retry_after_is_logged_with_how_long_and_why(caplog):
    from openai_server import FakeOpenAI, FaultProxy

    from esgexp.backends.openai_client import OpenAIClient

    with FakeOpenAI() as fake, FaultProxy(fake.base_url) as proxy:
        proxy.fail_next(1, "429", retry_after=600)
        client = OpenAIClient(proxy.base_url, backoff_s=0.01, max_wait_s=0.5)
        started = time.monotonic()
        logger = logging.getLogger("esgexp.backends.openai_client")  # a job's logging setup may stop propagation
        logger.addHandler(caplog.handler)
        try:
            reply, retries = client.post("/completions", {"prompt": "Hi", "max_tokens": 1})
        finally:
            logger.removeHandler(caplog.handler)
    assert reply["choices"] and retries == 1 and time.monotonic() - started >= 0.5
    message = next(m for m in caplog.messages if "asks to retry after" in m)
    assert f"the server at {proxy.base_url} asks to retry after 600 s (HTTP 429" in message
    assert "it asked for 600 s; one wait is at most max_wait_s=0.5 s" in message


def test_logprob_on_completions_with_no_letter_is_caught_by_the_first_answers(make_cfg, fault_proxy):
    """A raw prompt on /completions: SmolLM2 ends its answer at once, so no letter has a log-probability."""
    with pytest.raises(
        UserError, match=r"gave no log-probability to any answer letter on the first 3 question"
    ) as caught:
        run_job(make_cfg(*api(fault_proxy.base_url, "backend.api=completions"), "scoring=logprob", "dataset.limit=8"))
    assert fault_proxy.base_url in str(caught.value) and "use backend.api=chat" in str(caught.value)
    assert fault_proxy.count_path("/v1/completions") == 1 + 3  # the probe and the first three items, no more


def test_a_logprob_run_with_every_letter_missing_is_an_error_not_a_result(make_cfg, fault_proxy, tmp_path):
    """The first answers fail (no probe of the letters), the rest all lack every letter: an error, answers kept."""
    cfg = make_cfg(
        *api(fault_proxy.base_url, "backend.api=completions", "backend.max_retries=0"),
        "scoring=logprob",
        "dataset.limit=5",
    )
    first = questions(cfg, 3)
    fault_proxy.fail_when(lambda r: any(q in json.dumps(r.json()) for q in first), "500")  # no probe answer at all
    with pytest.raises(
        UserError, match=r"gave no log-probability to any answer letter on all 2 question\(s\) it answered"
    ):
        run_job(cfg)
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert len(records) == 5 and sum(1 for r in records if r.get("failed")) == 3  # every answer kept on disk


# --- OpenAI's o-series reasoning models (issue 20) ------------------------------------------------------------


def reasoning_job(make_cfg, base_url: str, *extra: str):
    return make_cfg(
        "model=o3",
        f"backend.base_url={base_url}",
        "++model.api.params=reasoning",
        "backend.backoff_s=0.01",
        "scoring=generate",
        "dataset.limit=3",
        *extra,
    )


def test_a_reasoning_model_gets_max_completion_tokens_and_no_temperature(make_cfg, tmp_path, monkeypatch):
    from openai_server import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    with FakeOpenAI(reasoning=True, answer="B") as fake:
        metrics = run_job(reasoning_job(make_cfg, fake.base_url, "++model.api.reasoning_effort=low"))
        bodies = fake.bodies
    assert metrics["n_failed"] == 0 and metrics["n_items"] == 3 and len(bodies) == 1 + 3
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert [r["parsed"] for r in records] == ["B"] * 3
    for body in bodies[1:]:  # the model's generation budget, reasoning included; no stop strings
        assert body["max_completion_tokens"] >= 1024 and body["reasoning_effort"] == "low" and body["model"] == "o3"
        assert not {"max_tokens", "temperature", "stop", "logprobs"} & set(body)


def test_a_reasoning_model_without_its_parameter_rule_is_refused_by_the_server_at_the_probe(make_cfg, monkeypatch):
    """Sent as a standard model, the fake endpoint answers what OpenAI's does: 400 on max_tokens."""
    from openai_server import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    with FakeOpenAI(reasoning=True) as fake:
        cfg = reasoning_job(make_cfg, fake.base_url, "++model.api.params=standard", "++model.api.reasoning_effort=null")
        with pytest.raises(
            UserError, match=r"refused a generate request for model 'o3': HTTP 400: Unsupported parameter: 'max_tokens'"
        ):
            run_job(cfg)
        assert fake.count == 1  # the probe only


@pytest.mark.parametrize(
    "extra, message",
    [
        (("scoring=logprob",), "backend=openai cannot answer logprob requests for model 'o3'"),
        (("++model.api.reasoning_effort=extreme",), "model.api.reasoning_effort must be one of low, medium, high"),
        (("backend.api=completions",), "model 'o3' (model.api.params=reasoning) answers on chat only"),
        (("++model.api.params=fast",), "model.api.params must be one of standard, reasoning, got 'fast'"),
    ],
)
def test_bad_reasoning_settings_are_named_before_any_request(make_cfg, monkeypatch, extra, message):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    with pytest.raises(UserError, match=re.escape(message)):
        run_job(reasoning_job(make_cfg, "http://127.0.0.1:9/v1", *extra))


# --- reasoning output: the final answer only, and a reasoning cut off by the token budget (issue 34) ----------

# Names letters, as real reasoning does: none of them may be read as the answer.
THINKING = "The question is about Scope 3. Option A looks right, B and C do not fit, so maybe D."


def test_hidden_reasoning_cut_off_by_the_budget_is_counted_unfinished(make_cfg, tmp_path, monkeypatch):
    """o-series: reasoning hidden, only counted. The second question (TCFD's opportunities, gold C) spends the whole
    budget thinking: an empty answer that is an unfinished reasoning, as it is again from the request cache."""
    from openai_server import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    with FakeOpenAI(reasoning=True, answer="D", thinking=THINKING, thinking_field=None, out_of_budget="TCFD") as fake:
        metrics = run_job(reasoning_job(make_cfg, fake.base_url))
        cached = run_job(reasoning_job(make_cfg, fake.base_url, f"paths.output_dir={tmp_path}/again"))
        budget = fake.bodies[1]["max_completion_tokens"]
        assert fake.count == 1 + 3  # the rerun came from the cache
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert [r["gold"] for r in records] == ["B", "C", "D"]
    assert [r["output"] for r in records] == ["D", "<think>", "D"] and [r["parsed"] for r in records] == [
        "D",
        "INVALID",
        "D",
    ]
    assert [bool(r.get("unfinished_reasoning")) for r in records] == [False, True, False]
    for run in (metrics, cached):
        assert run["accuracy"] == pytest.approx(1 / 3) and run["invalid_rate"] == pytest.approx(1 / 3)
        assert run["invalid/unfinished_reasoning"] == pytest.approx(1 / 3)
    assert metrics["usage/reasoning_tokens"] == 2 * len(THINKING.split()) + budget
    assert metrics["usage/completion_tokens"] == 2 * (len(THINKING.split()) + 1) + budget
    assert cached["n_cached"] == 3 and "usage/reasoning_tokens" not in cached


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_returned_apart_is_never_parsed_as_the_answer(make_cfg, tmp_path, monkeypatch, field):
    """DeepSeek's API and vLLM's reasoning parser return the thinking in its own field (``reasoning_content``;
    ``reasoning`` in newer vLLM): the output is the final content; a reply cut off while thinking has none."""
    from openai_server import FakeOpenAI

    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-fake")
    with FakeOpenAI(answer="D", thinking=THINKING, thinking_field=field, out_of_budget="TCFD") as fake:
        cfg = make_cfg("model=deepseek-r1", f"backend.base_url={fake.base_url}", "scoring=generate", "dataset.limit=3")
        metrics = run_job(cfg)
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert [r["output"] for r in records] == ["D", "<think>", "D"]
    assert [r["parsed"] for r in records] == ["D", "INVALID", "D"]
    assert metrics["invalid/unfinished_reasoning"] == pytest.approx(1 / 3) and metrics["accuracy"] == pytest.approx(
        1 / 3
    )
    assert metrics["usage/reasoning_tokens"] == 2 * len(THINKING.split()) + 8192  # deepseek-r1's token budget
