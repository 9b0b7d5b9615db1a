"""backend=openai with backend/server=...: esgexp starts the inference server, the job runs against it, and
the server is gone afterwards, also when it exits at once, never answers, or the job is stopped with Ctrl-C.
Tested for real with llama-cpp-python's server on the packaged SmolLM2 GGUF."""

import json
import os
import signal
import time

import pytest
from cli import start_cli
from conftest import compose_config
from openai_server import missing_server_modules

from esgexp.errors import UserError
from esgexp.run import run_job

# A command that starts http.server in a session of its own on the port it is given, then waits.
HANDS_OVER = (
    "import subprocess, sys, time; subprocess.Popen([sys.executable, \\'-m\\', \\'http.server\\', sys.argv[1], "
    "\\'--bind\\', \\'127.0.0.1\\'], start_new_session=True); time.sleep(60)"
)
LLAMA = ("backend=openai", "backend/server=llama_cpp", "backend.max_concurrency=1", "tracking.offline=true")
ONE_THREAD = "+backend.server.extra_args=[--n_threads,1,--n_threads_batch,1]"


@pytest.fixture
def llama_cpp():
    missing = missing_server_modules()
    if missing:
        pytest.skip(f"llama-cpp-python[server] is not installed (cannot import {', '.join(missing)})")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_job_starts_its_server_answers_and_stops_it(llama_cpp, tmp_path):
    metrics = run_job(compose_config(tmp_path, *LLAMA, ONE_THREAD, "dataset.limit=3"))
    assert metrics["n_items"] == 3 and metrics["n_failed"] == 0
    started = json.loads((tmp_path / "run" / "server.json").read_text())
    assert started["command"][1:3] == ["-m", "llama_cpp.server"] and started["base_url"].startswith("http://127.0.0.1:")
    assert started["model_ids"] == ["smollm2-135m"]  # what the server said it serves, part of the cache's key
    assert "llama" in (tmp_path / "run" / "server.log").read_text(errors="replace").lower()
    assert gone(started["pid"])
    # the request cache knows the server by its command, not its port: a second run asks nothing
    again = run_job(
        compose_config(
            tmp_path / "again", *LLAMA, ONE_THREAD, "dataset.limit=3", f"paths.request_cache={tmp_path}/requests.sqlite"
        )
    )
    assert again["n_cached"] == 3


def test_a_server_that_exits_at_once_is_one_error_with_its_log(tmp_path):
    command = """backend.server.command=['{python}',-c,'print("no GPU here"); raise SystemExit(3)']"""
    started = time.monotonic()
    with pytest.raises(UserError, match=r"the server exited \(status 3\) before it answered.*no GPU here"):
        run_job(compose_config(tmp_path, *LLAMA, command, "dataset.limit=1"))
    assert time.monotonic() - started < 30


def test_a_server_that_never_answers_is_stopped_at_its_timeout(tmp_path):
    command = "backend.server.command=['{python}',-c,'import time; time.sleep(120)']"
    started = time.monotonic()
    with pytest.raises(
        UserError, match=r"did not answer http://127.0.0.1:\d+/v1/models within backend.server.startup_timeout_s=2"
    ):
        run_job(compose_config(tmp_path, *LLAMA, command, "backend.server.startup_timeout_s=2", "dataset.limit=1"))
    assert time.monotonic() - started < 20
    assert gone(json.loads((tmp_path / "run" / "server.json").read_text())["pid"])


def test_ctrl_c_during_the_job_leaves_no_server_behind(llama_cpp, tmp_path, clean_env):
    args = [*LLAMA, ONE_THREAD, "dataset.limit=40", f"paths.root_dir={tmp_path}", "trainer.progress_bar=false"]
    process = start_cli("esgexp", *args, cwd=tmp_path, env=clean_env)
    deadline = time.monotonic() + 120
    record = None
    while time.monotonic() < deadline and process.poll() is None:
        found = list(tmp_path.glob("runs/**/predictions.jsonl"))
        if found and found[0].read_text().count("\n") >= 1:
            record = json.loads((found[0].parent / "server.json").read_text())
            break
        time.sleep(0.1)
    assert record is not None, process.communicate()[1][-2000:]
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert gone(record["pid"])


def test_a_shared_server_serves_every_job_of_a_sweep_and_stops_at_its_end(llama_cpp, tmp_path, clean_env):
    """-m over two datasets sizes with backend.server.shared=true: one server (one pid, one log, in the first
    job's folder) answers both jobs, and is gone when the sweep's process ends."""
    from cli import run_cli

    args = [*LLAMA, ONE_THREAD, "backend.server.shared=true", "dataset.limit=2,3", f"paths.root_dir={tmp_path}"]
    done = run_cli("esgexp", "-m", *args, "trainer.progress_bar=false", cwd=tmp_path, env=clean_env)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("**/server.json"), key=lambda p: p.parent.name)]
    assert len(records) == 2 and records[0] == records[1]
    assert len(list(tmp_path.glob("**/server.log"))) == 1
    assert gone(records[0]["pid"])


def test_a_taken_port_is_one_line_naming_who_holds_it_and_nothing_is_asked(tmp_path):
    """Another program's server on backend.server.port: refused before the job starts, never run on."""
    from openai_server import FakeOpenAI

    with FakeOpenAI() as other:
        message = (
            rf"backend.server.port={other.port} is taken by pid {os.getpid()} \(.*\): a server esgexp starts cannot "
            r"listen there; stop that program, choose another backend.server.port, or leave it unset \(null\)"
        )
        with pytest.raises(UserError, match=message):
            run_job(compose_config(tmp_path, *LLAMA, f"backend.server.port={other.port}", "dataset.limit=3"))
        assert other.count == 0
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_a_health_answer_from_a_process_not_the_servers_own_is_refused(tmp_path):
    """The command esgexp started hands the port to a program of another session (a server it starts in a
    session of its own) and waits: that program answers the health check, but it is not the server esgexp
    started, so the job stops, naming who holds the port."""
    from openai_server import free_port

    from esgexp.backends.ports import listeners

    port = free_port()
    command = f"backend.server.command=['{{python}}',-c,'{HANDS_OVER}','{{port}}']"
    overrides = (command, f"backend.server.port={port}", "backend.server.health_path=/", "dataset.limit=1")
    try:
        with pytest.raises(UserError, match=rf"backend.server.port={port} is taken by pid \d+ \(.*http.server {port}"):
            run_job(compose_config(tmp_path, *LLAMA, *overrides))
    finally:
        for pid in listeners(port) or []:  # the other session's server outlives the job: it is not esgexp's
            os.kill(pid, signal.SIGTERM)
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_a_server_command_that_cannot_run_for_this_model_says_what_mends_it(tmp_path):
    """llama.cpp's server for a model without a GGUF file, vLLM's server where vLLM is not installed: one line
    each naming the setting or the install, never a bare placeholder or errno."""
    with pytest.raises(UserError, match=r"needs \{model_gguf\}: give a model with a packaged GGUF file"):
        run_job(compose_config(tmp_path, *LLAMA, "model=qwen2.5-0.5b", "dataset.limit=1"))
    vllm = ("backend=openai", "backend/server=vllm", "model=qwen2.5-0.5b", "tracking.offline=true")
    missing = "backend.server.command=[no-such-vllm-here]"
    with pytest.raises(UserError, match=r"'no-such-vllm-here' cannot be started: No such file or directory$"):
        run_job(compose_config(tmp_path, *vllm, missing, "dataset.limit=1"))
    if not __import__("shutil").which("vllm"):
        with pytest.raises(
            UserError, match=r"'vllm' cannot be started: .*pip install -e '.\[vllm\]' on a machine with"
        ):
            run_job(compose_config(tmp_path, *vllm, "dataset.limit=1"))
