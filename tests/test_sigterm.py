"""SIGTERM (``kill``, ``timeout``, ``docker stop``, Slurm) and SIGUSR2 (Slurm's warning before a time limit
or preemption) stop a command as Ctrl-C does: the answers in flight written, one ``interrupted (SIGTERM)``
line, FAILED, the run KILLED, exit 128 + the signal's number; ``resume=true`` asks only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest
import torch
from cli import start_cli
from conftest import compose_config
from openai_server import FakeOpenAI
from test_finetune_run import FT

from esgexp.backends.sigint import STOP_SIGNALS, deferred_sigint, stop_signals_as_ctrl_c
from esgexp.cli.command import run_command
from esgexp.errors import Interrupted
from esgexp.run import run_job

N_ITEMS = 24
PROBE = 1  # the request each job sends first to check the server (OpenAIBackend.check_server)


@pytest.fixture
def signal_handlers():
    """The stop signals' handlers as they were before the test (run_command leaves an exit-at-once one)."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def mlflow_status(root) -> str:
    client = mlflow.MlflowClient(f"sqlite:///{root}/mlruns/mlflow.db")
    (run,) = client.search_runs(["1"])
    return run.info.status


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGUSR2, 140)])
def test_every_command_takes_sigterm_and_sigusr2_as_ctrl_c(capsys, signal_handlers, signum, status):
    def main():
        os.kill(os.getpid(), signum)
        time.sleep(10)  # the handler raises before this ends

    with pytest.raises(SystemExit) as ended:
        run_command(main, "leaderboard", [])
    assert ended.value.code == status
    assert capsys.readouterr().err == f"interrupted ({STOP_SIGNALS[signum]})\n"


def test_sigterm_stops_a_command_started_with_sigint_ignored(capsys, signal_handlers):
    """``cmd &`` in a script starts the command with SIGINT ignored: a stop signal still stops it, and SIGINT
    stays ignored, as the shell asked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def main():
        os.kill(os.getpid(), signal.SIGINT)  # ignored
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises before this ends

    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        run_command(main, "leaderboard", [])
    assert ended.value.code == 143 and time.monotonic() - started < 5
    assert capsys.readouterr().err == "interrupted (SIGTERM)\n"


def test_deferred_stop_with_sigint_ignored_waits_for_the_safe_point(signal_handlers):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_signals_as_ctrl_c(), deferred_sigint() as interrupted:
        os.kill(os.getpid(), signal.SIGINT)
        assert not interrupted.is_set()  # SIGINT is still ignored
        os.kill(os.getpid(), signal.SIGTERM)
        assert interrupted.is_set()  # the stop waits for the caller's safe point
        with pytest.raises(KeyboardInterrupt):  # a second one stops at once
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_kill_stops_a_job_started_in_the_background_by_a_script(tmp_path, clean_env):
    """``esgexp ... &`` in a script, then ``kill PID``: the job stops with its answers kept, exit 143."""
    run_dir = tmp_path / "run"
    predictions = run_dir / "predictions.jsonl"
    with FakeOpenAI(delay=0.3, answer="A") as server:
        script = (
            f"{sys.executable} -m esgexp backend=openai backend.max_concurrency=1 dataset.limit=30 "
            f"backend.base_url={server.base_url} paths.root_dir={tmp_path} tracking.offline=true "
            f"paths.request_cache={tmp_path}/requests.sqlite trainer.progress_bar=false hydra.run.dir={run_dir} "
            "& echo $! > pid; wait $!; echo $? > status"
        )
        shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=clean_env, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and shell.poll() is None:
            if predictions.is_file() and len(predictions.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGTERM)
        _, stderr = shell.communicate(timeout=60)
    kept = len(predictions.read_text().splitlines())
    assert (tmp_path / "status").read_text().strip() == "143", stderr[-3000:]
    assert kept < 30
    assert f"interrupted (SIGTERM): {kept} answers kept in {run_dir}; resume=true continues" in stderr


def test_sigterm_keeps_the_answers_marks_the_run_killed_and_resume_asks_the_rest(tmp_path, clean_env, made_store):
    run_dir = tmp_path / "run"
    predictions = run_dir / "predictions.jsonl"
    common = ("backend=openai", "backend.max_concurrency=2", f"dataset.limit={N_ITEMS}")
    with FakeOpenAI(delay=0.3, answer="A") as server:
        job = start_cli(
            "esgexp",
            *common,
            f"backend.base_url={server.base_url}",
            f"paths.root_dir={tmp_path}",
            f"paths.request_cache={tmp_path}/requests.sqlite",
            "trainer.progress_bar=false",
            f"hydra.run.dir={run_dir}",
            cwd=tmp_path,
            env=clean_env,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and job.poll() is None:
            if predictions.is_file() and len(predictions.read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
        _, stderr = job.communicate(timeout=60)
        asked = server.count - PROBE
        kept = len(predictions.read_text().splitlines())
        assert job.returncode == 143, stderr[-3000:]
        line = f"interrupted (SIGTERM): {kept} answers kept in {run_dir}; resume=true continues"
        assert [text for text in stderr.splitlines() if text.strip()] == [line]
        assert (run_dir / "FAILED").read_text() == line + "\n"
        assert 4 <= kept == asked < N_ITEMS  # every answer received, those in flight included, is written
        assert mlflow_status(tmp_path) == "KILLED"

        server.delay = 0.0
        cfg = compose_config(tmp_path, *common, f"backend.base_url={server.base_url}", "resume=true")
        metrics = run_job(cfg)
        assert server.count - 2 * PROBE == N_ITEMS  # the rest only, each once
    assert metrics["n_resumed"] == kept and metrics["n_failed"] == 0
    assert len(predictions.read_text().splitlines()) == N_ITEMS


def test_sigterm_during_fine_tuning_saves_last_ckpt_and_says_how_to_go_on(
    tmp_path, tiny_model_dir, made_store, monkeypatch, signal_handlers
):
    from esgexp.training.lora_module import LoraFineTuner

    step = LoraFineTuner.training_step

    def terminated_at_step_2(self, batch, batch_idx):
        if self.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, batch, batch_idx)

    monkeypatch.setattr(LoraFineTuner, "training_step", terminated_at_step_2)
    cfg = compose_config(tmp_path, *FT, f"model.path={tiny_model_dir}", "train.val_generate_items=0")
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    with stop_signals_as_ctrl_c(), pytest.raises(Interrupted) as stopped:
        run_job(cfg)
    assert str(stopped.value) == f"training stopped at step 2; its state is in {last}; ckpt_path=last continues"
    assert torch.load(last, weights_only=False)["global_step"] == 2
    assert mlflow_status(tmp_path) == "KILLED"


def test_a_second_ctrl_c_stops_at_once_while_answers_are_in_flight(tmp_path, clean_env):
    """The first Ctrl-C waits for the answers in flight (8 s here); the second stops the command at once,
    its run still marked KILLED with the ``interrupted`` line."""
    with FakeOpenAI(delay=8.0, answer="A") as server:
        job = start_cli(
            "esgexp",
            "backend=openai",
            "backend.max_concurrency=2",
            "dataset.limit=10",
            f"backend.base_url={server.base_url}",
            f"paths.root_dir={tmp_path}",
            "cache=off",
            "tracking.offline=true",
            "trainer.progress_bar=false",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
            env=clean_env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job.poll() is None and server.count < PROBE + 2:
            time.sleep(0.05)
        job.send_signal(signal.SIGINT)
        time.sleep(0.5)
        second = time.monotonic()
        job.send_signal(signal.SIGINT)
        _, stderr = job.communicate(timeout=60)
        took = time.monotonic() - second
    assert job.returncode == 130, stderr[-3000:]
    assert took < 3, f"the second Ctrl-C took {took:.1f} s"
    assert f"interrupted: 0 answers kept in {tmp_path / 'run'}; resume=true continues" in stderr
    assert '"status": "KILLED"' in (tmp_path / "run" / "tracking_pending.json").read_text()


def test_a_second_job_on_a_run_folder_in_use_is_refused_at_once(tmp_path, clean_env):
    """Two ``resume=true`` of one run folder at once: the second is one line and asks nothing; the first goes on."""
    run_dir = tmp_path / "run"
    predictions = run_dir / "predictions.jsonl"
    with FakeOpenAI(delay=0.3, answer="A") as server:
        job = (
            "backend=openai",
            "backend.max_concurrency=1",
            "dataset.limit=30",
            f"backend.base_url={server.base_url}",
            f"paths.root_dir={tmp_path}",
            "cache=off",
            "tracking.offline=true",
            "trainer.progress_bar=false",
            f"hydra.run.dir={run_dir}",
            "resume=true",
        )
        first = start_cli("esgexp", *job, cwd=tmp_path, env=clean_env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.poll() is None:
            if predictions.is_file() and len(predictions.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        second = start_cli("esgexp", *job, cwd=tmp_path, env=clean_env)
        _, stderr = second.communicate(timeout=60)
        assert second.returncode == 2, stderr[-3000:]
        assert stderr.strip().splitlines()[-1] == (
            f"error: run folder {run_dir} is in use by another esgexp job running now: wait until it ends, then run "
            "the same command again (resume=true continues what it left)"
        )
        assert first.poll() is None and not (run_dir / "FAILED").exists()
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
        assert server.count == PROBE + len(predictions.read_text().splitlines())  # none from the second
    assert first.returncode == 143


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_stop_while_openvino_embeds_a_corpus_ends_the_job_as_a_stop(tmp_path, clean_env, made_store, signum, status):
    """Ctrl-C or SIGTERM while OpenVINO's compiled encoder embeds the passages of an ingested report (its
    threads busy): the job ends with its ``interrupted`` line, exit 130 / 143 and a KILLED run, never an
    abort from OpenVINO's threads, and writes no index and no metrics."""
    pytest.importorskip("openvino", reason="openvino (a declared dependency) is not installed")
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    reports = tmp_path / "reports"
    reports.mkdir()
    # 6,000 passages of one report: many seconds of embedding, stopped after the first
    paragraphs = [
        f"Site {i} reported Scope {1 + i % 3} emissions of {i * 13} tonnes of CO2e in 2024 and water use of "
        f"{i * 7} cubic metres; its waste went to landfill for {i % 40} percent, the rest was recycled."
        for i in range(6000)
    ]
    (reports / "BIG_REPORT.txt").write_text("\n\n".join(paragraphs))
    ingest(reports, tmp_path / "corpus", CharChunker(min_chars=100, max_chars=300), progress=False)
    gold = tmp_path / "gold.jsonl"
    question = {
        "company": "Big",
        "doc_name": "BIG_REPORT",
        "category": "Environmental",
        "kpi_name": "Scope 1 emissions",
        "question": "What were Site 12's Scope 1 emissions?",
        "answer": "156",
    }
    evidence = {"evidence_text": paragraphs[12], "evidence_page_num": 0, "evidence_doc_name": "BIG_REPORT"}
    gold.write_text(json.dumps({**question, "evidence": [evidence]}) + "\n")
    run_dir = tmp_path / "run"
    job = start_cli(
        "esgexp",
        "experiment=esgbench_retrieval",
        f"dataset.path={gold}",
        f"retrieval.corpus={tmp_path / 'corpus'}",
        "retriever=dense",
        "retriever.runtime=openvino",
        f"paths.root_dir={tmp_path}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"retriever.openvino_cache={os.environ['ESGEXP_CACHE_DIR']}/openvino",  # the conversion the suite shares
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        env=clean_env,
    )
    log = run_dir / "esgexp.log"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and job.poll() is None:
        if log.is_file() and "embedding 6000 passages" in log.read_text():
            break
        time.sleep(0.05)
    time.sleep(0.5)  # well inside the embedding: OpenVINO's infer requests are running
    assert job.poll() is None, "the job ended before it was stopped"
    job.send_signal(signum)
    stdout, stderr = job.communicate(timeout=60)
    output = stdout + stderr
    assert job.returncode == status, output[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("interrupted")] == [
        f"interrupted ({STOP_SIGNALS[signum]})"
    ], output[-3000:]
    assert "terminate called" not in output and "Traceback" not in output
    assert not (run_dir / "metrics.json").exists() and not list((tmp_path / "cache").rglob("embeddings.npy"))
    assert mlflow_status(tmp_path) == "KILLED"
