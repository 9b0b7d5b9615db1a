"""backend=openai opens its connections and starts its threads while the probe waits, against a real local
server (tests/openai_server.FakeOpenAI on 127.0.0.1), and a cache key is what it was before it got cheaper."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from omegaconf import OmegaConf
from openai_server import FakeOpenAI

from esgexp.backends.base import GenerationRequest, LetterRequest
from esgexp.backends.cache import cache_key
from esgexp.backends.openai import OpenAIBackend
from esgexp.errors import UserError

MODEL = OmegaConf.create({"name": "fake-model", "hub_id": "org/fake-model"})


def backend(base_url: str, concurrency: int) -> OpenAIBackend:
    return OpenAIBackend(MODEL, None, base_url=base_url, model="fake", max_concurrency=concurrency, progress_bar=False)


def server_connections(port: int) -> int:
    """Established TCP connections this process accepted on ``port`` (the in-process server's side)."""
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.status == "ESTABLISHED" and c.laddr.port == port)


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("openai")]


def pooled(openai: OpenAIBackend):
    return openai.client.pool()


def server_sees(port: int, connections: int) -> bool:
    """Whether the server on ``port`` holds ``connections`` within 5 s: it accepts a connection the client
    has opened a moment later, and sees a closed one end a moment later (longer on a busy machine)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if server_connections(port) == connections:
            return True
        time.sleep(0.05)
    return False


def test_the_probe_opens_every_connection_and_thread_before_the_first_item_and_sends_nothing_more():
    with FakeOpenAI(delay=0.2) as fake:
        openai = backend(fake.base_url, 6)
        openai.check_server("generate")
        assert fake.count == 1  # the probe only: opening a connection sends no request
        opened = pooled(openai).num_connections
        assert opened in (6, 7)  # one per thread, and the probe's unless a thread took it once it was back
        assert server_sees(fake.port, opened)
        threads = worker_threads()
        assert len(threads) == 6

        answered = []
        start = time.monotonic()
        requests = [GenerationRequest(f"q{i}", f"question {i}", max_new_tokens=4) for i in range(12)]
        openai.run(requests, answered.extend)
        seconds = time.monotonic() - start
        assert sorted(r.id for r in answered) == sorted(r.id for r in requests)
        assert {r.output for r in answered} == {"A"}
        assert fake.count == 13
        assert pooled(openai).num_connections == opened  # the run opened none of its own
        assert worker_threads() == threads  # and started no thread
        assert seconds < 2.0  # two rounds of 0.2 s at 6 in flight (one at a time would be 2.4 s)

        openai.run([GenerationRequest("again", "once more", max_new_tokens=4)], answered.extend)
        assert worker_threads() == threads  # kept from one run to the next
        openai.close()
        assert worker_threads() == []
        assert server_sees(fake.port, 0)  # every connection ended


def test_a_logprob_probe_warms_up_too_and_a_second_kind_opens_nothing_more():
    with FakeOpenAI() as fake:
        openai = backend(fake.base_url, 4)
        try:
            openai.check_server("logprob")
            opened = pooled(openai).num_connections
            assert fake.count == 1 and opened in (4, 5) and server_sees(fake.port, opened)
            openai.check_server("generate")
            assert fake.count == 2 and pooled(openai).num_connections == opened
        finally:
            openai.close()


def test_no_server_is_still_one_clear_error_at_once():
    with FakeOpenAI() as fake:
        url = fake.base_url  # a port nothing listens on once the server is closed
    openai = backend(url, 8)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"does not answer \(connection failed: \[Errno 111\] Connection refused"):
        openai.check_server("generate")
    assert time.monotonic() - start < 5
    openai.close()
    assert worker_threads() == []


def test_a_cache_key_is_the_one_made_before():
    # sha256 values computed with the earlier request_payload (dataclasses.asdict): cached answers still hit
    identity = {"backend": "openai", "base_url": "http://x/v1", "model": "m", "api": "chat"}
    generation = GenerationRequest(
        "q1",
        messages=(("system", "Be brief."), ("user", "Which scope?")),
        max_new_tokens=8,
        stop=("\n",),
        seed=3,
        temperature=0.7,
    )
    letters = LetterRequest("q2", "Answer: A or B?", letters=("A", "B"))
    assert cache_key(identity, "rendered g", generation) == (
        "ac88201091cc287935be305875a19524b9edf9dd07fc824cb914de83b62c88d1"
    )
    assert cache_key(identity, "rendered l", letters) == (
        "829489426faed3499324ddbc139d7bf5da9888a9685ec0d2b1a5b833609db9dd"
    )
