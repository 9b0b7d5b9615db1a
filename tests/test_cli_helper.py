"""tests/cli.run_cli: a command forked from the fork server behaves as ``python -m`` in a new interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from cli import ForkedCommand, ForkServer, _server, run_cli, start_cli

PROBE = textwrap.dedent(
    """
    import atexit, os, sys, threading, time
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
    print("argv", sys.argv[1:])
    print("cwd", os.getcwd() == sys.path[0])
    print("parent", os.getppid())
    print("probe", os.environ.get("PROBE_VALUE"))
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "raise":
        raise ValueError("a bad value")
    if sys.argv[1] == "sleep":
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.fixture
def probe_dir(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def test_a_forked_command_runs_as_a_fresh_interpreter_does(probe_dir):
    env = dict(os.environ, PROBE_VALUE="set")
    server = _server(env)
    assert server is not None, "the fork server did not start"
    forked = run_cli("probe", "3", "x y", cwd=probe_dir, env=env)
    plain = subprocess.run(
        [sys.executable, "-m", "probe", "3", "x y"], cwd=probe_dir, env=env, capture_output=True, text=True
    )
    assert f"parent {server.pid}" in forked.stdout  # it did come from the server
    strip = lambda out: [line for line in out.splitlines() if not line.startswith("parent")]  # noqa: E731
    assert (
        strip(forked.stdout)
        == strip(plain.stdout)
        == [
            "argv ['3', 'x y']",
            "cwd True",
            "probe set",
            "thread joined",
            "atexit ran",
        ]
    )
    assert forked.stderr == plain.stderr == "to stderr\n"
    assert forked.returncode == plain.returncode == 3


def test_one_server_serves_every_test_process_that_connects(probe_dir):
    """A second connection, as from a second pytest-xdist process: each connection hears of its own
    commands only, and one that closes ends nothing for the others."""
    server = _server(dict(os.environ))
    assert server is not None, "the fork server did not start"
    other = ForkServer(server.path)
    assert other.pid == server.pid
    sleeper = ForkedCommand(server, "probe", ["sleep"], str(probe_dir), dict(os.environ))
    mine = ForkedCommand(server, "probe", ["5"], str(probe_dir), dict(os.environ))
    theirs = ForkedCommand(other, "probe", ["6"], str(probe_dir), dict(os.environ))
    assert (mine.wait(timeout=30), theirs.wait(timeout=30)) == (5, 6)
    assert other.wait(mine.pid, 0) is None and server.wait(theirs.pid, 0) is None
    assert f"parent {server.pid}" in theirs.communicate()[0]
    other.close()
    assert sleeper.poll() is None and run_cli("probe", "0", cwd=probe_dir).returncode == 0
    sleeper.kill()
    assert sleeper.wait(timeout=30) == -signal.SIGKILL


def test_an_uncaught_error_exits_1_with_its_traceback(probe_dir):
    result = run_cli("probe", "raise", cwd=probe_dir)
    assert result.returncode == 1
    assert result.stderr.rstrip().endswith("ValueError: a bad value") and "Traceback" in result.stderr


def test_a_command_past_its_timeout_is_killed(probe_dir):
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("probe", "sleep", cwd=probe_dir, timeout=2)
    assert run_cli("probe", "0", cwd=probe_dir).returncode == 0  # the server goes on serving


def test_a_changed_import_time_variable_gets_a_fresh_interpreter(probe_dir):
    env = dict(os.environ, HF_HOME=str(probe_dir / "hf"))
    assert _server(env) is None
    result = run_cli("probe", "0", cwd=probe_dir, env=env)
    assert result.returncode == 0 and f"parent {os.getpid()}" in result.stdout


def test_started_commands_run_side_by_side_and_take_signals_as_processes_do(probe_dir):
    sleepers = [start_cli("probe", "sleep", cwd=probe_dir) for _ in range(2)]
    assert run_cli("probe", "4", cwd=probe_dir).returncode == 4  # served while both sleep
    assert [s.poll() for s in sleepers] == [None, None]
    sleepers[0].kill()
    sleepers[1].send_signal(signal.SIGINT)
    assert sleepers[0].wait(timeout=30) == -signal.SIGKILL
    stdout, stderr = sleepers[1].communicate(timeout=30)
    assert sleepers[1].returncode == -signal.SIGINT  # an uncaught Ctrl-C ends it as the interpreter does
    assert "argv ['sleep']" in stdout and "KeyboardInterrupt" in stderr


def test_the_commands_pythonpath_is_searched_after_its_folder(probe_dir):
    lib = probe_dir / "lib"
    lib.mkdir()
    (lib / "probe_lib.py").write_text("VALUE = 7\n")
    (probe_dir / "uses_lib.py").write_text(
        "import sys, probe_lib\nprint(probe_lib.VALUE, sys.path.index(sys.argv[1]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(lib))
    assert _server(env) is not None
    forked = run_cli("uses_lib", str(lib), cwd=probe_dir, env=env)
    plain = subprocess.run(
        [sys.executable, "-m", "uses_lib", str(lib)], cwd=probe_dir, env=env, capture_output=True, text=True
    )
    assert forked.stdout == plain.stdout == "7 1\n", forked.stderr
