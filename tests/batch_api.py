"""A stand-in for OpenAI's Files and Batches API on 127.0.0.1, with the answers of a real server behind it.

``FakeBatchAPI(upstream)`` implements, as OpenAI documents them:

* ``POST /v1/files`` (multipart: ``purpose=batch`` and ``file``, a JSONL batch input file; each line is checked:
  ``custom_id`` unique, ``method`` POST, ``url`` the batch's endpoint, a ``body``), ``GET /v1/files/ID/content``;
* ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window`` 24h), ``GET /v1/batches/ID``,
  ``POST /v1/batches/ID/cancel``.

A batch moves one status per look (``GET``): ``validating -> in_progress -> finalizing -> completed``. On
entering ``finalizing`` every line is answered by POSTing its body to ``upstream`` (any OpenAI-compatible server:
``FakeOpenAI`` or llama.cpp's), and the output file (status 200 lines) and error file are made. Faults:

* ``fail``: texts; a line whose body holds one goes to the error file as a 500;
* ``end="expired"``: the batch ends ``expired`` with only the first half of its lines answered, the rest in the
  error file with code ``batch_expired``; ``end="cancelled"``: the same through ``cancelling``; ``end="failed"``:
  the batch fails validation (``errors``, no files);
* ``hold()`` / ``release()``: while held a batch stays ``in_progress`` (a long batch, to interrupt a run in).

Any other POST (``/v1/chat/completions``...) is the provider's live API: forwarded to ``upstream`` and counted
(``live``). ``uploads``, ``created`` (batch ids), ``looks`` and ``downloads`` count what clients did. Standard library only.
"""

from __future__ import annotations

import email.parser
import email.policy
import http.client
import http.server
import json
import threading
import urllib.parse

STEPS = ("validating", "in_progress", "finalizing", "completed")


class FakeBatchAPI:
    def __init__(self, upstream: str, *, fail: tuple[str, ...] = (), end: str = "completed"):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.fail = tuple(fail)
        self.end = end
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.uploads = 0
        self.created: list[str] = []
        self.looks = 0
        self.downloads = 0
        self.statuses: list[str] = []  # every status a look returned, in order
        self.live = 0  # requests to the live API (any other POST: forwarded to ``upstream``)
        self._held = threading.Event()
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def hold(self) -> None:
        self._held.set()

    def release(self) -> None:
        self._held.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeBatchAPI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the endpoints ---------------------------------------------------------------------------

    def upload(self, content_type: str, body: bytes) -> tuple[int, dict]:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        if "file" not in parts or parts.get("purpose") is None or parts["purpose"].get_content() != "batch":
            return 400, error("a batch file needs the fields purpose=batch and file", "invalid_request_error")
        content = parts["file"].get_payload(decode=True)
        seen = set()
        for number, line in enumerate(content.decode().splitlines(), 1):
            entry = json.loads(line)
            if entry["custom_id"] in seen or entry["method"] != "POST" or "body" not in entry:
                return 400, error(f"line {number} of the batch file is invalid", "invalid_request_error")
            seen.add(entry["custom_id"])
        with self._lock:
            self.uploads += 1
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = content
        filename = parts["file"].get_filename()
        return 200, {"id": file_id, "object": "file", "bytes": len(content), "purpose": "batch", "filename": filename}

    def create(self, body: dict) -> tuple[int, dict]:
        if body.get("input_file_id") not in self.files:
            return 404, error(f"no file {body.get('input_file_id')}", "invalid_request_error")
        if body.get("completion_window") != "24h" or body.get("endpoint") not in (
            "/v1/chat/completions",
            "/v1/completions",
        ):
            return 400, error(
                "completion_window must be 24h and endpoint a completions endpoint", "invalid_request_error"
            )
        with self._lock:
            batch_id = f"batch_{len(self.created) + 1}"
            lines = self.files[body["input_file_id"]].decode().splitlines()
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body["endpoint"],
                "input_file_id": body["input_file_id"],
                "completion_window": "24h",
                "status": "validating",
                "output_file_id": None,
                "error_file_id": None,
                "errors": None,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                "metadata": body.get("metadata"),
            }
            self.created.append(batch_id)
        return 200, self.batches[batch_id]

    def look(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches.get(batch_id)
        if batch is None:
            return 404, error(f"no batch {batch_id}", "invalid_request_error")
        with self._lock:
            self.looks += 1
            held = batch["status"] == "in_progress" and self._held.is_set()
            if batch["status"] == "validating" and self.end == "failed":
                batch["status"] = "failed"
                batch["errors"] = {"data": [{"code": "invalid_request", "message": "the fake refuses this batch"}]}
            elif batch["status"] in STEPS[:-1] and not held:
                batch["status"] = STEPS[STEPS.index(batch["status"]) + 1]
                if batch["status"] == "finalizing":
                    self.answer(batch)
                    if self.end in ("expired", "cancelled"):
                        batch["status"] = "cancelling" if self.end == "cancelled" else "expired"
            elif batch["status"] == "cancelling":
                batch["status"] = "cancelled"
            self.statuses.append(batch["status"])
        return 200, batch

    def cancel(self, batch_id: str) -> tuple[int, dict]:
        with self._lock:
            batch = self.batches[batch_id]
            batch["status"] = "cancelling"
        return 200, batch

    def content(self, file_id: str) -> bytes | None:
        with self._lock:
            self.downloads += 1
        return self.files.get(file_id)

    # --- answering -------------------------------------------------------------------------------

    def answer(self, batch: dict) -> None:
        """Answer the batch's lines through the upstream server into an output and an error file."""
        lines = [json.loads(line) for line in self.files[batch["input_file_id"]].decode().splitlines()]
        reached = len(lines) if self.end not in ("expired", "cancelled") else len(lines) // 2
        output, errors = [], []
        for number, entry in enumerate(lines):
            out = {"id": f"batch_req_{number}", "custom_id": entry["custom_id"], "response": None, "error": None}
            if number >= reached:
                out["error"] = {"code": "batch_expired", "message": "not executed before the completion window ended"}
                errors.append(out)
                continue
            text = json.dumps(entry["body"])
            if any(marker in text for marker in self.fail):
                out["response"] = {
                    "status_code": 500,
                    "request_id": "r",
                    "body": error("upstream failed", "server_error"),
                }
                errors.append(out)
                continue
            status, body = forward(self.upstream, entry["url"], entry["body"])
            out["response"] = {"status_code": status, "request_id": f"req_{number}", "body": body}
            (output if status == 200 else errors).append(out)
        for kind, found in (("output_file_id", output), ("error_file_id", errors)):
            if found:
                file_id = f"file-{len(self.files) + 1}"
                self.files[file_id] = "".join(json.dumps(line) + "\n" for line in found).encode()
                batch[kind] = file_id
        batch["request_counts"].update(completed=len(output), failed=len(errors))


def forward(upstream: urllib.parse.SplitResult, url: str, body: dict) -> tuple[int, dict]:
    """POST ``body`` to the ``upstream`` server at a batch line's ``url`` (``/v1/...``, under its base path)."""
    path = upstream.path.rstrip("/") + url.removeprefix("/v1")
    connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=300)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def error(message: str, kind: str) -> dict:
    return {"error": {"message": message, "type": kind, "code": None}}


def run_batch_file(input_file, output_file, upstream: str) -> None:
    """What ``vllm run-batch -i INPUT -o OUTPUT`` does, against ``upstream`` (an OpenAI-compatible server): every
    line answered, the output written in the batch output format."""
    server = urllib.parse.urlsplit(upstream)
    lines = [json.loads(line) for line in open(input_file, encoding="utf-8")]
    with open(output_file, "w", encoding="utf-8") as out:
        for number, entry in enumerate(lines):
            status, body = forward(server, entry["url"], entry["body"])
            response = {"status_code": status, "request_id": f"vllm-batch-{number}", "body": body}
            out.write(
                json.dumps(
                    {"id": f"vllm-{number}", "custom_id": entry["custom_id"], "response": response, "error": None}
                )
                + "\n"
            )


def _handler(api: FakeBatchAPI):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # quiet
            pass

        def reply(self, status: int, payload) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header(
                "Content-Type", "application/octet-stream" if isinstance(payload, bytes) else "application/json"
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            parts = self.path.strip("/").split("/")
            if parts[:2] == ["v1", "batches"] and len(parts) == 3:
                return self.reply(*api.look(parts[2]))
            if parts[:2] == ["v1", "files"] and len(parts) == 4 and parts[3] == "content":
                content = api.content(parts[2])
                return self.reply(200, content) if content is not None else self.reply(404, error("no file", "x"))
            self.reply(404, error(f"unknown path {self.path}", "invalid_request_error"))

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = self.path.strip("/").split("/")
            if parts == ["v1", "files"]:
                return self.reply(*api.upload(self.headers["Content-Type"], body))
            if parts == ["v1", "batches"]:
                return self.reply(*api.create(json.loads(body)))
            if parts[:2] == ["v1", "batches"] and parts[3:] == ["cancel"]:
                return self.reply(*api.cancel(parts[2]))
            with api._lock:
                api.live += 1
            self.reply(
                *forward(api.upstream, self.path, json.loads(body))
            )  # the live API, as a provider serves it beside batches

    return Handler
