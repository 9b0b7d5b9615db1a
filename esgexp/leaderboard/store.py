"""The runs the leaderboard reads: every FINISHED evaluation run of an MLflow store, and its run-folder files."""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from esgexp.core.outputs import json_lines
from esgexp.errors import UserError
from esgexp.tasks.kinds import KINDS, kind_of

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One finished MLflow run: its id, tags, params (the flattened config) and last metric values."""

    run_id: str
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    start_time: int = 0
    download_dir: Path | None = None  # where artifacts go when the run folder is gone (default: a new temp folder)
    files: dict[str, Path | None] = field(default_factory=dict, repr=False)
    downloads: Path | None = field(default=None, repr=False)
    # Set by leaderboard.table.board_groups: the item set it is ranked in and what tells it apart from
    # runs of the same model, strategy and scoring (e.g. ``limit=3``).
    item_set: str = ""
    variant: str = ""

    def param(self, key: str) -> str | None:
        """The param as logged, or None when missing or logged as None/null."""
        value = self.params.get(key)
        return None if value in (None, "", "None", "null") else value

    def file(self, name: str) -> Path | None:
        """``name`` from the run folder (tag ``run_dir``), else downloaded from the run's MLflow artifacts;
        None when neither has it."""
        if name not in self.files:
            self.files[name] = locate_file(self, name)
        return self.files[name]

    def folder(self) -> Path | None:
        """The run folder while it is there, else the folder its downloaded files share, holding what
        ``esgexp.analysis.compare`` reads (config.yaml, metrics.json, the per-item file: each fetched once, also for
        the page); None when one of those is missing."""
        run_dir = self.tags.get("run_dir")
        if run_dir and Path(run_dir).is_dir():
            return Path(run_dir)
        per_item = kind_of(self.tags.get("task")).scoring.records
        paths = [self.file(name) for name in ("config.yaml", "metrics.json", per_item)]
        return paths[0].parent if all(paths) else None

    def download_target(self) -> Path:
        """Where this run's artifacts go: ``download_dir/<run id>``, else one temporary folder for the run."""
        if self.downloads is None:
            self.downloads = (
                self.download_dir / self.run_id if self.download_dir else Path(tempfile.mkdtemp(prefix="esgexp-run-"))
            )
        return self.downloads

    def json_lines(self, name: str) -> list[dict]:
        path = self.file(name)
        if path is None:
            return []
        with path.open(encoding="utf-8") as handle:
            return [record for _, record in json_lines(handle, path)]


def locate_file(run: Run, name: str) -> Path | None:
    """The run folder's copy while the folder is there (its artifacts hold the same files), else the artifact."""
    run_dir = run.tags.get("run_dir")
    if run_dir and Path(run_dir).is_dir():
        return Path(run_dir) / name if (Path(run_dir) / name).is_file() else None
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    try:
        target = run.download_target()
        target.mkdir(parents=True, exist_ok=True)
        return Path(mlflow.artifacts.download_artifacts(run_id=run.run_id, artifact_path=name, dst_path=str(target)))
    except Exception as error:  # not logged, or the artifact store is gone
        log.debug("run %s has no %s: %s", run.run_id, name, error)
        return None


def local_store_path(uri: str) -> Path | None:
    """The file (sqlite) or folder (file store) a local tracking URI names; None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///"))
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    if "://" not in uri:
        return Path(uri)
    return None


def check_store(uri: str) -> None:
    """Refuse a local store that does not exist (reading it through MLflow would create it), or a file
    that is not an MLflow store (tracking.check_store_file)."""
    from esgexp.core.tracking import check_store_file

    check_store_file(uri)
    path = local_store_path(uri)
    if path is not None and not path.exists():
        raise UserError(
            f"no MLflow store at {path} (tracking.uri={uri}): nothing to list; point tracking.uri at the "
            "store your jobs logged to"
        )


def finished_runs(uri: str, latest_only: bool = True, download_dir: Path | None = None) -> list[Run]:
    """Every FINISHED evaluation run in ``uri``, newest first; training runs (task=finetune) and dataset
    builds (task=build) are left out.
    Artifacts of runs whose folder is gone are downloaded under ``download_dir``.

    With ``latest_only`` a config run several times (same ``config_hash`` tag) gives its newest run only.
    Raises UserError for a missing local store or one without any finished evaluation run."""
    check_store(uri)
    import mlflow

    mlflow.set_tracking_uri(uri)
    found = mlflow.search_runs(
        search_all_experiments=True,
        filter_string="attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        output_format="list",
    )
    seen: set[str] = set()
    runs = []
    for run in found:
        tags = dict(run.data.tags)
        kind = KINDS.get(tags.get("task"))
        if kind is None or not kind.scoring.ranked:  # training runs: curves, not scores; dataset builds: counts
            continue
        config_hash = tags.get("config_hash")
        if latest_only and config_hash:
            if config_hash in seen:
                continue
            seen.add(config_hash)
        runs.append(
            Run(
                run.info.run_id,
                tags,
                dict(run.data.params),
                dict(run.data.metrics),
                run.info.start_time or 0,
                download_dir,
            )
        )
    if not runs:
        kind = "evaluation runs (only training runs)" if found else "runs"
        raise UserError(f"no finished {kind} in {uri}")
    return runs
