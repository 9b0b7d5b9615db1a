"""Servers that fail for good, and what backend=openai says about them: a server that dies mid-run, one that
answers every request with an error, a base URL without /v1, a prompt longer than the model's context, a reply
that is not JSON (that one is retried). Against the stand-in API and the real llama.cpp server, through the
fault proxy (tests/openai_server.py)."""

import json
import re
import time
from pathlib import Path

import pytest
from cli import run_cli
from omegaconf import OmegaConf
from openai_server import FakeOpenAI, FaultProxy

from esgexp.backends.base import GenerationRequest, RunContext
from esgexp.backends.openai import OpenAIBackend
from esgexp.backends.openai_client import context_overflow
from esgexp.errors import UserError
from esgexp.tasks.generation import unanswered_advice

REPO = Path(__file__).resolve().parent.parent


def backend(base_url: str, tmp_path, **settings) -> OpenAIBackend:
    model = OmegaConf.create({"name": "smollm2-135m", "hub_id": None, "adapter": None})
    return OpenAIBackend(model, RunContext(str(tmp_path), "", 0), base_url, progress_bar=False, **settings)


def incomplete_run(done, root: Path) -> tuple[str, list[dict], list[dict]]:
    """The output, records and failed records of a job under ``root`` that ended incomplete (exit 3)."""
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    (predictions,) = root.glob("runs/**/predictions.jsonl")
    records = [json.loads(line) for line in predictions.read_text().splitlines()]
    return output, records, [r for r in records if r.get("failed")]


@pytest.fixture
def fake_proxy():
    """The stand-in API (instant answers, no model) behind a fault proxy."""
    with FakeOpenAI() as fake, FaultProxy(fake.base_url) as proxy:
        yield proxy


def test_a_server_that_dies_mid_run_ends_the_run_in_seconds_with_one_line(fake_proxy, tmp_path, clean_env, made_store):
    """The proxy answers the start-up probe and 5 items, then refuses and drops every connection: the other
    15 items fail at once with the one reason (default retries and backoff), the job exits 3 (incomplete)."""
    fake_proxy.die_after(6)
    started = time.monotonic()
    done = run_cli(
        "esgexp",
        "backend=openai",
        f"backend.base_url={fake_proxy.base_url}",
        "backend.max_concurrency=2",
        "dataset.limit=20",
        f"paths.root_dir={tmp_path}",
        f"paths.request_cache={tmp_path}/requests.sqlite",
        "trainer.progress_bar=false",
        cwd=REPO,
        env=clean_env,
    )
    elapsed = time.monotonic() - started
    output, records, failed = incomplete_run(done, tmp_path)
    # the 5 answers relayed before it died, and any that the server sent while it died
    answered = len(records) - len(failed)
    gone = f"the server at {fake_proxy.base_url} stopped answering after {answered} items ("
    assert len(records) == 20 and answered in (5, 6) and all(r["error"].startswith(gone) for r in failed)
    assert output.count(gone) == 2 and "; resume=true continues" in output  # the warning, the end
    assert "item " not in output and "gave up after" not in output  # no warning per item
    assert f"never answered                 {len(failed)} (resume=true finishes them)" in output
    assert not any(r.get("permanent") for r in failed)
    assert elapsed < 15, elapsed  # before: every item's 5 retries, 31 s each, 2 at a time


@pytest.mark.parametrize(("kind", "said"), [("500", "HTTP 500: Internal server error"), ("drop", "connection dropped")])
def test_a_server_that_starts_failing_every_item_ends_the_run_in_seconds(
    fake_proxy, tmp_path, clean_env, made_store, kind, said
):
    """The server answers the start-up probe and 5 items, then fails every item's request while it still
    answers (a crashed worker behind a proxy, an out-of-memory loop): the circuit breaker ends the run as
    incomplete in seconds, naming what the server answered, instead of every item's retries (31 items: 145 s
    before). A server that fails every item from the start ends the same way, as a run that failed."""
    fake_proxy.fail_when(lambda request: fake_proxy.answered >= 6, kind, path="/v1/chat/completions")
    started = time.monotonic()
    args = (f"backend.base_url={fake_proxy.base_url}", f"paths.root_dir={tmp_path}", "trainer.progress_bar=false")
    one_at_a_time = ("backend.max_concurrency=1", "backend.backoff_s=0.2")
    done = run_cli("esgexp", "backend=openai", *one_at_a_time, "dataset.limit=31", *args, cwd=REPO, env=clean_env)
    elapsed = time.monotonic() - started
    output, records, failed = incomplete_run(done, tmp_path)
    failing = f"the server at {fake_proxy.base_url} failed every request after 5 items (8 requests in a row failed"
    # one item used up its retries, the next 6 got none, the 8th tripped the breaker: it and the other 18 end at once
    assert len(records) == 31 and len(failed) == 26 and all(said in r["error"] for r in failed)
    assert sum(r["error"].startswith(failing) for r in failed) == 19
    assert failing in output and "; resume=true continues" in output  # the warning, once
    assert "never answered                 26 (resume=true finishes them)" in output
    assert elapsed < 20, elapsed

    fake_proxy.reset()
    fake_proxy.fail_when(lambda request: "Hello" not in request.text, kind, path="/v1/chat/completions")
    started = time.monotonic()
    done = run_cli("esgexp", "backend=openai", "dataset.limit=31", "cache=off", *args, cwd=REPO, env=clean_env)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "failed every request after 0 items" in output and "resume=true asks them again" in output
    assert time.monotonic() - started < 20


def test_a_busy_server_whose_health_check_times_out_is_not_taken_for_stopped(fake_proxy, tmp_path, caplog):
    """Three connections dropped in a row while the server is too busy to answer its /models within
    connect_timeout_s: it took the health check's connection, so it is up. One warning says so, the items are
    retried and answered; before, every item failed as "stopped answering after 0 items"."""
    fake_proxy.fail_when(lambda request: "Hello" not in request.text, "drop", times=3, path="/v1/chat/completions")
    fake_proxy.fail_when(None, "delay", path="/v1/models", delay=3)
    answers: list = []
    with backend(fake_proxy.base_url, tmp_path, backoff_s=0.01, connect_timeout_s=0.3, max_concurrency=1) as client:
        client.run([GenerationRequest(f"q{i}", f"Question {i}") for i in range(4)], answers.extend)
    assert len(answers) == 4 and not any(a.failed for a in answers), [a.error for a in answers]
    assert fake_proxy.count_path("/v1/models") == 1 and "stopped answering" not in caplog.text
    assert (
        f"the server at {fake_proxy.base_url} lost 3 connections in a row, but it is up: its health check (GET "
        "/v1/models) took the connection and did not answer within 0.3 s (busy); not taken for stopped"
    ) in caplog.text


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        (
            "500",
            "answers a generate request for model 'smollm2-135m' with errors (HTTP 500: Internal server error "
            "(injected by FaultProxy) (gave up after 2 retries: the server has not answered any request well)): "
            "the server fails on its side",
        ),
        (
            "drop",
            "takes the connection of a generate request for model 'smollm2-135m' but drops it before answering "
            "(connection dropped: Remote end closed connection without response (gave up after 2 retries: the "
            "server has not answered any request well)): look at its log",
        ),
    ],
)
def test_a_server_that_fails_every_request_from_the_first_is_one_error_after_three_tries(
    fake_proxy, tmp_path, kind, said
):
    """Every request fails, the start-up probe too (its /models answers): the probe is tried 3 times, not
    max_retries + 1 = 6 (45-47 s at the default backoff before), and the error says what the server did."""
    fake_proxy.fail_when(None, kind, path="/v1/chat/completions")
    with backend(fake_proxy.base_url, tmp_path, backoff_s=0.05) as client:
        with pytest.raises(UserError) as refused:
            client.run([GenerationRequest("q", "Question")], [].extend)
    assert f"the server at {fake_proxy.base_url} {said}" in str(refused.value)
    assert fake_proxy.count_path("/v1/chat/completions") == 3


def test_a_prompt_longer_than_the_context_is_a_permanent_error_of_its_item(llama_server, tmp_path, caplog):
    """The real llama.cpp server's 400 (context 2,048): the item's error says its tokens, the context and the
    settings that shorten it, never resume; it is not retried."""
    answers: list = []
    with backend(llama_server, tmp_path, backoff_s=0.01) as client:
        client.run([GenerationRequest("long-1", "word " * 3000, max_new_tokens=16)], answers.extend)
        assert client.stats()["n_retries"] == 0
    [answer] = answers
    assert answer.failed and answer.permanent
    assert re.match(
        r"the prompt \(3\d{3} tokens, 16 more for the answer\) does not fit the 2048-token context of model "
        r"'smollm2-135m' on http://127\.0\.0\.1:\d+/v1: shorten the prompt \(strategy\.context=best_line, fewer "
        r"strategy\.top_k passages or strategy\.shots\), or serve the model with a longer context",
        answer.error,
    ), answer.error
    assert "resume" not in answer.error
    assert "item long-1 failed: the prompt (3" in caplog.text


@pytest.mark.parametrize(
    "refusal, tokens",
    [  # the servers' own words
        (
            '{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, you requested 5016 '
            "tokens (5000 in the messages, 16 in the completion). Please reduce the length of the messages or "
            'completion.","type":"invalid_request_error","code":"context_length_exceeded"}}',
            (5000, 4096),
        ),  # llama-cpp-python, vLLM (0.5), DeepSeek
        (
            '{"error":{"message":"This model\'s maximum context length is 128000 tokens. However, your messages '
            'resulted in 130123 tokens. Please reduce the length of the messages.","code":"context_length_exceeded"}}',
            (130123, 128000),
        ),  # OpenAI
        (
            '{"object":"error","message":"The decoder prompt (length 5000) is longer than the maximum model length '
            'of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","code":400}',
            (5000, 4096),
        ),  # vLLM's V1 engine
        (
            "{\"error\":{\"message\":\"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's "
            "maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). "
            'None","type":"BadRequestError","code":400}}',
            (2778, 4096),
        ),  # vLLM: the answer's token limit is what does not fit
        (
            '{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",'
            '"type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}',
            (4476, 4096),
        ),  # llama.cpp's llama-server
        ('{"error":{"message":"Invalid value for temperature","code":400}}', None),
    ],
)
def test_the_servers_ways_of_saying_a_request_is_too_long(refusal, tokens):
    assert context_overflow(refusal) == tokens


def test_a_reply_that_is_not_json_is_retried(fake_proxy, tmp_path):
    fake_proxy.fail_when(lambda request: "Hello" not in request.text, "not_json", times=4)  # 4 items, not the probe
    answers: list = []
    with backend(fake_proxy.base_url, tmp_path, backoff_s=0.01) as client:
        client.run([GenerationRequest(f"q{i}", f"Question {i}") for i in range(6)], answers.extend)
        assert client.stats()["n_retries"] == 4
    assert len(answers) == 6 and not any(a.failed for a in answers)
    assert fake_proxy.faults == ["not_json"] * 4


@pytest.mark.parametrize(
    "kind, message",
    [
        (
            "500",
            r"answers a generate request for model 'smollm2-135m' with errors \(HTTP 500: Internal server "
            r"error \(injected by FaultProxy\) \(gave up after 1 retries\)\): the server fails on its side",
        ),
        (
            "429",
            r"answers a generate request .* with errors \(HTTP 429: Rate limit reached \(injected by FaultProxy\) \(gave up after 1 "
            r"retries\)\): it limits the rate of requests",
        ),
    ],
)
def test_a_server_that_answers_every_request_with_an_error_is_not_said_to_be_down(fake_proxy, tmp_path, kind, message):
    fake_proxy.fail_when(None, kind, retry_after=0)
    with backend(fake_proxy.base_url, tmp_path, backoff_s=0.01, max_retries=1) as client:
        with pytest.raises(UserError, match=f"the server at {re.escape(fake_proxy.base_url)} {message}") as refused:
            client.run([GenerationRequest("q", "Question")], [].extend)
    assert "online" not in str(refused.value)


def test_a_base_url_without_v1_is_told_to_add_it(llama_server, tmp_path):
    root = llama_server.removesuffix("/v1")
    with backend(root, tmp_path) as client:
        with pytest.raises(
            UserError,
            match=re.escape(
                f"refused a generate request for model 'smollm2-135m': HTTP 404: Not Found (OpenAI-compatible servers "
                f"answer under /v1: try backend.base_url={root}/v1)"
            ),
        ):
            client.run([GenerationRequest("q", "Question")], [].extend)


def test_the_end_of_a_run_offers_resume_only_for_what_it_can_finish():
    retried = {"failed": True, "error": "HTTP 500 (gave up after 5 retries)"}
    refused = {"failed": True, "error": "the prompt ... does not fit", "permanent": True}
    assert unanswered_advice([retried, {"id": "answered"}]) == "resume=true finishes them"
    assert "resume=true cannot finish them" in unanswered_advice([refused])
    assert unanswered_advice([refused, retried, retried]).endswith("resume=true finishes the other 2")


def test_llama_cpp_pythons_500_past_the_context_is_said_to_be_the_context(tmp_path):
    """llama-cpp-python's server (logits kept) answers a prompt that fits but leaves no room for the answer
    with HTTP 500 "could not broadcast input array ...": named as a context too small, not retried (53 s
    before), with what shortens it."""
    from embedding_server import CACHE
    from openai_server import LlamaServer, missing_server_modules, server_gguf

    if missing_server_modules() or server_gguf(CACHE) is None:
        pytest.skip("llama-cpp-python[server] or the SmolLM2 GGUF is not installed")
    with LlamaServer(server_gguf(CACHE), tmp_path / "server.log", n_ctx=128).start(timeout=100) as server:
        model = backend(server.base_url, tmp_path, max_concurrency=1)
        answers = []
        started = time.monotonic()
        model.run([GenerationRequest("long", "word " * 90, max_new_tokens=100)], answers.extend)
        model.close()
    (answer,) = answers
    assert answer.failed and answer.permanent, answer
    assert "does not fit the context of model 'smollm2-135m'" in answer.error and "could not broadcast" in answer.error
    assert time.monotonic() - started < 15
