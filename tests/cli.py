"""Run a command as a user does, ``python -m MODULE ARGS...``: the one helper the command-line tests share.

Each command is a process of its own, forked from a server that has already imported torch, transformers,
lightning and mlflow (``tests/forkserver.py``, one per test process): a job then starts in a fraction of a
second instead of paying 5-8 CPU-seconds of imports. A command runs as a plain subprocess instead when its
environment changes a variable that a library reads when it is imported (``IMPORT_TIME``), when the
server cannot start, or while it is busy with another thread's command. Tests about the process boundary
itself (signals, kill -9, parallel jobs) call ``subprocess`` directly.

(Running commands inside the test process, which was tried first, left pytest's captured output closed on
an xdist worker after some full commands; a forked child cannot touch the test process's files.)
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Prefixes of environment variables read at import time (hub and cache folders, thread pools, the
# interpreter's own): a command whose environment differs from the server's in one of them gets a
# fresh interpreter.
IMPORT_TIME = (
    "HF_",
    "HUGGINGFACE_",
    "TRANSFORMERS_",
    "TORCH",
    "OMP_",
    "MKL_",
    "PYTHON",
    "CUDA",
    "XDG_",
    "HOME",
    "TMPDIR",
)


def run_cli(
    module: str, *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -m module *args`` in ``cwd`` with ``env`` (default: this process's): returncode, stdout and
    stderr as text."""
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    server = _server(env)
    if server is not None and server.lock.acquire(blocking=False):
        try:
            return server.run(module, list(args), cwd, env, timeout)
        finally:
            server.lock.release()
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def import_time_variables(env: dict) -> dict:
    return {name: value for name, value in env.items() if name.startswith(IMPORT_TIME)}


class ForkServer:
    """A running ``tests/forkserver.py`` started with ``env``."""

    def __init__(self, env: dict):
        self.env_key = import_time_variables(env)
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=Path(__file__).parent,
            text=True,
        )
        first = self._answer()
        if "ready" not in first:
            self.close()
            raise RuntimeError(f"the fork server did not start: {first}")

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (exit status {self.process.wait()})")
        return json.loads(line)

    def run(self, module: str, args: list[str], cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="cli-") as streams:
            out, err = Path(streams, "stdout"), Path(streams, "stderr")
            request = {"module": module, "args": args, "cwd": cwd, "env": env, "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            pid = self._answer()["pid"]
            killed = threading.Event()
            timer = threading.Timer(timeout, _kill_group, (pid, killed))
            timer.start()
            try:
                returncode = self._answer()["returncode"]
            finally:
                timer.cancel()
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        command = [sys.executable, "-m", module, *args]
        if killed.is_set():
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _kill_group(pid: int, killed: threading.Event) -> None:
    """The timeout: the command and everything it started, as ``subprocess.run`` kills its child."""
    killed.set()
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended just now
        pass


_started: list[ForkServer | None] = []  # this process's one server, once asked for (None: it could not start)


def _server(env: dict) -> ForkServer | None:
    """This process's fork server, if ``env`` agrees with it on every import-time variable (else None: run
    a plain subprocess). It starts on first use, with this process's environment."""
    if not _started:
        try:
            _started.append(ForkServer(dict(os.environ)))
            atexit.register(_started[0].close)
        except (OSError, RuntimeError) as why:
            print(f"tests/cli.py: commands run as plain subprocesses: {why}", file=sys.stderr)
            _started.append(None)
    server = _started[0]
    return server if server is not None and server.env_key == import_time_variables(env) else None
