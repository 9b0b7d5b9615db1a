"""Advice that works and exit codes that tell the truth (issue 36): a full disk offers only what the command
accepts, a failed build does not block its rerun, corpus names stay under ``paths.corpus_dir`` and are not
replaced from another folder, the wrong kind of ESGBench file or the wrong corpus is named as such, a failed
run is not compared, and the leaderboard does not repeat other runs' row warnings."""

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest
from cli import start_cli
from helpers import composed as compose_config
from omegaconf import OmegaConf

from esgexp.cli.command import user_message
from esgexp.core.config import CONF_DIR
from esgexp.errors import UserError

BUNDLED = Path(__file__).resolve().parent.parent / "esgexp" / "data" / "bundled"
MCQ_CSV = BUNDLED / "esg_mcq_sample.csv"
PREDS = BUNDLED / "esgbench" / "preds_sample.jsonl"


def composed(config: str, root: Path, *overrides: str):
    """``conf/CONFIG.yaml`` with ``paths.root_dir=root`` and ``overrides``."""
    return compose_config(config, overrides=[f"paths.root_dir={root}", *overrides])


def test_a_full_disk_offers_resume_only_to_commands_that_take_it(tmp_path, monkeypatch):
    from esgexp.core.outputs import NoSpace

    monkeypatch.setattr(logging, "raiseExceptions", logging.raiseExceptions)  # NoSpace turns it off
    full = NoSpace(tmp_path / "pages.jsonl", "pages.jsonl was not written")
    raw = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "index.html"))
    for config in ("ingest", "leaderboard"):
        for error in (full, raw):
            message = user_message(error, config)
            assert message.endswith("then run the same command again")
            assert "resume=true" not in message
    for config in ("config", "build", "paper"):
        assert user_message(full, config).endswith("then run the same command with resume=true to continue")


def test_a_build_that_fails_before_asking_leaves_nothing_that_blocks_its_rerun(tmp_path, monkeypatch):
    from esgexp.builders.run import check_out_dir, run_build
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import ingest

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.md").write_text("Scope 1 emissions were 12,400 tCO2e in 2024.\n")
    ingest(tmp_path / "docs", tmp_path / "corpus", CharChunker(), progress=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = composed("build", tmp_path, f"corpus={tmp_path / 'corpus'}", f"out={tmp_path}/built", "model=gpt-4o")
    for _ in range(2):  # the same command twice: the same error, never "not empty"
        with pytest.raises(UserError, match="needs an API key"):
            run_build(cfg)
    assert list((tmp_path / "built").iterdir()) == []
    (tmp_path / "built" / "config.yaml").write_text("builder: {}\n")  # a build stopped while asking
    with pytest.raises(UserError, match="holds a build that did not finish: resume=true continues it"):
        check_out_dir(tmp_path / "built", resume=False)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"is not empty and holds no build: set out=NEW_DIR$"):
        check_out_dir(tmp_path / "mine", resume=False)


@pytest.mark.parametrize(
    ("name", "suggested"), [("../x", "x"), ("/abs/olute", "abs_olute"), ("a/b", "a_b"), ("..", "reports")]
)
def test_a_corpus_name_is_one_folder_name(tmp_path, name, suggested):
    from esgexp.cli.ingest import corpus_folder

    cfg = composed("ingest", tmp_path, f"corpus.pdf_dir={tmp_path}", f"corpus.name={name}")
    with pytest.raises(UserError) as caught:
        corpus_folder(cfg)
    assert str(caught.value).startswith(f"corpus.name={name} is not one folder name")
    assert f"e.g. corpus.name={suggested}," in str(caught.value)


def test_ingest_without_a_name_says_to_set_it(tmp_path):
    from esgexp.cli.ingest import corpus_folder

    with pytest.raises(UserError, match=r"^corpus.name is not set: give it on the command line, e\.g\. corpus.name="):
        corpus_folder(composed("ingest", tmp_path, f"corpus.pdf_dir={tmp_path}"))
    cfg = composed("ingest", tmp_path, f"corpus.pdf_dir={tmp_path}", "corpus.name=ours")
    assert corpus_folder(cfg) == tmp_path / "data" / "corpora" / "ours" / "paragraphs"


def test_two_ingests_of_one_name_from_two_folders_never_replace_each_other(tmp_path, clean_env):
    from esgexp.data.corpus import check_source

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{folder}.md").write_text(f"Report {folder}: water use fell by 5% in 2024.\n")
    env = dict(clean_env, ESGEXP_CACHE_DIR=str(tmp_path / "cache"))
    args = ("corpus.name=shared", "progress=false")
    both = [start_cli("esgexp.ingest", f"corpus.pdf_dir={tmp_path / f}", *args, cwd=tmp_path, env=env) for f in "ab"]
    outputs = [(process.wait(timeout=120), *process.communicate()) for process in both]
    assert sorted(code for code, _, _ in outputs) == [0, 2], outputs
    corpus = tmp_path / "data" / "corpora" / "shared" / "paragraphs"
    winner = json.loads((corpus / "report.json").read_text())["pdf_dir"]
    loser = str(tmp_path / ("b" if winner.endswith("a") else "a"))
    refused = next(err for code, _, err in outputs if code == 2)
    assert refused.strip() == (
        f"error: corpus {corpus} was ingested from {winner}, not {loser}: choose another corpus.name, "
        "or overwrite=true to replace it"
    )
    check_source(corpus, Path(winner))  # the same folder again: reused, not refused


def test_an_mcq_csv_or_a_predictions_file_given_as_esgbench_gold_is_the_wrong_kind_of_file(caplog):
    from esgexp.data.esgbench import ESGBenchGold

    with pytest.raises(UserError) as caught:
        ESGBenchGold("g", str(MCQ_CSV)).load()
    assert str(caught.value).startswith(
        f"{MCQ_CSV} is not an ESGBench gold file: its first 5 lines are unusable, e.g. line 1: invalid JSON"
    )
    assert str(caught.value).endswith("one JSON object per line with doc_name, question, answer, category, evidence")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 4  # not one per line of the file
    with pytest.raises(UserError, match=r"line 1: field 'answer': missing \(the line holds pred, retrieved_pages: "):
        ESGBenchGold("g", str(PREDS)).load()


def test_a_prediction_line_without_pred_names_the_field_it_holds(tmp_path):
    from esgexp.data.esgbench import load_predictions

    path = tmp_path / "p.jsonl"
    lines = [{"doc_name": "D", "question": "Q?", "pred": "12%"}, {"doc_name": "D", "question": "R?", "prediction": "5"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    loaded = load_predictions(path)
    assert list(loaded.by_key) == [("D", "Q?")]
    assert loaded.skipped == [
        f"{path} line 2: field 'pred': missing (the line holds prediction: not fields of an ESGBench predictions file)"
    ]


def test_the_gold_file_or_a_copy_given_as_predictions_is_refused(tmp_path):
    from esgexp.tasks.esgbench_score import refuse_gold_as_predictions

    gold = CONF_DIR.parent / "esgexp" / "data" / "bundled" / "esgbench" / "gold_sample.jsonl"
    copy = tmp_path / "preds.jsonl"
    copy.write_bytes(gold.read_bytes())
    with pytest.raises(UserError, match=r"predictions=.*gold_sample.jsonl is the gold file dataset.path="):
        refuse_gold_as_predictions(gold, gold)
    with pytest.raises(
        UserError, match=r"preds.jsonl holds the same bytes as the gold file .* scored against themselves"
    ):
        refuse_gold_as_predictions(copy, gold)
    copy.write_text(gold.read_text().replace('"answer"', '"pred"', 1))
    refuse_gold_as_predictions(copy, gold)  # a real predictions file passes


def test_verify_names_the_wrong_corpus_and_the_wrong_kind_of_file(tmp_path):
    from esgexp.builders.verify import main_audit
    from esgexp.data.chunking import CharChunker
    from esgexp.data.corpus import Corpus, ingest

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.md").write_text("Scope 1 emissions were 12,400 tCO2e in 2024.\n")
    ingest(tmp_path / "docs", tmp_path / "corpus", CharChunker(), progress=False)
    built = tmp_path / "built"
    built.mkdir()
    line = json.loads(PREDS.read_text().splitlines()[0]) | {"answer": "1", "category": "Environmental"}
    line["evidence"] = [{"evidence_text": "x", "evidence_page_num": 0}]
    (built / "esgbench.jsonl").write_text(json.dumps(line) + "\n")
    card = {"dataset": str(built / "esgbench.jsonl"), "corpus": {"path": "/data/reports", "corpus_hash": "f" * 64}}
    (built / "provenance.json").write_text(json.dumps(card))
    with pytest.raises(UserError) as caught:
        main_audit(str(built / "esgbench.jsonl"), str(tmp_path / "corpus"), tmp_path / "audit")
    hash_ = Corpus.load(tmp_path / "corpus").hash[:16]
    assert str(caught.value) == (
        f"wrong corpus: none of the 1 reports {built / 'esgbench.jsonl'} names (e.g. '{line['doc_name']}') is in "
        f"{tmp_path / 'corpus'} (it holds 1 document(s)); {built / 'esgbench.jsonl'} was built from corpus "
        f"/data/reports (corpus_hash ffffffffffffffff, this one's {hash_}): pass the corpus those reports were "
        "ingested into, corpus=PATH"
    )
    assert not (tmp_path / "audit").exists()
    with pytest.raises(UserError, match="is not an ESGBench gold file: its first 5 lines are unusable"):
        main_audit(str(MCQ_CSV), str(tmp_path / "corpus"), tmp_path / "audit")


def test_compare_refuses_a_failed_run_with_its_reason(tmp_path):
    from esgexp.analysis.compare import read_run_folder

    (tmp_path / "config.yaml").write_text("task: mcq\n")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "predictions.jsonl").write_text('{"id": "q1", "correct": true}\n')
    (tmp_path / "FAILED").write_text("RuntimeError: the store went away\n")
    with pytest.raises(UserError) as caught:
        read_run_folder(tmp_path, "RUN")
    assert str(caught.value) == (
        f"run RUN failed: RuntimeError: the store went away ({tmp_path / 'FAILED'}); compare finished runs"
    )


def test_the_leaderboard_reads_a_runs_questions_without_repeating_its_row_warnings(tmp_path, caplog):
    from esgexp.leaderboard.questions import dataset_questions
    from esgexp.leaderboard.store import Run

    bad = tmp_path / "bad.csv"
    shutil.copy(MCQ_CSV, bad)
    with bad.open("a", encoding="utf-8") as out:
        out.write('"9999","x","Bad row?","A","a","b"\n')
    node = OmegaConf.load(CONF_DIR / "dataset" / "esg_sample.yaml")
    node.path, node.seed = str(bad), 42
    OmegaConf.save({"dataset": node}, tmp_path / "config.yaml")
    caplog.set_level(logging.WARNING)
    questions = dataset_questions(Run("r1", {"run_dir": str(tmp_path)}, {}, {}), {})
    assert len(questions) == 48
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_build_never_resumes_into_a_jobs_run_folder(tmp_path):
    """A job's run folder given as a build's out: named as such, with or without resume=true, and left as it was."""
    from esgexp.builders.run import check_out_dir

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: mcq\ndataset:\n  name: esg_sample\n")
    (run / "predictions.jsonl").write_text('{"id": "1"}\n')
    before = {p.name: p.read_text() for p in run.iterdir()}
    for resume in (False, True):
        with pytest.raises(UserError, match=r"holds a job's run folder \(task=mcq\), not a build: set out=NEW_DIR$"):
            check_out_dir(run, resume=resume)
    assert {p.name: p.read_text() for p in run.iterdir()} == before


def test_a_server_group_with_a_backend_that_has_none_names_the_backend_that_does(tmp_path, clean_env):
    """backend/server=llama_cpp with backend=hf: the backend that takes a server, not Hydra's advice to add
    +backend/server (which fails too)."""
    from cli import run_cli

    done = run_cli("esgexp", "backend=hf", "backend/server=llama_cpp", cwd=tmp_path, env=clean_env)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: backend/server goes with backend=openai, not backend=hf: use backend=openai"


def test_a_path_that_does_not_exist_is_named_as_such(tmp_path, monkeypatch):
    """sync and compare of a folder that does not exist: "no such ...", not "not a run folder"; a bare file
    name that is not there names the current folder, not "."."""
    from esgexp.analysis.compare import load_run
    from esgexp.cli.sync import check_folder
    from esgexp.data.text_files import existing_file

    with pytest.raises(UserError, match=rf"^{tmp_path}/gone: no such file or folder in {tmp_path}$"):
        check_folder(tmp_path / "gone")
    with pytest.raises(UserError, match=r"neither a run folder nor an MLflow run id \(32 hex digits\): no such file"):
        load_run(tmp_path / "gone")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        UserError, match=rf"^dataset.path=x.csv: no such file or folder in the current folder \({tmp_path}\)$"
    ):
        existing_file("x.csv", "dataset.path")


def test_ingest_into_a_folder_it_cannot_make_is_one_line(tmp_path, clean_env):
    """A file where paths.corpus_dir's folder goes (as a read-only file system would): one line naming the
    setting, before any document is read, not a traceback."""
    from cli import run_cli

    (tmp_path / "afile").write_text("x")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.md").write_text("Scope 1 emissions were 12,400 tCO2e in 2024.\n")
    done = run_cli(
        "esgexp.ingest",
        f"corpus.pdf_dir={tmp_path / 'docs'}",
        "corpus.name=r",
        f"paths.corpus_dir={tmp_path}/afile/c",
        f"paths.cache_dir={tmp_path}/cache",
        cwd=tmp_path,
        env=clean_env,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: cannot write {tmp_path}/afile/c/r/paragraphs: {tmp_path}/afile is a file, not a folder; "
        "set paths.corpus_dir to a folder you can write to"
    )
