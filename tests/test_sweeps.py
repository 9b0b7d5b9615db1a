"""Sweeps beyond one process, as a user runs them: Hydra's joblib and submitit launchers, and parallel
jobs sharing one sqlite MLflow store (created by whichever job comes first)."""

import json
import multiprocessing

import pytest
from cli import run_cli
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from omegaconf import OmegaConf

from esgexp.core import tracking


def esgexp(cwd, env, *args, timeout=300):
    """The sweep's launching process (tests/cli.py); the launchers' jobs run in processes of their own:
    joblib's workers (they write to its stderr, a file descriptor they inherit), one submission process per
    submitit job."""
    return run_cli("esgexp", *args, cwd=cwd, env=env, timeout=timeout)


@pytest.fixture(scope="module", autouse=True)
def joblib_workers():
    """joblib keeps its worker processes for the next sweep of this process; stopped after this module."""
    yield
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True)


def tiny_sweep(tmp_path, tiny_model_dir, *args):
    """A multirun of the tiny random Llama on two sample items per job, everything under ``tmp_path``."""
    return [
        "-m",
        *args,
        "model=local",
        f"model.path={tiny_model_dir}",
        "dataset.limit=2",
        "model.generation.max_new_tokens=2",
        "trainer.progress_bar=false",
        f"paths.root_dir={tmp_path}",
    ]


def finished_runs(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
    return runs


def job_folders(tmp_path):
    """The sweep's job folders (``hydra.sweep.dir/<job num>``) that hold metrics.json; one sweep folder."""
    metrics_files = sorted((tmp_path / "runs" / "esg_sample").glob("*/*/*/metrics.json"))
    assert len({p.parent.parent for p in metrics_files}) == 1
    assert all(json.loads(p.read_text())["n_items"] == 2 for p in metrics_files)
    return [p.parent for p in metrics_files]


def test_joblib_runs_jobs_in_parallel_against_one_fresh_sqlite_store_and_a_bad_job_does_not_end_it(
    tmp_path, clean_env, tiny_model_dir
):
    """Two jobs with a missing file, two good ones on two workers: the good ones finish into one store made
    by whichever comes first, each bad one says why in its own folder, the sweep exits 1."""
    from esgexp.core.config import BUNDLED_DIR

    good = BUNDLED_DIR / "esg_mcq_sample.csv"
    result = esgexp(
        tmp_path,
        clean_env,
        *tiny_sweep(
            tmp_path,
            tiny_model_dir,
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"dataset.path=/no/such.csv,{good}",
            "seed=1,2",
        ),
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in result.stdout
    output = result.stdout + result.stderr
    assert output.count("error: dataset.path=/no/such.csv: no such file or folder") == 2 and "Traceback" not in output
    assert "2 ok, 2 failed or not finished, of 4 jobs" in result.stderr
    sweep = next((tmp_path / "runs" / "esg_sample").glob("*/*"))
    for failed in ("0", "1"):  # each in its own folder, its reason in its own log file
        assert (sweep / failed / "FAILED").read_text().startswith("dataset.path=/no/such.csv: no such file or folder")
        assert "dataset.path=/no/such.csv: no such file" in (sweep / failed / "esgexp.log").read_text()
    folders = job_folders(tmp_path)
    assert [p.name for p in folders] == ["2", "3"]
    runs = finished_runs(tmp_path)
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]
    assert {r.data.tags["run_dir"] for r in runs} == {str(p) for p in folders}
    assert all((p / "esgexp.log").is_file() for p in folders)  # each job logs to its own folder


def test_a_bad_job_does_not_end_the_basic_launchers_sweep(tmp_path, clean_env, tiny_model_dir):
    """One job with a missing file, one good: the good one finishes, the bad one says why, the sweep exits 1."""
    from esgexp.core.config import BUNDLED_DIR

    good = BUNDLED_DIR / "esg_mcq_sample.csv"
    result = esgexp(
        tmp_path,
        clean_env,
        *tiny_sweep(tmp_path, tiny_model_dir, f"dataset.path=/no/such.csv,{good}"),
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("error: dataset.path=/no/such.csv: no such file or folder") == 1 and "Traceback" not in output
    assert "1 ok, 1 failed or not finished, of 2 jobs" in result.stderr
    sweep = next((tmp_path / "runs" / "esg_sample").glob("*/*"))
    assert (sweep / "0" / "FAILED").read_text().startswith("dataset.path=/no/such.csv: no such file or folder")
    assert (
        "dataset.path=/no/such.csv: no such file" in (sweep / "0" / "esgexp.log").read_text()
    )  # in the failing job's own log file
    assert json.loads((sweep / "1" / "metrics.json").read_text())["n_items"] == 2
    assert [r.data.tags["run_dir"] for r in finished_runs(tmp_path)] == [str(sweep / "1")]


def test_submitit_local_runs_each_job_as_its_own_submission(tmp_path, clean_env, tiny_model_dir):
    # submitit_local pickles each job and runs it in a new process; timeout_min (whole minutes) bounds a job:
    # it is signalled (and requeued) signal_delay_s=30 s before the end, so 2 leaves ample time for ~20 s.
    result = esgexp(
        tmp_path,
        clean_env,
        *tiny_sweep(
            tmp_path, tiny_model_dir, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=2", "seed=1,2"
        ),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folders = job_folders(tmp_path)
    assert [p.name for p in folders] == ["0", "1"]
    runs = finished_runs(tmp_path)
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]
    assert {r.data.tags["run_dir"] for r in runs} == {str(p) for p in folders}
    # A job's console output goes to its submitit folder, not the launching terminal.
    outputs = [p.read_text() for p in folders[0].parent.glob(".submitit/*/*_log.out")]
    assert sum("mlflow run:" in text for text in outputs) == 2


def open_store(uri, artifacts, barrier, results):
    barrier.wait()
    try:
        results.put(tracking.use_store(uri, artifacts, "sweep"))
    except Exception as error:  # reported to the test, which would otherwise only see a missing result
        results.put(f"failed: {error!r}")


def test_processes_opening_one_fresh_sqlite_store_at_once_share_one_experiment(tmp_path):
    # Forked: three processes of their own with mlflow already imported, none of which has opened this store.
    uri, n = f"sqlite:///{tmp_path}/mlruns/mlflow.db", 3
    fork = multiprocessing.get_context("fork")
    barrier, results = fork.Barrier(n), fork.Queue()
    processes = [
        fork.Process(target=open_store, args=(uri, str(tmp_path / "artifacts"), barrier, results)) for _ in range(n)
    ]
    for process in processes:
        process.start()
    ids = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    assert len(set(ids)) == 1 and not ids[0].startswith("failed"), ids
    assert [e.name for e in MlflowClient(uri).search_experiments()].count("sweep") == 1


def test_a_new_store_starts_from_the_migrated_template_and_gets_its_own_default_experiment(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    experiment_id = tracking.use_store(uri, str(tmp_path / "artifacts"), "sweep")
    client = MlflowClient(uri)
    experiments = {e.name: e for e in client.search_experiments()}
    assert sorted(experiments) == ["Default", "sweep"]
    # The Default experiment is this store's own, not the template's (whose folder is the user cache).
    assert "esgexp/mlflow" not in experiments["Default"].artifact_location
    assert experiments["sweep"].artifact_location == (tmp_path / "artifacts").resolve().as_uri()
    run = client.create_run(experiment_id)
    client.log_metric(run.info.run_id, "accuracy", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"accuracy": 0.5}
    # A file already there, even one that is not a store yet, is never replaced.
    other = tmp_path / "other.db"
    other.write_bytes(b"")
    tracking.seed_new_store(f"sqlite:///{other}")
    assert other.read_bytes() == b""
    assert not list(tmp_path.glob(".*.partial"))


def test_a_cache_that_cannot_be_written_leaves_the_new_store_to_mlflow(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    experiment_id = tracking.use_store(uri, str(tmp_path / "artifacts"), "sweep")
    assert MlflowClient(uri).get_experiment(experiment_id).name == "sweep"


def test_a_locked_store_is_retried(tmp_path, monkeypatch, caplog):
    locked = MlflowException("(sqlite3.OperationalError) database is locked")

    def fails_once(real):
        calls = []

        def call(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise locked
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(MlflowClient, "log_batch", fails_once(MlflowClient.log_batch))
    monkeypatch.setattr(MlflowClient, "set_terminated", fails_once(MlflowClient.set_terminated))
    cfg = OmegaConf.create(
        {
            "uri": f"sqlite:///{tmp_path}/mlruns/mlflow.db",
            "artifact_location": str(tmp_path / "artifacts"),
            "offline": False,
            "connect_timeout_s": 5,
        }
    )
    run = tracking.TrackedRun(cfg, tmp_path / "run", "locked", "job")
    with run.open({"seed": 1}, {"task": "mcq"}):
        run.log_metrics({"accuracy": 0.5})
    saved = MlflowClient(cfg.uri).get_run(run.run_id)
    assert (
        saved.info.status == "FINISHED"
        and saved.data.params == {"seed": "1"}
        and saved.data.metrics == {"accuracy": 0.5}
    )
    assert caplog.text.count("MLflow store busy") == 2
    assert run.tracked and not (tmp_path / "run" / tracking.PENDING_FILE).exists()

    with pytest.raises(MlflowException, match="Invalid"):  # any other error is not retried
        tracking.retry_locked(lambda: (_ for _ in ()).throw(MlflowException("Invalid value")))
