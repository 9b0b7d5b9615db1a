"""``backend=openai``: any OpenAI-compatible server (OpenAI, DeepSeek, vLLM serve, llama.cpp, ...).

Requests run concurrently up to ``max_concurrency``. A 429, a 5xx, a timeout or a dropped connection
is retried with exponential backoff and jitter (``Retry-After`` honoured) up to ``max_retries``; any
other 4xx fails that item at once with the server's message. An item whose retries run out is
answered ``failed`` (recorded, never dropped), so ``resume=true`` redoes only it.

Letter log-probabilities come from the top log-probabilities of the first answer token (``top_logprobs``
of ``/chat/completions``, ``logprobs`` of ``/completions``); a letter missing from the top list scores
``-inf`` and is counted. (Scoring each letter by ``echo`` was tried and left out: llama-cpp-python
0.3.36 shifts echoed log-probabilities and offsets by one around the BOS token.) A request's
``json_schema`` goes to the server as ``response_format`` (``backend.response_format``: OpenAI's
``json_schema`` form, or ``json_object`` with a ``schema`` for llama-cpp-python's server). The key
is read from the environment variable ``api_key_env`` names and goes nowhere else.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from omegaconf import DictConfig

from esgexp.backends.base import Backend, GenerationRequest, LetterRequest, OnResults, Request, Response
from esgexp.backends.openai_client import OpenAIClient, RequestFailed, RetryableError
from esgexp.errors import UserError

log = logging.getLogger(__name__)


class OpenAIBackend(Backend):
    """Chat or text completions from ``base_url`` for the served model ``model`` (default: the model's hub id)."""

    name = "openai"

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
    ):
        self.response_format = response_format
        if model_cfg.get("adapter"):
            raise UserError("model.adapter needs backend=hf or backend=vllm: an API server serves its own weights")
        self.model_cfg = model_cfg
        self.base_url = str(base_url).rstrip("/")
        self.api = api
        self.served = model or model_cfg.get("hub_id") or model_cfg.name
        # api, base_url and the numbers are checked with every setting (esgexp/settings.py).
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
        )
        self._checked: set[str] = set()
        self._letters_missing = 0
        self._count_lock = threading.Lock()

    def identity(self) -> dict:
        return {"backend": "openai", "base_url": self.base_url, "model": self.served, "api": self.api}

    def supports(self, kind: str) -> bool:
        return kind in ("generate", "logprob")

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
        return {**self.client.stats(), "n_letters_missing": self._letters_missing}

    def close(self) -> None:
        self.client.close()

    # --- the run -------------------------------------------------------------------------------

    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Every request through a pool of ``max_concurrency`` threads; each answer handed over as it arrives."""
        if not requests:
            return
        self.check_server(requests[0].kind)
        from tqdm.auto import tqdm

        answer = self.answer_letters if requests[0].kind == "logprob" else self.answer_generation
        with (
            ThreadPoolExecutor(self.max_concurrency) as pool,
            tqdm(total=len(requests), desc=f"{self.served} ({self.api})", disable=not self.progress_bar) as bar,
        ):
            futures = [pool.submit(self.answer_safely, answer, r) for r in requests]
            try:
                for future in as_completed(futures):
                    on_results([future.result()])
                    bar.update(1)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def answer_safely(self, answer, request: Request) -> Response:
        try:
            return answer(request)
        except (RequestFailed, RetryableError) as error:
            if not error.counted:  # a malformed answer (the client counts the failed posts)
                self.client.count("n_failed_requests")
            log.warning("item %s failed: %s", request.id, error)
            return Response(id=request.id, failed=True, error=str(error)[:500])

    def check_server(self, kind: str) -> None:
        """Once per kind, before any item: the server answers, and (logprob) returns log-probabilities."""
        if kind in self._checked:
            return
        with self.client.reporting(f"a {kind} request for model {self.served!r}"):
            if kind == "logprob":
                probe = LetterRequest("probe", "Answer with one letter. A or B?\nAnswer:", letters=("A", "B"))
                self.answer_letters(probe, probe_only=True)
            else:
                self.post(*self.generation_body(GenerationRequest("probe", "Hello", max_new_tokens=1)))
        self._checked.add(kind)

    # --- one request ------------------------------------------------------------------------------

    def generation_body(self, request: GenerationRequest) -> tuple[str, dict]:
        body: dict = {"model": self.served, "max_tokens": request.max_new_tokens, "temperature": request.temperature}
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
        choice = first_choice(data)
        text = choice["message"].get("content") if self.api == "chat" else choice.get("text")
        return Response(
            id=request.id, output=text or "", usage=usage_of(data), info={"retries": retries} if retries else {}
        )

    def answer_letters(self, request: LetterRequest, probe_only: bool = False) -> Response:
        """The letters' log-probabilities among the top tokens of the answer's first token."""
        body: dict = {"model": self.served, "max_tokens": 1, "temperature": 0}
        if self.api == "chat":
            body.update(
                logprobs=True,
                top_logprobs=self.top_logprobs,
                messages=[{"role": role, "content": content} for role, content in self.messages(request)],
            )
            data, retries = self.post("/chat/completions", body)
            choice = first_choice(data)
            logprobs = choice.get("logprobs")
            content = (logprobs or {}).get("content") or []
            top = (
                {entry["token"]: entry["logprob"] for entry in content[0].get("top_logprobs") or []} if content else {}
            )
            text = choice["message"].get("content") or ""
        else:
            body.update(prompt=request.prompt, logprobs=self.top_logprobs)
            data, retries = self.post("/completions", body)
            choice = first_choice(data)
            logprobs = choice.get("logprobs")
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
        if missing and not probe_only:
            with self._count_lock:
                self._letters_missing += missing
        response = letter_response(request, scores, usage_of(data), retries)
        if missing == len(scores):
            response.output = text  # no letter among the top tokens: the answer is parsed from the text
        return response

    def post(self, path: str, body: dict) -> tuple[dict, int]:
        """The JSON answer to ``body`` at ``path`` and how many retries it took (see OpenAIClient.post)."""
        return self.client.post(path, body)


def first_choice(data: dict) -> dict:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        raise RequestFailed(f"the answer has no choices: {json.dumps(data)[:200]}")
    return choices[0]


def usage_of(data: dict) -> dict[str, int]:
    usage = data.get("usage") or {}
    return {key: int(usage[key]) for key in ("prompt_tokens", "completion_tokens") if isinstance(usage.get(key), int)}


def letter_response(request: LetterRequest, scores: dict[str, float], usage: dict, retries: int) -> Response:
    best = max(request.letters, key=lambda letter: scores.get(letter, -math.inf))
    return Response(
        id=request.id, output=best, scores=scores, usage=usage, info={"retries": retries} if retries else {}
    )
