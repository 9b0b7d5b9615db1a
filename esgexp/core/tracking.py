"""MLflow tracking: one run per job with the flattened config, tags, metrics and run-folder files.

A tracking server is checked before a job does any work (``check_tracking``). With
``tracking.offline=true``, or from the moment the server stops answering or a local store's disk is full,
a job's ``TrackedRun`` keeps what it would log in ``<run folder>/tracking_pending.json`` and the job goes
on; ``python -m esgexp.sync`` logs it later. A local store that is not an MLflow database, or cannot be
written, is one user error (``store_mistake``) before any work.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import shutil
import sqlite3
import subprocess
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from omegaconf import DictConfig

from esgexp.core.outputs import NoSpace, is_full, make_folder, mount_point, unwritable, write_json
from esgexp.core.rules import Flag, Integer, Number, StoreURI, broken
from esgexp.errors import UserError, one_line

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000
# In the run folder: what a run not (fully) tracked would have logged; after a sync, where it went.
PENDING_FILE = "tracking_pending.json"
SYNCED_FILE = "tracking_synced.json"
# mlflow's wait before retry n is this factor times 2**(n-1) seconds (its default 2 over 7 retries: ~4 min).
HTTP_BACKOFF_FACTOR = 1
# The tracking group's settings (conf/tracking/), checked by check_tracking and with every job's settings.
TRACKING_RULES = {
    "tracking.uri": StoreURI(),
    "tracking.offline": Flag(),
    "tracking.connect_timeout_s": Number(0, above=True),
    "tracking.http_timeout_s": Integer(1),
    "tracking.http_max_retries": Integer(0),
}


def is_local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def is_server(uri: str) -> bool:
    """Whether ``uri`` is a tracking server reached over HTTP(S)."""
    return uri.startswith(("http://", "https://"))


def unreachable(uri: str, timeout_s: float) -> str | None:
    """Why the tracking server at ``uri`` does not answer within ``timeout_s`` seconds (None: it answers).
    Any HTTP reply counts as an answer, an error status included (a proxy, a login page). TLS is checked
    as mlflow checks it (MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH)."""
    import socket
    import ssl
    import urllib.error
    import urllib.request

    context = None
    if uri.startswith("https://"):
        context = ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
        if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s, context=context):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return f"no answer within {timeout_s:g} s"
        return getattr(reason, "strerror", None) or str(reason)


def check_tracking(tracking_cfg: DictConfig, offline_hint: bool = False) -> None:
    """Before a job (or a sync) does any work: set mlflow's HTTP timeout and retries from ``tracking.http_*``
    (for every request this process makes, e.g. reading an adapter's run) and refuse, naming the URI and
    the ways out (``offline_hint``, for a job: also running offline), a tracking server that does not answer
    within ``tracking.connect_timeout_s``; with ``tracking.offline=true`` the server is not asked."""
    from omegaconf import OmegaConf

    found = broken(OmegaConf.create({"tracking": OmegaConf.to_container(tracking_cfg, resolve=True)}), TRACKING_RULES)
    if found:  # the uri's scheme, the timeouts
        raise UserError("; ".join(found))
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(int(tracking_cfg.http_timeout_s))
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(int(tracking_cfg.http_max_retries))
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = str(HTTP_BACKOFF_FACTOR)
    uri = str(tracking_cfg.uri)
    if tracking_cfg.get("offline") or not is_server(uri):
        return
    reason = unreachable(uri, float(tracking_cfg.connect_timeout_s))
    if reason:
        raise UserError(
            f"tracking.uri={uri}: the MLflow tracking server does not answer ({reason}; waited up to "
            f"tracking.connect_timeout_s={tracking_cfg.connect_timeout_s} s). Start the server or fix tracking.uri"
            + (
                ", or run with tracking.offline=true and log the run folder later: python -m esgexp.sync RUN_DIR"
                if offline_hint
                else ""
            )
        )


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


STORE_FIX = "point tracking.uri at a store you can write to (default: sqlite:///<paths.mlruns_dir>/mlflow.db)"
SQLITE_HEADER = b"SQLite format 3\0"


def sqlite_path(uri: str) -> Path | None:
    """The file a ``sqlite:///`` tracking URI names; None for other stores."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextmanager
def store_lock(uri: str):
    """Held by one process at a time: an exclusive lock on ``<db>.lock`` next to a sqlite store (its
    folder is created; filelock's ``flock``); a no-op for other stores. UserError where the folder or
    the lock file cannot be written."""
    from filelock import FileLock  # 30 ms of imports (asyncio), only where a store is opened

    db = sqlite_path(uri)
    if db is None:
        yield
        return
    lock = db.with_name(db.name + ".lock")
    with ExitStack() as held:
        make_folder(db.parent, STORE_FIX)
        try:
            held.enter_context(FileLock(lock))
        except OSError as error:
            raise unwritable(lock, error, STORE_FIX) from error
        yield


def check_store_file(uri: str) -> None:
    """UserError when ``uri`` names a file that is not an MLflow sqlite store (a CSV, another program's
    database): MLflow would fail on it with a traceback, or add its tables to it."""
    db = sqlite_path(uri)
    if db is None or not db.is_file() or db.stat().st_size == 0:
        return
    with open(db, "rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    what = "it is not a sqlite database"
    if header == SQLITE_HEADER:
        try:
            with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as connection:
                tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                pages = [connection.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size")]
            connection.close()
            wal = db.with_name(f"{db.name}-wal").exists()  # pages not yet written back live in the -wal file
            if pages[0] * pages[1] > db.stat().st_size and not wal:  # it counts pages the file does not hold
                raise sqlite3.DatabaseError(f"{db.stat().st_size} bytes of its {pages[0] * pages[1]}")
        except sqlite3.DatabaseError as error:
            raise UserError(
                f"tracking.uri={uri}: the MLflow store {db} is damaged (sqlite: {error}): it was cut off or "
                "overwritten; point tracking.uri at another store, or restore the file from a copy"
            ) from None
        if not tables or {"alembic_version", "experiments"} <= tables:
            return
        what = f"a sqlite database without MLflow's tables; it has {', '.join(sorted(tables)[:3])}"
    raise UserError(
        f"tracking.uri={uri}: {db} is not an MLflow store ({what}); point tracking.uri at an MLflow store "
        "(default: sqlite:///<paths.mlruns_dir>/mlflow.db) or at a file that does not exist yet"
    )


def store_mistake(uri: str, error: BaseException) -> str | None:
    """The one line for a local sqlite store that MLflow cannot write (read-only, unopenable); None
    for any other error."""
    db = sqlite_path(uri)
    text = str(error)
    if db is None or not any(s in text for s in ("readonly database", "unable to open database file")):
        return None
    reason = "attempt to write a readonly database" if "readonly" in text else "unable to open database file"
    return f"tracking.uri={uri}: the MLflow store {db} cannot be written ({reason}); {STORE_FIX}"


def store_full(uri: str, error: BaseException) -> bool:
    """Whether ``error`` is a local sqlite store refusing a write for want of space."""
    return sqlite_path(uri) is not None and ("database or disk is full" in str(error) or is_full(error))


def empty_store_template() -> Path:
    """A sqlite MLflow store with every migration applied and no experiment, made once per MLflow version in
    the user cache (``$XDG_CACHE_HOME/esgexp``, else ``~/.cache/esgexp``)."""
    import mlflow
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "esgexp" / "mlflow"
    template = folder / f"empty-{mlflow.__version__}.db"
    if template.is_file():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{template.name}.{os.getpid()}.partial"
    SqlAlchemyStore(f"sqlite:///{partial}", str(folder / "artifacts")).engine.dispose()
    # MLflow adds its Default experiment (id 0) with this folder as its artifact root; a store opened on a
    # copy makes its own, with that store's root.
    with sqlite3.connect(partial) as db:
        db.execute("DELETE FROM experiments")
    db.close()
    os.replace(partial, template)
    return template


def seed_new_store(uri: str) -> None:
    """Where ``uri`` names a sqlite file that does not exist yet, make it a copy of
    :func:`empty_store_template`: MLflow's migrations cost 2-3 CPU-seconds on every new file. A store made
    meanwhile by another process is left as it is; where the copy cannot be made (a read-only cache, a
    file system without hard links), MLflow makes the store itself."""
    if not uri.startswith("sqlite:///"):
        return
    db = Path(uri.removeprefix("sqlite:///"))
    if db.exists():
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    partial = db.with_name(f".{db.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(empty_store_template(), partial)
        os.link(partial, db)  # never replaces a file that appeared meanwhile
    except FileExistsError:
        log.debug("%s was made by another process meanwhile: it is kept", db)
    except OSError as error:
        log.debug("no copy of the empty MLflow store for %s (%s): MLflow makes it", db, error)
    finally:
        partial.unlink(missing_ok=True)


def use_store(uri: str, artifact_location: str | None, experiment_name: str) -> str:
    """Point MLflow at ``uri`` and return the id of ``experiment_name``, creating it if needed.

    Under :func:`store_lock`, so that parallel jobs against a fresh sqlite file neither race on MLflow
    creating and migrating its tables (done by the first call in a process) nor on creating the experiment."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(uri)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)  # its errors come back as ours
    with store_lock(uri):
        check_store_file(uri)
        seed_new_store(uri)
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


MAX_METRIC_NAME = 250


def metric_name(key: str) -> str:
    """``key`` as MLflow accepts it: ``@`` spelled ``_at_`` (``recall_at_5``), other refused characters
    ``_``, no empty or ``.``/``..`` path segment, and at most 250 characters (a long one ends in a hash)."""
    name = re.sub(r"[^\w\-. /:]", "_", key.replace("@", "_at_"))
    name = "/".join(part if part.strip(".") else "_" for part in name.split("/"))
    if len(name) > MAX_METRIC_NAME:
        name = name[: MAX_METRIC_NAME - 17] + "~" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return name


def numeric_metrics(metrics: dict) -> dict[str, float]:
    """The numeric metrics under the names MLflow accepts; NaN (undefined) and booleans left out."""
    return {
        metric_name(k): float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    }


def now_ms() -> int:
    return int(time.time() * 1000)


class TrackedRun:
    """One job's MLflow run, or its pending record: with ``tracking.offline=true``, or from the moment a
    tracking server stops answering, every call is kept in ``<run_dir>/tracking_pending.json`` (params,
    tags, metrics with step and time, artifact paths, end status) instead, and the job goes on. The file
    also holds under ``sent`` what reached the store before, so that the whole run can be rebuilt elsewhere.

    ``run_id`` is the MLflow run (None when none was opened); ``pending_reason`` is None while tracked."""

    def __init__(self, tracking_cfg: DictConfig, run_dir: Path, experiment_name: str, run_name: str):
        self.uri = str(tracking_cfg.uri)
        self.artifact_location = tracking_cfg.get("artifact_location")
        self.connect_timeout_s = float(tracking_cfg.connect_timeout_s)
        self.run_dir = Path(run_dir)
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.run_id: str | None = None
        self.pending_reason = "tracking.offline=true" if tracking_cfg.get("offline") else None
        self.status = "RUNNING"
        self.start_time = now_ms()
        self.end_time: int | None = None
        self.pending: dict = empty_record()
        self.sent: dict = empty_record()
        self._client = None

    @property
    def tracked(self) -> bool:
        return self.pending_reason is None

    @contextmanager
    def open(self, params: dict, tags: dict):
        """The run from ``params`` and ``tags`` to its end: FINISHED, FAILED if the job raises, KILLED on
        Ctrl-C (Lightning turns it into SystemExit)."""
        self.start(params, tags)
        try:
            yield self
        except (KeyboardInterrupt, SystemExit):
            self.end_after_error("KILLED")
            raise
        except NoSpace as error:
            if not self.stored_on(error.path):  # a store on the full disk too takes nothing: the message says it
                self.end_after_error("FAILED")
            raise
        except BaseException:
            self.end_after_error("FAILED")
            raise
        self.end("FINISHED")

    def stored_on(self, path: Path) -> bool:
        """Whether the run's store is a sqlite file on the file system that holds ``path``."""
        if not self.uri.startswith("sqlite:///"):
            return False
        return mount_point(Path(self.uri.removeprefix("sqlite:///"))) == mount_point(path)

    def start(self, params: dict, tags: dict) -> None:
        """Open the run with ``tags`` (and MLflow's own: user, source) and log ``params``."""
        params = {k: str(v)[:MAX_PARAM_LENGTH] for k, v in params.items()}
        tags = {k: str(v) for k, v in system_tags(tags).items()}

        def send():
            import mlflow

            experiment_id = use_store(self.uri, self.artifact_location, self.experiment_name)
            self._client = mlflow.MlflowClient(self.uri)
            run = retry_locked(
                self._client.create_run, experiment_id, start_time=self.start_time, tags=tags, run_name=self.run_name
            )
            self.run_id = run.info.run_id
            self._log_batch(params=params)

        def record(into: dict):
            into["params"].update(params)
            into["tags"].update(tags)

        self._call("opening the run", send, record)

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        """The numeric ``metrics`` (NaN left out) at ``step`` (default 0)."""
        numeric = numeric_metrics(metrics)
        if not numeric:
            return
        stamp, step = now_ms(), int(step or 0)
        self._call(
            "logging metrics",
            lambda: self._log_batch(metrics=[(k, v, stamp, step) for k, v in numeric.items()]),
            lambda into: into["metrics"].extend(
                {"key": k, "value": v, "timestamp": stamp, "step": step} for k, v in numeric.items()
            ),
        )

    def set_tags(self, tags: dict) -> None:
        if tags:
            tags = {k: str(v) for k, v in tags.items()}
            self._call("setting tags", lambda: self._log_batch(tags=tags), lambda into: into["tags"].update(tags))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        """A run-folder file, or a folder's files under ``artifact_path``; nothing when ``path`` is absent."""
        path = Path(path)
        if not path.exists():
            return

        def send():
            upload = self._client.log_artifacts if path.is_dir() else self._client.log_artifact
            retry_locked(upload, self.run_id, str(path), artifact_path)

        entry = {"path": relative_to(path, self.run_dir), "artifact_path": artifact_path}
        self._call(f"uploading {path.name}", send, lambda into: into["artifacts"].append(entry))

    def end(self, status: str) -> None:
        """End the run with ``status`` (FINISHED, FAILED or KILLED)."""
        self.status, self.end_time = status, now_ms()
        self._call(
            "ending the run",
            lambda: retry_locked(self._client.set_terminated, self.run_id, status, self.end_time),
            lambda into: None,
        )

    def end_after_error(self, status: str) -> None:
        """:meth:`end` while the job's own error goes on up: a store that fails here too is a warning,
        never an error that hides the job's."""
        try:
            self.end(status)
        except Exception as error:
            log.warning("the MLflow run %s could not be ended %s: %s", self.run_id, status, one_line(error))

    def summary_line(self) -> str:
        """Where the run is, for the job's summary table."""
        if self.tracked:
            return f"mlflow run: {self.run_id} ({self.uri})"
        return (
            f"mlflow run: not yet tracked ({self.pending_reason}); everything is in the run folder\n"
            f"log it later with: python -m esgexp.sync {self.run_dir}"
        )

    def _log_batch(self, metrics=(), params=None, tags=None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        retry_locked(
            self._client.log_batch,
            self.run_id,
            metrics=[Metric(key, value, stamp, step) for key, value, stamp, step in metrics],
            params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )

    def _call(self, what: str, send, record) -> None:
        """``send()`` to MLflow while tracked and ``record(self.sent)``; else, or when it fails because the
        server stopped answering, ``record(self.pending)`` for a later sync and rewrite the pending file."""
        if self.tracked:
            try:
                send()
                record(self.sent)
                return
            except Exception as error:
                mistake = store_mistake(self.uri, error)
                if mistake:
                    raise UserError(mistake) from error
                if not (self._lost_server(what, error) or self._full_store(what, error)):
                    raise
        record(self.pending)
        self.write_pending()

    def _lost_server(self, what: str, error: Exception) -> bool:
        """Whether ``error`` came from a tracking server that no longer answers; if so, go pending."""
        if not is_server(self.uri):
            return False
        reason = unreachable(self.uri, self.connect_timeout_s)
        if reason is None:
            return False
        self._go_pending(f"the tracking server {self.uri} stopped answering while {what}: {reason}", error)
        return True

    def _full_store(self, what: str, error: Exception) -> bool:
        """Whether ``error`` is the local store's disk refusing a write for want of space; if so, go pending."""
        if not store_full(self.uri, error):
            return False
        db = sqlite_path(self.uri)
        self._go_pending(
            f"no space left on the file system at {mount_point(db)} for the MLflow store {db} while {what}", error
        )
        return True

    def _go_pending(self, reason: str, error: Exception) -> None:
        """From now on keep what the run logs in the pending file, saying ``reason`` once."""
        self.pending_reason = reason
        log.warning(
            "%s (%s). The job goes on; what it would log is kept in %s; once the store takes it again: "
            "python -m esgexp.sync %s",
            self.pending_reason,
            type(error).__name__,
            self.run_dir / PENDING_FILE,
            self.run_dir,
        )

    def write_pending(self) -> None:
        write_json(
            self.run_dir / PENDING_FILE,
            {
                "reason": self.pending_reason,
                "uri": self.uri,
                "experiment_name": self.experiment_name,
                "run_name": self.run_name,
                "run_id": self.run_id,
                "status": self.status,
                "start_time": self.start_time,
                "end_time": self.end_time,
                **self.pending,
                "sent": self.sent,
            },
        )


def empty_record() -> dict:
    """What a run logs: params, tags, metrics (key, value, timestamp, step) and artifact paths."""
    return {"params": {}, "tags": {}, "metrics": [], "artifacts": []}


def system_tags(tags: dict) -> dict:
    """``tags`` with the ones MLflow adds to a run it starts (user, source name and type)."""
    from mlflow.tracking.context.registry import resolve_tags

    return resolve_tags(tags)


def relative_to(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` when inside it (a run folder can move), else absolute."""
    try:
        return path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())
