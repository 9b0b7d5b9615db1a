"""``python -m esgexp.sync RUN_DIR [RUN_DIR ...] [tracking.uri=URI | paths.root_dir=DIR]``: log finished run
folders that were not tracked while they ran (``tracking.offline=true``, or a tracking server that went away)
to MLflow. A sweep's folder (``-m``) stands for its job folders.

Each folder's ``tracking_pending.json`` (params, tags, metrics, artifact paths) goes to the run's own
``tracking.uri`` (from its config.yaml; ``tracking.KEY=VALUE`` arguments override it, and ``paths.root_dir=DIR``
or ``paths.mlruns_dir=DIR`` names the default store under that folder, as for a job). Into the run the job
had opened there, when it still exists, goes what is pending; any other store gets the whole run (what
reached the job's store before it stopped answering, kept under ``sent``, and what is pending) in a new
run, or in the one a sync cut short had made. What a run already holds is not logged twice.
Each store the folder was synced to is recorded in ``tracking_synced.json`` (keyed by the store's URI: the
MLflow run id, experiment and time): a second sync to the same store does nothing, a sync to another
store logs the run there too. A folder whose job failed or did not finish is refused. Exit status 2 when
any folder was refused.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from esgexp.core.outputs import write_json
from esgexp.core.sweep import FAILED_FILE
from esgexp.core.tracking import (
    PENDING_FILE,
    SYNCED_FILE,
    check_tracking,
    empty_record,
    is_server,
    retry_locked,
    unreachable,
    use_store,
)
from esgexp.errors import UserError
from esgexp.jobs.settings import check_settings

SETTING = re.compile(r"^([\w.]+)=(.*)$")  # KEY=VALUE (an existing folder of that name is a folder)
STORE_FOLDERS = ("paths.root_dir", "paths.mlruns_dir")  # the default store under them: conf/tracking/mlflow.yaml


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


def tracking_settings(run_dir: Path, overrides: dict[str, str]) -> DictConfig:
    """The run's ``tracking`` node from its config.yaml, with the command line's ``tracking.KEY=VALUE`` on top."""
    saved = OmegaConf.load(run_dir / "config.yaml").get("tracking")
    if saved is None:
        raise UserError(f"{run_dir / 'config.yaml'} has no tracking settings")
    unknown = sorted(set(overrides) - set(saved))
    if unknown:
        raise UserError(f"unknown setting tracking.{unknown[0]} (known: {', '.join('tracking.' + k for k in saved)})")
    merged = OmegaConf.merge(saved, OmegaConf.from_dotlist([f"{k}={v}" for k, v in overrides.items()]))
    merged.offline = False  # syncing is logging
    check_settings(OmegaConf.create({"tracking": merged}))
    return merged


def check_folder(run_dir: Path) -> dict | None:
    """The folder's pending record once it is a finished run; None when it has none (it was tracked while
    it ran: ``nothing_to_do`` says so); UserError for a folder that cannot be synced."""
    from esgexp.data.text_files import existing_folder

    if not (existing_folder(run_dir, holding="of a run (its config.yaml)") / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml)")
    if (run_dir / FAILED_FILE).is_file():
        reason = (run_dir / FAILED_FILE).read_text(encoding="utf-8").strip()
        raise UserError(
            f"{run_dir} is marked FAILED ({reason}): a failed job is not logged; fix it and run the job again"
        )
    if not (run_dir / PENDING_FILE).is_file():
        return None
    pending = read_json(run_dir / PENDING_FILE)
    if pending.get("status") != "FINISHED":
        state = "did not finish (killed?)" if pending.get("status") == "RUNNING" else f"ended {pending.get('status')}"
        raise UserError(f"{run_dir}: the job {state}; only a finished run is logged: run the job again")
    missing = [a["path"] for a in pending["artifacts"] if not (run_dir / a["path"]).exists()]
    if missing:
        raise UserError(f"{run_dir}: {missing[0]} is listed in {PENDING_FILE} but missing from the run folder")
    return pending


def synced_stores(run_dir: Path) -> dict[str, dict]:
    """``{store URI: {run_id, experiment_id, synced_at}}`` of the stores the folder was synced to (a file
    written before syncs were kept per store holds one record with its ``uri``)."""
    path = run_dir / SYNCED_FILE
    if not path.is_file():
        return {}
    record = read_json(path)
    if "uri" in record:
        return {record["uri"]: {k: v for k, v in record.items() if k != "uri"}}
    return record.get("stores", {})


def already_synced(run_dir: Path, uri: str, record: dict) -> str:
    return f"{run_dir}: already synced to run {record['run_id']} in {uri} on {record['synced_at']}: nothing to do"


def nothing_to_do(run_dir: Path) -> str:
    if not (run_dir / "metrics.json").is_file():
        raise UserError(f"{run_dir}: the job did not finish (no metrics.json): nothing to sync")
    return f"{run_dir}: tracked while it ran (no {PENDING_FILE}): nothing to do"


# Which run of the store a sync logs into (``target_run``), as the sync's report names it.
OPENED, RESUMED, NEW = "the run it had opened", "the run a sync cut short had made", "a new run"


def whole_run(pending: dict, run_dir: Path, uri: str) -> dict:
    """The run as the job logged it: what reached the job's store (``sent``) and what is pending. A folder
    written before ``sent`` was kept, whose run had been opened in its store, is refused."""
    if "sent" not in pending and pending.get("run_id"):
        raise UserError(
            f"{run_dir}: its params and first tags went to run {pending['run_id']} in {pending['uri']} only "
            f"(the folder predates the record of them in {PENDING_FILE}), so the whole run cannot be rebuilt "
            f"in {uri}: sync it to {pending['uri']}, or run the job again"
        )
    sent = pending.get("sent", empty_record())
    return {
        "params": {**sent["params"], **pending["params"]},
        "tags": {**sent["tags"], **pending["tags"]},
        "metrics": sent["metrics"] + pending["metrics"],
        "artifacts": sent["artifacts"] + pending["artifacts"],
    }


def holds(client, run_id: str | None) -> bool:
    """Whether the store holds run ``run_id`` (not when deleted from it, or another database behind its address)."""
    from mlflow.exceptions import MlflowException

    if not run_id:
        return False
    try:
        client.get_run(run_id)
    except MlflowException:
        return False
    return True


def target_run(client, pending: dict, uri: str, experiment_id: str, run_dir: Path) -> tuple[str, str]:
    """The run to log into and which one it is: the one the job opened in this store (OPENED), else the one
    a sync cut short made here (RESUMED), else a new one (NEW), whose id goes under ``sync_runs`` in the
    pending file at once so that a sync cut short goes on in it."""
    if pending.get("uri") == uri and holds(client, pending.get("run_id")):
        return pending["run_id"], OPENED
    made = pending.get("sync_runs", {}).get(uri)
    if holds(client, made):
        return made, RESUMED
    run = retry_locked(
        client.create_run,
        experiment_id,
        start_time=pending["start_time"],
        tags=whole_run(pending, run_dir, uri)["tags"],
        run_name=pending["run_name"],
    )
    sync_runs = {**pending.get("sync_runs", {}), uri: run.info.run_id}
    write_json(run_dir / PENDING_FILE, {**pending, "sync_runs": sync_runs})
    return run.info.run_id, NEW


def new_metrics(client, run_id: str, metrics: list[dict], existed: bool) -> list:
    """The pending metrics as MLflow Metrics, less those the run already holds (same key, step, time, value)."""
    from mlflow.entities import Metric

    held: set[tuple] = set()
    if existed:
        for key in {m["key"] for m in metrics}:
            held.update((m.key, m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, key))
    return [
        Metric(m["key"], m["value"], m["timestamp"], m["step"])
        for m in metrics
        if (m["key"], m["step"], m["timestamp"], m["value"]) not in held
    ]


def sync_run(run_dir: Path, overrides: dict[str, str]) -> str:
    """Log one run folder's pending record; return the line that says what was done. A server that stops
    answering during the sync leaves the folder pending: a second sync goes on in the same run."""
    pending = check_folder(run_dir)
    if pending is None:
        return nothing_to_do(run_dir)
    settings = tracking_settings(run_dir, overrides)
    uri = str(settings.uri)
    synced = synced_stores(run_dir)
    if uri in synced:
        return already_synced(run_dir, uri, synced[uri])
    check_tracking(settings)
    try:
        return log_pending(run_dir, pending, uri, settings.get("artifact_location"))
    except Exception:
        reason = is_server(uri) and unreachable(uri, float(settings.connect_timeout_s))
        if not reason:
            raise
        raise UserError(
            f"{run_dir}: the tracking server {uri} stopped answering during the sync ({reason}); "
            "nothing is lost: sync the folder again once the server is back"
        ) from None


def log_pending(run_dir: Path, pending: dict, uri: str, artifact_location: str | None) -> str:
    """Log ``pending`` into its run in ``uri`` (``target_run``: the job's own run gets what is pending,
    another the whole run), end that run with the job's status and write tracking_synced.json; return
    what was done."""
    import mlflow
    from mlflow.entities import Param, RunTag

    experiment_id = use_store(uri, artifact_location, pending["experiment_name"])
    client = mlflow.MlflowClient(uri)
    run_id, into = target_run(client, pending, uri, experiment_id, run_dir)
    record = pending if into == OPENED else whole_run(pending, run_dir, uri)
    metrics = new_metrics(client, run_id, record["metrics"], into != NEW)
    params = [Param(k, v) for k, v in record["params"].items()]
    tags = [RunTag(k, v) for k, v in record["tags"].items()]
    retry_locked(client.log_batch, run_id, metrics=metrics, params=params, tags=tags)
    for artifact in record["artifacts"]:
        path = run_dir / artifact["path"]
        upload = client.log_artifacts if path.is_dir() else client.log_artifact
        retry_locked(upload, run_id, str(path), artifact["artifact_path"])
    retry_locked(client.set_terminated, run_id, pending["status"], pending["end_time"])
    synced_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    stores = {**synced_stores(run_dir), uri: {"experiment_id": experiment_id, "run_id": run_id, "synced_at": synced_at}}
    write_json(run_dir / SYNCED_FILE, {"stores": stores})
    return (
        f"{run_dir}: synced to run {run_id} in {uri} ({into}): {len(params)} params, {len(metrics)} metric values, "
        f"{len(record['artifacts'])} artifacts"
    )


def store_under(folders: dict[str, str]) -> dict[str, str]:
    """``tracking.uri`` and ``tracking.artifact_location`` of the default store (conf/tracking/mlflow.yaml)
    under ``{"paths.root_dir": DIR}`` or ``{"paths.mlruns_dir": DIR}`` (``~`` expanded, made absolute); a
    root_dir that is not a folder is a UserError."""
    from esgexp.core.config import CONF_DIR, register_resolvers
    from esgexp.data.text_files import existing_folder

    folders = {key: Path(value).expanduser().absolute() for key, value in folders.items()}
    if "paths.root_dir" in folders:
        existing_folder(folders["paths.root_dir"], "paths.root_dir")
    register_resolvers()
    cfg = OmegaConf.create(
        {
            "paths": OmegaConf.load(CONF_DIR / "paths/default.yaml"),
            "tracking": OmegaConf.load(CONF_DIR / "tracking/mlflow.yaml"),
        }
    )
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}={value}" for key, value in folders.items()]))
    return {"uri": str(cfg.tracking.uri), "artifact_location": str(cfg.tracking.artifact_location)}


def split_items(items: list[str]) -> tuple[list[str], dict[str, str]]:
    """The run folders among ``items`` and the tracking settings the others give (``tracking.KEY=VALUE``
    over the store ``paths.root_dir=DIR`` or ``paths.mlruns_dir=DIR`` names); a UserError for another
    ``KEY=VALUE``."""
    folders, tracking, paths = [], {}, {}
    for item in items:
        setting = SETTING.match(item)
        if setting is None or Path(item).is_dir():
            folders.append(item)
        elif setting.group(1).startswith("tracking."):
            tracking[setting.group(1).removeprefix("tracking.")] = setting.group(2)
        elif setting.group(1) in STORE_FOLDERS:
            paths[setting.group(1)] = setting.group(2)
        else:
            raise UserError(
                f"{item}: esgexp-sync takes run folders, tracking.KEY=VALUE and the store's folder "
                f"({'=DIR or '.join(STORE_FOLDERS)}=DIR), not {setting.group(1)}"
            )
    return folders, {**(store_under(paths) if paths else {}), **tracking}


def parse_args(argv: list[str] | None) -> tuple[list[Path], dict[str, str]]:
    parser = argparse.ArgumentParser(
        prog="python -m esgexp.sync",
        description="Log finished run folders that were not tracked while they ran (tracking.offline=true, or a "
        "tracking server that went away) to MLflow, once each.",
    )
    parser.add_argument(
        "items",
        nargs="+",
        metavar="RUN_DIR | tracking.KEY=VALUE | paths.root_dir=DIR",
        help="run folders (or a sweep's folder) to log; tracking.uri=URI (or another tracking.KEY=VALUE) "
        "overrides their config; paths.root_dir=DIR (or paths.mlruns_dir=DIR) logs into the store under DIR "
        "(DIR/mlruns/mlflow.db), as a job run with it would",
    )
    folders, overrides = split_items(parser.parse_args(argv).items)
    run_dirs = [job for item in folders for job in job_folders(Path(item))]
    if not run_dirs:
        parser.error("name at least one RUN_DIR")
    return run_dirs, overrides


def job_folders(folder: Path) -> list[Path]:
    """``folder`` itself, or for a sweep's folder (Hydra's multirun.yaml, no config.yaml) its job folders."""
    if (folder / "config.yaml").is_file() or not (folder / "multirun.yaml").is_file():
        return [folder]
    return sorted((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def main(argv: list[str] | None = None) -> int:
    run_dirs, overrides = parse_args(argv)
    refused = 0
    for run_dir in run_dirs:
        try:
            print(sync_run(run_dir, overrides), flush=True)
        except UserError as error:
            refused += 1
            print(f"error: {error}", file=sys.stderr, flush=True)
    if refused and len(run_dirs) > 1:
        print(f"error: {refused} of {len(run_dirs)} run folders not synced", file=sys.stderr)
    return 2 if refused else 0


def cli() -> None:
    """``esgexp-sync`` and ``python -m esgexp.sync``."""
    from esgexp.cli.command import run_command

    run_command(lambda: sys.exit(main()), "sync", [])


if __name__ == "__main__":
    cli()
