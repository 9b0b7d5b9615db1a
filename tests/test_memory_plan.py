"""dry_run=true and the memory plan: hand-computed numbers for a tiny shape, the activation terms against
the tensors autograd really keeps, a dry run that loads nothing, and a plan that does not fit naming its knob."""

import json
import subprocess
import sys

import pytest
from cli import run_cli

from esgexp.memory.plan import (
    RUNTIME_CPU,
    GiB,
    ServeSetup,
    Shape,
    TrainSetup,
    activation_bytes,
    knobs,
    layer_activation_bytes,
    lora_parameters,
    serve_fits,
    serve_knobs,
    serve_plan,
    train_plan,
)
from esgexp.models.architectures import ARCHITECTURES

# hidden 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 160, vocabulary 1000, untied head
TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
    "max_position_embeddings": 512,
}
CPU_FP32 = TrainSetup(batch_size=2, seq_len=16, checkpointing=False, weight_bytes=4, mixed=False, on_gpu=False, r=8)


def test_tiny_shape_plan_equals_hand_computed_values():
    shape = Shape.from_config(TINY)
    # per layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 + gate, up, down 64x160 each = 43,008; norms 2 x 64
    assert shape.parameters() == 2 * (43_008 + 128) + 2 * 64 * 1000 + 64 == 214_336
    # r x (in + out): q 8x128, k 8x96, v 8x96, o 8x128, gate/up/down 8x224 each = 8,960 per layer
    assert lora_parameters(shape, CPU_FP32) == 17_920
    # bytes per token of a general layer in fp32 with dropout on the CPU: two norms (256 + 4 each), SDPA
    # q/k/v/out 4 x (64 + 32 + 32 + 64) + log-sum-exp 4 x 4, SwiGLU 4 x 3 x 160, LoRA inputs and float
    # dropout masks 4 x (5 x 64 + 64 + 160) each, lora_A outputs 7 x 8 x 4
    assert layer_activation_bytes(shape, CPU_FP32) == 520 + 784 + 1920 + 2176 + 2176 + 224 == 7800
    # layer 0: no input norm, no q/k/v masks (its input needs no gradient)
    assert layer_activation_bytes(shape, CPU_FP32, first=True) == 260 + 784 + 1920 + 2176 + 1408 + 224 == 6772
    tokens = 32
    assert activation_bytes(shape, CPU_FP32, False) == (6772 + 7800 + 260 + 7800) * tokens  # + final norm, bwd set
    assert activation_bytes(shape, CPU_FP32, True) == (2 * 64 * 4 + 2 * 7800 + 260) * tokens  # layer inputs
    plan = train_plan(shape, CPU_FP32)
    expected = {
        "weights": 214_336 * 4,
        "LoRA parameters": 17_920 * 4,
        "gradients": 17_920 * 4,
        "AdamW moments": 17_920 * 8,
        "activations without checkpointing": 22_632 * tokens,
        "logits and loss": 12 * 1000 * tokens,
        "runtime": RUNTIME_CPU,
    }
    assert {name: nbytes for name, nbytes, _ in plan.lines} == expected
    assert plan.total == sum(expected.values())


@pytest.mark.parametrize(
    "transcribed, parameters", [("llama-3.1-8b", 8_030_261_248), ("qwen2.5-14b-instruct", 14_770_033_664)]
)
def test_transcribed_shapes_have_the_published_parameter_counts(transcribed, parameters):
    assert Shape.from_config(ARCHITECTURES[transcribed]).parameters() == parameters


def saved_tensor_bytes(model, ids, autocast: bool) -> int:
    """Bytes of the distinct tensors autograd keeps for backward (parameters, buffers and scalars left out)."""
    import torch

    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.enable_grad()
    with context:
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids, use_cache=False).loss
    seen, stack, visited = {}, [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                for t in value if isinstance(value, tuple) else (value,):
                    if isinstance(t, torch.Tensor) and t.numel() > 1 and t.untyped_storage().data_ptr() not in own:
                        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        stack += [f for f, _ in node.next_functions]
    return sum(seen.values())


@pytest.mark.parametrize("weights, mixed", [("float32", False), ("bfloat16", False), ("float32", True)])
def test_activation_terms_equal_what_autograd_keeps(weights, mixed):
    """A real peft LoRA (all-linear, dropout 0.05) on a tiny random Llama: the plan's per-layer bytes,
    final norm, fp32 log-softmax and (under autocast) 16-bit weight copies are exactly the saved tensors."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(LlamaConfig(**TINY), dtype=getattr(torch, weights))
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear"))
    model.train()
    batch, seq = 2, 16
    ids = torch.randint(0, 1000, (batch, seq))
    shape = Shape.from_config(TINY)
    setup = TrainSetup(batch, seq, False, 4 if weights == "float32" else 2, mixed, on_gpu=False, r=8)
    plan = {name: nbytes for name, nbytes, _ in train_plan(shape, setup).lines}
    layers = layer_activation_bytes(shape, setup, first=True) + layer_activation_bytes(shape, setup)
    tokens = batch * seq
    rope = 2 * seq * 16 * (4 if mixed or weights == "float32" else 2)  # cos and sin, shared by the layers
    expected = (layers + 64 * 4 + 4 + 4 * 1000 + 8) * tokens + rope + plan.get("autocast weight copies", 0)
    assert saved_tensor_bytes(model, ids, mixed) == expected


def test_a_plan_that_does_not_fit_names_the_knob():
    shape = Shape.from_config(TINY)
    setup = TrainSetup(8, 256, False, 4, False, on_gpu=True, r=8)
    budget = train_plan(shape, setup).total - 1
    found = dict(knobs(shape, setup, budget))
    assert "train.gradient_checkpointing=true" in found and found["train.gradient_checkpointing=true"] <= budget
    assert "train.batch_size=4 trainer.accumulate_grad_batches=2" in found
    assert knobs(shape, setup, 1.0) == []  # nothing fits in a byte
    qwen = Shape.from_config(ARCHITECTURES["qwen2.5-14b-instruct"])
    serving = ServeSetup(weight_bytes=2, on_gpu=True, vllm=True, utilization=0.9)
    assert not serve_fits(serve_plan(qwen, serving, 40 * GiB))  # 32k positions do not fit in 40 GiB at 0.9
    names = [name for name, _ in serve_knobs(qwen, serving, 40 * GiB)]
    assert names[0].startswith("backend.max_model_len=") and "backend.tensor_parallel_size=2 (and 2 GPUs)" in names


def dry_run(tmp_path, env, *overrides):
    """Run the CLI in a fresh interpreter; report whether torch or transformers got imported."""
    code = (
        "import sys; from esgexp.__main__ import cli; sys.argv = ['esgexp', *sys.argv[1:]]\n"
        "try:\n    cli()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        "print('IMPORTED', sorted(m for m in ('torch', 'transformers', 'lightning', 'mlflow') if m in sys.modules))\n"
        "sys.exit(code)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *overrides, f"paths.runs_dir={tmp_path}/runs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def plan(tmp_path, env, *overrides):
    """The same command in this process (tests/cli.py), where what gets imported is not the question."""
    return run_cli("esgexp", *overrides, f"paths.runs_dir={tmp_path}/runs", cwd=tmp_path, env=env)


def test_dry_run_exits_0_and_loads_nothing(tmp_path, clean_env):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY))
    (model_dir / "model.safetensors").write_bytes(b"not weights: loading this would fail")
    result = dry_run(
        tmp_path,
        clean_env,
        "experiment=finetune_sustainableqa",
        "model=local",
        f"model.path={model_dir}",
        "trainer=gpu",
        "trainer.gpu_memory_gb=40",
        "dry_run=true",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "IMPORTED []" in result.stdout
    assert f"shape: {model_dir / 'config.json'}" in result.stdout
    assert "device: 40.0 GiB (trainer.gpu_memory_gb) -> fits" in result.stdout
    (plan_file,) = (tmp_path / "runs").glob("**/memory_plan.json")
    plan = json.loads(plan_file.read_text())["plans"][0]
    assert plan["fits"] and plan["trainable_parameters"] == 35_840  # r=16 (the experiment's LoRA)
    assert not list((tmp_path / "runs").glob("**/mlflow.db")) and not (tmp_path / "mlruns").exists()


def test_dry_run_of_the_design_card_job_names_the_knob(tmp_path, clean_env):
    result = plan(
        tmp_path,
        clean_env,
        "experiment=finetune_sustainableqa",
        "model=llama-3.1-8b",
        "trainer=gpu",
        "trainer.gpu_memory_gb=40",
        "dry_run=true",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "device: 40.0 GiB (trainer.gpu_memory_gb) -> does not fit" in result.stdout
    assert "to fit: train.gradient_checkpointing=true" in result.stdout
    served = plan(
        tmp_path, clean_env, "model=qwen2.5-14b-instruct", "backend=vllm", "dry_run=true", "trainer.gpu_memory_gb=40"
    )
    assert served.returncode == 0, served.stderr[-3000:]
    assert "does not fit: KV cache for" in served.stdout and "to fit: backend.max_model_len=" in served.stdout


def test_dry_run_of_a_job_without_a_model_is_bad_input(tmp_path, clean_env):
    result = plan(tmp_path, clean_env, "experiment=climretrieve_retrieval", "dry_run=true")
    assert result.returncode == 2
    assert "error: dry_run=true plans the memory of a job that loads a model" in result.stderr


def test_a_server_esgexp_starts_is_planned_as_its_engine_with_its_own_knobs(tmp_path, clean_env):
    """backend/server=vllm: one engine on GPUs, split tensor_parallel ways, its flags read from extra_args;
    the ways to fit name the server's settings, not backend=vllm's."""
    args = (
        "backend=openai",
        "backend/server=vllm",
        "model=qwen2.5-14b-instruct",
        "dry_run=true",
        "trainer.gpu_memory_gb=40",
    )
    served = plan(tmp_path, clean_env, *args)
    assert served.returncode == 0, served.stderr[-3000:]
    assert "evaluation with a serving engine" in served.stdout and "does not fit: KV cache for" in served.stdout
    assert "to fit: backend.server.extra_args=[--max-model-len," in served.stdout
    assert "to fit: backend.server.tensor_parallel=2 (and 2 GPUs)" in served.stdout
    shorter = plan(tmp_path, clean_env, *args, "backend.server.extra_args=[--max-model-len,8192]")
    assert "-> fits: KV cache for" in shorter.stdout and "max_model_len needs 8,192" in shorter.stdout
    split = plan(tmp_path, clean_env, *args, "backend.server.tensor_parallel=2")
    assert "per device (tensor parallel 2)" in split.stdout and "-> fits" in split.stdout
