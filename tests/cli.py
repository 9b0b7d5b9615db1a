"""Run a command as ``python -m MODULE ARGS...`` would, in this test process: the module runs as
``__main__`` with that argv, environment and working folder, its output captured, its exit status
kept. Imports (torch, transformers, mlflow: 5-8 s per interpreter) are then paid once per test
process instead of once per command.

A command runs in a subprocess instead when the process boundary is part of what a test proves
(signals, kill -9, parallel jobs: call ``subprocess`` directly there), when its environment
changes a variable that a library reads once at import (``IMPORT_TIME_VARIABLES``), or when it is a
job (``python -m esgexp`` other than ``--help``). Jobs run in the test process three times left
pytest's captured output closed on an xdist worker (every later test there failed "I/O operation on
closed file"), each time after a different job; the cause is not found yet. The other commands
(leaderboard, compare, ingest, sync, paper, verify, build's checks, every ``--help``) run here.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import runpy
import signal
import subprocess
import sys
import warnings
from pathlib import Path

# Read by huggingface_hub / transformers / torch when they are imported, not when used: a command
# whose environment sets one of these differently needs its own interpreter.
IMPORT_TIME_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME")


def run_cli(
    module: str, *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -m module *args`` in ``cwd`` with ``env``: returncode, stdout and stderr as text."""
    env = dict(os.environ if env is None else env)
    own_process = any(env.get(name) != os.environ.get(name) for name in IMPORT_TIME_VARIABLES)
    if own_process or (module == "esgexp" and "--help" not in args):
        command = [sys.executable, "-m", module, *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    stdout, stderr = io.StringIO(), io.StringIO()
    with _as_a_fresh_process(module, args, cwd, env):
        code = _run_module(module, stdout, stderr)
    return subprocess.CompletedProcess(["-m", module, *args], code, stdout.getvalue(), stderr.getvalue())


def _run_module(module: str, stdout: io.StringIO, stderr: io.StringIO) -> int:
    """Run ``module`` as ``__main__`` with its output in the two buffers; its exit status."""
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            with warnings.catch_warnings():  # a module imported before is run again: that is the point
                warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                return done.code or 0
            print(done.code, file=sys.stderr)
            return 1
        except BaseException:  # what the interpreter would print before exiting with 1
            import traceback

            traceback.print_exc()
            return 1
    return 0


@contextlib.contextmanager
def _as_a_fresh_process(module: str, args: tuple[str, ...], cwd, env: dict):
    """argv, environment, working folder, SIGINT handler and logging as a new interpreter has them,
    put back afterwards."""
    saved_argv, saved_env, saved_cwd = sys.argv[:], dict(os.environ), os.getcwd()
    saved_sigint = signal.getsignal(signal.SIGINT)
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    loggers = {name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled) for name, lg in _loggers()}
    sys.argv = [module, *args]
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        signal.signal(signal.SIGINT, saved_sigint)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for name, lg in _loggers():
            handlers, level, propagate, disabled = loggers.get(name, ([], logging.NOTSET, True, False))
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled


def _loggers():
    return [(name, lg) for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)]
