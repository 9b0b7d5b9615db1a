"""A run whose tracking server stopped mid-run, synced to another store: the whole run goes there (params,
tags, metrics, artifacts, status, name), once; the job's own store still gets only what is pending."""

import csv
import json
import shutil

from cli import run_cli

# Fixtures: a real `mlflow server` that can be stopped and started again, mlflow's HTTP settings restored.
from test_mlflow_server import mlflow_http_env, mlflow_server  # noqa: F401

import esgexp.tasks.generation
from esgexp.core import tracking
from esgexp.run import run_job


def only_run(uri: str, experiment: str):
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return run


def artifacts(uri: str, run_id: str) -> set[str]:
    from mlflow import MlflowClient

    return {a.path for a in MlflowClient(uri).list_artifacts(run_id)}


def test_a_run_whose_server_stopped_mid_run_syncs_whole_to_another_store_and_once(
    tiny_cfg,
    mlflow_server,  # noqa: F811
    mlflow_http_env,  # noqa: F811
    tmp_path,
    monkeypatch,
    clean_env,
    empty_db,
):
    predict = esgexp.tasks.generation.predict

    def predict_then_stop_server(*args):
        usage = predict(*args)
        mlflow_server.stop()
        return usage

    monkeypatch.setattr(esgexp.tasks.generation, "predict", predict_then_stop_server)
    url, run_dir = mlflow_server.url, tmp_path / "run"
    run_job(tiny_cfg(f"tracking.uri={url}", "tracking.http_max_retries=0", "experiment_name=stores", "dataset.limit=3"))
    pending = json.loads((run_dir / tracking.PENDING_FILE).read_text())
    assert pending["params"] == {} and "model" not in pending["tags"]  # they reached the server before it stopped

    # The server is still down: everything the other store gets comes from the run folder.
    other = f"sqlite:///{shutil.copy(empty_db, tmp_path / 'other.db')}"
    first = run_cli("esgexp.sync", str(run_dir), f"tracking.uri={other}", cwd=tmp_path, env=clean_env)
    assert first.returncode == 0, first.stderr[-3000:]
    copy = only_run(other, "stores")
    assert f"synced to run {copy.info.run_id} in {other} (a new run)" in first.stdout
    assert copy.info.status == "FINISHED" and copy.info.run_name == "local/zero_shot/generate"
    assert copy.data.params["dataset.limit"] == "3" and copy.data.params["tracking.uri"] == url
    tags = copy.data.tags
    assert (tags["task"], tags["dataset"], tags["backend"], tags["strategy"], tags["complete"]) == (
        "mcq",
        "esg_sample",
        "hf",
        "zero_shot",
        "true",
    )
    assert tags["model"] == "local" and tags["run_dir"] == str(run_dir) and tags["config_hash"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert copy.data.metrics == tracking.numeric_metrics(metrics)
    assert artifacts(other, copy.info.run_id) == {"config.yaml", "metrics.json", "predictions.jsonl"}

    board = run_cli(
        "esgexp.leaderboard",
        f"tracking.uri={other}",
        f"out_dir={tmp_path}/board",
        "format=csv",
        cwd=tmp_path,
        env=clean_env,
    )
    assert board.returncode == 0, board.stderr[-3000:]
    [row] = csv.DictReader((tmp_path / "board" / "leaderboard.csv").open())
    assert (row["dataset"], row["model"], row["backend"], row["strategy"]) == ("esg_sample", "local", "hf", "zero_shot")

    again = run_cli("esgexp.sync", str(run_dir), f"tracking.uri={other}", cwd=tmp_path, env=clean_env)
    assert again.returncode == 0 and f"already synced to run {copy.info.run_id} in {other}" in again.stdout
    assert only_run(other, "stores").info.run_id == copy.info.run_id

    # Back on the job's own server: the run it had opened gets what is pending, and equals the copy.
    mlflow_server.start()
    home = run_cli("esgexp.sync", str(run_dir), cwd=tmp_path, env=clean_env)
    assert home.returncode == 0, home.stderr[-3000:]
    assert f"synced to run {pending['run_id']} in {url} (the run it had opened)" in home.stdout
    run = only_run(url, "stores")
    assert run.info.run_id == pending["run_id"] and run.info.status == "FINISHED"
    assert (run.data.params, run.data.tags, run.data.metrics) == (copy.data.params, copy.data.tags, copy.data.metrics)
    assert artifacts(url, run.info.run_id) == artifacts(other, copy.info.run_id)
