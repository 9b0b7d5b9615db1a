"""A real HTTP server on 127.0.0.1 (stdlib ``http.server`` in a thread) that serves the shared samples under
the registry's URL layout: ``/<owner>/<repo>/<commit>/<path>`` as raw.githubusercontent.com does,
``/media/<owner>/<repo>/<commit>/<path>`` as GitHub's LFS media host does, ``/datasets/<id>/resolve/<revision>/
<path>`` as the Hugging Face hub does (a HEAD request gets the commit, etag and size huggingface_hub asks for).
Only the host differs from the real sources, so a test points ``data.hosts.*`` at it. It honours ``Range`` requests, keeps
each request's path and Range header, and can cut the first response to a path short (``cut``: path -> bytes
sent before the connection drops)."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


class DataServer:
    def __init__(self, files: dict[str, Path]):
        self.files = dict(files)  # URL path (unquoted) -> file served
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.cut: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):  # what huggingface_hub asks first: the file's commit, etag and size
                source = server.files.get(unquote(self.path))
                if source is None:
                    self.send_error(404)
                    return
                data = Path(source).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", "0" * 40)
                self.end_headers()

            def do_GET(self):
                path = unquote(self.path)
                server.requests.append((path, self.headers.get("Range")))
                source = server.files.get(path)
                if source is None:
                    self.send_error(404)
                    return
                data = Path(source).read_bytes()
                start = 0
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes="):
                    start = int(ranged.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                stop = server.cut.pop(path, None)
                self.wfile.write(data[start:stop] if stop is not None else data[start:])
                if stop is not None:
                    self.wfile.flush()
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> DataServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def hosts(self) -> list[str]:
        """The overrides that point the registry's GitHub hosts at this server."""
        return [f"data.hosts.github={self.url}", f"data.hosts.github_lfs={self.url}/media"]
