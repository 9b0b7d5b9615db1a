"""Run a command as a user does, ``python -m MODULE ARGS...`` in a process of its own: the one helper the
command-line tests share.

Running the module in the test process instead (runpy with argv, environment and folder swapped) saved
the 5-8 CPU-seconds of imports per command, but on an xdist worker it left pytest's captured output
closed after a full command (a job, an ingest): every later test on that worker then failed "I/O
operation on closed file", three times in four full runs, after a different command each time. Until
the cause is found every command gets its own interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(
    module: str, *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``python -m module *args`` in ``cwd`` with ``env`` (default: this process's): returncode, stdout and
    stderr as text."""
    command = [sys.executable, "-m", module, *args]
    env = dict(os.environ if env is None else env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
