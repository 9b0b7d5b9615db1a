"""Tracking to a real `mlflow server` over HTTP, as a team would share runs, and one that goes away mid-run."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

import esgexp.tasks.generation
from esgexp.cli import sync
from esgexp.core import tracking
from esgexp.run import run_job


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a sqlite store and proxied artifacts under ``root``; stop() and
    start() again keep its port and its data, as a restarted team server does."""

    def __init__(self, root: Path):
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = root / "server-artifacts"
        self.process = None

    def start(self, timeout: float = 120) -> None:
        mlflow_cli = Path(sys.executable).with_name("mlflow")
        self.process = subprocess.Popen(
            [
                str(mlflow_cli),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                f"sqlite:///{self.root}/server.db",
                "--artifacts-destination",
                self.artifacts.as_uri(),
                "--workers",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # No background job runner (its consumers are four more Python processes): tracking needs none.
            env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"),
        )
        deadline = time.monotonic() + timeout
        while tracking.unreachable(self.url, 1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"mlflow server did not start within {timeout:g} s")
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM to the server and its workers; returns once the port refuses connections."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        while not tracking.unreachable(self.url, 1):
            time.sleep(0.2)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory, empty_db):
    root = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(empty_db, root / "server.db")  # its tables made: the server starts without migrating a store
    server = MlflowServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_job_logs_to_an_mlflow_server_over_http(tiny_cfg, mlflow_server):
    url = mlflow_server.url
    metrics = run_job(tiny_cfg(f"tracking.uri={url}", "scoring=logprob", "dataset.limit=4"))
    client = mlflow.MlflowClient(tracking_uri=url)
    [run] = client.search_runs([client.get_experiment_by_name("esg_sample").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["accuracy"] == pytest.approx(metrics["accuracy"])
    assert run.data.tags["scoring"] == "logprob" and run.data.params["dataset.limit"] == "4"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {
        "metrics.json",
        "predictions.jsonl",
        "config.yaml",
    }
    assert list(mlflow_server.artifacts.rglob("predictions.jsonl")), "artifacts were uploaded to the server's store"


@pytest.fixture
def mlflow_http_env():
    """mlflow's HTTP settings as they were before the test (a job sets them from its tracking node)."""
    names = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_server_stopped_mid_run_then_started_again_and_synced_gives_one_complete_run(
    tiny_cfg, mlflow_server, mlflow_http_env, tmp_path, monkeypatch, capsys
):
    """The server stops after the predictions, before the job logs its results: the job ends normally with
    everything in its run folder; once the server is back, sync completes the run the job had opened."""
    predict = esgexp.tasks.generation.predict

    def predict_then_stop_server(*args):
        usage = predict(*args)
        mlflow_server.stop()
        return usage

    monkeypatch.setattr(esgexp.tasks.generation, "predict", predict_then_stop_server)
    url, run_dir = mlflow_server.url, tmp_path / "run"
    metrics = run_job(
        tiny_cfg(f"tracking.uri={url}", "tracking.http_max_retries=0", "experiment_name=midrun", "dataset.limit=3")
    )
    out = capsys.readouterr().out
    assert f"not yet tracked (the tracking server {url} stopped answering while logging metrics" in out
    assert f"python -m esgexp.sync {run_dir}" in out
    assert (
        json.loads((run_dir / "metrics.json").read_text()) == metrics
        and len((run_dir / "predictions.jsonl").read_text().splitlines()) == 3
    )
    pending = json.loads((run_dir / tracking.PENDING_FILE).read_text())
    assert (
        pending["status"] == "FINISHED" and pending["params"] == {}
    )  # the params reached the server before it stopped
    assert [a["path"] for a in pending["artifacts"]] == ["config.yaml", "metrics.json", "predictions.jsonl"]

    mlflow_server.start()
    client = mlflow.MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("midrun").experiment_id
    [opened] = client.search_runs([experiment])
    assert opened.info.run_id == pending["run_id"] and opened.info.status == "RUNNING" and opened.data.metrics == {}

    assert sync.main([str(run_dir)]) == 0
    assert f"synced to run {pending['run_id']} in {url} (the run it had opened)" in capsys.readouterr().out
    [run] = client.search_runs([experiment])
    assert run.info.run_id == pending["run_id"] and run.info.status == "FINISHED"
    logged = tracking.numeric_metrics(metrics)
    assert run.data.metrics == pytest.approx(logged) and run.data.metrics["accuracy"] == pytest.approx(
        metrics["accuracy"]
    )
    assert all(len(client.get_metric_history(run.info.run_id, key)) == 1 for key in logged)
    assert run.data.params["dataset.limit"] == "3" and run.data.tags["task"] == "mcq"
    assert pending["tags"].items() <= run.data.tags.items()
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
        "config.yaml",
        "metrics.json",
        "predictions.jsonl",
    }

    assert sync.main([str(run_dir)]) == 0
    assert "already synced" in capsys.readouterr().out
    assert [r.info.run_id for r in client.search_runs([experiment])] == [run.info.run_id]
    assert all(len(client.get_metric_history(run.info.run_id, key)) == 1 for key in logged)
