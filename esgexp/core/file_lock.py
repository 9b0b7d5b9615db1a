"""An exclusive lock between the processes of one machine: ``flock`` on a lock file."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no inter-process lock
    fcntl = None


@contextmanager
def exclusive(lock_file: Path):
    """Held by one process at a time: an exclusive ``flock`` on ``lock_file`` (it and its folder are
    created); waits while another process holds it; a no-op where ``fcntl`` is missing (Windows)."""
    if fcntl is None:
        yield
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
