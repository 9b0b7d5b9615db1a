"""Ctrl-C as a request to stop, not an exception in the middle of writing an answer."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def deferred_sigint():
    """Inside, on the main thread, the first SIGINT only sets the event this yields (the caller stops at a
    safe point and raises ``KeyboardInterrupt`` itself); a second one raises ``KeyboardInterrupt`` at
    once. Elsewhere (another thread, a handler of someone else's) SIGINT is left as it is."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield interrupted
        return

    def handler(signum, frame):
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
