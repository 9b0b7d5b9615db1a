"""Run a command as a user does, ``python -m MODULE ARGS...``: the one helper the command-line tests share.

Each command is a process of its own, forked from a server that has already imported torch, transformers,
lightning and mlflow (``tests/forkserver.py``): a job then starts in a fraction of a second instead of paying
5-8 CPU-seconds of imports. A run of pytest-xdist processes shares one server, started by the controlling
process before them (tests/conftest.py); a single test process starts its own on first use. A command runs
as a plain subprocess instead when its environment changes a variable that a library reads when it is
imported (``IMPORT_TIME``), or when the server cannot start. ``run_cli`` runs a command to its end;
``start_cli`` hands it back running, as ``subprocess.Popen`` does, for the tests about the process boundary
(signals, kill -9, jobs side by side).

(Running commands inside the test process, which was tried first, left pytest's captured output closed on
an xdist worker after some full commands; a forked child cannot touch the test process's files.)
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
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


def start_cli(module: str, *args: str, cwd: Path | str | None = None, env: dict | None = None):
    """``python -m module *args`` in ``cwd`` with ``env`` (default: this process's), started and handed back
    as ``subprocess.Popen`` would (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``communicate``,
    the output as text)."""
    env = dict(os.environ if env is None else env)
    cwd = str(cwd or os.getcwd())
    server = _server(env)
    if server is not None:
        return ForkedCommand(server, module, list(args), cwd, env)
    command = [sys.executable, "-m", module, *args]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_cli(
    module: str, *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -m module *args`` run to its end: returncode, stdout and stderr as text. Past ``timeout``
    seconds it is killed, with what it started (``subprocess.TimeoutExpired``)."""
    process = start_cli(module, *args, cwd=cwd, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if isinstance(process, ForkedCommand):
            process.kill_group()
        else:
            process.kill()
        stdout, stderr = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout, stdout, stderr) from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def import_time_variables(env: dict) -> dict:
    """The variables of ``env`` a forked child cannot take on (``PYTHONPATH`` it can: tests/forkserver.py)."""
    return {name: value for name, value in env.items() if name.startswith(IMPORT_TIME) and name != "PYTHONPATH"}


# The socket of the run's shared fork server, for the test processes it was started before.
SHARED_SERVER = "ESGEXP_TEST_FORK_SERVER"


def start_server(folder: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """``tests/forkserver.py`` started with ``env``, to listen at a socket in ``folder``: the process (closing
    its stdin ends it once its children have) and the socket's path, which appears once it accepts."""
    path = str(folder / "forkserver.sock")
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("forkserver.py")), path],
        stdin=subprocess.PIPE,
        env=env,
        cwd=Path(__file__).parent,
    )
    return process, path


def stop_server(process: subprocess.Popen) -> None:
    """End a server from ``start_server``, once its children have ended (killed after 30 s)."""
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


class ForkServer:
    """A connection to a running ``tests/forkserver.py`` (``.pid``: the server's, ``.path``: its socket);
    commands from any thread, side by side. ``process``: the server, when this process started it (a start
    that failed is then told at once; otherwise by ``SOCKET.error``, or after ``timeout`` seconds)."""

    def __init__(self, path: str, process: subprocess.Popen | None = None, timeout: float = 120):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            error = Path(f"{path}.error")
            if error.is_file():
                raise RuntimeError(f"the fork server did not start: {error.read_text()}")
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"the fork server ended with exit status {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not listen at {path} within {timeout} s")
            time.sleep(0.05)
        self.path = path
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._connection.connect(path)
        self._answers = self._connection.makefile("r", encoding="utf-8")
        first = json.loads(self._answers.readline() or '{"error": "it closed the connection"}')
        if "ready" not in first:
            self.close()
            raise RuntimeError(f"the fork server did not start: {first}")
        self.pid, self.env_key = first["pid"], first["env"]
        self._sending = threading.Lock()
        self._started: queue.Queue = queue.Queue()
        self._ended = threading.Condition()
        self._exits: dict[int, int] = {}
        self._gone = False
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        for line in self._answers:
            answer = json.loads(line)
            if "exit" in answer:
                with self._ended:
                    self._exits[answer["exit"]] = answer["returncode"]
                    self._ended.notify_all()
            else:
                self._started.put(answer["pid"])
        self._started.put(None)
        with self._ended:
            self._gone = True
            self._ended.notify_all()

    def start(self, request: dict) -> int:
        """Fork a child for ``request`` (see tests/forkserver.py); its pid."""
        with self._sending:
            self._connection.sendall((json.dumps(request) + "\n").encode())
            pid = self._started.get(timeout=60)
        if pid is None:
            raise RuntimeError("the fork server closed the connection")
        return pid

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of child ``pid`` once it ends, or None after ``timeout`` seconds."""
        with self._ended:
            self._ended.wait_for(lambda: pid in self._exits or self._gone, timeout)
            return self._exits.get(pid)

    def close(self) -> None:
        self._connection.close()


class ForkedCommand:
    """A command forked from a ``ForkServer``, used as a ``subprocess.Popen`` with text output."""

    def __init__(self, server: ForkServer, module: str, args: list[str], cwd: str, env: dict):
        self._server = server
        self._streams = tempfile.TemporaryDirectory(prefix="cli-")
        self._out, self._err = Path(self._streams.name, "stdout"), Path(self._streams.name, "stderr")
        self.args = [sys.executable, "-m", module, *args]
        request = {"module": module, "args": args, "cwd": cwd, "env": env}
        self.pid = server.start({**request, "stdout": str(self._out), "stderr": str(self._err)})
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def kill_group(self) -> None:
        """SIGKILL to the command and everything it started (its own process group)."""
        if self.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; its standard output and error."""
        self.wait(timeout)
        stdout, stderr = self._out.read_text(errors="replace"), self._err.read_text(errors="replace")
        self._streams.cleanup()
        return stdout, stderr


_started: list[ForkServer | None] = []  # this process's connection, once asked for (None: no server)


def _server(env: dict) -> ForkServer | None:
    """The fork server, if ``env`` agrees with it on every import-time variable (else None: run a plain
    subprocess): the run's shared one, or one this process starts on first use with its environment."""
    if not _started:
        try:
            if os.environ.get(SHARED_SERVER):
                _started.append(ForkServer(os.environ[SHARED_SERVER]))
            else:
                folder = Path(tempfile.mkdtemp(prefix="forkserver-"))
                process, path = start_server(folder, dict(os.environ))
                atexit.register(shutil.rmtree, folder, True)  # after the server has stopped (last in, first run)
                atexit.register(stop_server, process)
                _started.append(ForkServer(path, process))
        except (OSError, RuntimeError) as why:
            print(f"tests/cli.py: commands run as plain subprocesses: {why}", file=sys.stderr)
            _started.append(None)
    server = _started[0]
    return server if server is not None and server.env_key == import_time_variables(env) else None
