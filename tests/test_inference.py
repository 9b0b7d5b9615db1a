"""Model layer on a tiny random Llama: loading, letter tokens, batched scoring, OOM retry."""

import itertools

import pytest
import torch
from omegaconf import OmegaConf

from esgexp.errors import UserError
from esgexp.models.inference import InferenceModule, PromptDataModule, run_inference
from esgexp.models.loading import load_model_and_tokenizer, resolve_model_dir, torch_dtype
from esgexp.models.scoring import GenerateScorer, LogprobScorer, common_prefix, letter_token_ids

PROMPTS = [
    "Question: Which GRI disclosure covers Scope 2?\nAnswer:",
    "Question: Under IFRS S2, when did reporting start for annual periods, and how is relief given?\nAnswer:",
    "Question: SDG 13?\nAnswer:",
]


def model_cfg(path, **extra):
    return OmegaConf.create(
        {"name": "tiny", "path": str(path), "gguf": None, "hub_id": None, "dtype": "float32", **extra}
    )


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model_and_tokenizer(str(tiny_model_dir), model_cfg(tiny_model_dir), on_gpu=False)


def collect(model, scorer, tokenizer, prompts, batch_size):
    written = []
    data = PromptDataModule([str(i) for i in range(len(prompts))], prompts, tokenizer, batch_size)
    run_inference(model, scorer, data, written.extend, accelerator="cpu", progress_bar=False)
    return {r["id"]: r for r in written}


def test_loaded_model_is_in_eval_mode_with_left_padding(tiny):
    model, tokenizer = tiny
    assert not model.training and tokenizer.padding_side == "left" and tokenizer.pad_token is not None


def test_batches_are_length_sorted_and_left_padded(tiny):
    _, tokenizer = tiny
    data = PromptDataModule(["a", "b", "c"], PROMPTS, tokenizer, batch_size=2)
    batch = next(iter(data.predict_dataloader()))
    assert batch["ids"] == ["b", "a"]  # longest first
    mask = batch["attention_mask"]
    assert mask[0].all() and mask[1, 0] == 0 and mask[1, -1] == 1


def test_letter_tokens_follow_the_prompt(tiny):
    _, tokenizer = tiny
    ids = letter_token_ids(tokenizer, PROMPTS[0], ["A", "B", "C", "D"])
    for letter, token in ids.items():
        full = tokenizer(PROMPTS[0] + " " + letter)["input_ids"]
        plain = tokenizer(PROMPTS[0] + letter)["input_ids"]
        assert token in (full[-1], plain[-1]) and tokenizer.decode([token]).strip() == letter


@pytest.mark.numerics
def test_logprob_batched_equals_one_by_one(tiny):
    model, tokenizer = tiny
    scorer = LogprobScorer(letter_token_ids(tokenizer, PROMPTS[0], list("ABCD")))
    batched = collect(model, scorer, tokenizer, PROMPTS, batch_size=3)
    for i, prompt in enumerate(PROMPTS):
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.inference_mode():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
        for letter, token in scorer.letter_ids.items():
            assert batched[str(i)]["scores"][letter] == pytest.approx(logprobs[token].item(), abs=1e-4)
        assert batched[str(i)]["output"] in "ABCD"


@pytest.mark.numerics
def test_generate_batched_equals_one_by_one(tiny):
    model, tokenizer = tiny
    scorer = GenerateScorer(tokenizer, max_new_tokens=5)
    batched = collect(model, scorer, tokenizer, PROMPTS, batch_size=3)
    single = collect(model, scorer, tokenizer, PROMPTS, batch_size=1)
    assert {k: v["output"] for k, v in batched.items()} == {k: v["output"] for k, v in single.items()}
    assert all(isinstance(v["output"], str) for v in batched.values())


class FlakyScorer:
    """Runs out of memory on any batch larger than ``limit``; fails item '1' always."""

    def __init__(self, limit):
        self.limit, self.sizes = limit, []

    def __call__(self, model, ids, input_ids, attention_mask):
        self.sizes.append(len(input_ids))
        if len(input_ids) > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [{"output": "A"} for _ in input_ids]


def test_out_of_memory_batch_is_retried_in_halves():
    scorer = FlakyScorer(limit=1)
    module = InferenceModule(torch.nn.Linear(1, 1), scorer)
    results = module.score(["1", "2", "3", "4"], torch.zeros(4, 2), torch.ones(4, 2))
    assert [r["id"] for r in results] == ["1", "2", "3", "4"]
    assert all(r["output"] == "A" and not r.get("failed") for r in results)
    assert scorer.sizes[:3] == [4, 2, 1]


def test_item_that_fails_alone_is_recorded_not_dropped():
    module = InferenceModule(torch.nn.Linear(1, 1), FlakyScorer(limit=0))
    results = module.score(["x", "y"], torch.zeros(2, 2), torch.ones(2, 2))
    assert [r["id"] for r in results] == ["x", "y"]
    assert all(r["failed"] and "out of memory" in r["error"] for r in results)


def test_other_errors_are_not_swallowed():
    def broken(model, ids, input_ids, attention_mask):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        InferenceModule(torch.nn.Linear(1, 1), broken).score(["x"], torch.zeros(1, 2), torch.ones(1, 2))


def test_dtype_choice():
    assert torch_dtype("auto", on_gpu=True) == torch.float16
    assert torch_dtype("auto", on_gpu=False) == torch.float32
    assert torch_dtype("bfloat16", on_gpu=False) == torch.bfloat16


@pytest.mark.numerics
def test_bf16_model_loads_and_scores(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), model_cfg(tiny_model_dir, dtype="bfloat16"), False)
    assert next(model.parameters()).dtype == torch.bfloat16
    scorer = LogprobScorer(letter_token_ids(tokenizer, PROMPTS[0], list("ABCD")))
    assert len(collect(model, scorer, tokenizer, PROMPTS, batch_size=2)) == 3


def test_uncached_hub_id_fails_at_once_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cfg = OmegaConf.create({"name": "qwen2.5-14b", "path": None, "gguf": None, "hub_id": "Qwen/Qwen2.5-14B"})
    with pytest.raises(UserError, match=r"Qwen/Qwen2.5-14B is not in the local Hugging Face cache.*hf download"):
        resolve_model_dir(cfg, tmp_path)


def test_bad_local_path_is_named(tmp_path):
    with pytest.raises(UserError, match="is not a model folder"):
        resolve_model_dir(model_cfg(tmp_path / "missing"), tmp_path)


def test_missing_weights_package_is_named(tmp_path):
    cfg = OmegaConf.create(
        {"name": "x", "path": None, "hub_id": None, "gguf": {"package": "no_such_pkg_xyz", "file": "m.gguf"}}
    )
    with pytest.raises(UserError, match=r"package 'no_such_pkg_xyz'.*not installed"):
        resolve_model_dir(cfg, tmp_path)


def test_processes_that_need_a_gguf_model_at_once_convert_it_once(monkeypatch, tmp_path):
    """Two callers on a cold cache: the second waits on the first's lock, then finds its folder."""
    import threading
    import time

    from esgexp.models import loading

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    conversions = []

    def convert(gguf_path, target):
        conversions.append(target)
        time.sleep(0.5)  # long enough for the other caller to reach the lock
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "find_package_file", lambda package, filename: gguf)
    monkeypatch.setattr(loading, "convert_gguf", convert)
    folders = []
    callers = [
        threading.Thread(target=lambda: folders.append(loading.converted_gguf_dir("m", "pkg", "model.gguf", tmp_path)))
        for _ in range(2)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(conversions) == 1 and folders == [conversions[0]] * 2
    assert (folders[0] / "config.json").is_file()


def test_the_models_command_prints_what_a_job_loads_and_names_a_bad_folder(tiny_model_dir, tmp_path, capsys):
    """``python -m esgexp.models`` (run by ``make install`` for the default model) resolves the weights as a job does."""
    from esgexp.models.__main__ import main

    main(["model=local", f"model.path={tiny_model_dir}"])
    assert capsys.readouterr().out == f"model local: {tiny_model_dir}\n"
    with pytest.raises(UserError, match=rf"model.path={tmp_path} is not a model folder \(no config.json\)"):
        main(["model=local", f"model.path={tmp_path}"])


@pytest.mark.numerics
def test_prefix_cache_gives_the_same_scores(tiny):
    model, tokenizer = tiny
    shared = "You are an expert in ESG. Answer with one letter.\n\n"
    prompts = [shared + p for p in PROMPTS]
    letters = letter_token_ids(tokenizer, prompts[0], list("ABCD"))
    prefix = common_prefix(tokenizer(prompts)["input_ids"])
    assert len(prefix) >= 8 and all(t[: len(prefix)] == prefix for t in tokenizer(prompts)["input_ids"])
    plain = collect(model, LogprobScorer(letters), tokenizer, prompts, batch_size=2)
    cached = collect(model, LogprobScorer(letters, prefix), tokenizer, prompts, batch_size=2)
    for key in plain:
        for letter in "ABCD":
            assert cached[key]["scores"][letter] == pytest.approx(plain[key]["scores"][letter], abs=1e-4)


def test_common_prefix_leaves_a_token_of_each():
    assert common_prefix([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3]]) == [1, 2]
    assert common_prefix([[1, 2], [3]]) == []
    assert common_prefix([]) == []


def test_rows_are_laid_out_prefix_padding_rest():
    from esgexp.models.scoring import padded_after_prefix

    input_ids = torch.tensor([[0, 0, 7, 8, 5], [7, 8, 4, 4, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    ids, new_mask = padded_after_prefix(input_ids, mask, [7, 8], pad_id=0)
    assert ids.tolist() == [[7, 8, 0, 0, 5], [7, 8, 4, 4, 6]]
    assert new_mask.tolist() == [[1, 1, 0, 0, 1], [1, 1, 1, 1, 1]]
    with pytest.raises(RuntimeError, match="does not start with the cached prefix"):
        padded_after_prefix(input_ids, mask, [7, 9], pad_id=0)


@pytest.mark.numerics
def test_generate_with_prefix_cache_equals_without(tiny, monkeypatch):
    model, tokenizer = tiny
    shared = "You are an expert in ESG. Answer with one letter.\n\n"
    prompts = [shared + p for p in PROMPTS]
    prefix = common_prefix(tokenizer(prompts)["input_ids"])
    assert len(prefix) >= 8
    plain = GenerateScorer(tokenizer, max_new_tokens=8)
    outputs = {}
    for batch_size in (1, 3):
        for name, scorer in (
            ("plain", plain),
            ("cached", GenerateScorer(tokenizer, max_new_tokens=8, prefix_ids=prefix)),
        ):
            result = collect(model, scorer, tokenizer, prompts, batch_size)
            outputs[name, batch_size] = {k: v["output"] for k, v in result.items()}
    assert outputs["cached", 3] == outputs["plain", 3] == outputs["cached", 1] == outputs["plain", 1]
    assert any(outputs["plain", 1].values())  # something was generated

    widths, forward = [], model.forward
    monkeypatch.setattr(model, "forward", lambda **kw: widths.append(kw["input_ids"].shape[1]) or forward(**kw))
    collect(model, GenerateScorer(tokenizer, max_new_tokens=2, prefix_ids=prefix), tokenizer, prompts, 3)
    longest = max(len(t) for t in tokenizer(prompts)["input_ids"])
    assert widths[:2] == [len(prefix), longest - len(prefix)]  # the prefix once, then only the rest


def test_a_local_model_with_a_chat_template_left_unused_is_warned_about(make_cfg, tiny_model_dir, tmp_path, caplog):
    """model=local model.path=DIR keeps model.chat_template=false: an instruct model's tokenizer has a template,
    and prompts sent as plain text answer badly (SmolLM2 this way: invalid rate 1.000), so one warning names the
    setting; with the setting true, none."""
    from esgexp.backends.base import RunContext
    from esgexp.backends.hf import HFBackend

    for chat_template, warned in (("false", True), ("true", False)):
        cfg = make_cfg("model=local", f"model.path={tiny_model_dir}", f"model.chat_template={chat_template}")
        caplog.clear()
        with caplog.at_level("WARNING", logger="esgexp"):
            HFBackend(cfg.model, RunContext(str(tmp_path), "", 0)).tokenizer  # noqa: B018 (loads it)
        assert ("model.chat_template=true" in caplog.text) == warned, caplog.text


def letter_gap(scores: dict) -> float:
    """The smallest gap between two letters next to each other in the order of ``scores``."""
    ordered = sorted(scores.values(), reverse=True)
    return min(a - b for a, b in itertools.pairwise(ordered))


@pytest.mark.numerics
@pytest.mark.parametrize("prefixed", [False, True], ids=["plain", "prefix-cache"])
def test_bf16_autocast_scores_close_calls_again_in_float32(tiny, prefixed):
    model, tokenizer = tiny
    prompts = [("You are an expert in ESG. Answer with one letter.\n\n" if prefixed else "") + p for p in PROMPTS]
    letters = letter_token_ids(tokenizer, prompts[0], list("ABCD"))
    prefix = common_prefix(tokenizer(prompts)["input_ids"]) if prefixed else []
    exact = collect(model, LogprobScorer(letters, prefix), tokenizer, prompts, batch_size=3)
    fast = collect(model, LogprobScorer(letters, prefix, "bfloat16", 0.0), tokenizer, prompts, batch_size=3)
    assert not any("rechecked" in r for r in fast.values())
    assert all(fast[k]["scores"] != exact[k]["scores"] for k in exact)  # bf16 matrix products, not float32's
    # a margin between the rows' gaps: the rows closer than it are scored again, in float32
    gaps = sorted(letter_gap(r["scores"]) for r in fast.values())
    margin = (gaps[0] + gaps[1]) / 2
    checked = collect(model, LogprobScorer(letters, prefix, "bfloat16", margin), tokenizer, prompts, batch_size=3)
    for key, result in checked.items():
        close = letter_gap(fast[key]["scores"]) < margin
        assert result.get("rechecked", False) == close
        expected = exact[key] if close else fast[key]
        assert result["scores"] == pytest.approx(expected["scores"], abs=1e-5)
    assert sum(r.get("rechecked", False) for r in checked.values()) == 1
