"""``backend=openai``: any OpenAI-compatible server (OpenAI, DeepSeek, vLLM serve, llama.cpp, ...).

Requests run concurrently up to ``max_concurrency`` through one ``OpenAIClient`` (openai_client.py), from
``max_concurrency`` threads kept for the backend's life: while the first request (the probe that checks the
server) waits for its answer, every thread starts and opens its connection, so the first items go out at once. A
429, a 5xx, a timeout or a dropped connection (also one cut off mid-reply) is retried with exponential
backoff and jitter (``Retry-After`` honoured) up to ``max_retries``, and timeouts lower the concurrency;
any other 4xx fails that item at once with the server's message, as ``permanent`` (asking again cannot mend
it; a prompt longer than the model's context says its size and the settings that shorten it). An item
whose retries run out is answered ``failed`` (recorded, never dropped), so ``resume=true`` redoes only it.
A server that stops answering mid-run, or fails every request for ``give_up_after`` requests in a row (the
client's ``ServerGone``), fails every item not yet answered at once, with one warning: ``the server at URL
stopped answering (failed every request) after N items``; a busy server (its ``/models`` takes the connection
but does not answer in time) is said to be up, and the items go on; a server that fails the start-up probe itself
is one error after 3 tries (openai_client.py). Ctrl-C stops sending: the answers of the requests in flight are
awaited and handed over before ``KeyboardInterrupt`` (a second Ctrl-C stops at once).

``model.api.params: reasoning`` is the parameter rule of OpenAI's o-series reasoning models (o3, o4-mini), which
reject ``max_tokens``, ``temperature`` and ``stop``: the token limit goes as ``max_completion_tokens``
(reasoning tokens count against it), ``model.api.reasoning_effort`` is sent when set, and there is no
temperature, stop string or log-probability (``scoring=generate`` only).

A chat answer's output is its final ``content`` only: reasoning a server returns apart (``reasoning_content``,
``reasoning``) is left out, and one that ran out of tokens while still reasoning comes back as an unclosed
``<think>`` (``final_content``). ``usage`` gets ``reasoning_tokens`` where the server counts them.

Letter log-probabilities come from the top log-probabilities of the first answer token (``top_logprobs``
of ``/chat/completions``, ``logprobs`` of ``/completions``); a letter missing from the top list scores
``-inf`` and is counted; when every letter is missing on the first answers (a model that ends its answer at
once: a raw prompt on ``/completions``) the job stops with what to do instead. (Scoring each letter by ``echo`` was tried and left out: llama-cpp-python
0.3.36 shifts echoed log-probabilities and offsets by one around the BOS token.) A request's
``json_schema`` goes to the server as ``response_format`` (``backend.response_format``: OpenAI's
``json_schema`` form, or ``json_object`` with a ``schema`` for llama-cpp-python's server). The key
is read from the environment variable ``api_key_env`` names and goes nowhere else.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import suppress
from pathlib import Path
from typing import ClassVar

from omegaconf import DictConfig

from esgexp.backends.base import REASONING_OPEN, Backend, GenerationRequest, LetterRequest, OnResults, Request, Response
from esgexp.backends.batch import FAILED_CHOICES, MAX_REQUESTS, BatchRun, BatchSettings
from esgexp.backends.openai_client import (
    ContextOverflow,
    Interrupted,
    OpenAIClient,
    RequestFailed,
    RetryableError,
    ServerGone,
)
from esgexp.backends.sigint import deferred_sigint
from esgexp.core.rules import URL, Choice, Flag, Integer, Number
from esgexp.errors import UserError

log = logging.getLogger(__name__)

API_PARAMS = ("standard", "reasoning")
REASONING_EFFORTS = ("low", "medium", "high")
#: logprob mode: the first answers double as a probe of the letters; this many without any letter stop the job.
LETTER_PROBE = 3


class OpenAIBackend(Backend):
    """Chat or text completions from ``base_url`` for the served model ``model`` (default: the model's hub id)."""

    name = "openai"
    rules: ClassVar[dict] = {
        "api": Choice(("chat", "completions")),
        "base_url": URL(),
        "max_concurrency": Integer(1),
        "timeout_s": Number(0, above=True),
        "connect_timeout_s": Number(0, above=True),
        "max_retries": Integer(0),
        "backoff_s": Number(0),
        "top_logprobs": Integer(1),
        # how a request's JSON Schema is sent: OpenAI's form (also vLLM serve, llama.cpp's llama-server), or the
        # {"type": "json_object", "schema": ...} form that llama-cpp-python's server (0.3.x) reads
        "response_format": Choice(("json_schema", "json_object")),
        "batch": Flag(),
        "batch_wait": Flag(),
        "batch_poll_s": Number(0, above=True),
        "batch_failed": Choice(FAILED_CHOICES),
        "batch_max_requests": Integer(1),
        "give_up_after": Integer(2),
        "server.port": Integer(1, 65535, optional=True),  # a started server's (backend/server=...): null for a free one
        "server.startup_timeout_s": Number(0, above=True),
    }
    runtime_keys = (
        "max_concurrency",
        "timeout_s",
        "connect_timeout_s",
        "max_retries",
        "progress_bar",
        "give_up_after",
        "server.host",  # where and how long a started server waits: not what it answers
        "server.port",
        "server.startup_timeout_s",
        "server.shared",
        # batch or live, the answers are the same model's: a run moves from one to the other and resumes
        "batch",
        "batch_window",
        "batch_wait",
        "batch_poll_s",
        "batch_failed",
        "batch_output",
        "batch_max_requests",
    )
    packages = ("openai",)

    @classmethod
    def preflight(cls, backend_cfg, model_cfg, cache_dir: str) -> list[str]:
        """The API key's environment variable (``api_key_env``) not set."""
        env = backend_cfg.get("api_key_env")
        if env and not os.environ.get(str(env)):
            return [f"model {model_cfg.name}: API key not set (environment variable {env})"]
        return []

    def __init__(
        self,
        model_cfg: DictConfig,
        context,
        base_url: str,
        api: str = "chat",
        model: str | None = None,
        api_key_env: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        top_logprobs: int = 20,
        progress_bar: bool = True,
        connect_timeout_s: float = 5.0,
        response_format: str = "json_schema",
        server: DictConfig | None = None,
        batch: bool = False,
        batch_window: str = "24h",
        batch_poll_s: float = 30.0,
        batch_failed: str = "live",
        batch_output: str | None = None,
        batch_max_requests: int = MAX_REQUESTS,
        batch_wait: bool = True,
        give_up_after: int = 8,
    ):
        self.response_format = response_format
        if model_cfg.get("adapter"):
            raise UserError("model.adapter needs backend=hf or backend=vllm: an API server serves its own weights")
        api_node = model_cfg.get("api") or {}
        self.api_params, self.reasoning_effort = check_api_params(
            api_node.get("params") or "standard", api_node.get("reasoning_effort"), api, model_cfg.name
        )
        self.model_cfg = model_cfg
        self.api = api
        self.served = model or model_cfg.get("hub_id") or model_cfg.name
        # A server esgexp starts (backend/server=...): its base_url is the one it listens on, and it is known
        # by its command (its port changes from run to run; the request cache must not).
        self.server = None
        self.server_shared = bool(server and server.get("shared"))  # left running for the sweep's next job
        self.server_command = [*server["command"], *(server.get("extra_args") or [])] if server else None
        if server:
            from esgexp.backends.server import start_server

            self.server = start_server(server, model_cfg, self.served, context.output_dir or context.cache_dir)
            base_url = self.server.base_url
        self.base_url = str(base_url).rstrip("/")
        # api, base_url and the numbers are checked with every setting (esgexp/jobs/settings.py).
        self.max_concurrency = int(max_concurrency)
        self.top_logprobs = int(top_logprobs)
        self.progress_bar = progress_bar
        self.client = OpenAIClient(
            self.base_url,
            api_key_env,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            needed_by=f"model {model_cfg.name!r} on {self.base_url}",
            key_setting="backend.api_key_env",
            max_concurrency=self.max_concurrency,
            give_up_after=int(give_up_after),
        )
        self._checked: set[str] = set()
        self._letters_missing = 0
        self._letter_answers: list[bool] = []  # per answered letter request: whether every letter was missing
        self._count_lock = threading.Lock()
        self._warned: set[str] = set()
        self._answered = 0  # items the server answered (for the message when it stops answering)
        self._workers: ThreadPoolExecutor | None = None
        self.batch = BatchSettings(
            enabled=bool(batch),
            window=str(batch_window),
            poll_s=float(batch_poll_s),
            failed=batch_failed,
            output=batch_output,
            max_requests=int(batch_max_requests),
            wait=bool(batch_wait),
        )
        self.batch_errors: dict[str, str] = {}  # custom id -> why its batch did not answer it
        self.batch_counts = {"n_batches_submitted": 0, "n_batch_answers": 0}
        self.context = context  # where batch mode keeps its files (the run folder, the cache folder's registry)

    def identity(self) -> dict:
        # a started server: its command (not its port, which changes from run to run) and the models it said it
        # serves once it was known to be the one answering (backends/server.py)
        where = (
            {"server": self.server_command, "served_by": self.server.model_ids}
            if self.server is not None
            else {"base_url": self.base_url}
        )
        identity = {"backend": "openai", **where, "model": self.served, "api": self.api}
        if self.api_params != "standard":
            identity.update(api_params=self.api_params, reasoning_effort=self.reasoning_effort)
        return identity

    def supports(self, kind: str) -> bool:
        return kind == "generate" or (kind == "logprob" and self.api_params == "standard")

    def rendered(self, request: Request) -> str:
        if self.api == "chat":
            return json.dumps([list(m) for m in self.messages(request)])
        if request.messages is not None:
            raise UserError("backend.api=completions takes a prompt, not chat messages: use backend.api=chat")
        return request.prompt

    @staticmethod
    def messages(request: Request) -> list[tuple[str, str]]:
        return list(request.messages) if request.messages is not None else [("user", request.prompt)]

    def stats(self) -> dict[str, int]:
        batch = self.batch_counts if self.batch.enabled or self.batch.output else {}
        return {**self.client.stats(), "n_letters_missing": self._letters_missing, **batch}

    def close(self) -> None:
        self.stop_workers(join=True)
        self.client.close()
        if self.server is not None and not self.server_shared:
            self.server.stop()

    # --- the threads and their connections -------------------------------------------------------

    def workers(self) -> ThreadPoolExecutor:
        """The ``max_concurrency`` threads that send the requests, kept from one run to the next."""
        if self._workers is None:
            self._workers = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="openai")
        return self._workers

    def stop_workers(self, join: bool = False) -> None:
        """End the worker threads (``join``: wait until they have; idle ones end at once); a later run starts new
        ones. The requests not yet sent are cancelled."""
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.shutdown(wait=join, cancel_futures=True)

    def warm_up(self) -> list:
        """Start every worker thread, each opening one connection to the server (in parallel, sending
        nothing): the first ``max_concurrency`` items then go out at once. The futures, to wait on."""
        started = threading.Barrier(self.max_concurrency, timeout=self.client.connect_timeout_s + 5)

        def open_one() -> None:
            # each task holds its connection until all have one: every task on a thread of its own, and as many
            # connections as threads (the probe's comes on top)
            try:
                with self.client.open_connection():
                    started.wait()
            except threading.BrokenBarrierError:  # another task could not connect: the probe reports why
                log.debug("warm-up of %s stopped early: connections open on first use", self.base_url)
            except Exception as error:  # the probe says what is wrong with the server
                log.debug("opening a connection to %s: %s", self.base_url, error)
                with suppress(threading.BrokenBarrierError):
                    started.wait()

        return [self.workers().submit(open_one) for _ in range(self.max_concurrency)]

    # --- the run -------------------------------------------------------------------------------

    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Every request through a batch (``batch`` or ``batch_output`` set; esgexp/backends/batch.py), then
        what the batch left through the live path."""
        if not requests:
            return
        if self.batch.enabled or self.batch.output:
            first = len(self._letter_answers)
            folder, registry = Path(self.context.output_dir or self.context.cache_dir), Path(self.context.cache_dir)
            runner = BatchRun(self, self.batch, folder, registry / "batches", self.progress_bar)
            requests = runner.run(requests, on_results)
            self.check_letters(first, final=True)  # the batch's letter answers, as the live path checks its own
        self.run_live(requests, on_results)

    def run_live(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Every request through a pool of ``max_concurrency`` threads; each answer handed over as it arrives.
        logprob: the first LETTER_PROBE answers come first and must hold a letter (else a UserError)."""
        if not requests:
            return
        kind = requests[0].kind
        self.check_server(kind)
        from tqdm.auto import tqdm

        answer = self.answer_letters if kind == "logprob" else self.answer_generation
        with tqdm(total=len(requests), desc=f"{self.served} ({self.api})", disable=not self.progress_bar) as bar:

            def hand_over(responses: list[Response]) -> None:
                on_results(responses)
                bar.update(len(responses))

            rest = list(requests)
            first = len(self._letter_answers)  # this run's letter answers start here
            if kind == "logprob":
                probe, rest = rest[:LETTER_PROBE], rest[LETTER_PROBE:]
                self.answer_all(probe, answer, hand_over)
                if len(self._letter_answers) - first == len(probe):  # every probe answer came back
                    self.check_letters(first, final=False)
            self.answer_all(rest, answer, hand_over)
        if kind == "logprob":
            self.check_letters(first, final=True)

    def answer_all(self, requests: Sequence[Request], answer, hand_over: Callable[[list[Response]], None]) -> None:
        """Answer ``requests`` concurrently, handing the answers over on this thread as they come (those that
        arrived together in one list: one write for them). On Ctrl-C nothing new is sent, the answers in
        flight are awaited and handed over, then ``KeyboardInterrupt`` is raised."""
        if not requests:
            return
        pool = self.workers()
        finished: queue.SimpleQueue = queue.SimpleQueue()
        futures = [pool.submit(self.answer_safely, answer, r) for r in requests]
        for future in futures:
            future.add_done_callback(finished.put)
        remaining, stopping = len(futures), False
        try:
            with deferred_sigint() as interrupted:
                while remaining:
                    batch = []
                    try:
                        batch.append(finished.get(timeout=0.2))
                        while True:
                            batch.append(finished.get_nowait())
                    except queue.Empty:
                        pass
                    remaining -= len(batch)
                    answers = [
                        f.result() for f in batch if not f.cancelled() and not isinstance(f.exception(), Interrupted)
                    ]
                    if answers:
                        hand_over(answers)
                    if interrupted.is_set() and not stopping:
                        stopping = True
                        self.client.stop()
                        for pending in futures:
                            pending.cancel()
                        log.warning(
                            "interrupted: sending nothing more; waiting for the %d answer(s) in flight "
                            "(a second Ctrl-C or SIGTERM stops at once)",
                            sum(f.running() for f in futures),
                        )
        except BaseException:
            self.client.stop()
            self.stop_workers()
            raise
        if stopping:
            self.stop_workers()
            raise KeyboardInterrupt

    def check_letters(self, first: int, final: bool) -> None:
        """A UserError when every letter request this run answered (those from index ``first`` on) had every
        letter missing (``final``: at the end of the run; else after the first answers, the probe)."""
        answers = self._letter_answers[first:]
        if not answers or not all(answers):
            return
        where = f"all {len(answers)} question(s) it answered" if final else f"the first {len(answers)} question(s)"
        advice = (
            "backend.api=completions sends the prompt as it is: use backend.api=chat (the server applies the "
            "model's chat template), or scoring=generate"
            if self.api == "completions"
            else "use scoring=generate, or a larger backend.top_logprobs"
        )
        raise UserError(
            f"the server at {self.base_url} gave no log-probability to any answer letter on {where} (model "
            f"{self.served!r}, backend.api={self.api}): the model ends its answer at once or starts it with other "
            f"tokens, so every logprob score would be missing; {advice}"
        )

    def answer_safely(self, answer, request: Request) -> Response:
        """``answer(request)``, or the item's failure: a server that stopped answering says so once for every
        item; any other failure is a warning naming the item (permanent: the server refused it)."""
        try:
            response = answer(request)
        except ServerGone:
            return Response(id=request.id, failed=True, error=self.stopped_answering())
        except (RequestFailed, RetryableError) as error:
            if not error.counted:  # a malformed answer (the client counts the failed posts)
                self.client.count("n_failed_requests")
            message = self.overflow_message(request, error) if isinstance(error, ContextOverflow) else str(error)
            log.warning("item %s failed: %s", request.id, message)
            refused = isinstance(error, RequestFailed) and error.status is not None
            return Response(id=request.id, failed=True, error=message[:500], permanent=refused)
        with self._count_lock:
            self._answered += 1
        return response

    def stopped_answering(self) -> str:
        """The error of every item a gone server left unanswered; logged once, when it is first seen, with
        what to do."""
        how = "failed every request" if self.client.failing else "stopped answering"
        message = f"the server at {self.base_url} {how} after {self._answered} items ({self.client.gone})"
        self.warn_once("gone", f"{message}; resume=true continues")
        return message

    def overflow_message(self, request: Request, error: ContextOverflow) -> str:
        """Why ``request`` does not fit the model's context, with the tokens the server counted and what
        shortens it: the prompt (the strategy's context, passages or shots) or the answer's token limit."""
        prompt = f"{error.prompt_tokens} tokens" if error.prompt_tokens else "too long"
        room = f"{error.context}-token " if error.context else ""
        answer_tokens = getattr(request, "max_new_tokens", 1)
        if error.prompt_tokens and error.context and error.prompt_tokens < error.context:
            fix = f"lower scoring.max_new_tokens ({answer_tokens} now) so that the prompt and the answer fit"
        else:
            fix = "shorten the prompt (strategy.context=best_line, fewer strategy.top_k passages or strategy.shots)"
        return (
            f"the prompt ({prompt}, {answer_tokens} more for the answer) does not fit the {room}context of model "
            f"{self.served!r} on {self.base_url}: {fix}, or serve the model with a longer context (llama.cpp "
            f"--n_ctx, vLLM --max-model-len); asking again cannot mend it ({error})"
        )

    def check_server(self, kind: str) -> None:
        """Once per kind, before any item: the server answers, and (logprob) returns log-probabilities. The
        first check also starts the worker threads and their connections while the probe waits for its answer."""
        if kind in self._checked:
            return
        warming = self.warm_up() if not self._checked else []
        with self.client.reporting(f"a {kind} request for model {self.served!r}"):
            if kind == "logprob":
                probe = LetterRequest("probe", "Answer with one letter. A or B?\nAnswer:", letters=("A", "B"))
                self.answer_letters(probe, probe_only=True)
            else:
                self.post(*self.generation_body(GenerationRequest("probe", "Hello", max_new_tokens=1)))
        self._checked.add(kind)
        wait(warming)

    # --- one request ------------------------------------------------------------------------------

    def generation_body(self, request: GenerationRequest) -> tuple[str, dict]:
        body: dict = {"model": self.served}
        if self.api_params == "reasoning":
            body["max_completion_tokens"] = request.max_new_tokens
            if self.reasoning_effort:
                body["reasoning_effort"] = self.reasoning_effort
            if request.stop:
                self.warn_once("stop", "model.api.params=reasoning: the model takes no stop strings; they are not sent")
            if request.temperature not in (0, 1):
                self.warn_once(
                    "temperature",
                    "model.api.params=reasoning: the model samples at its own temperature (1), not the one asked",
                )
        else:
            body.update(max_tokens=request.max_new_tokens, temperature=request.temperature)
            if request.stop:
                body["stop"] = list(request.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if request.json_schema is not None:
            body["response_format"] = self.response_format_of(json.loads(request.json_schema))
        if self.api == "chat":
            body["messages"] = [{"role": role, "content": content} for role, content in self.messages(request)]
            return "/chat/completions", body
        body["prompt"] = request.prompt
        return "/completions", body

    def response_format_of(self, schema: dict) -> dict:
        if self.response_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "output", "strict": True, "schema": schema}}

    def answer_generation(self, request: GenerationRequest) -> Response:
        try:
            data, retries = self.post(*self.generation_body(request))
        except RequestFailed as error:
            refused = "HTTP 400" in str(error) and re.search(r"response_format|json_schema", str(error))
            if request.json_schema and refused:
                other = "json_object" if self.response_format == "json_schema" else "json_schema"
                raise UserError(
                    f"the server at {self.base_url} refuses the JSON Schema as sent (backend.response_format="
                    f"{self.response_format}): {error}. Try backend.response_format={other} (json_object: "
                    "llama-cpp-python's server), a server with structured outputs (vLLM, llama.cpp's llama-server), "
                    "or backend=hf"
                ) from None
            raise
        return self.generation_response(request, data, retries)

    def generation_response(self, request: GenerationRequest, data: dict, retries: int = 0) -> Response:
        """The answer in the server's reply ``data`` to ``request``'s generation body."""
        choice, usage = first_choice(data), usage_of(data)
        text = final_content(choice, usage) if self.api == "chat" else choice.get("text") or ""
        return Response(
            id=request.id,
            output=text,
            usage=usage,
            info={"retries": retries} if retries else {},
            served_model=data.get("model"),
        )

    def warn_once(self, key: str, message: str) -> None:
        with self._count_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning(message)

    def answer_letters(self, request: LetterRequest, probe_only: bool = False) -> Response:
        """The letters' log-probabilities among the top tokens of the answer's first token."""
        data, retries = self.post(*self.letters_body(request))
        return self.letters_response(request, data, retries, probe_only)

    def letters_body(self, request: LetterRequest) -> tuple[str, dict]:
        body: dict = {"model": self.served, "max_tokens": 1, "temperature": 0}
        if self.api == "chat":
            body.update(
                logprobs=True,
                top_logprobs=self.top_logprobs,
                messages=[{"role": role, "content": content} for role, content in self.messages(request)],
            )
            return "/chat/completions", body
        body.update(prompt=request.prompt, logprobs=self.top_logprobs)
        return "/completions", body

    def letters_response(
        self, request: LetterRequest, data: dict, retries: int = 0, probe_only: bool = False
    ) -> Response:
        """The letter scores in the server's reply ``data`` to ``request``'s letters body (counted unless
        ``probe_only``)."""
        choice = first_choice(data)
        logprobs = choice.get("logprobs")
        if self.api == "chat":
            content = (logprobs or {}).get("content") or []
            top = (
                {entry["token"]: entry["logprob"] for entry in content[0].get("top_logprobs") or []} if content else {}
            )
            text = choice["message"].get("content") or ""
        else:
            top = ((logprobs or {}).get("top_logprobs") or [{}])[0] or {}
            text = choice.get("text") or ""
        if not isinstance(logprobs, dict):
            raise RequestFailed(
                f"the answer has no log-probabilities: the server does not return them for api={self.api} "
                "(try the other backend.api, or scoring=generate)"
            )
        # An empty top list is a model that ended its answer at once: every letter is missing.
        scores = dict.fromkeys(request.letters, -math.inf)
        for token, value in top.items():
            letter = token.strip()
            if letter in scores:
                scores[letter] = max(scores[letter], float(value))
        missing = sum(1 for value in scores.values() if value == -math.inf)
        if not probe_only:
            with self._count_lock:
                self._letters_missing += missing
                self._letter_answers.append(missing == len(scores))
        response = letter_response(request, scores, usage_of(data), retries)
        response.served_model = data.get("model")
        if missing == len(scores):
            response.output = text  # no letter among the top tokens: the answer is parsed from the text
        return response

    def request_body(self, request: Request) -> tuple[str, dict]:
        """The path and JSON body that ask ``request`` (the live path sends it; a batch file holds it)."""
        return self.letters_body(request) if request.kind == "logprob" else self.generation_body(request)

    def response_of(self, request: Request, data: dict) -> Response:
        """``request``'s answer from the server's reply ``data`` to ``request_body(request)``."""
        if request.kind == "logprob":
            return self.letters_response(request, data)
        return self.generation_response(request, data)

    def post(self, path: str, body: dict) -> tuple[dict, int]:
        """The JSON answer to ``body`` at ``path`` and how many retries it took (see OpenAIClient.post)."""
        return self.client.post(path, body)


def check_api_params(api_params: str, effort: str | None, api: str, model: str) -> tuple[str, str | None]:
    """``model.api.params`` and ``model.api.reasoning_effort`` as given, or a UserError naming the bad one."""
    if api_params not in API_PARAMS:
        raise UserError(f"model.api.params must be one of {', '.join(API_PARAMS)}, got {api_params!r}")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise UserError(
            f"model.api.reasoning_effort must be one of {', '.join(REASONING_EFFORTS)} or null, got {effort!r}"
        )
    if api_params == "standard" and effort is not None:
        raise UserError(
            f"model.api.reasoning_effort={effort} is for reasoning models: set model.api.params=reasoning for "
            f"model {model!r}, or leave reasoning_effort null"
        )
    if api_params == "reasoning" and api != "chat":
        raise UserError(f"model {model!r} (model.api.params=reasoning) answers on chat only: use backend.api=chat")
    return api_params, effort


def first_choice(data: dict) -> dict:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        raise RequestFailed(f"the answer has no choices: {json.dumps(data)[:200]}")
    return choices[0]


def final_content(choice: dict, usage: dict[str, int]) -> str:
    """A chat answer's final ``content``, never its reasoning (``reasoning_content``: DeepSeek, older vLLM;
    ``reasoning``: newer vLLM; o-series keep it hidden and count it in ``usage``). A reply that ran out of
    tokens (``finish_reason`` length) with no content but some reasoning returned or counted is the open
    reasoning delimiter alone: the shape of an unclosed reasoning block, which the tasks count as unfinished
    reasoning (from the request cache too)."""
    message = choice["message"]
    content = message.get("content") or ""
    reasoned = message.get("reasoning_content") or message.get("reasoning") or usage.get("reasoning_tokens")
    if not content and reasoned and choice.get("finish_reason") == "length":
        return REASONING_OPEN
    return content


def usage_of(data: dict) -> dict[str, int]:
    """``prompt_tokens``, ``completion_tokens`` and (where the server reports them, within the completion
    tokens) ``reasoning_tokens`` of an answer."""
    usage = data.get("usage") or {}
    found = {key: usage.get(key) for key in ("prompt_tokens", "completion_tokens")}
    found["reasoning_tokens"] = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    return {key: int(value) for key, value in found.items() if isinstance(value, int)}


def letter_response(request: LetterRequest, scores: dict[str, float], usage: dict, retries: int) -> Response:
    best = max(request.letters, key=lambda letter: scores.get(letter, -math.inf))
    return Response(
        id=request.id, output=best, scores=scores, usage=usage, info={"retries": retries} if retries else {}
    )
