"""Tracking to a real `mlflow server` over HTTP, as a team would share runs."""

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest

from esgexp.run import run_job


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [str(mlflow_cli), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
         "--artifacts-destination", (tmp_path / "server-artifacts").as_uri(), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start within 60 s")
        yield url, tmp_path / "server-artifacts"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_job_logs_to_an_mlflow_server_over_http(tiny_cfg, mlflow_server):
    url, artifact_root = mlflow_server
    metrics = run_job(tiny_cfg(f"tracking.uri={url}", "scoring=logprob", "dataset.limit=4"))
    client = mlflow.MlflowClient(tracking_uri=url)
    [run] = client.search_runs([client.get_experiment_by_name("esg_sample").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["accuracy"] == pytest.approx(metrics["accuracy"])
    assert run.data.tags["scoring"] == "logprob" and run.data.params["dataset.limit"] == "4"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"metrics.json", "predictions.jsonl", "config.yaml"}
    assert list(artifact_root.rglob("predictions.jsonl")), "artifacts were uploaded to the server's store"
