"""MLflow tracking: one run per job with the flattened config, tags, metrics and run-folder files."""

from __future__ import annotations

import hashlib
import logging
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def use_store(uri: str, artifact_location: str | None, experiment_name: str) -> str:
    """Point MLflow at ``uri`` and return the id of ``experiment_name``, creating it if needed."""
    import mlflow

    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name(experiment_name)
    if experiment is not None:
        return experiment.experiment_id
    location = None
    if artifact_location and is_local_store(uri):
        location = Path(artifact_location).resolve().as_uri()
    return mlflow.create_experiment(experiment_name, artifact_location=location)


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
    run = mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags)
    try:
        mlflow.log_params({k: str(v)[:MAX_PARAM_LENGTH] for k, v in params.items()})
        yield run
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into SystemExit
        mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    mlflow.end_run(status="FINISHED")


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
    mlflow.log_metrics(numeric, step=step)
    if info:
        mlflow.set_tags(info)
    for path in files:
        if path.is_file():
            mlflow.log_artifact(str(path))
