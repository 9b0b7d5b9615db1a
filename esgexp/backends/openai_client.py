"""The HTTP side of any OpenAI-compatible server: one ``OpenAIClient`` per server, shared by its callers.

``OpenAIClient(base_url, api_key_env=...).post("/embeddings", body)`` sends a JSON body and returns the
parsed JSON reply and the retries it took. A 429, a 5xx, a timeout, a dropped connection or a reply that
is not JSON is retried with exponential backoff and jitter (``Retry-After`` honoured) up to ``max_retries``,
then raised as ``RetryableError``; any other 4xx is raised at once as ``RequestFailed`` with the server's
message (``ContextOverflow`` when the prompt does not fit the model's context, with the token counts the
server gives; a 404 on a base URL without ``/v1`` suggests it). Before the server's first reply a refused
connection is raised at once (no server there: say so now, not after the retries). ``reporting`` turns
them into one ``UserError`` naming the server: one that does not answer, or one that answers with errors.
A reply cut off after its headers (``IncompleteRead``, a reset mid-body) is a dropped connection like any
other: retried and counted. After ``DOWN_AFTER`` connections lost in a row (refused, reset; HTTP errors
do not count) the client asks the server's ``/models`` once; when that fails too the server is gone:
every request waiting or retrying ends at once with ``ServerGone``, so a server that dies mid-run costs
seconds, not every item's retries. A ``/models`` that takes the connection but does not answer in time is a
busy server, not a gone one: said once, and the requests go on. A server that answers but fails every
request (HTTP 5xx, a dropped connection, a reply that is not JSON; not a 429 or a timeout) trips a circuit
breaker: once ``give_up_after`` requests in a row have failed with no answer in between, at least one of them
after a retry, every request ends with ``ServerGone`` too (``failing`` says so), and while one request has
already used up its retries in such a run of failures the next ones are not retried. Before the server's
first good answer (the probe, alone), a request that fails so ``FIRST_TRIES`` times is not tried again: a
server that fails every request from the start is one error in seconds. The key is read from the environment variable
``api_key_env`` names and goes into the ``Authorization`` header only. Retries and failed requests are
counted (``stats()``).

A slow server is not flooded: with ``max_concurrency`` the client keeps at most that many requests in
flight and, after a timeout, halves that number and doubles the timeout (once per round of requests
sent at the last setting; answers in a row raise the number again by one), and the request that timed
out tries again with four times its last timeout (a slow request, not only a busy server). A ``Retry-After`` pauses
every request, not only the one that got it; a long wait is logged with how long and why. ``stop()``
(Ctrl-C) ends every wait and retry at once (``Interrupted``); requests in flight finish.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import logging
import os
import random
import re
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass

from esgexp.errors import UserError

log = logging.getLogger(__name__)

#: The longest single wait between two tries, whatever the server's Retry-After asks.
MAX_WAIT_S = 120.0
#: A wait at least this long is logged (with its reason) when it starts.
LONG_WAIT_S = 10.0
#: After timeouts the timeout grows up to this many times ``timeout_s``.
MAX_TIMEOUT_FACTOR = 16
#: This many connections lost in a row (refused or reset, any request) make the client look at the server.
DOWN_AFTER = 3
#: Before the server's first good answer, a request whose tries fail this many times (the circuit breaker's kinds
#: of failure) is not tried again.
FIRST_TRIES = 3


@dataclass(frozen=True)
class Call:
    """One HTTP request to the server: ``method``, ``path`` after the base URL, the body and its content type,
    and whether the reply is wanted as bytes (``raw``) rather than parsed JSON."""

    method: str
    path: str
    body: bytes | None = None
    content_type: str = "application/json"
    raw: bool = False


class RetryableError(Exception):
    """A failure worth another try (429, 5xx, timeout, dropped connection, a reply that is not JSON); ``wait``
    is the server's Retry-After; ``status`` the HTTP status of a reply (None: no reply); ``unreachable``: no
    connection was made (before the server's first answer this is not retried); ``lost``: the connection was
    refused or broke (what ``DOWN_AFTER`` counts)."""

    counted = False  # True once OpenAIClient.post has counted it in n_failed_requests

    def __init__(
        self,
        message: str,
        wait: float | None = None,
        unreachable: bool = False,
        timed_out: bool = False,
        status: int | None = None,
        lost: bool = False,
    ):
        super().__init__(message)
        self.wait = wait
        self.unreachable = unreachable
        self.timed_out = timed_out
        self.status = status
        self.lost = lost or unreachable


class ServerGone(RetryableError):
    """The server stopped answering: connections were lost ``DOWN_AFTER`` times in a row and its ``/models``
    did not answer either. Not retried: every request waiting or retrying ends with it."""


class RequestFailed(Exception):
    """A failure that another try will not mend (a 4xx other than 429, a malformed answer); ``status``: the
    HTTP status of the server's refusal (None: a malformed answer)."""

    counted = False

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ContextOverflow(RequestFailed):
    """The server's 400 saying the request does not fit the model's context: ``prompt_tokens`` and
    ``context`` (the model's context, in tokens) as far as the server says them, else None."""

    def __init__(self, message: str, prompt_tokens: int | None, context: int | None):
        super().__init__(message, status=400)
        self.prompt_tokens = prompt_tokens
        self.context = context


class Interrupted(Exception):
    """The client was stopped (``OpenAIClient.stop``) before this request had its answer."""


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
    both for the missing-key message; the base URL's setting is its neighbour (``backend.base_url``)."""

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
        max_concurrency: int | None = None,
        max_wait_s: float = MAX_WAIT_S,
        give_up_after: int | None = None,
    ):
        self.base_url = str(base_url).rstrip("/")
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_wait_s = float(max_wait_s)
        self._key = read_key(api_key_env, needed_by or f"the server at {self.base_url}", key_setting)
        node = key_setting.rpartition(".")[0]
        self.url_setting = f"{node}.base_url" if node else "base_url"
        self._headers = {"Content-Type": "application/json"}
        if self._key:
            self._headers["Authorization"] = f"Bearer {self._key}"
        self._pool = None
        self._base_path = urllib.parse.urlsplit(self.base_url).path  # what a request's path goes after
        self._lock = threading.Lock()
        self._counts = {"n_retries": 0, "n_failed_requests": 0}
        self.answered = False  # whether the server has replied at least once (any status)
        self.answered_well = False  # whether it has given one good answer
        self._said_busy = False  # a health check that timed out has been logged
        self.gate = Gate(max_concurrency, self.timeout_s, self.base_url)
        self._stopped = threading.Event()
        self._resume_at = 0.0  # time.monotonic() before which no request is sent (a Retry-After)
        self._lost_in_a_row = 0  # connections lost since the server's last reply (any request)
        self._looking = False  # one thread is asking the server's /models whether it is still there
        self.gone: str | None = None  # once the server is taken for gone (ServerGone): why
        # the circuit breaker: requests failed since the server's last good answer (None: no breaker)
        self.give_up_after = give_up_after
        self.failing = False  # gone because every request failed (the breaker), not because nothing answers
        self._failed_calls: set[int] = set()  # the serial number of each request failed since the last good answer
        self._serial = itertools.count()
        self._retried_in_streak = False  # one of them failed again after a retry
        self._exhausted_in_streak = False  # one of them used up its retries

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
        return self.send(Call("POST", path, json.dumps(body).encode()))

    def get(self, path: str) -> dict:
        """The parsed JSON reply to a GET of ``base_url + path`` (retried as ``post`` is)."""
        return self.send(Call("GET", path))[0]

    def download(self, path: str) -> bytes:
        """The body of a GET of ``base_url + path`` as it is (a file's content; retried as ``post`` is)."""
        return self.send(Call("GET", path, raw=True))[0]

    def upload(self, path: str, fields: dict) -> dict:
        """The parsed JSON reply to a multipart form POSTed at ``base_url + path``: ``fields`` maps a name to a
        text value or to a ``(file name, bytes, content type)`` file (OpenAI's ``/files``)."""
        import urllib3

        body, content_type = urllib3.encode_multipart_formdata(fields)
        return self.send(Call("POST", path, body, content_type))[0]

    def send(self, call: Call) -> tuple:
        """``call``'s reply (parsed JSON, or bytes when ``raw``) and its retries; a failure is counted and raised."""
        try:
            return self._with_retries(call)
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
            if error.status is not None:
                raise UserError(
                    f"the server at {self.base_url} answers {what} with errors ({error}): "
                    f"{ERROR_ADVICE.get(error.status, ERROR_ADVICE[500])}"
                ) from None
            if error.lost and not error.unreachable:
                raise UserError(
                    f"the server at {self.base_url} takes the connection of {what} but drops it before answering "
                    f"({error}): look at its log, or at a proxy in front of it"
                ) from None
            raise UserError(
                f"the server at {self.base_url} does not answer ({error}); is it running, and is this machine online?"
            ) from None
        except RequestFailed as error:
            raise UserError(f"the server at {self.base_url} refused {what}: {error}") from None

    def stop(self) -> None:
        """End every wait and every retry now: each such request raises ``Interrupted``."""
        self._stopped.set()
        self.gate.wake()

    def _sleep(self, seconds: float) -> None:
        if self._stopped.wait(seconds) if seconds > 0 else self._stopped.is_set():
            raise self._halted()

    def _halted(self) -> Exception:
        """What a request stopped by ``stop()`` raises: ``ServerGone`` once the server is gone, else ``Interrupted``."""
        if self.gone:
            how = "fails every request" if self.failing else "stopped answering"
            return ServerGone(f"the server at {self.base_url} {how} ({self.gone})")
        return Interrupted("stopped")

    def _enter(self) -> int:
        try:
            return self.gate.enter(self._stopped)
        except Interrupted:
            raise self._halted() from None

    def _with_retries(self, call: Call) -> tuple:
        own_timeouts, serial = 0, next(self._serial)
        for attempt in range(self.max_retries + 1):
            self._sleep(self._resume_at - time.monotonic())
            round_ = self._enter()
            # a request that timed out may simply be slow: its own next try waits 4 times as long
            timeout_s = min(
                max(self.gate.timeout_s, self.timeout_s * 4**own_timeouts), self.timeout_s * MAX_TIMEOUT_FACTOR
            )
            try:
                reply = self.send_once(call, timeout_s=timeout_s)
                self.gate.leave(round_)
                self._answered_well()
                return reply, attempt
            except RetryableError as error:
                self.gate.leave(round_, timed_out=error.timed_out)
                own_timeouts += error.timed_out
                if error.unreachable and not self.answered:  # no server there: say so now, not after the retries
                    raise
                if error.lost:
                    self._connection_lost(error)
                failing_run = self._failed(serial, attempt, error)
                if self._stopped.is_set():
                    raise self._halted() from None
                if attempt == self.max_retries or failing_run:
                    with self._lock:
                        self._exhausted_in_streak = self._exhausted_in_streak or bool(self._failed_calls)
                    if attempt == self.max_retries:
                        tries = f"{self.max_retries} retries"
                    elif not self.answered_well:
                        tries = f"{attempt} retries: the server has not answered any request well"
                    else:
                        tries = "no retry: every request fails"
                    raise RetryableError(
                        f"{error} (gave up after {tries})", status=error.status, lost=error.lost
                    ) from None
                self.count("n_retries")
                if error.wait is not None:
                    self._pause(error)
                    wait = 0.0
                else:
                    wait = self.backoff_s * 2**attempt * (0.5 + random.random())
                log.debug("retrying %s in %.1f s: %s", call.path, wait, error)
                self._sleep(min(wait, self.max_wait_s))
            except BaseException:
                self.gate.leave(round_)
                raise
        raise AssertionError("unreachable")

    def _answered_well(self) -> None:
        """A good answer: the circuit breaker's count starts again."""
        with self._lock:
            self._failed_calls.clear()
            self._retried_in_streak = self._exhausted_in_streak = False
            self.answered_well = True

    def _failed(self, serial: int, attempt: int, error: RetryableError) -> bool:
        """Count a failed try for the circuit breaker; the ``give_up_after``-th request failed in a row (one of
        them after a retry) takes the server for failing: every request ends (``ServerGone``). True when this
        request is not worth retrying: another one already used up its retries since the last good answer, or
        the server has given no good answer yet and this request failed ``FIRST_TRIES`` times."""
        if self.give_up_after is None or error.timed_out or error.status == 429:
            return False
        with self._lock:
            self._failed_calls.add(serial)
            self._retried_in_streak = self._retried_in_streak or attempt > 0
            tripped = len(self._failed_calls) >= self.give_up_after and self._retried_in_streak and not self.gone
            if tripped:
                self.gone = (
                    f"{len(self._failed_calls)} requests in a row failed, none answered in between; the last: {error}"
                )
                self.failing = True
            exhausted = self._exhausted_in_streak or (not self.answered_well and attempt + 1 >= FIRST_TRIES)
        if tripped:
            self.stop()
        return exhausted

    def _connection_lost(self, error: RetryableError) -> None:
        """Count a lost connection; the ``DOWN_AFTER``-th in a row makes one thread ask the server's ``/models``:
        no answer there either, and every request ends (``ServerGone``); an answer starts the count again."""
        with self._lock:
            self._lost_in_a_row += 1
            if self._lost_in_a_row < DOWN_AFTER or self._looking or self.gone:
                return
            self._looking = True
        try:
            down = self.unanswered()
        finally:
            with self._lock:
                self._looking, self._lost_in_a_row = False, 0
        if down:
            self.gone = f"{error}; {down}"
            self.stop()

    def unanswered(self) -> str | None:
        """Why the server's ``/models`` gives no reply (None: it replied, whatever its status, or it took the
        connection and is busy: no answer within the time, logged once), asked once on a new connection, with
        ``connect_timeout_s`` to connect and as long to answer."""
        import urllib3

        pool = urllib3.connection_from_url(self.base_url, maxsize=1)
        try:
            pool.urlopen(
                "GET",
                self._base_path + "/models",
                headers=self._headers,
                timeout=urllib3.Timeout(connect=self.connect_timeout_s, read=self.connect_timeout_s),
                retries=False,
                redirect=False,
            )
        except urllib3.exceptions.ReadTimeoutError:
            if not self._said_busy:
                self._said_busy = True
                log.warning(
                    "the server at %s lost %d connections in a row, but it is up: its health check (GET %s/models) "
                    "took the connection and did not answer within %g s (busy); not taken for stopped, the requests "
                    "go on with their retries",
                    self.base_url,
                    DOWN_AFTER,
                    self._base_path,
                    self.connect_timeout_s,
                )
        except (urllib3.exceptions.HTTPError, OSError) as error:
            return f"GET {self._base_path}/models: {connection_cause(error)}"
        finally:
            pool.close()
        return None

    def _pause(self, error: RetryableError) -> None:
        """Hold every request for the server's ``Retry-After`` (at most ``max_wait_s``); a long one is logged."""
        wait = min(error.wait, self.max_wait_s)
        with self._lock:
            now = time.monotonic()
            extended = now + wait > self._resume_at + 1.0
            self._resume_at = max(self._resume_at, now + wait)
        if extended and error.wait >= LONG_WAIT_S:
            capped = (
                f" (it asked for {error.wait:.0f} s; one wait is at most max_wait_s={self.max_wait_s:g} s)"
                if wait < error.wait
                else ""
            )
            log.warning(
                "the server at %s asks to retry after %.0f s (%s): every request waits until %s%s",
                self.base_url,
                error.wait,
                str(error)[:80],
                time.strftime("%H:%M:%S", time.localtime(time.time() + wait)),
                capped,
            )

    def send_once(self, call: Call, timeout_s: float | None = None):
        """One try (``timeout_s``: this try's read timeout, default ``timeout_s``): the parsed reply (bytes for
        a ``raw`` call), or ``RetryableError`` / ``RequestFailed``."""
        import urllib3
        from urllib3.exceptions import (
            ConnectTimeoutError,
            HTTPError,
            NewConnectionError,
            ReadTimeoutError,
            SSLError,
        )

        timeout_s = timeout_s or self.timeout_s
        try:
            reply = self.pool().urlopen(
                call.method,
                self._base_path + call.path,
                body=call.body,
                headers={**self._headers, "Content-Type": call.content_type} if call.body else self._headers,
                timeout=urllib3.Timeout(connect=self.connect_timeout_s, read=timeout_s),
                retries=False,
                redirect=False,
                preload_content=False,
                enforce_content_length=True,
            )
        except (NewConnectionError, SSLError) as error:
            raise RetryableError(f"connection failed: {connection_cause(error)}", unreachable=True) from None
        except ConnectTimeoutError:
            raise RetryableError(
                f"no connection within connect_timeout_s={self.connect_timeout_s:g}", unreachable=True
            ) from None
        except ReadTimeoutError:
            raise RetryableError(f"no answer within {timeout_s:g} s (timeout_s)", timed_out=True) from None
        except (HTTPError, OSError) as error:  # connected, then dropped before the answer's headers
            raise RetryableError(f"connection dropped: {connection_cause(error)}", lost=True) from None
        self.answered = True
        with self._lock:
            self._lost_in_a_row = 0
        try:
            data = reply.read()
        except (HTTPError, OSError) as error:  # IncompleteRead, a reset or a timeout mid-body
            timed_out = isinstance(error, ReadTimeoutError)
            raise RetryableError(
                f"the reply broke off after its headers: {connection_cause(error)}",
                timed_out=timed_out,
                lost=not timed_out,
            ) from None
        finally:
            reply.release_conn()
        return self.parsed(reply.status, data, reply.headers.get("Retry-After"), call.raw)

    def parsed(self, status: int, data: bytes, wait: str | None, raw: bool = False):
        """A reply's JSON (``raw``: its bytes), or why not: ``RetryableError`` (429, 5xx, not JSON) or
        ``RequestFailed`` (other 4xx)."""
        text = data.decode("utf-8", errors="replace")
        if status == 500 and BROADCAST_OVERFLOW.search(text):  # llama-cpp-python: past the context while answering
            raise ContextOverflow(
                f"HTTP 500: {server_message(text)} (llama-cpp-python's way of saying that the prompt and the answer's "
                "tokens do not fit the model's context)",
                None,
                None,
            )
        if status == 429 or status >= 500:
            raise RetryableError(f"HTTP {status}: {server_message(text)}", retry_after(wait), status=status)
        if status >= 400:
            refused = f"HTTP {status}: {server_message(text)}"
            overflow = context_overflow(text) if status in (400, 413) else None
            if overflow:
                raise ContextOverflow(refused, *overflow)
            if status == 404 and not self._base_path.rstrip("/").endswith("/v1"):
                head = self.base_url.partition("/v1/")[0]  # a pasted endpoint (.../v1/chat/completions)
                refused += f" (OpenAI-compatible servers answer under /v1: try {self.url_setting}={head}/v1)"
            raise RequestFailed(refused, status=status)
        if raw:
            return data
        try:
            return json.loads(data)
        except ValueError:
            raise RetryableError(f"the answer is not JSON: {text[:200]!r}", status=status) from None

    # --- connections ------------------------------------------------------------------------------

    def pool(self):
        """The connection pool to ``base_url``'s host (urllib3: thread-safe, one kept-alive connection per request
        in flight, and one more: the probe's, opened beside the others)."""
        if self._pool is None:
            import urllib3

            with self._lock:
                if self._pool is None:
                    size = self.gate.ceiling + 1 if self.gate.ceiling else 64
                    self._pool = urllib3.connection_from_url(self.base_url, maxsize=size)
        return self._pool

    @contextmanager
    def open_connection(self):
        """Inside: one pooled connection to ``base_url`` taken and opened (TCP, and TLS for https), sending
        nothing; after, it is back in the pool for a request to find ready. Callers that stay inside together
        open that many connections. Raises ``OSError`` / urllib3's ``HTTPError`` when it cannot connect."""
        pool = self.pool()
        conn = pool._get_conn()  # urllib3 has no public call for this: a fresh (or idle) pooled connection
        try:
            if conn.is_closed:
                conn.timeout = self.connect_timeout_s
                conn.connect()
            yield
        except BaseException:
            conn.close()
            raise
        finally:
            pool._put_conn(conn)

    def close(self) -> None:
        """Close every pooled connection."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


#: The reasons inside urllib3's connection errors: the OS's (two spellings), a reply cut off, a read timeout,
#: a server that closed the connection.
OS_REASON = re.compile(r"\[Errno (-?\d+)\] ([^'\")]*)|\w+Error\((-?\d+), '([^']*)'\)")
OTHER_REASON = re.compile(
    r"Connection broken: IncompleteRead\([^)]*\)|Read timed out\.?|Remote end closed connection without response"
)


def connection_cause(error: Exception) -> str:
    """The reason inside a urllib3 connection error (``[Errno 111] Connection refused``, ``Connection broken:
    IncompleteRead(10 bytes read, 10 more expected)``, ``Remote end closed connection without response``),
    else the error's start."""
    text = str(error)
    os_reason = OS_REASON.search(text)
    if os_reason:
        number, reason = os_reason.group(1) or os_reason.group(3), os_reason.group(2) or os_reason.group(4)
        return f"[Errno {number}] {reason.strip()}"
    found = OTHER_REASON.search(text)
    return found.group(0) if found else text[:200]


def server_message(text: str) -> str:
    """The error message in an error body (OpenAI's ``error.message``, FastAPI's ``detail``, a bare
    ``message``), else the body's start."""
    try:
        body = json.loads(text)
        error = body.get("error") or body.get("detail") or body.get("message")
    except (ValueError, AttributeError):
        return text[:500]
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)[:500] if message else text[:500]


#: What to do about a server that answers with errors, by HTTP status (500: any other).
ERROR_ADVICE = {
    429: "it limits the rate of requests: wait, or send fewer at a time (a lower max_concurrency)",
    500: "the server fails on its side: look at its log, or try again later",
}

#: How servers say a request does not fit the model's context: OpenAI and DeepSeek, llama-cpp-python and
#: vLLM ("maximum context length is 2048 tokens"), vLLM's V1 engine ("longer than the maximum model length"),
#: llama.cpp's llama-server ("exceeds the available context size", exceed_context_size_error).
CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|maximum model length|context size|context window|context_length_exceeded", re.I
)
#: llama-cpp-python's HTTP 500 when the prompt fits but the prompt and the answer's tokens do not (with logits
#: kept for log-probabilities): "could not broadcast input array from shape (49152,) into shape (0,)".
BROADCAST_OVERFLOW = re.compile(r"could not broadcast input array from shape")
CONTEXT_TOKENS = re.compile(
    r"maximum context length is (\d+)|maximum model length of (\d+)|context size \((\d+) tokens\)"
    r'|context window of (\d+)|"n_ctx":\s*(\d+)'
)
PROMPT_TOKENS = re.compile(
    r"(\d+) in the messages|(\d+) in your prompt|resulted in (\d+) tokens|has (\d+) input tokens"
    r'|prompt \(length (\d+)\)|request \((\d+) tokens\)|"n_prompt_tokens":\s*(\d+)'
)


def context_overflow(text: str) -> tuple[int | None, int | None] | None:
    """(prompt tokens, context tokens) from a refusal saying the request does not fit the model's context
    (each None where the server does not say it), or None for any other refusal."""
    if not CONTEXT_OVERFLOW.search(text):
        return None
    return first_number(PROMPT_TOKENS, text), first_number(CONTEXT_TOKENS, text)


def first_number(pattern: re.Pattern, text: str) -> int | None:
    found = pattern.search(text)
    return int(next(group for group in found.groups() if group)) if found else None


class Gate:
    """At most ``limit`` requests in flight (no limit when ``ceiling`` is None). A timeout of a request sent
    in the current round halves the limit (down to 1) and doubles ``timeout_s`` (up to MAX_TIMEOUT_FACTOR
    times the setting) and starts a new round; ``limit`` answers in a row raise the limit by one, up to
    ``ceiling``."""

    def __init__(self, ceiling: int | None, timeout_s: float, server: str):
        self.ceiling = ceiling
        self.limit = ceiling
        self.base_timeout_s = self.timeout_s = timeout_s
        self.server = server
        self.in_flight = 0
        self.round = 0
        self._streak = 0
        self._cond = threading.Condition()

    def enter(self, stopped: threading.Event) -> int:
        """Wait for a free slot (``Interrupted`` once ``stopped`` is set); the round it is taken in."""
        with self._cond:
            while self.limit is not None and self.in_flight >= self.limit:
                if stopped.is_set():
                    raise Interrupted("stopped")
                self._cond.wait(0.5)
            if stopped.is_set():
                raise Interrupted("stopped")
            self.in_flight += 1
            return self.round

    def leave(self, round_: int, timed_out: bool = False) -> None:
        with self._cond:
            self.in_flight -= 1
            if timed_out and round_ == self.round:
                self.round += 1
                self._streak = 0
                self.timeout_s = min(self.timeout_s * 2, self.base_timeout_s * MAX_TIMEOUT_FACTOR)
                if self.limit is not None:
                    self.limit = max(1, self.limit // 2)
                log.warning(
                    "the server at %s did not answer within its timeout: now %s, timeout %g s",
                    self.server,
                    "unlimited requests at a time"
                    if self.limit is None
                    else f"at most {self.limit} request(s) at a time",
                    self.timeout_s,
                )
            elif not timed_out and self.limit is not None and self.limit < self.ceiling:
                self._streak += 1
                if self._streak >= self.limit:
                    self.limit += 1
                    self._streak = 0
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
