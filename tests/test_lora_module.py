"""LoRA training: the learning-rate schedule, a short fit on the tiny Llama, checkpoints, adapters, checks."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from esgexp.core.config import CONF_DIR
from esgexp.core.records import QAItem
from esgexp.errors import UserError
from esgexp.models.lora import attach_adapter, check_seq_len, check_target_modules, wrap_for_training
from esgexp.models.scoring import GenerateScorer
from esgexp.strategies.qa import QAPrompter
from esgexp.training.lora_module import (
    GenerationCheck,
    LoraFineTuner,
    OptimSettings,
    RankAgreement,
    lr_factor,
    trainable_fingerprint,
)
from esgexp.training.sft_data import ExampleBuilder, GenerationSet, collate, pack

LORA = OmegaConf.create(
    {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear", "bias": "none", "modules_to_save": None}
)
TEMPLATE = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "template" / "qa.yaml"))
ITEMS = [
    QAItem(
        id="a",
        question="Which year is the net zero target?",
        answers=("2040",),
        qtype="factoid",
        context=("The board approved a net zero target for 2040 covering all scopes.",),
    ),
    QAItem(
        id="b",
        question="How much did Scope 1 emissions fall?",
        answers=("12 percent",),
        qtype="factoid",
        context=("Scope 1 emissions fell by 12 percent against the 2019 baseline.",),
    ),
    QAItem(
        id="c", question="What share of sites used renewable electricity?", answers=("64 percent",), qtype="factoid"
    ),
]
STEPS = 15
LR = 1e-2
# all-linear on the tiny Llama (hidden 32, 2 KV heads of 8, MLP 64, 2 layers): r * (in + out) per linear layer.
LORA_PARAMS = 2 * 8 * ((32 + 32) + (32 + 16) + (32 + 16) + (32 + 32) + 3 * (32 + 64))


def load_base(directory):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory)


def wrapped(directory, seed: int = 0):
    torch.manual_seed(seed)
    return wrap_for_training(load_base(directory), LORA, gradient_checkpointing=False, quantised=False)


def model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "n_tokens"}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def builder(tokenizer):
    return ExampleBuilder(QAPrompter(template=TEMPLATE, context="full"), tokenizer, False, 512)


@pytest.fixture(scope="module")
def batch(builder, tokenizer):
    examples, _ = builder.build(ITEMS)
    return collate(examples, tokenizer.pad_token_id)


class ModeProbe(L.Callback):
    """Records, at each training batch, whether the peft model and its LoRA dropout layers train."""

    def __init__(self):
        self.modes: list[tuple[bool, bool]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        dropouts = [m for n, m in pl_module.model.named_modules() if n.endswith("lora_dropout.default")]
        self.modes.append((pl_module.model.training, bool(dropouts) and all(m.training for m in dropouts)))


@pytest.fixture(scope="module")
def trained(tiny_model_dir, batch):
    """The tiny Llama with LoRA, fitted for STEPS steps on one repeated batch; weights and losses around it."""
    model = wrapped(tiny_model_dir)
    params_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.eval()
    with torch.no_grad():
        loss_before = model(**model_inputs(batch)).loss.item()
    module = LoraFineTuner(model, OptimSettings(lr=LR, weight_decay=0.0, warmup_steps=2, schedule="cosine"))
    probe, agreement = ModeProbe(), RankAgreement()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[probe, agreement],
    )
    loader = torch.utils.data.DataLoader([batch] * STEPS, batch_size=None)
    trainer.fit(module, train_dataloaders=loader)
    model.eval()
    with torch.no_grad():
        loss_after = model(**model_inputs(batch)).loss.item()
    return SimpleNamespace(
        model=model,
        module=module,
        trainer=trainer,
        probe=probe,
        agreement=agreement,
        params_before=params_before,
        loss_before=loss_before,
        loss_after=loss_after,
    )


def test_lr_factor_warmup_then_schedules():
    """Linear warm-up to 1; cosine halves at the midpoint and ends at 0; linear ends at 0; constant stays 1."""
    assert [lr_factor(s, 4, 20, "cosine") for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 4, 20, "cosine") == pytest.approx(1.0)
    assert lr_factor(12, 4, 20, "cosine") == pytest.approx(0.5)
    assert lr_factor(20, 4, 20, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(30, 4, 20, "cosine") == pytest.approx(0.0, abs=1e-12)  # clamped past the end
    assert lr_factor(12, 4, 20, "linear") == pytest.approx(0.5)
    assert lr_factor(20, 4, 20, "linear") == pytest.approx(0.0)
    assert [lr_factor(s, 4, 20, "constant") for s in (4, 12, 20, 25)] == [1.0] * 4
    assert lr_factor(0, 0, 10, "linear") == 1.0  # no warm-up


def test_training_lowers_the_loss(trained):
    """The fit lowers the loss on its batch: from ln(600) ~ 6.4 (random model) by well over 0.3 nats. (The frozen
    random head and RMS norm cap the logits; 60 plain AdamW steps only reach ~5.8.)"""
    assert trained.trainer.global_step == STEPS
    assert trained.loss_before == pytest.approx(6.4, abs=0.1)
    assert trained.loss_after < trained.loss_before - 0.3, (trained.loss_before, trained.loss_after)


def test_schedule_is_wired_to_the_run_length(trained):
    """The scheduler runs to the trainer's step count: after the last step the cosine factor is 0."""
    (config,) = trained.trainer.lr_scheduler_configs
    assert config.interval == "step"
    assert config.scheduler.get_last_lr() == pytest.approx([LR * lr_factor(STEPS, 2, STEPS, "cosine")], abs=1e-12)
    (optimizer,) = trained.trainer.optimizers
    assert sum(len(g["params"]) for g in optimizer.param_groups) == 28  # 14 adapted layers x (A, B)


def test_only_lora_weights_train(trained, tiny_model_dir):
    """Only the adapter trains; every base weight is bit-identical after the fit."""
    trainable = [n for n, p in trained.model.named_parameters() if p.requires_grad]
    assert len(trainable) == 28 and all("lora_" in n for n in trainable)
    assert trained.model.get_nb_trainable_parameters()[0] == LORA_PARAMS
    after = dict(trained.model.named_parameters())
    for name, before in trained.params_before.items():
        if "lora_" in name:
            continue
        assert torch.equal(before, after[name].detach()), name
    lora_b = [n for n in trainable if "lora_B" in n]
    assert all(not torch.equal(trained.params_before[n], after[n].detach()) for n in lora_b)
    base = trained.model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.equal(base, load_base(tiny_model_dir).model.layers[0].self_attn.q_proj.weight)


def test_module_trains_in_train_mode(tiny_model_dir, trained):
    """transformers loads in eval mode; the module switches the model (LoRA dropout too) to training."""
    base = load_base(tiny_model_dir)
    assert not base.training
    model = wrap_for_training(
        base, OmegaConf.merge(LORA, {"dropout": 0.1}), gradient_checkpointing=False, quantised=False
    )
    LoraFineTuner(model, OptimSettings(LR, 0.0, 0, "constant"))
    dropouts = [m for n, m in model.named_modules() if n.endswith("lora_dropout.default")]
    assert len(dropouts) == 14 and all(isinstance(d, torch.nn.Dropout) and d.training for d in dropouts)
    assert model.training
    assert trained.probe.modes == [(True, True)] * STEPS


def test_checkpoint_keeps_trainable_weights_only(trained, tiny_model_dir, tmp_path):
    """on_save_checkpoint drops frozen weights; a real checkpoint restores the trained adapter exactly."""
    full = trained.module.state_dict()
    trainable = {n for n, p in trained.module.named_parameters() if p.requires_grad}
    checkpoint = {"state_dict": dict(full), "epoch": 0}
    trained.module.on_save_checkpoint(checkpoint)
    assert set(checkpoint["state_dict"]) == trainable and len(trainable) == 28
    assert checkpoint["epoch"] == 0

    path = tmp_path / "last.ckpt"
    trained.trainer.save_checkpoint(path)
    saved = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    assert len(saved) == 28 and all("lora_" in k for k in saved)

    fresh = LoraFineTuner(wrapped(tiny_model_dir, seed=1), OptimSettings(LR, 0.0, 0, "constant"))
    assert trainable_fingerprint(fresh) != trainable_fingerprint(trained.module)
    missing, unexpected = fresh.load_state_dict(saved, strict=False)
    assert unexpected == [] and not any("lora_" in k for k in missing)
    assert trainable_fingerprint(fresh) == trainable_fingerprint(trained.module)


def test_saved_adapter_reproduces_the_logits(trained, tiny_model_dir, batch, tmp_path):
    """save_pretrained + attach_adapter on a fresh base gives the trained logits; merged within 1e-5."""
    trained.model.eval()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        expected = trained.model(**inputs).logits
        base_logits = load_base(tiny_model_dir).eval()(**inputs).logits
    assert not torch.allclose(expected, base_logits, atol=1e-3)  # the adapter matters
    trained.model.save_pretrained(tmp_path / "adapter")

    attached = attach_adapter(load_base(tiny_model_dir), tmp_path / "adapter", merge=False).eval()
    merged = attach_adapter(load_base(tiny_model_dir), tmp_path / "adapter", merge=True).eval()
    assert not hasattr(merged, "peft_config")
    with torch.no_grad():
        torch.testing.assert_close(attached(**inputs).logits, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(merged(**inputs).logits, expected, rtol=0, atol=1e-5)


def test_attach_adapter_refuses_another_base(trained, tmp_path):
    """An adapter saved from another shape of base does not load: a UserError, not a stack trace."""
    from transformers import LlamaConfig, LlamaForCausalLM

    trained.model.save_pretrained(tmp_path / "adapter")
    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=600,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    with pytest.raises(UserError, match="does not fit this base model"):
        attach_adapter(other, tmp_path / "adapter", merge=False)


def test_packed_training_forward_matches_separate_examples(tiny_model_dir, builder, tokenizer):
    """The module's forward on a packed batch (what training runs) gives each example the logits it gets
    alone: examples in one row must not attend to each other."""
    examples, _ = builder.build(ITEMS[:2])
    module = LoraFineTuner(wrapped(tiny_model_dir), OptimSettings(LR, 0.0, 0, "constant"))  # train mode, dropout 0
    (row,) = pack(examples, max_seq_len=512, seed=0)
    with torch.no_grad():
        packed = module(collate([row], tokenizer.pad_token_id)).logits[0]
        first = examples[0] if row.input_ids[: len(examples[0].input_ids)] == examples[0].input_ids else examples[1]
        second = examples[1] if first is examples[0] else examples[0]
        for example, start in ((first, 0), (second, len(first.input_ids))):
            alone = module(collate([example], tokenizer.pad_token_id)).logits[0]
            torch.testing.assert_close(packed[start : start + len(example.input_ids)], alone, rtol=0, atol=1e-5)


def test_check_target_modules(tiny_model_dir):
    """Unknown names fail before loading, listing the layer names there are; known names pass."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)

    def check(target_modules, modules_to_save=None):
        check_target_modules(
            config, OmegaConf.create({"target_modules": target_modules, "modules_to_save": modules_to_save}), "tiny"
        )

    with pytest.raises(UserError) as error:
        check(["q_proj", "qkv_proj"])
    message = str(error.value)
    assert "qkv_proj" in message and "q_proj" in message and "v_proj" in message and "all-linear" in message
    assert "q_proj, qkv_proj" not in message  # the known name is not reported as unknown
    check(["q_proj", "v_proj"])
    check(["gate_proj", "down_proj"], modules_to_save=["lm_head"])
    check("all-linear")
    check(r".*\.self_attn\.(q|v)_proj")  # a string is a regular expression
    with pytest.raises(UserError, match="matches no module"):
        check("q_proj")
    with pytest.raises(UserError, match="modules_to_save: score not in model"):
        check("all-linear", modules_to_save=["score"])


def test_check_seq_len(tiny_model_dir):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)
    check_seq_len(config, 4096, "tiny")
    with pytest.raises(UserError, match=r"4097.*4096"):
        check_seq_len(config, 4097, "tiny")


def test_trainable_fingerprint(tiny_model_dir, batch):
    """Equal for identically seeded wraps, blind to frozen weights, changed by one optimiser step."""
    first, second = wrapped(tiny_model_dir, seed=0), wrapped(tiny_model_dir, seed=0)
    assert trainable_fingerprint(first) == trainable_fingerprint(second)
    assert trainable_fingerprint(wrapped(tiny_model_dir, seed=1)) != trainable_fingerprint(first)
    before = trainable_fingerprint(second)
    with torch.no_grad():
        second.base_model.model.model.layers[0].mlp.up_proj.base_layer.weight.add_(1.0)
    assert trainable_fingerprint(second) == before

    first.train()
    optimizer = torch.optim.AdamW([p for p in first.parameters() if p.requires_grad], lr=1e-3)
    first(**model_inputs(batch)).loss.backward()
    optimizer.step()
    assert trainable_fingerprint(first) != before


def test_rank_agreement_single_process(trained):
    """On one process the gathered fingerprints are this rank's own, and they agree."""
    assert trained.agreement.fingerprints == [trainable_fingerprint(trained.module)[:15]]
    assert trained.agreement.agree


def test_generation_check(tiny_model_dir, builder, tokenizer):
    """Greedy answers for each item, scores in [0, 1]; answers scored against themselves give EM 1;
    batching (left padding) does not change the answers."""
    model = load_base(tiny_model_dir).eval()
    items = GenerationSet([i.id for i in ITEMS], [builder.prompt_ids(i) for i in ITEMS], [i.answers for i in ITEMS])

    def check(references, batch_size):
        gen = GenerationSet(items.ids, items.prompts, references)
        return GenerationCheck(gen, GenerateScorer(tokenizer, 6), tokenizer.pad_token_id, batch_size=batch_size)

    first = check(items.references, batch_size=2)
    metrics = first.run(model, torch.device("cpu"))
    assert set(metrics) == {"val/gen_em", "val/gen_f1"}
    assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert [o["id"] for o in first.outputs] == ["a", "b", "c"]
    assert [o["references"] for o in first.outputs] == [["2040"], ["12 percent"], ["64 percent"]]
    answers = [o["answer"] for o in first.outputs]
    assert any(answers)

    echo = check([(a,) for a in answers], batch_size=8)
    assert echo.run(model, torch.device("cpu")) == {"val/gen_em": 1.0, "val/gen_f1": 1.0}
    assert [o["answer"] for o in echo.outputs] == answers
    one_by_one = check(items.references, batch_size=1)
    one_by_one.run(model, torch.device("cpu"))
    assert [o["answer"] for o in one_by_one.outputs] == answers
