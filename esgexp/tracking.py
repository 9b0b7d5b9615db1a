"""MLflow tracking: one run per job with the flattened config, tags, metrics and run-folder files."""

from __future__ import annotations

import hashlib
import logging
import random
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

try:
    import fcntl
except ImportError:  # Windows: no inter-process lock
    fcntl = None

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def is_locked(error: BaseException) -> bool:
    """sqlite refused a write because another process holds the database (raised as is or inside MlflowException)."""
    return "database is locked" in str(error)


def retry_locked(call, *args, attempts: int = 8, **kwargs):
    """``call(*args, **kwargs)``, called again after a growing, jittered pause while sqlite reports the
    database locked (parallel jobs writing to one store); any other error, or the last one, is raised."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as error:
            if attempt == attempts - 1 or not is_locked(error):
                raise
            pause = min(0.2 * 2**attempt, 10.0) * random.uniform(0.5, 1.5)
            log.warning("MLflow store busy (%s): retrying in %.1f s", type(error).__name__, pause)
            time.sleep(pause)


@contextmanager
def store_lock(uri: str):
    """Held by one process at a time: an exclusive ``flock`` on ``<db>.lock`` next to a sqlite store (its
    folder is created); a no-op for other stores, and where ``fcntl`` is missing (Windows)."""
    if not uri.startswith("sqlite:///") or fcntl is None:
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def use_store(uri: str, artifact_location: str | None, experiment_name: str) -> str:
    """Point MLflow at ``uri`` and return the id of ``experiment_name``, creating it if needed.

    Under :func:`store_lock`, so that parallel jobs against a fresh sqlite file neither race on MLflow
    creating and migrating its tables (done by the first call in a process) nor on creating the experiment."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(uri)
    with store_lock(uri):
        experiment = retry_locked(mlflow.get_experiment_by_name, experiment_name)
        if experiment is not None:
            return experiment.experiment_id
        location = None
        if artifact_location and is_local_store(uri):
            location = Path(artifact_location).resolve().as_uri()
        try:
            return retry_locked(mlflow.create_experiment, experiment_name, artifact_location=location)
        except MlflowException as error:  # created meanwhile where there is no lock (a server store)
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return mlflow.get_experiment_by_name(experiment_name).experiment_id


def git_commit(cwd: str | Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


@contextmanager
def mlflow_run(tracking_cfg: DictConfig, experiment_name: str, run_name: str, params: dict, tags: dict):
    """An MLflow run for one job; it ends FAILED (or KILLED on Ctrl-C) if the job raises."""
    import mlflow

    experiment_id = use_store(tracking_cfg.uri, tracking_cfg.get("artifact_location"), experiment_name)
    run = retry_locked(mlflow.start_run, experiment_id=experiment_id, run_name=run_name, tags=tags)
    try:
        retry_locked(mlflow.log_params, {k: str(v)[:MAX_PARAM_LENGTH] for k, v in params.items()})
        yield run
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into SystemExit
        end_run(run.info.run_id, "KILLED")
        raise
    except BaseException:
        end_run(run.info.run_id, "FAILED")
        raise
    end_run(run.info.run_id, "FINISHED")


def end_run(run_id: str, status: str) -> None:
    """End the active run with ``status``. ``mlflow.end_run`` takes the run off its stack before it writes
    the status, so a locked store is retried on the write alone."""
    import mlflow

    try:
        mlflow.end_run(status=status)
    except Exception as error:
        if not is_locked(error):
            raise
        retry_locked(mlflow.MlflowClient().set_terminated, run_id, status)


MAX_METRIC_NAME = 250


def metric_name(key: str) -> str:
    """``key`` as MLflow accepts it: ``@`` spelled ``_at_`` (``recall_at_5``), other refused characters
    ``_``, no empty or ``.``/``..`` path segment, and at most 250 characters (a long one ends in a hash)."""
    name = re.sub(r"[^\w\-. /:]", "_", key.replace("@", "_at_"))
    name = "/".join(part if part.strip(".") else "_" for part in name.split("/"))
    if len(name) > MAX_METRIC_NAME:
        name = name[: MAX_METRIC_NAME - 17] + "~" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return name


def log_results(metrics: dict, files: list[Path], info: dict[str, str], step: int | None = None) -> None:
    """Log the numeric metrics (at ``step``: a training run's last step), ``info`` as tags and the
    given files as artifacts of the active run."""
    import mlflow

    numeric = {
        metric_name(k): float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v  # NaN: undefined, not logged
    }
    retry_locked(mlflow.log_metrics, numeric, step=step)
    if info:
        retry_locked(mlflow.set_tags, info)
    for path in files:
        if path.is_file():
            retry_locked(mlflow.log_artifact, str(path))
