"""Stores a user points at the wrong place: a run, cache or output folder that cannot be written, a
tracking.uri file that is not an MLflow store, the MLflow store's disk filling up, an ASCII-only terminal.
Each is one ``error:`` line (or a pending run, for a full store) with nothing lost, never a traceback.

Read-only folders: tests run as root make ``chmod`` ineffective, so a file where a folder must be created
(which fails for root too) takes the same ``OSError`` path; a read-only tmpfs mount covers a real read-only
file system where mounting is allowed."""

import io
import json
import os
import subprocess
import sys

import pytest
from helpers import composed
from omegaconf import OmegaConf
from test_full_disk import fill, free, small_disk  # noqa: F401 (a fixture)

from esgexp.backends.cache import RequestCache
from esgexp.cli.command import run_command
from esgexp.cli.sync import sync_run
from esgexp.core.config import CONF_DIR
from esgexp.core.run_folder import RunFolder
from esgexp.core.tracking import PENDING_FILE, TrackedRun
from esgexp.errors import UserError
from esgexp.leaderboard.board import export


@pytest.fixture
def read_only(tmp_path):
    """A folder no file can be made in: a read-only tmpfs as root, a chmod 555 folder for anyone else."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def run_folder_error(tmp_path, capsys, root) -> str:
    """The one line the run-folder callback prints, with exit 2, for a job under ``paths.root_dir=root``."""

    cfg = composed("config", overrides=[f"paths.root_dir={root}"], return_hydra_config=True)
    with pytest.raises(SystemExit) as stopped:
        RunFolder().on_run_start(cfg)
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_a_run_folder_behind_a_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    line = run_folder_error(tmp_path, capsys, blocker)
    assert line.startswith(f"error: cannot write {blocker}/runs/") and f"{blocker} is a file, not a folder" in line
    assert "set paths.root_dir" in line


def test_a_read_only_root_dir_and_cache_folder_are_one_line_each(tmp_path, capsys, read_only):
    line = run_folder_error(tmp_path, capsys, read_only)
    assert line.startswith(f"error: cannot write {read_only}/runs/") and "set paths.root_dir" in line
    with pytest.raises(UserError, match=r"cannot write .*ESGEXP_CACHE_DIR.*cache=off"):
        RequestCache(read_only / "cache" / "requests.sqlite")
    assert not list(read_only.iterdir())  # nothing written


def test_a_cache_dir_that_is_a_file_names_esgexp_cache_dir(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("x")
    with pytest.raises(UserError) as caught:
        RequestCache(blocker / "requests.sqlite")
    assert f"{blocker} is a file, not a folder" in str(caught.value) and "set ESGEXP_CACHE_DIR" in str(caught.value)
    assert blocker.read_text() == "x"


def tracking_cfg(uri: str):
    return OmegaConf.create({"uri": uri, "connect_timeout_s": 1, "offline": False})


def test_a_store_file_that_is_not_mlflow_is_refused_and_left_as_it_was(tmp_path):
    csv = tmp_path / "some.csv"
    csv.write_text("a,b\n1,2\n")
    other = tmp_path / "requests.sqlite"
    RequestCache(other).close()  # a sqlite database of another kind: MLflow would add its tables to it
    for store, what in (
        (csv, "it is not a sqlite database"),
        (other, "a sqlite database without MLflow's tables; it has responses"),
    ):
        before = store.read_bytes()
        run = TrackedRun(tracking_cfg(f"sqlite:///{store}"), tmp_path / "run", "exp", "r")
        with pytest.raises(UserError) as caught:
            run.start({"a": 1}, {})
        assert f"{store} is not an MLflow store ({what}" in str(caught.value) and "tracking.uri" in str(caught.value)
        assert store.read_bytes() == before and not (tmp_path / "run" / PENDING_FILE).exists()
        with pytest.raises(UserError, match="is not an MLflow store"):  # the leaderboard reads no further
            export(f"sqlite:///{store}", tmp_path / "board")


def test_a_full_store_disk_mid_run_keeps_everything_for_sync(small_disk, empty_db, tmp_path):  # noqa: F811
    db = small_disk / "mlflow.db"
    db.write_bytes(empty_db.read_bytes())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracking = OmegaConf.merge(
        OmegaConf.load(CONF_DIR / "tracking" / "mlflow.yaml"),
        {"uri": f"sqlite:///{db}", "artifact_location": str(tmp_path / "artifacts")},
    )
    OmegaConf.save({"tracking": tracking}, run_dir / "config.yaml")
    run = TrackedRun(tracking, run_dir, "exp", "r")
    metrics = {f"m{i}": i / 1000 for i in range(2000)}
    with run.open({"dataset.limit": 3}, {"task": "mcq"}):
        fill(small_disk)
        run.log_metrics(metrics)  # more than the disk takes: the run goes pending, the job goes on
    pending = json.loads((run_dir / PENDING_FILE).read_text())
    assert pending["status"] == "FINISHED" and len(pending["metrics"]) == 2000
    assert "no space left on the file system at" in pending["reason"] and "while logging metrics" in pending["reason"]
    assert pending["sent"]["params"] == {"dataset.limit": "3"} and "not yet tracked" in run.summary_line()
    free(small_disk)
    assert "synced to run" in sync_run(run_dir, {})
    import mlflow

    stored = mlflow.MlflowClient(f"sqlite:///{db}").get_run(run.run_id)
    assert stored.info.status == "FINISHED" and stored.data.metrics["m1999"] == 1.999


def test_an_ascii_terminal_prints_escapes_instead_of_failing(monkeypatch):
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "argv", ["esgexp-leaderboard"])
    run_command(lambda: print("esg · sample é"), "leaderboard", [])
    out.flush()
    assert out.buffer.getvalue() == b"esg \\xb7 sample \\xe9\n"


def test_a_truncated_store_is_one_line_not_a_traceback(tmp_path):
    """An mlflow.db cut off (a copy stopped midway, a full disk): named as damaged, with what to do."""
    from esgexp.core.tracking import check_store_file, seed_new_store

    seed_new_store(f"sqlite:///{tmp_path}/whole.db")
    cut = tmp_path / "cut.db"
    cut.write_bytes((tmp_path / "whole.db").read_bytes()[:3000])
    check_store_file(f"sqlite:///{tmp_path}/whole.db")
    with pytest.raises(UserError, match=r"the MLflow store .*cut.db is damaged \(sqlite: .*\): it was cut off"):
        check_store_file(f"sqlite:///{cut}")
