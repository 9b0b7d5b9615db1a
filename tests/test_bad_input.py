"""Bad input, tried as a user meets it: one clear message (key, file, line, what to do), printed once,
no traceback, and the run folder says it failed."""

import json
import logging
import re

import pytest
import torch
from cli import run_cli

from esgexp.cli.overrides import did_you_mean
from esgexp.data.climretrieve import ClimRetrieveReportLevel
from esgexp.data.esgbench import ESGBenchGold
from esgexp.data.esgenius import ESGeniusCSV
from esgexp.data.sustainableqa import SustainableQA
from esgexp.errors import UserError
from esgexp.jobs.settings import problems

HEADER = "query_id,query,answer,A,B,C,D\n"
# line 3 holds "café" saved as cp1252 (0xe9), not UTF-8: column 13 of that line
CP1252_CSV = (HEADER + "q1,First question?,A,a,b,c,d\n" + "q2,Which café wins?,B,a,b,c,d\n").encode("cp1252")


def esgexp(cwd, env, *args, module="esgexp"):
    return run_cli(module, *args, cwd=cwd, env=env)


def assert_told_once(result, message: str, code: int = 2) -> None:
    """Exit ``code``; ``message`` once on stderr (nothing of it on stdout); no traceback."""
    assert result.returncode == code, result.stderr[-2000:]
    assert (result.stdout + result.stderr).count(message) == 1, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stdout + result.stderr


@pytest.fixture
def cp1252_csv(tmp_path):
    path = tmp_path / "mcq.csv"
    path.write_bytes(CP1252_CSV)
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["dataset.path={csv}"],
            "mcq.csv line 3, column 13: byte 0xe9 is not valid utf-8 (invalid continuation byte); "
            "re-save the file as UTF-8, or give the encoding it was saved in with dataset.encoding=...",
        ),
        (
            ["dataset.limit=abc", "seed=-1", "cache=sometimes"],  # every bad setting at once, each with its key
            "seed must be an integer from 0 to 4294967295, got -1; cache must be one of read_write, read_only, refresh, off, "
            "got 'sometimes'; dataset.limit must be an integer >= 1 or null, got 'abc'",
        ),
        (
            ["experiment=esgbench_score", "dataset=esgbench_sample", "predictions=/no/such.jsonl"],
            "predictions=/no/such.jsonl: file not found (the predictions JSONL to score",
        ),
        (
            [
                "experiment=finetune_sustainableqa",
                "dataset=sustainableqa_sample",
                "model=local",
                "model.path=/no/model",
                "ckpt_path=/no/such.ckpt",
            ],
            "ckpt_path=/no/such.ckpt: no such checkpoint",
        ),
    ],
)
def test_a_bad_input_is_one_message_and_a_failed_run_folder(tmp_path, clean_env, cp1252_csv, args, message):
    result = esgexp(tmp_path, clean_env, *[a.format(csv=cp1252_csv) for a in args])
    assert_told_once(result, message)
    (run_dir,) = {p.parent for p in (tmp_path / "runs").glob("*/*/*/.hydra")}
    assert message in (run_dir / "FAILED").read_text()  # the folder says why it holds no results
    assert "[ERROR] - " in (log := (run_dir / "esgexp.log").read_text()) and message in log
    if "ckpt_path" in message:  # said before torch and Lightning load (they log the training precision)
        assert "precision" not in result.stdout + result.stderr


def test_the_file_loads_in_the_encoding_it_was_saved_in(cp1252_csv):
    loaded = ESGeniusCSV(name="x", path=str(cp1252_csv), encoding="cp1252").load()
    assert [item.question for item in loaded.items] == ["First question?", "Which café wins?"]


def test_every_loader_names_the_file_line_and_encoding(tmp_path):
    gold = tmp_path / "gold.jsonl"
    record = '{"doc_name": "D", "question": "%s", "answer": "caf\xe9", "category": "C", "evidence": [{"evidence_page_num": 1}]}'
    gold.write_bytes(("\n".join([record % "Q1?", record % "Q2?"]) + "\n").encode("latin-1"))
    sqa = tmp_path / "sqa"
    sqa.mkdir()
    (sqa / "test.json").write_bytes(
        '{"all_chunks_qas": [\n{"metadata": {"paragraph": "\xe9t\xe9"}, '
        '"qa_pairs_factoid": {"qa_pairs": [{"question": "Q?", "answer": "A"}]}}], '
        '"all_table_qas": []}'.encode("latin-1")
    )
    climate = tmp_path / "rl.csv"
    climate.write_bytes(",paragraph,report,question,relevance\n0,P,R.pdf,Q?,1\n1,\xe9,R.pdf,Q?,2\n".encode("latin-1"))
    cases = [  # file line, and column = the bad byte's place in the (ASCII) line
        (ESGBenchGold("g", str(gold)), f"{gold} line 1, column 52: byte 0xe9"),
        (SustainableQA("s", str(sqa)), f"{sqa / 'test.json'} line 2, column 29: byte 0xe9"),
        (ClimRetrieveReportLevel("c", str(climate)), f"{climate} line 3, column 3: byte 0xe9"),
    ]
    for loader, message in cases:
        with pytest.raises(UserError, match=r"dataset.encoding=") as error:
            loader.load()
        assert str(error.value).startswith(message)
    # Read in the encoding they were saved in, the same files load.
    assert [i.answers for i in ESGBenchGold("g", str(gold), encoding="latin-1").load().items] == [("café",)] * 2
    assert SustainableQA("s", str(sqa), encoding="latin-1").load().items[0].context == ("été",)
    assert [p.text for p in ClimRetrieveReportLevel("c", str(climate), encoding="latin-1").load().passages] == [
        "P",
        "é",
    ]


def test_a_misspelt_key_gets_a_did_you_mean(tmp_path, clean_env):
    """Not Hydra's advice to append the key (exit 1): the key it is close to, exit 2."""
    result = esgexp(tmp_path, clean_env, "dataset.limt=3")
    assert_told_once(result, "error: dataset.limt is not a setting: did you mean dataset.limit? (dataset.limit=3)")
    assert "+dataset.limt" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr
    keys = ["dataset.limit", "dataset.seed", "trainer.batch_size", "seed"]
    assert did_you_mean("trainer.batchsize", keys) == "trainer.batch_size"
    assert did_you_mean("seeed", keys) == "seed"
    assert did_you_mean("completely.different", keys) is None


def test_every_shipped_experiment_and_model_passes_the_settings_check(make_cfg):
    for overrides in [
        (),
        ("experiment=finetune_sustainableqa",),
        ("experiment=climretrieve_retrieval",),
        ("experiment=esgbench_score", "predictions=p.jsonl"),
        ("model=gpt-4o",),
        ("backend=vllm",),
    ]:
        assert problems(make_cfg(*overrides)) == [], overrides


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("dataset.limit=2.5",), "dataset.limit must be an integer >= 1 or null, got 2.5"),
        (
            ("dataset.encoding=klingon",),
            "dataset.encoding must be a text encoding such as utf-8, cp1252 or latin-1, got 'klingon'",
        ),
        (("dataset.limit='3'",), "dataset.limit must be an integer >= 1 or null, got '3'"),
        (
            ("strategy=context", "strategy.context=all"),
            "strategy.context must be one of full, best_line or null, got 'all'",
        ),
        (
            ("experiment=sustainableqa_factoid", "strategy=context"),
            "strategy.context must be one of full or null, got 'best_line'",
        ),
        (("strategy=rag", "strategy.top_k=0"), "strategy.top_k must be an integer >= 1, got 0"),
        (
            ("experiment=climretrieve_retrieval", "retrieval.ks=[5,0]"),
            "retrieval.ks must be a non-empty list of integers >= 1, got [5, 0]",
        ),
        # scoring.max_new_tokens copies it (${model.generation.max_new_tokens}): named once, at its source
        (("model.generation.max_new_tokens=-3",), "model.generation.max_new_tokens must be an integer >= 1, got -3"),
        (("trainer.batch_size=0",), "trainer.batch_size must be an integer >= 1, got 0"),
        (("resume=yes",), "resume must be true or false, got 'yes'"),
        (("stats.confidence=1",), "stats.confidence must be a number >= 0.5 and < 1, got 1"),
        (("retriever.k1=abc",), "retriever.k1 must be a number >= 0, got 'abc'"),
        (("retriever.stopwords=french",), "retriever.stopwords must be one of english or null, got 'french'"),
        (
            ("retriever=hybrid", "retriever.dense.backend=annoy"),
            "retriever.dense.backend must be one of numpy, faiss, got 'annoy'",
        ),
        (("backend=openai", "backend.timeout_s=0"), "backend.timeout_s must be a number > 0, got 0"),
        (
            ("backend=vllm", "backend.gpu_memory_utilization=1.5"),
            "backend.gpu_memory_utilization must be a number > 0 and <= 1, got 1.5",
        ),
        (
            ("experiment=finetune_sustainableqa", "trainer.max_steps=null"),
            "trainer.max_steps or trainer.max_epochs must be set",
        ),
    ],
)
def test_each_bad_setting_is_named_with_what_it_must_be(make_cfg, overrides, message):
    found = problems(make_cfg(*overrides))
    assert len(found) == 1 and message in found[0], found


def test_climretrieve_summary_shows_skipped_rows(make_cfg, capsys, tmp_path):
    from esgexp.core.config import BUNDLED_DIR
    from esgexp.run import run_job

    data = tmp_path / "rl.csv"
    lines = (BUNDLED_DIR / "climretrieve" / "report_level_sample.csv").read_text(encoding="utf-8").splitlines()
    data.write_text(
        "\n".join([*lines, "99,Some paragraph.,Northwind Foods 2023 Sustainability Report.pdf,Q?,,high,0,0"]) + "\n",
        encoding="utf-8",
    )
    metrics = run_job(
        make_cfg(
            "experiment=climretrieve_retrieval", f"dataset.path={data}", "dataset.limit=2", "tracking.offline=true"
        )
    )  # the table is the point here, not MLflow
    assert metrics["n_skipped_rows"] == 1
    assert any(line.split() == ["skipped", "rows", "1"] for line in capsys.readouterr().out.splitlines())
    skipped = (tmp_path / "run" / "skipped_rows.txt").read_text()
    assert f"{data} line {len(lines) + 1}: field 'relevance': 'high' is not a number" in skipped


def test_logprob_scoring_of_a_reasoning_model_warns(make_cfg, caplog):
    from esgexp.tasks.generation import make_requests

    cfg = make_cfg("model=deepseek-r1-distill-qwen-1.5b", "scoring=logprob")
    with caplog.at_level(logging.WARNING, logger="esgexp.tasks.generation"):
        make_requests(cfg, [], {})
    (record,) = [r for r in caplog.records if "skip the reasoning" in r.getMessage()]
    assert "scoring=generate" in record.getMessage()


def test_each_unreadable_document_is_reported_once_and_the_rest_ingested(tmp_path, clean_env):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a PDF")
    (docs / "latin.txt").write_bytes("Le café émet moins.\n".encode("cp1252"))
    (docs / "notes.txt").write_text("Scope 1 emissions fell by 4% in 2023.\n", encoding="utf-8")
    result = esgexp(
        tmp_path, clean_env, f"corpus.pdf_dir={docs}", "corpus.name=c", "progress=false", module="esgexp.ingest"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert output.count("broken.pdf") == 1 and output.count("latin.txt") == 1 and "Traceback" not in output
    assert (
        "latin.txt: line 1, column 7: byte 0xe9 is not valid utf-8 (invalid continuation byte); re-save the file as UTF-8"
        in output
    )
    assert not (tmp_path / "FAILED").exists()  # ingestion has no run folder: nothing lands in the launch folder
    passages = (tmp_path / "data" / "corpora" / "c" / "paragraphs" / "passages.jsonl").read_text().splitlines()
    assert [json.loads(line)["doc_id"] for line in passages] == ["notes"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible here")
@pytest.mark.parametrize(
    "overrides, message",
    [
        (("trainer=gpu",), "trainer.accelerator=gpu needs a CUDA GPU, but no CUDA GPU is visible here"),
        (("model.load_in_4bit=true",), "model.load_in_4bit=true (QLoRA) needs a CUDA GPU"),
        (
            ("trainer=gpu", "model.load_in_4bit=true"),
            "trainer.accelerator=gpu and model.load_in_4bit=true (QLoRA) need a CUDA GPU, but no CUDA GPU is visible "
            "here; nothing was loaded: run it on a GPU machine, or set trainer.accelerator=cpu (or auto) and "
            "model.load_in_4bit=false",
        ),
    ],
)
def test_a_gpu_setting_without_a_gpu_is_refused_before_the_gguf_is_converted(make_cfg, tmp_path, overrides, message):
    """The packaged GGUF model (about 30 s to convert into a fresh cache) is never converted: the check comes first."""
    from esgexp.run import run_job

    cfg = make_cfg(*overrides, f"paths.cache_dir={tmp_path}/cache", "dataset.limit=1")
    assert cfg.model.get("gguf")
    with pytest.raises(UserError, match=re.escape(message)):
        run_job(cfg)
    assert not (tmp_path / "cache" / "models").exists() and not (tmp_path / "run" / "config.yaml").exists()
