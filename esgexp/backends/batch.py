"""Batch mode of ``backend=openai``: a job's requests as one batch file, answered by OpenAI's Batch API
(``backend.batch=true``: half the price, within ``batch_window``) or by ``vllm run-batch`` on a GPU node
(``backend.batch_output=FILE``: its output file is read back, nothing is sent).

The batch file is OpenAI's batch input format, one request a line: ``{"custom_id", "method": "POST",
"url": "/v1/chat/completions", "body"}``, where ``body`` is exactly what the live path sends. A
``custom_id`` is the item id and the start of the request's cache key (``<item id>.<12 hex>``): an answer
is only ever taken for the request it was asked for, so a changed prompt or model is asked anew.

With the Batch API: the file is written into the run folder (``batch/<n>.input.jsonl``), uploaded
(``POST /files``, purpose ``batch``), the batch created (``POST /batches``), then polled (``GET /batches/ID``)
every ``batch_poll_s`` with a progress line until it ends; its output and error files are downloaded
(``GET /files/ID/content``) and every answer handed over by ``custom_id``, through the request cache, as
answers of the live path are. The ids are saved the moment they exist, in the run folder
(``batch/<batch id>.json``) and in the batch registry (``<cache_dir>/batches/<server>-<batch id>.json``): a later run of
the same requests (``resume=true``, or the same command after Ctrl-C, kill -9 or a closed laptop) finds an
unfinished batch there and waits for it, or downloads a finished one again, and never submits it twice.

With ``batch_wait=false`` the job submits, looks once and ends: the items of a batch still running are
failed as ``pending in batch ID`` (never asked live), and ``resume=true`` collects them later.

An item a batch failed (an error line, a status other than 200) or never reached (``expired``,
``cancelled``, ``failed``) is asked on the live API at once (``batch_failed=live``) or left failed for
``resume=true`` (``batch_failed=resume``). An answer's token counts come back as ``batch_prompt_tokens``,
``batch_completion_tokens``...: a run's ``usage/cost`` prices them at the model's batch price.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from esgexp.backends.base import OnResults, Request, Response
from esgexp.backends.cache import cache_key
from esgexp.backends.openai_client import OpenAIClient, RequestFailed, RetryableError
from esgexp.core.outputs import json_lines, write_atomic
from esgexp.errors import UserError

log = logging.getLogger(__name__)
# How the error of an item whose batch still runs at the provider starts (batch_wait=false): not a failure of the run.
PENDING = "pending in batch "

#: OpenAI's limits on one batch input file: requests and bytes (a larger job is split into several batches).
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 2**20
#: A batch in one of these states will change no more (``missing``: ours, for one the server no longer knows).
MISSING = "missing"
ENDED = ("completed", "failed", "expired", "cancelled", MISSING)
FAILED_CHOICES = ("live", "resume")


@dataclass
class BatchSettings:
    """The batch keys of the ``backend`` node."""

    enabled: bool = False
    window: str = "24h"
    poll_s: float = 30.0
    failed: str = "live"
    output: str | None = None
    max_requests: int = MAX_REQUESTS
    wait: bool = True  # false: submit, look once, and leave a batch still running for resume=true


@dataclass
class BatchRecord:
    """One submitted batch as the run folder and the registry keep it."""

    batch_id: str
    input_file_id: str
    base_url: str
    endpoint: str
    input_file: str
    custom_ids: list[str]
    status: str = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    answered: list[str] = field(default_factory=list)  # custom ids answered with status 200 (once ended)
    created: float = field(default_factory=time.time)

    def save(self, *paths: Path) -> None:
        text = json.dumps(asdict(self), indent=1) + "\n"
        for path in paths:
            write_atomic(path, text)


def custom_id(request: Request, key: str) -> str:
    """The batch line's id of ``request`` whose cache key is ``key``."""
    return f"{request.id}.{key[:12]}"


def batch_line(request_id: str, path: str, body: dict) -> str:
    """One line of a batch input file (the URL as OpenAI and ``vllm run-batch`` expect it: under ``/v1``)."""
    return json.dumps({"custom_id": request_id, "method": "POST", "url": "/v1" + path, "body": body})


CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([^"]+)"')


def read_lines(text: str, where: str) -> dict[str, dict]:
    """The lines of a batch output or error file by ``custom_id``. A line that is not a batch output line (cut
    short, not JSON, no ``custom_id``) is left out with one warning naming the file and its lines; where its
    ``custom_id`` can still be read, its request gets an error line naming the file and line (it counts as
    unanswered: asked again, live or on resume)."""
    found, bad = {}, []

    def not_batch_line(number: int, line: str, error: object = None) -> None:
        bad.append((number, line))
        named = CUSTOM_ID.search(line)
        if named and named.group(1) not in found:
            message = f"{where}, line {number}: not a batch output line"
            found[named.group(1)] = {"custom_id": named.group(1), "error": {"code": "malformed", "message": message}}

    lines = text.splitlines()
    for number, entry in json_lines(lines, where, not_batch_line):
        if isinstance(entry, dict) and "custom_id" in entry:
            found[str(entry["custom_id"])] = entry
        else:
            not_batch_line(number, lines[number - 1])
    if bad:
        numbers = ", ".join(str(number) for number, _ in bad[:10]) + (", ..." if len(bad) > 10 else "")
        log.warning(
            "%s: %d line(s) are not batch output lines (line %s; e.g. %r): their requests count as unanswered",
            where,
            len(bad),
            numbers,
            bad[0][1][:120],
        )
    return found


def line_error(entry: dict) -> str | None:
    """Why a batch output line holds no answer (None: it holds one, status 200)."""
    response = entry.get("response") or {}
    if entry.get("error"):
        error = entry["error"]
        return f"{error.get('code', 'error')}: {error.get('message', '')}" if isinstance(error, dict) else str(error)
    status = response.get("status_code")
    if status == 200:
        return None
    body = response.get("body") or {}
    message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
    return f"HTTP {status}: {message or json.dumps(body)[:200]}"


class BatchRun:
    """The requests of one ``run`` call through batches (see the module's docstring).

    ``backend`` is the OpenAIBackend: its ``request_body``/``response_of`` make the lines and read the answers,
    its ``client`` talks to the server, ``identity``/``rendered`` make the cache keys."""

    def __init__(self, backend, settings: BatchSettings, run_dir: Path, registry: Path, progress: bool):
        self.backend = backend
        self.settings = settings
        self.folder = run_dir / "batch"
        self.registry = registry
        self.progress = progress
        self.client: OpenAIClient = backend.client
        self.pending: set[str] = set()  # custom ids in batches still running (batch_wait=false)
        self.seen: dict[str, bool] = {}  # batch ids looked at in this run (the first look is logged)

    def run(self, requests: Sequence[Request], on_results: OnResults) -> list[Request]:
        """Answer ``requests`` through batches, handing answers over as each batch is read; return those to
        ask live (``batch_failed=live``), else hand the unanswered over as failed. Batches an earlier run
        submitted come first: a finished one is read again (a file gone from the server: its requests are
        submitted anew), a running one is waited for."""
        identity = self.backend.identity()
        by_custom = {custom_id(r, cache_key(identity, self.backend.rendered(r), r)): r for r in requests}
        if self.settings.output:
            return self.imported(by_custom, on_results)
        handed: set[str] = set()
        records = self.earlier(by_custom)
        for record in [r for r in records if r.status in ENDED]:  # answered before: read again
            wanted = [c for c in record.answered if c in by_custom and c not in handed]
            handed |= self.collect(record, wanted, by_custom, on_results)
        running = [r for r in records if r.status not in ENDED]
        waiting = {cid for record in running for cid in record.custom_ids} & set(by_custom)
        if records:
            log.info(
                "%d request(s) are in %d batch(es) submitted before (%s): not submitted again",
                len(handed | waiting),
                len(records),
                ", ".join(r.batch_id for r in records),
            )
        todo = [cid for cid in by_custom if cid not in handed and cid not in waiting]
        running += [self.submit(chunk, by_custom) for chunk in self.chunks(todo, by_custom)]
        for record in running:
            wanted = [c for c in record.custom_ids if c in by_custom and c not in handed]
            handed |= self.collect(record, wanted, by_custom, on_results)
        return self.unanswered([cid for cid in by_custom if cid not in handed], by_custom, on_results)

    # --- finding and submitting ------------------------------------------------------------------

    def earlier(self, by_custom: dict[str, Request]) -> list[BatchRecord]:
        """The batches in the registry, on this server, that hold some of these requests."""
        if not self.registry.is_dir():
            return []
        found = []
        for path in sorted(self.registry.glob("*.json")):
            try:
                record = BatchRecord(**json.loads(path.read_text()))
            except (ValueError, TypeError) as error:
                log.warning("batch registry %s: unreadable entry %s (%s): left out", self.registry, path.name, error)
                continue
            if record.base_url == self.backend.base_url and set(self.covers(record)) & set(by_custom):
                found.append(record)
        return found

    @staticmethod
    def covers(record: BatchRecord) -> list[str]:
        """The requests a batch answers or may yet answer: all of a running one, those answered of an ended one."""
        return record.answered if record.status in ENDED else record.custom_ids

    def chunks(self, todo: list[str], by_custom: dict[str, Request]) -> list[list[tuple[str, str]]]:
        """``todo`` as batch lines, in chunks within OpenAI's limits (requests and bytes a file)."""
        chunks: list[list[tuple[str, str]]] = []
        size = 0
        for cid in todo:
            line = batch_line(cid, *self.backend.request_body(by_custom[cid]))
            length = len(line.encode()) + 1  # bytes, with its newline
            if not chunks or len(chunks[-1]) >= self.settings.max_requests or size + length > MAX_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append((cid, line))
            size += length
        return chunks

    def submit(self, lines: list[tuple[str, str]], by_custom: dict[str, Request]) -> BatchRecord:
        """Write, upload and create one batch; its ids are saved the moment each exists."""
        self.folder.mkdir(parents=True, exist_ok=True)
        number = len(list(self.folder.glob("*.input.jsonl"))) + 1
        input_file = self.folder / f"{number}.input.jsonl"
        write_atomic(input_file, "".join(line + "\n" for _, line in lines))
        endpoint = "/v1" + self.backend.request_body(by_custom[lines[0][0]])[0]
        try:
            with self.client.reporting("a batch file upload (POST /files)"):
                uploaded = self.client.upload(
                    "/files",
                    {"purpose": "batch", "file": (input_file.name, input_file.read_bytes(), "application/jsonl")},
                )
        except UserError as error:
            if "HTTP 404" not in str(error):
                raise
            raise UserError(
                f"{error}: backend.batch=true needs a server with OpenAI's Batch API (/files, /batches: OpenAI, Qwen's "
                "Model Studio); for a model you serve, run the batch file through `vllm run-batch` "
                "(backend.batch_output=FILE), or leave backend.batch=false"
            ) from None
        with self.client.reporting("a batch (POST /batches)"):
            created, _ = self.client.post(
                "/batches",
                {
                    "input_file_id": uploaded["id"],
                    "endpoint": endpoint,
                    "completion_window": self.settings.window,
                    "metadata": {"source": "esgexp", "input_file": input_file.name},
                },
            )
        record = BatchRecord(
            batch_id=created["id"],
            input_file_id=uploaded["id"],
            base_url=self.backend.base_url,
            endpoint=endpoint,
            input_file=str(input_file),
            custom_ids=[cid for cid, _ in lines],
            status=created.get("status", "validating"),
        )
        self.save(record)
        self.backend.batch_counts["n_batches_submitted"] += 1
        log.info(
            "batch %s submitted: %d requests (%s), answered within %s; its ids are in %s — after an interruption "
            "the same command with resume=true collects it",
            record.batch_id,
            len(lines),
            input_file,
            self.settings.window,
            self.folder,
        )
        return record

    def save(self, record: BatchRecord) -> None:
        """The record into the registry (named by its server and batch id: two providers may give the same id)
        and the run folder (``batch/<batch id>.json``)."""
        server = hashlib.sha256(record.base_url.encode()).hexdigest()[:8]
        record.save(self.registry / f"{server}-{record.batch_id}.json", self.folder / f"{record.batch_id}.json")

    # --- waiting and reading ---------------------------------------------------------------------

    def collect(
        self, record: BatchRecord, wanted: list[str], by_custom: dict[str, Request], on_results: OnResults
    ) -> set[str]:
        """Wait for the batch to end, hand over its answers to the ``wanted`` custom ids; return those handed."""
        if record.status not in ENDED:
            if not self.settings.wait:
                self.look(record)
            else:
                self.wait(record, len(wanted))
        if record.status not in ENDED:  # batch_wait=false: it runs on at the provider
            for cid in wanted:
                self.backend.batch_errors[cid] = (
                    f"{PENDING}{record.batch_id} ({record.status}) at {record.base_url}: resume=true collects it"
                )
            self.pending.update(wanted)
            return set()
        answers = self.read_files(record)
        record.answered = sorted(cid for cid, entry in answers.items() if line_error(entry) is None)
        self.save(record)
        responses = []
        for cid in wanted:
            entry = answers.get(cid)
            error = line_error(entry) if entry else "no answer in its output"
            if error is None:
                responses.append(self.response(by_custom[cid], entry["response"]["body"]))
            else:
                self.backend.batch_errors[cid] = f"batch {record.batch_id} ({record.status}): {error}"
        self.backend.batch_counts["n_batch_answers"] += len(responses)
        if responses:
            on_results(responses)
        return {cid for cid in wanted if cid in answers and line_error(answers[cid]) is None}

    def response(self, request: Request, body: dict) -> Response:
        """``request``'s answer from a batch line's body: as the live path reads it, its token counts as batch
        tokens (a malformed body fails the item)."""
        try:
            response = self.backend.response_of(request, body)
        except (RequestFailed, KeyError, TypeError) as error:
            return Response(id=request.id, failed=True, error=f"batch answer unreadable: {error}"[:500])
        response.usage = {f"batch_{key}": value for key, value in response.usage.items()}
        return response

    def wait(self, record: BatchRecord, n_mine: int) -> None:
        """Look at the batch every ``poll_s`` until it ends, with a progress bar. A server that does not answer
        a look is asked again at the next (the batch runs on without us)."""
        from tqdm.auto import tqdm

        bar = tqdm(total=n_mine, desc=f"batch {record.batch_id}", disable=not self.progress)
        try:
            while True:
                try:
                    counts = self.look(record)
                except RetryableError as error:
                    log.warning("batch %s: no answer to a look (%s); asking again", record.batch_id, error)
                    time.sleep(self.settings.poll_s)
                    continue
                bar.n = min(n_mine, int(counts.get("completed") or 0) + int(counts.get("failed") or 0))
                bar.refresh()
                if record.status in ENDED:
                    return
                time.sleep(self.settings.poll_s)
        except KeyboardInterrupt:
            log.warning(
                "interrupted: batch %s keeps running at %s; the same command with resume=true collects it "
                "(it is not submitted again)",
                record.batch_id,
                record.base_url,
            )
            raise
        finally:
            bar.close()

    def look(self, record: BatchRecord) -> dict:
        """One ``GET /batches/ID``: the record's status and file ids brought up to date (and saved, with a log
        line, when the status changed); its ``request_counts``."""
        try:
            state = self.client.get(f"/batches/{record.batch_id}")
        except RequestFailed as error:
            if error.status != 404:
                raise UserError(f"batch {record.batch_id} on {record.base_url}: {error}") from None
            log.warning(
                "batch %s is not on %s (%s): its requests are asked again", record.batch_id, record.base_url, error
            )
            state = {"status": MISSING}
        counts = state.get("request_counts") or {}
        status = state.get("status", record.status)
        record.output_file_id = state.get("output_file_id") or record.output_file_id
        record.error_file_id = state.get("error_file_id") or record.error_file_id
        if status != record.status or not self.seen.get(record.batch_id):
            record.status = status
            self.seen[record.batch_id] = True
            self.save(record)
            log.info(
                "batch %s: %s, %s of %s done, %s failed",
                record.batch_id,
                status,
                counts.get("completed", 0),
                counts.get("total", len(record.custom_ids)),
                counts.get("failed", 0),
            )
            if status == "failed":
                log.warning("batch %s failed: %s", record.batch_id, json.dumps(state.get("errors"))[:500])
        return counts

    def read_files(self, record: BatchRecord) -> dict[str, dict]:
        """The lines of the batch's output and error files by custom id (an answer wins over an error)."""
        found: dict[str, dict] = {}
        for file_id in (record.error_file_id, record.output_file_id):
            if not file_id:
                continue
            with self.client.reporting(f"the download of file {file_id} of batch {record.batch_id}"):
                try:
                    text = self.client.download(f"/files/{file_id}/content").decode("utf-8")
                except RequestFailed as error:
                    if error.status != 404:
                        raise
                    log.warning(
                        "file %s of batch %s is gone (%s): its requests are asked again",
                        file_id,
                        record.batch_id,
                        error,
                    )
                    continue
            found.update(read_lines(text, f"file {file_id} of batch {record.batch_id}"))
        return found

    # --- what is left ----------------------------------------------------------------------------

    def unanswered(self, left: list[str], by_custom: dict[str, Request], on_results: OnResults) -> list[Request]:
        """The requests to ask live (``batch_failed=live``); else each handed over as failed, for resume=true."""
        pending = [cid for cid in left if cid in self.pending]  # never asked live: their batch may yet answer
        left = [cid for cid in left if cid not in self.pending]
        if pending:
            log.warning(
                "%d request(s) wait in batch(es) still running at the provider (backend.batch_wait=false): "
                "resume=true collects them",
                len(pending),
            )
            on_results(
                [Response(id=by_custom[cid].id, failed=True, error=self.backend.batch_errors[cid]) for cid in pending]
            )
        if not left:
            return []
        if self.settings.failed == "live":
            log.warning("%d request(s) the batches did not answer are asked live now (batch_failed=live)", len(left))
            return [by_custom[cid] for cid in left]
        log.warning(
            "%d request(s) the batches did not answer are left for resume=true (batch_failed=resume)", len(left)
        )
        on_results(
            [
                Response(
                    id=by_custom[cid].id,
                    failed=True,
                    error=self.backend.batch_errors.get(cid, "no batch answered it")[:500],
                )
                for cid in left
            ]
        )
        return []

    def imported(self, by_custom: dict[str, Request], on_results: OnResults) -> list[Request]:
        """``batch_output``: the answers in that file (``vllm run-batch -o``); when it does not exist yet, the
        input file is written into the run folder and the job stops saying how to run it."""
        output = Path(self.settings.output).expanduser()
        input_file = self.folder / "input.jsonl"
        write_atomic(
            input_file, "".join(batch_line(c, *self.backend.request_body(r)) + "\n" for c, r in by_custom.items())
        )
        if not output.is_file():
            raise UserError(
                f"backend.batch_output={output} does not exist yet. The batch file of this job's {len(by_custom)} "
                f"request(s) is written: {input_file}. Run it on a GPU node, e.g. `vllm run-batch -i {input_file} "
                f"-o {output} --model {self.backend.served}`, then run this command again with resume=true"
            )
        answers = read_lines(output.read_text(encoding="utf-8"), str(output))
        responses, left = [], []
        for cid, request in by_custom.items():
            entry = answers.get(cid)
            error = line_error(entry) if entry else f"no line for it in {output}"
            if error is None:
                responses.append(self.response(request, entry["response"]["body"]))
            else:
                left.append(Response(id=request.id, failed=True, error=f"batch_output: {error}"[:500]))
        log.info("batch_output %s: %d answer(s) read, %d request(s) without one", output, len(responses), len(left))
        self.backend.batch_counts["n_batch_answers"] += len(responses)
        if responses:
            on_results(responses)
        if left:
            on_results(left)
        return []
