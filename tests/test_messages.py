"""Every command as a user runs it: a mistake is one ``error:`` line naming the culprit and a way out (exit
2, no traceback, nothing of Hydra's internals); Ctrl-C is one ``interrupted`` line (exit 130)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli import run_cli, start_cli
from openai_server import FakeOpenAI
from pdf_factory import write_pdf

from esgexp.core.config import BUNDLED_DIR

# What a user must never see: Python's and Hydra's internals, Hydra's advice to append a misspelt key.
NOISE = ("Traceback", "HYDRA_FULL_ERROR", "To append to your config", "full_key:", "object_type=", "KeyboardInterrupt")
# The cheapest job (no model): ESGBench scoring of the bundled predictions, three items, offline.
SCORE = (
    "experiment=esgbench_score",
    "dataset=esgbench_sample",
    f"predictions={BUNDLED_DIR / 'esgbench' / 'preds_sample.jsonl'}",
    "dataset.limit=3",
    "tracking.offline=true",
)


def command(cwd: Path, env: dict, module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_cli(module, *args, cwd=cwd, env=env, timeout=timeout)


def the_error(result: subprocess.CompletedProcess, *fragments: str, code: int = 2) -> str:
    """The one ``error:`` line of ``result`` (exit ``code``), holding every fragment; no internals shown."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert not [noise for noise in NOISE if noise in output], output[-3000:]
    return errors[0]


@pytest.mark.parametrize(
    "module, args, message",
    [
        ("esgexp", ["dataset.limt=3"], "dataset.limt is not a setting: did you mean dataset.limit? (dataset.limit=3)"),
        ("esgexp.ingest", ["corpus.pdf_dir=x", "corpus.nam=y"], "did you mean corpus.name? (corpus.name=y)"),
        ("esgexp.build", ["corpus=x", "outt=y"], "outt is not a setting: did you mean out? (out=y)"),
        ("esgexp.builders", ["corpus=x", "builder.max_new_token=9"], "did you mean builder.max_new_tokens?"),
        ("esgexp.verify", ["dataset.pat=x", "corpus=y"], "did you mean dataset.path? (dataset.path=x)"),
        ("esgexp.leaderboard", ["latest_onl=false"], "did you mean latest_only? (latest_only=false)"),
        ("esgexp.compare", ["run-a", "run-b", "agains=all"], "did you mean against? (against=all)"),
        ("esgexp.export_adapter", ["model.adaptr=x"], "did you mean model.adapter? (model.adapter=x)"),
    ],
)
def test_a_misspelt_key_is_one_message_with_the_key_it_is_close_to_in_every_command(
    tmp_path, clean_env, module, args, message
):
    the_error(command(tmp_path, clean_env, module, *args), message)


# A bad value for each console command of pyproject.toml, and the words its one error line must hold.
CONSOLE_MISTAKES = {
    "esgexp": (["seeed=3"], "did you mean seed? (seed=3)"),
    "esgexp-ingest": (["chunker=nope"], "Could not find 'chunker/nope' (chunker=nope): choose one of"),
    "esgexp-build": (["builder=nope", "corpus=x"], "Could not find 'builder/nope' (builder=nope): choose one of"),
    "esgexp-verify": (["dataset.pat=x", "corpus=y"], "did you mean dataset.path?"),
    "esgexp-leaderboard": (["alpha=0.05", "formatt=md"], "did you mean format? (format=md)"),
    "esgexp-compare": (["run-a", "run-b", "metricc=x"], "did you mean metric? (metric=x)"),
    "esgexp-sync": (["/no/such/run"], "/no/such/run: no such file or folder: the folder /no does not exist"),
    "esgexp-export-adapter": (["out_dirr=x"], "did you mean out_dir? (out_dir=x)"),
    "esgexp-paper": (["tabel=x"], "did you mean table? (table=x)"),
    "esgexp-data": (["get", "esgenius", "fils=x"], "did you mean files? (files=x)"),
}


@pytest.mark.parametrize("name", sorted(CONSOLE_MISTAKES))
def test_every_console_command_turns_a_mistake_into_one_message(tmp_path, clean_env, name):
    """Through the function pyproject.toml names (what the console script runs), not only ``python -m``."""
    import tomllib

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == set(CONSOLE_MISTAKES)
    module, _, function = scripts[name].partition(":")
    args, message = CONSOLE_MISTAKES[name]
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import {function}; {function}()"
    result = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tmp_path, env=clean_env, capture_output=True, text=True, timeout=120
    )
    the_error(result, message)


@pytest.mark.parametrize(
    "module, args, message",
    [
        (
            "esgexp",
            ["model=smollm2"],
            "Could not find 'model/smollm2' (model=smollm2): did you mean model=smollm2-135m?",
        ),
        ("esgexp.ingest", ["chunker=paragraph"], "(chunker=paragraph): did you mean chunker=paragraphs?"),
        ("esgexp", ["tracking.uri=sqlte:///x.db"], "tracking.uri must be a tracking store"),
        ("esgexp", ["tracking.uri=sqlite://x.db"], "sqlite:///FILE.db"),  # two slashes: no file at all
        ("esgexp.leaderboard", ["tracking.uri=htps://mlflow:5000"], "one of the schemes file:, sqlite:"),
        (
            "esgexp.compare",
            ["run-a", "run-b", "tracking.uri=sqlite:/x.db"],
            "tracking.uri must be a tracking store",
        ),
        ("esgexp.sync", ["/no/such/run"], "/no/such/run: no such file or folder: the folder /no does not exist"),
        ("esgexp.export_adapter", ["model.adapter=x", "model.dtype=float8"], "model.dtype must be one of auto,"),
        ("esgexp", ["dataset.limit=[1,2"], "cannot read 'dataset.limit=[1,2'"),
        (
            "esgexp.paper",
            ["table=esgbench", "overides=[dataset.limit=3]"],
            "overides is not a setting: did you mean overrides?; each item that holds '=' goes in quotes: "
            "\"overrides=['dataset.limit=3']\"",
        ),
        (
            "esgexp.paper",
            ["table=esgbench", "rowz=[Random,", "BM25]"],
            "rowz is not a setting: did you mean rows?; the shell split this list at a space: quote the whole "
            "override: 'rows=[Random, BM25]'",
        ),
        ("esgexp.build", ["corpus=/no/such/corpus"], "/no/such/corpus"),
    ],
)
def test_a_bad_value_is_one_message_in_every_command(tmp_path, clean_env, module, args, message):
    the_error(command(tmp_path, clean_env, module, *args), message)


def test_a_key_a_component_does_not_take_is_named_with_the_ones_it_does_before_any_work(tmp_path, clean_env):
    """``+dataset.limt=3`` was a TypeError from the loader's constructor."""
    result = command(tmp_path, clean_env, "esgexp", "+dataset.limt=3", "tracking.offline=true")
    line = the_error(result, "+dataset.limt=3: dataset.limt is not a setting of esgexp.data.esgenius.ESGeniusCSV")
    assert "did you mean dataset.limit?" in line and re.search(r"its settings: .*\bpath\b.*\blimit\b", line)
    assert not list(tmp_path.glob("runs/*/*/*/predictions.jsonl"))


def test_a_key_nothing_reads_is_a_warning_and_the_job_goes_on(tmp_path, clean_env):
    result = command(tmp_path, clean_env, "esgexp", *SCORE, "+foo=bar", "+model.price.prompt=1")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: +foo=bar: no config has foo and nothing in esgexp reads it; it is saved in config.yaml but "
        "changes nothing (check its spelling, or leave it out)"
    ]  # model.price is read (a run's cost)
    (config,) = tmp_path.glob("runs/*/*/*/config.yaml")
    assert "foo: bar" in config.read_text() and (config.parent / "metrics.json").is_file()


def test_a_sweep_names_its_value_that_cannot_run_and_runs_the_others_when_asked(tmp_path, clean_env):
    sweep = ("-m", *SCORE, "model=smollm2-135m,smollm", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep")
    refused = command(tmp_path, clean_env, "esgexp", *sweep)
    the_error(
        refused,
        "the sweep cannot run 1 of its values: Could not find 'model/smollm' (model=smollm)",
        "run the jobs of the other values only with skip_invalid_jobs=true",
    )
    assert not (tmp_path / "sweep").exists()

    ran = command(tmp_path, clean_env, "esgexp", *sweep, "skip_invalid_jobs=true")
    assert ran.returncode == 0, ran.stderr[-3000:]
    skipped = [line for line in ran.stderr.splitlines() if line.startswith("warning: skipped")]
    assert len(skipped) == 1 and "Could not find 'model/smollm' (model=smollm)" in skipped[0]
    assert sorted(p.parent.name for p in tmp_path.glob("sweep/*/metrics.json")) == ["0", "1"]
    overrides = [(tmp_path / "sweep" / job / ".hydra" / "overrides.yaml").read_text() for job in ("0", "1")]
    assert all("model=smollm2-135m" in text for text in overrides)


class NoSchemaServer(FakeOpenAI):
    """An OpenAI-style server whose model refuses structured output, with OpenAI's 400 error body."""

    def reply(self, path: str, body: dict) -> tuple[int, dict]:
        if "response_format" in body:
            with self._lock:
                self.bodies.append(body)
            message = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
            return 400, {"error": {"message": message, "type": "invalid_request_error", "param": "response_format"}}
        return super().reply(path, body)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    root = tmp_path_factory.mktemp("report")
    write_pdf(root / "pdfs" / "acme.pdf", [["Climate 2023", "Scope 1 emissions were 1,772.6 tCO2e in 2023."]])
    ingest(root / "pdfs", root / "corpus", CharChunker(min_chars=10, max_chars=120), progress=False)
    return root / "corpus"


def test_a_server_that_refuses_response_format_stops_the_build_at_once_naming_it(tmp_path, clean_env, corpus_dir):
    with NoSchemaServer() as server:
        started = time.monotonic()
        result = command(
            tmp_path,
            clean_env,
            "esgexp.build",
            f"corpus={corpus_dir}",
            "backend=openai",
            f"backend.base_url={server.base_url}",
            f"out={tmp_path}/built",
            f"paths.request_cache={tmp_path}/requests.sqlite",
            "tracking.offline=true",
            "progress=false",
        )
        seconds = time.monotonic() - started
        asked = sum("response_format" in body for body in server.bodies)
    the_error(
        result,
        f"the server at {server.base_url} refuses the JSON Schema as sent (backend.response_format=json_schema)",
        "'response_format' of type 'json_schema' is not supported",
        "Try backend.response_format=json_object",
    )
    assert asked <= 8 and seconds < 60  # no retries of a 400, no blaming the model after every ask


def test_ctrl_c_is_one_line_saying_what_was_kept_and_how_to_go_on(tmp_path, clean_env):
    with FakeOpenAI(delay=0.3, answer="A") as server:
        job = start_cli(
            "esgexp",
            "backend=openai",
            f"backend.base_url={server.base_url}",
            "backend.max_concurrency=1",
            "dataset.limit=40",
            "tracking.offline=true",
            "trainer.progress_bar=false",
            f"paths.request_cache={tmp_path}/requests.sqlite",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
            env=clean_env,
        )
        predictions = tmp_path / "run" / "predictions.jsonl"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and job.poll() is None:
            if predictions.is_file() and len(predictions.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        job.send_signal(signal.SIGINT)
        stdout, stderr = job.communicate(timeout=60)
    output = stdout + stderr
    assert job.returncode == 130, output[-3000:]
    kept = len(predictions.read_text().splitlines())
    lines = [line for line in stderr.splitlines() if line.startswith("interrupted")]
    assert lines == [f"interrupted: {kept} answers kept in {tmp_path / 'run'}; resume=true continues"], stderr
    assert 3 <= kept < 40 and not [noise for noise in NOISE if noise in output], output[-3000:]
    assert json.loads((tmp_path / "run" / "tracking_pending.json").read_text())["status"] == "KILLED"


@pytest.mark.parametrize(
    "module, args",
    [("esgexp.leaderboard", []), ("esgexp.compare", ["0123abcd", "4567cdef"])],
    ids=["leaderboard", "compare"],
)
def test_ctrl_c_is_one_line_in_the_other_commands(tmp_path, clean_env, module, args):
    """Here while each waits for a tracking server that takes connections and never answers."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        job = start_cli(
            module, *args, f"tracking.uri={uri}", "tracking.connect_timeout_s=60", cwd=tmp_path, env=clean_env
        )
        silent.settimeout(120)
        connection, _ = silent.accept()  # the command is waiting for /health
        job.send_signal(signal.SIGINT)
        stdout, stderr = job.communicate(timeout=60)
        connection.close()
    assert job.returncode == 130, stdout + stderr
    assert [line for line in stderr.splitlines() if line.strip()] == ["interrupted (Ctrl-C)"]
    assert not [noise for noise in NOISE if noise in stdout + stderr]


def test_ctrl_c_in_a_build_says_where_its_answers_are_and_how_to_go_on(tmp_path, clean_env, corpus_dir):
    with FakeOpenAI(delay=1.0, answer="{}") as server:
        out = tmp_path / "built"
        job = start_cli(
            "esgexp.build",
            f"corpus={corpus_dir}",
            "backend=openai",
            f"backend.base_url={server.base_url}",
            f"out={out}",
            f"paths.request_cache={tmp_path}/requests.sqlite",
            "tracking.offline=true",
            "progress=false",
            cwd=tmp_path,
            env=clean_env,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and job.poll() is None and server.count < 2:
            time.sleep(0.1)
        job.send_signal(signal.SIGINT)
        stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == 130, stdout + stderr
    lines = [line for line in stderr.splitlines() if line.startswith("interrupted")]
    assert lines == [
        f"interrupted: the answers received are kept in the request cache; rerun with out={out} resume=true to go on"
    ], stderr
    assert not [noise for noise in NOISE if noise in stdout + stderr], stdout + stderr
