"""One persistent request cache for every backend and run: sqlite in WAL mode, a row per response.

The key is the backend's ``identity()`` and the whole request as the model sees it (rendered prompt or
messages, decoding parameters, stop strings, seed): two models never share an entry (unlike a cache
keyed on the request alone). Each response is committed as it arrives, so a killed run loses none.

Modes: ``read_write`` (default), ``read_only`` (use entries, add none), ``refresh`` (ask again and
overwrite), ``off``. A sampled request without a seed is never cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from esgexp.backends.base import Backend, OnResults, Request, Response, request_payload

log = logging.getLogger(__name__)

SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL, created REAL NOT NULL)"


def cache_key(identity: dict, rendered: str, request: Request) -> str:
    """sha256 of the backend identity, the model input and every decoding field of the request."""
    payload = request_payload(request)
    payload.pop("prompt", None)
    payload.pop("messages", None)
    blob = json.dumps({"identity": identity, "input": rendered, "request": payload}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class RequestCache:
    """Responses by key in one sqlite file; safe across threads (one lock) and processes (WAL, busy timeout)."""

    def __init__(self, path: str | Path, mode: str = "read_write"):
        self.path = Path(path)
        self.mode = mode
        self._lock = threading.Lock()
        self._db = self._open() if mode != "off" else None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect()
        except sqlite3.DatabaseError as error:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            log.warning(
                "request cache %s is unreadable (%s): moved aside to %s and started anew", self.path, error, aside
            )
            self.path.rename(aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(SCHEMA)
        db.execute("SELECT count(*) FROM responses").fetchone()  # a corrupt file fails here, not later
        return db

    @property
    def reads(self) -> bool:
        return self.mode in ("read_write", "read_only")

    @property
    def writes(self) -> bool:
        return self.mode in ("read_write", "refresh")

    def get(self, key: str) -> Response | None:
        if self._db is None or not self.reads:
            return None
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return Response(**{**json.loads(row[0]), "cached": True})

    def put(self, key: str, response: Response) -> None:
        """Store a successful response (failures are asked again next time)."""
        if self._db is None or not self.writes or response.failed:
            return
        stored = {"id": response.id, "output": response.output, "scores": response.scores, "usage": response.usage}
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, response, created) VALUES (?, ?, ?)",
                (key, json.dumps(stored), time.time()),
            )

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class CachedBackend(Backend):
    """A backend whose answers come from the cache where it has them; the rest are asked and stored.

    ``n_cached`` and ``n_requested`` count this run's hits and the requests sent to the model."""

    def __init__(self, inner: Backend, cache: RequestCache):
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.n_cached = 0
        self.n_requested = 0

    @property
    def adapter(self):
        return self.inner.adapter

    def identity(self) -> dict:
        return self.inner.identity()

    def supports(self, kind: str) -> bool:
        return self.inner.supports(kind)

    def rendered(self, request: Request) -> str:
        return self.inner.rendered(request)

    def run(self, requests: Sequence[Request], on_results: OnResults) -> None:
        identity = self.inner.identity()
        keys = {r.id: cache_key(identity, self.inner.rendered(r), r) if r.cacheable() else None for r in requests}
        hits, todo = [], []
        for request in requests:
            hit = self.cache.get(keys[request.id]) if keys[request.id] else None
            if hit is None:
                todo.append(request)
            else:
                hit.id = request.id
                hits.append(hit)
        self.n_cached += len(hits)
        if hits:
            on_results(hits)
        if not todo:
            return
        self.n_requested += len(todo)

        def store(responses: list[Response]) -> None:
            for response in responses:
                if keys.get(response.id):
                    self.cache.put(keys[response.id], response)
            on_results(responses)

        self.inner.run(todo, store)

    def stats(self) -> dict[str, int]:
        return {"n_cached": self.n_cached, "n_requests": self.n_requested, **self.inner.stats()}

    def close(self) -> None:
        self.inner.close()
        self.cache.close()
