"""``retriever=embeddings``: vectors from any OpenAI-compatible ``/embeddings`` endpoint, exact search.

Texts go to the server in batches through ``OpenAIClient`` (the key, retries and timeouts of
``backend=openai``); every vector is stored in the request cache as its batch arrives, keyed on the
server, the model, the dimensions and the text, so a rerun (or a run on an edited corpus) asks only
for the texts it has not seen, and a killed run loses no answered batch.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from typing import Any, ClassVar

import numpy as np

from esgexp.backends.cache import CACHE_MODES
from esgexp.core.rules import URL, Choice, Integer, Number
from esgexp.errors import UserError
from esgexp.retrieval.dense import VectorRetriever

log = logging.getLogger(__name__)


def pack(vector: np.ndarray) -> str:
    """A float32 vector as base64 text (a quarter of its JSON size)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def unpack(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


class EmbeddingsRetriever(VectorRetriever):
    """Inner products of embeddings served at ``base_url`` (e.g. ``https://api.openai.com/v1``) for the
    served ``model``; cosine when ``normalize`` (OpenAI's vectors already have unit length).

    ``api_key_env``: the environment variable holding the key (None: no key); ``dimensions``: sent when set
    (text-embedding-3 models can shorten their vectors); ``batch_size``: texts per request;
    ``query_prompt`` / ``passage_prompt``: text put before each query / passage; ``request_cache`` and
    ``cache_mode``: the request cache file and mode (``paths.request_cache`` and ``cache``, as for the
    backends; mode ``off`` or no file: no cache). ``stats()`` counts the requests sent and texts found
    in the cache.
    """

    rules: ClassVar[dict] = {
        **VectorRetriever.rules,
        "base_url": URL(),
        "dimensions": Integer(1, optional=True),
        "cache_mode": Choice(CACHE_MODES),
        "timeout_s": Number(0, above=True),
        "connect_timeout_s": Number(0, above=True),
        "max_retries": Integer(0),
        "backoff_s": Number(0),
    }

    @classmethod
    def preflight(cls, node) -> list[str]:
        """The API key's environment variable (``api_key_env``) not set."""
        env = node.get("api_key_env")
        if env and not os.environ.get(str(env)):
            return [f"retriever {node.get('name')}: API key not set (environment variable {env})"]
        return []

    def __init__(
        self,
        base_url: str,
        model: str,
        name: str = "embeddings",
        api_key_env: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        normalize: bool = True,
        query_prompt: str = "",
        passage_prompt: str = "",
        request_cache: str | None = None,
        cache_mode: str = "read_write",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        backend: str = "numpy",
    ) -> None:
        super().__init__(name, backend)
        from esgexp.backends.openai_client import OpenAIClient

        if not base_url or not model:
            raise UserError(f"retriever {name}: set retriever.base_url and retriever.model (the served model)")
        self.client = OpenAIClient(
            base_url,
            api_key_env,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            needed_by=f"retriever {name} ({model} on {base_url})",
            key_setting="retriever.api_key_env",
        )
        self.model, self.dimensions, self.batch_size = str(model), dimensions, int(batch_size)
        self.normalize = bool(normalize)
        self.query_prompt, self.passage_prompt = query_prompt or "", passage_prompt or ""
        self.request_cache, self.cache_mode = request_cache, cache_mode
        self._cache: Any = None
        self._counts = {"n_requests": 0, "n_cached": 0, "n_embedded": 0}

    def identity(self) -> dict[str, Any]:
        """What a vector depends on besides its text (the request cache's key)."""
        return {
            "kind": "embeddings",
            "base_url": self.client.base_url,
            "model": self.model,
            "dimensions": self.dimensions,
        }

    def settings(self) -> dict[str, Any]:
        return {**self.identity(), "passage_prompt": self.passage_prompt, "normalize": self.normalize}

    def stats(self) -> dict[str, int]:
        """``n_requests`` sent, texts found in the cache (``n_cached``) or embedded by the server, retries."""
        return {f"retriever/{key}": value for key, value in {**self._counts, **self.client.stats()}.items()}

    def cache(self):
        if self._cache is None and self.request_cache and self.cache_mode != "off":
            from esgexp.backends.cache import RequestCache

            self._cache = RequestCache(self.request_cache, self.cache_mode)
        return self._cache

    def key(self, text: str) -> str:
        blob = json.dumps({"identity": self.identity(), "input": text}, sort_keys=True)
        return "embedding:" + hashlib.sha256(blob.encode()).hexdigest()

    def encode(self, texts: list[str], query: bool = False) -> np.ndarray:
        """One float32 row per text: from the cache where it is there, from the server in batches otherwise."""
        prompt = self.query_prompt if query else self.passage_prompt
        inputs = [prompt + text for text in texts]
        cache = self.cache()
        found: dict[str, np.ndarray] = {}
        for text in dict.fromkeys(inputs):
            stored = cache.get_value(self.key(text)) if cache is not None else None
            if stored is not None:
                found[text] = unpack(stored)
        self._counts["n_cached"] += sum(1 for text in inputs if text in found)
        todo = [text for text in dict.fromkeys(inputs) if text not in found]
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            for text, vector in zip(batch, self.request(batch)):
                found[text] = vector
                if cache is not None:
                    cache.put_value(self.key(text), pack(vector))
        vectors = np.stack([found[text] for text in inputs]).astype(np.float32) if inputs else np.empty((0, 0))
        if self.normalize and len(vectors):
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def request(self, batch: list[str]) -> list[np.ndarray]:
        """The server's vectors for ``batch``, in its order; a failure or a malformed reply is a UserError."""
        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = int(self.dimensions)
        with self.client.reporting(f"an embeddings request for model {self.model!r}"):
            reply, _ = self.client.post("/embeddings", body)
        self._counts["n_requests"] += 1
        self._counts["n_embedded"] += len(batch)
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or len(data) != len(batch):
            raise UserError(
                f"retriever {self.name}: the server at {self.client.base_url} answered {len(batch)} texts with "
                f"{len(data) if isinstance(data, list) else 'no'} embeddings: {json.dumps(reply)[:200]}"
            )
        rows = sorted(data, key=lambda row: row.get("index", 0))
        vectors = [np.asarray(row.get("embedding"), dtype=np.float32) for row in rows]
        if any(v.ndim != 1 or not len(v) for v in vectors) or len({len(v) for v in vectors}) != 1:
            raise UserError(
                f"retriever {self.name}: the server at {self.client.base_url} did not return one pooled vector per "
                f"text (shapes {sorted({v.shape for v in vectors})}): serve an embedding model with pooling"
            )
        return vectors
