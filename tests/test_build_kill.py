"""kill -9 in the middle of a dataset build (``python -m esgexp.build``), then ``resume=true`` into the same
folder: the answers the killed build had received come from the request cache, only the rest is asked, and
the dataset, the build report and the rejections equal those of a build that was never interrupted.

The build runs as a user runs it (a subprocess, builder=esgbench, the tiny random Llama under constrained
decoding) on a generated 6-page report, one passage per page, five of them naming a KPI with a figure. It
is SIGKILLed once the request cache (sqlite, table ``responses``, a row committed per answer) holds a given
number of answers: one (the first round of generate requests) or one past the first round (the retries of
cut-off outputs, build/generate.py). The resumed builds and the uninterrupted one run in this process.

With ``builder.max_new_tokens=170`` some JSON objects are complete and some are cut short: the build then
has survivors, retries (one of them repaired) and rejections at generate (cut off twice) and dedupe.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from cli import start_cli
from conftest import REPO
from helpers import composed
from pdf_factory import write_pdf

from esgexp.builders.run import run_build
from esgexp.data.chunking import CharChunker
from esgexp.data.corpus import ingest

# One KPI sentence with a figure and a unit per page (each page is one passage), and a page with no KPI.
REPORT = [
    ["Climate 2023", "Scope 1 emissions were 1,772.6 tCO2e in 2023."],
    ["Energy 2023", "Energy consumption was 12,400 MWh in 2023."],
    ["Water 2023", "Water withdrawal was 83,000 m3 in 2023."],
    ["People 2023", "Women made up 38% of all employees in 2023."],
    ["Waste 2023", "The recycling rate was 64% in 2023."],
    ["History", "Our company was founded in Berlin in 1990 and has grown ever since."],
]
# The budget that leaves the tiny model's JSON complete for some passages and cut short for others.
BUILD = (
    "builder=esgbench",
    "model=local",
    "trainer.batch_size=1",
    "builder.max_new_tokens=170",
    "builder.max_question_chars=30",
    "tracking.offline=true",
    "progress=false",
    "trainer.progress_bar=false",
)
DATASET = "esgbench_open_source.jsonl"


def overrides(root: Path, corpus: Path, model_dir: Path, *more: str) -> list[str]:
    """The build of ``corpus`` into ``root/built``, with its own request cache and every path under ``root``."""
    return [
        *BUILD,
        f"model.path={model_dir}",
        f"corpus={corpus}",
        f"out={root}/built",
        f"paths.root_dir={root}",
        f"paths.request_cache={root}/requests.sqlite",
        *more,
    ]


def build(root: Path, corpus: Path, model_dir: Path, *more: str) -> Path:
    """One build in this process; returns its folder."""
    cfg = composed("build", overrides=overrides(root, corpus, model_dir, *more))
    run_build(cfg)
    return root / "built"


def answered(cache: Path) -> int | None:
    """The answers committed to the request cache, read without writing (None while it cannot be read)."""
    if not cache.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=1)
        try:
            return db.execute("SELECT count(*) FROM responses").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:  # not created yet, or busy
        return None


def kill_once_answered(
    command: list[str], env: dict, cache: Path, at_least: int, log: Path, timeout: float = 240
) -> int:
    """Start ``command`` (a module and its arguments); SIGKILL it as soon as ``cache`` holds ``at_least``
    answers; return how many it holds then."""
    process = start_cli(*command, cwd=REPO, env=env)
    deadline, seen = time.monotonic() + timeout, 0
    while time.monotonic() < deadline and process.poll() is None:
        seen = answered(cache) or 0
        if seen >= at_least:
            break
        time.sleep(0.02)
    process.kill()
    log.write_text(process.communicate()[1])
    assert seen >= at_least, (
        f"the build held {seen} answers, not {at_least} (exit {process.returncode}): {log.read_text()[-2000:]}"
    )
    assert process.returncode == -signal.SIGKILL, (
        f"the build ended before the kill: nothing was interrupted\n{log.read_text()[-2000:]}"
    )
    return answered(cache)


def report_of(folder: Path) -> dict:
    return json.loads((folder / "build_report.json").read_text())


def rejections(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "rejected.jsonl").read_text().splitlines()]


def card_of(folder: Path) -> dict:
    """provenance.json without what differs between two builds of the same config (date, output path)."""
    card = json.loads((folder / "provenance.json").read_text())
    return {k: v for k, v in card.items() if k not in ("created", "dataset")}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kill-report")
    write_pdf(root / "pdfs" / "acme.pdf", REPORT)
    ingest(root / "pdfs", root / "corpus", CharChunker(min_chars=10, max_chars=80), progress=False)
    return root / "corpus"


@pytest.fixture(scope="module")
def straight(tmp_path_factory, corpus_dir, tiny_model_dir) -> Path:
    """The same build, never interrupted, into its own folder with its own request cache."""
    return build(tmp_path_factory.mktemp("straight"), corpus_dir, tiny_model_dir)


@pytest.mark.parametrize("round_killed", ["first", "retry"])
def test_kill_9_during_a_build_then_resume_asks_only_the_rest_and_equals_an_uninterrupted_build(
    tmp_path, clean_env, corpus_dir, tiny_model_dir, straight, round_killed
):
    reference = report_of(straight)
    n_total = reference["requests"]["n_requests"]
    n_first = reference["stages"]["generate"]["n_in"]  # the first round: one request per candidate passage
    assert reference["n_items"] >= 1 and (straight / DATASET).read_text(), "no item survived: nothing to compare"
    assert reference["requests"]["n_cached"] == 0 and n_total >= n_first + 2, (
        f"{n_total} requests for {n_first} candidates: the build should retry at least two cut-off outputs"
    )
    assert {r["stage"] for r in rejections(straight)} >= {"generate", "dedupe"}

    at_least = 1 if round_killed == "first" else n_first + 1
    command = ["esgexp.build", *overrides(tmp_path, corpus_dir, tiny_model_dir)]
    n_killed = kill_once_answered(command, clean_env, tmp_path / "requests.sqlite", at_least, tmp_path / "killed.log")
    assert at_least <= n_killed < n_total, (
        f"killed with {n_killed} of {n_total} requests answered: nothing left to resume"
    )
    out = tmp_path / "built"
    assert not (out / DATASET).exists() and not (out / "provenance.json").exists()  # the build had not finished

    resumed = build(tmp_path, corpus_dir, tiny_model_dir, "resume=true")
    assert resumed == out
    report = report_of(out)
    # the answers of the killed build came from the cache, only the rest was asked
    assert report["requests"] == {"n_cached": n_killed, "n_requests": n_total - n_killed}
    assert {k: v for k, v in report.items() if k != "requests"} == {
        k: v for k, v in reference.items() if k != "requests"
    }
    assert (out / DATASET).read_text() == (straight / DATASET).read_text()
    assert (out / "rejected.jsonl").read_text() == (
        straight / "rejected.jsonl"
    ).read_text()  # the same lines in the same order
    assert card_of(out) == card_of(straight)

    # resumed once more: every answer from the cache, the same build
    build(tmp_path, corpus_dir, tiny_model_dir, "resume=true")
    again = report_of(out)
    assert again["requests"] == {"n_cached": n_total, "n_requests": 0}
    assert again["stages"] == reference["stages"] and (out / DATASET).read_text() == (straight / DATASET).read_text()
    assert (out / "rejected.jsonl").read_text() == (straight / "rejected.jsonl").read_text()
