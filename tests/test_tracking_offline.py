"""A tracking server that does not answer: one clear error before any work; tracking.offline=true and
`python -m esgexp.sync` to log run folders later, once each, for every job kind."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli import run_cli
from conftest import compose_config
from omegaconf import OmegaConf

from esgexp.cli import sync
from esgexp.core import tracking
from esgexp.errors import UserError
from esgexp.run import run_job

# The job kinds, each on a bundled sample, the cheapest way (the tiny model where one is needed).
FT = (
    "experiment=finetune_sustainableqa",
    "dataset=sustainableqa_sample",
    "model=local",
    "trainer.precision=32-true",
    "train.max_seq_len=256",
    "train.val_every_n_steps=2",
    "train.val_generate_items=1",
    "train.val_max_new_tokens=2",
    "train.batch_size=4",
    "train.train_limit=8",
    "train.val_limit=4",
    "trainer.max_steps=2",
    "trainer.log_every_n_steps=1",
)
# qa shares mcq's GenerationJob and its tracking; esgbench_score is also the CLI test's job.
KINDS = {
    "mcq": (("model=local", "scoring=logprob", "dataset.limit=3"), {"predictions.jsonl"}),
    "retrieval": (("experiment=climretrieve_retrieval", "dataset=climretrieve_sample"), {"rankings.jsonl"}),
    "esgbench_score": (
        ("experiment=esgbench_score", "dataset=esgbench_sample", "predictions=${bundled:esgbench/preds_sample.jsonl}"),
        {"predictions.jsonl"},
    ),
    "finetune": (FT, {"train_report.json", "val_generations.jsonl", "adapter"}),
}


def closed_port() -> int:
    """A local port nothing listens on: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(cwd: Path, env: dict, module: str, *args: str, timeout: float = 300):
    """``python -m module args`` in ``cwd`` (run in this process: tests/cli.py)."""
    return run_cli(module, *args, cwd=cwd, env=env, timeout=timeout)


def store_runs(uri: str, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def test_an_unreachable_tracking_server_is_one_clear_error_before_any_work(tmp_path, clean_env):
    uri = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = command(tmp_path, clean_env, "esgexp", f"tracking.uri={uri}", "dataset.limit=3", timeout=60)
    seconds = time.monotonic() - started
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert output.count(f"tracking.uri={uri}") == 1 and "Traceback" not in output and "urllib3" not in output
    assert (
        "Connection refused" in result.stderr
        and "tracking.offline=true" in result.stderr
        and "python -m esgexp.sync" in result.stderr
    )
    assert seconds < 20, f"took {seconds:.1f} s"
    [log] = tmp_path.rglob("esgexp.log")  # the run folder has the error and nothing of the job's work
    assert f"tracking.uri={uri}" in log.read_text()
    assert not {"config.yaml", "predictions.jsonl", "metrics.json"} & {p.name for p in log.parent.iterdir()}


def test_a_server_that_accepts_but_never_answers_times_out_and_an_error_status_is_an_answer():
    with socket.socket() as silent:  # the kernel completes the connection; nobody ever reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        assert tracking.unreachable(f"http://127.0.0.1:{silent.getsockname()[1]}", 0.5) == "no answer within 0.5 s"
        assert time.monotonic() - started < 5

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert tracking.unreachable(f"http://127.0.0.1:{server.server_address[1]}/", 2) is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def mlflow_http_env(monkeypatch):
    for name in (
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    ):
        monkeypatch.setenv(name, "unset by the test")  # restored to its value before the test at teardown


def test_mlflows_own_retries_to_a_lost_server_take_seconds_not_minutes(tmp_path, mlflow_http_env):
    """The job's settings reach mlflow: its client gives up on a refused server in seconds (its defaults
    retry 7 times with a growing pause, about 4 minutes)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    cfg = compose_config(tmp_path, f"tracking.uri=http://127.0.0.1:{closed_port()}")
    with pytest.raises(UserError, match="does not answer"):
        tracking.check_tracking(cfg.tracking)
    assert (os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == ("2", "15")
    started = time.monotonic()
    with pytest.raises(MlflowException):
        MlflowClient(cfg.tracking.uri).get_experiment_by_name("esg_sample")
    assert time.monotonic() - started < 15


def test_offline_cli_run_then_sync_per_store_and_a_second_sync_to_a_store_does_nothing(tmp_path, clean_env, empty_db):
    """On ESGBench scoring (no model: the cheapest job); the other kinds are synced below."""
    run_dir = tmp_path / "run"
    job = command(
        tmp_path,
        clean_env,
        "esgexp",
        "tracking.offline=true",
        *KINDS["esgbench_score"][0],
        "dataset.limit=3",
        f"hydra.run.dir={run_dir}",
    )
    assert job.returncode == 0, job.stderr[-3000:]
    assert "mlflow run: not yet tracked (tracking.offline=true)" in job.stdout
    assert f"python -m esgexp.sync {run_dir}" in job.stdout
    assert not (tmp_path / "mlruns").exists(), "offline: the MLflow store is not touched"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["n_items"] == 3 and len((run_dir / "predictions.jsonl").read_text().splitlines()) == 3
    for store in (tmp_path / "mlruns", tmp_path / "other"):  # two stores with no run (tables made: no migration)
        store.mkdir()
        shutil.copy(empty_db, store / "mlflow.db")

    down = f"http://127.0.0.1:{closed_port()}"
    refused = command(tmp_path, clean_env, "esgexp.sync", str(run_dir), f"tracking.uri={down}", timeout=60)
    assert (
        refused.returncode == 2
        and refused.stderr.count(f"tracking.uri={down}") == 1
        and "Traceback" not in refused.stderr
    )
    assert not (run_dir / tracking.SYNCED_FILE).exists()

    first = command(tmp_path, clean_env, "esgexp.sync", str(run_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"  # the run's own tracking.uri, from its config.yaml
    experiment = OmegaConf.load(run_dir / "config.yaml").experiment_name
    [run] = store_runs(uri, experiment)
    assert f"{run_dir}: synced to run {run.info.run_id} in {uri} (a new run)" in first.stdout
    assert run.info.status == "FINISHED" and run.info.run_name == "score/preds_sample.jsonl"
    assert run.data.metrics == pytest.approx(tracking.numeric_metrics(metrics))
    assert run.data.params["dataset.limit"] == "3" and run.data.params["tracking.offline"] == "True"
    assert (
        run.data.tags["task"] == "esgbench_score"
        and run.data.tags["run_dir"] == str(run_dir)
        and "mlflow.user" in run.data.tags
    )
    from mlflow import MlflowClient

    listed = {a["path"] for a in json.loads((run_dir / tracking.PENDING_FILE).read_text())["artifacts"]}
    assert (
        {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)}
        == listed
        >= {"config.yaml", "metrics.json", "predictions.jsonl"}
    )
    assert json.loads((run_dir / tracking.SYNCED_FILE).read_text())["stores"][uri]["run_id"] == run.info.run_id

    second = command(tmp_path, clean_env, "esgexp.sync", str(run_dir))
    assert (
        second.returncode == 0
        and f"already synced to run {run.info.run_id} in {uri}" in second.stdout
        and "nothing to do" in second.stdout
    )
    assert [r.info.run_id for r in store_runs(uri, experiment)] == [run.info.run_id]

    # Syncs are kept per store: another store still gets the run, once.
    other = f"sqlite:///{tmp_path}/other/mlflow.db"
    to_other = command(tmp_path, clean_env, "esgexp.sync", str(run_dir), f"tracking.uri={other}")
    assert to_other.returncode == 0, to_other.stderr[-3000:]
    [copy] = store_runs(other, experiment)
    assert f"{run_dir}: synced to run {copy.info.run_id} in {other} (a new run)" in to_other.stdout
    assert copy.data.metrics == run.data.metrics and copy.info.status == "FINISHED"
    again = command(tmp_path, clean_env, "esgexp.sync", str(run_dir), f"tracking.uri={other}")
    assert again.returncode == 0 and f"already synced to run {copy.info.run_id} in {other}" in again.stdout
    assert len(store_runs(other, experiment)) == 1 and len(store_runs(uri, experiment)) == 1
    synced = json.loads((run_dir / tracking.SYNCED_FILE).read_text())["stores"]
    assert {k: v["run_id"] for k, v in synced.items()} == {uri: run.info.run_id, other: copy.info.run_id}


@pytest.fixture(scope="module")
def synced_store(tmp_path_factory, empty_db) -> str:
    """One sqlite store the tests below sync into (creating a store costs seconds); runs told apart by run_dir."""
    store = shutil.copy(empty_db, tmp_path_factory.mktemp("synced") / "mlflow.db")
    return f"sqlite:///{store}"


def synced_runs(uri: str, run_dir: Path) -> list:
    from mlflow import MlflowClient

    return MlflowClient(uri).search_runs(
        [e.experiment_id for e in MlflowClient(uri).search_experiments()], f"tags.run_dir = '{run_dir}'"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_every_job_kind_runs_offline_and_syncs_to_the_uri_given(kind, tmp_path, tiny_model_dir, synced_store, capsys):
    overrides, files = KINDS[kind]
    model = [f"model.path={tiny_model_dir}"] if "model=local" in overrides else []
    cfg = compose_config(tmp_path, *overrides, *model, "tracking.offline=true")
    metrics = run_job(cfg)
    run_dir = tmp_path / "run"
    assert "not yet tracked (tracking.offline=true)" in capsys.readouterr().out
    pending = json.loads((run_dir / tracking.PENDING_FILE).read_text())
    assert pending["status"] == "FINISHED" and pending["run_id"] is None and pending["tags"]["task"] == cfg.task

    assert sync.main([str(run_dir), f"tracking.uri={synced_store}"]) == 0
    [run] = synced_runs(synced_store, run_dir)
    assert run.info.status == "FINISHED" and run.data.tags["task"] == cfg.task
    final = tracking.numeric_metrics(metrics)
    assert {k: v for k, v in run.data.metrics.items() if k in final} == pytest.approx(final)
    from mlflow import MlflowClient

    client = MlflowClient(synced_store)
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"config.yaml", "metrics.json", *files}
    if kind == "finetune":
        # Lightning's points at steps 0 and 1, then the run's final value at its last step, 2.
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss")) == [0, 1, 2]
        assert {a.path for a in client.list_artifacts(run.info.run_id, "adapter")} >= {
            "adapter/adapter_config.json",
            "adapter/esgexp_adapter.json",
        }


def spoiled(template: Path, folder: Path, how: str) -> Path:
    """A copy of the finished offline run ``template`` at ``folder``, spoiled ``how``."""
    shutil.copytree(template, folder)
    pending_file = folder / tracking.PENDING_FILE
    if how == "marked FAILED":
        (folder / "FAILED").write_text("UserError: every item failed\n")
    elif how in ("RUNNING", "FAILED"):
        pending_file.write_text(json.dumps({**json.loads(pending_file.read_text()), "status": how}))
    elif how == "artifact gone":
        (folder / "predictions.jsonl").unlink()
    elif how == "not a run folder":
        (folder / "config.yaml").unlink()
    return folder


REFUSALS = {
    "marked FAILED": "is marked FAILED (UserError: every item failed): a failed job is not logged",
    "RUNNING": "the job did not finish (killed?); only a finished run is logged",
    "FAILED": "the job ended FAILED; only a finished run is logged",
    "artifact gone": "predictions.jsonl is listed in tracking_pending.json but missing from the run folder",
    "not a run folder": "is not a run folder (no config.yaml)",
}


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    """A finished offline run folder (ESGBench scoring: no model), never synced: tests sync copies of it."""
    root = tmp_path_factory.mktemp("offline")
    run_job(compose_config(root, *KINDS["esgbench_score"][0], "tracking.offline=true"))
    return root / "run"


def test_sync_refuses_each_folder_that_is_not_a_finished_run_and_syncs_the_others(
    offline_run, tmp_path, synced_store, capsys
):
    good = shutil.copytree(offline_run, tmp_path / "good")
    bad = {how: spoiled(offline_run, tmp_path / how.replace(" ", "_"), how) for how in REFUSALS}
    assert sync.main([*map(str, bad.values()), str(good), f"tracking.uri={synced_store}"]) == 2
    out, err = capsys.readouterr()
    for how, folder in bad.items():
        assert f"error: {folder}" in err and REFUSALS[how] in err, how
        assert not (folder / tracking.SYNCED_FILE).exists()
    assert f"error: {len(REFUSALS)} of {len(REFUSALS) + 1} run folders not synced" in err
    assert f"{good}: synced to run" in out
    # Every copy carries the template's run_dir tag: one run with it means none of the spoiled ones was logged.
    assert len(synced_runs(synced_store, offline_run)) == 1

    assert sync.main([str(offline_run), "tracking.url=http://x"]) == 2
    assert "unknown setting tracking.url (known: tracking.uri," in capsys.readouterr().err


def test_a_sweep_folder_stands_for_its_job_folders(offline_run, tmp_path, synced_store, capsys):
    sweep = tmp_path / "sweep"
    for job in ("0", "1"):
        shutil.copytree(offline_run, sweep / job)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert sync.main([str(sweep), f"tracking.uri={synced_store}"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines()] == [str(sweep / "0"), str(sweep / "1")]
    assert all((sweep / job / tracking.SYNCED_FILE).is_file() for job in ("0", "1"))


def test_a_store_folder_names_the_store_under_it_and_another_setting_is_refused(
    offline_run, tmp_path, empty_db, capsys
):
    """``paths.root_dir=DIR`` (an existing folder) is the store DIR/mlruns/mlflow.db, as for a job; not a run folder."""
    root = tmp_path / "project"
    (root / "mlruns").mkdir(parents=True)
    shutil.copy(empty_db, root / "mlruns" / "mlflow.db")
    run = shutil.copytree(offline_run, tmp_path / "run")
    assert sync.main([str(run), f"paths.root_dir={root}"]) == 0
    assert f"{run}: synced to run " in capsys.readouterr().out
    assert len(synced_runs(f"sqlite:///{root}/mlruns/mlflow.db", offline_run)) == 1
    with pytest.raises(UserError, match=re.escape(f"paths.root_dir={tmp_path}/gone: no such file or folder")):
        sync.main([str(run), f"paths.root_dir={tmp_path}/gone"])
    with pytest.raises(
        UserError, match=re.escape("dataset.limit=3: esgexp-sync takes run folders, tracking.KEY=VALUE")
    ):
        sync.main([str(run), "dataset.limit=3"])
