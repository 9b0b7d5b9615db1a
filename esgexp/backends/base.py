"""The one interface every model backend offers the tasks: requests in, one response per item out.

Two kinds of request, as in lm-evaluation-harness's ``LM`` (``generate_until`` / ``loglikelihood``):

- ``GenerationRequest``: a prompt (or chat messages), max new tokens, stop strings, seed -> text
  (with ``json_schema``, JSON text matching that schema: structured output);
- ``LetterRequest``: a prompt and the option letters -> a log-probability per letter.

A backend answers a list of requests through ``on_results``, batch by batch as they finish, so the
caller can write each batch to disk before the next one starts; an item that fails is answered with
``failed=True`` and its error, never dropped. ``identity()`` is what decides the outputs (backend,
model, revision or weights stamp, adapter, dtype, base URL): the request cache keys on it.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

KINDS = ("generate", "logprob")
# A reasoning model's delimiters around its thinking (every reasoning model config: the DeepSeek-R1 family,
# QwQ, Qwen3; o-series and API models return their reasoning apart from the answer). A model config may name
# its own pair (``model.reasoning_delimiters``); these are looked for in every reply, whatever the config says.
REASONING_OPEN, REASONING_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy (``temperature`` 0) or seeded sampled text after ``prompt``, or after chat ``messages``.

    ``json_schema`` (a JSON Schema as canonical JSON text, see :func:`schema_text`) asks for structured
    output: the backend constrains decoding (hf, vllm) or the server (openai ``response_format``) to it."""

    id: str
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs
    max_new_tokens: int = 16
    stop: tuple[str, ...] = ()
    seed: int | None = None
    temperature: float = 0.0
    json_schema: str | None = None

    kind = "generate"

    def cacheable(self) -> bool:
        """Greedy output is a function of the request; a sampled one only with its seed."""
        return self.temperature == 0 or self.seed is not None


@dataclass(frozen=True)
class LetterRequest:
    """The log-probability of each of ``letters`` as the next token after ``prompt`` (or ``messages``)."""

    id: str
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    letters: tuple[str, ...] = ("A", "B", "C", "D")

    kind = "logprob"

    def cacheable(self) -> bool:
        return True


Request = GenerationRequest | LetterRequest


def request_payload(request: Request) -> dict:
    """What decides a request's answer: every field but the item id, and its kind (a request without a
    schema has no ``json_schema`` key, so its cache key is what it was before structured output)."""
    payload = {f.name: getattr(request, f.name) for f in fields(request)}  # asdict's deep copy costs
    payload.pop("id")
    if payload.get("json_schema", "") is None:
        payload.pop("json_schema")
    payload["kind"] = request.kind
    return payload


def schema_text(schema: dict) -> str:
    """A JSON Schema as the compact text a request carries. Key order is kept, not sorted: constrained
    decoders generate the properties in the order the schema lists them."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Response:
    """One item's answer: the text (generate) or per-letter scores (logprob), or why it failed."""

    id: str
    output: str | None = None
    scores: dict[str, float] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    failed: bool = False
    error: str | None = None
    permanent: bool = False  # a failure that asking again cannot mend (the server refused the request)
    # backend notes worth counting, e.g. {"retries": 2} or {"letters_missing": 1}
    info: dict[str, int] = field(default_factory=dict)
    # the model the server says answered (an API reply's ``model``: a dated id behind an alias such as gpt-4o)
    served_model: str | None = None

    def to_result(self) -> dict:
        """The dict form the tasks turn into a prediction record."""
        if self.failed:
            return {"id": self.id, "failed": True, "error": self.error}
        result = {"id": self.id, "output": self.output}
        if self.scores is not None:
            result["scores"] = self.scores
        return result


OnResults = Callable[[list[Response]], None]


@dataclass(frozen=True)
class RunContext:
    """What a backend may need beyond its own and the model's config node."""

    cache_dir: str
    tracking_uri: str
    seed: int
    output_dir: str | None = None  # the run folder (a server the backend starts keeps its log there)


class Backend(ABC):
    """A model behind one interface. Subclasses answer ``run``; the rest has sensible defaults."""

    name: str = "backend"
    # (folder, card) of the model.adapter this backend applies, from models.generation.prepare_adapter
    adapter: tuple | None = None
    # What the class declares for the rest of esgexp (its YAML's keys are its constructor's arguments):
    rules: ClassVar[dict] = {}  # its settings' rules (esgexp/core/rules.py), checked before any job starts
    runtime_keys: tuple[str, ...] = ()  # settings that change how fast, not what: outside a run's identity
    packages: tuple[str, ...] = ()  # the packages whose version can change its outputs (a run's ``versions`` tag)
    serves_on_gpu: bool = False  # an engine that holds the model on GPUs, its KV cache paged in advance (vLLM)
    requires: ClassVar[dict[str, str]] = {}  # optional modules it imports -> the message naming what to install

    @classmethod
    def missing_requirements(cls) -> list[str]:
        """The message of each optional module of ``requires`` not installed here (make_backend raises the
        first; the paper grid's dry run lists them)."""
        from esgexp.core.requirements import missing

        return missing(cls.requires)

    @classmethod
    def preflight(cls, backend_cfg, model_cfg, cache_dir: str) -> list[str]:
        """Why this backend could not answer for ``model_cfg`` on this machine now (weights, a key); nothing
        is loaded or sent. The paper grid's dry run asks it of every job."""
        return []

    @abstractmethod
    def identity(self) -> dict:
        """What decides this backend's outputs; JSON-serialisable and free of secrets."""

    @abstractmethod
    def supports(self, kind: str) -> bool:
        """Whether requests of ``kind`` (``generate`` or ``logprob``) can be answered."""

    @abstractmethod
    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        """Answer every request (all of one kind), handing finished responses to ``on_results`` as they come."""

    def rendered(self, request: Request) -> str:
        """The exact input the model sees for ``request`` (its prompt hash and cache key are made from it)."""
        if request.messages is not None:
            return json.dumps([list(m) for m in request.messages])
        return request.prompt or ""

    def to_ask(self, requests: Sequence[Request]) -> list[Request]:
        """The ``requests`` that ``run`` would send to the model (all; behind the request cache, those it holds
        no answer for)."""
        return list(requests)

    def stats(self) -> dict[str, int]:
        """Counts of this run worth reporting (requests sent, retries, failures, ...)."""
        return {}

    def close(self) -> None:  # noqa: B027 (a default, not abstract: most backends hold nothing to free)
        """Free what the backend holds (a GPU's memory, a connection pool) before the next job."""

    def identity_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
