"""Who listens on a TCP port, from Linux's ``/proc``: how a started server is known to be the one answering.

In: a port (and a process session). Out: the pids with a listening socket on it (``listeners``), whether a
process of a session is one of them (``held_by_session``), and a description of a holder for a message
(``describe``). Elsewhere than Linux (no ``/proc/net/tcp``) nothing is known: ``listeners`` is ``None``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # the state column of a listening socket in /proc/net/tcp


def listening_inodes(port: int) -> set[str] | None:
    """The socket inodes listening on ``port`` (IPv4 and IPv6), or ``None`` where /proc does not say."""
    found, readable = set(), False
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found if readable else None


def socket_inodes(pid: int) -> set[str]:
    """The socket inodes process ``pid`` holds open (none where its folder cannot be read; a descriptor closed
    while they are read is passed over, not the end of the others)."""
    try:
        fds = list(os.scandir(PROC / str(pid) / "fd"))
    except OSError:
        return set()
    held = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(fd.path)
            if target.startswith("socket:["):
                held.add(target[8:-1])
    return held


def listeners(port: int) -> list[int] | None:
    """The pids this user can see with a listening socket on ``port``; ``None`` where /proc does not say."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    return [pid for pid in _pids() if inodes & socket_inodes(pid)] if inodes else []


def held_by_session(port: int, session: int) -> bool | None:
    """Whether a process of ``session`` (a server started with ``start_new_session``: its own pid) listens on
    ``port``; ``None`` where /proc does not say."""
    holders = listeners(port)
    if holders is None:
        return None
    return any(_session(pid) == session for pid in holders)


def describe(port: int) -> str:
    """Who holds ``port``, for a message: ``pid 123 (python3 -m http.server 8000)``, or why it is not known."""
    holders = listeners(port)
    if not holders:
        return "a process this user cannot see (another user's, or another container's)"
    return ", ".join(f"pid {pid} ({_command(pid)})" for pid in holders[:3])


def _pids() -> list[int]:
    return [int(entry.name) for entry in os.scandir(PROC) if entry.name.isdigit()]


def _session(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # after the command: state, ppid, pgrp, session


def _command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    command = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return command if len(command) <= 120 else command[:117] + "..."
