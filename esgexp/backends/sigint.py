"""Ctrl-C, SIGTERM and SIGUSR2 as a request to stop, not an exception in the middle of writing an answer.

``kill``, ``timeout``, ``docker stop`` and Slurm send SIGTERM; Slurm's preemption and time-limit warning
(``--signal``) is SIGUSR2. ``stop_signals_as_ctrl_c`` (every command, ``cli.command.run_command``) hands both to
the SIGINT handler in place, so they take Ctrl-C's path everywhere; ``stop_signal`` says which one came, for
the ``interrupted`` line and the exit status (128 + its number: 130, 143, 140). A command started with SIGINT
ignored (``cmd &`` in a script, ``nohup``) keeps ignoring SIGINT only: SIGTERM and SIGUSR2 still stop it."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# The signals that stop a command as Ctrl-C does, and how the ``interrupted`` line names them.
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGUSR2: "SIGUSR2"}
_received: list[int] = []  # SIGTERM/SIGUSR2 received since the command started, in order
# deferred_sigint's handler while SIGINT is ignored: the stop signals reach it without SIGINT's disposition changing
_deferred: list = []
# set by a second stop signal during a clean stop: the command exits without waiting for requests in flight
_at_once = threading.Event()


def stopped_at_once() -> bool:
    """Whether a second stop signal came while the first one's clean stop waited (``deferred_sigint``)."""
    return _at_once.is_set()


def stop_signal() -> int:
    """The signal that stopped the command: the first SIGTERM/SIGUSR2 received, else SIGINT (Ctrl-C)."""
    return _received[0] if _received else signal.SIGINT


def as_ctrl_c(signum: int, frame) -> None:
    """A SIGTERM or SIGUSR2 handler: recorded, then given to the SIGINT handler in place (Python's, which
    raises ``KeyboardInterrupt``, or ``deferred_sigint``'s). While SIGINT is ignored it is a stop all the
    same: ``deferred_sigint``'s handler where one waits for a safe point, else ``KeyboardInterrupt``."""
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN and _deferred:
        handler = _deferred[-1]
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signum, frame)


@contextmanager
def stop_signals_as_ctrl_c():
    """Inside, on the main thread, SIGTERM and SIGUSR2 are handled as Ctrl-C (``as_ctrl_c``) where no one
    else handles them (a submitit job keeps submitit's: it requeues the job); outside, as before."""
    _received.clear()
    _at_once.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = {s: signal.getsignal(s) for s in STOP_SIGNALS if s != signal.SIGINT}
    taken = {s: h for s, h in taken.items() if h is signal.SIG_DFL}
    for signum in taken:
        signal.signal(signum, as_ctrl_c)
    try:
        yield
    finally:
        for signum, handler in taken.items():
            signal.signal(signum, handler)


@contextmanager
def deferred_sigint():
    """Inside, on the main thread, the first SIGINT (or SIGTERM/SIGUSR2, through ``as_ctrl_c``) only sets
    the event this yields (the caller stops at a safe point and raises ``KeyboardInterrupt`` itself); a
    second one raises ``KeyboardInterrupt`` at once (``stopped_at_once``: the command then exits without
    waiting for the requests still in flight). While SIGINT is ignored, it stays ignored and only
    SIGTERM/SIGUSR2 set the event. Elsewhere (another thread, a handler of someone else's) SIGINT is left as
    it is."""
    interrupted = threading.Event()
    current = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or (
        current is not signal.default_int_handler and current is not signal.SIG_IGN
    ):
        yield interrupted
        return

    def handler(signum, frame):
        if interrupted.is_set():
            _at_once.set()
            raise KeyboardInterrupt
        interrupted.set()

    if current is signal.SIG_IGN:
        _deferred.append(handler)
    else:
        signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        if current is signal.SIG_IGN:
            _deferred.remove(handler)
        else:
            signal.signal(signal.SIGINT, signal.default_int_handler)
