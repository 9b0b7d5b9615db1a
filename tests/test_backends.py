"""The backend interface: the request cache, the HF backend behind it, backend configs and job identity."""

import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest
from cli import run_cli
from helpers import read_jsonl
from omegaconf import OmegaConf

from esgexp.backends.base import GenerationRequest, LetterRequest, Response, RunContext
from esgexp.backends.cache import CachedBackend, RequestCache, cache_key
from esgexp.backends.hf import HFBackend
from esgexp.errors import UserError
from esgexp.jobs.identity import job_identity
from esgexp.run import run_job

REFERENCE = Path(__file__).parent / "data" / "smollm2_sample_predictions.jsonl"  # see tests/test_smollm2.py
PROMPT = "Question: Which GRI disclosure covers Scope 2?\nAnswer:"


def tiny_backend(tiny_model_dir, tmp_path, **settings):
    model = OmegaConf.create(
        {
            "name": "tiny",
            "path": str(tiny_model_dir),
            "gguf": None,
            "hub_id": None,
            "dtype": "float32",
            "adapter": None,
            "load_in_4bit": False,
            "chat_template": False,
        }
    )
    return HFBackend(
        model,
        RunContext(str(tmp_path / "cache"), f"sqlite:///{tmp_path}/db", 0),
        accelerator="cpu",
        progress_bar=False,
        **settings,
    )


# --- the request cache ---------------------------------------------------------------------------


def test_cache_key_holds_the_backend_identity_and_every_decoding_field():
    request = GenerationRequest("q1", PROMPT, max_new_tokens=8, stop=("\n",))
    key = cache_key({"backend": "hf", "model": "a"}, PROMPT, request)
    assert key != cache_key({"backend": "hf", "model": "b"}, PROMPT, request)  # two models never share an entry
    assert key != cache_key(
        {"backend": "hf", "model": "a"}, PROMPT, GenerationRequest("q1", PROMPT, max_new_tokens=9, stop=("\n",))
    )
    assert key != cache_key({"backend": "hf", "model": "a"}, PROMPT, GenerationRequest("q1", PROMPT, max_new_tokens=8))
    assert key != cache_key({"backend": "hf", "model": "a"}, PROMPT + " ", request)
    assert key == cache_key(
        {"backend": "hf", "model": "a"}, PROMPT, GenerationRequest("other-id", PROMPT, max_new_tokens=8, stop=("\n",))
    )
    letters = cache_key({"backend": "hf", "model": "a"}, PROMPT, LetterRequest("q1", PROMPT))
    assert letters != cache_key(
        {"backend": "hf", "model": "a"}, PROMPT, LetterRequest("q1", PROMPT, letters=("A", "B", "C", "D", "Z"))
    )


def test_cache_commits_each_response_and_follows_its_mode(tmp_path):
    path = tmp_path / "requests.sqlite"
    cache = RequestCache(path)
    cache.put("k", Response("q1", output="B", usage={"prompt_tokens": 3}))
    cache.put("failed", Response("q2", failed=True, error="boom"))
    # another connection (another process) sees the row at once: committed per response, WAL mode
    with sqlite3.connect(path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [row[0] for row in other.execute("SELECT key FROM responses")] == ["k"]
    hit = cache.get("k")
    assert (hit.output, hit.usage, hit.cached) == ("B", {"prompt_tokens": 3}, True)
    assert RequestCache(path, "refresh").get("k") is None
    read_only = RequestCache(path, "read_only")
    read_only.put("new", Response("q3", output="C"))
    assert read_only.get("k").output == "B" and read_only.get("new") is None


def test_an_unreadable_cache_file_is_moved_aside_and_rebuilt(tmp_path, caplog):
    path = tmp_path / "requests.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    cache = RequestCache(path)
    cache.put("k", Response("q1", output="A"))
    assert cache.get("k").output == "A"
    (aside,) = tmp_path.glob("requests.sqlite.unreadable-*")
    assert aside.read_bytes().startswith(b"this is not") and "unreadable" in caplog.text


def test_a_sampled_request_without_a_seed_is_never_cached():
    assert GenerationRequest("q", PROMPT).cacheable()
    assert GenerationRequest("q", PROMPT, temperature=0.7, seed=1).cacheable()
    assert not GenerationRequest("q", PROMPT, temperature=0.7).cacheable()


# --- the HF backend ------------------------------------------------------------------------------


def test_hf_backend_answers_both_kinds_and_a_rerun_comes_from_the_cache(tiny_model_dir, tmp_path):
    requests = [GenerationRequest(str(i), PROMPT + " " * i, max_new_tokens=4) for i in range(3)]
    letters = [LetterRequest(str(i), PROMPT + " " * i) for i in range(3)]
    first: list = []
    with CachedBackend(tiny_backend(tiny_model_dir, tmp_path), RequestCache(tmp_path / "c.sqlite")) as backend:
        backend.run(requests, first.extend)
        backend.run(letters, first.extend)
        assert backend.stats() == {"n_cached": 0, "n_requests": 6}
    again: list = []
    with CachedBackend(tiny_backend(tiny_model_dir, tmp_path), RequestCache(tmp_path / "c.sqlite")) as backend:
        backend.run(requests, again.extend)
        backend.run(letters, again.extend)
        assert backend.stats() == {"n_cached": 6, "n_requests": 0}
        assert backend.inner._model is None  # every answer came from the cache: the weights never loaded
    answers = lambda responses: sorted((r.id, r.output, r.scores is None, json.dumps(r.scores)) for r in responses)  # noqa: E731
    assert answers(first) == answers(again)
    assert all(r.cached for r in again) and not any(r.cached for r in first)
    assert sum(1 for r in first if r.scores and set(r.scores) == set("ABCD")) == 3


def test_hf_backend_builds_the_scorer_each_request_asks_for(tiny_model_dir, tmp_path):
    from esgexp.models.scoring import GenerateScorer, LogprobScorer, common_prefix

    backend = tiny_backend(tiny_model_dir, tmp_path)
    shared = "You are an expert in ESG. Answer with one letter.\n\n"
    prompts = [shared + p for p in (PROMPT, "Question: SDG 13?\nAnswer:")]
    tokens = backend.tokenizer(prompts)["input_ids"]
    logprob = backend.scorer([LetterRequest("a", prompts[0])], prompts, tokens)
    assert (
        isinstance(logprob, LogprobScorer)
        and logprob.prefix_ids == common_prefix(tokens)
        and list(logprob.letter_ids) == list("ABCD")
    )
    plain = tiny_backend(tiny_model_dir, tmp_path, prefix_cache=False).scorer(
        [LetterRequest("a", prompts[0], letters=tuple("ABCDZ"))], prompts, tokens
    )
    assert plain.prefix_ids == [] and list(plain.letter_ids) == list("ABCDZ")
    generate = backend.scorer([GenerationRequest("a", prompts[0], max_new_tokens=7, stop=("\n",))], prompts, tokens)
    assert isinstance(generate, GenerateScorer) and (generate.max_new_tokens, generate.stop) == (7, ("\n",))
    assert generate.prefix_ids == common_prefix(tokens)  # generation runs the shared prefix once too


def test_stop_strings_end_generation_only_after_text(tiny_model_dir, tmp_path):
    from esgexp.models.scoring import StopAfterText, cut_after_text

    tokenizer = tiny_backend(tiny_model_dir, tmp_path).tokenizer
    prompt = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    stop = StopAfterText(tokenizer, ["\n"], prompt.shape[1])

    def after(text):
        import torch

        return torch.cat([prompt, tokenizer(text, return_tensors="pt")["input_ids"]], dim=1)

    assert stop(after("\n 46"), None).tolist() == [False]  # a leading newline does not end the answer
    assert stop(after("\n 46\nQuestion"), None).tolist() == [True]
    assert cut_after_text("\n 46\nQuestion", ["\n"]) == "\n 46"
    assert cut_after_text("no stop here", ["\n"]) == "no stop here"


def test_hf_identity_names_the_weights_and_dtype(tiny_model_dir, tmp_path):
    identity = tiny_backend(tiny_model_dir, tmp_path).identity()
    assert identity["backend"] == "hf" and identity["dtype"] == "float32" and len(identity["weights"]) == 16
    (tiny_model_dir / "model.safetensors").touch()  # weights saved over in place: a new identity
    assert tiny_backend(tiny_model_dir, tmp_path).identity() != identity


# --- configs and identity ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, served, url, key",
    [
        ("gpt-4o", "gpt-4o", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("gpt-4o-mini", "gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("deepseek-v3", "deepseek-chat", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        ("deepseek-r1", "deepseek-reasoner", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    ],
)
def test_api_models_select_the_api_backend_themselves(make_cfg, model, served, url, key):
    cfg = make_cfg(f"model={model}")
    assert (cfg.backend.name, cfg.backend.base_url, cfg.backend.api_key_env, cfg.model.hub_id) == (
        "openai",
        url,
        key,
        served,
    )
    assert make_cfg(f"model={model}", "backend=hf").backend.name == "hf"


def test_backend_joins_the_job_identity_but_its_speed_settings_do_not(make_cfg):
    hf = job_identity(make_cfg())
    assert job_identity(make_cfg("backend=openai")) != hf
    assert job_identity(make_cfg("trainer.batch_size=2")) == hf
    served = job_identity(make_cfg("backend=openai"))
    assert job_identity(make_cfg("backend=openai", "backend.max_concurrency=1", "backend.timeout_s=5")) == served
    assert job_identity(make_cfg("backend=openai", "backend.base_url=http://127.0.0.1:9/v1")) != served


def test_an_api_model_without_its_key_fails_before_any_work(make_cfg, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="set the environment variable OPENAI_API_KEY"):
        run_job(make_cfg("model=gpt-4o", "dataset.limit=2"))


def test_the_vllm_backend_names_its_extra_when_vllm_is_missing(make_cfg):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(UserError, match=r'pip install -e "\.\[vllm\]"'):
        run_job(make_cfg("backend=vllm", "dataset.limit=2"))


# --- the headline command -------------------------------------------------------------------------


def test_experiment_rag_runs_mcq_with_retrieved_passages(tiny_cfg, tmp_path, made_store):
    cfg = tiny_cfg("experiment=rag", "dataset.limit=4")
    assert (cfg.task, cfg.strategy.name, cfg.retriever.name, cfg.scoring.name, cfg.template.name) == (
        "mcq",
        "rag",
        "bm25",
        "generate",
        "esgenius",
    )
    metrics = run_job(cfg)
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    assert metrics["n_items"] == 4 and metrics["rag/n_with_gold"] == 4
    assert all(len(r["retrieval"]["passages"]) == 3 for r in records)


def test_experiment_rag_without_the_weights_fails_before_any_index(tmp_path, clean_env):
    done = run_cli(
        "esgexp",
        "experiment=rag",
        "model=qwen2.5-14b",
        f"paths.root_dir={tmp_path}",
        f"paths.index_dir={tmp_path}/indexes",
        cwd=Path(__file__).resolve().parent.parent,
        env=clean_env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "Qwen/Qwen2.5-14B is not in the local Hugging Face cache" in done.stderr and "hf download" in done.stderr
    assert (done.stdout + done.stderr).count("is not in the local Hugging Face cache") == 1
    assert not (tmp_path / "indexes").exists()  # reported before retrieval built anything


def cuda_and_vllm() -> str | None:
    """Why a vLLM test cannot run here, or None when it can."""
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (vLLM does not run on the CPU)"
    if importlib.util.find_spec("vllm") is None:
        return 'needs vllm: pip install -e ".[vllm]"'
    return None


@pytest.mark.skipif(cuda_and_vllm() is not None, reason=cuda_and_vllm() or "")
@pytest.mark.parametrize("scoring", ["generate", "logprob"])
def test_vllm_answers_the_bundled_sample_like_hf(make_cfg, tmp_path, scoring):
    reference = {r["id"]: r for r in read_jsonl(REFERENCE) if r["scoring"] == scoring}
    metrics = run_job(make_cfg("backend=vllm", "backend.dtype=float16", f"scoring={scoring}", "dataset.limit=24"))
    records = read_jsonl(tmp_path / "run" / "predictions.jsonl")
    agree = sum(r["parsed"] == reference[r["id"]]["parsed"] for r in records) / len(records)
    assert metrics["n_items"] == 24 and agree >= 0.8, agree


def test_a_reasoning_block_opened_by_the_chat_template_stays_in_front_of_the_output(tiny_model_dir, tmp_path):
    from esgexp.eval.mcq import final_answer

    backend = tiny_backend(tiny_model_dir, tmp_path)
    backend.model_cfg.chat_template = True
    request = GenerationRequest("q1", PROMPT, max_new_tokens=3)
    plain = []
    backend.run([request], plain.extend)
    assert not plain[0].output.startswith("<think>")
    # as DeepSeek-R1 distills' and QwQ's templates do: the generation prompt ends by opening the block
    backend.tokenizer.chat_template += "<think>\n"
    opened = []
    backend.run([request], opened.extend)
    assert opened[0].output.startswith("<think>\n")
    assert final_answer(opened[0].output) is None  # 3 new tokens never close it: unfinished reasoning
