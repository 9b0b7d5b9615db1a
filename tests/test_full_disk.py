"""A disk that fills up, for real: a small tmpfs mounted for the test (root only; skipped where mounting is
not allowed). Predictions are written whole or not at all and the user is told once what is kept and that
resume=true continues (esgexp/core/outputs.py); the request cache is never dropped for a full disk or a lock,
only when sqlite finds it damaged (esgexp/backends/cache.py)."""

import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli import run_cli

from esgexp.backends.base import Response
from esgexp.backends.cache import RequestCache
from esgexp.core.outputs import NoSpace, PredictionLog, write_json
from esgexp.errors import UserError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs at ``tmp_path/disk``: a file system that really runs out of space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    """Take every free block of ``disk`` with a ballast file."""
    with open(disk / "ballast", "wb", buffering=0) as ballast:
        try:
            while True:
                ballast.write(b"\0" * 4096)
        except OSError as error:
            assert error.errno == 28  # ENOSPC


def free(disk: Path) -> None:
    (disk / "ballast").unlink()


def records(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"q{i}", "output": "x" * 900} for i in range(start, start + n)]


def test_an_append_to_a_full_disk_writes_no_part_of_a_line(small_disk):
    log = PredictionLog(small_disk / "run" / "predictions.jsonl")
    log.append(records(3))
    before = log.path.read_bytes()
    fill(small_disk)  # what is left: the unused end of the file's last block
    with pytest.raises(NoSpace) as caught:
        log.append(records(10, start=3))  # more than that end takes
    assert log.path.read_bytes() == before  # whole lines only: none of the batch
    message = str(caught.value)
    assert f"file system at {small_disk}" in message and str(log.path) in message
    assert "the 3 predictions in it are complete and kept" in message and "resume=true" in message
    free(small_disk)
    log.append(records(10, start=3))
    assert [r["id"] for r in log.read()] == [f"q{i}" for i in range(13)]


def test_a_json_file_on_a_full_disk_is_left_as_it_was(small_disk):
    path = small_disk / "metrics.json"
    write_json(path, {"accuracy": 0.5})
    fill(small_disk)
    with pytest.raises(NoSpace, match=r"metrics\.json is as it was"):
        write_json(path, {"accuracy": 0.75, "padding": "x" * 100_000})
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert sorted(p.name for p in small_disk.iterdir()) == ["ballast", "metrics.json"]  # no temporary file


def api_job(root: Path, base_url: str, *extra: str) -> list[str]:
    """``python -m esgexp`` arguments of a job against the server at ``base_url``, everything under ``root``."""
    return [
        "backend=openai",
        f"backend.base_url={base_url}",
        "backend.max_concurrency=1",
        "backend.timeout_s=120",
        "backend.backoff_s=0.05",
        f"paths.root_dir={root}",
        "trainer.progress_bar=false",
        *extra,
    ]


def test_a_disk_filling_up_mid_run_keeps_whole_lines_and_resume_finishes(
    small_disk, fault_proxy, empty_db, clean_env, tmp_path
):
    (small_disk / "mlruns").mkdir()
    shutil.copy(empty_db, small_disk / "mlruns" / "mlflow.db")  # runs, store and all on the small disk
    asked, filled_at = [], []

    def fill_once_3_lines_are_kept(request) -> bool:
        """Seen by the proxy (in its own thread) as each item's request comes in: the first one after the
        job (in this process) has 3 predictions on disk finds the disk full."""
        if not request.path.endswith("/chat/completions"):
            return False
        asked.append(1)
        kept = any(len(p.read_text().splitlines()) >= 3 for p in small_disk.glob("runs/*/*/*/predictions.jsonl"))
        if kept and not filled_at:
            fill(small_disk)
            filled_at.append(len(asked))
        return False  # no fault: every request is answered

    fault_proxy.fail_when(fill_once_3_lines_are_kept, "500")
    command = api_job(small_disk, fault_proxy.base_url, "dataset.limit=8", "cache=off")
    job = run_cli("esgexp", *command, cwd=tmp_path, env=clean_env, timeout=300)
    stdout, stderr = job.stdout, job.stderr
    assert filled_at and filled_at[0] < 8, "the disk did not fill while the job ran"
    assert job.returncode == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stdout + stderr and "Logging error" not in stderr, stderr[-3000:]
    (predictions,) = small_disk.glob("runs/*/*/*/predictions.jsonl")
    lines = predictions.read_text().splitlines()
    assert all(json.loads(line)["id"] for line in lines)  # every line whole
    assert f"no space left on the file system at {small_disk}" in errors[0]
    # Full while appending (what it kept), or later, rewriting a whole file (left as it was).
    kept = f"the {len(lines)} predictions in it are complete and kept"
    assert (kept in errors[0] or "is as it was, and every other file in" in errors[0]) and "resume=true" in errors[0]
    failed = predictions.parent / "FAILED"
    assert not failed.exists() or failed.read_text().strip()  # never an empty FAILED
    free(small_disk)
    fault_proxy.reset()
    resumed = run_cli("esgexp", *command, "resume=true", cwd=tmp_path, env=clean_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (line,) = [line for line in resumed.stdout.splitlines() if line.startswith("run folder: ")]
    metrics = json.loads((Path(line.removeprefix("run folder: ")) / "metrics.json").read_text())
    assert metrics["n_items"] == 8 and metrics["n_resumed"] == len(lines) and metrics["n_failed"] == 0
    items = [b for b in fault_proxy.bodies("/v1/chat/completions") if "Question" in json.dumps(b)]
    assert len(items) == 8 - len(lines)  # only the items not kept were asked again


def test_a_full_disk_never_drops_the_request_cache(small_disk, fault_proxy, clean_env, tmp_path):
    cache = small_disk / "requests.sqlite"
    command = api_job(tmp_path, fault_proxy.base_url, "dataset.limit=4", f"paths.request_cache={cache}")
    first = run_cli("esgexp", *command, cwd=tmp_path, env=clean_env)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = cache.read_bytes()
    fill(small_disk)
    full = run_cli("esgexp", *command, cwd=tmp_path, env=clean_env)
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-3000:]
    (error,) = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert f"request cache {cache} cannot be used" in error and "kept as it is" in error and "cache=off" in error
    assert cache.read_bytes() == kept and not list(small_disk.glob("requests.sqlite.unreadable-*"))
    free(small_disk)
    fault_proxy.reset()
    again = run_cli("esgexp", *command, cwd=tmp_path, env=clean_env)
    assert again.returncode == 0, again.stderr[-3000:]
    (line,) = [line for line in again.stdout.splitlines() if line.startswith("answers from the cache")]
    assert line.split()[-1] == "4"  # every answer from the kept cache
    assert not [b for b in fault_proxy.bodies("/v1/chat/completions") if "Question" in json.dumps(b)]


def test_a_cache_that_fills_the_disk_mid_run_keeps_its_answers_and_stops_storing(small_disk, caplog):
    cache = RequestCache(small_disk / "requests.sqlite")
    cache.put("old", Response("q1", output="A"))
    fill(small_disk)
    cache.put("new", Response("q2", output="B" * 200_000))  # does not fit
    assert cache.store_error and "stopped taking answers" in caplog.text
    cache.put("later", Response("q3", output="C"))  # not tried again: one warning
    assert caplog.text.count("stopped taking answers") == 1
    assert cache.get("old").output == "A" and cache.get("new") is None
    cache.close()
    free(small_disk)
    assert RequestCache(small_disk / "requests.sqlite").get("old").output == "A"


def test_a_locked_cache_is_kept_and_used_once_the_lock_is_gone(tmp_path):
    path = tmp_path / "requests.sqlite"
    cache = RequestCache(path)
    cache.put("k", Response("q1", output="A"))
    cache.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")  # another process's exclusive lock: no one else may read
    try:
        with pytest.raises(UserError, match=r"database is locked.*kept as it is"):
            RequestCache(path, timeout_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not list(tmp_path.glob("requests.sqlite.unreadable-*"))
    assert RequestCache(path).get("k").output == "A"


def test_a_damaged_cache_fails_the_integrity_check_and_is_moved_aside(tmp_path, caplog):
    path = tmp_path / "requests.sqlite"
    cache = RequestCache(path)
    for i in range(200):
        cache.put(f"k{i}", Response(f"q{i}", output="A" * 200))
    cache.close()
    data = bytearray(path.read_bytes())
    page = 4096
    data[2 * page : 6 * page] = os.urandom(4 * page)  # the header is fine, the table's pages are not
    path.write_bytes(bytes(data))
    fresh = RequestCache(path)
    assert fresh.get("k1") is None
    (aside,) = tmp_path.glob("requests.sqlite.unreadable-*")
    assert aside.read_bytes() == bytes(data) and "fails sqlite's integrity check" in caplog.text


def freed_as_advised(disk: Path, error: NoSpace) -> None:
    """Shrink the ballast by what ``error`` says to free (``Free at least N KiB|MiB there``)."""
    amount, unit = re.search(r"Free at least ([\d,.]+) (B|KiB|MiB) there", str(error)).groups()
    size = float(amount.replace(",", "")) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[unit]
    ballast = disk / "ballast"
    os.truncate(ballast, max(ballast.stat().st_size - int(size), 0))


def test_a_full_disk_names_the_space_a_corpus_needs_and_freeing_it_is_enough(small_disk, tmp_path):
    """The advice names what the whole corpus needs (all its files), so following it succeeds."""
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"report{n}.md").write_text(f"Report {n}. " + "Scope 1 emissions fell by 4 percent. " * 8000)
    fill(small_disk)
    with pytest.raises(NoSpace) as full:
        ingest(docs, small_disk / "corpus", CharChunker(), progress=False)
    assert re.search(r"this write needs [\d.]+ MiB and [\d.]+ (B|KiB) is free there", str(full.value))
    freed_as_advised(small_disk, full.value)
    ingest(docs, small_disk / "corpus", CharChunker(), progress=False)
    assert (small_disk / "corpus" / "manifest.json").is_file()
