"""An inference server that esgexp starts before a job and stops after it (``backend=openai`` with a
``backend/server=llama_cpp|vllm|vllm_dp|sglang`` node): vLLM with data or tensor parallelism, SGLang or
llama.cpp, each behind the OpenAI-compatible client esgexp already has.

In: the ``server`` node (``command`` and ``extra_args``, lists whose items may hold ``{python}``, ``{host}``, ``{port}``,
``{served}`` (the model name the client asks for), ``{model_path}`` (``model.path`` or ``model.hub_id``) and
``{model_gguf}`` (the model's packaged GGUF file); ``host``; ``port``, null for a free one;
``health_path``; ``startup_timeout_s``; ``env``) and the folder its log goes to. Out: a running process and
its ``base_url`` (and ``server.json``, its command, pid and the model ids it answered, beside its log). The server
is known by its own process: a port another program holds is refused before it starts, and a health answer
counts only when a process of the server's own session listens on the port (``ports.py``), so a job never runs
on someone else's server. It is stopped by ``stop()`` (the
backend's ``close``; with ``shared: true``, when the next job of the sweep needs another server), at
interpreter exit (Ctrl-C, SIGTERM, an error, the end of a sweep) and, on Linux, when the esgexp process
dies (kill -9): no server outlives its job, or with ``shared``, its sweep.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from esgexp.backends import ports
from esgexp.errors import UserError

RUNNING: list[ManagedServer] = []
#: What installs a server command that is not there, by its program's name.
INSTALL_HINTS = {
    "vllm": " (vLLM is not installed: pip install -e '.[vllm]' on a machine with an NVIDIA GPU; "
    "without one, backend/server=llama_cpp serves a GGUF model on the CPU)",
}
#: The server a job left running for the next jobs of its sweep (``backend.server.shared``), by what it serves.
KEPT: dict[str, ManagedServer] = {}
LOG_TAIL = 15


class ManagedServer:
    """One server process: ``start()`` waits until ``health_path`` answers 200, ``stop()`` ends it."""

    def __init__(self, command: list[str], host: str, port: int, health_path: str, timeout_s: float, log_path: Path):
        self.command, self.host, self.port = command, host, port
        self.health_url = f"http://{host}:{port}{health_path}"
        self.timeout_s, self.log_path = timeout_s, log_path
        self.base_url = f"http://{host}:{port}/v1"
        self.process: subprocess.Popen | None = None
        self.model_ids: list[str] = []  # what the server says it serves (GET /v1/models), once it answers

    def start(self, env: dict[str, str]) -> ManagedServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:  # a file, not a pipe nobody reads: a full pipe blocks the server
            try:
                self.process = subprocess.Popen(
                    self.command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                    start_new_session=True,  # its own process group: stopped whole, spared our Ctrl-C
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                )
            except OSError as error:
                raise UserError(
                    f"backend.server.command {self.command[0]!r} cannot be started: {error.strerror}"
                    f"{INSTALL_HINTS.get(Path(self.command[0]).name, '')}"
                ) from error
        RUNNING.append(self)
        self.record(self.log_path.parent / "server.json")
        deadline = time.monotonic() + self.timeout_s
        while not self.healthy():
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                if ports.listeners(self.port):  # it could not listen: another program holds the port
                    raise UserError(port_taken(self.port, f"the server esgexp started exited (status {code})"))
                raise UserError(f"the server exited (status {code}) before it answered{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise UserError(
                    f"the server did not answer {self.health_url} within backend.server.startup_timeout_s="
                    f"{self.timeout_s:g}{self.log_tail()}"
                )
            time.sleep(0.25)
        if ports.held_by_session(self.port, self.process.pid) is False:  # someone else's server answered
            self.stop()
            raise UserError(port_taken(self.port, "the server esgexp started could not listen there"))
        self.model_ids = self.served_models()
        self.record(self.log_path.parent / "server.json")
        return self

    def served_models(self) -> list[str]:
        """The model ids the server lists at ``/v1/models`` (none where it does not answer that)."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
                return [str(model.get("id")) for model in json.load(response).get("data") or []]
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return []

    def record(self, path: Path) -> None:
        """Its command, pid, base URL and log, as JSON at ``path`` (every run folder it serves has one)."""
        record = {
            "command": self.command,
            "pid": self.process.pid,
            "base_url": self.base_url,
            "model_ids": self.model_ids,
            "log": str(self.log_path),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, grace_s: float = 10.0) -> None:
        """End the server's process group: SIGTERM, then SIGKILL after ``grace_s``."""
        if self in RUNNING:
            RUNNING.remove(self)
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL:]
        except OSError:
            return ""
        shown = " | ".join(line.strip() for line in lines if line.strip()) or "(nothing)"
        return f"; its log ({self.log_path}) ends: {shown}"


def start_server(node, model_cfg, served: str, log_dir: str | Path) -> ManagedServer:
    """The server the ``server`` node describes, started for ``model_cfg`` and answering. ``shared``: the
    server an earlier job of this process (a sweep) left for it is used when it serves the same command and
    still answers; a server for something else is stopped first (it holds the GPUs)."""
    host = str(node.get("host") or "127.0.0.1")
    if node.get("port"):
        check_port_free(host, int(node["port"]))
    values = {"python": sys.executable, "host": host, "served": served, **model_files(model_cfg)}
    parts = [*node["command"], *(node.get("extra_args") or [])]
    env_node = {str(k): str(v) for k, v in (node.get("env") or {}).items()}
    key = json.dumps([parts, env_node, values, node.get("port")], sort_keys=True)
    shared = bool(node.get("shared"))
    if shared:
        kept = KEPT.get(key)
        if kept is not None and kept.process.poll() is None and kept.healthy():
            kept.record(Path(log_dir) / "server.json")
            return kept
        stop_kept()
    values["port"] = str(int(node.get("port") or free_port(host)))
    command = [fill(str(part), values) for part in parts]
    env = {name: fill(value, values) for name, value in env_node.items()}
    server = ManagedServer(
        command,
        host,
        int(values["port"]),
        str(node.get("health_path") or "/v1/models"),
        float(node["startup_timeout_s"]),
        Path(log_dir) / "server.log",
    ).start(env)
    if shared:
        KEPT[key] = server
    return server


def stop_kept() -> None:
    """Stop the server kept for a sweep's next job, if any."""
    for key in list(KEPT):
        KEPT.pop(key).stop()


#: What gives a placeholder of a server's command its value, for a model that has none.
PLACEHOLDER_SOURCES = {
    "model_path": "model.path=DIR (a model folder) or model.hub_id=ORG/NAME: this model has neither",
    "model_gguf": "a model with a packaged GGUF file (model.gguf, e.g. model=smollm2-135m): this model has none",
}


def fill(text: str, values: dict[str, str]) -> str:
    """``text`` with its ``{name}`` placeholders filled; a placeholder with no value is a UserError saying
    which model setting gives it."""
    try:
        return text.format(**values)
    except KeyError as error:
        name = error.args[0]
        source = PLACEHOLDER_SOURCES.get(name)
        if source:
            raise UserError(f"backend.server.command needs {{{name}}}: give {source}") from None
        raise UserError(
            f"backend.server.command: no value for {{{name}}} (the placeholders: {', '.join(sorted(values))})"
        ) from None


def model_files(model_cfg) -> dict[str, str]:
    """``model_path`` (a folder or a hub id) and ``model_gguf`` (a packaged GGUF file) where the model has them."""
    from esgexp.models.loading import find_package_file

    found = {}
    if model_cfg.get("path") or model_cfg.get("hub_id"):
        found["model_path"] = str(model_cfg.get("path") or model_cfg.hub_id)
    if model_cfg.get("gguf"):
        found["model_gguf"] = str(find_package_file(model_cfg.gguf.package, model_cfg.gguf.file))
    return found


def port_taken(port: int, consequence: str) -> str:
    """The one line for a ``backend.server.port`` that another program holds, naming who."""
    return (
        f"backend.server.port={port} is taken by {ports.describe(port)}: {consequence}; stop that program, "
        "choose another backend.server.port, or leave it unset (null) for a free one"
    )


def check_port_free(host: str, port: int) -> None:
    """A UserError naming who holds ``host:port`` when a server could not listen there."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: a closed port's TIME_WAIT is free
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UserError(port_taken(port, "a server esgexp starts cannot listen there")) from None
            raise UserError(f"backend.server.port={port} on {host} cannot be used: {error.strerror}") from None


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process: SIGTERM when the esgexp process ends, however it ends (Linux prctl)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@atexit.register
def stop_all() -> None:
    """Every server still running when the interpreter exits (Ctrl-C, SIGTERM, an error) is stopped."""
    for server in list(RUNNING):
        server.stop()
