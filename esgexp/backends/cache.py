"""One persistent request cache for every backend and run: sqlite in WAL mode, a row per response.

The key is the backend's ``identity()`` and the whole request as the model sees it (rendered prompt or
messages, decoding parameters, stop strings, seed): two models never share an entry (unlike a cache
keyed on the request alone). Each response is committed as it arrives, so a killed run loses none.

Modes: ``read_write`` (default), ``read_only`` (use entries, add none), ``refresh`` (ask again and
overwrite), ``off``. A sampled request without a seed is never cached.

Only a file that fails sqlite's integrity check (``PRAGMA quick_check``, "file is not a database") is
moved aside and started anew. A cache that cannot be opened for another reason (a full disk, an I/O
error, a lock held by another process) is kept as it is and the job stops with one message saying why
and how to go on (``cache=off`` runs without it); one that stops taking answers mid-run (the disk filled)
is kept too, and the job goes on with a warning, storing no more answers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from esgexp.backends.base import Backend, OnResults, Request, Response, request_payload
from esgexp.core.rules import Choice
from esgexp.errors import UserError

log = logging.getLogger(__name__)

# sqlite's primary result codes for a damaged file (SQLITE_CORRUPT, SQLITE_NOTADB); others (SQLITE_FULL,
# SQLITE_IOERR, SQLITE_BUSY, SQLITE_CANTOPEN...) say nothing about the file's content.
DAMAGED_CODES = (11, 26)
DAMAGED_TEXTS = ("file is not a database", "database disk image is malformed")

SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL, created REAL NOT NULL)"


def is_damage(error: sqlite3.DatabaseError) -> bool:
    """Whether ``error`` reports a damaged database file (corrupt, or not a database at all)."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in DAMAGED_CODES
    return any(text in str(error) for text in DAMAGED_TEXTS)


def cache_key(identity: dict, rendered: str, request: Request) -> str:
    """sha256 of the backend identity, the model input and every decoding field of the request."""
    payload = request_payload(request)
    payload.pop("prompt", None)
    payload.pop("messages", None)
    blob = json.dumps({"identity": identity, "input": rendered, "request": payload}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


CACHE_MODES = ("read_write", "read_only", "refresh", "off")
RULES = {"cache": Choice(CACHE_MODES)}  # the top-level ``cache`` setting, checked before any job starts


class RequestCache:
    """Responses by key in one sqlite file; safe across threads (one lock) and processes (WAL, busy timeout)."""

    def __init__(self, path: str | Path, mode: str = "read_write", timeout_s: float = 60.0):
        self.path = Path(path)
        self.mode = mode
        self.timeout_s = timeout_s  # how long to wait for another process's lock
        self.store_error: str | None = None  # why answers are no longer stored (set once, mid-run)
        self._lock = threading.Lock()
        self._db = self._open() if mode != "off" else None

    def _open(self) -> sqlite3.Connection:
        """The connection; a damaged file moved aside first; UserError when the file cannot be used as it is."""
        from esgexp.core.outputs import make_folder

        fix = "set ESGEXP_CACHE_DIR (or paths.cache_dir, paths.request_cache) to a folder you can write to, or run with cache=off"
        make_folder(self.path.parent, fix)
        try:
            return self._connect()
        except sqlite3.DatabaseError as error:
            if not self.path.exists() or not self.damaged(error):
                raise UserError(self.unusable(error)) from error
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            log.warning(
                "request cache %s fails sqlite's integrity check (%s): moved aside to %s and started anew",
                self.path,
                error,
                aside,
            )
            self.path.rename(aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return self._connect()

    def damaged(self, error: sqlite3.DatabaseError) -> bool:
        """Whether the file itself is damaged: ``error`` says so, or ``PRAGMA quick_check`` finds a fault
        (a check that cannot run, for a lock or a full disk, finds none)."""
        if is_damage(error):
            return True
        try:
            with closing(
                sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=self.timeout_s)
            ) as db:
                return db.execute("PRAGMA quick_check").fetchall() != [("ok",)]
        except sqlite3.DatabaseError as check_error:
            return is_damage(check_error)

    def unusable(self, error: sqlite3.Error) -> str:
        """The message for a cache that cannot be opened, or read, for ``error`` (not damage)."""
        from esgexp.core.outputs import mount_point

        free = shutil.disk_usage(self.path.parent).free
        return (
            f"request cache {self.path} cannot be used: {error} (a full disk, a failing disk, or a lock held by "
            f"another process; {free:,} bytes free on {mount_point(self.path)}). The cache is kept as it is: "
            "free some space or end the process holding it, then run again; cache=off runs without it"
        )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout_s, check_same_thread=False, isolation_level=None)
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
        try:
            with self._lock:
                row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as error:
            raise UserError(self.unusable(error)) from error
        if row is None:
            return None
        return Response(**{**json.loads(row[0]), "cached": True})

    def put(self, key: str, response: Response) -> None:
        """Store a successful response (failures are asked again next time). When the file stops taking
        answers (a full disk, a lock held too long) it is left as it is: one warning, and no more are stored."""
        if self._db is None or not self.writes or response.failed or self.store_error:
            return
        stored = {
            "id": response.id,
            "output": response.output,
            "scores": response.scores,
            "usage": response.usage,
            "served_model": response.served_model,
        }
        try:
            with self._lock:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (key, response, created) VALUES (?, ?, ?)",
                    (key, json.dumps(stored), time.time()),
                )
        except sqlite3.DatabaseError as error:
            self.store_error = str(error)
            log.warning(
                "request cache %s stopped taking answers (%s): it keeps the ones it has; this run goes on "
                "without storing new ones",
                self.path,
                error,
            )

    def get_value(self, key: str):
        """A value stored by ``put_value`` (any JSON: an embedding, say), or None."""
        if self._db is None or not self.reads:
            return None
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_value(self, key: str, value) -> None:
        """Store a JSON value under ``key`` (in the same table as the responses, under keys of its own)."""
        if self._db is None or not self.writes:
            return
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, response, created) VALUES (?, ?, ?)",
                (key, json.dumps(value), time.time()),
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

    def to_ask(self, requests: Sequence[Request]) -> list[Request]:
        identity = self.inner.identity()
        return [
            r
            for r in requests
            if not r.cacheable() or self.cache.get(cache_key(identity, self.inner.rendered(r), r)) is None
        ]

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
