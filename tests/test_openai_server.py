"""The real OpenAI-compatible server (llama.cpp's, on SmolLM2-135M-Instruct) and the fault proxy in front of it.

Plain urllib and json only, so these pin down what the server itself returns (the shapes a client backend
has to read) and that each injected fault looks to a client as it would from a real service.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.request

import pytest
from openai_server import MODEL_ALIAS

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


def post(base_url: str, path: str, payload: dict, timeout: float = 60):
    request = urllib.request.Request(
        f"{base_url}{path}", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def get(base_url: str, path: str, timeout: float = 10):
    with urllib.request.urlopen(f"{base_url}{path}", timeout=timeout) as response:
        return json.load(response)


def chat(base_url: str, **fields):
    return post(base_url, "/chat/completions", {"model": MODEL_ALIAS, "messages": QUESTION, "temperature": 0, **fields})


def complete(base_url: str, prompt: str, **fields):
    return post(base_url, "/completions", {"model": MODEL_ALIAS, "prompt": prompt, "temperature": 0, **fields})


def stream_chat(base_url: str, **fields) -> tuple[str, list[dict]]:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(
            {"model": MODEL_ALIAS, "messages": QUESTION, "temperature": 0, "stream": True, **fields}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    events, done = [], False
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        for line in response:
            line = line.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    assert done, "the stream ends with data: [DONE]"
    return "".join(e["choices"][0]["delta"].get("content", "") for e in events), events


# --- the server -------------------------------------------------------------------------------------


def test_server_lists_the_model(llama_server, llama_server_process):
    assert llama_server.startswith("http://127.0.0.1:") and llama_server.endswith("/v1")
    models = get(llama_server, "/models")
    assert [m["id"] for m in models["data"]] == [MODEL_ALIAS]
    assert llama_server_process.start_seconds < 120


def test_chat_top_logprobs(llama_server):
    response = chat(llama_server, logprobs=True, top_logprobs=5, max_tokens=1)
    assert response["object"] == "chat.completion"
    [choice] = response["choices"]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason"}
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    assert response["usage"]["completion_tokens"] == 1 and response["usage"]["prompt_tokens"] > 10
    assert set(choice["logprobs"]) == {"content", "refusal"}
    [token] = choice["logprobs"]["content"]
    assert set(token) == {"token", "logprob", "bytes", "top_logprobs"} and token["bytes"] is None
    top = token["top_logprobs"]
    assert len(top) == 5 and all(set(t) == {"token", "logprob", "bytes"} for t in top)
    values = [t["logprob"] for t in top]
    assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
    assert sum(math.exp(v) for v in values) <= 1 + 1e-6
    # Greedy: the answer is the most likely token, and its logprob is the top one.
    assert token["token"] == top[0]["token"] == choice["message"]["content"]
    assert token["logprob"] == pytest.approx(top[0]["logprob"])
    assert "Paris" in [t["token"] for t in top]


def test_chat_logprobs_need_top_logprobs(llama_server):
    """Unlike OpenAI, `logprobs: true` alone returns no logprobs; top_logprobs=0 gives just the chosen token."""
    assert chat(llama_server, logprobs=True, max_tokens=1)["choices"][0]["logprobs"] is None
    [token] = chat(llama_server, logprobs=True, top_logprobs=0, max_tokens=1)["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in token["top_logprobs"]] == [token["token"]]


def test_completion_next_token_logprobs(llama_server):
    response = complete(llama_server, "The capital of France is", logprobs=5, max_tokens=1)
    assert response["object"] == "text_completion"
    [choice] = response["choices"]
    assert choice["text"] == " Paris"
    logprobs = choice["logprobs"]
    assert set(logprobs) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert logprobs["tokens"] == [" Paris"] and logprobs["text_offset"] == [len("The capital of France is")]
    [top] = logprobs["top_logprobs"]
    assert isinstance(top, dict) and len(top) == 5 and max(top, key=top.get) == " Paris"
    assert logprobs["token_logprobs"] == [pytest.approx(top[" Paris"])]


def test_completion_echo_scores_the_prompt(llama_server):
    """With echo the prompt's own tokens are scored: a prompt that starts with the BOS token
    (<|im_start|> for SmolLM2, as every chat-formatted prompt does) gets each token's true logprob."""
    prefix = "<|im_start|>The capital of France is"
    expected = complete(llama_server, prefix, logprobs=5, max_tokens=1)["choices"][0]["logprobs"]["top_logprobs"][0]
    [choice] = complete(llama_server, prefix + " Paris", echo=True, logprobs=1, max_tokens=1)["choices"]
    assert choice["text"] == prefix + " Paris."  # the echoed prompt plus one generated token
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == ["The", " capital", " of", " France", " is", " Paris", "."]  # the BOS is left out
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None  # OpenAI's convention
    assert all(v is not None and v <= 0 for v in logprobs["token_logprobs"][1:])
    assert logprobs["token_logprobs"][5] == pytest.approx(expected[" Paris"], abs=1e-4)
    assert logprobs["top_logprobs"][5][" Paris"] == pytest.approx(expected[" Paris"], abs=1e-4)


def test_completion_echo_logprobs_are_shifted_without_a_leading_bos(llama_server):
    """llama-cpp-python 0.3.36 bug: when the prompt does not start with BOS (SmolLM2's GGUF does not add one),
    the echoed logprob of token i is read from the distribution for token i+1. Scorers must add the BOS."""
    expected = complete(llama_server, "The capital of France is", logprobs=5, max_tokens=1)["choices"][0]["logprobs"]
    [choice] = complete(llama_server, "The capital of France is Paris", echo=True, logprobs=5, max_tokens=1)["choices"]
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == ["The", " capital", " of", " France", " is", " Paris"]  # the generated "." is missing
    paris, is_ = logprobs["tokens"].index(" Paris"), logprobs["tokens"].index(" is")
    assert logprobs["token_logprobs"][paris] < expected["token_logprobs"][0] - 2  # not the true logprob of " Paris"
    # ... which is found one position early, among the alternatives listed for " is".
    assert logprobs["top_logprobs"][is_][" Paris"] == pytest.approx(expected["token_logprobs"][0], abs=1e-4)


def test_greedy_output_is_deterministic(llama_server):
    first = chat(llama_server, max_tokens=12)["choices"][0]["message"]["content"]
    second = chat(llama_server, max_tokens=12)["choices"][0]["message"]["content"]
    assert first and first == second
    assert (
        complete(llama_server, "The capital of France is", max_tokens=4)["choices"][0]["text"]
        == complete(llama_server, "The capital of France is", max_tokens=4)["choices"][0]["text"]
    )


def test_errors_are_openai_shaped(llama_server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        complete(llama_server, "word " * 3000, max_tokens=1)
    assert caught.value.code == 400
    assert json.load(caught.value)["error"]["code"] == "context_length_exceeded"


# --- the fault proxy ----------------------------------------------------------------------------------


def test_proxy_forwards_and_counts(llama_server, fault_proxy):
    assert fault_proxy.base_url.endswith("/v1") and fault_proxy.base_url != llama_server
    assert get(fault_proxy.base_url, "/models")["data"][0]["id"] == MODEL_ALIAS
    direct = complete(llama_server, "The capital of France is", max_tokens=3)["choices"][0]["text"]
    assert complete(fault_proxy.base_url, "The capital of France is", max_tokens=3)["choices"][0]["text"] == direct
    assert fault_proxy.count == 2 and fault_proxy.forwarded == 2
    assert fault_proxy.counts == {"/v1/models": 1, "/v1/completions": 1}
    assert fault_proxy.count_path("/v1/completions") == 1
    assert fault_proxy.bodies("/v1/completions")[0]["prompt"] == "The capital of France is"
    fault_proxy.reset()
    assert fault_proxy.count == 0 and not fault_proxy.counts and not fault_proxy.requests


def test_proxy_relays_a_stream(fault_proxy):
    streamed, events = stream_chat(fault_proxy.base_url, max_tokens=6)
    whole = chat(fault_proxy.base_url, max_tokens=6)["choices"][0]["message"]["content"]
    assert streamed == whole and len(events) >= 3
    assert events[0]["object"] == "chat.completion.chunk" and events[0]["choices"][0]["delta"] == {"role": "assistant"}


def test_concurrent_streams_are_not_cut_short(fault_proxy):
    """The server runs with --interrupt_requests false: by default a waiting request ends a stream early."""
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(stream_chat(fault_proxy.base_url, max_tokens=8)[0]))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    whole = chat(fault_proxy.base_url, max_tokens=8)["choices"][0]["message"]["content"]
    assert results == [whole, whole]


def test_fault_429_carries_retry_after(fault_proxy):
    fault_proxy.fail_next(1, "429", retry_after=2)
    with pytest.raises(urllib.error.HTTPError) as caught:
        complete(fault_proxy.base_url, "Hello", max_tokens=1)
    assert caught.value.code == 429 and caught.value.headers["Retry-After"] == "2"
    assert json.load(caught.value)["error"]["type"] == "rate_limit_error"
    assert complete(fault_proxy.base_url, "Hello", max_tokens=1)["choices"][0]["text"]  # only the next one
    assert fault_proxy.count == 2 and fault_proxy.forwarded == 1 and fault_proxy.faults == ["429"]


def test_fault_500(fault_proxy):
    fault_proxy.fail_next(2, "500")
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as caught:
            complete(fault_proxy.base_url, "Hello", max_tokens=1)
        assert caught.value.code == 500 and json.load(caught.value)["error"]["type"] == "server_error"
    assert complete(fault_proxy.base_url, "Hello", max_tokens=1)["choices"]
    assert fault_proxy.faults == ["500", "500"] and fault_proxy.forwarded == 1


def test_fault_drop_closes_without_a_response(fault_proxy):
    fault_proxy.fail_next(1, "drop")
    with pytest.raises(http.client.RemoteDisconnected):
        complete(fault_proxy.base_url, "Hello", max_tokens=1)
    assert fault_proxy.count == 1 and fault_proxy.forwarded == 0


def test_fault_delay_times_the_client_out(fault_proxy):
    fault_proxy.fail_next(1, "delay", delay=3)
    started = time.monotonic()
    with pytest.raises((TimeoutError, urllib.error.URLError)) as caught:
        post(fault_proxy.base_url, "/completions", {"prompt": "Hello", "max_tokens": 1}, timeout=0.5)
    assert time.monotonic() - started < 2.5
    if isinstance(caught.value, urllib.error.URLError):
        assert isinstance(caught.value.reason, TimeoutError)
    assert complete(fault_proxy.base_url, "Hello", max_tokens=1)["choices"]  # the next one is not delayed
    assert fault_proxy.faults == ["delay"]


def test_faults_chosen_by_body(fault_proxy):
    fault_proxy.fail_when("Question 2", "500", times=1)
    fault_proxy.fail_when(lambda request: request.json().get("max_tokens") == 2, "429")
    statuses = []
    for prompt, max_tokens in [
        ("Question 1", 1),
        ("Question 2", 1),
        ("Question 2", 1),
        ("Question 3", 2),
        ("Question 4", 2),
    ]:
        try:
            complete(fault_proxy.base_url, prompt, max_tokens=max_tokens)
            statuses.append(200)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    assert statuses == [200, 500, 200, 429, 429]
    assert [body["prompt"] for body in fault_proxy.bodies()] == [
        "Question 1",
        "Question 2",
        "Question 2",
        "Question 3",
        "Question 4",
    ]
    assert [r.fault for r in fault_proxy.requests] == [None, "500", None, "429", "429"]


def test_unknown_fault_kind_is_refused(fault_proxy):
    with pytest.raises(ValueError, match="unknown fault kind"):
        fault_proxy.fail_next(1, "teapot")


def test_fault_truncate_cuts_the_reply_after_its_headers(fault_proxy):
    fault_proxy.fail_next(1, "truncate")
    request = urllib.request.Request(
        f"{fault_proxy.base_url}/completions",
        data=json.dumps({"model": MODEL_ALIAS, "prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200 and int(response.headers["Content-Length"]) > 20
        with pytest.raises(http.client.IncompleteRead):
            response.read()
    assert fault_proxy.faults == ["truncate"] and fault_proxy.forwarded == 1  # the server did answer
    assert complete(fault_proxy.base_url, "Hello", max_tokens=1)["choices"]  # only that one


def test_proxy_with_one_slot_serves_one_request_at_a_time(llama_server):
    from openai_server import FaultProxy

    with FaultProxy(llama_server, slots=1) as proxy:
        proxy.fail_next(2, "delay", delay=1.0)
        started = time.monotonic()
        threads = [
            threading.Thread(target=complete, args=(proxy.base_url, "Hi"), kwargs={"max_tokens": 1}) for _ in "ab"
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert time.monotonic() - started >= 2.0 and proxy.forwarded == 2  # the delays did not overlap


# --- the stand-in OpenAI API ----------------------------------------------------------------------------


def test_fake_openai_answers_after_its_delay_in_parallel():
    from openai_server import FakeOpenAI

    with FakeOpenAI(delay=0.5, answer="B") as fake:
        answers = []
        started = time.monotonic()
        threads = [
            threading.Thread(
                target=lambda: answers.append(
                    post(fake.base_url, "/chat/completions", {"model": "m", "messages": QUESTION})
                )
            )
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert time.monotonic() - started < 1.5  # 8 requests of 0.5 s at once, not one after another
        assert [a["choices"][0]["message"]["content"] for a in answers] == ["B"] * 8 and fake.count == 8
        text = post(fake.base_url, "/completions", {"model": "m", "prompt": "x", "logprobs": 5})["choices"][0]
        assert text["text"] == "B" and max(text["logprobs"]["top_logprobs"][0].items(), key=lambda kv: kv[1])[0] == "B"


@pytest.mark.parametrize(
    "fields, param, message",
    [
        ({"max_tokens": 16}, "max_tokens", "Use 'max_completion_tokens' instead"),
        ({"temperature": 0}, "temperature", "does not support 0 with this model. Only the default (1)"),
        ({"stop": ["\n"]}, "stop", "Unsupported parameter: 'stop'"),
        ({"logprobs": True, "top_logprobs": 5}, "logprobs", "Unsupported parameter: 'logprobs'"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "Supported values are: 'low', 'medium', and 'high'"),
    ],
)
def test_fake_reasoning_model_rejects_what_openai_rejects(fields, param, message):
    from openai_server import FakeOpenAI

    with FakeOpenAI(reasoning=True) as fake:
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(fake.base_url, "/chat/completions", {"model": "o3", "messages": QUESTION, **fields})
        error = json.load(caught.value)["error"]
        assert caught.value.code == 400 and error["param"] == param and message in error["message"]
        assert error["type"] == "invalid_request_error"
        ok = post(
            fake.base_url,
            "/chat/completions",
            {
                "model": "o3",
                "messages": QUESTION,
                "max_completion_tokens": 50,
                "reasoning_effort": "low",
                "temperature": 1,
            },
        )
        assert ok["choices"][0]["message"]["content"] == "A" and "reasoning_tokens" in str(ok["usage"])
        with pytest.raises(urllib.error.HTTPError) as caught:
            post(fake.base_url, "/completions", {"model": "o3", "prompt": "x"})
        assert caught.value.code == 400
