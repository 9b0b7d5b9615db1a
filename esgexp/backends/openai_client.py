"""The HTTP side of any OpenAI-compatible server: one ``OpenAIClient`` per server, shared by its callers.

``OpenAIClient(base_url, api_key_env=...).post("/embeddings", body)`` sends a JSON body and returns the
parsed JSON reply and the retries it took. A 429, a 5xx, a timeout or a dropped connection is retried
with exponential backoff and jitter (``Retry-After`` honoured) up to ``max_retries``, then raised as
``RetryableError``; any other 4xx, or a reply that is not JSON, is raised at once as ``RequestFailed``
with the server's message. Before the server's first reply a refused connection is raised at once
(no server there: say so now, not after the retries). ``probe`` turns both into one ``UserError``
naming the server. The key is read from the environment variable ``api_key_env`` names and goes into
the ``Authorization`` header only. Retries and failed requests are counted (``stats()``).
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import re
import threading
import time
from contextlib import contextmanager

from esgexp.errors import UserError

log = logging.getLogger(__name__)

#: The longest single wait between two tries, whatever the server's Retry-After asks.
MAX_WAIT_S = 120.0


class RetryableError(Exception):
    """A failure worth another try (429, 5xx, timeout, dropped connection); ``wait`` is the server's Retry-After;
    ``unreachable``: no connection was made (before the server's first answer this is not retried)."""

    counted = False  # True once OpenAIClient.post has counted it in n_failed_requests

    def __init__(self, message: str, wait: float | None = None, unreachable: bool = False):
        super().__init__(message)
        self.wait = wait
        self.unreachable = unreachable


class RequestFailed(Exception):
    """A failure that another try will not mend (a 4xx other than 429, a malformed answer)."""

    counted = False


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def read_key(api_key_env: str | None, needed_by: str, key_setting: str = "api_key_env") -> str | None:
    """The key in the environment variable ``api_key_env`` (None: no key); a missing one is a UserError."""
    if not api_key_env:
        return None
    key = os.environ.get(api_key_env)
    if not key:
        raise UserError(
            f"{needed_by} needs an API key: set the environment variable {api_key_env} ({key_setting} names it)"
        )
    return key


class OpenAIClient:
    """JSON POSTs to ``base_url`` (e.g. ``https://api.openai.com/v1``), safe to call from many threads.

    ``needed_by`` names who uses the server and ``key_setting`` the setting that names the key's variable,
    both for the missing-key message."""

    def __init__(
        self,
        base_url: str,
        api_key_env: str | None = None,
        *,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        needed_by: str | None = None,
        key_setting: str = "api_key_env",
    ):
        self.base_url = str(base_url).rstrip("/")
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self._key = read_key(api_key_env, needed_by or f"the server at {self.base_url}", key_setting)
        self._local = threading.local()
        self._sessions: list = []
        self._lock = threading.Lock()
        self._counts = {"n_retries": 0, "n_failed_requests": 0}
        self.answered = False  # whether the server has replied at least once (any status)

    # --- counting ---------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """``n_retries`` (tries after the first) and ``n_failed_requests`` (posts that raised)."""
        with self._lock:
            return dict(self._counts)

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    # --- requests ---------------------------------------------------------------------------------

    def post(self, path: str, body: dict) -> tuple[dict, int]:
        """The parsed JSON reply to ``body`` POSTed at ``base_url + path``, and how many retries it took.
        Raises ``RetryableError`` when the retries run out, ``RequestFailed`` on a reply not worth retrying."""
        try:
            return self._post_with_retries(path, body)
        except (RetryableError, RequestFailed) as error:
            self.count("n_failed_requests")
            error.counted = True
            raise

    def probe(self, path: str, body: dict, what: str) -> dict:
        """``post`` once before the real work, a failure turned into one ``UserError`` naming the server
        (``what``: the request, e.g. "an embeddings request for model 'x'")."""
        with self.reporting(what):
            return self.post(path, body)[0]

    @contextmanager
    def reporting(self, what: str):
        """Inside: a request that fails (retries run out, or refused) becomes one ``UserError`` naming the server."""
        try:
            yield
        except RetryableError as error:
            raise UserError(
                f"the server at {self.base_url} does not answer ({error}); is it running, and is this machine online?"
            ) from None
        except RequestFailed as error:
            raise UserError(f"the server at {self.base_url} refused {what}: {error}") from None

    def _post_with_retries(self, path: str, body: dict) -> tuple[dict, int]:
        for attempt in range(self.max_retries + 1):
            try:
                return self.post_once(path, body), attempt
            except RetryableError as error:
                if error.unreachable and not self.answered:  # no server there: say so now, not after the retries
                    raise
                if attempt == self.max_retries:
                    raise RetryableError(f"{error} (gave up after {self.max_retries} retries)") from None
                self.count("n_retries")
                backoff = self.backoff_s * 2**attempt
                wait = error.wait if error.wait is not None else backoff * (0.5 + random.random())
                log.debug("retrying %s in %.1f s: %s", path, wait, error)
                time.sleep(min(wait, MAX_WAIT_S))
        raise AssertionError("unreachable")

    def post_once(self, path: str, body: dict) -> dict:
        """One try: the parsed reply, or ``RetryableError`` / ``RequestFailed``."""
        import requests

        try:
            reply = self.session().post(
                self.base_url + path, json=body, timeout=(self.connect_timeout_s, self.timeout_s)
            )
        except requests.ConnectTimeout:
            raise RetryableError(
                f"no connection within connect_timeout_s={self.connect_timeout_s:g}", unreachable=True
            ) from None
        except requests.Timeout:
            raise RetryableError(f"no answer within timeout_s={self.timeout_s:g}") from None
        except requests.ConnectionError as error:
            raise RetryableError(f"connection failed: {connection_cause(error)}", unreachable=True) from None
        self.answered = True
        if reply.status_code == 429 or reply.status_code >= 500:
            raise RetryableError(
                f"HTTP {reply.status_code}: {reply.text[:200]}", retry_after(reply.headers.get("Retry-After"))
            )
        if reply.status_code >= 400:
            raise RequestFailed(f"HTTP {reply.status_code}: {server_message(reply)}")
        try:
            return reply.json()
        except ValueError:
            raise RequestFailed(f"the answer is not JSON: {reply.text[:200]!r}") from None

    # --- connections ------------------------------------------------------------------------------

    def session(self):
        """This thread's ``requests.Session`` (with the key's header)."""
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            if self._key:
                session.headers["Authorization"] = f"Bearer {self._key}"
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def close(self) -> None:
        """Close every pooled connection."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()


def connection_cause(error: Exception) -> str:
    """The OS's reason inside a requests connection error (``[Errno 111] Connection refused``), else its start."""
    found = re.search(r"\[Errno -?\d+\][^'\")]*", str(error))
    return found.group(0).strip() if found else str(error)[:200]


def server_message(reply) -> str:
    """The error message in an OpenAI-style error body, else the body's start."""
    try:
        error = reply.json().get("error")
        return str(error.get("message") if isinstance(error, dict) else error)[:500]
    except (ValueError, AttributeError):
        return reply.text[:500]
