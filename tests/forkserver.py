"""A fork server for the command-line tests: imports the heavy libraries once, then forks one child per
command, and each child runs ``python -m MODULE ARGS...`` as a new interpreter would (its own process,
process group, standard streams, folder, environment and exit status), minus the 5-8 CPU-seconds of
imports. A child ends as the interpreter does but skips tearing down the imported modules, which in a
forked child only copies the shared memory (2 s a command).

``python forkserver.py SOCKET``: after its imports it listens on the Unix socket SOCKET; the path appears
only once it accepts (``SOCKET.error`` holds the reason instead when forking would not be safe). Any number
of test processes connect. On a connection the server first sends ``{"ready": true, "pid": N, "env": {...}}``
(its pid and the import-time variables it started with, tests/cli.py), then each request line
``{"module", "args", "cwd", "env", "stdout", "stderr"}`` (the last two are file paths for the child's
streams) is answered with ``{"pid": N}`` as soon as the child starts and ``{"exit": N, "returncode": R}``
when it ends (negative: killed by that signal, as ``subprocess`` reports it), on the connection that asked.
Children run side by side. End of the server's stdin ends it once its children have ended.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
from pathlib import Path

from cli import import_time_variables

# What a job imports sooner or later; a command that needs none of them gets them anyway, unused. MLflow's
# sqlite store is a module of its own (sqlalchemy, alembic: 1.2 s), imported by the first job that tracks.
PRELOAD = (
    "torch",
    "transformers",
    "lightning",
    "peft",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "hydra",
    "omegaconf",
    "datasets",
    "pypdf",
)


def preload() -> None:
    """Import PRELOAD and parse each config file once per process (tests/hydra_cache.py)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library: the child imports what it finds, as a fresh process would
            pass
    import hydra_cache

    hydra_cache.install()


def send(connection: socket.socket, message: dict) -> bool:
    """One JSON line to a test process; False when it has gone."""
    try:
        connection.sendall((json.dumps(message) + "\n").encode())
        return True
    except OSError:
        return False


def listen(path: str) -> socket.socket:
    """A socket accepting at ``path``, which appears only once it does (bound under another name, then renamed)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.binding")
    listener.listen(64)
    os.replace(f"{path}.binding", path)
    return listener


def serve(path: str) -> dict:
    """Answer the requests of every connection until stdin ends and every child has ended (then exit); in a
    forked child, return that child's request."""
    if threading.active_count() != 1:
        Path(f"{path}.error").write_text(f"{threading.active_count()} threads after the imports: forking is not safe")
        sys.exit(0)
    listener = listen(path)
    hello = {"ready": True, "pid": os.getpid(), "env": import_time_variables(dict(os.environ))}
    pending: dict[socket.socket, bytes] = {}  # each connection's unfinished line
    asked_by: dict[int, socket.socket] = {}  # each running child's connection
    open_input = True
    while open_input or asked_by:
        watched = [listener, *pending, *([0] if open_input else [])]
        readable, _, _ = select.select(watched, [], [], 0.02 if asked_by else None)
        for source in readable:
            if source == 0:
                open_input = bool(os.read(0, 1 << 16))
            elif source is listener:
                connection, _ = listener.accept()
                if send(connection, hello):
                    pending[connection] = b""
            else:
                chunk = source.recv(1 << 16)
                if not chunk:
                    del pending[source]
                    source.close()
                    continue
                *lines, pending[source] = (pending[source] + chunk).split(b"\n")
                for line in lines:
                    pid = os.fork()
                    if pid == 0:
                        for connection in (listener, *pending):
                            connection.close()
                        return json.loads(line)
                    asked_by[pid] = source
                    send(source, {"pid": pid})
        while asked_by:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = asked_by.pop(pid)
            if connection in pending:
                send(connection, {"exit": pid, "returncode": os.waitstatus_to_exitcode(status)})
    sys.exit(0)


def become(request: dict) -> None:
    """Turn this forked child into the fresh interpreter ``python -m`` would start for ``request``."""
    os.setpgid(0, 0)  # its own group: a timeout kills what it started too
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdin = open(0, closefd=False)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = os.getcwd()  # python -m puts the working folder first, not this file's folder
    # then the folders of PYTHONPATH, before the installation's own
    extra = [folder for folder in request["env"].get("PYTHONPATH", "").split(os.pathsep) if folder]
    sys.path[1:1] = [folder for folder in extra if folder not in sys.path]
    if "numpy" in sys.modules:  # fresh seeds, as a new process has (random reseeds itself after a fork)
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def run_as_main(module: str) -> int:
    """Run ``module`` as ``__main__`` and end as the interpreter does (uncaught errors printed, threads
    joined, atexit run, streams flushed); its exit status. Killed by SIGINT after an uncaught Ctrl-C."""
    interrupted = False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as done:
        status = done.code if done.code is None or isinstance(done.code, int) else 1
        if not isinstance(done.code, int) and done.code is not None:
            print(done.code, file=sys.stderr)
    except BaseException as error:
        sys.excepthook(type(error), error, error.__traceback__)
        status, interrupted = 1, isinstance(error, KeyboardInterrupt)
    threading._shutdown()  # what interpreter shutdown does first: wait for the non-daemon threads
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status or 0


def main() -> None:
    try:
        preload()
    except BaseException as error:  # told to the test processes waiting for the socket, not left to their timeout
        Path(f"{sys.argv[1]}.error").write_text(f"its imports failed: {error!r}")
        raise
    gc.freeze()  # the imported objects stay out of every collection: the children leave their pages shared
    request = serve(sys.argv[1])
    become(request)
    # The rest of a normal exit (tearing down every module) only copies the shared pages: 2 s a command.
    os._exit(run_as_main(request["module"]))


if __name__ == "__main__":
    main()
